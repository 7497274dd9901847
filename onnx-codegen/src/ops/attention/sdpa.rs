//! `Attention` (opsets 23, 24, 25): scaled dot-product attention over
//! 3-D or 4-D inputs, with grouped key/value heads, a past key/value cache,
//! a boolean or float mask, causal and windowed masking, a soft cap and the
//! optional `qk_matmul_output`. `FlexAttention` without modifier bodies
//! runs on the same kernel.

use super::{
    acc_elem, dims4, has_attr, has_output, heads_attr, host_in, host_opt, is_real, op_name,
    opt_tokens, real_input, same_elem, split_heads, wrong_buffer,
};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use crate::ops::host::{HostData, HostElem};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use onnx_codegen_runtime::attention::{
    self as rt_att, AttentionInputs, AttentionOutputs, AttentionParams, AttentionShape, MaskLayout,
    MaskValue, Real,
};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct AttentionRule;

pub(super) struct AttentionPlan {
    pub(super) elem: ElemType,
    pub(super) params: AttentionParams,
    pub(super) mask_elem: Option<ElemType>,
    pub(super) outputs: Vec<TensorType>,
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
pub(super) fn softmax_in_t(cx: &NodeCx<'_>, elem: ElemType) -> OpResult<bool> {
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

pub(super) struct AttentionKernel {
    pub(super) elem: ElemType,
    pub(super) params: AttentionParams,
    pub(super) mask_elem: Option<ElemType>,
    /// Which of present_key, present_value, qk_matmul_output are wanted.
    pub(super) present: [bool; 3],
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
}
