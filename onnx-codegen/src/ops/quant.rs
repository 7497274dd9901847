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

use super::conv::{Geometry, forward_geometry};
use super::gemm::{MatMulPlan, matmul_plan};
use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::cast::LowBit;
use onnx_codegen_runtime::conv::Conv;
use onnx_codegen_runtime::quant::{self as rt_q, QuantAxis, Requant, Work};
use onnx_codegen_runtime::shape::MAX_RANK;
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

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

struct QuantizeRule;

struct QuantizePlan {
    axis: QuantAxis,
    work: Work,
    x: ElemType,
    scale: ElemType,
    y: ElemType,
    has_zp: bool,
    /// The `saturate` attribute (float8 outputs).
    saturate: bool,
}

fn quantize_plan(cx: &NodeCx<'_>) -> OpResult<QuantizePlan> {
    let (x, scale) = (cx.input(0)?, cx.input(1)?);
    match x.elem {
        ElemType::Float | ElemType::Float16 | ElemType::Bfloat16 | ElemType::Int32 => {}
        other => return invalid(format!("QuantizeLinear cannot quantize {other} tensors")),
    }
    match scale.elem {
        ElemType::Float | ElemType::Float16 | ElemType::Bfloat16 | ElemType::Int32 => {}
        _ => float_scale(cx, scale, "scale")?,
    }
    let zp = cx.opt_input(2);
    let declared = output_dtype(cx)?;
    let y = match (zp, declared) {
        (Some(z), Some(d)) if z.elem != d => {
            return invalid(format!(
                "QuantizeLinear's output_dtype {d} differs from its zero point's type {}",
                z.elem
            ));
        }
        (Some(z), _) => z.elem,
        (None, Some(d)) => d,
        (None, None) => ElemType::Uint8,
    };
    quantized(cx, y, "output", false)?;
    if let Some(z) = zp {
        check_zero_point(cx, z, scale, y)?;
    }
    let axis = quant_axis(cx, x, scale)?;
    let precision = if cx.version() >= 23 { cx.int_or("precision", 0) } else { 0 };
    let work = if precision != 0 {
        match i32::try_from(precision).ok().and_then(ElemType::from_proto) {
            Some(e @ (ElemType::Float | ElemType::Float16 | ElemType::Bfloat16)) => work_of(e),
            Some(e) => {
                return unsupported(format!("QuantizeLinear with precision {e}"));
            }
            None => return invalid(format!("attribute 'precision' {precision} is not a type")),
        }
    } else if x.elem == scale.elem {
        work_of(x.elem)
    } else if x.elem == ElemType::Int32 || scale.elem == ElemType::Int32 {
        Work::F64
    } else {
        Work::F32
    };
    let saturate = if cx.version() >= 19 { cx.int_or("saturate", 1) } else { 1 };
    if !matches!(saturate, 0 | 1) {
        return invalid(format!("attribute 'saturate' must be 0 or 1, got {saturate}"));
    }
    Ok(QuantizePlan {
        axis,
        work,
        x: x.elem,
        scale: scale.elem,
        y,
        has_zp: zp.is_some(),
        saturate: saturate == 1,
    })
}

impl OpRule for QuantizeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = quantize_plan(cx)?;
        Ok(vec![cx.input(0)?.clone().retyped(p.y)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(QuantizeKernel(quantize_plan(cx)?))))
    }
}

trait Retype {
    fn retyped(self, elem: ElemType) -> TensorType;
}

impl Retype for TensorType {
    fn retyped(self, elem: ElemType) -> TensorType {
        TensorType::new(elem, self.dims)
    }
}

struct QuantizeKernel(QuantizePlan);

