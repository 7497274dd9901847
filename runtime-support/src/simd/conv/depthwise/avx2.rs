//! AVX2+FMA depthwise convolution: every plane of a depthwise layer in one
//! call, eight output columns per vector, the bias and the fused
//! activation applied before the store.
//!
//! Two paths:
//! - *staged* (square 3x3, 5x5 and 7x7 kernels, [`staged`]): each band of
//!   input rows is copied with its zero padding into a stack buffer
//!   ([`Copier`]; with stride 2 across, each row as its even columns then
//!   its odd ones), so that every tap is one plain load, with no mask and
//!   no row test. [`tile`] computes [`ROWS`] output rows of a block of
//!   eight columns at once, kernel column by kernel column: the `K` taps of
//!   the column in registers, each staged row loaded once and multiplied
//!   into every output row it serves (up to `K` of them), seven
//!   independent sums. Blocks run right to left, and a partial block is
//!   stored whole: its extra lanes fall on the start of the next output
//!   row, which is written after it (only stores that would pass the end
//!   of the output slice keep to their lanes, with [`store_lanes`]).
//! - *masked* (other kernels, or rows too wide to stage): the taps read
//!   straight from the input, masked loads at the borders and plain loads
//!   inside, one output row at a time ([`plane`]).
//!
//! Soundness rests on two things: an [`Avx2`] value exists only on a CPU
//! with AVX2 and FMA, and [`depthwise`] checks the plane, kernel and output
//! lengths and that every coordinate fits an `i32` before the unsafe
//! loops. The staged path copies input rows inside the plane with plain
//! loads inside the row (and, with stride 2, masked ones that keep the
//! lanes inside it at its ends), into staged rows inside the buffer; its
//! tiles read the band's staged rows, which [`Stage::new`] sized for every
//! tap the band's outputs read; its stores write inside the output slice.
//! In the masked path every load reads input row `iy < h` with a mask that
//! keeps only the lanes whose column is inside `0..w` (masked lanes are
//! never accessed and read as zero), or with a plain load for a block
//! whose masks keep every lane; every store writes output row `oy < oh`
//! with a mask that keeps the columns below `ow`.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx2::{Avx2, lanes_in_row, store_lanes};
use crate::simd::lanes::{Lanes, activate as activate_lanes};
use crate::simd::strip::Strip;
use core::arch::x86_64::{
    __m256, __m256i, _CMP_LT_OQ, _mm256_add_ps, _mm256_blendv_ps, _mm256_broadcast_ss,
    _mm256_castpd_ps, _mm256_castps_pd, _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32,
    _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps, _mm256_max_ps, _mm256_min_ps,
    _mm256_movemask_ps, _mm256_mul_ps, _mm256_permute4x64_pd, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_shuffle_ps,
    _mm256_storeu_ps,
};
use core::ops::Range;

/// The widest kernel row handled (one load mask per kernel column).
const MAX_KW: usize = 16;

/// Floats of the staging buffer (16 KiB of stack): a band of padded rows.
pub(super) const STAGE: usize = 4096;

/// All the planes of a depthwise layer: plane `p` of `x` (`h x w`, planes
/// back to back) with the kernel and bias of channel `p % channels` gives
/// plane `p` of `y`:
/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// over the taps inside the input, with fused multiply-adds. Returns
/// `false`, writing nothing, when the geometry is not handled here (a
/// horizontal stride other than 1 or 2, a kernel wider than 16, sizes that
/// do not match the slices or fit an `i32`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise(
    cpu: Avx2,
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    depthwise_in(cpu, g, channels, x, w, bias, act, y, STAGE)
}

