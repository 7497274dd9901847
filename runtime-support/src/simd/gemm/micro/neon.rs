//! The aarch64 NEON micro-kernel: up to 8 rows x 12 columns of f32 sums in
//! twenty-four `q` registers. Each step of `k` loads three vectors of B and
//! one scalar of A per row, and multiplies by that scalar as a lane
//! (`fmla v.4s, v.4s, v.s[0]`), fused (one rounding per step).
//!
//! NEON is part of every aarch64 target this module is compiled for, so
//! there is no run-time detection: [`Neon::detect`] consults only the ISA
//! cap (see [`crate::simd::isa::neon`]). The kernel is instantiated for
//! every row count 1..=8 (no dropped rows on short products). B is always
//! a packed strip, zero past the last column, so the sums of a partial
//! strip need no mask:
//! only the loads and stores of the destination stop at the last column,
//! through a small stack buffer for the last partial vector of a row.
//!
//! The epilogue (alpha, per-row bias, `beta * C`, activation) is applied in
//! registers before the store, with the operations and order of
//! [`crate::simd::Epilogue::one`], so results match the row-wise epilogue bit for
//! bit.
//!
//! Soundness: the intrinsics need NEON, present by the compile-time target
//! feature; [`Micro::kernel`] checks every index the loop will read or
//! write before entering the unsafe code.

use crate::simd::gemm::epilogue::Fused;
use crate::simd::gemm::epilogue::FusedC;
use crate::simd::gemm::epilogue::block_fits;
use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;
use crate::simd::isa::neon::{Neon, activate, load_part, store_part};
use core::arch::aarch64::{
    float32x4_t, vaddq_f32, vaddvq_f32, vdupq_n_f32, vfmaq_f32, vfmaq_n_f32, vld1q_f32, vmulq_n_f32,
};

const MR: usize = 8;
const NR: usize = 12;
/// Vectors of four lanes per tile row.
const V: usize = NR / 4;

impl Micro for Neon {
    const MR: usize = MR;
    const NR: usize = NR;
    const MC: usize = 128;
    const KC: usize = 256;

