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

use super::host::{HostData, HostElem};
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    broadcast_shapes, broadcast_strides, invalid, is_int, is_num, unsupported,
};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use onnx_codegen_runtime::cast::{self as rt_cast, CastElement, LowBit, Round, Wide};
use onnx_codegen_runtime::elementwise::{
    self as rt_ew, Arith, Bitwise, Broadcast, Compare, FloatClass, Logic, NumUnary,
};
use onnx_codegen_runtime::num::{Int, Num};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::quote;

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

/// Refuses the `broadcast`/`axis` attributes of opsets before 7, whose
/// one-directional broadcasting this compiler does not implement.
fn no_legacy_broadcast(cx: &NodeCx<'_>) -> OpResult<()> {
    if cx.version() < 7 && cx.node.attr("broadcast").is_some() {
        return unsupported("legacy broadcasting (opset < 7, 'broadcast' attribute)");
    }
    Ok(())
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
    no_legacy_broadcast(cx)?;
    let dims = broadcast_shapes(&[&a.dims, &b.dims])?;
    Ok((a, b, dims))
}

// ---------------------------------------------------------------------------
// Cast, CastLike.

struct CastRule;

/// The target type of a Cast (`to`, a string before opset 6) or CastLike
/// (input 1's type).
fn cast_target(cx: &NodeCx<'_>) -> OpResult<ElemType> {
    if op(cx) == "CastLike" {
        return Ok(cx.input(1)?.elem);
    }
    match cx.node.attr("to") {
        Some(AttrValue::Int(code)) => i32::try_from(*code)
            .ok()
            .and_then(ElemType::from_proto)
            .ok_or_else(|| OpError::Invalid(format!("Cast 'to' = {code} is not an element type"))),
        Some(AttrValue::String(name)) => {
            let name = String::from_utf8_lossy(name).to_ascii_lowercase();
            ElemType::from_name(&name).ok_or_else(|| {
                OpError::Invalid(format!("Cast 'to' = '{name}' is not an element type"))
            })
        }
        _ => invalid("Cast needs the 'to' attribute"),
    }
}

/// The `round_mode` attribute (opset 24+; only float8e8m0 targets use it).
fn cast_round(cx: &NodeCx<'_>) -> OpResult<Round> {
    match cx.string_or("round_mode", "up").as_str() {
        "up" => Ok(Round::Up),
        "down" => Ok(Round::Down),
        "nearest" => Ok(Round::Nearest),
        other => invalid(format!(
            "{} 'round_mode' = '{other}' is not one of 'up', 'down', 'nearest'",
            op(cx)
        )),
    }
}

impl OpRule for CastRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        let to = cast_target(cx)?;
        for e in [x.elem, to] {
            if !is_plain(e) && super::low_bit(e).is_none() {
                return unsupported(format!(
                    "{} from {} to {to}: {e} tensors are not supported",
                    op(cx),
                    x.elem
                ));
            }
        }
        let saturate = cx.int_or("saturate", 1);
        if !matches!(saturate, 0 | 1) {
            return invalid(format!("{} 'saturate' = {saturate} is not 0 or 1", op(cx)));
        }
        cast_round(cx)?;
        Ok(vec![TensorType::new(to, x.dims.clone())])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let from = cx.input(0)?.elem;
        let out = outputs.first().ok_or_else(|| no_output(cx))?;
        let to = out.elem;
        if from == to {
            return Ok(Lowered::Alias);
        }
        Ok(Lowered::Kernel(Box::new(CastKernel {
            to_bool: to == ElemType::Bool,
            from_low: super::low_bit(from),
            to_low: super::low_bit(to),
            saturate: cx.int_or("saturate", 1) != 0,
            round: cast_round(cx)?,
            count: out.numel().ok_or_else(|| OpError::Invalid("a shape too large".into()))?,
        })))
    }
}

struct CastKernel {
    to_bool: bool,
    /// The source, when it is a low-precision type (raw `u8` codes).
    from_low: Option<LowBit>,
    /// The destination, when it is a low-precision type.
    to_low: Option<LowBit>,
    saturate: bool,
    round: Round,
    /// Elements cast (packed buffers do not tell).
    count: usize,
}

