//! Validation rules of lowering, one test per rule, with exact messages.

mod ir_util;

use ir_util::*;
use onnx_codegen::diag::PathStep;
use onnx_codegen::ir::{AttrValue, Dim, ElemType, Type, ValueKind};

#[test]
fn accepts_a_valid_model_and_resolves_versions() {
    let p = ok(&relu_model());
    assert!(p.warnings.is_empty());
    let g = &p.model.graph;
    let (_, relu) = g.nodes().next().unwrap();
    assert_eq!(relu.op.op_type, "Relu");
    assert_eq!(relu.op.since_version(), 14);
    assert_eq!(relu.op.opset_version, 17);
    let x = g.value_by_name("x").unwrap();
    assert_eq!(g.value(x).ty, Some(Type::tensor(ElemType::Float, &[2])));
    assert_eq!(relu.inputs, vec![Some(x)]);
    assert_eq!(g.outputs, vec![relu.outputs[0].unwrap()]);
}

#[test]
fn ir_version_must_be_present_and_sane() {
    let mut m = relu_model();
    m.ir_version = None;
    assert_eq!(errors(&m), ["the model has no ir_version"]);
    m.ir_version = Some(-3);
    assert_eq!(errors(&m), ["the model has ir_version -3, which is not a valid IR version"]);
    m.ir_version = Some(15);
    assert_eq!(
        warnings(&m),
        ["the model has ir_version 15, newer than the newest this compiler knows (14)"]
    );
}

#[test]
fn opset_versions_must_be_sane() {
    let mut m = relu_model();
    m.opset_import = vec![opset("", 0)];
    assert_eq!(
        errors(&m),
        [
            "the model imports domain ai.onnx (the default domain) at version 0; opset versions are between 1 and 1000",
            "node 'r' (Relu) uses domain ai.onnx (the default domain), which the model does not import",
        ]
    );
    m.opset_import = vec![opset("", 5000)];
    assert_eq!(
        errors(&m)[0],
        "the model imports domain ai.onnx (the default domain) at version 5000; opset versions are between 1 and 1000"
    );
    m.opset_import = vec![opset("", 13), opset("ai.onnx", 14)];
    assert_eq!(
        errors(&m),
        ["the model imports domain ai.onnx (the default domain) twice, at versions 13 and 14"]
    );
}

#[test]
fn unknown_and_too_new_and_deprecated_operators() {
    let mut m = relu_model();
    g(&mut m).node[0].op_type = Some("Frobnicate".into());
    assert_eq!(
        errors(&m),
        [
            "node 'r' uses operator 'Frobnicate', which is unknown in domain ai.onnx (the default domain)"
        ]
    );

    let mut m = relu_model();
    g(&mut m).node[0].op_type = Some("Gelu".into());
    assert_eq!(
        errors(&m),
        [
            "node 'r' uses operator 'Gelu', which does not exist at version 17 of domain ai.onnx (the default domain); it first appears in version 20"
        ]
    );

    let mut m = relu_model();
    g(&mut m).node[0] = node("Foo", &["x"], &["y"]).domain("com.example");
    assert_eq!(
        errors(&m),
        ["node '#0' (Foo) uses domain 'com.example', which the model does not import"]
    );
    m.opset_import.push(opset("com.example", 1));
    assert_eq!(
        errors(&m),
        ["node '#0' uses operator 'Foo', which is unknown in domain 'com.example'"]
    );

    let mut m = relu_model();
    m.opset_import = vec![opset("", 10)];
    g(&mut m).input.push(vi("s", FLOAT, &[1]));
    g(&mut m).node[0] = node("Upsample", &["x", "s"], &["y"]).named("u");
    assert_eq!(
        errors(&m),
        [
            "node 'u' uses operator 'Upsample', which is deprecated from version 10 of domain ai.onnx (the default domain) (imported at version 10)"
        ]
    );
}

