//! AVX-512 transforms of Winograd's F(2x2, 3x3) (`crate::winograd`),
//! sixteen tiles of one row of tiles at a time: the input transform splits
//! each of the four input rows into its even and odd columns with
//! two-source permutes and combines them in registers; the output
//! transform combines the sixteen sums of each tile in registers and
//! interleaves the two columns of each tile back with permutes.
//!
//! The additions and subtractions are the portable transforms', in the
//! same order, and the activation is [`crate::simd::isa::avx512::activate`] (the
//! scalar comparisons as blends): the results are bit for bit those of the
//! portable code. Every load and store is masked to the lanes inside its
//! slice, or checked against the slice before the loop.

use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx512::{Avx512, activate, evens, lanes, lanes_between, odds};
use crate::simd::winograd::TileRows;
use core::arch::x86_64::{
    __m512, __mmask16, _mm512_add_ps, _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps,
    _mm512_permutex2var_ps, _mm512_set1_ps, _mm512_setr_epi32, _mm512_sub_ps,
};

/// Tiles the transforms handle per step: one vector's lanes.
const T: usize = 16;

/// `V = Bᵀ d B` of `n` tiles of each of `channels` channels of `x` (see
/// [`TileRows`]): `V_xi` of channel `c`'s tile `j` goes to `v[xi * xs + c *
/// cs + at + j]`. Returns false (and writes nothing) when `x` or `v` does
/// not hold every index.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn input_tiles(
    cpu: Avx512,
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
    // SAFETY: `cpu` proves AVX-512F is present; the bounds were checked
    // above (see `input_run`).
    unsafe { input_run(x.as_ptr(), src, channels, n, v.as_mut_ptr(), at, [xs, cs]) };
    true
}

