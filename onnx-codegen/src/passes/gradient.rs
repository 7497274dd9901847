//! `Gradient` (domain `ai.onnx.preview.training`): the derivatives of a
//! value `y` with respect to values `xs`, differentiated at generation time.
//!
//! The node becomes forward operators of the default domain: reverse-mode
//! differentiation of the nodes between `xs` (and `zs`, the other
//! independent variables) and `y`. The derivative is seeded with ones of
//! `y`'s shape (the gradient of the sum of `y`'s elements, as the
//! operator's reference does), each node's rule turns the gradient of its
//! output into gradients of its inputs, contributions to one value are
//! added, and a broadcast operand gets the sum over the axes it was
//! broadcast along. Output `i` of the node is the gradient at `xs[i]`
//! (zeros of its shape when `y` does not depend on it).
//!
//! Differentiated: Add, Sub, Mul, Div, Neg, Identity. Any other operator
//! between `xs` and `y` is refused, naming it. The node's inputs must be the
//! values `xs` and `zs` name (evaluating the graph at other values would
//! copy it; refused). Broadcasting needs the operands' shapes declared (on
//! graph inputs or `value_info`) where they differ.

use crate::ir::{AttrValue, Attribute, Dim, ElemType, Graph, Model, Node, NodeId, Op};
use crate::ir::{Tensor, TensorData, Type, ValueId, ValueKind};
use crate::passes::infer::Unsupported;
use std::collections::{HashMap, HashSet};

/// The operator's domain.
pub const DOMAIN: &str = "ai.onnx.preview.training";

/// Expands every `Gradient` node of the main graph; what cannot be
/// expanded is returned (and left for inference to refuse).
pub fn expand(model: &mut Model) -> Vec<Unsupported> {
    let g = &mut model.graph;
    if !g.order().iter().any(|&id| is_gradient(g.node(id))) {
        return Vec::new();
    }
    let opset = model.opset_imports.get("").copied();
    let mut refused = Vec::new();
    let mut order = Vec::with_capacity(g.order().len());
    for id in g.order().to_vec() {
        if !is_gradient(g.node(id)) {
            order.push(id);
            continue;
        }
        let first = g.next_node_id().0;
        let result = match opset {
            Some(opset) => Differentiate { g, opset, node: id, shapes: HashMap::new() }.run(),
            None => Err("its expansion needs operators of the default domain, which the model \
                         does not import"
                .to_owned()),
        };
        match result {
            Ok(()) => order.extend((first..g.next_node_id().0).map(NodeId)),
            Err(reason) => {
                let n = g.node(id);
                refused.push(Unsupported {
                    node: n.label(id),
                    op_type: n.op.op_type.clone(),
                    domain: DOMAIN.to_owned(),
                    reason: format!("Gradient ({DOMAIN}): {reason}"),
                });
                order.push(id);
            }
        }
    }
    g.set_order(order);
    refused
}

fn is_gradient(n: &Node) -> bool {
    n.op.domain == DOMAIN && n.op.op_type == "Gradient"
}

/// Shapes as far as the declarations tell (`None`: unknown rank).
type Dims = Option<Vec<Dim>>;

struct Differentiate<'a> {
    g: &'a mut Graph,
    opset: i64,
    node: NodeId,
    shapes: HashMap<ValueId, Dims>,
}

