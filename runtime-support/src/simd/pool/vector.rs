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
//! where `v` is NaN then take `v`. Where no tap is NaN that select is
//! left out: the whole pools check their inputs for NaN as they go (an
//! unordered compare for two vectors) and rank with `max` alone, taking
//! the planes or rows with a NaN again with the select. Taps outside the
//! input are `-inf`, which never wins. The results are bit for bit the
//! generic passes'.
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

/// Floats of [`MaxPoolSame`]'s stack buffer: a plane of [`SAME_PLANE`]
/// with its rows padded for the windows of a few columns, or flat.
const SAME_STAGE: usize = SAME_PLANE + 1024;

/// The geometry of a [`MaxPoolSame`] plane: `h x w` floats, `kh x kw`
/// windows, `pt` rows and `pl` columns of padding before.
#[derive(Clone, Copy)]
struct Same {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    pt: usize,
    pl: usize,
}

/// The stride-1 max pool whose output planes are the input's size (`kh x
/// kw` windows, `pt` rows and `pl` columns of padding before, the rest
/// after), plane by plane through a stack buffer: the maximum down each
/// window's rows, then across its columns, as the separable passes take
/// them (rows top to bottom, then columns left to right). A plane without
/// NaN (one unordered compare for two vectors finds out) ranks with one
/// `max` a tap: flat ([`same_plane_flat`]) when its rows are a few vectors
/// narrow and the limits of their columns fit a small table, else through
/// rows padded with `-inf` ([`same_plane_plain`]); a plane with NaN, or
/// one whose padded rows do not fit the buffer, takes
/// [`same_plane_exact`]. Run, it returns `false` (nothing written) when a
/// plane does not fit the buffer, the padding reaches past a window, the
/// sizes are too large for the offset arithmetic or the slices do not
/// hold `planes` planes.
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
        // Rows of `w + kw - 1` floats, and a row and a vector to spare.
        let padded = (h + 1).checked_mul(w + kw - 1).is_some_and(|n| n + L::N <= SAME_STAGE);
        let g = Same { h, w, kh, kw, pt, pl };
        // Rows narrower than a few vectors go flat, their limits in a
        // table: a vector for each tap of each of the `period` vectors
        // after which the columns repeat.
        let wide = L::N;
        let period = w / gcd(w, wide);
        let flat = padded && w < 4 * wide && pl <= wide && period * kw <= LIMITS;
        let mut limits = [0.0f32; LIMITS * 16];
        if flat {
            let mut col = 0;
            for q in 0..period {
                for j in 0..wide {
                    for kx in 0..kw {
                        let inside = (pl..pl + w).contains(&(col + kx));
                        limits[(q * kw + kx) * wide + j] =
                            if inside { f32::INFINITY } else { f32::NEG_INFINITY };
                    }
                    col = if col + 1 == w { 0 } else { col + 1 };
                }
            }
        }
        let flat = flat.then_some((limits.as_ptr(), period));
        let lane: [f32; 16] = core::array::from_fn(|j| j as f32);
        // SAFETY: `N <= 16` floats of `lane`.
        let first_cols = wrap(l, unsafe { l.load(lane.as_ptr(), l.below(L::N)) }, w);
        let mut buf = [0.0f32; SAME_STAGE];
        let bp = buf.as_mut_ptr();
        let len = x.len();
        let (xs, ys) = (x.as_ptr(), y.as_mut_ptr());
        let mut at = 0;
        while at < len {
            // SAFETY: plane `at / hw < planes`: the `len - at >= hw` floats
            // from `at` are readable in `x` and writable in `y` (of `len`
            // floats both); the buffer holds `SAME_STAGE` floats, which
            // `padded` checked enough for the plain pass.
            unsafe {
                let (xp, yp) = (xs.add(at), ys.add(at));
                let rest = len - at;
                if let Some(lim) = flat
                    && !any_nan(l, xp, hw)
                {
                    // The common windows with their loops unrolled.
                    match (kh, kw, pl) {
                        (3, 3, 1) => same_plane_flat::<L, 3, 3, 1>(l, g, xp, yp, rest, bp, lim),
                        (2, 2, 0) => same_plane_flat::<L, 2, 2, 0>(l, g, xp, yp, rest, bp, lim),
                        (5, 5, 2) => same_plane_flat::<L, 5, 5, 2>(l, g, xp, yp, rest, bp, lim),
                        _ => same_plane_flat::<L, 0, 0, ANY>(l, g, xp, yp, rest, bp, lim),
                    }
                } else if padded && !any_nan(l, xp, hw) {
                    match (kh, kw) {
                        (3, 3) => same_plane_plain::<L, 3, 3>(l, g, xp, yp, rest, bp),
                        (2, 2) => same_plane_plain::<L, 2, 2>(l, g, xp, yp, rest, bp),
                        (5, 5) => same_plane_plain::<L, 5, 5>(l, g, xp, yp, rest, bp),
                        _ => same_plane_plain::<L, 0, 0>(l, g, xp, yp, rest, bp),
                    }
                } else {
                    same_plane_exact(l, g, xp, yp, bp, first_cols);
                }
            }
            at += hw;
        }
        true
    }
}

