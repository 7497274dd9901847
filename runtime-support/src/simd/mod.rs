//! Fast single-precision paths: a blocked GEMM driver over register-tiled
//! micro-kernels, the implicit-GEMM convolution built on it, and the fused
//! epilogues (bias, scale, activation) they apply.
//!
//! The driver packs the B operand into a strip of `kc x NR` on the stack (no
//! arena, no heap), reads A in place through row/column strides, and hands
//! both to a micro-kernel that keeps an `MR x NR` tile of sums in registers.
//! Sums still run over `k` in ascending order. The portable kernel multiplies
//! then adds, so its results equal the exact kernels' bit for bit; the AVX2
//! kernel fuses each multiply-add (one rounding instead of two), which is why
//! generated code opts into these paths explicitly while constant folding
//! keeps the exact kernels.
//!
//! On x86-64 the AVX-512 or AVX2+FMA kernels are chosen at run time
//! (`cpu.rs`: `cpuid` and `xgetbv`, probed once; no `std` needed). They
//! are compiled only where SSE2 is on (every x86-64 target but the
//! soft-float `x86_64-unknown-none`, whose code generator cannot lower
//! vector functions: there the portable kernel runs). On
//! aarch64 with NEON (a compile-time target feature, present on every
//! aarch64 Linux and macOS target) the NEON kernel runs; every other target
//! uses the portable kernel.
//!
//! # Capping the instruction set
//!
//! [`set_max_isa`] caps the kernels the dispatcher chooses at an [`Isa`],
//! on top of what the CPU reports, so the AVX2 and portable paths run (and
//! are tested) on an AVX-512 machine: `set_max_isa(Isa::Avx2)` behaves as
//! an AVX2-only CPU would, `Isa::Portable` as a CPU without AVX2. It works
//! without `std`. In `std` builds the environment variable
//! [`MAX_ISA_VAR`], `ONNX_CODEGEN_MAX_ISA=portable|avx2|avx512`, sets the
//! cap when a kernel first asks for it (any other non-empty value caps at
//! the portable path, with a warning naming the values it takes);
//! [`set_max_isa`] overrides it. For
//! example `ONNX_CODEGEN_MAX_ISA=avx2 cargo test -p onnx-codegen-runtime
//! --features std` runs the crate's tests on the AVX2 paths.
//!
//! The cap covers every explicit vector path (micro-kernels, the direct
//! and stem convolutions, depthwise, pooling, Winograd transforms, `vexp`,
//! the loops compiled for AVX2 or AVX-512 by `vectorize`) and the tuning
//! hints that belong to an extension (Zen 4's split 512-bit operations go
//! with AVX-512). On aarch64 `Isa::Portable` turns the NEON kernels off
//! (they are chosen through the same run-time switch, though NEON itself is
//! a compile-time feature), and the other caps leave them on. No cap
//! changes the code the compiler generates for the target's baseline: the
//! portable loops stay auto-vectorised for SSE2 on x86-64 and NEON on
//! aarch64.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
mod cpu;
mod isa;
pub use isa::{Isa, MAX_ISA_VAR, max_isa, set_max_isa};
#[allow(unsafe_code)]
mod strip;
use strip::Strip;
pub(crate) use strip::prefetch;

mod conv;
mod gemm;
mod math;
mod pool;
mod winograd;
pub(crate) use conv::depthwise::{Geom2d, depthwise};
// The ISA tokens (`Avx2`, `Avx512`, `Neon`) live with their micro-kernels.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use gemm::micro::neon;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use gemm::micro::{avx2, avx512};

/// An activation applied to each output of a fused kernel, after the bias;
/// the same comparisons as the standalone elementwise ops, so fusing does not
/// change any result.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    /// The output as is.
    None,
    /// `x < 0 ? 0 : x`.
    Relu,
    /// `x < 0 ? alpha * x : x`.
    LeakyRelu {
        /// Slope below zero.
        alpha: f32,
    },
    /// `min(max(x, min), max)` with ONNX `Clip`'s comparisons.
    Clip {
        /// Lower bound.
        min: f32,
        /// Upper bound.
        max: f32,
    },
}

impl Activation {
    /// The activation of one value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Activation::None => x,
            Activation::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Activation::LeakyRelu { alpha } => {
                if x < 0.0 {
                    alpha * x
                } else {
                    x
                }
            }
            Activation::Clip { min, max } => {
                let v = if x < min { min } else { x };
                if v > max { max } else { v }
            }
        }
    }

    /// Applies the activation to every element of `y`.
    pub fn apply_all(self, y: &mut [f32]) {
        if self != Activation::None {
            for v in y {
                *v = self.apply(*v);
            }
        }
    }
}

/// A smooth activation fused into a product, after every other step of the
/// epilogue: the routine the standalone f32 op runs in generated code
/// ([`vmath::map`](crate::vmath::map)'s: for SiLU and exact Gelu the
/// explicit AVX code of `vexp` where the CPU has it), on the same value, so
/// fusing does not change any result.
/// Applied to each tile's rows while they are in L1 (never in registers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Smooth {
    /// ONNX `Gelu` (`approximate = "none"`): [`vmath::gelu`](crate::vmath::gelu).
    Gelu,
    /// ONNX `Gelu` with `approximate = "tanh"`: [`vmath::gelu_tanh`](crate::vmath::gelu_tanh).
    GeluTanh,
    /// SiLU, `Mul(x, Sigmoid(x))`: `x * vmath::sigmoid(x)`.
    Silu,
    /// ONNX `HardSwish`, `x * clamp(x / 6 + 1 / 2, 0, 1)`: the standalone
    /// op's [`elementwise::eval`](crate::elementwise::eval).
    HardSwish,
}

impl Smooth {
    /// The explicit vector routine of `vexp` computing this activation, if
    /// any (the standalone op's [`vmath::map`](crate::vmath::map) runs the
    /// same one).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    fn vector(self) -> Option<VFunc> {
        match self {
            Smooth::Gelu => Some(VFunc::Gelu),
            Smooth::Silu => Some(VFunc::Silu),
            Smooth::HardSwish => Some(VFunc::HardSwish),
            Smooth::GeluTanh => None,
        }
    }

    /// The activation of one value.
    #[inline(always)]
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Smooth::GeluTanh => crate::vmath::gelu_tanh(x),
            Smooth::HardSwish => hard_swish(x),
            // One lane of the vector routine `apply_all` runs, so an
            // element finished alone equals its neighbours' arithmetic.
            Smooth::Gelu | Smooth::Silu => {
                let mut v = [x];
                self.apply_all(&mut v);
                v[0]
            }
        }
    }

    /// Applies the activation to every element of `y`, one loop per
    /// function so each compiles to straight vector code.
    #[inline(always)]
    pub fn apply_all(self, y: &mut [f32]) {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = self.vector()
            && math::vexp::apply(f, None, y)
        {
            return;
        }
        self.portable(y);
    }

    /// [`Smooth::apply_all`] without the explicit vector routines: plain
    /// loops (inlined into the caller's instruction set), blocks of 16 so
    /// the polynomial chains of a block overlap.
    #[inline(always)]
    fn portable(self, y: &mut [f32]) {
        macro_rules! each {
            ($g:expr) => {{
                let (blocks, rest) = y.as_chunks_mut::<16>();
                for b in blocks {
                    for v in b.iter_mut() {
                        *v = $g(*v);
                    }
                }
                for v in rest {
                    *v = $g(*v);
                }
            }};
        }
        match self {
            Smooth::Gelu => each!(crate::vmath::gelu),
            Smooth::GeluTanh => each!(crate::vmath::gelu_tanh),
            Smooth::Silu => each!(crate::vmath::silu),
            Smooth::HardSwish => each!(hard_swish),
        }
    }
}

/// ONNX `HardSwish` of one value, as the standalone op computes it.
#[inline(always)]
fn hard_swish(x: f32) -> f32 {
    crate::elementwise::eval(crate::elementwise::Unary::HardSwish, x)
}

/// The most rows any micro-kernel's tile has.
const MAX_MR: usize = 8;

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

/// The epilogue of the last pass over `k`, for the tile whose first output
/// is `(i0, j0)`.
#[derive(Clone, Copy)]
pub(crate) struct Tail<'a> {
    pub epi: &'a Epilogue<'a>,
    pub i0: usize,
    pub j0: usize,
}

/// Applies `tail`'s epilogue to the `nrows x ncols` block of final sums in
/// `dst` (rows `ldd` apart), row by row.
#[inline(always)]
fn finish(dst: &mut [f32], ldd: usize, nrows: usize, ncols: usize, tail: Option<Tail<'_>>) {
    if let Some(t) = tail {
        for r in 0..nrows {
            if let Some(row) = dst.get_mut(r * ldd..r * ldd + ncols) {
                t.epi.row(t.i0 + r, t.j0, row);
            }
        }
        if let Some(s) = t.epi.smooth {
            smooth_block(s, dst, ldd, nrows, ncols);
        }
    }
}

/// [`finish`] on one column (its rows `ldd` apart, at most [`MAX_MR`]):
/// the epilogue row by row, then the smooth activation over the column
/// gathered into one run, one vector call instead of one per row.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline(always)]
fn finish_column(dst: &mut [f32], ldd: usize, nrows: usize, tail: Option<Tail<'_>>) {
    let Some(t) = tail else { return };
    let n = nrows.min(MAX_MR);
    for r in 0..n {
        if let Some(v) = dst.get_mut(r * ldd..r * ldd + 1) {
            t.epi.row(t.i0 + r, t.j0, v);
        }
    }
    let Some(s) = t.epi.smooth else { return };
    let mut col: [f32; MAX_MR] = core::array::from_fn(|r| dst.get(r * ldd).copied().unwrap_or(0.0));
    s.apply_all(&mut col[..n]);
    for (r, c) in col.iter().enumerate().take(n) {
        if let Some(v) = dst.get_mut(r * ldd) {
            *v = *c;
        }
    }
}

/// Applies `s` to the `nrows x ncols` block of `dst` (rows `ldd` apart):
/// SiLU and exact Gelu in `vexp`'s explicit vector code where the CPU has
/// it, the rest compiled for the widest vector unit.
#[inline(always)]
fn smooth_block(s: Smooth, dst: &mut [f32], ldd: usize, nrows: usize, ncols: usize) {
    // HardSwish on a tile runs the plain loops compiled for the widest
    // unit: the explicit routine's call costs more than it saves on a tile
    // (a 48->288 1x1 convolution at 14x14: 0.065 ms against 0.085, 16->72
    // at 56x56 0.099 against 0.106), while on a whole tensor it is the
    // faster one.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(f) = s.vector().filter(|_| s != Smooth::HardSwish)
        && math::vexp::apply_rows(f, dst, ldd, nrows, ncols)
    {
        return;
    }
    vectorize_wide(SmoothRows { s, dst, ldd, nrows, ncols });
}

/// A smooth activation over an `nrows x ncols` block (rows `ldd` apart),
/// as a [`Vectorize`] body: compiled for the widest vector unit, as the
/// standalone op's loop is (the arithmetic is the same at every width).
struct SmoothRows<'a> {
    s: Smooth,
    dst: &'a mut [f32],
    ldd: usize,
    nrows: usize,
    ncols: usize,
}

impl Vectorize for SmoothRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        for r in 0..self.nrows {
            if let Some(row) = self.dst.get_mut(r * self.ldd..r * self.ldd + self.ncols) {
                self.s.portable(row);
            }
        }
    }
}

/// Whether `dst` holds an `nrows x ncols` block with row stride `ldd`.
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
#[inline(always)]
fn block_fits(dst: &[f32], ldd: usize, nrows: usize, ncols: usize) -> bool {
    nrows == 0
        || ncols == 0
        || (nrows - 1)
            .checked_mul(ldd)
            .and_then(|v| v.checked_add(ncols))
            .is_some_and(|v| v <= dst.len())
}

/// The `C` term of an epilogue fused into a register tile.
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
#[derive(Clone, Copy)]
pub(crate) enum FusedC {
    None,
    /// `beta * c[base + r * rs + col]`: a contiguous row of C per tile row.
    Rows {
        base: usize,
        rs: usize,
        beta: f32,
    },
    /// `t[r]` (already `beta * C(i, j)`), the same for every column.
    PerRow([f32; MAX_MR]),
}

/// An [`Epilogue`] resolved for one tile of at most [`MAX_MR`] rows, for
/// kernels that apply it in registers before the store (the same operations
/// in the same order as [`Epilogue::one`]).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
#[derive(Clone, Copy)]
pub(crate) struct Fused {
    pub alpha: f32,
    pub bias: Option<[f32; MAX_MR]>,
    pub c: FusedC,
    /// The residual `r[base + r * rs + col]`, added after C (checked to lie
    /// within the residual by [`Fused::new`]). The smooth activation, if
    /// any, is not part of this: the kernel applies it to the stored tile.
    pub res: Option<(usize, usize)>,
    pub act: Activation,
}