impl Differentiate<'_> {
    fn run(&mut self) -> Result<(), String> {
        let n = self.g.node(self.node).clone();
        let names = |attr: &str| -> Vec<String> {
            match n.attr(attr) {
                Some(AttrValue::Strings(list)) => {
                    list.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
                }
                _ => Vec::new(),
            }
        };
        let (xs, zs) = (names("xs"), names("zs"));
        let y = match n.attr("y") {
            Some(AttrValue::String(s)) => String::from_utf8_lossy(s).into_owned(),
            _ => return Err("it needs the attribute 'y'".to_owned()),
        };
        let find = |name: &str| {
            self.g.value_by_name(name).ok_or_else(|| format!("no value is named '{name}'"))
        };
        let y = find(&y)?;
        let xs: Vec<ValueId> = xs.iter().map(|x| find(x)).collect::<Result<_, _>>()?;
        let zs: Vec<ValueId> = zs.iter().map(|z| find(z)).collect::<Result<_, _>>()?;
        if n.inputs.len() != xs.len() + zs.len() {
            return Err(format!(
                "it has {} inputs but 'xs' and 'zs' name {}",
                n.inputs.len(),
                xs.len() + zs.len()
            ));
        }
        for (i, (&input, &named)) in n.inputs.iter().zip(xs.iter().chain(&zs)).enumerate() {
            if input != Some(named) {
                return Err(format!(
                    "input {i} is not the value '{}' it stands for; evaluating the \
                     differentiated graph at other values is not supported yet",
                    self.g.value(named).name
                ));
            }
        }
        let leaves: HashSet<ValueId> = xs.iter().chain(&zs).copied().collect();
        let nodes = self.forward_nodes(y, &leaves);
        // The values that depend on some x: only their gradients are needed.
        let mut varying: HashSet<ValueId> = xs.iter().copied().collect();
        for &id in &nodes {
            let node = self.g.node(id);
            if node.inputs.iter().flatten().any(|v| varying.contains(v)) {
                varying.extend(node.outputs.iter().flatten());
            }
        }
        let elem = xs
            .iter()
            .find_map(|&x| match (&self.g.value(x).ty, &self.g.value(x).kind) {
                (Some(Type::Tensor { elem: Some(e), .. }), _) => Some(*e),
                (_, ValueKind::Initializer(t) | ValueKind::Input { default: Some(t) }) => {
                    Some(t.elem)
                }
                _ => None,
            })
            .ok_or("the element type of the values in 'xs' is not declared")?;
        let one =
            filled(elem, 1.0).ok_or_else(|| format!("{elem} values are not differentiable"))?;
        for &id in &nodes {
            self.infer_shape(id);
        }
        let mut grads: HashMap<ValueId, ValueId> = HashMap::new();
        if varying.contains(&y) {
            let shape = self.add("Shape", vec![y], Vec::new(), "dy_shape");
            let seed = self.add(
                "ConstantOfShape",
                vec![shape],
                vec![attr("value", AttrValue::Tensor(one))],
                "dy",
            );
            grads.insert(y, seed);
        }
        for &id in nodes.iter().rev() {
            let node = self.g.node(id).clone();
            let Some(out) = node.output(0) else { continue };
            let Some(&dy) = grads.get(&out) else { continue };
            for (i, d) in self.backward(id, &node, dy, &varying)?.into_iter().enumerate() {
                let (Some(d), Some(x)) = (d, node.input(i)) else { continue };
                let total = match grads.get(&x) {
                    Some(&prev) => self.add("Add", vec![prev, d], Vec::new(), "grad_sum"),
                    None => d,
                };
                grads.insert(x, total);
            }
        }
        let mut results = Vec::with_capacity(xs.len());
        for &x in &xs {
            let g = match grads.get(&x) {
                Some(&g) => g,
                None => {
                    let zero = filled(elem, 0.0).ok_or("no zero of this type")?;
                    let shape = self.add("Shape", vec![x], Vec::new(), "zero_shape");
                    self.add(
                        "ConstantOfShape",
                        vec![shape],
                        vec![attr("value", AttrValue::Tensor(zero))],
                        "zero_grad",
                    )
                }
            };
            results.push(g);
        }
        // Each output of the node is defined by an Identity of its gradient,
        // under its own name.
        for (i, out) in n.outputs.iter().enumerate() {
            let (Some(out), Some(&g)) = (out, results.get(i)) else { continue };
            let id = self.g.next_node_id();
            let mut node = plain(self.opset, "Identity", vec![g], Vec::new());
            node.outputs = vec![Some(*out)];
            self.g.value_mut(*out).kind = ValueKind::NodeOutput { node: id, index: 0 };
            self.g.push_node(node);
        }
        Ok(())
    }

    /// The nodes `y` is computed by from the leaves (and constants), in
    /// topological order.
    fn forward_nodes(&self, y: ValueId, leaves: &HashSet<ValueId>) -> Vec<NodeId> {
        let mut needed: HashSet<NodeId> = HashSet::new();
        let mut stack = vec![y];
        while let Some(v) = stack.pop() {
            if leaves.contains(&v) {
                continue;
            }
            let ValueKind::NodeOutput { node, .. } = self.g.value(v).kind else { continue };
            if node == self.node || !needed.insert(node) {
                continue;
            }
            stack.extend(self.g.node(node).inputs.iter().flatten());
        }
        self.g.order().iter().copied().filter(|id| needed.contains(id)).collect()
    }

    fn declared(&self, v: ValueId) -> Dims {
        let value = self.g.value(v);
        match (&value.ty, &value.kind) {
            (Some(Type::Tensor { shape, .. }), _) if shape.dims.is_some() => shape.dims.clone(),
            (_, ValueKind::Initializer(t)) => {
                Some(t.dims.iter().map(|&d| Dim::Static(d)).collect())
            }
            _ => None,
        }
    }

    fn shape(&self, v: ValueId) -> Dims {
        self.shapes.get(&v).cloned().unwrap_or_else(|| self.declared(v))
    }

    /// The output shape of a differentiated node from its inputs' shapes
    /// (multidirectional broadcasting), where the model does not declare it.
    fn infer_shape(&mut self, id: NodeId) {
        let node = self.g.node(id);
        let Some(out) = node.output(0) else { return };
        if self.declared(out).is_some() {
            return;
        }
        let shapes: Vec<Dims> = node.inputs.iter().flatten().map(|&v| self.shape(v)).collect();
        let shape = shapes.into_iter().try_fold(Vec::new(), |acc, s| broadcast(&acc, &s?));
        self.shapes.insert(out, shape);
    }

    /// The gradients of node `id`'s inputs from the gradient `dy` of its
    /// output (`None` for inputs that do not vary with `xs`).
    fn backward(
        &mut self,
        id: NodeId,
        node: &Node,
        dy: ValueId,
        varying: &HashSet<ValueId>,
    ) -> Result<Vec<Option<ValueId>>, String> {
        let wants = |i: usize| node.input(i).is_some_and(|v| varying.contains(&v));
        let input = |i: usize| node.input(i).ok_or_else(|| format!("input {i} is absent"));
        let out = node.output(0).ok_or("no output")?;
        if !node.op.domain.is_empty() {
            return Err(refusal(id, node));
        }
        let mut grads = vec![None; node.inputs.len()];
        match node.op.op_type.as_str() {
            "Identity" => grads[0] = Some(dy),
            "Neg" => grads[0] = Some(self.add("Neg", vec![dy], Vec::new(), "grad_neg")),
            "Add" | "Sub" | "Mul" | "Div" => {
                if node.attr("broadcast").is_some() {
                    return Err(format!(
                        "node '{}' uses the legacy 'broadcast' attribute",
                        node.label(id)
                    ));
                }
                let (a, b) = (input(0)?, input(1)?);
                let op = node.op.op_type.as_str();
                if wants(0) {
                    let da = match op {
                        "Add" | "Sub" => dy,
                        "Mul" => self.add("Mul", vec![dy, b], Vec::new(), "grad_mul"),
                        _ => self.add("Div", vec![dy, b], Vec::new(), "grad_div"),
                    };
                    grads[0] = Some(self.unbroadcast(da, a, out, id, node)?);
                }
                if wants(1) {
                    let db = match op {
                        "Add" => dy,
                        "Sub" => self.add("Neg", vec![dy], Vec::new(), "grad_neg"),
                        "Mul" => self.add("Mul", vec![dy, a], Vec::new(), "grad_mul"),
                        _ => {
                            // d(a / b)/db = -(a / b) / b, with a / b the node's output.
                            let q = self.add("Div", vec![out, b], Vec::new(), "grad_div");
                            let t = self.add("Mul", vec![dy, q], Vec::new(), "grad_mul");
                            self.add("Neg", vec![t], Vec::new(), "grad_neg")
                        }
                    };
                    grads[1] = Some(self.unbroadcast(db, b, out, id, node)?);
                }
            }
            _ => return Err(refusal(id, node)),
        }
        Ok(grads)
    }

    /// `d` (of `out`'s shape) summed down to the shape of `x`, which was
    /// broadcast to it.
    fn unbroadcast(
        &mut self,
        d: ValueId,
        x: ValueId,
        out: ValueId,
        id: NodeId,
        node: &Node,
    ) -> Result<ValueId, String> {
        let (xs, os) = (self.shape(x), self.shape(out));
        let (Some(xs), Some(os)) = (xs, os) else {
            return Err(format!(
                "the shapes of '{}' and '{}' (node '{}') are not declared, so whether it \
                 broadcasts is not known before inference",
                self.g.value(x).name,
                self.g.value(out).name,
                node.label(id)
            ));
        };
        if xs == os {
            return Ok(d);
        }
        let lead = os.len().saturating_sub(xs.len());
        let mut axes: Vec<i64> = (0..lead as i64).collect();
        for (k, dx) in xs.iter().enumerate() {
            match (dx, &os[lead + k]) {
                (a, b) if a == b => {}
                (Dim::Static(1), _) => axes.push((lead + k) as i64),
                _ => {
                    return Err(format!(
                        "dimension {k} of '{}' ({dx}) may differ from the broadcast result's \
                         ({}); declare their shapes",
                        self.g.value(x).name,
                        os[lead + k]
                    ));
                }
            }
        }
        let summed = if self.opset >= 13 {
            let axes_t = Tensor::from_i64s("axes", vec![axes.len() as u64], &axes);
            let axes_v = self.constant("grad_axes", axes_t);
            self.add(
                "ReduceSum",
                vec![d, axes_v],
                vec![attr("keepdims", AttrValue::Int(1))],
                "grad_reduced",
            )
        } else {
            self.add(
                "ReduceSum",
                vec![d],
                vec![attr("axes", AttrValue::Ints(axes)), attr("keepdims", AttrValue::Int(1))],
                "grad_reduced",
            )
        };
        if lead == 0 {
            return Ok(summed);
        }
        let shape = self.add("Shape", vec![x], Vec::new(), "grad_shape");
        Ok(self.add("Reshape", vec![summed, shape], Vec::new(), "grad_reshaped"))
    }

    /// A new node of the default domain with one new output named after
    /// the Gradient node.
    fn add(
        &mut self,
        op_type: &str,
        inputs: Vec<ValueId>,
        attrs: Vec<Attribute>,
        what: &str,
    ) -> ValueId {
        let base = self.base();
        let name = crate::passes::sequences::fresh(self.g, format!("{base}/{what}"));
        let node = plain(self.opset, op_type, inputs, attrs);
        let id = self.g.add_node(node, &[Some(name)]);
        self.g.node(id).outputs[0].unwrap_or(ValueId(u32::MAX))
    }

    fn constant(&mut self, what: &str, t: Tensor) -> ValueId {
        let base = self.base();
        let name = crate::passes::sequences::fresh(self.g, format!("{base}/{what}"));
        self.g.add_initializer(name.clone(), Tensor { name, ..t })
    }

    fn base(&self) -> String {
        let n = self.g.node(self.node);
        if n.name.is_empty() { n.label(self.node) } else { n.name.clone() }
    }
}

