//! BatchNormalization (inference, and training mode with its running
//! statistics), LayerNormalization, InstanceNormalization,
//! GroupNormalization and LpNormalization.

use super::{
    axis_shape_tokens, declared, elem_of, float_input, has_output, host_in, host_out, nchw,
    nchw_tokens, numel_is, opt, product, same_elem, split_outputs,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule, axis,
    broadcast_shapes, broadcast_strides, invalid, unsupported,
};
use onnx_codegen_runtime::norm::{
    self as rt_norm, AxisShape, BatchNormParams, BatchNormStats, BatchNormTraining, LayerNorm, Nchw,
};
use onnx_codegen_runtime::num::Float;
use proc_macro2::TokenStream;
use quote::quote;

// ---------------------------------------------------------------------------
// BatchNormalization

pub(super) struct BatchNormRule;

/// How a BatchNormalization node runs.
#[derive(Clone, Copy)]
struct BatchNormPlan {
    s: Nchw,
    training: bool,
}

fn batch_norm_plan(cx: &NodeCx<'_>) -> OpResult<BatchNormPlan> {
    let x = float_input(cx, 0)?;
    let dims = &x.dims;
    let s = match dims.len() {
        0 => return invalid("BatchNormalization needs an input of rank 1 or more"),
        // A 1-D input [N] has one channel.
        1 => Nchw { batch: dims[0], channels: 1, spatial: 1 },
        _ if cx.version() < 9 && cx.int_or("spatial", 1) == 0 => {
            // Per-activation statistics: every (C, D1, ...) position is a channel.
            Nchw { batch: dims[0], channels: product(&dims[1..])?, spatial: 1 }
        }
        _ => nchw(cx, dims)?,
    };
    for (i, what) in [(1, "scale"), (2, "B"), (3, "mean"), (4, "var")] {
        let t = same_elem(cx, i, x.elem, what)?;
        numel_is(cx, t, s.channels, what)?;
    }
    let extras = (1..cx.node.outputs.len()).any(|k| has_output(cx, k));
    let training = if cx.version() >= 14 {
        let training = cx.int_or("training_mode", 0) != 0;
        if !training && extras {
            return invalid(
                "BatchNormalization has running_mean/running_var outputs but training_mode is 0",
            );
        }
        training
    } else {
        if cx.version() < 7 && cx.int_or("is_test", 0) != 0 && extras {
            return invalid("BatchNormalization has training outputs but is_test is set");
        }
        if has_output(cx, 4) {
            return unsupported(
                "BatchNormalization's saved_var output (implementations disagree on whether it \
                 holds the variance or the inverse standard deviation)",
            );
        }
        extras
    };
    Ok(BatchNormPlan { s, training })
}

impl OpRule for BatchNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        batch_norm_plan(cx)?;
        let x = cx.input(0)?;
        let stat = cx.input(3)?.clone();
        let mut out = vec![x.clone()];
        out.extend(std::iter::repeat_n(stat, cx.node.outputs.len().saturating_sub(1)));
        Ok(out)
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = batch_norm_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(BatchNormKernel {
            elem: elem_of(outputs, ElemType::Float),
            plan,
            epsilon: f64::from(cx.float_or("epsilon", 1e-5)),
            momentum: f64::from(cx.float_or("momentum", 0.9)),
            stats: [has_output(cx, 1), has_output(cx, 2), has_output(cx, 3)],
            act: crate::ops::fused_activation(cx),
        })))
    }
}

struct BatchNormKernel {
    elem: ElemType,
    plan: BatchNormPlan,
    epsilon: f64,
    momentum: f64,
    /// Which of running mean, running var, batch mean are wanted.
    stats: [bool; 3],
    /// The activation fused by `passes::fuse::fuse_batch_norm_activations`.
    act: Option<onnx_codegen_runtime::elementwise::Unary<f64>>,
}

