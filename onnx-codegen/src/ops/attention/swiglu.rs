//! `SwiGLU`: `A * sigmoid(alpha * A) * B`, element by element.

use super::{host_in, real_input, same_elem, wrong_buffer};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
};
use onnx_codegen_runtime::attention::{self as rt_att, Real};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct SwiGluRule;

fn swiglu_plan(cx: &NodeCx<'_>) -> OpResult<ElemType> {
    let a = real_input(cx, 0, "A")?;
    let b = same_elem(cx, 1, a.elem, "B")?;
    if a.dims != b.dims {
        return invalid(format!("SwiGLU's A {a} and B {b} should have the same shape"));
    }
    Ok(a.elem)
}

impl OpRule for SwiGluRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        swiglu_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = swiglu_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(SwiGluKernel {
            elem,
            alpha: f64::from(cx.float_or("alpha", 1.0)),
        })))
    }
}

struct SwiGluKernel {
    elem: ElemType,
    alpha: f64,
}

fn run_swiglu<T: Real + HostElem>(
    k: &SwiGluKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let y = outputs.get_mut(0).and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_att::swiglu(k.alpha, host_in::<T>(inputs, 0)?, host_in::<T>(inputs, 1)?, y)?;
    Ok(())
}

impl Kernel for SwiGluKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_swiglu(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let alpha = lit::f64_lit(self.alpha);
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::attention::swiglu(#alpha, #a, #b, #y)?;)
    }
}
