//! The passes of the f32 pools (`pool::max_pool`, `pool::average_pool`)
//! and the stride-2 even-float copy, written once over [`Lanes`]: the same
//! designs as `avx512.rs` (the maximum down a window's rows over a run of
//! columns and across each stride-1 or stride-2 window of that run; whole
//! stride-1 same-size and stride-2 max pools plane by plane; the 2x2
//! stride-2 average pool), `N` lanes a step. AVX2 runs them (eight lanes);
//! AVX-512 keeps its own kernels in `avx512.rs`, whose speed these have
//! not been measured against.
//!
//! The ranking is the scalar one exactly (`pool::max_nan`): a NaN `v`
//! wins, else `v` replaces `best` only when larger, so of two equal values
//! (`-0.0` and `0.0`) the earlier stays. [`Lanes::max`]`(v, best)` gives
//! `v > best ? v : best`, and `best` whenever either is NaN; the lanes
//! where `v` is NaN then take `v`. Taps outside the input are `-inf`,
//! which never wins. The results are bit for bit the generic passes'.
//!
//! Whole vectors are loaded and stored whole (the masks of every lane,
//! known at compile time: plain `vmovups`); only a row's last partial
//! vector goes through the masked [`Lanes::load`] and [`Lanes::store`]
//! (on AVX2 `vmaskmovps` loads, which cost more than plain ones in these
//! streaming loops when every step takes them, and lane-by-lane stores:
//! never `vmaskmovps`'s store, microcoded on AMD). Every access is inside
//! its slice, checked once before the loops. No vector code sits in a
//! closure: one that LLVM leaves out of line is compiled without AVX2,
//! each intrinsic a call.

use crate::simd::lanes::{LaneKernel, Lanes};

/// `best` and `v` ranked as `pool::max_nan`, lane by lane.
#[inline(always)]
fn max_nan<L: Lanes>(l: L, best: L::V, v: L::V) -> L::V {
    l.select(l.is_nan(v), v, l.max(v, best))
}

/// Column offsets (and sizes they are computed from) stay below this, far
/// inside `isize` and, where they become float lanes, exact in `f32`
/// within the planes that reach them.
const FAR: usize = 1 << 40;

/// `acc[i] = max(acc[i], src[i])` for `i` below both lengths.
pub(super) struct MaxRows<'a> {
    pub acc: &'a mut [f32],
    pub src: &'a [f32],
}

impl LaneKernel for MaxRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) {
        let n = self.acc.len().min(self.src.len());
        let (a, s) = (self.acc.as_mut_ptr(), self.src.as_ptr());
        let whole = n - n % L::N;
        let mut i = 0;
        while i < whole {
            // SAFETY: lanes `i..i + N`, below `n`: inside both slices.
            unsafe { max_rows_step(l, a.add(i), s.add(i), l.below(L::N)) };
            i += L::N;
        }
        if whole < n {
            // SAFETY: lanes `whole..n`, inside both slices.
            unsafe { max_rows_step(l, a.add(whole), s.add(whole), l.below(n - whole)) };
        }
    }
}

/// `a[j] = max(a[j], s[j])` for the lanes `j` of `m`.
///
/// # Safety
/// Those lanes are readable at `s` and readable and writable at `a`.
#[inline(always)]
unsafe fn max_rows_step<L: Lanes>(l: L, a: *mut f32, s: *const f32, m: L::M) {
    // SAFETY: the caller's bounds; the lanes out of `m` are not accessed.
    unsafe {
        let best = l.load(a, m);
        l.store(a, m, max_nan(l, best, l.load(s, m)));
    }
}

/// `out[i] = max(acc[2 * i .. 2 * i + K])` for the leading outputs whose
/// window and the next two columns lie in `acc` (as the generic
/// `strided_windows::<f32, 2, K>` counts them); returns how many it wrote.
pub(super) struct WindowsS2<'a, const K: usize> {
    pub acc: &'a [f32],
    pub out: &'a mut [f32],
}

