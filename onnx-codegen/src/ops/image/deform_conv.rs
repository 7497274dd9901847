//! `DeformConv`: a convolution whose kernel taps are moved by per-position
//! offsets (and weighted by an optional mask), sampled bilinearly.

use super::{dim, host};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use onnx_codegen_runtime::image::{self as rt_image, Sample};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct DeformConvRule;

struct DeformNode {
    elem: ElemType,
    params: rt_image::DeformConvParams,
    has_bias: bool,
    has_mask: bool,
}

fn read_deform(cx: &NodeCx<'_>) -> OpResult<DeformNode> {
    let (x, w, off) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("DeformConv: X must be a float tensor, not {}", x.elem));
    }
    if x.dims.len() != 4 {
        return unsupported(format!(
            "DeformConv on a rank-{} input (only 2-D images)",
            x.dims.len()
        ));
    }
    let four = |t: &TensorType, name: &str| -> OpResult<[usize; 4]> {
        if t.elem != x.elem {
            return invalid(format!("DeformConv: {name} must have X's type {}", x.elem));
        }
        t.dims.as_slice().try_into().map_err(|_| {
            OpError::Invalid(format!("DeformConv: {name} has shape {:?}; expected rank 4", t.dims))
        })
    };
    let input = four(x, "X")?;
    let weight = four(w, "W")?;
    let offset = four(off, "offset")?;
    let pair = |name: &str, default: usize| -> OpResult<[usize; 2]> {
        match cx.ints(name) {
            Some(v) => match v.as_slice() {
                [a, b] => Ok([dim(*a, name)?, dim(*b, name)?]),
                _ => invalid(format!("DeformConv: {name} must have 2 values")),
            },
            None => Ok([default; 2]),
        }
    };
    let strides = pair("strides", 1)?;
    let dilations = pair("dilations", 1)?;
    let kernel = match cx.ints("kernel_shape") {
        Some(_) => pair("kernel_shape", 1)?,
        None => [weight[2], weight[3]],
    };
    if kernel != [weight[2], weight[3]] {
        return invalid(format!("DeformConv: kernel_shape {kernel:?} does not match W {weight:?}"));
    }
    let pads: [usize; 4] = match cx.ints("pads") {
        Some(v) if v.len() == 4 => {
            [dim(v[0], "pads")?, dim(v[1], "pads")?, dim(v[2], "pads")?, dim(v[3], "pads")?]
        }
        Some(_) => return invalid("DeformConv: pads must have 4 values"),
        None => [0; 4],
    };
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return invalid("DeformConv: strides, dilations and kernel_shape must be positive");
    }
    let group = cx.int_or("group", 1);
    let offset_group = cx.int_or("offset_group", 1);
    if group < 1 || offset_group < 1 {
        return invalid("DeformConv: group and offset_group must be positive");
    }
    let (group, offset_group) = (group as usize, offset_group as usize);
    let [n, c, h, wd] = input;
    if weight[1].checked_mul(group) != Some(c) || weight[0] % group != 0 || c % offset_group != 0 {
        return invalid(format!(
            "DeformConv: X {input:?}, W {weight:?}, group {group} and offset_group {offset_group} do not fit"
        ));
    }
    let out_len = |len: usize, k: usize, d: usize, p: usize, s: usize| -> OpResult<usize> {
        let span = (k - 1) * d + 1;
        match (len + p).checked_sub(span) {
            Some(v) => Ok(v / s + 1),
            None => invalid("DeformConv: the kernel is larger than the padded input"),
        }
    };
    let oh = out_len(h, kernel[0], dilations[0], pads[0] + pads[2], strides[0])?;
    let ow = out_len(wd, kernel[1], dilations[1], pads[1] + pads[3], strides[1])?;
    let taps = kernel[0] * kernel[1];
    if offset != [n, offset_group * taps * 2, oh, ow] {
        return invalid(format!(
            "DeformConv: offset has shape {offset:?}; expected {:?}",
            [n, offset_group * taps * 2, oh, ow]
        ));
    }
    let has_bias = match cx.opt_input(3) {
        Some(b) if b.dims != [weight[0]] || b.elem != x.elem => {
            return invalid(format!(
                "DeformConv: B has shape {:?}; expected [{}]",
                b.dims, weight[0]
            ));
        }
        b => b.is_some(),
    };
    let has_mask = match cx.opt_input(4) {
        Some(m) if m.dims != [n, offset_group * taps, oh, ow] || m.elem != x.elem => {
            return invalid(format!("DeformConv: mask has shape {:?}", m.dims));
        }
        m => m.is_some(),
    };
    Ok(DeformNode {
        elem: x.elem,
        params: rt_image::DeformConvParams {
            input,
            weight,
            output: [n, weight[0], oh, ow],
            group,
            offset_group,
            strides,
            pads,
            dilations,
        },
        has_bias,
        has_mask,
    })
}

impl OpRule for DeformConvRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_deform(cx)?;
        Ok(vec![TensorType::new(n.elem, n.params.output.to_vec())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(DeformKernel(read_deform(cx)?))))
    }
}

struct DeformKernel(DeformNode);

fn run_deform<T: Sample + HostElem>(
    n: &DeformNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let get = |i: usize| host::<T>(inputs, Some(i)).ok_or(EvalError::Type(n.elem));
    let (x, w, off) = (get(0)?, get(1)?, get(2)?);
    let bias = if n.has_bias { Some(get(3)?) } else { None };
    let mask = if n.has_mask { Some(get(4)?) } else { None };
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::deform_conv(&n.params, x, w, off, bias, mask, y)?;
    Ok(())
}

impl Kernel for DeformKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_deform(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0.params;
        let arr = |v: &[usize]| {
            let items = v.iter().map(|&d| lit::usize_lit(d));
            quote!([#(#items),*])
        };
        let (input, weight, output) = (arr(&p.input), arr(&p.weight), arr(&p.output));
        let (strides, pads, dilations) = (arr(&p.strides), arr(&p.pads), arr(&p.dilations));
        let (group, og) = (lit::usize_lit(p.group), lit::usize_lit(p.offset_group));
        let opt = |i: usize, has: bool| match io.inputs.get(i).cloned().flatten() {
            Some(e) if has => quote!(Some(#e)),
            _ => quote!(None),
        };
        let (bias, mask) = (opt(3, self.0.has_bias), opt(4, self.0.has_mask));
        let (x, w, off, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote! {
            #rt::image::deform_conv(
                &#rt::image::DeformConvParams {
                    input: #input,
                    weight: #weight,
                    output: #output,
                    group: #group,
                    offset_group: #og,
                    strides: #strides,
                    pads: #pads,
                    dilations: #dilations,
                },
                #x, #w, #off, #bias, #mask, #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types};

    #[test]
    fn deform_conv_infers_and_checks_offsets() {
        let a = run(
            19,
            "g (float[1,2,5,5] x, float[4,1,3,3] w, float[1,36,3,3] off) => (float[1,4,3,3] y) {
                y = DeformConv <group: int = 2, offset_group: int = 2> (x, w, off)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 4, 3, 3]")]);
        let a = run(
            19,
            "g (float[1,2,5,5] x, float[4,1,3,3] w, float[1,18,3,3] off) => (float[1,4,3,3] y) {
                y = DeformConv <group: int = 2, offset_group: int = 2> (x, w, off)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("offset has shape")), "{:?}", errors(&a));
    }
}