/// Whether any of the `n` floats at `p` is NaN: one unordered compare for
/// two vectors, the lanes found gathered into one mask.
///
/// # Safety
/// The `n` floats at `p` are readable.
#[inline(always)]
unsafe fn any_nan<L: Lanes>(l: L, p: *const f32, n: usize) -> bool {
    let (wide, all) = (L::N, l.below(L::N));
    let mut seen = l.below(0);
    let mut i = 0;
    // SAFETY (loads): floats `i .. i + 4N <= n`, then `i .. i + N <= n`,
    // then the lanes below `n - i`; the others are not accessed.
    while i + 4 * wide <= n {
        let at = unsafe { p.add(i) };
        let (a, b) = unsafe { (l.load(at, all), l.load(at.add(wide), all)) };
        let (c, d) = unsafe { (l.load(at.add(2 * wide), all), l.load(at.add(3 * wide), all)) };
        seen = l.union(seen, l.union(l.either_nan(a, b), l.either_nan(c, d)));
        i += 4 * wide;
    }
    while i + wide <= n {
        seen = l.union(seen, l.is_nan(unsafe { l.load(p.add(i), all) }));
        i += wide;
    }
    if i < n {
        seen = l.union(seen, l.is_nan(unsafe { l.load(p.add(i), l.below(n - i)) }));
    }
    l.any(seen)
}

/// A `PL` of [`same_plane_flat`] that stands for any: `pl` is read at run
/// time.
const ANY: usize = usize::MAX;

/// Vectors of [`same_plane_flat`]'s limits.
const LIMITS: usize = 64;

