//! The pipeline after validation: inference and the rewriting passes, in
//! stages, over the main graph and, through the same code, over every
//! control-flow body (the rules compile their bodies through this module).
//!
//! After each stage the graph is inferred again, incrementally
//! ([`infer::reinfer_graph`]): only the nodes that see something else than
//! at the last inference run their rules (a node a pass added, rewired or
//! lowered differently, one reading a new initializer, one downstream whose
//! inputs' types or constants changed); the other visits are replayed.
//! Passes report nothing for this, and the pipeline takes no snapshot:
//! each inference records what every node saw, and the next one compares
//! the graph as it is with that record, so a pass cannot forget to say what
//! it changed. The invariant is that the result is the inference from
//! scratch, to the bit; unit tests check it after every stage (with
//! [`infer::difference`]), as does any build with
//! `ONNX_CODEGEN_REINFER=check`.
//!
//! `ONNX_CODEGEN_REINFER` is for debugging the compiler only, a
//! comma-separated list of: `check` (as above; a difference panics),
//! `stats` (prints how many nodes each inference ran the rules of, and its
//! time, per graph and stage, to stderr), `full` (infers from scratch after
//! each stage that changed the graph, as before re-inference was
//! incremental, for comparison).

use super::infer::{self, InferOptions, Inferred, Seed};
use crate::ir::{Graph, Tensor, TensorType, ValueId};
use crate::ops::{CompiledGraph, Compiler, OpError};

/// What the pipeline needs from the caller.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub infer: InferOptions,
    /// Whether 3x3 convolutions may run by Winograd (their weights then
    /// take 16/9 the space).
    pub winograd: bool,
}

/// A graph after the pipeline: its inference (types, constants, lowered
/// steps), and what the rewrites did, for the summary.
pub struct Lowered {
    pub inferred: Inferred,
    pub fused: Vec<super::fuse::Fused>,
    pub rewrites: Vec<super::optimize::Rewrite>,
    /// Per inference of this graph (the first, then one after each stage
    /// run): what it followed, and how many nodes it visited and ran the
    /// rules of.
    pub inferences: Vec<Inference>,
}

/// One inference of a graph by the pipeline, for tests and debugging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inference {
    /// `first inference`, or the stage after which it ran (its passes).
    pub after: String,
    /// The nodes it visited (the live ones).
    pub visited: usize,
    /// The nodes it ran the rules of; the others replayed their last visit.
    pub ran: usize,
}

/// Runs the pipeline over `g` (a main graph: no seeds), rewriting it in place.
pub fn run(g: &mut Graph, config: &Config, seeds: &[Seed]) -> Lowered {
    run_nested(g, config, seeds, 0)
}

/// Inference alone over a main graph `g` (its bodies still go through the
/// whole pipeline): the graph as written, for tests and tools.
pub fn infer(g: &Graph, config: &Config) -> Inferred {
    let mut inferred = infer::infer_graph(g, &config.infer, &[], &Subgraphs { config, depth: 0 });
    inferred.forget_visits();
    inferred
}

/// [`run`] for a graph nested `depth` control-flow bodies deep.
fn run_nested(g: &mut Graph, config: &Config, seeds: &[Seed], depth: usize) -> Lowered {
    let compiler = Subgraphs { config, depth };
    let debug = Debug::from_env();
    // Before inference: an activation needs no types to fuse into its product.
    let fused = super::fuse::fuse_activations(g);
    let mut changes = Changes { fused, rewrites: Vec::new() };
    let start = std::time::Instant::now();
    let mut inferred = infer::infer_graph(g, &config.infer, seeds, &compiler);
    let mut inferences = Vec::new();
    debug.report(g, depth, "first inference", &inferred, start, &mut inferences);
    for stage in PIPELINE {
        if !inferred.is_complete() {
            break;
        }
        let untouched = Untouched::of(g);
        // Under `full`, to tell the stages that changed nothing, as the
        // passes' own reports did before re-inference was incremental.
        let before = debug.full.then(|| g.clone());
        for pass in *stage {
            (pass.run)(g, &inferred, config, &mut changes);
        }
        let (after, start) = (stage_name(stage), std::time::Instant::now());
        if untouched.holds(g) || before.is_some_and(|before| before == *g) {
            // Nothing took the graph mutably: its inference still holds.
            debug.skipped(g, depth, &after, &mut inferences);
        } else {
            inferred = if debug.full {
                infer::infer_graph(g, &config.infer, seeds, &compiler)
            } else {
                infer::reinfer_graph(g, &config.infer, seeds, &compiler, inferred)
            };
            debug.report(g, depth, &after, &inferred, start, &mut inferences);
        }
        if debug.check || cfg!(test) {
            let full = infer::infer_graph(g, &config.infer, seeds, &compiler);
            if let Some(d) = infer::difference(g, &inferred, &full) {
                panic!(
                    "graph '{}': inference after stage {after} differs from inference from \
                     scratch: {d}",
                    g.name
                );
            }
        }
    }
    inferred.forget_visits();
    let Changes { fused, rewrites } = changes;
    Lowered { inferred, fused, rewrites, inferences }
}