/// [`depthwise`] with `room` floats of the staging buffer usable (at most
/// [`STAGE`]; the tests pass less, so that small planes cross bands).
#[allow(clippy::too_many_arguments)]
pub(super) fn depthwise_in(
    cpu: Avx2,
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
    room: usize,
) -> bool {
    const LIM: usize = 1 << 24;
    let dims = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pt, g.pl];
    if dims.iter().any(|&d| d >= LIM) || !(1..=2).contains(&g.sx) || g.sy == 0 || channels == 0 {
        return false;
    }
    if g.kh == 0 || g.kw == 0 || g.kw > MAX_KW {
        return false;
    }
    // With every dim below 2^24, products of two stay far below usize::MAX
    // on 64-bit targets; column positions must also fit an i32.
    let reach = (g.kw - 1) * g.dx;
    if g.ow * g.sx + reach + g.pl + g.w + 32 >= i32::MAX as usize {
        return false;
    }
    let Some(planes) = g.planes(channels, x, w, bias, y) else { return false };
    if planes == 0 {
        return true;
    }
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    let job = Job { g, channels, w, bias, act };
    if let Some(st) = Stage::new(g, room.min(STAGE)) {
        // SAFETY (each arm): `cpu` proves AVX2 and FMA; the slices hold
        // whole planes (checked above) and `st` is the layout for `g`.
        unsafe {
            match g.kh {
                3 => staged::<3>(cpu, &job, &st, x, y),
                5 => staged::<5>(cpu, &job, &st, x, y),
                _ => staged::<7>(cpu, &job, &st, x, y),
            }
        }
        return true;
    }
    let k3 = g.kh == 3 && g.kw == 3;
    let (xs, ys) = (x.as_ptr(), y.as_mut_ptr());
    for p in 0..planes {
        let (wk, b) = job.kernel(p % channels);
        let (xp, yp) = (xs.wrapping_add(p * hw), ys.wrapping_add(p * n));
        // One instance per stride, 3x3-or-not and activation, so the inner
        // loops carry no tests that do not change.
        macro_rules! run {
            ($s:literal, $k3:literal) => {
                // SAFETY: `cpu` proves AVX2 and FMA; plane `p` of `x` and of
                // `y` lie inside them (lengths checked above), and the loop
                // keeps the bounds described in the module docs.
                unsafe {
                    match act {
                        Activation::None => plane::<$s, $k3, 0>(g, xp, wk, b, 0.0, 0.0, yp),
                        Activation::Relu => plane::<$s, $k3, 1>(g, xp, wk, b, 0.0, 0.0, yp),
                        Activation::LeakyRelu { alpha } => {
                            plane::<$s, $k3, 2>(g, xp, wk, b, alpha, 0.0, yp)
                        }
                        Activation::Clip { min, max } => {
                            plane::<$s, $k3, 3>(g, xp, wk, b, min, max, yp)
                        }
                    }
                }
            };
        }
        match (g.sx, k3) {
            (1, true) => run!(1, true),
            (1, false) => run!(1, false),
            (_, true) => run!(2, true),
            (_, false) => run!(2, false),
        }
    }
    true
}

/// What the loops share: the geometry, the weights and biases per
/// channel, and the activation.
struct Job<'a> {
    g: &'a Geom2d,
    channels: usize,
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    act: Activation,
}

impl Job<'_> {
    /// The kernel and bias of channel `c`. [`depthwise`] checked the
    /// weights' length: a kernel cut short (the loops then stop) is a bug,
    /// a panic in debug builds.
    #[inline(always)]
    fn kernel(&self, c: usize) -> (&[f32], f32) {
        let ks = self.g.kh * self.g.kw;
        debug_assert!((c + 1) * ks <= self.w.len(), "depthwise: channel {c}'s {ks} taps");
        let wk = self.w.get(c * ks..(c + 1) * ks).unwrap_or(&[]);
        (wk, self.bias.and_then(|b| b.get(c)).copied().unwrap_or(0.0))
    }
}

/// Output rows per tile: seven sums, the `K <= 7` taps of a kernel column
/// and an input vector fit the sixteen `ymm` registers. Seven divides the
/// planes of EfficientNet and MobileNet (112, 56, 28, 14 and 7 rows); on
/// Zen 3 it ran as fast as eight where both divide and up to 25% faster
/// where eight does not (240 planes of 28x28, 5x5: 0.213 -> 0.163 ms).
const ROWS: usize = 7;

