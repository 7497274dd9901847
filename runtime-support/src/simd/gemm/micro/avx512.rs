//! The AVX-512 micro-kernel: up to 8 rows x 32 columns of f32 sums in
//! sixteen `zmm` registers, one broadcast of A and two loads of B per step.
//!
//! Tiles at the edges of the product need no staging: the kernel is
//! instantiated for every row count 1..=8 (so a product with 2..7 rows
//! runs no dropped rows) and reads and writes partial columns with masked
//! loads and stores, straight in the destination.
//!
//! Two invariants make the unsafe code sound: an [`Avx512`] value exists
//! only after the CPU was found to support AVX-512F (see
//! [`crate::simd::isa::avx512`]; so the `target_feature` functions may
//! run), and [`Micro::kernel`] checks every index the loop will read or
//! write before entering it.

use crate::simd::Vectorize;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Fused;
use crate::simd::gemm::epilogue::FusedC;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::epilogue::finish_column;
use crate::simd::gemm::epilogue::smooth_block;
use crate::simd::gemm::micro::APanel;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::rows::{BRows, BTable, DstRuns, Runs, Strided};
use crate::simd::isa::avx512::{Avx512, activate, lanes};
use core::arch::x86_64::{
    __m512, __mmask16, _MM_HINT_T0, _mm_prefetch, _mm256_fmadd_ps, _mm256_loadu_ps, _mm256_set1_ps,
    _mm256_setzero_ps, _mm256_storeu_ps, _mm512_add_ps, _mm512_fmadd_ps, _mm512_loadu_ps,
    _mm512_mask_storeu_ps, _mm512_maskz_loadu_ps, _mm512_mul_ps, _mm512_reduce_add_ps,
    _mm512_set1_ps, _mm512_setzero_ps, _mm512_storeu_ps,
};

const MR: usize = 8;
const NR: usize = 32;
/// Steps of `k` ahead of the sums that the kernel prefetches A (as many as
/// the product driver fetches of the next tile, [`crate::simd::gemm::pack::A_AHEAD`]).
const PREFETCH: usize = crate::simd::gemm::pack::A_AHEAD;
/// Floats of A (256 KiB) above which the kernel prefetches it: smaller
/// operands stay in cache between tiles, and the hint would only cost an
/// instruction per step.
const PREFETCH_FROM: usize = crate::simd::gemm::pack::A_PREFETCH_FROM;

impl Micro for Avx512 {
    const MR: usize = MR;
    const NR: usize = NR;
    const MC: usize = 512;
    const KC: usize = 256;
    const DIRECT_B: bool = true;

