//! Signal processing: DFT, STFT, the Hann / Hamming / Blackman windows and
//! MelWeightMatrix.
//!
//! Transforms are direct sums in `f64` (twiddles from the exact `m*k mod n`
//! angle), rounded once per output element; their sizes and axes may be
//! known only at run time, so each kernel derives its layout from the
//! run-time values with the same function the generator uses
//! ([`dft_layout`]) and checks it against the planned output shape.

use crate::num::Float;
use crate::shape::{MAX_RANK, numel};
use crate::{Error, Result, ensure};
use core::f64::consts::PI;

/// A DFT's data layout: the input seen as `[outer, in_len, inner, in_c]`
/// (`in_c` 1 for real, 2 for complex), the output as
/// `[outer, out_len, inner, out_c]`, the transform of length `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DftLayout {
    pub outer: usize,
    pub in_len: usize,
    pub inner: usize,
    pub in_c: usize,
    pub out_len: usize,
    pub out_c: usize,
    pub n: usize,
    /// The axis the transform runs along, in `[0, rank - 2]`.
    pub axis: usize,
    pub inverse: bool,
    pub onesided: bool,
}

/// The layout of a DFT of `x_dims` (the last dim 1 or 2) along `axis` (in
/// `[-rank, -2]` or `[0, rank - 2]`), of length `dft_length` (default: the
/// axis's length, or `2 * (len - 1)` for an inverse one-sided transform).
pub fn dft_layout(
    x_dims: &[usize],
    axis: i64,
    dft_length: Option<i64>,
    inverse: bool,
    onesided: bool,
) -> Result<DftLayout> {
    let rank = x_dims.len();
    ensure((2..=MAX_RANK).contains(&rank), Error::InvalidParams)?;
    let in_c = x_dims[rank - 1];
    ensure(in_c == 1 || in_c == 2, Error::InvalidParams)?;
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    ensure((0..r - 1).contains(&a), Error::InvalidParams)?;
    let axis = a as usize;
    let in_len = x_dims[axis];
    let n = match dft_length {
        Some(v) => usize::try_from(v).map_err(|_| Error::InvalidParams)?,
        None if inverse && onesided => in_len.checked_sub(1).ok_or(Error::InvalidParams)? * 2,
        None => in_len,
    };
    ensure(n > 0, Error::InvalidParams)?;
    let (out_len, out_c) = match (inverse, onesided) {
        (false, false) | (true, false) => (n, 2),
        (false, true) => (n / 2 + 1, 2),
        (true, true) => (n, 1),
    };
    Ok(DftLayout {
        outer: numel(&x_dims[..axis])?,
        in_len,
        inner: numel(&x_dims[axis + 1..rank - 1])?,
        in_c,
        out_len,
        out_c,
        n,
        axis,
        inverse,
        onesided,
    })
}

impl DftLayout {
    /// The output shape for input dims `x_dims`, written into `out`.
    pub fn out_dims(&self, x_dims: &[usize], out: &mut [usize]) -> Result {
        ensure(out.len() == x_dims.len(), Error::ShapeMismatch)?;
        out.copy_from_slice(x_dims);
        out[self.axis] = self.out_len;
        out[x_dims.len() - 1] = self.out_c;
        Ok(())
    }
}

fn twiddle(mk: usize, n: usize) -> (f64, f64) {
    let angle = 2.0 * PI * ((mk % n) as f64) / n as f64;
    (libm::cos(angle), libm::sin(angle))
}

/// ONNX `DFT` on `x` of shape `x_dims` into `y`, whose shape must be
/// `y_dims` and agree with the layout the run-time `axis` and `dft_length`
/// give.
#[allow(clippy::too_many_arguments)]
pub fn dft<T: Float>(
    x_dims: &[usize],
    axis: i64,
    dft_length: Option<i64>,
    inverse: bool,
    onesided: bool,
    x: &[T],
    y_dims: &[usize],
    y: &mut [T],
) -> Result {
    let l = dft_layout(x_dims, axis, dft_length, inverse, onesided)?;
    let mut want = [0usize; MAX_RANK];
    let want = want.get_mut(..x_dims.len()).ok_or(Error::RankTooLarge)?;
    l.out_dims(x_dims, want)?;
    ensure(want == y_dims, Error::ShapeMismatch)?;
    ensure(x.len() == numel(x_dims)? && y.len() == numel(y_dims)?, Error::ShapeMismatch)?;
    let read = |o: usize, k: usize, i: usize| -> (f64, f64) {
        if k >= l.in_len {
            return (0.0, 0.0);
        }
        let base = ((o * l.in_len + k) * l.inner + i) * l.in_c;
        let re = x.get(base).map_or(0.0, |v| v.to_f64());
        let im = if l.in_c == 2 { x.get(base + 1).map_or(0.0, |v| v.to_f64()) } else { 0.0 };
        (re, im)
    };
    let n = l.n;
    let scale = if inverse { 1.0 / n as f64 } else { 1.0 };
    for o in 0..l.outer {
        for i in 0..l.inner {
            for m in 0..l.out_len {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                if inverse && onesided {
                    let (a0, _) = read(o, 0, i);
                    re = a0;
                    for k in 1..=(n - 1) / 2 {
                        let (ar, ai) = read(o, k, i);
                        let (c, s) = twiddle(m * k, n);
                        re += 2.0 * (ar * c - ai * s);
                    }
                    if n % 2 == 0 {
                        let (ar, _) = read(o, n / 2, i);
                        re += if m % 2 == 0 { ar } else { -ar };
                    }
                } else {
                    let sign = if inverse { 1.0 } else { -1.0 };
                    for k in 0..n.min(l.in_len) {
                        let (ar, ai) = read(o, k, i);
                        let (c, s) = twiddle(m * k, n);
                        let s = sign * s;
                        re += ar * c - ai * s;
                        im += ar * s + ai * c;
                    }
                }
                let base = ((o * l.out_len + m) * l.inner + i) * l.out_c;
                if let Some(v) = y.get_mut(base) {
                    *v = T::from_f64(re * scale);
                }
                if let (2, Some(v)) = (l.out_c, y.get_mut(base + 1)) {
                    *v = T::from_f64(im * scale);
                }
            }
        }
    }
    Ok(())
}

