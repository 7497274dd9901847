//! 3x3 convolutions of stride 1 by Winograd's minimal filtering F(2x2, 3x3)
//! (Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2016).
//!
//! Each 2x2 block of outputs (a *tile*) is computed from the 4x4 block of
//! input it covers: the input tile `d` becomes `V = Bᵀ d B`, each filter
//! `g` becomes `U = G g Gᵀ` (done once, when the code is generated), the
//! sums over input channels of the 16 element-wise products `V ∘ U` are 16
//! matrix products, and the tile's outputs are `Aᵀ M A`. That is 16
//! multiplications per tile and channel pair instead of 36: the direct
//! method's work divided by 2.25, paid for by the transforms (additions
//! only, linear in the channel counts) and 16/9 the weights.
//!
//! The transforms only use the factors 1 and 1/2 and write every product
//! that is structurally zero as an absent term (no multiplication by 0), so
//! an output depends on exactly the inputs of its 3x3 window, as in the
//! direct sum: a NaN in the input stays where the direct sum puts it. An
//! infinity may turn into NaN where the direct sum gives an infinity (the
//! transforms subtract it from itself), which is why the generator only
//! claims convolutions whose weights are all finite: then each output is
//! finite exactly when the direct one is.
//!
//! The 16 products run on the crate's blocked SIMD product with the
//! transformed weights laid out once as its A operand, in panels of 8
//! output channels: output channels are the product's rows, input channels
//! its depth, tiles its columns. Each channel's sums for a run of tiles are
//! then contiguous, so the output transform writes whole output rows.

use crate::conv::{Activation, Conv};
use crate::shape::numel;
use crate::simd::{self, DenseB, Epilogue, Out, PANEL, PanelA, panels_len};
use crate::{Error, Result, ensure};

/// Tiles one block of [the Winograd
/// convolution](crate::conv::ConvWeights::Winograd) handles at most; the
/// generator sizes the scratch for `min(tiles of one image, MAX_BLOCK)`
/// tiles. Measured (Zen 4, AVX-512 transforms), blocks of 64 tiles against
/// 96 to 256: 64->64 at 56x56 1.25 against 1.16-1.21 ms, 128->128 at 28x28
/// 1.12 against 1.07-1.10; no gain past 96.
pub const MAX_BLOCK: usize = 128;

/// Floats of the transformed weights of a convolution of `cin` input and
/// `cout` output channels: 16 `cout x cin` matrices in panels of 8 rows (the
/// rows padded to a multiple of 8); `None` on overflow.
pub fn weights_len(cin: usize, cout: usize) -> Option<usize> {
    panels_len(cout, cin)?.checked_mul(16)
}

/// Floats of scratch memory [the Winograd
/// convolution](crate::conv::ConvWeights::Winograd) needs to handle `tiles`
/// tiles at a time: the 16 transformed inputs `V_xi` and the 16 sums `M_xi`
/// of the block (see `Layout`), `16 max(cin, cout) + min(cin, cout)` floats
/// per tile and `17` `SKEW`s. `None` on overflow.
pub fn scratch_len(cin: usize, cout: usize, tiles: usize) -> Option<usize> {
    Layout::new(cin, cout, tiles)?.len()
}

/// Where one block of `tb` tiles keeps its matrices in the scratch. `V_xi`
/// (`cin x tb`, written by the input transform) at `v + xi * vs`, `M_xi`
/// (`cout x tb`, written by product `xi`, read by the output transform) at
/// `xi * ms`: each `M_xi` ends before `V_xi` starts, so product `xi` writes
/// over the inputs of the products before it, dead by then, and never over
/// its own or a later one's. Every matrix is followed by `SKEW` floats,
/// and so is the first `V_xi`'s distance from the first `M_xi`.
#[derive(Clone, Copy)]
struct Layout {
    vs: usize,
    ms: usize,
    v: usize,
}

impl Layout {
    /// `M_xi` ends at `xi * ms + cout * tb`, `V_xi` starts at `v + xi *
    /// vs`: with `v = cout * tb + 15 * max(0, cout - cin) * tb + SKEW`
    /// the first is below the second for every `xi < 16`.
    fn new(cin: usize, cout: usize, tb: usize) -> Option<Self> {
        let vs = cin.checked_mul(tb)?.checked_add(SKEW)?;
        let ms = cout.checked_mul(tb)?.checked_add(SKEW)?;
        let wider = cout.saturating_sub(cin).checked_mul(tb)?.checked_mul(15)?;
        let v = cout.checked_mul(tb)?.checked_add(wider)?.checked_add(SKEW)?;
        Some(Layout { vs, ms, v })
    }

    /// Floats of the whole layout: the `V_xi` end last.
    fn len(self) -> Option<usize> {
        self.vs.checked_mul(16)?.checked_add(self.v)
    }
}

/// Floats left between consecutive matrices `V_xi` (and `M_xi`) of the
/// scratch beyond their own: the transforms write (and read) the 16 at
/// once, and 16 streams a multiple of 4 KiB apart (64 channels by 64 tiles)
/// would all fall in the same sets of the L1 cache. One line apart, each
/// takes its own. Measured (Zen 4, the whole convolution with the AVX-512
/// transforms): 64->64 at 56x56 1.46 -> 1.30 ms, 128->128 at 28x28 1.27 ->
/// 1.14, 128->32 at 56x56 1.58 -> 1.30-1.45.
pub const SKEW: usize = 16;

/// Tiles of one image of `oh x ow` outputs (2x2 each, the last row and
/// column of tiles partial when a side is odd).
pub fn tiles_of(oh: usize, ow: usize) -> Option<usize> {
    oh.div_ceil(2).checked_mul(ow.div_ceil(2))
}

