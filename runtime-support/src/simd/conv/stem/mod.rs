//! The stem convolution (few input channels, output channels in lanes):
//! what the instruction sets share, written once here (which shapes are
//! taken, the repacked weights, the staged input rows, the walk over the
//! tiles), and one tile per instruction set ([`avx512`], [`avx2`]).
//!
//! A tile is [`StemTile::P`] output pixels of one output row by
//! [`StemTile::L`] output channels (one vector): for every tap `(c, ky,
//! kx)` it loads the tap's weights (one per output channel) and, for each
//! pixel, broadcasts its one input value straight from the staged input
//! row, whatever the stride. The sums of a pixel then hold its channels;
//! after the bias and the activations, a transpose in registers turns them
//! into channel rows of pixels, stored in place in the NCHW output.
//!
//! For each output row, the `cin * kh` input rows its windows read are
//! copied once into a stack buffer with their zero padding (rows in the
//! padding all zeros, rows long enough for the last tile's pixels), and
//! every tile of the row reads them in place: no tap needs a bounds test,
//! and every tap of every pixel is summed. The sums run over `(c, ky, kx)`
//! in ascending order with fused multiply-adds and padding taps add `w *
//! 0.0`, the arithmetic of the other convolution paths.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;

use crate::simd::Vectorize;
use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::pack::ReadA;
use crate::simd::math::VFunc;

/// Input rows of a window (`cin * kh`) at most.
const MAX_ROWS: usize = 64;
/// Floats of the staged input rows of one output row.
const BAND: usize = 8192;
/// Floats of the repacked weights: `k` taps by the output channels rounded
/// up to whole vectors.
const WEIGHTS: usize = 12288;
/// Output channels at most.
const MAX_M: usize = 256;

/// A tile's epilogue: the bias of its [`StemTile::L`] channels (when there
/// is one), the activation, then the smooth activation.
pub(crate) type Epi<'a> = (Option<&'a [f32]>, Activation, Option<VFunc>);

/// One instruction set's tile and the shapes it is used for.
pub(crate) trait StemTile: Micro {
    /// Output pixels per tile (the transpose's side).
    const P: usize;
    /// Output channels per tile: one vector.
    const L: usize;
    /// Input channels up to which the kernel is used at any stride.
    const MAX_CIN: usize;
    /// Input channels up to which it is used at stride 2.
    const MAX_CIN_STRIDED: usize;

    /// One tile: pixels `ox0..ox0 + P` of the staged rows `band` (window
    /// row `r`, tap `kx`, pixel `p` at `band[r * lx + off + p * SX + kx *
    /// dx]`, `off` being `ox0 * SX`) by the `ch` output channels of `wts`
    /// (`k` vectors, one per tap), the bias added, the activations
    /// applied, `np` pixels of each channel `c` stored at `dst[c * ldd..]`.
    /// Implementations check the bounds with [`fits`] (one that does not
    /// hold is the caller's bug: a panic in debug builds, nothing done in
    /// release builds).
    #[allow(clippy::too_many_arguments)]
    fn tile<const SX: usize>(
        self,
        s: &Shape,
        band: &[f32],
        off: usize,
        wts: &[f32],
        epi: Epi<'_>,
        dst: &mut [f32],
        ldd: usize,
        ch: usize,
        np: usize,
    );
}

