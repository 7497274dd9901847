//! Element-wise ops: unary maps and broadcasting binary / ternary ops.
//!
//! Unary float ops are described by [`Unary`] (with their attributes) and run
//! by [`unary`] (out of place) or [`unary_in_place`]; [`eval`] evaluates one
//! element and is what other kernels (RNN activations) reuse. Integer-capable
//! unary ops are [`NumUnary`].
//!
//! Binary ops take a [`Broadcast`] plan: the output shape and, per input, its
//! strides over that shape (0 on broadcast axes, see
//! [`crate::shape::broadcast_strides`]). The generator emits the plan as
//! consts. Equal contiguous shapes and scalar operands take a fast path.

use crate::cast::{CastElement, Wide};
use crate::num::{Flag, Float, Int, Num};
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, numel, walk};
use crate::{Error, Result, ensure, simd};

/// A unary float op and its attributes.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub enum Unary<T> {
    /// `max(x, 0)`.
    Relu,
    /// `x` if `x >= 0`, else `alpha * x`.
    LeakyRelu { alpha: T },
    /// `min(max(x, min), max)`; NaN stays NaN.
    Clip { min: T, max: T },
    /// `1 / (1 + e^-x)`, computed without overflow.
    Sigmoid,
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid { alpha: T, beta: T },
    /// `x * max(0, min(1, x / 6 + 1/2))`.
    HardSwish,
    /// Hyperbolic tangent.
    Tanh,
    /// Error function.
    Erf,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `-x`.
    Neg,
    /// `|x|`.
    Abs,
    /// `1 / x`.
    Reciprocal,
    /// Round down.
    Floor,
    /// Round up.
    Ceil,
    /// Round to nearest, ties to even.
    Round,
    /// -1, 0 or 1 (NaN stays NaN).
    Sign,
    /// Sine.
    Sin,
    /// Cosine.
    Cos,
    /// Tangent.
    Tan,
    /// Arcsine.
    Asin,
    /// Arccosine.
    Acos,
    /// Arctangent.
    Atan,
    /// Hyperbolic sine.
    Sinh,
    /// Hyperbolic cosine.
    Cosh,
    /// Inverse hyperbolic sine.
    Asinh,
    /// Inverse hyperbolic cosine.
    Acosh,
    /// Inverse hyperbolic tangent.
    Atanh,
    /// `ln(1 + e^x)`, computed without overflow.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x * Phi(x)` with the exact normal CDF (`approximate = "none"`).
    Gelu,
    /// Gelu with the tanh approximation (`approximate = "tanh"`).
    GeluTanh,
    /// `x * sigmoid(x)` (SiLU, or Swish with alpha 1): exporters write it as
    /// a `Sigmoid` and a `Mul`, which the generator folds into one `Swish`
    /// and, after a product, into the product's epilogue.
    Silu,
    /// `x` if `x > 0`, else `alpha * (e^x - 1)`.
    Elu { alpha: T },
    /// `gamma * (x if x > 0 else alpha * (e^x - 1))`.
    Selu { alpha: T, gamma: T },
    /// `x` if `x > alpha`, else 0.
    ThresholdedRelu { alpha: T },
    /// `alpha * x + beta` (an RNN activation).
    Affine { alpha: T, beta: T },
    /// `alpha * tanh(beta * x)` (an RNN activation).
    ScaledTanh { alpha: T, beta: T },
}

impl<T> Unary<T> {
    /// The same function with its parameters converted by `f` (the generator
    /// keeps parameters as `f64` and converts them to the element type).
    pub fn map<U>(self, f: impl Fn(T) -> U) -> Unary<U> {
        match self {
            Unary::Relu => Unary::Relu,
            Unary::LeakyRelu { alpha } => Unary::LeakyRelu { alpha: f(alpha) },
            Unary::Clip { min, max } => Unary::Clip { min: f(min), max: f(max) },
            Unary::Sigmoid => Unary::Sigmoid,
            Unary::HardSigmoid { alpha, beta } => {
                Unary::HardSigmoid { alpha: f(alpha), beta: f(beta) }
            }
            Unary::HardSwish => Unary::HardSwish,
            Unary::Tanh => Unary::Tanh,
            Unary::Erf => Unary::Erf,
            Unary::Exp => Unary::Exp,
            Unary::Log => Unary::Log,
            Unary::Sqrt => Unary::Sqrt,
            Unary::Neg => Unary::Neg,
            Unary::Abs => Unary::Abs,
            Unary::Reciprocal => Unary::Reciprocal,
            Unary::Floor => Unary::Floor,
            Unary::Ceil => Unary::Ceil,
            Unary::Round => Unary::Round,
            Unary::Sign => Unary::Sign,
            Unary::Sin => Unary::Sin,
            Unary::Cos => Unary::Cos,
            Unary::Tan => Unary::Tan,
            Unary::Asin => Unary::Asin,
            Unary::Acos => Unary::Acos,
            Unary::Atan => Unary::Atan,
            Unary::Sinh => Unary::Sinh,
            Unary::Cosh => Unary::Cosh,
            Unary::Asinh => Unary::Asinh,
            Unary::Acosh => Unary::Acosh,
            Unary::Atanh => Unary::Atanh,
            Unary::Softplus => Unary::Softplus,
            Unary::Softsign => Unary::Softsign,
            Unary::Gelu => Unary::Gelu,
            Unary::GeluTanh => Unary::GeluTanh,
            Unary::Silu => Unary::Silu,
            Unary::Elu { alpha } => Unary::Elu { alpha: f(alpha) },
            Unary::Selu { alpha, gamma } => Unary::Selu { alpha: f(alpha), gamma: f(gamma) },
            Unary::ThresholdedRelu { alpha } => Unary::ThresholdedRelu { alpha: f(alpha) },
            Unary::Affine { alpha, beta } => Unary::Affine { alpha: f(alpha), beta: f(beta) },
            Unary::ScaledTanh { alpha, beta } => {
                Unary::ScaledTanh { alpha: f(alpha), beta: f(beta) }
            }
        }
    }
}

/// Evaluates `op` on one element. Always inlined: callers pass a constant
/// `op`, and the match must fold away.
#[inline(always)]
pub fn eval<T: Float>(op: Unary<T>, x: T) -> T {
    let half = T::from_f64(0.5);
    match op {
        Unary::Relu => {
            if x < T::ZERO {
                T::ZERO
            } else {
                x
            }
        }
        Unary::LeakyRelu { alpha } => {
            if x < T::ZERO {
                alpha.mul(x)
            } else {
                x
            }
        }
        Unary::Clip { min, max } => {
            let v = if x < min { min } else { x };
            if v > max { max } else { v }
        }
        Unary::Sigmoid => sigmoid(x),
        Unary::Silu => x.mul(sigmoid(x)),
        Unary::HardSigmoid { alpha, beta } => clamp01(alpha.mul(x).add(beta)),
        Unary::HardSwish => x.mul(clamp01(x.mul(T::from_f64(1.0 / 6.0)).add(half))),
        Unary::Tanh => x.tanh(),
        Unary::Erf => x.erf(),
        Unary::Exp => x.exp(),
        Unary::Log => x.ln(),
        Unary::Sqrt => x.sqrt(),
        Unary::Neg => x.neg(),
        Unary::Abs => Num::abs(x),
        Unary::Reciprocal => T::ONE.div(x).unwrap_or(T::NAN),
        Unary::Floor => x.floor(),
        Unary::Ceil => x.ceil(),
        Unary::Round => x.round_even(),
        Unary::Sign => x.sign(),
        Unary::Sin => x.sin(),
        Unary::Cos => x.cos(),
        Unary::Tan => x.tan(),
        Unary::Asin => x.asin(),
        Unary::Acos => x.acos(),
        Unary::Atan => x.atan(),
        Unary::Sinh => x.sinh(),
        Unary::Cosh => x.cosh(),
        Unary::Asinh => x.asinh(),
        Unary::Acosh => x.acosh(),
        Unary::Atanh => x.atanh(),
        Unary::Softplus => {
            if x > T::ZERO {
                x.add(x.neg().exp().ln_1p())
            } else {
                x.exp().ln_1p()
            }
        }
        Unary::Softsign => x.div(T::ONE.add(Num::abs(x))).unwrap_or(T::NAN),
        Unary::Gelu => {
            let inv_sqrt2 = T::from_f64(core::f64::consts::FRAC_1_SQRT_2);
            half.mul(x).mul(T::ONE.add(x.mul(inv_sqrt2).erf()))
        }
        Unary::GeluTanh => {
            let c = T::from_f64(0.797_884_560_802_865_4); // sqrt(2 / pi)
            let inner = c.mul(x.add(T::from_f64(0.044715).mul(x).mul(x).mul(x)));
            half.mul(x).mul(T::ONE.add(inner.tanh()))
        }
        Unary::Elu { alpha } => {
            if x > T::ZERO {
                x
            } else {
                alpha.mul(x.exp().sub(T::ONE))
            }
        }
        Unary::Selu { alpha, gamma } => {
            if x > T::ZERO {
                gamma.mul(x)
            } else {
                gamma.mul(alpha.mul(x.exp().sub(T::ONE)))
            }
        }
        Unary::ThresholdedRelu { alpha } => {
            if x > alpha {
                x
            } else {
                T::ZERO
            }
        }
        Unary::Affine { alpha, beta } => alpha.mul(x).add(beta),
        Unary::ScaledTanh { alpha, beta } => alpha.mul(beta.mul(x).tanh()),
    }
}

