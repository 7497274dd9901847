//! Expansion of onnxruntime's quantized contrib operators (domain
//! `com.microsoft`) into standard ONNX operators.
//!
//! A quantized contrib operator is defined by what it computes in float:
//! dequantize the inputs, run the float operator, quantize the output. Each
//! node is replaced by exactly that, in standard operators of the model's
//! default-domain opset: `QLinearAdd` becomes `DequantizeLinear` ×2 → `Add` →
//! `QuantizeLinear`, `QGemm` becomes `DequantizeLinear` (per-channel weights
//! with `axis`) → `Gemm` (with the int32 bias dequantized by `a_scale *
//! b_scale`) → `QuantizeLinear`, the dynamic operators become
//! `DynamicQuantizeLinear` → `MatMulInteger` → `Cast` → `Mul` (→ `Add`).
//! `DynamicQuantizeLSTM`, which quantizes its hidden state at every step,
//! has no such form: it becomes an `LSTM` on the dequantized weights that
//! carries a lowering ([`Lowering::DynamicLstm`]) to run it as onnxruntime
//! does, on the 8-bit weights with its activations quantized. Layout
//! changes (`channels_last`, the pre-13 softmax flattening) are done on the
//! quantized tensors, so the float part is always a clean
//! `DequantizeLinear` → op → `QuantizeLinear` pattern that a later pass can
//! turn into an integer kernel.
//!
//! The pass runs right after function inlining ([`super::prepare`]).
//! Validation accepts the operators listed here ([`check`]: arity, empty
//! required inputs, attribute names and types); every node this pass cannot
//! expand is an error naming the node, the operator and the value or
//! attribute at fault, so no contrib node survives `prepare`. New values and
//! nodes get names derived from the node's name; the node's outputs keep
//! their names (the last node of an expansion defines them).

use crate::diag::{Diagnostic, Diagnostics, PathStep};
use crate::ir::lowering::DynamicLstm;
use crate::ir::{
    AttrType, AttrValue, Attribute, ElemType, Graph, Lowering, Model, Node, NodeId, Op, Tensor,
    TensorData, Type, Value, ValueId, ValueKind,
};
use crate::ops;
use std::collections::HashSet;

/// The domain of onnxruntime's contrib operators.
pub const DOMAIN: &str = "com.microsoft";

/// The signature validation checks for one contrib operator.
struct Signature {
    op_type: &'static str,
    /// The formal inputs: name and whether it must be given.
    inputs: &'static [(&'static str, bool)],
    /// `QLinearConcat`: the last three inputs repeat, at least once.
    repeated_triples: bool,
    /// The least and the most outputs.
    outputs: (usize, usize),
    /// Attributes: name, type, required.
    attributes: &'static [(&'static str, AttrType, bool)],
}

const QLINEAR_BINARY: &[(&str, bool)] = &[
    ("A", true),
    ("A_scale", true),
    ("A_zero_point", false),
    ("B", true),
    ("B_scale", true),
    ("B_zero_point", false),
    ("C_scale", true),
    ("C_zero_point", false),
];

const QLINEAR_UNARY: &[(&str, bool)] = &[
    ("X", true),
    ("X_scale", true),
    ("X_zero_point", false),
    ("Y_scale", true),
    ("Y_zero_point", false),
];

const QUANTIZE: &[(&str, bool)] = &[("x", true), ("scale", true), ("zero_point", false)];

const SIGNATURES: &[Signature] = &[
    Signature {
        op_type: "QuantizeLinear",
        inputs: QUANTIZE,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[("axis", AttrType::Int, false)],
    },
    Signature {
        op_type: "DequantizeLinear",
        inputs: QUANTIZE,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[("axis", AttrType::Int, false)],
    },
    Signature {
        op_type: "QLinearAdd",
        inputs: QLINEAR_BINARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[],
    },
    Signature {
        op_type: "QLinearMul",
        inputs: QLINEAR_BINARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[],
    },
    Signature {
        op_type: "QLinearAveragePool",
        inputs: QLINEAR_UNARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[
            ("auto_pad", AttrType::String, false),
            ("ceil_mode", AttrType::Int, false),
            ("channels_last", AttrType::Int, false),
            ("count_include_pad", AttrType::Int, false),
            ("kernel_shape", AttrType::Ints, true),
            ("pads", AttrType::Ints, false),
            ("strides", AttrType::Ints, false),
        ],
    },
    Signature {
        op_type: "QLinearGlobalAveragePool",
        inputs: QLINEAR_UNARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[("channels_last", AttrType::Int, false)],
    },
    Signature {
        op_type: "QLinearSoftmax",
        inputs: QLINEAR_UNARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[("axis", AttrType::Int, false), ("opset", AttrType::Int, true)],
    },
    Signature {
        op_type: "QLinearSigmoid",
        inputs: QLINEAR_UNARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[],
    },
    Signature {
        op_type: "QLinearLeakyRelu",
        inputs: QLINEAR_UNARY,
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[("alpha", AttrType::Float, false)],
    },
    Signature {
        op_type: "QGemm",
        inputs: &[
            ("A", true),
            ("a_scale", true),
            ("a_zero_point", true),
            ("B", true),
            ("b_scale", true),
            ("b_zero_point", false),
            ("C", false),
            ("y_scale", false),
            ("y_zero_point", false),
        ],
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[
            ("alpha", AttrType::Float, false),
            ("transA", AttrType::Int, false),
            ("transB", AttrType::Int, false),
        ],
    },
    Signature {
        op_type: "QLinearConcat",
        inputs: &[
            ("Y_scale", true),
            ("Y_zero_point", true),
            ("X", true),
            ("X_scale", true),
            ("X_zero_point", false),
        ],
        repeated_triples: true,
        outputs: (1, 1),
        attributes: &[("axis", AttrType::Int, true)],
    },
    Signature {
        op_type: "DynamicQuantizeMatMul",
        inputs: &[
            ("A", true),
            ("B", true),
            ("b_scale", true),
            ("b_zero_point", false),
            ("bias", false),
        ],
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[],
    },
    Signature {
        op_type: "MatMulIntegerToFloat",
        inputs: &[
            ("A", true),
            ("B", true),
            ("a_scale", true),
            ("b_scale", true),
            ("a_zero_point", false),
            ("b_zero_point", false),
            ("bias", false),
        ],
        repeated_triples: false,
        outputs: (1, 1),
        attributes: &[],
    },
    Signature {
        op_type: "DynamicQuantizeLSTM",
        inputs: &[
            ("X", true),
            ("W", true),
            ("R", true),
            ("B", false),
            ("sequence_lens", false),
            ("initial_h", false),
            ("initial_c", false),
            ("P", false),
            ("W_scale", true),
            ("W_zero_point", true),
            ("R_scale", true),
            ("R_zero_point", true),
        ],
        repeated_triples: false,
        outputs: (0, 3),
        attributes: &[
            ("direction", AttrType::String, false),
            ("hidden_size", AttrType::Int, false),
            ("activation_alpha", AttrType::Floats, false),
            ("activation_beta", AttrType::Floats, false),
            ("clip", AttrType::Float, false),
            ("activations", AttrType::Strings, false),
            ("input_forget", AttrType::Int, false),
        ],
    },
];

fn signature(domain: &str, op_type: &str) -> Option<&'static Signature> {
    if domain != DOMAIN {
        return None;
    }
    SIGNATURES.iter().find(|s| s.op_type == op_type)
}

/// Whether this pass expands `domain`/`op_type`.
pub fn is_expanded(domain: &str, op_type: &str) -> bool {
    signature(domain, op_type).is_some()
}

/// Validation of a node of a contrib operator this pass expands: `None`
/// when the operator is not one of them, else every problem with the
/// node's inputs (names, empty for an absent one), output count and
/// attributes, each naming the node (`label`).
pub fn check(
    domain: &str,
    op_type: &str,
    label: &str,
    inputs: &[String],
    outputs: usize,
    attributes: &[Attribute],
) -> Option<Vec<String>> {
    let sig = signature(domain, op_type)?;
    let desc = format!("{DOMAIN}.{op_type}");
    let mut problems = Vec::new();
    let required = sig.inputs.iter().rposition(|&(_, r)| r).map_or(0, |i| i + 1);
    let n = inputs.len();
    if sig.repeated_triples {
        let fixed = sig.inputs.len().saturating_sub(3);
        if n < fixed + 3 || !(n - fixed).is_multiple_of(3) {
            problems.push(format!(
                "node '{label}' has {n} inputs, but {desc} takes {fixed} followed by one or more (tensor, scale, zero point) triples ({}, {}, ...)",
                fixed + 3,
                fixed + 6
            ));
        }
    } else if n < required || n > sig.inputs.len() {
        let range = if required == sig.inputs.len() {
            format!("{required}")
        } else {
            format!("{required} to {}", sig.inputs.len())
        };
        problems.push(format!(
            "node '{label}' has {n} input{}, but {desc} takes {range}",
            if n == 1 { "" } else { "s" }
        ));
    }
    for (i, name) in inputs.iter().enumerate() {
        let formal = if sig.repeated_triples && i >= sig.inputs.len() {
            let fixed = sig.inputs.len() - 3;
            sig.inputs.get(fixed + (i - fixed) % 3)
        } else {
            sig.inputs.get(i)
        };
        if let Some(&(formal, true)) = formal
            && name.is_empty()
        {
            problems.push(format!(
                "input {i} ('{formal}') of node '{label}' is empty, but {desc} requires it"
            ));
        }
    }
    let (least, most) = sig.outputs;
    if outputs < least || outputs > most {
        problems.push(format!(
            "node '{label}' has {outputs} outputs, but {desc} has {}",
            if least == most { format!("{most}") } else { format!("{least} to {most}") }
        ));
    }
    for a in attributes {
        match sig.attributes.iter().find(|(name, _, _)| *name == a.name) {
            None => problems.push(format!(
                "node '{label}' has attribute '{}', which {desc} does not define",
                a.name
            )),
            Some(&(_, ty, _)) if ty != a.value.ty() => problems.push(format!(
                "attribute '{}' of node '{label}' has type {}, but {desc} expects {ty}",
                a.name,
                a.value.ty()
            )),
            Some(_) => {}
        }
    }
    for &(name, _, required) in sig.attributes {
        if required && !attributes.iter().any(|a| a.name == name) {
            problems
                .push(format!("node '{label}' lacks attribute '{name}', which {desc} requires"));
        }
    }
    Some(problems)
}

