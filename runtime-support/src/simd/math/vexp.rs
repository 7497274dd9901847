//! Exp, sigmoid, SiLU and Gelu over slices in explicit AVX-512 and AVX2+FMA
//! code.
//!
//! The portable [`vmath`](crate::vmath) functions vectorise, but Rust never
//! contracts `a * b + c` into a fused multiply-add, so their exponential
//! costs a multiply and an add per polynomial step, and the 2^n scaling is
//! built from integer tricks. Here the exponential is one rounding, two
//! fused steps of range reduction, a degree-6 polynomial of fused steps and
//! (on AVX-512) one `vscalefps`: about half the instructions. SiLU is the
//! activation of EfficientNet-style networks, applied to every output of
//! most of their layers, and Softmax's exponentials are a transformer's
//! largest element-wise cost, so this is worth its own code.
//!
//! Accuracy: the polynomial's relative error is below 1e-8 on the reduced
//! range, so results are within a few units in the last place of the exact
//! functions (tests check 4 ulp, Gelu 5, or 1e-37 absolute near underflow), not bit
//! for bit equal to the portable path.
//!
//! Unsafe code: an [`Avx512`] or [`Avx2`] value proves the extension is
//! present (the `target_feature` loops take one); the loads and stores stay
//! within each row, checked against the slices first (whole vectors, the
//! row's tail through a stack buffer).

use crate::simd::isa::avx2::Avx2;
use crate::simd::isa::avx512::Avx512;
use crate::vmath::{GELU_CLAMP, GELU_K, GELU_P};
use core::arch::x86_64::*;

pub(crate) use crate::simd::math::VFunc;

/// `y[i] = f(x[i])` for `i < min(x.len(), y.len())`, or in place when `x`
/// is `None`, on the widest unit present; `false` (nothing done) without
/// AVX2+FMA, for the caller's portable loop.
#[inline]
pub(crate) fn apply(f: VFunc, x: Option<&[f32]>, y: &mut [f32]) -> bool {
    let n = x.map_or(y.len(), |x| x.len().min(y.len()));
    run(f, Rows { x, y, ld: n, nrows: 1, ncols: n })
}

/// `f` on the `nrows x ncols` block of `y` whose rows start `ldy` apart,
/// in place, as [`apply`]. The block lies within `y` (the caller's bound:
/// a panic in debug builds; in release builds rows past `y`'s end are left
/// alone).
#[inline]
pub(crate) fn apply_rows(f: VFunc, y: &mut [f32], ldy: usize, nrows: usize, ncols: usize) -> bool {
    run(f, Rows { x: None, y, ld: ldy, nrows, ncols })
}

/// `rows` through the widest loop this CPU has.
#[inline]
fn run(f: VFunc, rows: Rows<'_>) -> bool {
    if let Some(cpu) = Avx512::detect() {
        // SAFETY: `cpu` proves AVX-512F is present.
        unsafe { map512(cpu, f, rows) };
        return true;
    }
    if let Some(cpu) = Avx2::detect() {
        // SAFETY: `cpu` proves AVX2 and FMA are present.
        unsafe { map256(cpu, f, rows) };
        return true;
    }
    false
}

/// The operands of one call: `nrows` rows of `ncols` values, `ld` apart,
/// read from `x` (or `y` itself when `x` is `None`) and written to `y`.
struct Rows<'a> {
    x: Option<&'a [f32]>,
    y: &'a mut [f32],
    ld: usize,
    nrows: usize,
    ncols: usize,
}

impl Rows<'_> {
    /// Row `r`'s range, when it lies within both operands.
    #[inline(always)]
    fn range(&self, r: usize) -> Option<core::ops::Range<usize>> {
        let start = r.checked_mul(self.ld)?;
        let end = start.checked_add(self.ncols)?;
        let len = self.x.map_or(self.y.len(), |x| x.len().min(self.y.len()));
        (end <= len).then_some(start..end)
    }
}

