//! Classification losses: NegativeLogLikelihoodLoss and
//! SoftmaxCrossEntropyLoss.
//!
//! Both take an input `[N, C, d1, ..., dk]` (`k >= 0`), integer targets
//! `[N, d1, ..., dk]` and optional per-class weights `[C]`; the loss has the
//! targets' shape for `reduction = "none"` and is a scalar otherwise.
//! SoftmaxCrossEntropyLoss also has an optional second output, the
//! log-softmax of the scores (the input's shape); when the model does not ask
//! for it the kernel writes it to scratch. All opset versions (12, 13, 22)
//! differ only in the element types they allow.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use onnx_codegen_runtime::loss::{self as rt_loss, Loss, LossShape, Reduction};
use onnx_codegen_runtime::num::{Float, Int};
use proc_macro2::{Literal, TokenStream};
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "NegativeLogLikelihoodLoss" => Some(&LossRule { softmax: false }),
        "SoftmaxCrossEntropyLoss" => Some(&LossRule { softmax: true }),
        _ => None,
    }
}

/// `softmax`: SoftmaxCrossEntropyLoss (log-softmax first), else
/// NegativeLogLikelihoodLoss.
struct LossRule {
    softmax: bool,
}

/// Everything the kernel call needs, checked against the input types.
struct Plan {
    elem: ElemType,
    index: ElemType,
    params: Loss,
    has_weight: bool,
    /// The loss's shape: the targets' for `none`, a scalar otherwise.
    loss_dims: Vec<usize>,
    input: TensorType,
}

fn op_name<'a>(cx: &NodeCx<'a>) -> &'a str {
    &cx.node.op.op_type
}

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Plan> {
    let name = op_name(cx);
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!(
            "{name} on {} tensors (the runtime kernel handles float and double)",
            x.elem
        ));
    }
    let target = cx.input(1)?;
    if !matches!(target.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!("{name}'s targets must be int32 or int64, not {}", target.elem));
    }
    let dims = &x.dims;
    if dims.len() < 2 {
        return invalid(format!(
            "{name} needs an input of rank 2 or more ([N, C, ...]), got {dims:?}"
        ));
    }
    let (batch, classes) = (dims[0], dims[1]);
    let mut want_target = vec![batch];
    want_target.extend_from_slice(&dims[2..]);
    if target.dims != want_target {
        return invalid(format!(
            "{name}'s targets have shape {:?}; an input of shape {dims:?} needs {want_target:?}",
            target.dims
        ));
    }
    let weight = cx.opt_input(2);
    if let Some(w) = weight {
        if w.elem != x.elem {
            return invalid(format!("{name}'s weights are {} but its input is {}", w.elem, x.elem));
        }
        if w.dims != [classes] {
            return invalid(format!(
                "{name}'s weights have shape {:?}; {classes} classes need [{classes}]",
                w.dims
            ));
        }
    }
    let reduction = match cx.string_or("reduction", "mean").as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => {
            return invalid(format!(
                "{name}'s reduction is '{other}'; it must be 'none', 'sum' or 'mean'"
            ));
        }
    };
    let ignore_index = match cx.node.attr("ignore_index") {
        None => None,
        Some(AttrValue::Int(v)) => Some(*v),
        Some(_) => return invalid(format!("{name}'s ignore_index must be an integer")),
    };
    let spatial = product(&dims[2..])?;
    let shape = LossShape { batch, classes, spatial };
    product(dims)?;
    let loss_dims = match reduction {
        Reduction::None => want_target,
        Reduction::Sum | Reduction::Mean => Vec::new(),
    };
    Ok(Plan {
        elem: x.elem,
        index: target.elem,
        params: Loss { shape, reduction, ignore_index },
        has_weight: weight.is_some(),
        loss_dims,
        input: x.clone(),
    })
}

/// Whether the node computes SoftmaxCrossEntropyLoss's `log_prob` output.
fn wants_log_prob(cx: &NodeCx<'_>) -> bool {
    cx.node.outputs.get(1).is_some_and(Option::is_some)
}

impl OpRule for LossRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = plan(cx)?;
        let declared = cx.node.outputs.len();
        if !self.softmax && declared > 1 {
            return invalid("NegativeLogLikelihoodLoss has one output");
        }
        if declared > 2 {
            return invalid("SoftmaxCrossEntropyLoss has at most two outputs");
        }
        let mut out = vec![TensorType::new(p.elem, p.loss_dims)];
        if declared == 2 {
            out.push(p.input);
        }
        Ok(out)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(cx)?;
        let log_prob = if !self.softmax {
            LogProb::NotNeeded
        } else if wants_log_prob(cx) {
            LogProb::Output
        } else {
            LogProb::Scratch(p.params.shape.input_len().map_err(|_| {
                OpError::Invalid(format!("the shape {:?} is too large", p.input.dims))
            })?)
        };
        Ok(Lowered::Kernel(Box::new(LossKernel {
            elem: p.elem,
            index: p.index,
            params: p.params,
            has_weight: p.has_weight,
            log_prob,
        })))
    }
}

