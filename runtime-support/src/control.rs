//! Helpers for control flow (If, Loop, Scan): copies between the buffers of
//! an enclosing graph and those of a body, and the slicing of scan inputs
//! and outputs along their scan axis.
//!
//! Booleans are `bool` in the caller's arrays and bytes (0 or 1) in the
//! arena, so every copy converts through [`Store`].

use crate::num::Flag;
use crate::{Error, Result};

/// An element that can be stored from an `S`: the same type, or a boolean
/// between its two representations.
pub trait Store<S>: Copy {
    /// The element holding `s`.
    fn store(s: S) -> Self;
}

impl<T: Copy> Store<T> for T {
    #[inline]
    fn store(s: T) -> T {
        s
    }
}

impl Store<bool> for u8 {
    #[inline]
    fn store(s: bool) -> u8 {
        u8::from_bool(s)
    }
}

impl Store<u8> for bool {
    #[inline]
    fn store(s: u8) -> bool {
        s.get()
    }
}

/// Copies `src` into `dst`, which must have the same length.
pub fn copy<S: Copy, D: Store<S>>(src: &[S], dst: &mut [D]) -> Result {
    if src.len() != dst.len() {
        return Err(Error::ShapeMismatch);
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = D::store(s);
    }
    Ok(())
}

/// Reads element 0 of a boolean tensor (a Loop's or If's condition).
pub fn flag<F: Flag>(x: &[F]) -> Result<bool> {
    x.first().map(|f| f.get()).ok_or(Error::ShapeMismatch)
}

/// Reads element 0 of an integer tensor (a Loop's trip count).
pub fn count(x: &[i64]) -> Result<i64> {
    x.first().copied().ok_or(Error::ShapeMismatch)
}

/// Row `row` of `dst` seen as rows of `len` elements (a Loop's scan output
/// at iteration `row`).
pub fn row_mut<T>(dst: &mut [T], row: usize, len: usize) -> Result<&mut [T]> {
    let start = row.checked_mul(len).ok_or(Error::Overflow)?;
    let end = start.checked_add(len).ok_or(Error::Overflow)?;
    dst.get_mut(start..end).ok_or(Error::ShapeMismatch)
}

/// The layout of a tensor seen as `[outer, len, inner]` around its scan axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanAxis {
    /// The product of the dimensions before the scan axis.
    pub outer: usize,
    /// The scan axis's length.
    pub len: usize,
    /// The product of the dimensions after the scan axis.
    pub inner: usize,
}

impl ScanAxis {
    fn total(&self) -> Result<usize> {
        self.outer
            .checked_mul(self.len)
            .and_then(|n| n.checked_mul(self.inner))
            .ok_or(Error::Overflow)
    }

    fn slice_len(&self) -> Result<usize> {
        self.outer.checked_mul(self.inner).ok_or(Error::Overflow)
    }
}

/// Copies position `index` of the scan axis of `src` (laid out as `axis`)
/// into `dst` (`outer * inner` elements).
pub fn slice_get<S: Copy, D: Store<S>>(
    src: &[S],
    axis: ScanAxis,
    index: usize,
    dst: &mut [D],
) -> Result {
    if src.len() != axis.total()? || dst.len() != axis.slice_len()? || index >= axis.len {
        return Err(Error::ShapeMismatch);
    }
    if axis.inner == 0 {
        return Ok(());
    }
    for (o, out) in dst.chunks_exact_mut(axis.inner).enumerate() {
        let start = (o * axis.len + index) * axis.inner;
        let row = src.get(start..start + axis.inner).ok_or(Error::ShapeMismatch)?;
        for (d, &s) in out.iter_mut().zip(row) {
            *d = D::store(s);
        }
    }
    Ok(())
}

/// Copies `src` (`outer * inner` elements) into position `index` of the
/// scan axis of `dst` (laid out as `axis`).
pub fn slice_put<S: Copy, D: Store<S>>(
    src: &[S],
    axis: ScanAxis,
    index: usize,
    dst: &mut [D],
) -> Result {
    if dst.len() != axis.total()? || src.len() != axis.slice_len()? || index >= axis.len {
        return Err(Error::ShapeMismatch);
    }
    if axis.inner == 0 {
        return Ok(());
    }
    for (o, row) in src.chunks_exact(axis.inner).enumerate() {
        let start = (o * axis.len + index) * axis.inner;
        let out = dst.get_mut(start..start + axis.inner).ok_or(Error::ShapeMismatch)?;
        for (d, &s) in out.iter_mut().zip(row) {
            *d = D::store(s);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_convert_booleans_and_check_lengths() {
        let mut d = [0u8; 3];
        copy(&[true, false, true], &mut d).unwrap();
        assert_eq!(d, [1, 0, 1]);
        let mut b = [false; 3];
        copy(&[0u8, 7, 1], &mut b).unwrap();
        assert_eq!(b, [false, true, true]);
        assert_eq!(copy(&[1.0f32], &mut [0.0f32; 2]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn slices_along_a_middle_axis() {
        // shape [2, 3, 2]: element (o, t, i) = 100 o + 10 t + i.
        let src: [i32; 12] = [0, 1, 10, 11, 20, 21, 100, 101, 110, 111, 120, 121];
        let axis = ScanAxis { outer: 2, len: 3, inner: 2 };
        let mut d = [0i32; 4];
        slice_get(&src, axis, 1, &mut d).unwrap();
        assert_eq!(d, [10, 11, 110, 111]);
        let mut back = [0i32; 12];
        for t in 0..3 {
            slice_get(&src, axis, t, &mut d).unwrap();
            slice_put(&d, axis, t, &mut back).unwrap();
        }
        assert_eq!(back, src);
        assert_eq!(slice_get(&src, axis, 3, &mut d), Err(Error::ShapeMismatch));
    }

    #[test]
    fn scalars_read_element_zero() {
        assert_eq!(flag(&[1u8]), Ok(true));
        assert_eq!(flag::<bool>(&[]), Err(Error::ShapeMismatch));
        assert_eq!(count(&[5]), Ok(5));
        let mut d = [0i32; 6];
        row_mut(&mut d, 2, 2).unwrap()[1] = 9;
        assert_eq!(d, [0, 0, 0, 0, 0, 9]);
        assert_eq!(row_mut(&mut d, 3, 2).map(|r| r.len()), Err(Error::ShapeMismatch));
    }
}
