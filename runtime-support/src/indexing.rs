//! Indexing and data-dependent ops: ScatterElements (and the deprecated
//! Scatter), ScatterND, TensorScatter, GatherND, Einsum, CumProd, BitCast,
//! ReverseSequence, Det, NonZero, Compress and NonMaxSuppression.
//!
//! Indices read from tensors are normalised once (negative values count from
//! the end of their axis) and refused with [`Error::IndexOutOfBounds`] when
//! still outside it. Ops whose output length depends on the data (NonZero,
//! Compress, NonMaxSuppression) are planned with the length the model
//! declares; the kernels count what the data gives and return
//! [`Error::ShapeMismatch`] when it differs, before writing anything past it.

use crate::extra::AsIndex;
use crate::layout::MoveTo;
use crate::num::{Float, Num};
use crate::shape::numel;
use crate::{Error, Result, bf16, ensure, f16};

/// Normalises an index read from data against an axis of length `n`.
#[inline]
fn index<I: AsIndex>(i: I, n: usize) -> Result<usize> {
    let n64 = i64::try_from(n).map_err(|_| Error::Overflow)?;
    let v = i.as_index();
    let v = if v < 0 { v + n64 } else { v };
    ensure((0..n64).contains(&v), Error::IndexOutOfBounds)?;
    Ok(v as usize)
}

fn product(dims: &[usize]) -> Result<usize> {
    numel(dims)
}

// ---------------------------------------------------------------------------
// Scatter reductions

/// How a scatter combines an update with the element already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The update replaces the element.
    None,
    /// Sum (logical or for booleans).
    Add,
    /// Product (logical and for booleans).
    Mul,
    /// The larger (NaN if either is NaN).
    Max,
    /// The smaller (NaN if either is NaN).
    Min,
}

/// An element a scatter can combine with an update under a [`Reduction`].
pub trait Combine: Copy {
    /// `self` combined with the update `u`.
    fn combine(self, u: Self, r: Reduction) -> Self;
}

macro_rules! combine_num {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            #[inline]
            fn combine(self, u: Self, r: Reduction) -> Self {
                match r {
                    Reduction::None => u,
                    Reduction::Add => Num::add(self, u),
                    Reduction::Mul => Num::mul(self, u),
                    Reduction::Max => self.max_of(u),
                    Reduction::Min => self.min_of(u),
                }
            }
        }
    )*};
}

combine_num!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64);

macro_rules! combine_half {
    ($($t:ty),*) => {$(
        impl Combine for $t {
            #[inline]
            fn combine(self, u: Self, r: Reduction) -> Self {
                match r {
                    Reduction::None => u,
                    _ => <$t>::from_f32(self.to_f32().combine(u.to_f32(), r)),
                }
            }
        }
    )*};
}

combine_half!(f16, bf16);

impl Combine for bool {
    #[inline]
    fn combine(self, u: Self, r: Reduction) -> Self {
        match r {
            Reduction::None => u,
            Reduction::Add | Reduction::Max => self | u,
            Reduction::Mul | Reduction::Min => self & u,
        }
    }
}

fn copy_into<X: MoveTo<Y>, Y>(x: &[X], y: &mut [Y]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (d, &s) in y.iter_mut().zip(x) {
        *d = s.move_to();
    }
    Ok(())
}

/// ONNX `ScatterElements` (and `Scatter`): `y` is `data` (of `shape`) with,
/// for every position `p` of `indices` (of `index_shape`, same rank),
/// `y[p with p[axis] = indices[p]]` combined with `updates[p]`, in order.
#[allow(clippy::too_many_arguments)]
pub fn scatter_elements<D: MoveTo<Y>, I: AsIndex, U: MoveTo<Y>, Y: Combine>(
    shape: &[usize],
    index_shape: &[usize],
    axis: usize,
    reduction: Reduction,
    data: &[D],
    indices: &[I],
    updates: &[U],
    y: &mut [Y],
) -> Result {
    let rank = shape.len();
    ensure(index_shape.len() == rank && axis < rank, Error::InvalidParams)?;
    ensure(rank <= crate::shape::MAX_RANK, Error::RankTooLarge)?;
    ensure(
        shape.iter().zip(index_shape).enumerate().all(|(d, (&n, &i))| d == axis || i <= n),
        Error::InvalidParams,
    )?;
    ensure(data.len() == product(shape)?, Error::ShapeMismatch)?;
    let n = product(index_shape)?;
    ensure(indices.len() == n && updates.len() == n, Error::ShapeMismatch)?;
    copy_into(data, y)?;
    let mut strides = [0usize; crate::shape::MAX_RANK];
    let mut s = 1usize;
    for d in (0..rank).rev() {
        strides[d] = s;
        s *= shape[d];
    }
    let mut at = [0usize; crate::shape::MAX_RANK];
    for k in 0..n {
        let mut off = 0;
        for d in 0..rank {
            if d != axis {
                off += at[d] * strides[d];
            }
        }
        off += index(indices[k], shape[axis])? * strides[axis];
        y[off] = y[off].combine(updates[k].move_to(), reduction);
        crate::shape::next_index(&mut at, index_shape);
    }
    Ok(())
}

