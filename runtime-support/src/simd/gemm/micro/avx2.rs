//! The AVX2+FMA micro-kernel: a 6 x 16 tile of f32 sums in twelve `ymm`
//! registers, one broadcast of A and two loads of B per step.
//!
//! Two invariants make the unsafe code sound: an [`Avx2`] value exists only
//! after the CPU was found to support AVX2 and FMA (see
//! [`crate::simd::isa::avx2`]; so the `target_feature` function may run),
//! and [`Micro::kernel`] checks every index the loop will read or write
//! before entering it.

use crate::simd::Vectorize;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Fused;
use crate::simd::gemm::epilogue::FusedC;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::epilogue::block_fits;
use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::epilogue::smooth_block;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::rows::{BRows, BTable, DstRuns, Runs, Strided};
use crate::simd::isa::avx2::{Avx2, lanes_in_row, store_lanes};
use crate::simd::lanes::activate;
use crate::simd::math::vexp::{self, VFunc, eval256};
use core::arch::x86_64::{
    __m256, __m256i, _mm256_add_ps, _mm256_broadcast_ss, _mm256_fmadd_ps, _mm256_loadu_ps,
    _mm256_maskload_ps, _mm256_mul_ps, _mm256_set1_epi32, _mm256_set1_ps, _mm256_setzero_ps,
    _mm256_storeu_ps,
};

const MR: usize = 6;
const NR: usize = 16;

