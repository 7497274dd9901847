//! RMSNormalization, Trilu, Dropout, CumSum, OneHot, EyeLike and
//! TopK.
//!
//! Scalar inputs that do not change the output shape (Trilu's `k`, CumSum's
//! `axis`) are taken at generation time when known and read at run time
//! otherwise; those that do (OneHot's `depth`, TopK's `K`) must be known at
//! generation time. EyeLike depends only on its input's shape, so it is
//! always a constant.

use super::host::Data;
use super::host::{HostData, HostElem};
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, broadcast_strides, invalid, is_num, unsupported,
};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, Tensor, TensorType};
use onnx_codegen_runtime::extra::{self as rt_extra, Matrices, RmsNorm};
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "RMSNormalization" => Some(&RmsNormRule),
        "Trilu" => Some(&TriluRule),
        "Dropout" => Some(&DropoutRule),
        "CumSum" => Some(&CumSumRule),
        "OneHot" => Some(&OneHotRule),
        "EyeLike" => Some(&EyeLikeRule),
        "TopK" => Some(&TopKRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

/// Keeps one type per output the node declares.
fn declared(cx: &NodeCx<'_>, mut types: Vec<TensorType>) -> Vec<TensorType> {
    types.truncate(cx.node.outputs.len().max(1));
    types
}

fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

/// Every element type with a host form (the movement kernels' types).
fn is_data(e: ElemType) -> bool {
    is_num(e) || matches!(e, ElemType::Bool | ElemType::Float16 | ElemType::Bfloat16)
}

fn data_in<'a, T: Data>(inputs: &[Option<&'a HostTensor>], i: usize) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| T::of(&t.data)).ok_or(wrong_buffer())
}

fn data_out<T: Data>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    outputs.get_mut(k).and_then(|t| T::of_mut(&mut t.data)).ok_or(wrong_buffer())
}

/// The elements of a numeric host tensor as `i64` (floats truncated toward
/// zero, as a cast to `int64` does).
fn host_i64s(t: &HostTensor) -> Option<Vec<i64>> {
    Some(match &t.data {
        HostData::F32(v) => v.iter().map(|&x| x as i64).collect(),
        HostData::F64(v) => v.iter().map(|&x| x as i64).collect(),
        HostData::I8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I64(v) => v.clone(),
        HostData::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U64(v) => v.iter().map(|&x| x as i64).collect(),
        _ => return None,
    })
}

/// The one value of a scalar (or one-element) input known at generation
/// time, as `i64`; `None` when the input's value is not known.
fn const_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Option<i64>> {
    let Some(t) = cx.constant(i) else { return Ok(None) };
    let h = HostTensor::from_tensor(t)
        .ok_or_else(|| OpError::Unsupported(format!("{what} of type {}", t.elem)))?;
    match host_i64s(&h).as_deref() {
        Some([v]) => Ok(Some(*v)),
        Some(v) => invalid(format!("{what} must hold one element, it holds {}", v.len())),
        None => invalid(format!("{what} must be numeric, it is {}", t.elem)),
    }
}

/// A scalar (or one-element) integer input read at run time.
fn runtime_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<()> {
    let t = cx.input(i)?;
    if !matches!(t.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!("{what} must be int32 or int64, it is {}", t.elem));
    }
    if t.numel() != Some(1) {
        return invalid(format!("{what} must hold one element, it is {t}"));
    }
    Ok(())
}

/// A scalar either taken at generation time or read from input `input`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Known(i64),
    Runtime(usize),
}

