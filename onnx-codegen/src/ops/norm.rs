//! Normalisations and reductions:
//! - BatchNormalization (inference, and training mode with its running
//!   statistics), LayerNormalization, InstanceNormalization,
//!   GroupNormalization, LpNormalization, MeanVarianceNormalization;
//! - ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1,
//!   ReduceL2, ReduceLogSum, ReduceLogSumExp, ReduceSumSquare;
//! - ArgMax, ArgMin.
//!
//! The float kernels run on `f32` and `f64`; the reductions that make sense
//! on integers (sum, mean, max, min, product, L1, sum of squares) and ArgMax /
//! ArgMin run on every integer type too, and ReduceMax / ReduceMin on
//! booleans. Everything else is reported as unsupported.

use super::host::{HostData, HostElem};
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, broadcast_shapes, broadcast_strides, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::norm::{
    self as rt_norm, AxisShape, BatchNormParams, BatchNormStats, BatchNormTraining, LayerNorm, Nchw,
};
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::reduce::{self as rt_reduce, Reduce, ReduceOp};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "BatchNormalization" => Some(&BatchNormRule),
        "LayerNormalization" => Some(&LayerNormRule),
        "InstanceNormalization" => Some(&InstanceNormRule),
        "GroupNormalization" => Some(&GroupNormRule),
        "LpNormalization" => Some(&LpNormRule),
        "MeanVarianceNormalization" => Some(&MvnRule),
        "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceProd" | "ReduceL1"
        | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" | "ReduceSumSquare" => Some(&ReduceRule),
        "ArgMax" | "ArgMin" => Some(&ArgRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

/// `x` must be `f32` or `f64`: the float kernels' types.
fn float_input<'a>(cx: &NodeCx<'a>, i: usize) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    match t.elem {
        ElemType::Float | ElemType::Double => Ok(t),
        other => unsupported(format!(
            "{} on {other} tensors (the runtime kernel handles float and double)",
            op_name(cx)
        )),
    }
}

