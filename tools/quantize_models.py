#!/usr/bin/env python3
"""Quantized versions of ../shared/models, made with onnxruntime's own tools, in the model folder
layout `onnx-codegen test` and the bench read: OUT/<model>_<kind>/model.onnx and
OUT/<model>_<kind>/test_data_set_0/{input,output}_K.pb.

    python3 tools/quantize_models.py [--models DIR] [--out DIR] [--kinds qdq,qop,dyn] [NAME...]
    target/release/onnx-codegen test OUT/*_qdq OUT/*_qop --atol 0.02
    target/release/onnx-codegen test OUT/*_dyn --atol 0.05

Kinds (what a user of onnxruntime.quantization gets):

qdq:  static quantization, QDQ format: int8 activations and int8 weights (per channel), int32
      biases, calibrated by MinMax on CALIB inputs (the model's test input, then inputs drawn
      from a normal distribution with the test input's mean and deviation; fixed seed).
qop:  the same in the QOperator format (QLinearConv, QLinearMatMul, com.microsoft QLinearAdd,
      QLinearAveragePool, QGemm, ...): uint8 activations, int8 weights, as onnxruntime's
      defaults for that format are.
dyn:  dynamic quantization (weights int8 at rest, activations quantized at run time:
      DynamicQuantizeLinear + MatMulInteger / ConvInteger, com.microsoft DynamicQuantizeLSTM),
      for the models with MatMul, Gemm or LSTM.

Reference outputs come from onnxruntime (CPU provider, all graph optimisations, so its int8
kernels run), on the model's own test input. On an x86-64 core without VNNI (AVX2-only, or
AVX-512 without VNNI) onnxruntime's u8 x s8 kernels multiply with `vpmaddubsw`, whose 16-bit
pair sums saturate (its quantization guide's reason for `reduce_range`): the results are not
the model's. There the reference session runs under `qemu-x86_64 -cpu Westmere` (SSE4.2, whose
kernels widen to 16 bits first and are exact); without qemu-user the script stops and says so.
On VWW (Zen 3) the saturating kernels give 0.3059 for the first output; the exact ones and the
float QDQ reading both give 0.2667. The models are input to the integer-inference
work; nothing in the project needs Python to build. Needs `pip install onnx onnxruntime numpy`.
"""
import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper as nh
import onnxruntime as ort
from onnxruntime import quantization as q

HERE = os.path.dirname(os.path.abspath(__file__))
CALIB = 32
SEED = 2026