/// Lays out the filters `w` (`[cout, cin, 3, 3]`, row-major) for [the
/// Winograd convolution](crate::conv::ConvWeights::Winograd): for each of
/// the 16 positions `xi` of `U = G g Gᵀ`, the `cout x cin` matrix
/// `U_xi[o, c]` in panels of `PANEL` output channels (`U_xi[o, c]` at
/// `(o / PANEL) * PANEL * cin + c * PANEL + o % PANEL`, zero in the rows
/// past `cout`), the A operand of the product as the micro-kernels read it,
/// the 16 one after another ([`weights_len`] floats). Computed in f64,
/// rounded once. Refuses weights that are not all finite (see the module's
/// notes).
pub fn transform_weights(cin: usize, cout: usize, w: &[f32], out: &mut [f32]) -> Result {
    let taps = cin.checked_mul(cout).and_then(|v| v.checked_mul(9)).ok_or(Error::Overflow)?;
    let one = panels_len(cout, cin).ok_or(Error::Overflow)?;
    let len = weights_len(cin, cout).ok_or(Error::Overflow)?;
    ensure(w.len() == taps && out.len() == len, Error::ShapeMismatch)?;
    ensure(w.iter().all(|v| v.is_finite()), Error::InvalidParams)?;
    out.fill(0.0);
    if cin == 0 {
        return Ok(());
    }
    for (f, g) in w.chunks_exact(9).enumerate() {
        let (o, c) = (f / cin, f % cin);
        let g = |r: usize, s: usize| f64::from(g[r * 3 + s]);
        // G g: rows g0, (g0 + g1 + g2) / 2, (g0 - g1 + g2) / 2, g2, built
        // a column of g at a time.
        let col = |s: usize| {
            let (a, b, d) = (g(0, s), g(1, s), g(2, s));
            [a, (a + b + d) * 0.5, (a - b + d) * 0.5, d]
        };
        let cols = [col(0), col(1), col(2)];
        let t: [[f64; 3]; 4] = core::array::from_fn(|r| [cols[0][r], cols[1][r], cols[2][r]]);
        // (G g) Gᵀ: the same on each row.
        let at = (o / PANEL) * PANEL * cin + c * PANEL + o % PANEL;
        for (r, row) in t.iter().enumerate() {
            let [a, b, d] = *row;
            let u = [a, (a + b + d) * 0.5, (a - b + d) * 0.5, d];
            for (s, v) in u.iter().enumerate() {
                let slot = out.get_mut((r * 4 + s) * one + at).ok_or(Error::ShapeMismatch)?;
                *slot = *v as f32;
            }
        }
    }
    Ok(())
}

/// Most tiles of one tile row the transforms handle at once (their stack
/// buffers); longer runs are cut in pieces.
const PIECE: usize = 64;

/// A run of tiles of one tile row: row `ty`, columns `tx0..tx0 + n`,
/// tiles `at..at + n` of the block.
#[derive(Clone, Copy)]
struct Piece {
    ty: usize,
    tx0: usize,
    n: usize,
    at: usize,
}

/// The pieces tiles `t0..t0 + tb` of an image `tiles_w` tiles wide fall
/// into, in order.
fn pieces(t0: usize, tb: usize, tiles_w: usize) -> impl Iterator<Item = Piece> {
    let (mut t, end) = (t0, t0.saturating_add(tb));
    core::iter::from_fn(move || {
        if t >= end || tiles_w == 0 {
            return None;
        }
        let (ty, tx0) = (t / tiles_w, t % tiles_w);
        let n = (tiles_w - tx0).min(end - t).min(PIECE);
        let p = Piece { ty, tx0, n, at: t - t0 };
        t += n;
        Some(p)
    })
}

/// The 2-D geometry of a convolution [`sconv3x3`] accepts.
#[derive(Clone, Copy)]
struct Plane {
    h: usize,
    w: usize,
    /// Padding before the first row and column.
    top: usize,
    left: usize,
}

impl Plane {
    /// Splits the padded columns `2 * (tx0 + j)` (into `e[j]`) and
    /// `2 * (tx0 + j) + 1` (into `o[j]`), `j < len`, of the input row `row`;
    /// columns outside the row are left as they are (zero).
    #[inline(always)]
    fn split_row(&self, row: &[f32], tx0: usize, len: usize, e: &mut [f32], o: &mut [f32]) {
        debug_assert!(e.len() >= len && o.len() >= len, "split_row: {len} pairs of columns");
        let first = 2 * tx0;
        let (w, left) = (row.len(), self.left);
        // Columns j whose pair lies inside the row: first + 2j >= left and
        // first + 2j + 1 - left < w.
        let lo = left.saturating_sub(first).div_ceil(2).min(len);
        let hi = match (w + left).checked_sub(first + 2) {
            Some(v) => (v / 2 + 1).min(len).max(lo),
            None => lo,
        };
        let one = |pc: usize| pc.checked_sub(left).and_then(|ix| row.get(ix)).copied();
        for j in (0..lo).chain(hi..len) {
            if let (Some(ev), Some(ov)) = (e.get_mut(j), o.get_mut(j)) {
                *ev = one(first + 2 * j).unwrap_or(0.0);
                *ov = one(first + 2 * j + 1).unwrap_or(0.0);
            }
        }
        if lo < hi {
            let start = first + 2 * lo - left;
            let (Some(src), Some(ed), Some(od)) =
                (row.get(start..start + 2 * (hi - lo)), e.get_mut(lo..hi), o.get_mut(lo..hi))
            else {
                return;
            };
            for ((pair, ev), ov) in src.chunks_exact(2).zip(ed).zip(od) {
                *ev = pair[0];
                *ov = pair[1];
            }
        }
    }