impl Micro for Avx2 {
    const MR: usize = MR;
    const NR: usize = NR;
    /// 256 rows by 256 steps of A are 256 KiB, half of Zen 3's L2. With 96,
    /// an im2col B was packed again for each of three blocks of rows of a
    /// 256-channel layer (Zen 3: YOLO's 128->256 3x3/2 at 20x20 1.27 ->
    /// 0.98 ms, the audio encoder's 256->256 k3/2 over 3199 10.1 -> 9.0).
    const MC: usize = 256;
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
        debug_assert_eq!(rows.len(), MR, "AVX2 tile: one A row offset per tile row");
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return };
        if nrows == 0 || ncols == 0 {
            return;
        }
        if ldb != NR || b.len() < kc * NR {
            // B read in place ([`Micro::DIRECT_B`]): rows `ldb` apart (and
            // perhaps `NR` apart, with the last row shorter than a strip's).
            let ncols = ncols.min(NR);
            let b_need = (kc.max(1) - 1).checked_mul(ldb).and_then(|v| v.checked_add(ncols));
            let b_fits = kc > 0 && b_need.is_some_and(|v| v <= b.len());
            debug_assert!(b_fits, "AVX2 tile: kc {kc} > 0 rows of B, {ldb} apart, in {}", b.len());
            if !b_fits {
                return;
            }
            let a = ARows { data: a, rows, cs };
            let b = Strided { b: b.as_ptr(), ldb };
            let dst = DstRuns { data: dst, ldd, nrows, runs: Runs::split(ncols, 8), load };
            // SAFETY: row `p < kc` of B starts at `p * ldb` and holds `ncols`
            // floats: `(kc - 1) * ldb + ncols <= b.len()` was checked above.
            let done = unsafe { self.runs(Tile { kc, a, b, dst, tail }) };
            debug_assert!(done, "AVX2 tile: A rows {rows:?} or a {nrows}x{ncols} destination");
            return;
        }
        let b_fits = kc > 0 && ldd > 0 && ldb == NR && b.len() >= kc * NR;
        debug_assert!(
            b_fits,
            "AVX2 tile: kc {kc} and ldd {ldd} above 0, B a packed strip ({ldb} wide, {} floats)",
            b.len()
        );
        if !b_fits {
            return;
        }
        let a_fits = a_rows_fit(rows, kc, cs, a.len());
        debug_assert!(
            a_fits,
            "AVX2 tile: A rows {rows:?} + (kc - 1) * {cs} within A's {} floats",
            a.len()
        );
        if !a_fits {
            return;
        }
        if nrows >= MR && ncols >= NR && block_fits(dst, ldd, MR, NR) {
            let fused = tail.as_ref().and_then(|t| Fused::new(t, MR, NR));
            let regs = Regs::new(fused, tail.as_ref());
            // SAFETY: `self` proves AVX2 and FMA are present. Every A read is
            // at `rows[r] + p * cs` with `p < kc`, at most `rows[r] + (kc - 1) *
            // cs < a.len()` (`a_rows_fit`); B reads are `p * 16 + 0..16 < kc * 16 <= b.len()`;
            // the tile is read and written at `r * ldd + 0..16` for `r < 6`,
            // within `dst` by `block_fits`; C and the residual at their
            // bases plus `r * rs + 0..16`, within them by `Fused::new`.
            unsafe {
                kernel_6x16(
                    self,
                    kc,
                    a.as_ptr(),
                    rows,
                    cs,
                    b.as_ptr(),
                    dst.as_mut_ptr(),
                    ldd,
                    load,
                    regs.as_ref(),
                )
            }
            finish_rows(regs.as_ref(), dst, ldd, MR, NR, tail);
            return;
        }
        // An edge tile: the sums go through a full tile on the stack.
        let (nrows, ncols) = (nrows.min(MR), ncols.min(NR));
        let d_fits = block_fits(dst, ldd, nrows, ncols);
        debug_assert!(
            d_fits,
            "AVX2 tile: {nrows}x{ncols} rows {ldd} apart within Y's {} floats",
            dst.len()
        );
        if !d_fits {
            return;
        }
        let mut tile = [0.0f32; MR * NR];
        if load {
            for (t, d) in tile.chunks_exact_mut(NR).zip(dst.chunks(ldd)).take(nrows) {
                t[..ncols].copy_from_slice(&d[..ncols]);
            }
        }
        // SAFETY: as above for A and B; the tile is exactly `6 * 16` floats
        // with row stride 16.
        unsafe {
            kernel_6x16(
                self,
                kc,
                a.as_ptr(),
                rows,
                cs,
                b.as_ptr(),
                tile.as_mut_ptr(),
                NR,
                load,
                None,
            )
        }
        for (t, d) in tile.chunks_exact(NR).zip(dst.chunks_mut(ldd)).take(nrows) {
            d[..ncols].copy_from_slice(&t[..ncols]);
        }
        finish(dst, ldd, nrows, ncols, tail);
    }

    #[inline(always)]
    fn strips(self, t: Tile<'_>, step: usize) -> usize {
        let Tile {
            kc,
            a: ARows { data: a, rows, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return 0 };
        let count = ncols / NR;
        if nrows != MR || count == 0 || kc == 0 || ldb != NR {
            return 0;
        }
        let cols = count * NR;
        // The last strip's last row ends at `(count - 1) * step + kc * NR`.
        let b_need = (count - 1).checked_mul(step).and_then(|v| v.checked_add(kc * NR));
        let a_fits = a_rows_fit(rows, kc, cs, a.len());
        if b_need.is_none_or(|v| v > b.len()) || !a_fits || !block_fits(dst, ldd, MR, cols) {
            return 0;
        }
        // One check of C and the residual over every column.
        let fused = match tail.as_ref() {
            None => None,
            Some(t) => match Fused::new(t, MR, cols) {
                Some(f) => Some(f),
                None => return 0,
            },
        };
        let regs = Regs::new(fused, tail.as_ref());
        for s in 0..count {
            let j = s * NR;
            let here = regs.as_ref().map(|r| r.shifted(j));
            // SAFETY: `self` proves AVX2 and FMA are present. A is read at
            // `rows[r] + p * cs < a.len()` for `p < kc` (`a_rows_fit`);
            // B at `s * step + p * 16 + 0..16`, below `(count - 1) * step +
            // kc * 16 <= b.len()`; the destination at `r * ldd + j + 0..16`
            // for `r < 6`, within `dst` by `block_fits` over `cols >= j +
            // 16` columns; C and the residual at their bases shifted by `j`
            // plus `r * rs + 0..16`, within them by `Fused::new` over all
            // `cols` columns.
            unsafe {
                kernel_6x16(
                    self,
                    kc,
                    a.as_ptr(),
                    rows,
                    cs,
                    b.as_ptr().add(s * step),
                    dst.as_mut_ptr().add(j),
                    ldd,
                    load,
                    here.as_ref(),
                )
            }
            if let Some(tile) = dst.get_mut(j..) {
                let tail = tail.map(|t| Tail { j0: t.j0 + j, ..t });
                finish_rows(here.as_ref(), tile, ldd, MR, NR, tail);
            }
        }
        count
    }

    #[cfg(test)]
    #[inline(always)]
    fn within<R>(self, f: impl FnOnce() -> R) -> R {
        self.vectorized(f)
    }

    #[inline(always)]
    fn run_body<V: Vectorize>(self, body: V) -> V::Output {
        self.vectorize(body)
    }
}

