//! Rewrites that need values known at generation time, so they run after a
//! first inference has folded constants; each is small, named, and removes a
//! node whose work another node can do for free.
//!
//! * **Pad into Conv** ([`fold_pads`]): a zero `Pad` of the spatial axes whose
//!   only consumer is a `Conv` becomes part of the Conv's own padding (the
//!   Conv reads zeros there anyway), so the padded copy is never made.
//! * **BatchNormalization into Conv/Gemm** ([`fold_batch_norms`]): inference
//!   BatchNormalization is `y = x * s + t` per channel, with
//!   `s = scale / sqrt(var + epsilon)` and `t = B - mean * s`. When its input
//!   comes from a `Conv` or `Gemm` with constant weights and no other use, the
//!   scale goes into the weights and the shift into the bias: one pass over
//!   the tensor and one buffer less. The folded weights are rounded once to
//!   f32, as onnxruntime's own fusion does; results differ from the unfolded
//!   graph by float rounding only.
//!
//! * **Transposes into MatMul** ([`fold_transposes`]): a `Transpose` whose
//!   only reader is an f32 `MatMul` operand, or whose input is a `MatMul`'s
//!   output read by nothing else (with the last axis kept last), becomes a
//!   stride pattern of the product: the operand is read, or the output
//!   written, in place. Attention's head split and merge cost no copies.
//!
//! * **Add into MatMul** ([`fold_matmul_bias`]): an `Add` of a constant row
//!   vector to an f32 `MatMul`'s output (the bias of a linear layer) is added
//!   by the product's epilogue, in the same pass.
//!
//! * **Erf GELU into one Gelu** ([`fold_erf_gelu`]): the chain exporters
//!   write for exact GELU, `Div(x, sqrt 2)`, `Erf`, `Add 1`, and two `Mul`s by
//!   `x` and `0.5` (in either association), on f32 becomes one `Gelu`
//!   (`approximate = "none"`): one vectorised pass over the tensor instead of
//!   five, and four buffers less. Results differ by float rounding only.
//!
//! * **SiLU into one Swish** ([`fold_silu`]): `Mul(x, Sigmoid(x))` on f32
//!   becomes one `Swish` (alpha 1), computed by the same vectorised routine
//!   as a `Sigmoid` then a `Mul`, in one pass and without the gate's buffer;
//!   after a product it then fuses into the product's epilogue.
//!
//! * **Tanh GELU into one Gelu** ([`fold_tanh_gelu`]): the eight or nine
//!   nodes of `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³)))` on f32
//!   become one `Gelu` (`approximate = "tanh"`), likewise.
//!
//! * **Scale and mask into Softmax** ([`fold_softmax_prologue`]): the `Div`
//!   by a constant and the `Where` with a mask before an f32 `Softmax` over
//!   the last axis (attention scores) are done by the Softmax on each row.
//!
//! * **Decomposed LayerNorm into one LayerNormalization**
//!   ([`fold_layer_norms`]): the nine nodes older exporters write,
//!   `ReduceMean`, `Sub`, `Pow 2`, `ReduceMean`, `Add eps`, `Sqrt`, `Div`,
//!   `Mul gamma`, `Add beta` over the last axis of an f32 tensor, become one
//!   `LayerNormalization`: one kernel, no broadcast passes, eight buffers
//!   less. Results differ by float rounding only.
//!
//! * **LSTM weights regrouped** ([`pack_lstm_weights`]): constant f32 `W` and
//!   `R` of an LSTM are regrouped once, here, into the layout the run-time
//!   kernel's 8-lane products read, and stored with the weights (an internal
//!   ninth input); the kernel then needs no scratch for them.
//!
//! * **Conv weights in panels** ([`pack_conv_weights`]): constant f32
//!   weights of a 2-D Conv of group 1 are laid out once, here, in panels of
//!   8 filters (an internal fourth input), so a register tile's rows are
//!   adjacent in memory; long filters (`C * kh * kw` of thousands) otherwise
//!   put them in the same L1 sets.
//!
//! * **ConvTranspose weights transposed** ([`pack_conv_transpose_weights`]):
//!   constant f32 weights of a 1-D or 2-D ConvTranspose are transposed per
//!   group and laid out once, here, in the product's panels; the kernel
//!   then runs it as a product over the channels and a scatter of the
//!   columns into the output.
//!
//! * **Winograd 3x3 convolutions** ([`winograd_convs`]): the constant f32
//!   weights of a 3x3 stride-1 Conv of group 1 with enough channels are
//!   transformed once, here, for F(2x2, 3x3) (an internal sixth input): the
//!   kernel then does 16 products per tile where the direct sum does 36.
//!
//! * **MatMul/Gemm B in strips** ([`pack_matmul_weights`]): the constant f32
//!   B of a product is laid out once, here, in the 32-column strips the
//!   micro-kernels read (an internal fourth input), so no run copies it.
//!
//! * **int8 weights packed** ([`pack_int8_weights`]): the constant int8
//!   weights of a `QLinearMatMul` or `QLinearConv` on the int8 kernels, laid
//!   out by the runtime's `int8::pack_weights` / `pack_conv_weights` with
//!   their column sums (the node's `IntegerLowering` names the copy).
//!
//! All keep the graph's outputs and every other node as they are. The caller
//! runs inference again after a rewrite.

use crate::ir::lowering::{
    ConvLowering, ConvWeights, IntegerLowering, ProductLowering, SoftmaxMask, SoftmaxPrologue,
};
use crate::ir::{
    AttrValue, Attribute, ElemType, Graph, Lowering, Node, NodeId, Tensor, Use, ValueId, ValueKind,
};
use crate::ops::Lookup;
use crate::passes::infer::Inferred;

/// One rewrite done: `removed` (a node of type `removed_op`) now runs as part
/// of `into`.
#[derive(Clone, Debug, PartialEq)]
pub struct Rewrite {
    pub name: &'static str,
    pub removed: NodeId,
    pub removed_op: String,
    pub into: NodeId,
}

/// Runs every rewrite of this module over the main graph; returns what was done.
pub fn optimize(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let mut done = fold_pads(g, inferred);
    done.extend(fold_batch_norms(g, inferred));
    done.extend(fold_transposes(g, inferred));
    done.extend(fold_matmul_bias(g, inferred));
    done.extend(fold_erf_gelu(g, inferred));
    done.extend(fold_silu(g, inferred));
    done.extend(fold_tanh_gelu(g, inferred));
    done.extend(fold_softmax_prologue(g, inferred));
    done.extend(fold_layer_norms(g, inferred));
    let removed: Vec<NodeId> = done.iter().map(|r| r.removed).collect();
    g.retain_nodes(|id, _| !removed.contains(&id));
    done
}

/// The node reading `v` when that is its only use (not a graph output, not
/// captured): `(node, input index)`.
pub(super) fn sole_reader(uses: &[Vec<Use>], v: ValueId) -> Option<(NodeId, usize)> {
    match uses.get(v.index()).map(Vec::as_slice) {
        Some([Use::Input { node, index }]) => Some((*node, *index)),
        _ => None,
    }
}

pub(super) fn constant<'a>(
    g: &'a Graph,
    inferred: &'a Inferred,
    v: Option<ValueId>,
) -> Option<&'a Tensor> {
    let v = v?;
    inferred.constants.get(v.index())?.as_ref().or_else(|| g.value(v).constant())
}

fn string_attr<'a>(node: &'a crate::ir::Node, name: &str) -> Option<&'a [u8]> {
    match node.attr(name) {
        Some(AttrValue::String(s)) => Some(s),
        _ => None,
    }
}

/// The lowering of a `Gemm` or `MatMul`, created empty when the node has
/// none yet; `None` for a node lowered otherwise.
fn product_mut(node: &mut Node) -> Option<&mut ProductLowering> {
    Lowering::product_in(&mut node.lowering)
}

/// The lowering of a `Conv`, created empty when the node has none yet.
fn conv_mut(node: &mut Node) -> Option<&mut ConvLowering> {
    Lowering::conv_in(&mut node.lowering)
}

/// Whether a `Conv` reads its weights as the model gives them.
fn weights_as_given(node: &Node) -> bool {
    match &node.lowering {
        None => true,
        Some(Lowering::Conv(c)) => c.weights == ConvWeights::AsGiven,
        Some(_) => false,
    }
}

/// Whether `node` has an epilogue (a fused residual or activation).
fn has_epilogue(node: &Node) -> bool {
    node.lowering.as_ref().and_then(Lowering::epilogue).is_some_and(|e| !e.is_empty())
}

/// The product lowering of `node`, if it has one.
fn product_of(node: &Node) -> Option<&ProductLowering> {
    node.lowering.as_ref().and_then(Lowering::as_product)
}

fn set_attr(node: &mut crate::ir::Node, name: &str, value: AttrValue) {
    match node.attributes.iter_mut().find(|a| a.name == name) {
        Some(a) => a.value = value,
        None => node.attributes.push(Attribute {
            name: name.to_owned(),
            value,
            doc_string: String::new(),
        }),
    }
}

/// The spatial `(begin, end)` pads of a zero, constant-mode `Pad` over a
/// tensor of `rank` dims, when it pads nothing on the batch and channel axes
/// and crops nothing.
fn zero_spatial_pads(
    g: &Graph,
    inferred: &Inferred,
    pad: &crate::ir::Node,
    rank: usize,
) -> Option<Vec<(i64, i64)>> {
    if string_attr(pad, "mode").is_some_and(|m| m != b"constant") || rank < 3 {
        return None;
    }
    let (pads, value, axes) = if pad.op.since_version() < 11 {
        let Some(AttrValue::Ints(p)) = pad.attr("pads") else { return None };
        let value = match pad.attr("value") {
            Some(AttrValue::Float(f)) => f64::from(*f),
            _ => 0.0,
        };
        (p.clone(), value, None)
    } else {
        let pads = constant(g, inferred, pad.input(1))?.to_i64s()?;
        let value = match pad.input(2) {
            None => 0.0,
            Some(v) => match constant(g, inferred, Some(v))?.to_f64s()?.as_slice() {
                [x] => *x,
                _ => return None,
            },
        };
        let axes = match pad.input(3) {
            None => None,
            Some(v) => Some(constant(g, inferred, Some(v))?.to_i64s()?),
        };
        (pads, value, axes)
    };
    if value != 0.0 {
        return None;
    }
    let r = i64::try_from(rank).ok()?;
    let axes: Vec<usize> = match axes {
        None => (0..rank).collect(),
        Some(a) => a
            .iter()
            .map(|&x| usize::try_from(if x < 0 { x + r } else { x }).ok().filter(|&x| x < rank))
            .collect::<Option<_>>()?,
    };
    if pads.len() != 2 * axes.len() {
        return None;
    }
    let mut per_axis = vec![(0i64, 0i64); rank];
    for (i, &axis) in axes.iter().enumerate() {
        let (b, e) = (pads[i], pads[i + axes.len()]);
        if b < 0 || e < 0 {
            return None;
        }
        per_axis[axis].0 += b;
        per_axis[axis].1 += e;
    }
    if per_axis[..2] != [(0, 0), (0, 0)] {
        return None;
    }
    Some(per_axis[2..].to_vec())
}

/// Folds each zero spatial `Pad` into the `Conv` that alone reads it.
pub fn fold_pads(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in g.order().to_vec().iter() {
        let pad = g.node(id);
        if !pad.op.is("Pad") || pad.outputs.len() != 1 {
            continue;
        }
        let (Some(x), Some(y)) = (pad.input(0), pad.output(0)) else { continue };
        let Some((cid, 0)) = sole_reader(&uses, y) else { continue };
        let conv = g.node(cid);
        if !conv.op.is("Conv") {
            continue;
        }
        let auto_pad = string_attr(conv, "auto_pad").unwrap_or(b"NOTSET");
        if auto_pad != b"NOTSET" && auto_pad != b"VALID" {
            continue;
        }
        let Some(rank) = inferred.types.get(x.index()).and_then(|t| t.as_ref()).map(|t| t.rank())
        else {
            continue;
        };
        let Some(extra) = zero_spatial_pads(g, inferred, pad, rank) else { continue };
        let n = extra.len();
        let old = match conv.attr("pads") {
            Some(AttrValue::Ints(p)) if p.len() == 2 * n && auto_pad == b"NOTSET" => p.clone(),
            None => vec![0; 2 * n],
            _ => continue,
        };
        let mut pads = old;
        for (i, (b, e)) in extra.iter().enumerate() {
            pads[i] += b;
            pads[i + n] += e;
        }
        let conv = g.node_mut(cid);
        conv.inputs[0] = Some(x);
        conv.attributes.retain(|a| a.name != "auto_pad");
        set_attr(conv, "pads", AttrValue::Ints(pads));
        done.push(Rewrite {
            name: "pad-into-conv",
            removed: id,
            removed_op: "Pad".to_owned(),
            into: cid,
        });
    }
    done
}