fn is_contrib(n: &Node) -> bool {
    n.op.schema.is_none() && is_expanded(&n.op.domain, &n.op.op_type)
}

/// Expands every contrib node of the model (main graph and subgraphs) into
/// standard operators; reports what it cannot expand. A model without
/// contrib nodes is left untouched.
pub fn expand(model: &mut Model, diags: &mut Diagnostics) {
    let mut any = false;
    model.graph.visit(&mut |g, _| any = any || g.nodes().any(|(_, n)| is_contrib(n)));
    if !any {
        return;
    }
    let (mut values, mut nodes) = (HashSet::new(), HashSet::new());
    model.graph.visit(&mut |g, _| {
        values.extend(g.values().iter().map(|v| v.name.clone()));
        nodes.extend(g.nodes().map(|(_, n)| n.name.clone()));
    });
    let mut x = Expander {
        opset: model.opset_imports.get("").copied(),
        names: Names(values),
        node_names: Names(nodes),
        diags,
        path: Vec::new(),
    };
    let mut graph = std::mem::take(&mut model.graph);
    x.graph(&mut graph);
    model.graph = graph;
}

struct Expander<'d> {
    /// The default-domain opset of the model, if it imports one.
    opset: Option<i64>,
    /// Value names used anywhere in the model.
    names: Names,
    /// Node names likewise.
    node_names: Names,
    diags: &'d mut Diagnostics,
    /// Where the graph being expanded sits (for diagnostics).
    path: Vec<PathStep>,
}

/// Names in use, for making new ones.
struct Names(HashSet<String>);

impl Names {
    /// `base`, or `base_1`, `base_2`, ... when taken.
    fn fresh(&mut self, base: &str) -> String {
        if self.0.insert(base.to_owned()) {
            return base.to_owned();
        }
        let mut n = 1u64;
        loop {
            let candidate = format!("{base}_{n}");
            if self.0.insert(candidate.clone()) {
                return candidate;
            }
            n += 1;
        }
    }
}

impl Expander<'_> {
    fn graph(&mut self, g: &mut Graph) {
        let order = g.order().to_vec();
        for &id in &order {
            if !g.node(id).subgraphs().any(has_contrib) {
                continue;
            }
            let node = g.node(id);
            self.path
                .push(PathStep::Node { name: node.label(id), op_type: node.op.op_type.clone() });
            let mut attrs = std::mem::take(&mut g.node_mut(id).attributes);
            for a in &mut attrs {
                self.path.push(PathStep::Attribute(a.name.clone()));
                for sub in a.value.graphs_mut() {
                    self.path.push(PathStep::Graph(sub.name.clone()));
                    self.graph(sub);
                    self.path.pop();
                }
                self.path.pop();
            }
            g.node_mut(id).attributes = attrs;
            self.path.pop();
        }
        if !order.iter().any(|&id| is_contrib(g.node(id))) {
            return;
        }
        let mut new_order = Vec::with_capacity(order.len());
        for id in order {
            if !is_contrib(g.node(id)) {
                new_order.push(id);
                continue;
            }
            let node = g.node(id).clone();
            let first = g.next_node_id().0;
            let label = node.label(id);
            let base = if !node.name.is_empty() {
                node.name.clone()
            } else {
                node.output(0).map_or_else(|| label.clone(), |v| g.value(v).name.clone())
            };
            let result = match self.opset {
                None => Err("expanding it needs operators of the default domain, which the model does not import".to_owned()),
                Some(version) => {
                    let mut cx = Cx { x: self, g, node: &node, base, version };
                    cx.expand()
                }
            };
            match result {
                Ok(()) => new_order.extend((first..g.next_node_id().0).map(NodeId)),
                Err(msg) => {
                    let mut path = self.path.clone();
                    path.push(PathStep::Node {
                        name: label.clone(),
                        op_type: node.op.op_type.clone(),
                    });
                    self.diags.push(
                        Diagnostic::error(format!(
                            "node '{label}' ({DOMAIN}.{}): {msg}",
                            node.op.op_type
                        ))
                        .at_path(path),
                    );
                    new_order.push(id);
                }
            }
        }
        g.set_order(new_order);
    }
}

fn has_contrib(g: &Graph) -> bool {
    let mut any = false;
    g.visit(&mut |g, _| any = any || g.nodes().any(|(_, n)| is_contrib(n)));
    any
}

fn attr_int(name: &str, v: i64) -> Attribute {
    Attribute { name: name.to_owned(), value: AttrValue::Int(v), doc_string: String::new() }
}

fn attr_float(name: &str, v: f32) -> Attribute {
    Attribute { name: name.to_owned(), value: AttrValue::Float(v), doc_string: String::new() }
}

fn attr_ints(name: &str, v: Vec<i64>) -> Attribute {
    Attribute { name: name.to_owned(), value: AttrValue::Ints(v), doc_string: String::new() }
}

/// The expansion of one node.
struct Cx<'a, 'd> {
    x: &'a mut Expander<'d>,
    g: &'a mut Graph,
    node: &'a Node,
    /// The prefix of new names.
    base: String,
    /// The default-domain opset the new nodes use.
    version: i64,
}

/// A float (dequantized or computed) value of an expansion.
type Float = ValueId;

impl Cx<'_, '_> {
    fn input(&self, i: usize) -> Option<ValueId> {
        self.node.input(i)
    }

    /// Input `i`, which validation guarantees is present.
    fn required(&self, i: usize) -> Result<ValueId, String> {
        self.node.input(i).ok_or_else(|| format!("input {i} is missing"))
    }

    fn name_of(&self, v: ValueId) -> &str {
        &self.g.value(v).name
    }

    fn attr_int(&self, name: &str, default: i64) -> i64 {
        self.node.attr_int(name).unwrap_or(default)
    }

    fn attr_float(&self, name: &str, default: f32) -> f32 {
        match self.node.attr(name) {
            Some(AttrValue::Float(f)) => *f,
            _ => default,
        }
    }

    fn op(&self, op_type: &str, attrs: &[Attribute]) -> Result<Op, String> {
        let v = self.version;
        let schema = match ops::lookup("", op_type, v) {
            ops::Lookup::Found(s) => s,
            ops::Lookup::TooNew { first_since_version } => {
                return Err(format!(
                    "expanding it needs {op_type}, which first appears in opset {first_since_version} of the default domain; the model imports opset {v}"
                ));
            }
            ops::Lookup::Unknown => return Err(format!("{op_type} is not a standard operator")),
        };
        for a in attrs {
            if schema.attribute(&a.name).is_none() {
                return Err(format!(
                    "expanding it needs attribute '{}' of {op_type}, which opset {v} of the default domain does not have",
                    a.name
                ));
            }
        }
        Ok(Op {
            domain: String::new(),
            op_type: op_type.to_owned(),
            overload: String::new(),
            opset_version: v,
            schema: Some(schema),
        })
    }

    fn make_node(
        &self,
        name: String,
        op: Op,
        inputs: Vec<Option<ValueId>>,
        attrs: Vec<Attribute>,
    ) -> Node {
        Node {
            name,
            op,
            inputs,
            outputs: Vec::new(),
            attributes: attrs,
            doc_string: String::new(),
            lowering: None,
        }
    }

    /// Adds a node with new outputs named `{base}/{suffix}`.
    fn add_multi(
        &mut self,
        op_type: &str,
        inputs: Vec<Option<ValueId>>,
        attrs: Vec<Attribute>,
        suffixes: &[&str],
    ) -> Result<Vec<ValueId>, String> {
        let op = self.op(op_type, &attrs)?;
        let first = suffixes.first().copied().unwrap_or(op_type);
        let name = self.x.node_names.fresh(&format!("{}/{first}", self.base));
        let node = self.make_node(name, op, inputs, attrs);
        let outs: Vec<Option<String>> = suffixes
            .iter()
            .map(|s| Some(self.x.names.fresh(&format!("{}/{s}", self.base))))
            .collect();
        let id = self.g.add_node(node, &outs);
        Ok(self.g.node(id).outputs.iter().flatten().copied().collect())
    }

    /// Adds a node with one new output named `{base}/{suffix}`.
    fn add(
        &mut self,
        op_type: &str,
        inputs: Vec<Option<ValueId>>,
        attrs: Vec<Attribute>,
        suffix: &str,
    ) -> Result<ValueId, String> {
        let outs = self.add_multi(op_type, inputs, attrs, &[suffix])?;
        outs.first().copied().ok_or_else(|| format!("{op_type} made no output"))
    }

    /// Adds the last node of the expansion: it defines the contrib node's
    /// outputs (same values, same names, same positions).
    fn finish(
        &mut self,
        op_type: &str,
        inputs: Vec<Option<ValueId>>,
        attrs: Vec<Attribute>,
    ) -> Result<(), String> {
        self.finish_lowered(op_type, inputs, attrs, None)
    }

    /// [`Cx::finish`] with the last node's lowering.
    fn finish_lowered(
        &mut self,
        op_type: &str,
        inputs: Vec<Option<ValueId>>,
        attrs: Vec<Attribute>,
        lowering: Option<Lowering>,
    ) -> Result<(), String> {
        let op = self.op(op_type, &attrs)?;
        let name = self.x.node_names.fresh(&format!("{}/{op_type}", self.base));
        let mut node = self.make_node(name, op, inputs, attrs);
        node.lowering = lowering;
        let id = self.g.next_node_id();
        node.outputs = self.node.outputs.clone();
        for (index, o) in node.outputs.iter().enumerate() {
            if let Some(o) = o {
                self.g.value_mut(*o).kind = ValueKind::NodeOutput { node: id, index };
            }
        }
        self.g.push_node(node);
        Ok(())
    }

