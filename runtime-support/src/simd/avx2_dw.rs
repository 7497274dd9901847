//! AVX2+FMA depthwise convolution of one 2-D plane, straight from the input:
//! eight output columns per vector, taps read with masked loads at the
//! borders (no staging copy, no padding tests in the interior), stride 1
//! or 2, the bias and the fused activation applied before the store.
//!
//! Soundness rests on two things: an [`Avx2`] value exists only on a CPU
//! with AVX2 and FMA, and [`depthwise_plane`] checks the plane, kernel and
//! output lengths and that every coordinate fits an `i32` before the
//! unsafe loop. Inside it, every load reads input row `iy < h` at columns
//! that are either all inside `0..w` (plain load) or restricted to those by
//! the load mask; every store writes output row `oy < oh` at columns below
//! `ow`, masked for the last partial vector.

use super::Activation;
use super::avx2::Avx2;
use super::dw::DwGeom;
use core::arch::x86_64::{
    __m256, __m256i, _CMP_LT_OQ, _mm256_add_epi32, _mm256_add_ps, _mm256_and_si256,
    _mm256_blendv_ps, _mm256_broadcast_ss, _mm256_castpd_ps, _mm256_castps_pd, _mm256_cmp_ps,
    _mm256_cmpgt_epi32, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps, _mm256_maskstore_ps,
    _mm256_max_ps, _mm256_min_ps, _mm256_mul_ps, _mm256_permute4x64_pd, _mm256_set1_epi32,
    _mm256_set1_ps, _mm256_setr_epi32, _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_storeu_ps,
};

/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// over the taps inside the input, with fused multiply-adds in row-major
/// tap order. Returns `false`, writing nothing, when the geometry is not
/// handled here (a horizontal stride other than 1 or 2, sizes that do not
/// fit the slices or an `i32`).
pub(crate) fn depthwise_plane(
    _cpu: Avx2,
    g: &DwGeom,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) -> bool {
    const LIM: usize = 1 << 24;
    let dims = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pt, g.pl];
    if dims.iter().any(|&d| d >= LIM) || !(1..=2).contains(&g.sx) || g.sy == 0 {
        return false;
    }
    // With every dim below 2^24, products of two stay far below usize::MAX
    // on 64-bit targets; column positions must also fit an i32.
    let reach = (g.kw.saturating_sub(1)) * g.dx;
    if g.ow * g.sx + reach + g.pl + g.w + 16 >= i32::MAX as usize || g.kh == 0 || g.kw == 0 {
        return false;
    }
    if x.len() != g.h * g.w || y.len() != g.oh * g.ow || wk.len() != g.kh * g.kw {
        return false;
    }
    if g.ow == 0 || g.oh == 0 {
        return true;
    }
    // SAFETY: `_cpu` proves AVX2 and FMA; the lengths were checked above and
    // the loop keeps the bounds described in the module docs.
    unsafe { plane(g, x.as_ptr(), wk, bias, act, y.as_mut_ptr()) }
    true
}

/// The fused activation of eight sums, with the same comparisons as
/// [`Activation::apply`] (NaN passes through `Relu` and `Clip`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn activate(v: __m256, act: Activation) -> __m256 {
    match act {
        Activation::None => v,
        // max_ps(a, b) is `a > b ? a : b`: `0 > v ? 0 : v`.
        Activation::Relu => _mm256_max_ps(_mm256_setzero_ps(), v),
        Activation::LeakyRelu { alpha } => {
            let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, _mm256_setzero_ps());
            _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), neg)
        }
        Activation::Clip { min, max } => {
            _mm256_min_ps(_mm256_set1_ps(max), _mm256_max_ps(_mm256_set1_ps(min), v))
        }
    }
}

/// Lanes `l` with `0 <= base + l < w`, as a load mask.
#[inline]
#[target_feature(enable = "avx2,fma")]
fn in_row(base: i32, w: i32) -> __m256i {
    let idx = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(base));
    _mm256_and_si256(
        _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(w), idx),
    )
}

