//! Walking every tensor of a model: initializers, sparse initializers,
//! attribute tensors (`Constant` values and the like) in every graph, subgraph,
//! function body and training graph.

use crate::{AttributeProto, GraphProto, ModelProto, SparseTensorProto, TensorProto};

/// Where a tensor sits, outermost first: graph names, `node/attribute` steps,
/// function names. Used to name the tensor in messages.
pub type TensorPath<'a> = &'a [String];

/// Calls `f` on every tensor of `model`, with the path that leads to it.
///
/// Recursion follows the nesting of graphs in attributes; decoded models are
/// bounded by the protobuf decoder's recursion limit (100), and parsed text
/// models by the parser's own depth limit.
pub fn for_each_tensor_mut(
    model: &mut ModelProto,
    f: &mut dyn FnMut(&mut TensorProto, TensorPath<'_>),
) {
    let mut path = Vec::new();
    if let Some(graph) = &mut model.graph {
        graph_tensors(graph, &mut path, f);
    }
    for function in &mut model.functions {
        path.push(format!("function '{}'", function.name()));
        for node in &mut function.node {
            path.push(node_step(node.name(), node.op_type()));
            for attr in &mut node.attribute {
                attribute_tensors(attr, &mut path, f);
            }
            path.pop();
        }
        for attr in &mut function.attribute_proto {
            attribute_tensors(attr, &mut path, f);
        }
        path.pop();
    }
    for (k, info) in model.training_info.iter_mut().enumerate() {
        for (part, graph) in
            [("initialization", &mut info.initialization), ("algorithm", &mut info.algorithm)]
        {
            if let Some(graph) = graph {
                path.push(format!("training_info[{k}].{part}"));
                graph_tensors(graph, &mut path, f);
                path.pop();
            }
        }
    }
}

fn node_step(name: &str, op_type: &str) -> String {
    format!("node '{name}' ({op_type})")
}

fn graph_tensors(
    graph: &mut GraphProto,
    path: &mut Vec<String>,
    f: &mut dyn FnMut(&mut TensorProto, TensorPath<'_>),
) {
    path.push(format!("graph '{}'", graph.name()));
    for tensor in &mut graph.initializer {
        f(tensor, path);
    }
    for sparse in &mut graph.sparse_initializer {
        sparse_tensors(sparse, path, f);
    }
    for node in &mut graph.node {
        path.push(node_step(node.name(), node.op_type()));
        for attr in &mut node.attribute {
            attribute_tensors(attr, path, f);
        }
        path.pop();
    }
    path.pop();
}

fn sparse_tensors(
    sparse: &mut SparseTensorProto,
    path: &[String],
    f: &mut dyn FnMut(&mut TensorProto, TensorPath<'_>),
) {
    for tensor in [&mut sparse.values, &mut sparse.indices].into_iter().flatten() {
        f(tensor, path);
    }
}

fn attribute_tensors(
    attr: &mut AttributeProto,
    path: &mut Vec<String>,
    f: &mut dyn FnMut(&mut TensorProto, TensorPath<'_>),
) {
    path.push(format!("attribute '{}'", attr.name()));
    if let Some(t) = &mut attr.t {
        f(t, path);
    }
    for t in &mut attr.tensors {
        f(t, path);
    }
    if let Some(s) = &mut attr.sparse_tensor {
        sparse_tensors(s, path, f);
    }
    for s in &mut attr.sparse_tensors {
        sparse_tensors(s, path, f);
    }
    if let Some(g) = &mut attr.g {
        graph_tensors(g, path, f);
    }
    for g in &mut attr.graphs {
        graph_tensors(g, path, f);
    }
    path.pop();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FunctionProto, NodeProto};

    fn tensor(name: &str) -> TensorProto {
        TensorProto { name: Some(name.into()), ..Default::default() }
    }

    #[test]
    fn visits_tensors_everywhere_with_paths() {
        let inner = GraphProto {
            name: Some("then".into()),
            initializer: vec![tensor("deep")],
            ..Default::default()
        };
        let node = NodeProto {
            name: Some("if0".into()),
            op_type: Some("If".into()),
            attribute: vec![AttributeProto {
                name: Some("then_branch".into()),
                g: Some(Box::new(inner)),
                ..Default::default()
            }],
            ..Default::default()
        };
        let constant = NodeProto {
            op_type: Some("Constant".into()),
            attribute: vec![AttributeProto {
                name: Some("value".into()),
                t: Some(Box::new(tensor("c"))),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut model = ModelProto {
            graph: Some(GraphProto {
                name: Some("main".into()),
                initializer: vec![tensor("w")],
                sparse_initializer: vec![SparseTensorProto {
                    values: Some(tensor("sv")),
                    indices: Some(tensor("si")),
                    dims: vec![],
                }],
                node: vec![node],
                ..Default::default()
            }),
            functions: vec![FunctionProto {
                name: Some("f".into()),
                node: vec![constant],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut seen = Vec::new();
        for_each_tensor_mut(&mut model, &mut |t, path| {
            seen.push(format!("{} @ {}", t.name(), path.join(" > ")));
        });
        assert_eq!(
            seen,
            [
                "w @ graph 'main'",
                "sv @ graph 'main'",
                "si @ graph 'main'",
                "deep @ graph 'main' > node 'if0' (If) > attribute 'then_branch' > graph 'then'",
                "c @ function 'f' > node '' (Constant) > attribute 'value'",
            ]
        );
    }
}
