//! The depthwise 3x3 kernel for cores without a vector unit (Cortex-M):
//! the input planes staged a band of rows at a time with their zero
//! padding, so every output is nine multiply-adds from three staged rows
//! with no bounds or padding test, the nine weights, the bias and the
//! activation held across the plane. Taps are added in row-major order
//! from zero, then the bias, as `conv::depthwise_plane_staged` does (a tap
//! in the padding adds `w * 0.0`, exact for the finite weights the caller
//! checked); on Arm FPUs with fused multiply-add the rows run in
//! `depthwise::arm`, each tap one rounding.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;

/// Floats of the staging buffer (4 KiB of stack): a band of padded rows.
const STAGE: usize = 1024;

/// Every plane of a 3x3 depthwise layer of stride 1 or 2 (both ways) and
/// dilation 1: plane `p` of `x` with kernel `p % channels` of `w` and the
/// same entry of `bias` gives plane `p` of `y`, through `act`. Returns
/// `false`, writing nothing, for other geometries, slices that do not hold
/// whole planes, or rows too wide to stage three of them.
#[cfg_attr(
    any(
        all(target_arch = "x86_64", target_feature = "sse2"),
        target_arch = "x86",
        target_arch = "aarch64"
    ),
    allow(dead_code)
)]
pub(crate) fn depthwise_3x3(
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    let s = g.sx;
    if g.kh != 3 || g.kw != 3 || g.dy != 1 || g.dx != 1 || g.sy != s || !(1..=2).contains(&s) {
        return false;
    }
    if g.oh == 0 || g.ow == 0 || g.h == 0 || g.w == 0 || channels == 0 || g.pt > 2 || g.pl > 2 {
        return false;
    }
    // Staged rows: `wp` wide, input column `c` at `c + pl`.
    let Some(wp) = (g.ow - 1).checked_mul(s).and_then(|v| v.checked_add(3)) else { return false };
    // Output rows per band: the band's `(band - 1) * s + 3` rows fit.
    let band = match (STAGE / wp).checked_sub(3) {
        Some(extra) if extra >= s => extra / s + 1,
        _ => return false,
    };
    let (Some(hw), Some(n)) = (g.h.checked_mul(g.w), g.oh.checked_mul(g.ow)) else { return false };
    let planes = y.len() / n;
    if y.len() != planes * n
        || Some(x.len()) != planes.checked_mul(hw)
        || Some(w.len()) != channels.checked_mul(9)
        || bias.is_some_and(|b| b.len() != channels)
    {
        return false;
    }
    let mut buf = [0.0f32; STAGE];
    // Rows in fused multiply-adds on Arm FPUs that have them, unless capped.
    #[cfg(onnx_codegen_arm_fma)]
    let fused = crate::simd::gemm::micro::arm::fma_allowed();
    for (p, (yp, xp)) in y.chunks_exact_mut(n).zip(x.chunks_exact(hw)).enumerate() {
        let c = p % channels;
        let Some(wk) = w.get(c * 9..c * 9 + 9).and_then(|v| <&[f32; 9]>::try_from(v).ok()) else {
            return false;
        };
        let b = bias.and_then(|b| b.get(c)).copied().unwrap_or(0.0);
        let mut oy0 = 0;
        while oy0 < g.oh {
            let rows = band.min(g.oh - oy0);
            let staged = (rows - 1) * s + 3;
            stage(g, xp, oy0 * s, staged, wp, &mut buf);
            for (r, yrow) in yp.chunks_exact_mut(g.ow).skip(oy0).take(rows).enumerate() {
                let at = r * s * wp;
                let (Some(r0), Some(r1), Some(r2)) = (
                    buf.get(at..at + wp),
                    buf.get(at + wp..at + 2 * wp),
                    buf.get(at + 2 * wp..at + 3 * wp),
                ) else {
                    return false;
                };
                #[cfg(onnx_codegen_arm_fma)]
                if fused {
                    if s == 1 {
                        super::arm::row::<1>(wk, b, [r0, r1, r2], yrow);
                    } else {
                        super::arm::row::<2>(wk, b, [r0, r1, r2], yrow);
                    }
                    activate(act, yrow);
                    continue;
                }
                if s == 1 {
                    row::<1>(wk, b, act, [r0, r1, r2], yrow);
                } else {
                    row::<2>(wk, b, act, [r0, r1, r2], yrow);
                }
            }
            oy0 += rows;
        }
    }
    true
}

