//! Sequences and optionals fixed at generation time.
//!
//! Generated code holds no heap, so a sequence is a list of separately
//! planned tensors whose length is known when the code is generated. This
//! pass rewrites the main graph before inference: every sequence value
//! becomes the list of the tensor values it holds, and the sequence
//! operators become plain tensor nodes (`SequenceAt` an `Identity`,
//! `ConcatFromSequence` a `Concat`, `SplitToSequence` `Slice`s, ...) or
//! nothing at all (`SequenceConstruct`, `SequenceInsert`, ...).
//!
//! Graph inputs of sequence type need their length and element types from
//! the user ([`IoSpec::sequences`]): input `x` of length K becomes K tensor
//! inputs `x_0`..`x_{K-1}`. An optional input is either present (it is
//! then its element: a tensor input, or a sequence input as above) or
//! absent ([`IoSpec::absent`]: it leaves the signature and reads as a
//! missing input). A sequence graph output `y` becomes the outputs
//! `y_0`..`y_{K-1}`.
//!
//! Bodies that touch sequences are taken apart here too, so that every
//! sequence keeps a length known at generation time:
//! - `SequenceMap` copies its body into the graph once per element, each
//!   copy typed by its own elements (they may differ in shape). Equal
//!   shapes could share one loop, but the copies are plain code and the
//!   total is bounded ([`MAX_SPLICED_NODES`]).
//! - A `Loop` that carries or reads a sequence is unrolled the same way: it
//!   needs a constant trip count, and a condition (given and returned by
//!   the body) that is known at generation time after each iteration. A
//!   loop that grows a sequence a run-time number of times is refused: its
//!   length would depend on the data.
//! - An `If` giving sequences with a condition known now is its taken
//!   branch; otherwise both branches are expanded on their own and the node
//!   gives each element as a separate output. Both must give sequences of
//!   the same length (inference then checks the element types agree).
//!   Captured outer sequences become captures of their elements.
//!
//! Positions known only at run time (`SequenceInsert`, `SequenceErase`,
//! `SequenceAt` with a position that is an input or computed) keep the
//! sequence's length static: it is its capacity, and the positions are
//! checked against it at run time (`Error::InvalidParams`, never out of
//! bounds). Such a sequence becomes its sources and an `int64[len]` map
//! (element `j` is `sources[map[j]]`, see [`Indexed`]): inserting and
//! erasing stay nodes that compute the new map, `SequenceAt` a node that
//! copies the source the map names (`ops::indexing`). Nothing is copied
//! until read; another reader gets every element, one `SequenceAt` per
//! position. When the sources differ in length along one axis, what
//! `SequenceAt` gives is data-sized (see `Kernel::data_sized`): only a
//! graph output may hold it. `SplitToSequence` with a 1-D split known only
//! at run time (of static length K) keeps its node with K data-sized
//! outputs; a single run-time split size makes the number of pieces depend
//! on the data, and stays refused.

use crate::ir::{AttrValue, Attribute, Graph, Node, NodeId, Op, Tensor, TensorType, Type, ValueId};
use crate::ir::{ElemType, ValueKind};
use crate::passes::infer::Unsupported;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the user fixes about sequence and optional graph inputs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IoSpec {
    /// Per sequence input (or optional input holding a sequence): the type
    /// of each element, in order. The length is the number of elements.
    pub sequences: BTreeMap<String, Vec<TensorType>>,
    /// Optional inputs that are absent (the others are present).
    pub absent: BTreeSet<String>,
}

impl IoSpec {
    /// Whether nothing is fixed.
    pub fn is_empty(&self) -> bool {
        self.sequences.is_empty() && self.absent.is_empty()
    }
}

/// What a graph input or output holds, as its declared type says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub enum Form {
    Tensor,
    Sequence,
    OptionalTensor,
    OptionalSequence,
}

impl Form {
    /// The form of a declared type (a tensor when undeclared).
    pub fn of(ty: Option<&Type>) -> Form {
        match ty {
            Some(Type::Sequence(_)) => Form::Sequence,
            Some(Type::Optional(inner)) => match **inner {
                Type::Sequence(_) => Form::OptionalSequence,
                _ => Form::OptionalTensor,
            },
            _ => Form::Tensor,
        }
    }
}

/// A graph output as the model declares it, and how many of the tensor
/// outputs of the generated code hold it (in order): one for a tensor, the
/// length for a sequence (its elements), none for an absent optional.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct OutputGroup {
    pub name: String,
    pub form: Form,
    pub count: usize,
}

/// What [`expand`] did: its refusals, and the graph outputs as declared.
pub struct Expanded {
    /// What cannot be rewritten, left for inference to refuse.
    pub unsupported: Vec<Unsupported>,
    /// Per graph output of the model, the generated outputs that hold it.
    pub outputs: Vec<OutputGroup>,
}

/// Rewrites the sequences and optionals of `g` (see the module doc).
pub fn expand(g: &mut Graph, spec: &IoSpec) -> Expanded {
    let mut x = Expander::default();
    x.inputs(g, spec);
    x.nodes(g);
    for v in g.outputs.clone() {
        // `add_node` has put the new nodes at the end of the order already.
        x.materialize(g, v, &mut Vec::new());
    }
    let outputs = g
        .outputs
        .iter()
        .map(|v| OutputGroup {
            name: g.value(*v).name.clone(),
            form: Form::of(g.value(*v).ty.as_ref()),
            count: x.seqs.get(v).map_or(1, Vec::len),
        })
        .collect();
    x.outputs(g);
    Expanded { unsupported: x.unsupported, outputs }
}

/// How many nodes unrolling loops and maps may add to one model, in all.
const MAX_SPLICED_NODES: usize = 100_000;

#[derive(Default)]
struct Expander {
    seqs: HashMap<ValueId, Vec<ValueId>>,
    unsupported: Vec<Unsupported>,
    /// Nodes added so far by splicing bodies (shared with nested expanders).
    spliced: usize,
    /// Elements that become graph outputs as they are, without an
    /// `Identity`: data-sized values, which only a graph output may hold.
    direct: BTreeSet<ValueId>,
    /// Sequences whose order depends on positions known only at run time.
    indexed: HashMap<ValueId, Indexed>,
}

/// A sequence of static length whose elements are picked at run time:
/// element `j` is `sources[map[j]]`, where `map` is an `int64[len]` value
/// that the nodes inserting and erasing at run-time positions compute.
/// The elements are not copied until something reads them (`SequenceAt`,
/// or any other consumer, which reads them all).
#[derive(Clone, Debug)]
struct Indexed {
    sources: Vec<ValueId>,
    map: ValueId,
    len: usize,
}

fn is_sequence(ty: Option<&Type>) -> bool {
    match ty {
        Some(Type::Sequence(_)) => true,
        Some(Type::Optional(inner)) => matches!(**inner, Type::Sequence(_)),
        _ => false,
    }
}

fn tensor_type(t: &TensorType) -> Type {
    let dims: Vec<u64> = t.dims.iter().map(|&d| d as u64).collect();
    Type::tensor(t.elem, &dims)
}

/// A name not yet used in `g`, from `base`.
pub(crate) fn fresh(g: &Graph, base: String) -> String {
    if g.value_by_name(&base).is_none() {
        return base;
    }
    (1..).map(|k| format!("{base}_{k}")).find(|n| g.value_by_name(n).is_none()).unwrap_or(base)
}

fn op(g_opset: i64, op_type: &str) -> Op {
    Op {
        domain: String::new(),
        op_type: op_type.to_owned(),
        overload: String::new(),
        opset_version: g_opset,
        schema: crate::ops::schema("", op_type, g_opset),
    }
}

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute { name: name.to_owned(), value, doc_string: String::new() }
}

