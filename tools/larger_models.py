#!/usr/bin/env python3
"""Builds larger models than ../shared/models, like the held-back ones issue #6 is accepted on
(random weights, fixed seeds), in the model folder layout the bench and `onnx-codegen test` read:
OUT/<name>/model.onnx and OUT/<name>/test_data_set_0/{input,output}_K.pb.

    python3 tools/larger_models.py [--out DIR] [NAME...]     # default DIR /tmp/larger-models
    target/release/onnx-codegen test DIR/* --atol 1e-4
    ONNX_CODEGEN_MODELS=DIR cargo build --release -p onnx-codegen-bench
    python3 tools/bench_table.py --bench target/release/onnx-codegen-bench --models DIR

cnn_224:    opset 13, image [1,3,224,224]: a stride-2 3x3 stem, six depthwise-separable blocks
            (3x3 depthwise + 1x1, 32 -> 512 channels, BatchNormalization + Relu after each
            convolution), a residual block of two 3x3 512 -> 512 convolutions on 14x14, global
            average pooling and a 1000-way Gemm.

mobilenet_v2: opset 13, image [1,3,224,224]: MobileNet-V2 (width 1.0): a stride-2 3x3 stem, 17
            inverted-residual blocks (1x1 expand x6, 3x3 depthwise, 1x1 project, residual Add
            where shapes allow), BatchNormalization + ReLU6 (Clip 0..6) as exported, a 1x1 conv to
            1280, global average pooling and a 1000-way Gemm.

efficientnet_b0: opset 13, image [1,3,224,224]: EfficientNet-B0's layout: 16 MBConv blocks (1x1
            expand, 3x3 or 5x5 depthwise, squeeze-and-excitation through GlobalAveragePool, two 1x1
            convs and a Sigmoid gate, 1x1 project, residual Add), SiLU as exported (x * Sigmoid(x)).

resnet50:   opset 13, image [1,3,224,224]: ResNet-50 v1.5 (7x7 stem, max pool, 16 bottleneck blocks
            1x1 -> 3x3 (stride here) -> 1x1 x4, projection shortcuts), BatchNormalization + Relu.

bert_small: opset 17, seq 128, d 256, 4 heads, ffn 1024, 4 layers, LayerNormalization, Erf GELU,
            padding mask (Where), input float embeddings [1,128,256].
gpt_small:  opset 14, seq 128, d 256, 4 heads, ffn 1024, 4 layers, decomposed LayerNorm
            (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add), tanh GELU, causal mask (Where).
vit_tiny:   opset 17, image [1,3,224,224], patch Conv 16x16 stride 16 -> 196 tokens + cls (197),
            d 192, 3 heads, ffn 768, 4 layers, LayerNormalization, Erf GELU.
squeezenet: opset 13, SqueezeNet 1.1: Fire modules (1x1 squeeze, 1x1 and 3x3 expand, Concat),
            ceil-mode max pools, a 1x1 classifier conv, global average pooling.
googlenet:  opset 13, Inception v1 blocks (1x1; 1x1 -> 3x3 twice; 3x3 stride-1 max pool -> 1x1;
            Concat), ceil-mode stride-2 pools, a 7x7 stem, BatchNormalization folded into biases.
densenet:   opset 13, DenseNet-121 style, narrowed (growth 32, blocks of 6, 8, 8, 4): pre-activation
            BatchNormalization + Relu, 1x1 bottlenecks, a Concat per layer, 2x2 average pools.
mobilenet_v3: opset 14, MobileNet-V3-Small's layout: HardSwish, squeeze-and-excitation gated by
            HardSigmoid, 3x3 and 5x5 depthwise convs.
audio_encoder: opset 17, wav2vec2-style: seven 1-D convs over [1,1,16000] (kernels 10/3/2,
            strides 5/2, 256 channels, Erf GELU), then 2 transformer layers (d 256) over 49 frames.
convnext:   opset 17, ConvNeXt-T's layout shrunk (depths 2, 2, 4, 2), 7x7 depthwise, LayerNorm, Gelu.
unet:       opset 13, image [1,3,128,128]: a U-Net (32..256 channels, double 3x3 conv + BN + Relu,
            max pools down, ConvTranspose 2x2/2 up + skip Concat), 2 classes at full size.
convt_decoder: opset 13, latent [1,256,8,8] -> [1,3,128,128]: ConvTranspose 3x3/2 (pads 1,
            output_padding 1) and 4x4/2 (pads 1) alternating, BN + Relu, Tanh.
vocoder_1d: opset 13, mel [1,80,64] -> [1,1,16384]: HiFi-GAN-style 1-D ConvTranspose up-sampling
            (16/8, 16/8, 4/2, 4/2), LeakyRelu, residual convs.
yolo_neck:  opset 13, image [1,3,320,320]: YOLOv5/v8-style backbone and PAN neck with SiLU, Resize
            nearest x2 (asymmetric, floor) + Concat, three 255-channel heads.
seg_head:   opset 13, image [1,3,256,256]: DeepLab-V3+-style: dilated ASPP, Resize linear x4
            (pytorch_half_pixel), x2 (half_pixel, asymmetric), final x4 (align_corners).
Reference outputs by onnxruntime with graph optimisations off; onnxruntime's single-thread
latency (all optimisations) is printed. Needs `pip install onnx onnxruntime numpy`.
"""
import argparse
import os
import sys
import time
import numpy as np
import onnx
from onnx import helper as h, numpy_helper as nh, TensorProto as TP



