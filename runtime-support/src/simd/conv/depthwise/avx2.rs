//! AVX2+FMA depthwise convolution of one 2-D plane, straight from the input:
//! eight output columns per vector, taps read with masked loads at the
//! borders and plain loads inside (no staging copy, no padding tests per
//! tap), stride 1 or 2, the bias and the fused activation applied before
//! the store.
//!
//! Soundness rests on two things: an [`Avx2`] value exists only on a CPU
//! with AVX2 and FMA, and [`depthwise_plane`] checks the plane, kernel and
//! output lengths and that every coordinate fits an `i32` before the
//! unsafe loop. Inside it, every load reads input row `iy < h` with a mask
//! that keeps only the lanes whose column is inside `0..w` (masked lanes
//! are never accessed and read as zero), or with a plain load for a block
//! whose masks keep every lane; every store writes output row `oy < oh`
//! with a mask that keeps the columns below `ow`.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx2::{Avx2, lanes_in_row, store_lanes};
use core::arch::x86_64::{
    __m256, __m256i, _CMP_LT_OQ, _mm256_add_ps, _mm256_blendv_ps, _mm256_broadcast_ss,
    _mm256_castpd_ps, _mm256_castps_pd, _mm256_castsi256_ps, _mm256_cmp_ps, _mm256_cmpgt_epi32,
    _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_maskload_ps, _mm256_max_ps, _mm256_min_ps,
    _mm256_movemask_ps, _mm256_mul_ps, _mm256_permute4x64_pd, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi32, _mm256_setzero_ps, _mm256_setzero_si256, _mm256_shuffle_ps,
};

/// The widest kernel row handled (one load mask per kernel column).
const MAX_KW: usize = 16;

/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// over the taps inside the input, with fused multiply-adds in row-major
/// tap order (kernel row `ky` into sum `ky % 4`). Returns `false`, writing
/// nothing, when the geometry is not handled here (a horizontal stride
/// other than 1 or 2, sizes that do not fit the slices or an `i32`).
pub(crate) fn depthwise_plane(
    _cpu: Avx2,
    g: &Geom2d,
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
    if g.kw > MAX_KW {
        return false;
    }
    let (x, y) = (x.as_ptr(), y.as_mut_ptr());
    let k3 = g.kh == 3 && g.kw == 3;
    // One instance per stride, 3x3-or-not and activation, so the inner loops
    // carry no tests that do not change.
    macro_rules! run {
        ($s:literal, $k3:literal) => {
            // SAFETY: `_cpu` proves AVX2 and FMA; the lengths were checked
            // above and the loop keeps the bounds described in the module docs.
            unsafe {
                match act {
                    Activation::None => plane::<$s, $k3, 0>(g, x, wk, bias, 0.0, 0.0, y),
                    Activation::Relu => plane::<$s, $k3, 1>(g, x, wk, bias, 0.0, 0.0, y),
                    Activation::LeakyRelu { alpha } => {
                        plane::<$s, $k3, 2>(g, x, wk, bias, alpha, 0.0, y)
                    }
                    Activation::Clip { min, max } => {
                        plane::<$s, $k3, 3>(g, x, wk, bias, min, max, y)
                    }
                }
            }
        };
    }
    match (g.sx, k3) {
        (1, true) => run!(1, true),
        (1, false) => run!(1, false),
        (_, true) => run!(2, true),
        (_, false) => run!(2, false),
    }
    true
}

/// The fused activation of eight sums (`ACT`: 0 none, 1 Relu, 2 LeakyRelu
/// with slope `a`, 3 Clip to `a..=b`), with the same comparisons as
/// [`Activation::apply`] (NaN passes through `Relu` and `Clip`).
#[inline]
#[target_feature(enable = "avx2,fma")]
fn activate<const ACT: u8>(v: __m256, a: f32, b: f32) -> __m256 {
    match ACT {
        0 => v,
        // max_ps(p, q) is `p > q ? p : q`: `0 > v ? 0 : v`.
        1 => _mm256_max_ps(_mm256_setzero_ps(), v),
        2 => {
            let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, _mm256_setzero_ps());
            _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(a)), neg)
        }
        _ => _mm256_min_ps(_mm256_set1_ps(b), _mm256_max_ps(_mm256_set1_ps(a), v)),
    }
}

