//! Indexing and data-dependent operators: ScatterElements, Scatter,
//! ScatterND, TensorScatter, GatherND, Einsum, CumProd, BitCast,
//! ReverseSequence, Det, NonZero, Compress, NonMaxSuppression, Unique, and
//! SplitToSequence with sizes known only at run time.
//!
//! Einsum is planned at generation time: the equation becomes one stride
//! per operand and label, so the kernel only walks the output and summed
//! labels. NonZero, Compress and NonMaxSuppression produce as many elements
//! as the data selects: their static shape is the one the model declares
//! (or the one a constant input gives), and the generated code checks the
//! data against it at run time.
//!
//! Unique without declared lengths, and the pieces of a SplitToSequence
//! whose sizes come at run time (`passes::sequences` gives the node one
//! output per piece), are data-sized instead: each output gets its capacity
//! (Unique: every slice distinct; a piece: the whole axis), the kernel
//! packs the actual tensor at the front, and the lengths reach the caller
//! through `run`'s result (see [`super::Kernel::data_sized`]).

use super::host::Data;
use super::host::{HostData, HostElem};
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, invalid, is_num, unsupported,
};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, Tensor, TensorData, TensorType};
use bytes::Bytes;
use onnx_codegen_runtime::indexing::{self as rt_ix, Combine, Nms, Reduction, Slices, Widen};
use onnx_codegen_runtime::layout::MoveTo;
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    let op = match op_type {
        "ScatterElements" => OpKind::ScatterElements,
        "Scatter" => OpKind::Scatter,
        "ScatterND" => OpKind::ScatterNd,
        "TensorScatter" => OpKind::TensorScatter,
        "GatherND" => OpKind::GatherNd,
        "Einsum" => OpKind::Einsum,
        "CumProd" => OpKind::CumProd,
        "BitCast" => OpKind::BitCast,
        "ReverseSequence" => OpKind::ReverseSequence,
        "Det" => OpKind::Det,
        "NonZero" => OpKind::NonZero,
        "Compress" => OpKind::Compress,
        "NonMaxSuppression" => OpKind::Nms,
        "Unique" => OpKind::Unique,
        "SplitToSequence" => OpKind::SplitToSequence,
        "SequenceInsert" => OpKind::SequenceInsert,
        _ => return None,
    };
    Some(RULES[op as usize])
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    ScatterElements,
    Scatter,
    ScatterNd,
    TensorScatter,
    GatherNd,
    Einsum,
    CumProd,
    BitCast,
    ReverseSequence,
    Det,
    NonZero,
    Compress,
    Nms,
    Unique,
    SplitToSequence,
    SequenceInsert,
}

static RULES: [&dyn OpRule; 16] = [
    &IndexRule(OpKind::ScatterElements),
    &IndexRule(OpKind::Scatter),
    &IndexRule(OpKind::ScatterNd),
    &IndexRule(OpKind::TensorScatter),
    &IndexRule(OpKind::GatherNd),
    &IndexRule(OpKind::Einsum),
    &IndexRule(OpKind::CumProd),
    &IndexRule(OpKind::BitCast),
    &IndexRule(OpKind::ReverseSequence),
    &IndexRule(OpKind::Det),
    &IndexRule(OpKind::NonZero),
    &IndexRule(OpKind::Compress),
    &IndexRule(OpKind::Nms),
    &IndexRule(OpKind::Unique),
    &IndexRule(OpKind::SplitToSequence),
    &IndexRule(OpKind::SequenceInsert),
];

struct IndexRule(OpKind);

// ---------------------------------------------------------------------------
// Shared helpers

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

/// Element types with a host form and a Rust type one byte or more wide.
fn is_data(e: ElemType) -> bool {
    is_num(e) || matches!(e, ElemType::Bool | ElemType::Float16 | ElemType::Bfloat16)
}

fn index_input(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<TensorType> {
    let t = cx.input(i)?;
    if !matches!(t.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!("{what} (input {i}) must be int32 or int64, it is {}", t.elem));
    }
    Ok(t.clone())
}

/// Like `by_data_type!` without `bool` (the types einsum accumulates).
macro_rules! by_widen_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            other => crate::by_num_type!(other, $f($($arg),*)),
        }
    };
}

fn data_in<'a, T: Data>(inputs: &[Option<&'a HostTensor>], i: usize) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| T::of(&t.data)).ok_or(wrong_buffer())
}

fn data_out<T: Data>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    outputs.get_mut(k).and_then(|t| T::of_mut(&mut t.data)).ok_or(wrong_buffer())
}

/// The elements of an integer host tensor as `i64`.
fn host_ints(t: &HostTensor) -> Option<Vec<i64>> {
    Some(match &t.data {
        HostData::I8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I64(v) => v.clone(),
        HostData::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U64(v) => v.iter().map(|&x| x as i64).collect(),
        _ => return None,
    })
}

fn ints_in(inputs: &[Option<&HostTensor>], i: usize) -> Result<Vec<i64>, EvalError> {
    inputs.get(i).copied().flatten().and_then(host_ints).ok_or(wrong_buffer())
}

/// The declared type of output `k`, checked to have `elem` and `rank`, for
/// an output whose length depends on the data.
fn declared_of(
    cx: &NodeCx<'_>,
    k: usize,
    elem: ElemType,
    rank: usize,
    what: &str,
) -> OpResult<TensorType> {
    let Some(t) = cx.declared_output(k) else {
        return unsupported(format!(
            "{what}: the output's length depends on the data and the model does not declare its shape"
        ));
    };
    if t.elem != elem || t.rank() != rank {
        return invalid(format!(
            "{what}: the output is declared as {t}, expected {elem} of rank {rank}"
        ));
    }
    Ok(t.clone())
}

// ---------------------------------------------------------------------------
// Plans

#[derive(Clone, Debug, PartialEq)]
enum Axis {
    Known(i64),
    Runtime,
}

#[derive(Clone, Debug)]
enum Plan {
    ScatterElements {
        shape: Vec<usize>,
        index_shape: Vec<usize>,
        axis: usize,
        reduction: Reduction,
    },
    ScatterNd {
        shape: Vec<usize>,
        k: usize,
        count: usize,
        reduction: Reduction,
    },
    TensorScatter {
        shape: Vec<usize>,
        axis: usize,
        seq: usize,
        circular: bool,
    },
    GatherNd {
        shape: Vec<usize>,
        batch_dims: usize,
        k: usize,
    },
    Einsum {
        out_dims: Vec<usize>,
        sum_dims: Vec<usize>,
        strides: Vec<Vec<usize>>,
    },
    CumProd {
        dims: Vec<usize>,
        axis: Axis,
        exclusive: bool,
        reverse: bool,
    },
    BitCast {
        to: ElemType,
    },
    ReverseSequence {
        dims: Vec<usize>,
        batch_axis: usize,
        time_axis: usize,
    },
    Det {
        batch: usize,
        n: usize,
    },
    NonZero {
        dims: Vec<usize>,
        count: usize,
    },
    Compress {
        outer: usize,
        len: usize,
        inner: usize,
        count: usize,
    },
    Nms {
        p: Nms,
        count: usize,
    },
    Unique {
        s: Slices,
        sorted: bool,
        count: usize,
        /// The model declares no lengths: `count` is the capacity and the
        /// outputs' length is data-sized (axis `axis` of Y, axis 0 of
        /// indices and counts).
        bounded: Option<usize>,
    },
    /// SequenceInsert at a run-time position (inputs: the tensor, the
    /// position, then the `len` elements; one output per element after
    /// the insertion). Per output, its candidates' element counts and
    /// lengths along its data-sized axis, in the order: the element before
    /// the position, the tensor, the element after.
    Insert {
        len: usize,
        outputs: Vec<Vec<(usize, usize)>>,
        axes: Vec<Option<usize>>,
    },
    /// Data-sized pieces along the middle axis of `s`, one per output.
    Split {
        s: Slices,
        pieces: usize,
        axis: usize,
    },
}

struct Planned {
    outputs: Vec<TensorType>,
    plan: Plan,
}

