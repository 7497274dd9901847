//! Activations with parameters (Shrink, Celu, Swish, Mish), PRelu, LRN,
//! MaxUnpool, the random generators (RandomUniform, RandomNormal, their
//! `Like` forms, Bernoulli); and [`FnKernel`], the kernel shape the families in
//! `misc`, `signal` and `ml` share: one closure that runs the call on the
//! host and one that writes it, built together from the same plan.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    broadcast_shapes, broadcast_strides, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::misc::{self as rt_misc, Act, DEFAULT_SEED, Dist, Lrn};
use onnx_codegen_runtime::num::Float;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Shrink" | "Celu" | "Swish" | "Mish" => Some(&ActRule),
        "PRelu" => Some(&PReluRule),
        "LRN" => Some(&LrnRule),
        "MaxUnpool" => Some(&MaxUnpoolRule),
        "RandomUniform" | "RandomNormal" | "RandomUniformLike" | "RandomNormalLike" => {
            Some(&RandomRule)
        }
        "Bernoulli" => Some(&BernoulliRule),
        _ => None,
    }
}

type EvalFn = Box<dyn Fn(&[Option<&HostTensor>], &mut [HostTensor]) -> EvalResult>;
type EmitFn = Box<dyn Fn(&Io) -> TokenStream>;

/// A kernel made of two closures over one plan: `eval` for folding, `emit`
/// for the generated call. `reads[i]` says whether input `i` is read at
/// run time (inputs taken at generation time are not).
pub(super) struct FnKernel {
    pub eval: EvalFn,
    pub emit: EmitFn,
    pub reads: Vec<bool>,
}

impl Kernel for FnKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        (self.eval)(inputs, outputs)
    }

    fn emit(&self, io: &Io) -> TokenStream {
        (self.emit)(io)
    }

    fn reads_input(&self, i: usize) -> bool {
        self.reads.get(i).copied().unwrap_or(true)
    }
}

impl FnKernel {
    /// Boxed as a lowering.
    pub fn lowered(self) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(self)))
    }
}

/// A host buffer of another type or count than planned.
pub(super) fn mismatch() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

/// Input `i`'s elements as `T`.
pub(super) fn hin<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(HostTensor::get::<T>).ok_or_else(mismatch)
}

/// Output `j`'s elements as `T`.
pub(super) fn hout<T: HostElem>(
    outputs: &mut [HostTensor],
    j: usize,
) -> Result<&mut [T], EvalError> {
    outputs.get_mut(j).and_then(HostTensor::get_mut::<T>).ok_or_else(mismatch)
}

/// The one value of integer input `i` on the host, as `i64`.
pub(super) fn host_int(inputs: &[Option<&HostTensor>], i: usize) -> Result<i64, EvalError> {
    let t = inputs.get(i).copied().flatten().ok_or_else(mismatch)?;
    match t.ty.elem {
        ElemType::Int64 => match t.get::<i64>() {
            Some([v]) => Ok(*v),
            _ => Err(mismatch()),
        },
        ElemType::Int32 => match t.get::<i32>() {
            Some([v]) => Ok(i64::from(*v)),
            _ => Err(mismatch()),
        },
        other => Err(EvalError::Type(other)),
    }
}

/// The one value of float input `i` on the host, as `f64`.
pub(super) fn host_float(inputs: &[Option<&HostTensor>], i: usize) -> Result<f64, EvalError> {
    let t = inputs.get(i).copied().flatten().ok_or_else(mismatch)?;
    match t.ty.elem {
        ElemType::Float => match t.get::<f32>() {
            Some([v]) => Ok(f64::from(*v)),
            _ => Err(mismatch()),
        },
        ElemType::Double => match t.get::<f64>() {
            Some([v]) => Ok(*v),
            _ => Err(mismatch()),
        },
        other => Err(EvalError::Type(other)),
    }
}

