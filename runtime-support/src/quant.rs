//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
//! MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
//!
//! Zero points are subtracted and products accumulated in integers (`i64`
//! accumulators, results wrapped to `i32` as the ONNX reference does); floats
//! appear only where the spec puts them: the division by the scale, the
//! multiplication by the scale, and the requantization multiplier. Those float
//! steps are computed in `f64` and rounded to the precision the ONNX reference
//! computes them in ([`Work`]), which gives the same bits: a product or a
//! quotient of two `p`-bit floats computed in `f64` and rounded once to `p`
//! bits is the correctly rounded `p`-bit result for `p <= 24`. Rounding to
//! integers is half to even; results saturate to the output type's range.

use crate::cast::{LowBit, Round, Wide, pack, unpack};
use crate::conv::Conv;
use crate::gemm::MatMul;
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, next_index, numel, walk};
use crate::{Error, Result, bf16, ensure, f16};

/// The float precision an intermediate result is rounded to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    F64,
    F32,
    F16,
    Bf16,
}

impl Work {
    /// `v` rounded (to nearest, ties to even) to this precision.
    #[inline]
    pub fn round(self, v: f64) -> f64 {
        match self {
            Work::F64 => v,
            Work::F32 => f64::from(v as f32),
            Work::F16 => f16::from_f64(v).to_f64(),
            Work::Bf16 => bf16::from_f64(v).to_f64(),
        }
    }
}

/// Element types read as numbers by the float steps (inputs and scales).
pub trait QReal: Copy + 'static {
    /// The precision the type carries.
    const WORK: Work;
    /// Whether every value is an `f32` ([`QReal::to_f32`] is exact).
    const F32_EXACT: bool;
    /// The value, exactly.
    fn to_f64(self) -> f64;
    /// The value as an `f32` (exactly when [`QReal::F32_EXACT`]).
    fn to_f32(self) -> f32;
}

/// Float element types the dequantized outputs are written as.
pub trait QFloat: QReal {
    /// `v` rounded to nearest, ties to even.
    fn from_f64(v: f64) -> Self;
}

macro_rules! real {
    ($t:ty, $w:ident, $exact:expr, $to:expr, $to32:expr) => {
        impl QReal for $t {
            const WORK: Work = Work::$w;
            const F32_EXACT: bool = $exact;
            #[inline]
            fn to_f64(self) -> f64 {
                let f: fn($t) -> f64 = $to;
                f(self)
            }
            #[inline]
            fn to_f32(self) -> f32 {
                let f: fn($t) -> f32 = $to32;
                f(self)
            }
        }
    };
}

real!(f32, F32, true, f64::from, |v| v);
real!(f16, F16, true, |v| v.to_f64(), |v| v.to_f32());
real!(bf16, Bf16, true, |v| v.to_f64(), |v| v.to_f32());
real!(i32, F64, false, f64::from, |v| v as f32);

impl QFloat for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}
impl QFloat for f16 {
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
}
impl QFloat for bf16 {
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
}

/// Integer element types of quantized tensors and zero points.
pub trait QInt: Copy + Default + 'static {
    /// The smallest value.
    const MIN: i64;
    /// The largest value.
    const MAX: i64;
    /// The value.
    fn to_i64(self) -> i64;
    /// `v` clamped to `[MIN, MAX]`.
    fn saturate(v: i64) -> Self;
    /// `v` as `Self`, for a `v` already in `[MIN, MAX]` (else its low
    /// bits): no clamp for the vector loops to carry.
    fn of_in_range(v: i32) -> Self;
}

macro_rules! qint {
    ($($t:ty),*) => {$(
        impl QInt for $t {
            const MIN: i64 = <$t>::MIN as i64;
            const MAX: i64 = <$t>::MAX as i64;
            #[inline]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline]
            fn saturate(v: i64) -> Self {
                v.clamp(<Self as QInt>::MIN, <Self as QInt>::MAX) as $t
            }
            #[inline(always)]
            fn of_in_range(v: i32) -> Self {
                debug_assert!((<Self as QInt>::MIN..=<Self as QInt>::MAX).contains(&i64::from(v)));
                v as $t
            }
        }
    )*};
}

qint!(u8, i8, u16, i16, i32);

/// `v` rounded half to even and saturated to `Q`'s range (NaN gives 0).
#[inline]
fn round_sat<Q: QInt>(v: f64) -> Q {
    Q::saturate(libm::rint(v) as i64)
}

/// How a scale (and zero point) maps onto a tensor viewed as
/// `[outer, axis, inner]`.
///
/// With `block == 0` the scale holds one value (per tensor) or `axis` values
/// (per axis). With `block > 0` (blocked quantization) the scale is
/// `[outer, ceil(axis / block), inner]`: element `(o, a, i)` uses the scale of
/// block `a / block`.
#[derive(Clone, Copy, Debug)]
pub struct QuantAxis {
    pub outer: usize,
    pub axis: usize,
    pub inner: usize,
    pub block: usize,
}

impl QuantAxis {
    /// The number of scale values the layout takes, given the `len` the
    /// caller passes; checks the tensor length `n`.
    fn check(&self, n: usize, len: usize) -> Result {
        let total = self
            .outer
            .checked_mul(self.axis)
            .and_then(|v| v.checked_mul(self.inner))
            .ok_or(Error::Overflow)?;
        ensure(n == total, Error::ShapeMismatch)?;
        let want = if self.block == 0 {
            if len == 1 { 1 } else { self.axis }
        } else {
            self.outer
                .checked_mul(self.axis.div_ceil(self.block))
                .and_then(|v| v.checked_mul(self.inner))
                .ok_or(Error::Overflow)?
        };
        ensure(len == want, Error::ShapeMismatch)
    }