/// The layout of the staged path. A staged row is `ws` floats: with
/// stride 1 across, column `c` holds input column `c - pl` (zero outside
/// the input); with stride 2, the even columns of that padded row fill the
/// first `ws / 2` floats and the odd ones the rest, so the even or odd
/// columns a block reads are one plain load. A band of `band` output rows
/// stages its [`Stage::rows`] input rows.
#[derive(Clone, Copy, Debug)]
struct Stage {
    /// Floats per staged row: a multiple of 8 (of 16 with stride 2).
    ws: usize,
    /// Output rows per band.
    band: usize,
    /// Blocks of eight output columns per row.
    nb: usize,
    /// Output rows per tile: [`ROWS`], else 4 when the bands are shorter,
    /// else 1 (with fewer rows, dilation down or a stride above 2 down).
    r: usize,
}

impl Stage {
    /// The layout for `g` in `room` floats; `None` when the kernel is not
    /// square 3x3, 5x5 or 7x7 or the staged rows of one output row do not
    /// fit.
    fn new(g: &Geom2d, room: usize) -> Option<Stage> {
        let k = g.kh;
        if g.kw != k || !matches!(k, 3 | 5 | 7) {
            return None;
        }
        let nb = g.ow.div_ceil(8);
        // Block `b` reads floats `8b + q..8b + q + 8` of the row for kernel
        // column `kx`, `q = kx*dx` (with stride 2: `q / 2` of a half row).
        let reach = (k - 1) * g.dx;
        let ws = match g.sx {
            1 => (nb * 8 + reach).next_multiple_of(8),
            _ => 2 * (nb * 8 + reach / 2).next_multiple_of(8),
        };
        let one = (k - 1) * g.dy + 1;
        let fit = room / ws;
        if fit < one {
            return None;
        }
        let mut band = ((fit - one) / g.sy + 1).min(g.oh);
        // Whole tiles in every band but the last.
        if band < g.oh && band >= ROWS {
            band -= band % ROWS;
        }
        // Tiles of several rows share the staged rows (dilation 1 down,
        // stride 1 or 2); the last tile of a band overlaps the one before
        // when the band's rows are not a multiple (see `Band::run`).
        let r = match (g.dy, g.sy) {
            (1, 1 | 2) if band >= ROWS => ROWS,
            (1, 1 | 2) if band >= 4 => 4,
            _ => 1,
        };
        Some(Stage { ws, band, nb, r })
    }

    /// Input rows staged for `out` output rows of a `k x k` kernel.
    fn rows(&self, g: &Geom2d, k: usize, out: usize) -> usize {
        (out - 1) * g.sy + (k - 1) * g.dy + 1
    }
}

