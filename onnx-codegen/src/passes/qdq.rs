//! Quantized regions as integer operators.
//!
//! Static quantization in the QDQ format (onnxruntime's default) writes a
//! quantized convolution as float code between conversions:
//!
//! ```text
//! xq -> DequantizeLinear(xs, xz) -> Conv(DequantizeLinear(wq, ws), DequantizeLinear(bq, xs*ws))
//!    -> [Relu | Clip] -> QuantizeLinear(ys, yz) -> yq
//! ```
//!
//! Read literally, the weights are dequantized and the product runs in
//! float. This pass rewrites each such region into the standard integer
//! operator that computes it, `QLinearConv` (`QLinearMatMul` for a `MatMul`
//! or a `Gemm`), reading `xq` and `wq` and writing `yq` itself, so the op
//! rules run it on the int8 kernels with int8 activations in the arena and
//! int8 weights in flash. The `Gemm`'s bias and a folded `Relu` or `Clip`
//! go into the node's [`IntegerLowering`]: the bias is added to the int32
//! sums, the activation narrows the output range (quantization is monotonic,
//! so `Q(max(v, 0)) = max(Q(v), yz)` and `Q(clip(v, a, b)) = clamp(Q(v),
//! Q(a), Q(b))`).
//!
//! Operators that only move, select or compare values (Reshape, Transpose,
//! MaxPool, Concat, ...) between a `DequantizeLinear` and a
//! `QuantizeLinear` of the same scale and zero point read and write the
//! quantized values directly: `Q(op(DQ(x))) = op(x)` for them, exactly.
//!
//! An element-wise function of one quantized value (Sigmoid, HardSwish,
//! LeakyRelu, Tanh, a Mul by a constant, ...) between a per-tensor
//! dequantization and quantization becomes a table of its 256 results
//! ([`Lowering::Lookup`]): the pass writes the region again on a constant
//! holding every value the input can take, which inference folds into the
//! table with the operator's own rule, so each entry is what the float
//! region gives for that value.
//!
//! An `Add`, `Mul`, `AveragePool`, `GlobalAveragePool`, `Softmax` or
//! inference `BatchNormalization` between per-tensor dequantizations and a
//! quantization reads and writes the integers with the quantizations in its
//! [`Lowering::Requantized`]; a BatchNormalization keeps its constant
//! scale, bias, mean and variance as inputs, which its rule folds into a
//! per-channel fixed-point map.
//!
//! The region computes `yz + round((xs * ws) * (sum (xq - xz) wq + bq) /
//! ys)` when the bias scale is `xs * ws` (as quantizers make it) and the
//! weights' zero point is 0; the integer form rounds once where the float
//! one rounds each product and sum, so the two agree to one output step.
//! Regions that do not have that form (a bias of another scale, weights of
//! a non-zero zero point, per-channel scales on another axis, blocked
//! quantization, a float value read elsewhere) stay as they are.

use super::infer::Inferred;
use super::optimize::Rewrite;
use crate::ir::lowering::{
    Activation, ConvWeights, Epilogue, FusedQuantize, IntegerLowering, IntegerResidual,
    Quantization, Requantized,
};
use crate::ir::{
    AttrValue, ElemType, Graph, Lowering, Node, NodeId, Op, Tensor, Use, ValueId, ValueKind,
};
use crate::ops::{Lookup, ShapeRule};

/// Rewrites every quantized Conv, MatMul and Gemm region of `g` into a
/// `QLinearConv` or `QLinearMatMul`; returns what was done.
pub fn integer_regions(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let mut done = Vec::new();
    let mut uses = g.uses();
    for id in g.order().to_vec() {
        let rewrites = if let Some(region) = region(g, inferred, &uses, id) {
            rewrite(g, id, region)
        } else if let Some(through) = pass_through(g, inferred, &uses, id) {
            Some(take_over(g, through))
        } else if let Some(table) = lookup(g, inferred, &uses, id) {
            tabulate(g, id, table)
        } else {
            requantized(g, inferred, &uses, id).map(|r| requantize(g, id, r))
        };
        if let Some(rewrites) = rewrites {
            done.extend(rewrites);
            uses = g.uses();
        }
    }
    let removed: Vec<NodeId> = done.iter().map(|r| r.removed).collect();
    g.retain_nodes(|id, _| !removed.contains(&id));
    done
}

/// A `DequantizeLinear` that defines a value.
struct Dq {
    q: ValueId,
    scale: ValueId,
    zero: Option<ValueId>,
}

/// What a region reads and where it ends.
struct Region {
    x: Dq,
    x_elem: ElemType,
    w: Dq,
    /// The int32 bias (Conv's `B`, Gemm's `C`), already quantized.
    bias: Option<ValueId>,
    /// The `Relu` or `Clip` folded, if any, and the `QuantizeLinear`.
    act: Option<NodeId>,
    quantize: NodeId,
    y_scale: ValueId,
    y_zero: ValueId,
    range: Option<(i32, i32)>,
    /// A Gemm's weights are `[n, k]` and are transposed for QLinearMatMul.
    transpose_w: bool,
}

/// A value known at generation time ([`super::optimize::constant`]).
fn constant<'a>(g: &'a Graph, inferred: &'a Inferred, v: ValueId) -> Option<&'a Tensor> {
    super::optimize::constant(g, inferred, Some(v))
}

fn elem_of(inferred: &Inferred, v: ValueId) -> Option<ElemType> {
    inferred.types.get(v.index())?.as_ref().map(|t| t.elem)
}

/// The node reading `v` when that is its only use.
fn sole_reader(uses: &[Vec<Use>], v: ValueId) -> Option<NodeId> {
    super::optimize::sole_reader(uses, v).map(|(node, _)| node)
}

fn producer(g: &Graph, v: ValueId) -> Option<&Node> {
    producer_id(g, v).map(|n| g.node(n))
}

fn is_int8(e: Option<ElemType>) -> bool {
    matches!(e, Some(ElemType::Int8 | ElemType::Uint8))
}

/// The `DequantizeLinear` defining `v`, per tensor or per channel (not
/// blocked), of float32 scales.
fn dequantize_of(g: &Graph, inferred: &Inferred, v: ValueId) -> Option<Dq> {
    let n = producer(g, v)?;
    if !n.op.is("DequantizeLinear") || n.attr_int("block_size").is_some_and(|b| b != 0) {
        return None;
    }
    let (q, scale) = (n.input(0)?, n.input(1)?);
    (elem_of(inferred, scale) == Some(ElemType::Float) && constant(g, inferred, scale).is_some())
        .then_some(Dq { q, scale, zero: n.input(2) })
}

/// The values of the one-element constant `v`.
fn scalar(g: &Graph, inferred: &Inferred, v: ValueId) -> Option<f64> {
    match constant(g, inferred, v)?.to_f64s()?.as_slice() {
        [s] => Some(*s),
        _ => None,
    }
}

/// The value of the one-element integer constant `v`.
fn int_scalar(g: &Graph, inferred: &Inferred, v: ValueId) -> Option<i64> {
    match constant(g, inferred, v)?.to_i64s()?.as_slice() {
        [z] => Some(*z),
        _ => None,
    }
}

