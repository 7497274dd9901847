//! Normalisations: BatchNormalization (inference), LayerNormalization,
//! InstanceNormalization, LpNormalization.
//!
//! Means and variances are computed in two passes (mean, then the mean of
//! squared deviations), summing in index order.

use crate::num::{Float, Num};
use crate::{Error, Result, ensure};

fn len3(a: usize, b: usize, c: usize) -> Result<usize> {
    a.checked_mul(b).and_then(|v| v.checked_mul(c)).ok_or(Error::Overflow)
}

/// Shape of an `[N, C, spatial...]` tensor as the channel kernels see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nchw {
    /// `N`.
    pub batch: usize,
    /// `C`.
    pub channels: usize,
    /// Product of the spatial dims (1 if there are none).
    pub spatial: usize,
}

impl Nchw {
    fn len(&self) -> Result<usize> {
        len3(self.batch, self.channels, self.spatial)
    }
}

/// The per-channel statistics `BatchNormalization` uses at inference.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormParams<'a, T> {
    /// Per-channel scale (gamma).
    pub scale: &'a [T],
    /// Per-channel bias (beta).
    pub bias: &'a [T],
    /// Per-channel running mean.
    pub mean: &'a [T],
    /// Per-channel running variance.
    pub var: &'a [T],
    /// Added to the variance.
    pub epsilon: T,
}

/// ONNX `BatchNormalization` in inference mode:
/// `y = (x - mean) / sqrt(var + epsilon) * scale + bias` per channel.
pub fn batch_norm<T: Float>(s: Nchw, p: &BatchNormParams<'_, T>, x: &[T], y: &mut [T]) -> Result {
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    for v in [p.scale, p.bias, p.mean, p.var] {
        ensure(v.len() == s.channels, Error::ShapeMismatch)?;
    }
    if n == 0 {
        return Ok(());
    }
    for (i, (yc, xc)) in y.chunks_mut(s.spatial).zip(x.chunks(s.spatial)).enumerate() {
        let c = i % s.channels;
        let std = p.var[c].add(p.epsilon).sqrt();
        for (o, &v) in yc.iter_mut().zip(xc) {
            *o = v.sub(p.mean[c]).div(std).unwrap_or(T::NAN).mul(p.scale[c]).add(p.bias[c]);
        }
    }
    Ok(())
}

/// Mean and standard deviation `sqrt(var + eps)` of one slice.
fn mean_std<T: Float>(x: &[T], eps: T) -> (T, T) {
    let n = T::from_usize(x.len());
    let mean = x.iter().fold(T::ZERO, |a, &v| a.add(v)).div(n).unwrap_or(T::NAN);
    let var = x
        .iter()
        .fold(T::ZERO, |a, &v| {
            let d = v.sub(mean);
            a.add(d.mul(d))
        })
        .div(n)
        .unwrap_or(T::NAN);
    (mean, var.add(eps).sqrt())
}

/// `LayerNormalization` params: the input is `[outer, inner]` where `inner`
/// is the product of the dims from `axis` on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerNorm<T> {
    /// Product of the dims before `axis`.
    pub outer: usize,
    /// Product of the dims from `axis` on (the normalised extent).
    pub inner: usize,
    /// Added to the variance.
    pub epsilon: T,
}

