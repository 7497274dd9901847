//! `ai.onnx.ml` operators (Binarizer, ArrayFeatureExtractor) and the
//! optimizers of `ai.onnx.preview.training` (Momentum, Adagrad, Adam).

use super::host::HostElem;
use super::misc::{FnKernel, float_input, hin, host_float, host_int, hout, scalar_expr};
use super::{EvalResult, HostTensor, Lowered, NodeCx, OpResult, OpRule, invalid, unsupported};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::misc::{self as rt_misc, Optimizer};
use onnx_codegen_runtime::ml as rt_ml;
use onnx_codegen_runtime::num::{Float, Num};
use quote::quote;

/// The rule for `op_type` of the `ai.onnx.ml` domain, if handled here.
pub fn ml_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Binarizer" => Some(&BinarizerRule),
        "ArrayFeatureExtractor" => Some(&AfeRule),
        _ => None,
    }
}

/// The rule for `op_type` of the `ai.onnx.preview.training` domain.
pub fn training_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Momentum" | "Adagrad" | "Adam" => Some(&OptimizerRule),
        _ => None,
    }
}

struct BinarizerRule;

fn run_binarizer<T: Float + HostElem>(
    threshold: f64,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = hin::<T>(inputs, 0)?;
    rt_ml::binarizer(T::from_f64(threshold), T::from_f64(1.0), x, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for BinarizerRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![float_input(cx, 0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = float_input(cx, 0)?.elem;
        let threshold = f64::from(cx.float_or("threshold", 0.0));
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_binarizer(threshold, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (t, one) = (lit::float(threshold, elem), lit::float(1.0, elem));
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::ml::binarizer(#t, #one, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct AfeRule;

/// `(rows, cols, k, output dims)`.
fn afe_plan(cx: &NodeCx<'_>) -> OpResult<(usize, usize, usize, Vec<usize>)> {
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Float | ElemType::Double | ElemType::Int32 | ElemType::Int64) {
        return unsupported(format!("ArrayFeatureExtractor on {} tensors", x.elem));
    }
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("ArrayFeatureExtractor's indices must be int64, not {}", idx.elem));
    }
    let Some((&cols, lead)) = x.dims.split_last() else {
        return invalid("ArrayFeatureExtractor's input must have rank 1 or more");
    };
    let k: usize = idx.dims.iter().product();
    let rows: usize = lead.iter().product();
    let mut out = if lead.is_empty() { vec![1] } else { lead.to_vec() };
    out.push(k);
    Ok((rows, cols, k, out))
}

fn run_afe<T: Num + HostElem>(
    rows: usize,
    cols: usize,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, i) = (hin::<T>(inputs, 0)?, hin::<i64>(inputs, 1)?);
    rt_ml::array_feature_extractor(rows, cols, x, i, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for AfeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, _, _, out) = afe_plan(cx)?;
        Ok(vec![TensorType::new(cx.input(0)?.elem, out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (rows, cols, _, _) = afe_plan(cx)?;
        let elem = cx.input(0)?.elem;
        FnKernel {
            eval: Box::new(move |i, o| crate::by_num_type!(elem, run_afe(rows, cols, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (r, c) = (lit::usize_lit(rows), lit::usize_lit(cols));
                let (x, i, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
                quote!(#rt::ml::array_feature_extractor(#r, #c, #x, #i, #y)?;)
            }),
            reads: vec![true, true],
        }
        .lowered()
    }
}

struct OptimizerRule;

/// The optimizer, and how many state tensors each parameter has.
fn optimizer(cx: &NodeCx<'_>) -> OpResult<(Optimizer, usize)> {
    let f = |name: &str, d: f32| f64::from(cx.float_or(name, d));
    Ok(match cx.node.op.op_type.as_str() {
        "Momentum" => {
            let nesterov = match cx.string_or("mode", "standard").as_str() {
                "standard" => false,
                "nesterov" => true,
                other => {
                    return invalid(format!(
                        "Momentum's mode '{other}' is not 'standard' or 'nesterov'"
                    ));
                }
            };
            let alpha = f("alpha", 0.0);
            let op = Optimizer::Momentum {
                alpha,
                beta: f("beta", 0.0),
                norm_coefficient: f("norm_coefficient", 0.0),
                nesterov,
            };
            (op, 1)
        }
        "Adagrad" => (
            Optimizer::Adagrad {
                decay_factor: f("decay_factor", 0.0),
                epsilon: f("epsilon", 0.0),
                norm_coefficient: f("norm_coefficient", 0.0),
            },
            1,
        ),
        "Adam" => (
            Optimizer::Adam {
                alpha: f("alpha", 0.9),
                beta: f("beta", 0.999),
                epsilon: f("epsilon", 1e-6),
                norm_coefficient: f("norm_coefficient", 0.0),
                norm_coefficient_post: f("norm_coefficient_post", 0.0),
            },
            2,
        ),
        other => return unsupported(format!("{other} is not an optimizer handled here")),
    })
}

/// The number of parameters `n`; checks inputs `[R, T, X*n, G*n, S*n...]`.
fn optimizer_plan(cx: &NodeCx<'_>) -> OpResult<(Optimizer, usize, usize, ElemType)> {
    let (op, states) = optimizer(cx)?;
    let name = &cx.node.op.op_type;
    let groups = states + 2;
    let count = cx.inputs.len().saturating_sub(2);
    if count == 0 || !count.is_multiple_of(groups) {
        return invalid(format!(
            "{name} takes R, T, then {groups} equal groups of tensors; it has {count} tensors"
        ));
    }
    let n = count / groups;
    let r = float_input(cx, 0)?;
    let t = cx.input(1)?;
    if r.numel() != Some(1) || t.elem != ElemType::Int64 || t.numel() != Some(1) {
        return invalid(format!("{name}'s R must be one float and T one int64"));
    }
    let elem = float_input(cx, 2)?.elem;
    for j in 0..n {
        let x = cx.input(2 + j)?;
        for g in 1..groups {
            let other = cx.input(2 + g * n + j)?;
            if other.elem != elem || other.dims != x.dims || x.elem != elem {
                return invalid(format!(
                    "{name}'s tensors for parameter {j} must all be {elem} of shape {:?}",
                    x.dims
                ));
            }
        }
    }
    if cx.node.outputs.len() > (states + 1) * n {
        return invalid(format!("{name} has at most {} outputs", (states + 1) * n));
    }
    Ok((op, states, n, elem))
}

fn run_optimizer<T: Float + HostElem>(
    op: Optimizer,
    states: usize,
    n: usize,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let r = host_float(inputs, 0)?;
    let t = host_int(inputs, 1)?;
    for j in 0..n {
        let x = hin::<T>(inputs, 2 + j)?;
        let g = hin::<T>(inputs, 2 + n + j)?;
        let s1 = hin::<T>(inputs, 2 + 2 * n + j)?;
        let s2 = if states == 2 { hin::<T>(inputs, 2 + 3 * n + j)? } else { &[] };
        let mut xn = vec![T::default(); x.len()];
        let mut s1n = vec![T::default(); x.len()];
        let mut s2n = vec![T::default(); if states == 2 { x.len() } else { 0 }];
        rt_misc::optimizer_step(op, r, t, x, g, s1, s2, &mut xn, &mut s1n, &mut s2n)?;
        for (k, v) in [(j, &xn), (n + j, &s1n), (2 * n + j, &s2n)] {
            match outputs.get_mut(k).and_then(HostTensor::get_mut::<T>) {
                Some(o) if o.len() == v.len() => o.copy_from_slice(v),
                _ => {}
            }
        }
    }
    Ok(())
}

impl OpRule for OptimizerRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, _, n, _) = optimizer_plan(cx)?;
        let mut out = Vec::new();
        for k in 0..cx.node.outputs.len() {
            let (g, j) = (k / n, k % n);
            out.push(cx.input(2 + if g == 0 { 0 } else { (g + 1) * n } + j)?.clone());
        }
        Ok(out)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (op, states, n, elem) = optimizer_plan(cx)?;
        let reads = vec![true; cx.inputs.len()];
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_optimizer(op, states, n, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let r = scalar_expr(io, 0, true);
                let t = scalar_expr(io, 1, false);
                let l = lit::f64_lit;
                let opt = match op {
                    Optimizer::Momentum { alpha, beta, norm_coefficient, nesterov } => {
                        let (a, b, c) = (l(alpha), l(beta), l(norm_coefficient));
                        quote!(#rt::misc::Optimizer::Momentum { alpha: #a, beta: #b, norm_coefficient: #c, nesterov: #nesterov })
                    }
                    Optimizer::Adagrad { decay_factor, epsilon, norm_coefficient } => {
                        let (a, b, c) = (l(decay_factor), l(epsilon), l(norm_coefficient));
                        quote!(#rt::misc::Optimizer::Adagrad { decay_factor: #a, epsilon: #b, norm_coefficient: #c })
                    }
                    Optimizer::Adam { alpha, beta, epsilon, norm_coefficient, norm_coefficient_post } => {
                        let (a, b, e, c, p) = (l(alpha), l(beta), l(epsilon), l(norm_coefficient), l(norm_coefficient_post));
                        quote!(#rt::misc::Optimizer::Adam { alpha: #a, beta: #b, epsilon: #e, norm_coefficient: #c, norm_coefficient_post: #p })
                    }
                };
                let input = |i: usize| io.inputs.get(i).cloned().flatten();
                let output = |k: usize| match io.outputs.get(k).cloned().flatten() {
                    Some(o) => o,
                    None => quote!(&mut []),
                };
                let calls = (0..n).map(|j| {
                    let (x, g, s1) = (input(2 + j), input(2 + n + j), input(2 + 2 * n + j));
                    let s2 = if states == 2 { input(2 + 3 * n + j) } else { Some(quote!(&[])) };
                    let (xn, s1n) = (output(j), output(n + j));
                    let s2n = if states == 2 { output(2 * n + j) } else { quote!(&mut []) };
                    quote!(#rt::misc::optimizer_step(#opt, __r, __t, #x, #g, #s1, #s2, #xn, #s1n, #s2n)?;)
                });
                quote!({ let __r = #r; let __t = #t; #(#calls)* })
            }),
            reads,
        }
        .lowered()
    }
}