class G:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def const(self, arr, p="c"):
        nm = self.name(p)
        self.inits.append(nh.from_array(np.asarray(arr), nm))
        return nm

    def w(self, shape, scale=None, p="w"):
        if scale is None:
            scale = 1.0 / np.sqrt(shape[0])
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), p)

    def op(self, t, ins, n_out=1, **attrs):
        outs = [self.name(t.lower()) for _ in range(n_out)]
        self.nodes.append(h.make_node(t, ins, outs, name=self.name(t), **attrs))
        return outs[0] if n_out == 1 else outs


def layer_norm(g, x, d, decomposed, opset):
    gamma = g.const((1.0 + 0.1 * g.rng.standard_normal(d)).astype(np.float32), "gamma")
    beta = g.const((0.1 * g.rng.standard_normal(d)).astype(np.float32), "beta")
    if not decomposed:
        return g.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-5)
    # as the torch exporter writes it at opset 14 (ReduceMean with axes attribute)
    mean = g.op("ReduceMean", [x], axes=[-1], keepdims=1)
    diff = g.op("Sub", [x, mean])
    sq = g.op("Pow", [diff, g.const(np.array(2.0, np.float32))])
    var = g.op("ReduceMean", [sq], axes=[-1], keepdims=1)
    ve = g.op("Add", [var, g.const(np.array(1e-5, np.float32))])
    sd = g.op("Sqrt", [ve])
    nrm = g.op("Div", [diff, sd])
    return g.op("Add", [g.op("Mul", [nrm, gamma]), beta])


def gelu(g, x, tanh_form):
    if not tanh_form:
        e = g.op("Erf", [g.op("Div", [x, g.const(np.array(1.4142135, np.float32))])])
        return g.op("Mul", [g.op("Mul", [x, g.op("Add", [e, g.const(np.array(1.0, np.float32))])]),
                            g.const(np.array(0.5, np.float32))])
    x3 = g.op("Pow", [x, g.const(np.array(3.0, np.float32))])
    inner = g.op("Add", [x, g.op("Mul", [x3, g.const(np.array(0.044715, np.float32))])])
    t = g.op("Tanh", [g.op("Mul", [inner, g.const(np.array(0.7978845608, np.float32))])])
    return g.op("Mul", [g.op("Mul", [x, g.const(np.array(0.5, np.float32))]),
                        g.op("Add", [t, g.const(np.array(1.0, np.float32))])])


def linear(g, x, din, dout):
    y = g.op("MatMul", [x, g.w((din, dout))])
    return g.op("Add", [y, g.const((0.02 * g.rng.standard_normal(dout)).astype(np.float32), "b")])


def attention(g, x, s, d, heads, mask_bool):
    hd = d // heads
    shp = g.const(np.array([1, s, heads, hd], np.int64))
    q = g.op("Transpose", [g.op("Reshape", [linear(g, x, d, d), shp])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [linear(g, x, d, d), shp])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [linear(g, x, d, d), shp])], perm=[0, 2, 1, 3])
    sc = g.op("Div", [g.op("MatMul", [q, k]), g.const(np.array(np.sqrt(hd), np.float32))])
    if mask_bool is not None:
        sc = g.op("Where", [mask_bool, sc, g.const(np.array(-1e9, np.float32))])
    p = g.op("Softmax", [sc], axis=-1)
    o = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    o = g.op("Reshape", [o, g.const(np.array([1, s, d], np.int64))])
    return linear(g, o, d, d)


def encoder(g, x, s, d, heads, ffn, layers, pre_ln, decomposed, tanh, mask, opset):
    for _ in range(layers):
        if pre_ln:
            a = attention(g, layer_norm(g, x, d, decomposed, opset), s, d, heads, mask)
            x = g.op("Add", [x, a])
            f = linear(g, gelu(g, linear(g, layer_norm(g, x, d, decomposed, opset), d, ffn), tanh), ffn, d)
            x = g.op("Add", [x, f])
        else:
            x = layer_norm(g, g.op("Add", [x, attention(g, x, s, d, heads, mask)]), d, decomposed, opset)
            f = linear(g, gelu(g, linear(g, x, d, ffn), tanh), ffn, d)
            x = layer_norm(g, g.op("Add", [x, f]), d, decomposed, opset)
    return x


def bert(seed=11):
    s, d = 128, 256
    g = G(seed)
    # padding mask: last 16 positions masked out, as a bool constant broadcast over heads/rows
    m = np.ones((1, 1, 1, s), bool); m[..., -16:] = False
    mask = g.const(m, "mask")
    x = g.op("Add", ["x", g.w((1, s, d), 0.1, "pos")])
    x = layer_norm(g, x, d, False, 17)
    y = encoder(g, x, s, d, 4, 1024, 4, False, False, False, mask, 17)
    ins = [h.make_tensor_value_info("x", TP.FLOAT, [1, s, d])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, s, d])]
    return g, ins, outs, 17, {"x": g.rng.standard_normal((1, s, d)).astype(np.float32)}


