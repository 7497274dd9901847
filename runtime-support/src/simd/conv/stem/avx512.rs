//! Convolutions with few input channels (a network's stem: 3 -> 16..64
//! channels, 3x3 or 7x7, stride 1 or 2) on AVX-512, with the output
//! channels in the vector lanes.
//!
//! The pixel-in-lanes kernels ([`crate::simd::conv::direct`], the im2col product) need
//! the inputs of 16 consecutive output pixels contiguous, so a strided
//! convolution first copies its input into phase planes; with 3 input
//! channels and 16 or 32 output channels that copy and the per-tile work
//! cost as much as the multiply-adds. Here a tile is 16 output pixels of one
//! output row by 16 output channels: for every tap `(c, ky, kx)` the tile
//! loads the tap's 16 weights (one per output channel) and, for each pixel,
//! broadcasts its one input value straight from the input row, whatever the
//! stride. The 16 sums of a pixel then hold its 16 channels; after the bias
//! and activation, a 16x16 transpose in registers turns them into 16
//! channel rows of 16 pixels, stored in place in the NCHW output.
//!
//! For each output row, the `cin * kh` input rows its windows read are
//! copied once into a stack buffer with their zero padding (rows in the
//! padding all zeros, rows long enough for the last tile's 16 pixels), and
//! every tile of the row reads them in place: no tap needs a bounds test,
//! and every tap of every pixel is summed. The sums run over `(c, ky, kx)`
//! in ascending order with fused multiply-adds and padding taps add `w *
//! 0.0`, the arithmetic of the other AVX-512 convolution paths.
//!
//! Measured on Zen 4 (conv bench, fastest of 30 runs), against the staged
//! pixel-in-lanes kernel: MobileNet's 3 -> 16 3x3 stride 2 at 224x224
//! 0.195 -> 0.152 ms, EfficientNet's 3 -> 32 0.405 -> 0.282, SqueezeNet's
//! unpadded 3 -> 64 0.651 -> 0.527, ResNet's 3 -> 64 7x7 stride 2 2.45 ->
//! 2.23 (90% of the FMA peak); ResNet-8's 3 -> 16 at 32x32 and VWW's 3 ->
//! 8 at 96x96 the same. A first version that kept the sums in an array
//! passed by reference to the activation ran twice slower: the compiler
//! stored every sum after every multiply-add.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::pack::ReadA;
use crate::simd::isa::avx512::{Avx512, activate};
use crate::simd::math::VFunc;
use crate::simd::math::vexp::eval512;
use core::arch::x86_64::{
    __m512, __mmask16, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps, _mm512_mask_storeu_ps,
    _mm512_set1_ps, _mm512_setzero_ps, _mm512_shuffle_f32x4, _mm512_shuffle_ps, _mm512_unpackhi_ps,
    _mm512_unpacklo_ps,
};

/// Output pixels per tile (the transpose's side).
const P: usize = 16;
/// Output channels per tile: one vector.
const L: usize = 16;
/// Input rows of a window (`cin * kh`) at most.
const MAX_ROWS: usize = 64;
/// Floats of the staged input rows of one output row.
const BAND: usize = 8192;
/// Floats of the repacked weights: `k` taps by the output channels rounded
/// up to whole vectors.
const WEIGHTS: usize = 12288;
/// Output channels at most.
const MAX_M: usize = 256;
/// Input channels up to which the kernel is used at any stride.
const MAX_CIN: usize = 4;
/// Input channels up to which it is used at stride 2. Measured (conv bench,
/// against the staged kernel): 16 -> 32 3x3/2 at 64x64 0.183 -> 0.102 ms,
/// at 32x32 (ResNet-8's) 0.043 -> 0.028, 16 -> 64 at 56x56 0.203 ->
/// 0.167, 8 -> 16 at 32x32 0.016 -> 0.009; at stride 1 16 channels ran
/// 5-15% slower (16 -> 16 at 32x32 0.055 -> 0.064).
const MAX_CIN_STRIDED: usize = 16;

