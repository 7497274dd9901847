//! AVX-512 passes of the f32 pools (`pool::max_pool`, `pool::average_pool`):
//! for the separable max pool, the maximum down a window's rows over a run
//! of columns and across each stride-1 or stride-2 window of that run;
//! whole stride-1 same-size and stride-2 max pools plane by plane; and the
//! 2x2 stride-2 average pool. The generic passes compile to SSE2 selects at
//! the baseline; these run sixteen lanes with one `vmaxps` and a NaN fix-up
//! per step, and de-interleave the stride-2 windows with two-source
//! permutes.
//!
//! The ranking is the scalar one exactly (`pool::max_nan`): a NaN `v`
//! wins, else `v` replaces `best` only when larger, so of two equal values
//! (`-0.0` and `0.0`) the earlier stays. `vmaxps(v, best)` gives `v > best
//! ? v : best`, and `best` whenever either is NaN; the lanes where `v` is
//! NaN then take `v`. The results are bit for bit the generic passes'.
//!
//! Every load and store is masked to the lanes inside its slice.

use crate::simd::isa::avx512::{Avx512, evens, lanes, odds};
use core::arch::x86_64::{
    __m512, _CMP_UNORD_Q, _mm512_add_epi32, _mm512_add_ps, _mm512_alignr_epi32,
    _mm512_castps_si512, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cmpge_epi32_mask,
    _mm512_cmplt_epi32_mask, _mm512_div_ps, _mm512_mask_loadu_ps, _mm512_mask_mov_ps,
    _mm512_mask_storeu_ps, _mm512_mask_sub_epi32, _mm512_maskz_loadu_ps, _mm512_max_ps,
    _mm512_set1_epi32, _mm512_set1_ps, _mm512_setr_epi32, _mm512_setzero_ps, _mm512_setzero_si512,
};

/// `best` and `v` ranked as `pool::max_nan`, lane by lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn max_nan(best: __m512, v: __m512) -> __m512 {
    let larger = _mm512_max_ps(v, best);
    _mm512_mask_mov_ps(larger, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), v)
}

/// `acc[i] = max(acc[i], src[i])` for `i` below both lengths.
#[inline(always)]
pub(crate) fn max_rows(cpu: Avx512, acc: &mut [f32], src: &[f32]) {
    #[target_feature(enable = "avx512f")]
    fn run(acc: &mut [f32], src: &[f32]) {
        let n = acc.len().min(src.len());
        let (a, s) = (acc.as_mut_ptr(), src.as_ptr());
        for i in (0..n).step_by(16) {
            let m = lanes(n - i);
            // SAFETY: the mask keeps lanes `i..n`, inside both slices
            // (masked-off lanes are not accessed).
            unsafe {
                let best = _mm512_maskz_loadu_ps(m, a.add(i));
                let v = _mm512_maskz_loadu_ps(m, s.add(i));
                _mm512_mask_storeu_ps(a.add(i), m, max_nan(best, v));
            }
        }
    }
    let _ = cpu;
    // SAFETY: `cpu` proves AVX-512F is present.
    unsafe { run(acc, src) }
}

