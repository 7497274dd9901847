//! The fast integer path for quantized models: int8 or uint8 activations,
//! int8 weights (symmetric: zero point 0, one scale per tensor or per
//! output channel), `i32` bias and accumulation, fixed-point
//! requantization.
//!
//! Every result is defined by integer arithmetic only (the float scales are
//! turned into [`Scale`]s once, when the code is generated), so the
//! portable, AVX2, AVX-512 and NEON paths give the same bits. The
//! reference functions in [`crate::quant`] keep defining ONNX's semantics
//! (float requantization) for the cases the compiler does not bring here.
//!
//! - [`qmatmul`]: `y = requant(a · w + bias)` with `w` constant, packed at
//!   generation time by [`pack_weights`] (Gemm, MatMul, 1x1 convolutions in
//!   NHWC terms).
//! - [`qconv`]: NCHW convolution, weights packed by [`pack_conv_weights`];
//!   group 1 and grouped convolutions run as products over blocks of
//!   im2col columns in a small `scratch` ([`qconv_scratch_len`]), depthwise
//!   ones over one channel's padded plane in `scratch`.
//! - [`qadd`], [`qmul`]: element-wise, with [`add_scales`] and
//!   [`mul_scale`] for the generator; [`qavgpool`], [`qglobal_avgpool`];
//!   [`qlookup`] (any unary function, tabulated by the generator);
//!   [`qsoftmax`] (onnxruntime's QLinearSoftmax, see there).
//!
//! # Arithmetic
//!
//! Sums are `i32` and wrap on overflow (they cannot overflow below
//! `k = 2^16` terms); every path computes the same sum, so wrapping, where
//! it happens, happens alike. A result is requantized by [`Scale::apply`]
//! (one rounding, ties towards `+inf`), offset by the output zero point
//! and clamped to `[min, max]` ([`Requant`]), into which the compiler folds
//! Relu and Clip.
//!
//! The vector kernels live in `simd/q8/` (see `docs/architecture.md`).

use crate::conv::Conv;
use crate::shape::numel;
use crate::simd::q8;
use crate::{Error, Result, ensure};

/// Fixed-point scale of one output channel: real multiplier
/// `mult * 2^-(31 + shift)`.
///
/// A valid scale ([`Scale::is_valid`]) has `mult` in `[2^30, 2^31)` and a
/// total shift `31 + shift` in `2..=62` (real multipliers in about
/// `[2^-32, 2^29)`; `simd/q8/requant.rs` needs `t >= 2`); [`Scale::from_real`] makes only
/// those, and the kernels refuse others with [`Error::InvalidParams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    /// The mantissa, in `[2^30, 2^31)`.
    pub mult: i32,
    /// The exponent: the total right shift is `31 + shift`, in `2..=62`.
    pub shift: i32,
}

impl Scale {
    /// The nearest `Scale` to `real` (`> 0`, finite): `mult` in
    /// `[2^30, 2^31)`; `None` when `real` is out of the representable range
    /// (the total shift `31 + shift` must lie in `2..=62`, so `real` in
    /// about `[2^-32, 2^29)`). For the generator (host side; uses `f64`).
    pub fn from_real(real: f64) -> Option<Scale> {
        if !(real.is_finite() && real > 0.0) {
            return None;
        }
        // real = f * 2^e, f in [0.5, 1): mult = round(f * 2^31) (exact
        // scaling, one rounding), total shift 31 - e.
        let (f, e) = libm::frexp(real);
        let mut mult = libm::round(f * 2_147_483_648.0) as i64;
        let mut e = e;
        if mult == 1 << 31 {
            mult = 1 << 30;
            e += 1;
        }
        let t = 31 - e;
        let s = Scale { mult: mult as i32, shift: t - 31 };
        s.is_valid().then_some(s)
    }

    /// Whether `mult` lies in `[2^30, 2^31)` and the total shift
    /// `31 + shift` in `2..=62`: what the kernels accept.
    pub const fn is_valid(self) -> bool {
        self.mult >= 1 << 30 && self.shift >= -29 && self.shift <= 31
    }

    /// The total right shift `31 + shift`, clamped into `1..=62` (an
    /// invalid scale's shift is clamped; kernels never see one).
    #[inline(always)]
    pub const fn total_shift(self) -> u32 {
        let t = 31i64 + self.shift as i64;
        (if t < 1 {
            1
        } else if t > 62 {
            62
        } else {
            t
        }) as u32
    }

    /// The real multiplier, `mult * 2^-(31 + shift)`.
    pub fn to_real(self) -> f64 {
        f64::from(self.mult) * libm::exp2(-f64::from(self.total_shift()))
    }

    /// `round(acc * mult / 2^t)`, `t = 31 + shift`, ties rounded up
    /// (towards `+inf`): `((acc as i64 * mult as i64) + (1 << (t - 1))) >>
    /// t`, saturated to `i32`. The reference definition every vector path
    /// reproduces exactly (within the output range of a [`Requant`]: a
    /// vector path may saturate sooner, beyond `2^29`, which no output
    /// range reaches).
    #[inline(always)]
    pub fn apply(self, acc: i32) -> i32 {
        let t = self.total_shift();
        let v = (i64::from(acc) * i64::from(self.mult) + (1i64 << (t - 1))) >> t;
        v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    }
}

/// A [`Scale`] whose total shift is at least 31 (real multipliers below
/// 1), in the form a 32-bit core applies cheaply: a 32x32 -> 64-bit
/// multiply-accumulate onto the rounding term (`SMLAL`), then the high word
/// shifted on (`t >= 32`), or at `t = 31` the 64-bit sum's bits 31..62
/// (a shift and an or). [`Scale::apply`]'s 64-bit shift by a variable and
/// clamp take a dozen instructions there, and a multiplier kept as `i64`
/// (an earlier form of this one) a 64x64 product. Equal to `apply` for
/// every `acc`: `|acc mult| < 2^62` and the result fits `i32` (a
/// multiplier below 1 needs no saturation).
/// (Used on 32-bit Arm; tested on every target.)
#[cfg_attr(not(target_arch = "arm"), allow(dead_code))]
#[derive(Clone, Copy, Debug)]
pub(crate) struct HighScale {
    mult: i32,
    round: i64,
    rest: u32,
    /// `t == 31`.
    t31: bool,
}

#[cfg_attr(not(target_arch = "arm"), allow(dead_code))]
impl HighScale {
    /// `s` in this form, when its total shift is at least 31.
    pub(crate) fn of(s: Scale) -> Option<HighScale> {
        let t = s.total_shift();
        (t >= 31).then(|| HighScale {
            mult: s.mult,
            round: 1 << (t - 1),
            rest: t.saturating_sub(32),
            t31: t == 31,
        })
    }

    /// Whether the total shift is 31 (the form [`HighScale::apply_at`]
    /// takes as `T31`).
    pub(crate) fn t31(self) -> bool {
        self.t31
    }