/// The greatest common divisor of `a` and `b`.
fn gcd(mut a: usize, mut b: usize) -> usize {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// One plane of [`MaxPoolSame`] that holds no NaN (one `max` a tap ranks
/// as `pool::max_nan` does, as in [`same_plane_plain`]), its rows narrow:
/// both passes run flat over the plane, a few vector steps for a 14x14
/// one. Down the rows into `buf` (from `N` on): whole loads where every
/// lane's taps lie in the plane, else masked to it ([`tap`]). Across: a
/// lane's tap from another row (or past the plane) is cut to `-inf` by a
/// `min` with its limit (`+inf` where the tap's column lies in the row,
/// `-inf` where not; `min(v, -inf)` is `-inf` whatever `v`), from `lim`:
/// `kw` vectors for each of the `period` vectors after which the lanes'
/// columns repeat (`period * N` a multiple of `w`, the first lane's column
/// 0).
///
/// # Safety
/// The plane's `h * w <= rest` floats, and the `rest` from its first, are
/// readable at `xp` and writable at `yp`; `buf` holds `h * w + 2N + kw`
/// floats; `lim` holds `period * kw * N`; `g` as [`MaxPoolSame`] accepts
/// it, `pl <= N`; `KH` and `KW`, where not zero, are `kh` and `kw`, `PL`
/// (where not [`ANY`]) is `pl`.
#[inline(always)]
unsafe fn same_plane_flat<L: Lanes, const KH: usize, const KW: usize, const PL: usize>(
    l: L,
    g: Same,
    xp: *const f32,
    yp: *mut f32,
    rest: usize,
    bp: *mut f32,
    (lim, period): (*const f32, usize),
) {
    let Same { h, w, pt, .. } = g;
    debug_assert!((KH == 0 || KH == g.kh) && (KW == 0 || KW == g.kw));
    debug_assert!(PL == ANY || PL == g.pl);
    let (kh, kw) = (if KH > 0 { KH } else { g.kh }, if KW > 0 { KW } else { g.kw });
    let pl = if PL == ANY { g.pl } else { PL };
    let (wide, all) = (L::N, l.below(L::N));
    let hw = h * w;
    debug_assert!(hw <= rest && pt < kh && pl < kw && pl <= wide, "{h}x{w} of {rest}");
    // The steps from `top` take their top taps inside the plane, those
    // ending by `bottom` their bottom ones.
    let (top, bottom) = (pt * w, hw.saturating_sub((kh - 1 - pt) * w));
    let b = bp.wrapping_add(wide);
    let mut i = 0;
    // SAFETY (stores to `b`): below `hw + N` floats from `N` on.
    while i < hw && i < top {
        // SAFETY: `i < hw`; the offsets below `kh * w`.
        let v = unsafe { down_edge(l, xp, hw, i, kh, pt, w) };
        unsafe { l.store(b.add(i), all, v) };
        i += wide;
    }
    while i + wide <= bottom {
        // SAFETY: floats `i - top .. i - top + (kh - 1) * w + N <= hw`.
        let at = unsafe { xp.add(i - top) };
        let mut v = unsafe { l.load(at, all) };
        for ky in 1..kh {
            v = l.max(unsafe { l.load(at.add(ky * w), all) }, v);
        }
        unsafe { l.store(b.add(i), all, v) };
        i += wide;
    }
    while i < hw {
        // SAFETY: as in the first loop.
        let v = unsafe { down_edge(l, xp, hw, i, kh, pt, w) };
        unsafe { l.store(b.add(i), all, v) };
        i += wide;
    }
    let (mut i, mut q) = (0, 0);
    while i < hw {
        // SAFETY: buffer floats from `N + i - pl >= 0` to below `N + i + N +
        // kw - 1 - pl`, inside it (written or zero); the limits of step `q
        // < period`.
        let (at, lq) =
            (b.cast_const().wrapping_add(i).wrapping_sub(pl), lim.wrapping_add(q * kw * wide));
        let mut best = l.splat(0.0);
        for kx in 0..kw {
            let v = unsafe { l.load(at.add(kx), all) };
            // The tap of the window's own column, `pl`, lies in the row:
            // its limits are all `+inf`.
            let v = if kx == PL { v } else { l.min(v, unsafe { l.load(lq.add(kx * wide), all) }) };
            best = if kx == 0 { v } else { l.max(v, best) };
        }
        // SAFETY: outputs below `rest`, or below `hw`.
        unsafe {
            if i + wide <= rest {
                l.store(yp.add(i), all, best);
            } else {
                l.store(yp.add(i), l.below(hw - i), best);
            }
        }
        q = if q + 1 == period { 0 } else { q + 1 };
        i += wide;
    }
}

/// The maximum down the `kh` rows of the windows of a flat step from `i`
/// of a plane of `hw` floats at `xp` (rows of `w`, `pt` of padding
/// before), the taps outside the plane `-inf` ([`tap`]), one `max` a row:
/// the taps hold no NaN.
///
/// # Safety
/// The `hw` floats at `xp` are readable; `i < hw`, `kh * w < FAR`.
#[inline(always)]
unsafe fn down_edge<L: Lanes>(
    l: L,
    xp: *const f32,
    hw: usize,
    i: usize,
    kh: usize,
    pt: usize,
    w: usize,
) -> L::V {
    let mut v = l.splat(f32::NEG_INFINITY);
    for ky in 0..kh {
        let off = (ky as isize - pt as isize) * w as isize;
        // SAFETY: the caller's bounds.
        v = l.max(unsafe { tap(l, xp, hw, i, off) }, v);
    }
    v
}

/// One plane of [`MaxPoolSame`] that holds no NaN, so that one `max` a tap
/// ranks as `pool::max_nan` does ([`Lanes::max`]`(v, best)`: `v` where
/// larger, else `best`, which ties keep). Down the rows into `buf`, whose
/// rows hold the `w` columns after `pl` floats and before `kw - 1 - pl` of
/// `-inf` (`w + kw - 1` floats a row); then across, each output the
/// maximum of `kw` floats of its buffer row: no tap needs a mask or a
/// select. Whole vectors throughout: a row's last one reads and writes the
/// floats after its row (the next row's, rewritten in their turn; the
/// padding, written after); only those past `rest` are masked.
///
/// # Safety
/// The plane's `h * w <= rest` floats, and the `rest` from its first, are
/// readable at `xp` and writable at `yp`; `buf` holds `(h + 1) * wp + N`
/// floats, `wp = w + kw - 1`; `g` as [`MaxPoolSame`] accepts it (`pt <
/// kh`, `pl < kw`); `KH` and `KW`, where not zero, are `kh` and `kw`.
#[inline(always)]
unsafe fn same_plane_plain<L: Lanes, const KH: usize, const KW: usize>(
    l: L,
    g: Same,
    xp: *const f32,
    yp: *mut f32,
    rest: usize,
    bp: *mut f32,
) {
    let Same { h, w, pt, pl, .. } = g;
    debug_assert!((KH == 0 || KH == g.kh) && (KW == 0 || KW == g.kw));
    let (kh, kw) = (if KH > 0 { KH } else { g.kh }, if KW > 0 { KW } else { g.kw });
    let (wide, all, low) = (L::N, l.below(L::N), l.splat(f32::NEG_INFINITY));
    let wp = w + kw - 1;
    debug_assert!(h * w <= rest && pt < kh && pl < kw, "{h}x{w} of {rest}");
    let whole = w - w % wide;
    // SAFETY (stores to `bp`): below `pl + N`, then each row's below `y *
    // wp + pl + w + N` (its last vector) and `y * wp + pl + w + kw - 2 +
    // N` (its padding), all below `(h + 1) * wp + N`, which `buf` holds.
    let mut i = 0;
    while i < pl {
        unsafe { l.store(bp.add(i), all, low) };
        i += wide;
    }
    for y in 0..h {
        // The input rows of output row `y`'s windows: never none, as `y <
        // h` and `pt < kh`.
        let rows = y.saturating_sub(pt)..(y + kh - pt).min(h);
        let dst = bp.wrapping_add(y * wp + pl);
        let mut c = 0;
        while c < whole {
            // SAFETY: columns `c .. c + N <= w` of rows below `h`.
            let v = unsafe { down_plain::<L, KH>(l, xp.add(c), w, rows.clone(), all) };
            unsafe { l.store(dst.add(c), all, v) };
            c += wide;
        }
        if c < w {
            // The last vector's lanes past the row read the next row's
            // floats, or none past `rest`.
            let end = (rows.end - 1) * w + c + wide;
            // SAFETY: below `end <= rest`, or columns `c..w` of the rows.
            let v = unsafe {
                if end <= rest {
                    down_plain::<L, KH>(l, xp.add(c), w, rows.clone(), all)
                } else {
                    down_plain::<L, KH>(l, xp.add(c), w, rows.clone(), l.below(w - c))
                }
            };
            unsafe { l.store(dst.add(c), all, v) };
        }
        // The padding after row `y` and before row `y + 1`.
        let mut i = 0;
        while i + 1 < kw {
            unsafe { l.store(dst.add(w + i), all, low) };
            i += wide;
        }
    }
    for y in 0..h {
        let (src, out) = (bp.cast_const().wrapping_add(y * wp), yp.wrapping_add(y * w));
        let mut c = 0;
        while c < w {
            // SAFETY: buffer floats below `y * wp + w - 1 + kw - 1 + N`,
            // written above.
            let mut best = unsafe { l.load(src.add(c), all) };
            for kx in 1..kw {
                best = l.max(unsafe { l.load(src.add(c + kx), all) }, best);
            }
            // SAFETY: outputs below `rest`, or columns `c..w` of the row.
            unsafe {
                if y * w + c + wide <= rest {
                    l.store(out.add(c), all, best);
                } else {
                    l.store(out.add(c), l.below(w - c), best);
                }
            }
            c += wide;
        }
    }
}

/// The maximum down rows `rows` of the rows of `w` floats at `p`, over the
/// lanes of `m` (zero in the others), one `max` a row: the taps hold no
/// NaN. `KH` rows (where not zero) take a loop of fixed length.
///
/// # Safety
/// The lanes of `m` are readable at `p` in rows `rows`; `rows` is not
/// empty.
#[inline(always)]
unsafe fn down_plain<L: Lanes, const KH: usize>(
    l: L,
    p: *const f32,
    w: usize,
    rows: core::ops::Range<usize>,
    m: L::M,
) -> L::V {
    debug_assert!(!rows.is_empty());
    let top = p.wrapping_add(rows.start * w);
    // SAFETY (loads): the caller's bounds; the lanes out of `m` are not
    // accessed.
    let mut v = unsafe { l.load(top, m) };
    if KH > 0 && rows.len() == KH {
        for t in 1..KH {
            v = l.max(unsafe { l.load(top.add(t * w), m) }, v);
        }
    } else {
        for t in 1..rows.len() {
            v = l.max(unsafe { l.load(top.add(t * w), m) }, v);
        }
    }
    v
}

/// One plane of [`MaxPoolSame`] ranked as `pool::max_nan` (NaN wins) at
/// every tap: the plane as one flat run of `h * w` floats, so a 14x14
/// plane costs a few vector steps rather than a pass per row. The maximum
/// down each window's rows goes to `buf`, then across its columns. Taps
/// outside the input are `-inf`: padding never wins; the column of each
/// lane is kept in a float vector (`first_cols`: the columns of the first
/// `N` floats), stepped by `N` and wrapped at `w`.
///
/// # Safety
/// The plane's `h * w` floats are readable at `xp` and writable at `yp`;
/// `buf` holds `h * w` floats; `g` as [`MaxPoolSame`] accepts it.
#[inline(always)]
unsafe fn same_plane_exact<L: Lanes>(
    l: L,
    g: Same,
    xp: *const f32,
    yp: *mut f32,
    bp: *mut f32,
    first_cols: L::V,
) {
    let Same { h, w, kh, kw, pt, pl } = g;
    let hw = h * w;
    let wide = L::N;
    let (all, low) = (l.below(wide), l.splat(f32::NEG_INFINITY));
    // Down the rows: lane `j` of the step at `i` takes the plane's float
    // `i + j + (ky - pt) * w` where that lies in the plane, for the rows
    // `ky` whose offset can reach inside it (the others are all padding,
    // which never wins).
    let mut i = 0;
    while i < hw {
        let mut best = low;
        for ky in pt.saturating_sub(h - 1)..kh.min(pt + h) {
            let off = (ky as isize - pt as isize) * w as isize;
            // SAFETY: `xp` holds the plane's `hw` floats.
            best = max_nan(l, best, unsafe { tap(l, xp, hw, i, off) });
        }
        let keep = if i + wide <= hw { all } else { l.below(hw - i) };
        // SAFETY: lanes `i..hw` of the buffer, which holds `hw` floats.
        unsafe { l.store(bp.add(i), keep, best) };
        i += wide;
    }
    // Across the columns: lane `j` takes `buf[i + j + kx - pl]` where its
    // column plus `kx - pl` lies in `0..w` (then the index is in the
    // plane).
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
/// rows and `pl` columns of padding before, plane by plane and output row
/// by output row. The maximum goes down the rows first, then across each
/// window's columns, as the separable passes take them; taps outside the
/// input are `-inf`, which never wins (so the results are bit for bit the
/// generic passes', an all-padding window included). Rows take
/// [`s2_row_plain`] (one `max` a tap) until a NaN turns up in a plane,
/// then [`s2_row_exact`], as do the last rows, whose whole vectors would
/// read past the input. Run, it returns `false` (nothing written) when the
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
        let g = S2 { h, w, oh, ow, kh, pt, pl };
        let wide = L::N;
        // A row's steps of `2N` input columns that hold some of its `w`,
        // the last one's limits (`+inf` in the lanes inside the row, `-inf`
        // past it), and the floats of a row (and after it) they read.
        let live = w.div_ceil(2 * wide);
        let cut = w - (live - 1) * 2 * wide;
        let (inf, low) = (l.splat(f32::INFINITY), l.splat(f32::NEG_INFINITY));
        let limits = [
            l.select(l.below(cut), inf, low),
            l.select(l.below(cut.saturating_sub(wide)), inf, low),
        ];
        let row = S2Plain { w, ow, live, limits, n: 0, full: 0, middle: 0 };
        let (xs, ys) = (x.as_ptr(), y.as_mut_ptr());
        let (len, ylen) = (x.len(), y.len());
        let (mut at, mut to) = (0, 0);
        while to < ylen {
            let (xp, yp) = (xs.wrapping_add(at), ys.wrapping_add(to));
            let plane = S2Rows { xp, yp, xrest: len - at, yrest: ylen - to };
            // SAFETY: plane `to / ohw < planes`: its `hw <= xrest` floats
            // and the `xrest` from its first in `x`, its `ohw <= yrest`
            // outputs and the `yrest` from its first in `y`.
            let done = unsafe {
                match (pl, kh) {
                    (0, 3) => s2_plane_plain::<L, KW, 0, 3>(l, g, row, plane),
                    (0, 2) => s2_plane_plain::<L, KW, 0, 2>(l, g, row, plane),
                    (0, _) => s2_plane_plain::<L, KW, 0, 0>(l, g, row, plane),
                    (1, 3) => s2_plane_plain::<L, KW, 1, 3>(l, g, row, plane),
                    (1, 2) => s2_plane_plain::<L, KW, 1, 2>(l, g, row, plane),
                    (1, _) => s2_plane_plain::<L, KW, 1, 0>(l, g, row, plane),
                    (2, 3) => s2_plane_plain::<L, KW, 2, 3>(l, g, row, plane),
                    (2, 2) => s2_plane_plain::<L, KW, 2, 2>(l, g, row, plane),
                    (2, _) => s2_plane_plain::<L, KW, 2, 0>(l, g, row, plane),
                    _ => 0,
                }
            };
            for oy in done..oh {
                // SAFETY: as above; `oy < oh`.
                unsafe { s2_row_exact::<L, KW>(l, g, xp, yp, oy) };
            }
            at += hw;
            to += ohw;
        }
        true
    }
}