/// What of a graph tells that no pass changed it: its revision
/// ([`Graph::revision`], which every method taking it mutably increases)
/// and its public fields.
struct Untouched {
    revision: u64,
    name: String,
    doc_string: String,
    inputs: Vec<ValueId>,
    outputs: Vec<ValueId>,
    captures: Vec<ValueId>,
}

impl Untouched {
    fn of(g: &Graph) -> Untouched {
        Untouched {
            revision: g.revision(),
            name: g.name.clone(),
            doc_string: g.doc_string.clone(),
            inputs: g.inputs.clone(),
            outputs: g.outputs.clone(),
            captures: g.captures.clone(),
        }
    }

    /// Whether `g` is still the graph this was taken of.
    fn holds(&self, g: &Graph) -> bool {
        self.revision == g.revision()
            && self.name == g.name
            && self.doc_string == g.doc_string
            && self.inputs == g.inputs
            && self.outputs == g.outputs
            && self.captures == g.captures
    }
}

/// The debugging switch `ONNX_CODEGEN_REINFER`, a comma-separated list of
/// `check`, `stats` and `full` (see the module docs).
#[derive(Clone, Copy, Default)]
struct Debug {
    check: bool,
    stats: bool,
    full: bool,
}

impl Debug {
    fn from_env() -> Debug {
        let mut debug = Debug::default();
        if let Ok(list) = std::env::var("ONNX_CODEGEN_REINFER") {
            for flag in list.split(',') {
                match flag.trim() {
                    "check" => debug.check = true,
                    "stats" => debug.stats = true,
                    "full" => debug.full = true,
                    _ => {}
                }
            }
        }
        debug
    }

    /// Notes that the graph did not change in stage `after`: nothing was
    /// inferred again.
    fn skipped(self, g: &Graph, depth: usize, after: &str, inferences: &mut Vec<Inference>) {
        if self.stats {
            eprintln!(
                "reinfer: graph '{}' (depth {depth}), {after}: unchanged, not inferred again",
                g.name
            );
        }
        inferences.push(Inference { after: after.to_owned(), visited: 0, ran: 0 });
    }

    /// Notes how many nodes `inferred` (begun at `start`) ran the rules of,
    /// and prints it with the time it took under `stats`.
    fn report(
        self,
        g: &Graph,
        depth: usize,
        after: &str,
        inferred: &Inferred,
        start: std::time::Instant,
        inferences: &mut Vec<Inference>,
    ) {
        let took = start.elapsed();
        let Some((visited, ran)) = inferred.visit_counts() else { return };
        if self.stats {
            eprintln!(
                "reinfer: graph '{}' (depth {depth}), {after}: {ran} of {visited} nodes inferred \
                 in {:.3} ms",
                g.name,
                took.as_secs_f64() * 1e3
            );
        }
        inferences.push(Inference { after: after.to_owned(), visited, ran });
    }
}

/// A stage's name: its passes' names.
fn stage_name(stage: &[Pass]) -> String {
    stage.iter().map(|p| p.name).collect::<Vec<_>>().join(" + ")
}

