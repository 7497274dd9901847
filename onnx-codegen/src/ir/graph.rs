//! Graphs: an arena of values and nodes, nodes kept in topological order.
//!
//! Values and nodes are addressed by [`ValueId`] and [`NodeId`], indices into
//! the graph's arenas; ids stay valid while passes rewrite the graph (removed
//! nodes leave the order but keep their slot). Every value has exactly one
//! definition ([`ValueKind`]): a graph input, an initializer, a node output,
//! or a capture of a value of the enclosing graph. Captures make a subgraph's
//! free variables explicit, like a closure's: a subgraph that uses a name of
//! its grandparent captures it from its parent, which captures it in turn.

use super::lowering::Lowering;
use super::schema::OpSchema;
use super::tensor::{SparseTensor, Tensor};
use super::types::{AttrType, Type};
use std::collections::HashMap;

/// A value of one graph (an index into [`Graph::values`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// A node of one graph (an index into the node arena).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum ValueKind {
    /// A graph input; `default` is the initializer of the same name, if any
    /// (a caller may override it).
    Input { default: Option<Tensor> },
    /// A constant (an initializer not listed as an input).
    Initializer(Tensor),
    /// A sparse constant (`sparse_initializer`).
    SparseInitializer(SparseTensor),
    /// Output `index` of `node`.
    NodeOutput { node: NodeId, index: usize },
    /// A value of the directly enclosing graph, used by this subgraph.
    Captured { outer: ValueId },
}

/// A named value: an edge of the graph.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    /// The declared type (graph input/output, value_info), if any.
    pub ty: Option<Type>,
    pub kind: ValueKind,
    pub doc_string: String,
}

impl Value {
    /// The constant value, for initializers (and inputs with a default, which
    /// are not constants: this returns `None` for them).
    pub fn constant(&self) -> Option<&Tensor> {
        match &self.kind {
            ValueKind::Initializer(t) => Some(t),
            _ => None,
        }
    }
}

/// The operator a node calls.
#[derive(Clone, Debug, PartialEq)]
pub struct Op {
    /// The normalized domain: `""` for the default set (also written `ai.onnx`).
    pub domain: String,
    pub op_type: String,
    /// The overload of a model-local function (usually empty).
    pub overload: String,
    /// The imported opset version of `domain` this node was resolved against.
    pub opset_version: i64,
    /// The schema in force (its `since_version` is the operator version);
    /// `None` for calls of model-local functions.
    pub schema: Option<&'static OpSchema>,
}

impl Op {
    /// The operator version (`since_version` of the schema in force), or
    /// the opset version for function calls.
    pub fn since_version(&self) -> i64 {
        self.schema.map_or(self.opset_version, |s| s.since_version)
    }

    /// Whether this is `op_type` of the default domain.
    pub fn is(&self, op_type: &str) -> bool {
        self.domain.is_empty() && self.op_type == op_type
    }
}

/// An attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    /// Bytes, usually UTF-8.
    String(Vec<u8>),
    Tensor(Tensor),
    Graph(Box<Graph>),
    SparseTensor(SparseTensor),
    Type(Type),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    Tensors(Vec<Tensor>),
    Graphs(Vec<Graph>),
    SparseTensors(Vec<SparseTensor>),
    Types(Vec<Type>),
    /// Inside a function body only: the value of the function attribute
    /// `name` (`@name`), of the declared type.
    Ref {
        name: String,
        ty: AttrType,
    },
}

impl AttrValue {
    /// The attribute type of this value (for `Ref`, the declared type).
    pub fn ty(&self) -> AttrType {
        match self {
            AttrValue::Float(_) => AttrType::Float,
            AttrValue::Int(_) => AttrType::Int,
            AttrValue::String(_) => AttrType::String,
            AttrValue::Tensor(_) => AttrType::Tensor,
            AttrValue::Graph(_) => AttrType::Graph,
            AttrValue::SparseTensor(_) => AttrType::SparseTensor,
            AttrValue::Type(_) => AttrType::Type,
            AttrValue::Floats(_) => AttrType::Floats,
            AttrValue::Ints(_) => AttrType::Ints,
            AttrValue::Strings(_) => AttrType::Strings,
            AttrValue::Tensors(_) => AttrType::Tensors,
            AttrValue::Graphs(_) => AttrType::Graphs,
            AttrValue::SparseTensors(_) => AttrType::SparseTensors,
            AttrValue::Types(_) => AttrType::Types,
            AttrValue::Ref { ty, .. } => *ty,
        }
    }

    /// The subgraphs held by this value.
    pub fn graphs(&self) -> &[Graph] {
        match self {
            AttrValue::Graph(g) => std::slice::from_ref(g.as_ref()),
            AttrValue::Graphs(gs) => gs,
            _ => &[],
        }
    }

