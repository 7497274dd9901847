//! ConstantOfShape and Range, whose shapes come from values known at
//! generation time (a Range over data takes the length the model declares,
//! and the generated code checks it).

use super::{host_bools_out, host_out, io_out, is_plain};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::{HostData, HostElem};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use onnx_codegen_runtime::cast::{CastElement, Wide};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::{Literal, TokenStream};
use quote::quote;

// ---------------------------------------------------------------------------
// ConstantOfShape.

pub(super) struct ConstantOfShapeRule;

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

pub(super) struct RangeRule;

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

#[cfg(test)]
mod tests {
    use crate::ops::HostData;
    use crate::ops::logic::testing::{clean, problems, run, ty, value};

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
}
