//! Attention operators: `Attention` (opsets 23, 24, 25), the
//! `ai.onnx.preview` `FlexAttention` (its `score_mod` / `prob_mod`
//! subgraphs compiled inline, as control-flow bodies are),
//! `RotaryEmbedding`, `SwiGLU`, `CausalConvWithState` and `LinearAttention`.
//!
//! The kernels run on `f32`, `f64`, `f16` and `bf16`, computing in `f32`
//! (`f64` for `f64`) and rounding once per output element; the Attention
//! mask may be boolean or of any of those float types.

use super::host::{HostData, HostElem};
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use onnx_codegen_runtime::attention::{
    self as rt_att, AttentionInputs, AttentionOutputs, AttentionParams, AttentionShape,
    CausalConvParams, Decay, LinearAttentionParams, MaskLayout, MaskValue, Real, RotaryParams,
};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// The rule for `op_type` in the default domain, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Attention" => Some(&AttentionRule),
        "RotaryEmbedding" => Some(&RotaryRule),
        "SwiGLU" => Some(&SwiGluRule),
        "CausalConvWithState" => Some(&CausalConvRule),
        "LinearAttention" => Some(&LinearAttentionRule),
        _ => None,
    }
}

/// The rule for `op_type` in the `ai.onnx.preview` domain.
pub fn preview_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "FlexAttention" => Some(&FlexAttentionRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn op_name<'a>(cx: &'a NodeCx<'_>) -> &'a str {
    cx.node.op.op_type.as_str()
}

fn is_real(e: ElemType) -> bool {
    matches!(e, ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16)
}

/// The element type the kernels compute in for `elem`.
fn acc_elem(elem: ElemType) -> ElemType {
    if elem == ElemType::Double { ElemType::Double } else { ElemType::Float }
}

/// Input `i` as a float tensor of the kernels' types.
fn real_input<'a>(cx: &NodeCx<'a>, i: usize, what: &str) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if !is_real(t.elem) {
        return unsupported(format!(
            "{} with {what} of type {} (the kernels handle float, double, float16 and bfloat16)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

/// Input `i` must have element type `elem`.
fn same_elem<'a>(
    cx: &NodeCx<'a>,
    i: usize,
    elem: ElemType,
    what: &str,
) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if t.elem != elem {
        return unsupported(format!(
            "{} with {what} of type {} and the first input of type {elem} (mixed precisions have \
             no kernel)",
            op_name(cx),
            t.elem
        ));
    }
    Ok(t)
}

fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

fn has_attr(cx: &NodeCx<'_>, name: &str) -> bool {
    cx.node.attr(name).is_some()
}

fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())
}

fn host_opt<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<Option<&'a [T]>, EvalError> {
    match inputs.get(i).copied().flatten() {
        None => Ok(None),
        Some(t) => t.get::<T>().map(Some).ok_or(wrong_buffer()),
    }
}

/// Calls `$f::<T>(args)` with `T` the host type of a float element type.
macro_rules! by_real_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float => $f::<f32>($($arg),*),
            ElemType::Double => $f::<f64>($($arg),*),
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            other => Err(EvalError::Type(other)),
        }
    };
}

