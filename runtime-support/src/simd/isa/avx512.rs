//! The AVX-512F token and the lane helpers the AVX-512 kernels share: lane
//! masks, the even/odd split of 32 floats, and the activation in
//! registers.
//!
//! Soundness: an [`Avx512`] value exists only after the CPU was found to
//! support AVX-512F (and AVX2 and FMA), with the OS saving the `zmm` and
//! mask state, under the ISA cap ([`Avx512::detect`] is the one
//! constructor). Holding one, code may call the functions compiled with
//! `#[target_feature(enable = "avx512f")]` and the AVX-512F intrinsics.

use crate::simd::gemm::epilogue::Activation;
use core::arch::x86_64::{
    __m512, __mmask16, _CMP_GT_OQ, _CMP_LT_OQ, _mm512_cmp_ps_mask, _mm512_mask_blend_ps,
    _mm512_mul_ps, _mm512_permutex2var_ps, _mm512_set1_ps, _mm512_setr_epi32, _mm512_setzero_ps,
};

/// Proof that AVX-512F is available on this CPU.
#[derive(Clone, Copy)]
pub(crate) struct Avx512 {
    _private: (),
}

impl Avx512 {
    /// `Some` when the CPU supports AVX-512F.
    #[inline]
    pub(crate) fn detect() -> Option<Avx512> {
        use crate::simd::isa::cpu;
        (cpu::features() & cpu::AVX512F != 0).then_some(Avx512 { _private: () })
    }
}

/// The lanes of a 16-wide vector below `n` (all of them from 16 up).
#[inline(always)]
pub(in crate::simd) fn lanes(n: usize) -> __mmask16 {
    if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 }
}

/// The lanes `l` of a 16-wide vector with `lo <= l < hi` (clamped to 0..16).
#[inline(always)]
pub(in crate::simd) fn lanes_between(lo: isize, hi: isize) -> __mmask16 {
    let below = |n: isize| -> u32 {
        if n <= 0 {
            0
        } else if n >= 16 {
            0xffff
        } else {
            (1u32 << n) - 1
        }
    };
    (below(hi) & !below(lo)) as __mmask16
}

/// The even-indexed lanes of the 32 floats `lo` then `hi`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(in crate::simd) fn evens(lo: __m512, hi: __m512) -> __m512 {
    let at = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    _mm512_permutex2var_ps(lo, at, hi)
}

/// The odd-indexed lanes of the 32 floats `lo` then `hi`.
#[inline]
#[target_feature(enable = "avx512f")]
pub(in crate::simd) fn odds(lo: __m512, hi: __m512) -> __m512 {
    let at = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    _mm512_permutex2var_ps(lo, at, hi)
}

/// [`Activation::apply`] on 16 lanes: the same comparisons, as blends.
#[target_feature(enable = "avx512f")]
#[inline]
pub(in crate::simd) fn activate(x: __m512, act: Activation) -> __m512 {
    match act {
        Activation::None => x,
        Activation::Relu => {
            let z = _mm512_setzero_ps();
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, z), x, z)
        }
        Activation::LeakyRelu { alpha } => {
            let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_setzero_ps());
            _mm512_mask_blend_ps(below, x, _mm512_mul_ps(_mm512_set1_ps(alpha), x))
        }
        Activation::Clip { min, max } => {
            let (lo, hi) = (_mm512_set1_ps(min), _mm512_set1_ps(max));
            let v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, lo), x, lo);
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(v, hi), v, hi)
        }
    }
}
