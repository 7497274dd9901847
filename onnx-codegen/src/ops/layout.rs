//! Data movement: Transpose, Concat, Split, Slice, Gather, GatherElements,
//! Expand, Pad, Tile, DepthToSpace and SpaceToDepth.
//!
//! These ops only move elements, so they take every element type the runtime
//! can hold (the numeric types, f16, bf16 and bool). Their shape parameters
//! (Slice's starts, Pad's pads, Expand's shape, ...) must be known at
//! generation time; data the kernels index with (Gather's indices, Pad's
//! constant value) may come at run time, and the kernels check it.
//!
//! A call that would copy its input unchanged (an identity permutation, a
//! full slice, zero pads, repeats of one) is an alias instead: no code.
//!
//! The runtime kernels read `X` and write `Y` with `X: MoveTo<Y>`, so a
//! boolean read from the caller's `bool` buffers can be written to the
//! arena's `u8` form (and back) by the same call; Concat and Split are
//! emitted as one call per input or output for the same reason.

use super::{
    EvalError, EvalResult, HostData, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult,
    OpRule, axis, broadcast_shapes, broadcast_strides, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::layout::{self as rt_layout, Nchw4, PadMode};
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::shape::MAX_RANK;
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Transpose" | "Concat" | "Split" | "Slice" | "Gather" | "GatherElements" | "Expand"
        | "Pad" | "Tile" | "DepthToSpace" | "SpaceToDepth" => Some(&LayoutRule),
        _ => None,
    }
}

struct LayoutRule;

/// A node worked out: its output types and what it does.
struct Planned {
    outputs: Vec<TensorType>,
    op: Op,
    /// Shape-like inputs read at run time, checked against the declared
    /// output shapes before `op` runs.
    check: Option<RtCheck>,
}

/// A run-time check (and, for Slice and Pad, the run-time parameters) of a
/// node whose shape-like inputs are data: its outputs have the shapes the
/// model declares, and the generated code calls `runtime::check` with the
/// values before the kernel, which refuses values that give other shapes.
#[derive(Clone, Debug, PartialEq)]
enum RtCheck {
    Expand {
        shape: Vec<usize>,
        out: Vec<usize>,
    },
    Tile {
        shape: Vec<usize>,
        out: Vec<usize>,
    },
    Split {
        sizes: Vec<usize>,
    },
    /// `starts`, `ends` and the optional `axes`, `steps` (inputs 1 to 4)
    /// decide the kernel's first indices and steps.
    Slice {
        shape: Vec<usize>,
        out: Vec<usize>,
        axes: bool,
        steps: bool,
    },
    /// `pads` (input 1) and the optional `axes` (input 3, of `axes_elem`).
    Pad {
        shape: Vec<usize>,
        out: Vec<usize>,
        axes: Option<ElemType>,
    },
}

/// The output type the model fixes for output `k` (declared, or implied
/// downstream: [`NodeCx::expected_output`]), for a node whose shape-like
/// input `what` is data. `rank` is the output's rank when the op keeps it.
fn declared(
    cx: &NodeCx<'_>,
    k: usize,
    elem: ElemType,
    rank: Option<usize>,
    what: &str,
) -> OpResult<TensorType> {
    match cx.expected_output(k, elem, rank) {
        Some(t) => Ok(t),
        None => unsupported(format!(
            "{what} is known only at run time and the model does not declare the shape of output {k}"
        )),
    }
}

/// Whether optional input `i` is present and not known at generation time.
fn runtime_input(cx: &NodeCx<'_>, i: usize) -> bool {
    cx.opt_input(i).is_some() && cx.constant(i).is_none()
}

/// One data-movement call, with every parameter fixed at generation time.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    /// Output 0 is input 0 unchanged.
    Alias,
    Transpose {
        shape: Vec<usize>,
        perm: Vec<usize>,
    },
    /// One call per input: input `k` goes to columns `at[k]..` of the output
    /// seen as `[outer, width]`.
    Concat {
        outer: usize,
        width: usize,
        at: Vec<usize>,
    },
    /// One call per output: output `j` takes columns `at[j]..` of the input
    /// seen as `[outer, width]`.
    Split {
        outer: usize,
        width: usize,
        at: Vec<usize>,
    },
    Slice {
        shape: Vec<usize>,
        starts: Vec<usize>,
        steps: Vec<isize>,
        out: Vec<usize>,
    },
    Gather {
        shape: AxisShape,
    },
    GatherElements {
        shape: Vec<usize>,
        index_shape: Vec<usize>,
        axis: usize,
    },
    Expand {
        out: Vec<usize>,
        strides: Vec<isize>,
    },
    Pad {
        shape: Vec<usize>,
        begin: Vec<isize>,
        end: Vec<isize>,
        mode: PadKind,
    },
    Tile {
        shape: Vec<usize>,
        repeats: Vec<usize>,
    },
    DepthToSpace {
        s: Nchw4,
        block: usize,
        crd: bool,
    },
    SpaceToDepth {
        s: Nchw4,
        block: usize,
        crd: bool,
    },
}

/// Pad's fill.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PadKind {
    /// Zeros (no constant given).
    Zero,
    /// The one element of input 2 (`constant_value`), read when the call runs.
    Input,
    /// The `value` attribute (before opset 11).
    Attr(f64),
    Reflect,
    Edge,
    Wrap,
}

/// The element types the layout kernels serve.
fn check_elem(cx: &NodeCx<'_>, elem: ElemType) -> OpResult<()> {
    match elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64
        | ElemType::Bool
        | ElemType::Float16
        | ElemType::Bfloat16 => Ok(()),
        other => unsupported(format!(
            "{} on {other} tensors: the runtime has no representation for {other} elements",
            cx.node.op.op_type
        )),
    }
}

/// Refuses ranks the strided kernels cannot walk.
fn check_rank(cx: &NodeCx<'_>, rank: usize, limit: usize) -> OpResult<()> {
    if rank > limit {
        return unsupported(format!(
            "{} on a rank-{rank} tensor (the runtime kernel handles rank {limit} at most)",
            cx.node.op.op_type
        ));
    }
    Ok(())
}

/// An output type, refusing element counts that overflow.
fn output(cx: &NodeCx<'_>, elem: ElemType, dims: Vec<usize>) -> OpResult<TensorType> {
    let t = TensorType::new(elem, dims);
    if t.byte_size().is_none() {
        return invalid(format!(
            "the output of {} would have dims {:?}, too large for this machine",
            cx.node.op.op_type, t.dims
        ));
    }
    Ok(t)
}

fn to_usize(v: i64, what: &str) -> OpResult<usize> {
    usize::try_from(v).or_else(|_| invalid(format!("{what} {v} is negative")))
}

fn to_isize(v: i64, what: &str) -> OpResult<isize> {
    isize::try_from(v).or_else(|_| invalid(format!("{what} {v} is too large for this machine")))
}

/// Distinct axes in `[-rank, rank)`, normalised.
fn distinct_axes(axes: &[i64], rank: usize, what: &str) -> OpResult<Vec<usize>> {
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = axis(a, rank, what)?;
        if seen[n] {
            return invalid(format!("{what} {a} is given twice"));
        }
        seen[n] = true;
        out.push(n);
    }
    Ok(out)
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    check_elem(cx, x.elem)?;
    match cx.node.op.op_type.as_str() {
        "Transpose" => transpose(cx, x),
        "Concat" => concat(cx),
        "Split" => split(cx, x),
        "Slice" => slice(cx, x),
        "Gather" => gather(cx, x),
        "GatherElements" => gather_elements(cx, x),
        "Expand" => expand(cx, x),
        "Pad" => pad(cx, x),
        "Tile" => tile(cx, x),
        "DepthToSpace" | "SpaceToDepth" => depth_space(cx, x),
        other => unsupported(format!("{other} is not a data-movement operator")),
    }
}

fn single(t: TensorType, op: Op) -> OpResult<Planned> {
    Ok(Planned { outputs: vec![t], op, check: None })
}

fn transpose(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let perm: Vec<usize> = match cx.ints("perm") {
        Some(p) => {
            if p.len() != rank {
                return invalid(format!(
                    "Transpose perm {p:?} has {} entries; the input has rank {rank}",
                    p.len()
                ));
            }
            if p.iter().any(|&v| v < 0) {
                return invalid(format!("Transpose perm {p:?} has a negative entry"));
            }
            distinct_axes(&p, rank, "Transpose perm entry")?
        }
        None => (0..rank).rev().collect(),
    };
    check_rank(cx, rank, MAX_RANK)?;
    let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
    let out = output(cx, x.elem, dims)?;
    // Moving only axes of length 1 keeps the element order.
    let moved: Vec<usize> = perm.iter().copied().filter(|&p| x.dims[p] != 1).collect();
    if moved.windows(2).all(|w| w[0] < w[1]) {
        return single(out, Op::Alias);
    }
    single(out, Op::Transpose { shape: x.dims.clone(), perm })
}