/// Whether every A row offset in `rows` plus `(kc - 1) * cs` (the last
/// step a tile of `kc >= 1` steps reads) lies below `len`, without
/// overflow.
#[inline(always)]
fn a_rows_fit(rows: &[usize], kc: usize, cs: usize, len: usize) -> bool {
    let Some(span) = (kc.max(1) - 1).checked_mul(cs) else { return false };
    rows.iter().all(|&r| r.checked_add(span).is_some_and(|last| last < len))
}

/// A tile's epilogue in registers: the [`Fused`] steps, C's and the
/// residual's storage (null where it has none), and the smooth activation
/// when the kernel applies it there too.
#[derive(Clone, Copy)]
struct Regs {
    fused: Fused,
    cdata: *const f32,
    rdata: *const f32,
    smooth: Option<VFunc>,
}

impl Regs {
    /// The registers' epilogue of `tail` for a tile: `None` without
    /// `fused` (the rows are then finished in memory). The smooth
    /// activation comes along where the standalone op runs the same
    /// eight-lane routine ([`vexp::runs_avx2`]; fused or not, the results
    /// stay the same); otherwise it is applied to the stored rows.
    fn new(fused: Option<Fused>, tail: Option<&Tail<'_>>) -> Option<Regs> {
        let (fused, t) = (fused?, tail?);
        Some(Regs {
            fused,
            cdata: t.epi.c.map_or(core::ptr::null(), |c| c.data.as_ptr()),
            rdata: t.epi.res.map_or(core::ptr::null(), |r| r.data.as_ptr()),
            smooth: t.epi.smooth.and_then(|s| s.vector()).filter(|_| vexp::runs_avx2()),
        })
    }

    /// The same epilogue for the tile `j` columns to the right.
    #[inline(always)]
    fn shifted(&self, j: usize) -> Regs {
        Regs { fused: self.fused.shifted(j), ..*self }
    }
}

/// Applies to the stored rows of a tile what its registers did not: the
/// whole epilogue without `regs`, else a smooth activation left out of
/// them.
#[inline(always)]
fn finish_rows(
    regs: Option<&Regs>,
    dst: &mut [f32],
    ldd: usize,
    nrows: usize,
    ncols: usize,
    tail: Option<Tail<'_>>,
) {
    match (regs, tail.and_then(|t| t.epi.smooth)) {
        (None, _) => finish(dst, ldd, nrows, ncols, tail),
        (Some(r), Some(s)) if r.smooth.is_none() => smooth_block(s, dst, ldd, nrows, ncols),
        (Some(_), _) => {}
    }
}

