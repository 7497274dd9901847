//! Shape and type inference with constant folding, over the main graph.
//!
//! Nodes are visited in order. Each gets its output types from its operator's
//! rule ([`crate::ops::OpRule`]); a node whose inputs are all known at
//! generation time is evaluated on the host with the very kernel the
//! generated code would call, and its outputs become constants. What is left
//! is the list of steps that run at run time, each already lowered to a
//! kernel call or an alias.
//!
//! Symbolic dimensions are bound by the caller (`--dim N=4`); declared shapes
//! (graph outputs, value_info) are checked against inferred ones. Every
//! unsupported operator, attribute or type is reported, not only the first.
//!
//! # Inference again after a rewrite
//!
//! The rewriting passes ([`super::pipeline`]) change a few nodes at a time;
//! [`reinfer_graph`] then runs only the rules whose answer may differ. A
//! node's visit is a function of what it sees: the node itself (operator,
//! inputs, outputs, attributes and their subgraphs, lowering), the types and
//! constants of the values it reads, the names and declared types of its
//! outputs, and the dims expected for them downstream; plus what stays fixed
//! for a whole inference (the options, the graph's name, the compiler),
//! which is compared once. Inference records, per node, what it saw and
//! what the visit did (the types and constants of its outputs, whether it
//! runs, folds or is skipped, its errors and unsupported reports, its
//! lowered step). Re-inference walks the nodes in order like a first
//! inference, from freshly seeded inputs and initializers, and replays the
//! record of every node that sees exactly what it saw; the others run their
//! rules. Nothing is trusted to a pass: a node a pass added, rewired or
//! lowered differently, a new or changed initializer, a value whose
//! producer now computes another type or constant, a graph output that
//! moves (expected dims) all show up as a difference in what a node sees,
//! and only there. Removed nodes are not visited; values they defined are
//! left untyped, as by a first inference.
//!
//! Replaying in order keeps the state each rule sees (types of the values
//! visited so far, none of those after) exactly that of a first inference,
//! so the result is identical to inferring from scratch, order of errors
//! included; what depends on the whole graph (which steps are live, whether
//! graph outputs got a type) is recomputed at the end, as it is cheap. The
//! pipeline checks this identity in tests ([`difference`]).

use crate::diag::{Diagnostic, PathStep};
use crate::ir::{Dim, Graph, Node, NodeId, Tensor, TensorType, Type, Use, ValueId, ValueKind};
use crate::ops::{self, Compiler, HostTensor, Lowered, NodeCx, OpError};
use std::collections::BTreeMap;

/// What inference needs from the caller.
#[derive(Clone, Debug, PartialEq)]
pub struct InferOptions {
    /// Values of symbolic dimensions (`dim_param`), by name.
    pub dims: BTreeMap<String, usize>,
    /// A node with constant inputs is folded when its outputs take at most
    /// this many bytes, or no more than its inputs do (so folding never
    /// inflates the weights much).
    pub fold_limit_bytes: usize,
    /// Integer main-graph inputs whose values are fixed at generation time,
    /// by name (row-major): they fold like initializers, and the generated
    /// code checks at run time that the caller passes exactly these values.
    pub fixed_inputs: BTreeMap<String, Vec<i64>>,
}

impl Default for InferOptions {
    fn default() -> InferOptions {
        InferOptions {
            dims: BTreeMap::new(),
            fold_limit_bytes: 64 * 1024,
            fixed_inputs: BTreeMap::new(),
        }
    }
}

/// One node that runs at run time.
pub struct Step {
    pub node: NodeId,
    pub lowered: Lowered,
}

/// Something the compiler does not handle yet, for reports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Unsupported {
    /// The node's name (or `#index`).
    pub node: String,
    pub op_type: String,
    pub domain: String,
    pub reason: String,
}

/// The result of inference: a type for every value it reached, the values
/// known at generation time, the steps left to run, and what went wrong.
pub struct Inferred {
    /// Per value of the main graph: its static type, if inference reached it.
    pub types: Vec<Option<TensorType>>,
    /// Per value: its contents, if known at generation time.
    pub constants: Vec<Option<Tensor>>,
    /// The nodes that run, in order, dead ones removed.
    pub steps: Vec<Step>,
    /// How many nodes were folded away.
    pub folded: usize,
    /// Errors in the model (bad shapes, unbound dimensions, ...).
    pub errors: Vec<Diagnostic>,
    /// What the model says that inference did not follow (a declared shape
    /// that disagrees with the one its inputs give), and code generation
    /// does not stop for.
    pub warnings: Vec<Diagnostic>,
    /// What this compiler does not support yet.
    pub unsupported: Vec<Unsupported>,
    /// What each visit saw and did, for [`reinfer_graph`]; `None` once
    /// forgotten.
    visits: Option<Visits>,
}

impl Inferred {
    /// Whether code can be generated.
    pub fn is_complete(&self) -> bool {
        self.errors.is_empty() && self.unsupported.is_empty()
    }

    /// How many nodes this inference visited, and for how many of them it
    /// ran the operator's rule (the others replayed their previous visit);
    /// `None` once forgotten.
    pub fn visit_counts(&self) -> Option<(usize, usize)> {
        self.visits.as_ref().map(|v| (v.visited, v.ran))
    }

    /// Drops the record of each visit [`reinfer_graph`] replays, once the
    /// graph will not change again.
    pub fn forget_visits(&mut self) {
        self.visits = None;
    }
}

/// The record of one inference's visits, for the next.
struct Visits {
    /// What stays fixed for a whole inference and was not compared per node.
    opts: InferOptions,
    graph: String,
    /// Per node id: its last visit, if it was visited.
    records: Vec<Option<Record>>,
    /// The steps of nodes that run but that no graph output needs.
    dead: Vec<Step>,
    visited: usize,
    ran: usize,
}

/// One visit: what the node was and saw, and what the visit did.
struct Record {
    node: Node,
    seen: Seen,
    outcome: Outcome,
    /// Per output: the value's type and constant after the visit (`None`
    /// for an absent output).
    outputs: Vec<Option<(Option<TensorType>, Option<Tensor>)>>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    unsupported: Vec<Unsupported>,
}