fn concat(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let first = cx.input(0)?;
    let rank = first.rank();
    if rank == 0 {
        return invalid("Concat of scalars (inputs must have rank 1 or more)");
    }
    let default_axis = if cx.version() < 4 { 1 } else { i64::MAX };
    let raw = cx.int_or("axis", default_axis);
    if raw == i64::MAX {
        return invalid("Concat needs the attribute 'axis'");
    }
    let a = axis(raw, rank, "Concat axis")?;
    let mut dims = first.dims.clone();
    dims[a] = 0;
    let mut chunks = Vec::with_capacity(cx.inputs.len());
    for i in 0..cx.inputs.len() {
        let t = cx.input(i)?;
        if t.elem != first.elem {
            return invalid(format!(
                "Concat input {i} holds {} elements, input 0 holds {}",
                t.elem, first.elem
            ));
        }
        let same = t.rank() == rank && (0..rank).all(|d| d == a || t.dims[d] == first.dims[d]);
        if !same {
            return invalid(format!(
                "Concat input {i} has dims {:?}, which do not match input 0's {:?} outside axis {a}",
                t.dims, first.dims
            ));
        }
        dims[a] = dims[a]
            .checked_add(t.dims[a])
            .ok_or_else(|| OpError::Invalid("Concat output is too large".into()))?;
        chunks.push(t.dims[a..].iter().product::<usize>());
    }
    let out = output(cx, first.elem, dims)?;
    if cx.inputs.len() == 1 {
        return single(out, Op::Alias);
    }
    let outer = first.dims[..a].iter().product();
    let mut at = Vec::with_capacity(chunks.len());
    let mut width = 0usize;
    for c in chunks {
        at.push(width);
        width += c;
    }
    single(out, Op::Concat { outer, width, at })
}

fn split(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    if rank == 0 {
        return invalid("Split of a scalar");
    }
    let a = axis(cx.int_or("axis", 0), rank, "Split axis")?;
    let n = cx.node.outputs.len();
    if n == 0 {
        return invalid("Split has no outputs");
    }
    let dim = x.dims[a];
    let runtime = cx.version() >= 13 && runtime_input(cx, 1);
    let given: Option<Vec<i64>> = if runtime {
        let mut s = Vec::with_capacity(n);
        for k in 0..n {
            let t = declared(cx, k, x.elem, Some(rank), "Split's split (input 1)")?;
            if t.rank() != rank {
                return invalid(format!("Split output {k} is declared with dims {:?}", t.dims));
            }
            s.push(i64::try_from(t.dims[a]).unwrap_or(i64::MAX));
        }
        Some(s)
    } else if cx.version() >= 13 || cx.version() < 2 {
        match cx.opt_input(1) {
            Some(_) => Some(cx.const_ints(1, "Split's split")?),
            None if cx.version() < 2 => cx.ints("split"),
            None => None,
        }
    } else {
        cx.ints("split")
    };
    let sizes: Vec<usize> = match given {
        Some(s) => {
            if cx.node.attr("num_outputs").is_some() {
                return invalid("Split has both a 'split' input and 'num_outputs'");
            }
            if s.len() != n {
                return invalid(format!(
                    "Split's split {s:?} has {} entries for {n} outputs",
                    s.len()
                ));
            }
            let sizes =
                s.iter().map(|&v| to_usize(v, "Split size")).collect::<OpResult<Vec<_>>>()?;
            if sizes.iter().try_fold(0usize, |acc, &v| acc.checked_add(v)) != Some(dim) {
                return invalid(format!(
                    "Split's split {s:?} does not add up to the axis length {dim}"
                ));
            }
            sizes
        }
        None => {
            // Opset 18 asks for 'num_outputs' here; without it, the number of
            // outputs is used (as before 18, and as the reference does).
            let parts = n;
            if cx.version() >= 18 && cx.node.attr("num_outputs").is_some() {
                let k = cx.int_or("num_outputs", 0);
                if usize::try_from(k).ok() != Some(n) {
                    return invalid(format!(
                        "Split's num_outputs {k} does not match its {n} outputs"
                    ));
                }
            }
            if dim.is_multiple_of(parts) {
                vec![dim / parts; parts]
            } else if cx.version() >= 18 {
                // Chunks of ceil(dim / parts); the last one gets the rest.
                let chunk = dim.div_ceil(parts);
                let used = chunk * (parts - 1);
                if used > dim {
                    return invalid(format!(
                        "Split of length {dim} into {parts} chunks of {chunk} leaves nothing for the last ones"
                    ));
                }
                let mut s = vec![chunk; parts - 1];
                s.push(dim - used);
                s
            } else {
                return invalid(format!(
                    "Split of axis length {dim} into {parts} equal parts is not possible"
                ));
            }
        }
    };
    let outer: usize = x.dims[..a].iter().product();
    let inner: usize = x.dims[a + 1..].iter().product();
    let mut outputs = Vec::with_capacity(n);
    let mut at = Vec::with_capacity(n);
    let mut col = 0usize;
    for &s in &sizes {
        let mut dims = x.dims.clone();
        dims[a] = s;
        outputs.push(output(cx, x.elem, dims)?);
        at.push(col);
        col += s * inner;
    }
    if n == 1 && !runtime {
        return Ok(Planned { outputs, op: Op::Alias, check: None });
    }
    let check = runtime.then(|| RtCheck::Split { sizes: sizes.clone() });
    Ok(Planned { outputs, op: Op::Split { outer, width: dim * inner, at }, check })
}

/// The first index and the length of a slice of an axis of length `dim`,
/// with numpy's rules: negative bounds count from the end and are clamped.
fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> (usize, usize) {
    if dim == 0 {
        return (0, 0);
    }
    let d = dim as i128;
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let (s, len) = if st > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        (s, if e > s { (e - s + st - 1) / st } else { 0 })
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        (s, if s > e { (s - e - st - 1) / -st } else { 0 })
    };
    if len == 0 {
        return (0, 0);
    }
    // Both are within 0..=dim here.
    (usize::try_from(s).unwrap_or(0), usize::try_from(len).unwrap_or(0))
}

fn slice(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let (starts, ends, axes, steps) = if cx.version() < 10 {
        let Some(starts) = cx.ints("starts") else { return invalid("Slice needs 'starts'") };
        let Some(ends) = cx.ints("ends") else { return invalid("Slice needs 'ends'") };
        (starts, ends, cx.ints("axes"), None)
    } else if (1..=4).any(|i| runtime_input(cx, i)) {
        let t = declared(cx, 0, x.elem, Some(rank), "Slice's starts, ends, axes or steps")?;
        if t.rank() != rank || t.elem != x.elem {
            return invalid(format!("Slice output is declared as {t}; input is {x}"));
        }
        check_rank(cx, rank, MAX_RANK)?;
        let out = t.dims.clone();
        let check = RtCheck::Slice {
            shape: x.dims.clone(),
            out: out.clone(),
            axes: cx.opt_input(3).is_some(),
            steps: cx.opt_input(4).is_some(),
        };
        let op =
            Op::Slice { shape: x.dims.clone(), starts: vec![0; rank], steps: vec![1; rank], out };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    } else {
        let starts = cx.const_ints(1, "Slice's starts")?;
        let ends = cx.const_ints(2, "Slice's ends")?;
        let axes = match cx.opt_input(3) {
            Some(_) => Some(cx.const_ints(3, "Slice's axes")?),
            None => None,
        };
        let steps = match cx.opt_input(4) {
            Some(_) => Some(cx.const_ints(4, "Slice's steps")?),
            None => None,
        };
        (starts, ends, axes, steps)
    };
    let k = starts.len();
    if ends.len() != k {
        return invalid(format!("Slice has {k} starts but {} ends", ends.len()));
    }
    let axes = match axes {
        Some(a) if a.len() != k => {
            return invalid(format!("Slice has {k} starts but {} axes", a.len()));
        }
        Some(a) => distinct_axes(&a, rank, "Slice axis")?,
        None if k > rank => {
            return invalid(format!("Slice has {k} starts for a rank-{rank} input"));
        }
        None => (0..k).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if steps.len() != k {
        return invalid(format!("Slice has {k} starts but {} steps", steps.len()));
    }
    check_rank(cx, rank, MAX_RANK)?;
    let mut first = vec![0usize; rank];
    let mut step = vec![1isize; rank];
    let mut out = x.dims.clone();
    for i in 0..k {
        let a = axes[i];
        if steps[i] == 0 {
            return invalid(format!("Slice step for axis {a} is 0"));
        }
        let (s, len) = slice_axis(x.dims[a], starts[i], ends[i], steps[i]);
        first[a] = s;
        step[a] = to_isize(steps[i], "Slice step")?;
        out[a] = len;
    }
    let unchanged = (0..rank).all(|d| out[d] == x.dims[d] && (step[d] == 1 || x.dims[d] <= 1));
    let t = output(cx, x.elem, out.clone())?;
    if unchanged {
        return single(t, Op::Alias);
    }
    single(t, Op::Slice { shape: x.dims.clone(), starts: first, steps: step, out })
}

/// Indices known at generation time must lie in `-n..n`.
fn check_indices(cx: &NodeCx<'_>, n: usize) -> OpResult<()> {
    let Some(t) = cx.constant(1) else { return Ok(()) };
    let values = t.to_i64s().ok_or_else(|| OpError::Invalid("indices are not integers".into()))?;
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(bad) = values.iter().find(|&&v| v < -n || v >= n) {
        return invalid(format!(
            "{} index {bad} is out of range for an axis of length {n}",
            cx.node.op.op_type
        ));
    }
    Ok(())
}

fn index_type<'a>(cx: &NodeCx<'a>) -> OpResult<&'a TensorType> {
    let idx = cx.input(1)?;
    if !matches!(idx.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!(
            "{} indices are {} tensors; int32 or int64 expected",
            cx.node.op.op_type, idx.elem
        ));
    }
    Ok(idx)
}

