//! The aarch64 NEON depthwise convolution: one plane at a time, eight
//! output columns per step (see [`depthwise_plane`]).
//!
//! NEON is part of every aarch64 target this module is compiled for (the
//! `mod` line asks for `target_feature = "neon"` at compile time); the
//! caller holds a [`Neon`] token, which the ISA cap can withhold.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::neon::{Neon, activate, store_part};
use core::arch::aarch64::{float32x4_t, vaddq_f32, vdupq_n_f32, vfmaq_f32, vld1q_f32, vld2q_f32};

/// The widest kernel row [`depthwise_plane`] handles (one lane range per
/// kernel column).
const DW_MAX_KW: usize = 16;

/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// on NEON, eight output columns (two vectors) at a time, with fused
/// multiply-adds in row-major tap order. Taps in padding rows are skipped;
/// taps in padding columns read zero (so the weights must be finite, which
/// the caller checks). Blocks whose taps all fall inside the row use plain
/// loads (`ld2` de-interleaves stride 2); border blocks copy their valid
/// lanes to a zeroed stack buffer. Returns `false`, writing nothing, when
/// the geometry is not handled here (a horizontal stride other than 1 or 2,
/// a kernel row wider than 16, sizes that do not fit the slices).
pub(crate) fn depthwise_plane(
    _cpu: Neon,
    g: &Geom2d,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) -> bool {
    const LIM: usize = 1 << 24;
    let dims = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pt, g.pl];
    // The index arithmetic below relies on products of two dims fitting.
    if usize::BITS < 64 || dims.iter().any(|&d| d >= LIM) {
        return false;
    }
    if !(1..=2).contains(&g.sx) || g.sy == 0 {
        return false;
    }
    if g.kh == 0 || g.kw == 0 || g.kw > DW_MAX_KW {
        return false;
    }
    // With every dim below 2^24, the products below stay far from overflow.
    if x.len() != g.h * g.w || y.len() != g.oh * g.ow || wk.len() != g.kh * g.kw {
        return false;
    }
    if g.ow == 0 || g.oh == 0 {
        return true;
    }
    let k3 = g.kh == 3 && g.kw == 3;
    // SAFETY: NEON is present (module invariant); the lengths were checked
    // above, and `dw_plane` keeps the bounds it documents.
    unsafe {
        match (g.sx, k3) {
            (1, true) => dw_plane::<1, true>(g, x, wk, bias, act, y),
            (1, false) => dw_plane::<1, false>(g, x, wk, bias, act, y),
            (_, true) => dw_plane::<2, true>(g, x, wk, bias, act, y),
            (_, false) => dw_plane::<2, false>(g, x, wk, bias, act, y),
        }
    }
    true
}

