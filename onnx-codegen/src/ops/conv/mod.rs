//! Convolution and pooling: Conv, ConvTranspose, MaxPool, AveragePool,
//! LpPool and the global pools.
//!
//! All of them slide a window over the spatial axes of an `[N, C, spatial...]`
//! tensor. The geometry (output dims, resolved begin/end pads) is computed
//! here, at generation time, with the ONNX spec's formulas:
//!
//! - explicit pads: `out = floor((in + pb + pe - span) / s) + 1`, with
//!   `span = d * (k - 1) + 1`; with pooling's `ceil_mode` the division rounds
//!   up, and a last window that would start in the end padding is dropped;
//! - `VALID`: no padding, the same formula;
//! - `SAME_UPPER` / `SAME_LOWER`: `out = ceil(in / s)`, the total padding
//!   `max(0, (out - 1) * s + span - in)` split in two halves, the odd element
//!   at the end (`SAME_UPPER`) or at the beginning (`SAME_LOWER`);
//! - ConvTranspose: `out = s * (in - 1) + output_padding + span - pb - pe`,
//!   or an explicit `output_shape` (or `in * s` for the `SAME_*` modes) from
//!   which the pads follow.
//!
//! The runtime kernels (`conv`, `pool`) support `f32`/`f64` and, for
//! MaxPool, the integer types; float16 and bfloat16 are reported unsupported.
//!
//! Here: the Conv and ConvTranspose rules and their kernel (which weights
//! layout and epilogue the f32 fast path takes). `window`: the geometry
//! above, shared with the pools; `pool`: the pooling rules; `winograd`:
//! when Winograd's F(2x2, 3x3) pays, and the block of tiles it runs.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::lowering::ConvWeights;
use crate::ir::{ElemType, Lowering, TensorType};
use onnx_codegen_runtime::conv::{self as rt_conv, Conv, Window};
use onnx_codegen_runtime::elementwise::Unary;
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::pool::{self as rt_pool, Pool};
use onnx_codegen_runtime::shape::MAX_RANK;
use proc_macro2::TokenStream;
use quote::quote;

mod pool;
mod window;
pub mod winograd;

use pool::{GlobalPoolRule, PoolRule};
pub(super) use pool::{PoolWindow, window_of};
use window::*;
pub(super) use window::{Geometry, forward_geometry, overflow};

/// The rule for `op_type`, if it is a convolution or a pooling operator.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Conv" => Some(&ConvRule),
        "ConvTranspose" => Some(&ConvTransposeRule),
        "MaxPool" | "AveragePool" | "LpPool" => Some(&PoolRule),
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => Some(&GlobalPoolRule),
        _ => None,
    }
}

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

/// Float element types the float kernels run on.
fn float_elem(cx: &NodeCx<'_>, t: &TensorType) -> OpResult<()> {
    match t.elem {
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => Ok(()),
        other => unsupported(format!(
            "{} on {other} tensors: the runtime kernel supports float32, float64, float16 and bfloat16 only",
            op_name(cx)
        )),
    }
}

/// The spatial dims of `x` (everything after `[N, C]`), which must exist.
fn spatial<'a>(cx: &NodeCx<'_>, x: &'a TensorType) -> OpResult<&'a [usize]> {
    if x.dims.len() < 3 {
        return invalid(format!(
            "{} needs an input of rank 3 or more ([N, C, spatial...]), got {x}",
            op_name(cx)
        ));
    }
    let s = &x.dims[2..];
    if s.len() > MAX_RANK {
        return unsupported(format!(
            "{} with {} spatial axes: the runtime supports at most {MAX_RANK}",
            op_name(cx),
            s.len()
        ));
    }
    if s.contains(&0) {
        return unsupported(format!(
            "{} on an input with an empty spatial axis ({x})",
            op_name(cx)
        ));
    }
    Ok(s)
}

/// The `kernel_shape` attribute must agree with the weights' spatial dims.
fn check_kernel_shape(cx: &NodeCx<'_>, kernel: &[usize]) -> OpResult<()> {
    if let Some(ks) = cx.ints("kernel_shape") {
        let same = ks.len() == kernel.len()
            && ks.iter().zip(kernel).all(|(&a, &b)| usize::try_from(a).is_ok_and(|a| a == b));
        if !same {
            return invalid(format!(
                "attribute 'kernel_shape' {ks:?} does not match the weights' spatial dims {kernel:?}"
            ));
        }
    }
    if kernel.contains(&0) {
        return invalid(format!("the weights have an empty kernel axis ({kernel:?})"));
    }
    Ok(())
}

fn group(cx: &NodeCx<'_>) -> OpResult<usize> {
    let g = cx.int_or("group", 1);
    match usize::try_from(g) {
        Ok(g) if g >= 1 => Ok(g),
        _ => invalid(format!("attribute 'group' must be at least 1, got {g}")),
    }
}

/// The checked bias input (index 2), if present: `[channels]` of `elem`.
fn check_bias(cx: &NodeCx<'_>, elem: ElemType, channels: usize) -> OpResult<bool> {
    let Some(b) = cx.opt_input(2) else { return Ok(false) };
    if b.elem != elem {
        return invalid(format!("the bias B is {b} but X holds {elem}"));
    }
    if b.dims != [channels] {
        return invalid(format!("the bias B is {b}; it must be 1-D with {channels} elements"));
    }
    Ok(true)
}