    /// Where the four input rows of the tiles of tile row `ty` start in a
    /// channel plane (`None` in the padding).
    fn tile_rows(&self, ty: usize) -> [Option<usize>; 4] {
        core::array::from_fn(|r| {
            (2 * ty + r).checked_sub(self.top).filter(|&v| v < self.h).map(|iy| iy * self.w)
        })
    }

    /// `V = Bᵀ d B` of the tiles of piece `p` of the channel plane `x`
    /// (zero outside it: padding, and past the end for partial tiles):
    /// `V_xi` of the piece's tile `j` goes to `v[vc(xi) + p.at + j]`. The
    /// four input rows are split into even and odd padded columns once;
    /// then, [`W`] tiles at a time in fixed-size arrays (vector registers),
    /// combined row-wise (`Bᵀ d`), then column-wise, each of the 16
    /// results stored as a run of `V`.
    #[inline(always)]
    fn input_piece(
        &self,
        x: &[f32],
        p: Piece,
        split: &mut Split,
        v: &mut [f32],
        vc: impl Fn(usize) -> usize,
    ) {
        let n = p.n.min(PIECE);
        let [e, o] = split;
        for (r, (er, or)) in e.iter_mut().zip(o.iter_mut()).enumerate() {
            let row = (2 * p.ty + r)
                .checked_sub(self.top)
                .filter(|&v| v < self.h)
                .and_then(|iy| x.get(iy * self.w..(iy + 1) * self.w));
            match row {
                Some(row) => self.split_row(row, p.tx0, n + 1, er, or),
                None => {
                    er[..=n].fill(0.0);
                    or[..=n].fill(0.0);
                }
            }
        }
        let (e, o) = (&*e, &*o);
        // Bᵀ rows: [1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1].
        let rows = |d: &[[f32; SPLIT]; 4], j: usize| {
            let [r0, r1, r2, r3] = d;
            let (d0, d1, d2, d3) = (lanes(r0, j), lanes(r1, j), lanes(r2, j), lanes(r3, j));
            [sub(d0, d2), add(d1, d2), sub(d2, d1), sub(d1, d3)]
        };
        let mut j0 = 0;
        while j0 < n {
            let len = W.min(n - j0);
            let (e0, e1, o0, o1) = (rows(e, j0), rows(e, j0 + 1), rows(o, j0), rows(o, j0 + 1));
            // Then B on each row: a0 - a2, a1 + a2, a2 - a1, a1 - a3 of the
            // columns (a0, a1, a2, a3) = (e[j], o[j], e[j + 1], o[j + 1]).
            for i in 0..4 {
                let (a0, a1, a2, a3) = (e0[i], o0[i], e1[i], o1[i]);
                let vals = [sub(a0, a2), add(a1, a2), sub(a2, a1), sub(a1, a3)];
                for (q, val) in vals.iter().enumerate() {
                    let at = vc(4 * i + q) + p.at + j0;
                    store(v.get_mut(at..at + len), val);
                }
            }
            j0 += W;
        }
    }
}

/// The even and odd padded columns of the four input rows of a piece
/// ([`Plane::input_piece`]); entries past the piece's are never used.
type Split = [[[f32; SPLIT]; 4]; 2];

/// Tiles the transforms combine at once, in fixed-size arrays.
const W: usize = 16;

/// Entries of the split rows: a piece's tiles and one more column, plus the
/// slack the last fixed-size window reads.
const SPLIT: usize = PIECE + W + 1;

/// `W` consecutive floats of `a` from `at` (zero where `a` ends).
#[inline(always)]
fn lanes(a: &[f32], at: usize) -> [f32; W] {
    let mut v = [0.0f32; W];
    match a.get(at..at + W) {
        Some(src) => v.copy_from_slice(src),
        None => {
            for (i, x) in v.iter_mut().enumerate() {
                *x = a.get(at + i).copied().unwrap_or(0.0);
            }
        }
    }
    v
}

// Element-wise on fixed-size arrays, plain loops (no closures) so they
// compile to vector instructions.
#[inline(always)]
fn add(mut a: [f32; W], b: [f32; W]) -> [f32; W] {
    for i in 0..W {
        a[i] += b[i];
    }
    a
}

#[inline(always)]
fn sub(mut a: [f32; W], b: [f32; W]) -> [f32; W] {
    for i in 0..W {
        a[i] -= b[i];
    }
    a
}

/// Copies the first `dst.len()` (at most `W`) floats of `val` to `dst`.
#[inline(always)]
fn store(dst: Option<&mut [f32]>, val: &[f32; W]) {
    match dst {
        Some(d) if d.len() == W => d.copy_from_slice(val),
        Some(d) => {
            for (s, v) in d.iter_mut().zip(val) {
                *s = *v;
            }
        }
        None => {}
    }
}