fn reduction(cx: &NodeCx<'_>, op: &str) -> OpResult<Reduction> {
    let r = cx.string_or("reduction", "none");
    let v = cx.version();
    let r = match r.as_str() {
        "none" => Reduction::None,
        "add" if v >= 16 => Reduction::Add,
        "mul" if v >= 16 => Reduction::Mul,
        "max" if v >= 18 => Reduction::Max,
        "min" if v >= 18 => Reduction::Min,
        other => return invalid(format!("{op}'s reduction '{other}' is not defined at opset {v}")),
    };
    Ok(r)
}

fn scatter_types(cx: &NodeCx<'_>, op: &str, r: Reduction) -> OpResult<TensorType> {
    let data = cx.input(0)?;
    let upd = cx.input(2)?;
    if !is_data(data.elem) {
        return unsupported(format!("{op} on {} tensors", data.elem));
    }
    if upd.elem != data.elem {
        return invalid(format!("{op}'s updates are {}, data is {}", upd.elem, data.elem));
    }
    if data.elem == ElemType::Bool && r != Reduction::None {
        return unsupported(format!("{op} with a reduction on bool tensors"));
    }
    Ok(data.clone())
}

fn plan_scatter_elements(cx: &NodeCx<'_>, op: &str) -> OpResult<Planned> {
    let r = if op == "Scatter" { Reduction::None } else { reduction(cx, op)? };
    let data = scatter_types(cx, op, r)?;
    let idx = index_input(cx, 1, &format!("{op}'s indices"))?;
    let upd = cx.input(2)?;
    let rank = data.rank();
    if rank == 0 {
        return invalid(format!("{op} needs data of rank 1 or more"));
    }
    if idx.dims != upd.dims {
        return invalid(format!("{op}'s indices {idx} and updates {upd} must have the same shape"));
    }
    if idx.rank() != rank {
        return invalid(format!("{op}'s indices {idx} must have the rank of data {data}"));
    }
    let a = axis(cx.int_or("axis", 0), rank, &format!("{op} axis"))?;
    for d in 0..rank {
        if d != a && idx.dims[d] > data.dims[d] {
            return invalid(format!("{op}'s indices {idx} exceed data {data} on axis {d}"));
        }
    }
    if idx.dims[a] > 0 && data.dims[a] == 0 {
        return invalid(format!("{op} indexes an empty axis {a} of {data}"));
    }
    Ok(Planned {
        outputs: vec![data.clone()],
        plan: Plan::ScatterElements {
            shape: data.dims.clone(),
            index_shape: idx.dims.clone(),
            axis: a,
            reduction: r,
        },
    })
}

fn plan_scatter_nd(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let r = reduction(cx, "ScatterND")?;
    let data = scatter_types(cx, "ScatterND", r)?;
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("ScatterND's indices must be int64, they are {}", idx.elem));
    }
    let upd = cx.input(2)?;
    let Some((&k, lead)) = idx.dims.split_last() else {
        return invalid("ScatterND's indices must have rank 1 or more");
    };
    if k > data.rank() {
        return invalid(format!("ScatterND's index tuples of {k} exceed the rank of data {data}"));
    }
    let expect: Vec<usize> = lead.iter().chain(&data.dims[k..]).copied().collect();
    if upd.dims != expect {
        return invalid(format!("ScatterND's updates are {upd}, expected dims {expect:?}"));
    }
    Ok(Planned {
        outputs: vec![data.clone()],
        plan: Plan::ScatterNd { shape: data.dims.clone(), k, count: product(lead)?, reduction: r },
    })
}

fn plan_tensor_scatter(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let cache = cx.input(0)?;
    let upd = cx.input(1)?;
    if !is_data(cache.elem) {
        return unsupported(format!("TensorScatter on {} tensors", cache.elem));
    }
    if upd.elem != cache.elem {
        return invalid(format!(
            "TensorScatter's update is {}, the cache {}",
            upd.elem, cache.elem
        ));
    }
    let rank = cache.rank();
    if rank < 2 {
        return invalid(format!("TensorScatter needs a cache of rank 2 or more, got {cache}"));
    }
    let a = axis(cx.int_or("axis", -2), rank, "TensorScatter axis")?;
    if a == 0 {
        return invalid("TensorScatter's axis must not be the batch axis 0");
    }
    let circular = match cx.string_or("mode", "linear").as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return invalid(format!("TensorScatter's mode '{other}' is not linear or circular"));
        }
    };
    if upd.rank() != rank
        || (0..rank).any(|d| {
            if d == a { upd.dims[d] > cache.dims[d] } else { upd.dims[d] != cache.dims[d] }
        })
    {
        return invalid(format!("TensorScatter's update {upd} does not fit the cache {cache}"));
    }
    if let Some(w) = cx.opt_input(2)
        && (!matches!(w.elem, ElemType::Int64 | ElemType::Int32) || w.dims != cache.dims[..1])
    {
        return invalid(format!(
            "TensorScatter's write_indices {w} must be int64[{}]",
            cache.dims[0]
        ));
    }
    Ok(Planned {
        outputs: vec![cache.clone()],
        plan: Plan::TensorScatter {
            shape: cache.dims.clone(),
            axis: a,
            seq: upd.dims[a],
            circular,
        },
    })
}

fn plan_gather_nd(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let data = cx.input(0)?;
    if !is_data(data.elem) {
        return unsupported(format!("GatherND on {} tensors", data.elem));
    }
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("GatherND's indices must be int64, they are {}", idx.elem));
    }
    let b = cx.int_or("batch_dims", 0);
    let b = usize::try_from(b)
        .map_err(|_| OpError::Invalid(format!("GatherND's batch_dims {b} is negative")))?;
    let Some((&k, lead)) = idx.dims.split_last() else {
        return invalid("GatherND's indices must have rank 1 or more");
    };
    if b >= idx.rank() || b >= data.rank() {
        return invalid(format!(
            "GatherND's batch_dims {b} must be below the ranks of data {data} and indices {idx}"
        ));
    }
    if data.dims[..b] != idx.dims[..b] {
        return invalid(format!(
            "GatherND's data {data} and indices {idx} differ on the batch axes"
        ));
    }
    if k == 0 || b + k > data.rank() {
        return invalid(format!(
            "GatherND's index tuples of {k} do not fit data {data} after {b} batch axes"
        ));
    }
    let dims: Vec<usize> = lead.iter().chain(&data.dims[b + k..]).copied().collect();
    product(&dims)?;
    Ok(Planned {
        outputs: vec![TensorType::new(data.elem, dims)],
        plan: Plan::GatherNd { shape: data.dims.clone(), batch_dims: b, k },
    })
}

/// One term of an einsum equation: its labels, with `None` where the
/// ellipsis stands.
fn einsum_term(term: &str, what: &str) -> OpResult<Vec<Option<u8>>> {
    let mut out = Vec::new();
    let b = term.as_bytes();
    let mut i = 0;
    let mut ellipsis = false;
    while i < b.len() {
        match b[i] {
            b'.' => {
                if b.get(i..i + 3) != Some(b"...") || ellipsis {
                    return invalid(format!(
                        "Einsum's {what} '{term}' has a stray or repeated '.'"
                    ));
                }
                ellipsis = true;
                out.push(None);
                i += 3;
            }
            c if c.is_ascii_alphabetic() => {
                out.push(Some(c));
                i += 1;
            }
            c => {
                return invalid(format!(
                    "Einsum's {what} '{term}' holds '{}', not a letter",
                    c as char
                ));
            }
        }
    }
    Ok(out)
}

