//! Attention operators: `Attention` (opsets 23, 24, 25), the
//! `ai.onnx.preview` `FlexAttention` (its `score_mod` / `prob_mod`
//! subgraphs compiled inline, as control-flow bodies are),
//! `RotaryEmbedding`, `SwiGLU`, `CausalConvWithState` and `LinearAttention`.
//!
//! The kernels run on `f32`, `f64`, `f16` and `bf16`, computing in `f32`
//! (`f64` for `f64`) and rounding once per output element; the Attention
//! mask may be boolean or of any of those float types.
//!
//! One file per operator: `sdpa.rs` (`Attention`, scaled dot-product
//! attention), `flex.rs` (`FlexAttention`), `rotary.rs`
//! (`RotaryEmbedding`), `swiglu.rs`, `causal_conv.rs`
//! (`CausalConvWithState`) and `linear.rs` (`LinearAttention`), each with
//! its rule, its kernel and the code it emits. This module registers them
//! and holds what they share: input checks, head counts, host buffers.

use super::host::HostElem;
use super::{EvalError, HostTensor, NodeCx, OpError, OpResult, OpRule, invalid, unsupported};
use crate::ir::{AttrValue, ElemType, TensorType};
use proc_macro2::TokenStream;
use quote::quote;

/// Calls `$f::<T>(args)` with `T` the host type of a float element type
/// (defined before the operators' modules, which use it).
macro_rules! by_real_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float => $f::<f32>($($arg),*),
            ElemType::Double => $f::<f64>($($arg),*),
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            other => Err(EvalError::Type(other)),
        }
    };
}

mod causal_conv;
mod flex;
mod linear;
mod rotary;
mod sdpa;
mod swiglu;

use causal_conv::CausalConvRule;
use flex::FlexAttentionRule;
use linear::LinearAttentionRule;
use rotary::RotaryRule;
use sdpa::AttentionRule;
use swiglu::SwiGluRule;

/// The rule for `op_type` in the default domain, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Attention" => Some(&AttentionRule),
        "RotaryEmbedding" => Some(&RotaryRule),
        "SwiGLU" => Some(&SwiGluRule),
        "CausalConvWithState" => Some(&CausalConvRule),
        "LinearAttention" => Some(&LinearAttentionRule),
        _ => None,
    }
}

/// The rule for `op_type` in the `ai.onnx.preview` domain.
pub fn preview_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "FlexAttention" => Some(&FlexAttentionRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

fn is_real(e: ElemType) -> bool {
    matches!(e, ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16)
}

/// The element type the kernels compute in for `elem`.
fn acc_elem(elem: ElemType) -> ElemType {
    if elem == ElemType::Double { ElemType::Double } else { ElemType::Float }
}

/// Input `i` as a float tensor of the kernels' types.
fn real_input<'a>(cx: &NodeCx<'a>, i: usize, what: &str) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if !is_real(t.elem) {
        return unsupported(format!(
            "{} with {what} of type {} (the kernels handle float, double, float16 and bfloat16)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

/// Input `i` must have element type `elem`.
fn same_elem<'a>(
    cx: &NodeCx<'a>,
    i: usize,
    elem: ElemType,
    what: &str,
) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if t.elem != elem {
        return unsupported(format!(
            "{} with {what} of type {} and the first input of type {elem} (mixed precisions have \
             no kernel)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

fn has_attr(cx: &NodeCx<'_>, name: &str) -> bool {
    cx.node.attr(name).is_some()
}

fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())
}

fn host_opt<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<Option<&'a [T]>, EvalError> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(t) => t.get::<T>().map(Some).ok_or(wrong_buffer()),
    }
}
fn opt_tokens(e: Option<&Option<TokenStream>>) -> TokenStream {
    match e {
        Some(Some(t)) => quote!(Some(#t)),
        _ => quote!(None),
    }
}

fn dims4(cx: &NodeCx<'_>, t: &TensorType, what: &str) -> OpResult<[usize; 4]> {
    <[usize; 4]>::try_from(t.dims.as_slice())
        .map_err(|_| OpError::Invalid(format!("{}'s {what} {t} should be of rank 4", op_name(cx))))
}

/// A positive head count from attribute `name`.
fn heads_attr(cx: &NodeCx<'_>, name: &str) -> OpResult<usize> {
    match cx.node.attr(name) {
        Some(AttrValue::Int(v)) if *v > 0 => Ok(usize::try_from(*v).unwrap_or(0)),
        Some(_) => invalid(format!("{}'s {name} must be a positive integer", op_name(cx))),
        None => invalid(format!("{} with 3-D inputs needs the attribute {name}", op_name(cx))),
    }
}

/// `hidden` split into `heads` heads.
fn split_heads(cx: &NodeCx<'_>, hidden: usize, heads: usize, what: &str) -> OpResult<usize> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return invalid(format!(
            "{}'s {what} hidden size {hidden} is not a multiple of its {heads} heads",
            op_name(cx)
        ));
    }
    Ok(hidden / heads)
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported};

    #[test]
    fn rotary_swiglu_conv_linear_shapes() {
        let a = run(
            28,
            "g (float[2,3,32] x, float[50,4] c, float[50,4] s, int64[2,3] p, float[2,4] a,
                float[2,4] b, float[2,4,8] i, float[4,1,3] w)
              => (float[2,3,32] r, float[2,4] y, float[2,4,8] o, float[2,4,2] st) {
                r = RotaryEmbedding <num_heads: int = 4> (x, c, s, p)
                y = SwiGLU <alpha: float = 1.5> (a, b)
                o, st = CausalConvWithState <activation: string = \"silu\"> (i, w)
            }",
        );
        assert_eq!(
            types(&a),
            [ty("float[2, 3, 32]"), ty("float[2, 4]"), ty("float[2, 4, 8]"), ty("float[2, 4, 2]")]
        );
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        let a = run(
            27,
            "g (float[2,4,64] q, float[2,4,32] k, float[2,4,32] v, float[2,4,4] d, float[2,4,1] b)
              => (float[2,4,64] o, float[2,4,8,8] s) {
                o, s = LinearAttention <q_num_heads: int = 8, kv_num_heads: int = 4> (q, k, v, , d, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 4, 64]"), ty("float[2, 4, 8, 8]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
    }

    #[test]
    fn rotary_swiglu_linear_errors() {
        let a = run(
            23,
            "g (float[1,1,2,6] x, float[4,2] c, float[4,2] s, int64[1,2] p) => (float[1,1,2,6] r) {
                r = RotaryEmbedding (x, c, s, p)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("cos_cache")), "{:?}", errors(&a));
        let a = run(
            28,
            "g (float[2,4] a, float[4,2] b) => (float[2,4] y) {
                y = SwiGLU (a, b)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("same shape")), "{:?}", errors(&a));
        let a = run(
            27,
            "g (float[1,2,8] q, float[1,2,8] k, float[1,2,8] v) => (float[1,2,8] o, float[1,2,4,4] s) {
                o, s = LinearAttention <q_num_heads: int = 2, kv_num_heads: int = 2> (q, k, v)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("needs decay")), "{:?}", errors(&a));
    }
}
