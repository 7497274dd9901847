//! Gemm and batched MatMul.
//!
//! Every dot product sums over `k` in ascending order, so results are
//! reproducible bit for bit; a later packed/SIMD path must keep that order or
//! be opted into explicitly.

use crate::num::Num;
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, numel, walk};
use crate::simd::{self, CTerm, DenseB, Epilogue, Out, Residual, STRIP, StripsB, ViewA};
pub use crate::simd::{Activation, Smooth};

/// What a fused f32 product does after its own terms (Gemm's `alpha`, `C`;
/// MatMul's folded bias): add `residual` (a following `Add` of a tensor of
/// the output's shape and layout), then apply `act`, then `smooth`, each on a
/// tile while it is in L1. The same operations in the same order as the
/// unfused nodes, so results do not change.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Post<'a> {
    /// Added to every output, element by element; as long as the output.
    pub residual: Option<&'a [f32]>,
    /// Applied after the residual.
    pub act: Activation,
    /// Applied last.
    pub smooth: Option<Smooth>,
}

impl Post<'_> {
    /// Nothing after the product's own terms.
    pub const NONE: Post<'static> = Post { residual: None, act: Activation::None, smooth: None };

    /// Only an activation.
    pub const fn act(act: Activation) -> Post<'static> {
        Post { residual: None, act, smooth: None }
    }
}
use crate::{Error, Result, ensure};

/// `Y = alpha * A' * B' + beta * C` with `A'` = `A` or `Aᵀ`, `B'` = `B` or `Bᵀ`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gemm<T> {
    /// Rows of `A'` and `Y`.
    pub m: usize,
    /// Columns of `B'` and `Y`.
    pub n: usize,
    /// Columns of `A'`, rows of `B'`.
    pub k: usize,
    /// `A` is stored `[k, m]` and used transposed.
    pub trans_a: bool,
    /// `B` is stored `[n, k]` and used transposed.
    pub trans_b: bool,
    /// Scale of the product.
    pub alpha: T,
    /// Scale of `C`.
    pub beta: T,
    /// Row and column stride of `C` over `[m, n]`: `[n, 1]` for a full matrix,
    /// `[0, 1]` for a row of `n`, `[1, 0]` for a column of `m`, `[0, 0]` for a scalar.
    pub c_strides: [isize; 2],
}

/// One 2-D product `y[m, n] = sum_p a[i, p] * b[p, j]` with `a`, `b` read
/// through (row, column) strides.
///
/// The sum runs in [`Num::Acc`] and is rounded to `T` once: for `f16` and
/// `bf16` that is numpy's rule (products and sums in `f32`); for every other
/// type `Acc` is `T` itself and the loop is the plain one.
#[allow(clippy::too_many_arguments)]
#[inline]
fn mm<T: Num>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_s: [usize; 2],
    b: &[T],
    b_s: [usize; 2],
    mut out: impl FnMut(usize, usize, T),
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = T::Acc::ZERO;
            for p in 0..k {
                let x = a[i * a_s[0] + p * a_s[1]].to_acc();
                acc = acc.add(x.mul(b[p * b_s[0] + j * b_s[1]].to_acc()));
            }
            out(i, j, T::from_acc(acc));
        }
    }
}

/// ONNX `Gemm`. `a` holds `m * k` elements, `b` holds `k * n`, `y` holds `m * n`;
/// `c`, if given, is read through `p.c_strides`.
pub fn gemm<T: Num>(p: &Gemm<T>, a: &[T], b: &[T], c: Option<&[T]>, y: &mut [T]) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let mk = m.checked_mul(k).ok_or(Error::Overflow)?;
    let kn = k.checked_mul(n).ok_or(Error::Overflow)?;
    let mn = m.checked_mul(n).ok_or(Error::Overflow)?;
    ensure(a.len() == mk && b.len() == kn && y.len() == mn, Error::ShapeMismatch)?;
    if let Some(c) = c {
        check_strided(&[m, n], &p.c_strides, 0, c.len())?;
    }
    let a_s = if p.trans_a { [1, m] } else { [k, 1] };
    let b_s = if p.trans_b { [1, k] } else { [n, 1] };
    mm(m, n, k, a, a_s, b, b_s, |i, j, acc| {
        let mut v = p.alpha.mul(acc);
        if let Some(c) = c {
            let off = i as isize * p.c_strides[0] + j as isize * p.c_strides[1];
            v = v.add(p.beta.mul(c[off as usize]));
        }
        y[i * n + j] = v;
    });
    Ok(())
}

/// Where an f32 product reads its B.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Weights<'a> {
    /// As the model gives it: `[k, n]`, or `[n, k]` for a Gemm with `trans_b`
    /// (a MatMul's B may be batched).
    Dense(&'a [f32]),
    /// Laid out in 32-column strips by [`pack_b_strips`] when the code was
    /// generated (which took care of `trans_b`), shared by every matrix of
    /// a batch.
    Strips(&'a [f32]),
}

/// ONNX `Gemm` on f32 for generated code, then `post` (a residual, then
/// activations) on each tile while it is in L1: the blocked, packed SIMD
/// product (see [`crate::simd`]), with the same checks and the same
/// summation order as [`gemm`], but fused multiply-adds where the CPU has
/// them.
///
/// `#[inline(always)]` so the match folds at each call site, as for
/// [`crate::conv::sconv`] (which says what it saves).
#[inline(always)]
pub fn sgemm(
    p: &Gemm<f32>,
    a: &[f32],
    b: Weights<'_>,
    c: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    match b {
        Weights::Dense(b) => sgemm_fused(p, a, b, c, y, post),
        Weights::Strips(b) => sgemm_packed_fused(p, a, b, c, y, post),
    }
}

/// ONNX `MatMul` on f32 for generated code (see [`sgemm`]), plus `bias[j]`
/// on every output of column `j` (a following `Add` of a row vector, folded
/// at generation time), then `post`. A residual needs `p.y_layout` to be
/// `None`.
///
/// `#[inline(always)]` so the match folds at each call site, as for
/// [`crate::conv::sconv`] (which says what it saves).
#[inline(always)]
pub fn smatmul(
    p: &MatMul<'_>,
    a: &[f32],
    b: Weights<'_>,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    match b {
        Weights::Dense(b) => smatmul_fused(p, a, b, bias, y, post),
        Weights::Strips(b) => smatmul_packed_fused(p, a, b, bias, y, post),
    }
}

/// [`sgemm`] with B as the model gives it.
fn sgemm_fused(
    p: &Gemm<f32>,
    a: &[f32],
    b: &[f32],
    c: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let mk = m.checked_mul(k).ok_or(Error::Overflow)?;
    let kn = k.checked_mul(n).ok_or(Error::Overflow)?;
    let mn = m.checked_mul(n).ok_or(Error::Overflow)?;
    ensure(a.len() == mk && b.len() == kn && y.len() == mn, Error::ShapeMismatch)?;
    let (va, epi) = a_and_epilogue(p, a, c, post)?;
    let vb =
        if p.trans_b { DenseB { data: b, rs: 1, cs: k } } else { DenseB { data: b, rs: n, cs: 1 } };
    if m == 1 && !p.trans_a {
        return simd::vector_product(n, k, va, &vb, y, &epi);
    }
    simd::product(m, n, k, va, &vb, Out { y, ldy: n }, &epi)
}