fn refusal(id: NodeId, node: &Node) -> String {
    let op = if node.op.domain.is_empty() {
        node.op.op_type.clone()
    } else {
        format!("{}.{}", node.op.domain, node.op.op_type)
    };
    format!(
        "node '{}' ({op}) lies between 'xs' and 'y', and {op} is not differentiable yet \
         (differentiated: Add, Sub, Mul, Div, Neg, Identity)",
        node.label(id)
    )
}

/// Multidirectional broadcasting of declared shapes (`None` when two
/// dims may differ at run time).
fn broadcast(a: &[Dim], b: &[Dim]) -> Option<Vec<Dim>> {
    let rank = a.len().max(b.len());
    let at = |s: &[Dim], k: usize| {
        let pad = rank - s.len();
        if k < pad { Dim::Static(1) } else { s[k - pad].clone() }
    };
    (0..rank)
        .map(|k| match (at(a, k), at(b, k)) {
            (x, y) if x == y => Some(x),
            (Dim::Static(1), y) => Some(y),
            (x, Dim::Static(1)) => Some(x),
            _ => None,
        })
        .collect()
}

/// A one-element tensor (`[1]`, as ConstantOfShape's `value`) of a float
/// type holding `v`.
fn filled(elem: ElemType, v: f32) -> Option<Tensor> {
    let bytes: Vec<u8> = match elem {
        ElemType::Float => v.to_le_bytes().to_vec(),
        ElemType::Double => f64::from(v).to_le_bytes().to_vec(),
        ElemType::Float16 => {
            onnx_codegen_runtime::f16::from_f64(f64::from(v)).to_bits().to_le_bytes().to_vec()
        }
        ElemType::Bfloat16 => {
            onnx_codegen_runtime::bf16::from_f64(f64::from(v)).to_bits().to_le_bytes().to_vec()
        }
        _ => return None,
    };
    Some(Tensor { name: String::new(), elem, dims: vec![1], data: TensorData::Bytes(bytes.into()) })
}

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute { name: name.to_owned(), value, doc_string: String::new() }
}