/// Where SoftmaxCrossEntropyLoss writes the log-probabilities.
#[derive(Clone, Copy, PartialEq, Eq)]
enum LogProb {
    /// NegativeLogLikelihoodLoss: there are none.
    NotNeeded,
    /// Output 1.
    Output,
    /// A scratch buffer of this many elements.
    Scratch(usize),
}

struct LossKernel {
    elem: ElemType,
    index: ElemType,
    params: Loss,
    has_weight: bool,
    log_prob: LogProb,
}

/// A host buffer of another type than the kernel's: the buffers do not
/// match what the rule planned.
fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())
}

fn run<T: Float + HostElem, I: Int + HostElem>(
    k: &LossKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    let target = host_in::<I>(inputs, 1)?;
    let weight = if k.has_weight { Some(host_in::<T>(inputs, 2)?) } else { None };
    let (first, rest) = outputs.split_first_mut().ok_or(wrong_buffer())?;
    let loss = first.get_mut::<T>().ok_or(wrong_buffer())?;
    match k.log_prob {
        LogProb::NotNeeded => rt_loss::nll_loss(&k.params, x, target, weight, loss)?,
        LogProb::Output | LogProb::Scratch(_) => {
            // Output 1 when the model asks for it; otherwise the scratch
            // buffer, which comes after every declared output.
            let lp = if k.log_prob == LogProb::Output { rest.first_mut() } else { rest.last_mut() };
            let lp = lp.and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
            rt_loss::softmax_cross_entropy(&k.params, x, target, weight, loss, lp)?;
        }
    }
    Ok(())
}

fn run_float<T: Float + HostElem>(
    k: &LossKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    match k.index {
        ElemType::Int32 => run::<T, i32>(k, inputs, outputs),
        ElemType::Int64 => run::<T, i64>(k, inputs, outputs),
        other => Err(EvalError::Type(other)),
    }
}