/// Convolves `x` (`cin` planes of `g.h x g.w`) with `w` (`m` filters of
/// `cin x g.kh x g.kw`) into `y` (`m` planes of `g.oh x g.ow`), adding
/// `bias`, applying `act`, then `smooth` (the vector routine's arithmetic,
/// as the pass over a whole tensor computes it) on `cpu`'s tiles. Returns
/// `false`, with `y` untouched, when the shape is not one this kernel
/// takes or is expected to run faster another way: more than
/// [`StemTile::MAX_CIN`] input channels ([`StemTile::MAX_CIN_STRIDED`] at
/// stride 2) or [`MAX_M`] output channels, a third more padded channels
/// than tiles of 8 have (on AVX-512, 8 output channels run as fast on the
/// staged kernel's 8-channel tiles, 6 twice as fast), output rows filling
/// less than three quarters of their tiles, a stride other than 1 or 2,
/// rows or weights larger than its buffers, a shape mismatch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d<I: StemTile, A: ReadA>(
    cpu: I,
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    smooth: Option<VFunc>,
    y: &mut [f32],
) -> bool {
    let (p, l) = (I::P, I::L);
    let rows = cin.checked_mul(g.kh);
    let k = rows.and_then(|r| r.checked_mul(g.kw));
    // A staged row: the columns every tile of the output row reads, the
    // last tile's pixels included.
    let lx = (g.kw.max(1) - 1)
        .checked_mul(g.dx)
        .and_then(|v| v.checked_add((g.ow.div_ceil(p) * p).checked_sub(1)?.checked_mul(g.sx)?))
        .and_then(|v| v.checked_add(1));
    let wlen = k.and_then(|k| k.checked_mul(m.div_ceil(l) * l));
    let sizes = [(cin, g.h.checked_mul(g.w), x.len()), (m, g.oh.checked_mul(g.ow), y.len())];
    // Output rows filling less than three quarters of their tiles' pixels
    // (AVX-512, 17 of 32: 16 -> 32 3x3/2 at 34x34 0.045 -> 0.056 ms) stay
    // on other kernels.
    let few = cin <= I::MAX_CIN || (g.sx == 2 && cin <= I::MAX_CIN_STRIDED);
    if cin == 0
        || !few
        || 4 * g.ow < 3 * g.ow.div_ceil(p) * p
        || m == 0
        || m > MAX_M
        || 3 * m.div_ceil(l) * l > 4 * m.div_ceil(8) * 8
        || g.kh == 0
        || g.kw == 0
        || !(1..=2).contains(&g.sx)
        || rows.is_none_or(|r| r > MAX_ROWS)
        || lx.zip(rows).and_then(|(l, r)| l.checked_mul(r)).is_none_or(|v| v > BAND)
        || wlen.is_none_or(|l| l > WEIGHTS)
        || sizes.iter().any(|&(a, b, l)| b.and_then(|b| a.checked_mul(b)) != Some(l))
        || bias.is_some_and(|b| b.len() < m)
    {
        return false;
    }
    let (Some(rows), Some(k), Some(lx), Some(wlen)) = (rows, k, lx, wlen) else {
        return false;
    };
    if !w.fits(m, k) {
        return false;
    }
    // The weights tap by tap, a vector of output channels each, and the
    // biases (zero past `m`).
    let mut wts = [0.0f32; WEIGHTS];
    let (data, cs) = (w.data(), w.cs());
    for (b, block) in wts[..wlen].chunks_exact_mut(k * l).enumerate() {
        for (t, lanes) in block.chunks_exact_mut(l).enumerate() {
            for (j, v) in lanes.iter_mut().enumerate() {
                let i = b * l + j;
                if i < m {
                    *v = data.get(w.row(i) + t * cs).copied().unwrap_or(0.0);
                }
            }
        }
    }
    let mut biases = [0.0f32; MAX_M];
    if let Some(b) = bias {
        biases[..m].copy_from_slice(&b[..m]);
    }
    let bias = bias.map(|_| &biases);
    let shape = Shape { g: *g, m, rows, k, lx };
    let wts = &wts[..wlen];
    cpu.run_body(Rows { cpu, shape: &shape, x, wts, bias, act, smooth, y });
    true
}

/// [`rows_of`]'s arguments, as a body compiled for the tile's ISA
/// ([`Micro::run_body`]).
struct Rows<'a, I> {
    cpu: I,
    shape: &'a Shape,
    x: &'a [f32],
    wts: &'a [f32],
    bias: Option<&'a [f32; MAX_M]>,
    act: Activation,
    smooth: Option<VFunc>,
    y: &'a mut [f32],
}

impl<I: StemTile> Vectorize for Rows<'_, I> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Rows { cpu, shape, x, wts, bias, act, smooth, y } = self;
        match shape.g.sx {
            1 => rows_of::<I, 1>(cpu, shape, x, wts, bias, act, smooth, y),
            _ => rows_of::<I, 2>(cpu, shape, x, wts, bias, act, smooth, y),
        }
    }
}

/// The checked sizes of one convolution.
pub(crate) struct Shape {
    g: Geom2d,
    m: usize,
    /// Input rows of a window, `cin * kh`.
    rows: usize,
    /// Taps, `rows * kw`.
    k: usize,
    /// Floats per staged input row.
    lx: usize,
}

impl Shape {
    /// The kernel's width.
    #[inline(always)]
    fn kw(&self) -> usize {
        self.g.kw
    }

    /// The kernel's horizontal dilation.
    #[inline(always)]
    fn dx(&self) -> usize {
        self.g.dx
    }
}

