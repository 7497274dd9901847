//! `TopK`: the `K` largest (or smallest) elements along an axis and their
//! indices, `K` known at generation time or taken from the declared
//! outputs and checked at run time.

use super::{const_scalar, declared, has_output, product, runtime_scalar, wrong_buffer};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, invalid, is_num, unsupported,
};
use onnx_codegen_runtime::extra as rt_extra;
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct TopKRule;

struct TopKPlan {
    shape: AxisShape,
    k: usize,
    dims: Vec<usize>,
    /// K is data: taken from the declared outputs, checked at run time.
    runtime: bool,
}

fn top_k_plan(cx: &NodeCx<'_>) -> OpResult<TopKPlan> {
    let x = cx.input(0)?;
    if !is_num(x.elem) {
        return unsupported(format!("TopK on {} tensors", x.elem));
    }
    if x.rank() == 0 {
        return invalid("TopK needs an input of rank 1 or more");
    }
    let a = axis(cx.int_or("axis", -1), x.rank(), "TopK axis")?;
    let mut runtime = false;
    let k = if cx.version() < 10 {
        cx.int("k")?
    } else {
        cx.input(1)?;
        match const_scalar(cx, 1, "TopK's K")? {
            Some(k) => k,
            None => {
                let Some(t) = cx.declared_output(0).or(cx.declared_output(1)) else {
                    return unsupported(
                        "TopK's K (input 1) is known only at run time and the model does not declare the outputs' shapes",
                    );
                };
                runtime_scalar(cx, 1, "TopK's K")?;
                if t.rank() != x.rank() {
                    return invalid(format!("TopK output is declared as {t}; input is {x}"));
                }
                runtime = true;
                i64::try_from(t.dims[a]).unwrap_or(i64::MAX)
            }
        }
    };
    let n = x.dims[a];
    let k = usize::try_from(k).ok().filter(|&k| k <= n).ok_or_else(|| {
        OpError::Invalid(format!("TopK's k {k} is outside [0, {n}] (axis {a} of {x})"))
    })?;
    let shape =
        AxisShape { outer: product(&x.dims[..a])?, axis: n, inner: product(&x.dims[a + 1..])? };
    let mut dims = x.dims.clone();
    dims[a] = k;
    if runtime && (0..2).any(|j| cx.declared_output(j).is_some_and(|t| t.dims != dims)) {
        return invalid(format!("TopK outputs are declared with dims other than {dims:?}"));
    }
    Ok(TopKPlan { shape, k, dims, runtime })
}

impl OpRule for TopKRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = top_k_plan(cx)?;
        let x = cx.input(0)?;
        Ok(declared(
            cx,
            vec![TensorType::new(x.elem, p.dims.clone()), TensorType::new(ElemType::Int64, p.dims)],
        ))
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = top_k_plan(cx)?;
        if !has_output(cx, 0) || !has_output(cx, 1) {
            return unsupported("TopK with only one of its two outputs used");
        }
        Ok(Lowered::Kernel(Box::new(TopKKernel {
            elem: cx.input(0)?.elem,
            shape: p.shape,
            k: p.k,
            largest: cx.int_or("largest", 1) != 0,
            runtime: p.runtime,
        })))
    }
}

struct TopKKernel {
    elem: ElemType,
    shape: AxisShape,
    k: usize,
    largest: bool,
    /// K (input 1) is read at run time and checked against `k`.
    runtime: bool,
}

fn run_top_k<T: Num + HostElem>(
    k: &TopKKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let [v, i, ..] = outputs else { return Err(wrong_buffer()) };
    let (Some(v), Some(i)) = (v.get_mut::<T>(), i.get_mut::<i64>()) else {
        return Err(wrong_buffer());
    };
    rt_extra::top_k(k.shape, k.k, k.largest, x, v, i)?;
    Ok(())
}

impl Kernel for TopKKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.runtime {
            // Never folded: K is not a constant.
            return Err(EvalError::Type(self.elem));
        }
        crate::by_num_type!(self.elem, run_top_k(self, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        i == 0 || (i == 1 && self.runtime)
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = self.shape;
        let (o, a, n) = (lit::usize_lit(s.outer), lit::usize_lit(s.axis), lit::usize_lit(s.inner));
        let k = lit::usize_lit(self.k);
        let largest = self.largest;
        let (x, v, i) = (&io.inputs[0], &io.outputs[0], &io.outputs[1]);
        let check = match io.inputs.get(1).cloned().flatten() {
            Some(kk) if self.runtime => quote!(#rt::check::count(#kk, #k)?;),
            _ => quote!(),
        };
        quote! {
            #check
            #rt::extra::top_k(
                #rt::norm::AxisShape { outer: #o, axis: #a, inner: #n }, #k, #largest, #x, #v, #i,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn top_k() {
        let a = run(
            11,
            "g () => (float[2,2] v, int64[2,2] i) <float[2,3] x = {1, 3, 2, 5, 5, 4}, int64[1] k = {2}> {
                v, i = TopK (x, k)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 2]"), ty("int64[2, 2]")]);
        assert_eq!(value(&a, 0), [3.0, 2.0, 5.0, 5.0]);
        assert_eq!(value(&a, 1), [1.0, 2.0, 0.0, 1.0]);
        // Smallest along axis 0; ties keep the lower index.
        let a = run(
            11,
            "g () => (int32[1,3] v, int64[1,3] i) <int32[2,3] x = {1, 3, 2, 5, 0, 2}, int64[1] k = {1}> {
                v, i = TopK <axis: int = 0, largest: int = 0> (x, k)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 0.0, 2.0]);
        assert_eq!(value(&a, 1), [0.0, 1.0, 0.0]);
        let a = run(
            1,
            "g (float[2,3] x) => (float[2,1] v, int64[2,1] i) { v, i = TopK <k: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 1]"), ty("int64[2, 1]")]);
        let a = run(
            11,
            "g (float[2,3] x, int64[1] k) => (float[2,?] v, int64[2,?] i) { v, i = TopK (x, k) }",
        );
        assert!(unsupported(&a)[0].contains("K (input 1)"), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (float[2,3] x) => (float[2,4] v, int64[2,4] i) <int64[1] k = {4}> { v, i = TopK (x, k) }",
        );
        assert!(errors(&a)[0].contains("outside"), "{:?}", errors(&a));
    }
}