/// Convolves `x` (`cin` planes of `g.h x g.w`) with `w` (`m` filters of
/// `cin x g.kh x g.kw`) into `y` (`m` planes of `g.oh x g.ow`), adding
/// `bias`, applying `act`, then `smooth` (the vector routine's arithmetic,
/// as the pass over a whole tensor computes it). Returns `false`, with `y`
/// untouched, when the shape is not one this kernel takes or is expected
/// to run faster on the staged 8-channel tiles: more than [`MAX_CIN`]
/// input channels ([`MAX_CIN_STRIDED`] at stride 2) or [`MAX_M`] output
/// channels, a third more padded channels than tiles of 8 have (8 output
/// channels run as fast on 8-channel tiles, 6 twice as fast), output rows
/// filling less than three quarters of their tiles, a stride other than
/// 1 or 2, rows or weights larger than its buffers, a shape mismatch.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d<A: ReadA>(
    cpu: Avx512,
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
    let rows = cin.checked_mul(g.kh);
    let k = rows.and_then(|r| r.checked_mul(g.kw));
    // A staged row: the columns every tile of the output row reads, the
    // last tile's 16 pixels included.
    let lx = (g.kw.max(1) - 1)
        .checked_mul(g.dx)
        .and_then(|v| v.checked_add((g.ow.div_ceil(P) * P).checked_sub(1)?.checked_mul(g.sx)?))
        .and_then(|v| v.checked_add(1));
    let wlen = k.and_then(|k| k.checked_mul(m.div_ceil(L) * L));
    let sizes = [(cin, g.h.checked_mul(g.w), x.len()), (m, g.oh.checked_mul(g.ow), y.len())];
    // Output rows filling less than three quarters of their tiles' pixels
    // (17 of 32: 16 -> 32 3x3/2 at 34x34 0.045 -> 0.056 ms) stay on 8-row
    // tiles.
    let few = cin <= MAX_CIN || (g.sx == 2 && cin <= MAX_CIN_STRIDED);
    if cin == 0
        || !few
        || 4 * g.ow < 3 * g.ow.div_ceil(P) * P
        || m == 0
        || m > MAX_M
        || 3 * m.div_ceil(L) * L > 4 * m.div_ceil(8) * 8
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
    for (b, block) in wts[..wlen].chunks_exact_mut(k * L).enumerate() {
        for (t, lanes) in block.chunks_exact_mut(L).enumerate() {
            for (l, v) in lanes.iter_mut().enumerate() {
                let i = b * L + l;
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
    cpu.within(|| match g.sx {
        1 => rows_of::<1>(cpu, &shape, x, &wts[..wlen], bias, act, smooth, y),
        _ => rows_of::<2>(cpu, &shape, x, &wts[..wlen], bias, act, smooth, y),
    });
    true
}

/// The checked sizes of one convolution.
struct Shape {
    g: Geom2d,
    m: usize,
    /// Input rows of a window, `cin * kh`.
    rows: usize,
    /// Taps, `rows * kw`.
    k: usize,
    /// Floats per staged input row.
    lx: usize,
}

/// Every output row, tile by tile, for stride `SX`: the window's input
/// rows are staged with their zero padding (zeros for rows in the
/// padding), then each tile reads them in place.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows_of<const SX: usize>(
    cpu: Avx512,
    s: &Shape,
    x: &[f32],
    wts: &[f32],
    bias: Option<&[f32; MAX_M]>,
    act: Activation,
    smooth: Option<VFunc>,
    y: &mut [f32],
) {
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
        for ox0 in (0..g.ow).step_by(P) {
            let np = P.min(g.ow - ox0);
            for (b, block) in wts.chunks_exact(s.k * L).enumerate() {
                let ch = L.min(s.m - b * L);
                let at = b * L * ohw + oy * g.ow + ox0;
                debug_assert!(at <= y.len(), "stem: Y short of channel block {b}, row {oy}");
                let Some(dst) = y.get_mut(at..) else { return };
                let bias = bias.map(|v| &v[b * L..b * L + L]);
                let epi = (bias, act, smooth);
                tile::<SX>(cpu, s, band, ox0 * SX, block, epi, dst, ohw, ch, np);
            }
        }
    }
}