/// A planned Conv or ConvTranspose call.
#[derive(Clone, Debug)]
struct ConvPlan {
    elem: ElemType,
    batch: usize,
    in_channels: usize,
    out_channels: usize,
    groups: usize,
    /// For ConvTranspose, the equivalent forward window from the output back
    /// to the input (see [`rt_conv::conv_transpose`]).
    geom: Geometry,
    has_bias: bool,
    /// An activation fused into the Conv's epilogue, applied to every
    /// output after the bias (and residual).
    act: Option<Unary<f64>>,
    /// The output dims `[N, M, spatial...]`.
    out: Vec<usize>,
    /// Where the kernel reads its weights.
    weights: WeightsAt,
    /// The read holding a residual of the output's dims added after the
    /// bias (f32 only), fused into the Conv's epilogue.
    residual: Option<usize>,
}

/// Where a convolution kernel reads its weights (the node's
/// [`ConvWeights`], checked against its geometry).
#[derive(Clone, Copy, Debug, PartialEq)]
enum WeightsAt {
    /// Input 1.
    Given,
    /// The read holding the f32 weights laid out in panels for
    /// `conv::sconv` (`ConvWeights::Panels`); the code reads that copy only.
    Packed(usize),
    /// The read holding the f32 weights transformed for Winograd's
    /// F(2x2, 3x3) (`ConvWeights::Winograd`); the code reads that copy only,
    /// with a scratch buffer of `scratch` floats.
    Winograd { at: usize, scratch: usize },
    /// The read holding a ConvTranspose's f32 weights transposed and laid
    /// out in panels for `conv::sconv_transpose` (`ConvWeights::Transposed`);
    /// the code reads that copy only, with a scratch buffer of `scratch`
    /// floats for the columns of its products.
    Transposed { at: usize, scratch: usize },
}

struct ConvRule;

fn conv_plan(cx: &NodeCx<'_>) -> OpResult<ConvPlan> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    float_elem(cx, x)?;
    if w.elem != x.elem {
        return invalid(format!("Conv's X is {x} but W is {w}; they must hold the same type"));
    }
    let in_dims = spatial(cx, x)?;
    if w.dims.len() != x.dims.len() {
        return invalid(format!("Conv's W {w} must have the rank of X {x}"));
    }
    let groups = group(cx)?;
    let (batch, c, m) = (x.dims[0], x.dims[1], w.dims[0]);
    if !c.is_multiple_of(groups) || w.dims[1].checked_mul(groups) != Some(c) {
        return invalid(format!(
            "Conv with group {groups}: X has {c} channels, so W's second dim must be {c} / \
             {groups}; W is {w}"
        ));
    }
    if !m.is_multiple_of(groups) {
        return invalid(format!("Conv's {m} output channels are not divisible by group {groups}"));
    }
    let kernel = w.dims[2..].to_vec();
    check_kernel_shape(cx, &kernel)?;
    let has_bias = check_bias(cx, x.elem, m)?;
    let act = super::fused_activation(cx);
    if act.is_some() && !matches!(x.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!("a Conv's activation on {} tensors", x.elem));
    }
    let lowering = match cx.lowering() {
        None => None,
        Some(Lowering::Conv(l)) => Some(l),
        Some(other) => return invalid(format!("a Conv cannot run as {other:?}")),
    };
    let given = ConvWeights::AsGiven;
    let mut weights = WeightsAt::Given;
    match lowering.map_or(&given, |l| &l.weights) {
        ConvWeights::AsGiven => {}
        ConvWeights::Packed(v) => {
            let (at, pw) = cx.operand(*v)?;
            let taps = kernel.iter().try_fold(c, |a, &k| a.checked_mul(k));
            let len = taps.and_then(|k| rt_conv::packed_weights_len(m, k));
            let fits = x.elem == ElemType::Float
                && groups == 1
                && matches!(in_dims.len(), 1 | 2)
                && pw.elem == ElemType::Float
                && len.is_some_and(|len| pw.dims == [len]);
            if !fits {
                return invalid(format!(
                    "Conv's packed weights {pw} do not match a 2-D f32 convolution of group 1 \
                     with W {w}"
                ));
            }
            weights = WeightsAt::Packed(at);
        }
        ConvWeights::Winograd { .. } => {}
        ConvWeights::Transposed { .. } => {
            return invalid("a Conv cannot read ConvTranspose's transposed weights");
        }
    }
    let geom = forward_geometry(cx, in_dims, kernel, false)?;
    if let Some(ConvWeights::Winograd { transformed, block }) = lowering.map(|l| &l.weights) {
        let (at, u) = cx.operand(*transformed)?;
        let Some(scratch) = winograd_scratch(x, u, groups, c, m, &geom, *block) else {
            return invalid(format!(
                "Conv's Winograd weights {u} do not match a 2-D f32 3x3 convolution of \
                 stride 1, dilation 1 and group 1 with W {w}"
            ));
        };
        weights = WeightsAt::Winograd { at, scratch };
    }
    let mut out = vec![batch, m];
    out.extend_from_slice(&geom.out_dims);
    let geom = geom.into_2d();
    let residual = match lowering.and_then(|l| l.epilogue.residual) {
        None => None,
        Some(v) => match cx.operand(v)? {
            (at, r) if x.elem == ElemType::Float && r.elem == x.elem && r.dims == out => Some(at),
            (_, r) => return invalid(format!("Conv's fused residual {r} must be float{out:?}")),
        },
    };
    Ok(ConvPlan {
        residual,
        elem: x.elem,
        batch,
        in_channels: c,
        out_channels: m,
        groups,
        geom,
        has_bias,
        act,
        out,
        weights,
    })
}