/// The per-channel `(s, t)` of an inference `BatchNormalization` with constant
/// f32 parameters, `y = x * s + t`.
fn batch_norm_affine(
    g: &Graph,
    inferred: &Inferred,
    bn: &crate::ir::Node,
) -> Option<(Vec<f64>, Vec<f64>)> {
    if bn.attr_int("training_mode").is_some_and(|t| t != 0)
        || bn.attr_int("spatial").is_some_and(|s| s != 1)
        || bn.attr_int("is_test").is_some_and(|t| t == 0)
        || bn.outputs.iter().skip(1).any(Option::is_some)
        || bn.op.since_version() < 7
    {
        return None;
    }
    let eps = match bn.attr("epsilon") {
        Some(AttrValue::Float(e)) => f64::from(*e),
        _ => 1e-5,
    };
    let param = |i: usize| {
        let t = constant(g, inferred, bn.input(i))?;
        (t.elem == ElemType::Float && t.dims.len() == 1).then(|| t.to_f64s()).flatten()
    };
    let (scale, bias, mean, var) = (param(1)?, param(2)?, param(3)?, param(4)?);
    let c = scale.len();
    if [bias.len(), mean.len(), var.len()] != [c, c, c] {
        return None;
    }
    // The reference's arithmetic, in f32: (x - mean) / sqrt(var + eps) * scale + B.
    let s: Vec<f64> = (0..c)
        .map(|i| {
            let d = ((var[i] as f32) + eps as f32).sqrt();
            f64::from(scale[i] as f32 / d)
        })
        .collect();
    let t: Vec<f64> = (0..c).map(|i| bias[i] - mean[i] * s[i]).collect();
    Some((s, t))
}

/// A new f32 initializer named after `base`.
fn add_f32(g: &mut Graph, base: &str, dims: Vec<u64>, values: &[f64]) -> Option<ValueId> {
    let name = crate::passes::sequences::fresh(g, base.to_owned());
    let bytes: Vec<u8> = values.iter().flat_map(|&v| (v as f32).to_le_bytes()).collect();
    let t = Tensor::from_bytes(name.clone(), ElemType::Float, dims, bytes.into()).ok()?;
    Some(g.add_initializer(name, t))
}

/// Whether none of `node`'s outputs was folded to a constant: the node
/// runs in the generated code, so laying out its weights pays.
fn computed_at_run_time(node: &crate::ir::Node, inferred: &Inferred) -> bool {
    node.outputs
        .iter()
        .flatten()
        .all(|v| inferred.constants.get(v.index()).is_some_and(Option::is_none))
}

/// A constant's values as f32.
fn f32s(t: &Tensor) -> Option<Vec<f32>> {
    t.to_f64s().map(|v| v.iter().map(|&x| x as f32).collect())
}

/// Stores `packed` (weights laid out by one of the runtime's packing
/// functions) as a new 1-D weight named after node `id`; `None` when it
/// cannot be stored.
fn add_packed(g: &mut Graph, id: NodeId, suffix: &str, packed: &[f32]) -> Option<ValueId> {
    let values: Vec<f64> = packed.iter().map(|&v| f64::from(v)).collect();
    let base = format!("{}_{suffix}", g.node(id).name);
    add_f32(g, &base, vec![packed.len() as u64], &values)
}

/// New weights and bias for a `Conv` followed by `y = x * s + t` per output
/// channel.
fn fold_into_conv(
    g: &mut Graph,
    inferred: &Inferred,
    conv: NodeId,
    s: &[f64],
    t: &[f64],
) -> Option<()> {
    let node = g.node(conv);
    let w = constant(g, inferred, node.input(1))?;
    let m = usize::try_from(*w.dims.first()?).ok()?;
    if w.elem != ElemType::Float || m != s.len() {
        return None;
    }
    let per = usize::try_from(w.len()).ok()? / m.max(1);
    let wv = w.to_f64s()?;
    let b = match node.input(2) {
        None => vec![0.0; m],
        Some(v) => constant(g, inferred, Some(v))?.to_f64s()?,
    };
    if b.len() != m {
        return None;
    }
    let w2: Vec<f64> = wv.iter().enumerate().map(|(i, &x)| x * s[i / per.max(1)]).collect();
    let b2: Vec<f64> = (0..m).map(|i| b[i] * s[i] + t[i]).collect();
    let dims = w.dims.clone();
    replace_params(g, conv, ["W", "B"], (dims, &w2), &b2)
}

/// Gives `node` new f32 constants as inputs 1 (`weights`, with its dims) and
/// 2 (`bias`, 1-D), named after the node with the `names` suffixes.
fn replace_params(
    g: &mut Graph,
    node: NodeId,
    names: [&str; 2],
    weights: (Vec<u64>, &[f64]),
    bias: &[f64],
) -> Option<()> {
    let base = g.node(node).name.clone();
    let wid = add_f32(g, &format!("{base}_folded_{}", names[0]), weights.0, weights.1)?;
    let bid = add_f32(g, &format!("{base}_folded_{}", names[1]), vec![bias.len() as u64], bias)?;
    let node = g.node_mut(node);
    node.inputs.resize(3, None);
    node.inputs[1] = Some(wid);
    node.inputs[2] = Some(bid);
    Some(())
}

/// New B and C for a `Gemm` `[M, N]` followed by `y = x * s + t` per column.
fn fold_into_gemm(
    g: &mut Graph,
    inferred: &Inferred,
    gemm: NodeId,
    s: &[f64],
    t: &[f64],
) -> Option<()> {
    let node = g.node(gemm);
    let float = |name: &str| match node.attr(name) {
        Some(AttrValue::Float(f)) => f64::from(*f),
        _ => 1.0,
    };
    let (alpha, beta) = (float("alpha"), float("beta"));
    let trans_b = node.attr_int("transB").unwrap_or(0) != 0;
    let b = constant(g, inferred, node.input(1))?;
    let n = s.len();
    if b.elem != ElemType::Float || b.dims.len() != 2 {
        return None;
    }
    let (rows, cols) = (usize::try_from(b.dims[0]).ok()?, usize::try_from(b.dims[1]).ok()?);
    if (if trans_b { rows } else { cols }) != n {
        return None;
    }
    let bv = b.to_f64s()?;
    let column = |i: usize| if trans_b { i / cols } else { i % cols };
    let b2: Vec<f64> = bv.iter().enumerate().map(|(i, &x)| alpha * x * s[column(i)]).collect();
    let c: Vec<f64> = match node.input(2) {
        None => vec![0.0; n],
        Some(v) => {
            let ct = constant(g, inferred, Some(v))?;
            let cv = ct.to_f64s()?;
            match (ct.dims.as_slice(), cv.len()) {
                (_, 1) => vec![cv[0]; n],
                ([d] | [1, d], len) if *d as usize == n && len == n => cv,
                _ => return None,
            }
        }
    };
    let c2: Vec<f64> = (0..n).map(|j| beta * c[j] * s[j] + t[j]).collect();
    let dims = b.dims.clone();
    replace_params(g, gemm, ["B", "C"], (dims, &b2), &c2)?;
    let node = g.node_mut(gemm);
    set_attr(node, "alpha", AttrValue::Float(1.0));
    set_attr(node, "beta", AttrValue::Float(1.0));
    Some(())
}

/// Folds each inference `BatchNormalization` into the `Conv` or `Gemm` that
/// alone feeds it.
pub fn fold_batch_norms(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in g.order().to_vec().iter() {
        let bn = g.node(id);
        if !bn.op.is("BatchNormalization") {
            continue;
        }
        let (Some(x), Some(y)) = (bn.input(0), bn.output(0)) else { continue };
        let Some((pid, 0)) = g.producer(x) else { continue };
        if sole_reader(&uses, x) != Some((id, 0)) {
            continue;
        }
        let producer = g.node(pid);
        let is_conv = producer.op.is("Conv");
        if !(is_conv || producer.op.is("Gemm"))
            || producer.outputs.len() != 1
            || has_epilogue(producer)
        {
            continue;
        }
        // Gemm's output is [M, N]: BatchNormalization's channel axis is N.
        if !is_conv
            && inferred.types.get(x.index()).and_then(|t| t.as_ref()).map(|t| t.rank()) != Some(2)
        {
            continue;
        }
        let Some((s, t)) = batch_norm_affine(g, inferred, bn) else { continue };
        let folded = if is_conv {
            fold_into_conv(g, inferred, pid, &s, &t)
        } else {
            fold_into_gemm(g, inferred, pid, &s, &t)
        };
        if folded.is_none() {
            continue;
        }
        g.node_mut(pid).outputs[0] = Some(y);
        g.value_mut(y).kind = ValueKind::NodeOutput { node: pid, index: 0 };
        done.push(Rewrite {
            name: "batchnorm-into-producer",
            removed: id,
            removed_op: "BatchNormalization".to_owned(),
            into: pid,
        });
    }
    done
}

/// A `Transpose`'s perm, the default (reversed axes) when absent.
fn transpose_perm(node: &crate::ir::Node, rank: usize) -> Option<Vec<usize>> {
    match node.attr("perm") {
        Some(AttrValue::Ints(p)) if p.len() == rank => {
            p.iter().map(|&a| usize::try_from(a).ok()).collect()
        }
        None => Some((0..rank).rev().collect()),
        _ => None,
    }
}

fn rank_of(inferred: &Inferred, v: ValueId) -> Option<usize> {
    inferred.types.get(v.index())?.as_ref().map(|t| t.rank())
}

/// Folds the `Transpose`s around each f32 `MatMul` that is computed at run
/// time into its operand and output strides.
pub fn fold_transposes(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in g.order().to_vec().iter() {
        let mm = g.node(id);
        if !mm.op.is("MatMul") || mm.inputs.len() != 2 || mm.lowering.is_some() {
            continue;
        }
        let (Some(a), Some(b), Some(y)) = (mm.input(0), mm.input(1), mm.output(0)) else {
            continue;
        };
        let float = |v: ValueId| {
            inferred.types.get(v.index()).and_then(|t| t.as_ref()).map(|t| t.elem)
                == Some(ElemType::Float)
        };
        let runs = inferred.constants.get(y.index()).is_some_and(Option::is_none);
        if !(runs && float(a) && float(b)) {
            continue;
        }
        if [a, b].iter().any(|&v| rank_of(inferred, v).is_none_or(|r| r < 2)) {
            continue;
        }
        for index in [0usize, 1] {
            let v = if index == 0 { a } else { b };
            let Some((tid, 0)) = g.producer(v) else { continue };
            let t = g.node(tid);
            if !t.op.is("Transpose") || sole_reader(&uses, v) != Some((id, index)) {
                continue;
            }
            let Some(src) = t.input(0) else { continue };
            let Some(perm) = rank_of(inferred, src).and_then(|r| transpose_perm(t, r)) else {
                continue;
            };
            let mm = g.node_mut(id);
            mm.inputs[index] = Some(src);
            let Some(p) = product_mut(mm) else { continue };
            if index == 0 {
                p.transposes.a = Some(perm);
            } else {
                p.transposes.b = Some(perm);
            }
            done.push(Rewrite {
                name: "transpose-into-matmul",
                removed: tid,
                removed_op: "Transpose".to_owned(),
                into: id,
            });
        }
        let Some((tid, 0)) = sole_reader(&uses, y) else { continue };
        let t = g.node(tid);
        let Some(out) = t.output(0) else { continue };
        let r = rank_of(inferred, y).unwrap_or(0);
        let Some(perm) = transpose_perm(t, r) else { continue };
        if !t.op.is("Transpose") || r < 2 || perm.last() != Some(&(r - 1)) {
            continue;
        }
        let mm = g.node_mut(id);
        let Some(p) = product_mut(mm) else { continue };
        p.transposes.y = Some(perm);
        mm.outputs[0] = Some(out);
        g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(Rewrite {
            name: "transpose-into-matmul",
            removed: tid,
            removed_op: "Transpose".to_owned(),
            into: id,
        });
    }
    done
}

/// Folds `Add(MatMul(..), bias)` with a constant f32 bias over the last axis
/// into the product (its lowering's bias).
pub fn fold_matmul_bias(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in g.order().to_vec().iter() {
        let mm = g.node(id);
        if !mm.op.is("MatMul") || product_of(mm).is_some_and(|p| p.bias.is_some()) {
            continue;
        }
        let Some(y) = mm.output(0) else { continue };
        let Some(ty) = inferred.types.get(y.index()).and_then(|t| t.as_ref()) else { continue };
        let runs = inferred.constants.get(y.index()).is_some_and(Option::is_none);
        if !runs || ty.elem != ElemType::Float || ty.rank() == 0 {
            continue;
        }
        let n = ty.dims[ty.rank() - 1];
        let Some((aid, index)) = sole_reader(&uses, y) else { continue };
        let add = g.node(aid);
        if !add.op.is("Add") || add.inputs.len() != 2 {
            continue;
        }
        let (Some(other), Some(out)) = (add.input(1 - index), add.output(0)) else { continue };
        let same_shape = inferred.types.get(out.index()).and_then(|t| t.as_ref()) == Some(ty);
        let Some(c) = constant(g, inferred, Some(other)) else { continue };
        let row = c.dims.last().is_some_and(|&d| d == n as u64)
            && c.dims.len() <= ty.rank()
            && c.dims[..c.dims.len() - 1].iter().all(|&d| d == 1);
        if !same_shape || c.elem != ElemType::Float || !row {
            continue;
        }
        let Some(values) = c.to_f64s() else { continue };
        let base = format!("{}_bias", g.value(y).name);
        let Some(bias) = add_f32(g, &base, vec![n as u64], &values) else { continue };
        let mm = g.node_mut(id);
        let Some(p) = product_mut(mm) else { continue };
        p.bias = Some(bias);
        mm.outputs[0] = Some(out);
        g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(Rewrite {
            name: "add-into-matmul",
            removed: aid,
            removed_op: "Add".to_owned(),
            into: id,
        });
    }
    done
}

