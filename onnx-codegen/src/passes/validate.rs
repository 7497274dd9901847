//! Validation: reading `ModelProto` into the IR, checked against the ONNX IR spec
//! and the operator schemas on the way.
//!
//! Every problem is collected (never only the first): name definitions and
//! uses (SSA, nested scopes), topological order, opset imports, operator
//! resolution and signatures, attributes, tensors and types. Validation always
//! produces a model; the caller refuses it when an error was reported.

use crate::diag::{Diagnostic, Diagnostics, PathStep};
use crate::ir::{
    AttrType, AttrValue, Attribute, Dim, ElemType, Function, Graph, Metadata, Model, Node, NodeId,
    Op, Shape, SparseTensor, Tensor, Type, Value, ValueId, ValueKind,
};
use crate::ops::{self, Lookup, Param};
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    TypeProto, ValueInfoProto, tensor_shape_proto::dimension, type_proto,
};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

/// How deeply subgraphs (and types) may nest before the model is refused.
pub const MAX_DEPTH: usize = 64;

/// The largest opset or IR version taken as meaningful.
const MAX_VERSION: i64 = 1000;

/// What a call site needs to know about a model-local function.
struct FunctionSig {
    inputs: usize,
    outputs: usize,
    attributes: Vec<String>,
}

type FunctionKey = (String, String, String);

/// The opset imports and function (if any) a graph's nodes are resolved in.
struct Ctx<'a> {
    opsets: &'a BTreeMap<String, i64>,
    /// The function whose body is being lowered: its name and declared attributes.
    function: Option<(&'a str, &'a [String])>,
}

