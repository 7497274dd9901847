//! Models and model-local functions.

use super::graph::{Attribute, Graph};
use super::types::Type;
use std::collections::BTreeMap;

/// Descriptive metadata of a model, carried through unchanged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    pub producer_name: String,
    pub producer_version: String,
    pub domain: String,
    pub model_version: i64,
    pub doc_string: String,
    /// `metadata_props`, in model order.
    pub props: Vec<(String, String)>,
}

/// A model-local function (`FunctionProto`), until inlining removes its calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// The normalized domain.
    pub domain: String,
    pub name: String,
    pub overload: String,
    /// The body: formal inputs are its graph inputs (names only), formal
    /// outputs its graph outputs; attribute references are `AttrValue::Ref`.
    pub body: Graph,
    /// Attributes the function declares without a default.
    pub attributes: Vec<String>,
    /// Attributes the function declares with a default value.
    pub attribute_defaults: Vec<Attribute>,
    /// The function's own opset imports (normalized domain -> version).
    pub opset_imports: BTreeMap<String, i64>,
    pub doc_string: String,
}

impl Function {
    /// Whether the function declares an attribute called `name`.
    pub fn declares(&self, name: &str) -> bool {
        self.attributes.iter().any(|a| a == name)
            || self.attribute_defaults.iter().any(|a| a.name == name)
    }
}

/// A whole model.
#[derive(Clone, Debug, PartialEq)]
pub struct Model {
    pub ir_version: i64,
    /// Imported operator sets: normalized domain -> version.
    pub opset_imports: BTreeMap<String, i64>,
    pub metadata: Metadata,
    pub graph: Graph,
    /// Model-local functions; empty after inlining.
    pub functions: Vec<Function>,
}

impl Model {
    /// The declared types of the main graph's inputs, in order.
    pub fn input_types(&self) -> impl Iterator<Item = (&str, Option<&Type>)> {
        self.graph.inputs.iter().map(|&v| {
            let v = self.graph.value(v);
            (v.name.as_str(), v.ty.as_ref())
        })
    }
}