#[inline]
fn clamp01<T: Float>(v: T) -> T {
    if v < T::ZERO {
        T::ZERO
    } else if v > T::ONE {
        T::ONE
    } else {
        v
    }
}

/// `1 / (1 + e^-x)` without overflowing `e^-x` for very negative `x`.
#[inline]
pub fn sigmoid<T: Float>(x: T) -> T {
    if x >= T::ZERO {
        T::ONE.div(T::ONE.add(x.neg().exp())).unwrap_or(T::NAN)
    } else {
        let e = x.exp();
        e.div(T::ONE.add(e)).unwrap_or(T::NAN)
    }
}

/// Applies `op` to every element of `x`, writing `y` (same length).
// Inlined so that `op`, a constant at every generated call, selects its
// function at compile time: no per-element dispatch, no unused math linked.
#[inline(always)]
pub fn unary<T: Float>(op: Unary<T>, x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = eval(op, v);
    }
    Ok(())
}

/// Applies `op` to every element of `x` in place.
// Inlined so that `op`, a constant at every generated call, selects its
// function at compile time: no per-element dispatch, no unused math linked.
#[inline(always)]
pub fn unary_in_place<T: Float>(op: Unary<T>, x: &mut [T]) {
    for v in x.iter_mut() {
        *v = eval(op, *v);
    }
}

/// [`unary`] on f32 for generated code: `Exp`, `Sigmoid`, `Tanh`, `Erf`,
/// `Gelu` and `GeluTanh` through the vectorised [`vmath`](crate::vmath) functions (a
/// few ulp from the exact ones), every other op as [`unary`]. Constant
/// folding keeps [`unary`].
pub fn sunary(op: Unary<f32>, x: &[f32], y: &mut [f32]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    match vmath_func(op) {
        Some(f) => crate::vmath::map(f, x, y),
        None => return unary(op, x, y),
    }
    Ok(())
}

/// [`sunary`] in place.
pub fn sunary_in_place(op: Unary<f32>, x: &mut [f32]) {
    match vmath_func(op) {
        Some(f) => crate::vmath::map_in_place(f, x),
        None => unary_in_place(op, x),
    }
}

/// The [`vmath`](crate::vmath) function computing `op`, if there is one.
fn vmath_func(op: Unary<f32>) -> Option<crate::vmath::Func> {
    use crate::vmath::Func;
    Some(match op {
        Unary::Exp => Func::Exp,
        Unary::Sigmoid => Func::Sigmoid,
        Unary::Tanh => Func::Tanh,
        Unary::Erf => Func::Erf,
        Unary::Gelu => Func::Gelu,
        Unary::GeluTanh => Func::GeluTanh,
        Unary::Silu => Func::Silu,
        _ => return None,
    })
}

/// A unary op that integers support too.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NumUnary<T> {
    /// `-x` (wrapping).
    Neg,
    /// `|x|` (wrapping).
    Abs,
    /// -1, 0 or 1.
    Sign,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, min), max)`.
    Clip { min: T, max: T },
}

#[inline]
fn eval_num<T: Num>(op: NumUnary<T>, x: T) -> T {
    match op {
        NumUnary::Neg => x.neg(),
        NumUnary::Abs => x.abs(),
        NumUnary::Sign => x.sign(),
        NumUnary::Relu => {
            if x < T::ZERO {
                T::ZERO
            } else {
                x
            }
        }
        NumUnary::Clip { min, max } => {
            let v = if x < min { min } else { x };
            if v > max { max } else { v }
        }
    }
}

/// Applies an integer-capable op to every element of `x`, writing `y`.
pub fn num_unary<T: Num>(op: NumUnary<T>, x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = eval_num(op, v);
    }
    Ok(())
}

/// In-place form of [`num_unary`].
pub fn num_unary_in_place<T: Num>(op: NumUnary<T>, x: &mut [T]) {
    for v in x.iter_mut() {
        *v = eval_num(op, *v);
    }
}

/// Logical not.
pub fn not<A: Flag, B: Flag>(x: &[A], y: &mut [B]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = B::from_bool(!v.get());
    }
    Ok(())
}

/// Bitwise not.
pub fn bit_not<T: Int>(x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v.bit_not();
    }
    Ok(())
}

/// A broadcast plan for an op with `K` inputs: the output shape and each
/// input's strides over it (0 on broadcast axes).
#[derive(Clone, Copy, Debug)]
pub struct Broadcast<'a, const K: usize> {
    /// Output shape (the broadcast of all input shapes).
    pub shape: &'a [usize],
    /// Per input, one stride per output axis, in elements.
    pub strides: [&'a [isize]; K],
}

fn is_contiguous(shape: &[usize], strides: &[isize]) -> bool {
    let mut expect: isize = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expect {
            return false;
        }
        expect = expect.wrapping_mul(d as isize);
    }
    true
}

/// How one input is read: as a contiguous run, as one repeated element, or strided.
#[derive(Clone, Copy, PartialEq)]
enum Access {
    Dense,
    Scalar,
    Strided,
}

fn access(shape: &[usize], strides: &[isize], len: usize, n: usize) -> Access {
    if len == 1 {
        Access::Scalar
    } else if len == n && is_contiguous(shape, strides) {
        Access::Dense
    } else {
        Access::Strided
    }
}

/// Runs `f` over the broadcast of `a` and `b` into `out`.
fn zip2<A: Copy, B: Copy, U>(
    p: &Broadcast<'_, 2>,
    a: &[A],
    b: &[B],
    out: &mut [U],
    mut f: impl FnMut(A, B) -> U,
) -> Result {
    let n = numel(p.shape)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    check_strided(p.shape, p.strides[0], 0, a.len())?;
    check_strided(p.shape, p.strides[1], 0, b.len())?;
    if n == 0 {
        return Ok(());
    }
    match (access(p.shape, p.strides[0], a.len(), n), access(p.shape, p.strides[1], b.len(), n)) {
        (Access::Dense, Access::Dense) => {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        }
        (Access::Dense, Access::Scalar) => {
            let y = b[0];
            for (o, &x) in out.iter_mut().zip(a) {
                *o = f(x, y);
            }
        }
        (Access::Scalar, Access::Dense) => {
            let x = a[0];
            for (o, &y) in out.iter_mut().zip(b) {
                *o = f(x, y);
            }
        }
        _ => {
            let mut os = [0isize; MAX_RANK];
            let os = &mut os[..p.shape.len()];
            contiguous_strides(p.shape, os)?;
            if !zip2_rows(p, a, b, out, os, &mut f) {
                walk(p.shape, [p.strides[0], p.strides[1], os], [0, 0, 0], |[i, j, o]| {
                    out[o] = f(a[i], b[j]);
                });
            }
        }
    }
    Ok(())
}

/// [`zip2`] row by row when the last axis is a contiguous run or a single
/// repeated element in both inputs (a row vector broadcast over rows, a
/// column broadcast along them): the multi-index walk then runs once per
/// row instead of once per element. Returns false, having written nothing,
/// for any other pattern. The strides were checked by the caller.
fn zip2_rows<A: Copy, B: Copy, U>(
    p: &Broadcast<'_, 2>,
    a: &[A],
    b: &[B],
    out: &mut [U],
    out_strides: &[isize],
    f: &mut impl FnMut(A, B) -> U,
) -> bool {
    let rank = p.shape.len();
    let (Some(&len), Some(&sa), Some(&sb)) =
        (p.shape.last(), p.strides[0].last(), p.strides[1].last())
    else {
        return false;
    };
    if len < 2 || !matches!(sa, 0 | 1) || !matches!(sb, 0 | 1) {
        return false;
    }
    let outer = &p.shape[..rank - 1];
    let strides = [&p.strides[0][..rank - 1], &p.strides[1][..rank - 1], &out_strides[..rank - 1]];
    walk(outer, strides, [0, 0, 0], |[i, j, o]| {
        debug_assert!(o + len <= out.len(), "zip2 row at {o}: {len} outputs past {}", out.len());
        let Some(dst) = out.get_mut(o..o + len) else { return };
        match (sa, sb) {
            (1, 1) => {
                if let (Some(x), Some(y)) = (a.get(i..i + len), b.get(j..j + len)) {
                    for ((d, &x), &y) in dst.iter_mut().zip(x).zip(y) {
                        *d = f(x, y);
                    }
                }
            }
            (1, _) => {
                if let (Some(x), Some(&y)) = (a.get(i..i + len), b.get(j)) {
                    for (d, &x) in dst.iter_mut().zip(x) {
                        *d = f(x, y);
                    }
                }
            }
            (_, 1) => {
                if let (Some(&x), Some(y)) = (a.get(i), b.get(j..j + len)) {
                    for (d, &y) in dst.iter_mut().zip(y) {
                        *d = f(x, y);
                    }
                }
            }
            _ => {
                if let (Some(&x), Some(&y)) = (a.get(i), b.get(j)) {
                    for d in dst.iter_mut() {
                        *d = f(x, y);
                    }
                }
            }
        }
    });
    true
}

/// An arithmetic binary op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arith {
    /// `a + b` (wrapping for integers).
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`; integers truncate toward zero.
    Div,
    /// `a ^ b`.
    Pow,
    /// Element-wise minimum (NaN propagates).
    Min,
    /// Element-wise maximum (NaN propagates).
    Max,
    /// `Mod` with `fmod = 0`: the remainder has the divisor's sign.
    Mod,
    /// `Mod` with `fmod = 1`: the remainder has the dividend's sign.
    Fmod,
}