    /// [`Scale::apply`] (the kernels take [`HighScale::apply_at`]).
    #[cfg(test)]
    pub(crate) fn apply(self, acc: i32) -> i32 {
        if self.t31 { self.apply_at::<true>(acc) } else { self.apply_at::<false>(acc) }
    }

    /// [`Scale::apply`] with `T31 == self.t31()` known where the loop is
    /// compiled.
    #[inline(always)]
    pub(crate) fn apply_at<const T31: bool>(self, acc: i32) -> i32 {
        debug_assert_eq!(T31, self.t31);
        let p = i64::from(acc) * i64::from(self.mult) + self.round;
        if T31 { (p >> 31) as i32 } else { ((p >> 32) as i32) >> self.rest }
    }
}

/// The most an output zero point may be away from 0 (a [`Requant`]'s and
/// the element-wise kernels' `zero`).
pub const MAX_ZERO: i32 = 1 << 15;

/// Output requantization: `y = clamp(zero + scale_c.apply(acc), min,
/// max)`, with the scale of output channel `c` (`scales.len() ==
/// channels`) or one for all (`scales.len() == 1`). `min` and `max` lie
/// within the output type's range (an activation, Relu or Clip, is folded
/// into them by the compiler); `|zero| <= MAX_ZERO`.
#[derive(Clone, Copy, Debug)]
pub struct Requant<'a> {
    /// One valid [`Scale`] per output channel, or one for all.
    pub scales: &'a [Scale],
    /// The output zero point.
    pub zero: i32,
    /// The smallest output.
    pub min: i32,
    /// The largest output.
    pub max: i32,
}

impl Requant<'_> {
    /// Checks the fields against `channels` output channels of type `Y`.
    pub fn check<Y: Q8>(&self, channels: usize) -> Result {
        ensure(self.scales.len() == 1 || self.scales.len() == channels, Error::ShapeMismatch)?;
        ensure(self.scales.iter().all(|s| s.is_valid()), Error::InvalidParams)?;
        check_out::<Y>(self.zero, self.min, self.max)
    }

    /// The scale of output channel `c`.
    #[inline(always)]
    pub fn scale(&self, c: usize) -> Scale {
        match self.scales {
            [one] => *one,
            all => all.get(c).copied().unwrap_or(Scale { mult: 1 << 30, shift: 0 }),
        }
    }

    /// `clamp(zero + scale_c.apply(acc), min, max)`.
    #[inline(always)]
    pub fn apply(&self, c: usize, acc: i32) -> i32 {
        self.zero.saturating_add(self.scale(c).apply(acc)).clamp(self.min, self.max)
    }
}

fn check_out<Y: Q8>(zero: i32, min: i32, max: i32) -> Result {
    ensure((-MAX_ZERO..=MAX_ZERO).contains(&zero), Error::InvalidParams)?;
    ensure(Y::MIN <= min && min <= max && max <= Y::MAX, Error::InvalidParams)
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for u8 {}
}

/// `i8` and `u8`, the activation element types (sealed).
pub trait Q8: Copy + Default + PartialEq + core::fmt::Debug + sealed::Sealed + 'static {
    /// The smallest value.
    const MIN: i32;
    /// The largest value.
    const MAX: i32;
    /// Whether the type is `i8`.
    const SIGNED: bool;
    /// The value.
    fn get(self) -> i32;
    /// `v` clamped to `[MIN, MAX]`.
    fn saturate(v: i32) -> Self;
    /// The byte (its bits).
    fn bits(self) -> u8;
    /// The elements' bytes.
    fn as_bytes(s: &[Self]) -> &[u8];
    /// The elements' bytes, for writing.
    fn as_bytes_mut(s: &mut [Self]) -> &mut [u8];
    /// `y[i] = saturate(round_half_even(x[i] / scale) + zero)`: ONNX
    /// `QuantizeLinear` per tensor, as [`crate::quant::quantize_linear`]
    /// computes it.
    fn quantize(x: &[f32], scale: f32, zero: i32, y: &mut [Self]);
    /// The value of the byte `b`.
    #[inline(always)]
    fn of_bits(b: u8) -> i32 {
        if Self::SIGNED { i32::from(b as i8) } else { i32::from(b) }
    }
}

macro_rules! q8 {
    ($t:ty, $signed:expr) => {
        impl Q8 for $t {
            const MIN: i32 = <$t>::MIN as i32;
            const MAX: i32 = <$t>::MAX as i32;
            const SIGNED: bool = $signed;
            #[inline(always)]
            fn get(self) -> i32 {
                self as i32
            }
            #[inline(always)]
            fn saturate(v: i32) -> Self {
                v.clamp(<Self as Q8>::MIN, <Self as Q8>::MAX) as $t
            }
            #[inline(always)]
            fn quantize(x: &[f32], scale: f32, zero: i32, y: &mut [Self]) {
                crate::quant::quantize_f32(x, scale, i64::from(zero), y)
            }
            #[inline(always)]
            fn bits(self) -> u8 {
                self as u8
            }
            #[inline(always)]
            fn as_bytes(s: &[Self]) -> &[u8] {
                bytemuck::cast_slice(s)
            }
            #[inline(always)]
            fn as_bytes_mut(s: &mut [Self]) -> &mut [u8] {
                bytemuck::cast_slice_mut(s)
            }
        }
    };
}
q8!(i8, true);
q8!(u8, false);

/// The shape of a [`qmatmul`]: `[m, k] x [k, n]`, and the activations'
/// zero point.
#[derive(Clone, Copy, Debug)]
pub struct QMatMul {
    /// Rows of `a` and `y` (a batch folded in by the caller).
    pub m: usize,
    /// Columns of `y` (output channels).
    pub n: usize,
    /// The summed dimension.
    pub k: usize,
    /// The activations' zero point, within their type's range.
    pub a_zero: i32,
}

/// The weights of a [`qmatmul`].
#[derive(Clone, Copy, Debug)]
pub enum QWeights<'a> {
    /// `[k, n]` row-major, or `[n, k]` when `trans`. Read by a plain
    /// (portable) loop: for constant folding and odd cases.
    Dense {
        /// The weights.
        w: &'a [i8],
        /// Whether `w` is `[n, k]`.
        trans: bool,
    },
    /// The blob [`pack_weights`] wrote ([`packed_len`] bytes), which every
    /// vector path reads.
    Packed(&'a [i8]),
}

/// The bytes of [`pack_weights`]'s blob for a `[k, n]` matrix:
/// `4 * n16` bytes of column sums, then `n16 * k4` bytes of weights, with
/// `n16 = n` rounded up to 16 and `k4 = k` rounded up to 4 (`None`-like
/// `usize::MAX` on overflow, which no slice has).
pub const fn packed_len(k: usize, n: usize) -> usize {
    match packed_dims(k, n) {
        Some((n16, k4)) => match n16.checked_mul(k4) {
            Some(w) => match w.checked_add(4 * n16) {
                Some(l) => l,
                None => usize::MAX,
            },
            None => usize::MAX,
        },
        None => usize::MAX,
    }
}

