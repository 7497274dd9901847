//! The vector transforms of Winograd's F(2x2, 3x3) (`crate::winograd`),
//! written once over [`Lanes`]: `N` tiles of one row of tiles per step (8
//! on AVX2, 16 on AVX-512). The input transform loads each of the four
//! input rows of the step's tiles as four vectors (columns `q..q + 2N` and
//! `q + 2..q + 2N + 2`), splits them into even and odd columns and
//! combines them in registers; the output transform combines the sixteen
//! sums of each tile in registers and interleaves the two columns of each
//! tile back.
//!
//! The additions and subtractions are the portable transforms', in the
//! same order, and the activation is [`activate`] (the scalar comparisons
//! as selects): the results are bit for bit those of the portable code.
//! Every load and store is masked to the lanes inside its slice, checked
//! against the slice before the loop ([`TileRows::input_fits`],
//! [`TileRows::output_fits`]).

use crate::simd::gemm::epilogue::Activation;
use crate::simd::lanes::{LaneKernel, Lanes, activate};
use crate::simd::winograd::TileRows;

/// `V = Bᵀ d B` of `n` tiles of each of `channels` channels of `x` (see
/// [`TileRows`]): `V_xi` of channel `c`'s tile `j` goes to `v[xi * xs + c *
/// cs + at + j]` (`strides` is `[xs, cs]`). Run, it returns false (and
/// writes nothing) when `x` or `v` does not hold every index.
pub(super) struct InputTiles<'a> {
    pub x: &'a [f32],
    pub src: TileRows,
    pub channels: usize,
    pub n: usize,
    pub v: &'a mut [f32],
    pub at: usize,
    pub strides: [usize; 2],
}

impl LaneKernel for InputTiles<'_> {
    type Output = bool;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> bool {
        let InputTiles { x, src, channels, n, v, at, strides: [xs, cs] } = self;
        if !src.input_fits(x.len(), channels, n, v.len(), at, [xs, cs]) {
            return false;
        }
        let (x, v) = (x.as_ptr(), v.as_mut_ptr());
        let wide = L::N as isize;
        // The loads of each row, at columns `q`, `q + N`, `q + 2`, `q + N + 2`.
        let offs = [0, wide, 2, wide + 2];
        let w = isize::try_from(src.w).unwrap_or(isize::MAX);
        let starts: [usize; 4] = src.rows.map(|r| r.unwrap_or(0));
        let mut j0 = 0;
        while j0 < n {
            let m = l.below(n - j0);
            let q = src.first + 2 * j0 as isize;
            // The lanes of each load inside its row, the same for every
            // channel: lanes `l` with `0 <= q + o + l < w` (none for a row
            // of padding).
            let mut masks = [[l.below(0); 4]; 4];
            for (row_masks, row) in masks.iter_mut().zip(src.rows) {
                if row.is_some() {
                    for (mask, o) in row_masks.iter_mut().zip(offs) {
                        let o = q + o;
                        *mask = l.between(0isize.saturating_sub(o), w.saturating_sub(o));
                    }
                }
            }
            for c in 0..channels {
                // The four input rows, each as its even and odd columns from
                // `q` and from `q + 2`.
                let mut d = [[l.splat(0.0); 4]; 4];
                for ((dr, start), row_masks) in d.iter_mut().zip(starts).zip(&masks) {
                    let row = x.wrapping_add(c * src.plane + start);
                    let mut ld = [l.splat(0.0); 4];
                    for ((ld, o), &mask) in ld.iter_mut().zip(offs).zip(row_masks) {
                        // SAFETY: the mask keeps the lanes whose columns lie
                        // in the row's `w` floats, inside channel `c`'s plane
                        // of `x` (`input_fits` above); the others are not
                        // accessed.
                        *ld = unsafe { l.load(row.wrapping_offset(q + o), mask) };
                    }
                    let [a, b, a2, b2] = ld;
                    *dr = [l.evens(a, b), l.odds(a, b), l.evens(a2, b2), l.odds(a2, b2)];
                }
                let v = v.wrapping_add(c * cs);
                // Bᵀ d, a column at a time, then B on each row of the result.
                let [c0, c1, c2, c3] = transpose(d);
                let t = [bt(l, c0), bt(l, c1), bt(l, c2), bt(l, c3)];
                for (i, row) in transpose(t).into_iter().enumerate() {
                    for (k, val) in bt(l, row).into_iter().enumerate() {
                        // SAFETY: index `(4i + k) * xs + c * cs + at + j0 + l`
                        // for the lanes `l` below `n - j0`, inside `v`
                        // (`input_fits` above).
                        unsafe { l.store(v.add((4 * i + k) * xs + at + j0), m, val) };
                    }
                }
            }
            j0 += L::N;
        }
        true
    }
}