/// `out = a (op) b` under the broadcast plan `p`. [`Error::DivisionByZero`]
/// for integer `Div`/`Mod`/`Fmod` by zero or `Pow` of zero by a negative
/// exponent (the other outputs are still written).
pub fn arith<T: Num>(op: Arith, p: &Broadcast<'_, 2>, a: &[T], b: &[T], out: &mut [T]) -> Result {
    let mut bad = false;
    let mut chk = |r: Option<T>| {
        r.unwrap_or_else(|| {
            bad = true;
            T::ZERO
        })
    };
    match op {
        Arith::Add => zip2(p, a, b, out, |x, y| x.add(y))?,
        Arith::Sub => zip2(p, a, b, out, |x, y| x.sub(y))?,
        Arith::Mul => zip2(p, a, b, out, |x, y| x.mul(y))?,
        Arith::Div => zip2(p, a, b, out, |x, y| chk(x.div(y)))?,
        Arith::Pow if is_f32_or_f64::<T>() => {
            // Exponents 2 and 3 (LayerNorm's variance, tanh GELU's cube) as
            // products: `powf` costs tens of cycles; the product differs from
            // it by float rounding only.
            let two = T::ONE.add(T::ONE);
            let three = two.add(T::ONE);
            zip2(p, a, b, out, |x, y| {
                if y == two {
                    x.mul(x)
                } else if y == three {
                    x.mul(x).mul(x)
                } else {
                    chk(x.pow(y))
                }
            })?
        }
        Arith::Pow => zip2(p, a, b, out, |x, y| chk(x.pow(y)))?,
        Arith::Min => zip2(p, a, b, out, |x, y| x.min_of(y))?,
        Arith::Max => zip2(p, a, b, out, |x, y| x.max_of(y))?,
        Arith::Mod => zip2(p, a, b, out, |x, y| chk(x.rem_floor(y)))?,
        Arith::Fmod => zip2(p, a, b, out, |x, y| chk(x.rem_trunc(y)))?,
    }
    if bad { Err(Error::DivisionByZero) } else { Ok(()) }
}

/// [`arith`] on f32 for generated code. `Add`, `Sub`, `Mul`, `Div` (and
/// `Pow` by a scalar 2 or 3, as the products [`arith`] uses) run as straight
/// loops compiled for the widest vector unit when every operand is read
/// whole, as one element, or row by row (a row vector or a column broadcast
/// over the last axis); the same IEEE operations in the same order, so the
/// results equal [`arith`]'s bit for bit. Anything else runs [`arith`].
pub fn sarith(op: Arith, p: &Broadcast<'_, 2>, a: &[f32], b: &[f32], out: &mut [f32]) -> Result {
    let n = numel(p.shape)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    check_strided(p.shape, p.strides[0], 0, a.len())?;
    check_strided(p.shape, p.strides[1], 0, b.len())?;
    let fop = match op {
        Arith::Add => FOp::Add,
        Arith::Sub => FOp::Sub,
        Arith::Mul => FOp::Mul,
        Arith::Div => FOp::Div,
        Arith::Pow if b.len() == 1 && b.first() == Some(&2.0) => FOp::Square,
        Arith::Pow if b.len() == 1 && b.first() == Some(&3.0) => FOp::Cube,
        _ => return arith(op, p, a, b, out),
    };
    if n == 0 {
        return Ok(());
    }
    let whole = |s: &[isize], len: usize| match access(p.shape, s, len, n) {
        Access::Dense => Some(Side::Run(0)),
        Access::Scalar => Some(Side::One(0)),
        Access::Strided => None,
    };
    if let (Some(sa), Some(sb)) = (whole(p.strides[0], a.len()), whole(p.strides[1], b.len())) {
        simd::vectorize_wide(FRows { op: fop, a, b, out, sides: Plan::Whole(sa, sb, n) });
        return Ok(());
    }
    let rank = p.shape.len();
    let (Some(&len), Some(&la), Some(&lb)) =
        (p.shape.last(), p.strides[0].last(), p.strides[1].last())
    else {
        return arith(op, p, a, b, out);
    };
    if len < 2 || !matches!(la, 0 | 1) || !matches!(lb, 0 | 1) {
        return arith(op, p, a, b, out);
    }
    let mut os = [0isize; MAX_RANK];
    let os = &mut os[..rank];
    contiguous_strides(p.shape, os)?;
    let outer = &p.shape[..rank - 1];
    let strides = [&p.strides[0][..rank - 1], &p.strides[1][..rank - 1], &os[..rank - 1]];
    let plan = Plan::Rows { outer, strides, len, runs: [la == 1, lb == 1] };
    simd::vectorize_wide(FRows { op: fop, a, b, out, sides: plan });
    Ok(())
}

/// The element offsets, one per operand, where row `r` of a row-major walk
/// over the `outer` axes starts (`None` past the end or for an offset below
/// zero, which checked strides never give). Row loops call this instead of
/// [`walk`] so that their bodies are compiled inside the vectorised function
/// rather than in a closure of their own.
#[inline(always)]
pub(crate) fn row_start<const K: usize>(
    outer: &[usize],
    strides: [&[isize]; K],
    mut r: usize,
) -> Option<[usize; K]> {
    let mut off = [0isize; K];
    for (axis, &d) in outer.iter().enumerate().rev() {
        let q = r.checked_div(d)?;
        let i = (r - q * d) as isize;
        r = q;
        for (o, s) in off.iter_mut().zip(strides) {
            *o = o.wrapping_add(i.wrapping_mul(*s.get(axis)?));
        }
    }
    if r != 0 {
        return None;
    }
    let mut out = [0usize; K];
    for (o, &v) in out.iter_mut().zip(&off) {
        *o = usize::try_from(v).ok()?;
    }
    Some(out)
}

/// The f32 operations [`sarith`] runs as vector loops.
#[derive(Clone, Copy)]
enum FOp {
    Add,
    Sub,
    Mul,
    Div,
    /// `a * a` (`Pow` by 2; `b` is not read).
    Square,
    /// `a * a * a` (`Pow` by 3).
    Cube,
}

/// Where one [`sarith`] operand's row starts: a run of the row's length or
/// one element repeated along it.
#[derive(Clone, Copy)]
enum Side {
    Run(usize),
    One(usize),
}

/// How [`sarith`] cuts the output: one row of `n` elements, or rows of `len`
/// along the last axis at the offsets a walk of the outer axes gives (an
/// operand runs along the row when its flag in `runs` is set).
#[derive(Clone, Copy)]
enum Plan<'a> {
    Whole(Side, Side, usize),
    Rows { outer: &'a [usize], strides: [&'a [isize]; 3], len: usize, runs: [bool; 2] },
}

/// One [`sarith`] call, compiled inside [`simd::vectorize_wide`].
struct FRows<'a> {
    op: FOp,
    a: &'a [f32],
    b: &'a [f32],
    out: &'a mut [f32],
    sides: Plan<'a>,
}

