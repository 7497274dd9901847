//! Operators on quantized values ([`Lowering::Requantized`]): an `Add`, a
//! `Mul`, an `AveragePool`, a `GlobalAveragePool`, a `Softmax` or an
//! inference `BatchNormalization` that reads int8 (or uint8) inputs of
//! known quantizations and writes its output quantized, in place of the
//! dequantize, compute, quantize steps around it. The BatchNormalization
//! becomes a per-channel affine map in fixed point (`int8::qaffine`), its
//! constants folded at generation time. The integer kernels (`runtime::int8`) rescale with
//! fixed-point [`Scale`]s computed here, at generation time; the Softmax
//! runs onnxruntime's QLinearSoftmax arithmetic (`int8::qsoftmax`), with
//! its table of exponentials computed here.

use super::{host_in, host_out, in_tokens, out_tokens, scale_tokens};
use crate::emit::lit;
use crate::ir::lowering::Requantized;
use crate::ir::{ElemType, Lowering, TensorType};
use crate::ops::conv::{PoolWindow, window_of};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::int8::{
    self as rt_i8, AddScales, Affine, Q8, QOut, QPool, QSoftmax, Scale,
};
use onnx_codegen_runtime::norm::AxisShape;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule of a node lowered to [`Lowering::Requantized`].
pub struct RequantizedRule;

/// What the node computes on its quantized inputs.
#[derive(Clone, Debug)]
enum Op {
    /// `Add` or `Mul` of two tensors of one shape.
    Binary { mul: bool },
    /// `AveragePool` on its window.
    Pool { window: PoolWindow, count_include_pad: bool },
    /// `GlobalAveragePool`: `planes` means of `size` values.
    Global { planes: usize },
    /// `Softmax` along the middle axis of `shape`.
    Softmax { shape: AxisShape },
    /// `BatchNormalization` over `[N, channels, inner]`: per channel
    /// `(x - mean) * gamma / sqrt(var + epsilon) + beta`, as `m x + b`.
    Affine { channels: usize, inner: usize, m: Vec<f64>, b: Vec<f64> },
}

struct Plan {
    op: Op,
    elem: ElemType,
    out: Vec<usize>,
    q: Requantized,
}

fn requantized<'a>(cx: &NodeCx<'a>) -> OpResult<&'a Requantized> {
    match cx.lowering() {
        Some(Lowering::Requantized(q)) => Ok(q),
        _ => invalid("a requantized operator without its quantizations"),
    }
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Plan> {
    let q = requantized(cx)?.clone();
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Int8 | ElemType::Uint8) {
        return invalid(format!("a requantized operator on {x}: int8 or uint8 only"));
    }
    let op = cx.node.op.op_type.as_str();
    let inputs = if matches!(op, "Add" | "Mul") { 2 } else { 1 };
    let constants = if op == "BatchNormalization" { 4 } else { 0 };
    if q.inputs.len() != inputs || cx.node.inputs.len() != inputs + constants {
        return invalid(format!("a requantized {op} with {} quantized inputs", q.inputs.len()));
    }
    let (op, out) = match op {
        "Add" | "Mul" => {
            let b = cx.input(1)?;
            if b.elem != x.elem || b.dims != x.dims {
                return invalid(format!("a requantized {op} of {x} and {b}: one type, one shape"));
            }
            (Op::Binary { mul: op == "Mul" }, x.dims.clone())
        }
        "AveragePool" => {
            let window = window_of(cx, x)?;
            let count_include_pad = cx.int_or("count_include_pad", 0) != 0;
            let out = window.out.clone();
            (Op::Pool { window, count_include_pad }, out)
        }
        "GlobalAveragePool" => {
            if x.dims.len() < 3 {
                return invalid(format!("GlobalAveragePool needs [N, C, spatial...], got {x}"));
            }
            let planes = x.dims[0] * x.dims[1];
            let mut out = x.dims[..2].to_vec();
            out.resize(x.dims.len(), 1);
            (Op::Global { planes }, out)
        }
        "Softmax" => {
            let shape = crate::ops::softmax::axis_shape(cx, &x.dims)?;
            (Op::Softmax { shape }, x.dims.clone())
        }
        "BatchNormalization" => (batch_norm(cx, &x.dims)?, x.dims.clone()),
        other => return unsupported(format!("{other} on quantized values")),
    };
    Ok(Plan { op, elem: x.elem, out, q })
}

