//! Limits on what a model may ask of the compiler and of the code it
//! generates. A model is untrusted input: without limits a small file could
//! demand an arena of terabytes, a million-node graph, or subgraphs nested
//! deep enough to exhaust the stack. Every refusal quotes the figure and the
//! limit, so the user can raise the limit if the model is really meant.
//!
//! The defaults admit every real model we know of with a wide margin; the
//! CLI (`--max-*` flags), [`crate::generate::Options`] and
//! [`crate::build::Build`] can change them.

use crate::diag::{Diagnostic, Error, Result};
use crate::proto::{ModelProto, NodeProto};

/// The hard ceiling on subgraph nesting: the lowering pass refuses deeper
/// models whatever [`Limits::max_depth`] says.
pub const HARD_MAX_DEPTH: usize = crate::passes::lower::MAX_DEPTH - 1;

/// Configurable limits. `Limits::default()` is what every entry point uses
/// unless told otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest arena (bytes of intermediate values alive at once).
    pub max_arena_bytes: usize,
    /// Largest total of the weights embedded in the generated code.
    pub max_weight_bytes: usize,
    /// Most nodes, counting subgraphs and function bodies, before and after
    /// inlining.
    pub max_nodes: usize,
    /// Deepest nesting of subgraphs (a graph attribute of a node of the main
    /// graph is at level 1). At most [`HARD_MAX_DEPTH`].
    pub max_depth: usize,
}

impl Limits {
    /// 1 GiB of arena, 4 GiB of weights, 100 000 nodes, 32 levels.
    pub const DEFAULT: Limits = Limits {
        max_arena_bytes: 1 << 30,
        max_weight_bytes: 4 << 30,
        max_nodes: 100_000,
        max_depth: 32,
    };
}

impl Default for Limits {
    fn default() -> Limits {
        Limits::DEFAULT
    }
}

/// Checks the node count and subgraph nesting of a decoded model before any
/// pass looks at it. The walk is iterative, so its own depth is bounded.
pub fn check_model(model: &ModelProto, limits: &Limits) -> Result<()> {
    let mut pending: Vec<(&[NodeProto], usize)> = Vec::new();
    if let Some(g) = &model.graph {
        pending.push((&g.node, 0));
    }
    for f in &model.functions {
        pending.push((&f.node, 0));
    }
    let mut nodes: usize = 0;
    let mut deepest = 0;
    while let Some((list, level)) = pending.pop() {
        nodes = nodes.saturating_add(list.len());
        deepest = deepest.max(level);
        for node in list {
            for attr in &node.attribute {
                if let Some(g) = &attr.g {
                    pending.push((&g.node, level + 1));
                }
                for g in &attr.graphs {
                    pending.push((&g.node, level + 1));
                }
            }
        }
    }
    let mut errors = Vec::new();
    if nodes > limits.max_nodes {
        errors.push(too_many_nodes(nodes, limits, ""));
    }
    let max_depth = limits.max_depth.min(HARD_MAX_DEPTH);
    if deepest > max_depth {
        errors.push(Diagnostic::error(format!(
            "subgraphs are nested {deepest} levels deep, over the limit of {max_depth} levels"
        )));
    }
    if errors.is_empty() { Ok(()) } else { Err(Error::new(errors)) }
}

/// Checks the node count once model-local functions are inlined.
pub fn check_prepared(model: &crate::ir::Model, limits: &Limits) -> Result<()> {
    let nodes = model.graph.total_node_count();
    if nodes > limits.max_nodes {
        return Err(too_many_nodes(nodes, limits, "once functions are inlined, ").into());
    }
    Ok(())
}

fn too_many_nodes(nodes: usize, limits: &Limits, when: &str) -> Diagnostic {
    Diagnostic::error(format!(
        "{when}the model has {nodes} nodes, over the limit of {} nodes",
        limits.max_nodes
    ))
}

/// The number of elements of a tensor with these dimensions, or `None` if
/// the product overflows `usize`.
pub fn checked_elements(dims: &[usize]) -> Option<usize> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// The bytes of `elements` elements of `elem_size` bytes, or `None` on
/// overflow.
pub fn checked_bytes(elements: usize, elem_size: usize) -> Option<usize> {
    elements.checked_mul(elem_size)
}
