//! Inlining of model-local functions.
//!
//! Every call of a model-local function (matched by domain, name and
//! overload) is replaced by a copy of the function's body: formal inputs are
//! bound to the actual inputs (absent ones stay absent), attribute references
//! take the call's value or the function's default (or are dropped), body
//! values get names that are new in the whole model, and the call's output
//! names are kept. Functions are processed callees first, so a body is free
//! of calls before it is copied; recursion is an error. Calls inside
//! subgraphs are inlined too. Afterwards the model has no functions.

use crate::diag::{Diagnostic, Diagnostics, PathStep};
use crate::ir::{
    AttrValue, Attribute, Function, Graph, Model, Node, NodeId, Op, Value, ValueId, ValueKind,
};
use crate::ops;
use std::collections::{HashMap, HashSet};

/// How deeply function calls may nest.
pub const MAX_CALL_DEPTH: usize = 64;

/// The most nodes inlining may produce (guards against exponential bodies).
pub const MAX_NODES: usize = 20_000_000;

type Key = (String, String, String);

fn key_of(op: &Op) -> Key {
    (op.domain.clone(), op.op_type.clone(), op.overload.clone())
}

/// Names already used anywhere in the model, for making new ones.
struct Names {
    used: HashSet<String>,
}

impl Names {
    fn fresh(&mut self, base: &str) -> String {
        if !base.is_empty() && self.used.insert(base.to_owned()) {
            return base.to_owned();
        }
        let base = if base.is_empty() { "v" } else { base };
        let mut n = 1u64;
        loop {
            let candidate = format!("{base}_{n}");
            if self.used.insert(candidate.clone()) {
                return candidate;
            }
            n += 1;
        }
    }
}

fn collect_names(g: &Graph, used: &mut HashSet<String>) {
    g.visit(&mut |g, _| {
        for v in g.values() {
            used.insert(v.name.clone());
        }
    });
}

/// Inlines every call of a model-local function; reports recursion, too deep
/// nesting and blow-ups. On success `model.functions` is empty.
pub fn inline_functions(model: &mut Model, diags: &mut Diagnostics) {
    if model.functions.is_empty() {
        return;
    }
    let index: HashMap<Key, usize> = model
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| ((f.domain.clone(), f.name.clone(), f.overload.clone()), i))
        .collect();
    let Some(order) = call_order(&model.functions, &index, diags) else { return };
    let mut used = HashSet::new();
    collect_names(&model.graph, &mut used);
    for f in &model.functions {
        collect_names(&f.body, &mut used);
    }
    let mut cx = Inliner {
        index,
        funcs: model.functions.drain(..).map(Some).collect(),
        names: Names { used },
        diags,
        nodes: 0,
        default_opsets: model.opset_imports.clone(),
    };
    for i in order {
        let Some(mut f) = cx.funcs.get_mut(i).and_then(Option::take) else { continue };
        let body = std::mem::take(&mut f.body);
        f.body = cx.inline_graph(body);
        if let Some(slot) = cx.funcs.get_mut(i) {
            *slot = Some(f);
        }
    }
    let graph = std::mem::take(&mut model.graph);
    model.graph = cx.inline_graph(graph);
    // Domains only the functions imported are now used by the main graph.
    for f in cx.funcs.iter().flatten() {
        for (d, v) in &f.opset_imports {
            model.opset_imports.entry(d.clone()).or_insert(*v);
        }
    }
}