fn opt_tokens(e: Option<&Option<TokenStream>>) -> TokenStream {
    match e {
        Some(Some(t)) => quote!(Some(#t)),
        _ => quote!(None),
    }
}

// ---------------------------------------------------------------------------
// Attention

struct AttentionRule;

struct AttentionPlan {
    elem: ElemType,
    params: AttentionParams,
    mask_elem: Option<ElemType>,
    outputs: Vec<TensorType>,
}

fn dims4(cx: &NodeCx<'_>, t: &TensorType, what: &str) -> OpResult<[usize; 4]> {
    <[usize; 4]>::try_from(t.dims.as_slice())
        .map_err(|_| OpError::Invalid(format!("{}'s {what} {t} should be of rank 4", op_name(cx))))
}

/// A positive head count from attribute `name`.
fn heads_attr(cx: &NodeCx<'_>, name: &str) -> OpResult<usize> {
    match cx.node.attr(name) {
        Some(AttrValue::Int(v)) if *v > 0 => Ok(usize::try_from(*v).unwrap_or(0)),
        Some(_) => invalid(format!("{}'s {name} must be a positive integer", op_name(cx))),
        None => invalid(format!("{} with 3-D inputs needs the attribute {name}", op_name(cx))),
    }
}

/// `hidden` split into `heads` heads.
fn split_heads(cx: &NodeCx<'_>, hidden: usize, heads: usize, what: &str) -> OpResult<usize> {
    if heads == 0 || !hidden.is_multiple_of(heads) {
        return invalid(format!(
            "{}'s {what} hidden size {hidden} is not a multiple of its {heads} heads",
            op_name(cx)
        ));
    }
    Ok(hidden / heads)
}

/// The mask layout for mask dims `m` over `(batch, heads, q_len, keys)`.
fn mask_layout(
    cx: &NodeCx<'_>,
    m: &TensorType,
    target: [usize; 3],
    total: usize,
) -> OpResult<MaskLayout> {
    let rank = m.dims.len();
    if !(1..=4).contains(&rank) {
        return invalid(format!("{}'s attn_mask {m} should be of rank 1 to 4", op_name(cx)));
    }
    let mut dims = [1usize; 4];
    dims[4 - rank..].copy_from_slice(&m.dims);
    let keys = dims[3];
    if keys > total {
        return invalid(format!(
            "{}'s attn_mask {m} covers {keys} keys, more than the {total} keys of K",
            op_name(cx)
        ));
    }
    let mut strides = [0usize; 4];
    let mut stride = 1usize;
    for a in (0..4).rev() {
        if a < 3 && dims[a] != 1 && dims[a] != target[a] {
            return invalid(format!(
                "{}'s attn_mask {m} does not broadcast to [{}, {}, {}, {keys}]",
                op_name(cx),
                target[0],
                target[1],
                target[2]
            ));
        }
        strides[a] = if dims[a] == 1 && a < 3 { 0 } else { stride };
        stride = stride.checked_mul(dims[a]).ok_or_else(|| OpError::Invalid("too large".into()))?;
    }
    Ok(MaskLayout { strides, keys, len: stride })
}

/// Whether the softmax runs in `elem` itself: `softmax_precision` absent,
/// or naming `elem` or a narrower type. A wider one runs it in the kernels'
/// accumulator (`f32`; `f64` for `f64`).
fn softmax_in_t(cx: &NodeCx<'_>, elem: ElemType) -> OpResult<bool> {
    if !has_attr(cx, "softmax_precision") {
        return Ok(true);
    }
    let p = cx.int_or("softmax_precision", 1);
    let width = |code: i64| match code {
        10 | 16 => Some(2),
        1 => Some(4),
        11 => Some(8),
        _ => None,
    };
    let Some(w) = width(p) else {
        return invalid(format!(
            "{}'s softmax_precision {p} is not one of 1, 10, 11 and 16",
            op_name(cx)
        ));
    };
    let own = match elem {
        ElemType::Float16 | ElemType::Bfloat16 => 2,
        ElemType::Float => 4,
        _ => 8,
    };
    Ok(w <= own)
}

fn attention_plan(cx: &NodeCx<'_>) -> OpResult<AttentionPlan> {
    let v = cx.version();
    let q = real_input(cx, 0, "Q")?;
    let elem = q.elem;
    let k = same_elem(cx, 1, elem, "K")?;
    let vv = same_elem(cx, 2, elem, "V")?;
    if k.rank() != q.rank() || vv.rank() != q.rank() {
        return invalid(format!("Attention's Q {q}, K {k} and V {vv} should have the same rank"));
    }
    let (batch, q_heads, kv_heads, q_len, kv_new, head, v_head, three_d) = match q.rank() {
        4 => {
            if v >= 25 && (has_attr(cx, "q_num_heads") || has_attr(cx, "kv_num_heads")) {
                return invalid(
                    "Attention's q_num_heads and kv_num_heads must not be given with 4-D inputs",
                );
            }
            let [b, hq, sq, d] = dims4(cx, q, "Q")?;
            let [bk, hk, sk, dk] = dims4(cx, k, "K")?;
            let [bv, hv, sv, dv] = dims4(cx, vv, "V")?;
            if bk != b || bv != b || dk != d || hv != hk || sv != sk {
                return invalid(format!("Attention's Q {q}, K {k} and V {vv} do not fit together"));
            }
            (b, hq, hk, sq, sk, d, dv, false)
        }
        3 => {
            let hq = heads_attr(cx, "q_num_heads")?;
            let hk = heads_attr(cx, "kv_num_heads")?;
            let (b, sq, hidden_q) = (q.dims[0], q.dims[1], q.dims[2]);
            let (bk, sk, hidden_k) = (k.dims[0], k.dims[1], k.dims[2]);
            let (bv, sv, hidden_v) = (vv.dims[0], vv.dims[1], vv.dims[2]);
            let d = split_heads(cx, hidden_q, hq, "Q")?;
            let dk = split_heads(cx, hidden_k, hk, "K")?;
            let dv = split_heads(cx, hidden_v, hk, "V")?;
            if bk != b || bv != b || dk != d || sv != sk {
                return invalid(format!("Attention's Q {q}, K {k} and V {vv} do not fit together"));
            }
            (b, hq, hk, sq, sk, d, dv, true)
        }
        _ => return invalid(format!("Attention's Q {q} should be of rank 3 or 4")),
    };
    if kv_heads == 0 || !q_heads.is_multiple_of(kv_heads) {
        return invalid(format!(
            "Attention's {q_heads} query heads are not a multiple of its {kv_heads} key/value heads"
        ));
    }
    let past = match (cx.opt_input(4), cx.opt_input(5)) {
        (None, None) => 0,
        (Some(_), Some(_)) => {
            let pk = same_elem(cx, 4, elem, "past_key")?;
            let pv = same_elem(cx, 5, elem, "past_value")?;
            let [b1, h1, p1, d1] = dims4(cx, pk, "past_key")?;
            let [b2, h2, p2, d2] = dims4(cx, pv, "past_value")?;
            if [b1, h1, p1, d1] != [batch, kv_heads, p1, head]
                || [b2, h2, p2, d2] != [batch, kv_heads, p1, v_head]
            {
                return invalid(format!(
                    "Attention's past_key {pk} and past_value {pv} do not fit \
                     [{batch}, {kv_heads}, past, {head}] and [{batch}, {kv_heads}, past, {v_head}]"
                ));
            }
            p1
        }
        _ => return invalid("Attention's past_key and past_value must be given together"),
    };
    let total = past
        .checked_add(kv_new)
        .ok_or_else(|| OpError::Invalid("Attention's key count overflows".into()))?;
    if let Some(n) = cx.opt_input(6) {
        if n.elem != ElemType::Int64 || n.dims != [batch] {
            return invalid(format!(
                "Attention's nonpad_kv_seqlen {n} should be int64[{batch}] (one count per batch)"
            ));
        }
        if past > 0 || cx.opt_input(4).is_some() {
            return invalid("Attention's nonpad_kv_seqlen cannot be combined with past_key");
        }
    }
    let (mask, mask_elem) = match cx.opt_input(3) {
        None => (None, None),
        Some(m) => {
            if m.elem != ElemType::Bool && !is_real(m.elem) {
                return unsupported(format!(
                    "Attention with an attn_mask of type {} (boolean and float masks are supported)",
                    m.elem
                ));
            }
            (Some(mask_layout(cx, m, [batch, q_heads, q_len], total)?), Some(m.elem))
        }
    };
    let qk_mode = cx.int_or("qk_matmul_output_mode", 0);
    let qk_mode = match u8::try_from(qk_mode) {
        Ok(m @ 0..=3) => m,
        _ => return invalid(format!("Attention's qk_matmul_output_mode {qk_mode} is not 0 to 3")),
    };
    let softmax_in_t = softmax_in_t(cx, elem)?;
    let (left_window, right_window) = if v >= 25 {
        let (l, r) = (cx.int_or("left_window_size", -1), cx.int_or("right_window_size", -1));
        if l < -1 || r < -1 {
            return invalid("Attention's window sizes must be -1 or nonnegative");
        }
        (l, r)
    } else {
        (-1, -1)
    };
    let scale = match cx.node.attr("scale") {
        Some(AttrValue::Float(s)) => f64::from(*s),
        _ => 1.0 / (head as f64).sqrt(),
    };
    let y_dims = if three_d {
        vec![batch, q_len, q_heads * v_head]
    } else {
        vec![batch, q_heads, q_len, v_head]
    };
    let outputs = vec![
        TensorType::new(elem, y_dims),
        TensorType::new(elem, vec![batch, kv_heads, total, head]),
        TensorType::new(elem, vec![batch, kv_heads, total, v_head]),
        TensorType::new(elem, vec![batch, q_heads, q_len, total]),
    ];
    let shape =
        AttentionShape { batch, q_heads, kv_heads, q_len, kv_new, past, head, v_head, three_d };
    let params = AttentionParams {
        shape,
        scale,
        softcap: f64::from(cx.float_or("softcap", 0.0)),
        is_causal: cx.int_or("is_causal", 0) != 0,
        left_window,
        right_window,
        qk_mode,
        softmax_in_t,
        mask,
    };
    Ok(AttentionPlan { elem, params, mask_elem, outputs })
}

impl OpRule for AttentionRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let mut out = attention_plan(cx)?.outputs;
        out.truncate(cx.node.outputs.len().max(1));
        Ok(out)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = attention_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(AttentionKernel {
            elem: plan.elem,
            params: plan.params,
            mask_elem: plan.mask_elem,
            present: [has_output(cx, 1), has_output(cx, 2), has_output(cx, 3)],
        })))
    }
}

