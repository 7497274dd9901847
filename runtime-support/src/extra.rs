//! RMSNormalization, Trilu, Dropout (inference), CumSum, OneHot and TopK.
//!
//! Scalars that ONNX passes as tensors (Trilu's `k`, CumSum's `axis`) may be
//! known only at run time; [`scalar_i64`] reads them from their buffer, so
//! the generated code passes either a literal or a read of the input.

use crate::layout::MoveTo;
use crate::norm::AxisShape;
use crate::num::{Float, Num};
use crate::shape::{check_strided, numel};
use crate::{Error, Result, ensure};

/// The one element of a scalar (or one-element) integer tensor, as `i64`.
pub fn scalar_i64<A: Copy + Into<i64>>(v: &[A]) -> Result<i64> {
    match v {
        [a] => Ok((*a).into()),
        _ => Err(Error::ShapeMismatch),
    }
}

/// Normalises a runtime axis in `[-rank, rank)` to `[0, rank)`.
fn runtime_axis(axis: i64, rank: usize) -> Result<usize> {
    let r = i64::try_from(rank).map_err(|_| Error::Overflow)?;
    let a = if axis < 0 { axis + r } else { axis };
    ensure((0..r).contains(&a), Error::InvalidParams)?;
    usize::try_from(a).map_err(|_| Error::Overflow)
}

// ---------------------------------------------------------------------------
// RMSNormalization

/// RMSNormalization params: `x` seen as `[outer, inner]`, each row of
/// `inner` elements normalised on its own.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RmsNorm<T> {
    pub outer: usize,
    pub inner: usize,
    pub epsilon: T,
}

