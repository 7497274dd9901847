//! Integer kernels for quantized models: int8 or uint8 activations, int8
//! weights of zero point 0, int32 sums, fixed-point requantization.
//!
//! A real value `r` is held as `q` with `r = scale * (q - zero)`. A product
//! of quantized operands sums `(x - x_zero) * w` in `i32` (plus an int32
//! bias of scale `x_scale * w_scale`), and the sum `acc` becomes an output
//! `y = clamp(y_zero + round(acc * x_scale * w_scale / y_scale), min, max)`
//! where the multiplier is a [`Scale`] fixed at generation time: the
//! arithmetic after that is integer only, so every target computes the
//! same bytes. An activation folded into the quantized output (Relu, Clip)
//! narrows `min..=max`.
//!
//! The multiplier is applied as `(acc * mult + 2^(t-1)) >> t` in 64 bits
//! ([`Scale::apply`]): one rounding, ties up. onnxruntime computes the
//! same product in f32 and rounds ties to even, so the two differ only
//! where f32 rounding or a tie lands on the other side: at most one step.

use crate::conv::{Conv, Window};
use crate::pool::Pool;
use crate::shape::numel;
use crate::{Error, Result, ensure};

/// A fixed-point multiplier: `mult * 2^-(31 + shift)`, `mult` in
/// `[2^30, 2^31)`, `31 + shift` in `1..=62`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scale {
    pub mult: i32,
    pub shift: i32,
}

impl Scale {
    /// The multiplier nearest `real` (finite, positive); `None` when it is
    /// too small or too large to represent (outside about `2^-31..2^30`).
    /// For generation time (it uses f64).
    pub fn from_real(real: f64) -> Option<Scale> {
        if !(real.is_finite() && real > 0.0) {
            return None;
        }
        // real = m * 2^-k with m in [0.5, 1).
        let (mut m, mut k) = (real, 0i32);
        while m >= 1.0 {
            m /= 2.0;
            k -= 1;
        }
        while m < 0.5 {
            m *= 2.0;
            k += 1;
            if k > 64 {
                return None;
            }
        }
        // Rounded to nearest (m is positive: the cast truncates x + 0.5).
        let mut mult = (m * 2147483648.0 + 0.5) as i64;
        if mult == 1 << 31 {
            mult = 1 << 30;
            k -= 1;
        }
        let t = 31 + k;
        (1..=62).contains(&t).then_some(Scale { mult: mult as i32, shift: k })
    }

    /// `round(acc * mult / 2^(31 + shift))`, ties rounded up.
    #[inline(always)]
    pub fn apply(self, acc: i32) -> i32 {
        debug_assert!((1..=62).contains(&(31 + self.shift)), "scale shift out of range");
        let t = (31 + self.shift) as u32;
        let p = i64::from(acc) * i64::from(self.mult) + (1i64 << (t - 1));
        (p >> t) as i32
    }

    /// [`Scale::apply`] on a 64-bit sum (the pools' sums over a window, the
    /// adds' pre-shifted terms).
    #[inline(always)]
    fn apply_wide(self, acc: i64) -> i64 {
        let t = (31 + self.shift) as u32;
        let p = i128::from(acc) * i128::from(self.mult) + (1i128 << (t - 1));
        (p >> t) as i64
    }
}

/// How a sum becomes an output value: `clamp(zero + scale_c.apply(acc),
/// min, max)`, with one scale per output channel (`scales.len()` equals
/// the channels) or one for all.
#[derive(Clone, Copy, Debug)]
pub struct Requant<'a> {
    pub scales: &'a [Scale],
    pub zero: i32,
    pub min: i32,
    pub max: i32,
}