#[test]
fn arity_is_checked_against_the_schema() {
    let mut m = relu_model();
    g(&mut m).node[0].input.push("x".into());
    assert_eq!(errors(&m), ["node 'r' has 2 inputs, but Relu (version 14) takes exactly 1"]);

    let mut m = relu_model();
    g(&mut m).node[0] = node("Add", &["x", ""], &["y"]).named("a");
    assert_eq!(
        errors(&m),
        ["input 1 ('B') of node 'a' is empty, but Add (version 14) requires it"]
    );

    let mut m = relu_model();
    g(&mut m).node[0] = node("Concat", &[], &["y"]).named("c").attr(attr_i("axis", 0));
    assert_eq!(errors(&m), ["node 'c' has 0 inputs, but Concat (version 13) takes at least 1"]);

    let mut m = relu_model();
    g(&mut m).node[0].output.push("z".into());
    assert_eq!(errors(&m), ["node 'r' has 2 outputs, but Relu (version 14) takes exactly 1"]);
}

#[test]
fn empty_names_are_absent_optional_inputs_and_outputs() {
    // Clip: input, optional min, optional max; Dropout: optional mask output.
    let mut m = relu_model();
    g(&mut m).input.push(vi("hi", FLOAT, &[]));
    g(&mut m).node[0] = node("Clip", &["x", "", "hi"], &["t"]);
    g(&mut m).node.push(node("Dropout", &["t", "", ""], &["y", ""]));
    let p = ok(&m);
    let gr = &p.model.graph;
    let nodes: Vec<_> = gr.nodes().map(|(_, n)| n).collect();
    assert_eq!(nodes[0].inputs, vec![gr.value_by_name("x"), None, gr.value_by_name("hi")]);
    assert_eq!(nodes[1].inputs.len(), 3);
    assert_eq!(nodes[1].inputs[1..], [None, None]);
    assert_eq!(nodes[1].outputs, vec![gr.value_by_name("y"), None]);
}

#[test]
fn attributes_are_checked_against_the_schema() {
    let mut m = relu_model();
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"]).named("l").attr(attr_i("alpha", 1));
    assert_eq!(
        errors(&m),
        ["attribute 'alpha' of node 'l' has type INT, but LeakyRelu (version 16) expects FLOAT"]
    );

    let mut m = relu_model();
    g(&mut m).node[0] = g(&mut m).node[0].clone().attr(attr_i("foo", 1));
    assert_eq!(
        errors(&m),
        ["node 'r' has attribute 'foo', which Relu (version 14) does not define"]
    );

    let mut m = relu_model();
    g(&mut m).node[0] = node("Concat", &["x"], &["y"]).named("c");
    assert_eq!(errors(&m), ["node 'c' lacks attribute 'axis', which Concat (version 13) requires"]);

    let mut m = relu_model();
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"])
        .named("l")
        .attr(attr_f("alpha", 0.5))
        .attr(attr_f("alpha", 0.2));
    assert_eq!(errors(&m), ["attribute 'alpha' is given more than once"]);
}

#[test]
fn attributes_hold_exactly_one_value_of_their_type() {
    let mut two = attr_f("alpha", 0.5);
    two.i = Some(3);
    let mut m = relu_model();
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"]).named("l").attr(two.clone());
    assert_eq!(
        errors(&m),
        [
            "attribute 'alpha' has type FLOAT but also holds a value of type INT; an attribute holds exactly one value"
        ]
    );
    two.r#type = None;
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"]).named("l").attr(two);
    assert_eq!(
        errors(&m),
        [
            "attribute 'alpha' has no type and holds several values (FLOAT, INT); an attribute holds exactly one value"
        ]
    );

    // A missing type with one value is survivable.
    let mut untyped = attr_f("alpha", 0.5);
    untyped.r#type = None;
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"]).named("l").attr(untyped);
    assert_eq!(warnings(&m), ["attribute 'alpha' has no type; FLOAT is assumed from its value"]);

    // Proto3 writers leave zero scalars out: an absent `f` is 0.0.
    let mut zero = attr_f("alpha", 0.0);
    zero.f = None;
    g(&mut m).node[0] = node("LeakyRelu", &["x"], &["y"]).named("l").attr(zero);
    let p = ok(&m);
    let (_, n) = p.model.graph.nodes().next().unwrap();
    assert_eq!(n.attr("alpha"), Some(&AttrValue::Float(0.0)));

    let mut empty = attr_t("value", floats("c", &[1], &[1.0]));
    empty.t = None;
    g(&mut m).node[0] = node("Constant", &[], &["y"]).named("k").attr(empty);
    assert_eq!(errors(&m), ["attribute 'value' has type TENSOR but no value"]);
}

