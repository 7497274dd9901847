#!/usr/bin/env python3
"""Counts the results of `onnx-codegen test --json r.json` over generated
graphs: passed, failed, and unsupported grouped by reason (numbers and value
names stripped so that equal reasons group together).

    python3 tools/difftest/summarize.py r.json
"""

import collections
import json
import re
import sys


def reason_key(reason):
    reason = re.sub(r"'[^']*'", "'_'", reason)
    reason = re.sub(r"\d+", "N", reason)
    return reason[:140]


def main():
    outcomes = json.load(open(sys.argv[1]))
    status = collections.Counter(o["status"] for o in outcomes)
    print(f"graphs: {len(outcomes)}")
    for k, v in sorted(status.items()):
        print(f"  {k}: {v}")
    for kind in ("Fail", "Unsupported"):
        reasons = collections.Counter(reason_key(o["reason"]) for o in outcomes if o["status"].lower() == kind.lower())
        if reasons:
            print(f"{kind} by reason:")
            for r, n in reasons.most_common():
                print(f"  {n:5d}  {r}")
    fails = [o["name"] for o in outcomes if o["status"].lower() == "fail"]
    if fails:
        print("failed:", " ".join(fails))


if __name__ == "__main__":
    main()
