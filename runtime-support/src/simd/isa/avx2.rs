//! The AVX2+FMA token and what the AVX2 kernels share: row masks, the
//! [`Lanes`] of eight floats, and running a body of loops compiled for
//! AVX2 (or AVX-512).
//!
//! Soundness: an [`Avx2`] value exists only after the CPU was found to
//! support AVX2 and FMA, with the OS saving the `ymm` state, under the ISA
//! cap ([`Avx2::detect`] is the one constructor, and [`AvxVnni::avx2`]
//! hands one on from a token that proves more). Holding one, code may
//! call the functions compiled with `#[target_feature(enable =
//! "avx2,fma")]` and the AVX2 and FMA intrinsics. An [`AvxVnni`] value
//! (from [`AvxVnni::detect`] only) proves AVX-VNNI as well, for
//! `#[target_feature(enable = "avx2,fma,avxvnni")]`.

use crate::simd::lanes::{LaneKernel, Lanes};
use core::arch::x86_64::{
    __m256, __m256i, _CMP_GT_OQ, _CMP_LT_OQ, _CMP_UNORD_Q, _mm256_add_epi32, _mm256_add_ps,
    _mm256_alignr_epi8, _mm256_and_si256, _mm256_blendv_ps, _mm256_castpd_ps, _mm256_castps_pd,
    _mm256_castps_si256, _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32,
    _mm256_maskload_ps, _mm256_max_ps, _mm256_min_ps, _mm256_movemask_ps, _mm256_mul_ps,
    _mm256_or_si256, _mm256_permute2f128_ps, _mm256_permute4x64_pd, _mm256_set1_epi32,
    _mm256_set1_ps, _mm256_setr_epi32, _mm256_shuffle_ps, _mm256_storeu_ps, _mm256_sub_ps,
    _mm256_testz_si256, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
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

/// Proof that AVX2, FMA and AVX-VNNI are available on this CPU (the int8
/// products' 256-bit `vpdpbusd`), under the ISA cap.
#[derive(Clone, Copy)]
pub(crate) struct AvxVnni {
    _private: (),
}

impl AvxVnni {
    /// `Some` when the CPU supports AVX2, FMA and AVX-VNNI.
    #[inline]
    pub(crate) fn detect() -> Option<AvxVnni> {
        use crate::simd::isa::cpu;
        let f = cpu::features();
        (f & cpu::AVX2_FMA != 0 && f & cpu::AVXVNNI != 0).then_some(AvxVnni { _private: () })
    }

    /// The AVX2 token AVX-VNNI implies.
    #[inline(always)]
    pub(crate) fn avx2(self) -> Avx2 {
        Avx2 { _private: () }
    }
}

/// `*p.add(l) = x[l]` for the lanes `l` of `m`: a whole-vector store when
/// every lane is set, else the lanes one by one from a copy on the stack.
/// Not `vmaskmovps`: its store form is microcoded on AMD cores (20-40
/// cycles a store on Zen 3, measured, against under one for a plain
/// store), and AVX2 kernels store partial vectors at every row's end.
///
/// # Safety
/// AVX2 is present and the lanes of `m` are writable at `p`.
#[inline]
#[target_feature(enable = "avx2")]
pub(in crate::simd) unsafe fn store_lanes(p: *mut f32, m: __m256i, x: __m256) {
    let mut bits = _mm256_movemask_ps(_mm256_castsi256_ps(m)) as u32;
    if bits == 0xFF {
        // SAFETY: all eight lanes are writable (the caller's contract).
        unsafe { _mm256_storeu_ps(p, x) };
        return;
    }
    let mut lanes = [0.0f32; 8];
    // SAFETY: `lanes` holds eight floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), x) };
    while bits != 0 {
        let l = bits.trailing_zeros() as usize;
        // SAFETY: lane `l < 8` of `m` is set, so `p + l` is writable.
        unsafe { *p.add(l) = lanes[l] };
        bits &= bits - 1;
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

/// Eight lanes (`ymm`); masks are vectors of `0` or `-1` lanes, as
/// `vmaskmovps` and `vblendvps` take them. Each method's `unsafe` block
/// calls AVX2 or FMA intrinsics, sound because `self` proves the CPU has
/// them.
impl Lanes for Avx2 {
    const N: usize = 8;
    type V = __m256;
    type M = __m256i;

    #[inline(always)]
    fn enter<K: LaneKernel>(self, k: K) -> K::Output {
        // SAFETY: `self` proves AVX2 and FMA, all `enter_avx2` enables.
        unsafe { enter_avx2(self, k) }
    }

    #[inline(always)]
    fn splat(self, x: f32) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_set1_ps(x) }
    }

    #[inline(always)]
    fn add(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_add_ps(a, b) }
    }

    #[inline(always)]
    fn sub(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_sub_ps(a, b) }
    }

    #[inline(always)]
    fn mul(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_mul_ps(a, b) }
    }

    #[inline(always)]
    fn below(self, n: usize) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { lanes_in_row(0, n.min(8) as i32) }
    }

    #[inline(always)]
    fn between(self, lo: isize, hi: isize) -> __m256i {
        // Lanes `l` with `0 <= l - lo < hi - lo`, both ends clamped to 0..=8.
        let (lo, hi) = (lo.clamp(0, 8) as i32, hi.clamp(0, 8) as i32);
        // SAFETY: `self` proves AVX2.
        unsafe { lanes_in_row(-lo, hi - lo) }
    }

    #[inline(always)]
    fn lt(self, a: __m256, b: __m256) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(a, b)) }
    }

    #[inline(always)]
    fn gt(self, a: __m256, b: __m256) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_GT_OQ>(a, b)) }
    }

    #[inline(always)]
    fn is_nan(self, a: __m256) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)) }
    }

    #[inline(always)]
    fn either_nan(self, a: __m256, b: __m256) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(a, b)) }
    }

    #[inline(always)]
    fn union(self, a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_or_si256(a, b) }
    }

    #[inline(always)]
    fn any(self, m: __m256i) -> bool {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_testz_si256(m, m) == 0 }
    }

    #[inline(always)]
    fn max(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_max_ps(a, b) }
    }

    #[inline(always)]
    fn min(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_min_ps(a, b) }
    }

    #[inline(always)]
    fn select(self, m: __m256i, yes: __m256, no: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe { _mm256_blendv_ps(no, yes, _mm256_castsi256_ps(m)) }
    }

    #[inline(always)]
    unsafe fn load(self, p: *const f32, m: __m256i) -> __m256 {
        // SAFETY: `self` proves AVX2; the caller guarantees the lanes of
        // `m` readable (the others are not accessed).
        unsafe { _mm256_maskload_ps(p, m) }
    }

    #[inline(always)]
    unsafe fn store(self, p: *mut f32, m: __m256i, x: __m256) {
        // SAFETY: `self` proves AVX2; the caller guarantees the lanes of
        // `m` writable (the others are not accessed).
        unsafe { store_lanes(p, m, x) }
    }

    #[inline(always)]
    fn evens(self, lo: __m256, hi: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe {
            // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the middle 64-bit
            // pairs swapped.
            let s = _mm256_shuffle_ps::<0x88>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(s)))
        }
    }

    #[inline(always)]
    fn odds(self, lo: __m256, hi: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe {
            let s = _mm256_shuffle_ps::<0xDD>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(s)))
        }
    }

    #[inline(always)]
    fn split(self, lo: __m256, hi: __m256) -> [__m256; 2] {
        // SAFETY: `self` proves AVX2.
        unsafe {
            // The 128-bit halves regrouped, [lo0..lo3 hi0..hi3] and [lo4..lo7
            // hi4..hi7]; then in each half the even (odd) floats of the
            // first, then of the second.
            let a = _mm256_permute2f128_ps::<0x20>(lo, hi);
            let b = _mm256_permute2f128_ps::<0x31>(lo, hi);
            [_mm256_shuffle_ps::<0x88>(a, b), _mm256_shuffle_ps::<0xDD>(a, b)]
        }
    }

    #[inline(always)]
    fn interleave(self, a: __m256, b: __m256) -> [__m256; 2] {
        // SAFETY: `self` proves AVX2.
        unsafe {
            // [a0 b0 a1 b1 | a4 b4 a5 b5] and the 2, 3 / 6, 7 pairs, then
            // the halves put in order.
            let (lo, hi) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            [_mm256_permute2f128_ps::<0x20>(lo, hi), _mm256_permute2f128_ps::<0x31>(lo, hi)]
        }
    }

    #[inline(always)]
    fn shifted(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe {
            // [a4..a7 | b0..b3], then each 128-bit half of it behind the
            // same half of `a`, moved down four bytes: [a1..a4 | a5..a7 b0].
            let t = _mm256_castps_si256(_mm256_permute2f128_ps::<0x21>(a, b));
            _mm256_castsi256_ps(_mm256_alignr_epi8::<4>(t, _mm256_castps_si256(a)))
        }
    }

    #[inline(always)]
    fn shifted_in(self, a: __m256, b: __m256) -> __m256 {
        // SAFETY: `self` proves AVX2.
        unsafe {
            // [a4..a7 | b0..b3], then each 128-bit half of `b` behind the
            // same half of it, moved down twelve bytes: [a7 b0..b2 | b3..b6].
            let t = _mm256_castps_si256(_mm256_permute2f128_ps::<0x21>(a, b));
            _mm256_castsi256_ps(_mm256_alignr_epi8::<12>(_mm256_castps_si256(b), t))
        }
    }
}

/// [`Lanes::enter`] on AVX2: `k` compiled with AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
fn enter_avx2<K: LaneKernel>(cpu: Avx2, k: K) -> K::Output {
    k.run(cpu)
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
