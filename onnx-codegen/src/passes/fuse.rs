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
//! * **Activation after BatchNormalization** ([`fuse_batch_norm_activations`]):
//!   the same activations fold into a `BatchNormalization` (inference, one
//!   output) that did not fold into a product, applied to each normalised
//!   value in the same pass, with the standalone op's comparisons.
//!
//! * **Residual and smooth epilogues** ([`fuse_epilogues`]): an f32 `Add`
//!   of a `Gemm`, `MatMul` or 1-D or 2-D group-1 `Conv` output (read by nothing
//!   else) and another value of exactly the same shape, computed before the
//!   product, becomes part of the product: the other value is the residual
//!   of the product's [`Epilogue`], added to each output after its own
//!   bias, while the tile is in L1 (in registers on AVX-512). An activation
//!   reading the sum (`Relu`, `LeakyRelu`, `Clip`, `Gelu`, `HardSwish`,
//!   `Swish` of alpha 1, i.e. SiLU) then fuses too, applied after the
//!   residual, as does a `Gelu`, `HardSwish` or SiLU reading the product
//!   directly (also a 2-D depthwise
//!   `Conv`'s, applied to each block of planes right after the kernel wrote
//!   it; such a convolution takes no residual); a product that already
//!   has an activation is left alone (the order would differ). The fused
//!   kernel performs the same float
//!   operations in the same order as the nodes it replaces, on the same sums
//!   (a convolution the direct kernel takes adds the residual after it), so
//!   results are bit-identical to the unfused generated code.
//!
//! The rewrite runs after validation and before inference; what it decides
//! travels to the producer's rule in the producer's typed
//! [`Lowering`](crate::ir::Lowering) (its epilogue), never in the model's
//! own inputs or attributes.

use crate::ir::lowering::{Activation, Epilogue, Lowering};
use crate::ir::{AttrValue, ElemType, Graph, Node, NodeId, Use, ValueId, ValueKind};
use crate::passes::infer::Inferred;

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

/// The epilogue of a product node (`Conv`, `Gemm`, `MatMul`), created empty
/// when the node has no lowering yet; `None` for other nodes.
fn epilogue_mut(node: &mut Node) -> Option<&mut Epilogue> {
    if node.op.is("Conv") {
        Lowering::conv_in(&mut node.lowering).map(|c| &mut c.epilogue)
    } else if node.op.is("Gemm") || node.op.is("MatMul") {
        Lowering::product_in(&mut node.lowering).map(|p| &mut p.epilogue)
    } else {
        None
    }
}

/// Whether `node` already applies a fused activation.
fn has_activation(node: &Node) -> bool {
    match &node.lowering {
        Some(Lowering::BatchNorm { .. }) => true,
        Some(l) => l.epilogue().is_some_and(|e| e.activation.is_some()),
        None => false,
    }
}