/// What the rewriting passes did, for the summary (which still describes
/// the model as written).
#[derive(Default)]
struct Changes {
    fused: Vec<super::fuse::Fused>,
    rewrites: Vec<super::optimize::Rewrite>,
}

/// A pass after inference: it rewrites the graph or records decisions in
/// its nodes' [`Lowering`](crate::ir::Lowering), reading the types and
/// constants of the last inference. It need not say what it changed:
/// re-inference finds out.
struct Pass {
    name: &'static str,
    run: fn(&mut Graph, &Inferred, &Config, &mut Changes),
}

/// The passes after the first inference, in stages: the passes of a stage
/// read the same inference, and the graph is inferred again (incrementally)
/// after each stage (the next stage needs the new weights and types). The
/// pipeline stops at the first stage that finds inference incomplete.
const PIPELINE: &[&[Pass]] = &[
    // Quantized (QDQ) regions around Convs and products into the integer
    // operators that compute them, on int8 values.
    &[Pass { name: "integer-regions", run: integer_regions }],
    // Graph rewrites into fewer, larger ops (zero Pads and BatchNorms into
    // Convs and Gemms, transposes and biases into MatMuls, GELU, SiLU,
    // LayerNorm and softmax prologues recognised); LSTM weights regrouped;
    // activations freed by those rewrites fused into their products.
    &[
        Pass { name: "optimize", run: optimize },
        Pass { name: "pack-lstm-weights", run: pack_lstm_weights },
        Pass { name: "fuse-activations", run: fuse_activations },
    ],
    // Activations into the BatchNormalizations that did not fold.
    &[Pass { name: "fuse-batch-norm-activations", run: fuse_batch_norm_activations }],
    // Weight layouts, on the final weights: Winograd first, then panels
    // for the other Convs and strips for the products.
    &[
        Pass { name: "winograd", run: winograd },
        Pass { name: "pack-conv-weights", run: pack_conv_weights },
        Pass { name: "pack-conv-transpose-weights", run: pack_conv_transpose_weights },
        Pass { name: "pack-matmul-weights", run: pack_matmul_weights },
        Pass { name: "pack-int8-weights", run: pack_int8_weights },
    ],
    // Residuals and smooth activations into the products' epilogues;
    // quantized residual Adds into the int8 convolutions' output stages;
    // float inputs and outputs of int8 dense layers into their products.
    &[
        Pass { name: "fuse-epilogues", run: fuse_epilogues },
        Pass { name: "fuse-integer-residuals", run: fuse_integer_residuals },
        Pass { name: "fuse-integer-ends", run: fuse_integer_ends },
    ],
];

fn integer_regions(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) {
    changes.rewrites.extend(super::qdq::integer_regions(g, inferred));
}

fn optimize(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) {
    changes.rewrites.extend(super::optimize::optimize(g, inferred));
}

fn pack_lstm_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) {
    super::optimize::pack_lstm_weights(g, inferred);
}

fn fuse_activations(g: &mut Graph, _: &Inferred, _: &Config, changes: &mut Changes) {
    changes.fused.extend(super::fuse::fuse_activations(g));
}

fn fuse_batch_norm_activations(g: &mut Graph, _: &Inferred, _: &Config, changes: &mut Changes) {
    changes.fused.extend(super::fuse::fuse_batch_norm_activations(g));
}

fn winograd(g: &mut Graph, inferred: &Inferred, config: &Config, _: &mut Changes) {
    if config.winograd {
        super::optimize::winograd_convs(g, inferred);
    }
}

fn pack_conv_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) {
    super::optimize::pack_conv_weights(g, inferred);
}

fn pack_conv_transpose_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) {
    super::optimize::pack_conv_transpose_weights(g, inferred);
}

fn pack_matmul_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) {
    super::optimize::pack_matmul_weights(g, inferred);
}

fn pack_int8_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) {
    super::optimize::pack_int8_weights(g, inferred);
}

fn fuse_epilogues(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) {
    changes.fused.extend(super::fuse::fuse_epilogues(g, inferred));
}

