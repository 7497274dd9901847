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
//! transformed weights laid out once in the 32-column strips of
//! [`crate::gemm::pack_b_strips`]: tiles are the product's rows, input
//! channels its depth, output channels its columns.

use crate::conv::{Activation, Conv};
use crate::gemm::packed_b_len;
use crate::shape::numel;
use crate::simd::{self, Epilogue, Out, STRIP, StripsB, ViewA};
use crate::{Error, Result, ensure};

/// Tiles one block of [`sconv3x3`] handles at most; the generator sizes the
/// scratch for `min(tiles of one image, MAX_BLOCK)` tiles.
pub const MAX_BLOCK: usize = 64;

/// Floats of the transformed weights of a convolution of `cin` input and
/// `cout` output channels: 16 `cin x cout` matrices in strips (the columns
/// padded to a multiple of 32); `None` on overflow.
pub fn weights_len(cin: usize, cout: usize) -> Option<usize> {
    packed_b_len(cin, cout)?.checked_mul(16)
}

/// Floats of scratch memory [`sconv3x3`] needs to handle `tiles` tiles at a
/// time: for each tile, the 16 transformed inputs of every input channel
/// and the 16 sums of every output channel. `None` on overflow.
pub fn scratch_len(cin: usize, cout: usize, tiles: usize) -> Option<usize> {
    cin.checked_add(cout)?.checked_mul(16)?.checked_mul(tiles)
}

/// Tiles of one image of `oh x ow` outputs (2x2 each, the last row and
/// column of tiles partial when a side is odd).
pub fn tiles_of(oh: usize, ow: usize) -> Option<usize> {
    oh.div_ceil(2).checked_mul(ow.div_ceil(2))
}