#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
impl Fused {
    /// The tile's epilogue in registers, or `None` when C has a layout the
    /// registers do not take (then the rows are finished in memory) or a
    /// read would fall outside C.
    pub(crate) fn new(tail: &Tail<'_>, nrows: usize, ncols: usize) -> Option<Fused> {
        let e = tail.epi;
        let (i0, j0) = (tail.i0, tail.j0);
        let res = match e.res {
            None => None,
            Some(r) => {
                let base = i0.checked_mul(r.rs)?.checked_add(j0)?;
                let last = (nrows - 1).checked_mul(r.rs)?.checked_add(base)?.checked_add(ncols)?;
                if last > r.data.len() {
                    return None;
                }
                Some((base, r.rs))
            }
        };
        let bias = e.row_bias.map(|b| match b.get(i0..i0 + MAX_MR) {
            Some(&[b0, b1, b2, b3, b4, b5, b6, b7]) => [b0, b1, b2, b3, b4, b5, b6, b7],
            _ => core::array::from_fn(|r| b.get(i0 + r).copied().unwrap_or(0.0)),
        });
        let c = match e.c {
            None => FusedC::None,
            Some(c) if c.cs == 1 => {
                let base = i0.checked_mul(c.rs)?.checked_add(j0)?;
                let last = (nrows - 1).checked_mul(c.rs)?.checked_add(base)?.checked_add(ncols)?;
                if last > c.data.len() {
                    return None;
                }
                FusedC::Rows { base, rs: c.rs, beta: c.beta }
            }
            Some(c) if c.cs == 0 => FusedC::PerRow(core::array::from_fn(|r| {
                let at = (i0 + r).checked_mul(c.rs);
                c.beta * at.and_then(|i| c.data.get(i)).copied().unwrap_or(0.0)
            })),
            Some(_) => return None,
        };
        Some(Fused { alpha: e.alpha, bias, c, res, act: e.act })
    }
}

#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
impl Fused {
    /// The same epilogue for the tile `j` columns to the right (C and the
    /// residual read from `j` further on).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    pub(crate) fn shifted(self, j: usize) -> Fused {
        let c = match self.c {
            FusedC::Rows { base, rs, beta } => FusedC::Rows { base: base + j, rs, beta },
            c => c,
        };
        Fused { c, res: self.res.map(|(base, rs)| (base + j, rs)), ..self }
    }
}

/// The portable micro-kernel: `4 x NR` sums, multiply then add (exactly the
/// exact kernels' arithmetic).
#[derive(Clone, Copy)]
pub(crate) struct Portable<const NR: usize>;

impl<const NR: usize> Micro for Portable<NR> {
    const MR: usize = 4;
    const NR: usize = NR;
    const MC: usize = 64;
    const KC: usize = 256;

    #[inline]
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
    ) {
        debug_assert_eq!(ldb, NR, "portable tile: B a packed strip {NR} wide");
        if ldb != NR {
            return;
        }
        let (nrows, ncols) = (nrows.min(4), ncols.min(NR));
        let mut acc = [[0.0f32; NR]; 4];
        if load {
            for (r, row) in acc.iter_mut().enumerate().take(nrows) {
                for (c, v) in row.iter_mut().enumerate().take(ncols) {
                    *v = dst.get(r * ldd + c).copied().unwrap_or(0.0);
                }
            }
        }
        let r: [usize; 4] = core::array::from_fn(|i| rows.get(i).copied().unwrap_or(0));
        for (p, bp) in b.chunks_exact(NR).take(kc).enumerate() {
            let off = p * cs;
            let av: [f32; 4] = core::array::from_fn(|i| a.get(r[i] + off).copied().unwrap_or(0.0));
            for i in 0..4 {
                for c in 0..NR {
                    acc[i][c] += av[i] * bp[c];
                }
            }
        }
        for (r, row) in acc.iter().enumerate().take(nrows) {
            for (c, v) in row.iter().enumerate().take(ncols) {
                if let Some(t) = dst.get_mut(r * ldd + c) {
                    *t = *v;
                }
            }
        }
        finish(dst, ldd, nrows, ncols, tail);
    }
}

/// The portable strip width: 8 columns where there are vector registers
/// to spare, 4 on small FPUs (Cortex-M4F has 32 single registers).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "x86",
    target_arch = "aarch64"
))]
pub(crate) type PortableKernel = Portable<8>;
#[cfg(not(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "x86",
    target_arch = "aarch64"
)))]
pub(crate) type PortableKernel = Portable<4>;

/// The B operand of a product, packed strip by strip.
pub(crate) trait PackB {
    /// Writes `B(p0 + p, j0 + c)` to `out[p * stride + c]` for `p < kc`,
    /// `c < nr`, and zero for `nr <= c < stride`. `out` has `kc * stride`
    /// entries and `nr <= stride` ([`debug_check_pack`]); the caller keeps
    /// `p0 + kc` and `j0 + nr` within B.
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]);

    /// B's storage and row stride when its rows are contiguous (`B(p, j)`
    /// at `data[p * rs + j]`), for kernels that read them in place.
    fn rows(&self) -> Option<(&[f32], usize)> {
        None
    }

    /// Steps `pc..` of the `nr`-column strip starting at column `jc`, when
    /// B already holds it in the packed layout (`B(pc + p, jc + c)` at
    /// `[p * nr + c]`, zero past B's columns): kernels read it in place.
    fn strip(&self, pc: usize, jc: usize, nr: usize) -> Option<&[f32]> {
        let _ = (pc, jc, nr);
        None
    }

    /// Asks the caches for what [`PackB::pack`] of the same arguments will
    /// read (a hint: nothing is read), so the packing of a strip does not
    /// wait on memory row after row.
    fn prefetch(&self, p0: usize, kc: usize, j0: usize, nr: usize) {
        let _ = (p0, kc, j0, nr);
    }
}

/// [`PackB::pack`]'s bounds on `out` (panics in debug builds when they do
/// not hold; a packer then writes what fits).
#[inline(always)]
pub(crate) fn debug_check_pack(kc: usize, nr: usize, stride: usize, out: &[f32]) {
    debug_assert!(
        nr <= stride && kc.checked_mul(stride).is_some_and(|v| v <= out.len()),
        "PackB::pack: {kc} rows of {nr} columns, {stride} apart, in {} floats",
        out.len()
    );
}

/// The width of the strips a constant B is laid out in ahead of time
/// ([`crate::gemm::pack_b_strips`]): the AVX-512 kernel's tile width.
pub const STRIP: usize = 32;

/// A B of `k` rows laid out in strips of [`STRIP`] columns: `B(p, j)` at
/// `data[(j / STRIP) * STRIP * k + p * STRIP + j % STRIP]`, zero in the
/// columns past B's own.
pub(crate) struct StripsB<'a> {
    pub data: &'a [f32],
    pub k: usize,
}

impl PackB for StripsB<'_> {
    #[inline]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        debug_check_pack(kc, nr, stride, out);
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let (head, tail) = row.split_at_mut(nr.min(stride));
            let row_off = (p0 + p) * STRIP;
            // Each run of columns inside one strip is contiguous.
            let mut c = 0;
            while c < head.len() {
                let j = j0 + c;
                let len = (STRIP - j % STRIP).min(head.len() - c);
                let base = (j / STRIP) * STRIP * self.k + row_off + j % STRIP;
                let dst = &mut head[c..c + len];
                match self.data.get(base..base + len) {
                    Some(src) => dst.copy_from_slice(src),
                    None => dst.fill(0.0),
                }
                c += len;
            }
            tail.fill(0.0);
        }
    }

    fn strip(&self, pc: usize, jc: usize, nr: usize) -> Option<&[f32]> {
        if nr != STRIP || !jc.is_multiple_of(STRIP) {
            return None;
        }
        let start = (jc / STRIP).checked_mul(STRIP)?.checked_mul(self.k)?;
        self.data.get(start.checked_add(pc.checked_mul(STRIP)?)?..)
    }
}

/// A dense B: element `(p, j)` at `data[p * rs + j * cs]`.
pub(crate) struct DenseB<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl PackB for DenseB<'_> {
    fn rows(&self) -> Option<(&[f32], usize)> {
        (self.cs == 1).then_some((self.data, self.rs))
    }

    #[inline(always)]
    fn prefetch(&self, p0: usize, kc: usize, j0: usize, nr: usize) {
        if self.cs != 1 {
            return;
        }
        for p in p0..p0 + kc {
            let base = p * self.rs + j0;
            strip::prefetch(self.data.get(base..base + nr).unwrap_or(&[]));
        }
    }

    // Inlined into the product driver, so the copies take its vector width.
    #[inline(always)]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        debug_check_pack(kc, nr, stride, out);
        if self.rs == 1 && self.cs != 1 && nr <= stride {
            // A transposed B (attention's K): each column is contiguous,
            // read once instead of one element per row.
            for row in out.chunks_exact_mut(stride).take(kc) {
                row[nr..].fill(0.0);
            }
            for c in 0..nr {
                let base = (j0 + c) * self.cs + p0;
                let col = self.data.get(base..base + kc);
                for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
                    row[c] = col.map_or(0.0, |col| col[p]);
                }
            }
            return;
        }
        if self.cs == 1 {
            self.pack_rows(p0, kc, j0, nr, stride, out);
            return;
        }
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.rs + j0 * self.cs;
            let (head, tail) = row.split_at_mut(nr);
            for (c, v) in head.iter_mut().enumerate() {
                *v = self.data.get(base + c * self.cs).copied().unwrap_or(0.0);
            }
            tail.fill(0.0);
        }
    }
}

impl DenseB<'_> {
    /// [`PackB::pack`] for contiguous rows (`cs == 1`), a strip of rows
    /// from as many places in memory (a pointwise convolution's input planes,
    /// `rs` apart). Full strips of the usual widths copy as fixed-size
    /// vector moves rather than a call per row, and each row's next strip
    /// (the columns the following call packs) is prefetched: with a hundred
    /// rows or more, too many streams for the hardware prefetcher to follow,
    /// every row would otherwise wait on memory in turn.
    #[inline(always)]
    fn pack_rows(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        nr: usize,
        stride: usize,
        out: &mut [f32],
    ) {
        #[inline(always)]
        fn rows<const N: usize>(b: &DenseB<'_>, p0: usize, kc: usize, j0: usize, out: &mut [f32]) {
            for (p, row) in out.chunks_exact_mut(N).take(kc).enumerate() {
                let base = (p0 + p) * b.rs + j0;
                let Ok(dst) = <&mut [f32; N]>::try_from(row) else { return };
                match b.data.get(base..base + N).map(<&[f32; N]>::try_from) {
                    Some(Ok(src)) => *dst = *src,
                    _ => *dst = [0.0; N],
                }
                strip::prefetch(b.data.get(base + N..base + 2 * N).unwrap_or(&[]));
            }
        }
        match (nr, stride) {
            (48, 48) => return rows::<48>(self, p0, kc, j0, out),
            (32, 32) => return rows::<32>(self, p0, kc, j0, out),
            (16, 16) => return rows::<16>(self, p0, kc, j0, out),
            (8, 8) => return rows::<8>(self, p0, kc, j0, out),
            _ => {}
        }
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.rs + j0;
            let Some((head, tail)) = row.split_at_mut_checked(nr) else { return };
            match self.data.get(base..base + nr) {
                Some(src) => head.copy_from_slice(src),
                None => head.fill(0.0),
            }
            tail.fill(0.0);
        }
    }
}

/// Copies the even floats of 32 (`d[i] = s[2 * i]`, stride-2 convolution
/// inputs) with one vector permute where the CPU has AVX-512, one by one
/// elsewhere; detected once, when made, so packing loops carry it along.
#[derive(Clone, Copy)]
pub(crate) struct Evens {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    cpu: Option<avx512::Avx512>,
}

impl Evens {
    /// The copier for this CPU.
    #[inline]
    pub(crate) fn detect() -> Evens {
        Evens {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            cpu: avx512::Avx512::detect(),
        }
    }

    /// `d[i] = s[2 * i]` for `i < 16`.
    #[inline(always)]
    pub(crate) fn copy(self, d: &mut [f32; 16], s: &[f32; 32]) {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(cpu) = self.cpu {
            conv::depthwise::avx512::evens(cpu, core::slice::from_mut(d), core::slice::from_ref(s));
            return;
        }
        for (i, v) in d.iter_mut().enumerate() {
            *v = s[2 * i];
        }
    }
}

/// `acc[i] = max(acc[i], src[i])` (the max pool's ranking: NaN wins, ties
/// keep `acc`) in explicit vector code where the CPU has it: `false` when
/// it has not, and the caller runs its own loop.
#[inline]
pub(crate) fn max_rows(acc: &mut [f32], src: &[f32]) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        pool::avx512::max_rows(cpu, acc, src);
        return true;
    }
    let _ = (acc, src);
    false
}