fn run_quantize<X: HostElem + rt_q::QReal, S: HostElem + rt_q::QReal, Q: HostElem + rt_q::QInt>(
    p: &QuantizePlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<X>(inputs, 0)?;
    let s = host_in::<S>(inputs, 1)?;
    let z = host_opt::<Q>(inputs, 2)?;
    rt_q::quantize_linear(&p.axis, p.work, x, s, z, host_out::<Q>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for QuantizeKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        // Low-precision tensors have no host form: they are not folded.
        if low_bit(p.y).is_some() {
            return Err(EvalError::Type(p.y));
        }
        q_real!(p.x, X => q_real!(p.scale, S => q_int!(p.y, Q => run_quantize::<X, S, Q>(p, inputs, outputs))))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0;
        let axis = axis_tokens(&p.axis, rt);
        let work = work_tokens(p.work, rt);
        let (x, s, y) = (in_tokens(io, 0), in_tokens(io, 1), out_tokens(io, 0));
        let z = if p.has_zp { opt_tokens(io, 2) } else { quote!(None) };
        if let Some(f) = low_bit(p.y) {
            let (f, sat) = (super::low_bit_tokens(f, rt), p.saturate);
            return quote! {
                #rt::quant::quantize_linear_low(&#axis, #work, #x, #s, #z, #f, #sat, #y)?;
            };
        }
        quote! {
            #rt::quant::quantize_linear(&#axis, #work, #x, #s, #z, #y)?;
        }
    }
}

struct DequantizeRule;

struct DequantizePlan {
    axis: QuantAxis,
    x: ElemType,
    scale: ElemType,
    y: ElemType,
    has_zp: bool,
}

fn dequantize_plan(cx: &NodeCx<'_>) -> OpResult<DequantizePlan> {
    let (x, scale) = (cx.input(0)?, cx.input(1)?);
    quantized(cx, x.elem, "input", true)?;
    float_scale(cx, scale, "scale")?;
    let y = output_dtype(cx)?.unwrap_or(scale.elem);
    match y {
        ElemType::Float | ElemType::Float16 | ElemType::Bfloat16 => {}
        other => return invalid(format!("DequantizeLinear cannot output {other}")),
    }
    let zp = cx.opt_input(2);
    if let Some(z) = zp {
        check_zero_point(cx, z, scale, x.elem)?;
    }
    let axis = quant_axis(cx, x, scale)?;
    Ok(DequantizePlan { axis, x: x.elem, scale: scale.elem, y, has_zp: zp.is_some() })
}

impl OpRule for DequantizeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = dequantize_plan(cx)?;
        Ok(vec![cx.input(0)?.clone().retyped(p.y)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(DequantizeKernel(dequantize_plan(cx)?))))
    }
}

struct DequantizeKernel(DequantizePlan);

fn run_dequantize<
    Q: HostElem + rt_q::QInt,
    S: HostElem + rt_q::QReal,
    Y: HostElem + rt_q::QFloat,
>(
    p: &DequantizePlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<Q>(inputs, 0)?;
    let s = host_in::<S>(inputs, 1)?;
    let z = host_opt::<Q>(inputs, 2)?;
    rt_q::dequantize_linear(&p.axis, x, s, z, host_out::<Y>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for DequantizeKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        if low_bit(p.x).is_some() {
            return Err(EvalError::Type(p.x));
        }
        q_int!(p.x, Q => q_float!(p.scale, S => q_float!(p.y, Y => run_dequantize::<Q, S, Y>(p, inputs, outputs))))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0;
        let axis = axis_tokens(&p.axis, rt);
        let (x, s, y) = (in_tokens(io, 0), in_tokens(io, 1), out_tokens(io, 0));
        let z = if p.has_zp { opt_tokens(io, 2) } else { quote!(None) };
        if let Some(f) = low_bit(p.x) {
            let f = super::low_bit_tokens(f, rt);
            return quote! {
                #rt::quant::dequantize_linear_low(&#axis, #f, #x, #s, #z, #y)?;
            };
        }
        quote! {
            #rt::quant::dequantize_linear(&#axis, #x, #s, #z, #y)?;
        }
    }
}

struct DynamicQuantizeRule;

impl OpRule for DynamicQuantizeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        if x.elem != ElemType::Float {
            return invalid(format!("DynamicQuantizeLinear takes float tensors, got {x}"));
        }
        Ok(vec![
            x.clone().retyped(ElemType::Uint8),
            TensorType::new(ElemType::Float, vec![]),
            TensorType::new(ElemType::Uint8, vec![]),
        ])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        self.infer(cx)?;
        Ok(Lowered::Kernel(Box::new(DynamicQuantizeKernel)))
    }
}

