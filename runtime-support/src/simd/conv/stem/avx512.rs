//! Convolutions with few input channels (a network's stem: 3 -> 16..64
//! channels, 3x3 or 7x7, stride 1 or 2) on AVX-512, with the output
//! channels in the vector lanes.
//!
//! The pixel-in-lanes kernels ([`crate::simd::conv::direct`], the im2col product) need
//! the inputs of 16 consecutive output pixels contiguous, so a strided
//! convolution first copies its input into phase planes; with 3 input
//! channels and 16 or 32 output channels that copy and the per-tile work
//! cost as much as the multiply-adds. Here a tile is 16 output pixels of one
//! output row by 16 output channels: for every tap `(c, ky, kx)` the tile
//! loads the tap's 16 weights (one per output channel) and, for each pixel,
//! broadcasts its one input value straight from the input row, whatever the
//! stride. The 16 sums of a pixel then hold its 16 channels; after the bias
//! and activation, a 16x16 transpose in registers turns them into 16
//! channel rows of 16 pixels, stored in place in the NCHW output.
//!
//! The staging of the input rows, the weights and which shapes are taken
//! are [`super`]'s, shared with the AVX2 tile.
//!
//! Measured on Zen 4 (conv bench, fastest of 30 runs), against the staged
//! pixel-in-lanes kernel: MobileNet's 3 -> 16 3x3 stride 2 at 224x224
//! 0.195 -> 0.152 ms, EfficientNet's 3 -> 32 0.405 -> 0.282, SqueezeNet's
//! unpadded 3 -> 64 0.651 -> 0.527, ResNet's 3 -> 64 7x7 stride 2 2.45 ->
//! 2.23 (90% of the FMA peak); ResNet-8's 3 -> 16 at 32x32 and VWW's 3 ->
//! 8 at 96x96 the same. A first version that kept the sums in an array
//! passed by reference to the activation ran twice slower: the compiler
//! stored every sum after every multiply-add.

use super::{Epi, Shape, StemTile, fits};
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx512::{Avx512, activate};
use crate::simd::math::VFunc;
use crate::simd::math::vexp::eval512;
use core::arch::x86_64::{
    __m512, __mmask16, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps,
    _mm512_set1_ps, _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_shuffle_ps, _mm512_unpackhi_ps,
    _mm512_unpacklo_ps,
};

/// Output pixels per tile (the transpose's side).
const P: usize = 16;
/// Output channels per tile: one vector.
const L: usize = 16;

impl StemTile for Avx512 {
    const P: usize = P;
    const L: usize = L;
    const MAX_CIN: usize = 4;
    /// Measured (conv bench, against the staged kernel): 16 -> 32 3x3/2
    /// at 64x64 0.183 -> 0.102 ms, at 32x32 (ResNet-8's) 0.043 -> 0.028,
    /// 16 -> 64 at 56x56 0.203 -> 0.167, 8 -> 16 at 32x32 0.016 -> 0.009;
    /// at stride 1 16 channels ran 5-15% slower (16 -> 16 at 32x32 0.055
    /// -> 0.064).
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
        // SAFETY: `self` proves AVX-512F is present; `fits` checked every read
        // and write of the tile within the slices.
        unsafe { tile512::<SX>(rows, lx, kw, dx, src, wts.as_ptr(), epi, dst, ldd, ch, np) }
    }
}

/// See [`StemTile::tile`]; the caller guarantees its bounds ([`fits`]):
/// the staged rows at `src + r * lx + p * SX + kx * dx`, the weights at
/// `wts + t * L + j`, the bias at `j < L`, `dst` at `c * ldd + p` for `c <
/// ch`, `p < np`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn tile512<const SX: usize>(
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
    let mut acc = [_mm512_setzero_ps(); P];
    let mut t = 0;
    // SAFETY (the loop, the bias, the stores): as the caller guarantees.
    unsafe {
        for r in 0..rows {
            let row = src.add(r * lx);
            for kx in 0..kw {
                let wv = _mm512_loadu_ps(wts.add(t * L));
                let at = row.add(kx * dx);
                for (p, sum) in acc.iter_mut().enumerate() {
                    *sum = _mm512_fmadd_ps(_mm512_set1_ps(*at.add(p * SX)), wv, *sum);
                }
                t += 1;
            }
        }
        if let Some(b) = bias {
            let bv = _mm512_loadu_ps(b);
            for sum in &mut acc {
                *sum = _mm512_add_ps(*sum, bv);
            }
        }
        // The activation by value (a call taking the sums by reference
        // kept them in memory during the whole loop).
        if act != Activation::None {
            for v in acc.iter_mut() {
                *v = activate(*v, act);
            }
        }
        if let Some(f) = smooth {
            for v in acc.iter_mut() {
                *v = eval512(f, *v);
            }
        }
        let out = transpose(acc);
        let mask: __mmask16 = if np >= P { 0xffff } else { ((1u32 << np) - 1) as __mmask16 };
        for (c, v) in out.iter().enumerate().take(ch) {
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(c * ldd), mask, *v);
        }
    }
}