/// Every output row, tile by tile, for stride `SX`: the window's input
/// rows are staged with their zero padding (zeros for rows in the
/// padding), then each tile reads them in place.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows_of<I: StemTile, const SX: usize>(
    cpu: I,
    s: &Shape,
    x: &[f32],
    wts: &[f32],
    bias: Option<&[f32; MAX_M]>,
    act: Activation,
    smooth: Option<VFunc>,
    y: &mut [f32],
) {
    let (p, l) = (I::P, I::L);
    let g = &s.g;
    let (hw, ohw, lx) = (g.h * g.w, g.oh * g.ow, s.lx);
    let mut band = [0.0f32; BAND];
    let band = &mut band[..s.rows * lx];
    // Staged floats `lo..hi` of a row are input columns `j - pl`.
    let lo = g.pl.min(lx);
    let hi = (g.w + g.pl).clamp(lo, lx);
    for oy in 0..g.oh {
        for (r, row) in band.chunks_exact_mut(lx).enumerate() {
            let (c, ky) = (r / g.kh, r % g.kh);
            let iy = (oy * g.sy + ky * g.dy).checked_sub(g.pt).filter(|&v| v < g.h);
            let (head, rest) = row.split_at_mut(lo);
            let (mid, tail) = rest.split_at_mut(hi - lo);
            head.fill(0.0);
            tail.fill(0.0);
            let from = iy.map(|iy| c * hw + iy * g.w);
            match from.and_then(|f| x.get(f..f + mid.len())) {
                Some(v) => mid.copy_from_slice(v),
                None => mid.fill(0.0),
            }
        }
        let band: &[f32] = band;
        for ox0 in (0..g.ow).step_by(p) {
            let np = p.min(g.ow - ox0);
            for (b, block) in wts.chunks_exact(s.k * l).enumerate() {
                let ch = l.min(s.m - b * l);
                let at = b * l * ohw + oy * g.ow + ox0;
                debug_assert!(at <= y.len(), "stem: Y short of channel block {b}, row {oy}");
                let Some(dst) = y.get_mut(at..) else { return };
                let bias = bias.map(|v| &v[b * l..b * l + l]);
                let epi = (bias, act, smooth);
                cpu.tile::<SX>(s, band, ox0 * SX, block, epi, dst, ohw, ch, np);
            }
        }
    }
}

/// Whether [`StemTile::tile`]'s reads and writes lie within its slices:
/// the staged rows at `r * lx + off + p * SX + kx * dx` for `r < rows`, `p
/// < P`, `kx < kw`, the weights at `t * L + j` for `t < k`, `j < L`, the
/// bias at `j < L`, the destination at `c * ldd + p` for `c < ch`, `p <
/// np`; and `0 < ch <= L`, `0 < np <= P` (`false` without a debug
/// assertion when `ch` or `np` is 0: nothing to do).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fits<I: StemTile, const SX: usize>(
    s: &Shape,
    band: &[f32],
    off: usize,
    wts: &[f32],
    bias: Option<&[f32]>,
    dst: &[f32],
    ldd: usize,
    ch: usize,
    np: usize,
) -> bool {
    let (p, l) = (I::P, I::L);
    let (kw, dx) = (s.g.kw, s.g.dx);
    let reach = (s.rows - 1) * s.lx + off + (p - 1) * SX + (kw - 1) * dx;
    let last = (ch.max(1) - 1) * ldd + np;
    if ch == 0 || np == 0 {
        return false;
    }
    let fits = reach < band.len()
        && ch <= l
        && np <= p
        && wts.len() >= s.k * l
        && bias.is_none_or(|b| b.len() >= l)
        && last <= dst.len();
    debug_assert!(
        fits,
        "stem tile: staged rows reach {reach} of {}, {} weights for {} taps, {ch}x{np} outputs \
         {ldd} apart in {}",
        band.len(),
        wts.len(),
        s.k,
        dst.len()
    );
    fits
}

#[cfg(all(test, target_arch = "x86_64", target_feature = "sse2"))]
pub(super) mod tests {
    use super::*;
    use crate::conv::{Conv, Window, conv};
    use crate::simd::gemm::epilogue::Smooth;
    use crate::simd::gemm::pack::ViewA;
    use std::vec::Vec;

