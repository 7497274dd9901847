//! Register-tiled GEMM micro-kernels, one module per ISA, each implementing
//! [`Micro`] for its ISA's token (`crate::simd::isa`).

#[cfg(onnx_codegen_arm_fma)]
#[allow(unsafe_code)]
pub(in crate::simd) mod arm;
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
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod rows;

use crate::simd::Vectorize;
use crate::simd::gemm::epilogue::Tail;

/// The most rows any micro-kernel's tile has.
pub(in crate::simd) const MAX_MR: usize = 8;

/// The rows of A a tile reads: row `r` at `data[rows[r] + p * cs]` for
/// step `p` (`rows` has [`Micro::MR`] entries; rows past the tile's
/// `nrows` repeat a valid one, and their sums are dropped).
#[derive(Clone, Copy)]
pub(crate) struct ARows<'a> {
    pub data: &'a [f32],
    pub rows: &'a [usize],
    pub cs: usize,
}

/// Adjacent rows of A (a panel): row `r` at `data[row0 + r + p * cs]` for
/// step `p`. (Only AVX-512 has kernels that read it.)
#[derive(Clone, Copy)]
#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
pub(crate) struct APanel<'a> {
    pub data: &'a [f32],
    pub row0: usize,
    pub cs: usize,
}

/// A tile's B operand: `(p, c)` at `data[p * ldb + c]`, a packed strip
/// (`ldb == NR`, zero past the tile's columns) unless the kernel has
/// [`Micro::DIRECT_B`].
#[derive(Clone, Copy)]
pub(crate) struct BStrip<'a> {
    pub data: &'a [f32],
    pub ldb: usize,
}

/// Where a tile's `nrows x ncols` sums go: `(r, c)` at `data[r * ldd + c]`,
/// which holds the starting sums when `load` (they start from zero
/// otherwise).
pub(crate) struct DstBlock<'a> {
    pub data: &'a mut [f32],
    pub ldd: usize,
    pub nrows: usize,
    pub ncols: usize,
    pub load: bool,
}

/// One call of a micro-kernel: `kc` steps of `k` of A's rows times B into
/// `dst`; with a `tail`, the final sums go through its epilogue on the way.
/// A is [`ARows`] or, for the kernels that want adjacent rows, [`APanel`];
/// B and the destination are a [`BStrip`] and a [`DstBlock`] but for an
/// ISA's own tiles (AVX-512's runs of columns over a staged convolution
/// input). Built at the call and taken apart at the top of the kernel,
/// which is inlined there, so the compiler sees the same scalars as it
/// would separate arguments (a call that is not inlined takes such a
/// struct through memory).
pub(crate) struct Tile<'a, A = ARows<'a>, B = BStrip<'a>, D = DstBlock<'a>> {
    pub kc: usize,
    pub a: A,
    pub b: B,
    pub dst: D,
    pub tail: Option<Tail<'a>>,
}

/// A register-tiled micro-kernel:
/// `dst[r * ldd + c] (+)= sum_p a(r, p) * b[p * ldb + c]` for `r < nrows`,
/// `c < ncols` (see [`Tile`]).
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
    /// Runs one tile, at most `MR x NR`, as [`Tile`] describes it.
    /// Implementations check its bounds: one that does not hold is the
    /// caller's bug, a panic in debug builds, nothing done in release
    /// builds. The SIMD ones are `#[inline(always)]`: called once per tile,
    /// a [`Tile`] passed through memory cost AVX-512 and AVX2 2-3% on 64^3
    /// products (measured on Zen 4), where separate arguments had stayed in
    /// registers.
    fn kernel(self, t: Tile<'_>);

    /// Columns past the last multiple of 16 that [`Micro::columns`] takes
    /// (0: the kernel has no such path).
    const COLS: usize = 0;

    /// The sums of a tile of `ncols` (at most [`Micro::COLS`]) columns
    /// whose rows of A are adjacent: one vector over the rows per step
    /// instead of a mostly empty vector over the columns per row. Returns
    /// `false`, doing nothing, when the kernel has no such path or a bound
    /// does not hold.
    fn columns(self, t: Tile<'_, APanel<'_>>) -> bool {
        let _ = t;
        false
    }

    /// The most columns [`Micro::wide`] takes (0: the kernel has no such
    /// path); it takes more than [`Micro::NR`].
    const WIDE: usize = 0;

    /// A tile of [`Micro::MR`] rows of A's panel (`dst.nrows` is `MR`) and
    /// `ncols` columns, more than [`Micro::NR`] and at most
    /// [`Micro::WIDE`], in one pass: a product whose every column fits one
    /// such tile (a 7x7 output's 49) then reads each step of A once, with
    /// no strip left over. Returns `false`, doing nothing, when the kernel
    /// has no such path or a bound does not hold.
    fn wide(self, t: Tile<'_, APanel<'_>>) -> bool {
        let _ = t;
        false
    }

    /// [`Micro::wide`] tiles of [`Micro::WIDE`] - 1 columns each, one after
    /// another across the first `ncols` columns (a chunk of a product with
    /// a short `k`, whose per-tile set-up would otherwise cost as much as a
    /// good part of its sums): the bounds checked and the epilogue resolved
    /// once for all of them. Returns the columns done, a multiple of the
    /// tile's width (`0` when the kernel has no such path or a bound does
    /// not hold).
    fn sweep(self, t: Tile<'_, APanel<'_>>) -> usize {
        let _ = t;
        0
    }

    /// Full tiles of [`Micro::MR`] rows (`dst.nrows` is `MR`) across the
    /// first `ncols / NR` strips of a packed block, strip `s` at
    /// `b.data[s * step..]` with its rows `b.ldb` apart, and column `s * NR`
    /// of the destination: the bounds checked and the epilogue resolved
    /// once for the row of tiles instead of once a tile (a product with a
    /// short `k`, 16->96 1x1 at 112x112, spent a third of its time on that
    /// set-up). Returns the strips done, `0` when the kernel has no such
    /// path or a bound does not hold; the caller runs the rest as tiles.
    fn strips(self, t: Tile<'_>, step: usize) -> usize {
        let _ = (t, step);
        0
    }

    /// Runs `f` in a function compiled for this kernel's instruction set
    /// (tests' intrinsics; a closure that is not inlined into that function
    /// is compiled for the baseline, so kernels' loops go through
    /// [`Micro::run_body`]).
    #[cfg(all(test, target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    fn within<R>(self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Runs `body` compiled for this kernel's instruction set: `body.run`
    /// is `#[inline(always)]`, so its loops (packing, staging, epilogue)
    /// are compiled inside the kernel's `target_feature` function whatever
    /// their size. (A large closure given to [`Micro::within`] stays a
    /// function of its own, compiled for SSE2: the whole GEMM driver ran so
    /// until 2026-11-27.)
    #[inline(always)]
    fn run_body<V: Vectorize>(self, body: V) -> V::Output {
        body.run()
    }
}