#[test]
fn references_are_only_allowed_in_functions() {
    let mut m = relu_model();
    g(&mut m).node[0] =
        node("LeakyRelu", &["x"], &["y"]).named("l").attr(attr_ref("alpha", "a", 1));
    assert_eq!(
        errors(&m),
        [
            "attribute 'alpha' refers to function attribute 'a', but references are only allowed in function bodies"
        ]
    );
}

#[test]
fn every_value_is_defined_once() {
    let mut m = relu_model();
    g(&mut m).node.push(node("Relu", &["x"], &["y"]).named("r2"));
    assert_eq!(
        errors(&m),
        [
            "value 'y' is defined by node 'r2' (Relu) but also by another node; every value must be defined once"
        ]
    );

    let mut m = relu_model();
    g(&mut m).node.push(node("Relu", &["y"], &["x"]).named("r2"));
    assert_eq!(
        errors(&m),
        [
            "value 'x' is defined by node 'r2' (Relu) but also by a graph input; every value must be defined once"
        ]
    );

    let mut m = relu_model();
    g(&mut m).input.push(vi("x", FLOAT, &[2]));
    assert_eq!(errors(&m), ["graph input 'x' is declared more than once"]);

    let mut m = relu_model();
    g(&mut m).initializer = vec![floats("c", &[1], &[1.0]), floats("c", &[1], &[2.0])];
    assert_eq!(errors(&m), ["initializer 'c' is defined more than once"]);
}

#[test]
fn every_use_is_defined() {
    let mut m = relu_model();
    g(&mut m).node[0].input[0] = "nope".into();
    g(&mut m).output.push(vi("missing", FLOAT, &[2]));
    assert_eq!(
        errors(&m),
        ["input 'nope' of node 'r' is not defined", "graph output 'missing' is not defined"]
    );
}

#[test]
fn graph_inputs_and_outputs_need_names_and_main_graph_types() {
    let mut m = relu_model();
    g(&mut m).input.push(vi("", FLOAT, &[1]));
    g(&mut m).output.push(vi("", FLOAT, &[1]));
    assert_eq!(errors(&m), ["graph input #1 has no name", "graph output #1 has no name"]);

    let mut m = relu_model();
    g(&mut m).input[0] = vi_untyped("x");
    g(&mut m).output[0] = vi_untyped("y");
    assert_eq!(
        errors(&m),
        ["main graph input 'x' has no type", "main graph output 'y' has no type"]
    );
}

#[test]
fn out_of_order_nodes_are_resorted_with_a_warning() {
    let mut m = relu_model();
    let gr = g(&mut m);
    gr.node = vec![
        node("Relu", &["t"], &["y"]).named("second"),
        node("Neg", &["x"], &["t"]).named("first"),
    ];
    let p = ok(&m);
    assert_eq!(
        p.warnings.iter().map(|d| d.message.as_str()).collect::<Vec<_>>(),
        [
            "the nodes of graph 'g' are not in topological order; they were re-sorted (node 'second' uses 't' before node 'first' defines it)"
        ]
    );
    let names: Vec<&str> = p.model.graph.nodes().map(|(_, n)| n.name.as_str()).collect();
    assert_eq!(names, ["first", "second"]);
}

#[test]
fn cycles_are_errors_naming_the_nodes() {
    let mut m = relu_model();
    let gr = g(&mut m);
    gr.node = vec![
        node("Add", &["x", "c"], &["a"]).named("n1"),
        node("Neg", &["a"], &["b"]).named("n2"),
        node("Neg", &["b"], &["c"]).named("n3"),
        node("Relu", &["a"], &["y"]).named("n4"),
    ];
    assert_eq!(errors(&m), ["graph 'g' has a cycle through nodes 'n1' -> 'n2' -> 'n3' -> 'n1'"]);

    let mut m = relu_model();
    g(&mut m).node[0] = node("Add", &["x", "y"], &["y"]).named("self");
    assert_eq!(errors(&m), ["graph 'g' has a cycle through nodes 'self' -> 'self'"]);
}

