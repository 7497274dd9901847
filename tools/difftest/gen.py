#!/usr/bin/env python3
"""Writes random valid ONNX graphs as backend-layout test directories.

Each graph is a chain or DAG of 3-12 nodes drawn from a broad op list, on
random shapes, attributes and dtypes. onnxruntime computes the reference
outputs; graphs it rejects, or whose outputs are not finite, are skipped and
counted. The same seed gives the same graphs.

    python3 tools/difftest/gen.py --count 1000 --seed 1 OUT
    onnx-codegen test OUT/* --json r.json

Needs numpy, onnx and onnxruntime. The project itself never runs this.
"""

import argparse
import multiprocessing as mp
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

OPSET = 17

F32, F64, I32, I64, BOOL = (
    TensorProto.FLOAT,
    TensorProto.DOUBLE,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.BOOL,
)
FLOATS = (F32, F64)
NUMERIC = (F32, F64, I32, I64)
NP = {F32: np.float32, F64: np.float64, I32: np.int32, I64: np.int64, BOOL: np.bool_}


class Builder:
    """A graph under construction: values with known shapes and dtypes."""

    def __init__(self, rng):
        self.rng = rng
        self.nodes = []
        self.inits = []
        self.inputs = []
        self.values = {}  # name -> (shape tuple, dtype)
        self.used = set()
        self.counter = 0

    def name(self, prefix):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, array, prefix="c"):
        n = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def pick(self, dtypes=NUMERIC, rank=None, min_rank=0):
        cands = [
            k
            for k, (s, d) in self.values.items()
            if d in dtypes and (rank is None or len(s) == rank) and len(s) >= min_rank
        ]
        if not cands:
            return None
        # Prefer recent values so graphs grow deep, not only wide.
        w = np.arange(1, len(cands) + 1, dtype=np.float64) ** 2
        return cands[self.rng.choice(len(cands), p=w / w.sum())]

    def add(self, op, inputs, attrs=None, n_out=1, domain=""):
        outs = [self.name("v") for _ in range(n_out)]
        self.nodes.append(
            helper.make_node(op, inputs, outs, name=self.name("n"), domain=domain, **(attrs or {}))
        )
        for i in inputs:
            self.used.add(i)
        return outs

    def infer(self):
        """Shapes and dtypes of every value, from onnx shape inference."""
        model = self.model([])
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
        for vi in inferred.graph.value_info:
            t = vi.type.tensor_type
            if not t.HasField("shape"):
                raise ValueError("no shape")
            dims = []
            for d in t.shape.dim:
                if not d.HasField("dim_value"):
                    raise ValueError("symbolic dim")
                dims.append(d.dim_value)
            self.values[vi.name] = (tuple(dims), t.elem_type)

    def model(self, outputs):
        g = helper.make_graph(self.nodes, "g", self.inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
        m.ir_version = 8
        return m


def rand_shape(rng, rank=None):
    rank = int(rng.integers(1, 5)) if rank is None else rank
    return tuple(int(rng.integers(1, 6)) for _ in range(rank))


def rand_data(rng, shape, dtype):
    if dtype in FLOATS:
        return rng.standard_normal(shape).astype(NP[dtype])
    if dtype == BOOL:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(-9, 10, shape).astype(NP[dtype])


def broadcast_partner(b, shape, dtype):
    """A constant or an existing value that broadcasts against `shape`."""
    rng = b.rng
    if rng.random() < 0.4:
        other = [
            k
            for k, (s, d) in b.values.items()
            if d == dtype and _broadcastable(s, shape)
        ]
        if other:
            return other[rng.integers(len(other))]
    s = list(shape)
    drop = int(rng.integers(0, len(s) + 1)) if rng.random() < 0.3 else 0
    s = s[drop:]
    s = [1 if rng.random() < 0.3 else d for d in s]
    return b.const(rand_data(rng, tuple(s), dtype))


def _broadcastable(a, b):
    for x, y in zip(reversed(a), reversed(b)):
        if x != y and x != 1 and y != 1:
            return False
    return True


UNARY_FLOAT = [
    "Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Floor", "Ceil", "Sin", "Cos", "Softplus",
    "Erf", "Sign", "Round", "Softsign", "Atan", "HardSwish",
]


def op_unary(b):
    x = b.pick(FLOATS)
    if x is None:
        return False
    op = UNARY_FLOAT[b.rng.integers(len(UNARY_FLOAT))]
    b.add(op, [x])
    return True


def op_unary_attr(b):
    x = b.pick(FLOATS)
    if x is None:
        return False
    rng = b.rng
    choice = rng.integers(5)
    if choice == 0:
        b.add("LeakyRelu", [x], {"alpha": float(np.float32(rng.uniform(0.01, 0.5)))})
    elif choice == 1:
        b.add("Elu", [x], {"alpha": float(np.float32(rng.uniform(0.5, 2)))})
    elif choice == 2:
        b.add("HardSigmoid", [x], {"alpha": 0.2, "beta": 0.5})
    elif choice == 3:
        lo = float(rng.uniform(-1, 0))
        dtype = b.values[x][1]
        b.add("Clip", [x, b.const(np.array(lo, NP[dtype])), b.const(np.array(lo + 1.5, NP[dtype]))])
    else:
        (a,) = b.add("Abs", [x])
        b.values[a] = b.values[x]
        op = ["Sqrt", "Exp", "Log"][rng.integers(3)]
        if op == "Log":
            one = b.const(np.array(1, NP[b.values[x][1]]))
            (a,) = b.add("Add", [a, one])
        if op == "Exp":
            (a,) = b.add("Neg", [a])
        b.add(op, [a])
    return True


def op_binary(b):
    x = b.pick(NUMERIC)
    if x is None:
        return False
    shape, dtype = b.values[x]
    rng = b.rng
    ops = ["Add", "Sub", "Mul", "Max", "Min"] + (["Div"] if dtype in FLOATS else [])
    op = ops[rng.integers(len(ops))]
    if op == "Div":
        d = rng.uniform(0.5, 2, tuple(int(v) for v in shape[rng.integers(0, len(shape) + 1):]))
        d = d * rng.choice([-1, 1], d.shape)
        y = b.const(d.astype(NP[dtype]))
    else:
        y = broadcast_partner(b, shape, dtype)
    args = [x, y] if rng.random() < 0.5 else [y, x]
    if op == "Div":
        args = [x, y]
    b.add(op, args)
    return True


def op_compare(b):
    x = b.pick(NUMERIC)
    if x is None:
        return False
    shape, dtype = b.values[x]
    rng = b.rng
    op = ["Greater", "Less", "Equal", "GreaterOrEqual", "LessOrEqual"][rng.integers(5)]
    (c,) = b.add(op, [x, broadcast_partner(b, shape, dtype)])
    if rng.random() < 0.7:
        b.values[c] = (shape, BOOL)
        if rng.random() < 0.3:
            (c,) = b.add("Not", [c])
        y = broadcast_partner(b, shape, dtype)
        b.add("Where", [c, x, y] if rng.random() < 0.5 else [c, y, x])
    return True


def op_cast(b):
    x = b.pick(NUMERIC + (BOOL,))
    if x is None:
        return False
    targets = [F32, F64, I32, I64, BOOL]
    to = targets[b.rng.integers(len(targets))]
    b.add("Cast", [x], {"to": int(to)})
    return True


def op_matmul(b):
    rng = b.rng
    x = b.pick(FLOATS, min_rank=1)
    if x is None:
        return False
    shape, dtype = b.values[x]
    k = shape[-1]
    n = int(rng.integers(1, 6))
    if len(shape) == 1 or rng.random() < 0.7:
        w = b.const(rand_data(rng, (k, n), dtype))
    else:
        batch = tuple(1 if rng.random() < 0.3 else d for d in shape[:-2])
        w = b.const(rand_data(rng, batch + (k, n), dtype))
    b.add("MatMul", [x, w])
    return True


def op_gemm(b):
    rng = b.rng
    x = b.pick(FLOATS, rank=2)
    if x is None:
        return False
    (m, k), dtype = b.values[x]
    ta, tb = int(rng.integers(2)), int(rng.integers(2))
    if ta:
        m, k = k, m
    n = int(rng.integers(1, 6))
    w = b.const(rand_data(rng, (n, k) if tb else (k, n), dtype))
    inputs = [x, w]
    if rng.random() < 0.7:
        cshape = [(n,), (1, n), (m, 1), (m, n), ()][rng.integers(5)]
        inputs.append(b.const(rand_data(rng, cshape, dtype)))
    attrs = {"transA": ta, "transB": tb}
    if rng.random() < 0.5:
        attrs["alpha"] = float(np.float32(rng.uniform(0.5, 2)))
        attrs["beta"] = float(np.float32(rng.uniform(0.5, 2)))
    b.add("Gemm", inputs, attrs)
    return True


def ensure_rank4(b, x):
    shape, dtype = b.values[x]
    if len(shape) == 4:
        return x
    size = int(np.prod(shape))
    c = [d for d in (1, 2, 3) if size % d == 0][b.rng.integers(0, 2 if size % 2 == 0 else 1)]
    target = np.array([1, c, size // c, 1] if b.rng.random() < 0.5 else [1, c, 1, size // c])
    (r,) = b.add("Reshape", [x, b.const(target.astype(np.int64), "shape")])
    b.values[r] = (tuple(int(t) for t in target), dtype)
    return r


def op_conv(b):
    rng = b.rng
    x = b.pick((F32,), min_rank=1)
    if x is None:
        return False
    x = ensure_rank4(b, x)
    (n, c, h, w), dtype = b.values[x]
    kh, kw = int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))
    group = c if (c > 1 and rng.random() < 0.3) else 1
    m = group * int(rng.integers(1, 3))
    attrs = {"kernel_shape": [kh, kw]}
    if rng.random() < 0.5:
        attrs["pads"] = [int(p) for p in rng.integers(0, 2, 4)]
    if rng.random() < 0.3:
        attrs["strides"] = [int(s) for s in rng.integers(1, 3, 2)]
    if group > 1:
        attrs["group"] = group
    inputs = [x, b.const(rand_data(rng, (m, c // group, kh, kw), dtype))]
    if rng.random() < 0.6:
        inputs.append(b.const(rand_data(rng, (m,), dtype)))
    b.add("Conv", inputs, attrs)
    return True


def op_pool(b):
    rng = b.rng
    x = b.pick((F32,), min_rank=1)
    if x is None:
        return False
    x = ensure_rank4(b, x)
    (n, c, h, w), _ = b.values[x]
    kind = rng.integers(3)
    if kind == 2:
        b.add(["GlobalAveragePool", "GlobalMaxPool"][rng.integers(2)], [x])
        return True
    kh, kw = int(rng.integers(1, min(h, 3) + 1)), int(rng.integers(1, min(w, 3) + 1))
    attrs = {"kernel_shape": [kh, kw]}
    if rng.random() < 0.3:
        attrs["strides"] = [int(s) for s in rng.integers(1, 3, 2)]
    if rng.random() < 0.3 and kh > 1 and kw > 1:
        attrs["pads"] = [1, 1, 1, 1]
    if kind == 0:
        b.add("MaxPool", [x], attrs)
    else:
        if "pads" in attrs and rng.random() < 0.5:
            attrs["count_include_pad"] = 1
        b.add("AveragePool", [x], attrs)
    return True


def op_reduce(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    shape, dtype = b.values[x]
    ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
    if dtype in FLOATS:
        ops += ["ReduceL2", "ReduceL1", "ReduceSumSquare", "ReduceLogSumExp"]
    op = ops[rng.integers(len(ops))]
    r = len(shape)
    naxes = int(rng.integers(0, r + 1))
    axes = sorted(rng.choice(r, naxes, replace=False).tolist())
    axes = [a - r if rng.random() < 0.3 else a for a in axes]
    attrs = {"keepdims": int(rng.integers(2))}
    inputs = [x]
    if op == "ReduceSum":
        if axes:
            inputs.append(b.const(np.array(axes, np.int64), "axes"))
    elif axes:
        attrs["axes"] = axes
    b.add(op, inputs, attrs)
    return True


def op_argmax(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    r = len(b.values[x][0])
    attrs = {"axis": int(rng.integers(-r, r)), "keepdims": int(rng.integers(2))}
    b.add(["ArgMax", "ArgMin"][rng.integers(2)], [x], attrs)
    return True


def op_softmax(b):
    rng = b.rng
    x = b.pick(FLOATS, min_rank=1)
    if x is None:
        return False
    r = len(b.values[x][0])
    b.add(["Softmax", "LogSoftmax"][rng.integers(2)], [x], {"axis": int(rng.integers(-r, r))})
    return True


def op_transpose(b):
    x = b.pick(NUMERIC + (BOOL,), min_rank=2)
    if x is None:
        return False
    r = len(b.values[x][0])
    attrs = {} if b.rng.random() < 0.2 else {"perm": [int(p) for p in b.rng.permutation(r)]}
    b.add("Transpose", [x], attrs)
    return True


def op_reshape(b):
    rng = b.rng
    x = b.pick(NUMERIC + (BOOL,))
    if x is None:
        return False
    shape = b.values[x][0]
    size = int(np.prod(shape))
    dims = []
    left = size
    for _ in range(int(rng.integers(1, 4))):
        divs = [d for d in range(1, left + 1) if left % d == 0]
        d = divs[rng.integers(len(divs))]
        dims.append(d)
        left //= d
    dims.append(left)
    rng.shuffle(dims)
    if rng.random() < 0.4:
        dims[rng.integers(len(dims))] = -1
    if rng.random() < 0.3 and len(dims) <= len(shape):
        i = int(rng.integers(len(dims)))
        if dims[i] == shape[i] and dims[i] != -1:
            dims[i] = 0
    if rng.random() < 0.3:
        b.add("Flatten", [x], {"axis": int(rng.integers(-len(shape), len(shape) + 1))})
        return True
    b.add("Reshape", [x, b.const(np.array(dims, np.int64), "shape")])
    return True


def op_concat(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    shape, dtype = b.values[x]
    axis = int(rng.integers(len(shape)))
    parts = [x]
    for _ in range(int(rng.integers(1, 3))):
        s = list(shape)
        s[axis] = int(rng.integers(1, 4))
        same = [
            k
            for k, (vs, vd) in b.values.items()
            if vd == dtype and len(vs) == len(s) and all(
                vs[i] == s[i] for i in range(len(s)) if i != axis)
        ]
        if same and rng.random() < 0.5:
            parts.append(same[rng.integers(len(same))])
        else:
            parts.append(b.const(rand_data(rng, tuple(s), dtype)))
    rng.shuffle(parts)
    b.add("Concat", parts, {"axis": axis - len(shape) if rng.random() < 0.3 else axis})
    return True


def op_slice(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    shape = b.values[x][0]
    r = len(shape)
    axes = sorted(rng.choice(r, int(rng.integers(1, r + 1)), replace=False).tolist())
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a]
        step = int(rng.choice([1, 1, 2, -1, -2]))
        if step > 0:
            s = int(rng.integers(-d, d))
            e = int(rng.choice([int(rng.integers(-d, d + 1)), 2**62]))
        else:
            s = int(rng.choice([int(rng.integers(-d, d)), 2**62]))
            e = int(rng.choice([int(rng.integers(-d - 1, d)), -(2**62)]))
        starts.append(s)
        ends.append(e)
        steps.append(step)
    inputs = [
        x,
        b.const(np.array(starts, np.int64), "starts"),
        b.const(np.array(ends, np.int64), "ends"),
        b.const(np.array(axes, np.int64), "axes"),
        b.const(np.array(steps, np.int64), "steps"),
    ]
    b.add("Slice", inputs)
    return True


def op_gather(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    shape = b.values[x][0]
    axis = int(rng.integers(len(shape)))
    d = shape[axis]
    ishape = rand_shape(rng, int(rng.integers(0, 3)))
    idx = rng.integers(-d, d, ishape).astype(np.int64 if rng.random() < 0.7 else np.int32)
    b.add("Gather", [x, b.const(idx, "idx")], {"axis": axis})
    return True


def op_squeeze(b):
    rng = b.rng
    x = b.pick(NUMERIC + (BOOL,))
    if x is None:
        return False
    shape = b.values[x][0]
    if rng.random() < 0.5 or 1 not in shape:
        r = len(shape) + 1
        n = int(rng.integers(1, 3))
        axes = sorted(rng.choice(r + n - 1, n, replace=False).tolist())
        b.add("Unsqueeze", [x, b.const(np.array(axes, np.int64), "axes")])
    else:
        ones = [i for i, d in enumerate(shape) if d == 1]
        axes = ones if rng.random() < 0.5 else ones[:1]
        inputs = [x] if rng.random() < 0.2 else [x, b.const(np.array(axes, np.int64), "axes")]
        b.add("Squeeze", inputs)
    return True


def op_expand_tile(b):
    rng = b.rng
    x = b.pick(NUMERIC, min_rank=1)
    if x is None:
        return False
    shape = b.values[x][0]
    if rng.random() < 0.5:
        reps = [int(rng.integers(1, 3)) for _ in shape]
        b.add("Tile", [x, b.const(np.array(reps, np.int64), "reps")])
    else:
        target = [int(rng.integers(2, 4)) if d == 1 else d for d in shape]
        if rng.random() < 0.3:
            target = [int(rng.integers(1, 3))] + target
        b.add("Expand", [x, b.const(np.array(target, np.int64), "shape")])
    return True


def op_norm(b):
    rng = b.rng
    x = b.pick((F32,), min_rank=2)
    if x is None:
        return False
    shape, dtype = b.values[x]
    if rng.random() < 0.5 and len(shape) >= 2:
        c = shape[1]
        scale = b.const(rand_data(rng, (c,), dtype))
        bias = b.const(rand_data(rng, (c,), dtype))
        mean = b.const(rand_data(rng, (c,), dtype))
        var = b.const(rng.uniform(0.5, 2, (c,)).astype(np.float32))
        b.add("BatchNormalization", [x, scale, bias, mean, var], {"epsilon": 1e-5})
    else:
        axis = int(rng.integers(-len(shape), len(shape)))
        ns = shape[axis:] if axis >= 0 else shape[len(shape) + axis:]
        b.add(
            "LayerNormalization",
            [x, b.const(rand_data(rng, ns, dtype)), b.const(rand_data(rng, ns, dtype))],
            {"axis": axis},
        )
    return True


OPS = [
    (op_unary, 4), (op_unary_attr, 3), (op_binary, 6), (op_compare, 2), (op_cast, 2),
    (op_matmul, 2), (op_gemm, 1), (op_conv, 2), (op_pool, 2), (op_reduce, 3), (op_argmax, 1),
    (op_softmax, 2), (op_transpose, 2), (op_reshape, 2), (op_concat, 2), (op_slice, 2),
    (op_gather, 2), (op_squeeze, 2), (op_expand_tile, 1), (op_norm, 1),
]


def build(rng):
    """One random graph, its input arrays and the op generators used."""
    b = Builder(rng)
    feeds = {}
    for i in range(int(rng.integers(1, 4))):
        dtype = F32 if rng.random() < 0.8 else [F64, I32, I64][rng.integers(3)]
        shape = rand_shape(rng)
        n = f"x{i}"
        b.inputs.append(helper.make_tensor_value_info(n, dtype, shape))
        b.values[n] = (shape, dtype)
        feeds[n] = rand_data(rng, shape, dtype)
    target = int(rng.integers(3, 13))
    weights = np.array([w for _, w in OPS], dtype=np.float64)
    used = []
    tries = 0
    while len(b.nodes) < target and tries < 60:
        tries += 1
        gen, _ = OPS[rng.choice(len(OPS), p=weights / weights.sum())]
        saved = (len(b.nodes), len(b.inits), dict(b.values), set(b.used), b.counter)
        try:
            if not gen(b):
                continue
            b.infer()
            used.append(gen.__name__)
        except Exception:
            n_nodes, n_inits, values, used_set, _ = saved
            del b.nodes[n_nodes:]
            del b.inits[n_inits:]
            b.values, b.used = values, used_set
    inputs = {i.name for i in b.inputs}
    outs = [k for k in b.values if k not in b.used and k not in inputs]
    if not outs:
        return None
    out_infos = [helper.make_tensor_value_info(k, b.values[k][1], b.values[k][0]) for k in outs]
    model = b.model(out_infos)
    onnx.checker.check_model(model, full_check=True)
    return model, feeds, outs


def write_case(path, model, feeds, outs, results):
    os.makedirs(os.path.join(path, "test_data_set_0"), exist_ok=True)
    onnx.save(model, os.path.join(path, "model.onnx"))
    for i, (n, a) in enumerate(feeds.items()):
        t = numpy_helper.from_array(a, n)
        with open(os.path.join(path, "test_data_set_0", f"input_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())
    for i, (n, a) in enumerate(zip(outs, results)):
        t = numpy_helper.from_array(np.asarray(a), n)
        with open(os.path.join(path, "test_data_set_0", f"output_{i}.pb"), "wb") as f:
            f.write(t.SerializeToString())


REFERENCE_TIMEOUT_S = 30


def run_reference(model_bytes, feeds, outs):
    """onnxruntime's outputs, computed in a worker process so that a hang can be cut off."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return sess.run(outs, feeds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    pool = mp.Pool(1)
    skipped = {}
    written = 0
    attempt = 0
    while written < args.count:
        rng = np.random.default_rng([args.seed, attempt])
        attempt += 1
        try:
            built = build(rng)
        except Exception as e:  # the checker refused what we built
            skipped["checker: " + type(e).__name__] = skipped.get("checker: " + type(e).__name__, 0) + 1
            continue
        if built is None:
            skipped["no output"] = skipped.get("no output", 0) + 1
            continue
        model, feeds, outs = built
        job = pool.apply_async(run_reference, (model.SerializeToString(), feeds, outs))
        try:
            results = job.get(timeout=REFERENCE_TIMEOUT_S)
        except mp.TimeoutError:
            # onnxruntime loops forever on some graphs (a Conv with zero
            # input channels): start a fresh worker and move on.
            pool.terminate()
            pool = mp.Pool(1)
            skipped["onnxruntime hangs"] = skipped.get("onnxruntime hangs", 0) + 1
            continue
        except Exception:
            skipped["onnxruntime rejects"] = skipped.get("onnxruntime rejects", 0) + 1
            continue
        if any(np.asarray(r).dtype.kind == "f" and not np.all(np.isfinite(r)) for r in results):
            skipped["non-finite output"] = skipped.get("non-finite output", 0) + 1
            continue
        write_case(os.path.join(args.out, f"g{args.seed}_{attempt - 1:05d}"), model, feeds, outs, results)
        written += 1
    pool.terminate()
    print(f"wrote {written} graphs to {args.out} ({attempt} tried)", file=sys.stderr)
    for k, v in sorted(skipped.items()):
        print(f"  skipped {v}: {k}", file=sys.stderr)


if __name__ == "__main__":
    main()