fn run_batch_norm<T: Float + HostElem>(
    k: &BatchNormKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    let (scale, bias) = (host_in::<T>(inputs, 1)?, host_in::<T>(inputs, 2)?);
    let (mean, var) = (host_in::<T>(inputs, 3)?, host_in::<T>(inputs, 4)?);
    let epsilon = T::from_f64(k.epsilon);
    if !k.plan.training {
        let p = BatchNormParams { scale, bias, mean, var, epsilon };
        let y = host_out::<T>(outputs, 0)?;
        rt_norm::batch_norm(k.plan.s, &p, x, y)?;
        crate::ops::epilogue::finish_host(y, None, k.act);
        return Ok(());
    }
    let p = BatchNormTraining {
        scale,
        bias,
        input_mean: mean,
        input_var: var,
        epsilon,
        momentum: T::from_f64(k.momentum),
    };
    let (y, mut rest) = split_outputs::<T>(outputs, &k.stats)?;
    let mut take = |i: usize| rest.get_mut(i).and_then(Option::take);
    let stats = BatchNormStats { running_mean: take(0), running_var: take(1), batch_mean: take(2) };
    rt_norm::batch_norm_training(k.plan.s, &p, x, y, stats)?;
    crate::ops::epilogue::finish_host(y, None, k.act);
    Ok(())
}

impl Kernel for BatchNormKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_batch_norm(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = nchw_tokens(self.plan.s, rt);
        let eps = lit::float(self.epsilon, self.elem);
        let i = &io.inputs;
        let (x, scale, bias, mean, var) = (&i[0], &i[1], &i[2], &i[3], &i[4]);
        let y = &io.outputs[0];
        let (act, after) = crate::ops::epilogue::fused_epilogue(self.act, self.elem, y, rt);
        if !self.plan.training {
            let params = quote! {
                &#rt::norm::BatchNormParams {
                    scale: #scale, bias: #bias, mean: #mean, var: #var, epsilon: #eps,
                }
            };
            if self.act.is_some() && self.elem == ElemType::Float {
                return quote! {
                    #rt::norm::sbatch_norm(#s, #params, #act, #x, #y)?;
                    #after
                };
            }
            return quote! {
                #rt::norm::batch_norm(#s, #params, #x, #y)?;
                #after
            };
        }
        let momentum = lit::float(self.momentum, self.elem);
        let (rm, rv, bm) = (opt(io.outputs.get(1)), opt(io.outputs.get(2)), opt(io.outputs.get(3)));
        quote! {
            #rt::norm::batch_norm_training(
                #s,
                &#rt::norm::BatchNormTraining {
                    scale: #scale, bias: #bias, input_mean: #mean, input_var: #var,
                    epsilon: #eps, momentum: #momentum,
                },
                #x, #y,
                #rt::norm::BatchNormStats { running_mean: #rm, running_var: #rv, batch_mean: #bm },
            )?;
            #after
        }
    }
}

// ---------------------------------------------------------------------------
// LayerNormalization

pub(super) struct LayerNormRule;

/// Scale and bias read with strides over the whole input, when they are not
/// exactly the normalised extent.
struct LayerNormBroadcast {
    shape: Vec<usize>,
    scale: Vec<isize>,
    bias: Option<Vec<isize>>,
}

struct LayerNormPlan {
    outer: usize,
    inner: usize,
    /// `Mean`/`InvStdDev` dims: the leading dims, then ones.
    stat_dims: Vec<usize>,
    stash: ElemType,
    broadcast: Option<LayerNormBroadcast>,
}