impl Requant<'_> {
    /// Checks the scales against `channels` and the range against `Y`.
    fn check<Y: Q8>(&self, channels: usize) -> Result {
        ensure(self.scales.len() == 1 || self.scales.len() == channels, Error::ShapeMismatch)?;
        ensure(
            Y::MIN <= self.min && self.min <= self.max && self.max <= Y::MAX,
            Error::InvalidParams,
        )?;
        ensure(self.scales.iter().all(|s| (1..=62).contains(&(31 + s.shift))), Error::InvalidParams)
    }

    /// The scale of channel `c`.
    #[inline(always)]
    fn scale(&self, c: usize) -> Scale {
        if self.scales.len() == 1 { self.scales[0] } else { self.scales[c] }
    }

    /// The output value of sum `acc` in channel `c`.
    #[inline(always)]
    fn out<Y: Q8>(&self, c: usize, acc: i32) -> Y {
        Y::narrow((self.zero + self.scale(c).apply(acc)).clamp(self.min, self.max))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for u8 {}
}

/// The 8-bit activation types, `i8` and `u8`.
pub trait Q8: Copy + Default + sealed::Sealed {
    const MIN: i32;
    const MAX: i32;
    /// The value as an integer.
    fn wide(self) -> i32;
    /// `v`, which the caller has clamped to `MIN..=MAX`.
    fn narrow(v: i32) -> Self;
    /// The byte of the value, as a table index.
    fn byte(self) -> usize;
}

impl Q8 for i8 {
    const MIN: i32 = -128;
    const MAX: i32 = 127;
    #[inline(always)]
    fn wide(self) -> i32 {
        i32::from(self)
    }
    #[inline(always)]
    fn narrow(v: i32) -> i8 {
        v as i8
    }
    #[inline(always)]
    fn byte(self) -> usize {
        usize::from(self as u8)
    }
}

impl Q8 for u8 {
    const MIN: i32 = 0;
    const MAX: i32 = 255;
    #[inline(always)]
    fn wide(self) -> i32 {
        i32::from(self)
    }
    #[inline(always)]
    fn narrow(v: i32) -> u8 {
        v as u8
    }
    #[inline(always)]
    fn byte(self) -> usize {
        usize::from(self)
    }
}

/// A product `y[m, n] = a[m, k] x w[k, n]` of quantized activations by
/// constant int8 weights.
#[derive(Clone, Copy, Debug)]
pub struct QMatMul {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// `a`'s zero point.
    pub a_zero: i32,
}

/// Where a product's int8 weights are.
#[derive(Clone, Copy, Debug)]
pub enum QWeights<'a> {
    /// `[k, n]`, or `[n, k]` when `trans`.
    Dense { w: &'a [i8], trans: bool },
    /// Laid out by [`pack_weights`] when the code was generated: each
    /// output column's `k` weights together.
    Packed(&'a [i8]),
}

/// The length of [`pack_weights`]' output for `k x n` weights.
pub const fn packed_len(k: usize, n: usize) -> usize {
    k * n
}

/// Lays out `w` (`[k, n]`, or `[n, k]` when `trans`) for [`qmatmul`]:
/// column by column (`[n, k]`), so each output's dot product reads its
/// weights in order.
pub fn pack_weights(w: &[i8], k: usize, n: usize, trans: bool, out: &mut [i8]) -> Result {
    let len = k.checked_mul(n).ok_or(Error::Overflow)?;
    ensure(w.len() == len && out.len() == packed_len(k, n), Error::ShapeMismatch)?;
    for j in 0..n {
        for p in 0..k {
            out[j * k + p] = if trans { w[j * k + p] } else { w[p * n + j] };
        }
    }
    Ok(())
}

/// `y = requant(a x w + bias)`, per output column (`rq` has one scale or
/// `n`); `a` is `[m, k]`, `y` `[m, n]`, `bias` `n` values.
pub fn qmatmul<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: &[A],
    w: QWeights<'_>,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let wlen = k.checked_mul(n).ok_or(Error::Overflow)?;
    ensure(a.len() == m.checked_mul(k).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y.len() == m.checked_mul(n).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == n), Error::ShapeMismatch)?;
    rq.check::<Y>(n)?;
    // Column j's weights start at col(j) and step by `stride`.
    let (wd, col, stride): (&[i8], usize, usize) = match w {
        QWeights::Dense { w, trans: false } => (w, 1, n),
        QWeights::Dense { w, trans: true } | QWeights::Packed(w) => (w, k, 1),
    };
    ensure(wd.len() == wlen, Error::ShapeMismatch)?;
    for i in 0..m {
        let row = &a[i * k..][..k];
        for j in 0..n {
            let mut acc = bias.map_or(0, |b| b[j]);
            let base = j * col;
            for (t, &x) in row.iter().enumerate() {
                acc = acc.wrapping_add((x.wide() - p.a_zero) * i32::from(wd[base + t * stride]));
            }
            y[i * n + j] = rq.out(j, acc);
        }
    }
    Ok(())
}