    /// Calls `f(element, param)` for every element in order.
    #[inline]
    fn each(&self, per_tensor: bool, mut f: impl FnMut(usize, usize)) {
        let nb = if self.block == 0 { 0 } else { self.axis.div_ceil(self.block) };
        let mut e = 0;
        for o in 0..self.outer {
            for a in 0..self.axis {
                for i in 0..self.inner {
                    let p = if per_tensor {
                        0
                    } else {
                        match a.checked_div(self.block) {
                            None => a,
                            Some(q) => (o * nb + q) * self.inner + i,
                        }
                    };
                    f(e, p);
                    e += 1;
                }
            }
        }
    }
}

/// `libm::rintf(q) as i32`: rounded half to even, saturated to `i32`, NaN
/// to 0. On an Arm core with a hardware FPU that is one `VCVTR`, which
/// rounds by the FPSCR's mode: round to nearest even, the default every
/// Rust program runs in (the software `rintf` takes some twenty
/// instructions on a Cortex-M4F).
#[inline(always)]
fn rint_i32(q: f32) -> i32 {
    #[cfg(all(target_arch = "arm", target_abi = "eabihf"))]
    #[allow(unsafe_code)]
    {
        let r: i32;
        // SAFETY: FPU register-to-register instructions that every
        // hard-float Arm target has; they touch no memory or stack, only
        // `s0` (declared) and the FPSCR's cumulative exception flags,
        // which nothing reads. (An `sreg` operand would save the two
        // moves, but Rust asks for a `vfp2` feature the Cortex-M targets
        // do not name.)
        unsafe {
            core::arch::asm!("vmov s0, {q}", "vcvtr.s32.f32 s0, s0", "vmov {r}, s0",
                             q = in(reg) q.to_bits(), r = lateout(reg) r, out("s0") _,
                             options(pure, nomem, nostack));
        }
        r
    }
    #[cfg(not(all(target_arch = "arm", target_abi = "eabihf")))]
    {
        libm::rintf(q) as i32
    }
}

/// ONNX `QuantizeLinear` to an integer type:
/// `y = saturate(round_half_even(x / scale) + zero_point)`.
///
/// `x` and `scale` are first rounded to `work` and the quotient is rounded to
/// `work` (the precision the spec's reference computes in: the common type of
/// `x` and `scale`, or the `precision` attribute).
pub fn quantize_linear<X: QReal, S: QReal, Q: QInt>(
    p: &QuantAxis,
    work: Work,
    x: &[X],
    scale: &[S],
    zero_point: Option<&[Q]>,
    y: &mut [Q],
) -> Result {
    p.check(x.len(), scale.len())?;
    ensure(y.len() == x.len(), Error::ShapeMismatch)?;
    if let Some(z) = zero_point {
        ensure(z.len() == scale.len(), Error::ShapeMismatch)?;
    }
    let per_tensor = p.block == 0 && scale.len() == 1;
    if work == Work::F32 && X::F32_EXACT && S::F32_EXACT && Q::MAX - Q::MIN <= 0xffff {
        // The common case, in `f32` (an FPU's single precision, no soft
        // `f64` on a Cortex-M4F): the `f32` quotient of two `f32`s is the
        // `f64` one rounded to `f32` (double rounding is harmless for a
        // division with 53 >= 2 * 24 + 2 bits), and an integral `f32`
        // saturated to `i32` then offset by a zero point within 16 bits
        // saturates to `Q` as the `i64` would (NaN gives 0 both ways).
        if per_tensor {
            let (s, zp) = (scale[0].to_f32(), zero_point.map_or(0, |z| z[0].to_i64()));
            quantize_f32(x, s, zp, y);
            return Ok(());
        }
        p.each(per_tensor, |e, k| {
            let r = rint_i32(x[e].to_f32() / scale[k].to_f32());
            let zp = zero_point.map_or(0, |z| z[k].to_i64());
            y[e] = Q::saturate(i64::from(r) + zp);
        });
        return Ok(());
    }
    p.each(per_tensor, |e, k| {
        let q = work.round(work.round(x[e].to_f64()) / work.round(scale[k].to_f64()));
        let r = libm::rint(q);
        // Saturating float-to-int conversion; the zero point is added in integers.
        let zp = zero_point.map_or(0, |z| z[k].to_i64());
        y[e] = Q::saturate((r as i64).saturating_add(zp));
    });
    Ok(())
}

/// `y[i] = saturate(round_half_even(x[i] / scale) + zp)` in `f32`:
/// [`quantize_linear`]'s common case (one scale, `Q` of at most 16 bits,
/// `|zp| <= 0xffff`), which the int8 products that quantize their float
/// rows as they read them share (`int8::qmatmul_float`). On hard-float Arm
/// one `VCVTR` a value ([`rint_i32`]); where there is a vector unit, the
/// loop that vectorises.
#[inline]
pub(crate) fn quantize_f32<X: QReal, Q: QInt>(x: &[X], scale: f32, zp: i64, y: &mut [Q]) {
    debug_assert!(Q::MAX - Q::MIN <= 0xffff && zp.abs() <= 0xffff, "quantize_f32 types");
    #[cfg(all(target_arch = "arm", target_abi = "eabihf"))]
    {
        // In `i32` (a 32-bit core's `i64` compares take several
        // instructions each): `rint_i32` saturates, the zero point (16 bits)
        // is added saturating, and clamping that to `Q` is clamping the
        // exact sum.
        let (lo, hi, zp) = (Q::MIN as i32, Q::MAX as i32, zp as i32);
        for (yv, xv) in y.iter_mut().zip(x) {
            *yv = Q::of_in_range(rint_i32(xv.to_f32() / scale).saturating_add(zp).clamp(lo, hi));
        }
    }
    #[cfg(not(all(target_arch = "arm", target_abi = "eabihf")))]
    crate::simd::vectorize_wide(QuantizeTensor { x, scale, zp, y });
}