    /// The subgraphs held by this value, mutably.
    pub fn graphs_mut(&mut self) -> &mut [Graph] {
        match self {
            AttrValue::Graph(g) => std::slice::from_mut(g.as_mut()),
            AttrValue::Graphs(gs) => gs,
            _ => &mut [],
        }
    }
}

/// A named attribute of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
    pub doc_string: String,
}

/// A call of an operator or function.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The node's name (for diagnostics; may be empty, need not be unique).
    pub name: String,
    pub op: Op,
    /// Actual inputs by position; `None` for an absent optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Actual outputs by position; `None` for an output not computed.
    pub outputs: Vec<Option<ValueId>>,
    /// Attributes, with unique names, in model order.
    pub attributes: Vec<Attribute>,
    pub doc_string: String,
    /// What the rewriting passes decided about how the node runs (`None`
    /// as loaded: the operator and its attributes say it all).
    pub lowering: Option<Lowering>,
}

impl Node {
    /// The attribute called `name`.
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    /// The integer attribute `name`, if present and an `Int`.
    pub fn attr_int(&self, name: &str) -> Option<i64> {
        match self.attr(name) {
            Some(AttrValue::Int(i)) => Some(*i),
            _ => None,
        }
    }

    /// The subgraphs held by this node's attributes.
    pub fn subgraphs(&self) -> impl Iterator<Item = &Graph> {
        self.attributes.iter().flat_map(|a| a.value.graphs())
    }

    /// The values the node reads at run time, in the order its rule and
    /// its kernel see them: its inputs, then the outer values its subgraphs
    /// capture (each once, in order of the subgraphs' capture lists), then
    /// the operands of its [`Lowering`].
    pub fn reads(&self) -> Vec<Option<ValueId>> {
        let mut out = self.inputs.clone();
        let captured = self.captured_values();
        let operands = self.lowering.as_ref().map(Lowering::operands).unwrap_or_default();
        if !captured.is_empty() || !operands.is_empty() {
            out.resize(self.input_positions(), None);
        }
        out.extend(captured.into_iter().map(Some));
        out.extend(operands.into_iter().map(Some));
        out
    }

    /// How many positions the node's own inputs take among its
    /// [`Node::reads`] when other reads follow them: every input the
    /// operator may take (absent optional ones as `None`), so a read after
    /// them never stands where a kernel looks for an optional input; its
    /// inputs as given for a variadic operator.
    pub fn input_positions(&self) -> usize {
        let most = self.op.schema.map_or(0, |s| s.max_inputs);
        let most = if most >= i32::MAX as u32 { 0 } else { most as usize };
        self.inputs.len().max(most)
    }

    /// The outer values the subgraphs of this node capture, each once.
    pub fn captured_values(&self) -> Vec<ValueId> {
        let mut out: Vec<ValueId> = Vec::new();
        for g in self.subgraphs() {
            for &c in &g.captures {
                if let ValueKind::Captured { outer } = g.value(c).kind
                    && !out.contains(&outer)
                {
                    out.push(outer);
                }
            }
        }
        out
    }

    /// The input at position `i`, if present.
    pub fn input(&self, i: usize) -> Option<ValueId> {
        self.inputs.get(i).copied().flatten()
    }

    /// The output at position `i`, if present.
    pub fn output(&self, i: usize) -> Option<ValueId> {
        self.outputs.get(i).copied().flatten()
    }

    /// A label for diagnostics: the name, or `#index` when the node has none.
    pub fn label(&self, id: NodeId) -> String {
        if self.name.is_empty() { format!("#{}", id.0) } else { self.name.clone() }
    }
}

/// A use of a value: by a node input, by a subgraph (as a capture), or as a
/// graph output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Use {
    /// Input `index` of `node`.
    Input { node: NodeId, index: usize },
    /// Captured by a subgraph of `node`.
    Capture { node: NodeId },
    /// Graph output `index`.
    Output { index: usize },
    /// Read by `node` as an operand of its [`Lowering`] (a fused residual,
    /// packed weights, a folded mask).
    Operand { node: NodeId },
}

/// A computation graph.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    pub name: String,
    pub doc_string: String,
    values: Vec<Value>,
    nodes: Vec<Node>,
    order: Vec<NodeId>,
    /// Graph inputs, in order (values of kind `Input`).
    pub inputs: Vec<ValueId>,
    /// Graph outputs, in order (any value).
    pub outputs: Vec<ValueId>,
    /// Values captured from the enclosing graph (kind `Captured`), in first-use order.
    pub captures: Vec<ValueId>,
    by_name: HashMap<String, ValueId>,
    /// How many times a `&mut self` method ran (see [`Graph::revision`]).
    revision: u64,
}

