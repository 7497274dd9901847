//! Inlining of model-local functions.

mod ir_util;

use ir_util::*;
use onnx_codegen::diag::PathStep;
use onnx_codegen::ir::{AttrValue, Graph, Node};
use onnx_codegen::proto::{FunctionProto, ModelProto};

/// A model calling `local.F` as `y = F(x)` (extra nodes and attributes by the caller).
fn call_model(functions: Vec<FunctionProto>, call: onnx_codegen::proto::NodeProto) -> ModelProto {
    let mut m =
        model(graph("main", vec![call], vec![vi("x", FLOAT, &[2])], vec![vi("y", FLOAT, &[2])]));
    m.opset_import.push(opset("local", 1));
    m.functions = functions;
    m
}

fn ops(g: &Graph) -> Vec<String> {
    g.nodes().map(|(_, n)| n.op.op_type.clone()).collect()
}

fn only_node(g: &Graph, op: &str) -> Node {
    let found: Vec<&Node> = g.nodes().map(|(_, n)| n).filter(|n| n.op.op_type == op).collect();
    assert_eq!(found.len(), 1, "{op} in {:?}", ops(g));
    found[0].clone()
}

fn value_name(g: &Graph, v: Option<onnx_codegen::ir::ValueId>) -> String {
    g.value(v.unwrap()).name.clone()
}

#[test]
fn inlines_a_call_binding_inputs_and_outputs() {
    let f = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![node("Neg", &["a"], &["t"]), node("Relu", &["t"], &["b"])],
    );
    let p = ok(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local").named("call")));
    let g = &p.model.graph;
    assert!(p.model.functions.is_empty());
    assert_eq!(ops(g), ["Neg", "Relu"]);
    let neg = only_node(g, "Neg");
    let relu = only_node(g, "Relu");
    assert_eq!(value_name(g, neg.inputs[0]), "x");
    assert_eq!(relu.inputs[0], neg.outputs[0]);
    // The call's output keeps its name and stays the graph output.
    assert_eq!(value_name(g, relu.outputs[0]), "y");
    assert_eq!(g.outputs, vec![relu.outputs[0].unwrap()]);
    assert_eq!(relu.op.since_version(), 14);
}

#[test]
fn attribute_references_take_the_call_value_then_the_default_or_vanish() {
    let mut f = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![
            node("LeakyRelu", &["a"], &["t"]).attr(attr_ref("alpha", "slope", 1)),
            node("LeakyRelu", &["t"], &["u"]).attr(attr_ref("alpha", "slope2", 1)),
            node("LeakyRelu", &["u"], &["b"]).attr(attr_ref("alpha", "unset", 1)),
        ],
    );
    f.attribute = vec!["slope".into(), "unset".into()];
    f.attribute_proto = vec![attr_f("slope2", 0.25)];
    let call = node("F", &["x"], &["y"]).domain("local").attr(attr_f("slope", 0.5));
    let p = ok(&call_model(vec![f], call));
    let alphas: Vec<Option<AttrValue>> =
        p.model.graph.nodes().map(|(_, n)| n.attr("alpha").cloned()).collect();
    assert_eq!(alphas, [Some(AttrValue::Float(0.5)), Some(AttrValue::Float(0.25)), None]);
}

#[test]
fn call_values_override_defaults() {
    let mut f = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![node("LeakyRelu", &["a"], &["b"]).attr(attr_ref("alpha", "s", 1))],
    );
    f.attribute_proto = vec![attr_f("s", 0.25)];
    let call = node("F", &["x"], &["y"]).domain("local").attr(attr_f("s", 0.75));
    let p = ok(&call_model(vec![f], call));
    assert_eq!(only_node(&p.model.graph, "LeakyRelu").attr("alpha"), Some(&AttrValue::Float(0.75)));
}