/// Stages `count` padded rows from the padded row `top` on (input row
/// `top - pt`) into `buf`, `wp` floats each, whose columns outside the
/// input (`..pl` and `pl + w..`) are zero already and stay so: only the
/// input's columns are written, zeros on the rows of padding.
#[inline(always)]
fn stage(g: &Geom2d, x: &[f32], top: usize, count: usize, wp: usize, buf: &mut [f32]) {
    // Input columns inside a staged row: `pl..c_hi`.
    let c_hi = (g.w + g.pl).min(wp);
    for (r, dst) in buf.chunks_exact_mut(wp).take(count).enumerate() {
        let Some(mid) = dst.get_mut(g.pl..c_hi) else { continue };
        let iy = (top + r).checked_sub(g.pt).filter(|&iy| iy < g.h);
        match iy.and_then(|iy| x.get(iy * g.w..iy * g.w + mid.len())) {
            Some(src) => copy(mid, src),
            None => copy(mid, &[]),
        }
    }
}

/// `dst = src` (`src` as long), or zeros when `src` is empty: four floats
/// at a time and the last few one by one, so that a short row (a few
/// columns) is not a library call.
#[inline(always)]
fn copy(dst: &mut [f32], src: &[f32]) {
    let (blocks, rest) = dst.as_chunks_mut::<4>();
    if src.is_empty() {
        for d in blocks {
            *d = [0.0; 4];
        }
        match rest {
            [a] => *a = 0.0,
            [a, b] => (*a, *b) = (0.0, 0.0),
            [a, b, c] => (*a, *b, *c) = (0.0, 0.0, 0.0),
            _ => {}
        }
        return;
    }
    let (from, tail) = src.as_chunks::<4>();
    for (d, s) in blocks.iter_mut().zip(from) {
        *d = *s;
    }
    match (rest, tail) {
        ([a], [x]) => *a = *x,
        ([a, b], [x, y]) => (*a, *b) = (*x, *y),
        ([a, b, c], [x, y, z]) => (*a, *b, *c) = (*x, *y, *z),
        _ => {}
    }
}

/// One output row from its three staged input rows, stride `S`.
#[inline(always)]
fn row<const S: usize>(wk: &[f32; 9], bias: f32, act: Activation, r: [&[f32]; 3], y: &mut [f32]) {
    let [w00, w01, w02, w10, w11, w12, w20, w21, w22] = *wk;
    for (ox, v) in y.iter_mut().enumerate() {
        let c = ox * S;
        let (Some(a), Some(b), Some(d)) =
            (r[0].get(c..c + 3), r[1].get(c..c + 3), r[2].get(c..c + 3))
        else {
            return;
        };
        let mut sum = 0.0f32;
        sum += w00 * a[0];
        sum += w01 * a[1];
        sum += w02 * a[2];
        sum += w10 * b[0];
        sum += w11 * b[1];
        sum += w12 * b[2];
        sum += w20 * d[0];
        sum += w21 * d[1];
        sum += w22 * d[2];
        *v = act.apply(sum + bias);
    }
}

/// `act` on every value of `y`, the match outside the loop.
#[cfg_attr(not(onnx_codegen_arm_fma), allow(dead_code))]
#[inline(always)]
fn activate(act: Activation, y: &mut [f32]) {
    match act {
        Activation::None => {}
        Activation::Relu => {
            for v in y {
                *v = Activation::Relu.apply(*v);
            }
        }
        a => {
            for v in y {
                *v = a.apply(*v);
            }
        }
    }
}