/// The staged path (see the module docs) for a `K x K` kernel, with tiles
/// of [`Stage::r`] output rows (fewer in a last band shorter than that).
///
/// # Safety
/// AVX2 and FMA are present; `x` and `y` hold whole planes of `job.g`
/// ([`depthwise`] checked them), and `st` is [`Stage::new`]'s layout for it.
#[target_feature(enable = "avx2,fma")]
unsafe fn staged<const K: usize>(cpu: Avx2, job: &Job<'_>, st: &Stage, x: &[f32], y: &mut [f32]) {
    let g = job.g;
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    // Offset of kernel column kx in a staged row (stride 2: in the half
    // row of its parity).
    let half = st.ws / 2;
    let off: [usize; K] = core::array::from_fn(|kx| {
        let q = kx * g.dx;
        if g.sx == 1 { q } else { (q & 1) * half + (q >> 1) }
    });
    let mut strip = Strip::<{ STAGE + 8 }>::new();
    let most = st.rows(g, K, st.band) * st.ws;
    let all = strip.get(most + 8);
    // Rows from a 32-byte boundary: fewer loads split across cache lines.
    let skip = all.as_ptr().align_offset(32).min(8);
    let Some(buf) = all.get_mut(skip..skip + most) else { return };
    let copy = Copier::new(cpu, g, st.ws);
    // Buffer rows that may hold input (Copier::band).
    let mut dirty = 0..0;
    let yl = y.len();
    let ys = y.as_mut_ptr();
    for p in 0..yl / n {
        let xp = x.get(p * hw..(p + 1) * hw).unwrap_or(&[]);
        let (wk, bias) = job.kernel(p % job.channels);
        let (taps, _) = wk.as_chunks::<K>();
        let Ok(taps) = <&[[f32; K]; K]>::try_from(taps) else { return };
        let mut oy0 = 0;
        while oy0 < g.oh {
            let out = st.band.min(g.oh - oy0);
            let Some(band) = buf.get_mut(..st.rows(g, K, out) * st.ws) else { return };
            copy.band(band, xp, (oy0 * g.sy) as isize - g.pt as isize, &mut dirty);
            let b = Band {
                cpu,
                buf: band,
                ws: st.ws,
                nb: st.nb,
                sy: g.sy,
                dy: g.dy,
                off: &off,
                taps,
                bias,
                act: job.act,
                y: ys,
                len: yl,
                first: p * n + oy0 * g.ow,
                ow: g.ow,
            };
            // SAFETY (each call): `b.buf` holds the staged rows of the band's
            // `out` output rows, each as wide as its tiles read (Stage::new);
            // the outputs lie in `y` (rows oy0..oy0 + out of plane p).
            unsafe {
                match (st.r, g.sy) {
                    (ROWS, 1) if out >= ROWS => b.run::<ROWS, 1>(out),
                    (ROWS, 2) if out >= ROWS => b.run::<ROWS, 2>(out),
                    (4 | ROWS, 1) if out >= 4 => b.run::<4, 1>(out),
                    (4 | ROWS, 2) if out >= 4 => b.run::<4, 2>(out),
                    _ => b.run::<1, 1>(out),
                }
            }
            oy0 += out;
        }
    }
}

/// Copies input rows into staged rows ([`Stage`]'s layout), the padding
/// around the input columns left as it is (zero). Stride 1: the columns
/// with plain loads and stores (the last vector overlapping the one
/// before); stride 2: see [`Copier::deinterleave`].
struct Copier<'a> {
    cpu: Avx2,
    g: &'a Geom2d,
    /// Floats per staged row.
    ws: usize,
    /// Input columns `0..n` are staged (those the row has room for).
    n: usize,
    /// Stride 2: the chunks of sixteen padded columns that hold input
    /// columns (the first may straddle the row's start, the last its end),
    /// those in between, and the load masks of the first and the last.
    some: Range<usize>,
    full: Range<usize>,
    edge: [[__m256i; 2]; 2],
}

