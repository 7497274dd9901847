//! Graph inputs that have an initializer of the same name: the IR spec
//! calls the initializer that input's default value, and lets a runtime
//! either take the input from the caller or use the default.
//!
//! Models of IR version 3 and older list every initializer as a graph input
//! (the IR then required it), weights included, so reading those inputs
//! from the caller would make every weight an argument of `run`. There, an
//! input with an initializer is a constant (folded, its bytes among the
//! weights) unless the user names it a run-time input
//! ([`Options::runtime_inputs`](crate::generate::Options::runtime_inputs),
//! `--runtime-input`). From IR version 4 on, a model lists an initializer
//! as an input only when it means the caller to be able to override it:
//! such inputs stay inputs of `run` (the caller passes a value; the
//! default is what a test harness passes when the data gives none).
//!
//! Subgraphs of IR 3 models may list initializers as inputs too, after the
//! inputs their operator binds (the IR spec: constants, not inputs the node
//! passes); they become constants whatever the options say.

use crate::diag::Diagnostic;
use crate::ir::{Dim, Graph, Model, Type, ValueId, ValueKind};
use std::collections::BTreeSet;

/// The first IR version in which inputs with an initializer stay inputs.
pub const OVERRIDABLE_FROM_IR: i64 = 4;

/// Whether a main-graph input with an initializer stays an input of the
/// generated `run` (see the module doc): from IR version 4 on, or when the
/// user named it.
pub fn stays_input(ir_version: i64, name: &str, runtime_inputs: &BTreeSet<String>) -> bool {
    ir_version >= OVERRIDABLE_FROM_IR || runtime_inputs.contains(name)
}

/// Turns the inputs with an initializer that do not stay inputs into
/// constants, in the main graph and (for IR versions below 4) in every
/// subgraph. Errors name every run-time input the user asked for that is
/// not an input with an initializer, and every default that contradicts
/// its input's declared type; the model is then left as it was.
pub fn resolve(
    model: &mut Model,
    runtime_inputs: &BTreeSet<String>,
) -> Result<(), Vec<Diagnostic>> {
    let g = &model.graph;
    let mut problems: Vec<Diagnostic> = runtime_inputs
        .iter()
        .filter_map(|name| not_a_default_input(g, name))
        .map(Diagnostic::error)
        .collect();
    let ir = model.ir_version;
    let constant = |g: &Graph, v: ValueId| !stays_input(ir, &g.value(v).name, runtime_inputs);
    let main = defaults(g).into_iter().filter(|&v| constant(g, v)).collect::<Vec<_>>();
    for &v in &main {
        if let Some(p) = contradiction(g, v) {
            problems.push(Diagnostic::error(p));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    make_constant(&mut model.graph, &main);
    if ir < OVERRIDABLE_FROM_IR {
        subgraph_defaults(&mut model.graph, &mut problems);
    }
    if problems.is_empty() { Ok(()) } else { Err(problems) }
}

/// The inputs of `g` with an initializer, in order.
fn defaults(g: &Graph) -> Vec<ValueId> {
    g.inputs
        .iter()
        .copied()
        .filter(|&v| matches!(g.value(v).kind, ValueKind::Input { default: Some(_) }))
        .collect()
}

/// Why `name` cannot be a run-time input of `g`, if it cannot.
fn not_a_default_input(g: &Graph, name: &str) -> Option<String> {
    let why = match g.value_by_name(name).map(|v| (g.inputs.contains(&v), &g.value(v).kind)) {
        Some((true, ValueKind::Input { default: Some(_) })) => return None,
        Some((true, _)) => "is an input without an initializer (it is a run-time input already)",
        Some((false, ValueKind::Initializer(_))) => {
            "is an initializer that is not a graph input (the model makes it a constant, not \
             something a caller may set)"
        }
        Some(_) => "is not a graph input",
        None => "is not a value of the graph",
    };
    Some(format!(
        "'{name}' is asked to be a run-time input (--runtime-input), but in graph '{}' it {why}; \
         only a graph input with an initializer can be",
        g.name
    ))
}

/// Why the default of input `v` contradicts the input's declared type.
fn contradiction(g: &Graph, v: ValueId) -> Option<String> {
    let value = g.value(v);
    let ValueKind::Input { default: Some(t) } = &value.kind else { return None };
    let Some(Type::Tensor { elem, shape }) = &value.ty else {
        return value.ty.as_ref().map(|ty| {
            format!(
                "input '{}' of graph '{}' is declared {ty} but its initializer is a tensor",
                value.name, g.name
            )
        });
    };
    if elem.is_some_and(|e| e != t.elem) {
        return Some(format!(
            "input '{}' of graph '{}' is declared {} but its initializer holds {} values",
            value.name,
            g.name,
            value.ty.as_ref().map(ToString::to_string).unwrap_or_default(),
            t.elem
        ));
    }
    let dims = shape.dims.as_deref()?;
    let fits = dims.len() == t.dims.len()
        && dims.iter().zip(&t.dims).all(|(d, &n)| match d {
            Dim::Static(s) => *s == n,
            Dim::Symbolic(_) | Dim::Unknown => true,
        });
    (!fits).then(|| {
        format!(
            "input '{}' of graph '{}' is declared {} but its initializer has shape {:?}",
            value.name,
            g.name,
            value.ty.as_ref().map(ToString::to_string).unwrap_or_default(),
            t.dims
        )
    })
}

/// Makes the inputs `list` of `g` constants holding their defaults.
fn make_constant(g: &mut Graph, list: &[ValueId]) {
    for &v in list {
        let value = g.value_mut(v);
        if let ValueKind::Input { default: Some(t) } = &mut value.kind {
            let t = std::mem::replace(t, crate::ir::Tensor::from_i64s("", vec![0], &[]));
            value.kind = ValueKind::Initializer(t);
            value.ty = None;
        }
    }
    g.inputs.retain(|v| !list.contains(v));
}

/// The IR 3 subgraph rule: every subgraph input with an initializer is a
/// constant.
fn subgraph_defaults(g: &mut Graph, problems: &mut Vec<Diagnostic>) {
    let order = g.order().to_vec();
    for id in order {
        let node = g.node_mut(id);
        for attr in &mut node.attributes {
            for sub in attr.value.graphs_mut() {
                let list = defaults(sub);
                let bad: Vec<String> = list.iter().filter_map(|&v| contradiction(sub, v)).collect();
                if bad.is_empty() {
                    make_constant(sub, &list);
                } else {
                    problems.extend(bad.into_iter().map(Diagnostic::error));
                }
                subgraph_defaults(sub, problems);
            }
        }
    }
}