impl Scalar {
    fn tokens(self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        match self {
            Scalar::Known(v) => {
                let l = proc_macro2::Literal::i64_suffixed(v.unsigned_abs() as i64);
                if v == i64::MIN {
                    quote!(i64::MIN)
                } else if v < 0 {
                    quote!(-#l)
                } else {
                    quote!(#l)
                }
            }
            Scalar::Runtime(i) => {
                let b = io.inputs.get(i).cloned().flatten();
                quote!(#rt::extra::scalar_i64(#b)?)
            }
        }
    }

    fn host(self, inputs: &[Option<&HostTensor>]) -> Result<i64, EvalError> {
        match self {
            Scalar::Known(v) => Ok(v),
            Scalar::Runtime(i) => {
                let t = inputs.get(i).copied().flatten().ok_or(wrong_buffer())?;
                match host_i64s(t).as_deref() {
                    Some([v]) => Ok(*v),
                    _ => Err(wrong_buffer()),
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// RMSNormalization

struct RmsNormRule;

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

// ---------------------------------------------------------------------------
// Trilu

struct TriluRule;

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

// ---------------------------------------------------------------------------
// Dropout

struct DropoutRule;

/// Whether a Dropout node drops elements.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DropMode {
    /// Inference (or training with a ratio of 0): `y = x`, the mask all true.
    Keep,
    /// Training mode, known at generation time.
    Train,
    /// `training_mode` is data: both paths are generated and chosen at run time.
    Runtime,
}

/// Dropout's ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DropRatio {
    Known(f64),
    /// Read from input 1 at run time.
    Input,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct DropoutPlan {
    /// The mask's element type.
    mask: ElemType,
    mode: DropMode,
    ratio: DropRatio,
    /// The random generator's seed (the `seed` attribute, or the runtime's default).
    seed: u64,
}

/// The one value of a float scalar on the host, as `f64`.
fn host_ratio(h: &HostTensor) -> Option<f64> {
    match &h.data {
        HostData::F32(v) if v.len() == 1 => Some(f64::from(v[0])),
        HostData::F64(v) if v.len() == 1 => Some(v[0]),
        HostData::F16(v) if v.len() == 1 => Some(v[0].to_f64()),
        HostData::Bf16(v) if v.len() == 1 => Some(v[0].to_f64()),
        _ => None,
    }
}

/// How the node runs: inference, or training with the seeded Mersenne
/// Twister of `runtime-support::misc`, which reproduces numpy's legacy
/// stream and so the reference's mask for the same seed.
fn dropout_plan(cx: &NodeCx<'_>) -> OpResult<DropoutPlan> {
    let x = cx.input(0)?;
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return unsupported(format!("Dropout on {} tensors", x.elem));
    }
    let v = cx.version();
    if v < 7 && cx.int_or("is_test", 0) == 0 {
        return unsupported(
            "Dropout in training mode (is_test = 0) drops elements at random; only inference is supported",
        );
    }
    let mask = if v < 10 { x.elem } else { ElemType::Bool };
    let seed = match cx.node.attr("seed") {
        Some(crate::ir::AttrValue::Int(s)) => *s as u64,
        _ => onnx_codegen_runtime::misc::DEFAULT_SEED,
    };
    let mut plan = DropoutPlan { mask, mode: DropMode::Keep, ratio: DropRatio::Known(0.5), seed };
    if v < 12 || cx.opt_input(2).is_none() {
        return Ok(plan);
    }
    plan.mode = match cx.constant(2) {
        None => DropMode::Runtime,
        Some(t) if t.to_i64s().is_some_and(|v| v.iter().any(|&b| b != 0)) => DropMode::Train,
        Some(_) => return Ok(plan),
    };
    if let Some(r) = cx.opt_input(1) {
        plan.ratio = match cx.constant(1) {
            Some(c) => match HostTensor::from_tensor(c).as_ref().and_then(host_ratio) {
                Some(v) => DropRatio::Known(v),
                None => return invalid(format!("Dropout's ratio must be one float, got {r}")),
            },
            None if super::is_float_num(r.elem) && r.numel() == Some(1) => DropRatio::Input,
            None => return invalid(format!("Dropout's ratio must be one float, got {r}")),
        };
    }
    match plan.ratio {
        DropRatio::Known(0.0) if plan.mode == DropMode::Train => plan.mode = DropMode::Keep,
        DropRatio::Known(r) if !(0.0..1.0).contains(&r) => {
            return invalid(format!("Dropout's ratio {r} is outside [0, 1)"));
        }
        _ => {}
    }
    Ok(plan)
}

impl OpRule for DropoutRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = dropout_plan(cx)?;
        let x = cx.input(0)?;
        Ok(declared(cx, vec![x.clone(), TensorType::new(plan.mask, x.dims.clone())]))
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = dropout_plan(cx)?;
        if plan.mode == DropMode::Keep && !has_output(cx, 1) {
            return Ok(Lowered::Alias);
        }
        Ok(Lowered::Kernel(Box::new(DropoutKernel { elem: cx.input(0)?.elem, plan })))
    }
}

struct DropoutKernel {
    elem: ElemType,
    plan: DropoutPlan,
}

fn set_ones(d: &mut HostData) {
    match d {
        HostData::F32(v) => v.fill(1.0),
        HostData::F64(v) => v.fill(1.0),
        HostData::I8(v) => v.fill(1),
        HostData::I16(v) => v.fill(1),
        HostData::I32(v) => v.fill(1),
        HostData::I64(v) => v.fill(1),
        HostData::U8(v) => v.fill(1),
        HostData::U16(v) => v.fill(1),
        HostData::U32(v) => v.fill(1),
        HostData::U64(v) => v.fill(1),
        HostData::Bool(v) => v.fill(true),
        HostData::F16(v) => v.fill(f16::ONE),
        HostData::Bf16(v) => v.fill(bf16::ONE),
    }
}

fn run_dropout<T: Data>(inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
    let x = data_in::<T>(inputs, 0)?;
    rt_extra::copy(x, data_out::<T>(outputs, 0)?)?;
    if let Some(m) = outputs.get_mut(1) {
        set_ones(&mut m.data);
    }
    Ok(())
}

fn run_dropout_train<T: Float + HostElem>(
    seed: u64,
    ratio: f64,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = inputs.first().copied().flatten().and_then(HostTensor::get::<T>);
    let x = x.ok_or_else(wrong_buffer)?;
    let (y, mask) = match outputs {
        [y] => (y, None),
        [y, m, ..] => (y, Some(m)),
        [] => return Err(wrong_buffer()),
    };
    let y = y.get_mut::<T>().ok_or_else(wrong_buffer)?;
    let mut none: [bool; 0] = [];
    let mask = match mask.map(|m| &mut m.data) {
        None => &mut none[..],
        Some(HostData::Bool(v)) => &mut v[..],
        Some(_) => return Err(EvalError::Type(ElemType::Bool)),
    };
    onnx_codegen_runtime::misc::dropout_train(seed, ratio, x, y, mask)?;
    Ok(())
}

impl Kernel for DropoutKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let training = match self.plan.mode {
            DropMode::Keep => false,
            DropMode::Train => true,
            DropMode::Runtime => match inputs.get(2).copied().flatten().map(|t| &t.data) {
                Some(HostData::Bool(v)) if v.len() == 1 => v[0],
                _ => return Err(wrong_buffer()),
            },
        };
        if !training {
            return by_data_type!(self.elem, run_dropout(inputs, outputs));
        }
        let ratio = match self.plan.ratio {
            DropRatio::Known(r) => r,
            DropRatio::Input => {
                inputs.get(1).copied().flatten().and_then(host_ratio).ok_or_else(wrong_buffer)?
            }
        };
        let seed = self.plan.seed;
        crate::by_float_type!(self.elem, run_dropout_train(seed, ratio, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        match i {
            0 => true,
            1 => self.plan.mode != DropMode::Keep && self.plan.ratio == DropRatio::Input,
            2 => self.plan.mode == DropMode::Runtime,
            _ => false,
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        let one = match self.plan.mask {
            ElemType::Bool => quote!(#rt::num::Flag::from_bool(true)),
            ElemType::Float16 => quote!(#rt::f16::ONE),
            ElemType::Bfloat16 => quote!(#rt::bf16::ONE),
            other => lit::float(1.0, other),
        };
        let mask = io.outputs.get(1).cloned().flatten();
        let fill = mask.as_ref().map(|m| quote!(#rt::extra::fill(#m, #one);));
        let keep = quote! {
            #rt::extra::copy(#x, #y)?;
            #fill
        };
        let ratio = match self.plan.ratio {
            DropRatio::Known(r) => lit::f64_lit(r),
            DropRatio::Input => {
                let r = io.inputs.get(1).cloned().flatten();
                quote!(#rt::num::Float::to_f64(#rt::check::scalar(#r)?))
            }
        };
        let seed = proc_macro2::Literal::u64_suffixed(self.plan.seed);
        let train = match &mask {
            Some(m) => quote!(#rt::misc::dropout_train(#seed, #ratio, #x, #y, #m)?;),
            None => quote!(#rt::misc::dropout_train::<_, u8>(#seed, #ratio, #x, #y, &mut [])?;),
        };
        match self.plan.mode {
            DropMode::Keep => keep,
            DropMode::Train => train,
            DropMode::Runtime => {
                let t = io.inputs.get(2).cloned().flatten();
                quote! {
                    if #rt::num::Flag::get(#rt::check::scalar(#t)?) {
                        #train
                    } else {
                        #keep
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// CumSum

struct CumSumRule;

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

// ---------------------------------------------------------------------------
// OneHot

struct OneHotRule;

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

// ---------------------------------------------------------------------------
// EyeLike

struct EyeLikeRule;

fn eye_like_type(cx: &NodeCx<'_>) -> OpResult<TensorType> {
    let x = cx.input(0)?;
    if x.rank() != 2 {
        return invalid(format!("EyeLike needs a 2-D input, got {x}"));
    }
    let elem = match cx.node.attr("dtype") {
        Some(_) => {
            let code = cx.int_or("dtype", 1);
            i32::try_from(code).ok().and_then(ElemType::from_proto).ok_or_else(|| {
                OpError::Invalid(format!("EyeLike's dtype {code} is not an element type"))
            })?
        }
        None => x.elem,
    };
    if !is_data(elem) {
        return unsupported(format!("EyeLike producing {elem} tensors"));
    }
    Ok(TensorType::new(elem, x.dims.clone()))
}

impl OpRule for EyeLikeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![eye_like_type(cx)?])
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        unsupported("EyeLike is folded, never run")
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        let ty = eye_like_type(cx)?;
        let (rows, cols) = (ty.dims[0], ty.dims[1]);
        let k = cx.int_or("k", 0);
        let mut ones = HostTensor::zeros(&ty)
            .ok_or_else(|| OpError::Invalid(format!("EyeLike's output {ty} is too large")))?;
        // One at (r, r + k) for every row where that column exists.
        let mut one = HostTensor::zeros(&TensorType::new(ty.elem, vec![1]))
            .ok_or_else(|| OpError::Unsupported(format!("EyeLike producing {}", ty.elem)))?;
        set_ones(&mut one.data);
        for r in 0..rows {
            let c = i128::try_from(r).unwrap_or(i128::MAX) + i128::from(k);
            let Ok(c) = usize::try_from(c) else { continue };
            if c < cols {
                set_at(&mut ones.data, r * cols + c, &one.data);
            }
        }
        Ok(Some(vec![ones.to_tensor("eye")]))
    }
}

/// `dst[at] = src[0]` for host data of the same type.
fn set_at(dst: &mut HostData, at: usize, src: &HostData) {
    macro_rules! set {
        ($($v:ident),*) => {
            match (dst, src) {
                $((HostData::$v(d), HostData::$v(s)) => {
                    if let (Some(d), Some(s)) = (d.get_mut(at), s.first()) {
                        *d = *s;
                    }
                })*
                _ => {}
            }
        };
    }
    set!(F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, F16, Bf16);
}

// ---------------------------------------------------------------------------
// TopK

struct TopKRule;

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

    #[test]
    fn dropout() {
        let a = run(13, "g (float[2] x) => (float[2] y, bool[2] m) { y, m = Dropout (x) }");
        assert_eq!(types(&a), [ty("float[2]"), ty("bool[2]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // Before opset 10 the mask has the input's type.
        let a = run(7, "g (double[2] x) => (double[2] y, double[2] m) { y, m = Dropout (x) }");
        assert_eq!(types(&a), [ty("double[2]"), ty("double[2]")]);
        // Folded: output is the input, mask all kept.
        let a = run(
            12,
            "g () => (float[2] y, bool[2] m) <float[2] x = {1.5, -2}> { y, m = Dropout (x) }",
        );
        assert_eq!(value(&a, 0), [1.5, -2.0]);
        assert_eq!(value(&a, 1), [1.0, 1.0]);
        // Training mode with ratio 0 keeps everything.
        let a = run(
            13,
            "g (float[2] x) => (float[2] y) <float r = {0}, bool t = {1}> { y = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // A training mode or ratio known only at run time: both paths are generated.
        let a = run(
            13,
            "g (float[2] x, bool t) => (float[2] y) <float r = {0.5}> { y = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            13,
            "g (float[2] x, float r, bool t) => (float[2] y, bool[2] m) { y, m = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // Training mode (default ratio 0.5) draws from numpy's seeded stream:
        // each kept value is doubled, each dropped one is 0, as the mask says.
        let a = run(
            13,
            "g () => (float[16] y, bool[16] m) <float[16] x = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, bool t = {1}> {
                y, m = Dropout <seed: int = 7> (x, , t)
            }",
        );
        let (y, m) = (value(&a, 0), value(&a, 1));
        assert!(y.iter().zip(&m).all(|(&v, &k)| v == 6.0 * k), "{y:?} {m:?}");
        // The mask `onnx.reference`'s Dropout gives for seed 7 (numpy's stream).
        let want = [0., 1., 0., 1., 1., 1., 1., 0., 0., 0., 1., 1., 0., 0., 0., 1.];
        assert_eq!(m, want);
        let a = run(
            13,
            "g (float[2] x) => (float[2] y) <float r = {1}, bool t = {1}> { y = Dropout (x, r, t) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("outside [0, 1)")), "{:?}", errors(&a));
        let a = run(6, "g (float[2] x) => (float[2] y) { y = Dropout (x) }");
        assert!(unsupported(&a)[0].contains("is_test"), "{:?}", unsupported(&a));
        let a = run(6, "g (float[2] x) => (float[2] y) { y = Dropout <is_test: int = 1> (x) }");
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }

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

    #[test]
    fn eye_like() {
        let a = run(
            22,
            "g (int32[2,3] x) => (float[2,3] y) { y = EyeLike <dtype: int = 1, k: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        assert_eq!(value(&a, 0), [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        let a = run(9, "g (int64[3,2] x) => (int64[3,2] y) { y = EyeLike <k: int = -1> (x) }");
        assert_eq!(value(&a, 0), [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
        let a = run(9, "g (int64[3,2,1] x) => (int64[3,2,1] y) { y = EyeLike (x) }");
        assert!(errors(&a)[0].contains("2-D"), "{:?}", errors(&a));
    }

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