impl<'a> Copier<'a> {
    /// The copier for `g`'s rows of `ws` floats.
    #[target_feature(enable = "avx2,fma")]
    fn new(cpu: Avx2, g: &'a Geom2d, ws: usize) -> Copier<'a> {
        // Staged column `c` holds input column `c - pl`, `c < ws` (with
        // stride 2, `c` runs over both halves).
        let n = g.w.min(ws.saturating_sub(g.pl));
        // Stride 2: chunk `j` reads input columns `16j - pl..16j - pl + 16`.
        let chunks = ws / 16;
        let some = (g.pl / 16).min(chunks)..(g.w + g.pl).div_ceil(16).min(chunks);
        let start = g.pl.div_ceil(16).min(some.end);
        let full = start..((g.w + g.pl) / 16).clamp(start, some.end);
        // Column positions fit an i32 (`depthwise` checked that `pl`, `w`
        // and the staged width are small).
        let at = |j: usize| (16 * j) as i32 - g.pl as i32;
        let masks =
            |j: usize| [lanes_in_row(at(j), g.w as i32), lanes_in_row(at(j) + 8, g.w as i32)];
        let edge = [masks(some.start), masks(some.end.saturating_sub(1))];
        Copier { cpu, g, ws, n, some, full, edge }
    }

    /// Stages the input rows from `iy0` of the plane `xp` into the rows of
    /// `dst` (`ws` floats each); rows outside the plane are zero. `dirty`
    /// holds the buffer rows that may hold input (the others are zero),
    /// updated: only those are cleared for rows outside the plane, so a
    /// plane staged in one band clears nothing.
    #[target_feature(enable = "avx2,fma")]
    fn band(&self, dst: &mut [f32], xp: &[f32], iy0: isize, dirty: &mut Range<usize>) {
        let (g, ws, n) = (self.g, self.ws, self.n);
        let rows = dst.len() / ws;
        // Staged rows t_lo..t_hi lie inside the plane.
        let t_lo = (-iy0).clamp(0, rows as isize) as usize;
        let t_hi = (g.h as isize - iy0).clamp(t_lo as isize, rows as isize) as usize;
        for t in (0..t_lo).chain(t_hi..rows) {
            if dirty.contains(&t)
                && let Some(row) = dst.get_mut(t * ws..(t + 1) * ws)
            {
                row.fill(0.0);
            }
        }
        // Rows past this band's keep what they held.
        *dirty = t_lo..if dirty.end > rows { dirty.end } else { t_hi };
        // The input rows iy0 + t_lo..iy0 + t_hi lie in the plane.
        let first = (iy0 + t_lo as isize) as usize;
        if t_lo == t_hi || n == 0 || xp.len() < (first + t_hi - t_lo) * g.w || dst.len() < rows * ws
        {
            return;
        }
        let (d, pl) = (dst.as_mut_ptr(), g.pl);
        for t in t_lo..t_hi {
            let src = xp.as_ptr().wrapping_add((first + t - t_lo) * g.w);
            let row = d.wrapping_add(t * ws);
            // SAFETY: input row iy0 + t lies in the plane and has n <= w
            // columns to read; staged row t < rows lies in `dst`, and
            // columns pl..pl + n of it (stride 1), or their halves (stride
            // 2, see `deinterleave`), lie inside it (n <= ws - pl).
            unsafe {
                if g.sx == 1 {
                    copy_floats(row.add(pl), src, n);
                } else {
                    self.deinterleave(row, src);
                }
            }
        }
    }

    /// Splits the input row at `src` into the staged row at `row` (stride
    /// 2): padded columns `16j..16j + 16` (input columns from `16j - pl`)
    /// as their eight even columns at `row[8j]` and their eight odd ones at
    /// `row[ws / 2 + 8j]`, for the chunks `j` in `some`. Stores stay
    /// aligned to the staged row; loads are plain inside the input row and
    /// masked in the (at most two) chunks that straddle its ends.
    ///
    /// # Safety
    /// AVX2 is present; `src` is an input row (`w` readable floats), `row`
    /// has `ws` writable floats.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn deinterleave(&self, row: *mut f32, src: *const f32) {
        let (half, pl) = (self.ws / 2, self.g.pl as isize);
        let chunk = |j: usize, m: Option<[__m256i; 2]>| {
            let s = src.wrapping_offset(16 * j as isize - pl);
            // SAFETY: without masks the chunk is a full one, whose columns
            // lie in the row; the masks keep the lanes whose columns do.
            // The stores lie in the staged row (8j + 8 <= ws / 2).
            unsafe {
                let (lo, hi) = match m {
                    Some([a, b]) => (_mm256_maskload_ps(s, a), _mm256_maskload_ps(s.add(8), b)),
                    None => (_mm256_loadu_ps(s), _mm256_loadu_ps(s.add(8))),
                };
                _mm256_storeu_ps(row.add(8 * j), self.cpu.evens(lo, hi));
                _mm256_storeu_ps(row.add(half + 8 * j), self.cpu.odds(lo, hi));
            }
        };
        let lo = self.some.start < self.full.start;
        if lo {
            chunk(self.some.start, Some(self.edge[0]));
        }
        for j in self.full.clone() {
            chunk(j, None);
        }
        // The last chunk, when it straddles the row's end and is not the
        // first one (whose masks then kept both ends).
        let last = self.some.end.saturating_sub(1);
        if self.full.end < self.some.end && !(lo && last == self.some.start) {
            chunk(last, Some(self.edge[1]));
        }
    }
}

