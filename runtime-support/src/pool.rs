//! N-d pooling: MaxPool, AveragePool, LpPool and the global forms.
//!
//! Tensors are `[N, C, spatial...]`; pooling treats `N * C` planes alike.
//! `ceil_mode` is the generator's business: it computes the output dims
//! (dropping a last window that would start in the end padding, as ONNX
//! Runtime does) and [`Window::check`] accepts floor or ceil dims. Taps
//! beyond the end padding are ignored entirely.

use crate::conv::Window;
use crate::num::{Float, Num};
use crate::shape::{MAX_RANK, next_index, numel};
use crate::simd;
use crate::{Error, Result, ensure};

/// Pooling params: `planes = N * C` and the window geometry.
#[derive(Clone, Copy, Debug)]
pub struct Pool<'a> {
    /// Number of independent planes (`N * C`).
    pub planes: usize,
    /// Spatial geometry.
    pub window: Window<'a>,
}

fn sizes(p: &Pool<'_>, x_len: usize, y_len: usize) -> Result<(usize, usize)> {
    p.window.check(true)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    ensure(x_len == p.planes.checked_mul(in_size).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y_len == p.planes.checked_mul(out_size).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    Ok((in_size, out_size))
}

/// Planes pooled side by side by the 2-D and global fast paths: independent
/// sums, each still taken in the exact kernels' order, keep the adders busy.
const LANES: usize = 8;

/// The taps of one window along one axis: in-bounds taps are `lo..hi`
/// (the first at input index `start`), and `padded` taps fall before the
/// end of the end padding (those `count_include_pad` counts).
#[derive(Clone, Copy)]
struct Span {
    lo: usize,
    hi: usize,
    start: usize,
    padded: usize,
}

/// The [`Span`] of output `o` along an axis of `n` inputs.
#[inline]
fn span(o: usize, s: usize, d: usize, k: usize, pb: usize, n: usize, pe: usize) -> Span {
    let top = o * s;
    let lo = pb.saturating_sub(top).div_ceil(d).min(k);
    let hi = if top >= pb + n { 0 } else { (pb + n - top).div_ceil(d).min(k) };
    let padded = if top >= pb + n + pe { 0 } else { (pb + n + pe - top).div_ceil(d).min(k) };
    let hi = hi.max(lo);
    let start = (top + lo * d).saturating_sub(pb);
    Span { lo, hi, start, padded }
}

/// The per-axis window spans of a 2-D window: `(h, w, rows, cols)` for
/// output row `oy` and column `ox`.
struct Geom2 {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    pb: [usize; 2],
    pe: [usize; 2],
}

impl Geom2 {
    /// The 2-D geometry, or `None` for other ranks.
    fn of(win: &Window<'_>) -> Option<Geom2> {
        let two = |v: &[usize]| -> Option<[usize; 2]> { Some([*v.first()?, *v.get(1)?]) };
        if win.in_dims.len() != 2 {
            return None;
        }
        let [h, w] = two(win.in_dims)?;
        let [oh, ow] = two(win.out_dims)?;
        Some(Geom2 {
            h,
            w,
            oh,
            ow,
            k: two(win.kernel)?,
            s: two(win.strides)?,
            d: two(win.dilations)?,
            pb: two(win.pads_begin)?,
            pe: two(win.pads_end)?,
        })
    }

    #[inline]
    fn rows(&self, oy: usize) -> Span {
        span(oy, self.s[0], self.d[0], self.k[0], self.pb[0], self.h, self.pe[0])
    }

    #[inline]
    fn cols(&self, ox: usize) -> Span {
        span(ox, self.s[1], self.d[1], self.k[1], self.pb[1], self.w, self.pe[1])
    }

    /// Calls `f(off)` with the flat input offset of each in-bounds tap of
    /// the window `(rows, cols)`, in row-major tap order.
    #[inline(always)]
    fn each_tap(&self, rows: Span, cols: Span, mut f: impl FnMut(usize)) {
        for ky in 0..rows.hi - rows.lo {
            let row = (rows.start + ky * self.d[0]) * self.w + cols.start;
            for kx in 0..cols.hi - cols.lo {
                f(row + kx * self.d[1]);
            }
        }
    }
}

/// First-element offsets of `LANES` planes from `first` (planes past the
/// end repeat the last one; their results are dropped).
#[inline]
fn lane_bases(first: usize, planes: usize, size: usize) -> [usize; LANES] {
    core::array::from_fn(|l| (first + l).min(planes - 1) * size)
}

/// Runs `f(plane, out_index, opos)` for every output position of every plane.
fn each_output(p: &Pool<'_>, out_size: usize, mut f: impl FnMut(usize, usize, &[usize])) {
    if out_size == 0 {
        return;
    }
    let mut opos = [0usize; MAX_RANK];
    let opos = &mut opos[..p.window.in_dims.len()];
    for plane in 0..p.planes {
        opos.fill(0);
        let mut o = 0;
        loop {
            f(plane, plane * out_size + o, opos);
            o += 1;
            if !next_index(opos, p.window.out_dims) {
                break;
            }
        }
    }
}

/// ONNX `MaxPool`: the maximum over each window's taps that fall inside the
/// input (padding never wins). A window with no such tap gives the lowest
/// value. NaN inputs propagate. With `indices`, also writes each maximum's
/// flat index into `x` (row-major over `[N, C, spatial...]`, the first one on
/// ties; -1 for an empty window), as the `Indices` output with
/// `storage_order = 0`.
pub fn max_pool<T: Num>(
    p: &Pool<'_>,
    x: &[T],
    y: &mut [T],
    mut indices: Option<&mut [i64]>,
) -> Result {
    let (in_size, out_size) = sizes(p, x.len(), y.len())?;
    if let Some(ix) = &indices {
        ensure(ix.len() == y.len(), Error::ShapeMismatch)?;
    }
    if let Some(g) = Geom2::of(&p.window) {
        if out_size > 0 && p.planes > 0 {
            // Small planes pooled to their own size (Inception's 3x3
            // stride-1 pools) as flat runs; windows wider than the row
            // buffer take the 8-plane scan.
            if indices.is_none()
                && (g.s, g.d) == ([1, 1], [1, 1])
                && (g.oh, g.ow) == (g.h, g.w)
                && let Some(xf) = T::f32s(x)
                && let Some(yf) = T::f32s_mut(y)
                && simd::max_pool_same(
                    p.planes,
                    (g.h, g.w),
                    (g.k[0], g.k[1]),
                    (g.pb[0], g.pb[1]),
                    xf,
                    yf,
                )
            {
                return Ok(());
            }
            // Stride-2 pools of 2- or 3-wide windows (after most stems and
            // stages) without the row buffer's per-row passes.
            if indices.is_none()
                && (g.s, g.d) == ([2, 2], [1, 1])
                && let Some(xf) = T::f32s(x)
                && let Some(yf) = T::f32s_mut(y)
                && simd::max_pool_s2(
                    p.planes,
                    (g.h, g.w),
                    (g.oh, g.ow),
                    (g.k[0], g.k[1]),
                    (g.pb[0], g.pb[1]),
                    xf,
                    yf,
                )
            {
                return Ok(());
            }
            if indices.is_none() && g.d == [1, 1] && in_size > 0 && g.k[1] <= SEPARABLE_COLS {
                max_pool_2d_separable(&g, in_size, out_size, x, y);
            } else {
                max_pool_2d(&g, p.planes, in_size, out_size, x, y, indices);
            }
        }
        return Ok(());
    }
    each_output(p, out_size, |plane, o, opos| {
        let base = plane * in_size;
        let mut best = T::LOWEST;
        let mut best_at: Option<usize> = None;
        p.window.taps(opos, |_, at| {
            if let Some(at) = at {
                let v = x[base + at];
                if best_at.is_none() || v > best || (v.is_nan() && !best.is_nan()) {
                    best = v;
                    best_at = Some(base + at);
                }
            }
        });
        y[o] = best;
        if let Some(ix) = indices.as_deref_mut() {
            ix[o] = best_at.map_or(-1, |i| i as i64);
        }
    });
    Ok(())
}

/// Rewrites MaxPool `Indices` from row-major to column-major spatial order
/// (ONNX `storage_order = 1`): an index `plane * size + offset` keeps its
/// plane, and its spatial offset is recomputed with the first spatial axis
/// varying fastest. Negative indices (empty windows) are left alone.
pub fn max_pool_indices_column_major(in_dims: &[usize], indices: &mut [i64]) -> Result {
    ensure(in_dims.len() <= MAX_RANK, Error::RankTooLarge)?;
    let size = numel(in_dims)?;
    if size == 0 {
        return Ok(());
    }
    for ix in indices.iter_mut() {
        let Ok(i) = usize::try_from(*ix) else { continue };
        let (plane, mut off) = (i / size, i % size);
        let mut col = 0usize;
        let mut stride = size;
        for &d in in_dims.iter().rev() {
            // Peel axes from the last (fastest in row-major); in column-major
            // the last axis has the largest stride.
            stride /= d;
            col += (off % d) * stride;
            off /= d;
        }
        *ix = i64::try_from(plane * size + col).map_err(|_| Error::Overflow)?;
    }
    Ok(())
}

/// ONNX `AveragePool`: the sum over each window's taps inside the input,
/// divided by that number of taps, or with `count_include_pad` by the number
/// of taps inside the padded extent (taps past the end padding never count).
pub fn average_pool<T: Float>(
    p: &Pool<'_>,
    count_include_pad: bool,
    x: &[T],
    y: &mut [T],
) -> Result {
    let (in_size, out_size) = sizes(p, x.len(), y.len())?;
    if let Some(g) = Geom2::of(&p.window) {
        if out_size > 0 && p.planes > 0 {
            // 2x2 stride-2 windows inside the input (DenseNet's transitions)
            // as whole planes in vector code.
            if (g.pb, g.pe) == ([0, 0], [0, 0])
                && (g.k, g.s, g.d) == ([2, 2], [2, 2], [1, 1])
                && let Some(xf) = T::f32s(x)
                && let Some(yf) = T::f32s_mut(y)
                && simd::avg_pool_2x2(p.planes, (g.h, g.w), (g.oh, g.ow), xf, yf)
            {
                return Ok(());
            }
            average_pool_2d(&g, p.planes, in_size, out_size, count_include_pad, x, y);
        }
        return Ok(());
    }
    each_output(p, out_size, |plane, o, opos| {
        let base = plane * in_size;
        let mut sum = T::ZERO;
        let mut count = 0usize;
        p.window.taps(opos, |_, at| match at {
            Some(at) => {
                sum = sum.add(x[base + at]);
                count += 1;
            }
            None if count_include_pad => count += 1,
            None => {}
        });
        y[o] = sum.div(T::from_usize(count)).unwrap_or(T::NAN);
    });
    Ok(())
}

/// [`max_pool`] on a 2-D window, `LANES` planes at a time: same taps, same
/// order, same tie and NaN rules.
fn max_pool_2d<T: Num>(
    g: &Geom2,
    planes: usize,
    in_size: usize,
    out_size: usize,
    x: &[T],
    y: &mut [T],
    mut indices: Option<&mut [i64]>,
) {
    for first in (0..planes).step_by(LANES) {
        let bases = lane_bases(first, planes, in_size);
        let live = LANES.min(planes - first);
        for oy in 0..g.oh {
            let rows = g.rows(oy);
            for ox in 0..g.ow {
                let cols = g.cols(ox);
                let mut best = [T::LOWEST; LANES];
                let mut at = [usize::MAX; LANES];
                let mut any = false;
                g.each_tap(rows, cols, |off| {
                    for l in 0..LANES {
                        let i = bases[l] + off;
                        let v = x[i];
                        if !any || v > best[l] || (v.is_nan() && !best[l].is_nan()) {
                            best[l] = v;
                            at[l] = i;
                        }
                    }
                    any = true;
                });
                let o = oy * g.ow + ox;
                for l in 0..live {
                    let yo = (first + l) * out_size + o;
                    y[yo] = best[l];
                    if let Some(ix) = indices.as_deref_mut() {
                        ix[yo] = if any { at[l] as i64 } else { -1 };
                    }
                }
            }
        }
    }
}

/// The larger of `best` and `v` as [`max_pool`] ranks them: NaN wins over
/// a number, and of two equal values the first stays. Two selects, which
/// compile to vector blends in the row loops rather than a branch that
/// random data mispredicts.
#[inline(always)]
fn max_nan<T: Num>(best: T, v: T) -> T {
    // `v > best` is false when either is NaN, so a NaN `best` stays.
    let larger = if v > best { v } else { best };
    if v.is_nan() { v } else { larger }
}

/// Input columns one pass of [`max_pool_2d_separable`] reduces at a time
/// (a stack buffer: 2 KiB for f64).
const SEPARABLE_COLS: usize = 256;

/// [`max_pool`] on an undilated 2-D window without `Indices`, plane by
/// plane and output row by output row, in two contiguous passes: the
/// maximum down the window's rows for a run of input columns (a loop over
/// whole rows, which vectorises), then across each window's columns. The
/// maximum is the same value as the tap-by-tap scan's (NaN still wins);
/// only which of two equal values it keeps may differ, which shows only as
/// the sign of a zero.
fn max_pool_2d_separable<T: Num>(g: &Geom2, in_size: usize, out_size: usize, x: &[T], y: &mut [T]) {
    // Output columns per pass, so their input columns fit the buffer (the
    // caller checked the window is no wider than it).
    let step = (SEPARABLE_COLS.saturating_sub(g.k[1]) / g.s[1].max(1) + 1).max(1);
    let mut buf = [T::LOWEST; SEPARABLE_COLS];
    // The input columns `[lo, hi)` of output column `ox`'s window that lie
    // inside the input (undilated: no division, unlike `Span`).
    let (k, s, pb, w) = (g.k[1], g.s[1], g.pb[1], g.w);
    let in_cols = |ox: usize| {
        let top = ox * s;
        let lo = top.saturating_sub(pb).min(w);
        (lo, (top + k).saturating_sub(pb).min(w).max(lo))
    };
    for (xp, yp) in x.chunks_exact(in_size).zip(y.chunks_exact_mut(out_size)) {
        for (oy, yrow) in yp.chunks_exact_mut(g.ow).enumerate() {
            let rows = g.rows(oy);
            let nrows = rows.hi - rows.lo;
            if nrows == 0 {
                yrow.fill(T::LOWEST);
                continue;
            }
            for (block, yblock) in yrow.chunks_mut(step).enumerate() {
                let first = block * step;
                let last = first + yblock.len() - 1;
                // Input columns the block's windows read: [c0, c1).
                let (c0, _) = in_cols(first);
                let c1 = in_cols(last).1.max(c0);
                let width = c1 - c0;
                debug_assert!(width <= buf.len(), "max pool: {width} columns per pass");
                let Some(acc) = buf.get_mut(..width) else { return };
                let row_at =
                    |r: usize| xp.get((rows.start + r) * g.w + c0..).and_then(|v| v.get(..width));
                debug_assert!(
                    row_at(nrows - 1).is_some(),
                    "max pool: input rows {}..{} of a {in_size}-float plane",
                    rows.start,
                    rows.start + nrows
                );
                let Some(top) = row_at(0) else { return };
                acc.copy_from_slice(top);
                for r in 1..nrows {
                    let Some(src) = row_at(r) else { return };
                    max_rows(acc, src);
                }
                // Windows inside the input from the first one that is, by a
                // loop of fixed shape; the rest (edges) one by one below.
                let inner = pb.div_ceil(s.max(1)).clamp(first, last + 1) - first;
                let start = ((first + inner) * s).saturating_sub(pb);
                let (acc_in, out_in) = (
                    acc.get(start.saturating_sub(c0)..).unwrap_or(&[]),
                    yblock.get_mut(inner..).unwrap_or(&mut []),
                );
                let fast = match (s, k) {
                    (2, 3) => strided_windows::<T, 2, 3>(acc_in, out_in),
                    (2, 2) => strided_windows::<T, 2, 2>(acc_in, out_in),
                    (1, _) => sliding_windows(acc_in, out_in, k),
                    _ => 0,
                };
                let (head, rest) = yblock.split_at_mut(inner.min(yblock.len()));
                let tail = rest.get_mut(fast..).unwrap_or(&mut []);
                let edges = (first..).zip(head).chain((first + inner + fast..).zip(tail));
                for (ox, out) in edges {
                    let (lo, hi) = in_cols(ox);
                    let taps = acc.get(lo.saturating_sub(c0)..hi.saturating_sub(c0));
                    // The common 2- and 3-wide windows without a loop.
                    *out = match taps {
                        Some(&[a, b, c]) => max_nan(max_nan(a, b), c),
                        Some(&[a, b]) => max_nan(a, b),
                        Some([head, rest @ ..]) => rest.iter().fold(*head, |b, &v| max_nan(b, v)),
                        _ => T::LOWEST,
                    };
                }
            }
        }
    }
}

/// `acc[i] = max(acc[i], src[i])` as [`max_nan`] ranks, in fixed-size
/// chunks the compiler turns into vector selects. Kept out of line: inlined
/// in [`max_pool_2d_separable`] it stayed scalar (the compiler no longer
/// proved `acc` and `src` apart); on its own it runs 4 lanes wide even at
/// the baseline (ResNet-18's 64x112x112 pool, with [`strided_windows`]:
/// 0.63 -> 0.25 ms).
#[inline(never)]
fn max_rows<T: Num>(acc: &mut [T], src: &[T]) {
    if let Some(s) = T::f32s(src)
        && let Some(a) = T::f32s_mut(acc)
        && simd::max_rows(a, s)
    {
        return;
    }
    let (a16, a_rest) = acc.as_chunks_mut::<16>();
    let (s16, s_rest) = src.as_chunks::<16>();
    for (a, v) in a16.iter_mut().zip(s16) {
        for l in 0..16 {
            a[l] = max_nan(a[l], v[l]);
        }
    }
    for (a, &v) in a_rest.iter_mut().zip(s_rest) {
        *a = max_nan(*a, v);
    }
}

/// `out[i] = max(acc[i * S .. i * S + K])` (as [`max_nan`] ranks) for
/// the leading outputs whose window and the next `S` columns lie in `acc`,
/// in a loop of fixed shape the compiler vectorises (a stride-2 window is
/// an even/odd de-interleave; out of line for the reason [`max_rows`]
/// gives). Returns how many outputs it wrote. `K` is at most `2 * S`.
#[inline(never)]
fn strided_windows<T: Num, const S: usize, const K: usize>(acc: &[T], out: &mut [T]) -> usize {
    const { assert!(S > 0 && K > 0 && K <= 2 * S) };
    if S == 2
        && let Some(a) = T::f32s(acc)
        && let Some(o) = T::f32s_mut(out)
        && let Some(n) = match K {
            2 => simd::max_windows_s2::<2>(a, o),
            3 => simd::max_windows_s2::<3>(a, o),
            _ => None,
        }
    {
        return n;
    }
    let (chunks, _) = acc.as_chunks::<S>();
    let n = out.len().min(chunks.len().saturating_sub(1));
    // Exact lengths, so the indexing below needs no checks in the loop.
    let (Some(out), Some(chunks)) = (out.get_mut(..n), chunks.get(..n + 1)) else { return 0 };
    for i in 0..n {
        let (a, b) = (&chunks[i], &chunks[i + 1]);
        let mut m = a[0];
        for t in 1..K {
            m = max_nan(m, if t < S { a[t] } else { b[t - S] });
        }
        out[i] = m;
    }
    n
}

/// `out[i] = max(acc[i .. i + k])` (as [`max_nan`] ranks, in ascending
/// order) for the leading outputs whose window lies in `acc`: the stride-1
/// windows (Inception's 3x3 pools, SPP's 5x5); returns how many it wrote
/// (none for `k == 0`).
#[inline(never)]
fn sliding_windows<T: Num>(acc: &[T], out: &mut [T], k: usize) -> usize {
    if let Some(a) = T::f32s(acc)
        && let Some(o) = T::f32s_mut(out)
        && let Some(n) = simd::max_windows_s1(a, o, k)
    {
        return n;
    }
    let n = out.len().min((acc.len() + 1).saturating_sub(k));
    for (i, o) in out.iter_mut().take(n).enumerate() {
        let Some([head, rest @ ..]) = acc.get(i..i + k) else { return i };
        *o = rest.iter().fold(*head, |b, &v| max_nan(b, v));
    }
    n
}

/// [`average_pool`] on a 2-D window, `LANES` planes at a time: each sum
/// adds the same taps in the same order, divided by the same count.
fn average_pool_2d<T: Float>(
    g: &Geom2,
    planes: usize,
    in_size: usize,
    out_size: usize,
    count_include_pad: bool,
    x: &[T],
    y: &mut [T],
) {
    for first in (0..planes).step_by(LANES) {
        let bases = lane_bases(first, planes, in_size);
        let live = LANES.min(planes - first);
        for oy in 0..g.oh {
            let rows = g.rows(oy);
            for ox in 0..g.ow {
                let cols = g.cols(ox);
                let mut sums = [T::ZERO; LANES];
                g.each_tap(rows, cols, |off| {
                    for l in 0..LANES {
                        sums[l] = sums[l].add(x[bases[l] + off]);
                    }
                });
                let count = if count_include_pad {
                    rows.padded * cols.padded
                } else {
                    (rows.hi - rows.lo) * (cols.hi - cols.lo)
                };
                let count = T::from_usize(count);
                let o = oy * g.ow + ox;
                for l in 0..live {
                    y[(first + l) * out_size + o] = sums[l].div(count).unwrap_or(T::NAN);
                }
            }
        }
    }
}

/// ONNX `LpPool`: `(sum |x|^p)^(1/p)` over each window's taps inside the
/// input (padding contributes zero).
pub fn lp_pool<T: Float>(pp: &Pool<'_>, p: u32, x: &[T], y: &mut [T]) -> Result {
    ensure(p > 0, Error::InvalidParams)?;
    let (in_size, out_size) = sizes(pp, x.len(), y.len())?;
    let inv = T::ONE.div(T::from_usize(p as usize)).unwrap_or(T::NAN);
    each_output(pp, out_size, |plane, o, opos| {
        let base = plane * in_size;
        let mut sum = T::ZERO;
        pp.window.taps(opos, |_, at| {
            if let Some(at) = at {
                sum = sum.add(Num::abs(x[base + at]).powi_small(p));
            }
        });
        y[o] = lp_root(sum, p, inv);
    });
    Ok(())
}

fn lp_root<T: Float>(sum: T, p: u32, inv: T) -> T {
    match p {
        1 => sum,
        2 => sum.sqrt(),
        _ => sum.powf(inv),
    }
}

fn global_check(planes: usize, size: usize, x_len: usize, y_len: usize) -> Result {
    ensure(x_len == planes.checked_mul(size).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y_len == planes, Error::ShapeMismatch)
}

/// ONNX `GlobalAveragePool`: the mean of each of `planes` contiguous planes of
/// `size` elements (`y` has one element per plane).
pub fn global_average_pool<T: Float>(planes: usize, size: usize, x: &[T], y: &mut [T]) -> Result {
    let count = T::from_usize(size);
    global_reduce(planes, size, x, y, T::ZERO, T::add, |s| s.div(count).unwrap_or(T::NAN))
}

/// [`global_average_pool`] on f32 for generated code: each plane summed in
/// sixteen partial sums (a vector register's worth, compiled for the widest
/// unit), so the result can differ from the sequential sum by rounding.
/// Planes shorter than a vector take [`global_average_pool`].
pub fn sglobal_average_pool(planes: usize, size: usize, x: &[f32], y: &mut [f32]) -> Result {
    if size < 16 {
        return global_average_pool(planes, size, x, y);
    }
    global_check(planes, size, x.len(), y.len())?;
    crate::simd::vectorize_wide(PlaneMeans { size, x, y });
    Ok(())
}

/// The body of [`sglobal_average_pool`].
struct PlaneMeans<'a> {
    size: usize,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl crate::simd::Vectorize for PlaneMeans<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let count = self.size as f32;
        for (plane, o) in self.x.chunks_exact(self.size).zip(self.y.iter_mut()) {
            *o = crate::vmath::lane_sum(plane) / count;
        }
    }
}