fn gather(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let idx = index_type(cx)?;
    if x.rank() == 0 {
        return invalid("Gather of a scalar (data must have rank 1 or more)");
    }
    let a = axis(cx.int_or("axis", 0), x.rank(), "Gather axis")?;
    check_indices(cx, x.dims[a])?;
    let mut dims = x.dims[..a].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&x.dims[a + 1..]);
    let shape = AxisShape {
        outer: x.dims[..a].iter().product(),
        axis: x.dims[a],
        inner: x.dims[a + 1..].iter().product(),
    };
    single(output(cx, x.elem, dims)?, Op::Gather { shape })
}

fn gather_elements(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let idx = index_type(cx)?;
    let rank = x.rank();
    if rank == 0 {
        return invalid("GatherElements of a scalar (data must have rank 1 or more)");
    }
    if idx.rank() != rank {
        return invalid(format!(
            "GatherElements indices have rank {}, data has rank {rank}",
            idx.rank()
        ));
    }
    let a = axis(cx.int_or("axis", 0), rank, "GatherElements axis")?;
    if let Some(d) = (0..rank).find(|&d| d != a && idx.dims[d] > x.dims[d]) {
        return invalid(format!(
            "GatherElements indices dims {:?} exceed data dims {:?} on axis {d}",
            idx.dims, x.dims
        ));
    }
    check_rank(cx, rank, MAX_RANK)?;
    check_indices(cx, x.dims[a])?;
    single(
        output(cx, x.elem, idx.dims.clone())?,
        Op::GatherElements { shape: x.dims.clone(), index_shape: idx.dims.clone(), axis: a },
    )
}

fn expand(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    if runtime_input(cx, 1) {
        let t = declared(cx, 0, x.elem, None, "Expand's shape (input 1)")?;
        if t.elem != x.elem || broadcast_shapes(&[&x.dims, &t.dims])? != t.dims {
            return invalid(format!("Expand output is declared as {t}; input is {x}"));
        }
        check_rank(cx, t.rank(), MAX_RANK)?;
        let strides = broadcast_strides(&x.dims, &t.dims);
        let check = RtCheck::Expand { shape: x.dims.clone(), out: t.dims.clone() };
        let op = Op::Expand { out: t.dims.clone(), strides };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    }
    let shape = cx.const_ints(1, "Expand's shape")?;
    let shape =
        shape.iter().map(|&v| to_usize(v, "Expand dimension")).collect::<OpResult<Vec<_>>>()?;
    let dims = broadcast_shapes(&[&x.dims, &shape])?;
    check_rank(cx, dims.len(), MAX_RANK)?;
    let out = output(cx, x.elem, dims)?;
    if out.dims == x.dims {
        return single(out, Op::Alias);
    }
    let strides = broadcast_strides(&x.dims, &out.dims);
    single(out.clone(), Op::Expand { out: out.dims, strides })
}

fn pad(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let mode = cx.string_or("mode", "constant");
    let runtime = cx.version() >= 11
        && (runtime_input(cx, 1) || (cx.version() >= 18 && runtime_input(cx, 3)));
    let (pads, axes, constant) = if cx.version() < 11 {
        let name = if cx.version() < 2 { "paddings" } else { "pads" };
        let Some(pads) = cx.ints(name) else { return invalid(format!("Pad needs '{name}'")) };
        (pads, None, PadKind::Attr(f64::from(cx.float_or("value", 0.0))))
    } else {
        let pads = if runtime { Vec::new() } else { cx.const_ints(1, "Pad's pads")? };
        let constant = match cx.opt_input(2) {
            Some(t) => {
                if t.elem != x.elem {
                    return invalid(format!(
                        "Pad's constant_value holds {} elements, the data {}",
                        t.elem, x.elem
                    ));
                }
                if t.numel() != Some(1) {
                    return invalid(format!(
                        "Pad's constant_value has dims {:?}; one element expected",
                        t.dims
                    ));
                }
                PadKind::Input
            }
            None => PadKind::Zero,
        };
        let axes = match cx.opt_input(3) {
            Some(_) if runtime => None,
            Some(_) if cx.version() >= 18 => Some(cx.const_ints(3, "Pad's axes")?),
            _ => None,
        };
        (pads, axes, constant)
    };
    let kind = match mode.as_str() {
        "constant" => constant,
        "reflect" => PadKind::Reflect,
        "edge" => PadKind::Edge,
        "wrap" if cx.version() >= 19 => PadKind::Wrap,
        other => {
            return invalid(format!(
                "Pad mode '{other}' is not one of constant, reflect, edge{}",
                if cx.version() >= 19 { ", wrap" } else { " (wrap needs opset 19)" }
            ));
        }
    };
    if runtime {
        let t = declared(cx, 0, x.elem, Some(rank), "Pad's pads or axes")?;
        if t.elem != x.elem || t.rank() != rank {
            return invalid(format!("Pad output is declared as {t}; input is {x}"));
        }
        check_rank(cx, rank, MAX_RANK)?;
        let axes = match cx.opt_input(3) {
            Some(a) if cx.version() >= 18 => Some(a.elem),
            _ => None,
        };
        let check = RtCheck::Pad { shape: x.dims.clone(), out: t.dims.clone(), axes };
        let op =
            Op::Pad { shape: x.dims.clone(), begin: vec![0; rank], end: vec![0; rank], mode: kind };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    }
    let axes = match axes {
        Some(a) => distinct_axes(&a, rank, "Pad axis")?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!(
            "Pad has {} pads for {} axes; 2 per axis (all begins, then all ends) expected",
            pads.len(),
            axes.len()
        ));
    }
    check_rank(cx, rank, MAX_RANK)?;
    let mut begin = vec![0isize; rank];
    let mut end = vec![0isize; rank];
    let mut dims = x.dims.clone();
    for (i, &a) in axes.iter().enumerate() {
        begin[a] = to_isize(pads[i], "Pad amount")?;
        end[a] = to_isize(pads[axes.len() + i], "Pad amount")?;
        let n = i128::try_from(x.dims[a]).unwrap_or(i128::MAX);
        let d = n + i128::from(pads[i]) + i128::from(pads[axes.len() + i]);
        dims[a] = usize::try_from(d).or_else(|_| {
            invalid(format!(
                "Pad crops axis {a} (length {n}) by more than its length (pads {} and {})",
                pads[i],
                pads[axes.len() + i]
            ))
        })?;
    }
    let out = output(cx, x.elem, dims)?;
    if begin.iter().chain(&end).all(|&p| p == 0) {
        return single(out, Op::Alias);
    }
    let fills_from_data = !matches!(kind, PadKind::Zero | PadKind::Input | PadKind::Attr(_));
    if fills_from_data && x.numel() == Some(0) && out.numel() != Some(0) {
        return invalid(format!("Pad mode '{mode}' cannot fill from an empty tensor"));
    }
    if let PadKind::Attr(_) = kind
        && !matches!(
            x.elem,
            ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
        )
    {
        return unsupported(format!(
            "Pad before opset 11 on {} tensors (its 'value' is a float)",
            x.elem
        ));
    }
    single(out, Op::Pad { shape: x.dims.clone(), begin, end, mode: kind })
}

