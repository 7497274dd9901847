//! Softmax, LogSoftmax and Hardmax over one axis.
//!
//! Before opset 13 these ops flatten the input to 2-D at `axis` (default 1)
//! and normalise over everything from `axis` on; from 13 they normalise over
//! the one axis (default -1). Both are `[outer, axis, inner]` views.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis,
    invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::lowering::{SoftmaxMask, SoftmaxPrologue};
use crate::ir::{ElemType, Lowering, TensorType};
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::num::Float;
use onnx_codegen_runtime::softmax as rt_softmax;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Softmax" | "LogSoftmax" | "Hardmax" => Some(&SoftmaxRule),
        _ => None,
    }
}

struct SoftmaxRule;

/// The `[outer, axis, inner]` view of `dims` the node normalizes along.
pub(crate) fn axis_shape(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<AxisShape> {
    let rank = dims.len().max(1);
    let product = |d: &[usize]| d.iter().product::<usize>();
    if cx.version() < 13 {
        let a = axis(cx.int_or("axis", 1), rank, "axis")?.min(dims.len());
        Ok(AxisShape { outer: product(&dims[..a]), axis: product(&dims[a..]), inner: 1 })
    } else {
        let a = axis(cx.int_or("axis", -1), rank, "axis")?;
        if dims.is_empty() {
            return Ok(AxisShape { outer: 1, axis: 1, inner: 1 });
        }
        Ok(AxisShape { outer: product(&dims[..a]), axis: dims[a], inner: product(&dims[a + 1..]) })
    }
}

impl OpRule for SoftmaxRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        if !super::is_float_num(x.elem) {
            return unsupported(format!("{} on {} tensors", cx.node.op.op_type, x.elem));
        }
        axis_shape(cx, &x.dims)?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let x = cx.input(0)?;
        let kind = match cx.node.op.op_type.as_str() {
            "Softmax" => Kind::Softmax,
            "LogSoftmax" => Kind::LogSoftmax,
            _ => Kind::Hardmax,
        };
        let none = SoftmaxPrologue::default();
        let prologue = match cx.lowering() {
            None => &none,
            Some(Lowering::Softmax(p)) => p,
            Some(other) => return invalid(format!("a Softmax cannot run as {other:?}")),
        };
        let mask = match &prologue.mask {
            None => None,
            Some(SoftmaxMask { mask, fill, keep }) => {
                let (at, m) = cx.operand(*mask)?;
                if m.elem != ElemType::Bool || m.dims.len() > x.dims.len() {
                    return unsupported("a Softmax mask that is not a bool tensor of lower rank");
                }
                Some(MaskPlan {
                    at,
                    fill: *fill,
                    keep: *keep,
                    strides: super::broadcast_strides(&m.dims, &x.dims),
                })
            }
        };
        let divisor = prologue.divisor;
        let shape = axis_shape(cx, &x.dims)?;
        let fused = divisor.is_some() || mask.is_some();
        if fused
            && (x.elem != ElemType::Float || shape.inner != 1 || !matches!(kind, Kind::Softmax))
        {
            return unsupported("a scaled or masked Softmax other than f32 over the last axis");
        }
        Ok(Lowered::Kernel(Box::new(SoftmaxKernel {
            kind,
            elem: outputs.first().map_or(x.elem, |t| t.elem),
            shape,
            dims: x.dims.clone(),
            divisor,
            mask,
        })))
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

/// A mask read as the runtime's `softmax::Mask`.
struct MaskPlan {
    /// The read holding the bool mask.
    at: usize,
    fill: f32,
    keep: bool,
    /// The mask's strides over the input's dims.
    strides: Vec<isize>,
}

struct SoftmaxKernel {
    kind: Kind,
    elem: ElemType,
    shape: AxisShape,
    /// The input's dims (a mask broadcasts over them).
    dims: Vec<usize>,
    divisor: Option<f32>,
    mask: Option<MaskPlan>,
}

/// The exact kernels in turn for a scaled or masked Softmax (constant
/// folding): `Div`, `Where`, then `softmax`.
fn run_fused(
    k: &SoftmaxKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    use onnx_codegen_runtime::elementwise::{self as rt_ew, Arith, Broadcast};
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<f32>());
    let y = outputs.first_mut().and_then(|t| t.get_mut::<f32>());
    let (Some(x), Some(y)) = (x, y) else { return Err(EvalError::Type(k.elem)) };
    let mut v = x.to_vec();
    let rank = k.dims.len();
    let mut contig = vec![0isize; rank];
    onnx_codegen_runtime::shape::contiguous_strides(&k.dims, &mut contig)?;
    let zeros = vec![0isize; rank];
    if let Some(c) = k.divisor {
        let p = Broadcast { shape: &k.dims, strides: [&contig, &zeros] };
        rt_ew::arith(Arith::Div, &p, x, &[c], &mut v)?;
    }
    if let Some(m) = &k.mask {
        let mask = match super::host_read(inputs, Some(m.at)).map(|t| &t.data) {
            Some(super::HostData::Bool(b)) => b.as_slice(),
            _ => return Err(EvalError::Type(ElemType::Bool)),
        };
        let mut w = vec![0.0f32; v.len()];
        let fill = [m.fill];
        let (a, b, sa, sb): (&[f32], &[f32], &[isize], &[isize]) =
            if m.keep { (&v, &fill, &contig, &zeros) } else { (&fill, &v, &zeros, &contig) };
        let p = Broadcast { shape: &k.dims, strides: [&m.strides, sa, sb] };
        rt_ew::where_(&p, mask, a, b, &mut w)?;
        v = w;
    }
    rt_softmax::softmax(k.shape, &v, y)?;
    Ok(())
}