/// `Aᵀ M A` of `n` tiles of one output channel, `M_xi` of tile `j` at
/// `m[xi * stride + at + j]`, then `act(out + bias)`: the tiles' two output
/// rows go to `out[0]` and `out[1]` (`None`: past the plane's last row),
/// each from the first tile's first column, `cols` floats of them (the
/// rest of the last tile falls outside the plane). Run, it returns false
/// (and writes nothing) when `m` or a row is too short or `cols > 2 * n`.
///
/// The bias and the activation come by reference: the kernel reaches
/// `enter`'s `#[target_feature]` function in memory, and LLVM reads float
/// fields of it together with their neighbours in one vector load, across
/// the separate stores that just wrote them, which stalls store-to-load
/// forwarding at every call (2% of a 32x32 layer with 16 channels).
pub(super) struct OutputTiles<'a> {
    pub m: &'a [f32],
    pub at: usize,
    pub stride: usize,
    pub n: usize,
    pub bias: Option<&'a f32>,
    pub act: &'a Activation,
    pub out: [Option<&'a mut [f32]>; 2],
    pub cols: usize,
}

impl LaneKernel for OutputTiles<'_> {
    type Output = bool;

    #[inline(always)]
    fn run<L: Lanes>(self, l: L) -> bool {
        let OutputTiles { m, at, stride, n, bias, act, out, cols } = self;
        let (bias, act) = (bias.copied(), *act);
        if !TileRows::output_fits(m.len(), at, stride, n, &out, cols) {
            return false;
        }
        let m = m.as_ptr();
        let out = out.map(|r| r.map_or(core::ptr::null_mut(), <[f32]>::as_mut_ptr));
        let mut j0 = 0;
        while j0 < n {
            let mask = l.below(n - j0);
            let mut s = [l.splat(0.0); 16];
            for (xi, s) in s.iter_mut().enumerate() {
                // SAFETY: index `xi * stride + at + j0 + l` for the lanes `l`
                // below `n - j0`, inside `m` (`output_fits` above).
                *s = unsafe { l.load(m.add(xi * stride + at + j0), mask) };
            }
            // Row-wise first: t0[k] = s0k + s1k + s2k, t1[k] = s1k - s2k - s3k.
            let mut t = [[l.splat(0.0); 4]; 2];
            for k in 0..4 {
                t[0][k] = l.add(l.add(s[k], s[4 + k]), s[8 + k]);
                t[1][k] = l.sub(l.sub(s[4 + k], s[8 + k]), s[12 + k]);
            }
            let x0 = 2 * j0;
            let left = cols.saturating_sub(x0);
            for (&row, [t0, t1, t2, t3]) in out.iter().zip(t) {
                if row.is_null() {
                    continue;
                }
                let mut y0 = l.add(l.add(t0, t1), t2);
                let mut y1 = l.sub(l.sub(t1, t2), t3);
                if let Some(b) = bias {
                    let b = l.splat(b);
                    y0 = l.add(y0, b);
                    y1 = l.add(y1, b);
                }
                let [first, second] = l.interleave(activate(l, y0, act), activate(l, y1, act));
                let rest = left.saturating_sub(L::N);
                // SAFETY: columns `x0 + l` for the lanes `l` kept by the
                // masks, below `cols`, inside the row (`output_fits` above).
                unsafe {
                    l.store(row.wrapping_add(x0), l.below(left), first);
                    l.store(row.wrapping_add(x0 + L::N), l.below(rest), second);
                }
            }
            j0 += L::N;
        }
        true
    }
}

/// The rows of `a` as columns.
#[inline(always)]
fn transpose<V: Copy>(a: [[V; 4]; 4]) -> [[V; 4]; 4] {
    let [[a0, a1, a2, a3], [b0, b1, b2, b3], [c0, c1, c2, c3], [d0, d1, d2, d3]] = a;
    [[a0, b0, c0, d0], [a1, b1, c1, d1], [a2, b2, c2, d2], [a3, b3, c3, d3]]
}

/// `Bᵀ` on four values: `d0 - d2`, `d1 + d2`, `d2 - d1`, `d1 - d3`.
#[inline(always)]
fn bt<L: Lanes>(l: L, [d0, d1, d2, d3]: [L::V; 4]) -> [L::V; 4] {
    [l.sub(d0, d2), l.add(d1, d2), l.sub(d2, d1), l.sub(d1, d3)]
}
