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
pub const HARD_MAX_DEPTH: usize = crate::passes::validate::MAX_DEPTH - 1;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AttributeProto, FunctionProto, GraphProto};

    /// A node holding `inner` as its `then_branch`, `levels` times over.
    fn nested(levels: usize) -> ModelProto {
        let mut graph = GraphProto {
            node: vec![NodeProto { op_type: Some("Relu".into()), ..Default::default() }],
            ..Default::default()
        };
        for _ in 0..levels {
            let attr = AttributeProto {
                name: Some("then_branch".into()),
                g: Some(Box::new(graph)),
                ..Default::default()
            };
            graph = GraphProto {
                node: vec![NodeProto {
                    op_type: Some("If".into()),
                    attribute: vec![attr],
                    ..Default::default()
                }],
                ..Default::default()
            };
        }
        ModelProto { graph: Some(graph), ..Default::default() }
    }

    #[test]
    fn nodes_and_levels_are_counted_everywhere() {
        let mut m = nested(3);
        m.functions.push(FunctionProto {
            node: vec![NodeProto::default(), NodeProto::default()],
            ..Default::default()
        });
        let limits = Limits { max_nodes: 6, max_depth: 3, ..Limits::DEFAULT };
        assert!(check_model(&m, &limits).is_ok());
        let tight = Limits { max_nodes: 5, max_depth: 2, ..Limits::DEFAULT };
        let err = check_model(&m, &tight).unwrap_err().to_string();
        assert!(err.contains("the model has 6 nodes, over the limit of 5 nodes"), "{err}");
        assert!(err.contains("subgraphs are nested 3 levels deep, over the limit of 2 levels"));
    }

    #[test]
    fn the_depth_limit_cannot_pass_the_hard_limit() {
        let m = nested(HARD_MAX_DEPTH + 1);
        let loose = Limits { max_depth: usize::MAX, ..Limits::DEFAULT };
        let err = check_model(&m, &loose).unwrap_err().to_string();
        assert!(err.contains(&format!("over the limit of {HARD_MAX_DEPTH} levels")), "{err}");
    }
}