impl Kernel for LossKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_float(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = self.params.shape;
        let (b, c, sp) =
            (lit::usize_lit(s.batch), lit::usize_lit(s.classes), lit::usize_lit(s.spatial));
        let reduction = match self.params.reduction {
            Reduction::None => quote!(None),
            Reduction::Sum => quote!(Sum),
            Reduction::Mean => quote!(Mean),
        };
        let ignore = match self.params.ignore_index {
            Some(v) => {
                let v = Literal::i64_suffixed(v);
                quote!(Some(#v))
            }
            None => quote!(None),
        };
        let params = quote! {
            &#rt::loss::Loss {
                shape: #rt::loss::LossShape { batch: #b, classes: #c, spatial: #sp },
                reduction: #rt::loss::Reduction::#reduction,
                ignore_index: #ignore,
            }
        };
        let (x, t) = (&io.inputs[0], &io.inputs[1]);
        let w = match io.inputs.get(2) {
            Some(Some(w)) if self.has_weight => quote!(Some(#w)),
            _ => quote!(None),
        };
        let loss = &io.outputs[0];
        match self.log_prob {
            LogProb::NotNeeded => quote!(#rt::loss::nll_loss(#params, #x, #t, #w, #loss)?;),
            LogProb::Output | LogProb::Scratch(_) => {
                let lp = match self.log_prob {
                    LogProb::Output => io.outputs.get(1).cloned().flatten(),
                    _ => io.scratch.clone(),
                };
                let lp = lp.unwrap_or_else(|| quote!(&mut []));
                quote!(#rt::loss::softmax_cross_entropy(#params, #x, #t, #w, #loss, #lp)?;)
            }
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        match self.log_prob {
            LogProb::Scratch(n) => Some(TensorType::new(self.elem, vec![n])),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    fn close(got: &[f64], want: &[f64]) -> bool {
        got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12)
    }

    #[test]
    fn output_shapes_follow_the_reduction() {
        let a = run(
            22,
            "g (float[2,3,4,5] x, int64[2,4,5] t, float[3] w) => (float[2,4,5] n, float s, float m) {
                n = NegativeLogLikelihoodLoss <reduction: string = \"none\"> (x, t, w)
                s = NegativeLogLikelihoodLoss <reduction: string = \"sum\"> (x, t)
                m = NegativeLogLikelihoodLoss (x, t, w)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 4, 5]"), ty("float[]"), ty("float[]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        // SoftmaxCrossEntropyLoss: log_prob has the scores' shape; rank 2 gives [N].
        let a = run(
            13,
            "g (double[3,4] x, int32[3] t) => (double[3] l, double[3,4] p, double m) {
                l, p = SoftmaxCrossEntropyLoss <reduction: string = \"none\"> (x, t)
                m = SoftmaxCrossEntropyLoss <ignore_index: int = -1> (x, t)
            }",
        );
        assert_eq!(types(&a), [ty("double[3]"), ty("double[3, 4]"), ty("double[]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
    }

    #[test]
    fn nll_folds_to_hand_computed_values() {
        // Rows [1, 2, 3] and [4, 5, 6], targets 2 and 0, weights [0.5, 1, 2]:
        // losses -3 * 2 = -6 and -4 * 0.5 = -2.
        let a = run(
            13,
            "g () => (float[2] n, float s, float m, float mi, float mu)
               <float[2,3] x = {1,2,3,4,5,6}, int32[2] t = {2,0}, float[3] w = {0.5,1,2}> {
                n = NegativeLogLikelihoodLoss <reduction: string = \"none\"> (x, t, w)
                s = NegativeLogLikelihoodLoss <reduction: string = \"sum\"> (x, t, w)
                m = NegativeLogLikelihoodLoss (x, t, w)
                mi = NegativeLogLikelihoodLoss <ignore_index: int = 0> (x, t, w)
                mu = NegativeLogLikelihoodLoss <ignore_index: int = 2> (x, t)
            }",
        );
        assert_eq!(value(&a, 0), [-6.0, -2.0]);
        assert_eq!(value(&a, 1), [-8.0]);
        // Weighted mean: -8 / (2 + 0.5).
        assert_eq!(value(&a, 2), [f64::from(-3.2f32)]);
        // Target 0 ignored: -6 / 2.
        assert_eq!(value(&a, 3), [-3.0]);
        // No weights, target 2 ignored: -4 over one counted element.
        assert_eq!(value(&a, 4), [-4.0]);
    }

    #[test]
    fn sce_folds_log_softmax_and_loss() {
        // Row [0, 1]: log-softmax [-ln(1 + e), 1 - ln(1 + e)]; row [2, 2]: [-ln 2, -ln 2].
        let a = run(
            13,
            "g () => (double[2] l, double[2,2] p, double m)
               <double[2,2] x = {0,1,2,2}, int64[2] t = {1,0}, double[2] w = {3,1}> {
                l, p = SoftmaxCrossEntropyLoss <reduction: string = \"none\"> (x, t)
                m = SoftmaxCrossEntropyLoss (x, t, w)
            }",
        );
        let lse = (1.0 + 1f64.exp()).ln();
        let ln2 = 2f64.ln();
        assert!(close(&value(&a, 0), &[lse - 1.0, ln2]), "{:?}", value(&a, 0));
        assert!(close(&value(&a, 1), &[-lse, 1.0 - lse, -ln2, -ln2]), "{:?}", value(&a, 1));
        // Weights [3, 1]: (1 * (lse - 1) + 3 * ln 2) / (1 + 3).
        let want = (lse - 1.0 + 3.0 * ln2) / 4.0;
        assert!(close(&value(&a, 2), &[want]), "{:?}", value(&a, 2));
    }

    #[test]
    fn invalid_models_are_reported() {
        let cases = [
            ("float[2,3] x, int64[3] t", "(x, t)", "targets have shape [3]"),
            ("float[2,3] x, int64[2] t, float[2] w", "(x, t, w)", "3 classes need [3]"),
            ("float[2,3] x, int64[2] t, double[3] w", "(x, t, w)", "weights are double"),
            ("float[3] x, int64[3] t", "(x, t)", "rank 2 or more"),
        ];
        for (inputs, args, want) in cases {
            let a = run(
                22,
                &format!("g ({inputs}) => (float y) {{ y = NegativeLogLikelihoodLoss {args} }}"),
            );
            assert!(errors(&a).iter().any(|e| e.contains(want)), "{want}: {:?}", errors(&a));
        }
        let a = run(
            13,
            "g (float[2,3] x, int64[2] t) => (float y) {
                y = SoftmaxCrossEntropyLoss <reduction: string = \"average\"> (x, t)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("'average'")), "{:?}", errors(&a));
        // A target outside [0, C) that is not ignored fails when folded.
        let a = run(
            13,
            "g () => (float y) <float[1,2] x = {1,2}, int64[1] t = {2}> {
                y = NegativeLogLikelihoodLoss (x, t)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("out of bounds")), "{:?}", errors(&a));
    }

    #[test]
    fn half_precision_is_unsupported() {
        let a = run(
            13,
            "g (float16[2,3] x, int64[2] t) => (float16 y) { y = SoftmaxCrossEntropyLoss (x, t) }",
        );
        assert!(unsupported(&a).iter().any(|u| u.contains("float16")), "{:?}", unsupported(&a));
    }
}