/// The scratch floats of a Conv whose weights `u` were transformed for
/// `ConvWeights::Winograd`: for the tiles per block the pass chose (`block`),
/// else up to `MAX_BLOCK` tiles of one image. `None` when the Conv or `u`
/// does not fit that kernel.
fn winograd_scratch(
    x: &TensorType,
    u: &TensorType,
    groups: usize,
    c: usize,
    m: usize,
    geom: &Geometry,
    block: Option<usize>,
) -> Option<usize> {
    use onnx_codegen_runtime::winograd::{MAX_BLOCK, scratch_len, tiles_of, weights_len};
    let fits = x.elem == ElemType::Float
        && u.elem == ElemType::Float
        && groups == 1
        && geom.kernel == [3, 3]
        && geom.strides == [1, 1]
        && geom.dilations == [1, 1]
        && weights_len(c, m).is_some_and(|len| u.dims == [len]);
    let &[oh, ow] = geom.out_dims.as_slice() else { return None };
    if !fits {
        return None;
    }
    let block = block.unwrap_or(MAX_BLOCK);
    let tiles = tiles_of(oh, ow)?.min(block).clamp(1, MAX_BLOCK);
    scratch_len(c, m, tiles)
}

impl OpRule for ConvRule {
    /// Each output element takes one filter's worth: W is `[M, C / group, k...]`.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_per_filter(
            outputs.first().copied().flatten(),
            inputs.get(1).copied().flatten(),
        ))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = conv_plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ConvKernel { plan: conv_plan(cx)?, transpose: false })))
    }
}

struct ConvTransposeRule;

/// Splits a ConvTranspose total padding as the spec says: `SAME_UPPER` puts
/// `floor(total / 2)` at the beginning, every other mode puts it at the end.
fn split_total(total: i128, ap: AutoPad) -> (i128, i128) {
    let half = total.div_euclid(2);
    if ap == AutoPad::SameUpper { (half, total - half) } else { (total - half, half) }
}

fn conv_transpose_plan(cx: &NodeCx<'_>) -> OpResult<ConvPlan> {
    let (x, w) = (cx.input(0)?, cx.input(1)?);
    float_elem(cx, x)?;
    if w.elem != x.elem {
        return invalid(format!(
            "ConvTranspose's X is {x} but W is {w}; they must hold the same type"
        ));
    }
    let in_dims = spatial(cx, x)?;
    let n = in_dims.len();
    if w.dims.len() != x.dims.len() {
        return invalid(format!("ConvTranspose's W {w} must have the rank of X {x}"));
    }
    let groups = group(cx)?;
    let (batch, c) = (x.dims[0], x.dims[1]);
    if w.dims[0] != c || !c.is_multiple_of(groups) {
        return invalid(format!(
            "ConvTranspose with group {groups}: W {w} must have X's {c} channels first, and they \
             must be divisible by the group"
        ));
    }
    let Some(m) = w.dims[1].checked_mul(groups) else { return overflow("the output channels") };
    let kernel = w.dims[2..].to_vec();
    check_kernel_shape(cx, &kernel)?;
    let has_bias = check_bias(cx, x.elem, m)?;
    let strides = spatial_ints(cx, "strides", n, 1, 1)?;
    let dilations = spatial_ints(cx, "dilations", n, 1, 1)?;
    let output_padding = spatial_ints(cx, "output_padding", n, 0, 0)?;
    let ap = auto_pad(cx)?;
    let (explicit_begin, explicit_end) = explicit_pads(cx, n, ap)?;
    let output_shape = match cx.ints("output_shape") {
        None => None,
        // Some exporters include N and C; the spatial dims are the last n.
        Some(v) if v.len() == n || v.len() == n + 2 => Some(v[v.len() - n..].to_vec()),
        Some(v) => {
            return invalid(format!(
                "attribute 'output_shape' has {} values; the input has {n} spatial axes",
                v.len()
            ));
        }
    };
    let (mut out_dims, mut pads_begin, mut pads_end) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let (s, d, op) = (strides[i], dilations[i], output_padding[i]);
        if op >= s.max(d) {
            return invalid(format!(
                "output_padding {op} on spatial axis {i} must be less than the stride ({s}) or \
                 the dilation ({d})"
            ));
        }
        let sp = span(kernel[i], d)?;
        // s * (in - 1) + op + span and in * s, in i128 (checked: the
        // attributes are untrusted).
        let (si, ii) = (s as i128, in_dims[i] as i128);
        let Some(full) = si
            .checked_mul(ii - 1)
            .and_then(|v| v.checked_add(op as i128))
            .and_then(|v| v.checked_add(sp as i128))
        else {
            return overflow("ConvTranspose's output size");
        };
        let target = match (&output_shape, ap) {
            (Some(o), _) => Some(i128::from(o[i])),
            (None, AutoPad::SameUpper | AutoPad::SameLower) => match ii.checked_mul(si) {
                Some(v) => Some(v),
                None => return overflow("ConvTranspose's output size"),
            },
            (None, _) => None,
        };
        let (pb, pe) = match (target, ap) {
            (Some(t), _) => match full.checked_sub(t) {
                Some(total) => split_total(total, ap),
                None => return overflow("ConvTranspose's padding"),
            },
            (None, AutoPad::Valid) => (0, 0),
            (None, _) => (explicit_begin[i] as i128, explicit_end[i] as i128),
        };
        let out = full - pb - pe;
        if out < 1 {
            return invalid(format!(
                "ConvTranspose's output would be empty on spatial axis {i} (size {out})"
            ));
        }
        if pb < 0 {
            return unsupported(format!(
                "ConvTranspose whose output_shape needs {} extra leading elements on spatial axis \
                 {i}: the kernel only crops or extends at the end",
                -pb
            ));
        }
        // A negative end pad extends the output like output_padding does.
        let extra = op as i128 + (-pe).max(0);
        if extra >= s.max(d) as i128 {
            return unsupported(format!(
                "ConvTranspose whose output_shape extends spatial axis {i} by {extra} elements \
                 past the last window (the kernel allows fewer than max(stride, dilation))"
            ));
        }
        let (Ok(out), Ok(pb), Ok(pe)) =
            (usize::try_from(out), usize::try_from(pb), usize::try_from(pe.max(0)))
        else {
            return overflow("ConvTranspose's output size");
        };
        out_dims.push(out);
        pads_begin.push(pb);
        pads_end.push(pe);
    }
    let geom = Geometry {
        in_dims: out_dims,
        out_dims: in_dims.to_vec(),
        kernel,
        strides,
        dilations,
        pads_begin,
        pads_end,
    };
    let mut out = vec![batch, m];
    out.extend_from_slice(&geom.in_dims);
    let weights = conv_transpose_weights(cx, x, w, groups, m, &geom)?;
    Ok(ConvPlan {
        elem: x.elem,
        batch,
        in_channels: c,
        out_channels: m,
        groups,
        geom,
        has_bias,
        act: None,
        out,
        weights,
        residual: None,
    })
}