#[test]
fn initializers_and_inputs_by_ir_version() {
    // IR 3: every initializer must be an input.
    let mut m = relu_model();
    m.ir_version = Some(3);
    m.opset_import = vec![opset("", 6)];
    g(&mut m).initializer.push(floats("c", &[2], &[1.0, 2.0]));
    assert_eq!(
        errors(&m),
        [
            "initializer 'c' is not a graph input; in IR version 3 every initializer must also be listed as a graph input"
        ]
    );
    g(&mut m).input.push(vi("c", FLOAT, &[2]));
    let p = ok(&m);
    let c = p.model.graph.value_by_name("c").unwrap();
    assert!(
        matches!(&p.model.graph.value(c).kind, ValueKind::Input { default: Some(t) } if t.dims == [2])
    );

    // IR 4+: a main-graph initializer that is also an input is an overridable default.
    let mut m = relu_model();
    g(&mut m).input.push(vi("c", FLOAT, &[2]));
    g(&mut m).initializer.push(floats("c", &[2], &[1.0, 2.0]));
    assert!(warnings(&m).is_empty());
}

fn if_model(then_branch: onnx_codegen::proto::GraphProto) -> onnx_codegen::proto::ModelProto {
    let else_branch =
        graph("else", vec![node("Identity", &["x"], &["e"])], vec![], vec![vi_untyped("e")]);
    model(graph(
        "main",
        vec![
            node("If", &["b"], &["y"])
                .named("if")
                .attr(attr_g("then_branch", then_branch))
                .attr(attr_g("else_branch", else_branch)),
        ],
        vec![vi("x", FLOAT, &[2]), vi("b", BOOL, &[])],
        vec![vi("y", FLOAT, &[2])],
    ))
}

#[test]
fn subgraphs_capture_outer_values() {
    let then_branch =
        graph("then", vec![node("Neg", &["x"], &["t"])], vec![], vec![vi_untyped("t")]);
    let p = ok(&if_model(then_branch));
    let main = &p.model.graph;
    let x = main.value_by_name("x").unwrap();
    let (_, iff) = main.nodes().next().unwrap();
    let then = iff.attr("then_branch").unwrap().graphs()[0].clone();
    assert_eq!(then.captures.len(), 1);
    let cx = then.captures[0];
    assert_eq!(then.value(cx).name, "x");
    assert_eq!(then.value(cx).kind, ValueKind::Captured { outer: x });
    let (_, neg) = then.nodes().next().unwrap();
    assert_eq!(neg.inputs, vec![Some(cx)]);
    // The outer graph sees the capture as a use of x by the If node.
    let uses = main.uses();
    assert!(uses[x.index()].contains(&onnx_codegen::ir::Use::Capture { node: main.order()[0] }));
}

#[test]
fn nested_subgraphs_capture_through_every_level() {
    let inner = graph("inner", vec![node("Neg", &["x"], &["i"])], vec![], vec![vi_untyped("i")]);
    let inner_else =
        graph("inner_else", vec![node("Identity", &["x"], &["j"])], vec![], vec![vi_untyped("j")]);
    let then_branch = graph(
        "then",
        vec![
            node("If", &["b"], &["t"])
                .attr(attr_g("then_branch", inner))
                .attr(attr_g("else_branch", inner_else)),
        ],
        vec![],
        vec![vi_untyped("t")],
    );
    let p = ok(&if_model(then_branch));
    let (_, iff) = p.model.graph.nodes().next().unwrap();
    let then = &iff.attr("then_branch").unwrap().graphs()[0];
    // `then` captures b (used directly) and x (used by its own subgraphs).
    let names: Vec<&str> = then.captures.iter().map(|&c| then.value(c).name.as_str()).collect();
    assert_eq!(names, ["b", "x"]);
    let (_, inner_if) = then.nodes().next().unwrap();
    let inner = &inner_if.attr("then_branch").unwrap().graphs()[0];
    let ix = inner.captures[0];
    assert_eq!(
        inner.value(ix).kind,
        ValueKind::Captured { outer: then.value_by_name("x").unwrap() }
    );
}

