//! Dispatch for the vectorised depthwise convolution.

use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Smooth;

#[cfg(onnx_codegen_arm_fma)]
#[allow(unsafe_code)]
mod arm;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod neon;
pub(in crate::simd) mod portable;

/// Geometry of a 2-D convolution plane: input `h x w`, output `oh x ow`,
/// kernel `kh x kw`, strides, dilations and the leading pads. Only the
/// vector kernels read it (depthwise here, direct in `conv/direct/avx512.rs`).
#[cfg_attr(
    not(any(
        all(target_arch = "x86_64", target_feature = "sse2"),
        all(target_arch = "aarch64", target_feature = "neon")
    )),
    allow(dead_code)
)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geom2d {
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sy: usize,
    pub sx: usize,
    pub dy: usize,
    pub dx: usize,
    pub pt: usize,
    pub pl: usize,
}

impl Geom2d {
    /// The geometry of a 2-D window; `None` for other ranks.
    pub(crate) fn of(win: &crate::conv::Window<'_>) -> Option<Geom2d> {
        let two = |v: &[usize]| <[usize; 2]>::try_from(v).ok();
        let ([h, w], [oh, ow], [kh, kw]) =
            (two(win.in_dims)?, two(win.out_dims)?, two(win.kernel)?);
        let ([sy, sx], [dy, dx], [pt, pl]) =
            (two(win.strides)?, two(win.dilations)?, two(win.pads_begin)?);
        Some(Geom2d { h, w, oh, ow, kh, kw, sy, sx, dy, dx, pt, pl })
    }

    /// How many planes the slices of a depthwise layer over `channels`
    /// channels hold, when they hold them whole: `y` a whole number of
    /// output planes, `x` as many input planes, `w` one kernel and `bias`
    /// one value per channel; `Some(0)` for an empty output. `None` when
    /// they do not. The products must not overflow: the x86 kernels call
    /// it with every dimension below 2^24.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(crate) fn planes(
        &self,
        channels: usize,
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        y: &[f32],
    ) -> Option<usize> {
        let (hw, n, ks) = (self.h * self.w, self.oh * self.ow, self.kh * self.kw);
        if n == 0 {
            return (x.len().is_multiple_of(hw.max(1)) && y.is_empty()).then_some(0);
        }
        let planes = y.len() / n;
        let whole = y.len() == planes * n
            && Some(x.len()) == planes.checked_mul(hw)
            && Some(w.len()) == channels.checked_mul(ks)
            && bias.is_none_or(|b| b.len() == channels);
        whole.then_some(planes)
    }
}

/// Computes every plane of a depthwise layer on the vector unit when there
/// is one and the geometry suits it: plane `p` of `x` (planes of `h x w`
/// back to back) with kernel `p % channels` of `w` and the same entry of
/// `bias` gives plane `p` of `y`, through `act`, then `smooth` (applied to
/// a block of planes right after the kernel wrote it, while it is in cache).
/// Returns `false`, writing nothing, otherwise (the caller then runs its
/// portable loops).
#[allow(clippy::too_many_arguments)]
#[inline]
pub(crate) fn depthwise(
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    smooth: Option<Smooth>,
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        if let Some(cpu) = crate::simd::isa::avx512::Avx512::detect() {
            let kernel = |c: usize, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32]| {
                avx512::depthwise(cpu, g, c, x, w, b, act, y)
            };
            if by_blocks(g, channels, x, w, bias, smooth, BLOCK, y, kernel) {
                return true;
            }
        }
        if let Some(cpu) = crate::simd::isa::avx2::Avx2::detect() {
            let kernel = |c: usize, x: &[f32], w: &[f32], b: Option<&[f32]>, y: &mut [f32]| {
                avx2::depthwise(cpu, g, c, x, w, b, act, y)
            };
            return by_blocks(g, channels, x, w, bias, smooth, BLOCK, y, kernel);
        }
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(cpu) = crate::simd::isa::neon::Neon::detect() {
        return plane_by_plane(g, channels, x, w, bias, act, smooth, y, |g, xp, wk, b, act, yp| {
            neon::depthwise_plane(cpu, g, xp, wk, b, act, yp)
        });
    }
    // Without a vector unit (Cortex-M): 3x3 layers on the staged
    // register kernel.
    #[cfg(not(any(
        all(target_arch = "x86_64", target_feature = "sse2"),
        target_arch = "x86",
        target_arch = "aarch64"
    )))]
    if smooth.is_none() {
        return portable::depthwise_3x3(g, channels, x, w, bias, act, y);
    }
    let _ = (g, channels, x, w, bias, act, smooth, y);
    false
}