/// See [`depthwise_plane`], which checked `x.len() == h * w`,
/// `y.len() == oh * ow`, `wk.len() == kh * kw`, `kw <= 16` and every
/// dimension below 2^24. `S` is the horizontal stride, `K3` says the kernel
/// is 3x3 (its weights then stay in registers).
///
/// Unsafe accesses: a plain load of block `ox0` and kernel column `kx` in
/// input row `iy < h` reads columns `c0..c0 + 8 * S` with
/// `0 <= c0 = ox0 * S + kx * dx - pl` and `c0 + 8 * S <= w` (checked per
/// block), so inside row `iy`; stores write output row `oy < oh` at
/// columns `ox0..min(ox0 + 8, ow)`.
#[target_feature(enable = "neon")]
unsafe fn dw_plane<const S: usize, const K3: bool>(
    g: &Geom2d,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) {
    let (kh, kw) = if K3 { (3, 3) } else { (g.kh, g.kw) };
    let w = g.w as isize;
    let zero = vdupq_n_f32(0.0);
    let bv = vdupq_n_f32(bias);
    let mut w3 = [zero; 9];
    if K3 {
        for (v, &s) in w3.iter_mut().zip(wk) {
            *v = vdupq_n_f32(s);
        }
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let mut ox0 = 0;
    while ox0 < g.ow {
        let col = (ox0 * S) as isize - g.pl as isize;
        // Per kernel column, the lanes `lo..hi` of this block whose input
        // column `c0 + l * S` lies inside the row (all eight inside it).
        let mut lanes = [(0usize, 0usize); DW_MAX_KW];
        for (kx, r) in lanes.iter_mut().enumerate().take(kw) {
            let c0 = col + (kx * g.dx) as isize;
            let s = S as isize;
            let lo = if c0 >= 0 { 0 } else { (-c0 + s - 1) / s };
            let hi = if c0 >= w { 0 } else { (w - c0 + s - 1) / s };
            *r = (lo.min(8) as usize, hi.min(8) as usize);
        }
        let full = (0..kw).all(|kx| {
            let c0 = col + (kx * g.dx) as isize;
            c0 >= 0 && c0 + 8 * S as isize <= w
        });
        let n = (g.ow - ox0).min(8);
        for oy in 0..g.oh {
            let mut acc = [zero; 2];
            for ky in 0..kh {
                let Some(iy) = (oy * g.sy + ky * g.dy).checked_sub(g.pt) else { continue };
                if iy >= g.h {
                    continue;
                }
                for kx in 0..kw {
                    let c0 = col + (kx * g.dx) as isize;
                    let v: [float32x4_t; 2] = if full {
                        // SAFETY: a plain load inside row `iy` (see above).
                        unsafe {
                            let p = xp.add(iy * g.w).offset(c0);
                            if S == 1 {
                                [vld1q_f32(p), vld1q_f32(p.add(4))]
                            } else {
                                [vld2q_f32(p).0, vld2q_f32(p.add(8)).0]
                            }
                        }
                    } else {
                        let (lo, hi) = lanes[kx];
                        let mut t = [0.0f32; 8];
                        let row = x.get(iy * g.w..(iy + 1) * g.w).unwrap_or(&[]);
                        for (l, v) in t.iter_mut().enumerate().take(hi).skip(lo) {
                            let ix = (c0 + (l * S) as isize) as usize;
                            *v = row.get(ix).copied().unwrap_or(0.0);
                        }
                        // SAFETY: `t` holds eight floats.
                        unsafe { [vld1q_f32(t.as_ptr()), vld1q_f32(t.as_ptr().add(4))] }
                    };
                    let wt = if K3 {
                        w3[ky * 3 + kx]
                    } else {
                        vdupq_n_f32(wk.get(ky * kw + kx).copied().unwrap_or(0.0))
                    };
                    acc[0] = vfmaq_f32(acc[0], v[0], wt);
                    acc[1] = vfmaq_f32(acc[1], v[1], wt);
                }
            }
            let out = [activate(vaddq_f32(acc[0], bv), act), activate(vaddq_f32(acc[1], bv), act)];
            // SAFETY: output row `oy < oh`, columns `ox0..ox0 + n` with
            // `ox0 + n <= ow`.
            unsafe {
                let p = yp.add(oy * g.ow + ox0);
                store_part(p, out[0], n);
                if n > 4 {
                    store_part(p.add(4), out[1], n - 4);
                }
            }
        }
        ox0 += 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The depthwise plane against a plain loop over every tap inside the
    /// input, on awkward geometries: widths around the 8-column block,
    /// strides 1 and 2, dilation, asymmetric pads, 3x3 and other kernels,
    /// every activation, values of both signs.
    #[test]
    fn depthwise_plane_matches_plain_taps() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        use crate::simd::conv::depthwise::Geom2d;
        let mut x = [0.0f32; 7 * 40];
        let mut wk = [0.0f32; 25];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 37) % 29) as f32 / 8.0 - 1.75;
        }
        for (i, v) in wk.iter_mut().enumerate() {
            *v = ((i * 11) % 7) as f32 / 4.0 - 0.5;
        }
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.25 },
            Activation::Clip { min: -1.0, max: 1.5 },
        ];
        let mut case = 0;
        for h in [1, 3, 7] {
            for w in [1, 2, 5, 8, 9, 16, 17, 23, 40] {
                for (kh, kw) in [(3, 3), (1, 1), (2, 5), (3, 1), (5, 3)] {
                    for (sy, sx) in [(1, 1), (2, 2), (1, 2), (3, 1)] {
                        for (dy, dx) in [(1, 1), (2, 2)] {
                            for (pt, pl, pb, pr) in [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 1, 3)] {
                                let (eh, ew) = (h + pt + pb, w + pl + pr);
                                let (rh, rw) = (dy * (kh - 1) + 1, dx * (kw - 1) + 1);
                                if eh < rh || ew < rw {
                                    continue;
                                }
                                let (oh, ow) = ((eh - rh) / sy + 1, (ew - rw) / sx + 1);
                                let g = Geom2d { h, w, oh, ow, kh, kw, sy, sx, dy, dx, pt, pl };
                                case += 1;
                                let act = acts[case % 4];
                                let bias = 0.375 - (case % 3) as f32;
                                let mut y = [f32::NAN; 1024];
                                let ok = depthwise_plane(
                                    cpu,
                                    &g,
                                    &x[..h * w],
                                    &wk[..kh * kw],
                                    bias,
                                    act,
                                    &mut y[..oh * ow],
                                );
                                assert!(ok, "case {case}: {g:?} not handled");
                                assert!(y[oh * ow..].iter().all(|v| v.is_nan()));
                                for oy in 0..oh {
                                    for ox in 0..ow {
                                        let mut s = 0.0f32;
                                        for ky in 0..kh {
                                            for kx in 0..kw {
                                                let iy = (oy * sy + ky * dy).wrapping_sub(pt);
                                                let ix = (ox * sx + kx * dx).wrapping_sub(pl);
                                                if iy < h && ix < w {
                                                    s += wk[ky * kw + kx] * x[iy * w + ix];
                                                }
                                            }
                                        }
                                        let want = act.apply(s + bias);
                                        let got = y[oy * ow + ox];
                                        assert!(
                                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                            "case {case} {g:?} {act:?} at ({oy}, {ox}): {got} vs {want}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // Stride 3 across, a kernel row wider than 16, or a short slice:
        // not handled, nothing written.
        let g = Geom2d {
            h: 2,
            w: 20,
            oh: 2,
            ow: 6,
            kh: 1,
            kw: 3,
            sy: 1,
            sx: 3,
            dy: 1,
            dx: 1,
            pt: 0,
            pl: 0,
        };
        let mut y = [f32::NAN; 12];
        assert!(!depthwise_plane(cpu, &g, &x[..40], &wk[..3], 0.0, Activation::None, &mut y));
        let g2 = Geom2d { sx: 1, ow: 18, ..g };
        let mut y2 = [f32::NAN; 36];
        assert!(!depthwise_plane(cpu, &g2, &x[..39], &wk[..3], 0.0, Activation::None, &mut y2));
        let g3 = Geom2d { kw: 17, w: 20, ow: 4, sx: 1, ..g };
        let mut y3 = [f32::NAN; 8];
        let wide = [0.5f32; 17];
        assert!(!depthwise_plane(cpu, &g3, &x[..40], &wide, 0.0, Activation::None, &mut y3));
        assert!(y.iter().chain(&y2).chain(&y3).all(|v| v.is_nan()));
    }
}
