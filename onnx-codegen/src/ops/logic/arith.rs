//! Sum, Mean, Max and Min with any number of inputs, and Neg, Abs and Sign
//! on integers: the forms of these element-wise names that
//! `ops::elementwise` leaves out.

use super::{Plan, host_in, host_out, ident, io_in, io_out, is_float, no_output, op};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    broadcast_shapes, invalid, is_int, is_num, unsupported,
};
use onnx_codegen_runtime::elementwise::{self as rt_ew, Arith, NumUnary};
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

// ---------------------------------------------------------------------------
// Sum, Mean, Max, Min with any number of inputs.

pub(super) struct VariadicRule;

/// The element-wise rule for this node, when it takes the node (two inputs
/// for Max/Min, float Neg/Abs/Sign); `None` when this family handles it.
fn elementwise_rule(cx: &NodeCx<'_>) -> Option<&'static dyn OpRule> {
    let theirs = crate::ops::elementwise::rule(op(cx))?;
    // Their kernels need the runtime's `Num` (no float16/bfloat16).
    if cx.inputs.iter().flatten().any(|t| !is_num(t.elem)) {
        return None;
    }
    match theirs.infer(cx) {
        Err(OpError::Unsupported(_)) => None,
        _ => Some(theirs),
    }
}

fn variadic_op(cx: &NodeCx<'_>) -> OpResult<Arith> {
    Ok(match op(cx) {
        "Sum" | "Mean" => Arith::Add,
        "Max" => Arith::Max,
        "Min" => Arith::Min,
        other => return unsupported(format!("{other} is not a variadic operator")),
    })
}

fn variadic_inputs<'a>(cx: &NodeCx<'a>) -> OpResult<Vec<&'a TensorType>> {
    if cx.inputs.is_empty() {
        return invalid(format!("{} needs at least one input", op(cx)));
    }
    let ins = (0..cx.inputs.len()).map(|i| cx.input(i)).collect::<OpResult<Vec<_>>>()?;
    let elem = ins[0].elem;
    if let Some(t) = ins.iter().find(|t| t.elem != elem) {
        return invalid(format!("{} of {} and {} tensors", op(cx), elem, t.elem));
    }
    Ok(ins)
}

