//! Fusion: small, named rewrites of the IR that never make generated code
//! slower or less exact.
//!
//! * **Activation epilogue** ([`fuse_activations`]): a `Conv` or `Gemm` whose
//!   only consumer is `Relu`, `LeakyRelu` or `Clip` (with bounds known at
//!   generation time and exact in f32) computes the activation itself, on
//!   each output right after the bias; the consumer node goes away, and so do
//!   one pass over the tensor and one intermediate buffer. The fused kernel
//!   applies the same comparisons as the standalone op, so results are
//!   bit-identical.
//!
//! The rewrite runs after validation and before inference; the activation
//! travels to the producer's rule as the internal attribute [`ACTIVATION`],
//! which this pass first removes from every node so a model cannot set it.

use crate::ir::{AttrValue, Attribute, ElemType, Graph, NodeId, Use, ValueId, ValueKind};

/// The internal attribute carrying a fused activation on a `Conv` or `Gemm`:
/// `Floats([0])` Relu, `Floats([1, alpha])` LeakyRelu,
/// `Floats([2, min, max])` Clip. Read by [`activation_of`].
pub const ACTIVATION: &str = "onnx_codegen.fused_activation";

/// One fusion done: `consumer` (an activation node, now removed) was folded
/// into `producer`, which now writes `output` directly; `intermediate` (the
/// producer's former output) is no longer computed.
#[derive(Clone, Debug, PartialEq)]
pub struct Fused {
    pub producer: NodeId,
    pub consumer: NodeId,
    pub consumer_op: String,
    pub intermediate: ValueId,
    pub output: ValueId,
}

/// The activation a fused node must apply, decoded from [`ACTIVATION`]:
/// the same `Unary` the standalone op would run.
pub fn activation_of(
    node: &crate::ir::Node,
) -> Option<onnx_codegen_runtime::elementwise::Unary<f64>> {
    use onnx_codegen_runtime::elementwise::Unary;
    let Some(AttrValue::Floats(v)) = node.attr(ACTIVATION) else { return None };
    match v.as_slice() {
        [k] if *k == 0.0 => Some(Unary::Relu),
        [k, alpha] if *k == 1.0 => Some(Unary::LeakyRelu { alpha: f64::from(*alpha) }),
        [k, min, max] if *k == 2.0 => {
            Some(Unary::Clip { min: f64::from(*min), max: f64::from(*max) })
        }
        _ => None,
    }
}

/// A scalar f32 initializer's value: Clip's bound, exact as an f32 attribute.
fn f32_scalar(g: &Graph, v: ValueId) -> Option<f32> {
    let t = g.value(v).constant()?;
    if t.elem != ElemType::Float {
        return None;
    }
    match t.to_f64s().as_deref() {
        Some([x]) => Some(*x as f32),
        _ => None,
    }
}

/// The encoded activation of `consumer`, when it is one we fuse.
fn encode(g: &Graph, consumer: &crate::ir::Node) -> Option<Vec<f32>> {
    let float = |name: &str, default: f32| match consumer.attr(name) {
        Some(AttrValue::Float(f)) => *f,
        _ => default,
    };
    if !consumer.op.domain.is_empty() {
        return None;
    }
    match consumer.op.op_type.as_str() {
        "Relu" => Some(vec![0.0]),
        "LeakyRelu" => Some(vec![1.0, float("alpha", 0.01)]),
        "Clip" if consumer.op.opset_version < 11 => {
            Some(vec![2.0, float("min", f32::NEG_INFINITY), float("max", f32::INFINITY)])
        }
        "Clip" => {
            let bound = |i: usize, default: f32| match consumer.inputs.get(i).copied().flatten() {
                None => Some(default),
                Some(v) => f32_scalar(g, v),
            };
            Some(vec![2.0, bound(1, f32::NEG_INFINITY)?, bound(2, f32::INFINITY)?])
        }
        _ => None,
    }
}

/// Removes the internal attributes (named `onnx_codegen.*`: [`ACTIVATION`],
/// the transposes folded into a MatMul) from every node, so a model cannot set
/// them; runs once, before the first rewrite.
pub fn strip_internal(g: &mut Graph) {
    let order: Vec<NodeId> = g.order().to_vec();
    for &id in &order {
        g.node_mut(id).attributes.retain(|a| !a.name.starts_with("onnx_codegen."));
    }
}