/// The epilogue of a MatMul with a folded `bias` and `post`, checked against
/// the product's sizes: a residual needs the plain stacked output layout
/// (it is read at the outputs' own offsets) and the output's length.
fn matmul_epilogue<'a>(
    p: &MatMul<'_>,
    bias: Option<&'a [f32]>,
    y_len: usize,
    post: &Post<'a>,
) -> Result<Epilogue<'a>> {
    if let Some(c) = bias {
        ensure(c.len() == p.n, Error::ShapeMismatch)?;
    }
    if let Some(r) = post.residual {
        ensure(p.y_layout.is_none(), Error::InvalidParams)?;
        ensure(r.len() == y_len, Error::ShapeMismatch)?;
    }
    // The bias as a C term of one row repeated over all rows: `acc + 1 * bias[j]`.
    Ok(Epilogue {
        c: bias.map(|data| CTerm { data, rs: 0, cs: 1, beta: 1.0 }),
        res: post.residual.map(|data| Residual { data, rs: p.n }),
        act: post.act,
        smooth: post.smooth,
        ..Epilogue::NONE
    })
}

/// `epi` with its residual starting at output offset `at` (one matrix of a
/// batch), rows `rs` apart.
fn shifted<'a>(epi: &Epilogue<'a>, at: usize, rs: usize) -> Epilogue<'a> {
    Epilogue {
        res: epi.res.map(|r| Residual { data: r.data.get(at..).unwrap_or(&[]), rs }),
        ..*epi
    }
}

/// The outputs of a product whose sums are all zero (`k == 0`): the
/// epilogue of 0 on every output of every matrix of the batch.
fn empty_product(p: &MatMul<'_>, at: &Placed, epi: &Epilogue<'_>, y: &mut [f32]) -> Result {
    empty_sums(p, at, y)?;
    let (m, n) = (p.m, p.n);
    walk(p.batch, [&at.ys[..p.batch.len()]], [0], |[iy]| {
        let e = shifted(epi, iy, at.y_row);
        for i in 0..m {
            let row = iy + i * at.y_row;
            for (j, v) in y[row..row + n].iter_mut().enumerate() {
                *v = e.one(i, j, *v);
            }
        }
    });
    Ok(())
}

/// [`smatmul`] with B as the model gives it.
fn smatmul_fused(
    p: &MatMul<'_>,
    a: &[f32],
    b: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let epi = matmul_epilogue(p, bias, y.len(), post)?;
    let at = place(p, a.len(), b.len(), y.len())?;
    if m == 0 || n == 0 || numel(p.batch)? == 0 {
        return Ok(());
    }
    let ys = &at.ys[..p.batch.len()];
    if k == 0 {
        return empty_product(p, &at, &epi, y);
    }
    let [a_rs, a_cs] = p.a_strides;
    let [b_rs, b_cs] = p.b_strides;
    let mut result = Ok(());
    walk(p.batch, [p.a_batch_strides, p.b_batch_strides, ys], [0; 3], |[ia, ib, iy]| {
        let va = ViewA { data: &a[ia..ia + at.ext_a], off: 0, rs: a_rs, cs: a_cs };
        let vb = DenseB { data: &b[ib..ib + at.ext_b], rs: b_rs, cs: b_cs };
        let y = &mut y[iy..iy + at.ext_y];
        let epi = shifted(&epi, iy, at.y_row);
        let r = if m == 1 && a_cs == 1 && (b_cs == 1 || b_rs == 1) {
            simd::vector_product(n, k, va, &vb, y, &epi)
        } else {
            simd::product(m, n, k, va, &vb, Out { y, ldy: at.y_row }, &epi)
        };
        if let Err(e) = r {
            result = Err(e);
        }
    });
    result
}

/// The length of a `k x n` B laid out by [`pack_b_strips`]: its columns
/// padded with zeros to a multiple of 32, `None` when that overflows.
pub const fn packed_b_len(k: usize, n: usize) -> Option<usize> {
    match n.div_ceil(STRIP).checked_mul(STRIP) {
        Some(cols) => cols.checked_mul(k),
        None => None,
    }
}

/// Lays out a constant B once (at generation time) for [`sgemm`] and
/// [`smatmul`] (as [`Weights::Strips`]): `b` is `[k, n]`, or `[n, k]` used transposed when
/// `trans`; element `(p, j)` of the product's B goes to
/// `out[(j / 32) * 32 * k + p * 32 + j % 32]`, columns past `n` are zero.
/// Each 32-column strip is then what the AVX-512 kernel reads in place, and
/// what the narrower kernels copy from contiguous runs.
pub fn pack_b_strips(k: usize, n: usize, b: &[f32], trans: bool, out: &mut [f32]) -> Result {
    let kn = k.checked_mul(n).ok_or(Error::Overflow)?;
    let len = packed_b_len(k, n).ok_or(Error::Overflow)?;
    ensure(b.len() == kn && out.len() == len, Error::ShapeMismatch)?;
    out.fill(0.0);
    if k == 0 {
        return Ok(());
    }
    for (s, strip) in out.chunks_exact_mut(STRIP * k).enumerate() {
        for (p, row) in strip.chunks_exact_mut(STRIP).enumerate() {
            for (c, v) in row.iter_mut().enumerate() {
                let j = s * STRIP + c;
                if j < n {
                    *v = if trans { b[j * k + p] } else { b[p * n + j] };
                }
            }
        }
    }
    Ok(())
}

/// A's view (`transA` honoured) and the epilogue (`alpha`, `beta * C` with
/// C checked against `p.c_strides`, then `act`) of the Gemm `p`.
fn a_and_epilogue<'a>(
    p: &Gemm<f32>,
    a: &'a [f32],
    c: Option<&'a [f32]>,
    post: &Post<'a>,
) -> Result<(ViewA<'a>, Epilogue<'a>)> {
    let (m, n, k) = (p.m, p.n, p.k);
    if let Some(c) = c {
        check_strided(&[m, n], &p.c_strides, 0, c.len())?;
    }
    if let Some(r) = post.residual {
        ensure(Some(r.len()) == m.checked_mul(n), Error::ShapeMismatch)?;
    }
    let va = if p.trans_a {
        ViewA { data: a, off: 0, rs: 1, cs: m }
    } else {
        ViewA { data: a, off: 0, rs: k, cs: 1 }
    };
    // Strides over an axis of length 1 are never used; others are checked
    // non-negative (`check_strided` keeps every offset in range).
    let stride = |s: isize, len: usize| if len > 1 { usize::try_from(s).ok() } else { Some(0) };
    let c = match c {
        Some(data) => {
            let rs = stride(p.c_strides[0], m).ok_or(Error::InvalidParams)?;
            let cs = stride(p.c_strides[1], n).ok_or(Error::InvalidParams)?;
            Some(CTerm { data, rs, cs, beta: p.beta })
        }
        None => None,
    };
    let res = post.residual.map(|data| Residual { data, rs: n });
    let (act, smooth) = (post.act, post.smooth);
    Ok((va, Epilogue { alpha: p.alpha, row_bias: None, c, res, act, smooth }))
}