/// Where a convolution's int8 weights (`[M, C / group, kh, kw]`) are.
#[derive(Clone, Copy, Debug)]
pub enum QConvWeights<'a> {
    /// As the model gives them.
    Dense(&'a [i8]),
    /// Laid out by [`pack_conv_weights`] (the same order today).
    Packed(&'a [i8]),
}

/// The length of [`pack_conv_weights`]' output for `m` filters of `per`
/// weights.
pub const fn packed_conv_len(m: usize, per: usize) -> usize {
    m * per
}

/// Lays out `m` filters of `per` weights for [`qconv`].
pub fn pack_conv_weights(w: &[i8], m: usize, per: usize, out: &mut [i8]) -> Result {
    ensure(w.len() == m.checked_mul(per).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(out.len() == packed_conv_len(m, per), Error::ShapeMismatch)?;
    out.copy_from_slice(w);
    Ok(())
}

/// The `i32` sums [`qconv`] keeps in its scratch: one output plane.
pub fn qconv_scratch_len(p: &Conv<'_>) -> usize {
    p.window.out_dims.iter().product()
}

/// The 2-D geometry of a convolution window.
struct Geom {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    pad: [usize; 2],
}

impl Geom {
    fn of(w: &Window<'_>) -> Result<Geom> {
        w.check(false)?;
        ensure(w.in_dims.len() == 2, Error::InvalidParams)?;
        Ok(Geom {
            h: w.in_dims[0],
            w: w.in_dims[1],
            oh: w.out_dims[0],
            ow: w.out_dims[1],
            k: [w.kernel[0], w.kernel[1]],
            s: [w.strides[0], w.strides[1]],
            d: [w.dilations[0], w.dilations[1]],
            pad: [w.pads_begin[0], w.pads_begin[1]],
        })
    }

    /// The output range `lo..hi` along axis `a` whose tap `t` reads inside
    /// the input, and the input index of output `lo`'s tap.
    fn inside(&self, a: usize, t: usize) -> (usize, usize) {
        let (n, o) = if a == 0 { (self.h, self.oh) } else { (self.w, self.ow) };
        let off = t * self.d[a];
        // in = out * s + off - pad must lie in 0..n.
        let lo = self.pad[a].saturating_sub(off).div_ceil(self.s[a]);
        let hi = if n + self.pad[a] > off {
            ((n + self.pad[a] - off - 1) / self.s[a] + 1).min(o)
        } else {
            0
        };
        (lo, hi.max(lo))
    }
}

/// A convolution of quantized `x` (`[N, C, H, W]`, zero point `x_zero`) by
/// int8 weights, plus `bias` (`M` values), requantized per output channel:
/// `y` is `[N, M, OH, OW]`. Padding reads as `x_zero` (a real zero). Sums
/// one output plane at a time in `scratch` ([`qconv_scratch_len`]).
#[allow(clippy::too_many_arguments)]
pub fn qconv<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    x: &[A],
    x_zero: i32,
    w: QConvWeights<'_>,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
    scratch: &mut [i32],
) -> Result {
    let g = Geom::of(&p.window)?;
    let (n, c, m, groups) = (p.batch, p.in_channels, p.out_channels, p.groups);
    ensure(groups > 0 && c % groups == 0 && m % groups == 0, Error::InvalidParams)?;
    let (cg, mg) = (c / groups, m / groups);
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    let taps = g.k[0] * g.k[1];
    let per = cg * taps;
    let w = match w {
        QConvWeights::Dense(w) | QConvWeights::Packed(w) => w,
    };
    ensure(w.len() == m.checked_mul(per).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(x.len() == numel(&[n, c, plane_in])?, Error::ShapeMismatch)?;
    ensure(y.len() == numel(&[n, m, plane_out])?, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == m), Error::ShapeMismatch)?;
    ensure(scratch.len() >= plane_out, Error::ShapeMismatch)?;
    rq.check::<Y>(m)?;
    let acc = &mut scratch[..plane_out];
    for b in 0..n {
        for oc in 0..m {
            let group = oc / mg;
            acc.fill(bias.map_or(0, |bias| bias[oc]));
            for ci in 0..cg {
                let xc = &x[(b * c + group * cg + ci) * plane_in..][..plane_in];
                for ky in 0..g.k[0] {
                    let (y0, y1) = g.inside(0, ky);
                    for kx in 0..g.k[1] {
                        let wt = i32::from(w[oc * per + ci * taps + ky * g.k[1] + kx]);
                        if wt == 0 {
                            continue;
                        }
                        let (x0, x1) = g.inside(1, kx);
                        if x0 == x1 {
                            continue;
                        }
                        let ix0 = x0 * g.s[1] + kx * g.d[1] - g.pad[1];
                        for oy in y0..y1 {
                            let iy = oy * g.s[0] + ky * g.d[0] - g.pad[0];
                            let row = xc[iy * g.w + ix0..(iy + 1) * g.w].iter().step_by(g.s[1]);
                            let out = &mut acc[oy * g.ow + x0..oy * g.ow + x1];
                            for (o, v) in out.iter_mut().zip(row) {
                                *o = o.wrapping_add(wt * (v.wide() - x_zero));
                            }
                        }
                    }
                }
            }
            let yo = &mut y[(b * m + oc) * plane_out..][..plane_out];
            for (v, &s) in yo.iter_mut().zip(acc.iter()) {
                *v = rq.out(oc, s);
            }
        }
    }
    Ok(())
}

/// `y[i] = table[x[i]]`, indexed by `x`'s byte (see [`Q8::byte`]): an
/// element-wise function tabulated at generation time.
pub fn qlookup<T: Q8>(x: &[T], table: &[T], y: &mut [T]) -> Result {
    ensure(table.len() == 256 && x.len() == y.len(), Error::ShapeMismatch)?;
    for (y, x) in y.iter_mut().zip(x) {
        *y = table[x.byte()];
    }
    Ok(())
}

/// The constants of [`qadd`]: each input's value is shifted left by
/// [`QAdd::SHIFT`] bits and scaled to a common unit (twice the larger
/// input scale), the two are added, and the sum scaled to the output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QAdd {
    pub a_zero: i32,
    pub a_scale: Scale,
    pub b_zero: i32,
    pub b_scale: Scale,
    pub out_scale: Scale,
    pub zero: i32,
    pub min: i32,
    pub max: i32,
}