struct AttentionKernel {
    elem: ElemType,
    params: AttentionParams,
    mask_elem: Option<ElemType>,
    /// Which of present_key, present_value, qk_matmul_output are wanted.
    present: [bool; 3],
}

/// Mask element types with a host form.
trait HostMask: MaskValue {
    fn of(d: &HostData) -> Option<&[Self]>;
}

macro_rules! host_mask {
    ($($t:ty => $v:ident),*) => {$(
        impl HostMask for $t {
            fn of(d: &HostData) -> Option<&[Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}
host_mask!(bool => Bool, f32 => F32, f64 => F64, f16 => F16, bf16 => Bf16);

fn run_attention_masked<T, M>(
    k: &AttentionKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult
where
    T: Real + HostElem,
    T::Acc: HostElem,
    M: HostMask,
{
    let x = AttentionInputs::<T, M> {
        q: host_in(inputs, 0)?,
        k: host_in(inputs, 1)?,
        v: host_in(inputs, 2)?,
        mask: match k.mask_elem {
            Some(_) => Some(
                inputs
                    .get(3)
                    .copied()
                    .flatten()
                    .and_then(|t| M::of(&t.data))
                    .ok_or(wrong_buffer())?,
            ),
            None => None,
        },
        past_key: host_opt(inputs, 4)?,
        past_value: host_opt(inputs, 5)?,
        nonpad_kv_seqlen: host_opt(inputs, 6)?,
    };
    let mut it = outputs.iter_mut();
    let y = it.next().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    let mut extra: Vec<Option<&mut [T]>> = Vec::with_capacity(3);
    for &p in &k.present {
        extra.push(if p {
            Some(it.next().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?)
        } else {
            None
        });
    }
    let scratch = it.next().and_then(|t| t.get_mut::<T::Acc>()).ok_or(wrong_buffer())?;
    let mut extra = extra.into_iter();
    let out = AttentionOutputs {
        y,
        present_key: extra.next().flatten(),
        present_value: extra.next().flatten(),
        qk: extra.next().flatten(),
    };
    rt_att::attention(&k.params, &x, out, scratch)?;
    Ok(())
}

fn run_attention<T>(
    k: &AttentionKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult
where
    T: Real + HostElem,
    T::Acc: HostElem,
{
    match k.mask_elem {
        None | Some(ElemType::Float) => run_attention_masked::<T, f32>(k, inputs, outputs),
        Some(ElemType::Bool) => run_attention_masked::<T, bool>(k, inputs, outputs),
        Some(ElemType::Double) => run_attention_masked::<T, f64>(k, inputs, outputs),
        Some(ElemType::Float16) => run_attention_masked::<T, f16>(k, inputs, outputs),
        Some(ElemType::Bfloat16) => run_attention_masked::<T, bf16>(k, inputs, outputs),
        Some(other) => Err(EvalError::Type(other)),
    }
}

fn shape_tokens(s: &AttentionShape, rt: &TokenStream) -> TokenStream {
    let n = |v: usize| lit::usize_lit(v);
    let (b, hq, hk, sq, sk, p, d, dv) = (
        n(s.batch),
        n(s.q_heads),
        n(s.kv_heads),
        n(s.q_len),
        n(s.kv_new),
        n(s.past),
        n(s.head),
        n(s.v_head),
    );
    let three_d = s.three_d;
    quote!(#rt::attention::AttentionShape {
        batch: #b, q_heads: #hq, kv_heads: #hk, q_len: #sq, kv_new: #sk, past: #p,
        head: #d, v_head: #dv, three_d: #three_d,
    })
}

impl Kernel for AttentionKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_attention(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.params;
        let shape = shape_tokens(&p.shape, rt);
        let scale = lit::f64_lit(p.scale);
        let softcap = lit::f64_lit(p.softcap);
        let causal = p.is_causal;
        let (lw, rw) = (p.left_window, p.right_window);
        let mode = p.qk_mode;
        let smt = p.softmax_in_t;
        let mask_layout = match p.mask {
            Some(m) => {
                let st = m.strides.map(lit::usize_lit);
                let (keys, len) = (lit::usize_lit(m.keys), lit::usize_lit(m.len));
                quote!(Some(#rt::attention::MaskLayout { strides: [#(#st),*], keys: #keys, len: #len }))
            }
            None => quote!(None),
        };
        let i = &io.inputs;
        let (q, k, v) = (&i[0], &i[1], &i[2]);
        let mask = match i.get(3) {
            Some(Some(m)) if self.mask_elem.is_some() => quote!(Some(#m)),
            _ => quote!(None::<&[f32]>),
        };
        let (pk, pv, np) = (opt_tokens(i.get(4)), opt_tokens(i.get(5)), opt_tokens(i.get(6)));
        let y = &io.outputs[0];
        let mut outs = Vec::new();
        for (idx, &p) in self.present.iter().enumerate() {
            outs.push(if p { opt_tokens(io.outputs.get(idx + 1)) } else { quote!(None) });
        }
        let (ok, ov, oq) = (&outs[0], &outs[1], &outs[2]);
        let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
        quote! {
            #rt::attention::attention(
                &#rt::attention::AttentionParams {
                    shape: #shape, scale: #scale, softcap: #softcap, is_causal: #causal,
                    left_window: #lw, right_window: #rw, qk_mode: #mode,
                    softmax_in_t: #smt, mask: #mask_layout,
                },
                &#rt::attention::AttentionInputs {
                    q: #q, k: #k, v: #v, mask: #mask, past_key: #pk, past_value: #pv,
                    nonpad_kv_seqlen: #np,
                },
                #rt::attention::AttentionOutputs {
                    y: #y, present_key: #ok, present_value: #ov, qk: #oq,
                },
                #scratch,
            )?;
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        let n = rt_att::attention_scratch_len(&self.params.shape)?;
        Some(TensorType::new(acc_elem(self.elem), vec![n.max(1)]))
    }
}

// ---------------------------------------------------------------------------
// FlexAttention (ai.onnx.preview)

struct FlexAttentionRule;

fn flex_plan(cx: &NodeCx<'_>) -> OpResult<AttentionPlan> {
    let q = real_input(cx, 0, "Q")?;
    let elem = q.elem;
    let k = same_elem(cx, 1, elem, "K")?;
    let vv = same_elem(cx, 2, elem, "V")?;
    let [b, hq, sq, d] = dims4(cx, q, "Q")?;
    let [bk, hk, sk, dk] = dims4(cx, k, "K")?;
    let [bv, hv, sv, dv] = dims4(cx, vv, "V")?;
    if bk != b || bv != b || dk != d || hv != hk || sv != sk {
        return invalid(format!("FlexAttention's Q {q}, K {k} and V {vv} do not fit together"));
    }
    if hk == 0 || !hq.is_multiple_of(hk) {
        return invalid(format!(
            "FlexAttention's {hq} query heads are not a multiple of its {hk} key/value heads"
        ));
    }
    let scale = match cx.node.attr("scale") {
        Some(AttrValue::Float(s)) => f64::from(*s),
        _ => 1.0 / (d as f64).sqrt(),
    };
    let shape = AttentionShape {
        batch: b,
        q_heads: hq,
        kv_heads: hk,
        q_len: sq,
        kv_new: sk,
        past: 0,
        head: d,
        v_head: dv,
        three_d: false,
    };
    let params = AttentionParams {
        shape,
        scale,
        softcap: 0.0,
        is_causal: false,
        left_window: -1,
        right_window: -1,
        qk_mode: 0,
        // FlexAttention's softmax runs in float32 unless told otherwise.
        softmax_in_t: has_attr(cx, "softmax_precision") && softmax_in_t(cx, elem)?,
        mask: None,
    };
    let outputs = vec![TensorType::new(elem, vec![b, hq, sq, dv])];
    Ok(AttentionPlan { elem, params, mask_elem: None, outputs })
}

/// The modifier subgraphs present, compiled (control flow's machinery: each
/// body is inferred, planned into its own arena and emitted inline) with
/// their one input typed as the scores, `[batch, q_heads, q_len, kv_len]` in
/// the softmax precision (float32, or double for double inputs).
fn flex_mods(cx: &NodeCx<'_>, plan: &AttentionPlan) -> OpResult<[Option<super::control::Body>; 2]> {
    let mut out = [None, None];
    if !has_attr(cx, "score_mod") && !has_attr(cx, "prob_mod") {
        return Ok(out);
    }
    let acc = acc_elem(plan.elem);
    if has_attr(cx, "softmax_precision") {
        let code = cx.int_or("softmax_precision", 1);
        if code != if acc == ElemType::Double { 11 } else { 1 } {
            return unsupported(format!(
                "FlexAttention with modifier subgraphs and softmax_precision {code} (only the \
                 default, {acc}, is supported)"
            ));
        }
    }
    let s = plan.params.shape;
    let scores = TensorType::new(acc, vec![s.batch, s.q_heads, s.q_len, s.kv_new]);
    for (slot, attr) in out.iter_mut().zip(["score_mod", "prob_mod"]) {
        if !has_attr(cx, attr) {
            continue;
        }
        let body = super::control::compile(cx, attr, std::slice::from_ref(&scores))?;
        let outs = body.output_types();
        if outs.as_slice() != std::slice::from_ref(&scores) {
            let got: Vec<String> = outs.iter().map(ToString::to_string).collect();
            return invalid(format!(
                "FlexAttention's {attr} must produce one {scores} tensor, got ({})",
                got.join(", ")
            ));
        }
        *slot = Some(body);
    }
    Ok(out)
}

impl OpRule for FlexAttentionRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = flex_plan(cx)?;
        flex_mods(cx, &plan)?;
        Ok(plan.outputs)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = flex_plan(cx)?;
        let [score_mod, prob_mod] = flex_mods(cx, &plan)?;
        if score_mod.is_some() || prob_mod.is_some() {
            let s = plan.params.shape;
            let acc = acc_elem(plan.elem);
            let scores = TensorType::new(acc, vec![s.batch, s.q_heads, s.q_len, s.kv_new]);
            let arena = [&score_mod, &prob_mod]
                .into_iter()
                .flatten()
                .map(super::control::Body::arena_bytes)
                .max()
                .unwrap_or(0);
            let mut scratch = super::control::Scratch::new(arena);
            scratch.add(&scores)?;
            scratch.add(&scores)?;
            let kernel = FlexModKernel {
                elem: plan.elem,
                params: plan.params,
                own: cx.node.inputs.len(),
                score_mod,
                prob_mod,
                scratch,
            };
            let rt = quote!(::onnx_codegen_runtime);
            for b in [&kernel.score_mod, &kernel.prob_mod].into_iter().flatten() {
                b.tokens(&[format_ident!("_fx_in")], &[format_ident!("_fx_out")], &rt)
                    .map_err(|m| OpError::Unsupported(format!("FlexAttention modifier: {m}")))?;
            }
            return Ok(Lowered::Kernel(Box::new(kernel)));
        }
        Ok(Lowered::Kernel(Box::new(AttentionKernel {
            elem: plan.elem,
            params: plan.params,
            mask_elem: None,
            present: [false; 3],
        })))
    }
}

/// FlexAttention with `score_mod` and/or `prob_mod`: the scores, each
/// modifier's body and the softmax run stage by stage over the whole
/// `[batch, q_heads, q_len, kv_len]` tensor in two scratch buffers (the
/// bodies read one and write the other), then `P·V`.
struct FlexModKernel {
    elem: ElemType,
    params: AttentionParams,
    /// The node's own inputs (captured outer values follow them).
    own: usize,
    score_mod: Option<super::control::Body>,
    prob_mod: Option<super::control::Body>,
    /// The bodies' arena, then the two score buffers (`_cf_slot0`, `_cf_slot1`).
    scratch: super::control::Scratch,
}

impl Kernel for FlexModKernel {
    fn eval(&self, _: &[Option<&HostTensor>], _: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        use super::control::{bind_all, body_arena, captures, error_tokens};
        let rt = &io.rt;
        let s = self.params.shape;
        let u = lit::usize_lit;
        let (b, hq, hk, sq) = (u(s.batch), u(s.q_heads), u(s.kv_heads), u(s.q_len));
        let (sk, d, dv) = (u(s.kv_new), u(s.head), u(s.v_head));
        let shape = quote! {
            #rt::attention::AttentionShape {
                batch: #b, q_heads: #hq, kv_heads: #hk, q_len: #sq, kv_new: #sk,
                past: 0, head: #d, v_head: #dv, three_d: false,
            }
        };
        let mut pairs = captures(io, self.own);
        for (i, name) in ["_fx_q", "_fx_k", "_fx_v"].into_iter().enumerate() {
            let e = io.inputs.get(i).cloned().flatten();
            let e = e.unwrap_or_else(|| quote!(compile_error!("a FlexAttention input is absent")));
            pairs.push((format_ident!("{}", name), e));
        }
        let y = io.outputs.first().cloned().flatten();
        let y = y.unwrap_or_else(|| quote!(compile_error!("FlexAttention's output is absent")));
        pairs.push((format_ident!("_fx_y"), y));
        let bind = bind_all(pairs);
        let split = self.scratch.bind(io);
        let scale = lit::f64_lit(self.params.scale);
        let slots = [format_ident!("_cf_slot0"), format_ident!("_cf_slot1")];
        // `cur` holds the current stage's result; the next stage writes the other.
        let mut cur = 0;
        let mut steps = vec![quote! {
            #rt::attention::flex_scores(&_fx_shape, #scale, _fx_q, _fx_k, &mut *_cf_slot0)?;
        }];
        let stage = |body: &super::control::Body, cur: usize| {
            let (src, dst) = (&slots[cur], &slots[1 - cur]);
            let code = body
                .tokens(&[format_ident!("_fx_in")], &[format_ident!("_fx_out")], rt)
                .unwrap_or_else(|m| error_tokens(&m));
            let arena = body_arena(body);
            quote! {{
                #arena
                let (_fx_in, _fx_out) = (&*#src, &mut *#dst);
                #code
            }}
        };
        if let Some(b) = &self.score_mod {
            steps.push(stage(b, cur));
            cur = 1 - cur;
        }
        let lanes = lit::usize_lit(s.batch * s.q_heads * s.q_len);
        let keys = lit::usize_lit(s.kv_new);
        let (src, dst) = (&slots[cur], &slots[1 - cur]);
        steps.push(quote! {
            #rt::softmax::softmax(
                #rt::norm::AxisShape { outer: #lanes, axis: #keys, inner: 1 },
                &*#src,
                &mut *#dst,
            )?;
        });
        cur = 1 - cur;
        if let Some(b) = &self.prob_mod {
            steps.push(stage(b, cur));
            cur = 1 - cur;
        }
        let probs = &slots[cur];
        steps.push(quote! {
            #rt::attention::flex_output(&_fx_shape, &*#probs, _fx_v, _fx_y)?;
        });
        quote!({
            #bind
            #split
            let _fx_shape = #shape;
            #(#steps)*
        })
    }

    fn reads_input(&self, i: usize) -> bool {
        i < self.own
            || [&self.score_mod, &self.prob_mod].into_iter().flatten().any(|b| b.reads_slot(i))
    }

    fn scratch(&self) -> Option<TensorType> {
        self.scratch.ty()
    }
}

// ---------------------------------------------------------------------------
// RotaryEmbedding

struct RotaryRule;

fn rotary_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, RotaryParams)> {
    let x = real_input(cx, 0, "X")?;
    let cos = same_elem(cx, 1, x.elem, "cos_cache")?;
    let sin = same_elem(cx, 2, x.elem, "sin_cache")?;
    let (batch, heads, seq, head, three_d) = match x.dims[..] {
        [b, h, s, d] => (b, h, s, d, false),
        [b, s, hidden] => {
            let h = heads_attr(cx, "num_heads")?;
            (b, h, s, split_heads(cx, hidden, h, "X")?, true)
        }
        _ => return invalid(format!("RotaryEmbedding's X {x} should be of rank 3 or 4")),
    };
    let rot = match cx.int_or("rotary_embedding_dim", 0) {
        0 => head,
        r => usize::try_from(r).unwrap_or(usize::MAX),
    };
    if !rot.is_multiple_of(2) || rot > head {
        return invalid(format!(
            "RotaryEmbedding's rotary dimension {rot} should be even and at most the head size {head}"
        ));
    }
    let half = rot / 2;
    let positions = match cx.opt_input(3) {
        Some(ids) => {
            if ids.elem != ElemType::Int64 || ids.dims != [batch, seq] {
                return invalid(format!(
                    "RotaryEmbedding's position_ids {ids} should be int64[{batch}, {seq}]"
                ));
            }
            match cos.dims[..] {
                [p, h] if h == half => p,
                _ => {
                    return invalid(format!(
                        "RotaryEmbedding's cos_cache {cos} should be [positions, {half}]"
                    ));
                }
            }
        }
        None => {
            if cos.dims != [batch, seq, half] {
                return invalid(format!(
                    "RotaryEmbedding's cos_cache {cos} should be [{batch}, {seq}, {half}] without \
                     position_ids"
                ));
            }
            0
        }
    };
    if sin.dims != cos.dims {
        return invalid(format!(
            "RotaryEmbedding's sin_cache {sin} should have the shape of cos_cache {cos}"
        ));
    }
    let interleaved = cx.int_or("interleaved", 0) != 0;
    Ok((x.elem, RotaryParams { batch, heads, seq, head, rot, interleaved, three_d, positions }))
}

impl OpRule for RotaryRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        rotary_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (elem, params) = rotary_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(RotaryKernel { elem, params })))
    }
}

