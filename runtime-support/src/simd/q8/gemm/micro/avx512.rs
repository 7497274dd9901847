//! The AVX-512 VNNI tile: eight rows of 16 `i32` lanes, one `vpdpbusd`
//! per row and group of four `k` (unsigned activations times signed
//! weights, exact: no saturation). Signed activations get their top bit
//! flipped (`a + 128`), which [`QMicro::offset`] reports.

use crate::int8::Q8;
use crate::simd::isa::avx512::Avx512Vnni;
use crate::simd::q8::gemm::WithKernel;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, MAX_MR, NR, QMicro, Tile, dpbusd_flip};
use crate::simd::q8::requant::{Chan, Chan16, OutRange};
use core::arch::x86_64::{
    __m512i, __mmask16, _mm512_add_epi32, _mm512_add_epi64, _mm512_dpbusd_epi32,
    _mm512_loadu_si512, _mm512_mask_blend_epi32, _mm512_mask_cvtepi32_storeu_epi8,
    _mm512_max_epi32, _mm512_min_epi32, _mm512_mul_epi32, _mm512_set1_epi32, _mm512_set1_epi64,
    _mm512_setzero_si512, _mm512_sllv_epi32, _mm512_sllv_epi64, _mm512_srai_epi64,
    _mm512_srav_epi32, _mm512_srli_epi64, _mm512_storeu_si512, _mm512_xor_si512,
};

/// The AVX-512 VNNI tile kernel.
#[derive(Clone, Copy)]
pub(crate) struct Vnni(Avx512Vnni);

impl Vnni {
    /// `Some` when the CPU has AVX-512F, BW and VNNI under the ISA cap.
    #[inline]
    pub(crate) fn detect() -> Option<Vnni> {
        Avx512Vnni::detect().map(Vnni)
    }

    /// Runs `body` compiled for AVX-512 VNNI: the driver's loops, the
    /// tile, its output stage and stores inline into one function.
    #[inline]
    pub(crate) fn run<B: WithKernel>(self, body: B) {
        // SAFETY: `self` proves AVX-512F, BW and VNNI (and the AVX2 and
        // FMA they imply); `body.run` is safe code.
        unsafe { run_vnni(self, body) }
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni,avx2,fma")]
#[inline]
fn run_vnni<B: WithKernel>(k: Vnni, body: B) {
    body.run(k)
}

impl QMicro for Vnni {
    const MR: usize = 8;

    #[inline(always)]
    fn offset<A: Q8>(self) -> i32 {
        if A::SIGNED { 128 } else { 0 }
    }

    #[inline(always)]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(Self::MR), "q8 AVX-512 tile out of bounds");
        if t.fits(Self::MR) {
            // SAFETY: `self` proves AVX-512F, BW and VNNI; `fits` checked
            // every byte the loads read.
            unsafe { tile::<true>(t, dpbusd_flip::<A>(), acc) }
        }
    }

    #[inline(always)]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(Self::MR), "q8 AVX-512 tile out of bounds");
        if t.fits(Self::MR) {
            // SAFETY: as in `act_rows`.
            unsafe { tile::<false>(t, dpbusd_flip::<A>(), acc) }
        }
    }

    #[inline(always)]
    fn cols<Y: Q8>(self, acc: &[i32; NR], ch: &Chan16, out: &OutRange, dst: &mut [Y]) {
        // SAFETY: `self` proves AVX-512F; `stage` writes `dst.len()`
        // (at most 16) bytes at its start.
        unsafe {
            let v = stage(
                acc,
                _mm512_loadu_si512(ch.add.as_ptr().cast()),
                _mm512_loadu_si512(ch.mult.as_ptr().cast()),
                _mm512_loadu_si512(ch.lsh.as_ptr().cast()),
                _mm512_loadu_si512(ch.rsh.as_ptr().cast()),
                _mm512_loadu_si512(ch.lo.as_ptr().cast()),
                _mm512_loadu_si512(ch.hi.as_ptr().cast()),
                out,
            );
            store(v, dst);
        }
    }

    #[inline(always)]
    fn splat<Y: Q8>(self, acc: &[i32; NR], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
        // SAFETY: as in `cols`.
        unsafe {
            let v = stage(
                acc,
                _mm512_set1_epi32(ch.add),
                _mm512_set1_epi32(ch.mult),
                _mm512_set1_epi32(ch.lsh as i32),
                _mm512_set1_epi32(ch.rsh as i32),
                _mm512_set1_epi32(ch.lo),
                _mm512_set1_epi32(ch.hi),
                out,
            );
            store(v, dst);
        }
    }
}