/// The activation of an epilogue that has nothing else (`Some(None)` when
/// it is empty, `None` when it has more).
fn only_activation(e: &Epilogue) -> Option<Option<Activation>> {
    e.residual.is_none().then_some(e.activation)
}

/// Whether the zero point `z` (absent: 0) is all zeros.
fn zero_or_absent(g: &Graph, inferred: &Inferred, z: Option<ValueId>) -> bool {
    z.is_none_or(|z| {
        constant(g, inferred, z)
            .and_then(Tensor::to_i64s)
            .is_some_and(|v| v.iter().all(|&x| x == 0))
    })
}

/// The region ending in node `id`'s quantization, if it has the form the
/// module describes.
fn region(g: &Graph, inferred: &Inferred, uses: &[Vec<Use>], id: NodeId) -> Option<Region> {
    let node = g.node(id);
    let (is_conv, is_gemm) = (node.op.is("Conv"), node.op.is("Gemm"));
    if !(is_conv || is_gemm || node.op.is("MatMul")) {
        return None;
    }
    // An activation fused into the product before inference is folded like
    // one that follows it; nothing else may have been decided yet.
    let fused = match &node.lowering {
        None => None,
        Some(Lowering::Conv(c)) if c.weights == ConvWeights::AsGiven => {
            only_activation(&c.epilogue)?
        }
        Some(Lowering::Product(p))
            if p.packed_b.is_none() && p.bias.is_none() && p.transposes.is_none() =>
        {
            only_activation(&p.epilogue)?
        }
        Some(_) => return None,
    };
    if is_gemm {
        let f = |name: &str| match node.attr(name) {
            None => Some(1.0),
            Some(AttrValue::Float(v)) => Some(*v),
            Some(_) => None,
        };
        if f("alpha") != Some(1.0)
            || f("beta") != Some(1.0)
            || node.attr_int("transA").unwrap_or(0) != 0
        {
            return None;
        }
    }
    let x = dequantize_of(g, inferred, node.input(0)?)?;
    let w = dequantize_of(g, inferred, node.input(1)?)?;
    let xs = scalar(g, inferred, x.scale)?;
    let x_elem = elem_of(inferred, x.q)?;
    if !is_int8(Some(x_elem)) || x.zero.is_some_and(|z| int_scalar(g, inferred, z).is_none()) {
        return None;
    }
    // Constant int8 weights, zero point 0, one scale or one per output
    // channel (Conv: axis 0 of [M, C, k...]; MatMul: axis 1 of [k, n];
    // Gemm: axis 0 of [n, k] when transposed, else 1).
    let wt = constant(g, inferred, w.q)?;
    let transpose_w = is_gemm && node.attr_int("transB").unwrap_or(0) != 0;
    if wt.elem != ElemType::Int8 || !zero_or_absent(g, inferred, w.zero) {
        return None;
    }
    // 2-D convolutions (the int8 kernels' NCHW) and 2-D weights of products.
    if wt.dims.len() != if is_conv { 4 } else { 2 } {
        return None;
    }
    let channel_axis = if is_conv || transpose_w { 0 } else { 1 };
    let ws = constant(g, inferred, w.scale)?.to_f64s()?;
    let channels = usize::try_from(*wt.dims.get(channel_axis)?).ok()?;
    if ws.len() != 1 {
        let axis = producer(g, node.input(1)?)?.attr_int("axis").unwrap_or(1);
        let rank = wt.dims.len() as i64;
        if ws.len() != channels || (axis + rank) % rank != channel_axis as i64 {
            return None;
        }
    }
    // The bias: int32, quantized with scale xs * ws (to f32 precision), 0.
    let bias = match node.input(2) {
        None => None,
        Some(b) => {
            let d = dequantize_of(g, inferred, b)?;
            let bt = constant(g, inferred, d.q)?;
            let bs = constant(g, inferred, d.scale)?.to_f64s()?;
            let per = |c: usize| ws[if ws.len() == 1 { 0 } else { c }];
            let matches = bt.elem == ElemType::Int32
                && bt.dims.len() == 1
                && usize::try_from(bt.dims[0]).ok() == Some(channels)
                && zero_or_absent(g, inferred, d.zero)
                && (0..channels).all(|c| {
                    let want = (xs as f32 * per(c) as f32) as f64;
                    let got = bs[if bs.len() == 1 { 0 } else { c }];
                    (got - want).abs() <= want.abs() * 1e-6
                });
            if !matches {
                return None;
            }
            Some(d.q)
        }
    };
    // The end: the quantization, perhaps after a Relu or a Clip.
    let mut y = node.output(0)?;
    let mut next = sole_reader(uses, y)?;
    let mut act = None;
    if fused.is_none() && (g.node(next).op.is("Relu") || g.node(next).op.is("Clip")) {
        act = Some(next);
        y = g.node(next).output(0)?;
        next = sole_reader(uses, y)?;
    }
    let q = g.node(next);
    if !q.op.is("QuantizeLinear") || q.attr_int("block_size").is_some_and(|b| b != 0) {
        return None;
    }
    let (y_scale, y_zero, out) = (q.input(1)?, q.input(2)?, q.output(0)?);
    let ys = scalar(g, inferred, y_scale)?;
    let yz = int_scalar(g, inferred, y_zero)? as f64;
    let out_elem = elem_of(inferred, out);
    if !is_int8(out_elem) || elem_of(inferred, y_scale) != Some(ElemType::Float) {
        return None;
    }
    let (lo, hi) = if out_elem == Some(ElemType::Int8) { (-128, 127) } else { (0, 255) };
    let bounds = match (fused, act.map(|a| g.node(a))) {
        (Some(Activation::Relu), _) => Some((0.0, f64::INFINITY)),
        (Some(Activation::Clip { min, max }), _) => Some((f64::from(min), f64::from(max))),
        (Some(_), _) => return None,
        (None, None) => None,
        (None, Some(a)) if a.op.is("Relu") => Some((0.0, f64::INFINITY)),
        (None, Some(a)) => {
            // Clip's bounds: inputs 1 and 2 (opset 11+), or attributes.
            let bound = |i: usize, name: &str, default: f64| match a.input(i) {
                Some(v) => scalar(g, inferred, v),
                None => match a.attr(name) {
                    Some(AttrValue::Float(f)) => Some(f64::from(*f)),
                    _ => Some(default),
                },
            };
            Some((bound(1, "min", f64::NEG_INFINITY)?, bound(2, "max", f64::INFINITY)?))
        }
    };
    // Quantization is monotonic: the bounds quantized bound the output.
    let q = |v: f64| (yz + (v / ys).round_ties_even()).clamp(f64::from(lo), f64::from(hi)) as i32;
    let range = bounds.map(|(mn, mx)| (q(mn), q(mx)));
    Some(Region { x, x_elem, w, bias, act, quantize: next, y_scale, y_zero, range, transpose_w })
}

/// The standard operator `op_type` at the opset `like` was resolved against.
fn standard_op(op_type: &str, like: &Op) -> Option<Op> {
    let v = like.opset_version;
    match crate::ops::lookup("", op_type, v) {
        Lookup::Found(schema) => Some(Op {
            domain: String::new(),
            op_type: op_type.to_owned(),
            overload: String::new(),
            opset_version: v,
            schema: Some(schema),
        }),
        _ => None,
    }
}

