#!/usr/bin/env python3
"""Writes exporter-style test models of the kinds users bring, as test directories.

Three graphs written with onnx.helper in the style exporters produce (shape
arithmetic through Shape/Gather/Concat/Reshape, decomposed LayerNorm and
GELU, causal masks through Where), random weights with a fixed seed, and
onnxruntime's outputs as the reference:

- gpt2_decoder: token + position embeddings, 2 pre-LN decoder blocks with a
  causal mask, tanh-GELU, tied LM head; input int64[1, 16] token ids.
- unet_small: a 2-level U-Net (Conv/Relu, MaxPool, Resize nearest x2,
  Concat skip connections), input float[1, 3, 64, 64].
- yolo_head: a small backbone and a YOLO-style detection head (Conv, Sigmoid,
  Reshape/Transpose into [1, anchors*cells, 5 + classes], a decode with grid
  offsets), input float[1, 3, 64, 64].

    python3 tools/make_zoo_like.py OUT_DIR
then `onnx-codegen test OUT_DIR/* --atol 1e-4`.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(2026)


class G:
    def __init__(self):
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, shape, scale=None, value=None, dtype=np.float32):
        self.n += 1
        name = f"w{self.n}"
        if value is None:
            fan = np.prod(shape[1:]) if len(shape) > 1 else shape[0]
            value = rng.standard_normal(shape) * (scale if scale is not None else 1 / np.sqrt(fan))
        self.inits.append(numpy_helper.from_array(np.asarray(value).astype(dtype), name))
        return name

    def c(self, value, dtype=np.int64):
        return self.w(None, value=np.asarray(value), dtype=dtype)

    def op(self, op, inputs, outs=1, **attrs):
        self.n += 1
        names = [f"t{self.n}_{i}" for i in range(outs)]
        self.nodes.append(helper.make_node(op, inputs, names, name=f"{op}_{self.n}", **attrs))
        return names[0] if outs == 1 else names


def layer_norm(g, x, d):
    mean = g.op("ReduceMean", [x], axes=[-1], keepdims=1)
    xc = g.op("Sub", [x, mean])
    var = g.op("ReduceMean", [g.op("Pow", [xc, g.c(2.0, np.float32)])], axes=[-1], keepdims=1)
    den = g.op("Sqrt", [g.op("Add", [var, g.c(1e-5, np.float32)])])
    y = g.op("Div", [xc, den])
    return g.op("Add", [g.op("Mul", [y, g.w([d], value=1 + 0.1 * rng.standard_normal(d))]), g.w([d], 0.1)])


def gelu_tanh(g, x):
    cube = g.op("Pow", [x, g.c(3.0, np.float32)])
    inner = g.op("Add", [x, g.op("Mul", [cube, g.c(0.044715, np.float32)])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.c(np.sqrt(2 / np.pi), np.float32)])])
    return g.op("Mul", [g.op("Mul", [x, g.c(0.5, np.float32)]), g.op("Add", [t, g.c(1.0, np.float32)])])


def gpt2():
    g, d, h, t, vocab = G(), 64, 4, 16, 97
    hd = d // h
    ids = "input_ids"
    wte = g.w([vocab, d], 0.2)
    x = g.op("Gather", [wte, ids])
    shape = g.op("Shape", [ids])
    seq = g.op("Gather", [shape, g.c(1)], axis=0)
    pos = g.op("Range", [g.c(0), seq, g.c(1)])
    x = g.op("Add", [x, g.op("Gather", [g.w([32, d], 0.1), pos])])
    # Causal mask: 0 on and below the diagonal, -inf-like above.
    tri = g.op("Trilu", [g.op("ConstantOfShape", [g.op("Concat", [g.op("Unsqueeze", [seq, g.c([0])]), g.op("Unsqueeze", [seq, g.c([0])])], axis=0)],
                              value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))], upper=0)
    keep = g.op("Cast", [tri], to=TensorProto.BOOL)
    for _ in range(2):
        a = layer_norm(g, x, d)
        qkv = g.op("Add", [g.op("MatMul", [a, g.w([d, 3 * d])]), g.w([3 * d], 0.02)])
        q, k, v = g.op("Split", [qkv, g.c([d, d, d])], outs=3, axis=-1)
        heads = []
        for m in (q, k, v):
            r = g.op("Reshape", [m, g.op("Concat", [g.op("Shape", [m], end=2), g.c([h, hd])], axis=0)])
            heads.append(g.op("Transpose", [r], perm=[0, 2, 1, 3]))
        q, k, v = heads
        s = g.op("Div", [g.op("MatMul", [q, g.op("Transpose", [k], perm=[0, 1, 3, 2])]), g.c(np.sqrt(hd), np.float32)])
        s = g.op("Where", [keep, s, g.c(-1e9, np.float32)])
        p = g.op("Softmax", [s], axis=-1)
        o = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
        o = g.op("Reshape", [o, g.c([1, t, d])])
        x = g.op("Add", [x, g.op("Add", [g.op("MatMul", [o, g.w([d, d])]), g.w([d], 0.02)])])
        f = layer_norm(g, x, d)
        f = gelu_tanh(g, g.op("Add", [g.op("MatMul", [f, g.w([d, 4 * d])]), g.w([4 * d], 0.02)]))
        x = g.op("Add", [x, g.op("Add", [g.op("MatMul", [f, g.w([4 * d, d])]), g.w([d], 0.02)])])
    x = layer_norm(g, x, d)
    logits = g.op("MatMul", [x, g.op("Transpose", [wte], perm=[1, 0])])
    g.nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    inputs = [helper.make_tensor_value_info(ids, TensorProto.INT64, [1, t])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, t, vocab])]
    feed = {ids: rng.integers(0, vocab, (1, t)).astype(np.int64)}
    return g, inputs, outputs, feed


def conv(g, x, cin, cout, k=3, stride=1, act="Relu"):
    y = g.op("Conv", [x, g.w([cout, cin, k, k]), g.w([cout], 0.05)], kernel_shape=[k, k],
             strides=[stride, stride], pads=[k // 2] * 4)
    return g.op(act, [y]) if act else y


def unet():
    g = G()
    x = "image"
    e1 = conv(g, conv(g, x, 3, 8), 8, 8)
    e2 = conv(g, conv(g, g.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2]), 8, 16), 16, 16)
    b = conv(g, g.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2]), 16, 32)
    up2 = g.op("Resize", [b, "", g.c([1.0, 1.0, 2.0, 2.0], np.float32)], mode="nearest")
    d2 = conv(g, conv(g, g.op("Concat", [up2, e2], axis=1), 48, 16), 16, 16)
    up1 = g.op("Resize", [d2, "", g.c([1.0, 1.0, 2.0, 2.0], np.float32)], mode="linear",
               coordinate_transformation_mode="half_pixel")
    d1 = conv(g, g.op("Concat", [up1, e1], axis=1), 24, 8)
    y = conv(g, d1, 8, 2, k=1, act="Sigmoid")
    g.nodes.append(helper.make_node("Identity", [y], ["mask"]))
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 64, 64])]
    outputs = [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 2, 64, 64])]
    return g, inputs, outputs, {x: rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}


def yolo():
    g, anchors, classes = G(), 3, 4
    x = "image"
    f = conv(g, x, 3, 8, stride=2, act="Relu")
    f = conv(g, f, 8, 16, stride=2, act="Relu")
    f = conv(g, f, 16, 32, stride=2, act="Relu")  # [1, 32, 8, 8]
    p = conv(g, f, 32, anchors * (5 + classes), k=1, act=None)
    p = g.op("Reshape", [p, g.c([1, anchors, 5 + classes, 8, 8])])
    p = g.op("Transpose", [p], perm=[0, 1, 3, 4, 2])  # [1, A, 8, 8, 5+C]
    xy, wh, rest = g.op("Split", [p, g.c([2, 2, 1 + classes])], outs=3, axis=-1)
    gy, gx = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    grid = np.stack([gx, gy], -1).reshape(1, 1, 8, 8, 2)
    xy = g.op("Mul", [g.op("Add", [g.op("Sigmoid", [xy]), g.c(grid, np.float32)]), g.c(8.0, np.float32)])
    anchor_wh = rng.uniform(4, 24, (1, anchors, 1, 1, 2))
    wh = g.op("Mul", [g.op("Exp", [wh]), g.c(anchor_wh, np.float32)])
    y = g.op("Concat", [xy, wh, g.op("Sigmoid", [rest])], axis=-1)
    y = g.op("Reshape", [y, g.c([1, -1, 5 + classes])])
    g.nodes.append(helper.make_node("Identity", [y], ["detections"]))
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, 64, 64])]
    outputs = [helper.make_tensor_value_info("detections", TensorProto.FLOAT, [1, anchors * 64, 5 + classes])]
    return g, inputs, outputs, {x: rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}


def write(out, name, build):
    g, inputs, outputs, feed = build()
    graph = helper.make_graph(g.nodes, name, inputs, outputs, initializer=g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="onnx-codegen tools/make_zoo_like.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results = sess.run(None, feed)
    for i, (k, v) in enumerate(feed.items()):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(outputs, results)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(v, o.name).SerializeToString())
    print(f"{d}: {len(g.nodes)} nodes")


def main():
    out = sys.argv[1]
    write(out, "gpt2_decoder", gpt2)
    write(out, "unet_small", unet)
    write(out, "yolo_head", yolo)


if __name__ == "__main__":
    main()
