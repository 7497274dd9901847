#!/usr/bin/env python3
"""Checks the outputs `onnx-codegen test --save-outputs DIR` wrote against the
reference outputs of the ONNX backend tests, reading both with onnx's own
readers (not the project's), so a pass the harness reports is confirmed
independently of its comparison.

For each test directory (`model.onnx`, `test_data_set_K/output_J.pb`), the
saved data set `DIR/<test>/test_data_set_K/` must hold exactly one
`output_J.pb` per graph output, parsed as the message the graph output's
type says (TensorProto, SequenceProto, OptionalProto, MapProto), named as
the graph output, and equal to the reference: same kind, element type and
shape, floats within `|got - want| <= atol + rtol * |want|` (NaN equals
NaN), everything else exactly.

    python3 tools/check_saved_outputs.py --saved DIR TEST_DIR... \
        [--rtol 1e-3] [--atol 1e-7] [--passes RUNNER_OUTPUT]

Prints `CONFIRMED <test>`, `MISMATCH <test>: why` or `MISSING <test>` per
test, then a summary line. With `--passes`, the `PASS <test>` lines of the
runner's output are checked too: every test the runner passed must be
confirmed here (the exit code is 1 otherwise).
"""

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def output_kind(type_proto):
    """The message an output of this declared type is stored as."""
    which = type_proto.WhichOneof("value")
    return {
        "tensor_type": "tensor",
        "sequence_type": "sequence",
        "optional_type": "optional",
        "map_type": "map",
        "sparse_tensor_type": "sparse",
    }.get(which, "tensor")


def read_value(path, kind):
    """The file as a Python value, through onnx's readers, and its name."""
    with open(path, "rb") as f:
        data = f.read()
    if kind == "tensor":
        proto = onnx.TensorProto()
        proto.ParseFromString(data)
        return numpy_helper.to_array(proto), proto.name
    if kind == "sequence":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto), proto.name
    if kind == "optional":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto), proto.name
    if kind == "map":
        proto = onnx.MapProto()
        proto.ParseFromString(data)
        return numpy_helper.to_dict(proto), proto.name
    raise ValueError(f"{kind} outputs are not read by this check")


def compare(got, want, rtol, atol, where="value"):
    """None when `got` equals `want` within the tolerance, else why not."""
    if want is None or got is None:
        if (want is None) != (got is None):
            return f"{where}: got {'nothing' if got is None else 'a value'}, expected {'nothing' if want is None else 'a value'}"
        return None
    if isinstance(want, list):
        if not isinstance(got, list):
            return f"{where}: got {type(got).__name__}, expected a sequence"
        if len(got) != len(want):
            return f"{where}: {len(got)} elements, expected {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            why = compare(g, w, rtol, atol, f"{where}[{i}]")
            if why:
                return why
        return None
    if isinstance(want, dict):
        if not isinstance(got, dict) or sorted(got) != sorted(want):
            return f"{where}: the keys differ"
        for k in want:
            why = compare(got[k], want[k], rtol, atol, f"{where}[{k!r}]")
            if why:
                return why
        return None
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"{where}: element type {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"{where}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind == "f" or "float" in want.dtype.name:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            ok = (np.isnan(g) & np.isnan(w)) | (g == w) | (np.abs(g - w) <= atol + rtol * np.abs(w))
        if not ok.all():
            i = int(np.flatnonzero(~ok.ravel())[0])
            return (f"{where}: {int((~ok).sum())} of {ok.size} values differ; first at index {i}: "
                    f"got {g.ravel()[i]!r}, expected {w.ravel()[i]!r}")
        return None
    same = [a == b for a, b in zip(got.ravel().tolist(), want.ravel().tolist())]
    if not all(same):
        i = same.index(False)
        return f"{where}: values differ; first at index {i}: got {got.ravel()[i]!r}, expected {want.ravel()[i]!r}"
    return None


def check_test(test_dir, saved_root, rtol, atol):
    """('confirmed' | 'mismatch' | 'missing', why)."""
    name = os.path.basename(os.path.normpath(test_dir))
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    outputs = [(o.name, output_kind(o.type)) for o in model.graph.output]
    saved = os.path.join(saved_root, name)
    if not os.path.isdir(saved):
        return "missing", "no saved outputs"
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if not sets:
        return "mismatch", "the test has no data set"
    for s in sets:
        ref_dir, got_dir = os.path.join(test_dir, s), os.path.join(saved, s)
        if not os.path.isdir(got_dir):
            return "missing", f"{s} was not saved"
        files = sorted(f for f in os.listdir(got_dir) if f.endswith(".pb"))
        expected = [f"output_{k}.pb" for k in range(len(outputs))]
        if files != sorted(expected):
            return "mismatch", f"{s}: saved {files}, the graph has {len(outputs)} outputs"
        for k, (out_name, kind) in enumerate(outputs):
            ref = os.path.join(ref_dir, f"output_{k}.pb")
            if not os.path.isfile(ref):
                return "mismatch", f"{s}: the test has no {os.path.basename(ref)}"
            try:
                want, _ = read_value(ref, kind)
                got, got_name = read_value(os.path.join(got_dir, expected[k]), kind)
            except Exception as e:  # a file onnx's parsers reject
                return "mismatch", f"{s} output {k}: {e}"
            if got_name != out_name:
                return "mismatch", f"{s} output {k} is named {got_name!r}, the graph output {out_name!r}"
            why = compare(got, want, rtol, atol, f"{s} output {k} ({kind})")
            if why:
                return "mismatch", why
    return "confirmed", ""


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tests", nargs="+", help="test directories (model.onnx, test_data_set_*)")
    ap.add_argument("--saved", required=True, help="the directory given to --save-outputs")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-7)
    ap.add_argument("--passes", help="the runner's output: its PASS lines must all be confirmed")
    args = ap.parse_args()
    counts = {"confirmed": 0, "mismatch": 0, "missing": 0}
    status = {}
    for t in args.tests:
        if not os.path.isfile(os.path.join(t, "model.onnx")):
            continue
        name = os.path.basename(os.path.normpath(t))
        try:
            st, why = check_test(t, args.saved, args.rtol, args.atol)
        except Exception as e:
            st, why = "mismatch", f"cannot check: {e}"
        counts[st] += 1
        status[name] = st
        print(f"{st.upper()} {name}" + (f": {why}" if why else ""))
    line = f"{counts['confirmed']} confirmed, {counts['mismatch']} mismatched, {counts['missing']} missing"
    code = 0
    if args.passes:
        with open(args.passes) as f:
            passed = [l.split()[1] for l in f if l.startswith("PASS ")]
        unconfirmed = [p for p in passed if status.get(p) != "confirmed"]
        for p in unconfirmed:
            print(f"UNCONFIRMED PASS {p}: {status.get(p, 'not checked')}")
        line += f"; {len(passed) - len(unconfirmed)} of the runner's {len(passed)} passes confirmed"
        code = 1 if unconfirmed else 0
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