struct DynamicQuantizeKernel;

impl Kernel for DynamicQuantizeKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let x = host_in::<f32>(inputs, 0)?;
        let [y, s, z, ..] = outputs else { return Err(EvalError::Type(ElemType::Uint8)) };
        let y = y.get_mut::<u8>().ok_or(EvalError::Type(ElemType::Uint8))?;
        let s = s.get_mut::<f32>().ok_or(EvalError::Type(ElemType::Float))?;
        let z = z.get_mut::<u8>().ok_or(EvalError::Type(ElemType::Uint8))?;
        rt_q::dynamic_quantize_linear(x, y, s, z)?;
        Ok(())
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let x = in_tokens(io, 0);
        // Absent optional outputs still need a buffer of the right size.
        let y = out_tokens(io, 0);
        let s = match io.outputs.get(1) {
            Some(Some(t)) => t.clone(),
            _ => quote!(&mut [0f32]),
        };
        let z = match io.outputs.get(2) {
            Some(Some(t)) => t.clone(),
            _ => quote!(&mut [0u8]),
        };
        quote! {
            #rt::quant::dynamic_quantize_linear(#x, #y, #s, #z)?;
        }
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

struct MatMulIntegerRule;

struct MatMulIntegerPlan {
    mat: MatMulPlan,
    a: ElemType,
    b: ElemType,
}

fn matmul_integer_plan(cx: &NodeCx<'_>) -> OpResult<MatMulIntegerPlan> {
    let a = int8_operand(cx, 0, "A")?;
    let b = int8_operand(cx, 1, "B")?;
    let mat = matmul_plan(&cx.input(0)?.dims, &cx.input(1)?.dims)?;
    zp_of(cx, 2, a, mat.m, "a_zero_point")?;
    zp_of(cx, 3, b, mat.n, "b_zero_point")?;
    Ok(MatMulIntegerPlan { mat, a, b })
}

impl OpRule for MatMulIntegerRule {
    /// Each output element is a dot product along A's last axis.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_of_product(inputs, outputs))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = matmul_integer_plan(cx)?;
        Ok(vec![TensorType::new(ElemType::Int32, p.mat.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(MatMulIntegerKernel(matmul_integer_plan(cx)?))))
    }
}

struct MatMulIntegerKernel(MatMulIntegerPlan);