/// The epilogue `regs` on the sums of `R` rows, in the order of
/// [`Epilogue::one`](crate::simd::gemm::epilogue::Epilogue::one) (alpha,
/// bias, C, residual, activation, smooth activation), while they are in
/// registers: vector `h` of row `r` holds columns `8 * h..8 * h + 8`, of
/// which the lanes of `masks[h]` are the tile's (`H` vectors a row).
///
/// # Safety
/// For `FusedC::Rows`, C is readable at `regs.cdata + base + r * rs + 8 *
/// h + l` for the lanes `l` of `masks[h]`, and the residual likewise at
/// `regs.rdata` (what [`Fused::new`] checked over the tile's columns); the
/// caller is compiled with AVX2 and FMA. (Inlined there with its
/// intrinsics: called as a function, it took the sums through memory.)
#[inline(always)]
unsafe fn fuse<const R: usize, const H: usize>(
    cpu: Avx2,
    c: &mut [[__m256; 2]; R],
    regs: &Regs,
    masks: [__m256i; 2],
) {
    let Regs { fused: ref f, cdata, rdata, smooth } = *regs;
    // Plain loops, no closures: a closure is a function of its own, compiled
    // without AVX2, and its intrinsics would not be inlined.
    // SAFETY: the caller runs on AVX2 and FMA; C and the residual are read
    // only at the lanes of `masks[h]` of the rows the caller guarantees
    // (other lanes are not accessed).
    unsafe {
        if f.alpha != 1.0 {
            let alpha = _mm256_set1_ps(f.alpha);
            for row in c.iter_mut() {
                for v in &mut row[..H] {
                    *v = _mm256_mul_ps(*v, alpha);
                }
            }
        }
        if let Some(bias) = &f.bias {
            for (row, &b) in c.iter_mut().zip(bias) {
                let b = _mm256_set1_ps(b);
                for v in &mut row[..H] {
                    *v = _mm256_add_ps(*v, b);
                }
            }
        }
        match f.c {
            FusedC::None => {}
            FusedC::Rows { base, rs, beta } => {
                let beta = _mm256_set1_ps(beta);
                for (r, row) in c.iter_mut().enumerate() {
                    for (h, v) in row[..H].iter_mut().enumerate() {
                        let cv = _mm256_maskload_ps(cdata.add(base + r * rs + 8 * h), masks[h]);
                        *v = _mm256_add_ps(*v, _mm256_mul_ps(beta, cv));
                    }
                }
            }
            FusedC::PerRow(t) => {
                for (row, &t) in c.iter_mut().zip(&t) {
                    let t = _mm256_set1_ps(t);
                    for v in &mut row[..H] {
                        *v = _mm256_add_ps(*v, t);
                    }
                }
            }
        }
        if let Some((base, rs)) = f.res {
            for (r, row) in c.iter_mut().enumerate() {
                for (h, v) in row[..H].iter_mut().enumerate() {
                    let rv = _mm256_maskload_ps(rdata.add(base + r * rs + 8 * h), masks[h]);
                    *v = _mm256_add_ps(*v, rv);
                }
            }
        }
        let act = f.act;
        if act != Activation::None {
            for row in c.iter_mut() {
                for v in &mut row[..H] {
                    *v = activate(cpu, *v, act);
                }
            }
        }
        // The standalone op's eight-lane routine (`Regs::new`), inlined,
        // on two rows at a time (four chains to overlap; a row's second
        // vector is evaluated even when `H` is 1, and left unstored).
        if let Some(g) = smooth {
            let mut r = 0;
            while r + 2 <= R {
                let mut v = [c[r][0], c[r][1], c[r + 1][0], c[r + 1][1]];
                eval256(g, &mut v);
                c[r] = [v[0], v[1]];
                c[r + 1] = [v[2], v[3]];
                r += 2;
            }
            if r < R {
                eval256(g, &mut c[r]);
            }
        }
    }
}

