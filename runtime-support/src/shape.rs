//! Shapes, strides and the multi-index walker shared by the strided kernels.
//!
//! The generator computes strides with the same functions ([`contiguous_strides`],
//! [`broadcast_strides`]) at generation time and emits them as const arrays, so
//! both sides agree on the layout. Kernels check every strided access pattern
//! once with [`check_strided`] before walking it, which is what lets the walk
//! itself index without further checks.

use crate::{Error, Result, ensure};

/// Largest rank the strided kernels accept. Kernels that reshape internally
/// (Tile, DepthToSpace) need up to twice the tensor's rank.
pub const MAX_RANK: usize = 16;

/// Number of elements of `shape` (1 for a scalar); [`Error::Overflow`] if the
/// product does not fit.
pub fn numel(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or(Error::Overflow)
}

/// Row-major strides of a contiguous tensor of `shape`, written to `out`
/// (which must have the same length as `shape`).
pub fn contiguous_strides(shape: &[usize], out: &mut [isize]) -> Result {
    ensure(out.len() == shape.len(), Error::ShapeMismatch)?;
    let mut s: isize = 1;
    for (o, &d) in out.iter_mut().zip(shape).rev() {
        *o = s;
        s = s
            .checked_mul(isize::try_from(d).map_err(|_| Error::Overflow)?)
            .ok_or(Error::Overflow)?;
    }
    Ok(())
}

/// Strides for reading a contiguous tensor of `in_shape` as if it had
/// `out_shape` under numpy broadcasting: shapes are right-aligned, and an axis
/// of size 1 (or a missing leading axis) gets stride 0. `out` has the length
/// of `out_shape`. [`Error::ShapeMismatch`] if `in_shape` does not broadcast.
pub fn broadcast_strides(in_shape: &[usize], out_shape: &[usize], out: &mut [isize]) -> Result {
    ensure(out.len() == out_shape.len(), Error::ShapeMismatch)?;
    ensure(in_shape.len() <= out_shape.len(), Error::ShapeMismatch)?;
    let lead = out_shape.len() - in_shape.len();
    let mut s: isize = 1;
    for i in (0..out_shape.len()).rev() {
        let Some(ii) = i.checked_sub(lead) else {
            out[i] = 0;
            continue;
        };
        let d = in_shape[ii];
        if d == out_shape[i] && d != 1 {
            out[i] = s;
        } else if d == 1 {
            out[i] = 0;
        } else {
            return Err(Error::ShapeMismatch);
        }
        s = s
            .checked_mul(isize::try_from(d).map_err(|_| Error::Overflow)?)
            .ok_or(Error::Overflow)?;
    }
    Ok(())
}

/// Checks that walking `shape` with `strides` from element offset `base`
/// stays inside a buffer of `len` elements (trivially true if `shape` holds
/// no element), and that the rank is supported.
pub fn check_strided(shape: &[usize], strides: &[isize], base: usize, len: usize) -> Result {
    ensure(shape.len() <= MAX_RANK, Error::RankTooLarge)?;
    ensure(strides.len() == shape.len(), Error::ShapeMismatch)?;
    if numel(shape)? == 0 {
        return Ok(());
    }
    let mut lo = i128::try_from(base).map_err(|_| Error::Overflow)?;
    let mut hi = lo;
    for (&d, &s) in shape.iter().zip(strides) {
        let span = (d as i128 - 1) * s as i128;
        if span < 0 {
            lo += span;
        } else {
            hi += span;
        }
    }
    ensure(lo >= 0 && hi < len as i128, Error::ShapeMismatch)
}

/// Calls `f` with the element offsets, one per operand, of every multi-index
/// of `shape` in row-major order. The caller must have validated each
/// operand's pattern with [`check_strided`].
#[inline]
pub(crate) fn walk<const K: usize>(
    shape: &[usize],
    strides: [&[isize]; K],
    base: [usize; K],
    mut f: impl FnMut([usize; K]),
) {
    let rank = shape.len();
    // Callers check the rank with `check_strided`; an unchecked one walks
    // nothing (a panic in debug builds).
    debug_assert!(rank <= MAX_RANK, "walk: rank {rank} above {MAX_RANK}");
    if shape.contains(&0) || rank > MAX_RANK {
        return;
    }
    if rank == 0 {
        f(base);
        return;
    }
    let n = shape[rank - 1];
    let inner: [isize; K] =
        core::array::from_fn(|k| strides[k].get(rank - 1).copied().unwrap_or(0));
    let mut idx = [0usize; MAX_RANK];
    let mut offs: [isize; K] = core::array::from_fn(|k| base[k] as isize);
    loop {
        let mut o = offs;
        for _ in 0..n {
            f(core::array::from_fn(|k| o[k] as usize));
            for k in 0..K {
                o[k] = o[k].wrapping_add(inner[k]);
            }
        }
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..K {
                offs[k] = offs[k].wrapping_add(strides[k].get(d).copied().unwrap_or(0));
            }
            if idx[d] < shape[d] {
                break;
            }
            for k in 0..K {
                let s = strides[k].get(d).copied().unwrap_or(0);
                offs[k] = offs[k].wrapping_sub(s.wrapping_mul(shape[d] as isize));
            }
            idx[d] = 0;
        }
    }
}

/// Advances a row-major multi-index over `shape`; returns false after the last one.
#[inline]
pub(crate) fn next_index(idx: &mut [usize], shape: &[usize]) -> bool {
    for d in (0..shape.len().min(idx.len())).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strides() {
        let mut s = [0isize; 3];
        contiguous_strides(&[2, 3, 4], &mut s).unwrap();
        assert_eq!(s, [12, 4, 1]);
        broadcast_strides(&[3, 1], &[2, 3, 4], &mut s).unwrap();
        assert_eq!(s, [0, 1, 0]);
        broadcast_strides(&[], &[2, 3, 4], &mut s).unwrap();
        assert_eq!(s, [0, 0, 0]);
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3, 4], &mut s), Err(Error::ShapeMismatch));
        assert_eq!(numel(&[]), Ok(1));
        assert_eq!(numel(&[usize::MAX, 2]), Err(Error::Overflow));
    }

    #[test]
    fn check_bounds() {
        assert!(check_strided(&[2, 3], &[3, 1], 0, 6).is_ok());
        assert!(check_strided(&[2, 3], &[3, 1], 1, 6).is_err());
        // Reversed walk: starts at the last element.
        assert!(check_strided(&[3], &[-1], 2, 3).is_ok());
        assert!(check_strided(&[3], &[-1], 1, 3).is_err());
        assert!(check_strided(&[0, 5], &[100, 100], 0, 0).is_ok());
    }

    #[test]
    fn walk_order_transposed() {
        // Reading a 2x3 row-major matrix column by column.
        let mut seen = [0usize; 6];
        let mut i = 0;
        walk(&[3, 2], [&[1, 3]], [0], |[o]| {
            seen[i] = o;
            i += 1;
        });
        assert_eq!(seen, [0, 3, 1, 4, 2, 5]);
    }
}