/// Folds each of `planes` contiguous planes of `size` elements, `LANES`
/// planes at a time, from `init` with `step`, and writes `finish` of each.
fn global_reduce<T: Num>(
    planes: usize,
    size: usize,
    x: &[T],
    y: &mut [T],
    init: T,
    step: impl Fn(T, T) -> T,
    finish: impl Fn(T) -> T,
) -> Result {
    global_check(planes, size, x.len(), y.len())?;
    for (first, ys) in (0..planes).step_by(LANES).zip(y.chunks_mut(LANES)) {
        let bases = lane_bases(first, planes, size);
        let mut acc = [init; LANES];
        for i in 0..size {
            for l in 0..LANES {
                acc[l] = step(acc[l], x[bases[l] + i]);
            }
        }
        for (o, a) in ys.iter_mut().zip(acc) {
            *o = finish(a);
        }
    }
    Ok(())
}

/// ONNX `GlobalMaxPool`: the maximum of each plane (NaN propagates; the
/// lowest value for an empty plane).
pub fn global_max_pool<T: Num>(planes: usize, size: usize, x: &[T], y: &mut [T]) -> Result {
    global_reduce(planes, size, x, y, T::LOWEST, T::max_of, |b| b)
}

/// ONNX `GlobalLpPool`: `(sum |x|^p)^(1/p)` over each plane.
pub fn global_lp_pool<T: Float>(
    planes: usize,
    size: usize,
    p: u32,
    x: &[T],
    y: &mut [T],
) -> Result {
    ensure(p > 0, Error::InvalidParams)?;
    global_check(planes, size, x.len(), y.len())?;
    let inv = T::ONE.div(T::from_usize(p as usize)).unwrap_or(T::NAN);
    y.fill(T::ZERO);
    for (o, plane) in y.iter_mut().zip(x.chunks(size.max(1))) {
        let s = plane.iter().fold(T::ZERO, |a, &v| a.add(Num::abs(v).powi_small(p)));
        *o = lp_root(s, p, inv);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_global_average_matches_the_sequential_mean() {
        for (planes, size) in [(3, 1), (5, 15), (4, 16), (3, 17), (7, 49), (2, 200), (0, 20)] {
            let x: Vec<f32> =
                (0..planes * size).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
            let (mut want, mut got) = (vec![0.0f32; planes], vec![9.0f32; planes]);
            global_average_pool(planes, size, &x, &mut want).unwrap();
            sglobal_average_pool(planes, size, &x, &mut got).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5, "{planes}x{size}: {g} vs {w}");
            }
        }
        let mut y = [0.0f32; 2];
        assert!(sglobal_average_pool(2, 20, &[0.0; 39], &mut y).is_err());
        assert!(sglobal_average_pool(3, 20, &[0.0; 60], &mut y).is_err());
    }

    fn pool1<'a>(
        in_dims: &'a [usize],
        out_dims: &'a [usize],
        kernel: &'a [usize],
        strides: &'a [usize],
        dilations: &'a [usize],
        pads: &'a [usize],
    ) -> Pool<'a> {
        Pool {
            planes: 1,
            window: Window {
                in_dims,
                out_dims,
                kernel,
                strides,
                dilations,
                pads_begin: pads,
                pads_end: pads,
            },
        }
    }

    #[test]
    fn max_pool_2d_with_indices() {
        // 4x4 input 0..16, 2x2 windows, stride 2: maxima at the bottom-right of each block.
        let x: [f32; 16] = core::array::from_fn(|i| i as f32);
        let p = pool1(&[4, 4], &[2, 2], &[2, 2], &[2, 2], &[1, 1], &[0, 0]);
        let mut y = [0.0f32; 4];
        let mut ix = [0i64; 4];
        max_pool(&p, &x, &mut y, Some(&mut ix)).unwrap();
        assert_eq!(y, [5.0, 7.0, 13.0, 15.0]);
        assert_eq!(ix, [5, 7, 13, 15]);
    }

    #[test]
    fn separable_max_pool_matches_the_tap_by_tap_scan() {
        // Pseudo-random values with NaN and -inf mixed in.
        let mut x = [0.0f32; 2 * 3 * 300];
        let mut y = [0.0f32; 2 * 8 * 310];
        let mut y_ref = [0.0f32; 2 * 8 * 310];
        let mut ix = [0i64; 2 * 8 * 310];
        let mut cases = 0;
        for (h, w) in [(1, 1), (3, 5), (7, 7), (2, 9), (3, 300), (1, 300)] {
            for k in [1, 2, 3, 4, 300] {
                for s in 1..=3 {
                    for (pb, pe) in [(0, 0), (1, 1), (0, 2), (2, 1)] {
                        let (kh, kw) = (k.min(3), k);
                        if pb.max(pe) >= kh.min(kw) || h + pb + pe < kh || w + pb + pe < kw {
                            continue;
                        }
                        let (oh, ow) = ((h + pb + pe - kh) / s + 1, (w + pb + pe - kw) / s + 1);
                        let (n_in, n_out) = (2 * h * w, 2 * oh * ow);
                        crate::simd::tests::fill(&mut x[..n_in], cases);
                        // Specials mixed in at a stride prime to the row widths.
                        for (i, v) in x[..n_in].iter_mut().enumerate().step_by(7) {
                            *v = [f32::NAN, f32::NEG_INFINITY, -0.0][i % 3];
                        }
                        let p = Pool {
                            planes: 2,
                            window: Window {
                                in_dims: &[h, w],
                                out_dims: &[oh, ow],
                                kernel: &[kh, kw],
                                strides: &[s, s],
                                dilations: &[1, 1],
                                pads_begin: &[pb, pb],
                                pads_end: &[pe, pe],
                            },
                        };
                        max_pool(&p, &x[..n_in], &mut y[..n_out], None).unwrap();
                        max_pool(&p, &x[..n_in], &mut y_ref[..n_out], Some(&mut ix[..n_out]))
                            .unwrap();
                        for (i, (a, b)) in y[..n_out].iter().zip(&y_ref[..n_out]).enumerate() {
                            assert!(
                                a == b || (a.is_nan() && b.is_nan()),
                                "h {h} w {w} k {kh}x{kw} s {s} pads {pb},{pe} at {i}: {a} vs {b}"
                            );
                        }
                        cases += 1;
                    }
                }
            }
        }
        assert!(cases > 100, "{cases}");
    }

    /// The f32 passes (explicit vector code where the CPU has it) give the
    /// generic loops' results bit for bit, the f64 instantiation of which
    /// stays generic: ties between `-0.0` and `0.0` keep the earlier value
    /// and a NaN wins, at every tail length.
    #[test]
    fn f32_pool_passes_match_the_generic_loops() {
        let mut src = [0.0f32; 80];
        let mut acc0 = [0.0f32; 80];
        crate::simd::tests::fill(&mut src, 3);
        crate::simd::tests::fill(&mut acc0, 4);
        for i in (0..80).step_by(5) {
            acc0[i] = [-0.0, 0.0, f32::NAN, f32::NEG_INFINITY][i / 5 % 4];
            src[i] = [0.0, -0.0, 1.0, f32::NAN][i / 5 % 4];
        }
        src[13] = f32::NAN;
        acc0[13] = -f32::NAN;
        let same = |a: f32, b: f64| a.to_bits() == (b as f32).to_bits() || a.is_nan() && b.is_nan();
        let wide = |v: &[f32]| v.iter().map(|&v| f64::from(v)).collect::<Vec<f64>>();
        for n in 0..=80 {
            let mut acc = acc0;
            let mut acc64 = wide(&acc0);
            max_rows(&mut acc[..n], &src[..n]);
            max_rows(&mut acc64[..n], &wide(&src[..n]));
            for (i, (&a, &b)) in acc.iter().zip(&acc64).enumerate() {
                assert!(same(a, b), "rows of {n}, at {i}: {a} vs {b}");
            }
            for (out_len, fill) in [(40, 7.0), (n / 2, 8.0), (3, 9.0)] {
                let mut out = [[fill; 40]; 2];
                let mut out64 = [[f64::from(fill); 40]; 2];
                let (x, x64) = (&acc0[..n], wide(&acc0[..n]));
                let counts = [
                    strided_windows::<f32, 2, 2>(x, &mut out[0][..out_len]),
                    strided_windows::<f32, 2, 3>(x, &mut out[1][..out_len]),
                ];
                let counts64 = [
                    strided_windows::<f64, 2, 2>(&x64, &mut out64[0][..out_len]),
                    strided_windows::<f64, 2, 3>(&x64, &mut out64[1][..out_len]),
                ];
                assert_eq!(counts, counts64, "windows of {n} into {out_len}");
                for (i, (&a, &b)) in out.iter().flatten().zip(out64.iter().flatten()).enumerate() {
                    assert!(same(a, b), "windows of {n} into {out_len}, at {i}: {a} vs {b}");
                }
                for k in 0..=5 {
                    let mut out = [fill; 40];
                    let mut out64 = [f64::from(fill); 40];
                    let count = sliding_windows(x, &mut out[..out_len], k);
                    assert_eq!(count, sliding_windows(&x64, &mut out64[..out_len], k));
                    for (i, (&a, &b)) in out.iter().zip(&out64).enumerate() {
                        assert!(same(a, b), "{k} wide windows of {n} into {out_len}, at {i}");
                    }
                }
            }
        }
    }

    /// Whole stride-2 pools in f32 (explicit vector code where the CPU has
    /// it) give the f64 instantiation's generic results bit for bit: ties
    /// between `-0.0` and `0.0`, NaN, padding on either side, windows that
    /// end in the padding (ceil mode) or lie wholly in it, every tail length.
    #[test]
    fn f32_stride_2_pools_match_the_generic_loops() {
        let mut cases = 0;
        for (h, w) in [(1, 1), (2, 3), (5, 17), (7, 33), (4, 34), (3, 35), (6, 64), (9, 111)] {
            for (kh, kw) in [(1, 2), (2, 2), (3, 3), (3, 2), (2, 3), (4, 3)] {
                for (pb, pe) in [(0, 0), (1, 0), (0, 1), (1, 1), (2, 2), (0, 3)] {
                    if h + pb + pe < kh || w + pb + pe < kw {
                        continue;
                    }
                    let (oh, ow) = ((h + pb + pe - kh) / 2 + 1, (w + pb + pe - kw) / 2 + 1);
                    let planes = 3;
                    let mut x = vec![0.0f32; planes * h * w];
                    crate::simd::tests::fill(&mut x, cases);
                    for (i, v) in x.iter_mut().enumerate().step_by(5) {
                        *v = [f32::NAN, -0.0, 0.0, f32::NEG_INFINITY, -f32::NAN, 0.0][i % 6];
                    }
                    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
                    let p = Pool {
                        planes,
                        window: Window {
                            in_dims: &[h, w],
                            out_dims: &[oh, ow],
                            kernel: &[kh, kw],
                            strides: &[2, 2],
                            dilations: &[1, 1],
                            pads_begin: &[pb, pb],
                            pads_end: &[pe, pe],
                        },
                    };
                    let mut y = vec![7.0f32; planes * oh * ow];
                    let mut y64 = vec![7.0f64; planes * oh * ow];
                    max_pool(&p, &x, &mut y, None).unwrap();
                    max_pool(&p, &x64, &mut y64, None).unwrap();
                    for (i, (&a, &b)) in y.iter().zip(&y64).enumerate() {
                        assert!(
                            a.to_bits() == (b as f32).to_bits() || a.is_nan() && b.is_nan(),
                            "{h}x{w} k {kh}x{kw} pads {pb},{pe} at {i}: {a} vs {b}"
                        );
                    }
                    cases += 1;
                }
            }
        }
        assert!(cases > 200, "{cases}");
    }

    /// 2x2 stride-2 average pools in f32 (explicit vector code where the
    /// CPU has it) give the generic loop's results bit for bit: the same
    /// sums in the same order (signed zeros, infinities, NaN), odd sizes
    /// whose last row or column no window reads, every tail length.
    #[test]
    fn f32_2x2_average_pools_match_the_generic_loop() {
        let mut cases = 0;
        for (h, w) in [(2, 2), (3, 5), (4, 31), (5, 32), (2, 33), (7, 64), (6, 67), (14, 14)] {
            for (count_pad, planes) in [(false, 3), (true, 2)] {
                let (oh, ow) = (h / 2, w / 2);
                let mut x = vec![0.0f32; planes * h * w];
                crate::simd::tests::fill(&mut x, cases);
                for (i, v) in x.iter_mut().enumerate().step_by(3) {
                    *v = [-0.0, f32::INFINITY, 0.0, -0.0, f32::NAN, 1e30, -0.0][i % 7];
                }
                // A window of negative zeros averages to +0.0 (the sum
                // starts from +0.0).
                for at in [0, 1, w, w + 1] {
                    x[at] = -0.0;
                }
                let p = Pool {
                    planes,
                    window: Window {
                        in_dims: &[h, w],
                        out_dims: &[oh, ow],
                        kernel: &[2, 2],
                        strides: &[2, 2],
                        dilations: &[1, 1],
                        pads_begin: &[0, 0],
                        pads_end: &[0, 0],
                    },
                };
                let mut y = vec![7.0f32; planes * oh * ow];
                let mut want = vec![7.0f32; planes * oh * ow];
                average_pool(&p, count_pad, &x, &mut y).unwrap();
                let g = Geom2::of(&p.window).unwrap();
                average_pool_2d(&g, planes, h * w, oh * ow, count_pad, &x, &mut want);
                for (i, (&a, &b)) in y.iter().zip(&want).enumerate() {
                    assert!(
                        a.to_bits() == b.to_bits() || a.is_nan() && b.is_nan(),
                        "{h}x{w} at {i}: {a} vs {b}"
                    );
                }
                cases += 1;
            }
        }
        assert_eq!(cases, 16);
    }

    #[test]
    fn column_major_indices() {
        // A 2x3 plane: row-major offset r * 3 + c becomes c * 2 + r; plane 1 keeps its base 6.
        let mut ix = [0i64, 1, 2, 3, 4, 5, 6 + 5, -1];
        max_pool_indices_column_major(&[2, 3], &mut ix).unwrap();
        assert_eq!(ix, [0, 2, 4, 1, 3, 5, 6 + 5, -1]);
        // 3-D [2, 2, 2]: (a, b, c) row-major 4a + 2b + c -> column-major a + 2b + 4c.
        let mut ix: [i64; 8] = core::array::from_fn(|i| i as i64);
        max_pool_indices_column_major(&[2, 2, 2], &mut ix).unwrap();
        assert_eq!(ix, [0, 4, 2, 6, 1, 5, 3, 7]);
    }

    #[test]
    fn max_pool_pads_never_win_and_dilation() {
        // All-negative input with padding: the max is a real element, not the zero pad.
        let p = pool1(&[3], &[3], &[3], &[1], &[1], &[1]);
        let mut y = [0i32; 3];
        max_pool(&p, &[-5, -1, -3], &mut y, None).unwrap();
        assert_eq!(y, [-1, -1, -1]);
        // Dilation 2 over [1, 9, 2, 8, 3]: taps {0,2,4} only -> 3.
        let p = pool1(&[5], &[1], &[3], &[1], &[2], &[0]);
        let mut y = [0i32; 1];
        max_pool(&p, &[1, 9, 2, 8, 3], &mut y, None).unwrap();
        assert_eq!(y, [3]);
    }

    #[test]
    fn average_pool_pad_counting() {
        // x = [1..5], kernel 3, stride 2, pad 1, ceil mode -> 3 outputs.
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0];
        let p = pool1(&[5], &[3], &[3], &[2], &[1], &[1]);
        let mut y = [0.0f32; 3];
        average_pool(&p, true, &x, &mut y).unwrap();
        assert_eq!(y, [1.0, 3.0, 3.0]);
        average_pool(&p, false, &x, &mut y).unwrap();
        assert_eq!(y, [1.5, 3.0, 4.5]);
        // Ceil mode without pads: the last window hangs off the end and
        // counts only its one real element either way.
        let p = pool1(&[5], &[3], &[2], &[2], &[1], &[0]);
        average_pool(&p, true, &x, &mut y).unwrap();
        assert_eq!(y, [1.5, 3.5, 5.0]);
        // Floor/ceil are the only accepted out dims.
        let p = pool1(&[5], &[4], &[2], &[2], &[1], &[0]);
        assert_eq!(average_pool(&p, true, &x, &mut [0.0; 4]), Err(Error::InvalidParams));
    }

    #[test]
    fn lp_and_global_pools() {
        // L2 over windows of 2: [3,4] -> 5, [6,8] -> 10.
        let p = pool1(&[4], &[2], &[2], &[2], &[1], &[0]);
        let mut y = [0.0f64; 2];
        lp_pool(&p, 2, &[3.0, -4.0, 6.0, 8.0], &mut y).unwrap();
        assert_eq!(y, [5.0, 10.0]);
        lp_pool(&p, 1, &[3.0, -4.0, 6.0, 8.0], &mut y).unwrap();
        assert_eq!(y, [7.0, 14.0]);
        let x = [1.0f32, 2.0, 3.0, 4.0, -1.0, -2.0];
        let mut y = [0.0f32; 2];
        global_average_pool(2, 3, &x, &mut y).unwrap();
        assert_eq!(y, [2.0, 1.0 / 3.0]);
        global_max_pool(2, 3, &x, &mut y).unwrap();
        assert_eq!(y, [3.0, 4.0]);
        let mut z = [0.0f32; 3];
        global_lp_pool(3, 2, 2, &[3.0, 4.0, 0.0, 0.0, 5.0, 12.0], &mut z).unwrap();
        assert_eq!(z, [5.0, 0.0, 13.0]);
        assert_eq!(global_max_pool(2, 3, &x[..5], &mut y), Err(Error::ShapeMismatch));
    }

    /// Runs `f` on the 2-D window and on the same window with a leading
    /// unit axis (which takes the N-d tap walk).
    fn both_ways(planes: usize, g: [[usize; 2]; 7], mut f: impl FnMut(&Pool<'_>, &Pool<'_>)) {
        let [ind, out, k, s, d, pb, pe] = g;
        let lift = |v: [usize; 2], one: usize| [one, v[0], v[1]];
        let (ind3, out3, k3) = (lift(ind, 1), lift(out, 1), lift(k, 1));
        let (s3, d3, pb3, pe3) = (lift(s, 1), lift(d, 1), lift(pb, 0), lift(pe, 0));
        let two = Window {
            in_dims: &ind,
            out_dims: &out,
            kernel: &k,
            strides: &s,
            dilations: &d,
            pads_begin: &pb,
            pads_end: &pe,
        };
        let three = Window {
            in_dims: &ind3,
            out_dims: &out3,
            kernel: &k3,
            strides: &s3,
            dilations: &d3,
            pads_begin: &pb3,
            pads_end: &pe3,
        };
        f(&Pool { planes, window: two }, &Pool { planes, window: three });
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    #[test]
    fn pools_2d_match_nd_walk() {
        // (planes, [in, out, kernel, strides, dilations, pads begin, pads end])
        let cases: &[(usize, [[usize; 2]; 7])] = &[
            (3, [[5, 7], [3, 4], [2, 2], [2, 2], [1, 1], [0, 0], [1, 1]]),
            (11, [[6, 5], [3, 3], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]]),
            (9, [[25, 5], [1, 1], [24, 5], [24, 5], [1, 1], [0, 0], [0, 0]]),
            (8, [[7, 9], [4, 3], [3, 2], [2, 3], [2, 1], [2, 0], [1, 1]]),
            (2, [[4, 4], [2, 3], [3, 3], [2, 2], [1, 1], [1, 1], [0, 1]]),
            (17, [[3, 3], [1, 1], [3, 3], [3, 3], [1, 1], [0, 0], [0, 0]]),
            (1, [[2, 9], [2, 5], [1, 3], [1, 2], [1, 1], [0, 1], [0, 1]]),
        ];
        for (t, &(planes, g)) in cases.iter().enumerate() {
            let [ind, out, ..] = g;
            let (xl, yl) = (planes * ind[0] * ind[1], planes * out[0] * out[1]);
            let mut x = [0.0f32; 2048];
            for (i, v) in x.iter_mut().enumerate().take(xl) {
                // Values with ties (small range) and an occasional NaN.
                *v = ((i * 37 + 11) % 23) as f32 * 0.5 - 4.0;
                if i % 41 == 17 {
                    *v = f32::NAN;
                }
            }
            let x = &x[..xl];
            both_ways(planes, g, |p2, p3| {
                let (mut a, mut b) = ([0.0f32; 1024], [0.0f32; 1024]);
                let (mut ia, mut ib) = ([0i64; 1024], [0i64; 1024]);
                max_pool(p2, x, &mut a[..yl], Some(&mut ia[..yl])).unwrap();
                max_pool(p3, x, &mut b[..yl], Some(&mut ib[..yl])).unwrap();
                assert!(same_bits(&a[..yl], &b[..yl]), "case {t}: max");
                assert_eq!(ia[..yl], ib[..yl], "case {t}: indices");
                max_pool(p2, x, &mut a[..yl], None).unwrap();
                assert!(same_bits(&a[..yl], &b[..yl]), "case {t}: max without indices");
                for cip in [false, true] {
                    average_pool(p2, cip, x, &mut a[..yl]).unwrap();
                    average_pool(p3, cip, x, &mut b[..yl]).unwrap();
                    assert!(same_bits(&a[..yl], &b[..yl]), "case {t}: average {cip}");
                }
                assert_eq!(
                    average_pool(p2, true, &x[..xl - 1], &mut a[..yl]),
                    Err(Error::ShapeMismatch)
                );
            });
            // Global pools over the same planes, against a plain fold.
            let size = ind[0] * ind[1];
            let (mut a, mut b) = ([0.0f32; 32], [0.0f32; 32]);
            global_average_pool(planes, size, x, &mut a[..planes]).unwrap();
            global_max_pool(planes, size, x, &mut b[..planes]).unwrap();
            for (i, plane) in x.chunks(size).enumerate() {
                let sum = plane.iter().fold(0.0f32, |s, v| s + v);
                assert!(same_bits(&a[i..i + 1], &[sum / size as f32]), "case {t}: gap {i}");
                let max = plane.iter().fold(<f32 as Num>::LOWEST, |m, &v| m.max_of(v));
                assert!(same_bits(&b[i..i + 1], &[max]), "case {t}: gmp {i}");
            }
        }
        // No planes, empty planes.
        global_average_pool::<f32>(0, 4, &[], &mut []).unwrap();
        let mut y = [0.0f32; 2];
        global_average_pool(2, 0, &[], &mut y).unwrap();
        assert!(y.iter().all(|v| v.is_nan()));
        global_max_pool(2, 0, &[], &mut y).unwrap();
        assert_eq!(y, [<f32 as Num>::LOWEST; 2]);
    }
}