struct RotaryKernel {
    elem: ElemType,
    params: RotaryParams,
}

fn run_rotary<T: Real + HostElem>(
    k: &RotaryKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let y = outputs.get_mut(0).and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_att::rotary_embedding(
        &k.params,
        host_in::<T>(inputs, 0)?,
        host_in::<T>(inputs, 1)?,
        host_in::<T>(inputs, 2)?,
        host_opt::<i64>(inputs, 3)?,
        y,
    )?;
    Ok(())
}

impl Kernel for RotaryKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_rotary(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.params;
        let n = |v: usize| lit::usize_lit(v);
        let (b, h, s, d, r, pos) =
            (n(p.batch), n(p.heads), n(p.seq), n(p.head), n(p.rot), n(p.positions));
        let (il, td) = (p.interleaved, p.three_d);
        let i = &io.inputs;
        let (x, c, sn) = (&i[0], &i[1], &i[2]);
        let ids = opt_tokens(i.get(3));
        let y = &io.outputs[0];
        quote! {
            #rt::attention::rotary_embedding(
                &#rt::attention::RotaryParams {
                    batch: #b, heads: #h, seq: #s, head: #d, rot: #r, interleaved: #il,
                    three_d: #td, positions: #pos,
                },
                #x, #c, #sn, #ids, #y,
            )?;
        }
    }
}