/// What a visit reads besides the node itself and what is fixed for the
/// whole inference.
#[derive(PartialEq)]
struct Seen {
    /// Per read ([`Node::reads`]): its type and constant.
    read_types: Vec<Option<TensorType>>,
    read_constants: Vec<Option<Tensor>>,
    /// Per output: the value's name and declared type (errors and folded
    /// constants name it; it is checked against the declaration), and its
    /// type and constant before the visit (none in a graph where the node
    /// defines it).
    outputs: Vec<Option<OutputSeen>>,
    /// Per output: its expected dims ([`State::expected_dims`]).
    expected: Vec<Option<Vec<usize>>>,
}

#[derive(PartialEq)]
struct OutputSeen {
    name: String,
    declared: Option<Type>,
    ty: Option<TensorType>,
    constant: Option<Tensor>,
}

#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Run,
    Folded,
    Skipped,
}

/// Whether `a` and `b` are the same node: `==`, with the schemas (static
/// tables) compared by address first. Destructured, so that a new field
/// of [`Node`] or [`crate::ir::Op`] cannot be left out.
fn same_node(a: &Node, b: &Node) -> bool {
    let Node { name, op, inputs, outputs, attributes, doc_string, lowering } = a;
    let crate::ir::Op { domain, op_type, overload, opset_version, schema } = op;
    let same_schema = match (schema, b.op.schema) {
        (Some(x), Some(y)) => std::ptr::eq(*x, y) || **x == *y,
        (None, None) => true,
        _ => false,
    };
    *inputs == b.inputs
        && *outputs == b.outputs
        && *op_type == b.op.op_type
        && *domain == b.op.domain
        && *overload == b.op.overload
        && *opset_version == b.op.opset_version
        && same_schema
        && *lowering == b.lowering
        && *attributes == b.attributes
        && *name == b.name
        && *doc_string == b.doc_string
}

/// The previous inference, taken apart for replaying.
struct Reuse {
    records: Vec<Option<Record>>,
    /// Per node id: the lowered step of a node that ran.
    lowered: Vec<Option<Lowered>>,
}

impl Reuse {
    /// What of `previous` can be replayed in an inference of `g` under
    /// `opts`: nothing if these changed.
    fn new(previous: Inferred, g: &Graph, opts: &InferOptions) -> Option<Reuse> {
        let Inferred { steps, visits, .. } = previous;
        let visits = visits?;
        if visits.opts != *opts || visits.graph != g.name {
            return None;
        }
        let mut lowered: Vec<Option<Lowered>> = visits.records.iter().map(|_| None).collect();
        for step in steps.into_iter().chain(visits.dead) {
            if let Some(slot) = lowered.get_mut(step.node.index()) {
                *slot = Some(step.lowered);
            }
        }
        Some(Reuse { records: visits.records, lowered })
    }
}

pub use crate::ops::Seed;

/// Infers types and folds constants over `g`. Graph inputs listed in `seeds`
/// take the seed's type instead of their declared one (a subgraph's inputs
/// and captures are typed by its node); the main graph has no seeds. Rules
/// compile their subgraphs with `compiler`.
pub fn infer_graph(
    g: &Graph,
    opts: &InferOptions,
    seeds: &[Seed],
    compiler: &dyn Compiler,
) -> Inferred {
    infer_graph_with(g, opts, seeds, compiler, None)
}

/// [`infer_graph`] after `g` was rewritten since `previous` was inferred
/// from it (with the same `opts`, `seeds` and `compiler`): runs the rules
/// of the nodes that see something else than last time, replays the other
/// visits. The result is the same as [`infer_graph`]'s.
pub fn reinfer_graph(
    g: &Graph,
    opts: &InferOptions,
    seeds: &[Seed],
    compiler: &dyn Compiler,
    previous: Inferred,
) -> Inferred {
    infer_graph_with(g, opts, seeds, compiler, Some(previous))
}

/// The constant for input `name` of type `ty` fixed to `values` (`--fix`):
/// an integer type, one value per element, each in the type's range.
pub fn fixed_tensor(name: &str, ty: &TensorType, values: &[i64]) -> Result<Tensor, String> {
    use crate::ir::ElemType as E;
    let (bytes, min, max): (usize, i128, i128) = match ty.elem {
        E::Int8 => (1, i8::MIN.into(), i8::MAX.into()),
        E::Int16 => (2, i16::MIN.into(), i16::MAX.into()),
        E::Int32 => (4, i32::MIN.into(), i32::MAX.into()),
        E::Int64 => (8, i64::MIN.into(), i64::MAX.into()),
        E::Uint8 => (1, 0, u8::MAX.into()),
        E::Uint16 => (2, 0, u16::MAX.into()),
        E::Uint32 => (4, 0, u32::MAX.into()),
        E::Uint64 => (8, 0, i64::MAX.into()),
        E::Bool => (1, 0, 1),
        other => {
            return Err(format!(
                "input '{name}' is {other}: only integer and bool inputs can have their values fixed"
            ));
        }
    };
    if ty.numel() != Some(values.len()) {
        return Err(format!(
            "input '{name}' is {ty}, but {} values are fixed for it",
            values.len()
        ));
    }
    let mut data = Vec::with_capacity(values.len() * bytes);
    for &x in values {
        if !(min..=max).contains(&i128::from(x)) {
            return Err(format!(
                "the value {x} fixed for input '{name}' does not fit its type {ty}"
            ));
        }
        data.extend_from_slice(&x.to_le_bytes()[..bytes]);
    }
    let dims = ty.dims.iter().map(|&d| d as u64).collect();
    Tensor::from_bytes(name, ty.elem, dims, data.into())
        .map_err(|d| d.into_iter().map(|d| d.message).collect::<Vec<_>>().join("; "))
}

/// How far [`State::expected_dims`] follows a value downstream.
const EXPECT_DEPTH: usize = 8;

