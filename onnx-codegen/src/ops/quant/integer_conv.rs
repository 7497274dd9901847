//! ConvInteger and QLinearConv: integer convolutions on `Conv`'s geometry
//! (pads, strides, dilations, `auto_pad`, groups), with zero points
//! subtracted and, for QLinearConv, the result requantized.

use super::int8::Int8Op;
use super::{
    check_vector, host_in, host_opt, host_out, in_tokens, int8_operand, op_name, opt_tokens,
    out_tokens, scales_type, zp_of,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::conv::{Geometry, forward_geometry};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::conv::Conv;
use onnx_codegen_runtime::quant::{self as rt_q, Requant};
use onnx_codegen_runtime::shape::MAX_RANK;
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// An integer convolution's geometry: batch and channels around the sliding
/// window of [`forward_geometry`] (the Conv rules for pads, strides,
/// dilations and `auto_pad`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ConvGeom {
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    pub(super) window: Geometry,
}

impl ConvGeom {
    pub(super) fn params(&self) -> Conv<'_> {
        Conv {
            batch: self.batch,
            in_channels: self.in_channels,
            out_channels: self.out_channels,
            groups: self.groups,
            window: self.window.window(),
        }
    }

    pub(super) fn tokens(&self, rt: &TokenStream) -> TokenStream {
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

    pub(super) fn out(&self) -> Vec<usize> {
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

pub(super) struct ConvIntegerRule;

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
        Some(crate::ops::macs_per_filter(
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

pub(super) struct QLinearConvRule;

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
        Some(crate::ops::macs_per_filter(
            outputs.first().copied().flatten(),
            inputs.get(3).copied().flatten(),
        ))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = qlinear_conv_plan(cx)?;
        Ok(vec![TensorType::new(p.y, p.geom.out())])
    }

    /// The int8 kernels where the node qualifies ([`super::int8`]), else
    /// the reference kernel.
    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = qlinear_conv_plan(cx)?;
        let op = Int8Op::Conv(p.geom.clone());
        Ok(match super::int8::plan(cx, op, p.geom.out_channels, p.y)? {
            Some(k) => Lowered::Kernel(Box::new(k)),
            None => Lowered::Kernel(Box::new(QLinearConvKernel(p))),
        })
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
    use crate::ops::HostData;
    use crate::ops::quant::testing::value;
    use crate::ops::testing::{run, ty, types};

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
}