    /// A new constant.
    fn constant(&mut self, suffix: &str, tensor: Tensor) -> ValueId {
        let name = self.x.names.fresh(&format!("{}/{suffix}", self.base));
        self.g.add_value(Value {
            name: name.clone(),
            ty: None,
            kind: ValueKind::Initializer(Tensor { name, ..tensor }),
            doc_string: String::new(),
        })
    }

    /// `DequantizeLinear(x, scale, zp)`; `axis` for a scale that may hold one
    /// value per channel (dropped when the scale is known to hold one).
    fn dequantize(
        &mut self,
        x: ValueId,
        scale: ValueId,
        zp: Option<ValueId>,
        axis: Option<i64>,
        what: &str,
    ) -> Result<Float, String> {
        let mut attrs = Vec::new();
        if let Some(axis) = axis
            && !is_single(self.g, scale)
        {
            if self.version < 13 {
                return Err(format!(
                    "scale '{}' may hold one value per channel, which needs DequantizeLinear with 'axis' (opset 13 of the default domain); the model imports opset {}",
                    self.name_of(scale),
                    self.version
                ));
            }
            attrs.push(attr_int("axis", axis));
        }
        self.add(
            "DequantizeLinear",
            vec![Some(x), Some(scale), zp],
            attrs,
            &format!("{what}_dequantized"),
        )
    }

    /// The zero point for quantizing the output: the given one, or (absent)
    /// a zero of the type of `like` (the quantized input whose type the
    /// output has), or none when that type is uint8, `QuantizeLinear`'s
    /// default.
    fn output_zero_point(
        &mut self,
        zp: Option<ValueId>,
        like: ValueId,
    ) -> Result<Option<ValueId>, String> {
        if zp.is_some() {
            return Ok(zp);
        }
        let declared = self.node.output(0).and_then(|o| declared_elem(self.g.value(o)));
        match declared.or_else(|| elem_of(self.g, like, 0)) {
            Some(ElemType::Uint8) => Ok(None),
            Some(e @ ElemType::Int8) => {
                let t = Tensor {
                    name: String::new(),
                    elem: e,
                    dims: Vec::new(),
                    data: TensorData::Bytes(vec![0u8].into()),
                };
                Ok(Some(self.constant("zero_point", t)))
            }
            Some(other) => Err(format!(
                "'{}' is {other}, but the quantized operators take int8 or uint8",
                self.name_of(like)
            )),
            None => Err(format!(
                "the output zero point is absent and the element type of '{}' is not known before inference; give the zero point",
                self.name_of(like)
            )),
        }
    }

    fn expand(&mut self) -> Result<(), String> {
        match self.node.op.op_type.as_str() {
            "QuantizeLinear" | "DequantizeLinear" => self.quantize_op(),
            "QLinearAdd" => self.binary("Add"),
            "QLinearMul" => self.binary("Mul"),
            "QLinearSigmoid" => self.unary("Sigmoid", Vec::new()),
            "QLinearLeakyRelu" => {
                let alpha = self.attr_float("alpha", 0.01);
                self.unary("LeakyRelu", vec![attr_float("alpha", alpha)])
            }
            "QLinearAveragePool" => self.average_pool(),
            "QLinearGlobalAveragePool" => self.global_average_pool(),
            "QLinearSoftmax" => self.softmax(),
            "QGemm" => self.gemm(),
            "QLinearConcat" => self.concat(),
            "DynamicQuantizeMatMul" => self.dynamic_matmul(),
            "MatMulIntegerToFloat" => self.matmul_integer_to_float(),
            "DynamicQuantizeLSTM" => self.lstm(),
            other => Err(format!("{other} is not expanded")),
        }
    }

    /// `com.microsoft` QuantizeLinear / DequantizeLinear: the standard ones.
    fn quantize_op(&mut self) -> Result<(), String> {
        let op_type = self.node.op.op_type.clone();
        let x = self.required(0)?;
        let scale = self.required(1)?;
        let zp = self.input(2);
        let mut attrs = Vec::new();
        if let Some(axis) = self.node.attr_int("axis")
            && !is_single(self.g, scale)
        {
            if self.version < 13 {
                return Err(format!(
                    "attribute 'axis' (per-axis scale '{}') needs {op_type} from opset 13 of the default domain; the model imports opset {}",
                    self.name_of(scale),
                    self.version
                ));
            }
            attrs.push(attr_int("axis", axis));
        }
        self.finish(&op_type, vec![Some(x), Some(scale), zp], attrs)
    }

    /// Quantizes `y` into the node's output.
    fn quantize_out(
        &mut self,
        y: Float,
        scale: ValueId,
        zp: Option<ValueId>,
    ) -> Result<(), String> {
        self.finish("QuantizeLinear", vec![Some(y), Some(scale), zp], Vec::new())
    }

    fn binary(&mut self, float_op: &str) -> Result<(), String> {
        if let Some((x, table)) = self.binary_of_constant(float_op == "Add") {
            let table = self.constant("table", table);
            let lowering = Some(Lowering::Lookup { table });
            return self.finish_lowered(float_op, vec![Some(x)], Vec::new(), lowering);
        }
        let (a, a_s, a_z) = (self.required(0)?, self.required(1)?, self.input(2));
        let (b, b_s, b_z) = (self.required(3)?, self.required(4)?, self.input(5));
        let (c_s, c_z) = (self.required(6)?, self.input(7));
        let c_z = self.output_zero_point(c_z, a)?;
        let fa = self.dequantize(a, a_s, a_z, None, "A")?;
        let fb = self.dequantize(b, b_s, b_z, None, "B")?;
        let y = self.add(float_op, vec![Some(fa), Some(fb)], Vec::new(), float_op)?;
        self.quantize_out(y, c_s, c_z)
    }

    /// A `QLinearAdd` or `QLinearMul` of a scalar constant as onnxruntime
    /// computes it: the other input and the table of the result for each
    /// of its bytes ([`fused_binary_table`]). `None` unless one input is
    /// such a constant and every scale and zero point is a one-element
    /// constant.
    fn binary_of_constant(&self, add: bool) -> Option<(ValueId, Tensor)> {
        let scalar = |i: usize| -> Option<f64> {
            let t = constant_of(self.g, self.input(i)?)?;
            (t.elem == ElemType::Float).then_some(())?;
            match t.to_f64s()?.as_slice() {
                [v] => Some(*v),
                _ => None,
            }
        };
        let int = |v: ValueId| -> Option<(i64, ElemType)> {
            let t = constant_of(self.g, v)?;
            match t.to_i64s()?.as_slice() {
                [v] => Some((*v, t.elem)),
                _ => None,
            }
        };
        // A scalar (rank 0), which broadcasting leaves the other input's
        // shape, as the table's output keeps it.
        let scalar_const = |v: ValueId| -> Option<(i64, ElemType)> {
            constant_of(self.g, v)?.dims.is_empty().then_some(())?;
            int(v)
        };
        let (a, b) = (self.input(0)?, self.input(3)?);
        let (x_first, x, c) =
            if let Some(c) = scalar_const(b) { (true, a, c) } else { (false, b, scalar_const(a)?) };
        let elem = c.1;
        if !matches!(elem, ElemType::Int8 | ElemType::Uint8) || elem_of(self.g, x, 0) != Some(elem)
        {
            return None;
        }
        // An absent zero point is 0; a given one has the inputs' type.
        let zero = |i: usize| -> Option<i64> {
            self.input(i).map_or(Some(0), |z| int(z).filter(|&(_, e)| e == elem).map(|(z, _)| z))
        };
        let (a_scale, b_scale, y_scale) = (scalar(1)?, scalar(4)?, scalar(6)?);
        let (a_zero, b_zero, y_zero) = (zero(2)?, zero(5)?, zero(7)?);
        let ((x_scale, x_zero), (c_scale, c_zero)) = if x_first {
            ((a_scale, a_zero), (b_scale, b_zero))
        } else {
            ((b_scale, b_zero), (a_scale, a_zero))
        };
        let bytes = fused_binary_table(
            add,
            elem,
            (x_scale as f32, x_zero as i32),
            (c_scale as f32, c_zero as i32, c.0 as i32),
            (y_scale as f32, y_zero as i32),
        );
        let table = Tensor::from_bytes(String::new(), elem, vec![256], bytes.into()).ok()?;
        Some((x, table))
    }

    fn unary(&mut self, float_op: &str, attrs: Vec<Attribute>) -> Result<(), String> {
        let (x, x_s, x_z) = (self.required(0)?, self.required(1)?, self.input(2));
        let (y_s, y_z) = (self.required(3)?, self.input(4));
        let y_z = self.output_zero_point(y_z, x)?;
        let fx = self.dequantize(x, x_s, x_z, None, "X")?;
        let y = self.add(float_op, vec![Some(fx)], attrs, float_op)?;
        self.quantize_out(y, y_s, y_z)
    }

    /// `Transpose` of a quantized tensor (layout changes stay outside the
    /// dequantize → op → quantize pattern).
    fn transpose(&mut self, x: ValueId, perm: Vec<i64>, suffix: &str) -> Result<ValueId, String> {
        self.add("Transpose", vec![Some(x)], vec![attr_ints("perm", perm)], suffix)
    }

