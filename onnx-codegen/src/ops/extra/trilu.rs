//! `Trilu`: the upper or lower triangle (from diagonal `k`, given at
//! generation time or read at run time) of each matrix, the rest zeroed.

use super::{Scalar, const_scalar, data_in, data_out, is_data, product, runtime_scalar};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::Data;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid, unsupported,
};
use onnx_codegen_runtime::extra::{self as rt_extra, Matrices};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct TriluRule;

fn trilu_plan(cx: &NodeCx<'_>) -> OpResult<(Matrices, Scalar)> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("Trilu on {} tensors", x.elem));
    }
    let r = x.rank();
    if r < 2 {
        return invalid(format!("Trilu needs an input of rank 2 or more, got {x}"));
    }
    let m =
        Matrices { batch: product(&x.dims[..r - 2])?, rows: x.dims[r - 2], cols: x.dims[r - 1] };
    let k = if cx.opt_input(1).is_none() {
        Scalar::Known(0)
    } else {
        match const_scalar(cx, 1, "Trilu's k")? {
            Some(v) => Scalar::Known(v),
            None => {
                runtime_scalar(cx, 1, "Trilu's k")?;
                Scalar::Runtime(1)
            }
        }
    };
    Ok((m, k))
}

impl OpRule for TriluRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        trilu_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (m, k) = trilu_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(TriluKernel {
            elem: cx.input(0)?.elem,
            m,
            upper: cx.int_or("upper", 1) != 0,
            k,
        })))
    }
}

struct TriluKernel {
    elem: ElemType,
    m: Matrices,
    upper: bool,
    k: Scalar,
}

fn run_trilu<T: Data>(
    k: &TriluKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let kv = k.k.host(inputs)?;
    let x = data_in::<T>(inputs, 0)?;
    rt_extra::trilu(k.m, k.upper, kv, x, data_out::<T>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for TriluKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_data_type!(self.elem, run_trilu(self, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        i == 0 || self.k == Scalar::Runtime(i)
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let Matrices { batch, rows, cols } = self.m;
        let (b, r, c) = (lit::usize_lit(batch), lit::usize_lit(rows), lit::usize_lit(cols));
        let upper = self.upper;
        let k = self.k.tokens(io);
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote! {
            #rt::extra::trilu(
                #rt::extra::Matrices { batch: #b, rows: #r, cols: #c }, #upper, #k, #x, #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn trilu() {
        let a = run(
            14,
            "g () => (int64[2,3] y) <int64[2,3] x = {1, 2, 3, 4, 5, 6}, int64 k = {1}> {
                y = Trilu <upper: int = 0> (x, k)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 2.0, 0.0, 4.0, 5.0, 6.0]);
        let a =
            run(14, "g () => (int64[2,3] y) <int64[2,3] x = {1, 2, 3, 4, 5, 6}> { y = Trilu (x) }");
        assert_eq!(value(&a, 0), [1.0, 2.0, 3.0, 0.0, 5.0, 6.0]);
        // k read at run time: inferred and lowered, nothing unsupported.
        let a = run(14, "g (bool[2,2,3] x, int64 k) => (bool[2,2,3] y) { y = Trilu (x, k) }");
        assert_eq!(types(&a), [ty("bool[2, 2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(14, "g (float[3] x) => (float[3] y) { y = Trilu (x) }");
        assert!(errors(&a)[0].contains("rank 2"), "{:?}", errors(&a));
        let a = run(14, "g (float[2,2] x, int64[2] k) => (float[2,2] y) { y = Trilu (x, k) }");
        assert!(errors(&a)[0].contains("one element"), "{:?}", errors(&a));
    }
}
