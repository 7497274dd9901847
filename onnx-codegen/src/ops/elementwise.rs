//! Element-wise operators: unary float functions (Relu, Sigmoid, Exp, ...)
//! and broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow, Min, Max, Mod).

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    broadcast_shapes, broadcast_strides, invalid, is_num, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::cast as rt_cast;
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
        let values = t.to_f64s().or_else(|| match HostTensor::from_tensor(t)?.data {
            super::HostData::F16(v) => Some(v.into_iter().map(f64::from).collect()),
            super::HostData::Bf16(v) => Some(v.into_iter().map(f64::from).collect()),
            _ => None,
        });
        match values.as_deref() {
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
    /// Relu, LeakyRelu, Clip (bounds known at generation time), Gelu and
    /// HardSwish fuse into the product before them.
    fn as_activation(
        &self,
        node: &crate::ir::Node,
        input: &dyn Fn(usize) -> super::ScalarInput,
    ) -> Option<crate::ir::lowering::Activation> {
        use super::ScalarInput;
        use crate::ir::AttrValue;
        use crate::ir::lowering::Activation;
        let float = |name: &str, default: f32| match node.attr(name) {
            Some(AttrValue::Float(f)) => *f,
            _ => default,
        };
        let bound = |i: usize, default: f32| match input(i) {
            ScalarInput::Absent => Some(default),
            ScalarInput::Known(v) => Some(v),
            ScalarInput::Unknown => None,
        };
        match node.op.op_type.as_str() {
            "Relu" => Some(Activation::Relu),
            "LeakyRelu" => Some(Activation::LeakyRelu { alpha: float("alpha", 0.01) }),
            "Clip" if node.op.opset_version < 11 => Some(Activation::Clip {
                min: float("min", f32::NEG_INFINITY),
                max: float("max", f32::INFINITY),
            }),
            "Clip" => Some(Activation::Clip {
                min: bound(1, f32::NEG_INFINITY)?,
                max: bound(2, f32::INFINITY)?,
            }),
            "HardSwish" => Some(Activation::HardSwish),
            "Gelu" => match node.attr("approximate") {
                None => Some(Activation::Gelu),
                Some(AttrValue::String(s)) if s == b"none" => Some(Activation::Gelu),
                Some(AttrValue::String(s)) if s == b"tanh" => Some(Activation::GeluTanh),
                _ => None,
            },
            _ => None,
        }
    }

    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        if int_clip(cx, x.elem) {
            int_clip_bounds(cx, x.elem)?;
            return Ok(vec![x.clone()]);
        }
        if !super::is_float_num(x.elem) {
            return unsupported(format!("{} on {} tensors", cx.node.op.op_type, x.elem));
        }
        unary_op(cx)?;
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let elem = outputs.first().map(|t| t.elem).ok_or_else(|| no_output(cx))?;
        let runtime = clip_runtime(cx);
        if int_clip(cx, elem) {
            let bounds = int_clip_bounds(cx, elem)?;
            return Ok(Lowered::Kernel(Box::new(IntClipKernel { bounds, runtime })));
        }
        Ok(Lowered::Kernel(Box::new(UnaryKernel { op: unary_op(cx)?, elem, runtime })))
    }
}

fn no_output(cx: &NodeCx<'_>) -> OpError {
    OpError::Invalid(format!("{} has no output", cx.node.op.op_type))
}

/// Whether this node is Clip on integers (opset 12 on): lowered to
/// `max(x, min)` then `min(., max)` with the `Num` kernels.
fn int_clip(cx: &NodeCx<'_>, elem: ElemType) -> bool {
    cx.node.op.op_type == "Clip" && cx.version() >= 12 && super::is_int(elem)
}

/// Integer Clip's constant bounds as literals of the element type (`None`:
/// absent, or read at run time).
fn int_clip_bounds(cx: &NodeCx<'_>, elem: ElemType) -> OpResult<[Option<TokenStream>; 2]> {
    let bound = |i: usize| -> OpResult<Option<TokenStream>> {
        let Some(t) = cx.opt_input(i) else { return Ok(None) };
        if t.elem != elem || t.numel() != Some(1) {
            return invalid(format!("Clip bound (input {i}) must be one {elem} value, it is {t}"));
        }
        if cx.constant(i).is_none() {
            return Ok(None);
        }
        match cx.const_ints(i, "Clip bound")?.as_slice() {
            [v] => Ok(lit::int(i128::from(*v), elem)),
            _ => invalid(format!("Clip bound (input {i}) must hold one value")),
        }
    };
    Ok([bound(1)?, bound(2)?])
}