/// See [`Avx2::kernel`]; the caller guarantees the bounds described there:
/// A at `a + rows[r] + p * cs`, B at `b + p * 16 + 0..16` for `p < kc`,
/// the tile at `t + r * ldt + 0..16` for `r < 6`, and with `regs`, C and
/// the residual as [`fuse`] reads them. (Scalar
/// arguments: this call is not inlined, and a struct of A's rows would
/// reach the loop through memory: 1% slower on 64^3 products, measured.)
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_6x16(
    cpu: Avx2,
    kc: usize,
    a: *const f32,
    rows: &[usize; MR],
    cs: usize,
    b: *const f32,
    t: *mut f32,
    ldt: usize,
    load: bool,
    regs: Option<&Regs>,
) {
    let mut c: [[__m256; 2]; MR] = [[_mm256_setzero_ps(); 2]; MR];
    if load {
        for (r, row) in c.iter_mut().enumerate() {
            // SAFETY: r * ldt + 16 is within the tile (caller's bounds).
            unsafe {
                row[0] = _mm256_loadu_ps(t.add(r * ldt));
                row[1] = _mm256_loadu_ps(t.add(r * ldt + 8));
            }
        }
    }
    // SAFETY (whole loop): see the caller's bounds; `off` stays below
    // `kc * cs` and `bp` below `b + kc * 16`.
    unsafe {
        let ap: [*const f32; MR] = core::array::from_fn(|r| a.add(rows[r]));
        let mut bp = b;
        let mut off = 0usize;
        for _ in 0..kc {
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for r in 0..MR {
                let x = _mm256_broadcast_ss(&*ap[r].add(off));
                c[r][0] = _mm256_fmadd_ps(x, b0, c[r][0]);
                c[r][1] = _mm256_fmadd_ps(x, b1, c[r][1]);
            }
            bp = bp.add(NR);
            off += cs;
        }
    }
    if let Some(f) = regs {
        let all = _mm256_set1_epi32(-1);
        // SAFETY: the caller's bounds for C and the residual over 16 columns.
        unsafe { fuse::<MR, 2>(cpu, &mut c, f, [all, all]) };
    }
    for (r, row) in c.iter().enumerate() {
        // SAFETY: as for the loads above.
        unsafe {
            _mm256_storeu_ps(t.add(r * ldt), row[0]);
            _mm256_storeu_ps(t.add(r * ldt + 8), row[1]);
        }
    }
}

/// How [`kernel_runs`] reads and writes a tile's columns: two whole
/// adjacent vectors, two masked runs, or one masked run.
const FULL: u8 = 0;
const TWO: u8 = 1;
const ONE: u8 = 2;

impl Avx2 {
    /// [`Micro::kernel`] with B's rows in a [`BTable`] and the columns in
    /// [`Runs`] of at most 8 (the third empty). Returns `false`, doing
    /// nothing, when a bound does not hold (`kc` past the table, a B row, A
    /// row or destination row too short) or the tile asks for what this
    /// kernel does not do (a third run, an epilogue over runs that are not
    /// adjacent in the destination).
    #[inline(always)]
    pub(crate) fn kernel_table(self, t: Tile<'_, ARows<'_>, BTable<'_>, DstRuns<'_>>) -> bool {
        let Tile { kc, a, b, dst, tail } = t;
        let Some(b) = b.rows(kc, &dst.runs) else { return false };
        // SAFETY: row `p < kc` of B holds each run `h` of `runs.n[h]`
        // floats from `runs.b[h]` on (checked by `BTable::rows`).
        unsafe { self.runs(Tile { kc, a, b, dst, tail }) }
    }