fn layer_norm_plan(cx: &NodeCx<'_>) -> OpResult<LayerNormPlan> {
    let x = float_input(cx, 0)?;
    let dims = &x.dims;
    let rank = dims.len();
    if rank == 0 {
        return invalid("LayerNormalization needs an input of rank 1 or more");
    }
    let a = axis(cx.int_or("axis", -1), rank, "LayerNormalization axis")?;
    let stash = match cx.int_or("stash_type", 1) {
        1 => ElemType::Float,
        11 => ElemType::Double,
        other => {
            return unsupported(format!(
                "LayerNormalization with stash_type {other} (float and double are supported)"
            ));
        }
    };
    let (outer, inner) = (product(&dims[..a])?, product(&dims[a..])?);
    // Scale and B broadcast (unidirectionally) to X; the plain kernel takes
    // them when they hold exactly the normalised dims.
    let mut fits = true;
    let mut check = |i: usize, what: &str| -> OpResult<Option<Vec<isize>>> {
        let Some(t) = cx.opt_input(i) else { return Ok(None) };
        same_elem(cx, i, x.elem, what)?;
        if t.rank() > rank || broadcast_shapes(&[&t.dims, dims])? != *dims {
            return invalid(format!("LayerNormalization's {what} {t} does not broadcast to X {x}"));
        }
        let lead = rank - t.rank();
        let padded: Vec<usize> =
            std::iter::repeat_n(1, lead).chain(t.dims.iter().copied()).collect();
        fits &= padded[..a].iter().all(|&d| d == 1) && padded[a..] == dims[a..];
        Ok(Some(broadcast_strides(&t.dims, dims)))
    };
    let scale = check(1, "Scale")?.ok_or_else(|| OpError::Invalid("Scale is required".into()))?;
    let bias = check(2, "B")?;
    let broadcast = (!fits).then(|| LayerNormBroadcast { shape: dims.clone(), scale, bias });
    if stash != x.elem && (has_output(cx, 1) || has_output(cx, 2)) {
        return unsupported(format!(
            "LayerNormalization on {} with Mean/InvStdDev outputs of stash type {stash}",
            x.elem
        ));
    }
    let stat_dims = dims[..a].iter().copied().chain(std::iter::repeat_n(1, rank - a)).collect();
    Ok(LayerNormPlan { outer, inner, stat_dims, stash, broadcast })
}

impl OpRule for LayerNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = layer_norm_plan(cx)?;
        let stat = TensorType::new(plan.stash, plan.stat_dims);
        Ok(declared(cx, vec![cx.input(0)?.clone(), stat.clone(), stat]))
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = layer_norm_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(LayerNormKernel {
            elem: elem_of(outputs, ElemType::Float),
            outer: plan.outer,
            inner: plan.inner,
            epsilon: f64::from(cx.float_or("epsilon", 1e-5)),
            broadcast: plan.broadcast,
            stats: [has_output(cx, 1), has_output(cx, 2)],
        })))
    }
}

struct LayerNormKernel {
    elem: ElemType,
    outer: usize,
    inner: usize,
    epsilon: f64,
    broadcast: Option<LayerNormBroadcast>,
    stats: [bool; 2],
}

fn run_layer_norm<T: Float + HostElem>(
    k: &LayerNormKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    let scale = host_in::<T>(inputs, 1)?;
    let bias = match inputs.get(2).copied().flatten() {
        Some(_) => Some(host_in::<T>(inputs, 2)?),
        None => None,
    };
    let p = LayerNorm { outer: k.outer, inner: k.inner, epsilon: T::from_f64(k.epsilon) };
    let (y, mut rest) = split_outputs::<T>(outputs, &k.stats)?;
    let mut take = |i: usize| rest.get_mut(i).and_then(Option::take);
    let (mean, inv) = (take(0), take(1));
    match &k.broadcast {
        None => rt_norm::layer_norm(&p, x, scale, bias, y, mean, inv)?,
        Some(b) => {
            let bias = match (bias, &b.bias) {
                (Some(v), Some(s)) => Some((v, s.as_slice())),
                _ => None,
            };
            rt_norm::layer_norm_broadcast(&p, &b.shape, x, (scale, &b.scale), bias, y, mean, inv)?
        }
    }
    Ok(())
}