fn run_matmul_integer<A: HostElem + rt_q::QInt, B: HostElem + rt_q::QInt>(
    p: &MatMulIntegerPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (a, b) = (host_in::<A>(inputs, 0)?, host_in::<B>(inputs, 1)?);
    let (za, zb) = (host_opt::<A>(inputs, 2)?, host_opt::<B>(inputs, 3)?);
    rt_q::matmul_integer(&p.mat.params(), a, b, za, zb, host_out::<i32>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for MatMulIntegerKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        q_int8!(p.a, A => q_int8!(p.b, B => run_matmul_integer::<A, B>(p, inputs, outputs)))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let mat = self.0.mat.tokens(rt);
        let (a, b, y) = (in_tokens(io, 0), in_tokens(io, 1), out_tokens(io, 0));
        let (za, zb) = (opt_tokens(io, 2), opt_tokens(io, 3));
        quote! {
            #rt::quant::matmul_integer(&#mat, #a, #b, #za, #zb, #y)?;
        }
    }
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

struct QLinearMatMulRule;

struct QLinearMatMulPlan {
    mat: MatMulPlan,
    a: ElemType,
    b: ElemType,
    s: ElemType,
    y: ElemType,
}

fn qlinear_matmul_plan(cx: &NodeCx<'_>) -> OpResult<QLinearMatMulPlan> {
    let a = int8_operand(cx, 0, "a")?;
    let b = int8_operand(cx, 3, "b")?;
    let mat = matmul_plan(&cx.input(0)?.dims, &cx.input(3)?.dims)?;
    let s = scales_type(cx, &[1, 4, 6])?;
    check_vector(cx, cx.input(1)?, mat.m, "a_scale")?;
    check_vector(cx, cx.input(4)?, mat.n, "b_scale")?;
    check_vector(cx, cx.input(6)?, 1, "y_scale")?;
    zp_of(cx, 2, a, mat.m, "a_zero_point")?;
    zp_of(cx, 5, b, mat.n, "b_zero_point")?;
    let y = match cx.opt_input(7) {
        Some(z) => {
            check_vector(cx, z, 1, "y_zero_point")?;
            int8_operand(cx, 7, "y_zero_point")?
        }
        None => a,
    };
    Ok(QLinearMatMulPlan { mat, a, b, s, y })
}

impl OpRule for QLinearMatMulRule {
    /// Each output element is a dot product along A's last axis.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_of_product(inputs, outputs))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = qlinear_matmul_plan(cx)?;
        Ok(vec![TensorType::new(p.y, p.mat.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(QLinearMatMulKernel(qlinear_matmul_plan(cx)?))))
    }
}

struct QLinearMatMulKernel(QLinearMatMulPlan);

fn run_qlinear_matmul<
    A: HostElem + rt_q::QInt,
    B: HostElem + rt_q::QInt,
    S: HostElem + rt_q::QReal,
    Y: HostElem + rt_q::QInt,
>(
    p: &QLinearMatMulPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let r = Requant {
        a_scale: host_in::<S>(inputs, 1)?,
        b_scale: host_in::<S>(inputs, 4)?,
        y_scale: host_in::<S>(inputs, 6)?,
        y_zero_point: host_opt::<Y>(inputs, 7)?,
    };
    let (a, za) = (host_in::<A>(inputs, 0)?, host_opt::<A>(inputs, 2)?);
    let (b, zb) = (host_in::<B>(inputs, 3)?, host_opt::<B>(inputs, 5)?);
    rt_q::qlinear_matmul(&p.mat.params(), a, za, b, zb, &r, host_out::<Y>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for QLinearMatMulKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        q_int8!(p.a, A => q_int8!(p.b, B => q_float!(p.s, S => q_int8!(p.y, Y =>
            run_qlinear_matmul::<A, B, S, Y>(p, inputs, outputs)))))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let mat = self.0.mat.tokens(rt);
        let (a, za, b, zb) =
            (in_tokens(io, 0), opt_tokens(io, 2), in_tokens(io, 3), opt_tokens(io, 5));
        let (sa, sb, sy, zy) =
            (in_tokens(io, 1), in_tokens(io, 4), in_tokens(io, 6), opt_tokens(io, 7));
        let y = out_tokens(io, 0);
        quote! {
            #rt::quant::qlinear_matmul(
                &#mat, #a, #za, #b, #zb,
                &#rt::quant::Requant { a_scale: #sa, b_scale: #sb, y_scale: #sy, y_zero_point: #zy },
                #y,
            )?;
        }
    }
}

/// An integer convolution's geometry: batch and channels around the sliding
/// window of [`forward_geometry`] (the Conv rules for pads, strides,
/// dilations and `auto_pad`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct ConvGeom {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    window: Geometry,
}

impl ConvGeom {
    fn params(&self) -> Conv<'_> {
        Conv {
            batch: self.batch,
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            groups: self.groups,
            window: self.window.window(),
        }
    }

    fn tokens(&self, rt: &TokenStream) -> TokenStream {
        let window = self.window.tokens(rt);
        let (n, c, m, g) = (
            lit::usize_lit(self.batch),
            lit::usize_lit(self.in_channels),
            lit::usize_lit(self.out_channels),
            lit::usize_lit(self.groups),
        );
        quote! {
            #rt::conv::Conv {
                batch: #n, in_channels: #c, out_channels: #m, groups: #g,
                window: #window,
            }
        }
    }

    fn out(&self) -> Vec<usize> {
        let mut v = vec![self.batch, self.out_channels];
        v.extend_from_slice(&self.window.out_dims);
        v
    }
}

