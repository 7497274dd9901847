//! The AVX2 tile: two rows of 16 columns. Both operands are widened to
//! `i16` and multiplied by `vpmaddwd`, which is exact (no saturation,
//! unlike `vpmaddubsw`): a 16-byte quarter of a strip group (four columns
//! of four `k`) against a row's four bytes repeated gives each column's
//! two pair sums, added together once at the end of the tile.

use crate::int8::Q8;
use crate::simd::isa::avx2::Avx2;
use crate::simd::q8::gemm::WithKernel;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, NR, QMicro, Tile};
use crate::simd::q8::requant::{Chan, Chan16, OutRange};
use core::arch::x86_64::{
    __m128i, __m256i, _mm_cvtsi32_si128, _mm_loadu_si128, _mm_max_epi8, _mm_max_epu8, _mm_min_epi8,
    _mm_min_epu8, _mm_set1_epi8, _mm_set1_epi32, _mm_storel_epi64, _mm_storeu_si128,
    _mm_unpackhi_epi8, _mm_unpackhi_epi16, _mm_unpacklo_epi8, _mm_unpacklo_epi16, _mm256_add_epi32,
    _mm256_add_epi64, _mm256_and_si256, _mm256_blend_epi32, _mm256_castsi256_si128,
    _mm256_cvtepi8_epi16, _mm256_cvtepu8_epi16, _mm256_hadd_epi32, _mm256_loadu_si256,
    _mm256_madd_epi16, _mm256_max_epi32, _mm256_min_epi32, _mm256_mul_epi32, _mm256_packs_epi16,
    _mm256_packs_epi32, _mm256_packus_epi16, _mm256_permute4x64_epi64, _mm256_permutevar8x32_epi32,
    _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setr_epi8, _mm256_setr_epi32,
    _mm256_setzero_si256, _mm256_shuffle_epi8, _mm256_sllv_epi32, _mm256_sllv_epi64,
    _mm256_sra_epi32, _mm256_srav_epi32, _mm256_srli_epi64, _mm256_storeu_si256,
};

/// The AVX2 tile kernel.
#[derive(Clone, Copy)]
pub(crate) struct Q8Avx2(Avx2);

impl Q8Avx2 {
    /// `Some` when the CPU has AVX2 under the ISA cap.
    #[inline]
    pub(crate) fn detect() -> Option<Q8Avx2> {
        Avx2::detect().map(Q8Avx2)
    }

    /// The kernel for a token already held.
    #[inline(always)]
    pub(crate) fn from_token(t: Avx2) -> Q8Avx2 {
        Q8Avx2(t)
    }

    /// Runs `body` compiled for AVX2: the driver's loops, the tile, its
    /// output stage and stores inline into one function.
    #[inline]
    pub(crate) fn run<B: WithKernel>(self, body: B) {
        // SAFETY: `self` proves AVX2; `body.run` is safe code.
        unsafe { run_avx2(self, body) }
    }
}

#[target_feature(enable = "avx2")]
#[inline]
fn run_avx2<B: WithKernel>(k: Q8Avx2, body: B) {
    body.run(k)
}

/// Rows of the tile.
const MR: usize = 2;

impl QMicro for Q8Avx2 {
    const MR: usize = MR;
    // Padded blocks spend products on columns never stored: an 8x8 plane
    // under a 3x3 window took 96 columns for its 64 outputs.
    const DENSE: bool = true;