/// One tile: pixels `ox0..ox0 + 16` of the staged rows `band` (window row
/// `r`, tap `kx`, pixel `p` at `band[r * lx + off + p * SX + kx * dx]`) by
/// the `ch` output channels of `wts` (`k` vectors), `np` pixels stored into
/// `dst[c * ldd + p]`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile<const SX: usize>(
    cpu: Avx512,
    s: &Shape,
    band: &[f32],
    off: usize,
    wts: &[f32],
    (bias, act, smooth): (Option<&[f32]>, Activation, Option<VFunc>),
    dst: &mut [f32],
    ldd: usize,
    ch: usize,
    np: usize,
) {
    let _ = cpu;
    let (kw, dx) = (s.g.kw, s.g.dx);
    let reach = (s.rows - 1) * s.lx + off + (P - 1) * SX + (kw - 1) * dx;
    let last = (ch.max(1) - 1) * ldd + np;
    if ch == 0 || np == 0 {
        return;
    }
    let fits = reach < band.len()
        && wts.len() >= s.k * L
        && bias.is_none_or(|b| b.len() >= L)
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
    if !fits {
        return;
    }
    let bias = bias.map(|b| b.as_ptr());
    let src = band.as_ptr().wrapping_add(off);
    // SAFETY: `cpu` proves AVX-512F is present; the staged rows are read at
    // `r * lx + off + p * SX + kx * dx <= reach < band.len()` for `r <
    // rows`, `p < 16`, `kx < kw`; the weights at `t * L + l < k * L <=
    // wts.len()`, the bias at `l < L <= bias.len()`, and the destination
    // at `c * ldd + p < last <= dst.len()` for `c < ch`, `p < np`.
    let epi = (bias, act, smooth);
    unsafe { tile512::<SX>(s.rows, s.lx, kw, dx, src, wts.as_ptr(), epi, dst, ldd, ch, np) }
}

/// See [`tile`]; the caller guarantees its bounds.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn tile512<const SX: usize>(
    rows: usize,
    lx: usize,
    kw: usize,
    dx: usize,
    src: *const f32,
    wts: *const f32,
    (bias, act, smooth): (Option<*const f32>, Activation, Option<VFunc>),
    dst: &mut [f32],
    ldd: usize,
    ch: usize,
    np: usize,
) {
    let mut acc = [_mm512_setzero_ps(); P];
    let mut t = 0;
    // SAFETY (the loop, the bias, the stores): as checked by `tile`.
    unsafe {
        for r in 0..rows {
            let row = src.add(r * lx);
            for kx in 0..kw {
                let wv = _mm512_loadu_ps(wts.add(t * L));
                let at = row.add(kx * dx);
                for (p, sum) in acc.iter_mut().enumerate() {
                    *sum = _mm512_fmadd_ps(_mm512_set1_ps(*at.add(p * SX)), wv, *sum);
                }
                t += 1;
            }
        }
        if let Some(b) = bias {
            let bv = _mm512_loadu_ps(b);
            for sum in &mut acc {
                *sum = _mm512_add_ps(*sum, bv);
            }
        }
        // The activation by value (a call taking the sums by reference
        // kept them in memory during the whole loop).
        if act != Activation::None {
            for v in acc.iter_mut() {
                *v = activate(*v, act);
            }
        }
        if let Some(f) = smooth {
            for v in acc.iter_mut() {
                *v = eval512(f, *v);
            }
        }
        let out = transpose(acc);
        let mask: __mmask16 = if np >= P { 0xffff } else { ((1u32 << np) - 1) as __mmask16 };
        for (c, v) in out.iter().enumerate().take(ch) {
            _mm512_mask_storeu_ps(dst.as_mut_ptr().add(c * ldd), mask, *v);
        }
    }
}

