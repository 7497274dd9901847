//! [`super`]'s functions on eight lanes (AVX2 and FMA).

use super::{C2, C3, C4, C5, C6, EXP_MAX, EXP_MIN, HARD_SWISH_SLOPE, LN2_HI, LN2_LO, LOG2E};
use super::{Rows, VFunc};
use crate::simd::isa::avx2::Avx2;
use crate::vmath::{GELU_CLAMP, GELU_K, GELU_P};
use core::arch::x86_64::*;

// Each function takes `L` independent vectors and runs every step on all
// of them before the next: one vector's exponential is a chain of some
// fifteen dependent steps, too long for the core to overlap with the next
// vector's on its own (SiLU fused into a 6x16 tile, a vector at a time:
// 16->96 1x1 at 112x112 on Zen 3 took 1.66 ms; four at a time, see the
// commit). The arithmetic of each lane is the same whatever `L`.

/// `e^a` (NaN stays NaN) on each of the `L` vectors of `a`, in place.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn exp256<const L: usize>(a: &mut [__m256; L]) {
    let mut n = [_mm256_setzero_ps(); L];
    for (v, n) in a.iter_mut().zip(&mut n) {
        let x = _mm256_min_ps(_mm256_set1_ps(EXP_MAX), *v);
        let x = _mm256_max_ps(_mm256_set1_ps(EXP_MIN), x);
        *n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm256_mul_ps(
            x,
            _mm256_set1_ps(LOG2E),
        ));
        let r = _mm256_fnmadd_ps(*n, _mm256_set1_ps(LN2_HI), x);
        *v = _mm256_fnmadd_ps(*n, _mm256_set1_ps(LN2_LO), r);
    }
    let mut p = [_mm256_set1_ps(C6); L];
    for c in [C5, C4, C3, C2] {
        for (p, r) in p.iter_mut().zip(a.iter()) {
            *p = _mm256_fmadd_ps(*p, *r, _mm256_set1_ps(c));
        }
    }
    let mut ni = [_mm256_setzero_si256(); L];
    let mut far = _mm256_setzero_si256();
    for (((v, p), n), ni) in a.iter_mut().zip(&mut p).zip(&n).zip(&mut ni) {
        let r = *v;
        let r2 = _mm256_mul_ps(r, r);
        *p = _mm256_fmadd_ps(*p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0)));
        // `n` where `p 2^n` is a normal float for every `p` in [0.70,
        // 1.42] (e^r for |r| <= ln2 / 2): -125 to 127. A NaN lane's `n`
        // converts to i32::MIN, outside.
        *ni = _mm256_cvtps_epi32(*n);
        let above = _mm256_cmpgt_epi32(*ni, _mm256_set1_epi32(127));
        let below = _mm256_cmpgt_epi32(_mm256_set1_epi32(-125), *ni);
        far = _mm256_or_si256(far, _mm256_or_si256(above, below));
    }
    if _mm256_testz_si256(far, far) == 1 {
        // Every result normal: `n` added to `p`'s exponent, the exact
        // product the two factors below give.
        for ((v, p), ni) in a.iter_mut().zip(&p).zip(&ni) {
            let e = _mm256_add_epi32(_mm256_castps_si256(*p), _mm256_slli_epi32::<23>(*ni));
            *v = _mm256_castsi256_ps(e);
        }
        return;
    }
    for ((v, p), ni) in a.iter_mut().zip(&p).zip(&ni) {
        // 2^n as two normal factors: n is in [-217, 145], beyond the normal
        // range for one factor. A NaN lane's factors are garbage, but `p`
        // is NaN there and stays NaN.
        let n1 = _mm256_srai_epi32::<1>(*ni);
        let n2 = _mm256_sub_epi32(*ni, n1);
        let bias = _mm256_set1_epi32(127);
        let s1 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n1, bias)));
        let s2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(n2, bias)));
        *v = _mm256_mul_ps(_mm256_mul_ps(*p, s1), s2);
    }
}