/// Lays out the filters `w` (`[cout, cin, 3, 3]`, row-major) for
/// [`sconv3x3`]: for each of the 16 positions `xi` of `U = G g Gᵀ`, the
/// `cin x cout` matrix `U_xi[c, o]` laid out as
/// [`crate::gemm::pack_b_strips`] lays out a B, the 16 one after another
/// ([`weights_len`] floats). Computed in f64, rounded once. Refuses weights
/// that are not all finite (see the module's notes).
pub fn transform_weights(cin: usize, cout: usize, w: &[f32], out: &mut [f32]) -> Result {
    let taps = cin.checked_mul(cout).and_then(|v| v.checked_mul(9)).ok_or(Error::Overflow)?;
    let one = packed_b_len(cin, cout).ok_or(Error::Overflow)?;
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
        let at = (o / STRIP) * STRIP * cin + c * STRIP + o % STRIP;
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

/// `Bᵀ d B` of one 4x4 input tile `d` (row-major), row-major.
#[inline(always)]
fn input_transform(d: &[f32; 16]) -> [f32; 16] {
    // Bᵀ rows: [1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1].
    let mut t = [0.0f32; 16];
    for j in 0..4 {
        let (d0, d1, d2, d3) = (d[j], d[4 + j], d[8 + j], d[12 + j]);
        t[j] = d0 - d2;
        t[4 + j] = d1 + d2;
        t[8 + j] = d2 - d1;
        t[12 + j] = d1 - d3;
    }
    let mut v = [0.0f32; 16];
    for i in 0..4 {
        let (t0, t1, t2, t3) = (t[i * 4], t[i * 4 + 1], t[i * 4 + 2], t[i * 4 + 3]);
        v[i * 4] = t0 - t2;
        v[i * 4 + 1] = t1 + t2;
        v[i * 4 + 2] = t2 - t1;
        v[i * 4 + 3] = t1 - t3;
    }
    v
}

/// Output channels the output transform handles at once.
const LANES: usize = 16;

/// `Aᵀ m A` (`Aᵀ` rows `[1, 1, 1, 0]`, `[0, 1, -1, -1]`) of `LANES` sets of
/// 16 sums at once, `s[xi][lane]` with `xi` row-major: the 2x2 outputs
/// (row-major), each a vector of lanes.
#[inline(always)]
fn output_lanes(s: &[[f32; LANES]; 16]) -> [[f32; LANES]; 4] {
    let mut t = [[0.0f32; LANES]; 8];
    for j in 0..4 {
        for l in 0..LANES {
            let (m0, m1, m2, m3) = (s[j][l], s[4 + j][l], s[8 + j][l], s[12 + j][l]);
            t[j][l] = m0 + m1 + m2;
            t[4 + j][l] = m1 - m2 - m3;
        }
    }
    let mut y = [[0.0f32; LANES]; 4];
    for i in 0..2 {
        for l in 0..LANES {
            let (t0, t1, t2, t3) = (t[i * 4][l], t[i * 4 + 1][l], t[i * 4 + 2][l], t[i * 4 + 3][l]);
            y[i * 2][l] = t0 + t1 + t2;
            y[i * 2 + 1][l] = t1 - t2 - t3;
        }
    }
    y
}

/// Widest padded row [`input_rows`] handles (on the stack).
const ROW: usize = 256;

/// The input transform of tiles `t0..t0 + tb` of one channel plane `x`, a
/// row of tiles at a time: the four input rows a tile row covers are copied
/// (zero outside the plane) into one padded row each, combined row-wise
/// (`Bᵀ d`) over the whole width in vector loops, then column-wise per tile;
/// `V_xi` of tile `t` goes to `v[vc(xi) + t]`. The same sums in the same
/// order as [`input_transform`]. `false` (nothing written) when the padded
/// row is wider than [`ROW`].
#[inline(always)]
fn input_rows(
    plane: &Plane,
    x: &[f32],
    t0: usize,
    tb: usize,
    tiles_w: usize,
    v: &mut [f32],
    vc: impl Fn(usize) -> usize,
) -> bool {
    let width = 2 * tiles_w + 2;
    if width > ROW {
        return false;
    }
    let mut rows = [[0.0f32; ROW]; 4];
    let mut comb = [[0.0f32; ROW]; 4];
    let mut t = t0;
    while t < t0 + tb {
        let (ty, tx0) = (t / tiles_w, t % tiles_w);
        let tx1 = tiles_w.min(tx0 + (t0 + tb - t));
        for (r, row) in rows.iter_mut().enumerate() {
            row[..width].fill(0.0);
            let Some(iy) = (2 * ty + r).checked_sub(plane.top).filter(|&v| v < plane.h) else {
                continue;
            };
            // Input column ix sits at padded column ix + left.
            let n = plane.w.min(width.saturating_sub(plane.left));
            if let (Some(dst), Some(src)) =
                (row.get_mut(plane.left..plane.left + n), x.get(iy * plane.w..iy * plane.w + n))
            {
                dst.copy_from_slice(src);
            }
        }
        let [r0, r1, r2, r3] = &rows;
        let [c0, c1, c2, c3] = &mut comb;
        for i in 0..width {
            c0[i] = r0[i] - r2[i];
            c1[i] = r1[i] + r2[i];
            c2[i] = r2[i] - r1[i];
            c3[i] = r1[i] - r3[i];
        }
        for (i, ci) in comb.iter().enumerate() {
            let [o0, o1, o2, o3] = [vc(i * 4), vc(i * 4 + 1), vc(i * 4 + 2), vc(i * 4 + 3)];
            for tx in tx0..tx1 {
                let at = t - t0 + tx - tx0;
                let (a0, a1, a2, a3) = (ci[2 * tx], ci[2 * tx + 1], ci[2 * tx + 2], ci[2 * tx + 3]);
                for (o, val) in [(o0, a0 - a2), (o1, a1 + a2), (o2, a2 - a1), (o3, a1 - a3)] {
                    if let Some(s) = v.get_mut(o + at) {
                        *s = val;
                    }
                }
            }
        }
        t += tx1 - tx0;
    }
    true
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
    /// The 4x4 input tile of tile `(ty, tx)` from the plane `x`, zero
    /// outside it (padding, and past the end for partial tiles).
    #[inline(always)]
    fn tile(&self, x: &[f32], ty: usize, tx: usize) -> [f32; 16] {
        let mut d = [0.0f32; 16];
        // Input row of the tile's first row: 2 * ty - top, maybe negative.
        let (y0, x0) = (2 * ty, 2 * tx);
        let inside = y0 >= self.top
            && x0 >= self.left
            && y0 + 4 <= self.top + self.h
            && x0 + 4 <= self.left + self.w;
        if inside {
            let base = (y0 - self.top) * self.w + (x0 - self.left);
            for r in 0..4 {
                if let Some(src) = x.get(base + r * self.w..base + r * self.w + 4) {
                    d[r * 4..r * 4 + 4].copy_from_slice(src);
                }
            }
            return d;
        }
        for r in 0..4 {
            let Some(iy) = (y0 + r).checked_sub(self.top).filter(|&v| v < self.h) else {
                continue;
            };
            for c in 0..4 {
                let Some(ix) = (x0 + c).checked_sub(self.left).filter(|&v| v < self.w) else {
                    continue;
                };
                d[r * 4 + c] = x.get(iy * self.w + ix).copied().unwrap_or(0.0);
            }
        }
        d
    }
}

/// [`sconv3x3`] followed by `post` (a fused residual `Add`, then its
/// activations), in a pass over the output after the transforms: the
/// same operations in the same order as the unfused nodes.
#[allow(clippy::too_many_arguments)]
pub fn sconv3x3_fused(
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
#[allow(clippy::too_many_arguments)]
pub fn sconv3x3(
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
    let per_tile = scratch_len(cin, cout, 1).ok_or(Error::Overflow)?;
    let tiles = tiles_of(oh, ow).ok_or(Error::Overflow)?;
    let block = (scratch.len() / per_tile).min(MAX_BLOCK).min(tiles);
    ensure(block > 0, Error::ShapeMismatch)?;
    let plane = Plane { h, w, top: win.pads_begin[0], left: win.pads_begin[1] };
    let one = packed_b_len(cin, cout).ok_or(Error::Overflow)?;
    let epi = Epilogue::bias_act(bias, act);
    let (v_all, m_all) = scratch.split_at_mut(16 * cin * block);
    let tiles_w = ow.div_ceil(2);
    for n in 0..p.batch {
        let xs = x.get(n * xn..(n + 1) * xn).ok_or(Error::ShapeMismatch)?;
        let ys = y.get_mut(n * yn..(n + 1) * yn).ok_or(Error::ShapeMismatch)?;
        let mut t0 = 0;
        while t0 < tiles {
            let tb = block.min(tiles - t0);
            // V laid out [16][cin][tb]: the rows (tiles) one register tile of
            // the product reads at a step of the depth are adjacent.
            let v = v_all.get_mut(..16 * cin * tb).ok_or(Error::ShapeMismatch)?;
            for (c, xp) in xs.chunks_exact(in_size).enumerate() {
                let vc = |xi: usize| (xi * cin + c) * tb;
                if !input_rows(&plane, xp, t0, tb, tiles_w, v, vc) {
                    for t in 0..tb {
                        let (ty, tx) = ((t0 + t) / tiles_w, (t0 + t) % tiles_w);
                        let vt = input_transform(&plane.tile(xp, ty, tx));
                        for (xi, val) in vt.iter().enumerate() {
                            if let Some(s) = v.get_mut(vc(xi) + t) {
                                *s = *val;
                            }
                        }
                    }
                }
            }
            let m = m_all.get_mut(..16 * cout * tb).ok_or(Error::ShapeMismatch)?;
            for (xi, mx) in m.chunks_exact_mut(cout * tb).enumerate() {
                let a = ViewA { data: v, off: xi * cin * tb, rs: 1, cs: tb };
                let ux = u.get(xi * one..(xi + 1) * one).ok_or(Error::ShapeMismatch)?;
                let b = StripsB { data: ux, k: cin };
                simd::product(tb, cout, cin, a, &b, Out { y: mx, ldy: cout }, &Epilogue::NONE)?;
            }
            let m = &*m;
            for t in 0..tb {
                let (ty, tx) = ((t0 + t) / tiles_w, (t0 + t) % tiles_w);
                let (oy, ox) = (2 * ty, 2 * tx);
                let rows = if oy + 1 < oh { 2 } else { 1 };
                let cols = if ox + 1 < ow { 2 } else { 1 };
                // Output channels LANES at a time: the 16 sums of each are
                // rows of M, so the transform runs as vector loops.
                let mut o0 = 0;
                while o0 < cout {
                    let lanes = LANES.min(cout - o0);
                    let mut s = [[0.0f32; LANES]; 16];
                    for (xi, sx) in s.iter_mut().enumerate() {
                        let at = (xi * tb + t) * cout + o0;
                        let src = m.get(at..at + lanes).ok_or(Error::ShapeMismatch)?;
                        sx[..lanes].copy_from_slice(src);
                    }
                    let out = output_lanes(&s);
                    for (l, o) in (o0..o0 + lanes).enumerate() {
                        for r in 0..rows {
                            for q in 0..cols {
                                let at = (oy + r) * ow + ox + q;
                                if let Some(dst) = ys.get_mut(o * out_size + at) {
                                    *dst = epi.one(o, at, out[r * 2 + q][l]);
                                }
                            }
                        }
                    }
                    o0 += lanes;
                }
            }
            t0 += tb;
        }
    }
    Ok(())
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
        // Rows wider than the row buffer: tile by tile.
        check(1, 2, 3, 3, 300, [1, 0, 1, 2], true, none, 64);
        check(1, 2, 3, 5, 257, [2; 4], false, none, 7);
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
    fn weights_are_16_strip_matrices_of_g_g_gt() {
        // One filter, one channel: g = all ones gives U rows
        // [1, 1.5, 0.5, 1], [1.5, 2.25, 0.75, 1.5], [0.5, 0.75, 0.25, 0.5], [1, 1.5, 0.5, 1].
        let mut u = vec![9.0f32; weights_len(1, 1).unwrap()];
        assert_eq!(u.len(), 16 * 32);
        transform_weights(1, 1, &[1.0; 9], &mut u).unwrap();
        let want = [1.0, 1.5, 0.5, 1.0, 1.5, 2.25, 0.75, 1.5, 0.5, 0.75, 0.25, 0.5, 1.0, 1.5, 0.5];
        for (xi, w) in want.iter().enumerate() {
            assert_eq!(u[xi * 32], *w);
            assert!(u[xi * 32 + 1..(xi + 1) * 32].iter().all(|&v| v == 0.0));
        }
        // Filter (o = 33, c = 1) of 34 x 2 lands in the second strip, row 1, column 1.
        let (cin, cout) = (2, 34);
        let mut w = vec![0.0f32; cout * cin * 9];
        w[(33 * cin + 1) * 9 + 4] = 4.0;
        let one = packed_b_len(cin, cout).unwrap();
        let mut u = vec![0.0f32; weights_len(cin, cout).unwrap()];
        transform_weights(cin, cout, &w, &mut u).unwrap();
        // The centre tap reaches U[1..3][1..3] as 4 * (±0.5)^2 = ±1.
        let at = 32 * cin + 32 + 1;
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