impl<const K: usize> LaneKernel for WindowsS2<'_, K> {
    type Output = usize;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> usize {
        const { assert!(K == 2 || K == 3) };
        let len = self.acc.len();
        let n = self.out.len().min((len / 2).saturating_sub(1));
        let (a, o) = (self.acc.as_ptr(), self.out.as_mut_ptr());
        let wide = L::N;
        let whole = n - n % wide;
        let mut i = 0;
        while i < whole {
            // SAFETY: a whole step's loads end at `2i + 2N + 2 <= 2n + 2 <=
            // len`; its outputs `i..i + N` lie below `n <= out.len()`.
            unsafe { windows_s2_step::<L, K>(l, a, len, o, i, None) };
            i += wide;
        }
        if whole < n {
            // SAFETY: outputs `whole..n`, inside `out`.
            unsafe { windows_s2_step::<L, K>(l, a, len, o, whole, Some(n - whole)) };
        }
        n
    }
}

/// The `N` outputs of [`WindowsS2`] from `i` of `acc` (`len` floats at
/// `a`) to `out` (at `o`): all of them (`None`), or the first `live`, the
/// loads then masked to `acc`.
///
/// # Safety
/// Outputs `i..i + live` (`N` for `None`) are writable at `o`; `i + live
/// <= len / 2 - 1`; with `None`, floats `2i .. 2i + 2N + 2` are readable
/// at `a`.
#[inline(always)]
unsafe fn windows_s2_step<L: Lanes, const K: usize>(
    l: L,
    a: *const f32,
    len: usize,
    o: *mut f32,
    i: usize,
    live: Option<usize>,
) {
    let (wide, c) = (L::N, 2 * i);
    debug_assert!(i + live.unwrap_or(wide) <= (len / 2).saturating_sub(1), "{i} of {len}");
    // SAFETY (loads): each keeps lanes `at..len` only (every lane of a
    // whole step, by the caller's bounds), inside `acc`; the others are
    // not accessed.
    let (lo, hi) = unsafe { (part(l, a, len, c, live), part(l, a, len, c + wide, live)) };
    let mut m = max_nan(l, l.evens(lo, hi), l.odds(lo, hi));
    if K == 3 {
        // SAFETY: as above.
        let (lo, hi) =
            unsafe { (part(l, a, len, c + 2, live), part(l, a, len, c + wide + 2, live)) };
        m = max_nan(l, m, l.evens(lo, hi));
    }
    // Output lane `j < live` read `acc[c + 2j .. c + 2j + K]`, all below
    // `2 * (len / 2 - 1) + 2 <= len`: the zeros past the end reach only
    // lanes the store drops.
    let keep = match live {
        None => l.below(wide),
        Some(n) => l.below(n),
    };
    // SAFETY: the lanes of `keep` are writable (the caller's bound).
    unsafe { l.store(o.add(i), keep, m) };
}

/// The `N` floats from `at` of the `len` at `a`: whole when `live` is
/// `None`, else masked to `len` (zero past it).
///
/// # Safety
/// With `None`, floats `at .. at + N` are readable at `a`; else the `len`
/// floats at `a` are.
#[inline(always)]
unsafe fn part<L: Lanes>(l: L, a: *const f32, len: usize, at: usize, live: Option<usize>) -> L::V {
    let m = if live.is_none() { l.below(L::N) } else { l.below(len.saturating_sub(at)) };
    // SAFETY: the caller's bounds; the lanes out of `m` are not accessed.
    unsafe { l.load(a.wrapping_add(at.min(len)), m) }
}

/// `out[i] = max(acc[i .. i + k])`, the taps in ascending order, for the
/// leading outputs whose window lies in `acc`; returns how many it wrote
/// (none for `k == 0`).
pub(super) struct WindowsS1<'a> {
    pub acc: &'a [f32],
    pub out: &'a mut [f32],
    pub k: usize,
}

impl LaneKernel for WindowsS1<'_> {
    type Output = usize;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> usize {
        let WindowsS1 { acc, out, k } = self;
        if k == 0 {
            return 0;
        }
        let n = out.len().min((acc.len() + 1).saturating_sub(k));
        let (a, o) = (acc.as_ptr(), out.as_mut_ptr());
        let whole = n - n % L::N;
        let mut i = 0;
        while i < whole {
            // SAFETY: outputs `i..i + N` below `n`.
            unsafe { windows_s1_step(l, a.add(i), o.add(i), k, l.below(L::N)) };
            i += L::N;
        }
        if whole < n {
            // SAFETY: outputs `whole..n`.
            unsafe { windows_s1_step(l, a.add(whole), o.add(whole), k, l.below(n - whole)) };
        }
        n
    }
}

