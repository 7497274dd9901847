//! How a tile's B rows and destination columns are addressed when they
//! are not a packed strip and one block: B rows `ldb` apart or from a table
//! of offsets (a staged convolution input read in place), and columns in
//! runs (two output rows of one tile, a wide tile's three blocks). Shared by
//! the x86-64 kernels.

use crate::simd::conv::direct::RowTable;

/// A tile's columns: up to three runs of at most 16, the later ones
/// possibly empty (the third is used by wide tiles only); run `h` reads B's
/// rows from offset `b[h]` and writes the destination's rows from offset
/// `d[h]`, `n[h]` columns.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Runs {
    pub b: [usize; 3],
    pub d: [usize; 3],
    pub n: [usize; 3],
}

impl Runs {
    /// The first `ncols` (at most 48) contiguous columns, in runs of 16.
    pub(crate) fn cols(ncols: usize) -> Runs {
        Runs::split(ncols, 16)
    }

    /// The first `ncols` (at most `3 * width`) contiguous columns, in runs
    /// of `width`.
    pub(crate) fn split(ncols: usize, width: usize) -> Runs {
        let n = |h: usize| ncols.saturating_sub(width * h).min(width);
        Runs { b: [0, width, 2 * width], d: [0, width, 2 * width], n: [n(0), n(1), n(2)] }
    }
}

/// Where row `p` of a tile's B operand starts.
pub(in crate::simd) trait BRows: Copy {
    /// The first of the row's floats.
    ///
    /// # Safety
    /// `p` is below the `kc` the source was checked for.
    unsafe fn row(self, p: usize) -> *const f32;
}

/// B's rows `ldb` floats apart (a packed strip, or a matrix read in place).
#[derive(Clone, Copy)]
pub(in crate::simd) struct Strided {
    pub b: *const f32,
    pub ldb: usize,
}

impl BRows for Strided {
    #[inline(always)]
    unsafe fn row(self, p: usize) -> *const f32 {
        self.b.wrapping_add(p * self.ldb)
    }
}

/// B's row `p` at `b + offs[p]` (a staged convolution input).
#[derive(Clone, Copy)]
pub(in crate::simd) struct Table {
    pub b: *const f32,
    pub offs: *const u32,
}

impl BRows for Table {
    #[inline(always)]
    unsafe fn row(self, p: usize) -> *const f32 {
        // SAFETY: the caller keeps `p` below the table's length.
        self.b.wrapping_add(unsafe { *self.offs.add(p) } as usize)
    }
}

/// B's rows as [`Avx512::kernel_table`] reads them: row `p` at
/// `data[base + table.offs()[p]..]` instead of `p * ldb` (the direct
/// convolution's staged input, read in place).
#[derive(Clone, Copy)]
pub(crate) struct BTable<'a> {
    pub data: &'a [f32],
    pub table: &'a RowTable<'a>,
    pub base: usize,
}

impl BTable<'_> {
    /// B's rows for `kc` steps, when `kc` is within the table and every run
    /// of `runs` of every row lies within `data`: row `p < kc` starts at
    /// `base + offs[p] <= base + table.max()`, its run `h` holds `runs.n[h]`
    /// floats from `runs.b[h]` on. `None` when a bound does not hold.
    #[inline(always)]
    pub(in crate::simd) fn rows(&self, kc: usize, runs: &Runs) -> Option<Table> {
        let (offs, len) = (self.table.offs(), self.data.len());
        let fits = (0..3).all(|h| {
            let end =
                self.table.max().checked_add(self.base).and_then(|v| v.checked_add(runs.b[h]));
            runs.n[h] == 0 || end.and_then(|v| v.checked_add(runs.n[h])).is_some_and(|v| v <= len)
        });
        (kc > 0 && kc <= offs.len() && fits)
            .then(|| Table { b: self.data.as_ptr().wrapping_add(self.base), offs: offs.as_ptr() })
    }
}

/// Where a tile whose columns are [`Runs`] puts its sums: run `h` of row
/// `r < nrows` at `data[r * ldd + runs.d[h]..]`, `runs.n[h]` floats (B's
/// at `runs.b[h]` from the start of its row), which hold the starting sums
/// when `load`.
pub(crate) struct DstRuns<'a> {
    pub data: &'a mut [f32],
    pub ldd: usize,
    pub nrows: usize,
    pub runs: Runs,
    pub load: bool,
}

impl DstRuns<'_> {
    /// Whether every run of the first `nrows` (at least one) rows lies
    /// within `data`: run `h` of row `r` at `r * ldd + runs.d[h]`,
    /// `runs.n[h]` floats.
    #[inline(always)]
    pub(in crate::simd) fn fits(&self, nrows: usize) -> bool {
        let runs = &self.runs;
        (0..3).all(|h| {
            runs.n[h] == 0
                || (nrows - 1)
                    .checked_mul(self.ldd)
                    .and_then(|v| v.checked_add(runs.d[h])?.checked_add(runs.n[h]))
                    .is_some_and(|v| v <= self.data.len())
        })
    }
}