/// `Aᵀ M A` (`Aᵀ` rows `[1, 1, 1, 0]`, `[0, 1, -1, -1]`) of the tiles of
/// piece `p` for one output channel, `M_xi` of the piece's tile `j` at
/// `m[mc(xi) + p.at + j]`, then `act(out + bias)`, written to the
/// channel's output plane `y` (`oh x ow`) as runs of output rows, the two
/// columns of each tile interleaved; [`W`] tiles at a time in fixed-size
/// arrays.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn output_piece(
    m: &[f32],
    mc: impl Fn(usize) -> usize,
    p: Piece,
    bias: Option<f32>,
    act: Activation,
    oh: usize,
    ow: usize,
    y: &mut [f32],
) {
    let n = p.n.min(PIECE);
    let (oy, ox) = (2 * p.ty, 2 * p.tx0);
    let mut j0 = 0;
    while j0 < n {
        let len = W.min(n - j0);
        let mut s = [[0.0f32; W]; 16];
        for (xi, sx) in s.iter_mut().enumerate() {
            *sx = lanes(m, mc(xi) + p.at + j0);
        }
        // Row-wise first: t0[k] = s0k + s1k + s2k, t1[k] = s1k - s2k - s3k.
        let mut t = [[[0.0f32; W]; 4]; 2];
        for k in 0..4 {
            t[0][k] = add(add(s[k], s[4 + k]), s[8 + k]);
            t[1][k] = sub(sub(s[4 + k], s[8 + k]), s[12 + k]);
        }
        let x0 = ox + 2 * j0;
        let cols = (2 * len).min(ow.saturating_sub(x0));
        for (r, [t0, t1, t2, t3]) in t.iter().enumerate() {
            if oy + r >= oh {
                break;
            }
            let mut y0 = add(add(*t0, *t1), *t2);
            let mut y1 = sub(sub(*t1, *t2), *t3);
            for yv in [&mut y0, &mut y1] {
                if let Some(b) = bias {
                    *yv = add(*yv, [b; W]);
                }
                finish(act, yv);
            }
            let mut z = [0.0f32; 2 * W];
            for i in 0..W {
                z[2 * i] = y0[i];
                z[2 * i + 1] = y1[i];
            }
            let at = (oy + r) * ow + x0;
            match y.get_mut(at..at + cols) {
                Some(d) if d.len() == 2 * W => d.copy_from_slice(&z),
                Some(d) => {
                    for (s, v) in d.iter_mut().zip(&z) {
                        *s = *v;
                    }
                }
                None => return,
            }
        }
        j0 += W;
    }
}

/// `act` on each of `v`, the match outside the loops.
#[inline(always)]
fn finish(act: Activation, v: &mut [f32; W]) {
    match act {
        Activation::None => {}
        Activation::Relu => v.iter_mut().for_each(|x| *x = Activation::Relu.apply(*x)),
        a @ Activation::LeakyRelu { .. } => v.iter_mut().for_each(|x| *x = a.apply(*x)),
        a @ Activation::Clip { .. } => v.iter_mut().for_each(|x| *x = a.apply(*x)),
    }
}

/// [`sconv3x3`] followed by `post` (a fused residual `Add`, then its
/// activations), in a pass over the output after the transforms: the
/// same operations in the same order as the unfused nodes.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sconv3x3_fused(
    p: &Conv<'_>,
    x: &[f32],
    u: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &crate::gemm::Post<'_>,
    scratch: &mut [f32],
) -> Result {
    if post.residual.is_none() && post.smooth.is_none() {
        return sconv3x3(p, x, u, bias, y, post.act, scratch);
    }
    sconv3x3(p, x, u, bias, y, Activation::None, scratch)?;
    crate::conv::post_pass(post, y)
}

/// ONNX `Conv` on f32 with a 3x3 kernel, strides and dilations 1, group 1,
/// any padding, by F(2x2, 3x3): `u` holds the weights laid out by
/// [`transform_weights`], `bias` (if any) is added and `act` applied to
/// every output. `scratch` holds at least [`scratch_len`]`(C, M, 1)`
/// floats; it decides how many tiles run at a time (up to [`MAX_BLOCK`]).
/// Same checks as [`crate::conv::conv`]; results equal it up to float
/// rounding (and the infinities noted in the module's description).
///
/// A block of tiles runs in three steps: the input transform writes
/// `V[xi][c][t]` (tiles innermost, a run per tile row), the 16 products
/// `M_xi = U_xi V_xi` (`cout x tiles`) read it in place as their B, each
/// writing over the `V` of the products before it (see `Layout`: nearly
/// twice the tiles per block in the same scratch), and the output transform
/// reads each channel's runs of `M` and writes whole output rows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sconv3x3(
    p: &Conv<'_>,
    x: &[f32],
    u: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    act: Activation,
    scratch: &mut [f32],
) -> Result {
    let win = &p.window;
    win.check(false)?;
    ensure(win.in_dims.len() == 2 && p.groups == 1, Error::InvalidParams)?;
    ensure(win.kernel == [3, 3] && win.strides == [1, 1], Error::InvalidParams)?;
    ensure(win.dilations == [1, 1], Error::InvalidParams)?;
    let (cin, cout) = (p.in_channels, p.out_channels);
    let (h, w, oh, ow) = (win.in_dims[0], win.in_dims[1], win.out_dims[0], win.out_dims[1]);
    let in_size = numel(win.in_dims)?;
    let out_size = numel(win.out_dims)?;
    let xn = cin.checked_mul(in_size).ok_or(Error::Overflow)?;
    let yn = cout.checked_mul(out_size).ok_or(Error::Overflow)?;
    ensure(Some(x.len()) == xn.checked_mul(p.batch), Error::ShapeMismatch)?;
    ensure(Some(y.len()) == yn.checked_mul(p.batch), Error::ShapeMismatch)?;
    ensure(Some(u.len()) == weights_len(cin, cout), Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == cout, Error::ShapeMismatch)?;
    }
    if out_size == 0 || cout == 0 || p.batch == 0 {
        return Ok(());
    }
    let tiles = tiles_of(oh, ow).ok_or(Error::Overflow)?;
    // The scratch's length is linear in the tiles of a block.
    let fixed = scratch_len(cin, cout, 0).ok_or(Error::Overflow)?;
    let per_tile = scratch_len(cin, cout, 1).ok_or(Error::Overflow)? - fixed;
    let block = (scratch.len().saturating_sub(fixed) / per_tile.max(1)).min(MAX_BLOCK).min(tiles);
    ensure(block > 0, Error::ShapeMismatch)?;
    let plane = Plane { h, w, top: win.pads_begin[0], left: win.pads_begin[1] };
    let one = panels_len(cout, cin).ok_or(Error::Overflow)?;
    let tiles_w = ow.div_ceil(2);
    for n in 0..p.batch {
        let xs = x.get(n * xn..(n + 1) * xn).ok_or(Error::ShapeMismatch)?;
        let ys = y.get_mut(n * yn..(n + 1) * yn).ok_or(Error::ShapeMismatch)?;
        let mut t0 = 0;
        while t0 < tiles {
            let tb = block.min(tiles - t0);
            let Layout { vs, ms, v: v0 } = Layout::new(cin, cout, tb).ok_or(Error::Overflow)?;
            let v = scratch.get_mut(v0..v0 + 16 * vs).ok_or(Error::ShapeMismatch)?;
            let geo = Block { t0, tb, tiles_w };
            simd::vectorize_wide(Inputs { plane, x: xs, in_size, cin, geo, vs, v: &mut *v });
            if cin > 0 {
                for xi in 0..16 {
                    // `M_xi` lies below `V_xi` (see `Layout`).
                    let (below, from) = scratch.split_at_mut(v0 + xi * vs);
                    let mx = below.get_mut(xi * ms..xi * ms + cout * tb);
                    let mx = mx.ok_or(Error::ShapeMismatch)?;
                    let a = PanelA { data: u.get(xi * one..(xi + 1) * one).unwrap_or(&[]), k: cin };
                    let b = DenseB { data: from.get(..cin * tb).unwrap_or(&[]), rs: tb, cs: 1 };
                    simd::product(cout, tb, cin, a, &b, Out { y: mx, ldy: tb }, &Epilogue::NONE)?;
                }
            }
            let m = scratch.get_mut(..16 * ms).ok_or(Error::ShapeMismatch)?;
            if cin == 0 {
                m.fill(0.0);
            }
            simd::vectorize_wide(Outputs { m, ms, cout, bias, act, oh, ow, geo, y: &mut *ys });
            t0 += tb;
        }
    }
    Ok(())
}