/// The integers of `v` when it is known before inference: an initializer
/// or the output of a `Constant` node with a tensor `value`.
fn const_ints(g: &Graph, v: ValueId) -> Option<Vec<i64>> {
    let value = g.value(v);
    if let Some(t) = value.constant() {
        return t.to_i64s();
    }
    let ValueKind::NodeOutput { node, .. } = value.kind else { return None };
    let n = g.node(node);
    if !n.op.is("Constant") {
        return None;
    }
    match n.attr("value") {
        Some(AttrValue::Tensor(t)) => t.to_i64s(),
        _ => None,
    }
}

/// Adds an (Un)Squeeze node `op` of `input` on one `axis`: the axes as an
/// initializer named after `axes_name` from opset 13 on, as an attribute
/// before. Its output is named after `output_name`; the node is not ordered.
fn add_axis_node(
    g: &mut Graph,
    op: Op,
    input: ValueId,
    axis: i64,
    axes_name: String,
    output_name: String,
) -> NodeId {
    let mut node = Node {
        name: String::new(),
        op,
        inputs: vec![Some(input)],
        outputs: Vec::new(),
        attributes: Vec::new(),
        doc_string: String::new(),
        lowering: None,
    };
    if node.op.since_version() >= 13 {
        let name = fresh(g, axes_name);
        let axes = g.add_initializer(name, Tensor::from_i64s("axes", vec![1], &[axis]));
        node.inputs.push(Some(axes));
    } else {
        node.attributes.push(attr("axes", AttrValue::Ints(vec![axis])));
    }
    let name = fresh(g, output_name);
    g.add_node(node, &[Some(name)])
}

impl Expander {
    fn refuse(&mut self, g: &Graph, id: Option<NodeId>, reason: String) {
        let (node, op_type) = match id {
            Some(id) => {
                let n = g.node(id);
                (n.label(id), n.op.op_type.clone())
            }
            None => (String::new(), String::new()),
        };
        self.unsupported.push(Unsupported { node, op_type, domain: String::new(), reason });
    }

    fn inputs(&mut self, g: &mut Graph, spec: &IoSpec) {
        let old = g.inputs.clone();
        let mut inputs = Vec::with_capacity(old.len());
        for v in old {
            let value = g.value(v).clone();
            if let Some(Type::Optional(inner)) = &value.ty {
                if spec.absent.contains(&value.name) {
                    for n in g.nodes().map(|(id, _)| id).collect::<Vec<_>>() {
                        for i in &mut g.node_mut(n).inputs {
                            if *i == Some(v) {
                                *i = None;
                            }
                        }
                    }
                    g.value_mut(v).kind =
                        ValueKind::NodeOutput { node: NodeId(u32::MAX), index: 0 };
                    continue;
                }
                if !matches!(**inner, Type::Sequence(_)) {
                    g.value_mut(v).ty = Some((**inner).clone());
                    inputs.push(v);
                    continue;
                }
            }
            if !is_sequence(value.ty.as_ref()) {
                inputs.push(v);
                continue;
            }
            let Some(elems) = spec.sequences.get(&value.name) else {
                inputs.push(v);
                continue;
            };
            let mut list = Vec::with_capacity(elems.len());
            for (k, t) in elems.iter().enumerate() {
                let name = fresh(g, format!("{}_{k}", value.name));
                let id = g.add_input(name, Some(tensor_type(t)));
                g.inputs.pop();
                inputs.push(id);
                list.push(id);
            }
            g.value_mut(v).kind = ValueKind::NodeOutput { node: NodeId(u32::MAX), index: 0 };
            self.seqs.insert(v, list);
        }
        g.inputs = inputs;
    }

    /// Expands the nodes of `g` in order.
    fn nodes(&mut self, g: &mut Graph) {
        let order: Vec<NodeId> = g.order().to_vec();
        let mut new_order = Vec::with_capacity(order.len());
        for id in order {
            self.node(g, id, &mut new_order);
        }
        g.set_order(new_order);
    }

    /// Spreads sequence outputs of `g` into their elements; per original
    /// output, the length of the sequence it was (`None` for a tensor).
    fn outputs(&mut self, g: &mut Graph) -> Vec<Option<usize>> {
        let old = g.outputs.clone();
        let mut outputs = Vec::with_capacity(old.len());
        let mut lengths = Vec::with_capacity(old.len());
        let opset = g.order().first().map_or(17, |&id| g.node(id).op.opset_version);
        for v in old {
            let Some(list) = self.seqs.get(&v).cloned() else {
                outputs.push(v);
                lengths.push(None);
                continue;
            };
            lengths.push(Some(list.len()));
            let base = g.value(v).name.clone();
            for (k, e) in list.into_iter().enumerate() {
                if self.direct.contains(&e) && !outputs.contains(&e) {
                    outputs.push(e);
                    continue;
                }
                let name = fresh(g, format!("{base}_{k}"));
                let node = Node {
                    name: String::new(),
                    op: op(opset, "Identity"),
                    inputs: vec![Some(e)],
                    outputs: Vec::new(),
                    attributes: Vec::new(),
                    doc_string: String::new(),
                    lowering: None,
                };
                let id = g.add_node(node, &[Some(name)]);
                if let Some(Some(out)) = g.node(id).outputs.first() {
                    outputs.push(*out);
                }
            }
        }
        g.outputs = outputs;
        lengths
    }

    fn seq_input(&self, g: &Graph, id: NodeId, i: usize) -> Option<Vec<ValueId>> {
        g.node(id).input(i).and_then(|v| self.seqs.get(&v).cloned())
    }

    fn set_output_seq(&mut self, g: &Graph, id: NodeId, list: Vec<ValueId>) {
        if let Some(v) = g.node(id).output(0) {
            self.seqs.insert(v, list);
        }
    }

    /// A position input: `None` when absent, `Err` when not known now.
    fn position(
        &self,
        g: &Graph,
        id: NodeId,
        i: usize,
        len: usize,
    ) -> Result<Option<usize>, String> {
        let Some(v) = g.node(id).input(i) else { return Ok(None) };
        let Some(p) = const_ints(g, v).and_then(|p| p.first().copied()) else {
            return Err(format!(
                "the position '{}' is not known at generation time; sequences are lists of \
                 tensors fixed when the code is generated",
                g.value(v).name
            ));
        };
        let n = i64::try_from(len).unwrap_or(i64::MAX);
        let q = if p < 0 { p + n } else { p };
        usize::try_from(q).map(Some).map_err(|_| format!("position {p} is out of range"))
    }

