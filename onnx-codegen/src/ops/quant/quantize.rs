//! QuantizeLinear (per tensor, per axis or blocked, with `saturate` and
//! `output_dtype`), DequantizeLinear and DynamicQuantizeLinear.

use super::{
    axis_tokens, check_zero_point, float_scale, host_in, host_opt, host_out, in_tokens, low_bit,
    opt_tokens, out_tokens, output_dtype, quant_axis, quantized, work_of, work_tokens,
};
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::quant::{self as rt_q, QuantAxis, Work};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct QuantizeRule;

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
            let (f, sat) = (crate::ops::low_bit_tokens(f, rt), p.saturate);
            return quote! {
                #rt::quant::quantize_linear_low(&#axis, #work, #x, #s, #z, #f, #sat, #y)?;
            };
        }
        quote! {
            #rt::quant::quantize_linear(&#axis, #work, #x, #s, #z, #y)?;
        }
    }
}

pub(super) struct DequantizeRule;

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
            let f = crate::ops::low_bit_tokens(f, rt);
            return quote! {
                #rt::quant::dequantize_linear_low(&#axis, #f, #x, #s, #z, #y)?;
            };
        }
        quote! {
            #rt::quant::dequantize_linear(&#axis, #x, #s, #z, #y)?;
        }
    }
}

pub(super) struct DynamicQuantizeRule;

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

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::quant::testing::value;
    use crate::ops::testing::{errors, run, ty, types, unsupported};

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