/// Where a ConvTranspose reads its weights: as given, or transposed in
/// panels (`ConvWeights::Transposed`, checked against its geometry).
fn conv_transpose_weights(
    cx: &NodeCx<'_>,
    x: &TensorType,
    w: &TensorType,
    groups: usize,
    m: usize,
    geom: &Geometry,
) -> OpResult<WeightsAt> {
    let (packed, block) = match cx.lowering() {
        None => return Ok(WeightsAt::Given),
        Some(Lowering::Conv(l)) if l.epilogue.is_empty() => match &l.weights {
            ConvWeights::AsGiven => return Ok(WeightsAt::Given),
            ConvWeights::Transposed { packed, block } => (*packed, *block),
            other => return invalid(format!("a ConvTranspose cannot read weights as {other:?}")),
        },
        Some(other) => return invalid(format!("a ConvTranspose cannot run as {other:?}")),
    };
    let (at, pw) = cx.operand(packed)?;
    let taps: usize = geom.kernel.iter().product();
    let positions: usize = geom.out_dims.iter().product();
    let len = rt_conv::conv_transpose_packed_len(x.dims[1], m, groups, taps);
    let scratch = rt_conv::conv_transpose_scratch_len(m, groups, taps, block);
    let fits = x.elem == ElemType::Float
        && pw.elem == ElemType::Float
        && matches!(geom.kernel.len(), 1 | 2)
        && (1..=positions).contains(&block)
        && len.is_some_and(|len| pw.dims == [len]);
    match scratch {
        Some(scratch) if fits => Ok(WeightsAt::Transposed { at, scratch }),
        _ => invalid(format!(
            "ConvTranspose's transposed weights {pw} (blocks of {block} positions) do not match \
             a 1-D or 2-D f32 ConvTranspose with W {w}"
        )),
    }
}

impl OpRule for ConvTransposeRule {
    /// Each input element is spread over one filter slice: W is `[C, M / group, k...]`.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        _outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        let x = super::numel_u64(inputs.first().copied().flatten());
        let w = inputs.get(1).copied().flatten();
        Some(w.map_or(0, |w| {
            let c = w.dims.first().copied().map_or(0, super::to_u64);
            super::numel_u64(Some(w)).checked_div(c).map_or(0, |per| x.saturating_mul(per))
        }))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = conv_transpose_plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ConvKernel {
            plan: conv_transpose_plan(cx)?,
            transpose: true,
        })))
    }
}

struct ConvKernel {
    plan: ConvPlan,
    transpose: bool,
}

fn host<T: HostElem>(t: Option<&HostTensor>, elem: ElemType) -> Result<&[T], EvalError> {
    t.and_then(|t| t.get::<T>()).ok_or(EvalError::Type(elem))
}

fn host_mut<T: HostElem>(
    t: Option<&mut HostTensor>,
    elem: ElemType,
) -> Result<&mut [T], EvalError> {
    t.and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(elem))
}

fn run_conv<T: Float + HostElem>(
    k: &ConvKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = &k.plan;
    let params = Conv {
        batch: p.batch,
        in_channels: p.in_channels,
        out_channels: p.out_channels,
        groups: p.groups,
        window: p.geom.window(),
    };
    let x = host::<T>(inputs.first().copied().flatten(), p.elem)?;
    let w = host::<T>(inputs.get(1).copied().flatten(), p.elem)?;
    let b = match inputs.get(2).copied().flatten() {
        Some(b) => Some(host::<T>(Some(b), p.elem)?),
        None => None,
    };
    let y = host_mut::<T>(outputs.first_mut(), p.elem)?;
    if k.transpose {
        rt_conv::conv_transpose(&params, x, w, b, y)?;
    } else {
        rt_conv::conv(&params, x, w, b, y)?;
    }
    let r = super::host_read(inputs, p.residual).map(|r| host::<T>(Some(r), p.elem)).transpose()?;
    super::epilogue::finish_host(y, r, p.act);
    Ok(())
}

