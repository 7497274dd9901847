//! MatMulInteger and QLinearMatMul: integer products on `MatMul`'s
//! broadcasting plan, with zero points subtracted and, for QLinearMatMul,
//! the result requantized.

use super::int8::Int8Op;
use super::{
    check_vector, host_in, host_opt, host_out, in_tokens, int8_operand, opt_tokens, out_tokens,
    scales_type, zp_of,
};
use crate::ir::lowering::{FusedQuantize, Quantization};
use crate::ir::{ElemType, Lowering, TensorType};
use crate::ops::gemm::{MatMulPlan, matmul_plan};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
};
use onnx_codegen_runtime::quant::{self as rt_q, Requant};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct MatMulIntegerRule;

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
        Some(crate::ops::macs_of_product(inputs, outputs))
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
pub(super) struct QLinearMatMulRule;

struct QLinearMatMulPlan {
    mat: MatMulPlan,
    a: ElemType,
    b: ElemType,
    s: ElemType,
    y: ElemType,
}

/// The ends fused into a `QLinearMatMul` ([`IntegerLowering`]): the
/// quantization its float input takes, the one its float output is
/// dequantized by.
fn fused_ends(cx: &NodeCx<'_>) -> (Option<FusedQuantize>, Option<Quantization>) {
    match cx.lowering() {
        Some(Lowering::Integer(l)) => (l.quantize_input, l.dequantize_output),
        _ => (None, None),
    }
}

fn qlinear_matmul_plan(cx: &NodeCx<'_>) -> OpResult<QLinearMatMulPlan> {
    // With a `QuantizeLinear` fused in, `a` is the float value it
    // quantizes to the fused integer type.
    let a = match fused_ends(cx).0 {
        Some(f) if cx.input(0)?.elem == ElemType::Float => f.elem,
        Some(_) => return invalid("a fused QuantizeLinear's input is not float32"),
        None => int8_operand(cx, 0, "a")?,
    };
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
        Some(crate::ops::macs_of_product(inputs, outputs))
    }

    /// The output's type is `y_zero_point`'s, float32 when a
    /// `DequantizeLinear` is fused in.
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = qlinear_matmul_plan(cx)?;
        let elem = if fused_ends(cx).1.is_some() { ElemType::Float } else { p.y };
        Ok(vec![TensorType::new(elem, p.mat.out)])
    }

    /// The int8 kernels where the node qualifies ([`super::int8`]): a
    /// constant 2-D B, batches of A folded into its rows. Else the
    /// reference kernel.
    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = qlinear_matmul_plan(cx)?;
        let rows = p.mat.batch.iter().product::<usize>().checked_mul(p.mat.m);
        let plain = p.mat.y_layout.is_none() && p.mat.a_mat == [p.mat.k, 1];
        let kernel = match rows {
            Some(m) if plain => {
                let op = Int8Op::MatMul { m, n: p.mat.n, k: p.mat.k };
                super::int8::plan(cx, op, p.mat.n, p.y)?
            }
            _ => super::int8::plan(cx, Int8Op::Unsupported, p.mat.n, p.y)?,
        };
        Ok(match kernel {
            Some(k) => Lowered::Kernel(Box::new(k)),
            None => Lowered::Kernel(Box::new(QLinearMatMulKernel(p))),
        })
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

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::quant::testing::value;
    use crate::ops::testing::{run, ty, types};

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
}
