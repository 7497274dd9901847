//! Helpers for rule tests: a graph in the text syntax, analysed.

use super::{HostData, HostTensor};
use crate::generate::{Analysis, Options, analyze};

/// Analyses `graph` (text syntax) in a model that imports the default domain
/// at `opset`.
pub(crate) fn run(opset: u32, graph: &str) -> Analysis {
    let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
    let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
    analyze(&model, &Options::default()).expect("test model is valid")
}

/// The inferred type of each graph output (`None` where inference stopped).
pub(crate) fn types(a: &Analysis) -> Vec<Option<String>> {
    a.summary().outputs.into_iter().map(|v| v.r#type).collect()
}

/// `Some(s)`, to compare with [`types`].
pub(crate) fn ty(s: &str) -> Option<String> {
    Some(s.to_owned())
}

/// The reasons of everything reported unsupported.
pub(crate) fn unsupported(a: &Analysis) -> Vec<String> {
    a.inferred.unsupported.iter().map(|u| u.reason.clone()).collect()
}

/// The errors found in the model.
pub(crate) fn errors(a: &Analysis) -> Vec<String> {
    a.summary().errors
}

/// The messages of inference's warnings.
pub(crate) fn warnings(a: &Analysis) -> Vec<String> {
    a.inferred.warnings.iter().map(|d| d.message.clone()).collect()
}

/// The folded value of graph output `j`, as `f64`s.
pub(crate) fn value(a: &Analysis, j: usize) -> Vec<f64> {
    let v = a.model().graph.outputs[j];
    let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
    let h = HostTensor::from_tensor(t).expect("output has a host form");
    match h.data {
        HostData::F32(v) => v.into_iter().map(f64::from).collect(),
        HostData::F64(v) => v,
        HostData::I32(v) => v.into_iter().map(f64::from).collect(),
        HostData::I64(v) => v.into_iter().map(|x| x as f64).collect(),
        HostData::Bool(v) => v.into_iter().map(|b| f64::from(u8::from(b))).collect(),
        other => panic!("unexpected output {other:?}"),
    }
}