/// `o[j] = max(a[j .. j + k])` for the lanes `j` of `m`.
///
/// # Safety
/// `a[j + t]` is readable and `o[j]` writable for every lane `j` of `m`
/// and `t < k`.
#[inline(always)]
unsafe fn windows_s1_step<L: Lanes>(l: L, a: *const f32, o: *mut f32, k: usize, m: L::M) {
    // SAFETY: the caller's bounds; the lanes out of `m` are not accessed.
    unsafe {
        let mut best = l.load(a, m);
        for t in 1..k {
            best = max_nan(l, best, l.load(a.add(t), m));
        }
        l.store(o, m, best);
    }
}

/// Floats of a plane [`MaxPoolSame`] reduces through its stack buffer.
pub(super) const SAME_PLANE: usize = 4096;

/// The stride-1 max pool whose output planes are the input's size (`kh x
/// kw` windows, `pt` rows and `pl` columns of padding before, the rest
/// after): every plane as one flat run of `h * w` floats, so a 14x14 plane
/// costs a few vector steps rather than a pass per row. The maximum down
/// each window's rows goes to a stack buffer, then across its columns, as
/// the separable passes take them (rows top to bottom, then columns left to
/// right). Taps outside the input are `-inf`: padding never wins; the
/// column of each lane is kept in a float vector, stepped by `N` and
/// wrapped at `w`. Run, it returns `false` (nothing written) when a plane
/// does not fit the buffer, the padding reaches past a window, the sizes
/// are too large for the offset arithmetic or the slices do not hold
/// `planes` planes.
pub(super) struct MaxPoolSame<'a> {
    pub planes: usize,
    pub hw: (usize, usize),
    pub k: (usize, usize),
    pub pad: (usize, usize),
    pub x: &'a [f32],
    pub y: &'a mut [f32],
}

impl LaneKernel for MaxPoolSame<'_> {
    type Output = bool;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> bool {
        const { assert!(L::N <= 16) };
        let MaxPoolSame { planes, hw: (h, w), k: (kh, kw), pad: (pt, pl), x, y } = self;
        let hw = h.saturating_mul(w);
        let fits = hw > 0
            && hw <= SAME_PLANE
            && pt < kh
            && pl < kw
            && kh < FAR
            && kw < FAR
            && Some(x.len()) == planes.checked_mul(hw)
            && Some(y.len()) == planes.checked_mul(hw);
        if !fits {
            return false;
        }
        let wide = L::N;
        let (all, low) = (l.below(wide), l.splat(f32::NEG_INFINITY));
        let lane: [f32; 16] = core::array::from_fn(|j| j as f32);
        // SAFETY: `N <= 16` floats of `lane`.
        let first_cols = wrap(l, unsafe { l.load(lane.as_ptr(), all) }, w);
        let mut buf = [0.0f32; SAME_PLANE];
        let bp = buf.as_mut_ptr();
        for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(hw)) {
            let (xp, yp) = (xp.as_ptr(), yp.as_mut_ptr());
            // Down the rows: lane `j` of the step at `i` takes the plane's
            // float `i + j + (ky - pt) * w` where that lies in the plane,
            // for the rows `ky` whose offset can reach inside it (the
            // others are all padding, which never wins).
            let mut i = 0;
            while i < hw {
                let mut best = low;
                for ky in pt.saturating_sub(h - 1)..kh.min(pt + h) {
                    let off = (ky as isize - pt as isize) * w as isize;
                    // SAFETY: `xp` holds the plane's `hw` floats.
                    best = max_nan(l, best, unsafe { tap(l, xp, hw, i, off) });
                }
                let keep = if i + wide <= hw { all } else { l.below(hw - i) };
                // SAFETY: lanes `i..hw` of the buffer, which holds `hw`
                // floats.
                unsafe { l.store(bp.add(i), keep, best) };
                i += wide;
            }
            // Across the columns: lane `j` takes `buf[i + j + kx - pl]`
            // where its column plus `kx - pl` lies in `0..w` (then the index
            // is in the plane).
            let mut col = first_cols;
            let mut i = 0;
            while i < hw {
                let mut best = low;
                for kx in pl.saturating_sub(w - 1)..kw.min(pl + w) {
                    let off = kx as isize - pl as isize;
                    // SAFETY: the buffer's first `hw` floats, written above.
                    let v = unsafe { tap(l, bp.cast_const(), hw, i, off) };
                    let v = match off {
                        ..0 => l.select(l.lt(col, l.splat(-off as f32)), low, v),
                        0 => v,
                        1.. => l.select(l.lt(col, l.splat((w as isize - off) as f32)), v, low),
                    };
                    best = max_nan(l, best, v);
                }
                let keep = if i + wide <= hw { all } else { l.below(hw - i) };
                // SAFETY: lanes `i..hw` of the output plane.
                unsafe { l.store(yp.add(i), keep, best) };
                col = wrap(l, l.add(col, l.splat(wide as f32)), w);
                i += wide;
            }
        }
        true
    }
}

