//! `FlexAttention` (`ai.onnx.preview`): its `score_mod` / `prob_mod`
//! subgraphs compiled inline, as control-flow bodies are, and run stage by
//! stage over the scores; without them it is `Attention`'s kernel.

use super::sdpa::{AttentionKernel, AttentionPlan, softmax_in_t};
use super::{acc_elem, dims4, has_attr, real_input, same_elem};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use onnx_codegen_runtime::attention::{AttentionParams, AttentionShape};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

pub(super) struct FlexAttentionRule;

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
fn flex_mods(
    cx: &NodeCx<'_>,
    plan: &AttentionPlan,
) -> OpResult<[Option<crate::ops::control::Body>; 2]> {
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
        let body = crate::ops::control::compile(cx, attr, std::slice::from_ref(&scores))?;
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
                .map(crate::ops::control::Body::arena_bytes)
                .max()
                .unwrap_or(0);
            let mut scratch = crate::ops::control::Scratch::new(arena);
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
    score_mod: Option<crate::ops::control::Body>,
    prob_mod: Option<crate::ops::control::Body>,
    /// The bodies' arena, then the two score buffers (`_cf_slot0`, `_cf_slot1`).
    scratch: crate::ops::control::Scratch,
}

impl Kernel for FlexModKernel {
    fn eval(&self, _: &[Option<&HostTensor>], _: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        use crate::ops::control::{bind_all, body_arena, captures, error_tokens};
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
        let stage = |body: &crate::ops::control::Body, cur: usize| {
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

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, ty, types, unsupported};

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
}