impl CastKernel {
    /// `saturate, Round::X` in generated code.
    fn mode_tokens(&self, rt: &TokenStream) -> TokenStream {
        let saturate = self.saturate;
        let round = ident(match self.round {
            Round::Up => "Up",
            Round::Down => "Down",
            Round::Nearest => "Nearest",
        });
        quote!(#saturate, #rt::cast::Round::#round)
    }
}

/// Casts between any two host element vectors.
fn cast_host(x: &HostData, y: &mut HostData) -> onnx_codegen_runtime::Result {
    fn to<S: CastElement>(x: &[S], y: &mut HostData) -> onnx_codegen_runtime::Result {
        match y {
            HostData::F32(y) => rt_cast::cast(x, y),
            HostData::F64(y) => rt_cast::cast(x, y),
            HostData::I8(y) => rt_cast::cast(x, y),
            HostData::I16(y) => rt_cast::cast(x, y),
            HostData::I32(y) => rt_cast::cast(x, y),
            HostData::I64(y) => rt_cast::cast(x, y),
            HostData::U8(y) => rt_cast::cast(x, y),
            HostData::U16(y) => rt_cast::cast(x, y),
            HostData::U32(y) => rt_cast::cast(x, y),
            HostData::U64(y) => rt_cast::cast(x, y),
            HostData::Bool(y) => rt_cast::cast_to_flag(x, y),
            HostData::F16(y) => rt_cast::cast(x, y),
            HostData::Bf16(y) => rt_cast::cast(x, y),
        }
    }
    match x {
        HostData::F32(x) => to(x, y),
        HostData::F64(x) => to(x, y),
        HostData::I8(x) => to(x, y),
        HostData::I16(x) => to(x, y),
        HostData::I32(x) => to(x, y),
        HostData::I64(x) => to(x, y),
        HostData::U8(x) => to(x, y),
        HostData::U16(x) => to(x, y),
        HostData::U32(x) => to(x, y),
        HostData::U64(x) => to(x, y),
        HostData::Bool(x) => to(x, y),
        HostData::F16(x) => to(x, y),
        HostData::Bf16(x) => to(x, y),
    }
}

impl Kernel for CastKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let x = inputs.first().copied().flatten().ok_or(EvalError::Type(ElemType::Float))?;
        let y = outputs.first_mut().ok_or(EvalError::Type(ElemType::Float))?;
        // Low-precision tensors have no host form: they are not folded.
        if self.from_low.is_some() {
            return Err(EvalError::Type(x.ty.elem));
        }
        if self.to_low.is_some() {
            return Err(EvalError::Type(y.ty.elem));
        }
        cast_host(&x.data, &mut y.data)?;
        Ok(())
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (io_in(io, 0), io_out(io));
        let fmt = |f: LowBit| super::low_bit_tokens(f, rt);
        match (self.from_low, self.to_low) {
            (Some(from), Some(to)) => {
                let (from, to, mode) = (fmt(from), fmt(to), self.mode_tokens(rt));
                let n = lit::usize_lit(self.count);
                quote!(#rt::cast::cast_low(#from, #x, #to, #mode, #y, #n)?;)
            }
            (Some(from), None) => {
                let from = fmt(from);
                if self.to_bool {
                    quote!(#rt::cast::cast_from_low_to_flag(#from, #x, #y)?;)
                } else {
                    quote!(#rt::cast::cast_from_low(#from, #x, #y)?;)
                }
            }
            (None, Some(to)) => {
                let (to, mode) = (fmt(to), self.mode_tokens(rt));
                quote!(#rt::cast::cast_to_low(#x, #to, #mode, #y)?;)
            }
            (None, None) if self.to_bool => quote!(#rt::cast::cast_to_flag(#x, #y)?;),
            (None, None) => quote!(#rt::cast::cast(#x, #y)?;),
        }
    }

    /// CastLike's second input only gives the type.
    fn reads_input(&self, i: usize) -> bool {
        i == 0
    }
}

// ---------------------------------------------------------------------------
// Comparisons.

struct CompareRule;

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
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::Broadcast
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
            return super::strings::equal_lower(a, b, &out.dims);
        }
        Ok(Lowered::Kernel(Box::new(CompareKernel {
            op: compare_op(cx)?,
            elem: a.elem,
            plan: Plan::new(&[a, b], &out.dims),
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

struct LogicRule;

fn logic_op(cx: &NodeCx<'_>) -> OpResult<Logic> {
    Ok(match op(cx) {
        "And" => Logic::And,
        "Or" => Logic::Or,
        "Xor" => Logic::Xor,
        other => return unsupported(format!("{other} is not a logical operator")),
    })
}

impl OpRule for LogicRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::Broadcast
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
            plan: Plan::new(&[a, b], &out.dims),
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

struct BitwiseRule;

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
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::Broadcast
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
            plan: Plan::new(&[a, b], &out.dims),
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

struct PredicateRule;

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
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
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

struct WhereRule;

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

// ---------------------------------------------------------------------------
// ConstantOfShape.

struct ConstantOfShapeRule;

/// The fill value: the `value` attribute (one element), float 0 by default.
fn fill_value(cx: &NodeCx<'_>) -> OpResult<HostTensor> {
    let Some(t) = cx.tensor("value") else {
        return Ok(HostTensor {
            ty: TensorType::new(ElemType::Float, vec![1]),
            data: HostData::F32(vec![0.0]),
        });
    };
    if t.len() != 1 {
        return invalid(format!(
            "ConstantOfShape's value must hold one element, it holds {}",
            t.len()
        ));
    }
    if !is_plain(t.elem) {
        return unsupported(format!("ConstantOfShape with a {} value", t.elem));
    }
    HostTensor::from_tensor(t)
        .ok_or_else(|| OpError::Unsupported(format!("ConstantOfShape with a {} value", t.elem)))
}

impl OpRule for ConstantOfShapeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if cx.constant(0).is_none() {
            // The shape is data: plan the declared output (or the dims a
            // declared value downstream implies), checked at run time.
            let value = fill_value(cx)?;
            let rank = cx.input(0)?.dims.first().copied();
            return match cx.expected_output(0, value.ty.elem, rank) {
                Some(t) if rank.is_some_and(|r| r != t.dims.len()) => invalid(format!(
                    "ConstantOfShape's shape has {} elements but its output is declared as {t}",
                    rank.unwrap_or(0)
                )),
                Some(t) if t.elem == value.ty.elem => Ok(vec![t.clone()]),
                Some(t) => invalid(format!(
                    "ConstantOfShape fills with {} but its output is declared as {t}",
                    value.ty.elem
                )),
                None => unsupported(
                    "ConstantOfShape's shape (input 0) is known only at run time and the model \
                     does not declare the output's shape",
                ),
            };
        }
        let shape = cx.const_ints(0, "ConstantOfShape's shape")?;
        let dims =
            shape.iter().map(|&d| usize::try_from(d)).collect::<Result<Vec<_>, _>>().map_err(
                |_| {
                    OpError::Invalid(format!(
                        "ConstantOfShape's shape {shape:?} has a negative dimension"
                    ))
                },
            )?;
        let value = fill_value(cx)?;
        let ty = TensorType::new(value.ty.elem, dims);
        if ty.byte_size().is_none() {
            return invalid(format!("ConstantOfShape's shape {shape:?} is too large"));
        }
        Ok(vec![ty])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let check_dims = match cx.constant(0) {
            Some(_) => None,
            None => Some(outputs.first().map(|t| t.dims.clone()).unwrap_or_default()),
        };
        Ok(Lowered::Kernel(Box::new(FillKernel { value: fill_value(cx)?, check_dims })))
    }
}

/// Fills the output with one value.
struct FillKernel {
    value: HostTensor,
    /// When the shape input is data: the planned dims it must equal at run time.
    check_dims: Option<Vec<usize>>,
}

fn run_fill<T: HostElem>(v: &HostTensor, outputs: &mut [HostTensor]) -> EvalResult {
    let x = v.get::<T>().and_then(|s| s.first().copied()).ok_or(EvalError::Type(v.ty.elem))?;
    host_out::<T>(outputs)?.fill(x);
    Ok(())
}

/// An integer literal with the Rust type's suffix (negative as `-lit`).
fn int_lit(v: Wide, elem: ElemType) -> TokenStream {
    let (neg, mag) = match v {
        Wide::Int(i) => (i < 0, i.unsigned_abs()),
        Wide::Float(_) => (false, 0),
    };
    let m = |s: &str| {
        format!("{mag}{s}").parse::<Literal>().unwrap_or_else(|_| Literal::u8_unsuffixed(0))
    };
    let l = match elem {
        ElemType::Int8 => m("i8"),
        ElemType::Int16 => m("i16"),
        ElemType::Int32 => m("i32"),
        ElemType::Int64 => m("i64"),
        ElemType::Uint8 => m("u8"),
        ElemType::Uint16 => m("u16"),
        ElemType::Uint32 => m("u32"),
        _ => m("u64"),
    };
    if neg { quote!(-#l) } else { quote!(#l) }
}

/// The one element of `v` as a Rust expression of its type (`None` for bool).
fn scalar_tokens(v: &HostTensor, rt: &TokenStream) -> Option<TokenStream> {
    let first = |d: &HostData| -> Option<Wide> {
        Some(match d {
            HostData::F32(x) => x.first()?.to_wide(),
            HostData::F64(x) => x.first()?.to_wide(),
            HostData::I8(x) => x.first()?.to_wide(),
            HostData::I16(x) => x.first()?.to_wide(),
            HostData::I32(x) => x.first()?.to_wide(),
            HostData::I64(x) => x.first()?.to_wide(),
            HostData::U8(x) => x.first()?.to_wide(),
            HostData::U16(x) => x.first()?.to_wide(),
            HostData::U32(x) => x.first()?.to_wide(),
            HostData::U64(x) => x.first()?.to_wide(),
            HostData::Bool(x) => x.first()?.to_wide(),
            HostData::F16(x) => x.first()?.to_wide(),
            HostData::Bf16(x) => x.first()?.to_wide(),
        })
    };
    Some(match &v.data {
        HostData::F32(x) => lit::f32_lit(*x.first()?),
        HostData::F64(x) => lit::f64_lit(*x.first()?),
        HostData::F16(x) => {
            let bits = Literal::u16_unsuffixed(x.first()?.to_bits());
            quote!(#rt::f16::from_bits(#bits))
        }
        HostData::Bf16(x) => {
            let bits = Literal::u16_unsuffixed(x.first()?.to_bits());
            quote!(#rt::bf16::from_bits(#bits))
        }
        HostData::Bool(_) => return None,
        d => int_lit(first(d)?, v.ty.elem),
    })
}

impl Kernel for FillKernel {
    fn eval(&self, _inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if let HostData::Bool(v) = &self.value.data {
            let b = v.first().copied().unwrap_or(false);
            host_bools_out(outputs)?.fill(b);
            return Ok(());
        }
        by_plain_type!(self.value.ty.elem, run_fill(&self.value, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let y = io_out(io);
        // Expanding a scalar to `shape` gives exactly `shape`: the same check.
        let check = match (&self.check_dims, io.inputs.first()) {
            (Some(dims), Some(Some(shape))) => {
                let dims = lit::usizes(dims);
                quote!(#rt::check::expand(#shape, &[], #dims)?;)
            }
            _ => quote!(),
        };
        let fill = match scalar_tokens(&self.value, rt) {
            Some(v) => quote!(#y.fill(#v);),
            None => {
                let b = matches!(&self.value.data, HostData::Bool(v) if v.first() == Some(&true));
                quote! {
                    for v in #y.iter_mut() {
                        *v = #rt::num::Flag::from_bool(#b);
                    }
                }
            }
        };
        quote!(#check #fill)
    }

    /// The shape is read only to be checked, when it is data.
    fn reads_input(&self, _i: usize) -> bool {
        self.check_dims.is_some()
    }
}

// ---------------------------------------------------------------------------
// Range.

struct RangeRule;

/// Range's start, limit and delta (exact: integers as `i128`, floats as `f64`).
#[derive(Clone, Copy, Debug, PartialEq)]
struct RangeArgs {
    start: Wide,
    delta: Wide,
    count: usize,
}

fn range_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Wide> {
    let Some(t) = cx.constant(i) else {
        return unsupported(format!(
            "Range's {what} (input {i}) must be known at generation time; it depends on the model's inputs"
        ));
    };
    if t.len() != 1 {
        return invalid(format!("Range's {what} must be a scalar, it has {} elements", t.len()));
    }
    let h = HostTensor::from_tensor(t)
        .ok_or_else(|| OpError::Unsupported(format!("Range on {} tensors", t.elem)))?;
    let w = match &h.data {
        HostData::F32(x) => x.first().map(|v| v.to_wide()),
        HostData::F64(x) => x.first().map(|v| v.to_wide()),
        HostData::I16(x) => x.first().map(|v| v.to_wide()),
        HostData::I32(x) => x.first().map(|v| v.to_wide()),
        HostData::I64(x) => x.first().map(|v| v.to_wide()),
        HostData::F16(x) => x.first().map(|v| v.to_wide()),
        HostData::Bf16(x) => x.first().map(|v| v.to_wide()),
        _ => return invalid(format!("Range is not defined on {} tensors", t.elem)),
    };
    w.ok_or_else(|| OpError::Invalid(format!("Range's {what} is empty")))
}

/// The most elements a Range may produce (far above any arena limit).
const MAX_RANGE: i128 = 1 << 40;

fn range_args(cx: &NodeCx<'_>) -> OpResult<(ElemType, RangeArgs)> {
    let elem = cx.input(0)?.elem;
    for i in 1..3 {
        if cx.input(i)?.elem != elem {
            return invalid("Range's start, limit and delta have different element types");
        }
    }
    let start = range_scalar(cx, 0, "start")?;
    let limit = range_scalar(cx, 1, "limit")?;
    let delta = range_scalar(cx, 2, "delta")?;
    let count = match (start, limit, delta) {
        (Wide::Int(_), Wide::Int(_), Wide::Int(0)) => return invalid("Range's delta is 0"),
        (Wide::Int(s), Wide::Int(l), Wide::Int(d)) => {
            let span = l - s;
            // ceil(span / d) with exact integers.
            let q = span / d;
            let q = if span % d != 0 && ((span < 0) == (d < 0)) { q + 1 } else { q };
            q.max(0)
        }
        (Wide::Float(s), Wide::Float(l), Wide::Float(d)) => {
            if d == 0.0 || !(s.is_finite() && l.is_finite() && d.is_finite()) {
                return invalid(format!("Range({s}, {l}, {d}) has no finite length"));
            }
            let n = ((l - s) / d).ceil();
            if n > MAX_RANGE as f64 {
                MAX_RANGE + 1
            } else if n > 0.0 {
                n as i128
            } else {
                0
            }
        }
        _ => return invalid("Range's start, limit and delta have different element types"),
    };
    if count > MAX_RANGE {
        return invalid(format!("Range would produce {count} elements"));
    }
    let count = usize::try_from(count).map_err(|_| OpError::Invalid("Range is too long".into()))?;
    Ok((elem, RangeArgs { start, delta, count }))
}

/// A Range whose start, limit or delta is data: its length is the one the
/// model declares, and the generated code checks the values against it.
fn range_runtime(cx: &NodeCx<'_>) -> OpResult<Option<(ElemType, usize)>> {
    if (0..3).all(|i| cx.constant(i).is_some()) {
        return Ok(None);
    }
    let elem = cx.input(0)?.elem;
    for i in 0..3 {
        let t = cx.input(i)?;
        if t.elem != elem {
            return invalid("Range's start, limit and delta have different element types");
        }
        if t.numel() != Some(1) {
            return invalid(format!(
                "Range's input {i} must be a scalar, it has dims {:?}",
                t.dims
            ));
        }
    }
    if !matches!(
        elem,
        ElemType::Float
            | ElemType::Double
            | ElemType::Float16
            | ElemType::Bfloat16
            | ElemType::Int16
            | ElemType::Int32
            | ElemType::Int64
    ) {
        return invalid(format!("Range is not defined on {elem} tensors"));
    }
    if let Some(t) = cx.declared_output(0)
        && (t.elem != elem || t.rank() != 1)
    {
        return invalid(format!("Range output is declared as {t}; a 1-D {elem} tensor expected"));
    }
    let Some(t) = cx.expected_output(0, elem, Some(1)) else {
        return unsupported(
            "Range's start, limit or delta is known only at run time and the model does not declare the output's length",
        );
    };
    match t.dims.as_slice() {
        [n] => Ok(Some((elem, *n))),
        dims => invalid(format!("Range's output must be 1-D, but it must have dims {dims:?}")),
    }
}

impl OpRule for RangeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        if let Some((elem, n)) = range_runtime(cx)? {
            return Ok(vec![TensorType::new(elem, vec![n])]);
        }
        let (elem, args) = range_args(cx)?;
        Ok(vec![TensorType::new(elem, vec![args.count])])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        if let Some((elem, n)) = range_runtime(cx)? {
            return Ok(Lowered::Kernel(Box::new(RuntimeRangeKernel { elem, len: n })));
        }
        let (elem, args) = range_args(cx)?;
        Ok(Lowered::Kernel(Box::new(RangeKernel { elem, args })))
    }
}

/// Range with start, limit and delta read at run time (see
/// [`range_runtime`]): the same formula as [`RangeKernel`], after
/// `check::range_*` has compared the length with the planned one.
struct RuntimeRangeKernel {
    elem: ElemType,
    len: usize,
}

impl Kernel for RuntimeRangeKernel {
    /// Never folded: its inputs are not constants.
    fn eval(&self, _inputs: &[Option<&HostTensor>], _outputs: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let y = io_out(io);
        let arg = |i: usize| io.inputs.get(i).cloned().flatten().unwrap_or_default();
        let (a0, a1, a2) = (arg(0), arg(1), arg(2));
        let n = lit::usize_lit(self.len);
        let (check, body) = match self.elem {
            ElemType::Float => (
                quote!(#rt::check::range_float(f64::from(s), f64::from(l), f64::from(d), #n)?;),
                quote!(s + (i as f32) * d),
            ),
            ElemType::Double => {
                (quote!(#rt::check::range_float(s, l, d, #n)?;), quote!(s + (i as f64) * d))
            }
            ElemType::Float16 | ElemType::Bfloat16 => {
                let t = if self.elem == ElemType::Float16 { quote!(f16) } else { quote!(bf16) };
                (
                    quote! {
                        let (s, l, d) = (s.to_f32(), l.to_f32(), d.to_f32());
                        #rt::check::range_float(f64::from(s), f64::from(l), f64::from(d), #n)?;
                    },
                    quote!(#rt::#t::from_f32(s + (i as f32) * d)),
                )
            }
            ElemType::Int64 => (
                quote!(#rt::check::range_int(s, l, d, #n)?;),
                quote!(s.wrapping_add((i as i64).wrapping_mul(d))),
            ),
            e => {
                let t = if e == ElemType::Int16 { quote!(i16) } else { quote!(i32) };
                (
                    quote!(#rt::check::range_int(i64::from(s), i64::from(l), i64::from(d), #n)?;),
                    quote!(s.wrapping_add((i as #t).wrapping_mul(d))),
                )
            }
        };
        quote! {
            let (s, l, d) = (
                #rt::check::scalar(#a0)?,
                #rt::check::scalar(#a1)?,
                #rt::check::scalar(#a2)?,
            );
            #check
            for (i, v) in #y.iter_mut().enumerate() {
                *v = #body;
            }
        }
    }
}

/// `y[i] = start + i * delta`, as the ONNX spec defines Range: integers
/// wrap (the true values are in range anyway), `float`/`double` compute in
/// their own precision, `float16`/`bfloat16` in `f32`, rounded once.
struct RangeKernel {
    elem: ElemType,
    args: RangeArgs,
}

fn range_float(a: &RangeArgs) -> (f64, f64) {
    match (a.start, a.delta) {
        (Wide::Float(s), Wide::Float(d)) => (s, d),
        _ => (0.0, 0.0),
    }
}

fn range_int(a: &RangeArgs) -> (i128, i128) {
    match (a.start, a.delta) {
        (Wide::Int(s), Wide::Int(d)) => (s, d),
        _ => (0, 0),
    }
}

impl Kernel for RangeKernel {
    fn eval(&self, _inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let y = outputs.first_mut().ok_or(EvalError::Type(self.elem))?;
        let (fs, fd) = range_float(&self.args);
        let (is, id) = range_int(&self.args);
        match &mut y.data {
            HostData::F32(v) => {
                let (s, d) = (fs as f32, fd as f32);
                v.iter_mut().enumerate().for_each(|(i, o)| *o = s + (i as f32) * d);
            }
            HostData::F64(v) => {
                v.iter_mut().enumerate().for_each(|(i, o)| *o = fs + (i as f64) * fd)
            }
            HostData::F16(v) => {
                let (s, d) = (fs as f32, fd as f32);
                v.iter_mut().enumerate().for_each(|(i, o)| *o = f16::from_f32(s + (i as f32) * d));
            }
            HostData::Bf16(v) => {
                let (s, d) = (fs as f32, fd as f32);
                v.iter_mut().enumerate().for_each(|(i, o)| *o = bf16::from_f32(s + (i as f32) * d));
            }
            HostData::I16(v) => {
                v.iter_mut().enumerate().for_each(|(i, o)| *o = (is + i as i128 * id) as i16);
            }
            HostData::I32(v) => {
                v.iter_mut().enumerate().for_each(|(i, o)| *o = (is + i as i128 * id) as i32);
            }
            HostData::I64(v) => {
                v.iter_mut().enumerate().for_each(|(i, o)| *o = (is + i as i128 * id) as i64);
            }
            _ => return Err(EvalError::Type(self.elem)),
        }
        Ok(())
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let y = io_out(io);
        let (fs, fd) = range_float(&self.args);
        let (is, id) = range_int(&self.args);
        let body = match self.elem {
            ElemType::Float => {
                let (s, d) = (lit::f32_lit(fs as f32), lit::f32_lit(fd as f32));
                quote!(#s + (i as f32) * #d)
            }
            ElemType::Double => {
                let (s, d) = (lit::f64_lit(fs), lit::f64_lit(fd));
                quote!(#s + (i as f64) * #d)
            }
            ElemType::Float16 | ElemType::Bfloat16 => {
                let (s, d) = (lit::f32_lit(fs as f32), lit::f32_lit(fd as f32));
                let t = if self.elem == ElemType::Float16 { quote!(f16) } else { quote!(bf16) };
                quote!(#rt::#t::from_f32(#s + (i as f32) * #d))
            }
            e => {
                let t = match e {
                    ElemType::Int16 => quote!(i16),
                    ElemType::Int32 => quote!(i32),
                    _ => quote!(i64),
                };
                let (s, d) = (int_lit(Wide::Int(is), e), int_lit(Wide::Int(id), e));
                quote!((#s).wrapping_add((i as #t).wrapping_mul(#d)))
            }
        };
        quote! {
            for (i, v) in #y.iter_mut().enumerate() {
                *v = #body;
            }
        }
    }

    /// Start, limit and delta were taken at generation time.
    fn reads_input(&self, _i: usize) -> bool {
        false
    }
}

// ---------------------------------------------------------------------------
// Sum, Mean, Max, Min with any number of inputs.

struct VariadicRule;

/// The element-wise rule for this node, when it takes the node (two inputs
/// for Max/Min, float Neg/Abs/Sign); `None` when this family handles it.
fn elementwise_rule(cx: &NodeCx<'_>) -> Option<&'static dyn OpRule> {
    let theirs = super::elementwise::rule(op(cx))?;
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
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::Broadcast
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

struct IntUnaryRule;

fn num_unary(cx: &NodeCx<'_>) -> OpResult<NumUnary<i64>> {
    Ok(match op(cx) {
        "Neg" => NumUnary::Neg,
        "Abs" => NumUnary::Abs,
        "Sign" => NumUnary::Sign,
        other => return unsupported(format!("{other} is not an integer unary operator")),
    })
}

impl OpRule for IntUnaryRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> super::ShapeRule {
        super::ShapeRule::SameAsInput0
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
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::{HostData, HostTensor};

    /// Inference over a model in the text syntax, with `opset`.
    fn run(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 10, opset_import: [\"\" : {opset}]>\n{graph}");
        let proto = crate::text::parse_model(&src, "t").unwrap_or_else(|e| panic!("{e}"));
        analyze(&proto, &Options::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn index(a: &Analysis, name: &str) -> usize {
        let values = a.model().graph.values();
        values.iter().position(|v| v.name == name).unwrap_or_else(|| panic!("no value {name}"))
    }

    /// The inferred type of `name`, as text.
    fn ty(a: &Analysis, name: &str) -> String {
        a.inferred.types[index(a, name)].as_ref().map(ToString::to_string).unwrap_or_default()
    }

    /// The folded value of `name`.
    fn value(a: &Analysis, name: &str) -> HostData {
        let t = a.inferred.constants[index(a, name)].as_ref().expect("a folded value");
        HostTensor::from_tensor(t).expect("a host form").data
    }

    /// Every problem found: unsupported reasons, then errors.
    fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> =
            a.inferred.unsupported.iter().map(|u| format!("unsupported: {}", u.reason)).collect();
        out.extend(a.inferred.errors.iter().map(|e| format!("error: {}", e.message)));
        out
    }

    fn clean(a: &Analysis) {
        assert!(problems(a).is_empty(), "{:?}", problems(a));
    }

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
    fn cast_targets_and_views() {
        let a = run(
            21,
            "g (float[2,3] x, int64[1] like) => (double[2,3] d) {
               d = Cast <to: int = 11> (x)
               s = Cast <to: int = 1> (x)
               l = CastLike (x, like)
               b = Cast <to: int = 9> (x)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "d"), "double[2, 3]");
        assert_eq!(ty(&a, "s"), "float[2, 3]");
        assert_eq!(ty(&a, "l"), "int64[2, 3]");
        assert_eq!(ty(&a, "b"), "bool[2, 3]");
        // Before opset 6 the target is a type name.
        let a = run(1, "g (float[2] x) => (int32[2] y) { y = Cast <to: string = \"INT32\"> (x) }");
        clean(&a);
        assert_eq!(ty(&a, "y"), "int32[2]");
        let a = run(21, "g (float[2] x) => (string[2] y) { y = Cast <to: int = 8> (x) }");
        let p = problems(&a);
        assert!(p.len() == 1 && p[0].contains("string tensors are not supported"), "{p:?}");
        let a = run(21, "g (float[2] x) => (float[2] y) { y = Cast <to: int = 99> (x) }");
        assert!(problems(&a)[0].contains("is not an element type"));
    }

    #[test]
    fn low_precision_casts() {
        let a = run(
            25,
            "g (float[5] x, int4[5] i, float8e5m2[1] like) => (float8e4m3fn[5] f) {
               f = Cast <to: int = 17, saturate: int = 0> (x)
               u = Cast <to: int = 25> (x)
               e = Cast <to: int = 24, round_mode: string = \"nearest\"> (x)
               h = Cast <to: int = 10> (i)
               k = CastLike (i, like)
               b = Cast <to: int = 9> (i)
               s = Cast <to: int = 22> (i)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "f"), "float8e4m3fn[5]");
        assert_eq!(ty(&a, "u"), "uint2[5]");
        assert_eq!(ty(&a, "e"), "float8e8m0[5]");
        assert_eq!(ty(&a, "h"), "float16[5]");
        assert_eq!(ty(&a, "k"), "float8e5m2[5]");
        assert_eq!(ty(&a, "b"), "bool[5]");
        assert_eq!(ty(&a, "s"), "int4[5]");
        // Packed values take whole bytes: 5 int4 are 3 bytes, 5 uint2 are 2.
        let t = |n: &str| a.inferred.types[index(&a, n)].clone().expect("a type");
        assert_eq!(super::super::storage_len(&t("i")), Some(3));
        assert_eq!(super::super::storage_len(&t("u")), Some(2));
        assert_eq!(super::super::storage_len(&t("f")), Some(5));
        assert_eq!(super::super::storage_len(&t("h")), Some(5));
    }

    #[test]
    fn low_precision_cast_errors() {
        let a = run(
            25,
            "g (float[2] x) => (float8e8m0[2] y) {
               y = Cast <to: int = 24, round_mode: string = \"sideways\"> (x)
               z = Cast <to: int = 17, saturate: int = 2> (x)
             }",
        );
        let p = problems(&a);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p.iter().any(|m| m.contains("'round_mode' = 'sideways'")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("'saturate' = 2 is not 0 or 1")), "{p:?}");
    }

    #[test]
    fn casts_fold_with_onnx_semantics() {
        let a = run(
            21,
            "g () => (int32[4] i) {
               f = Constant <value: tensor = float[4] {-2.75, 0.5, 300.0, 0.0}> ()
               i = Cast <to: int = 6> (f)
               u = Cast <to: int = 2> (i)
               b = Cast <to: int = 9> (f)
               c = Cast <to: int = 1> (b)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "i"), HostData::I32(vec![-2, 0, 300, 0]));
        // Integer narrowing wraps: 300 -> 44, -2 -> 254.
        assert_eq!(value(&a, "u"), HostData::U8(vec![254, 0, 44, 0]));
        assert_eq!(value(&a, "b"), HostData::Bool(vec![true, true, true, false]));
        assert_eq!(value(&a, "c"), HostData::F32(vec![1.0, 1.0, 1.0, 0.0]));
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

    #[test]
    fn constant_of_shape_needs_a_known_shape() {
        let a = run(
            20,
            "g () => (int32[2,3] y) {
               s = Constant <value: tensor = int64[2] {2, 3}> ()
               y = ConstantOfShape <value: tensor = int32[1] {7}> (s)
               z = ConstantOfShape (s)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "y"), HostData::I32(vec![7; 6]));
        assert_eq!(value(&a, "z"), HostData::F32(vec![0.0; 6]));
        // A shape known only at run time: the declared output, checked then.
        let a = run(20, "g (int64[2] s) => (float[4,3] y) { y = ConstantOfShape (s) }");
        clean(&a);
        let a = run(20, "g (int64[2] s) => (float[2] y) { y = ConstantOfShape (s) }");
        assert!(problems(&a)[0].contains("has 2 elements but its output is declared as float[2]"));
        let a = run(20, "g (int64[2] s) => (float[2,M] y) { y = ConstantOfShape (s) }");
        assert!(problems(&a)[0].contains("does not declare the output's shape"));
        // ...or the dims a declared value downstream implies, of the right rank.
        let a = run(
            20,
            "g (int64[2] s) => (double[4,3] y) { z = ConstantOfShape (s) y = Cast <to: int = 11> (z) }",
        );
        clean(&a);
        assert_eq!(ty(&a, "z"), "float[4, 3]");
        let a = run(
            20,
            "g (int64[1] s, float[1] k) => (float[1,1] y) { z = ConstantOfShape (s) y = Add (z, k) }",
        );
        assert!(problems(&a)[0].contains("does not declare the output's shape"));
        let a = run(
            20,
            "g () => (float[2] y) {
               s = Constant <value: tensor = int64[2] {2, -1}> ()
               y = ConstantOfShape (s)
             }",
        );
        assert!(problems(&a)[0].contains("negative dimension"));
    }

    #[test]
    fn range_lengths_follow_the_spec() {
        let a = run(
            11,
            "g () => (int64[3] r) {
               a = Constant <value: tensor = int64 {1}> ()
               b = Constant <value: tensor = int64 {10}> ()
               c = Constant <value: tensor = int64 {3}> ()
               r = Range (a, b, c)
               e = Range (b, a, c)
               fa = Constant <value: tensor = float {5}> ()
               fb = Constant <value: tensor = float {1}> ()
               fc = Constant <value: tensor = float {-1.5}> ()
               f = Range (fa, fb, fc)
             }",
        );
        clean(&a);
        assert_eq!(value(&a, "r"), HostData::I64(vec![1, 4, 7]));
        assert_eq!(ty(&a, "e"), "int64[0]");
        // ceil((1 - 5) / -1.5) = 3 elements.
        assert_eq!(value(&a, "f"), HostData::F32(vec![5.0, 3.5, 2.0]));
        // Arguments given as data: the declared length, checked at run time.
        let a = run(11, "g (int32 s, int32 l, int32 d) => (int32[2] r) { r = Range (s, l, d) }");
        clean(&a);
        assert_eq!(ty(&a, "r"), "int32[2]");
        // ...or the length a declared value downstream implies through shape-keeping ops.
        // c * c has c's shape, whatever it is.
        let a = run(
            11,
            "g (int32 s, int32 l, int32 d) => (float[3] y) {
               r = Range (s, l, d)
               c = Cast <to: int = 1> (r)
               y = Mul (c, c)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "r"), "int32[3]");
        // c * w could broadcast a one-element c over w: nothing is implied.
        let a = run(
            11,
            "g (int32 s, int32 l, int32 d, float[3] w) => (float[3] y) {
               r = Range (s, l, d)
               c = Cast <to: int = 1> (r)
               y = Mul (c, w)
             }",
        );
        assert!(problems(&a)[0].contains("known only at run time"), "{:?}", problems(&a));
        let a = run(
            11,
            "g (int32 s, int32 l, int32 d) => (float[3] y) <float k = {2}> {
               r = Range (s, l, d)
               c = Cast <to: int = 1> (r)
               y = Mul (c, k)
             }",
        );
        clean(&a);
        assert_eq!(ty(&a, "r"), "int32[3]");
        let a = run(11, "g (int32 s, int32 l, int32 d) => (int32[N] r) { r = Range (s, l, d) }");
        assert!(problems(&a)[0].contains("known only at run time"), "{:?}", problems(&a));
        let a = run(11, "g (int32 s, int32 l, int32 d) => (int32[2,2] r) { r = Range (s, l, d) }");
        assert!(problems(&a)[0].contains("a 1-D int32 tensor expected"), "{:?}", problems(&a));
        let a = run(
            11,
            "g () => (int32[2] r) {
               a = Constant <value: tensor = int32 {1}> ()
               z = Constant <value: tensor = int32 {0}> ()
               r = Range (a, a, z)
             }",
        );
        assert!(problems(&a)[0].contains("delta is 0"));
    }

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
