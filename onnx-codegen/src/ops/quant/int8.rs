//! QLinearConv and QLinearMatMul on the int8 kernels (`runtime::int8`):
//! what the kernels need is decided here, at generation time, from the
//! constant scales, zero points and weights.
//!
//! A node runs there when its input and output are int8 or uint8, its
//! weights are constant int8 of zero point 0, its scales constant float32
//! (input and output scales one value, weight scales one value or one per
//! output channel), and each channel's multiplier `x_scale * w_scale /
//! y_scale` (computed in f32, as onnxruntime does) has a fixed-point
//! [`Scale`]. The kernels then compute `clamp(y_zero + scale_c.apply(sum
//! (x - x_zero) * w + bias), min, max)` in integers: the same bytes on every
//! target. Other nodes take the reference kernels of `runtime::quant`.
//!
//! The node's [`IntegerLowering`] may add a bias (a `Gemm`'s, for a
//! `QLinearMatMul`), narrow the output range (a folded `Relu` or `Clip`),
//! name weights packed at generation time and, for a `QLinearConv`, add a
//! residual after the output stage (`int8::qconv_add`, over the residual's
//! buffer when the plan lets it).

use super::integer_conv::ConvGeom;
use super::{host_in, host_out, in_tokens, out_tokens, scale_tokens};
use crate::emit::lit;
use crate::ir::lowering::{IntegerLowering, Quantization};
use crate::ir::{ElemType, Lowering, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, NodeCx, OpResult, invalid, rust_type,
};
use onnx_codegen_runtime::int8::{
    self as rt_i8, Q8, QConvWeights, QDest, QLinear, QMatMul, QOut, QResidual, QRows, QWeights,
    Requant, Scale,
};
use proc_macro2::TokenStream;
use quote::quote;

/// The operation an int8 kernel runs.
#[derive(Clone, Debug)]
pub(super) enum Int8Op {
    Conv(ConvGeom),
    /// `[m, k] x [k, n]`, batches folded into `m`.
    MatMul {
        m: usize,
        n: usize,
        k: usize,
    },
    /// A product the kernels cannot take (A broadcast or strided): the
    /// node's lowering is only checked.
    Unsupported,
}

/// The float32 ends fused into a product ([`IntegerLowering`]'s
/// `quantize_input`, `dequantize_output`): `int8::qmatmul_float`.
#[derive(Clone, Copy, Debug, Default)]
struct Ends {
    quantize: Option<QLinear>,
    dequantize: Option<QLinear>,
}

impl Ends {
    fn any(&self) -> bool {
        self.quantize.is_some() || self.dequantize.is_some()
    }
}

/// Where each operand of an [`Int8Kernel`] is among the node's reads.
#[derive(Clone, Debug)]
struct At {
    x: usize,
    w: usize,
    /// The weights as packed (`true`) or as the model gives them.
    packed: bool,
    bias: Option<usize>,
    /// The fused residual and its `Add`.
    residual: Option<(usize, QResidual)>,
    ends: Ends,
}

/// A QLinearConv or QLinearMatMul call on the int8 kernels.
#[derive(Clone, Debug)]
pub(super) struct Int8Kernel {
    op: Int8Op,
    x: ElemType,
    y: ElemType,
    x_zero: i32,
    scales: Vec<Scale>,
    y_zero: i32,
    range: (i32, i32),
    at: At,
    scratch: usize,
}

/// Input positions of QLinearConv and QLinearMatMul (the same for both):
/// x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
/// y_zero_point, and QLinearConv's bias.
const X: usize = 0;
const XS: usize = 1;
const XZ: usize = 2;
const W: usize = 3;
const WS: usize = 4;
const WZ: usize = 5;
const YS: usize = 6;
const YZ: usize = 7;
const CONV_BIAS: usize = 8;

fn ints(cx: &NodeCx<'_>, i: usize) -> Option<Vec<i64>> {
    cx.constant(i)?.to_i64s()
}