    #[inline(always)]
    fn kernel(self, t: Tile<'_>) {
        let Tile {
            kc,
            a: ARows { data: a, rows, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        debug_assert_eq!(rows.len(), MR, "NEON tile: one A row offset per tile row");
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return };
        let (nrows, ncols) = (nrows.min(MR), ncols.min(NR));
        if nrows == 0 || ncols == 0 {
            return;
        }
        let fits = kc > 0
            && ldb == NR
            && kc.checked_mul(NR).is_some_and(|v| v <= b.len())
            && block_fits(dst, ldd, nrows, ncols);
        debug_assert!(
            fits,
            "NEON tile: kc {kc} > 0 steps of a packed B ({ldb} wide, {} floats), {nrows}x{ncols} \
             rows {ldd} apart within {}",
            b.len(),
            dst.len()
        );
        if !fits {
            return;
        }
        let Some(span) = (kc - 1).checked_mul(cs) else { return };
        let a_fits =
            rows[..nrows].iter().all(|&r| r.checked_add(span).is_some_and(|last| last < a.len()));
        debug_assert!(a_fits, "NEON tile: A rows + (kc - 1) * {cs} within {}", a.len());
        if !a_fits {
            return;
        }
        // A residual or a smooth activation: finished in memory.
        let fused = tail.as_ref().and_then(|t| {
            Fused::new(t, nrows, ncols).filter(|f| f.res.is_none() && t.epi.smooth.is_none())
        });
        let (epi, cdata) = match (&fused, &tail) {
            (Some(f), Some(t)) => (Some(f), t.epi.c.map_or(core::ptr::null(), |c| c.data.as_ptr())),
            _ => (None, core::ptr::null()),
        };
        let (a, b, d) = (a.as_ptr(), b.as_ptr(), dst.as_mut_ptr());
        // SAFETY: NEON is present (module invariant). For `r < nrows` and
        // `p < kc`, A is read at `rows[r] + p * cs <= rows[r] + span <
        // a.len()`; B at `p * 12 + 0..12 < kc * 12 <= b.len()`; the
        // destination at `r * ldd + c` for `c < ncols`, within `dst` by
        // `fits`; C, for `FusedC::Rows`, at `base + r * rs + c` for
        // `c < ncols`, within C by `Fused::new`.
        unsafe {
            match nrows {
                1 => kernel_rx12::<1>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                2 => kernel_rx12::<2>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                3 => kernel_rx12::<3>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                4 => kernel_rx12::<4>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                5 => kernel_rx12::<5>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                6 => kernel_rx12::<6>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                7 => kernel_rx12::<7>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                _ => kernel_rx12::<8>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
            }
        }
        if fused.is_none() {
            finish(dst, ldd, nrows, ncols, tail);
        }
    }
}

/// `R` rows of [`Neon::kernel`]; the caller guarantees the bounds described
/// there for `r < R` and `c < ncols` (`1 <= ncols <= 12`), and for C at
/// `cdata` when `epi` has a `FusedC::Rows` term. (Scalar arguments, as
/// AVX-512's `kernel_r32` takes them: where the call is not inlined, a
/// struct would reach the loop through memory.)
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon")]
#[inline]
unsafe fn kernel_rx12<const R: usize>(
    kc: usize,
    a: *const f32,
    rows: &[usize; MR],
    cs: usize,
    b: *const f32,
    d: *mut f32,
    ldd: usize,
    ncols: usize,
    load: bool,
    epi: Option<&Fused>,
    cdata: *const f32,
) {
    let zero = vdupq_n_f32(0.0);
    let mut c: [[float32x4_t; V]; R] = [[zero; V]; R];
    // The vectors of a row that hold columns below `ncols`.
    let used = ncols.div_ceil(4);
    if load {
        for (r, row) in c.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate().take(used) {
                // SAFETY: columns `4 * v..ncols` (at most four) of row `r`
                // are in the destination.
                *x = unsafe { load_part(d.add(r * ldd + 4 * v), ncols - 4 * v) };
            }
        }
    }
    // SAFETY (whole loop): see the caller's bounds; `off` stays at or below
    // `span` while read, and `bp` at `b + p * 12` for `p <= kc`.
    unsafe {
        let ap: [*const f32; R] = core::array::from_fn(|r| a.add(rows[r]));
        let mut bp = b;
        let mut off = 0usize;
        for _ in 0..kc {
            let bv: [float32x4_t; V] = core::array::from_fn(|v| vld1q_f32(bp.add(4 * v)));
            for r in 0..R {
                let x = *ap[r].add(off);
                for v in 0..V {
                    c[r][v] = vfmaq_n_f32(c[r][v], bv[v], x);
                }
            }
            bp = bp.add(NR);
            off += cs;
        }
    }
    if let Some(f) = epi {
        for (r, row) in c.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate().take(used) {
                let mut y = *x;
                if f.alpha != 1.0 {
                    y = vmulq_n_f32(y, f.alpha);
                }
                if let Some(bias) = &f.bias {
                    y = vaddq_f32(y, vdupq_n_f32(bias[r]));
                }
                match f.c {
                    FusedC::None => {}
                    FusedC::Rows { base, rs, beta } => {
                        // SAFETY: columns below `ncols` of row `r` of C,
                        // checked by `Fused::new`.
                        let cv =
                            unsafe { load_part(cdata.add(base + r * rs + 4 * v), ncols - 4 * v) };
                        y = vaddq_f32(y, vmulq_n_f32(cv, beta));
                    }
                    FusedC::PerRow(t) => y = vaddq_f32(y, vdupq_n_f32(t[r])),
                }
                *x = activate(y, f.act);
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (v, x) in row.iter().enumerate().take(used) {
            // SAFETY: as for the loads above.
            unsafe { store_part(d.add(r * ldd + 4 * v), *x, ncols - 4 * v) };
        }
    }
}

impl Neon {
    /// `out[j] = sum_p a[p] * b[j * cs + p]`: four columns at a time, each
    /// summed in eight lanes (a different summation order from the exact
    /// kernel). Every column lies within `b` (the caller's bound: a panic
    /// in debug builds, nothing done in release builds).
    pub(crate) fn dots(self, a: &[f32], b: &[f32], cs: usize, out: &mut [f32]) {
        let (k, n) = (a.len(), out.len());
        if k == 0 || n == 0 {
            return;
        }
        let last = (n - 1).checked_mul(cs).and_then(|v| v.checked_add(k));
        debug_assert!(last.is_some_and(|v| v <= b.len()), "dots: {n} columns of {k}, {cs} apart");
        if last.is_none_or(|v| v > b.len()) {
            return;
        }
        // SAFETY: NEON is present (module invariant); column `j < n` is read
        // at `j * cs + 0..k`, below `(n - 1) * cs + k <= b.len()`, and `a`
        // at `0..k`.
        unsafe { dots4(k, a.as_ptr(), b.as_ptr(), cs, out) }
    }
}

/// See [`Neon::dots`]; the caller guarantees the bounds described there.
#[target_feature(enable = "neon")]
unsafe fn dots4(k: usize, a: *const f32, b: *const f32, cs: usize, out: &mut [f32]) {
    const G: usize = 4;
    let zero = vdupq_n_f32(0.0);
    let full = k / 8;
    // The last `k % 8` steps: one vector of up to four, then up to four more.
    let (t0, t1) = ((k % 8).min(4), (k % 8).saturating_sub(4));
    let n = out.len();
    let mut j = 0;
    // SAFETY (both loops): reads stay within `a[..k]` and the columns
    // `b[j * cs..j * cs + k]`; the tail vectors read only their `t0` and
    // `t1` valid lanes.
    unsafe {
        while j + G <= n {
            let cols: [*const f32; G] = core::array::from_fn(|c| b.add((j + c) * cs));
            let mut acc = [[zero; 2]; G];
            for t in 0..full {
                let x0 = vld1q_f32(a.add(8 * t));
                let x1 = vld1q_f32(a.add(8 * t + 4));
                for c in 0..G {
                    acc[c][0] = vfmaq_f32(acc[c][0], x0, vld1q_f32(cols[c].add(8 * t)));
                    acc[c][1] = vfmaq_f32(acc[c][1], x1, vld1q_f32(cols[c].add(8 * t + 4)));
                }
            }
            if t0 > 0 {
                let x0 = load_part(a.add(8 * full), t0);
                for c in 0..G {
                    let w = load_part(cols[c].add(8 * full), t0);
                    acc[c][0] = vfmaq_f32(acc[c][0], x0, w);
                }
            }
            if t1 > 0 {
                let x1 = load_part(a.add(8 * full + 4), t1);
                for c in 0..G {
                    let w = load_part(cols[c].add(8 * full + 4), t1);
                    acc[c][1] = vfmaq_f32(acc[c][1], x1, w);
                }
            }
            for (o, s) in out[j..j + G].iter_mut().zip(acc) {
                *o = vaddvq_f32(vaddq_f32(s[0], s[1]));
            }
            j += G;
        }
        while j < n {
            let col = b.add(j * cs);
            let mut acc = [zero; 2];
            for t in 0..full {
                acc[0] = vfmaq_f32(acc[0], vld1q_f32(a.add(8 * t)), vld1q_f32(col.add(8 * t)));
                acc[1] =
                    vfmaq_f32(acc[1], vld1q_f32(a.add(8 * t + 4)), vld1q_f32(col.add(8 * t + 4)));
            }
            if t0 > 0 {
                let w = load_part(col.add(8 * full), t0);
                acc[0] = vfmaq_f32(acc[0], load_part(a.add(8 * full), t0), w);
            }
            if t1 > 0 {
                let w = load_part(col.add(8 * full + 4), t1);
                acc[1] = vfmaq_f32(acc[1], load_part(a.add(8 * full + 4), t1), w);
            }
            out[j] = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
            j += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::gemm::epilogue::Epilogue;
    use crate::simd::gemm::epilogue::Tail;

    /// A tile whose operands are too short is left alone, whatever the
    /// lengths: the checks run before any unsafe read or write (and stop
    /// the test's calls in debug builds).
    #[test]
    fn short_operands_write_nothing() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let a = [1.0f32; 20];
        let b = [1.0f32; 12 * 4];
        let rows = [0usize, 4, 8, 12, 16, 16, 16, 16];
        let epi = Epilogue::NONE;
        let tail = Some(Tail { epi: &epi, i0: 0, j0: 0 });
        for (kc, cs, blen, dlen, ldb) in [
            (4, 1, 12 * 4, 8 * 12, 12),
            (5, 1, 12 * 4, 8 * 12, 12),
            (4, 2, 12 * 4, 8 * 12, 12),
            (4, 1, 12 * 3, 8 * 12, 12),
            (4, 1, 12 * 4, 7 * 12 + 11, 12),
            (4, 1, 12 * 4, 8 * 12, 11),
        ] {
            let mut d = [7.0f32; 8 * 12];
            let ok = kc == 4 && cs == 1 && blen == 48 && dlen == 96 && ldb == 12;
            let mut call = || {
                let a = ARows { data: &a, rows: &rows, cs };
                let b = BStrip { data: &b[..blen], ldb };
                let dst =
                    DstBlock { data: &mut d[..dlen], ldd: 12, nrows: 8, ncols: 12, load: false };
                cpu.kernel(Tile { kc, a, b, dst, tail })
            };
            if ok {
                call()
            } else {
                crate::simd::tests::out_of_bounds(call)
            }
            assert_eq!(d.iter().all(|&v| v == 7.0), !ok, "kc {kc} cs {cs} b {blen} d {dlen}");
        }
    }

    /// Every row count and column count, with a destination that ends at
    /// the last element of the tile: the partial vectors write exactly
    /// `ncols` columns and read nothing past them.
    #[test]
    fn partial_tiles_stop_at_the_last_column() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let mut a = [0.0f32; 8 * 5];
        for (i, v) in a.iter_mut().enumerate() {
            *v = (i % 7) as f32 - 3.0;
        }
        let mut b = [0.0f32; 12 * 5];
        let rows: [usize; 8] = core::array::from_fn(|r| r * 5);
        for nrows in 1..=8 {
            for ncols in 1..=12 {
                for (p, row) in b.chunks_exact_mut(12).enumerate() {
                    for (c, v) in row.iter_mut().enumerate() {
                        *v = if c < ncols { (p * 3 + c) as f32 * 0.5 - 2.0 } else { 0.0 };
                    }
                }
                let ldd = 13;
                let len = (nrows - 1) * ldd + ncols;
                for load in [false, true] {
                    let mut d = [1.5f32; 8 * 13];
                    cpu.kernel(Tile {
                        kc: 5,
                        a: ARows { data: &a, rows: &rows, cs: 1 },
                        b: BStrip { data: &b, ldb: 12 },
                        dst: DstBlock { data: &mut d[..len], ldd, nrows, ncols, load },
                        tail: None,
                    });
                    for (i, &g) in d.iter().enumerate() {
                        let (r, c) = (i / ldd, i % ldd);
                        if r >= nrows || c >= ncols {
                            assert_eq!(g, 1.5, "{nrows}x{ncols} wrote ({r}, {c})");
                            continue;
                        }
                        let mut want = if load { 1.5f32 } else { 0.0 };
                        for p in 0..5 {
                            want += a[r * 5 + p] * b[p * 12 + c];
                        }
                        // Small integers and halves: every sum is exact.
                        assert_eq!(g, want, "{nrows}x{ncols} load {load} at ({r}, {c})");
                    }
                }
            }
        }
    }

    /// Dot products of every length 1..=40 against plain sums, with B
    /// ending at the last element of the last column and a gap between
    /// columns.
    #[test]
    fn dots_match_plain_sums() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let mut a = [0.0f32; 40];
        let mut b = [0.0f32; 9 * 43];
        for (i, v) in a.iter_mut().enumerate() {
            *v = ((i * 7) % 11) as f32 / 4.0 - 1.25;
        }
        for (i, v) in b.iter_mut().enumerate() {
            *v = ((i * 5) % 13) as f32 / 8.0 - 0.75;
        }
        for k in 1..=40 {
            for n in 1..=9 {
                let cs = k + 3;
                let len = (n - 1) * cs + k;
                let mut out = [f32::NAN; 9];
                cpu.dots(&a[..k], &b[..len], cs, &mut out[..n]);
                for (j, &g) in out.iter().enumerate() {
                    if j >= n {
                        assert!(g.is_nan(), "k {k} n {n}: wrote {j}");
                        continue;
                    }
                    let want: f32 = (0..k).map(|p| a[p] * b[j * cs + p]).sum();
                    assert!(
                        (g - want).abs() <= 1e-5 * k as f32,
                        "k {k} n {n} at {j}: {g} vs {want}"
                    );
                }
                // One element short: nothing is written.
                let mut out = [f32::NAN; 9];
                let short = || cpu.dots(&a[..k], &b[..len - 1], cs, &mut out[..n]);
                crate::simd::tests::out_of_bounds(short);
                assert!(out.iter().all(|v| v.is_nan()));
            }
        }
    }
}
