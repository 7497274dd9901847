//! Fused epilogues: what a product (Gemm, MatMul), a convolution or a
//! BatchNormalization applies after its sums once the pipeline fused it
//! (`Lowering`'s `Epilogue`: a residual `Add`, then an activation), on the
//! host when folding and in generated code.

use super::host::HostElem;
use super::{NodeCx, OpResult, invalid};
use crate::emit::lit;
use crate::ir::{ElemType, Lowering};
use onnx_codegen_runtime::elementwise::Unary;
use proc_macro2::TokenStream;
use quote::quote;

/// Where the product reads a residual fused into its epilogue (f32 only, of
/// the output's dims), after checking it: its position among the reads.
pub(in crate::ops) fn residual(
    cx: &NodeCx<'_>,
    elem: ElemType,
    dims: &[usize],
) -> OpResult<Option<usize>> {
    let Some(v) = cx.lowering().and_then(Lowering::epilogue).and_then(|e| e.residual) else {
        return Ok(None);
    };
    let (at, t) = cx.operand(v)?;
    if elem != ElemType::Float || t.elem != elem || t.dims != dims {
        return invalid(format!(
            "a fused residual {t} must be a float tensor of the product's dims {dims:?}"
        ));
    }
    Ok(Some(at))
}

/// The `gemm::Post` of a fused f32 product in generated code: the residual
/// `r`, then `act` (a smooth one, GELU, through the same `vmath` routine
/// as the standalone op).
pub(in crate::ops) fn post_tokens(
    act: Option<Unary<f64>>,
    r: Option<&TokenStream>,
    y: &impl quote::ToTokens,
    rt: &TokenStream,
) -> (TokenStream, TokenStream) {
    let none = quote!(#rt::gemm::Activation::None);
    let none_text = none.to_string();
    let (act, smooth, after) = match act {
        Some(Unary::Gelu) => (none, quote!(Some(#rt::gemm::Smooth::Gelu)), TokenStream::new()),
        Some(Unary::GeluTanh) => {
            (none, quote!(Some(#rt::gemm::Smooth::GeluTanh)), TokenStream::new())
        }
        Some(Unary::Silu) => (none, quote!(Some(#rt::gemm::Smooth::Silu)), TokenStream::new()),
        Some(Unary::HardSwish) => {
            (none, quote!(Some(#rt::gemm::Smooth::HardSwish)), TokenStream::new())
        }
        other => {
            let (a, after) = fused_epilogue(other, ElemType::Float, y, rt);
            (a, quote!(None), after)
        }
    };
    let plain_smooth = smooth.to_string() == "None";
    let post = match r {
        None if plain_smooth && act.to_string() == none_text => {
            quote!(&#rt::gemm::Post::NONE)
        }
        None if plain_smooth => quote!(&#rt::gemm::Post::act(#act)),
        None => quote!(&#rt::gemm::Post { residual: None, act: #act, smooth: #smooth }),
        Some(r) => quote!(&#rt::gemm::Post { residual: Some(#r), act: #act, smooth: #smooth }),
    };
    (post, after)
}

/// `y[i] += r[i]`, then the activation: what a fused residual and
/// activation do, on the exact kernels' result (constant folding; also
/// Conv's and BatchNormalization's).
pub(in crate::ops) fn finish_host<T: onnx_codegen_runtime::num::Float + HostElem>(
    y: &mut [T],
    r: Option<&[T]>,
    act: Option<Unary<f64>>,
) {
    if let Some(r) = r {
        for (v, x) in y.iter_mut().zip(r) {
            *v = v.add(*x);
        }
    }
    if let Some(op) = act {
        onnx_codegen_runtime::elementwise::unary_in_place(op.map(T::from_f64), y);
    }
}

/// The generated form of an activation fused by `passes::fuse`: the
/// `Activation` the f32 fast kernels apply in their epilogue, and the
/// statement to run after the call when they cannot (other element types):
/// the standalone op in place on `y`.
pub(in crate::ops) fn fused_epilogue(
    act: Option<Unary<f64>>,
    elem: ElemType,
    y: &impl quote::ToTokens,
    rt: &TokenStream,
) -> (TokenStream, TokenStream) {
    let path = quote!(#rt::conv::Activation);
    let f = |v: f64| lit::float(v, ElemType::Float);
    match (act, elem) {
        (None, _) => (quote!(#path::None), TokenStream::new()),
        (Some(Unary::Relu), ElemType::Float) => (quote!(#path::Relu), TokenStream::new()),
        (Some(Unary::LeakyRelu { alpha }), ElemType::Float) => {
            let a = f(alpha);
            (quote!(#path::LeakyRelu { alpha: #a }), TokenStream::new())
        }
        (Some(Unary::Clip { min, max }), ElemType::Float) => {
            let (a, b) = (f(min), f(max));
            (quote!(#path::Clip { min: #a, max: #b }), TokenStream::new())
        }
        (Some(op), _) => {
            let op = super::elementwise::unary_tokens(op, elem, rt);
            (quote!(#path::None), quote!(#rt::elementwise::unary_in_place(#op, #y);))
        }
    }
}