// ---------------------------------------------------------------------------
// SwiGLU

struct SwiGluRule;

fn swiglu_plan(cx: &NodeCx<'_>) -> OpResult<ElemType> {
    let a = real_input(cx, 0, "A")?;
    let b = same_elem(cx, 1, a.elem, "B")?;
    if a.dims != b.dims {
        return invalid(format!("SwiGLU's A {a} and B {b} should have the same shape"));
    }
    Ok(a.elem)
}

impl OpRule for SwiGluRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        swiglu_plan(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = swiglu_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(SwiGluKernel {
            elem,
            alpha: f64::from(cx.float_or("alpha", 1.0)),
        })))
    }
}

struct SwiGluKernel {
    elem: ElemType,
    alpha: f64,
}

fn run_swiglu<T: Real + HostElem>(
    k: &SwiGluKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let y = outputs.get_mut(0).and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_att::swiglu(k.alpha, host_in::<T>(inputs, 0)?, host_in::<T>(inputs, 1)?, y)?;
    Ok(())
}

impl Kernel for SwiGluKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_swiglu(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let alpha = lit::f64_lit(self.alpha);
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::attention::swiglu(#alpha, #a, #b, #y)?;)
    }
}

// ---------------------------------------------------------------------------
// CausalConvWithState

struct CausalConvRule;