def gpt(seed=12):
    s, d = 128, 256
    g = G(seed)
    mask = g.const(np.tril(np.ones((s, s), bool)).reshape(1, 1, s, s), "causal")
    x = g.op("Add", ["x", g.w((1, s, d), 0.1, "pos")])
    y = encoder(g, x, s, d, 4, 1024, 4, True, True, True, mask, 14)
    y = layer_norm(g, y, d, True, 14)
    ins = [h.make_tensor_value_info("x", TP.FLOAT, [1, s, d])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, s, d])]
    return g, ins, outs, 14, {"x": g.rng.standard_normal((1, s, d)).astype(np.float32)}


def vit(seed=13):
    d, s = 192, 197
    g = G(seed)
    pe = g.op("Conv", ["img", g.w((d, 3, 16, 16), 1 / np.sqrt(768)), g.const(np.zeros(d, np.float32))],
              kernel_shape=[16, 16], strides=[16, 16])
    t = g.op("Transpose", [g.op("Reshape", [pe, g.const(np.array([1, d, 196], np.int64))])], perm=[0, 2, 1])
    x = g.op("Concat", [g.w((1, 1, d), 0.1, "cls"), t], axis=1)
    x = g.op("Add", [x, g.w((1, s, d), 0.1, "pos")])
    y = encoder(g, x, s, d, 3, 768, 4, True, False, False, None, 17)
    y = layer_norm(g, y, d, False, 17)
    cls = g.op("Gather", [y, g.const(np.array(0, np.int64))], axis=1)
    logits = g.op("Gemm", [cls, g.w((1000, d), 1 / np.sqrt(d)), g.const(np.zeros(1000, np.float32))], transB=1)
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 17, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def conv_bn(g, x, cin, cout, k, stride, groups, act, gamma=(0.5, 1.5)):
    """A Conv (He-scaled random weights, same padding) and an inference
    BatchNormalization (scales drawn from `gamma`: a residual branch's last
    one small, as trained deep nets have it, so activations stay bounded),
    then `act(y)` when given."""
    fan = cin // groups * k * k
    w = g.w((cout, cin // groups, k, k), np.sqrt(2.0 / fan))
    y = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride],
             pads=[k // 2] * 4, group=groups)
    scale = g.const(g.rng.uniform(*gamma, cout).astype(np.float32), "scale")
    bias = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32), "bias")
    mean = g.const((0.1 * g.rng.standard_normal(cout)).astype(np.float32), "mean")
    var = g.const(g.rng.uniform(0.5, 1.5, cout).astype(np.float32), "var")
    y = g.op("BatchNormalization", [y, scale, bias, mean, var])
    return act(y) if act else y


def classifier(g, y, c):
    """Global average pooling and a 1000-way Gemm on the `c` channels of `y`;
    the builders' return value for a 224x224 image model at opset 13."""
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])])
    logits = g.op("Gemm", [y, g.w((c, 1000), 0.05), g.const(np.zeros(1000, np.float32))])
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def cnn(seed=0):
    g = G(seed)

    def conv(x, cin, cout, k, stride, groups=1, act=True):
        return conv_bn(g, x, cin, cout, k, stride, groups, act and (lambda y: g.op("Relu", [y])))

    y = conv("img", 3, 32, 3, 2)
    c = 32
    for cout, stride in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)]:
        y = conv(conv(y, c, c, 3, stride, groups=c), c, cout, 1, 1)
        c = cout
    r = y
    y = conv(conv(y, c, c, 3, 1), c, c, 3, 1, act=False)
    y = g.op("Flatten", [g.op("GlobalAveragePool", [g.op("Add", [y, r])])])
    logits = g.op("Gemm", [y, g.w((c, 1000), 0.05), g.const(np.zeros(1000, np.float32))])
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def mobilenet_v2(seed=14):
    g = G(seed)
    lo, hi = g.const(np.float32(0.0), "lo"), g.const(np.float32(6.0), "hi")

    def conv(x, cin, cout, k, stride, groups=1, act=True):
        relu6 = lambda y: g.op("Clip", [y, lo, hi])
        return conv_bn(g, x, cin, cout, k, stride, groups, act and relu6)

    y = conv("img", 3, 32, 3, 2)
    c = 32
    for t, cout, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            z = conv(y, c, hidden, 1, 1) if t != 1 else y
            z = conv(z, hidden, hidden, 3, stride, groups=hidden)
            z = conv(z, hidden, cout, 1, 1, act=False)
            y = g.op("Add", [y, z]) if stride == 1 and c == cout else z
            c = cout
    return classifier(g, conv(y, c, 1280, 1, 1), 1280)