impl simd::Vectorize for FRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let FRows { op, a, b, out, sides } = self;
        match sides {
            Plan::Whole(sa, sb, n) => frow(op, a, sa, b, sb, out.get_mut(..n).unwrap_or(&mut [])),
            Plan::Rows { outer, strides, len, runs } => {
                let side = |run: bool, at: usize| if run { Side::Run(at) } else { Side::One(at) };
                for r in 0..out.len() / len {
                    let Some([i, j, o]) = row_start(outer, strides, r) else { continue };
                    if let Some(dst) = out.get_mut(o..o + len) {
                        frow(op, a, side(runs[0], i), b, side(runs[1], j), dst);
                    }
                }
            }
        }
    }
}

/// `dst[k] = a(k) (op) b(k)` along one row. A run shorter than `dst` (not
/// possible after [`check_strided`]) leaves the rest unwritten.
#[inline(always)]
fn frow(op: FOp, a: &[f32], sa: Side, b: &[f32], sb: Side, dst: &mut [f32]) {
    macro_rules! row {
        (|$x:ident, $y:ident| $e:expr) => {
            match (sa, sb) {
                (Side::Run(i), Side::Run(j)) => {
                    let n = dst.len();
                    if let (Some(xs), Some(ys)) = (a.get(i..i + n), b.get(j..j + n)) {
                        for ((d, &$x), &$y) in dst.iter_mut().zip(xs).zip(ys) {
                            *d = $e;
                        }
                    }
                }
                (Side::Run(i), Side::One(j)) => {
                    let n = dst.len();
                    if let (Some(xs), Some(&$y)) = (a.get(i..i + n), b.get(j)) {
                        for (d, &$x) in dst.iter_mut().zip(xs) {
                            *d = $e;
                        }
                    }
                }
                (Side::One(i), Side::Run(j)) => {
                    let n = dst.len();
                    if let (Some(&$x), Some(ys)) = (a.get(i), b.get(j..j + n)) {
                        for (d, &$y) in dst.iter_mut().zip(ys) {
                            *d = $e;
                        }
                    }
                }
                (Side::One(i), Side::One(j)) => {
                    if let (Some(&$x), Some(&$y)) = (a.get(i), b.get(j)) {
                        dst.fill($e);
                    }
                }
            }
        };
    }
    match op {
        FOp::Add => row!(|x, y| x + y),
        FOp::Sub => row!(|x, y| x - y),
        FOp::Mul => row!(|x, y| x * y),
        FOp::Div => row!(|x, y| x / y),
        FOp::Square => row!(|x, _y| x * x),
        FOp::Cube => row!(|x, _y| x * x * x),
    }
}

/// Whether `T` is `f32` or `f64`, the types whose `Pow` by 2 or 3 may run as
/// products (16-bit floats would round twice; integers are exact already).
fn is_f32_or_f64<T: 'static>() -> bool {
    let t = core::any::TypeId::of::<T>();
    t == core::any::TypeId::of::<f32>() || t == core::any::TypeId::of::<f64>()
}

/// ONNX `Pow` whose exponent type differs from the base's (e.g. a float
/// base with an `i64` exponent). A float base raises to the exponent
/// converted to the base type; an integer base with an integer exponent is
/// an exact wrapping power (negative exponents as in [`Num::pow`]); an
/// integer base with a float exponent is computed in `f64` and truncated like
/// `Cast`. [`Error::DivisionByZero`] for 0 raised to a negative integer.
pub fn pow_mixed<B: Num + CastElement, E: CastElement>(
    p: &Broadcast<'_, 2>,
    base: &[B],
    exponent: &[E],
    out: &mut [B],
) -> Result {
    let mut bad = false;
    zip2(p, base, exponent, out, |x, e| match (x.to_wide(), e.to_wide()) {
        (Wide::Int(xi), Wide::Int(n)) => int_pow(x, xi, n).unwrap_or_else(|| {
            bad = true;
            B::ZERO
        }),
        (Wide::Int(xi), Wide::Float(f)) => B::from_wide(Wide::Float(libm::pow(xi as f64, f))),
        (Wide::Float(_), w) => x.pow(B::from_wide(w)).unwrap_or(B::ZERO),
    })?;
    if bad { Err(Error::DivisionByZero) } else { Ok(()) }
}

/// `x^n` with wrapping multiplication; `xi` is `x` widened.
fn int_pow<B: Num>(x: B, xi: i128, n: i128) -> Option<B> {
    if n < 0 {
        return match xi {
            0 => None,
            1 => Some(B::ONE),
            -1 => Some(if n % 2 == 0 { B::ONE } else { x }),
            _ => Some(B::ZERO),
        };
    }
    let (mut base, mut e, mut r) = (x, n as u128, B::ONE);
    while e > 0 {
        if e & 1 == 1 {
            r = r.mul(base);
        }
        base = base.mul(base);
        e >>= 1;
    }
    Some(r)
}

/// A comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compare {
    /// `a == b`.
    Equal,
    /// `a < b`.
    Less,
    /// `a > b`.
    Greater,
    /// `a <= b`.
    LessOrEqual,
    /// `a >= b`.
    GreaterOrEqual,
}

/// `out = a (op) b` under the broadcast plan `p`; NaN compares false
/// (unequal to everything).
pub fn compare<T: PartialOrd + Copy, F: Flag>(
    op: Compare,
    p: &Broadcast<'_, 2>,
    a: &[T],
    b: &[T],
    out: &mut [F],
) -> Result {
    match op {
        Compare::Equal => zip2(p, a, b, out, |x, y| F::from_bool(x == y)),
        Compare::Less => zip2(p, a, b, out, |x, y| F::from_bool(x < y)),
        Compare::Greater => zip2(p, a, b, out, |x, y| F::from_bool(x > y)),
        Compare::LessOrEqual => zip2(p, a, b, out, |x, y| F::from_bool(x <= y)),
        Compare::GreaterOrEqual => zip2(p, a, b, out, |x, y| F::from_bool(x >= y)),
    }
}

/// A logical binary op on booleans.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logic {
    /// `a && b`.
    And,
    /// `a || b`.
    Or,
    /// `a != b`.
    Xor,
    /// `a == b` (ONNX `Equal` on bool).
    Equal,
}

/// `out = a (op) b` on booleans under the broadcast plan `p`.
pub fn logic<A: Flag, B: Flag, F: Flag>(
    op: Logic,
    p: &Broadcast<'_, 2>,
    a: &[A],
    b: &[B],
    out: &mut [F],
) -> Result {
    match op {
        Logic::And => zip2(p, a, b, out, |x, y| F::from_bool(x.get() && y.get())),
        Logic::Or => zip2(p, a, b, out, |x, y| F::from_bool(x.get() || y.get())),
        Logic::Xor => zip2(p, a, b, out, |x, y| F::from_bool(x.get() != y.get())),
        Logic::Equal => zip2(p, a, b, out, |x, y| F::from_bool(x.get() == y.get())),
    }
}

/// A bitwise binary op on integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bitwise {
    /// `a & b`.
    And,
    /// `a | b`.
    Or,
    /// `a ^ b`.
    Xor,
    /// `a << b` (`BitShift` with `direction = "LEFT"`); 0 when `b` is negative
    /// or >= width.
    ShiftLeft,
    /// `a >> b` (`direction = "RIGHT"`), arithmetic for signed types; when
    /// `b` is negative or >= width, the sign fill (0, or -1 for negative `a`).
    ShiftRight,
}

/// `out = a (op) b` on integers under the broadcast plan `p`.
pub fn bitwise<T: Int>(
    op: Bitwise,
    p: &Broadcast<'_, 2>,
    a: &[T],
    b: &[T],
    out: &mut [T],
) -> Result {
    match op {
        Bitwise::And => zip2(p, a, b, out, |x, y| x.bit_and(y)),
        Bitwise::Or => zip2(p, a, b, out, |x, y| x.bit_or(y)),
        Bitwise::Xor => zip2(p, a, b, out, |x, y| x.bit_xor(y)),
        Bitwise::ShiftLeft => zip2(p, a, b, out, |x, y| x.shl(y)),
        // Out of range (negative or >= width), a signed value shifts to its
        // sign fill: an in-range shift of a negative value is never 0.
        Bitwise::ShiftRight => zip2(p, a, b, out, |x, y| match x.shr(y) {
            r if r == T::ZERO && x < T::ZERO => T::ZERO.sub(T::ONE),
            r => r,
        }),
    }
}