/// The max pool's stride-2 windows of `K` (2 or 3) columns across `acc`,
/// in explicit vector code where the CPU has it: how many leading outputs
/// it wrote (those whose window and the next two columns lie in `acc`),
/// `None` when the caller runs its own loop.
#[inline]
pub(crate) fn max_windows_s2<const K: usize>(acc: &[f32], out: &mut [f32]) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return Some(pool::avx512::windows_s2::<K>(cpu, acc, out));
    }
    let _ = (acc, out);
    None
}

/// The max pool's stride-1 windows of `k` columns across `acc`, in explicit
/// vector code where the CPU has it: how many leading outputs it wrote
/// (those whose window lies in `acc`), `None` when the caller runs its own
/// loop.
#[inline]
pub(crate) fn max_windows_s1(acc: &[f32], out: &mut [f32], k: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return Some(pool::avx512::windows_s1(cpu, acc, out, k));
    }
    let _ = (acc, out, k);
    None
}

/// A stride-1 max pool with outputs the size of its inputs (`planes`
/// planes of `hw`, `k` windows, `pad` rows and columns of padding before)
/// on small planes, in explicit vector code where the CPU has it: `false`
/// (nothing written) when it does not apply, and the caller pools
/// another way.
#[inline]
pub(crate) fn max_pool_same(
    planes: usize,
    hw: (usize, usize),
    k: (usize, usize),
    pad: (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return pool::avx512::max_pool_same(cpu, planes, hw, k, pad, x, y);
    }
    let _ = (planes, hw, k, pad, x, y);
    false
}

/// An undilated stride-2 max pool with `kh x kw` windows, `pad` rows and
/// columns of padding before, in explicit vector code where the CPU has it
/// and `kw` is 2 or 3: `false` (nothing written) when it does not apply,
/// and the caller pools another way.
#[inline]
pub(crate) fn max_pool_s2(
    planes: usize,
    hw: (usize, usize),
    out: (usize, usize),
    (kh, kw): (usize, usize),
    (pt, pl): (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        let window = (kh, pt, pl);
        return match kw {
            2 => pool::avx512::max_pool_s2::<2>(cpu, planes, hw, out, window, x, y),
            3 => pool::avx512::max_pool_s2::<3>(cpu, planes, hw, out, window, x, y),
            _ => false,
        };
    }
    let _ = (planes, hw, out, kh, kw, pt, pl, x, y);
    false
}

/// A 2x2 stride-2 average pool whose windows all lie inside the input, in
/// explicit vector code where the CPU has it: `false` (nothing written)
/// when it does not apply, and the caller pools another way.
#[inline]
pub(crate) fn avg_pool_2x2(
    planes: usize,
    hw: (usize, usize),
    out: (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return pool::avx512::avg_pool_2x2(cpu, planes, hw, out, x, y);
    }
    let _ = (planes, hw, out, x, y);
    false
}

/// The A operand: element `(i, p)` at `data[off + i * rs + p * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct ViewA<'a> {
    pub data: &'a [f32],
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

/// An A operand as the micro-kernels read it: element `(i, p)` at
/// `data()[row(i) + p * cs()]`. Strided views ([`ViewA`]) and weights
/// packed in row panels ([`PanelA`]) both have that form, so every kernel,
/// whatever its tile height, reads either.
pub(crate) trait ReadA: Copy {
    /// The storage.
    fn data(&self) -> &[f32];
    /// The step between consecutive elements of a row.
    fn cs(&self) -> usize;
    /// Where row `i` starts; only called for rows [`ReadA::fits`] accepted.
    fn row(&self, i: usize) -> usize;
    /// Whether every element of the first `m` rows and `k` columns lies
    /// within the storage (`m` and `k` at least 1).
    fn fits(&self, m: usize, k: usize) -> bool;

    /// Asks the caches for steps `p0..p0 + steps` of rows `i..i + rows`
    /// (those within the storage): the start of a tile the kernel reads
    /// next. A hint only.
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize);
}

/// Steps of `k` of the next tile of a large A that [`drive_buf`] asks the
/// caches for while the current tile runs (the AVX-512 kernel fetches the
/// rest of each tile as it goes, this many steps ahead).
const A_AHEAD: usize = 64;

/// Floats of A (256 KiB) from which [`drive_buf`] prefetches the tiles of A:
/// smaller operands stay in cache from one strip to the next.
const A_PREFETCH_FROM: usize = 1 << 16;

impl ReadA for ViewA<'_> {
    #[inline(always)]
    fn data(&self) -> &[f32] {
        self.data
    }

    #[inline(always)]
    fn cs(&self) -> usize {
        self.cs
    }

    #[inline(always)]
    fn row(&self, i: usize) -> usize {
        self.off + i * self.rs
    }

    fn fits(&self, m: usize, k: usize) -> bool {
        let last = (m - 1)
            .checked_mul(self.rs)
            .and_then(|v| v.checked_add((k - 1).checked_mul(self.cs)?))
            .and_then(|v| v.checked_add(self.off));
        last.is_some_and(|v| v < self.data.len())
    }

    #[inline(always)]
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize) {
        if self.cs == 1 {
            for r in i..i + rows {
                let start = self.off.saturating_add(r.saturating_mul(self.rs)).saturating_add(p0);
                let end = start.saturating_add(steps).min(self.data.len());
                strip::prefetch(self.data.get(start..end).unwrap_or(&[]));
            }
        }
    }
}

/// Rows per panel of [`PanelA`].
pub(crate) const PANEL: usize = 8;

/// Floats from one panel of [`PanelA`] to the next for rows of `k`.
#[inline(always)]
pub(crate) fn panel_stride(k: usize) -> usize {
    PANEL * k
}

/// Floats of `m` rows of `k` in panels (`m` rounded up to a multiple of
/// [`PANEL`]); `None` on overflow.
pub(crate) fn panels_len(m: usize, k: usize) -> Option<usize> {
    m.div_ceil(PANEL).checked_mul(PANEL.checked_mul(k)?)
}

/// A matrix of `k` columns stored in panels of [`PANEL`] rows: element
/// `(i, p)` at `data[(i / PANEL) * PANEL * k + p * PANEL + i % PANEL]`, so
/// the rows one tile reads at a step of `p` are adjacent (one cache line)
/// instead of a row length apart, where long rows make them compete for the
/// same L1 sets. Rows past the last real one are zero padding.
#[derive(Clone, Copy)]
pub(crate) struct PanelA<'a> {
    pub data: &'a [f32],
    pub k: usize,
}

impl ReadA for PanelA<'_> {
    #[inline(always)]
    fn data(&self) -> &[f32] {
        self.data
    }

    #[inline(always)]
    fn cs(&self) -> usize {
        PANEL
    }

    #[inline(always)]
    fn row(&self, i: usize) -> usize {
        (i / PANEL) * panel_stride(self.k) + i % PANEL
    }

    fn fits(&self, m: usize, k: usize) -> bool {
        k <= self.k && panels_len(m, self.k).is_some_and(|v| v <= self.data.len())
    }

    #[inline(always)]
    fn prefetch(&self, i: usize, rows: usize, p0: usize, steps: usize) {
        // A tile of whole panels is one run per panel.
        for panel in i / PANEL..(i + rows).div_ceil(PANEL) {
            let start = panel.saturating_mul(panel_stride(self.k)).saturating_add(p0 * PANEL);
            let end = start.saturating_add(steps.saturating_mul(PANEL)).min(self.data.len());
            strip::prefetch(self.data.get(start..end).unwrap_or(&[]));
        }
    }
}

/// Where the `m x n` result goes: row `i` of it starts at `y[i * ldy]`.
pub(crate) struct Out<'a> {
    pub y: &'a mut [f32],
    pub ldy: usize,
}

/// The `C` term of a Gemm epilogue: `beta * C(i, j)`, with `C(i, j)` at
/// `data[i * rs + j * cs]` (strides 0 broadcast a row, a column or a scalar).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CTerm<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
    pub beta: f32,
}

/// A residual term of an epilogue: `R(i, j)` at `data[i * rs + j]`, added
/// as it is (a following `Add` of a tensor of the output's shape, fused).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Residual<'a> {
    pub data: &'a [f32],
    pub rs: usize,
}

/// What a product's sums become:
/// `smooth(act(alpha * acc + bias[i] + beta * C(i, j) + R(i, j)))`,
/// evaluated in that order, each step skipped when absent (`alpha` 1 is
/// skipped too: the product by 1 is exact). Applied a row of a tile at a
/// time with vector loops while the tile is in L1, instead of a call per
/// element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Epilogue<'a> {
    /// Scale of the sum (Gemm's `alpha`).
    pub alpha: f32,
    /// Added to every output of row `i` (a convolution's per-channel bias).
    pub row_bias: Option<&'a [f32]>,
    /// Gemm's `beta * C`.
    pub c: Option<CTerm<'a>>,
    /// A residual added after C (a fused `Add`).
    pub res: Option<Residual<'a>>,
    /// Applied after the residual.
    pub act: Activation,
    /// Applied last (set without `act` by the generator).
    pub smooth: Option<Smooth>,
}

impl<'a> Epilogue<'a> {
    /// The sums as they are.
    pub(crate) const NONE: Epilogue<'static> = Epilogue {
        alpha: 1.0,
        row_bias: None,
        c: None,
        res: None,
        act: Activation::None,
        smooth: None,
    };

    /// Only `act`, after an optional per-row bias.
    pub(crate) fn bias_act(row_bias: Option<&'a [f32]>, act: Activation) -> Self {
        Epilogue { row_bias, act, ..Epilogue::NONE }
    }

    /// Whether every sum is stored as it is.
    #[inline(always)]
    fn is_identity(&self) -> bool {
        self.alpha == 1.0
            && self.row_bias.is_none()
            && self.c.is_none()
            && self.res.is_none()
            && self.act == Activation::None
            && self.smooth.is_none()
    }

    /// Whether nothing but `alpha`, the row bias and `act` is applied: the
    /// steps a register tile of any column layout takes (C, the residual and
    /// the smooth activation are finished on contiguous rows).
    #[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
    #[inline(always)]
    pub(crate) fn in_registers_only(&self) -> bool {
        self.c.is_none() && self.res.is_none() && self.smooth.is_none()
    }

    /// The output `(i, j)` for the sum `acc`.
    #[inline]
    pub(crate) fn one(&self, i: usize, j: usize, acc: f32) -> f32 {
        let mut v = acc;
        if self.alpha != 1.0 {
            v *= self.alpha;
        }
        if let Some(b) = self.row_bias {
            v += b.get(i).copied().unwrap_or(0.0);
        }
        if let Some(c) = self.c {
            v += c.beta * c.data.get(i * c.rs + j * c.cs).copied().unwrap_or(0.0);
        }
        if let Some(r) = self.res {
            v += r.data.get(i * r.rs + j).copied().unwrap_or(0.0);
        }
        let v = self.act.apply(v);
        match self.smooth {
            Some(s) => s.apply(v),
            None => v,
        }
    }

    /// Replaces the sums `row[t]` of outputs `(i, j0 + t)` by the outputs,
    /// with the arithmetic of [`Epilogue::one`] in simple vector loops,
    /// all but the smooth activation (applied to whole tiles by `finish`).
    #[inline(always)]
    fn row(&self, i: usize, j0: usize, row: &mut [f32]) {
        let alpha = self.alpha;
        if alpha != 1.0 {
            for v in row.iter_mut() {
                *v *= alpha;
            }
        }
        if let Some(b) = self.row_bias {
            let b = b.get(i).copied().unwrap_or(0.0);
            for v in row.iter_mut() {
                *v += b;
            }
        }
        if let Some(c) = self.c {
            let (beta, base) = (c.beta, i * c.rs + j0 * c.cs);
            match (c.cs, c.data.get(base..base + row.len())) {
                (1, Some(src)) => {
                    for (v, x) in row.iter_mut().zip(src) {
                        *v += beta * *x;
                    }
                }
                (0, _) => {
                    let t = beta * c.data.get(base).copied().unwrap_or(0.0);
                    for v in row.iter_mut() {
                        *v += t;
                    }
                }
                _ => {
                    for (t, v) in row.iter_mut().enumerate() {
                        *v += beta * c.data.get(base + t * c.cs).copied().unwrap_or(0.0);
                    }
                }
            }
        }
        if let Some(r) = self.res {
            let base = i * r.rs + j0;
            match r.data.get(base..base + row.len()) {
                Some(src) => {
                    for (v, x) in row.iter_mut().zip(src) {
                        *v += *x;
                    }
                }
                None => {
                    for (t, v) in row.iter_mut().enumerate() {
                        *v += r.data.get(base + t).copied().unwrap_or(0.0);
                    }
                }
            }
        }
        self.act.apply_all(row);
    }

    /// [`Epilogue::row`] on the single row of a matrix-vector product, then
    /// the smooth activation (which `row` leaves to its caller).
    fn vector_row(&self, y: &mut [f32]) {
        vectorized(|| self.row(0, 0, y));
        if let Some(s) = self.smooth {
            let ncols = y.len();
            smooth_block(s, y, ncols, 1, ncols);
        }
    }
}

