//! Normalisations and reductions:
//! - BatchNormalization (inference, and training mode with its running
//!   statistics), LayerNormalization, InstanceNormalization,
//!   GroupNormalization, LpNormalization, MeanVarianceNormalization;
//! - ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
//!   ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare;
//! - ArgMax, ArgMin.
//!
//! The float kernels run on `f32` and `f64`; the reductions that make sense
//! on integers (sum, mean, max, min, product, L1, sum of squares) and ArgMax /
//! ArgMin run on every integer type too, and ReduceMax / ReduceMin on
//! booleans. Everything else is reported as unsupported.
//!
//! `normalize.rs` holds every normalisation except
//! MeanVarianceNormalization; `reduce.rs` the reductions,
//! MeanVarianceNormalization (a mode of the reduction kernel) and ArgMax /
//! ArgMin; each operator with its rule, kernel and emission. This module
//! registers them and holds what they share.

use super::host::HostElem;
use super::{EvalError, HostTensor, NodeCx, OpError, OpResult, OpRule, invalid, unsupported};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::norm::{AxisShape, Nchw};
use proc_macro2::TokenStream;
use quote::quote;

mod normalize;
mod reduce;

use normalize::{BatchNormRule, GroupNormRule, InstanceNormRule, LayerNormRule, LpNormRule};
use reduce::{ArgRule, MvnRule, ReduceRule};

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "BatchNormalization" => Some(&BatchNormRule),
        "LayerNormalization" => Some(&LayerNormRule),
        "InstanceNormalization" => Some(&InstanceNormRule),
        "GroupNormalization" => Some(&GroupNormRule),
        "LpNormalization" => Some(&LpNormRule),
        "MeanVarianceNormalization" => Some(&MvnRule),
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => Some(&ReduceRule),
        "ArgMax" | "ArgMin" => Some(&ArgRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

/// `x` must be `f32` or `f64`: the float kernels' types.
fn float_input<'a>(cx: &NodeCx<'a>, i: usize) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    match t.elem {
        ElemType::Float | ElemType::Double => Ok(t),
        other => unsupported(format!(
            "{} on {other} tensors (the runtime kernel handles float and double)",
            op_name(cx)
        )),
    }
}

/// Input `i` must have element type `elem`; mixed precisions (allowed by
/// some versions) have no kernel.
fn same_elem<'a>(
    cx: &NodeCx<'a>,
    i: usize,
    elem: ElemType,
    what: &str,
) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if t.elem != elem {
        return unsupported(format!(
            "{} with {what} of type {} and X of type {elem} (mixed precisions have no kernel)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

/// Input `i` must hold exactly `n` elements.
fn numel_is(cx: &NodeCx<'_>, t: &TensorType, n: usize, what: &str) -> OpResult<()> {
    if t.numel() != Some(n) {
        return invalid(format!("{}'s {what} is {t}; {n} elements were expected", op_name(cx)));
    }
    Ok(())
}

/// Whether output `k` of the node is present.
fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

/// Keeps one type per output the node declares.
fn declared(cx: &NodeCx<'_>, mut types: Vec<TensorType>) -> Vec<TensorType> {
    types.truncate(cx.node.outputs.len().max(1));
    types
}

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

/// `[N, C, spatial...]` as the channel kernels see it (rank 2 or more).
fn nchw(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<Nchw> {
    if dims.len() < 2 {
        return invalid(format!("{} needs an input of rank 2 or more, got {dims:?}", op_name(cx)));
    }
    Ok(Nchw { batch: dims[0], channels: dims[1], spatial: product(&dims[2..])? })
}

fn elem_of(outputs: &[TensorType], fallback: ElemType) -> ElemType {
    outputs.first().map_or(fallback, |t| t.elem)
}

/// A host buffer of another type than the kernel's: the buffers do not
/// match what the rule planned.
fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())
}

fn host_out<T: HostElem>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    outputs.get_mut(k).and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())
}

/// Output 0 and the optional outputs after it, as host buffers.
type HostOutputs<'o, T> = (&'o mut [T], Vec<Option<&'o mut [T]>>);

/// The first output and, for each of `present`, the output at that index.
fn split_outputs<'o, T: HostElem>(
    outputs: &'o mut [HostTensor],
    present: &[bool],
) -> Result<HostOutputs<'o, T>, EvalError> {
    let mut it = outputs.iter_mut();
    let y = it.next().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    let mut rest = Vec::with_capacity(present.len());
    for &p in present {
        let t = it.next();
        rest.push(if p {
            Some(t.and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?)
        } else {
            None
        });
    }
    Ok((y, rest))
}

fn nchw_tokens(s: Nchw, rt: &TokenStream) -> TokenStream {
    let (n, c, sp) =
        (lit::usize_lit(s.batch), lit::usize_lit(s.channels), lit::usize_lit(s.spatial));
    quote!(#rt::norm::Nchw { batch: #n, channels: #c, spatial: #sp })
}

fn axis_shape_tokens(s: AxisShape, rt: &TokenStream) -> TokenStream {
    let (o, a, i) = (lit::usize_lit(s.outer), lit::usize_lit(s.axis), lit::usize_lit(s.inner));
    quote!(#rt::norm::AxisShape { outer: #o, axis: #a, inner: #i })
}

/// `Some(expr)` or `None` for an optional buffer.
fn opt(e: Option<&Option<TokenStream>>) -> TokenStream {
    match e {
        Some(Some(t)) => quote!(Some(#t)),
        _ => quote!(None),
    }
}

fn bools(values: &[bool]) -> TokenStream {
    quote!(&[#(#values),*])
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, value};

    #[test]
    fn lp_and_mean_variance_normalisation() {
        let a = run(
            22,
            "g () => (float[2,2] y) <float[2,2] x = {3,4,0,-2}> { y = LpNormalization <p: int = 1, axis: int = 1> (x) }",
        );
        assert_eq!(value(&a, 0), [f64::from(3.0f32 / 7.0), f64::from(4.0f32 / 7.0), 0.0, -1.0]);
        let a =
            run(22, "g (float[2,2] x) => (float[2,2] y) { y = LpNormalization <p: int = 3> (x) }");
        assert!(errors(&a)[0].contains("only 1 and 2"), "{:?}", errors(&a));
        let a = run(
            13,
            "g (float[2,3,4,5] x) => (float[2,3,4,5] y) { y = MeanVarianceNormalization (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4, 5]")]);
        assert!(a.inferred.is_complete());
        // The default axes [0, 2, 3] do not exist in a rank-2 input.
        let a = run(13, "g (float[2,3] x) => (float[2,3] y) { y = MeanVarianceNormalization (x) }");
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
    }
}