/// The 16x16 transpose: lane `j` of vector `i` becomes lane `i` of vector
/// `j`. Four rounds of 16 shuffles: pairs of rows interleaved, then
/// quadruples within each 128-bit lane, then 128-bit lanes across the
/// vectors twice.
#[target_feature(enable = "avx512f")]
#[inline]
fn transpose(r: [__m512; 16]) -> [__m512; 16] {
    // t[2i], t[2i + 1]: rows 2i and 2i + 1 interleaved, per 128-bit lane
    // `q`, at channels 4q, 4q + 1 and 4q + 2, 4q + 3.
    let mut t = [_mm512_setzero_ps(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    // u[4q + e], per 128-bit lane `l`: rows 4q..4q + 4 at channel 4l + e.
    let mut u = [_mm512_setzero_ps(); 16];
    for q in 0..4 {
        let (a, b, c, d) = (t[4 * q], t[4 * q + 1], t[4 * q + 2], t[4 * q + 3]);
        u[4 * q] = _mm512_shuffle_ps::<0x44>(a, c);
        u[4 * q + 1] = _mm512_shuffle_ps::<0xEE>(a, c);
        u[4 * q + 2] = _mm512_shuffle_ps::<0x44>(b, d);
        u[4 * q + 3] = _mm512_shuffle_ps::<0xEE>(b, d);
    }
    // v[h][e] (rows 8h..8h + 8): lanes (rows 8h..+4, ch e), (8h..+4, ch
    // 8 + e), (8h + 4..+4, ch e), (8h + 4..+4, ch 8 + e); w[h][e] the same
    // at channels 4 + e and 12 + e.
    let mut v = [[_mm512_setzero_ps(); 4]; 2];
    let mut w = [[_mm512_setzero_ps(); 4]; 2];
    for h in 0..2 {
        for e in 0..4 {
            let (a, b) = (u[8 * h + e], u[8 * h + 4 + e]);
            v[h][e] = _mm512_shuffle_f32x4::<0x88>(a, b);
            w[h][e] = _mm512_shuffle_f32x4::<0xDD>(a, b);
        }
    }
    let mut out = [_mm512_setzero_ps(); 16];
    for e in 0..4 {
        out[e] = _mm512_shuffle_f32x4::<0x88>(v[0][e], v[1][e]);
        out[8 + e] = _mm512_shuffle_f32x4::<0xDD>(v[0][e], v[1][e]);
        out[4 + e] = _mm512_shuffle_f32x4::<0x88>(w[0][e], w[1][e]);
        out[12 + e] = _mm512_shuffle_f32x4::<0xDD>(w[0][e], w[1][e]);
    }
    out
}

/// Rows `0..16` of a 16-wide patch layout: `dst[kx * stride + c] =
/// src[c * 16 + kx]` for `c < len` and `kx < 16`, sixteen columns at a
/// time through [`transpose`] (the last block's missing patches as zeros,
/// its stores masked). `false`, nothing written, when the slices are too
/// short.
pub(in crate::simd) fn patch16(
    _cpu: Avx512,
    src: &[f32],
    len: usize,
    dst: &mut [f32],
    stride: usize,
) -> bool {
    let dst_need = 15usize.checked_mul(stride).and_then(|v| v.checked_add(len));
    let src_need = len.checked_mul(16);
    if src_need.is_none_or(|v| v > src.len()) || dst_need.is_none_or(|v| v > dst.len()) {
        return false;
    }
    // SAFETY: `_cpu` proves AVX-512F; the lengths were checked above.
    unsafe { patch16_blocks(src, len, dst, stride) };
    true
}

/// [`patch16`]'s loop. Safety: AVX-512F is present, `src` holds `len * 16`
/// floats and `dst` at least `15 * stride + len`.
#[target_feature(enable = "avx512f")]
unsafe fn patch16_blocks(src: &[f32], len: usize, dst: &mut [f32], stride: usize) {
    for c0 in (0..len).step_by(16) {
        let n = (len - c0).min(16);
        // SAFETY (loads and stores): patch `c0 + i < len` is
        // `src[(c0 + i) * 16..][..16]`, inside `src`, and row `kx` of the
        // output is `dst[kx * stride + c0..][..n]`, inside `dst` (the
        // caller's bounds); the store writes the first `n` lanes only.
        let rows: [__m512; 16] = core::array::from_fn(|i| {
            if i < n {
                unsafe { _mm512_loadu_ps(src.as_ptr().add((c0 + i) * 16)) }
            } else {
                _mm512_setzero_ps()
            }
        });
        let keep: __mmask16 = if n == 16 { 0xffff } else { ((1u32 << n) - 1) as __mmask16 };
        for (kx, v) in transpose(rows).into_iter().enumerate() {
            unsafe { _mm512_mask_storeu_ps(dst.as_mut_ptr().add(kx * stride + c0), keep, v) };
        }
    }
}

/// `__m512` as 16 floats, for the tests.
#[cfg(test)]
fn lanes(v: __m512) -> [f32; 16] {
    // SAFETY: both are 64 bytes of plain data.
    unsafe { core::mem::transmute::<__m512, [f32; 16]>(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{Conv, Window, conv};
    use crate::simd::gemm::epilogue::Smooth;
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
    type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 4]);

    /// Runs the stem kernel on one case with each activation, with and
    /// without a bias: bit for bit the staged direct kernel's sums (the
    /// same fused multiply-adds in the same order, padding taps included),
    /// and within rounding of the exact convolution. Returns whether the
    /// kernel took the shape.
    fn check(cpu: Avx512, case: Case, seed: &mut u32, special: bool) -> (bool, bool) {
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
        let view = crate::simd::gemm::pack::ViewA { data: &wt, off: 0, rs: kd, cs: 1 };
        let (mut took, mut compared) = (false, false);
        for (i, act) in acts.into_iter().enumerate() {
            let b = (i % 2 == 1).then_some(&bias[..]);
            let mut got = vec![f32::NAN; yl];
            took = conv2d(cpu, &g, cin, m, &x, view, b, act, None, &mut got);
            if !took {
                assert!(got.iter().all(|v| v.is_nan()), "{case:?}: refused but wrote");
                continue;
            }
            // A smooth activation in the tile: the pass over the whole
            // output, bit for bit.
            let smooth = [Smooth::Silu, Smooth::HardSwish, Smooth::Gelu][i % 3];
            let mut fused = vec![f32::NAN; yl];
            let f = smooth.vector();
            assert!(conv2d(cpu, &g, cin, m, &x, view, b, act, f, &mut fused));
            let mut after = got.clone();
            smooth.apply_all(&mut after);
            for (j, (a, e)) in fused.iter().zip(&after).enumerate() {
                assert!(
                    a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan()),
                    "{case:?} {act:?} {smooth:?} [{j}]: {a} against the pass's {e}"
                );
            }
            let mut staged = vec![f32::NAN; yl];
            let direct = crate::simd::conv::direct::conv2d_with(
                cpu,
                &g,
                cin,
                m,
                &x,
                view,
                b,
                act,
                &mut staged,
                false,
            );
            compared |= direct;
            if direct {
                for (j, (a, e)) in got.iter().zip(&staged).enumerate() {
                    assert!(
                        a.to_bits() == e.to_bits() || (a.is_nan() && e.is_nan()),
                        "{case:?} {act:?} [{j}]: {a} against the staged {e}"
                    );
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

    #[test]
    fn stems_match_the_staged_kernel_and_the_exact_conv() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        let mut seed = 0x2545_f491;
        let cases: &[Case] = &[
            // The models' stems (narrower): MobileNet's 3x3 stride 2,
            // ResNet's 7x7 stride 2 pad 3, SqueezeNet's unpadded 3x3 stride
            // 2, ResNet-8's 3x3 stride 1.
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
            // Up to 16 input channels at stride 2 (ResNet-8's 16 -> 32).
            ([16, 32, 12, 32], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([9, 16, 7, 60], [3, 3], [1, 2], [1, 1], [1, 1, 1, 1]),
        ];
        let mut compared = 0;
        for &case in cases {
            for special in [false, true] {
                let (took, direct) = check(cpu, case, &mut seed, special);
                assert!(took, "{case:?} not taken");
                compared += usize::from(direct);
            }
        }
        assert!(compared >= 18, "{compared} cases compared with the staged kernel");
        // Refused: too many input channels (at stride 1, at stride 2), too
        // many output channels, too few output channels or pixels for the
        // lanes, stride 3, staged rows longer than the buffer.
        let refused: &[Case] = &[
            ([5, 16, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 8, 9, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 257, 5, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([3, 16, 9, 48], [3, 3], [3, 3], [1, 1], [1, 1, 1, 1]),
            ([16, 16, 9, 32], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([17, 16, 9, 64], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([8, 16, 9, 34], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([4, 16, 8, 300], [8, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
        ];
        for &case in refused {
            assert!(!check(cpu, case, &mut seed, false).0, "{case:?} taken");
        }
    }

    #[test]
    fn transpose_swaps_rows_and_lanes() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        let got = cpu.within(|| {
            let rows: [__m512; 16] = core::array::from_fn(|i| {
                let vals: [f32; 16] = core::array::from_fn(|j| (i * 16 + j) as f32);
                // SAFETY: `vals` holds 16 floats.
                unsafe { _mm512_loadu_ps(vals.as_ptr()) }
            });
            // SAFETY: inside `within`, AVX-512F is present.
            unsafe { transpose(rows) }.map(lanes)
        });
        for (j, row) in got.iter().enumerate() {
            for (i, v) in row.iter().enumerate() {
                assert_eq!(*v, (i * 16 + j) as f32, "lane {i} of vector {j}");
            }
        }
    }
}
