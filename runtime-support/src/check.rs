//! Run-time checks for shape-like inputs that are data (a Reshape whose
//! `shape` is a graph input, a Slice whose `starts` are computed...).
//!
//! The generator plans such a node with the output shape the model declares;
//! the generated code calls one of these functions with the values read at
//! run time. Each recomputes the output shape those values give and returns
//! [`Error::ShapeMismatch`] when it differs from the planned one, so the
//! kernel that follows never reads or writes out of bounds. Slice and Pad
//! also fill in the kernel parameters that the values decide.

use crate::num::Int;
use crate::shape::{MAX_RANK, numel};
use crate::{Error, Result, ensure};

fn value<I: Int>(v: I) -> Result<i64> {
    v.to_i64().ok_or(Error::InvalidParams)
}

/// Normalises an axis read from data to `0..rank`.
fn axis<I: Int>(a: I, rank: usize) -> Result<usize> {
    let r = i64::try_from(rank).map_err(|_| Error::Overflow)?;
    let a = value(a)?;
    let a = if a < 0 { a + r } else { a };
    ensure((0..r).contains(&a), Error::IndexOutOfBounds)?;
    Ok(a as usize)
}

/// Marks `axes` (normalised to `rank`) in a mask; a repeated axis is refused.
fn axis_mask<I: Int>(axes: &[I], rank: usize) -> Result<[bool; MAX_RANK]> {
    ensure(rank <= MAX_RANK, Error::RankTooLarge)?;
    let mut mask = [false; MAX_RANK];
    for &a in axes {
        let slot = &mut mask[axis(a, rank)?];
        ensure(!*slot, Error::InvalidParams)?;
        *slot = true;
    }
    Ok(mask)
}

/// ONNX `Reshape`: `shape` (0 copies the input dim unless `allowzero`, -1 is
/// inferred) must give `out`.
pub fn reshape<I: Int>(shape: &[I], in_shape: &[usize], allowzero: bool, out: &[usize]) -> Result {
    ensure(shape.len() == out.len(), Error::ShapeMismatch)?;
    let mut inferred = false;
    for (i, (&s, &o)) in shape.iter().zip(out).enumerate() {
        match value(s)? {
            -1 => {
                ensure(!inferred, Error::InvalidParams)?;
                inferred = true;
            }
            0 if !allowzero => ensure(in_shape.get(i) == Some(&o), Error::ShapeMismatch)?,
            s if s >= 0 => ensure(usize::try_from(s) == Ok(o), Error::ShapeMismatch)?,
            _ => return Err(Error::InvalidParams),
        }
    }
    ensure(numel(out)? == numel(in_shape)?, Error::ShapeMismatch)
}

/// ONNX `Squeeze`: dropping `axes` (all axes of length 1 when empty) from
/// `in_shape` must give `out`.
pub fn squeeze<I: Int>(axes: &[I], in_shape: &[usize], out: &[usize]) -> Result {
    let rank = in_shape.len();
    let mut drop = axis_mask(axes, rank)?;
    if axes.is_empty() {
        for (d, &n) in drop.iter_mut().zip(in_shape) {
            *d = n == 1;
        }
    }
    let mut kept = out.iter();
    for (&n, &d) in in_shape.iter().zip(&drop) {
        if d {
            ensure(n == 1, Error::InvalidParams)?;
        } else {
            ensure(kept.next() == Some(&n), Error::ShapeMismatch)?;
        }
    }
    ensure(kept.next().is_none(), Error::ShapeMismatch)
}

