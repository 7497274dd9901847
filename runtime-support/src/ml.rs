//! `ai.onnx.ml` kernels: Binarizer and ArrayFeatureExtractor.

use crate::num::{Int, Num};
use crate::{Error, Result, ensure};

/// ONNX-ML `Binarizer`: 1 where `x > threshold`, else 0 (NaN stays NaN).
pub fn binarizer<T: Num>(threshold: T, one: T, x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = if v.is_nan() {
            v
        } else if v > threshold {
            one
        } else {
            T::default()
        };
    }
    Ok(())
}

/// ONNX-ML `ArrayFeatureExtractor`: `x` seen as `[rows, cols]` (its last
/// axis), `y[r, j] = x[r, indices[j]]`.
pub fn array_feature_extractor<T: Copy, I: Int>(
    rows: usize,
    cols: usize,
    x: &[T],
    indices: &[I],
    y: &mut [T],
) -> Result {
    ensure(rows.checked_mul(cols) == Some(x.len()), Error::ShapeMismatch)?;
    ensure(rows.checked_mul(indices.len()) == Some(y.len()), Error::ShapeMismatch)?;
    let k = indices.len();
    for (j, &i) in indices.iter().enumerate() {
        let c = i.to_i64().and_then(|i| usize::try_from(i).ok()).filter(|&c| c < cols);
        let c = c.ok_or(Error::IndexOutOfBounds)?;
        for r in 0..rows {
            if let (Some(&v), Some(o)) = (x.get(r * cols + c), y.get_mut(r * k + j)) {
                *o = v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_hand() {
        let mut y = [0.0f32; 3];
        binarizer(1.0, 1.0, &[0.5, 1.0, 2.0], &mut y).unwrap();
        assert_eq!(y, [0.0, 0.0, 1.0]);
        let mut z = [0i32; 4];
        array_feature_extractor(2, 3, &[1, 2, 3, 4, 5, 6], &[2i64, 0], &mut z).unwrap();
        assert_eq!(z, [3, 1, 6, 4]);
        assert_eq!(
            array_feature_extractor(2, 3, &[1, 2, 3, 4, 5, 6], &[3i64, 0], &mut z),
            Err(Error::IndexOutOfBounds)
        );
    }
}