/// Floats of output a block of planes holds before its smooth activation
/// runs (32 KiB: an L1 data cache).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const BLOCK: usize = 8192;

/// `smooth` on every value of `y`, as the products finish their tiles (the
/// same arithmetic as the standalone op).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
fn smooth_all(s: Smooth, y: &mut [f32]) {
    let n = y.len();
    crate::simd::gemm::epilogue::smooth_block(s, y, n, 1, n);
}

/// [`depthwise`] on a kernel that takes every plane of a layer at once
/// (`kernel(channels, x, w, bias, y)`): without `smooth`, one call; with
/// it, one call per block of channels of one image (about `block`
/// outputs, [`BLOCK`] in [`depthwise`]), each followed by `smooth` on what it wrote. `false` when the
/// slices do not hold whole images or the kernel declines the first block
/// (the geometry is the same for all, so before any output was written).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(clippy::too_many_arguments)]
fn by_blocks(
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    smooth: Option<Smooth>,
    block: usize,
    y: &mut [f32],
    mut kernel: impl FnMut(usize, &[f32], &[f32], Option<&[f32]>, &mut [f32]) -> bool,
) -> bool {
    let Some(s) = smooth else { return kernel(channels, x, w, bias, y) };
    let (Some(hw), Some(n), Some(ks)) =
        (g.h.checked_mul(g.w), g.oh.checked_mul(g.ow), g.kh.checked_mul(g.kw))
    else {
        return false;
    };
    let (Some(xi), Some(yi)) = (channels.checked_mul(hw), channels.checked_mul(n)) else {
        return false;
    };
    if n == 0 || hw == 0 || channels == 0 || ks == 0 {
        return false;
    }
    let images = y.len() / yi;
    if y.len() != images * yi
        || Some(x.len()) != images.checked_mul(xi)
        || Some(w.len()) != channels.checked_mul(ks)
        || bias.is_some_and(|b| b.len() != channels)
    {
        return false;
    }
    let per = (block / n).clamp(1, channels);
    for (yb, xb) in y.chunks_exact_mut(yi).zip(x.chunks_exact(xi)) {
        let mut c0 = 0;
        while c0 < channels {
            let c1 = (c0 + per).min(channels);
            let (Some(xs), Some(ws), Some(ys)) =
                (xb.get(c0 * hw..c1 * hw), w.get(c0 * ks..c1 * ks), yb.get_mut(c0 * n..c1 * n))
            else {
                return false;
            };
            let bs = bias.and_then(|b| b.get(c0..c1));
            if !kernel(c1 - c0, xs, ws, bs, ys) {
                return false;
            }
            smooth_all(s, ys);
            c0 = c1;
        }
    }
    true
}