/// [`quantize_linear`]'s common case: `f32` work, one scale, `Q` of at
/// most 16 bits. The quotient is clamped to the range the zero point leaves
/// (integers, so this is the saturation; NaN gives 0) and rounded half to
/// even by adding `1.5 * 2^23` (exact for `|q| <= 2^22`, the clamp's
/// range): no call, so the loop vectorises.
#[cfg(not(all(target_arch = "arm", target_abi = "eabihf")))]
struct QuantizeTensor<'a, X, Q> {
    x: &'a [X],
    scale: f32,
    zp: i64,
    y: &'a mut [Q],
}

#[cfg(not(all(target_arch = "arm", target_abi = "eabihf")))]
impl<X: QReal, Q: QInt> crate::simd::Vectorize for QuantizeTensor<'_, X, Q> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        const ROUND: f32 = 12_582_912.0;
        let QuantizeTensor { x, scale, zp, y } = self;
        debug_assert!(Q::MAX - Q::MIN <= 0xffff && zp.abs() <= 0xffff);
        let (lo, hi) = ((Q::MIN - zp) as f32, (Q::MAX - zp) as f32);
        let zp = zp as i32;
        for (y, x) in y.iter_mut().zip(x) {
            let q = x.to_f32() / scale;
            // NaN gives 0, so the zero point.
            let q = if q.is_nan() { 0.0 } else { q.clamp(lo, hi) };
            // `q + 1.5 * 2^23` lies in `[2^23, 2^24)`, where the float's
            // unit is 1: its mantissa holds `round(q)` (half to even) above
            // `ROUND`'s. Reading the bits, not an `as` cast, keeps the loop
            // in vector lanes (a saturating cast was taken lane by lane).
            let r = (q + ROUND).to_bits().wrapping_sub(ROUND.to_bits()) as i32;
            // Within `[lo, hi]`, so the sum is within `Q`.
            *y = Q::of_in_range(r.wrapping_add(zp));
        }
    }
}

/// ONNX `DequantizeLinear` from an integer type:
/// `y = (x - zero_point) * scale`.
///
/// The difference is taken in integers; the product is rounded to `f32` (the
/// reference's precision), except for `i32` inputs with a zero point, whose
/// reference computation is `f64` on `x` rounded to `f32`.
pub fn dequantize_linear<Q: QInt, S: QReal, Y: QFloat>(
    p: &QuantAxis,
    x: &[Q],
    scale: &[S],
    zero_point: Option<&[Q]>,
    y: &mut [Y],
) -> Result {
    p.check(x.len(), scale.len())?;
    ensure(y.len() == x.len(), Error::ShapeMismatch)?;
    if let Some(z) = zero_point {
        ensure(z.len() == scale.len(), Error::ShapeMismatch)?;
    }
    let per_tensor = p.block == 0 && scale.len() == 1;
    let wide = Q::MAX > i64::from(u16::MAX);
    p.each(per_tensor, |e, k| {
        let s = scale[k].to_f64();
        let v = if wide {
            let xf = f64::from(x[e].to_i64() as f32);
            match zero_point {
                Some(z) => (xf - z[k].to_i64() as f64) * s,
                None => Work::F32.round(xf * s),
            }
        } else {
            // `|d| < 2^17` and the scale's 24 bits make the `f64` product
            // exact, so rounding it to `f32` is the `f32` product: taken
            // as such (a 32-bit core's FPU has no `f64`).
            let d = x[e].to_i64() - zero_point.map_or(0, |z| z[k].to_i64());
            if S::F32_EXACT {
                f64::from(d as i32 as f32 * scale[k].to_f32())
            } else {
                Work::F32.round(d as f64 * s)
            }
        };
        y[e] = Y::from_f64(v);
    });
    Ok(())
}