def efficientnet_b0(seed=15):
    g = G(seed)

    def silu(y):
        return g.op("Mul", [y, g.op("Sigmoid", [y])])

    def conv(x, cin, cout, k, stride, groups=1, act=True, gamma=(0.5, 1.5)):
        return conv_bn(g, x, cin, cout, k, stride, groups, act and silu, gamma)

    def se(x, c, squeeze):
        s = g.op("GlobalAveragePool", [x])
        s = g.op("Conv", [s, g.w((squeeze, c, 1, 1), np.sqrt(2.0 / c)),
                          g.const(np.zeros(squeeze, np.float32))])
        s = g.op("Conv", [silu(s), g.w((c, squeeze, 1, 1), np.sqrt(1.0 / squeeze)),
                          g.const(np.full(c, 1.0, np.float32))])
        return g.op("Mul", [x, g.op("Sigmoid", [s])])

    y = conv("img", 3, 32, 3, 2)
    c = 32
    for t, k, s, cout, n in [(1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                             (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c * t
            z = conv(y, c, hidden, 1, 1) if t != 1 else y
            z = conv(z, hidden, hidden, k, stride, groups=hidden)
            z = se(z, hidden, max(1, c // 4))
            z = conv(z, hidden, cout, 1, 1, act=False, gamma=(0.1, 0.3))
            y = g.op("Add", [y, z]) if stride == 1 and c == cout else z
            c = cout
    return classifier(g, conv(y, c, 1280, 1, 1), 1280)


def resnet50(seed=16):
    g = G(seed)

    def conv(x, cin, cout, k, stride, act=True, gamma=(0.5, 1.5)):
        relu = lambda y: g.op("Relu", [y])
        return conv_bn(g, x, cin, cout, k, stride, 1, act and relu, gamma)

    y = conv("img", 3, 64, 7, 2)
    y = g.op("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for width, n, s in [(64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)]:
        for i in range(n):
            stride = s if i == 0 else 1
            z = conv(y, c, width, 1, 1)
            z = conv(z, width, width, 3, stride)
            z = conv(z, width, 4 * width, 1, 1, act=False, gamma=(0.1, 0.3))
            skip = y if stride == 1 and c == 4 * width else conv(y, c, 4 * width, 1, stride, act=False)
            y = g.op("Relu", [g.op("Add", [z, skip])])
            c = 4 * width
    return classifier(g, y, c)


def conv_b(g, x, cin, cout, k, stride=1, pad=None, groups=1, relu=True, bias=True):
    """A Conv with its bias (as exported with BatchNormalization folded, or
    without one), then Relu when asked."""
    fan = cin // groups * k * k
    ins = [x, g.w((cout, cin // groups, k, k), np.sqrt(2.0 / fan))]
    if bias:
        ins.append(g.const((0.05 * g.rng.standard_normal(cout)).astype(np.float32), "b"))
    y = g.op("Conv", ins, kernel_shape=[k, k], strides=[stride, stride],
             pads=[k // 2 if pad is None else pad] * 4, group=groups)
    return g.op("Relu", [y]) if relu else y


def squeezenet(seed=17):
    """SqueezeNet 1.1: Fire modules (1x1 squeeze, 1x1 and 3x3 expand joined
    by Concat), ceil-mode max pools, a 1x1 classifier conv and global
    average pooling."""
    g = G(seed)

    def fire(x, cin, sq, ex):
        s = conv_b(g, x, cin, sq, 1)
        return g.op("Concat", [conv_b(g, s, sq, ex, 1), conv_b(g, s, sq, ex, 3)], axis=1)

    def pool(x):
        return g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    y = pool(conv_b(g, "img", 3, 64, 3, 2, pad=0))
    y = pool(fire(fire(y, 64, 16, 64), 128, 16, 64))
    y = pool(fire(fire(y, 128, 32, 128), 256, 32, 128))
    for cin, sq, ex in [(256, 48, 192), (384, 48, 192), (384, 64, 256), (512, 64, 256)]:
        y = fire(y, cin, sq, ex)
    y = g.op("Flatten", [g.op("GlobalAveragePool", [conv_b(g, y, 512, 1000, 1)])])
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def googlenet(seed=18):
    """GoogLeNet-style Inception v1 blocks (BatchNormalization folded into
    biases): four branches (1x1; 1x1 -> 3x3; 1x1 -> 3x3; 3x3 stride-1 max
    pool -> 1x1) joined by Concat, ceil-mode stride-2 max pools between the
    stages, a 7x7 stem."""
    g = G(seed)

    def inception(x, cin, c1, r3, c3, r5, c5, pp):
        b1 = conv_b(g, x, cin, c1, 1)
        b2 = conv_b(g, conv_b(g, x, cin, r3, 1), r3, c3, 3)
        b3 = conv_b(g, conv_b(g, x, cin, r5, 1), r5, c5, 3)
        p = g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], ceil_mode=1)
        return g.op("Concat", [b1, b2, b3, conv_b(g, p, cin, pp, 1)], axis=1), c1 + c3 + c5 + pp

    def pool(x):
        return g.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)

    y = pool(conv_b(g, "img", 3, 64, 7, 2))
    y = pool(conv_b(g, conv_b(g, y, 64, 64, 1), 64, 192, 3))
    c = 192
    for i, cfg in enumerate([(64, 96, 128, 16, 32, 32), (128, 128, 192, 32, 96, 64), None,
                             (192, 96, 208, 16, 48, 64), (160, 112, 224, 24, 64, 64),
                             (128, 128, 256, 24, 64, 64), (112, 144, 288, 32, 64, 64),
                             (256, 160, 320, 32, 128, 128), None,
                             (256, 160, 320, 32, 128, 128), (384, 192, 384, 48, 128, 128)]):
        if cfg is None:
            y = pool(y)
        else:
            y, c = inception(y, c, *cfg)
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])])
    logits = g.op("Gemm", [y, g.w((1000, c), 1 / np.sqrt(c)), g.const(np.zeros(1000, np.float32))], transB=1)
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def densenet(seed=19):
    """A DenseNet-121-style network, narrowed (growth 32, blocks of 6, 8, 8,
    4 layers): pre-activation BatchNormalization + Relu before each conv
    (which cannot fold into the conv after it), 1x1 bottlenecks to 4x the
    growth, a Concat per layer, 2x2 average pools in the transitions."""
    g = G(seed)

    def bn_relu(x, c):
        scale = g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32), "scale")
        bias = g.const((0.1 * g.rng.standard_normal(c)).astype(np.float32), "bias")
        mean = g.const((0.1 * g.rng.standard_normal(c)).astype(np.float32), "mean")
        var = g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32), "var")
        return g.op("Relu", [g.op("BatchNormalization", [x, scale, bias, mean, var])])

    y = g.op("MaxPool", [conv_b(g, "img", 3, 64, 7, 2, bias=False)], kernel_shape=[3, 3],
             strides=[2, 2], pads=[1, 1, 1, 1])
    c = 64
    for i, n in enumerate([6, 8, 8, 4]):
        for _ in range(n):
            z = conv_b(g, bn_relu(y, c), c, 128, 1, relu=False, bias=False)
            z = conv_b(g, bn_relu(z, 128), 128, 32, 3, relu=False, bias=False)
            y = g.op("Concat", [y, z], axis=1)
            c += 32
        if i < 3:
            y = conv_b(g, bn_relu(y, c), c, c // 2, 1, relu=False, bias=False)
            c //= 2
            y = g.op("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = g.op("Flatten", [g.op("GlobalAveragePool", [bn_relu(y, c)])])
    logits = g.op("Gemm", [y, g.w((1000, c), 1 / np.sqrt(c)), g.const(np.zeros(1000, np.float32))], transB=1)
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def mobilenet_v3(seed=20):
    """MobileNet-V3-Small's layout: HardSwish, squeeze-and-excitation gated by
    HardSigmoid, 3x3 and 5x5 depthwise convs, BatchNormalization folded."""
    g = G(seed)

    def act(y, kind):
        return g.op("HardSwish", [y]) if kind == "hs" else g.op("Relu", [y])

    def conv(x, cin, cout, k, stride=1, groups=1, kind="hs", use=True):
        y = conv_b(g, x, cin, cout, k, stride, groups=groups, relu=False)
        return act(y, kind) if use else y

    def se(x, c):
        sq = max(8, c // 4)
        s = conv_b(g, g.op("GlobalAveragePool", [x]), c, sq, 1)
        s = conv_b(g, s, sq, c, 1, relu=False)
        return g.op("Mul", [x, g.op("HardSigmoid", [s], alpha=1.0 / 6, beta=0.5)])

    y = conv("img", 3, 16, 3, 2)
    c = 16
    for k, exp, cout, use_se, kind, s in [(3, 16, 16, 1, "re", 2), (3, 72, 24, 0, "re", 2),
                                          (3, 88, 24, 0, "re", 1), (5, 96, 40, 1, "hs", 2),
                                          (5, 240, 40, 1, "hs", 1), (5, 240, 40, 1, "hs", 1),
                                          (5, 120, 48, 1, "hs", 1), (5, 144, 48, 1, "hs", 1),
                                          (5, 288, 96, 1, "hs", 2), (5, 576, 96, 1, "hs", 1),
                                          (5, 576, 96, 1, "hs", 1)]:
        z = conv(y, c, exp, 1, kind=kind) if exp != c else y
        z = conv(z, exp, exp, k, s, groups=exp, kind=kind)
        if use_se:
            z = se(z, exp)
        z = conv(z, exp, cout, 1, use=False)
        y = g.op("Add", [y, z]) if s == 1 and c == cout else z
        c = cout
    y = g.op("Flatten", [g.op("GlobalAveragePool", [conv(y, c, 576, 1)])])
    y = g.op("HardSwish", [g.op("Gemm", [y, g.w((1024, 576), 1 / 24), g.const(np.zeros(1024, np.float32))], transB=1)])
    logits = g.op("Gemm", [y, g.w((1000, 1024), 1 / 32), g.const(np.zeros(1000, np.float32))], transB=1)
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 14, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def audio_encoder(seed=21):
    """A wav2vec2-style speech encoder, shrunk: seven 1-D convs over 16000
    samples (kernels 10, 3.. and 2, strides 5 and 2, 256 channels, Gelu),
    then two transformer layers (d 256, 4 heads) over the 49 frames."""
    g = G(seed)
    x = "wave"
    c = 1
    for k, s in [(10, 5), (3, 2), (3, 2), (3, 2), (3, 2), (2, 2), (2, 2)]:
        w = g.w((256, c, k), np.sqrt(2.0 / (c * k)))
        x = gelu(g, g.op("Conv", [x, w, g.const(np.zeros(256, np.float32))], kernel_shape=[k], strides=[s]), False)
        c = 256
    t = g.op("Transpose", [x], perm=[0, 2, 1])
    frames = 49
    y = encoder(g, layer_norm(g, t, 256, False, 17), frames, 256, 4, 1024, 2, False, False, False, None, 17)
    ins = [h.make_tensor_value_info("wave", TP.FLOAT, [1, 1, 16000])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, frames, 256])]
    return g, ins, outs, 17, {"wave": g.rng.standard_normal((1, 1, 16000)).astype(np.float32)}


def convnext(seed=22):
    """A ConvNeXt-T-style network as torch exports it at opset 17, shrunk
    (depths 2, 2, 4, 2; widths 96..768): 4x4/4 stem, blocks of a 7x7
    depthwise conv, a permute to channels-last, LayerNormalization, a
    4x MLP with Erf Gelu, a layer scale, a permute back and the residual;
    channels-first LayerNorms written out (ReduceMean over axis 1) before
    each 2x2/2 downsampling conv."""
    g = G(seed)

    def conv(x, cin, cout, k, stride, pad, groups=1):
        w = g.w((cout, cin // groups, k, k), np.sqrt(2.0 / (cin // groups * k * k)))
        b = g.const((0.02 * g.rng.standard_normal(cout)).astype(np.float32), "b")
        return g.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride],
                    pads=[pad] * 4, group=groups)

    def ln_first(x, c):
        mean = g.op("ReduceMean", [x], axes=[1], keepdims=1)
        diff = g.op("Sub", [x, mean])
        var = g.op("ReduceMean", [g.op("Pow", [diff, g.const(np.array(2.0, np.float32))])],
                   axes=[1], keepdims=1)
        sd = g.op("Sqrt", [g.op("Add", [var, g.const(np.array(1e-6, np.float32))])])
        y = g.op("Div", [diff, sd])
        wgt = g.const((1.0 + 0.1 * g.rng.standard_normal((c, 1, 1))).astype(np.float32), "lnw")
        bia = g.const((0.1 * g.rng.standard_normal((c, 1, 1))).astype(np.float32), "lnb")
        return g.op("Add", [g.op("Mul", [y, wgt]), bia])

    dims, depths = [96, 192, 384, 768], [2, 2, 4, 2]
    x = ln_first(conv("img", 3, dims[0], 4, 4, 0), dims[0])
    for stage, (c, depth) in enumerate(zip(dims, depths)):
        if stage > 0:
            x = conv(ln_first(x, dims[stage - 1]), dims[stage - 1], c, 2, 2, 0)
        for _ in range(depth):
            y = conv(x, c, c, 7, 1, 3, groups=c)
            y = g.op("Transpose", [y], perm=[0, 2, 3, 1])
            y = layer_norm(g, y, c, False, 17)
            y = gelu(g, linear(g, y, c, 4 * c), False)
            y = linear(g, y, 4 * c, c)
            y = g.op("Mul", [y, g.const(np.full(c, 0.1, np.float32), "ls")])
            x = g.op("Add", [x, g.op("Transpose", [y], perm=[0, 3, 1, 2])])
    y = g.op("ReduceMean", [x], axes=[2, 3], keepdims=0)
    y = layer_norm(g, y, dims[-1], False, 17)
    logits = g.op("Gemm", [y, g.w((dims[-1], 1000), 0.05), g.const(np.zeros(1000, np.float32))])
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 224, 224])]
    outs = [h.make_tensor_value_info(logits, TP.FLOAT, [1, 1000])]
    return g, ins, outs, 17, {"img": g.rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}