impl Ctx<'_> {
    fn owner(&self) -> String {
        match self.function {
            Some((name, _)) => format!("function '{name}'"),
            None => "the model".to_owned(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum GraphKind {
    Main,
    Sub,
    FunctionBody,
}

struct Lowerer {
    diags: Diagnostics,
    ir_version: i64,
    functions: HashMap<FunctionKey, FunctionSig>,
    /// The graphs being built, outermost first; the last is the current one.
    stack: Vec<Graph>,
    path: Vec<PathStep>,
}

/// Lowers and validates a model. The diagnostics hold every problem found;
/// the model is meaningful only when none of them is an error.
pub fn validate_model(m: &ModelProto) -> (Model, Diagnostics) {
    let mut l = Lowerer {
        diags: Diagnostics::new(),
        ir_version: m.ir_version(),
        functions: HashMap::new(),
        stack: Vec::new(),
        path: Vec::new(),
    };
    l.check_ir_version(m.ir_version);
    let opset_imports = l.opset_imports(&m.opset_import, "the model");
    l.collect_function_sigs(&m.functions);

    let graph = match &m.graph {
        Some(g) => {
            let ctx = Ctx { opsets: &opset_imports, function: None };
            l.lower_graph(g, &ctx, GraphKind::Main)
        }
        None => {
            l.error("the model has no graph");
            Graph::default()
        }
    };
    let functions = m.functions.iter().map(|f| l.lower_function(f)).collect();
    if !m.training_info.is_empty() {
        l.warning("the model has training information, which is ignored");
    }
    let metadata = Metadata {
        producer_name: m.producer_name().to_owned(),
        producer_version: m.producer_version().to_owned(),
        domain: m.domain().to_owned(),
        model_version: m.model_version(),
        doc_string: m.doc_string().to_owned(),
        props: m
            .metadata_props
            .iter()
            .map(|p| (p.key().to_owned(), p.value().to_owned()))
            .collect(),
    };
    let model = Model { ir_version: m.ir_version(), opset_imports, metadata, graph, functions };
    (model, l.diags)
}

fn node_label(n: &NodeProto, index: usize) -> String {
    if n.name().is_empty() { format!("#{index}") } else { n.name().to_owned() }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

fn range_text(min: u32, max: u32) -> String {
    if min == max {
        format!("exactly {min}")
    } else if max >= i32::MAX as u32 {
        format!("at least {min}")
    } else {
        format!("between {min} and {max}")
    }
}

impl Lowerer {
    fn error(&mut self, message: impl Into<String>) {
        let d = Diagnostic::error(message).at_path(self.path.clone());
        self.diags.push(d);
    }

    fn warning(&mut self, message: impl Into<String>) {
        let d = Diagnostic::warning(message).at_path(self.path.clone());
        self.diags.push(d);
    }

    fn push_all(&mut self, list: Vec<Diagnostic>) {
        for d in list {
            let d = d.at_path(self.path.clone());
            self.diags.push(d);
        }
    }

    fn top(&mut self) -> &mut Graph {
        if self.stack.is_empty() {
            self.stack.push(Graph::default());
        }
        let last = self.stack.len() - 1;
        &mut self.stack[last]
    }

    fn check_ir_version(&mut self, v: Option<i64>) {
        match v {
            None | Some(0) => self.error("the model has no ir_version"),
            Some(v) if !(1..MAX_VERSION).contains(&v) => {
                self.error(format!("the model has ir_version {v}, which is not a valid IR version"))
            }
            Some(v) if v > crate::proto::IR_VERSION => self.warning(format!(
                "the model has ir_version {v}, newer than the newest this compiler knows ({})",
                crate::proto::IR_VERSION
            )),
            Some(_) => {}
        }
    }

    fn opset_imports(&mut self, list: &[OperatorSetIdProto], owner: &str) -> BTreeMap<String, i64> {
        let mut map = BTreeMap::new();
        for o in list {
            let domain = ops::normalize_domain(o.domain()).to_owned();
            let shown = ops::domain_label(o.domain());
            let Some(version) = o.version else {
                self.error(format!("{owner} imports domain {shown} without a version"));
                continue;
            };
            if !(1..=MAX_VERSION).contains(&version) {
                self.error(format!(
                    "{owner} imports domain {shown} at version {version}; opset versions are between 1 and {MAX_VERSION}"
                ));
                continue;
            }
            match map.insert(domain, version) {
                Some(prev) if prev != version => self.error(format!(
                    "{owner} imports domain {shown} twice, at versions {prev} and {version}"
                )),
                Some(_) => self.warning(format!("{owner} imports domain {shown} twice")),
                None => {}
            }
        }
        map
    }

    fn collect_function_sigs(&mut self, functions: &[FunctionProto]) {
        for f in functions {
            let key = (
                ops::normalize_domain(f.domain()).to_owned(),
                f.name().to_owned(),
                f.overload().to_owned(),
            );
            let mut attributes: Vec<String> = f.attribute.clone();
            attributes.extend(f.attribute_proto.iter().map(|a| a.name().to_owned()));
            let sig = FunctionSig { inputs: f.input.len(), outputs: f.output.len(), attributes };
            if self.functions.insert(key, sig).is_some() {
                self.path = vec![PathStep::Function {
                    domain: f.domain().to_owned(),
                    name: f.name().to_owned(),
                }];
                self.error(format!(
                    "function '{}' is defined more than once in domain '{}'{}",
                    f.name(),
                    f.domain(),
                    if f.overload().is_empty() {
                        String::new()
                    } else {
                        format!(" with overload '{}'", f.overload())
                    }
                ));
                self.path.clear();
            }
        }
    }

    fn lower_function(&mut self, f: &FunctionProto) -> Function {
        self.path =
            vec![PathStep::Function { domain: f.domain().to_owned(), name: f.name().to_owned() }];
        if f.name().is_empty() {
            self.error("a model-local function has no name");
        }
        let owner = format!("function '{}'", f.name());
        let opsets = self.opset_imports(&f.opset_import, &owner);
        let mut seen = HashSet::new();
        let mut attributes = Vec::new();
        for a in &f.attribute {
            if !seen.insert(a.clone()) {
                self.error(format!("function '{}' declares attribute '{a}' twice", f.name()));
            }
            attributes.push(a.clone());
        }
        let mut defaults = Vec::new();
        for a in &f.attribute_proto {
            if !seen.insert(a.name().to_owned()) {
                self.error(format!(
                    "function '{}' declares attribute '{}' twice",
                    f.name(),
                    a.name()
                ));
            }
            let ctx = Ctx { opsets: &opsets, function: None };
            if let Some(attr) = self.lower_attribute(a, &ctx) {
                defaults.push(attr);
            }
        }
        let all_attrs: Vec<String> = seen.into_iter().collect();
        let body_proto = GraphProto {
            name: Some(f.name().to_owned()),
            node: f.node.clone(),
            input: f.input.iter().map(|n| value_info_named(n)).collect(),
            output: f.output.iter().map(|n| value_info_named(n)).collect(),
            value_info: f.value_info.clone(),
            ..GraphProto::default()
        };
        let saved = std::mem::take(&mut self.stack);
        let ctx = Ctx { opsets: &opsets, function: Some((f.name(), &all_attrs)) };
        let body = self.lower_graph(&body_proto, &ctx, GraphKind::FunctionBody);
        self.stack = saved;
        self.path.clear();
        Function {
            domain: ops::normalize_domain(f.domain()).to_owned(),
            name: f.name().to_owned(),
            overload: f.overload().to_owned(),
            body,
            attributes,
            attribute_defaults: defaults,
            opset_imports: opsets,
            doc_string: f.doc_string().to_owned(),
        }
    }

    /// Finds `name` in the current graph or an enclosing one; a name of an
    /// enclosing graph is captured by every graph in between.
    fn resolve(&mut self, name: &str) -> Option<ValueId> {
        let top = self.stack.len().checked_sub(1)?;
        let mut level = top;
        let mut id = loop {
            if let Some(id) = self.stack.get(level)?.value_by_name(name) {
                break id;
            }
            level = level.checked_sub(1)?;
        };
        for l in level + 1..=top {
            id = self.stack.get_mut(l)?.add_capture(name, id);
        }
        Some(id)
    }

    fn defined_outside(&self, name: &str) -> bool {
        let n = self.stack.len().saturating_sub(1);
        self.stack.iter().take(n).any(|g| g.value_by_name(name).is_some())
    }

    fn lower_graph(&mut self, gp: &GraphProto, ctx: &Ctx<'_>, kind: GraphKind) -> Graph {
        if self.stack.len() >= MAX_DEPTH {
            self.error(format!(
                "subgraphs are nested more than {MAX_DEPTH} levels deep; the model is refused"
            ));
            return Graph::new(gp.name());
        }
        if kind != GraphKind::FunctionBody {
            self.path.push(PathStep::Graph(gp.name().to_owned()));
        }
        if gp.name().is_empty() && kind != GraphKind::FunctionBody {
            self.warning("the graph has no name");
        }
        let mut graph = Graph::new(gp.name());
        graph.doc_string = gp.doc_string().to_owned();
        self.stack.push(graph);
        self.define_inputs(gp, kind);
        self.define_initializers(gp, kind);
        let outputs = self.define_node_outputs(gp);
        for (i, np) in gp.node.iter().enumerate() {
            let node_outputs = outputs.get(i).cloned().unwrap_or_default();
            self.lower_node(np, i, node_outputs, ctx);
        }
        self.define_graph_outputs(gp, kind);
        self.apply_value_info(&gp.value_info);
        self.sort(gp);
        let graph = self.stack.pop().unwrap_or_default();
        if kind != GraphKind::FunctionBody {
            self.path.pop();
        }
        graph
    }

    fn define_inputs(&mut self, gp: &GraphProto, kind: GraphKind) {
        for (i, vi) in gp.input.iter().enumerate() {
            let name = vi.name();
            if name.is_empty() {
                self.error(format!("graph input #{i} has no name"));
                continue;
            }
            if self.top().value_by_name(name).is_some() {
                self.error(format!("graph input '{name}' is declared more than once"));
                continue;
            }
            let ty = match &vi.r#type {
                Some(t) => Some(self.lower_type(t, name, 0)),
                None => {
                    if kind == GraphKind::Main {
                        self.error(format!("main graph input '{name}' has no type"));
                    }
                    None
                }
            };
            let id = self.top().add_input(name, ty);
            self.top().value_mut(id).doc_string = vi.doc_string().to_owned();
        }
    }

    fn define_initializers(&mut self, gp: &GraphProto, kind: GraphKind) {
        let mut seen = HashSet::new();
        for (i, t) in gp.initializer.iter().enumerate() {
            let name = t.name().to_owned();
            if name.is_empty() {
                self.error(format!("initializer #{i} has no name"));
                continue;
            }
            if !seen.insert(name.clone()) {
                self.error(format!("initializer '{name}' is defined more than once"));
                continue;
            }
            let tensor = match Tensor::from_proto(t) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.path.push(PathStep::Tensor(name.clone()));
                    self.push_all(e);
                    self.path.pop();
                    None
                }
            };
            let existing = self.top().value_by_name(&name);
            match existing {
                Some(id) => {
                    if kind == GraphKind::Sub && self.ir_version >= 4 {
                        self.warning(format!(
                            "subgraph input '{name}' also has an initializer; from IR version 4 on, subgraph inputs should not have initializers"
                        ));
                    }
                    if let (ValueKind::Input { default }, Some(t)) =
                        (&mut self.top().value_mut(id).kind, tensor)
                    {
                        *default = Some(t);
                    }
                }
                None => {
                    if self.ir_version < 4 && self.ir_version > 0 {
                        self.error(format!(
                            "initializer '{name}' is not a graph input; in IR version {} every initializer must also be listed as a graph input",
                            self.ir_version
                        ));
                    }
                    let tensor = tensor.unwrap_or_else(|| Tensor::from_i64s("", vec![0], &[]));
                    self.top().add_initializer(name, tensor);
                }
            }
        }
        for (i, s) in gp.sparse_initializer.iter().enumerate() {
            let name = s.values.as_ref().map(|v| v.name().to_owned()).unwrap_or_default();
            if name.is_empty() {
                self.error(format!("sparse initializer #{i} has no name"));
                continue;
            }
            if self.top().value_by_name(&name).is_some() {
                self.error(format!(
                    "sparse initializer '{name}' has the name of another input or initializer"
                ));
                continue;
            }
            match SparseTensor::from_proto(s) {
                Ok(st) => {
                    self.top().add_value(Value {
                        name,
                        ty: None,
                        kind: ValueKind::SparseInitializer(st),
                        doc_string: String::new(),
                    });
                }
                Err(e) => {
                    self.path.push(PathStep::Tensor(name));
                    self.push_all(e);
                    self.path.pop();
                }
            }
        }
    }

    /// Creates the output values of every node before any node is lowered,
    /// so uses in any order (and from subgraphs) resolve; checks SSA.
    fn define_node_outputs(&mut self, gp: &GraphProto) -> Vec<Vec<Option<ValueId>>> {
        let mut all = Vec::with_capacity(gp.node.len());
        for (i, np) in gp.node.iter().enumerate() {
            let node = NodeId(u32::try_from(i).unwrap_or(u32::MAX));
            let mut outs = Vec::with_capacity(np.output.len());
            for (index, name) in np.output.iter().enumerate() {
                if name.is_empty() {
                    outs.push(None);
                    continue;
                }
                if let Some(prev) = self.top().value_by_name(name) {
                    let what = match self.top().value(prev).kind {
                        ValueKind::Input { .. } => "a graph input",
                        ValueKind::Initializer(_) | ValueKind::SparseInitializer(_) => {
                            "an initializer"
                        }
                        _ => "another node",
                    };
                    let label = node_label(np, i);
                    self.error(format!(
                        "value '{name}' is defined by node '{label}' ({}) but also by {what}; every value must be defined once",
                        np.op_type()
                    ));
                    outs.push(None);
                    continue;
                }
                if self.defined_outside(name) {
                    let label = node_label(np, i);
                    self.error(format!(
                        "value '{name}' is defined by node '{label}' ({}) but also in an enclosing graph; a subgraph must not redefine outer names",
                        np.op_type()
                    ));
                }
                let id = self.top().add_value(Value {
                    name: name.clone(),
                    ty: None,
                    kind: ValueKind::NodeOutput { node, index },
                    doc_string: String::new(),
                });
                outs.push(Some(id));
            }
            all.push(outs);
        }
        all
    }

    fn lower_node(
        &mut self,
        np: &NodeProto,
        index: usize,
        outputs: Vec<Option<ValueId>>,
        ctx: &Ctx<'_>,
    ) {
        let label = node_label(np, index);
        self.path.push(PathStep::Node { name: label.clone(), op_type: np.op_type().to_owned() });
        let mut inputs = Vec::with_capacity(np.input.len());
        for name in &np.input {
            if name.is_empty() {
                inputs.push(None);
                continue;
            }
            let id = self.resolve(name);
            if id.is_none() {
                self.error(format!("input '{name}' of node '{label}' is not defined"));
            }
            inputs.push(id);
        }
        let attributes = self.lower_attributes(&np.attribute, ctx);
        let op = self.resolve_op(np, &label, &attributes, ctx);
        self.path.pop();
        let node = Node {
            name: np.name().to_owned(),
            op,
            inputs,
            outputs,
            attributes,
            doc_string: np.doc_string().to_owned(),
            lowering: None,
        };
        self.top().push_node(node);
    }

    fn resolve_op(
        &mut self,
        np: &NodeProto,
        label: &str,
        attributes: &[Attribute],
        ctx: &Ctx<'_>,
    ) -> Op {
        let domain = ops::normalize_domain(np.domain()).to_owned();
        let op_type = np.op_type();
        let mut op = Op {
            domain: domain.clone(),
            op_type: op_type.to_owned(),
            overload: np.overload().to_owned(),
            opset_version: 0,
            schema: None,
        };
        if op_type.is_empty() {
            self.error(format!("node '{label}' has no op_type"));
            return op;
        }
        let shown_domain = ops::domain_label(np.domain());
        let Some(&version) = ctx.opsets.get(&domain) else {
            self.error(format!(
                "node '{label}' ({op_type}) uses domain {shown_domain}, which {} does not import",
                ctx.owner()
            ));
            return op;
        };
        op.opset_version = version;
        let sig = if self.functions.is_empty() {
            None
        } else {
            self.functions.get(&(domain.clone(), op_type.to_owned(), np.overload().to_owned()))
        };
        if let Some(sig) = sig {
            let (n_in, n_out) = (sig.inputs, sig.outputs);
            let unknown: Vec<String> = attributes
                .iter()
                .filter(|a| !sig.attributes.contains(&a.name))
                .map(|a| a.name.clone())
                .collect();
            if np.input.len() > n_in {
                self.error(format!(
                    "node '{label}' calls function '{op_type}' with {}, but it takes {n_in}",
                    count(np.input.len(), "input")
                ));
            }
            if np.output.len() > n_out {
                self.error(format!(
                    "node '{label}' calls function '{op_type}' with {}, but it has {n_out}",
                    count(np.output.len(), "output")
                ));
            }
            for a in unknown {
                self.warning(format!(
                    "node '{label}' passes attribute '{a}', which function '{op_type}' does not declare; it is ignored"
                ));
            }
            return op;
        }
        let schema = match ops::lookup(&domain, op_type, version) {
            Lookup::Found(s) => s,
            Lookup::Unknown => {
                // onnxruntime's quantized operators: checked here, expanded
                // into standard operators after inlining (`passes::contrib`).
                if let Some(problems) = super::contrib::check(
                    &domain,
                    op_type,
                    label,
                    &np.input,
                    np.output.len(),
                    attributes,
                ) {
                    for p in problems {
                        self.error(p);
                    }
                    return op;
                }
                self.error(format!(
                    "node '{label}' uses operator '{op_type}', which is unknown in domain {shown_domain}"
                ));
                return op;
            }
            Lookup::TooNew { first_since_version } => {
                self.error(format!(
                    "node '{label}' uses operator '{op_type}', which does not exist at version {version} of domain {shown_domain}; it first appears in version {first_since_version}"
                ));
                return op;
            }
        };
        op.schema = Some(schema);
        let sv = schema.since_version;
        if schema.deprecated {
            self.error(format!(
                "node '{label}' uses operator '{op_type}', which is deprecated from version {sv} of domain {shown_domain} (imported at version {version})"
            ));
        }
        let desc = format!("{op_type} (version {sv})");
        self.check_arity(
            np.input.len(),
            &np.input,
            schema.min_inputs,
            schema.max_inputs,
            schema.inputs,
            "input",
            label,
            &desc,
        );
        self.check_arity(
            np.output.len(),
            &np.output,
            schema.min_outputs,
            schema.max_outputs,
            schema.outputs,
            "output",
            label,
            &desc,
        );
        for a in attributes {
            match schema.attribute(&a.name) {
                None => self.error(format!(
                    "node '{label}' has attribute '{}', which {desc} does not define",
                    a.name
                )),
                Some(s) if s.ty != a.value.ty() => self.error(format!(
                    "attribute '{}' of node '{label}' has type {}, but {desc} expects {}",
                    a.name,
                    a.value.ty(),
                    s.ty
                )),
                Some(_) => {}
            }
        }
        for s in schema.attributes.iter().filter(|s| s.required) {
            if !attributes.iter().any(|a| a.name == s.name) {
                self.error(format!(
                    "node '{label}' lacks attribute '{}', which {desc} requires",
                    s.name
                ));
            }
        }
        op
    }

    #[allow(clippy::too_many_arguments)]
    fn check_arity(
        &mut self,
        n: usize,
        names: &[String],
        min: u32,
        max: u32,
        formals: &'static [ops::Formal],
        what: &str,
        label: &str,
        desc: &str,
    ) {
        let n32 = u32::try_from(n).unwrap_or(u32::MAX);
        if n32 < min || n32 > max {
            self.error(format!(
                "node '{label}' has {}, but {desc} takes {}",
                count(n, what),
                range_text(min, max)
            ));
        }
        for (i, name) in names.iter().enumerate() {
            let Some(f) = formals.get(i).or_else(|| formals.last()) else { break };
            if name.is_empty() && f.option == Param::Single && formals.get(i).is_some() {
                self.error(format!(
                    "{what} {i} ('{}') of node '{label}' is empty, but {desc} requires it",
                    f.name
                ));
            }
        }
    }

    fn lower_attributes(&mut self, list: &[AttributeProto], ctx: &Ctx<'_>) -> Vec<Attribute> {
        let mut out: Vec<Attribute> = Vec::with_capacity(list.len());
        let mut seen = HashSet::new();
        for a in list {
            if !a.name().is_empty() && !seen.insert(a.name()) {
                self.error(format!("attribute '{}' is given more than once", a.name()));
                continue;
            }
            if let Some(attr) = self.lower_attribute(a, ctx) {
                out.push(attr);
            }
        }
        out
    }

    fn lower_attribute(&mut self, a: &AttributeProto, ctx: &Ctx<'_>) -> Option<Attribute> {
        let name = a.name().to_owned();
        if name.is_empty() {
            self.error("an attribute has no name");
            return None;
        }
        self.path.push(PathStep::Attribute(name.clone()));
        let value = self.lower_attribute_value(a, ctx);
        self.path.pop();
        Some(Attribute { name, value: value?, doc_string: a.doc_string().to_owned() })
    }

    fn lower_attribute_value(&mut self, a: &AttributeProto, ctx: &Ctx<'_>) -> Option<AttrValue> {
        let name = a.name();
        let declared = a.r#type.filter(|&t| t != 0);
        let declared_ty = match declared {
            Some(code) => match AttrType::from_proto(code) {
                Some(t) => Some(t),
                None => {
                    self.error(format!(
                        "attribute '{name}' has type code {code}, which is not an attribute type"
                    ));
                    return None;
                }
            },
            None => None,
        };
        if let Some(r) = &a.ref_attr_name {
            let Some((fname, declared_attrs)) = ctx.function else {
                self.error(format!(
                    "attribute '{name}' refers to function attribute '{r}', but references are only allowed in function bodies"
                ));
                return None;
            };
            if !declared_attrs.iter().any(|d| d == r) {
                self.error(format!(
                    "attribute '{name}' refers to '{r}', which function '{fname}' does not declare"
                ));
                return None;
            }
            let Some(ty) = declared_ty else {
                self.error(format!("attribute '{name}' refers to '{r}' but has no type"));
                return None;
            };
            return Some(AttrValue::Ref { name: r.clone(), ty });
        }
        let present: Vec<AttrType> = [
            (AttrType::Float, a.f.is_some()),
            (AttrType::Int, a.i.is_some()),
            (AttrType::String, a.s.is_some()),
            (AttrType::Tensor, a.t.is_some()),
            (AttrType::Graph, a.g.is_some()),
            (AttrType::SparseTensor, a.sparse_tensor.is_some()),
            (AttrType::Type, a.tp.is_some()),
            (AttrType::Floats, !a.floats.is_empty()),
            (AttrType::Ints, !a.ints.is_empty()),
            (AttrType::Strings, !a.strings.is_empty()),
            (AttrType::Tensors, !a.tensors.is_empty()),
            (AttrType::Graphs, !a.graphs.is_empty()),
            (AttrType::SparseTensors, !a.sparse_tensors.is_empty()),
            (AttrType::Types, !a.type_protos.is_empty()),
        ]
        .into_iter()
        .filter(|p| p.1)
        .map(|p| p.0)
        .collect();
        let ty = match declared_ty {
            Some(t) => {
                let others: Vec<&str> =
                    present.iter().filter(|&&p| p != t).map(|p| p.name()).collect();
                if !others.is_empty() {
                    self.error(format!(
                        "attribute '{name}' has type {t} but also holds a value of type {}; an attribute holds exactly one value",
                        others.join(", ")
                    ));
                    return None;
                }
                // Proto3 writers omit zero scalars; an absent message is an error.
                let message = matches!(
                    t,
                    AttrType::Tensor | AttrType::Graph | AttrType::SparseTensor | AttrType::Type
                );
                if message && present.is_empty() {
                    self.error(format!("attribute '{name}' has type {t} but no value"));
                    return None;
                }
                t
            }
            None => match present.as_slice() {
                [t] => {
                    self.warning(format!(
                        "attribute '{name}' has no type; {t} is assumed from its value"
                    ));
                    *t
                }
                [] => {
                    self.error(format!("attribute '{name}' has neither a type nor a value"));
                    return None;
                }
                many => {
                    let names: Vec<&str> = many.iter().map(|p| p.name()).collect();
                    self.error(format!(
                        "attribute '{name}' has no type and holds several values ({}); an attribute holds exactly one value",
                        names.join(", ")
                    ));
                    return None;
                }
            },
        };
        Some(match ty {
            AttrType::Float => AttrValue::Float(a.f.unwrap_or(0.0)),
            AttrType::Int => AttrValue::Int(a.i.unwrap_or(0)),
            AttrType::String => AttrValue::String(a.s.clone().unwrap_or_default()),
            AttrType::Floats => AttrValue::Floats(a.floats.clone()),
            AttrType::Ints => AttrValue::Ints(a.ints.clone()),
            AttrType::Strings => AttrValue::Strings(a.strings.clone()),
            AttrType::Tensor => AttrValue::Tensor(self.tensor(a.t.as_deref()?)?),
            AttrType::Tensors => {
                let mut v = Vec::with_capacity(a.tensors.len());
                for t in &a.tensors {
                    v.push(self.tensor(t)?);
                }
                AttrValue::Tensors(v)
            }
            AttrType::SparseTensor => {
                AttrValue::SparseTensor(self.sparse(a.sparse_tensor.as_deref()?)?)
            }
            AttrType::SparseTensors => {
                let mut v = Vec::with_capacity(a.sparse_tensors.len());
                for t in &a.sparse_tensors {
                    v.push(self.sparse(t)?);
                }
                AttrValue::SparseTensors(v)
            }
            AttrType::Type => AttrValue::Type(self.lower_type(a.tp.as_deref()?, name, 0)),
            AttrType::Types => AttrValue::Types(
                a.type_protos.iter().map(|t| self.lower_type(t, name, 0)).collect(),
            ),
            AttrType::Graph => {
                AttrValue::Graph(Box::new(self.lower_graph(a.g.as_deref()?, ctx, GraphKind::Sub)))
            }
            AttrType::Graphs => AttrValue::Graphs(
                a.graphs.iter().map(|g| self.lower_graph(g, ctx, GraphKind::Sub)).collect(),
            ),
        })
    }

    fn tensor(&mut self, t: &crate::proto::TensorProto) -> Option<Tensor> {
        Tensor::from_proto(t).map_err(|e| self.push_all(e)).ok()
    }

    fn sparse(&mut self, t: &crate::proto::SparseTensorProto) -> Option<SparseTensor> {
        SparseTensor::from_proto(t).map_err(|e| self.push_all(e)).ok()
    }

    fn lower_type(&mut self, t: &TypeProto, what: &str, depth: usize) -> Type {
        if depth > MAX_DEPTH {
            self.error(format!("the type of '{what}' is nested more than {MAX_DEPTH} levels deep"));
            return Type::Unknown;
        }
        let elem = |l: &mut Lowerer, code: Option<i32>| -> Option<ElemType> {
            match code {
                None | Some(0) => None,
                Some(c) => {
                    let e = ElemType::from_proto(c);
                    if e.is_none() {
                        l.error(format!(
                            "the type of '{what}' has element type code {c}, which is not a tensor element type"
                        ));
                    }
                    e
                }
            }
        };
        match &t.value {
            None => Type::Unknown,
            Some(type_proto::Value::TensorType(tt)) => {
                let e = elem(self, tt.elem_type);
                Type::Tensor { elem: e, shape: self.lower_shape(tt.shape.as_ref(), what) }
            }
            Some(type_proto::Value::SparseTensorType(tt)) => {
                let e = elem(self, tt.elem_type);
                Type::SparseTensor { elem: e, shape: self.lower_shape(tt.shape.as_ref(), what) }
            }
            Some(type_proto::Value::SequenceType(s)) => Type::Sequence(Box::new(
                s.elem_type
                    .as_deref()
                    .map_or(Type::Unknown, |t| self.lower_type(t, what, depth + 1)),
            )),
            Some(type_proto::Value::OptionalType(s)) => Type::Optional(Box::new(
                s.elem_type
                    .as_deref()
                    .map_or(Type::Unknown, |t| self.lower_type(t, what, depth + 1)),
            )),
            Some(type_proto::Value::MapType(m)) => {
                let value = Box::new(
                    m.value_type
                        .as_deref()
                        .map_or(Type::Unknown, |t| self.lower_type(t, what, depth + 1)),
                );
                match elem(self, m.key_type) {
                    Some(key) => Type::Map { key, value },
                    None => {
                        self.error(format!("the map type of '{what}' has no key type"));
                        Type::Unknown
                    }
                }
            }
            Some(type_proto::Value::OpaqueType(o)) => {
                Type::Opaque { domain: o.domain().to_owned(), name: o.name().to_owned() }
            }
        }
    }

    fn lower_shape(&mut self, shape: Option<&crate::proto::TensorShapeProto>, what: &str) -> Shape {
        let Some(shape) = shape else { return Shape::unknown() };
        let mut dims = Vec::with_capacity(shape.dim.len());
        for d in &shape.dim {
            dims.push(match &d.value {
                Some(dimension::Value::DimValue(v)) => match u64::try_from(*v) {
                    Ok(v) => Dim::Static(v),
                    Err(_) => {
                        self.warning(format!(
                            "the shape of '{what}' has negative dimension {v}; it is taken as unknown"
                        ));
                        Dim::Unknown
                    }
                },
                Some(dimension::Value::DimParam(p)) if !is_anonymous_dim(p) => {
                    Dim::Symbolic(p.clone())
                }
                _ => Dim::Unknown,
            });
        }
        Shape::known(dims)
    }

    fn define_graph_outputs(&mut self, gp: &GraphProto, kind: GraphKind) {
        for (i, vi) in gp.output.iter().enumerate() {
            let name = vi.name();
            if name.is_empty() {
                self.error(format!("graph output #{i} has no name"));
                continue;
            }
            let Some(id) = self.resolve(name) else {
                self.error(format!("graph output '{name}' is not defined"));
                continue;
            };
            let ty = match &vi.r#type {
                Some(t) => Some(self.lower_type(t, name, 0)),
                None => {
                    if kind == GraphKind::Main {
                        self.error(format!("main graph output '{name}' has no type"));
                    }
                    None
                }
            };
            let g = self.top();
            g.outputs.push(id);
            let v = g.value_mut(id);
            if v.ty.is_none() {
                v.ty = ty;
            }
            if v.doc_string.is_empty() {
                v.doc_string = vi.doc_string().to_owned();
            }
        }
    }

    fn apply_value_info(&mut self, list: &[ValueInfoProto]) {
        for vi in list {
            let Some(t) = &vi.r#type else { continue };
            let Some(id) = self.top().value_by_name(vi.name()) else { continue };
            if self.top().value(id).ty.is_none() {
                let ty = self.lower_type(t, vi.name(), 0);
                self.top().value_mut(id).ty = Some(ty);
            }
        }
    }

    /// Checks that the nodes are in topological order; re-sorts them (with a
    /// warning) when they are not but the graph is acyclic; reports cycles.
    fn sort(&mut self, gp: &GraphProto) {
        let g = self.top();
        let n = g.order().len();
        // deps[i]: the nodes whose outputs node i uses, directly or through
        // the captures of its subgraphs.
        let mut deps: Vec<Vec<usize>> = Vec::with_capacity(n);
        let mut in_order = true;
        let mut first_bad: Option<(usize, usize, String)> = None;
        for (pos, (_, node)) in g.nodes().enumerate() {
            let mut d = Vec::new();
            let mut add = |v: ValueId, d: &mut Vec<usize>| {
                if let ValueKind::NodeOutput { node, .. } = g.value(v).kind {
                    d.push(node.index());
                    if node.index() >= pos && first_bad.is_none() {
                        first_bad = Some((pos, node.index(), g.value(v).name.clone()));
                    }
                }
            };
            for v in node.inputs.iter().flatten() {
                add(*v, &mut d);
            }
            for sub in node.subgraphs() {
                for &c in &sub.captures {
                    if let ValueKind::Captured { outer } = sub.value(c).kind {
                        add(outer, &mut d);
                    }
                }
            }
            if d.iter().any(|&p| p >= pos) {
                in_order = false;
            }
            deps.push(d);
        }
        if in_order {
            return;
        }
        // Kahn's algorithm, taking ready nodes in model order.
        let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
        let mut pending: Vec<usize> = vec![0; n];
        for (i, d) in deps.iter().enumerate() {
            for &p in d {
                if let Some(u) = users.get_mut(p) {
                    u.push(i);
                }
                if let Some(c) = pending.get_mut(i) {
                    *c += 1;
                }
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..n).filter(|&i| pending.get(i) == Some(&0)).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(i)) = ready.pop() {
            order.push(NodeId(u32::try_from(i).unwrap_or(u32::MAX)));
            for &u in users.get(i).map(Vec::as_slice).unwrap_or(&[]) {
                if let Some(c) = pending.get_mut(u) {
                    *c -= 1;
                    if *c == 0 {
                        ready.push(Reverse(u));
                    }
                }
            }
        }
        let label = |i: usize| gp.node.get(i).map(|np| node_label(np, i)).unwrap_or_default();
        if order.len() == n {
            let g = self.top();
            g.set_order(order);
            let mut msg = format!(
                "the nodes of graph '{}' are not in topological order; they were re-sorted",
                gp.name()
            );
            if let Some((user, producer, value)) = first_bad {
                msg = format!(
                    "{msg} (node '{}' uses '{value}' before node '{}' defines it)",
                    label(user),
                    label(producer)
                );
            }
            self.warning(msg);
            return;
        }
        // A cycle: walk dependencies among the unsorted nodes until one repeats.
        let Some(start) = (0..n).find(|&i| pending.get(i).is_some_and(|&c| c > 0)) else { return };
        let mut seen_at: HashMap<usize, usize> = HashMap::new();
        let mut walk = Vec::new();
        let mut cur = start;
        let cycle = loop {
            if let Some(&at) = seen_at.get(&cur) {
                break walk.get(at..).map(<[usize]>::to_vec).unwrap_or_default();
            }
            seen_at.insert(cur, walk.len());
            walk.push(cur);
            let next = deps
                .get(cur)
                .and_then(|d| d.iter().copied().find(|&p| pending.get(p).is_some_and(|&c| c > 0)));
            match next {
                Some(p) => cur = p,
                None => break Vec::new(),
            }
        };
        // The walk follows producers: print in data-flow order, from the
        // node that comes first in the model.
        let mut cycle: Vec<usize> = cycle.into_iter().rev().collect();
        if let Some(first) = cycle.iter().enumerate().min_by_key(|p| p.1).map(|p| p.0) {
            cycle.rotate_left(first);
        }
        let mut names: Vec<String> = cycle.iter().map(|&i| format!("'{}'", label(i))).collect();
        if let Some(first) = names.first().cloned() {
            names.push(first);
        }
        self.error(format!(
            "graph '{}' has a cycle through nodes {}",
            gp.name(),
            names.join(" -> ")
        ));
    }
}

fn value_info_named(name: &str) -> ValueInfoProto {
    ValueInfoProto { name: Some(name.to_owned()), ..ValueInfoProto::default() }
}

/// Whether a `dim_param` names no dimension: empty, or "?", which is how
/// exporters (paddle2onnx, onnx's printer) spell a dimension they know
/// nothing of. Each such dimension is its own unknown, not one symbol
/// shared by every "?".
pub(crate) fn is_anonymous_dim(param: &str) -> bool {
    param.is_empty() || param == "?"
}