fn fuse_integer_residuals(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) {
    changes.fused.extend(super::qdq::fuse_integer_residuals(g, inferred));
}

fn fuse_integer_ends(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) {
    changes.rewrites.extend(super::qdq::fuse_integer_ends(g, inferred));
}

/// How deeply bodies may nest (each level is compiled twice: once for
/// inference, once for lowering).
const MAX_NESTING: usize = 8;

/// The [`Compiler`] the rules of one graph see: it compiles their bodies
/// through this same pipeline, with the configuration of that graph (so
/// symbolic dimensions the user bound, `--dim`, hold there too), one level
/// deeper.
struct Subgraphs<'c> {
    config: &'c Config,
    depth: usize,
}

impl Compiler for Subgraphs<'_> {
    fn compile_subgraph(
        &self,
        graph: &Graph,
        seeds: &[Seed],
        what: &str,
    ) -> Result<Box<dyn CompiledGraph>, OpError> {
        if self.depth >= MAX_NESTING {
            return Err(OpError::Unsupported(format!(
                "control flow nested more than {MAX_NESTING} levels deep is not supported"
            )));
        }
        let mut graph = graph.clone();
        let Lowered { inferred, .. } = run_nested(&mut graph, self.config, seeds, self.depth + 1);
        if let Some(u) = inferred.unsupported.first() {
            return Err(OpError::Unsupported(format!(
                "in {what}, node {} ({}): {}",
                u.node, u.op_type, u.reason
            )));
        }
        if !inferred.errors.is_empty() {
            let all: Vec<String> = inferred.errors.iter().map(|d| d.message.clone()).collect();
            return Err(OpError::Invalid(format!("in {what}: {}", all.join("; "))));
        }
        for &o in &graph.outputs {
            if inferred.types.get(o.index()).is_none_or(Option::is_none) {
                return Err(OpError::Invalid(format!(
                    "the type of output '{}' of body '{}' could not be inferred",
                    graph.value(o).name,
                    graph.name
                )));
            }
        }
        let plan = super::plan::plan(&graph, &inferred);
        Ok(Box::new(Body { graph, inferred, plan }))
    }
}

/// A compiled control-flow body: its graph, inferred and planned.
struct Body {
    graph: Graph,
    inferred: Inferred,
    plan: super::plan::Plan,
}

impl CompiledGraph for Body {
    fn output_types(&self) -> Vec<TensorType> {
        self.graph
            .outputs
            .iter()
            .filter_map(|v| self.inferred.types.get(v.index()).cloned().flatten())
            .collect()
    }

    fn constant_outputs(&self) -> Option<Vec<Tensor>> {
        self.graph
            .outputs
            .iter()
            .map(|v| self.inferred.constants.get(v.index()).cloned().flatten())
            .collect()
    }

    fn arena_bytes(&self) -> usize {
        self.plan.arena_bytes
    }

    fn reads_capture(&self, c: ValueId) -> bool {
        self.inferred.constants.get(c.index()).is_some_and(Option::is_none)
    }

    fn tokens(
        &self,
        inputs: Vec<proc_macro2::Ident>,
        outputs: Vec<proc_macro2::Ident>,
        rt: &proc_macro2::TokenStream,
    ) -> Result<proc_macro2::TokenStream, String> {
        crate::emit::emit_body(&self.graph, &self.inferred, &self.plan, inputs, outputs, rt)
    }
}

#[cfg(test)]
mod tests {
    //! Each model goes through the pipeline, whose every re-inference is
    //! compared with inference from scratch in tests (`run_nested` panics on
    //! a difference); these check too that re-inference ran only the rules
    //! of the nodes a stage changed and of those downstream whose inputs
    //! changed. Each model has an unrelated tail (`t1` to `t`) that no pass
    //! touches.
    use super::{Config, Lowered, run};
    use crate::ir::lowering::ConvWeights;
    use crate::ir::{Graph, Lowering};

    const TAIL: &str = "t1 = Neg (u)\n t2 = Abs (t1)\n t = Sigmoid (t2)";

