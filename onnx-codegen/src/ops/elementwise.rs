//! Element-wise operators: unary float functions (Relu, Sigmoid, Exp, ...)
//! and broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow, Min, Max, Mod).

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    broadcast_shapes, broadcast_strides, invalid, is_num, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::elementwise::{self as rt_ew, Arith, Broadcast, Unary};
use onnx_codegen_runtime::num::{Float, Num};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is an element-wise operator handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Relu" | "LeakyRelu" | "Sigmoid" | "HardSigmoid" | "HardSwish" | "Tanh" | "Erf" | "Exp"
        | "Log" | "Sqrt" | "Neg" | "Abs" | "Reciprocal" | "Floor" | "Ceil" | "Round" | "Sign"
        | "Sin" | "Cos" | "Tan" | "Asin" | "Acos" | "Atan" | "Sinh" | "Cosh" | "Asinh"
        | "Acosh" | "Atanh" | "Softplus" | "Softsign" | "Gelu" | "Elu" | "Selu"
        | "ThresholdedRelu" | "Clip" => Some(&UnaryRule),
        "Add" | "Sub" | "Mul" | "Div" | "Pow" | "Min" | "Max" | "Mod" => Some(&BinaryRule),
        _ => None,
    }
}

struct UnaryRule;

/// The unary function of a node, its float parameters kept as `f64`.
fn unary_op(cx: &NodeCx<'_>) -> OpResult<Unary<f64>> {
    let f = |name: &str, default: f32| f64::from(cx.float_or(name, default));
    Ok(match cx.node.op.op_type.as_str() {
        "Relu" => Unary::Relu,
        "LeakyRelu" => Unary::LeakyRelu { alpha: f("alpha", 0.01) },
        "Sigmoid" => Unary::Sigmoid,
        "HardSigmoid" => Unary::HardSigmoid { alpha: f("alpha", 0.2), beta: f("beta", 0.5) },
        "HardSwish" => Unary::HardSwish,
        "Tanh" => Unary::Tanh,
        "Erf" => Unary::Erf,
        "Exp" => Unary::Exp,
        "Log" => Unary::Log,
        "Sqrt" => Unary::Sqrt,
        "Neg" => Unary::Neg,
        "Abs" => Unary::Abs,
        "Reciprocal" => Unary::Reciprocal,
        "Floor" => Unary::Floor,
        "Ceil" => Unary::Ceil,
        "Round" => Unary::Round,
        "Sign" => Unary::Sign,
        "Sin" => Unary::Sin,
        "Cos" => Unary::Cos,
        "Tan" => Unary::Tan,
        "Asin" => Unary::Asin,
        "Acos" => Unary::Acos,
        "Atan" => Unary::Atan,
        "Sinh" => Unary::Sinh,
        "Cosh" => Unary::Cosh,
        "Asinh" => Unary::Asinh,
        "Acosh" => Unary::Acosh,
        "Atanh" => Unary::Atanh,
        "Softplus" => Unary::Softplus,
        "Softsign" => Unary::Softsign,
        "Gelu" => match cx.string_or("approximate", "none").as_str() {
            "none" => Unary::Gelu,
            "tanh" => Unary::GeluTanh,
            other => {
                return invalid(format!("Gelu approximation '{other}' is not 'none' or 'tanh'"));
            }
        },
        "Elu" => Unary::Elu { alpha: f("alpha", 1.0) },
        "Selu" => Unary::Selu { alpha: f("alpha", 1.673_263_2), gamma: f("gamma", 1.050_701) },
        "ThresholdedRelu" => Unary::ThresholdedRelu { alpha: f("alpha", 1.0) },
        "Clip" => clip_bounds(cx)?,
        other => return unsupported(format!("{other} is not a unary function")),
    })
}

