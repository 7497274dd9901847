//! Convolutions with few input channels (a network's stem: 3 -> 8..64
//! channels, 3x3 or 7x7, stride 1 or 2) on AVX2 and FMA, with the output
//! channels in the vector lanes: [`super`]'s algorithm on eight lanes.
//!
//! A tile is 8 output pixels of one output row by 8 output channels: eight
//! sums, one `ymm` register each, so the two FMA units, four cycles of
//! latency each, always have eight independent sums to work on; per tap
//! one load of the weights and eight broadcasts, which the three load
//! ports keep up with. Larger tiles do not fit the sixteen registers: 8
//! pixels by 16 channels need 16 sums and two weight vectors.
//!
//! Measured against the im2col product AVX2 had before (AMD EPYC Zen 3,
//! AVX2 only, 2-core VM; `tools/stepprof.py`, fastest of 300 runs): VWW's
//! 3 -> 8 3x3 stride 2 at 96x96 0.069 -> 0.025 ms, ResNet-8's 3 -> 16 3x3
//! at 32x32 0.034 -> 0.022 and its 16 -> 32 3x3 stride 2 0.058 -> 0.041,
//! LeNet-5's 1 -> 6 5x5 at 28x28 0.017 -> 0.010, MobileNetV2's 3 -> 32 3x3
//! stride 2 at 224x224 0.841 -> 0.499, ResNet-18's 3 -> 64 7x7 stride 2
//! 3.96 -> 3.35 (about 90% of the FMA peak at the 2.45 GHz base clock).
//! Tiles of 12 pixels (an 8x8 and a 4x8 transpose, twelve sums) ran 10%
//! slower on the last two and no faster on the others; a loop over a
//! constant 3 taps per row no faster either.

use super::{Epi, Shape, StemTile, fits};
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx2::Avx2;
use crate::simd::lanes::activate;
use crate::simd::math::VFunc;
use crate::simd::math::vexp::eval256;
use core::arch::x86_64::{
    __m256, _mm256_add_ps, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_permute2f128_ps,
    _mm256_set1_ps, _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_storeu_ps, _mm256_unpackhi_ps,
    _mm256_unpacklo_ps,
};

/// Output pixels per tile (the transpose's side).
const P: usize = 8;
/// Output channels per tile: one vector.
const L: usize = 8;

impl StemTile for Avx2 {
    const P: usize = P;
    const L: usize = L;
    const MAX_CIN: usize = 4;
    /// ResNet-8's 16 -> 32 3x3 stride 2 at 32x32: 0.058 -> 0.041 ms
    /// against the im2col product.
    const MAX_CIN_STRIDED: usize = 16;

    #[inline(always)]
    fn tile<const SX: usize>(
        self,
        s: &Shape,
        band: &[f32],
        off: usize,
        wts: &[f32],
        (bias, act, smooth): Epi<'_>,
        dst: &mut [f32],
        ldd: usize,
        ch: usize,
        np: usize,
    ) {
        if !fits::<Self, SX>(s, band, off, wts, bias, dst, ldd, ch, np) {
            return;
        }
        let epi = (bias.map(|b| b.as_ptr()), act, smooth);
        let src = band.as_ptr().wrapping_add(off);
        let (rows, lx, kw, dx) = (s.rows, s.lx, s.kw(), s.dx());
        // SAFETY: `self` proves AVX2 and FMA are present; `fits` checked every read
        // and write of the tile within the slices.
        unsafe { tile256::<SX>(self, rows, lx, kw, dx, src, wts.as_ptr(), epi, dst, ldd, ch, np) }
    }
}

/// See [`StemTile::tile`]; the caller guarantees its bounds ([`fits`]):
/// the staged rows at `src + r * lx + p * SX + kx * dx`, the weights at
/// `wts + t * L + j`, the bias at `j < L`, `dst` at `c * ldd + p` for `c <
/// ch`, `p < np`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile256<const SX: usize>(
    cpu: Avx2,
    rows: usize,
    lx: usize,
    kw: usize,
    dx: usize,
    src: *const f32,
    wts: *const f32,
    (bias, act, smooth): (Option<*const f32>, Activation, Option<VFunc>),
    dst: &mut [f32],
    ldd: usize,
    ch: usize,
    np: usize,
) {
    let mut acc = [_mm256_setzero_ps(); P];
    let mut t = 0;
    // SAFETY (the loop, the bias, the stores): as the caller guarantees.
    unsafe {
        for r in 0..rows {
            let row = src.add(r * lx);
            for kx in 0..kw {
                let wv = _mm256_loadu_ps(wts.add(t * L));
                let at = row.add(kx * dx);
                for (p, sum) in acc.iter_mut().enumerate() {
                    *sum = _mm256_fmadd_ps(_mm256_set1_ps(*at.add(p * SX)), wv, *sum);
                }
                t += 1;
            }
        }
        if let Some(b) = bias {
            let bv = _mm256_loadu_ps(b);
            for sum in &mut acc {
                *sum = _mm256_add_ps(*sum, bv);
            }
        }
        // The activations by value, as on AVX-512 (sums passed by
        // reference stay in memory during the whole loop).
        if act != Activation::None {
            for v in acc.iter_mut() {
                *v = activate(cpu, *v, act);
            }
        }
        if let Some(f) = smooth {
            eval256(f, &mut acc);
        }
        let out = transpose(acc);
        if np >= P {
            for (c, v) in out.iter().enumerate().take(ch) {
                _mm256_storeu_ps(dst.as_mut_ptr().add(c * ldd), *v);
            }
        } else {
            // A row's last pixels: through a buffer (a masked store,
            // `vmaskmovps`, is slow on AMD cores).
            let mut buf = [0.0f32; P];
            for (c, v) in out.iter().enumerate().take(ch) {
                _mm256_storeu_ps(buf.as_mut_ptr(), *v);
                core::ptr::copy_nonoverlapping(buf.as_ptr(), dst.as_mut_ptr().add(c * ldd), np);
            }
        }
    }
}