/// `out[i] = max(acc[2 * i .. 2 * i + K])` for the leading outputs whose
/// window and the next two columns lie in `acc` (as the generic
/// `strided_windows::<f32, 2, K>` counts them); returns how many it wrote.
#[inline(always)]
pub(crate) fn windows_s2<const K: usize>(cpu: Avx512, acc: &[f32], out: &mut [f32]) -> usize {
    #[target_feature(enable = "avx512f")]
    fn run<const K: usize>(acc: &[f32], out: &mut [f32]) -> usize {
        let n = out.len().min((acc.len() / 2).saturating_sub(1));
        let len = acc.len();
        let (a, o) = (acc.as_ptr(), out.as_mut_ptr());
        // The 16 floats of `acc` from `at`, zero past its end.
        let load = |at: usize| {
            // SAFETY: the mask keeps lanes `at..len` only (none when `at`
            // is past the end), inside `acc`.
            unsafe { _mm512_maskz_loadu_ps(lanes(len.saturating_sub(at)), a.add(at.min(len))) }
        };
        for i in (0..n).step_by(16) {
            let c = 2 * i;
            let (lo, hi) = (load(c), load(c + 16));
            let first = evens(lo, hi);
            let second = odds(lo, hi);
            let mut m = max_nan(first, second);
            if K == 3 {
                let third = evens(load(c + 2), load(c + 18));
                m = max_nan(m, third);
            }
            // Output lane `l < n - i` read `acc[c + 2l .. c + 2l + K]`, all
            // below `2n + 2 <= len`: the zeros past the end reach only lanes
            // the store drops.
            // SAFETY: the mask keeps lanes `i..n`, inside `out`.
            unsafe { _mm512_mask_storeu_ps(o.add(i), lanes(n - i), m) };
        }
        n
    }
    const { assert!(K == 2 || K == 3) };
    let _ = cpu;
    // SAFETY: `cpu` proves AVX-512F is present.
    unsafe { run::<K>(acc, out) }
}

/// `out[i] = max(acc[i .. i + k])`, the taps in ascending order, for the
/// leading outputs whose window lies in `acc`; returns how many it wrote
/// (none for `k == 0`).
#[inline(always)]
pub(crate) fn windows_s1(cpu: Avx512, acc: &[f32], out: &mut [f32], k: usize) -> usize {
    #[target_feature(enable = "avx512f")]
    fn run(acc: &[f32], out: &mut [f32], k: usize) -> usize {
        if k == 0 {
            return 0;
        }
        let n = out.len().min((acc.len() + 1).saturating_sub(k));
        let (a, o) = (acc.as_ptr(), out.as_mut_ptr());
        for i in (0..n).step_by(16) {
            let m = lanes(n - i);
            // SAFETY: lane `l < n - i` of tap `t < k` reads `acc[i + l + t]`,
            // below `n + k - 1 <= acc.len()`; the store's lanes `i..n` lie in
            // `out`; masked-off lanes are not accessed.
            unsafe {
                let mut best = _mm512_maskz_loadu_ps(m, a.add(i));
                for t in 1..k {
                    best = max_nan(best, _mm512_maskz_loadu_ps(m, a.add(i + t)));
                }
                _mm512_mask_storeu_ps(o.add(i), m, best);
            }
        }
        n
    }
    let _ = cpu;
    // SAFETY: `cpu` proves AVX-512F is present.
    unsafe { run(acc, out, k) }
}

/// Floats of a plane [`max_pool_same`] reduces through its stack buffer.
pub(crate) const SAME_PLANE: usize = 4096;

