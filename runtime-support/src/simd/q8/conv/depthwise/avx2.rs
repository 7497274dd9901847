//! Depthwise windows of stride 1 or 2 (no horizontal dilation) in AVX2,
//! over a padded plane (see the parent module).
//!
//! A window row's taps go in pairs `(kx, kx + 1)` (an odd last tap pairs
//! with a zero weight): eight outputs' pairs of inputs, widened to `i16`,
//! against the pair's weights repeated, are one `vpmaddwd` (exact: no
//! saturation), eight lanes of two products each, added into `i32` sums
//! held in registers through the window.
//!
//! - Stride 2: outputs `ox..ox + 8` read inputs `2 ox + kx` and the next
//!   one, so sixteen consecutive bytes widened are the eight pairs.
//! - Stride 1: inputs `ox + kx` and `ox + kx + 1`, so eight bytes and the
//!   eight from one further, interleaved. As in the parent's plain loop,
//!   several output rows are one run of positions `oy pitch + ox` (the
//!   positions between rows computed and dropped), so narrow planes fill
//!   whole vectors.

use crate::int8::Q8;
use crate::simd::isa::avx2::Avx2;
use crate::simd::q8::conv::Geom;
use crate::simd::q8::conv::depthwise::{ACC, ChannelKernel, PLANE_SLACK, Plane, copy_row};
use crate::simd::q8::gemm::micro::avx2::{low_bytes, stage};
use crate::simd::q8::requant::{Chan, OutRange};
use core::arch::x86_64::{
    __m128i, __m256i, _mm_loadl_epi64, _mm_loadu_si128, _mm_unpacklo_epi8, _mm256_add_epi32,
    _mm256_cvtepi8_epi16, _mm256_cvtepu8_epi16, _mm256_madd_epi16, _mm256_set1_epi32,
    _mm256_setzero_si256,
};

/// The most window rows and tap pairs per row the kernel takes (its
/// weights are held as `[[i32; MAX_PAIRS]; MAX_ROWS]`).
const MAX_ROWS: usize = 7;
const MAX_PAIRS: usize = 4;

/// Whether the window is one this kernel takes: stride 1 or 2
/// horizontally with no dilation there, any vertical stride and
/// dilation, at most 7x7.
pub(crate) fn fits(g: &Geom) -> bool {
    (g.sw == 1 || g.sw == 2)
        && g.dw == 1
        && (1..=MAX_ROWS).contains(&g.kh)
        && (1..=2 * MAX_PAIRS).contains(&g.kw)
        && g.ow > 0
        && g.oh > 0
}

/// The kernel: one channel, as the parent's [`ChannelKernel`] says (the
/// window [`fits`]).
#[derive(Clone, Copy)]
pub(crate) struct Kernel(pub Avx2);

impl ChannelKernel for Kernel {
    #[inline(always)]
    fn channel<A: Q8, Y: Q8>(
        self,
        g: &Geom,
        plane: &Plane,
        pad: &[u8],
        wc: &[i8],
        ch: &Chan,
        out: &OutRange,
        yp: &mut [Y],
    ) {
        let ok = fits(g)
            && wc.len() == g.kh * g.kw
            && yp.len() == g.oh * g.ow
            && plane.len().is_some_and(|n| n <= pad.len());
        debug_assert!(ok, "q8 AVX2 depthwise arguments");
        if ok {
            // SAFETY: `self` proves AVX2; the arguments were checked above,
            // and `body` checks each chunk's reach against `pad`.
            unsafe { channel_avx2::<A, Y>(g, plane, pad, wc, ch, out, yp) }
        }
    }
}

/// Bytes past the last position of a run a chunk of eight may read: seven
/// positions of the last chunk, then one byte of its last pair (stride 1)
/// or its sixteen-byte load (stride 2).
const OVERREAD: usize = 16;
const _: () = assert!(PLANE_SLACK >= OVERREAD);

/// One channel (see [`ChannelKernel::channel`]): [`body`] with the 3x3
/// window's loops unrolled, or the general one.
///
/// # Safety
/// AVX2 is available; the window [`fits`], `wc` holds its taps and `yp`
/// its outputs, `pad` at least `plane.len()` bytes.
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn channel_avx2<A: Q8, Y: Q8>(
    g: &Geom,
    plane: &Plane,
    pad: &[u8],
    wc: &[i8],
    ch: &Chan,
    out: &OutRange,
    yp: &mut [Y],
) {
    // SAFETY: the caller's.
    unsafe {
        match (g.kh, g.kw, g.sw) {
            (3, 3, 1) => body::<A, Y, 3, 2, 1>(g, plane, pad, wc, ch, out, yp),
            (3, 3, 2) => body::<A, Y, 3, 2, 2>(g, plane, pad, wc, ch, out, yp),
            (_, _, 1) => body::<A, Y, 0, 0, 1>(g, plane, pad, wc, ch, out, yp),
            _ => body::<A, Y, 0, 0, 2>(g, plane, pad, wc, ch, out, yp),
        }
    }
}

