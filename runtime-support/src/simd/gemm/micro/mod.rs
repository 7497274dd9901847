//! Register-tiled GEMM micro-kernels, one module per ISA, each implementing
//! [`Micro`] for its ISA's token (`crate::simd::isa`).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod neon;
pub(in crate::simd) mod portable;

use crate::simd::gemm::epilogue::Tail;

/// The most rows any micro-kernel's tile has.
pub(in crate::simd) const MAX_MR: usize = 8;

/// A register-tiled micro-kernel:
/// `dst[r * ldd + c] (+)= sum_p a(r, p) * b[p * NR + c]` for `r < nrows`,
/// `c < ncols`.
pub(crate) trait Micro: Copy {
    /// Rows of the tile (at most [`MAX_MR`]).
    const MR: usize;
    /// Columns of the tile (the width of a packed B strip).
    const NR: usize;
    /// Rows of A swept per packed B strip (kept in L2 between strips).
    const MC: usize;
    /// Steps of `k` per packed B strip (the strip stays in L1).
    const KC: usize;
    /// Whether the kernel reads B rows in place (`ldb` other than `NR`).
    const DIRECT_B: bool = false;
    /// Runs one tile over `kc` steps. Row `r` of A is read at
    /// `a[rows[r] + p * cs]` (`rows` has `MR` entries, rows past `nrows`
    /// repeat a valid one); B's `(p, c)` is `b[p * ldb + c]`, a packed strip
    /// (`ldb == NR`, zero past `ncols`) unless the kernel has `DIRECT_B`;
    /// the `nrows x ncols` sums go to `dst[r * ldd + c]`, which holds the
    /// starting sums when `load` (zero otherwise); with a `tail`, the
    /// final sums go through its epilogue on the way. Implementations check
    /// these bounds: one that does not hold is the caller's bug, a panic in
    /// debug builds, nothing done in release builds.
    #[allow(clippy::too_many_arguments)]
    fn kernel(
        self,
        kc: usize,
        a: &[f32],
        rows: &[usize],
        cs: usize,
        b: &[f32],
        ldb: usize,
        dst: &mut [f32],
        ldd: usize,
        nrows: usize,
        ncols: usize,
        load: bool,
        tail: Option<Tail<'_>>,
    );

    /// Columns past the last multiple of 16 that [`Micro::columns`] takes
    /// (0: the kernel has no such path).
    const COLS: usize = 0;

    /// The sums of `ncols` (at most [`Micro::COLS`]) columns of a tile
    /// whose rows of A are adjacent (row `r` at `a[row0 + r + p * cs]`):
    /// one vector over the rows per step instead of a mostly empty vector
    /// over the columns per row. B's `(p, c)` is `b[p * ldb + c]`; `dst`,
    /// `load` and `tail` as for [`Micro::kernel`]. Returns `false`, doing
    /// nothing, when the kernel has no such path or a bound does not hold.
    #[allow(clippy::too_many_arguments)]
    fn columns(
        self,
        kc: usize,
        a: &[f32],
        row0: usize,
        cs: usize,
        b: &[f32],
        ldb: usize,
        dst: &mut [f32],
        ldd: usize,
        nrows: usize,
        ncols: usize,
        load: bool,
        tail: Option<Tail<'_>>,
    ) -> bool {
        let _ = (kc, a, row0, cs, b, ldb, dst, ldd, nrows, ncols, load, tail);
        false
    }

    /// The most columns [`Micro::wide`] takes (0: the kernel has no such
    /// path); it takes more than [`Micro::NR`].
    const WIDE: usize = 0;

    /// A tile of [`Micro::MR`] adjacent rows of A (row `r` at `a[row0 + r +
    /// p * cs]`, a panel) and `ncols` columns, more than [`Micro::NR`] and
    /// at most [`Micro::WIDE`], in one pass: a product whose every column
    /// fits one such tile (a 7x7 output's 49) then reads each step of A
    /// once, with no strip left over. B's `(p, c)` is `b[p * ldb + c]`;
    /// `dst`, `load` and `tail` as for [`Micro::kernel`]. Returns `false`,
    /// doing nothing, when the kernel has no such path or a bound does not
    /// hold.
    #[allow(clippy::too_many_arguments)]
    fn wide(
        self,
        kc: usize,
        a: &[f32],
        row0: usize,
        cs: usize,
        b: &[f32],
        ldb: usize,
        dst: &mut [f32],
        ldd: usize,
        ncols: usize,
        load: bool,
        tail: Option<Tail<'_>>,
    ) -> bool {
        let _ = (kc, a, row0, cs, b, ldb, dst, ldd, ncols, load, tail);
        false
    }

    /// [`Micro::wide`] tiles of [`Micro::WIDE`] - 1 columns each, one after
    /// another across the first `ncols` columns (a chunk of a product with
    /// a short `k`, whose per-tile set-up would otherwise cost as much as a
    /// good part of its sums): the bounds checked and the epilogue resolved
    /// once for all of them. Returns the columns done, a multiple of the
    /// tile's width (`0` when the kernel has no such path or a bound does
    /// not hold).
    #[allow(clippy::too_many_arguments)]
    fn sweep(
        self,
        kc: usize,
        a: &[f32],
        row0: usize,
        cs: usize,
        b: &[f32],
        ldb: usize,
        dst: &mut [f32],
        ldd: usize,
        ncols: usize,
        load: bool,
        tail: Option<Tail<'_>>,
    ) -> usize {
        let _ = (kc, a, row0, cs, b, ldb, dst, ldd, ncols, load, tail);
        0
    }

    /// Runs `f` compiled for this kernel's instruction set, so the loops
    /// inlined into it (packing, epilogue) use the same vector width.
    #[inline(always)]
    fn within<R>(self, f: impl FnOnce() -> R) -> R {
        f()
    }
}