const fn packed_dims(k: usize, n: usize) -> Option<(usize, usize)> {
    match (n.checked_next_multiple_of(16), k.checked_next_multiple_of(4)) {
        (Some(n16), Some(k4)) if n16 <= usize::MAX / 4 => Some((n16, k4)),
        _ => None,
    }
}

/// Lays out `w` (`[k, n]`, or `[n, k]` when `trans`) for [`qmatmul`]'s
/// `QWeights::Packed`, into `out` ([`packed_len`]`(k, n)` bytes), at
/// generation time. One layout for every instruction set:
///
/// - bytes `0..4 * n16`: `colsum[j] = sum_k w[k, j]` as little-endian `i32`
///   (0 for the padding columns `j >= n`); the kernels subtract
///   `a_zero * colsum[j]` once per output instead of `a_zero` per term;
/// - then one strip per 16 columns, `k4 / 4` groups of 64 bytes each:
///   group `g` of strip `s` holds, for column `c` in `0..16`, the four
///   weights `w[4g..4g + 4, 16s + c]` (zeros past `k` and `n`). A 32-bit
///   lane is then four consecutive `k` of one column: what `vpdpbusd`
///   (AVX-512 VNNI), `sdot` (NEON) and two `SMLAD`s (Cortex-M) consume,
///   and `vpmaddwd` (AVX2) after widening.
pub fn pack_weights(w: &[i8], k: usize, n: usize, trans: bool, out: &mut [i8]) -> Result {
    ensure(w.len() == k.checked_mul(n).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    let (n16, k4) = packed_dims(k, n).ok_or(Error::Overflow)?;
    ensure(out.len() == packed_len(k, n), Error::ShapeMismatch)?;
    let at = |kk: usize, j: usize| if trans { w[j * k + kk] } else { w[kk * n + j] };
    let (sums, body) = out.split_at_mut(4 * n16);
    for j in 0..n16 {
        let s: i32 = if j < n { (0..k).map(|kk| i32::from(at(kk, j))).sum() } else { 0 };
        for (d, b) in sums[4 * j..4 * j + 4].iter_mut().zip(s.to_le_bytes()) {
            *d = b as i8;
        }
    }
    for s in 0..n16 / 16 {
        let strip = &mut body[s * k4 * 16..(s + 1) * k4 * 16];
        for (g, grp) in strip.chunks_exact_mut(64).enumerate() {
            for (i, v) in grp.iter_mut().enumerate() {
                let (j, kk) = (16 * s + i / 4, 4 * g + i % 4);
                *v = if j < n && kk < k { at(kk, j) } else { 0 };
            }
        }
    }
    Ok(())
}

/// `y[i, j] = clamp(zero + scale_j.apply(sum_k (a[i, k] - a_zero) * w[k,
/// j] + bias[j]), min, max)`: `a` row-major `[m, k]`, `y` row-major `[m,
/// n]`, requantized per column (output channel). The sum wraps in `i32`
/// (see the [module documentation](self)).
pub fn qmatmul<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: &[A],
    w: QWeights<'_>,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) -> Result {
    let &QMatMul { m, n, k, a_zero } = p;
    ensure(a.len() == m.checked_mul(k).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y.len() == m.checked_mul(n).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure((A::MIN..=A::MAX).contains(&a_zero), Error::InvalidParams)?;
    ensure(bias.is_none_or(|b| b.len() == n), Error::ShapeMismatch)?;
    rq.check::<Y>(n)?;
    match w {
        QWeights::Dense { w, trans } => {
            ensure(w.len() == k * n, Error::ShapeMismatch)?;
            q8::gemm::dense(p, a, w, trans, bias, rq, y);
        }
        QWeights::Packed(w) => {
            ensure(w.len() == packed_len(k, n), Error::ShapeMismatch)?;
            q8::gemm::packed(p, a, bytemuck::cast_slice(w), bias, rq, y);
        }
    }
    Ok(())
}

/// The quantization on a float32 side of a [`qmatmul_float`]: `real =
/// scale * (q - zero)`, `zero` within the integer type's range.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QLinear {
    /// The scale (finite, `> 0`).
    pub scale: f32,
    /// The zero point.
    pub zero: i32,
}

/// The rows a [`qmatmul_float`] reads.
#[derive(Clone, Copy, Debug)]
pub enum QRows<'a, A> {
    /// Quantized already, as [`qmatmul`]'s `a`.
    Quantized(&'a [A]),
    /// Float32, quantized to `A` by `q` as they are read (ONNX
    /// `QuantizeLinear`: `saturate(round_half_even(x / scale) + zero)`), a
    /// few [`QUANTIZE_CHUNK`] at a time into the scratch: the quantized
    /// rows are never held whole.
    Float {
        /// `[m, k]` row-major.
        x: &'a [f32],
        /// Their quantization.
        q: QLinear,
    },
}

/// Where a [`qmatmul_float`] writes.
#[derive(Debug)]
pub enum QDest<'a, Y> {
    /// Quantized, as [`qmatmul`]'s `y`.
    Quantized(&'a mut [Y]),
    /// Float32: each output is requantized to `Y` as by [`qmatmul`], then
    /// dequantized by `q` (ONNX `DequantizeLinear`: `(y - zero) * scale`,
    /// the product rounded to `f32`).
    Float {
        /// `[m, n]` row-major.
        y: &'a mut [f32],
        /// The dequantization.
        q: QLinear,
    },
}

/// The `k` a [`QRows::Float`] product quantizes at a time, per row.
pub const QUANTIZE_CHUNK: usize = 64;

/// The scratch elements of a [`qmatmul_float`] whose rows are
/// [`QRows::Float`]: [`QUANTIZE_CHUNK`] for each row of the largest tile
/// of any target (0 when the rows are quantized already).
pub fn qmatmul_float_scratch_len(p: &QMatMul, float_rows: bool) -> usize {
    if float_rows { p.m.min(q8::gemm::micro::MAX_MR) * QUANTIZE_CHUNK } else { 0 }
}

