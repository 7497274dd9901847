//! `CausalConvWithState`: a depthwise causal 1-D convolution that carries
//! its last `k - 1` inputs from one call to the next, with an optional
//! SiLU.

use super::{has_output, host_in, host_opt, opt_tokens, real_input, same_elem, wrong_buffer};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
};
use onnx_codegen_runtime::attention::{self as rt_att, CausalConvParams, Real};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct CausalConvRule;

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