/// A new one-element constant zero point of `elem`, named after `base`.
fn add_zero(g: &mut Graph, base: &str, elem: ElemType) -> Option<ValueId> {
    let name = super::sequences::fresh(g, format!("{base}_zero_point"));
    let t = Tensor::from_bytes(name.clone(), elem, Vec::new(), vec![0u8].into()).ok()?;
    Some(g.add_initializer(name, t))
}

/// `t` (`[n, k]` of one-byte elements) transposed, as a new constant.
fn add_transposed(g: &mut Graph, t: &Tensor, base: &str) -> Option<ValueId> {
    let [n, k] = <[u64; 2]>::try_from(t.dims.as_slice()).ok()?;
    let (n, k) = (usize::try_from(n).ok()?, usize::try_from(k).ok()?);
    let bytes = t.bytes()?;
    let mut out = vec![0u8; bytes.len()];
    for j in 0..n {
        for p in 0..k {
            out[p * n + j] = bytes[j * k + p];
        }
    }
    let name = super::sequences::fresh(g, format!("{base}_transposed"));
    let t = Tensor::from_bytes(name.clone(), t.elem, vec![k as u64, n as u64], out.into()).ok()?;
    Some(g.add_initializer(name, t))
}

/// Turns node `id` into the integer operator of `r`, writing the
/// quantization's output; returns the nodes it replaced.
fn rewrite(g: &mut Graph, id: NodeId, r: Region) -> Option<Vec<Rewrite>> {
    let node = g.node(id);
    let is_conv = node.op.is("Conv");
    let op = standard_op(if is_conv { "QLinearConv" } else { "QLinearMatMul" }, &node.op)?;
    let base = node.name.clone();
    let out = g.node(r.quantize).output(0)?;
    let x_zero = match r.x.zero {
        Some(z) => z,
        None => add_zero(g, &format!("{base}_x"), r.x_elem)?,
    };
    let w_zero = match r.w.zero {
        Some(z) => z,
        None => add_zero(g, &format!("{base}_w"), ElemType::Int8)?,
    };
    let w = if r.transpose_w {
        let t = g.value(r.w.q).constant()?.clone();
        add_transposed(g, &t, &base)?
    } else {
        r.w.q
    };
    let mut inputs = vec![Some(r.x.q), Some(r.x.scale), Some(x_zero), Some(w), Some(r.w.scale)];
    inputs.extend([Some(w_zero), Some(r.y_scale), Some(r.y_zero)]);
    let mut lowering = IntegerLowering { range: r.range, ..IntegerLowering::default() };
    if is_conv {
        inputs.push(r.bias);
    } else {
        lowering.bias = r.bias;
    }
    let node = g.node_mut(id);
    node.op = op;
    node.inputs = inputs;
    if !is_conv {
        node.attributes.clear();
    }
    node.outputs = vec![Some(out)];
    node.lowering = Some(Lowering::Integer(lowering));
    g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
    let mut done = Vec::new();
    for removed in r.act.into_iter().chain([r.quantize]) {
        let removed_op = g.node(removed).op.op_type.clone();
        done.push(Rewrite { name: "qdq-into-integer-op", removed, removed_op, into: id });
    }
    Some(done)
}

/// Operators whose output values are some of their (data) input values, in
/// another place: on quantized values of one scale and zero point they give
/// what they give on the dequantized ones, quantized. Their other inputs
/// (shapes, indices, axes) are left as they are.
const MOVES_VALUES: &[&str] = &[
    "Reshape",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Transpose",
    "Identity",
    "MaxPool",
    "GlobalMaxPool",
    "Slice",
    "Gather",
    "DepthToSpace",
    "SpaceToDepth",
    "Tile",
    "Expand",
    "Concat",
];

/// A chain of value-moving nodes between a dequantization and a
/// quantization of the same parameters: the nodes from the first to the
/// last, the quantized inputs the first reads (position, value), and the
/// quantization whose output the last takes over.
struct Through {
    chain: Vec<NodeId>,
    reads: Vec<(usize, ValueId)>,
    quantize: NodeId,
}

/// The scale and zero point (as numbers) and the quantized element type of
/// a per-tensor `DequantizeLinear` or `QuantizeLinear` node.
fn params_of(g: &Graph, inferred: &Inferred, n: &Node, q: ValueId) -> Option<(f64, i64, ElemType)> {
    if n.attr_int("block_size").is_some_and(|b| b != 0) {
        return None;
    }
    let scale = scalar(g, inferred, n.input(1)?)?;
    let zero = match n.input(2) {
        Some(z) => int_scalar(g, inferred, z)?,
        None => 0,
    };
    let elem = elem_of(inferred, q)?;
    is_int8(Some(elem)).then_some((scale, zero, elem))
}

/// Whether `n` moves values (see [`MOVES_VALUES`]) and only its first
/// output is used.
fn moves_values(n: &Node, uses: &[Vec<Use>]) -> bool {
    n.op.domain.is_empty()
        && MOVES_VALUES.contains(&n.op.op_type.as_str())
        && n.outputs.iter().skip(1).flatten().all(|v| uses[v.index()].is_empty())
}

/// The chain of value-moving nodes ending in quantization `id`, from a
/// dequantization of the same parameters.
fn pass_through(g: &Graph, inferred: &Inferred, uses: &[Vec<Use>], id: NodeId) -> Option<Through> {
    let q = g.node(id);
    if !q.op.is("QuantizeLinear") {
        return None;
    }
    let want = params_of(g, inferred, q, q.output(0)?)?;
    // Up from the quantization through nodes whose output only the next reads.
    let mut chain = Vec::new();
    let mut v = q.input(0)?;
    loop {
        let ValueKind::NodeOutput { node, index: 0 } = g.value(v).kind else { return None };
        let n = g.node(node);
        if sole_reader(uses, v).is_none() || !moves_values(n, uses) {
            break;
        }
        chain.push(node);
        // Concat reads several values: it must be the first of the chain.
        if n.op.is("Concat") {
            break;
        }
        v = n.input(0)?;
    }
    chain.reverse();
    let first = g.node(*chain.first()?);
    let data = if first.op.is("Concat") { first.inputs.len() } else { 1 };
    let mut reads = Vec::new();
    for (i, v) in first.inputs.iter().enumerate().take(data) {
        let d = producer(g, (*v)?)?;
        if !d.op.is("DequantizeLinear") {
            return None;
        }
        let xq = d.input(0)?;
        if params_of(g, inferred, d, xq)? != want {
            return None;
        }
        reads.push((i, xq));
    }
    Some(Through { chain, reads, quantize: id })
}

/// Makes the chain of `t` read the quantized values and its last node
/// define the quantization's output; returns the rewrite (the quantization
/// removed).
fn take_over(g: &mut Graph, t: Through) -> Vec<Rewrite> {
    let out = g.node(t.quantize).output(0);
    let (first, last) = (t.chain[0], t.chain[t.chain.len() - 1]);
    let node = g.node_mut(first);
    for (i, v) in t.reads {
        node.inputs[i] = Some(v);
    }
    if let Some(out) = out {
        g.node_mut(last).outputs[0] = Some(out);
        g.value_mut(out).kind = ValueKind::NodeOutput { node: last, index: 0 };
    }
    let removed_op = g.node(t.quantize).op.op_type.clone();
    vec![Rewrite { name: "qdq-around-data-movement", removed: t.quantize, removed_op, into: last }]
}