impl Kernel for LayerNormKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_layer_norm(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (outer, inner) = (lit::usize_lit(self.outer), lit::usize_lit(self.inner));
        let eps = lit::float(self.epsilon, self.elem);
        let p = quote!(&#rt::norm::LayerNorm { outer: #outer, inner: #inner, epsilon: #eps });
        let (x, scale) = (&io.inputs[0], &io.inputs[1]);
        let y = &io.outputs[0];
        let (mean, inv) = (opt(io.outputs.get(1)), opt(io.outputs.get(2)));
        match &self.broadcast {
            None => {
                let bias = opt(io.inputs.get(2));
                // f32 takes the vectorised entry point (results differ by rounding).
                let f = if self.elem == ElemType::Float {
                    quote!(slayer_norm)
                } else {
                    quote!(layer_norm)
                };
                quote!(#rt::norm::#f(#p, #x, #scale, #bias, #y, #mean, #inv)?;)
            }
            Some(b) => {
                let shape = lit::usizes(&b.shape);
                let ss = lit::isizes(&b.scale);
                let bias = match (io.inputs.get(2), &b.bias) {
                    (Some(Some(v)), Some(s)) => {
                        let s = lit::isizes(s);
                        quote!(Some((#v, #s)))
                    }
                    _ => quote!(None),
                };
                quote! {
                    #rt::norm::layer_norm_broadcast(
                        #p, #shape, #x, (#scale, #ss), #bias, #y, #mean, #inv,
                    )?;
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// InstanceNormalization and GroupNormalization

pub(super) struct InstanceNormRule;

fn instance_norm_plan(cx: &NodeCx<'_>) -> OpResult<Nchw> {
    let x = float_input(cx, 0)?;
    let s = nchw(cx, &x.dims)?;
    for (i, what) in [(1, "scale"), (2, "B")] {
        let t = same_elem(cx, i, x.elem, what)?;
        numel_is(cx, t, s.channels, what)?;
    }
    Ok(s)
}

impl OpRule for InstanceNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        instance_norm_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ChannelNormKernel {
            elem: elem_of(outputs, ElemType::Float),
            s: instance_norm_plan(cx)?,
            groups: None,
            epsilon: f64::from(cx.float_or("epsilon", 1e-5)),
        })))
    }
}

pub(super) struct GroupNormRule;

fn group_norm_plan(cx: &NodeCx<'_>) -> OpResult<(Nchw, usize)> {
    let x = float_input(cx, 0)?;
    let s = nchw(cx, &x.dims)?;
    let groups = cx.int("num_groups")?;
    let groups = match usize::try_from(groups) {
        Ok(g) if g > 0 && s.channels.is_multiple_of(g) => g,
        _ => {
            return invalid(format!(
                "GroupNormalization's num_groups {groups} does not divide the {} channels",
                s.channels
            ));
        }
    };
    // Opset 18 scales per group, opset 21 per channel.
    let (n, per) = if cx.version() < 21 { (groups, "group") } else { (s.channels, "channel") };
    for (i, what) in [(1, "scale"), (2, "bias")] {
        let t = same_elem(cx, i, x.elem, what)?;
        if t.numel() != Some(n) {
            return invalid(format!(
                "GroupNormalization-{}'s {what} is {t}; one value per {per} ({n}) was expected",
                cx.version()
            ));
        }
    }
    Ok((s, groups))
}

impl OpRule for GroupNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        group_norm_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let (s, groups) = group_norm_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(ChannelNormKernel {
            elem: elem_of(outputs, ElemType::Float),
            s,
            groups: Some(groups),
            epsilon: f64::from(cx.float_or("epsilon", 1e-5)),
        })))
    }
}

/// InstanceNormalization (`groups: None`) or GroupNormalization.
struct ChannelNormKernel {
    elem: ElemType,
    s: Nchw,
    groups: Option<usize>,
    epsilon: f64,
}

fn run_channel_norm<T: Float + HostElem>(
    k: &ChannelNormKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    let (scale, bias) = (host_in::<T>(inputs, 1)?, host_in::<T>(inputs, 2)?);
    let y = host_out::<T>(outputs, 0)?;
    let eps = T::from_f64(k.epsilon);
    match k.groups {
        None => rt_norm::instance_norm(k.s, eps, x, scale, bias, y)?,
        Some(g) => rt_norm::group_norm(k.s, g, eps, x, scale, bias, y)?,
    }
    Ok(())
}