/// The output shape of STFT: `[batch, frames, bins, 2]` for a signal
/// `[batch, len, c]`, a run-time `frame_step`, and a frame length from
/// `frame_length` or else the window's length.
pub fn stft_dims(
    signal: &[usize],
    frame_step: i64,
    window_len: Option<usize>,
    frame_length: Option<i64>,
    onesided: bool,
) -> Result<[usize; 4]> {
    let &[batch, len, c] = signal else { return Err(Error::InvalidParams) };
    ensure(c == 1 || c == 2, Error::InvalidParams)?;
    let step = usize::try_from(frame_step).map_err(|_| Error::InvalidParams)?;
    ensure(step > 0, Error::InvalidParams)?;
    let fl = match (frame_length, window_len) {
        (Some(f), w) => {
            let f = usize::try_from(f).map_err(|_| Error::InvalidParams)?;
            ensure(w.is_none_or(|w| w == f), Error::InvalidParams)?;
            f
        }
        (None, Some(w)) => w,
        (None, None) => len,
    };
    ensure(fl > 0 && fl <= len, Error::InvalidParams)?;
    let frames = 1 + (len - fl) / step;
    let bins = if onesided { fl / 2 + 1 } else { fl };
    Ok([batch, frames, bins, 2])
}

/// ONNX `STFT`: windowed DFTs of the frames of `x` (`[batch, len, c]`).
#[allow(clippy::too_many_arguments)]
pub fn stft<T: Float>(
    signal: &[usize],
    frame_step: i64,
    window: Option<&[T]>,
    frame_length: Option<i64>,
    onesided: bool,
    x: &[T],
    y_dims: &[usize],
    y: &mut [T],
) -> Result {
    let dims = stft_dims(signal, frame_step, window.map(<[T]>::len), frame_length, onesided)?;
    ensure(dims == y_dims, Error::ShapeMismatch)?;
    ensure(x.len() == numel(signal)? && y.len() == numel(&dims)?, Error::ShapeMismatch)?;
    let [batch, frames, bins, _] = dims;
    let (len, c) = (signal[1], signal[2]);
    let step = frame_step as usize;
    let n = match window {
        Some(w) => w.len(),
        None => frame_length.map_or(len, |f| f as usize),
    };
    for b in 0..batch {
        for f in 0..frames {
            for m in 0..bins {
                let (mut re, mut im) = (0.0f64, 0.0f64);
                for k in 0..n {
                    let w = window.and_then(|w| w.get(k)).map_or(1.0, |v| v.to_f64());
                    let base = (b * len + f * step + k) * c;
                    let xr = x.get(base).map_or(0.0, |v| v.to_f64()) * w;
                    let xi =
                        if c == 2 { x.get(base + 1).map_or(0.0, |v| v.to_f64()) * w } else { 0.0 };
                    let (cs, sn) = twiddle(m * k, n);
                    re += xr * cs + xi * sn;
                    im += xi * cs - xr * sn;
                }
                let o = ((b * frames + f) * bins + m) * 2;
                if let Some(v) = y.get_mut(o) {
                    *v = T::from_f64(re);
                }
                if let Some(v) = y.get_mut(o + 1) {
                    *v = T::from_f64(im);
                }
            }
        }
    }
    Ok(())
}

/// A window function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Hann,
    Hamming,
    Blackman,
}

