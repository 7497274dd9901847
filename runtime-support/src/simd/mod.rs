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
//! On x86-64 the AVX2+FMA kernel is chosen at run time when the `std` feature
//! is on (`is_x86_feature_detected!`), and at compile time from
//! `target_feature` otherwise; every other target uses the portable kernel.

#[cfg(target_arch = "x86_64")]
#[allow(unsafe_code)]
mod avx2;

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

/// The largest tile any micro-kernel uses (`MR * NR`).
const MAX_TILE: usize = 96;

/// A register-tiled micro-kernel: `tile[r * NR + c] (+)= sum_p a(r, p) * b[p * NR + c]`.
pub(crate) trait Micro: Copy {
    /// Rows of the tile.
    const MR: usize;
    /// Columns of the tile (the width of a packed B strip).
    const NR: usize;
    /// Rows of A swept per packed B strip (kept in L2 between strips).
    const MC: usize;
    /// Runs one tile over `kc` steps. Row `r` of A is read at
    /// `a[rows[r] + p * cs]`; `b` is a packed strip of at least `kc * NR`;
    /// `tile` has at least `MR * NR` entries and holds the starting sums when
    /// `load` (zero otherwise). Implementations check these bounds.
    #[allow(clippy::too_many_arguments)]
    fn kernel(
        self,
        kc: usize,
        a: &[f32],
        rows: &[usize],
        cs: usize,
        b: &[f32],
        tile: &mut [f32],
        load: bool,
    );
}

/// The portable micro-kernel: `4 x NR` sums, multiply then add (exactly the
/// exact kernels' arithmetic).
#[derive(Clone, Copy)]
pub(crate) struct Portable<const NR: usize>;

impl<const NR: usize> Micro for Portable<NR> {
    const MR: usize = 4;
    const NR: usize = NR;
    const MC: usize = 64;

    #[inline]
    fn kernel(
        self,
        kc: usize,
        a: &[f32],
        rows: &[usize],
        cs: usize,
        b: &[f32],
        tile: &mut [f32],
        load: bool,
    ) {
        let mut acc = [[0.0f32; NR]; 4];
        if load {
            for (r, row) in acc.iter_mut().enumerate() {
                for (c, v) in row.iter_mut().enumerate() {
                    *v = tile.get(r * NR + c).copied().unwrap_or(0.0);
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
        for (r, row) in acc.iter().enumerate() {
            for (c, v) in row.iter().enumerate() {
                if let Some(t) = tile.get_mut(r * NR + c) {
                    *t = *v;
                }
            }
        }
    }
}

/// The portable strip width: 8 columns where there are vector registers
/// to spare, 4 on small FPUs (Cortex-M4F has 32 single registers).
#[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64"))]
pub(crate) type PortableKernel = Portable<8>;
#[cfg(not(any(target_arch = "x86_64", target_arch = "x86", target_arch = "aarch64")))]
pub(crate) type PortableKernel = Portable<4>;

/// The B operand of a product, packed strip by strip.
pub(crate) trait PackB {
    /// Writes `B(p0 + p, j0 + c)` to `out[p * stride + c]` for `p < kc`,
    /// `c < nr`, and zero for `nr <= c < stride`. `out` has `kc * stride`
    /// entries; the caller keeps `p0 + kc` and `j0 + nr` within B.
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]);
}

/// A dense B: element `(p, j)` at `data[p * rs + j * cs]`.
pub(crate) struct DenseB<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

impl PackB for DenseB<'_> {
    #[inline]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.rs + j0 * self.cs;
            let (head, tail) = row.split_at_mut(nr);
            if self.cs == 1 {
                match self.data.get(base..base + nr) {
                    Some(src) => head.copy_from_slice(src),
                    None => head.fill(0.0),
                }
            } else {
                for (c, v) in head.iter_mut().enumerate() {
                    *v = self.data.get(base + c * self.cs).copied().unwrap_or(0.0);
                }
            }
            tail.fill(0.0);
        }
    }
}

/// The A operand: element `(i, p)` at `data[off + i * rs + p * cs]`.
#[derive(Clone, Copy)]
pub(crate) struct ViewA<'a> {
    pub data: &'a [f32],
    pub off: usize,
    pub rs: usize,
    pub cs: usize,
}

/// Where the `m x n` result goes: row `i` of it starts at `y[i * ldy]`.
pub(crate) struct Out<'a> {
    pub y: &'a mut [f32],
    pub ldy: usize,
}

/// `Y = epi(i, j, A B)` with the micro-kernel `kern`, B packed in strips of
/// up to `BUF / NR` steps of `k`. Returns `ShapeMismatch` if A or Y is too
/// short for the sizes.
#[allow(clippy::too_many_arguments)]
fn drive_buf<K: Micro, B: PackB, const BUF: usize>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &B,
    out: Out<'_>,
    epi: &impl Fn(usize, usize, f32) -> f32,
) {
    let (mr, nr) = (K::MR, K::NR);
    let kc_max = BUF / nr;
    let mut strip = [0.0f32; BUF];
    let mut tile = [0.0f32; MAX_TILE];
    let mut rows = [0usize; MAX_TILE];
    let y = out.y;
    let mut pc = 0;
    while pc < k {
        let kc = kc_max.min(k - pc);
        let (first, last) = (pc == 0, pc + kc == k);
        let mut ic = 0;
        while ic < m {
            let mc = K::MC.min(m - ic);
            let mut jc = 0;
            while jc < n {
                let ncols = nr.min(n - jc);
                let buf = &mut strip[..kc * nr];
                b.pack(pc, kc, jc, ncols, nr, buf);
                let mut ir = ic;
                while ir < ic + mc {
                    let nrows = mr.min(ic + mc - ir);
                    for (r, row) in rows[..mr].iter_mut().enumerate() {
                        // Rows past the end repeat the last one; their sums are dropped.
                        *row = a.off + (ir + r.min(nrows - 1)) * a.rs + pc * a.cs;
                    }
                    if !first {
                        for r in 0..nrows {
                            let at = (ir + r) * out.ldy + jc;
                            tile[r * nr..r * nr + ncols].copy_from_slice(&y[at..at + ncols]);
                        }
                    }
                    kern.kernel(kc, a.data, &rows[..mr], a.cs, buf, &mut tile, !first);
                    for r in 0..nrows {
                        let at = (ir + r) * out.ldy + jc;
                        let dst = &mut y[at..at + ncols];
                        let src = &tile[r * nr..r * nr + ncols];
                        if last {
                            for (c, (d, s)) in dst.iter_mut().zip(src).enumerate() {
                                *d = epi(ir + r, jc + c, *s);
                            }
                        } else {
                            dst.copy_from_slice(src);
                        }
                    }
                    ir += mr;
                }
                jc += nr;
            }
            ic += mc;
        }
        pc += kc;
    }
}

