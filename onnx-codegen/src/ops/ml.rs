//! `ai.onnx.ml` operators (Binarizer, ArrayFeatureExtractor) and the
//! optimizers of `ai.onnx.preview.training` (Momentum, Adagrad, Adam).

use super::host::HostElem;
use super::misc::{FnKernel, float_input, hin, host_float, host_int, hout, scalar_expr};
use super::{
    EvalResult, HostTensor, Lowered, NodeCx, OpError, OpResult, OpRule, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::misc::{self as rt_misc, Optimizer};
use onnx_codegen_runtime::ml::{self as rt_ml, Aggregate, Branch, Cmp, Ensemble, TreeNode};
use onnx_codegen_runtime::num::{Float, Num};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type` of the `ai.onnx.ml` domain, if handled here.
pub fn ml_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Binarizer" => Some(&BinarizerRule),
        "ArrayFeatureExtractor" => Some(&AfeRule),
        "TreeEnsemble" => Some(&TreeRule),
        "LabelEncoder" => Some(&LabelRule),
        _ => None,
    }
}

/// The rule for `op_type` of the `ai.onnx.preview.training` domain.
pub fn training_rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Momentum" | "Adagrad" | "Adam" => Some(&OptimizerRule),
        _ => None,
    }
}

struct BinarizerRule;

fn run_binarizer<T: Float + HostElem>(
    threshold: f64,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = hin::<T>(inputs, 0)?;
    rt_ml::binarizer(T::from_f64(threshold), T::from_f64(1.0), x, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for BinarizerRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![float_input(cx, 0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = float_input(cx, 0)?.elem;
        let threshold = f64::from(cx.float_or("threshold", 0.0));
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_binarizer(threshold, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (t, one) = (lit::float(threshold, elem), lit::float(1.0, elem));
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::ml::binarizer(#t, #one, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct AfeRule;

/// `(rows, cols, k, output dims)`.
fn afe_plan(cx: &NodeCx<'_>) -> OpResult<(usize, usize, usize, Vec<usize>)> {
    let x = cx.input(0)?;
    if !matches!(x.elem, ElemType::Float | ElemType::Double | ElemType::Int32 | ElemType::Int64) {
        return unsupported(format!("ArrayFeatureExtractor on {} tensors", x.elem));
    }
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("ArrayFeatureExtractor's indices must be int64, not {}", idx.elem));
    }
    let Some((&cols, lead)) = x.dims.split_last() else {
        return invalid("ArrayFeatureExtractor's input must have rank 1 or more");
    };
    let k: usize = idx.dims.iter().product();
    let rows: usize = lead.iter().product();
    let mut out = if lead.is_empty() { vec![1] } else { lead.to_vec() };
    out.push(k);
    Ok((rows, cols, k, out))
}

fn run_afe<T: Num + HostElem>(
    rows: usize,
    cols: usize,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, i) = (hin::<T>(inputs, 0)?, hin::<i64>(inputs, 1)?);
    rt_ml::array_feature_extractor(rows, cols, x, i, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for AfeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, _, _, out) = afe_plan(cx)?;
        Ok(vec![TensorType::new(cx.input(0)?.elem, out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (rows, cols, _, _) = afe_plan(cx)?;
        let elem = cx.input(0)?.elem;
        FnKernel {
            eval: Box::new(move |i, o| crate::by_num_type!(elem, run_afe(rows, cols, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let (r, c) = (lit::usize_lit(rows), lit::usize_lit(cols));
                let (x, i, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
                quote!(#rt::ml::array_feature_extractor(#r, #c, #x, #i, #y)?;)
            }),
            reads: vec![true, true],
        }
        .lowered()
    }
}

struct OptimizerRule;

/// The optimizer, and how many state tensors each parameter has.
fn optimizer(cx: &NodeCx<'_>) -> OpResult<(Optimizer, usize)> {
    let f = |name: &str, d: f32| f64::from(cx.float_or(name, d));
    Ok(match cx.node.op.op_type.as_str() {
        "Momentum" => {
            let nesterov = match cx.string_or("mode", "standard").as_str() {
                "standard" => false,
                "nesterov" => true,
                other => {
                    return invalid(format!(
                        "Momentum's mode '{other}' is not 'standard' or 'nesterov'"
                    ));
                }
            };
            let alpha = f("alpha", 0.0);
            let op = Optimizer::Momentum {
                alpha,
                beta: f("beta", 0.0),
                norm_coefficient: f("norm_coefficient", 0.0),
                nesterov,
            };
            (op, 1)
        }
        "Adagrad" => (
            Optimizer::Adagrad {
                decay_factor: f("decay_factor", 0.0),
                epsilon: f("epsilon", 0.0),
                norm_coefficient: f("norm_coefficient", 0.0),
            },
            1,
        ),
        "Adam" => (
            Optimizer::Adam {
                alpha: f("alpha", 0.9),
                beta: f("beta", 0.999),
                epsilon: f("epsilon", 1e-6),
                norm_coefficient: f("norm_coefficient", 0.0),
                norm_coefficient_post: f("norm_coefficient_post", 0.0),
            },
            2,
        ),
        other => return unsupported(format!("{other} is not an optimizer handled here")),
    })
}

/// The number of parameters `n`; checks inputs `[R, T, X*n, G*n, S*n...]`.
fn optimizer_plan(cx: &NodeCx<'_>) -> OpResult<(Optimizer, usize, usize, ElemType)> {
    let (op, states) = optimizer(cx)?;
    let name = &cx.node.op.op_type;
    let groups = states + 2;
    let count = cx.inputs.len().saturating_sub(2);
    if count == 0 || !count.is_multiple_of(groups) {
        return invalid(format!(
            "{name} takes R, T, then {groups} equal groups of tensors; it has {count} tensors"
        ));
    }
    let n = count / groups;
    let r = float_input(cx, 0)?;
    let t = cx.input(1)?;
    if r.numel() != Some(1) || t.elem != ElemType::Int64 || t.numel() != Some(1) {
        return invalid(format!("{name}'s R must be one float and T one int64"));
    }
    let elem = float_input(cx, 2)?.elem;
    for j in 0..n {
        let x = cx.input(2 + j)?;
        for g in 1..groups {
            let other = cx.input(2 + g * n + j)?;
            if other.elem != elem || other.dims != x.dims || x.elem != elem {
                return invalid(format!(
                    "{name}'s tensors for parameter {j} must all be {elem} of shape {:?}",
                    x.dims
                ));
            }
        }
    }
    if cx.node.outputs.len() > (states + 1) * n {
        return invalid(format!("{name} has at most {} outputs", (states + 1) * n));
    }
    Ok((op, states, n, elem))
}

fn run_optimizer<T: Float + HostElem>(
    op: Optimizer,
    states: usize,
    n: usize,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let r = host_float(inputs, 0)?;
    let t = host_int(inputs, 1)?;
    for j in 0..n {
        let x = hin::<T>(inputs, 2 + j)?;
        let g = hin::<T>(inputs, 2 + n + j)?;
        let s1 = hin::<T>(inputs, 2 + 2 * n + j)?;
        let s2 = if states == 2 { hin::<T>(inputs, 2 + 3 * n + j)? } else { &[] };
        let mut xn = vec![T::default(); x.len()];
        let mut s1n = vec![T::default(); x.len()];
        let mut s2n = vec![T::default(); if states == 2 { x.len() } else { 0 }];
        rt_misc::optimizer_step(op, r, t, x, g, s1, s2, &mut xn, &mut s1n, &mut s2n)?;
        for (k, v) in [(j, &xn), (n + j, &s1n), (2 * n + j, &s2n)] {
            match outputs.get_mut(k).and_then(HostTensor::get_mut::<T>) {
                Some(o) if o.len() == v.len() => o.copy_from_slice(v),
                _ => {}
            }
        }
    }
    Ok(())
}

impl OpRule for OptimizerRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, _, n, _) = optimizer_plan(cx)?;
        let mut out = Vec::new();
        for k in 0..cx.node.outputs.len() {
            let (g, j) = (k / n, k % n);
            out.push(cx.input(2 + if g == 0 { 0 } else { (g + 1) * n } + j)?.clone());
        }
        Ok(out)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (op, states, n, elem) = optimizer_plan(cx)?;
        let reads = vec![true; cx.inputs.len()];
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_optimizer(op, states, n, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let r = scalar_expr(io, 0, true);
                let t = scalar_expr(io, 1, false);
                let l = lit::f64_lit;
                let opt = match op {
                    Optimizer::Momentum { alpha, beta, norm_coefficient, nesterov } => {
                        let (a, b, c) = (l(alpha), l(beta), l(norm_coefficient));
                        quote!(#rt::misc::Optimizer::Momentum { alpha: #a, beta: #b, norm_coefficient: #c, nesterov: #nesterov })
                    }
                    Optimizer::Adagrad { decay_factor, epsilon, norm_coefficient } => {
                        let (a, b, c) = (l(decay_factor), l(epsilon), l(norm_coefficient));
                        quote!(#rt::misc::Optimizer::Adagrad { decay_factor: #a, epsilon: #b, norm_coefficient: #c })
                    }
                    Optimizer::Adam { alpha, beta, epsilon, norm_coefficient, norm_coefficient_post } => {
                        let (a, b, e, c, p) = (l(alpha), l(beta), l(epsilon), l(norm_coefficient), l(norm_coefficient_post));
                        quote!(#rt::misc::Optimizer::Adam { alpha: #a, beta: #b, epsilon: #e, norm_coefficient: #c, norm_coefficient_post: #p })
                    }
                };
                let input = |i: usize| io.inputs.get(i).cloned().flatten();
                let output = |k: usize| match io.outputs.get(k).cloned().flatten() {
                    Some(o) => o,
                    None => quote!(&mut []),
                };
                let calls = (0..n).map(|j| {
                    let (x, g, s1) = (input(2 + j), input(2 + n + j), input(2 + 2 * n + j));
                    let s2 = if states == 2 { input(2 + 3 * n + j) } else { Some(quote!(&[])) };
                    let (xn, s1n) = (output(j), output(n + j));
                    let s2n = if states == 2 { output(2 * n + j) } else { quote!(&mut []) };
                    quote!(#rt::misc::optimizer_step(#opt, __r, __t, #x, #g, #s1, #s2, #xn, #s1n, #s2n)?;)
                });
                quote!({ let __r = #r; let __t = #t; #(#calls)* })
            }),
            reads,
        }
        .lowered()
    }
}

struct TreeRule;

/// TreeEnsemble's tables, owned.
struct Trees {
    elem: ElemType,
    nodes: Vec<TreeNode>,
    roots: Vec<Branch>,
    leaf_weights: Vec<f64>,
    leaf_targets: Vec<usize>,
    members: Vec<f64>,
    features: usize,
    targets: usize,
    rows: usize,
    aggregate: Aggregate,
}

impl Trees {
    fn ensemble(&self) -> Ensemble<'_> {
        Ensemble {
            nodes: &self.nodes,
            roots: &self.roots,
            leaf_weights: &self.leaf_weights,
            leaf_targets: &self.leaf_targets,
            members: &self.members,
            features: self.features,
            targets: self.targets,
            aggregate: self.aggregate,
        }
    }
}

fn tree_plan(cx: &NodeCx<'_>) -> OpResult<Trees> {
    let x = float_input(cx, 0)?;
    let &[rows, features] = x.dims.as_slice() else {
        return invalid(format!("TreeEnsemble's input must be 2-D, got {:?}", x.dims));
    };
    if features == 0 || features > 4096 {
        return unsupported(format!(
            "TreeEnsemble with {features} features (the kernel takes 1 to 4096)"
        ));
    }
    if cx.int_or("post_transform", 0) != 0 {
        return unsupported("TreeEnsemble with a post_transform other than NONE");
    }
    let aggregate = match cx.int_or("aggregate_function", 1) {
        0 => Aggregate::Average,
        1 => Aggregate::Sum,
        2 => Aggregate::Min,
        3 => Aggregate::Max,
        other => {
            return invalid(format!("TreeEnsemble's aggregate_function {other} is not 0 to 3"));
        }
    };
    let ints = |name: &str| -> OpResult<Vec<i64>> {
        cx.ints(name).ok_or_else(|| OpError::Invalid(format!("TreeEnsemble's {name} is required")))
    };
    let floats = |name: &str, required: bool| -> OpResult<Option<Vec<f64>>> {
        match cx.tensor(name) {
            Some(t) => t.to_f64s().map(Some).ok_or_else(|| {
                OpError::Invalid(format!("TreeEnsemble's {name} must be a numeric tensor"))
            }),
            None if required => invalid(format!("TreeEnsemble's {name} is required")),
            None => Ok(None),
        }
    };
    let idx = |v: i64, n: usize, what: &str| -> OpResult<usize> {
        usize::try_from(v).ok().filter(|&i| i < n).ok_or_else(|| {
            OpError::Invalid(format!("TreeEnsemble's {what} {v} is out of range (0 to {n})"))
        })
    };
    let splits = floats("nodes_splits", true)?.unwrap_or_default();
    let modes = cx
        .tensor("nodes_modes")
        .and_then(|t| t.to_i64s())
        .ok_or_else(|| OpError::Invalid("TreeEnsemble's nodes_modes is required".into()))?;
    let feature_ids = ints("nodes_featureids")?;
    let (true_ids, false_ids) = (ints("nodes_truenodeids")?, ints("nodes_falsenodeids")?);
    let (true_leafs, false_leafs) = (ints("nodes_trueleafs")?, ints("nodes_falseleafs")?);
    let missing = cx.ints("nodes_missing_value_tracks_true").unwrap_or_default();
    let leaf_targets = ints("leaf_targetids")?;
    let leaf_weights = floats("leaf_weights", true)?.unwrap_or_default();
    let members_all = floats("membership_values", false)?.unwrap_or_default();
    let n = splits.len();
    let leaves = leaf_weights.len();
    if [
        modes.len(),
        feature_ids.len(),
        true_ids.len(),
        false_ids.len(),
        true_leafs.len(),
        false_leafs.len(),
    ]
    .iter()
    .any(|&l| l != n)
        || (!missing.is_empty() && missing.len() != n)
        || leaf_targets.len() != leaves
    {
        return invalid(
            "TreeEnsemble's node attributes (and its leaf attributes) must have one length",
        );
    }
    let max_target = leaf_targets.iter().copied().max().unwrap_or(-1);
    let targets = match cx.node.attr("n_targets") {
        Some(crate::ir::AttrValue::Int(t)) => *t,
        _ => max_target + 1,
    };
    let targets = usize::try_from(targets)
        .map_err(|_| OpError::Invalid(format!("TreeEnsemble's n_targets {targets} is negative")))?;
    let branch = |is_leaf: i64, id: i64| -> OpResult<Branch> {
        Ok(if is_leaf != 0 {
            Branch::Leaf(idx(id, leaves, "leaf id")?)
        } else {
            Branch::Node(idx(id, n, "node id")?)
        })
    };
    let mut member_at = 0usize;
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let cmp = match modes[i] {
            0 => Cmp::Leq,
            1 => Cmp::Lt,
            2 => Cmp::Gte,
            3 => Cmp::Gt,
            4 => Cmp::Eq,
            5 => Cmp::Neq,
            6 => {
                let rest = members_all.get(member_at..).unwrap_or_default();
                let len = rest.iter().position(|v| v.is_nan()).ok_or_else(|| {
                    OpError::Invalid(
                        "TreeEnsemble's membership_values lack a NaN after a set".into(),
                    )
                })?;
                let c = Cmp::Member { start: member_at, len };
                member_at += len + 1;
                c
            }
            m => return invalid(format!("TreeEnsemble's node mode {m} is not 0 to 6")),
        };
        nodes.push(TreeNode {
            feature: idx(feature_ids[i], features, "feature id")?,
            cmp,
            split: splits[i],
            missing_true: missing.get(i).is_some_and(|&m| m != 0),
            if_true: branch(true_leafs[i], true_ids[i])?,
            if_false: branch(false_leafs[i], false_ids[i])?,
        });
    }
    let mut roots = Vec::new();
    for r in ints("tree_roots")? {
        let i = idx(r, n, "tree root")?;
        let leaf = true_leafs[i] != 0 && false_leafs[i] != 0 && true_ids[i] == false_ids[i];
        roots.push(if leaf { Branch::Leaf(idx(r, leaves, "leaf id")?) } else { Branch::Node(i) });
    }
    let leaf_targets = leaf_targets
        .iter()
        .map(|&t| idx(t, targets, "leaf target id"))
        .collect::<OpResult<Vec<_>>>()?;
    Ok(Trees {
        elem: x.elem,
        nodes,
        roots,
        leaf_weights,
        leaf_targets,
        members: members_all,
        features,
        targets,
        rows,
        aggregate,
    })
}

fn run_trees<T: Float + HostElem>(
    t: &Trees,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_ml::tree_ensemble(&t.ensemble(), hin::<T>(inputs, 0)?, hout::<T>(outputs, 0)?)?;
    Ok(())
}

fn branch_tokens(b: Branch, rt: &TokenStream) -> TokenStream {
    match b {
        Branch::Node(i) => quote!(#rt::ml::Branch::Node(#i)),
        Branch::Leaf(i) => quote!(#rt::ml::Branch::Leaf(#i)),
    }
}

fn trees_tokens(t: &Trees, rt: &TokenStream) -> TokenStream {
    let l = lit::f64_lit;
    let nodes = t.nodes.iter().map(|n| {
        let cmp = match n.cmp {
            Cmp::Leq => quote!(Leq),
            Cmp::Lt => quote!(Lt),
            Cmp::Gte => quote!(Gte),
            Cmp::Gt => quote!(Gt),
            Cmp::Eq => quote!(Eq),
            Cmp::Neq => quote!(Neq),
            Cmp::Member { start, len } => quote!(Member { start: #start, len: #len }),
        };
        let (f, s, m) = (n.feature, l(n.split), n.missing_true);
        let (a, b) = (branch_tokens(n.if_true, rt), branch_tokens(n.if_false, rt));
        quote!(#rt::ml::TreeNode {
            feature: #f, cmp: #rt::ml::Cmp::#cmp, split: #s, missing_true: #m, if_true: #a, if_false: #b,
        })
    });
    let roots = t.roots.iter().map(|&b| branch_tokens(b, rt));
    let weights = t.leaf_weights.iter().map(|&w| l(w));
    let targets = &t.leaf_targets;
    let members = t.members.iter().map(|&w| l(w));
    let (features, ntargets) = (t.features, t.targets);
    let agg = match t.aggregate {
        Aggregate::Average => quote!(Average),
        Aggregate::Sum => quote!(Sum),
        Aggregate::Min => quote!(Min),
        Aggregate::Max => quote!(Max),
    };
    quote!(#rt::ml::Ensemble {
        nodes: &[#(#nodes),*],
        roots: &[#(#roots),*],
        leaf_weights: &[#(#weights),*],
        leaf_targets: &[#(#targets),*],
        members: &[#(#members),*],
        features: #features,
        targets: #ntargets,
        aggregate: #rt::ml::Aggregate::#agg,
    })
}

impl OpRule for TreeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let t = tree_plan(cx)?;
        Ok(vec![TensorType::new(t.elem, vec![t.rows, t.targets])])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let t = std::rc::Rc::new(tree_plan(cx)?);
        let u = t.clone();
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(u.elem, run_trees(&u, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let e = trees_tokens(&t, rt);
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::ml::tree_ensemble(&#e, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct LabelRule;

/// Numbers of one element type, as literals will print them.
#[derive(Clone)]
pub(super) enum Numbers {
    Int(Vec<i64>),
    Float(Vec<f64>),
}

impl Numbers {
    pub(super) fn len(&self) -> usize {
        match self {
            Numbers::Int(v) => v.len(),
            Numbers::Float(v) => v.len(),
        }
    }

    pub(super) fn tokens(&self, elem: ElemType) -> Vec<TokenStream> {
        match self {
            Numbers::Int(v) => v.iter().filter_map(|&x| lit::int(i128::from(x), elem)).collect(),
            Numbers::Float(v) => v.iter().map(|&x| lit::float(x, elem)).collect(),
        }
    }
}

/// A numeric attribute table: the tensor form, or the typed lists; strings
/// are unsupported.
pub(super) fn label_table(cx: &NodeCx<'_>, which: &str) -> OpResult<(ElemType, Numbers)> {
    if let Some(t) = cx.tensor(&format!("{which}_tensor")) {
        return match t.elem {
            ElemType::Int16 | ElemType::Int32 | ElemType::Int64 => Ok((
                t.elem,
                Numbers::Int(
                    t.to_i64s().ok_or_else(|| OpError::Invalid(format!("bad {which}_tensor")))?,
                ),
            )),
            ElemType::Float | ElemType::Double => Ok((
                t.elem,
                Numbers::Float(
                    t.to_f64s().ok_or_else(|| OpError::Invalid(format!("bad {which}_tensor")))?,
                ),
            )),
            other => unsupported(format!(
                "LabelEncoder with {other} {which} (numeric ones only for now)"
            )),
        };
    }
    if let Some(v) = cx.ints(&format!("{which}_int64s")) {
        return Ok((ElemType::Int64, Numbers::Int(v)));
    }
    if let Some(crate::ir::AttrValue::Floats(v)) = cx.node.attr(&format!("{which}_floats")) {
        return Ok((ElemType::Float, Numbers::Float(v.iter().map(|&f| f64::from(f)).collect())));
    }
    unsupported(format!("LabelEncoder with string {which} (numeric ones only for now)"))
}

struct LabelPlan {
    key_elem: ElemType,
    keys: Numbers,
    value_elem: ElemType,
    values: Numbers,
    default: Numbers,
}

fn label_plan(cx: &NodeCx<'_>) -> OpResult<LabelPlan> {
    if cx.version() < 2 {
        return unsupported("LabelEncoder-1 maps strings (numeric ones only for now)");
    }
    let x = cx.input(0)?;
    let (key_elem, keys) = label_table(cx, "keys")?;
    let (value_elem, values) = label_table(cx, "values")?;
    if x.elem != key_elem {
        return invalid(format!("LabelEncoder's keys are {key_elem} but its input is {}", x.elem));
    }
    if keys.len() != values.len() {
        return invalid(format!(
            "LabelEncoder has {} keys but {} values",
            keys.len(),
            values.len()
        ));
    }
    let default = label_default(cx, value_elem)?;
    Ok(LabelPlan { key_elem, keys, value_elem, values, default })
}

/// LabelEncoder's default value: `default_tensor`, or the typed attribute
/// of the values' type.
pub(super) fn label_default(cx: &NodeCx<'_>, value_elem: ElemType) -> OpResult<Numbers> {
    let default = match cx.tensor("default_tensor") {
        Some(t) if t.elem == value_elem => match (t.to_i64s(), t.to_f64s()) {
            (Some(v), _)
                if matches!(value_elem, ElemType::Int16 | ElemType::Int32 | ElemType::Int64) =>
            {
                Numbers::Int(v)
            }
            (_, Some(v)) => Numbers::Float(v),
            _ => return invalid("LabelEncoder's default_tensor is not numeric"),
        },
        Some(t) => {
            return invalid(format!(
                "LabelEncoder's default_tensor is {} but its values are {value_elem}",
                t.elem
            ));
        }
        None => match value_elem {
            ElemType::Int64 => Numbers::Int(vec![cx.int_or("default_int64", -1)]),
            ElemType::Float => Numbers::Float(vec![f64::from(cx.float_or("default_float", -0.0))]),
            _ => Numbers::Int(vec![0]),
        },
    };
    if default.len() != 1 {
        return invalid("LabelEncoder's default must hold one value");
    }
    Ok(default)
}

impl OpRule for LabelRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if cx.input(0)?.elem == ElemType::String {
            return super::strings::label_infer(cx);
        }
        let p = label_plan(cx)?;
        Ok(vec![TensorType::new(p.value_elem, cx.input(0)?.dims.clone())])
    }

    /// Not folded on the host: the kernel is generic over two element types.
    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        if cx.input(0)?.elem == ElemType::String {
            return super::strings::label_lower(cx);
        }
        let p = label_plan(cx)?;
        let key_elem = p.key_elem;
        FnKernel {
            eval: Box::new(move |_, _| Err(super::EvalError::Type(key_elem))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let keys = p.keys.tokens(p.key_elem);
                let values = p.values.tokens(p.value_elem);
                let default = p.default.tokens(p.value_elem);
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::ml::label_encoder(&[#(#keys),*], &[#(#values),*], #(#default)*, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Options, analyze};
    use crate::ops::testing::{errors, types, unsupported};

    fn run_ml(graph: &str) -> crate::generate::Analysis {
        let src =
            format!("<ir_version: 9, opset_import: [\"\" : 19, \"ai.onnx.ml\" : 5]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses");
        analyze(&model, &Options::default()).expect("test model is valid")
    }

    #[test]
    fn label_encoder_rules() {
        let a = run_ml(
            "g (int64[3] x) => (float[3] y) {
                y = ai.onnx.ml.LabelEncoder <keys_int64s: ints = [1, 2], values_floats: floats = [0.5, 1.5]> (x)
            }",
        );
        assert_eq!(types(&a), [Some("float[3]".to_owned())], "{:?}", errors(&a));
        let a = run_ml(
            "g (int64[3] x) => (float[3] y) {
                y = ai.onnx.ml.LabelEncoder <keys_int64s: ints = [1, 2], values_floats: floats = [0.5]> (x)
            }",
        );
        assert!(errors(&a)[0].contains("2 keys but 1 values"), "{:?}", errors(&a));
        let a = run_ml(
            "g (string[3] x) => (int64[3] y) {
                y = ai.onnx.ml.LabelEncoder <keys_strings: strings = [\"a\"], values_int64s: ints = [1]> (x)
            }",
        );
        // String keys are handled by `strings` (generated with `alloc`).
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(types(&a), [Some("int64[3]".to_owned())], "{:?}", errors(&a));
        let a = run_ml(
            "g (string[3] x) => (int64[3] y) {
                y = ai.onnx.ml.LabelEncoder <keys_strings: strings = [\"a\"], values_int64s: ints = [1, 2]> (x)
            }",
        );
        assert!(errors(&a)[0].contains("1 keys but 2 values"), "{:?}", errors(&a));
    }

    #[test]
    fn feature_extractor_and_binarizer_fold_shapes() {
        let a = run_ml(
            "g (float[3,4] x, int64[2] i) => (float[3,2] z, float[3,4] b) {
                z = ai.onnx.ml.ArrayFeatureExtractor (x, i)
                b = ai.onnx.ml.Binarizer <threshold: float = 1> (x)
            }",
        );
        assert_eq!(types(&a), [Some("float[3, 2]".to_owned()), Some("float[3, 4]".to_owned())]);
    }
}