fn run<T: Float + HostElem>(
    k: &SoftmaxKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>());
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>());
    let (Some(x), Some(y)) = (x, y) else { return Err(EvalError::Type(k.elem)) };
    match k.kind {
        Kind::Softmax => rt_softmax::softmax(k.shape, x, y)?,
        Kind::LogSoftmax => rt_softmax::log_softmax(k.shape, x, y)?,
        Kind::Hardmax => rt_softmax::hardmax(k.shape, x, y)?,
    }
    Ok(())
}

impl Kernel for SoftmaxKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.divisor.is_some() || self.mask.is_some() {
            return run_fused(self, inputs, outputs);
        }
        crate::by_float_type!(self.elem, run(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        if self.divisor.is_some() || self.mask.is_some() {
            return self.emit_fused(io);
        }
        let f = match self.kind {
            // f32 takes the vectorised entry point (a few ulp from the exact one).
            Kind::Softmax if self.elem == ElemType::Float => quote!(ssoftmax),
            Kind::Softmax => quote!(softmax),
            Kind::LogSoftmax => quote!(log_softmax),
            Kind::Hardmax => quote!(hardmax),
        };
        let s = self.shape;
        let (o, a, i) = (lit::usize_lit(s.outer), lit::usize_lit(s.axis), lit::usize_lit(s.inner));
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote! {
            #rt::softmax::#f(#rt::norm::AxisShape { outer: #o, axis: #a, inner: #i }, #x, #y)?;
        }
    }
}

impl SoftmaxKernel {
    /// The call of `ssoftmax_scaled` (f32, last axis; checked by `lower`).
    fn emit_fused(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = self.shape;
        let (o, a, i) = (lit::usize_lit(s.outer), lit::usize_lit(s.axis), lit::usize_lit(s.inner));
        let divisor = match self.divisor {
            Some(c) => {
                let c = lit::float_in(f64::from(c), ElemType::Float, rt);
                quote!(Some(#c))
            }
            None => quote!(None),
        };
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        let mask_in = self.mask.as_ref().and_then(|m| io.read(Some(m.at)));
        let (mask, mask_in) = match (&self.mask, mask_in) {
            (Some(m), Some(input)) => {
                let shape = lit::usizes(&self.dims);
                let strides = lit::isizes(&m.strides);
                let fill = lit::float_in(f64::from(m.fill), ElemType::Float, rt);
                let keep = m.keep;
                (
                    quote!(Some(#rt::softmax::Mask {
                        shape: #shape, strides: #strides, fill: #fill, keep: #keep,
                    })),
                    input.clone(),
                )
            }
            (None, _) => (quote!(None), quote!(&[] as &[bool])),
            // `lower` required the mask input; without it the call would
            // silently skip the mask, so the step fails instead.
            (Some(_), None) => return quote!(return Err(#rt::Error::ShapeMismatch);),
        };
        quote! {
            #rt::softmax::ssoftmax_scaled(
                #rt::norm::AxisShape { outer: #o, axis: #a, inner: #i },
                &#rt::softmax::Prologue { divisor: #divisor, mask: #mask },
                #x, #mask_in, #y,
            )?;
        }
    }
}