/// Makes `node` apply `act` to its output; `false` when it cannot.
fn set_activation(node: &mut Node, act: Activation) -> bool {
    if node.op.is("BatchNormalization") {
        node.lowering = Some(Lowering::BatchNorm { activation: act });
        return true;
    }
    match epilogue_mut(node) {
        Some(e) => {
            e.activation = Some(act);
            true
        }
        None => false,
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

/// The activation `consumer` computes, as its rule says
/// ([`crate::ops::OpRule::as_activation`]), when a product can apply it.
fn activation(g: &Graph, consumer: &Node) -> Option<Activation> {
    use crate::ops::ScalarInput;
    let rule = crate::ops::rule_for(consumer)?;
    let input = |i: usize| match consumer.inputs.get(i).copied().flatten() {
        None => ScalarInput::Absent,
        Some(v) => f32_scalar(g, v).map_or(ScalarInput::Unknown, ScalarInput::Known),
    };
    rule.as_activation(consumer, &input)
}

/// The activations every fusing kernel applies per element with the
/// standalone op's comparisons (Relu, LeakyRelu, Clip).
fn piecewise_activation(g: &Graph, consumer: &Node) -> Option<Activation> {
    activation(g, consumer).filter(|a| a.is_piecewise_linear())
}

/// Folds each activation into the `Conv`/`Gemm` producing its input when
/// that input has no other use (not a graph output, not captured) and the
/// producer has no activation yet. Returns what was fused.
pub fn fuse_activations(g: &mut Graph) -> Vec<Fused> {
    fuse_into(g, |n| n.op.is("Conv") || n.op.is("Gemm"))
}

/// Folds each activation into the `BatchNormalization` producing its input,
/// as [`fuse_activations`] does into products: a pre-activation network's
/// BatchNormalization + Relu (DenseNet's, before each conv, where the
/// normalisation cannot fold into the conv after it) becomes one pass.
/// Runs after `optimize::fold_batch_norms`, so a normalisation that can
/// fold into the product before it still does (with the activation then
/// fused into the product).
pub fn fuse_batch_norm_activations(g: &mut Graph) -> Vec<Fused> {
    fuse_into(g, |n| n.op.is("BatchNormalization"))
}

/// The rewrite of [`fuse_activations`] for the producers `producer` accepts.
fn fuse_into(g: &mut Graph, producer: impl Fn(&crate::ir::Node) -> bool) -> Vec<Fused> {
    let order: Vec<NodeId> = g.order().to_vec();
    let uses = g.uses();
    let mut done = Vec::new();
    for &id in &order {
        let node = g.node(id);
        if !producer(node) || node.outputs.len() != 1 || has_activation(node) {
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
        let Some(act) = piecewise_activation(g, consumer) else { continue };
        let (cid, consumer_op) = (*cid, consumer.op.op_type.clone());
        let producer = g.node_mut(id);
        if !set_activation(producer, act) {
            continue;
        }
        producer.outputs[0] = Some(out);
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

/// Folds residual `Add`s and the activations after them into the f32
/// `Gemm`/`MatMul` producing their input (see the module documentation).
/// Needs the inferred types; the caller infers again after a fusion.
/// Returns what was fused, one entry per node removed.
pub fn fuse_epilogues(g: &mut Graph, inferred: &Inferred) -> Vec<Fused> {
    let order: Vec<NodeId> = g.order().to_vec();
    let position: Vec<Option<usize>> = {
        let len = order.iter().map(|id| id.index() + 1).max().unwrap_or(0);
        let mut p = vec![None; len];
        for (i, id) in order.iter().enumerate() {
            if let Some(slot) = p.get_mut(id.index()) {
                *slot = Some(i);
            }
        }
        p
    };
    let uses = g.uses();
    let ty = |v: ValueId| inferred.types.get(v.index()).and_then(|t| t.as_ref());
    let runs = |v: ValueId| inferred.constants.get(v.index()).is_some_and(Option::is_none);
    let sole = |v: ValueId| match uses.get(v.index()).map(Vec::as_slice) {
        Some([Use::Input { node, index }]) => Some((*node, *index)),
        _ => None,
    };
    let mut done = Vec::new();
    let mut removed: Vec<NodeId> = Vec::new();
    for (at, &id) in order.iter().enumerate() {
        let node = g.node(id);
        // Convolutions: 2-D of groups of one (the implicit GEMM's tiles),
        // and 2-D depthwise ones (one input and one output channel per
        // group) for the activation only: their kernel applies it to each
        // block of planes it writes, but would add a residual in a pass.
        // (1-D ones run as 2-D of height 1.)
        let conv2d = node.op.is("Conv")
            && node.input(0).and_then(ty).is_some_and(|t| matches!(t.rank(), 3 | 4));
        let group = match node.attr("group") {
            None => Some(1),
            Some(AttrValue::Int(g)) => usize::try_from(*g).ok(),
            _ => None,
        };
        let conv = conv2d && group == Some(1);
        let channels = |v: Option<ValueId>| v.and_then(ty).and_then(|t| t.dims.get(1).copied());
        let depthwise = conv2d
            && group.is_some_and(|g| {
                g > 1 && channels(node.input(0)) == Some(g) && channels(node.output(0)) == Some(g)
            });
        let product = node.op.is("Gemm") || node.op.is("MatMul") || conv || depthwise;
        if !product || node.outputs.len() != 1 || has_activation(node) {
            continue;
        }
        let Some(mid) = node.output(0) else { continue };
        let Some(pty) = ty(mid).filter(|t| t.elem == ElemType::Float && runs(mid)).cloned() else {
            continue;
        };
        // A transposed output is not in the residual's layout.
        let (transposed, has_residual) = match &node.lowering {
            Some(Lowering::Product(p)) => (p.transposes.y.is_some(), p.epilogue.residual.is_some()),
            Some(l) => (false, l.epilogue().is_some_and(|e| e.residual.is_some())),
            None => (false, false),
        };
        if transposed || has_residual {
            continue;
        }
        let mut out = mid;
        // The residual: `Add(P, R)` with R of P's very type, available before P.
        if let Some((aid, index)) = sole(mid)
            && !removed.contains(&aid)
            && !depthwise
        {
            let add = g.node(aid);
            let other = add.input(1 - index.min(1));
            let sum = add.output(0);
            if let (true, 2, 1, Some(r), Some(sum)) =
                (add.op.is("Add"), add.inputs.len(), add.outputs.len(), other, sum)
            {
                let before = match g.value(r).kind {
                    ValueKind::NodeOutput { node, .. } => {
                        position.get(node.index()).copied().flatten().is_some_and(|p| p < at)
                    }
                    _ => true,
                };
                if before && r != mid && ty(r) == Some(&pty) && ty(sum) == Some(&pty) {
                    let p = g.node_mut(id);
                    if let Some(e) = epilogue_mut(p) {
                        e.residual = Some(r);
                    }
                    p.outputs[0] = Some(sum);
                    g.value_mut(sum).kind = ValueKind::NodeOutput { node: id, index: 0 };
                    done.push(Fused {
                        producer: id,
                        consumer: aid,
                        consumer_op: "Add".to_owned(),
                        intermediate: mid,
                        output: sum,
                    });
                    removed.push(aid);
                    out = sum;
                }
            }
        }
        // The activation reading the product (or the sum).
        let Some((cid, 0)) = sole(out) else { continue };
        if removed.contains(&cid) {
            continue;
        }
        let consumer = g.node(cid);
        let Some(y) = consumer.output(0).filter(|_| consumer.outputs.len() == 1) else {
            continue;
        };
        if ty(y) != Some(&pty) {
            continue;
        }
        let Some(act) = activation(g, consumer) else { continue };
        let consumer_op = consumer.op.op_type.clone();
        let p = g.node_mut(id);
        if !set_activation(p, act) {
            continue;
        }
        p.outputs[0] = Some(y);
        g.value_mut(y).kind = ValueKind::NodeOutput { node: id, index: 0 };
        done.push(Fused { producer: id, consumer: cid, consumer_op, intermediate: out, output: y });
        removed.push(cid);
    }
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
    fn an_activation_fuses_into_a_batch_norm_that_does_not_fold() {
        let stats = "float[2] s = {1.5, 0.5}, float[2] b = {0.25, -1}, float[2] m = {0.5, 0}, \
                     float[2] v = {3, 0.25}, float[2, 2, 1, 1] w = {1, 2, 3, 4}";
        // Pre-activation: the normalisation reads the graph input, the Relu
        // fuses into it (one pass), the Conv after it keeps its own output.
        let pre = format!(
            "g (float[1, 2, 2, 2] x) => (float[1, 2, 2, 2] y) <{stats}>\n{{\n \
             n = BatchNormalization (x, s, b, m, v)\n r = Relu (n)\n y = Conv (r, w)\n}}"
        );
        let a = run(15, &pre);
        assert_eq!(a.fused.len(), 1);
        assert_eq!(a.fused[0].consumer_op, "Relu");
        let ops: Vec<String> = a.model().graph.nodes().map(|(_, n)| n.op.op_type.clone()).collect();
        assert_eq!(ops, ["BatchNormalization", "Conv"]);
        let model = format!("<ir_version: 8, opset_import: [\"\" : 15]>\n{pre}");
        let model = crate::text::parse_model(&model, "t.onnxtxt").expect("parses");
        let opts = crate::generate::Options::default();
        let code = crate::generate::generate(&model, &opts, "t").expect("generates");
        assert!(code.tokens.to_string().contains("sbatch_norm"));
        // After a Conv, the normalisation folds into it and the Relu then
        // fuses into the Conv.
        let post = format!(
            "g (float[1, 2, 2, 2] x) => (float[1, 2, 2, 2] y) <{stats}>\n{{\n \
             c = Conv (x, w)\n n = BatchNormalization (c, s, b, m, v)\n y = Relu (n)\n}}"
        );
        let a = run(15, &post);
        let ops: Vec<String> = a.model().graph.nodes().map(|(_, n)| n.op.op_type.clone()).collect();
        assert_eq!(ops, ["Conv"]);
        assert_eq!(a.fused.len(), 1);
        // On constants, both fold at generation time, to the normalised
        // values with negatives clipped.
        let folded = run(
            15,
            &format!(
                "g () => (float[1, 2, 1, 2] y) <{stats}, float[1, 2, 1, 2] x = {{-1, 2, 0, 1}}>\n\
                 {{\n n = BatchNormalization (x, s, b, m, v)\n y = Relu (n)\n}}"
            ),
        );
        // Channel 0: (x - 0.5) / sqrt(3 + 1e-5) * 1.5 + 0.25; channel 1:
        // (x - 0) / sqrt(0.25 + 1e-5) * 0.5 - 1.
        let want: Vec<f64> = [(-1.0f32, 0), (2.0, 0), (0.0, 1), (1.0, 1)]
            .iter()
            .map(|&(x, c)| {
                let (s, b, m, v) = [(1.5f32, 0.25f32, 0.5f32, 3.0f32), (0.5, -1.0, 0.0, 0.25)][c];
                f64::from(((x - m) / (v + 1e-5).sqrt() * s + b).max(0.0))
            })
            .collect();
        assert_eq!(value(&folded, 0), want);
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

    /// Runs the one kernel of `a`'s graph on the host (the exact kernels,
    /// constant folding's path) with `inputs` for the graph's run-time inputs
    /// in order; returns output 0.
    fn eval_single(a: &crate::generate::Analysis, inputs: &[&[f32]]) -> Vec<f32> {
        use crate::ops::{HostData, HostTensor, Lowered};
        let g = &a.model().graph;
        let [step] = a.inferred.steps.as_slice() else { panic!("one step expected") };
        let Lowered::Kernel(k) = &step.lowered else { panic!("a kernel expected") };
        let node = g.node(step.node);
        let host: Vec<Option<HostTensor>> = node
            .reads()
            .iter()
            .map(|v| {
                let v = (*v)?;
                let ty = a.inferred.types[v.index()].clone()?;
                match &a.inferred.constants[v.index()] {
                    Some(t) => HostTensor::from_tensor(t),
                    None => {
                        let i = g.inputs.iter().position(|&x| x == v)?;
                        Some(HostTensor { ty, data: HostData::F32(inputs[i].to_vec()) })
                    }
                }
            })
            .collect();
        let refs: Vec<Option<&HostTensor>> = host.iter().map(Option::as_ref).collect();
        let out = node.output(0).unwrap();
        let ty = a.inferred.types[out.index()].clone().unwrap();
        let mut outs = vec![HostTensor::zeros(&ty).unwrap()];
        k.eval(&refs, &mut outs).unwrap();
        match &outs[0].data {
            HostData::F32(v) => v.clone(),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn ops(a: &crate::generate::Analysis) -> Vec<String> {
        a.model().graph.nodes().map(|(_, n)| n.op.op_type.clone()).collect()
    }

    #[test]
    fn matmul_bias_and_residual_add_fuse_into_one_node() {
        let a = run(
            13,
            "g (float[2, 3] x, float[2, 2] r) => (float[2, 2] y) \
             <float[3, 2] w = {1, -1, 0.5, 2, -2, 0.25}, float[2] b = {0.5, -1}>\n\
             {\n m = MatMul (x, w)\n t = Add (m, b)\n y = Add (r, t)\n}",
        );
        assert_eq!(ops(&a), ["MatMul"]);
        let fused: Vec<&str> = a.fused.iter().map(|f| f.consumer_op.as_str()).collect();
        assert_eq!(fused, ["Add"]);
        let x = [1.0, 2.0, -1.0, 0.5, -3.0, 4.0];
        let r = [10.0, -10.0, 0.125, 3.0];
        // Row 0: x w = [1 + 1 + 2, -1 + 4 - 0.25] = [4, 2.75]; + b; + r.
        // Row 1: [0.5 - 1.5 - 8, -0.5 - 6 + 1] = [-9, -5.5].
        let want = [4.0 + 0.5 + 10.0, 2.75 - 1.0 - 10.0, -9.0 + 0.5 + 0.125, -5.5 - 1.0 + 3.0];
        assert_eq!(eval_single(&a, &[&x, &r]), want);
    }

    #[test]
    fn matmul_then_gelu_and_gemm_residual_relu_fuse() {
        let a = run(
            20,
            "g (float[1, 2] x) => (float[1, 3] y) <float[2, 3] w = {1, 0, -1, 0, 1, 2}>\n\
             {\n m = MatMul (x, w)\n y = Gelu (m)\n}",
        );
        assert_eq!(ops(&a), ["MatMul"]);
        let got = eval_single(&a, &[&[1.0, -0.5]]);
        // x Phi(x) at 1, -0.5 and -2.
        let want = [0.841_344_746_068_542_9, -0.154_268_769_362_993_5, -0.045_500_263_896_358_4];
        for (g, w) in got.iter().zip(want) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
        }
        let tanh = run(
            20,
            "g (float[1, 2] x) => (float[1, 3] y) <float[2, 3] w = {1, 0, -1, 0, 1, 2}>\n\
             {\n m = MatMul (x, w)\n y = Gelu <approximate = \"tanh\"> (m)\n}",
        );
        assert_eq!(ops(&tanh), ["MatMul"]);
        // Gemm + residual + Relu: one node, the Relu after the residual.
        let a = run(
            13,
            "g (float[1, 2] x, float[1, 2] r) => (float[1, 2] y) <float[2, 2] w = {1, 0, 0, 1}>\n\
             {\n m = Gemm (x, w)\n s = Add (m, r)\n y = Relu (s)\n}",
        );
        assert_eq!(ops(&a), ["Gemm"]);
        assert_eq!(a.fused.len(), 2);
        assert_eq!(eval_single(&a, &[&[1.0, -3.0], &[-2.0, 1.0]]), [0.0, 0.0]);
        assert_eq!(eval_single(&a, &[&[1.0, 3.0], &[2.0, -1.0]]), [3.0, 2.0]);
    }

    /// `x * sigmoid(x)` in f64.
    fn silu(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    #[test]
    fn silu_written_as_sigmoid_and_mul_folds_then_fuses_into_the_product() {
        // Both operand orders of the Mul, after a 2-D Conv.
        for mul in ["Mul (c, s)", "Mul (s, c)"] {
            let a = run(
                13,
                &format!(
                    "g (float[1, 1, 1, 4] x) => (float[1, 2, 1, 4] y) \
                     <float[2, 1, 1, 1] w = {{1, -2}}, float[2] b = {{0.5, 0}}>\n\
                     {{\n c = Conv (x, w, b)\n s = Sigmoid (c)\n y = {mul}\n}}"
                ),
            );
            assert_eq!(ops(&a), ["Conv"], "{mul}");
            let fused: Vec<&str> = a.fused.iter().map(|f| f.consumer_op.as_str()).collect();
            assert_eq!(fused, ["Swish"]);
            let rewrites: Vec<&str> = a.rewrites.iter().map(|r| r.name).collect();
            assert_eq!(rewrites, ["silu"]);
            let x = [-3.0f32, -0.5, 0.25, 4.0];
            let got = eval_single(&a, &[&x]);
            let want: Vec<f64> = (x.iter().map(|&v| f64::from(v) + 0.5))
                .chain(x.iter().map(|&v| -2.0 * f64::from(v)))
                .map(silu)
                .collect();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((f64::from(*g) - w).abs() < 1e-6, "{mul}: {g} vs {w}");
            }
        }
        // After a residual Add: (x w + r) * sigmoid(x w + r).
        let a = run(
            13,
            "g (float[1, 2] x, float[1, 2] r) => (float[1, 2] y) <float[2, 2] w = {1, 0, 0, 1}>\n\
             {\n m = Gemm (x, w)\n t = Add (m, r)\n s = Sigmoid (t)\n y = Mul (t, s)\n}",
        );
        assert_eq!(ops(&a), ["Gemm"]);
        let got = eval_single(&a, &[&[1.5, -2.0], &[-0.25, 0.5]]);
        assert_eq!(got.len(), 2);
        for (g, w) in got.iter().zip([silu(1.25), silu(-1.5)]) {
            assert!((f64::from(*g) - w).abs() < 1e-6, "{g} vs {w}");
        }
    }

    #[test]
    fn silu_shapes_that_are_not_exactly_x_times_its_sigmoid_stay_or_only_fold() {
        let mm = |outs: &str, body: &str| {
            run(
                13,
                &format!(
                    "g (float[2, 2] x, float[2, 2] z) => ({outs}) \
                     <float[2, 2] w = {{1, 0, 0, 1}}>\n{{\n m = MatMul (x, w)\n{body}\n}}"
                ),
            )
        };
        // The gate is read by something else too (a graph output).
        let a = mm("float[2, 2] y, float[2, 2] s", " s = Sigmoid (m)\n y = Mul (m, s)");
        assert_eq!(ops(&a), ["MatMul", "Sigmoid", "Mul"]);
        // The Mul multiplies the gate by another value.
        let a = mm("float[2, 2] y", " s = Sigmoid (m)\n y = Mul (z, s)");
        assert_eq!(ops(&a), ["MatMul", "Sigmoid", "Mul"]);
        // The product has a third reader: one Swish, not fused.
        let a =
            mm("float[2, 2] y, float[2, 2] q", " s = Sigmoid (m)\n y = Mul (m, s)\n q = Relu (m)");
        assert_eq!(ops(&a), ["MatMul", "Swish", "Relu"]);
    }

    #[test]
    fn residuals_that_broadcast_or_share_or_follow_an_activation_stay() {
        let mm = |sig: &str, body: &str| {
            run(
                20,
                &format!(
                    "g ({sig}) => (float[2, 2] y) <float[2, 2] w = {{1, 0, 0, 1}}>\n{{\n{body}\n}}"
                ),
            )
        };
        // R broadcasts (a row).
        let a = mm("float[2, 2] x, float[1, 2] r", " m = MatMul (x, w)\n y = Add (m, r)");
        assert_eq!(ops(&a), ["MatMul", "Add"]);
        // The product's output has another reader.
        let a = mm(
            "float[2, 2] x, float[2, 2] r",
            " m = MatMul (x, w)\n s = Add (m, r)\n y = Mul (s, m)",
        );
        assert_eq!(ops(&a), ["MatMul", "Add", "Mul"]);
        // The product already has an activation: Add(Relu(Gemm), R).
        let a =
            mm("float[2, 2] x, float[2, 2] r", " m = Gemm (x, w)\n t = Relu (m)\n y = Add (t, r)");
        assert_eq!(ops(&a), ["Gemm", "Add"]);
        // Not f32.
        let a = run(
            13,
            "g (double[2, 2] x, double[2, 2] r) => (double[2, 2] y) <double[2, 2] w = {1, 0, 0, 1}>\n\
             {\n m = MatMul (x, w)\n y = Add (m, r)\n}",
        );
        assert_eq!(ops(&a), ["MatMul", "Add"]);
        // R computed after the product, from it: the sum reads the product twice.
        let a = mm("float[2, 2] x, float[2, 2] r", " m = MatMul (x, w)\n y = Add (m, m)");
        assert_eq!(ops(&a), ["MatMul", "Add"]);
    }

    #[test]
    fn conv_add_relu_becomes_one_conv() {
        // ResNet's tail: Relu(Add(Conv, skip)), the skip a graph input.
        let a = run(
            13,
            "g (float[1, 1, 2, 2] x, float[1, 2, 2, 2] s) => (float[1, 2, 2, 2] y) \
             <float[2, 1, 1, 1] w = {2, -1}, float[2] b = {0.5, 1}>\n\
             {\n c = Conv (x, w, b)\n t = Add (s, c)\n y = Relu (t)\n}",
        );
        assert_eq!(ops(&a), ["Conv"]);
        assert_eq!(a.fused.len(), 2);
        let x = [1.0, -2.0, 0.25, 3.0];
        let s = [-3.0, 1.0, 0.0, -7.0, 0.5, 0.5, -2.0, 2.0];
        // Channel 0: 2x + 0.5 + s; channel 1: -x + 1 + s; then Relu.
        let want = [0.0, 0.0, 1.0, 0.0, 0.5, 3.5, 0.0, 0.0];
        assert_eq!(eval_single(&a, &[&x, &s]), want);
        // Grouped (depthwise): left alone.
        let a = run(
            13,
            "g (float[1, 2, 2, 2] x, float[1, 2, 2, 2] s) => (float[1, 2, 2, 2] y) \
             <float[2, 1, 1, 1] w = {2, -1}>\n\
             {\n c = Conv <group = 2> (x, w)\n y = Add (c, s)\n}",
        );
        assert_eq!(ops(&a), ["Conv", "Add"]);
    }

    #[test]
    fn depthwise_conv_then_silu_is_one_conv() {
        // EfficientNet's depthwise block: Mul(c, Sigmoid(c)) after a Conv of
        // one channel per group.
        let a = run(
            13,
            "g (float[1, 2, 1, 3] x) => (float[1, 2, 1, 2] y) \
             <float[2, 1, 1, 2] w = {1, -1, 0.5, 2}, float[2] b = {0.25, -1}>\n\
             {\n c = Conv <group = 2> (x, w, b)\n s = Sigmoid (c)\n y = Mul (c, s)\n}",
        );
        assert_eq!(ops(&a), ["Conv"]);
        let fused: Vec<&str> = a.fused.iter().map(|f| f.consumer_op.as_str()).collect();
        assert_eq!(fused, ["Swish"]);
        let x = [1.0f32, -2.0, 0.5, 3.0, -1.0, 0.25];
        // Channel 0: x[j] - x[j + 1] + 0.25; channel 1: 0.5 x[j] + 2 x[j + 1] - 1.
        let c = [3.25f32, -2.25, -1.5, -1.0];
        let got = eval_single(&a, &[&x]);
        assert_eq!(got.len(), 4);
        for (g, c) in got.iter().zip(c) {
            let want = f64::from(c) / (1.0 + (-f64::from(c)).exp());
            assert!((f64::from(*g) - want).abs() < 1e-6, "{g} vs {want}");
        }
        // Grouped but not depthwise (two input channels per group): left alone.
        let a = run(
            13,
            "g (float[1, 4, 1, 1] x) => (float[1, 2, 1, 1] y) \
             <float[2, 2, 1, 1] w = {1, -1, 0.5, 2}>\n\
             {\n c = Conv <group = 2> (x, w)\n s = Sigmoid (c)\n y = Mul (c, s)\n}",
        );
        assert_eq!(ops(&a), ["Conv", "Swish"]);
    }

    #[test]
    fn conv_then_hard_swish_is_one_conv_also_in_one_dimension() {
        // MobileNet-V3's activation, after a 2-D Conv and after a 1-D one.
        for (x_ty, w_ty) in [
            ("float[1, 1, 1, 4] x", "float[2, 1, 1, 1] w"),
            ("float[1, 1, 4] x", "float[2, 1, 1] w"),
        ] {
            let y_ty = x_ty.replace("1, 1, ", "1, 2, ").replace(" x", " y");
            let a = run(
                14,
                &format!(
                    "g ({x_ty}) => ({y_ty}) <{w_ty} = {{1, -2}}, float[2] b = {{0.5, 0}}>\n\
                     {{\n c = Conv (x, w, b)\n y = HardSwish (c)\n}}"
                ),
            );
            assert_eq!(ops(&a), ["Conv"], "{x_ty}");
            let x = [-4.0f32, -1.0, 1.0, 2.0];
            let hard_swish = |v: f32| v * (v / 6.0 + 0.5).clamp(0.0, 1.0);
            let want: Vec<f32> = [1.0f32, -2.0]
                .iter()
                .zip([0.5f32, 0.0])
                .flat_map(|(w, b)| x.map(|v| hard_swish(w * v + b)))
                .collect();
            let got = eval_single(&a, &[&x]);
            assert_eq!(got.len(), 8);
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() < 1e-6, "{x_ty}: {got:?} vs {want:?}");
            }
        }
    }
}