/// [`gelu512`](super::avx512) on each of the `L` vectors of `x`, in place.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn gelu256<const L: usize>(x: &mut [__m256; L]) {
    let one = _mm256_set1_ps(1.0);
    let (mut t, mut m, mut lo, mut ax) = ([one; L], [one; L], [one; L], [one; L]);
    for i in 0..L {
        // min(|x|, 16): a NaN stays (the second operand wins on NaN).
        let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), x[i]);
        ax[i] = _mm256_min_ps(_mm256_set1_ps(GELU_CLAMP), a);
        t[i] = _mm256_div_ps(one, _mm256_fmadd_ps(ax[i], _mm256_set1_ps(GELU_K), one));
        let hx = _mm256_mul_ps(ax[i], _mm256_set1_ps(-0.5));
        m[i] = _mm256_mul_ps(hx, ax[i]);
        lo[i] = _mm256_fmsub_ps(hx, ax[i], m[i]);
    }
    let last = GELU_P.len() - 1;
    let mut p = [_mm256_set1_ps(GELU_P[last]); L];
    for &c in GELU_P[..last].iter().rev() {
        for (p, t) in p.iter_mut().zip(&t) {
            *p = _mm256_fmadd_ps(*p, *t, _mm256_set1_ps(c));
        }
    }
    exp256(&mut m);
    for i in 0..L {
        let h = _mm256_mul_ps(_mm256_mul_ps(t[i], p[i]), m[i]);
        let h = _mm256_fmadd_ps(h, lo[i], h);
        let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(x[i], _mm256_setzero_ps());
        let phi = _mm256_blendv_ps(_mm256_sub_ps(one, h), h, neg);
        x[i] = _mm256_mul_ps(x[i], phi);
    }
}

/// `f` on each of the `L` vectors of `x`, in place (`L` of 4 keeps the
/// exponential's chains overlapped without spilling).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub(in crate::simd) fn eval256<const L: usize>(f: VFunc, x: &mut [__m256; L]) {
    match f {
        VFunc::Exp => return exp256(x),
        VFunc::Gelu => return gelu256(x),
        VFunc::HardSwish => {
            for v in x.iter_mut() {
                let t = _mm256_add_ps(
                    _mm256_mul_ps(*v, _mm256_set1_ps(HARD_SWISH_SLOPE)),
                    _mm256_set1_ps(0.5),
                );
                // `t < 0 ? 0 : t > 1 ? 1 : t` (a NaN stays: the comparisons
                // are false on it).
                let z = _mm256_setzero_ps();
                let t = _mm256_blendv_ps(t, z, _mm256_cmp_ps::<_CMP_LT_OQ>(t, z));
                let one = _mm256_set1_ps(1.0);
                let t = _mm256_blendv_ps(t, one, _mm256_cmp_ps::<_CMP_GT_OQ>(t, one));
                *v = _mm256_mul_ps(*v, t);
            }
            return;
        }
        VFunc::Sigmoid | VFunc::Silu => {}
    }
    let sign = _mm256_set1_ps(-0.0);
    let mut e = [sign; L];
    for (e, v) in e.iter_mut().zip(x.iter()) {
        *e = _mm256_or_ps(*v, sign);
    }
    exp256(&mut e);
    for (v, e) in x.iter_mut().zip(&e) {
        // sigmoid(x) = 1 / (1 + e) for x >= 0, e / (1 + e) below (no
        // cancellation for large negative x); SiLU = x sigmoid(x), its
        // numerator x or x e: one rounding before the division.
        let one = _mm256_set1_ps(1.0);
        let pos = _mm256_cmp_ps::<_CMP_GE_OQ>(*v, _mm256_setzero_ps());
        let num = match f {
            VFunc::Silu => _mm256_blendv_ps(_mm256_mul_ps(*v, *e), *v, pos),
            _ => _mm256_blendv_ps(*e, one, pos),
        };
        *v = _mm256_div_ps(num, _mm256_add_ps(one, *e));
    }
}

map_rows!(
    /// The AVX2 loop (`_cpu` proves AVX2 and FMA are present), four
    /// vectors at a time.
    pub(super) map256, Avx2, "avx2,fma", 8, 4, _mm256_loadu_ps, _mm256_storeu_ps, eval256
);