/// `Y = epi(A B)` with the micro-kernel `kern`, B packed in strips of up
/// to `min(BUF / NR, KC)` steps of `k`. The caller has checked that A and Y
/// hold the sizes; an index out of range stops the product early rather
/// than panicking.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn drive_buf<'e, K: Micro, A: ReadA, B: PackB, const BUF: usize>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &'e Epilogue<'e>,
) {
    let (mr, nr) = (K::MR, K::NR);
    let packed_b = b.strip(0, 0, nr).is_some();
    // A large A comes from memory: the start of each tile is fetched while
    // the one before it runs.
    let stream_a = a.data().len() > A_PREFETCH_FROM;
    if K::DIRECT_B && !packed_b {
        // B read in place needs no packed block to be shared by many tiles.
        let rows_from = if b.rows().is_some() { K::MR } else { WIDE_ROWS_FROM };
        let w = match n {
            _ if n > nr && n <= K::WIDE => Some(n),
            _ if K::WIDE > 0
                && n.is_multiple_of(K::WIDE)
                && n <= WIDE_UP_TO * K::WIDE
                && m >= rows_from =>
            {
                Some(K::WIDE)
            }
            _ if K::WIDE > 0 && n > K::WIDE && m >= rows_from => Some(K::WIDE - 1),
            _ => None,
        };
        if let Some(w) = w {
            drive_wide::<K, A, B, BUF>(kern, m, n, k, w, a, b, out, epi, stream_a);
            return;
        }
    }
    // A few strips cover every column of a product with a large A (a 7x7
    // output's 49 by the weights of a late layer): blocks of `k` shallow
    // enough that all of them fit the buffer at once, so each tile of A,
    // read from memory once per block, runs across every column. (A small
    // A, such as one of Winograd's products, stays in L2 between strips and
    // is faster in deeper blocks.)
    let all = n.div_ceil(nr);
    let kc_cap = match (BUF / nr).min(K::KC).max(1) {
        cap if stream_a && !packed_b && (2..=WHOLE_STRIPS).contains(&all) && k > cap / all => {
            (cap / all).max(1)
        }
        cap => cap,
    };
    // Blocks of `k` of even depth (288 = 144 + 144, not 256 + 32): the
    // partial sums make one round trip through Y per block.
    let kc_max = k.div_ceil(k.div_ceil(kc_cap));
    let mut strip = Strip::<BUF>::new();
    let mut rows = [0usize; MAX_MR];
    let Some(rows) = rows.get_mut(..mr) else { return };
    let identity = epi.is_identity();
    // With few rows of A, each packed strip would serve a few tiles only:
    // kernels that can read B's rows in place then skip the copy.
    // Up to 64 rows unless B's rows are a multiple of 4 KiB apart: then
    // every row of a strip falls in the same L1 sets and a packed copy
    // does better from 33 rows on.
    let direct = match b.rows() {
        Some((_, rs)) if K::DIRECT_B && (m <= 32 || (m <= 64 && rs % 1024 != 0)) => b.rows(),
        _ => None,
    };
    // With a short `k`, each strip serves its tiles for a few steps only and
    // the product is bound by its stores: a block of strips that fills the
    // buffer is packed at once and each tile's rows run across all of it,
    // so the output is written in runs of many lines per row instead of two
    // lines in each of all the rows in turn (too many streams for the
    // caches to fetch ahead). B already laid out in strips keeps one strip
    // at a time (with its prefetches).
    let group = match packed_b {
        true => 1,
        false => (BUF / kc_max.saturating_mul(nr).max(1)).clamp(1, MAX_GROUP),
    };
    // When one block of strips holds every column, each tile of A is done
    // with once it has run across them: A needs no blocking for the caches,
    // and the strips are packed once per block of `k` instead of once per
    // block of rows.
    let mc_max = if n <= group * nr { m } else { K::MC };
    let (y, ldy) = (out.y, out.ldy);
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        let (first, last) = (pc == 0, pc + kc == k);
        let mut ic = 0;
        while ic < m {
            let mc = mc_max.min(m - ic);
            // With a large A, the start of the tile after the one at row
            // `ir` is fetched while that one runs.
            let fetch_next = |ir: usize| {
                if stream_a && ir + mr < ic + mc {
                    a.prefetch(ir + mr, mr.min(ic + mc - ir - mr), pc, kc.min(A_AHEAD));
                }
            };
            let mut jc = 0;
            while group > 1 && jc < n {
                let bcols = (group * nr).min(n - jc);
                let nstrips = bcols.div_ceil(nr);
                // Strip `s` of the block at `blk[s * step..]`, rows `ldb` apart.
                let (blk, ldb, step) = match direct {
                    Some((data, rs)) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs, nr),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    None => {
                        let buf = strip.get(nstrips * kc * nr);
                        for (s, part) in buf.chunks_exact_mut(kc * nr).enumerate() {
                            let j = jc + s * nr;
                            b.pack(pc, kc, j, nr.min(n - j), nr, part);
                        }
                        (&*buf, nr, kc * nr)
                    }
                };
                let mut ir = ic;
                while ir < ic + mc {
                    let nrows = mr.min(ic + mc - ir);
                    fetch_next(ir);
                    for (r, row) in rows.iter_mut().enumerate() {
                        *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                    }
                    for s in 0..nstrips {
                        let j = jc + s * nr;
                        let (Some(bs), Some(dst)) =
                            (blk.get(s * step..), y.get_mut(ir * ldy + j..))
                        else {
                            debug_assert!(false, "product: B or Y short of tile ({ir}, {j})");
                            return;
                        };
                        let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: j });
                        let ncols = nr.min(n - j);
                        let t = TileB { b: bs, ldb };
                        tile(kern, kc, a, rows, t, dst, ldy, nrows, ncols, !first, tail);
                    }
                    ir += mr;
                }
                jc += bcols;
            }
            while jc < n {
                let ncols = nr.min(n - jc);
                // A strip read in place: the next one is fetched while
                // this one's tiles run, a part per tile, when there are
                // enough tiles to hide the prefetches (a product of few rows
                // spends as much issuing them as it saves).
                let mut next: &[f32] = &[];
                let tiles = mc.div_ceil(mr);
                let (buf, ldb) = match (b.strip(pc, jc, nr), direct) {
                    (Some(s), _) if tiles >= 4 => {
                        let after = b.strip(pc, jc + nr, nr).or_else(|| b.strip(pc + kc, 0, nr));
                        next = after.map_or(&[], |t| t.get(..kc * nr).unwrap_or(t));
                        (s, nr)
                    }
                    (Some(s), _) => (s, nr),
                    (None, Some((data, rs))) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    (None, None) => {
                        let buf = strip.get(kc * nr);
                        b.pack(pc, kc, jc, ncols, nr, buf);
                        (&*buf, nr)
                    }
                };
                let mut ir = ic;
                while ir < ic + mc {
                    let t = (ir - ic) / mr;
                    let part = next.get(t * next.len() / tiles..(t + 1) * next.len() / tiles);
                    // Into L2: this strip fills L1 (49 rows by 768 -> 3072
                    // with the weights from memory: 3.01 -> 2.68 ms).
                    strip::prefetch_l2(part.unwrap_or(&[]));
                    let nrows = mr.min(ic + mc - ir);
                    // The first strip reads A from memory.
                    if jc == 0 {
                        fetch_next(ir);
                    }
                    for (r, row) in rows.iter_mut().enumerate() {
                        // Rows past the end repeat the last one; their sums are dropped.
                        *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                    }
                    let Some(dst) = y.get_mut(ir * ldy + jc..) else {
                        debug_assert!(false, "product: Y short of tile ({ir}, {jc})");
                        return;
                    };
                    let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc });
                    let t = TileB { b: buf, ldb };
                    tile(kern, kc, a, rows, t, dst, ldy, nrows, ncols, !first, tail);
                    ir += mr;
                }
                jc += nr;
            }
            ic += mc;
        }
        pc += kc;
    }
}

/// [`drive_buf`] on wide tiles ([`Micro::wide`], a kernel that reads B in
/// place) of `w` columns each (`n` itself, or fewer, the last block
/// narrower). For each block of `k` and of rows of A:
/// - B whose rows lie in memory as they are ([`PackB::rows`]) is read
///   there, in chunks of [`SWEEP_COLS`] columns: each tile of rows runs
///   across a whole chunk ([`Micro::sweep`]) before the next tile, so it
///   writes its rows of the output in long runs;
/// - other B is packed `w` wide, a block at a time, and every tile of rows
///   runs across it.
///
/// Tiles whose rows of A are not a panel, and blocks narrower than a wide
/// tile, take the usual tiles over the same block.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn drive_wide<'e, K: Micro, A: ReadA, B: PackB, const BUF: usize>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    w: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &'e Epilogue<'e>,
    stream_a: bool,
) {
    let (mr, nr) = (K::MR, K::NR);
    // Blocks of `k` whose B fits the buffer, of even depth.
    let cap = (BUF / w).clamp(1, K::KC);
    let kc_max = k.div_ceil(k.div_ceil(cap));
    let in_place = b.rows();
    // B read in place in many blocks: each tile of rows runs across a
    // chunk of them at once, writing its rows of the output in long runs.
    let chunk = match in_place {
        Some(_) if w != n => (SWEEP_COLS / w).max(1) * w,
        _ => w,
    };
    // One block of columns: each tile of A is done with once it has run.
    let mc_max = if w == n { m } else { K::MC };
    let mut strip = Strip::<BUF>::new();
    let mut rows = [0usize; MAX_MR];
    let Some(rows) = rows.get_mut(..mr) else { return };
    let identity = epi.is_identity();
    let (y, ldy) = (out.y, out.ldy);
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        let (first, last) = (pc == 0, pc + kc == k);
        let mut ic = 0;
        while ic < m {
            let mc = mc_max.min(m - ic);
            let tiles = mc.div_ceil(mr);
            let mut jc = 0;
            while jc < n {
                let cw = chunk.min(n - jc);
                let (blk, ldb): (&[f32], usize) = match in_place {
                    Some((data, rs)) => match data.get(pc * rs + jc..) {
                        Some(d) => (d, rs),
                        None => {
                            debug_assert!(false, "product: B short of row {pc}, column {jc}");
                            return;
                        }
                    },
                    None => {
                        let buf = strip.get(kc * cw);
                        b.pack(pc, kc, jc, cw, cw, buf);
                        (&*buf, cw)
                    }
                };
                // The source of the next block is fetched while this one's
                // tiles run, a few rows per tile.
                let source = match (in_place.is_some(), jc + cw < n) {
                    (true, _) => None,
                    (false, true) => Some((pc, kc, jc + cw)),
                    (false, false) => (pc + kc < k).then(|| (pc + kc, kc_max.min(k - pc - kc), 0)),
                };
                let mut ir = ic;
                while ir < ic + mc {
                    let nrows = mr.min(ic + mc - ir);
                    if let Some((p0, depth, j0)) = source {
                        let t = (ir - ic) / mr;
                        let (from, to) = (t * depth / tiles, (t + 1) * depth / tiles);
                        b.prefetch(p0 + from, to - from, j0, cw);
                    }
                    if stream_a && jc == 0 && ir + mr < ic + mc {
                        a.prefetch(ir + mr, mr.min(ic + mc - ir - mr), pc, kc.min(A_AHEAD));
                    }
                    let row0 = a.row(ir) + pc * a.cs();
                    let panel = nrows == mr && (1..mr).all(|r| a.row(ir + r) == a.row(ir) + r);
                    let (data, cs) = (a.data(), a.cs());
                    let mut j = 0;
                    if panel
                        && cw > w
                        && w + 1 == K::WIDE
                        && let Some(dst) = y.get_mut(ir * ldy + jc..)
                    {
                        let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc });
                        j = kern.sweep(kc, data, row0, cs, blk, ldb, dst, ldy, cw, !first, tail);
                    }
                    while j < cw {
                        let w = w.min(cw - j);
                        let (Some(bw), Some(dst)) = (blk.get(j..), y.get_mut(ir * ldy + jc + j..))
                        else {
                            debug_assert!(
                                false,
                                "product: B or Y short of tile ({ir}, {})",
                                jc + j
                            );
                            return;
                        };
                        let tail = (last && !identity).then_some(Tail { epi, i0: ir, j0: jc + j });
                        // The residual comes from memory in a large model:
                        // the next tile's rows of it are fetched while this
                        // one runs (256->1024 at 14x14 with a residual from
                        // memory: 1.26 -> 1.20 ms).
                        if let (Some(r), true) = (epi.res.as_ref().filter(|_| last), panel) {
                            for i in ir + mr..(ir + 2 * mr).min(m) {
                                let at = i * r.rs + jc + j;
                                strip::prefetch(r.data.get(at..at + w).unwrap_or(&[]));
                            }
                        }
                        if !(panel
                            && kern.wide(kc, data, row0, cs, bw, ldb, dst, ldy, w, !first, tail))
                        {
                            for (r, row) in rows.iter_mut().enumerate() {
                                *row = a.row(ir + r.min(nrows - 1)) + pc * a.cs();
                            }
                            for jt in (0..w).step_by(nr) {
                                let (Some(bt), Some(dt)) = (bw.get(jt..), dst.get_mut(jt..)) else {
                                    debug_assert!(false, "product: B or Y short of a wide tile");
                                    return;
                                };
                                let tail = tail.map(|t| Tail { j0: t.j0 + jt, ..t });
                                let t = TileB { b: bt, ldb };
                                let ncols = nr.min(w - jt);
                                tile(kern, kc, a, rows, t, dt, ldy, nrows, ncols, !first, tail);
                            }
                        }
                        j += w;
                    }
                    ir += mr;
                }
                jc += cw;
            }
            ic += mc;
        }
        pc += kc;
    }
}

