//! AVX2 transforms of Winograd's F(2x2, 3x3) (`crate::winograd`), for CPUs
//! without AVX-512: [`crate::simd::winograd::avx512`]'s steps on eight tiles at a
//! time. Even and odd columns are split with an in-lane shuffle and a
//! cross-lane permute; the two columns of each tile are interleaved back
//! with unpacks and a lane swap.
//!
//! The additions and subtractions are the portable transforms', in the
//! same order, and the activations the scalar comparisons as blends: the
//! results are bit for bit those of the portable code. Every load and
//! store is masked to the lanes inside its slice, or checked against the
//! slice before the loop.

use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx2::{Avx2, lanes_in_row};
use crate::simd::winograd::TileRows;
use core::arch::x86_64::{
    __m256, __m256i, _CMP_GT_OQ, _CMP_LT_OQ, _mm256_add_ps, _mm256_blendv_ps, _mm256_castpd_ps,
    _mm256_castps_pd, _mm256_cmp_ps, _mm256_maskload_ps, _mm256_maskstore_ps, _mm256_mul_ps,
    _mm256_permute2f128_ps, _mm256_permute4x64_pd, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_shuffle_ps, _mm256_sub_ps, _mm256_unpackhi_ps, _mm256_unpacklo_ps,
};

/// Tiles the transforms handle per step: one vector's lanes.
const T: usize = 8;

/// The lanes below `n` (all of them from 8 up), as a load/store mask.
#[inline]
#[target_feature(enable = "avx2")]
fn below(n: usize) -> __m256i {
    lanes_in_row(0, n.min(T) as i32)
}

/// The lanes `l` of a load at column `q` (from a row's start) whose columns
/// `q + l` fall inside a row of `w` floats, as a load mask.
#[inline]
#[target_feature(enable = "avx2")]
fn inside(q: isize, w: usize) -> __m256i {
    // Columns far outside the row clamp to just outside it (no lane in).
    let q = q.clamp(-16, (i32::MAX - 8) as isize) as i32;
    lanes_in_row(q, i32::try_from(w).unwrap_or(i32::MAX))
}

/// The even-indexed lanes of the 16 floats `lo` then `hi`.
#[inline]
#[target_feature(enable = "avx2")]
fn evens(lo: __m256, hi: __m256) -> __m256 {
    // [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6], then the middle 64-bit pairs swapped.
    let s = _mm256_shuffle_ps::<0x88>(lo, hi);
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(s)))
}

/// The odd-indexed lanes of the 16 floats `lo` then `hi`.
#[inline]
#[target_feature(enable = "avx2")]
fn odds(lo: __m256, hi: __m256) -> __m256 {
    let s = _mm256_shuffle_ps::<0xDD>(lo, hi);
    _mm256_castpd_ps(_mm256_permute4x64_pd::<0xD8>(_mm256_castps_pd(s)))
}

/// [`Activation::apply`] on 8 lanes: the same comparisons, as blends.
#[inline]
#[target_feature(enable = "avx2")]
fn activate(x: __m256, act: Activation) -> __m256 {
    match act {
        Activation::None => x,
        Activation::Relu => {
            let z = _mm256_setzero_ps();
            _mm256_blendv_ps(x, z, _mm256_cmp_ps::<_CMP_LT_OQ>(x, z))
        }
        Activation::LeakyRelu { alpha } => {
            let below = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_setzero_ps());
            _mm256_blendv_ps(x, _mm256_mul_ps(_mm256_set1_ps(alpha), x), below)
        }
        Activation::Clip { min, max } => {
            let (lo, hi) = (_mm256_set1_ps(min), _mm256_set1_ps(max));
            let v = _mm256_blendv_ps(x, lo, _mm256_cmp_ps::<_CMP_LT_OQ>(x, lo));
            _mm256_blendv_ps(v, hi, _mm256_cmp_ps::<_CMP_GT_OQ>(v, hi))
        }
    }
}