/// The generated expression reading scalar input `i` as `i64` (or `f64`
/// when `float`).
pub(super) fn scalar_expr(io: &Io, i: usize, float: bool) -> TokenStream {
    let rt = &io.rt;
    let b = io.inputs.get(i).cloned().flatten();
    if float {
        quote!(f64::from(#rt::check::scalar(#b)?))
    } else {
        quote!(i64::from(#rt::check::scalar(#b)?))
    }
}

/// Requires a float or double tensor (what the float kernels take).
pub(super) fn float_input<'a>(cx: &NodeCx<'a>, i: usize) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if !matches!(t.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!(
            "{} on {} tensors (the kernel handles float and double)",
            cx.node.op.op_type, t.elem
        ));
    }
    Ok(t)
}

/// The integer value of scalar input `i` when known at generation time;
/// `Ok(None)` when it is data.
pub(super) fn const_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Option<i64>> {
    if cx.constant(i).is_none() {
        return Ok(None);
    }
    match cx.const_ints(i, what)?.as_slice() {
        [v] => Ok(Some(*v)),
        _ => invalid(format!("{what} (input {i}) must hold one value")),
    }
}

/// The declared output `k`, for an output shape that depends on run-time
/// values; `unsupported` when the model does not declare it.
pub(super) fn declared<'a>(cx: &NodeCx<'a>, k: usize, why: &str) -> OpResult<&'a TensorType> {
    cx.declared_output(k).ok_or_else(|| {
        OpError::Unsupported(format!(
            "{}'s output shape depends on {why}, known only at run time, and the model does not declare it",
            cx.node.op.op_type
        ))
    })
}

struct ActRule;

fn act(cx: &NodeCx<'_>) -> OpResult<Act> {
    let f = |name: &str, default: f32| f64::from(cx.float_or(name, default));
    Ok(match cx.node.op.op_type.as_str() {
        "Shrink" => Act::Shrink { lambd: f("lambd", 0.5), bias: f("bias", 0.0) },
        "Celu" => {
            let alpha = f("alpha", 1.0);
            if alpha == 0.0 {
                return invalid("Celu's alpha must not be 0");
            }
            Act::Celu { alpha }
        }
        "Swish" => Act::Swish { alpha: f("alpha", 1.0) },
        "Mish" => Act::Mish,
        other => return unsupported(format!("{other} is not an activation handled here")),
    })
}