    /// The float op between a dequantize and a quantize, with the layout
    /// of the quantized tensors changed before and after when
    /// `channels_last` (NHWC → NCHW → NHWC).
    fn pool(
        &mut self,
        float_op: &str,
        attrs: Vec<Attribute>,
        channels_last_rank: Option<usize>,
    ) -> Result<(), String> {
        let (x, x_s, x_z) = (self.required(0)?, self.required(1)?, self.input(2));
        let (y_s, y_z) = (self.required(3)?, self.input(4));
        let y_z = self.output_zero_point(y_z, x)?;
        let Some(rank) = channels_last_rank else {
            let fx = self.dequantize(x, x_s, x_z, None, "X")?;
            let y = self.add(float_op, vec![Some(fx)], attrs, float_op)?;
            return self.quantize_out(y, y_s, y_z);
        };
        let r = i64::try_from(rank).map_err(|_| "the input's rank is too large".to_owned())?;
        let to_first: Vec<i64> = [0, r - 1].into_iter().chain(1..r - 1).collect();
        let to_last: Vec<i64> = [0].into_iter().chain(2..r).chain([1]).collect();
        let xt = self.transpose(x, to_first, "X_channels_first")?;
        let fx = self.dequantize(xt, x_s, x_z, None, "X")?;
        let y = self.add(float_op, vec![Some(fx)], attrs, float_op)?;
        let yq = self.add(
            "QuantizeLinear",
            vec![Some(y), Some(y_s), y_z],
            Vec::new(),
            "Y_channels_first",
        )?;
        self.finish("Transpose", vec![Some(yq)], vec![attr_ints("perm", to_last)])
    }

    fn average_pool(&mut self) -> Result<(), String> {
        let kernel = match self.node.attr("kernel_shape") {
            Some(AttrValue::Ints(k)) if !k.is_empty() => k.clone(),
            _ => {
                return Err(
                    "attribute 'kernel_shape' must list the window size of each spatial axis"
                        .to_owned(),
                );
            }
        };
        let mut attrs = vec![attr_ints("kernel_shape", kernel.clone())];
        for name in ["pads", "strides"] {
            if let Some(AttrValue::Ints(v)) = self.node.attr(name) {
                attrs.push(attr_ints(name, v.clone()));
            }
        }
        if let Some(a) = self.node.attributes.iter().find(|a| a.name == "auto_pad")
            && !matches!(&a.value, AttrValue::String(s) if s == b"NOTSET")
        {
            attrs.push(a.clone());
        }
        for name in ["ceil_mode", "count_include_pad"] {
            let v = self.attr_int(name, 0);
            if v != 0 {
                attrs.push(attr_int(name, v));
            }
        }
        let rank = match self.attr_int("channels_last", 0) {
            0 => None,
            _ => Some(kernel.len() + 2),
        };
        self.pool("AveragePool", attrs, rank)
    }

    fn global_average_pool(&mut self) -> Result<(), String> {
        let rank = match self.attr_int("channels_last", 0) {
            0 => None,
            _ => {
                let x = self.required(0)?;
                match known_rank(self.g, x) {
                    Some(r) if r >= 3 => Some(r),
                    Some(r) => {
                        return Err(format!(
                            "attribute 'channels_last' = 1 needs '{}' of rank 3 or more (N, spatial axes, C), but its rank is {r}",
                            self.name_of(x)
                        ));
                    }
                    None => {
                        return Err(format!(
                            "attribute 'channels_last' = 1 needs the rank of '{}', which is not known before inference; declare its shape",
                            self.name_of(x)
                        ));
                    }
                }
            }
        };
        self.pool("GlobalAveragePool", Vec::new(), rank)
    }

    /// `Softmax` with the semantics the node's `opset` attribute selects:
    /// before 13, the input is flattened to 2-D at `axis` and normalized
    /// along the second axis; from 13, normalized along `axis` only.
    fn softmax(&mut self) -> Result<(), String> {
        let (x, x_s, x_z) = (self.required(0)?, self.required(1)?, self.input(2));
        let (y_s, y_z) = (self.required(3)?, self.input(4));
        let semantics = self.attr_int("opset", 13);
        let axis = self.node.attr_int("axis").unwrap_or(if semantics < 13 { 1 } else { -1 });
        let rank = known_rank(self.g, x);
        let norm = rank.and_then(|r| {
            let r = i64::try_from(r).ok()?;
            (-r..r).contains(&axis).then_some(if axis < 0 { axis + r } else { axis })
        });
        if let (Some(r), None) = (rank, norm) {
            return Err(format!(
                "attribute 'axis' = {axis} is out of range for '{}' of rank {r}",
                self.name_of(x)
            ));
        }
        let last = axis == -1
            || rank.zip(norm).is_some_and(|(r, a)| a + 1 == i64::try_from(r).unwrap_or(0));
        let y_z = self.output_zero_point(y_z, x)?;
        if last || (semantics < 13) == (self.version < 13) {
            // Both semantics agree on the last axis.
            let attrs =
                if last { vec![attr_int("axis", -1)] } else { vec![attr_int("axis", axis)] };
            let fx = self.dequantize(x, x_s, x_z, None, "X")?;
            let y = self.add("Softmax", vec![Some(fx)], attrs, "Softmax")?;
            return self.quantize_out(y, y_s, y_z);
        }
        if semantics < 13 {
            // Flattening semantics with a Softmax-13: flatten the quantized
            // input at `axis`, normalize the rows, give the result X's shape.
            let flat = self.add("Flatten", vec![Some(x)], vec![attr_int("axis", axis)], "X_2d")?;
            let fx = self.dequantize(flat, x_s, x_z, None, "X")?;
            let y = self.add("Softmax", vec![Some(fx)], vec![attr_int("axis", -1)], "Softmax")?;
            let yq =
                self.add("QuantizeLinear", vec![Some(y), Some(y_s), y_z], Vec::new(), "Y_2d")?;
            let shape = self.add("Shape", vec![Some(x)], Vec::new(), "X_shape")?;
            return self.finish("Reshape", vec![Some(yq), Some(shape)], Vec::new());
        }
        // One-axis semantics with a pre-13 Softmax: move `axis` last.
        let (Some(r), Some(a)) = (rank, norm) else {
            return Err(format!(
                "attribute 'opset' = {semantics} asks for Softmax-13 semantics on axis {axis}, which the model's opset {} expresses only with the rank of '{}'; declare its shape",
                self.version,
                self.name_of(x)
            ));
        };
        let r = i64::try_from(r).map_err(|_| "the input's rank is too large".to_owned())?;
        let perm: Vec<i64> = (0..r)
            .map(|i| {
                if i == a {
                    r - 1
                } else if i == r - 1 {
                    a
                } else {
                    i
                }
            })
            .collect();
        let xt = self.transpose(x, perm.clone(), "X_axis_last")?;
        let fx = self.dequantize(xt, x_s, x_z, None, "X")?;
        let y = self.add("Softmax", vec![Some(fx)], vec![attr_int("axis", r - 1)], "Softmax")?;
        let yq =
            self.add("QuantizeLinear", vec![Some(y), Some(y_s), y_z], Vec::new(), "Y_axis_last")?;
        self.finish("Transpose", vec![Some(yq)], vec![attr_ints("perm", perm)])
    }

    /// `Y = alpha * A' B' + alpha * C'` in float, where `X'` is `X`
    /// dequantized and `C'` is the int32 `C` at scale `a_scale * b_scale`
    /// (the kernel adds `C` to the integer product before scaling); then
    /// quantized by `y_scale` / `y_zero_point`, or float without them.
    fn gemm(&mut self) -> Result<(), String> {
        let (a, a_s, a_z) = (self.required(0)?, self.required(1)?, self.input(2));
        let (b, b_s, b_z) = (self.required(3)?, self.required(4)?, self.input(5));
        let (c, y_s, y_z) = (self.input(6), self.input(7), self.input(8));
        if y_s.is_some() != y_z.is_some() {
            let (given, missing) = if y_s.is_some() {
                ("y_scale", "y_zero_point")
            } else {
                ("y_zero_point", "y_scale")
            };
            return Err(format!(
                "it has {given} but no {missing}: give both for a quantized output, or neither for a float one"
            ));
        }
        let alpha = self.attr_float("alpha", 1.0);
        let trans_a = self.attr_int("transA", 0) != 0;
        let trans_b = self.attr_int("transB", 0) != 0;
        if !is_single(self.g, a_s) && known_dims(self.g, a_s).is_some() {
            return Err(format!("a_scale '{}' must hold a single value", self.name_of(a_s)));
        }
        let fa = self.dequantize(a, a_s, a_z, None, "A")?;
        // Per-column scales of B: axis 1 of B (K, N), axis 0 of B^T (N, K).
        let fb = self.dequantize(b, b_s, b_z, Some(if trans_b { 0 } else { 1 }), "B")?;
        let mut inputs = vec![Some(fa), Some(fb)];
        if let Some(c) = c {
            let c_s = self.add("Mul", vec![Some(a_s), Some(b_s)], Vec::new(), "C_scale")?;
            let per_column = !is_single(self.g, b_s);
            let columns = known_dims(self.g, b_s).and_then(|d| d.first().copied());
            let c_dims = known_dims(self.g, c);
            // DequantizeLinear takes the scale per column when C's last axis
            // holds the columns; otherwise (C broadcast along N, or shapes
            // unknown) C is cast and scaled, which broadcasts like Gemm.
            let c_axis = match (&c_dims, columns) {
                (Some(d), Some(n))
                    if !d.is_empty() && d.last() == Some(&n) && self.version >= 13 =>
                {
                    Some(i64::try_from(d.len() - 1).unwrap_or(0))
                }
                _ => None,
            };
            let fc = if !per_column {
                self.add("DequantizeLinear", vec![Some(c), Some(c_s)], Vec::new(), "C_dequantized")?
            } else if let Some(axis) = c_axis {
                self.add(
                    "DequantizeLinear",
                    vec![Some(c), Some(c_s)],
                    vec![attr_int("axis", axis)],
                    "C_dequantized",
                )?
            } else {
                let cf = self.add("Cast", vec![Some(c)], vec![attr_int("to", 1)], "C_float")?;
                self.add("Mul", vec![Some(cf), Some(c_s)], Vec::new(), "C_dequantized")?
            };
            inputs.push(Some(fc));
        } else if self.version < 11 {
            // Gemm takes C from opset 11 on only.
            let zero = Tensor {
                name: String::new(),
                elem: ElemType::Float,
                dims: Vec::new(),
                data: TensorData::Bytes(0f32.to_le_bytes().to_vec().into()),
            };
            inputs.push(Some(self.constant("C_zero", zero)));
        }
        let mut attrs = Vec::new();
        if alpha != 1.0 {
            attrs.push(attr_float("alpha", alpha));
            if c.is_some() {
                attrs.push(attr_float("beta", alpha));
            }
        }
        if trans_a {
            attrs.push(attr_int("transA", 1));
        }
        if trans_b {
            attrs.push(attr_int("transB", 1));
        }
        match (y_s, y_z) {
            (Some(y_s), Some(y_z)) => {
                let y = self.add("Gemm", inputs, attrs, "Gemm")?;
                self.quantize_out(y, y_s, Some(y_z))
            }
            _ => self.finish("Gemm", inputs, attrs),
        }
    }