fn tile(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let repeats = if cx.version() < 6 {
        let tiles = whole_numbers(cx, 1, "Tile's tiles")?;
        let ax = whole_numbers(cx, 2, "Tile's axis")?;
        let ([t], [a]) = (tiles.as_slice(), ax.as_slice()) else {
            return invalid("Tile's tiles and axis must be one value each");
        };
        let a = axis(*a, rank, "Tile axis")?;
        let mut r = vec![1i64; rank];
        r[a] = *t;
        r
    } else if runtime_input(cx, 1) {
        let t = declared(cx, 0, x.elem, Some(rank), "Tile's repeats (input 1)")?;
        if t.elem != x.elem || t.rank() != rank {
            return invalid(format!("Tile output is declared as {t}; input is {x}"));
        }
        let mut repeats = Vec::with_capacity(rank);
        for (&d, &o) in x.dims.iter().zip(&t.dims) {
            match (d, o) {
                (0, 0) => repeats.push(1),
                (d, o) if d > 0 && o.is_multiple_of(d) => repeats.push(o / d),
                _ => return invalid(format!("Tile output is declared as {t}; input is {x}")),
            }
        }
        check_rank(cx, rank, MAX_RANK / 2)?;
        let check = RtCheck::Tile { shape: x.dims.clone(), out: t.dims.clone() };
        let op = Op::Tile { shape: x.dims.clone(), repeats };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    } else {
        cx.const_ints(1, "Tile's repeats")?
    };
    if repeats.len() != rank {
        return invalid(format!("Tile has {} repeats for a rank-{rank} input", repeats.len()));
    }
    let repeats =
        repeats.iter().map(|&v| to_usize(v, "Tile repeat")).collect::<OpResult<Vec<_>>>()?;
    let mut dims = Vec::with_capacity(rank);
    for (&d, &r) in x.dims.iter().zip(&repeats) {
        dims.push(
            d.checked_mul(r).ok_or_else(|| OpError::Invalid("Tile output is too large".into()))?,
        );
    }
    let out = output(cx, x.elem, dims)?;
    if repeats.iter().all(|&r| r == 1) {
        return single(out, Op::Alias);
    }
    check_rank(cx, rank, MAX_RANK / 2)?;
    single(out, Op::Tile { shape: x.dims.clone(), repeats })
}

/// Integers known at generation time, also when the schema types them as
/// floats (Tile before opset 6).
fn whole_numbers(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Vec<i64>> {
    let Some(floats) = cx.constant(i).and_then(|t| t.to_f64s()) else {
        return cx.const_ints(i, what);
    };
    floats
        .iter()
        .map(|&v| {
            if v.fract() == 0.0 && v.abs() < 9.0e15 {
                Ok(v as i64)
            } else {
                invalid(format!("{what} (input {i}) holds {v}, not a whole number"))
            }
        })
        .collect()
}

fn depth_space(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let op = cx.node.op.op_type.as_str();
    let [n, c, h, w] = x.dims[..] else {
        return invalid(format!("{op} needs a 4-D input; it has dims {:?}", x.dims));
    };
    let block = cx.int("blocksize")?;
    let b = match usize::try_from(block) {
        Ok(b) if b > 0 => b,
        _ => return invalid(format!("{op} blocksize {block} is not positive")),
    };
    let has_mode = if op == "DepthToSpace" { cx.version() >= 11 } else { cx.version() >= 28 };
    let crd = match (has_mode, cx.string_or("mode", "DCR").as_str()) {
        (false, _) | (true, "DCR") => false,
        (true, "CRD") => true,
        (true, other) => return invalid(format!("{op} mode '{other}' is not DCR or CRD")),
    };
    let too_large = || OpError::Invalid(format!("{op} output is too large"));
    let bb = b.checked_mul(b).ok_or_else(too_large)?;
    let s = Nchw4 { n, c, h, w };
    let (dims, op) = if op == "DepthToSpace" {
        if !c.is_multiple_of(bb) {
            return invalid(format!("DepthToSpace of {c} channels by blocks of {b}x{b}"));
        }
        let dims = vec![
            n,
            c / bb,
            h.checked_mul(b).ok_or_else(too_large)?,
            w.checked_mul(b).ok_or_else(too_large)?,
        ];
        (dims, Op::DepthToSpace { s, block: b, crd })
    } else {
        if !h.is_multiple_of(b) || !w.is_multiple_of(b) {
            return invalid(format!("SpaceToDepth of {h}x{w} by blocks of {b}x{b}"));
        }
        let dims = vec![n, c.checked_mul(bb).ok_or_else(too_large)?, h / b, w / b];
        (dims, Op::SpaceToDepth { s, block: b, crd })
    };
    single(output(cx, x.elem, dims)?, op)
}

impl OpRule for LayoutRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(plan(cx)?.outputs)
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(cx)?;
        let elem = outputs.first().or(p.outputs.first()).map_or(ElemType::Float, |t| t.elem);
        Ok(match p.op {
            Op::Alias => Lowered::Alias,
            op => Lowered::Kernel(Box::new(LayoutKernel { op, elem, check: p.check })),
        })
    }
}

struct LayoutKernel {
    op: Op,
    elem: ElemType,
    check: Option<RtCheck>,
}

/// The element types of host tensors the kernels move (including `bool`,
/// which has no byte-level host form).
trait Data: Copy + Default + 'static {
    fn of(d: &HostData) -> Option<&[Self]>;
    fn of_mut(d: &mut HostData) -> Option<&mut [Self]>;
    /// Pad's float `value` attribute as an element.
    fn from_f64(v: f64) -> Self;
}

macro_rules! data {
    ($t:ty, $v:ident, $from:expr) => {
        impl Data for $t {
            fn of(d: &HostData) -> Option<&[Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn of_mut(d: &mut HostData) -> Option<&mut [Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn from_f64(v: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(v)
            }
        }
    };
}

data!(f32, F32, |v| v as f32);
data!(f64, F64, |v| v);
data!(i8, I8, |v| v as i8);
data!(i16, I16, |v| v as i16);
data!(i32, I32, |v| v as i32);
data!(i64, I64, |v| v as i64);
data!(u8, U8, |v| v as u8);
data!(u16, U16, |v| v as u16);
data!(u32, U32, |v| v as u32);
data!(u64, U64, |v| v as u64);
data!(bool, Bool, |v| v != 0.0);
data!(f16, F16, f16::from_f64);
data!(bf16, Bf16, bf16::from_f64);

/// Index tensors on the host.
enum Indices<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

fn indices<'a>(inputs: &[Option<&'a HostTensor>]) -> Result<Indices<'a>, EvalError> {
    match inputs.get(1).copied().flatten().map(|t| (&t.data, t.ty.elem)) {
        Some((HostData::I32(v), _)) => Ok(Indices::I32(v)),
        Some((HostData::I64(v), _)) => Ok(Indices::I64(v)),
        Some((_, elem)) => Err(EvalError::Type(elem)),
        None => Err(EvalError::Type(ElemType::Int64)),
    }
}

fn run<T: Data>(
    k: &LayoutKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let ty = EvalError::Type(k.elem);
    let input = |i: usize| -> Result<&[T], EvalError> {
        inputs.get(i).copied().flatten().and_then(|t| T::of(&t.data)).ok_or(ty.clone())
    };
    if let Op::Split { outer, width, at } = &k.op {
        let x = input(0)?;
        for (o, &a) in outputs.iter_mut().zip(at) {
            let y = T::of_mut(&mut o.data).ok_or(ty.clone())?;
            rt_layout::split_part(*outer, *width, a, x, y)?;
        }
        return Ok(());
    }
    let y = outputs.first_mut().and_then(|t| T::of_mut(&mut t.data)).ok_or(ty.clone())?;
    match &k.op {
        Op::Alias | Op::Split { .. } => return Err(ty),
        Op::Transpose { shape, perm } => rt_layout::transpose(shape, perm, input(0)?, y)?,
        Op::Concat { outer, width, at } => {
            for (i, &a) in at.iter().enumerate() {
                rt_layout::concat_part(*outer, *width, a, input(i)?, y)?;
            }
        }
        Op::Slice { shape, starts, steps, out } => {
            rt_layout::slice(shape, starts, steps, out, input(0)?, y)?;
        }
        Op::Gather { shape } => match indices(inputs)? {
            Indices::I32(i) => rt_layout::gather(*shape, i, input(0)?, y)?,
            Indices::I64(i) => rt_layout::gather(*shape, i, input(0)?, y)?,
        },
        Op::GatherElements { shape, index_shape, axis } => match indices(inputs)? {
            Indices::I32(i) => {
                rt_layout::gather_elements(shape, index_shape, *axis, i, input(0)?, y)?;
            }
            Indices::I64(i) => {
                rt_layout::gather_elements(shape, index_shape, *axis, i, input(0)?, y)?;
            }
        },
        Op::Expand { out, strides } => rt_layout::expand(out, strides, input(0)?, y)?,
        Op::Pad { shape, begin, end, mode } => {
            let mode = match mode {
                PadKind::Zero => PadMode::Constant(T::default()),
                PadKind::Input => {
                    let v = input(2)?.first().copied();
                    PadMode::Constant(
                        v.ok_or(EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch))?,
                    )
                }
                PadKind::Attr(v) => PadMode::Constant(T::from_f64(*v)),
                PadKind::Reflect => PadMode::Reflect,
                PadKind::Edge => PadMode::Edge,
                PadKind::Wrap => PadMode::Wrap,
            };
            rt_layout::pad(shape, begin, end, mode, input(0)?, y)?;
        }
        Op::Tile { shape, repeats } => rt_layout::tile(shape, repeats, input(0)?, y)?,
        Op::DepthToSpace { s, block, crd } => {
            rt_layout::depth_to_space(*s, *block, *crd, input(0)?, y)?;
        }
        Op::SpaceToDepth { s, block, crd } => {
            rt_layout::space_to_depth(*s, *block, *crd, input(0)?, y)?;
        }
    }
    Ok(())
}