    /// Checks the destination and A bounds, then runs the tile through
    /// [`kernel_runs`] and its epilogue; `false`, doing nothing, when they
    /// do not hold.
    ///
    /// # Safety
    /// For `p < kc` and each run `h` with `runs.n[h] > 0`,
    /// `t.b.row(p) + runs.b[h]` points at `runs.n[h]` readable floats.
    #[inline(always)]
    unsafe fn runs<S: BRows>(self, t: Tile<'_, ARows<'_>, S, DstRuns<'_>>) -> bool {
        let Tile { kc, a: ARows { data: a, rows, cs }, b: src, dst: out, tail } = t;
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return false };
        let (nrows, runs) = (out.nrows.min(MR), out.runs);
        let [n0, n1, n2] = runs.n;
        if kc == 0 || nrows == 0 || !(1..=8).contains(&n0) || n1 > 8 || n2 != 0 {
            return false;
        }
        let d_fits = out.fits(nrows);
        let DstRuns { data: dst, ldd, load, .. } = out;
        // The epilogue takes each row's columns as one run.
        let adjacent = n1 == 0 || runs.d[1] == runs.d[0] + n0;
        if !d_fits || (!adjacent && tail.is_some()) {
            return false;
        }
        if !a_rows_fit(&rows[..nrows], kc, cs, a.len()) {
            return false;
        }
        let whole = n0 == 8 && n1 == 8 && runs.b[1] == runs.b[0] + 8 && runs.d[1] == runs.d[0] + 8;
        let mode = match (whole, n1 > 0) {
            (true, _) => FULL,
            (false, true) => TWO,
            (false, false) => ONE,
        };
        // The epilogue in registers over columns one after another (the
        // second run, if any, right after a first of 8).
        let ncols = n0 + n1;
        let fused = match tail.as_ref() {
            Some(t) if adjacent && (n1 == 0 || n0 == 8) => Fused::new(t, nrows, ncols),
            _ => None,
        };
        let regs = Regs::new(fused, tail.as_ref());
        let epi = regs.as_ref();
        let (ap, d) = (a.as_ptr(), dst.as_mut_ptr());
        // SAFETY: `self` proves AVX2 and FMA are present. For `r < nrows`
        // and `p < kc`, A is read at `rows[r] + p * cs <= rows[r] + (kc - 1) * cs <
        // a.len()`; B at `src.row(p) + runs.b[h] + c` for `c < runs.n[h]`
        // (the caller's contract; other lanes masked off, and whole
        // vectors only where the runs are 8 long); the destination at
        // `r * ldd + runs.d[h] + c` for `c < runs.n[h]` (read first when
        // `load`), within `dst` by `d_fits` (other lanes masked off); with
        // `epi`, C and the residual at their bases plus `r * rs + c` for `c
        // < n0 + n1` (the runs adjacent, the first 8 long when there are
        // two), within them by `Fused::new`.
        unsafe {
            macro_rules! rows {
                ($r:literal) => {
                    match mode {
                        FULL => kernel_runs::<$r, FULL, S>(
                            self, kc, ap, rows, cs, src, runs, d, ldd, load, epi,
                        ),
                        TWO => kernel_runs::<$r, TWO, S>(
                            self, kc, ap, rows, cs, src, runs, d, ldd, load, epi,
                        ),
                        _ => kernel_runs::<$r, ONE, S>(
                            self, kc, ap, rows, cs, src, runs, d, ldd, load, epi,
                        ),
                    }
                };
            }
            match nrows {
                1 => rows!(1),
                2 => rows!(2),
                3 => rows!(3),
                4 => rows!(4),
                5 => rows!(5),
                _ => rows!(6),
            }
        }
        if let Some(t) = tail
            && let Some(dst) = dst.get_mut(runs.d[0]..)
        {
            finish_rows(epi, dst, ldd, nrows, ncols, Some(t));
        }
        true
    }

    /// `acc[j] += sum_p a[p] * b[p * rs + j]` row by row (ascending `p`,
    /// multiply then add: the portable arithmetic, 8 lanes wide).
    pub(crate) fn axpy_rows(self, a: &[f32], b: &[f32], rs: usize, acc: &mut [f32]) {
        // SAFETY: `self` proves AVX2 is present; the body is safe code.
        unsafe { axpy_rows_avx2(a, b, rs, acc) }
    }

    /// `out[j] = sum_p a[p] * b[j * cs + p]` with sixteen partial sums per
    /// output (a different summation order from the exact kernel).
    pub(crate) fn dots(self, a: &[f32], b: &[f32], cs: usize, out: &mut [f32]) {
        // SAFETY: `self` proves AVX2 is present; the body is safe code.
        unsafe { dots_avx2(a, b, cs, out) }
    }
}