fn causal_conv_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, CausalConvParams)> {
    let x = real_input(cx, 0, "input")?;
    let w = same_elem(cx, 1, x.elem, "weight")?;
    let [batch, channels, len] = x.dims[..] else {
        return invalid(format!("CausalConvWithState's input {x} should be of rank 3"));
    };
    let k = match w.dims[..] {
        [c, 1, k] if c == channels && k > 0 => k,
        _ => {
            return invalid(format!(
                "CausalConvWithState's weight {w} should be [{channels}, 1, k] with k > 0"
            ));
        }
    };
    if cx.opt_input(2).is_some() {
        let b = same_elem(cx, 2, x.elem, "bias")?;
        if b.dims != [channels] {
            return invalid(format!("CausalConvWithState's bias {b} should be [{channels}]"));
        }
    }
    if cx.opt_input(3).is_some() {
        let s = same_elem(cx, 3, x.elem, "past_state")?;
        if s.dims != [batch, channels, k - 1] {
            return invalid(format!(
                "CausalConvWithState's past_state {s} should be [{batch}, {channels}, {}]",
                k - 1
            ));
        }
    }
    let silu = match cx.string_or("activation", "none").as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return invalid(format!(
                "CausalConvWithState's activation '{other}' is not one of none, silu, swish"
            ));
        }
    };
    Ok((x.elem, CausalConvParams { batch, channels, len, k, silu }))
}

impl OpRule for CausalConvRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (elem, p) = causal_conv_plan(cx)?;
        Ok(vec![cx.input(0)?.clone(), TensorType::new(elem, vec![p.batch, p.channels, p.k - 1])])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (elem, params) = causal_conv_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(CausalConvKernel { elem, params, present: has_output(cx, 1) })))
    }
}

struct CausalConvKernel {
    elem: ElemType,
    params: CausalConvParams,
    present: bool,
}

fn run_causal_conv<T: Real + HostElem>(
    k: &CausalConvKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (y, rest) = outputs.split_first_mut().ok_or(wrong_buffer())?;
    let y = y.get_mut::<T>().ok_or(wrong_buffer())?;
    // Without a present_state output the kernel writes it to scratch.
    let present = rest.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_att::causal_conv_with_state(
        &k.params,
        host_in::<T>(inputs, 0)?,
        host_in::<T>(inputs, 1)?,
        host_opt::<T>(inputs, 2)?,
        host_opt::<T>(inputs, 3)?,
        y,
        present,
    )?;
    Ok(())
}

impl Kernel for CausalConvKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_causal_conv(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.params;
        let n = |v: usize| lit::usize_lit(v);
        let (b, c, l, k) = (n(p.batch), n(p.channels), n(p.len), n(p.k));
        let silu = p.silu;
        let i = &io.inputs;
        let (x, w) = (&i[0], &i[1]);
        let (bias, past) = (opt_tokens(i.get(2)), opt_tokens(i.get(3)));
        let y = &io.outputs[0];
        let present =
            if self.present { io.outputs.get(1).cloned().flatten() } else { io.scratch.clone() };
        let present = present.unwrap_or_else(|| quote!(&mut []));
        quote! {
            #rt::attention::causal_conv_with_state(
                &#rt::attention::CausalConvParams {
                    batch: #b, channels: #c, len: #l, k: #k, silu: #silu,
                },
                #x, #w, #bias, #past, #y, #present,
            )?;
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        let p = &self.params;
        (!self.present)
            .then(|| TensorType::new(self.elem, vec![p.batch, p.channels, p.k.saturating_sub(1)]))
    }
}

// ---------------------------------------------------------------------------
// LinearAttention

struct LinearAttentionRule;