/// Equal names, values, nodes, order, inputs, outputs and captures; the
/// revision is not part of a graph's contents.
impl PartialEq for Graph {
    fn eq(&self, other: &Graph) -> bool {
        let Graph {
            name,
            doc_string,
            values,
            nodes,
            order,
            inputs,
            outputs,
            captures,
            by_name,
            revision: _,
        } = self;
        *name == other.name
            && *doc_string == other.doc_string
            && *values == other.values
            && *nodes == other.nodes
            && *order == other.order
            && *inputs == other.inputs
            && *outputs == other.outputs
            && *captures == other.captures
            && *by_name == other.by_name
    }
}

impl Graph {
    /// An empty graph.
    pub fn new(name: impl Into<String>) -> Graph {
        Graph { name: name.into(), ..Graph::default() }
    }

    /// A number that every method taking the graph mutably (`&mut self`)
    /// increases: while it and the public fields (`name`, `doc_string`,
    /// `inputs`, `outputs`, `captures`) stay the same, the graph has not
    /// changed, so an inference of it still holds (the pipeline skips
    /// inferring again after a stage that did not touch the graph). Every
    /// `&mut self` method here calls `touch` first (`retain_nodes` only
    /// when it removes a node).
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Notes that the graph may change.
    fn touch(&mut self) {
        self.revision = self.revision.wrapping_add(1);
    }

    /// All values, indexed by [`ValueId`].
    pub fn values(&self) -> &[Value] {
        &self.values
    }