/// The `N` floats of a plane of `hw` at `p` from `i + off`, for the lanes
/// `j` that lie in it (`0 <= i + j + off < hw`, `j < hw - i`); `-inf` in
/// the others, which are not accessed.
///
/// # Safety
/// The `hw` floats at `p` are readable; `i < hw`, `|off| < FAR`.
#[inline(always)]
unsafe fn tap<L: Lanes>(l: L, p: *const f32, hw: usize, i: usize, off: isize) -> L::V {
    debug_assert!(i < hw && off.unsigned_abs() < FAR, "{i} {off} of {hw}");
    let (lo, hi) = (-(i as isize + off), (hw - i) as isize - off.max(0));
    let at = p.wrapping_add(i).wrapping_offset(off);
    if lo <= 0 && hi >= L::N as isize {
        // SAFETY: every lane lies in the plane (just checked).
        unsafe { l.load(at, l.below(L::N)) }
    } else {
        let m = l.between(lo, hi);
        // SAFETY: the lanes of `m` lie in the plane.
        l.select(m, unsafe { l.load(at, m) }, l.splat(f32::NEG_INFINITY))
    }
}

/// Columns `c` (whole floats below `w + N`) wrapped into `0..w`: at most
/// `N / w + 1` subtractions of `w`, exact below 2^24.
#[inline(always)]
fn wrap<L: Lanes>(l: L, mut c: L::V, w: usize) -> L::V {
    debug_assert!(w > 0 && w <= SAME_PLANE);
    let wf = l.splat(w as f32);
    for _ in 0..L::N / w + 1 {
        c = l.select(l.lt(c, wf), c, l.sub(c, wf));
    }
    c
}

/// The undilated stride-2 max pool with `kh x KW` windows (`KW` 2 or 3;
/// ResNet's, SqueezeNet's and Inception's 3x3 and VGG's 2x2 pools), `pt`
/// rows and `pl` columns of padding before: each step's `N` outputs of an
/// output row from two `N`-column runs of the window's rows (3-wide
/// windows take their third taps from the next step's first run, carried
/// over), with no row buffer and no pass per row. The maximum goes down
/// the rows first, then across each window's columns, as the separable
/// passes take them; taps outside the input are `-inf`, which never wins
/// (so the results are bit for bit the generic passes', an all-padding
/// window included). Run, it returns `false` (nothing written) when the
/// slices do not hold `planes` planes or the sizes are too large for the
/// column arithmetic.
pub(super) struct MaxPoolS2<'a, const KW: usize> {
    pub planes: usize,
    pub hw: (usize, usize),
    pub out: (usize, usize),
    /// `kh`, `pt` and `pl`.
    pub window: (usize, usize, usize),
    pub x: &'a [f32],
    pub y: &'a mut [f32],
}