/// The sums of `R` rows of A (`a + rows[r] + p * cs`) by B's rows
/// (`src.row(p)`) over `p < kc`, the columns in `runs` as `MODE` says
/// ([`FULL`], [`TWO`] or [`ONE`]), stored at `d + r * ldd + runs.d[h]`
/// (added to what is there when `load`), through the epilogue `epi` first
/// when there is one.
///
/// # Safety
/// AVX2 and FMA are present; every address above, for `r < R`, `p < kc`
/// and the `runs.n[h]` columns of each run, is in bounds ([`Avx2::runs`]
/// checks them); with `epi`, C and the residual as [`fuse`] reads them.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_runs<const R: usize, const MODE: u8, S: BRows>(
    cpu: Avx2,
    kc: usize,
    a: *const f32,
    rows: &[usize; MR],
    cs: usize,
    src: S,
    runs: Runs,
    d: *mut f32,
    ldd: usize,
    load: bool,
    epi: Option<&Regs>,
) {
    let (m0, m1) = (lanes_in_row(0, runs.n[0] as i32), lanes_in_row(0, runs.n[1] as i32));
    let mut c: [[__m256; 2]; R] = [[_mm256_setzero_ps(); 2]; R];
    // SAFETY (loads, whole loop and stores): the caller's bounds; lanes
    // past a run's length are masked off.
    unsafe {
        if load {
            for (r, acc) in c.iter_mut().enumerate() {
                let t = d.add(r * ldd);
                acc[0] = _mm256_maskload_ps(t.add(runs.d[0]), m0);
                if MODE != ONE {
                    acc[1] = _mm256_maskload_ps(t.add(runs.d[1]), m1);
                }
            }
        }
        let ap: [*const f32; R] = core::array::from_fn(|r| a.add(rows[r]));
        let mut off = 0usize;
        for p in 0..kc {
            let row = src.row(p);
            let (x0, x1) = match MODE {
                FULL => {
                    (_mm256_loadu_ps(row.add(runs.b[0])), _mm256_loadu_ps(row.add(runs.b[0] + 8)))
                }
                TWO => (
                    _mm256_maskload_ps(row.add(runs.b[0]), m0),
                    _mm256_maskload_ps(row.add(runs.b[1]), m1),
                ),
                _ => (_mm256_maskload_ps(row.add(runs.b[0]), m0), _mm256_setzero_ps()),
            };
            for r in 0..R {
                let w = _mm256_broadcast_ss(&*ap[r].add(off));
                c[r][0] = _mm256_fmadd_ps(w, x0, c[r][0]);
                if MODE != ONE {
                    c[r][1] = _mm256_fmadd_ps(w, x1, c[r][1]);
                }
            }
            off += cs;
        }
        if let Some(f) = epi {
            // The caller's bounds for C and the residual over the runs.
            match MODE {
                ONE => fuse::<R, 1>(cpu, &mut c, f, [m0, m1]),
                _ => fuse::<R, 2>(cpu, &mut c, f, [m0, m1]),
            }
        }
        for (r, acc) in c.iter().enumerate() {
            let t = d.add(r * ldd);
            if MODE == FULL {
                _mm256_storeu_ps(t.add(runs.d[0]), acc[0]);
                _mm256_storeu_ps(t.add(runs.d[0] + 8), acc[1]);
            } else {
                store_lanes(t.add(runs.d[0]), m0, acc[0]);
                if MODE == TWO {
                    store_lanes(t.add(runs.d[1]), m1, acc[1]);
                }
            }
        }
    }
}

#[target_feature(enable = "avx2")]
fn axpy_rows_avx2(a: &[f32], b: &[f32], rs: usize, acc: &mut [f32]) {
    let n = acc.len();
    for (p, &av) in a.iter().enumerate() {
        debug_assert!(
            p * rs + n <= b.len(),
            "axpy_rows: B's row {p} ({rs} apart) within its {} floats",
            b.len()
        );
        let Some(row) = b.get(p * rs..p * rs + n) else { return };
        for (y, &bv) in acc.iter_mut().zip(row) {
            *y += av * bv;
        }
    }
}

#[target_feature(enable = "avx2")]
fn dots_avx2(a: &[f32], b: &[f32], cs: usize, out: &mut [f32]) {
    let k = a.len();
    for (j, o) in out.iter_mut().enumerate() {
        debug_assert!(
            j * cs + k <= b.len(),
            "dots: B's column {j} ({cs} apart) within its {} floats",
            b.len()
        );
        let Some(col) = b.get(j * cs..j * cs + k) else { return };
        let mut lanes = [0.0f32; 16];
        let (ac, at) = (a.chunks_exact(16), a.len() / 16 * 16);
        for (x, w) in ac.zip(col.chunks_exact(16)) {
            for l in 0..16 {
                lanes[l] += x[l] * w[l];
            }
        }
        let mut s = 0.0f32;
        for (x, w) in a[at..].iter().zip(&col[at..]) {
            s += x * w;
        }
        *o = lanes.iter().sum::<f32>() + s;
    }
}