def bn(g, x, c):
    """An inference BatchNormalization of `c` channels (random statistics)."""
    scale = g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32), "scale")
    bias = g.const((0.1 * g.rng.standard_normal(c)).astype(np.float32), "bias")
    mean = g.const((0.1 * g.rng.standard_normal(c)).astype(np.float32), "mean")
    var = g.const(g.rng.uniform(0.5, 1.5, c).astype(np.float32), "var")
    return g.op("BatchNormalization", [x, scale, bias, mean, var])


def conv_t(g, x, cin, cout, k, stride, pad=0, out_pad=0, bias=True, dims=2):
    """A ConvTranspose as torch exports `nn.ConvTranspose{dims}d(cin, cout,
    k, stride, pad, out_pad)`: W is [cin, cout, k...], every attribute
    written out."""
    ins = [x, g.w((cin, cout) + (k,) * dims, np.sqrt(1.0 / (cin * k ** dims / stride ** dims)))]
    if bias:
        ins.append(g.const((0.05 * g.rng.standard_normal(cout)).astype(np.float32), "b"))
    return g.op("ConvTranspose", ins, kernel_shape=[k] * dims, strides=[stride] * dims,
                pads=[pad] * (2 * dims), output_padding=[out_pad] * dims, dilations=[1] * dims,
                group=1)