#[test]
fn subgraph_node_outputs_must_not_shadow_outer_names() {
    let then_branch =
        graph("then", vec![node("Neg", &["b"], &["x"]).named("n")], vec![], vec![vi_untyped("x")]);
    let d = diags(&if_model(then_branch));
    assert_eq!(d.len(), 1);
    assert_eq!(
        d[0].message,
        "value 'x' is defined by node 'n' (Neg) but also in an enclosing graph; a subgraph must not redefine outer names"
    );
    assert_eq!(
        d[0].location.path,
        [
            PathStep::Graph("main".into()),
            PathStep::Node { name: "if".into(), op_type: "If".into() },
            PathStep::Attribute("then_branch".into()),
            PathStep::Graph("then".into()),
        ]
    );
}

#[test]
fn subgraph_inputs_with_initializers_warn() {
    let mut then_branch = graph(
        "then",
        vec![node("Identity", &["c"], &["t"])],
        vec![vi_untyped("c")],
        vec![vi_untyped("t")],
    );
    then_branch.initializer.push(floats("c", &[2], &[1.0, 2.0]));
    assert_eq!(
        warnings(&if_model(then_branch)),
        [
            "subgraph input 'c' also has an initializer; from IR version 4 on, subgraph inputs should not have initializers"
        ]
    );
}

#[test]
fn subgraph_nesting_is_bounded() {
    let mut inner = graph("g0", vec![node("Neg", &["x"], &["o"])], vec![], vec![vi_untyped("o")]);
    for i in 1..100 {
        inner = graph(
            &format!("g{i}"),
            vec![node("If", &["b"], &["o"]).attr(attr_g("then_branch", inner)).attr(attr_g(
                "else_branch",
                graph("e", vec![node("Neg", &["x"], &["o2"])], vec![], vec![vi_untyped("o2")]),
            ))],
            vec![],
            vec![vi_untyped("o")],
        );
    }
    let e = errors(&if_model(inner));
    assert!(e.contains(
        &"subgraphs are nested more than 64 levels deep; the model is refused".to_string()
    ));
}

#[test]
fn bad_tensors_are_reported_with_their_path() {
    let mut m = relu_model();
    let mut c = floats("c", &[3], &[1.0, 2.0, 3.0]);
    c.float_data.pop();
    g(&mut m).initializer.push(c);
    let d = diags(&m);
    assert_eq!(d.len(), 1);
    assert_eq!(
        d[0].message,
        "tensor 'c' of type float and shape [3] needs 3 entries in float_data, but has 2"
    );
    assert_eq!(d[0].location.path, [PathStep::Graph("g".into()), PathStep::Tensor("c".into())]);
}

#[test]
fn reports_every_problem_at_once() {
    let mut m = relu_model();
    m.ir_version = None;
    let gr = g(&mut m);
    gr.node.push(node("Frobnicate", &["x"], &["z"]).named("f"));
    gr.node.push(node("Relu", &["q"], &["w"]).named("u"));
    assert_eq!(
        errors(&m),
        [
            "the model has no ir_version",
            "node 'f' uses operator 'Frobnicate', which is unknown in domain ai.onnx (the default domain)",
            "input 'q' of node 'u' is not defined",
        ]
    );
}