fn linear_attention_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, LinearAttentionParams)> {
    let q = real_input(cx, 0, "query")?;
    let elem = q.elem;
    if elem == ElemType::Double {
        return invalid("LinearAttention does not take double tensors");
    }
    let k = same_elem(cx, 1, elem, "key")?;
    let v = same_elem(cx, 2, elem, "value")?;
    let q_heads = heads_attr(cx, "q_num_heads")?;
    let kv_heads = heads_attr(cx, "kv_num_heads")?;
    if !q_heads.is_multiple_of(kv_heads) {
        return invalid(format!(
            "LinearAttention's {q_heads} query heads are not a multiple of its {kv_heads} \
             key/value heads"
        ));
    }
    let ([b, t, hq], [bk, tk, hk], [bv, tv, hv]) = (
        <[usize; 3]>::try_from(q.dims.as_slice()).unwrap_or([0; 3]),
        <[usize; 3]>::try_from(k.dims.as_slice()).unwrap_or([0; 3]),
        <[usize; 3]>::try_from(v.dims.as_slice()).unwrap_or([0; 3]),
    );
    if q.rank() != 3 || k.rank() != 3 || v.rank() != 3 {
        return invalid(format!(
            "LinearAttention's query {q}, key {k} and value {v} should be of rank 3"
        ));
    }
    let dk = split_heads(cx, hq, q_heads, "query")?;
    let dv = split_heads(cx, hv, kv_heads, "value")?;
    if bk != b || bv != b || tk != t || tv != t || hk != kv_heads * dk {
        return invalid(format!(
            "LinearAttention's query {q}, key {k} and value {v} do not fit together"
        ));
    }
    let rule = cx.string_or("update_rule", "gated_delta");
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return invalid(format!(
                "LinearAttention's update_rule '{other}' is not one of linear, gated, delta, \
                 gated_delta"
            ));
        }
    };
    let decay = match (gated, cx.opt_input(4)) {
        (false, None) => Decay::None,
        (true, Some(_)) => {
            let g = same_elem(cx, 4, elem, "decay")?;
            match g.dims[..] {
                [gb, gt, n] if gb == b && gt == t && n == kv_heads => Decay::PerHead,
                [gb, gt, n] if gb == b && gt == t && n == kv_heads * dk => Decay::PerKey,
                _ => {
                    return invalid(format!(
                        "LinearAttention's decay {g} should be [{b}, {t}, {kv_heads}] or \
                         [{b}, {t}, {}]",
                        kv_heads * dk
                    ));
                }
            }
        }
        (true, None) => return invalid(format!("LinearAttention's rule '{rule}' needs decay")),
        (false, Some(_)) => {
            return invalid(format!("LinearAttention's rule '{rule}' takes no decay"));
        }
    };
    let beta_heads = match (delta, cx.opt_input(5)) {
        (false, None) => 0,
        (true, Some(_)) => {
            let be = same_elem(cx, 5, elem, "beta")?;
            match be.dims[..] {
                [bb, bt, n] if bb == b && bt == t && (n == kv_heads || n == 1) => n,
                _ => {
                    return invalid(format!(
                        "LinearAttention's beta {be} should be [{b}, {t}, {kv_heads}] or [{b}, {t}, 1]"
                    ));
                }
            }
        }
        (true, None) => return invalid(format!("LinearAttention's rule '{rule}' needs beta")),
        (false, Some(_)) => {
            return invalid(format!("LinearAttention's rule '{rule}' takes no beta"));
        }
    };
    if cx.opt_input(3).is_some() {
        let s = same_elem(cx, 3, elem, "past_state")?;
        if s.dims != [b, kv_heads, dk, dv] {
            return invalid(format!(
                "LinearAttention's past_state {s} should be [{b}, {kv_heads}, {dk}, {dv}]"
            ));
        }
    }
    let scale = match cx.float_or("scale", 0.0) {
        0.0 => 1.0 / (dk as f64).sqrt(),
        s => f64::from(s),
    };
    let params = LinearAttentionParams {
        batch: b,
        len: t,
        q_heads,
        kv_heads,
        key_dim: dk,
        value_dim: dv,
        decay,
        beta_heads,
        scale,
    };
    Ok((elem, params))
}

impl OpRule for LinearAttentionRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (elem, p) = linear_attention_plan(cx)?;
        Ok(vec![
            TensorType::new(elem, vec![p.batch, p.len, p.q_heads * p.value_dim]),
            TensorType::new(elem, vec![p.batch, p.kv_heads, p.key_dim, p.value_dim]),
        ])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        if !has_output(cx, 1) {
            return unsupported("LinearAttention without its present_state output");
        }
        let (elem, params) = linear_attention_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(LinearAttentionKernel { elem, params })))
    }
}

struct LinearAttentionKernel {
    elem: ElemType,
    params: LinearAttentionParams,
}