#[test]
fn internal_names_are_made_unique() {
    // The body's temporary `t` clashes with the caller's `t`, and F is called twice.
    let f = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![node("Neg", &["a"], &["t"]), node("Relu", &["t"], &["b"])],
    );
    let mut m = call_model(vec![f], node("F", &["x"], &["t"]).domain("local").named("c1"));
    g(&mut m).node.push(node("F", &["t"], &["y"]).domain("local").named("c2"));
    let p = ok(&m);
    let g = &p.model.graph;
    let names: Vec<String> = g.nodes().map(|(_, n)| value_name(g, n.outputs[0])).collect();
    assert_eq!(names, ["c1_t", "t", "c2_t", "y"]);
    let node_names: Vec<&str> = g.nodes().map(|(_, n)| n.name.as_str()).collect();
    assert_eq!(node_names, ["", "", "", ""]);
    // Uses follow the renaming.
    let order: Vec<&Node> = g.nodes().map(|(_, n)| n).collect();
    assert_eq!(order[1].inputs[0], order[0].outputs[0]);
    assert_eq!(order[2].inputs[0], order[1].outputs[0]);
}

#[test]
fn functions_calling_functions_are_inlined_recursively() {
    let inner = function("local", "G", &["p"], &["q"], vec![node("Neg", &["p"], &["q"])]);
    let mut outer = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![node("G", &["a"], &["m"]).domain("local"), node("G", &["m"], &["b"]).domain("local")],
    );
    outer.opset_import.push(opset("local", 1));
    // F is listed before G: order in the model does not matter.
    let p = ok(&call_model(vec![outer, inner], node("F", &["x"], &["y"]).domain("local")));
    assert_eq!(ops(&p.model.graph), ["Neg", "Neg"]);
    let g = &p.model.graph;
    let last = g.nodes().last().unwrap().1;
    assert_eq!(value_name(g, last.outputs[0]), "y");
}

#[test]
fn recursion_is_an_error() {
    let mut f =
        function("local", "F", &["a"], &["b"], vec![node("F", &["a"], &["b"]).domain("local")]);
    f.opset_import.push(opset("local", 1));
    let d = diags(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local")));
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].message, "function 'F' calls itself; recursive functions cannot be inlined");
    assert_eq!(
        d[0].location.path,
        [PathStep::Function { domain: "local".into(), name: "F".into() }]
    );

    let mut f =
        function("local", "F", &["a"], &["b"], vec![node("G", &["a"], &["b"]).domain("local")]);
    f.opset_import.push(opset("local", 1));
    let mut g2 =
        function("local", "G", &["a"], &["b"], vec![node("F", &["a"], &["b"]).domain("local")]);
    g2.opset_import.push(opset("local", 1));
    assert_eq!(
        errors(&call_model(vec![f, g2], node("F", &["x"], &["y"]).domain("local"))),
        [
            "function 'F' calls itself through 'F' -> 'G' -> 'F'; recursive functions cannot be inlined"
        ]
    );
}

