//! Type conversion, comparison, logic and selection, and the variadic and
//! integer forms of arithmetic the element-wise family leaves out:
//! - Cast, CastLike (every pair of `float`, `double`, `float16`, `bfloat16`,
//!   the integers, `bool` and the low-precision types held as raw bytes:
//!   the four float8 types, `float8e8m0`, `float4e2m1`, `int4`, `uint4`,
//!   `int2`, `uint2`, with `saturate` and `round_mode`; an identical pair is
//!   a view);
//! - Equal, Less, Greater, LessOrEqual, GreaterOrEqual; And, Or, Xor, Not;
//!   BitShift, BitwiseAnd/Or/Xor/Not; Where; IsNaN, IsInf (all broadcasting);
//! - ConstantOfShape and Range, whose shapes come from values known at
//!   generation time;
//! - Sum, Mean, Max, Min with any number of inputs, and Neg, Abs, Sign on
//!   integers. These names are also element-wise operators: the forms the
//!   element-wise rules accept (two inputs, float unary) go to them, the rest
//!   are handled here, so this family is looked up first.
//!
//! One file per group: `cast.rs`, `compare.rs` (comparison, logic,
//! bitwise, the predicates and Where), `fill.rs` (ConstantOfShape, Range)
//! and `arith.rs` (the variadic and integer arithmetic), each with its
//! rules, kernels and the code they emit. This module registers them and
//! holds what they share: broadcast plans, host buffers, the type dispatch.

use super::host::{HostData, HostElem};
use super::{
    EvalError, HostTensor, Io, NodeCx, OpError, OpResult, OpRule, broadcast_shapes,
    broadcast_strides, invalid, is_int,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::elementwise::Broadcast;
use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

/// Calls `$f::<T>(args)` for any non-bool type with a Rust form (ordered and
/// copyable: comparisons, selection, classification).
macro_rules! by_plain_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            other => crate::by_num_type!(other, $f($($arg),*)),
        }
    };
}

/// Calls `$f::<T>(args)` for the integer types.
macro_rules! by_int_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Int8 => $f::<i8>($($arg),*),
            ElemType::Int16 => $f::<i16>($($arg),*),
            ElemType::Int32 => $f::<i32>($($arg),*),
            ElemType::Int64 => $f::<i64>($($arg),*),
            ElemType::Uint8 => $f::<u8>($($arg),*),
            ElemType::Uint16 => $f::<u16>($($arg),*),
            ElemType::Uint32 => $f::<u32>($($arg),*),
            ElemType::Uint64 => $f::<u64>($($arg),*),
            other => Err(EvalError::Type(other)),
        }
    };
}

mod arith;
mod cast;
mod compare;
mod fill;

use arith::{IntUnaryRule, VariadicRule};
use cast::CastRule;
use compare::{BitwiseRule, CompareRule, LogicRule, PredicateRule, WhereRule};
use fill::{ConstantOfShapeRule, RangeRule};

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Cast" | "CastLike" => Some(&CastRule),
        "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => Some(&CompareRule),
        "And" | "Or" | "Xor" => Some(&LogicRule),
        "BitShift" | "BitwiseAnd" | "BitwiseOr" | "BitwiseXor" => Some(&BitwiseRule),
        "Not" | "BitwiseNot" | "IsNaN" | "IsInf" => Some(&PredicateRule),
        "Where" => Some(&WhereRule),
        "ConstantOfShape" => Some(&ConstantOfShapeRule),
        "Range" => Some(&RangeRule),
        "Sum" | "Mean" | "Max" | "Min" => Some(&VariadicRule),
        "Neg" | "Abs" | "Sign" => Some(&IntUnaryRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers.

fn op<'a>(cx: &NodeCx<'a>) -> &'a str {
    cx.node.op.op_type.as_str()
}

fn is_float(e: ElemType) -> bool {
    matches!(e, ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16)
}

/// Types with a Rust form in generated code (what Cast converts between).
fn is_plain(e: ElemType) -> bool {
    is_float(e) || is_int(e) || e == ElemType::Bool
}

fn host_in<'a, T: HostElem>(
    inputs: &[Option<&'a HostTensor>],
    i: usize,
) -> Result<&'a [T], EvalError> {
    let t = inputs.get(i).copied().flatten().ok_or(EvalError::Type(ElemType::Float))?;
    t.get::<T>().ok_or(EvalError::Type(t.ty.elem))
}

fn host_out<T: HostElem>(outputs: &mut [HostTensor]) -> Result<&mut [T], EvalError> {
    let t = outputs.first_mut().ok_or(EvalError::Type(ElemType::Float))?;
    let elem = t.ty.elem;
    t.get_mut::<T>().ok_or(EvalError::Type(elem))
}

fn host_bools_in<'a>(inputs: &[Option<&'a HostTensor>], i: usize) -> Result<&'a [bool], EvalError> {
    match inputs.get(i).copied().flatten().map(|t| &t.data) {
        Some(HostData::Bool(v)) => Ok(v),
        _ => Err(EvalError::Type(ElemType::Bool)),
    }
}