impl<const KW: usize> LaneKernel for MaxPoolS2<'_, KW> {
    type Output = bool;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> bool {
        const { assert!(KW == 2 || KW == 3) };
        let MaxPoolS2 { planes, hw: (h, w), out: (oh, ow), window: (kh, pt, pl), x, y } = self;
        let (hw, ohw) = (h.saturating_mul(w), oh.saturating_mul(ow));
        // Column offsets reach `2 * ow + 2N` and `-pl`; row offsets
        // `2 * oh + kh`.
        let fits = hw > 0
            && ohw > 0
            && w < FAR
            && ow < FAR
            && oh < FAR
            && pl < FAR
            && pt < FAR
            && kh < FAR
            && Some(x.len()) == planes.checked_mul(hw)
            && Some(y.len()) == planes.checked_mul(ohw);
        if !fits {
            return false;
        }
        let (wide, all) = (L::N, l.below(L::N));
        for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(ohw)) {
            let (xp, yp) = (xp.as_ptr(), yp.as_mut_ptr());
            for oy in 0..oh {
                let top = 2 * oy as isize - pt as isize;
                let rows = top.clamp(0, h as isize) as usize
                    ..(top + kh as isize).clamp(0, h as isize) as usize;
                // `N` outputs a step read columns `c .. c + 2N` (`+ 1` for
                // 3-wide windows: the next step's first column, carried
                // over).
                let mut c = -(pl as isize);
                // SAFETY (the calls of `down`): `rows` lie in `0..h`, rows
                // of the plane's `h * w` floats at `xp`; `|c| < 2 * FAR +
                // 2N`.
                let mut head = unsafe { down(l, xp, w, rows.clone(), c) };
                let yrow = yp.wrapping_add(oy * ow);
                let mut ox = 0;
                while ox < ow {
                    // SAFETY: as above.
                    let tail = unsafe { down(l, xp, w, rows.clone(), c + wide as isize) };
                    let first = l.evens(head, tail);
                    let mut m = max_nan(l, first, l.odds(head, tail));
                    let more = ox + wide < ow;
                    if KW == 3 || more {
                        // SAFETY: as above.
                        head = unsafe { down(l, xp, w, rows.clone(), c + 2 * wide as isize) };
                    }
                    if KW == 3 {
                        // The third taps are the next windows' first:
                        // `first` moved down a lane, then the next step's
                        // first column.
                        m = max_nan(l, m, l.shifted(first, head));
                    }
                    let keep = if more { all } else { l.below(ow - ox) };
                    // SAFETY: lanes `ox..ow` of output row `oy < oh`,
                    // inside `y`.
                    unsafe { l.store(yrow.add(ox), keep, m) };
                    c += 2 * wide as isize;
                    ox += wide;
                }
            }
        }
        true
    }
}

/// The maximum down rows `rows` of a plane of rows of `w` floats at `xp`,
/// over the `N` columns from `at`: taps outside `0..w` are `-inf` (zeros
/// loaded, replaced at the end: lanes do not mix).
///
/// # Safety
/// The rows `rows` of the plane are readable at `xp`; `|at| < 4 * FAR`.
#[inline(always)]
unsafe fn down<L: Lanes>(
    l: L,
    xp: *const f32,
    w: usize,
    mut rows: core::ops::Range<usize>,
    at: isize,
) -> L::V {
    let (lo, hi) = (-at, w as isize - at);
    debug_assert!(w < FAR && at.unsigned_abs() < 4 * FAR, "{at} of {w}");
    // The first row alone: `max_nan(-inf, v)` is `v`.
    let Some(top) = rows.next() else { return l.splat(f32::NEG_INFINITY) };
    let row = |r: usize| xp.wrapping_add(r * w).wrapping_offset(at);
    if lo <= 0 && hi >= L::N as isize {
        // Every lane inside the row: whole loads.
        let all = l.below(L::N);
        // SAFETY (loads): every lane's column `at + j` lies in `0..w`, so
        // it reads inside its row (the caller's bound).
        let mut v = unsafe { l.load(row(top), all) };
        for r in rows {
            // SAFETY: as above.
            v = max_nan(l, v, unsafe { l.load(row(r), all) });
        }
        return v;
    }
    let keep = l.between(lo, hi);
    // SAFETY (loads): a kept lane's column `at + j` lies in `0..w`, so it
    // reads inside its row (the caller's bound); the others are not
    // accessed.
    let mut v = unsafe { l.load(row(top), keep) };
    for r in rows {
        // SAFETY: as above.
        v = max_nan(l, v, unsafe { l.load(row(r), keep) });
    }
    l.select(keep, v, l.splat(f32::NEG_INFINITY))
}

/// The 2x2 stride-2 average pool whose windows all lie inside the input
/// (no padding; DenseNet's transitions): each step's `N` outputs from two
/// `2N`-column runs of a row pair, de-interleaved, the four taps added in
/// the generic loop's order (from zero, row by row) and divided by four
/// (as a product by 0.25: both are the exact quotient rounded once, the
/// same float, subnormals and NaN included), so the results are bit for
/// bit the generic loop's. Run, it returns `false` (nothing written) when
/// a window would reach past the input or the slices do not hold
/// `planes` planes.
pub(super) struct AvgPool2x2<'a> {
    pub planes: usize,
    pub hw: (usize, usize),
    pub out: (usize, usize),
    pub x: &'a [f32],
    pub y: &'a mut [f32],
}