/// Whether `node`'s output 0 has exactly the shape of its input `index`,
/// given the output's rank, as its rule says ([`ops::OpRule::shape_rule`]):
/// ops whose output is their input 0's shape, and element-wise ops of
/// several operands whose other operands hold one element and have at most
/// the output's rank (so they can neither stretch an axis nor, when the
/// input has the output's rank, add one: rules that use the result check
/// that rank, see [`crate::ops::NodeCx::expected_output`]).
///
/// An operand that is not inferred yet (it comes later in the graph,
/// typically from the same run-time-shaped value) is taken to keep the
/// shape too: that is an assumption, not a fact, but a safe one. The op
/// that plans with the expected dims checks its run-time data against
/// them, and the other operand's shape, once inferred, must then broadcast
/// to the declared value's, or generation fails. A model that relies on
/// broadcasting a one-element run-time result over it gets a run-time
/// error, never a wrong result.
fn keeps_shape<'t>(
    node: &Node,
    index: usize,
    out_rank: usize,
    ty: impl Fn(ValueId) -> Option<&'t TensorType>,
) -> bool {
    let Some(rule) = ops::rule_for(node) else { return false };
    match rule.shape_rule(node) {
        ops::ShapeRule::Other => false,
        ops::ShapeRule::SameAsInput0 => index == 0,
        ops::ShapeRule::Broadcast => {
            index < node.inputs.len()
                && node.inputs.len() >= 2
                && node.inputs.iter().enumerate().filter(|&(i, _)| i != index).all(|(_, v)| {
                    v.is_some_and(|v| {
                        ty(v).is_none_or(|t| t.numel() == Some(1) && t.rank() <= out_rank)
                    })
                })
        }
    }
}

fn infer_graph_with(
    g: &Graph,
    opts: &InferOptions,
    seeds: &[Seed],
    compiler: &dyn Compiler,
    previous: Option<Inferred>,
) -> Inferred {
    let mut reuse = previous.and_then(|p| Reuse::new(p, g, opts));
    let n = g.values().len();
    let mut st = State {
        g,
        opts,
        compiler,
        uses: g.uses(),
        types: vec![None; n],
        constants: vec![None; n],
        errors: Vec::new(),
        warnings: Vec::new(),
        unsupported: Vec::new(),
    };
    st.seed_inputs_and_constants(seeds);
    let mut steps = Vec::new();
    let mut folded = 0;
    let mut records: Vec<Option<Record>> = (0..g.next_node_id().index()).map(|_| None).collect();
    let mut ran = 0;
    for &id in g.order() {
        let (visit, record, replayed) = st.visit(id, reuse.as_mut());
        ran += usize::from(!replayed);
        if let Some(slot) = records.get_mut(id.index()) {
            *slot = Some(record);
        }
        match visit {
            Visit::Run(lowered) => steps.push(Step { node: id, lowered }),
            Visit::Folded => folded += 1,
            Visit::Skipped => {}
        }
    }
    st.check_outputs();
    let (steps, dead) = live_steps(g, steps);
    Inferred {
        types: st.types,
        constants: st.constants,
        steps,
        folded,
        errors: st.errors,
        warnings: st.warnings,
        unsupported: st.unsupported,
        visits: Some(Visits {
            opts: opts.clone(),
            graph: g.name.clone(),
            records,
            dead,
            visited: g.order().len(),
            ran,
        }),
    }
}

/// What a non-tensor value type is, for messages.
fn non_tensor_kind(ty: Option<&Type>) -> Option<&'static str> {
    match ty? {
        Type::Tensor { .. } => None,
        Type::SparseTensor { .. } => Some("sparse tensor"),
        Type::Sequence(_) => Some("sequence"),
        Type::Map { .. } => Some("map"),
        Type::Optional(_) => Some("optional"),
        Type::Opaque { .. } => Some("opaque"),
        Type::Unknown => None,
    }
}

enum Visit {
    Run(Lowered),
    Folded,
    Skipped,
}

impl Visit {
    fn outcome(&self) -> Outcome {
        match self {
            Visit::Run(_) => Outcome::Run,
            Visit::Folded => Outcome::Folded,
            Visit::Skipped => Outcome::Skipped,
        }
    }
}

struct State<'a> {
    g: &'a Graph,
    opts: &'a InferOptions,
    compiler: &'a dyn Compiler,
    /// Every use of every value (for [`State::expected_dims`]).
    uses: Vec<Vec<Use>>,
    types: Vec<Option<TensorType>>,
    constants: Vec<Option<Tensor>>,
    errors: Vec<Diagnostic>,
    warnings: Vec<Diagnostic>,
    unsupported: Vec<Unsupported>,
}