/// Eight input values for eight consecutive outputs, starting at column
/// `base` of `row`: `base + l * sx` for lane `l`, zero outside `0..w`.
///
/// # Safety
/// `row` points at an input row of `w` floats; when `full`, every column
/// read (`base .. base + 8 * sx`) lies inside it.
#[inline]
#[target_feature(enable = "avx2,fma")]
unsafe fn taps8(row: *const f32, base: i32, w: i32, sx: usize, full: bool) -> __m256 {
    let p = row.wrapping_offset(base as isize);
    // SAFETY: plain loads only when `full` (all columns inside the row);
    // masked loads touch only lanes whose column is inside the row.
    unsafe {
        if sx == 1 {
            if full { _mm256_loadu_ps(p) } else { _mm256_maskload_ps(p, in_row(base, w)) }
        } else {
            let (lo, hi) = if full {
                (_mm256_loadu_ps(p), _mm256_loadu_ps(p.wrapping_add(8)))
            } else {
                (
                    _mm256_maskload_ps(p, in_row(base, w)),
                    _mm256_maskload_ps(p.wrapping_add(8), in_row(base + 8, w)),
                )
            };
            // Even elements: [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the
            // middle 64-bit pairs swapped into column order.
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(even)))
        }
    }
}

/// See [`depthwise_plane`], which checked the bounds.
#[target_feature(enable = "avx2,fma")]
unsafe fn plane(g: &DwGeom, x: *const f32, wk: &[f32], bias: f32, act: Activation, y: *mut f32) {
    let w = g.w as i32;
    let b = _mm256_set1_ps(bias);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    // Full vectors whose every tap column lies inside the row: the first
    // column read is `ox0 * sx - pl >= 0`, the last `(ox0 + 8) * sx - 1 +
    // (kw - 1) * dx - pl < w`.
    let reach = (g.kw - 1) * g.dx;
    let ox_lo = g.pl.div_ceil(g.sx);
    let ox_hi = match (g.w + g.pl).checked_sub(reach + 8 * g.sx) {
        Some(room) => room / g.sx + 1,
        None => 0,
    };
    for oy in 0..g.oh {
        // Kernel rows whose input row is inside the plane.
        let top = oy * g.sy;
        let ky_lo = g.pt.saturating_sub(top).div_ceil(g.dy.max(1));
        let ky_hi = if top >= g.pt + g.h {
            0
        } else {
            ((g.pt + g.h - top).div_ceil(g.dy.max(1))).min(g.kh)
        };
        // SAFETY: `oy < oh` and the output has `oh * ow` floats.
        let yrow = unsafe { y.add(oy * g.ow) };
        let mut ox0 = 0;
        while ox0 < g.ow {
            let full = ox0 >= ox_lo && ox0 < ox_hi && ox0 + 8 <= g.ow;
            let mut acc = _mm256_setzero_ps();
            for ky in ky_lo..ky_hi {
                // top + ky * dy - pt is in 0..h for ky_lo <= ky < ky_hi.
                let iy = top + ky * g.dy - g.pt;
                // SAFETY: iy < h; the plane has h * w floats.
                let row = unsafe { x.add(iy * g.w) };
                let wrow = &wk[ky * g.kw..(ky + 1) * g.kw];
                for (kx, wv) in wrow.iter().enumerate() {
                    let base = (ox0 * g.sx + kx * g.dx) as i32 - g.pl as i32;
                    // SAFETY: `full` only when every column is inside the row.
                    let v = unsafe { taps8(row, base, w, g.sx, full) };
                    acc = _mm256_fmadd_ps(v, _mm256_broadcast_ss(wv), acc);
                }
            }
            let out = activate(_mm256_add_ps(acc, b), act);
            // SAFETY: columns ox0 .. ox0 + 8 are below ow for a full store,
            // and the mask keeps the partial one below ow.
            unsafe {
                let dst = yrow.add(ox0);
                if ox0 + 8 <= g.ow {
                    _mm256_storeu_ps(dst, out);
                } else {
                    let left = _mm256_set1_epi32((g.ow - ox0) as i32);
                    _mm256_maskstore_ps(dst, _mm256_cmpgt_epi32(left, lane), out);
                }
            }
            ox0 += 8;
        }
    }
}