    fn node(&mut self, g: &mut Graph, id: NodeId, order: &mut Vec<NodeId>) {
        let n = g.node(id).clone();
        let positional = n.op.domain.is_empty()
            && matches!(
                n.op.op_type.as_str(),
                "SequenceInsert" | "SequenceErase" | "SequenceAt" | "SequenceLength" | "Identity"
            );
        if positional && n.input(0).is_some_and(|v| self.indexed.contains_key(&v)) {
            match self.indexed_node(g, id, order) {
                Ok(true) => order.push(id),
                Ok(false) => {}
                Err(reason) => {
                    self.refuse(g, Some(id), reason);
                    order.push(id);
                }
            }
            return;
        }
        if positional && self.runtime_position(g, &n).is_some() {
            let Some(list) = self.seq_input(g, id, 0) else {
                self.refuse(g, Some(id), "its sequence is not known".to_owned());
                order.push(id);
                return;
            };
            let seq = n.input(0).unwrap_or(ValueId(u32::MAX));
            self.seqs.remove(&seq);
            let len = list.len();
            let base = g.value(seq).name.clone();
            let map = self.index_constant(g, &base, &(0..len as i64).collect::<Vec<_>>());
            self.indexed.insert(seq, Indexed { sources: list, map, len });
            self.node(g, id, order);
            return;
        }
        for v in n.reads().into_iter().flatten() {
            self.materialize(g, v, order);
        }
        let reads_seq = n.inputs.iter().flatten().any(|v| self.seqs.contains_key(v));
        let opset = n.op.opset_version;
        if !n.op.domain.is_empty() {
            order.push(id);
            return;
        }
        let result: Result<bool, String> = match n.op.op_type.as_str() {
            "SequenceConstruct" => {
                self.set_output_seq(g, id, n.inputs.iter().flatten().copied().collect());
                Ok(false)
            }
            "SequenceEmpty" => {
                self.set_output_seq(g, id, Vec::new());
                Ok(false)
            }
            "Identity" | "Optional" | "OptionalGetElement" if reads_seq => {
                let list = self.seq_input(g, id, 0).unwrap_or_default();
                self.set_output_seq(g, id, list);
                Ok(false)
            }
            "OptionalHasElement" if reads_seq => {
                self.make_constant(g, id, bool_tensor(true));
                Ok(true)
            }
            "SequenceInsert" => self.insert(g, id),
            "SequenceErase" => self.erase(g, id),
            "SequenceAt" => self.at(g, id),
            "SequenceLength" => match self.seq_input(g, id, 0) {
                Some(list) => {
                    let len = i64::try_from(list.len()).unwrap_or(i64::MAX);
                    self.make_constant(g, id, Tensor::from_i64s("length", Vec::new(), &[len]));
                    Ok(true)
                }
                None => Err("its sequence is not known at generation time".to_owned()),
            },
            "ConcatFromSequence" => self.concat(g, id, opset, order),
            "SplitToSequence" => self.split(g, id, opset, order),
            "SequenceMap" => self.map(g, id, order),
            "Loop" if reads_seq || self.captures_seq(&n) => self.unroll(g, id, order),
            "If" if self.if_has_seq(&n) => self.branch(g, id, order),
            _ if self.captures_seq(&n) => Err(format!(
                "{} with a body that uses a sequence is not supported yet",
                n.op.op_type
            )),
            _ if reads_seq => Err(format!(
                "{} on a sequence is not supported yet (sequences are lists of tensors fixed \
                 at generation time)",
                n.op.op_type
            )),
            _ => Ok(true),
        };
        match result {
            Ok(true) => order.push(id),
            Ok(false) => {}
            Err(reason) => {
                self.refuse(g, Some(id), reason);
                order.push(id);
            }
        }
    }

    fn make_constant(&self, g: &mut Graph, id: NodeId, t: Tensor) {
        let opset = g.node(id).op.opset_version;
        let node = g.node_mut(id);
        node.op = op(opset, "Constant");
        node.inputs.clear();
        node.attributes = vec![attr("value", AttrValue::Tensor(t))];
    }

    fn insert(&mut self, g: &mut Graph, id: NodeId) -> Result<bool, String> {
        let mut list = self.seq_input(g, id, 0).ok_or("its sequence is not known")?;
        let t = g.node(id).input(1).ok_or("SequenceInsert needs a tensor")?;
        let at = self.position(g, id, 2, list.len())?.unwrap_or(list.len());
        if at > list.len() {
            return Err(format!("position {at} is past the end of a sequence of {}", list.len()));
        }
        list.insert(at, t);
        self.set_output_seq(g, id, list);
        Ok(false)
    }

    fn erase(&mut self, g: &mut Graph, id: NodeId) -> Result<bool, String> {
        let mut list = self.seq_input(g, id, 0).ok_or("its sequence is not known")?;
        if list.is_empty() {
            return Err("SequenceErase on an empty sequence".to_owned());
        }
        let at = self.position(g, id, 1, list.len())?.unwrap_or(list.len() - 1);
        if at >= list.len() {
            return Err(format!("position {at} is out of a sequence of {}", list.len()));
        }
        list.remove(at);
        self.set_output_seq(g, id, list);
        Ok(false)
    }

    fn at(&mut self, g: &mut Graph, id: NodeId) -> Result<bool, String> {
        let list = self.seq_input(g, id, 0).ok_or("its sequence is not known")?;
        let at = self.position(g, id, 1, list.len())?.ok_or("SequenceAt needs a position")?;
        let elem = *list
            .get(at)
            .ok_or_else(|| format!("position {at} is out of a sequence of {}", list.len()))?;
        let opset = g.node(id).op.opset_version;
        let node = g.node_mut(id);
        node.op = op(opset, "Identity");
        node.inputs = vec![Some(elem)];
        node.attributes.clear();
        Ok(true)
    }

    fn concat(
        &mut self,
        g: &mut Graph,
        id: NodeId,
        opset: i64,
        order: &mut Vec<NodeId>,
    ) -> Result<bool, String> {
        let list = self.seq_input(g, id, 0).ok_or("its sequence is not known")?;
        if list.is_empty() {
            return Err("ConcatFromSequence of an empty sequence has no type".to_owned());
        }
        let n = g.node(id).clone();
        let axis = n.attr_int("axis").ok_or("ConcatFromSequence needs 'axis'")?;
        let new_axis = n.attr_int("new_axis").unwrap_or(0) != 0;
        let mut inputs = Vec::with_capacity(list.len());
        for (k, e) in list.into_iter().enumerate() {
            if !new_axis {
                inputs.push(Some(e));
                continue;
            }
            let base = g.value(e).name.clone();
            let uid = add_axis_node(
                g,
                op(opset, "Unsqueeze"),
                e,
                axis,
                format!("{base}_seq_axes{k}"),
                format!("{base}_seq_unsqueezed{k}"),
            );
            order.push(uid);
            inputs.push(g.node(uid).output(0));
        }
        let node = g.node_mut(id);
        node.op = op(opset, "Concat");
        node.inputs = inputs;
        node.attributes = vec![attr("axis", AttrValue::Int(axis))];
        Ok(true)
    }