/// Clip's bounds: attributes before opset 11, optional constant inputs after.
fn clip_bounds(cx: &NodeCx<'_>) -> OpResult<Unary<f64>> {
    if cx.version() < 11 {
        let min = cx.float_or("min", f32::NEG_INFINITY);
        let max = cx.float_or("max", f32::INFINITY);
        return Ok(Unary::Clip { min: f64::from(min), max: f64::from(max) });
    }
    let bound = |i: usize, default: f64| -> OpResult<f64> {
        if cx.opt_input(i).is_none() {
            return Ok(default);
        }
        let Some(t) = cx.constant(i) else {
            // Read at run time (see `clip_runtime`); the default stands in.
            if cx.opt_input(i).and_then(TensorType::numel) != Some(1) {
                return invalid(format!("Clip bound (input {i}) must hold one value"));
            }
            return Ok(default);
        };
        match t.to_f64s().as_deref() {
            Some([v]) => Ok(*v),
            _ => invalid(format!("Clip bound (input {i}) must hold one value")),
        }
    };
    Ok(Unary::Clip { min: bound(1, f64::NEG_INFINITY)?, max: bound(2, f64::INFINITY)? })
}

/// Which of Clip's bounds (inputs 1 and 2) are data read at run time.
fn clip_runtime(cx: &NodeCx<'_>) -> [bool; 2] {
    let rt = |i: usize| {
        cx.node.op.op_type == "Clip"
            && cx.version() >= 11
            && cx.opt_input(i).is_some()
            && cx.constant(i).is_none()
    };
    [rt(1), rt(2)]
}

impl OpRule for UnaryRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        if !super::is_float_num(x.elem) {
            return unsupported(format!("{} on {} tensors", cx.node.op.op_type, x.elem));
        }
        unary_op(cx)?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = outputs.first().map(|t| t.elem).ok_or_else(|| no_output(cx))?;
        let runtime = clip_runtime(cx);
        Ok(Lowered::Kernel(Box::new(UnaryKernel { op: unary_op(cx)?, elem, runtime })))
    }
}

fn no_output(cx: &NodeCx<'_>) -> OpError {
    OpError::Invalid(format!("{} has no output", cx.node.op.op_type))
}

struct UnaryKernel {
    op: Unary<f64>,
    elem: ElemType,
    /// Clip's bounds (inputs 1 and 2) read at run time instead of `op`'s.
    runtime: [bool; 2],
}