    #[inline(always)]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 AVX2 tile out of bounds");
        if t.fits(MR) {
            // SAFETY: `self` proves AVX2; `fits` checked every byte read.
            unsafe {
                if A::SIGNED { tile::<true, true>(t, acc) } else { tile::<false, true>(t, acc) }
            }
        }
    }

    #[inline(always)]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 AVX2 tile out of bounds");
        if t.fits(MR) {
            // SAFETY: as in `act_rows`.
            unsafe {
                if A::SIGNED { tile::<true, true>(t, acc) } else { tile::<true, false>(t, acc) }
            }
        }
    }

    #[inline(always)]
    fn cols<Y: Q8>(self, acc: &[i32; NR], ch: &Chan16, out: &OutRange, dst: &mut [Y]) {
        let mut bytes = [0u8; 16];
        for h in 0..2 {
            let l = 8 * h;
            // SAFETY: `self` proves AVX2; every array read holds 16 lanes,
            // `l + 8 <= 16`, and `bytes[l..]` has room for 8.
            unsafe {
                let at = |p: *const i32| _mm256_loadu_si256(p.add(l).cast());
                let v = stage(
                    _mm256_loadu_si256(acc.as_ptr().add(l).cast()),
                    at(ch.add.as_ptr()),
                    at(ch.mult.as_ptr()),
                    at(ch.lsh.as_ptr().cast()),
                    at(ch.rsh.as_ptr().cast()),
                    at(ch.lo.as_ptr()),
                    at(ch.hi.as_ptr()),
                    out,
                );
                low_bytes(v, bytes.as_mut_ptr().add(l));
            }
        }
        let n = dst.len().min(16);
        Y::as_bytes_mut(dst)[..n].copy_from_slice(&bytes[..n]);
    }

    #[inline(always)]
    fn splat<Y: Q8>(self, acc: &[i32; NR], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
        if ch.t >= 33 {
            // SAFETY: `self` proves AVX2.
            return unsafe { splat_high(acc, ch, out, dst) };
        }
        let mut bytes = [0u8; 16];
        for h in 0..2 {
            let l = 8 * h;
            // SAFETY: as in `cols`.
            unsafe {
                let v = stage(
                    _mm256_loadu_si256(acc.as_ptr().add(l).cast()),
                    _mm256_set1_epi32(ch.add),
                    _mm256_set1_epi32(ch.mult),
                    _mm256_set1_epi32(ch.lsh as i32),
                    _mm256_set1_epi32(ch.rsh as i32),
                    _mm256_set1_epi32(ch.lo),
                    _mm256_set1_epi32(ch.hi),
                    out,
                );
                low_bytes(v, bytes.as_mut_ptr().add(l));
            }
        }
        let n = dst.len().min(16);
        Y::as_bytes_mut(dst)[..n].copy_from_slice(&bytes[..n]);
    }
}

/// `QMicro::interleave16` in SSE2 (every x86-64 has it): bytes then
/// halves unpacked, four stores.
#[inline(always)]
pub(crate) fn interleave16_sse2(
    dst: &mut [u8; 64],
    a: &[u8; 16],
    b: &[u8; 16],
    c: &[u8; 16],
    d: &[u8; 16],
) {
    // SAFETY: every pointer is to an array of the size loaded or stored.
    unsafe {
        let ld = |p: &[u8; 16]| _mm_loadu_si128(p.as_ptr().cast());
        let (a, b, c, d) = (ld(a), ld(b), ld(c), ld(d));
        let (ab_lo, ab_hi) = (_mm_unpacklo_epi8(a, b), _mm_unpackhi_epi8(a, b));
        let (cd_lo, cd_hi) = (_mm_unpacklo_epi8(c, d), _mm_unpackhi_epi8(c, d));
        let p = dst.as_mut_ptr();
        _mm_storeu_si128(p.cast(), _mm_unpacklo_epi16(ab_lo, cd_lo));
        _mm_storeu_si128(p.add(16).cast(), _mm_unpackhi_epi16(ab_lo, cd_lo));
        _mm_storeu_si128(p.add(32).cast(), _mm_unpacklo_epi16(ab_hi, cd_hi));
        _mm_storeu_si128(p.add(48).cast(), _mm_unpackhi_epi16(ab_hi, cd_hi));
    }
}

/// Sixteen `i16` from 16 bytes, sign- or zero-extended.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn widen(b: __m128i, signed: bool) -> __m256i {
    if signed { _mm256_cvtepi8_epi16(b) } else { _mm256_cvtepu8_epi16(b) }
}