impl OpRule for VariadicRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::Broadcast
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if let Some(r) = elementwise_rule(cx) {
            return r.infer(cx);
        }
        variadic_op(cx)?;
        let ins = variadic_inputs(cx)?;
        let elem = ins[0].elem;
        let floats_only = matches!(op(cx), "Sum" | "Mean");
        if !is_num(elem) || (floats_only && is_int(elem)) {
            if is_float(elem) {
                return unsupported(format!("{} on {elem} tensors", op(cx)));
            }
            return invalid(format!("{} is not defined on {elem} tensors", op(cx)));
        }
        let shapes: Vec<&[usize]> = ins.iter().map(|t| t.dims.as_slice()).collect();
        if cx.version() < 8 && shapes.iter().any(|s| *s != shapes[0]) {
            return invalid(format!(
                "{} before opset 8 does not broadcast; its inputs have different shapes",
                op(cx)
            ));
        }
        let dims = broadcast_shapes(&shapes)?;
        Ok(vec![TensorType::new(elem, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        if let Some(r) = elementwise_rule(cx) {
            return r.lower(cx, outputs);
        }
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let ins = variadic_inputs(cx)?;
        Ok(Lowered::Kernel(Box::new(VariadicKernel {
            op: variadic_op(cx)?,
            mean: op(cx) == "Mean",
            elem: out.elem,
            plan: Plan::new(&ins, &out.dims),
        })))
    }
}

/// Input 0 broadcast into the output, then every other input folded in with
/// [`rt_ew::accumulate`] (left to right, as numpy's reduce does), and for
/// Mean a division by the input count.
struct VariadicKernel {
    op: Arith,
    mean: bool,
    elem: ElemType,
    plan: Plan,
}

fn run_variadic<T: HostElem + Num>(
    k: &VariadicKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let y = host_out::<T>(outputs)?;
    let shape = &k.plan.shape;
    onnx_codegen_runtime::layout::expand(shape, k.plan.s(0), host_in::<T>(inputs, 0)?, y)?;
    for i in 1..k.plan.strides.len() {
        rt_ew::accumulate(k.op, shape, k.plan.s(i), host_in::<T>(inputs, i)?, y)?;
    }
    if k.mean {
        let n = [T::from_usize(k.plan.strides.len())];
        let zeros = vec![0isize; shape.len()];
        rt_ew::accumulate(Arith::Div, shape, &zeros, &n, y)?;
    }
    Ok(())
}

impl Kernel for VariadicKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_variadic(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let y = io_out(io);
        let shape = lit::usizes(&self.plan.shape);
        let s0 = lit::isizes(self.plan.s(0));
        let x0 = io_in(io, 0);
        let op = ident(&format!("{:?}", self.op));
        let rest = (1..self.plan.strides.len()).map(|i| {
            let (s, x) = (lit::isizes(self.plan.s(i)), io_in(io, i));
            quote!(#rt::elementwise::accumulate(#rt::elementwise::Arith::#op, #shape, #s, #x, #y)?;)
        });
        let mean = if self.mean {
            let n = lit::float_in(self.plan.strides.len() as f64, self.elem, rt);
            let zeros = lit::isizes(&vec![0; self.plan.shape.len()]);
            quote!(#rt::elementwise::accumulate(#rt::elementwise::Arith::Div, #shape, #zeros, &[#n], #y)?;)
        } else {
            quote!()
        };
        quote! {
            #rt::layout::expand(#shape, #s0, #x0, #y)?;
            #(#rest)*
            #mean
        }
    }
}

// ---------------------------------------------------------------------------
// Neg, Abs, Sign on integers.

pub(super) struct IntUnaryRule;

fn num_unary(cx: &NodeCx<'_>) -> OpResult<NumUnary<i64>> {
    Ok(match op(cx) {
        "Neg" => NumUnary::Neg,
        "Abs" => NumUnary::Abs,
        "Sign" => NumUnary::Sign,
        other => return unsupported(format!("{other} is not an integer unary operator")),
    })
}

impl OpRule for IntUnaryRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if let Some(r) = elementwise_rule(cx) {
            return r.infer(cx);
        }
        let x = cx.input(0)?;
        let f = num_unary(cx)?;
        let unsigned = matches!(
            x.elem,
            ElemType::Uint8 | ElemType::Uint16 | ElemType::Uint32 | ElemType::Uint64
        );
        if f == NumUnary::Neg && unsigned {
            return invalid(format!("Neg is not defined on {} tensors", x.elem));
        }
        if !is_int(x.elem) {
            return unsupported(format!("{} on {} tensors", op(cx), x.elem));
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        if let Some(r) = elementwise_rule(cx) {
            return r.lower(cx, outputs);
        }
        Ok(Lowered::Kernel(Box::new(IntUnaryKernel {
            op: num_unary(cx)?,
            elem: cx.input(0)?.elem,
        })))
    }
}

struct IntUnaryKernel {
    op: NumUnary<i64>,
    elem: ElemType,
}

fn run_int_unary<T: HostElem + Num>(
    op: NumUnary<i64>,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let op = match op {
        NumUnary::Neg => NumUnary::Neg,
        NumUnary::Abs => NumUnary::Abs,
        NumUnary::Sign => NumUnary::Sign,
        _ => return Err(EvalError::Type(ElemType::Int64)),
    };
    rt_ew::num_unary::<T>(op, host_in::<T>(inputs, 0)?, host_out::<T>(outputs)?)?;
    Ok(())
}

impl Kernel for IntUnaryKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_int_type!(self.elem, run_int_unary(self.op, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let op = ident(&format!("{:?}", self.op));
        let y = io_out(io);
        if io.in_place {
            quote!(#rt::elementwise::num_unary_in_place(#rt::elementwise::NumUnary::#op, #y);)
        } else {
            let x = io_in(io, 0);
            quote!(#rt::elementwise::num_unary(#rt::elementwise::NumUnary::#op, #x, #y)?;)
        }
    }

    fn in_place(&self) -> Option<usize> {
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::logic::testing::{clean, problems, run, ty, value};

    #[test]
    fn variadic_ops_take_any_number_of_inputs() {
        let a = run(
            13,
            "g (float[3] x, float[2,3] y, float[1] w, int32[2] i) => (float[2,3] s) {
               s = Sum (x, y, w)
               m = Mean (x)
               mx = Max (i)
               mn = Min (w, y, x)
               two = Max (x, y)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "s"), "float[2, 3]");
        assert_eq!(ty(&a, "m"), "float[3]");
        assert_eq!(ty(&a, "mx"), "int32[2]");
        assert_eq!(ty(&a, "mn"), "float[2, 3]");
        assert_eq!(ty(&a, "two"), "float[2, 3]");
        let a = run(
            13,
            "g () => (float[3] s) {
               a = Constant <value: tensor = float[3] {1, 2, 3}> ()
               b = Constant <value: tensor = float[1] {10}> ()
               c = Constant <value: tensor = float[3] {100, 200, 300}> ()
               s = Sum (a, b, c)
               m = Mean (a, c, b)
               i = Constant <value: tensor = int64[2] {5, -7}> ()
               j = Constant <value: tensor = int64[1] {0}> ()
               x = Max (i, j, i)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "s"), HostData::F32(vec![111.0, 212.0, 313.0]));
        assert_eq!(value(&a, "m"), HostData::F32(vec![37.0, 212.0 / 3.0, 313.0 / 3.0]));
        assert_eq!(value(&a, "x"), HostData::I64(vec![5, 0]));
        let a = run(13, "g (int32[2] i) => (int32[2] s) { s = Sum (i, i) }");
        assert!(problems(&a)[0].contains("Sum is not defined on int32"));
        let a = run(6, "g (float[2] x, float[1] y) => (float[2] s) { s = Sum (x, y) }");
        assert!(problems(&a)[0].contains("before opset 8 does not broadcast"));
    }

    #[test]
    fn integer_neg_abs_sign() {
        let a = run(
            13,
            "g (float[2] f) => (int32[3] n) {
               x = Constant <value: tensor = int32[3] {-3, 0, -2147483648}> ()
               n = Neg (x)
               b = Abs (x)
               s = Sign (x)
               ff = Abs (f)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "n"), HostData::I32(vec![3, 0, i32::MIN]));
        assert_eq!(value(&a, "b"), HostData::I32(vec![3, 0, i32::MIN]));
        assert_eq!(value(&a, "s"), HostData::I32(vec![-1, 0, -1]));
        assert_eq!(ty(&a, "ff"), "float[2]");
        let a = run(13, "g (uint8[2] x) => (uint8[2] y) { y = Neg (x) }");
        assert!(problems(&a)[0].contains("Neg is not defined on uint8"));
    }
}
