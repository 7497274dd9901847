//! The AVX2+FMA token and what the AVX2 kernels share: row masks, and
//! running a body of loops compiled for AVX2 (or AVX-512).
//!
//! Soundness: an [`Avx2`] value exists only after the CPU was found to
//! support AVX2 and FMA, with the OS saving the `ymm` state, under the ISA
//! cap ([`Avx2::detect`] is the one constructor). Holding one, code may
//! call the functions compiled with `#[target_feature(enable =
//! "avx2,fma")]` and the AVX2 and FMA intrinsics.

use core::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_cmpgt_epi32, _mm256_set1_epi32,
    _mm256_setr_epi32,
};

/// Proof that AVX2 and FMA are available on this CPU.
#[derive(Clone, Copy)]
pub(crate) struct Avx2 {
    _private: (),
}

impl Avx2 {
    /// `Some` when the CPU supports AVX2 and FMA.
    #[inline]
    pub(crate) fn detect() -> Option<Avx2> {
        use crate::simd::isa::cpu;
        (cpu::features() & cpu::AVX2_FMA != 0).then_some(Avx2 { _private: () })
    }
}

/// Lanes `l` with `0 <= base + l < w`, as a load/store mask.
#[inline]
#[target_feature(enable = "avx2")]
pub(in crate::simd) fn lanes_in_row(base: i32, w: i32) -> __m256i {
    let idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(base));
    _mm256_and_si256(
        _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(w), idx),
    )
}

impl Avx2 {
    /// Runs `f` inside a function compiled for AVX2, so the loops inlined
    /// into it vectorize eight lanes wide (same arithmetic, wider registers).
    #[inline]
    pub(crate) fn vectorized<R>(self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `self` proves AVX2 is present; `f` is safe code.
        unsafe { with_avx2(f) }
    }
}

#[target_feature(enable = "avx2")]
#[inline]
fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

impl Avx2 {
    /// Runs `k` inside a function compiled for AVX2; `k.run` is
    /// `#[inline(always)]`, so its loops are compiled there.
    #[inline]
    pub(crate) fn vectorize<K: crate::simd::Vectorize>(self, k: K) -> K::Output {
        // SAFETY: `self` proves AVX2 is present; `k.run` is safe code.
        unsafe { run_avx2(k) }
    }
}

#[target_feature(enable = "avx2")]
#[inline]
fn run_avx2<K: crate::simd::Vectorize>(k: K) -> K::Output {
    k.run()
}

/// Runs `k` compiled for AVX-512 (sixteen lanes) when the CPU has AVX-512F,
/// else as [`crate::simd::vectorize`] does (AVX2 or the baseline); the element-wise
/// kernels' loops (`vmath`, Softmax, LayerNorm) are compute-bound and gain
/// the width. No fused multiply-adds appear (Rust does not contract `a * b +
/// c`), so results are the same bit for bit at every width.
#[inline]
pub(crate) fn vectorize_wide<K: crate::simd::Vectorize>(k: K) -> K::Output {
    if crate::simd::isa::avx512::Avx512::detect().is_some() {
        // SAFETY: AVX-512F was detected on this CPU (which implies the AVX2
        // and FMA the function also enables); `k.run` is safe code.
        return unsafe { run_avx512(k) };
    }
    crate::simd::vectorize(k)
}

#[target_feature(enable = "avx512f,avx2,fma")]
#[inline]
fn run_avx512<K: crate::simd::Vectorize>(k: K) -> K::Output {
    k.run()
}
