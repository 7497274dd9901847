//! Softmax, LogSoftmax and Hardmax over one axis.
//!
//! Before opset 13 these ops flatten the input to 2-D at `axis` (default 1)
//! and normalise over everything from `axis` on; from 13 they normalise over
//! the one axis (default -1). Both are `[outer, axis, inner]` views.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis,
    unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
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

fn axis_shape(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<AxisShape> {
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
        Ok(Lowered::Kernel(Box::new(SoftmaxKernel {
            kind,
            elem: outputs.first().map_or(x.elem, |t| t.elem),
            shape: axis_shape(cx, &x.dims)?,
        })))
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Softmax,
    LogSoftmax,
    Hardmax,
}

struct SoftmaxKernel {
    kind: Kind,
    elem: ElemType,
    shape: AxisShape,
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
        crate::by_float_type!(self.elem, run(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
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
