//! Comparison, logic and selection, all broadcasting: Equal, Less,
//! Greater, LessOrEqual, GreaterOrEqual; And, Or, Xor; BitShift,
//! BitwiseAnd/Or/Xor; the one-input Not, BitwiseNot, IsNaN, IsInf; Where.

use super::{
    Plan, binary_types, host_bools_in, host_bools_out, host_in, host_out, ident, io_in, io_out,
    is_float, is_plain, no_output, op,
};
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule,
    broadcast_shapes, invalid, is_int, unsupported,
};
use onnx_codegen_runtime::cast::CastElement;
use onnx_codegen_runtime::elementwise::{self as rt_ew, Bitwise, Compare, FloatClass, Logic};
use onnx_codegen_runtime::num::Int;
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

// ---------------------------------------------------------------------------
// Comparisons.

pub(super) struct CompareRule;

fn compare_op(cx: &NodeCx<'_>) -> OpResult<Compare> {
    Ok(match op(cx) {
        "Equal" => Compare::Equal,
        "Less" => Compare::Less,
        "Greater" => Compare::Greater,
        "LessOrEqual" => Compare::LessOrEqual,
        "GreaterOrEqual" => Compare::GreaterOrEqual,
        other => return unsupported(format!("{other} is not a comparison")),
    })
}