/// Tiles `t0..t0 + tb` of an image `tiles_w` tiles wide.
#[derive(Clone, Copy)]
struct Block {
    t0: usize,
    tb: usize,
    tiles_w: usize,
}

/// The input transform of one block, every channel (`V[xi][c][t]`).
struct Inputs<'a> {
    plane: Plane,
    x: &'a [f32],
    in_size: usize,
    cin: usize,
    geo: Block,
    /// Floats from each `V_xi` to the next.
    vs: usize,
    v: &'a mut [f32],
}

impl simd::Vectorize for Inputs<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.run_with(simd::WinogradTransforms::detect());
    }
}

impl Inputs<'_> {
    /// The transform on the vector unit `t` (AVX-512) when given, piece by
    /// piece, every channel in turn; in plain code, a channel at a time,
    /// without it (or when it refused an operand: then the whole block).
    #[inline(always)]
    fn run_with(self, t: Option<simd::WinogradTransforms>) {
        let Block { t0, tb, tiles_w } = self.geo;
        if let Some(t) = t {
            let (plane, w) = (self.in_size, self.plane.w);
            let all = pieces(t0, tb, tiles_w).all(|p| {
                let src = simd::TileRows {
                    plane,
                    rows: self.plane.tile_rows(p.ty),
                    w,
                    first: (2 * p.tx0) as isize - self.plane.left as isize,
                };
                t.inputs(self.x, src, self.cin, p.n, self.v, p.at, [self.vs, tb])
            });
            if all {
                return;
            }
        }
        let mut split: Split = [[[0.0f32; SPLIT]; 4]; 2];
        for (c, xp) in self.x.chunks_exact(self.in_size.max(1)).take(self.cin).enumerate() {
            let vc = |xi: usize| xi * self.vs + c * tb;
            for p in pieces(t0, tb, tiles_w) {
                self.plane.input_piece(xp, p, &mut split, self.v, vc);
            }
        }
    }
}

/// The output transform of one block, every output channel.
struct Outputs<'a> {
    m: &'a [f32],
    /// Floats from each `M_xi` to the next.
    ms: usize,
    cout: usize,
    bias: Option<&'a [f32]>,
    act: Activation,
    oh: usize,
    ow: usize,
    geo: Block,
    y: &'a mut [f32],
}

impl simd::Vectorize for Outputs<'_> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.run_with(simd::WinogradTransforms::detect());
    }
}

