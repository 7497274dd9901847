//! Operators on quantized values ([`Lowering::Requantized`]): an `Add`, a
//! `Mul`, an `AveragePool`, a `GlobalAveragePool` or a `Softmax` that
//! reads int8 (or uint8) inputs of known quantizations and writes its
//! output quantized, in place of the dequantize, compute, quantize steps
//! around it. The integer kernels (`runtime::int8`) rescale with
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
use onnx_codegen_runtime::int8::{self as rt_i8, AddScales, Q8, QOut, QPool, QSoftmax, Scale};
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
    if q.inputs.len() != inputs || cx.node.inputs.len() != inputs {
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
        other => return unsupported(format!("{other} on quantized values")),
    };
    Ok(Plan { op, elem: x.elem, out, q })
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