fn floats(cx: &NodeCx<'_>, i: usize) -> Option<Vec<f32>> {
    (cx.opt_input(i)?.elem == ElemType::Float)
        .then(|| cx.constant(i)?.to_f64s())
        .flatten()
        .map(|v| v.iter().map(|&s| s as f32).collect())
}

/// The int8 kernel for node `cx` computing `op` with `channels` output
/// channels, or `None` when it does not qualify (see the module docs).
/// The node's own lowering must then have nothing the reference kernels
/// cannot do.
pub(super) fn plan(
    cx: &NodeCx<'_>,
    op: Int8Op,
    channels: usize,
    y: ElemType,
) -> OpResult<Option<Int8Kernel>> {
    let lowering = match cx.lowering() {
        None => IntegerLowering::default(),
        Some(Lowering::Integer(l)) => l.clone(),
        Some(other) => return invalid(format!("a quantized product lowered as {other:?}")),
    };
    let kernel = qualify(cx, op, channels, y, &lowering)?;
    let fused = lowering.bias.is_some()
        || lowering.range.is_some()
        || lowering.residual.is_some()
        || lowering.quantize_input.is_some()
        || lowering.dequantize_output.is_some();
    if kernel.is_none() && fused {
        return invalid(
            "a bias, an output range, a residual or a quantization was folded into a quantized product the int8 kernels cannot run",
        );
    }
    Ok(kernel)
}