    #[inline(always)]
    fn kernel(self, t: Tile<'_>) {
        let Tile {
            kc,
            a: ARows { data: a, rows, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        debug_assert_eq!(rows.len(), MR, "AVX-512 tile: one A row offset per tile row");
        let (nrows, ncols) = (nrows.min(MR), ncols.min(NR));
        if nrows == 0 || ncols == 0 {
            return;
        }
        let b_need = (kc.max(1) - 1).checked_mul(ldb).and_then(|v| v.checked_add(ncols));
        let b_fits = kc > 0 && b_need.is_some_and(|v| v <= b.len());
        debug_assert!(b_fits, "AVX-512 tile: kc {kc} > 0 rows of B, {ldb} apart, in {}", b.len());
        if !b_fits {
            return;
        }
        let (a_len, d_len) = (a.len(), dst.len());
        let a = ARows { data: a, rows, cs };
        let b = Strided { b: b.as_ptr(), ldb };
        let dst = DstRuns { data: dst, ldd, nrows, runs: Runs::cols(ncols), load };
        // SAFETY: row `p < kc` of B starts at `p * ldb` and holds `ncols`
        // floats: `(kc - 1) * ldb + ncols <= b.len()` was checked above.
        let done = unsafe { self.run(Tile { kc, a, b, dst, tail }, false) };
        // Columns in one or two contiguous runs, no extra column: `run`
        // refuses only A rows (other than `MR` of them) or a destination
        // out of bounds.
        debug_assert!(
            done,
            "AVX-512 tile: A rows {rows:?} + (kc - 1) * {cs} within {a_len}, {nrows}x{ncols} rows \
             {ldd} apart within {d_len}"
        );
    }

    const WIDE: usize = WIDE;

    #[inline]
    fn wide(self, t: Tile<'_, APanel<'_>>) -> bool {
        let Tile {
            kc,
            a: APanel { data: a, row0, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        if nrows != MR || !(2 * 16 + 1..=WIDE).contains(&ncols) {
            return false;
        }
        let b_need = (kc.max(1) - 1).checked_mul(ldb).and_then(|v| v.checked_add(ncols));
        if kc == 0 || b_need.is_none_or(|v| v > b.len()) {
            return false;
        }
        let rows: [usize; MR] = core::array::from_fn(|r| row0.saturating_add(r));
        let extra = ncols == WIDE;
        let runs = Runs::cols(ncols - usize::from(extra));
        let a = ARows { data: a, rows: &rows, cs };
        let b = Strided { b: b.as_ptr(), ldb };
        let dst = DstRuns { data: dst, ldd, nrows: MR, runs, load };
        // SAFETY: row `p < kc` of B starts at `p * ldb` and holds `ncols`
        // floats (the runs' 48 and the extra column): `(kc - 1) * ldb +
        // ncols <= b.len()` was checked above.
        unsafe { self.run(Tile { kc, a, b, dst, tail }, extra) }
    }

    #[inline]
    fn sweep(self, t: Tile<'_, APanel<'_>>) -> usize {
        let Tile {
            kc,
            a: APanel { data: a, row0, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        // The tiles of `wide` without its extra column: three full runs.
        const W: usize = WIDE - 1;
        let done = ncols / W * W;
        let b_need = (kc.max(1) - 1).checked_mul(ldb).and_then(|v| v.checked_add(done));
        let d_need = (MR - 1).checked_mul(ldd).and_then(|v| v.checked_add(done));
        let a_last = (kc.max(1) - 1).checked_mul(cs).and_then(|v| v.checked_add(row0 + MR - 1));
        if kc == 0
            || done == 0
            || nrows != MR
            || b_need.is_none_or(|v| v > b.len())
            || d_need.is_none_or(|v| v > dst.len())
            || a_last.is_none_or(|v| v >= a.len())
        {
            return 0;
        }
        // The epilogue of all the tiles at once: `Fused::new` checks C and
        // the residual over every column done.
        let fused = match &tail {
            Some(t) => match Fused::new(t, MR, done) {
                Some(f) => Some(f),
                None => return 0,
            },
            None => None,
        };
        let cdata = tail.and_then(|t| t.epi.c).map_or(core::ptr::null(), |c| c.data.as_ptr());
        let rdata = tail.and_then(|t| t.epi.res).map_or(core::ptr::null(), |r| r.data.as_ptr());
        let smooth = tail.and_then(|t| t.epi.smooth);
        let rows: [usize; MR] = core::array::from_fn(|r| row0 + r);
        let pf = a.len() > PREFETCH_FROM;
        let res = fused.and_then(|f| f.res).zip(tail.and_then(|t| t.epi.res));
        for j in (0..done).step_by(W) {
            // The residual comes from memory in a large model (written
            // layers earlier): its rows of the next tile are fetched while
            // this one runs. Measured 64->256 at 56x56 with a residual from
            // memory: 1.68 -> 1.47 ms (two tiles ahead: 1.53).
            if let Some(((base, rs), r)) = res
                && j + W < done
            {
                for row in 0..MR {
                    let at = base + row * rs + j + W;
                    crate::simd::prefetch(r.data.get(at..at + W).unwrap_or(&[]));
                }
            }
            let epi = fused.map(|f| f.shifted(j));
            let src = Strided { b: b.as_ptr().wrapping_add(j), ldb };
            let d = dst.as_mut_ptr().wrapping_add(j);
            // (Taken out of the loop, these two made 256->128 at 56x56 9%
            // slower: measured, not obvious.)
            let (a, runs) = (a.as_ptr(), Runs::cols(W));
            let epi = epi.as_ref();
            // SAFETY: `self` proves AVX-512F is present. The rows of A are
            // the eight adjacent `row0 + r`, read at `row0 + r + p * cs
            // <= a_last < a.len()` for `p < kc`; B at `p * ldb + j + c`
            // for `c < 48`, below `(kc - 1) * ldb + done <= b.len()`; the
            // destination at `r * ldd + j + c`, below `7 * ldd + done <=
            // dst.len()`; C and the residual at their bases shifted by `j`
            // plus `r * rs + c`, within them by `Fused::new` over all
            // `done` columns.
            unsafe {
                if pf {
                    kernel_r32::<8, 3, true, ADJACENT, false, Strided>(
                        kc, a, &rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                    )
                } else {
                    kernel_r32::<8, 3, false, ADJACENT, false, Strided>(
                        kc, a, &rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                    )
                }
            }
            if let (Some(s), Some(tile)) = (smooth, dst.get_mut(j..)) {
                smooth_block(s, tile, ldd, MR, W);
            }
        }
        done
    }

    const COLS: usize = 4;

    #[inline]
    fn columns(self, t: Tile<'_, APanel<'_>>) -> bool {
        let Tile {
            kc,
            a: APanel { data: a, row0, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        if kc == 0 || !(1..=MR).contains(&nrows) || !(1..=Self::COLS).contains(&ncols) {
            return false;
        }
        let a_end = (kc - 1).checked_mul(cs).and_then(|v| v.checked_add(row0)?.checked_add(nrows));
        let b_end = (kc - 1).checked_mul(ldb).and_then(|v| v.checked_add(ncols));
        let d_end = (nrows - 1).checked_mul(ldd).and_then(|v| v.checked_add(ncols));
        if a_end.is_none_or(|v| v > a.len())
            || b_end.is_none_or(|v| v > b.len())
            || d_end.is_none_or(|v| v > dst.len())
        {
            return false;
        }
        // Column `c`'s sums, lane `r` for row `r`.
        let mut acc = [[0.0f32; 16]; 4];
        if load {
            for (c, col) in acc.iter_mut().enumerate().take(ncols) {
                for (r, v) in col.iter_mut().enumerate().take(nrows) {
                    *v = dst[r * ldd + c];
                }
            }
        }
        let (ap, bp, m) = (a.as_ptr().wrapping_add(row0), b.as_ptr(), lanes(nrows));
        // SAFETY: `self` proves AVX-512F is present. A is read at `row0 +
        // p * cs + r` for `p < kc`, `r < nrows` (other lanes masked off),
        // below `a_end <= a.len()`; B at `p * ldb + c` for `c < ncols`,
        // below `b_end <= b.len()`.
        unsafe {
            match ncols {
                1 => columns512::<1>(kc, ap, cs, bp, ldb, m, &mut acc),
                2 => columns512::<2>(kc, ap, cs, bp, ldb, m, &mut acc),
                3 => columns512::<3>(kc, ap, cs, bp, ldb, m, &mut acc),
                _ => columns512::<4>(kc, ap, cs, bp, ldb, m, &mut acc),
            }
        }
        for (c, col) in acc.iter().enumerate().take(ncols) {
            for (r, v) in col.iter().enumerate().take(nrows) {
                dst[r * ldd + c] = *v;
            }
        }
        finish(dst, ldd, nrows, ncols, tail);
        true
    }

    #[cfg(test)]
    #[inline(always)]
    fn within<R>(self, f: impl FnOnce() -> R) -> R {
        // SAFETY: `self` proves AVX-512F is present; `f` is safe code.
        unsafe { with_avx512(f) }
    }

    #[inline(always)]
    fn run_body<V: Vectorize>(self, body: V) -> V::Output {
        // SAFETY: `self` proves AVX-512F is present; `body.run` is safe code.
        unsafe { body_avx512(body) }
    }
}

/// Columns of a wide tile ([`Micro::wide`]): three runs of 16 and one
/// more column (a 7x7 output's 49).
const WIDE: usize = 49;

impl Avx512 {
    /// [`Micro::kernel`] with B's rows in a [`BTable`] and the columns in
    /// [`Runs`]. Returns `false`, doing nothing, when a bound does not hold
    /// (`kc` past the table, a B row, A row or destination row too short).
    #[inline(always)]
    pub(crate) fn kernel_table(self, t: Tile<'_, ARows<'_>, BTable<'_>, DstRuns<'_>>) -> bool {
        let Tile { kc, a, b, dst, tail } = t;
        let Some(b) = b.rows(kc, &dst.runs) else { return false };
        // SAFETY: row `p < kc` of B holds each run `h` of `runs.n[h]`
        // floats from `runs.b[h]` on (checked by `BTable::rows`).
        unsafe { self.run(Tile { kc, a, b, dst, tail }, false) }
    }

    /// Checks the destination and A bounds (`MR` rows of A), then runs the
    /// tile through [`kernel_r32`] and its epilogue; `false`, doing
    /// nothing, when they do not hold. Three runs (48 columns) and the
    /// `extra` column after them take eight adjacent rows of A (a panel);
    /// other tiles return `false`.
    ///
    /// # Safety
    /// For `p < kc` and each run `h` with `runs.n[h] > 0`,
    /// `t.b.row(p) + runs.b[h]` points at `runs.n[h]` readable floats, and
    /// with `extra`, `t.b.row(p) + 48` at one more.
    #[inline(always)]
    unsafe fn run<S: BRows>(self, t: Tile<'_, ARows<'_>, S, DstRuns<'_>>, extra: bool) -> bool {
        let Tile { kc, a: ARows { data: a, rows, cs }, b: src, dst: out, tail } = t;
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return false };
        let (nrows, runs) = (out.nrows.min(MR), out.runs);
        let [n0, n1, n2] = runs.n;
        if kc == 0 || nrows == 0 || !(1..=16).contains(&n0) || n1 > 16 || n2 > 16 {
            return false;
        }
        let d_fits = out.fits(nrows);
        let DstRuns { data: dst, ldd, load, .. } = out;
        // The epilogue's C term and `finish` know contiguous rows only.
        // (Compared one by one: an array comparison reads the runs back
        // from the stack just after they were stored, which stalls.)
        let contiguous = (0..3).all(|h| runs.b[h] == 16 * h && runs.d[h] == 16 * h);
        let ncols = n0 + n1 + n2;
        if !d_fits || (!contiguous && tail.is_some_and(|t| !t.epi.in_registers_only())) {
            return false;
        }
        // The extra column follows three full runs, over eight rows.
        let x_fits = (nrows - 1).checked_mul(ldd).and_then(|v| v.checked_add(3 * 16 + 1));
        if extra && (ncols != 3 * 16 || !contiguous || x_fits.is_none_or(|v| v > dst.len())) {
            return false;
        }
        let Some(span) = (kc - 1).checked_mul(cs) else { return false };
        if rows[..nrows].iter().any(|&r| r.checked_add(span).is_none_or(|last| last >= a.len())) {
            return false;
        }
        // A whole tile of rows laid out one after another (a panel).
        let adjacent = nrows == MR && (1..MR).all(|r| rows[r] == rows[0] + r);
        // A whole tile of rows the same distance apart (A read in place).
        let step = rows[1].wrapping_sub(rows[0]);
        let stepped = nrows == MR
            && step.checked_mul(MR - 1).and_then(|v| rows[0].checked_add(v)).is_some()
            && (1..MR).all(|r| rows[r] == rows[0] + r * step);
        // Three runs take a whole panel tile, the only one they are built for.
        if n2 > 0 && !adjacent {
            return false;
        }
        let fused = tail.as_ref().and_then(|t| Fused::new(t, nrows, ncols));
        let (epi, cdata, rdata) = match (&fused, &tail) {
            (Some(f), Some(t)) => (
                Some(f),
                t.epi.c.map_or(core::ptr::null(), |c| c.data.as_ptr()),
                t.epi.res.map_or(core::ptr::null(), |r| r.data.as_ptr()),
            ),
            _ => (None, core::ptr::null(), core::ptr::null()),
        };
        let a_len = a.len();
        let (a, d) = (a.as_ptr(), dst.as_mut_ptr());
        // SAFETY: `self` proves AVX-512F is present. For `r < nrows` and
        // `p < kc`, A is read at `rows[r] + p * cs <= rows[r] + span <
        // a.len()`; B at `src.row(p) + runs.b[h] + c` for `c <
        // runs.n[h]` (the caller's contract; other lanes masked off); the
        // destination at `r * ldd + runs.d[h] + c` for `c < runs.n[h]`,
        // within `dst` by `d_fits` (other lanes masked off, and the second
        // half touched only when `n1 > 0`); C, for `FusedC::Rows` (contiguous
        // runs only), at `base + r * rs + c`, within C by `Fused::new`;
        // the residual likewise (contiguous runs only), within it by
        // `Fused::new`. Three runs and the extra column come with eight
        // adjacent rows (checked above), the extra column's destination
        // within `dst` by `x_fits` and its B by the caller's contract.
        unsafe {
            macro_rules! wide {
                ($x:literal, $pf:literal) => {
                    kernel_r32::<8, 3, $pf, ADJACENT, $x, S>(
                        kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                    )
                };
            }
            macro_rules! rows {
                ($h:literal, $pf:literal) => {
                    match nrows {
                        1 => kernel_r32::<1, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        2 => kernel_r32::<2, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        3 => kernel_r32::<3, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        4 => kernel_r32::<4, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        5 => kernel_r32::<5, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        6 => kernel_r32::<6, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        7 => kernel_r32::<7, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        _ if adjacent => kernel_r32::<8, $h, $pf, ADJACENT, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        _ if stepped => kernel_r32::<8, $h, $pf, STEPPED, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                        _ => kernel_r32::<8, $h, $pf, APART, false, S>(
                            kc, a, rows, cs, src, d, ldd, runs, load, epi, cdata, rdata,
                        ),
                    }
                };
            }
            // A strip of at most 16 columns skips the FMAs of the other half;
            // A small enough to stay in cache is not prefetched.
            match (n1 > 0, a_len > PREFETCH_FROM) {
                _ if n2 > 0 => match (extra, a_len > PREFETCH_FROM) {
                    (true, true) => wide!(true, true),
                    (true, false) => wide!(true, false),
                    (false, true) => wide!(false, true),
                    (false, false) => wide!(false, false),
                },
                (true, true) => rows!(2, true),
                (true, false) => rows!(2, false),
                (false, true) => rows!(1, true),
                (false, false) => rows!(1, false),
            }
        }
        // The extra column's sums were stored as they are: its epilogue runs
        // here, with the whole tile's when that is not fused.
        let xcols = usize::from(extra);
        if fused.is_none() && contiguous {
            finish(dst, ldd, nrows, ncols + xcols, tail);
        } else {
            if let (true, Some(t), Some(col)) = (extra, tail, dst.get_mut(ncols..)) {
                finish_column(col, ldd, nrows, Some(Tail { j0: t.j0 + ncols, ..t }));
            }
            if let Some(s) = tail.and_then(|t| t.epi.smooth).filter(|_| contiguous) {
                smooth_block(s, dst, ldd, nrows, ncols);
            }
        }
        true
    }
}

/// [`kernel_r32`]'s rows of A: at `rows[r]`, each its own pointer.
const APART: u8 = 0;
/// [`kernel_r32`]'s rows of A: at `rows[0] + r`.
const ADJACENT: u8 = 1;
/// [`kernel_r32`]'s rows of A: at `rows[0] + r * step` (`R == 8`).
const STEPPED: u8 = 2;

/// `R` rows and `H` runs of 16 columns of [`Avx512::kernel`], prefetching
/// A with `PF`, its rows laid out as `ROWS` says, and with `X` (eight
/// adjacent rows, three runs) one more column, B's and the destination's
/// column 48, summed in an eight-lane vector over the rows and stored
/// without the epilogue; the caller
/// guarantees the bounds described there for `r < R` and each half `h < H`
/// (`runs.n[h]` columns, the last half not empty), and for C at `cdata`
/// when `epi` has a `FusedC::Rows` term, and for the residual at `rdata`
/// when it has one.
///
/// The arguments stay scalars (not a struct): this call is not inlined, and
/// a struct would reach the loop through memory (0.5-1% slower on 64^3
/// products, measured).
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn kernel_r32<
    const R: usize,
    const H: usize,
    const PF: bool,
    const ROWS: u8,
    const X: bool,
    S: BRows,
>(
    kc: usize,
    a: *const f32,
    rows: &[usize; MR],
    cs: usize,
    src: S,
    d: *mut f32,
    ldd: usize,
    runs: Runs,
    load: bool,
    epi: Option<&Fused>,
    cdata: *const f32,
    rdata: *const f32,
) {
    let masks: [__mmask16; H] = core::array::from_fn(|h| lanes(runs.n[h]));
    let mut c: [[__m512; H]; R] = [[_mm512_setzero_ps(); H]; R];
    // The extra column's sums, lane `r` for row `r`.
    let mut cx = _mm256_setzero_ps();
    if load {
        if X {
            // SAFETY: with `X`, column 48 of the destination's eight rows
            // is within it (the caller's bounds).
            let col: [f32; 8] = core::array::from_fn(|r| unsafe { *d.add(r * ldd + 3 * 16) });
            // SAFETY: `col` holds eight floats.
            cx = unsafe { _mm256_loadu_ps(col.as_ptr()) };
        }
        for (r, row) in c.iter_mut().enumerate() {
            for (h, (v, &m)) in row.iter_mut().zip(&masks).enumerate() {
                // SAFETY: row `r < R`, half `h` of the destination holds
                // `runs.n[h]` floats from `d + r * ldd + runs.d[h]`;
                // masked lanes are not read.
                *v = unsafe { _mm512_maskz_loadu_ps(m, d.wrapping_add(r * ldd + runs.d[h])) };
            }
        }
    }
    // SAFETY (whole loop): see the caller's bounds; `off` stays below
    // `kc * cs`, `bp` is B's row `p < kc`, lanes past `runs.n[h]` masked.
    // The caller passes `ADJACENT` only when `rows[r] == rows[0] + r`, and
    // `STEPPED` only with `R == 8` and `rows[r] == rows[0] + r * ls`, so
    // the addresses formed from `a0` and `a4` are the rows' own.
    unsafe {
        let ap: [*const f32; R] = core::array::from_fn(|r| a.add(rows[r]));
        // Row pointers kept apart spill on x86-64 (eight of them beside
        // the loop's own registers). With `ROWS == ADJACENT`, row `r`
        // starts at `rows[0] + r` (a panel): one base pointer and constant
        // displacements. With `ROWS == STEPPED` (`R == 8`), at `rows[0] + r
        // * ls` (a matrix read in place): two base pointers, four rows
        // apart, and the step.
        let a0 = a.add(rows[0]);
        let ls = rows[R - 1].wrapping_sub(rows[0]) / (R - 1).max(1);
        let a4 = a0.wrapping_add(4 * ls);
        let mut off = 0usize;
        // A is read from L2 or further: one row is prefetched per step,
        // `PREFETCH` steps ahead, the rows in turn (a row needs a new line
        // every 16 steps at `cs == 1`; with rows packed in panels, every
        // row's line is the same); past the tile's last step, in panels,
        // that is the next panel's start (the direct convolution's next
        // tile). A hint only: it never faults, and addresses past A are
        // computed with wrapping arithmetic and not read.
        let ahead = PREFETCH * cs;
        for p in 0..kc {
            if PF {
                // Adjacent rows share their lines: one address serves all.
                let at = match ROWS {
                    ADJACENT => a0.wrapping_add(off),
                    _ => ap[p % R].wrapping_add(off),
                };
                _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(ahead).cast::<i8>());
            }
            let bp = src.row(p);
            let bv: [__m512; H] = core::array::from_fn(|h| {
                _mm512_maskz_loadu_ps(masks[h], bp.wrapping_add(runs.b[h]))
            });
            if X {
                // The eight rows of the panel at this step, times column 48.
                let av = _mm256_loadu_ps(a0.add(off));
                cx = _mm256_fmadd_ps(av, _mm256_set1_ps(*bp.add(3 * 16)), cx);
            }
            for r in 0..R {
                let x = _mm512_set1_ps(match ROWS {
                    ADJACENT => *a0.add(off + r),
                    STEPPED => *(if r < 4 { a0 } else { a4 }).add(off + (r % 4) * ls),
                    _ => *ap[r].add(off),
                });
                for h in 0..H {
                    c[r][h] = _mm512_fmadd_ps(x, bv[h], c[r][h]);
                }
            }
            off += cs;
        }
    }
    // The epilogue in the order of `Epilogue::one`, one step at a time
    // over every sum: each step's choice is made once per tile, and the
    // sums stay in registers.
    if let Some(f) = epi {
        if f.alpha != 1.0 {
            let alpha = _mm512_set1_ps(f.alpha);
            c.iter_mut().flatten().for_each(|v| *v = _mm512_mul_ps(*v, alpha));
        }
        if let Some(bias) = &f.bias {
            for (row, &b) in c.iter_mut().zip(bias) {
                let b = _mm512_set1_ps(b);
                row.iter_mut().for_each(|v| *v = _mm512_add_ps(*v, b));
            }
        }
        match f.c {
            FusedC::None => {}
            FusedC::Rows { base, rs, beta } => {
                let beta = _mm512_set1_ps(beta);
                for (r, row) in c.iter_mut().enumerate() {
                    for (h, (v, &m)) in row.iter_mut().zip(&masks).enumerate() {
                        // SAFETY: lanes below `ncols` of row `r` of C,
                        // checked by `Fused::new`; the rest are masked.
                        let cv =
                            unsafe { _mm512_maskz_loadu_ps(m, cdata.add(base + r * rs + h * 16)) };
                        *v = _mm512_add_ps(*v, _mm512_mul_ps(beta, cv));
                    }
                }
            }
            FusedC::PerRow(t) => {
                for (row, &t) in c.iter_mut().zip(&t) {
                    let t = _mm512_set1_ps(t);
                    row.iter_mut().for_each(|v| *v = _mm512_add_ps(*v, t));
                }
            }
        }
        if let Some((base, rs)) = f.res {
            for (r, row) in c.iter_mut().enumerate() {
                for (h, (v, &m)) in row.iter_mut().zip(&masks).enumerate() {
                    // SAFETY: lanes below `ncols` of row `r` of the residual,
                    // checked by `Fused::new`; the rest are masked.
                    let rv = unsafe { _mm512_maskz_loadu_ps(m, rdata.add(base + r * rs + h * 16)) };
                    *v = _mm512_add_ps(*v, rv);
                }
            }
        }
        activate_all(c.as_flattened_mut(), f.act);
    }
    for (r, row) in c.iter().enumerate() {
        for (h, (v, &m)) in row.iter().zip(&masks).enumerate() {
            // SAFETY: as for the loads above.
            unsafe { _mm512_mask_storeu_ps(d.wrapping_add(r * ldd + runs.d[h]), m, *v) };
        }
    }
    if X {
        let mut col = [0.0f32; 8];
        // SAFETY: `col` holds eight floats.
        unsafe { _mm256_storeu_ps(col.as_mut_ptr(), cx) };
        for (r, v) in col.iter().enumerate() {
            // SAFETY: as for the extra column's loads above.
            unsafe { *d.add(r * ldd + 3 * 16) = *v };
        }
    }
}

/// `C` columns of [`Avx512::columns`]: `acc[c][r] += sum_p a[p * cs + r] *
/// b[p * ldb + c]` for the lanes `r` in `m`, the steps of `p` spread over
/// four sums (added at the end) so consecutive FMAs do not wait on each
/// other. The caller guarantees A's and B's bounds for `p < kc`.
#[target_feature(enable = "avx512f")]
unsafe fn columns512<const C: usize>(
    kc: usize,
    a: *const f32,
    cs: usize,
    b: *const f32,
    ldb: usize,
    m: __mmask16,
    acc: &mut [[f32; 16]; 4],
) {
    let mut s = [[_mm512_setzero_ps(); C]; 4];
    for (c, v) in s[0].iter_mut().enumerate() {
        // SAFETY: `acc[c]` holds 16 floats.
        *v = unsafe { _mm512_loadu_ps(acc[c].as_ptr()) };
    }
    // SAFETY: every `p` below is below `kc`; the caller's bounds.
    unsafe {
        macro_rules! step {
            ($s:expr, $p:expr) => {{
                let av = _mm512_maskz_loadu_ps(m, a.add($p * cs));
                let bp = b.add($p * ldb);
                for (c, v) in $s.iter_mut().enumerate() {
                    *v = _mm512_fmadd_ps(av, _mm512_set1_ps(*bp.add(c)), *v);
                }
            }};
        }
        let mut p = 0;
        while p + 4 <= kc {
            for (u, su) in s.iter_mut().enumerate() {
                step!(su, p + u);
            }
            p += 4;
        }
        while p < kc {
            step!(s[0], p);
            p += 1;
        }
    }
    for c in 0..C {
        let v = _mm512_add_ps(_mm512_add_ps(s[0][c], s[1][c]), _mm512_add_ps(s[2][c], s[3][c]));
        // SAFETY: `acc[c]` holds 16 floats.
        unsafe { _mm512_storeu_ps(acc[c].as_mut_ptr(), v) };
    }
}

/// [`activate`] on every vector of `v`, the activation chosen once.
#[target_feature(enable = "avx512f")]
#[inline]
fn activate_all(v: &mut [__m512], act: Activation) {
    match act {
        Activation::None => {}
        Activation::Relu => v.iter_mut().for_each(|x| *x = activate(*x, Activation::Relu)),
        Activation::LeakyRelu { alpha } => {
            let act = Activation::LeakyRelu { alpha };
            v.iter_mut().for_each(|x| *x = activate(*x, act));
        }
        Activation::Clip { min, max } => {
            let act = Activation::Clip { min, max };
            v.iter_mut().for_each(|x| *x = activate(*x, act));
        }
    }
}

#[cfg(test)]
#[target_feature(enable = "avx512f")]
#[inline]
fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// [`Micro::run_body`] on AVX-512: `body.run` (`#[inline(always)]`)
/// compiled here.
#[target_feature(enable = "avx512f")]
#[inline]
fn body_avx512<V: Vectorize>(body: V) -> V::Output {
    body.run()
}

impl Avx512 {
    /// `out[j] = sum_p a[p] * b[j * cs + p]`: eight columns at a time, each
    /// summed in sixteen lanes (a different summation order from the exact
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
        // SAFETY: `self` proves AVX-512F is present; column `j < n` is read
        // at `j * cs + 0..k`, below `(n - 1) * cs + k <= b.len()`, and `a`
        // at `0..k`.
        unsafe { dots512(k, a.as_ptr(), b.as_ptr(), cs, out) }
    }
}

/// See [`Avx512::dots`]; the caller guarantees the bounds described there.
#[target_feature(enable = "avx512f")]
unsafe fn dots512(k: usize, a: *const f32, b: *const f32, cs: usize, out: &mut [f32]) {
    const G: usize = 8;
    let (full, rem) = (k / 16, k % 16);
    let tail = lanes(rem);
    let n = out.len();
    let mut j = 0;
    // SAFETY (both loops): reads stay within `a[..k]` and the columns
    // `b[j * cs..j * cs + k]` (the last chunk masked to `rem` lanes).
    unsafe {
        while j + G <= n {
            let cols: [*const f32; G] = core::array::from_fn(|c| b.add((j + c) * cs));
            let mut acc = [_mm512_setzero_ps(); G];
            for t in 0..full {
                let x = _mm512_loadu_ps(a.add(16 * t));
                for c in 0..G {
                    acc[c] = _mm512_fmadd_ps(x, _mm512_loadu_ps(cols[c].add(16 * t)), acc[c]);
                }
            }
            if rem > 0 {
                let x = _mm512_maskz_loadu_ps(tail, a.add(16 * full));
                for c in 0..G {
                    let w = _mm512_maskz_loadu_ps(tail, cols[c].add(16 * full));
                    acc[c] = _mm512_fmadd_ps(x, w, acc[c]);
                }
            }
            for (o, s) in out[j..j + G].iter_mut().zip(acc) {
                *o = _mm512_reduce_add_ps(s);
            }
            j += G;
        }
        while j < n {
            let col = b.add(j * cs);
            let mut acc = _mm512_setzero_ps();
            for t in 0..full {
                acc = _mm512_fmadd_ps(
                    _mm512_loadu_ps(a.add(16 * t)),
                    _mm512_loadu_ps(col.add(16 * t)),
                    acc,
                );
            }
            if rem > 0 {
                let x = _mm512_maskz_loadu_ps(tail, a.add(16 * full));
                acc = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(tail, col.add(16 * full)), acc);
            }
            out[j] = _mm512_reduce_add_ps(acc);
            j += 1;
        }
    }
}

impl Avx512 {
    /// `y[j] = sum_p a[p] * B(p, j)` for `j < y.len()`, with B in strips of
    /// [`crate::simd::gemm::pack::STRIP`] columns (`strips[s * STRIP * k + p * STRIP + c]` is
    /// `B(p, s * STRIP + c)`, `k = a.len()`). Each sum is a chain of fused
    /// multiply-adds in ascending `p`, starting from zero. Four strips are
    /// read at once, as four streams. The strips cover `y` (the caller's
    /// bound: a panic in debug builds, nothing done in release builds).
    pub(crate) fn strips_row(self, a: &[f32], strips: &[f32], y: &mut [f32]) {
        let (k, n) = (a.len(), y.len());
        let need = n.div_ceil(NR).checked_mul(NR * k);
        if n == 0 {
            return;
        }
        debug_assert!(
            need.is_some_and(|v| v <= strips.len()),
            "strips_row: {n} columns of {k} steps in {} floats of strips",
            strips.len()
        );
        if need.is_none_or(|v| v > strips.len()) {
            return;
        }
        if k == 0 {
            y.fill(0.0);
            return;
        }
        // SAFETY: `self` proves AVX-512F is present; strip `s < n / NR`
        // (rounded up) is read at `s * NR * k..(s + 1) * NR * k`, within
        // `need <= strips.len()`, `a` at `0..k` and `y` at `0..n`.
        unsafe { strips_row512(k, a.as_ptr(), strips.as_ptr(), y) }
    }
}

/// How many strips [`strips_row512`] reads at once with `left` columns
/// still to do: four, two or one, never more than the columns need.
pub(in crate::simd) fn strips_at_once(left: usize) -> usize {
    if left > 3 * NR {
        4
    } else if left > NR {
        2
    } else {
        1
    }
}

/// See [`Avx512::strips_row`]; the caller guarantees its bounds.
#[target_feature(enable = "avx512f")]
unsafe fn strips_row512(k: usize, a: *const f32, b: *const f32, y: &mut [f32]) {
    let n = y.len();
    let mut s = 0;
    while s * NR < n {
        let left = n - s * NR;
        let g = strips_at_once(left);
        // SAFETY: `strips_at_once` takes `g` strips only when more than
        // `(g - 1) * NR` columns are left, so strips `s..s + g` are among
        // the `n.div_ceil(NR)` the caller guarantees.
        unsafe {
            let base = b.add(s * NR * k);
            let out = &mut y[s * NR..];
            match g {
                4 => strips_group::<4>(k, a, base, out),
                2 => strips_group::<2>(k, a, base, out),
                _ => strips_group::<1>(k, a, base, out),
            }
        }
        s += g;
    }
}

/// `G` strips from `b` (`G * NR * k` floats, the last strips possibly past
/// the end of `out`'s columns but within the strips) into `out[..G * NR]`
/// (stored up to `out.len()`).
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn strips_group<const G: usize>(k: usize, a: *const f32, b: *const f32, out: &mut [f32]) {
    let len = NR * k;
    let mut acc = [[_mm512_setzero_ps(); 2]; G];
    // SAFETY: the caller guarantees `G` strips of `len` floats at `b` and
    // `k` floats at `a`.
    unsafe {
        for p in 0..k {
            let x = _mm512_set1_ps(*a.add(p));
            for (c, sums) in acc.iter_mut().enumerate() {
                let row = b.add(c * len + p * NR);
                sums[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(row), sums[0]);
                sums[1] = _mm512_fmadd_ps(x, _mm512_loadu_ps(row.add(16)), sums[1]);
            }
        }
        for (c, sums) in acc.iter().enumerate() {
            for (h, v) in sums.iter().enumerate() {
                let at = c * NR + 16 * h;
                let m = lanes(out.len().saturating_sub(at));
                if m != 0 {
                    _mm512_mask_storeu_ps(out.as_mut_ptr().add(at), m, *v);
                }
            }
        }
    }
}