/// [`depthwise`] on a kernel that takes one plane at a time, `smooth`
/// following on each plane; `false` when the slices do not hold whole
/// planes or a plane is not handled (the geometry is the same for all, so
/// that is the first one, before any output was written).
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(clippy::too_many_arguments)]
fn plane_by_plane(
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    smooth: Option<Smooth>,
    y: &mut [f32],
    mut plane: impl FnMut(&Geom2d, &[f32], &[f32], f32, Activation, &mut [f32]) -> bool,
) -> bool {
    let (Some(hw), Some(n), Some(ks)) =
        (g.h.checked_mul(g.w), g.oh.checked_mul(g.ow), g.kh.checked_mul(g.kw))
    else {
        return false;
    };
    if n == 0 || hw == 0 || channels == 0 {
        return false;
    }
    let planes = y.len() / n;
    if y.len() != planes * n
        || Some(x.len()) != planes.checked_mul(hw)
        || Some(w.len()) != channels.checked_mul(ks)
        || bias.is_some_and(|b| b.len() != channels)
    {
        return false;
    }
    for (p, (yp, xp)) in y.chunks_exact_mut(n).zip(x.chunks_exact(hw)).enumerate() {
        let c = p % channels;
        let wk = w.get(c * ks..(c + 1) * ks).unwrap_or(&[]);
        let b = bias.and_then(|b| b.get(c)).copied().unwrap_or(0.0);
        if !plane(g, xp, wk, b, act, yp) {
            return false;
        }
        if let Some(s) = smooth {
            smooth_all(s, yp);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{Conv, Window, conv};

    /// The activations of a test: the piecewise one, then the smooth one.
    type Act = (Activation, Option<Smooth>);

    /// A depthwise kernel under test, with [`depthwise`]'s arguments.
    type Kernel<'a> =
        &'a dyn Fn(&Geom2d, usize, &[f32], &[f32], Option<&[f32]>, Act, &mut [f32]) -> bool;

    fn values(out: &mut [f32], seed: u32) {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(3);
        for v in out.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = (x % 2001) as f32 / 1000.0 - 1.0;
        }
    }

    /// Runs `kernel` on one geometry (3 planes of 2 channels) and compares
    /// it with the exact [`conv`] followed by the activations; `false` when
    /// the kernel declined the geometry.
    #[allow(clippy::too_many_arguments)]
    fn check(
        kernel: Kernel<'_>,
        [h, w]: [usize; 2],
        k: [usize; 2],
        s: [usize; 2],
        d: [usize; 2],
        [pt, pl, pb, pr]: [usize; 4],
        act: Act,
        with_bias: bool,
    ) -> Option<bool> {
        let span = |i: usize| d[i] * (k[i] - 1) + 1;
        let padded = [h + pt + pb, w + pl + pr];
        if padded[0] < span(0) || padded[1] < span(1) {
            return None;
        }
        let out: [usize; 2] = core::array::from_fn(|i| (padded[i] - span(i)) / s[i] + 1);
        let (channels, planes) = (2, 4);
        let window = Window {
            in_dims: &[h, w],
            out_dims: &out,
            kernel: &k,
            strides: &s,
            dilations: &d,
            pads_begin: &[pt, pl],
            pads_end: &[pb, pr],
        };
        let p = Conv { batch: 2, in_channels: channels, out_channels: channels, groups: 2, window };
        let (xl, wl, yl) = (planes * h * w, channels * k[0] * k[1], planes * out[0] * out[1]);
        let mut x = vec![0.0f32; xl];
        let mut wt = vec![0.0f32; wl];
        let mut b = [0.0f32; 2];
        values(&mut x, (h * 41 + w) as u32);
        values(&mut wt, (k[0] * 7 + k[1]) as u32);
        values(&mut b, 9);
        let bias = with_bias.then_some(&b[..]);
        let (mut want, mut got) = (vec![0.0f32; yl], vec![7.0f32; yl + 1]);
        conv(&p, &x[..xl], &wt[..wl], bias, &mut want[..yl]).unwrap();
        act.0.apply_all(&mut want[..yl]);
        if let Some(s) = act.1 {
            for v in &mut want[..yl] {
                *v = s.apply(*v);
            }
        }
        let g = Geom2d::of(&p.window).unwrap();
        if !kernel(&g, channels, &x[..xl], &wt[..wl], bias, act, &mut got[..yl]) {
            assert!(got.iter().all(|&v| v == 7.0), "declined after writing");
            return Some(false);
        }
        for (i, (g, e)) in got[..yl].iter().zip(&want[..yl]).enumerate() {
            assert!(
                (g - e).abs() <= 1e-5 * (1.0 + e.abs()),
                "{h}x{w} k {k:?} s {s:?} d {d:?} pads {:?} {act:?} [{i}]: {g} vs {e}",
                [pt, pl, pb, pr]
            );
        }
        assert_eq!(got[yl], 7.0, "wrote past the output");
        Some(true)
    }

    /// Every kernel on awkward shapes: widths 1..40, heights 1..12, odd and
    /// asymmetric pads, strides 1 and 2, dilation 2, 3x3, 5x5, 7x7 and 1x3
    /// kernels, with and without bias, through each activation. Returns
    /// how many geometries the kernel took.
    fn sweep(kernel: Kernel<'_>) -> usize {
        let acts: [Act; 6] = [
            (Activation::None, None),
            (Activation::Relu, None),
            (Activation::LeakyRelu { alpha: 0.125 }, None),
            (Activation::Clip { min: -0.5, max: 0.25 }, None),
            (Activation::None, Some(Smooth::Silu)),
            (Activation::Relu, Some(Smooth::Gelu)),
        ];
        let mut taken = 0;
        let mut t = 0usize;
        for k in [[3, 3], [5, 5], [7, 7], [1, 3]] {
            for s in [[1, 1], [2, 2], [2, 1], [1, 2]] {
                for d in [[1, 1], [2, 2]] {
                    for pads in [
                        [1, 1, 1, 1],
                        [0, 0, 0, 0],
                        [2, 2, 2, 2],
                        [0, 2, 1, 0],
                        [2, 1, 0, 2],
                        [3, 3, 3, 3],
                    ] {
                        for h in [1, 2, 3, 5, 12] {
                            for w in 1..=40 {
                                t += 1;
                                let act = acts[t % 6];
                                if check(kernel, [h, w], k, s, d, pads, act, !t.is_multiple_of(3))
                                    == Some(true)
                                {
                                    taken += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        taken
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx512_depthwise_matches_exact_conv() {
        if let Some(cpu) = crate::simd::tests::avx512() {
            // Blocks of 30 outputs: a block of one channel when planes are
            // larger, so every block boundary is crossed.
            let taken = sweep(&|g, c, x, w, b, a, y| {
                by_blocks(g, c, x, w, b, a.1, 30, y, |c, x, w, b, y| {
                    crate::simd::conv::depthwise::avx512::depthwise(cpu, g, c, x, w, b, a.0, y)
                })
            });
            // Every geometry has a horizontal stride of 1 or 2: all are taken.
            assert!(taken > 10_000, "{taken}");
        }
    }

    /// Planes of more than 1024 outputs: the flat loops compute their
    /// masks in blocks of 64 vectors, so these cross block boundaries; and
    /// stride 2 on them (several blocks of sixteen per output row).
    fn large(kernel: Kernel<'_>) -> usize {
        let mut taken = 0;
        for (h, w) in [(26, 40), (40, 40), (33, 37), (40, 31)] {
            for pads in [[1, 1, 1, 1], [0, 2, 1, 0], [2, 0, 0, 2], [3, 3, 3, 3]] {
                for d in [[1, 1], [2, 1]] {
                    for (k, s) in [(3, 1), (5, 1), (7, 1), (3, 2), (5, 2)] {
                        let act = if s == 2 {
                            (Activation::Relu, Some(Smooth::Silu))
                        } else {
                            (Activation::LeakyRelu { alpha: 0.25 }, None)
                        };
                        if check(kernel, [h, w], [k, k], [s, s], d, pads, act, true) == Some(true) {
                            taken += 1;
                        }
                    }
                }
            }
        }
        taken
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx512_depthwise_on_large_planes() {
        if let Some(cpu) = crate::simd::tests::avx512() {
            let taken = large(&|g, c, x, w, b, a, y| {
                by_blocks(g, c, x, w, b, a.1, BLOCK, y, |c, x, w, b, y| {
                    crate::simd::conv::depthwise::avx512::depthwise(cpu, g, c, x, w, b, a.0, y)
                })
            });
            assert_eq!(taken, 160);
        }
    }

    /// The AVX2 kernel through [`by_blocks`] (blocks of `block` outputs),
    /// with `room` floats of its staging buffer.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[allow(clippy::too_many_arguments)]
    fn avx2_in(
        cpu: crate::simd::isa::avx2::Avx2,
        room: usize,
        block: usize,
        g: &Geom2d,
        c: usize,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        a: Act,
        y: &mut [f32],
    ) -> bool {
        by_blocks(g, c, x, w, b, a.1, block, y, |c, x, w, b, y| {
            avx2::depthwise_in(cpu, g, c, x, w, b, a.0, y, room)
        })
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx2_depthwise_matches_exact_conv() {
        if let Some(cpu) = crate::simd::tests::avx2() {
            // Blocks of 30 outputs, as for AVX-512.
            let taken =
                sweep(&|g, c, x, w, b, a, y| avx2_in(cpu, avx2::STAGE, 30, g, c, x, w, b, a, y));
            assert!(taken > 10_000, "{taken}");
        }
    }

    /// The staged path with little room: bands of a few rows (down to
    /// one), so the sweep's planes cross band boundaries, end bands shorter
    /// than a tile, and, with the least room, the widest rows fall back to
    /// the masked path.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx2_depthwise_across_bands() {
        if let Some(cpu) = crate::simd::tests::avx2() {
            for room in [100, 250, 600] {
                let taken =
                    sweep(&|g, c, x, w, b, a, y| avx2_in(cpu, room, 1 << 20, g, c, x, w, b, a, y));
                assert!(taken > 10_000, "{taken}");
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx2_depthwise_on_large_planes() {
        if let Some(cpu) = crate::simd::tests::avx2() {
            let taken =
                large(&|g, c, x, w, b, a, y| avx2_in(cpu, avx2::STAGE, BLOCK, g, c, x, w, b, a, y));
            assert_eq!(taken, 160);
            // Planes taller and wider than a band of the full buffer: rows
            // of 112 and 150 floats, several bands per plane.
            let relu = (Activation::Relu, None);
            let silu = (Activation::None, Some(Smooth::Silu));
            let kernel: Kernel<'_> =
                &|g, c, x, w, b, a, y| avx2_in(cpu, avx2::STAGE, BLOCK, g, c, x, w, b, a, y);
            for (h, w) in [(70, 112), (45, 150), (61, 57)] {
                for k in [3, 5, 7] {
                    for s in [1, 2] {
                        let p = k / 2;
                        for (pads, act) in [([p, p, p, p], silu), ([0, 1, p, 0], relu)] {
                            let r = check(kernel, [h, w], [k, k], [s, s], [1, 1], pads, act, true);
                            assert_eq!(r, Some(true), "{h}x{w} k {k} s {s}");
                        }
                    }
                }
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn dispatch_declines_unhandled_geometry() {
        // Horizontal stride 3: neither kernel takes it, nothing is written.
        let dispatch: Kernel<'_> = &|g, c, x, w, b, a, y| depthwise(g, c, x, w, b, a.0, a.1, y);
        let relu = (Activation::Relu, None);
        let r = check(dispatch, [5, 9], [3, 3], [1, 3], [1, 1], [1, 1, 1, 1], relu, true);
        assert_eq!(r, Some(false));
        // A flat plane (stride 1, same width) and a stride-2 one are taken.
        for s in [[1, 1], [2, 2]] {
            let silu = (Activation::None, Some(Smooth::Silu));
            let r = check(dispatch, [5, 9], [3, 3], s, [1, 1], [1, 1, 1, 1], silu, true);
            assert_eq!(r, Some(crate::simd::isa::avx2::Avx2::detect().is_some()));
        }
    }

    /// The kernel without a vector unit on [`portable::depthwise_3x3`]'s
    /// geometries (it declines the others, and smooth activations).
    fn portable_3x3(
        g: &Geom2d,
        c: usize,
        x: &[f32],
        w: &[f32],
        b: Option<&[f32]>,
        a: Act,
        y: &mut [f32],
    ) -> bool {
        a.1.is_none() && portable::depthwise_3x3(g, c, x, w, b, a.0, y)
    }

    #[test]
    fn portable_depthwise_matches_exact_conv() {
        // 3x3, strides (1, 1) and (2, 2), dilation 1, pads up to 2, no
        // smooth activation: 2 of 4 strides x 1 of 2 dilations x 5 of 6
        // pads x 200 shapes x 4 of 6 activations.
        let taken = sweep(&portable_3x3);
        assert!(taken > 1_000, "{taken}");
        // Planes staged in several bands (rows of 40 and more: 19 output
        // rows or fewer per band at stride 1, 11 at stride 2): `large`'s
        // 3x3 stride-1 cases of dilation 1 and pads up to 2, then stride 2.
        assert_eq!(large(&portable_3x3), 12);
        let relu = (Activation::Relu, None);
        for (h, w) in [(40, 40), (33, 37), (26, 40)] {
            for pads in [[1, 1, 1, 1], [0, 2, 1, 0], [2, 0, 0, 2], [0, 0, 0, 0]] {
                let r = check(&portable_3x3, [h, w], [3, 3], [2, 2], [1, 1], pads, relu, true);
                assert_eq!(r, Some(true), "{h}x{w} {pads:?}");
            }
        }
    }
}