/// ONNX `ScatterND`: `indices` holds `count` tuples of `k` indices into the
/// first `k` axes of `shape`; each selects a slice of the remaining axes,
/// which is combined with the matching slice of `updates`, in order.
#[allow(clippy::too_many_arguments)]
pub fn scatter_nd<D: MoveTo<Y>, I: AsIndex, U: MoveTo<Y>, Y: Combine>(
    shape: &[usize],
    k: usize,
    count: usize,
    reduction: Reduction,
    data: &[D],
    indices: &[I],
    updates: &[U],
    y: &mut [Y],
) -> Result {
    ensure(k <= shape.len(), Error::InvalidParams)?;
    ensure(data.len() == product(shape)?, Error::ShapeMismatch)?;
    let slice = product(&shape[k..])?;
    ensure(indices.len() == count.checked_mul(k).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(
        updates.len() == count.checked_mul(slice).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    copy_into(data, y)?;
    for t in 0..count {
        let mut off = 0usize;
        for (j, &d) in shape[..k].iter().enumerate() {
            off = off * d + index(indices[t * k + j], d)?;
        }
        let base = off * slice;
        for (dst, &u) in y[base..base + slice].iter_mut().zip(&updates[t * slice..]) {
            *dst = dst.combine(u.move_to(), reduction);
        }
    }
    Ok(())
}

/// ONNX `TensorScatter`: `cache` (of `shape`) with, for every position
/// before `axis`, the `seq` rows of `update` along `axis` written from row
/// `write_indices[batch]` (batch = the first axis; 0 when absent), wrapping
/// around the axis when `circular`.
#[allow(clippy::too_many_arguments)]
pub fn tensor_scatter<T: Copy, I: AsIndex>(
    shape: &[usize],
    axis: usize,
    seq: usize,
    circular: bool,
    cache: &[T],
    update: &[T],
    write_indices: Option<&[I]>,
    y: &mut [T],
) -> Result {
    ensure(axis >= 1 && axis < shape.len(), Error::InvalidParams)?;
    let max = shape[axis];
    ensure(seq <= max, Error::InvalidParams)?;
    let (outer, inner) = (product(&shape[..axis])?, product(&shape[axis + 1..])?);
    let batch = shape[0];
    ensure(cache.len() == product(shape)?, Error::ShapeMismatch)?;
    ensure(update.len() == product(&[outer, seq, inner])?, Error::ShapeMismatch)?;
    if let Some(w) = write_indices {
        ensure(w.len() == batch, Error::ShapeMismatch)?;
    }
    copy_into(cache, y)?;
    let per_batch = outer.checked_div(batch).unwrap_or(0);
    for o in 0..outer {
        let b = o / per_batch.max(1);
        let start = match write_indices {
            Some(w) => w[b].as_index(),
            None => 0,
        };
        for s in 0..seq {
            let pos = start.checked_add(s as i64).ok_or(Error::Overflow)?;
            let pos = if circular { pos.rem_euclid(max.max(1) as i64) } else { pos };
            ensure(pos >= 0 && (pos as usize) < max, Error::IndexOutOfBounds)?;
            let dst = (o * max + pos as usize) * inner;
            let src = (o * seq + s) * inner;
            y[dst..dst + inner].copy_from_slice(&update[src..src + inner]);
        }
    }
    Ok(())
}

/// ONNX `GatherND`: `data` of `shape`, the first `batch_dims` axes shared
/// with `indices`, whose last axis holds tuples of `k` indices into the next
/// `k` axes; `y` holds the selected slices of the remaining axes, batch by
/// batch and tuple by tuple.
pub fn gather_nd<X: MoveTo<Y>, I: AsIndex, Y>(
    shape: &[usize],
    batch_dims: usize,
    k: usize,
    data: &[X],
    indices: &[I],
    y: &mut [Y],
) -> Result {
    ensure(k >= 1 && batch_dims + k <= shape.len(), Error::InvalidParams)?;
    ensure(data.len() == product(shape)?, Error::ShapeMismatch)?;
    let batch = product(&shape[..batch_dims])?;
    let per_batch = product(&shape[batch_dims..])?;
    let slice = product(&shape[batch_dims + k..])?;
    let tuples = indices.len() / k;
    ensure(tuples * k == indices.len(), Error::ShapeMismatch)?;
    ensure(y.len() == tuples.checked_mul(slice).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    let per = tuples.checked_div(batch).unwrap_or(0);
    ensure(per * batch == tuples, Error::ShapeMismatch)?;
    for t in 0..tuples {
        let b = t / per.max(1);
        let mut off = 0usize;
        for (j, &d) in shape[batch_dims..batch_dims + k].iter().enumerate() {
            off = off * d + index(indices[t * k + j], d)?;
        }
        let src = b * per_batch + off * slice;
        for (dst, &s) in y[t * slice..(t + 1) * slice].iter_mut().zip(&data[src..src + slice]) {
            *dst = s.move_to();
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Einsum

/// An element whose sums of products are accumulated in a wider type: `f64`
/// for the floats, `f32` for the 16-bit floats, the type itself for
/// integers (wrapping).
pub trait Widen: Copy {
    /// The accumulator type.
    type W: Num;
    /// The element as an accumulator.
    fn widen(self) -> Self::W;
    /// The accumulator rounded back to the element type.
    fn narrow(w: Self::W) -> Self;
}

macro_rules! widen_self {
    ($($t:ty),*) => {$(
        impl Widen for $t {
            type W = $t;
            #[inline]
            fn widen(self) -> $t { self }
            #[inline]
            fn narrow(w: $t) -> $t { w }
        }
    )*};
}

widen_self!(f64, i8, i16, i32, i64, u8, u16, u32, u64);

impl Widen for f32 {
    type W = f64;
    #[inline]
    fn widen(self) -> f64 {
        f64::from(self)
    }
    #[inline]
    fn narrow(w: f64) -> f32 {
        w as f32
    }
}

macro_rules! widen_half {
    ($($t:ty),*) => {$(
        impl Widen for $t {
            type W = f32;
            #[inline]
            fn widen(self) -> f32 { self.to_f32() }
            #[inline]
            fn narrow(w: f32) -> $t { <$t>::from_f32(w) }
        }
    )*};
}

widen_half!(f16, bf16);

/// The most labels (distinct letters) an einsum plan can have.
pub const MAX_LABELS: usize = 64;
/// The most operands an einsum plan can have.
pub const MAX_OPERANDS: usize = 16;

/// ONNX `Einsum`, planned: the output walks `out_dims`; for every output
/// element the products of the operands are summed over `sum_dims`.
/// `strides[j]` gives operand `j`'s stride for each label of `out_dims`
/// followed by each of `sum_dims` (a label the operand lacks has stride 0,
/// a label it repeats has the sum of its strides: a diagonal).
pub fn einsum<T: Widen>(
    out_dims: &[usize],
    sum_dims: &[usize],
    operands: &[&[T]],
    strides: &[&[usize]],
    y: &mut [T],
) -> Result {
    let labels = out_dims.len() + sum_dims.len();
    ensure(labels <= MAX_LABELS, Error::RankTooLarge)?;
    ensure(
        operands.len() == strides.len() && operands.len() <= MAX_OPERANDS,
        Error::InvalidParams,
    )?;
    let mut dims = [0usize; MAX_LABELS];
    dims[..out_dims.len()].copy_from_slice(out_dims);
    dims[out_dims.len()..labels].copy_from_slice(sum_dims);
    let dims = &dims[..labels];
    ensure(y.len() == product(out_dims)?, Error::ShapeMismatch)?;
    let total = product(dims)?;
    for (x, s) in operands.iter().zip(strides) {
        ensure(s.len() == labels, Error::InvalidParams)?;
        if total > 0 {
            let mut last = 0usize;
            for (&d, &st) in dims.iter().zip(s.iter()) {
                last = st
                    .checked_mul(d - 1)
                    .and_then(|v| v.checked_add(last))
                    .ok_or(Error::Overflow)?;
            }
            ensure(last < x.len(), Error::ShapeMismatch)?;
        }
    }
    let inner = product(sum_dims)?;
    let o_rank = out_dims.len();
    let mut at = [0usize; MAX_LABELS];
    let mut offs = [0usize; MAX_OPERANDS];
    for out in y.iter_mut() {
        let mut acc = <T::W as Num>::ZERO;
        for _ in 0..inner {
            let mut p = <T::W as Num>::ONE;
            for (x, &o) in operands.iter().zip(&offs) {
                p = p.mul(x[o].widen());
            }
            acc = acc.add(p);
            step(dims, &mut at, strides, &mut offs, o_rank);
        }
        *out = T::narrow(acc);
        if o_rank > 0 {
            step(&dims[..o_rank], &mut at, strides, &mut offs, 0);
        }
    }
    Ok(())
}

/// Advances the multi-index `at` over `dims[from..]` (an odometer; the
/// positions before `from` are left alone), keeping the operand offsets in
/// step; when it wraps, the offsets are back where they started.
fn step(
    dims: &[usize],
    at: &mut [usize; MAX_LABELS],
    strides: &[&[usize]],
    offs: &mut [usize; MAX_OPERANDS],
    from: usize,
) {
    for d in (from..dims.len()).rev() {
        at[d] += 1;
        if at[d] < dims[d] {
            for (o, s) in offs.iter_mut().zip(strides) {
                *o += s[d];
            }
            return;
        }
        at[d] = 0;
        for (o, s) in offs.iter_mut().zip(strides) {
            *o -= s[d] * (dims[d] - 1);
        }
    }
}

// ---------------------------------------------------------------------------
// CumProd

/// ONNX `CumProd` along `axis` (in `[-rank, rank)`) of `x` (of `dims`):
/// running products, `exclusive` starting from 1, `reverse` from the end.
pub fn cumprod<T: Num>(
    dims: &[usize],
    axis: i64,
    exclusive: bool,
    reverse: bool,
    x: &[T],
    y: &mut [T],
) -> Result {
    let rank = dims.len().max(1);
    let r = i64::try_from(rank).map_err(|_| Error::Overflow)?;
    let a = if axis < 0 { axis + r } else { axis };
    ensure((0..r).contains(&a), Error::InvalidParams)?;
    let a = a as usize;
    let n = product(dims)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    if dims.is_empty() {
        y[0] = if exclusive { T::ONE } else { x[0] };
        return Ok(());
    }
    let (outer, len, inner) = (product(&dims[..a])?, dims[a], product(&dims[a + 1..])?);
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = T::ONE;
            for s in 0..len {
                let t = if reverse { len - 1 - s } else { s };
                let at = (o * len + t) * inner + i;
                if exclusive {
                    y[at] = acc;
                    acc = acc.mul(x[at]);
                } else {
                    acc = acc.mul(x[at]);
                    y[at] = acc;
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// BitCast

/// An element's bit pattern, for BitCast between types of one width.
pub trait Bits: Copy {
    /// The bits, zero-extended.
    fn raw(self) -> u64;
    /// The element with the low bits of `r`.
    fn from_raw(r: u64) -> Self;
}

macro_rules! bits_int {
    ($($t:ty => $u:ty),*) => {$(
        impl Bits for $t {
            #[inline]
            fn raw(self) -> u64 { u64::from(self as $u) }
            #[inline]
            fn from_raw(r: u64) -> Self { r as $u as $t }
        }
    )*};
}

bits_int!(i8 => u8, i16 => u16, i32 => u32, i64 => u64, u8 => u8, u16 => u16, u32 => u32,
    u64 => u64);

impl Bits for f32 {
    fn raw(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn from_raw(r: u64) -> Self {
        f32::from_bits(r as u32)
    }
}

impl Bits for f64 {
    fn raw(self) -> u64 {
        self.to_bits()
    }
    fn from_raw(r: u64) -> Self {
        f64::from_bits(r)
    }
}

impl Bits for f16 {
    fn raw(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn from_raw(r: u64) -> Self {
        f16::from_bits(r as u16)
    }
}

impl Bits for bf16 {
    fn raw(self) -> u64 {
        u64::from(self.to_bits())
    }
    fn from_raw(r: u64) -> Self {
        bf16::from_bits(r as u16)
    }
}

impl Bits for bool {
    fn raw(self) -> u64 {
        u64::from(self)
    }
    fn from_raw(r: u64) -> Self {
        r as u8 != 0
    }
}

/// ONNX `BitCast`: every element of `y` has the bits of the element of `x`
/// (the generator checks that both types have the same width).
pub fn bitcast<X: Bits, Y: Bits>(x: &[X], y: &mut [Y]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (d, &s) in y.iter_mut().zip(x) {
        *d = Y::from_raw(s.raw());
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ReverseSequence

/// ONNX `ReverseSequence`: for every batch `b` (along `batch_axis` of
/// `dims`), the first `lens[b]` steps along `time_axis` are reversed and the
/// others copied.
pub fn reverse_sequence<X: MoveTo<Y>, I: AsIndex, Y>(
    dims: &[usize],
    batch_axis: usize,
    time_axis: usize,
    lens: &[I],
    x: &[X],
    y: &mut [Y],
) -> Result {
    let rank = dims.len();
    ensure(
        (2..=crate::shape::MAX_RANK).contains(&rank) && batch_axis < rank && time_axis < rank,
        Error::InvalidParams,
    )?;
    ensure(batch_axis != time_axis, Error::InvalidParams)?;
    let n = product(dims)?;
    ensure(x.len() == n && y.len() == n && lens.len() == dims[batch_axis], Error::ShapeMismatch)?;
    for &l in lens {
        let l = l.as_index();
        ensure(l >= 0 && l as u64 <= dims[time_axis] as u64, Error::IndexOutOfBounds)?;
    }
    let time_stride = product(&dims[time_axis + 1..])?;
    let mut at = [0usize; crate::shape::MAX_RANK];
    for (o, dst) in y.iter_mut().enumerate() {
        let (b, t) = (at[batch_axis], at[time_axis]);
        let l = lens[b].as_index() as usize;
        let src = if t < l { o - t * time_stride + (l - 1 - t) * time_stride } else { o };
        *dst = x[src].move_to();
        crate::shape::next_index(&mut at, dims);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Det

/// ONNX `Det`: the determinant of each of the `batch` matrices of `n` by `n`
/// in `x`, by Gaussian elimination with partial pivoting in `scratch` (at
/// least `n * n` elements).
pub fn det<T: Float>(batch: usize, n: usize, x: &[T], y: &mut [T], scratch: &mut [T]) -> Result {
    let nn = n.checked_mul(n).ok_or(Error::Overflow)?;
    ensure(x.len() == batch.checked_mul(nn).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(y.len() == batch && scratch.len() >= nn, Error::ShapeMismatch)?;
    let a = &mut scratch[..nn];
    for (b, out) in y.iter_mut().enumerate() {
        a.copy_from_slice(&x[b * nn..(b + 1) * nn]);
        let mut d = T::ONE;
        for c in 0..n {
            let mut p = c;
            for r in c + 1..n {
                if a[r * n + c].abs() > a[p * n + c].abs() {
                    p = r;
                }
            }
            if p != c {
                for k in 0..n {
                    a.swap(c * n + k, p * n + k);
                }
                d = d.neg();
            }
            let piv = a[c * n + c];
            d = d.mul(piv);
            if piv == T::ZERO {
                break;
            }
            for r in c + 1..n {
                let f = a[r * n + c].div(piv).unwrap_or(T::ZERO);
                for k in c..n {
                    a[r * n + k] = a[r * n + k].sub(f.mul(a[c * n + k]));
                }
            }
        }
        *out = d;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// NonZero and Compress

/// An element that is zero or not (false for booleans; NaN is nonzero).
pub trait IsZero: Copy {
    /// Whether the element is zero.
    fn is_zero(self) -> bool;
}

macro_rules! is_zero {
    ($($t:ty),*) => {$(
        impl IsZero for $t {
            #[inline]
            #[allow(clippy::float_cmp)]
            fn is_zero(self) -> bool { self == <$t>::default() }
        }
    )*};
}

is_zero!(f32, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool, f16, bf16);

/// ONNX `NonZero`: the indices (one row per axis of `dims`, `count`
/// columns) of the nonzero elements of `x`, in row-major order. The data
/// must hold exactly `count` nonzero elements.
pub fn non_zero<T: IsZero>(dims: &[usize], count: usize, x: &[T], y: &mut [i64]) -> Result {
    let rank = dims.len();
    ensure(rank <= crate::shape::MAX_RANK, Error::RankTooLarge)?;
    ensure(x.len() == product(dims)?, Error::ShapeMismatch)?;
    ensure(y.len() == rank.checked_mul(count).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(x.iter().filter(|v| !v.is_zero()).count() == count, Error::ShapeMismatch)?;
    let mut at = [0usize; crate::shape::MAX_RANK];
    let mut k = 0;
    for &v in x {
        if !v.is_zero() {
            for d in 0..rank {
                y[d * count + k] = at[d] as i64;
            }
            k += 1;
        }
        crate::shape::next_index(&mut at, dims);
    }
    Ok(())
}

/// ONNX `Compress`: `x` seen as `[outer, len, inner]`; `y` keeps the
/// positions `j` along the middle axis where `condition[j]` is true (missing
/// entries are false), which must be exactly `count` of them.
#[allow(clippy::too_many_arguments)]
pub fn compress<X: MoveTo<Y>, C: crate::num::Flag, Y>(
    outer: usize,
    len: usize,
    inner: usize,
    count: usize,
    condition: &[C],
    x: &[X],
    y: &mut [Y],
) -> Result {
    ensure(condition.len() <= len, Error::ShapeMismatch)?;
    ensure(x.len() == product(&[outer, len, inner])?, Error::ShapeMismatch)?;
    ensure(y.len() == product(&[outer, count, inner])?, Error::ShapeMismatch)?;
    ensure(condition.iter().filter(|c| c.get()).count() == count, Error::ShapeMismatch)?;
    let mut at = 0;
    for o in 0..outer {
        for (j, c) in condition.iter().enumerate() {
            if c.get() {
                let src = (o * len + j) * inner;
                for (d, &s) in y[at..at + inner].iter_mut().zip(&x[src..src + inner]) {
                    *d = s.move_to();
                }
                at += inner;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// NonMaxSuppression

/// The first element of an optional scalar input, or `default` when it is
/// absent or empty.
pub fn first_or<T: Copy>(v: Option<&[T]>, default: T) -> T {
    v.and_then(|v| v.first().copied()).unwrap_or(default)
}

/// The first element of an optional scalar input, if there is one.
pub fn first_opt<T: Copy>(v: Option<&[T]>) -> Option<T> {
    v.and_then(|v| v.first().copied())
}

/// The shape of a NonMaxSuppression call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nms {
    pub batches: usize,
    pub classes: usize,
    pub boxes: usize,
    /// Boxes are `[x_center, y_center, width, height]` instead of
    /// `[y1, x1, y2, x2]`.
    pub center_point_box: bool,
}

fn corners(b: &[f32], center: bool) -> [f32; 4] {
    if center {
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[0] - hw, b[0] + hw, b[1] - hh, b[1] + hh]
    } else {
        let (x0, x1) = if b[1] >= b[3] { (b[3], b[1]) } else { (b[1], b[3]) };
        let (y0, y1) = if b[0] >= b[2] { (b[2], b[0]) } else { (b[0], b[2]) };
        [x0, x1, y0, y1]
    }
}

/// Whether box `a` suppresses box `b`: their intersection over union is
/// above `iou`.
fn suppresses(a: &[f32], b: &[f32], center: bool, iou: f32) -> bool {
    let [ax0, ax1, ay0, ay1] = corners(a, center);
    let [bx0, bx1, by0, by1] = corners(b, center);
    let (ix0, ix1) = (ax0.max(bx0), ax1.min(bx1));
    if ix1 <= ix0 {
        return false;
    }
    let (iy0, iy1) = (ay0.max(by0), ay1.min(by1));
    if iy1 <= iy0 {
        return false;
    }
    let inter = (ix1 - ix0) * (iy1 - iy0);
    if inter <= 0.0 {
        return false;
    }
    let (area_a, area_b) = ((ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0));
    let union = area_a + area_b - inter;
    if area_a <= 0.0 || area_b <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > iou
}

/// ONNX `NonMaxSuppression` on `f32` boxes `[batches, boxes, 4]` and scores
/// `[batches, classes, boxes]`: for every batch and class, boxes by
/// decreasing score (ties by index) above `score_threshold` (when given) are
/// kept unless a kept box of the class overlaps them by more than `iou`, at
/// most `max_per_class` of them. `y` receives `count` rows of `[batch,
/// class, box]`; the data must select exactly `count` boxes.
#[allow(clippy::too_many_arguments)]
pub fn non_max_suppression(
    p: Nms,
    boxes: &[f32],
    scores: &[f32],
    max_per_class: i64,
    iou: f32,
    score_threshold: Option<f32>,
    count: usize,
    y: &mut [i64],
) -> Result {
    ensure(boxes.len() == product(&[p.batches, p.boxes, 4])?, Error::ShapeMismatch)?;
    ensure(scores.len() == product(&[p.batches, p.classes, p.boxes])?, Error::ShapeMismatch)?;
    ensure(y.len() == count.checked_mul(3).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    let max = usize::try_from(max_per_class.max(0)).unwrap_or(usize::MAX);
    let mut rows = 0usize;
    for b in 0..p.batches {
        let bx = &boxes[b * p.boxes * 4..(b + 1) * p.boxes * 4];
        for c in 0..p.classes {
            let sc = &scores[(b * p.classes + c) * p.boxes..(b * p.classes + c + 1) * p.boxes];
            let first = rows;
            let mut prev: Option<(f32, usize)> = None;
            while rows - first < max {
                // The next candidate in (score descending, index ascending) order.
                let mut best: Option<(f32, usize)> = None;
                for (i, &s) in sc.iter().enumerate() {
                    if s.is_nan() || score_threshold.is_some_and(|t| s <= t) {
                        continue;
                    }
                    let after = match prev {
                        None => true,
                        Some((ps, pi)) => s < ps || (s == ps && i > pi),
                    };
                    if after && best.is_none_or(|(bs, _)| s > bs) {
                        best = Some((s, i));
                    }
                }
                let Some((s, i)) = best else { break };
                prev = Some((s, i));
                let this = &bx[i * 4..i * 4 + 4];
                let kept = (first..rows).all(|r| {
                    let j = y[r * 3 + 2] as usize;
                    !suppresses(this, &bx[j * 4..j * 4 + 4], p.center_point_box, iou)
                });
                if kept {
                    ensure(rows < count, Error::ShapeMismatch)?;
                    y[rows * 3] = b as i64;
                    y[rows * 3 + 1] = c as i64;
                    y[rows * 3 + 2] = i as i64;
                    rows += 1;
                }
            }
        }
    }
    ensure(rows == count, Error::ShapeMismatch)
}

// ---------------------------------------------------------------------------
// Unique

/// A tensor seen as `[outer, len, inner]`: `len` slices `x[:, i, :]` along
/// the middle axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slices {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

/// A total order for unique: NaN equals NaN and sorts after numbers.
fn order<T: PartialOrd>(a: T, b: T) -> core::cmp::Ordering {
    use core::cmp::Ordering::{Equal, Greater, Less};
    match a.partial_cmp(&b) {
        Some(o) => o,
        None => match (a.partial_cmp(&a).is_none(), b.partial_cmp(&b).is_none()) {
            (true, false) => Greater,
            (false, true) => Less,
            _ => Equal,
        },
    }
}

fn cmp_slices<T: PartialOrd + Copy>(s: Slices, x: &[T], a: usize, b: usize) -> core::cmp::Ordering {
    for o in 0..s.outer {
        let (pa, pb) = ((o * s.len + a) * s.inner, (o * s.len + b) * s.inner);
        for n in 0..s.inner {
            let c = order(x[pa + n], x[pb + n]);
            if c.is_ne() {
                return c;
            }
        }
    }
    core::cmp::Ordering::Equal
}

/// ONNX `Unique` over the slices of `x`: `y` gets the `count` distinct
/// slices (sorted ascending, lexicographically, when `sorted`; else in order
/// of first occurrence), `firsts` (at least `count` long) and `indices` the
/// index of each one's first occurrence, `inverse` for every slice the
/// position of its value in `y`, `counts` how often each occurs. The data
/// must hold exactly `count` distinct slices.
#[allow(clippy::too_many_arguments)]
pub fn unique<X: MoveTo<Y> + PartialOrd, Y>(
    s: Slices,
    sorted: bool,
    count: usize,
    x: &[X],
    y: &mut [Y],
    firsts: &mut [i64],
    indices: Option<&mut [i64]>,
    inverse: Option<&mut [i64]>,
    counts: Option<&mut [i64]>,
) -> Result {
    let found = unique_bounded(s, sorted, count, x, y, firsts, indices, inverse, counts)?;
    ensure(found == count, Error::ShapeMismatch)
}

/// [`unique`] when the number of distinct slices is known only at run time:
/// `count` is the capacity (`y` holds `[outer, count, inner]` elements,
/// `indices` and `counts` `count`), and the result is the number `n` of
/// distinct slices found. `y` then starts with the `[outer, n, inner]`
/// tensor of distinct slices, packed, and `indices` and `counts` with their
/// `n` entries; the rest of each buffer is zeroed by nobody and means nothing.
#[allow(clippy::too_many_arguments)]
pub fn unique_bounded<X: MoveTo<Y> + PartialOrd, Y>(
    s: Slices,
    sorted: bool,
    count: usize,
    x: &[X],
    y: &mut [Y],
    firsts: &mut [i64],
    indices: Option<&mut [i64]>,
    inverse: Option<&mut [i64]>,
    counts: Option<&mut [i64]>,
) -> Result<usize> {
    ensure(x.len() == product(&[s.outer, s.len, s.inner])?, Error::ShapeMismatch)?;
    ensure(y.len() == product(&[s.outer, count, s.inner])?, Error::ShapeMismatch)?;
    ensure(firsts.len() >= count, Error::ShapeMismatch)?;
    let mut found = 0usize;
    for i in 0..s.len {
        if (0..i).all(|j| cmp_slices(s, x, j, i).is_ne()) {
            ensure(found < count, Error::ShapeMismatch)?;
            firsts[found] = i as i64;
            found += 1;
        }
    }
    let firsts = &mut firsts[..found];
    if sorted {
        for p in 1..found {
            let mut q = p;
            while q > 0 && cmp_slices(s, x, firsts[q - 1] as usize, firsts[q] as usize).is_gt() {
                firsts.swap(q - 1, q);
                q -= 1;
            }
        }
    }
    for o in 0..s.outer {
        for (p, &f) in firsts.iter().enumerate() {
            let (src, dst) = ((o * s.len + f as usize) * s.inner, (o * found + p) * s.inner);
            for n in 0..s.inner {
                y[dst + n] = x[src + n].move_to();
            }
        }
    }
    if let Some(ix) = indices {
        ensure(ix.len() == count, Error::ShapeMismatch)?;
        ix[..found].copy_from_slice(firsts);
    }
    let mut counts = counts;
    if let Some(c) = counts.as_deref_mut() {
        ensure(c.len() == count, Error::ShapeMismatch)?;
        c.fill(0);
    }
    let mut inverse = inverse;
    if let Some(inv) = inverse.as_deref() {
        ensure(inv.len() == s.len, Error::ShapeMismatch)?;
    }
    for j in 0..s.len {
        let p = firsts
            .iter()
            .position(|&f| cmp_slices(s, x, f as usize, j).is_eq())
            .ok_or(Error::InvalidParams)?;
        if let Some(inv) = inverse.as_deref_mut() {
            inv[j] = p as i64;
        }
        if let Some(c) = counts.as_deref_mut() {
            c[p] += 1;
        }
    }
    Ok(found)
}

/// The position of an ONNX `SequenceInsert` into a sequence of `len`
/// elements, read from `p` at run time: negative counts from the back; it
/// must lie in `-len..=len`.
pub fn insert_position<P: Copy + Into<i64>>(p: &[P], len: usize) -> Result<usize> {
    let p: i64 = p.first().copied().ok_or(Error::ShapeMismatch)?.into();
    let n = i64::try_from(len).map_err(|_| Error::Overflow)?;
    let q = if p < 0 { p + n } else { p };
    ensure((0..=n).contains(&q), Error::InvalidParams)?;
    usize::try_from(q).map_err(|_| Error::InvalidParams)
}

/// ONNX `SplitToSequence` with sizes known only at run time: piece `j` of
/// `x` (seen as `[outer, len, inner]`) holds `split[j]` slices. Each output
/// has room for all `len` slices; it gets its piece packed at the front,
/// and `lengths[j]` the piece's length. The sizes must be non-negative and
/// add up to `len`.
pub fn split_bounded<S: Copy + Into<i64>, T: Copy>(
    s: Slices,
    split: &[S],
    x: &[T],
    outputs: &mut [&mut [T]],
    lengths: &mut [usize],
) -> Result {
    ensure(x.len() == product(&[s.outer, s.len, s.inner])?, Error::ShapeMismatch)?;
    ensure(split.len() == outputs.len() && split.len() == lengths.len(), Error::ShapeMismatch)?;
    let mut start = 0usize;
    for (j, &n) in split.iter().enumerate() {
        let n = usize::try_from(n.into()).map_err(|_| Error::InvalidParams)?;
        ensure(n <= s.len - start, Error::InvalidParams)?;
        let y = &mut *outputs[j];
        ensure(y.len() == x.len(), Error::ShapeMismatch)?;
        for o in 0..s.outer {
            let src = (o * s.len + start) * s.inner;
            let dst = o * n * s.inner;
            y[dst..dst + n * s.inner].copy_from_slice(&x[src..src + n * s.inner]);
        }
        lengths[j] = n;
        start += n;
    }
    ensure(start == s.len, Error::InvalidParams)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scatter_elements_combines_in_order() {
        // data [1, 4] zeros; indices [[1, 3, 1]] on axis 1 with add.
        let mut y = [0f32; 4];
        let r = scatter_elements(
            &[1, 4],
            &[1, 3],
            1,
            Reduction::Add,
            &[1.0f32, 2.0, 3.0, 4.0],
            &[1i64, 3, -3],
            &[10.0f32, 20.0, 30.0],
            &mut y,
        );
        assert_eq!(r, Ok(()));
        assert_eq!(y, [1.0, 42.0, 3.0, 24.0]);
        // More indices along the axis than the axis is long.
        let r = scatter_elements(
            &[2],
            &[3],
            0,
            Reduction::Max,
            &[1i32, 2],
            &[0i64, 0, 1],
            &[5i32, 7, 0],
            &mut [0i32; 0],
        );
        assert_eq!(r, Err(Error::ShapeMismatch));
        let mut z = [0i32; 2];
        let r = scatter_elements(
            &[2],
            &[3],
            0,
            Reduction::Max,
            &[1i32, 2],
            &[0i64, 0, 1],
            &[5i32, 7, 0],
            &mut z,
        );
        assert_eq!((r, z), (Ok(()), [7, 2]));
        let r = scatter_elements(
            &[1, 4],
            &[1, 1],
            1,
            Reduction::None,
            &[1.0f32, 2.0, 3.0, 4.0],
            &[4i64],
            &[1.0f32],
            &mut y,
        );
        assert_eq!(r, Err(Error::IndexOutOfBounds));
    }

    #[test]
    fn scatter_nd_writes_slices() {
        let mut y = [0i32; 6];
        let r = scatter_nd(
            &[3, 2],
            1,
            2,
            Reduction::Mul,
            &[1i32, 2, 3, 4, 5, 6],
            &[2i64, 2],
            &[10i32, 10, 2, 3],
            &mut y,
        );
        assert_eq!(r, Ok(()));
        assert_eq!(y, [1, 2, 3, 4, 100, 180]);
    }

    #[test]
    fn tensor_scatter_wraps_when_circular() {
        // cache [1, 3, 1], update [1, 2, 1] written at row 2.
        let mut y = [0i64; 3];
        let r = tensor_scatter(&[1, 3, 1], 1, 2, true, &[1, 2, 3], &[8, 9], Some(&[2i64]), &mut y);
        assert_eq!((r, y), (Ok(()), [9, 2, 8]));
        let r = tensor_scatter(&[1, 3, 1], 1, 2, false, &[1, 2, 3], &[8, 9], Some(&[2i64]), &mut y);
        assert_eq!(r, Err(Error::IndexOutOfBounds));
    }

    #[test]
    fn gather_nd_with_batch_dims() {
        // data [2, 2, 2], batch_dims 1, indices [[1], [0]].
        let mut y = [0i32; 4];
        let r = gather_nd(&[2, 2, 2], 1, 1, &[0i32, 1, 2, 3, 4, 5, 6, 7], &[1i64, 0], &mut y);
        assert_eq!((r, y), (Ok(()), [2, 3, 4, 5]));
    }

    #[test]
    fn einsum_matmul_and_trace() {
        // ij,jk->ik with [2, 2] operands: out labels i k, sum label j.
        let a = [1.0f32, 2.0, 3.0, 4.0];
        let b = [5.0f32, 6.0, 7.0, 8.0];
        let mut y = [0f32; 4];
        let r = einsum(&[2, 2], &[2], &[&a, &b], &[&[2, 0, 1], &[0, 1, 2]], &mut y);
        assert_eq!((r, y), (Ok(()), [19.0, 22.0, 43.0, 50.0]));
        // ii-> (trace): no out labels, one sum label with stride 3.
        let mut t = [0f32; 1];
        let r = einsum(&[], &[2], &[&a], &[&[3]], &mut t);
        assert_eq!((r, t), (Ok(()), [5.0]));
        let r = einsum(&[], &[3], &[&a], &[&[3]], &mut t);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn cumprod_modes() {
        let mut y = [0i32; 3];
        assert_eq!(cumprod(&[3], 0, false, false, &[2, 3, 4], &mut y), Ok(()));
        assert_eq!(y, [2, 6, 24]);
        assert_eq!(cumprod(&[3], -1, true, true, &[2, 3, 4], &mut y), Ok(()));
        assert_eq!(y, [12, 4, 1]);
    }

    #[test]
    fn bitcast_keeps_bits() {
        let mut y = [0i32; 2];
        assert_eq!(bitcast(&[1.0f32, -0.0], &mut y), Ok(()));
        assert_eq!(y, [0x3f80_0000, i32::MIN]);
        let mut u = [0u8; 2];
        assert_eq!(bitcast(&[true, false], &mut u), Ok(()));
        assert_eq!(u, [1, 0]);
    }

    #[test]
    fn reverse_sequence_reverses_prefixes() {
        // [batch 2, time 3], lens [2, 3] with time axis 1.
        let mut y = [0i32; 6];
        let r = reverse_sequence(&[2, 3], 0, 1, &[2i64, 3], &[1, 2, 3, 4, 5, 6], &mut y);
        assert_eq!((r, y), (Ok(()), [2, 1, 3, 6, 5, 4]));
        let r = reverse_sequence(&[2, 3], 0, 1, &[4i64, 3], &[1, 2, 3, 4, 5, 6], &mut y);
        assert_eq!(r, Err(Error::IndexOutOfBounds));
    }

    #[test]
    fn det_by_elimination() {
        let mut y = [0f64; 2];
        let mut s = [0f64; 4];
        let r = det(2, 2, &[1.0, 2.0, 3.0, 4.0, 0.0, 1.0, 1.0, 0.0], &mut y, &mut s);
        assert_eq!(r, Ok(()));
        assert!((y[0] + 2.0).abs() < 1e-12 && (y[1] + 1.0).abs() < 1e-12, "{y:?}");
    }

    #[test]
    fn non_zero_and_compress_check_counts() {
        let mut y = [0i64; 4];
        assert_eq!(non_zero(&[2, 2], 2, &[1.0f32, 0.0, 0.0, 3.0], &mut y), Ok(()));
        assert_eq!(y, [0, 1, 0, 1]);
        assert_eq!(
            non_zero(&[2, 2], 2, &[1.0f32, 1.0, 0.0, 3.0], &mut y),
            Err(Error::ShapeMismatch)
        );
        let mut c = [0i32; 2];
        assert_eq!(compress(1, 3, 1, 2, &[true, false, true], &[7, 8, 9], &mut c), Ok(()));
        assert_eq!(c, [7, 9]);
        assert_eq!(compress(1, 3, 1, 2, &[1u8, 1], &[7, 8, 9], &mut c), Ok(()));
        assert_eq!(c, [7, 8]);
    }

    #[test]
    fn insert_positions_count_from_the_back_and_are_checked() {
        assert_eq!(insert_position(&[0i64], 3), Ok(0));
        assert_eq!(insert_position(&[3i32], 3), Ok(3));
        assert_eq!(insert_position(&[-3i64], 3), Ok(0));
        assert_eq!(insert_position(&[4i64], 3), Err(Error::InvalidParams));
        assert_eq!(insert_position(&[-4i64], 3), Err(Error::InvalidParams));
        assert_eq!(insert_position::<i64>(&[], 3), Err(Error::ShapeMismatch));
    }

    #[test]
    fn split_bounded_packs_each_piece_and_checks_the_sizes() {
        // [[0, 1, 2], [3, 4, 5]] split 1 + 2 along axis 1.
        let x = [0i32, 1, 2, 3, 4, 5];
        let s = Slices { outer: 2, len: 3, inner: 1 };
        let (mut a, mut b, mut l) = ([9i32; 6], [9i32; 6], [0usize; 2]);
        let r = split_bounded(s, &[1i64, 2], &x, &mut [&mut a[..], &mut b[..]], &mut l);
        assert_eq!((r, l), (Ok(()), [1, 2]));
        assert_eq!((&a[..2], &b[..4]), (&[0, 3][..], &[1, 2, 4, 5][..]));
        for bad in [[2i64, 2], [-1, 4], [1, 1]] {
            let r = split_bounded(s, &bad, &x, &mut [&mut a[..], &mut b[..]], &mut l);
            assert_eq!(r, Err(Error::InvalidParams), "{bad:?}");
        }
    }

    #[test]
    fn unique_bounded_packs_the_found_slices_at_the_front() {
        // Columns of [[1, 0, 1], [0, 1, 0]]: (1,0), (0,1), (1,0); two distinct.
        let x = [1i64, 0, 1, 0, 1, 0];
        let s = Slices { outer: 2, len: 3, inner: 1 };
        let (mut y, mut f, mut ix, mut inv, mut c) =
            ([9i64; 6], [0i64; 3], [9i64; 3], [9i64; 3], [9i64; 3]);
        let r = unique_bounded(
            s,
            true,
            3,
            &x,
            &mut y,
            &mut f,
            Some(&mut ix),
            Some(&mut inv),
            Some(&mut c),
        );
        assert_eq!(r, Ok(2));
        assert_eq!(
            (&y[..4], &ix[..2], inv, &c[..2]),
            (&[0, 1, 1, 0][..], &[1, 0][..], [1, 0, 1], &[1, 2][..])
        );
        // A capacity below the distinct count is an error, not a truncation.
        let r = unique_bounded(s, true, 1, &x, &mut y[..2], &mut f, None, None, None);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn unique_sorted_and_by_occurrence() {
        let x = [2.0f32, 1.0, 2.0, 3.0, 1.0];
        let s = Slices { outer: 1, len: 5, inner: 1 };
        let (mut y, mut f, mut ix, mut inv, mut c) =
            ([0f32; 3], [0i64; 3], [0i64; 3], [0i64; 5], [0i64; 3]);
        let r = unique(s, true, 3, &x, &mut y, &mut f, Some(&mut ix), Some(&mut inv), Some(&mut c));
        assert_eq!(r, Ok(()));
        assert_eq!((y, ix, inv, c), ([1.0, 2.0, 3.0], [1, 0, 3], [1, 0, 1, 2, 0], [2, 2, 1]));
        let r = unique(s, false, 3, &x, &mut y, &mut f, Some(&mut ix), None, None);
        assert_eq!((r, y, ix), (Ok(()), [2.0, 1.0, 3.0], [0, 1, 3]));
        // Rows of [[1, 0], [0, 1], [1, 0]] along axis 0.
        let rows = [1i32, 0, 0, 1, 1, 0];
        let s = Slices { outer: 1, len: 3, inner: 2 };
        let mut y = [0i32; 4];
        let r = unique(s, true, 2, &rows, &mut y, &mut f, None, Some(&mut inv[..3]), None);
        assert_eq!((r, y, &inv[..3]), (Ok(()), [0, 1, 1, 0], &[1i64, 0, 1][..]));
        let r = unique(s, true, 3, &rows, &mut [0i32; 6], &mut f, None, None, None);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn nms_suppresses_overlaps() {
        // Two overlapping boxes and one apart; max 3 per class, iou 0.5.
        let boxes = [0.0f32, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 10.0, 1.0, 11.0];
        let scores = [0.9f32, 0.95, 0.3];
        let p = Nms { batches: 1, classes: 1, boxes: 3, center_point_box: false };
        let mut y = [0i64; 6];
        let r = non_max_suppression(p, &boxes, &scores, 3, 0.5, Some(0.0), 2, &mut y);
        assert_eq!((r, y), (Ok(()), [0, 0, 1, 0, 0, 2]));
        let r = non_max_suppression(p, &boxes, &scores, 3, 0.5, Some(0.5), 2, &mut y);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }
}