/// A plane of [`MaxPoolS2`]: its inputs at `xp`, `xrest` floats readable
/// from there; its outputs at `yp`, `yrest` writable from there.
#[derive(Clone, Copy)]
struct S2Rows {
    xp: *const f32,
    yp: *mut f32,
    xrest: usize,
    yrest: usize,
}

/// The output rows of a [`MaxPoolS2`] plane from the first, by
/// [`s2_row_plain`], up to one whose taps may be NaN or whose whole
/// vectors would read past `xrest`: returns how many it wrote. `PL` is
/// `pl`; `KH` (where not zero) is `kh`, the windows inside the plane
/// taking loops of fixed length.
///
/// # Safety
/// As [`MaxPoolS2`] checked the sizes: the plane's `h * w <= p.xrest`
/// floats, and the `xrest` from its first, are readable at `p.xp`; its
/// `oh * ow <= p.yrest` outputs, and the `yrest` from its first, writable
/// at `p.yp`; `row` as [`MaxPoolS2`] makes it for `g`.
#[inline(always)]
unsafe fn s2_plane_plain<L: Lanes, const KW: usize, const PL: usize, const KH: usize>(
    l: L,
    g: S2,
    row: S2Plain<L::V>,
    p: S2Rows,
) -> usize {
    let S2Rows { xp, yp, xrest, yrest } = p;
    let S2 { w, oh, ow, pt, .. } = g;
    let reach = row.live * 2 * L::N;
    let (lean, lean_end) = if KH > 0 { g.lean_rows(reach, xrest, yrest, L::N) } else { (oh, oh) };
    let mut oy = 0;
    while oy < oh {
        if oy == lean && lean < lean_end {
            // Rows whose windows hold `KH` rows of the plane, after a row
            // that probed all of its own: only their last two rows are new
            // to them. One verdict on NaN for all of them.
            let mut seen = l.below(0);
            let row = row.with(KH, ow, L::N);
            let (mut top, mut yrow) =
                (xp.wrapping_add((2 * lean - pt) * w), yp.wrapping_add(lean * ow));
            // SAFETY (the calls of `s2_row_plain`): the window's rows, and
            // `reach` floats from the last one's first (`<= xrest`); `ow + N
            // - 1` outputs from output row `oy`'s first (`<= yrest - oy *
            // ow`).
            if row.middle > 0 {
                for _ in lean..lean_end {
                    unsafe { s2_row_plain::<L, KW, PL, KH, true>(l, row, top, yrow, &mut seen) };
                    (top, yrow) = (top.wrapping_add(2 * w), yrow.wrapping_add(ow));
                }
            } else {
                for _ in lean..lean_end {
                    unsafe { s2_row_plain::<L, KW, PL, KH, false>(l, row, top, yrow, &mut seen) };
                    (top, yrow) = (top.wrapping_add(2 * w), yrow.wrapping_add(ow));
                }
            }
            if l.any(seen) {
                return lean;
            }
            oy = lean_end;
            continue;
        }
        let rows = g.rows(oy);
        let last = rows.end.max(1) - 1;
        if last * w + reach > xrest {
            return oy;
        }
        let (top, yrow) = (xp.wrapping_add(rows.start * w), yp.wrapping_add(oy * ow));
        // Whole vectors end inside the `yrest - oy * ow` floats from row
        // `oy`'s first.
        let full = (yrest - oy * ow + 1).saturating_sub(L::N).min(ow);
        let row = row.with(rows.len(), full, L::N);
        let mut seen = l.below(0);
        // SAFETY: the rows `rows` of the plane, and `reach` floats from the
        // last one's first (`<= xrest`); the `yrest - oy * ow` floats from
        // output row `oy`.
        unsafe { s2_row_plain::<L, KW, PL, 0, false>(l, row, top, yrow, &mut seen) };
        if l.any(seen) {
            return oy;
        }
        oy += 1;
    }
    oh
}

