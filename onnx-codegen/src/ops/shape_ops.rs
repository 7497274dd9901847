//! Operators that only change how data is seen, or whose outputs are known
//! from types alone:
//! - views (Identity, Reshape, Flatten, Squeeze, Unsqueeze): the output is
//!   the input's bytes with another shape, so they cost nothing at run time;
//! - Constant, Shape and Size: their outputs are constants.

use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis,
    invalid, unsupported,
};
use crate::ir::{AttrValue, ElemType, Tensor, TensorData, TensorType};
use bytes::Bytes;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Identity" | "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => Some(&ViewRule),
        "Constant" => Some(&ConstantRule),
        "Shape" | "Size" => Some(&ShapeRule),
        _ => None,
    }
}

struct ViewRule;

/// The output dims of a view op.
fn view_dims(cx: &NodeCx<'_>) -> OpResult<Vec<usize>> {
    let x = cx.input(0)?;
    let dims = &x.dims;
    if runtime_view(cx) {
        let Some(t) = cx.declared_output(0) else {
            return unsupported(format!(
                "{}'s input 1 is known only at run time and the model does not declare the output's shape",
                cx.node.op.op_type
            ));
        };
        if t.elem != x.elem || t.numel() != x.numel() {
            return invalid(format!(
                "{} output is declared as {t}; input is {x}",
                cx.node.op.op_type
            ));
        }
        return Ok(t.dims.clone());
    }
    match cx.node.op.op_type.as_str() {
        "Identity" => Ok(dims.clone()),
        "Reshape" => reshape_dims(cx, dims),
        "Flatten" => {
            // Flatten's axis is in [-rank, rank]: rank itself means "all outer".
            let rank = dims.len();
            let raw = cx.int_or("axis", 1);
            let a = if raw == rank as i64 { rank } else { axis(raw, rank, "Flatten axis")? };
            let outer: usize = dims[..a].iter().product();
            let inner: usize = dims[a..].iter().product();
            Ok(vec![outer, inner])
        }
        "Squeeze" => {
            let axes = axes_of(cx)?;
            let Some(axes) = axes else {
                return Ok(dims.iter().copied().filter(|&d| d != 1).collect());
            };
            let mut drop = vec![false; dims.len()];
            for a in axes {
                let a = axis(a, dims.len(), "Squeeze axis")?;
                if dims[a] != 1 {
                    return invalid(format!("Squeeze axis {a} has size {}, not 1", dims[a]));
                }
                drop[a] = true;
            }
            Ok(dims.iter().zip(&drop).filter(|(_, d)| !**d).map(|(&v, _)| v).collect())
        }
        "Unsqueeze" => {
            let Some(axes) = axes_of(cx)? else {
                return invalid("Unsqueeze needs axes");
            };
            let rank = dims.len() + axes.len();
            let mut insert = vec![false; rank];
            for a in axes {
                let a = axis(a, rank, "Unsqueeze axis")?;
                if insert[a] {
                    return invalid(format!("Unsqueeze axis {a} is given twice"));
                }
                insert[a] = true;
            }
            let mut rest = dims.iter();
            Ok(insert.iter().map(|&ins| if ins { 1 } else { *rest.next().unwrap_or(&1) }).collect())
        }
        other => unsupported(format!("{other} is not a view")),
    }
}

/// Squeeze/Unsqueeze axes: an attribute before opset 13, an input after.
fn axes_of(cx: &NodeCx<'_>) -> OpResult<Option<Vec<i64>>> {
    if cx.version() < 13 {
        return Ok(cx.ints("axes"));
    }
    if cx.opt_input(1).is_none() {
        return Ok(None);
    }
    cx.const_ints(1, "axes").map(Some)
}

/// Reshape's output dims: 0 copies the input dim (unless `allowzero`), -1 is
/// inferred from the element count.
fn reshape_dims(cx: &NodeCx<'_>, dims: &[usize]) -> OpResult<Vec<usize>> {
    let shape = if cx.version() < 5 {
        cx.ints("shape").ok_or_else(|| super::OpError::Invalid("Reshape needs shape".into()))?
    } else {
        cx.const_ints(1, "shape")?
    };
    let allow_zero = cx.int_or("allowzero", 0) != 0;
    let total: usize = dims.iter().product();
    let mut out = Vec::with_capacity(shape.len());
    let mut infer_at = None;
    for (i, &s) in shape.iter().enumerate() {
        match s {
            -1 if infer_at.is_none() => {
                infer_at = Some(i);
                out.push(1);
            }
            -1 => return invalid("Reshape shape has more than one -1"),
            0 if !allow_zero => match dims.get(i) {
                Some(&d) => out.push(d),
                None => {
                    return invalid(format!("Reshape shape copies dim {i}, which the input lacks"));
                }
            },
            s if s >= 0 => out.push(usize::try_from(s).unwrap_or(usize::MAX)),
            s => return invalid(format!("Reshape shape has a negative size {s}")),
        }
    }
    let known: usize = out.iter().product();
    if let Some(i) = infer_at {
        if known == 0 || !total.is_multiple_of(known) {
            return invalid(format!("Reshape of {dims:?} to {shape:?} does not fit"));
        }
        out[i] = total / known;
    }
    if out.iter().product::<usize>() != total {
        return invalid(format!(
            "Reshape of {dims:?} ({total} elements) to {shape:?} does not fit"
        ));
    }
    Ok(out)
}