impl QAdd {
    /// Left shift of the inputs' differences before scaling, which keeps
    /// the scaled terms exact to 2^-20 of an input step.
    pub const SHIFT: u32 = 20;

    /// The constants for `a` (scale, zero), `b` and the output, the output
    /// clamped to `range`; `None` when a multiplier does not fit a
    /// [`Scale`]. For generation time.
    pub fn new(a: (f64, i32), b: (f64, i32), out: (f64, i32), range: (i32, i32)) -> Option<QAdd> {
        let unit = 2.0 * a.0.max(b.0);
        Some(QAdd {
            a_zero: a.1,
            a_scale: Scale::from_real(a.0 / unit)?,
            b_zero: b.1,
            b_scale: Scale::from_real(b.0 / unit)?,
            out_scale: Scale::from_real(unit / (out.0 * f64::from(1u32 << Self::SHIFT)))?,
            zero: out.1,
            min: range.0,
            max: range.1,
        })
    }
}

/// The quantized sum of `a` and `b` (one shape), see [`QAdd`].
pub fn qadd<T: Q8>(p: &QAdd, a: &[T], b: &[T], y: &mut [T]) -> Result {
    ensure(a.len() == y.len() && b.len() == y.len(), Error::ShapeMismatch)?;
    ensure(T::MIN <= p.min && p.min <= p.max && p.max <= T::MAX, Error::InvalidParams)?;
    for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
        let ta = p.a_scale.apply_wide(i64::from(a.wide() - p.a_zero) << QAdd::SHIFT);
        let tb = p.b_scale.apply_wide(i64::from(b.wide() - p.b_zero) << QAdd::SHIFT);
        let v = i64::from(p.zero) + p.out_scale.apply_wide(ta + tb);
        *y = T::narrow(v.clamp(i64::from(p.min), i64::from(p.max)) as i32);
    }
    Ok(())
}

