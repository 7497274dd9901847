//! The AVX-512F token and the lane helpers the AVX-512 kernels share: lane
//! masks, the even/odd split of 32 floats, the activation in registers,
//! and the [`Lanes`] of sixteen floats.
//!
//! Soundness: an [`Avx512`] value exists only after the CPU was found to
//! support AVX-512F (and AVX2 and FMA), with the OS saving the `zmm` and
//! mask state, under the ISA cap ([`Avx512::detect`] is the one
//! constructor). Holding one, code may call the functions compiled with
//! `#[target_feature(enable = "avx512f")]` and the AVX-512F intrinsics.

use crate::simd::gemm::epilogue::Activation;
use crate::simd::lanes::{self, LaneKernel, Lanes};
use core::arch::x86_64::{
    __m512, __mmask16, _CMP_GT_OQ, _CMP_LT_OQ, _CMP_UNORD_Q, _mm512_add_ps, _mm512_alignr_epi32,
    _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_mask_blend_ps,
    _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
    _mm512_permutex2var_ps, _mm512_set1_ps, _mm512_setr_epi32, _mm512_sub_ps,
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

/// Proof that AVX-512F, AVX-512BW and AVX-512 VNNI are available on this
/// CPU (the int8 products' `vpdpbusd`).
#[derive(Clone, Copy)]
pub(crate) struct Avx512Vnni {
    _private: (),
}

impl Avx512Vnni {
    /// `Some` when the CPU supports AVX-512F, BW and VNNI (under the cap).
    #[inline]
    pub(crate) fn detect() -> Option<Avx512Vnni> {
        use crate::simd::isa::cpu;
        let f = cpu::features();
        (f & cpu::AVX512F != 0 && f & cpu::AVX512VNNI != 0).then_some(Avx512Vnni { _private: () })
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

/// [`Activation::apply`] on 16 lanes: the same comparisons, as blends
/// ([`lanes::activate`]).
#[target_feature(enable = "avx512f")]
#[inline]
pub(in crate::simd) fn activate(x: __m512, act: Activation) -> __m512 {
    // The token: this function runs only where AVX-512F is enabled (a
    // `#[target_feature]` function's callers guarantee it).
    lanes::activate(Avx512 { _private: () }, x, act)
}

/// Sixteen lanes (`zmm`); masks are `k` registers. Each method's `unsafe`
/// block calls AVX-512F intrinsics (or the `#[target_feature(enable =
/// "avx512f")]` helpers above), sound because `self` proves the CPU has
/// them.
impl Lanes for Avx512 {
    const N: usize = 16;
    type V = __m512;
    type M = __mmask16;

    #[inline(always)]
    fn enter<K: LaneKernel>(self, k: K) -> K::Output {
        // SAFETY: `self` proves AVX-512F, all `enter_avx512` enables.
        unsafe { enter_avx512(self, k) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_set1_ps(x) }
    }

    #[inline(always)]
    fn add(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_add_ps(a, b) }
    }

    #[inline(always)]
    fn sub(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_sub_ps(a, b) }
    }

    #[inline(always)]
    fn mul(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_mul_ps(a, b) }
    }

    #[inline(always)]
    fn below(self, n: usize) -> __mmask16 {
        lanes(n)
    }

    #[inline(always)]
    fn between(self, lo: isize, hi: isize) -> __mmask16 {
        lanes_between(lo, hi)
    }

    #[inline(always)]
    fn lt(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b) }
    }

    #[inline(always)]
    fn gt(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_cmp_ps_mask::<_CMP_GT_OQ>(a, b) }
    }

    #[inline(always)]
    fn is_nan(self, a: __m512) -> __mmask16 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a) }
    }

    #[inline(always)]
    fn either_nan(self, a: __m512, b: __m512) -> __mmask16 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, b) }
    }

    #[inline(always)]
    fn union(self, a: __mmask16, b: __mmask16) -> __mmask16 {
        a | b
    }

    #[inline(always)]
    fn any(self, m: __mmask16) -> bool {
        m != 0
    }

    #[inline(always)]
    fn max(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_max_ps(a, b) }
    }

    #[inline(always)]
    fn min(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_min_ps(a, b) }
    }

    #[inline(always)]
    fn select(self, m: __mmask16, yes: __m512, no: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { _mm512_mask_blend_ps(m, no, yes) }
    }

    #[inline(always)]
    unsafe fn load(self, p: *const f32, m: __mmask16) -> __m512 {
        // SAFETY: `self` proves AVX-512F; the caller guarantees the lanes
        // of `m` readable (the others are not accessed).
        unsafe { _mm512_maskz_loadu_ps(m, p) }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32, m: __mmask16, x: __m512) {
        // SAFETY: `self` proves AVX-512F; the caller guarantees the lanes
        // of `m` writable (the others are not accessed).
        unsafe { _mm512_mask_storeu_ps(p, m, x) }
    }

    #[inline(always)]
    fn evens(self, lo: __m512, hi: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { evens(lo, hi) }
    }

    #[inline(always)]
    fn odds(self, lo: __m512, hi: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe { odds(lo, hi) }
    }

    #[inline(always)]
    fn split(self, lo: __m512, hi: __m512) -> [__m512; 2] {
        // SAFETY: `self` proves AVX-512F.
        unsafe { [evens(lo, hi), odds(lo, hi)] }
    }

    #[inline(always)]
    fn interleave(self, a: __m512, b: __m512) -> [__m512; 2] {
        // SAFETY: `self` proves AVX-512F.
        unsafe {
            let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
            let hi =
                _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
            [_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b)]
        }
    }

    #[inline(always)]
    fn shifted(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe {
            let (a, b) = (_mm512_castps_si512(a), _mm512_castps_si512(b));
            _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(b, a))
        }
    }

    #[inline(always)]
    fn shifted_in(self, a: __m512, b: __m512) -> __m512 {
        // SAFETY: `self` proves AVX-512F.
        unsafe {
            let (a, b) = (_mm512_castps_si512(a), _mm512_castps_si512(b));
            _mm512_castsi512_ps(_mm512_alignr_epi32::<15>(b, a))
        }
    }
}

/// [`Lanes::enter`] on AVX-512: `k` compiled with AVX-512F (which brings
/// AVX2 and FMA).
#[target_feature(enable = "avx512f")]
fn enter_avx512<K: LaneKernel>(cpu: Avx512, k: K) -> K::Output {
    k.run(cpu)
}
