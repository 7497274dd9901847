//! Image operators, one file each with its rule, kernel and emission:
//! `Resize` and `Upsample` (`resize.rs`), `GridSample` and `AffineGrid`
//! (`grid.rs`), `CenterCropPad` (`crop_pad.rs`), `Col2Im` (`col2im.rs`),
//! `RoiAlign` (`roi_align.rs`) and `DeformConv` (`deform_conv.rs`).
//!
//! This module registers them and holds what they share: the element types
//! the kernels take, and output shapes that follow from an input's values
//! or, when those come only at run time, from the model's declaration.

use super::host::HostElem;
use super::{HostTensor, NodeCx, OpError, OpResult, OpRule, unsupported};
use crate::ir::ElemType;

/// Runs `$f::<T>(args)` for every element type the image kernels take.
macro_rules! by_sample_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float => $f::<f32>($($arg),*),
            ElemType::Double => $f::<f64>($($arg),*),
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            ElemType::Int8 => $f::<i8>($($arg),*),
            ElemType::Int16 => $f::<i16>($($arg),*),
            ElemType::Int32 => $f::<i32>($($arg),*),
            ElemType::Int64 => $f::<i64>($($arg),*),
            ElemType::Uint8 => $f::<u8>($($arg),*),
            ElemType::Uint16 => $f::<u16>($($arg),*),
            ElemType::Uint32 => $f::<u32>($($arg),*),
            ElemType::Uint64 => $f::<u64>($($arg),*),
            other => Err(EvalError::Type(other)),
        }
    };
}

mod col2im;
mod crop_pad;
mod deform_conv;
mod grid;
mod resize;
mod roi_align;

use col2im::Col2ImRule;
use crop_pad::CropPadRule;
use deform_conv::DeformConvRule;
use grid::{AffineGridRule, GridSampleRule};
use resize::ResizeRule;
use roi_align::RoiAlignRule;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Resize" | "Upsample" => Some(&ResizeRule),
        "GridSample" => Some(&GridSampleRule),
        "CenterCropPad" => Some(&CropPadRule),
        "Col2Im" => Some(&Col2ImRule),
        "AffineGrid" => Some(&AffineGridRule),
        "RoiAlign" => Some(&RoiAlignRule),
        "DeformConv" => Some(&DeformConvRule),
        _ => None,
    }
}

fn supported_elem(elem: ElemType) -> bool {
    super::is_num(elem) || matches!(elem, ElemType::Float16 | ElemType::Bfloat16)
}

fn host<'a, T: HostElem>(inputs: &[Option<&'a HostTensor>], i: Option<usize>) -> Option<&'a [T]> {
    inputs.get(i?).copied().flatten().and_then(|t| t.get::<T>())
}

/// The output type when it follows from integer input `i` (`compute` turns
/// its values into dims) or, when those are known only at run time, the
/// declared output, checked by `check`.
fn shape_from(
    cx: &NodeCx<'_>,
    i: usize,
    what: &str,
    compute: impl Fn(&[i64]) -> OpResult<Vec<usize>>,
) -> OpResult<Vec<usize>> {
    if cx.constant(i).is_some() {
        return compute(&cx.const_ints(i, what)?);
    }
    declared(cx, what)
}

/// The declared type of output 0, for a shape that depends on `what`, whose
/// values are known only at run time.
fn declared(cx: &NodeCx<'_>, what: &str) -> OpResult<Vec<usize>> {
    let op = &cx.node.op.op_type;
    match cx.declared_output(0) {
        Some(d) => Ok(d.dims.clone()),
        None => unsupported(format!(
            "{op}: {what} is known only at run time and the model declares no output shape"
        )),
    }
}

fn dim(v: i64, what: &str) -> OpResult<usize> {
    usize::try_from(v).map_err(|_| OpError::Invalid(format!("{what} {v} is negative")))
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types};

    #[test]
    fn grid_and_friends_infer() {
        let a = run(
            22,
            "g (float[2,3,5,6] x, float[2,4,7,2] grid, double[2,1,3,4,5] v, double[2,6,7,8,3] vg) => (float[2,3,4,7] y, double[2,1,6,7,8] w) {
                y = GridSample <mode: string = \"cubic\"> (x, grid)
                w = GridSample <mode: string = \"nearest\", padding_mode: string = \"reflection\"> (v, vg)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4, 7]"), ty("double[2, 1, 6, 7, 8]")]);
        let a = run(
            22,
            "g (float[2,3,5,6] x, float[2,4,7,3] grid) => (float[2,3,4,7] y) { y = GridSample (x, grid) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("grid has shape")), "{:?}", errors(&a));
        let a = run(
            20,
            "g (float[1,4,4] x, float[2,2,3] t, float[1,1,4,4] r, int64[1] b) => (float[1,1,3,3] y, float[2,4,5,2] grid, float[1,1,2,2] c, float[1,1,2,3] p) <int64[2] im = {3, 3}, int64[2] bl = {2, 2}, int64[4] sz = {2, 1, 4, 5}, int64[2] cs = {2, 3}> {
                y = Col2Im (x, im, bl)
                grid = AffineGrid (t, sz)
                c = RoiAlign <output_height: int = 2, output_width: int = 2> (r, t2, b)
                p = CenterCropPad <axes: ints = [2, 3]> (r, cs)
                t2 = Constant <value: tensor = float[1,4] {0, 0, 2, 2}> ()
            }",
        );
        assert_eq!(
            types(&a),
            [
                ty("float[1, 1, 3, 3]"),
                ty("float[2, 4, 5, 2]"),
                ty("float[1, 1, 2, 2]"),
                ty("float[1, 1, 2, 3]")
            ]
        );
        // The sliding blocks of a 3x3 image and a 2x2 block: input dim 1 must
        // be a multiple of 4.
        let a = run(
            18,
            "g (float[1,6,4] x) => (float[1,1,3,3] y) <int64[2] im = {3, 3}, int64[2] bl = {2, 2}> { y = Col2Im (x, im, bl) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("multiple")), "{:?}", errors(&a));
    }
}