/// An element-wise node between per-tensor quantizations: its quantized
/// input, the dequantization (to copy) and the quantization it ends in.
struct Table {
    index: usize,
    xq: ValueId,
    elem: ElemType,
    dequantize: NodeId,
    quantize: NodeId,
}

/// The element-wise region ending in node `id`, a function of one
/// quantized value: its other inputs are one-element constants, its output
/// has its input's shape and type and is read by a quantization alone.
fn lookup(g: &Graph, inferred: &Inferred, uses: &[Vec<Use>], id: NodeId) -> Option<Table> {
    let node = g.node(id);
    if node.lowering.is_some() || node.outputs.len() != 1 || node.subgraphs().next().is_some() {
        return None;
    }
    let rule = crate::ops::rule_for(node)?;
    if !matches!(rule.shape_rule(node), ShapeRule::SameAsInput0 | ShapeRule::Broadcast) {
        return None;
    }
    let mut found = None;
    for (i, v) in node.inputs.iter().enumerate() {
        let Some(v) = *v else { continue };
        if constant(g, inferred, v).is_some_and(|t| t.len() == 1) {
            continue;
        }
        let d = producer(g, v)?;
        let dequantize = match g.value(v).kind {
            ValueKind::NodeOutput { node, .. } if d.op.is("DequantizeLinear") => node,
            _ => return None,
        };
        if found.is_some() {
            return None;
        }
        found = Some((i, d.input(0)?, dequantize));
    }
    let (index, xq, dequantize) = found?;
    let d = g.node(dequantize);
    let x_params = params_of(g, inferred, d, xq)?;
    // Nothing constant (the whole node folds) and no broadcast.
    let y = node.output(0)?;
    let (xt, yt) =
        (inferred.types.get(xq.index())?.as_ref()?, inferred.types.get(y.index())?.as_ref()?);
    if xt.dims != yt.dims || inferred.constants.get(y.index())?.is_some() {
        return None;
    }
    let quantize = sole_reader(uses, y)?;
    let q = g.node(quantize);
    if !q.op.is("QuantizeLinear") {
        return None;
    }
    let y_params = params_of(g, inferred, q, q.output(0)?)?;
    (x_params.2 == y_params.2).then_some(Table {
        index,
        xq,
        elem: x_params.2,
        dequantize,
        quantize,
    })
}

/// Gives node `id` the table of `t`: a constant of every quantized value,
/// dequantized, the node's function, quantized, all of which inference
/// folds; the node then reads the quantized input and defines the
/// quantization's output.
fn tabulate(g: &mut Graph, id: NodeId, t: Table) -> Option<Vec<Rewrite>> {
    let (d, q, node) =
        (g.node(t.dequantize).clone(), g.node(t.quantize).clone(), g.node(id).clone());
    let out = q.output(0)?;
    let base = node.name.clone();
    // Every byte, as the input's type reads it.
    let elem = t.elem;
    let name = super::sequences::fresh(g, format!("{base}_levels"));
    let levels =
        Tensor::from_bytes(name.clone(), elem, vec![256], (0..=255u8).collect::<Vec<_>>().into())
            .ok()?;
    let levels = g.add_initializer(name, levels);
    let fresh =
        |g: &Graph, what: &str| Some(super::sequences::fresh(g, format!("{base}_table_{what}")));
    let mut dq = d.clone();
    dq.name = format!("{base}_table_dequantize");
    dq.inputs[0] = Some(levels);
    let dq = g.add_node(dq, &[fresh(g, "x")]);
    let mut f = node.clone();
    f.name = format!("{base}_table_function");
    f.inputs[t.index] = g.node(dq).output(0);
    let f = g.add_node(f, &[fresh(g, "f")]);
    let mut qn = q.clone();
    qn.name = format!("{base}_table");
    qn.inputs[0] = g.node(f).output(0);
    let qn = g.add_node(qn, &[fresh(g, "y")]);
    let table = g.node(qn).output(0)?;
    // The table's nodes go before the node, which reads it.
    let added = [dq, f, qn];
    let mut order: Vec<NodeId> = g.order().iter().copied().filter(|n| !added.contains(n)).collect();
    let at = order.iter().position(|&n| n == id)?;
    order.splice(at..at, added);
    g.set_order(order);
    let n = g.node_mut(id);
    n.inputs = vec![Some(t.xq)];
    n.outputs = vec![Some(out)];
    n.lowering = Some(Lowering::Lookup { table });
    g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
    let removed_op = q.op.op_type.clone();
    Some(vec![Rewrite {
        name: "qdq-element-wise-as-table",
        removed: t.quantize,
        removed_op,
        into: id,
    }])
}

/// Operators the int8 kernels run on quantized values with a
/// requantization ([`Lowering::Requantized`]), and how many data inputs
/// they have.
/// An inference `BatchNormalization` has one data input and four constant
/// ones (scale, bias, mean, variance), which it keeps.
const REQUANTIZED: &[(&str, usize)] = &[
    ("Add", 2),
    ("Mul", 2),
    ("AveragePool", 1),
    ("GlobalAveragePool", 1),
    ("Softmax", 1),
    ("BatchNormalization", 1),
];

/// A node between per-tensor quantizations, for [`requantize`].
struct Requant {
    reads: Vec<ValueId>,
    lowering: Requantized,
    quantize: NodeId,
}

fn quantization((scale, zero, _): (f64, i64, ElemType)) -> Option<Quantization> {
    Some(Quantization { scale: scale as f32, zero: i32::try_from(zero).ok()? })
}

/// The region of node `id` when it is one of [`REQUANTIZED`], its data
/// inputs dequantized and its output quantized, all of one element type
/// and (for the element-wise ones) one shape.
fn requantized(g: &Graph, inferred: &Inferred, uses: &[Vec<Use>], id: NodeId) -> Option<Requant> {
    let node = g.node(id);
    let &(_, n) = REQUANTIZED.iter().find(|(op, _)| node.op.is(op))?;
    let constants = if node.op.is("BatchNormalization") { 4 } else { 0 };
    if node.lowering.is_some() || node.inputs.len() != n + constants || node.outputs.len() != 1 {
        return None;
    }
    if !node.inputs[n..].iter().all(|v| v.is_some_and(|v| constant(g, inferred, v).is_some())) {
        return None;
    }
    // A constant region folds in float, except a Softmax: it folds through
    // the integer kernel, as onnxruntime (which does not fold
    // dequantizations) runs it whatever its input, since its arithmetic is
    // not the float reading's.
    let y = node.output(0)?;
    let yt = inferred.types.get(y.index())?.as_ref()?;
    if inferred.constants.get(y.index())?.is_some() && !node.op.is("Softmax") {
        return None;
    }
    let quantize = sole_reader(uses, y)?;
    let q = g.node(quantize);
    if !q.op.is("QuantizeLinear") {
        return None;
    }
    let y_params = params_of(g, inferred, q, q.output(0)?)?;
    let mut reads = Vec::new();
    let mut inputs = Vec::new();
    for v in &node.inputs[..n] {
        let d = producer(g, (*v)?)?;
        if !d.op.is("DequantizeLinear") {
            return None;
        }
        let xq = d.input(0)?;
        let params = params_of(g, inferred, d, xq)?;
        let xt = inferred.types.get(xq.index())?.as_ref()?;
        if params.2 != y_params.2 || (n == 2 && xt.dims != yt.dims) {
            return None;
        }
        reads.push(xq);
        inputs.push(quantization(params)?);
    }
    reads.extend(node.inputs[n..].iter().flatten());
    let lowering = Requantized { inputs, output: quantization(y_params)? };
    Some(Requant { reads, lowering, quantize })
}