fn qualify(
    cx: &NodeCx<'_>,
    op: Int8Op,
    channels: usize,
    y: ElemType,
    l: &IntegerLowering,
) -> OpResult<Option<Int8Kernel>> {
    // A fused `QuantizeLinear` gives the product its float input's
    // integers.
    let x = match l.quantize_input {
        Some(f) => f.elem,
        None => cx.input(X)?.elem,
    };
    let int8 = |e: ElemType| matches!(e, ElemType::Int8 | ElemType::Uint8);
    let weights_ok = cx.input(W)?.elem == ElemType::Int8 && cx.constant(W).is_some();
    let w_zero_ok =
        cx.opt_input(WZ).is_none() || ints(cx, WZ).is_some_and(|z| z.iter().all(|&v| v == 0));
    let (Some(xs), Some(ws), Some(ys)) = (floats(cx, XS), floats(cx, WS), floats(cx, YS)) else {
        return Ok(None);
    };
    // A one-value constant zero point, or 0 when absent.
    let zero = |i: usize| match cx.opt_input(i) {
        None => Some(0),
        Some(_) => ints(cx, i).and_then(|z| <[i64; 1]>::try_from(z).ok()).map(|[z]| z),
    };
    let (Some(x_zero), Some(y_zero)) = (zero(XZ), zero(YZ)) else { return Ok(None) };
    let conv_ok = match &op {
        Int8Op::Conv(g) => g.window.out_dims.len() == 2 && g.window.kernel.len() == 2,
        Int8Op::MatMul { .. } => cx.input(X)?.rank() >= 2 && cx.input(W)?.rank() == 2,
        Int8Op::Unsupported => false,
    };
    if !int8(x) || !int8(y) || !weights_ok || !w_zero_ok || !conv_ok {
        return Ok(None);
    }
    if xs.len() != 1 || ys.len() != 1 || !(ws.len() == 1 || ws.len() == channels) {
        return Ok(None);
    }
    let mut scales = Vec::with_capacity(ws.len());
    for &w in &ws {
        match Scale::from_real(f64::from(xs[0] * w / ys[0])) {
            Some(s) => scales.push(s),
            None => return Ok(None),
        }
    }
    let (lo, hi) = if y == ElemType::Int8 { (-128, 127) } else { (0, 255) };
    let range = l.range.unwrap_or((lo, hi));
    if range.0 > range.1 || range.0 < lo || range.1 > hi {
        return invalid(format!("the output range {range:?} is outside {y}'s"));
    }
    let bias = match (&op, l.bias) {
        (Int8Op::Conv(_), Some(_)) => return invalid("a QLinearConv's bias is its input 8"),
        (Int8Op::Conv(_), None) => cx.opt_input(CONV_BIAS).map(|_| CONV_BIAS),
        (Int8Op::MatMul { .. }, Some(b)) => {
            let (at, t) = cx.operand(b)?;
            if t.elem != ElemType::Int32 || t.dims != [channels] {
                return invalid(format!("the folded bias is {t}, not int32[{channels}]"));
            }
            Some(at)
        }
        (_, None) => None,
        (Int8Op::Unsupported, Some(_)) => return Ok(None),
    };
    let (w, packed) = match l.packed {
        Some(p) => (cx.operand(p)?.0, true),
        None => (W, false),
    };
    let (x_zero, y_zero) = (x_zero as i32, y_zero as i32);
    let linear = |q: Quantization| QLinear { scale: q.scale, zero: q.zero };
    let ends = Ends {
        quantize: l.quantize_input.map(|f| linear(f.q)),
        dequantize: l.dequantize_output.map(linear),
    };
    let scratch = match &op {
        Int8Op::Conv(g) => rt_i8::qconv_scratch_len(&g.params()),
        Int8Op::MatMul { m, n, k } => {
            let p = QMatMul { m: *m, n: *n, k: *k, a_zero: x_zero };
            rt_i8::qmatmul_float_scratch_len(&p, ends.quantize.is_some())
        }
        Int8Op::Unsupported => 0,
    };
    if ends.any() && !(matches!(op, Int8Op::MatMul { .. }) && packed) {
        return invalid("a quantization fused into a product off the packed int8 path");
    }
    let residual = match (&op, &l.residual) {
        (_, None) => None,
        (Int8Op::Conv(g), Some(r)) if packed && rt_i8::qconv_add_runs(&g.params()) => {
            let (at, t) = cx.operand(r.value)?;
            if t.elem != y || t.dims != g.out() {
                return invalid(format!("the fused residual is {t}, not {y}{:?}", g.out()));
            }
            let (conv, res) = (f64::from(ys[0]), f64::from(r.residual.scale));
            let sum = f64::from(r.sum.scale);
            let scales = if r.conv_first {
                rt_i8::add_scales(conv, res, sum)
            } else {
                rt_i8::add_scales(res, conv, sum).map(|s| rt_i8::AddScales { a: s.b, b: s.a, ..s })
            };
            let Some(scales) = scales else {
                return invalid("a fused residual Add of quantizations too far apart");
            };
            let out = QOut { zero: r.sum.zero, min: lo, max: hi };
            Some((at, QResidual { zero: r.residual.zero, scales, out }))
        }
        (_, Some(_)) => return invalid("a residual fused into a product off the im2col path"),
    };
    let at = At { x: X, w, packed, bias, residual, ends };
    Ok(Some(Int8Kernel { op, x, y, x_zero, scales, y_zero, range, at, scratch }))
}