    /// The pipeline over `graph` (text syntax) in a model of the default
    /// domain at `opset`, with Winograd allowed.
    fn lower(opset: u32, graph: &str) -> (Graph, Lowered) {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
        let mut prepared = crate::passes::prepare(&model).expect("test model is valid");
        let config = Config { winograd: true, ..Config::default() };
        let lowered = run(&mut prepared.model.graph, &config, &[]);
        let i = &lowered.inferred;
        assert!(i.is_complete(), "{:?} {:?}", i.errors, i.unsupported);
        (prepared.model.graph, lowered)
    }

    /// Per inference: how many nodes it visited, and ran the rules of.
    fn counts(l: &Lowered) -> Vec<(usize, usize)> {
        l.inferences.iter().map(|i| (i.visited, i.ran)).collect()
    }

    /// `n` small f32 values, as a tensor literal's contents.
    fn floats(n: usize, seed: usize) -> String {
        let v: Vec<String> =
            (0..n).map(|i| format!("{}", ((i * 7 + seed * 13) % 17) as f32 / 16.0 - 0.5)).collect();
        v.join(", ")
    }

    fn ops(g: &Graph) -> Vec<&str> {
        g.nodes().map(|(_, n)| n.op.op_type.as_str()).collect()
    }

    fn lowering<'g>(g: &'g Graph, op: &str) -> &'g Lowering {
        let (_, n) = g.nodes().find(|(_, n)| n.op.op_type == op).expect("the node is there");
        n.lowering.as_ref().expect("the node is lowered")
    }

    #[test]
    fn conv_batch_norm_relu_fold_into_one_conv() {
        let (w, b) = (floats(4, 1), floats(2, 2));
        let (g, l) = lower(
            15,
            &format!(
                "g (float[1, 2, 4, 4] x, float[1, 3] u) => (float[1, 2, 4, 4] y, float[1, 3] t)
                 <float[2, 2, 1, 1] w = {{{w}}}, float[2] b = {{{b}}}, float[2] s = {{1.5, 0.5}},
                  float[2] sh = {{0.25, -1}}, float[2] m = {{0.5, 0}}, float[2] v = {{3, 0.25}}>
                 {{\n c = Conv (x, w, b)\n n = BatchNormalization (c, s, sh, m, v)\n y = Relu (n)\n {TAIL}\n}}"
            ),
        );
        assert_eq!(ops(&g), ["Conv", "Neg", "Abs", "Sigmoid"]);
        assert!(
            matches!(lowering(&g, "Conv"), Lowering::Conv(c) if c.epilogue.activation.is_some())
        );
        // The BatchNormalization folds and the Relu fuses (stage 2): only the
        // Conv, which took their place, is inferred again; then its weights
        // are packed (stage 4).
        assert_eq!(counts(&l), [(6, 6), (0, 0), (4, 1), (0, 0), (4, 1), (0, 0)]);
    }

    #[test]
    fn a_bias_add_folds_into_a_matmul_whose_b_is_packed() {
        let (w, b) = (floats(8 * 32, 3), floats(32, 4));
        let (g, l) = lower(
            13,
            &format!(
                "g (float[2, 8] x, float[1, 3] u) => (float[2, 32] y, float[1, 3] t)
                 <float[8, 32] w = {{{w}}}, float[32] b = {{{b}}}>
                 {{\n m = MatMul (x, w)\n a = Add (m, b)\n y = Relu (a)\n {TAIL}\n}}"
            ),
        );
        assert_eq!(ops(&g), ["MatMul", "Neg", "Abs", "Sigmoid"]);
        let Lowering::Product(p) = lowering(&g, "MatMul") else { panic!("a product") };
        assert!(p.bias.is_some() && p.packed_b.is_some() && p.epilogue.activation.is_some());
        // The Add folds (stage 2), B is packed (stage 4), the Relu goes into
        // the epilogue (stage 5): each time, only the MatMul runs its rule.
        assert_eq!(counts(&l), [(6, 6), (0, 0), (5, 1), (0, 0), (5, 1), (4, 1)]);
    }

    #[test]
    fn a_gemm_takes_its_b_in_strips() {
        let (w, c) = (floats(32 * 16, 5), floats(32, 6));
        let (g, l) = lower(
            13,
            &format!(
                "g (float[4, 16] x, float[1, 3] u) => (float[4, 32] y, float[1, 3] t)
                 <float[32, 16] w = {{{w}}}, float[32] c = {{{c}}}>
                 {{\n y = Gemm <transB: int = 1> (x, w, c)\n {TAIL}\n}}"
            ),
        );
        let Lowering::Product(p) = lowering(&g, "Gemm") else { panic!("a product") };
        assert!(p.packed_b.is_some());
        assert_eq!(counts(&l), [(4, 4), (0, 0), (0, 0), (0, 0), (4, 1), (0, 0)]);
    }

    #[test]
    fn a_3x3_conv_runs_by_winograd() {
        // The pooled-from input frees arena room for the transforms' scratch.
        let w = floats(32 * 32 * 9, 7);
        let (g, l) = lower(
            13,
            &format!(
                "g (float[1, 32, 32, 32] x, float[1, 3] u) => (float[1, 32, 16, 16] y, float[1, 3] t)
                 <float[32, 32, 3, 3] w = {{{w}}}>
                 {{\n n = Neg (x)\n p = MaxPool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (n)
                   c = Conv <pads: ints = [1, 1, 1, 1]> (p, w)\n y = Relu (c)\n {TAIL}\n}}"
            ),
        );
        assert!(matches!(
            lowering(&g, "Conv"),
            Lowering::Conv(c) if matches!(c.weights, ConvWeights::Winograd { .. })
        ));
        // The Relu fuses before the first inference.
        assert_eq!(counts(&l), [(6, 6), (0, 0), (0, 0), (0, 0), (6, 1), (0, 0)]);
    }

    #[test]
    fn a_residual_add_and_relu_fuse_into_the_conv_epilogue() {
        let w = floats(16 * 16, 8);
        let (g, l) = lower(
            13,
            &format!(
                "g (float[1, 16, 4, 4] x, float[1, 3] u) => (float[1, 16, 4, 4] y, float[1, 3] t)
                 <float[16, 16, 1, 1] w = {{{w}}}>
                 {{\n c = Conv (x, w)\n a = Add (c, x)\n y = Relu (a)\n {TAIL}\n}}"
            ),
        );
        assert_eq!(ops(&g), ["Conv", "Neg", "Abs", "Sigmoid"]);
        let Lowering::Conv(c) = lowering(&g, "Conv") else { panic!("a conv") };
        assert!(c.epilogue.residual.is_some() && c.epilogue.activation.is_some());
        assert_eq!(counts(&l), [(6, 6), (0, 0), (0, 0), (0, 0), (6, 1), (4, 1)]);
    }

    #[test]
    fn lstm_weights_are_regrouped() {
        let (w, r) = (floats(12 * 2, 9), floats(12 * 3, 10));
        let (g, l) = lower(
            14,
            &format!(
                "g (float[2, 1, 2] x, float[1, 3] u) => (float[2, 1, 1, 3] y, float[1, 3] t)
                 <float[1, 12, 2] w = {{{w}}}, float[1, 12, 3] r = {{{r}}}>
                 {{\n y, yh, yc = LSTM <hidden_size: int = 3> (x, w, r)\n {TAIL}\n}}"
            ),
        );
        assert!(matches!(lowering(&g, "LSTM"), Lowering::Lstm { .. }));
        assert_eq!(counts(&l), [(4, 4), (0, 0), (4, 1), (0, 0), (0, 0), (0, 0)]);
    }

    #[test]
    fn reinference_runs_the_changed_nodes_and_those_whose_inputs_changed() {
        use crate::ir::{AttrValue, Graph};
        use crate::passes::infer::{Inferred, difference, infer_graph, reinfer_graph};
        // A Range of run-time length (unsupported) and a declared output
        // keep their reports through replays, in order.
        let src = "<ir_version: 8, opset_import: [\"\" : 17]>
            g (float[2, 3] x, float n, float[6] w) => (float[3, 2] y, float[6] s) {
              zero = Constant <value: tensor = float {0}> ()
              one = Constant <value: tensor = float {1}> ()
              r = Range (zero, n, one)
              s = Add (r, w)
              a = Neg (x)
              b = Transpose <perm: ints = [1, 0]> (a)
              y = LeakyRelu <alpha: float = 0.5> (b)
            }";
        let model = crate::text::parse_model(src, "t.onnxtxt").expect("parses");
        let mut g = crate::passes::prepare(&model).expect("valid").model.graph;
        let config = Config::default();
        let compiler = super::Subgraphs { config: &config, depth: 0 };
        let opts = &config.infer;
        let full = |g: &Graph| infer_graph(g, opts, &[], &compiler);
        let again = |g: &Graph, previous: Inferred| {
            let i = reinfer_graph(g, opts, &[], &compiler, previous);
            assert_eq!(difference(g, &i, &full(g)), None);
            let ran = i.visit_counts().expect("recorded").1;
            (i, ran)
        };
        let node = |g: &Graph, op: &str| g.nodes().find(|(_, n)| n.op.op_type == op).unwrap().0;
        let first = full(&g);
        assert_eq!(first.unsupported.len(), 1);
        // Nothing changed: nothing runs.
        let (same, ran) = again(&g, first);
        assert_eq!(ran, 0);
        // A new attribute: that node alone.
        let leaky = node(&g, "LeakyRelu");
        g.node_mut(leaky).attributes[0].value = AttrValue::Float(0.25);
        let (alpha, ran) = again(&g, same);
        assert_eq!(ran, 1);
        // Another output type: the node and its reader, which now disagrees
        // with the declared type.
        let t = node(&g, "Transpose");
        g.node_mut(t).attributes[0].value = AttrValue::Ints(vec![0, 1]);
        let (perm, ran) = again(&g, alpha);
        assert_eq!(ran, 2);
        assert_eq!(perm.errors.len(), 1, "{:?}", perm.errors);
        assert_eq!(perm.unsupported.len(), 1);
        // A node removed, its reader rewired to the same type: the reader
        // alone; the removed node's output is left untyped.
        let (neg, x, a) = (node(&g, "Neg"), g.inputs[0], g.value_by_name("a").unwrap());
        g.replace_uses(a, x);
        g.retain_nodes(|id, _| id != neg);
        let (removed, ran) = again(&g, perm);
        assert_eq!(ran, 1);
        assert!(removed.types[a.index()].is_none());
        // The check is not vacuous: inferences of different graphs differ.
        g.node_mut(t).attributes[0].value = AttrValue::Ints(vec![1, 0]);
        assert!(difference(&g, &removed, &full(&g)).is_some());
    }

    #[test]
    fn if_bodies_go_through_the_same_pipeline() {
        // Each branch is compiled by the If's rule through `run_nested`, so
        // its re-inferences are checked like the main graph's.
        let (w, b) = (floats(4, 11), floats(2, 12));
        let branch = |name: &str, act: &str| {
            format!(
                "graph = {name} () => (float[1, 2, 4, 4] o) {{
                   c = Conv (x, w, b)
                   n = BatchNormalization (c, s, sh, m, v)
                   o = {act} (n)
                 }}"
            )
        };
        let (g, l) = lower(
            15,
            &format!(
                "g (bool k, float[1, 2, 4, 4] x, float[1, 3] u) => (float[1, 2, 4, 4] y, float[1, 3] t)
                 <float[2, 2, 1, 1] w = {{{w}}}, float[2] b = {{{b}}}, float[2] s = {{1.5, 0.5}},
                  float[2] sh = {{0.25, -1}}, float[2] m = {{0.5, 0}}, float[2] v = {{3, 0.25}}>
                 {{\n y = If (k) <then_branch: {}, else_branch: {}>\n {TAIL}\n}}",
                branch("then", "Relu"),
                branch("else", "Sigmoid")
            ),
        );
        assert_eq!(ops(&g), ["If", "Neg", "Abs", "Sigmoid"]);
        assert_eq!(counts(&l), [(4, 4), (0, 0), (0, 0), (0, 0), (0, 0), (0, 0)]);
    }
}