/// Pad's `value` attribute as a literal of the data's type.
fn pad_value_tokens(v: f64, elem: ElemType, rt: &TokenStream) -> TokenStream {
    match elem {
        ElemType::Float16 => {
            let bits = lit::usize_lit(usize::from(f16::from_f64(v).to_bits()));
            quote!(#rt::f16::from_bits(#bits))
        }
        ElemType::Bfloat16 => {
            let bits = lit::usize_lit(usize::from(bf16::from_f64(v).to_bits()));
            quote!(#rt::bf16::from_bits(#bits))
        }
        // `pad` refuses other types before lowering.
        _ => lit::float(v, elem),
    }
}

fn nchw_tokens(s: Nchw4, rt: &TokenStream) -> TokenStream {
    let (n, c, h, w) =
        (lit::usize_lit(s.n), lit::usize_lit(s.c), lit::usize_lit(s.h), lit::usize_lit(s.w));
    quote!(#rt::layout::Nchw4 { n: #n, c: #c, h: #h, w: #w })
}

impl Kernel for LayoutKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        use ElemType as E;
        if self.check.is_some() {
            // Never folded: its shape-like inputs are not constants.
            return Err(EvalError::Type(self.elem));
        }
        match self.elem {
            E::Float => run::<f32>(self, inputs, outputs),
            E::Double => run::<f64>(self, inputs, outputs),
            E::Int8 => run::<i8>(self, inputs, outputs),
            E::Int16 => run::<i16>(self, inputs, outputs),
            E::Int32 => run::<i32>(self, inputs, outputs),
            E::Int64 => run::<i64>(self, inputs, outputs),
            E::Uint8 => run::<u8>(self, inputs, outputs),
            E::Uint16 => run::<u16>(self, inputs, outputs),
            E::Uint32 => run::<u32>(self, inputs, outputs),
            E::Uint64 => run::<u64>(self, inputs, outputs),
            E::Bool => run::<bool>(self, inputs, outputs),
            E::Float16 => run::<f16>(self, inputs, outputs),
            E::Bfloat16 => run::<bf16>(self, inputs, outputs),
            other => Err(EvalError::Type(other)),
        }
    }

    /// Shape-like inputs (starts, pads, repeats, ...) were taken at
    /// generation time; only the data, Gather's indices, Concat's inputs and
    /// Pad's constant value are read when the call runs.
    fn reads_input(&self, i: usize) -> bool {
        if self.check.is_some() {
            return true;
        }
        match &self.op {
            Op::Concat { .. } => true,
            Op::Gather { .. } | Op::GatherElements { .. } => i <= 1,
            Op::Pad { mode: PadKind::Input, .. } => i == 0 || i == 2,
            _ => i == 0,
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let call = self.emit_call(io);
        let Some(check) = &self.check else { return call };
        let rt = &io.rt;
        let c = quote!(#rt::check);
        let us = lit::usizes;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let opt = |i: usize| match input(i) {
            Some(v) => quote!(::core::option::Option::Some(#v)),
            None => quote!(::core::option::Option::None),
        };
        let v1 = input(1).unwrap_or_default();
        match check {
            RtCheck::Expand { shape, out } => {
                let (shape, out) = (us(shape), us(out));
                quote!(#c::expand(#v1, #shape, #out)?; #call)
            }
            RtCheck::Tile { shape, out } => {
                let (shape, out) = (us(shape), us(out));
                quote!(#c::tile(#v1, #shape, #out)?; #call)
            }
            RtCheck::Split { sizes } => {
                let sizes = us(sizes);
                quote!(#c::split(#v1, #sizes)?; #call)
            }
            RtCheck::Slice { shape, out, axes, steps } => {
                let r = lit::usize_lit(shape.len());
                let v2 = input(2).unwrap_or_default();
                let a = if *axes { opt(3) } else { quote!(::core::option::Option::None) };
                let st = if *steps { opt(4) } else { quote!(::core::option::Option::None) };
                let x = input(0).unwrap_or_default();
                let y = io.outputs.first().cloned().flatten().unwrap_or_default();
                let (shape, out) = (us(shape), us(out));
                quote! {
                    let mut first = [0usize; #r];
                    let mut step = [1isize; #r];
                    #c::slice(#v1, #v2, #a, #st, #shape, #out, &mut first, &mut step)?;
                    #rt::layout::slice(#shape, &first, &step, #out, #x, #y)?;
                }
            }
            RtCheck::Pad { shape, out, axes } => {
                let r = lit::usize_lit(shape.len());
                let a = match axes {
                    Some(_) => opt(3),
                    None => quote!(::core::option::Option::None::<&[i64]>),
                };
                let (shape, out) = (us(shape), us(out));
                let Op::Pad { mode, .. } = &self.op else { return call };
                let x = input(0).unwrap_or_default();
                let y = io.outputs.first().cloned().flatten().unwrap_or_default();
                let mode = self.pad_mode(mode, io);
                quote! {
                    let mut begin = [0isize; #r];
                    let mut end = [0isize; #r];
                    #c::pad(#v1, #a, #shape, #out, &mut begin, &mut end)?;
                    #rt::layout::pad(#shape, &begin, &end, #mode, #x, #y)?;
                }
            }
        }
    }
}

impl LayoutKernel {
    fn pad_mode(&self, mode: &PadKind, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let l = quote!(#rt::layout);
        match mode {
            PadKind::Zero => quote!(#l::PadMode::Constant(::core::default::Default::default())),
            PadKind::Input => {
                let c = io.inputs.get(2).cloned().flatten().unwrap_or_default();
                quote! {
                    #l::PadMode::Constant(#l::MoveTo::move_to(
                        *(#c).first().ok_or(#rt::Error::ShapeMismatch)?,
                    ))
                }
            }
            PadKind::Attr(v) => {
                let v = pad_value_tokens(*v, self.elem, rt);
                quote!(#l::PadMode::Constant(#v))
            }
            PadKind::Reflect => quote!(#l::PadMode::Reflect),
            PadKind::Edge => quote!(#l::PadMode::Edge),
            PadKind::Wrap => quote!(#l::PadMode::Wrap),
        }
    }

    fn emit_call(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let l = quote!(#rt::layout);
        let us = lit::usizes;
        let u = lit::usize_lit;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let x = input(0).unwrap_or_default();
        let y = io.outputs.first().cloned().flatten().unwrap_or_default();
        match &self.op {
            Op::Alias => quote!(),
            Op::Transpose { shape, perm } => {
                let (shape, perm) = (us(shape), us(perm));
                quote!(#l::transpose(#shape, #perm, #x, #y)?;)
            }
            Op::Concat { outer, width, at } => {
                let (outer, width) = (u(*outer), u(*width));
                let calls = at.iter().enumerate().filter_map(|(i, &a)| {
                    let xi = input(i)?;
                    let a = u(a);
                    Some(quote!(#l::concat_part(#outer, #width, #a, #xi, &mut *concat_out)?;))
                });
                // One binding, reborrowed per part: `y` may be an expression.
                quote!({
                    let concat_out = #y;
                    #(#calls)*
                })
            }
            Op::Split { outer, width, at } => {
                let (outer, width) = (u(*outer), u(*width));
                let calls = at.iter().enumerate().filter_map(|(j, &a)| {
                    let yj = io.outputs.get(j).cloned().flatten()?;
                    let a = u(a);
                    Some(quote!(#l::split_part(#outer, #width, #a, #x, #yj)?;))
                });
                quote!(#(#calls)*)
            }
            Op::Slice { shape, starts, steps, out } => {
                let (shape, starts, steps, out) =
                    (us(shape), us(starts), lit::isizes(steps), us(out));
                quote!(#l::slice(#shape, #starts, #steps, #out, #x, #y)?;)
            }
            Op::Gather { shape } => {
                let (o, a, i) = (u(shape.outer), u(shape.axis), u(shape.inner));
                let idx = input(1).unwrap_or_default();
                quote! {
                    #l::gather(#rt::norm::AxisShape { outer: #o, axis: #a, inner: #i }, #idx, #x, #y)?;
                }
            }
            Op::GatherElements { shape, index_shape, axis } => {
                let (shape, index_shape, axis) = (us(shape), us(index_shape), u(*axis));
                let idx = input(1).unwrap_or_default();
                quote!(#l::gather_elements(#shape, #index_shape, #axis, #idx, #x, #y)?;)
            }
            Op::Expand { out, strides } => {
                let (out, strides) = (us(out), lit::isizes(strides));
                quote!(#l::expand(#out, #strides, #x, #y)?;)
            }
            Op::Pad { shape, begin, end, mode } => {
                let (shape, begin, end) = (us(shape), lit::isizes(begin), lit::isizes(end));
                let mode = match mode {
                    PadKind::Zero => {
                        quote!(#l::PadMode::Constant(::core::default::Default::default()))
                    }
                    PadKind::Input => {
                        let c = input(2).unwrap_or_default();
                        quote! {
                            #l::PadMode::Constant(#l::MoveTo::move_to(
                                *(#c).first().ok_or(#rt::Error::ShapeMismatch)?,
                            ))
                        }
                    }
                    PadKind::Attr(v) => {
                        let v = pad_value_tokens(*v, self.elem, rt);
                        quote!(#l::PadMode::Constant(#v))
                    }
                    PadKind::Reflect => quote!(#l::PadMode::Reflect),
                    PadKind::Edge => quote!(#l::PadMode::Edge),
                    PadKind::Wrap => quote!(#l::PadMode::Wrap),
                };
                quote!(#l::pad(#shape, #begin, #end, #mode, #x, #y)?;)
            }
            Op::Tile { shape, repeats } => {
                let (shape, repeats) = (us(shape), us(repeats));
                quote!(#l::tile(#shape, #repeats, #x, #y)?;)
            }
            Op::DepthToSpace { s, block, crd } => {
                let (s, b) = (nchw_tokens(*s, rt), u(*block));
                quote!(#l::depth_to_space(#s, #b, #crd, #x, #y)?;)
            }
            Op::SpaceToDepth { s, block, crd } => {
                let (s, b) = (nchw_tokens(*s, rt), u(*block));
                quote!(#l::space_to_depth(#s, #b, #crd, #x, #y)?;)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ir::{ElemType, TensorType};

    /// Analyses a one-graph model in the text syntax at `opset`. Untyped
    /// graph outputs get the element type of the first tensor declared (and
    /// no shape), so inference alone decides their dims.
    fn run(opset: i64, graph: &str) -> Analysis {
        run_typed(opset, &type_outputs(graph))
    }

    /// Like [`run`], for graphs whose outputs are all typed already.
    fn run_typed(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("model parses");
        analyze(&model, &Options::default()).expect("model is valid")
    }

    fn type_outputs(graph: &str) -> String {
        const TYPES: [&str; 8] =
            ["bool[", "float16[", "float[", "double[", "int8[", "int16[", "int32[", "int64["];
        let first = TYPES
            .iter()
            .filter_map(|t| graph.find(t).map(|at| (at, &t[..t.len() - 1])))
            .min()
            .map_or("float", |(_, t)| t);
        let (Some(start), Some(len)) =
            (graph.find("=> ("), graph.find("=> (").and_then(|s| graph[s..].find(')')))
        else {
            return graph.to_owned();
        };
        let names = &graph[start + 4..start + len];
        let typed: Vec<String> = names
            .split(',')
            .map(str::trim)
            .map(|n| if n.contains(' ') { n.to_owned() } else { format!("{first}[] {n}") })
            .collect();
        format!("{}=> ({}{}", &graph[..start], typed.join(", "), &graph[start + len..])
    }

    fn value(a: &Analysis, name: &str) -> crate::ir::ValueId {
        a.model().graph.value_by_name(name).expect("value exists")
    }

    fn ty(a: &Analysis, name: &str) -> TensorType {
        let v = value(a, name);
        match &a.inferred.types[v.index()] {
            Some(t) => t.clone(),
            None => panic!("no type for {name}: {:?}", problems(a)),
        }
    }

    fn dims(a: &Analysis, name: &str) -> Vec<usize> {
        ty(a, name).dims
    }

    /// A value folded at generation time, as i64s (integer and bool tensors)
    /// or f64s (float tensors).
    fn ints(a: &Analysis, name: &str) -> Vec<i64> {
        let v = value(a, name);
        let t = a.inferred.constants[v.index()].as_ref().expect("value is folded");
        t.to_i64s().expect("integer tensor")
    }

    fn floats(a: &Analysis, name: &str) -> Vec<f64> {
        let v = value(a, name);
        let t = a.inferred.constants[v.index()].as_ref().expect("value is folded");
        t.to_f64s().expect("float tensor")
    }

    fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> = a.inferred.errors.iter().map(|d| d.message.clone()).collect();
        out.extend(a.inferred.unsupported.iter().map(|u| format!("unsupported: {}", u.reason)));
        out
    }

    /// The one problem of an analysis, which must contain `part`.
    fn fails_with(a: &Analysis, part: &str) {
        let p = problems(a);
        assert!(p.iter().any(|m| m.contains(part)), "expected a problem with '{part}', got {p:?}");
    }

    /// Kernel calls left to run (views cost nothing).
    fn calls(a: &Analysis) -> usize {
        a.inferred
            .steps
            .iter()
            .filter(|s| matches!(s.lowered, crate::ops::Lowered::Kernel(_)))
            .count()
    }

    #[test]
    fn transpose_shapes_and_values() {
        let a = run(
            21,
            "g (float[2,3,4] x) => (y, z, w) {
                y = Transpose (x)
                z = Transpose <perm = [1, 2, 0]> (x)
                w = Transpose <perm = [0, 2, 1]> (z)
            }",
        );
        assert_eq!(dims(&a, "y"), [4, 3, 2]);
        assert_eq!(dims(&a, "z"), [3, 4, 2]);
        assert_eq!(dims(&a, "w"), [3, 2, 4]);
        // [[1,2,3],[4,5,6]] transposed.
        let a = run(13, "g () => (y) <int32[2,3] x = {1, 2, 3, 4, 5, 6}> { y = Transpose (x) }");
        assert_eq!(ints(&a, "y"), [1, 4, 2, 5, 3, 6]);
        // Moving only a length-1 axis is a view: no step runs.
        let a = run(13, "g (float[1,3,2] x) => (y) { y = Transpose <perm = [1, 0, 2]> (x) }");
        assert_eq!(dims(&a, "y"), [3, 1, 2]);
        assert_eq!(calls(&a), 0);
    }

    #[test]
    fn transpose_errors() {
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [0, 0]> (x) }");
        fails_with(&a, "given twice");
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [1, 0, 2]> (x) }");
        fails_with(&a, "has 3 entries");
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [-1, 0]> (x) }");
        fails_with(&a, "negative");
        let a = run(13, "g (string[2,3] x) => (y) { y = Transpose (x) }");
        fails_with(&a, "unsupported: Transpose on string tensors");
    }

    #[test]
    fn concat_any_axis() {
        let a = run(
            13,
            "g (float[2,3] a, float[2,1] b, float[4,3] c) => (y, z, w) {
                y = Concat <axis = -1> (a, b)
                z = Concat <axis = 0> (a, c)
                w = Concat <axis = 1> (a)
            }",
        );
        assert_eq!(dims(&a, "y"), [2, 4]);
        assert_eq!(dims(&a, "z"), [6, 3]);
        assert_eq!(dims(&a, "w"), [2, 3]);
        // Along axis 1: [[1,2],[3,4]] ++ [[5],[6]] ++ [] -> [[1,2,5],[3,4,6]].
        let a = run(
            13,
            "g () => (y) <int64[2,2] a = {1, 2, 3, 4}, int64[2,1] b = {5, 6}, int64[2,0] c = {}> {
                y = Concat <axis = 1> (a, b, c)
            }",
        );
        assert_eq!(ints(&a, "y"), [1, 2, 5, 3, 4, 6]);
        // Opset 1 defaults the axis to 1.
        let a = run(1, "g (float[2,3] a, float[2,2] b) => (y) { y = Concat (a, b) }");
        assert_eq!(dims(&a, "y"), [2, 5]);
    }

    #[test]
    fn concat_errors() {
        let a = run(13, "g (float[2,3] a, float[3,3] b) => (y) { y = Concat <axis = 1> (a, b) }");
        fails_with(&a, "do not match");
        let a = run(13, "g (float[2,3] a, float[2,3] b) => (y) { y = Concat <axis = 2> (a, b) }");
        fails_with(&a, "out of range");
        let a = run(13, "g (float a, float b) => (y) { y = Concat <axis = 0> (a, b) }");
        fails_with(&a, "scalars");
    }

    #[test]
    fn split_by_sizes_counts_and_uneven_chunks() {
        let a = run(
            13,
            "g (float[2,6] x) => (a, b, c, d) <int64[2] s = {2, 4}> {
                a, b = Split <axis = 1> (x, s)
                c, d = Split <axis = -1> (x)
            }",
        );
        assert_eq!((dims(&a, "a"), dims(&a, "b")), (vec![2, 2], vec![2, 4]));
        assert_eq!((dims(&a, "c"), dims(&a, "d")), (vec![2, 3], vec![2, 3]));
        // Opset 18, 7 into 3: chunks of 3, 3 and 1.
        let a = run(
            18,
            "g () => (a, b, c) <int32[7] x = {1, 2, 3, 4, 5, 6, 7}> {
                a, b, c = Split <num_outputs = 3> (x)
            }",
        );
        assert_eq!(
            (ints(&a, "a"), ints(&a, "b"), ints(&a, "c")),
            (vec![1, 2, 3], vec![4, 5, 6], vec![7])
        );
        // Opset 2 takes the sizes as an attribute; along axis 1 of [[1,2,3],[4,5,6]].
        let a = run(
            2,
            "g () => (a, b) <float[2,3] x = {1, 2, 3, 4, 5, 6}> {
                a, b = Split <axis = 1, split = [2, 1]> (x)
            }",
        );
        assert_eq!((floats(&a, "a"), floats(&a, "b")), (vec![1., 2., 4., 5.], vec![3., 6.]));
    }

    #[test]
    fn shape_inputs_given_as_data_take_the_declared_shapes() {
        let one = |opset: i64, graph: &str, want: &[usize]| {
            let a = run_typed(opset, graph);
            assert_eq!(problems(&a), Vec::<String>::new(), "{graph}");
            assert_eq!(dims(&a, "y"), want, "{graph}");
            assert_eq!(calls(&a), 1, "{graph}");
        };
        one(
            13,
            "g (float[3,1] x, int64[3] s) => (float[2,3,4] y) { y = Expand (x, s) }",
            &[2, 3, 4],
        );
        one(13, "g (float[2,3] x, int64[2] r) => (float[4,3] y) { y = Tile (x, r) }", &[4, 3]);
        one(
            13,
            "g (float[5,4] x, int64[1] s, int64[1] e) => (float[2,4] y) { y = Slice (x, s, e) }",
            &[2, 4],
        );
        one(18, "g (float[3] x, int64[2] p) => (float[6] y) { y = Pad (x, p) }", &[6]);
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[2] y, float[4] b) { y, b = Split (x, s) }",
        );
        assert_eq!(problems(&a), Vec::<String>::new());
        assert_eq!((dims(&a, "y"), dims(&a, "b")), (vec![2], vec![4]));
        // A declared shape the input cannot broadcast to (or tile into) is an error.
        let a =
            run_typed(13, "g (float[3,2] x, int64[3] s) => (float[2,3,4] y) { y = Expand (x, s) }");
        fails_with(&a, "do not broadcast");
        let a = run_typed(13, "g (float[2,3] x, int64[2] r) => (float[5,3] y) { y = Tile (x, r) }");
        fails_with(&a, "Tile output is declared as");
    }

    #[test]
    fn split_errors() {
        let a = run(13, "g (float[6] x) => (a, b) <int64[2] s = {2, 3}> { a, b = Split (x, s) }");
        fails_with(&a, "does not add up");
        let a = run(13, "g (float[7] x) => (a, b) { a, b = Split (x) }");
        fails_with(&a, "equal parts");
        let a = run(18, "g (float[6] x) => (a, b) { a, b = Split <num_outputs = 3> (x) }");
        fails_with(&a, "num_outputs 3");
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[N] a, float[N] b) { a, b = Split (x, s) }",
        );
        fails_with(&a, "unsupported: Split's split (input 1) is known only at run time");
        // Declared outputs give the sizes; they must fit the axis.
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[2] a, float[5] b) { a, b = Split (x, s) }",
        );
        fails_with(&a, "does not add up");
    }

    #[test]
    fn slice_clamps_and_steps() {
        let a = run(
            13,
            "g (float[20,10,5] x) => (a, b, c, d)
              <int64[2] s = {0, 1}, int64[2] e = {3, 10}, int64[1] big = {1000},
               int64[1] neg = {-1}, int64[1] lo = {-1000}, int64[1] m2 = {-2}, int64[1] ax = {-2}> {
                a = Slice (x, s, e)
                b = Slice (x, neg, big)
                c = Slice (x, neg, lo, ax, m2)
                d = Slice (x, big, lo, ax, m2)
            }",
        );
        assert_eq!(dims(&a, "a"), [3, 9, 5]);
        // starts -1 -> 19, end clamped to 20: one row.
        assert_eq!(dims(&a, "b"), [1, 10, 5]);
        // Axis 1 backwards from 9 by 2 to the front: 9, 7, 5, 3, 1.
        assert_eq!(dims(&a, "c"), [20, 5, 5]);
        // A start past the end clamps to the last element when going backwards.
        assert_eq!(dims(&a, "d"), [20, 5, 5]);
        // Values: x[::-1, 2:0:-1] of [[1,2,3],[4,5,6]] = [[6,5],[3,2]].
        let a = run(
            13,
            "g () => (y) <int64[2,3] x = {1, 2, 3, 4, 5, 6}, int64[2] s = {-1, 2},
                          int64[2] e = {-9223372036854775807, 0}, int64[2] st = {-1, -1}> {
                y = Slice (x, s, e, , st)
            }",
        );
        assert_eq!(ints(&a, "y"), [6, 5, 3, 2]);
        // Opset 1 attributes, with an empty result along axis 0.
        let a =
            run(1, "g (float[4,6] x) => (y) { y = Slice <starts = [3, 2], ends = [1, -1]> (x) }");
        assert_eq!(dims(&a, "y"), [0, 3]);
    }

    #[test]
    fn slice_errors() {
        let a = run(
            13,
            "g (float[4] x) => (y) <int64[1] s = {0}, int64[1] e = {4}, int64[1] a = {0}, int64[1] z = {0}> {
                y = Slice (x, s, e, a, z)
            }",
        );
        fails_with(&a, "step for axis 0 is 0");
        let a = run(
            13,
            "g (float[4,4] x) => (y) <int64[2] s = {0, 0}, int64[2] e = {4, 4}, int64[2] a = {1, -1}> {
                y = Slice (x, s, e, a)
            }",
        );
        fails_with(&a, "given twice");
        let a = run(
            13,
            "g (float[4] x, int64[1] s) => (float[N] y) <int64[1] e = {4}> { y = Slice (x, s, e) }",
        );
        fails_with(
            &a,
            "unsupported: Slice's starts, ends, axes or steps is known only at run time",
        );
        let a = run_typed(
            13,
            "g (float[4] x, int64[1] s) => (float[2,2] y) <int64[1] e = {4}> { y = Slice (x, s, e) }",
        );
        fails_with(&a, "Slice output is declared as");
    }

    #[test]
    fn gathers() {
        let a = run(
            13,
            "g (float[5,4,3] x, int64[2,2] i, int32 j) => (a, b, c) {
                a = Gather <axis = 1> (x, i)
                b = Gather <axis = -1> (x, j)
                c = GatherElements <axis = 0> (x, i3)
                i3 = Cast <to = 7> (f)
                f = Constant <value = float[2,4,3] {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}> ()
            }",
        );
        assert_eq!(dims(&a, "a"), [5, 2, 2, 3]);
        assert_eq!(dims(&a, "b"), [5, 4]);
        // Gather axis 1 of [[1,2,3],[4,5,6]] with [2, -3] -> [[3,1],[6,4]].
        let a = run(
            13,
            "g () => (y, z) <int64[2,3] x = {1, 2, 3, 4, 5, 6}, int32[2] i = {2, -3},
                             int64[1,3] k = {1, 0, -1}> {
                y = Gather <axis = 1> (x, i)
                z = GatherElements <axis = 0> (x, k)
            }",
        );
        assert_eq!(ints(&a, "y"), [3, 1, 6, 4]);
        assert_eq!(ints(&a, "z"), [4, 2, 6]);
    }

    #[test]
    fn gather_errors() {
        let a =
            run(13, "g (float[5,4] x) => (y) <int64[1] i = {4}> { y = Gather <axis = 1> (x, i) }");
        fails_with(&a, "index 4 is out of range for an axis of length 4");
        let a = run(13, "g (float[5,4] x, float[2] i) => (y) { y = Gather (x, i) }");
        fails_with(&a, "int32 or int64");
        let a = run(
            13,
            "g (float[2,2] x, int64[2,3] i) => (y) { y = GatherElements <axis = 0> (x, i) }",
        );
        fails_with(&a, "exceed data dims");
    }

    #[test]
    fn expand_and_tile() {
        let a = run(
            13,
            "g (float[3,1] x) => (a, b) <int64[3] s = {2, 1, 4}, int64[2] t = {3, 1}> {
                a = Expand (x, s)
                b = Expand (x, t)
            }",
        );
        assert_eq!(dims(&a, "a"), [2, 3, 4]);
        assert_eq!(dims(&a, "b"), [3, 1]);
        assert_eq!(calls(&a), 1, "an Expand to the same shape is a view");
        let a = run(
            13,
            "g () => (y, z) <int64[2,1] x = {7, 8}, int64[2] s = {2, 3}, int64[2] r = {2, 2}> {
                y = Expand (x, s)
                z = Tile (x, r)
            }",
        );
        assert_eq!(ints(&a, "y"), [7, 7, 7, 8, 8, 8]);
        assert_eq!(ints(&a, "z"), [7, 7, 8, 8, 7, 7, 8, 8]);
        // Opset 1 Tile: one axis, one count.
        let a = run(
            1,
            "g (float[2,3] x) => (y) <float t = {3.0}, float ax = {1.0}> { y = Tile (x, t, ax) }",
        );
        assert_eq!(dims(&a, "y"), [2, 9]);
        let a = run(13, "g (float[3,1] x) => (y) <int64[2] s = {2, 1}> { y = Expand (x, s) }");
        fails_with(&a, "do not broadcast");
        let a = run(13, "g (float[3] x) => (y) <int64[1] r = {-1}> { y = Tile (x, r) }");
        fails_with(&a, "negative");
    }

    #[test]
    fn pad_modes_and_forms() {
        let a = run(
            18,
            "g (float[1,3,4,5] x) => (a, b, c) <int64[8] p = {0, 0, 1, 2, 0, 0, 3, -1},
                                              int64[4] q = {1, 1, 2, 2}, int64[2] ax = {-1, 1}> {
                a = Pad (x, p)
                b = Pad <mode = \"reflect\"> (x, q, , ax)
                c = Pad <mode = \"edge\"> (x, p)
            }",
        );
        assert_eq!(dims(&a, "a"), [1, 3, 8, 6]);
        assert_eq!(dims(&a, "b"), [1, 6, 4, 8]);
        assert_eq!(dims(&a, "c"), [1, 3, 8, 6]);
        // [1,2,3] padded by 2 and 1 in each mode.
        let a = run(
            19,
            "g () => (c, r, e, w) <int32[3] x = {1, 2, 3}, int64[2] p = {2, 1}, int32 v = {9}> {
                c = Pad (x, p, v)
                r = Pad <mode = \"reflect\"> (x, p)
                e = Pad <mode = \"edge\"> (x, p)
                w = Pad <mode = \"wrap\"> (x, p)
            }",
        );
        assert_eq!(ints(&a, "c"), [9, 9, 1, 2, 3, 9]);
        assert_eq!(ints(&a, "r"), [3, 2, 1, 2, 3, 2]);
        assert_eq!(ints(&a, "e"), [1, 1, 1, 2, 3, 3]);
        assert_eq!(ints(&a, "w"), [2, 3, 1, 2, 3, 1]);
        // Opset 2: pads and value are attributes; negative pads crop.
        let a = run(
            2,
            "g () => (y) <float[4] x = {1, 2, 3, 4}> { y = Pad <pads = [-1, 2], value = 0.5> (x) }",
        );
        assert_eq!(floats(&a, "y"), [2., 3., 4., 0.5, 0.5]);
        // Booleans: a true border around [false].
        let a = run(
            13,
            "g () => (y) <bool[1] x = {0}, int64[2] p = {1, 1}, bool v = {1}> { y = Pad (x, p, v) }",
        );
        assert_eq!(ty(&a, "y").elem, ElemType::Bool);
        assert_eq!(ints(&a, "y"), [1, 0, 1]);
    }

    #[test]
    fn pad_errors() {
        let a = run(13, "g (float[3] x) => (y) <int64[1] p = {1}> { y = Pad (x, p) }");
        fails_with(&a, "2 per axis");
        let a = run(13, "g (float[3] x) => (y) <int64[2] p = {-2, -2}> { y = Pad (x, p) }");
        fails_with(&a, "crops axis 0");
        let a = run(
            18,
            "g (float[3] x) => (y) <int64[2] p = {1, 1}> { y = Pad <mode = \"wrap\"> (x, p) }",
        );
        fails_with(&a, "wrap needs opset 19");
        let a = run(
            19,
            "g (float[0] x) => (y) <int64[2] p = {1, 1}> { y = Pad <mode = \"edge\"> (x, p) }",
        );
        fails_with(&a, "empty tensor");
        let a = run(13, "g (float[3] x, int64[2] p) => (float[N] y) { y = Pad (x, p) }");
        fails_with(&a, "unsupported: Pad's pads or axes is known only at run time");
    }

    #[test]
    fn depth_and_space() {
        let a = run(
            13,
            "g (float[1,8,2,3] x, float[2,1,4,6] z) => (a, b) {
                a = DepthToSpace <blocksize = 2, mode = \"CRD\"> (x)
                b = SpaceToDepth <blocksize = 2> (z)
            }",
        );
        assert_eq!(dims(&a, "a"), [1, 2, 4, 6]);
        assert_eq!(dims(&a, "b"), [2, 4, 2, 3]);
        // [1, 8, 1, 1] holding 0..8: DCR interleaves the two output channels.
        let a = run(
            13,
            "g () => (d, c) <int64[1,8,1,1] x = {0, 1, 2, 3, 4, 5, 6, 7}> {
                d = DepthToSpace <blocksize = 2> (x)
                c = DepthToSpace <blocksize = 2, mode = \"CRD\"> (x)
            }",
        );
        assert_eq!(ints(&a, "d"), [0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(ints(&a, "c"), [0, 1, 2, 3, 4, 5, 6, 7]);
        // SpaceToDepth of [1, 2, 2, 2] holding 0..8: DCR takes one element of
        // each channel per block position, CRD (opset 28) keeps channels together.
        let graph = |mode: &str| {
            format!(
                "g () => (y) <int64[1,2,2,2] x = {{0, 1, 2, 3, 4, 5, 6, 7}}> {{
                    y = SpaceToDepth <blocksize = 2{mode}> (x)
                }}"
            )
        };
        assert_eq!(ints(&run(13, &graph("")), "y"), [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(ints(&run(28, &graph(", mode = \"CRD\"")), "y"), [0, 1, 2, 3, 4, 5, 6, 7]);
        let a = run(13, "g (float[1,6,2,2] x) => (y) { y = DepthToSpace <blocksize = 2> (x) }");
        fails_with(&a, "DepthToSpace of 6 channels");
        let a = run(13, "g (float[1,1,3,2] x) => (y) { y = SpaceToDepth <blocksize = 2> (x) }");
        fails_with(&a, "SpaceToDepth of 3x2");
        let a = run(13, "g (float[8,2,2] x) => (y) { y = DepthToSpace <blocksize = 2> (x) }");
        fails_with(&a, "4-D input");
    }

    #[test]
    fn f16_and_bool_fold() {
        // f16 1, 2, 3, 4 (the text syntax writes their bits: 0x3C00, 0x4000,
        // 0x4200, 0x4400) transposed as [2, 2].
        let a = run(
            13,
            "g () => (float16[] y, bool[] b) <float16[2,2] x = {15360, 16384, 16896, 17408}, bool[2,2] f = {1, 0, 0, 0}> {
                y = Transpose (x)
                b = Transpose (f)
            }",
        );
        let v = value(&a, "y");
        let t = a.inferred.constants[v.index()].as_ref().expect("folded");
        let bits: Vec<u16> = t
            .bytes()
            .expect("bytes")
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(bits, [0x3C00, 0x4200, 0x4000, 0x4400]);
        assert_eq!(ints(&a, "b"), [1, 0, 0, 0]);
    }
}