const LOG2E: f32 = core::f32::consts::LOG2_E;
/// ln 2 split in two: `LN2_HI` has few mantissa bits, so `n * LN2_HI` is
/// exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `e^r ~ 1 + r + r^2 (C2 + r (C3 + r (C4 + r (C5 + r C6))))` on
/// `|r| <= ln2 / 2`, fitted for relative error (below 8e-9 in exact
/// arithmetic).
const C2: f32 = 0.499_999_67;
const C3: f32 = 0.166_664_8;
const C4: f32 = 0.041_673_567;
const C5: f32 = 0.008_372_688;
const C6: f32 = 0.001_357_120_8;
/// Above where `e^x` overflows (88.8), so clamped lanes give infinity; low
/// enough that `n` stays within what the scalings take.
const EXP_MAX: f32 = 100.0;
/// Far below where `e^x` rounds to zero (-104), so clamped lanes give
/// exactly zero; high enough that `n` stays within what the scalings take
/// (two normal factors on AVX2) and `-inf` never reaches the arithmetic.
const EXP_MIN: f32 = -150.0;

/// HardSwish's slope, `1 / 6` rounded to f32 as the standalone op rounds it.
const HARD_SWISH_SLOPE: f32 = (1.0f64 / 6.0) as f32;

/// `e^a` (NaN stays NaN), sixteen lanes.
#[target_feature(enable = "avx512f")]
fn exp512(a: __m512) -> __m512 {
    // The clamps keep a NaN `a` (the second operand wins on NaN).
    let a = _mm512_min_ps(_mm512_set1_ps(EXP_MAX), a);
    exp512_core(_mm512_max_ps(_mm512_set1_ps(EXP_MIN), a))
}

/// `e^a` for `a` within [`EXP_MIN`, `EXP_MAX`] (or NaN), sixteen lanes:
/// [`exp512`] without its clamps.
#[target_feature(enable = "avx512f")]
fn exp512_core(a: __m512) -> __m512 {
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(a, _mm512_set1_ps(LOG2E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), a);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    let mut p = _mm512_set1_ps(C6);
    for c in [C5, C4, C3, C2] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let r2 = _mm512_mul_ps(r, r);
    let p = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0)));
    _mm512_scalef_ps(p, n)
}

/// `0.5 x (1 + erf(x / sqrt 2))` on sixteen lanes: [`vmath::gelu`]'s
/// formula with fused steps, `-x² / 2` split exactly by a fused
/// multiply-subtract and its low part applied to the exponential's result.
#[target_feature(enable = "avx512f")]
fn gelu512(x: __m512) -> __m512 {
    // min(|x|, 16): a NaN stays (the second operand wins on NaN).
    let ax = _mm512_castsi512_ps(_mm512_andnot_si512(
        _mm512_set1_epi32(i32::MIN),
        _mm512_castps_si512(x),
    ));
    let ax = _mm512_min_ps(_mm512_set1_ps(GELU_CLAMP), ax);
    // t = 1 / (1 + K |x| / sqrt 2), divided (on its own unit, off the
    // multiply-add ports the rest keeps busy).
    let one = _mm512_set1_ps(1.0);
    let t = _mm512_div_ps(one, _mm512_fmadd_ps(ax, _mm512_set1_ps(GELU_K), one));
    let last = GELU_P.len() - 1;
    let mut p = _mm512_set1_ps(GELU_P[last]);
    for &c in GELU_P[..last].iter().rev() {
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(c));
    }
    // -x² / 2 = m + lo exactly; e^(m + lo) = e^m (1 + lo) to far below an ulp.
    let hx = _mm512_mul_ps(ax, _mm512_set1_ps(-0.5));
    let m = _mm512_mul_ps(hx, ax);
    let lo = _mm512_fmsub_ps(hx, ax, m);
    let h = _mm512_mul_ps(_mm512_mul_ps(t, p), exp512_core(m));
    let h = _mm512_fmadd_ps(h, lo, h);
    let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
    let phi = _mm512_mask_blend_ps(neg, _mm512_sub_ps(one, h), h);
    _mm512_mul_ps(x, phi)
}