impl OpRule for ViewRule {
    /// Identity keeps its input's shape; the other views change it.
    fn shape_rule(&self, node: &crate::ir::Node) -> super::ShapeRule {
        if node.op.op_type == "Identity" {
            super::ShapeRule::SameAsInput0
        } else {
            super::ShapeRule::Other
        }
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        Ok(vec![x.with_dims(view_dims(cx)?)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        if !runtime_view(cx) {
            return Ok(Lowered::Alias);
        }
        let x = cx.input(0)?;
        let out = outputs.first().map_or_else(|| x.dims.clone(), |t| t.dims.clone());
        Ok(Lowered::Kernel(Box::new(ViewCheckKernel {
            op: cx.node.op.op_type.clone(),
            elem: x.elem,
            shape: x.dims.clone(),
            out,
            allow_zero: cx.int_or("allowzero", 0) != 0,
        })))
    }
}

/// Whether the node is a Reshape, Squeeze or Unsqueeze whose shape or axes
/// (input 1) are data read at run time.
fn runtime_view(cx: &NodeCx<'_>) -> bool {
    let from = match cx.node.op.op_type.as_str() {
        "Reshape" => 5,
        "Squeeze" | "Unsqueeze" => 13,
        _ => return false,
    };
    cx.version() >= from && cx.opt_input(1).is_some() && cx.constant(1).is_none()
}

/// A view whose shape-like input is data: the output has the declared shape,
/// and the generated code checks the values against it. The framework's
/// views ([`Lowered::Alias`]) run no code, so this is a kernel: it runs in
/// place (output 0 shares input 0's storage: only the check runs) when the
/// planner allows, and otherwise copies the bytes after the check.
struct ViewCheckKernel {
    op: String,
    elem: ElemType,
    shape: Vec<usize>,
    out: Vec<usize>,
    allow_zero: bool,
}

impl Kernel for ViewCheckKernel {
    /// Never folded: its shape-like input is not a constant.
    fn eval(&self, _inputs: &[Option<&HostTensor>], _outputs: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn in_place(&self) -> Option<usize> {
        Some(0)
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let c = quote!(#rt::check);
        let shape = crate::emit::lit::usizes(&self.shape);
        let out = crate::emit::lit::usizes(&self.out);
        let v = io.inputs.get(1).cloned().flatten().unwrap_or_default();
        let check = match self.op.as_str() {
            "Reshape" => {
                let z = self.allow_zero;
                quote!(#c::reshape(#v, #shape, #z, #out)?;)
            }
            "Squeeze" => quote!(#c::squeeze(#v, #shape, #out)?;),
            _ => quote!(#c::unsqueeze(#v, #shape, #out)?;),
        };
        if io.in_place {
            // The output is the input's storage: only the check runs.
            let y = io.outputs.first().cloned().flatten().unwrap_or_default();
            return quote!(#check let _ = #y;);
        }
        let x = io.inputs.first().cloned().flatten().unwrap_or_default();
        let y = io.outputs.first().cloned().flatten().unwrap_or_default();
        let n = crate::emit::lit::usize_lit(self.out.iter().product());
        quote! {
            #check
            #rt::layout::concat_part(1, #n, 0, #x, #y)?;
        }
    }
}

struct ConstantRule;

/// Constant's value, from whichever attribute holds it.
fn constant_value(cx: &NodeCx<'_>) -> OpResult<Tensor> {
    let name = cx.node.outputs.first().map(|_| "constant").unwrap_or("constant");
    let node = cx.node;
    let Some(attr) = node.attributes.first() else {
        return invalid("Constant has no value attribute");
    };
    let floats = |elem: ElemType, dims: Vec<u64>, bytes: Vec<u8>| Tensor {
        name: name.to_owned(),
        elem,
        dims,
        data: TensorData::Bytes(Bytes::from(bytes)),
    };
    Ok(match (&*attr.name, &attr.value) {
        ("value", AttrValue::Tensor(t)) => t.clone(),
        ("value_float", AttrValue::Float(v)) => {
            floats(ElemType::Float, vec![], v.to_le_bytes().to_vec())
        }
        ("value_floats", AttrValue::Floats(v)) => floats(
            ElemType::Float,
            vec![v.len() as u64],
            v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ),
        ("value_int", AttrValue::Int(v)) => Tensor::from_i64s(name, vec![], &[*v]),
        ("value_ints", AttrValue::Ints(v)) => Tensor::from_i64s(name, vec![v.len() as u64], v),
        (other, _) => return unsupported(format!("Constant with attribute '{other}'")),
    })
}

impl OpRule for ConstantRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let t = constant_value(cx)?;
        let ty = t.tensor_type().ok_or_else(|| {
            super::OpError::Invalid("Constant's value has dims too large for this machine".into())
        })?;
        Ok(vec![ty])
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        unsupported("Constant is folded, never run")
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        Ok(Some(vec![constant_value(cx)?]))
    }
}

struct ShapeRule;

impl ShapeRule {
    fn value(cx: &NodeCx<'_>) -> OpResult<Vec<i64>> {
        let dims: Vec<i64> = cx.input(0)?.dims.iter().map(|&d| d as i64).collect();
        if cx.node.op.op_type == "Size" {
            return Ok(vec![dims.iter().product()]);
        }
        let rank = dims.len() as i64;
        let clamp = |v: i64| if v < 0 { (v + rank).max(0) } else { v.min(rank) } as usize;
        let start = clamp(cx.int_or("start", 0));
        let end = clamp(cx.int_or("end", rank));
        Ok(dims.get(start..end.max(start)).unwrap_or_default().to_vec())
    }
}

impl OpRule for ShapeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let v = Self::value(cx)?;
        let dims = if cx.node.op.op_type == "Size" { vec![] } else { vec![v.len()] };
        Ok(vec![TensorType::new(ElemType::Int64, dims)])
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        unsupported("Shape and Size are folded, never run")
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        let v = Self::value(cx)?;
        let dims =
            outputs.first().map(|t| t.dims.iter().map(|&d| d as u64).collect()).unwrap_or_default();
        Ok(Some(vec![Tensor::from_i64s("shape", dims, &v)]))
    }
}

#[cfg(test)]
mod tests {
    use crate::generate::{Analysis, Options, analyze};

    fn run(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("model parses");
        analyze(&model, &Options::default()).expect("model is valid")
    }

    fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> = a.inferred.errors.iter().map(|d| d.message.clone()).collect();
        out.extend(a.inferred.unsupported.iter().map(|u| u.reason.clone()));
        out
    }

    fn kernels(a: &Analysis) -> usize {
        a.inferred.steps.iter().filter(|s| matches!(s.lowered, super::Lowered::Kernel(_))).count()
    }

    #[test]
    fn views_with_shapes_given_as_data_use_the_declared_shape() {
        let a = run(18, "g (float[2,3] x, int64[2] s) => (float[3,2] y) { y = Reshape (x, s) }");
        assert_eq!(problems(&a), Vec::<String>::new());
        assert_eq!(kernels(&a), 1);
        let a =
            run(18, "g (float[2,3] x, int64[1] s) => (float[2,1,3] y) { y = Unsqueeze (x, s) }");
        assert_eq!(problems(&a), Vec::<String>::new());
        let a = run(18, "g (float[1,3] x, int64[1] s) => (float[3] y) { y = Squeeze (x, s) }");
        assert_eq!(problems(&a), Vec::<String>::new());
        // Known shapes stay views (no code).
        let a = run(
            18,
            "g (float[2,3] x) => (float[3,2] y) <int64[2] s = {3, 2}> { y = Reshape (x, s) }",
        );
        assert_eq!((problems(&a), kernels(&a)), (Vec::<String>::new(), 0));
    }

    #[test]
    fn views_with_shapes_given_as_data_need_a_fitting_declaration() {
        let a = run(18, "g (float[2,3] x, int64[2] s) => (float[N,2] y) { y = Reshape (x, s) }");
        assert!(problems(&a)[0].contains("known only at run time"), "{:?}", problems(&a));
        let a = run(18, "g (float[2,3] x, int64[2] s) => (float[4,2] y) { y = Reshape (x, s) }");
        assert!(problems(&a)[0].contains("declared as"), "{:?}", problems(&a));
    }
}