fn host_bools_out(outputs: &mut [HostTensor]) -> Result<&mut [bool], EvalError> {
    match outputs.first_mut().map(|t| &mut t.data) {
        Some(HostData::Bool(v)) => Ok(v),
        _ => Err(EvalError::Type(ElemType::Bool)),
    }
}

/// Input `i`'s buffer expression (present for every required input).
fn io_in(io: &Io, i: usize) -> TokenStream {
    io.inputs.get(i).cloned().flatten().unwrap_or_else(|| quote!(&[]))
}

/// Output 0's buffer expression.
fn io_out(io: &Io) -> TokenStream {
    io.outputs.first().cloned().flatten().unwrap_or_else(|| quote!(&mut []))
}

fn ident(name: &str) -> Ident {
    Ident::new(name, Span::call_site())
}

fn no_output(cx: &NodeCx<'_>) -> OpError {
    OpError::Invalid(format!("{} has no output", op(cx)))
}

/// A broadcast plan: the output shape and each input's strides over it.
#[derive(Clone, Debug, PartialEq)]
struct Plan {
    shape: Vec<usize>,
    strides: Vec<Vec<isize>>,
}

impl Plan {
    fn new(inputs: &[&TensorType], out: &[usize]) -> Plan {
        Plan {
            shape: out.to_vec(),
            strides: inputs.iter().map(|t| broadcast_strides(&t.dims, out)).collect(),
        }
    }

    /// The plan of a binary operator's two inputs, `b` placed as the
    /// legacy broadcast of opsets before 7 says (see
    /// [`crate::ops::legacy_operand_dims`]).
    fn binary(cx: &NodeCx<'_>, a: &TensorType, b: &TensorType, out: &[usize]) -> OpResult<Plan> {
        let b_dims = crate::ops::legacy_operand_dims(cx, &a.dims, &b.dims)?;
        Ok(Plan {
            shape: out.to_vec(),
            strides: vec![broadcast_strides(&a.dims, out), broadcast_strides(&b_dims, out)],
        })
    }

    fn s(&self, i: usize) -> &[isize] {
        self.strides.get(i).map_or(&[], Vec::as_slice)
    }

    fn two(&self) -> Broadcast<'_, 2> {
        Broadcast { shape: &self.shape, strides: [self.s(0), self.s(1)] }
    }

    fn three(&self) -> Broadcast<'_, 3> {
        Broadcast { shape: &self.shape, strides: [self.s(0), self.s(1), self.s(2)] }
    }

    /// `&Broadcast { shape, strides: [...] }` in generated code.
    fn tokens(&self, rt: &TokenStream) -> TokenStream {
        let shape = lit::usizes(&self.shape);
        let strides = self.strides.iter().map(|s| lit::isizes(s));
        quote!(&#rt::elementwise::Broadcast { shape: #shape, strides: [#(#strides),*] })
    }
}

/// The broadcast of two same-typed inputs.
fn binary_types<'a>(cx: &NodeCx<'a>) -> OpResult<(&'a TensorType, &'a TensorType, Vec<usize>)> {
    if cx.inputs.len() != 2 {
        return invalid(format!("{} takes 2 inputs, got {}", op(cx), cx.inputs.len()));
    }
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    if a.elem != b.elem {
        return invalid(format!("{} of {} and {} tensors", op(cx), a.elem, b.elem));
    }
    let b_dims = crate::ops::legacy_operand_dims(cx, &a.dims, &b.dims)?;
    let dims = broadcast_shapes(&[&a.dims, &b_dims])?;
    Ok((a, b, dims))
}

/// What the tests of every group share.
#[cfg(test)]
mod testing {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::{HostData, HostTensor};

    /// Inference over a model in the text syntax, with `opset`.
    pub(super) fn run(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 10, opset_import: [\"\" : {opset}]>\n{graph}");
        let proto = crate::text::parse_model(&src, "t").unwrap_or_else(|e| panic!("{e}"));
        analyze(&proto, &Options::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    pub(super) fn index(a: &Analysis, name: &str) -> usize {
        let values = a.model().graph.values();
        values.iter().position(|v| v.name == name).unwrap_or_else(|| panic!("no value {name}"))
    }

    /// The inferred type of `name`, as text.
    pub(super) fn ty(a: &Analysis, name: &str) -> String {
        a.inferred.types[index(a, name)].as_ref().map(ToString::to_string).unwrap_or_default()
    }

    /// The folded value of `name`.
    pub(super) fn value(a: &Analysis, name: &str) -> HostData {
        let t = a.inferred.constants[index(a, name)].as_ref().expect("a folded value");
        HostTensor::from_tensor(t).expect("a host form").data
    }

    /// Every problem found: unsupported reasons, then errors.
    pub(super) fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> =
            a.inferred.unsupported.iter().map(|u| format!("unsupported: {}", u.reason)).collect();
        out.extend(a.inferred.errors.iter().map(|e| format!("error: {}", e.message)));
        out
    }

    pub(super) fn clean(a: &Analysis) {
        assert!(problems(a).is_empty(), "{:?}", problems(a));
    }
}