impl State<'_> {
    fn path(&self, node: Option<NodeId>) -> Vec<PathStep> {
        let mut path = vec![PathStep::Graph(self.g.name.clone())];
        if let Some(id) = node {
            let n = self.g.node(id);
            path.push(PathStep::Node { name: n.label(id), op_type: n.op.op_type.clone() });
        }
        path
    }

    fn error(&mut self, node: Option<NodeId>, message: String) {
        let d = Diagnostic::error(message).at_path(self.path(node));
        self.errors.push(d);
    }

    fn warning(&mut self, node: Option<NodeId>, message: String) {
        let d = Diagnostic::warning(message).at_path(self.path(node));
        self.warnings.push(d);
    }

    /// Graph inputs get their declared types, with symbolic dims bound;
    /// initializers are constants.
    fn seed_inputs_and_constants(&mut self, seeds: &[Seed]) {
        for s in seeds {
            if let Some(slot) = self.types.get_mut(s.value.index()) {
                *slot = Some(s.ty.clone());
                self.constants[s.value.index()] = s.constant.clone();
            }
        }
        for (i, v) in self.g.values().iter().enumerate() {
            if seeds.iter().any(|s| s.value.index() == i) {
                continue;
            }
            match &v.kind {
                ValueKind::Initializer(t) => match t.tensor_type() {
                    Some(ty) => {
                        self.types[i] = Some(ty);
                        self.constants[i] = Some(t.clone());
                    }
                    None => self.error(None, format!("initializer '{}' is too large", v.name)),
                },
                ValueKind::Input { .. } => {
                    if let Some(kind) = non_tensor_kind(v.ty.as_ref()) {
                        self.unsupported.push(Unsupported {
                            node: format!("input '{}'", v.name),
                            op_type: String::new(),
                            domain: String::new(),
                            reason: match kind {
                                "sequence" => "sequence inputs are not supported: generated code \
                                               holds a sequence as separately planned tensors, so \
                                               its length must be known at generation time"
                                    .to_owned(),
                                "optional" => "optional inputs are not supported yet (only \
                                               optionals whose presence is known at generation \
                                               time)"
                                    .to_owned(),
                                _ => format!("{kind} inputs are not supported yet"),
                            },
                        });
                        continue;
                    }
                    let ty = self.input_type(&v.name, v.ty.as_ref());
                    match ty {
                        Ok(ty) => {
                            if seeds.is_empty()
                                && let Some(values) = self.opts.fixed_inputs.get(&v.name)
                            {
                                match fixed_tensor(&v.name, &ty, values) {
                                    Ok(t) => self.constants[i] = Some(t),
                                    Err(m) => self.error(None, m),
                                }
                            }
                            self.types[i] = Some(ty);
                        }
                        Err(messages) => {
                            for m in messages {
                                self.error(None, m);
                            }
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn input_type(&self, name: &str, ty: Option<&Type>) -> Result<TensorType, Vec<String>> {
        let Some(Type::Tensor { elem, shape }) = ty else {
            return Err(vec![format!(
                "input '{name}' is not a tensor with a declared type; only tensor inputs are supported"
            )]);
        };
        let Some(elem) = elem else {
            return Err(vec![format!("input '{name}' has no element type")]);
        };
        let Some(dims) = &shape.dims else {
            return Err(vec![format!(
                "input '{name}' has no shape; the compiler needs static shapes: give it one \
                 (--input-shape {name}=D,D,...)"
            )]);
        };
        let mut out = Vec::with_capacity(dims.len());
        let mut problems = Vec::new();
        for (i, d) in dims.iter().enumerate() {
            match d {
                Dim::Static(v) => match usize::try_from(*v) {
                    Ok(v) => out.push(v),
                    Err(_) => problems.push(format!("dimension {i} of input '{name}' is too large")),
                },
                Dim::Symbolic(s) => match self.opts.dims.get(s) {
                    Some(&v) => out.push(v),
                    None => problems.push(format!(
                        "dimension {i} of input '{name}' is the symbol '{s}', which is not bound; give \
                         it a value (--dim {s}=N)"
                    )),
                },
                Dim::Unknown => problems.push(format!(
                    "dimension {i} of input '{name}' is unknown ('?', -1 or unnamed); the \
                     compiler needs static shapes: give the input's shape (--input-shape \
                     {name}=D,D,...)"
                )),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let ty = TensorType::new(*elem, out);
        if too_large(&ty) {
            return Err(vec![format!(
                "input '{name}' is {ty}, whose size in bytes overflows on this machine"
            )]);
        }
        Ok(ty)
    }

    /// Visits node `id`: replays its previous visit (from `reuse`) when it
    /// sees exactly what it saw then, else runs its rule. Returns the visit,
    /// its record, and whether it was replayed.
    fn visit(&mut self, id: NodeId, reuse: Option<&mut Reuse>) -> (Visit, Record, bool) {
        let node = self.g.node(id);
        if let Some(reuse) = reuse
            && let Some(previous) = reuse.records.get_mut(id.index()).and_then(Option::take)
            && same_node(&previous.node, node)
            && self.sees(node, &previous.seen)
        {
            let visit = match previous.outcome {
                Outcome::Run => {
                    reuse.lowered.get_mut(id.index()).and_then(Option::take).map(Visit::Run)
                }
                Outcome::Folded => Some(Visit::Folded),
                Outcome::Skipped => Some(Visit::Skipped),
            };
            if let Some(visit) = visit {
                self.replay(node, &previous);
                return (visit, previous, true);
            }
        }
        let seen = self.seen(node);
        let (errors, warnings, unsupported) =
            (self.errors.len(), self.warnings.len(), self.unsupported.len());
        let visit = self.run_rule(id, &seen);
        let record = Record {
            node: node.clone(),
            seen,
            outcome: visit.outcome(),
            outputs: node
                .outputs
                .iter()
                .map(|v| {
                    v.map(|v| (self.types[v.index()].clone(), self.constants[v.index()].clone()))
                })
                .collect(),
            errors: self.errors[errors..].to_vec(),
            warnings: self.warnings[warnings..].to_vec(),
            unsupported: self.unsupported[unsupported..].to_vec(),
        };
        (visit, record, false)
    }

    /// What a visit of `node` reads, now.
    fn seen(&self, node: &Node) -> Seen {
        let reads = node.reads();
        // Clones share the data (`Bytes`), so this costs names and dims only.
        let value = |v: ValueId| (self.types[v.index()].clone(), self.constants[v.index()].clone());
        let (read_types, read_constants) =
            reads.iter().map(|v| v.map(value).unwrap_or_default()).unzip();
        let outputs = node
            .outputs
            .iter()
            .map(|v| {
                v.map(|v| {
                    let (ty, constant) = value(v);
                    let value = self.g.value(v);
                    OutputSeen {
                        name: value.name.clone(),
                        declared: value.ty.clone(),
                        ty,
                        constant,
                    }
                })
            })
            .collect();
        let expected = node
            .outputs
            .iter()
            .map(|v| v.and_then(|v| self.expected_dims(v, EXPECT_DEPTH)))
            .collect();
        Seen { read_types, read_constants, outputs, expected }
    }

    /// Whether a visit of `node` would see exactly `seen` now: [`State::seen`]
    /// compared in place, without copying what the node reads (most visits
    /// are replayed).
    fn sees(&self, node: &Node, seen: &Seen) -> bool {
        let reads = node.reads();
        let value = |v: &ValueId, ty: &Option<TensorType>, constant: &Option<Tensor>| {
            self.types[v.index()] == *ty && self.constants[v.index()] == *constant
        };
        let same_reads = reads.len() == seen.read_types.len()
            && reads.iter().zip(seen.read_types.iter().zip(&seen.read_constants)).all(
                |(v, (ty, constant))| match v {
                    Some(v) => value(v, ty, constant),
                    None => ty.is_none() && constant.is_none(),
                },
            );
        let same_outputs = node.outputs.len() == seen.outputs.len()
            && node.outputs.iter().zip(&seen.outputs).all(|(v, o)| match (v, o) {
                (Some(v), Some(o)) => {
                    let declared = self.g.value(*v);
                    declared.name == o.name
                        && declared.ty == o.declared
                        && value(v, &o.ty, &o.constant)
                }
                (None, None) => true,
                _ => false,
            });
        same_reads
            && same_outputs
            && node.outputs.len() == seen.expected.len()
            && node.outputs.iter().zip(&seen.expected).all(|(v, expected)| {
                v.and_then(|v| self.expected_dims(v, EXPECT_DEPTH)) == *expected
            })
    }

    /// Does again what the visit `previous` of `node` did to the state.
    fn replay(&mut self, node: &Node, previous: &Record) {
        for (out, after) in node.outputs.iter().zip(&previous.outputs) {
            if let (Some(v), Some((ty, constant))) = (out, after) {
                self.types[v.index()] = ty.clone();
                self.constants[v.index()] = constant.clone();
            }
        }
        self.errors.extend(previous.errors.iter().cloned());
        self.warnings.extend(previous.warnings.iter().cloned());
        self.unsupported.extend(previous.unsupported.iter().cloned());
    }

    /// Runs the rule of node `id`, which sees `seen`.
    fn run_rule(&mut self, id: NodeId, seen: &Seen) -> Visit {
        let g = self.g;
        let node = g.node(id);
        let reads = node.reads();
        let inputs = &seen.read_types;
        let report_unsupported = |st: &mut State<'_>, reason: String| {
            st.unsupported.push(Unsupported {
                node: node.label(id),
                op_type: node.op.op_type.clone(),
                domain: node.op.domain.clone(),
                reason,
            });
            Visit::Skipped
        };
        // An input whose type is unknown failed upstream, already reported;
        // an operator without a rule is still worth reporting (all at once).
        if reads.iter().zip(inputs).any(|(v, t)| v.is_some() && t.is_none()) {
            if ops::rule_for(node).is_none() {
                return report_unsupported(
                    self,
                    format!("operator {} is not supported yet", node.op.op_type),
                );
            }
            return Visit::Skipped;
        }
        let Some(rule) = ops::rule_for(node) else {
            return report_unsupported(
                self,
                format!("operator {} is not supported yet", node.op.op_type),
            );
        };
        let constants: Vec<Option<&Tensor>> =
            seen.read_constants.iter().map(Option::as_ref).collect();
        let declared: Vec<Option<TensorType>> =
            node.outputs.iter().map(|v| v.and_then(|v| self.declared_type(v))).collect();
        let own = node.inputs.len().min(reads.len());
        let cx = NodeCx {
            node,
            inputs: &inputs[..own],
            constants: &constants[..own],
            reads: &reads,
            read_types: inputs,
            read_constants: &constants,
            declared: &declared,
            expected: &seen.expected,
            compiler: self.compiler,
        };
        let result = rule.infer(&cx).and_then(|outs| {
            if let Some(t) = outs.iter().find(|t| too_large(t)) {
                return Err(OpError::Invalid(format!(
                    "the output of {} would be {t}, whose size in bytes overflows on this machine",
                    node.op.op_type
                )));
            }
            let fixed = rule.constant_outputs(&cx, &outs)?;
            Ok((outs, fixed))
        });
        let (outputs, fixed) = match result {
            Ok(r) => r,
            Err(OpError::Unsupported(m)) => return report_unsupported(self, m),
            Err(OpError::Invalid(m)) => {
                self.error(Some(id), m);
                return Visit::Skipped;
            }
        };
        for (k, out) in node.outputs.iter().enumerate() {
            let (Some(v), Some(ty)) = (out, outputs.get(k)) else { continue };
            self.check_declared(id, *v, ty);
            self.types[v.index()] = Some(ty.clone());
        }
        if let Some(values) = fixed {
            self.set_constants(node.outputs.as_slice(), values);
            return Visit::Folded;
        }
        let lowered = match rule.lower(&cx, &outputs) {
            Ok(l) => l,
            Err(OpError::Unsupported(m)) => return report_unsupported(self, m),
            Err(OpError::Invalid(m)) => {
                self.error(Some(id), m);
                return Visit::Skipped;
            }
        };
        if let Lowered::Kernel(kernel) = &lowered {
            for w in kernel.warnings() {
                self.warning(Some(id), w);
            }
        }
        let all_constant = reads.iter().zip(&constants).all(|(v, c)| v.is_none() || c.is_some());
        if all_constant && self.worth_folding(&constants, &outputs) {
            match self.fold(&lowered, &constants, &outputs) {
                Ok(values) => {
                    self.set_constants(node.outputs.as_slice(), values);
                    return Visit::Folded;
                }
                Err(Some(message)) => {
                    self.error(Some(id), message);
                    return Visit::Skipped;
                }
                // No host form for these types: the node runs at run time.
                Err(None) => {}
            }
        }
        Visit::Run(lowered)
    }

    fn worth_folding(&self, inputs: &[Option<&Tensor>], outputs: &[TensorType]) -> bool {
        let out: usize = outputs.iter().map(|t| t.byte_size().unwrap_or(usize::MAX)).sum();
        let inp: usize = inputs.iter().flatten().map(|t| t.data_len()).sum();
        out <= self.opts.fold_limit_bytes.max(inp)
    }

    /// Runs a lowered node on constant inputs. `Err(None)` when the host
    /// cannot run it (types without a host form); `Err(Some(message))` when
    /// the kernel refuses the data.
    fn fold(
        &self,
        lowered: &Lowered,
        inputs: &[Option<&Tensor>],
        outputs: &[TensorType],
    ) -> Result<Vec<Tensor>, Option<String>> {
        match lowered {
            Lowered::Alias => {
                let (Some(Some(t)), Some(ty)) = (inputs.first(), outputs.first()) else {
                    return Err(None);
                };
                let mut t = (*t).clone();
                t.dims = ty.dims.iter().map(|&d| d as u64).collect();
                Ok(vec![t])
            }
            Lowered::Kernel(k) => {
                let host: Vec<Option<HostTensor>> = inputs
                    .iter()
                    .map(|t| t.map(|t| HostTensor::from_tensor(t).ok_or(())).transpose())
                    .collect::<Result<_, ()>>()
                    .map_err(|()| None)?;
                let host_refs: Vec<Option<&HostTensor>> = host.iter().map(Option::as_ref).collect();
                let mut outs: Vec<HostTensor> = outputs
                    .iter()
                    .chain(k.scratch().as_ref())
                    .map(HostTensor::zeros)
                    .collect::<Option<_>>()
                    .ok_or(None)?;
                match k.eval(&host_refs, &mut outs) {
                    Ok(()) => {
                        Ok(outs.iter().take(outputs.len()).map(|o| o.to_tensor("folded")).collect())
                    }
                    Err(ops::EvalError::Type(_)) => Err(None),
                    Err(ops::EvalError::Runtime(e)) => {
                        Err(Some(format!("evaluating this node on constant inputs failed: {e}")))
                    }
                }
            }
        }
    }

    fn set_constants(&mut self, outputs: &[Option<ValueId>], values: Vec<Tensor>) {
        for (out, mut t) in outputs.iter().zip(values) {
            if let Some(v) = out {
                t.name = self.g.value(*v).name.clone();
                self.constants[v.index()] = Some(t);
            }
        }
    }

    /// The dims `v` must have: its declared dims, or those of a declared
    /// value downstream that `v` reaches through ops that keep the shape
    /// exactly (see [`keeps_shape`]), at most `depth` ops away. Rules whose
    /// output shape depends on run-time data plan with it; their generated
    /// code checks the data against it.
    ///
    /// Each value is examined once per query (memoised), so a query costs at
    /// most the values within `depth` ops downstream, however they fan out.
    fn expected_dims(&self, v: ValueId, depth: usize) -> Option<Vec<usize>> {
        let mut memo = BTreeMap::new();
        self.expected_dims_memo(v, depth, &mut memo)
    }

    fn expected_dims_memo(
        &self,
        v: ValueId,
        depth: usize,
        memo: &mut BTreeMap<ValueId, (usize, Option<Vec<usize>>)>,
    ) -> Option<Vec<usize>> {
        if let Some(t) = self.declared_type(v) {
            return Some(t.dims);
        }
        if depth == 0 {
            return None;
        }
        // A miss is final only when it looked at least as far as now.
        if let Some((seen, found)) = memo.get(&v)
            && (found.is_some() || *seen >= depth)
        {
            return found.clone();
        }
        memo.insert(v, (depth, None));
        let mut found = None;
        for u in self.uses.get(v.index()).map(Vec::as_slice).unwrap_or_default() {
            let Use::Input { node, index } = *u else { continue };
            let n = self.g.node(node);
            let Some(out) = n.output(0) else { continue };
            let Some(dims) = self.expected_dims_memo(out, depth - 1, memo) else { continue };
            if keeps_shape(n, index, dims.len(), |w| self.types[w.index()].as_ref()) {
                found = Some(dims);
                break;
            }
        }
        memo.insert(v, (depth, found.clone()));
        found
    }

    /// The declared type of `v` with every dimension known (symbols bound).
    fn declared_type(&self, v: ValueId) -> Option<TensorType> {
        let Some(Type::Tensor { elem: Some(elem), shape }) = &self.g.value(v).ty else {
            return None;
        };
        let dims = shape.dims.as_ref()?;
        let dims = dims
            .iter()
            .map(|d| match d {
                Dim::Static(n) => usize::try_from(*n).ok(),
                Dim::Symbolic(s) => self.opts.dims.get(s).copied(),
                Dim::Unknown => None,
            })
            .collect::<Option<Vec<usize>>>()?;
        Some(TensorType::new(*elem, dims))
    }

    /// A declared type (value_info, graph output) must agree with the
    /// inferred one: its element type, and its shape when every dimension
    /// of it is a number. A shape with symbols or unknown dimensions was
    /// written for inputs the exporter could not see: where it disagrees
    /// (a traced output's rank, another input size's value), onnxruntime
    /// runs the model anyway, so it is a warning and the inferred shape
    /// stands.
    fn check_declared(&mut self, node: NodeId, v: ValueId, inferred: &TensorType) {
        let value = self.g.value(v);
        let Some(Type::Tensor { elem, shape }) = &value.ty else { return };
        let wrong_elem = elem.is_some_and(|e| e != inferred.elem);
        let (mut wrong_shape, mut all_static) = (false, true);
        if let Some(dims) = &shape.dims {
            wrong_shape |= dims.len() != inferred.dims.len();
            for (d, &i) in dims.iter().zip(&inferred.dims) {
                match d {
                    Dim::Static(s) => wrong_shape |= *s != i as u64,
                    Dim::Symbolic(s) => {
                        wrong_shape |= self.opts.dims.get(s).is_some_and(|&b| b != i);
                    }
                    Dim::Unknown => {}
                }
            }
            all_static = dims.iter().all(|d| matches!(d, Dim::Static(_)));
        }
        if wrong_elem || wrong_shape {
            let declared = value.ty.as_ref().map(ToString::to_string).unwrap_or_default();
            let message = format!(
                "value '{}' is declared as {declared} but inferred as {inferred}",
                value.name
            );
            if wrong_elem || all_static {
                self.error(Some(node), message);
            } else {
                self.warning(Some(node), format!("{message}; the inferred shape is used"));
            }
        }
    }

    fn check_outputs(&mut self) {
        for &v in &self.g.outputs {
            if self.types[v.index()].is_none()
                && self.errors.is_empty()
                && self.unsupported.is_empty()
            {
                let name = self.g.value(v).name.clone();
                self.error(
                    None,
                    format!("the type of graph output '{name}' could not be inferred"),
                );
            }
        }
    }
}

/// The steps some graph output depends on, in order, and the others.
fn live_steps(g: &Graph, steps: Vec<Step>) -> (Vec<Step>, Vec<Step>) {
    let mut needed = vec![false; g.values().len()];
    for &v in &g.outputs {
        needed[v.index()] = true;
    }
    let mut keep = vec![false; steps.len()];
    for (i, step) in steps.iter().enumerate().rev() {
        let node = g.node(step.node);
        if node.outputs.iter().flatten().any(|v| needed[v.index()]) {
            keep[i] = true;
            for v in node.reads().iter().flatten() {
                needed[v.index()] = true;
            }
        }
    }
    let (live, dead): (Vec<_>, Vec<_>) = steps.into_iter().zip(keep).partition(|(_, k)| *k);
    (live.into_iter().map(|(s, _)| s).collect(), dead.into_iter().map(|(s, _)| s).collect())
}

/// The first way `a` and `b`, two inferences of `g`, differ, if any (the
/// pipeline checks re-inference against inference from scratch with it).
/// Steps are compared by node, kernel properties and the code the kernel
/// emits for placeholder buffers.
pub fn difference(g: &Graph, a: &Inferred, b: &Inferred) -> Option<String> {
    let name = |i: usize| g.values().get(i).map_or("?", |v| v.name.as_str());
    if a.types.len() != b.types.len() || a.constants.len() != b.constants.len() {
        return Some("the number of values differs".to_owned());
    }
    if let Some(i) = (0..a.types.len()).find(|&i| a.types[i] != b.types[i]) {
        return Some(format!(
            "type of '{}': {:?} vs {:?}",
            name(i),
            a.types[i].as_ref().map(ToString::to_string),
            b.types[i].as_ref().map(ToString::to_string)
        ));
    }
    if let Some(i) = (0..a.constants.len()).find(|&i| a.constants[i] != b.constants[i]) {
        return Some(format!("constant of '{}' differs", name(i)));
    }
    if a.steps.len() != b.steps.len() {
        return Some(format!("{} steps vs {}", a.steps.len(), b.steps.len()));
    }
    for (x, y) in a.steps.iter().zip(&b.steps) {
        let node = g.node(x.node);
        let (dx, dy) = (describe(node, &x.lowered), describe(node, &y.lowered));
        if x.node != y.node || dx != dy {
            return Some(format!(
                "step of node {} ({}): {dx} vs {}: {dy}",
                node.label(x.node),
                node.op.op_type,
                g.node(y.node).label(y.node)
            ));
        }
    }
    if a.folded != b.folded {
        return Some(format!("{} nodes folded vs {}", a.folded, b.folded));
    }
    if a.errors != b.errors {
        return Some(format!("errors {:?} vs {:?}", a.errors, b.errors));
    }
    if a.warnings != b.warnings {
        return Some(format!("warnings {:?} vs {:?}", a.warnings, b.warnings));
    }
    if a.unsupported != b.unsupported {
        return Some(format!("unsupported {:?} vs {:?}", a.unsupported, b.unsupported));
    }
    None
}

/// A lowered step of `node` as text: its kernel's properties and the code
/// it emits for placeholder buffers.
fn describe(node: &Node, lowered: &Lowered) -> String {
    use quote::{format_ident, quote};
    let Lowered::Kernel(k) = lowered else { return "alias".to_owned() };
    let reads = node.reads();
    let io = ops::Io {
        inputs: (0..reads.len())
            .map(|i| {
                reads[i].map(|_| {
                    let id = format_ident!("in{}", i);
                    quote!(#id)
                })
            })
            .collect(),
        outputs: (0..node.outputs.len())
            .map(|i| {
                node.outputs[i].map(|_| {
                    let id = format_ident!("out{}", i);
                    quote!(#id)
                })
            })
            .collect(),
        in_place: false,
        scratch: k.scratch().map(|_| quote!(scratch)),
        rt: quote!(rt),
    };
    let reads_input: Vec<bool> = (0..reads.len()).map(|i| k.reads_input(i)).collect();
    format!(
        "in place {:?}, scratch {:?}, data-sized {:?}, reads {reads_input:?}: {}",
        k.in_place(),
        k.scratch().map(|t| t.to_string()),
        k.data_sized(),
        k.emit(&io)
    )
}

/// Whether a tensor of fixed-size elements has more bytes than `usize` can
/// count: such a type must never reach the ops, whose size arithmetic
/// relies on every tensor's byte size fitting.
fn too_large(t: &TensorType) -> bool {
    t.elem.bits().is_some() && t.byte_size().is_none()
}

#[cfg(test)]
mod tests {
    use crate::ir::{Node, TensorType, ValueId};
    use crate::ops::testing::{errors, run, ty, types, unsupported, warnings};

    #[test]
    fn a_declared_shape_that_disagrees_is_a_warning_and_the_inferred_one_stands() {
        // ddddocr's exporter declared its [20, 1, 8210] output as [1, seqlen].
        let a = run(
            17,
            "g (float[2, 3] x) => (float[1, seqlen] y) {
               t = Relu (x)
               axes = Constant <value: tensor = int64[1] {0}> ()
               y = Unsqueeze (t, axes)
             }",
        );
        assert_eq!(types(&a), [ty("float[1, 2, 3]")]);
        assert!(errors(&a).is_empty() && unsupported(&a).is_empty());
        let w = warnings(&a);
        assert!(
            w.len() == 1
                && w[0].starts_with("value 'y' is declared as tensor(float)[1,seqlen] but inferred as float[1, 2, 3]"),
            "{w:?}"
        );
        // A declared element type that disagrees is still an error, and so
        // is a declared shape of numbers only.
        let a = run(17, "g (float[2] x) => (int64[2] y) { y = Relu (x) }");
        assert!(errors(&a)[0].contains("is declared as"), "{:?}", errors(&a));
        let a = run(17, "g (float[2] x) => (float[3] y) { y = Relu (x) }");
        assert!(errors(&a)[0].contains("is declared as"), "{:?}", errors(&a));
        assert!(warnings(&a).is_empty());
    }

    /// `n` is the model's input, so a Range up to it has a run-time length.
    const RANGE: &str = "zero = Constant <value: tensor = float {0}> ()
        one = Constant <value: tensor = float {1}> ()
        half = Constant <value: tensor = float {0.5}> ()
        r = Range (zero, n, one)";

    #[test]
    fn a_declared_output_fixes_a_range_through_shape_keeping_ops() {
        // Mul by a scalar, Cos, an Add of a value inferred after the Range,
        // and a Cast lead from the Range to the declared output.
        let a = run(
            17,
            &format!(
                "g (float n) => (double[6] y) {{ {RANGE}
                a = Mul (r, half) c = Cos (a) s = Mul (a, a) t = Add (c, s)
                y = Cast <to: int = 11> (t) }}"
            ),
        );
        assert_eq!(types(&a), [ty("double[6]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }

    #[test]
    fn an_operand_that_may_stretch_the_value_stops_the_walk() {
        // `w` holds 6 elements: the Range could hold 1 and be broadcast.
        let a = run(
            17,
            &format!("g (float n, float[6] w) => (float[6] y) {{ {RANGE} y = Add (r, w) }}"),
        );
        assert!(
            unsupported(&a)[0].contains("Range's start, limit or delta"),
            "{a:?}",
            a = unsupported(&a)
        );
    }

    #[test]
    fn a_one_element_operand_of_higher_rank_gives_no_dims_of_the_wrong_rank() {
        // r + [[1]] is [1, n]: the declared dims have rank 2, the Range rank 1,
        // so they say nothing about the Range (no error, just unsupported).
        let a = run(
            17,
            &format!("g (float n, float[1, 1] w) => (float[1, 6] y) {{ {RANGE} y = Add (r, w) }}"),
        );
        assert!(
            unsupported(&a)[0].contains("Range's start, limit or delta"),
            "{:?}",
            unsupported(&a)
        );
        // With an operand of the Range's own rank, the dims carry over.
        let a = run(
            17,
            &format!("g (float n, float[1] w) => (float[6] y) {{ {RANGE} y = Add (r, w) }}"),
        );
        assert_eq!(types(&a), [ty("float[6]")]);
    }

    #[test]
    fn the_walk_takes_the_first_use_that_reaches_a_declared_value() {
        // The first use of `r` is blocked (a 6-element operand); the second
        // reaches the declared output `z` through two Negs.
        let a = run(
            17,
            &format!(
                "g (float n, float[6] w) => (float[6] y, float[6] z) {{ {RANGE}
                y = Add (r, w) b = Neg (r) z = Neg (b) }}"
            ),
        );
        assert_eq!(types(&a), [ty("float[6]"), ty("float[6]")]);
    }

    #[test]
    fn the_walk_is_bounded_in_depth() {
        let chain = |len: usize| {
            let mut body = format!("{RANGE} v0 = Neg (r)");
            for i in 1..len {
                body.push_str(&format!(" v{i} = Neg (v{})", i - 1));
            }
            format!("g (float n) => (float[6] v{}) {{ {body} }}", len - 1)
        };
        let a = run(17, &chain(super::EXPECT_DEPTH));
        assert_eq!(types(&a), [ty("float[6]")]);
        let a = run(17, &chain(super::EXPECT_DEPTH + 1));
        assert!(
            unsupported(&a)[0].contains("Range's start, limit or delta"),
            "{:?}",
            unsupported(&a)
        );
    }

    #[test]
    fn the_walk_over_a_wide_lattice_stays_fast() {
        // Every value has four uses, each of which keeps the shape (their
        // other operands are not inferred yet): memoised, each query looks
        // at every value within reach once instead of following 4^depth
        // paths, for every one of the 160 nodes.
        let mut body = format!("{RANGE} a0 = Neg (r) b0 = Neg (r)");
        for i in 1..40 {
            let p = i - 1;
            body.push_str(&format!(
                " a{i} = Mul (a{p}, b{p}) b{i} = Add (b{p}, a{p}) c{i} = Sub (a{p}, b{p}) d{i} = Max (b{p}, a{p})"
            ));
        }
        let a = run(17, &format!("g (float n) => (float[6] b39) {{ {body} }}"));
        // b39 is too far from r; what matters is that the analysis finished.
        assert!(
            unsupported(&a)[0].contains("Range's start, limit or delta"),
            "{:?}",
            unsupported(&a)
        );
    }

    /// A node of `op_type` reading `inputs` values, for [`keeps_shape`].
    fn node(op_type: &str, inputs: usize) -> Node {
        Node {
            name: String::new(),
            op: crate::ir::Op {
                domain: String::new(),
                op_type: op_type.to_owned(),
                overload: String::new(),
                opset_version: 21,
                schema: None,
            },
            inputs: (0..inputs).map(|i| Some(ValueId(i as u32))).collect(),
            outputs: vec![Some(ValueId(99))],
            attributes: Vec::new(),
            doc_string: String::new(),
            lowering: None,
        }
    }

    #[test]
    fn shape_keeping_comes_from_the_rules() {
        use crate::ir::ElemType;
        let unknown = |_: ValueId| None;
        // Unary element-wise ops, including those a hand-kept list missed.
        for op in [
            "Relu",
            "HardSwish",
            "Celu",
            "Mish",
            "Swish",
            "Shrink",
            "ThresholdedRelu",
            "Tan",
            "Atan",
            "Cast",
            "Identity",
            "IsNaN",
            "Not",
            "Clip",
            "PRelu",
        ] {
            assert!(super::keeps_shape(&node(op, 1), 0, 2, unknown), "{op}");
        }
        // Views that change the shape, and ops with another shape rule.
        for op in ["Reshape", "Flatten", "Transpose", "MatMul", "Where", "Concat"] {
            assert!(!super::keeps_shape(&node(op, 2), 0, 2, unknown), "{op}");
        }
        // Element-wise ops of several operands: only when the others hold
        // one element (or are not inferred yet) and do not raise the rank.
        let one = TensorType::new(ElemType::Float, vec![1, 1]);
        let row = TensorType::new(ElemType::Float, vec![1, 4]);
        for op in ["Add", "Less", "And", "Sum", "BitShift"] {
            assert!(super::keeps_shape(&node(op, 2), 0, 2, |_| Some(&one)), "{op}");
            assert!(super::keeps_shape(&node(op, 2), 1, 2, unknown), "{op}");
            assert!(!super::keeps_shape(&node(op, 2), 0, 2, |_| Some(&row)), "{op}");
            assert!(!super::keeps_shape(&node(op, 2), 0, 1, |_| Some(&one)), "{op}");
        }
    }
}
