//! Normalisations: BatchNormalization (inference), LayerNormalization,
//! InstanceNormalization, LpNormalization.
//!
//! Means and variances are computed in two passes (mean, then the mean of
//! squared deviations), summing in index order.

use crate::num::{Float, Num};
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, numel, walk};
use crate::{Error, Result, ensure, simd};

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
    normalise(s, p, x, y, |v| v)
}

/// [`batch_norm`] on f32 with an activation fused (a pre-activation
/// network's BatchNormalization + Relu): each value normalised as there,
/// then `act` applied with the standalone op's comparisons, in one pass.
pub fn sbatch_norm(
    s: Nchw,
    p: &BatchNormParams<'_, f32>,
    act: crate::conv::Activation,
    x: &[f32],
    y: &mut [f32],
) -> Result {
    normalise(s, p, x, y, |v| act.apply(v))
}

/// [`batch_norm`]'s checks and loop, with `post` applied to each
/// normalised value.
#[inline(always)]
fn normalise<T: Float>(
    s: Nchw,
    p: &BatchNormParams<'_, T>,
    x: &[T],
    y: &mut [T],
    post: impl Fn(T) -> T,
) -> Result {
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
            *o = post(v.sub(p.mean[c]).div(std).unwrap_or(T::NAN).mul(p.scale[c]).add(p.bias[c]));
        }
    }
    Ok(())
}

/// The inputs and attributes of `BatchNormalization` in training mode.
#[derive(Clone, Copy, Debug)]
pub struct BatchNormTraining<'a, T> {
    /// Per-channel scale (gamma).
    pub scale: &'a [T],
    /// Per-channel bias (beta).
    pub bias: &'a [T],
    /// Per-channel running mean before this step.
    pub input_mean: &'a [T],
    /// Per-channel running variance before this step.
    pub input_var: &'a [T],
    /// Added to the variance.
    pub epsilon: T,
    /// Weight of the old running statistics in the new ones.
    pub momentum: T,
}

/// The optional outputs of [`batch_norm_training`], one value per channel.
#[derive(Debug, Default)]
pub struct BatchNormStats<'a, T> {
    /// `input_mean * momentum + batch_mean * (1 - momentum)`.
    pub running_mean: Option<&'a mut [T]>,
    /// `input_var * momentum + batch_var * (1 - momentum)`.
    pub running_var: Option<&'a mut [T]>,
    /// The mean of this batch.
    pub batch_mean: Option<&'a mut [T]>,
}

/// ONNX `BatchNormalization` in training mode: each channel is normalised
/// with the mean and population variance of this batch (over `N` and the
/// spatial dims); the running statistics are updated with `momentum`.
pub fn batch_norm_training<T: Float>(
    s: Nchw,
    p: &BatchNormTraining<'_, T>,
    x: &[T],
    y: &mut [T],
    stats: BatchNormStats<'_, T>,
) -> Result {
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    for v in [p.scale, p.bias, p.input_mean, p.input_var] {
        ensure(v.len() == s.channels, Error::ShapeMismatch)?;
    }
    let BatchNormStats { mut running_mean, mut running_var, mut batch_mean } = stats;
    for v in [&running_mean, &running_var, &batch_mean].into_iter().flatten() {
        ensure(v.len() == s.channels, Error::ShapeMismatch)?;
    }
    let count = T::from_usize(s.batch.checked_mul(s.spatial).ok_or(Error::Overflow)?);
    let plane = s.channels.checked_mul(s.spatial).ok_or(Error::Overflow)?;
    // The planes of channel c: x[b * plane + c * spatial ..][..spatial] for each b.
    let planes = |c: usize| {
        (0..s.batch).map(move |b| {
            let at = b * plane + c * s.spatial;
            at..at + s.spatial
        })
    };
    for c in 0..s.channels {
        let mut sum = T::ZERO;
        for r in planes(c) {
            sum = x[r].iter().fold(sum, |a, &v| a.add(v));
        }
        let mean = sum.div(count).unwrap_or(T::NAN);
        let mut sq = T::ZERO;
        for r in planes(c) {
            sq = x[r].iter().fold(sq, |a, &v| {
                let d = v.sub(mean);
                a.add(d.mul(d))
            });
        }
        let var = sq.div(count).unwrap_or(T::NAN);
        let std = var.add(p.epsilon).sqrt();
        for r in planes(c) {
            for (o, &v) in y[r.clone()].iter_mut().zip(&x[r]) {
                *o = v.sub(mean).div(std).unwrap_or(T::NAN).mul(p.scale[c]).add(p.bias[c]);
            }
        }
        let keep = T::ONE.sub(p.momentum);
        if let Some(out) = running_mean.as_deref_mut() {
            out[c] = p.input_mean[c].mul(p.momentum).add(mean.mul(keep));
        }
        if let Some(out) = running_var.as_deref_mut() {
            out[c] = p.input_var[c].mul(p.momentum).add(var.mul(keep));
        }
        if let Some(out) = batch_mean.as_deref_mut() {
            out[c] = mean;
        }
    }
    Ok(())
}