    fn split(
        &mut self,
        g: &mut Graph,
        id: NodeId,
        opset: i64,
        order: &mut Vec<NodeId>,
    ) -> Result<bool, String> {
        let n = g.node(id).clone();
        let x = n.input(0).ok_or("SplitToSequence needs an input")?;
        if let Some(split) = n.input(1)
            && const_ints(g, split).is_none()
        {
            // The number of pieces is the split's declared length, whatever
            // the input's shape.
            return self.split_at_run_time(g, id, split);
        }
        let dims = match &g.value(x).ty {
            Some(Type::Tensor { shape, .. }) => shape.dims.as_ref().and_then(|d| {
                d.iter()
                    .map(|d| match d {
                        crate::ir::Dim::Static(s) => Some(*s),
                        _ => None,
                    })
                    .collect::<Option<Vec<u64>>>()
            }),
            _ => None,
        }
        .ok_or(
            "the input's shape must be declared and static: the number of pieces is fixed \
             at generation time",
        )?;
        let rank = i64::try_from(dims.len()).unwrap_or(i64::MAX);
        let axis = n.attr_int("axis").unwrap_or(0);
        let a = if axis < 0 { axis + rank } else { axis };
        let len = usize::try_from(a)
            .ok()
            .and_then(|a| dims.get(a))
            .copied()
            .ok_or_else(|| format!("axis {axis} is out of range for rank {rank}"))?;
        let len = i64::try_from(len).map_err(|_| "the split axis is too long".to_owned())?;
        let keepdims = n.attr_int("keepdims").unwrap_or(1) != 0;
        let (sizes, squeeze) = match n.input(1) {
            None => ((0..len).map(|_| 1).collect::<Vec<i64>>(), !keepdims),
            Some(s) => {
                let Some(split) = const_ints(g, s) else {
                    return self.split_at_run_time(g, id, s);
                };
                if Self::is_scalar_constant(g, s) {
                    let step = *split.first().ok_or("empty split")?;
                    if step <= 0 {
                        return Err(format!("split {step} must be positive"));
                    }
                    let mut sizes = Vec::new();
                    let mut left = len;
                    while left > 0 {
                        sizes.push(step.min(left));
                        left -= step.min(left);
                    }
                    (sizes, false)
                } else {
                    if split.iter().any(|&s| s < 0) || split.iter().sum::<i64>() != len {
                        return Err(format!("split {split:?} does not add up to {len}"));
                    }
                    (split, false)
                }
            }
        };
        if sizes.len() > 4096 {
            return Err(format!("{} pieces are more than this compiler unrolls", sizes.len()));
        }
        let base = g.value(n.output(0).ok_or("SplitToSequence needs an output")?).name.clone();
        let mut list = Vec::with_capacity(sizes.len());
        let mut start = 0i64;
        for (k, size) in sizes.into_iter().enumerate() {
            let mut consts = Vec::new();
            for (what, v) in [("starts", start), ("ends", start + size), ("axes", a)] {
                let name = fresh(g, format!("{base}_{what}{k}"));
                consts.push(Some(g.add_initializer(name, Tensor::from_i64s(what, vec![1], &[v]))));
            }
            start += size;
            let mut inputs = vec![Some(x)];
            inputs.extend(consts);
            let slice = Node {
                name: String::new(),
                op: op(opset, "Slice"),
                inputs,
                outputs: Vec::new(),
                attributes: Vec::new(),
                doc_string: String::new(),
                lowering: None,
            };
            let name = fresh(g, format!("{base}_{k}"));
            let sid = g.add_node(slice, &[Some(name)]);
            order.push(sid);
            let mut piece = g.node(sid).output(0);
            if squeeze && let Some(p) = piece {
                let qid = add_axis_node(
                    g,
                    op(opset, "Squeeze"),
                    p,
                    a,
                    format!("{base}_squeeze_axes{k}"),
                    format!("{base}_squeezed{k}"),
                );
                order.push(qid);
                piece = g.node(qid).output(0);
            }
            list.extend(piece);
        }
        self.set_output_seq(g, id, list);
        Ok(false)
    }

    /// SplitToSequence whose sizes come at run time: with a 1-D split of
    /// declared length K, the node stays and gets K outputs, the pieces,
    /// whose lengths along the axis are data-sized (see `ops::indexing`).
    /// A single size makes the number of pieces depend on the data.
    fn split_at_run_time(&mut self, g: &mut Graph, id: NodeId, s: ValueId) -> Result<bool, String> {
        let pieces = match &g.value(s).ty {
            Some(Type::Tensor { shape, .. }) => match shape.dims.as_deref() {
                Some([crate::ir::Dim::Static(k)]) => usize::try_from(*k).ok(),
                _ => None,
            },
            _ => None,
        };
        let Some(pieces) = pieces.filter(|&k| k <= 4096) else {
            return Err(format!(
                "the split '{}' is not known at generation time and is not declared as a 1-D \
                 tensor of static length, so the number of pieces is not known either",
                g.value(s).name
            ));
        };
        let out = g.node(id).output(0).ok_or("SplitToSequence needs an output")?;
        let base = g.value(out).name.clone();
        let mut list = Vec::with_capacity(pieces);
        for k in 0..pieces {
            let v = g.add_value(crate::ir::Value {
                name: fresh(g, format!("{base}_{k}")),
                ty: None,
                kind: ValueKind::NodeOutput { node: id, index: k },
                doc_string: String::new(),
            });
            list.push(Some(v));
            self.direct.insert(v);
        }
        self.seqs.insert(out, list.iter().flatten().copied().collect());
        g.node_mut(id).outputs = list;
        Ok(true)
    }

    /// The position input of a sequence operator when it is known only at
    /// run time.
    fn runtime_position(&self, g: &Graph, n: &Node) -> Option<ValueId> {
        let i = match n.op.op_type.as_str() {
            "SequenceInsert" => 2,
            "SequenceErase" | "SequenceAt" => 1,
            _ => return None,
        };
        n.input(i).filter(|&p| const_ints(g, p).is_none())
    }

    /// A new `int64[len]` constant (a sequence's map).
    fn index_constant(&self, g: &mut Graph, base: &str, values: &[i64]) -> ValueId {
        let name = fresh(g, format!("{base}_map"));
        g.add_initializer(name, Tensor::from_i64s("map", vec![values.len() as u64], values))
    }

    /// A node reading a sequence of run-time order (see [`Indexed`]):
    /// inserting, erasing or reading at a position (run-time or not)
    /// becomes a node of `ops::indexing` on the map; the length is known.
    fn indexed_node(
        &mut self,
        g: &mut Graph,
        id: NodeId,
        order: &mut Vec<NodeId>,
    ) -> Result<bool, String> {
        let n = g.node(id).clone();
        let seq =
            self.indexed.get(&n.input(0).ok_or("no sequence")?).cloned().ok_or("no sequence")?;
        let out = n.output(0);
        let base = out.map_or_else(|| "seq".to_owned(), |v| g.value(v).name.clone());
        let opset = n.op.opset_version;
        // Where the map is read: (map, position) as the node's first inputs.
        let position = |i: usize| n.input(i);
        match n.op.op_type.as_str() {
            "Identity" => {
                if let Some(v) = out {
                    self.indexed.insert(v, seq);
                }
                Ok(false)
            }
            "SequenceLength" => {
                let len = i64::try_from(seq.len).unwrap_or(i64::MAX);
                self.make_constant(g, id, Tensor::from_i64s("length", Vec::new(), &[len]));
                Ok(true)
            }
            "SequenceAt" => {
                let p = position(1).ok_or("SequenceAt needs a position")?;
                let mut inputs = vec![Some(seq.map), Some(p)];
                inputs.extend(seq.sources.iter().map(|&s| Some(s)));
                let node = g.node_mut(id);
                node.inputs = inputs;
                if out.is_some_and(|v| g.outputs.contains(&v)) {
                    // A graph output may be data-sized: no Identity after it.
                    self.direct.extend(out);
                }
                Ok(true)
            }
            "SequenceInsert" | "SequenceErase" => {
                let insert = n.op.op_type == "SequenceInsert";
                let mut sources = seq.sources.clone();
                let mut inputs = vec![Some(seq.map)];
                let len = if insert {
                    let t = n.input(1).ok_or("SequenceInsert needs a tensor")?;
                    sources.push(t);
                    // The position (absent: the end), then the new source's index.
                    let p = match position(2) {
                        Some(p) => p,
                        None => self.index_constant(g, &base, &[seq.len as i64]),
                    };
                    let k = sources.len() as i64 - 1;
                    let index = fresh(g, format!("{base}_source"));
                    let index =
                        g.add_initializer(index, Tensor::from_i64s("source", Vec::new(), &[k]));
                    inputs.extend([Some(p), Some(index)]);
                    seq.len + 1
                } else {
                    if seq.len == 0 {
                        return Err("SequenceErase on an empty sequence".to_owned());
                    }
                    let p = match position(1) {
                        Some(p) => p,
                        None => self.index_constant(g, &base, &[-1]),
                    };
                    inputs.push(Some(p));
                    seq.len - 1
                };
                let map_name = fresh(g, format!("{base}_map"));
                let mut node = plain(opset, &n.op.op_type, inputs);
                node.name = n.name.clone();
                let nid = g.add_node(node, &[Some(map_name)]);
                order.push(nid);
                let map = g.node(nid).output(0).ok_or("no map")?;
                if let Some(v) = out {
                    self.indexed.insert(v, Indexed { sources, map, len });
                }
                Ok(false)
            }
            other => Err(format!("{other} of a sequence whose order is known only at run time")),
        }
    }