/// The quantized product of `a` and `b` (one shape):
/// `requant((a - a_zero) * (b - b_zero))` with one scale.
pub fn qmul<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    rq: &Requant<'_>,
    y: &mut [T],
) -> Result {
    ensure(a.len() == y.len() && b.len() == y.len(), Error::ShapeMismatch)?;
    rq.check::<T>(1)?;
    for ((y, a), b) in y.iter_mut().zip(a).zip(b) {
        *y = rq.out(0, (a.wide() - a_zero) * (b.wide() - b_zero));
    }
    Ok(())
}

/// The mean of `count` values summing to `sum` (input units), requantized:
/// `sum * scale / count` with one rounding at the end.
#[inline]
fn mean_out<T: Q8>(rq: &Requant<'_>, sum: i64, count: usize) -> T {
    let s = rq.scales[0];
    let t = (31 + s.shift) as u32;
    let num = i128::from(sum) * i128::from(s.mult);
    let den = (count.max(1) as i128) << t;
    // Round half up: floor((2 num + den) / (2 den)).
    let q = (2 * num + den).div_euclid(2 * den);
    let v = i128::from(rq.zero) + q;
    T::narrow(v.clamp(i128::from(rq.min), i128::from(rq.max)) as i32)
}

/// ONNX `AveragePool` on quantized values (zero point `x_zero`): the mean
/// of each window's `x - x_zero` (padding counted as zero when
/// `count_include_pad`, else left out), requantized with `rq`'s one scale
/// (`x_scale / y_scale`).
pub fn qavgpool<T: Q8>(
    p: &Pool<'_>,
    count_include_pad: bool,
    x: &[T],
    x_zero: i32,
    rq: &Requant<'_>,
    y: &mut [T],
) -> Result {
    let g = Geom::of(&p.window)?;
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    ensure(
        x.len() == p.planes.checked_mul(plane_in).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    ensure(
        y.len() == p.planes.checked_mul(plane_out).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    rq.check::<T>(1)?;
    for plane in 0..p.planes {
        let xp = &x[plane * plane_in..][..plane_in];
        for oy in 0..g.oh {
            for ox in 0..g.ow {
                let (mut sum, mut count) = (0i64, 0usize);
                for ky in 0..g.k[0] {
                    let iy = (oy * g.s[0] + ky * g.d[0]).checked_sub(g.pad[0]).filter(|&v| v < g.h);
                    for kx in 0..g.k[1] {
                        let ix =
                            (ox * g.s[1] + kx * g.d[1]).checked_sub(g.pad[1]).filter(|&v| v < g.w);
                        match (iy, ix) {
                            (Some(iy), Some(ix)) => {
                                sum += i64::from(xp[iy * g.w + ix].wide() - x_zero);
                                count += 1;
                            }
                            _ if count_include_pad => count += 1,
                            _ => {}
                        }
                    }
                }
                y[plane * plane_out + oy * g.ow + ox] = mean_out(rq, sum, count);
            }
        }
    }
    Ok(())
}

/// ONNX `GlobalAveragePool` on quantized values: the mean of each of
/// `planes` planes of `size` values, requantized as in [`qavgpool`].
pub fn qglobal_avgpool<T: Q8>(
    planes: usize,
    size: usize,
    x: &[T],
    x_zero: i32,
    rq: &Requant<'_>,
    y: &mut [T],
) -> Result {
    ensure(x.len() == planes.checked_mul(size).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y.len() == planes, Error::ShapeMismatch)?;
    rq.check::<T>(1)?;
    for (plane, y) in y.iter_mut().enumerate() {
        let sum: i64 = x[plane * size..][..size].iter().map(|v| i64::from(v.wide() - x_zero)).sum();
        *y = mean_out(rq, sum, size);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::Window;

    /// Deterministic values in `lo..=hi`.
    fn spread(n: usize, lo: i32, hi: i32, seed: usize) -> Vec<i32> {
        let span = (hi - lo + 1) as usize;
        (0..n).map(|i| lo + ((i * 7919 + seed * 104_729) % span) as i32).collect()
    }

    #[test]
    fn scales_round_like_exact_arithmetic() {
        for &real in &[1.0, 0.5, 0.75, 1e-3, 3.7e-5, 0.999_999_9, 1.5, 123.456, 2.0f64.powi(-30)] {
            let s = Scale::from_real(real).expect("representable");
            assert!((1 << 30..=i32::MAX).contains(&s.mult), "{real}: {s:?}");
            let back = f64::from(s.mult) * 2f64.powi(-(31 + s.shift));
            assert!((back - real).abs() <= real * 2f64.powi(-30), "{real}: {back}");
            for acc in [-1_000_000, -12345, -3, -1, 0, 1, 2, 77, 99_999, 5_000_000] {
                let exact = f64::from(acc) * back;
                let got = s.apply(acc);
                // Round half up of the exact product (no product here is a tie
                // the f64 cannot hold).
                assert_eq!(got, (exact + 0.5).floor() as i32, "{real} * {acc}");
            }
        }
        assert_eq!(Scale::from_real(0.0), None);
        assert_eq!(Scale::from_real(f64::NAN), None);
        assert_eq!(Scale::from_real(1e12), None);
        assert_eq!(Scale::from_real(1e-20), None);
        // Ties go up: 0.5 * 3 = 1.5 -> 2, 0.5 * -3 = -1.5 -> -1.
        let half = Scale::from_real(0.5).unwrap();
        assert_eq!((half.apply(3), half.apply(-3)), (2, -1));
    }

    /// The convolution by definition: every tap, padding as the zero point.
    #[allow(clippy::too_many_arguments)]
    fn conv_reference(
        p: &Conv<'_>,
        x: &[i32],
        zx: i32,
        w: &[i32],
        bias: &[i32],
        scales: &[Scale],
        zero: i32,
        range: (i32, i32),
    ) -> Vec<i32> {
        let wdw = &p.window;
        let (h, wd, oh, ow) = (wdw.in_dims[0], wdw.in_dims[1], wdw.out_dims[0], wdw.out_dims[1]);
        let (cg, mg) = (p.in_channels / p.groups, p.out_channels / p.groups);
        let mut y = Vec::new();
        for b in 0..p.batch {
            for m in 0..p.out_channels {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = bias[m];
                        for ci in 0..cg {
                            let c = (m / mg) * cg + ci;
                            for ky in 0..wdw.kernel[0] {
                                for kx in 0..wdw.kernel[1] {
                                    let iy = (oy * wdw.strides[0] + ky * wdw.dilations[0]) as isize
                                        - wdw.pads_begin[0] as isize;
                                    let ix = (ox * wdw.strides[1] + kx * wdw.dilations[1]) as isize
                                        - wdw.pads_begin[1] as isize;
                                    let inside = (0..h as isize).contains(&iy)
                                        && (0..wd as isize).contains(&ix);
                                    let xv = if inside {
                                        x[((b * p.in_channels + c) * h + iy as usize) * wd
                                            + ix as usize]
                                    } else {
                                        zx
                                    };
                                    let wv = w
                                        [((m * cg + ci) * wdw.kernel[0] + ky) * wdw.kernel[1] + kx];
                                    acc += (xv - zx) * wv;
                                }
                            }
                        }
                        let s = if scales.len() == 1 { scales[0] } else { scales[m] };
                        y.push((zero + s.apply(acc)).clamp(range.0, range.1));
                    }
                }
            }
        }
        y
    }

    /// (batch, c, m, groups, in, kernel, stride, dilation, pads begin, pads end)
    type Case = (
        usize,
        usize,
        usize,
        usize,
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
        [usize; 2],
    );

    #[test]
    fn convolutions_match_the_definition() {
        let cases: &[Case] = &[
            (1, 3, 4, 1, [5, 6], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]),
            (2, 4, 6, 2, [7, 5], [3, 2], [2, 1], [1, 2], [1, 0], [1, 1]),
            (1, 8, 8, 8, [9, 9], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]),
            (1, 5, 3, 1, [4, 4], [1, 1], [1, 1], [1, 1], [0, 0], [0, 0]),
            (1, 1, 2, 1, [10, 4], [10, 4], [2, 2], [1, 1], [4, 1], [5, 1]),
        ];
        for (case, &(n, c, m, groups, hw, k, s, d, pb, pe)) in cases.iter().enumerate() {
            let out = |i: usize| (hw[i] + pb[i] + pe[i] - (d[i] * (k[i] - 1) + 1)) / s[i] + 1;
            let od = [out(0), out(1)];
            let window = Window {
                in_dims: &hw,
                out_dims: &od,
                kernel: &k,
                strides: &s,
                dilations: &d,
                pads_begin: &pb,
                pads_end: &pe,
            };
            let p = Conv { batch: n, in_channels: c, out_channels: m, groups, window };
            let x = spread(n * c * hw[0] * hw[1], 0, 255, case);
            let w = spread(m * (c / groups) * k[0] * k[1], -127, 127, case + 1);
            let bias = spread(m, -5000, 5000, case + 2);
            let scales: Vec<Scale> =
                (0..m).map(|i| Scale::from_real(0.002 + 0.0007 * i as f64).unwrap()).collect();
            let (zx, zero) = (131, 9);
            let want = conv_reference(&p, &x, zx, &w, &bias, &scales, zero, (9, 255));
            let xq: Vec<u8> = x.iter().map(|&v| v as u8).collect();
            let wq: Vec<i8> = w.iter().map(|&v| v as i8).collect();
            let mut y = vec![0u8; want.len()];
            let mut scratch = vec![0i32; qconv_scratch_len(&p)];
            let rq = Requant { scales: &scales, zero, min: 9, max: 255 };
            qconv(&p, &xq, zx, QConvWeights::Dense(&wq), Some(&bias), &rq, &mut y, &mut scratch)
                .unwrap();
            let got: Vec<i32> = y.iter().map(|&v| i32::from(v)).collect();
            assert_eq!(got, want, "case {case}");
            // Short buffers are refused.
            let short = qconv(
                &p,
                &xq[1..],
                zx,
                QConvWeights::Dense(&wq),
                Some(&bias),
                &rq,
                &mut y,
                &mut scratch,
            );
            assert_eq!(short, Err(Error::ShapeMismatch));
        }
    }

    #[test]
    fn products_match_the_definition_in_every_layout() {
        let (m, n, k) = (5, 7, 13);
        let a = spread(m * k, -128, 127, 1);
        let w = spread(k * n, -127, 127, 2);
        let bias = spread(n, -900, 900, 3);
        let scales: Vec<Scale> =
            (0..n).map(|j| Scale::from_real(0.01 + 0.003 * j as f64).unwrap()).collect();
        let (za, zero, range) = (-3, -7, (-128, 100));
        let want: Vec<i32> = (0..m * n)
            .map(|o| {
                let (i, j) = (o / n, o % n);
                let acc: i32 =
                    bias[j] + (0..k).map(|p| (a[i * k + p] - za) * w[p * n + j]).sum::<i32>();
                (zero + scales[j].apply(acc)).clamp(range.0, range.1)
            })
            .collect();
        let aq: Vec<i8> = a.iter().map(|&v| v as i8).collect();
        let wq: Vec<i8> = w.iter().map(|&v| v as i8).collect();
        let wt: Vec<i8> = (0..n * k).map(|o| wq[(o % k) * n + o / k]).collect();
        let mut packed = vec![0i8; packed_len(k, n)];
        pack_weights(&wq, k, n, false, &mut packed).unwrap();
        let p = QMatMul { m, n, k, a_zero: za };
        let rq = Requant { scales: &scales, zero, min: range.0, max: range.1 };
        for w in [
            QWeights::Dense { w: &wq, trans: false },
            QWeights::Dense { w: &wt, trans: true },
            QWeights::Packed(&packed),
        ] {
            let mut y = vec![0i8; m * n];
            qmatmul(&p, &aq, w, Some(&bias), &rq, &mut y).unwrap();
            assert_eq!(y.iter().map(|&v| i32::from(v)).collect::<Vec<_>>(), want, "{w:?}");
        }
    }

    #[test]
    fn adds_and_pools_agree_with_real_arithmetic_to_one_step() {
        let (sa, sb, sy) = (0.05, 0.02, 0.06);
        let p = QAdd::new((sa, 10), (sb, -20), (sy, 3), (-128, 127)).unwrap();
        let a: Vec<i8> = spread(300, -128, 127, 4).iter().map(|&v| v as i8).collect();
        let b: Vec<i8> = spread(300, -128, 127, 5).iter().map(|&v| v as i8).collect();
        let mut y = vec![0i8; 300];
        qadd(&p, &a, &b, &mut y).unwrap();
        for i in 0..300 {
            let real = sa * f64::from(i32::from(a[i]) - 10) + sb * f64::from(i32::from(b[i]) + 20);
            let want = (3.0 + (real / sy).round()).clamp(-128.0, 127.0);
            assert!((f64::from(y[i]) - want).abs() <= 1.0, "{i}: {} vs {want}", y[i]);
        }
        // A 2x2 average pool of a 3x3 plane with one pad at the end (counted
        // or not), against the real mean.
        let (hw, od, k, s, pb, pe) =
            ([3usize, 3], [2usize, 2], [2usize, 2], [2usize, 2], [0usize, 0], [1usize, 1]);
        let d = [1usize, 1];
        let window = Window {
            in_dims: &hw,
            out_dims: &od,
            kernel: &k,
            strides: &s,
            dilations: &d,
            pads_begin: &pb,
            pads_end: &pe,
        };
        let pool = Pool { planes: 2, window };
        let x: Vec<u8> = spread(18, 0, 255, 6).iter().map(|&v| v as u8).collect();
        let scale = Scale::from_real(0.1 / 0.07).unwrap();
        let rq = Requant { scales: &[scale], zero: 5, min: 0, max: 255 };
        for include in [false, true] {
            let mut y = vec![0u8; 8];
            qavgpool(&pool, include, &x, 100, &rq, &mut y).unwrap();
            for (o, &got) in y.iter().enumerate() {
                let (plane, oy, ox) = (o / 4, (o % 4) / 2, o % 2);
                let mut vals = Vec::new();
                let mut count = 0;
                for ky in 0..2 {
                    for kx in 0..2 {
                        let (iy, ix) = (oy * 2 + ky, ox * 2 + kx);
                        count += 1;
                        if iy < 3 && ix < 3 {
                            vals.push(f64::from(x[plane * 9 + iy * 3 + ix]) - 100.0);
                        } else if !include {
                            count -= 1;
                        }
                    }
                }
                let mean = vals.iter().sum::<f64>() / f64::from(count);
                let want = (5.0 + (mean * 0.1 / 0.07).round()).clamp(0.0, 255.0);
                assert!((f64::from(got) - want).abs() <= 1.0, "{include} {o}: {got} vs {want}");
            }
        }
        let mut g = vec![0u8; 2];
        qglobal_avgpool(2, 9, &x, 100, &rq, &mut g).unwrap();
        for (plane, &got) in g.iter().enumerate() {
            let mean = x[plane * 9..][..9].iter().map(|&v| f64::from(v) - 100.0).sum::<f64>() / 9.0;
            let want = (5.0 + (mean * 0.1 / 0.07).round()).clamp(0.0, 255.0);
            assert!((f64::from(got) - want).abs() <= 1.0, "{plane}: {got} vs {want}");
        }
    }

    #[test]
    fn lookups_index_by_byte() {
        let table: Vec<i8> = (0..=255u8).map(|b| (b as i8).wrapping_neg()).collect();
        let x = [-128i8, -1, 0, 1, 127];
        let mut y = [0i8; 5];
        qlookup(&x, &table, &mut y).unwrap();
        assert_eq!(y, [-128, 1, 0, -1, -127]);
        assert_eq!(qlookup(&x, &table[1..], &mut y), Err(Error::ShapeMismatch));
    }
}