/// Columns of B read in place that each tile of rows of [`drive_wide`]
/// runs across at once. Measured on Zen 4, B read in place in such chunks
/// against B packed 48 columns at a time, with the sums of each chunk's
/// tiles in one call: 1x1 convolutions 5-25% faster at every depth tried
/// (16->96 at 112x112: 0.71 -> 0.46 ms; 256->128 at 56x56: 2.07 -> 1.90
/// ms), also with rows a multiple of 4 KiB apart; 480 and 6144 columns ran
/// the same as 1920.
const SWEEP_COLS: usize = 1920;

/// Wide tiles up to which a product of a multiple of [`Micro::WIDE`]
/// columns runs on them (a 14x14 output's 196 = 4 x 49) when it has
/// [`WIDE_ROWS_FROM`] rows or more; other products of that many rows and
/// more columns run on tiles one column narrower (48, three full vectors),
/// the last block on the usual strips. Measured on Zen 4, against strips
/// of [`Micro::NR`] (and a column kernel for the 4 left over at 196): 3-6%
/// faster at 196 columns, 2-4% at 784 and 3136 with a short `k`, the same
/// elsewhere; slower below 96 rows when B must be packed (each packed block
/// serves too few tiles), and at 784 columns and more in blocks of 49 (the
/// extra column's epilogue, done in memory, costs more there than it saves).
/// B read in place takes wide tiles from one tile of rows up: 1x1
/// convolutions of 16 to 64 output channels ran 10-20% faster on them than
/// on strips (96->24 at 112x112: 0.66 -> 0.55 ms).
const WIDE_UP_TO: usize = 4;

/// See [`WIDE_UP_TO`]: the fewest rows for wide tiles over a packed B.
const WIDE_ROWS_FROM: usize = 96;

/// A tile's B operand for [`tile`]: `(p, c)` at `b[p * ldb + c]`.
#[derive(Clone, Copy)]
struct TileB<'b> {
    b: &'b [f32],
    ldb: usize,
}

/// One tile of [`drive_buf`]: rows `rows` of A (the first `nrows` real)
/// times `ncols` columns of `t` into `dst`. A tile of `16q + t` columns (`t`
/// small: a 7x7 output's 49 = 32 + 16 + 1, a 14x14 one's last 4) runs its
/// last `t` as one vector over the rows when those are adjacent in A.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn tile<K: Micro, A: ReadA>(
    kern: K,
    kc: usize,
    a: A,
    rows: &[usize],
    t: TileB<'_>,
    dst: &mut [f32],
    ldd: usize,
    nrows: usize,
    ncols: usize,
    load: bool,
    tail: Option<Tail<'_>>,
) {
    let TileB { b, ldb } = t;
    let rest = ncols % 16;
    // A whole tile of a few columns, when its sums are long enough to repay
    // the column kernel's epilogue in memory.
    let split = (ncols > 16 || (ncols == rest && kc >= COLUMNS_ALONE_FROM))
        && rest > 0
        && rest <= K::COLS
        && rows.iter().take(nrows).enumerate().all(|(r, &v)| v == rows[0] + r);
    let mut main = ncols;
    if split {
        let j = ncols - rest;
        let tail_t = tail.map(|t| Tail { j0: t.j0 + j, ..t });
        let done = match (b.get(j..), dst.get_mut(j..)) {
            (Some(bt), Some(dt)) => kern.columns(
                kc,
                a.data(),
                rows[0],
                a.cs(),
                bt,
                ldb,
                dt,
                ldd,
                nrows,
                rest,
                load,
                tail_t,
            ),
            _ => false,
        };
        if done {
            main = j;
        }
    }
    if main > 0 {
        kern.kernel(kc, a.data(), rows, a.cs(), b, ldb, dst, ldd, nrows, main, load, tail);
    }
}

/// Steps of `k` from which a tile of at most [`Micro::COLS`] columns runs
/// on the column kernel alone (a 14x14 output's last 4 columns; a 1x1
/// output's single column with a short `k` is faster on the row kernel).
const COLUMNS_ALONE_FROM: usize = 64;

/// The most strips that cover every column of a product for [`drive_buf`]
/// to shorten its blocks of `k` so they are packed at once (4: blocks of at
/// least 64 steps).
const WHOLE_STRIPS: usize = 4;

/// The most strips [`drive_buf`] packs as one block (a product with `k` of
/// 16 or less fills its buffer with this many 32-wide strips).
const MAX_GROUP: usize = 16;

/// Checks the operands, then runs [`drive_buf`] with a strip buffer of
/// 256 steps of `k` for the kernel's width, compiled for its instruction set.
#[allow(clippy::too_many_arguments)]
fn drive<K: Micro, A: ReadA, B: PackB>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    if m == 0 || n == 0 {
        return Ok(());
    }
    let y_need = (m - 1).checked_mul(out.ldy).and_then(|v| v.checked_add(n));
    ensure(out.ldy >= n && y_need.is_some_and(|v| v <= out.y.len()), Error::ShapeMismatch)?;
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                out.y[i * out.ldy + j] = epi.one(i, j, 0.0);
            }
        }
        return Ok(());
    }
    ensure(a.fits(m, k), Error::ShapeMismatch)?;
    ensure(K::MR <= MAX_MR && K::NR <= 32, Error::InvalidParams)?;
    // A small output (in L1 or close) takes its smooth activation in one
    // pass at the end rather than one call per tile.
    let whole = epi.smooth.filter(|_| m.saturating_mul(n) <= SMOOTH_WHOLE);
    let tiles = Epilogue { smooth: epi.smooth.filter(|_| whole.is_none()), ..*epi };
    let epi = &tiles;
    let Out { y, ldy } = out;
    kern.within(|| {
        if K::NR <= 4 {
            drive_buf::<K, A, B, { 256 * 4 }>(kern, m, n, k, a, b, Out { y: &mut *y, ldy }, epi);
        } else if K::NR <= 8 {
            drive_buf::<K, A, B, { 256 * 8 }>(kern, m, n, k, a, b, Out { y: &mut *y, ldy }, epi);
        } else if K::NR <= 16 {
            drive_buf::<K, A, B, { 256 * 16 }>(kern, m, n, k, a, b, Out { y: &mut *y, ldy }, epi);
        } else {
            drive_buf::<K, A, B, { 256 * 32 }>(kern, m, n, k, a, b, Out { y: &mut *y, ldy }, epi);
        }
    });
    if let Some(s) = whole {
        smooth_block(s, y, ldy, m, n);
    }
    Ok(())
}

/// Outputs up to which a product's smooth activation runs once over the
/// whole output (16 KiB of f32) instead of tile by tile.
const SMOOTH_WHOLE: usize = 4096;

/// `Y[i, j] = epi(i, j, sum_p A(i, p) B(p, j))` on the best kernel for this CPU.
/// The B packer must cover `k x n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product<A: ReadA, B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(kern) = avx512::Avx512::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(kern) = avx2::Avx2::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(kern) = neon::Neon::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    drive(PortableKernel {}, m, n, k, a, b, out, epi)
}

/// 2-D convolution of a few input planes (a network's stem, narrow strided
/// layers; see `conv::stem::avx512` for which) into
/// `m` output planes (groups of one, geometry `g`; the weights `w` an `m x
/// cin * kh * kw` A operand), adding `bias`, applying `act`, then `smooth`,
/// with the output channels in the vector lanes. Returns `false`, `y`
/// untouched, when this CPU or shape has no such path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d_stem<A: ReadA>(
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    smooth: Option<Smooth>,
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        let f = match smooth.map(Smooth::vector) {
            None => None,
            Some(Some(f)) => Some(f),
            Some(None) => return false,
        };
        return conv::stem::avx512::conv2d(cpu, g, cin, m, x, w, bias, act, f, y);
    }
    let _ = (g, cin, m, x, w, bias, act, smooth, y);
    false
}

/// The im2col rows of one channel and kernel row of a convolution whose
/// kernel is as wide as its stride (a patch layer, 16 wide): `dst[kx *
/// stride + c] = src[c * 16 + kx]` for `kx < 16` and `c < len`, the patches
/// transposed sixteen at a time. `false`, nothing written, where this CPU
/// has no such path.
pub(crate) fn patch16_rows(src: &[f32], len: usize, dst: &mut [f32], stride: usize) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return conv::stem::avx512::patch16(cpu, src, len, dst, stride);
    }
    let _ = (src, len, dst, stride);
    false
}

/// 2-D convolution of `cin` input planes into `m` output planes (groups of
/// one, geometry `g`; the weights `w` an `m x cin * kh * kw` A operand),
/// adding `bias` and applying `act`, read in place from
/// a staged copy of the input instead of packed im2col strips. Returns
/// `false` when this CPU or geometry has no such path (the output may then
/// be partly written: the caller computes all of it another way).
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d_direct<A: ReadA>(
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return conv::direct::avx512::conv2d(cpu, g, cin, m, x, w, bias, act, y);
    }
    let _ = (g, cin, m, x, w, bias, act, y);
    false
}

/// A matrix-vector product `y[j] = epi(0, j, sum_p a[p] B(p, j))` with B
/// dense: `B(p, j)` at `data[p * rs + j * cs]`. Rows of B (`cs == 1`) are
/// added one after another, each output summing in ascending `p`; columns
/// of B (`rs == 1`) are dot products.
pub(crate) fn vector_product(
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &DenseB<'_>,
    y: &mut [f32],
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    let Some(y) = y.get_mut(..n) else { return Err(Error::ShapeMismatch) };
    y.fill(0.0);
    if k == 0 || n == 0 {
        epi.vector_row(y);
        return Ok(());
    }
    // A's row, contiguous: `ViewA` with `cs == 1`.
    ensure(a.cs == 1, Error::InvalidParams)?;
    let av = a.data.get(a.off..a.off + k).ok_or(Error::ShapeMismatch)?;
    let b_last = (k - 1).checked_mul(b.rs).and_then(|v| v.checked_add((n - 1).checked_mul(b.cs)?));
    ensure(b_last.is_some_and(|v| v < b.data.len()), Error::ShapeMismatch)?;
    if b.cs == 1 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        let fast = avx2::Avx2::detect();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = fast {
            f.axpy_rows(av, b.data, b.rs, y);
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        let fast: Option<()> = None;
        if fast.is_none() {
            for (p, &x) in av.iter().enumerate() {
                let row = &b.data[p * b.rs..p * b.rs + n];
                for (v, &w) in y.iter_mut().zip(row) {
                    *v += x * w;
                }
            }
        }
    } else if b.rs == 1 {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        let fast = avx2::Avx2::detect();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = avx512::Avx512::detect() {
            f.dots(av, b.data, b.cs, y);
        } else if let Some(f) = fast {
            f.dots(av, b.data, b.cs, y);
        }
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        let fast = neon::Neon::detect();
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        if let Some(f) = fast {
            f.dots(av, b.data, b.cs, y);
        }
        #[cfg(not(any(
            all(target_arch = "x86_64", target_feature = "sse2"),
            all(target_arch = "aarch64", target_feature = "neon")
        )))]
        let fast: Option<()> = None;
        if fast.is_none() {
            for (j, v) in y.iter_mut().enumerate() {
                let col = &b.data[j * b.cs..j * b.cs + k];
                let mut s = 0.0f32;
                for (x, w) in av.iter().zip(col) {
                    s += x * w;
                }
                *v = s;
            }
        }
    } else {
        return Err(Error::InvalidParams);
    }
    if !epi.is_identity() {
        epi.vector_row(y);
    }
    Ok(())
}