/// ONNX `Where`: `out = if cond { x } else { y }` under the three-input plan
/// `p` (strides in the order cond, x, y).
pub fn where_<F: Flag, T: Copy>(
    p: &Broadcast<'_, 3>,
    cond: &[F],
    x: &[T],
    y: &[T],
    out: &mut [T],
) -> Result {
    let n = numel(p.shape)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    check_strided(p.shape, p.strides[0], 0, cond.len())?;
    check_strided(p.shape, p.strides[1], 0, x.len())?;
    check_strided(p.shape, p.strides[2], 0, y.len())?;
    let mut os = [0isize; MAX_RANK];
    let os = &mut os[..p.shape.len()];
    contiguous_strides(p.shape, os)?;
    let rank = p.shape.len();
    let last = |k: usize| p.strides[k].last().copied().filter(|s| matches!(s, 0 | 1));
    if let (Some(&len), Some(lc), Some(lx), Some(ly)) = (p.shape.last(), last(0), last(1), last(2))
        && len >= 2
    {
        // Row by row: one walk step per row of the last axis, each operand a
        // run along the row (stride 1) or one element repeated (stride 0).
        let outer = &p.shape[..rank - 1];
        let strides = [
            &p.strides[0][..rank - 1],
            &p.strides[1][..rank - 1],
            &p.strides[2][..rank - 1],
            &os[..rank - 1],
        ];
        let (sc, sx, sy) = (lc as usize, lx as usize, ly as usize);
        simd::vectorize_wide(WhereRows {
            outer,
            strides,
            len,
            steps: [sc, sx, sy],
            cond,
            x,
            y,
            out,
        });
        return Ok(());
    }
    walk(p.shape, [p.strides[0], p.strides[1], p.strides[2], os], [0; 4], |[c, i, j, o]| {
        out[o] = if cond[c].get() { x[i] } else { y[j] };
    });
    Ok(())
}

/// The rows of one [`where_`] call whose operands all run along the last
/// axis or repeat one element of it (`steps` 1 or 0, in the order cond, x,
/// y); compiled inside [`simd::vectorize_wide`].
struct WhereRows<'a, F, T> {
    outer: &'a [usize],
    strides: [&'a [isize]; 4],
    len: usize,
    steps: [usize; 3],
    cond: &'a [F],
    x: &'a [T],
    y: &'a [T],
    out: &'a mut [T],
}

impl<F: Flag, T: Copy> simd::Vectorize for WhereRows<'_, F, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let WhereRows { outer, strides, len, steps, cond, x, y, out } = self;
        // The end of each operand's read in a row, as `check_strided`
        // bounded it: `len` elements for a run, one for a repeat.
        let end = |at: usize, step: usize| at + if step == 1 { len } else { 1 };
        for r in 0..out.len() / len {
            let Some([c, i, j, o]) = row_start(outer, strides, r) else { continue };
            let (Some(cr), Some(xr), Some(yr), Some(dst)) = (
                cond.get(c..end(c, steps[0])),
                x.get(i..end(i, steps[1])),
                y.get(j..end(j, steps[2])),
                out.get_mut(o..o + len),
            ) else {
                continue;
            };
            match steps {
                [1, 1, 1] => {
                    for (((d, c), &a), &b) in dst.iter_mut().zip(cr).zip(xr).zip(yr) {
                        *d = if c.get() { a } else { b };
                    }
                }
                [1, 1, _] => {
                    let b = yr[0];
                    for ((d, c), &a) in dst.iter_mut().zip(cr).zip(xr) {
                        *d = if c.get() { a } else { b };
                    }
                }
                [1, _, 1] => {
                    let a = xr[0];
                    for ((d, c), &b) in dst.iter_mut().zip(cr).zip(yr) {
                        *d = if c.get() { a } else { b };
                    }
                }
                [1, _, _] => {
                    let (a, b) = (xr[0], yr[0]);
                    for (d, c) in dst.iter_mut().zip(cr) {
                        *d = if c.get() { a } else { b };
                    }
                }
                _ => {
                    let (sx, sy) = (steps[1], steps[2]);
                    let pick = cr[0].get();
                    for (k, d) in dst.iter_mut().enumerate() {
                        *d = if pick { xr[k * sx] } else { yr[k * sy] };
                    }
                }
            }
        }
    }
}

/// [`where_`] for boolean `x` and `y`, which may each be stored as `bool`
/// (the caller's buffers) or `u8` (the arena), independently of the output.
pub fn where_flags<C: Flag, A: Flag, B: Flag, O: Flag>(
    p: &Broadcast<'_, 3>,
    cond: &[C],
    x: &[A],
    y: &[B],
    out: &mut [O],
) -> Result {
    let n = numel(p.shape)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    check_strided(p.shape, p.strides[0], 0, cond.len())?;
    check_strided(p.shape, p.strides[1], 0, x.len())?;
    check_strided(p.shape, p.strides[2], 0, y.len())?;
    let mut os = [0isize; MAX_RANK];
    let os = &mut os[..p.shape.len()];
    contiguous_strides(p.shape, os)?;
    walk(p.shape, [p.strides[0], p.strides[1], p.strides[2], os], [0; 4], |[c, i, j, o]| {
        out[o] = O::from_bool(if cond[c].get() { x[i].get() } else { y[j].get() });
    });
    Ok(())
}

/// A float classification (ONNX `IsNaN`, `IsInf`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatClass {
    /// NaN.
    Nan,
    /// An infinity of a selected sign (`IsInf`'s `detect_negative` and
    /// `detect_positive`).
    Inf { negative: bool, positive: bool },
}

/// `out = class(x)` for any float type (`f32`, `f64`, `f16`, `bf16`).
pub fn classify<T: CastElement, F: Flag>(class: FloatClass, x: &[T], out: &mut [F]) -> Result {
    ensure(x.len() == out.len(), Error::ShapeMismatch)?;
    for (o, &v) in out.iter_mut().zip(x) {
        let v = match v.to_wide() {
            Wide::Float(v) => v,
            Wide::Int(_) => 0.0,
        };
        *o = F::from_bool(match class {
            FloatClass::Nan => v.is_nan(),
            FloatClass::Inf { negative, positive } => {
                (negative && v == f64::NEG_INFINITY) || (positive && v == f64::INFINITY)
            }
        });
    }
    Ok(())
}

