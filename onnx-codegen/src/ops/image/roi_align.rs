//! `RoiAlign`: each region of interest sampled bilinearly and pooled
//! (average or max) to a fixed output size.

use super::host;
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid,
};
use onnx_codegen_runtime::image::{self as rt_image, Sample};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct RoiAlignRule;

struct RoiNode {
    elem: ElemType,
    params: rt_image::RoiAlignParams,
}

fn read_roi_align(cx: &NodeCx<'_>) -> OpResult<RoiNode> {
    let (x, rois, idx) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("RoiAlign: X must be a float tensor, not {}", x.elem));
    }
    let input: [usize; 4] = x.dims.as_slice().try_into().map_err(|_| {
        OpError::Invalid(format!("RoiAlign: X has shape {:?}; expected rank 4", x.dims))
    })?;
    let n = match (rois.dims.as_slice(), idx.dims.as_slice()) {
        ([n, 4], [m]) if n == m => *n,
        _ => {
            return invalid(format!(
                "RoiAlign: rois {:?} and batch_indices {:?} must be [R, 4] and [R]",
                rois.dims, idx.dims
            ));
        }
    };
    if rois.elem != x.elem || idx.elem != ElemType::Int64 {
        return invalid("RoiAlign: rois must have X's type and batch_indices must be int64");
    }
    let positive = |name: &str| -> OpResult<usize> {
        match cx.int_or(name, 1) {
            v if v > 0 => Ok(v as usize),
            v => invalid(format!("RoiAlign: {name} {v} must be positive")),
        }
    };
    let (oh, ow) = (positive("output_height")?, positive("output_width")?);
    let sampling = cx.int_or("sampling_ratio", 0);
    if sampling < 0 {
        return invalid(format!("RoiAlign: sampling_ratio {sampling} is negative"));
    }
    let max = match cx.string_or("mode", "avg").as_str() {
        "avg" => false,
        "max" => true,
        other => return invalid(format!("RoiAlign: unknown mode '{other}'")),
    };
    let default_coord = if cx.version() < 16 { "output_half_pixel" } else { "half_pixel" };
    let half_pixel = match cx.string_or("coordinate_transformation_mode", default_coord).as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return invalid(format!("RoiAlign: unknown coordinate_transformation_mode '{other}'"));
        }
    };
    Ok(RoiNode {
        elem: x.elem,
        params: rt_image::RoiAlignParams {
            input,
            output: [n, input[1], oh, ow],
            max,
            half_pixel,
            sampling_ratio: sampling as usize,
            spatial_scale: f64::from(cx.float_or("spatial_scale", 1.0)),
        },
    })
}

impl OpRule for RoiAlignRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_roi_align(cx)?;
        Ok(vec![TensorType::new(n.elem, n.params.output.to_vec())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(RoiKernel(read_roi_align(cx)?))))
    }
}

struct RoiKernel(RoiNode);

fn run_roi<T: Sample + HostElem>(
    n: &RoiNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let rois = host::<T>(inputs, Some(1)).ok_or(EvalError::Type(n.elem))?;
    let idx = host::<i64>(inputs, Some(2)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::roi_align(&n.params, x, rois, idx, y)?;
    Ok(())
}

impl Kernel for RoiKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_roi(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0.params;
        let arr = |v: &[usize; 4]| {
            let items = v.iter().map(|&d| lit::usize_lit(d));
            quote!([#(#items),*])
        };
        let (input, output) = (arr(&p.input), arr(&p.output));
        let (max, half, sr) = (p.max, p.half_pixel, lit::usize_lit(p.sampling_ratio));
        let scale = lit::f64_lit(p.spatial_scale);
        let (x, rois, idx, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote! {
            #rt::image::roi_align(
                &#rt::image::RoiAlignParams {
                    input: #input,
                    output: #output,
                    max: #max,
                    half_pixel: #half,
                    sampling_ratio: #sr,
                    spatial_scale: #scale,
                },
                #x, #rois, #idx, #y,
            )?;
        }
    }
}