/// The value of a one-element f32 constant.
fn f32_scalar(g: &Graph, inferred: &Inferred, v: Option<ValueId>) -> Option<f64> {
    let c = constant(g, inferred, v)?;
    match (c.elem, c.to_f64s().as_deref()) {
        (ElemType::Float, Some([x])) => Some(*x),
        _ => None,
    }
}

/// The node that alone reads `v`, when it is `op_type` of the default
/// domain with two inputs: `(node, the other input)`.
fn sole_binary(
    g: &Graph,
    uses: &[Vec<Use>],
    v: ValueId,
    op_type: &str,
) -> Option<(NodeId, ValueId)> {
    let (id, index) = sole_reader(uses, v)?;
    let n = g.node(id);
    if !n.op.is(op_type) || n.inputs.len() != 2 || index > 1 {
        return None;
    }
    Some((id, n.input(1 - index)?))
}

/// Turns each f32 `Mul(x, Sigmoid(x))` (either operand order), the SiLU
/// exporters write, into one `Swish` (alpha 1): one pass over the tensor
/// instead of two and no gate buffer. The `Sigmoid` node becomes the
/// `Swish`, the `Mul` goes; `x` may have other readers.
pub fn fold_silu(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let Lookup::Found(swish) = crate::ops::lookup("", "Swish", 24) else {
        return Vec::new();
    };
    let uses = g.uses();
    let mut done = Vec::new();
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    for &id in g.order().to_vec().iter() {
        let sig = g.node(id);
        let (Some(x), Some(s)) = (sig.input(0), sig.output(0)) else { continue };
        if !sig.op.is("Sigmoid") || sig.outputs.len() != 1 {
            continue;
        }
        let Some((mid, y)) = sole_binary(g, &uses, s, "Mul")
            .filter(|&(_, other)| other == x)
            .and_then(|(mid, _)| Some((mid, g.node(mid).output(0)?)))
        else {
            continue;
        };
        if ty(x).is_none_or(|t| t.elem != ElemType::Float) || ty(y) != ty(x) {
            continue;
        }
        let node = g.node_mut(id);
        node.op.op_type = "Swish".to_owned();
        node.op.schema = Some(swish);
        node.outputs = vec![Some(y)];
        node.attributes.clear();
        g.value_mut(y).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(Rewrite { name: "silu", removed: mid, removed_op: "Mul".into(), into: id });
    }
    done
}

/// Turns each f32 exact-GELU chain `Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)`
/// (the two `Mul`s by `x` and `0.5` in either order and association, the
/// division also written as a product by `1 / sqrt 2`) into one `Gelu`: the
/// `Erf` node becomes the `Gelu`, the other four go.
pub fn fold_erf_gelu(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let Lookup::Found(gelu) = crate::ops::lookup("", "Gelu", 20) else {
        return Vec::new();
    };
    let uses = g.uses();
    let mut done = Vec::new();
    let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() <= 1e-6 * want);
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    for &id in g.order().to_vec().iter() {
        let erf = g.node(id);
        let (Some(d), Some(e)) = (erf.input(0), erf.output(0)) else { continue };
        if !erf.op.is("Erf") || ty(e).is_none_or(|t| t.elem != ElemType::Float) {
            continue;
        }
        // d = x / sqrt 2, or x * (1 / sqrt 2).
        let Some((did, 0)) = g.producer(d) else { continue };
        let div = g.node(did);
        let (Some(x), c) = (div.input(0), div.input(1)) else { continue };
        let scaled = (div.op.is("Div")
            && near(f32_scalar(g, inferred, c), core::f64::consts::SQRT_2))
            || (div.op.is("Mul")
                && near(f32_scalar(g, inferred, c), core::f64::consts::FRAC_1_SQRT_2));
        if div.inputs.len() != 2 || !scaled || sole_reader(&uses, d) != Some((id, 0)) {
            continue;
        }
        // a = e + 1, then two products by x and 0.5.
        let Some((aid, one)) = sole_binary(g, &uses, e, "Add") else { continue };
        let Some(a) = g.node(aid).output(0) else { continue };
        let Some((m1, u)) = sole_binary(g, &uses, a, "Mul") else { continue };
        let Some(m1_out) = g.node(m1).output(0) else { continue };
        let Some((m2, w)) = sole_binary(g, &uses, m1_out, "Mul") else { continue };
        let Some(y) = g.node(m2).output(0) else { continue };
        let half = |v: ValueId| near(f32_scalar(g, inferred, Some(v)), 0.5);
        let factors = (u == x && half(w)) || (w == x && half(u));
        if !near(f32_scalar(g, inferred, Some(one)), 1.0) || !factors || ty(y) != ty(x) {
            continue;
        }
        let div_op = div.op.op_type.clone();
        let node = g.node_mut(id);
        node.op.op_type = "Gelu".to_owned();
        node.op.schema = Some(gelu);
        node.inputs = vec![Some(x)];
        node.outputs = vec![Some(y)];
        node.attributes.clear();
        set_attr(node, "approximate", AttrValue::String(b"none".to_vec()));
        g.value_mut(y).kind = ValueKind::NodeOutput { node: id, index: 0 };
        for (removed, op) in
            [(did, div_op), (aid, "Add".into()), (m1, "Mul".into()), (m2, "Mul".into())]
        {
            done.push(Rewrite { name: "erf-gelu", removed, removed_op: op, into: id });
        }
    }
    done
}

/// The binary node of `op_type` producing `v`, with its two inputs.
fn binary(g: &Graph, v: ValueId, op_type: &str) -> Option<(NodeId, ValueId, ValueId)> {
    let (id, 0) = g.producer(v)? else { return None };
    let n = g.node(id);
    (n.op.is(op_type) && n.inputs.len() == 2).then_some((id, n.input(0)?, n.input(1)?))
}