/// [`channel_avx2`] at horizontal stride `S`, with `KH` window rows of
/// `P` tap pairs (both 0: the geometry's, in loops). A function of its
/// own with AVX2 enabled, so its closure is compiled for AVX2 too.
///
/// # Safety
/// As [`channel_avx2`].
#[target_feature(enable = "avx2")]
#[inline]
#[allow(clippy::too_many_arguments)]
unsafe fn body<A: Q8, Y: Q8, const KH: usize, const P: usize, const S: usize>(
    g: &Geom,
    plane: &Plane,
    pad: &[u8],
    wc: &[i8],
    ch: &Chan,
    out: &OutRange,
    yp: &mut [Y],
) {
    let pitch = plane.cols;
    let (kh, pairs) = if KH > 0 { (KH, P) } else { (g.kh, g.kw.div_ceil(2)) };
    debug_assert!(kh == g.kh && pairs == g.kw.div_ceil(2) && S == g.sw);
    // Pair `j` of row `ky`: `(w[ky][2j], w[ky][2j + 1] or 0)` as two `i16`.
    let mut w = [[0i32; MAX_PAIRS]; MAX_ROWS];
    for (ky, row) in w.iter_mut().enumerate().take(kh) {
        for (j, v) in row.iter_mut().enumerate().take(pairs) {
            let lo = i32::from(wc[ky * g.kw + 2 * j]) & 0xffff;
            let hi = if 2 * j + 1 < g.kw { i32::from(wc[ky * g.kw + 2 * j + 1]) } else { 0 };
            *v = lo | hi << 16;
        }
    }
    // The furthest byte a chunk reads past its first: the last window
    // row's last pair's sixteen bytes (at stride 1, nine of them used).
    let reach = (kh - 1) * g.dh * pitch + 2 * (pairs - 1) + 16;
    // The output stage's constants, once per channel.
    let (add, mult) = (_mm256_set1_epi32(ch.add), _mm256_set1_epi32(ch.mult));
    let (lsh, rsh) = (_mm256_set1_epi32(ch.lsh as i32), _mm256_set1_epi32(ch.rsh as i32));
    let (lo, hi) = (_mm256_set1_epi32(ch.lo), _mm256_set1_epi32(ch.hi));
    // Eight outputs whose first input is `pad[at]`, through the output
    // stage, their bytes stored at `dst[..8]`.
    let eight = |at: usize, dst: &mut [u8]| {
        let (Some(src), Some(d)) = (pad.get(at..at + reach), dst.first_chunk_mut::<8>()) else {
            debug_assert!(false, "q8 AVX2 depthwise chunk out of bounds");
            return;
        };
        let mut s = _mm256_setzero_si256();
        for (ky, wr) in w.iter().enumerate().take(kh) {
            for (j, &wp) in wr.iter().enumerate().take(pairs) {
                let at = ky * g.dh * pitch + 2 * j;
                // SAFETY: `at + 16 <= reach = src.len()`.
                let x = unsafe {
                    let p = src.as_ptr().add(at);
                    if S == 2 {
                        _mm_loadu_si128(p.cast())
                    } else {
                        _mm_unpacklo_epi8(
                            _mm_loadl_epi64(p.cast()),
                            _mm_loadl_epi64(p.add(1).cast()),
                        )
                    }
                };
                let wp = _mm256_set1_epi32(wp);
                // SAFETY: AVX2 (this function's).
                s = _mm256_add_epi32(s, _mm256_madd_epi16(unsafe { widen::<A>(x) }, wp));
            }
        }
        // SAFETY: AVX2 (this function's); `d` is 8 writable bytes.
        unsafe { low_bytes(stage(s, add, mult, lsh, rsh, lo, hi, out), d.as_mut_ptr()) }
    };
    let ybytes = Y::as_bytes_mut(yp);
    let mut tmp = [0u8; ACC];
    // Narrow planes at stride 1: runs of whole rows, as the parent's
    // `channel_runs`, in chunks of eight positions (`len <= ACC - 8`),
    // each output row's bytes then taken from its run.
    if S == 1 && g.sh == 1 && g.ow + 8 <= ACC && pitch + 8 <= ACC && g.ow < 32 {
        let per = (ACC - 8 - g.ow) / pitch + 1;
        for (i, yc) in ybytes.chunks_mut(per * g.ow).enumerate() {
            let nr = yc.len() / g.ow;
            let len = (nr - 1) * pitch + g.ow;
            for c in 0..len.div_ceil(8) {
                eight(i * per * pitch + 8 * c, &mut tmp[8 * c..]);
            }
            for (r, yr) in yc.chunks_exact_mut(g.ow).enumerate() {
                copy_row(yr, &tmp[r * pitch..r * pitch + g.ow]);
            }
        }
    } else {
        // Row by row: whole chunks straight into the row, the last one
        // through `tmp`.
        for (oy, yr) in ybytes.chunks_exact_mut(g.ow).enumerate() {
            let at = oy * g.sh * pitch;
            let whole = g.ow / 8;
            for c in 0..whole {
                eight(at + 8 * c * g.sw, &mut yr[8 * c..]);
            }
            let rest = g.ow - 8 * whole;
            if rest > 0 {
                eight(at + 8 * whole * g.sw, &mut tmp);
                yr[8 * whole..].copy_from_slice(&tmp[..rest]);
            }
        }
    }
}

/// Sixteen bytes as `i16`, sign- or zero-extended as `A`'s values.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn widen<A: Q8>(b: __m128i) -> __m256i {
    if A::SIGNED { _mm256_cvtepi8_epi16(b) } else { _mm256_cvtepu8_epi16(b) }
}