/// `Unary::Name { field: literal, ... }` in generated code.
pub(super) fn unary_tokens(op: Unary<f64>, elem: ElemType, rt: &TokenStream) -> TokenStream {
    let l = |v: f64| lit::float_in(v, elem, rt);
    let path = quote!(#rt::elementwise::Unary);
    match op {
        Unary::LeakyRelu { alpha } => {
            let a = l(alpha);
            quote!(#path::LeakyRelu { alpha: #a })
        }
        Unary::Clip { min, max } => {
            let (a, b) = (l(min), l(max));
            quote!(#path::Clip { min: #a, max: #b })
        }
        Unary::HardSigmoid { alpha, beta } => {
            let (a, b) = (l(alpha), l(beta));
            quote!(#path::HardSigmoid { alpha: #a, beta: #b })
        }
        Unary::Elu { alpha } => {
            let a = l(alpha);
            quote!(#path::Elu { alpha: #a })
        }
        Unary::Selu { alpha, gamma } => {
            let (a, g) = (l(alpha), l(gamma));
            quote!(#path::Selu { alpha: #a, gamma: #g })
        }
        Unary::ThresholdedRelu { alpha } => {
            let a = l(alpha);
            quote!(#path::ThresholdedRelu { alpha: #a })
        }
        Unary::Affine { alpha, beta } => {
            let (a, b) = (l(alpha), l(beta));
            quote!(#path::Affine { alpha: #a, beta: #b })
        }
        Unary::ScaledTanh { alpha, beta } => {
            let (a, b) = (l(alpha), l(beta));
            quote!(#path::ScaledTanh { alpha: #a, beta: #b })
        }
        other => {
            // A unit variant: its name is its Debug form.
            let name =
                proc_macro2::Ident::new(&format!("{other:?}"), proc_macro2::Span::call_site());
            quote!(#path::#name)
        }
    }
}

fn slice<T: HostElem>(t: Option<&HostTensor>) -> Result<&[T], EvalError> {
    t.and_then(|t| t.get::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

fn slice_mut<T: HostElem>(t: Option<&mut HostTensor>) -> Result<&mut [T], EvalError> {
    t.and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

fn run_unary<T: Float + HostElem>(
    op: Unary<f64>,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = slice::<T>(inputs.first().copied().flatten())?;
    let y = slice_mut::<T>(outputs.first_mut())?;
    rt_ew::unary(op.map(T::from_f64), x, y)?;
    Ok(())
}

impl Kernel for UnaryKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.runtime.contains(&true) {
            // Never folded: a bound is not a constant.
            return Err(EvalError::Type(self.elem));
        }
        crate::by_float_type!(self.elem, run_unary(self.op, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let mut op = unary_tokens(self.op, self.elem, rt);
        if let (Unary::Clip { min, max }, true) = (self.op, self.runtime.contains(&true)) {
            let bound = |i: usize, v: f64| match io.inputs.get(i).cloned().flatten() {
                Some(b) if self.runtime[i - 1] => quote!(#rt::check::scalar(#b)?),
                _ => lit::float_in(v, self.elem, rt),
            };
            let (a, b) = (bound(1, min), bound(2, max));
            op = quote!(#rt::elementwise::Unary::Clip { min: #a, max: #b });
        }
        let y = &io.outputs[0];
        if io.in_place {
            quote!(#rt::elementwise::unary_in_place(#op, #y);)
        } else {
            let x = &io.inputs[0];
            quote!(#rt::elementwise::unary(#op, #x, #y)?;)
        }
    }

    fn in_place(&self) -> Option<usize> {
        Some(0)
    }

    /// Clip's bounds are part of the function, fixed at generation time,
    /// unless they are data.
    fn reads_input(&self, i: usize) -> bool {
        i == 0 || (i <= 2 && self.runtime[i - 1])
    }
}

struct BinaryRule;

fn arith(cx: &NodeCx<'_>) -> OpResult<Arith> {
    Ok(match cx.node.op.op_type.as_str() {
        "Add" => Arith::Add,
        "Sub" => Arith::Sub,
        "Mul" => Arith::Mul,
        "Div" => Arith::Div,
        "Pow" => Arith::Pow,
        "Min" => Arith::Min,
        "Max" => Arith::Max,
        "Mod" if cx.int_or("fmod", 0) != 0 => Arith::Fmod,
        "Mod" => Arith::Mod,
        other => return unsupported(format!("{other} is not binary arithmetic")),
    })
}

impl OpRule for BinaryRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if cx.inputs.len() != 2 {
            return unsupported(format!(
                "{} with {} inputs (only two are supported)",
                cx.node.op.op_type,
                cx.inputs.len()
            ));
        }
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        if !is_num(a.elem) {
            return unsupported(format!("{} on {} tensors", cx.node.op.op_type, a.elem));
        }
        if a.elem != b.elem {
            return unsupported(format!(
                "{} of {} and {} tensors",
                cx.node.op.op_type, a.elem, b.elem
            ));
        }
        if cx.version() < 7 && cx.node.attr("broadcast").is_some() {
            return unsupported("legacy broadcasting (opset < 7, 'broadcast' attribute)");
        }
        let dims = broadcast_shapes(&[&a.dims, &b.dims])?;
        arith(cx)?;
        Ok(vec![a.with_dims(dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        Ok(Lowered::Kernel(Box::new(BinaryKernel {
            op: arith(cx)?,
            elem: out.elem,
            strides: [broadcast_strides(&a.dims, &out.dims), broadcast_strides(&b.dims, &out.dims)],
            shape: out.dims.clone(),
        })))
    }
}

struct BinaryKernel {
    op: Arith,
    elem: ElemType,
    shape: Vec<usize>,
    strides: [Vec<isize>; 2],
}

fn run_binary<T: Num + HostElem>(
    k: &BinaryKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = Broadcast { shape: &k.shape, strides: [&k.strides[0], &k.strides[1]] };
    let a = slice::<T>(inputs.first().copied().flatten())?;
    let b = slice::<T>(inputs.get(1).copied().flatten())?;
    rt_ew::arith(k.op, &p, a, b, slice_mut::<T>(outputs.first_mut())?)?;
    Ok(())
}

impl Kernel for BinaryKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_binary(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let op = proc_macro2::Ident::new(&format!("{:?}", self.op), proc_macro2::Span::call_site());
        let shape = lit::usizes(&self.shape);
        let (sa, sb) = (lit::isizes(&self.strides[0]), lit::isizes(&self.strides[1]));
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote! {
            #rt::elementwise::arith(
                #rt::elementwise::Arith::#op,
                &#rt::elementwise::Broadcast { shape: #shape, strides: [#sa, #sb] },
                #a, #b, #y,
            )?;
        }
    }
}