/// Makes node `id` read the quantized inputs of `r` (and its constants), define the
/// quantization's output and carry the quantizations.
fn requantize(g: &mut Graph, id: NodeId, r: Requant) -> Vec<Rewrite> {
    let out = g.node(r.quantize).output(0);
    let node = g.node_mut(id);
    node.inputs = r.reads.into_iter().map(Some).collect();
    node.lowering = Some(Lowering::Requantized(r.lowering));
    if let Some(out) = out {
        node.outputs = vec![Some(out)];
        g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
    }
    let removed_op = g.node(r.quantize).op.op_type.clone();
    vec![Rewrite { name: "qdq-requantized", removed: r.quantize, removed_op, into: id }]
}

/// Folds each quantized `Add` (a [`Lowering::Requantized`] one) of a
/// `QLinearConv`'s output and a value computed before it into the
/// convolution's output stage ([`IntegerResidual`]): the convolution then
/// writes the sum, over the residual's buffer when the residual dies there,
/// so its own output never takes room in the arena (a ResNet block's peak
/// loses a whole activation). The convolution runs on the int8 kernels'
/// im2col path (`int8::qconv_add_runs`: packed weights, one or two spatial
/// axes, not depthwise) and its output is the `Add`'s only use, quantized
/// as the `Add` reads it. Runs after the weights are packed.
pub fn fuse_integer_residuals(g: &mut Graph, inferred: &Inferred) -> Vec<super::fuse::Fused> {
    let order: Vec<NodeId> = g.order().to_vec();
    let mut position = vec![usize::MAX; order.iter().map(|id| id.index() + 1).max().unwrap_or(0)];
    for (i, id) in order.iter().enumerate() {
        position[id.index()] = i;
    }
    let uses = g.uses();
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    let mut done = Vec::new();
    let mut removed = Vec::new();
    for (at, &id) in order.iter().enumerate() {
        let node = g.node(id);
        let Some(Lowering::Integer(l)) = &node.lowering else { continue };
        if !node.op.is("QLinearConv") || l.packed.is_none() || l.residual.is_some() {
            continue;
        }
        // Depthwise convolutions (and 3-d ones) run other kernels.
        let (Some(x), Some(w), Some(mid)) =
            (node.input(0).and_then(ty), node.input(3).and_then(ty), node.output(0))
        else {
            continue;
        };
        let group = node.attr_int("group").unwrap_or(1);
        let depthwise = usize::try_from(group)
            .is_ok_and(|gr| x.dims.get(1) == Some(&gr) && w.dims.first() == Some(&gr));
        if depthwise || !matches!(x.rank(), 3 | 4) {
            continue;
        }
        // The convolution's own output quantization (zero point 0 when absent).
        let conv_scale = node.input(6).and_then(|v| scalar(g, inferred, v));
        let conv_zero = node.input(7).map_or(Some(0), |v| int_scalar(g, inferred, v));
        let (Some(conv_scale), Some(conv_zero)) = (conv_scale, conv_zero) else { continue };
        // (The Add's own DequantizeLinear of the output is dead by now.)
        let Some(aid) = live_reader(g, &uses, mid) else { continue };
        let add = g.node(aid);
        let Some(Lowering::Requantized(q)) = &add.lowering else { continue };
        if !add.op.is("Add") || add.inputs.len() != 2 || q.inputs.len() != 2 {
            continue;
        }
        let Some(index) = add.inputs.iter().position(|v| *v == Some(mid)) else { continue };
        let (Some(r), Some(sum)) = (add.inputs[1 - index], add.output(0)) else { continue };
        // The Add must read the output as the convolution wrote it, and the
        // residual must be ready before the convolution runs.
        let read_as = q.inputs[index];
        let before = match g.value(r).kind {
            ValueKind::NodeOutput { node, .. } => position[node.index()] < at,
            _ => true,
        };
        if r == mid
            || Some(r) == node.input(0)
            || !before
            || read_as.scale != conv_scale as f32
            || i64::from(read_as.zero) != conv_zero
            || ty(r) != ty(mid)
        {
            continue;
        }
        let residual = IntegerResidual {
            value: r,
            residual: q.inputs[1 - index],
            sum: q.output,
            conv_first: index == 0,
        };
        let conv = g.node_mut(id);
        if let Some(Lowering::Integer(l)) = &mut conv.lowering {
            l.residual = Some(residual);
        }
        conv.outputs[0] = Some(sum);
        g.value_mut(sum).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(super::fuse::Fused {
            producer: id,
            consumer: aid,
            consumer_op: "Add".to_owned(),
            intermediate: mid,
            output: sum,
        });
        removed.push(aid);
    }
    g.retain_nodes(|id, _| !removed.contains(&id));
    done
}