/// The 8x8 transpose: lane `j` of vector `i` becomes lane `i` of vector
/// `j`. Three rounds of eight shuffles: pairs of rows interleaved, then
/// quadruples within each 128-bit lane, then 128-bit lanes across the
/// vectors.
#[target_feature(enable = "avx2")]
#[inline]
fn transpose(r: [__m256; 8]) -> [__m256; 8] {
    // t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved, per 128-bit lane
    // `q`, at columns 4q, 4q + 1 and 4q + 2, 4q + 3.
    let mut t = [_mm256_setzero_ps(); 8];
    for i in 0..4 {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4h + e], per 128-bit lane `q`: rows 4h..4h + 4 at column 4q + e.
    let mut u = [_mm256_setzero_ps(); 8];
    for h in 0..2 {
        let (a, b, c, d) = (t[4 * h], t[4 * h + 1], t[4 * h + 2], t[4 * h + 3]);
        u[4 * h] = _mm256_shuffle_ps::<0x44>(a, c);
        u[4 * h + 1] = _mm256_shuffle_ps::<0xEE>(a, c);
        u[4 * h + 2] = _mm256_shuffle_ps::<0x44>(b, d);
        u[4 * h + 3] = _mm256_shuffle_ps::<0xEE>(b, d);
    }
    // Column e (low lanes of u[e], u[4 + e]) and column 4 + e (their high
    // lanes).
    let mut out = [_mm256_setzero_ps(); 8];
    for e in 0..4 {
        out[e] = _mm256_permute2f128_ps::<0x20>(u[e], u[4 + e]);
        out[4 + e] = _mm256_permute2f128_ps::<0x31>(u[e], u[4 + e]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::conv::stem::tests::{Case, Hooks, REFUSED, STRIDED, TAKEN, check_all};
    use crate::simd::gemm::micro::Micro;

    #[test]
    fn stems_match_the_model_and_the_exact_conv() {
        let Some(cpu) = crate::simd::tests::avx2() else { return };
        let hooks = Hooks {
            pass: &|smooth, y| {
                let f = smooth.vector().unwrap();
                crate::simd::math::vexp::apply_avx2(cpu, f, y);
            },
            other: &|_, _, _, _, _, _, _, _| false,
        };
        // Eight channels or fewer fill the lanes.
        let narrow: &[Case] = &[
            ([1, 6, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 8, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 8, 13, 97], [3, 3], [2, 2], [1, 1], [0, 1, 1, 1]),
        ];
        // Output rows filling less than three quarters of their tiles (5
        // of 8 pixels).
        let short: &[Case] = &[([3, 16, 9, 9], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1])];
        // Up to 16 input channels at stride 2 (ResNet-8's 16 -> 32).
        let taken = [TAKEN, STRIDED, narrow].concat();
        let refused = [REFUSED, short].concat();
        check_all(cpu, &taken, &refused, &hooks);
    }

    #[test]
    fn transpose_swaps_rows_and_lanes() {
        let Some(cpu) = crate::simd::tests::avx2() else { return };
        let got = cpu.within(|| {
            let rows: [__m256; 8] = core::array::from_fn(|i| {
                let vals: [f32; 8] = core::array::from_fn(|j| (i * 8 + j) as f32);
                // SAFETY: `vals` holds 8 floats.
                unsafe { _mm256_loadu_ps(vals.as_ptr()) }
            });
            // SAFETY: inside `within`, AVX2 is present.
            let out = unsafe { transpose(rows) };
            // SAFETY: both are 32 bytes of plain data.
            out.map(|v| unsafe { core::mem::transmute::<__m256, [f32; 8]>(v) })
        });
        for (j, row) in got.iter().enumerate() {
            for (i, v) in row.iter().enumerate() {
                assert_eq!(*v, (i * 8 + j) as f32, "lane {i} of vector {j}");
            }
        }
    }
}