/// [`sgemm`] with B laid out by [`pack_b_strips`] (which took care of
/// `transB`: `p.trans_b` is not read). No copy of B is made on CPUs whose
/// kernel is 32 columns wide; the others copy from the strips.
fn sgemm_packed_fused(
    p: &Gemm<f32>,
    a: &[f32],
    packed: &[f32],
    c: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let mk = m.checked_mul(k).ok_or(Error::Overflow)?;
    let mn = m.checked_mul(n).ok_or(Error::Overflow)?;
    let len = packed_b_len(k, n).ok_or(Error::Overflow)?;
    ensure(a.len() == mk && packed.len() == len && y.len() == mn, Error::ShapeMismatch)?;
    let (va, epi) = a_and_epilogue(p, a, c, post)?;
    let vb = StripsB { data: packed, k };
    if m == 1 && !p.trans_a {
        return simd::strips_vector_product(n, a, &vb, y, &epi);
    }
    simd::product(m, n, k, va, &vb, Out { y, ldy: n }, &epi)
}

/// Whether the rows of every matrix of a batch, `m` rows per matrix, form
/// one sequence `row` elements apart: per batch axis (innermost first, axes
/// of length 1 skipped) the matrix stride is the number of rows inside it
/// times `row`. Returns that row distance.
fn uniform_rows(batch: &[usize], strides: &[isize], m: usize, row: usize) -> Option<usize> {
    let row = if m > 1 {
        row
    } else {
        let inner = batch.iter().zip(strides).rev().find(|(d, _)| **d > 1);
        inner.map_or(Some(row), |(_, &s)| usize::try_from(s).ok())?
    };
    let mut expect = m.checked_mul(row)?;
    for (&d, &s) in batch.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        if usize::try_from(s).ok()? != expect {
            return None;
        }
        expect = expect.checked_mul(d)?;
    }
    Some(row)
}

/// [`smatmul`] with a B shared by the whole batch (every B batch stride 0)
/// laid out by [`pack_b_strips`] (`p.b_strides` is not read). When A's and
/// Y's matrices follow one another row after row, the batch runs as one
/// product of all their rows.
fn smatmul_packed_fused(
    p: &MatMul<'_>,
    a: &[f32],
    packed: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    ensure(p.b_batch_strides.iter().all(|&s| s == 0), Error::InvalidParams)?;
    let len = packed_b_len(k, n).ok_or(Error::Overflow)?;
    ensure(packed.len() == len, Error::ShapeMismatch)?;
    let dense_b = MatMul { b_strides: [n, 1], ..*p };
    if k == 0 {
        return smatmul_fused(&dense_b, a, &[], bias, y, post);
    }
    let epi = matmul_epilogue(p, bias, y.len(), post)?;
    let at = place(&dense_b, a.len(), k * n, y.len())?;
    let total = numel(p.batch)?;
    if m == 0 || n == 0 || total == 0 {
        return Ok(());
    }
    let vb = StripsB { data: packed, k };
    let [a_rs, a_cs] = p.a_strides;
    let ys = &at.ys[..p.batch.len()];
    let rows_a = uniform_rows(p.batch, p.a_batch_strides, m, a_rs);
    let rows_y = uniform_rows(p.batch, ys, m, at.y_row).filter(|&r| r >= n);
    if let (Some(rs), Some(ldy)) = (rows_a, rows_y) {
        let rows = total.checked_mul(m).ok_or(Error::Overflow)?;
        if rows == 1 && a_cs == 1 {
            return simd::strips_vector_product(n, a.get(..k).unwrap_or(&[]), &vb, y, &epi);
        }
        let va = ViewA { data: a, off: 0, rs, cs: a_cs };
        let epi = shifted(&epi, 0, ldy);
        return simd::product(rows, n, k, va, &vb, Out { y, ldy }, &epi);
    }
    let mut result = Ok(());
    walk(p.batch, [p.a_batch_strides, ys], [0; 2], |[ia, iy]| {
        let va = ViewA { data: &a[ia..ia + at.ext_a], off: 0, rs: a_rs, cs: a_cs };
        let y = &mut y[iy..iy + at.ext_y];
        let epi = shifted(&epi, iy, at.y_row);
        let r = if m == 1 && a_cs == 1 {
            simd::strips_vector_product(n, va.data.get(..k).unwrap_or(&[]), &vb, y, &epi)
        } else {
            simd::product(m, n, k, va, &vb, Out { y, ldy: at.y_row }, &epi)
        };
        if let Err(e) = r {
            result = Err(e);
        }
    });
    result
}

/// ONNX `MatMul` over broadcast batch dimensions.
///
/// Operands are stacks of row-major matrices: `A` of `[m, k]`, `B` of `[k, n]`.
/// The generator applies numpy's 1-D rules before calling: a 1-D `A` of `[k]`
/// is `m = 1`, a 1-D `B` of `[k]` is `n = 1` (its storage is the same as
/// `[k, 1]`), and drops the inserted axis from the output shape.
#[derive(Clone, Copy, Debug)]
pub struct MatMul<'a> {
    /// The broadcast batch shape (empty for a plain 2-D product).
    pub batch: &'a [usize],
    /// Per batch axis, the distance in elements between consecutive matrices
    /// of `A` (0 on an axis `A` broadcasts over).
    pub a_batch_strides: &'a [isize],
    /// The same for `B`.
    pub b_batch_strides: &'a [isize],
    /// Rows of each `A` matrix.
    pub m: usize,
    /// Columns of each `A` matrix, rows of each `B` matrix.
    pub k: usize,
    /// Columns of each `B` matrix.
    pub n: usize,
    /// Row and column strides inside each `A` matrix: `[k, 1]` for stacked
    /// row-major matrices, others when a transpose is folded into the product.
    pub a_strides: [usize; 2],
    /// The same for `B`: `[n, 1]` for stacked row-major matrices.
    pub b_strides: [usize; 2],
    /// Where the output matrices go: per batch axis the distance between
    /// consecutive ones, and the distance between rows (columns are
    /// contiguous). `None` for stacked row-major matrices filling `y`.
    pub y_layout: Option<(&'a [isize], usize)>,
}

impl<'a> MatMul<'a> {
    /// A product of stacked row-major matrices into stacked row-major matrices.
    pub const fn dense(
        batch: &'a [usize],
        a_batch_strides: &'a [isize],
        b_batch_strides: &'a [isize],
        m: usize,
        k: usize,
        n: usize,
    ) -> MatMul<'a> {
        MatMul {
            batch,
            a_batch_strides,
            b_batch_strides,
            m,
            k,
            n,
            a_strides: [k, 1],
            b_strides: [n, 1],
            y_layout: None,
        }
    }
}

/// Elements from the first to the last of a `rows x cols` matrix read
/// through `[row, column]` strides (0 when it is empty).
fn extent(rows: usize, cols: usize, s: [usize; 2]) -> Result<usize> {
    if rows == 0 || cols == 0 {
        return Ok(0);
    }
    (rows - 1)
        .checked_mul(s[0])
        .and_then(|v| v.checked_add((cols - 1).checked_mul(s[1])?))
        .and_then(|v| v.checked_add(1))
        .ok_or(Error::Overflow)
}

/// The checked geometry of a [`MatMul`] call: each operand's matrix extent,
/// the output's batch strides and row stride.
struct Placed {
    ext_a: usize,
    ext_b: usize,
    ext_y: usize,
    y_row: usize,
    ys: [isize; MAX_RANK],
}

/// Writes zero (the empty sum, `k == 0`) to every output of a placed product.
fn empty_sums<T: Num>(p: &MatMul<'_>, at: &Placed, y: &mut [T]) -> Result {
    let mut result = Ok(());
    walk(p.batch, [&at.ys[..p.batch.len()]], [0], |[iy]| {
        for i in 0..p.m {
            match y.get_mut(iy + i * at.y_row..iy + i * at.y_row + p.n) {
                Some(row) => row.fill(T::ZERO),
                None => result = Err(Error::ShapeMismatch),
            }
        }
    });
    result
}