fn plain(opset: i64, op_type: &str, inputs: Vec<ValueId>, attributes: Vec<Attribute>) -> Node {
    Node {
        name: String::new(),
        op: Op {
            domain: String::new(),
            op_type: op_type.to_owned(),
            overload: String::new(),
            opset_version: opset,
            schema: crate::ops::schema("", op_type, opset),
        },
        inputs: inputs.into_iter().map(Some).collect(),
        outputs: Vec::new(),
        attributes,
        doc_string: String::new(),
        lowering: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::testing::{unsupported, value};

    fn run(graph: &str) -> Analysis {
        let src = format!(
            "<ir_version: 8, opset_import: [\"\" : 17, \"ai.onnx.preview.training\" : 1]>\n{graph}"
        );
        let model = crate::text::parse_model(&src, "t.onnxtxt").expect("test model parses");
        analyze(&model, &Options::default()).expect("test model is valid")
    }

    #[test]
    fn add_and_mul_are_differentiated_into_forward_ops() {
        // d = (a + b) * a: dd/da = 2a + b, dd/db = a.
        let a = run(r#"g () => (float d, float da, float db) <float a = {3}, float b = {2}> {
            c = Add (a, b)
            d = Mul (c, a)
            da, db = ai.onnx.preview.training.Gradient <xs: strings = ["a", "b"], y: string = "d"> (a, b)
        }"#);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(value(&a, 0), [15.0]);
        assert_eq!(value(&a, 1), [8.0]);
        assert_eq!(value(&a, 2), [3.0]);
        let ops: Vec<&str> = a.model().graph.nodes().map(|(_, n)| n.op.op_type.as_str()).collect();
        assert!(!ops.contains(&"Gradient"), "{ops:?}");
    }

    #[test]
    fn broadcast_operands_get_their_gradient_summed_back() {
        // y = a * b - b / a with b broadcast along axis 0 of a; the gradient
        // of sum(y): dy/da = b + b / a^2, dy/db = sum over rows of (a - 1/a).
        let a = run(
            r#"g () => (float[2,2] da, float[2] db) <float[2,2] a = {1, 2, 4, 8}, float[2] b = {3, 5}> {
            m = Mul (a, b)
            q = Div (b, a)
            y = Sub (m, q)
            da, db = ai.onnx.preview.training.Gradient <xs: strings = ["a", "b"], y: string = "y"> (a, b)
        }"#,
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let (av, bv) = ([1.0f64, 2.0, 4.0, 8.0], [3.0f64, 5.0]);
        let da: Vec<f64> =
            av.iter().enumerate().map(|(i, x)| bv[i % 2] + bv[i % 2] / (x * x)).collect();
        let db: Vec<f64> =
            (0..2).map(|j| (0..2).map(|i| av[i * 2 + j] - 1.0 / av[i * 2 + j]).sum()).collect();
        for (got, want) in value(&a, 0).iter().zip(&da).chain(value(&a, 1).iter().zip(&db)) {
            assert!((got - want).abs() < 1e-5, "got {got}, want {want}");
        }
    }

    #[test]
    fn a_value_y_does_not_depend_on_gets_zeros() {
        let a = run(
            r#"g () => (float[2] da, float[2] db) <float[2] a = {1, 2}, float[2] b = {3, 4}> {
            y = Neg (a)
            da, db = ai.onnx.preview.training.Gradient <xs: strings = ["a", "b"], y: string = "y"> (a, b)
        }"#,
        );
        assert_eq!(value(&a, 0), [-1.0, -1.0]);
        assert_eq!(value(&a, 1), [0.0, 0.0]);
    }

    #[test]
    fn what_is_not_differentiable_is_refused_naming_it() {
        let a = run(r#"g (float[2] a) => (float[2] da) {
            [act] r = Relu (a)
            y = Mul (r, a)
            da = ai.onnx.preview.training.Gradient <xs: strings = ["a"], y: string = "y"> (a)
        }"#);
        let u = unsupported(&a);
        assert!(
            u.iter().any(|m| m.contains("Gradient (ai.onnx.preview.training)")
                && m.contains("node 'act' (Relu)")
                && m.contains("Relu is not differentiable yet")),
            "{u:?}"
        );
        let a = run(r#"g (float[2] a, float[2] p) => (float[2] da) {
            y = Mul (a, a)
            da = ai.onnx.preview.training.Gradient <xs: strings = ["a"], y: string = "y"> (p)
        }"#);
        let u = unsupported(&a);
        assert!(u.iter().any(|m| m.contains("is not the value 'a'")), "{u:?}");
    }
}