/// [`qmatmul`] with float32 ends: the rows quantized as they are read
/// ([`QRows::Float`]), the outputs dequantized as they are written
/// ([`QDest::Float`]), or both, with `w` packed ([`pack_weights`]). The
/// integers are [`qmatmul`]'s, the floats those of `QuantizeLinear` before
/// it and `DequantizeLinear` after it, bit for bit: what the compiler
/// fuses so that a float input or output needs no quantized copy in the
/// arena. `scratch` holds [`qmatmul_float_scratch_len`] elements.
#[allow(clippy::too_many_arguments)]
pub fn qmatmul_float<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: QRows<'_, A>,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: QDest<'_, Y>,
    scratch: &mut [A],
) -> Result {
    let &QMatMul { m, n, k, a_zero } = p;
    let (mk, mn) =
        (m.checked_mul(k).ok_or(Error::Overflow)?, m.checked_mul(n).ok_or(Error::Overflow)?);
    ensure((A::MIN..=A::MAX).contains(&a_zero), Error::InvalidParams)?;
    ensure(bias.is_none_or(|b| b.len() == n), Error::ShapeMismatch)?;
    ensure(w.len() == packed_len(k, n), Error::ShapeMismatch)?;
    rq.check::<Y>(n)?;
    let quantization_ok = |q: &QLinear, min: i32, max: i32| {
        q.scale.is_finite() && q.scale > 0.0 && (min..=max).contains(&q.zero)
    };
    match &a {
        QRows::Quantized(a) => ensure(a.len() == mk, Error::ShapeMismatch)?,
        QRows::Float { x, q } => {
            ensure(x.len() == mk, Error::ShapeMismatch)?;
            ensure(quantization_ok(q, A::MIN, A::MAX), Error::InvalidParams)?;
            ensure(scratch.len() >= qmatmul_float_scratch_len(p, true), Error::ShapeMismatch)?;
        }
    }
    match &y {
        QDest::Quantized(y) => ensure(y.len() == mn, Error::ShapeMismatch)?,
        QDest::Float { y, q } => {
            ensure(y.len() == mn, Error::ShapeMismatch)?;
            ensure(quantization_ok(q, Y::MIN, Y::MAX), Error::InvalidParams)?;
        }
    }
    q8::gemm::packed_float(p, a, bytemuck::cast_slice(w), bias, rq, y, scratch);
    Ok(())
}

/// The weights of a [`qconv`]: `[M, C / group, kernel...]`.
#[derive(Clone, Copy, Debug)]
pub enum QConvWeights<'a> {
    /// As ONNX lays them out. Read by a plain (portable) loop: for
    /// constant folding and odd cases.
    Dense(&'a [i8]),
    /// The blob [`pack_conv_weights`] wrote ([`packed_conv_len`] bytes).
    Packed(&'a [i8]),
}

/// Whether `p` is a depthwise convolution (`group == C == M`).
fn depthwise(p: &Conv<'_>) -> bool {
    p.groups == p.in_channels && p.groups == p.out_channels
}

/// The 2-d geometry of `p`'s window (a 1-d one as one row), `None` for
/// other ranks.
pub(crate) fn geometry(p: &Conv<'_>) -> Option<q8::conv::Geom> {
    q8::conv::Geom::of(&p.window)
}

/// The bytes of [`pack_conv_weights`]'s blob for `p` (`usize::MAX` on
/// overflow).
pub fn packed_conv_len(p: &Conv<'_>) -> usize {
    q8::conv::packed_len(p).unwrap_or(usize::MAX)
}

/// Lays out `w` (`[M, C / group, kernel...]`) for [`qconv`]'s
/// `QConvWeights::Packed`, into `out` ([`packed_conv_len`] bytes), at
/// generation time. One layout for every instruction set:
///
/// - depthwise (`group == C == M`): `w` unchanged;
/// - otherwise, with `K = C / group * prod(kernel)` and `k4 = K` rounded up
///   to 4: `4 * M` bytes of row sums (`sum_k w[m, k]`, little-endian `i32`,
///   so the input zero point costs one multiply per output), then per
///   group, per panel of 8 output channels (the last one padded with zero
///   rows), `k4 / 4` groups of 32 bytes: for row `r` in `0..8`, the four
///   weights `w[m0 + r, 4g..4g + 4]` (zeros past `K`). Each 32-bit word is
///   one channel's four consecutive `k`, broadcast against four pixels'
///   (a 64-byte group of the im2col block, laid out as [`pack_weights`]'s
///   strips).
pub fn pack_conv_weights(p: &Conv<'_>, w: &[i8], out: &mut [i8]) -> Result {
    p.window.check(false)?;
    ensure(p.groups > 0, Error::InvalidParams)?;
    ensure(
        p.in_channels.is_multiple_of(p.groups) && p.out_channels.is_multiple_of(p.groups),
        Error::InvalidParams,
    )?;
    let taps = numel(p.window.kernel)?;
    let kk = (p.in_channels / p.groups).checked_mul(taps).ok_or(Error::Overflow)?;
    ensure(
        w.len() == p.out_channels.checked_mul(kk).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    ensure(out.len() == packed_conv_len(p), Error::ShapeMismatch)?;
    if depthwise(p) {
        out.copy_from_slice(w);
        return Ok(());
    }
    q8::conv::pack(p, w, bytemuck::cast_slice_mut(out));
    Ok(())
}

/// The elements of `scratch` [`qconv`] needs for `p` (0 when its path
/// needs none): a block of im2col columns, at most about 32 KiB (and at
/// least 16 columns), whatever the image size; for a depthwise
/// convolution, one channel's plane with its padding and 4 bytes.
pub fn qconv_scratch_len(p: &Conv<'_>) -> usize {
    match geometry(p) {
        None => 0,
        Some(g) if depthwise(p) => q8::conv::depthwise::scratch_len(&g).unwrap_or(usize::MAX),
        Some(_) => q8::conv::scratch_len(p).unwrap_or(usize::MAX),
    }
}

/// NCHW convolution: `y[n, m, o] = clamp(zero + scale_m.apply(sum (x - x_zero)
/// * w + bias[m]), min, max)` summed over the group's input channels and
/// the kernel taps; padding reads as `x_zero` (zero in real terms).
/// Requantized per output channel `m`. `scratch` holds
/// [`qconv_scratch_len`] elements (more are left alone).
///
/// Paths: depthwise (`group == C == M`, any kernel, stride, padding,
/// dilation) over each channel's padded plane (3x3 windows of stride 1 or 2
/// by the Arm DSP kernel where the target has it); other 1-d and 2-d convolutions as products of the
/// packed weights by blocks of im2col columns; 3-d and higher, and `Dense`
/// weights, by a plain loop.
#[allow(clippy::too_many_arguments)]
pub fn qconv<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    x: &[A],
    x_zero: i32,
    w: QConvWeights<'_>,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
    scratch: &mut [A],
) -> Result {
    p.window.check(false)?;
    ensure(p.groups > 0, Error::InvalidParams)?;
    ensure(
        p.in_channels.is_multiple_of(p.groups) && p.out_channels.is_multiple_of(p.groups),
        Error::InvalidParams,
    )?;
    ensure((A::MIN..=A::MAX).contains(&x_zero), Error::InvalidParams)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    let taps = numel(p.window.kernel)?;
    let len3 = |a: usize, b: usize, c: usize| {
        a.checked_mul(b).and_then(|v| v.checked_mul(c)).ok_or(Error::Overflow)
    };
    ensure(x.len() == len3(p.batch, p.in_channels, in_size)?, Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, p.out_channels, out_size)?, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == p.out_channels), Error::ShapeMismatch)?;
    rq.check::<Y>(p.out_channels)?;
    let dense_len = len3(p.out_channels, p.in_channels / p.groups, taps)?;
    match w {
        QConvWeights::Dense(w) => {
            ensure(w.len() == dense_len, Error::ShapeMismatch)?;
            q8::conv::reference(p, x, x_zero, w, bias, rq, y);
        }
        QConvWeights::Packed(w) => {
            ensure(w.len() == packed_conv_len(p), Error::ShapeMismatch)?;
            if depthwise(p) {
                match geometry(p) {
                    Some(g) => {
                        let need = qconv_scratch_len(p);
                        ensure(scratch.len() >= need, Error::ShapeMismatch)?;
                        let scratch = &mut scratch[..need];
                        let io = q8::conv::Io::Apart { x: A::as_bytes(x), y };
                        q8::conv::depthwise::run(p, &g, io, x_zero, w, bias, rq, scratch);
                    }
                    None => q8::conv::reference(p, x, x_zero, w, bias, rq, y),
                }
            } else {
                match geometry(p) {
                    Some(g) => {
                        let need = qconv_scratch_len(p);
                        ensure(scratch.len() >= need, Error::ShapeMismatch)?;
                        let w = bytemuck::cast_slice(w);
                        let io = q8::conv::Io::Apart { x: A::as_bytes(x), y };
                        q8::conv::im2col(
                            p,
                            &g,
                            io,
                            x_zero,
                            w,
                            bias,
                            rq,
                            None,
                            &mut scratch[..need],
                        );
                    }
                    None => {
                        let mut dense = DenseOf { packed: bytemuck::cast_slice(w), p };
                        q8::conv::reference_with(p, x, x_zero, &mut dense, bias, rq, y);
                    }
                }
            }
        }
    }
    Ok(())
}