/// `acc[r][c] += sum_g sum_q b(r, g, q) s(g, c, q)` for two rows, the
/// broadcast bytes (signed when `BS`) and the strip's (signed when `SS`)
/// widened to `i16`.
///
/// # Safety
/// AVX2 is available; `t.fits(2)`.
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn tile<const BS: bool, const SS: bool>(t: &Tile<'_>, acc: &mut Acc) {
    // c[r][q]: columns 4q..4q + 4 of row r, two pair sums per column.
    let mut c = [[_mm256_setzero_si256(); 4]; MR];
    let (b, s) = (t.bcast.as_ptr(), t.strip.as_ptr());
    for g in 0..t.groups {
        // SAFETY: `fits` covers the strip's group `g` and each row's four
        // bytes of it.
        unsafe {
            let a: [__m256i; MR] = core::array::from_fn(|r| {
                let four = b.add(t.rows[r] + g * t.gstep).cast::<i32>().read_unaligned();
                widen(_mm_set1_epi32(four), BS)
            });
            for q in 0..4 {
                let w = _mm_loadu_si128(s.add(g * GROUP_BYTES + 16 * q).cast());
                let w = widen(w, SS);
                for r in 0..MR {
                    c[r][q] = _mm256_add_epi32(c[r][q], _mm256_madd_epi16(w, a[r]));
                }
            }
        }
    }
    for (row, c) in acc.iter_mut().zip(c) {
        // hadd of quarters q and q + 1 gives, per 128-bit half, columns
        // (0, 1, 4, 5 | 2, 3, 6, 7) of the eight: put in order.
        let lo = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(c[0], c[1]));
        let hi = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_hadd_epi32(c[2], c[3]));
        let mut sum = [0i32; NR];
        // SAFETY: `sum` holds 16 `i32`s.
        unsafe {
            _mm256_storeu_si256(sum.as_mut_ptr().cast(), lo);
            _mm256_storeu_si256(sum.as_mut_ptr().add(8).cast(), hi);
        }
        for (d, s) in row.iter_mut().zip(sum) {
            *d = d.wrapping_add(s);
        }
    }
}

/// The output stage of eight sums (`requant.rs`'s vector form), clamped
/// to the output range.
///
/// # Safety
/// AVX2 is available.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn stage(
    v: __m256i,
    add: __m256i,
    mult: __m256i,
    lsh: __m256i,
    rsh: __m256i,
    lo: __m256i,
    hi: __m256i,
    out: &OutRange,
) -> __m256i {
    let v = _mm256_add_epi32(v, add);
    let v = _mm256_sllv_epi32(_mm256_min_epi32(_mm256_max_epi32(v, lo), hi), lsh);
    let one = _mm256_set1_epi64x(1 << 31);
    let round_e = _mm256_sllv_epi64(one, _mm256_and_si256(rsh, _mm256_set1_epi64x(0xffff_ffff)));
    let round_o = _mm256_sllv_epi64(one, _mm256_srli_epi64::<32>(rsh));
    let even = _mm256_add_epi64(_mm256_mul_epi32(v, mult), round_e);
    let odd = _mm256_mul_epi32(_mm256_srli_epi64::<32>(v), _mm256_srli_epi64::<32>(mult));
    let odd = _mm256_add_epi64(odd, round_o);
    // High halves: the even lanes' moved down (the bits that come in above
    // them are dropped by the blend), the odd lanes' in place.
    let r = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
    let r = _mm256_srav_epi32(r, rsh);
    let r = _mm256_add_epi32(r, _mm256_set1_epi32(out.zero));
    _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(out.min)), _mm256_set1_epi32(out.max))
}