    fn concat(&mut self) -> Result<(), String> {
        let (y_s, y_z) = (self.required(0)?, self.required(1)?);
        let axis = self.attr_int("axis", 0);
        let n = self.node.inputs.len().saturating_sub(2) / 3;
        let mut parts = Vec::with_capacity(n);
        for k in 0..n {
            let i = 2 + 3 * k;
            let (x, x_s, x_z) = (self.required(i)?, self.required(i + 1)?, self.input(i + 2));
            parts.push(Some(self.dequantize(x, x_s, x_z, None, &format!("X{k}"))?));
        }
        let y = self.add("Concat", parts, vec![attr_int("axis", axis)], "Concat")?;
        self.quantize_out(y, y_s, Some(y_z))
    }

    /// `int32 (A_q - a_zp)(B - b_zp)` → float → times `a_scale * b_scale`
    /// (+ bias), into the node's output.
    fn integer_product(
        &mut self,
        a: ValueId,
        a_z: Option<ValueId>,
        a_s: ValueId,
        b_s: ValueId,
        bias: Option<ValueId>,
    ) -> Result<(), String> {
        let b = self.required(1)?;
        let b_z = match self.node.op.op_type.as_str() {
            "DynamicQuantizeMatMul" => self.input(3),
            _ => self.input(5),
        };
        let mut inputs = vec![Some(a), Some(b), a_z, b_z];
        while inputs.last() == Some(&None) {
            inputs.pop();
        }
        let product = self.add("MatMulInteger", inputs, Vec::new(), "MatMulInteger")?;
        let pf = self.add("Cast", vec![Some(product)], vec![attr_int("to", 1)], "product_float")?;
        let scale = self.add("Mul", vec![Some(a_s), Some(b_s)], Vec::new(), "product_scale")?;
        match bias {
            None => self.finish("Mul", vec![Some(pf), Some(scale)], Vec::new()),
            Some(bias) => {
                let y = self.add("Mul", vec![Some(pf), Some(scale)], Vec::new(), "product")?;
                self.finish("Add", vec![Some(y), Some(bias)], Vec::new())
            }
        }
    }

    /// A is quantized at run time to uint8 as `DynamicQuantizeLinear` does
    /// (the range of A with 0, 255 steps), then multiplied in integers.
    fn dynamic_matmul(&mut self) -> Result<(), String> {
        let a = self.required(0)?;
        let b_s = self.required(2)?;
        let bias = self.input(4);
        let q = self.add_multi(
            "DynamicQuantizeLinear",
            vec![Some(a)],
            Vec::new(),
            &["A_quantized", "A_scale", "A_zero_point"],
        )?;
        let [aq, a_s, a_z] = q[..] else {
            return Err("DynamicQuantizeLinear made no outputs".to_owned());
        };
        self.integer_product(aq, Some(a_z), a_s, b_s, bias)
    }

    fn matmul_integer_to_float(&mut self) -> Result<(), String> {
        let a = self.required(0)?;
        let (a_s, b_s) = (self.required(2)?, self.required(3)?);
        let a_z = self.input(4);
        let bias = self.input(6);
        self.integer_product(a, a_z, a_s, b_s, bias)
    }

    /// The weights `[D, I|H, 4H]` quantized per direction (scale `[D]`) or
    /// per direction and gate column (`[D, 4H]`), as a float LSTM weight
    /// `[D, 4H, I|H]`.
    fn lstm_weight(&mut self, w: usize, s: usize, z: usize, what: &str) -> Result<ValueId, String> {
        let (w, s, z) = (self.required(w)?, self.required(s)?, self.required(z)?);
        let shape = self
            .constant(&format!("{what}_scale_shape"), Tensor::from_i64s("", vec![3], &[0, 1, -1]));
        let s3 = self.add(
            "Reshape",
            vec![Some(s), Some(shape)],
            Vec::new(),
            &format!("{what}_scale_3d"),
        )?;
        let z3 = self.add(
            "Reshape",
            vec![Some(z), Some(shape)],
            Vec::new(),
            &format!("{what}_zero_point_3d"),
        )?;
        let wf =
            self.add("Cast", vec![Some(w)], vec![attr_int("to", 1)], &format!("{what}_float"))?;
        let zf = self.add(
            "Cast",
            vec![Some(z3)],
            vec![attr_int("to", 1)],
            &format!("{what}_zero_point_float"),
        )?;
        let centered =
            self.add("Sub", vec![Some(wf), Some(zf)], Vec::new(), &format!("{what}_centered"))?;
        let deq = self.add(
            "Mul",
            vec![Some(centered), Some(s3)],
            Vec::new(),
            &format!("{what}_dequantized"),
        )?;
        self.transpose(deq, vec![0, 2, 1], &format!("{what}_gates_first"))
    }

    /// The zero point `z` (input `i`, `[D]` or `[D, 4H]`) when it holds one
    /// value per direction, as onnxruntime's kernel requires (it reads the
    /// first of each direction).
    fn lstm_zero_point(&self, i: usize, what: &str) -> Result<ValueId, String> {
        let z = self.required(i)?;
        if let Some(t) = constant_of(self.g, z)
            && let (Some(v), [d, ..]) = (t.to_i64s(), t.dims.as_slice())
        {
            let per = usize::try_from(*d).ok().filter(|&d| d > 0).map(|d| v.len() / d);
            if let Some(per) = per.filter(|&p| p > 0)
                && v.chunks(per).any(|c| c.iter().any(|&x| x != c[0]))
            {
                return Err(format!(
                    "{what} zero point '{}' differs within a direction; onnxruntime takes one per direction",
                    self.name_of(z)
                ));
            }
        }
        Ok(z)
    }

    /// An `LSTM` lowered to run as onnxruntime's kernel does
    /// ([`Lowering::DynamicLstm`]): X and the hidden state quantized at run
    /// time, products on the 8-bit weights, regrouped by gate row
    /// (`[D, 4H, I|H]`). Its float `W` and `R` are the dequantized weights,
    /// so the node is also the float LSTM the operator approximates; the
    /// lowering reads the 8-bit ones instead.
    fn lstm(&mut self) -> Result<(), String> {
        let x = self.required(0)?;
        let w = self.lstm_weight(1, 8, 9, "W")?;
        let r = self.lstm_weight(2, 10, 11, "R")?;
        let (w_zero, r_zero) = (self.lstm_zero_point(9, "W")?, self.lstm_zero_point(11, "R")?);
        let wq = self.transpose(self.required(1)?, vec![0, 2, 1], "W_gate_rows")?;
        let rq = self.transpose(self.required(2)?, vec![0, 2, 1], "R_gate_rows")?;
        let lowering = Lowering::DynamicLstm(DynamicLstm {
            w: wq,
            w_scale: self.required(8)?,
            w_zero,
            r: rq,
            r_scale: self.required(10)?,
            r_zero,
        });
        let mut inputs = vec![Some(x), Some(w), Some(r)];
        inputs.extend((3..8).map(|i| self.input(i)));
        while inputs.last() == Some(&None) {
            inputs.pop();
        }
        let attrs: Vec<Attribute> = self.node.attributes.clone();
        self.finish_lowered("LSTM", inputs, attrs, Some(lowering))
    }
}

/// The element type a value is declared with.
fn declared_elem(v: &Value) -> Option<ElemType> {
    match &v.ty {
        Some(Type::Tensor { elem, .. }) => *elem,
        _ => None,
    }
}

/// onnxruntime's `QLinearAdd` and `QLinearMul` of an input `x` and a
/// one-element constant `c` (value `c.2`), for each byte of `x` (as the
/// `Lookup` table reads it). Its x86-64 kernels round in `f32` in an order
/// of their own: `Add` as `fma(x, rx, fixed)` with `rx = sx / sy` and
/// `fixed = (zy - (rx zx + rc zc)) + c rc`; `Mul` as `(x - zx)(c - zc)`
/// times `sx sc / sy`, plus `zy`; each product, quotient and sum rounded
/// to `f32`, then the result to the
/// nearest integer, ties to even, saturated to the type. Where a model's
/// scales put values on a rounding tie (a GELU's `1 + tanh`, whose `1` is
/// half an output step), the dequantize, compute, quantize reading of the
/// same node rounded a quarter of the values the other way.
fn fused_binary_table(
    add: bool,
    elem: ElemType,
    (sx, zx): (f32, i32),
    (sc, zc, c): (f32, i32, i32),
    (sy, zy): (f32, i32),
) -> Vec<u8> {
    let f = |x: i32| -> f32 {
        if add {
            let (rx, rc) = (sx / sy, sc / sy);
            let fixed = (zy as f32 - (rx * zx as f32 + rc * zc as f32)) + c as f32 * rc;
            (x as f32).mul_add(rx, fixed)
        } else {
            let ratio = sx * sc / sy;
            ((x - zx) * (c - zc)) as f32 * ratio + zy as f32
        }
    };
    let (lo, hi) = if elem == ElemType::Int8 { (-128.0, 127.0) } else { (0.0, 255.0) };
    (0..=255u8)
        .map(|bits| {
            let x = if elem == ElemType::Int8 { i32::from(bits as i8) } else { i32::from(bits) };
            // Finite scales give no NaN; the clamp keeps the cast exact.
            f(x).clamp(lo, hi).round_ties_even() as i32 as u8
        })
        .collect()
}