/// ONNX `LayerNormalization`: each of the `outer` rows is normalised to
/// `(x - mean) / sqrt(var + epsilon) * scale + bias`. `scale` and `bias` hold
/// `inner` elements (the generator expands broadcastable ones). The optional
/// `mean` and `inv_std_dev` outputs get one value per row.
pub fn layer_norm<T: Float>(
    p: &LayerNorm<T>,
    x: &[T],
    scale: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
    mut mean: Option<&mut [T]>,
    mut inv_std_dev: Option<&mut [T]>,
) -> Result {
    let n = p.outer.checked_mul(p.inner).ok_or(Error::Overflow)?;
    ensure(x.len() == n && y.len() == n && scale.len() == p.inner, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b.len() == p.inner), Error::ShapeMismatch)?;
    ensure(mean.as_ref().is_none_or(|m| m.len() == p.outer), Error::ShapeMismatch)?;
    ensure(inv_std_dev.as_ref().is_none_or(|m| m.len() == p.outer), Error::ShapeMismatch)?;
    if p.inner == 0 {
        return Ok(());
    }
    for (r, (yr, xr)) in y.chunks_mut(p.inner).zip(x.chunks(p.inner)).enumerate() {
        let (m, std) = mean_std(xr, p.epsilon);
        for (i, (o, &v)) in yr.iter_mut().zip(xr).enumerate() {
            let mut z = v.sub(m).div(std).unwrap_or(T::NAN).mul(scale[i]);
            if let Some(b) = bias {
                z = z.add(b[i]);
            }
            *o = z;
        }
        if let Some(out) = mean.as_deref_mut() {
            out[r] = m;
        }
        if let Some(out) = inv_std_dev.as_deref_mut() {
            out[r] = T::ONE.div(std).unwrap_or(T::NAN);
        }
    }
    Ok(())
}

/// ONNX `InstanceNormalization`: each `(n, c)` plane is normalised over its
/// spatial extent, then scaled and shifted by `scale[c]`, `bias[c]`.
pub fn instance_norm<T: Float>(
    s: Nchw,
    epsilon: T,
    x: &[T],
    scale: &[T],
    bias: &[T],
    y: &mut [T],
) -> Result {
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    ensure(scale.len() == s.channels && bias.len() == s.channels, Error::ShapeMismatch)?;
    if n == 0 {
        return Ok(());
    }
    for (i, (yc, xc)) in y.chunks_mut(s.spatial).zip(x.chunks(s.spatial)).enumerate() {
        let c = i % s.channels;
        let (m, std) = mean_std(xc, epsilon);
        for (o, &v) in yc.iter_mut().zip(xc) {
            *o = v.sub(m).div(std).unwrap_or(T::NAN).mul(scale[c]).add(bias[c]);
        }
    }
    Ok(())
}

/// A tensor seen as `[outer, axis, inner]` around one axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisShape {
    /// Product of the dims before the axis.
    pub outer: usize,
    /// The axis' length.
    pub axis: usize,
    /// Product of the dims after the axis.
    pub inner: usize,
}

impl AxisShape {
    /// Element count, checked.
    pub fn len(&self) -> Result<usize> {
        len3(self.outer, self.axis, self.inner)
    }

    /// Whether the shape holds no element.
    pub fn is_empty(&self) -> bool {
        self.outer == 0 || self.axis == 0 || self.inner == 0
    }

    /// Calls `f(base)` for every lane along the axis; the lane's elements are
    /// at `base + j * inner` for `j < axis`.
    pub(crate) fn lanes(&self, mut f: impl FnMut(usize)) {
        for o in 0..self.outer {
            for i in 0..self.inner {
                f(o * self.axis * self.inner + i);
            }
        }
    }
}