/// The stride-1 max pool whose output planes are the input's size (`kh x
/// kw` windows, `pt` rows and `pl` columns of padding before, the rest
/// after): every plane as one flat run of `h * w` floats, so a 14x14 plane
/// costs a few vector steps rather than a pass per row. The maximum down
/// each window's rows goes to a stack buffer, then across its columns, as
/// the separable passes take them (rows top to bottom, then columns left to
/// right). Taps outside the input are masked to `-inf`: padding never
/// wins. `false` (nothing written) when a plane does not fit the buffer,
/// the padding reaches past a window, the window is too large for 32-bit
/// lane arithmetic or the slices do not hold `planes` planes.
pub(crate) fn max_pool_same(
    cpu: Avx512,
    planes: usize,
    (h, w): (usize, usize),
    (kh, kw): (usize, usize),
    (pt, pl): (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    /// One plane, through `buf`; `x` and `y` hold `hw <= SAME_PLANE`
    /// floats, `0 < w <= hw`, `pt < kh`, `pl < kw`, `kh * w` and `kw` far
    /// inside `i32`.
    #[target_feature(enable = "avx512f")]
    fn plane(
        hw: usize,
        w: usize,
        (kh, kw): (usize, usize),
        (pt, pl): (usize, usize),
        x: &[f32],
        y: &mut [f32],
        buf: &mut [f32; SAME_PLANE],
    ) {
        let low = _mm512_set1_ps(f32::NEG_INFINITY);
        let (xp, bp, yp) = (x.as_ptr(), buf.as_mut_ptr(), y.as_mut_ptr());
        let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let (n, wi) = (_mm512_set1_epi32(hw as i32), _mm512_set1_epi32(w as i32));
        let zero = _mm512_setzero_si512();
        // Down the rows: lane `l` of step `i` takes `x[j + (ky - pt) * w]`,
        // `j = i + l`, where that index lies in `0..hw` (its row inside).
        for i in (0..hw).step_by(16) {
            let j = _mm512_add_epi32(lane, _mm512_set1_epi32(i as i32));
            let live = lanes(hw - i);
            let mut best = low;
            // Rows `ky` whose offset can reach inside the plane (the others
            // are all padding, which never wins).
            for ky in pt.saturating_sub(hw / w - 1)..kh.min(pt + hw / w) {
                let off = (ky as isize - pt as isize) * w as isize;
                let at = _mm512_add_epi32(j, _mm512_set1_epi32(off as i32));
                let keep =
                    live & _mm512_cmpge_epi32_mask(at, zero) & _mm512_cmplt_epi32_mask(at, n);
                // SAFETY: kept lanes read `x[j + off]`, inside `x` (checked
                // just above); masked-off lanes are not accessed.
                let v = unsafe {
                    _mm512_mask_loadu_ps(low, keep, xp.wrapping_add(i).wrapping_offset(off))
                };
                best = max_nan(best, v);
            }
            // SAFETY: lanes `i..hw` of the buffer, which holds `hw` floats.
            unsafe { _mm512_mask_storeu_ps(bp.add(i), live, best) };
        }
        // Across the columns: lane `l` takes `buf[j + kx - pl]` where column
        // `j % w + kx - pl` lies in `0..w` (then the index is in the plane).
        let mut col = lane;
        for _ in 0..16 / w.max(1) + 1 {
            let over = _mm512_cmpge_epi32_mask(col, wi);
            col = _mm512_mask_sub_epi32(col, over, col, wi);
        }
        // Adding 16 to a column in `0..w` then wrapping: at most 16 / w + 1
        // subtractions of `w`.
        let wraps = 16 / w.max(1) + 1;
        for i in (0..hw).step_by(16) {
            let live = lanes(hw - i);
            let mut best = low;
            for kx in pl.saturating_sub(w - 1)..kw.min(pl + w) {
                let off = kx as isize - pl as isize;
                let c = _mm512_add_epi32(col, _mm512_set1_epi32(off as i32));
                let keep = live & _mm512_cmpge_epi32_mask(c, zero) & _mm512_cmplt_epi32_mask(c, wi);
                // SAFETY: a kept lane's column is inside its row, so it reads
                // inside the buffer's first `hw` floats; masked-off lanes are
                // not accessed.
                let v = unsafe {
                    _mm512_mask_loadu_ps(
                        low,
                        keep,
                        bp.cast_const().wrapping_add(i).wrapping_offset(off),
                    )
                };
                best = max_nan(best, v);
            }
            // SAFETY: lanes `i..hw` of the output plane.
            unsafe { _mm512_mask_storeu_ps(yp.add(i), live, best) };
            col = _mm512_add_epi32(col, _mm512_set1_epi32(16));
            for _ in 0..wraps {
                let over = _mm512_cmpge_epi32_mask(col, wi);
                col = _mm512_mask_sub_epi32(col, over, col, wi);
            }
        }
    }
    let hw = h.saturating_mul(w);
    let fits = hw > 0
        && hw <= SAME_PLANE
        && pt < kh
        && pl < kw
        // Offsets (`(ky - pt) * w`, `kx - pl`) and indices stay far inside
        // `i32`, the lanes' index arithmetic.
        && kh.saturating_mul(w) <= i32::MAX as usize / 4
        && kw <= i32::MAX as usize / 4
        && Some(x.len()) == planes.checked_mul(hw)
        && Some(y.len()) == planes.checked_mul(hw);
    if !fits {
        return false;
    }
    let _ = cpu;
    // Zeroed once per call (16 KiB: per plane, the fill cost more than
    // the pooling).
    let mut buf = [0.0f32; SAME_PLANE];
    for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(hw)) {
        // SAFETY: `cpu` proves AVX-512F is present.
        unsafe { plane(hw, w, (kh, kw), (pt, pl), xp, yp, &mut buf) };
    }
    true
}