/// ONNX `RMSNormalization`: `y = x / sqrt(mean(x^2) + epsilon) * scale` over
/// each row. `scale` holds `inner` elements, unless `scale_map` gives the
/// normalised dims (whose product is `inner`) and the strides with which
/// `scale` is read over them (0 on broadcast dims).
pub fn rms_norm<T: Float>(
    p: &RmsNorm<T>,
    x: &[T],
    scale: &[T],
    scale_map: Option<(&[usize], &[isize])>,
    y: &mut [T],
) -> Result {
    let n = p.outer.checked_mul(p.inner).ok_or(Error::Overflow)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    match scale_map {
        None => ensure(scale.len() == p.inner, Error::ShapeMismatch)?,
        Some((shape, strides)) => {
            ensure(numel(shape)? == p.inner, Error::ShapeMismatch)?;
            ensure(strides.iter().all(|&s| s >= 0), Error::InvalidParams)?;
            check_strided(shape, strides, 0, scale.len())?;
        }
    }
    let scale_at = |j: usize| -> T {
        match scale_map {
            None => scale[j],
            Some((shape, strides)) => {
                let (mut rest, mut at) = (j, 0usize);
                for (&d, &s) in shape.iter().zip(strides).rev() {
                    at += (rest % d) * s.unsigned_abs();
                    rest /= d;
                }
                scale[at]
            }
        }
    };
    let count = T::from_usize(p.inner);
    for o in 0..p.outer {
        let row = o * p.inner;
        let mut sum = T::ZERO;
        for &v in &x[row..row + p.inner] {
            sum = sum.add(v.mul(v));
        }
        let mean = sum.div(count).unwrap_or(T::NAN);
        let rms = mean.add(p.epsilon).sqrt();
        for j in 0..p.inner {
            let v = x[row + j].div(rms).unwrap_or(T::NAN);
            y[row + j] = v.mul(scale_at(j));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Trilu

/// A stack of `batch` row-major matrices of `rows` x `cols`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Matrices {
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
}

/// ONNX `Trilu`: keeps the elements on and above (`upper`) or on and below
/// the `k`-th diagonal of each matrix (`col - row >= k`, resp. `<= k`) and
/// zeroes (the default value of) the others.
pub fn trilu<X: MoveTo<Y>, Y: Default>(
    m: Matrices,
    upper: bool,
    k: i64,
    x: &[X],
    y: &mut [Y],
) -> Result {
    let n =
        m.batch.checked_mul(m.rows).and_then(|v| v.checked_mul(m.cols)).ok_or(Error::Overflow)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    let k = i128::from(k);
    let mut at = 0;
    for _ in 0..m.batch {
        for r in 0..m.rows {
            for c in 0..m.cols {
                let d = c as i128 - r as i128;
                let keep = if upper { d >= k } else { d <= k };
                y[at] = if keep { x[at].move_to() } else { Y::default() };
                at += 1;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Dropout (inference) and plain fills

/// `y = x` element by element (Dropout in inference mode).
pub fn copy<X: MoveTo<Y>, Y>(x: &[X], y: &mut [Y]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (d, &s) in y.iter_mut().zip(x) {
        *d = s.move_to();
    }
    Ok(())
}

/// Sets every element of `y` to `v` (Dropout's all-kept mask).
pub fn fill<T: Copy>(y: &mut [T], v: T) {
    for d in y.iter_mut() {
        *d = v;
    }
}

// ---------------------------------------------------------------------------
// CumSum

/// ONNX `CumSum` of a tensor of `dims` along `axis` (in `[-rank, rank)`,
/// possibly read at run time): `exclusive` leaves each element out of its
/// own sum, `reverse` sums from the end of the axis.
pub fn cumsum<T: Num>(
    dims: &[usize],
    axis: i64,
    exclusive: bool,
    reverse: bool,
    x: &[T],
    y: &mut [T],
) -> Result {
    let n = numel(dims)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    let a = runtime_axis(axis, dims.len().max(1))?;
    let s = if dims.is_empty() {
        AxisShape { outer: 1, axis: 1, inner: 1 }
    } else {
        AxisShape { outer: numel(&dims[..a])?, axis: dims[a], inner: numel(&dims[a + 1..])? }
    };
    s.lanes(|base| {
        let mut acc = T::ZERO;
        for step in 0..s.axis {
            let j = if reverse { s.axis - 1 - step } else { step };
            let at = base + j * s.inner;
            if exclusive {
                y[at] = acc;
                acc = acc.add(x[at]);
            } else {
                acc = acc.add(x[at]);
                y[at] = acc;
            }
        }
    });
    Ok(())
}

// ---------------------------------------------------------------------------
// OneHot

/// Index element types OneHot accepts (every numeric type; floats are
/// truncated toward zero, as a cast to `int64` does).
pub trait AsIndex: Copy {
    /// The value as an index (saturating at the `i64` range).
    fn as_index(self) -> i64;
}

macro_rules! as_index {
    ($($t:ty),*) => {$(
        impl AsIndex for $t {
            #[inline]
            fn as_index(self) -> i64 {
                self as i64
            }
        }
    )*};
}

as_index!(i8, i16, i32, i64, u8, u16, u32, u64, f32, f64);

/// ONNX `OneHot`: `y` has the shape of `indices` with an axis of `depth`
/// inserted (`indices` seen as `[outer, inner]`, `y` as `[outer, depth,
/// inner]`); `y` is `values[1]` where the axis position equals the index
/// (negative indices count from `depth`) and `values[0]` elsewhere, so an
/// index outside `[-depth, depth)` gives a lane of `values[0]`.
pub fn one_hot<I: AsIndex, X: MoveTo<Y>, Y>(
    outer: usize,
    depth: usize,
    inner: usize,
    indices: &[I],
    values: &[X],
    y: &mut [Y],
) -> Result {
    let s = AxisShape { outer, axis: depth, inner };
    ensure(
        indices.len() == outer.checked_mul(inner).ok_or(Error::Overflow)?,
        Error::ShapeMismatch,
    )?;
    ensure(y.len() == s.len()?, Error::ShapeMismatch)?;
    let &[off, on] = values else { return Err(Error::ShapeMismatch) };
    let d = i64::try_from(depth).map_err(|_| Error::Overflow)?;
    for o in 0..outer {
        for i in 0..inner {
            let raw = indices[o * inner + i].as_index();
            let idx = if raw < 0 { raw.saturating_add(d) } else { raw };
            let base = o * depth * inner + i;
            for j in 0..depth {
                let hit = i64::try_from(j).is_ok_and(|j| j == idx);
                y[base + j * inner] = if hit { on.move_to() } else { off.move_to() };
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// TopK

/// ONNX `TopK` along the axis of `x` (seen as `[outer, axis, inner]`): the
/// `k` largest (or smallest) elements of each lane in order, with their
/// indices along the axis; equal values keep their order (the lower index
/// first). NaN ranks above every number (largest) or below (smallest), as
/// if it were the greatest value. `values` and `indices` are
/// `[outer, k, inner]`.
pub fn top_k<T: Num>(
    s: AxisShape,
    k: usize,
    largest: bool,
    x: &[T],
    values: &mut [T],
    indices: &mut [i64],
) -> Result {
    ensure(x.len() == s.len()?, Error::ShapeMismatch)?;
    ensure(k <= s.axis, Error::InvalidParams)?;
    let out = AxisShape { outer: s.outer, axis: k, inner: s.inner };
    let n = out.len()?;
    ensure(values.len() == n && indices.len() == n, Error::ShapeMismatch)?;
    if k == 0 {
        return Ok(());
    }
    // `a` ranks strictly before `b` (ties keep the earlier element first).
    let before = |a: T, b: T| -> bool {
        match (a.is_nan(), b.is_nan()) {
            (true, true) => false,
            (true, false) => largest,
            (false, true) => !largest,
            _ => {
                if largest {
                    a > b
                } else {
                    a < b
                }
            }
        }
    };
    for o in 0..s.outer {
        for i in 0..s.inner {
            let src = |j: usize| o * s.axis * s.inner + j * s.inner + i;
            let dst = |r: usize| o * k * s.inner + r * s.inner + i;
            let mut filled = 0usize;
            for j in 0..s.axis {
                let v = x[src(j)];
                // Position after every kept element not ranking below `v`.
                let mut pos = filled;
                while pos > 0 && before(v, values[dst(pos - 1)]) {
                    pos -= 1;
                }
                if pos >= k {
                    continue;
                }
                let last = if filled < k { filled } else { k - 1 };
                let mut r = last;
                while r > pos {
                    values[dst(r)] = values[dst(r - 1)];
                    indices[dst(r)] = indices[dst(r - 1)];
                    r -= 1;
                }
                values[dst(pos)] = v;
                indices[dst(pos)] = i64::try_from(j).map_err(|_| Error::Overflow)?;
                if filled < k {
                    filled += 1;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_and_axes() {
        assert_eq!(scalar_i64(&[-3i32]), Ok(-3));
        assert_eq!(scalar_i64(&[7i64]), Ok(7));
        assert_eq!(scalar_i64::<i64>(&[]), Err(Error::ShapeMismatch));
        assert_eq!(scalar_i64(&[1i64, 2]), Err(Error::ShapeMismatch));
        assert_eq!(runtime_axis(-1, 3), Ok(2));
        assert_eq!(runtime_axis(3, 3), Err(Error::InvalidParams));
    }

    #[test]
    fn rms_norm_by_hand() {
        // Row [3, 4]: mean of squares 12.5, eps 0 -> rms sqrt(12.5).
        let p = RmsNorm { outer: 2, inner: 2, epsilon: 0.0f64 };
        let mut y = [0.0; 4];
        rms_norm(&p, &[3.0, 4.0, 1.0, 1.0], &[1.0, 2.0], None, &mut y).unwrap();
        let r = 12.5f64.sqrt();
        assert!((y[0] - 3.0 / r).abs() < 1e-15 && (y[1] - 8.0 / r).abs() < 1e-15);
        assert_eq!(&y[2..], &[1.0, 2.0]);
        // Scale [2, 1] broadcast over normalised dims [2, 2]: rows of the
        // normalised block scale by 5 then 7.
        let p = RmsNorm { outer: 1, inner: 4, epsilon: 0.0f32 };
        let mut y = [0.0f32; 4];
        rms_norm(&p, &[1.0; 4], &[5.0, 7.0], Some((&[2, 2], &[1, 0])), &mut y).unwrap();
        assert_eq!(y, [5.0, 5.0, 7.0, 7.0]);
        // A stride reaching past the scale buffer is refused.
        let r = rms_norm(&p, &[1.0; 4], &[5.0, 7.0], Some((&[2, 2], &[2, 0])), &mut y);
        assert_eq!(r, Err(Error::ShapeMismatch));
        assert_eq!(rms_norm(&p, &[1.0; 3], &[1.0; 4], None, &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn trilu_by_hand() {
        let m = Matrices { batch: 1, rows: 3, cols: 3 };
        let x = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        let mut y = [0i32; 9];
        trilu(m, true, 0, &x, &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 0, 5, 6, 0, 0, 9]);
        trilu(m, false, 0, &x, &mut y).unwrap();
        assert_eq!(y, [1, 0, 0, 4, 5, 0, 7, 8, 9]);
        trilu(m, true, 1, &x, &mut y).unwrap();
        assert_eq!(y, [0, 2, 3, 0, 0, 6, 0, 0, 0]);
        trilu(m, false, -1, &x, &mut y).unwrap();
        assert_eq!(y, [0, 0, 0, 4, 0, 0, 7, 8, 0]);
        trilu(m, true, i64::MIN, &x, &mut y).unwrap();
        assert_eq!(y, x);
        let mut b = [9u8; 4];
        trilu(Matrices { batch: 1, rows: 2, cols: 2 }, false, 0, &[true; 4], &mut b).unwrap();
        assert_eq!(b, [1, 0, 1, 1]);
        assert_eq!(trilu(m, true, 0, &x[..8], &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn copy_and_fill() {
        let mut y = [0u8; 2];
        copy(&[true, false], &mut y).unwrap();
        assert_eq!(y, [1, 0]);
        assert_eq!(copy(&[1.0f32], &mut [0.0f32; 2]), Err(Error::ShapeMismatch));
        let mut m = [false; 3];
        fill(&mut m, true);
        assert_eq!(m, [true; 3]);
    }

    #[test]
    fn cumsum_by_hand() {
        let x = [1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [0.0; 6];
        cumsum(&[6], 0, false, false, &x, &mut y).unwrap();
        assert_eq!(y, [1.0, 3.0, 6.0, 10.0, 15.0, 21.0]);
        cumsum(&[6], -1, true, false, &x, &mut y).unwrap();
        assert_eq!(y, [0.0, 1.0, 3.0, 6.0, 10.0, 15.0]);
        cumsum(&[6], 0, false, true, &x, &mut y).unwrap();
        assert_eq!(y, [21.0, 20.0, 18.0, 15.0, 11.0, 6.0]);
        cumsum(&[6], 0, true, true, &x, &mut y).unwrap();
        assert_eq!(y, [20.0, 18.0, 15.0, 11.0, 6.0, 0.0]);
        // [2, 3] along axis 0 and 1.
        let x = [1i32, 2, 3, 4, 5, 6];
        let mut y = [0i32; 6];
        cumsum(&[2, 3], 0, false, false, &x, &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 5, 7, 9]);
        cumsum(&[2, 3], 1, false, false, &x, &mut y).unwrap();
        assert_eq!(y, [1, 3, 6, 4, 9, 15]);
        assert_eq!(cumsum(&[2, 3], 2, false, false, &x, &mut y), Err(Error::InvalidParams));
        assert_eq!(cumsum(&[2, 3], -3, false, false, &x, &mut y), Err(Error::InvalidParams));
    }

    #[test]
    fn one_hot_by_hand() {
        // Indices [1, -1, 5] with depth 3 on the last axis.
        let mut y = [9i32; 9];
        one_hot(3, 3, 1, &[1i64, -1, 5], &[0, 1], &mut y).unwrap();
        assert_eq!(y, [0, 1, 0, 0, 0, 1, 0, 0, 0]);
        // Axis 0: y is [depth, 2]; float indices truncate.
        let mut y = [0.0f32; 6];
        one_hot(1, 3, 2, &[2.0f32, 0.7], &[-1.0, 4.0], &mut y).unwrap();
        assert_eq!(y, [-1.0, 4.0, -1.0, -1.0, 4.0, -1.0]);
        assert_eq!(one_hot(1, 3, 2, &[0i32, 1], &[0.0f32], &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn top_k_by_hand() {
        let s = AxisShape { outer: 2, axis: 4, inner: 1 };
        let x = [3, 1, 3, 7, 0, 0, 5, 0];
        let (mut v, mut i) = ([0i32; 6], [0i64; 6]);
        top_k(s, 3, true, &x, &mut v, &mut i).unwrap();
        assert_eq!(v, [7, 3, 3, 5, 0, 0]);
        assert_eq!(i, [3, 0, 2, 2, 0, 1]);
        top_k(s, 3, false, &x, &mut v, &mut i).unwrap();
        assert_eq!(v, [1, 3, 3, 0, 0, 0]);
        assert_eq!(i, [1, 0, 2, 0, 1, 3]);
        // Along axis 0 of [3, 2] (inner 2); NaN ranks first when largest.
        let s = AxisShape { outer: 1, axis: 3, inner: 2 };
        let x = [1.0f32, f32::NAN, 2.0, 0.0, 0.5, 9.0];
        let (mut v, mut i) = ([0.0f32; 4], [0i64; 4]);
        top_k(s, 2, true, &x, &mut v, &mut i).unwrap();
        assert_eq!(i, [1, 0, 0, 2]);
        assert_eq!((v[0], v[2], v[3]), (2.0, 1.0, 9.0));
        assert!(v[1].is_nan());
        assert_eq!(top_k(s, 4, true, &x, &mut v, &mut i), Err(Error::InvalidParams));
    }
}