impl OpRule for CompareRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::Broadcast
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (a, _, dims) = binary_types(cx)?;
        let cmp = compare_op(cx)?;
        match a.elem {
            ElemType::String if cmp == Compare::Equal => {}
            ElemType::Bool if cmp != Compare::Equal => {
                return invalid(format!("{} is not defined on bool tensors", op(cx)));
            }
            e if is_plain(e) => {}
            e => return unsupported(format!("{} on {e} tensors", op(cx))),
        }
        Ok(vec![TensorType::new(ElemType::Bool, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        if a.elem == ElemType::String {
            return crate::ops::strings::equal_lower(a, b, &out.dims);
        }
        Ok(Lowered::Kernel(Box::new(CompareKernel {
            op: compare_op(cx)?,
            elem: a.elem,
            plan: Plan::binary(cx, a, b, &out.dims)?,
        })))
    }
}

struct CompareKernel {
    op: Compare,
    elem: ElemType,
    plan: Plan,
}

fn run_compare<T: HostElem + PartialOrd>(
    k: &CompareKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (a, b) = (host_in::<T>(inputs, 0)?, host_in::<T>(inputs, 1)?);
    rt_ew::compare(k.op, &k.plan.two(), a, b, host_bools_out(outputs)?)?;
    Ok(())
}

impl Kernel for CompareKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.elem == ElemType::Bool {
            let (a, b) = (host_bools_in(inputs, 0)?, host_bools_in(inputs, 1)?);
            rt_ew::logic(Logic::Equal, &self.plan.two(), a, b, host_bools_out(outputs)?)?;
            return Ok(());
        }
        by_plain_type!(self.elem, run_compare(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = self.plan.tokens(rt);
        let (a, b, y) = (io_in(io, 0), io_in(io, 1), io_out(io));
        if self.elem == ElemType::Bool {
            return quote!(#rt::elementwise::logic(#rt::elementwise::Logic::Equal, #p, #a, #b, #y)?;);
        }
        let op = ident(&format!("{:?}", self.op));
        quote!(#rt::elementwise::compare(#rt::elementwise::Compare::#op, #p, #a, #b, #y)?;)
    }
}

// ---------------------------------------------------------------------------
// And, Or, Xor.

pub(super) struct LogicRule;

fn logic_op(cx: &NodeCx<'_>) -> OpResult<Logic> {
    Ok(match op(cx) {
        "And" => Logic::And,
        "Or" => Logic::Or,
        "Xor" => Logic::Xor,
        other => return unsupported(format!("{other} is not a logical operator")),
    })
}

impl OpRule for LogicRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::Broadcast
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (a, _, dims) = binary_types(cx)?;
        logic_op(cx)?;
        if a.elem != ElemType::Bool {
            return invalid(format!("{} needs bool tensors, got {}", op(cx), a.elem));
        }
        Ok(vec![TensorType::new(ElemType::Bool, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        Ok(Lowered::Kernel(Box::new(LogicKernel {
            op: logic_op(cx)?,
            plan: Plan::binary(cx, a, b, &out.dims)?,
        })))
    }
}

struct LogicKernel {
    op: Logic,
    plan: Plan,
}

impl Kernel for LogicKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let (a, b) = (host_bools_in(inputs, 0)?, host_bools_in(inputs, 1)?);
        rt_ew::logic(self.op, &self.plan.two(), a, b, host_bools_out(outputs)?)?;
        Ok(())
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = self.plan.tokens(rt);
        let (a, b, y) = (io_in(io, 0), io_in(io, 1), io_out(io));
        let op = ident(&format!("{:?}", self.op));
        quote!(#rt::elementwise::logic(#rt::elementwise::Logic::#op, #p, #a, #b, #y)?;)
    }
}

// ---------------------------------------------------------------------------
// BitShift, BitwiseAnd/Or/Xor.

pub(super) struct BitwiseRule;

fn bitwise_op(cx: &NodeCx<'_>) -> OpResult<Bitwise> {
    Ok(match op(cx) {
        "BitwiseAnd" => Bitwise::And,
        "BitwiseOr" => Bitwise::Or,
        "BitwiseXor" => Bitwise::Xor,
        "BitShift" => match cx.string_or("direction", "").as_str() {
            "LEFT" => Bitwise::ShiftLeft,
            "RIGHT" => Bitwise::ShiftRight,
            other => {
                return invalid(format!("BitShift direction '{other}' is not 'LEFT' or 'RIGHT'"));
            }
        },
        other => return unsupported(format!("{other} is not a bitwise operator")),
    })
}

impl OpRule for BitwiseRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::Broadcast
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (a, _, dims) = binary_types(cx)?;
        bitwise_op(cx)?;
        if !is_int(a.elem) {
            return invalid(format!("{} needs integer tensors, got {}", op(cx), a.elem));
        }
        Ok(vec![a.with_dims(dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        Ok(Lowered::Kernel(Box::new(BitwiseKernel {
            op: bitwise_op(cx)?,
            elem: out.elem,
            plan: Plan::binary(cx, a, b, &out.dims)?,
        })))
    }
}

struct BitwiseKernel {
    op: Bitwise,
    elem: ElemType,
    plan: Plan,
}

fn run_bitwise<T: HostElem + Int>(
    k: &BitwiseKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (a, b) = (host_in::<T>(inputs, 0)?, host_in::<T>(inputs, 1)?);
    rt_ew::bitwise(k.op, &k.plan.two(), a, b, host_out::<T>(outputs)?)?;
    Ok(())
}

impl Kernel for BitwiseKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_int_type!(self.elem, run_bitwise(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = self.plan.tokens(rt);
        let (a, b, y) = (io_in(io, 0), io_in(io, 1), io_out(io));
        let op = ident(&format!("{:?}", self.op));
        quote!(#rt::elementwise::bitwise(#rt::elementwise::Bitwise::#op, #p, #a, #b, #y)?;)
    }
}

// ---------------------------------------------------------------------------
// Not, BitwiseNot, IsNaN, IsInf: one input, same shape.

pub(super) struct PredicateRule;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Predicate {
    Not,
    BitNot,
    Class(FloatClass),
}

fn predicate(cx: &NodeCx<'_>) -> OpResult<Predicate> {
    Ok(match op(cx) {
        "Not" => Predicate::Not,
        "BitwiseNot" => Predicate::BitNot,
        "IsNaN" => Predicate::Class(FloatClass::Nan),
        "IsInf" => Predicate::Class(FloatClass::Inf {
            negative: cx.int_or("detect_negative", 1) != 0,
            positive: cx.int_or("detect_positive", 1) != 0,
        }),
        other => return unsupported(format!("{other} is not a one-input predicate")),
    })
}

impl OpRule for PredicateRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        let out = match predicate(cx)? {
            Predicate::Not if x.elem == ElemType::Bool => ElemType::Bool,
            Predicate::BitNot if is_int(x.elem) => x.elem,
            Predicate::Class(_) if is_float(x.elem) => ElemType::Bool,
            Predicate::Class(_) if x.elem.name().starts_with("float") => {
                return unsupported(format!("{} on {} tensors", op(cx), x.elem));
            }
            _ => return invalid(format!("{} is not defined on {} tensors", op(cx), x.elem)),
        };
        Ok(vec![TensorType::new(out, x.dims.clone())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(PredicateKernel {
            pred: predicate(cx)?,
            elem: cx.input(0)?.elem,
        })))
    }
}

struct PredicateKernel {
    pred: Predicate,
    elem: ElemType,
}

fn run_bit_not<T: HostElem + Int>(
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_ew::bit_not(host_in::<T>(inputs, 0)?, host_out::<T>(outputs)?)?;
    Ok(())
}

fn run_classify<T: HostElem + CastElement>(
    class: FloatClass,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_ew::classify(class, host_in::<T>(inputs, 0)?, host_bools_out(outputs)?)?;
    Ok(())
}

impl Kernel for PredicateKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.pred {
            Predicate::Not => {
                rt_ew::not(host_bools_in(inputs, 0)?, host_bools_out(outputs)?)?;
                Ok(())
            }
            Predicate::BitNot => by_int_type!(self.elem, run_bit_not(inputs, outputs)),
            Predicate::Class(c) => by_plain_type!(self.elem, run_classify(c, inputs, outputs)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (io_in(io, 0), io_out(io));
        match self.pred {
            Predicate::Not => quote!(#rt::elementwise::not(#x, #y)?;),
            Predicate::BitNot => quote!(#rt::elementwise::bit_not(#x, #y)?;),
            Predicate::Class(FloatClass::Nan) => quote! {
                #rt::elementwise::classify(#rt::elementwise::FloatClass::Nan, #x, #y)?;
            },
            Predicate::Class(FloatClass::Inf { negative, positive }) => quote! {
                #rt::elementwise::classify(
                    #rt::elementwise::FloatClass::Inf { negative: #negative, positive: #positive },
                    #x, #y,
                )?;
            },
        }
    }
}

// ---------------------------------------------------------------------------
// Where.

pub(super) struct WhereRule;

impl OpRule for WhereRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (c, x, y) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        if c.elem != ElemType::Bool {
            return invalid(format!("Where's condition must be bool, got {}", c.elem));
        }
        if x.elem != y.elem {
            return invalid(format!("Where of {} and {} tensors", x.elem, y.elem));
        }
        if !is_plain(x.elem) {
            return unsupported(format!("Where on {} tensors", x.elem));
        }
        let dims = broadcast_shapes(&[&c.dims, &x.dims, &y.dims])?;
        Ok(vec![x.with_dims(dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let (c, x, y) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
        Ok(Lowered::Kernel(Box::new(WhereKernel {
            elem: out.elem,
            plan: Plan::new(&[c, x, y], &out.dims),
        })))
    }
}

struct WhereKernel {
    elem: ElemType,
    plan: Plan,
}

fn run_where<T: HostElem>(
    k: &WhereKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let c = host_bools_in(inputs, 0)?;
    let (x, y) = (host_in::<T>(inputs, 1)?, host_in::<T>(inputs, 2)?);
    rt_ew::where_(&k.plan.three(), c, x, y, host_out::<T>(outputs)?)?;
    Ok(())
}

impl Kernel for WhereKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if self.elem == ElemType::Bool {
            let c = host_bools_in(inputs, 0)?;
            let (x, y) = (host_bools_in(inputs, 1)?, host_bools_in(inputs, 2)?);
            rt_ew::where_flags(&self.plan.three(), c, x, y, host_bools_out(outputs)?)?;
            return Ok(());
        }
        by_plain_type!(self.elem, run_where(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = self.plan.tokens(rt);
        let (c, x, y, o) = (io_in(io, 0), io_in(io, 1), io_in(io, 2), io_out(io));
        let f = if self.elem == ElemType::Bool { ident("where_flags") } else { ident("where_") };
        quote!(#rt::elementwise::#f(#p, #c, #x, #y, #o)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::logic::testing::{clean, problems, run, ty, value};

    #[test]
    fn comparisons_broadcast_to_bool() {
        let a = run(
            19,
            "g (float[2,1,3] x, float[4,1] y, bool[3] p, bool[4,1] q) => (bool[2,4,3] z) {
               z = Less (x, y)
               e = Equal (p, q)
               g = GreaterOrEqual (y, y)
               n = Xor (p, q)
               m = Not (q)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "z"), "bool[2, 4, 3]");
        assert_eq!(ty(&a, "e"), "bool[4, 3]");
        assert_eq!(ty(&a, "g"), "bool[4, 1]");
        assert_eq!(ty(&a, "n"), "bool[4, 3]");
        assert_eq!(ty(&a, "m"), "bool[4, 1]");
    }

    #[test]
    fn comparison_errors() {
        let a = run(
            19,
            "g (bool[3] p, float[3] x, int32[3] i, float[2] w) => (bool[3] z) {
               z = Less (p, p)
               m = Equal (x, i)
               b = Greater (x, w)
               o = And (x, x)
             }",
        );
        let p = problems(&a);
        assert_eq!(p.len(), 4, "{p:?}");
        assert!(p.iter().any(|m| m.contains("Less is not defined on bool")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("Equal of float and int32")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("do not broadcast")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("And needs bool tensors")), "{p:?}");
    }

    #[test]
    fn where_broadcasts_three_inputs() {
        let a = run(
            16,
            "g (bool[2,1] c, int64[3] x, int64 y, bool[3] p) => (int64[2,3] z) {
               z = Where (c, x, y)
               w = Where (c, p, p)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "z"), "int64[2, 3]");
        assert_eq!(ty(&a, "w"), "bool[2, 3]");
        let a = run(16, "g (float[2] c, float[2] x) => (float[2] z) { z = Where (c, x, x) }");
        assert!(problems(&a)[0].contains("condition must be bool"));
        let a = run(
            16,
            "g () => (int32[2,2] z) {
               c = Constant <value: tensor = bool[2,1] {1, 0}> ()
               x = Constant <value: tensor = int32[2] {1, 2}> ()
               y = Constant <value: tensor = int32[1] {-1}> ()
               z = Where (c, x, y)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "z"), HostData::I32(vec![1, 2, -1, -1]));
    }

    #[test]
    fn bitwise_ops_fold_and_check_their_attributes() {
        let a = run(
            18,
            "g () => (int8[3] r) {
               x = Constant <value: tensor = int8[3] {-8, 4, -1}> ()
               s = Constant <value: tensor = int8[3] {1, 9, -16}> ()
               r = BitShift <direction: string = \"RIGHT\"> (x, s)
               l = BitShift <direction: string = \"LEFT\"> (x, s)
               n = BitwiseNot (x)
               a = BitwiseAnd (x, s)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "r"), HostData::I8(vec![-4, 0, -1]));
        assert_eq!(value(&a, "l"), HostData::I8(vec![-16, 0, 0]));
        assert_eq!(value(&a, "n"), HostData::I8(vec![7, -5, 0]));
        assert_eq!(value(&a, "a"), HostData::I8(vec![0, 0, -16]));
        let a = run(
            18,
            "g (int8[3] x, float[3] f) => (int8[3] r) {
               r = BitShift <direction: string = \"UP\"> (x, x)
               n = BitwiseNot (f)
             }",
        );
        let p = problems(&a);
        assert!(p.iter().any(|m| m.contains("'UP' is not 'LEFT' or 'RIGHT'")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("BitwiseNot is not defined on float")), "{p:?}");
    }

    #[test]
    fn nan_and_infinity_tests() {
        let a = run(
            20,
            "g () => (bool[4] n) {
               x = Constant <value: tensor = float[4] {1.0, 0.0, 0.0, 0.0}> ()
               z = Constant <value: tensor = float[4] {1.0, 0.0, 1.0, -1.0}> ()
               q = Div (z, x)
               n = IsNaN (q)
               i = IsInf <detect_positive: int = 0> (q)
               j = IsInf (q)
             }",
        );
        clean(&a);
        // q = [1, NaN, +inf, -inf].
        assert_eq!(value(&a, "n"), HostData::Bool(vec![false, true, false, false]));
        assert_eq!(value(&a, "i"), HostData::Bool(vec![false, false, false, true]));
        assert_eq!(value(&a, "j"), HostData::Bool(vec![false, false, true, true]));
    }
}