fn place(p: &MatMul<'_>, a_len: usize, b_len: usize, y_len: usize) -> Result<Placed> {
    let (m, n, k) = (p.m, p.n, p.k);
    let ext_a = extent(m, k, p.a_strides)?;
    let ext_b = extent(k, n, p.b_strides)?;
    check_batch(p.batch, p.a_batch_strides, ext_a, a_len)?;
    check_batch(p.batch, p.b_batch_strides, ext_b, b_len)?;
    let mut ys = [0isize; MAX_RANK];
    ensure(p.batch.len() <= MAX_RANK, Error::RankTooLarge)?;
    let (ext_y, y_row) = match p.y_layout {
        None => {
            let mn = m.checked_mul(n).ok_or(Error::Overflow)?;
            let total = numel(p.batch)?.checked_mul(mn).ok_or(Error::Overflow)?;
            ensure(y_len == total, Error::ShapeMismatch)?;
            let ys = &mut ys[..p.batch.len()];
            contiguous_strides(p.batch, ys)?;
            let mn_i = isize::try_from(mn).map_err(|_| Error::Overflow)?;
            for s in ys.iter_mut() {
                *s = s.checked_mul(mn_i).ok_or(Error::Overflow)?;
            }
            (mn, n)
        }
        Some((strides, row)) => {
            ensure(strides.len() == p.batch.len() && row >= n, Error::InvalidParams)?;
            let ext = extent(m, n, [row, 1])?;
            check_batch(p.batch, strides, ext, y_len)?;
            ys[..strides.len()].copy_from_slice(strides);
            (ext, row)
        }
    };
    Ok(Placed { ext_a, ext_b, ext_y, y_row, ys })
}

/// Checks that every matrix of `size` elements starting at a batch offset fits in `len`.
fn check_batch(batch: &[usize], strides: &[isize], size: usize, len: usize) -> Result {
    // No matrix is read when the matrices or the batch are empty.
    if size == 0 || numel(batch)? == 0 {
        return check_strided(batch, strides, 0, usize::MAX);
    }
    ensure(len >= size, Error::ShapeMismatch)?;
    check_strided(batch, strides, 0, len - size + 1)
}

