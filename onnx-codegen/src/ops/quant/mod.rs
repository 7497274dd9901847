//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
//! MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
//!
//! The runtime kernels (`runtime::quant`) work on integers: zero points are
//! subtracted and products summed in integers; the float steps (division by
//! the scale, multiplication by the scale, the requantization multiplier) are
//! rounded to the precision the ONNX reference computes them in.
//!
//! Quantized types: uint8, int8, uint16, int16 (and int32 for
//! DequantizeLinear's input), and the packed low-precision types (float8
//! e4m3fn/e4m3fnuz/e5m2/e5m2fnuz, float4e2m1, int4/uint4, int2/uint2) whose
//! encodings are the runtime's `cast::LowBit`. Float6 is reported
//! unsupported, and so is a float8e8m0 scale. Scales: float32, float16,
//! bfloat16 (and int32 where the spec allows it for QuantizeLinear).
//! Low-precision tensors have no host form, so those nodes are not folded.
//!
//! `quantize.rs` holds QuantizeLinear, DequantizeLinear and
//! DynamicQuantizeLinear; `integer_matmul.rs` MatMulInteger and
//! QLinearMatMul; `integer_conv.rs` ConvInteger and QLinearConv: each
//! operator with its rule, kernel and emission. This module registers them
//! and holds what they share: the type dispatch, the checks of scales and
//! zero points, the host buffers and tokens.

use super::host::HostElem;
use super::{EvalError, HostTensor, Io, NodeCx, OpResult, OpRule, invalid, unsupported};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::cast::LowBit;
use onnx_codegen_runtime::quant::{QuantAxis, Work};
use proc_macro2::TokenStream;
use quote::quote;

/// Calls `$body` with `$T` bound to the Rust type of a quantized integer type.
macro_rules! q_int {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            ElemType::Uint8 => {
                type $T = u8;
                $body
            }
            ElemType::Int8 => {
                type $T = i8;
                $body
            }
            ElemType::Uint16 => {
                type $T = u16;
                $body
            }
            ElemType::Int16 => {
                type $T = i16;
                $body
            }
            ElemType::Int32 => {
                type $T = i32;
                $body
            }
            other => Err(EvalError::Type(other)),
        }
    };
}

/// Like [`q_int!`] for the 8-bit types of the integer products.
macro_rules! q_int8 {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            ElemType::Uint8 => {
                type $T = u8;
                $body
            }
            ElemType::Int8 => {
                type $T = i8;
                $body
            }
            other => Err(EvalError::Type(other)),
        }
    };
}

/// Like [`q_int!`] for the float types of scales and dequantized values.
macro_rules! q_float {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            ElemType::Float => {
                type $T = f32;
                $body
            }
            ElemType::Float16 => {
                type $T = f16;
                $body
            }
            ElemType::Bfloat16 => {
                type $T = bf16;
                $body
            }
            other => Err(EvalError::Type(other)),
        }
    };
}

/// Like [`q_float!`], also accepting int32 (QuantizeLinear's input and scale).
macro_rules! q_real {
    ($elem:expr, $T:ident => $body:expr) => {
        match $elem {
            ElemType::Int32 => {
                type $T = i32;
                $body
            }
            other => q_float!(other, $T => $body),
        }
    };
}

mod int8;
mod integer_conv;
mod integer_matmul;
mod lookup;
mod quantize;
mod requantized;

use integer_conv::{ConvIntegerRule, QLinearConvRule};
use integer_matmul::{MatMulIntegerRule, QLinearMatMulRule};
pub use lookup::LookupRule;
use quantize::{DequantizeRule, DynamicQuantizeRule, QuantizeRule};
pub use requantized::RequantizedRule;

/// The rule for `op_type`, if it is a quantization operator.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "QuantizeLinear" => Some(&QuantizeRule),
        "DequantizeLinear" => Some(&DequantizeRule),
        "DynamicQuantizeLinear" => Some(&DynamicQuantizeRule),
        "MatMulInteger" => Some(&MatMulIntegerRule),
        "QLinearMatMul" => Some(&QLinearMatMulRule),
        "ConvInteger" => Some(&ConvIntegerRule),
        "QLinearConv" => Some(&QLinearConvRule),
        _ => None,
    }
}

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    match inputs.get(i).copied().flatten() {
        Some(t) => t.get::<T>().ok_or(EvalError::Type(t.ty.elem)),
        None => Err(EvalError::Type(ElemType::Float)),
    }
}

fn host_opt<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<Option<&'a [T]>, EvalError> {
    match inputs.get(i).copied().flatten() {
        Some(t) => t.get::<T>().map(Some).ok_or(EvalError::Type(t.ty.elem)),
        None => Ok(None),
    }
}

fn host_out<T: HostElem>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    match outputs.get_mut(k) {
        Some(t) => {
            let elem = t.ty.elem;
            t.get_mut::<T>().ok_or(EvalError::Type(elem))
        }
        None => Err(EvalError::Type(ElemType::Float)),
    }
}

