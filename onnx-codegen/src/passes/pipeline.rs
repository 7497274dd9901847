//! The pipeline after validation: inference and the rewriting passes, in
//! stages, over the main graph and, through the same code, over every
//! control-flow body (the rules compile their bodies through this module).

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
}

/// Runs the pipeline over `g` (a main graph: no seeds), rewriting it in place.
pub fn run(g: &mut Graph, config: &Config, seeds: &[Seed]) -> Lowered {
    run_nested(g, config, seeds, 0)
}

/// Inference alone over a main graph `g` (its bodies still go through the
/// whole pipeline): the graph as written, for tests and tools.
pub fn infer(g: &Graph, config: &Config) -> Inferred {
    infer::infer_graph(g, &config.infer, &[], &Subgraphs { config, depth: 0 })
}

/// [`run`] for a graph nested `depth` control-flow bodies deep.
fn run_nested(g: &mut Graph, config: &Config, seeds: &[Seed], depth: usize) -> Lowered {
    let compiler = Subgraphs { config, depth };
    // Before inference: an activation needs no types to fuse into its product.
    let fused = super::fuse::fuse_activations(g);
    let mut changes = Changes { fused, rewrites: Vec::new() };
    let mut inferred = infer::infer_graph(g, &config.infer, seeds, &compiler);
    for stage in PIPELINE {
        if !inferred.is_complete() {
            break;
        }
        let mut changed = false;
        for pass in *stage {
            changed |= (pass.run)(g, &inferred, config, &mut changes);
        }
        if changed {
            inferred = infer::infer_graph(g, &config.infer, seeds, &compiler);
        }
    }
    let Changes { fused, rewrites } = changes;
    Lowered { inferred, fused, rewrites }
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
/// constants of the last inference, and says whether it changed anything.
struct Pass {
    #[allow(dead_code, reason = "names the pass for readers and debuggers")]
    name: &'static str,
    run: fn(&mut Graph, &Inferred, &Config, &mut Changes) -> bool,
}

/// The passes after the first inference, in stages: the passes of a stage
/// read the same inference, and the graph is inferred again after a stage
/// that changed it (the next stage needs the new weights and types). The
/// pipeline stops at the first stage that finds inference incomplete.
const PIPELINE: &[&[Pass]] = &[
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
        Pass { name: "pack-matmul-weights", run: pack_matmul_weights },
    ],
    // Residuals and smooth activations into the products' epilogues.
    &[Pass { name: "fuse-epilogues", run: fuse_epilogues }],
];

fn optimize(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) -> bool {
    let done = super::optimize::optimize(g, inferred);
    let changed = !done.is_empty();
    changes.rewrites.extend(done);
    changed
}

fn pack_lstm_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) -> bool {
    super::optimize::pack_lstm_weights(g, inferred) > 0
}

fn fuse_activations(g: &mut Graph, _: &Inferred, _: &Config, changes: &mut Changes) -> bool {
    let done = super::fuse::fuse_activations(g);
    let changed = !done.is_empty();
    changes.fused.extend(done);
    changed
}

fn fuse_batch_norm_activations(
    g: &mut Graph,
    _: &Inferred,
    _: &Config,
    changes: &mut Changes,
) -> bool {
    let done = super::fuse::fuse_batch_norm_activations(g);
    let changed = !done.is_empty();
    changes.fused.extend(done);
    changed
}

fn winograd(g: &mut Graph, inferred: &Inferred, config: &Config, _: &mut Changes) -> bool {
    config.winograd && super::optimize::winograd_convs(g, inferred) > 0
}

fn pack_conv_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) -> bool {
    super::optimize::pack_conv_weights(g, inferred) > 0
}

fn pack_matmul_weights(g: &mut Graph, inferred: &Inferred, _: &Config, _: &mut Changes) -> bool {
    super::optimize::pack_matmul_weights(g, inferred) > 0
}

fn fuse_epilogues(g: &mut Graph, inferred: &Inferred, _: &Config, changes: &mut Changes) -> bool {
    let done = super::fuse::fuse_epilogues(g, inferred);
    let changed = !done.is_empty();
    changes.fused.extend(done);
    changed
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