/// Folds each activation into the `Conv`/`Gemm` producing its input when
/// that input has no other use (not a graph output, not captured) and the
/// producer has no activation yet. Returns what was fused.
pub fn fuse_activations(g: &mut Graph) -> Vec<Fused> {
    let order: Vec<NodeId> = g.order().to_vec();
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in &order {
        let node = g.node(id);
        if !(node.op.is("Conv") || node.op.is("Gemm"))
            || node.outputs.len() != 1
            || node.attr(ACTIVATION).is_some()
        {
            continue;
        }
        let Some(mid) = node.outputs.first().copied().flatten() else { continue };
        let [Use::Input { node: cid, index: 0 }] = uses.get(mid.index()).map_or(&[][..], |u| u)
        else {
            continue;
        };
        let consumer = g.node(*cid);
        if consumer.outputs.len() != 1 {
            continue;
        }
        let Some(out) = consumer.outputs.first().copied().flatten() else { continue };
        let Some(code) = encode(g, consumer) else { continue };
        let (cid, consumer_op) = (*cid, consumer.op.op_type.clone());
        let producer = g.node_mut(id);
        producer.outputs[0] = Some(out);
        producer.attributes.push(Attribute {
            name: ACTIVATION.to_owned(),
            value: AttrValue::Floats(code),
            doc_string: String::new(),
        });
        g.value_mut(out).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(Fused {
            producer: id,
            consumer: cid,
            consumer_op,
            intermediate: mid,
            output: out,
        });
    }
    let removed: Vec<NodeId> = done.iter().map(|f| f.consumer).collect();
    g.retain_nodes(|id, _| !removed.contains(&id));
    done
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{run, value};

    const SIG: &str = "g (float[1, 1, 3] x) => (float[1, 1, 3] y, float[1, 1, 3] z)";

    #[test]
    fn conv_then_relu_fuses_and_summary_still_lists_the_model() {
        let a = run(
            13,
            &format!(
                "{SIG} <float[1, 1, 1] w = {{-1}}>\n{{\n c = Conv (x, w)\n y = Relu (c)\n \
                 z = Identity (x)\n}}"
            ),
        );
        assert_eq!(a.fused.len(), 1);
        assert_eq!(a.model().graph.node_count(), 2);
        let s = a.summary();
        assert_eq!(
            (s.nodes, s.fused, s.ops.get("Relu"), s.ops.get("Conv")),
            (3, 1, Some(&1), Some(&1))
        );
        let names: Vec<&str> = s.values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["c", "y", "z"]);
        assert_eq!(s.values[0].r#type.as_deref(), Some("float[1, 1, 3]"));
    }

    #[test]
    fn fused_values_equal_the_unfused_ones() {
        // Folded at generation time: the fused kernel's host path.
        let body = |act: &str| {
            format!(
                "g () => (float[1, 1, 4] y) <float[1, 1, 4] x = {{-2, -0.5, 0.5, 2}}, \
                 float[1, 1, 1] w = {{3}}, float[1] b = {{0.25}}, float lo = {{-1}}, \
                 float hi = {{1}}>\n{{\n c = Conv (x, w, b)\n y = {act}\n}}"
            )
        };
        let relu = run(13, &body("Relu (c)"));
        assert_eq!(relu.fused.len(), 1);
        assert_eq!(value(&relu, 0), [0.0, 0.0, 1.75, 6.25]);
        let leaky = run(13, &body("LeakyRelu <alpha = 0.5> (c)"));
        assert_eq!(leaky.fused.len(), 1);
        assert_eq!(value(&leaky, 0), [-2.875, -0.625, 1.75, 6.25]);
        let clip = run(13, &body("Clip (c, lo, hi)"));
        assert_eq!(clip.fused.len(), 1);
        assert_eq!(value(&clip, 0), [-1.0, -1.0, 1.0, 1.0]);
    }

    #[test]
    fn shared_or_output_intermediates_are_not_fused() {
        // `c` is also a graph output: the Relu stays.
        let a = run(
            13,
            "g (float[1, 1, 3] x) => (float[1, 1, 3] c, float[1, 1, 3] y) <float[1, 1, 1] w = {2}>\n\
             {\n c = Conv (x, w)\n y = Relu (c)\n}",
        );
        assert!(a.fused.is_empty());
        // `c` feeds two nodes.
        let a = run(
            13,
            &format!(
                "{SIG} <float[1, 1, 1] w = {{2}}>\n{{\n c = Conv (x, w)\n y = Relu (c)\n \
                 z = Neg (c)\n}}"
            ),
        );
        assert!(a.fused.is_empty());
        // Clip with a bound computed at run time.
        let a = run(
            13,
            "g (float[1, 1, 3] x, float hi) => (float[1, 1, 3] y) <float[1, 1, 1] w = {2}>\n\
             {\n c = Conv (x, w)\n y = Clip (c, , hi)\n}",
        );
        assert!(a.fused.is_empty());
    }

    #[test]
    fn gemm_then_relu_fuses() {
        let a = run(
            13,
            "g () => (float[1, 2] y) <float[1, 2] a = {1, -1}, float[2, 2] b = {1, 0, 0, 1}>\n\
             {\n c = Gemm (a, b)\n y = Relu (c)\n}",
        );
        assert_eq!(a.fused.len(), 1);
        assert_eq!(value(&a, 0), [1.0, 0.0]);
    }
}
