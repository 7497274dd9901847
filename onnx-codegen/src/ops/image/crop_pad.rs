//! `CenterCropPad`: each named axis cropped or padded about its centre to
//! the size the `shape` input gives.

use super::{dim, host, shape_from, supported_elem};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis,
    invalid, unsupported,
};
use onnx_codegen_runtime::image as rt_image;
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct CropPadRule;

struct CropPadNode {
    elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    axes: Vec<usize>,
    index_elem: ElemType,
}

fn read_crop_pad(cx: &NodeCx<'_>) -> OpResult<CropPadNode> {
    let (x, shape) = (cx.input(0)?, cx.input(1)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("CenterCropPad on {} tensors", x.elem));
    }
    if !matches!(shape.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid("CenterCropPad: shape must be int32 or int64");
    }
    let rank = x.dims.len();
    let mut axes = Vec::new();
    for a in cx.ints("axes").unwrap_or_else(|| (0..rank as i64).collect()) {
        let a = axis(a, rank, "CenterCropPad axis")?;
        if axes.contains(&a) {
            return invalid(format!("CenterCropPad: axis {a} appears twice"));
        }
        axes.push(a);
    }
    if shape.dims.len() != 1 || shape.dims[0] != axes.len() {
        return invalid(format!(
            "CenterCropPad: shape has shape {:?}; expected [{}] (one length per axis)",
            shape.dims,
            axes.len()
        ));
    }
    let output = shape_from(cx, 1, "shape", |v| {
        let mut out = x.dims.clone();
        for (&a, &n) in axes.iter().zip(v) {
            out[a] = dim(n, "CenterCropPad length")?;
        }
        Ok(out)
    })?;
    let fits =
        output.len() == rank && (0..rank).all(|d| axes.contains(&d) || output[d] == x.dims[d]);
    if !fits {
        return invalid(format!(
            "CenterCropPad: output shape {output:?} does not fit input shape {:?}",
            x.dims
        ));
    }
    Ok(CropPadNode { elem: x.elem, input: x.dims.clone(), output, axes, index_elem: shape.elem })
}

impl OpRule for CropPadRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_crop_pad(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(CropPadKernel(read_crop_pad(cx)?))))
    }
}

struct CropPadKernel(CropPadNode);

fn run_crop_pad<T: Copy + Default + HostElem>(
    n: &CropPadNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    match n.index_elem {
        ElemType::Int32 => {
            let s = host::<i32>(inputs, Some(1)).ok_or(EvalError::Type(n.index_elem))?;
            rt_image::center_crop_pad(&n.input, &n.output, &n.axes, s, x, y)?
        }
        _ => {
            let s = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(n.index_elem))?;
            rt_image::center_crop_pad(&n.input, &n.output, &n.axes, s, x, y)?
        }
    }
    Ok(())
}

impl Kernel for CropPadKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_crop_pad(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let (input, output, axes) =
            (lit::usizes(&n.input), lit::usizes(&n.output), lit::usizes(&n.axes));
        let (x, s, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::image::center_crop_pad(#input, #output, #axes, #s, #x, #y)?;)
    }
}