/// The constant tensor behind `v` (an initializer or a `Constant` node's
/// `value`), if any.
fn constant_of(g: &Graph, v: ValueId) -> Option<&Tensor> {
    match &g.value(v).kind {
        ValueKind::Initializer(t) => Some(t),
        ValueKind::NodeOutput { node, .. } => {
            let n = g.node(*node);
            if n.op.domain.is_empty() && n.op.op_type == "Constant" {
                match n.attr("value") {
                    Some(AttrValue::Tensor(t)) => Some(t),
                    _ => None,
                }
            } else {
                None
            }
        }
        _ => None,
    }
}

/// The dims of `v` when known before inference (a constant, or a fully
/// declared shape).
fn known_dims(g: &Graph, v: ValueId) -> Option<Vec<u64>> {
    if let Some(t) = constant_of(g, v) {
        return Some(t.dims.clone());
    }
    match &g.value(v).ty {
        Some(Type::Tensor { shape, .. }) => shape.static_dims(),
        _ => None,
    }
}

/// The rank of `v` when known before inference.
fn known_rank(g: &Graph, v: ValueId) -> Option<usize> {
    if let Some(t) = constant_of(g, v) {
        return Some(t.dims.len());
    }
    match &g.value(v).ty {
        Some(Type::Tensor { shape, .. }) => shape.rank(),
        _ => None,
    }
}

/// Whether `v` is known to hold exactly one element (a per-tensor scale).
fn is_single(g: &Graph, v: ValueId) -> bool {
    known_dims(g, v).is_some_and(|d| d.iter().product::<u64>() == 1)
}