/// The undilated stride-2 max pool with `kh x KW` windows (`KW` 2 or 3;
/// ResNet's, SqueezeNet's and Inception's 3x3 and VGG's 2x2 pools), `pt`
/// rows and `pl` columns of padding before: each step's sixteen outputs of
/// an output row from two 16-column runs of the window's rows (3-wide
/// windows take their third taps from the next step's first run, carried
/// over), with no row buffer and no pass per row. The maximum goes down the rows first, then across
/// each window's columns, as the separable passes take them; taps outside
/// the input are masked to `-inf`, which never wins (so the results are bit
/// for bit the generic passes', an all-padding window included). `false`
/// (nothing written) when the slices do not hold `planes` planes or the
/// sizes are too large for the column arithmetic.
pub(crate) fn max_pool_s2<const KW: usize>(
    cpu: Avx512,
    planes: usize,
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
    (kh, pt, pl): (usize, usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    /// One plane: `x` holds `h * w` floats, `y` holds `oh * ow`, and every
    /// column offset (from `-pl` to `2 * ow + 32`, and `w`) is far inside
    /// `isize`.
    #[target_feature(enable = "avx512f")]
    fn plane<const KW: usize>(
        (h, w): (usize, usize),
        (oh, ow): (usize, usize),
        (kh, pt, pl): (usize, usize, usize),
        x: &[f32],
        y: &mut [f32],
    ) {
        let low = _mm512_set1_ps(f32::NEG_INFINITY);
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let wi = w as isize;
        // The maximum down rows `rows` of the 16 columns from `at`: taps
        // outside `0..w` are `-inf`.
        let down = |rows: core::ops::Range<usize>, at: isize| {
            let keep = lanes((wi - at).clamp(0, 16) as usize) & !lanes((-at).clamp(0, 16) as usize);
            let mut v = low;
            for r in rows {
                // SAFETY: row `r < h` of the plane; a kept lane's column
                // `at + l` lies in `0..w`, so it reads inside `x`; masked-off
                // lanes are not accessed.
                let t = unsafe {
                    _mm512_mask_loadu_ps(low, keep, xp.wrapping_add(r * w).wrapping_offset(at))
                };
                v = max_nan(v, t);
            }
            v
        };
        for oy in 0..oh {
            let top = 2 * oy as isize - pt as isize;
            let rows = top.clamp(0, h as isize) as usize
                ..(top + kh as isize).clamp(0, h as isize) as usize;
            // Sixteen outputs a step read columns `c .. c + 32` (`+ 1` for
            // 3-wide windows: the next step's first column, carried over).
            let mut c = -(pl as isize);
            let mut head = down(rows.clone(), c);
            for ox in (0..ow).step_by(16) {
                let tail = down(rows.clone(), c + 16);
                let first = evens(head, tail);
                let mut m = max_nan(first, odds(head, tail));
                head = down(rows.clone(), c + 32);
                if KW == 3 {
                    // The third taps are the next window's first: `first`
                    // moved down a lane, then the next step's first column.
                    let third = _mm512_castsi512_ps(_mm512_alignr_epi32::<1>(
                        _mm512_castps_si512(head),
                        _mm512_castps_si512(first),
                    ));
                    m = max_nan(m, third);
                }
                // SAFETY: lanes `ox..ow` of output row `oy < oh`, inside `y`.
                unsafe { _mm512_mask_storeu_ps(yp.add(oy * ow + ox), lanes(ow - ox), m) };
                c += 32;
            }
        }
    }
    const { assert!(KW == 2 || KW == 3) };
    // Column offsets reach `2 * ow + 32` and `-pl`.
    const FAR: usize = 1 << 40;
    let (hw, ohw) = (h.saturating_mul(w), oh.saturating_mul(ow));
    let fits = hw > 0
        && ohw > 0
        && w < FAR
        && ow < FAR
        && pl < FAR
        && Some(x.len()) == planes.checked_mul(hw)
        && Some(y.len()) == planes.checked_mul(ohw);
    if !fits {
        return false;
    }
    let _ = cpu;
    for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(ohw)) {
        // SAFETY: `cpu` proves AVX-512F is present.
        unsafe { plane::<KW>((h, w), (oh, ow), (kh, pt, pl), xp, yp) };
    }
    true
}