/// The residual `Add` of a [`qconv_add`]: the sum's quantization and the
/// residual's zero point; the convolution's own output is requantized as
/// by [`qconv`] (its zero point the `Requant`'s) before it is added.
#[derive(Clone, Copy, Debug)]
pub struct QResidual {
    /// The residual's zero point.
    pub zero: i32,
    /// From [`add_scales`]: `a` for the convolution's output, `b` for the
    /// residual.
    pub scales: AddScales,
    /// The sum's zero point and range.
    pub out: QOut,
}

/// Whether [`qconv_add`] takes `p`: a convolution of packed weights on
/// the im2col path (1-d or 2-d, not depthwise).
pub fn qconv_add_runs(p: &Conv<'_>) -> bool {
    geometry(p).is_some() && !depthwise(p) && p.groups > 0
}

/// A convolution and the residual `Add` after it in one pass: `y` holds
/// the residual on entry and `qadd(qconv(x), y)` on return, each output
/// run added as the output stage writes it (so a residual whose buffer
/// dies here takes the sum: no buffer for the convolution's own output).
/// The same results as [`qconv`] into a buffer then [`qadd`]. Packed
/// weights, [`qconv_add_runs`] (else `Error::InvalidParams`).
#[allow(clippy::too_many_arguments)]
pub fn qconv_add<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    x: &[A],
    x_zero: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    res: &QResidual,
    y: &mut [Y],
    scratch: &mut [A],
) -> Result {
    p.window.check(false)?;
    ensure(qconv_add_runs(p), Error::InvalidParams)?;
    ensure(
        p.in_channels.is_multiple_of(p.groups) && p.out_channels.is_multiple_of(p.groups),
        Error::InvalidParams,
    )?;
    ensure((A::MIN..=A::MAX).contains(&x_zero), Error::InvalidParams)?;
    let len = |c: usize, d: &[usize]| {
        numel(d)?.checked_mul(c).and_then(|v| v.checked_mul(p.batch)).ok_or(Error::Overflow)
    };
    ensure(x.len() == len(p.in_channels, p.window.in_dims)?, Error::ShapeMismatch)?;
    ensure(y.len() == len(p.out_channels, p.window.out_dims)?, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == p.out_channels), Error::ShapeMismatch)?;
    rq.check::<Y>(p.out_channels)?;
    ensure(w.len() == packed_conv_len(p), Error::ShapeMismatch)?;
    let s = &res.scales;
    check_add_scales(s)?;
    ensure((Y::MIN..=Y::MAX).contains(&res.zero), Error::InvalidParams)?;
    check_out::<Y>(res.out.zero, res.out.min, res.out.max)?;
    let need = qconv_scratch_len(p);
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    let Some(g) = geometry(p) else { return Err(Error::InvalidParams) };
    let add = q8::elementwise::AddRuns::new(rq.zero, res.zero, s, &res.out);
    let io = q8::conv::Io::Apart { x: A::as_bytes(x), y };
    let w = bytemuck::cast_slice(w);
    q8::conv::im2col(p, &g, io, x_zero, w, bias, rq, Some(&add), &mut scratch[..need]);
    Ok(())
}

/// Whether [`qconv_in_place`] takes `p`: a depthwise or pointwise (1x1,
/// stride 1, unpadded) convolution whose output has the input's shape.
/// Each reads a channel's plane (depthwise) or a block of positions
/// (pointwise) into its scratch before it stores the outputs that
/// overwrite exactly those, so the output can take the input's buffer
/// (the int8 arenas of depthwise-separable models).
pub fn qconv_runs_in_place(p: &Conv<'_>) -> bool {
    let Some(g) = geometry(p) else { return false };
    let same = p.in_channels == p.out_channels && g.ih == g.oh && g.iw == g.ow;
    same && (depthwise(p) || g.pointwise())
}

/// [`qconv`] with the output written over its input `xy` (packed weights,
/// [`qconv_runs_in_place`]; else `Error::InvalidParams`). The same results
/// as [`qconv`] into a separate buffer.
#[allow(clippy::too_many_arguments)]
pub fn qconv_in_place<T: Q8>(
    p: &Conv<'_>,
    xy: &mut [T],
    x_zero: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    scratch: &mut [T],
) -> Result {
    p.window.check(false)?;
    ensure(p.groups > 0 && p.in_channels.is_multiple_of(p.groups), Error::InvalidParams)?;
    ensure(qconv_runs_in_place(p), Error::InvalidParams)?;
    ensure((T::MIN..=T::MAX).contains(&x_zero), Error::InvalidParams)?;
    let size = numel(p.window.in_dims)?;
    let len = p.batch.checked_mul(p.in_channels).and_then(|v| v.checked_mul(size));
    ensure(len == Some(xy.len()), Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == p.out_channels), Error::ShapeMismatch)?;
    rq.check::<T>(p.out_channels)?;
    ensure(w.len() == packed_conv_len(p), Error::ShapeMismatch)?;
    let need = qconv_scratch_len(p);
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    let (Some(g), scratch) = (geometry(p), &mut scratch[..need]) else {
        return Err(Error::InvalidParams);
    };
    let io = q8::conv::Io::Shared(xy);
    if depthwise(p) {
        q8::conv::depthwise::run(p, &g, io, x_zero, w, bias, rq, scratch);
    } else {
        q8::conv::im2col(p, &g, io, x_zero, bytemuck::cast_slice(w), bias, rq, None, scratch);
    }
    Ok(())
}