    /// The value `id`. Ids come from this graph, so they are in range;
    /// a foreign id is a bug in a pass.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.index()]
    }

    /// The value `id`, mutably.
    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        self.touch();
        &mut self.values[id.index()]
    }

    /// The node `id` (also after removal).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.index()]
    }

    /// The node `id`, mutably.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        self.touch();
        &mut self.nodes[id.index()]
    }

    /// The value called `name` in this graph (including captures).
    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    /// The first live node called `name` (a linear search; node names are for diagnostics).
    pub fn node_by_name(&self, name: &str) -> Option<NodeId> {
        self.order.iter().copied().find(|&id| self.node(id).name == name)
    }

    /// The live nodes in topological order.
    pub fn order(&self) -> &[NodeId] {
        &self.order
    }

    /// The live nodes with their ids, in topological order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.order.iter().map(|&id| (id, self.node(id)))
    }

    /// The number of live nodes.
    pub fn node_count(&self) -> usize {
        self.order.len()
    }

    /// Adds a value (its name must be new in this graph).
    pub fn add_value(&mut self, value: Value) -> ValueId {
        self.touch();
        let id = ValueId(u32::try_from(self.values.len()).unwrap_or(u32::MAX));
        self.by_name.insert(value.name.clone(), id);
        self.values.push(value);
        id
    }

    /// Adds a graph input.
    pub fn add_input(&mut self, name: impl Into<String>, ty: Option<Type>) -> ValueId {
        self.touch();
        let id = self.add_value(Value {
            name: name.into(),
            ty,
            kind: ValueKind::Input { default: None },
            doc_string: String::new(),
        });
        self.inputs.push(id);
        id
    }

    /// Adds a constant.
    pub fn add_initializer(&mut self, name: impl Into<String>, tensor: Tensor) -> ValueId {
        self.touch();
        self.add_value(Value {
            name: name.into(),
            ty: None,
            kind: ValueKind::Initializer(tensor),
            doc_string: String::new(),
        })
    }

    /// Adds a capture of `outer` (a value of the enclosing graph) named `name`.
    pub fn add_capture(&mut self, name: impl Into<String>, outer: ValueId) -> ValueId {
        self.touch();
        let id = self.add_value(Value {
            name: name.into(),
            ty: None,
            kind: ValueKind::Captured { outer },
            doc_string: String::new(),
        });
        self.captures.push(id);
        id
    }

    /// Appends a node at the end of the order, creating its output values
    /// (names must be new in this graph; `None` for an absent output).
    pub fn add_node(&mut self, mut node: Node, outputs: &[Option<String>]) -> NodeId {
        self.touch();
        let id = NodeId(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX));
        node.outputs = outputs
            .iter()
            .enumerate()
            .map(|(index, name)| {
                name.as_ref().map(|name| {
                    self.add_value(Value {
                        name: name.clone(),
                        ty: None,
                        kind: ValueKind::NodeOutput { node: id, index },
                        doc_string: String::new(),
                    })
                })
            })
            .collect();
        self.nodes.push(node);
        self.order.push(id);
        id
    }

    /// Appends a node whose output values already exist (added with
    /// [`Graph::add_value`] as `NodeOutput` of the id this call returns, which
    /// is the number of nodes pushed so far).
    pub fn push_node(&mut self, node: Node) -> NodeId {
        self.touch();
        let id = self.next_node_id();
        self.nodes.push(node);
        self.order.push(id);
        id
    }

    /// The id the next pushed node will get.
    pub fn next_node_id(&self) -> NodeId {
        NodeId(u32::try_from(self.nodes.len()).unwrap_or(u32::MAX))
    }

    /// Replaces the topological order (the caller guarantees it is one and
    /// lists live nodes only).
    pub fn set_order(&mut self, order: Vec<NodeId>) {
        self.touch();
        self.order = order;
    }

    /// Removes the nodes for which `keep` is false from the order. Their
    /// output values stay in the arena, defined by a removed node; the caller
    /// redirects their uses first.
    pub fn retain_nodes(&mut self, mut keep: impl FnMut(NodeId, &Node) -> bool) {
        let (nodes, live) = (&self.nodes, self.order.len());
        self.order.retain(|&id| keep(id, &nodes[id.index()]));
        if self.order.len() != live {
            self.touch();
        }
    }

    /// Renames a value (the new name must be unused in this graph).
    pub fn rename_value(&mut self, id: ValueId, name: String) {
        self.touch();
        let old = std::mem::replace(&mut self.values[id.index()].name, name.clone());
        if self.by_name.get(&old) == Some(&id) {
            self.by_name.remove(&old);
        }
        self.by_name.insert(name, id);
    }

    /// Every use of every value, indexed by [`ValueId`], in one pass over the graph.
    pub fn uses(&self) -> Vec<Vec<Use>> {
        let mut uses = vec![Vec::new(); self.values.len()];
        for (id, node) in self.nodes() {
            for (index, input) in node.inputs.iter().enumerate() {
                if let Some(v) = input
                    && let Some(list) = uses.get_mut(v.index())
                {
                    list.push(Use::Input { node: id, index });
                }
            }
            for g in node.subgraphs() {
                for &c in &g.captures {
                    if let ValueKind::Captured { outer } = g.value(c).kind
                        && let Some(list) = uses.get_mut(outer.index())
                        && !list.contains(&Use::Capture { node: id })
                    {
                        list.push(Use::Capture { node: id });
                    }
                }
            }
            for v in node.lowering.iter().flat_map(Lowering::operands) {
                if let Some(list) = uses.get_mut(v.index())
                    && !list.contains(&Use::Operand { node: id })
                {
                    list.push(Use::Operand { node: id });
                }
            }
        }
        for (index, v) in self.outputs.iter().enumerate() {
            if let Some(list) = uses.get_mut(v.index()) {
                list.push(Use::Output { index });
            }
        }
        uses
    }

    /// Replaces every use of `old` by `new`: node inputs, lowering operands,
    /// graph outputs, and captures of subgraphs of this graph's nodes.
    pub fn replace_uses(&mut self, old: ValueId, new: ValueId) {
        self.touch();
        let order = self.order.clone();
        for id in order {
            let node = &mut self.nodes[id.index()];
            for input in node.inputs.iter_mut().flatten() {
                if *input == old {
                    *input = new;
                }
            }
            if let Some(l) = &mut node.lowering {
                l.replace_operand(old, new);
            }
            for attr in &mut node.attributes {
                for g in attr.value.graphs_mut() {
                    for c in g.captures.clone() {
                        if let ValueKind::Captured { outer } = &mut g.value_mut(c).kind
                            && *outer == old
                        {
                            *outer = new;
                        }
                    }
                }
            }
        }
        for out in &mut self.outputs {
            if *out == old {
                *out = new;
            }
        }
    }

    /// The node defining `value`, if it is a node output.
    pub fn producer(&self, value: ValueId) -> Option<(NodeId, usize)> {
        match self.value(value).kind {
            ValueKind::NodeOutput { node, index } => Some((node, index)),
            _ => None,
        }
    }

    /// Calls `f` on this graph and every nested subgraph, depth first, with
    /// the nesting depth (0 for this graph).
    pub fn visit(&self, f: &mut impl FnMut(&Graph, usize)) {
        self.visit_at(0, f);
    }

    fn visit_at(&self, depth: usize, f: &mut impl FnMut(&Graph, usize)) {
        f(self, depth);
        for (_, node) in self.nodes() {
            for g in node.subgraphs() {
                g.visit_at(depth + 1, f);
            }
        }
    }

    /// The number of live nodes here and in all nested subgraphs.
    pub fn total_node_count(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |g, _| n += g.node_count());
        n
    }
}
