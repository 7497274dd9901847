//! `RotaryEmbedding`: rotates (part of) each head by its position's
//! cached cosines and sines, interleaved or in halves.

use super::{
    heads_attr, host_in, host_opt, opt_tokens, real_input, same_elem, split_heads, wrong_buffer,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
};
use onnx_codegen_runtime::attention::{self as rt_att, Real, RotaryParams};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct RotaryRule;

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