impl Int8Kernel {
    fn requant(&self) -> Requant<'_> {
        Requant { scales: &self.scales, zero: self.y_zero, min: self.range.0, max: self.range.1 }
    }

    fn run<A: Q8 + HostElem, Y: Q8 + HostElem>(
        &self,
        inputs: &[Option<&HostTensor>],
        outputs: &mut [HostTensor],
    ) -> EvalResult {
        // A fused `QuantizeLinear`'s input is float (read below).
        let x =
            if self.at.ends.quantize.is_some() { &[] } else { host_in::<A>(inputs, self.at.x)? };
        let w = host_in::<i8>(inputs, self.at.w)?;
        let bias = match self.at.bias {
            Some(b) => Some(host_in::<i32>(inputs, b)?),
            None => None,
        };
        let rq = self.requant();
        match &self.op {
            Int8Op::Conv(g) => {
                let mut scratch = vec![A::default(); self.scratch];
                let w =
                    if self.at.packed { QConvWeights::Packed(w) } else { QConvWeights::Dense(w) };
                let y = host_out::<Y>(outputs, 0)?;
                if let Some((r, res)) = &self.at.residual {
                    y.copy_from_slice(host_in::<Y>(inputs, *r)?);
                    let w = host_in::<i8>(inputs, self.at.w)?;
                    rt_i8::qconv_add(
                        &g.params(),
                        x,
                        self.x_zero,
                        w,
                        bias,
                        &rq,
                        res,
                        y,
                        &mut scratch,
                    )?;
                    return Ok(());
                }
                rt_i8::qconv(&g.params(), x, self.x_zero, w, bias, &rq, y, &mut scratch)?;
            }
            Int8Op::MatMul { m, n, k } if self.at.ends.any() => {
                let p = QMatMul { m: *m, n: *n, k: *k, a_zero: self.x_zero };
                let Ends { quantize, dequantize } = self.at.ends;
                let rows = match quantize {
                    Some(q) => QRows::Float { x: host_in::<f32>(inputs, self.at.x)?, q },
                    None => QRows::Quantized(x),
                };
                let mut scratch = vec![A::default(); self.scratch];
                let y = match dequantize {
                    Some(q) => QDest::Float { y: host_out::<f32>(outputs, 0)?, q },
                    None => QDest::Quantized(host_out::<Y>(outputs, 0)?),
                };
                rt_i8::qmatmul_float(&p, rows, w, bias, &rq, y, &mut scratch)?;
            }
            Int8Op::MatMul { m, n, k } => {
                let p = QMatMul { m: *m, n: *n, k: *k, a_zero: self.x_zero };
                let w = if self.at.packed {
                    QWeights::Packed(w)
                } else {
                    QWeights::Dense { w, trans: false }
                };
                rt_i8::qmatmul(&p, x, w, bias, &rq, host_out::<Y>(outputs, 0)?)?;
            }
            Int8Op::Unsupported => return Err(EvalError::Type(self.x)),
        }
        Ok(())
    }
}