/// [`QMicro::splat`] for a stage whose total shift `t` is at least 33, in
/// [`Chan::apply_scalar`]'s form: the high word `h` of `v mult`, then
/// `(h + 2^(t-33)) >> (t - 32)`, the zero point added and the result
/// saturated to `Y` by the packs (exact: `|h| <= 2^30`), then clamped to
/// the output range (within `Y`'s, so the clamp of the saturated value is
/// the clamp of the value).
///
/// # Safety
/// AVX2 is available; `ch.t >= 33`.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn splat_high<Y: Q8>(acc: &[i32; NR], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
    debug_assert!(ch.t >= 33, "q8 AVX2 splat_high shift");
    let (add, mult) = (_mm256_set1_epi32(ch.add), _mm256_set1_epi32(ch.mult));
    let half = _mm256_set1_epi32(1 << (ch.t - 33).min(30));
    let sh = _mm_cvtsi32_si128((ch.t - 32) as i32);
    let zero = _mm256_set1_epi32(out.zero);
    // SAFETY: AVX2 (this function's).
    let stage = |v: __m256i| unsafe { stage_high(v, add, mult, half, sh, zero) };
    // SAFETY: `acc` holds 16 `i32`s.
    let (lo, hi) = unsafe {
        let p = acc.as_ptr();
        (stage(_mm256_loadu_si256(p.cast())), stage(_mm256_loadu_si256(p.add(8).cast())))
    };
    // Per 128-bit half: lanes (0..4 | 4..8) of `lo` then of `hi` as i16,
    // then as bytes; the permute puts the four dwords in lane order.
    let w = _mm256_packs_epi32(lo, hi);
    let b = if Y::SIGNED { _mm256_packs_epi16(w, w) } else { _mm256_packus_epi16(w, w) };
    let b = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
        b,
        _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0),
    ));
    let b = if Y::SIGNED {
        _mm_min_epi8(_mm_max_epi8(b, _mm_set1_epi8(out.min as i8)), _mm_set1_epi8(out.max as i8))
    } else {
        _mm_min_epu8(
            _mm_max_epu8(b, _mm_set1_epi8(out.min as u8 as i8)),
            _mm_set1_epi8(out.max as u8 as i8),
        )
    };
    let bytes = Y::as_bytes_mut(dst);
    if let Some(d) = bytes.first_chunk_mut::<16>() {
        // SAFETY: `d` is 16 writable bytes.
        unsafe { _mm_storeu_si128(d.as_mut_ptr().cast(), b) }
    } else {
        let mut tmp = [0u8; 16];
        // SAFETY: `tmp` is 16 writable bytes.
        unsafe { _mm_storeu_si128(tmp.as_mut_ptr().cast(), b) }
        let n = bytes.len().min(16);
        bytes[..n].copy_from_slice(&tmp[..n]);
    }
}

/// [`Chan::apply_scalar`]'s high-word form on eight sums (a total shift
/// `t` of 33 or more): the high word `h` of `(v + add) mult`, then `(h +
/// half) >> sh` plus the output zero point, with `half = 2^(t-33)` and
/// `sh = t - 32` (the count in the low quadword), not yet clamped.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn stage_high(
    v: __m256i,
    add: __m256i,
    mult: __m256i,
    half: __m256i,
    sh: __m128i,
    zero: __m256i,
) -> __m256i {
    let v = _mm256_add_epi32(v, add);
    let even = _mm256_mul_epi32(v, mult);
    let odd = _mm256_mul_epi32(_mm256_srli_epi64::<32>(v), mult);
    // High words: the even lanes' moved down, the odd lanes' in place.
    let h = _mm256_blend_epi32::<0b1010_1010>(_mm256_srli_epi64::<32>(even), odd);
    _mm256_add_epi32(_mm256_sra_epi32(_mm256_add_epi32(h, half), sh), zero)
}

/// Stores the low byte of each of the eight lanes at `p`.
///
/// # Safety
/// AVX2 is available; `p..p + 8` is writable.
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn low_bytes(v: __m256i, p: *mut u8) {
    let pick = _mm256_setr_epi8(
        0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1, -1, -1,
        -1, -1, -1, -1, -1, -1, -1, -1,
    );
    let b = _mm256_shuffle_epi8(v, pick);
    let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    // SAFETY: the caller's bound.
    unsafe { _mm_storel_epi64(p.cast(), _mm256_castsi256_si128(b)) }
}