#[test]
fn types_and_value_info_are_lowered() {
    let mut m = relu_model();
    let gr = g(&mut m);
    gr.node = vec![node("Neg", &["x"], &["t"]), node("Relu", &["t"], &["y"])];
    let mut t = vi("t", FLOAT, &[2]);
    if let Some(onnx_codegen::proto::type_proto::Value::TensorType(tt)) =
        t.r#type.as_mut().and_then(|t| t.value.as_mut())
    {
        tt.shape.as_mut().unwrap().dim[0].value =
            Some(onnx_codegen::proto::tensor_shape_proto::dimension::Value::DimParam("N".into()));
    }
    gr.value_info.push(t);
    let p = ok(&m);
    let gr = &p.model.graph;
    let t = gr.value(gr.value_by_name("t").unwrap());
    match &t.ty {
        Some(Type::Tensor { elem, shape }) => {
            assert_eq!(*elem, Some(ElemType::Float));
            assert_eq!(shape.dims, Some(vec![Dim::Symbolic("N".into())]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn lowers_large_graphs_in_linear_time() {
    // A chain of 200k nodes (a million in release builds takes ~1 s).
    let n = 200_000;
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let input = if i == 0 { "x".to_string() } else { format!("t{}", i - 1) };
        let output = if i == n - 1 { "y".to_string() } else { format!("t{i}") };
        nodes.push(onnx_codegen::proto::NodeProto {
            op_type: Some("Relu".into()),
            input: vec![input],
            output: vec![output],
            ..Default::default()
        });
    }
    nodes.reverse();
    let m = model(graph("big", nodes, vec![vi("x", FLOAT, &[2])], vec![vi("y", FLOAT, &[2])]));
    let start = std::time::Instant::now();
    let p = ok(&m);
    assert_eq!(p.model.graph.node_count(), n);
    assert_eq!(p.warnings.len(), 1, "reversed order is re-sorted");
    assert!(start.elapsed().as_secs() < 20, "took {:?}", start.elapsed());
}

#[test]
fn rewriting_helpers_keep_uses_consistent() {
    // x -> Neg -> t -> Relu -> y; bypass Neg: Relu reads x directly.
    let mut m = relu_model();
    g(&mut m).node = vec![node("Neg", &["x"], &["t"]).named("neg"), node("Relu", &["t"], &["y"])];
    let mut gr = ok(&m).model.graph;
    let (x, t) = (gr.value_by_name("x").unwrap(), gr.value_by_name("t").unwrap());
    let neg = gr.node_by_name("neg").unwrap();
    assert_eq!(gr.producer(t), Some((neg, 0)));
    assert_eq!(gr.uses()[t.index()].len(), 1);
    gr.replace_uses(t, x);
    gr.retain_nodes(|id, _| id != neg);
    assert_eq!(gr.node_count(), 1);
    assert!(gr.uses()[t.index()].is_empty());
    assert_eq!(gr.uses()[x.index()].len(), 1);
    let (_, relu) = gr.nodes().next().unwrap();
    assert_eq!(relu.inputs, vec![Some(x)]);
}

#[test]
fn bad_types_are_reported() {
    let mut m = relu_model();
    let mut t = tensor_type(99, &[-1]);
    g(&mut m).input[0].r#type = Some(t.clone());
    assert_eq!(
        errors(&m),
        ["the type of 'x' has element type code 99, which is not a tensor element type"]
    );
    t = tensor_type(FLOAT, &[-1]);
    g(&mut m).input[0].r#type = Some(t);
    assert_eq!(
        warnings(&m),
        ["the shape of 'x' has negative dimension -1; it is taken as unknown"]
    );
}

#[test]
fn question_mark_dims_are_each_their_own_unknown() {
    // paddle2onnx writes `x: float[-1, 3, ?, ?]`: the two `?` are not one symbol.
    let mut m = relu_model();
    let mut t = tensor_type(FLOAT, &[2, 3, 4]);
    if let Some(onnx_codegen::proto::type_proto::Value::TensorType(tt)) = &mut t.value {
        let dims = &mut tt.shape.as_mut().unwrap().dim;
        for (d, p) in dims.iter_mut().zip(["?", "?", "N"]) {
            d.value =
                Some(onnx_codegen::proto::tensor_shape_proto::dimension::Value::DimParam(p.into()));
        }
    }
    g(&mut m).input[0].r#type = Some(t);
    let p = ok(&m);
    let x = p.model.graph.value_by_name("x").unwrap();
    let Some(Type::Tensor { shape, .. }) = &p.model.graph.value(x).ty else {
        panic!("x has no tensor type")
    };
    assert_eq!(
        shape.dims.as_deref(),
        Some(&[Dim::Unknown, Dim::Unknown, Dim::Symbolic("N".into())][..])
    );
}