/// The 16x16 transpose: lane `j` of vector `i` becomes lane `i` of vector
/// `j`. Four rounds of 16 shuffles: pairs of rows interleaved, then
/// quadruples within each 128-bit lane, then 128-bit lanes across the
/// vectors twice.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(r: [__m512; 16]) -> [__m512; 16] {
    // t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved, per 128-bit lane
    // `q`, at channels 4q, 4q + 1 and 4q + 2, 4q + 3.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4q + e], per 128-bit lane `l`: rows 4q..4q + 4 at channel 4l + e.
    let mut u = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        let (a, b, c, d) = (t[4 * q], t[4 * q + 1], t[4 * q + 2], t[4 * q + 3]);
        u[4 * q] = _mm512_shuffle_ps::<0x44>(a, c);
        u[4 * q + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
        u[4 * q + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        u[4 * q + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
    }
    // v[h][e] (rows 8h..8h + 8): lanes (rows 8h..+4, ch e), (8h..+4, ch
    // 8 + e), (8h + 4..+4, ch e), (8h + 4..+4, ch 8 + e); w[h][e] the same
    // at channels 4 + e and 12 + e.
    let mut v = [[_mm512_setzero_ps(); 4]; 2];
    let mut w = [[_mm512_setzero_ps(); 4]; 2];
    for h in 0..2 {
        for e in 0..4 {
            let (a, b) = (u[8 * h + e], u[8 * h + 4 + e]);
            v[h][e] = _mm512_shuffle_f32x4::<0x88>(a, b);
            w[h][e] = _mm512_shuffle_f32x4::<0xDD>(a, b);
        }
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for e in 0..4 {
        out[e] = _mm512_shuffle_f32x4::<0x88>(v[0][e], v[1][e]);
        out[8 + e] = _mm512_shuffle_f32x4::<0xDD>(v[0][e], v[1][e]);
        out[4 + e] = _mm512_shuffle_f32x4::<0x88>(w[0][e], w[1][e]);
        out[12 + e] = _mm512_shuffle_f32x4::<0xDD>(w[0][e], w[1][e]);
    }
    out
}

/// Rows `0..16` of a 16-wide patch layout: `dst[kx * stride + c] =
/// src[c * 16 + kx]` for `c < len` and `kx < 16`, sixteen columns at a
/// time through [`transpose`] (the last block's missing patches as zeros,
/// its stores masked). `false`, nothing written, when the slices are too
/// short.
pub(in crate::simd) fn patch16(
    _cpu: Avx512,
    src: &[f32],
    len: usize,
    dst: &mut [f32],
    stride: usize,
) -> bool {
    let dst_need = 15usize.checked_mul(stride).and_then(|v| v.checked_add(len));
    let src_need = len.checked_mul(16);
    if src_need.is_none_or(|v| v > src.len()) || dst_need.is_none_or(|v| v > dst.len()) {
        return false;
    }
    // SAFETY: `_cpu` proves AVX-512F; the lengths were checked above.
    unsafe { patch16_blocks(src, len, dst, stride) };
    true
}

/// [`patch16`]'s loop. Safety: AVX-512F is present, `src` holds `len * 16`
/// floats and `dst` at least `15 * stride + len`.
#[target_feature(enable = "avx512f")]
unsafe fn patch16_blocks(src: &[f32], len: usize, dst: &mut [f32], stride: usize) {
    for c0 in (0..len).step_by(16) {
        let n = (len - c0).min(16);
        // SAFETY (loads and stores): patch `c0 + i < len` is
        // `src[(c0 + i) * 16..][..16]`, inside `src`, and row `kx` of the
        // output is `dst[kx * stride + c0..][..n]`, inside `dst` (the
        // caller's bounds); the store writes the first `n` lanes only.
        let rows: [__m512; 16] = core::array::from_fn(|i| {
            if i < n {
                unsafe { _mm512_loadu_ps(src.as_ptr().add((c0 + i) * 16)) }
            } else {
                _mm512_setzero_ps()
            }
        });
        let keep: __mmask16 = if n == 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 };
        for (kx, v) in transpose(rows).into_iter().enumerate() {
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr().add(kx * stride + c0), keep, v) };
        }
    }
}

/// `__m512` as 16 floats, for the tests.
#[cfg(test)]
fn lanes(v: __m512) -> [f32; 16] {
    // SAFETY: both are 64 bytes of plain data.
    unsafe { core::mem::transmute::<__m512, [f32; 16]>(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::conv::stem::tests::{Case, Hooks, REFUSED, STRIDED, TAKEN, check_all};
    use crate::simd::gemm::micro::Micro;

    #[test]
    fn stems_match_the_staged_kernel_and_the_exact_conv() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        let hooks = Hooks {
            pass: &|smooth, y| smooth.apply_all(y),
            other: &|g, cin, m, x, view, b, act, y| {
                crate::simd::conv::direct::conv2d_with(cpu, g, cin, m, x, view, b, act, y, false)
            },
        };
        // Too few output channels or pixels for the lanes.
        let narrow: &[Case] = &[
            ([1, 6, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 8, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([8, 16, 9, 34], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ];
        // Up to 16 input channels at stride 2 (ResNet-8's 16 -> 32).
        let taken = [TAKEN, STRIDED].concat();
        let refused = [REFUSED, narrow].concat();
        let compared = check_all(cpu, &taken, &refused, &hooks);
        assert!(compared >= 18, "{compared} cases compared with the staged kernel");
    }

    #[test]
    fn transpose_swaps_rows_and_lanes() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        let got = cpu.within(|| {
            let rows: [__m512; 16] = core::array::from_fn(|i| {
                let vals: [f32; 16] = core::array::from_fn(|j| (i * 16 + j) as f32);
                // SAFETY: `vals` holds 16 floats.
                unsafe { _mm512_loadu_ps(vals.as_ptr()) }
            });
            // SAFETY: inside `within`, AVX-512F is present.
            unsafe { transpose(rows) }.map(lanes)
        });
        for (j, row) in got.iter().enumerate() {
            for (i, v) in row.iter().enumerate() {
                assert_eq!(*v, (i * 16 + j) as f32, "lane {i} of vector {j}");
            }
        }
    }
}