/// A row times a B laid out in strips: `y[j] = epi(0, j, sum_p a[p] B(p, j))`
/// for `j < n`, each output summing in ascending `p`. A strip's 32 sums stay
/// in registers over all of `k`.
pub(crate) fn strips_vector_product(
    n: usize,
    a: &[f32],
    b: &StripsB<'_>,
    y: &mut [f32],
    epi: &Epilogue<'_>,
) -> crate::Result {
    use crate::{Error, ensure};
    let k = b.k;
    let Some(y) = y.get_mut(..n) else { return Err(Error::ShapeMismatch) };
    let need = n.div_ceil(STRIP).checked_mul(STRIP).and_then(|v| v.checked_mul(k));
    ensure(a.len() == k && need.is_some_and(|v| v <= b.data.len()), Error::ShapeMismatch)?;
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(f) = avx512::Avx512::detect() {
        f.strips_row(a, b.data, y);
        if !epi.is_identity() {
            epi.vector_row(y);
        }
        return Ok(());
    }
    y.fill(0.0);
    struct Body<'a> {
        a: &'a [f32],
        strips: &'a [f32],
        k: usize,
        y: &'a mut [f32],
    }
    impl Vectorize for Body<'_> {
        type Output = ();
        #[inline(always)]
        fn run(self) {
            let len = (STRIP * self.k).max(1);
            for (yc, strip) in self.y.chunks_mut(STRIP).zip(self.strips.chunks(len)) {
                let mut acc = [0.0f32; STRIP];
                for (x, row) in self.a.iter().zip(strip.chunks_exact(STRIP)) {
                    for (s, w) in acc.iter_mut().zip(row) {
                        *s += x * w;
                    }
                }
                yc.copy_from_slice(&acc[..yc.len()]);
            }
        }
    }
    vectorize(Body { a, strips: b.data, k, y: &mut *y });
    if !epi.is_identity() {
        epi.vector_row(y);
    }
    Ok(())
}

/// Where the vector input transform of `crate::winograd` reads: planes of
/// `plane` floats, one per channel, in which the four input rows of the
/// tiles start at `rows` (`None`: a row of padding) and hold `w` floats;
/// tile `j` covers columns `first + 2j .. first + 2j + 4` of them (zero
/// outside the row).
#[derive(Clone, Copy)]
#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
pub(crate) struct TileRows {
    pub plane: usize,
    pub rows: [Option<usize>; 4],
    pub w: usize,
    pub first: isize,
}

#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
impl TileRows {
    /// Whether an input transform of `n` tiles of `channels` channels reads
    /// inside `x_len` floats (every row inside its plane) and writes `V_xi`
    /// of channel `c`'s tile `j` at `xi * xs + c * cs + at + j` inside
    /// `v_len` floats; false for no tiles or no channels. The vector units
    /// check this before their unchecked loops.
    pub(crate) fn input_fits(
        self,
        x_len: usize,
        channels: usize,
        n: usize,
        v_len: usize,
        at: usize,
        [xs, cs]: [usize; 2],
    ) -> bool {
        let v_need = xs
            .checked_mul(15)
            .zip(cs.checked_mul(channels.saturating_sub(1)))
            .and_then(|(a, b)| a.checked_add(b))
            .and_then(|s| s.checked_add(at))
            .and_then(|s| s.checked_add(n));
        let x_need = self.plane.checked_mul(channels);
        let rows_fit = self
            .rows
            .iter()
            .flatten()
            .all(|&r| r.checked_add(self.w).is_some_and(|e| e <= self.plane));
        n != 0
            && channels != 0
            && rows_fit
            && x_need.is_some_and(|e| e <= x_len)
            && v_need.is_some_and(|e| e <= v_len)
    }

    /// Whether an output transform of `n` tiles reads `M_xi` of tile `j` at
    /// `xi * stride + at + j` inside `m_len` floats and each given output
    /// row holds the `cols <= 2 n` floats written; false for no tiles.
    pub(crate) fn output_fits(
        m_len: usize,
        at: usize,
        stride: usize,
        n: usize,
        out: &[Option<&mut [f32]>; 2],
        cols: usize,
    ) -> bool {
        let m_need =
            stride.checked_mul(15).and_then(|s| s.checked_add(at)).and_then(|s| s.checked_add(n));
        let rows_fit = out.iter().all(|r| r.as_ref().is_none_or(|r| r.len() >= cols));
        n != 0 && cols <= 2 * n && rows_fit && m_need.is_some_and(|e| e <= m_len)
    }
}

/// The vector transforms of `crate::winograd` (AVX-512, else AVX2), when
/// this CPU has them; their results are bit for bit the portable
/// transforms'.
#[derive(Clone, Copy)]
pub(crate) struct WinogradTransforms {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    unit: WinogradUnit,
}

/// The vector unit of [`WinogradTransforms`].
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[derive(Clone, Copy)]
enum WinogradUnit {
    Avx512(avx512::Avx512),
    Avx2(avx2::Avx2),
}

impl WinogradTransforms {
    /// `Some` when the vector transforms run on this CPU (AVX-512 first).
    #[inline]
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            let unit = match (avx512::Avx512::detect(), avx2::Avx2::detect()) {
                (Some(cpu), _) => WinogradUnit::Avx512(cpu),
                (None, Some(cpu)) => WinogradUnit::Avx2(cpu),
                (None, None) => return None,
            };
            Some(WinogradTransforms { unit })
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        None
    }

    /// Each unit's transforms, for tests: AVX-512's, then AVX2's even where
    /// AVX-512 is there; `None` for a unit this CPU (under the ISA cap)
    /// lacks, reported by [`tests::needs`]. None at all on targets without
    /// them.
    #[cfg(test)]
    pub(crate) fn each_unit() -> [Option<Self>; 2] {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        return [
            tests::avx512().map(|cpu| WinogradTransforms { unit: WinogradUnit::Avx512(cpu) }),
            tests::avx2().map(|cpu| WinogradTransforms { unit: WinogradUnit::Avx2(cpu) }),
        ];
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        [None, None]
    }

    /// The input transform of `n` tiles of each of `channels` channels of
    /// `x` (see `winograd::avx512::input_tiles`): `V_xi` of channel `c`'s tile
    /// `j` to `v[xi * xs + c * cs + at + j]`. False when nothing was
    /// written (an operand too short).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn inputs(
        self,
        x: &[f32],
        src: TileRows,
        channels: usize,
        n: usize,
        v: &mut [f32],
        at: usize,
        strides: [usize; 2],
    ) -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        return match self.unit {
            WinogradUnit::Avx512(cpu) => {
                winograd::avx512::input_tiles(cpu, x, src, channels, n, v, at, strides)
            }
            WinogradUnit::Avx2(cpu) => {
                winograd::avx2::input_tiles(cpu, x, src, channels, n, v, at, strides)
            }
        };
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        {
            let _ = (x, src, channels, n, v, at, strides);
            false
        }
    }

    /// The output transform of `n` tiles of one output channel, bias and
    /// activation included (see `winograd::avx512::output_tiles`). False when
    /// nothing was written.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn outputs(
        self,
        m: &[f32],
        at: usize,
        stride: usize,
        n: usize,
        bias: Option<f32>,
        act: Activation,
        out: [Option<&mut [f32]>; 2],
        cols: usize,
    ) -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        return match self.unit {
            WinogradUnit::Avx512(cpu) => {
                winograd::avx512::output_tiles(cpu, m, at, stride, n, bias, act, out, cols)
            }
            WinogradUnit::Avx2(cpu) => {
                winograd::avx2::output_tiles(cpu, m, at, stride, n, bias, act, out, cols)
            }
        };
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        {
            let _ = (m, at, stride, n, bias, act, out, cols);
            false
        }
    }
}

/// Runs `f`, compiled for the widest vector unit detected (AVX2 on x86-64)
/// when `f`'s loops are inlined into it; the arithmetic does not change.
#[inline]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(v) = avx2::Avx2::detect() {
        return v.vectorized(f);
    }
    f()
}

/// A body of loops to compile for the widest vector unit, see [`vectorize`].
pub(crate) trait Vectorize {
    /// What the body returns.
    type Output;
    /// The body. Implementations mark it `#[inline(always)]`: it is then
    /// compiled inside the AVX2 function whatever its size (a closure given
    /// to [`vectorized`] is inlined only while small).
    fn run(self) -> Self::Output;
}

/// Runs `k`, compiled for the widest vector unit detected (AVX2 on x86-64);
/// the arithmetic does not change.
#[inline]
pub(crate) fn vectorize<K: Vectorize>(k: K) -> K::Output {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(v) = avx2::Avx2::detect() {
        return v.vectorize(k);
    }
    k.run()
}

/// Runs `k` compiled for the widest vector unit including AVX-512 (the
/// element-wise kernels' entry; see `avx2::vectorize_wide`).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use avx2::vectorize_wide;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) use vectorize as vectorize_wide;

/// Whether the fused-multiply-add kernels run on this CPU (results then
/// differ from the exact kernels by rounding).
pub fn uses_fma() -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if avx2::Avx2::detect().is_some() || avx512::Avx512::detect().is_some() {
        return true;
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon::Neon::detect().is_some() {
        return true;
    }
    false
}

/// [`product`] with the portable kernel forced, for tests comparing paths.
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn product_portable<A: ReadA, B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: A,
    b: &B,
    out: Out<'_>,
    epi: &Epilogue<'_>,
) -> crate::Result {
    drive(PortableKernel {}, m, n, k, a, b, out, epi)
}