/// Fuses the float32 ends of the int8 products of one row (a dense layer
/// at batch 1, as an autoencoder's first and last): a per-tensor
/// `QuantizeLinear` whose only reader is such a `QLinearMatMul` is
/// computed by it as it reads its input, a `DequantizeLinear` that is its
/// output's only reader as it writes its output ([`IntegerLowering`]'s
/// `quantize_input`, `dequantize_output`; `int8::qmatmul_float`). The
/// quantized input or output is then never held whole: a quantized model
/// with float ends needs no arena for them. Products of more rows keep
/// their quantized input, which they would quantize again per strip of
/// columns.
pub fn fuse_integer_ends(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let float = |v: ValueId| elem_of(inferred, v) == Some(ElemType::Float);
    // A per-tensor quantization of float32 scale, plain (no attribute
    // changing its arithmetic), of `q` (the quantized value).
    let plain = |n: &Node, q: ValueId| {
        let attrs_ok = n.attributes.iter().all(|a| matches!(a.name.as_str(), "axis" | "saturate"));
        let scale_ok = n.input(1).is_some_and(float);
        let params = params_of(g, inferred, n, q).and_then(quantization);
        params.filter(|_| n.op.domain.is_empty() && attrs_ok && scale_ok)
    };
    let mut done = Vec::new();
    let mut edits = Vec::new();
    for (id, node) in g.nodes() {
        let Some(Lowering::Integer(l)) = &node.lowering else { continue };
        if !node.op.is("QLinearMatMul") || l.packed.is_none() || l.residual.is_some() {
            continue;
        }
        let (Some(a), Some(y)) = (node.input(0), node.output(0)) else { continue };
        let one_row = inferred.types.get(a.index()).and_then(|t| t.as_ref()).is_some_and(|t| {
            t.rank() >= 2 && t.dims[..t.rank() - 1].iter().product::<usize>() == 1
        });
        let quantize = producer(g, a)
            .filter(|q| one_row && l.quantize_input.is_none() && q.op.is("QuantizeLinear"))
            .filter(|q| live_reader(g, &uses, a) == Some(id) && q.input(0).is_some_and(float))
            .and_then(|q| {
                let fused = FusedQuantize { q: plain(q, a)?, elem: elem_of(inferred, a)? };
                Some((fused, q.input(0)?, producer_id(g, a)?))
            });
        let dequantize = live_reader(g, &uses, y)
            .map(|d| (d, g.node(d)))
            .filter(|(_, d)| l.dequantize_output.is_none() && d.op.is("DequantizeLinear"))
            .filter(|(_, d)| d.input(0) == Some(y) && d.output(0).is_some_and(float))
            .and_then(|(d, dn)| Some((plain(dn, y)?, dn.output(0)?, d)));
        if quantize.is_some() || dequantize.is_some() {
            edits.push((id, quantize, dequantize));
        }
    }
    let mut removed = Vec::new();
    // The dead readers of a value no longer computed go with it.
    let readers = |v: ValueId| -> Vec<NodeId> {
        uses.get(v.index())
            .into_iter()
            .flatten()
            .filter_map(|u| match u {
                Use::Input { node, .. } => Some(*node),
                _ => None,
            })
            .collect()
    };
    for (id, quantize, dequantize) in edits {
        if let Some((fused, x, q)) = quantize {
            let a = g.node(id).input(0);
            removed.extend(a.into_iter().flat_map(readers).filter(|&n| n != id));
            removed.push(q);
            let node = g.node_mut(id);
            node.inputs[0] = Some(x);
            if let Some(Lowering::Integer(l)) = &mut node.lowering {
                l.quantize_input = Some(fused);
            }
            done.push(Rewrite {
                name: "fuse-integer-ends",
                removed: q,
                removed_op: "QuantizeLinear".to_owned(),
                into: id,
            });
        }
        if let Some((q, out, d)) = dequantize {
            let y = g.node(id).output(0);
            removed.extend(y.into_iter().flat_map(readers).filter(|&n| n != d));
            let node = g.node_mut(id);
            node.outputs[0] = Some(out);
            if let Some(Lowering::Integer(l)) = &mut node.lowering {
                l.dequantize_output = Some(q);
            }
            g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
            done.push(Rewrite {
                name: "fuse-integer-ends",
                removed: d,
                removed_op: "DequantizeLinear".to_owned(),
                into: id,
            });
            removed.push(d);
        }
    }
    g.retain_nodes(|id, _| !removed.contains(&id));
    done
}

/// The one node reading `v` that is not dead (a node whose outputs nothing
/// reads, as the regions' rewrites leave them until planning), when `v`
/// has no other use.
fn live_reader(g: &Graph, uses: &[Vec<Use>], v: ValueId) -> Option<NodeId> {
    let dead = |n: NodeId| {
        g.node(n)
            .outputs
            .iter()
            .flatten()
            .all(|o| uses.get(o.index()).is_none_or(Vec::is_empty) && !g.outputs.contains(o))
    };
    let mut readers = uses.get(v.index()).into_iter().flatten().filter_map(|u| match u {
        Use::Input { node, .. } if !dead(*node) => Some(Some(*node)),
        Use::Input { .. } => None,
        _ => Some(None),
    });
    match (readers.next(), readers.next()) {
        (Some(Some(node)), None) => Some(node),
        _ => None,
    }
}

