//! `Col2Im`: sliding blocks (the columns of an im2col) summed back into an
//! image, with dilations, strides and pads.

use super::{declared, dim, host, supported_elem};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::image::{self as rt_image, Sample};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct Col2ImRule;

struct Col2ImNode {
    elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    dilations: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
}

fn read_col2im(cx: &NodeCx<'_>) -> OpResult<Col2ImNode> {
    let (x, image, block) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("Col2Im on {} tensors", x.elem));
    }
    if x.dims.len() != 3 {
        return invalid(format!("Col2Im: the input has shape {:?}; expected rank 3", x.dims));
    }
    if image.elem != ElemType::Int64 || block.elem != ElemType::Int64 {
        return invalid("Col2Im: image_shape and block_shape must be int64");
    }
    let r = match (image.dims.as_slice(), block.dims.as_slice()) {
        ([a], [b]) if a == b && *a > 0 => *a,
        _ => {
            return invalid(format!(
                "Col2Im: image_shape {:?} and block_shape {:?} must be 1-D of one length",
                image.dims, block.dims
            ));
        }
    };
    let list = |name: &str, len: usize, default: usize| -> OpResult<Vec<usize>> {
        match cx.ints(name) {
            Some(v) if v.len() == len => v.iter().map(|&e| dim(e, name)).collect(),
            Some(v) => invalid(format!("Col2Im: {name} has {} values; expected {len}", v.len())),
            None => Ok(vec![default; len]),
        }
    };
    let dilations = list("dilations", r, 1)?;
    let strides = list("strides", r, 1)?;
    let pads = list("pads", 2 * r, 0)?;
    if dilations.contains(&0) || strides.contains(&0) {
        return invalid("Col2Im: dilations and strides must be positive");
    }
    let output = match (cx.constant(1), cx.constant(2)) {
        (Some(_), Some(_)) => {
            let image = cx.const_ints(1, "image_shape")?;
            let block = cx.const_ints(2, "block_shape")?;
            let mut k = 1usize;
            for &b in &block {
                k = k.saturating_mul(dim(b, "block_shape entry")?);
            }
            if k == 0 || x.dims[1] % k != 0 {
                return invalid(format!(
                    "Col2Im: input dimension 1 ({}) is not a multiple of the block size {k}",
                    x.dims[1]
                ));
            }
            let mut out = vec![x.dims[0], x.dims[1] / k];
            for &i in &image {
                out.push(dim(i, "image_shape entry")?);
            }
            out
        }
        _ => declared(cx, "image_shape or block_shape")?,
    };
    if output.len() != r + 2 || output[0] != x.dims[0] {
        return invalid(format!("Col2Im: output shape {output:?} does not fit the input"));
    }
    Ok(Col2ImNode { elem: x.elem, input: x.dims.clone(), output, dilations, strides, pads })
}

impl OpRule for Col2ImRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_col2im(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(Col2ImKernel(read_col2im(cx)?))))
    }
}

struct Col2ImKernel(Col2ImNode);

fn run_col2im<T: Sample + HostElem>(
    n: &Col2ImNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let image = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(ElemType::Int64))?;
    let block = host::<i64>(inputs, Some(2)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::col2im(&n.input, &n.output, image, block, &n.dilations, &n.strides, &n.pads, x, y)?;
    Ok(())
}

impl Kernel for Col2ImKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_col2im(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let (input, output) = (lit::usizes(&n.input), lit::usizes(&n.output));
        let (d, s, p) = (lit::usizes(&n.dilations), lit::usizes(&n.strides), lit::usizes(&n.pads));
        let (x, image, block, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote!(#rt::image::col2im(#input, #output, #image, #block, #d, #s, #p, #x, #y)?;)
    }
}