/// `dst[..n] = src[..n]` in vectors of eight (the last one overlapping),
/// then of four, then one by one: short rows without a call to `memcpy`.
///
/// # Safety
/// AVX2 is present; `n` floats are readable at `src` and writable at `dst`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn copy_floats(dst: *mut f32, src: *const f32, n: usize) {
    use core::arch::x86_64::{_mm_loadu_ps, _mm_storeu_ps};
    // SAFETY (all): every access lies in 0..n of both.
    unsafe {
        if n >= 8 {
            let mut i = 0;
            while i + 8 < n {
                _mm256_storeu_ps(dst.add(i), _mm256_loadu_ps(src.add(i)));
                i += 8;
            }
            _mm256_storeu_ps(dst.add(n - 8), _mm256_loadu_ps(src.add(n - 8)));
        } else if n >= 4 {
            _mm_storeu_ps(dst, _mm_loadu_ps(src));
            _mm_storeu_ps(dst.add(n - 4), _mm_loadu_ps(src.add(n - 4)));
        } else {
            for i in 0..n {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

/// One band of the staged path: its staged rows, how the tiles read them,
/// and where the outputs go.
struct Band<'a, const K: usize> {
    cpu: Avx2,
    /// The staged rows ([`Stage`]'s layout).
    buf: &'a [f32],
    /// Floats per staged row.
    ws: usize,
    /// Blocks of eight outputs per row.
    nb: usize,
    /// Vertical stride and dilation.
    sy: usize,
    dy: usize,
    /// Offset of each kernel column in a staged row.
    off: &'a [usize; K],
    /// The kernel, by row.
    taps: &'a [[f32; K]; K],
    bias: f32,
    act: Activation,
    /// The output slice and its length.
    y: *mut f32,
    len: usize,
    /// Index in `y` of the band's first output.
    first: usize,
    /// Outputs per row.
    ow: usize,
}

impl<const K: usize> Band<'_, K> {
    /// Every output of the band's `out` rows, in tiles of `R` rows: from the
    /// top, the last tile moved up to end at the last row (it recomputes
    /// rows of the tile before, the same values). `SY` is the vertical
    /// stride when `R > 1` (which needs dilation 1 down).
    ///
    /// # Safety
    /// AVX2 and FMA are present; `buf` holds the staged rows of `out >= R`
    /// output rows, `(out - 1) * sy + (K - 1) * dy + 1` rows of `ws`
    /// floats, each with the floats `off[kx] + 8b..off[kx] + 8b + 8` of
    /// every block `b < nb` (in `Stage::new`'s layout); the `out` rows of
    /// outputs from `first` lie inside the `len` floats at `y`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run<const R: usize, const SY: usize>(&self, out: usize) {
        debug_assert!(out >= R && (R == 1 || (self.dy == 1 && self.sy == SY)));
        debug_assert!(self.off.iter().all(|&o| o + 8 * self.nb <= self.ws));
        debug_assert!((out - 1) * self.sy + (K - 1) * self.dy < self.buf.len() / self.ws);
        debug_assert!(self.first + (out - 1) * self.ow + 8 * (self.nb - 1) < self.len);
        // Staged rows from one kernel row to the next.
        let rs = self.dy * self.ws;
        let bv = _mm256_set1_ps(self.bias);
        let mut top = 0;
        loop {
            let top_now = top.min(out - R);
            let row = self.buf.as_ptr().wrapping_add(top_now * self.sy * self.ws);
            for blk in (0..self.nb).rev() {
                // SAFETY: rows top_now*sy.. of the band, floats 8*blk + off[kx]
                // up to 8 past it: inside `buf` (the contract above).
                let acc =
                    unsafe { tile::<K, R, SY>(row.wrapping_add(8 * blk), rs, self.off, self.taps) };
                let out = finish(self.cpu, acc, bv, self.act);
                for (r, v) in out.into_iter().enumerate() {
                    let at = self.first + (top_now + r) * self.ow + 8 * blk;
                    // SAFETY: output `at` lies inside `y`; the eight floats from
                    // it do too, or only the lanes inside are stored.
                    unsafe {
                        if at + 8 <= self.len {
                            _mm256_storeu_ps(self.y.add(at), v);
                        } else {
                            store_lanes(self.y.add(at), lanes_in_row(0, (self.len - at) as i32), v);
                        }
                    }
                }
            }
            top = top_now + R;
            if top >= out {
                break;
            }
        }
    }
}