/// The node defining `v`.
fn producer_id(g: &Graph, v: ValueId) -> Option<NodeId> {
    match g.value(v).kind {
        ValueKind::NodeOutput { node, .. } => Some(node),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::ir::{Graph, Lowering};
    use crate::passes::pipeline::{self, Config};

    /// A model of the default domain at `opset` (the text syntax).
    fn graph_at(opset: u32, src: &str) -> Graph {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{src}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
        crate::passes::prepare(&model).expect("test model is valid").model.graph
    }

    /// The values of graph output `k` as written (float regions) and after
    /// the pipeline, with the graph it left.
    fn both(src: &str, k: usize) -> (Vec<i64>, Vec<i64>, Graph) {
        both_at(13, src, k)
    }

    /// [`both`] for a model at `opset`.
    fn both_at(opset: u32, src: &str, k: usize) -> (Vec<i64>, Vec<i64>, Graph) {
        let config = Config::default();
        let written = graph_at(opset, src);
        let before = pipeline::infer(&written, &config);
        let mut g = graph_at(opset, src);
        let after = pipeline::run(&mut g, &config, &[]).inferred;
        assert!(after.is_complete(), "{:?} {:?}", after.errors, after.unsupported);
        let value = |g: &Graph, i: &crate::passes::infer::Inferred| {
            let v = g.outputs[k];
            i.constants[v.index()].as_ref().expect("folded").to_i64s().expect("integers")
        };
        (value(&written, &before), value(&g, &after), g)
    }

    fn ops(g: &Graph) -> Vec<&str> {
        g.nodes().map(|(_, n)| n.op.op_type.as_str()).collect()
    }

    /// Values 0, 1, ... spread over `lo..=hi`.
    fn spread(n: usize, lo: i64, hi: i64, seed: i64) -> String {
        let span = hi - lo + 1;
        let v: Vec<String> = (0..n as i64)
            .map(|i| (lo + (i * 37 + seed * 11).rem_euclid(span)).to_string())
            .collect();
        v.join(", ")
    }

    const CONV: &str = "g (float[1, 3] u) => (uint8[1, 2, 4, 4] y, float[1, 3] t)
        <uint8[1, 3, 4, 4] xq = {XQ}, float xs = {0.05}, uint8 xz = {128},
         int8[2, 3, 3, 3] wq = {WQ}, float[2] ws = {0.01, 0.02}, int8[2] wz = {0, 0},
         int32[2] bq = {-300, 450}, float[2] bs = {BS}, int32[2] bz = {0, 0},
         float ys = {0.03}, uint8 yz = {100}>
        {
          x = DequantizeLinear (xq, xs, xz)
          w = DequantizeLinear <axis: int = 0> (wq, ws, wz)
          b = DequantizeLinear <axis: int = 0> (bq, bs, bz)
          c = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)
          r = Relu (c)
          y = QuantizeLinear (r, ys, yz)
          t = Neg (u)
        }";

    fn conv(bias_scales: &str) -> String {
        CONV.replace("XQ", &spread(48, 0, 255, 1))
            .replace("WQ", &spread(54, -127, 127, 2))
            .replace("BS", bias_scales)
    }

    #[test]
    fn a_qdq_conv_and_relu_run_as_one_integer_convolution() {
        let (written, rewritten, g) = both(&conv("0.0005, 0.001"), 0);
        assert_eq!(
            ops(&g),
            ["DequantizeLinear", "DequantizeLinear", "DequantizeLinear", "QLinearConv", "Neg"]
        );
        let (_, conv) = g.nodes().find(|(_, n)| n.op.is("QLinearConv")).expect("rewritten");
        let Some(Lowering::Integer(l)) = &conv.lowering else { panic!("lowered") };
        // The Relu: quantized values below the zero point (100) are cut.
        assert_eq!(l.range, Some((100, 255)));
        assert!(written.contains(&100) && written.iter().any(|&v| v > 100));
        // One rounding instead of many: at most one step apart.
        for (a, b) in written.iter().zip(&rewritten) {
            assert!((a - b).abs() <= 1, "{written:?}\n{rewritten:?}");
        }
    }

    #[test]
    fn a_bias_of_another_scale_keeps_the_float_region() {
        let (_, _, g) = both(&conv("0.0005, 0.002"), 0);
        assert!(ops(&g).contains(&"Conv") && !ops(&g).contains(&"QLinearConv"));
    }

    #[test]
    fn a_qdq_gemm_becomes_a_product_with_its_bias_and_clip() {
        let src = format!(
            "g (float[1, 3] u) => (int8[2, 3] y, float[1, 3] t)
             <int8[2, 4] aq = {{{}}}, float s = {{0.1}}, int8 z = {{3}},
              int8[3, 4] wq = {{{}}}, float[3] ws = {{0.02, 0.01, 0.04}}, int8[3] wz = {{0, 0, 0}},
              int32[3] bq = {{50, -70, 20}}, float[3] bs = {{0.002, 0.001, 0.004}}, int32[3] bz = {{0, 0, 0}},
              float ys = {{0.05}}, int8 yz = {{-5}}, float lo = {{-1}}, float hi = {{2}}>
             {{
               a = DequantizeLinear (aq, s, z)
               w = DequantizeLinear <axis: int = 0> (wq, ws, wz)
               b = DequantizeLinear <axis: int = 0> (bq, bs, bz)
               c = Gemm <transB: int = 1> (a, w, b)
               r = Clip (c, lo, hi)
               y = QuantizeLinear (r, ys, yz)
               t = Neg (u)
             }}",
            spread(8, -128, 127, 3),
            spread(12, -127, 127, 4)
        );
        let (written, rewritten, g) = both(&src, 0);
        let (_, mm) = g.nodes().find(|(_, n)| n.op.is("QLinearMatMul")).expect("rewritten");
        let Some(Lowering::Integer(l)) = &mm.lowering else { panic!("lowered") };
        // Clip's bounds quantized: -5 + (-1 / 0.05) and -5 + 2 / 0.05.
        assert_eq!(l.range, Some((-25, 35)));
        assert!(l.bias.is_some());
        for (a, b) in written.iter().zip(&rewritten) {
            assert!((a - b).abs() <= 1, "{written:?}\n{rewritten:?}");
        }
    }

    #[test]
    fn data_movement_between_equal_quantizations_reads_the_integers() {
        let src = format!(
            "g (float[1, 3] u) => (uint8[1, 8] y, float[1, 3] t)
             <uint8[1, 2, 4, 4] xq = {{{}}}, float s = {{0.1}}, uint8 z = {{9}}, int64[2] shape = {{1, 8}}>
             {{
               x = DequantizeLinear (xq, s, z)
               p = MaxPool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (x)
               f = Reshape (p, shape)
               y = QuantizeLinear (f, s, z)
               t = Neg (u)
             }}",
            spread(32, 0, 255, 5)
        );
        let (written, rewritten, g) = both(&src, 0);
        // The quantization moved back to the MaxPool's input, then away.
        assert_eq!(ops(&g), ["DequantizeLinear", "MaxPool", "Reshape", "Neg"]);
        assert_eq!(written, rewritten);
    }

    /// An autoencoder's `Gemm -> Q -> DQ -> BatchNormalization -> Q`: the
    /// normalisation maps each channel's integers (`int8::qaffine`, tested
    /// against the float reading there and end to end in
    /// `tests/models/quantized_mlp`); its constants stay inputs of the node,
    /// read at generation time only. A constant region folds in float.
    #[test]
    fn a_qdq_batch_norm_becomes_an_integer_map() {
        let src = "g (int8[2, 4, 3] xq) => (int8[2, 4, 3] y)
             <float xs = {0.07}, int8 xz = {-9},
              float[4] gamma = {1.5, -0.75, 0, 2.25}, float[4] beta = {0.1, -2, 0.5, 3},
              float[4] mean = {0.2, -1, 4, 0}, float[4] var = {0.5, 2, 1, 0.01},
              float ys = {0.11}, int8 yz = {12}>
             {
               x = DequantizeLinear (xq, xs, xz)
               b = BatchNormalization <epsilon: float = 0.001> (x, gamma, beta, mean, var)
               y = QuantizeLinear (b, ys, yz)
             }";
        let mut g = graph_at(13, src);
        let after = pipeline::run(&mut g, &Config::default(), &[]).inferred;
        assert!(after.is_complete(), "{:?} {:?}", after.errors, after.unsupported);
        // The DequantizeLinear is dead (planning drops it).
        assert_eq!(ops(&g), ["DequantizeLinear", "BatchNormalization"]);
        let (_, bn) = g.nodes().find(|(_, n)| n.op.is("BatchNormalization")).expect("kept");
        let Some(Lowering::Requantized(q)) = &bn.lowering else { panic!("{:?}", bn.lowering) };
        assert_eq!(q.inputs.len(), 1);
        assert_eq!((q.inputs[0].zero, q.output.zero), (-9, 12));
        assert_eq!(bn.inputs.len(), 5);
    }

    /// A residual block's `QLinearConv -> Add(., x)`: the Add moves into
    /// the convolution's output stage, which then defines the sum and
    /// reads the residual as an operand (and a plan may give the sum the
    /// residual's buffer). Values: `tests/models/quantized_residual`.
    #[test]
    fn a_quantized_residual_add_joins_the_convolution_before_it() {
        let src = format!(
            "g (int8[1, 2, 4, 4] xq, int8[1, 2, 4, 4] rq) => (int8[1, 2, 4, 4] y)
             <float xs = {{0.05}}, int8 xz = {{-3}}, int8[2, 2, 3, 3] wq = {{{}}},
              float[2] ws = {{0.01, 0.02}}, int8[2] wz = {{0, 0}},
              float cs = {{0.07}}, int8 cz = {{4}}, float rs = {{0.03}}, int8 rz = {{-1}},
              float ys = {{0.09}}, int8 yz = {{2}}>
             {{
               x = DequantizeLinear (xq, xs, xz)
               w = DequantizeLinear <axis: int = 0> (wq, ws, wz)
               c = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
               cq = QuantizeLinear (c, cs, cz)
               cd = DequantizeLinear (cq, cs, cz)
               r = DequantizeLinear (rq, rs, rz)
               s = Add (r, cd)
               y = QuantizeLinear (s, ys, yz)
             }}",
            spread(36, -127, 127, 7)
        );
        let mut g = graph_at(13, &src);
        let after = pipeline::run(&mut g, &Config::default(), &[]).inferred;
        assert!(after.is_complete(), "{:?} {:?}", after.errors, after.unsupported);
        assert!(!ops(&g).contains(&"Add"), "{:?}", ops(&g));
        let (_, conv) = g.nodes().find(|(_, n)| n.op.is("QLinearConv")).expect("rewritten");
        let Some(Lowering::Integer(l)) = &conv.lowering else { panic!("lowered") };
        let r = l.residual.expect("fused");
        assert_eq!((r.residual.zero, r.sum.zero, r.conv_first), (-1, 2, false));
        assert_eq!(Some(r.value), g.inputs.get(1).copied());
        assert_eq!(conv.output(0), g.outputs.first().copied());
    }

    #[test]
    fn the_float_ends_of_a_one_row_product_join_it() {
        // `y` is one row: its quantization and dequantization go into the
        // product. `z` has two rows: its input stays quantized (it would be
        // quantized again per strip), its dequantization joins.
        let src = format!(
            "g (float[1, 8] x, float[2, 8] u) => (float[1, 4] y, float[2, 4] z)
             <float xs = {{0.05}}, int8 xz = {{-3}}, int8[8, 4] wq = {{{}}}, float ws = {{0.01}},
              int8[8, 4] vq = {{{}}}, float ys = {{0.09}}, int8 yz = {{2}}>
             {{
               xq = QuantizeLinear (x, xs, xz)
               xd = DequantizeLinear (xq, xs, xz)
               w = DequantizeLinear (wq, ws)
               p = MatMul (xd, w)
               pq = QuantizeLinear (p, ys, yz)
               y = DequantizeLinear (pq, ys, yz)
               uq = QuantizeLinear (u, xs, xz)
               ud = DequantizeLinear (uq, xs, xz)
               v = DequantizeLinear (vq, ws)
               r = MatMul (ud, v)
               rq = QuantizeLinear (r, ys, yz)
               z = DequantizeLinear (rq, ys, yz)
             }}",
            spread(32, -127, 127, 5),
            spread(32, -127, 127, 6)
        );
        let mut g = graph_at(13, &src);
        let after = pipeline::run(&mut g, &Config::default(), &[]).inferred;
        assert!(after.is_complete(), "{:?} {:?}", after.errors, after.unsupported);
        // (Dead nodes stay until planning.)
        let uses = g.uses();
        let live: Vec<&str> = g
            .nodes()
            .filter(|(_, n)| n.outputs.iter().flatten().any(|v| !uses[v.index()].is_empty()))
            .map(|(_, n)| n.op.op_type.as_str())
            .collect();
        assert_eq!(live.iter().filter(|&&o| o == "QuantizeLinear").count(), 1, "{live:?}");
        assert!(!live.contains(&"DequantizeLinear"), "{live:?}");
        let products: Vec<_> = g.nodes().filter(|(_, n)| n.op.is("QLinearMatMul")).collect();
        assert_eq!(products.len(), 2);
        for (_, n) in products {
            let Some(Lowering::Integer(l)) = &n.lowering else { panic!("lowered") };
            let one_row = n.input(0) == g.inputs.first().copied();
            let q = l.quantize_input.map(|f| (f.q.scale, f.q.zero, f.elem));
            assert_eq!(q, one_row.then_some((0.05, -3, crate::ir::ElemType::Int8)));
            let d = l.dequantize_output.expect("dequantization fused");
            assert_eq!((d.scale, d.zero), (0.09, 2));
            let out = g.outputs[usize::from(!one_row)];
            assert_eq!(n.output(0), Some(out));
            let ty = after.types[out.index()].as_ref().expect("typed");
            assert_eq!(ty.elem, crate::ir::ElemType::Float);
        }
    }

    /// `DequantizeLinear -> Softmax -> QuantizeLinear` with `ELEM` data,
    /// input quantization `XS`, `XZ`, output `YS`, `YZ`.
    const SOFTMAX: &str = "g (float[1, 3] u) => (ELEM[DIMS] y, float[1, 3] t)
        <ELEM[DIMS] xq = {XQ}, float xs = {XS}, ELEM xz = {XZ},
         float ys = {YS}, ELEM yz = {YZ}>
        {
          x = DequantizeLinear (xq, xs, xz)
          s = Softmax <axis: int = AXIS> (x)
          y = QuantizeLinear (s, ys, yz)
          t = Neg (u)
        }";

    /// A quantized Softmax and onnxruntime's output for it.
    struct Case {
        opset: u32,
        elem: &'static str,
        dims: &'static str,
        xq: &'static str,
        xs: &'static str,
        xz: &'static str,
        axis: &'static str,
        want: &'static [i64],
    }

    /// onnxruntime runs a quantized Softmax as its QLinearSoftmax, whose
    /// results differ from the float reading: it takes `floor(1 / ys)` as
    /// the output multiplier, 254 for the usual `ys = 1/255` (`f32`), and
    /// exponentials from a table. The expected values are onnxruntime
    /// 1.32's outputs for these models (its optimized graph is one
    /// QLinearSoftmax), with `xq` a graph input so it cannot fold them.
    #[test]
    fn a_qdq_softmax_computes_what_onnxruntime_does() {
        let ys = "0.003921569"; // f32(1/255)
        let levels = "200, 10, 128, 255, 130, 129, 0, 17, 255, 254, 3, 250";
        let cases = [
            Case {
                opset: 13,
                elem: "int8",
                dims: "2, 6",
                xq: "-20, 5, 40, 41, 0, -128, 100, 100, 90, 127, 3, 60",
                xs: "0.1",
                xz: "3",
                axis: "-1",
                want: &[-128, -124, -10, 2, -126, -128, -113, -113, -123, 91, -128, -128],
            },
            // Along a middle axis (one-axis semantics), uint8.
            Case {
                opset: 13,
                elem: "uint8",
                dims: "2, 3, 2",
                xq: levels,
                xs: "0.05",
                xz: "128",
                axis: "1",
                want: &[240, 0, 7, 254, 7, 0, 0, 0, 254, 140, 0, 114],
            },
            // Before opset 13: rows are everything from `axis` on.
            Case {
                opset: 11,
                elem: "uint8",
                dims: "2, 3, 2",
                xq: levels,
                xs: "0.05",
                xz: "128",
                axis: "1",
                want: &[15, 0, 0, 238, 0, 0, 0, 0, 93, 89, 0, 72],
            },
        ];
        for Case { opset, elem, dims, xq, xs, xz, axis, want } in cases {
            let yz = if elem == "int8" { "-128" } else { "0" };
            let src = SOFTMAX
                .replace("ELEM", elem)
                .replace("DIMS", dims)
                .replace("XQ", xq)
                .replace("XS", xs)
                .replace("XZ", xz)
                .replace("YS", ys)
                .replace("YZ", yz)
                .replace("AXIS", axis);
            let (written, rewritten, g) = both_at(opset, &src, 0);
            let (_, sm) = g.nodes().find(|(_, n)| n.op.is("Softmax")).expect("kept");
            assert!(matches!(sm.lowering, Some(Lowering::Requantized(_))), "{elem} {dims}");
            assert_eq!(rewritten, want, "{elem} {dims} opset {opset}");
            // The float reading rounds p * 255 instead: not what onnxruntime gives.
            assert_ne!(written, want, "{elem} {dims} opset {opset}");
        }
    }
}
