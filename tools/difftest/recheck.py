#!/usr/bin/env python3
"""Second opinion on the graphs that failed against onnxruntime: writes each
failed graph again with the ONNX reference evaluator's outputs
(`onnx.reference.ReferenceEvaluator`) as the expected values, so that
`onnx-codegen test` on the copies shows which side the reference takes.

    python3 tools/difftest/recheck.py RESULTS.json CASES_DIR OUT_DIR
    onnx-codegen test OUT_DIR/* --json recheck.json

A graph that fails against onnxruntime and passes against the reference
evaluator is a place where the two references disagree; one that fails
against both needs a look (or a documented tolerance).
"""

import glob
import json
import os
import sys
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from gen import write_case


def main():
    results, cases, out = sys.argv[1], sys.argv[2], sys.argv[3]
    failed = [o["name"] for o in json.load(open(results)) if o["status"].lower() != "pass"]
    written = 0
    for name in failed:
        src = os.path.join(cases, name)
        model = onnx.load(os.path.join(src, "model.onnx"))
        feeds = {}
        for i, f in enumerate(sorted(glob.glob(os.path.join(src, "test_data_set_0", "input_*.pb")))):
            feeds[model.graph.input[i].name] = numpy_helper.to_array(onnx.load_tensor(f))
        outs = [o.name for o in model.graph.output]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results_ref = ReferenceEvaluator(model).run(outs, feeds)
        except Exception as e:  # the evaluator refuses the graph too
            print(f"{name}: the reference evaluator fails: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        write_case(os.path.join(out, name), model, feeds, outs, [np.asarray(r) for r in results_ref])
        written += 1
    print(f"wrote {written} of {len(failed)} failed graphs with the reference evaluator's outputs to {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