fn plan_einsum(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let eq: String = cx.string_or("equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let n = cx.inputs.len();
    if n == 0 || n > rt_ix::MAX_OPERANDS {
        return unsupported(format!(
            "Einsum with {n} operands (1 to {} are supported)",
            rt_ix::MAX_OPERANDS
        ));
    }
    let elem = cx.input(0)?.elem;
    if !(is_num(elem) || matches!(elem, ElemType::Float16 | ElemType::Bfloat16)) {
        return unsupported(format!("Einsum on {elem} tensors"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != n {
        return invalid(format!(
            "Einsum's equation '{eq}' has {} operands, the node {n} inputs",
            terms.len()
        ));
    }
    // Labels: letters by their byte; ellipsis axes as 128 + position from the right.
    let mut size: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    let mut ell_rank = 0usize;
    let mut per_input: Vec<Vec<(u16, usize, usize)>> = Vec::new(); // (label, dim, stride)
    let mut counts: std::collections::BTreeMap<u8, usize> = std::collections::BTreeMap::new();
    let mut ell_dims: Vec<Vec<usize>> = Vec::new();
    for (j, term) in terms.iter().enumerate() {
        let t = cx.input(j)?;
        if t.elem != elem {
            return invalid(format!("Einsum's inputs mix {elem} and {}", t.elem));
        }
        let labels = einsum_term(term, &format!("term {j}"))?;
        let letters = labels.iter().filter(|l| l.is_some()).count();
        let has_ell = labels.len() > letters;
        if t.rank() < letters || (!has_ell && t.rank() != letters) {
            return invalid(format!("Einsum's term '{term}' does not match input {j} {t}"));
        }
        let e = t.rank() - letters;
        if e > rt_ix::MAX_LABELS {
            return unsupported(format!("Einsum with an ellipsis of {e} axes"));
        }
        ell_rank = ell_rank.max(e);
        let mut strides = vec![0usize; t.rank()];
        let mut s = 1usize;
        for d in (0..t.rank()).rev() {
            strides[d] = s;
            s = s.saturating_mul(t.dims[d]);
        }
        let mut axes = Vec::new();
        let mut d = 0;
        let mut ed = Vec::new();
        for l in &labels {
            match l {
                Some(c) => {
                    *counts.entry(*c).or_default() += 1;
                    axes.push((u16::from(*c), t.dims[d], strides[d]));
                    d += 1;
                }
                None => {
                    for q in 0..e {
                        let label = 128 + (e - 1 - q) as u16;
                        axes.push((label, t.dims[d], strides[d]));
                        ed.push(t.dims[d]);
                        d += 1;
                    }
                }
            }
        }
        ell_dims.push(ed);
        per_input.push(axes);
    }
    // Sizes: letters must agree; ellipsis axes broadcast.
    for axes in &per_input {
        for &(label, dim, _) in axes {
            let slot = size.entry(label).or_insert(dim);
            if *slot != dim {
                if label >= 128 && (*slot == 1 || dim == 1) {
                    *slot = (*slot).max(dim);
                } else {
                    return invalid(format!(
                        "Einsum's equation '{eq}' gives an axis both {} and {dim}",
                        *slot
                    ));
                }
            }
        }
    }
    let ell_labels: Vec<u16> = (0..ell_rank).rev().map(|q| 128 + q as u16).collect();
    let out_labels: Vec<u16> = match rhs {
        Some(r) => {
            let mut v = Vec::new();
            for l in einsum_term(r, "output")? {
                match l {
                    Some(c) => {
                        if !counts.contains_key(&c) {
                            return invalid(format!(
                                "Einsum's output label '{}' is in no input",
                                c as char
                            ));
                        }
                        if v.contains(&u16::from(c)) {
                            return invalid(format!(
                                "Einsum's output repeats label '{}'",
                                c as char
                            ));
                        }
                        v.push(u16::from(c));
                    }
                    None => v.extend(&ell_labels),
                }
            }
            v
        }
        None => ell_labels
            .iter()
            .copied()
            .chain(counts.iter().filter(|&(_, &n)| n == 1).map(|(&c, _)| u16::from(c)))
            .collect(),
    };
    let sum_labels: Vec<u16> = size.keys().copied().filter(|l| !out_labels.contains(l)).collect();
    let dim_of = |l: &u16| size.get(l).copied().unwrap_or(1);
    let out_dims: Vec<usize> = out_labels.iter().map(dim_of).collect();
    let sum_dims: Vec<usize> = sum_labels.iter().map(dim_of).collect();
    if out_dims.len() + sum_dims.len() > rt_ix::MAX_LABELS {
        return unsupported("Einsum with more labels than the kernel handles");
    }
    let all = product(&out_dims)?.checked_mul(product(&sum_dims)?);
    if all.is_none() {
        return invalid("Einsum's iteration space is too large");
    }
    let strides: Vec<Vec<usize>> = per_input
        .iter()
        .map(|axes| {
            out_labels
                .iter()
                .chain(&sum_labels)
                .map(|l| {
                    axes.iter()
                        .filter(|(a, d, _)| a == l && !(*d == 1 && dim_of(l) != 1))
                        .map(|&(_, _, s)| s)
                        .sum()
                })
                .collect()
        })
        .collect();
    Ok(Planned {
        outputs: vec![TensorType::new(elem, out_dims.clone())],
        plan: Plan::Einsum { out_dims, sum_dims, strides },
    })
}

fn plan_cumprod(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_num(x.elem) {
        return unsupported(format!("CumProd on {} tensors", x.elem));
    }
    let at = cx.input(1)?;
    if !matches!(at.elem, ElemType::Int32 | ElemType::Int64) || at.numel() != Some(1) {
        return invalid(format!("CumProd's axis must be one int32 or int64, it is {at}"));
    }
    let a = match cx.constant(1).and_then(Tensor::to_i64s).as_deref() {
        Some([a]) => {
            axis(*a, x.rank().max(1), "CumProd axis")?;
            Axis::Known(*a)
        }
        _ => Axis::Runtime,
    };
    Ok(Planned {
        outputs: vec![x.clone()],
        plan: Plan::CumProd {
            dims: x.dims.clone(),
            axis: a,
            exclusive: cx.int_or("exclusive", 0) != 0,
            reverse: cx.int_or("reverse", 0) != 0,
        },
    })
}

fn plan_bitcast(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    let code = cx.int("to")?;
    let to = i32::try_from(code)
        .ok()
        .and_then(ElemType::from_proto)
        .ok_or_else(|| OpError::Invalid(format!("BitCast's to {code} is not an element type")))?;
    for e in [x.elem, to] {
        if !is_data(e) {
            return unsupported(format!("BitCast between {} and {to}", x.elem));
        }
    }
    if x.elem.bits() != to.bits() {
        return invalid(format!("BitCast from {} to {to} changes the element width", x.elem));
    }
    Ok(Planned { outputs: vec![TensorType::new(to, x.dims.clone())], plan: Plan::BitCast { to } })
}

fn plan_reverse_sequence(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("ReverseSequence on {} tensors", x.elem));
    }
    if x.rank() < 2 {
        return invalid(format!("ReverseSequence needs an input of rank 2 or more, got {x}"));
    }
    let b = axis(cx.int_or("batch_axis", 1), 2, "ReverseSequence batch_axis")?;
    let t = axis(cx.int_or("time_axis", 0), 2, "ReverseSequence time_axis")?;
    if cx.int_or("batch_axis", 1) < 0 || cx.int_or("time_axis", 0) < 0 || b == t {
        return invalid("ReverseSequence's batch_axis and time_axis must be 0 and 1 in some order");
    }
    let lens = cx.input(1)?;
    if lens.elem != ElemType::Int64 || lens.dims != [x.dims[b]] {
        return invalid(format!(
            "ReverseSequence's sequence_lens {lens} must be int64[{}]",
            x.dims[b]
        ));
    }
    Ok(Planned {
        outputs: vec![x.clone()],
        plan: Plan::ReverseSequence { dims: x.dims.clone(), batch_axis: b, time_axis: t },
    })
}

fn plan_det(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!("Det on {} tensors (float and double are supported)", x.elem));
    }
    let r = x.rank();
    if r < 2 || x.dims[r - 1] != x.dims[r - 2] {
        return invalid(format!("Det needs square matrices in the last two axes, got {x}"));
    }
    let n = x.dims[r - 1];
    product(&[n, n])?;
    Ok(Planned {
        outputs: vec![TensorType::new(x.elem, x.dims[..r - 2].to_vec())],
        plan: Plan::Det { batch: product(&x.dims[..r - 2])?, n },
    })
}

fn count_nonzero(t: &HostTensor) -> usize {
    fn n<T: Data + rt_ix::IsZero>(d: &HostData) -> usize {
        T::of(d).map_or(0, |v| v.iter().filter(|x| !x.is_zero()).count())
    }
    match &t.data {
        HostData::F32(_) => n::<f32>(&t.data),
        HostData::F64(_) => n::<f64>(&t.data),
        HostData::I8(_) => n::<i8>(&t.data),
        HostData::I16(_) => n::<i16>(&t.data),
        HostData::I32(_) => n::<i32>(&t.data),
        HostData::I64(_) => n::<i64>(&t.data),
        HostData::U8(_) => n::<u8>(&t.data),
        HostData::U16(_) => n::<u16>(&t.data),
        HostData::U32(_) => n::<u32>(&t.data),
        HostData::U64(_) => n::<u64>(&t.data),
        HostData::Bool(_) => n::<bool>(&t.data),
        HostData::F16(_) => n::<f16>(&t.data),
        HostData::Bf16(_) => n::<bf16>(&t.data),
    }
}