/// The functions [`exp_family`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VFunc {
    /// `e^x`.
    Exp,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x / (1 + e^-x)`.
    Silu,
    /// ONNX `Gelu` without approximation, [`vmath::gelu`](crate::vmath::gelu)'s
    /// polynomials with fused steps.
    Gelu,
    /// ONNX `HardSwish`, `x * clamp(x * (1 / 6) + 1 / 2, 0, 1)`: the
    /// standalone op's operations, unfused, so bit for bit its results.
    /// (Only the x86-64 routines compute it.)
    #[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
    HardSwish,
}

/// `y[i] = f(x[i])` (or in place, `x` `None`) in explicit vector code where
/// the CPU has AVX2+FMA; `false` (nothing done) elsewhere, for the
/// caller's portable loop.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn exp_family(f: VFunc, x: Option<&[f32]>, y: &mut [f32]) -> bool {
    math::vexp::apply(f, x, y)
}

/// No explicit vector code on this target: the portable loops run.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn exp_family(_: VFunc, _: Option<&[f32]>, _: &mut [f32]) -> bool {
    false
}

/// One Softmax row, `y = e^(x - max) / sum` (in place when `x` is `None`;
/// `x` as long as `y`), in explicit AVX-512 code: the operations of the
/// portable row in `softmax` (partial maxima, the difference, `vexp`'s
/// exponential, sixteen partial sums added pairwise, then the rest in
/// order, one reciprocal), fused into three passes, bit for bit the same.
/// `false` (nothing done) without AVX-512.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn softmax_row(x: Option<&[f32]>, y: &mut [f32]) -> bool {
    math::vexp::softmax_row(x, y)
}

/// No explicit vector code on this target: the portable row runs.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn softmax_row(_: Option<&[f32]>, _: &mut [f32]) -> bool {
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An extension a test needs from the CPU (under the ISA cap).
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Need {
        /// AVX2 and FMA (`avx2::Avx2`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        Avx2,
        /// AVX-512F (`avx512::Avx512`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        Avx512,
        /// NEON's kernels (aarch64), off only under `Isa::Portable`.
        #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
        Neon,
    }

    impl Need {
        fn name(self) -> &'static str {
            match self {
                Need::Avx2 => "avx2+fma",
                Need::Avx512 => "avx512f",
                Need::Neon => "neon",
            }
        }

        /// The environment variable that turns a skip for want of this
        /// extension into a failure (x86-64 test binaries only: the
        /// variables describe the x86-64 machine CI runs on).
        fn required_by(self) -> Option<&'static str> {
            match self {
                Need::Avx2 if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX2"),
                Need::Avx512 if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX512"),
                _ => None,
            }
        }
    }

    /// Whether a test (or the part of one) that needs `need` can run:
    /// `available` says whether the CPU has it under the ISA cap. When it
    /// cannot, prints `skipped: <test>: needs <extension>` to stderr (past
    /// the harness's capture) and returns `false`, or fails the test when
    /// the environment requires the extension (`REQUIRE_AVX2=1`,
    /// `REQUIRE_AVX512=1`; CI sets them on machines that have it, so
    /// nothing there is skipped unnoticed).
    pub(crate) fn can_run(need: Need, available: bool) -> bool {
        use std::io::Write;
        if available {
            return true;
        }
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("<unnamed test>");
        let cap = max_isa();
        let why = if cap == Isa::Avx512 {
            std::format!("needs {}", need.name())
        } else {
            std::format!("needs {} ({}={})", need.name(), MAX_ISA_VAR, cap.name())
        };
        if let Some(var) = need.required_by()
            && std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
        {
            panic!("{test}: {why}, which {var} requires");
        }
        // Straight to the stream: the test harness captures `eprintln!`
        // of passing tests, and a skip must show in a plain `cargo test`.
        let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
        false
    }

    /// Runs `f`, a kernel call whose bounds do not hold: its
    /// `debug_assert!` stops it in debug builds; in release builds it
    /// returns (having written nothing, which the test then checks).
    pub(crate) fn out_of_bounds(f: impl FnOnce()) {
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
        assert_eq!(stopped, cfg!(debug_assertions), "a call out of bounds stopped: {stopped}");
    }

    /// [`can_run`] on the extension `token` proves, passing it on.
    pub(crate) fn needs<T>(need: Need, token: Option<T>) -> Option<T> {
        can_run(need, token.is_some()).then_some(token).flatten()
    }

    /// The AVX2 kernels' token, or `None` after [`can_run`] reported the skip.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(crate) fn avx2() -> Option<avx2::Avx2> {
        needs(Need::Avx2, avx2::Avx2::detect())
    }

    /// The AVX-512 kernels' token, or `None` after [`can_run`] reported the
    /// skip.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(crate) fn avx512() -> Option<avx512::Avx512> {
        needs(Need::Avx512, avx512::Avx512::detect())
    }

    /// The NEON kernels' token, or `None` after [`can_run`] reported the
    /// skip.
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    pub(crate) fn neon() -> Option<neon::Neon> {
        needs(Need::Neon, neon::Neon::detect())
    }

    /// Deterministic values in [-1, 1) with a few exact zeros, any length.
    pub(crate) fn fill(out: &mut [f32], seed: u32) {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        for v in out.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = (x % 2001) as f32 / 1000.0 - 1.0;
        }
    }

    const A_LEN: usize = 40 * 300 + 7;
    const Y_LEN: usize = 300 * 43;

    /// The epilogues the fast paths must reproduce, by index.
    fn epilogue<'a>(which: usize, bias: &'a [f32], c: &'a [f32], ldc: usize) -> Epilogue<'a> {
        match which % 9 {
            0 => Epilogue::NONE,
            1 => Epilogue::bias_act(Some(bias), Activation::Relu),
            2 => Epilogue {
                alpha: 0.5,
                row_bias: None,
                c: Some(CTerm { data: c, rs: 0, cs: 1, beta: 2.0 }),
                act: Activation::Clip { min: -0.5, max: 0.75 },
                ..Epilogue::NONE
            },
            3 => Epilogue {
                alpha: -1.5,
                row_bias: None,
                c: Some(CTerm { data: c, rs: ldc, cs: 1, beta: 0.25 }),
                act: Activation::LeakyRelu { alpha: 0.1 },
                ..Epilogue::NONE
            },
            4 => Epilogue {
                alpha: 1.0,
                row_bias: None,
                c: Some(CTerm { data: c, rs: 1, cs: 0, beta: -1.0 }),
                act: Activation::None,
                ..Epilogue::NONE
            },
            5 => Epilogue {
                alpha: 2.0,
                row_bias: Some(bias),
                c: Some(CTerm { data: c, rs: ldc, cs: 2, beta: 1.0 }),
                act: Activation::Relu,
                ..Epilogue::NONE
            },
            // A residual of the output's layout, after a bias row, then GELU.
            6 => Epilogue {
                c: Some(CTerm { data: c, rs: 0, cs: 1, beta: 1.0 }),
                res: Some(Residual { data: &c[7..], rs: ldc }),
                smooth: Some(Smooth::Gelu),
                ..Epilogue::NONE
            },
            // HardSwish after a bias row and Clip.
            8 => Epilogue {
                smooth: Some(Smooth::HardSwish),
                ..Epilogue::bias_act(Some(bias), Activation::Clip { min: -4.0, max: 0.5 })
            },
            // A residual alone, with a per-row bias and Relu after it.
            _ => Epilogue {
                alpha: -0.5,
                res: Some(Residual { data: c, rs: ldc }),
                smooth: Some(if ldc.is_multiple_of(2) { Smooth::GeluTanh } else { Smooth::Silu }),
                ..Epilogue::bias_act(Some(bias), Activation::Relu)
            },
        }
    }

    /// Runs `kern` and the portable kernel (the exact arithmetic) on one
    /// product and compares within rounding; `y` rows are `ldy` apart and
    /// the gaps between them must be left alone.
    #[allow(clippy::too_many_arguments)]
    fn check<K: Micro>(kern: K, m: usize, n: usize, k: usize, trans_a: bool, which: usize) {
        let (mut a, mut b) = ([0.0f32; A_LEN], [0.0f32; A_LEN]);
        fill(&mut a, (m * 131 + n * 7 + k) as u32);
        fill(&mut b, (k * 17 + n) as u32);
        let (mut bias, mut c) = ([0.0f32; 300], [0.0f32; 2 * Y_LEN]);
        fill(&mut bias, 5);
        fill(&mut c, 6);
        let ldy = n + 3;
        let va = if trans_a {
            ViewA { data: &a, off: 7, rs: 1, cs: m }
        } else {
            ViewA { data: &a, off: 7, rs: k, cs: 1 }
        };
        let vb = DenseB { data: &b[..k * n], rs: n, cs: 1 };
        let epi = epilogue(which, &bias, &c, ldy);
        let (mut want, mut got) = ([9.0f32; Y_LEN], [9.0f32; Y_LEN]);
        drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy }, &epi).unwrap();
        drive(kern, m, n, k, va, &vb, Out { y: &mut got, ldy }, &epi).unwrap();
        for i in 0..m {
            for j in 0..ldy {
                let (g, w) = (got[i * ldy + j], want[i * ldy + j]);
                if j >= n {
                    assert_eq!(g, 9.0, "gap written at ({i}, {j}), {m}x{n}x{k}");
                    continue;
                }
                let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
                assert!(
                    (g - w).abs() <= tol * (1.0 + w.abs()),
                    "({i}, {j}) of {m}x{n}x{k} ta {trans_a} epi {which}: {g} vs {w}"
                );
            }
        }
        assert!(got[m * ldy..].iter().all(|&v| v == 9.0));
    }

    fn sweep<K: Micro>(kern: K) {
        let ms = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 23, 31, 33, 40];
        let ns = [1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40];
        let ks = [1, 2, 3, 5, 16, 17, 40, 257, 300];
        let mut which = 0;
        for &m in &ms {
            for &n in &ns {
                for &k in &ks {
                    which += 1;
                    check(kern, m, n, k, which % 3 == 0, which);
                }
            }
        }
        // More rows than one block of A (`MC`).
        for (m, n, k) in [(260, 5, 3), (130, 33, 2), (299, 17, 40), (520, 9, 20)] {
            for which in 0..8 {
                check(kern, m, n, k, which % 2 == 0, which);
            }
        }
    }

    #[test]
    fn portable_kernel_matches_the_exact_arithmetic_elsewhere() {
        // Portable<4> (the Cortex-M width) against Portable<8>, bit for bit.
        for (m, n, k) in [(1, 1, 1), (5, 9, 300), (13, 5, 17), (4, 4, 4)] {
            let (mut a, mut b) = ([0.0f32; A_LEN], [0.0f32; A_LEN]);
            fill(&mut a, 1);
            fill(&mut b, 2);
            let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
            let vb = DenseB { data: &b, rs: n, cs: 1 };
            let (mut want, mut got) = ([0.0f32; Y_LEN], [0.0f32; Y_LEN]);
            let epi = Epilogue::bias_act(Some(&a[..m]), Activation::Relu);
            drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
            drive(Portable::<4>, m, n, k, va, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
            assert_eq!(got, want);
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx2_kernel_matches_portable_on_awkward_sizes() {
        if let Some(kern) = avx2() {
            sweep(kern);
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn avx512_kernel_matches_portable_on_awkward_sizes() {
        if let Some(kern) = avx512() {
            sweep(kern);
        }
    }

    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    #[test]
    fn neon_kernel_matches_portable_on_awkward_sizes() {
        if let Some(kern) = neon() {
            sweep(kern);
            check_special(kern);
        }
    }

    /// `kern` on A packed in panels against the portable kernel on the
    /// same A strided: equal within rounding (bit for bit when `kern` is
    /// the portable kernel), whatever the kernel's tile height.
    fn check_panels<K: Micro>(kern: K) {
        for (m, n, k) in
            [(1usize, 1, 1), (3, 7, 5), (8, 33, 17), (9, 40, 257), (13, 5, 300), (40, 9, 3)]
        {
            let mut a = [0.0f32; A_LEN];
            fill(&mut a, (m * 7 + k) as u32);
            let mut b = [0.0f32; A_LEN];
            fill(&mut b, (n * 3 + k) as u32);
            let mut bias = [0.0f32; 40];
            fill(&mut bias, 4);
            let mut packed = [f32::NAN; A_LEN];
            let plen = panels_len(m, k).unwrap();
            crate::conv::pack_conv_weights(m, k, &a[..m * k], &mut packed[..plen]).unwrap();
            let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
            let pa = PanelA { data: &packed[..plen], k };
            let vb = DenseB { data: &b[..k * n], rs: n, cs: 1 };
            for epi in [Epilogue::NONE, Epilogue::bias_act(Some(&bias), Activation::Relu)] {
                let (mut want, mut got) = ([9.0f32; Y_LEN], [9.0f32; Y_LEN]);
                drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
                drive(kern, m, n, k, pa, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
                    assert!(
                        (g - w).abs() <= tol * (1.0 + w.abs()),
                        "{m}x{n}x{k} [{i}]: {g} vs {w}"
                    );
                }
            }
            // Too few panels for `m` rows: refused, nothing read.
            let short = PanelA { data: &packed[..plen - 1], k };
            let r = drive(kern, m, n, k, short, &vb, Out { y: &mut [0.0; Y_LEN], ldy: n }, &{
                Epilogue::NONE
            });
            assert_eq!(r, Err(crate::Error::ShapeMismatch));
        }
    }

    /// An A of more than 256 KiB (the AVX-512 kernel then prefetches it),
    /// strided and in panels, against the portable kernel.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn large_a_operands_match_portable() {
        let Some(kern) = avx512() else { return };
        let (m, n, k) = (37, 45, 1800);
        let mut a = std::vec![0.0f32; m * k + 5];
        fill(&mut a, 21);
        let mut b = std::vec![0.0f32; k * n];
        fill(&mut b, 22);
        let mut packed = std::vec![0.0f32; panels_len(m, k).unwrap()];
        crate::conv::pack_conv_weights(m, k, &a[5..], &mut packed).unwrap();
        let va = ViewA { data: &a, off: 5, rs: k, cs: 1 };
        let pa = PanelA { data: &packed, k };
        let vb = DenseB { data: &b, rs: n, cs: 1 };
        let epi = Epilogue::bias_act(Some(&a[..m]), Activation::LeakyRelu { alpha: 0.5 });
        let mut want = std::vec![0.0f32; m * n];
        drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
        for which in 0..2 {
            let mut got = std::vec![f32::NAN; m * n];
            let out = Out { y: &mut got, ldy: n };
            if which == 0 {
                drive(kern, m, n, k, va, &vb, out, &epi).unwrap();
            } else {
                drive(kern, m, n, k, pa, &vb, out, &epi).unwrap();
            }
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{which} [{i}]: {g} vs {w}");
            }
        }
    }

    /// Products of a short `k` over many columns (B packed, or read in
    /// place when there are few rows, in blocks of strips) on `kern`,
    /// strided and panel A, against plain sums through [`Epilogue::one`].
    fn check_blocks<K: Micro>(kern: K) {
        let shapes = [
            (1usize, 600usize, 1usize),
            (8, 517, 16),
            (13, 700, 3),
            (40, 1030, 17),
            (70, 333, 24),
            (96, 1100, 16),
            (33, 250, 40),
            (9, 129, 64),
            (100, 97, 130),
            (27, 49, 32),
            (160, 49, 600),
            (20, 196, 300),
            (13, 33, 5),
            (9, 18, 70),
            (17, 81, 7),
            (8, 20, 1),
            (19, 49, 131),
            (40, 50, 259),
            (70, 84, 150),
            // Column tails of a whole tile (4, 3, and 4 past 32); every
            // column in a few strips packed at once, with an A large enough
            // to be prefetched (2 and 4 strips).
            (33, 4, 70),
            (9, 3, 200),
            (70, 36, 100),
            (90, 125, 90),
            (130, 49, 1030),
            (75, 100, 1000),
            // Every column in one wide tile (33 to 49 of them): B read in
            // place, over several blocks of `k`, whole and partial panels.
            (24, 41, 300),
            (16, 48, 520),
            (64, 49, 2000),
            (11, 33, 9),
            // Several wide tiles across (98 and 196 columns), B packed, with
            // more rows than one block of A.
            (100, 98, 300),
            (530, 196, 40),
            // Tiles of rows swept across chunks of B read in place: more
            // than one chunk and a partial tile after the swept ones, rows
            // that end in a partial tile, and a single chunk.
            (24, 2 * SWEEP_COLS + 3 * 48 + 17, 16),
            (9, SWEEP_COLS + 100, 5),
            (40, 100, 300),
            (17, 3 * 48, 27),
        ];
        for (t, &(m, n, k)) in shapes.iter().enumerate() {
            let ldy = n + 5;
            let mut a = std::vec![0.0f32; m * k];
            fill(&mut a, (m * 3 + k) as u32);
            let mut b = std::vec![0.0f32; k * n];
            fill(&mut b, (n + k * 5) as u32);
            let mut bias = [0.0f32; 300];
            fill(&mut bias, 8);
            let mut c = std::vec![0.0f32; 2 * m * ldy + 16];
            fill(&mut c, 9);
            let mut packed = std::vec![f32::NAN; panels_len(m, k).unwrap()];
            crate::conv::pack_conv_weights(m, k, &a, &mut packed).unwrap();
            let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
            let pa = PanelA { data: &packed, k };
            let vb = DenseB { data: &b, rs: n, cs: 1 };
            for which in [0, 1, 3, 6, 7, 8, t] {
                let epi = epilogue(which, &bias, &c, ldy);
                let mut want = std::vec![9.0f32; m * ldy];
                for i in 0..m {
                    for j in 0..n {
                        let mut acc = 0.0f32;
                        for p in 0..k {
                            acc += a[i * k + p] * b[p * n + j];
                        }
                        want[i * ldy + j] = epi.one(i, j, acc);
                    }
                }
                for panel in [false, true] {
                    let mut got = std::vec![9.0f32; m * ldy];
                    let out = Out { y: &mut got, ldy };
                    if panel {
                        drive(kern, m, n, k, pa, &vb, out, &epi).unwrap();
                    } else {
                        drive(kern, m, n, k, va, &vb, out, &epi).unwrap();
                    }
                    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                        let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
                        assert!(
                            (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
                            "{m}x{n}x{k} epi {which} panel {panel} [{i}]: {g} vs {w}"
                        );
                    }
                }
            }
        }
    }

    /// Runs `$check` on the portable kernels and on every SIMD kernel this
    /// CPU has.
    macro_rules! on_every_kernel {
        ($check:ident) => {
            $check(Portable::<8>);
            $check(Portable::<4>);
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            if let Some(kern) = avx2() {
                $check(kern);
            }
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            if let Some(kern) = avx512() {
                $check(kern);
            }
            #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
            if let Some(kern) = neon() {
                $check(kern);
            }
        };
    }

    #[test]
    fn blocks_of_strips_match_plain_sums_on_every_kernel() {
        on_every_kernel!(check_blocks);
    }

    #[test]
    fn panel_operands_match_strided_ones_on_every_kernel() {
        on_every_kernel!(check_panels);
    }

    #[test]
    fn vector_products_match_plain_sums() {
        let (mut a, mut b) = ([0.0f32; 64], [0.0f32; 40 * 41]);
        fill(&mut a, 11);
        fill(&mut b, 12);
        let bias = [0.0f32; 1];
        for n in [1, 2, 7, 8, 9, 15, 16, 17, 25, 40] {
            for k in [1, 2, 15, 16, 17, 31, 33, 40] {
                let va = ViewA { data: &a, off: 3, rs: 0, cs: 1 };
                // B as columns (rows of a transposed B, `k + 1` apart) and as rows.
                for (rs, cs) in [(1, k + 1), (n, 1)] {
                    let vb = DenseB { data: &b, rs, cs };
                    let mut y = [0.0f32; 40];
                    let epi = Epilogue {
                        alpha: -2.0,
                        ..Epilogue::bias_act(Some(&bias), Activation::Relu)
                    };
                    vector_product(n, k, va, &vb, &mut y, &epi).unwrap();
                    for j in 0..n {
                        let s: f32 = (0..k).map(|p| a[3 + p] * b[p * rs + j * cs]).sum();
                        let want = epi.one(0, j, s);
                        assert!(
                            (y[j] - want).abs() <= 1e-5 * k as f32,
                            "{n}x{k} ({rs}, {cs}) at {j}"
                        );
                    }
                }
            }
        }
    }

    /// The 1-row product over B in strips: on AVX-512 each output is the
    /// chain of fused multiply-adds in ascending `p` from zero, bit for bit,
    /// for every grouping of strips (four, two, one) and partial last strip;
    /// elsewhere within rounding of the plain sums. The epilogue follows.
    #[test]
    fn strips_row_products_are_ascending_chains() {
        let mut a = [0.0f32; 70];
        fill(&mut a, 5);
        a[3] = -0.0;
        let mut b = std::vec![0.0f32; 70 * 8 * STRIP];
        fill(&mut b, 6);
        let bias: std::vec::Vec<f32> = (0..8 * STRIP).map(|j| j as f32 * 0.125 - 9.0).collect();
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        let fast = avx512();
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        let fast: Option<()> = None;
        for k in [1, 2, 7, 70] {
            for n in [1usize, 15, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 160, 200, 256] {
                let strips = StripsB { data: &b[..n.div_ceil(STRIP) * STRIP * k], k };
                let at = |p: usize, j: usize| b[(j / STRIP) * STRIP * k + p * STRIP + j % STRIP];
                let mut y = std::vec![f32::NAN; n + 3];
                let epi = Epilogue::bias_act(Some(&bias[..n]), Activation::Relu);
                strips_vector_product(n, &a[..k], &strips, &mut y, &epi).unwrap();
                for (j, &got) in y[..n].iter().enumerate() {
                    let chain = (0..k).fold(0.0f32, |s, p| a[p].mul_add(at(p, j), s));
                    let plain: f32 = (0..k).map(|p| a[p] * at(p, j)).sum();
                    let want = epi.one(0, j, chain);
                    match fast {
                        Some(_) => assert_eq!(got.to_bits(), want.to_bits(), "{k}x{n} at {j}"),
                        None => assert!(
                            (got - epi.one(0, j, plain)).abs() <= 1e-5 * k as f32,
                            "{k}x{n} at {j}"
                        ),
                    }
                }
                assert!(y[n..].iter().all(|v| v.is_nan()), "{k}x{n}: wrote past n");
            }
        }
        // The groups of strips read at once stay within the strips the
        // columns need (the routine reads them through raw pointers: a
        // group past them would read past the weights).
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        for n in 1..=12 * STRIP {
            let (mut s, need) = (0, n.div_ceil(STRIP));
            while s * STRIP < n {
                let g = avx512::strips_at_once(n - s * STRIP);
                assert!(s + g <= need, "{n} columns: strips {s}..{} of {need}", s + g);
                s += g;
            }
        }
        // Strips shorter than the columns need: an error, nothing written.
        let strips = StripsB { data: &b[..STRIP * 4], k: 4 };
        let mut y = [7.0f32; 33];
        let r = strips_vector_product(33, &a[..4], &strips, &mut y, &Epilogue::NONE);
        assert_eq!(r, Err(crate::Error::ShapeMismatch));
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(f) = fast {
            out_of_bounds(|| f.strips_row(&a[..4], &b[..STRIP * 4], &mut y));
            assert_eq!(y, [7.0; 33]);
        }
    }

    /// Special values through every activation: NaN stays NaN, the sign of
    /// zero and infinities come out as the scalar comparisons give them.
    fn check_special<K: Micro>(kern: K) {
        let row = [f32::NAN, -0.0, 0.0, 1.0, -3.0, f32::INFINITY, f32::NEG_INFINITY, 0.5, -0.25];
        let vals: std::vec::Vec<f32> = row.iter().cycle().take(27).copied().collect();
        // Large enough that the smooth activations run tile by tile (more
        // than `SMOOTH_WHOLE` outputs): across swept chunks and the tiles
        // after them, and on 49-wide tiles (a 14x14 output's 196 columns).
        for n in [37 * 16, 196] {
            special_products(kern, &vals, n);
        }
    }

    fn special_products<K: Micro>(kern: K, vals: &[f32], n: usize) {
        let m = vals.len();
        let mut b = std::vec![0.0f32; n];
        fill(&mut b, 9);
        for (j, v) in b.iter_mut().enumerate().step_by(37) {
            *v = [1.0, -1.0, 3.0, -6.0][j % 4];
        }
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.5 },
            Activation::Clip { min: -0.5, max: 0.75 },
        ];
        let smooths = [
            None,
            Some(Smooth::Silu),
            Some(Smooth::Gelu),
            Some(Smooth::HardSwish),
            Some(Smooth::GeluTanh),
        ];
        let c = std::vec![0.0f32; n];
        for (t, act) in acts.into_iter().enumerate() {
            for (u, smooth) in smooths.into_iter().enumerate() {
                let with_c = (t + u) % 2 == 1;
                let epi = Epilogue {
                    alpha: 1.0,
                    row_bias: None,
                    c: with_c.then_some(CTerm { data: &c, rs: 0, cs: 1, beta: 1.0 }),
                    act,
                    smooth,
                    ..Epilogue::NONE
                };
                let va = ViewA { data: vals, off: 0, rs: 1, cs: 1 };
                let vb = DenseB { data: &b, rs: n, cs: 1 };
                let (mut want, mut got) = (std::vec![0.0f32; m * n], std::vec![0.0f32; m * n]);
                drive(Portable::<8>, m, n, 1, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
                drive(kern, m, n, 1, va, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                        "{n} {act:?} {smooth:?} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[test]
    fn fast_kernels_keep_special_values_through_activations() {
        if let Some(kern) = avx2() {
            check_special(kern);
        }
        if let Some(kern) = avx512() {
            check_special(kern);
        }
    }

    #[test]
    fn dense_strips_match_the_matrix() {
        // B of 7 rows of 70 (rows 75 apart): full strips of 32, 16 and 8, the
        // last partial one, and rows past the data reading as zero.
        let data: Vec<f32> = (0..7 * 75).map(|i| i as f32 - 200.0).collect();
        let b = DenseB { data: &data[..6 * 75 + 70], rs: 75, cs: 1 };
        for (nr, stride) in [(32, 32), (16, 16), (8, 8), (5, 8), (17, 32), (32, 32)] {
            for p0 in [0, 2] {
                let kc = 7 - p0;
                let mut out = vec![f32::NAN; kc * stride];
                for j0 in [0, 1, 38] {
                    let cols = nr.min(70 - j0);
                    b.pack(p0, kc, j0, cols, stride, &mut out);
                    for p in 0..kc {
                        for c in 0..stride {
                            let e = if c < cols { data[(p0 + p) * 75 + j0 + c] } else { 0.0 };
                            assert_eq!(out[p * stride + c], e, "nr {nr} p {} j {}", p0 + p, j0 + c);
                        }
                    }
                }
            }
        }
        // A strip that would run past the data is zero rather than a panic.
        let mut out = [f32::NAN; 32];
        b.pack(6, 1, 60, 32, 32, &mut out);
        assert!(out.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn winograd_bounds_hold_exactly_the_indices_touched() {
        // Two channels of 4x6 planes: rows 1..4 of the plane, 6 floats each.
        let src =
            TileRows { plane: 24, rows: [Some(6), Some(12), Some(18), None], w: 6, first: -1 };
        // V_15 of channel 1's tile 2 (at 3) is the last index: 15 * 10 + 40 + 3 + 2.
        let need = 15 * 10 + 40 + 3 + 3;
        assert!(src.input_fits(48, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 3, need - 1, 3, [10, 40]));
        assert!(!src.input_fits(47, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 0, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 0, 3, need, 3, [10, 40]));
        let past = TileRows { rows: [Some(19), None, None, None], ..src };
        assert!(!past.input_fits(48, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 3, usize::MAX, usize::MAX, [10, 40]));

        let (mut r0, mut r1) = ([0.0f32; 5], [0.0f32; 4]);
        let m_need = 15 * 8 + 2 + 3;
        assert!(TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need - 1, 2, 8, 3, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), Some(&mut r1)], 5));
        assert!(TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), Some(&mut r1)], 4));
        assert!(!TileRows::output_fits(m_need, 2, 8, 2, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need, 2, 8, 0, &[None, None], 0));
        assert!(!TileRows::output_fits(usize::MAX, 2, usize::MAX, 3, &[None, None], 4));
    }

    #[test]
    fn evens_are_every_other_float() {
        let s: [f32; 32] = core::array::from_fn(|i| (i as f32 - 10.5) * 0.25);
        let mut d = [f32::NAN; 16];
        Evens::detect().copy(&mut d, &s);
        assert_eq!(d, core::array::from_fn(|i| s[2 * i]));
        let mut d = [f32::NAN; 16];
        Evens {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            cpu: None,
        }
        .copy(&mut d, &s);
        assert_eq!(d, core::array::from_fn(|i| s[2 * i]));
    }

    #[test]
    fn k_zero_is_the_epilogue_of_zero() {
        let bias = [1.0f32, -2.0];
        let mut y = [5.0f32; 6];
        let epi = Epilogue::bias_act(Some(&bias), Activation::Relu);
        let va = ViewA { data: &[], off: 0, rs: 0, cs: 1 };
        product(2, 3, 0, va, &DenseB { data: &[], rs: 3, cs: 1 }, Out { y: &mut y, ldy: 3 }, &epi)
            .unwrap();
        assert_eq!(y, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
    }
}