    fn values(seed: &mut u32, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 17;
                *seed ^= *seed << 5;
                (*seed % 2001) as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// `[cin, m, h, w]`, kernel, strides, dilations, pads top/left/bottom/right.
    pub(crate) type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 4]);

    /// Another kernel with [`conv2d`]'s arguments (no smooth activation).
    pub(crate) type Other<'a> = dyn Fn(&Geom2d, usize, usize, &[f32], ViewA<'_>, Option<&[f32]>, Activation, &mut [f32]) -> bool
        + 'a;

    /// What an instruction set's test adds to [`check`]: its smooth
    /// activation over a whole tensor (the arithmetic its tile must match),
    /// and another kernel of the same arithmetic to compare with bit for
    /// bit (`false` where it does not take the shape).
    pub(crate) struct Hooks<'a> {
        pub(crate) pass: &'a dyn Fn(Smooth, &mut [f32]),
        pub(crate) other: &'a Other<'a>,
    }

    /// The sums as the kernels compute them, one output at a time: over
    /// `(c, ky, kx)` ascending, fused multiply-adds from `+0.0`, a padding
    /// tap adding `w * 0.0`; then the bias.
    fn model(case: Case, x: &[f32], wt: &[f32], bias: Option<&[f32]>, out: [usize; 2]) -> Vec<f32> {
        let ([cin, m, h, w], k, s, d, pads) = case;
        let mut y = Vec::with_capacity(m * out[0] * out[1]);
        for oc in 0..m {
            for oy in 0..out[0] {
                for ox in 0..out[1] {
                    let mut acc = 0.0f32;
                    for c in 0..cin {
                        for ky in 0..k[0] {
                            for kx in 0..k[1] {
                                let iy = (oy * s[0] + ky * d[0]).checked_sub(pads[0]);
                                let ix = (ox * s[1] + kx * d[1]).checked_sub(pads[1]);
                                let v = match (iy, ix) {
                                    (Some(iy), Some(ix)) if iy < h && ix < w => {
                                        x[(c * h + iy) * w + ix]
                                    }
                                    _ => 0.0,
                                };
                                let wv = wt[((oc * cin + c) * k[0] + ky) * k[1] + kx];
                                acc = v.mul_add(wv, acc);
                            }
                        }
                    }
                    y.push(bias.map_or(acc, |b| acc + b[oc]));
                }
            }
        }
        y
    }

    fn same(a: f32, e: f32) -> bool {
        a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan())
    }

    /// Runs the stem kernel on one case with each activation, with and
    /// without a bias: bit for bit the documented sums ([`model`]) and
    /// `hooks.other`'s, with a smooth activation bit for bit
    /// `hooks.pass` after the plain result, and within rounding of the
    /// exact convolution. Returns whether the kernel took the shape and
    /// whether the other kernel did.
    pub(crate) fn check<I: StemTile>(
        cpu: I,
        case: Case,
        seed: &mut u32,
        special: bool,
        hooks: &Hooks<'_>,
    ) -> (bool, bool) {
        let ([cin, m, h, w], k, s, d, pads) = case;
        let out =
            [0, 1].map(|a| (pads[a] + pads[a + 2] + [h, w][a] - d[a] * (k[a] - 1) - 1) / s[a] + 1);
        let window = Window {
            in_dims: &[h, w],
            out_dims: &out,
            kernel: &k,
            strides: &s,
            dilations: &d,
            pads_begin: &pads[..2],
            pads_end: &pads[2..],
        };
        let p = Conv { batch: 1, in_channels: cin, out_channels: m, groups: 1, window };
        let g = Geom2d::of(&p.window).unwrap();
        let mut x = values(seed, cin * h * w);
        let kd = cin * k[0] * k[1];
        let mut wt = values(seed, m * kd);
        if special {
            // NaN, infinities and signed zeros in the input and weights.
            for (i, v) in x.iter_mut().enumerate().step_by(7) {
                *v = [f32::NAN, -0.0, f32::INFINITY, 0.0, f32::NEG_INFINITY][i % 5];
            }
            let n = wt.len();
            wt[1 % n] = f32::INFINITY;
            wt[(kd + 2) % n] = -0.0;
        }
        let bias = values(seed, m);
        let yl = m * out[0] * out[1];
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.125 },
            Activation::Clip { min: -0.5, max: 0.25 },
        ];
        let view = ViewA { data: &wt, off: 0, rs: kd, cs: 1 };
        let (mut took, mut compared) = (false, false);
        for (i, act) in acts.into_iter().enumerate() {
            let b = (i % 2 == 1).then_some(&bias[..]);
            let mut got = vec![f32::NAN; yl];
            took = conv2d(cpu, &g, cin, m, &x, view, b, act, None, &mut got);
            if !took {
                assert!(got.iter().all(|v| v.is_nan()), "{case:?}: refused but wrote");
                continue;
            }
            let mut sums = model(case, &x, &wt, b, out);
            act.apply_all(&mut sums);
            for (j, (a, e)) in got.iter().zip(&sums).enumerate() {
                assert!(same(*a, *e), "{case:?} {act:?} [{j}]: {a} against the model's {e}");
            }
            // A smooth activation in the tile: the pass over the whole
            // output, bit for bit.
            for smooth in [Smooth::Silu, Smooth::HardSwish, Smooth::Gelu] {
                let mut fused = vec![f32::NAN; yl];
                let f = smooth.vector();
                assert!(conv2d(cpu, &g, cin, m, &x, view, b, act, f, &mut fused));
                let mut after = got.clone();
                (hooks.pass)(smooth, &mut after);
                for (j, (a, e)) in fused.iter().zip(&after).enumerate() {
                    assert!(same(*a, *e), "{case:?} {act:?} {smooth:?} [{j}]: {a} vs {e}");
                }
            }
            let mut staged = vec![f32::NAN; yl];
            let other = (hooks.other)(&g, cin, m, &x, view, b, act, &mut staged);
            compared |= other;
            if other {
                for (j, (a, e)) in got.iter().zip(&staged).enumerate() {
                    assert!(same(*a, *e), "{case:?} {act:?} [{j}]: {a} against the staged {e}");
                }
            }
            if special {
                continue;
            }
            let mut want = vec![0.0f32; yl];
            conv(&p, &x, &wt, b, &mut want).unwrap();
            act.apply_all(&mut want);
            for (j, (a, e)) in got.iter().zip(&want).enumerate() {
                let tol = 4.0 * kd as f32 * f32::EPSILON * (e.abs() + 1.0) * 4.0;
                assert!((a - e).abs() <= tol, "{case:?} {act:?} [{j}]: {a} vs {e}");
            }
        }
        (took, compared)
    }

    /// Shapes every instruction set's kernel takes: the models' stems
    /// (narrower), channels not a multiple of the lanes, odd widths, pads,
    /// dilations.
    pub(crate) const TAKEN: &[Case] = &[
        // MobileNet's 3x3 stride 2, ResNet's 7x7 stride 2 pad 3,
        // SqueezeNet's unpadded 3x3 stride 2, ResNet-8's 3x3 stride 1.
        ([3, 16, 20, 64], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ([3, 64, 17, 61], [7, 7], [2, 2], [1, 1], [3, 3, 3, 3]),
        ([3, 64, 15, 61], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0]),
        ([3, 16, 12, 32], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        // Channels not a multiple of 16, one input channel, widths below,
        // at and above a tile, asymmetric pads, dilations, 1x1.
        ([1, 12, 9, 13], [3, 3], [1, 1], [1, 1], [1, 2, 0, 1]),
        ([2, 17, 6, 30], [2, 3], [1, 2], [1, 1], [0, 1, 1, 0]),
        ([4, 33, 8, 49], [3, 3], [2, 1], [2, 2], [2, 2, 2, 2]),
        ([1, 16, 1, 14], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
        ([3, 24, 7, 90], [5, 5], [1, 2], [1, 1], [2, 2, 2, 2]),
        ([2, 16, 3, 100], [1, 1], [1, 2], [1, 1], [0, 0, 0, 0]),
        ([4, 48, 5, 25], [3, 5], [2, 2], [1, 1], [3, 4, 3, 4]),
    ];

    /// More input channels at stride 2 (ResNet-8's 16 -> 32), which both
    /// instruction sets take.
    pub(crate) const STRIDED: &[Case] = &[
        ([16, 32, 12, 32], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ([9, 16, 7, 60], [3, 3], [1, 2], [1, 1], [1, 1, 1, 1]),
    ];

    /// Shapes no instruction set's kernel takes: too many input channels
    /// (at stride 1, at stride 2), too many output channels, stride 3,
    /// staged rows longer than the buffer.
    pub(crate) const REFUSED: &[Case] = &[
        ([5, 16, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        ([3, 257, 5, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        ([3, 16, 9, 48], [3, 3], [3, 3], [1, 1], [1, 1, 1, 1]),
        ([16, 16, 9, 32], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
        ([17, 16, 9, 64], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ([4, 16, 8, 300], [8, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
    ];

    /// [`check`] on every case of `taken` (with and without special values)
    /// and `refused`: the first all taken, the others all refused. Returns
    /// how many runs the other kernel of `hooks` compared.
    pub(crate) fn check_all<I: StemTile>(
        cpu: I,
        taken: &[Case],
        refused: &[Case],
        hooks: &Hooks<'_>,
    ) -> usize {
        let mut seed = 0x2545_f491;
        let mut compared = 0;
        for &case in taken {
            for special in [false, true] {
                let (took, other) = check(cpu, case, &mut seed, special, hooks);
                assert!(took, "{case:?} not taken");
                compared += usize::from(other);
            }
        }
        for &case in refused {
            assert!(!check(cpu, case, &mut seed, false, hooks).0, "{case:?} taken");
        }
        compared
    }
}