/// `acc[r] += sum_g dpbusd(rows' four bytes, strip)`: with `ROWS` the
/// broadcast bytes are the (flipped) activations, otherwise the strip's.
///
/// # Safety
/// AVX-512F, BW and VNNI are available; `t.fits(8)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn tile<const ROWS: bool>(t: &Tile<'_>, flip: i32, acc: &mut Acc) {
    let flip = _mm512_set1_epi32(flip);
    let mut c = [_mm512_setzero_si512(); MAX_MR];
    let (b, s) = (t.bcast.as_ptr(), t.strip.as_ptr());
    for g in 0..t.groups {
        // SAFETY: `fits` covers the strip's group `g` and each row's four
        // bytes of it.
        unsafe {
            let w = _mm512_loadu_si512(s.add(g * GROUP_BYTES).cast());
            let w = if ROWS { w } else { _mm512_xor_si512(w, flip) };
            for (r, c) in c.iter_mut().enumerate() {
                let at = b.add(t.rows[r] + g * t.gstep);
                let a = _mm512_set1_epi32(at.cast::<i32>().read_unaligned());
                *c = if ROWS {
                    _mm512_dpbusd_epi32(*c, _mm512_xor_si512(a, flip), w)
                } else {
                    _mm512_dpbusd_epi32(*c, w, a)
                };
            }
        }
    }
    for (row, c) in acc.iter_mut().zip(c) {
        let mut sum = [0i32; NR];
        // SAFETY: `sum` holds 16 `i32`s.
        unsafe { _mm512_storeu_si512(sum.as_mut_ptr().cast(), c) };
        for (d, s) in row.iter_mut().zip(sum) {
            *d = d.wrapping_add(s);
        }
    }
}

/// The output stage of 16 sums (`requant.rs`'s vector form), clamped to
/// the output range.
///
/// # Safety
/// AVX-512F is available.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn stage(
    acc: &[i32; NR],
    add: __m512i,
    mult: __m512i,
    lsh: __m512i,
    rsh: __m512i,
    lo: __m512i,
    hi: __m512i,
    out: &OutRange,
) -> __m512i {
    // SAFETY: `acc` holds 16 `i32`s.
    let v = unsafe { _mm512_loadu_si512(acc.as_ptr().cast()) };
    let v = _mm512_add_epi32(v, add);
    let v = _mm512_sllv_epi32(_mm512_min_epi32(_mm512_max_epi32(v, lo), hi), lsh);
    // 2^(31 + rsh) per 64-bit lane, for the even and the odd `i32` lanes.
    let low = _mm512_set1_epi64(0xffff_ffff);
    let one = _mm512_set1_epi64(1 << 31);
    let round_e = _mm512_sllv_epi64(one, core::arch::x86_64::_mm512_and_si512(rsh, low));
    let round_o = _mm512_sllv_epi64(one, _mm512_srli_epi64::<32>(rsh));
    let even = _mm512_add_epi64(_mm512_mul_epi32(v, mult), round_e);
    let odd = _mm512_mul_epi32(_mm512_srli_epi64::<32>(v), _mm512_srli_epi64::<32>(mult));
    let odd = _mm512_add_epi64(odd, round_o);
    // High halves: the even lanes' moved down, the odd lanes' in place.
    let r = _mm512_mask_blend_epi32(0xaaaa, _mm512_srai_epi64::<32>(even), odd);
    let r = _mm512_srav_epi32(r, rsh);
    let r = _mm512_add_epi32(r, _mm512_set1_epi32(out.zero));
    _mm512_min_epi32(_mm512_max_epi32(r, _mm512_set1_epi32(out.min)), _mm512_set1_epi32(out.max))
}

/// Stores the low byte of the first `dst.len()` (at most 16) lanes.
///
/// # Safety
/// AVX-512F is available.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn store<Y: Q8>(v: __m512i, dst: &mut [Y]) {
    let n = dst.len().min(16);
    let mask: __mmask16 = if n >= 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 };
    // SAFETY: the mask covers `n` bytes, all within `dst`.
    unsafe { _mm512_mask_cvtepi32_storeu_epi8(Y::as_bytes_mut(dst).as_mut_ptr().cast(), mask, v) }
}