/// Reads `w[m, k]` out of a packed blob (3-d and higher convolutions,
/// which have no packed path of their own).
pub(crate) struct DenseOf<'a, 'c> {
    packed: &'a [u8],
    p: &'a Conv<'c>,
}

impl q8::conv::WeightAt for DenseOf<'_, '_> {
    fn at(&mut self, m: usize, k: usize) -> i32 {
        q8::conv::packed_weight(self.p, self.packed, m, k)
    }
}

/// The zero point, range and clamp of an element-wise kernel's output.
#[derive(Clone, Copy, Debug)]
pub struct QOut {
    /// The zero point (`|zero| <= MAX_ZERO`).
    pub zero: i32,
    /// The smallest output, within the type's range.
    pub min: i32,
    /// The largest output, within the type's range.
    pub max: i32,
}

/// [`qadd`]'s fixed-point constants, from [`add_scales`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddScales {
    /// Applied to `(a - a_zero) << left_shift`.
    pub a: Scale,
    /// Applied to `(b - b_zero) << left_shift`.
    pub b: Scale,
    /// Applied to the sum of the two.
    pub out: Scale,
    /// The headroom the inputs get before their scales round them.
    pub left_shift: u32,
}

/// The left shift [`add_scales`] chooses: 20 bits above a difference of
/// at most 9 bits leaves one bit of headroom for the sum in `i32`.
pub const ADD_LEFT_SHIFT: u32 = 20;

/// [`qadd`]'s constants for input scales `sa`, `sb` and output scale `sy`
/// (positive, finite), at generation time: with `twice = 2 max(sa, sb)`,
/// the inputs get `sa / twice` and `sb / twice` (at most 1/2), the sum
/// `twice / (2^20 sy)`. `None` when a multiplier is out of [`Scale`]'s
/// range.
pub fn add_scales(sa: f64, sb: f64, sy: f64) -> Option<AddScales> {
    let twice = 2.0 * sa.max(sb);
    let shift = ADD_LEFT_SHIFT;
    Some(AddScales {
        a: Scale::from_real(sa / twice)?,
        b: Scale::from_real(sb / twice)?,
        out: Scale::from_real(twice / (libm::exp2(f64::from(shift)) * sy))?,
        left_shift: shift,
    })
}

/// Same-shape quantized addition (TFLite's formulation): with `da = (a -
/// a_zero) << left_shift` and `db` alike, `y = clamp(zero + s.out.apply(
/// s.a.apply(da) + s.b.apply(db)), min, max)`: about `zero + (sa (a - za) +
/// sb (b - zb)) / sy`, in integers only.
pub fn qadd<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    s: &AddScales,
    y: &mut [T],
    out: &QOut,
) -> Result {
    ensure(a.len() == y.len() && b.len() == y.len(), Error::ShapeMismatch)?;
    check_add_scales(s)?;
    ensure(
        (T::MIN..=T::MAX).contains(&a_zero) && (T::MIN..=T::MAX).contains(&b_zero),
        Error::InvalidParams,
    )?;
    check_out::<T>(out.zero, out.min, out.max)?;
    q8::elementwise::add(a, a_zero, b, b_zero, s, y, out);
    Ok(())
}

/// Whether `s` is what [`add_scales`] makes: valid scales, a headroom
/// of at most [`ADD_LEFT_SHIFT`] bits.
fn check_add_scales(s: &AddScales) -> Result {
    ensure([s.a, s.b, s.out].iter().all(|s| s.is_valid()), Error::InvalidParams)?;
    ensure(s.left_shift <= ADD_LEFT_SHIFT, Error::InvalidParams)
}

/// [`qmul`]'s scale for input scales `sa`, `sb` and output scale `sy`:
/// `sa * sb / sy` (`None` out of [`Scale`]'s range).
pub fn mul_scale(sa: f64, sb: f64, sy: f64) -> Option<Scale> {
    Scale::from_real(sa * sb / sy)
}

/// Same-shape quantized multiplication: `y = clamp(zero + s.apply((a -
/// a_zero) * (b - b_zero)), min, max)` with `s` from [`mul_scale`].
pub fn qmul<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    s: Scale,
    y: &mut [T],
    out: &QOut,
) -> Result {
    ensure(a.len() == y.len() && b.len() == y.len(), Error::ShapeMismatch)?;
    ensure(s.is_valid(), Error::InvalidParams)?;
    ensure(
        (T::MIN..=T::MAX).contains(&a_zero) && (T::MIN..=T::MAX).contains(&b_zero),
        Error::InvalidParams,
    )?;
    check_out::<T>(out.zero, out.min, out.max)?;
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        let v = s.apply((a.get() - a_zero) * (b.get() - b_zero));
        *y = T::saturate(out.zero.saturating_add(v).clamp(out.min, out.max));
    }
    Ok(())
}

/// One channel of [`qaffine`]: `x -> (x * mult + bias) >> shift`, the
/// fixed-point form of `round(m * (x - x_zero) + b)` for real `m` (of
/// either sign, or 0) and `b`, ties rounded up. `bias` holds `b`, the zero
/// point's term and the rounding half, all scaled by `2^shift`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Affine {
    pub mult: i32,
    pub bias: i64,
    /// At most 62.
    pub shift: u32,
}

impl Affine {
    /// The nearest `Affine` to `round(m * (x - x_zero) + b)`, the shift as
    /// large as `|mult| < 2^31` and `|bias| < 2^60` allow (so `x * mult +
    /// bias` never overflows for 8-bit `x`); `None` when `m` or `b` is not
    /// finite or too large for a shift of 0. For the generator (host side;
    /// uses `f64`).
    pub fn from_real(m: f64, b: f64, x_zero: i32) -> Option<Affine> {
        if !(m.is_finite() && b.is_finite()) || m.abs() >= 1073741824.0 || b.abs() >= 2.0e17 {
            return None;
        }
        // 2^shift * |m| < 2^30 and 2^shift * (|b| + 256 |m|) < 2^58.
        let limit = |v: f64, bits: i32| {
            if v == 0.0 { 62 } else { bits - 1 - libm::ceil(libm::log2(v)) as i32 }
        };
        let shift = limit(m.abs(), 31).min(limit(b.abs() + 256.0 * m.abs(), 59)).clamp(0, 62);
        let f = libm::exp2(f64::from(shift));
        let mult = libm::round(m * f) as i64;
        let half = if shift > 0 { 1i64 << (shift - 1) } else { 0 };
        let bias = libm::round(b * f) as i64 - i64::from(x_zero) * mult + half;
        let a = Affine { mult: i32::try_from(mult).ok()?, bias, shift: shift as u32 };
        a.is_valid().then_some(a)
    }

    /// Whether `shift <= 62` and `|bias| < 2^60`: then `x * mult + bias`
    /// cannot overflow for `|x| < 2^8`.
    pub const fn is_valid(self) -> bool {
        self.shift <= 62 && self.bias > -(1 << 60) && self.bias < 1 << 60
    }

