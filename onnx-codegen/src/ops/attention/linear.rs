//! `LinearAttention`: attention through a recurrent `[key, value]` state
//! per head, updated by the linear, gated, delta or gated-delta rule.

use super::{
    acc_elem, has_output, heads_attr, host_in, host_opt, opt_tokens, real_input, same_elem,
    split_heads, wrong_buffer,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::attention::{self as rt_att, Decay, LinearAttentionParams, Real};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct LinearAttentionRule;

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