/// Clip on integer tensors: `y = min(max(x, lo), hi)` in place over a copy.
struct IntClipKernel {
    /// The constant bounds' literals.
    bounds: [Option<TokenStream>; 2],
    /// Which bounds are data read at run time.
    runtime: [bool; 2],
}

impl Kernel for IntClipKernel {
    fn eval(&self, _inputs: &[Option<&HostTensor>], _outputs: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(ElemType::Int64))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let y = &io.outputs[0];
        let copy = if io.in_place {
            quote!()
        } else {
            let x = &io.inputs[0];
            quote! {
                let x = #x;
                if x.len() != y.len() {
                    Err::<(), _>(#rt::Error::ShapeMismatch)?;
                }
                y.copy_from_slice(x);
            }
        };
        let steps = [(1usize, quote!(Max)), (2, quote!(Min))].into_iter().filter_map(|(i, op)| {
            let b = match (&self.bounds[i - 1], io.inputs.get(i).cloned().flatten()) {
                (_, Some(b)) if self.runtime[i - 1] => quote!(#b),
                (Some(l), _) => quote!(&[#l]),
                _ => return None,
            };
            Some(quote!(#rt::elementwise::accumulate(#rt::elementwise::Arith::#op, &[n], &[0], #b, y)?;))
        });
        quote! {{
            let y = #y;
            #copy
            let n = y.len();
            #(#steps)*
        }}
    }

    fn in_place(&self) -> Option<usize> {
        Some(0)
    }

    fn reads_input(&self, i: usize) -> bool {
        i == 0 || (i <= 2 && self.runtime[i - 1])
    }
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
        // f32 transcendentals take the vectorised entry points (a few ulp from
        // the exact ones); every other op stays on the exact kernel.
        let fast = matches!(
            self.op,
            Unary::Exp | Unary::Sigmoid | Unary::Tanh | Unary::Erf | Unary::Gelu | Unary::GeluTanh
        );
        let (f, f_in_place) = if self.elem == ElemType::Float && fast {
            (quote!(sunary), quote!(sunary_in_place))
        } else {
            (quote!(unary), quote!(unary_in_place))
        };
        if io.in_place {
            quote!(#rt::elementwise::#f_in_place(#op, #y);)
        } else {
            let x = &io.inputs[0];
            quote!(#rt::elementwise::#f(#op, #x, #y)?;)
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
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::Broadcast
    }

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
        if a.elem != b.elem && !pow_cast(cx, a.elem, b.elem) && !pow_int_float(cx, a.elem, b.elem) {
            return unsupported(format!(
                "{} of {} and {} tensors",
                cx.node.op.op_type, a.elem, b.elem
            ));
        }
        let b_dims = super::legacy_operand_dims(cx, &a.dims, &b.dims)?;
        let dims = broadcast_shapes(&[&a.dims, &b_dims])?;
        arith(cx)?;
        Ok(vec![a.with_dims(dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        let int_float = pow_int_float(cx, a.elem, b.elem);
        let cast_b = (a.elem != b.elem && !int_float).then(|| (b.elem, b.numel().unwrap_or(0)));
        let b_dims = super::legacy_operand_dims(cx, &a.dims, &b.dims)?;
        let (sa, sb) =
            (broadcast_strides(&a.dims, &out.dims), broadcast_strides(&b_dims, &out.dims));
        let (shape, strides) = super::coalesce_broadcast(&out.dims, [&sa, &sb]);
        Ok(Lowered::Kernel(Box::new(BinaryKernel {
            op: arith(cx)?,
            elem: out.elem,
            cast_b,
            float_exp: int_float.then_some(b.elem),
            strides,
            shape,
        })))
    }
}

/// Whether this is Pow of a float base and an exponent of another numeric
/// type: the exponent is converted to the base's type (exact for the
/// integers the tests use) and the power computed there, as the reference
/// computes it in the wider type and rounds to the base's.
fn pow_cast(cx: &NodeCx<'_>, base: ElemType, exp: ElemType) -> bool {
    cx.node.op.op_type == "Pow"
        && matches!(base, ElemType::Float | ElemType::Double)
        && is_num(exp)
        && !matches!(exp, ElemType::Float16 | ElemType::Bfloat16)
}

/// Whether this is Pow of an integer base and a float exponent. The
/// reference computes it in float64 (numpy promotes an integer and a float32
/// to float64) and converts the result to the base's type, truncating toward
/// zero as `Cast` does: the runtime's `pow_mixed`.
fn pow_int_float(cx: &NodeCx<'_>, base: ElemType, exp: ElemType) -> bool {
    cx.node.op.op_type == "Pow"
        && is_num(base)
        && !super::is_float_num(base)
        && matches!(exp, ElemType::Float | ElemType::Double)
}

struct BinaryKernel {
    op: Arith,
    elem: ElemType,
    /// Pow's exponent converted to `elem` first: its type and element count.
    cast_b: Option<(ElemType, usize)>,
    /// Pow of an integer base: the float exponent's type.
    float_exp: Option<ElemType>,
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

/// Integer-base, float-exponent Pow on the host: `B` the base type.
fn run_pow_int_float<B: Num + HostElem + rt_cast::CastElement>(
    k: &BinaryKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = Broadcast { shape: &k.shape, strides: [&k.strides[0], &k.strides[1]] };
    let a = slice::<B>(inputs.first().copied().flatten())?;
    let b = inputs.get(1).copied().flatten();
    let y = slice_mut::<B>(outputs.first_mut())?;
    match k.float_exp {
        Some(ElemType::Float) => rt_ew::pow_mixed(&p, a, slice::<f32>(b)?, y)?,
        Some(ElemType::Double) => rt_ew::pow_mixed(&p, a, slice::<f64>(b)?, y)?,
        other => return Err(EvalError::Type(other.unwrap_or(ElemType::Float))),
    }
    Ok(())
}

impl Kernel for BinaryKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if let Some((e, _)) = self.cast_b {
            return Err(EvalError::Type(e));
        }
        if self.float_exp.is_some() {
            return match self.elem {
                ElemType::Int8 => run_pow_int_float::<i8>(self, inputs, outputs),
                ElemType::Int16 => run_pow_int_float::<i16>(self, inputs, outputs),
                ElemType::Int32 => run_pow_int_float::<i32>(self, inputs, outputs),
                ElemType::Int64 => run_pow_int_float::<i64>(self, inputs, outputs),
                ElemType::Uint8 => run_pow_int_float::<u8>(self, inputs, outputs),
                ElemType::Uint16 => run_pow_int_float::<u16>(self, inputs, outputs),
                ElemType::Uint32 => run_pow_int_float::<u32>(self, inputs, outputs),
                ElemType::Uint64 => run_pow_int_float::<u64>(self, inputs, outputs),
                other => Err(EvalError::Type(other)),
            };
        }
        crate::by_num_type!(self.elem, run_binary(self, inputs, outputs))
    }

    fn scratch(&self) -> Option<TensorType> {
        self.cast_b.map(|(_, n)| TensorType::new(self.elem, vec![n]))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let op = proc_macro2::Ident::new(&format!("{:?}", self.op), proc_macro2::Span::call_site());
        let shape = lit::usizes(&self.shape);
        let (sa, sb) = (lit::isizes(&self.strides[0]), lit::isizes(&self.strides[1]));
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        if self.float_exp.is_some() {
            return quote! {
                #rt::elementwise::pow_mixed(
                    &#rt::elementwise::Broadcast { shape: #shape, strides: [#sa, #sb] },
                    #a, #b, #y,
                )?;
            };
        }
        if let (Some(_), Some(e)) = (self.cast_b, &io.scratch) {
            return quote! {{
                let e = #e;
                #rt::cast::cast(#b, &mut *e)?;
                #rt::elementwise::arith(
                    #rt::elementwise::Arith::#op,
                    &#rt::elementwise::Broadcast { shape: #shape, strides: [#sa, #sb] },
                    #a, e, #y,
                )?;
            }};
        }
        // f32 takes the vectorised entry point (the same operations, bit for
        // bit); constant folding keeps the generic kernel.
        let f = if self.elem == ElemType::Float { quote!(sarith) } else { quote!(arith) };
        quote! {
            #rt::elementwise::#f(
                #rt::elementwise::Arith::#op,
                &#rt::elementwise::Broadcast { shape: #shape, strides: [#sa, #sb] },
                #a, #b, #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{run, ty, types, unsupported};
    use crate::ops::{HostData, HostTensor};

    fn folded_f16(a: &crate::generate::Analysis) -> Vec<f32> {
        let v = a.model().graph.outputs[0];
        let t = a.inferred.constants[v.index()].as_ref().expect("output is folded");
        match HostTensor::from_tensor(t).expect("host form").data {
            HostData::F16(v) => v.into_iter().map(f32::from).collect(),
            other => panic!("expected float16, got {other:?}"),
        }
    }

    #[test]
    fn float16_arithmetic_rounds_each_operation() {
        // 1 + 2^-11 is halfway between two float16 values: ties to even give 1.
        // 4 / 3 in float16 is 1.3330078125 (1365 / 1024).
        let a = run(
            13,
            "g () => (float16[2] y) <float[2] af = {1, 1}, float[2] bf = {0.00048828125, 3}> {
                a = Cast <to = 10> (af)
                b = Cast <to = 10> (bf)
                s = Add (a, b)
                y = Div (s, b)
            }",
        );
        assert_eq!(types(&a), [ty("float16[2]")]);
        let v = folded_f16(&a);
        assert_eq!(v[1], 1.333_007_8);
        // (1 + 2^-11 -> 1) / 2^-11 = 2048 exactly.
        assert_eq!(v[0], 2048.0);
    }

    #[test]
    fn float16_unary_and_clip() {
        let a = run(
            13,
            "g () => (float16[3] y) <float[3] xf = {-2, 0.5, 9}, float lf = {0.25}, float hf = {4}> {
                x = Cast <to = 10> (xf)
                lo = Cast <to = 10> (lf)
                hi = Cast <to = 10> (hf)
                r = Relu (x)
                y = Clip (r, lo, hi)
            }",
        );
        assert_eq!(types(&a), [ty("float16[3]")]);
        assert_eq!(folded_f16(&a), [0.25, 0.5, 4.0]);
    }

    #[test]
    fn pow_of_an_integer_base_and_a_float_exponent() {
        // numpy: np.power(int32 [1, 2, 3, -8], float32 [0.5, -1, 2.5, 0.3333])
        // is float64 [1, 0.5, 15.588.., nan]; astype(int32) truncates the
        // finite values to [1, 0, 15]. Int64 with a double exponent likewise.
        let a = run(
            15,
            "g () => (int32[3] y, int64[2] z)
                <int32[3] a = {1, 2, 3}, float[3] b = {0.5, -1, 2.5},
                 int64[2] c = {10, 7}, double[2] d = {-2, 1.5}> {
                y = Pow (a, b)
                z = Pow (c, d)
            }",
        );
        assert_eq!(types(&a), [ty("int32[3]"), ty("int64[2]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        assert_eq!(crate::ops::testing::value(&a, 0), [1.0, 0.0, 15.0]);
        // 10^-2 = 0.01 -> 0; 7^1.5 = 18.52.. -> 18.
        assert_eq!(crate::ops::testing::value(&a, 1), [0.0, 18.0]);
        let a = run(15, "g (int32[2] x, float e) => (int32[2] y) { y = Pow (x, e) }");
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }

    #[test]
    fn integer_clip_from_opset_12() {
        let a = run(
            13,
            "g (int8[3] x, int8 lo) => (int8[3] y) {
                y = Clip (x, lo)
            }",
        );
        assert_eq!(types(&a), [ty("int8[3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (int8[3] x) => (int8[3] y) {
                y = Clip (x)
            }",
        );
        assert_eq!(unsupported(&a), ["Clip on int8 tensors"]);
    }
}