    /// Gives a sequence of run-time order (see [`Indexed`]) its elements:
    /// one `SequenceAt` per position, each picking its source at run time.
    fn materialize(&mut self, g: &mut Graph, v: ValueId, order: &mut Vec<NodeId>) {
        let Some(seq) = self.indexed.remove(&v) else { return };
        let base = g.value(v).name.clone();
        let opset = g.order().first().map_or(17, |&id| g.node(id).op.opset_version);
        let mut list = Vec::with_capacity(seq.len);
        for j in 0..seq.len {
            let name = fresh(g, format!("{base}_at{j}"));
            let p = g.add_initializer(name, Tensor::from_i64s("position", Vec::new(), &[j as i64]));
            let mut inputs = vec![Some(seq.map), Some(p)];
            inputs.extend(seq.sources.iter().map(|&s| Some(s)));
            let name = fresh(g, format!("{base}_{j}"));
            let nid = g.add_node(plain(opset, "SequenceAt", inputs), &[Some(name)]);
            order.push(nid);
            if let Some(e) = g.node(nid).output(0) {
                self.direct.insert(e);
                list.push(e);
            }
        }
        self.seqs.insert(v, list);
    }

    /// Whether `v` is a constant of rank 0 (a `split` given as one size).
    fn is_scalar_constant(g: &Graph, v: ValueId) -> bool {
        if let Some(t) = g.value(v).constant() {
            return t.dims.is_empty();
        }
        let ValueKind::NodeOutput { node, .. } = g.value(v).kind else { return false };
        matches!(g.node(node).attr("value"), Some(AttrValue::Tensor(t)) if t.dims.is_empty())
    }
}

/// A node of `op_type` with `inputs` and no attributes.
fn plain(opset: i64, op_type: &str, inputs: Vec<Option<ValueId>>) -> Node {
    Node {
        name: String::new(),
        op: op(opset, op_type),
        inputs,
        outputs: Vec::new(),
        attributes: Vec::new(),
        doc_string: String::new(),
        lowering: None,
    }
}

/// The boolean `v` holds when it is known now: a constant, or an
/// `Identity` chain from one.
fn known_bool(g: &Graph, v: ValueId) -> Option<bool> {
    let mut v = v;
    for _ in 0..64 {
        if let Some(b) = const_ints(g, v).and_then(|b| b.first().copied()) {
            return Some(b != 0);
        }
        let ValueKind::NodeOutput { node, .. } = g.value(v).kind else { return None };
        let n = g.node(node);
        if !n.op.is("Identity") {
            return None;
        }
        v = n.input(0)?;
    }
    None
}

/// The first graph attribute `name` of `n`.
fn body_of(n: &Node, name: &str) -> Result<Graph, String> {
    n.attr(name)
        .and_then(|a| a.graphs().first())
        .cloned()
        .ok_or_else(|| format!("{} needs the graph attribute '{name}'", n.op.op_type))
}

/// Copies the nodes of `body` (a subgraph of a node of `g`) to the end of
/// `g`, its graph inputs bound to `inputs` and its captures to the values
/// they capture; values get fresh names starting with `tag`. Returns the
/// new nodes, in order, and the values of the body's outputs.
fn splice(
    g: &mut Graph,
    body: &Graph,
    inputs: &[Option<ValueId>],
    tag: &str,
) -> Result<(Vec<NodeId>, Vec<Option<ValueId>>), String> {
    let mut map: Vec<Option<ValueId>> = vec![None; body.values().len()];
    for (k, &v) in body.inputs.iter().enumerate() {
        if let Some(slot) = map.get_mut(v.index()) {
            *slot = inputs.get(k).copied().flatten();
        }
    }
    for (i, v) in body.values().iter().enumerate() {
        let bound = match &v.kind {
            ValueKind::Captured { outer } => Some(*outer),
            ValueKind::Initializer(t) => {
                Some(g.add_initializer(fresh(g, format!("{tag}{}", v.name)), t.clone()))
            }
            ValueKind::SparseInitializer(_) => {
                return Err(format!(
                    "the body '{}' holds a sparse initializer, which cannot be unrolled yet",
                    body.name
                ));
            }
            _ => continue,
        };
        if let Some(slot) = map.get_mut(i) {
            *slot = bound;
        }
    }
    let at = |map: &[Option<ValueId>], v: ValueId| map.get(v.index()).copied().flatten();
    let mut nodes = Vec::with_capacity(body.node_count());
    for (_, bn) in body.nodes() {
        let mut copy = bn.clone();
        copy.inputs = bn.inputs.iter().map(|i| i.and_then(|v| at(&map, v))).collect();
        for a in &mut copy.attributes {
            for sub in a.value.graphs_mut() {
                for c in sub.captures.clone() {
                    if let ValueKind::Captured { outer } = &mut sub.value_mut(c).kind {
                        *outer = at(&map, *outer).ok_or_else(|| {
                            format!("a subgraph in the body '{}' uses an absent value", body.name)
                        })?;
                    }
                }
            }
        }
        let names: Vec<Option<String>> = bn
            .outputs
            .iter()
            .map(|o| o.map(|o| fresh(g, format!("{tag}{}", body.value(o).name))))
            .collect();
        let id = g.add_node(copy, &names);
        for (o, &n) in bn.outputs.iter().zip(&g.node(id).outputs) {
            if let (Some(o), Some(slot)) = (o, o.and_then(|o| map.get_mut(o.index()))) {
                let _ = o;
                *slot = n;
            }
        }
        nodes.push(id);
    }
    let outputs = body.outputs.iter().map(|&v| at(&map, v)).collect();
    Ok((nodes, outputs))
}

impl Expander {
    /// Whether a subgraph of `n` captures a sequence.
    fn captures_seq(&self, n: &Node) -> bool {
        n.subgraphs().any(|sub| {
            sub.captures.iter().any(|&c| {
                matches!(sub.value(c).kind, ValueKind::Captured { outer } if self.seqs.contains_key(&outer))
            })
        })
    }

    /// Whether an `If` gives or uses sequences (or optionals).
    fn if_has_seq(&self, n: &Node) -> bool {
        self.captures_seq(n)
            || n.subgraphs().any(|sub| {
                sub.outputs.iter().any(|&o| {
                    matches!(sub.value(o).ty, Some(Type::Sequence(_) | Type::Optional(_)))
                })
            })
    }

    /// Copies `body` into `g` (see [`splice`]) and expands the copied nodes.
    fn inline(
        &mut self,
        g: &mut Graph,
        body: &Graph,
        inputs: &[Option<ValueId>],
        tag: &str,
        order: &mut Vec<NodeId>,
    ) -> Result<Vec<Option<ValueId>>, String> {
        // An empty body still counts: it adds values per copy.
        self.spliced = self.spliced.saturating_add(body.node_count().max(1));
        if self.spliced > MAX_SPLICED_NODES {
            return Err(format!(
                "unrolling would add more than {MAX_SPLICED_NODES} nodes to the model"
            ));
        }
        let (nodes, outputs) = splice(g, body, inputs, tag)?;
        for id in nodes {
            self.node(g, id, order);
        }
        Ok(outputs)
    }

    /// Makes the node output `old` the value `src`: an `Identity` takes its
    /// place and its name, and every use of `old` reads it.
    fn forward(&self, g: &mut Graph, old: ValueId, src: ValueId, order: &mut Vec<NodeId>) {
        let name = g.value(old).name.clone();
        let opset = g.order().first().map_or(17, |&id| g.node(id).op.opset_version);
        let tmp = fresh(g, format!("{name}_unrolled"));
        let id = g.add_node(plain(opset, "Identity", vec![Some(src)]), &[Some(tmp)]);
        order.push(id);
        let Some(new) = g.node(id).output(0) else { return };
        g.replace_uses(old, new);
        let gone = fresh(g, format!("{name}_replaced"));
        g.rename_value(old, gone);
        g.rename_value(new, name);
        g.value_mut(new).ty = g.value(old).ty.clone();
    }

