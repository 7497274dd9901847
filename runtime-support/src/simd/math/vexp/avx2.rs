//! [`super`]'s functions on eight lanes (AVX2 and FMA).

use super::{C2, C3, C4, C5, C6, EXP_MAX, EXP_MIN, HARD_SWISH_SLOPE, LN2_HI, LN2_LO, LOG2E};
use super::{Rows, VFunc};
use crate::simd::isa::avx2::Avx2;
use crate::vmath::{GELU_CLAMP, GELU_K, GELU_P};
use core::arch::x86_64::*;

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
pub(in crate::simd) fn eval256(f: VFunc, x: __m256) -> __m256 {
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
    pub(super) map256, Avx2, "avx2,fma", 8, _mm256_loadu_ps, _mm256_storeu_ps, eval256
);