def resize(g, x, scale, mode, coord, nearest="floor"):
    """A Resize by `scale` on H and W as torch exports `F.interpolate` at
    opset 13: empty roi, constant scales [1, 1, scale, scale]."""
    scales = g.const(np.array([1, 1, scale, scale], np.float32), "scales")
    attrs = dict(mode=mode, coordinate_transformation_mode=coord, cubic_coeff_a=-0.75)
    if mode == "nearest":
        attrs["nearest_mode"] = nearest
    return g.op("Resize", [x, "", scales], **attrs)


def unet(seed=23):
    """A small U-Net (the original's layout, as milesial/Pytorch-UNet exports
    it with ConvTranspose up-sampling): double 3x3 convs (BatchNormalization
    + Relu) at 32, 64, 128, 256 channels over 128, 64, 32, 16 pixels, 2x2
    max pools down, ConvTranspose 2x2/2 up (256 -> 128 on 16x16, 128 -> 64
    on 32x32, 64 -> 32 on 64x64), each Concat with its skip, a 1x1 head to
    2 classes."""
    g = G(seed)

    def double(x, cin, cout):
        y = conv_bn(g, x, cin, cout, 3, 1, 1, lambda y: g.op("Relu", [y]))
        return conv_bn(g, y, cout, cout, 3, 1, 1, lambda y: g.op("Relu", [y]))

    pool = lambda x: g.op("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    widths = [32, 64, 128, 256]
    skips, y, c = [], "img", 3
    for i, w in enumerate(widths):
        y = double(y if i == 0 else pool(y), c, w)
        skips.append(y)
        c = w
    for w, skip in zip(reversed(widths[:-1]), reversed(skips[:-1])):
        up = conv_t(g, y, c, w, 2, 2)
        y = double(g.op("Concat", [skip, up], axis=1), 2 * w, w)
        c = w
    y = conv_b(g, y, c, 2, 1, relu=False)
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 128, 128])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, 2, 128, 128])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 128, 128)).astype(np.float32)}