/// `V = Bᵀ d B` of `n` tiles of each of `channels` channels of `x` (see
/// [`TileRows`]): `V_xi` of channel `c`'s tile `j` goes to `v[xi * xs + c *
/// cs + at + j]`. Returns false (and writes nothing) when `x` or `v` does
/// not hold every index.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn input_tiles(
    cpu: Avx2,
    x: &[f32],
    src: TileRows,
    channels: usize,
    n: usize,
    v: &mut [f32],
    at: usize,
    [xs, cs]: [usize; 2],
) -> bool {
    if !src.input_fits(x.len(), channels, n, v.len(), at, [xs, cs]) {
        return false;
    }
    let _ = cpu;
    // SAFETY: `cpu` proves AVX2 is present; the bounds were checked above
    // (see `input_run`).
    unsafe { input_run(x.as_ptr(), src, channels, n, v.as_mut_ptr(), at, [xs, cs]) };
    true
}

/// The loop of [`input_tiles`]. The caller guarantees that `x` holds
/// `channels` planes, each row of `src` inside its plane (loads are masked
/// to the row's `w` floats), and that `v` holds `15 * xs + (channels - 1)
/// * cs + at + n` floats (stores are masked to the step's tiles below `n`).
#[target_feature(enable = "avx2")]
unsafe fn input_run(
    x: *const f32,
    src: TileRows,
    channels: usize,
    n: usize,
    v: *mut f32,
    at: usize,
    [xs, cs]: [usize; 2],
) {
    // The loads of each row, at columns `q`, `q + 8`, `q + 2`, `q + 10`.
    const OFFS: [isize; 4] = [0, 8, 2, 10];
    let mut j0 = 0;
    while j0 < n {
        let m = below(n - j0);
        let q = src.first + 2 * j0 as isize;
        // The lanes of each load inside its row, the same for every channel.
        let none = _mm256_set1_epi32(0);
        let masks: [[__m256i; 4]; 4] = core::array::from_fn(|r| match src.rows[r] {
            Some(_) => OFFS.map(|o| inside(q + o, src.w)),
            None => [none; 4],
        });
        let starts: [usize; 4] = src.rows.map(|r| r.unwrap_or(0));
        for c in 0..channels {
            let d: [[__m256; 4]; 4] = core::array::from_fn(|r| {
                let row = x.wrapping_add(c * src.plane + starts[r]);
                let [a, b, a2, b2] = core::array::from_fn(|i| {
                    // SAFETY: the mask keeps the lanes whose columns lie in
                    // the row's `w` floats, inside channel `c`'s plane; the
                    // others are not accessed.
                    unsafe { _mm256_maskload_ps(row.wrapping_offset(q + OFFS[i]), masks[r][i]) }
                });
                [evens(a, b), odds(a, b), evens(a2, b2), odds(a2, b2)]
            });
            let v = v.wrapping_add(c * cs);
            // Bᵀ d, a column at a time: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3.
            let t: [[__m256; 4]; 4] = core::array::from_fn(|col| {
                let (d0, d1, d2, d3) = (d[0][col], d[1][col], d[2][col], d[3][col]);
                [
                    _mm256_sub_ps(d0, d2),
                    _mm256_add_ps(d1, d2),
                    _mm256_sub_ps(d2, d1),
                    _mm256_sub_ps(d1, d3),
                ]
            });
            // Then B on each row `i`: a0 - a2, a1 + a2, a2 - a1, a1 - a3
            // of its columns.
            let [c0, c1, c2, c3] = t;
            for (i, (((a0, a1), a2), a3)) in c0.into_iter().zip(c1).zip(c2).zip(c3).enumerate() {
                let vals = [
                    _mm256_sub_ps(a0, a2),
                    _mm256_add_ps(a1, a2),
                    _mm256_sub_ps(a2, a1),
                    _mm256_sub_ps(a1, a3),
                ];
                for (k, val) in vals.into_iter().enumerate() {
                    // SAFETY: index `(4i + k) * xs + c * cs + at + j0 + l`
                    // for the lanes `l` below `n - j0`, inside `v` (the
                    // caller's bound).
                    unsafe { _mm256_maskstore_ps(v.add((4 * i + k) * xs + at + j0), m, val) };
                }
            }
        }
        j0 += T;
    }
}