/// The geometry of an integer convolution of input `xi` by weights `wi`.
fn conv_geom(cx: &NodeCx<'_>, xi: usize, wi: usize) -> OpResult<ConvGeom> {
    let (x, w) = (cx.input(xi)?, cx.input(wi)?);
    if x.dims.len() < 3 || w.dims.len() != x.dims.len() {
        return invalid(format!(
            "{} needs X [N, C, spatial...] and W of the same rank, got {x} and {w}",
            op_name(cx)
        ));
    }
    let n = x.dims.len() - 2;
    if n > MAX_RANK {
        return unsupported(format!("{} with {n} spatial axes", op_name(cx)));
    }
    let in_dims = &x.dims[2..];
    let kernel = w.dims[2..].to_vec();
    if in_dims.contains(&0) || kernel.contains(&0) {
        return unsupported(format!("{} with an empty spatial or kernel axis", op_name(cx)));
    }
    if let Some(ks) = cx.ints("kernel_shape")
        && (ks.len() != n || ks.iter().zip(&kernel).any(|(&a, &b)| usize::try_from(a) != Ok(b)))
    {
        return invalid(format!(
            "attribute 'kernel_shape' {ks:?} does not match the weights' spatial dims {kernel:?}"
        ));
    }
    let g = cx.int_or("group", 1);
    let groups = match usize::try_from(g) {
        Ok(g) if g >= 1 => g,
        _ => return invalid(format!("attribute 'group' must be at least 1, got {g}")),
    };
    let (batch, c, m) = (x.dims[0], x.dims[1], w.dims[0]);
    if w.dims[1].checked_mul(groups) != Some(c) || !m.is_multiple_of(groups) {
        return invalid(format!(
            "{} with group {groups}: X {x} and W {w} do not agree",
            op_name(cx)
        ));
    }
    let window = forward_geometry(cx, in_dims, kernel, false)?;
    Ok(ConvGeom { batch, in_channels: c, out_channels: m, groups, window })
}

struct ConvIntegerRule;

struct ConvIntegerPlan {
    geom: ConvGeom,
    x: ElemType,
    w: ElemType,
}

fn conv_integer_plan(cx: &NodeCx<'_>) -> OpResult<ConvIntegerPlan> {
    let x = int8_operand(cx, 0, "x")?;
    let w = int8_operand(cx, 1, "w")?;
    let geom = conv_geom(cx, 0, 1)?;
    zp_of(cx, 2, x, 1, "x_zero_point")?;
    zp_of(cx, 3, w, geom.out_channels, "w_zero_point")?;
    Ok(ConvIntegerPlan { geom, x, w })
}

impl OpRule for ConvIntegerRule {
    /// Each output element takes one filter's worth: W is `[M, C / group, k...]`.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_per_filter(
            outputs.first().copied().flatten(),
            inputs.get(1).copied().flatten(),
        ))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![TensorType::new(ElemType::Int32, conv_integer_plan(cx)?.geom.out())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ConvIntegerKernel(conv_integer_plan(cx)?))))
    }
}

struct ConvIntegerKernel(ConvIntegerPlan);

fn run_conv_integer<X: HostElem + rt_q::QInt, W: HostElem + rt_q::QInt>(
    p: &ConvIntegerPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, w) = (host_in::<X>(inputs, 0)?, host_in::<W>(inputs, 1)?);
    let (zx, zw) = (host_opt::<X>(inputs, 2)?, host_opt::<W>(inputs, 3)?);
    rt_q::conv_integer(&p.geom.params(), x, w, zx, zw, host_out::<i32>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for ConvIntegerKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        q_int8!(p.x, X => q_int8!(p.w, W => run_conv_integer::<X, W>(p, inputs, outputs)))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let conv = self.0.geom.tokens(rt);
        let (x, w, y) = (in_tokens(io, 0), in_tokens(io, 1), out_tokens(io, 0));
        let (zx, zw) = (opt_tokens(io, 2), opt_tokens(io, 3));
        quote! {
            #rt::quant::conv_integer(&#conv, #x, #w, #zx, #zw, #y)?;
        }
    }
}

struct QLinearConvRule;

struct QLinearConvPlan {
    geom: ConvGeom,
    x: ElemType,
    w: ElemType,
    s: ElemType,
    y: ElemType,
}