    /// `(x * mult + bias) >> shift`, saturated to `i32`.
    #[inline(always)]
    pub fn apply(self, x: i32) -> i32 {
        let v = (i64::from(x) * i64::from(self.mult) + self.bias) >> (self.shift & 63);
        v.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32
    }
}

/// A per-channel affine map of quantized values: `y = clamp(zero +
/// ch[c].apply(x), min, max)` for `x` in channel `c` of `[outer, channels,
/// inner]` (an inference `BatchNormalization` between a dequantization and
/// a quantization). `y` may be `x`'s own buffer: see [`qaffine_in_place`].
pub fn qaffine<T: Q8>(
    x: &[T],
    channels: usize,
    inner: usize,
    ch: &[Affine],
    y: &mut [T],
    out: &QOut,
) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    y.copy_from_slice(x);
    qaffine_in_place(y, channels, inner, ch, out)
}

/// [`qaffine`] over `y` in place.
pub fn qaffine_in_place<T: Q8>(
    y: &mut [T],
    channels: usize,
    inner: usize,
    ch: &[Affine],
    out: &QOut,
) -> Result {
    let plane = channels.checked_mul(inner).ok_or(Error::ShapeMismatch)?;
    ensure(ch.len() == channels && plane > 0, Error::ShapeMismatch)?;
    ensure(y.len().is_multiple_of(plane), Error::ShapeMismatch)?;
    ensure(ch.iter().all(|a| a.is_valid()), Error::InvalidParams)?;
    check_out::<T>(out.zero, out.min, out.max)?;
    for image in y.chunks_exact_mut(plane) {
        for (run, a) in image.chunks_exact_mut(inner).zip(ch) {
            for v in run {
                *v = T::saturate(out.zero.saturating_add(a.apply(v.get())).clamp(out.min, out.max));
            }
        }
    }
    Ok(())
}

/// `clamp(zero + round(r * mult / (count * 2^t)), min, max)`, one rounding
/// with ties up: the average of `count` differences summing to `r`, scaled
/// by `s`.
#[inline]
pub(crate) fn average(r: i64, count: usize, s: Scale, out: &QOut) -> i32 {
    let num = i128::from(r) * i128::from(s.mult);
    let den = (count.max(1) as i128) << s.total_shift();
    let q = (2 * num + den).div_euclid(2 * den);
    let v = q.clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32;
    out.zero.saturating_add(v).clamp(out.min, out.max)
}

/// The parameters of a [`qavgpool`].
#[derive(Clone, Copy, Debug)]
pub struct QPool<'a> {
    /// `N * C`, the planes.
    pub planes: usize,
    /// The window (1-d or 2-d; no dilation beyond 1 needed, any allowed).
    pub window: crate::conv::Window<'a>,
    /// Whether padded positions count (as `x_zero`) in the divisor.
    pub count_include_pad: bool,
    /// The input zero point.
    pub x_zero: i32,
    /// `s_in / s_out`.
    pub scale: Scale,
}