/// Checks the operands, then runs [`drive_buf`] with a strip buffer sized for `k`.
#[allow(clippy::too_many_arguments)]
fn drive<K: Micro, B: PackB>(
    kern: K,
    m: usize,
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &B,
    out: Out<'_>,
    epi: &impl Fn(usize, usize, f32) -> f32,
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
                out.y[i * out.ldy + j] = epi(i, j, 0.0);
            }
        }
        return Ok(());
    }
    let a_last = (m - 1)
        .checked_mul(a.rs)
        .and_then(|v| v.checked_add((k - 1).checked_mul(a.cs)?))
        .and_then(|v| v.checked_add(a.off));
    ensure(a_last.is_some_and(|v| v < a.data.len()), Error::ShapeMismatch)?;
    ensure(K::MR * K::NR <= MAX_TILE, Error::InvalidParams)?;
    // Strips of 16, 64 or 256 steps: small products do not pay for
    // initialising a large buffer.
    if k <= 16 {
        drive_buf::<K, B, { 16 * 16 }>(kern, m, n, k, a, b, out, epi);
    } else if k <= 64 {
        drive_buf::<K, B, { 64 * 16 }>(kern, m, n, k, a, b, out, epi);
    } else {
        drive_buf::<K, B, { 256 * 16 }>(kern, m, n, k, a, b, out, epi);
    }
    Ok(())
}

/// `Y[i, j] = epi(i, j, sum_p A(i, p) B(p, j))` on the best kernel for this CPU.
/// The B packer must cover `k x n`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn product<B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &B,
    out: Out<'_>,
    epi: &impl Fn(usize, usize, f32) -> f32,
) -> crate::Result {
    #[cfg(target_arch = "x86_64")]
    if let Some(kern) = avx2::Avx2::detect() {
        return drive(kern, m, n, k, a, b, out, epi);
    }
    drive(PortableKernel {}, m, n, k, a, b, out, epi)
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
    epi: &impl Fn(usize, usize, f32) -> f32,
) -> crate::Result {
    use crate::{Error, ensure};
    let Some(y) = y.get_mut(..n) else { return Err(Error::ShapeMismatch) };
    y.fill(0.0);
    if k == 0 || n == 0 {
        for (j, v) in y.iter_mut().enumerate() {
            *v = epi(0, j, *v);
        }
        return Ok(());
    }
    // A's row, contiguous: `ViewA` with `cs == 1`.
    ensure(a.cs == 1, Error::InvalidParams)?;
    let av = a.data.get(a.off..a.off + k).ok_or(Error::ShapeMismatch)?;
    let b_last = (k - 1).checked_mul(b.rs).and_then(|v| v.checked_add((n - 1).checked_mul(b.cs)?));
    ensure(b_last.is_some_and(|v| v < b.data.len()), Error::ShapeMismatch)?;
    if b.cs == 1 {
        #[cfg(target_arch = "x86_64")]
        let fast = avx2::Avx2::detect();
        #[cfg(target_arch = "x86_64")]
        if let Some(f) = fast {
            f.axpy_rows(av, b.data, b.rs, y);
        }
        #[cfg(not(target_arch = "x86_64"))]
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
        #[cfg(target_arch = "x86_64")]
        let fast = avx2::Avx2::detect();
        #[cfg(target_arch = "x86_64")]
        if let Some(f) = fast {
            f.dots(av, b.data, b.cs, y);
        }
        #[cfg(not(target_arch = "x86_64"))]
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
    for (j, v) in y.iter_mut().enumerate() {
        *v = epi(0, j, *v);
    }
    Ok(())
}

/// Runs `f`, compiled for the widest vector unit detected (AVX2 on x86-64)
/// when `f`'s loops are inlined into it; the arithmetic does not change.
#[inline]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
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
    #[cfg(target_arch = "x86_64")]
    if let Some(v) = avx2::Avx2::detect() {
        return v.vectorize(k);
    }
    k.run()
}

/// Whether the fused-multiply-add kernels run on this CPU (results then
/// differ from the exact kernels by rounding).
pub fn uses_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    if avx2::Avx2::detect().is_some() {
        return true;
    }
    false
}

/// Runs `f` with the portable kernel forced, for tests comparing paths.
#[cfg(test)]
pub(crate) fn product_portable<B: PackB>(
    m: usize,
    n: usize,
    k: usize,
    a: ViewA<'_>,
    b: &B,
    out: Out<'_>,
    epi: &impl Fn(usize, usize, f32) -> f32,
) -> crate::Result {
    drive(PortableKernel {}, m, n, k, a, b, out, epi)
}