fn qlinear_conv_plan(cx: &NodeCx<'_>) -> OpResult<QLinearConvPlan> {
    let x = int8_operand(cx, 0, "x")?;
    let w = int8_operand(cx, 3, "w")?;
    let geom = conv_geom(cx, 0, 3)?;
    let s = scales_type(cx, &[1, 4, 6])?;
    check_vector(cx, cx.input(1)?, 1, "x_scale")?;
    check_vector(cx, cx.input(4)?, geom.out_channels, "w_scale")?;
    check_vector(cx, cx.input(6)?, 1, "y_scale")?;
    zp_of(cx, 2, x, 1, "x_zero_point")?;
    zp_of(cx, 5, w, geom.out_channels, "w_zero_point")?;
    let y = match cx.opt_input(7) {
        Some(z) => {
            check_vector(cx, z, 1, "y_zero_point")?;
            int8_operand(cx, 7, "y_zero_point")?
        }
        None => x,
    };
    if let Some(b) = cx.opt_input(8)
        && (b.elem != ElemType::Int32 || b.dims != [geom.out_channels])
    {
        return invalid(format!(
            "QLinearConv's bias B is {b}; it must be int32 with {} elements",
            geom.out_channels
        ));
    }
    Ok(QLinearConvPlan { geom, x, w, s, y })
}

impl OpRule for QLinearConvRule {
    /// Each output element takes one filter's worth: W is `[M, C / group, k...]`.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_per_filter(
            outputs.first().copied().flatten(),
            inputs.get(3).copied().flatten(),
        ))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = qlinear_conv_plan(cx)?;
        Ok(vec![TensorType::new(p.y, p.geom.out())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(QLinearConvKernel(qlinear_conv_plan(cx)?))))
    }
}

struct QLinearConvKernel(QLinearConvPlan);

fn run_qlinear_conv<
    X: HostElem + rt_q::QInt,
    W: HostElem + rt_q::QInt,
    S: HostElem + rt_q::QReal,
    Y: HostElem + rt_q::QInt,
>(
    p: &QLinearConvPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let r = Requant {
        a_scale: host_in::<S>(inputs, 1)?,
        b_scale: host_in::<S>(inputs, 4)?,
        y_scale: host_in::<S>(inputs, 6)?,
        y_zero_point: host_opt::<Y>(inputs, 7)?,
    };
    let (x, zx) = (host_in::<X>(inputs, 0)?, host_opt::<X>(inputs, 2)?);
    let (w, zw) = (host_in::<W>(inputs, 3)?, host_opt::<W>(inputs, 5)?);
    let bias = host_opt::<i32>(inputs, 8)?;
    let y = host_out::<Y>(outputs, 0)?;
    rt_q::qlinear_conv(&p.geom.params(), x, zx, w, zw, bias, &r, y)?;
    Ok(())
}