/// The value `x` when `v` is the output of a node that computes `x³`:
/// `Pow(x, 3)`, `Mul(x, Mul(x, x))` or
/// `Mul(Mul(x, x), x)` (inner square read by nothing else). Returns the cube
/// and the nodes to remove with it.
fn cube_of(
    g: &Graph,
    inferred: &Inferred,
    uses: &[Vec<Use>],
    v: ValueId,
) -> Option<(ValueId, Vec<(NodeId, &'static str)>)> {
    let (id, 0) = g.producer(v)? else { return None };
    let n = g.node(id);
    let (a, b) = (n.input(0)?, n.input(1)?);
    if n.inputs.len() != 2 {
        return None;
    }
    if n.op.is("Pow") {
        return (f32_scalar(g, inferred, Some(b)) == Some(3.0)).then(|| (a, vec![(id, "Pow")]));
    }
    if !n.op.is("Mul") {
        return None;
    }
    // One factor is x, the other x * x computed for this product alone.
    for (x, sq) in [(a, b), (b, a)] {
        let Some((sid, 0)) = g.producer(sq) else { continue };
        let s = g.node(sid);
        let square = s.op.is("Mul")
            && s.inputs.len() == 2
            && s.input(0) == Some(x)
            && s.input(1) == Some(x)
            && sole_reader(uses, sq) == Some((id, if sq == a { 0 } else { 1 }));
        if square {
            return Some((x, vec![(id, "Mul"), (sid, "Mul")]));
        }
    }
    None
}

/// Turns each f32 tanh-form GELU chain, `0.5 x (1 + tanh(sqrt(2 / pi) (x +
/// 0.044715 x³)))` as exporters write it (the cube as `Pow(x, 3)` or two
/// products, every product and sum in either operand order, the `0.5` applied
/// to `x` first, to the product, or to `1 + tanh`), into one `Gelu`
/// (`approximate = "tanh"`): the `Tanh` node becomes the `Gelu`, the other
/// seven or eight nodes go. One vectorised pass instead of eight, seven
/// buffers less; results differ by float rounding only.
pub fn fold_tanh_gelu(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let Lookup::Found(gelu) = crate::ops::lookup("", "Gelu", 20) else {
        return Vec::new();
    };
    let uses = g.uses();
    let mut done = Vec::new();
    let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() <= 1e-6 * want);
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    let sqrt_2_pi = (2.0 / core::f64::consts::PI).sqrt();
    for &id in g.order().to_vec().iter() {
        let tanh = g.node(id);
        let (Some(t), Some(th)) = (tanh.input(0), tanh.output(0)) else { continue };
        if !tanh.op.is("Tanh") || ty(th).is_none_or(|t| t.elem != ElemType::Float) {
            continue;
        }
        // t = sqrt(2 / pi) * s, s = x + 0.044715 * x³, each read once.
        let Some((m_in, p, q)) = binary(g, t, "Mul") else { continue };
        let s = if near(f32_scalar(g, inferred, Some(q)), sqrt_2_pi) {
            p
        } else if near(f32_scalar(g, inferred, Some(p)), sqrt_2_pi) {
            q
        } else {
            continue;
        };
        let Some((add_in, p, q)) = binary(g, s, "Add") else { continue };
        if sole_reader(&uses, t) != Some((id, 0))
            || sole_reader(&uses, s).map(|r| r.0) != Some(m_in)
        {
            continue;
        }
        let mut found = None;
        for (x, k) in [(p, q), (q, p)] {
            let Some((m_k, u, w)) = binary(g, k, "Mul") else { continue };
            let c = if near(f32_scalar(g, inferred, Some(w)), 0.044715) {
                u
            } else if near(f32_scalar(g, inferred, Some(u)), 0.044715) {
                w
            } else {
                continue;
            };
            let Some((cx, cube_nodes)) = cube_of(g, inferred, &uses, c) else { continue };
            let single = sole_reader(&uses, k).map(|r| r.0) == Some(add_in)
                && sole_reader(&uses, c).map(|r| r.0) == Some(m_k);
            if cx == x && single {
                found = Some((x, m_k, cube_nodes));
                break;
            }
        }
        let Some((x, m_k, cube_nodes)) = found else { continue };
        if ty(x).is_none_or(|t| t.elem != ElemType::Float) {
            continue;
        }
        // a = tanh + 1, then the products by x and 0.5.
        let half = |v: ValueId| near(f32_scalar(g, inferred, Some(v)), 0.5);
        let Some((aid, one)) = sole_binary(g, &uses, th, "Add") else { continue };
        let Some(a) = g.node(aid).output(0) else { continue };
        if !near(f32_scalar(g, inferred, Some(one)), 1.0) {
            continue;
        }
        let Some((m1, u)) = sole_binary(g, &uses, a, "Mul") else { continue };
        let Some(m1_out) = g.node(m1).output(0) else { continue };
        // The tail: (x * a) * 0.5 or (0.5 * a) * x, or (x * 0.5) * a with
        // `x * 0.5` a node of its own read by this product alone.
        let tail: Option<(ValueId, Vec<(NodeId, &'static str)>)> = if u == x || half(u) {
            sole_binary(g, &uses, m1_out, "Mul").and_then(|(m2, w)| {
                let ok = (u == x && half(w)) || (half(u) && w == x);
                let y = g.node(m2).output(0)?;
                ok.then(|| (y, vec![(m1, "Mul"), (m2, "Mul")]))
            })
        } else {
            binary(g, u, "Mul").and_then(|(hx, p, q)| {
                let ok = ((p == x && half(q)) || (half(p) && q == x))
                    && sole_reader(&uses, u).map(|r| r.0) == Some(m1);
                ok.then(|| (m1_out, vec![(hx, "Mul"), (m1, "Mul")]))
            })
        };
        let Some((y, tail_nodes)) = tail else { continue };
        if ty(y) != ty(x) {
            continue;
        }
        let node = g.node_mut(id);
        node.op.op_type = "Gelu".to_owned();
        node.op.schema = Some(gelu);
        node.inputs = vec![Some(x)];
        node.outputs = vec![Some(y)];
        node.attributes.clear();
        set_attr(node, "approximate", AttrValue::String(b"tanh".to_vec()));
        g.value_mut(y).kind = ValueKind::NodeOutput { node: id, index: 0 };
        let removed = cube_nodes
            .into_iter()
            .chain([(m_k, "Mul"), (add_in, "Add"), (m_in, "Mul"), (aid, "Add")])
            .chain(tail_nodes);
        for (removed, op) in removed {
            done.push(Rewrite { name: "tanh-gelu", removed, removed_op: op.to_owned(), into: id });
        }
    }
    done
}

/// Folds the `Div` by a constant and the `Where` with a mask that attention
/// scores go through before an f32 `Softmax` over the last axis,
/// `Softmax(Where(mask, Div(s, c), fill))` (the `Where` in either branch
/// order with a constant scalar `fill`; either step may be missing), into
/// the Softmax: it reads `s` and the mask itself (its lowering's
/// [`SoftmaxPrologue`]) and does both steps on each row before normalising
/// it. Two passes over the scores
/// and two buffers less; the same operations, so the same results.
pub fn fold_softmax_prologue(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let uses = g.uses();
    let mut done = Vec::new();
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    for &id in g.order().to_vec().iter() {
        let sm = g.node(id);
        let (Some(mut v), Some(out)) = (sm.input(0), sm.output(0)) else { continue };
        let Some(t) = ty(out) else { continue };
        let rank = t.rank();
        let last =
            matches!(sm.attr("axis"), Some(AttrValue::Int(a)) if *a == -1 || *a == rank as i64 - 1);
        let plain = sm.inputs.len() == 1 && sm.attributes.len() == 1 && sm.lowering.is_none();
        if !sm.op.is("Softmax") || !last || !plain || t.elem != ElemType::Float || rank == 0 {
            continue;
        }
        let mut removed = Vec::new();
        let mut mask = None;
        // Where(cond, d, fill) or Where(cond, fill, d), read by the Softmax alone.
        if let Some((wid, 0)) = g.producer(v)
            && g.node(wid).op.is("Where")
            && sole_reader(&uses, v) == Some((id, 0))
        {
            let w = g.node(wid);
            let (cond, a, b) = (w.input(0), w.input(1), w.input(2));
            let fill_b = f32_scalar(g, inferred, b);
            let fill_a = f32_scalar(g, inferred, a);
            let (d, fill, keep) = match (a, b, fill_a, fill_b) {
                (Some(d), _, _, Some(f)) => (d, f, true),
                (_, Some(d), Some(f), _) => (d, f, false),
                _ => continue,
            };
            let (Some(cond), Some(td)) = (cond, ty(d)) else { continue };
            let Some(tc) = ty(cond) else { continue };
            let fits = tc.elem == ElemType::Bool
                && tc.rank() <= rank
                && tc.dims.iter().rev().zip(td.dims.iter().rev()).all(|(&c, &d)| c == d || c == 1);
            if !fits || td != t || sole_reader(&uses, d).map(|r| r.0) != Some(wid) {
                continue;
            }
            mask = Some((cond, fill, keep));
            removed.push((wid, "Where"));
            v = d;
        }
        // Div(s, c), read by the Where or the Softmax alone.
        let mut divisor = None;
        if let Some((did, 0)) = g.producer(v)
            && g.node(did).op.is("Div")
            && g.node(did).inputs.len() == 2
            && uses.get(v.index()).is_some_and(|u| u.len() == 1)
            && matches!(g.node(did).input(0), Some(s) if ty(s) == Some(t))
            && let Some(c) = f32_scalar(g, inferred, g.node(did).input(1))
        {
            divisor = Some(c as f32);
            removed.push((did, "Div"));
            v = g.node(did).input(0).unwrap_or(v);
        }
        if removed.is_empty() {
            continue;
        }
        let node = g.node_mut(id);
        node.inputs = vec![Some(v)];
        let mask = mask.map(|(mask, fill, keep)| SoftmaxMask { mask, fill: fill as f32, keep });
        node.lowering = Some(Lowering::Softmax(SoftmaxPrologue { divisor, mask }));
        for (r, op) in removed {
            done.push(Rewrite {
                name: "softmax-prologue",
                removed: r,
                removed_op: op.to_owned(),
                into: id,
            });
        }
    }
    done
}

/// Whether `node` is a `ReduceMean` over only the last axis of a rank-`rank`
/// input, keeping it (axes as an attribute, or as a constant input from
/// opset 18).
fn mean_of_last_axis(g: &Graph, inferred: &Inferred, node: &crate::ir::Node, rank: usize) -> bool {
    let axes = match (node.attr("axes"), node.input(1)) {
        (Some(AttrValue::Ints(a)), None) => a.clone(),
        (None, Some(v)) => match constant(g, inferred, Some(v)).and_then(|t| t.to_i64s()) {
            Some(a) => a,
            None => return false,
        },
        _ => return false,
    };
    let keep = !matches!(node.attr("keepdims"), Some(AttrValue::Int(0)));
    node.op.is("ReduceMean")
        && keep
        && rank > 0
        && matches!(axes.as_slice(), [a] if *a == -1 || *a == rank as i64 - 1)
}

/// Turns each f32 LayerNorm written out over the last axis, `d = x -
/// ReduceMean(x)`, `y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * gamma + beta`
/// (constant `eps`, 1-D constant `gamma` and `beta` of the axis length), into
/// one `LayerNormalization`: the final `Add` becomes it, the other eight
/// nodes go.
pub fn fold_layer_norms(g: &mut Graph, inferred: &Inferred) -> Vec<Rewrite> {
    let Lookup::Found(schema) = crate::ops::lookup("", "LayerNormalization", 17) else {
        return Vec::new();
    };
    let uses = g.uses();
    let mut done = Vec::new();
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    let only = |v: ValueId, want: &[(NodeId, usize)]| {
        let u = uses.get(v.index()).map(Vec::as_slice).unwrap_or(&[]);
        u.len() == want.len()
            && u.iter()
                .all(|u| matches!(u, Use::Input { node, index } if want.contains(&(*node, *index))))
    };
    for &id in g.order().to_vec().iter() {
        let (Some(x), Some(mean)) = (g.node(id).input(0), g.node(id).output(0)) else { continue };
        let Some(tx) = ty(x) else { continue };
        let rank = tx.rank();
        if tx.elem != ElemType::Float || !mean_of_last_axis(g, inferred, g.node(id), rank) {
            continue;
        }
        let n = tx.dims[rank - 1] as u64;
        // Sub(x, mean), read by Pow and Div.
        let Some((sub, _)) = sole_reader(&uses, mean) else { continue };
        let sn = g.node(sub);
        let Some(diff) = sn.output(0) else { continue };
        if !sn.op.is("Sub") || sn.input(0) != Some(x) || sn.input(1) != Some(mean) {
            continue;
        }
        let readers: Vec<NodeId> = uses.get(diff.index()).map_or(Vec::new(), |u| {
            u.iter()
                .filter_map(|u| if let Use::Input { node, .. } = u { Some(*node) } else { None })
                .collect()
        });
        let pick = |op: &str| readers.iter().copied().find(|&r| g.node(r).op.is(op));
        let (Some(pow), Some(div)) = (pick("Pow"), pick("Div")) else { continue };
        if !only(diff, &[(pow, 0), (div, 0)]) {
            continue;
        }
        let two = f32_scalar(g, inferred, g.node(pow).input(1)) == Some(2.0);
        let Some(sq) = g.node(pow).output(0) else { continue };
        // ReduceMean, Add eps, Sqrt, into the Div.
        let Some((var, 0)) = sole_reader(&uses, sq) else { continue };
        let Some(var_out) = g.node(var).output(0) else { continue };
        if !two || !mean_of_last_axis(g, inferred, g.node(var), rank) {
            continue;
        }
        let Some((add_eps, eps_v)) = sole_binary(g, &uses, var_out, "Add") else { continue };
        let Some(eps) = f32_scalar(g, inferred, Some(eps_v)) else { continue };
        let Some(ve) = g.node(add_eps).output(0) else { continue };
        let Some((sqrt, 0)) = sole_reader(&uses, ve) else { continue };
        let Some(sd) = g.node(sqrt).output(0) else { continue };
        if !g.node(sqrt).op.is("Sqrt") || !only(sd, &[(div, 1)]) {
            continue;
        }
        // Mul gamma, Add beta.
        let Some(nrm) = g.node(div).output(0) else { continue };
        let Some((mul, gamma)) = sole_binary(g, &uses, nrm, "Mul") else { continue };
        let Some(scaled) = g.node(mul).output(0) else { continue };
        let Some((add_b, beta)) = sole_binary(g, &uses, scaled, "Add") else { continue };
        let Some(y) = g.node(add_b).output(0) else { continue };
        let row = |v: ValueId| {
            constant(g, inferred, Some(v))
                .is_some_and(|c| c.elem == ElemType::Float && c.dims == [n])
        };
        if !(row(gamma) && row(beta)) || ty(y) != Some(tx) {
            continue;
        }
        // The last node (after every input's producer) becomes the norm.
        let node = g.node_mut(add_b);
        node.op.op_type = "LayerNormalization".to_owned();
        node.op.schema = Some(schema);
        node.inputs = vec![Some(x), Some(gamma), Some(beta)];
        node.attributes.clear();
        set_attr(node, "axis", AttrValue::Int(-1));
        set_attr(node, "epsilon", AttrValue::Float(eps as f32));
        for (removed, op) in [
            (id, "ReduceMean"),
            (sub, "Sub"),
            (pow, "Pow"),
            (var, "ReduceMean"),
            (add_eps, "Add"),
            (sqrt, "Sqrt"),
            (div, "Div"),
            (mul, "Mul"),
        ] {
            done.push(Rewrite {
                name: "layer-norm",
                removed,
                removed_op: op.to_owned(),
                into: add_b,
            });
        }
    }
    done
}

/// Regroups the constant f32 weights of each LSTM computed at run time for
/// `rnn::slstm_packed`; returns how many LSTMs were given packed weights.
pub fn pack_lstm_weights(g: &mut Graph, inferred: &Inferred) -> usize {
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        if !node.op.is("LSTM") || node.lowering.is_some() {
            continue;
        }
        let runs = computed_at_run_time(node, inferred);
        let (Some(w), Some(r)) =
            (constant(g, inferred, node.input(1)), constant(g, inferred, node.input(2)))
        else {
            continue;
        };
        if !runs || w.elem != ElemType::Float || r.elem != ElemType::Float {
            continue;
        }
        let (&[nd, g4, ni], &[nd_r, g4_r, h]) = (w.dims.as_slice(), r.dims.as_slice()) else {
            continue;
        };
        if nd != nd_r || g4 != g4_r || g4 != 4 * h {
            continue;
        }
        let dims = [nd, h, ni].map(|d| usize::try_from(d).unwrap_or(usize::MAX));
        let Some(len) = onnx_codegen_runtime::rnn::packed_lstm_len(dims[0], dims[1], dims[2])
        else {
            continue;
        };
        let (Some(wv), Some(rv)) = (f32s(w), f32s(r)) else { continue };
        let mut packed = vec![0.0f32; len];
        let [nd, h, ni] = dims;
        if onnx_codegen_runtime::rnn::pack_lstm_weights(nd, h, ni, &wv, &rv, &mut packed).is_err() {
            continue;
        }
        if let Some(packed) = add_packed(g, id, "packed_WR", &packed) {
            g.node_mut(id).lowering = Some(Lowering::Lstm { packed });
            done += 1;
        }
    }
    done
}

/// Lays out the constant f32 weights of each 2-D Conv of group 1 computed
/// at run time (not a one-channel depthwise one) in panels of 8 filters for
/// `conv::sconv` (`ConvWeights::Panels`), read instead of W ([`ConvWeights::Packed`]); the rows of a
/// register tile are then adjacent in memory instead of `C * kh * kw`
/// floats apart. Only weights that Conv alone reads: the original is then
/// not stored (the copy is padded to a multiple of 8 filters). Returns how
/// many Convs were given packed weights.
pub fn pack_conv_weights(g: &mut Graph, inferred: &Inferred) -> usize {
    let uses = g.uses();
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        if !node.op.is("Conv") || !weights_as_given(node) {
            continue;
        }
        let runs = computed_at_run_time(node, inferred);
        let x_f32 = node
            .input(0)
            .and_then(|v| inferred.types.get(v.index()))
            .and_then(Option::as_ref)
            .is_some_and(|t| t.elem == ElemType::Float);
        let Some(wid) = node.input(1) else { continue };
        let Some(w) = constant(g, inferred, Some(wid)) else { continue };
        let group = match node.attr("group") {
            None => 1,
            Some(AttrValue::Int(v)) => *v,
            Some(_) => continue,
        };
        let sole = sole_reader(&uses, wid) == Some((id, 1));
        if !runs || !x_f32 || !sole || group != 1 || w.elem != ElemType::Float {
            continue;
        }
        // 2-D weights, or 1-D ones (which run as 2-D of height 1).
        let (m, c, kh, kw) = match *w.dims.as_slice() {
            [m, c, kh, kw] => (m, c, kh, kw),
            [m, c, kw] => (m, c, 1, kw),
            _ => continue,
        };
        let [m, c, kh, kw] = [m, c, kh, kw].map(|d| usize::try_from(d).unwrap_or(usize::MAX));
        if m == 1 && c == 1 {
            continue;
        }
        let Some(k) = c.checked_mul(kh).and_then(|v| v.checked_mul(kw)) else { continue };
        let Some(len) = onnx_codegen_runtime::conv::packed_weights_len(m, k) else { continue };
        let Some(wv) = f32s(w) else { continue };
        let mut packed = vec![0.0f32; len];
        if onnx_codegen_runtime::conv::pack_conv_weights(m, k, &wv, &mut packed).is_err() {
            continue;
        }
        if let Some(packed) = add_packed(g, id, "packed_W", &packed)
            && let Some(l) = conv_mut(g.node_mut(id))
        {
            l.weights = ConvWeights::Packed(packed);
            done += 1;
        }
    }
    done
}

/// Floats of scratch a ConvTranspose on the product path aims for (256
/// KiB): its columns stay in L2 between the product that writes them and
/// the scatter that reads them.
const CONV_TRANSPOSE_SCRATCH: usize = 1 << 16;

