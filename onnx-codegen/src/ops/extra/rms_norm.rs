//! `RMSNormalization`: `x / sqrt(mean(x^2) + epsilon) * scale` over the
//! axes from `axis` on, `scale` broadcast over them.

use super::{product, wrong_buffer};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis, broadcast_strides,
    invalid, unsupported,
};
use onnx_codegen_runtime::extra::{self as rt_extra, RmsNorm};
use onnx_codegen_runtime::num::Float;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct RmsNormRule;

struct RmsPlan {
    outer: usize,
    inner: usize,
    /// The normalised dims and Scale's strides over them, when Scale is not
    /// exactly those dims.
    map: Option<(Vec<usize>, Vec<isize>)>,
}

fn rms_plan(cx: &NodeCx<'_>) -> OpResult<RmsPlan> {
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!(
            "RMSNormalization on {} tensors (the kernel handles float and double)",
            x.elem
        ));
    }
    let scale = cx.input(1)?;
    if scale.elem != x.elem {
        return unsupported(format!(
            "RMSNormalization with X of type {} and scale of type {} (mixed precisions have no kernel)",
            x.elem, scale.elem
        ));
    }
    match cx.int_or("stash_type", 1) {
        1 | 11 => {}
        other => {
            return unsupported(format!(
                "RMSNormalization with stash_type {other} (float and double are supported)"
            ));
        }
    }
    let dims = &x.dims;
    let rank = dims.len();
    if rank == 0 {
        return invalid("RMSNormalization needs an input of rank 1 or more");
    }
    let a = axis(cx.int_or("axis", -1), rank, "RMSNormalization axis")?;
    let norm = &dims[a..];
    let (outer, inner) = (product(&dims[..a])?, product(norm)?);
    if scale.rank() > rank {
        return invalid(format!("RMSNormalization's scale {scale} has a higher rank than X {x}"));
    }
    let padded: Vec<usize> =
        std::iter::repeat_n(1, rank - scale.rank()).chain(scale.dims.iter().copied()).collect();
    if padded.iter().zip(dims).any(|(&s, &d)| s != 1 && s != d) {
        return invalid(format!("RMSNormalization's scale {scale} does not broadcast to X {x}"));
    }
    if padded[..a].iter().any(|&d| d != 1) {
        return unsupported(format!(
            "RMSNormalization with scale {scale} varying over the dims before axis {a} of X {x}"
        ));
    }
    let map = (padded[a..] != *norm).then(|| {
        let strides = broadcast_strides(&padded[a..], norm);
        (norm.to_vec(), strides)
    });
    Ok(RmsPlan { outer, inner, map })
}

impl OpRule for RmsNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        rms_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = rms_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(RmsNormKernel {
            elem: cx.input(0)?.elem,
            outer: p.outer,
            inner: p.inner,
            epsilon: f64::from(cx.float_or("epsilon", 1e-5)),
            map: p.map,
        })))
    }
}

struct RmsNormKernel {
    elem: ElemType,
    outer: usize,
    inner: usize,
    epsilon: f64,
    map: Option<(Vec<usize>, Vec<isize>)>,
}

fn run_rms<T: Float + HostElem>(
    k: &RmsNormKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let get = |i: usize| inputs.get(i).copied().flatten().and_then(|t| t.get::<T>());
    let (Some(x), Some(scale)) = (get(0), get(1)) else { return Err(wrong_buffer()) };
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    let p = RmsNorm { outer: k.outer, inner: k.inner, epsilon: T::from_f64(k.epsilon) };
    let map = k.map.as_ref().map(|(s, st)| (s.as_slice(), st.as_slice()));
    rt_extra::rms_norm(&p, x, scale, map, y)?;
    Ok(())
}

impl Kernel for RmsNormKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_rms(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (outer, inner) = (lit::usize_lit(self.outer), lit::usize_lit(self.inner));
        let eps = lit::float(self.epsilon, self.elem);
        let map = match &self.map {
            None => quote!(None),
            Some((s, st)) => {
                let (s, st) = (lit::usizes(s), lit::isizes(st));
                quote!(Some((#s, #st)))
            }
        };
        let (x, scale, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote! {
            #rt::extra::rms_norm(
                &#rt::extra::RmsNorm { outer: #outer, inner: #inner, epsilon: #eps },
                #x, #scale, #map, #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn rms_normalization() {
        // Row [3, 4]: mean of squares 12.5; scale [1, 2].
        let a = run(
            23,
            "g () => (float[1,2] y) <float[1,2] x = {3, 4}, float[2] s = {1, 2}> {
                y = RMSNormalization <epsilon: float = 0.0> (x, s)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 2]")]);
        let r = 12.5f64.sqrt();
        let v = value(&a, 0);
        assert!((v[0] - 3.0 / r).abs() < 1e-6 && (v[1] - 8.0 / r).abs() < 1e-6, "{v:?}");
        // Axis 0 of [2, 2] with scale [2, 1] broadcast over the columns:
        // mean of squares of {1, 1, 1, 1} is 1, so y is the scale.
        let a = run(
            23,
            "g () => (double[2,2] y) <double[2,2] x = {1, 1, 1, 1}, double[2,1] s = {5, 7}> {
                y = RMSNormalization <axis: int = 0, epsilon: float = 0.0> (x, s)
            }",
        );
        assert_eq!(value(&a, 0), [5.0, 5.0, 7.0, 7.0]);
        let a = run(
            23,
            "g (float[2,2] x, float[3] s) => (float[2,2] y) { y = RMSNormalization (x, s) }",
        );
        assert!(errors(&a)[0].contains("does not broadcast"), "{:?}", errors(&a));
        let a = run(
            23,
            "g (float[2,2] x, float[2] s) => (float[2,2] y) { y = RMSNormalization <axis: int = 2> (x, s) }",
        );
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
        let a = run(
            23,
            "g (float[2,2] x, float[2,1] s) => (float[2,2] y) { y = RMSNormalization (x, s) }",
        );
        assert!(unsupported(&a)[0].contains("before axis"), "{:?}", unsupported(&a));
    }
}