/// The element type of `v` when it can be told before inference: declared,
/// constant, or the output of a quantizing operator whose type follows from
/// its zero point or its quantized input.
fn elem_of(g: &Graph, v: ValueId, depth: usize) -> Option<ElemType> {
    let value = g.value(v);
    if let Some(e) = declared_elem(value) {
        return Some(e);
    }
    if let Some(t) = constant_of(g, v) {
        return Some(t.elem);
    }
    let ValueKind::NodeOutput { node, index: 0 } = value.kind else { return None };
    if depth > 64 {
        return None;
    }
    let n = g.node(node);
    // Follows the first present input of `order` only (one chain, so the
    // walk is linear in its length).
    let follow = |order: &[usize]| {
        let x = order.iter().find_map(|&i| n.input(i))?;
        elem_of(g, x, depth + 1)
    };
    match (n.op.domain.as_str(), n.op.op_type.as_str()) {
        ("", "DynamicQuantizeLinear") => Some(ElemType::Uint8),
        ("" | DOMAIN, "QuantizeLinear") => {
            if n.input(2).is_some() {
                return follow(&[2]);
            }
            match n.attr_int("output_dtype") {
                Some(code) if code != 0 => ElemType::from_proto(i32::try_from(code).ok()?),
                _ => Some(ElemType::Uint8),
            }
        }
        (DOMAIN, "QGemm") => follow(&[8]),
        (DOMAIN, "QLinearAdd" | "QLinearMul") => follow(&[7, 0]),
        (DOMAIN, "QLinearConcat") => follow(&[1]),
        (
            DOMAIN,
            "QLinearAveragePool"
            | "QLinearGlobalAveragePool"
            | "QLinearSoftmax"
            | "QLinearSigmoid"
            | "QLinearLeakyRelu",
        ) => follow(&[4, 0]),
        ("", "QLinearConv" | "QLinearMatMul") => follow(&[7]),
        (
            "",
            "Transpose" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" | "MaxPool" | "Relu",
        ) => follow(&[0]),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ir::Lowering;
    use crate::ops::{HostData, HostTensor};

    /// `graph` in a model importing the default domain at `opset` and
    /// `com.microsoft` at 1.
    fn source(opset: u32, graph: &str) -> String {
        format!("<ir_version: 8, opset_import: [\"\" : {opset}, \"com.microsoft\" : 1]>\n{graph}")
    }

    fn run(opset: u32, graph: &str) -> Analysis {
        let model =
            crate::text::parse_model(&source(opset, graph), "test.onnxtxt").expect("parses");
        let a = analyze(&model, &Options::default()).expect("test model is valid");
        assert!(a.inferred.is_complete(), "{:?}", a.inferred.unsupported);
        a
    }

    /// The error `analyze` reports for `graph`.
    fn error(opset: u32, graph: &str) -> String {
        let model =
            crate::text::parse_model(&source(opset, graph), "test.onnxtxt").expect("parses");
        match analyze(&model, &Options::default()) {
            Ok(_) => panic!("the model was accepted"),
            Err(e) => {
                e.diagnostics().iter().map(ToString::to_string).collect::<Vec<_>>().join("\n")
            }
        }
    }

    /// The folded value of graph output `j`.
    fn out(a: &Analysis, j: usize) -> HostData {
        let v = a.model().graph.outputs[j];
        let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
        HostTensor::from_tensor(t).expect("output has a host form").data
    }

    fn floats(a: &Analysis, j: usize) -> Vec<f64> {
        match out(a, j) {
            HostData::F32(v) => v.into_iter().map(f64::from).collect(),
            other => panic!("not float: {other:?}"),
        }
    }

    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()), "{got:?} vs {want:?}");
        }
    }

    /// The operators of the main graph, in order.
    fn ops(a: &Analysis) -> Vec<String> {
        a.model().graph.nodes().map(|(_, n)| n.op.op_type.clone()).collect()
    }

    /// Round half to even, saturated to `[lo, hi]`: the reference quantizer.
    fn quantize(x: f64, scale: f64, zp: i64, lo: i64, hi: i64) -> i64 {
        let q = x / scale;
        let r = q.round();
        let r = if (q - q.trunc()).abs() == 0.5 { 2.0 * (q / 2.0).round() } else { r };
        (r as i64 + zp).clamp(lo, hi)
    }

    #[test]
    fn qlinear_add_broadcasts_and_requantizes() {
        // A' = (A - 10) * 0.5 = [[0, 5, 10], [15, 20, 25]]; B' = (B - 2) * 0.25 = [0, 0.5, 1];
        // A' + B' = [[0, 5.5, 11], [15, 20.5, 26]]; / 0.5 + 5.
        // Int8 without zero points: [-2, 0, 3] + [2] = [0, 2, 5]; / 0.25.
        let a = run(
            13,
            "g () => (uint8[2,3] y, int8[3] z) <uint8[2,3] a = {10, 20, 30, 40, 50, 60},
                 float sa = {0.5}, uint8 za = {10}, uint8[3] b = {2, 4, 6}, float sb = {0.25},
                 uint8 zb = {2}, float sy = {0.5}, uint8 zy = {5},
                 int8[3] c = {-4, 0, 6}, int8[1] d = {2}, float one = {1}, float sz = {0.25}> {
                [add] y = com.microsoft.QLinearAdd (a, sa, za, b, sb, zb, sy, zy)
                z = com.microsoft.QLinearAdd (c, sa, , d, one, , sz)
            }",
        );
        assert_eq!(out(&a, 0), HostData::U8(vec![5, 16, 27, 35, 46, 57]));
        assert_eq!(out(&a, 1), HostData::I8(vec![0, 8, 20]));
        let g = &a.model().graph;
        assert!(g.value_by_name("y").is_some() && g.value_by_name("add/Add").is_some());
    }

    #[test]
    fn qlinear_add_of_a_constant_rounds_as_onnxruntime() {
        // A GELU's `1 + tanh(u)` as onnxruntime's quantizer writes it: x at
        // scale 2/255 around 127, the `1` as 255 at scale 1/255, y at 2/255
        // from 0. y = x + 0.5 on a tie for every x, which onnxruntime 1.32's
        // QLinearAdd (x86-64) rounds to even: x for even x, x + 1 for odd
        // x, 255 for 255. The float reading (1.0000004 after
        // DequantizeLinear) gave x + 1 for all of them.
        let bytes: Vec<String> = (0..=255).map(|v: u32| v.to_string()).collect();
        let a = run(
            13,
            &format!(
                "g () => (uint8[256] y) <uint8[256] x = {{{}}}, float sx = {{0.00784314}},
                 uint8 zx = {{127}}, uint8 one = {{255}}, float s1 = {{0.00392157}},
                 uint8 z1 = {{0}}, float sy = {{0.00784314}}, uint8 zy = {{0}}> {{
                    y = com.microsoft.QLinearAdd (x, sx, zx, one, s1, z1, sy, zy)
                }}",
                bytes.join(", ")
            ),
        );
        let want: Vec<u8> =
            (0..=255u8).map(|x| if x % 2 == 1 && x < 255 { x + 1 } else { x }).collect();
        assert_eq!(out(&a, 0), HostData::U8(want));
    }

    #[test]
    fn qlinear_mul_sigmoid_leaky_relu() {
        // X' = (X - 128) / 16 = [-2, -0.5, 0, 1.5].
        let a = run(
            13,
            "g () => (uint8[4] m, uint8[4] s, uint8[4] l) <uint8[4] x = {96, 120, 128, 152},
                 float sx = {0.0625}, uint8 zx = {128}, float sm = {0.125}, uint8 zm = {100},
                 float ss = {0.00390625}, uint8 zs = {0}> {
                m = com.microsoft.QLinearMul (x, sx, zx, x, sx, zx, sm, zm)
                s = com.microsoft.QLinearSigmoid (x, sx, zx, ss, zs)
                l = com.microsoft.QLinearLeakyRelu <alpha: float = 0.25> (x, sx, zx, sx, zx)
            }",
        );
        let xs = [-2.0f64, -0.5, 0.0, 1.5];
        let m: Vec<u8> = xs.iter().map(|x| quantize(x * x, 0.125, 100, 0, 255) as u8).collect();
        let s: Vec<u8> = xs
            .iter()
            .map(|x| quantize(1.0 / (1.0 + (-x).exp()), 0.00390625, 0, 0, 255) as u8)
            .collect();
        assert_eq!(out(&a, 0), HostData::U8(m));
        assert_eq!(out(&a, 1), HostData::U8(s));
        // LeakyRelu: [-0.5, -0.125, 0, 1.5] * 16 + 128.
        assert_eq!(out(&a, 2), HostData::U8(vec![120, 126, 128, 152]));
    }

    /// A reference QGemm: `C + sum (A - a_zp)(B - b_zp)` in integers, then
    /// times `alpha * a_scale * b_scale[n]`.
    #[allow(clippy::too_many_arguments)]
    fn qgemm_ref(
        a: &[i64],
        a_zp: i64,
        a_s: f64,
        b_t: &[i64],
        b_zp: &[i64],
        b_s: &[f64],
        c: &[i64],
        (m, k, n): (usize, usize, usize),
    ) -> Vec<f64> {
        let mut y = Vec::new();
        for i in 0..m {
            for j in 0..n {
                let acc: i64 = c[j]
                    + (0..k)
                        .map(|p| (a[i * k + p] - a_zp) * (b_t[j * k + p] - b_zp[j]))
                        .sum::<i64>();
                y.push(acc as f64 * a_s * b_s[j]);
            }
        }
        y
    }

    const QGEMM_INPUTS: &str = "<uint8[2,3] a = {130, 140, 100, 90, 128, 200}, float sa = {0.05},
                 uint8 za = {128}, int8[2,3] b = {10, -20, 30, 5, 7, -9}, float[2] sb = {0.01, 0.02},
                 int8[2] zb = {0, 1}, int32[2] c = {100, -50}, float sy = {0.03}, uint8 zy = {120}";

    #[test]
    fn qgemm_per_channel_with_and_without_output_quantization() {
        let a = run(
            13,
            &format!(
                "g () => (uint8[2,2] y, float[2,2] f) {QGEMM_INPUTS}> {{
                    [fc] y = com.microsoft.QGemm <transB: int = 1> (a, sa, za, b, sb, zb, c, sy, zy)
                    f = com.microsoft.QGemm <transB: int = 1> (a, sa, za, b, sb, zb, c)
                }}"
            ),
        );
        let want = qgemm_ref(
            &[130, 140, 100, 90, 128, 200],
            128,
            0.05,
            &[10, -20, 30, 5, 7, -9],
            &[0, 1],
            &[0.01, 0.02],
            &[100, -50],
            (2, 3, 2),
        );
        let q: Vec<u8> = want.iter().map(|&y| quantize(y, 0.03, 120, 0, 255) as u8).collect();
        assert_eq!(out(&a, 0), HostData::U8(q));
        assert_close(&floats(&a, 1), &want);
        // The quantized form is a clean QDQ pattern: per-channel B on axis 0
        // (B is transposed), the bias at scale a_scale * b_scale.
        let g = &a.model().graph;
        let (_, dq_b) = g.nodes().find(|(_, n)| n.name == "fc/B_dequantized").expect("DQ of B");
        assert_eq!(dq_b.attr_int("axis"), Some(0));
        let (_, gemm) = g.nodes().find(|(_, n)| n.op.op_type == "Gemm").expect("a Gemm");
        let producers: Vec<String> = gemm
            .inputs
            .iter()
            .flatten()
            .map(|&v| g.producer(v).map_or(String::new(), |(id, _)| g.node(id).op.op_type.clone()))
            .collect();
        assert_eq!(producers, ["DequantizeLinear"; 3]);
    }

    #[test]
    fn qgemm_alpha_and_transposed_a() {
        // transA: A is given as (K, M); alpha scales C too.
        let a = run(
            13,
            "g () => (float[2,2] f) <uint8[3,2] a = {130, 90, 140, 128, 100, 200}, float sa = {0.05},
                 uint8 za = {128}, int8[3,2] b = {10, 5, -20, 7, 30, -9}, float sb = {0.5},
                 int8 zb = {0}, int32[2] c = {100, -50}> {
                f = com.microsoft.QGemm <alpha: float = 0.5, transA: int = 1> (a, sa, za, b, sb, zb, c)
            }",
        );
        let want = qgemm_ref(
            &[130, 140, 100, 90, 128, 200],
            128,
            0.05,
            &[10, -20, 30, 5, 7, -9],
            &[0, 0],
            &[0.25, 0.25],
            &[100, -50],
            (2, 3, 2),
        );
        assert_close(&floats(&a, 0), &want);
    }

    #[test]
    fn qlinear_average_pool_nchw_and_channels_last() {
        // NCHW [1,1,2,4], 2x2 windows: means 35 and 55, at scale 0.5.
        // NHWC [1,2,2,2]: channel means (1+3+5+7)/4 = 4 and (2+4+6+8)/4 = 5.
        let a = run(
            13,
            "g () => (uint8[1,1,1,2] y, uint8[1,1,1,2] z) <uint8[1,1,2,4] x = {10, 20, 30, 40, 50, 60, 70, 80},
                 uint8[1,2,2,2] n = {1, 2, 3, 4, 5, 6, 7, 8}, float one = {1}, float half = {0.5},
                 uint8 zero = {0}> {
                y = com.microsoft.QLinearAveragePool <kernel_shape: ints = [2, 2], strides: ints = [2, 2]> (x, one, zero, half, zero)
                z = com.microsoft.QLinearAveragePool <kernel_shape: ints = [2, 2], channels_last: int = 1> (n, one, zero, one, zero)
            }",
        );
        assert_eq!(out(&a, 0), HostData::U8(vec![70, 110]));
        assert_eq!(out(&a, 1), HostData::U8(vec![4, 5]));
    }

    #[test]
    fn qlinear_average_pool_counts_padding_when_asked() {
        // [1,1,1,2] = {4, 8}, window 2 with one pad on the left: {pad, 4}, {4, 8}.
        let a = run(
            13,
            "g () => (uint8[1,1,1,2] y, uint8[1,1,1,2] z) <uint8[1,1,1,2] x = {4, 8}, float one = {1},
                 uint8 zero = {0}> {
                y = com.microsoft.QLinearAveragePool <kernel_shape: ints = [1, 2], pads: ints = [0, 1, 0, 0]> (x, one, zero, one, zero)
                z = com.microsoft.QLinearAveragePool <kernel_shape: ints = [1, 2], pads: ints = [0, 1, 0, 0], count_include_pad: int = 1> (x, one, zero, one, zero)
            }",
        );
        assert_eq!(out(&a, 0), HostData::U8(vec![4, 6]));
        assert_eq!(out(&a, 1), HostData::U8(vec![2, 6]));
    }

    #[test]
    fn qlinear_global_average_pool() {
        let a = run(
            13,
            "g () => (uint8[1,2,1,1] y, uint8[1,1,1,2] z) <uint8[1,2,2,2] n = {1, 2, 3, 4, 5, 6, 7, 8},
                 float one = {1}, uint8 zero = {0}> {
                y = com.microsoft.QLinearGlobalAveragePool (n, one, zero, one, zero)
                z = com.microsoft.QLinearGlobalAveragePool <channels_last: int = 1> (n, one, zero, one, zero)
            }",
        );
        // NCHW: channel means 2.5 -> 2 (half to even), 6.5 -> 6; NHWC: 4 and 5.
        assert_eq!(out(&a, 0), HostData::U8(vec![2, 6]));
        assert_eq!(out(&a, 1), HostData::U8(vec![4, 5]));
    }

    #[test]
    fn qlinear_concat_requantizes_each_input() {
        // [10, 20] * 0.5 = [5, 10]; ([4] - 2) * 2 = [4]; / 0.5 + 1.
        let a = run(
            13,
            "g () => (uint8[1,3] y) <uint8[1,2] x0 = {10, 20}, float s0 = {0.5}, uint8 z0 = {0},
                 uint8[1,1] x1 = {4}, float s1 = {2}, uint8 z1 = {2}, float sy = {0.5}, uint8 zy = {1}> {
                y = com.microsoft.QLinearConcat <axis: int = 1> (sy, zy, x0, s0, z0, x1, s1, z1)
            }",
        );
        assert_eq!(out(&a, 0), HostData::U8(vec![11, 21, 9]));
    }

    #[test]
    fn qlinear_softmax_both_semantics() {
        // X' = [0, 1, 1, 2] * ln 2 (shape [1,2,2]): exps [1, 2, 2, 4].
        // opset 12, axis 1: one row of 4 -> [1, 2, 2, 4] / 9.
        // opset 13, axis 1: pairs along axis 1 -> [1/3, 1/3, 2/3, 2/3].
        // Last axis: [1/3, 2/3, 1/3, 2/3] either way.
        let graph = "g () => (uint8[1,2,2] old, uint8[1,2,2] new, uint8[1,2,2] last)
                 <uint8[1,2,2] x = {0, 1, 1, 2}, float sx = {0.6931472}, uint8 zx = {0},
                 float sy = {0.00390625}, uint8 zy = {0}> {
                old = com.microsoft.QLinearSoftmax <opset: int = 12, axis: int = 1> (x, sx, zx, sy, zy)
                new = com.microsoft.QLinearSoftmax <opset: int = 13, axis: int = 1> (x, sx, zx, sy, zy)
                last = com.microsoft.QLinearSoftmax <opset: int = 12, axis: int = -1> (x, sx, zx, sy, zy)
            }";
        let q = |p: &[f64]| -> HostData {
            HostData::U8(p.iter().map(|&p| quantize(p, 0.00390625, 0, 0, 255) as u8).collect())
        };
        let old = q(&[1.0 / 9.0, 2.0 / 9.0, 2.0 / 9.0, 4.0 / 9.0]);
        let new = q(&[1.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0, 2.0 / 3.0]);
        let last = q(&[1.0 / 3.0, 2.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0]);
        // With a Softmax-13 (flattening done on the quantized input) and with
        // a Softmax-11 (the axis moved last by Transposes).
        for opset in [13, 11] {
            let a = run(opset, graph);
            assert_eq!(out(&a, 0), old, "opset {opset}");
            assert_eq!(out(&a, 1), new, "opset {opset}");
            assert_eq!(out(&a, 2), last, "opset {opset}");
        }
    }

    #[test]
    fn dynamic_quantize_matmul_and_matmul_integer_to_float() {
        // A in [0, 3]: scale 3/255, zero point 0, A_q = [0, 85, 170, 255];
        // B' = (B - [0, 1]) * [0.5, 0.25] per column.
        let a = run(
            13,
            "g () => (float[2,2] y, float[2,2] p, float[2,2] m) <float[2,2] a = {0, 1, 2, 3},
                 int8[2,2] b = {1, 2, 3, 4}, float sb = {0.5}, float[2] sc = {0.5, 0.25},
                 int8[2] zc = {0, 1}, float[2] bias = {1, -1}, uint8[2,2] aq = {0, 85, 170, 255},
                 float sa = {0.011764706}, uint8 za = {0}> {
                y = com.microsoft.DynamicQuantizeMatMul (a, b, sb)
                p = com.microsoft.DynamicQuantizeMatMul (a, b, sc, zc, bias)
                m = com.microsoft.MatMulIntegerToFloat (aq, b, sa, sc, za, zc, bias)
            }",
        );
        // A @ (B * 0.5) = [[1.5, 2], [5.5, 8]].
        assert_close(&floats(&a, 0), &[1.5, 2.0, 5.5, 8.0]);
        // B' = [[0.5, 0.25], [1.5, 0.75]]; A @ B' + bias.
        let bp = [0.5, 0.25, 1.5, 0.75];
        let want: Vec<f64> = (0..4)
            .map(|i| {
                let (r, c) = (i / 2, i % 2);
                let a = [0.0, 1.0, 2.0, 3.0];
                a[r * 2] * bp[c] + a[r * 2 + 1] * bp[2 + c] + [1.0, -1.0][c]
            })
            .collect();
        assert_close(&floats(&a, 1), &want);
        let mf: Vec<f64> = floats(&a, 2);
        for (g, w) in mf.iter().zip(&want) {
            assert!((g - w).abs() < 1e-4, "{mf:?} vs {want:?}");
        }
        assert!(ops(&a).iter().any(|o| o == "MatMulInteger"), "{:?}", ops(&a));
    }

    /// `DynamicQuantizeLSTM` computes what onnxruntime's kernel does: X and
    /// the hidden state quantized to uint8 at run time, products on the
    /// int8 weights. Bidirectional, W with a scale per gate row (zero points
    /// 0), R with one per direction and non-zero zero points. The expected
    /// values are onnxruntime 1.32's outputs for this node (X a graph input);
    /// the float LSTM on the dequantized weights differs from them by up to
    /// 0.0029.
    #[test]
    fn dynamic_quantize_lstm_computes_what_onnxruntime_does() {
        let a = run(
            14,
            "g () => (float[3,2,1,2] y, float[2,1,2] h, float[2,1,2] c) <
                 float[3,1,3] x = {0.5, -1, 0.25, 2, -0.75, 1.5, 0.3, 0.9, -2.2},
                 int8[2,3,8] w = {-127, -90, -53, -16, 21, 58, 95, -123, -86, -49, -12, 25, 62, 99,
                   -119, -82, -45, -8, 29, 66, 103, -115, -78, -41, -4, 33, 70, 107, -111, -74, -37,
                   0, 37, 74, 111, -107, -70, -33, 4, 41, 78, 115, -103, -66, -29, 8, 45, 82},
                 int8[2,2,8] r = {-125, -72, -19, 34, 87, -111, -58, -5, 48, 101, -97, -44, 9, 62,
                   115, -83, -30, 23, 76, -122, -69, -16, 37, 90, -108, -55, -2, 51, 104, -94, -41, 12},
                 float[2,8] sw = {0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.01, 0.011,
                   0.006, 0.007, 0.008, 0.009, 0.01, 0.011, 0.012, 0.013},
                 int8[2,8] zw = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
                 float[2] sr = {0.01, 0.02}, int8[2] zr = {3, -2},
                 float[2,16] bias = {-0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3, -0.3, -0.2, -0.1, 0, 0.1,
                   0.2, 0.3, -0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3, -0.3, -0.2, -0.1, 0, 0.1, 0.2, 0.3,
                   -0.3, -0.2, -0.1, 0}> {
                y, h, c = com.microsoft.DynamicQuantizeLSTM <hidden_size: int = 2, direction: string = \"bidirectional\"> (x, w, r, bias, , , , , sw, zw, sr, zr)
            }",
        );
        let (_, lstm) = a.model().graph.nodes().find(|(_, n)| n.op.is("LSTM")).expect("an LSTM");
        assert!(matches!(lstm.lowering, Some(Lowering::DynamicLstm(_))));
        let near = |got: Vec<f64>, want: &[f64]| {
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(want) {
                assert!((g - w).abs() <= 2e-6, "{got:?} vs {want:?}");
            }
        };
        near(
            floats(&a, 0),
            &[
                0.156472608,
                -0.0753803626,
                -0.137002349,
                -0.0573763922,
                0.162979126,
                -0.161713943,
                -0.0949734524,
                0.342843533,
                0.106681451,
                -0.133447483,
                -0.241639212,
                -0.17705974,
            ],
        );
        near(floats(&a, 1), &[0.106681451, -0.133447483, -0.137002349, -0.0573763922]);
        near(floats(&a, 2), &[0.293884337, -0.416129172, -0.428139389, -0.0627304763]);
    }

    #[test]
    fn dynamic_quantize_lstm_refuses_zero_points_that_differ_within_a_direction() {
        let e = error(
            14,
            "g (float[1,1,1] x) => (float[1,1,1,1] y) <
                 int8[1,1,4] w = {1, 2, 3, 4}, int8[1,1,4] r = {1, 2, 3, 4},
                 float[1,4] sw = {0.1, 0.1, 0.1, 0.1}, int8[1,4] zw = {0, 1, 0, 0},
                 float[1] sr = {0.1}, int8[1] zr = {0}> {
                y = com.microsoft.DynamicQuantizeLSTM <hidden_size: int = 1> (x, w, r, , , , , , sw, zw, sr, zr)
            }",
        );
        assert!(e.contains("zero point 'zw' differs within a direction"), "{e}");
    }

    #[test]
    fn contrib_quantize_and_dequantize_are_the_standard_ones() {
        let a = run(
            13,
            "g () => (int8[2,2] q, float[2,2] d) <float[2,2] x = {1, 2, 3, 4}, float[2] s = {1, 2},
                 int8[2] z = {0, 1}> {
                q = com.microsoft.QuantizeLinear <axis: int = 1> (x, s, z)
                d = com.microsoft.DequantizeLinear <axis: int = 1> (q, s, z)
            }",
        );
        assert_eq!(out(&a, 0), HostData::I8(vec![1, 2, 3, 3]));
        assert_close(&floats(&a, 1), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(ops(&a), ["QuantizeLinear", "DequantizeLinear"]);
    }

    #[test]
    fn malformed_nodes_are_named() {
        let e = error(
            13,
            "g (uint8[2] a, float s, uint8 z) => (uint8[2] y) {
                [my_add] y = com.microsoft.QLinearAdd (a, s, z, a, s)
            }",
        );
        assert!(e.contains("my_add") && e.contains("QLinearAdd") && e.contains("5 inputs"), "{e}");
        let e = error(
            13,
            "g (uint8[2] a, float s, uint8 z) => (uint8[2] y) {
                [cat] y = com.microsoft.QLinearConcat <axis: int = 0> (s, z, a, s)
            }",
        );
        assert!(e.contains("cat") && e.contains("triples"), "{e}");
        let e = error(
            13,
            "g (uint8[2,2] a, float s, uint8 z) => (uint8[2,2] y) {
                [gemm] y = com.microsoft.QGemm (a, s, z, a, s, z, , s)
            }",
        );
        assert!(e.contains("gemm") && e.contains("y_zero_point"), "{e}");
        let e = error(
            10,
            "g (uint8[2,2] a, float s, uint8 z, float[2] sb) => (uint8[2,2] y) {
                [pc] y = com.microsoft.QGemm (a, s, z, a, sb, z, , s, z)
            }",
        );
        assert!(e.contains("pc") && e.contains("'sb'") && e.contains("opset 13"), "{e}");
        let e = error(
            13,
            "g (uint8[2,2] a, float s) => (uint8[2,2] y) {
                [p] y = com.microsoft.QLinearGlobalAveragePool <channels_last: int = 1> (a, s, , s)
            }",
        );
        assert!(e.contains("'p'") && e.contains("channels_last"), "{e}");
    }

    #[test]
    fn contrib_nodes_in_subgraphs_are_expanded() {
        // A constant condition: the then branch folds. A' = ([10, 20] - 10) * 0.5
        // = [0, 5], B' = 4 * 0.5 = 2: [0, 10], quantized at 0.5 with zero point 10.
        let a = run(
            17,
            "g () => (uint8[2] y) <bool c = {1}, uint8[2] x = {10, 20}, float s = {0.5},
                 uint8 z = {10}, uint8 b = {4}> {
                y = If (c) <then_branch: graph = t () => (uint8[2] o) {
                                [inner] o = com.microsoft.QLinearMul (x, s, z, b, s, , s, z)
                            },
                            else_branch: graph = e () => (uint8[2] p) { p = Identity (x) }>
            }",
        );
        assert_eq!(out(&a, 0), HostData::U8(vec![10, 30]));
    }

    #[test]
    fn contrib_nodes_in_functions_are_expanded() {
        let src = "<ir_version: 8, opset_import: [\"\" : 13, \"com.microsoft\" : 1, \"local\" : 1]>
            g () => (uint8[2] y) <uint8[2] a = {10, 20}, float s = {0.5}, uint8 z = {0}> {
                y = local.twice (a, s, z)
            }
            <domain: \"local\", opset_import: [\"\" : 13, \"com.microsoft\" : 1]>
            twice (a, s, z) => (y) {
                y = com.microsoft.QLinearAdd (a, s, z, a, s, z, s, z)
            }";
        let model = crate::text::parse_model(src, "test.onnxtxt").expect("parses");
        let a = analyze(&model, &Options::default()).expect("valid");
        assert_eq!(out(&a, 0), HostData::U8(vec![20, 40]));
    }
}