    /// Binds `out` to `src`: the same list when `src` is a sequence.
    fn bind_output(&mut self, g: &mut Graph, out: ValueId, src: ValueId, order: &mut Vec<NodeId>) {
        match self.seqs.get(&src).cloned() {
            Some(list) => {
                self.seqs.insert(out, list);
            }
            None => self.forward(g, out, src, order),
        }
    }

    /// `SequenceMap`: the body once per element, each copy with the types
    /// of its own elements (elements may differ in shape).
    fn map(&mut self, g: &mut Graph, id: NodeId, order: &mut Vec<NodeId>) -> Result<bool, String> {
        let n = g.node(id).clone();
        let body = body_of(&n, "body")?;
        let lists: Vec<Option<Vec<ValueId>>> =
            n.inputs.iter().map(|v| v.and_then(|v| self.seqs.get(&v).cloned())).collect();
        let len = match lists.first() {
            Some(Some(l)) => l.len(),
            _ => return Err("its first input is not a sequence known at generation time".into()),
        };
        if let Some(l) = lists.iter().flatten().find(|l| l.len() != len) {
            return Err(format!(
                "its input sequences have different lengths ({len} and {})",
                l.len()
            ));
        }
        if body.inputs.len() != n.inputs.len() || body.outputs.len() != n.outputs.len() {
            return Err(format!(
                "the body has {} inputs and {} outputs; the node has {} and {}",
                body.inputs.len(),
                body.outputs.len(),
                n.inputs.len(),
                n.outputs.len()
            ));
        }
        let base = n.output(0).map_or_else(String::new, |v| g.value(v).name.clone());
        let mut results: Vec<Vec<ValueId>> = vec![Vec::with_capacity(len); n.outputs.len()];
        for k in 0..len {
            let inputs: Vec<Option<ValueId>> = n
                .inputs
                .iter()
                .zip(&lists)
                .map(|(v, l)| match l {
                    Some(l) => l.get(k).copied(),
                    None => *v,
                })
                .collect();
            let outs = self.inline(g, &body, &inputs, &format!("{base}_map{k}_"), order)?;
            for (j, o) in outs.into_iter().enumerate() {
                let o = o.ok_or_else(|| format!("output {j} of the body is absent"))?;
                if self.seqs.contains_key(&o) {
                    return Err("a body that gives sequences is not supported yet".into());
                }
                if let Some(r) = results.get_mut(j) {
                    r.push(o);
                }
            }
        }
        for (o, list) in n.outputs.iter().zip(results) {
            if let Some(o) = o {
                self.seqs.insert(*o, list);
            }
        }
        Ok(false)
    }

    /// A `Loop` that carries or reads sequences: unrolled, so every
    /// sequence keeps a length known at generation time. The trip count
    /// and the condition after each iteration must be known now.
    fn unroll(
        &mut self,
        g: &mut Graph,
        id: NodeId,
        order: &mut Vec<NodeId>,
    ) -> Result<bool, String> {
        let n = g.node(id).clone();
        let body = body_of(&n, "body")?;
        let trips = match n.input(0) {
            Some(m) => const_ints(g, m).and_then(|m| m.first().copied()).ok_or_else(|| {
                format!(
                    "a Loop over sequences is unrolled at generation time, so its trip count \
                     '{}' must be a constant; it is computed at run time",
                    g.value(m).name
                )
            })?,
            None => {
                return Err("a Loop over sequences is unrolled at generation time and needs a \
                            constant trip count"
                    .into());
            }
        };
        if usize::try_from(trips).is_ok_and(|t| t > MAX_SPLICED_NODES) {
            return Err(format!(
                "a Loop over sequences is unrolled at generation time; {trips} iterations are \
                 more than the {MAX_SPLICED_NODES} this compiler unrolls"
            ));
        }
        let go = match n.input(1) {
            Some(c) => known_bool(g, c).ok_or_else(|| {
                format!(
                    "a Loop over sequences is unrolled at generation time, so its condition \
                     '{}' must be a constant",
                    g.value(c).name
                )
            })?,
            None => true,
        };
        let state_count = n.inputs.len().saturating_sub(2);
        if body.inputs.len() != 2 + state_count || body.outputs.len() < 1 + state_count {
            return Err(format!(
                "the body has {} inputs and {} outputs for {state_count} loop-carried values",
                body.inputs.len(),
                body.outputs.len()
            ));
        }
        if body.outputs.len() > 1 + state_count
            && n.outputs.iter().skip(state_count).any(Option::is_some)
        {
            return Err("scan outputs of a Loop over sequences are not supported yet".into());
        }
        let mut state: Vec<Option<ValueId>> = n.inputs.iter().skip(2).copied().collect();
        let base = n.output(0).map_or_else(String::new, |v| g.value(v).name.clone());
        let mut k = 0i64;
        let mut go = go;
        while go && k < trips {
            let iter = g.add_initializer(
                fresh(g, format!("{base}_iter{k}")),
                Tensor::from_i64s("iter", Vec::new(), &[k]),
            );
            let cond = g.add_initializer(fresh(g, format!("{base}_cond{k}")), bool_tensor(true));
            let mut inputs = vec![Some(iter), Some(cond)];
            inputs.extend(state.iter().copied());
            let outs = self.inline(g, &body, &inputs, &format!("{base}_it{k}_"), order)?;
            let cond_out = outs.first().copied().flatten().ok_or("the body gives no condition")?;
            go = known_bool(g, cond_out).ok_or_else(|| {
                "a Loop over sequences is unrolled at generation time, so the condition its \
                 body gives must be known then; it is computed at run time"
                    .to_owned()
            })?;
            state = outs.iter().skip(1).take(state_count).copied().collect();
            k += 1;
        }
        for (j, out) in n.outputs.iter().take(state_count).enumerate() {
            let Some(out) = *out else { continue };
            let src = state.get(j).copied().flatten().ok_or_else(|| {
                format!("loop-carried value {j} is absent, so output {j} has no value")
            })?;
            self.bind_output(g, out, src, order);
        }
        Ok(false)
    }