impl Kernel for ChannelNormKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_channel_norm(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = nchw_tokens(self.s, rt);
        let eps = lit::float(self.epsilon, self.elem);
        let (x, scale, bias) = (&io.inputs[0], &io.inputs[1], &io.inputs[2]);
        let y = &io.outputs[0];
        match self.groups {
            None => quote!(#rt::norm::instance_norm(#s, #eps, #x, #scale, #bias, #y)?;),
            Some(g) => {
                let g = lit::usize_lit(g);
                quote!(#rt::norm::group_norm(#s, #g, #eps, #x, #scale, #bias, #y)?;)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// LpNormalization

pub(super) struct LpNormRule;

fn lp_norm_plan(cx: &NodeCx<'_>) -> OpResult<(AxisShape, u32)> {
    let x = float_input(cx, 0)?;
    let dims = &x.dims;
    let a = axis(cx.int_or("axis", -1), dims.len(), "LpNormalization axis")?;
    let p = match cx.int_or("p", 2) {
        1 => 1,
        2 => 2,
        other => return invalid(format!("LpNormalization's p is {other}; only 1 and 2 exist")),
    };
    let s =
        AxisShape { outer: product(&dims[..a])?, axis: dims[a], inner: product(&dims[a + 1..])? };
    Ok((s, p))
}

impl OpRule for LpNormRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        lp_norm_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let (s, p) = lp_norm_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(LpNormKernel {
            elem: elem_of(outputs, ElemType::Float),
            s,
            p,
        })))
    }
}

struct LpNormKernel {
    elem: ElemType,
    s: AxisShape,
    p: u32,
}

fn run_lp_norm<T: Float + HostElem>(
    k: &LpNormKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_norm::lp_norm(k.s, k.p, host_in::<T>(inputs, 0)?, host_out::<T>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for LpNormKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.elem, run_lp_norm(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = axis_shape_tokens(self.s, rt);
        let p = proc_macro2::Literal::u32_unsuffixed(self.p);
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote!(#rt::norm::lp_norm(#s, #p, #x, #y)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn layer_norm_shapes_and_values() {
        let a = run(
            17,
            "g (float[2,3,4] x, float[3,4] s, float[4] b) => (float[2,3,4] y, float[2,1,1] m, float[2,1,1] r) {
                y, m, r = LayerNormalization <axis: int = -2> (x, s, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4]"), ty("float[2, 1, 1]"), ty("float[2, 1, 1]")]);
        assert!(a.inferred.is_complete());
        // Rows [1, 3] and [10, 14] standardise to [-1, 1]; a per-row scale [2, 3]
        // of shape [2, 1] broadcasts over X, bias [1].
        let a = run(
            17,
            "g () => (float[2,2] y, float[2,1] m) <float[2,2] x = {1,3,10,14}, float[2,1] s = {2,3}, float[1] b = {1}> {
                y, m = LayerNormalization <epsilon: float = 0.0> (x, s, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 2]"), ty("float[2, 1]")]);
        assert_eq!(value(&a, 0), [-1.0, 3.0, -2.0, 4.0]);
        assert_eq!(value(&a, 1), [2.0, 12.0]);
        let a = run(
            17,
            "g (float[2,3] x, float[2] s) => (float[2,3] y) { y = LayerNormalization (x, s) }",
        );
        assert!(errors(&a)[0].contains("do not broadcast"), "{:?}", errors(&a));
        let a = run(
            17,
            "g (float[2,3] x, float[3] s) => (float[2,3] y, double[2,1] m) {
                y, m = LayerNormalization <stash_type: int = 11> (x, s)
            }",
        );
        assert!(unsupported(&a)[0].contains("stash type"), "{:?}", unsupported(&a));
    }

    #[test]
    fn batch_norm_modes() {
        let a = run(
            15,
            "g (float[2,3,4] x, float[3] s, float[3] b, float[3] m, float[3] v) => (float[2,3,4] y) {
                y = BatchNormalization (x, s, b, m, v)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4]")]);
        let a = run(
            15,
            "g (float[2,3] x, float[3] s, float[3] b, float[3] m, float[3] v) => (float[2,3] y, float[3] rm, float[3] rv) {
                y, rm, rv = BatchNormalization (x, s, b, m, v)
            }",
        );
        assert!(errors(&a)[0].contains("training_mode is 0"), "{:?}", errors(&a));
        let a = run(
            15,
            "g (float[2,3] x, float[2] s, float[3] b, float[3] m, float[3] v) => (float[2,3] y) {
                y = BatchNormalization (x, s, b, m, v)
            }",
        );
        assert!(errors(&a)[0].contains("scale"), "{:?}", errors(&a));
        // Training: one channel seeing {1, 3}: mean 2, variance 1; momentum 0.5
        // moves the running mean 0 to 1 and the running variance 3 to 2.
        let a = run(
            15,
            "g () => (float[2,1] y, float[1] rm, float[1] rv) <float[2,1] x = {1,3}, float[1] s = {2}, float[1] b = {1},
                                  float[1] m = {0}, float[1] v = {3}> {
                y, rm, rv = BatchNormalization <training_mode: int = 1, epsilon: float = 0.0,
                                                momentum: float = 0.5> (x, s, b, m, v)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 1]"), ty("float[1]"), ty("float[1]")]);
        assert_eq!(value(&a, 0), [-1.0, 3.0]);
        assert_eq!(value(&a, 1), [1.0]);
        assert_eq!(value(&a, 2), [2.0]);
        // Opset 9: training is chosen by the outputs; saved_var is not supported.
        let a = run(
            9,
            "g (float[2,1] x, float[1] s, float[1] b, float[1] m, float[1] v) => (float[2,1] y, float[1] a, float[1] c, float[1] d, float[1] e) {
                y, a, c, d, e = BatchNormalization (x, s, b, m, v)
            }",
        );
        assert!(unsupported(&a)[0].contains("saved_var"), "{:?}", unsupported(&a));
        // Opset 7, spatial 0: per-activation statistics of C * D values.
        let a = run(
            7,
            "g (float[2,3,4] x, float[12] s, float[12] b, float[12] m, float[12] v) => (float[2,3,4] y) {
                y = BatchNormalization <spatial: int = 0> (x, s, b, m, v)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4]")]);
        assert!(a.inferred.is_complete());
    }

    #[test]
    fn channel_normalisations() {
        let a = run(
            6,
            "g (float[2,3,5] x, float[3] s, float[3] b) => (float[2,3,5] y) {
                y = InstanceNormalization (x, s, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 5]")]);
        // Two groups of two channels: [1, 3] and [10, 14] both become [-1, 1],
        // then per-channel scale and bias (opset 21).
        let a = run(
            21,
            "g () => (float[1,4,1] y) <float[1,4,1] x = {1,3,10,14}, float[4] s = {1,2,3,4}, float[4] b = {0,0,0,1}> {
                y = GroupNormalization <num_groups: int = 2, epsilon: float = 0.0> (x, s, b)
            }",
        );
        assert_eq!(value(&a, 0), [-1.0, 2.0, -3.0, 5.0]);
        // Opset 21 scales per channel.
        let a = run(
            21,
            "g (float[1,4,2] x, float[2] s, float[2] b) => (float[1,4,2] y) {
                y = GroupNormalization <num_groups: int = 2> (x, s, b)
            }",
        );
        assert!(errors(&a)[0].contains("one value per channel"), "{:?}", errors(&a));
        let a = run(
            21,
            "g (float[1,4,2] x, float[4] s, float[4] b) => (float[1,4,2] y) {
                y = GroupNormalization <num_groups: int = 3> (x, s, b)
            }",
        );
        assert!(errors(&a)[0].contains("does not divide"), "{:?}", errors(&a));
    }
}