/// See [`depthwise_plane`], which checked the bounds. `S` is the
/// horizontal stride (1 or 2), `K3` says the kernel is 3x3 (weights then
/// stay in registers), `ACT` picks the activation for [`activate`].
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn plane<const S: usize, const K3: bool, const ACT: u8>(
    g: &Geom2d,
    x: *const f32,
    wk: &[f32],
    bias: f32,
    a: f32,
    b: f32,
    y: *mut f32,
) {
    let (kh, kw) = if K3 { (3, 3) } else { (g.kh, g.kw) };
    let w = g.w as i32;
    let bv = _mm256_set1_ps(bias);
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let mut w3 = [_mm256_setzero_ps(); 9];
    if K3 {
        for (v, &s) in w3.iter_mut().zip(wk) {
            *v = _mm256_set1_ps(s);
        }
    }
    let none = _mm256_setzero_si256();
    let mut ox0 = 0;
    while ox0 < g.ow {
        // Load masks per kernel column for this block of eight outputs:
        // lanes whose input column lies inside the row (all of them in the
        // interior). With stride 2 each output vector takes two loads.
        let mut lo = [none; MAX_KW];
        let mut hi = [none; MAX_KW];
        for kx in 0..kw {
            let base = (ox0 * S + kx * g.dx) as i32 - g.pl as i32;
            lo[kx] = lanes_in_row(base, w);
            if S == 2 {
                hi[kx] = lanes_in_row(base + 8, w);
            }
        }
        let keep = _mm256_cmpgt_epi32(_mm256_set1_epi32((g.ow - ox0).min(8) as i32), lane);
        let col = (ox0 * S) as isize - g.pl as isize;
        // Every lane of every mask set (the interior): plain loads.
        let all = |m: __m256i| _mm256_movemask_ps(_mm256_castsi256_ps(m)) == 0xFF;
        let full = ox0 + 8 <= g.ow
            && lo[..kw].iter().all(|&m| all(m))
            && (S == 1 || hi[..kw].iter().all(|&m| all(m)));
        // The rows of this block, with `$load(p, kx)` reading the eight
        // input values of kernel column kx from `p`.
        macro_rules! rows {
            ($load:expr) => {
                for oy in 0..g.oh {
                    let top = oy * g.sy;
                    // Kernel rows in turn into four sums: four independent
                    // chains of multiply-adds instead of one.
                    let mut acc = [_mm256_setzero_ps(); 4];
                    for ky in 0..kh {
                        let iy = (top + ky * g.dy).wrapping_sub(g.pt);
                        if iy >= g.h {
                            continue;
                        }
                        // The input row iy < h; the loads keep to its columns.
                        let row = x.wrapping_add(iy * g.w).wrapping_offset(col);
                        for kx in 0..kw {
                            let v = $load(row.wrapping_add(kx * g.dx), kx);
                            let wt = if K3 {
                                w3[ky * 3 + kx]
                            } else {
                                _mm256_broadcast_ss(&wk[ky * kw + kx])
                            };
                            acc[ky % 4] = _mm256_fmadd_ps(v, wt, acc[ky % 4]);
                        }
                    }
                    let sum = _mm256_add_ps(
                        _mm256_add_ps(acc[0], acc[1]),
                        _mm256_add_ps(acc[2], _mm256_add_ps(acc[3], bv)),
                    );
                    let out = activate::<ACT>(sum, a, b);
                    // SAFETY: output row oy < oh; the mask keeps columns below ow.
                    unsafe { store_lanes(y.add(oy * g.ow + ox0), keep, out) };
                }
            };
        }
        // Even elements of two vectors: [l0 l2 h0 h2 | l4 l6 h4 h6], then
        // the middle 64-bit pairs swapped into column order.
        let evens = |l: __m256, h: __m256| {
            let even = _mm256_shuffle_ps::<0b10_00_10_00>(l, h);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(even)))
        };
        if full {
            // SAFETY: every mask of this block keeps all lanes, so each
            // plain load reads only columns inside row iy.
            rows!(|p: *const f32, _kx: usize| unsafe {
                if S == 1 {
                    _mm256_loadu_ps(p)
                } else {
                    evens(_mm256_loadu_ps(p), _mm256_loadu_ps(p.wrapping_add(8)))
                }
            });
        } else {
            // SAFETY: masked loads touch only lanes inside row iy.
            rows!(|p: *const f32, kx: usize| unsafe {
                if S == 1 {
                    _mm256_maskload_ps(p, lo[kx])
                } else {
                    evens(
                        _mm256_maskload_ps(p, lo[kx]),
                        _mm256_maskload_ps(p.wrapping_add(8), hi[kx]),
                    )
                }
            });
        }
        ox0 += 8;
    }
}