/// The geometry of a [`MaxPoolS2`] plane: `h x w` inputs, `oh x ow`
/// outputs, windows `kh` rows high, `pt` rows and `pl` columns of padding
/// before.
#[derive(Clone, Copy)]
struct S2 {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    pt: usize,
    pl: usize,
}

impl S2 {
    /// The output rows `a..b` whose windows hold `kh` rows of the plane,
    /// after output row 0, with `reach` floats readable from the last
    /// one's first (of `xrest` from the plane's) and `ow + n - 1` outputs
    /// writable from their first (of `yrest` from the plane's).
    #[inline(always)]
    fn lean_rows(self, reach: usize, xrest: usize, yrest: usize, n: usize) -> (usize, usize) {
        let S2 { h, w, oh, ow, kh, pt, .. } = self;
        let a = pt.div_ceil(2).max(1);
        // Output row `oy`'s last input row is `2 * oy - pt + kh - 1`.
        let up_to = |last: usize| (last + 1 + pt).checked_sub(kh).map_or(0, |v| v / 2 + 1);
        let inside = if h > 0 { up_to(h - 1) } else { 0 };
        let read = xrest.checked_sub(reach).map_or(0, |v| up_to(v / w));
        let write = yrest.checked_sub(ow + n - 1).map_or(0, |v| v / ow + 1);
        (a, oh.min(inside).min(read).min(write).max(a))
    }