/// A quantized `BatchNormalization`'s map: `y = m x + b` per channel, from
/// its constant scale, bias, mean and variance (in `f64`).
fn batch_norm(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<Op> {
    if dims.len() < 2 {
        return invalid(format!("BatchNormalization needs [N, C, ...], got {dims:?}"));
    }
    let (channels, inner) = (dims[1], dims[2..].iter().product::<usize>());
    let param = |i: usize, what: &str| -> OpResult<Vec<f64>> {
        let t = cx.constant(i).ok_or_else(|| {
            crate::ops::OpError::Unsupported(format!(
                "a quantized BatchNormalization whose {what} is not constant"
            ))
        })?;
        match t.to_f64s() {
            Some(v) if v.len() == channels => Ok(v),
            _ => invalid(format!("BatchNormalization's {what} must hold {channels} numbers")),
        }
    };
    let (gamma, beta, mean, var) =
        (param(1, "scale")?, param(2, "bias")?, param(3, "mean")?, param(4, "variance")?);
    let epsilon = f64::from(cx.float_or("epsilon", 1e-5));
    let a: Vec<f64> = gamma.iter().zip(&var).map(|(g, v)| g / (v + epsilon).sqrt()).collect();
    let b = beta.iter().zip(&mean).zip(&a).map(|((beta, mean), a)| beta - mean * a).collect();
    Ok(Op::Affine { channels, inner, m: a, b })
}

impl OpRule for RequantizedRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(cx)?;
        let (lo, hi) = if p.elem == ElemType::Int8 { (-128, 127) } else { (0, 255) };
        let out = p.q.output;
        let scale = |real: f64| {
            Scale::from_real(real).ok_or_else(|| {
                crate::ops::OpError::Unsupported(format!(
                    "a requantization by {real}, out of the fixed-point range"
                ))
            })
        };
        let kernel = match p.op {
            Op::Binary { mul: false } => {
                let (a, b) = (p.q.inputs[0], p.q.inputs[1]);
                let scales =
                    rt_i8::add_scales(f64::from(a.scale), f64::from(b.scale), f64::from(out.scale))
                        .ok_or_else(|| {
                            crate::ops::OpError::Unsupported(
                                "an Add of quantizations too far apart for the fixed-point kernel"
                                    .into(),
                            )
                        })?;
                Kernel8::Add { a_zero: a.zero, b_zero: b.zero, scales }
            }
            Op::Binary { mul: true } => {
                let (a, b) = (p.q.inputs[0], p.q.inputs[1]);
                let real = f64::from(a.scale) * f64::from(b.scale) / f64::from(out.scale);
                Kernel8::Mul { a_zero: a.zero, b_zero: b.zero, scale: scale(real)? }
            }
            Op::Pool { window, count_include_pad } => {
                let x = p.q.inputs[0];
                let real = f64::from(x.scale) / f64::from(out.scale);
                Kernel8::Pool { window, count_include_pad, x_zero: x.zero, scale: scale(real)? }
            }
            Op::Global { planes } => {
                let x = p.q.inputs[0];
                let real = f64::from(x.scale) / f64::from(out.scale);
                Kernel8::Global { planes, x_zero: x.zero, scale: scale(real)? }
            }
            Op::Softmax { shape } => {
                let table = rt_i8::softmax_table(p.q.inputs[0].scale, shape.axis);
                let p = QSoftmax {
                    outer: shape.outer,
                    axis: shape.axis,
                    inner: shape.inner,
                    multiplier: rt_i8::softmax_multiplier(out.scale),
                };
                Kernel8::Softmax { p, table: Box::new(table) }
            }
            Op::Affine { channels, inner, m, b } => {
                // real y = sx (x - zx) m + b; quantized: y / sy + zy.
                let (x, sy) = (p.q.inputs[0], f64::from(out.scale));
                let sx = f64::from(x.scale);
                let ch = m
                    .iter()
                    .zip(&b)
                    .map(|(&m, &b)| {
                        Affine::from_real(sx * m / sy, b / sy, x.zero).ok_or_else(|| {
                            crate::ops::OpError::Unsupported(format!(
                                "a quantized BatchNormalization of multiplier {} and offset {}, out of the fixed-point range",
                                sx * m / sy,
                                b / sy
                            ))
                        })
                    })
                    .collect::<OpResult<Vec<_>>>()?;
                Kernel8::Affine { channels, inner, ch }
            }
        };
        let out = QOut { zero: out.zero, min: lo, max: hi };
        Ok(Lowered::Kernel(Box::new(Requant8 { elem: p.elem, kernel, out })))
    }
}

/// An integer kernel call with its generation-time constants.
enum Kernel8 {
    Add { a_zero: i32, b_zero: i32, scales: AddScales },
    Mul { a_zero: i32, b_zero: i32, scale: Scale },
    Pool { window: PoolWindow, count_include_pad: bool, x_zero: i32, scale: Scale },
    Global { planes: usize, x_zero: i32, scale: Scale },
    Softmax { p: QSoftmax, table: Box<[f32; 256]> },
    Affine { channels: usize, inner: usize, ch: Vec<Affine> },
}

struct Requant8 {
    elem: ElemType,
    kernel: Kernel8,
    out: QOut,
}