fn plan_non_zero(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("NonZero on {} tensors", x.elem));
    }
    if x.rank() == 0 {
        return unsupported("NonZero of a scalar");
    }
    let count = match cx.constant(0).and_then(HostTensor::from_tensor) {
        Some(h) => count_nonzero(&h),
        None => {
            let t = declared_of(cx, 0, ElemType::Int64, 2, "NonZero")?;
            if t.dims[0] != x.rank() {
                return invalid(format!(
                    "NonZero's output is declared as {t}; the input has rank {}",
                    x.rank()
                ));
            }
            t.dims[1]
        }
    };
    Ok(Planned {
        outputs: vec![TensorType::new(ElemType::Int64, vec![x.rank(), count])],
        plan: Plan::NonZero { dims: x.dims.clone(), count },
    })
}

fn plan_compress(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("Compress on {} tensors", x.elem));
    }
    let c = cx.input(1)?;
    if c.elem != ElemType::Bool || c.rank() != 1 {
        return invalid(format!("Compress's condition must be a 1-D bool tensor, it is {c}"));
    }
    let a = match cx.node.attr("axis") {
        Some(_) => Some(axis(cx.int_or("axis", 0), x.rank(), "Compress axis")?),
        None => None,
    };
    let (outer, len, inner) = match a {
        Some(a) => (product(&x.dims[..a])?, x.dims[a], product(&x.dims[a + 1..])?),
        None => (1, product(&x.dims)?, 1),
    };
    if c.dims[0] > len {
        return invalid(format!("Compress's condition {c} is longer than the axis ({len})"));
    }
    let count = match cx.constant(1).and_then(HostTensor::from_tensor) {
        Some(h) => count_nonzero(&h),
        None => {
            let rank = if a.is_some() { x.rank() } else { 1 };
            let t = declared_of(cx, 0, x.elem, rank, "Compress")?;
            match a {
                Some(a) => {
                    let mut dims = x.dims.clone();
                    dims[a] = t.dims[a];
                    if dims != t.dims {
                        return invalid(format!(
                            "Compress's output is declared as {t}; the input is {x}"
                        ));
                    }
                    t.dims[a]
                }
                None => t.dims[0],
            }
        }
    };
    if count > c.dims[0] {
        return invalid(format!(
            "Compress's output is declared with {count} elements along the axis; the condition has {}",
            c.dims[0]
        ));
    }
    let dims = match a {
        Some(a) => {
            let mut d = x.dims.clone();
            d[a] = count;
            d
        }
        None => vec![count],
    };
    Ok(Planned {
        outputs: vec![TensorType::new(x.elem, dims)],
        plan: Plan::Compress { outer, len, inner, count },
    })
}

fn plan_nms(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let boxes = cx.input(0)?;
    let scores = cx.input(1)?;
    if boxes.elem != ElemType::Float || scores.elem != ElemType::Float {
        return unsupported(format!(
            "NonMaxSuppression on {} boxes (float is supported)",
            boxes.elem
        ));
    }
    if boxes.rank() != 3 || boxes.dims[2] != 4 {
        return invalid(format!(
            "NonMaxSuppression's boxes must be [batches, boxes, 4], got {boxes}"
        ));
    }
    if scores.rank() != 3 || scores.dims[0] != boxes.dims[0] || scores.dims[2] != boxes.dims[1] {
        return invalid(format!("NonMaxSuppression's scores {scores} do not match boxes {boxes}"));
    }
    for (i, e, what) in [
        (2, ElemType::Int64, "max_output_boxes_per_class"),
        (3, ElemType::Float, "iou_threshold"),
        (4, ElemType::Float, "score_threshold"),
    ] {
        if let Some(t) = cx.opt_input(i)
            && (t.elem != e || t.numel().is_some_and(|n| n > 1))
        {
            return invalid(format!("NonMaxSuppression's {what} must be one {e}, it is {t}"));
        }
    }
    let center = match cx.int_or("center_point_box", 0) {
        0 => false,
        1 => true,
        other => {
            return invalid(format!("NonMaxSuppression's center_point_box {other} is not 0 or 1"));
        }
    };
    let t = declared_of(cx, 0, ElemType::Int64, 2, "NonMaxSuppression")?;
    if t.dims[1] != 3 {
        return invalid(format!("NonMaxSuppression's output is declared as {t}; it has 3 columns"));
    }
    let p = Nms {
        batches: boxes.dims[0],
        classes: scores.dims[1],
        boxes: boxes.dims[1],
        center_point_box: center,
    };
    Ok(Planned { outputs: vec![t.clone()], plan: Plan::Nms { p, count: t.dims[0] } })
}

fn plan_unique(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("Unique on {} tensors", x.elem));
    }
    let a = match cx.node.attr("axis") {
        Some(_) => Some(axis(cx.int_or("axis", 0), x.rank(), "Unique axis")?),
        None => None,
    };
    let s = match a {
        Some(a) => Slices {
            outer: product(&x.dims[..a])?,
            len: x.dims[a],
            inner: product(&x.dims[a + 1..])?,
        },
        None => Slices { outer: 1, len: product(&x.dims)?, inner: 1 },
    };
    let y_count = cx.declared_output(0).map(|t| -> OpResult<usize> {
        match a {
            Some(a) => {
                let mut dims = x.dims.clone();
                dims[a] = t.dims.get(a).copied().unwrap_or(0);
                if t.elem != x.elem || t.dims != dims {
                    return invalid(format!("Unique's Y is declared as {t}; X is {x}"));
                }
                Ok(dims[a])
            }
            None if t.elem == x.elem && t.rank() == 1 => Ok(t.dims[0]),
            None => invalid(format!("Unique's Y is declared as {t}; it is 1-D {}", x.elem)),
        }
    });
    let count = match y_count {
        Some(c) => c?,
        None => {
            let other = [1, 3].into_iter().find_map(|k| cx.declared_output(k));
            match other {
                Some(t) if t.elem == ElemType::Int64 && t.rank() == 1 => t.dims[0],
                Some(t) => {
                    return invalid(format!("Unique's indices or counts are declared as {t}"));
                }
                None => {
                    return plan_unique_bounded(cx, x, a, s);
                }
            }
        }
    };
    for k in [1, 3] {
        if let Some(t) = cx.declared_output(k)
            && t.dims != [count]
        {
            return invalid(format!(
                "Unique's output {k} is declared as {t}; Y has {count} entries"
            ));
        }
    }
    if count > s.len || (count == 0 && s.len > 0) {
        return invalid(format!(
            "Unique's outputs are declared with {count} entries for {} slices",
            s.len
        ));
    }
    let y_dims = match a {
        Some(a) => {
            let mut d = x.dims.clone();
            d[a] = count;
            d
        }
        None => vec![count],
    };
    let i64s = |n: usize| TensorType::new(ElemType::Int64, vec![n]);
    let mut outputs = vec![TensorType::new(x.elem, y_dims), i64s(count), i64s(s.len), i64s(count)];
    outputs.truncate(cx.node.outputs.len().max(1));
    let sorted = cx.int_or("sorted", 1) != 0;
    Ok(Planned { outputs, plan: Plan::Unique { s, sorted, count, bounded: None } })
}

/// SplitToSequence after `passes::sequences` gave it one output per piece
/// because the sizes (a 1-D `split` of static length) come at run time.
fn plan_split_to_sequence(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    let Some(split) = cx.opt_input(1) else {
        return unsupported("SplitToSequence without a split is expanded before inference");
    };
    if !matches!(split.elem, ElemType::Int32 | ElemType::Int64) || split.rank() != 1 {
        return unsupported(format!(
            "SplitToSequence: a split known only at run time must be a 1-D tensor of int32 or \
             int64 (one size per piece), it is {split}; a single size makes the number of \
             pieces depend on the data"
        ));
    }
    let pieces = split.dims[0];
    if cx.node.outputs.len() != pieces {
        return unsupported(format!(
            "SplitToSequence: the sizes of its {pieces} pieces are known only at run time"
        ));
    }
    if !is_data(x.elem) {
        return unsupported(format!("SplitToSequence on {} tensors", x.elem));
    }
    let a = axis(cx.int_or("axis", 0), x.rank(), "SplitToSequence axis")?;
    let s =
        Slices { outer: product(&x.dims[..a])?, len: x.dims[a], inner: product(&x.dims[a + 1..])? };
    Ok(Planned { outputs: vec![x.clone(); pieces], plan: Plan::Split { s, pieces, axis: a } })
}