def convt_decoder(seed=24):
    """An image decoder (autoencoder / DCGAN generator) from a [1, 256, 8, 8]
    latent: ConvTranspose 3x3/2 with pads 1 and output_padding 1 (torch's
    usual doubling), then 4x4/2 with pads 1 (DCGAN's), alternating, 256 ->
    128 -> 64 -> 32 -> 16 channels up to 128x128, BatchNormalization + Relu
    after each, a 3x3 conv to RGB and Tanh."""
    g = G(seed)
    y, c = "z", 256
    for i, cout in enumerate([128, 64, 32, 16]):
        k, op = (3, 1) if i % 2 == 0 else (4, 0)
        y = g.op("Relu", [bn(g, conv_t(g, y, c, cout, k, 2, 1, op, bias=False), cout)])
        c = cout
    y = g.op("Tanh", [conv_b(g, y, c, 3, 3, relu=False)])
    ins = [h.make_tensor_value_info("z", TP.FLOAT, [1, 256, 8, 8])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, 3, 128, 128])]
    return g, ins, outs, 13, {"z": g.rng.standard_normal((1, 256, 8, 8)).astype(np.float32)}


def vocoder_1d(seed=25):
    """A HiFi-GAN-style vocoder, shrunk: a 7-tap Conv1d from 80 mel bins to
    256 channels over 64 frames, then 1-D ConvTranspose up-sampling 8, 8, 2,
    2 (kernels 16, 16, 4, 4, pads half the stride) to 16384 samples, each
    after a LeakyRelu and followed by a residual 3-tap conv, a 7-tap conv to
    one channel and Tanh."""
    g = G(seed)

    def conv1(x, cin, cout, k):
        w = g.w((cout, cin, k), np.sqrt(1.0 / (cin * k)))
        b = g.const((0.02 * g.rng.standard_normal(cout)).astype(np.float32), "b")
        return g.op("Conv", [x, w, b], kernel_shape=[k], pads=[k // 2] * 2)

    leaky = lambda x: g.op("LeakyRelu", [x], alpha=0.1)
    y, c = conv1("mel", 80, 256, 7), 256
    for k, s in [(16, 8), (16, 8), (4, 2), (4, 2)]:
        y = conv_t(g, leaky(y), c, c // 2, k, s, (k - s) // 2, dims=1)
        c //= 2
        y = g.op("Add", [y, conv1(leaky(y), c, c, 3)])
    y = g.op("Tanh", [conv1(leaky(y), c, 1, 7)])
    ins = [h.make_tensor_value_info("mel", TP.FLOAT, [1, 80, 64])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, 1, 16384])]
    return g, ins, outs, 13, {"mel": g.rng.standard_normal((1, 80, 64)).astype(np.float32)}


def yolo_neck(seed=26):
    """A YOLOv5/v8-style detector at 320x320, narrowed (widths 16..256): a
    stride-2 conv backbone with SiLU (x * Sigmoid(x), as exported), then the
    PAN neck: Resize nearest x2 (torch's nn.Upsample: asymmetric, floor) +
    Concat with the backbone's stride-16 and stride-8 features, convs, the
    way back down with stride-2 convs and Concats, and three 1x1 heads of
    3 * 85 channels."""
    g = G(seed)

    def conv(x, cin, cout, k, stride=1):
        y = conv_b(g, x, cin, cout, k, stride, relu=False)
        return g.op("Mul", [y, g.op("Sigmoid", [y])])

    def block(x, cin, cout):
        h1 = conv(x, cin, cout // 2, 1)
        h2 = conv(conv(h1, cout // 2, cout // 2, 3), cout // 2, cout // 2, 3)
        return conv(g.op("Concat", [h1, h2], axis=1), cout, cout, 1)

    y = conv("img", 3, 16, 3, 2)
    feats, c = [], 16
    for w in [32, 64, 128, 256]:
        y = block(conv(y, c, w, 3, 2), w, w)
        feats.append(y)
        c = w
    p3, p4, p5 = feats[1], feats[2], feats[3]
    up = lambda x: resize(g, x, 2.0, "nearest", "asymmetric", "floor")
    t4 = block(g.op("Concat", [up(p5), p4], axis=1), 256 + 128, 128)
    t3 = block(g.op("Concat", [up(t4), p3], axis=1), 128 + 64, 64)
    d4 = block(g.op("Concat", [conv(t3, 64, 64, 3, 2), t4], axis=1), 64 + 128, 128)
    d5 = block(g.op("Concat", [conv(d4, 128, 128, 3, 2), p5], axis=1), 128 + 256, 256)
    outs_v = [conv_b(g, t, cin, 255, 1, relu=False) for t, cin in [(t3, 64), (d4, 128), (d5, 256)]]
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 320, 320])]
    outs = [h.make_tensor_value_info(o, TP.FLOAT, [1, 255, 320 // s, 320 // s])
            for o, s in zip(outs_v, [8, 16, 32])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 320, 320)).astype(np.float32)}


def seg_head(seed=27):
    """A DeepLab-V3+-style segmentation net at 256x256: a stride-16 conv
    backbone (Relu), an ASPP-lite of dilated 3x3 convs joined by Concat, a
    Resize linear x4 (pytorch_half_pixel: torch's align_corners=False)
    Concat with the stride-4 features, a Resize linear x2 of the
    stride-8 features (half_pixel, as tf2onnx writes it) and one x2
    asymmetric (TF1's resize_bilinear), a 3x3 conv, and the final Resize
    linear x4 with align_corners (torch's align_corners=True) to 21
    classes at full size."""
    g = G(seed)
    y, c, feats = "img", 3, {}
    for i, (w, s) in enumerate([(32, 2), (64, 2), (96, 2), (160, 2), (256, 1)]):
        y = conv_b(g, y, c, w, 3, s)
        c = w
        feats[2 ** min(i + 1, 4)] = (y, w)
    x16, c16 = feats[16]
    branches = [conv_b(g, x16, c16, 96, 1)]
    for dil in [2, 4, 6]:
        w = g.w((96, c16, 3, 3), np.sqrt(2.0 / (c16 * 9)))
        z = g.op("Conv", [x16, w, g.const(np.zeros(96, np.float32), "b")], kernel_shape=[3, 3],
                 pads=[dil] * 4, dilations=[dil, dil])
        branches.append(g.op("Relu", [z]))
    a = conv_b(g, g.op("Concat", branches, axis=1), 4 * 96, 128, 1)
    x4, c4 = feats[4]
    x8, c8 = feats[8]
    lo = conv_b(g, x4, c4, 48, 1)
    m8 = conv_b(g, x8, c8, 32, 1)
    up8 = [resize(g, m8, 2.0, "linear", "half_pixel"), resize(g, m8, 2.0, "linear", "asymmetric")]
    y = g.op("Concat", [resize(g, a, 4.0, "linear", "pytorch_half_pixel"), lo] + up8, axis=1)
    y = conv_b(g, y, 128 + 48 + 64, 96, 3)
    y = conv_b(g, y, 96, 21, 1, relu=False)
    y = resize(g, y, 4.0, "linear", "align_corners")
    ins = [h.make_tensor_value_info("img", TP.FLOAT, [1, 3, 256, 256])]
    outs = [h.make_tensor_value_info(y, TP.FLOAT, [1, 21, 256, 256])]
    return g, ins, outs, 13, {"img": g.rng.standard_normal((1, 3, 256, 256)).astype(np.float32)}


def save(root, name, built):
    import onnxruntime as ort
    g, ins, outs, opset, feeds = built
    graph = h.make_graph(g.nodes, name, ins, outs, g.inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)], producer_name="onnx-codegen tools/larger_models.py")
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    d = os.path.join(root, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(d, "model.onnx"))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    res = ref.run(None, feeds)
    for i, (k, v) in enumerate(feeds.items()):
        with open(os.path.join(d, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(nh.from_array(v, k).SerializeToString())
    for i, (o, v) in enumerate(zip(ref.get_outputs(), res)):
        with open(os.path.join(d, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(nh.from_array(v, o.name).SerializeToString())
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    fast = ort.InferenceSession(os.path.join(d, "model.onnx"), so, providers=["CPUExecutionProvider"])
    for _ in range(10):
        fast.run(None, feeds)
    ts = []
    for _ in range(100):
        t0 = time.perf_counter(); fast.run(None, feeds); ts.append((time.perf_counter() - t0) * 1e3)
    print(f"{name}: {len(g.nodes)} nodes, ort single-thread median {np.median(ts):.3f} ms, out {res[0].shape}")


BUILDERS = {"cnn_224": cnn, "mobilenet_v2": mobilenet_v2, "efficientnet_b0": efficientnet_b0,
            "resnet50": resnet50, "bert_small": bert, "gpt_small": gpt, "vit_tiny": vit,
            "squeezenet": squeezenet, "googlenet": googlenet, "densenet": densenet,
            "mobilenet_v3": mobilenet_v3, "audio_encoder": audio_encoder, "convnext": convnext,
            "unet": unet, "convt_decoder": convt_decoder, "vocoder_1d": vocoder_1d,
            "yolo_neck": yolo_neck, "seg_head": seg_head}

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="/tmp/larger-models", help="where the model folders go")
    ap.add_argument("names", nargs="*", help=f"models to build (default all: {', '.join(BUILDERS)})")
    args = ap.parse_args()
    for n in args.names or list(BUILDERS):
        if n not in BUILDERS:
            sys.exit(f"unknown model {n!r}; known: {', '.join(BUILDERS)}")
        save(args.out, n, BUILDERS[n]())