impl Requant8 {
    fn run<T: Q8 + HostElem>(
        &self,
        inputs: &[Option<&HostTensor>],
        outputs: &mut [HostTensor],
    ) -> EvalResult {
        let x = host_in::<T>(inputs, 0)?;
        let y = host_out::<T>(outputs, 0)?;
        let out = &self.out;
        match &self.kernel {
            Kernel8::Add { a_zero, b_zero, scales } => {
                let b = host_in::<T>(inputs, 1)?;
                rt_i8::qadd(x, *a_zero, b, *b_zero, scales, y, out)?
            }
            Kernel8::Mul { a_zero, b_zero, scale } => {
                let b = host_in::<T>(inputs, 1)?;
                rt_i8::qmul(x, *a_zero, b, *b_zero, *scale, y, out)?
            }
            Kernel8::Pool { window, count_include_pad, x_zero, scale } => {
                let p = QPool {
                    planes: window.planes,
                    window: window.geom.window(),
                    count_include_pad: *count_include_pad,
                    x_zero: *x_zero,
                    scale: *scale,
                };
                rt_i8::qavgpool(&p, x, y, out)?
            }
            Kernel8::Global { planes, x_zero, scale } => {
                rt_i8::qglobal_avgpool(x, *planes, *x_zero, *scale, y, out)?
            }
            Kernel8::Softmax { p, table } => rt_i8::qsoftmax(x, p, table, y, out)?,
            Kernel8::Affine { channels, inner, ch } => {
                rt_i8::qaffine(x, *channels, *inner, ch, y, out)?
            }
        }
        Ok(())
    }
}

impl Kernel for Requant8 {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.elem {
            ElemType::Int8 => self.run::<i8>(inputs, outputs),
            ElemType::Uint8 => self.run::<u8>(inputs, outputs),
            other => Err(EvalError::Type(other)),
        }
    }

    fn in_place(&self) -> Option<usize> {
        matches!(self.kernel, Kernel8::Affine { .. }).then_some(0)
    }

    fn reads_input(&self, i: usize) -> bool {
        // A BatchNormalization's constants were folded into its map.
        i == 0 || !matches!(self.kernel, Kernel8::Affine { .. })
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (in_tokens(io, 0), out_tokens(io, 0));
        let QOut { zero, min, max } = self.out;
        let out = quote!(&#rt::int8::QOut { zero: #zero, min: #min, max: #max });
        match &self.kernel {
            Kernel8::Add { a_zero, b_zero, scales } => {
                let (sa, sb, so) = (
                    scale_tokens(&scales.a, rt),
                    scale_tokens(&scales.b, rt),
                    scale_tokens(&scales.out, rt),
                );
                let shift = scales.left_shift;
                let b = in_tokens(io, 1);
                quote! {
                    #rt::int8::qadd(
                        #x, #a_zero, #b, #b_zero,
                        &#rt::int8::AddScales { a: #sa, b: #sb, out: #so, left_shift: #shift },
                        #y, #out,
                    )?;
                }
            }
            Kernel8::Mul { a_zero, b_zero, scale } => {
                let s = scale_tokens(scale, rt);
                let b = in_tokens(io, 1);
                quote!(#rt::int8::qmul(#x, #a_zero, #b, #b_zero, #s, #y, #out)?;)
            }
            Kernel8::Pool { window, count_include_pad, x_zero, scale } => {
                let (planes, w) = (lit::usize_lit(window.planes), window.geom.tokens(rt));
                let s = scale_tokens(scale, rt);
                quote! {
                    #rt::int8::qavgpool(
                        &#rt::int8::QPool {
                            planes: #planes, window: #w, count_include_pad: #count_include_pad,
                            x_zero: #x_zero, scale: #s,
                        },
                        #x, #y, #out,
                    )?;
                }
            }
            Kernel8::Global { planes, x_zero, scale } => {
                let planes = lit::usize_lit(*planes);
                let s = scale_tokens(scale, rt);
                quote!(#rt::int8::qglobal_avgpool(#x, #planes, #x_zero, #s, #y, #out)?;)
            }
            Kernel8::Affine { channels, inner, ch } => {
                let (c, i) = (lit::usize_lit(*channels), lit::usize_lit(*inner));
                let ch = ch.iter().map(|a| {
                    let (m, b, s) = (a.mult, a.bias, a.shift);
                    quote!(#rt::int8::Affine { mult: #m, bias: #b, shift: #s })
                });
                let ch = quote!(&[#(#ch),*]);
                if io.in_place {
                    quote!(#rt::int8::qaffine_in_place(#y, #c, #i, #ch, #out)?;)
                } else {
                    quote!(#rt::int8::qaffine(#x, #c, #i, #ch, #y, #out)?;)
                }
            }
            Kernel8::Softmax { p, table } => {
                let (outer, axis, inner) =
                    (lit::usize_lit(p.outer), lit::usize_lit(p.axis), lit::usize_lit(p.inner));
                let m = lit::f32_lit(p.multiplier);
                let table = table.iter().map(|&v| lit::f32_lit(v));
                quote! {
                    #rt::int8::qsoftmax(
                        #x,
                        &#rt::int8::QSoftmax { outer: #outer, axis: #axis, inner: #inner, multiplier: #m },
                        &[#(#table),*],
                        #y, #out,
                    )?;
                }
            }
        }
    }
}