/// `f` on sixteen lanes.
#[target_feature(enable = "avx512f")]
pub(in crate::simd) fn eval512(f: VFunc, x: __m512) -> __m512 {
    match f {
        VFunc::Exp => return exp512(x),
        VFunc::Gelu => return gelu512(x),
        VFunc::HardSwish => {
            let t = _mm512_add_ps(
                _mm512_mul_ps(x, _mm512_set1_ps(HARD_SWISH_SLOPE)),
                _mm512_set1_ps(0.5),
            );
            // `t < 0 ? 0 : t > 1 ? 1 : t` (a NaN stays).
            let z = _mm512_setzero_ps();
            let t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(t, z), t, z);
            let one = _mm512_set1_ps(1.0);
            let t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(t, one), t, one);
            return _mm512_mul_ps(x, t);
        }
        VFunc::Sigmoid | VFunc::Silu => {}
    }
    let sign = _mm512_set1_epi32(i32::MIN);
    // -|x|: the exponential never overflows and 1 + e stays in [1, 2].
    let neg = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), sign));
    let e = exp512(neg);
    // 1 / d for d in [1, 2]: the 14-bit estimate and one Newton step
    // (relative error near 2^-28), cheaper than a division.
    let d = _mm512_add_ps(_mm512_set1_ps(1.0), e);
    let q0 = _mm512_rcp14_ps(d);
    let q = _mm512_fmadd_ps(q0, _mm512_fnmadd_ps(d, q0, _mm512_set1_ps(1.0)), q0);
    // sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below (no
    // cancellation for large negative x).
    let pos = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(x, _mm512_setzero_ps());
    let s = _mm512_mask_blend_ps(pos, _mm512_mul_ps(e, q), q);
    match f {
        VFunc::Silu => _mm512_mul_ps(x, s),
        _ => s,
    }
}