/// Lays out the constant f32 weights of each 1-D or 2-D ConvTranspose
/// computed at run time, transposed per group, in the panels the product
/// reads, for `conv::sconv_transpose` ([`ConvWeights::Transposed`], with the
/// input positions each product covers: the fewest equal blocks whose
/// columns fit [`CONV_TRANSPOSE_SCRATCH`], whole input rows of them when a
/// block holds one or more). Only weights that ConvTranspose alone reads: the
/// original is then not stored. Returns how many were laid out.
pub fn pack_conv_transpose_weights(g: &mut Graph, inferred: &Inferred) -> usize {
    use onnx_codegen_runtime::conv::{conv_transpose_packed_len, pack_conv_transpose_weights};
    let uses = g.uses();
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        if !node.op.is("ConvTranspose") || node.lowering.is_some() {
            continue;
        }
        let runs = computed_at_run_time(node, inferred);
        let Some(x) = node.input(0).and_then(|v| inferred.types.get(v.index())).cloned().flatten()
        else {
            continue;
        };
        let Some(wid) = node.input(1) else { continue };
        let Some(w) = constant(g, inferred, Some(wid)) else { continue };
        let group = match node.attr("group") {
            None => 1,
            Some(AttrValue::Int(v)) => *v,
            Some(_) => continue,
        };
        let sole = sole_reader(&uses, wid) == Some((id, 1));
        if !runs || x.elem != ElemType::Float || !sole || w.elem != ElemType::Float {
            continue;
        }
        // [C, M / group, k...] of one or two spatial axes, over an input of
        // as many.
        let dims: Vec<usize> = w.dims.iter().map(|&d| usize::try_from(d).unwrap_or(0)).collect();
        if !matches!(dims.len(), 3 | 4) || x.dims.len() != dims.len() {
            continue;
        }
        let (Ok(groups), [c, mg, kernel @ ..]) = (usize::try_from(group), dims.as_slice()) else {
            continue;
        };
        let (taps, positions): (usize, usize) =
            (kernel.iter().product(), x.dims[2..].iter().product());
        let width = x.dims.last().copied().unwrap_or(1);
        let (Some(m), Some(rows)) = (mg.checked_mul(groups), mg.checked_mul(taps)) else {
            continue;
        };
        if rows == 0 || positions == 0 || width == 0 {
            continue;
        }
        let Some(len) = conv_transpose_packed_len(*c, m, groups, taps) else { continue };
        let Some(wv) = f32s(w) else { continue };
        let mut packed = vec![0.0f32; len];
        if pack_conv_transpose_weights(*c, m, groups, taps, &wv, &mut packed).is_err() {
            continue;
        }
        // As few products as fit the scratch, of equal size (whole input
        // rows when they hold one or more): 64 positions of rows of 8 in
        // blocks of at most 56 run as 32 and 32, not 56 and 8.
        let fit = (CONV_TRANSPOSE_SCRATCH / rows).max(1);
        let block = positions.div_ceil(positions.div_ceil(fit));
        let block = if block >= width { block / width * width } else { block };
        if let Some(packed) = add_packed(g, id, "packed_WT", &packed)
            && let Some(l) = conv_mut(g.node_mut(id))
        {
            l.weights = ConvWeights::Transposed { packed, block };
            done += 1;
        }
    }
    done
}

/// Per node of the main graph that runs, the arena bytes not in use while
/// it runs under the plan made without Winograd: room for a scratch buffer
/// that leaves the arena's size as it is (unless the free bytes are split
/// in pieces, which the caller's margin absorbs).
fn free_arena_bytes(g: &Graph, inferred: &Inferred) -> Vec<(NodeId, usize)> {
    let plan = crate::passes::plan::plan(g, inferred);
    inferred
        .steps
        .iter()
        .enumerate()
        .map(|(s, step)| {
            let live: usize = plan
                .buffers
                .iter()
                .filter(|b| b.first_step <= s && s <= b.last_step)
                .fold(0, |a, b| a.saturating_add(b.bytes));
            (step.node, plan.arena_bytes.saturating_sub(live))
        })
        .collect()
}

/// Claims each 3x3 Conv of stride and dilation 1, group 1, on f32 computed
/// at run time, whose constant weights only it reads and are all finite,
/// where the conv rule's measured thresholds say Winograd pays and its
/// scratch fits in the arena bytes free during the step
/// ([`crate::ops::conv::winograd::choose_block`]), for `ConvWeights::Winograd`: its
/// weights are transformed once, here, into the 16 strip-packed matrices that
/// kernel reads ([`ConvWeights::Winograd`], with the tiles its kernel
/// handles at a time, which sizes its scratch; the original
/// is then not stored: 16/9 the floats, plus the columns padded to a
/// multiple of 32). Runs before [`pack_conv_weights`], which leaves the
/// Convs claimed here alone. Returns how many Convs were claimed.
pub fn winograd_convs(g: &mut Graph, inferred: &Inferred) -> usize {
    use onnx_codegen_runtime::winograd::{transform_weights, weights_len};
    let uses = g.uses();
    let free = free_arena_bytes(g, inferred);
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        if !node.op.is("Conv") || !weights_as_given(node) {
            continue;
        }
        let runs = computed_at_run_time(node, inferred);
        let x_f32 = node
            .input(0)
            .and_then(|v| inferred.types.get(v.index()))
            .and_then(Option::as_ref)
            .is_some_and(|t| t.elem == ElemType::Float);
        let Some(y) = node.output(0).and_then(|v| inferred.types.get(v.index())).cloned().flatten()
        else {
            continue;
        };
        let Some(wid) = node.input(1) else { continue };
        let Some(w) = constant(g, inferred, Some(wid)) else { continue };
        let ones = |name: &str| match node.attr(name) {
            None => true,
            Some(AttrValue::Ints(v)) => v.iter().all(|&s| s == 1),
            Some(_) => false,
        };
        let group_1 = matches!(node.attr("group"), None | Some(AttrValue::Int(1)));
        let sole = sole_reader(&uses, wid) == Some((id, 1));
        if !runs || !x_f32 || !sole || !group_1 || !ones("strides") || !ones("dilations") {
            continue;
        }
        let (&[m, c, 3, 3], &[_, ym, oh, ow]) = (w.dims.as_slice(), y.dims.as_slice()) else {
            continue;
        };
        let (Ok(m), Ok(c)) = (usize::try_from(m), usize::try_from(c)) else { continue };
        if w.elem != ElemType::Float || ym != m {
            continue;
        }
        // The scratch goes in the arena bytes free during this step.
        let room = free.iter().find(|(n, _)| *n == id).map_or(0, |(_, b)| *b);
        let Some(block) = crate::ops::conv::winograd::choose_block(c, m, oh, ow, room) else {
            continue;
        };
        let (Some(len), Some(wv)) = (weights_len(c, m), f32s(w)) else { continue };
        let mut u = vec![0.0f32; len];
        // Refuses weights that are not all finite.
        if transform_weights(c, m, &wv, &mut u).is_err() {
            continue;
        }
        if let Some(transformed) = add_packed(g, id, "winograd_U", &u)
            && let Some(l) = conv_mut(g.node_mut(id))
        {
            l.weights = ConvWeights::Winograd { transformed, block: Some(block) };
            done += 1;
        }
    }
    done
}

/// Lays out, once, the constant f32 B of each `MatMul` (2-D B, any batch of
/// A) and `Gemm` computed at run time in the 32-column strips
/// `gemm::smatmul` and `gemm::sgemm` read as `Weights::Strips` (the lowering's
/// `packed_b`, read instead of B), so no run copies B. Skipped when padding B's columns to a multiple
/// of 32 would add more than an eighth to it. Returns how many products were
/// given a packed B.
pub fn pack_matmul_weights(g: &mut Graph, inferred: &Inferred) -> usize {
    use onnx_codegen_runtime::gemm::{pack_b_strips, packed_b_len};
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        let (is_mm, is_gemm) = (node.op.is("MatMul"), node.op.is("Gemm"));
        let lowered = product_of(node);
        if !(is_mm || is_gemm) || lowered.is_some_and(|p| p.packed_b.is_some()) {
            continue;
        }
        let runs = computed_at_run_time(node, inferred)
            && node
                .output(0)
                .is_some_and(|y| inferred.types.get(y.index()).is_some_and(Option::is_some));
        let Some(b) = constant(g, inferred, node.input(1)) else { continue };
        let &[d0, d1] = b.dims.as_slice() else { continue };
        if !runs || b.elem != ElemType::Float {
            continue;
        }
        let trans = if is_gemm {
            !matches!(node.attr("transB"), None | Some(AttrValue::Int(0)))
        } else {
            match lowered.and_then(|p| p.transposes.b.as_deref()) {
                None => false,
                Some([1, 0]) => true,
                Some(_) => continue,
            }
        };
        let (Ok(r), Ok(c)) = (usize::try_from(d0), usize::try_from(d1)) else { continue };
        let (k, n) = if trans { (c, r) } else { (r, c) };
        let Some(len) = packed_b_len(k, n) else { continue };
        let padding = n.div_ceil(32) * 32 - n;
        if k == 0 || n == 0 || padding > n / 8 {
            continue;
        }
        let Some(values) = f32s(b) else { continue };
        let mut packed = vec![0.0f32; len];
        if pack_b_strips(k, n, &values, trans, &mut packed).is_err() {
            continue;
        }
        if let Some(packed) = add_packed(g, id, "packed_B", &packed)
            && let Some(p) = product_mut(g.node_mut(id))
        {
            p.packed_b = Some(packed);
            done += 1;
        }
    }
    done
}

