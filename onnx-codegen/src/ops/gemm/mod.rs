//! Matrix products: Gemm and MatMul (batched, broadcasting, with numpy's rules
//! for 1-D operands).
//!
//! - `gemm_op`: ONNX Gemm (2-D, transposes, `alpha`, `beta * C`);
//! - `matmul`: ONNX MatMul, with its batch plan (`MatMulPlan`, shared with
//!   the integer products of `ops::quant`);
//! - here: what both read from the node's lowering (B packed in strips)
//!   and how generated code names their weights. Their fused epilogue
//!   (residual, activation) is `ops::epilogue`, shared with Conv.

mod gemm_op;
mod matmul;

pub(super) use matmul::{MatMulPlan, matmul_plan};

use super::host::HostElem;
use super::{EvalError, HostTensor, NodeCx, OpResult, OpRule, invalid, unsupported};
use crate::ir::lowering::ProductLowering;
use crate::ir::{ElemType, Lowering, TensorType};
use onnx_codegen_runtime::gemm as rt_gemm;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is a matrix product.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Gemm" => Some(&gemm_op::GemmRule),
        "MatMul" => Some(&matmul::MatMulRule),
        _ => None,
    }
}

fn numeric(cx: &NodeCx<'_>, t: &TensorType) -> OpResult<()> {
    match t.elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Float16
        | ElemType::Bfloat16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint32
        | ElemType::Uint64 => Ok(()),
        other => unsupported(format!("{} on {other} tensors", cx.node.op.op_type)),
    }
}

fn host<T: HostElem>(t: Option<&HostTensor>) -> Result<&[T], EvalError> {
    t.and_then(|t| t.get::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

fn host_mut<T: HostElem>(t: Option<&mut HostTensor>) -> Result<&mut [T], EvalError> {
    t.and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

/// The product's lowering (what the rewriting passes folded into it).
fn product_lowering<'a>(cx: &NodeCx<'a>) -> OpResult<Option<&'a ProductLowering>> {
    match cx.lowering() {
        None => Ok(None),
        Some(Lowering::Product(p)) => Ok(Some(p)),
        Some(other) => invalid(format!("a matrix product cannot run as {other:?}")),
    }
}

/// Where the product reads its B as laid out in strips by the runtime's
/// `gemm::pack_b` (f32 only), after checking its length: the position of
/// the strips among the reads.
fn packed_b(cx: &NodeCx<'_>, elem: ElemType, k: usize, n: usize) -> OpResult<Option<usize>> {
    let Some(v) = product_lowering(cx)?.and_then(|p| p.packed_b) else {
        return Ok(None);
    };
    let (at, t) = cx.operand(v)?;
    let len = rt_gemm::packed_b_len(k, n);
    if elem != ElemType::Float || t.elem != elem || len.is_none_or(|l| t.dims != [l]) {
        return invalid(format!("a packed B {t} does not hold a float [{k}, {n}] in strips"));
    }
    Ok(Some(at))
}

/// `rt::gemm::Weights` in generated code: the strips when the product has
/// them, else B as given.
fn weights_tokens(
    strips: Option<&TokenStream>,
    b: &Option<TokenStream>,
    rt: &TokenStream,
) -> TokenStream {
    match strips {
        Some(s) => quote!(#rt::gemm::Weights::Strips(#s)),
        None => quote!(#rt::gemm::Weights::Dense(#b)),
    }
}