/// The loop over [`Rows`] for one vector width: whole vectors loaded,
/// evaluated and stored, each row's tail through a stack buffer. One body
/// for both widths; each expansion is its own `target_feature` function.
macro_rules! map_rows {
    ($(#[$doc:meta])* $name:ident, $cpu:ty, $features:literal, $lanes:literal,
     $load:ident, $store:ident, $eval:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        fn $name(_cpu: $cpu, f: VFunc, rows: Rows<'_>) {
            for r in 0..rows.nrows {
                debug_assert!(rows.range(r).is_some(), "vexp: row {r} of the block past the slice");
                let Some(range) = rows.range(r) else { return };
                let yp = rows.y.as_mut_ptr();
                let xp = rows.x.map_or(rows.y.as_ptr(), |x| x.as_ptr());
                let mut i = range.start;
                while i + $lanes <= range.end {
                    // SAFETY: `i + lanes <= range.end`, within both operands
                    // (`xp` is `y`'s own pointer in place: each vector is
                    // loaded before it is stored).
                    unsafe { $store(yp.add(i), $eval(f, $load(xp.add(i)))) };
                    i += $lanes;
                }
                if i < range.end {
                    let mut buf = [0.0f32; $lanes];
                    let n = range.end - i;
                    let src = rows.x.map_or(&rows.y[i..range.end], |x| &x[i..range.end]);
                    buf[..n].copy_from_slice(src);
                    // SAFETY: `buf` holds one vector of floats.
                    unsafe { $store(buf.as_mut_ptr(), $eval(f, $load(buf.as_ptr()))) };
                    rows.y[i..range.end].copy_from_slice(&buf[..n]);
                }
            }
        }
    };
}

map_rows!(
    /// The AVX-512 loop (`_cpu` proves AVX-512F is present).
    map512, Avx512, "avx512f", 16, _mm512_loadu_ps, _mm512_storeu_ps, eval512
);

/// See [`crate::simd::math::softmax_row`].
#[inline]
pub(crate) fn softmax_row(x: Option<&[f32]>, y: &mut [f32]) -> bool {
    let Some(cpu) = Avx512::detect() else { return false };
    if x.is_some_and(|x| x.len() != y.len()) || y.is_empty() {
        return false;
    }
    // SAFETY: `cpu` proves AVX-512F is present.
    unsafe { softmax512(cpu, x, y) };
    true
}

/// [`softmax_row`] on AVX-512 (`_cpu` proves it is present); `x`, when
/// given, is as long as `y`, which is not empty.
#[target_feature(enable = "avx512f")]
fn softmax512(_cpu: Avx512, x: Option<&[f32]>, y: &mut [f32]) {
    let n = y.len();
    let (full, rest) = (n / 16, n % 16);
    let tail: __mmask16 = ((1u32 << rest) - 1) as __mmask16;
    let xp = x.map_or(y.as_ptr(), |x| x.as_ptr());
    let yp = y.as_mut_ptr();
    // SAFETY (every access below): vector `b < full` covers floats `16 b ..
    // 16 b + 16 <= n`, the tail's lanes below `rest` floats `16 full ..
    // n` (the others masked off), of `x` and of `y`, both `n` long; where
    // `x` is `y` itself, each vector is loaded before it is stored.
    unsafe {
        // Sixteen partial maxima, then in lane order, then the rest in
        // order: `if v > m { v } else { m }`, which `max(v, m)` is (a NaN
        // `v` skipped).
        let mut mx = _mm512_set1_ps(f32::NEG_INFINITY);
        for b in 0..full {
            mx = _mm512_max_ps(_mm512_loadu_ps(xp.add(16 * b)), mx);
        }
        let mut lanes = [0.0f32; 16];
        _mm512_storeu_ps(lanes.as_mut_ptr(), mx);
        let mut m = f32::NEG_INFINITY;
        for v in lanes {
            m = if v > m { v } else { m };
        }
        for i in 16 * full..n {
            let v = *xp.add(i);
            m = if v > m { v } else { m };
        }
        // The exponentials of the differences, stored, and their sums.
        let mv = _mm512_set1_ps(m);
        let mut acc = _mm512_setzero_ps();
        for b in 0..full {
            let e = exp512(_mm512_sub_ps(_mm512_loadu_ps(xp.add(16 * b)), mv));
            _mm512_storeu_ps(yp.add(16 * b), e);
            acc = _mm512_add_ps(acc, e);
        }
        if rest > 0 {
            let v = _mm512_maskz_loadu_ps(tail, xp.add(16 * full));
            _mm512_mask_storeu_ps(yp.add(16 * full), tail, exp512(_mm512_sub_ps(v, mv)));
        }
        _mm512_storeu_ps(lanes.as_mut_ptr(), acc);
        let h: [f32; 8] = core::array::from_fn(|k| lanes[k] + lanes[k + 8]);
        let mut sum = ((h[0] + h[4]) + (h[1] + h[5])) + ((h[2] + h[6]) + (h[3] + h[7]));
        for i in 16 * full..n {
            sum += *yp.add(i);
        }
        // One division, then products.
        let r = _mm512_set1_ps(1.0 / sum);
        for b in 0..full {
            _mm512_storeu_ps(yp.add(16 * b), _mm512_mul_ps(_mm512_loadu_ps(yp.add(16 * b)), r));
        }
        if rest > 0 {
            let v = _mm512_maskz_loadu_ps(tail, yp.add(16 * full));
            _mm512_mask_storeu_ps(yp.add(16 * full), tail, _mm512_mul_ps(v, r));
        }
    }
}

/// `e^a` (NaN stays NaN), eight lanes.
#[target_feature(enable = "avx2,fma")]
fn exp256(a: __m256) -> __m256 {
    let a = _mm256_min_ps(_mm256_set1_ps(EXP_MAX), a);
    let a = _mm256_max_ps(_mm256_set1_ps(EXP_MIN), a);
    let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
        a,
        _mm256_set1_ps(LOG2E),
    ));
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), a);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    let mut p = _mm256_set1_ps(C6);
    for c in [C5, C4, C3, C2] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let r2 = _mm256_mul_ps(r, r);
    let p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0)));
    // 2^n as two normal factors: n is in [-217, 145], beyond the normal range
    // for one factor. A NaN lane's `n` converts to i32::MIN, whose factors
    // are garbage, but `p` is NaN there and stays NaN.
    let ni = _mm256_cvtps_epi32(n);
    let n1 = _mm256_srai_epi32::<1>(ni);
    let n2 = _mm256_sub_epi32(ni, n1);
    let bias = _mm256_set1_epi32(127);
    let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
    let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
    _mm256_mul_ps(_mm256_mul_ps(p, s1), s2)
}