fn run_linear_attention<T>(
    k: &LinearAttentionKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult
where
    T: Real + HostElem,
    T::Acc: HostElem,
{
    let x = rt_att::LinearAttentionInputs {
        query: host_in::<T>(inputs, 0)?,
        key: host_in::<T>(inputs, 1)?,
        value: host_in::<T>(inputs, 2)?,
        past_state: host_opt::<T>(inputs, 3)?,
        decay: host_opt::<T>(inputs, 4)?,
        beta: host_opt::<T>(inputs, 5)?,
    };
    let [y, present, scratch] = outputs else { return Err(wrong_buffer()) };
    let y = y.get_mut::<T>().ok_or(wrong_buffer())?;
    let present = present.get_mut::<T>().ok_or(wrong_buffer())?;
    let scratch = scratch.get_mut::<T::Acc>().ok_or(wrong_buffer())?;
    rt_att::linear_attention(&k.params, &x, y, present, scratch)?;
    Ok(())
}

impl Kernel for LinearAttentionKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_real_type!(self.elem, run_linear_attention(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.params;
        let n = |v: usize| lit::usize_lit(v);
        let (b, t, hq, hk, dk, dv, bh) = (
            n(p.batch),
            n(p.len),
            n(p.q_heads),
            n(p.kv_heads),
            n(p.key_dim),
            n(p.value_dim),
            n(p.beta_heads),
        );
        let decay = match p.decay {
            Decay::None => quote!(#rt::attention::Decay::None),
            Decay::PerHead => quote!(#rt::attention::Decay::PerHead),
            Decay::PerKey => quote!(#rt::attention::Decay::PerKey),
        };
        let scale = lit::f64_lit(p.scale);
        let i = &io.inputs;
        let (q, k, v) = (&i[0], &i[1], &i[2]);
        let (ps, g, be) = (opt_tokens(i.get(3)), opt_tokens(i.get(4)), opt_tokens(i.get(5)));
        let y = &io.outputs[0];
        let present = io.outputs.get(1).cloned().flatten().unwrap_or_else(|| quote!(&mut []));
        let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
        quote! {
            #rt::attention::linear_attention(
                &#rt::attention::LinearAttentionParams {
                    batch: #b, len: #t, q_heads: #hq, kv_heads: #hk, key_dim: #dk,
                    value_dim: #dv, decay: #decay, beta_heads: #bh, scale: #scale,
                },
                &#rt::attention::LinearAttentionInputs {
                    query: #q, key: #k, value: #v, past_state: #ps, decay: #g, beta: #be,
                },
                #y, #present, #scratch,
            )?;
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        let n = rt_att::linear_attention_scratch_len(&self.params)?;
        Some(TensorType::new(acc_elem(self.elem), vec![n.max(1)]))
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported};

    #[test]
    fn attention_shapes() {
        // 4-D, 4 query heads over 2 key/value heads, a 2-key cache.
        let a = run(
            24,
            "g (float[2,4,3,8] q, float[2,2,5,8] k, float[2,2,5,6] v, bool[3,7] m,
                float[2,2,2,8] pk, float[2,2,2,6] pv)
              => (float[2,4,3,6] y, float[2,2,7,8] ok, float[2,2,7,6] ov, float[2,4,3,7] qk) {
                y, ok, ov, qk = Attention <is_causal: int = 1> (q, k, v, m, pk, pv)
            }",
        );
        assert_eq!(
            types(&a),
            [
                ty("float[2, 4, 3, 6]"),
                ty("float[2, 2, 7, 8]"),
                ty("float[2, 2, 7, 6]"),
                ty("float[2, 4, 3, 7]")
            ]
        );
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        // 3-D: hidden sizes split by the head attributes.
        let a = run(
            23,
            "g (float16[1,3,12] q, float16[1,5,4] k, float16[1,5,10] v) => (float16[1,3,30] y) {
                y = Attention <q_num_heads: int = 3, kv_num_heads: int = 1> (q, k, v)
            }",
        );
        assert_eq!(types(&a), [ty("float16[1, 3, 30]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
    }

    /// Analyses `graph` in a model importing `ai.onnx.preview` too.
    fn run_preview(graph: &str) -> crate::generate::Analysis {
        let src = format!(
            "<ir_version: 10, opset_import: [\"\" : 22, \"ai.onnx.preview\" : 1]>\n{graph}"
        );
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
        crate::generate::analyze(&model, &crate::generate::Options::default())
            .expect("test model is valid")
    }

    #[test]
    fn flex_attention_modifier_bodies() {
        let a = run_preview(
            "g (float16[1,2,3,4] q, float16[1,2,5,4] k, float16[1,2,5,6] v) => (float16[1,2,3,6] y) {
                y = ai.onnx.preview.FlexAttention (q, k, v)
                    <score_mod: graph = sm (float[B,H,L,S] s) => (float[B,H,L,S] o) <float c = {2}> {
                        o = Mul (s, c)
                    }>
            }",
        );
        assert_eq!(types(&a), [ty("float16[1, 2, 3, 6]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        // A body whose output is not the scores' type is refused, naming it.
        let a = run_preview(
            "g (float[1,2,3,4] q, float[1,2,5,4] k, float[1,2,5,6] v) => (float[1,2,3,6] y) {
                y = ai.onnx.preview.FlexAttention (q, k, v)
                    <prob_mod: graph = pm (float[B,H,L,S] p) => (double[B,H,L,S] o) {
                        o = Cast <to: int = 11> (p)
                    }>
            }",
        );
        let e = errors(&a);
        assert!(
            e.iter().any(|m| m.contains("prob_mod must produce one float[1, 2, 3, 5]")),
            "{e:?}"
        );
    }

    #[test]
    fn attention_errors_and_limits() {
        let a = run(
            23,
            "g (float[1,3,2,4] q, float[1,2,2,4] k, float[1,2,2,4] v) => (float[1,3,2,4] y) {
                y = Attention (q, k, v)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("not a multiple")), "{:?}", errors(&a));
        let a = run(
            23,
            "g (float[1,1,2,4] q, float[1,1,2,4] k, float[1,1,2,4] v, int32[2,2] m)
              => (float[1,1,2,4] y) {
                y = Attention (q, k, v, m)
            }",
        );
        assert!(unsupported(&a).iter().any(|u| u.contains("int32")), "{:?}", unsupported(&a));
        let a = run(
            23,
            "g (float[1,4,8] q, float[1,4,8] k, float[1,4,8] v) => (float[1,4,8] y) {
                y = Attention (q, k, v)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("q_num_heads")), "{:?}", errors(&a));
        // The mask may not cover more keys than K has.
        let a = run(
            23,
            "g (float[1,1,2,4] q, float[1,1,2,4] k, float[1,1,2,4] v, float[2,3] m)
              => (float[1,1,2,4] y) {
                y = Attention (q, k, v, m)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("covers 3 keys")), "{:?}", errors(&a));
    }

    #[test]
    fn rotary_swiglu_conv_linear_shapes() {
        let a = run(
            28,
            "g (float[2,3,32] x, float[50,4] c, float[50,4] s, int64[2,3] p, float[2,4] a,
                float[2,4] b, float[2,4,8] i, float[4,1,3] w)
              => (float[2,3,32] r, float[2,4] y, float[2,4,8] o, float[2,4,2] st) {
                r = RotaryEmbedding <num_heads: int = 4> (x, c, s, p)
                y = SwiGLU <alpha: float = 1.5> (a, b)
                o, st = CausalConvWithState <activation: string = \"silu\"> (i, w)
            }",
        );
        assert_eq!(
            types(&a),
            [ty("float[2, 3, 32]"), ty("float[2, 4]"), ty("float[2, 4, 8]"), ty("float[2, 4, 2]")]
        );
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        let a = run(
            27,
            "g (float[2,4,64] q, float[2,4,32] k, float[2,4,32] v, float[2,4,4] d, float[2,4,1] b)
              => (float[2,4,64] o, float[2,4,8,8] s) {
                o, s = LinearAttention <q_num_heads: int = 8, kv_num_heads: int = 4> (q, k, v, , d, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 4, 64]"), ty("float[2, 4, 8, 8]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
    }

    #[test]
    fn rotary_swiglu_linear_errors() {
        let a = run(
            23,
            "g (float[1,1,2,6] x, float[4,2] c, float[4,2] s, int64[1,2] p) => (float[1,1,2,6] r) {
                r = RotaryEmbedding (x, c, s, p)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("cos_cache")), "{:?}", errors(&a));
        let a = run(
            28,
            "g (float[2,4] a, float[4,2] b) => (float[2,4] y) {
                y = SwiGLU (a, b)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("same shape")), "{:?}", errors(&a));
        let a = run(
            27,
            "g (float[1,2,8] q, float[1,2,8] k, float[1,2,8] v) => (float[1,2,8] o, float[1,2,4,4] s) {
                o, s = LinearAttention <q_num_heads: int = 2, kv_num_heads: int = 2> (q, k, v)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("needs decay")), "{:?}", errors(&a));
    }
}