    /// The input rows of output row `oy`'s windows (none when they lie in
    /// the padding).
    #[inline(always)]
    fn rows(self, oy: usize) -> core::ops::Range<usize> {
        let top = 2 * oy as isize - self.pt as isize;
        let h = self.h as isize;
        top.clamp(0, h) as usize..(top + self.kh as isize).clamp(0, h) as usize
    }
}

/// An output row for [`s2_row_plain`]: input rows of `w` floats, `n` of
/// them; `ow` outputs, the first `full` of which (and `N - 1` more) may be
/// written by whole vectors; `live` steps of `2N` input columns holding
/// some of the row's, the last one's `limits` (`+inf` in its lanes inside
/// the row, `-inf` past it).
#[derive(Clone, Copy)]
struct S2Plain<V> {
    w: usize,
    ow: usize,
    live: usize,
    limits: [V; 2],
    n: usize,
    full: usize,
    middle: usize,
}

impl<V> S2Plain<V> {
    /// The row with `n` input rows, `full` outputs to store whole: its
    /// `middle` steps are those whose next input step lies inside the row
    /// and whose outputs are all stored whole.
    #[inline(always)]
    fn with(self, n: usize, full: usize, wide: usize) -> S2Plain<V> {
        let steps = self.ow.div_ceil(wide);
        let middle = self.live.saturating_sub(2).min(steps).min(full.div_ceil(wide));
        S2Plain { n, full, middle, ..self }
    }
}