/// SequenceInsert at a run-time position, after `passes::sequences` gave
/// it the inputs `(tensor, position, element 0, ...)` and one output per
/// element of the result. Output `j` is element `j` when the position is
/// past `j`, the tensor when it is `j`, element `j - 1` otherwise: when
/// those differ in length along one axis, the output is data-sized.
fn plan_sequence_insert(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let n_in = cx.node.inputs.len();
    if n_in < 2 || cx.node.outputs.len() + 1 != n_in {
        return unsupported(
            "SequenceInsert on a sequence that is not known at generation time is not supported",
        );
    }
    let len = n_in - 2;
    let t = cx.input(0)?;
    let p = cx.input(1)?;
    if !matches!(p.elem, ElemType::Int32 | ElemType::Int64) || p.numel() != Some(1) {
        return invalid(format!("the position of SequenceInsert must be one integer, got {p}"));
    }
    if !is_data(t.elem) {
        return unsupported(format!("SequenceInsert of {} tensors at a run-time position", t.elem));
    }
    let elems = (0..len).map(|i| cx.input(2 + i)).collect::<OpResult<Vec<_>>>()?;
    let mut types = Vec::with_capacity(len + 1);
    let mut outputs = Vec::with_capacity(len + 1);
    let mut axes = Vec::with_capacity(len + 1);
    for j in 0..=len {
        let mut cands: Vec<&TensorType> = Vec::new();
        if j < len {
            cands.push(elems[j]);
        }
        cands.push(t);
        if j > 0 {
            cands.push(elems[j - 1]);
        }
        if let Some(c) = cands.iter().find(|c| c.elem != t.elem || c.rank() != t.rank()) {
            return unsupported(format!(
                "SequenceInsert at a run-time position: the tensor is {t} but an element is \
                 {c}; they must share element type and rank"
            ));
        }
        let differ: Vec<usize> =
            (0..t.rank()).filter(|&a| cands.iter().any(|c| c.dims[a] != t.dims[a])).collect();
        let axis = match differ.as_slice() {
            [] => None,
            [a] => Some(*a),
            _ => {
                return unsupported(format!(
                    "SequenceInsert at a run-time position: the candidates for element {j} \
                     differ in more than one axis"
                ));
            }
        };
        let mut dims = t.dims.clone();
        if let Some(a) = axis {
            dims[a] = cands.iter().map(|c| c.dims[a]).max().unwrap_or(0);
        }
        let counts = cands
            .iter()
            .map(|c| Ok((product(&c.dims)?, axis.map_or(0, |a| c.dims[a]))))
            .collect::<OpResult<Vec<_>>>()?;
        types.push(t.with_dims(dims));
        outputs.push(counts);
        axes.push(axis);
    }
    Ok(Planned { outputs: types, plan: Plan::Insert { len, outputs, axes } })
}

/// Unique whose outputs' lengths the model leaves to the data: they get
/// their capacity (every slice distinct) and are reported at run time.
fn plan_unique_bounded(
    cx: &NodeCx<'_>,
    x: &TensorType,
    a: Option<usize>,
    s: Slices,
) -> OpResult<Planned> {
    let y_dims = match a {
        Some(_) => x.dims.clone(),
        None => vec![s.len],
    };
    let i64s = |n: usize| TensorType::new(ElemType::Int64, vec![n]);
    let mut outputs = vec![TensorType::new(x.elem, y_dims), i64s(s.len), i64s(s.len), i64s(s.len)];
    outputs.truncate(cx.node.outputs.len().max(1));
    let sorted = cx.int_or("sorted", 1) != 0;
    let bounded = Some(a.unwrap_or(0));
    Ok(Planned { outputs, plan: Plan::Unique { s, sorted, count: s.len, bounded } })
}

fn plan(kind: OpKind, cx: &NodeCx<'_>) -> OpResult<Planned> {
    match kind {
        OpKind::ScatterElements => plan_scatter_elements(cx, "ScatterElements"),
        OpKind::Scatter => plan_scatter_elements(cx, "Scatter"),
        OpKind::ScatterNd => plan_scatter_nd(cx),
        OpKind::TensorScatter => plan_tensor_scatter(cx),
        OpKind::GatherNd => plan_gather_nd(cx),
        OpKind::Einsum => plan_einsum(cx),
        OpKind::CumProd => plan_cumprod(cx),
        OpKind::BitCast => plan_bitcast(cx),
        OpKind::ReverseSequence => plan_reverse_sequence(cx),
        OpKind::Det => plan_det(cx),
        OpKind::NonZero => plan_non_zero(cx),
        OpKind::Compress => plan_compress(cx),
        OpKind::Nms => plan_nms(cx),
        OpKind::Unique => plan_unique(cx),
        OpKind::SplitToSequence => plan_split_to_sequence(cx),
        OpKind::SequenceInsert => plan_sequence_insert(cx),
    }
}

impl OpRule for IndexRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(plan(self.0, cx)?.outputs)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(self.0, cx)?;
        let elem = cx.input(0)?.elem;
        let has = |i: usize| cx.opt_input(i).is_some();
        Ok(Lowered::Kernel(Box::new(IndexKernel {
            elem,
            plan: p.plan,
            present: (0..cx.inputs.len()).map(has).collect(),
        })))
    }
}

// ---------------------------------------------------------------------------
// The kernel

struct IndexKernel {
    elem: ElemType,
    plan: Plan,
    present: Vec<bool>,
}