/// ONNX `GroupNormalization`: the channels of each batch item are split into
/// `groups` equal groups, each normalised over its channels and spatial
/// extent, then scaled and shifted per channel (`scale`/`bias` of length
/// `channels`, opset 21) or per group (length `groups`, opset 18).
pub fn group_norm<T: Float>(
    s: Nchw,
    groups: usize,
    epsilon: T,
    x: &[T],
    scale: &[T],
    bias: &[T],
    y: &mut [T],
) -> Result {
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    ensure(groups > 0 && s.channels.is_multiple_of(groups), Error::InvalidParams)?;
    let per_channel = scale.len() == s.channels;
    ensure(per_channel || scale.len() == groups, Error::ShapeMismatch)?;
    ensure(bias.len() == scale.len(), Error::ShapeMismatch)?;
    let per_group = s.channels / groups;
    let chunk = per_group.checked_mul(s.spatial).ok_or(Error::Overflow)?;
    if n == 0 || chunk == 0 {
        return Ok(());
    }
    for (i, (yg, xg)) in y.chunks_mut(chunk).zip(x.chunks(chunk)).enumerate() {
        let g = i % groups;
        let (m, std) = mean_std(xg, epsilon);
        for (j, (o, &v)) in yg.iter_mut().zip(xg).enumerate() {
            let k = if per_channel { g * per_group + j / s.spatial } else { g };
            *o = v.sub(m).div(std).unwrap_or(T::NAN).mul(scale[k]).add(bias[k]);
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
    let stats = (mean.as_deref().map(<[T]>::len), inv_std_dev.as_deref().map(<[T]>::len));
    if !check_layer_norm(p, x.len(), scale.len(), bias.map(<[T]>::len), y.len(), stats)? {
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

/// Checks LayerNormalization's operand lengths (`stats`: the lengths of the
/// optional mean and inverse-deviation outputs); `false` when rows are empty.
fn check_layer_norm<T>(
    p: &LayerNorm<T>,
    x: usize,
    scale: usize,
    bias: Option<usize>,
    y: usize,
    stats: (Option<usize>, Option<usize>),
) -> Result<bool> {
    let n = p.outer.checked_mul(p.inner).ok_or(Error::Overflow)?;
    ensure(x == n && y == n && scale == p.inner, Error::ShapeMismatch)?;
    ensure(bias.is_none_or(|b| b == p.inner), Error::ShapeMismatch)?;
    ensure(stats.0.is_none_or(|m| m == p.outer), Error::ShapeMismatch)?;
    ensure(stats.1.is_none_or(|m| m == p.outer), Error::ShapeMismatch)?;
    Ok(p.inner != 0)
}

/// [`layer_norm`] on f32 for generated code: each row's mean and variance
/// summed over eight partial sums and the row scaled by `1 / std`, in loops
/// compiled for the widest vector unit (results differ from [`layer_norm`]
/// by rounding). Constant folding keeps [`layer_norm`].
pub fn slayer_norm(
    p: &LayerNorm<f32>,
    x: &[f32],
    scale: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    mean: Option<&mut [f32]>,
    inv_std_dev: Option<&mut [f32]>,
) -> Result {
    let stats = (mean.as_deref().map(<[f32]>::len), inv_std_dev.as_deref().map(<[f32]>::len));
    if !check_layer_norm(p, x.len(), scale.len(), bias.map(<[f32]>::len), y.len(), stats)? {
        return Ok(());
    }
    simd::vectorize_wide(LayerNormRows { p: *p, x, scale, bias, y, mean, inv_std_dev });
    Ok(())
}

/// The rows of one [`slayer_norm`] call (checked).
struct LayerNormRows<'a> {
    p: LayerNorm<f32>,
    x: &'a [f32],
    scale: &'a [f32],
    bias: Option<&'a [f32]>,
    y: &'a mut [f32],
    mean: Option<&'a mut [f32]>,
    inv_std_dev: Option<&'a mut [f32]>,
}

/// `sum g(x[i])` over eight partial sums.
#[inline(always)]
fn sum8(x: &[f32], g: impl Fn(f32) -> f32) -> f32 {
    let (chunks, tail) = x.as_chunks::<8>();
    let mut acc = [0.0f32; 8];
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += g(v);
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for &v in tail {
        s += g(v);
    }
    s
}

impl simd::Vectorize for LayerNormRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let LayerNormRows { p, x, scale, bias, y, mut mean, mut inv_std_dev } = self;
        let n = p.inner as f32;
        for (r, (yr, xr)) in y.chunks_exact_mut(p.inner).zip(x.chunks_exact(p.inner)).enumerate() {
            let m = sum8(xr, |v| v) / n;
            let var = sum8(xr, |v| (v - m) * (v - m)) / n;
            let inv = 1.0 / crate::num::sqrtf(var + p.epsilon);
            match bias {
                Some(b) => {
                    for (((o, &v), &s), &b) in yr.iter_mut().zip(xr).zip(scale).zip(b) {
                        *o = (v - m) * inv * s + b;
                    }
                }
                None => {
                    for ((o, &v), &s) in yr.iter_mut().zip(xr).zip(scale) {
                        *o = (v - m) * inv * s;
                    }
                }
            }
            if let Some(out) = mean.as_deref_mut().and_then(|v| v.get_mut(r)) {
                *out = m;
            }
            if let Some(out) = inv_std_dev.as_deref_mut().and_then(|v| v.get_mut(r)) {
                *out = inv;
            }
        }
    }
}

/// `LayerNormalization` whose `scale` and `bias` broadcast to the whole
/// input rather than holding exactly the normalised extent: each is read
/// with its own strides over `shape` (0 on broadcast axes). Otherwise as
/// [`layer_norm`].
#[allow(clippy::too_many_arguments)]
pub fn layer_norm_broadcast<T: Float>(
    p: &LayerNorm<T>,
    shape: &[usize],
    x: &[T],
    scale: (&[T], &[isize]),
    bias: Option<(&[T], &[isize])>,
    y: &mut [T],
    mean: Option<&mut [T]>,
    inv_std_dev: Option<&mut [T]>,
) -> Result {
    let n = p.outer.checked_mul(p.inner).ok_or(Error::Overflow)?;
    ensure(numel(shape)? == n && x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    check_strided(shape, scale.1, 0, scale.0.len())?;
    if let Some((b, strides)) = bias {
        check_strided(shape, strides, 0, b.len())?;
    }
    ensure(mean.as_ref().is_none_or(|m| m.len() == p.outer), Error::ShapeMismatch)?;
    ensure(inv_std_dev.as_ref().is_none_or(|m| m.len() == p.outer), Error::ShapeMismatch)?;
    if p.inner == 0 {
        return Ok(());
    }
    // Standardise row by row, then apply the broadcast affine map in one walk.
    let (mut mean, mut inv_std_dev) = (mean, inv_std_dev);
    for (r, (yr, xr)) in y.chunks_mut(p.inner).zip(x.chunks(p.inner)).enumerate() {
        let (m, std) = mean_std(xr, p.epsilon);
        for (o, &v) in yr.iter_mut().zip(xr) {
            *o = v.sub(m).div(std).unwrap_or(T::NAN);
        }
        if let Some(out) = mean.as_deref_mut() {
            out[r] = m;
        }
        if let Some(out) = inv_std_dev.as_deref_mut() {
            out[r] = T::ONE.div(std).unwrap_or(T::NAN);
        }
    }
    let rank = shape.len();
    let mut contiguous = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut contiguous[..rank])?;
    let zeros = [0isize; MAX_RANK];
    let zero = [T::ZERO];
    let (b, b_strides) = bias.unwrap_or((&zero, &zeros[..rank]));
    walk(shape, [&contiguous[..rank], scale.1, b_strides], [0, 0, 0], |[i, s, k]| {
        y[i] = y[i].mul(scale.0[s]).add(b[k]);
    });
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
    fn fast_layer_norm_close_to_exact() {
        for inner in [1usize, 3, 8, 9, 16, 17, 40] {
            let outer = 3;
            let n = outer * inner;
            let x: [f32; 120] = core::array::from_fn(|i| ((i * 29 % 31) as f32 - 15.0) * 0.3);
            let sc: [f32; 40] = core::array::from_fn(|i| 0.5 + i as f32 * 0.1);
            let bi: [f32; 40] = core::array::from_fn(|i| i as f32 * -0.2);
            let p = LayerNorm { outer, inner, epsilon: 1e-5f32 };
            for bias in [Some(&bi[..inner]), None] {
                let (mut y0, mut m0, mut i0) = ([0.0f32; 120], [0.0f32; 3], [0.0f32; 3]);
                let (mut y1, mut m1, mut i1) = ([9.0f32; 120], [9.0f32; 3], [9.0f32; 3]);
                let (xs, ss) = (&x[..n], &sc[..inner]);
                layer_norm(&p, xs, ss, bias, &mut y0[..n], Some(&mut m0), Some(&mut i0)).unwrap();
                slayer_norm(&p, xs, ss, bias, &mut y1[..n], Some(&mut m1), Some(&mut i1)).unwrap();
                for (a, b) in
                    y0[..n].iter().chain(&m0).chain(&i0).zip(y1[..n].iter().chain(&m1).chain(&i1))
                {
                    assert!((a - b).abs() <= 1e-5 * (1.0 + a.abs()), "{inner}: {a} {b}");
                }
            }
        }
        let p = LayerNorm { outer: 2, inner: 2, epsilon: 0.0f32 };
        let r = slayer_norm(&p, &[0.0; 4], &[1.0; 3], None, &mut [0.0; 4], None, None);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

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

    /// The fused f32 normalisation gives the generic kernel's values with
    /// the activation applied, bit for bit, and checks the same sizes.
    #[test]
    fn fused_batch_norm_is_the_generic_one_then_the_activation() {
        use crate::conv::Activation;
        let s = Nchw { batch: 2, channels: 3, spatial: 5 };
        let x: Vec<f32> = (0..30).map(|i| ((i * 7 % 11) as f32 - 5.0) * 0.37).collect();
        let p = BatchNormParams {
            scale: &[1.5, -0.5, 2.0],
            bias: &[0.25, -1.0, 0.0],
            mean: &[0.5, 0.0, -0.3],
            var: &[3.0, 0.25, 1.1],
            epsilon: 1e-5,
        };
        let mut plain = vec![0.0f32; 30];
        batch_norm(s, &p, &x, &mut plain).unwrap();
        for act in [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.1 },
            Activation::Clip { min: -0.5, max: 0.75 },
        ] {
            let mut y = vec![9.0f32; 30];
            sbatch_norm(s, &p, act, &x, &mut y).unwrap();
            for (i, (&a, &b)) in y.iter().zip(&plain).enumerate() {
                assert_eq!(a.to_bits(), act.apply(b).to_bits(), "{act:?} at {i}");
            }
        }
        let mut short = vec![0.0f32; 29];
        assert!(sbatch_norm(s, &p, Activation::Relu, &x, &mut short).is_err());
        let q = BatchNormParams { var: &[1.0, 1.0], ..p };
        assert!(sbatch_norm(s, &q, Activation::Relu, &x, &mut plain).is_err());
    }

    #[test]
    fn batch_norm_training_hand_computed() {
        // N 2, C 2, spatial 2. Channel 0 sees {1, 3, 1, 3}: mean 2, var 1;
        // channel 1 sees {0, 0, 2, 2}: mean 1, var 1.
        let s = Nchw { batch: 2, channels: 2, spatial: 2 };
        let p = BatchNormTraining {
            scale: &[1.0f64, 2.0],
            bias: &[0.0, 1.0],
            input_mean: &[0.0, 3.0],
            input_var: &[1.0, 5.0],
            epsilon: 0.0,
            momentum: 0.5,
        };
        let x = [1.0, 3.0, 0.0, 0.0, 1.0, 3.0, 2.0, 2.0];
        let mut y = [0.0f64; 8];
        let (mut rm, mut rv, mut bm) = ([0.0f64; 2], [0.0f64; 2], [0.0f64; 2]);
        let stats = BatchNormStats {
            running_mean: Some(&mut rm),
            running_var: Some(&mut rv),
            batch_mean: Some(&mut bm),
        };
        batch_norm_training(s, &p, &x, &mut y, stats).unwrap();
        assert_eq!(y, [-1.0, 1.0, -1.0, -1.0, -1.0, 1.0, 3.0, 3.0]);
        assert_eq!(rm, [1.0, 2.0]);
        assert_eq!(rv, [1.0, 3.0]);
        assert_eq!(bm, [2.0, 1.0]);
        let none = BatchNormStats::default();
        assert_eq!(
            batch_norm_training(s, &p, &x[..7], &mut y[..7], none),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn group_norm_hand_computed() {
        // Two groups of two channels: [1, 3] and [10, 14] both become [-1, 1].
        let s = Nchw { batch: 1, channels: 4, spatial: 1 };
        let x = [1.0f32, 3.0, 10.0, 14.0];
        let mut y = [0.0f32; 4];
        group_norm(s, 2, 0.0, &x, &[1.0, 2.0, 3.0, 4.0], &[0.0, 0.0, 0.0, 1.0], &mut y).unwrap();
        assert_eq!(y, [-1.0, 2.0, -3.0, 5.0]);
        // Opset 18: one scale and bias per group.
        group_norm(s, 2, 0.0, &x, &[2.0, 3.0], &[1.0, 0.0], &mut y).unwrap();
        assert_eq!(y, [-1.0, 3.0, -3.0, 3.0]);
        assert_eq!(
            group_norm(s, 3, 0.0, &x, &[1.0; 3], &[0.0; 3], &mut y),
            Err(Error::InvalidParams)
        );
        assert_eq!(
            group_norm(s, 2, 0.0, &x, &[1.0; 3], &[0.0; 3], &mut y),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn layer_norm_broadcast_scale_per_row() {
        // Rows [1, 3] and [10, 14] standardise to [-1, 1]; scale [2, 1] is per
        // row (strides [1, 0]), bias [1] everywhere.
        let p = LayerNorm { outer: 2, inner: 2, epsilon: 0.0f32 };
        let mut y = [0.0f32; 4];
        let mut inv = [0.0f32; 2];
        layer_norm_broadcast(
            &p,
            &[2, 2],
            &[1.0, 3.0, 10.0, 14.0],
            (&[2.0, 3.0], &[1, 0]),
            Some((&[1.0], &[0, 0])),
            &mut y,
            None,
            Some(&mut inv),
        )
        .unwrap();
        assert_eq!(y, [-1.0, 3.0, -2.0, 4.0]);
        assert_eq!(inv, [1.0, 0.5]);
        // A scale stride that walks past the scale's end is refused.
        let r = layer_norm_broadcast(
            &p,
            &[2, 2],
            &[0.0; 4],
            (&[2.0, 3.0], &[1, 1]),
            None,
            &mut y,
            None,
            None,
        );
        assert_eq!(r, Err(Error::ShapeMismatch));
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