/// Input `i` must have element type `elem`; mixed precisions (allowed by
/// some versions) have no kernel.
fn same_elem<'a>(
    cx: &NodeCx<'a>,
    i: usize,
    elem: ElemType,
    what: &str,
) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if t.elem != elem {
        return unsupported(format!(
            "{} with {what} of type {} and X of type {elem} (mixed precisions have no kernel)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

/// Input `i` must hold exactly `n` elements.
fn numel_is(cx: &NodeCx<'_>, t: &TensorType, n: usize, what: &str) -> OpResult<()> {
    if t.numel() != Some(n) {
        return invalid(format!("{}'s {what} is {t}; {n} elements were expected", op_name(cx)));
    }
    Ok(())
}

/// Whether output `k` of the node is present.
fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

/// Keeps one type per output the node declares.
fn declared(cx: &NodeCx<'_>, mut types: Vec<TensorType>) -> Vec<TensorType> {
    types.truncate(cx.node.outputs.len().max(1));
    types
}

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

/// `[N, C, spatial...]` as the channel kernels see it (rank 2 or more).
fn nchw(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<Nchw> {
    if dims.len() < 2 {
        return invalid(format!("{} needs an input of rank 2 or more, got {dims:?}", op_name(cx)));
    }
    Ok(Nchw { batch: dims[0], channels: dims[1], spatial: product(&dims[2..])? })
}

fn elem_of(outputs: &[TensorType], fallback: ElemType) -> ElemType {
    outputs.first().map_or(fallback, |t| t.elem)
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

fn host_out<T: HostElem>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    outputs.get_mut(k).and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())
}

/// Output 0 and the optional outputs after it, as host buffers.
type HostOutputs<'o, T> = (&'o mut [T], Vec<Option<&'o mut [T]>>);

/// The first output and, for each of `present`, the output at that index.
fn split_outputs<'o, T: HostElem>(
    outputs: &'o mut [HostTensor],
    present: &[bool],
) -> Result<HostOutputs<'o, T>, EvalError> {
    let mut it = outputs.iter_mut();
    let y = it.next().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    let mut rest = Vec::with_capacity(present.len());
    for &p in present {
        let t = it.next();
        rest.push(if p {
            Some(t.and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?)
        } else {
            None
        });
    }
    Ok((y, rest))
}

fn nchw_tokens(s: Nchw, rt: &TokenStream) -> TokenStream {
    let (n, c, sp) =
        (lit::usize_lit(s.batch), lit::usize_lit(s.channels), lit::usize_lit(s.spatial));
    quote!(#rt::norm::Nchw { batch: #n, channels: #c, spatial: #sp })
}

fn axis_shape_tokens(s: AxisShape, rt: &TokenStream) -> TokenStream {
    let (o, a, i) = (lit::usize_lit(s.outer), lit::usize_lit(s.axis), lit::usize_lit(s.inner));
    quote!(#rt::norm::AxisShape { outer: #o, axis: #a, inner: #i })
}

/// `Some(expr)` or `None` for an optional buffer.
fn opt(e: Option<&Option<TokenStream>>) -> TokenStream {
    match e {
        Some(Some(t)) => quote!(Some(#t)),
        _ => quote!(None),
    }
}

fn bools(values: &[bool]) -> TokenStream {
    quote!(&[#(#values),*])
}

// ---------------------------------------------------------------------------
// BatchNormalization

struct BatchNormRule;

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
            act: super::fused_activation(cx),
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
        super::epilogue::finish_host(y, None, k.act);
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
    super::epilogue::finish_host(y, None, k.act);
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
        let (act, after) = super::epilogue::fused_epilogue(self.act, self.elem, y, rt);
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

struct LayerNormRule;

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

struct InstanceNormRule;

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

struct GroupNormRule;

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

struct LpNormRule;

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

// ---------------------------------------------------------------------------
// Reductions and MeanVarianceNormalization

/// One flag per axis of a rank-`rank` tensor: the axes in `axes` (each in
/// `[-rank, rank)`, none twice).
fn axis_mask(cx: &NodeCx<'_>, axes: &[i64], rank: usize) -> OpResult<Vec<bool>> {
    let mut mask = vec![false; rank];
    for &a in axes {
        let i = axis(a, rank, &format!("{} axis", op_name(cx)))?;
        if mask[i] {
            return invalid(format!("{} names axis {a} twice", op_name(cx)));
        }
        mask[i] = true;
    }
    Ok(mask)
}

struct MvnRule;

fn mvn_mask(cx: &NodeCx<'_>) -> OpResult<Vec<bool>> {
    let x = float_input(cx, 0)?;
    let axes = cx.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    axis_mask(cx, &axes, x.rank())
}

impl OpRule for MvnRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        mvn_mask(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ReduceKernel {
            what: ReduceWhat::Mvn,
            elem: elem_of(outputs, ElemType::Float),
            shape: cx.input(0)?.dims.clone(),
            axes: mvn_mask(cx)?,
        })))
    }
}

struct ReduceRule;

fn reduce_op(name: &str) -> ReduceOp {
    match name {
        "ReduceMean" => ReduceOp::Mean,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceLogSum" => ReduceOp::LogSum,
        "ReduceLogSumExp" => ReduceOp::LogSumExp,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        _ => ReduceOp::Sum,
    }
}

/// A reduction node: which axes it folds, and its output dims.
struct ReducePlan {
    mask: Mask,
    out: Vec<usize>,
}

enum Mask {
    /// No axes with `noop_with_empty_axes`: the output is the input.
    Noop,
    /// The axes, known at generation time.
    Known(Vec<bool>),
    /// The axes are data read at run time; the output shape is the declared
    /// one, and the generated code checks the axes against it.
    Runtime,
}

fn reduce_plan(cx: &NodeCx<'_>) -> OpResult<ReducePlan> {
    let x = cx.input(0)?;
    let op = reduce_op(op_name(cx));
    let float_only = matches!(op, ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp);
    match x.elem {
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => {}
        ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64
            if !float_only => {}
        ElemType::Bool if matches!(op, ReduceOp::Max | ReduceOp::Min) => {}
        other => {
            return unsupported(format!(
                "{} on {other} tensors (the runtime kernel has no such reduction)",
                op_name(cx)
            ));
        }
    }
    // Axes moved from an attribute to an input: ReduceSum at 13, the others at 18.
    let input_from = if op == ReduceOp::Sum { 13 } else { 18 };
    let axes = if cx.version() < input_from {
        cx.ints("axes").unwrap_or_default()
    } else {
        match cx.opt_input(1) {
            None => Vec::new(),
            // An empty axes tensor needs no value.
            Some(t) if t.numel() == Some(0) => Vec::new(),
            Some(_) if cx.constant(1).is_none() => {
                let Some(out) = cx.expected_dims(0) else {
                    return unsupported(
                        "axes (input 1) are known only at run time and the output's shape is not declared",
                    );
                };
                return Ok(ReducePlan { mask: Mask::Runtime, out: out.to_vec() });
            }
            Some(_) => cx.const_ints(1, "axes")?,
        }
    };
    let rank = x.rank();
    let mask = if axes.is_empty() {
        if cx.int_or("noop_with_empty_axes", 0) != 0 {
            return Ok(ReducePlan { mask: Mask::Noop, out: x.dims.clone() });
        }
        vec![true; rank]
    } else {
        axis_mask(cx, &axes, rank)?
    };
    let keep = cx.int_or("keepdims", 1) != 0;
    let out = x
        .dims
        .iter()
        .zip(&mask)
        .filter_map(|(&d, &r)| match (r, keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(ReducePlan { mask: Mask::Known(mask), out })
}

impl OpRule for ReduceRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = reduce_plan(cx)?;
        Ok(vec![cx.input(0)?.with_dims(plan.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let x = cx.input(0)?;
        let plan = reduce_plan(cx)?;
        let axes = match plan.mask {
            Mask::Noop => return Ok(Lowered::Alias),
            Mask::Known(axes) => axes,
            Mask::Runtime => {
                return Ok(Lowered::Kernel(Box::new(RuntimeReduceKernel {
                    op: reduce_op(op_name(cx)),
                    elem: elem_of(outputs, x.elem),
                    shape: x.dims.clone(),
                    out: plan.out,
                    keepdims: cx.int_or("keepdims", 1) != 0,
                    noop: cx.int_or("noop_with_empty_axes", 0) != 0,
                })));
            }
        };
        Ok(Lowered::Kernel(Box::new(ReduceKernel {
            what: ReduceWhat::Op(reduce_op(op_name(cx))),
            elem: elem_of(outputs, x.elem),
            shape: x.dims.clone(),
            axes,
        })))
    }
}

/// A reduction whose axes are data read at run time: the generated code
/// builds the axis mask, checks it against the planned output shape, and
/// runs the same kernels as [`ReduceKernel`].
struct RuntimeReduceKernel {
    op: ReduceOp,
    elem: ElemType,
    shape: Vec<usize>,
    out: Vec<usize>,
    keepdims: bool,
    noop: bool,
}

impl Kernel for RuntimeReduceKernel {
    /// Never folded: its axes are not constants.
    fn eval(&self, _inputs: &[Option<&HostTensor>], _outputs: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let rank = lit::usize_lit(self.shape.len());
        let shape = lit::usizes(&self.shape);
        let out = lit::usizes(&self.out);
        let (keep, noop) = (self.keepdims, self.noop);
        let (x, axes, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        let p = quote!(&#rt::reduce::Reduce { shape: #shape, axes: &mask });
        let call = match self.elem {
            ElemType::Bool => {
                let max = self.op == ReduceOp::Max;
                quote!(#rt::reduce::reduce_flags(#max, #p, x, y)?;)
            }
            ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => {
                let op = reduce_op_tokens(self.op, rt);
                quote!(#rt::reduce::reduce_float(#op, #p, x, y)?;)
            }
            _ => {
                let op = reduce_op_tokens(self.op, rt);
                quote!(#rt::reduce::reduce(#op, #p, x, y)?;)
            }
        };
        quote! {
            let (x, y) = (#x, #y);
            let mut mask = [false; #rank];
            if #rt::reduce::runtime_axes(#axes, #shape, #keep, #noop, #out, &mut mask)? {
                y.copy_from_slice(x);
            } else {
                #call
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReduceWhat {
    Op(ReduceOp),
    /// MeanVarianceNormalization over the axes.
    Mvn,
}

struct ReduceKernel {
    what: ReduceWhat,
    elem: ElemType,
    shape: Vec<usize>,
    axes: Vec<bool>,
}

fn run_reduce_num<T: Num + HostElem>(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let ReduceWhat::Op(op) = k.what else { return Err(EvalError::Type(k.elem)) };
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    rt_reduce::reduce(op, &p, host_in::<T>(inputs, 0)?, host_out::<T>(outputs, 0)?)?;
    Ok(())
}

fn run_reduce_float<T: Float + HostElem>(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    let (x, y) = (host_in::<T>(inputs, 0)?, host_out::<T>(outputs, 0)?);
    match k.what {
        ReduceWhat::Op(op) => rt_reduce::reduce_float(op, &p, x, y)?,
        ReduceWhat::Mvn => rt_reduce::mean_variance_norm(&p, x, y)?,
    }
    Ok(())
}

fn run_reduce_bool(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = match inputs.first().copied().flatten().map(|t| &t.data) {
        Some(HostData::Bool(v)) => v.as_slice(),
        _ => return Err(EvalError::Type(ElemType::Bool)),
    };
    let y = match outputs.first_mut().map(|t| &mut t.data) {
        Some(HostData::Bool(v)) => v.as_mut_slice(),
        _ => return Err(EvalError::Type(ElemType::Bool)),
    };
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    rt_reduce::reduce_flags(k.what == ReduceWhat::Op(ReduceOp::Max), &p, x, y)?;
    Ok(())
}

fn reduce_op_tokens(op: ReduceOp, rt: &TokenStream) -> TokenStream {
    let v = match op {
        ReduceOp::Sum => quote!(Sum),
        ReduceOp::Mean => quote!(Mean),
        ReduceOp::Max => quote!(Max),
        ReduceOp::Min => quote!(Min),
        ReduceOp::Prod => quote!(Prod),
        ReduceOp::L1 => quote!(L1),
        ReduceOp::SumSquare => quote!(SumSquare),
        ReduceOp::L2 => quote!(L2),
        ReduceOp::LogSum => quote!(LogSum),
        ReduceOp::LogSumExp => quote!(LogSumExp),
    };
    quote!(#rt::reduce::ReduceOp::#v)
}

impl Kernel for ReduceKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.elem {
            ElemType::Float => run_reduce_float::<f32>(self, inputs, outputs),
            ElemType::Double => run_reduce_float::<f64>(self, inputs, outputs),
            ElemType::Float16 => run_reduce_float::<super::f16>(self, inputs, outputs),
            ElemType::Bfloat16 => run_reduce_float::<super::bf16>(self, inputs, outputs),
            ElemType::Bool => run_reduce_bool(self, inputs, outputs),
            _ => crate::by_num_type!(self.elem, run_reduce_num(self, inputs, outputs)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let shape = lit::usizes(&self.shape);
        let axes = bools(&self.axes);
        let p = quote!(&#rt::reduce::Reduce { shape: #shape, axes: #axes });
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        match (self.what, self.elem) {
            (ReduceWhat::Mvn, _) => quote!(#rt::reduce::mean_variance_norm(#p, #x, #y)?;),
            (ReduceWhat::Op(op), ElemType::Bool) => {
                let max = op == ReduceOp::Max;
                quote!(#rt::reduce::reduce_flags(#max, #p, #x, #y)?;)
            }
            (
                ReduceWhat::Op(op),
                ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16,
            ) => {
                let op = reduce_op_tokens(op, rt);
                quote!(#rt::reduce::reduce_float(#op, #p, #x, #y)?;)
            }
            (ReduceWhat::Op(op), _) => {
                let op = reduce_op_tokens(op, rt);
                quote!(#rt::reduce::reduce(#op, #p, #x, #y)?;)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// ArgMax, ArgMin

struct ArgRule;

fn arg_plan(cx: &NodeCx<'_>) -> OpResult<(AxisShape, Vec<usize>)> {
    let x = cx.input(0)?;
    match x.elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64 => {}
        other => return unsupported(format!("{} on {other} tensors", op_name(cx))),
    }
    let dims = &x.dims;
    let a = axis(cx.int_or("axis", 0), dims.len(), &format!("{} axis", op_name(cx)))?;
    if dims[a] == 0 {
        return invalid(format!("{} over axis {a} of {x}, which is empty", op_name(cx)));
    }
    let s =
        AxisShape { outer: product(&dims[..a])?, axis: dims[a], inner: product(&dims[a + 1..])? };
    let mut out = dims.clone();
    if cx.int_or("keepdims", 1) != 0 {
        out[a] = 1;
    } else {
        out.remove(a);
    }
    Ok((s, out))
}

impl OpRule for ArgRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, out) = arg_plan(cx)?;
        Ok(vec![TensorType::new(ElemType::Int64, out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (s, _) = arg_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(ArgKernel {
            elem: cx.input(0)?.elem,
            s,
            max: op_name(cx) == "ArgMax",
            last: cx.int_or("select_last_index", 0) != 0,
        })))
    }
}

struct ArgKernel {
    elem: ElemType,
    s: AxisShape,
    max: bool,
    last: bool,
}

fn run_arg<T: Num + HostElem>(
    k: &ArgKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    rt_reduce::arg_extreme(k.s, k.max, k.last, x, host_out::<i64>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for ArgKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_arg(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = axis_shape_tokens(self.s, rt);
        let (max, last) = (self.max, self.last);
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote!(#rt::reduce::arg_extreme(#s, #max, #last, #x, #y)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn reduce_axes_from_an_input_or_an_attribute() {
        // ReduceSum-13 takes axes as an input; rows of [[1,2,3],[4,5,6]] sum to 6 and 15.
        let a = run(
            13,
            "g () => (float[2] y) <float[2,3] x = {1,2,3,4,5,6}, int64[1] axes = {1}> {
                y = ReduceSum <keepdims: int = 0> (x, axes)
            }",
        );
        assert_eq!(types(&a), [ty("float[2]")]);
        assert_eq!(value(&a, 0), [6.0, 15.0]);
        // ReduceMean-11 takes axes as an attribute; columns average to 2.5, 3.5, 4.5.
        let a = run(
            11,
            "g () => (float[1,3] y) <float[2,3] x = {1,2,3,4,5,6}> {
                y = ReduceMean <axes: ints = [-2]> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 3]")]);
        assert_eq!(value(&a, 0), [2.5, 3.5, 4.5]);
        // Integer ReduceProd over everything, keepdims by default.
        let a = run(
            18,
            "g () => (int32[1,1] y) <int32[2,2] x = {1,2,3,-4}> {
                y = ReduceProd (x)
            }",
        );
        assert_eq!(types(&a), [ty("int32[1, 1]")]);
        assert_eq!(value(&a, 0), [-24.0]);
    }

    #[test]
    fn reduce_empty_axes_reduce_all_or_nothing() {
        let a = run(18, "g (float[2,3,4] x) => (float[1,1,1] y) { y = ReduceMax (x) }");
        assert_eq!(types(&a), [ty("float[1, 1, 1]")]);
        let a =
            run(18, "g (float[2,3,4] x) => (float y) { y = ReduceMax <keepdims: int = 0> (x) }");
        assert_eq!(types(&a), [ty("float[]")]);
        // noop_with_empty_axes: the output is the input.
        let a = run(
            18,
            "g (float[2,3,4] x) => (float[2,3,4] y) { y = ReduceLogSumExp <noop_with_empty_axes: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4]")]);
        assert!(a.inferred.is_complete());
        // An axes input whose type says it is empty needs no value.
        let a = run(
            13,
            "g (float[2,3] x, int64[0] axes) => (float[1,1] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [ty("float[1, 1]")]);
    }

    #[test]
    fn reduce_errors_and_unsupported_cases() {
        let a = run(
            13,
            "g (float[2,3] x, int64[1] axes) => (float[?,?] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [None]);
        assert!(unsupported(&a)[0].contains(
            "axes (input 1) are known only at run time and the output's shape is not declared"
        ));
        // With the output's shape declared, the axes may be data: the plan
        // follows the declaration and the generated code checks it.
        let a = run(
            13,
            "g (float[2,3] x, int64[1] axes) => (float[2,1] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [ty("float[2, 1]")]);
        assert!(a.inferred.is_complete());
        let a = run(
            11,
            "g (float[2,3] x) => (float[?,?] y) { y = ReduceMin <axes: ints = [1, -1]> (x) }",
        );
        assert!(errors(&a)[0].contains("names axis -1 twice"), "{:?}", errors(&a));
        let a =
            run(11, "g (float[2,3] x) => (float[?,?] y) { y = ReduceMin <axes: ints = [2]> (x) }");
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
        let a = run(18, "g (int32[2,3] x) => (int32[?,?] y) { y = ReduceL2 (x) }");
        assert!(unsupported(&a)[0].contains("ReduceL2 on int32"), "{:?}", unsupported(&a));
        // float16 sums in f32 steps rounded per operation, like the reference.
        let a = run(18, "g (float16[2,3] x) => (float16[?,?] y) { y = ReduceSum (x) }");
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }

    #[test]
    fn boolean_max_and_min() {
        let a = run(
            20,
            "g () => (bool[2,1] y, bool[2,1] z) <bool[2,2] x = {1,0,0,0}, int64[1] axes = {1}> {
                y = ReduceMax (x, axes)
                z = ReduceMin (x, axes)
            }",
        );
        assert_eq!(types(&a), [ty("bool[2, 1]"), ty("bool[2, 1]")]);
        assert_eq!(value(&a, 0), [1.0, 0.0]);
        assert_eq!(value(&a, 1), [0.0, 0.0]);
        let a = run(20, "g (bool[2,2] x) => (bool[?,?] y) { y = ReduceSum (x) }");
        assert_eq!(unsupported(&a).len(), 1);
    }

    #[test]
    fn arg_max_and_min() {
        // Rows [1, 3, 3] and [2, 0, 0].
        let a = run(
            13,
            "g () => (int64[2] y, int64[2,1] z, int64[1,3] w) <float[2,3] x = {1,3,3,2,0,0}> {
                y = ArgMax <axis: int = 1, keepdims: int = 0> (x)
                z = ArgMax <axis: int = -1, select_last_index: int = 1> (x)
                w = ArgMin (x)
            }",
        );
        assert_eq!(types(&a), [ty("int64[2]"), ty("int64[2, 1]"), ty("int64[1, 3]")]);
        assert_eq!(value(&a, 0), [1.0, 0.0]);
        assert_eq!(value(&a, 1), [2.0, 0.0]);
        assert_eq!(value(&a, 2), [0.0, 1.0, 1.0]);
        let a = run(13, "g (float[2,0] x) => (int64[?,?] y) { y = ArgMax <axis: int = 1> (x) }");
        assert!(errors(&a)[0].contains("empty"), "{:?}", errors(&a));
    }

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

    #[test]
    fn lp_and_mean_variance_normalisation() {
        let a = run(
            22,
            "g () => (float[2,2] y) <float[2,2] x = {3,4,0,-2}> { y = LpNormalization <p: int = 1, axis: int = 1> (x) }",
        );
        assert_eq!(value(&a, 0), [f64::from(3.0f32 / 7.0), f64::from(4.0f32 / 7.0), 0.0, -1.0]);
        let a =
            run(22, "g (float[2,2] x) => (float[2,2] y) { y = LpNormalization <p: int = 3> (x) }");
        assert!(errors(&a)[0].contains("only 1 and 2"), "{:?}", errors(&a));
        let a = run(
            13,
            "g (float[2,3,4,5] x) => (float[2,3,4,5] y) { y = MeanVarianceNormalization (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4, 5]")]);
        assert!(a.inferred.is_complete());
        // The default axes [0, 2, 3] do not exist in a rank-2 input.
        let a = run(13, "g (float[2,3] x) => (float[2,3] y) { y = MeanVarianceNormalization (x) }");
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
    }
}