/// ONNX `LpNormalization` (`p` = 1 or 2): each lane along the axis is
/// divided by its Lp norm. A lane whose norm is zero is all zeros and stays so.
pub fn lp_norm<T: Float>(s: AxisShape, p: u32, x: &[T], y: &mut [T]) -> Result {
    ensure(p == 1 || p == 2, Error::InvalidParams)?;
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    s.lanes(|base| {
        let mut acc = T::ZERO;
        for j in 0..s.axis {
            let v = x[base + j * s.inner];
            acc = acc.add(if p == 1 { Num::abs(v) } else { v.mul(v) });
        }
        let norm = if p == 1 { acc } else { acc.sqrt() };
        for j in 0..s.axis {
            let at = base + j * s.inner;
            y[at] = if norm == T::ZERO { T::ZERO } else { x[at].div(norm).unwrap_or(T::NAN) };
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_norm_hand_computed() {
        // 1 batch, 2 channels, 2 spatial. Channel 0: mean 1, var 4 -> (x-1)/2;
        // channel 1: mean 0, var 0.25, scale 2, bias 1 -> 4x + 1.
        let p = BatchNormParams {
            scale: &[1.0f32, 2.0],
            bias: &[0.0, 1.0],
            mean: &[1.0, 0.0],
            var: &[4.0, 0.25],
            epsilon: 0.0,
        };
        let mut y = [0.0f32; 4];
        let s = Nchw { batch: 1, channels: 2, spatial: 2 };
        batch_norm(s, &p, &[3.0, -1.0, 0.5, -1.0], &mut y).unwrap();
        assert_eq!(y, [1.0, -1.0, 3.0, -3.0]);
        assert_eq!(batch_norm(s, &p, &[0.0; 3], &mut y[..3]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn layer_norm_hand_computed() {
        // Row [1, 3]: mean 2, std 1 -> [-1, 1]; row [10, 14]: mean 12, std 2 -> [-1, 1];
        // then scale [1, 2] and bias [0.5, 0].
        let p = LayerNorm { outer: 2, inner: 2, epsilon: 0.0f64 };
        let mut y = [0.0f64; 4];
        let mut mean = [0.0f64; 2];
        let mut inv = [0.0f64; 2];
        layer_norm(
            &p,
            &[1.0, 3.0, 10.0, 14.0],
            &[1.0, 2.0],
            Some(&[0.5, 0.0]),
            &mut y,
            Some(&mut mean),
            Some(&mut inv),
        )
        .unwrap();
        assert_eq!(y, [-0.5, 2.0, -0.5, 2.0]);
        assert_eq!(mean, [2.0, 12.0]);
        assert_eq!(inv, [1.0, 0.5]);
        // Property: without scale/bias each row has mean 0 and variance ~1.
        let x = [0.3f64, -1.7, 2.2, 5.0, 0.0, 0.1];
        let p = LayerNorm { outer: 1, inner: 6, epsilon: 0.0 };
        let mut y = [0.0f64; 6];
        layer_norm(&p, &x, &[1.0; 6], None, &mut y, None, None).unwrap();
        let m: f64 = y.iter().sum::<f64>() / 6.0;
        let v: f64 = y.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / 6.0;
        assert!(m.abs() < 1e-12 && (v - 1.0).abs() < 1e-12);
    }

    #[test]
    fn instance_norm_hand_computed() {
        // Channels [0, 2] and [4, 6] both normalise to [-1, 1]; then scale and bias per channel.
        let s = Nchw { batch: 1, channels: 2, spatial: 2 };
        let mut y = [0.0f32; 4];
        instance_norm(s, 0.0, &[0.0, 2.0, 4.0, 6.0], &[1.0, 3.0], &[0.0, 1.0], &mut y).unwrap();
        assert_eq!(y, [-1.0, 1.0, -2.0, 4.0]);
    }

    #[test]
    fn lp_norm_lanes() {
        // [2, 2] over axis 1: rows [3, 4] -> [0.6, 0.8]; [0, 0] stays zero.
        let s = AxisShape { outer: 2, axis: 2, inner: 1 };
        let mut y = [9.0f32; 4];
        lp_norm(s, 2, &[3.0, 4.0, 0.0, 0.0], &mut y).unwrap();
        assert_eq!(y, [0.6, 0.8, 0.0, 0.0]);
        // Over axis 0 of [2, 2], L1: columns [1, 3] and [-2, 2].
        let s = AxisShape { outer: 1, axis: 2, inner: 2 };
        lp_norm(s, 1, &[1.0, -2.0, 3.0, 2.0], &mut y).unwrap();
        assert_eq!(y, [0.25, -0.5, 0.75, 0.5]);
        assert_eq!(lp_norm(s, 3, &[0.0; 4], &mut y), Err(Error::InvalidParams));
    }
}