    /// An `If` that gives or uses sequences. With a condition known now it
    /// is the taken branch, copied in. Otherwise each branch is expanded on
    /// its own and the node gives the elements of its sequence outputs as
    /// separate outputs: both branches must give sequences of the same
    /// length (and inference checks that the elements' types agree).
    fn branch(
        &mut self,
        g: &mut Graph,
        id: NodeId,
        order: &mut Vec<NodeId>,
    ) -> Result<bool, String> {
        let n = g.node(id).clone();
        let cond = n.input(0).ok_or("If needs a condition")?;
        if let Some(c) = known_bool(g, cond) {
            let body = body_of(&n, if c { "then_branch" } else { "else_branch" })?;
            let base = n.output(0).map_or_else(String::new, |v| g.value(v).name.clone());
            let outs = self.inline(g, &body, &[], &format!("{base}_if_"), order)?;
            for (j, (out, src)) in n.outputs.iter().zip(outs).enumerate() {
                let (Some(out), Some(src)) = (*out, src) else {
                    if out.is_some() {
                        return Err(format!("output {j} of the taken branch is absent"));
                    }
                    continue;
                };
                self.bind_output(g, out, src, order);
            }
            return Ok(false);
        }
        let mut lengths: Vec<(String, Vec<Option<usize>>)> = Vec::new();
        let mut attributes = n.attributes.clone();
        for a in &mut attributes {
            if a.name != "then_branch" && a.name != "else_branch" {
                continue;
            }
            for sub in a.value.graphs_mut() {
                let mut x = Expander { spliced: self.spliced, ..Expander::default() };
                for c in sub.captures.clone() {
                    let ValueKind::Captured { outer } = sub.value(c).kind else { continue };
                    let Some(list) = self.seqs.get(&outer).cloned() else { continue };
                    let base = sub.value(c).name.clone();
                    let mut inner = Vec::with_capacity(list.len());
                    for (k, e) in list.into_iter().enumerate() {
                        inner.push(sub.add_capture(fresh(sub, format!("{base}_{k}")), e));
                    }
                    sub.captures.retain(|&v| v != c);
                    sub.value_mut(c).kind =
                        ValueKind::NodeOutput { node: NodeId(u32::MAX), index: 0 };
                    x.seqs.insert(c, inner);
                }
                x.nodes(sub);
                let lens = x.outputs(sub);
                self.spliced = x.spliced;
                for mut u in x.unsupported {
                    u.reason = format!("in branch '{}' ({}): {}", sub.name, a.name, u.reason);
                    self.unsupported.push(u);
                }
                lengths.push((a.name.clone(), lens));
            }
        }
        if let [(na, a), (nb, b)] = lengths.as_slice()
            && a != b
        {
            let show = |l: &[Option<usize>]| {
                l.iter()
                    .map(|k| {
                        k.map_or_else(
                            || "no sequence of known length".to_owned(),
                            |k| format!("a sequence of {k}"),
                        )
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            return Err(format!(
                "the branches of If give different sequences ({na}: {}; {nb}: {}), so the \
                 result would depend on the run-time condition; a sequence's length (and an \
                 optional's presence) must be known at generation time",
                show(a),
                show(b)
            ));
        }
        let lens = lengths.into_iter().next().map(|l| l.1).unwrap_or_default();
        let mut outputs = Vec::new();
        for (j, out) in n.outputs.iter().enumerate() {
            let len = lens.get(j).copied().flatten();
            match (out, len) {
                (Some(v), None) => {
                    let index = outputs.len();
                    g.value_mut(*v).kind = ValueKind::NodeOutput { node: id, index };
                    outputs.push(Some(*v));
                }
                (None, None) => outputs.push(None),
                (_, Some(len)) => {
                    let base =
                        out.map_or_else(|| format!("if_output{j}"), |v| g.value(v).name.clone());
                    let mut list = Vec::with_capacity(len);
                    for k in 0..len {
                        let index = outputs.len();
                        let v = g.add_value(crate::ir::Value {
                            name: fresh(g, format!("{base}_{k}")),
                            ty: None,
                            kind: ValueKind::NodeOutput { node: id, index },
                            doc_string: String::new(),
                        });
                        outputs.push(Some(v));
                        list.push(v);
                    }
                    if let Some(v) = out {
                        self.seqs.insert(*v, list);
                    }
                }
            }
        }
        let node = g.node_mut(id);
        node.attributes = attributes;
        node.outputs = outputs;
        Ok(true)
    }
}

/// A boolean scalar.
fn bool_tensor(b: bool) -> Tensor {
    Tensor::from_bytes("flag", ElemType::Bool, Vec::new(), bytes::Bytes::from(vec![u8::from(b)]))
        .unwrap_or_else(|_| Tensor::from_i64s("flag", Vec::new(), &[i64::from(b)]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::{HostData, HostTensor};

    fn types(a: &Analysis) -> Vec<Option<String>> {
        a.summary().outputs.into_iter().map(|v| v.r#type).collect()
    }

    fn ty(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    fn unsupported(a: &Analysis) -> Vec<String> {
        a.inferred.unsupported.iter().map(|u| u.reason.clone()).collect()
    }

    fn errors(a: &Analysis) -> Vec<String> {
        a.summary().errors
    }

    fn warnings(a: &Analysis) -> Vec<String> {
        a.inferred.warnings.iter().map(|d| d.message.clone()).collect()
    }

    fn value(a: &Analysis, j: usize) -> Vec<f64> {
        let v = a.model().graph.outputs[j];
        let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
        match HostTensor::from_tensor(t).expect("output has a host form").data {
            HostData::I64(v) => v.into_iter().map(|x| x as f64).collect(),
            HostData::Bool(v) => v.into_iter().map(|b| f64::from(u8::from(b))).collect(),
            other => panic!("unexpected output {other:?}"),
        }
    }

    fn run_with(opset: u32, graph: &str, io: IoSpec) -> Analysis {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
        analyze(&model, &Options { io, ..Options::default() }).expect("test model is valid")
    }

    fn seq(name: &str, elems: &[(ElemType, &[usize])]) -> IoSpec {
        let mut io = IoSpec::default();
        let types = elems.iter().map(|(e, d)| TensorType::new(*e, d.to_vec())).collect();
        io.sequences.insert(name.to_owned(), types);
        io
    }

    fn input_names(a: &Analysis) -> Vec<String> {
        a.summary().inputs.into_iter().map(|v| v.name).collect()
    }

    #[test]
    fn a_sequence_input_becomes_one_input_per_element() {
        let a = run_with(
            17,
            "g (seq(float[N]) s, float[3] t) => (seq(float[N]) y) {
               y = SequenceInsert (s, t)
             }",
            seq("s", &[(ElemType::Float, &[2]), (ElemType::Float, &[4])]),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(input_names(&a), ["s_0", "s_1", "t"]);
        assert_eq!(types(&a), [ty("float[2]"), ty("float[4]"), ty("float[3]")]);
    }

    #[test]
    fn constant_positions_pick_insert_erase_and_at() {
        // [a, b] -> insert c at 1 -> [a, c, b] -> erase -1 -> [a, c] -> at 1 = c; length 2.
        let a = run_with(
            17,
            "g (float[1] a, float[2] b, float[3] c) => (float[3] y, int64 n) {
               s = SequenceConstruct (a, b)
               one = Constant <value: tensor = int64 {1}> ()
               m = Constant <value: tensor = int64 {-1}> ()
               s2 = SequenceInsert (s, c, one)
               s3 = SequenceErase (s2, m)
               y = SequenceAt (s3, one)
               n = SequenceLength (s3)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[3]"), ty("int64[]")]);
        assert_eq!(value(&a, 1), [2.0]);
    }

    #[test]
    fn a_position_known_only_at_run_time_picks_at_run_time() {
        let a = run_with(
            17,
            "g (float[1] a, int64 p) => (float[1] y) {
               s = SequenceConstruct (a, a)
               y = SequenceAt (s, p)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[1]")]);
        // Elements of different lengths along two axes cannot share one output.
        let a = run_with(
            17,
            "g (float[1,2] a, float[2,1] b, int64 p) => (float[?,?] y) {
               s = SequenceConstruct (a, b)
               y = SequenceAt (s, p)
             }",
            IoSpec::default(),
        );
        assert!(
            unsupported(&a).iter().any(|r| r.contains("differ in more than one axis")),
            "{:?}",
            unsupported(&a)
        );
    }

    #[test]
    fn concat_from_sequence_with_and_without_a_new_axis() {
        let a = run_with(
            17,
            "g (float[2,3] a, float[2,3] b) => (float[2,6] y, float[2,2,3] z) {
               s = SequenceConstruct (a, b)
               y = ConcatFromSequence <axis: int = 1> (s)
               z = ConcatFromSequence <axis: int = 1, new_axis: int = 1> (s)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[2, 6]"), ty("float[2, 2, 3]")]);
    }

    #[test]
    fn split_to_sequence_pieces_follow_split_and_keepdims() {
        for (opset, split, keep, want) in [
            (17, "", 1, vec!["float[3, 1]"; 6]),
            (11, "", 0, vec!["float[3]"; 6]),
            (
                17,
                "k = Constant <value: tensor = int64 {4}> ()",
                1,
                vec!["float[3, 4]", "float[3, 2]"],
            ),
            (
                17,
                "k = Constant <value: tensor = int64[3] {1, 2, 3}> ()",
                0,
                vec!["float[3, 1]", "float[3, 2]", "float[3, 3]"],
            ),
        ] {
            let arg = if split.is_empty() { "" } else { ", k" };
            let outs: Vec<String> = (0..want.len()).map(|i| format!("float[3,?] y{i}")).collect();
            let ats: String = (0..want.len())
                .map(|i| format!("i{i} = Constant <value: tensor = int64 {{{i}}}> ()\n y{i} = SequenceAt (s, i{i})\n"))
                .collect();
            let a = run_with(
                opset,
                &format!(
                    "g (float[3,6] x) => ({}) {{
                       {split}
                       s = SplitToSequence <axis: int = 1, keepdims: int = {keep}> (x{arg})
                       {ats}
                     }}",
                    outs.join(", ")
                ),
                IoSpec::default(),
            );
            let got: Vec<Option<String>> = types(&a);
            let want: Vec<Option<String>> = want.iter().map(|s| ty(s)).collect();
            // The declared rank-2 outputs do not match the squeezed pieces:
            // a warning each, and the pieces' shapes stand.
            let squeezed = keep == 0 && split.is_empty();
            assert_eq!(warnings(&a).len(), if squeezed { 6 } else { 0 }, "{:?}", warnings(&a));
            assert!(errors(&a).is_empty(), "{:?}", errors(&a));
            assert_eq!(got, want, "opset {opset}, split '{split}', keepdims {keep}");
        }
    }

    #[test]
    fn an_absent_optional_input_leaves_the_signature() {
        let mut io = IoSpec::default();
        io.absent.insert("o".to_owned());
        let a = run_with(
            18,
            "g (optional(float[2]) o, float[2] x) => (bool h) {
               h = OptionalHasElement (o)
             }",
            io,
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(input_names(&a), ["x"]);
        assert_eq!(value(&a, 0), [0.0]);
        let a = run_with(
            18,
            "g (optional(float[2]) o) => (bool h, float[2] y) {
               h = OptionalHasElement (o)
               y = OptionalGetElement (o)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(value(&a, 0), [1.0]);
        assert_eq!(types(&a)[1], ty("float[2]"));
    }

    #[test]
    fn sequence_map_runs_the_body_once_per_element_with_its_shape() {
        let a = run_with(
            17,
            "g (seq(float[N]) s, float[1] b) => (seq(float[N]) y, seq(int64[1]) d) {
               y, d = SequenceMap (s, b) <body: graph = f (float[N] e, float[1] c) => (float[N] o, int64[1] n) {
                  o = Add (e, c)
                  n = Shape (e)
               }>
             }",
            seq("s", &[(ElemType::Float, &[2]), (ElemType::Float, &[3])]),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[2]"), ty("float[3]"), ty("int64[1]"), ty("int64[1]")]);
        assert_eq!(value(&a, 2), [2.0]);
        assert_eq!(value(&a, 3), [3.0]);
    }

    #[test]
    fn a_loop_over_a_sequence_with_a_constant_trip_count_is_unrolled() {
        // Three iterations append [i + 1] * x: lengths 1, 2, 3 along axis 0.
        let a = run_with(
            17,
            "g (float[2] x) => (float[6] y, int64 n) {
               m = Constant <value: tensor = int64 {3}> ()
               e = SequenceEmpty <dtype: int = 1> ()
               s = Loop (m, \"\", e) <body: graph = b (int64 i, bool c, seq(float[2]) acc) => (bool co, seq(float[2]) out) {
                  one = Constant <value: tensor = int64 {1}> ()
                  j = Add (i, one)
                  f = Cast <to: int = 1> (j)
                  r = Mul (x, f)
                  out = SequenceInsert (acc, r)
                  co = Identity (c)
               }>
               y = ConcatFromSequence <axis: int = 0> (s)
               n = SequenceLength (s)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[6]"), ty("int64[]")]);
        assert_eq!(value(&a, 1), [3.0]);
    }

    #[test]
    fn a_loop_over_a_sequence_with_a_run_time_trip_count_is_unsupported() {
        let a = run_with(
            17,
            "g (int64 m, float[2] x) => (float[?] y) {
               e = SequenceEmpty <dtype: int = 1> ()
               s = Loop (m, \"\", e) <body: graph = b (int64 i, bool c, seq(float[2]) acc) => (bool co, seq(float[2]) out) {
                  out = SequenceInsert (acc, x)
                  co = Identity (c)
               }>
               y = ConcatFromSequence <axis: int = 0> (s)
             }",
            IoSpec::default(),
        );
        assert!(
            unsupported(&a).iter().any(|r| r.contains("trip count 'm' must be a constant")),
            "{:?}",
            unsupported(&a)
        );
    }

    #[test]
    fn run_time_insert_and_split_give_one_output_per_element() {
        // Each element is picked among a[0], a[1] and t at run time: the
        // largest of them is its capacity.
        let a = run_with(
            11,
            "g (seq(int64[N]) s, int64[3] t, int64[1] p) => (seq(int64[N]) y) {
               y = SequenceInsert (s, t, p)
             }",
            seq("s", &[(ElemType::Int64, &[4]), (ElemType::Int64, &[2])]),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("int64[4]"), ty("int64[4]"), ty("int64[4]")]);
        // Two pieces whose sizes come at run time: each may take the whole axis.
        let a = run_with(
            13,
            "g (float[5,2] x, int64[2] k) => (seq(float[?,2]) y) {
               y = SplitToSequence (x, k)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[5, 2]"), ty("float[5, 2]")]);
        let a = run_with(
            13,
            "g (float[5,2] x, int64 k) => (seq(float[?,2]) y) {
               y = SplitToSequence (x, k)
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).iter().any(|r| r.contains("number of pieces")));
    }

    #[test]
    fn unrolling_is_bounded() {
        let a = run_with(
            17,
            "g (float[2] x) => (int64 n) {
               m = Constant <value: tensor = int64 {1000000000000}> ()
               e = SequenceEmpty <dtype: int = 1> ()
               s = Loop (m, \"\", e) <body: graph = b (int64 i, bool c, seq(float[2]) acc) => (bool co, seq(float[2]) out) {
                  out = Identity (acc)
                  co = Identity (c)
               }>
               n = SequenceLength (s)
             }",
            IoSpec::default(),
        );
        assert!(
            unsupported(&a).iter().any(|r| r.contains("more than the 100000")),
            "{:?}",
            unsupported(&a)
        );
    }

    #[test]
    fn if_branches_giving_sequences_of_one_length_give_its_elements() {
        let a = run_with(
            17,
            "g (bool c, float[2] x) => (seq(float[2]) y) {
               y = If (c) <then_branch: graph = t () => (seq(float[2]) a) {
                  n = Neg (x)
                  a = SequenceConstruct (x, n)
               }, else_branch: graph = e () => (seq(float[2]) b) {
                  b = SequenceConstruct (x, x)
               }>
             }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [ty("float[2]"), ty("float[2]")]);
        let a = run_with(
            17,
            "g (bool c, float[2] x) => (seq(float[2]) y) {
               y = If (c) <then_branch: graph = t () => (seq(float[2]) a) {
                  a = SequenceConstruct (x)
               }, else_branch: graph = e () => (seq(float[2]) b) {
                  b = SequenceConstruct (x, x)
               }>
             }",
            IoSpec::default(),
        );
        assert!(
            unsupported(&a).iter().any(|r| r.contains("give different sequences")),
            "{:?}",
            unsupported(&a)
        );
    }

    #[test]
    fn a_sequence_input_without_a_length_stays_unsupported() {
        let a = run_with(
            17,
            "g (seq(float[2]) s) => (seq(float[2]) y) { y = Identity (s) }",
            IoSpec::default(),
        );
        assert!(unsupported(&a).iter().any(|r| r.contains("sequence")));
    }
}
