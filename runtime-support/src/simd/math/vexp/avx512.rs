//! [`super`]'s functions on sixteen lanes (AVX-512F), and Softmax's row.

use super::{C2, C3, C4, C5, C6, EXP_MAX, EXP_MIN, HARD_SWISH_SLOPE, LN2_HI, LN2_LO, LOG2E};
use super::{Rows, VFunc};
use crate::simd::isa::avx512::Avx512;
use crate::vmath::{GELU_CLAMP, GELU_K, GELU_P};
use core::arch::x86_64::*;

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

/// [`eval512`] on each vector of `x`, in place: the array form
/// `map_rows!` takes.
#[inline]
#[target_feature(enable = "avx512f")]
fn eval512_each<const L: usize>(f: VFunc, x: &mut [__m512; L]) {
    for v in x.iter_mut() {
        *v = eval512(f, *v);
    }
}

map_rows!(
    /// The AVX-512 loop (`_cpu` proves AVX-512F is present), a vector at a
    /// time.
    pub(super) map512, Avx512, "avx512f", 16, 1, _mm512_loadu_ps, _mm512_storeu_ps, eval512_each
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