/// ONNX `HannWindow`, `HammingWindow`, `BlackmanWindow`: `y` holds the
/// window of `size` points (the run-time input, which must be `y`'s
/// length), periodic or symmetric.
pub fn window<T: Float>(kind: Window, periodic: bool, size: i64, y: &mut [T]) -> Result {
    ensure(usize::try_from(size).ok() == Some(y.len()), Error::ShapeMismatch)?;
    let len = y.len();
    let denom = if periodic { len as f64 } else { len as f64 - 1.0 };
    for (i, o) in y.iter_mut().enumerate() {
        let t = i as f64 / denom;
        let v = match kind {
            Window::Hann => {
                let s = libm::sin(PI * t);
                s * s
            }
            Window::Hamming => {
                let a = 25.0 / 46.0;
                a - (1.0 - a) * libm::cos(2.0 * PI * t)
            }
            Window::Blackman => {
                0.42 - 0.5 * libm::cos(2.0 * PI * t) + 0.08 * libm::cos(4.0 * PI * t)
            }
        };
        *o = T::from_f64(v);
    }
    Ok(())
}

/// ONNX `MelWeightMatrix` into `y` of shape `[dft_length / 2 + 1,
/// num_mel_bins]`, which must be `y_dims`.
pub fn mel_weight_matrix<T: Float>(
    num_mel_bins: i64,
    dft_length: i64,
    sample_rate: i64,
    lower_edge_hertz: f64,
    upper_edge_hertz: f64,
    y_dims: &[usize],
    y: &mut [T],
) -> Result {
    let mel = usize::try_from(num_mel_bins).map_err(|_| Error::InvalidParams)?;
    let dft = usize::try_from(dft_length).map_err(|_| Error::InvalidParams)?;
    ensure(sample_rate > 0 && mel > 0 && dft > 0, Error::InvalidParams)?;
    let spec = dft / 2 + 1;
    ensure(y_dims == [spec, mel], Error::ShapeMismatch)?;
    ensure(y.len() == numel(y_dims)?, Error::ShapeMismatch)?;
    let to_mel = |hz: f64| 2595.0 * libm::log1p(hz / 700.0) / core::f64::consts::LN_10;
    let (low, high) = (to_mel(lower_edge_hertz), to_mel(upper_edge_hertz));
    let step = (high - low) / (mel + 2) as f64;
    let bin = |i: usize| -> i64 {
        let m = i as f64 * step + low;
        let hz = 700.0 * libm::expm1(m / 2595.0 * core::f64::consts::LN_10);
        libm::floor((dft_length + 1) as f64 * hz / sample_rate as f64) as i64
    };
    y.fill(T::from_f64(0.0));
    let mut set = |j: i64, i: usize, v: f64| -> Result {
        let j = usize::try_from(j).map_err(|_| Error::IndexOutOfBounds)?;
        ensure(j < spec, Error::IndexOutOfBounds)?;
        y[j * mel + i] = T::from_f64(v);
        Ok(())
    };
    for i in 0..mel {
        let (lo, center, hi) = (bin(i), bin(i + 1), bin(i + 2));
        let up = center - lo;
        if up == 0 {
            set(center, i, 1.0)?;
        } else {
            for j in lo..=center {
                set(j, i, (j - lo) as f64 / up as f64)?;
            }
        }
        let down = hi - center;
        if down > 0 {
            for j in center..hi {
                set(j, i, (hi - j) as f64 / down as f64)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dft_of_a_real_signal() {
        let x = [1.0f64, 2.0, 3.0, 4.0];
        let mut y = [0.0f64; 8];
        dft(&[4, 1], 0, None, false, false, &x, &[4, 2], &mut y).unwrap();
        let want = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0];
        for (a, b) in y.iter().zip(want) {
            assert!((a - b).abs() < 1e-12, "{y:?}");
        }
        // The one-sided inverse recovers the signal from bins 0..=2.
        let mut back = [0.0f64; 4];
        dft(&[3, 2], 0, None, true, true, &y[..6], &[4, 1], &mut back).unwrap();
        for (a, b) in back.iter().zip(x) {
            assert!((a - b).abs() < 1e-12, "{back:?}");
        }
        assert_eq!(
            dft(&[4, 1], 0, None, false, false, &x, &[4, 1], &mut y),
            Err(Error::ShapeMismatch)
        );
        assert_eq!(dft_layout(&[4, 1], 1, None, false, false), Err(Error::InvalidParams));
    }

    #[test]
    fn windows_by_hand() {
        let mut y = [0.0f64; 4];
        window(Window::Hann, true, 4, &mut y).unwrap();
        assert!((y[1] - 0.5).abs() < 1e-15 && y[0] == 0.0 && (y[2] - 1.0).abs() < 1e-15);
        window(Window::Hamming, false, 4, &mut y).unwrap();
        assert!((y[0] - 4.0 / 46.0).abs() < 1e-15);
        assert_eq!(window(Window::Blackman, false, 3, &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn stft_shape() {
        assert_eq!(stft_dims(&[1, 128, 1], 8, Some(16), None, true), Ok([1, 15, 9, 2]));
        assert_eq!(stft_dims(&[1, 128, 1], 0, None, Some(16), true), Err(Error::InvalidParams));
    }
}
