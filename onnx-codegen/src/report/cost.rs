//! Arithmetic cost of one node, estimated from its operator and inferred shapes.
//!
//! MACs (multiply-accumulates) are counted exactly for the operators that are
//! made of them (convolutions, matrix products, recurrent cells); FLOPs count
//! a MAC as two operations and add an estimate of the elementwise work of
//! every other operator (one operation per output element, a few for
//! normalisations). Data movement (Reshape, Transpose, Gather, ...) costs
//! nothing. The figures are for comparing nodes and models, not for timing.

use crate::ir::{AttrValue, Node, TensorType};

/// The estimated cost of one node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Cost {
    /// Multiply-accumulates.
    pub macs: u64,
    /// Floating-point (or integer) operations, a MAC counting as two.
    pub flops: u64,
}

/// The cost of `node` given the inferred type of every value (`None` where
/// inference did not reach). Unknown shapes cost nothing.
pub fn node_cost(node: &Node, types: &[Option<TensorType>]) -> Cost {
    let ty = |i: usize| -> Option<&TensorType> {
        types.get(node.input(i)?.index()).and_then(Option::as_ref)
    };
    let out = |i: usize| -> Option<&TensorType> {
        types.get(node.output(i)?.index()).and_then(Option::as_ref)
    };
    let numel = |t: Option<&TensorType>| t.and_then(TensorType::numel).map_or(0, to_u64);
    let out_numel = numel(out(0));
    let macs =
        match node.op.op_type.as_str() {
            // Each output element takes one filter's worth of MACs: W is
            // [M, C/group, k...], so numel(W)/M per output element.
            "Conv" | "ConvInteger" => per_output_of_filter(out_numel, ty(1)),
            "QLinearConv" => per_output_of_filter(out_numel, ty(3)),
            // Each input element is spread over one filter slice: W is [C, M/group, k...].
            "ConvTranspose" => {
                let x = numel(ty(0));
                ty(1).map_or(0, |w| {
                    let c = w.dims.first().copied().map_or(0, to_u64);
                    numel(Some(w)).checked_div(c).map_or(0, |per| x.saturating_mul(per))
                })
            }
            "MatMul" | "MatMulInteger" | "FusedMatMul" => out_numel
                .saturating_mul(ty(0).and_then(|a| a.dims.last().copied()).map_or(0, to_u64)),
            "QLinearMatMul" => out_numel
                .saturating_mul(ty(0).and_then(|a| a.dims.last().copied()).map_or(0, to_u64)),
            "Gemm" => {
                let trans_a = node.attr_int("transA").unwrap_or(0) != 0;
                let k = ty(0).and_then(|a| if trans_a { a.dims.first() } else { a.dims.get(1) });
                out_numel.saturating_mul(k.copied().map_or(0, to_u64))
            }
            // Every time step multiplies the input by W and the state by R, for
            // every batch entry: numel(W) + numel(R) MACs per (step, batch entry).
            "LSTM" | "GRU" | "RNN" => {
                // X is [seq, batch, input] or, with layout 1, [batch, seq, input].
                let steps_batch = ty(0).map_or(0, |x| {
                    let seq = x.dims.first().copied().unwrap_or(0);
                    let batch = x.dims.get(1).copied().unwrap_or(0);
                    to_u64(seq).saturating_mul(to_u64(batch))
                });
                steps_batch.saturating_mul(numel(ty(1)).saturating_add(numel(ty(2))))
            }
            _ => 0,
        };
    let extra = match node.op.op_type.as_str() {
        "Conv" | "ConvInteger" | "QLinearConv" | "ConvTranspose" | "MatMul" | "MatMulInteger"
        | "QLinearMatMul" | "FusedMatMul" | "Gemm" | "LSTM" | "GRU" | "RNN" => 0,
        op if is_data_movement(op) => 0,
        "MaxPool" | "AveragePool" | "LpPool" => {
            let kernel = match node.attr("kernel_shape") {
                Some(AttrValue::Ints(k)) => k
                    .iter()
                    .try_fold(1u64, |n, &d| n.checked_mul(u64::try_from(d).ok()?))
                    .unwrap_or(0),
                _ => 0,
            };
            out_numel.saturating_mul(kernel)
        }
        "GlobalAveragePool" | "GlobalMaxPool" | "GlobalLpPool" => numel(ty(0)),
        op if op.starts_with("Reduce") || op.starts_with("Arg") => numel(ty(0)),
        "Softmax" | "LogSoftmax" | "Hardmax" => out_numel.saturating_mul(4),
        "BatchNormalization" => out_numel.saturating_mul(2),
        "LayerNormalization"
        | "InstanceNormalization"
        | "GroupNormalization"
        | "LpNormalization"
        | "MeanVarianceNormalization"
        | "SimplifiedLayerNormalization"
        | "RMSNormalization" => out_numel.saturating_mul(5),
        _ => out_numel,
    };
    Cost { macs, flops: macs.saturating_mul(2).saturating_add(extra) }
}

/// Operators that only move or select data.
fn is_data_movement(op: &str) -> bool {
    matches!(
        op,
        "Reshape"
            | "Flatten"
            | "Squeeze"
            | "Unsqueeze"
            | "Transpose"
            | "Concat"
            | "Split"
            | "Slice"
            | "Gather"
            | "GatherElements"
            | "GatherND"
            | "Scatter"
            | "ScatterElements"
            | "ScatterND"
            | "Expand"
            | "Tile"
            | "Pad"
            | "Identity"
            | "Shape"
            | "Size"
            | "Constant"
            | "ConstantOfShape"
            | "Cast"
            | "CastLike"
            | "DepthToSpace"
            | "SpaceToDepth"
            | "Dropout"
            | "Range"
            | "EyeLike"
            | "OneHot"
            | "Compress"
            | "ReverseSequence"
            | "Trilu"
    )
}

fn per_output_of_filter(out_numel: u64, w: Option<&TensorType>) -> u64 {
    let Some(w) = w else { return 0 };
    let m = w.dims.first().copied().map_or(0, to_u64);
    let total = w.numel().map_or(0, to_u64);
    total.checked_div(m).map_or(0, |per| out_numel.saturating_mul(per))
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
