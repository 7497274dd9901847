//! Builders for small `ModelProto`s in tests (until the text parser is merged,
//! after which fixtures can be written in the ONNX text syntax instead).
#![allow(dead_code)]

use onnx_codegen::diag::{Diagnostic, Severity};
use onnx_codegen::passes::{Prepared, prepare};
use onnx_codegen::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TensorProto, TensorShapeProto, TypeProto, ValueInfoProto, tensor_shape_proto, type_proto,
};

pub const FLOAT: i32 = 1;
pub const INT64: i32 = 7;
pub const BOOL: i32 = 9;

pub fn opset(domain: &str, version: i64) -> OperatorSetIdProto {
    OperatorSetIdProto { domain: Some(domain.into()), version: Some(version) }
}

pub fn tensor_type(elem: i32, dims: &[i64]) -> TypeProto {
    TypeProto {
        value: Some(type_proto::Value::TensorType(type_proto::Tensor {
            elem_type: Some(elem),
            shape: Some(TensorShapeProto {
                dim: dims
                    .iter()
                    .map(|&d| tensor_shape_proto::Dimension {
                        value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
                        denotation: None,
                    })
                    .collect(),
            }),
        })),
        denotation: None,
    }
}

pub fn vi(name: &str, elem: i32, dims: &[i64]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(tensor_type(elem, dims)),
        ..Default::default()
    }
}

pub fn vi_untyped(name: &str) -> ValueInfoProto {
    ValueInfoProto { name: Some(name.into()), ..Default::default() }
}

pub fn floats(name: &str, dims: &[i64], data: &[f32]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(FLOAT),
        dims: dims.to_vec(),
        float_data: data.to_vec(),
        ..Default::default()
    }
}

/// A node: `node("Add", &["a", "b"], &["c"])`, refined with the methods of [`NodeExt`].
pub fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

pub trait NodeExt {
    fn named(self, name: &str) -> Self;
    fn domain(self, domain: &str) -> Self;
    fn attr(self, a: AttributeProto) -> Self;
}

impl NodeExt for NodeProto {
    fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }
    fn domain(mut self, domain: &str) -> Self {
        self.domain = Some(domain.into());
        self
    }
    fn attr(mut self, a: AttributeProto) -> Self {
        self.attribute.push(a);
        self
    }
}

pub fn attr_i(name: &str, v: i64) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(2), i: Some(v), ..Default::default() }
}

pub fn attr_f(name: &str, v: f32) -> AttributeProto {
    AttributeProto { name: Some(name.into()), r#type: Some(1), f: Some(v), ..Default::default() }
}

pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(7),
        ints: v.to_vec(),
        ..Default::default()
    }
}

pub fn attr_g(name: &str, g: GraphProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(5),
        g: Some(Box::new(g)),
        ..Default::default()
    }
}

pub fn attr_t(name: &str, t: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(4),
        t: Some(Box::new(t)),
        ..Default::default()
    }
}

/// `name = @target` of the given attribute type code (inside function bodies).
pub fn attr_ref(name: &str, target: &str, ty: i32) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        ref_attr_name: Some(target.into()),
        r#type: Some(ty),
        ..Default::default()
    }
}

pub fn graph(
    name: &str,
    nodes: Vec<NodeProto>,
    inputs: Vec<ValueInfoProto>,
    outputs: Vec<ValueInfoProto>,
) -> GraphProto {
    GraphProto {
        name: Some(name.into()),
        node: nodes,
        input: inputs,
        output: outputs,
        ..Default::default()
    }
}

/// A model (IR 10, default opset 17) around `g`.
pub fn model(g: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![opset("", 17)],
        graph: Some(g),
        ..Default::default()
    }
}

/// `y = Relu(x)`, float[2] -> float[2], as a starting point.
pub fn relu_model() -> ModelProto {
    model(graph(
        "g",
        vec![node("Relu", &["x"], &["y"]).named("r")],
        vec![vi("x", FLOAT, &[2])],
        vec![vi("y", FLOAT, &[2])],
    ))
}

pub fn function(
    domain: &str,
    name: &str,
    inputs: &[&str],
    outputs: &[&str],
    nodes: Vec<NodeProto>,
) -> FunctionProto {
    FunctionProto {
        name: Some(name.into()),
        domain: Some(domain.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        node: nodes,
        opset_import: vec![opset("", 17)],
        ..Default::default()
    }
}

/// The model's graph, mutably.
pub fn g(m: &mut ModelProto) -> &mut GraphProto {
    m.graph.get_or_insert_with(Default::default)
}

/// `prepare`, expecting success.
pub fn ok(m: &ModelProto) -> Prepared {
    match prepare(m) {
        Ok(p) => p,
        Err(e) => panic!("expected the model to be accepted:\n{e}"),
    }
}

/// `prepare`, expecting failure: every diagnostic.
pub fn diags(m: &ModelProto) -> Vec<Diagnostic> {
    match prepare(m) {
        Ok(_) => panic!("expected the model to be refused"),
        Err(e) => e.into_diagnostics(),
    }
}

/// The messages of the errors `prepare` reports.
pub fn errors(m: &ModelProto) -> Vec<String> {
    diags(m).into_iter().filter(|d| d.severity == Severity::Error).map(|d| d.message).collect()
}

/// The messages of the warnings of an accepted model.
pub fn warnings(m: &ModelProto) -> Vec<String> {
    ok(m).warnings.into_iter().map(|d| d.message).collect()
}