/// The functions in callee-first order, or `None` (with errors) when calls
/// are recursive or nest too deeply.
fn call_order(
    funcs: &[Function],
    index: &HashMap<Key, usize>,
    diags: &mut Diagnostics,
) -> Option<Vec<usize>> {
    let callees: Vec<Vec<usize>> = funcs
        .iter()
        .map(|f| {
            let mut out = Vec::new();
            f.body.visit(&mut |g, _| {
                for (_, n) in g.nodes() {
                    if let Some(&i) = index.get(&key_of(&n.op))
                        && !out.contains(&i)
                    {
                        out.push(i);
                    }
                }
            });
            out
        })
        .collect();
    // 0 = unvisited, 1 = on the current path, 2 = done.
    let mut state = vec![0u8; funcs.len()];
    let mut order = Vec::with_capacity(funcs.len());
    let mut ok = true;
    for root in 0..funcs.len() {
        if state.get(root) != Some(&0) {
            continue;
        }
        // Iterative depth-first search; the stack holds (function, next callee).
        let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
        if let Some(s) = state.get_mut(root) {
            *s = 1;
        }
        while let Some(&mut (f, ref mut next)) = stack.last_mut() {
            let callee = callees.get(f).and_then(|c| c.get(*next)).copied();
            *next += 1;
            match callee {
                None => {
                    if let Some(s) = state.get_mut(f) {
                        *s = 2;
                    }
                    order.push(f);
                    stack.pop();
                }
                Some(c) => match state.get(c) {
                    Some(0) => {
                        if stack.len() >= MAX_CALL_DEPTH {
                            let name = funcs.get(root).map_or("", |f| f.name.as_str());
                            diags.push(Diagnostic::error(format!(
                                "function calls starting at '{name}' nest more than {MAX_CALL_DEPTH} levels deep"
                            )));
                            return None;
                        }
                        if let Some(s) = state.get_mut(c) {
                            *s = 1;
                        }
                        stack.push((c, 0));
                    }
                    Some(1) => {
                        let from = stack.iter().position(|&(g, _)| g == c).unwrap_or(0);
                        let mut names: Vec<String> = stack
                            .get(from..)
                            .unwrap_or_default()
                            .iter()
                            .filter_map(|&(g, _)| funcs.get(g).map(|f| format!("'{}'", f.name)))
                            .collect();
                        names.push(funcs.get(c).map_or(String::new(), |f| format!("'{}'", f.name)));
                        let (domain, name) =
                            funcs.get(c).map_or((String::new(), String::new()), |f| {
                                (f.domain.clone(), f.name.clone())
                            });
                        let msg = if names.len() == 2 {
                            format!(
                                "function '{name}' calls itself; recursive functions cannot be inlined"
                            )
                        } else {
                            format!(
                                "function '{name}' calls itself through {}; recursive functions cannot be inlined",
                                names.join(" -> ")
                            )
                        };
                        diags.push(
                            Diagnostic::error(msg)
                                .at_path(vec![PathStep::Function { domain, name }]),
                        );
                        ok = false;
                        // Do not report the same cycle again from this path.
                        if let Some(s) = state.get_mut(c) {
                            *s = 2;
                        }
                    }
                    _ => {}
                },
            }
        }
    }
    ok.then_some(order)
}

/// How attribute references of a body being copied are resolved.
struct Subst<'a> {
    call: &'a [Attribute],
    defaults: &'a [Attribute],
}

impl Subst<'_> {
    fn apply(&self, attrs: &[Attribute]) -> Vec<Attribute> {
        let mut out = Vec::with_capacity(attrs.len());
        for a in attrs {
            match &a.value {
                AttrValue::Ref { name, .. } => {
                    let found = self
                        .call
                        .iter()
                        .find(|c| &c.name == name)
                        .or_else(|| self.defaults.iter().find(|d| &d.name == name));
                    if let Some(v) = found {
                        out.push(Attribute {
                            name: a.name.clone(),
                            value: v.value.clone(),
                            doc_string: a.doc_string.clone(),
                        });
                    }
                }
                _ => out.push(a.clone()),
            }
        }
        out
    }
}

struct Inliner<'d> {
    index: HashMap<Key, usize>,
    funcs: Vec<Option<Function>>,
    names: Names,
    diags: &'d mut Diagnostics,
    nodes: usize,
    default_opsets: std::collections::BTreeMap<String, i64>,
}