impl Outputs<'_> {
    /// The transform on the vector unit `t` (AVX-512) when given, else (or
    /// for a piece it refused) in plain code.
    #[inline(always)]
    fn run_with(self, t: Option<simd::WinogradTransforms>) {
        let Block { t0, tb, tiles_w } = self.geo;
        let (oh, ow) = (self.oh, self.ow);
        for (o, yp) in self.y.chunks_exact_mut((oh * ow).max(1)).take(self.cout).enumerate() {
            let b = self.bias.and_then(|b| b.get(o).copied());
            let mc = |xi: usize| xi * self.ms + o * tb;
            for p in pieces(t0, tb, tiles_w) {
                if let Some(t) = t {
                    let (oy, x0) = (2 * p.ty, 2 * p.tx0);
                    let cols = (2 * p.n).min(ow.saturating_sub(x0));
                    let (upper, lower) = yp.split_at_mut(((oy + 1) * ow).min(yp.len()));
                    let r0 = upper.get_mut(oy * ow + x0..oy * ow + x0 + cols);
                    let r1 = lower.get_mut(x0..x0 + cols).filter(|_| oy + 1 < oh);
                    let at = o * tb + p.at;
                    if r0.is_some()
                        && t.outputs(self.m, at, self.ms, p.n, b, self.act, [r0, r1], cols)
                    {
                        continue;
                    }
                }
                output_piece(self.m, mc, p, b, self.act, oh, ow, yp);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{Window, conv};
    use crate::simd::tests::fill;

    /// A 3x3 convolution with padding 1 (output dims = input dims).
    fn same_3x3(batch: usize, cin: usize, cout: usize, dims: &[usize; 2]) -> Conv<'_> {
        Conv {
            batch,
            in_channels: cin,
            out_channels: cout,
            groups: 1,
            window: Window {
                in_dims: dims,
                out_dims: dims,
                kernel: &[3, 3],
                strides: &[1, 1],
                dilations: &[1, 1],
                pads_begin: &[1, 1],
                pads_end: &[1, 1],
            },
        }
    }

    /// One case: batch, channels, input size, pads `[top, left, bottom, right]`.
    #[allow(clippy::too_many_arguments)]
    fn check(
        batch: usize,
        cin: usize,
        cout: usize,
        h: usize,
        w: usize,
        pads: [usize; 4],
        with_bias: bool,
        act: Activation,
        scratch_tiles: usize,
    ) {
        let (oh, ow) = (h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2);
        let (ind, outd) = ([h, w], [oh, ow]);
        let (pb, pe) = ([pads[0], pads[1]], [pads[2], pads[3]]);
        let p = Conv {
            batch,
            in_channels: cin,
            out_channels: cout,
            groups: 1,
            window: Window {
                in_dims: &ind,
                out_dims: &outd,
                kernel: &[3, 3],
                strides: &[1, 1],
                dilations: &[1, 1],
                pads_begin: &pb,
                pads_end: &pe,
            },
        };
        let mut x = vec![0.0f32; batch * cin * h * w];
        let mut wt = vec![0.0f32; cout * cin * 9];
        let mut b = vec![0.0f32; cout];
        fill(&mut x, (cin * 31 + h * 7 + w) as u32);
        fill(&mut wt, (cout * 13 + cin) as u32);
        fill(&mut b, 3);
        let bias = with_bias.then_some(&b[..]);
        let yl = batch * cout * oh * ow;
        let mut want = vec![0.0f32; yl];
        conv(&p, &x, &wt, bias, &mut want).unwrap();
        act.apply_all(&mut want);
        let mut u = vec![f32::NAN; weights_len(cin, cout).unwrap()];
        transform_weights(cin, cout, &wt, &mut u).unwrap();
        let mut scratch = vec![f32::NAN; scratch_len(cin, cout, scratch_tiles).unwrap()];
        let mut got = vec![f32::NAN; yl];
        sconv3x3(&p, &x, &u, bias, &mut got, act, &mut scratch).unwrap();
        let tol = 1e-5 * (cin as f32 * 9.0 + 1.0);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "{batch}x{cin}->{cout} {h}x{w} {pads:?} at {i}: {g} vs {w}"
            );
        }
    }

    #[test]
    fn matches_the_direct_sum_on_awkward_shapes() {
        let none = Activation::None;
        for (h, w) in [(1, 1), (3, 5), (7, 7), (14, 14), (2, 9), (6, 4)] {
            for pads in [[1, 1, 1, 1], [2, 2, 2, 2], [0, 1, 2, 0], [2, 0, 1, 1]] {
                if h + pads[0] + pads[2] < 3 || w + pads[1] + pads[3] < 3 {
                    continue;
                }
                check(1, 5, 7, h, w, pads, true, none, 64);
            }
        }
        check(1, 3, 4, 5, 6, [0; 4], false, none, 64);
        check(1, 3, 4, 3, 3, [0; 4], true, none, 1);
        for c in [1, 2, 8, 9, 17, 31, 33, 40] {
            check(1, c, 41 - c, 9, 11, [1; 4], true, Activation::Relu, 5);
        }
        check(2, 9, 33, 7, 8, [1; 4], true, Activation::Clip { min: -0.25, max: 0.5 }, 3);
        check(2, 16, 64, 14, 14, [1; 4], false, Activation::LeakyRelu { alpha: 0.1 }, 64);
        check(1, 40, 40, 13, 15, [1; 4], true, none, 16);
        // Pieces of a tile row cut at 64 tiles and at blocks of odd sizes;
        // channels across panels of 8; odd output widths (a half last tile).
        check(1, 3, 5, 11, 150, [1, 2, 1, 0], true, Activation::Relu, 37);
        check(1, 3, 2, 6, 131, [0, 1, 0, 1], false, none, 65);
        check(2, 11, 17, 9, 37, [1; 4], true, Activation::LeakyRelu { alpha: 0.3 }, 23);
        // Rows wider than a piece.
        check(1, 2, 3, 3, 300, [1, 0, 1, 2], true, none, 64);
        check(1, 2, 3, 5, 257, [2; 4], false, none, 7);
    }

    /// The vector transforms (AVX-512 and AVX2, where this CPU has them) write exactly
    /// the plain code's values: the input transform's `V` over every block
    /// of awkward geometries (padding on each side, rows cut in pieces of
    /// 64 tiles, half last tiles, rows wider than a piece), and the output
    /// transform's planes from the same `M` with each activation and bias.
    #[test]
    fn vector_transforms_are_the_plain_ones_bit_for_bit() {
        for t in simd::WinogradTransforms::each_unit().into_iter().flatten() {
            compare_transforms(t);
        }
    }

    /// [`vector_transforms_are_the_plain_ones_bit_for_bit`] on one unit.
    fn compare_transforms(t: simd::WinogradTransforms) {
        // (C, H, W, pads top/left/bottom/right, tiles per block)
        let cases = [
            (3, 9, 11, [1, 1, 1, 1], 64),
            (2, 7, 150, [1, 2, 1, 0], 37),
            (5, 6, 131, [0, 1, 0, 1], 65),
            (4, 5, 300, [1, 0, 1, 2], 64),
            (1, 14, 14, [2, 2, 2, 2], 9),
            (2, 3, 5, [0, 0, 0, 0], 1),
            (3, 13, 33, [2, 0, 1, 1], 17),
        ];
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.3 },
            Activation::Clip { min: -0.25, max: 0.5 },
        ];
        for (case, &(c, h, w, pads, block)) in cases.iter().enumerate() {
            let (oh, ow) = (h + pads[0] + pads[2] - 2, w + pads[1] + pads[3] - 2);
            let plane = Plane { h, w, top: pads[0], left: pads[1] };
            let tiles = tiles_of(oh, ow).unwrap();
            let tiles_w = ow.div_ceil(2);
            let mut x = vec![0.0f32; c * h * w];
            fill(&mut x, 5 + case as u32);
            let cout = 3;
            let mut t0 = 0;
            while t0 < tiles {
                let tb = block.min(tiles - t0);
                let geo = Block { t0, tb, tiles_w };
                let vs = c * tb + SKEW;
                let (mut v1, mut v2) = (vec![f32::NAN; 16 * vs], vec![f32::NAN; 16 * vs]);
                let inputs = |v| Inputs { plane, x: &x, in_size: h * w, cin: c, geo, vs, v };
                inputs(&mut v1).run_with(Some(t));
                inputs(&mut v2).run_with(None);
                for (i, (a, b)) in v1.iter().zip(&v2).enumerate() {
                    assert_eq!(a.to_bits(), b.to_bits(), "case {case} block at {t0}: V[{i}]");
                }
                let ms = cout * tb + SKEW;
                let mut m = vec![0.0f32; 16 * ms];
                fill(&mut m, 11 + t0 as u32);
                let bias = [0.25f32, -0.5, 0.125];
                for (k, &act) in acts.iter().enumerate() {
                    let bias = (k % 2 == 1).then_some(&bias[..]);
                    let (mut y1, mut y2) =
                        (vec![7.0f32; cout * oh * ow], vec![7.0f32; cout * oh * ow]);
                    let outputs = |y| Outputs { m: &m, ms, cout, bias, act, oh, ow, geo, y };
                    outputs(&mut y1).run_with(Some(t));
                    outputs(&mut y2).run_with(None);
                    for (i, (a, b)) in y1.iter().zip(&y2).enumerate() {
                        assert_eq!(a.to_bits(), b.to_bits(), "case {case} act {k} at {t0}: y[{i}]");
                    }
                }
                t0 += tb;
            }
        }
    }

    #[test]
    fn fused_residual_and_activations_follow_the_unfused_steps() {
        let (cin, cout, h, w) = (6, 10, 5, 7);
        let dims = [h, w];
        let p = same_3x3(2, cin, cout, &dims);
        let (mut x, mut wt, mut b) =
            (vec![0.0f32; 2 * cin * h * w], vec![0.0f32; cout * cin * 9], vec![0.0f32; cout]);
        fill(&mut x, 21);
        fill(&mut wt, 22);
        fill(&mut b, 23);
        let mut u = vec![0.0f32; weights_len(cin, cout).unwrap()];
        transform_weights(cin, cout, &wt, &mut u).unwrap();
        let mut scratch = vec![0.0f32; scratch_len(cin, cout, 8).unwrap()];
        let yl = 2 * cout * h * w;
        let mut r = vec![0.0f32; yl];
        fill(&mut r, 24);
        let mut plain = vec![0.0f32; yl];
        sconv3x3(&p, &x, &u, Some(&b), &mut plain, Activation::None, &mut scratch).unwrap();
        let cases = [
            (Some(&r[..]), Activation::Relu, None),
            (Some(&r[..]), Activation::None, Some(crate::gemm::Smooth::Gelu)),
            (None, Activation::Clip { min: -0.5, max: 0.5 }, None),
            (None, Activation::None, Some(crate::gemm::Smooth::GeluTanh)),
        ];
        for (residual, act, smooth) in cases {
            let mut want = plain.clone();
            if let Some(r) = residual {
                want.iter_mut().zip(r).for_each(|(v, r)| *v += *r);
            }
            act.apply_all(&mut want);
            if let Some(s) = smooth {
                s.apply_all(&mut want);
            }
            let post = crate::gemm::Post { residual, act, smooth };
            let mut got = vec![f32::NAN; yl];
            sconv3x3_fused(&p, &x, &u, Some(&b), &mut got, &post, &mut scratch).unwrap();
            assert_eq!(got, want, "{act:?} {smooth:?}");
        }
        let short = crate::gemm::Post { residual: Some(&r[1..]), ..crate::gemm::Post::NONE };
        let mut got = vec![0.0f32; yl];
        assert_eq!(
            sconv3x3_fused(&p, &x, &u, Some(&b), &mut got, &short, &mut scratch),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn non_finite_inputs_land_where_the_direct_sum_puts_them() {
        let (cin, cout, h, w) = (3, 5, 7, 6);
        let dims = [h, w];
        let p = same_3x3(1, cin, cout, &dims);
        let mut wt = vec![0.0f32; cout * cin * 9];
        fill(&mut wt, 4);
        let mut u = vec![0.0f32; weights_len(cin, cout).unwrap()];
        transform_weights(cin, cout, &wt, &mut u).unwrap();
        let mut scratch = vec![0.0f32; scratch_len(cin, cout, 64).unwrap()];
        for (at, bad) in [(0, f32::NAN), (15, f32::NAN), (41, f32::INFINITY), (100, f32::NAN)] {
            let mut x = vec![0.0f32; cin * h * w];
            fill(&mut x, 9);
            x[at] = bad;
            let (mut want, mut got) = (vec![0.0f32; cout * h * w], vec![0.0f32; cout * h * w]);
            conv(&p, &x, &wt, None, &mut want).unwrap();
            sconv3x3(&p, &x, &u, None, &mut got, Activation::None, &mut scratch).unwrap();
            for (g, w) in got.iter().zip(&want) {
                assert_eq!(g.is_finite(), w.is_finite(), "{at}: {g} vs {w}");
                if bad.is_nan() {
                    assert_eq!(g.is_nan(), w.is_nan());
                }
                if w.is_finite() {
                    assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()));
                }
            }
            assert!(got.iter().any(|v| !v.is_finite()));
        }
    }

    #[test]
    fn weights_are_16_panel_matrices_of_g_g_gt() {
        // One filter, one channel: g = all ones gives U rows
        // [1, 1.5, 0.5, 1], [1.5, 2.25, 0.75, 1.5], [0.5, 0.75, 0.25, 0.5], [1, 1.5, 0.5, 1].
        let mut u = vec![9.0f32; weights_len(1, 1).unwrap()];
        assert_eq!(u.len(), 16 * 8);
        transform_weights(1, 1, &[1.0; 9], &mut u).unwrap();
        let want = [1.0, 1.5, 0.5, 1.0, 1.5, 2.25, 0.75, 1.5, 0.5, 0.75, 0.25, 0.5, 1.0, 1.5, 0.5];
        for (xi, w) in want.iter().enumerate() {
            assert_eq!(u[xi * 8], *w);
            assert!(u[xi * 8 + 1..(xi + 1) * 8].iter().all(|&v| v == 0.0));
        }
        // Filter (o = 33, c = 1) of 34 x 2 lands in the fifth panel of 8
        // rows (16 floats each), column 1, row 1 of the panel.
        let (cin, cout) = (2, 34);
        let mut w = vec![0.0f32; cout * cin * 9];
        w[(33 * cin + 1) * 9 + 4] = 4.0;
        let one = 5 * 8 * cin;
        let mut u = vec![0.0f32; weights_len(cin, cout).unwrap()];
        assert_eq!(u.len(), 16 * one);
        transform_weights(cin, cout, &w, &mut u).unwrap();
        // The centre tap reaches U[1..3][1..3] as 4 * (±0.5)^2 = ±1.
        let at = 4 * 8 * cin + 8 + 1;
        assert_eq!(u[5 * one + at], 1.0);
        assert_eq!(u[6 * one + at], -1.0);
        assert_eq!(u[10 * one + at], 1.0);
        assert_eq!(u.iter().filter(|&&v| v != 0.0).count(), 4);
        // Refused: wrong lengths, infinite weights.
        assert_eq!(transform_weights(cin, cout, &w[1..], &mut u), Err(Error::ShapeMismatch));
        w[0] = f32::INFINITY;
        assert_eq!(transform_weights(cin, cout, &w, &mut u), Err(Error::InvalidParams));
    }

    #[test]
    fn bad_geometry_and_buffers_are_refused() {
        let mk =
            |kernel: &'static [usize], strides: &'static [usize], outd: &'static [usize]| Conv {
                batch: 1,
                in_channels: 1,
                out_channels: 1,
                groups: 1,
                window: Window {
                    in_dims: &[4, 4],
                    out_dims: outd,
                    kernel,
                    strides,
                    dilations: &[1, 1],
                    pads_begin: &[0, 0],
                    pads_end: &[0, 0],
                },
            };
        let x = [1.0f32; 16];
        let u: Vec<f32> = vec![0.0; weights_len(1, 1).unwrap()];
        let mut s = vec![0.0f32; scratch_len(1, 1, 4).unwrap()];
        let mut y = [0.0f32; 4];
        let none = Activation::None;
        let ok = mk(&[3, 3], &[1, 1], &[2, 2]);
        assert_eq!(sconv3x3(&ok, &x, &u, None, &mut y, none, &mut s), Ok(()));
        let r = sconv3x3(&mk(&[3, 3], &[2, 2], &[1, 1]), &x, &u, None, &mut y[..1], none, &mut s);
        assert_eq!(r, Err(Error::InvalidParams));
        let r = sconv3x3(&mk(&[2, 2], &[1, 1], &[3, 3]), &x, &u, None, &mut [0.0; 9], none, &mut s);
        assert_eq!(r, Err(Error::InvalidParams));
        let r = sconv3x3(&ok, &x, &u[1..], None, &mut y, none, &mut s);
        assert_eq!(r, Err(Error::ShapeMismatch));
        let r = sconv3x3(&ok, &x[1..], &u, None, &mut y, none, &mut s);
        assert_eq!(r, Err(Error::ShapeMismatch));
        let r = sconv3x3(&ok, &x, &u, None, &mut y, none, &mut s[..31]);
        assert_eq!(r, Err(Error::ShapeMismatch));
        let r = sconv3x3(&ok, &x, &u, Some(&[1.0, 2.0]), &mut y, none, &mut s);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }
}
