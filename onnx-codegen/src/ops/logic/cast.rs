//! Cast and CastLike: every pair of `float`, `double`, `float16`,
//! `bfloat16`, the integers, `bool` and the low-precision types held as
//! raw bytes (the four float8 types, `float8e8m0`, `float4e2m1`, `int4`,
//! `uint4`, `int2`, `uint2`), with `saturate` and `round_mode`; an
//! identical pair is a view.

use super::{ident, io_in, io_out, is_plain, no_output, op};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use crate::ops::host::HostData;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use onnx_codegen_runtime::cast::{self as rt_cast, CastElement, LowBit, Round};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct CastRule;

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
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = cx.input(0)?;
        let to = cast_target(cx)?;
        for e in [x.elem, to] {
            if !is_plain(e) && crate::ops::low_bit(e).is_none() {
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
            from_low: crate::ops::low_bit(from),
            to_low: crate::ops::low_bit(to),
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
        let fmt = |f: LowBit| crate::ops::low_bit_tokens(f, rt);
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

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::logic::testing::{clean, index, problems, run, ty, value};

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
        assert_eq!(crate::ops::storage_len(&t("i")), Some(3));
        assert_eq!(crate::ops::storage_len(&t("u")), Some(2));
        assert_eq!(crate::ops::storage_len(&t("f")), Some(5));
        assert_eq!(crate::ops::storage_len(&t("h")), Some(5));
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
}