/// One output row of [`MaxPoolS2`] whose taps hold no NaN, so that one
/// `max` a tap ranks as `pool::max_nan` does ([`Lanes::max`]`(v, best)`:
/// `v` where larger, else `best`, which ties keep), `N` outputs a step:
/// the maximum down the window's rows over `2N` input columns from the
/// row's first (whole vectors, the columns past the row cut to `-inf` by a
/// `min` with the limits), split into even and odd columns; each tap is
/// one of those, or moved a lane to take the previous step's last column
/// (`-inf` before the first) or the next step's first (`PL` columns of
/// padding before: which). With `MIDDLE`, the `row.middle` steps whose
/// next input step lies inside the row and whose outputs are stored whole
/// go first, without checks. The rows new to this output row are compared
/// unordered into `seen` (a NaN shows, or with more than two rows summed
/// first, infinities of both signs: then the row must be taken again
/// exactly): with `KH` (not zero: `n == KH` rows, after an output row that
/// probed all of its own) the last two, else all of them.
///
/// # Safety
/// The `n` rows of `w` floats from `top` are readable, and `live * 2N`
/// floats from the last one's first; outputs below `row.full + N - 1` and
/// below `ow` are writable at `yrow`.
#[inline(always)]
unsafe fn s2_row_plain<
    L: Lanes,
    const KW: usize,
    const PL: usize,
    const KH: usize,
    const MIDDLE: bool,
>(
    l: L,
    row: S2Plain<L::V>,
    top: *const f32,
    yrow: *mut f32,
    seen: &mut L::M,
) {
    let S2Plain { ow, n, full, .. } = row;
    debug_assert!(KH == 0 || KH == n);
    let (wide, all, low) = (L::N, l.below(L::N), l.splat(f32::NEG_INFINITY));
    // SAFETY (the calls of `s2_split` and `s2_down`): the caller's bounds.
    let (mut prev, mut cur) = ((low, low), unsafe { s2_split::<L, KH>(l, row, top, 0, seen) });
    let steps = ow.div_ceil(wide);
    // The steps whose next input step lies inside the row and whose
    // outputs are stored whole: no checks.
    let middle = row.middle;
    let mut s = 0;
    if MIDDLE {
        let (mut at, mut out) = (top.wrapping_add(2 * wide), yrow);
        for _ in 0..middle {
            let (lo, hi) = unsafe { s2_down::<L, KH>(l, row, at, seen) };
            let [ne, no] = l.split(lo, hi);
            let m = s2_taps::<L, KW, PL>(l, prev, cur, (ne, no));
            // SAFETY: outputs below `full + N - 1`.
            unsafe { l.store(out, all, m) };
            (prev, cur) = (cur, (ne, no));
            (at, out) = (at.wrapping_add(2 * wide), out.wrapping_add(wide));
        }
        s = middle;
    }
    while s < steps {
        let next = if (PL == 0 && KW == 3) || s + 1 < steps {
            unsafe { s2_split::<L, KH>(l, row, top, s + 1, seen) }
        } else {
            (low, low)
        };
        let m = s2_taps::<L, KW, PL>(l, prev, cur, next);
        let ox = s * wide;
        // SAFETY: outputs `ox .. ox + N` below `full + N - 1`, or `ox..ow`.
        unsafe {
            if ox < full {
                l.store(yrow.add(ox), all, m);
            } else {
                l.store(yrow.add(ox), l.below(ow - ox), m);
            }
        }
        (prev, cur) = (cur, next);
        s += 1;
    }
}

/// The `N` outputs of a step of [`s2_row_plain`] from the even and odd
/// columns of the input steps before, at and after it: tap `t` reads
/// input column `2 * ox + t - PL`, one of those or moved a lane, the
/// maximum taken tap by tap.
#[inline(always)]
fn s2_taps<L: Lanes, const KW: usize, const PL: usize>(
    l: L,
    (pe, po): (L::V, L::V),
    (ce, co): (L::V, L::V),
    (ne, _): (L::V, L::V),
) -> L::V {
    let taps = match PL {
        0 => [ce, co, l.shifted(ce, ne)],
        1 => [l.shifted_in(po, co), ce, co],
        _ => [l.shifted_in(pe, ce), l.shifted_in(po, co), ce],
    };
    let m = l.max(taps[1], taps[0]);
    if KW == 3 { l.max(taps[2], m) } else { m }
}

/// Step `k` of [`s2_row_plain`]: the even and odd columns of the maximum
/// down the rows over `2N` input columns from `2kN` (`-inf` past the
/// row), the rows probed for NaN into `seen` ([`fold_inner`] with `KH`,
/// else [`fold_probe`]).
///
/// # Safety
/// As for [`s2_row_plain`].
#[inline(always)]
unsafe fn s2_split<L: Lanes, const KH: usize>(
    l: L,
    row: S2Plain<L::V>,
    top: *const f32,
    k: usize,
    seen: &mut L::M,
) -> (L::V, L::V) {
    let S2Plain { live, limits, n, .. } = row;
    let wide = L::N;
    if k >= live || n == 0 {
        return (l.splat(f32::NEG_INFINITY), l.splat(f32::NEG_INFINITY));
    }
    let p = top.wrapping_add(2 * k * wide);
    // SAFETY: `2N` floats from column `2kN < w` of each row, below `live *
    // 2N` from its first.
    let (mut lo, mut hi) = unsafe { s2_down::<L, KH>(l, row, p, seen) };
    if k + 1 == live {
        (lo, hi) = (l.min(lo, limits[0]), l.min(hi, limits[1]));
    }
    let [e, o] = l.split(lo, hi);
    (e, o)
}