/// ONNX `Unsqueeze`: inserting axes of length 1 at `axes` (of the output)
/// into `in_shape` must give `out`.
pub fn unsqueeze<I: Int>(axes: &[I], in_shape: &[usize], out: &[usize]) -> Result {
    let rank = in_shape.len().checked_add(axes.len()).ok_or(Error::Overflow)?;
    ensure(out.len() == rank, Error::ShapeMismatch)?;
    let insert = axis_mask(axes, rank)?;
    let mut rest = in_shape.iter();
    for (&o, &ins) in out.iter().zip(&insert) {
        let expect = if ins { Some(&1) } else { rest.next() };
        ensure(expect == Some(&o), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// ONNX `Expand`: broadcasting `in_shape` with `shape` must give `out`.
pub fn expand<I: Int>(shape: &[I], in_shape: &[usize], out: &[usize]) -> Result {
    let rank = in_shape.len().max(shape.len());
    ensure(out.len() == rank, Error::ShapeMismatch)?;
    for (d, &o) in out.iter().enumerate() {
        let a = (d + in_shape.len()).checked_sub(rank).map_or(1, |i| in_shape[i]);
        let b = match (d + shape.len()).checked_sub(rank) {
            Some(i) => usize::try_from(value(shape[i])?).map_err(|_| Error::InvalidParams)?,
            None => 1,
        };
        let r = if a == 1 {
            b
        } else if b == 1 || a == b {
            a
        } else {
            return Err(Error::InvalidParams);
        };
        ensure(r == o, Error::ShapeMismatch)?;
    }
    Ok(())
}

/// ONNX `Tile`: `in_shape[d] * repeats[d]` must give `out[d]`.
pub fn tile<I: Int>(repeats: &[I], in_shape: &[usize], out: &[usize]) -> Result {
    ensure(repeats.len() == in_shape.len() && out.len() == in_shape.len(), Error::ShapeMismatch)?;
    for ((&r, &n), &o) in repeats.iter().zip(in_shape).zip(out) {
        let r = usize::try_from(value(r)?).map_err(|_| Error::InvalidParams)?;
        ensure(n.checked_mul(r) == Some(o), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// ONNX `Split`: the `split` sizes read at run time must be the planned ones.
pub fn split<I: Int>(split: &[I], sizes: &[usize]) -> Result {
    ensure(split.len() == sizes.len(), Error::ShapeMismatch)?;
    for (&s, &n) in split.iter().zip(sizes) {
        ensure(usize::try_from(value(s)?) == Ok(n), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// The first index and length of a numpy slice of an axis of length `dim`.
fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> (usize, usize) {
    if dim == 0 {
        return (0, 0);
    }
    let d = dim as i128;
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let (s, len) = if st > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        (s, if e > s { (e - s + st - 1) / st } else { 0 })
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        (s, if s > e { (s - e - st - 1) / -st } else { 0 })
    };
    if len == 0 {
        return (0, 0);
    }
    (s as usize, len as usize)
}

/// ONNX `Slice` (opset 10 and later): works out, per axis of `in_shape`, the
/// first index and the step for [`crate::layout::slice`] into `first` and
/// `step`, and checks that the lengths they give are `out`.
#[allow(clippy::too_many_arguments)]
pub fn slice<I: Int>(
    starts: &[I],
    ends: &[I],
    axes: Option<&[I]>,
    steps: Option<&[I]>,
    in_shape: &[usize],
    out: &[usize],
    first: &mut [usize],
    step: &mut [isize],
) -> Result {
    let rank = in_shape.len();
    let k = starts.len();
    ensure(rank <= MAX_RANK, Error::RankTooLarge)?;
    ensure(out.len() == rank && first.len() == rank && step.len() == rank, Error::ShapeMismatch)?;
    ensure(ends.len() == k, Error::InvalidParams)?;
    ensure(axes.is_none_or(|a| a.len() == k), Error::InvalidParams)?;
    ensure(steps.is_none_or(|s| s.len() == k), Error::InvalidParams)?;
    ensure(axes.is_some() || k <= rank, Error::InvalidParams)?;
    let mut len = [0usize; MAX_RANK];
    len[..rank].copy_from_slice(in_shape);
    first.iter_mut().for_each(|f| *f = 0);
    step.iter_mut().for_each(|s| *s = 1);
    let mut seen = [false; MAX_RANK];
    for i in 0..k {
        let a = match axes {
            Some(axes) => axis(axes[i], rank)?,
            None => i,
        };
        ensure(!seen[a], Error::InvalidParams)?;
        seen[a] = true;
        let st = match steps {
            Some(s) => value(s[i])?,
            None => 1,
        };
        ensure(st != 0, Error::InvalidParams)?;
        let (s, n) = slice_axis(in_shape[a], value(starts[i])?, value(ends[i])?, st);
        first[a] = s;
        step[a] = isize::try_from(st).map_err(|_| Error::Overflow)?;
        len[a] = n;
    }
    ensure(len[..rank] == *out, Error::ShapeMismatch)
}

/// ONNX `Pad` (opset 11 and later): spreads `pads` (all begins, then all
/// ends, for `axes` or every axis) into per-axis `begin` and `end` for
/// [`crate::layout::pad`], and checks that they give `out`.
pub fn pad<I: Int, J: Int>(
    pads: &[I],
    axes: Option<&[J]>,
    in_shape: &[usize],
    out: &[usize],
    begin: &mut [isize],
    end: &mut [isize],
) -> Result {
    let rank = in_shape.len();
    ensure(rank <= MAX_RANK, Error::RankTooLarge)?;
    ensure(out.len() == rank && begin.len() == rank && end.len() == rank, Error::ShapeMismatch)?;
    let k = axes.map_or(rank, <[J]>::len);
    ensure(pads.len() == 2 * k, Error::InvalidParams)?;
    if let Some(axes) = axes {
        axis_mask(axes, rank)?;
    }
    begin.iter_mut().for_each(|b| *b = 0);
    end.iter_mut().for_each(|e| *e = 0);
    for i in 0..k {
        let a = match axes {
            Some(axes) => axis(axes[i], rank)?,
            None => i,
        };
        begin[a] = isize::try_from(value(pads[i])?).map_err(|_| Error::Overflow)?;
        end[a] = isize::try_from(value(pads[k + i])?).map_err(|_| Error::Overflow)?;
    }
    for d in 0..rank {
        let n = isize::try_from(in_shape[d]).map_err(|_| Error::Overflow)?;
        let o = n.checked_add(begin[d]).and_then(|v| v.checked_add(end[d]));
        ensure(o.and_then(|o| usize::try_from(o).ok()) == Some(out[d]), Error::ShapeMismatch)?;
    }
    Ok(())
}

/// The one value of a scalar read at run time (Clip's bounds, Range's
/// arguments); [`Error::ShapeMismatch`] unless `v` holds exactly one.
pub fn scalar<T: Copy>(v: &[T]) -> Result<T> {
    match v {
        [x] => Ok(*x),
        _ => Err(Error::ShapeMismatch),
    }
}

/// ONNX `Range` on integers: `max(ceil((limit - start) / delta), 0)` must
/// be the planned length `len`.
pub fn range_int(start: i64, limit: i64, delta: i64, len: usize) -> Result {
    ensure(delta != 0, Error::InvalidParams)?;
    let (s, l, d) = (i128::from(start), i128::from(limit), i128::from(delta));
    let span = l - s;
    let q = span / d;
    let q = if span % d != 0 && ((span < 0) == (d < 0)) { q + 1 } else { q };
    ensure(usize::try_from(q.max(0)) == Ok(len), Error::ShapeMismatch)
}

/// ONNX `Range` on floats: `max(ceil((limit - start) / delta), 0)` must be
/// the planned length `len`.
pub fn range_float(start: f64, limit: f64, delta: f64, len: usize) -> Result {
    ensure(delta != 0.0, Error::InvalidParams)?;
    let n = libm::ceil((limit - start) / delta);
    ensure(n.is_finite(), Error::InvalidParams)?;
    let n = if n > 0.0 { n } else { 0.0 };
    ensure(n == len as f64, Error::ShapeMismatch)
}

/// A count read at run time (OneHot's depth, TopK's K; floats truncate
/// toward zero) must be the planned `n`.
pub fn count<I: crate::extra::AsIndex>(v: &[I], n: usize) -> Result {
    let c = scalar(v)?.as_index();
    ensure(usize::try_from(c) == Ok(n), Error::ShapeMismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reshape_checks_the_values_against_the_planned_shape() {
        assert_eq!(reshape(&[2i64, -1], &[2, 3, 4], false, &[2, 12]), Ok(()));
        assert_eq!(reshape(&[0i64, 12], &[2, 3, 4], false, &[2, 12]), Ok(()));
        assert_eq!(reshape(&[4i64, -1], &[2, 3, 4], false, &[2, 12]), Err(Error::ShapeMismatch));
        assert_eq!(reshape(&[-1i64, -1], &[2, 3, 4], false, &[2, 12]), Err(Error::InvalidParams));
        assert_eq!(reshape(&[2i64, 12, 1], &[2, 3, 4], false, &[2, 12]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn squeeze_and_unsqueeze_follow_their_axes() {
        assert_eq!(squeeze(&[0i64], &[1, 3, 1], &[3, 1]), Ok(()));
        assert_eq!(squeeze::<i64>(&[], &[1, 3, 1], &[3]), Ok(()));
        assert_eq!(squeeze(&[1i64], &[1, 3, 1], &[1, 1]), Err(Error::InvalidParams));
        assert_eq!(squeeze(&[-1i64], &[1, 3, 1], &[3, 1]), Err(Error::ShapeMismatch));
        assert_eq!(unsqueeze(&[0i64, -1], &[3], &[1, 3, 1]), Ok(()));
        assert_eq!(unsqueeze(&[1i64], &[3], &[1, 3]), Err(Error::ShapeMismatch));
        assert_eq!(unsqueeze(&[0i64, 0], &[3], &[1, 1, 3]), Err(Error::InvalidParams));
    }

    #[test]
    fn expand_tile_and_split_check_sizes() {
        assert_eq!(expand(&[2i64, 1, 4], &[3, 1], &[2, 3, 4]), Ok(()));
        assert_eq!(expand(&[2i64, 1, 4], &[3, 1], &[2, 1, 4]), Err(Error::ShapeMismatch));
        assert_eq!(expand(&[2i64], &[3], &[3]), Err(Error::InvalidParams));
        assert_eq!(tile(&[2i64, 1], &[3, 4], &[6, 4]), Ok(()));
        assert_eq!(tile(&[1i64, 2], &[3, 4], &[6, 4]), Err(Error::ShapeMismatch));
        assert_eq!(tile(&[-1i64, 2], &[3, 4], &[6, 4]), Err(Error::InvalidParams));
        assert_eq!(split(&[2i64, 3], &[2, 3]), Ok(()));
        assert_eq!(split(&[3i64, 2], &[2, 3]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn scalars_hold_one_value() {
        assert_eq!(scalar(&[2.5f32]), Ok(2.5));
        assert_eq!(scalar::<f32>(&[]), Err(Error::ShapeMismatch));
        assert_eq!(scalar(&[1i64, 2]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn range_lengths_follow_the_spec() {
        assert_eq!(range_int(10, 4, -3, 2), Ok(()));
        assert_eq!(range_int(10, 4, -3, 3), Err(Error::ShapeMismatch));
        assert_eq!(range_int(4, 10, -3, 0), Ok(()));
        assert_eq!(range_int(1, 2, 0, 0), Err(Error::InvalidParams));
        assert_eq!(range_float(1.0, 5.0, 2.0, 2), Ok(()));
        assert_eq!(range_float(1.0, 5.5, 2.0, 3), Ok(()));
        assert_eq!(range_float(1.0, 5.5, 2.0, 2), Err(Error::ShapeMismatch));
        assert_eq!(range_float(1.0, f64::INFINITY, 2.0, 2), Err(Error::InvalidParams));
    }

    #[test]
    fn counts_match_the_plan() {
        assert_eq!(count(&[3i64], 3), Ok(()));
        assert_eq!(count(&[3.9f32], 3), Ok(()));
        assert_eq!(count(&[4i32], 3), Err(Error::ShapeMismatch));
        assert_eq!(count(&[-1i64], 3), Err(Error::ShapeMismatch));
    }

    #[test]
    fn slice_fills_the_kernel_params() {
        let (mut first, mut step) = ([9usize; 2], [9isize; 2]);
        // x[:, 4:0:-2] of [3, 5]: columns 4 and 2.
        let r =
            slice(&[4i64], &[0], Some(&[1]), Some(&[-2]), &[3, 5], &[3, 2], &mut first, &mut step);
        assert_eq!(r, Ok(()));
        assert_eq!((first, step), ([0, 4], [1, -2]));
        let r = slice(&[0i32], &[10], None, None, &[3, 5], &[2, 5], &mut first, &mut step);
        assert_eq!(r, Err(Error::ShapeMismatch));
        let r =
            slice(&[0i64], &[1], Some(&[0]), Some(&[0]), &[3, 5], &[1, 5], &mut first, &mut step);
        assert_eq!(r, Err(Error::InvalidParams));
    }

    #[test]
    fn pad_spreads_the_pads_over_axes() {
        let (mut b, mut e) = ([9isize; 2], [9isize; 2]);
        assert_eq!(pad::<i64, i64>(&[1, 0, 2, -1], None, &[2, 3], &[5, 2], &mut b, &mut e), Ok(()));
        assert_eq!((b, e), ([1, 0], [2, -1]));
        assert_eq!(pad(&[1i64, 1], Some(&[-1i32]), &[2, 3], &[2, 5], &mut b, &mut e), Ok(()));
        assert_eq!((b, e), ([0, 1], [0, 1]));
        assert_eq!(
            pad::<i64, i64>(&[0, 0, 0, -4], None, &[2, 3], &[2, 0], &mut b, &mut e),
            Err(Error::ShapeMismatch)
        );
    }
}
