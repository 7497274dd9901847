//! What a fused kernel does to its outputs after the sums: the activation,
//! the smooth functions, the bias/scale/residual epilogue and the tails the
//! micro-kernels finish their tiles with.

use crate::simd::Vectorize;
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    all(target_arch = "aarch64", target_feature = "neon")
))]
use crate::simd::gemm::micro::MAX_MR;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::math::VFunc;
use crate::simd::vectorize_wide;
use crate::simd::vectorized;

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
/// AVX-512 applies it to each tile's rows while they are in L1, AVX2 to
/// the sums in registers (with the same eight-lane routine).
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
    pub(in crate::simd) fn vector(self) -> Option<VFunc> {
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
            && crate::simd::math::vexp::apply(f, None, y)
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
pub(in crate::simd) fn hard_swish(x: f32) -> f32 {
    crate::elementwise::eval(crate::elementwise::Unary::HardSwish, x)
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
pub(in crate::simd) fn finish(
    dst: &mut [f32],
    ldd: usize,
    nrows: usize,
    ncols: usize,
    tail: Option<Tail<'_>>,
) {
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
pub(in crate::simd) fn finish_column(
    dst: &mut [f32],
    ldd: usize,
    nrows: usize,
    tail: Option<Tail<'_>>,
) {
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
pub(in crate::simd) fn smooth_block(
    s: Smooth,
    dst: &mut [f32],
    ldd: usize,
    nrows: usize,
    ncols: usize,
) {
    // HardSwish on a tile runs the plain loops compiled for the widest
    // unit: the explicit routine's call costs more than it saves on a tile
    // (a 48->288 1x1 convolution at 14x14: 0.065 ms against 0.085, 16->72
    // at 56x56 0.099 against 0.106), while on a whole tensor it is the
    // faster one.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(f) = s.vector().filter(|_| s != Smooth::HardSwish)
        && crate::simd::math::vexp::apply_rows(f, dst, ldd, nrows, ncols)
    {
        return;
    }
    vectorize_wide(SmoothRows { s, dst, ldd, nrows, ncols });
}

/// A smooth activation over an `nrows x ncols` block (rows `ldd` apart),
/// as a [`Vectorize`] body: compiled for the widest vector unit, as the
/// standalone op's loop is (the arithmetic is the same at every width).
pub(in crate::simd) struct SmoothRows<'a> {
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
pub(in crate::simd) fn block_fits(dst: &[f32], ldd: usize, nrows: usize, ncols: usize) -> bool {
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
    pub(in crate::simd) fn is_identity(&self) -> bool {
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
        // The activation goes with the last step before it: a loop that only
        // replaces some values by constants (Relu's `x < 0 -> 0`) would be
        // vectorised into masked stores, microcoded on AMD cores.
        let fuse = self.c.is_none() && self.res.is_none();
        if let Some(b) = self.row_bias {
            let b = b.get(i).copied().unwrap_or(0.0);
            if fuse {
                let act = self.act;
                for v in row.iter_mut() {
                    *v = act.apply(*v + b);
                }
                return;
            }
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
                    let act = self.act;
                    for (v, x) in row.iter_mut().zip(src) {
                        *v = act.apply(*v + *x);
                    }
                    return;
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
    pub(in crate::simd) fn vector_row(&self, y: &mut [f32]) {
        vectorized(|| self.row(0, 0, y));
        if let Some(s) = self.smooth {
            let ncols = y.len();
            smooth_block(s, y, ncols, 1, ncols);
        }
    }
}