/// The maximum down the `n > 0` rows of `row` over `2N` columns from `p`,
/// two whole vectors, the rows probed for NaN into `seen` ([`fold_inner`]
/// with `KH`, else [`fold_probe`]).
///
/// # Safety
/// `2N` floats are readable from `p` in each of the `n` rows.
#[inline(always)]
unsafe fn s2_down<L: Lanes, const KH: usize>(
    l: L,
    row: S2Plain<L::V>,
    p: *const f32,
    seen: &mut L::M,
) -> (L::V, L::V) {
    let S2Plain { w, n, .. } = row;
    let wide = L::N;
    // SAFETY: the caller's bounds.
    unsafe {
        if KH > 0 {
            (fold_inner::<L, KH>(l, p, w, seen), fold_inner::<L, KH>(l, p.add(wide), w, seen))
        } else {
            (fold_probe(l, p, w, n, seen), fold_probe(l, p.add(wide), w, n, seen))
        }
    }
}

/// The maximum down `KH > 0` rows of `w` floats from `p`, whole vectors,
/// the last two rows (or the only one) probed for NaN into `seen`.
///
/// # Safety
/// `N` floats are readable from `p` in each of the rows.
#[inline(always)]
unsafe fn fold_inner<L: Lanes, const KH: usize>(
    l: L,
    p: *const f32,
    w: usize,
    seen: &mut L::M,
) -> L::V {
    let all = l.below(L::N);
    // SAFETY (loads): the caller's bounds.
    let mut v = unsafe { l.load(p, all) };
    if KH == 1 {
        *seen = l.union(*seen, l.is_nan(v));
    }
    let mut before = v;
    for t in 1..KH {
        let r = unsafe { l.load(p.add(t * w), all) };
        if t + 1 == KH {
            *seen = l.union(*seen, l.either_nan(before, r));
        }
        v = l.max(r, v);
        before = r;
    }
    v
}

/// The maximum down `n > 0` rows of `w` floats from `p`, whole vectors,
/// one `max` a row, while the rows but the last are summed and the sum
/// compared unordered with the last into `seen` (a NaN tap shows there).
///
/// # Safety
/// `N` floats are readable from `p` in each of the `n` rows.
#[inline(always)]
unsafe fn fold_probe<L: Lanes>(l: L, p: *const f32, w: usize, n: usize, seen: &mut L::M) -> L::V {
    let all = l.below(L::N);
    // SAFETY (loads): the caller's bounds.
    let first = unsafe { l.load(p, all) };
    if n == 1 {
        *seen = l.union(*seen, l.is_nan(first));
        return first;
    }
    let (mut v, mut sum) = (first, first);
    for t in 1..n - 1 {
        let r = unsafe { l.load(p.add(t * w), all) };
        v = l.max(r, v);
        sum = l.add(sum, r);
    }
    let r = unsafe { l.load(p.add((n - 1) * w), all) };
    *seen = l.union(*seen, l.either_nan(sum, r));
    l.max(r, v)
}

/// Output row `oy` of a [`MaxPoolS2`] plane ranked as `pool::max_nan` at
/// every tap: each step's `N` outputs from two `N`-column runs of the
/// window's rows (3-wide windows take their third taps from the next
/// step's first run, carried over), with no row buffer.
///
/// # Safety
/// The plane's `h * w` floats are readable at `xp`, its `oh * ow` outputs
/// writable at `yp`; `oy < oh`; the sizes as [`MaxPoolS2`] accepts them.
#[inline(always)]
unsafe fn s2_row_exact<L: Lanes, const KW: usize>(
    l: L,
    g: S2,
    xp: *const f32,
    yp: *mut f32,
    oy: usize,
) {
    let S2 { w, ow, pl, .. } = g;
    let (wide, all) = (L::N, l.below(L::N));
    let rows = g.rows(oy);
    // `N` outputs a step read columns `c .. c + 2N` (`+ 1` for 3-wide
    // windows: the next step's first column, carried over).
    let mut c = -(pl as isize);
    // SAFETY (the calls of `down`): `rows` lie in `0..h`, rows of the
    // plane's `h * w` floats at `xp`; `|c| < 2 * FAR + 2N`.
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
            // The third taps are the next windows' first: `first` moved
            // down a lane, then the next step's first column.
            m = max_nan(l, m, l.shifted(first, head));
        }
        let keep = if more { all } else { l.below(ow - ox) };
        // SAFETY: lanes `ox..ow` of output row `oy < oh`, inside the plane.
        unsafe { l.store(yrow.add(ox), keep, m) };
        c += 2 * wide as isize;
        ox += wide;
    }
}

/// The maximum down rows `rows` of a plane of rows of `w` floats at `xp`,
/// over the `N` columns from `at`, ranked as `pool::max_nan`: taps
/// outside `0..w` are `-inf` (zeros loaded, replaced at the end: lanes do
/// not mix).
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