/// The 2x2 stride-2 average pool whose windows all lie inside the input
/// (no padding; DenseNet's transitions): each step's sixteen outputs from
/// two 32-column runs of a row pair, de-interleaved, the four taps added in
/// the generic loop's order (from zero, row by row) and divided by four, so
/// the results are bit for bit the generic loop's. `false` (nothing
/// written) when a window would reach past the input or the slices do not
/// hold `planes` planes.
pub(crate) fn avg_pool_2x2(
    cpu: Avx512,
    planes: usize,
    (h, w): (usize, usize),
    (oh, ow): (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    /// One plane: `x` holds `h * w` floats with `2 * oh <= h` and `2 * ow
    /// <= w`, `y` holds `oh * ow`.
    #[target_feature(enable = "avx512f")]
    fn plane(w: usize, (oh, ow): (usize, usize), x: &[f32], y: &mut [f32]) {
        let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
        let four = _mm512_set1_ps(4.0);
        for oy in 0..oh {
            for ox in (0..ow).step_by(16) {
                // The step's windows read columns `2 * ox .. 2 * ow` (at most
                // 32 of them) of rows `2 * oy` and `2 * oy + 1`.
                let cols = 2 * (ow - ox);
                let (lo, hi) = (lanes(cols), lanes(cols.saturating_sub(16)));
                let mut sum = _mm512_setzero_ps();
                for r in [2 * oy, 2 * oy + 1] {
                    let at = r * w + 2 * ox;
                    // SAFETY: row `r < 2 * oh <= h`; the kept lanes are
                    // columns below `2 * ow <= w`, inside `x`; masked-off
                    // lanes are not accessed.
                    let (a, b) = unsafe {
                        (
                            _mm512_maskz_loadu_ps(lo, xp.add(at)),
                            _mm512_maskz_loadu_ps(hi, xp.wrapping_add(at + 16)),
                        )
                    };
                    sum = _mm512_add_ps(sum, evens(a, b));
                    sum = _mm512_add_ps(sum, odds(a, b));
                }
                // SAFETY: lanes `ox..ow` of output row `oy < oh`, inside `y`.
                unsafe {
                    _mm512_mask_storeu_ps(
                        yp.add(oy * ow + ox),
                        lanes(ow - ox),
                        _mm512_div_ps(sum, four),
                    )
                };
            }
        }
    }
    let (hw, ohw) = (h.saturating_mul(w), oh.saturating_mul(ow));
    let fits = ohw > 0
        && oh.checked_mul(2).is_some_and(|v| v <= h)
        && ow.checked_mul(2).is_some_and(|v| v <= w)
        && Some(x.len()) == planes.checked_mul(hw)
        && Some(y.len()) == planes.checked_mul(ohw);
    if !fits {
        return false;
    }
    let _ = cpu;
    for (xp, yp) in x.chunks_exact(hw).zip(y.chunks_exact_mut(ohw)) {
        // SAFETY: `cpu` proves AVX-512F is present.
        unsafe { plane(w, (oh, ow), xp, yp) };
    }
    true
}