def load_inputs(folder, model):
    """The model's test inputs by name, from test_data_set_0/input_K.pb."""
    data = os.path.join(folder, "test_data_set_0")
    feeds = {}
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    for k, name in enumerate(graph_inputs):
        t = onnx.TensorProto()
        with open(os.path.join(data, f"input_{k}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[name] = nh.to_array(t)
    return feeds


class Reader(q.CalibrationDataReader):
    """The test input, then CALIB - 1 random inputs with its statistics."""

    def __init__(self, feeds):
        rng = np.random.default_rng(SEED)
        self.batches = [feeds]
        for _ in range(CALIB - 1):
            b = {}
            for name, x in feeds.items():
                if np.issubdtype(x.dtype, np.floating):
                    m, s = float(x.mean()), float(x.std()) or 1.0
                    b[name] = rng.normal(m, s, x.shape).astype(x.dtype)
                else:
                    b[name] = x
            self.batches.append(b)
        self.it = iter(self.batches)

    def get_next(self):
        return next(self.it, None)

    def rewind(self):
        self.it = iter(self.batches)


def has_ops(model, ops):
    return any(n.op_type in ops for n in model.graph.node)


def cpu_flags():
    """The x86 CPU's feature flags (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def saturating_host():
    """Whether onnxruntime's int8 kernels on this core use `vpmaddubsw` (x86-64 without VNNI)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    flags = cpu_flags()
    return "avx2" in flags and not ({"avx512_vnni", "avx_vnni"} & flags)


def run_session(model_path, feeds):
    """onnxruntime's outputs (one thread, every graph optimisation) as {name: array}."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_path, so, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = sess.run(None, {n: feeds[n] for n in names})
    return {o.name: np.asarray(y) for o, y in zip(sess.get_outputs(), outs)}


def reference_outputs(model_path, feeds, tmp):
    """The outputs the reference is made of: in this process where onnxruntime's int8 kernels
    are exact, else in a child under qemu-user on a core without AVX2 (see the module's doc)."""
    if not saturating_host():
        return run_session(model_path, feeds)
    qemu = shutil.which("qemu-x86_64")
    if qemu is None:
        sys.exit("this core has AVX2 but no VNNI, where onnxruntime's int8 kernels saturate; "
                 "the exact reference needs qemu-x86_64 (Debian: apt install qemu-user)")
    fin, fout = os.path.join(tmp, "feeds.npz"), os.path.join(tmp, "outs.npz")
    np.savez(fin, **feeds)
    subprocess.run([qemu, "-cpu", "Westmere", sys.executable, os.path.abspath(__file__),
                    "--run-session", model_path, fin, fout], check=True)
    with np.load(fout) as z:
        return {k: z[k] for k in z.files}


def write_case(out, model_path, feeds, tmp):
    """OUT/model.onnx, the inputs, and onnxruntime's outputs on them."""
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    shutil.copy(model_path, os.path.join(out, "model.onnx"))
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    names = [i.name for i in sess.get_inputs()]
    outs = reference_outputs(model_path, {n: feeds[n] for n in names}, tmp)
    for k, n in enumerate(names):
        with open(os.path.join(out, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(nh.from_array(feeds[n], n).SerializeToString())
    for k, o in enumerate(sess.get_outputs()):
        with open(os.path.join(out, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(nh.from_array(outs[o.name], o.name).SerializeToString())


def quantize(name, folder, out_root, kinds, tmp):
    src = os.path.join(folder, "model.onnx")
    model = onnx.load(src)
    feeds = load_inputs(folder, model)
    pre = os.path.join(tmp, f"{name}_pre.onnx")
    try:
        q.quant_pre_process(src, pre, skip_symbolic_shape=True)
    except Exception as e:  # keep going: quantization works on the model as given too
        print(f"{name}: pre-processing failed ({e}); quantizing the model as given",
              file=sys.stderr)
        shutil.copy(src, pre)
    made = []
    for kind in kinds:
        dst = os.path.join(tmp, f"{name}_{kind}.onnx")
        try:
            if kind in ("qdq", "qop"):
                qdq = kind == "qdq"
                q.quantize_static(
                    pre, dst, Reader(feeds),
                    quant_format=q.QuantFormat.QDQ if qdq else q.QuantFormat.QOperator,
                    per_channel=True,
                    activation_type=q.QuantType.QInt8 if qdq else q.QuantType.QUInt8,
                    weight_type=q.QuantType.QInt8,
                    calibrate_method=q.CalibrationMethod.MinMax,
                )
            elif kind == "dyn":
                if not has_ops(model, {"MatMul", "Gemm", "LSTM"}):
                    continue
                q.quantize_dynamic(pre, dst, weight_type=q.QuantType.QInt8)
            else:
                raise ValueError(f"unknown kind {kind}")
            write_case(os.path.join(out_root, f"{name}_{kind}"), dst, feeds, tmp)
            made.append(f"{name}_{kind}")
        except Exception as e:
            print(f"{name}_{kind}: FAILED: {e}", file=sys.stderr)
    return made


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--run-session":  # the child reference_outputs starts
        _, _, model_path, fin, fout = sys.argv
        with np.load(fin) as z:
            feeds = {k: z[k] for k in z.files}
        np.savez(fout, **run_session(model_path, feeds))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(HERE, "..", "..", "shared", "models"))
    ap.add_argument("--out", default="/tmp/quant-models")
    ap.add_argument("--kinds", default="qdq,qop,dyn")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    kinds = a.kinds.split(",")
    names = a.names or sorted(
        d for d in os.listdir(a.models)
        if os.path.isfile(os.path.join(a.models, d, "model.onnx")) and not d.endswith("_dynamo"))
    made = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in names:
            made += quantize(n, os.path.join(a.models, n), a.out, kinds, tmp)
    print(f"{len(made)} models in {a.out}: {' '.join(made)}")


if __name__ == "__main__":
    main()