/// `out = out (op) x`, with `x` read through broadcast strides over `shape`
/// (`out`'s shape): one step of a variadic `Sum`, `Mean`, `Max` or `Min`
/// (`Mean` ends with a `Div` by the input count). Same semantics and errors
/// as [`arith`].
pub fn accumulate<T: Num>(
    op: Arith,
    shape: &[usize],
    x_strides: &[isize],
    x: &[T],
    out: &mut [T],
) -> Result {
    let n = numel(shape)?;
    ensure(out.len() == n, Error::ShapeMismatch)?;
    check_strided(shape, x_strides, 0, x.len())?;
    let mut os = [0isize; MAX_RANK];
    let os = &mut os[..shape.len()];
    contiguous_strides(shape, os)?;
    let mut bad = false;
    walk(shape, [x_strides, os], [0, 0], |[i, o]| {
        let (a, b) = (out[o], x[i]);
        let r = match op {
            Arith::Add => Some(a.add(b)),
            Arith::Sub => Some(a.sub(b)),
            Arith::Mul => Some(a.mul(b)),
            Arith::Div => a.div(b),
            Arith::Pow => a.pow(b),
            Arith::Min => Some(a.min_of(b)),
            Arith::Max => Some(a.max_of(b)),
            Arith::Mod => a.rem_floor(b),
            Arith::Fmod => a.rem_trunc(b),
        };
        out[o] = r.unwrap_or_else(|| {
            bad = true;
            T::ZERO
        });
    });
    if bad { Err(Error::DivisionByZero) } else { Ok(()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAME4: Broadcast<'static, 2> = Broadcast { shape: &[4], strides: [&[1], &[1]] };

    #[test]
    fn broadcast_rows_match_the_element_walk() {
        // Row vector over rows, column over columns, a transposed operand
        // (walked element by element), and the same with shapes ending in 1.
        // (shape, strides of a and b, length of a, length of b)
        type Case<'a> = (&'a [usize], [&'a [isize]; 2], usize, usize);
        let cases: [Case<'_>; 6] = [
            (&[1, 4, 5], [&[0, 0, 1], &[0, 5, 1]], 5, 20),
            (&[4, 5], [&[1, 0], &[5, 1]], 4, 20),
            (&[4, 5], [&[5, 1], &[0, 1]], 20, 5),
            (&[4, 5], [&[1, 4], &[5, 1]], 20, 20),
            (&[3, 4, 1], [&[0, 1, 0], &[4, 1, 1]], 4, 12),
            (&[2, 3, 2], [&[0, 2, 1], &[6, 0, 1]], 6, 12),
        ];
        for (shape, strides, na, nb) in cases {
            let a: [i64; 20] = core::array::from_fn(|i| i as i64 * 7 - 30);
            let b: [i64; 20] = core::array::from_fn(|i| 100 - i as i64 * 3);
            let p = Broadcast { shape, strides };
            let n: usize = shape.iter().product();
            let mut got = [0i64; 20];
            arith(Arith::Sub, &p, &a[..na], &b[..nb], &mut got[..n]).unwrap();
            // The reference: every multi-index by hand.
            let mut want = [0i64; 20];
            let mut idx = [0usize; 3];
            for w in want[..n].iter_mut() {
                let off =
                    |s: &[isize]| idx.iter().zip(s).map(|(&i, &s)| i as isize * s).sum::<isize>();
                *w = a[off(strides[0]) as usize] - b[off(strides[1]) as usize];
                crate::shape::next_index(&mut idx[..shape.len()], shape);
            }
            assert_eq!(got[..n], want[..n], "{shape:?} {strides:?}");
        }
    }

    /// Deterministic values of both signs, with exact zeros and a few NaNs
    /// and infinities when `special`.
    fn values(n: usize, seed: u32, special: bool) -> [f32; 64] {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        core::array::from_fn(|i| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let v = ((x >> 8) % 2001) as f32 / 250.0 - 4.0;
            match (special, i % 17) {
                _ if i >= n => 0.0,
                (true, 3) => f32::NAN,
                (true, 5) => f32::INFINITY,
                (true, 11) => 0.0,
                _ => v,
            }
        })
    }

    /// A two-input plan: shape, strides, and the lengths of the operands.
    type Plan2 = (&'static [usize], [&'static [isize]; 2], usize, usize);

    /// Every plan kind [`sarith`] takes: whole operands,
    /// scalars, rows of a row vector or a column, and strided reads that fall
    /// back to the walk; shapes with odd widths and sizes 1 to 40.
    fn plans() -> [Plan2; 12] {
        [
            (&[37], [&[1], &[1]], 37, 37),
            (&[3, 13], [&[13, 1], &[0, 0]], 39, 1),
            (&[1], [&[0], &[1]], 1, 1),
            (&[5, 7], [&[0, 0], &[7, 1]], 1, 35),
            (&[6, 5], [&[5, 1], &[0, 1]], 30, 5),
            (&[2, 3, 7], [&[21, 7, 1], &[7, 0, 1]], 42, 14),
            (&[4, 9], [&[9, 1], &[1, 0]], 36, 4),
            (&[4, 9], [&[0, 1], &[1, 0]], 9, 4),
            (&[3, 1, 11], [&[11, 0, 1], &[1, 0, 0]], 33, 3),
            (&[5, 8], [&[1, 5], &[8, 1]], 40, 40),
            (&[2, 2, 10], [&[1, 2, 0], &[20, 10, 1]], 4, 40),
            (&[40, 1], [&[1, 0], &[0, 0]], 40, 1),
        ]
    }

    #[test]
    fn fast_f32_arith_equals_the_exact_kernel_bit_for_bit() {
        for (shape, strides, na, nb) in plans() {
            let p = Broadcast { shape, strides };
            let n: usize = shape.iter().product();
            for special in [false, true] {
                let a = values(na, 1, special);
                let b = values(nb, 2, special);
                for op in [Arith::Add, Arith::Sub, Arith::Mul, Arith::Div, Arith::Max, Arith::Pow] {
                    let (mut want, mut got) = ([0.0f32; 64], [1.5f32; 64]);
                    arith(op, &p, &a[..na], &b[..nb], &mut want[..n]).unwrap();
                    sarith(op, &p, &a[..na], &b[..nb], &mut got[..n]).unwrap();
                    for (w, g) in want[..n].iter().zip(&got[..n]) {
                        assert_eq!(w.to_bits(), g.to_bits(), "{op:?} {shape:?} {strides:?}");
                    }
                }
            }
            // Pow by a scalar 2 or 3 (the products) and by another scalar.
            if nb == 1 {
                for e in [2.0f32, 3.0, 0.5] {
                    let a = values(na, 3, true);
                    let (mut want, mut got) = ([0.0f32; 64], [1.5f32; 64]);
                    arith(Arith::Pow, &p, &a[..na], &[e], &mut want[..n]).unwrap();
                    sarith(Arith::Pow, &p, &a[..na], &[e], &mut got[..n]).unwrap();
                    for (w, g) in want[..n].iter().zip(&got[..n]) {
                        assert_eq!(w.to_bits(), g.to_bits(), "^{e} {shape:?}");
                    }
                }
            }
        }
        // Bad plans are refused as by `arith`, not read out of bounds.
        let p = Broadcast { shape: &[2, 3], strides: [&[3, 1], &[0, 1]] };
        let mut o = [0.0f32; 6];
        assert_eq!(sarith(Arith::Add, &p, &[1.0; 5], &[1.0; 3], &mut o), Err(Error::ShapeMismatch));
        assert_eq!(
            sarith(Arith::Add, &p, &[1.0; 6], &[1.0; 3], &mut o[..5]),
            Err(Error::ShapeMismatch)
        );
        let p = Broadcast { shape: &[0, 3], strides: [&[3, 1], &[0, 1]] };
        assert_eq!(sarith(Arith::Mul, &p, &[], &[1.0; 3], &mut []), Ok(()));
    }

    #[test]
    fn where_rows_match_the_element_walk() {
        // (shape, strides of cond, x, y) with the lengths they read.
        type Case = (&'static [usize], [&'static [isize]; 3], [usize; 3]);
        let cases: [Case; 8] = [
            (&[1, 4, 13, 13], [&[0, 0, 13, 1], &[0, 169, 13, 1], &[0, 0, 0, 0]], [169, 676, 1]),
            (&[3, 7], [&[7, 1], &[7, 1], &[7, 1]], [21, 21, 21]),
            (&[3, 7], [&[1, 0], &[0, 1], &[7, 1]], [3, 7, 21]),
            (&[3, 7], [&[7, 1], &[0, 0], &[0, 0]], [21, 1, 1]),
            (&[3, 7], [&[1, 0], &[0, 0], &[7, 1]], [3, 1, 21]),
            (&[2, 5], [&[1, 0], &[5, 1], &[0, 0]], [2, 10, 1]),
            (&[1], [&[0], &[0], &[0]], [1, 1, 1]),
            (&[4, 6], [&[6, 1], &[1, 4], &[0, 1]], [24, 24, 6]),
        ];
        for (shape, strides, [nc, nx, ny]) in cases {
            let p = Broadcast { shape, strides };
            let n: usize = shape.iter().product();
            let cond: [bool; 676] = core::array::from_fn(|i| (i * 7 + i / 3) % 5 < 2);
            let x: [f32; 676] = core::array::from_fn(|i| i as f32 - 300.0);
            let y: [f32; 676] = core::array::from_fn(|i| -(i as f32) * 0.5);
            let mut got = [0.0f32; 676];
            where_(&p, &cond[..nc], &x[..nx], &y[..ny], &mut got[..n]).unwrap();
            let mut idx = [0usize; 4];
            for g in got[..n].iter() {
                let off = |s: &[isize]| {
                    idx.iter().zip(s).map(|(&i, &s)| i as isize * s).sum::<isize>() as usize
                };
                let want =
                    if cond[off(strides[0])] { x[off(strides[1])] } else { y[off(strides[2])] };
                assert_eq!(g.to_bits(), want.to_bits(), "{shape:?} {strides:?}");
                crate::shape::next_index(&mut idx[..shape.len()], shape);
            }
        }
        let p = Broadcast { shape: &[2, 3], strides: [&[3, 1], &[3, 1], &[0, 1]] };
        let mut o = [0.0f32; 6];
        assert!(where_(&p, &[true; 6], &[1.0; 6], &[1.0; 2], &mut o).is_err());
    }

    #[test]
    fn fast_unary_close_to_exact() {
        let x: [f32; 45] = core::array::from_fn(|i| (i as f32 - 22.0) * 0.41);
        for op in [
            Unary::Exp,
            Unary::Sigmoid,
            Unary::Tanh,
            Unary::Erf,
            Unary::Gelu,
            Unary::GeluTanh,
            Unary::Relu,
        ] {
            let (mut a, mut b) = ([0.0f32; 45], [0.0f32; 45]);
            unary(op, &x, &mut a).unwrap();
            sunary(op, &x, &mut b).unwrap();
            let mut c = x;
            sunary_in_place(op, &mut c);
            for ((p, q), r) in a.iter().zip(&b).zip(&c) {
                assert!((p - q).abs() <= 1e-6 * p.abs() + 1e-7, "{op:?}: {p} {q}");
                assert_eq!(q.to_bits(), r.to_bits());
            }
        }
        assert_eq!(sunary(Unary::Exp, &x, &mut [0.0; 3]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn float_unary_hand_values() {
        let x = [-2.0f32, -0.5, 0.0, 3.0];
        let mut y = [0.0f32; 4];
        unary(Unary::Relu, &x, &mut y).unwrap();
        assert_eq!(y, [0.0, 0.0, 0.0, 3.0]);
        unary(Unary::LeakyRelu { alpha: 0.5 }, &x, &mut y).unwrap();
        assert_eq!(y, [-1.0, -0.25, 0.0, 3.0]);
        unary(Unary::Clip { min: -1.0, max: 1.0 }, &x, &mut y).unwrap();
        assert_eq!(y, [-1.0, -0.5, 0.0, 1.0]);
        unary(Unary::HardSigmoid { alpha: 0.2, beta: 0.5 }, &x, &mut y).unwrap();
        let want = [0.1f32, 0.4, 0.5, 1.0];
        assert!(y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6));
        // HardSwish: x * clamp(x/6 + 1/2): -2 -> -2/6 = -1/3, 3 -> 3.
        unary(Unary::HardSwish, &x, &mut y).unwrap();
        assert!((y[0] - (-2.0 / 6.0)).abs() < 1e-6 && y[2] == 0.0 && y[3] == 3.0);
        unary(Unary::Neg, &x, &mut y).unwrap();
        assert_eq!(y, [2.0, 0.5, -0.0, -3.0]);
        unary(Unary::Sign, &x, &mut y).unwrap();
        assert_eq!(y, [-1.0, -1.0, 0.0, 1.0]);
        unary(Unary::Reciprocal, &x, &mut y).unwrap();
        assert_eq!(y, [-0.5, -2.0, f32::INFINITY, 1.0 / 3.0]);
        unary(Unary::ThresholdedRelu { alpha: 0.0 }, &x, &mut y).unwrap();
        assert_eq!(y, [0.0, 0.0, 0.0, 3.0]);
        assert!(unary(Unary::Relu, &x, &mut y[..3]).is_err());
    }

    #[test]
    fn rounding_family() {
        let x = [-1.5f64, -0.5, 0.5, 1.5, 2.5, 2.7];
        let mut y = [0.0f64; 6];
        unary(Unary::Round, &x, &mut y).unwrap();
        assert_eq!(y, [-2.0, -0.0, 0.0, 2.0, 2.0, 3.0]);
        unary(Unary::Floor, &x, &mut y).unwrap();
        assert_eq!(y, [-2.0, -1.0, 0.0, 1.0, 2.0, 2.0]);
        unary(Unary::Ceil, &x, &mut y).unwrap();
        assert_eq!(y, [-1.0, -0.0, 1.0, 2.0, 3.0, 3.0]);
    }

    #[test]
    fn transcendental_identities() {
        let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
        assert!(close(eval(Unary::Sigmoid, 0.0), 0.5));
        // sigmoid(x) + sigmoid(-x) = 1, also far in the tails without NaN.
        for x in [-800.0f64, -3.0, 0.7, 40.0] {
            assert!(close(eval(Unary::Sigmoid, x) + eval(Unary::Sigmoid, -x), 1.0));
        }
        assert!(close(eval(Unary::Softplus, 0.0), core::f64::consts::LN_2));
        assert_eq!(eval(Unary::Softplus, 1000.0f64), 1000.0);
        assert_eq!(eval(Unary::Softplus, -1000.0f64), 0.0);
        assert!(close(eval(Unary::Log, eval(Unary::Exp, 1.25)), 1.25));
        assert!(close(eval(Unary::Sqrt, 2.25), 1.5));
        assert!(close(eval(Unary::Tanh, 0.0), 0.0));
        assert!(close(eval(Unary::Erf, 0.0), 0.0));
        let s = eval(Unary::Sin, 0.3f64);
        let c = eval(Unary::Cos, 0.3f64);
        assert!(close(s * s + c * c, 1.0));
        // Gelu(0) = 0, Gelu(x) - Gelu(-x) = x (Phi(x) + Phi(-x) = 1).
        assert_eq!(eval(Unary::Gelu, 0.0f64), 0.0);
        assert!(close(eval(Unary::Gelu, 1.3) - eval(Unary::Gelu, -1.3), 1.3));
        assert!(close(eval(Unary::GeluTanh, 1.3) - eval(Unary::GeluTanh, -1.3), 1.3));
        assert!(close(eval(Unary::Softsign, 3.0), 0.75));
        assert!(close(eval(Unary::Affine { alpha: 2.0, beta: -1.0 }, 3.0), 5.0));
        assert!(close(eval(Unary::ScaledTanh { alpha: 2.0, beta: 0.0 }, 3.0), 0.0));
        assert!(close(eval(Unary::Elu { alpha: 2.0 }, 0.0), 0.0));
        assert!(close(eval(Unary::Selu { alpha: 2.0, gamma: 3.0 }, 1.0), 3.0));
        assert!(eval(Unary::Clip { min: 0.0, max: 1.0 }, f64::NAN).is_nan());
    }

    #[test]
    fn in_place_matches_out_of_place() {
        let x = [-1.0f32, 0.25, 4.0];
        let mut y = [0.0f32; 3];
        unary(Unary::Sqrt, &x, &mut y).unwrap();
        let mut z = x;
        unary_in_place(Unary::Sqrt, &mut z);
        assert!(y[0].is_nan() && z[0].is_nan());
        assert_eq!(&y[1..], &z[1..]);
        assert_eq!(&z[1..], &[0.5, 2.0]);
    }

    #[test]
    fn integer_unary_and_not() {
        let x = [-3i32, 0, 5, i32::MIN];
        let mut y = [0i32; 4];
        num_unary(NumUnary::Abs, &x, &mut y).unwrap();
        assert_eq!(y, [3, 0, 5, i32::MIN]);
        num_unary(NumUnary::Clip { min: -1, max: 2 }, &x, &mut y).unwrap();
        assert_eq!(y, [-1, 0, 2, -1]);
        num_unary_in_place(NumUnary::Sign, &mut y);
        assert_eq!(y, [-1, 0, 1, -1]);
        let mut f = [0u8; 2];
        not(&[true, false], &mut f).unwrap();
        assert_eq!(f, [0, 1]);
        let mut b = [0u8; 2];
        bit_not(&[0u8, 0xF0], &mut b).unwrap();
        assert_eq!(b, [0xFF, 0x0F]);
    }

    #[test]
    fn binary_same_shape() {
        let a = [7i32, -7, 6, 1];
        let b = [2i32, 2, -4, 3];
        let mut o = [0i32; 4];
        arith(Arith::Div, &SAME4, &a, &b, &mut o).unwrap();
        assert_eq!(o, [3, -3, -1, 0]);
        arith(Arith::Mod, &SAME4, &a, &b, &mut o).unwrap();
        assert_eq!(o, [1, 1, -2, 1]);
        arith(Arith::Fmod, &SAME4, &a, &b, &mut o).unwrap();
        assert_eq!(o, [1, -1, 2, 1]);
        arith(Arith::Pow, &SAME4, &a, &b, &mut o).unwrap();
        assert_eq!(o, [49, 49, 0, 1]);
        arith(Arith::Max, &SAME4, &a, &b, &mut o).unwrap();
        assert_eq!(o, [7, 2, 6, 3]);
        let z = [1i32, 0, 1, 1];
        assert_eq!(arith(Arith::Div, &SAME4, &a, &z, &mut o), Err(Error::DivisionByZero));
    }

    #[test]
    fn float_pow_by_two_and_three_matches_powf() {
        let x: [f32; 9] = [-3.5, -1.0, -0.0, 0.0, 0.3, 7.25, 1e20, f32::NEG_INFINITY, f32::NAN];
        let p = Broadcast { shape: &[9], strides: [&[1], &[0]] };
        for e in [2.0f32, 3.0, 0.5, -2.0, 1.5] {
            let mut o = [0.0f32; 9];
            arith(Arith::Pow, &p, &x, &[e], &mut o).unwrap();
            for (&x, &o) in x.iter().zip(&o) {
                let r = libm::powf(x, e);
                let same = (r.is_nan() && o.is_nan())
                    || (r == o && r.is_sign_negative() == o.is_sign_negative())
                    || (r - o).abs() <= 1e-6 * r.abs();
                assert!(same, "{x} ^ {e}: {o} vs {r}");
            }
        }
        let mut o = [0.0f64; 2];
        let p = Broadcast { shape: &[2], strides: [&[1], &[1]] };
        arith(Arith::Pow, &p, &[-1.5f64, 2.0], &[3.0, 2.0], &mut o).unwrap();
        assert_eq!(o, [-3.375, 4.0]);
    }

    #[test]
    fn binary_broadcast_row_column_scalar() {
        // [2,1] + [3] -> [2,3]
        let p = Broadcast { shape: &[2, 3], strides: [&[1, 0], &[0, 1]] };
        let mut o = [0.0f32; 6];
        arith(Arith::Add, &p, &[10.0, 20.0], &[1.0, 2.0, 3.0], &mut o).unwrap();
        assert_eq!(o, [11.0, 12.0, 13.0, 21.0, 22.0, 23.0]);
        // scalar - [2,3]
        let p = Broadcast { shape: &[2, 3], strides: [&[0, 0], &[3, 1]] };
        let b = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        arith(Arith::Sub, &p, &[10.0], &b, &mut o).unwrap();
        assert_eq!(o, [9.0, 8.0, 7.0, 6.0, 5.0, 4.0]);
        // A transposed read (strided path): a is 3x2 read as its transpose.
        let p = Broadcast { shape: &[2, 3], strides: [&[1, 2], &[0, 0]] };
        arith(Arith::Mul, &p, &b, &[2.0], &mut o).unwrap();
        assert_eq!(o, [2.0, 6.0, 10.0, 4.0, 8.0, 12.0]);
        // Bad strides are refused, not read out of bounds.
        let p = Broadcast { shape: &[2, 3], strides: [&[3, 1], &[0, 1]] };
        assert_eq!(arith(Arith::Add, &p, &[1.0; 5], &[1.0; 3], &mut o), Err(Error::ShapeMismatch));
    }

    #[test]
    fn pow_with_other_exponent_types() {
        let mut o = [0.0f32; 4];
        pow_mixed(&SAME4, &[2.0f32, 9.0, 2.0, -2.0], &[3i64, 0, -1, 2], &mut o).unwrap();
        assert_eq!(o, [8.0, 1.0, 0.5, 4.0]);
        let mut o = [0i32; 4];
        pow_mixed(&SAME4, &[2i32, 4, -1, 3], &[10u8, 0, 255, 2], &mut o).unwrap();
        assert_eq!(o, [1024, 1, -1, 9]);
        pow_mixed(&SAME4, &[4i32, 2, 10, 1], &[0.5f64, -1.0, 2.0, 9.5], &mut o).unwrap();
        assert_eq!(o, [2, 0, 100, 1]);
        let p = Broadcast { shape: &[1], strides: [&[0], &[0]] };
        assert_eq!(pow_mixed(&p, &[0i64], &[-2i8], &mut [0i64]), Err(Error::DivisionByZero));
        assert_eq!(pow_mixed(&p, &[2u64], &[64i64], &mut []), Err(Error::ShapeMismatch));
        // Exponents past the width wrap like repeated multiplication: 2^64 in u64 is 0.
        let mut w = [7u64];
        pow_mixed(&p, &[2u64], &[64i64], &mut w).unwrap();
        assert_eq!(w, [0]);
    }

    #[test]
    fn comparisons_logic_shifts() {
        let p = Broadcast { shape: &[3], strides: [&[1], &[0]] };
        let mut f = [false; 3];
        compare(Compare::Less, &p, &[1.0f32, 2.0, f32::NAN], &[2.0], &mut f).unwrap();
        assert_eq!(f, [true, false, false]);
        compare(Compare::GreaterOrEqual, &p, &[1i64, 2, 3], &[2], &mut f).unwrap();
        assert_eq!(f, [false, true, true]);
        compare(Compare::Equal, &p, &[1u8, 2, 3], &[2], &mut f).unwrap();
        assert_eq!(f, [false, true, false]);
        let mut u = [0u8; 3];
        logic(Logic::Xor, &p, &[true, false, true], &[1u8], &mut u).unwrap();
        assert_eq!(u, [0, 1, 0]);
        let mut s = [0u8; 3];
        bitwise(Bitwise::ShiftLeft, &p, &[1u8, 3, 255], &[2], &mut s).unwrap();
        assert_eq!(s, [4, 12, 252]);
        bitwise(Bitwise::ShiftRight, &p, &[16u8, 3, 255], &[2], &mut s).unwrap();
        assert_eq!(s, [4, 0, 63]);
        let mut t = [0i8; 3];
        bitwise(Bitwise::ShiftRight, &p, &[-8i8, 4, -1], &[-1], &mut t).unwrap();
        assert_eq!(t, [-1, 0, -1]);
        bitwise(Bitwise::ShiftRight, &p, &[-8i8, 4, -128], &[1], &mut t).unwrap();
        assert_eq!(t, [-4, 2, -64]);
        bitwise(Bitwise::ShiftLeft, &p, &[-8i8, 4, 64], &[8], &mut t).unwrap();
        assert_eq!(t, [0, 0, 0]);
    }

    #[test]
    fn where_broadcasts_three_ways() {
        // cond [2,1], x [3], y scalar -> [2,3]
        let p = Broadcast { shape: &[2, 3], strides: [&[1, 0], &[0, 1], &[0, 0]] };
        let mut o = [0i32; 6];
        where_(&p, &[true, false], &[1, 2, 3], &[-1], &mut o).unwrap();
        assert_eq!(o, [1, 2, 3, -1, -1, -1]);
    }

    #[test]
    fn where_on_flags_mixes_storage() {
        let p = Broadcast { shape: &[3], strides: [&[1], &[1], &[0]] };
        let mut o = [7u8; 3];
        where_flags(&p, &[1u8, 0, 1], &[true, true, false], &[1u8], &mut o).unwrap();
        assert_eq!(o, [1, 1, 0]);
        assert!(where_flags(&p, &[true; 2], &[true; 3], &[true], &mut o).is_err());
    }

    #[test]
    fn classify_nan_and_infinities() {
        let x = [1.0f32, f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
        let mut o = [false; 4];
        classify(FloatClass::Nan, &x, &mut o).unwrap();
        assert_eq!(o, [false, true, false, false]);
        classify(FloatClass::Inf { negative: true, positive: true }, &x, &mut o).unwrap();
        assert_eq!(o, [false, false, true, true]);
        classify(FloatClass::Inf { negative: true, positive: false }, &x, &mut o).unwrap();
        assert_eq!(o, [false, false, false, true]);
        let h = [half::f16::INFINITY, half::f16::NAN];
        let mut u = [0u8; 2];
        classify(FloatClass::Nan, &h, &mut u).unwrap();
        assert_eq!(u, [0, 1]);
        assert!(classify(FloatClass::Nan, &h, &mut u[..1]).is_err());
    }

    #[test]
    fn accumulate_broadcasts_into_output() {
        // out [2,3] += x [3]; then max with a column [2,1]; then / 2.
        let mut out = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        accumulate(Arith::Add, &[2, 3], &[0, 1], &[10.0, 20.0, 30.0], &mut out).unwrap();
        assert_eq!(out, [11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
        accumulate(Arith::Max, &[2, 3], &[1, 0], &[20.0, 30.0], &mut out).unwrap();
        assert_eq!(out, [20.0, 22.0, 33.0, 30.0, 30.0, 36.0]);
        accumulate(Arith::Div, &[2, 3], &[0, 0], &[2.0], &mut out).unwrap();
        assert_eq!(out, [10.0, 11.0, 16.5, 15.0, 15.0, 18.0]);
        let mut i = [4i32, 5];
        assert_eq!(accumulate(Arith::Div, &[2], &[1], &[2, 0], &mut i), Err(Error::DivisionByZero));
        assert_eq!(i, [2, 0]);
        assert!(accumulate(Arith::Add, &[2], &[1], &[1, 2, 3], &mut [0i32; 3]).is_err());
        assert!(accumulate(Arith::Add, &[3], &[1], &[1, 2], &mut [0i32; 3]).is_err());
    }
}

#[cfg(test)]
mod trig_tests {
    use super::*;

    #[test]
    fn trigonometric_and_hyperbolic_functions_at_known_points() {
        let pi = core::f64::consts::PI;
        let cases: [(Unary<f64>, f64, f64); 9] = [
            (Unary::Tan, pi / 4.0, 1.0),
            (Unary::Asin, 1.0, pi / 2.0),
            (Unary::Acos, -1.0, pi),
            (Unary::Atan, 1.0, pi / 4.0),
            (Unary::Sinh, 0.0, 0.0),
            (Unary::Cosh, 0.0, 1.0),
            (Unary::Asinh, 0.0, 0.0),
            (Unary::Acosh, 1.0, 0.0),
            (Unary::Atanh, 0.0, 0.0),
        ];
        for (op, x, want) in cases {
            assert!((eval(op, x) - want).abs() < 1e-12, "{op:?}({x})");
        }
        // Outside the domain: NaN, not a panic.
        assert!(eval(Unary::Acosh, 0.5f64).is_nan());
        assert!(eval(Unary::Asin, 2.0f32).is_nan());
    }
}