/// Lays out the constant int8 weights of every `QLinearMatMul` and
/// `QLinearConv` that runs on the int8 kernels (its `IntegerLowering`) as
/// the runtime's `int8::pack_weights` and `pack_conv_weights` do. Returns
/// how many were packed.
pub fn pack_int8_weights(g: &mut Graph, inferred: &Inferred) -> usize {
    use onnx_codegen_runtime::int8::{
        pack_conv_weights, pack_weights, packed_conv_len, packed_len,
    };
    let uses = g.uses();
    let mut done = 0;
    for &id in g.order().to_vec().iter() {
        let node = g.node(id);
        // Products rewritten from QDQ regions carry their lowering; those
        // given as QLinearConv / QLinearMatMul (the QOperator format) get
        // one here when their weights' zero point is 0, as the int8 kernels
        // want.
        let w_zero_is_0 = match node.input(5) {
            None => true,
            Some(z) => constant(g, inferred, Some(z))
                .and_then(|t| t.to_i64s())
                .is_some_and(|z| z.iter().all(|&v| v == 0)),
        };
        let lowered = match &node.lowering {
            Some(Lowering::Integer(l)) => l.packed.is_none(),
            None => w_zero_is_0,
            _ => false,
        };
        let (conv, product) = (node.op.is("QLinearConv"), node.op.is("QLinearMatMul"));
        if !(conv || product) || !lowered || !computed_at_run_time(node, inferred) {
            continue;
        }
        let Some(wid) = node.input(3) else { continue };
        let Some(w) = constant(g, inferred, Some(wid)) else { continue };
        // Other readers may only be folded or dead (the dequantization of a
        // rewritten region, too large to fold): the original weights are
        // then not stored.
        let others_fold = uses[wid.index()].iter().all(|u| match *u {
            Use::Input { node, index } => {
                let reader = g.node(node);
                (node, index) == (id, 3)
                    || !computed_at_run_time(reader, inferred)
                    || reader.outputs.iter().flatten().all(|v| uses[v.index()].is_empty())
            }
            _ => false,
        });
        if w.elem != ElemType::Int8 || !others_fold {
            continue;
        }
        let Some(bytes) = w.bytes() else { continue };
        let values: Vec<i8> = bytes.iter().map(|&b| b as i8).collect();
        let dims: Vec<usize> = w.dims.iter().filter_map(|&d| usize::try_from(d).ok()).collect();
        let packed = match (conv, dims.as_slice()) {
            (false, &[k, n]) => {
                let mut packed = vec![0i8; packed_len(k, n)];
                pack_weights(&values, k, n, false, &mut packed).ok().map(|()| packed)
            }
            (true, &[m, cg, kh, kw]) => {
                let groups = match node.attr("group") {
                    None => 1,
                    Some(AttrValue::Int(g)) => usize::try_from(*g).unwrap_or(0),
                    Some(_) => 0,
                };
                // The layout depends on the filters only (channels, groups,
                // kernel): a window the size of the kernel describes them.
                let (kernel, one, zero) = ([kh, kw], [1, 1], [0, 0]);
                let window = onnx_codegen_runtime::conv::Window {
                    in_dims: &kernel,
                    out_dims: &one,
                    kernel: &kernel,
                    strides: &one,
                    dilations: &one,
                    pads_begin: &zero,
                    pads_end: &zero,
                };
                let p = onnx_codegen_runtime::conv::Conv {
                    batch: 1,
                    in_channels: cg * groups,
                    out_channels: m,
                    groups,
                    window,
                };
                let mut packed = vec![0i8; packed_conv_len(&p)];
                pack_conv_weights(&p, &values, &mut packed).ok().map(|()| packed)
            }
            _ => None,
        };
        let Some(packed) = packed else { continue };
        let base = format!("{}_packed_W", g.node(id).name);
        let name = crate::passes::sequences::fresh(g, base);
        let bytes: Vec<u8> = packed.iter().map(|&v| v as u8).collect();
        let len = packed.len() as u64;
        let Ok(t) = Tensor::from_bytes(name.clone(), ElemType::Int8, vec![len], bytes.into())
        else {
            continue;
        };
        let packed = g.add_initializer(name, t);
        let node = g.node_mut(id);
        match &mut node.lowering {
            Some(Lowering::Integer(l)) => l.packed = Some(packed),
            lowering => {
                *lowering = Some(Lowering::Integer(IntegerLowering {
                    packed: Some(packed),
                    ..IntegerLowering::default()
                }))
            }
        }
        done += 1;
    }
    done
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::run;

    fn names(a: &crate::generate::Analysis) -> Vec<(&'static str, String)> {
        let g = &a.model().graph;
        a.rewrites.iter().map(|r| (r.name, g.node(r.into).op.op_type.clone())).collect()
    }

    #[test]
    fn zero_spatial_pads_fold_into_the_conv() {
        let a = run(
            18,
            "g (float[1, 1, 4, 4] x) => (float[1, 1, 6, 6] y) \
             <float[1, 1, 2, 2] w = {1, 2, 3, 4}, int64[8] p = {0, 0, 1, 2, 0, 0, 1, 1}>\n\
             {\n xp = Pad (x, p)\n y = Conv <pads = [0, 0, 1, 0]> (xp, w)\n}",
        );
        assert_eq!(names(&a), [("pad-into-conv", "Conv".to_owned())]);
        let g = &a.model().graph;
        let conv = g.nodes().map(|(_, n)| n).find(|n| n.op.is("Conv")).expect("the Conv stays");
        assert_eq!(conv.attr("pads"), Some(&crate::ir::AttrValue::Ints(vec![1, 2, 2, 1])));
        assert_eq!(a.summary().nodes, 2);
    }

    #[test]
    fn pads_that_are_not_zero_spatial_or_are_shared_stay() {
        let graph = |pads: &str, value: &str, extra: &str| {
            format!(
                "g (float[1, 1, 4, 4] x) => (float y{extra}) <float[1, 1, 1, 1] w = {{2}}, \
                 int64[8] p = {{{pads}}}, float v = {{{value}}}>\n\
                 {{\n xp = Pad (x, p, v)\n c = Conv (xp, w)\n y = ReduceSum <keepdims = 0> (c)\n\
                 {}}}",
                if extra.is_empty() { "" } else { " z = Identity (xp)\n" }
            )
        };
        // Channel padding, a non-zero value, a crop, a second reader.
        for (pads, value, extra) in [
            ("0, 1, 0, 0, 0, 0, 0, 0", "0", ""),
            ("0, 0, 1, 1, 0, 0, 1, 1", "1", ""),
            ("0, 0, -1, 0, 0, 0, 0, 0", "0", ""),
            ("0, 0, 1, 1, 0, 0, 1, 1", "0", ", float[1, 1, 6, 6] z"),
        ] {
            let a = run(18, &graph(pads, value, extra));
            assert!(a.rewrites.is_empty(), "{pads} / {value} / {extra}");
        }
        // The same graph with a zero spatial pad does fold (the cases above
        // are refused for their own reason).
        assert_eq!(run(18, &graph("0, 0, 1, 1, 0, 0, 1, 1", "0", "")).rewrites.len(), 1);
    }

    #[test]
    fn batch_norm_folds_into_conv_and_gemm_then_relu_fuses() {
        let a = run(
            15,
            "g (float[1, 2, 3, 3] x, float[2, 3] u) => (float[1, 2, 3, 3] y, float[2, 2] z) \
             <float[2, 2, 1, 1] w = {1, 2, 3, 4}, float[2] s = {1, 2}, float[2] t = {0, 1}, \
             float[2] m = {0.5, -1}, float[2] v = {1, 4}, float[3, 2] b = {1, 2, 3, 4, 5, 6}>\n\
             {\n c = Conv (x, w)\n n = BatchNormalization (c, s, t, m, v)\n y = Relu (n)\n \
             gm = Gemm (u, b)\n z = BatchNormalization (gm, s, t, m, v)\n}",
        );
        assert_eq!(
            names(&a),
            [
                ("batchnorm-into-producer", "Conv".to_owned()),
                ("batchnorm-into-producer", "Gemm".to_owned())
            ]
        );
        // The Relu now follows the Conv directly, and is fused into it.
        assert_eq!(a.fused.len(), 1);
        assert_eq!(a.inferred.steps.len(), 2);
    }

    #[test]
    fn batch_norm_after_a_shared_or_activated_producer_stays() {
        // The Conv's output is also a graph output.
        let a = run(
            15,
            "g (float[1, 1, 2, 2] x) => (float[1, 1, 2, 2] c, float[1, 1, 2, 2] y) \
             <float[1, 1, 1, 1] w = {2}, float[1] s = {1}, float[1] t = {0}, float[1] m = {0}, \
             float[1] v = {1}>\n{\n c = Conv (x, w)\n y = BatchNormalization (c, s, t, m, v)\n}",
        );
        assert!(a.rewrites.is_empty());
        // Training mode.
        let a = run(
            15,
            "g (float[1, 1, 2, 2] x) => (float[1, 1, 2, 2] y) \
             <float[1, 1, 1, 1] w = {2}, float[1] s = {1}, float[1] t = {0}, float[1] m = {0}, \
             float[1] v = {1}>\n{\n c = Conv (x, w)\n \
             y = BatchNormalization <training_mode = 1> (c, s, t, m, v)\n}",
        );
        assert!(a.rewrites.is_empty());
    }

    #[test]
    fn transposes_around_a_run_time_matmul_fold_into_its_strides() {
        let a = run(
            13,
            "g (float[3, 2, 4] s) => (float[3, 2, 3] att) {\n \
             qt = Transpose <perm = [1, 0, 2]> (s)\n kt = Transpose <perm = [1, 2, 0]> (s)\n \
             sc = MatMul (qt, kt)\n att = Transpose <perm = [1, 0, 2]> (sc)\n}",
        );
        assert_eq!(a.rewrites.len(), 3);
        assert!(a.rewrites.iter().all(|r| r.name == "transpose-into-matmul"));
        assert_eq!(a.inferred.steps.len(), 1);
        assert_eq!(crate::ops::testing::types(&a), [crate::ops::testing::ty("float[3, 2, 3]")]);
        // An output transpose that moves the last axis stays; so does one
        // whose result another node reads.
        let a = run(
            13,
            "g (float[2, 3] x, float[3, 4] w) => (float[4, 2] y, float[3, 2] z) {\n \
             xt = Transpose (x)\n m = MatMul (x, w)\n y = Transpose (m)\n z = Identity (xt)\n}",
        );
        assert!(a.rewrites.is_empty());
    }

    #[test]
    fn a_constant_row_added_to_a_run_time_matmul_becomes_its_bias() {
        let graph = |bias: &str| {
            format!(
                "g (float[2, 3] x) => (float[2, 2] y) <float[3, 2] w = {{1, 2, 3, 4, 5, 6}}, \
                 {bias}>\n{{\n m = MatMul (x, w)\n y = Add (b, m)\n}}"
            )
        };
        let a = run(13, &graph("float[1, 2] b = {1, 2}"));
        assert_eq!(names(&a), [("add-into-matmul", "MatMul".to_owned())]);
        assert_eq!(a.inferred.steps.len(), 1);
        // A column vector, or a full matrix, is not a bias of the columns.
        assert!(run(13, &graph("float[2, 1] b = {1, 2}")).rewrites.is_empty());
        assert!(run(13, &graph("float[2, 2] b = {1, 2, 3, 4}")).rewrites.is_empty());
    }

    #[test]
    fn exact_gelu_chains_become_one_gelu() {
        // The torchscript form, then the dynamo form (0.5 first, x last, the
        // division as a product), on data known at generation time so the
        // fused node's folded result can be read back.
        let chains = [
            "d = Div (x, r)\n e = Erf (d)\n a = Add (e, one)\n m = Mul (x, a)\n y = Mul (m, h)",
            "d = Mul (x, ir)\n e = Erf (d)\n a = Add (one, e)\n m = Mul (h, a)\n y = Mul (x, m)",
        ];
        for chain in chains {
            let a = run(
                17,
                &format!(
                    "g () => (float[2, 2] y) <float[2, 2] x = {{1, -1, 0, 2}}, float r = {{1.4142135}}, \
                     float ir = {{0.70710677}}, float one = {{1}}, float h = {{0.5}}>\n{{\n {chain}\n}}"
                ),
            );
            assert_eq!(names(&a), vec![("erf-gelu", "Gelu".to_owned()); 4], "{chain}");
            assert_eq!(a.model().graph.nodes().count(), 1);
            let y = crate::ops::testing::value(&a, 0);
            let want = [0.841_344_7, -0.158_655_3, 0.0, 1.954_499_7];
            for (y, w) in y.iter().zip(want) {
                assert!((y - w).abs() < 1e-6, "{chain}: {y} vs {w}");
            }
        }
        // Another constant, or an intermediate read elsewhere: the chain stays.
        let graph = |half: &str, out: &str| {
            format!(
                "g (float[2] x) => (float[2] y{out}) <float r = {{1.4142135}}, float one = {{1}}, \
                 float h = {{{half}}}>\n{{\n d = Div (x, r)\n e = Erf (d)\n a = Add (e, one)\n \
                 m = Mul (x, a)\n y = Mul (m, h)\n}}"
            )
        };
        assert_eq!(run(17, &graph("0.5", "")).rewrites.len(), 4);
        assert!(run(17, &graph("0.25", "")).rewrites.is_empty());
        assert!(run(17, &graph("0.5", ", float[2] a")).rewrites.is_empty());
    }

    #[test]
    fn tanh_gelu_chains_become_one_gelu() {
        // The GPT-2 form (Pow, 0.5 * x first), the torch symbolic form (cube
        // as two products, 0.5 last) and a mixed order, on data known at
        // generation time so the fused node's folded result can be read back.
        let chains = [
            "p = Pow (x, three)\n k = Mul (p, kappa)\n s = Add (x, k)\n t = Mul (s, c)\n \
             th = Tanh (t)\n hx = Mul (x, h)\n a = Add (th, one)\n y = Mul (hx, a)",
            "sq = Mul (x, x)\n p = Mul (x, sq)\n k = Mul (kappa, p)\n s = Add (k, x)\n \
             t = Mul (c, s)\n th = Tanh (t)\n a = Add (one, th)\n m = Mul (x, a)\n y = Mul (h, m)",
            "sq = Mul (x, x)\n p = Mul (sq, x)\n k = Mul (p, kappa)\n s = Add (x, k)\n \
             t = Mul (s, c)\n th = Tanh (t)\n a = Add (th, one)\n m = Mul (h, a)\n y = Mul (m, x)",
        ];
        let consts = "float three = {3}, float kappa = {0.044715}, float c = {0.7978846}, \
                      float one = {1}, float h = {0.5}";
        let xs = [1.0f64, -1.0, 0.0, 2.5, -3.0, 0.3];
        for chain in chains {
            let a = run(
                17,
                &format!(
                    "g () => (float[2, 3] y) <float[2, 3] x = {{1, -1, 0, 2.5, -3, 0.3}}, \
                     {consts}>\n{{\n {chain}\n}}"
                ),
            );
            let n = a.rewrites.len();
            assert!(n == 7 || n == 8, "{chain}: {n}");
            assert!(a.rewrites.iter().all(|r| r.name == "tanh-gelu"), "{chain}");
            assert_eq!(a.model().graph.nodes().count(), 1, "{chain}");
            let y = crate::ops::testing::value(&a, 0);
            for (y, x) in y.iter().zip(xs) {
                let c = (2.0 / core::f64::consts::PI).sqrt();
                let want = 0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh());
                assert!((*y - want).abs() < 1e-6, "{chain}: {y} vs {want}");
            }
        }
        // Another constant, an intermediate read elsewhere, a cube of
        // something else: the chain stays.
        let graph = |kappa: &str, out: &str, cube: &str| {
            format!(
                "g (float[2] x, float[2] z) => (float[2] y{out}) <float three = {{3}}, \
                 float kappa = {{{kappa}}}, float c = {{0.7978846}}, float one = {{1}}, \
                 float h = {{0.5}}>\n{{\n p = Pow ({cube}, three)\n k = Mul (p, kappa)\n \
                 s = Add (x, k)\n t = Mul (s, c)\n th = Tanh (t)\n hx = Mul (x, h)\n \
                 a = Add (th, one)\n y = Mul (hx, a)\n}}"
            )
        };
        assert_eq!(run(17, &graph("0.044715", "", "x")).rewrites.len(), 7);
        assert!(run(17, &graph("0.05", "", "x")).rewrites.is_empty());
        assert!(run(17, &graph("0.044715", ", float[2] th", "x")).rewrites.is_empty());
        assert!(run(17, &graph("0.044715", ", float[2] hx", "x")).rewrites.is_empty());
        assert!(run(17, &graph("0.044715", "", "z")).rewrites.is_empty());
    }

    #[test]
    fn scale_and_mask_fold_into_the_softmax() {
        // Causal attention scores: Div by 2, Where(mask, d, -inf) or the
        // branches swapped with the mask inverted, then Softmax; the folded
        // values are read back and checked against the formula.
        let x = [1.0f64, -2.0, 3.0, 0.5, 4.0, -1.0, 2.0, 2.0, -3.0];
        let keep = [true, false, false, true, true, false, true, true, true];
        let body = [
            ("m", "d = Div (x, c)\n w = Where (m, d, f)\n y = Softmax <axis = -1> (w)", true),
            ("n", "d = Div (x, c)\n w = Where (n, f, d)\n y = Softmax <axis = 2> (w)", true),
            ("m", "w = Where (m, x, f)\n y = Softmax <axis = -1> (w)", false),
            ("m", "d = Div (x, c)\n y = Softmax <axis = -1> (d)", true),
        ];
        for (_, chain, scaled) in body {
            let a = run(
                17,
                &format!(
                    "g () => (float[1, 3, 3] y) <float[1, 3, 3] x = {{1, -2, 3, 0.5, 4, -1, 2, 2, -3}}, \
                     bool[3, 3] m = {{1, 0, 0, 1, 1, 0, 1, 1, 1}}, \
                     bool[3, 3] n = {{0, 1, 1, 0, 0, 1, 0, 0, 0}}, float c = {{2}}, \
                     float f = {{-inf}}>\n{{\n {chain}\n}}"
                ),
            );
            let masked = chain.contains("Where");
            let want_n = usize::from(masked) + usize::from(scaled);
            assert_eq!(names(&a), vec![("softmax-prologue", "Softmax".to_owned()); want_n]);
            assert_eq!(a.model().graph.nodes().count(), 1, "{chain}");
            let y = crate::ops::testing::value(&a, 0);
            for r in 0..3 {
                let row: Vec<f64> = (0..3)
                    .map(|j| {
                        let v = if scaled { x[r * 3 + j] / 2.0 } else { x[r * 3 + j] };
                        if keep[r * 3 + j] || !masked { v } else { f64::NEG_INFINITY }
                    })
                    .collect();
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = row.iter().map(|v| (v - m).exp()).sum();
                for j in 0..3 {
                    let want = (row[j] - m).exp() / sum;
                    let got = y[r * 3 + j];
                    assert!((got - want).abs() < 1e-6, "{chain}: {got} vs {want}");
                }
            }
        }
        // Not the last axis, a Div by a tensor, a Where output read elsewhere:
        // nothing folds.
        let graph = |chain: &str, extra: &str| {
            format!(
                "g (float[2, 3] x, float[3] v) => (float[2, 3] y{extra}) <bool[3] m = {{1, 0, 1}}, \
                 float c = {{2}}, float f = {{-1e9}}>\n{{\n {chain}\n}}"
            )
        };
        let swap = "d = Div (x, c)\n w = Where (m, d, f)\n y = Softmax <axis = 0> (w)";
        assert!(run(17, &graph(swap, "")).rewrites.is_empty());
        let by_tensor = "d = Div (x, v)\n y = Softmax <axis = -1> (d)";
        assert!(run(17, &graph(by_tensor, "")).rewrites.is_empty());
        let shared = "d = Div (x, c)\n w = Where (m, d, f)\n y = Softmax <axis = -1> (w)";
        assert_eq!(run(17, &graph(shared, "")).rewrites.len(), 2);
        let a = run(17, &graph(shared, ", float[2, 3] w"));
        // The Where stays (its output is read); the Div before it too.
        assert!(a.rewrites.is_empty());
    }

    #[test]
    fn a_written_out_layer_norm_becomes_one() {
        let graph = |opset: u32, two: &str, extra: &str| {
            let mean = |v: &str| {
                if opset >= 18 {
                    format!("ReduceMean ({v}, ax)")
                } else {
                    format!("ReduceMean <axes = [-1]> ({v})")
                }
            };
            format!(
                "g () => (float[2, 3] y{extra}) <float[2, 3] x = {{1, -2, 4, 0.5, 0.5, 3}}, \
                 int64[1] ax = {{-1}}, float two = {{{two}}}, float eps = {{0.001}}, \
                 float[3] s = {{1, 2, -1}}, float[3] b = {{0, 1, 0.5}}>\n{{\n m = {}\n \
                 d = Sub (x, m)\n q = Pow (d, two)\n v = {}\n ve = Add (v, eps)\n \
                 sd = Sqrt (ve)\n n = Div (d, sd)\n sc = Mul (n, s)\n y = Add (sc, b)\n}}",
                mean("x"),
                mean("q")
            )
        };
        for opset in [14, 18] {
            let a = run(opset, &graph(opset, "2", ""));
            assert_eq!(a.rewrites.len(), 8, "opset {opset}");
            assert_eq!(a.model().graph.nodes().count(), 1);
            // Row by row: (x - mean) / sqrt(var + eps) * s + b.
            let x = [[1.0f64, -2.0, 4.0], [0.5, 0.5, 3.0]];
            let mut want = Vec::new();
            for r in x {
                let m = r.iter().sum::<f64>() / 3.0;
                let v = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / 3.0;
                for ((x, s), b) in r.iter().zip([1.0, 2.0, -1.0]).zip([0.0, 1.0, 0.5]) {
                    want.push((x - m) / (v + 0.001f32 as f64).sqrt() * s + b);
                }
            }
            let y = crate::ops::testing::value(&a, 0);
            for (y, w) in y.iter().zip(&want) {
                assert!((y - w).abs() < 1e-5, "opset {opset}: {y} vs {w}");
            }
        }
        // Another power, or the centred values read elsewhere: it stays.
        assert!(run(14, &graph(14, "3", "")).rewrites.is_empty());
        assert!(run(14, &graph(14, "2", ", float[2, 3] d")).rewrites.is_empty());
    }

    #[test]
    fn constant_lstm_weights_are_regrouped_into_a_weight_input() {
        let graph = |w: &str| {
            format!(
                "g (float[3, 1, 2] x{}) => (float[3, 1, 1, 1] y) <float[1, 4, 1] r = {{1, 2, 3, 4}}{}>\n\
                 {{\n y = LSTM <hidden_size = 1> (x, w, r)\n}}",
                if w.is_empty() { ", float[1, 4, 2] w" } else { "" },
                w
            )
        };
        let a = run(14, &graph(", float[1, 4, 2] w = {1, 2, 3, 4, 5, 6, 7, 8}"));
        let g = &a.model().graph;
        let lstm = g.nodes().map(|(_, n)| n).find(|n| n.op.is("LSTM")).expect("the LSTM stays");
        assert!(matches!(lstm.lowering, Some(crate::ir::Lowering::Lstm { .. })));
        // Only the regrouped copy is stored, not W and R beside it.
        let packed = onnx_codegen_runtime::rnn::packed_lstm_len(1, 1, 2).unwrap();
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * packed));
        // W given at run time: nothing to regroup.
        let a = run(14, &graph(""));
        let g = &a.model().graph;
        let lstm = g.nodes().map(|(_, n)| n).find(|n| n.op.is("LSTM")).expect("the LSTM stays");
        assert!(lstm.lowering.is_none());
    }

    /// A Conv of `m` filters over `c` channels, 3x3 pad 1, on a 5x5 input,
    /// its weights constant; `extra` adds nodes after it.
    fn conv_graph(m: usize, c: usize, group: usize, extra: &str, outs: &str) -> String {
        let w: Vec<String> = (0..m * (c / group) * 9).map(|i| format!("{}", i % 7)).collect();
        format!(
            "g (float[1, {c}, 5, 5] x) => (float[1, {m}, 5, 5] y{outs}) \
             <float[{m}, {cg}, 3, 3] w = {{{w}}}>\n{{\n y = Conv <pads = [1, 1, 1, 1], group = {group}> (x, w)\n{extra}}}",
            cg = c / group,
            w = w.join(", ")
        )
    }

    /// Convs whose weights `layout` accepts.
    fn convs_with(
        a: &crate::generate::Analysis,
        layout: impl Fn(&super::ConvWeights) -> bool,
    ) -> usize {
        let g = &a.model().graph;
        g.nodes()
            .filter(|(_, n)| match &n.lowering {
                Some(crate::ir::Lowering::Conv(c)) => n.op.is("Conv") && layout(&c.weights),
                _ => false,
            })
            .count()
    }

    fn packed_convs(a: &crate::generate::Analysis) -> usize {
        convs_with(a, |w| matches!(w, super::ConvWeights::Packed(_)))
    }

    /// The packed B of a product, if it has one.
    fn packed_b(node: &crate::ir::Node) -> Option<crate::ir::ValueId> {
        super::product_of(node).and_then(|p| p.packed_b)
    }

    /// A QLinearConv given as such (the QOperator format) runs on packed
    /// weights when their zero point is 0, as one rewritten from QDQ does;
    /// with another zero point it keeps the reference loops' layout.
    #[test]
    fn qoperator_convs_get_packed_int8_weights() {
        let graph = |wz: i32| {
            format!(
                r#"g (uint8[1,2,5,5] x) => (uint8[1,3,5,5] y)
                <float xs = {{0.05}}, uint8 xz = {{128}},
                 int8[3,2,3,3] w = {{{w}}}, float ws = {{0.01}}, int8 wz = {{{wz}}},
                 float ys = {{0.1}}, uint8 yz = {{120}}, int32[3] b = {{5, -7, 11}}> {{
                    y = QLinearConv <pads = [1, 1, 1, 1]> (x, xs, xz, w, ws, wz, ys, yz, b)
                }}"#,
                w = (0..54)
                    .map(|i| ((i * 37) % 200 - 100).to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let packed = |a: &crate::generate::Analysis| {
            a.model()
                .graph
                .nodes()
                .filter(|(_, n)| {
                    matches!(&n.lowering, Some(crate::ir::Lowering::Integer(l)) if l.packed.is_some())
                })
                .count()
        };
        assert_eq!(packed(&run(13, &graph(0))), 1);
        assert_eq!(packed(&run(13, &graph(3))), 0);
    }

    #[test]
    fn constant_conv_weights_are_packed_into_panels() {
        let a = run(14, &conv_graph(10, 3, 1, "", ""));
        assert_eq!(packed_convs(&a), 1);
        // Only the packed copy is stored: 16 filters (10 padded) of 27 taps.
        let len = onnx_codegen_runtime::conv::packed_weights_len(10, 27).unwrap();
        assert_eq!(len, 16 * 27);
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * len));
        // The generated call reads the packed copy.
        let src =
            format!("<ir_version: 8, opset_import: [\"\" : 14]>\n{}", conv_graph(10, 3, 1, "", ""));
        let model = crate::text::parse_model(&src, "t.onnxtxt").expect("parses");
        let opts = crate::generate::Options::default();
        let code = crate::generate::generate(&model, &opts, "t").expect("generates");
        assert!(code.tokens.to_string().replace(' ', "").contains("ConvWeights::Panels"));
        // Weights a BatchNormalization was folded into: the folded ones packed.
        let a = run(
            14,
            "g (float[1, 3, 5, 5] x) => (float[1, 9, 5, 5] z) <float[9, 3, 1, 1] w = {1, 2, 3, 4, \
             5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9}, float[9] s = \
             {1, 2, 3, 4, 5, 6, 7, 8, 9}, float[9] b = {0, 0, 0, 0, 0, 0, 0, 0, 1}>\n\
             {\n y = Conv (x, w)\n z = BatchNormalization (y, s, b, b, s)\n}",
        );
        assert_eq!(a.rewrites.len(), 1);
        assert_eq!(packed_convs(&a), 1);
        let len = onnx_codegen_runtime::conv::packed_weights_len(9, 3).unwrap();
        // The packed weights and the folded bias (each aligned), not the
        // folded W beside them.
        let bytes = a.plan.as_ref().map_or(0, |p| p.weights.len());
        assert!(bytes >= 4 * (len + 9) && bytes < 4 * (len + 9 + 27), "{bytes}");
        // Grouped, or the one-channel depthwise case: left as they are.
        assert_eq!(packed_convs(&run(14, &conv_graph(4, 4, 2, "", ""))), 0);
        assert_eq!(packed_convs(&run(14, &conv_graph(1, 1, 1, "", ""))), 0);
    }

    /// The ConvTransposes of a graph and their lowerings.
    fn conv_transposes(a: &crate::generate::Analysis) -> Vec<Option<crate::ir::Lowering>> {
        let g = &a.model().graph;
        g.nodes()
            .filter(|(_, n)| n.op.is("ConvTranspose"))
            .map(|(_, n)| n.lowering.clone())
            .collect()
    }

    /// A ConvTranspose of `x` by a constant W of `wdims` with `attrs`.
    fn conv_transpose_graph(x: &str, y: &str, wdims: &[usize], attrs: &str, elem: &str) -> String {
        let n: usize = wdims.iter().product();
        let dims: Vec<String> = wdims.iter().map(|d| d.to_string()).collect();
        format!(
            "g ({elem}[{x}] x) => ({elem}[{y}] y) <{elem}[{}] w = {{{}}}>\n\
             {{\n y = ConvTranspose <{attrs}> (x, w)\n}}",
            dims.join(", "),
            numbers(n)
        )
    }

    #[test]
    fn conv_transpose_weights_are_transposed_into_panels() {
        use onnx_codegen_runtime::conv::conv_transpose_packed_len;
        // U-Net's 2x2/2: 12 channels to 5, on 6x7 positions.
        let src = conv_transpose_graph(
            "1, 12, 6, 7",
            "1, 5, 12, 14",
            &[12, 5, 2, 2],
            "kernel_shape = [2, 2], strides = [2, 2]",
            "float",
        );
        let a = run(13, &src);
        let Some(Some(crate::ir::Lowering::Conv(l))) = conv_transposes(&a).first().cloned() else {
            panic!("the ConvTranspose is lowered");
        };
        // Every position in one product: 20 rows of 42 columns fit.
        let super::ConvWeights::Transposed { block, .. } = l.weights else { panic!("transposed") };
        assert_eq!(block, 42);
        assert!(l.epilogue.is_empty());
        // Only the packed copy is stored: 20 rows (5 channels x 4 taps)
        // padded to 24, of 12 input channels.
        let len = conv_transpose_packed_len(12, 5, 1, 4).unwrap();
        assert_eq!(len, 24 * 12);
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * len));
        let model = crate::text::parse_model(
            &format!("<ir_version: 8, opset_import: [\"\" : 13]>\n{src}"),
            "t.onnxtxt",
        )
        .expect("parses");
        let code = crate::generate::generate(&model, &crate::generate::Options::default(), "t")
            .expect("generates");
        let code = code.tokens.to_string().replace(' ', "");
        assert!(code.contains("conv::sconv_transpose("), "{code}");
        // Blocks of whole rows that fit the scratch (65536 floats: 256 rows
        // of 256 columns, 4000 positions in 16 blocks of 250, two rows of
        // 100), or part of a row when one does not (1-D, 2 groups of 32
        // channels x 16 taps: 8 blocks of 125 of 1000 positions).
        let weights = |a: &crate::generate::Analysis| match conv_transposes(a).first() {
            Some(Some(crate::ir::Lowering::Conv(l))) => Some(l.weights.clone()),
            _ => None,
        };
        let a = run(
            13,
            &conv_transpose_graph(
                "1, 2, 40, 100",
                "1, 64, 80, 200",
                &[2, 64, 2, 2],
                "kernel_shape = [2, 2], strides = [2, 2]",
                "float",
            ),
        );
        let Some(super::ConvWeights::Transposed { block, .. }) = weights(&a) else { panic!() };
        assert_eq!(block, 200);
        let a = run(
            13,
            &conv_transpose_graph(
                "1, 2, 1000",
                "1, 64, 8000",
                &[2, 32, 16],
                "kernel_shape = [16], strides = [8], pads = [4, 4], group = 2",
                "float",
            ),
        );
        let Some(super::ConvWeights::Transposed { block, .. }) = weights(&a) else { panic!() };
        assert_eq!(block, 125);
        // 3-D, and f64: the reference loops on the weights as given.
        let a = run(
            13,
            &conv_transpose_graph(
                "1, 2, 3, 3, 3",
                "1, 2, 6, 6, 6",
                &[2, 2, 2, 2, 2],
                "kernel_shape = [2, 2, 2], strides = [2, 2, 2]",
                "float",
            ),
        );
        assert_eq!(conv_transposes(&a), [None]);
        let a = run(
            13,
            &conv_transpose_graph(
                "1, 12, 6, 7",
                "1, 5, 12, 14",
                &[12, 5, 2, 2],
                "kernel_shape = [2, 2], strides = [2, 2]",
                "double",
            ),
        );
        assert_eq!(conv_transposes(&a), [None]);
    }

    #[test]
    fn conv_weights_read_elsewhere_stay_unpacked() {
        // The same W read by a second Conv and by a graph output: not packed,
        // stored once.
        let second = " z = Conv <pads = [1, 1, 1, 1]> (y2, w)\n y2 = Relu (x)\n";
        let a = run(14, &conv_graph(10, 3, 1, second, ", float[1, 10, 5, 5] z"));
        assert_eq!(packed_convs(&a), 0);
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * 10 * 27));
        let a = run(14, &conv_graph(10, 3, 1, " v = Identity (w)\n", ", float[10, 3, 3, 3] v"));
        assert_eq!(packed_convs(&a), 0);
    }

    /// `count` values for a constant in the text syntax.
    fn numbers(count: usize) -> String {
        (0..count).map(|i| format!("{}", (i % 7) as f32 - 3.0)).collect::<Vec<_>>().join(", ")
    }

    fn product_of(a: &crate::generate::Analysis, op: &str) -> crate::ir::Node {
        let g = &a.model().graph;
        g.nodes().map(|(_, n)| n).find(|n| n.op.is(op)).expect("the product stays").clone()
    }

    #[test]
    fn constant_matmul_and_gemm_weights_are_laid_out_in_strips() {
        use onnx_codegen_runtime::gemm::packed_b_len;
        // MatMul over a batch of A, with a folded bias: only the strips and
        // the bias are stored, not B beside them.
        let a = run(
            14,
            &format!(
                "g (float[2, 3, 2] x) => (float[2, 3, 32] y) <float[2, 32] w = {{{}}}, \
                 float[32] b = {{{}}}>\n{{\n p = MatMul (x, w)\n y = Add (p, b)\n}}",
                numbers(64),
                numbers(32)
            ),
        );
        let mm = product_of(&a, "MatMul");
        assert!(packed_b(&mm).is_some());
        let len = packed_b_len(2, 32).unwrap();
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * (len + 32)));
        // Gemm with transB (torch's Linear): B [n, k] = [40, 3] is used
        // transposed; 40 columns pad to 64, over an eighth: left alone, and
        // 64 columns are packed.
        let gemm = |n: usize| {
            format!(
                "g (float[4, 3] x) => (float[4, {n}] y) <float[{n}, 3] w = {{{}}}>\n\
                 {{\n y = Gemm <transB = 1> (x, w)\n}}",
                numbers(3 * n)
            )
        };
        let a = run(14, &gemm(64));
        assert!(packed_b(&product_of(&a, "Gemm")).is_some());
        let len = packed_b_len(3, 64).unwrap();
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * len));
        let a = run(14, &gemm(40));
        assert!(packed_b(&product_of(&a, "Gemm")).is_none());
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * 3 * 40));
    }

    #[test]
    fn a_weight_another_node_reads_is_kept_beside_its_strips() {
        use onnx_codegen_runtime::gemm::packed_b_len;
        let a = run(
            14,
            &format!(
                "g (float[3, 2] x, float[2, 32] u) => (float[3, 32] y, float[2, 32] z) \
                 <float[2, 32] w = {{{}}}>\n{{\n y = MatMul (x, w)\n z = Add (u, w)\n}}",
                numbers(64)
            ),
        );
        assert!(packed_b(&product_of(&a, "MatMul")).is_some());
        let len = packed_b_len(2, 32).unwrap();
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * (len + 64)));
        // B given at run time: nothing to pack.
        let a = run(
            14,
            "g (float[3, 2] x, float[2, 32] w) => (float[3, 32] y) {\n y = MatMul (x, w)\n}",
        );
        assert!(packed_b(&product_of(&a, "MatMul")).is_none());
    }

    /// A 3x3 Conv of `m` filters over `c` channels (`group`, `attrs` added)
    /// on an 8x8 map pooled from a 32x32 map in the arena (the pool's step
    /// leaves room for the Winograd scratch), its weights `w` given in the text
    /// syntax or, when `w` is empty, a graph input.
    fn winograd_graph(c: usize, m: usize, group: usize, attrs: &str, w: &str) -> String {
        let (init, input) = if w.is_empty() {
            (String::new(), format!(", float[{m}, {}, 3, 3] w", c / group))
        } else {
            (format!("<float[{m}, {}, 3, 3] w = {{{w}}}>", c / group), String::new())
        };
        format!(
            "g (float[1, {c}, 32, 32] x{input}) => (float[1, {m}, 8, 8] y) {init}\n{{\n \
             r = Relu (x)\n p = MaxPool <kernel_shape = [4, 4], strides = [4, 4]> (r)\n \
             y = Conv <pads = [1, 1, 1, 1], group = {group}{attrs}> (p, w)\n}}"
        )
    }

    /// Weights of both signs, none zero everywhere.
    fn weights(count: usize) -> String {
        let v: Vec<String> = (0..count).map(|i| format!("{}", (i * 7 % 13) as f32 - 6.5)).collect();
        v.join(", ")
    }

    fn winograd_convs(a: &crate::generate::Analysis) -> usize {
        convs_with(a, |w| matches!(w, super::ConvWeights::Winograd { .. }))
    }

    #[test]
    fn eligible_3x3_convs_run_by_winograd_and_drop_their_weights() {
        use onnx_codegen_runtime::winograd::weights_len;
        let src = winograd_graph(96, 100, 1, "", &weights(100 * 96 * 9));
        let a = run(14, &src);
        assert_eq!(winograd_convs(&a), 1);
        // Only the transformed weights are stored: 16 matrices of 104 x 96
        // (100 rows padded to panels of 8), not the 100 x 96 x 9 original.
        let len = weights_len(96, 100).unwrap();
        assert_eq!(len, 16 * 104 * 96);
        assert_eq!(a.plan.as_ref().map(|p| p.weights.len()), Some(4 * len));
        let model = |src: &str| {
            let src = format!("<ir_version: 8, opset_import: [\"\" : 14]>\n{src}");
            crate::text::parse_model(&src, "t.onnxtxt").expect("parses")
        };
        let opts = crate::generate::Options::default();
        let plain = crate::generate::Options { winograd: false, ..opts.clone() };
        let arena = |o: &crate::generate::Options| {
            let a = crate::generate::analyze(&model(&src), o).expect("valid");
            a.summary().arena_bytes
        };
        // The scratch (16 tiles of 196 channels) fits beside the pool's
        // input: the arena is the pool's step, as without Winograd.
        assert_eq!(arena(&opts), arena(&plain));
        let code = crate::generate::generate(&model(&src), &opts, "t").expect("generates");
        assert!(code.tokens.to_string().replace(' ', "").contains("ConvWeights::Winograd"));
        // Turned off: the panel-packed implicit GEMM instead.
        let code = crate::generate::generate(&model(&src), &plain, "t").expect("generates");
        let code = code.tokens.to_string().replace(' ', "");
        assert!(!code.contains("ConvWeights::Winograd") && code.contains("ConvWeights::Panels"));
        // What `onnx_model!` asks before emitting a second, bare-metal version.
        let compiled = |o| crate::generate::compile(&model(&src), o, "t").expect("compiles");
        assert!(compiled(&opts).uses_winograd());
        assert!(!compiled(&plain).uses_winograd());
    }

    #[test]
    fn a_residual_fused_into_a_winograd_conv_keeps_its_transformed_weights() {
        let src = winograd_graph(96, 96, 1, "", &weights(96 * 96 * 9))
            .replace("y = Conv", "c = Conv")
            .replace("(p, w)\n}", "(p, w)\n y = Add (c, p)\n}");
        let a = run(14, &src);
        assert_eq!(winograd_convs(&a), 1);
        let conv = product_of(&a, "Conv");
        let epilogue = conv.lowering.as_ref().and_then(crate::ir::Lowering::epilogue);
        assert!(epilogue.is_some_and(|e| e.residual.is_some()));
        assert!(a.model().graph.nodes().all(|(_, n)| !n.op.is("Add")));
        let model = format!("<ir_version: 8, opset_import: [\"\" : 14]>\n{src}");
        let model = crate::text::parse_model(&model, "t.onnxtxt").expect("parses");
        let opts = crate::generate::Options::default();
        let code = crate::generate::generate(&model, &opts, "t").expect("generates");
        let code = code.tokens.to_string().replace(' ', "");
        assert!(code.contains("ConvWeights::Winograd") && code.contains("residual:Some("));
    }

    #[test]
    fn convs_winograd_does_not_pay_for_or_cannot_do_stay() {
        let w = |m: usize, c: usize| weights(m * c * 9);
        // `c -> m` channels at an `o x o` output.
        let sized = |c: usize, m: usize, o: usize| {
            winograd_graph(c, m, 1, "", &w(m, c))
                .replace("32, 32] x", &format!("{}, {}] x", 4 * o, 4 * o))
                .replace("8, 8] y", &format!("{o}, {o}] y"))
        };
        // Stride 2 (a 4x4 output), dilation 2, group 2; too few channels
        // (8 -> 64); too few tiles for the channel pairs: 16 -> 16 on 64
        // tiles, 32 -> 32 on 16, 64 -> 64 on 4.
        let cases = [
            winograd_graph(96, 96, 1, ", strides = [2, 2]", &w(96, 96))
                .replace("8, 8] y", "4, 4] y"),
            winograd_graph(96, 96, 1, ", dilations = [2, 2]", &w(96, 96))
                .replace("8, 8] y", "6, 6] y"),
            winograd_graph(192, 192, 2, "", &w(192, 96)),
            sized(8, 64, 32),
            sized(16, 16, 16),
            sized(32, 32, 7),
            sized(64, 64, 4),
        ];
        for src in &cases {
            let a = run(14, src);
            assert!(a.summary().errors.is_empty(), "{src}");
            assert_eq!(winograd_convs(&a), 0, "{src}");
        }
        // Enough tiles for the channels: 64 -> 64 on 16 and 256 tiles,
        // 128 -> 32 on 196, 16 -> 16 on 256, 32 -> 32 on 25, 48 -> 192 on
        // 49.
        for (c, m, o) in
            [(64, 64, 7), (64, 64, 32), (128, 32, 28), (16, 16, 32), (32, 32, 10), (48, 192, 13)]
        {
            assert_eq!(winograd_convs(&run(14, &sized(c, m, o))), 1, "{c} -> {m} at {o}x{o}");
        }
        // Weights known only at run time.
        assert_eq!(winograd_convs(&run(14, &winograd_graph(96, 96, 1, "", ""))), 0);
        // An infinite weight: the transforms would turn the direct sum's
        // infinities into NaN; the panel path takes it.
        let inf = format!("inf, {}", weights(96 * 96 * 9 - 1));
        let a = run(14, &winograd_graph(96, 96, 1, "", &inf));
        assert_eq!(winograd_convs(&a), 0);
        assert_eq!(packed_convs(&a), 1);
        // A map too small for the scratch beside it: no pool before the Conv.
        let small = winograd_graph(96, 96, 1, "", &w(96, 96))
            .replace("96, 32, 32] x", "96, 8, 8] x")
            .replace("kernel_shape = [4, 4], strides = [4, 4]", "kernel_shape = [1, 1]");
        let a = run(14, &small);
        assert!(a.summary().errors.is_empty());
        assert_eq!(winograd_convs(&a), 0);
    }
}
