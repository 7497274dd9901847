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

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::{HostData, HostTensor};

    fn analyze_with(src: &str, runtime: &[&str]) -> crate::Result<Analysis> {
        let proto = crate::text::parse_model(src, "t.onnxtxt").unwrap_or_else(|e| panic!("{e}"));
        let opts = Options {
            runtime_inputs: runtime.iter().map(|s| (*s).to_owned()).collect(),
            ..Options::default()
        };
        analyze(&proto, &opts)
    }

    fn inputs(a: &Analysis) -> Vec<String> {
        a.summary().inputs.into_iter().map(|v| v.name).collect()
    }

    fn floats(a: &Analysis, name: &str) -> Vec<f32> {
        let g = &a.model().graph;
        let v = g.value_by_name(name).unwrap_or_else(|| panic!("no value {name}"));
        let t = a.inferred.constants[v.index()].as_ref().expect("a folded value");
        match HostTensor::from_tensor(t).expect("a host form").data {
            HostData::F32(v) => v,
            other => panic!("unexpected {other:?}"),
        }
    }

    fn errors(r: crate::Result<Analysis>) -> String {
        match r {
            Ok(_) => panic!("the model was accepted"),
            Err(e) => e.to_string(),
        }
    }

    /// The weights and the scale are inputs with initializers.
    const LINEAR: &str = r#"<ir_version: VERSION, opset_import: ["" : 6]>
linear (float[1, 2] x, float[2, 2] w = {1, 2, 3, 4}, float[2] b = {10, 20}) => (float[1, 2] y, float[2] wb) {
  xw = MatMul (x, w)
  y = Add <broadcast: int = 1> (xw, b)
  wb = Add <broadcast: int = 1, axis: int = 0> (b, b)
}"#;

    fn linear(ir: i64) -> String {
        LINEAR.replace("VERSION", &ir.to_string())
    }

    #[test]
    fn ir3_initializer_inputs_are_constants_by_default() {
        let a = analyze_with(&linear(3), &[]).unwrap();
        assert_eq!(inputs(&a), ["x"]);
        // Folded from the defaults: b + b.
        assert_eq!(floats(&a, "wb"), [20.0, 40.0]);
        assert!(a.summary().values.iter().any(|v| v.name == "wb" && v.constant));
        assert!(a.problems().is_empty(), "{:?}", a.problems());
    }

    #[test]
    fn a_named_initializer_input_stays_an_input() {
        let a = analyze_with(&linear(3), &["b"]).unwrap();
        assert_eq!(inputs(&a), ["x", "b"]);
        // w is still a constant, b is not.
        assert_eq!(floats(&a, "w"), [1.0, 2.0, 3.0, 4.0]);
        assert!(a.summary().values.iter().any(|v| v.name == "wb" && !v.constant));
    }

    #[test]
    fn from_ir4_on_initializer_inputs_stay_inputs() {
        let src = r#"<ir_version: 4, opset_import: ["" : 13]>
linear (float[1, 2] x, float[2, 2] w = {1, 2, 3, 4}, float[2] b = {10, 20}) => (float[1, 2] y) {
  xw = MatMul (x, w)
  y = Add (xw, b)
}"#;
        let a = analyze_with(src, &[]).unwrap();
        assert_eq!(inputs(&a), ["x", "w", "b"]);
        // Naming them is allowed, and changes nothing.
        let a = analyze_with(src, &["w"]).unwrap();
        assert_eq!(inputs(&a), ["x", "w", "b"]);
    }

    #[test]
    fn a_runtime_input_must_be_an_input_with_an_initializer() {
        // IR 4: an initializer need not be an input there.
        let src = r#"<ir_version: 4, opset_import: ["" : 13]>
linear (float[1, 2] x, float[2] b = {10, 20}) => (float[1, 2] y) <float[2] k = {1, 1}> {
  xw = Mul (x, k)
  y = Add (xw, b)
}"#;
        let e = errors(analyze_with(src, &["x", "k", "xw", "nothing"]));
        assert!(e.contains("'x' is asked to be a run-time input (--runtime-input), but in graph 'linear' it is an input without an initializer"), "{e}");
        assert!(e.contains("'k' is asked to be a run-time input (--runtime-input), but in graph 'linear' it is an initializer that is not a graph input"), "{e}");
        assert!(e.contains("'xw' is asked to be a run-time input (--runtime-input), but in graph 'linear' it is not a graph input"), "{e}");
        assert!(e.contains("'nothing' is asked to be a run-time input (--runtime-input), but in graph 'linear' it is not a value of the graph"), "{e}");
    }

    #[test]
    fn a_default_that_contradicts_its_input_type_is_refused() {
        let src = r#"<ir_version: 3, opset_import: ["" : 6]>
g (float[2] x, float[3] w = {1, 2}, int64[2] k = {1, 2}) => (float[2] y) {
  y = Add (x, x)
}"#;
        // The parser writes the initializer with the type it was given, so
        // the declared shape is changed on the parsed proto.
        let mut proto = crate::text::parse_model(src, "t").unwrap();
        let g = proto.graph.as_mut().unwrap();
        g.initializer[0].dims = vec![2];
        g.initializer[1].data_type = Some(1);
        g.initializer[1].float_data = vec![1.0, 2.0];
        g.initializer[1].int64_data.clear();
        let e = errors(analyze(&proto, &Options::default()));
        assert!(
            e.contains(
                "input 'w' of graph 'g' is declared tensor(float)[3] but its initializer has shape [2]"
            ),
            "{e}"
        );
        assert!(
            e.contains(
                "input 'k' of graph 'g' is declared tensor(int64)[2] but its initializer holds float values"
            ),
            "{e}"
        );
    }

    #[test]
    fn a_fixed_value_for_a_constant_says_it_is_one() {
        let proto = crate::text::parse_model(&linear(3), "t").unwrap();
        let opts = Options {
            fixed_inputs: [("b".to_owned(), vec![1, 2])].into_iter().collect(),
            ..Options::default()
        };
        let e = errors(analyze(&proto, &opts));
        assert!(e.contains("'b' is a constant of graph 'linear'"), "{e}");
    }

    #[test]
    fn ir3_subgraph_initializer_inputs_are_constants() {
        // A Loop body lists its constant step after the inputs Loop binds.
        let src = r#"<ir_version: 3, opset_import: ["" : 6]>
g (float[2] x) => (float[2] y) {
  n = Constant <value: tensor = int64 {3}> ()
  t = Constant <value: tensor = bool {1}> ()
  y = Loop (n, t, x) <body: graph = body (int64 i, bool c, float[2] acc, float[2] step = {1, 10}) => (bool c2, float[2] acc2) {
    c2 = Identity (c)
    acc2 = Add (acc, step)
  }>
}"#;
        let a = analyze_with(src, &[]).unwrap();
        assert!(a.problems().is_empty(), "{:?}", a.problems());
        assert_eq!(inputs(&a), ["x"]);
        let g = &a.model().graph;
        let (_, node) = g.nodes().find(|(_, n)| n.op.op_type == "Loop").unwrap();
        let body = node.subgraphs().next().unwrap();
        assert_eq!(body.inputs.len(), 3);
        let step = body.value_by_name("step").unwrap();
        assert!(body.value(step).constant().is_some());
    }
}