/// `Aᵀ M A` of `n` tiles of one output channel, `M_xi` of tile `j` at
/// `m[xi * stride + at + j]`, then `act(out + bias)`: the tiles' two output
/// rows go to `out[0]` and `out[1]` (`None`: past the plane's last row),
/// each from the first tile's first column, `cols` floats of them (the
/// rest of the last tile falls outside the plane). Returns false (and
/// writes nothing) when `m` or a row is too short or `cols > 2 * n`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn output_tiles(
    cpu: Avx2,
    m: &[f32],
    at: usize,
    stride: usize,
    n: usize,
    bias: Option<f32>,
    act: Activation,
    out: [Option<&mut [f32]>; 2],
    cols: usize,
) -> bool {
    if !TileRows::output_fits(m.len(), at, stride, n, &out, cols) {
        return false;
    }
    let _ = cpu;
    let [r0, r1] = out;
    let ptr = |r: Option<&mut [f32]>| r.map_or(core::ptr::null_mut(), <[f32]>::as_mut_ptr);
    // SAFETY: `cpu` proves AVX2 is present; the bounds were checked above
    // (see `output_run`).
    unsafe { output_run(m.as_ptr(), at, stride, n, bias, act, [ptr(r0), ptr(r1)], cols) };
    true
}

/// The loop of [`output_tiles`]. The caller guarantees that `m` holds `15 *
/// stride + at + n` floats (loads are masked to the step's tiles below `n`)
/// and that each non-null row holds `cols <= 2 * n` floats (stores are
/// masked to the columns below `cols`).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2")]
unsafe fn output_run(
    m: *const f32,
    at: usize,
    stride: usize,
    n: usize,
    bias: Option<f32>,
    act: Activation,
    out: [*mut f32; 2],
    cols: usize,
) {
    let mut j0 = 0;
    while j0 < n {
        let mask = below(n - j0);
        // SAFETY: index `xi * stride + at + j0 + l` for the lanes `l` below
        // `n - j0`, inside `m` (the caller's bound).
        let s: [__m256; 16] = core::array::from_fn(|xi| unsafe {
            _mm256_maskload_ps(m.add(xi * stride + at + j0), mask)
        });
        // Row-wise first: t0[k] = s0k + s1k + s2k, t1[k] = s1k - s2k - s3k.
        let t: [[__m256; 4]; 2] = [
            core::array::from_fn(|k| _mm256_add_ps(_mm256_add_ps(s[k], s[4 + k]), s[8 + k])),
            core::array::from_fn(|k| _mm256_sub_ps(_mm256_sub_ps(s[4 + k], s[8 + k]), s[12 + k])),
        ];
        let x0 = 2 * j0;
        let left = cols.saturating_sub(x0);
        for (r, &row) in out.iter().enumerate() {
            if row.is_null() {
                continue;
            }
            let [t0, t1, t2, t3] = t[r];
            let mut y0 = _mm256_add_ps(_mm256_add_ps(t0, t1), t2);
            let mut y1 = _mm256_sub_ps(_mm256_sub_ps(t1, t2), t3);
            if let Some(b) = bias {
                let b = _mm256_set1_ps(b);
                y0 = _mm256_add_ps(y0, b);
                y1 = _mm256_add_ps(y1, b);
            }
            let (y0, y1) = (activate(y0, act), activate(y1, act));
            // [y0_0 y1_0 y0_1 y1_1 | y0_4 y1_4 y0_5 y1_5] and the 2, 3 / 6, 7
            // pairs, then the halves put in order.
            let (lo, hi) = (_mm256_unpacklo_ps(y0, y1), _mm256_unpackhi_ps(y0, y1));
            let first = _mm256_permute2f128_ps::<0x20>(lo, hi);
            let second = _mm256_permute2f128_ps::<0x31>(lo, hi);
            // SAFETY: columns `x0 + l` for the lanes `l` kept by the masks,
            // below `cols`, inside the row (the caller's bound).
            unsafe {
                _mm256_maskstore_ps(row.wrapping_add(x0), below(left), first);
                let rest = left.saturating_sub(T);
                _mm256_maskstore_ps(row.wrapping_add(x0 + T), below(rest), second);
            }
        }
        j0 += T;
    }
}
