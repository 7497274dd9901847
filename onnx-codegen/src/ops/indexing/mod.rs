//! Indexing and data-dependent operators: ScatterElements, Scatter,
//! ScatterND, TensorScatter, GatherND, Einsum, CumProd, BitCast,
//! ReverseSequence, Det, NonZero, Compress, NonMaxSuppression, Unique, and
//! SplitToSequence with sizes (and SequenceInsert, SequenceErase and
//! SequenceAt at a position) known only at run time.
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
//!
//! The plans (each operator's checks and output types, at generation time)
//! are filed by kind: `scatter.rs` (ScatterElements, Scatter, ScatterND,
//! TensorScatter, GatherND), `einsum.rs`, `data_sized.rs` (NonZero,
//! Compress, NonMaxSuppression, Unique, SplitToSequence, SequenceInsert),
//! and CumProd, BitCast, ReverseSequence and Det here; `kernel.rs` runs
//! and emits every plan. This module registers the operators and holds
//! what they share.

use super::host::{Data, HostData};
use super::{
    EvalError, HostTensor, Lowered, NodeCx, OpError, OpResult, OpRule, axis, invalid, is_num,
    unsupported,
};
use crate::ir::{ElemType, Tensor, TensorType};
use onnx_codegen_runtime::indexing::{Nms, Reduction, Slices};

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

mod data_sized;
mod einsum;
mod kernel;
mod scatter;

use data_sized::{
    plan_compress, plan_nms, plan_non_zero, plan_sequence_at, plan_sequence_map,
    plan_split_to_sequence, plan_unique,
};
use einsum::plan_einsum;
use kernel::IndexKernel;
use scatter::{plan_gather_nd, plan_scatter_elements, plan_scatter_nd, plan_tensor_scatter};

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
        "SequenceErase" => OpKind::SequenceErase,
        "SequenceAt" => OpKind::SequenceAt,
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
    SequenceErase,
    SequenceAt,
}

static RULES: [&dyn OpRule; 18] = [
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
    &IndexRule(OpKind::SequenceErase),
    &IndexRule(OpKind::SequenceAt),
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
    /// SequenceInsert (`source`: the inserted tensor's index among the
    /// sources) or SequenceErase at a run-time position, on the map of a
    /// sequence of `len` elements (see `data_sized::plan_sequence_map`).
    SequenceMap {
        len: usize,
        source: Option<i64>,
    },
    /// SequenceAt at a run-time position in a sequence of `len` elements:
    /// per source, its element count and length along `axis`, the axis
    /// along which the sources differ (the output is then data-sized).
    SequenceAt {
        len: usize,
        sources: Vec<(usize, usize)>,
        axis: Option<usize>,
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
        OpKind::SequenceInsert => plan_sequence_map(cx, true),
        OpKind::SequenceErase => plan_sequence_map(cx, false),
        OpKind::SequenceAt => plan_sequence_at(cx),
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

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

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
}
