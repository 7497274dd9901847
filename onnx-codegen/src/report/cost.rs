//! Arithmetic cost of one node, estimated from its operator and inferred shapes.
//!
//! MACs (multiply-accumulates) are counted exactly by the rules of the
//! operators that are made of them (convolutions, matrix products, recurrent
//! cells: [`crate::ops::OpRule::macs`]); FLOPs count
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
    let numel = crate::ops::numel_u64;
    let out_numel = numel(out(0));
    let inputs: Vec<Option<&TensorType>> = (0..node.inputs.len()).map(ty).collect();
    let outputs: Vec<Option<&TensorType>> = (0..node.outputs.len()).map(out).collect();
    let rule = crate::ops::rule_for(node);
    let macs = rule.and_then(|r| r.macs(node, &inputs, &outputs));
    let extra = match node.op.op_type.as_str() {
        _ if macs.is_some() => 0,
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
    let macs = macs.unwrap_or(0);
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

#[cfg(test)]
mod tests {
    use crate::ops::testing::run;

    /// The MACs of each node of `graph` (opset 14), in order.
    fn macs(graph: &str) -> Vec<(String, u64)> {
        let a = run(14, graph);
        let g = &a.model().graph;
        g.nodes()
            .map(|(_, n)| (n.op.op_type.clone(), super::node_cost(n, &a.inferred.types).macs))
            .collect()
    }

    #[test]
    fn products_count_their_multiply_accumulates() {
        let got = macs(
            "g (float[1, 2, 5, 5] x, float[3, 2, 3, 3] w, float[2, 3, 4] a, float[4, 5] b, \
             float[3, 2] p, float[3, 4] c, float[2, 1, 3] s, float[1, 16, 3] lw, \
             float[1, 16, 4] lr) => \
             (float[1, 3, 5, 5] y, float[2, 3, 5] z, float[2, 4] q, float[2, 1, 1, 4] h)\n{\n \
             y = Conv <pads = [1, 1, 1, 1]> (x, w)\n z = MatMul (a, b)\n \
             q = Gemm <transA = 1> (p, c)\n h = LSTM <hidden_size = 4> (s, lw, lr)\n}",
        );
        let want = [
            // 75 outputs, each a filter of 2 x 3 x 3.
            ("Conv", 75 * 18),
            // 30 outputs, each a dot product of 4.
            ("MatMul", 30 * 4),
            // A transposed: k is A's first dim, 3; 8 outputs.
            ("Gemm", 8 * 3),
            // 2 steps x 1 batch entry x (16 x 3 + 16 x 4).
            ("LSTM", 2 * (48 + 64)),
        ];
        let want: Vec<(String, u64)> = want.iter().map(|&(o, m)| (o.to_owned(), m)).collect();
        assert_eq!(got, want);
        // Element-wise work has no MACs.
        assert_eq!(
            macs("g (float[2, 3] x) => (float[2, 3] y) {\n y = Relu (x)\n}"),
            [("Relu".to_owned(), 0)]
        );
    }
}