/// [`gelu512`] on eight lanes.
#[target_feature(enable = "avx2,fma")]
fn gelu256(x: __m256) -> __m256 {
    // min(|x|, 16): a NaN stays (the second operand wins on NaN).
    let ax = _mm256_min_ps(_mm256_set1_ps(GELU_CLAMP), _mm256_andnot_ps(_mm256_set1_ps(-0.0), x));
    let one = _mm256_set1_ps(1.0);
    let t = _mm256_div_ps(one, _mm256_fmadd_ps(ax, _mm256_set1_ps(GELU_K), one));
    let last = GELU_P.len() - 1;
    let mut p = _mm256_set1_ps(GELU_P[last]);
    for &c in GELU_P[..last].iter().rev() {
        p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(c));
    }
    let hx = _mm256_mul_ps(ax, _mm256_set1_ps(-0.5));
    let m = _mm256_mul_ps(hx, ax);
    let lo = _mm256_fmsub_ps(hx, ax, m);
    let h = _mm256_mul_ps(_mm256_mul_ps(t, p), exp256(m));
    let h = _mm256_fmadd_ps(h, lo, h);
    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
    let phi = _mm256_blendv_ps(_mm256_sub_ps(one, h), h, neg);
    _mm256_mul_ps(x, phi)
}

/// `f` on eight lanes.
#[target_feature(enable = "avx2,fma")]
fn eval256(f: VFunc, x: __m256) -> __m256 {
    match f {
        VFunc::Exp => return exp256(x),
        VFunc::Gelu => return gelu256(x),
        VFunc::HardSwish => {
            let t = _mm256_add_ps(
                _mm256_mul_ps(x, _mm256_set1_ps(HARD_SWISH_SLOPE)),
                _mm256_set1_ps(0.5),
            );
            // `t < 0 ? 0 : t > 1 ? 1 : t` (a NaN stays: the comparisons
            // are false on it).
            let z = _mm256_setzero_ps();
            let t = _mm256_blendv_ps(t, z, _mm256_cmp_ps::<_CMP_LT_OQ>(t, z));
            let one = _mm256_set1_ps(1.0);
            let t = _mm256_blendv_ps(t, one, _mm256_cmp_ps::<_CMP_GT_OQ>(t, one));
            return _mm256_mul_ps(x, t);
        }
        VFunc::Sigmoid | VFunc::Silu => {}
    }
    let sign = _mm256_set1_ps(-0.0);
    let e = exp256(_mm256_or_ps(x, sign));
    let q = _mm256_div_ps(_mm256_set1_ps(1.0), _mm256_add_ps(_mm256_set1_ps(1.0), e));
    let pos = _mm256_cmp_ps::<_CMP_GE_OQ>(x, _mm256_setzero_ps());
    let s = _mm256_blendv_ps(_mm256_mul_ps(e, q), q, pos);
    match f {
        VFunc::Silu => _mm256_mul_ps(x, s),
        _ => s,
    }
}

