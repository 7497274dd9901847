//! The AVX-VNNI tile: four rows of 16 `i32` columns, each row two `ymm`
//! sums, one 256-bit `vpdpbusd` per half row and group of four `k`
//! (unsigned bytes times signed bytes, exact: no saturation), for cores
//! with AVX-VNNI but no AVX-512 (Alder Lake and later client cores,
//! Zen 5 desktop parts). Signed activations get their top bit flipped
//! (`a + 128`), which [`QMicro::offset`] reports, as in the AVX-512 VNNI
//! tile. The output stage, the im2col interleave and the block layout are
//! the AVX2 kernel's (the interleave is every x86-64 kernel's).
//!
//! Registers: eight sums, the strip group's two halves, a broadcast and
//! the flip. Six rows (twelve sums, all sixteen `ymm`) ran about 10%
//! slower on the output channel counts of real layers (64 to 256: four
//! divides them, six leaves a part tile).

use crate::int8::Q8;
use crate::simd::isa::avx2::AvxVnni;
use crate::simd::q8::gemm::WithKernel;
use crate::simd::q8::gemm::micro::avx2::Q8Avx2;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, MAX_MR, NR, QMicro, Tile, dpbusd_flip};
use crate::simd::q8::requant::{Chan, Chan16, OutRange};
use core::arch::x86_64::{
    __m256i, _mm256_dpbusd_avx_epi32, _mm256_loadu_si256, _mm256_set1_epi32, _mm256_setzero_si256,
    _mm256_storeu_si256, _mm256_xor_si256,
};

/// Rows of the tile.
const MR: usize = 4;
const _: () = assert!(MR <= MAX_MR);

/// The AVX-VNNI tile kernel.
#[derive(Clone, Copy)]
pub(crate) struct Q8AvxVnni(AvxVnni);

impl Q8AvxVnni {
    /// `Some` when the CPU has AVX2, FMA and AVX-VNNI under the ISA cap.
    #[inline]
    pub(crate) fn detect() -> Option<Q8AvxVnni> {
        AvxVnni::detect().map(Q8AvxVnni)
    }

    /// Runs `body` compiled for AVX-VNNI: the driver's loops, the tile,
    /// its output stage and stores inline into one function.
    #[inline]
    pub(crate) fn run<B: WithKernel>(self, body: B) {
        // SAFETY: `self` proves AVX2, FMA and AVX-VNNI; `body.run` is safe
        // code.
        unsafe { run_avxvnni(self, body) }
    }

    /// The AVX2 kernel, for the parts the two share.
    #[inline(always)]
    fn avx2(self) -> Q8Avx2 {
        Q8Avx2::from_token(self.0.avx2())
    }
}

#[target_feature(enable = "avx2,fma,avxvnni")]
#[inline]
fn run_avxvnni<B: WithKernel>(k: Q8AvxVnni, body: B) {
    body.run(k)
}

impl QMicro for Q8AvxVnni {
    const MR: usize = MR;

    #[inline(always)]
    fn offset<A: Q8>(self) -> i32 {
        if A::SIGNED { 128 } else { 0 }
    }

    #[inline(always)]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 AVX-VNNI tile out of bounds");
        if t.fits(MR) {
            // SAFETY: `self` proves AVX-VNNI; `fits` checked every byte
            // the loads read.
            unsafe { tile::<true>(t, dpbusd_flip::<A>(), acc) }
        }
    }

    #[inline(always)]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 AVX-VNNI tile out of bounds");
        if t.fits(MR) {
            // SAFETY: as in `act_rows`.
            unsafe { tile::<false>(t, dpbusd_flip::<A>(), acc) }
        }
    }

    #[inline(always)]
    fn cols<Y: Q8>(self, acc: &[i32; NR], ch: &Chan16, out: &OutRange, dst: &mut [Y]) {
        self.avx2().cols(acc, ch, out, dst)
    }

    #[inline(always)]
    fn splat<Y: Q8>(self, acc: &[i32; NR], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
        self.avx2().splat(acc, ch, out, dst)
    }
}

/// `acc[r] += sum_g dpbusd(rows' four bytes, strip)` for four rows: with
/// `ROWS` the broadcast bytes are the activations (flipped before the
/// broadcast), otherwise the strip's (flipped as loaded).
///
/// # Safety
/// AVX2 and AVX-VNNI are available; `t.fits(MR)`.
#[target_feature(enable = "avx2,avxvnni")]
#[inline]
unsafe fn tile<const ROWS: bool>(t: &Tile<'_>, flip: i32, acc: &mut Acc) {
    let flip_v = _mm256_set1_epi32(flip);
    let mut c = [[_mm256_setzero_si256(); 2]; MR];
    let (b, s) = (t.bcast.as_ptr(), t.strip.as_ptr());
    for g in 0..t.groups {
        // SAFETY: `fits` covers the strip's group `g` (64 bytes) and each
        // row's four bytes of it.
        unsafe {
            let at = s.add(g * GROUP_BYTES);
            let w = [_mm256_loadu_si256(at.cast()), _mm256_loadu_si256(at.add(32).cast())];
            let w = if ROWS { w } else { w.map(|w| _mm256_xor_si256(w, flip_v)) };
            for (r, c) in c.iter_mut().enumerate() {
                let four = b.add(t.rows[r] + g * t.gstep).cast::<i32>().read_unaligned();
                if ROWS {
                    let a = _mm256_set1_epi32(four ^ flip);
                    c[0] = _mm256_dpbusd_avx_epi32(c[0], a, w[0]);
                    c[1] = _mm256_dpbusd_avx_epi32(c[1], a, w[1]);
                } else {
                    let a = _mm256_set1_epi32(four);
                    c[0] = _mm256_dpbusd_avx_epi32(c[0], w[0], a);
                    c[1] = _mm256_dpbusd_avx_epi32(c[1], w[1], a);
                }
            }
        }
    }
    for (row, c) in acc.iter_mut().zip(c) {
        let mut sum = [0i32; NR];
        // SAFETY: `sum` holds 16 `i32`s.
        unsafe {
            _mm256_storeu_si256(sum.as_mut_ptr().cast(), c[0]);
            _mm256_storeu_si256(sum.as_mut_ptr().add(8).cast::<__m256i>(), c[1]);
        }
        for (d, s) in row.iter_mut().zip(sum) {
            *d = d.wrapping_add(s);
        }
    }
}