fn has_calls(g: &Graph, index: &HashMap<Key, usize>) -> bool {
    let mut found = false;
    g.visit(&mut |g, _| {
        found = found
            || g.nodes().any(|(_, n)| n.op.schema.is_none() && index.contains_key(&key_of(&n.op)));
    });
    found
}

impl Inliner<'_> {
    /// Inlines the calls of `g` and of its subgraphs.
    fn inline_graph(&mut self, mut g: Graph) -> Graph {
        if !has_calls(&g, &self.index) {
            return g;
        }
        // Subgraphs first, in place.
        let order: Vec<NodeId> = g.order().to_vec();
        for id in &order {
            let node = g.node_mut(*id);
            let mut attrs = std::mem::take(&mut node.attributes);
            for a in &mut attrs {
                for sub in a.value.graphs_mut() {
                    let taken = std::mem::take(sub);
                    *sub = self.inline_graph(taken);
                }
            }
            g.node_mut(*id).attributes = attrs;
        }
        let calls: Vec<bool> = order
            .iter()
            .map(|&id| {
                let op = &g.node(id).op;
                op.schema.is_none() && self.index.contains_key(&key_of(op))
            })
            .collect();
        if !calls.contains(&true) {
            return g;
        }
        self.rebuild(g, &calls)
    }

    /// Rebuilds `old`, copying ordinary nodes and expanding calls.
    fn rebuild(&mut self, old: Graph, calls: &[bool]) -> Graph {
        let mut new = Graph::new(old.name.clone());
        new.doc_string = old.doc_string.clone();
        let mut map: Vec<Option<ValueId>> = vec![None; old.values().len()];
        for (i, v) in old.values().iter().enumerate() {
            if matches!(v.kind, ValueKind::NodeOutput { .. }) {
                continue;
            }
            let id = new.add_value(v.clone());
            if let Some(m) = map.get_mut(i) {
                *m = Some(id);
            }
        }
        let remap = |map: &[Option<ValueId>], v: ValueId| map.get(v.index()).copied().flatten();
        new.inputs = old.inputs.iter().filter_map(|&v| remap(&map, v)).collect();
        new.captures = old.captures.iter().filter_map(|&v| remap(&map, v)).collect();
        for (pos, &id) in old.order().iter().enumerate() {
            let node = old.node(id);
            if calls.get(pos) == Some(&true) {
                self.expand_call(&old, node, &mut new, &mut map);
                continue;
            }
            let mut copy = node.clone();
            copy.inputs = node.inputs.iter().map(|i| i.and_then(|v| remap(&map, v))).collect();
            for a in &mut copy.attributes {
                for sub in a.value.graphs_mut() {
                    remap_captures(sub, &map);
                }
            }
            let nid = new.next_node_id();
            copy.outputs = node
                .outputs
                .iter()
                .enumerate()
                .map(|(index, o)| {
                    o.map(|o| {
                        let v = old.value(o);
                        let nv = new.add_value(Value {
                            kind: ValueKind::NodeOutput { node: nid, index },
                            ..v.clone()
                        });
                        if let Some(m) = map.get_mut(o.index()) {
                            *m = Some(nv);
                        }
                        nv
                    })
                })
                .collect();
            new.push_node(copy);
        }
        new.outputs = old.outputs.iter().filter_map(|&v| remap(&map, v)).collect();
        new
    }

    /// Appends the body of the function `call` calls to `new`.
    fn expand_call(
        &mut self,
        old: &Graph,
        call: &Node,
        new: &mut Graph,
        map: &mut [Option<ValueId>],
    ) {
        let Some(&fi) = self.index.get(&key_of(&call.op)) else { return };
        let Some(Some(f)) = self.funcs.get(fi) else { return };
        let f = f.clone();
        let body = &f.body;
        self.nodes = self.nodes.saturating_add(body.total_node_count());
        if self.nodes > MAX_NODES {
            if self.nodes.saturating_sub(body.total_node_count()) <= MAX_NODES {
                self.diags.push(Diagnostic::error(format!(
                    "inlining model-local functions would produce more than {MAX_NODES} nodes; the model is refused"
                )));
            }
            return;
        }
        let subst = Subst { call: &call.attributes, defaults: &f.attribute_defaults };
        let prefix = if call.name.is_empty() { f.name.clone() } else { call.name.clone() };
        // body value -> new value
        let mut bmap: Vec<Option<ValueId>> = vec![None; body.values().len()];
        for (k, &formal) in body.inputs.iter().enumerate() {
            let actual = call.input(k).and_then(|v| map.get(v.index()).copied().flatten());
            if let Some(slot) = bmap.get_mut(formal.index()) {
                *slot = actual;
            }
        }
        for (i, v) in body.values().iter().enumerate() {
            if matches!(v.kind, ValueKind::Initializer(_) | ValueKind::SparseInitializer(_)) {
                let name = self.names.fresh(&format!("{prefix}_{}", v.name));
                let id = new.add_value(Value { name, ..v.clone() });
                if let Some(slot) = bmap.get_mut(i) {
                    *slot = Some(id);
                }
            }
        }
        // Which call output name each body output value takes (first one wins).
        let mut out_name: HashMap<ValueId, usize> = HashMap::new();
        for (j, &bv) in body.outputs.iter().enumerate() {
            if call.output(j).is_some() {
                out_name.entry(bv).or_insert(j);
            }
        }
        for (_, bn) in body.nodes() {
            let mut node = Node {
                name: if bn.name.is_empty() {
                    String::new()
                } else {
                    format!("{prefix}/{}", bn.name)
                },
                op: bn.op.clone(),
                inputs: bn
                    .inputs
                    .iter()
                    .map(|i| i.and_then(|v| bmap.get(v.index()).copied().flatten()))
                    .collect(),
                outputs: Vec::new(),
                attributes: subst.apply(&bn.attributes),
                doc_string: bn.doc_string.clone(),
                lowering: None,
            };
            for a in &mut node.attributes {
                for sub in a.value.graphs_mut() {
                    let taken = std::mem::take(sub);
                    *sub = self.instantiate(&taken, &bmap, new, &subst);
                }
            }
            let nid = new.next_node_id();
            node.outputs = bn
                .outputs
                .iter()
                .enumerate()
                .map(|(index, o)| {
                    o.map(|o| {
                        let bvalue = body.value(o);
                        let (name, ty, caller) =
                            match out_name.get(&o).and_then(|&j| call.output(j)) {
                                Some(cv) => {
                                    let c = old.value(cv);
                                    (
                                        c.name.clone(),
                                        c.ty.clone().or_else(|| bvalue.ty.clone()),
                                        Some(cv),
                                    )
                                }
                                None => (
                                    self.names.fresh(&format!("{prefix}_{}", bvalue.name)),
                                    bvalue.ty.clone(),
                                    None,
                                ),
                            };
                        let nv = new.add_value(Value {
                            name,
                            ty,
                            kind: ValueKind::NodeOutput { node: nid, index },
                            doc_string: String::new(),
                        });
                        if let Some(cv) = caller
                            && let Some(slot) = map.get_mut(cv.index())
                        {
                            *slot = Some(nv);
                        }
                        if let Some(slot) = bmap.get_mut(o.index()) {
                            *slot = Some(nv);
                        }
                        nv
                    })
                })
                .collect();
            new.push_node(node);
        }
        // Call outputs not produced under their own name by a body node
        // (a formal output that is a formal input, or repeated): an Identity.
        for (j, &bv) in body.outputs.iter().enumerate() {
            let Some(cv) = call.output(j) else { continue };
            if map.get(cv.index()).copied().flatten().is_some() {
                continue;
            }
            let source = bmap.get(bv.index()).copied().flatten();
            let version = f
                .opset_imports
                .get("")
                .or_else(|| self.default_opsets.get(""))
                .copied()
                .unwrap_or(1);
            let c = old.value(cv);
            let nid = new.next_node_id();
            let nv = new.add_value(Value {
                name: c.name.clone(),
                ty: c.ty.clone(),
                kind: ValueKind::NodeOutput { node: nid, index: 0 },
                doc_string: c.doc_string.clone(),
            });
            new.push_node(Node {
                name: format!("{prefix}/output_{j}"),
                op: Op {
                    domain: String::new(),
                    op_type: "Identity".to_owned(),
                    overload: String::new(),
                    opset_version: version,
                    schema: ops::schema("", "Identity", version),
                },
                inputs: vec![source],
                outputs: vec![Some(nv)],
                attributes: Vec::new(),
                doc_string: String::new(),
                lowering: None,
            });
            if let Some(slot) = map.get_mut(cv.index()) {
                *slot = Some(nv);
            }
        }
    }

    /// Copies a subgraph of a function body into the caller: every value
    /// gets a new name, captures point at the caller's values, and
    /// attribute references are substituted, recursively.
    fn instantiate(
        &mut self,
        sub: &Graph,
        outer_map: &[Option<ValueId>],
        outer: &Graph,
        subst: &Subst<'_>,
    ) -> Graph {
        let mut g = Graph::new(sub.name.clone());
        g.doc_string = sub.doc_string.clone();
        let mut map: Vec<Option<ValueId>> = vec![None; sub.values().len()];
        for (i, v) in sub.values().iter().enumerate() {
            let value = match &v.kind {
                ValueKind::NodeOutput { .. } => continue,
                ValueKind::Captured { outer: o } => {
                    let Some(target) = outer_map.get(o.index()).copied().flatten() else {
                        self.diags.push(Diagnostic::error(format!(
                            "a subgraph of an inlined function uses '{}', an absent optional input of the function",
                            v.name
                        )));
                        continue;
                    };
                    Value {
                        name: outer.value(target).name.clone(),
                        kind: ValueKind::Captured { outer: target },
                        ..v.clone()
                    }
                }
                _ => Value { name: self.names.fresh(&v.name), ..v.clone() },
            };
            let id = g.add_value(value);
            if let Some(slot) = map.get_mut(i) {
                *slot = Some(id);
            }
        }
        let at = |map: &[Option<ValueId>], v: ValueId| map.get(v.index()).copied().flatten();
        g.inputs = sub.inputs.iter().filter_map(|&v| at(&map, v)).collect();
        g.captures = sub.captures.iter().filter_map(|&v| at(&map, v)).collect();
        for (_, n) in sub.nodes() {
            let mut node = n.clone();
            node.inputs = n.inputs.iter().map(|i| i.and_then(|v| at(&map, v))).collect();
            node.attributes = subst.apply(&n.attributes);
            let nid = g.next_node_id();
            node.outputs = n
                .outputs
                .iter()
                .enumerate()
                .map(|(index, o)| {
                    o.map(|o| {
                        let v = sub.value(o);
                        let nv = g.add_value(Value {
                            name: self.names.fresh(&v.name),
                            kind: ValueKind::NodeOutput { node: nid, index },
                            ..v.clone()
                        });
                        if let Some(slot) = map.get_mut(o.index()) {
                            *slot = Some(nv);
                        }
                        nv
                    })
                })
                .collect();
            for a in &mut node.attributes {
                for inner in a.value.graphs_mut() {
                    let taken = std::mem::take(inner);
                    *inner = self.instantiate(&taken, &map, &g, subst);
                }
            }
            g.push_node(node);
        }
        g.outputs = sub.outputs.iter().filter_map(|&v| at(&map, v)).collect();
        g
    }
}

/// Points the captures of `sub` (a subgraph of a node being copied) at the
/// new ids of the values they capture.
fn remap_captures(sub: &mut Graph, map: &[Option<ValueId>]) {
    for c in sub.captures.clone() {
        if let ValueKind::Captured { outer } = &mut sub.value_mut(c).kind
            && let Some(n) = map.get(outer.index()).copied().flatten()
        {
            *outer = n;
        }
    }
}
