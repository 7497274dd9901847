#!/usr/bin/env python3
"""Where the generated code first parts from onnxruntime, value by value.

    python3 tools/first_divergence.py MODEL_DIR [--work DIR] [--cli PATH] [--top N]

MODEL_DIR is in the ONNX test layout (model.onnx, test_data_set_0/input_K.pb).
The script writes DIR/exposed: the model with every value a node computes made a
graph output, and onnxruntime's value of each (CPU provider, every graph
optimisation, one thread) as the reference. It runs `onnx-codegen test` on it,
saving what the generated code computed, and prints, in graph order, the
values that differ: the operator that computed each, its type, the largest
difference and the share of elements that differ (integers: any difference;
floats: more than 1e-4 of the value's range). The first lines name the step
to look at.

Exposing a value keeps onnxruntime from fusing the node that computes it: in
the QOperator format (QLinearConv, QLinearAdd, ...) the fused steps are the
model's own nodes and the comparison is exact; in the QDQ format onnxruntime
then runs the float operators between DequantizeLinear and QuantizeLinear
instead of its fused integer kernels, so there the comparison shows where the
float reading differs, not where the fused model does.

Needs `pip install onnx onnxruntime numpy`; the project itself needs no Python.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def expose(src, dst):
    """Writes dst (model and data set) with every computed value an output."""
    m = onnx.load(os.path.join(src, "model.onnx"))
    outs = [o.name for o in m.graph.output]
    order = [o for n in m.graph.node for o in n.output if o and o not in outs]
    probe = onnx.ModelProto()
    probe.CopyFrom(m)
    for o in order:
        probe.graph.output.append(onnx.ValueInfoProto(name=o))
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(probe.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {i.name: load(os.path.join(src, "test_data_set_0", f"input_{k}.pb"))
             for k, i in enumerate(sess.get_inputs())}
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    vals = {n: np.asarray(v) for n, v in got.items()
            if np.asarray(v).dtype.kind in "iuf" and np.asarray(v).size > 0}
    out = onnx.ModelProto()
    out.CopyFrom(m)
    del out.graph.output[:]
    out.graph.output.extend(m.graph.output)
    for o in order:
        if o in vals:
            v = vals[o]
            out.graph.output.append(onnx.helper.make_tensor_value_info(
                o, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
    os.makedirs(os.path.join(dst, "test_data_set_0"), exist_ok=True)
    onnx.save(out, os.path.join(dst, "model.onnx"))
    for k, i in enumerate(sess.get_inputs()):
        with open(os.path.join(dst, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(nh.from_array(feeds[i.name], i.name).SerializeToString())
    for k, o in enumerate(out.graph.output):
        with open(os.path.join(dst, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(nh.from_array(np.asarray(got[o.name]), o.name).SerializeToString())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--work", default="/tmp/first-divergence")
    ap.add_argument("--cli", default=os.path.join(HERE, "..", "target", "release", "onnx-codegen"))
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    exposed = os.path.join(a.work, "exposed")
    m = expose(a.model_dir, exposed)
    saved = os.path.join(a.work, "saved")
    r = subprocess.run([a.cli, "test", exposed, "--atol", "0", "--rtol", "0", "--work-dir",
                        os.path.join(a.work, "build"), "--save-outputs", saved],
                       capture_output=True, text=True)
    if not os.path.isdir(os.path.join(saved, "exposed")):
        sys.exit(f"onnx-codegen test saved nothing:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    producer = {o: n for n in m.graph.node for o in n.output}
    shown = 0
    for k, out in enumerate(m.graph.output):
        want = load(os.path.join(exposed, "test_data_set_0", f"output_{k}.pb"))
        got = load(os.path.join(saved, "exposed", "test_data_set_0", f"output_{k}.pb"))
        if want.shape != got.shape:
            print(f"{k:5d} {out.name}: shape {got.shape}, onnxruntime {want.shape}")
            continue
        diff = np.abs(want.astype(np.float64) - got.astype(np.float64))
        tol = 0.0 if want.dtype.kind in "iu" else 1e-4 * (1.0 + float(np.abs(want).max()))
        share = float(np.mean(diff > tol))
        if share > 0:
            n = producer.get(out.name)
            op = n.op_type if n is not None else "(graph output)"
            print(f"{k:5d} {op:24s} {out.name[:48]:48s} {str(want.dtype):8s} "
                  f"max {diff.max():.4g}  {share * 100:.2f}% differ")
            shown += 1
            if shown >= a.top:
                break
    if shown == 0:
        print("every exposed value matches onnxruntime")


if __name__ == "__main__":
    main()