/// `y[batch, m, n] = a[batch, m, k] @ b[batch, k, n]`, `y` contiguous.
pub fn matmul<T: Num>(p: &MatMul<'_>, a: &[T], b: &[T], y: &mut [T]) -> Result {
    let (m, n, k) = (p.m, p.n, p.k);
    let at = place(p, a.len(), b.len(), y.len())?;
    if m == 0 || n == 0 || numel(p.batch)? == 0 {
        return Ok(());
    }
    if k == 0 {
        return empty_sums(p, &at, y);
    }
    let (a_s, b_s, ldy) = (p.a_strides, p.b_strides, at.y_row);
    let ys = &at.ys[..p.batch.len()];
    walk(p.batch, [p.a_batch_strides, p.b_batch_strides, ys], [0; 3], |[ia, ib, iy]| {
        let (a, b) = (&a[ia..ia + at.ext_a], &b[ib..ib + at.ext_b]);
        let y = &mut y[iy..iy + at.ext_y];
        mm(m, n, k, a, a_s, b, b_s, |i, j, acc| y[i * ldy + j] = acc);
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(m: usize, n: usize, k: usize) -> Gemm<f32> {
        Gemm { m, n, k, trans_a: false, trans_b: false, alpha: 1.0, beta: 1.0, c_strides: [0, 0] }
    }

    #[test]
    fn gemm_hand_computed() {
        // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let mut y = [0.0f32; 4];
        gemm(&g(2, 2, 2), &a, &b, None, &mut y).unwrap();
        assert_eq!(y, [19.0, 22.0, 43.0, 50.0]);
        // transA: Aᵀ = [[1,3],[2,4]] -> [[26,30],[38,44]]; alpha 2, C row [1, -1], beta 3.
        let p = Gemm { trans_a: true, alpha: 2.0, beta: 3.0, c_strides: [0, 1], ..g(2, 2, 2) };
        gemm(&p, &a, &b, Some(&[1.0, -1.0]), &mut y).unwrap();
        assert_eq!(y, [55.0, 57.0, 79.0, 85.0]);
        // transB: Bᵀ = [[5,7],[6,8]] -> [[17,23],[39,53]]; C column [10, 20].
        let p = Gemm { trans_b: true, c_strides: [1, 0], ..g(2, 2, 2) };
        gemm(&p, &a, &b, Some(&[10.0, 20.0]), &mut y).unwrap();
        assert_eq!(y, [27.0, 33.0, 59.0, 73.0]);
        // Scalar C, beta 0.5.
        let p = Gemm { beta: 0.5, ..g(2, 2, 2) };
        gemm(&p, &a, &b, Some(&[4.0]), &mut y).unwrap();
        assert_eq!(y, [21.0, 24.0, 45.0, 52.0]);
    }

    #[test]
    fn gemm_non_square_and_identity() {
        // [1,3] @ [3,2]
        let mut y = [0.0f64; 2];
        let p = Gemm {
            m: 1,
            n: 2,
            k: 3,
            trans_a: false,
            trans_b: false,
            alpha: 1.0,
            beta: 0.0,
            c_strides: [0, 0],
        };
        gemm(&p, &[1.0, 2.0, 3.0], &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0], None, &mut y).unwrap();
        assert_eq!(y, [4.0, 5.0]);
        // Identity on either side leaves the other operand unchanged.
        let x = [1.5f32, -2.0, 0.25, 4.0, 5.0, 6.0];
        let id = [1.0f32, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0];
        let mut y = [0.0f32; 6];
        gemm(&g(2, 3, 3), &x, &id, None, &mut y).unwrap();
        assert_eq!(y, x);
        assert_eq!(gemm(&g(2, 3, 3), &x, &id[..8], None, &mut y), Err(Error::ShapeMismatch));
        let p = Gemm { c_strides: [3, 1], ..g(2, 3, 3) };
        assert_eq!(gemm(&p, &x, &id, Some(&[0.0; 5]), &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn matmul_batched_broadcast() {
        // A: [2, 1, 2] (two 1x2 rows), B: [2, 1] shared across the batch.
        let a = [1i32, 2, 3, 4];
        let b = [10i32, 1];
        let mut y = [0i32; 2];
        let p = MatMul::dense(&[2], &[2], &[0], 1, 2, 1);
        matmul(&p, &a, &b, &mut y).unwrap();
        assert_eq!(y, [12, 34]);
        // Batch [2, 2] from A [2, 1, ...] and B [1, 2, ...], 1x1 matrices:
        // y[i][j] = a[i] * b[j].
        let p = MatMul::dense(&[2, 2], &[1, 0], &[0, 1], 1, 1, 1);
        let mut y = [0i64; 4];
        matmul(&p, &[2, 3], &[5, 7], &mut y).unwrap();
        assert_eq!(y, [10, 14, 15, 21]);
        // 1-D @ 1-D is a dot product: m = n = 1.
        let p = MatMul::dense(&[], &[], &[], 1, 3, 1);
        let mut y = [0.0f32];
        matmul(&p, &[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0], &mut y).unwrap();
        assert_eq!(y, [32.0]);
        // k = 0: empty sums, whatever the (unused) batch strides say.
        let p0 = MatMul::dense(&[2], &[5], &[5], 1, 0, 2);
        let mut y0 = [9i32; 4];
        matmul(&p0, &[], &[], &mut y0).unwrap();
        assert_eq!(y0, [0; 4]);
        // A batch stride that would read past A is refused.
        let p = MatMul::dense(&[2], &[3], &[0], 1, 2, 1);
        assert_eq!(matmul(&p, &a, &b, &mut [0i32; 2]), Err(Error::ShapeMismatch));
    }

    /// Deterministic values in [-1, 1) with a few exact zeros.
    fn values(n: usize, seed: u32) -> [f32; 1024] {
        let mut out = [0.0f32; 1024];
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        for v in out.iter_mut().take(n) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = (x % 2001) as f32 / 1000.0 - 1.0;
        }
        out
    }

    fn close(got: &[f32], want: &[f32], k: usize) {
        for (g, w) in got.iter().zip(want) {
            let tol = 1e-5 * (k as f32 + 1.0);
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{g} vs {w}");
        }
    }

    #[test]
    fn sgemm_matches_exact_kernel_on_odd_sizes() {
        // Sizes around the tile edges (6 x 16, 4 x 8), the strip depths
        // (16, 64, 256) and the row block (96), every transposition, with and
        // without C.
        for &(m, n, k) in
            &[(1, 1, 1), (7, 17, 5), (6, 16, 16), (13, 9, 65), (3, 33, 17), (2, 3, 300), (97, 3, 2)]
        {
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let a = values(m * k, 1);
                let b = values(k * n, 2);
                let c = values(n, 3);
                let p = Gemm {
                    m,
                    n,
                    k,
                    trans_a: ta,
                    trans_b: tb,
                    alpha: 0.5,
                    beta: 2.0,
                    c_strides: [0, 1],
                };
                let (a, b) = (&a[..m * k], &b[..k * n]);
                let mut want = [0.0f32; 1024];
                let mut got = [0.0f32; 1024];
                for cc in [None, Some(&c[..n])] {
                    gemm(&p, a, b, cc, &mut want[..m * n]).unwrap();
                    sgemm(&p, a, Weights::Dense(b), cc, &mut got[..m * n], &Post::NONE).unwrap();
                    close(&got[..m * n], &want[..m * n], k);
                    // The portable kernel is the exact kernel's arithmetic.
                    let va = if ta {
                        ViewA { data: a, off: 0, rs: 1, cs: m }
                    } else {
                        ViewA { data: a, off: 0, rs: k, cs: 1 }
                    };
                    let vb = if tb {
                        DenseB { data: b, rs: 1, cs: k }
                    } else {
                        DenseB { data: b, rs: n, cs: 1 }
                    };
                    let out = Out { y: &mut got[..m * n], ldy: n };
                    let c = cc.map(|data| CTerm { data, rs: 0, cs: 1, beta: 2.0 });
                    let epi = Epilogue { alpha: 0.5, c, ..Epilogue::NONE };
                    simd::product_portable(m, n, k, va, &vb, out, &epi).unwrap();
                    assert_eq!(got[..m * n], want[..m * n], "{m}x{n}x{k} {ta} {tb}");
                }
            }
        }
        let p = g(2, 2, 2);
        assert_eq!(
            sgemm(&p, &[1.0; 3], Weights::Dense(&[1.0; 4]), None, &mut [0.0; 4], &Post::NONE),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn smatmul_matches_exact_kernel() {
        let a = values(2 * 5 * 19, 4);
        let b = values(19 * 23, 5);
        let p = MatMul::dense(&[2], &[95], &[0], 5, 19, 23);
        let (mut want, mut got) = ([0.0f32; 230], [0.0f32; 230]);
        matmul(&p, &a[..190], &b[..437], &mut want).unwrap();
        smatmul(&p, &a[..190], Weights::Dense(&b[..437]), None, &mut got, &Post::NONE).unwrap();
        close(&got, &want, 19);
        let bad = MatMul { a_batch_strides: &[96], ..p };
        assert_eq!(
            smatmul(&bad, &a[..190], Weights::Dense(&b[..437]), None, &mut got, &Post::NONE),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn half_float_products_sum_in_f32_and_round_once() {
        use half::{bf16, f16};
        // numpy: np.array([[1, 1, 1]], np.float16) @ [[1], [2**-11], [2**-11]]
        // is 1.0009765625; rounding after every step would give 1.0 (1 + 2^-11
        // is a tie that rounds to even).
        let p = MatMul::dense(&[], &[], &[], 1, 3, 1);
        let a = [f16::ONE; 3];
        let b = [f16::ONE, f16::from_f32(1.0 / 2048.0), f16::from_f32(1.0 / 2048.0)];
        let mut y = [f16::ZERO];
        matmul(&p, &a, &b, &mut y).unwrap();
        assert_eq!(y[0].to_f32(), 1.000_976_6);
        // ml_dtypes: bfloat16 [[1, 1, 1]] @ [[1], [2**-8], [2**-8]] is 1.0078125
        // in float32, which bfloat16 holds.
        let a = [bf16::ONE; 3];
        let b = [bf16::ONE, bf16::from_f32(1.0 / 256.0), bf16::from_f32(1.0 / 256.0)];
        let mut y = [bf16::ZERO];
        matmul(&p, &a, &b, &mut y).unwrap();
        assert_eq!(y[0].to_f32(), 1.007_812_5);
        // Gemm sums the same way; alpha then scales the rounded sum.
        let g = Gemm {
            m: 1,
            n: 1,
            k: 3,
            trans_a: false,
            trans_b: false,
            alpha: f16::from_f32(2.0),
            beta: f16::ZERO,
            c_strides: [0, 0],
        };
        let b = [f16::ONE, f16::from_f32(1.0 / 2048.0), f16::from_f32(1.0 / 2048.0)];
        let mut y = [f16::ZERO];
        gemm(&g, &[f16::ONE; 3], &b, None, &mut y).unwrap();
        assert_eq!(y[0].to_f32(), 2.001_953_1);
    }

    #[test]
    fn matmul_with_an_empty_batch_axis_reads_nothing() {
        // A [3, 0, 3, 1] @ B [1, 2]: no matrix of A exists, B is broadcast.
        let p = MatMul::dense(&[3, 0], &[0, 3], &[0, 0], 3, 1, 2);
        assert_eq!(matmul(&p, &[] as &[f32], &[1.0, 2.0], &mut []), Ok(()));
        assert_eq!(
            smatmul(&p, &[], Weights::Dense(&[1.0, 2.0]), None, &mut [], &Post::NONE),
            Ok(())
        );
        assert_eq!(
            smatmul(&p, &[], Weights::Dense(&[1.0, 2.0]), None, &mut [0.0], &Post::NONE),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn strided_operands_and_output_equal_explicit_transposes() {
        // Two heads: Q [2 heads, 3 rows, 4] stored as [3 rows, 2 heads, 4];
        // K^T [2, 4, 5] stored as K [5, 2 heads, 4]; Y [2, 3, 5] stored as
        // [3, 2, 5] (the transposes around attention's products).
        let q = values(3 * 2 * 4, 3);
        let kk = values(5 * 2 * 4, 7);
        let mut qd = [0.0f32; 24];
        let mut kt = [0.0f32; 40];
        for h in 0..2 {
            for i in 0..3 {
                for p in 0..4 {
                    qd[h * 12 + i * 4 + p] = q[i * 8 + h * 4 + p];
                }
            }
            for p in 0..4 {
                for j in 0..5 {
                    kt[h * 20 + p * 5 + j] = kk[j * 8 + h * 4 + p];
                }
            }
        }
        let dense = MatMul::dense(&[2], &[12], &[20], 3, 4, 5);
        let mut want = [0.0f32; 30];
        matmul(&dense, &qd, &kt, &mut want).unwrap();
        let strided = MatMul {
            a_batch_strides: &[4],
            b_batch_strides: &[4],
            a_strides: [8, 1],
            b_strides: [1, 8],
            y_layout: Some((&[5], 10)),
            ..dense
        };
        let (mut exact, mut fast) = ([0.0f32; 30], [0.0f32; 30]);
        matmul(&strided, &q, &kk, &mut exact).unwrap();
        smatmul(&strided, &q, Weights::Dense(&kk), None, &mut fast, &Post::NONE).unwrap();
        for h in 0..2 {
            for i in 0..3 {
                for j in 0..5 {
                    let w = want[h * 15 + i * 5 + j];
                    assert_eq!(exact[i * 10 + h * 5 + j], w);
                    assert!((fast[i * 10 + h * 5 + j] - w).abs() <= 1e-5 * (1.0 + w.abs()));
                }
            }
        }
        // With a bias per column, also when k is 0.
        let bias = [1.0f32, -2.0, 0.5, 0.0, 3.0];
        smatmul(&strided, &q, Weights::Dense(&kk), Some(&bias), &mut fast, &Post::NONE).unwrap();
        for i in 0..30 {
            let w = exact[i] + bias[i % 5];
            assert!((fast[i] - w).abs() <= 1e-5 * (1.0 + w.abs()), "{i}");
        }
        let empty = MatMul { k: 0, a_strides: [0, 1], b_strides: [1, 8], ..strided };
        smatmul(&empty, &[], Weights::Dense(&[]), Some(&bias), &mut fast, &Post::NONE).unwrap();
        assert_eq!(fast[..10], [1.0, -2.0, 0.5, 0.0, 3.0, 1.0, -2.0, 0.5, 0.0, 3.0]);
        assert_eq!(
            smatmul(&strided, &q, Weights::Dense(&kk), Some(&bias[..4]), &mut fast, &Post::NONE),
            Err(Error::ShapeMismatch)
        );
        // A row stride shorter than a row, or an output too short, is refused.
        let bad = MatMul { y_layout: Some((&[5], 4)), ..strided };
        assert_eq!(
            smatmul(&bad, &q, Weights::Dense(&kk), None, &mut fast, &Post::NONE),
            Err(Error::InvalidParams)
        );
        assert_eq!(
            smatmul(&strided, &q, Weights::Dense(&kk), None, &mut fast[..29], &Post::NONE),
            Err(Error::ShapeMismatch)
        );
    }
    use crate::simd::tests::fill;

    const BIG: usize = 8192;

    #[test]
    fn strips_hold_b_by_columns_of_32_padded_with_zeros() {
        // B [2, 3] = [[1, 2, 3], [4, 5, 6]], and the same given transposed.
        let b = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1.0f32, 4.0, 2.0, 5.0, 3.0, 6.0];
        assert_eq!(packed_b_len(2, 3), Some(64));
        for (src, trans) in [(&b, false), (&bt, true)] {
            let mut out = [9.0f32; 64];
            pack_b_strips(2, 3, src, trans, &mut out).unwrap();
            assert_eq!(out[..3], [1.0, 2.0, 3.0]);
            assert_eq!(out[32..35], [4.0, 5.0, 6.0]);
            assert!(out[3..32].iter().chain(&out[35..]).all(|&v| v == 0.0));
        }
        // Column 33 of a [1, 40] B is in the second strip, at its column 1.
        let mut wide = [0.0f32; 40];
        wide[33] = 7.0;
        let mut out = [0.0f32; 64];
        pack_b_strips(1, 40, &wide, false, &mut out).unwrap();
        assert_eq!(out[33], 7.0);
        assert_eq!(out.iter().filter(|&&v| v != 0.0).count(), 1);
        assert_eq!(pack_b_strips(2, 3, &b, false, &mut [0.0; 63]), Err(Error::ShapeMismatch));
        assert_eq!(pack_b_strips(2, 3, &b[..5], false, &mut [0.0; 64]), Err(Error::ShapeMismatch));
        assert_eq!(packed_b_len(usize::MAX, 2), None);
    }

    #[test]
    fn strips_copied_for_narrower_kernels_equal_the_dense_b_bit_for_bit() {
        // The portable kernel (the exact arithmetic) through the strips'
        // `PackB`, at widths 4 and 8, and runs of 12 columns that cross a
        // strip boundary (the NEON kernel's width).
        use crate::simd::PackB;
        let (mut b, mut packed) = ([0.0f32; BIG], [0.0f32; BIG]);
        for (k, n) in [(5, 70), (17, 33), (1, 1), (40, 64)] {
            fill(&mut b[..k * n], (k * 3 + n) as u32);
            let len = packed_b_len(k, n).unwrap();
            pack_b_strips(k, n, &b[..k * n], false, &mut packed[..len]).unwrap();
            let strips = StripsB { data: &packed[..len], k };
            let dense = DenseB { data: &b[..k * n], rs: n, cs: 1 };
            for (p0, j0, nr) in [(0, 0, 12), (1, 24, 12), (0, 60, 12), (2, 0, 32)] {
                if j0 >= n || p0 >= k {
                    continue;
                }
                let (kc, nr) = ((k - p0).min(3), nr.min(n - j0));
                let (mut want, mut got) = ([5.0f32; 3 * 40], [5.0f32; 3 * 40]);
                dense.pack(p0, kc, j0, nr, 40, &mut want);
                strips.pack(p0, kc, j0, nr, 40, &mut got);
                assert_eq!(got, want, "{k}x{n} at ({p0}, {j0}) x {nr}");
            }
            let m = 7;
            let mut a = [0.0f32; 7 * 40];
            fill(&mut a, 3);
            let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
            let (mut want, mut got) = ([0.0f32; 7 * 70], [0.0f32; 7 * 70]);
            let out = |y| Out { y, ldy: n };
            let epi = Epilogue::NONE;
            simd::product_portable(m, n, k, va, &dense, out(&mut want), &epi).unwrap();
            simd::product_portable(m, n, k, va, &strips, out(&mut got), &epi).unwrap();
            assert_eq!(got, want, "{k}x{n}");
        }
    }

    /// `sgemm_packed_fused` against the exact `gemm` on one shape, every
    /// transposition, each kind of C and an activation.
    fn check_gemm_packed(m: usize, n: usize, k: usize) {
        let (mut a, mut b, mut c) = ([0.0f32; BIG], [0.0f32; BIG], [0.0f32; BIG]);
        fill(&mut a[..m * k], (m * 7 + k) as u32);
        fill(&mut b[..k * n], (k * 11 + n) as u32);
        fill(&mut c[..m * n], 5);
        let len = packed_b_len(k, n).unwrap();
        let mut packed = [0.0f32; BIG];
        let (a, b) = (&a[..m * k], &b[..k * n]);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            pack_b_strips(k, n, b, tb, &mut packed[..len]).unwrap();
            let cases: [(Option<&[f32]>, [isize; 2]); 4] = [
                (None, [0, 0]),
                (Some(&c[..n]), [0, 1]),
                (Some(&c[..m]), [1, 0]),
                (Some(&c[..m * n]), [n as isize, 1]),
            ];
            for (cc, cs) in cases {
                let p = Gemm {
                    m,
                    n,
                    k,
                    trans_a: ta,
                    trans_b: tb,
                    alpha: -0.5,
                    beta: 2.0,
                    c_strides: cs,
                };
                let (mut want, mut got) = ([0.0f32; BIG], [0.0f32; BIG]);
                gemm(&p, a, b, cc, &mut want[..m * n]).unwrap();
                for act in [Activation::None, Activation::Relu] {
                    sgemm(
                        &p,
                        a,
                        Weights::Strips(&packed[..len]),
                        cc,
                        &mut got[..m * n],
                        &Post::act(act),
                    )
                    .unwrap();
                    let want_act = want.map(|v| act.apply(v));
                    close(&got[..m * n], &want_act[..m * n], k);
                }
            }
        }
    }

    #[test]
    fn packed_gemm_matches_exact_kernel_on_awkward_sizes() {
        for m in [1, 2, 3, 5, 8, 9, 17, 33, 40] {
            for n in [1, 5, 31, 32, 33, 47, 64, 70] {
                for k in [1, 3, 17, 67] {
                    check_gemm_packed(m, n, k);
                }
            }
        }
        for m in 1..=40 {
            check_gemm_packed(m, 37, 9);
        }
        let p = g(2, 3, 4);
        let len = packed_b_len(4, 3).unwrap();
        let r = sgemm(
            &p,
            &[0.0; 8],
            Weights::Strips(&[0.0; 8]),
            None,
            &mut [0.0; 6],
            &Post::act(Activation::None),
        );
        assert_eq!(r, Err(Error::ShapeMismatch));
        let mut y = [1.0f32; 6];
        sgemm(
            &p,
            &[0.0; 8],
            Weights::Strips(&[0.0; BIG][..len]),
            None,
            &mut y,
            &Post::act(Activation::None),
        )
        .unwrap();
        assert_eq!(y, [0.0; 6]);
    }

    /// `smatmul_packed_fused` against the exact `matmul` plus the bias, for one
    /// placement of the batch.
    fn check_matmul_packed(p: &MatMul<'_>, a_len: usize, y_len: usize, trans: bool) {
        let (m, n, k) = (p.m, p.n, p.k);
        let (mut a, mut b, mut bias) = ([0.0f32; BIG], [0.0f32; BIG], [0.0f32; 128]);
        fill(&mut a[..a_len], (m + n * 3 + k * 5) as u32);
        fill(&mut b[..k * n], (k + n) as u32);
        fill(&mut bias[..n], 9);
        let b = &b[..k * n];
        let dense = MatMul { b_strides: if trans { [1, k] } else { [n, 1] }, ..*p };
        let (mut want, mut got) = ([0.0f32; BIG], [0.0f32; BIG]);
        matmul(&dense, &a[..a_len], b, &mut want[..y_len]).unwrap();
        let len = packed_b_len(k, n).unwrap();
        let mut packed = [0.0f32; BIG];
        pack_b_strips(k, n, b, trans, &mut packed[..len]).unwrap();
        let packed = &packed[..len];
        for with_bias in [false, true] {
            let bias = with_bias.then_some(&bias[..n]);
            got[..y_len].fill(3.0);
            smatmul(p, &a[..a_len], Weights::Strips(packed), bias, &mut got[..y_len], &Post::NONE)
                .unwrap();
            let mut w = want;
            if let Some(c) = bias {
                // Every layout tested fills Y with whole rows of `n`.
                for (i, v) in w[..y_len].iter_mut().enumerate() {
                    *v += c[i % n];
                }
            }
            close(&got[..y_len], &w[..y_len], k);
        }
    }

    #[test]
    fn packed_matmul_matches_exact_kernel_merged_or_not() {
        for &(m, n, k) in
            &[(1, 1, 1), (1, 33, 17), (5, 70, 3), (13, 32, 67), (25, 47, 9), (2, 64, 40)]
        {
            for trans in [false, true] {
                // A plain 2-D product.
                let p = MatMul::dense(&[], &[], &[], m, k, n);
                check_matmul_packed(&p, m * k, m * n, trans);
                // A batch [2, 3] of contiguous matrices: one product of 6m rows.
                let (sa, sy) = ([(3 * m * k) as isize, (m * k) as isize], [0isize, 0]);
                let p = MatMul::dense(&[2, 3], &sa, &sy, m, k, n);
                check_matmul_packed(&p, 6 * m * k, 6 * m * n, trans);
                // A broadcast over axis 0 (rows repeat): batch by batch.
                let sa = [0isize, (m * k) as isize];
                let p = MatMul::dense(&[2, 3], &sa, &sy, m, k, n);
                check_matmul_packed(&p, 3 * m * k, 6 * m * n, trans);
                // Output heads interleaved ([batch, m, n] stored as [m, batch, n]).
                let (ys, sa) = ([n as isize], [(m * k) as isize]);
                let p = MatMul {
                    y_layout: Some((&ys, 2 * n)),
                    ..MatMul::dense(&[2], &sa, &[0], m, k, n)
                };
                check_matmul_packed(&p, 2 * m * k, 2 * m * n, trans);
            }
        }
        // Refused: a B that changes along the batch, a packed B of the wrong length.
        let p = MatMul::dense(&[2], &[6], &[6], 2, 3, 2);
        let len = packed_b_len(3, 2).unwrap();
        let packed = [0.0f32; 96];
        let r = smatmul(
            &p,
            &[0.0; 12],
            Weights::Strips(&packed[..len]),
            None,
            &mut [0.0; 8],
            &Post::NONE,
        );
        assert_eq!(r, Err(Error::InvalidParams));
        let p = MatMul::dense(&[2], &[6], &[0], 2, 3, 2);
        let r = smatmul(
            &p,
            &[0.0; 12],
            Weights::Strips(&packed[..len - 1]),
            None,
            &mut [0.0; 8],
            &Post::NONE,
        );
        assert_eq!(r, Err(Error::ShapeMismatch));
        let r = smatmul(
            &p,
            &[0.0; 11],
            Weights::Strips(&packed[..len]),
            None,
            &mut [0.0; 8],
            &Post::NONE,
        );
        assert_eq!(r, Err(Error::ShapeMismatch));
        // k = 0: the bias alone.
        let p = MatMul::dense(&[], &[], &[], 2, 0, 2);
        let mut y = [9.0f32; 4];
        smatmul(&p, &[], Weights::Strips(&[]), Some(&[1.0, -1.0]), &mut y, &Post::NONE).unwrap();
        assert_eq!(y, [1.0, -1.0, 1.0, -1.0]);
    }

    /// The unfused reference of a [`Post`]: the residual added, then the
    /// activations, one element at a time, as the separate nodes do.
    fn apply_post(post: &Post<'_>, y: &mut [f32]) {
        for (i, v) in y.iter_mut().enumerate() {
            let mut x = *v;
            if let Some(r) = post.residual {
                x += r[i];
            }
            x = post.act.apply(x);
            *v = post.smooth.map_or(x, |s| s.apply(x));
        }
    }

    /// The posts tested, over a residual `r`.
    fn posts(r: &[f32]) -> [Post<'_>; 5] {
        [
            Post { residual: Some(r), ..Post::NONE },
            Post { residual: Some(r), act: Activation::Relu, smooth: None },
            Post { smooth: Some(Smooth::Gelu), ..Post::NONE },
            Post { residual: Some(r), act: Activation::None, smooth: Some(Smooth::GeluTanh) },
            Post {
                smooth: Some(Smooth::Silu),
                ..Post::act(Activation::Clip { min: -0.5, max: 0.5 })
            },
        ]
    }

    #[test]
    fn fused_gemm_equals_the_unfused_nodes_bit_for_bit() {
        let (mut a, mut b, mut c, mut r) =
            ([0.0f32; BIG], [0.0f32; BIG], [0.0f32; 64], [0.0f32; BIG]);
        let mut packed = [0.0f32; BIG];
        let sizes = [
            (1, 1, 1),
            (1, 37, 9),
            (5, 33, 17),
            (9, 40, 3),
            (17, 7, 40),
            (40, 31, 2),
            (33, 64, 29),
        ];
        for (m, n, k) in sizes {
            fill(&mut a[..m * k], (m + 3 * k) as u32);
            fill(&mut b[..k * n], (n + 5 * k) as u32);
            fill(&mut c[..n], 7);
            fill(&mut r[..m * n], (m * n) as u32);
            let (a, b, r) = (&a[..m * k], &b[..k * n], &r[..m * n]);
            let len = packed_b_len(k, n).unwrap();
            for (ta, tb) in [(false, false), (true, true), (false, true)] {
                pack_b_strips(k, n, b, tb, &mut packed[..len]).unwrap();
                for (alpha, cc) in [(1.0, None), (-0.75, Some(&c[..n]))] {
                    let p = Gemm {
                        m,
                        n,
                        k,
                        trans_a: ta,
                        trans_b: tb,
                        alpha,
                        beta: 2.0,
                        c_strides: [0, 1],
                    };
                    let (mut want, mut exact) = ([0.0f32; BIG], [0.0f32; BIG]);
                    sgemm(&p, a, Weights::Dense(b), cc, &mut want[..m * n], &Post::NONE).unwrap();
                    gemm(&p, a, b, cc, &mut exact[..m * n]).unwrap();
                    for post in posts(r) {
                        let mut w = want;
                        apply_post(&post, &mut w[..m * n]);
                        let mut e = exact;
                        apply_post(&post, &mut e[..m * n]);
                        let mut got = [0.0f32; BIG];
                        sgemm_fused(&p, a, b, cc, &mut got[..m * n], &post).unwrap();
                        assert_eq!(got[..m * n], w[..m * n], "{m}x{n}x{k} {ta} {tb} {post:?}");
                        close(&got[..m * n], &e[..m * n], k);
                        let mut got = [0.0f32; BIG];
                        sgemm_packed_fused(&p, a, &packed[..len], cc, &mut got[..m * n], &post)
                            .unwrap();
                        let mut w = [0.0f32; BIG];
                        sgemm(
                            &p,
                            a,
                            Weights::Strips(&packed[..len]),
                            cc,
                            &mut w[..m * n],
                            &Post::act(Activation::None),
                        )
                        .unwrap();
                        apply_post(&post, &mut w[..m * n]);
                        assert_eq!(got[..m * n], w[..m * n], "packed {m}x{n}x{k} {ta} {tb}");
                    }
                }
            }
        }
        // A residual of the wrong length is refused.
        let p = g(2, 3, 4);
        let post = Post { residual: Some(&[0.0; 5]), ..Post::NONE };
        let r = sgemm_fused(&p, &[0.0; 8], &[0.0; 12], None, &mut [0.0; 6], &post);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn fused_matmul_equals_the_unfused_nodes_bit_for_bit() {
        let (mut a, mut b, mut bias, mut r) =
            ([0.0f32; BIG], [0.0f32; BIG], [0.0f32; 64], [0.0f32; BIG]);
        let mut packed = [0.0f32; BIG];
        for (m, n, k) in
            [(1, 5, 3), (3, 33, 17), (7, 40, 1), (13, 9, 40), (2, 64, 11), (1, 1, 0), (4, 3, 0)]
        {
            fill(&mut a[..6 * m * k], (m + k) as u32);
            fill(&mut b[..k * n], (3 * n + k) as u32);
            fill(&mut bias[..n], 4);
            fill(&mut r[..6 * m * n], 11);
            let len = packed_b_len(k, n).unwrap();
            pack_b_strips(k, n, &b[..k * n], false, &mut packed[..len]).unwrap();
            // A batch [2, 3] of matrices (merged into one product when packed),
            // and one broadcast over axis 0 (batch by batch).
            let mk = (m * k) as isize;
            for sa in [[3 * mk, mk], [0, mk]] {
                let p = MatMul::dense(&[2, 3], &sa, &[0, 0], m, k, n);
                let a_len = if sa[0] == 0 { 3 * m * k } else { 6 * m * k };
                let (a, b, r) = (&a[..a_len], &b[..k * n], &r[..6 * m * n]);
                for bb in [None, Some(&bias[..n])] {
                    for post in posts(r) {
                        let mut want = [0.0f32; BIG];
                        smatmul(&p, a, Weights::Dense(b), bb, &mut want[..6 * m * n], &Post::NONE)
                            .unwrap();
                        apply_post(&post, &mut want[..6 * m * n]);
                        let mut got = [0.0f32; BIG];
                        smatmul_fused(&p, a, b, bb, &mut got[..6 * m * n], &post).unwrap();
                        assert_eq!(got[..6 * m * n], want[..6 * m * n], "{m}x{n}x{k} {post:?}");
                        let mut want = [0.0f32; BIG];
                        smatmul(
                            &p,
                            a,
                            Weights::Strips(&packed[..len]),
                            bb,
                            &mut want[..6 * m * n],
                            &Post::NONE,
                        )
                        .unwrap();
                        apply_post(&post, &mut want[..6 * m * n]);
                        let mut got = [0.0f32; BIG];
                        smatmul_packed_fused(
                            &p,
                            a,
                            &packed[..len],
                            bb,
                            &mut got[..6 * m * n],
                            &post,
                        )
                        .unwrap();
                        assert_eq!(got[..6 * m * n], want[..6 * m * n], "packed {m}x{n}x{k}");
                        // Against the exact kernel, within rounding.
                        let mut exact = [0.0f32; BIG];
                        matmul(&p, a, b, &mut exact[..6 * m * n]).unwrap();
                        if let Some(c) = bb {
                            for (i, v) in exact[..6 * m * n].iter_mut().enumerate() {
                                *v += c[i % n];
                            }
                        }
                        apply_post(&post, &mut exact[..6 * m * n]);
                        close(&got[..6 * m * n], &exact[..6 * m * n], k);
                    }
                }
            }
        }
        // A residual with a transposed output layout is refused.
        let p = MatMul { y_layout: Some((&[2], 4)), ..MatMul::dense(&[2], &[2], &[0], 1, 2, 2) };
        let post = Post { residual: Some(&[0.0; 8]), ..Post::NONE };
        let r = smatmul_fused(&p, &[0.0; 4], &[0.0; 4], None, &mut [0.0; 8], &post);
        assert_eq!(r, Err(Error::InvalidParams));
    }
}