/// The loop of [`input_tiles`]. The caller guarantees that `x` holds
/// `channels` planes, each row of `src` inside its plane (loads are masked
/// to the row's `w` floats), and that `v` holds `15 * xs + (channels - 1)
/// * cs + at + n` floats (stores are masked to the step's tiles below `n`).
#[target_feature(enable = "avx512f")]
unsafe fn input_run(
    x: *const f32,
    src: TileRows,
    channels: usize,
    n: usize,
    v: *mut f32,
    at: usize,
    [xs, cs]: [usize; 2],
) {
    // The loads of each row, at columns `q`, `q + 16`, `q + 2`, `q + 18`.
    const OFFS: [isize; 4] = [0, 16, 2, 18];
    let mut j0 = 0;
    while j0 < n {
        let m = lanes(n - j0);
        let q = src.first + 2 * j0 as isize;
        // The lanes of each load inside its row, the same for every channel.
        // (Lanes `l` with `0 <= q + o + l < w`.)
        let w = isize::try_from(src.w).unwrap_or(isize::MAX);
        let masks: [[__mmask16; 4]; 4] = core::array::from_fn(|r| match src.rows[r] {
            Some(_) => OFFS.map(|o| lanes_between(-(q + o), w.saturating_sub(q + o))),
            None => [0; 4],
        });
        let starts: [usize; 4] = src.rows.map(|r| r.unwrap_or(0));
        for c in 0..channels {
            let d: [[__m512; 4]; 4] = core::array::from_fn(|r| {
                let row = x.wrapping_add(c * src.plane + starts[r]);
                let [a, b, a2, b2] = core::array::from_fn(|i| {
                    // SAFETY: the mask keeps the lanes whose columns lie in
                    // the row's `w` floats, inside channel `c`'s plane; the
                    // others are not accessed.
                    unsafe { _mm512_maskz_loadu_ps(masks[r][i], row.wrapping_offset(q + OFFS[i])) }
                });
                [evens(a, b), odds(a, b), evens(a2, b2), odds(a2, b2)]
            });
            let v = v.wrapping_add(c * cs);
            // Bᵀ d, a column at a time: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3.
            let t: [[__m512; 4]; 4] = core::array::from_fn(|col| {
                let (d0, d1, d2, d3) = (d[0][col], d[1][col], d[2][col], d[3][col]);
                [
                    _mm512_sub_ps(d0, d2),
                    _mm512_add_ps(d1, d2),
                    _mm512_sub_ps(d2, d1),
                    _mm512_sub_ps(d1, d3),
                ]
            });
            // Then B on each row `i`: a0 - a2, a1 + a2, a2 - a1, a1 - a3
            // of its columns.
            let [c0, c1, c2, c3] = t;
            for (i, (((a0, a1), a2), a3)) in c0.into_iter().zip(c1).zip(c2).zip(c3).enumerate() {
                let vals = [
                    _mm512_sub_ps(a0, a2),
                    _mm512_add_ps(a1, a2),
                    _mm512_sub_ps(a2, a1),
                    _mm512_sub_ps(a1, a3),
                ];
                for (k, val) in vals.into_iter().enumerate() {
                    // SAFETY: index `(4i + k) * xs + c * cs + at + j0 + l`
                    // for the lanes `l` below `n - j0`, inside `v` (the
                    // caller's bound).
                    unsafe { _mm512_mask_storeu_ps(v.add((4 * i + k) * xs + at + j0), m, val) };
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
    cpu: Avx512,
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
    // SAFETY: `cpu` proves AVX-512F is present; the bounds were checked
    // above (see `output_run`).
    unsafe { output_run(m.as_ptr(), at, stride, n, bias, act, [ptr(r0), ptr(r1)], cols) };
    true
}

/// The loop of [`output_tiles`]. The caller guarantees that `m` holds `15 *
/// stride + at + n` floats (loads are masked to the step's tiles below `n`)
/// and that each non-null row holds `cols <= 2 * n` floats (stores are
/// masked to the columns below `cols`).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
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
    let lo_at = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    let hi_at = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    let mut j0 = 0;
    while j0 < n {
        let mask = lanes(n - j0);
        // SAFETY: index `xi * stride + at + j0 + l` for the lanes `l` below
        // `n - j0`, inside `m` (the caller's bound).
        let s: [__m512; 16] = core::array::from_fn(|xi| unsafe {
            _mm512_maskz_loadu_ps(mask, m.add(xi * stride + at + j0))
        });
        // Row-wise first: t0[k] = s0k + s1k + s2k, t1[k] = s1k - s2k - s3k.
        let t: [[__m512; 4]; 2] = [
            core::array::from_fn(|k| _mm512_add_ps(_mm512_add_ps(s[k], s[4 + k]), s[8 + k])),
            core::array::from_fn(|k| _mm512_sub_ps(_mm512_sub_ps(s[4 + k], s[8 + k]), s[12 + k])),
        ];
        let x0 = 2 * j0;
        let left = cols.saturating_sub(x0);
        for (r, &row) in out.iter().enumerate() {
            if row.is_null() {
                continue;
            }
            let [t0, t1, t2, t3] = t[r];
            let mut y0 = _mm512_add_ps(_mm512_add_ps(t0, t1), t2);
            let mut y1 = _mm512_sub_ps(_mm512_sub_ps(t1, t2), t3);
            if let Some(b) = bias {
                let b = _mm512_set1_ps(b);
                y0 = _mm512_add_ps(y0, b);
                y1 = _mm512_add_ps(y1, b);
            }
            let (y0, y1) = (activate(y0, act), activate(y1, act));
            let lo = _mm512_permutex2var_ps(y0, lo_at, y1);
            let hi = _mm512_permutex2var_ps(y0, hi_at, y1);
            // SAFETY: columns `x0 + l` for the lanes `l` kept by the masks,
            // below `cols`, inside the row (the caller's bound).
            unsafe {
                _mm512_mask_storeu_ps(row.wrapping_add(x0), lanes(left), lo);
                let rest = left.saturating_sub(16);
                _mm512_mask_storeu_ps(row.wrapping_add(x0 + 16), lanes(rest), hi);
            }
        }
        j0 += T;
    }
}
