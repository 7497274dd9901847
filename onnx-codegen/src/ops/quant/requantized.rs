//! Operators on quantized values ([`Lowering::Requantized`]): an `Add`, a
//! `Mul`, an `AveragePool` or a `GlobalAveragePool` that reads int8 (or
//! uint8) inputs of known quantizations and writes its output quantized,
//! in place of the dequantize, compute, quantize steps around it. The
//! integer kernels (`runtime::int8`) rescale with fixed-point [`Scale`]s
//! computed here, at generation time.

use super::{host_in, host_out, in_tokens, out_tokens};
use crate::emit::lit;
use crate::ir::lowering::{Quantization, Requantized};
use crate::ir::{ElemType, Lowering, TensorType};
use crate::ops::conv::{PoolWindow, window_of};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::int8::{self as rt_i8, Q8, Scale};
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
    Global { planes: usize, size: usize },
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
            let size = x.dims[2..].iter().product();
            let mut out = x.dims[..2].to_vec();
            out.resize(x.dims.len(), 1);
            (Op::Global { planes, size }, out)
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
                let q = |q: Quantization| (f64::from(q.scale), q.zero);
                let params = rt_i8::QAdd::new(q(a), q(b), q(out), (lo, hi)).ok_or_else(|| {
                    crate::ops::OpError::Unsupported(
                        "an Add of quantizations too far apart for the fixed-point kernel".into(),
                    )
                })?;
                Kernel8::Add { params }
            }
            Op::Binary { mul: true } => {
                let (a, b) = (p.q.inputs[0], p.q.inputs[1]);
                let real = f64::from(a.scale) * f64::from(b.scale) / f64::from(out.scale);
                Kernel8::Mul {
                    a_zero: a.zero,
                    b_zero: b.zero,
                    scale: scale(real)?,
                    out,
                    range: (lo, hi),
                }
            }
            Op::Pool { window, count_include_pad } => {
                let x = p.q.inputs[0];
                let real = f64::from(x.scale) / f64::from(out.scale);
                Kernel8::Pool {
                    window,
                    count_include_pad,
                    x,
                    scale: scale(real)?,
                    out,
                    range: (lo, hi),
                }
            }
            Op::Global { planes, size } => {
                let x = p.q.inputs[0];
                let real = f64::from(x.scale) / f64::from(out.scale);
                Kernel8::Global { planes, size, x, scale: scale(real)?, out, range: (lo, hi) }
            }
        };
        Ok(Lowered::Kernel(Box::new(Requant8 { elem: p.elem, kernel })))
    }
}

/// An integer kernel call with its generation-time constants.
enum Kernel8 {
    Add {
        params: rt_i8::QAdd,
    },
    Mul {
        a_zero: i32,
        b_zero: i32,
        scale: Scale,
        out: Quantization,
        range: (i32, i32),
    },
    Pool {
        window: PoolWindow,
        count_include_pad: bool,
        x: Quantization,
        scale: Scale,
        out: Quantization,
        range: (i32, i32),
    },
    Global {
        planes: usize,
        size: usize,
        x: Quantization,
        scale: Scale,
        out: Quantization,
        range: (i32, i32),
    },
}

struct Requant8 {
    elem: ElemType,
    kernel: Kernel8,
}

impl Requant8 {
    fn run<T: Q8 + HostElem>(
        &self,
        inputs: &[Option<&HostTensor>],
        outputs: &mut [HostTensor],
    ) -> EvalResult {
        let x = host_in::<T>(inputs, 0)?;
        let y = host_out::<T>(outputs, 0)?;
        match &self.kernel {
            Kernel8::Add { params } => rt_i8::qadd(params, x, host_in::<T>(inputs, 1)?, y)?,
            Kernel8::Mul { a_zero, b_zero, scale, out, range } => {
                let rq = rt_i8::Requant {
                    scales: core::slice::from_ref(scale),
                    zero: out.zero,
                    min: range.0,
                    max: range.1,
                };
                rt_i8::qmul(x, *a_zero, host_in::<T>(inputs, 1)?, *b_zero, &rq, y)?
            }
            Kernel8::Pool { window, count_include_pad, x: xq, scale, out, range } => {
                let rq = rt_i8::Requant {
                    scales: core::slice::from_ref(scale),
                    zero: out.zero,
                    min: range.0,
                    max: range.1,
                };
                let params = onnx_codegen_runtime::pool::Pool {
                    planes: window.planes,
                    window: window.geom.window(),
                };
                rt_i8::qavgpool(&params, *count_include_pad, x, xq.zero, &rq, y)?
            }
            Kernel8::Global { planes, size, x: xq, scale, out, range } => {
                let rq = rt_i8::Requant {
                    scales: core::slice::from_ref(scale),
                    zero: out.zero,
                    min: range.0,
                    max: range.1,
                };
                rt_i8::qglobal_avgpool(*planes, *size, x, xq.zero, &rq, y)?
            }
        }
        Ok(())
    }
}

fn requant_tokens(
    scale: &Scale,
    out: &Quantization,
    range: (i32, i32),
    rt: &TokenStream,
) -> TokenStream {
    let (m, s, z, lo, hi) = (scale.mult, scale.shift, out.zero, range.0, range.1);
    quote!(&#rt::int8::Requant { scales: &[#rt::int8::Scale { mult: #m, shift: #s }], zero: #z, min: #lo, max: #hi })
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
        match &self.kernel {
            Kernel8::Add { params: p } => {
                let scale = |s: &Scale| {
                    let (m, sh) = (s.mult, s.shift);
                    quote!(#rt::int8::Scale { mult: #m, shift: #sh })
                };
                let (sa, sb, so) = (scale(&p.a_scale), scale(&p.b_scale), scale(&p.out_scale));
                let (za, zb, z, lo, hi) = (p.a_zero, p.b_zero, p.zero, p.min, p.max);
                let b = in_tokens(io, 1);
                quote! {
                    #rt::int8::qadd(
                        &#rt::int8::QAdd {
                            a_zero: #za, a_scale: #sa, b_zero: #zb, b_scale: #sb,
                            out_scale: #so, zero: #z, min: #lo, max: #hi,
                        },
                        #x, #b, #y,
                    )?;
                }
            }
            Kernel8::Mul { a_zero, b_zero, scale, out, range } => {
                let rq = requant_tokens(scale, out, *range, rt);
                let b = in_tokens(io, 1);
                quote!(#rt::int8::qmul(#x, #a_zero, #b, #b_zero, #rq, #y)?;)
            }
            Kernel8::Pool { window, count_include_pad, x: xq, scale, out, range } => {
                let rq = requant_tokens(scale, out, *range, rt);
                let (planes, w) = (lit::usize_lit(window.planes), window.geom.tokens(rt));
                let z = xq.zero;
                quote! {
                    #rt::int8::qavgpool(
                        &#rt::pool::Pool { planes: #planes, window: #w },
                        #count_include_pad, #x, #z, #rq, #y,
                    )?;
                }
            }
            Kernel8::Global { planes, size, x: xq, scale, out, range } => {
                let rq = requant_tokens(scale, out, *range, rt);
                let (planes, size, z) = (lit::usize_lit(*planes), lit::usize_lit(*size), xq.zero);
                quote!(#rt::int8::qglobal_avgpool(#planes, #size, #x, #z, #rq, #y)?;)
            }
        }
    }
}