/// Checks the lengths of a low-precision Quantize/DequantizeLinear: `n`
/// elements, `scale` values and a packed zero point of the scale's count.
fn check_low(
    p: &QuantAxis,
    f: LowBit,
    n: usize,
    packed: usize,
    scales: usize,
    z: Option<&[u8]>,
) -> Result {
    p.check(n, scales)?;
    ensure(packed == f.packed_len(n), Error::ShapeMismatch)?;
    if let Some(z) = z {
        ensure(z.len() == f.packed_len(scales), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// The `(lowest, highest)` values of a sub-byte integer format.
fn int_range(f: LowBit) -> Option<(i64, i64)> {
    match f {
        LowBit::I4 => Some((-8, 7)),
        LowBit::U4 => Some((0, 15)),
        LowBit::I2 => Some((-2, 1)),
        LowBit::U2 => Some((0, 3)),
        _ => None,
    }
}

/// The value of element `k` of a packed zero point, as a float (0 when absent).
fn zp_value(f: LowBit, z: Option<&[u8]>, k: usize) -> f64 {
    match z.map(|z| f.decode(unpack(f, z, k))) {
        Some(Wide::Int(v)) => v as f64,
        Some(Wide::Float(v)) => v,
        None => 0.0,
    }
}

/// ONNX `QuantizeLinear` to a low-precision packed format `to` (see
/// [`LowBit`]; `y` holds `x.len()` packed elements).
///
/// Sub-byte integers: `saturate(round_half_even(x / scale) + zero_point)`
/// to the format's range. Float formats: `x / scale + zero_point` converted
/// with the `Cast` rules ([`LowBit::encode`]); `saturate` (float8 only)
/// clamps out-of-range values to the largest finite value instead of NaN or
/// infinity, `float4e2m1` always saturates. A zero float8 zero point is not
/// added (so `-0` stays `-0`), as the ONNX reference ignores it; the quotient
/// and the sum are rounded to `work`.
#[allow(clippy::too_many_arguments)]
pub fn quantize_linear_low<X: QReal, S: QReal>(
    p: &QuantAxis,
    work: Work,
    x: &[X],
    scale: &[S],
    zero_point: Option<&[u8]>,
    to: LowBit,
    saturate: bool,
    y: &mut [u8],
) -> Result {
    check_low(p, to, x.len(), y.len(), scale.len(), zero_point)?;
    y.fill(0);
    let per_tensor = p.block == 0 && scale.len() == 1;
    let range = int_range(to);
    p.each(per_tensor, |e, k| {
        let q = work.round(work.round(x[e].to_f64()) / work.round(scale[k].to_f64()));
        let z = zp_value(to, zero_point, k);
        let code = match range {
            Some((lo, hi)) => {
                let v = (libm::rint(q) as i64).saturating_add(z as i64).clamp(lo, hi);
                to.encode(Wide::Int(i128::from(v)), true, Round::Nearest)
            }
            None => {
                let v = if z == 0.0 && to != LowBit::F4E2M1 { q } else { work.round(q + z) };
                to.encode(Wide::Float(v), saturate, Round::Nearest)
            }
        };
        pack(to, y, e, code);
    });
    Ok(())
}

/// ONNX `DequantizeLinear` from a low-precision packed format `from` (`x`
/// holds `y.len()` packed elements): `y = (x - zero_point) * scale`, the
/// difference exact (integers) or in `f32` (floats; a zero float zero point
/// is not subtracted), the product rounded to `f32` as the reference does,
/// then to `Y`.
pub fn dequantize_linear_low<S: QReal, Y: QFloat>(
    p: &QuantAxis,
    from: LowBit,
    x: &[u8],
    scale: &[S],
    zero_point: Option<&[u8]>,
    y: &mut [Y],
) -> Result {
    check_low(p, from, y.len(), x.len(), scale.len(), zero_point)?;
    let per_tensor = p.block == 0 && scale.len() == 1;
    p.each(per_tensor, |e, k| {
        let d = match from.decode(unpack(from, x, e)) {
            Wide::Int(v) => v as f64 - zp_value(from, zero_point, k),
            Wide::Float(v) => {
                let z = zp_value(from, zero_point, k);
                if z == 0.0 { v } else { Work::F32.round(v - z) }
            }
        };
        y[e] = Y::from_f64(Work::F32.round(d * scale[k].to_f64()));
    });
    Ok(())
}

/// ONNX `DynamicQuantizeLinear`: `uint8` quantization of `x` with a scale and
/// zero point computed from its range (which always includes 0), all in `f32`
/// as the spec's reference does.
pub fn dynamic_quantize_linear(
    x: &[f32],
    y: &mut [u8],
    y_scale: &mut [f32],
    y_zero_point: &mut [u8],
) -> Result {
    ensure(y.len() == x.len(), Error::ShapeMismatch)?;
    ensure(y_scale.len() == 1 && y_zero_point.len() == 1, Error::ShapeMismatch)?;
    let (mut lo, mut hi) = (0f32, 0f32);
    for &v in x {
        if v.is_nan() || lo.is_nan() {
            lo = f32::NAN;
        } else if v < lo {
            lo = v;
        }
        if v.is_nan() || hi.is_nan() {
            hi = f32::NAN;
        } else if v > hi {
            hi = v;
        }
    }
    let range = if hi == lo { 1.0 } else { hi - lo };
    let scale = range / 255.0;
    let initial = 0.0 - lo / scale;
    let zp = libm::rintf(initial.clamp(0.0, 255.0));
    for (o, &v) in y.iter_mut().zip(x) {
        let q = libm::rintf(v / scale) + zp;
        *o = if q.is_nan() { 0 } else { q.clamp(0.0, 255.0) as u8 };
    }
    y_scale[0] = scale;
    y_zero_point[0] = if zp.is_nan() { 0 } else { zp as u8 };
    Ok(())
}

/// A zero point: one value, or one per row (of `A`) or column (of `B`).
fn zp_at<Q: QInt>(z: Option<&[Q]>, i: usize) -> i64 {
    match z {
        None => 0,
        Some([v]) => v.to_i64(),
        Some(z) => z.get(i).map_or(0, |v| v.to_i64()),
    }
}

fn check_zp<Q>(z: Option<&[Q]>, n: usize) -> Result {
    match z {
        Some(z) => ensure(z.len() == 1 || z.len() == n, Error::ShapeMismatch),
        None => Ok(()),
    }
}

fn check_batch(batch: &[usize], strides: &[isize], size: usize, len: usize) -> Result {
    // No matrix is read when the matrices or the batch are empty.
    if size == 0 || numel(batch)? == 0 {
        return check_strided(batch, strides, 0, usize::MAX);
    }
    ensure(len >= size, Error::ShapeMismatch)?;
    check_strided(batch, strides, 0, len - size + 1)
}

/// The integer core of MatMulInteger and QLinearMatMul: calls
/// `out(flat_index, row, column, acc)` with the wrapped `i32` sum of
/// `(a - a_zp) * (b - b_zp)` for every output element.
fn matmul_core<A: QInt, B: QInt>(
    p: &MatMul<'_>,
    a: &[A],
    a_zp: Option<&[A]>,
    b: &[B],
    b_zp: Option<&[B]>,
    out_len: usize,
    mut out: impl FnMut(usize, usize, usize, i32),
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let mk = m.checked_mul(k).ok_or(Error::Overflow)?;
    let kn = k.checked_mul(n).ok_or(Error::Overflow)?;
    let mn = m.checked_mul(n).ok_or(Error::Overflow)?;
    let total = numel(p.batch)?.checked_mul(mn).ok_or(Error::Overflow)?;
    ensure(out_len == total, Error::ShapeMismatch)?;
    check_batch(p.batch, p.a_batch_strides, mk, a.len())?;
    check_batch(p.batch, p.b_batch_strides, kn, b.len())?;
    check_zp(a_zp, m)?;
    check_zp(b_zp, n)?;
    let mut ys = [0isize; MAX_RANK];
    let ys = &mut ys[..p.batch.len()];
    contiguous_strides(p.batch, ys)?;
    let mn_i = isize::try_from(mn).map_err(|_| Error::Overflow)?;
    for s in ys.iter_mut() {
        *s = s.checked_mul(mn_i).ok_or(Error::Overflow)?;
    }
    walk(p.batch, [p.a_batch_strides, p.b_batch_strides, ys], [0; 3], |[ia, ib, iy]| {
        for i in 0..m {
            let za = zp_at(a_zp, i);
            for j in 0..n {
                let zb = zp_at(b_zp, j);
                let mut acc = 0i64;
                for t in 0..k {
                    let av = a[ia + i * k + t].to_i64() - za;
                    let bv = b[ib + t * n + j].to_i64() - zb;
                    acc = acc.wrapping_add(av * bv);
                }
                out(iy + i * n + j, i, j, acc as i32);
            }
        }
    });
    Ok(())
}

/// ONNX `MatMulInteger`: `y = (a - a_zp) @ (b - b_zp)` in `i32`; `a_zp` is
/// one value or one per row of `A`, `b_zp` one value or one per column of `B`.
pub fn matmul_integer<A: QInt, B: QInt>(
    p: &MatMul<'_>,
    a: &[A],
    b: &[B],
    a_zp: Option<&[A]>,
    b_zp: Option<&[B]>,
    y: &mut [i32],
) -> Result {
    let len = y.len();
    matmul_core(p, a, a_zp, b, b_zp, len, |e, _, _, v| y[e] = v)
}

/// The requantization multiplier `a_scale * w_scale / y_scale`, rounded at
/// each step to the scales' precision.
#[inline]
fn multiplier<S: QReal>(a: S, b: S, y: S) -> f64 {
    S::WORK.round(S::WORK.round(a.to_f64() * b.to_f64()) / y.to_f64())
}

fn scale_at<S: QReal>(s: &[S], i: usize) -> Result<S> {
    match s {
        [v] => Ok(*v),
        _ => s.get(i).copied().ok_or(Error::ShapeMismatch),
    }
}

/// The scales and zero points of a QLinear op's output requantization.
#[derive(Clone, Copy, Debug)]
pub struct Requant<'a, S, Y> {
    /// One value, or one per row of `A` (QLinearMatMul; `x_scale` of QLinearConv).
    pub a_scale: &'a [S],
    /// One value, or one per column of `B` / output channel of QLinearConv.
    pub b_scale: &'a [S],
    /// One value.
    pub y_scale: &'a [S],
    /// One value.
    pub y_zero_point: Option<&'a [Y]>,
}

impl<S: QReal, Y: QInt> Requant<'_, S, Y> {
    fn check(&self, a: usize, b: usize) -> Result {
        check_zp(Some(self.a_scale), a)?;
        check_zp(Some(self.b_scale), b)?;
        ensure(self.y_scale.len() == 1, Error::ShapeMismatch)?;
        ensure(self.y_zero_point.is_none_or(|z| z.len() == 1), Error::ShapeMismatch)
    }

    #[inline]
    fn apply(&self, acc: i32, ia: usize, ib: usize) -> Result<Y> {
        let ys = scale_at(self.y_scale, 0)?;
        let m = multiplier(scale_at(self.a_scale, ia)?, scale_at(self.b_scale, ib)?, ys);
        let zp = zp_at(self.y_zero_point, 0) as f64;
        Ok(round_sat(f64::from(acc) * m + zp))
    }
}

/// ONNX `QLinearMatMul`: the integer product of the zero-point-shifted
/// operands, scaled by `a_scale * b_scale / y_scale`, plus `y_zero_point`,
/// rounded half to even and saturated.
pub fn qlinear_matmul<A: QInt, B: QInt, S: QReal, Y: QInt>(
    p: &MatMul<'_>,
    a: &[A],
    a_zp: Option<&[A]>,
    b: &[B],
    b_zp: Option<&[B]>,
    r: &Requant<'_, S, Y>,
    y: &mut [Y],
) -> Result {
    r.check(p.m, p.n)?;
    let len = y.len();
    let mut res = Ok(());
    matmul_core(p, a, a_zp, b, b_zp, len, |e, i, j, v| match r.apply(v, i, j) {
        Ok(q) => y[e] = q,
        Err(err) => res = Err(err),
    })?;
    res
}

fn len3(a: usize, b: usize, c: usize) -> Result<usize> {
    a.checked_mul(b).and_then(|v| v.checked_mul(c)).ok_or(Error::Overflow)
}

/// The integer core of ConvInteger and QLinearConv: calls
/// `out(flat_index, output_channel, acc)` with the wrapped `i32` sum of
/// `(x - x_zp) * (w - w_zp)` over each window (padding contributes 0), plus
/// the bias.
#[allow(clippy::too_many_arguments)]
fn conv_core<X: QInt, W: QInt>(
    p: &Conv<'_>,
    x: &[X],
    x_zp: Option<X>,
    w: &[W],
    w_zp: Option<&[W]>,
    bias: Option<&[i32]>,
    out_len: usize,
    mut out: impl FnMut(usize, usize, i32),
) -> Result {
    p.window.check(false)?;
    ensure(
        p.groups > 0
            && p.in_channels.is_multiple_of(p.groups)
            && p.out_channels.is_multiple_of(p.groups),
        Error::InvalidParams,
    )?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    let k_size = numel(p.window.kernel)?;
    let cg = p.in_channels / p.groups;
    let mg = p.out_channels / p.groups;
    ensure(x.len() == len3(p.batch, p.in_channels, in_size)?, Error::ShapeMismatch)?;
    ensure(w.len() == len3(p.out_channels, cg, k_size)?, Error::ShapeMismatch)?;
    ensure(out_len == len3(p.batch, p.out_channels, out_size)?, Error::ShapeMismatch)?;
    check_zp(w_zp, p.out_channels)?;
    if let Some(b) = bias {
        ensure(b.len() == p.out_channels, Error::ShapeMismatch)?;
    }
    if out_size == 0 {
        return Ok(());
    }
    let zx = x_zp.map_or(0, QInt::to_i64);
    let mut opos = [0usize; MAX_RANK];
    let opos = &mut opos[..p.window.in_dims.len()];
    for n in 0..p.batch {
        for g in 0..p.groups {
            for mo in 0..mg {
                let oc = g * mg + mo;
                let zw = zp_at(w_zp, oc);
                let y_base = (n * p.out_channels + oc) * out_size;
                opos.fill(0);
                let mut o = 0;
                loop {
                    let mut acc = 0i64;
                    for ci in 0..cg {
                        let x_base = (n * p.in_channels + g * cg + ci) * in_size;
                        let w_base = (oc * cg + ci) * k_size;
                        p.window.taps(opos, |tap, at| {
                            if let Some(at) = at {
                                let xv = x[x_base + at].to_i64() - zx;
                                let wv = w[w_base + tap].to_i64() - zw;
                                acc = acc.wrapping_add(xv * wv);
                            }
                        });
                    }
                    let mut v = acc as i32;
                    if let Some(b) = bias {
                        v = v.wrapping_add(b[oc]);
                    }
                    out(y_base + o, oc, v);
                    o += 1;
                    if !next_index(opos, p.window.out_dims) {
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}

/// ONNX `ConvInteger`: `y = conv(x - x_zp, w - w_zp)` in `i32`; `w_zp` is one
/// value or one per output channel; padding reads as `x_zp` (0 after the
/// shift).
pub fn conv_integer<X: QInt, W: QInt>(
    p: &Conv<'_>,
    x: &[X],
    w: &[W],
    x_zp: Option<&[X]>,
    w_zp: Option<&[W]>,
    y: &mut [i32],
) -> Result {
    let x_zp = match x_zp {
        None => None,
        Some([v]) => Some(*v),
        Some(_) => return Err(Error::ShapeMismatch),
    };
    let len = y.len();
    conv_core(p, x, x_zp, w, w_zp, None, len, |e, _, v| y[e] = v)
}

/// ONNX `QLinearConv`: the integer convolution of the zero-point-shifted
/// operands plus the `i32` bias, scaled by `x_scale * w_scale / y_scale`
/// (`w_scale` one value or one per output channel), plus `y_zero_point`,
/// rounded half to even and saturated.
#[allow(clippy::too_many_arguments)]
pub fn qlinear_conv<X: QInt, W: QInt, S: QReal, Y: QInt>(
    p: &Conv<'_>,
    x: &[X],
    x_zp: Option<&[X]>,
    w: &[W],
    w_zp: Option<&[W]>,
    bias: Option<&[i32]>,
    r: &Requant<'_, S, Y>,
    y: &mut [Y],
) -> Result {
    r.check(1, p.out_channels)?;
    ensure(r.a_scale.len() == 1, Error::ShapeMismatch)?;
    let x_zp = match x_zp {
        None => None,
        Some([v]) => Some(*v),
        Some(_) => return Err(Error::ShapeMismatch),
    };
    let len = y.len();
    let mut res = Ok(());
    conv_core(p, x, x_zp, w, w_zp, bias, len, |e, oc, v| match r.apply(v, 0, oc) {
        Ok(q) => y[e] = q,
        Err(err) => res = Err(err),
    })?;
    res
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::Window;

    fn flat(n: usize) -> QuantAxis {
        QuantAxis { outer: 1, axis: 1, inner: n, block: 0 }
    }

    /// `rint_i32` (one `VCVTR` on hard-float Arm) against its definition:
    /// ties to even, saturation, NaN to 0.
    #[test]
    fn rint_i32_rounds_half_to_even_and_saturates() {
        let cases = [
            (0.5f32, 0),
            (1.5, 2),
            (2.5, 2),
            (-0.5, 0),
            (-1.5, -2),
            (-2.5, -2),
            (0.49999997, 0),
            (127.5, 128),
            (-128.5, -128),
            (4194303.5, 4194304),
            (8388607.0, 8388607),
            (3e9, i32::MAX),
            (-3e9, i32::MIN),
            (f32::INFINITY, i32::MAX),
            (f32::NEG_INFINITY, i32::MIN),
            (f32::NAN, 0),
        ];
        for (q, want) in cases {
            assert_eq!(rint_i32(q), want, "{q}");
        }
        let mut s = 0x2545_f491u32;
        for _ in 0..10_000 {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let q = f32::from_bits(s);
            assert_eq!(rint_i32(q), libm::rintf(q) as i32, "{q:e}");
        }
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let x = [0.0f32, 2.0, 3.0, 5.0, -1.0, 1000.0, -1000.0, 1.0];
        let mut y = [0u8; 8];
        quantize_linear(&flat(8), Work::F32, &x, &[2.0f32], Some(&[128u8][..]), &mut y).unwrap();
        // 0, 1, 1.5 -> 2, 2.5 -> 2, -0.5 -> -0, 500, -500, 0.5 -> 0
        assert_eq!(y, [128, 129, 130, 130, 128, 255, 0, 128]);
        let mut y = [0i8; 3];
        quantize_linear(&flat(3), Work::F32, &[-300.0f32, 300.0, -3.0], &[1.0f32], None, &mut y)
            .unwrap();
        assert_eq!(y, [-128, 127, -3]);
    }

    /// The `f32` path (8- and 16-bit outputs) against the `f64` one (taken
    /// for `i32` outputs, then offset and saturated the same way), over
    /// quotients near ties, huge and tiny values, infinities and NaN.
    #[test]
    fn quantize_in_f32_matches_the_f64_definition() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let specials = [0.0f32, -0.0, 0.5, 1.5, 2.5, -2.5, 1e30, -1e30, f32::INFINITY, f32::NAN];
        for i in 0..20_000 {
            let scale = f32::from_bits((next() as u32 & 0x007f_ffff) | 0x3c00_0000) * 8.0;
            let x = match i % 4 {
                0 => specials[i / 4 % specials.len()],
                1 => (next() % 600) as f32 * 0.5 * scale - 150.0 * scale,
                2 => f32::from_bits(next() as u32),
                _ => (next() as i32 as f32) * 1e-6,
            };
            let mut wide = [0i32];
            quantize_linear(&flat(1), Work::F32, &[x], &[scale], None, &mut wide).unwrap();
            for zp in [0i16, -128, 127, 300] {
                let want = (i64::from(wide[0]) + i64::from(zp)).clamp(-32768, 32767) as i16;
                let mut got = [0i16];
                quantize_linear(&flat(1), Work::F32, &[x], &[scale], Some(&[zp][..]), &mut got)
                    .unwrap();
                assert_eq!(got[0], want, "x {x:e} scale {scale:e} zp {zp}");
            }
            let want = (i64::from(wide[0]) + 128).clamp(0, 255) as u8;
            let mut got = [0u8];
            quantize_linear(&flat(1), Work::F32, &[x], &[scale], Some(&[128u8][..]), &mut got)
                .unwrap();
            assert_eq!(got[0], want, "x {x:e} scale {scale:e}");
        }
        // Whole tensors (the vectorised loop and its tail) against the
        // element-by-element results above.
        for n in [15usize, 16, 333] {
            let scale = 0.037f32;
            let x: Vec<f32> = (0..n)
                .map(|i| match i % 5 {
                    0 => specials[i % specials.len()],
                    1 => (next() % 600) as f32 * 0.5 * scale - 150.0 * scale,
                    _ => f32::from_bits(next() as u32 & 0xbfff_ffff),
                })
                .collect();
            let mut got = vec![0u8; n];
            quantize_linear(&flat(n), Work::F32, &x, &[scale], Some(&[3u8][..]), &mut got).unwrap();
            for (i, &x) in x.iter().enumerate() {
                let mut one = [0u8];
                quantize_linear(&flat(1), Work::F32, &[x], &[scale], Some(&[3u8][..]), &mut one)
                    .unwrap();
                let mut wide = [0i32];
                quantize_linear(&flat(1), Work::F32, &[x], &[scale], None, &mut wide).unwrap();
                let want = (i64::from(wide[0]) + 3).clamp(0, 255) as u8;
                assert_eq!((got[i], one[0]), (want, want), "n {n} i {i} x {x:e}");
            }
        }
    }

    #[test]
    fn quantize_per_axis_and_blocked() {
        // x [2, 3], axis 1, scales per column.
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let p = QuantAxis { outer: 2, axis: 3, inner: 1, block: 0 };
        let mut y = [0u8; 6];
        quantize_linear(&p, Work::F32, &x, &[1.0f32, 2.0, 3.0], None, &mut y).unwrap();
        assert_eq!(y, [1, 1, 1, 4, 2, 2]);
        // x [1, 4] blocked along axis 1 with block 3: scales [1, 2].
        let p = QuantAxis { outer: 1, axis: 4, inner: 1, block: 3 };
        let mut y = [0u8; 4];
        quantize_linear(&p, Work::F32, &[2.0f32, 4.0, 6.0, 8.0], &[1.0f32, 2.0], None, &mut y)
            .unwrap();
        assert_eq!(y, [2, 4, 6, 4]);
        assert_eq!(
            quantize_linear(&p, Work::F32, &[0.0f32; 4], &[1.0f32], None, &mut y),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn dequantize_subtracts_in_integers() {
        let mut y = [0f32; 3];
        dequantize_linear(&flat(3), &[0u8, 128, 255], &[0.5f32], Some(&[128u8][..]), &mut y)
            .unwrap();
        assert_eq!(y, [-64.0, 0.0, 63.5]);
        let mut y = [f16::ZERO; 2];
        dequantize_linear(&flat(2), &[-3i16, 7], &[f16::from_f32(2.0)], None, &mut y).unwrap();
        assert_eq!(y, [f16::from_f32(-6.0), f16::from_f32(14.0)]);
    }

    #[test]
    fn quantize_to_sub_byte_integers_saturates_and_packs() {
        // rint: 1, -20, 8 (7.5 to even), 3; + 1: 2, -19 -> -8, 9 -> 7, 4.
        let mut y = [0u8; 2];
        let x = [1.0f32, -20.0, 7.5, 3.0];
        quantize_linear_low(
            &flat(4),
            Work::F32,
            &x,
            &[1.0f32],
            Some(&[1]),
            LowBit::I4,
            true,
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [0x82, 0x47]);
        assert_eq!(
            quantize_linear_low(
                &flat(4),
                Work::F32,
                &x,
                &[1.0f32],
                None,
                LowBit::I4,
                true,
                &mut [0]
            ),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn quantize_to_float8_honours_saturate() {
        // 1000 / 2 = 500: above e4m3fn's 448; 1 / 2 = 0.5 is 0x30.
        let x = [1000.0f32, 1.0];
        let mut y = [0u8; 2];
        quantize_linear_low(
            &flat(2),
            Work::F32,
            &x,
            &[2.0f32],
            None,
            LowBit::F8E4M3FN,
            true,
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [0x7E, 0x30]);
        quantize_linear_low(
            &flat(2),
            Work::F32,
            &x,
            &[2.0f32],
            None,
            LowBit::F8E4M3FN,
            false,
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [0x7F, 0x30]);
    }

    #[test]
    fn dequantize_from_packed_formats() {
        // uint2 codes 3, 0, 1, 2 (low bits first) minus 1, times 0.5.
        let mut y = [0f32; 4];
        dequantize_linear_low(&flat(4), LowBit::U2, &[0x93], &[0.5f32], Some(&[1]), &mut y)
            .unwrap();
        assert_eq!(y, [1.0, -0.5, 0.0, 0.5]);
        // e4m3fn 0x30 = 0.5 and 0xB8 = -1, times 2.
        let mut y = [f16::ZERO; 2];
        dequantize_linear_low(
            &flat(2),
            LowBit::F8E4M3FN,
            &[0x30, 0xB8],
            &[f16::from_f32(2.0)],
            None,
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [f16::from_f32(1.0), f16::from_f32(-2.0)]);
    }

    #[test]
    fn dynamic_quantize_matches_hand_values() {
        // Range [0, 255] -> scale 1, zero point 0.
        let mut y = [0u8; 3];
        let (mut s, mut z) = ([0f32], [0u8]);
        dynamic_quantize_linear(&[0.0, 127.5, 255.0], &mut y, &mut s, &mut z).unwrap();
        assert_eq!((y, s, z), ([0, 128, 255], [1.0], [0]));
        // Range [-25.5, 0] -> scale 0.1, zero point 255.
        dynamic_quantize_linear(&[-25.5, -1.0, 0.0], &mut y, &mut s, &mut z).unwrap();
        assert_eq!((y, z), ([0, 245, 255], [255]));
    }

    fn mm2(m: usize, k: usize, n: usize) -> MatMul<'static> {
        MatMul::dense(&[], &[], &[], m, k, n)
    }

    #[test]
    fn matmul_integer_with_row_and_column_zero_points() {
        // A [[11, 7], [3, 5]] - [1, 2] per row; B [[1, 2], [3, 4]] - [1, 0] per column.
        let mut y = [0i32; 4];
        let a = [11u8, 7, 3, 5];
        let b = [1i8, 2, 3, 4];
        matmul_integer(&mm2(2, 2, 2), &a, &b, Some(&[1u8, 2][..]), Some(&[1i8, 0][..]), &mut y)
            .unwrap();
        // [[10, 6], [1, 3]] @ [[0, 2], [2, 4]] = [[12, 44], [6, 14]]
        assert_eq!(y, [12, 44, 6, 14]);
    }

    #[test]
    fn qlinear_matmul_requantizes() {
        // [2, 3] @ [3, 1] -> 2*1 + 3*2 = 8; 8 * (0.5 * 0.5 / 0.1) = 20 (+ zp 100).
        let r = Requant {
            a_scale: &[0.5f32],
            b_scale: &[0.5f32],
            y_scale: &[0.1],
            y_zero_point: Some(&[100u8][..]),
        };
        let mut y = [0u8; 1];
        qlinear_matmul(&mm2(1, 2, 1), &[2u8, 3], None, &[1u8, 2], None, &r, &mut y).unwrap();
        assert_eq!(y, [120]);
        // Saturation.
        let r = Requant {
            a_scale: &[1.0f32],
            b_scale: &[1.0f32],
            y_scale: &[1.0],
            y_zero_point: None::<&[i8]>,
        };
        let mut y = [0i8; 1];
        qlinear_matmul(&mm2(1, 2, 1), &[100i8, 100], None, &[1i8, 1], None, &r, &mut y).unwrap();
        assert_eq!(y, [127]);
    }

    #[test]
    fn conv_integer_padding_counts_as_zero_point() {
        // x 1x1x3 [5, 6, 7] with zp 5, w 1x1x3 [1, 1, 1], pads 1: windows
        // [pad, 0, 1] = 1, [0, 1, 2] = 3, [1, 2, pad] = 3.
        let p = Conv {
            batch: 1,
            in_channels: 1,
            out_channels: 1,
            groups: 1,
            window: Window {
                in_dims: &[3],
                out_dims: &[3],
                kernel: &[3],
                strides: &[1],
                dilations: &[1],
                pads_begin: &[1],
                pads_end: &[1],
            },
        };
        let mut y = [0i32; 3];
        conv_integer(&p, &[5u8, 6, 7], &[1u8, 1, 1], Some(&[5u8][..]), None, &mut y).unwrap();
        assert_eq!(y, [1, 3, 3]);
        let r = Requant {
            a_scale: &[0.5f32],
            b_scale: &[1.0f32],
            y_scale: &[1.0],
            y_zero_point: Some(&[10u8][..]),
        };
        let mut q = [0u8; 3];
        qlinear_conv(
            &p,
            &[5u8, 6, 7],
            Some(&[5u8][..]),
            &[1u8, 1, 1],
            None,
            Some(&[1i32][..]),
            &r,
            &mut q,
        )
        .unwrap();
        // (1 + 1) * 0.5 = 1, (3 + 1) * 0.5 = 2 -> 11, 12, 12
        assert_eq!(q, [11, 12, 12]);
    }
}
