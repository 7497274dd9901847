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
use crate::simd::q8::conv::copy_run;
use crate::simd::q8::conv::depthwise::{ACC, ChannelKernel, PLANE_SLACK, Plane};
use crate::simd::q8::gemm::micro::avx2::{low_bytes, stage, stage_high};
use crate::simd::q8::requant::{Chan, OutRange};
use core::arch::x86_64::{
    __m128i, __m256i, _mm_cvtsi32_si128, _mm_loadl_epi64, _mm_loadu_si128, _mm_storeu_si128,
    _mm_unpacklo_epi8, _mm256_add_epi32, _mm256_castsi256_si128, _mm256_cvtepi8_epi16,
    _mm256_cvtepu8_epi16, _mm256_loadu_si256, _mm256_madd_epi16, _mm256_max_epi32,
    _mm256_min_epi32, _mm256_packs_epi16, _mm256_packs_epi32, _mm256_packus_epi16,
    _mm256_permute4x64_epi64, _mm256_set1_epi32, _mm256_setzero_si256, _mm256_storeu_si256,
    _mm256_unpackhi_epi32, _mm256_unpacklo_epi32,
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

/// The `i16` copy of a narrow plane that [`runs_wide`] reads: made once
/// per convolution, zeros past the plane (the planes of one convolution
/// all have the same size, so those stay zero).
pub(crate) struct Wide([i16; WIDE]);

/// Halves of [`Wide`]: planes of up to `WIDE - ACC - 32` positions (26x26
/// padded, 24x24 outputs under a 3x3 window) take [`runs_wide`].
const WIDE: usize = 1024;

/// Planes of fewer positions than this (8x8 padded) keep the byte loads,
/// see [`runs_wide`].
const SMALL: usize = 128;

impl Default for Wide {
    fn default() -> Wide {
        Wide([0; WIDE])
    }
}

impl ChannelKernel for Kernel {
    type Scratch = Wide;

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
        own: &mut Wide,
    ) {
        let ok = fits(g)
            && wc.len() == g.kh * g.kw
            && yp.len() == g.oh * g.ow
            && plane.len().is_some_and(|n| n <= pad.len());
        debug_assert!(ok, "q8 AVX2 depthwise arguments");
        if ok {
            // SAFETY: `self` proves AVX2; the arguments were checked above,
            // and `body` checks each chunk's reach against `pad`.
            unsafe { channel_avx2::<A, Y>(g, plane, pad, wc, ch, out, yp, own) }
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
    own: &mut Wide,
) {
    // SAFETY: the caller's.
    unsafe {
        match (g.kh, g.kw, g.sw) {
            (3, 3, 1) => body::<A, Y, 3, 2, 1>(g, plane, pad, wc, ch, out, yp, own),
            (3, 3, 2) => body::<A, Y, 3, 2, 2>(g, plane, pad, wc, ch, out, yp, own),
            (_, _, 1) => body::<A, Y, 0, 0, 1>(g, plane, pad, wc, ch, out, yp, own),
            _ => body::<A, Y, 0, 0, 2>(g, plane, pad, wc, ch, out, yp, own),
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
    own: &mut Wide,
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
    let st = Stage::new(ch, out);
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
        unsafe { low_bytes(st.apply(s), d.as_mut_ptr()) }
    };
    let ybytes = Y::as_bytes_mut(yp);
    let mut tmp = [0u8; ACC];
    // Narrow planes at stride 1: runs of whole rows, as the parent's
    // `channel_runs`, in chunks of eight positions (`len <= ACC - 8`),
    // each output row's bytes then taken from its run.
    if S == 1 && g.sh == 1 && g.ow + 8 <= ACC && pitch + 8 <= ACC && g.ow < 32 {
        if let Some(n) = wide_len(plane, pad, kh, pairs, g.dh) {
            let k = Taps { kh, pairs, dh: g.dh, pitch, w: &w, st: &st };
            // SAFETY: AVX2 (this function's); `n` is `wide_len`'s.
            return unsafe { runs_wide::<A, Y>(g, n, pad, &k, ybytes, &mut own.0) };
        }
        let per = (ACC - 8 - g.ow) / pitch + 1;
        for (i, yc) in ybytes.chunks_mut(per * g.ow).enumerate() {
            let nr = yc.len() / g.ow;
            let len = (nr - 1) * pitch + g.ow;
            for c in 0..len.div_ceil(8) {
                eight(i * per * pitch + 8 * c, &mut tmp[8 * c..]);
            }
            for (r, yr) in yc.chunks_exact_mut(g.ow).enumerate() {
                copy_run(yr, &tmp[r * pitch..r * pitch + g.ow]);
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

/// A channel's window and output stage, as [`runs_wide`] takes them.
struct Taps<'a> {
    kh: usize,
    pairs: usize,
    dh: usize,
    pitch: usize,
    /// Pair `j` of window row `ky`: two `i16` weights.
    w: &'a [[i32; MAX_PAIRS]; MAX_ROWS],
    st: &'a Stage<'a>,
}

/// A channel's output stage on eight sums, its constants in registers:
/// [`Chan::apply_scalar`]'s high-word form when the total shift is 33 or
/// more (as `Q8Avx2::splat` takes it; a few operations where the general
/// form emulates a 64-bit rounding shift), else the AVX2 tiles' `stage`.
/// Either way the results are clamped to the output range.
#[derive(Clone, Copy)]
struct Stage<'a> {
    high: bool,
    add: __m256i,
    mult: __m256i,
    /// General form: the shifts and the input clamp; high form: the
    /// rounding half in `lsh`, the shift count in `sh`.
    lsh: __m256i,
    rsh: __m256i,
    sh: __m128i,
    lo: __m256i,
    hi: __m256i,
    zero: __m256i,
    min: __m256i,
    max: __m256i,
    out: &'a OutRange,
}

impl<'a> Stage<'a> {
    #[inline(always)]
    fn new(ch: &Chan, out: &'a OutRange) -> Stage<'a> {
        // SAFETY: these intrinsics only need SSE2 and AVX, which the AVX2
        // callers have (they are compiled inline into them).
        let set = |v: i32| unsafe { _mm256_set1_epi32(v) };
        let high = ch.t >= 33;
        let (lsh, rsh) = if high {
            (set(1 << (ch.t - 33).min(30)), set(0))
        } else {
            (set(ch.lsh as i32), set(ch.rsh as i32))
        };
        Stage {
            high,
            add: set(ch.add),
            mult: set(ch.mult),
            lsh,
            rsh,
            // SAFETY: SSE2, as above.
            sh: unsafe { _mm_cvtsi32_si128(ch.t as i32 - 32) },
            lo: set(ch.lo),
            hi: set(ch.hi),
            zero: set(out.zero),
            min: set(out.min),
            max: set(out.max),
            out,
        }
    }

    /// The stage of the eight sums `v`, each in the output range.
    ///
    /// # Safety
    /// AVX2 is available.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn apply(&self, v: __m256i) -> __m256i {
        if !self.high {
            // SAFETY: AVX2 (this function's).
            return unsafe {
                stage(v, self.add, self.mult, self.lsh, self.rsh, self.lo, self.hi, self.out)
            };
        }
        // SAFETY: AVX2 (this function's).
        let r = unsafe { stage_high(v, self.add, self.mult, self.lsh, self.sh, self.zero) };
        _mm256_min_epi32(_mm256_max_epi32(r, self.min), self.max)
    }
}

/// The positions of `plane` [`runs_wide`] copies (the plane in whole
/// sixteens, within the slack), if it takes the plane: `None` for planes
/// too large for [`Wide`], and for small ones, which stay with the byte
/// loads: their first loads would straddle the copy's stores just made,
/// which cannot be forwarded (a 3x3 plane of 256 channels took 17 us
/// for 12).
#[inline(always)]
fn wide_len(plane: &Plane, pad: &[u8], kh: usize, pairs: usize, dh: usize) -> Option<usize> {
    let n = plane.rows.checked_mul(plane.cols)?.next_multiple_of(16);
    // Chunks start below the plane's positions, so every load stays below
    // `n + ACC + reach`, where the zeros past `n` were never written.
    (n >= SMALL && n <= pad.len() && n + ACC + reach(plane.cols, kh, pairs, dh) <= WIDE)
        .then_some(n)
}

/// A load's last half past its chunk's first position: the last window
/// row's last pair, at an odd start, sixteen halves.
#[inline(always)]
fn reach(pitch: usize, kh: usize, pairs: usize, dh: usize) -> usize {
    (kh - 1) * dh * pitch + 2 * (pairs - 1) + 1 + 16
}

/// The narrow-plane runs of [`body`] at stride 1 from an `i16` copy of
/// the plane's first `n` positions ([`wide_len`]), sixteen positions at a
/// time with no shuffle: the `i32` lane `l` of the eight halves at `p + 2
/// j` is the pair `(p + 2 l + 2 j, +1)`, so one load against tap pair
/// `j`'s weights gives the even outputs `p + 2 l`, and the load at `p + 1
/// + 2 j` the odd ones.
///
/// # Safety
/// AVX2 is available.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn runs_wide<A: Q8, Y: Q8>(
    g: &Geom,
    n: usize,
    pad: &[u8],
    k: &Taps<'_>,
    ybytes: &mut [u8],
    wide: &mut [i16; WIDE],
) {
    let pitch = k.pitch;
    let reach = reach(pitch, k.kh, k.pairs, k.dh);
    let (Some(pad), Some(_)) = (pad.get(..n), wide.get(..n + ACC + reach)) else {
        debug_assert!(false, "q8 AVX2 depthwise wide plane out of bounds");
        return;
    };
    for (d, s) in wide.chunks_exact_mut(16).zip(pad.chunks_exact(16)) {
        // SAFETY: `s` is 16 bytes, `d` 16 halves.
        unsafe {
            let v = widen::<A>(_mm_loadu_si128(s.as_ptr().cast()));
            _mm256_storeu_si256(d.as_mut_ptr().cast(), v);
        }
    }
    let per = (ACC - 8 - g.ow) / pitch + 1;
    let mut tmp = [0u8; ACC + 16];
    for (i, yc) in ybytes.chunks_mut(per * g.ow).enumerate() {
        let nr = yc.len() / g.ow;
        let len = (nr - 1) * pitch + g.ow;
        let base = i * per * pitch;
        for c in 0..len.div_ceil(16) {
            let p = base + 16 * c;
            let Some(src) = wide.get(p..p + reach) else {
                debug_assert!(false, "q8 AVX2 depthwise wide chunk out of bounds");
                return;
            };
            let (mut even, mut odd) = (_mm256_setzero_si256(), _mm256_setzero_si256());
            for (ky, wr) in k.w.iter().enumerate().take(k.kh) {
                for (j, &wp) in wr.iter().enumerate().take(k.pairs) {
                    let at = ky * k.dh * pitch + 2 * j;
                    let wp = _mm256_set1_epi32(wp);
                    // SAFETY: `at + 1 + 16 <= reach = src.len()`.
                    unsafe {
                        let e = _mm256_loadu_si256(src.as_ptr().add(at).cast());
                        let o = _mm256_loadu_si256(src.as_ptr().add(at + 1).cast());
                        even = _mm256_add_epi32(even, _mm256_madd_epi16(e, wp));
                        odd = _mm256_add_epi32(odd, _mm256_madd_epi16(o, wp));
                    }
                }
            }
            // SAFETY: AVX2 (this function's).
            let (e, o) = unsafe { (k.st.apply(even), k.st.apply(odd)) };
            // Outputs p..p + 8 then p + 8..p + 16, as `i16` per 128-bit
            // half; exact, as the stage clamped them to `Y`'s range.
            let h = _mm256_packs_epi32(_mm256_unpacklo_epi32(e, o), _mm256_unpackhi_epi32(e, o));
            let b = if Y::SIGNED { _mm256_packs_epi16(h, h) } else { _mm256_packus_epi16(h, h) };
            let b = _mm256_permute4x64_epi64::<0b10_00>(b);
            // SAFETY: `16 c + 16 <= len + 15 < ACC + 16`.
            unsafe {
                _mm_storeu_si128(tmp.as_mut_ptr().add(16 * c).cast(), _mm256_castsi256_si128(b))
            };
        }
        for (r, yr) in yc.chunks_exact_mut(g.ow).enumerate() {
            copy_run(yr, &tmp[r * pitch..r * pitch + g.ow]);
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