impl Kernel for Int8Kernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match (self.x, self.y) {
            (ElemType::Int8, ElemType::Int8) => self.run::<i8, i8>(inputs, outputs),
            (ElemType::Int8, ElemType::Uint8) => self.run::<i8, u8>(inputs, outputs),
            (ElemType::Uint8, ElemType::Int8) => self.run::<u8, i8>(inputs, outputs),
            (ElemType::Uint8, ElemType::Uint8) => self.run::<u8, u8>(inputs, outputs),
            (other, _) => Err(EvalError::Type(other)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (in_tokens(io, self.at.x), out_tokens(io, 0));
        let w = in_tokens(io, self.at.w);
        let bias = match self.at.bias {
            Some(b) => {
                let b = in_tokens(io, b);
                quote!(Some(#b))
            }
            None => quote!(None),
        };
        let scales = self.scales.iter().map(|s| scale_tokens(s, rt));
        let (zero, min, max) = (self.y_zero, self.range.0, self.range.1);
        let rq = quote! {
            &#rt::int8::Requant { scales: &[#(#scales),*], zero: #zero, min: #min, max: #max }
        };
        let x_zero = self.x_zero;
        match &self.op {
            Int8Op::Conv(g) => {
                let conv = g.tokens(rt);
                let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
                if let Some((r, res)) = &self.at.residual {
                    // The sum is written over the residual: in place, its
                    // own buffer; else a copy of it first.
                    let copy = if io.in_place {
                        quote!()
                    } else {
                        let r = in_tokens(io, *r);
                        quote!(#y.copy_from_slice(#r);)
                    };
                    let QResidual { zero, scales: s, out } = res;
                    let (sa, sb, so) =
                        (scale_tokens(&s.a, rt), scale_tokens(&s.b, rt), scale_tokens(&s.out, rt));
                    let shift = s.left_shift;
                    let (oz, omin, omax) = (out.zero, out.min, out.max);
                    return quote! {
                        #copy
                        #rt::int8::qconv_add(
                            &#conv, #x, #x_zero, #w, #bias, #rq,
                            &#rt::int8::QResidual {
                                zero: #zero,
                                scales: #rt::int8::AddScales { a: #sa, b: #sb, out: #so, left_shift: #shift },
                                out: #rt::int8::QOut { zero: #oz, min: #omin, max: #omax },
                            },
                            #y, #scratch,
                        )?;
                    };
                }
                if io.in_place {
                    // `in_place` holds: packed weights, one buffer (`y`).
                    return quote! {
                        #rt::int8::qconv_in_place(&#conv, #y, #x_zero, #w, #bias, #rq, #scratch)?;
                    };
                }
                let w = if self.at.packed {
                    quote!(#rt::int8::QConvWeights::Packed(#w))
                } else {
                    quote!(#rt::int8::QConvWeights::Dense(#w))
                };
                quote! {
                    #rt::int8::qconv(&#conv, #x, #x_zero, #w, #bias, #rq, #y, #scratch)?;
                }
            }
            Int8Op::MatMul { m, n, k } if self.at.ends.any() => {
                let (m, n, k) = (lit::usize_lit(*m), lit::usize_lit(*n), lit::usize_lit(*k));
                let linear = |q: &QLinear| {
                    let (s, z) = (lit::f32_lit(q.scale), q.zero);
                    quote!(#rt::int8::QLinear { scale: #s, zero: #z })
                };
                let rows = match &self.at.ends.quantize {
                    Some(q) => {
                        let q = linear(q);
                        quote!(#rt::int8::QRows::Float { x: #x, q: #q })
                    }
                    None => quote!(#rt::int8::QRows::Quantized(#x)),
                };
                let dest = match &self.at.ends.dequantize {
                    Some(q) => {
                        let q = linear(q);
                        quote!(#rt::int8::QDest::Float { y: #y, q: #q })
                    }
                    None => quote!(#rt::int8::QDest::Quantized(#y)),
                };
                let (a, yt) = (rust_type(self.x, rt), rust_type(self.y, rt));
                let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
                quote! {
                    #rt::int8::qmatmul_float::<#a, #yt>(
                        &#rt::int8::QMatMul { m: #m, n: #n, k: #k, a_zero: #x_zero },
                        #rows, #w, #bias, #rq, #dest, #scratch,
                    )?;
                }
            }
            Int8Op::MatMul { m, n, k } => {
                let (m, n, k) = (lit::usize_lit(*m), lit::usize_lit(*n), lit::usize_lit(*k));
                let w = if self.at.packed {
                    quote!(#rt::int8::QWeights::Packed(#w))
                } else {
                    quote!(#rt::int8::QWeights::Dense { w: #w, trans: false })
                };
                quote! {
                    #rt::int8::qmatmul(
                        &#rt::int8::QMatMul { m: #m, n: #n, k: #k, a_zero: #x_zero },
                        #x, #w, #bias, #rq, #y,
                    )?;
                }
            }
            Int8Op::Unsupported => quote!(),
        }
    }

    /// A depthwise or pointwise convolution whose output has its input's
    /// shape and type writes over its input (`int8::qconv_runs_in_place`):
    /// in depthwise-separable models that is most layers, and the arena's
    /// peak loses a whole activation.
    /// With a fused residual, the sum may take the residual's buffer.
    fn in_place(&self) -> Option<usize> {
        if let Some((r, _)) = self.at.residual {
            return Some(r);
        }
        match &self.op {
            Int8Op::Conv(g)
                if self.at.packed
                    && self.x == self.y
                    && rt_i8::qconv_runs_in_place(&g.params()) =>
            {
                Some(self.at.x)
            }
            _ => None,
        }
    }

    /// The scales and zero points were taken at generation time; packed
    /// weights replace the model's.
    fn reads_input(&self, i: usize) -> bool {
        match i {
            X => true,
            W => !self.at.packed,
            XS | XZ | WS | WZ | YS | YZ => false,
            _ => true,
        }
    }

    /// A convolution's block of im2col columns; the chunks of a product's
    /// float rows quantized as it reads them.
    fn scratch(&self) -> Option<TensorType> {
        (self.scratch > 0).then(|| TensorType::new(self.x, vec![self.scratch]))
    }
}