/// `act(acc[r] + bias)` for each sum, the activation picked once for all.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn finish<const R: usize>(
    cpu: Avx2,
    acc: [__m256; R],
    bias: __m256,
    act: Activation,
) -> [__m256; R] {
    let sums = acc.map(|a| _mm256_add_ps(a, bias));
    // Each arm with its activation known, so the selects inline unswitched.
    match act {
        Activation::None => sums,
        Activation::Relu => sums.map(|v| activate_lanes(cpu, v, Activation::Relu)),
        Activation::LeakyRelu { alpha } => {
            sums.map(|v| activate_lanes(cpu, v, Activation::LeakyRelu { alpha }))
        }
        Activation::Clip { min, max } => {
            sums.map(|v| activate_lanes(cpu, v, Activation::Clip { min, max }))
        }
    }
}

/// `R` output rows of a block of eight columns of a `K x K` kernel, from
/// the staged rows at `p` (row `t` at `p + t * rs`): output row `r` sums
/// `taps[ky][kx] * p[(r*SY + ky) * rs + off[kx] + l]` over the taps,
/// kernel column by kernel column, each column's rows in order. Row
/// `t` of each column is loaded once and serves the outputs `r` with
/// `0 <= t - r*SY < K`.
///
/// # Safety
/// AVX2 and FMA are present; the eight floats at `p + t * rs + off[kx]`
/// are readable for `t < (R - 1) * SY + K`.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn tile<const K: usize, const R: usize, const SY: usize>(
    p: *const f32,
    rs: usize,
    off: &[usize; K],
    taps: &[[f32; K]; K],
) -> [__m256; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    let rows = (R - 1) * SY + K;
    for kx in 0..K {
        let col: [__m256; K] = core::array::from_fn(|ky| _mm256_set1_ps(taps[ky][kx]));
        let q = p.wrapping_add(off[kx]);
        let mut row = |t: usize| {
            // SAFETY: t is a staged row of the tile (the contract above).
            let v = unsafe { _mm256_loadu_ps(q.wrapping_add(t * rs)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let ky = t.wrapping_sub(r * SY);
                if ky < K {
                    *a = _mm256_fmadd_ps(v, col[ky], *a);
                }
            }
        };
        // Three loops of at most seven rows (for up to 21), each unrolled
        // whole, so that every sum and tap is a register: one loop of
        // twelve rows (K = 5, R = 8) stayed a loop, its sums indexed at run
        // time, at half the speed.
        let (a, b) = (rows / 3, 2 * rows / 3);
        for t in 0..a {
            row(t);
        }
        for t in a..b {
            row(t);
        }
        for t in b..rows {
            row(t);
        }
    }
    acc
}

/// The fused activation of eight sums (`ACT`: 0 none, 1 Relu, 2 LeakyRelu
/// with slope `a`, 3 Clip to `a..=b`), with the same comparisons as
/// [`Activation::apply`] (NaN passes through `Relu` and `Clip`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn activate<const ACT: u8>(v: __m256, a: f32, b: f32) -> __m256 {
    match ACT {
        0 => v,
        // max_ps(p, q) is `p > q ? p : q`: `0 > v ? 0 : v`.
        1 => _mm256_max_ps(_mm256_setzero_ps(), v),
        2 => {
            let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, _mm256_setzero_ps());
            _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(a)), neg)
        }
        _ => _mm256_min_ps(_mm256_set1_ps(b), _mm256_max_ps(_mm256_set1_ps(a), v)),
    }
}