impl LaneKernel for AvgPool2x2<'_> {
    type Output = bool;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> bool {
        let AvgPool2x2 { planes, hw: (h, w), out: (oh, ow), x, y } = self;
        let (hw, ohw) = (h.saturating_mul(w), oh.saturating_mul(ow));
        let fits = ohw > 0
            && oh.checked_mul(2).is_some_and(|v| v <= h)
            && ow.checked_mul(2).is_some_and(|v| v <= w)
            && Some(x.len()) == planes.checked_mul(hw)
            && Some(y.len()) == planes.checked_mul(ohw);
        if !fits {
            return false;
        }
        let wide = L::N;
        let all = l.below(wide);
        for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(ohw)) {
            let (xp, yp) = (xp.as_ptr(), yp.as_mut_ptr());
            for oy in 0..oh {
                // Rows `2 * oy` and `2 * oy + 1`, `2 * oy + 1 < h`; output
                // row `oy`.
                let (top, out) = (xp.wrapping_add(2 * oy * w), yp.wrapping_add(oy * ow));
                let whole = ow - ow % wide;
                let mut ox = 0;
                while ox < whole {
                    // SAFETY: columns `2 * ox .. 2 * ox + 2N <= 2 * ow <= w`
                    // of both rows, outputs `ox .. ox + N <= ow`.
                    unsafe { avg_step(l, top.add(2 * ox), w, out.add(ox), [all; 3]) };
                    ox += wide;
                }
                if whole < ow {
                    // The last step's windows read columns `2 * whole .. 2 *
                    // ow`, fewer than `2N`.
                    let cols = 2 * (ow - whole);
                    let masks =
                        [l.below(cols), l.below(cols.saturating_sub(wide)), l.below(ow - whole)];
                    // SAFETY: the lanes of the masks: columns below `2 * ow
                    // <= w` of both rows, outputs below `ow`.
                    unsafe { avg_step(l, top.add(2 * whole), w, out.add(whole), masks) };
                }
            }
        }
        true
    }
}

/// One step of [`AvgPool2x2`]: the `N` averages of the 2x2 windows from
/// `at` (rows `at` and `at + w`) to `out`; `[lo, hi, keep]` keep the
/// lanes of each row's first and second `N` floats read and of the
/// outputs written (zeros are added in the others, which are not stored).
///
/// # Safety
/// The lanes of `lo` and `hi` are readable at `at` and `at + N` and at
/// the same places a row (`w` floats) below; those of `keep` writable at
/// `out`.
#[inline(always)]
unsafe fn avg_step<L: Lanes>(l: L, at: *const f32, w: usize, out: *mut f32, masks: [L::M; 3]) {
    let [lo, hi, keep] = masks;
    let mut sum = l.splat(0.0);
    for row in [at, at.wrapping_add(w)] {
        // SAFETY: the caller's bounds; the lanes out of the masks are not
        // accessed.
        let (a, b) = unsafe { (l.load(row, lo), l.load(row.wrapping_add(L::N), hi)) };
        sum = l.add(sum, l.evens(a, b));
        sum = l.add(sum, l.odds(a, b));
    }
    // SAFETY: the caller's bound.
    unsafe { l.store(out, keep, l.mul(sum, l.splat(0.25))) };
}

/// `d[i] = s[2 * i]` for `i < 16`: the even floats of each `2N` as one
/// [`Lanes::evens`].
pub(super) struct EvensCopy<'a> {
    pub d: &'a mut [f32; 16],
    pub s: &'a [f32; 32],
}

impl LaneKernel for EvensCopy<'_> {
    type Output = ();

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) {
        const { assert!(16 % L::N == 0) };
        let (d, s) = (self.d.as_mut_ptr(), self.s.as_ptr());
        let (wide, all) = (L::N, l.below(L::N));
        for b in 0..16 / wide {
            // SAFETY: floats `2bN .. 2bN + 2N <= 32` of `s`, `bN .. bN + N
            // <= 16` of `d`.
            unsafe {
                let lo = l.load(s.add(2 * b * wide), all);
                let hi = l.load(s.add(2 * b * wide + wide), all);
                l.store(d.add(b * wide), all, l.evens(lo, hi));
            }
        }
    }
}