/// A fixed-point scale of the int8 kernels as a literal of generated code.
fn scale_tokens(s: &onnx_codegen_runtime::int8::Scale, rt: &TokenStream) -> TokenStream {
    let (m, sh) = (s.mult, s.shift);
    quote!(#rt::int8::Scale { mult: #m, shift: #sh })
}

/// An optional input's buffer expression in generated code.
fn opt_tokens(io: &Io, i: usize) -> TokenStream {
    match io.inputs.get(i) {
        Some(Some(t)) => quote!(Some(#t)),
        _ => quote!(None),
    }
}

fn in_tokens(io: &Io, i: usize) -> TokenStream {
    match io.inputs.get(i) {
        Some(Some(t)) => t.clone(),
        _ => quote!(&[]),
    }
}

fn out_tokens(io: &Io, k: usize) -> TokenStream {
    match io.outputs.get(k) {
        Some(Some(t)) => t.clone(),
        _ => quote!(&mut []),
    }
}

/// Checks a quantized element type the kernels support.
fn quantized(cx: &NodeCx<'_>, elem: ElemType, what: &str, allow_i32: bool) -> OpResult<()> {
    match elem {
        ElemType::Uint8 | ElemType::Int8 | ElemType::Uint16 | ElemType::Int16 => Ok(()),
        ElemType::Int32 if allow_i32 => Ok(()),
        e if low_bit(e).is_some() => Ok(()),
        ElemType::Float6E2M3 | ElemType::Float6E3M2 => unsupported(format!(
            "{} with {what} of type {elem}: float6 quantization is not supported",
            op_name(cx)
        )),
        other => invalid(format!("{} cannot have {what} of type {other}", op_name(cx))),
    }
}

/// The packed format of a low-precision quantized type (float8e8m0 is a
/// scale format, not a quantized one).
fn low_bit(e: ElemType) -> Option<LowBit> {
    super::low_bit(e).filter(|f| *f != LowBit::F8E8M0)
}

fn float_scale(cx: &NodeCx<'_>, t: &TensorType, what: &str) -> OpResult<()> {
    match t.elem {
        ElemType::Float | ElemType::Float16 | ElemType::Bfloat16 => Ok(()),
        ElemType::Float8E8M0 => unsupported(format!("{} with a float8e8m0 {what}", op_name(cx))),
        other => invalid(format!(
            "{}'s {what} must be float, float16 or bfloat16, got {other}",
            op_name(cx)
        )),
    }
}

fn work_tokens(w: Work, rt: &TokenStream) -> TokenStream {
    match w {
        Work::F64 => quote!(#rt::quant::Work::F64),
        Work::F32 => quote!(#rt::quant::Work::F32),
        Work::F16 => quote!(#rt::quant::Work::F16),
        Work::Bf16 => quote!(#rt::quant::Work::Bf16),
    }
}

fn work_of(elem: ElemType) -> Work {
    match elem {
        ElemType::Float16 => Work::F16,
        ElemType::Bfloat16 => Work::Bf16,
        ElemType::Int32 | ElemType::Double => Work::F64,
        _ => Work::F32,
    }
}

/// How the scale (and zero point) of Quantize/DequantizeLinear spreads over
/// `x`: the layout the kernel takes.
fn quant_axis(cx: &NodeCx<'_>, x: &TensorType, scale: &TensorType) -> OpResult<QuantAxis> {
    let n = x.numel().ok_or_else(|| super::OpError::Invalid("x is too large".into()))?;
    let per_tensor = QuantAxis { outer: 1, axis: n, inner: 1, block: 0 };
    let block = if cx.version() >= 21 { cx.int_or("block_size", 0) } else { 0 };
    if block < 0 {
        return invalid(format!("attribute 'block_size' must not be negative, got {block}"));
    }
    if scale.dims.is_empty() || (block == 0 && scale.dims == [1]) {
        return Ok(per_tensor);
    }
    if cx.version() < 13 {
        return invalid(format!(
            "{} before opset 13 takes a scalar scale, got {scale}",
            op_name(cx)
        ));
    }
    let a = super::axis(cx.int_or("axis", 1), x.dims.len(), "attribute 'axis'")?;
    let prod = |d: &[usize]| d.iter().try_fold(1usize, |acc, &v| acc.checked_mul(v));
    let (Some(outer), Some(inner)) = (prod(&x.dims[..a]), prod(&x.dims[a + 1..])) else {
        return invalid(format!("{}'s input {x} is too large", op_name(cx)));
    };
    if block == 0 {
        if scale.dims != [x.dims[a]] {
            return invalid(format!(
                "{}'s scale {scale} must be a scalar or 1-D with {} elements (axis {a} of x {x})",
                op_name(cx),
                x.dims[a]
            ));
        }
        return Ok(QuantAxis { outer, axis: x.dims[a], inner, block: 0 });
    }
    let b = usize::try_from(block).unwrap_or(usize::MAX);
    let mut want = x.dims.clone();
    want[a] = x.dims[a].div_ceil(b);
    if scale.dims != want {
        return invalid(format!(
            "{} with block_size {b} on axis {a} of x {x}: the scale must have shape {want:?}, got {scale}",
            op_name(cx)
        ));
    }
    Ok(QuantAxis { outer, axis: x.dims[a], inner, block: b })
}

fn axis_tokens(p: &QuantAxis, rt: &TokenStream) -> TokenStream {
    let (o, a, i, b) = (
        lit::usize_lit(p.outer),
        lit::usize_lit(p.axis),
        lit::usize_lit(p.inner),
        lit::usize_lit(p.block),
    );
    quote!(#rt::quant::QuantAxis { outer: #o, axis: #a, inner: #i, block: #b })
}

/// A zero point must have the scale's shape and the given type.
fn check_zero_point(
    cx: &NodeCx<'_>,
    zp: &TensorType,
    scale: &TensorType,
    elem: ElemType,
) -> OpResult<()> {
    if zp.elem != elem {
        return invalid(format!("{}'s zero point is {zp}, expected {elem}", op_name(cx)));
    }
    if zp.dims != scale.dims && !(zp.numel() == Some(1) && scale.numel() == Some(1)) {
        return invalid(format!(
            "{}'s zero point {zp} must have the scale's shape {scale}",
            op_name(cx)
        ));
    }
    Ok(())
}

fn output_dtype(cx: &NodeCx<'_>) -> OpResult<Option<ElemType>> {
    if cx.version() < 21 {
        return Ok(None);
    }
    let code = cx.int_or("output_dtype", 0);
    if code == 0 {
        return Ok(None);
    }
    match i32::try_from(code).ok().and_then(ElemType::from_proto) {
        Some(e) => Ok(Some(e)),
        None => invalid(format!("attribute 'output_dtype' {code} is not a tensor element type")),
    }
}

/// A per-tensor, per-row or per-column parameter (zero point or scale): one
/// element, or `count` elements laid along one axis.
fn check_vector(cx: &NodeCx<'_>, t: &TensorType, count: usize, what: &str) -> OpResult<()> {
    let n = t.numel().unwrap_or(usize::MAX);
    let vector = t.dims.iter().filter(|&&d| d != 1).count() <= 1;
    if n == 1 || (n == count && vector) {
        return Ok(());
    }
    unsupported(format!(
        "{} with {what} {t}: only one value or {count} values (one per row/column/channel) \
         are supported",
        op_name(cx)
    ))
}

fn int8_operand(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<ElemType> {
    let t = cx.input(i)?;
    match t.elem {
        ElemType::Uint8 | ElemType::Int8 => Ok(t.elem),
        _ => quantized(cx, t.elem, what, false)
            .and_then(|_| invalid(format!("{} takes uint8 or int8 {what}, got {t}", op_name(cx)))),
    }
}

fn zp_of(cx: &NodeCx<'_>, i: usize, elem: ElemType, count: usize, what: &str) -> OpResult<bool> {
    let Some(z) = cx.opt_input(i) else { return Ok(false) };
    if z.elem != elem {
        return invalid(format!("{}'s {what} is {z}, expected {elem}", op_name(cx)));
    }
    check_vector(cx, z, count, what)?;
    Ok(true)
}

/// The scale type shared by a QLinear op's scales (inputs `idx`).
fn scales_type(cx: &NodeCx<'_>, idx: &[usize]) -> OpResult<ElemType> {
    let first = cx.input(idx[0])?;
    float_scale(cx, first, "scales")?;
    for &i in &idx[1..] {
        let t = cx.input(i)?;
        if t.elem != first.elem {
            return invalid(format!(
                "{}'s scales must share one type; input {i} is {t}, input {} is {first}",
                op_name(cx),
                idx[0]
            ));
        }
    }
    Ok(first.elem)
}

/// What the tests of every operator share.
#[cfg(test)]
mod testing {
    use crate::generate::Analysis;
    use crate::ops::{HostData, HostTensor};

    /// The folded value of graph output `j`, as i64s or f64s.
    pub(super) fn value(a: &Analysis, j: usize) -> HostData {
        let v = a.model().graph.outputs[j];
        let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
        HostTensor::from_tensor(t).expect("output has a host form").data
    }
}

#[cfg(test)]
mod tests {

    use crate::ops::testing::{errors, run};

    #[test]
    fn invalid_models_are_reported() {
        let cases = [
            ("float[2,3] x, float[2] s", "y = QuantizeLinear (x, s)", "1-D with 3 elements"),
            ("float[2,3] x, float s, int8[2] z", "y = QuantizeLinear (x, s, z)", "scale's shape"),
            (
                "float[2,4] x, float[2,3] s",
                "y = QuantizeLinear <block_size: int = 2> (x, s)",
                "must have shape [2, 2]",
            ),
            ("uint8[2] x, float s, int8 z", "y = DequantizeLinear (x, s, z)", "expected uint8"),
            ("uint8[2,3] a, uint8[4,2] b", "y = MatMulInteger (a, b)", "inner dimensions"),
            ("float[2,3] a, float[3,2] b", "y = MatMulInteger (a, b)", "A of type float"),
        ];
        for (inputs, body, want) in cases {
            let a = run(21, &format!("g ({inputs}) => (uint8 y) {{ {body} }}"));
            assert!(errors(&a).iter().any(|e| e.contains(want)), "{want}: {:?}", errors(&a));
        }
    }
}