fn act_tokens(op: Act, rt: &TokenStream) -> TokenStream {
    let l = lit::f64_lit;
    match op {
        Act::Shrink { lambd, bias } => {
            let (a, b) = (l(lambd), l(bias));
            quote!(#rt::misc::Act::Shrink { lambd: #a, bias: #b })
        }
        Act::Celu { alpha } => {
            let a = l(alpha);
            quote!(#rt::misc::Act::Celu { alpha: #a })
        }
        Act::Swish { alpha } => {
            let a = l(alpha);
            quote!(#rt::misc::Act::Swish { alpha: #a })
        }
        Act::Mish => quote!(#rt::misc::Act::Mish),
    }
}

fn run_act<T: Float + HostElem>(
    op: Act,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = hin::<T>(inputs, 0)?;
    rt_misc::activation(op, x, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for ActRule {
    /// `Swish` of alpha 1 (SiLU) fuses into the product before it.
    fn as_activation(
        &self,
        node: &crate::ir::Node,
        _input: &dyn Fn(usize) -> super::ScalarInput,
    ) -> Option<crate::ir::lowering::Activation> {
        use crate::ir::AttrValue;
        use crate::ir::lowering::Activation;
        if node.op.op_type != "Swish" {
            return None;
        }
        match node.attr("alpha") {
            None => Some(Activation::Silu),
            Some(AttrValue::Float(a)) if *a == 1.0 => Some(Activation::Silu),
            _ => None,
        }
    }

    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        // Computed in f64 and rounded once per element, which for the 16-bit
        // floats is what the reference's float32 evaluation rounds to.
        let x = cx.input(0)?;
        if !super::is_float_num(x.elem) {
            return unsupported(format!(
                "{} on {} tensors (the kernel handles the float types)",
                cx.node.op.op_type, x.elem
            ));
        }
        act(cx)?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let op = act(cx)?;
        let elem = cx.input(0)?.elem;
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_act(op, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                // f32 SiLU through the vectorised `vmath` routine, as a
                // `Sigmoid` then a `Mul` would compute it.
                if let (ElemType::Float, Act::Swish { alpha: 1.0 }) = (elem, op) {
                    return quote!(#rt::elementwise::sunary(#rt::elementwise::Unary::Silu, #x, #y)?;);
                }
                let a = act_tokens(op, rt);
                quote!(#rt::misc::activation(#a, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct PReluRule;

fn prelu_strides(cx: &NodeCx<'_>) -> OpResult<(Vec<usize>, Vec<isize>)> {
    let x = float_input(cx, 0)?;
    let slope = cx.input(1)?;
    if slope.elem != x.elem {
        return invalid(format!("PRelu's slope is {} but its input is {}", slope.elem, x.elem));
    }
    if cx.version() < 7 {
        // Before opset 7 the slope does not broadcast: it is one value
        // shared by every channel, one per element, or (as Caffe2 and
        // PyTorch's exporter mean it) one per channel, the input's axis 1.
        let dims = match (slope.numel(), slope.dims.as_slice(), x.dims.get(1)) {
            (Some(1), _, _) => vec![1; x.dims.len()],
            (_, d, _) if d == x.dims.as_slice() => x.dims.clone(),
            (_, &[c], Some(&channels)) if c == channels => {
                let mut d = vec![1; x.dims.len()];
                d[1] = c;
                d
            }
            _ => {
                return unsupported(format!(
                    "PRelu before opset 7 with a slope of shape {:?} on an input of shape {:?}: \
                     the slope must hold one value, one per channel (axis 1) or one per element",
                    slope.dims, x.dims
                ));
            }
        };
        return Ok((x.dims.clone(), broadcast_strides(&dims, &x.dims)));
    }
    if slope.dims.len() > x.dims.len() || broadcast_shapes(&[&x.dims, &slope.dims])? != x.dims {
        return invalid(format!(
            "PRelu's slope of shape {:?} does not broadcast to its input's shape {:?}",
            slope.dims, x.dims
        ));
    }
    Ok((x.dims.clone(), broadcast_strides(&slope.dims, &x.dims)))
}

fn run_prelu<T: Float + HostElem>(
    dims: &[usize],
    strides: &[isize],
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, s) = (hin::<T>(inputs, 0)?, hin::<T>(inputs, 1)?);
    rt_misc::prelu(dims, strides, x, s, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for PReluRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        prelu_strides(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (dims, strides) = prelu_strides(cx)?;
        let elem = cx.input(0)?.elem;
        let (d2, s2) = (dims.clone(), strides.clone());
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_prelu(&d2, &s2, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (d, s) = (lit::usizes(&dims), lit::isizes(&strides));
                let (x, a, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
                quote!(#rt::misc::prelu(#d, #s, #x, #a, #y)?;)
            }),
            reads: vec![true, true],
        }
        .lowered()
    }
}

struct LrnRule;

fn lrn_params(cx: &NodeCx<'_>) -> OpResult<Lrn> {
    let x = float_input(cx, 0)?;
    if x.dims.len() < 3 {
        return invalid(format!("LRN needs an input of rank 3 or more, got {:?}", x.dims));
    }
    let size = cx.int("size")?;
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .ok_or_else(|| OpError::Invalid(format!("LRN's size {size} must be positive")))?;
    Ok(Lrn {
        batch: x.dims[0],
        channels: x.dims[1],
        spatial: x.dims[2..].iter().product(),
        size,
        alpha: f64::from(cx.float_or("alpha", 1e-4)),
        beta: f64::from(cx.float_or("beta", 0.75)),
        bias: f64::from(cx.float_or("bias", 1.0)),
    })
}

fn run_lrn<T: Float + HostElem>(
    p: &Lrn,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_misc::lrn(p, hin::<T>(inputs, 0)?, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for LrnRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        lrn_params(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = lrn_params(cx)?;
        let elem = cx.input(0)?.elem;
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_lrn(&p, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let u = lit::usize_lit;
                let (b, c, s, n) = (u(p.batch), u(p.channels), u(p.spatial), u(p.size));
                let (al, be, bi) =
                    (lit::f64_lit(p.alpha), lit::f64_lit(p.beta), lit::f64_lit(p.bias));
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::misc::lrn(&#rt::misc::Lrn {
                    batch: #b, channels: #c, spatial: #s, size: #n,
                    alpha: #al, beta: #be, bias: #bi,
                }, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct MaxUnpoolRule;

/// MaxUnpool's default output dims, and its output dims.
fn unpool_dims(cx: &NodeCx<'_>) -> OpResult<(Vec<usize>, Vec<usize>, bool)> {
    let x = float_input(cx, 0)?;
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 || idx.dims != x.dims {
        return invalid(format!(
            "MaxUnpool's indices must be int64 of the input's shape {:?}, got {} {:?}",
            x.dims, idx.elem, idx.dims
        ));
    }
    let rank = x.dims.len();
    if rank < 3 {
        return invalid(format!("MaxUnpool needs an input of rank 3 or more, got {:?}", x.dims));
    }
    let k = rank - 2;
    let Some(kernel) = cx.ints("kernel_shape") else {
        return invalid("MaxUnpool's kernel_shape is required");
    };
    let strides = cx.ints("strides").unwrap_or_else(|| vec![1; k]);
    let pads = cx.ints("pads").unwrap_or_else(|| vec![0; 2 * k]);
    if kernel.len() != k || strides.len() != k || pads.len() != 2 * k {
        return invalid(format!(
            "MaxUnpool on rank {rank} needs {k} kernel dims and strides and {} pads",
            2 * k
        ));
    }
    let mut inferred = x.dims[..2].to_vec();
    for d in 0..k {
        let v = (x.dims[d + 2] as i64 - 1)
            .checked_mul(strides[d])
            .and_then(|v| v.checked_sub(pads[d] + pads[d + k]))
            .and_then(|v| v.checked_add(kernel[d]))
            .and_then(|v| usize::try_from(v).ok())
            .ok_or_else(|| OpError::Invalid("MaxUnpool's output size is negative".into()))?;
        inferred.push(v);
    }
    if cx.opt_input(2).is_none() {
        return Ok((inferred.clone(), inferred, false));
    }
    let (out, runtime) = if cx.constant(2).is_some() {
        let v = cx.const_ints(2, "output_shape")?;
        let dims: Option<Vec<usize>> = v.iter().map(|&d| usize::try_from(d).ok()).collect();
        (
            dims.ok_or_else(|| OpError::Invalid("MaxUnpool's output_shape is negative".into()))?,
            false,
        )
    } else {
        (declared(cx, 0, "the output_shape input")?.dims.clone(), true)
    };
    if out.len() != rank || out.iter().zip(&inferred).any(|(a, b)| a < b) {
        return invalid(format!(
            "MaxUnpool's output shape {out:?} is smaller than the unpooled shape {inferred:?}"
        ));
    }
    Ok((inferred, out, runtime))
}

fn run_unpool<T: Float + HostElem>(
    inferred: &[usize],
    out: &[usize],
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, i) = (hin::<T>(inputs, 0)?, hin::<i64>(inputs, 1)?);
    rt_misc::max_unpool(inferred, out, x, i, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for MaxUnpoolRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, out, _) = unpool_dims(cx)?;
        Ok(vec![TensorType::new(cx.input(0)?.elem, out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (inferred, out, runtime) = unpool_dims(cx)?;
        let elem = cx.input(0)?.elem;
        let (i2, o2) = (inferred.clone(), out.clone());
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_unpool(&i2, &o2, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (a, b) = (lit::usizes(&inferred), lit::usizes(&out));
                let (x, i, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
                let check = match io.inputs.get(2).cloned().flatten() {
                    Some(s) if runtime => quote!(#rt::misc::check_dims(#s, #b)?;),
                    _ => quote!(),
                };
                quote!(#check #rt::misc::max_unpool(#a, #b, #x, #i, #y)?;)
            }),
            reads: vec![true, true, runtime],
        }
        .lowered()
    }
}

/// The generator seed of a random node: its `seed` attribute's bits, or
/// the runtime's fixed default.
fn seed(cx: &NodeCx<'_>) -> u64 {
    match cx.node.attr("seed") {
        Some(crate::ir::AttrValue::Float(f)) => u64::from(f.to_bits()),
        _ => DEFAULT_SEED,
    }
}

/// The float type a `dtype` attribute names (1 float, 11 double), or
/// `default` when absent.
fn random_elem(cx: &NodeCx<'_>, name: &str, default: Option<ElemType>) -> OpResult<ElemType> {
    let code = match cx.node.attr(name) {
        Some(crate::ir::AttrValue::Int(v)) => *v,
        _ => match default {
            Some(e) => return Ok(e),
            None => 1,
        },
    };
    match code {
        1 => Ok(ElemType::Float),
        11 => Ok(ElemType::Double),
        other => unsupported(format!(
            "{} with {name} {other} (the kernel writes float and double)",
            cx.node.op.op_type
        )),
    }
}

/// Random nodes are never folded: their values belong to each run.
fn not_folded(elem: ElemType) -> EvalResult {
    Err(EvalError::Type(elem))
}

struct RandomRule;

fn random_plan(cx: &NodeCx<'_>) -> OpResult<(Dist, TensorType)> {
    let op = cx.node.op.op_type.as_str();
    let like = op.ends_with("Like");
    let ty = if like {
        let x = cx.input(0)?;
        let default = matches!(x.elem, ElemType::Float | ElemType::Double).then_some(x.elem);
        TensorType::new(random_elem(cx, "dtype", default)?, x.dims.clone())
    } else {
        let Some(shape) = cx.ints("shape") else {
            return invalid(format!("{op}'s shape is required"));
        };
        let dims: Option<Vec<usize>> = shape.iter().map(|&d| usize::try_from(d).ok()).collect();
        let dims = dims.ok_or_else(|| {
            OpError::Invalid(format!("{op}'s shape {shape:?} has a negative dim"))
        })?;
        TensorType::new(random_elem(cx, "dtype", None)?, dims)
    };
    if ty.numel().is_none() {
        return invalid(format!("{op}'s output shape {:?} is too large", ty.dims));
    }
    let f = |name: &str, d: f32| f64::from(cx.float_or(name, d));
    let dist = if op.starts_with("RandomUniform") {
        Dist::Uniform { low: f("low", 0.0), high: f("high", 1.0) }
    } else {
        Dist::Normal { mean: f("mean", 0.0), scale: f("scale", 1.0) }
    };
    Ok((dist, ty))
}

impl OpRule for RandomRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![random_plan(cx)?.1])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (dist, ty) = random_plan(cx)?;
        let seed = seed(cx);
        let elem = ty.elem;
        FnKernel {
            eval: Box::new(move |_, _| not_folded(elem)),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let l = lit::f64_lit;
                let d = match dist {
                    Dist::Uniform { low, high } => {
                        let (a, b) = (l(low), l(high));
                        quote!(#rt::misc::Dist::Uniform { low: #a, high: #b })
                    }
                    Dist::Normal { mean, scale } => {
                        let (a, b) = (l(mean), l(scale));
                        quote!(#rt::misc::Dist::Normal { mean: #a, scale: #b })
                    }
                };
                let y = &io.outputs[0];
                quote!(#rt::misc::random(#d, #seed, #y);)
            }),
            reads: vec![false],
        }
        .lowered()
    }
}

struct BernoulliRule;

fn bernoulli_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, ElemType, Vec<usize>)> {
    let x = float_input(cx, 0)?;
    let out = match cx.node.attr("dtype") {
        Some(crate::ir::AttrValue::Int(1)) | None if x.elem == ElemType::Float => ElemType::Float,
        Some(crate::ir::AttrValue::Int(11)) | None if x.elem == ElemType::Double => {
            ElemType::Double
        }
        Some(crate::ir::AttrValue::Int(1)) => ElemType::Float,
        Some(crate::ir::AttrValue::Int(11)) => ElemType::Double,
        Some(crate::ir::AttrValue::Int(6)) => ElemType::Int32,
        Some(crate::ir::AttrValue::Int(7)) => ElemType::Int64,
        _ => {
            return unsupported(
                "Bernoulli with an output dtype other than float, double, int32, int64",
            );
        }
    };
    Ok((x.elem, out, x.dims.clone()))
}

impl OpRule for BernoulliRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, out, dims) = bernoulli_plan(cx)?;
        Ok(vec![TensorType::new(out, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (_, out, _) = bernoulli_plan(cx)?;
        let seed = seed(cx);
        FnKernel {
            eval: Box::new(move |_, _| not_folded(out)),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::misc::bernoulli(#seed, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn random_shapes() {
        let a = run(
            22,
            "g () => (double[2,3] y) { y = RandomNormal <shape: ints = [2, 3], dtype: int = 11, seed: float = 1> () }",
        );
        assert_eq!(types(&a), [ty("double[2, 3]")]);
        let a = run(22, "g (float[4] x) => (float[4] y) { y = RandomUniformLike (x) }");
        assert_eq!(types(&a), [ty("float[4]")]);
        let a = run(22, "g (float[4] x) => (int64[4] y) { y = Bernoulli <dtype: int = 7> (x) }");
        assert_eq!(types(&a), [ty("int64[4]")]);
        let a = run(22, "g (float[4] x) => (bool[4] y) { y = Bernoulli <dtype: int = 9> (x) }");
        assert_eq!(unsupported(&a).len(), 1);
    }

    #[test]
    fn prelu_shapes_and_values() {
        let a = run(16, "g (float[3,4,5] x, float[5] s) => (float[3,4,5] y) { y = PRelu (x, s) }");
        assert_eq!(types(&a), [ty("float[3, 4, 5]")]);
        let a = run(16, "g (float[3,4,5] x, float[4] s) => (float[3,4,5] y) { y = PRelu (x, s) }");
        assert!(errors(&a)[0].contains("do not broadcast"), "{:?}", errors(&a));
        let a = run(16, "g (int32[3] x, int32[3] s) => (int32[3] y) { y = PRelu (x, s) }");
        assert_eq!(unsupported(&a).len(), 1);
        // Slope [2, 1] broadcast over the columns of [2, 2].
        let a = run(
            16,
            "g () => (float[2,2] y) <float[2,2] x = {-2, 3, -4, -1}, float[2,1] s = {0.5, 2}> {
                y = PRelu (x, s)
            }",
        );
        assert_eq!(value(&a, 0), [-1.0, 3.0, -8.0, -2.0]);
    }

    #[test]
    fn prelu_before_opset_7_takes_one_slope_per_channel() {
        // [2, 3, 2] with a slope per channel (axis 1), as PyTorch exports it.
        let a = run(
            6,
            "g () => (float[2,3,2] y, float[2,3,2] z) <float[2,3,2] x = {-1, 1, -1, 1, -1, 1, -2, 2, -2, 2, -2, 2}, float[3] s = {0.5, 2, 3}, float[1] one = {0.25}> {
                y = PRelu (x, s)
                z = PRelu (x, one)
            }",
        );
        assert_eq!(
            value(&a, 0),
            [-0.5, 1.0, -2.0, 1.0, -3.0, 1.0, -1.0, 2.0, -4.0, 2.0, -6.0, 2.0]
        );
        assert_eq!(
            value(&a, 1),
            [-0.25, 1.0, -0.25, 1.0, -0.25, 1.0, -0.5, 2.0, -0.5, 2.0, -0.5, 2.0]
        );
        // Neither one value, one per channel nor one per element.
        let a = run(6, "g (float[2,3,4] x, float[4] s) => (float[2,3,4] y) { y = PRelu (x, s) }");
        let u = unsupported(&a);
        assert!(
            u.len() == 1
                && u[0].contains(
                    "PRelu before opset 7 with a slope of shape [4] on an input of shape [2, 3, 4]"
                ),
            "{u:?}"
        );
    }

    #[test]
    fn unpool_shapes() {
        let a = run(
            22,
            "g (float[1,1,2,2] x, int64[1,1,2,2] i) => (float[1,1,4,4] y) {
                y = MaxUnpool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (x, i)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 1, 4, 4]")]);
        // A run-time output_shape with no declared output shape.
        let a = run(
            22,
            "g (float[1,1,2,2] x, int64[1,1,2,2] i, int64[4] s) => (float[A,B,C,D] y) {
                y = MaxUnpool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (x, i, s)
            }",
        );
        assert_eq!(unsupported(&a).len(), 1, "{:?}", errors(&a));
    }

    #[test]
    fn activations_and_lrn() {
        let a = run(
            9,
            "g () => (float[4] y) <float[4] x = {-2, -1, 1, 3}> { y = Shrink <lambd: float = 1.5, bias: float = 0.5> (x) }",
        );
        assert_eq!(value(&a, 0), [-1.5, 0.0, 0.0, 2.5]);
        let a = run(22, "g (float[2,3] x) => (float[2,3] y) { y = Mish (x) }");
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        let a = run(13, "g (float[1,2,3] x) => (float[1,2,3] y) { y = LRN <size: int = 0> (x) }");
        assert!(!errors(&a).is_empty());
        // size 1: y = x / (1 + 2 x^2)^1.
        let a = run(
            13,
            "g () => (double[1,2,1] y) <double[1,2,1] x = {1, 2}> {
                y = LRN <size: int = 1, alpha: float = 2, beta: float = 1, bias: float = 1> (x)
            }",
        );
        assert_eq!(value(&a, 0), [1.0 / 3.0, 2.0 / 9.0]);
    }
}
