//! `CumSum`: running sums along `axis` (given at generation time or read
//! at run time), `exclusive` and `reverse`.

use super::{Scalar, const_scalar, runtime_scalar, wrong_buffer};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis, is_num,
    unsupported,
};
use onnx_codegen_runtime::extra as rt_extra;
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct CumSumRule;

fn cumsum_plan(cx: &NodeCx<'_>) -> OpResult<Scalar> {
    let x = cx.input(0)?;
    if !is_num(x.elem) {
        return unsupported(format!("CumSum on {} tensors", x.elem));
    }
    match const_scalar(cx, 1, "CumSum's axis")? {
        Some(a) => {
            axis(a, x.rank().max(1), "CumSum axis")?;
            Ok(Scalar::Known(a))
        }
        None => {
            runtime_scalar(cx, 1, "CumSum's axis")?;
            Ok(Scalar::Runtime(1))
        }
    }
}

impl OpRule for CumSumRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        cumsum_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let axis = cumsum_plan(cx)?;
        let x = cx.input(0)?;
        Ok(Lowered::Kernel(Box::new(CumSumKernel {
            elem: x.elem,
            dims: x.dims.clone(),
            axis,
            exclusive: cx.int_or("exclusive", 0) != 0,
            reverse: cx.int_or("reverse", 0) != 0,
        })))
    }
}

struct CumSumKernel {
    elem: ElemType,
    dims: Vec<usize>,
    axis: Scalar,
    exclusive: bool,
    reverse: bool,
}

fn run_cumsum<T: Num + HostElem>(
    k: &CumSumKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let a = k.axis.host(inputs)?;
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_extra::cumsum(&k.dims, a, k.exclusive, k.reverse, x, y)?;
    Ok(())
}

impl Kernel for CumSumKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_cumsum(self, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        i == 0 || self.axis == Scalar::Runtime(i)
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let dims = lit::usizes(&self.dims);
        let a = self.axis.tokens(io);
        let (e, r) = (self.exclusive, self.reverse);
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote!(#rt::extra::cumsum(#dims, #a, #e, #r, #x, #y)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn cumsum() {
        let a = run(
            14,
            "g () => (float[2,3] y) <float[2,3] x = {1, 2, 3, 4, 5, 6}, int32 ax = {1}> {
                y = CumSum <reverse: int = 1> (x, ax)
            }",
        );
        assert_eq!(value(&a, 0), [6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
        let a = run(
            14,
            "g () => (int32[2,3] y) <int32[2,3] x = {1, 2, 3, 4, 5, 6}, int64 ax = {-2}> {
                y = CumSum <exclusive: int = 1> (x, ax)
            }",
        );
        assert_eq!(value(&a, 0), [0.0, 0.0, 0.0, 1.0, 2.0, 3.0]);
        let a = run(14, "g (float[2,3] x, int64 ax) => (float[2,3] y) { y = CumSum (x, ax) }");
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a =
            run(14, "g (float[2,3] x) => (float[2,3] y) <int64 ax = {2}> { y = CumSum (x, ax) }");
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
    }
}