map_rows!(
    /// The AVX2 loop (`_cpu` proves AVX2 and FMA are present).
    map256, Avx2, "avx2,fma", 8, _mm256_loadu_ps, _mm256_storeu_ps, eval256
);

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(f: VFunc, x: f32) -> f64 {
        if f == VFunc::Gelu {
            // `1 + erf(x / sqrt 2)` as `erfc(-x / sqrt 2)`, which keeps the
            // digits the sum loses below 0.
            let x = f64::from(x);
            return 0.5 * x * libm::erfc(-x * core::f64::consts::FRAC_1_SQRT_2);
        }
        if f == VFunc::HardSwish {
            let op = crate::elementwise::Unary::HardSwish;
            return f64::from(crate::elementwise::eval(op, x));
        }
        let x = f64::from(x);
        let s = 1.0 / (1.0 + (-x).exp());
        match f {
            VFunc::Exp => x.exp(),
            VFunc::Sigmoid => s,
            _ => x * s,
        }
    }

    /// `got` against [`exact`]: within 4 ulp (Gelu: 5, whose variable
    /// `t` rounded near 1 moves the result by up to 4 of its own ulp).
    fn agrees(f: VFunc, x: f32, got: f32) -> bool {
        let want = exact(f, x);
        // HardSwish: the standalone op's result, bit for bit.
        if f == VFunc::HardSwish {
            return got.to_bits() == (want as f32).to_bits() || (got.is_nan() && want.is_nan());
        }
        close(got, want, if f == VFunc::Gelu { 5.0 } else { 4.0 })
    }

    /// Within `ulps` ulp of the exact value (or 1e-37 absolute, where the
    /// result is at the bottom of the normal range and ulps mean little).
    fn close(got: f32, want: f64, ulps: f64) -> bool {
        if want.is_nan() {
            return got.is_nan();
        }
        let w = want as f32;
        if w.is_infinite() || got.is_infinite() {
            return got == w;
        }
        let ulp = f64::from(f32::from_bits(w.abs().to_bits() + 1) - w.abs());
        (f64::from(got) - want).abs() <= ulps * ulp || (f64::from(got) - want).abs() <= 1e-37
    }

    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..20_000).map(|i| (i as f32 - 10_000.0) * 0.0123).collect();
        // Densely where Gelu's result is normal and not yet `x`.
        v.extend((0..40_000).map(|i| -14.0 + i as f32 * 4.5e-4));
        let mut bits = 0u32;
        while let Some(next) = bits.checked_add(100_003) {
            let x = f32::from_bits(bits);
            if !x.is_nan() {
                v.push(x);
            }
            bits = next;
        }
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            88.7,
            -88.7,
            -103.9,
            -104.1,
            1e-30,
            -1e-30,
        ]);
        v.extend([f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1.0e-45]);
        v
    }

    fn check(f: VFunc, run: impl Fn(&[f32], &mut [f32])) {
        let xs = inputs();
        // Lengths around the vector widths exercise the tails.
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 33, xs.len()] {
            let x = &xs[xs.len() - len..];
            let mut y = vec![0.0f32; len];
            run(x, &mut y);
            for (&xv, &yv) in x.iter().zip(&y) {
                assert!(agrees(f, xv, yv), "{f:?}({xv:e}) = {yv:e}, want {:e}", exact(f, xv));
            }
        }
        let mut nan = [f32::NAN; 3];
        run(&[f32::NAN; 3], &mut nan);
        assert!(nan.iter().all(|v| v.is_nan()));
    }

    fn flat<'a>(x: Option<&'a [f32]>, y: &'a mut [f32]) -> Rows<'a> {
        let n = y.len();
        Rows { x, y, ld: n, nrows: 1, ncols: n }
    }

    /// A block of rows: every element of the block changed, the gaps
    /// between rows and the rest of the slice untouched.
    fn rows_check(f: VFunc, run: impl Fn(&mut [f32], usize, usize, usize)) {
        for (ld, nrows, ncols) in [(40, 3, 33), (16, 4, 16), (9, 5, 7), (1, 3, 1)] {
            let len = ld * nrows + 5;
            let orig: Vec<f32> = (0..len).map(|i| (i as f32 - 50.0) * 0.37).collect();
            let mut y = orig.clone();
            run(&mut y, ld, nrows, ncols);
            for (i, (&o, &g)) in orig.iter().zip(&y).enumerate() {
                let inside = i / ld < nrows && i % ld < ncols;
                if inside {
                    assert!(agrees(f, o, g), "{f:?} [{i}]");
                } else {
                    assert_eq!(g.to_bits(), o.to_bits(), "{f:?} [{i}] outside the block");
                }
            }
        }
        // Rows past the end: a bug in the caller, stopped in debug builds,
        // skipped (not read) in release builds.
        let mut short = [1.0f32; 10];
        crate::simd::tests::out_of_bounds(|| run(&mut short, 8, 2, 4));
        assert!(short[8..].iter().all(|&v| v == 1.0));
    }

    /// Every check, for every function, on one width's loop.
    fn check_loop(map: impl Fn(VFunc, Rows<'_>)) {
        for f in [VFunc::Exp, VFunc::Sigmoid, VFunc::Silu, VFunc::Gelu, VFunc::HardSwish] {
            check(f, |x, y| map(f, flat(Some(x), y)));
            check(f, |x, y| {
                y.copy_from_slice(x);
                map(f, flat(None, y))
            });
            rows_check(f, |y, ld, nrows, ncols| map(f, Rows { x: None, y, ld, nrows, ncols }));
        }
    }

    #[test]
    fn avx512_matches_the_exact_functions() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        // SAFETY: `cpu` proves AVX-512F.
        check_loop(|f, rows| unsafe { map512(cpu, f, rows) });
    }

    #[test]
    fn avx2_matches_the_exact_functions() {
        let Some(cpu) = crate::simd::tests::avx2() else { return };
        // SAFETY: `cpu` proves AVX2 and FMA.
        check_loop(|f, rows| unsafe { map256(cpu, f, rows) });
    }
}