/// One plane of [`depthwise_in`]'s masked path, whose checks keep the
/// bounds. `S` is the horizontal stride (1 or 2), `K3` says the kernel is
/// 3x3 (weights then stay in registers), `ACT` picks the activation for
/// [`activate`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane<const S: usize, const K3: bool, const ACT: u8>(
    g: &Geom2d,
    x: *const f32,
    wk: &[f32],
    bias: f32,
    a: f32,
    b: f32,
    y: *mut f32,
) {
    let (kh, kw) = if K3 { (3, 3) } else { (g.kh, g.kw) };
    let w = g.w as i32;
    let bv = _mm256_set1_ps(bias);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut w3 = [_mm256_setzero_ps(); 9];
    if K3 {
        for (v, &s) in w3.iter_mut().zip(wk) {
            *v = _mm256_set1_ps(s);
        }
    }
    let none = _mm256_setzero_si256();
    let mut ox0 = 0;
    while ox0 < g.ow {
        // Load masks per kernel column for this block of eight outputs:
        // lanes whose input column lies inside the row (all of them in the
        // interior). With stride 2 each output vector takes two loads.
        let mut lo = [none; MAX_KW];
        let mut hi = [none; MAX_KW];
        for kx in 0..kw {
            let base = (ox0 * S + kx * g.dx) as i32 - g.pl as i32;
            lo[kx] = lanes_in_row(base, w);
            if S == 2 {
                hi[kx] = lanes_in_row(base + 8, w);
            }
        }
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((g.ow - ox0).min(8) as i32), lane);
        let col = (ox0 * S) as isize - g.pl as isize;
        // Every lane of every mask set (the interior): plain loads.
        let all = |m: __m256i| _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF;
        let full = ox0 + 8 <= g.ow
            && lo[..kw].iter().all(|&m| all(m))
            && (S == 1 || hi[..kw].iter().all(|&m| all(m)));
        // The rows of this block, with `$load(p, kx)` reading the eight
        // input values of kernel column kx from `p`.
        macro_rules! rows {
            ($load:expr) => {
                for oy in 0..g.oh {
                    let top = oy * g.sy;
                    // Kernel rows in turn into four sums: four independent
                    // chains of multiply-adds instead of one.
                    let mut acc = [_mm256_setzero_ps(); 4];
                    for ky in 0..kh {
                        let iy = (top + ky * g.dy).wrapping_sub(g.pt);
                        if iy >= g.h {
                            continue;
                        }
                        // The input row iy < h; the loads keep to its columns.
                        let row = x.wrapping_add(iy * g.w).wrapping_offset(col);
                        for kx in 0..kw {
                            let v = $load(row.wrapping_add(kx * g.dx), kx);
                            let wt = if K3 {
                                w3[ky * 3 + kx]
                            } else {
                                _mm256_broadcast_ss(&wk[ky * kw + kx])
                            };
                            acc[ky % 4] = _mm256_fmadd_ps(v, wt, acc[ky % 4]);
                        }
                    }
                    let sum = _mm256_add_ps(
                        _mm256_add_ps(acc[0], acc[1]),
                        _mm256_add_ps(acc[2], _mm256_add_ps(acc[3], bv)),
                    );
                    let out = activate::<ACT>(sum, a, b);
                    // SAFETY: output row oy < oh; the mask keeps columns below ow.
                    unsafe { store_lanes(y.add(oy * g.ow + ox0), keep, out) };
                }
            };
        }
        // Even elements of two vectors: [l0 l2 h0 h2 | l4 l6 h4 h6], then
        // the middle 64-bit pairs swapped into column order.
        let evens = |l: __m256, h: __m256| {
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(l, h);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(even)))
        };
        if full {
            // SAFETY: every mask of this block keeps all lanes, so each
            // plain load reads only columns inside row iy.
            rows!(|p: *const f32, _kx: usize| unsafe {
                if S == 1 {
                    _mm256_loadu_ps(p)
                } else {
                    evens(_mm256_loadu_ps(p), _mm256_loadu_ps(p.wrapping_add(8)))
                }
            });
        } else {
            // SAFETY: masked loads touch only lanes inside row iy.
            rows!(|p: *const f32, kx: usize| unsafe {
                if S == 1 {
                    _mm256_maskload_ps(p, lo[kx])
                } else {
                    evens(
                        _mm256_maskload_ps(p, lo[kx]),
                        _mm256_maskload_ps(p.wrapping_add(8), hi[kx]),
                    )
                }
            });
        }
        ox0 += 8;
    }
}