impl Kernel for ConvKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.plan.elem, run_conv(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.plan;
        let window = p.geom.tokens(rt);
        let (batch, c, m, g) = (
            lit::usize_lit(p.batch),
            lit::usize_lit(p.in_channels),
            lit::usize_lit(p.out_channels),
            lit::usize_lit(p.groups),
        );
        let f = if self.transpose { quote!(conv_transpose) } else { quote!(conv) };
        let (x, w, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        let b = match io.inputs.get(2) {
            Some(Some(b)) if p.has_bias => quote!(Some(#b)),
            _ => quote!(None),
        };
        let params = quote! {
            &#rt::conv::Conv {
                batch: #batch, in_channels: #c, out_channels: #m, groups: #g,
                window: #window,
            }
        };
        if !self.transpose && p.elem == ElemType::Float {
            // f32 Conv runs on the fast paths: implicit GEMM over packed
            // panels or im2col strips, direct kernels, or Winograd.
            let (post, after) = super::epilogue::post_tokens(p.act, io.read(p.residual), y, rt);
            let read = |at: usize| io.read(Some(at)).cloned().unwrap_or_else(|| quote!(&[]));
            let w = match p.weights {
                // A Conv never reads transposed weights (its plan refuses them).
                WeightsAt::Given | WeightsAt::Transposed { .. } => {
                    quote!(#rt::conv::ConvWeights::Dense(#w))
                }
                WeightsAt::Packed(at) => {
                    let pw = read(at);
                    quote!(#rt::conv::ConvWeights::Panels(#pw))
                }
                WeightsAt::Winograd { at, .. } => {
                    let u = read(at);
                    let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
                    quote!(#rt::conv::ConvWeights::Winograd { u: #u, scratch: #scratch })
                }
            };
            return quote! {
                #rt::conv::sconv(#params, #x, #w, #b, #y, #post)?;
                #after
            };
        }
        if let WeightsAt::Transposed { at, .. } = p.weights {
            // f32 ConvTranspose on the product path: the columns of the
            // transposed weights by the input, scattered into the output.
            let pw = io.read(Some(at)).cloned().unwrap_or_else(|| quote!(&[]));
            let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
            return quote!(#rt::conv::sconv_transpose(#params, #x, #pw, #b, #y, #scratch)?;);
        }
        let (_, after) = super::epilogue::fused_epilogue(p.act, p.elem, y, rt);
        quote!(#rt::conv::#f(#params, #x, #w, #b, #y)?; #after)
    }

    /// A Conv with packed weights reads that copy only: the original `W`
    /// is neither stored nor bound (unless another node reads it).
    fn reads_input(&self, i: usize) -> bool {
        !(self.plan.weights != WeightsAt::Given && i == 1)
    }

    /// A Winograd Conv's transformed tiles and their sums; a
    /// ConvTranspose's block of columns.
    fn scratch(&self) -> Option<TensorType> {
        match self.plan.weights {
            WeightsAt::Winograd { scratch, .. } | WeightsAt::Transposed { scratch, .. } => {
                Some(TensorType::new(ElemType::Float, vec![scratch]))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};

    /// Analyses a one-graph model written in the text syntax.
    fn run(src: &str) -> Analysis {
        let proto = crate::text::parse_model(src, "test.onnxtxt").expect("test model parses");
        analyze(&proto, &Options::default()).expect("test model is well formed")
    }

    /// The dims of every graph output, or the first problem reported.
    fn shapes(opset: i64, sig: &str, body: &str) -> Result<Vec<Vec<usize>>, String> {
        let a = run(&format!(
            "<ir_version: 8, opset_import: [\"\" : {opset}]>\ng {sig}\n{{\n{body}\n}}"
        ));
        let s = a.summary();
        if let Some(u) = s.unsupported.first() {
            return Err(format!("unsupported: {}", u.reason));
        }
        if let Some(e) = s.errors.first() {
            return Err(format!("invalid: {e}"));
        }
        Ok(s.outputs.iter().map(|o| o.shape.clone().unwrap_or_default()).collect())
    }

    /// The folded value of graph output `k` (all inputs are initializers).
    fn folded(opset: i64, sig: &str, body: &str, k: usize) -> Vec<f64> {
        let a = run(&format!(
            "<ir_version: 8, opset_import: [\"\" : {opset}]>\ng {sig}\n{{\n{body}\n}}"
        ));
        let g = &a.model().graph;
        let v = g.outputs[k];
        let t = a.inferred.constants[v.index()].as_ref().expect("output folded");
        t.to_f64s().or_else(|| t.to_i64s().map(|v| v.iter().map(|&x| x as f64).collect())).unwrap()
    }

    fn err(r: Result<Vec<Vec<usize>>, String>) -> String {
        r.expect_err("the node is refused")
    }

    #[test]
    fn conv_output_sizes() {
        // floor((7 + 1 + 1 - 3) / 2) + 1 = 4 and floor((5 - 3) / 2) + 1 = 2.
        let s = shapes(
            22,
            "(float[1, 1, 7, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv <kernel_shape = [3, 3], pads = [1, 0, 1, 0], strides = [2, 2]> (x, w)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 4, 2]]));
        // Dilation 2 makes a 3-tap kernel span 5: (9 - 5) / 1 + 1 = 5; kernel_shape inferred from W.
        let s = shapes(
            22,
            "(float[2, 4, 9] x, float[6, 2, 3] w, float[6] b) => (float[] y)",
            "y = Conv <dilations = [2], group = 2> (x, w, b)",
        );
        assert_eq!(s, Ok(vec![vec![2, 6, 5]]));
        // Depthwise, SAME_UPPER, stride 2: ceil(7 / 2) = 4.
        let s = shapes(
            22,
            "(float[1, 3, 7, 7] x, float[3, 1, 3, 3] w) => (float[] y)",
            "y = Conv <group = 3, auto_pad = \"SAME_UPPER\", strides = [2, 2]> (x, w)",
        );
        assert_eq!(s, Ok(vec![vec![1, 3, 4, 4]]));
        // VALID on a 3-D input: (4 - 2) / 2 + 1 = 2, 5 - 3 + 1 = 3, 6 - 1 + 1 = 6.
        let s = shapes(
            11,
            "(double[1, 2, 4, 5, 6] x, double[3, 2, 2, 3, 1] w) => (double[] y)",
            "y = Conv <auto_pad = \"VALID\", strides = [2, 1, 1]> (x, w)",
        );
        assert_eq!(s, Ok(vec![vec![1, 3, 2, 3, 6]]));
    }

    #[test]
    fn same_upper_and_lower_put_the_odd_pad_at_opposite_ends() {
        // Kernel 4, stride 1 over 6: total pad 3. W picks the first tap, so
        // y[i] is the padded input at i: one leading zero (UPPER) or two (LOWER).
        let sig = "() => (float[1, 1, 6] y) <float[1, 1, 6] x = {1, 2, 3, 4, 5, 6}, \
                   float[1, 1, 4] w = {1, 0, 0, 0}>";
        let upper = folded(22, sig, "y = Conv <auto_pad = \"SAME_UPPER\"> (x, w)", 0);
        assert_eq!(upper, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let lower = folded(22, sig, "y = Conv <auto_pad = \"SAME_LOWER\"> (x, w)", 0);
        assert_eq!(lower, [0.0, 0.0, 1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn conv_refusals() {
        let e = err(shapes(
            22,
            "(float[1, 3, 5, 5] x, float[3, 2, 3, 3] w) => (float[] y)",
            "y = Conv <group = 3> (x, w)",
        ));
        assert!(e.starts_with("invalid") && e.contains("group 3"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 5, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv <kernel_shape = [3, 2]> (x, w)",
        ));
        assert!(e.contains("kernel_shape"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 5, 5] x, float[2, 1, 3, 3] w, float[3] b) => (float[] y)",
            "y = Conv (x, w, b)",
        ));
        assert!(e.contains("bias"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 2, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv (x, w)",
        ));
        assert!(e.contains("more than the padded input's 2"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 5, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv <auto_pad = \"SAME\"> (x, w)",
        ));
        assert!(e.contains("auto_pad 'SAME'"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 5, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv <auto_pad = \"VALID\", pads = [1, 1, 1, 1]> (x, w)",
        ));
        assert!(e.contains("cannot be used together"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 5, 5] x, float[1, 1, 3, 3] w) => (float[] y)",
            "y = Conv <strides = [1, 0]> (x, w)",
        ));
        assert!(e.contains("'strides' must be at least 1"), "{e}");
        // float16 computes in f32 and rounds per operation; integers are refused.
        let s = shapes(
            22,
            "(float16[1, 1, 5, 5] x, float16[1, 1, 3, 3] w) => (float16[] y)",
            "y = Conv (x, w)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 3, 3]]));
        let e = err(shapes(
            22,
            "(int32[1, 1, 5, 5] x, int32[1, 1, 3, 3] w) => (int32[] y)",
            "y = Conv (x, w)",
        ));
        assert!(e.starts_with("unsupported") && e.contains("int32"), "{e}");
    }

    #[test]
    fn conv_transpose_sizes_and_values() {
        // 3 * (3 - 1) + 1 + 3 = 10 and 2 * (3 - 1) + 1 + 3 = 8, given by output_padding or output_shape.
        let sig = "(float[1, 1, 3, 3] x, float[1, 2, 3, 3] w) => (float[] y)";
        for attrs in [
            "output_padding = [1, 1], strides = [3, 2]",
            "output_shape = [10, 8], strides = [3, 2]",
            "output_shape = [1, 2, 10, 8], strides = [3, 2]",
        ] {
            let s = shapes(22, sig, &format!("y = ConvTranspose <{attrs}> (x, w)"));
            assert_eq!(s, Ok(vec![vec![1, 2, 10, 8]]), "{attrs}");
        }
        // Pads crop: 3 * 2 + 3 - 2 = 7 and 2 * 2 + 3 - 4 = 3. SAME_*: in * stride.
        let s = shapes(22, sig, "y = ConvTranspose <pads = [1, 2, 1, 2], strides = [3, 2]> (x, w)");
        assert_eq!(s, Ok(vec![vec![1, 2, 7, 3]]));
        let s = shapes(
            22,
            sig,
            "y = ConvTranspose <auto_pad = \"SAME_LOWER\", strides = [2, 3]> (x, w)",
        );
        assert_eq!(s, Ok(vec![vec![1, 2, 6, 9]]));
        // x = [1, 2], w = [1, 10, 100], stride 2: [1, 10, 100 + 2, 20, 200].
        let sig = "() => (float[] y) <float[1, 1, 2] x = {1, 2}, float[1, 1, 3] w = {1, 10, 100}>";
        let y = folded(22, sig, "y = ConvTranspose <strides = [2]> (x, w)", 0);
        assert_eq!(y, [1.0, 10.0, 102.0, 20.0, 200.0]);
        // output_shape 6: total padding -1, one extra trailing element.
        let y = folded(22, sig, "y = ConvTranspose <strides = [2], output_shape = [6]> (x, w)", 0);
        assert_eq!(y, [1.0, 10.0, 102.0, 20.0, 200.0, 0.0]);
        // output_shape 3: total padding 2, one cropped at each end.
        let y = folded(22, sig, "y = ConvTranspose <strides = [2], output_shape = [3]> (x, w)", 0);
        assert_eq!(y, [10.0, 102.0, 20.0]);
        // output_shape 4, total 1: the odd one is cropped at the end for SAME_UPPER, at the start otherwise.
        let y = folded(
            22,
            sig,
            "y = ConvTranspose <strides = [2], output_shape = [4], auto_pad = \"SAME_UPPER\"> (x, w)",
            0,
        );
        assert_eq!(y, [1.0, 10.0, 102.0, 20.0]);
        let y = folded(22, sig, "y = ConvTranspose <strides = [2], output_shape = [4]> (x, w)", 0);
        assert_eq!(y, [10.0, 102.0, 20.0, 200.0]);
        // Groups: 2 groups of one input channel, each scattering into 2 output channels, plus bias.
        let sig = "() => (float[] y) <float[1, 2, 1] x = {1, 2}, float[2, 2, 1] w = {1, 2, 3, 4}, \
                   float[4] b = {0, 0, 0, 100}>";
        let y = folded(22, sig, "y = ConvTranspose <group = 2> (x, w, b)", 0);
        assert_eq!(y, [1.0, 2.0, 6.0, 108.0]);
    }

    #[test]
    fn conv_transpose_refusals() {
        let sig = "(float[1, 1, 3] x, float[1, 1, 3] w) => (float[] y)";
        let e =
            err(shapes(22, sig, "y = ConvTranspose <strides = [2], output_padding = [2]> (x, w)"));
        assert!(e.contains("output_padding 2"), "{e}");
        // Needs two extra elements past the last window with stride 2.
        let e =
            err(shapes(22, sig, "y = ConvTranspose <strides = [2], output_shape = [9]> (x, w)"));
        assert!(e.starts_with("unsupported"), "{e}");
        let e = err(shapes(22, sig, "y = ConvTranspose <pads = [3, 3]> (x, w)"));
        assert!(e.contains("empty"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 2, 3] x, float[1, 1, 3] w) => (float[] y)",
            "y = ConvTranspose (x, w)",
        ));
        assert!(e.contains("channels"), "{e}");
    }

    #[test]
    fn hostile_attributes_are_refused_not_panicking() {
        let sig = "(float[1, 1, 3] x, float[1, 1, 3] w) => (float[] y)";
        for body in [
            "y = ConvTranspose <strides = [9223372036854775807]> (x, w)",
            "y = ConvTranspose <output_shape = [-9223372036854775808]> (x, w)",
            "y = ConvTranspose <dilations = [9223372036854775807]> (x, w)",
            "y = Conv <dilations = [9223372036854775807]> (x, w)",
            "y = Conv <pads = [9223372036854775807, 9223372036854775807]> (x, w)",
            "y = Conv <strides = [-1]> (x, w)",
            "y = Conv <group = 0> (x, w)",
        ] {
            assert!(shapes(22, sig, body).is_err(), "{body}");
        }
        let sig = "(float[1, 1, 3] x) => (float[] y)";
        for body in [
            "y = MaxPool <kernel_shape = [9223372036854775807]> (x)",
            "y = MaxPool <kernel_shape = [2], pads = [-1, 0]> (x)",
            "y = AveragePool <kernel_shape = [2], pads = [0, 9223372036854775807], ceil_mode = 1> (x)",
        ] {
            assert!(shapes(22, sig, body).is_err(), "{body}");
        }
    }

    #[test]
    fn pool_sizes_and_ceil_mode() {
        let sig = "(float[1, 3, 32, 32] x) => (float[] y)";
        let s = shapes(22, sig, "y = MaxPool <kernel_shape = [5, 5], strides = [3, 3]> (x)");
        assert_eq!(s, Ok(vec![vec![1, 3, 10, 10]]));
        // With pads 2: 32 + 4 - 3 + 1 = 34.
        let s = shapes(22, sig, "y = AveragePool <kernel_shape = [3, 3], pads = [2, 2, 2, 2]> (x)");
        assert_eq!(s, Ok(vec![vec![1, 3, 34, 34]]));
        // ceil((4 - 3) / 2) + 1 = 2 against floor's 1.
        let sig = "(float[1, 1, 4, 4] x) => (float[] y)";
        let s = shapes(
            22,
            sig,
            "y = MaxPool <kernel_shape = [3, 3], strides = [2, 2], ceil_mode = 1> (x)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 2, 2]]));
        // ceil((2 - 1) / 2) + 1 = 2, but the second window would start at 2, past the input: dropped.
        let sig = "(float[1, 1, 2, 2] x) => (float[] y)";
        let s = shapes(
            22,
            sig,
            "y = MaxPool <kernel_shape = [1, 1], strides = [2, 2], ceil_mode = 1> (x)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 1, 1]]));
        // Input 4, pads [0, 1], kernel 2, stride 2: ceil gives 3, whose window starts at 4 in the end padding.
        let sig = "(float[1, 1, 4] x) => (float[] y)";
        let s = shapes(
            22,
            sig,
            "y = MaxPool <kernel_shape = [2], strides = [2], pads = [0, 1], ceil_mode = 1> (x)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 2]]));
        // VALID ignores ceil_mode: floor((9 - 4) / 2) + 1 = 3.
        let sig = "(float[1, 1, 9] x) => (float[] y)";
        let s = shapes(
            22,
            sig,
            "y = AveragePool <kernel_shape = [4], strides = [2], auto_pad = \"VALID\", ceil_mode = 1> (x)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 3]]));
        // Dilated SAME_LOWER: still ceil(7 / 2) = 4.
        let sig = "(float[1, 1, 7] x) => (float[] y)";
        let s = shapes(
            22,
            sig,
            "y = LpPool <kernel_shape = [3], dilations = [2], strides = [2], auto_pad = \"SAME_LOWER\"> (x)",
        );
        assert_eq!(s, Ok(vec![vec![1, 1, 4]]));
    }

    #[test]
    fn pool_values() {
        // Ceil mode over [1..5], kernel 2, stride 2: the last window holds only 5.
        let sig = "() => (float[] y) <float[1, 1, 5] x = {1, 2, 3, 4, 5}>";
        let y = folded(
            22,
            sig,
            "y = AveragePool <kernel_shape = [2], strides = [2], ceil_mode = 1> (x)",
            0,
        );
        assert_eq!(y, [1.5, 3.5, 5.0]);
        // count_include_pad divides by the padded window size.
        let sig = "() => (float[] y) <float[1, 1, 3] x = {3, 6, 9}>";
        let y = folded(
            22,
            sig,
            "y = AveragePool <kernel_shape = [3], pads = [1, 1], count_include_pad = 1> (x)",
            0,
        );
        assert_eq!(y, [3.0, 6.0, 5.0]);
        let y = folded(22, sig, "y = AveragePool <kernel_shape = [3], pads = [1, 1]> (x)", 0);
        assert_eq!(y, [4.5, 6.0, 7.5]);
        // L2 over pairs: [3, 4] -> 5; opset 1 takes p as a float.
        let sig = "() => (float[] y) <float[1, 1, 4] x = {3, -4, 6, 8}>";
        let y = folded(22, sig, "y = LpPool <kernel_shape = [2], strides = [2]> (x)", 0);
        assert_eq!(y, [5.0, 10.0]);
        let y = folded(1, sig, "y = LpPool <kernel_shape = [2], strides = [2], p = 1.0> (x)", 0);
        assert_eq!(y, [7.0, 14.0]);
    }

    #[test]
    fn max_pool_indices_in_both_storage_orders() {
        // A 2x3 plane [[1, 5, 2], [4, 3, 6]], column windows: maxima 4, 5, 6 at
        // row-major 3, 1, 5 and column-major 1, 2, 5.
        let sig = "() => (float[] y, int64[] i) <float[1, 1, 2, 3] x = {1, 5, 2, 4, 3, 6}>";
        let body = "y, i = MaxPool <kernel_shape = [2, 1]> (x)";
        assert_eq!(folded(22, sig, body, 0), [4.0, 5.0, 6.0]);
        assert_eq!(folded(22, sig, body, 1), [3.0, 1.0, 5.0]);
        let body = "y, i = MaxPool <kernel_shape = [2, 1], storage_order = 1> (x)";
        assert_eq!(folded(22, sig, body, 1), [1.0, 2.0, 5.0]);
        let s = shapes(
            12,
            "(uint8[2, 3, 6, 6] x) => (uint8[] y, int64[] i)",
            "y, i = MaxPool <kernel_shape = [2, 2], strides = [2, 2]> (x)",
        );
        assert_eq!(s, Ok(vec![vec![2, 3, 3, 3], vec![2, 3, 3, 3]]));
        let e = err(shapes(
            22,
            "(float[1, 1, 4, 4] x) => (float[] y)",
            "y = MaxPool <kernel_shape = [2, 2], storage_order = 2> (x)",
        ));
        assert!(e.contains("storage_order"), "{e}");
    }

    #[test]
    fn pool_refusals() {
        let e = err(shapes(
            11,
            "(int8[1, 1, 4, 4] x) => (int8[] y)",
            "y = MaxPool <kernel_shape = [2, 2]> (x)",
        ));
        assert!(e.starts_with("unsupported"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 4, 4] x) => (float[] y)",
            "y = AveragePool <kernel_shape = [2]> (x)",
        ));
        assert!(e.contains("2 spatial axes"), "{e}");
        let e = err(shapes(
            22,
            "(float[4, 4] x) => (float[] y)",
            "y = MaxPool <kernel_shape = [2]> (x)",
        ));
        assert!(e.contains("rank 3"), "{e}");
        let e = err(shapes(
            22,
            "(float[1, 1, 4] x) => (float[] y)",
            "y = LpPool <kernel_shape = [2], p = 0> (x)",
        ));
        assert!(e.contains("'p'"), "{e}");
        let e = err(shapes(
            1,
            "(float[1, 1, 4] x) => (float[] y)",
            "y = LpPool <kernel_shape = [2], p = 1.5> (x)",
        ));
        assert!(e.starts_with("unsupported"), "{e}");
        let e = err(shapes(
            22,
            "(int32[1, 1, 4] x) => (int32[] y)",
            "y = AveragePool <kernel_shape = [2]> (x)",
        ));
        assert!(e.starts_with("unsupported"), "{e}");
    }

    #[test]
    fn global_pools() {
        let sig = "(float[2, 3, 4, 5] x) => (float[] y)";
        assert_eq!(shapes(22, sig, "y = GlobalAveragePool (x)"), Ok(vec![vec![2, 3, 1, 1]]));
        assert_eq!(shapes(22, sig, "y = GlobalMaxPool (x)"), Ok(vec![vec![2, 3, 1, 1]]));
        let sig = "(double[2, 3, 4, 5, 6] x) => (double[] y)";
        assert_eq!(shapes(18, sig, "y = GlobalLpPool <p = 3> (x)"), Ok(vec![vec![2, 3, 1, 1, 1]]));
        let sig = "() => (float[] y) <float[1, 2, 2] x = {3, 4, -5, 12}>";
        assert_eq!(folded(22, sig, "y = GlobalLpPool (x)", 0), [5.0, 13.0]);
        assert_eq!(folded(22, sig, "y = GlobalMaxPool (x)", 0), [4.0, 12.0]);
        assert_eq!(folded(22, sig, "y = GlobalAveragePool (x)", 0), [3.5, 3.5]);
        let e = err(shapes(22, "(int64[1, 2, 2] x) => (int64[] y)", "y = GlobalMaxPool (x)"));
        assert!(e.starts_with("unsupported"), "{e}");
    }
}
