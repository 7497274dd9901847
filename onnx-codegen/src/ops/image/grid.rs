//! `GridSample` (the input sampled where a grid points, by nearest, linear
//! or cubic interpolation) and `AffineGrid` (the sampling grid of an affine
//! transform).

use super::{dim, host, shape_from, supported_elem};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::image::{
    self as rt_image, GridElem, GridMode, GridPadding, GridSampleParams, Sample,
};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct GridSampleRule;

/// A GridSample node, read and checked.
struct GridNode {
    elem: ElemType,
    grid_elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    mode: GridMode,
    padding: GridPadding,
    align_corners: bool,
}

fn read_grid(cx: &NodeCx<'_>) -> OpResult<GridNode> {
    let v = cx.version();
    let (x, g) = (cx.input(0)?, cx.input(1)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("GridSample on {} tensors", x.elem));
    }
    if !matches!(g.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!("GridSample with a {} grid", g.elem));
    }
    let rank = x.dims.len();
    if rank < 3 || (v < 20 && rank != 4) {
        return invalid(format!("GridSample-{v}: the input has rank {rank}"));
    }
    let r = rank - 2;
    if g.dims.len() != rank || g.dims[0] != x.dims[0] || g.dims[rank - 1] != r {
        return invalid(format!(
            "GridSample: the grid has shape {:?}; expected [{}, ..., {r}] of rank {rank}",
            g.dims, x.dims[0]
        ));
    }
    let mode = match cx.string_or("mode", if v < 20 { "bilinear" } else { "linear" }).as_str() {
        "bilinear" if v < 20 => GridMode::Linear,
        "bicubic" if v < 20 => GridMode::Cubic,
        "linear" if v >= 20 => GridMode::Linear,
        "cubic" if v >= 20 => GridMode::Cubic,
        "nearest" => GridMode::Nearest,
        other => return invalid(format!("GridSample-{v}: unknown mode '{other}'")),
    };
    if mode == GridMode::Cubic && r != 2 {
        return invalid("GridSample: cubic mode takes 4-D inputs only");
    }
    let padding = match cx.string_or("padding_mode", "zeros").as_str() {
        "zeros" => GridPadding::Zeros,
        "border" => GridPadding::Border,
        "reflection" => GridPadding::Reflection,
        other => return invalid(format!("GridSample: unknown padding_mode '{other}'")),
    };
    let mut output = x.dims[..2].to_vec();
    output.extend_from_slice(&g.dims[1..rank - 1]);
    Ok(GridNode {
        elem: x.elem,
        grid_elem: g.elem,
        input: x.dims.clone(),
        output,
        mode,
        padding,
        align_corners: cx.int_or("align_corners", 0) != 0,
    })
}

impl OpRule for GridSampleRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_grid(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(GridKernel(read_grid(cx)?))))
    }
}

struct GridKernel(GridNode);

fn run_grid_with<T: Sample + HostElem, G: GridElem + HostElem>(
    n: &GridNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let g = host::<G>(inputs, Some(1)).ok_or(EvalError::Type(n.grid_elem))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    let p = GridSampleParams {
        input: &n.input,
        output: &n.output,
        mode: n.mode,
        padding: n.padding,
        align_corners: n.align_corners,
    };
    rt_image::grid_sample(&p, x, g, y)?;
    Ok(())
}

fn run_grid<T: Sample + HostElem>(
    n: &GridNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    match n.grid_elem {
        ElemType::Double => run_grid_with::<T, f64>(n, inputs, outputs),
        _ => run_grid_with::<T, f32>(n, inputs, outputs),
    }
}

impl Kernel for GridKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_grid(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let m = quote!(#rt::image);
        let mode = match n.mode {
            GridMode::Nearest => quote!(Nearest),
            GridMode::Linear => quote!(Linear),
            GridMode::Cubic => quote!(Cubic),
        };
        let padding = match n.padding {
            GridPadding::Zeros => quote!(Zeros),
            GridPadding::Border => quote!(Border),
            GridPadding::Reflection => quote!(Reflection),
        };
        let (input, output, align) =
            (lit::usizes(&n.input), lit::usizes(&n.output), n.align_corners);
        let (x, g, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote! {
            #m::grid_sample(
                &#m::GridSampleParams {
                    input: #input,
                    output: #output,
                    mode: #m::GridMode::#mode,
                    padding: #m::GridPadding::#padding,
                    align_corners: #align,
                },
                #x, #g, #y,
            )?;
        }
    }
}

pub(super) struct AffineGridRule;

struct AffineNode {
    elem: ElemType,
    output: Vec<usize>,
    align_corners: bool,
}

fn read_affine(cx: &NodeCx<'_>) -> OpResult<AffineNode> {
    let (theta, size) = (cx.input(0)?, cx.input(1)?);
    if !matches!(
        theta.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("AffineGrid: theta must be a float tensor, not {}", theta.elem));
    }
    let r = match theta.dims.as_slice() {
        [_, 2, 3] => 2,
        [_, 3, 4] => 3,
        d => {
            return invalid(format!(
                "AffineGrid: theta has shape {d:?}; expected [N, 2, 3] or [N, 3, 4]"
            ));
        }
    };
    if size.elem != ElemType::Int64 || size.dims != [r + 2] {
        return invalid(format!("AffineGrid: size must be an int64 tensor of shape [{}]", r + 2));
    }
    let output = shape_from(cx, 1, "size", |v| {
        let mut out = vec![dim(v[0], "AffineGrid batch")?];
        for &d in &v[2..] {
            out.push(dim(d, "AffineGrid size")?);
        }
        out.push(r);
        Ok(out)
    })?;
    if output.len() != r + 2 || output[0] != theta.dims[0] || output[r + 1] != r {
        return invalid(format!(
            "AffineGrid: output shape {output:?} does not fit theta {:?}",
            theta.dims
        ));
    }
    Ok(AffineNode { elem: theta.elem, output, align_corners: cx.int_or("align_corners", 0) != 0 })
}

impl OpRule for AffineGridRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_affine(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(AffineKernel(read_affine(cx)?))))
    }
}

struct AffineKernel(AffineNode);

fn run_affine<T: Sample + HostElem>(
    n: &AffineNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let theta = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let size = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::affine_grid(&n.output, n.align_corners, theta, size, y)?;
    Ok(())
}

impl Kernel for AffineKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_affine(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (output, align) = (lit::usizes(&self.0.output), self.0.align_corners);
        let (theta, size, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::image::affine_grid(#output, #align, #theta, #size, #y)?;)
    }
}
