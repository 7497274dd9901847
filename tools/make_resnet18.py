#!/usr/bin/env python3
"""Writes a ResNet-18 (ImageNet layout, random weights) as a test directory.

The big-model build figures of the README come from this model: 11.7 M
parameters, about 47 MB of float32 weights, the size class of a real
ResNet-18. Weights are random with a fixed seed (the point is the size and
the graph, not the accuracy); BatchNormalization nodes are kept as exported
models have them. onnxruntime computes the reference output.

    python3 tools/make_resnet18.py OUT_DIR
writes OUT_DIR/model.onnx and OUT_DIR/test_data_set_0/{input_0,output_0}.pb.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(18)
nodes, inits = [], []


def weight(name, shape, scale):
    inits.append(numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name))
    return name


def conv_bn(x, name, cin, cout, k, stride, relu):
    w = weight(f"{name}.w", (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
    nodes.append(helper.make_node("Conv", [x, w], [f"{name}.conv"], name=f"{name}.conv",
                                  kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4))
    stats = {
        "g": 1.0 + 0.1 * rng.standard_normal(cout),  # scale near 1
        "b": 0.1 * rng.standard_normal(cout),
        "m": 0.1 * rng.standard_normal(cout),
        "v": 1.0 + rng.random(cout),  # variance in [1, 2)
    }
    for p, values in stats.items():
        inits.append(numpy_helper.from_array(values.astype(np.float32), f"{name}.{p}"))
    nodes.append(helper.make_node("BatchNormalization", [f"{name}.conv"] + [f"{name}.{p}" for p in stats],
                                  [f"{name}.bn"], name=f"{name}.bn"))
    if not relu:
        return f"{name}.bn"
    nodes.append(helper.make_node("Relu", [f"{name}.bn"], [f"{name}.relu"], name=f"{name}.relu"))
    return f"{name}.relu"


def block(x, name, cin, cout, stride):
    y = conv_bn(x, f"{name}.a", cin, cout, 3, stride, True)
    y = conv_bn(y, f"{name}.b", cout, cout, 3, 1, False)
    skip = x if stride == 1 and cin == cout else conv_bn(x, f"{name}.down", cin, cout, 1, stride, False)
    nodes.append(helper.make_node("Add", [y, skip], [f"{name}.add"], name=f"{name}.add"))
    nodes.append(helper.make_node("Relu", [f"{name}.add"], [f"{name}.out"], name=f"{name}.out"))
    return f"{name}.out"


def main():
    out = sys.argv[1]
    x = conv_bn("input", "stem", 3, 64, 7, 2, True)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], name="pool", kernel_shape=[3, 3],
                                  strides=[2, 2], pads=[1, 1, 1, 1]))
    x, cin = "pool", 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        for i in range(2):
            x = block(x, f"layer{stage + 1}.{i}", cin, cout, 2 if (i == 0 and stage > 0) else 1)
            cin = cout
    nodes.append(helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"))
    fc_w = weight("fc.w", (1000, 512), np.sqrt(1.0 / 512))
    fc_b = weight("fc.b", (1000,), 0.01)
    nodes.append(helper.make_node("Gemm", ["flat", fc_w, fc_b], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(
        nodes, "resnet18",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 1000])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="onnx-codegen tools/make_resnet18.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.join(out, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    data = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    result = sess.run(None, {"input": data})[0]
    for name, arr, tname in [("input_0", data, "input"), ("output_0", result, "logits")]:
        with open(os.path.join(out, "test_data_set_0", f"{name}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(arr, tname).SerializeToString())
    params = sum(int(np.prod(t.dims)) for t in inits)
    print(f"{out}/model.onnx: {params} parameters, {os.path.getsize(os.path.join(out, 'model.onnx'))} bytes")


if __name__ == "__main__":
    main()