impl Kernel for QLinearConvKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.0;
        q_int8!(p.x, X => q_int8!(p.w, W => q_float!(p.s, S => q_int8!(p.y, Y =>
            run_qlinear_conv::<X, W, S, Y>(p, inputs, outputs)))))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let conv = self.0.geom.tokens(rt);
        let (x, zx, w, zw) =
            (in_tokens(io, 0), opt_tokens(io, 2), in_tokens(io, 3), opt_tokens(io, 5));
        let (sx, sw, sy, zy) =
            (in_tokens(io, 1), in_tokens(io, 4), in_tokens(io, 6), opt_tokens(io, 7));
        let (b, y) = (opt_tokens(io, 8), out_tokens(io, 0));
        quote! {
            #rt::quant::qlinear_conv(
                &#conv, #x, #zx, #w, #zw, #b,
                &#rt::quant::Requant { a_scale: #sx, b_scale: #sw, y_scale: #sy, y_zero_point: #zy },
                #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{HostData, HostTensor};
    use crate::generate::Analysis;
    use crate::ops::testing::{errors, run, ty, types, unsupported};

    /// The folded value of graph output `j`, as i64s or f64s.
    fn value(a: &Analysis, j: usize) -> HostData {
        let v = a.model().graph.outputs[j];
        let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
        HostTensor::from_tensor(t).expect("output has a host form").data
    }

    #[test]
    fn quantize_types_follow_zero_point_and_output_dtype() {
        let a = run(
            21,
            "g (float[2,3] x, float s, int8 z, float[3] sa, uint16[3] za, float[2,2] sb)
               => (int8[2,3] a, uint8[2,3] b, uint16[2,3] c, int16[2,3] d, uint16[2,3] e) {
                a = QuantizeLinear (x, s, z)
                b = QuantizeLinear (x, s)
                c = QuantizeLinear <axis: int = -1> (x, sa, za)
                d = QuantizeLinear <output_dtype: int = 5> (x, s)
                e = QuantizeLinear <axis: int = 1, block_size: int = 2, output_dtype: int = 4> (x, sb)
            }",
        );
        assert_eq!(
            types(&a),
            [
                ty("int8[2, 3]"),
                ty("uint8[2, 3]"),
                ty("uint16[2, 3]"),
                ty("int16[2, 3]"),
                ty("uint16[2, 3]")
            ]
        );
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
    }

    #[test]
    fn quantize_folds_with_rounding_and_saturation() {
        // x / 2 = [0.5, 1.5, 2.5, -0.5, 300, -300]: half to even, + 10, saturated.
        let a = run(
            13,
            "g () => (uint8[6] y, int8[6] z) <float[6] x = {1, 3, 5, -1, 600, -600}, float s = {2},
                 uint8 zu = {10}, int8 zi = {-10}> {
                y = QuantizeLinear (x, s, zu)
                z = QuantizeLinear (x, s, zi)
            }",
        );
        assert_eq!(value(&a, 0), HostData::U8(vec![10, 12, 12, 10, 255, 0]));
        assert_eq!(value(&a, 1), HostData::I8(vec![-10, -8, -8, -10, 127, -128]));
    }

    #[test]
    fn quantize_per_axis_and_blocked_fold() {
        // x [2, 3]: column scales [1, 2, 4]; blocked along axis 1 (block 2): per row
        // blocks {cols 0-1, col 2} with scales [[1, 2], [4, 8]].
        let a = run(
            21,
            "g () => (uint8[2,3] p, uint8[2,3] b) <float[2,3] x = {8, 8, 8, 16, 16, 16},
                 float[3] s = {1, 2, 4}, float[2,2] sb = {1, 2, 4, 8}> {
                p = QuantizeLinear <axis: int = 1> (x, s)
                b = QuantizeLinear <axis: int = 1, block_size: int = 2> (x, sb)
            }",
        );
        assert_eq!(value(&a, 0), HostData::U8(vec![8, 4, 2, 16, 8, 4]));
        assert_eq!(value(&a, 1), HostData::U8(vec![8, 8, 4, 4, 4, 2]));
    }

    #[test]
    fn dequantize_folds_and_takes_output_dtype() {
        let a = run(
            23,
            "g () => (float[3] y, float16[3] h, float[2,2] p) <uint8[3] x = {0, 128, 255},
                 float s = {0.5}, uint8 z = {128}, int8[2,2] q = {1, 2, 3, 4},
                 float[2] sp = {1, 10}, int8[2] zp = {1, 0}> {
                y = DequantizeLinear (x, s, z)
                h = DequantizeLinear <output_dtype: int = 10> (x, s, z)
                p = DequantizeLinear <axis: int = 0> (q, sp, zp)
            }",
        );
        assert_eq!(value(&a, 0), HostData::F32(vec![-64.0, 0.0, 63.5]));
        let h = [-64.0f32, 0.0, 63.5].map(onnx_codegen_runtime::f16::from_f32).to_vec();
        assert_eq!(value(&a, 1), HostData::F16(h));
        assert_eq!(value(&a, 2), HostData::F32(vec![0.0, 1.0, 30.0, 40.0]));
    }

    #[test]
    fn dynamic_quantize_folds() {
        // Range [0, 255]: scale 1, zero point 0; 2.5 rounds to 2.
        let a = run(
            11,
            "g () => (uint8[3] y, float s, uint8 z) <float[3] x = {0, 2.5, 255}> {
                y, s, z = DynamicQuantizeLinear (x)
            }",
        );
        assert_eq!(value(&a, 0), HostData::U8(vec![0, 2, 255]));
        assert_eq!(value(&a, 1), HostData::F32(vec![1.0]));
        assert_eq!(value(&a, 2), HostData::U8(vec![0]));
    }

    #[test]
    fn integer_products_infer_and_fold() {
        // [[3, 4]] - 1 = [[2, 3]]; [[1], [2]] - per-column zero point 1 = [[0], [1]]: 3.
        let a = run(
            10,
            "g (uint8[2,5,3] xa, int8[3,4] xb) => (int32[1,1] y, int32[2,5,4] w) <uint8[1,2] a = {3, 4},
                 uint8 za = {1}, int8[2,1] b = {1, 2}, int8[1] zb = {1}> {
                y = MatMulInteger (a, b, za, zb)
                w = MatMulInteger (xa, xb)
            }",
        );
        assert_eq!(types(&a), [ty("int32[1, 1]"), ty("int32[2, 5, 4]")]);
        assert_eq!(value(&a, 0), HostData::I32(vec![3]));
        // QLinearMatMul: (2 * 1 + 3 * 2) * (0.5 * 0.5 / 0.1) + 100 = 120.
        let a = run(
            10,
            "g () => (uint8[1,1] y) <uint8[1,2] a = {2, 3}, float sa = {0.5}, uint8 za = {0},
                 uint8[2,1] b = {1, 2}, float sb = {0.5}, uint8 zb = {0}, float sy = {0.1},
                 uint8 zy = {100}> {
                y = QLinearMatMul (a, sa, za, b, sb, zb, sy, zy)
            }",
        );
        assert_eq!(value(&a, 0), HostData::U8(vec![120]));
    }

    #[test]
    fn integer_convolutions_infer_and_fold() {
        // x [1,1,3] = [5, 6, 7] - 5 with pads 1 and a [1, 1, 1] kernel: [1, 3, 3].
        let a = run(
            10,
            "g (int8[1,4,5,5] xs, int8[6,2,3,3] ws) => (int32[1,1,3] y, int32[1,6,3,3] s, uint8[1,1,3] q)
               <uint8[1,1,3] x = {5, 6, 7}, uint8[1,1,3] w = {1, 1, 1}, uint8 zx = {5},
                float sx = {0.5}, float sw = {1}, float sy = {1}, uint8 zy = {10}, int32[1] bias = {1},
                uint8 zw = {0}> {
                y = ConvInteger <pads: ints = [1, 1]> (x, w, zx)
                s = ConvInteger <group: int = 2, strides: ints = [2, 2], auto_pad: string = \"SAME_UPPER\"> (xs, ws)
                q = QLinearConv <pads: ints = [1, 1]> (x, sx, zx, w, sw, zw, sy, zy, bias)
            }",
        );
        assert_eq!(
            types(&a),
            [ty("int32[1, 1, 3]"), ty("int32[1, 6, 3, 3]"), ty("uint8[1, 1, 3]")]
        );
        assert_eq!(value(&a, 0), HostData::I32(vec![1, 3, 3]));
        // ((1, 3, 3) + 1) * 0.5 + 10 = 11, 12, 12.
        assert_eq!(value(&a, 2), HostData::U8(vec![11, 12, 12]));
    }

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

    #[test]
    fn low_precision_types_are_inferred_and_saturate_is_checked() {
        let a = run(
            21,
            "g (float[4] x, float s, float8e5m2 z, int4[4] q, float[2] sq, uint2[2] zq)
               => (int4[4] y, float8e4m3fn[4] f, float8e5m2[4] e, float[4] d) {
                y = QuantizeLinear <output_dtype: int = 22> (x, s)
                f = QuantizeLinear <output_dtype: int = 17, saturate: int = 0> (x, s)
                e = QuantizeLinear (x, s, z)
                d = DequantizeLinear <axis: int = 0, block_size: int = 2> (q, sq)
            }",
        );
        assert_eq!(
            types(&a),
            [ty("int4[4]"), ty("float8e4m3fn[4]"), ty("float8e5m2[4]"), ty("float[4]")]
        );
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        let a = run(
            21,
            "g (float[4] x, float s, uint2[2] z) => (uint2[4] y) {
                y = QuantizeLinear <saturate: int = 2> (x, s)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("'saturate'")), "{:?}", errors(&a));
    }
}