fn red_tokens(r: Reduction, rt: &TokenStream) -> TokenStream {
    let v = match r {
        Reduction::None => quote!(None),
        Reduction::Add => quote!(Add),
        Reduction::Mul => quote!(Mul),
        Reduction::Max => quote!(Max),
        Reduction::Min => quote!(Min),
    };
    quote!(#rt::indexing::Reduction::#v)
}

fn run_move<T: Data + Combine + rt_ix::IsZero + MoveTo<T>>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = data_in::<T>(inputs, 0)?;
    match &k.plan {
        Plan::ScatterElements { shape, index_shape, axis, reduction } => {
            let (i, u) = (ints_in(inputs, 1)?, data_in::<T>(inputs, 2)?);
            rt_ix::scatter_elements(
                shape,
                index_shape,
                *axis,
                *reduction,
                x,
                &i,
                u,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::ScatterNd { shape, k: kk, count, reduction } => {
            let (i, u) = (ints_in(inputs, 1)?, data_in::<T>(inputs, 2)?);
            rt_ix::scatter_nd(
                shape,
                *kk,
                *count,
                *reduction,
                x,
                &i,
                u,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::TensorScatter { shape, axis, seq, circular } => {
            let u = data_in::<T>(inputs, 1)?;
            let w = if k.present.get(2) == Some(&true) { Some(ints_in(inputs, 2)?) } else { None };
            rt_ix::tensor_scatter(
                shape,
                *axis,
                *seq,
                *circular,
                x,
                u,
                w.as_deref(),
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::GatherNd { shape, batch_dims, k: kk } => {
            let i = ints_in(inputs, 1)?;
            rt_ix::gather_nd(shape, *batch_dims, *kk, x, &i, data_out::<T>(outputs, 0)?)?;
        }
        Plan::ReverseSequence { dims, batch_axis, time_axis } => {
            let l = ints_in(inputs, 1)?;
            rt_ix::reverse_sequence(
                dims,
                *batch_axis,
                *time_axis,
                &l,
                x,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::NonZero { dims, count } => {
            rt_ix::non_zero(dims, *count, x, data_out::<i64>(outputs, 0)?)?;
        }
        Plan::Compress { outer, len, inner, count } => {
            let c = data_in::<bool>(inputs, 1)?;
            rt_ix::compress(*outer, *len, *inner, *count, c, x, data_out::<T>(outputs, 0)?)?;
        }
        _ => return Err(EvalError::Type(k.elem)),
    }
    Ok(())
}

fn run_einsum<T: Data + Widen>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::Einsum { out_dims, sum_dims, strides } = &k.plan else { return Err(wrong_buffer()) };
    let ops: Vec<&[T]> =
        (0..strides.len()).map(|i| data_in::<T>(inputs, i)).collect::<Result<_, _>>()?;
    let st: Vec<&[usize]> = strides.iter().map(Vec::as_slice).collect();
    rt_ix::einsum(out_dims, sum_dims, &ops, &st, data_out::<T>(outputs, 0)?)?;
    Ok(())
}

fn run_num<T: Num + HostElem>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::CumProd { dims, axis, exclusive, reverse } = &k.plan else {
        return Err(wrong_buffer());
    };
    let a = match axis {
        Axis::Known(a) => *a,
        Axis::Runtime => match ints_in(inputs, 1)?.as_slice() {
            [a] => *a,
            _ => return Err(wrong_buffer()),
        },
    };
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_ix::cumprod(dims, a, *exclusive, *reverse, x, y)?;
    Ok(())
}

fn run_det<T: Float + HostElem>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::Det { batch, n } = k.plan else { return Err(wrong_buffer()) };
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let [y, s, ..] = outputs else { return Err(wrong_buffer()) };
    let (Some(y), Some(s)) = (y.get_mut::<T>(), s.get_mut::<T>()) else {
        return Err(wrong_buffer());
    };
    rt_ix::det(batch, n, x, y, s)?;
    Ok(())
}

fn f32_in(inputs: &[Option<&HostTensor>], i: usize) -> Option<f32> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<f32>()).and_then(|v| v.first().copied())
}

impl Kernel for IndexKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match &self.plan {
            Plan::Einsum { .. } => by_widen_type!(self.elem, run_einsum(self, inputs, outputs)),
            Plan::CumProd { .. } => crate::by_num_type!(self.elem, run_num(self, inputs, outputs)),
            Plan::Det { .. } => crate::by_float_type!(self.elem, run_det(self, inputs, outputs)),
            Plan::BitCast { to } => {
                let x = inputs.first().copied().flatten().ok_or(wrong_buffer())?;
                let t = x.to_tensor("x");
                let TensorData::Bytes(b) = t.data else { return Err(wrong_buffer()) };
                let bytes: Vec<u8> = if *to == ElemType::Bool {
                    b.iter().map(|&v| u8::from(v != 0)).collect()
                } else {
                    b.to_vec()
                };
                let cast = Tensor { elem: *to, data: TensorData::Bytes(Bytes::from(bytes)), ..t };
                let h = HostTensor::from_tensor(&cast).ok_or(EvalError::Type(*to))?;
                let y = outputs.first_mut().ok_or(wrong_buffer())?;
                if h.ty.dims != y.ty.dims {
                    return Err(wrong_buffer());
                }
                y.data = h.data;
                Ok(())
            }
            Plan::Nms { p, count } => {
                let b = inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|t| t.get::<f32>())
                    .ok_or(wrong_buffer())?;
                let s = inputs
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|t| t.get::<f32>())
                    .ok_or(wrong_buffer())?;
                let m = match inputs.get(2).copied().flatten() {
                    Some(t) => host_ints(t).and_then(|v| v.first().copied()).unwrap_or(0),
                    None => 0,
                };
                let iou = f32_in(inputs, 3).unwrap_or(0.0);
                let thr = f32_in(inputs, 4);
                let y = data_out::<i64>(outputs, 0)?;
                rt_ix::non_max_suppression(*p, b, s, m, iou, thr, *count, y)?;
                Ok(())
            }
            // The outputs present vary; Unique runs only in generated code.
            Plan::Unique { .. } | Plan::Split { .. } | Plan::Insert { .. } => {
                Err(EvalError::Type(self.elem))
            }
            _ => by_data_type!(self.elem, run_move(self, inputs, outputs)),
        }
    }

    fn reads_input(&self, i: usize) -> bool {
        match &self.plan {
            Plan::CumProd { axis, .. } => i == 0 || *axis == Axis::Runtime,
            Plan::BitCast { .. }
            | Plan::Det { .. }
            | Plan::NonZero { .. }
            | Plan::Unique { .. } => i == 0,
            _ => true,
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        match self.plan {
            Plan::Det { n, .. } => Some(TensorType::new(self.elem, vec![(n * n).max(1)])),
            Plan::Unique { count, .. } => {
                Some(TensorType::new(ElemType::Int64, vec![count.max(1)]))
            }
            _ => None,
        }
    }

    fn data_sized(&self) -> Vec<(usize, usize, usize)> {
        match self.plan {
            Plan::Unique { bounded: Some(axis), .. } => vec![(0, axis, 0), (1, 0, 0), (3, 0, 0)],
            Plan::Split { pieces, axis, .. } => (0..pieces).map(|j| (j, axis, j)).collect(),
            Plan::Insert { ref axes, .. } => {
                axes.iter().enumerate().filter_map(|(j, a)| a.map(|a| (j, a, j))).collect()
            }
            _ => Vec::new(),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let ix = quote!(#rt::indexing);
        let u = lit::usize_lit;
        let us = lit::usizes;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let x = input(0);
        let y = io.outputs.first().cloned().flatten();
        match &self.plan {
            Plan::ScatterElements { shape, index_shape, axis, reduction } => {
                let (s, is, a, r) =
                    (us(shape), us(index_shape), u(*axis), red_tokens(*reduction, rt));
                let (i, up) = (input(1), input(2));
                quote!(#ix::scatter_elements(#s, #is, #a, #r, #x, #i, #up, #y)?;)
            }
            Plan::ScatterNd { shape, k, count, reduction } => {
                let (s, k, c, r) = (us(shape), u(*k), u(*count), red_tokens(*reduction, rt));
                let (i, up) = (input(1), input(2));
                quote!(#ix::scatter_nd(#s, #k, #c, #r, #x, #i, #up, #y)?;)
            }
            Plan::TensorScatter { shape, axis, seq, circular } => {
                let (s, a, q) = (us(shape), u(*axis), u(*seq));
                let up = input(1);
                let w = match input(2) {
                    Some(w) => quote!(Some(#w)),
                    None => quote!(None::<&[i64]>),
                };
                quote!(#ix::tensor_scatter(#s, #a, #q, #circular, #x, #up, #w, #y)?;)
            }
            Plan::GatherNd { shape, batch_dims, k } => {
                let (s, b, k) = (us(shape), u(*batch_dims), u(*k));
                let i = input(1);
                quote!(#ix::gather_nd(#s, #b, #k, #x, #i, #y)?;)
            }
            Plan::Einsum { out_dims, sum_dims, strides } => {
                let (o, s) = (us(out_dims), us(sum_dims));
                let ops: Vec<TokenStream> =
                    (0..strides.len()).map(|i| input(i).unwrap_or_default()).collect();
                let st: Vec<TokenStream> = strides.iter().map(|s| us(s)).collect();
                quote!(#ix::einsum(#o, #s, &[#(#ops),*], &[#(#st),*], #y)?;)
            }
            Plan::CumProd { dims, axis, exclusive, reverse } => {
                let d = us(dims);
                let a = match axis {
                    Axis::Known(a) => {
                        let l = proc_macro2::Literal::i64_suffixed(*a);
                        quote!(#l)
                    }
                    Axis::Runtime => {
                        let b = input(1);
                        quote!(#rt::extra::scalar_i64(#b)?)
                    }
                };
                quote!(#ix::cumprod(#d, #a, #exclusive, #reverse, #x, #y)?;)
            }
            Plan::BitCast { .. } => quote!(#ix::bitcast(#x, #y)?;),
            Plan::ReverseSequence { dims, batch_axis, time_axis } => {
                let (d, b, t) = (us(dims), u(*batch_axis), u(*time_axis));
                let l = input(1);
                quote!(#ix::reverse_sequence(#d, #b, #t, #l, #x, #y)?;)
            }
            Plan::Det { batch, n } => {
                let (b, n) = (u(*batch), u(*n));
                let s = &io.scratch;
                quote!(#ix::det(#b, #n, #x, #y, #s)?;)
            }
            Plan::NonZero { dims, count } => {
                let (d, c) = (us(dims), u(*count));
                quote!(#ix::non_zero(#d, #c, #x, #y)?;)
            }
            Plan::Compress { outer, len, inner, count } => {
                let (o, l, i, c) = (u(*outer), u(*len), u(*inner), u(*count));
                let cond = input(1);
                quote!(#ix::compress(#o, #l, #i, #c, #cond, #x, #y)?;)
            }
            Plan::Nms { p, count } => {
                let (b, c, n, center) =
                    (u(p.batches), u(p.classes), u(p.boxes), p.center_point_box);
                let opt = |i: usize| match input(i) {
                    Some(v) => quote!(Some(#v)),
                    None => quote!(None),
                };
                let (m, iou, thr) = (opt(2), opt(3), opt(4));
                let s = input(1);
                let cnt = u(*count);
                quote! {
                    #ix::non_max_suppression(
                        #ix::Nms { batches: #b, classes: #c, boxes: #n, center_point_box: #center },
                        #x, #s,
                        #ix::first_or(#m, 0i64),
                        #ix::first_or(#iou, 0.0f32),
                        #ix::first_opt(#thr),
                        #cnt, #y,
                    )?;
                }
            }
            Plan::Insert { len, outputs, axes } => {
                let (n, k) = (u(*len), u(*len + 1));
                let p = input(1);
                let copies = outputs.iter().enumerate().map(|(j, counts)| {
                    let y = io.outputs.get(j).cloned().flatten().unwrap_or_else(
                        || quote!(compile_error!("a SequenceInsert element is not bound")),
                    );
                    // The candidates in order: element j, the tensor, element j - 1.
                    let mut sources = Vec::new();
                    if j < *len {
                        sources.push((quote!(_p > #j), input(2 + j)));
                    }
                    sources.push((quote!(_p == #j), input(0)));
                    if j > 0 {
                        sources.push((quote!(true), input(1 + j)));
                    }
                    let arms: Vec<TokenStream> = sources
                        .iter()
                        .zip(counts)
                        .map(|((cond, src), &(numel, along))| {
                            let (numel, along) = (u(numel), u(along));
                            quote!(if #cond {
                                #rt::control::copy(#src, #rt::control::row_mut(&mut *#y, 0, #numel)?)?;
                                #along
                            })
                        })
                        .collect();
                    let slot = u(j);
                    quote!(_lengths[#slot] = #(#arms)else* else { 0 };)
                });
                let tail = if axes.iter().any(Option::is_some) {
                    quote!(_lengths)
                } else {
                    quote!(let _ = _lengths;)
                };
                quote! {{
                    let _p: usize = #ix::insert_position(#p, #n)?;
                    let mut _lengths = [0usize; #k];
                    #(#copies)*
                    #tail
                }}
            }
            Plan::Split { s, pieces, .. } => {
                let (o, l, n, k) = (u(s.outer), u(s.len), u(s.inner), u(*pieces));
                let split = input(1);
                let ys: Vec<TokenStream> = (0..*pieces)
                    .map(|j| {
                        io.outputs.get(j).cloned().flatten().unwrap_or_else(|| {
                            quote!(compile_error!("a SplitToSequence piece is not bound"))
                        })
                    })
                    .collect();
                quote! {{
                    let mut _lengths = [0usize; #k];
                    #ix::split_bounded(
                        #ix::Slices { outer: #o, len: #l, inner: #n },
                        #split, #x, &mut [#(#ys),*], &mut _lengths,
                    )?;
                    _lengths
                }}
            }
            Plan::Unique { s, sorted, count, bounded } => {
                let (o, l, n, c) = (u(s.outer), u(s.len), u(s.inner), u(*count));
                let out = |k: usize| match io.outputs.get(k).cloned().flatten() {
                    Some(v) => quote!(Some(#v)),
                    None => quote!(None),
                };
                let (idx, inv, cnt) = (out(1), out(2), out(3));
                let f = &io.scratch;
                if bounded.is_some() {
                    return quote! {
                        [#ix::unique_bounded(
                            #ix::Slices { outer: #o, len: #l, inner: #n }, #sorted, #c,
                            #x, #y, #f, #idx, #inv, #cnt,
                        )?]
                    };
                }
                quote! {
                    #ix::unique(
                        #ix::Slices { outer: #o, len: #l, inner: #n }, #sorted, #c,
                        #x, #y, #f, #idx, #inv, #cnt,
                    )?;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn scatter_elements_and_scatter() {
        let a = run(
            18,
            "g () => (float[1,5] y) <float[1,5] d = {1, 2, 3, 4, 5}, int64[1,2] i = {1, -2},
                float[1,2] u = {10, 20}> {
                y = ScatterElements <axis: int = 1> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 10.0, 3.0, 20.0, 5.0]);
        // Duplicate indices accumulate with reduction add.
        let a = run(
            18,
            "g () => (int32[3] y) <int32[3] d = {1, 2, 3}, int32[2] i = {1, 1}, int32[2] u = {4, 5}> {
                y = ScatterElements <reduction: string = \"add\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 11.0, 3.0]);
        let a = run(
            10,
            "g () => (float[2,2] y) <float[2,2] d = {0, 0, 0, 0}, int64[1,2] i = {1, 0},
                float[1,2] u = {7, 8}> {
                y = Scatter (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [0.0, 8.0, 7.0, 0.0]);
        let a = run(
            16,
            "g (float[3] d, int64[2] i, float[2] u) => (float[3] y) {
                y = ScatterElements <reduction: string = \"max\"> (d, i, u)
            }",
        );
        assert!(errors(&a)[0].contains("not defined at opset 16"), "{:?}", errors(&a));
        let a = run(
            18,
            "g (float[3] d, int64[2] i, float[3] u) => (float[3] y) { y = ScatterElements (d, i, u) }",
        );
        assert!(errors(&a)[0].contains("same shape"), "{:?}", errors(&a));
        let a = run(
            18,
            "g (bool[3] d, int64[2] i, bool[2] u) => (bool[3] y) {
                y = ScatterElements <reduction: string = \"mul\"> (d, i, u)
            }",
        );
        assert!(unsupported(&a)[0].contains("bool"), "{:?}", unsupported(&a));
    }

    #[test]
    fn scatter_nd_and_tensor_scatter() {
        let a = run(
            18,
            "g () => (float[4] y) <float[4] d = {1, 2, 3, 4}, int64[2,1] i = {1, 1}, float[2] u = {3, 5}> {
                y = ScatterND <reduction: string = \"mul\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 30.0, 3.0, 4.0]);
        let a = run(
            18,
            "g () => (int64[2,2] y) <int64[2,2] d = {1, 2, 3, 4}, int64[1,1] i = {-1}, int64[1,2] u = {8, 9}> {
                y = ScatterND <reduction: string = \"min\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 2.0, 3.0, 4.0]);
        let a = run(
            18,
            "g (float[2,2] d, int64[1,1] i, float[1,3] u) => (float[2,2] y) { y = ScatterND (d, i, u) }",
        );
        assert!(errors(&a)[0].contains("expected dims [1, 2]"), "{:?}", errors(&a));
        // Cache [1, 3, 1]; two rows written from row 2 wrap to row 0.
        let a = run(
            24,
            "g () => (float[1,3,1] y) <float[1,3,1] c = {1, 2, 3}, float[1,2,1] u = {8, 9}, int64[1] w = {2}> {
                y = TensorScatter <mode: string = \"circular\"> (c, u, w)
            }",
        );
        assert_eq!(value(&a, 0), [9.0, 2.0, 8.0]);
        let a = run(
            24,
            "g (float[2,3,4] c, float[2,4,4] u) => (float[2,3,4] y) { y = TensorScatter (c, u) }",
        );
        assert!(errors(&a)[0].contains("does not fit"), "{:?}", errors(&a));
    }

    #[test]
    fn gather_nd() {
        let a = run(
            13,
            "g () => (int32[2,2] y) <int32[2,2,2] d = {0, 1, 2, 3, 4, 5, 6, 7}, int64[2,1] i = {1, 0}> {
                y = GatherND <batch_dims: int = 1> (d, i)
            }",
        );
        assert_eq!(types(&a), [ty("int32[2, 2]")]);
        assert_eq!(value(&a, 0), [2.0, 3.0, 4.0, 5.0]);
        let a =
            run(13, "g (float[2,3,4] d, int64[5,2] i) => (float[5,4] y) { y = GatherND (d, i) }");
        assert_eq!(types(&a), [ty("float[5, 4]")]);
        let a = run(13, "g (float[2,3] d, int64[5,3] i) => (float[5] y) { y = GatherND (d, i) }");
        assert!(errors(&a)[0].contains("do not fit"), "{:?}", errors(&a));
    }

    #[test]
    fn einsum_plans() {
        // Implicit output "ik" of a matrix product.
        let a = run(
            12,
            "g () => (float[2,2] y) <float[2,2] a = {1, 2, 3, 4}, float[2,2] b = {5, 6, 7, 8}> {
                y = Einsum <equation: string = \"ij,jk\"> (a, b)
            }",
        );
        assert_eq!(value(&a, 0), [19.0, 22.0, 43.0, 50.0]);
        // A repeated label with an implicit output is a trace.
        let a = run(
            12,
            "g () => (double y) <double[2,2] a = {1, 2, 3, 4}> { y = Einsum <equation: string = \"ii\"> (a) }",
        );
        assert_eq!(value(&a, 0), [5.0]);
        let a = run(
            12,
            "g () => (int64[2,2] y) <int64[2,2] a = {1, 2, 3, 4}> {
                y = Einsum <equation: string = \"ij -> ji\"> (a)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 3.0, 2.0, 4.0]);
        // Batch diagonal with an ellipsis; a broadcast ellipsis in a product.
        let a = run(
            12,
            "g (double[3,5,5] x) => (double[3,5] y) { y = Einsum <equation: string = \"...ii->...i\"> (x) }",
        );
        assert_eq!(types(&a), [ty("double[3, 5]")]);
        let a = run(
            12,
            "g (float[2,1,3,4] a, float[5,4,6] b) => (float[2,5,3,6] y) {
                y = Einsum <equation: string = \"...ij,...jk->...ik\"> (a, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 5, 3, 6]")]);
        let a = run(
            12,
            "g (float[2,3] a, float[4,5] b) => (float[2,5] y) { y = Einsum <equation: string = \"ij,jk->ik\"> (a, b) }",
        );
        assert!(errors(&a)[0].contains("both 3 and 4"), "{:?}", errors(&a));
        let a = run(
            12,
            "g (float[2,3] a) => (float[2] y) { y = Einsum <equation: string = \"ij->iz\"> (a) }",
        );
        assert!(errors(&a)[0].contains("'z' is in no input"), "{:?}", errors(&a));
    }

    #[test]
    fn cumprod_bitcast_reverse_sequence_det() {
        let a = run(
            26,
            "g () => (int32[2,3] y) <int32[2,3] x = {1, 2, 3, 4, 5, 6}, int32 ax = {1}> {
                y = CumProd <exclusive: int = 1, reverse: int = 1> (x, ax)
            }",
        );
        assert_eq!(value(&a, 0), [6.0, 3.0, 1.0, 30.0, 6.0, 1.0]);
        let a = run(26, "g (float[3] x, int64 ax) => (float[3] y) { y = CumProd (x, ax) }");
        assert_eq!(types(&a), [ty("float[3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            26,
            "g () => (int32[2] y) <float[2] x = {1, -2}> { y = BitCast <to: int = 6> (x) }",
        );
        assert_eq!(value(&a, 0), [1_065_353_216.0, -1_073_741_824.0]);
        let a = run(26, "g (float[2] x) => (int64[2] y) { y = BitCast <to: int = 7> (x) }");
        assert!(errors(&a)[0].contains("width"), "{:?}", errors(&a));
        let a = run(
            10,
            "g () => (float[2,3] y) <float[2,3] x = {1, 2, 3, 4, 5, 6}, int64[2] l = {2, 3}> {
                y = ReverseSequence <batch_axis: int = 0, time_axis: int = 1> (x, l)
            }",
        );
        assert_eq!(value(&a, 0), [2.0, 1.0, 3.0, 6.0, 5.0, 4.0]);
        let a = run(
            10,
            "g (float[2,3] x, int64[2] l) => (float[2,3] y) { y = ReverseSequence (x, l) }",
        );
        assert!(errors(&a)[0].contains("int64[3]"), "{:?}", errors(&a));
        let a = run(
            22,
            "g () => (double[2] y) <double[2,2,2] x = {1, 2, 3, 4, 2, 0, 0, 3}> { y = Det (x) }",
        );
        let v = value(&a, 0);
        assert!((v[0] + 2.0).abs() < 1e-12 && (v[1] - 6.0).abs() < 1e-12, "{v:?}");
        let a = run(22, "g (float[2,3] x) => (float y) { y = Det (x) }");
        assert!(errors(&a)[0].contains("square"), "{:?}", errors(&a));
    }

    #[test]
    fn data_dependent_lengths() {
        let a = run(13, "g () => (int64[2,2] y) <bool[2,2] x = {1, 0, 0, 1}> { y = NonZero (x) }");
        assert_eq!(value(&a, 0), [0.0, 1.0, 0.0, 1.0]);
        let a = run(13, "g (float[2,2] x) => (int64[2,3] y) { y = NonZero (x) }");
        assert_eq!(types(&a), [ty("int64[2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(13, "g (float[2,2] x) => (int64[2,?] y) { y = NonZero (x) }");
        assert!(unsupported(&a)[0].contains("does not declare"), "{:?}", unsupported(&a));
        // A constant condition fixes the length; the declared one is not needed.
        let a = run(
            11,
            "g (float[3,2] x) => (float[3,?] y) <bool[2] c = {0, 1}> { y = Compress <axis: int = 1> (x, c) }",
        );
        assert_eq!(types(&a), [ty("float[3, 1]")]);
        let a = run(
            11,
            "g () => (int32[2] y) <int32[2,2] x = {1, 2, 3, 4}, bool[3] c = {1, 0, 1}> { y = Compress (x, c) }",
        );
        assert_eq!(value(&a, 0), [1.0, 3.0]);
        let a = run(
            11,
            "g (float[3,2] x, bool[3] c) => (float[2,2] y) { y = Compress <axis: int = 0> (x, c) }",
        );
        assert_eq!(types(&a), [ty("float[2, 2]")]);
        let a = run(
            11,
            "g (float[3,2] x, bool[3] c) => (float[4,2] y) { y = Compress <axis: int = 0> (x, c) }",
        );
        assert!(errors(&a)[0].contains("the condition has 3"), "{:?}", errors(&a));
        let a = run(
            11,
            "g (float[1,3,4] b, float[1,1,3] s, int64[1] m) => (int64[2,3] y) { y = NonMaxSuppression (b, s, m) }",
        );
        assert_eq!(types(&a), [ty("int64[2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (float[1,3,4] b, float[1,1,2] s) => (int64[2,3] y) { y = NonMaxSuppression (b, s) }",
        );
        assert!(errors(&a)[0].contains("do not match"), "{:?}", errors(&a));
        // Undeclared lengths: every output gets its capacity (all slices
        // distinct); the lengths are reported at run time.
        let a = run(11, "g (float[4] x) => (float[?] y) { y = Unique (x) }");
        assert_eq!(types(&a), [ty("float[4]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (float[3,4] x) => (float[3,?] y, int64[?] i, int64[4] v, int64[?] c) {
                y, i, v, c = Unique <axis: int = 1> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[3, 4]"), ty("int64[4]"), ty("int64[4]"), ty("int64[4]")]);
        let a = run(
            11,
            "g (float[3,4] x) => (float[3,2] y, int64[2] i, int64[4] v, int64[2] c) {
                y, i, v, c = Unique <axis: int = -1, sorted: int = 0> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[3, 2]"), ty("int64[2]"), ty("int64[4]"), ty("int64[2]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(11, "g (int32[4] x) => (int32[3] y, int64[2] c) { y, , , c = Unique (x) }");
        assert!(errors(&a)[0].contains("Y has 3 entries"), "{:?}", errors(&a));
    }

    #[test]
    fn a_data_sized_value_read_by_another_node_is_unsupported() {
        let a = run(11, "g (float[4] x) => (float[?] y) { u = Unique (x)\n y = Neg (u) }");
        let p: Vec<String> = a.problems().iter().map(|d| d.message.clone()).collect();
        assert!(
            p.iter().any(|m| m.starts_with("not supported:") && m.contains("only a graph output")),
            "{p:?}"
        );
        let a = run(11, "g (float[4] x) => (float[?] y) { y = Unique (x) }");
        assert!(a.problems().is_empty());
    }
}