/// Quantized average pooling, NCHW: each output is `clamp(zero +
/// round(scale * sum(x - x_zero) / count), min, max)` over the window's
/// taps inside the input, with `count` the taps inside (or all of them,
/// padding included, with `count_include_pad`); one rounding, ties up
/// (see `average`). Windows past the end padding (`ceil_mode`) count only
/// the taps within the padded input, as ONNX does.
pub fn qavgpool<T: Q8>(p: &QPool<'_>, x: &[T], y: &mut [T], out: &QOut) -> Result {
    p.window.check(true)?;
    ensure(p.scale.is_valid(), Error::InvalidParams)?;
    ensure((T::MIN..=T::MAX).contains(&p.x_zero), Error::InvalidParams)?;
    check_out::<T>(out.zero, out.min, out.max)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    ensure(x.len() == p.planes.checked_mul(in_size).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(
        y.len() == p.planes.checked_mul(out_size).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    q8::elementwise::avgpool(p, x, y, out);
    Ok(())
}

/// Quantized global average pooling: `x` is `[planes, size]`, `y`
/// `[planes]`, each `clamp(zero + round(scale * sum(x - x_zero) / size),
/// min, max)` (one rounding, ties up).
pub fn qglobal_avgpool<T: Q8>(
    x: &[T],
    planes: usize,
    x_zero: i32,
    scale: Scale,
    y: &mut [T],
    out: &QOut,
) -> Result {
    ensure(y.len() == planes, Error::ShapeMismatch)?;
    ensure(planes > 0 || x.is_empty(), Error::ShapeMismatch)?;
    ensure(planes == 0 || x.len().is_multiple_of(planes), Error::ShapeMismatch)?;
    ensure(scale.is_valid(), Error::InvalidParams)?;
    ensure((T::MIN..=T::MAX).contains(&x_zero), Error::InvalidParams)?;
    check_out::<T>(out.zero, out.min, out.max)?;
    if planes == 0 {
        return Ok(());
    }
    let size = x.len() / planes;
    for (y, plane) in y.iter_mut().zip(x.chunks_exact(size.max(1))) {
        let r = q8::elementwise::plane_sum(plane) - i64::from(x_zero) * size as i64;
        *y = T::saturate(average(r, size, scale, out));
    }
    if size == 0 {
        y.iter_mut().for_each(|v| *v = T::saturate(out.zero.clamp(out.min, out.max)));
    }
    Ok(())
}

/// `y[i] = table[x[i] as u8]`: any unary function of a quantized value
/// (Sigmoid, Tanh, HardSwish, LeakyRelu...), tabulated by the generator
/// over the 256 inputs, indexed by the input's byte.
pub fn qlookup<T: Q8>(x: &[T], table: &[T; 256], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (y, x) in y.iter_mut().zip(x) {
        *y = table[usize::from(x.bits())];
    }
    Ok(())
}

/// [`qlookup`] in place.
pub fn qlookup_in_place<T: Q8>(y: &mut [T], table: &[T; 256]) {
    for v in y.iter_mut() {
        *v = table[usize::from(v.bits())];
    }
}

/// The exponentials [`qsoftmax`] reads for input scale `x_scale` and rows
/// of `axis_len` values, as onnxruntime's QLinearSoftmax builds them (for
/// the generator): entry `k` is `exp((k - 255 + shift) * x_scale)` in
/// `f64`, rounded to `f32`, where `k - 255` is an input's difference from
/// its row's largest and `shift = max(0, ln(f32::MAX / axis_len) - 5) /
/// x_scale` raises every entry as far as a row's sum allows, for precision.
pub fn softmax_table(x_scale: f32, axis_len: usize) -> [f32; 256] {
    // onnxruntime divides in f32 and takes the logarithm in f64.
    let headroom = libm::log(f64::from(f32::MAX / axis_len.max(1) as f32));
    let shift = (headroom - 5.0).max(0.0) / f64::from(x_scale);
    let mut table = [0f32; 256];
    for (k, t) in table.iter_mut().enumerate() {
        *t = libm::exp((k as f64 - 255.0 + shift) * f64::from(x_scale)) as f32;
    }
    table
}

/// The output multiplier of a [`qsoftmax`] for output scale `y_scale`:
/// `floor(1 / y_scale)` in `f32`, as onnxruntime's QLinearSoftmax takes it
/// (so the usual `y_scale = 1/255` gives 254, as `1 / f32(1/255)` is just
/// below 255).
pub fn softmax_multiplier(y_scale: f32) -> f32 {
    libm::floorf(1.0 / y_scale)
}

/// The layout of a [`qsoftmax`]: `outer * axis * inner` values, normalized
/// along the middle axis.
#[derive(Clone, Copy, Debug)]
pub struct QSoftmax {
    /// The product of the dimensions before the axis.
    pub outer: usize,
    /// The length of the axis normalized over.
    pub axis: usize,
    /// The product of the dimensions after it.
    pub inner: usize,
    /// [`softmax_multiplier`] of the output scale.
    pub multiplier: f32,
}

/// Quantized softmax as onnxruntime's QLinearSoftmax computes it (it runs
/// the QDQ form `DequantizeLinear -> Softmax -> QuantizeLinear` with that
/// kernel too), for its results: along each row, with `m` the row's
/// largest input, `e(x) = table[255 + x - m]` ([`softmax_table`]), `sum`
/// the `f32` sum of the row's `e` in order, each output is
/// `clamp(zero + rint(e(x) * multiplier / sum), min, max)`, `f32` products
/// and quotient, ties to even. The float steps are the same on every
/// target (no fused multiply-add), so the bits are too.
pub fn qsoftmax<T: Q8>(
    x: &[T],
    p: &QSoftmax,
    table: &[f32; 256],
    y: &mut [T],
    out: &QOut,
) -> Result {
    let len =
        p.outer.checked_mul(p.axis).and_then(|n| n.checked_mul(p.inner)).ok_or(Error::Overflow)?;
    ensure(x.len() == len && y.len() == len, Error::ShapeMismatch)?;
    check_out::<T>(out.zero, out.min, out.max)?;
    let (axis, inner) = (p.axis, p.inner);
    if len == 0 {
        return Ok(());
    }
    let e = |v: T, m: i32| table[(255 + v.get() - m) as usize];
    for o in 0..p.outer {
        let base = o * axis * inner;
        for i in 0..inner {
            let at = |j: usize| base + j * inner + i;
            let m = (0..axis).map(|j| x[at(j)].get()).max().unwrap_or(0);
            let mut sum = 0f32;
            for j in 0..axis {
                sum += e(x[at(j)], m);
            }
            for j in 0..axis {
                let q = if sum > 0.0 {
                    let r = libm::rintf(e(x[at(j)], m) * p.multiplier / sum);
                    // `r` is at most `multiplier` (each `e` is at most `sum`).
                    r.clamp(i32::MIN as f32, i32::MAX as f32) as i32
                } else {
                    0
                };
                y[at(j)] = T::saturate(out.zero.saturating_add(q).clamp(out.min, out.max));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn high_scale_is_apply_where_it_exists() {
        let accs = [0, 1, -1, 2, -2, 3, 1 << 20, -(1 << 20), 12_345_678, i32::MAX, i32::MIN];
        let mut x = 0x9e37_79b9u32;
        for shift in -29..=31 {
            for mult in [1 << 30, (1 << 30) + 1, 0x5555_5555, i32::MAX] {
                let s = Scale { mult, shift };
                let Some(h) = HighScale::of(s) else {
                    assert!(s.total_shift() < 31, "shift {shift}");
                    continue;
                };
                for i in 0..200 {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let acc = accs.get(i).copied().unwrap_or(x as i32 >> (x % 24));
                    assert_eq!(h.apply(acc), s.apply(acc), "{s:?} {acc}");
                }
            }
        }
        // Ties round up, as `apply`'s.
        let half = Scale { mult: 1 << 30, shift: 1 }; // 2^30 / 2^32 = 1/4
        let h = HighScale::of(half).unwrap();
        assert_eq!((h.apply(2), h.apply(-2), h.apply(6)), (1, 0, 2));
    }

    #[test]
    fn qsoftmax_takes_floor_of_one_over_the_output_scale() {
        // f32(1/255) is just above 1/255: onnxruntime's multiplier is 254.
        let ys = 1.0f32 / 255.0;
        assert_eq!(softmax_multiplier(ys), 254.0);
        assert_eq!(softmax_multiplier(1.0 / 256.0), 256.0);
        // Rows (200, 0) and (10, 10) along the middle axis of [1, 2, 2], at
        // input scale 0.1: p = (1 - e^-20, e^-20) and (1/2, 1/2).
        let x: [u8; 4] = [200, 10, 0, 10];
        let p = QSoftmax { outer: 1, axis: 2, inner: 2, multiplier: softmax_multiplier(ys) };
        let table = softmax_table(0.1, 2);
        let mut y = [0u8; 4];
        qsoftmax(&x, &p, &table, &mut y, &QOut { zero: 0, min: 0, max: 255 }).unwrap();
        assert_eq!(y, [254, 127, 0, 127]);
        // int8, zero point -128: the same values shifted.
        let x: [i8; 4] = [72, -118, -128, -118];
        let mut y = [0i8; 4];
        qsoftmax(&x, &p, &table, &mut y, &QOut { zero: -128, min: -128, max: 127 }).unwrap();
        assert_eq!(y, [126, -1, -128, -1]);
    }

    #[test]
    fn qsoftmax_rows_follow_the_exponentials() {
        // Against softmax in f64, rounded: inputs spread so that no output
        // lies within 0.01 of a rounding boundary.
        let x: [u8; 6] = [100, 90, 97, 60, 100, 99];
        let xs = 0.05f32;
        let p = QSoftmax { outer: 1, axis: 6, inner: 1, multiplier: 200.0 };
        let mut y = [0u8; 6];
        let out = QOut { zero: 3, min: 0, max: 255 };
        qsoftmax(&x, &p, &softmax_table(xs, 6), &mut y, &out).unwrap();
        let e: Vec<f64> =
            x.iter().map(|&v| (f64::from(xs) * (f64::from(v) - 100.0)).exp()).collect();
        let sum: f64 = e.iter().sum();
        for (got, e) in y.iter().zip(&e) {
            let want = e / sum * 200.0;
            assert!((want.fract() - 0.5).abs() > 0.01, "{want} is near a tie");
            assert_eq!(i32::from(*got), want.round() as i32 + 3, "{y:?}");
        }
    }

    #[test]
    fn qsoftmax_checks_its_buffers() {
        let p = QSoftmax { outer: 2, axis: 2, inner: 1, multiplier: 255.0 };
        let table = softmax_table(0.1, 2);
        let out = QOut { zero: 0, min: 0, max: 255 };
        let mut y = [0u8; 3];
        assert_eq!(qsoftmax(&[0u8; 4], &p, &table, &mut y, &out), Err(Error::ShapeMismatch));
    }
}