#[test]
fn absent_optional_actuals_stay_absent() {
    // F(a, lo) = Clip(a, lo): called without `lo`.
    let f = function("local", "F", &["a", "lo"], &["b"], vec![node("Clip", &["a", "lo"], &["b"])]);
    let p = ok(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local")));
    let clip = only_node(&p.model.graph, "Clip");
    assert_eq!(clip.inputs.len(), 2);
    assert_eq!(clip.inputs[1], None);
    let p = ok(&call_model(
        vec![function(
            "local",
            "F",
            &["a", "lo"],
            &["b"],
            vec![node("Clip", &["a", "lo"], &["b"])],
        )],
        node("F", &["x", ""], &["y"]).domain("local"),
    ));
    assert_eq!(only_node(&p.model.graph, "Clip").inputs[1], None);
}

#[test]
fn pass_through_outputs_become_identities() {
    let f = function("local", "F", &["a"], &["b"], vec![]);
    let mut m = call_model(vec![f], node("F", &["x"], &["y"]).domain("local"));
    // The body `b` is its input `a`: no node computes it.
    m.functions[0].output = vec!["a".into()];
    let p = ok(&m);
    let g = &p.model.graph;
    let id = only_node(g, "Identity");
    assert_eq!(value_name(g, id.inputs[0]), "x");
    assert_eq!(value_name(g, id.outputs[0]), "y");
}

#[test]
fn calls_inside_subgraphs_are_inlined() {
    let f = function("local", "F", &["a"], &["b"], vec![node("Neg", &["a"], &["b"])]);
    let then_branch = graph(
        "then",
        vec![node("F", &["x"], &["t"]).domain("local")],
        vec![],
        vec![vi_untyped("t")],
    );
    let else_branch =
        graph("else", vec![node("Identity", &["x"], &["e"])], vec![], vec![vi_untyped("e")]);
    let mut m = call_model(
        vec![f],
        node("If", &["b"], &["y"])
            .attr(attr_g("then_branch", then_branch))
            .attr(attr_g("else_branch", else_branch)),
    );
    g(&mut m).input.push(vi("b", BOOL, &[]));
    let p = ok(&m);
    let iff = only_node(&p.model.graph, "If");
    let then = &iff.attr("then_branch").unwrap().graphs()[0];
    assert_eq!(ops(then), ["Neg"]);
    let neg = only_node(then, "Neg");
    assert_eq!(value_name(then, neg.inputs[0]), "x");
    assert_eq!(then.outputs, vec![neg.outputs[0].unwrap()]);
}

#[test]
fn subgraphs_in_function_bodies_capture_the_bound_values() {
    // F(a, c) = If(c) then Neg(a) else Identity(a)
    let then_branch =
        graph("then", vec![node("Neg", &["a"], &["n"])], vec![], vec![vi_untyped("n")]);
    let else_branch =
        graph("else", vec![node("Identity", &["a"], &["i"])], vec![], vec![vi_untyped("i")]);
    let f = function(
        "local",
        "F",
        &["a", "c"],
        &["b"],
        vec![
            node("If", &["c"], &["b"])
                .attr(attr_g("then_branch", then_branch))
                .attr(attr_g("else_branch", else_branch)),
        ],
    );
    let mut m = call_model(vec![f], node("F", &["x", "b"], &["y"]).domain("local"));
    g(&mut m).input.push(vi("b", BOOL, &[]));
    let p = ok(&m);
    let main = &p.model.graph;
    let iff = only_node(main, "If");
    assert_eq!(value_name(main, iff.inputs[0]), "b");
    let then = &iff.attr("then_branch").unwrap().graphs()[0];
    let cap = then.captures[0];
    assert_eq!(then.value(cap).name, "x");
    assert_eq!(
        then.value(cap).kind,
        onnx_codegen::ir::ValueKind::Captured { outer: main.value_by_name("x").unwrap() }
    );
}

#[test]
fn function_validation() {
    // A function body resolves versions with its own imports.
    let mut f = function("local", "F", &["a"], &["b"], vec![node("Relu", &["a"], &["b"])]);
    f.opset_import = vec![opset("", 6)];
    let p = ok(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local")));
    assert_eq!(only_node(&p.model.graph, "Relu").op.since_version(), 6);

    let mut f =
        function("local", "F", &["a"], &["b"], vec![node("Relu", &["a"], &["b"]).named("r")]);
    f.opset_import.clear();
    assert_eq!(
        errors(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local"))),
        [
            "node 'r' (Relu) uses domain ai.onnx (the default domain), which function 'F' does not import"
        ]
    );

    let f = function(
        "local",
        "F",
        &["a"],
        &["b"],
        vec![node("LeakyRelu", &["a"], &["b"]).attr(attr_ref("alpha", "nope", 1))],
    );
    assert_eq!(
        errors(&call_model(vec![f], node("F", &["x"], &["y"]).domain("local"))),
        ["attribute 'alpha' refers to 'nope', which function 'F' does not declare"]
    );

    let f = function("local", "F", &["a"], &["b"], vec![node("Neg", &["a"], &["b"])]);
    assert_eq!(
        errors(&call_model(vec![f.clone(), f.clone()], node("F", &["x"], &["y"]).domain("local"))),
        ["function 'F' is defined more than once in domain 'local'"]
    );
    assert_eq!(
        errors(&call_model(
            vec![f.clone()],
            node("F", &["x", "x"], &["y"]).domain("local").named("c")
        )),
        ["node 'c' calls function 'F' with 2 inputs, but it takes 1"]
    );
    let mut m = call_model(vec![f.clone()], node("F", &["x"], &["y"]).domain("local").named("c"));
    m.opset_import.pop();
    assert_eq!(errors(&m), ["node 'c' (F) uses domain 'local', which the model does not import"]);
    assert_eq!(
        warnings(&call_model(
            vec![f],
            node("F", &["x"], &["y"]).domain("local").named("c").attr(attr_i("k", 1))
        )),
        ["node 'c' passes attribute 'k', which function 'F' does not declare; it is ignored"]
    );
}
