//! `OneHot`: indices expanded to `depth` slots along `axis`, filled with
//! the off and on values; a `depth` given as data is taken from the
//! declared output and checked at run time.

use super::{const_scalar, data_in, data_out, host_i64s, is_data, product, wrong_buffer};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::Data;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, invalid, is_num, unsupported,
};
use onnx_codegen_runtime::extra as rt_extra;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct OneHotRule;

struct OneHotPlan {
    outer: usize,
    depth: usize,
    inner: usize,
    dims: Vec<usize>,
    /// The depth is data: taken from the declared output, checked at run time.
    runtime: bool,
}

fn one_hot_plan(cx: &NodeCx<'_>) -> OpResult<OneHotPlan> {
    let ind = cx.input(0)?;
    let values = cx.input(2)?;
    if !is_num(ind.elem) {
        return unsupported(format!("OneHot with indices of type {}", ind.elem));
    }
    if !is_data(values.elem) {
        return unsupported(format!("OneHot with values of type {}", values.elem));
    }
    if values.numel() != Some(2) {
        return invalid(format!("OneHot's values must hold 2 elements (off, on), it is {values}"));
    }
    cx.input(1)?;
    let r = ind.rank();
    let a = axis(cx.int_or("axis", -1), r + 1, "OneHot axis")?;
    let runtime = cx.constant(1).is_none();
    let depth = match const_scalar(cx, 1, "OneHot's depth")? {
        Some(d) => d,
        None => {
            let Some(t) = cx.declared_output(0) else {
                return unsupported(
                    "OneHot's depth (input 1) is known only at run time and the model does not declare the output's shape",
                );
            };
            if !is_num(cx.input(1)?.elem) || cx.input(1)?.numel() != Some(1) {
                return invalid("OneHot's depth must be one number");
            }
            if t.rank() != r + 1 {
                return invalid(format!("OneHot output is declared as {t}; indices are {ind}"));
            }
            i64::try_from(t.dims[a]).unwrap_or(i64::MAX)
        }
    };
    let depth = usize::try_from(depth).ok().filter(|&d| d > 0).ok_or_else(|| {
        OpError::Invalid(format!("OneHot's depth must be positive, it is {depth}"))
    })?;
    let mut dims = ind.dims.clone();
    dims.insert(a, depth);
    product(&dims)?;
    if runtime && cx.declared_output(0).is_some_and(|t| t.dims != dims) {
        return invalid(format!("OneHot output is declared with dims other than {dims:?}"));
    }
    Ok(OneHotPlan {
        outer: product(&ind.dims[..a])?,
        depth,
        inner: product(&ind.dims[a..])?,
        dims,
        runtime,
    })
}

impl OpRule for OneHotRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = one_hot_plan(cx)?;
        Ok(vec![TensorType::new(cx.input(2)?.elem, p.dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = one_hot_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(OneHotKernel {
            elem: cx.input(2)?.elem,
            outer: p.outer,
            depth: p.depth,
            inner: p.inner,
            runtime: p.runtime,
        })))
    }
}

struct OneHotKernel {
    elem: ElemType,
    outer: usize,
    depth: usize,
    inner: usize,
    /// The depth (input 1) is read at run time and checked against `depth`.
    runtime: bool,
}

fn run_one_hot<T: Data>(
    k: &OneHotKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let ind = inputs.first().copied().flatten().and_then(host_i64s).ok_or(wrong_buffer())?;
    let values = data_in::<T>(inputs, 2)?;
    let y = data_out::<T>(outputs, 0)?;
    rt_extra::one_hot(k.outer, k.depth, k.inner, &ind, values, y)?;
    Ok(())
}

impl Kernel for OneHotKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.runtime {
            // Never folded: the depth is not a constant.
            return Err(EvalError::Type(self.elem));
        }
        by_data_type!(self.elem, run_one_hot(self, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        i != 1 || self.runtime
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (o, d, n) =
            (lit::usize_lit(self.outer), lit::usize_lit(self.depth), lit::usize_lit(self.inner));
        let (ind, values, y) = (&io.inputs[0], &io.inputs[2], &io.outputs[0]);
        let check = match io.inputs.get(1).cloned().flatten() {
            Some(depth) if self.runtime => quote!(#rt::check::count(#depth, #d)?;),
            _ => quote!(),
        };
        quote!(#check #rt::extra::one_hot(#o, #d, #n, #ind, #values, #y)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn one_hot() {
        // Indices {0, -1} with depth 3 on axis 0: y is [3, 2].
        let a = run(
            11,
            "g () => (float[3,2] y) <int64[2] i = {0, -1}, float d = {3}, float[2] v = {0, 1}> {
                y = OneHot <axis: int = 0> (i, d, v)
            }",
        );
        assert_eq!(types(&a), [ty("float[3, 2]")]);
        assert_eq!(value(&a, 0), [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]);
        let a = run(
            11,
            "g (int64[2] i) => (int32[2,4] y) <int64 d = {4}, int32[2] v = {0, 1}> {
                y = OneHot (i, d, v)
            }",
        );
        assert_eq!(types(&a), [ty("int32[2, 4]")]);
        let a = run(
            11,
            "g (int64[2] i, int64 d, float[2] v) => (float[2,?] y) { y = OneHot (i, d, v) }",
        );
        assert!(unsupported(&a)[0].contains("depth"), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (int64[2] i, float[3] v) => (float[2,4] y) <int64 d = {4}> { y = OneHot (i, d, v) }",
        );
        assert!(errors(&a)[0].contains("2 elements"), "{:?}", errors(&a));
        let a = run(
            11,
            "g (int64[2] i, float[2] v) => (float[2,4] y) <int64 d = {4}> {
                y = OneHot <axis: int = 2> (i, d, v)
            }",
        );
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
    }
}
