//! Image operators: ONNX `Resize` (and `Upsample`, which is a `Resize` with
//! fixed modes).
//!
//! Resize is separable: every output coordinate along an axis maps to a few
//! input coordinates ("taps") with weights, independently of the other axes.
//! The kernel first fills one tap table per axis in a caller-provided `f64`
//! scratch buffer (once per call: a few values per output row and column),
//! then computes every output element as the weighted sum over the product
//! of its axes' taps, in `f64`, rounded once to the element type
//! (saturating, as the reference does), which gives the reference's result
//! up to `f64` rounding.
//!
//! When only the last two axes change (an image's `H` and `W`, the
//! common case), the sums are taken row by row: each input row an output
//! row reads is interpolated along `W` once per plane (into a few rows of
//! the scratch, reused by the output rows that read it), and each output row
//! is the weighted sum of those rows, a loop over contiguous rows that the
//! compiler vectorises. The sums are the element-wise definition's, in the
//! same order, so the results are the same bit for bit. Nearest copies the
//! picked values as they are, a row like the previous one whole, and repeats
//! each value of a whole-number widening (nearest x2) directly. Other axes
//! take the element-wise loop.
//!
//! Scales, sizes and the region of interest are read at run time, so a model
//! whose scales are an input works; the output shape planned at generation
//! time is checked against them.

use crate::shape::MAX_RANK;
use crate::simd;
use crate::{Error, Result, ensure};
use half::{bf16, f16};

/// How output coordinates pick input values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResizeMode {
    /// The nearest input value, ties and non-integers resolved by the mode.
    Nearest(NearestMode),
    /// Linear interpolation between the two neighbours (or a triangle filter
    /// with antialiasing).
    Linear,
    /// Cubic convolution over four neighbours (or a widened cubic filter with
    /// antialiasing).
    Cubic,
}

/// ONNX `nearest_mode`, plus the rule of `Resize-10` / `Upsample`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NearestMode {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Floor when upsampling (scale >= 1), ceil when downsampling: the rule
    /// used for opset-10 `Resize` and for `Upsample`, which predate
    /// `nearest_mode`.
    Legacy,
}

/// ONNX `coordinate_transformation_mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordMode {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

/// ONNX `keep_aspect_ratio_policy` (only used with `sizes`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AspectPolicy {
    Stretch,
    NotLarger,
    NotSmaller,
}

/// Everything about one `Resize` call except the data.
#[derive(Clone, Copy, Debug)]
pub struct ResizeParams<'a> {
    /// The input shape.
    pub input: &'a [usize],
    /// The planned output shape; the call fails unless the scales or sizes
    /// give exactly this shape.
    pub output: &'a [usize],
    /// The axes `scales`, `sizes` and `roi` refer to, in their order.
    pub axes: &'a [usize],
    /// Per axis, the most taps one output coordinate may use (the scratch
    /// layout, see [`resize_scratch_len`]).
    pub taps_cap: &'a [usize],
    pub mode: ResizeMode,
    pub coord: CoordMode,
    pub policy: AspectPolicy,
    pub cubic_a: f64,
    pub exclude_outside: bool,
    pub antialias: bool,
    pub extrapolation: f64,
}

/// The `f64` scratch length a call with these params needs: per axis, one
/// row of `1 + 2 * taps_cap` values per output coordinate; then, for the
/// last two axes, `taps_cap` of the next-to-last axis rows of the last
/// axis's output length, each with its tag (the input rows interpolated
/// along the last axis, see [`resize`]), and the last axis's taps again,
/// `2 * taps_cap` values per output coordinate laid out tap by tap.
pub fn resize_scratch_len(output: &[usize], taps_cap: &[usize]) -> Option<usize> {
    let tables = output.iter().zip(taps_cap).try_fold(0usize, |acc, (&o, &n)| {
        acc.checked_add(o.checked_mul(n.checked_mul(2)?.checked_add(1)?)?)
    })?;
    let r = output.len();
    let (cap_h, w_out) = match r {
        0 => return Some(tables),
        1 => (1, output[0]),
        _ => (taps_cap[r - 2].max(1), output[r - 1]),
    };
    let cap_w = taps_cap[r - 1];
    let rows = cap_h.checked_mul(w_out.checked_add(1)?)?;
    tables.checked_add(rows)?.checked_add(cap_w.checked_mul(2)?.checked_mul(w_out)?)
}

/// The number of taps a mode uses along an axis of scale `scale` (for the
/// antialiased filters, which widen as the image shrinks), or `None` for a
/// scale that is not positive and finite.
pub fn resize_taps(mode: ResizeMode, antialias: bool, scale: f64) -> Option<usize> {
    if !(scale > 0.0 && scale.is_finite()) {
        return None;
    }
    let s = scale.min(1.0);
    let widen = |support: f64| -> Option<usize> {
        // start = floor(-support / s) + 1; taps = 2 - 2 * start.
        let start = libm::floor(-support / s) + 1.0;
        let n = 2.0 - 2.0 * start;
        if n.is_finite() && n <= 1e9 { Some(n as usize) } else { None }
    };
    match (mode, antialias) {
        (ResizeMode::Nearest(_), _) => Some(1),
        (ResizeMode::Linear, false) => Some(2),
        (ResizeMode::Cubic, false) => Some(4),
        (ResizeMode::Linear, true) => widen(1.0),
        (ResizeMode::Cubic, true) => widen(2.0),
    }
}

fn is_close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

/// The scale and output length of axis `a`, from the scales or sizes (one per
/// entry of `p.axes`); axes not listed keep their length.
pub fn resize_axis(
    p: &ResizeParams<'_>,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    a: usize,
) -> Result<(f64, usize)> {
    let input = *p.input.get(a).ok_or(Error::InvalidParams)?;
    let Some(i) = p.axes.iter().position(|&x| x == a) else { return Ok((1.0, input)) };
    ensure(input > 0, Error::InvalidParams)?;
    let len = input as f64;
    if let Some(scales) = scales.filter(|s| !s.is_empty()) {
        ensure(scales.len() == p.axes.len(), Error::ShapeMismatch)?;
        let s = f64::from(scales[i]);
        ensure(s > 0.0 && s.is_finite(), Error::InvalidParams)?;
        let out = libm::floor(s * len);
        ensure(out < 1e15, Error::Overflow)?;
        return Ok((s, out as usize));
    }
    let sizes = sizes.ok_or(Error::InvalidParams)?;
    ensure(sizes.len() == p.axes.len(), Error::ShapeMismatch)?;
    let size_of =
        |j: usize| -> Result<usize> { usize::try_from(sizes[j]).map_err(|_| Error::InvalidParams) };
    if p.policy == AspectPolicy::Stretch {
        let out = size_of(i)?;
        return Ok((out as f64 / len, out));
    }
    let mut scale = f64::NAN;
    for (j, &ax) in p.axes.iter().enumerate() {
        let d = *p.input.get(ax).ok_or(Error::InvalidParams)?;
        ensure(d > 0, Error::InvalidParams)?;
        let r = size_of(j)? as f64 / d as f64;
        scale = match (j, p.policy) {
            (0, _) => r,
            (_, AspectPolicy::NotLarger) => scale.min(r),
            _ => scale.max(r),
        };
    }
    let out = libm::floor(scale * len + 0.5);
    ensure(out.is_finite() && out < 1e15, Error::Overflow)?;
    Ok((scale, out as usize))
}

/// The region of interest of one axis, as the reference computes with it.
#[derive(Clone, Copy, Debug)]
struct Roi {
    /// `roi_end - roi_start`, in the roi's precision.
    span: f64,
    /// `roi_start * (input - 1)`, in the roi's precision.
    offset: f64,
    /// `span * (input - 1) / 2` (for an output of length 1).
    center: f64,
    identity: bool,
}

/// A region-of-interest element: `f32` or `f64`, computed with in its own
/// precision as the reference does.
pub trait RoiElem: Copy {
    /// `(end - start, start * (n - 1), (end - start) * (n - 1) / 2)` in this
    /// type's precision, widened to `f64`.
    fn roi_terms(start: Self, end: Self, input: usize) -> (f64, f64, f64);
    /// Whether `(start, end)` is `(0, 1)` (up to closeness).
    fn is_unit(start: Self, end: Self) -> bool;
}

macro_rules! roi_elem {
    ($t:ty) => {
        impl RoiElem for $t {
            fn roi_terms(start: Self, end: Self, input: usize) -> (f64, f64, f64) {
                let m = input.saturating_sub(1) as $t;
                let span = end - start;
                (span as f64, (start * m) as f64, (span * m / 2.0) as f64)
            }
            fn is_unit(start: Self, end: Self) -> bool {
                start == 0.0 && is_close(end as f64, 1.0)
            }
        }
    };
}
roi_elem!(f32);
roi_elem!(f64);

/// An element `Resize` reads and writes: converted to `f64` exactly, and back
/// with the reference's saturation (integers are rounded half to even and
/// clamped, floats clamped to their finite range).
pub trait Sample: Copy {
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
    /// The values as `f32` when `Self` is `f32` (linear resizes of f32
    /// interpolate in f32).
    #[inline]
    fn as_f32(x: &[Self]) -> Option<&[f32]> {
        let _ = x;
        None
    }
    /// [`Sample::as_f32`], writable.
    #[inline]
    fn as_f32_mut(x: &mut [Self]) -> Option<&mut [f32]> {
        let _ = x;
        None
    }
    /// `v` converted toward zero (saturating) when `Self` is an integer
    /// type, as a C++ `static_cast` from `float` converts in range; `None`
    /// for float types.
    #[inline]
    fn truncated(v: f32) -> Option<Self> {
        let _ = v;
        None
    }
}

macro_rules! sample_float {
    ($t:ty $(, $more:item)*) => {
        impl Sample for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                v.clamp(<$t>::MIN as f64, <$t>::MAX as f64) as $t
            }
            $($more)*
        }
    };
}
sample_float!(
    f32,
    #[inline]
    fn as_f32(x: &[f32]) -> Option<&[f32]> {
        Some(x)
    },
    #[inline]
    fn as_f32_mut(x: &mut [f32]) -> Option<&mut [f32]> {
        Some(x)
    }
);
sample_float!(f64);

macro_rules! sample_half {
    ($t:ty) => {
        impl Sample for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v.clamp(<$t>::MIN.to_f64(), <$t>::MAX.to_f64()))
            }
        }
    };
}
sample_half!(f16);
sample_half!(bf16);

macro_rules! sample_int {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn from_f64(v: f64) -> Self {
                libm::rint(v) as $t
            }
            #[inline]
            fn truncated(v: f32) -> Option<Self> {
                Some(v as $t)
            }
        }
    )*};
}
sample_int!(i8, i16, i32, i64, u8, u16, u32, u64);

/// Linear resizing of integer planes as onnxruntime's CPU kernel does it,
/// for the shapes it runs that way (rank 2, or rank 4 resizing the last
/// two axes; no antialiasing or crop): coordinates and weights in `f32`
/// (`in = (o + 0.5) / scale - 0.5` and the like, clamped to the input; `d1
/// = in - i1`, `d2 = |in - i2|`, both 0.5 at the edge), each output
/// `d2y d2x x11 + d2y d1x x21 + d1y d2x x12 + d1y d1x x22` summed in that
/// order in `f32` and converted toward zero. Rounding to the nearest
/// instead put a quantized DeepLab head's outputs one step off in 12-30%
/// of its values. `Ok(false)` (nothing written) for other types, modes
/// and shapes.
fn integer_bilinear<T: Sample>(
    p: &ResizeParams<'_>,
    x: &[T],
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    y: &mut [T],
    scratch: &mut [f64],
) -> Result<bool> {
    let rank = p.input.len();
    let plane_axes = match rank {
        2 => 0,
        4 if p.input[..2] == p.output[..2] => 2,
        _ => return Ok(false),
    };
    let ok_coord = matches!(
        p.coord,
        CoordMode::HalfPixel
            | CoordMode::PytorchHalfPixel
            | CoordMode::AlignCorners
            | CoordMode::Asymmetric
    );
    if p.mode != ResizeMode::Linear || p.antialias || !ok_coord || T::truncated(0.0).is_none() {
        return Ok(false);
    }
    let mut axis = [(0usize, 0usize, 0f32); 2];
    for (k, a) in (plane_axes..rank).enumerate() {
        let (scale, out) = resize_axis(p, scales, sizes, a)?;
        ensure(out == p.output[a], Error::ShapeMismatch)?;
        axis[k] = (p.input[a], out, scale as f32);
    }
    for a in 0..plane_axes {
        let (scale, _) = resize_axis(p, scales, sizes, a)?;
        if scale != 1.0 {
            return Ok(false);
        }
    }
    let [(h_in, h_out, sh), (w_in, w_out, sw)] = axis;
    if h_in == 0 || w_in == 0 {
        return Ok(false);
    }
    // The source of output coordinate `o` on an axis: the two input
    // positions and their weights (`d2` for the first, `d1` for the second).
    let source = |o: usize, input: usize, out: usize, scale: f32| -> (usize, usize, f32, f32) {
        let of = o as f32;
        let c = if scale == 1.0 {
            of
        } else {
            match p.coord {
                CoordMode::Asymmetric => of / scale,
                CoordMode::AlignCorners if out == 1 => 0.0,
                CoordMode::AlignCorners => of * (input - 1) as f32 / (out - 1) as f32,
                CoordMode::PytorchHalfPixel if out <= 1 => 0.0,
                _ => (of + 0.5) / scale - 0.5,
            }
        };
        let c = c.min((input - 1) as f32).max(0.0);
        let i1 = (c as usize).min(input - 1);
        let i2 = (i1 + 1).min(input - 1);
        if i1 == i2 {
            return (i1, i2, 0.5, 0.5);
        }
        (i1, i2, (c - i2 as f32).abs(), (c - i1 as f32).abs())
    };
    // The columns' sources, once: `x1`, `d2`, `d1` per output column
    // (`x2` follows from `x1`), in the scratch the separable path would
    // use (`resize_scratch_len` gives at least 3 values per output column).
    let columns = scratch.get_mut(..3 * w_out).ok_or(Error::ShapeMismatch)?;
    for (ox, col) in columns.chunks_exact_mut(3).enumerate() {
        let (x1, _, dx2, dx1) = source(ox, w_in, w_out, sw);
        col.copy_from_slice(&[x1 as f64, f64::from(dx2), f64::from(dx1)]);
    }
    let columns: &[f64] = columns;
    let (plane_in, plane_out) = (h_in * w_in, h_out * w_out);
    for (xp, yp) in x.chunks_exact(plane_in).zip(y.chunks_exact_mut(plane_out)) {
        for (oy, yrow) in yp.chunks_exact_mut(w_out).enumerate() {
            let (y1, y2, dy2, dy1) = source(oy, h_in, h_out, sh);
            let (r1, r2) = (&xp[y1 * w_in..][..w_in], &xp[y2 * w_in..][..w_in]);
            for (v, col) in yrow.iter_mut().zip(columns.chunks_exact(3)) {
                let x1 = col[0] as usize;
                let x2 = (x1 + 1).min(w_in - 1);
                let (dx2, dx1) = (col[1] as f32, col[2] as f32);
                let f = |t: T| t.to_f64() as f32;
                let sum = dx2 * dy2 * f(r1[x1])
                    + dx1 * dy2 * f(r1[x2])
                    + dx2 * dy1 * f(r2[x1])
                    + dx1 * dy1 * f(r2[x2]);
                *v = T::truncated(sum).unwrap_or(*v);
            }
        }
    }
    Ok(true)
}

/// The input coordinate output coordinate `y` maps to, and whether it lies
/// outside the input (only `tf_crop_and_resize` extrapolates).
fn source_coord(
    coord: CoordMode,
    y: f64,
    scale: f64,
    input: usize,
    out: usize,
    roi: Roi,
) -> (f64, bool) {
    let len = input as f64;
    let width = scale * len;
    let x = match coord {
        CoordMode::AlignCorners => {
            if width == 1.0 {
                0.0
            } else {
                y * (len - 1.0) / (width - 1.0)
            }
        }
        CoordMode::Asymmetric => y / scale,
        CoordMode::TfHalfPixelForNn => (y + 0.5) / scale,
        CoordMode::PytorchHalfPixel => {
            if width == 1.0 {
                -0.5
            } else {
                (y + 0.5) / scale - 0.5
            }
        }
        CoordMode::HalfPixel => (y + 0.5) / scale - 0.5,
        CoordMode::HalfPixelSymmetric => {
            let adjustment = out as f64 / width;
            let offset = len / 2.0 * (1.0 - adjustment);
            offset + (y + 0.5) / scale - 0.5
        }
        CoordMode::TfCropAndResize => {
            let x =
                if width == 1.0 { roi.center } else { y * roi.span * (len - 1.0) / (width - 1.0) }
                    + roi.offset;
            return (x, x < 0.0 || x > len - 1.0);
        }
    };
    (x, false)
}

fn cubic(a: f64, x: f64) -> f64 {
    let x = x.abs();
    let (x2, x3) = (x * x, x * x * x);
    if x <= 1.0 {
        (a + 2.0) * x3 - (a + 3.0) * x2 + 1.0
    } else if x < 2.0 {
        a * x3 - 5.0 * a * x2 + 8.0 * a * x - 4.0 * a
    } else {
        0.0
    }
}

/// The weights of `n` taps for the fractional position `ratio` in `(0, 1]`.
fn weights(p: &ResizeParams<'_>, scale: f64, ratio: f64, w: &mut [f64]) {
    match (p.mode, p.antialias) {
        (ResizeMode::Nearest(_), _) => {}
        (ResizeMode::Linear, false) => {
            w[0] = 1.0 - ratio;
            w[1] = ratio;
        }
        (ResizeMode::Cubic, false) => {
            let a = p.cubic_a;
            let r1 = ratio + 1.0;
            let q = 1.0 - ratio;
            let q1 = q + 1.0;
            w[0] = ((a * r1 - 5.0 * a) * r1 + 8.0 * a) * r1 - 4.0 * a;
            w[1] = ((a + 2.0) * ratio - (a + 3.0)) * ratio * ratio + 1.0;
            w[2] = ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0;
            w[3] = ((a * q1 - 5.0 * a) * q1 + 8.0 * a) * q1 - 4.0 * a;
        }
        (mode, true) => {
            let s = scale.min(1.0);
            let start = -((w.len() / 2) as f64) + 1.0;
            let mut sum = 0.0;
            for (k, wk) in w.iter_mut().enumerate() {
                let arg = (start + k as f64 - ratio) * s;
                *wk = if mode == ResizeMode::Linear {
                    (1.0 - arg.abs()).clamp(0.0, 1.0)
                } else {
                    cubic(p.cubic_a, s * (start + k as f64 - ratio))
                };
                sum += *wk;
            }
            for wk in w.iter_mut() {
                *wk /= sum;
            }
        }
    }
}

/// Fills `row` (`1 + 2 * cap` values: extrapolated flag, `cap` input
/// indices, `cap` weights; unused taps have weight 0) for output coordinate
/// `y` of an axis.
#[allow(clippy::too_many_arguments)]
fn fill_taps(
    p: &ResizeParams<'_>,
    scale: f64,
    input: usize,
    out: usize,
    roi: Roi,
    n: usize,
    y: usize,
    row: &mut [f64],
) {
    let cap = (row.len() - 1) / 2;
    let (head, rest) = row.split_at_mut(1);
    let (idx, w) = rest.split_at_mut(cap);
    idx.fill(0.0);
    w.fill(0.0);
    let (x, extrapolated) = source_coord(p.coord, y as f64, scale, input, out, roi);
    head[0] = if extrapolated { 1.0 } else { 0.0 };
    let last = input as f64 - 1.0;
    let floor_x = libm::floor(x);
    let ratio = if x == floor_x { 1.0 } else { x - floor_x };
    if let ResizeMode::Nearest(mode) = p.mode {
        // The reference's two-tap window [i, i + 1] around x, one of which is
        // chosen.
        let pad = 1.0;
        let xp = x + pad;
        let pp = libm::floor(xp);
        let lo = if xp - pp == 0.0 { pp - 2.0 } else { pp - 1.0 };
        let take_hi = if ratio == 1.0 {
            true
        } else {
            match mode {
                NearestMode::RoundPreferFloor => ratio > 0.5,
                NearestMode::RoundPreferCeil => ratio >= 0.5,
                NearestMode::Floor => false,
                NearestMode::Ceil => true,
                NearestMode::Legacy => scale < 1.0,
            }
        };
        let i = if take_hi { lo + 1.0 } else { lo };
        idx[0] = i.clamp(0.0, last.max(0.0));
        w[0] = 1.0;
        return;
    }
    let w = &mut w[..n];
    weights(p, scale, ratio, w);
    let pad = libm::ceil(n as f64 / 2.0);
    let xp = x + pad;
    let pp = libm::floor(xp);
    let frac = xp - pp;
    let half = (n / 2) as f64;
    let offset = if n.is_multiple_of(2) {
        if frac == 0.0 { -half } else { -half + 1.0 }
    } else {
        let base = -(((n - 1) / 2) as f64);
        if frac <= 0.5 { base } else { base + 1.0 }
    };
    let start = pp + offset - pad;
    if p.exclude_outside {
        let mut sum = 0.0;
        for (k, wk) in w.iter_mut().enumerate() {
            let i = start + k as f64;
            if i < 0.0 || i > last {
                *wk = 0.0;
            }
            sum += *wk;
        }
        let sum = if sum == 0.0 { 1.0 } else { sum };
        for wk in w.iter_mut() {
            *wk /= sum;
        }
    }
    for (k, ik) in idx[..n].iter_mut().enumerate() {
        *ik = (start + k as f64).clamp(0.0, last.max(0.0));
    }
}

/// One axis's tap table, viewed in the scratch buffer.
#[derive(Clone, Copy)]
struct Table<'s> {
    rows: &'s [f64],
    cap: usize,
    /// The taps this axis uses (the first `n` of each row).
    n: usize,
}

impl<'s> Table<'s> {
    #[inline]
    fn row(self, y: usize) -> (bool, &'s [f64], &'s [f64]) {
        let stride = 1 + 2 * self.cap;
        let r = &self.rows[y * stride..(y + 1) * stride];
        (r[0] != 0.0, &r[1..1 + self.n], &r[1 + self.cap..1 + self.cap + self.n])
    }
}

/// ONNX `Resize`: `x` (shape `p.input`) resized into `y` (shape `p.output`).
/// `scales` (one per entry of `p.axes`; `None` or empty when `sizes` is
/// used), `sizes`, and `roi` (`2 * p.axes.len()` values, starts then ends;
/// read only by `tf_crop_and_resize`) are the node's inputs. `scratch` holds
/// at least [`resize_scratch_len`] values.
#[allow(clippy::too_many_arguments)]
pub fn resize<T: Sample, R: RoiElem>(
    p: &ResizeParams<'_>,
    x: &[T],
    roi: Option<&[R]>,
    scales: Option<&[f32]>,
    sizes: Option<&[i64]>,
    y: &mut [T],
    scratch: &mut [f64],
) -> Result {
    let rank = p.input.len();
    ensure(rank <= MAX_RANK, Error::RankTooLarge)?;
    ensure(p.output.len() == rank && p.taps_cap.len() == rank, Error::InvalidParams)?;
    ensure(p.axes.iter().all(|&a| a < rank), Error::InvalidParams)?;
    let n_in = crate::shape::numel(p.input)?;
    let n_out = crate::shape::numel(p.output)?;
    ensure(x.len() == n_in && y.len() == n_out, Error::ShapeMismatch)?;
    let need = resize_scratch_len(p.output, p.taps_cap).ok_or(Error::Overflow)?;
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    if p.coord == CoordMode::TfCropAndResize {
        let roi = roi.ok_or(Error::InvalidParams)?;
        ensure(roi.len() == 2 * p.axes.len(), Error::ShapeMismatch)?;
    }
    if n_out == 0 {
        return Ok(());
    }
    if integer_bilinear(p, x, scales, sizes, y, scratch)? {
        return Ok(());
    }

    // Plan every axis, fill its tap table, and find the leading axes that
    // stay as they are (walked as whole blocks).
    let mut skip = [true; MAX_RANK];
    let mut caps = [1usize; MAX_RANK];
    let mut ns = [1usize; MAX_RANK];
    let mut rest: &mut [f64] = scratch;
    let mut starts = [0usize; MAX_RANK];
    let mut used = 0;
    for a in 0..rank {
        let (scale, out) = resize_axis(p, scales, sizes, a)?;
        ensure(out == p.output[a], Error::ShapeMismatch)?;
        let input = p.input[a];
        let roi_terms = match (p.coord, roi, p.axes.iter().position(|&x| x == a)) {
            (CoordMode::TfCropAndResize, Some(r), Some(i)) => {
                let (s, e) = (r[i], r[i + p.axes.len()]);
                let (span, offset, center) = R::roi_terms(s, e, input);
                Roi { span, offset, center, identity: R::is_unit(s, e) }
            }
            _ => Roi { span: 1.0, offset: 0.0, center: 0.0, identity: true },
        };
        let identity = out == input && is_close(scale, 1.0) && roi_terms.identity;
        let n = if identity {
            1
        } else {
            resize_taps(p.mode, p.antialias, scale).ok_or(Error::InvalidParams)?
        };
        let cap = p.taps_cap[a];
        ensure(n <= cap, Error::InvalidParams)?;
        skip[a] = identity;
        caps[a] = cap;
        ns[a] = n;
        let stride = 1 + 2 * cap;
        let len = out * stride;
        let (table, tail) = core::mem::take(&mut rest).split_at_mut(len);
        rest = tail;
        starts[a] = used;
        used += len;
        for (o, row) in table.chunks_exact_mut(stride).enumerate() {
            if identity {
                row.fill(0.0);
                row[1] = o as f64;
                row[1 + cap] = 1.0;
            } else {
                fill_taps(p, scale, input, out, roi_terms, n, o, row);
            }
        }
    }
    let (scratch, cache) = scratch.split_at_mut(used);
    let scratch: &[f64] = scratch;
    let table = |a: usize| Table {
        rows: &scratch[starts[a]..starts[a] + p.output[a] * (1 + 2 * caps[a])],
        cap: caps[a],
        n: ns[a],
    };

    let first = (0..rank).find(|&a| !skip[a]).unwrap_or(rank);
    let outer: usize = p.input[..first].iter().product();
    let in_block: usize = p.input[first..].iter().product();
    let out_block: usize = p.output[first..].iter().product();
    let fill = T::from_f64(p.extrapolation);
    if first == rank {
        y.copy_from_slice(x);
        return Ok(());
    }
    if rank - first <= 2 {
        // One or two trailing axes: planes [h, w], with a 1-long h if needed.
        let (th, tw) = if rank - first == 2 {
            (Some(table(first)), table(first + 1))
        } else {
            (None, table(first))
        };
        let [w_in, w_out] = [p.input[rank - 1], p.output[rank - 1]];
        let h_out = if th.is_some() { p.output[rank - 2] } else { 1 };
        let planes = Planes { th, tw, h_out, w_in, w_out, in_block, out_block, fill };
        ensure(x.len() == outer * in_block, Error::ShapeMismatch)?;
        if let ResizeMode::Nearest(_) = p.mode {
            simd::vectorize_wide(NearestPlanes { planes, x, y });
            return Ok(());
        }
        let cap_h = if rank >= 2 { caps[rank - 2] } else { 1 };
        let need = cap_h * (w_out + 1) + 2 * tw.n * w_out;
        let cache = cache.get_mut(..need).ok_or(Error::ShapeMismatch)?;
        let (tags, rest) = cache.split_at_mut(cap_h);
        let (rows, columns) = rest.split_at_mut(cap_h * w_out);
        let columns = Columns::new(tw, w_in, columns);
        let linear = p.mode == ResizeMode::Linear && !p.antialias;
        if let (true, Some(x), Some(y)) = (linear, T::as_f32(x), T::as_f32_mut(y)) {
            // f32 linear: the rows in f32 (half the f64 slots' bytes).
            let rows: &mut [f32] = bytemuck::cast_slice_mut(rows);
            let rows = rows.get_mut(..cap_h * w_out).ok_or(Error::ShapeMismatch)?;
            let fill = <f32 as Sample>::from_f64(p.extrapolation);
            let planes = Planes { th, tw, h_out, w_in, w_out, in_block, out_block, fill };
            simd::vectorize_wide(SeparablePlanes::<Narrow> { planes, columns, x, y, tags, rows });
            return Ok(());
        }
        let planes = SeparablePlanes::<Wide<T>> { planes, columns, x, y, tags, rows };
        simd::vectorize_wide(planes);
        return Ok(());
    }

    // Any number of axes: walk the output block with a counter, and for each
    // element the product of its axes' taps with another.
    let k = rank - first;
    let mut in_strides = [0usize; MAX_RANK];
    let mut s = 1;
    for d in (0..k).rev() {
        in_strides[d] = s;
        s *= p.input[first + d];
    }
    for b in 0..outer {
        let xb = &x[b * in_block..(b + 1) * in_block];
        let yb = &mut y[b * out_block..(b + 1) * out_block];
        let mut pos = [0usize; MAX_RANK];
        for out in yb.iter_mut() {
            let mut ext = false;
            for (d, &pd) in pos[..k].iter().enumerate() {
                ext |= table(first + d).row(pd).0;
            }
            if ext {
                *out = fill;
            } else {
                let mut acc = 0.0;
                let mut tap = [0usize; MAX_RANK];
                'taps: loop {
                    let mut w = 1.0;
                    let mut at = 0;
                    for d in 0..k {
                        let (_, idx, ws) = table(first + d).row(pos[d]);
                        w *= ws[tap[d]];
                        at += idx[tap[d]] as usize * in_strides[d];
                    }
                    acc += w * xb[at].to_f64();
                    let mut d = k;
                    loop {
                        if d == 0 {
                            break 'taps;
                        }
                        d -= 1;
                        tap[d] += 1;
                        if tap[d] < ns[first + d] {
                            break;
                        }
                        tap[d] = 0;
                    }
                }
                *out = T::from_f64(acc);
            }
            let mut d = k;
            while d > 0 {
                d -= 1;
                pos[d] += 1;
                if pos[d] < p.output[first + d] {
                    break;
                }
                pos[d] = 0;
            }
        }
    }
    Ok(())
}

/// The last one or two axes of a `Resize` over planes `[h, w]` (`h` 1 for
/// one axis), with their tap tables; the leading axes are kept.
#[derive(Clone, Copy)]
struct Planes<'s, T> {
    /// The table of `h`, `None` for one axis.
    th: Option<Table<'s>>,
    tw: Table<'s>,
    h_out: usize,
    w_in: usize,
    w_out: usize,
    /// Elements per input and per output plane.
    in_block: usize,
    out_block: usize,
    /// The extrapolation value.
    fill: T,
}

impl<'s, T> Planes<'s, T> {
    /// The taps of output row `oh`.
    #[inline(always)]
    fn h_taps(&self, oh: usize) -> (bool, &'s [f64], &'s [f64]) {
        match self.th {
            Some(t) => t.row(oh),
            None => (false, &[0.0], &[1.0]),
        }
    }

    /// Whether some output column is extrapolated (`tf_crop_and_resize`).
    fn any_column_outside(&self) -> bool {
        (0..self.w_out).any(|ow| self.tw.row(ow).0)
    }

    /// Input row `i` of a plane, if it is in it.
    #[inline(always)]
    fn input_row<'x>(&self, plane: &'x [T], i: f64) -> Option<&'x [T]> {
        let i = i as usize;
        plane.get(i * self.w_in..(i + 1) * self.w_in)
    }
}

/// Nearest `Resize` of the last axes: each output row copies its input
/// row's picked elements, a row like the one before it is copied whole,
/// and a whole-number widening (`iw = ow / f`, nearest x2's) repeats each
/// element `f` times.
struct NearestPlanes<'a, T> {
    planes: Planes<'a, T>,
    x: &'a [T],
    y: &'a mut [T],
}

impl<T: Copy> simd::Vectorize for NearestPlanes<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let NearestPlanes { planes: pl, x, y } = self;
        let (w_in, w_out) = (pl.w_in, pl.w_out);
        let factor = if w_in > 0 && w_out.is_multiple_of(w_in) { w_out / w_in } else { 0 };
        let repeats = factor > 0
            && (0..w_out).all(|ow| {
                let (outside, idx, _) = pl.tw.row(ow);
                !outside && idx.first().is_some_and(|&i| i as usize == ow / factor)
            });
        // The input row of output row `oh`, `None` outside (extrapolated).
        let source = |oh: usize| {
            let (outside, ih, _) = pl.h_taps(oh);
            (!outside).then(|| ih.first().copied().unwrap_or(0.0))
        };
        for (xp, yp) in x.chunks_exact(pl.in_block).zip(y.chunks_exact_mut(pl.out_block)) {
            let mut last: Option<f64> = None;
            let mut oh = 0;
            while oh < pl.h_out {
                let (done, rest) = yp.split_at_mut(oh * w_out);
                let Some(out) = rest.get_mut(..w_out) else { return };
                let Some(i) = source(oh) else {
                    out.fill(pl.fill);
                    last = None;
                    oh += 1;
                    continue;
                };
                // A row like the one before is copied, unless repeating the
                // input row again is as cheap (and spares a call to memcpy
                // per short row).
                if last == Some(i)
                    && !repeats
                    && let Some(prev) = done.get(done.len().saturating_sub(w_out)..)
                {
                    out.copy_from_slice(prev);
                    oh += 1;
                    continue;
                }
                last = Some(i);
                let Some(row) = pl.input_row(xp, i) else { return };
                oh += 1;
                match (repeats, factor) {
                    (true, 1) => out.copy_from_slice(row),
                    (true, 2) => {
                        for (o, &v) in out.chunks_exact_mut(2).zip(row) {
                            o[0] = v;
                            o[1] = v;
                        }
                    }
                    (true, f) => {
                        for (o, &v) in out.chunks_exact_mut(f).zip(row) {
                            o.fill(v);
                        }
                    }
                    _ => {
                        for (ow, o) in out.iter_mut().enumerate() {
                            let (outside, idx, _) = pl.tw.row(ow);
                            let at = idx.first().map_or(usize::MAX, |&j| j as usize);
                            *o = match row.get(at) {
                                Some(&v) if !outside => v,
                                _ => pl.fill,
                            };
                        }
                    }
                }
            }
        }
    }
}

/// The taps of the last axis laid out tap by tap (`at[k][ow]`, `w[k][ow]`
/// for tap `k` of output column `ow`), for the loops that interpolate rows
/// along it, and whether they follow a whole-number widening. The input
/// columns are stored as the bits of their `f64` slot (`f64::from_bits(i
/// as u64)`), read back without a float conversion.
#[derive(Clone, Copy)]
struct Columns<'s> {
    /// Taps per column.
    n: usize,
    /// `n` blocks of `w_out` input columns (their bits), then `n` blocks of
    /// `w_out` weights.
    taps: &'s [f64],
    w_out: usize,
    /// The widening, when the taps repeat with it.
    periodic: Option<Periodic>,
}

/// Taps that repeat every `factor` output columns, one input column
/// further each time: column `factor * j + r` reads input columns `j +
/// shift[r] + k` with weights `w[r][k]`, for `j` in `lo..hi` (outside,
/// the borders clamp the taps and the table says what they are).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Periodic {
    factor: usize,
    lo: usize,
    hi: usize,
    /// The first tap's input column minus `j`, per phase `r`.
    shift: [isize; MAX_FACTOR],
    /// The weights per phase and tap.
    w: [[f64; 2]; MAX_FACTOR],
}

/// The largest widening the periodic row loops take.
const MAX_FACTOR: usize = 4;

impl<'s> Columns<'s> {
    /// Lays out `tw`'s taps in `out` (`2 * tw.n * w_out` values) and looks
    /// for a whole-number widening of `w_in` columns (two taps per column,
    /// consecutive input columns, by 2 or 4).
    fn new(tw: Table<'_>, w_in: usize, out: &'s mut [f64]) -> Columns<'s> {
        let (n, w_out) = (tw.n, tw.rows.len() / (1 + 2 * tw.cap));
        for ow in 0..w_out {
            let (_, idx, ws) = tw.row(ow);
            for k in 0..n {
                if let Some(v) = out.get_mut(k * w_out + ow) {
                    *v = f64::from_bits(idx[k] as u64);
                }
                if let Some(v) = out.get_mut((n + k) * w_out + ow) {
                    *v = ws[k];
                }
            }
        }
        let mut c = Columns { n, taps: out, w_out, periodic: None };
        c.periodic = c.find_period(w_in);
        c
    }

    #[inline(always)]
    fn at(&self, k: usize) -> &'s [f64] {
        self.taps.get(k * self.w_out..(k + 1) * self.w_out).unwrap_or(&[])
    }

    #[inline(always)]
    fn weight(&self, k: usize) -> &'s [f64] {
        self.taps.get((self.n + k) * self.w_out..(self.n + k + 1) * self.w_out).unwrap_or(&[])
    }

    /// The widening the taps follow in the middle of the row, with the
    /// widest run of input columns where they do.
    fn find_period(&self, w_in: usize) -> Option<Periodic> {
        if self.n != 2 || w_in < 4 || !self.w_out.is_multiple_of(w_in) {
            return None;
        }
        let factor = self.w_out / w_in;
        if !(factor == 2 || factor == MAX_FACTOR) {
            return None;
        }
        let (a0, a1, w0, w1) = (self.at(0), self.at(1), self.weight(0), self.weight(1));
        // Column `factor * j + r` follows phase r's pattern at the middle.
        let mid = w_in / 2;
        let mut p =
            Periodic { factor, lo: 0, hi: w_in, shift: [0; MAX_FACTOR], w: [[0.0; 2]; MAX_FACTOR] };
        for r in 0..factor {
            let ow = factor * mid + r;
            p.shift[r] = a0[ow].to_bits() as isize - mid as isize;
            p.w[r] = [w0[ow], w1[ow]];
        }
        let fits = |j: usize| {
            (0..factor).all(|r| {
                let ow = factor * j + r;
                let first = j as isize + p.shift[r];
                a0[ow].to_bits() == first as u64
                    && a1[ow].to_bits() == (first + 1) as u64
                    && w0[ow] == p.w[r][0]
                    && w1[ow] == p.w[r][1]
                    && first >= 0
                    && first + 1 < w_in as isize
            })
        };
        if !fits(mid) {
            return None;
        }
        p.lo = (0..mid).rev().find(|&j| !fits(j)).map_or(0, |j| j + 1);
        p.hi = (mid + 1..w_in).find(|&j| !fits(j)).unwrap_or(w_in);
        Some(p)
    }

    /// `dst[ow] = 0 + w0 * row[a0] + w1 * row[a1] + ...` for every output
    /// column of an input row (in `L`'s arithmetic, taps in order).
    #[inline(always)]
    fn interpolate<L: Lerp>(&self, row: &[L::T], dst: &mut [L::A]) {
        let read = |i: f64| row.get(i.to_bits() as usize).map_or(L::ZERO, |&v| L::load(v));
        let gather = |dst: &mut [L::A], from: usize| {
            if self.n == 2 {
                let (a0, a1) = (self.at(0).get(from..), self.at(1).get(from..));
                let (w0, w1) = (self.weight(0).get(from..), self.weight(1).get(from..));
                let (a0, a1, w0, w1) =
                    (a0.unwrap_or(&[]), a1.unwrap_or(&[]), w0.unwrap_or(&[]), w1.unwrap_or(&[]));
                let taps = a0.iter().zip(a1).zip(w0.iter().zip(w1));
                for (d, ((&i0, &i1), (&v0, &v1))) in dst.iter_mut().zip(taps) {
                    *d = L::ZERO + L::weight(v0) * read(i0) + L::weight(v1) * read(i1);
                }
                return;
            }
            for (t, d) in dst.iter_mut().enumerate() {
                let mut part = L::ZERO;
                for k in 0..self.n {
                    let (a, w) = (self.at(k), self.weight(k));
                    let (Some(&i), Some(&wk)) = (a.get(from + t), w.get(from + t)) else { break };
                    part = part + L::weight(wk) * read(i);
                }
                *d = part;
            }
        };
        let Some(p) = self.periodic else {
            gather(dst, 0);
            return;
        };
        let (lo, hi) = (p.factor * p.lo, (p.factor * p.hi).min(dst.len()));
        let (head, rest) = dst.split_at_mut(lo.min(dst.len()));
        let (body, tail) = rest.split_at_mut(hi.saturating_sub(lo).min(rest.len()));
        gather(head, 0);
        gather(tail, hi);
        match p.factor {
            2 => widen::<L, 2>(&p, row, body),
            _ => widen::<L, MAX_FACTOR>(&p, row, body),
        }
    }
}

/// The middle of a row interpolated by a whole-number widening `F`: output
/// `F * j + r` (from `F * lo`) is `0 + w[r][0] * row[j + shift[r]] +
/// w[r][1] * row[j + shift[r] + 1]`, each phase read from contiguous input
/// and the phases stored interleaved, so the loop vectorises.
#[inline(always)]
fn widen<L: Lerp, const F: usize>(p: &Periodic, row: &[L::T], out: &mut [L::A]) {
    let n = p.hi - p.lo;
    // Phase r's first and second tap over j = lo..hi (in the row: `fits`
    // checked `j + shift[r] >= 0` and `+ 1 < w_in` there).
    let src = |r: usize, k: usize| {
        let from = (p.lo as isize + p.shift[r % MAX_FACTOR]) as usize + k;
        row.get(from..from + n).unwrap_or(&[])
    };
    let w = |r: usize, k: usize| L::weight(p.w[r % MAX_FACTOR][k]);
    let z = L::ZERO;
    if F == 2 {
        let (x00, x01, x10, x11) = (src(0, 0), src(0, 1), src(1, 0), src(1, 1));
        let (w00, w01, w10, w11) = (w(0, 0), w(0, 1), w(1, 0), w(1, 1));
        let xs = x00.iter().zip(x01).zip(x10.iter().zip(x11));
        for (o, ((&a, &b), (&c, &d))) in out.chunks_exact_mut(2).zip(xs) {
            o[0] = z + w00 * L::load(a) + w01 * L::load(b);
            o[1] = z + w10 * L::load(c) + w11 * L::load(d);
        }
        return;
    }
    let xs: [[&[L::T]; 2]; F] = core::array::from_fn(|r| [src(r, 0), src(r, 1)]);
    let ws: [[L::A; 2]; F] = core::array::from_fn(|r| [w(r, 0), w(r, 1)]);
    if xs.iter().flatten().any(|x| x.len() < n) {
        return;
    }
    for (t, o) in out.chunks_exact_mut(F).take(n).enumerate() {
        for r in 0..F {
            o[r] = z + ws[r][0] * L::load(xs[r][0][t]) + ws[r][1] * L::load(xs[r][1][t]);
        }
    }
}

/// An element type and the arithmetic the row kernels interpolate it in.
trait Lerp {
    type T: Copy;
    type A: Copy + core::ops::Add<Output = Self::A> + core::ops::Mul<Output = Self::A>;
    const ZERO: Self::A;
    /// A weight of the tap tables.
    fn weight(w: f64) -> Self::A;
    fn load(t: Self::T) -> Self::A;
    fn store(a: Self::A) -> Self::T;
}

/// `f64` sums rounded once to the element type (saturating): the
/// element-wise definition's arithmetic, bit for bit.
struct Wide<T>(core::marker::PhantomData<T>);

impl<T: Sample> Lerp for Wide<T> {
    type T = T;
    type A = f64;
    const ZERO: f64 = 0.0;
    #[inline(always)]
    fn weight(w: f64) -> f64 {
        w
    }
    #[inline(always)]
    fn load(t: T) -> f64 {
        t.to_f64()
    }
    #[inline(always)]
    fn store(a: f64) -> T {
        T::from_f64(a)
    }
}

/// f32 data interpolated in f32 (the weights rounded to f32), as
/// onnxruntime does: twice the lanes of [`Wide`], results within a few
/// rounding steps of the element-wise definition. Linear resizes of f32
/// take it.
struct Narrow;

impl Lerp for Narrow {
    type T = f32;
    type A = f32;
    const ZERO: f32 = 0.0;
    #[inline(always)]
    fn weight(w: f64) -> f32 {
        w as f32
    }
    #[inline(always)]
    fn load(t: f32) -> f32 {
        t
    }
    #[inline(always)]
    fn store(a: f32) -> f32 {
        a
    }
}

/// Linear, cubic and antialiased `Resize` of the last axes, one axis after
/// the other: each input row a plane's output rows read is interpolated
/// along `w` once, into `rows` (slot `i % cap`, `tags` naming the row it
/// holds), and each output row is the weighted sum of those rows. The sums
/// are those of the element-wise definition, in the same order (`0 + w0 *
/// r0 + w1 * r1 ...` along each axis), in `L`'s arithmetic: with [`Wide`]'s
/// `f64` the results are the same bit for bit.
struct SeparablePlanes<'a, L: Lerp> {
    planes: Planes<'a, L::T>,
    columns: Columns<'a>,
    x: &'a [L::T],
    y: &'a mut [L::T],
    tags: &'a mut [f64],
    rows: &'a mut [L::A],
}

impl<L: Lerp> simd::Vectorize for SeparablePlanes<'_, L> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let SeparablePlanes { planes: pl, columns, x, y, tags, rows } = self;
        let (w_out, cap) = (pl.w_out, tags.len());
        if cap == 0 {
            return;
        }
        let outside_columns = pl.any_column_outside();
        // The slot of input row `i` (a mask for the usual 2 or 4 taps).
        let slot_of = |i: f64| match cap.is_power_of_two() {
            true => i as usize & (cap - 1),
            false => i as usize % cap,
        };
        for (xp, yp) in x.chunks_exact(pl.in_block).zip(y.chunks_exact_mut(pl.out_block)) {
            tags.fill(-1.0);
            for (oh, out) in yp.chunks_exact_mut(w_out.max(1)).take(pl.h_out).enumerate() {
                let (outside, ih, wh) = pl.h_taps(oh);
                if outside {
                    out.fill(pl.fill);
                    continue;
                }
                // Interpolate along w the input rows not in their slot yet.
                for &i in ih {
                    let slot = slot_of(i);
                    if tags[slot] == i {
                        continue;
                    }
                    let (Some(row), Some(dst)) =
                        (pl.input_row(xp, i), rows.get_mut(slot * w_out..(slot + 1) * w_out))
                    else {
                        return;
                    };
                    columns.interpolate::<L>(row, dst);
                    tags[slot] = i;
                }
                let row_of = |i: f64| {
                    let slot = slot_of(i);
                    rows.get(slot * w_out..(slot + 1) * w_out).unwrap_or(&[])
                };
                let z = L::ZERO;
                match (ih, wh) {
                    (&[i0], &[w0]) => {
                        let w0 = L::weight(w0);
                        for (o, &r0) in out.iter_mut().zip(row_of(i0)) {
                            *o = L::store(z + w0 * r0);
                        }
                    }
                    (&[i0, i1], &[w0, w1]) => {
                        let (w0, w1) = (L::weight(w0), L::weight(w1));
                        for (o, (&r0, &r1)) in out.iter_mut().zip(row_of(i0).iter().zip(row_of(i1)))
                        {
                            *o = L::store(z + w0 * r0 + w1 * r1);
                        }
                    }
                    _ => {
                        for (ow, o) in out.iter_mut().enumerate() {
                            let mut acc = z;
                            for (&i, &wi) in ih.iter().zip(wh) {
                                acc = acc + L::weight(wi) * row_of(i).get(ow).copied().unwrap_or(z);
                            }
                            *o = L::store(acc);
                        }
                    }
                }
                if outside_columns {
                    for (ow, o) in out.iter_mut().enumerate() {
                        if pl.tw.row(ow).0 {
                            *o = pl.fill;
                        }
                    }
                }
            }
        }
    }
}

/// ONNX `GridSample` interpolation (`bilinear`/`bicubic` are the opset-16
/// names of `Linear`/`Cubic`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridMode {
    Nearest,
    Linear,
    Cubic,
}

/// ONNX `GridSample` `padding_mode`: what samples outside the input read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GridPadding {
    Zeros,
    Border,
    Reflection,
}

/// Everything about one `GridSample` call except the data.
#[derive(Clone, Copy, Debug)]
pub struct GridSampleParams<'a> {
    /// The input shape `[N, C, D1, ..., Dr]`.
    pub input: &'a [usize],
    /// The output shape `[N, C, O1, ..., Or]`; the grid is `[N, O1, ..., Or, r]`.
    pub output: &'a [usize],
    pub mode: GridMode,
    pub padding: GridPadding,
    pub align_corners: bool,
}

/// A grid element (`f32`, `f64`): the reference maps normalised grid values to
/// input coordinates in the grid's own precision.
pub trait GridElem: Copy {
    /// The input coordinate of normalised `self` along an axis of `len`.
    fn denormalize(self, len: usize, align_corners: bool) -> f64;
    /// `v` rounded to this type's precision.
    fn narrow(v: f64) -> f64;
}

macro_rules! grid_elem {
    ($t:ty) => {
        impl GridElem for $t {
            fn denormalize(self, len: usize, align_corners: bool) -> f64 {
                let n = len as $t;
                let x = if align_corners {
                    (self + 1.0) / 2.0 * (n - 1.0)
                } else {
                    ((self + 1.0) * n - 1.0) / 2.0
                };
                x as f64
            }
            fn narrow(v: f64) -> f64 {
                v as $t as f64
            }
        }
    };
}
grid_elem!(f32);
grid_elem!(f64);

/// Reflects `x` by the nearer border until it lies in `[lo, hi]`.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range.is_nan() || range <= 0.0 {
        return lo;
    }
    let (dx, from_lo) = if x < lo {
        (lo - x, true)
    } else if x > hi {
        (x - hi, false)
    } else {
        return x;
    };
    let n = libm::trunc(dx / range);
    let r = dx - n * range;
    let even = libm::fmod(n, 2.0) == 0.0;
    if even == from_lo { lo + r } else { hi - r }
}

/// The input index tap `i` reads along an axis of `len`, or `None` for a zero.
fn grid_index(i: f64, len: usize, padding: GridPadding, lo: f64, hi: f64) -> Option<usize> {
    let last = len as f64 - 1.0;
    match padding {
        GridPadding::Zeros => (i >= 0.0 && i <= last).then_some(i as usize),
        GridPadding::Border => Some(i.clamp(0.0, last.max(0.0)) as usize),
        GridPadding::Reflection => {
            Some(libm::trunc(reflect(i, lo, hi)).clamp(0.0, last.max(0.0)) as usize)
        }
    }
}

fn keys_cubic(t: f64, w: &mut [f64]) {
    let a = -0.75;
    let t = t.abs();
    w[0] = ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a;
    w[1] = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0;
    w[2] = ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0;
    w[3] = ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a;
}

/// ONNX `GridSample`: `y[n, c, o...]` is `x[n, c]` sampled at the input
/// coordinates `grid[n, o...]` (normalised to `[-1, 1]`, last axis first).
pub fn grid_sample<T: Sample, G: GridElem>(
    p: &GridSampleParams<'_>,
    x: &[T],
    grid: &[G],
    y: &mut [T],
) -> Result {
    let rank = p.input.len();
    ensure((3..=MAX_RANK).contains(&rank), Error::InvalidParams)?;
    ensure(p.output.len() == rank, Error::InvalidParams)?;
    ensure(p.output[..2] == p.input[..2], Error::InvalidParams)?;
    let r = rank - 2;
    let (batch, channels) = (p.input[0], p.input[1]);
    let in_plane = crate::shape::numel(&p.input[2..])?;
    let out_plane = crate::shape::numel(&p.output[2..])?;
    ensure(x.len() == crate::shape::numel(p.input)?, Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(p.output)?, Error::ShapeMismatch)?;
    let grid_len = batch.checked_mul(out_plane).and_then(|v| v.checked_mul(r));
    ensure(grid_len == Some(grid.len()), Error::ShapeMismatch)?;
    let dims = &p.input[2..];
    let mut strides = [0usize; MAX_RANK];
    let mut s = 1;
    for d in (0..r).rev() {
        strides[d] = s;
        s *= dims[d];
    }
    let taps = match p.mode {
        GridMode::Nearest => 1,
        GridMode::Linear => 2,
        GridMode::Cubic => 4,
    };
    for b in 0..batch {
        for o in 0..out_plane {
            let g = &grid[(b * out_plane + o) * r..(b * out_plane + o + 1) * r];
            // Per axis: the taps' input indices (None: a zero) and weights.
            let mut idx = [[None::<usize>; 4]; MAX_RANK];
            let mut wts = [[0.0f64; 4]; MAX_RANK];
            for d in 0..r {
                let len = dims[d];
                let (lo, hi) = if p.align_corners {
                    (0.0, len as f64 - 1.0)
                } else {
                    (-0.5, len as f64 - 0.5)
                };
                let mut v = g[r - 1 - d].denormalize(len, p.align_corners);
                if p.mode == GridMode::Nearest {
                    v = libm::rint(v);
                }
                if v < lo || v > hi {
                    match p.padding {
                        GridPadding::Border => v = v.clamp(0.0, (len as f64 - 1.0).max(0.0)),
                        GridPadding::Reflection => v = G::narrow(reflect(v, lo, hi)),
                        GridPadding::Zeros => {}
                    }
                }
                let at = |i: f64| grid_index(i, len, p.padding, lo, hi);
                match p.mode {
                    GridMode::Nearest => {
                        idx[d][0] = at(libm::trunc(v));
                        wts[d][0] = 1.0;
                    }
                    GridMode::Linear => {
                        let f = libm::floor(v);
                        let t = v - f;
                        idx[d][0] = at(f);
                        idx[d][1] = at(f + 1.0);
                        wts[d][0] = 1.0 - t;
                        wts[d][1] = t;
                    }
                    GridMode::Cubic => {
                        let f = libm::floor(v);
                        keys_cubic(v - f, &mut wts[d]);
                        for (k, slot) in idx[d].iter_mut().enumerate() {
                            *slot = at(f + k as f64 - 1.0);
                        }
                    }
                }
            }
            for c in 0..channels {
                let plane = (b * channels + c) * in_plane;
                let xc = &x[plane..plane + in_plane];
                let mut acc = 0.0;
                let mut tap = [0usize; MAX_RANK];
                'taps: loop {
                    let mut w = 1.0;
                    let mut at = Some(0usize);
                    for d in 0..r {
                        w *= wts[d][tap[d]];
                        at = match (at, idx[d][tap[d]]) {
                            (Some(a), Some(i)) => Some(a + i * strides[d]),
                            _ => None,
                        };
                    }
                    if let Some(a) = at {
                        acc += w * xc[a].to_f64();
                    }
                    let mut d = r;
                    loop {
                        if d == 0 {
                            break 'taps;
                        }
                        d -= 1;
                        tap[d] += 1;
                        if tap[d] < taps {
                            break;
                        }
                        tap[d] = 0;
                    }
                }
                y[(b * channels + c) * out_plane + o] = T::from_f64(acc);
            }
        }
    }
    Ok(())
}

/// Row-major strides of `shape` (at most [`MAX_RANK`] axes).
fn strides_of(shape: &[usize]) -> Result<[usize; MAX_RANK]> {
    ensure(shape.len() <= MAX_RANK, Error::RankTooLarge)?;
    let mut s = [0usize; MAX_RANK];
    let mut acc = 1usize;
    for d in (0..shape.len()).rev() {
        s[d] = acc;
        acc = acc.checked_mul(shape[d]).ok_or(Error::Overflow)?;
    }
    Ok(s)
}

/// ONNX `CenterCropPad`: `y` (shape `output`) is `x` (shape `input`) centred,
/// cropped where an axis shrinks and zero-padded where it grows (the extra
/// element of an odd difference goes to the end). `shape` holds the target
/// length of each axis in `axes`, and must agree with `output`.
pub fn center_crop_pad<T: Copy + Default, I: crate::extra::AsIndex>(
    input: &[usize],
    output: &[usize],
    axes: &[usize],
    shape: &[I],
    x: &[T],
    y: &mut [T],
) -> Result {
    let rank = input.len();
    ensure(output.len() == rank && rank <= MAX_RANK, Error::InvalidParams)?;
    ensure(shape.len() == axes.len(), Error::ShapeMismatch)?;
    for (d, (&i, &o)) in input.iter().zip(output).enumerate() {
        let want = match axes.iter().position(|&a| a == d) {
            Some(k) => usize::try_from(shape[k].as_index()).map_err(|_| Error::ShapeMismatch)?,
            None => i,
        };
        ensure(want == o, Error::ShapeMismatch)?;
    }
    ensure(x.len() == crate::shape::numel(input)?, Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(output)?, Error::ShapeMismatch)?;
    let strides = strides_of(input)?;
    let mut pos = [0usize; MAX_RANK];
    if y.is_empty() {
        return Ok(());
    }
    for v in y.iter_mut() {
        let mut at = Some(0usize);
        for d in 0..rank {
            let (i, o) = (input[d], output[d]);
            // Output coordinate p reads input coordinate p + crop - pad.
            let src =
                if o <= i { Some(pos[d] + (i - o) / 2) } else { pos[d].checked_sub((o - i) / 2) };
            at = match (at, src) {
                (Some(a), Some(s)) if s < i => Some(a + s * strides[d]),
                _ => None,
            };
        }
        *v = at.map_or_else(T::default, |a| x[a]);
        crate::shape::next_index(&mut pos[..rank], output);
    }
    Ok(())
}

/// ONNX `Col2Im`: `x` (`[N, C * prod(block), L]`) holds sliding blocks, which
/// are summed back into `y` (`[N, C, image...]`). `image_shape` and
/// `block_shape` are the node's inputs; `image_shape` must agree with the
/// planned `output`. `dilations`, `strides` (one per image axis) and `pads`
/// (begins then ends) are the attributes.
#[allow(clippy::too_many_arguments)]
pub fn col2im<T: Sample>(
    input: &[usize],
    output: &[usize],
    image_shape: &[i64],
    block_shape: &[i64],
    dilations: &[usize],
    strides: &[usize],
    pads: &[usize],
    x: &[T],
    y: &mut [T],
) -> Result {
    ensure(input.len() == 3 && output.len() >= 3, Error::InvalidParams)?;
    let r = output.len() - 2;
    ensure(r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(image_shape.len() == r && block_shape.len() == r, Error::ShapeMismatch)?;
    ensure(
        dilations.len() == r && strides.len() == r && pads.len() == 2 * r,
        Error::InvalidParams,
    )?;
    let image = &output[2..];
    let mut block = [0usize; MAX_RANK];
    let mut blocks = [0usize; MAX_RANK];
    let (mut block_size, mut n_blocks) = (1usize, 1usize);
    for d in 0..r {
        ensure(usize::try_from(image_shape[d]).ok() == Some(image[d]), Error::ShapeMismatch)?;
        let k = usize::try_from(block_shape[d]).map_err(|_| Error::InvalidParams)?;
        ensure(k > 0 && strides[d] > 0 && dilations[d] > 0, Error::InvalidParams)?;
        let span = dilations[d].checked_mul(k - 1).ok_or(Error::Overflow)? + 1;
        let padded = image[d] + pads[d] + pads[r + d];
        ensure(padded >= span, Error::ShapeMismatch)?;
        block[d] = k;
        blocks[d] = (padded - span) / strides[d] + 1;
        block_size = block_size.checked_mul(k).ok_or(Error::Overflow)?;
        n_blocks = n_blocks.checked_mul(blocks[d]).ok_or(Error::Overflow)?;
    }
    let (batch, channels) = (output[0], output[1]);
    ensure(input[0] == batch, Error::ShapeMismatch)?;
    ensure(channels.checked_mul(block_size) == Some(input[1]), Error::ShapeMismatch)?;
    ensure(input[2] == n_blocks, Error::ShapeMismatch)?;
    ensure(x.len() == crate::shape::numel(input)?, Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(output)?, Error::ShapeMismatch)?;
    let image_strides = strides_of(image)?;
    let plane = crate::shape::numel(image)?;
    y.fill(T::from_f64(0.0));
    if x.is_empty() {
        return Ok(());
    }
    for b in 0..batch {
        for c in 0..channels {
            let yc = &mut y[(b * channels + c) * plane..(b * channels + c + 1) * plane];
            let mut off = [0usize; MAX_RANK];
            for k in 0..block_size {
                let row = ((b * channels + c) * block_size + k) * n_blocks;
                let mut pos = [0usize; MAX_RANK];
                for l in 0..n_blocks {
                    let mut at = Some(0usize);
                    for d in 0..r {
                        let p = pos[d] * strides[d] + off[d] * dilations[d];
                        at = match (at, p.checked_sub(pads[d])) {
                            (Some(a), Some(i)) if i < image[d] => Some(a + i * image_strides[d]),
                            _ => None,
                        };
                    }
                    if let Some(a) = at {
                        yc[a] = T::from_f64(yc[a].to_f64() + x[row + l].to_f64());
                    }
                    crate::shape::next_index(&mut pos[..r], &blocks[..r]);
                }
                crate::shape::next_index(&mut off[..r], &block[..r]);
            }
        }
    }
    Ok(())
}

/// ONNX `AffineGrid`: the sampling grid `y` (`[N, H, W, 2]` or
/// `[N, D, H, W, 3]`, the planned `output`) of the affine maps `theta`
/// (`[N, 2, 3]` or `[N, 3, 4]`) over a normalised `[-1, 1]` grid. `size` is
/// the node's input (`[N, C, H, W]` or `[N, C, D, H, W]`) and must agree.
pub fn affine_grid<T: Sample>(
    output: &[usize],
    align_corners: bool,
    theta: &[T],
    size: &[i64],
    y: &mut [T],
) -> Result {
    ensure(output.len() == 4 || output.len() == 5, Error::InvalidParams)?;
    let r = output.len() - 2;
    ensure(output[r + 1] == r && size.len() == r + 2, Error::ShapeMismatch)?;
    ensure(usize::try_from(size[0]).ok() == Some(output[0]) && size[1] >= 0, Error::ShapeMismatch)?;
    for d in 0..r {
        ensure(usize::try_from(size[2 + d]).ok() == Some(output[1 + d]), Error::ShapeMismatch)?;
    }
    let n = output[0];
    let mat = r * (r + 1);
    ensure(n.checked_mul(mat) == Some(theta.len()), Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(output)?, Error::ShapeMismatch)?;
    let dims = &output[1..=r];
    let coord = |i: usize, len: usize| -> f64 {
        if align_corners {
            if len <= 1 { -1.0 } else { -1.0 + i as f64 * (2.0 / (len as f64 - 1.0)) }
        } else {
            let step = 2.0 / len as f64;
            (-1.0 + step / 2.0) + i as f64 * step
        }
    };
    let points = crate::shape::numel(dims)?;
    for b in 0..n {
        let t = &theta[b * mat..(b + 1) * mat];
        let mut pos = [0usize; MAX_RANK];
        for p in 0..points {
            // The homogeneous point: the last axis first, then 1.
            let mut h = [1.0f64; 4];
            for d in 0..r {
                h[d] = coord(pos[r - 1 - d], dims[r - 1 - d]);
            }
            for k in 0..r {
                let mut acc = 0.0;
                for j in 0..=r {
                    acc += t[k * (r + 1) + j].to_f64() * h[j];
                }
                y[(b * points + p) * r + k] = T::from_f64(acc);
            }
            crate::shape::next_index(&mut pos[..r], dims);
        }
    }
    Ok(())
}

/// `RoiAlign` parameters (the attributes and the planned shapes).
#[derive(Clone, Copy, Debug)]
pub struct RoiAlignParams {
    /// `[N, C, H, W]` of the feature map.
    pub input: [usize; 4],
    /// `[num_rois, C, output_height, output_width]`.
    pub output: [usize; 4],
    /// Max pooling of the weighted corners (as the reference) instead of the
    /// average of the samples.
    pub max: bool,
    /// `half_pixel` coordinates (shift by half a pixel, no minimum size).
    pub half_pixel: bool,
    /// Samples per bin along each axis; 0 adapts to the roi's size.
    pub sampling_ratio: usize,
    pub spatial_scale: f64,
}

/// ONNX `RoiAlign`: for each roi (`rois[r] = [x1, y1, x2, y2]`, of image
/// `batch_indices[r]`), the bins of an `output_height x output_width` grid,
/// each the average (or max) of bilinear samples.
pub fn roi_align<T: Sample>(
    p: &RoiAlignParams,
    x: &[T],
    rois: &[T],
    batch_indices: &[i64],
    y: &mut [T],
) -> Result {
    let [batch, channels, height, width] = p.input;
    let [n_rois, out_c, ph_n, pw_n] = p.output;
    ensure(out_c == channels, Error::InvalidParams)?;
    ensure(x.len() == crate::shape::numel(&p.input)?, Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(&p.output)?, Error::ShapeMismatch)?;
    ensure(rois.len() == n_rois.checked_mul(4).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    ensure(batch_indices.len() == n_rois, Error::ShapeMismatch)?;
    if y.is_empty() {
        return Ok(());
    }
    ensure(height > 0 && width > 0, Error::InvalidParams)?;
    let (h, w) = (height as f64, width as f64);
    let plane = height * width;
    let offset = if p.half_pixel { 0.5 } else { 0.0 };
    for r in 0..n_rois {
        let b = usize::try_from(batch_indices[r]).map_err(|_| Error::IndexOutOfBounds)?;
        ensure(b < batch, Error::IndexOutOfBounds)?;
        let coord = |k: usize| rois[4 * r + k].to_f64() * p.spatial_scale - offset;
        let (start_w, start_h, end_w, end_h) = (coord(0), coord(1), coord(2), coord(3));
        let (mut roi_w, mut roi_h) = (end_w - start_w, end_h - start_h);
        if !p.half_pixel {
            roi_w = roi_w.max(1.0);
            roi_h = roi_h.max(1.0);
        }
        let (bin_h, bin_w) = (roi_h / ph_n as f64, roi_w / pw_n as f64);
        let grid = |size: f64, n: usize| -> usize {
            if p.sampling_ratio > 0 {
                p.sampling_ratio
            } else {
                let g = libm::ceil(size / n as f64);
                if g > 0.0 { g.min(1e9) as usize } else { 0 }
            }
        };
        let (grid_h, grid_w) = (grid(roi_h, ph_n), grid(roi_w, pw_n));
        let count = (grid_h * grid_w).max(1) as f64;
        for c in 0..channels {
            let xc = &x[(b * channels + c) * plane..(b * channels + c + 1) * plane];
            for ph in 0..ph_n {
                for pw in 0..pw_n {
                    let mut acc = 0.0;
                    let mut first = true;
                    for iy in 0..grid_h {
                        let yy =
                            start_h + ph as f64 * bin_h + (iy as f64 + 0.5) * bin_h / grid_h as f64;
                        for ix in 0..grid_w {
                            let xx = start_w
                                + pw as f64 * bin_w
                                + (ix as f64 + 0.5) * bin_w / grid_w as f64;
                            let v = if yy < -1.0 || yy > h || xx < -1.0 || xx > w {
                                [0.0; 4]
                            } else {
                                let corner = |v: f64, len: usize| -> (usize, usize, f64) {
                                    let v = v.max(0.0);
                                    let low = v as usize;
                                    if low + 1 >= len {
                                        let last = len.saturating_sub(1);
                                        (last, last, last as f64)
                                    } else {
                                        (low, low + 1, v)
                                    }
                                };
                                let (y0, y1, yv) = corner(yy, height);
                                let (x0, x1, xv) = corner(xx, width);
                                let (ly, lx) = (yv - y0 as f64, xv - x0 as f64);
                                let (hy, hx) = (1.0 - ly, 1.0 - lx);
                                let at = |yi: usize, xi: usize| xc[yi * width + xi].to_f64();
                                [
                                    hy * hx * at(y0, x0),
                                    hy * lx * at(y0, x1),
                                    ly * hx * at(y1, x0),
                                    ly * lx * at(y1, x1),
                                ]
                            };
                            if p.max {
                                let m = v[0].max(v[1]).max(v[2]).max(v[3]);
                                acc = if first { m } else { acc.max(m) };
                                first = false;
                            } else {
                                acc += v[0] + v[1] + v[2] + v[3];
                            }
                        }
                    }
                    if !p.max {
                        acc /= count;
                    }
                    y[((r * channels + c) * ph_n + ph) * pw_n + pw] = T::from_f64(acc);
                }
            }
        }
    }
    Ok(())
}

/// 2-D `DeformConv` parameters: the planned shapes and the attributes.
#[derive(Clone, Copy, Debug)]
pub struct DeformConvParams {
    /// `[N, C, H, W]`.
    pub input: [usize; 4],
    /// `[OC, C / group, KH, KW]`.
    pub weight: [usize; 4],
    /// `[N, OC, OH, OW]`.
    pub output: [usize; 4],
    pub group: usize,
    pub offset_group: usize,
    pub strides: [usize; 2],
    /// Top, left, bottom, right.
    pub pads: [usize; 4],
    pub dilations: [usize; 2],
}

/// The bilinear sample of a `height x width` plane at `(y, x)`, taps outside
/// the plane reading 0.
fn bilinear_zero<T: Sample>(plane: &[T], height: usize, width: usize, y: f64, x: f64) -> f64 {
    let (y0, x0) = (libm::floor(y), libm::floor(x));
    let (ly, lx) = (y - y0, x - x0);
    let at = |yi: f64, xi: f64| -> f64 {
        if yi >= 0.0 && xi >= 0.0 && yi < height as f64 && xi < width as f64 {
            plane[yi as usize * width + xi as usize].to_f64()
        } else {
            0.0
        }
    };
    (1.0 - ly) * ((1.0 - lx) * at(y0, x0) + lx * at(y0, x0 + 1.0))
        + ly * ((1.0 - lx) * at(y0 + 1.0, x0) + lx * at(y0 + 1.0, x0 + 1.0))
}

/// ONNX `DeformConv` (2-D): a convolution whose kernel taps are displaced by
/// `offset` (`[N, offset_group * KH * KW * 2, OH, OW]`, `(dy, dx)` pairs),
/// sampled bilinearly (zero outside the input), and scaled by `mask`
/// (`[N, offset_group * KH * KW, OH, OW]`, all ones when absent).
pub fn deform_conv<T: Sample>(
    p: &DeformConvParams,
    x: &[T],
    w: &[T],
    offset: &[T],
    bias: Option<&[T]>,
    mask: Option<&[T]>,
    y: &mut [T],
) -> Result {
    let [n, c, h, wd] = p.input;
    let [oc, icpg, kh, kw] = p.weight;
    let [_, _, oh, ow] = p.output;
    ensure(p.output[0] == n && p.output[1] == oc, Error::InvalidParams)?;
    ensure(p.group > 0 && p.offset_group > 0, Error::InvalidParams)?;
    ensure(icpg.checked_mul(p.group) == Some(c) && oc % p.group == 0, Error::InvalidParams)?;
    ensure(c % p.offset_group == 0, Error::InvalidParams)?;
    ensure(x.len() == crate::shape::numel(&p.input)?, Error::ShapeMismatch)?;
    ensure(w.len() == crate::shape::numel(&p.weight)?, Error::ShapeMismatch)?;
    ensure(y.len() == crate::shape::numel(&p.output)?, Error::ShapeMismatch)?;
    let taps = kh * kw;
    let out_plane = oh * ow;
    let off_len = crate::shape::numel(&[n, p.offset_group, taps, 2, out_plane])?;
    ensure(offset.len() == off_len, Error::ShapeMismatch)?;
    if let Some(m) = mask {
        ensure(m.len() == off_len / 2, Error::ShapeMismatch)?;
    }
    if let Some(b) = bias {
        ensure(b.len() == oc, Error::ShapeMismatch)?;
    }
    let (ocpg, icpog) = (oc / p.group, c / p.offset_group);
    for b in 0..n {
        for o in 0..oc {
            let g = o / ocpg;
            for i in 0..oh {
                for j in 0..ow {
                    let mut acc = bias.map_or(0.0, |bv| bv[o].to_f64());
                    let base_h = (i * p.strides[0]) as f64 - p.pads[0] as f64;
                    let base_w = (j * p.strides[1]) as f64 - p.pads[1] as f64;
                    for ci in 0..icpg {
                        let ic = g * icpg + ci;
                        let og = ic / icpog;
                        let plane = &x[(b * c + ic) * h * wd..(b * c + ic + 1) * h * wd];
                        for t in 0..taps {
                            let (ki, kj) = (t / kw, t % kw);
                            let tap = (b * p.offset_group + og) * taps + t;
                            let oy = offset[(tap * 2) * out_plane + i * ow + j].to_f64();
                            let ox = offset[(tap * 2 + 1) * out_plane + i * ow + j].to_f64();
                            let m =
                                mask.map_or(1.0, |mv| mv[tap * out_plane + i * ow + j].to_f64());
                            let sy = base_h + (ki * p.dilations[0]) as f64 + oy;
                            let sx = base_w + (kj * p.dilations[1]) as f64 + ox;
                            let wt = w[(o * icpg + ci) * taps + t].to_f64();
                            acc += wt * m * bilinear_zero(plane, h, wd, sy, sx);
                        }
                    }
                    y[((b * oc + o) * oh + i) * ow + j] = T::from_f64(acc);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params<'a>(
        input: &'a [usize],
        output: &'a [usize],
        caps: &'a [usize],
        mode: ResizeMode,
        coord: CoordMode,
    ) -> ResizeParams<'a> {
        ResizeParams {
            input,
            output,
            axes: &[0],
            taps_cap: caps,
            mode,
            coord,
            policy: AspectPolicy::Stretch,
            cubic_a: -0.75,
            exclude_outside: false,
            antialias: false,
            extrapolation: -1.0,
        }
    }

    #[test]
    fn resize_nearest_and_linear_by_hand() {
        let mut scratch = [0.0f64; 64];
        // Asymmetric floor: x = y / 2 reads 0, 0, 1, 1.
        let p = params(
            &[2],
            &[4],
            &[1],
            ResizeMode::Nearest(NearestMode::Floor),
            CoordMode::Asymmetric,
        );
        let mut y = [0.0f32; 4];
        resize::<f32, f32>(&p, &[5.0, 7.0], None, Some(&[2.0]), None, &mut y, &mut scratch)
            .unwrap();
        assert_eq!(y, [5.0, 5.0, 7.0, 7.0]);
        // Half pixel: x = -0.25, 0.25, 0.75, 1.25, clamped at the edges.
        let p = params(&[2], &[4], &[2], ResizeMode::Linear, CoordMode::HalfPixel);
        resize::<f32, f32>(&p, &[0.0, 10.0], None, Some(&[2.0]), None, &mut y, &mut scratch)
            .unwrap();
        assert_eq!(y, [0.0, 2.5, 7.5, 10.0]);
        // Integers round half to even: 2.5 -> 2, 7.5 -> 8.
        let mut yi = [0i32; 4];
        resize::<i32, f32>(&p, &[0, 10], None, None, Some(&[4]), &mut yi, &mut scratch).unwrap();
        assert_eq!(yi, [0, 2, 8, 10]);
        // Scales that do not give the planned length are refused.
        let p = params(&[2], &[5], &[2], ResizeMode::Linear, CoordMode::HalfPixel);
        let mut y5 = [0.0f32; 5];
        let r =
            resize::<f32, f32>(&p, &[0.0, 1.0], None, Some(&[2.0]), None, &mut y5, &mut scratch);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn integer_bilinear_truncates_as_onnxruntime() {
        // [1, 2, 1, 2] doubled along the width, half_pixel: x = -0.25,
        // 0.25, 0.75, 1.25 (clamped), so row [10, 13] gives 10, 10.75,
        // 12.25, 13. onnxruntime 1.32 gives [[0, 0, 0, 1], [10, 10, 12,
        // 13]]: weights in f32, the sum converted toward zero.
        let (input, output) = ([1usize, 2, 1, 2], [1usize, 2, 1, 4]);
        let mut p =
            params(&input, &output, &[1, 1, 2, 2], ResizeMode::Linear, CoordMode::HalfPixel);
        p.axes = &[0, 1, 2, 3];
        let mut scratch = [0.0f64; 128];
        let mut y = [0u8; 8];
        let scales = [1.0f32, 1.0, 1.0, 2.0];
        resize::<u8, f32>(&p, &[0, 1, 10, 13], None, Some(&scales), None, &mut y, &mut scratch)
            .unwrap();
        assert_eq!(y, [0, 0, 0, 1, 10, 10, 12, 13]);
        // align_corners, [0, 100, 200] by 1.5 to 4 values: onnxruntime
        // divides by the output length less one (x = 0, 2/3, 4/3, 2), not
        // by 4.5 - 1, and gives [0, 66, 133, 200].
        let (input, output) = ([1usize, 1, 1, 3], [1usize, 1, 1, 4]);
        let mut p =
            params(&input, &output, &[1, 1, 2, 2], ResizeMode::Linear, CoordMode::AlignCorners);
        p.axes = &[0, 1, 2, 3];
        let mut y = [0u8; 4];
        let scales = [1.0f32, 1.0, 1.0, 1.5];
        resize::<u8, f32>(&p, &[0, 100, 200], None, Some(&scales), None, &mut y, &mut scratch)
            .unwrap();
        assert_eq!(y, [0, 66, 133, 200]);
    }

    #[test]
    fn resize_crop_extrapolates() {
        // roi [0.5, 1.5] of 3 values, 3 outputs: x = y + 1 -> 1, 2, 3 (outside).
        let mut p = params(&[3], &[3], &[2], ResizeMode::Linear, CoordMode::TfCropAndResize);
        p.extrapolation = -1.0;
        let mut y = [0.0f64; 3];
        // Tables 3 x (1 + 2 * 2), one cached row of 3 and its tag, the
        // 2 taps of 3 columns laid out again with their weights.
        let mut scratch = [0.0f64; 31];
        assert_eq!(resize_scratch_len(&[3], &[2]), Some(15 + 4 + 12));
        resize::<f64, f32>(
            &p,
            &[0.0, 1.0, 2.0],
            Some(&[0.5, 1.5]),
            None,
            Some(&[3]),
            &mut y,
            &mut scratch,
        )
        .unwrap();
        assert_eq!(y, [1.0, 2.0, -1.0]);
        // Without the roi the call is refused.
        let r = resize::<f64, f32>(&p, &[0.0; 3], None, None, Some(&[3]), &mut y, &mut scratch);
        assert_eq!(r, Err(Error::InvalidParams));
    }

    /// The element-wise definition the row kernels follow: every output
    /// the sum over its `h` taps of the weighted sum over its `w` taps, in
    /// `f64`, from the same tap tables (one or two trailing axes resized).
    fn resize_by_element<T: Sample>(
        p: &ResizeParams<'_>,
        x: &[T],
        roi: Option<&[f32]>,
        scales: &[f32],
    ) -> std::vec::Vec<T> {
        let rank = p.input.len();
        let taps_of = |a: usize| {
            let (scale, out) = resize_axis(p, Some(scales), None, a).unwrap();
            let i = p.axes.iter().position(|&v| v == a);
            let roi_terms = match (roi, i) {
                (Some(r), Some(i)) if p.coord == CoordMode::TfCropAndResize => {
                    let (span, offset, center) =
                        f32::roi_terms(r[i], r[i + p.axes.len()], p.input[a]);
                    Roi { span, offset, center, identity: false }
                }
                _ => Roi { span: 1.0, offset: 0.0, center: 0.0, identity: true },
            };
            let same = out == p.input[a] && is_close(scale, 1.0) && roi_terms.identity;
            let n = if same { 1 } else { resize_taps(p.mode, p.antialias, scale).unwrap() };
            (0..out)
                .map(|o| {
                    let mut row = std::vec![0.0; 1 + 2 * n];
                    if same {
                        row[1] = o as f64;
                        row[1 + n] = 1.0;
                    } else {
                        fill_taps(p, scale, p.input[a], out, roi_terms, n, o, &mut row);
                    }
                    row
                })
                .collect::<std::vec::Vec<_>>()
        };
        let (th, tw) = (taps_of(rank - 2), taps_of(rank - 1));
        let (h, w) = (p.input[rank - 2], p.input[rank - 1]);
        let (oh, ow) = (th.len(), tw.len());
        let split = |r: &[f64]| {
            let n = (r.len() - 1) / 2;
            (r[0] != 0.0, r[1..1 + n].to_vec(), r[1 + n..].to_vec())
        };
        let fill = T::from_f64(p.extrapolation);
        let mut y = std::vec::Vec::new();
        for xp in x.chunks_exact(h * w) {
            for hr in &th {
                let (eh, ih, wh) = split(hr);
                for wr in &tw {
                    let (ew, iw, ww) = split(wr);
                    if eh || ew {
                        y.push(fill);
                        continue;
                    }
                    let mut acc = 0.0;
                    for (&i, &wi) in ih.iter().zip(&wh) {
                        let mut part = 0.0;
                        for (&j, &wj) in iw.iter().zip(&ww) {
                            part += wj * xp[i as usize * w + j as usize].to_f64();
                        }
                        acc += wi * part;
                    }
                    y.push(T::from_f64(acc));
                }
            }
        }
        assert_eq!(y.len(), x.len() / (h * w) * oh * ow);
        y
    }

    /// The row kernels (nearest copies, a whole-number widening, rows
    /// interpolated once along `w` then blended) give the element-wise
    /// definition's values bit for bit (f32 linear, interpolated in f32:
    /// within a few rounding steps): every mode, coordinate mode, up and
    /// down, one axis or both, odd sizes, extrapolated crops.
    #[test]
    fn resize_rows_match_the_element_wise_definition() {
        use std::vec::Vec;
        let nearest = [
            NearestMode::RoundPreferFloor,
            NearestMode::RoundPreferCeil,
            NearestMode::Floor,
            NearestMode::Ceil,
            NearestMode::Legacy,
        ];
        let mut modes: Vec<(ResizeMode, bool)> =
            nearest.iter().map(|&m| (ResizeMode::Nearest(m), false)).collect();
        modes.extend([
            (ResizeMode::Linear, false),
            (ResizeMode::Cubic, false),
            (ResizeMode::Linear, true),
            (ResizeMode::Cubic, true),
        ]);
        let coords = [
            CoordMode::HalfPixel,
            CoordMode::HalfPixelSymmetric,
            CoordMode::PytorchHalfPixel,
            CoordMode::AlignCorners,
            CoordMode::Asymmetric,
            CoordMode::TfHalfPixelForNn,
            CoordMode::TfCropAndResize,
        ];
        // [N, C, H, W] and the scales of H and W.
        let shapes: [([usize; 4], [f32; 2]); 7] = [
            ([1, 3, 5, 7], [2.0, 2.0]),
            ([2, 2, 4, 9], [4.0, 4.0]),
            ([1, 2, 9, 13], [0.5, 0.7]),
            ([1, 1, 6, 5], [3.0, 1.5]),
            ([1, 2, 5, 6], [1.0, 2.0]),
            ([1, 2, 7, 3], [2.5, 1.0]),
            ([1, 1, 1, 17], [1.0, 0.25]),
        ];
        let mut checked = 0;
        for (dims, [sh, sw]) in shapes {
            let len: usize = dims.iter().product();
            let x: Vec<f32> = (0..len).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
            let xu: Vec<u8> = (0..len).map(|i| (i * 53 % 256) as u8).collect();
            let xh: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
            let roi = [0.0f32, 0.0, -0.2, 0.1, 1.0, 1.0, 0.9, 1.3];
            for &(mode, antialias) in &modes {
                for coord in coords {
                    let scales = [1.0, 1.0, sh, sw];
                    let axes = [0, 1, 2, 3];
                    let mut p = ResizeParams {
                        input: &dims,
                        output: &dims,
                        axes: &axes,
                        taps_cap: &[1, 1, 1, 1],
                        mode,
                        coord,
                        policy: AspectPolicy::Stretch,
                        cubic_a: -0.5,
                        exclude_outside: coord == CoordMode::HalfPixel,
                        antialias,
                        extrapolation: 2.5,
                    };
                    let out: Vec<usize> = (0..4)
                        .map(|a| resize_axis(&p, Some(&scales), None, a).unwrap().1)
                        .collect();
                    let caps: Vec<usize> = (0..4)
                        .map(|a| {
                            let s = f64::from(scales[a]);
                            resize_taps(mode, antialias, s).unwrap().max(1)
                        })
                        .collect();
                    p.output = &out;
                    p.taps_cap = &caps;
                    let mut scratch = std::vec![f64::NAN; resize_scratch_len(&out, &caps).unwrap()];
                    let n_out: usize = out.iter().product();
                    let roi = Some(&roi[..]);
                    let want = resize_by_element(&p, &x, roi, &scales);
                    let mut got = std::vec![f32::NAN; n_out];
                    resize(&p, &x, roi, Some(&scales), None, &mut got, &mut scratch).unwrap();
                    let in_f32 = mode == ResizeMode::Linear && !antialias;
                    for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                        let close = match in_f32 {
                            // |x| < 9 and weights in [0, 1]: a few f32 steps.
                            true => (a - b).abs() <= 8.0 * 9.0 * f32::EPSILON,
                            false => a.to_bits() == b.to_bits(),
                        };
                        assert!(
                            close,
                            "{dims:?} x {sh}, {sw} {mode:?} {antialias} {coord:?} [{k}]: {a} vs {b}"
                        );
                    }
                    let mut got = std::vec![0u8; n_out];
                    resize(&p, &xu, roi, Some(&scales), None, &mut got, &mut scratch).unwrap();
                    let ort_bilinear = in_f32
                        && matches!(
                            coord,
                            CoordMode::HalfPixel
                                | CoordMode::PytorchHalfPixel
                                | CoordMode::AlignCorners
                                | CoordMode::Asymmetric
                        );
                    // onnxruntime's align_corners divides by the output
                    // length less one where the definition here divides by
                    // `input * scale` less one: they agree when that is
                    // whole (`integer_bilinear_truncates_as_onnxruntime`
                    // has a case where it is not).
                    let whole = dims[2..].iter().zip([sh, sw]).all(|(&d, s)| {
                        let l = d as f64 * f64::from(s);
                        l == l.floor()
                    });
                    if ort_bilinear && (coord != CoordMode::AlignCorners || whole) {
                        // Converted toward zero after an f32 sum
                        // (`integer_bilinear`): the definition's value
                        // truncated, give or take its f32 rounding.
                        let xf: Vec<f64> = xu.iter().map(|&v| f64::from(v)).collect();
                        let want = resize_by_element(&p, &xf, roi, &scales);
                        for (k, (&a, &b)) in got.iter().zip(&want).enumerate() {
                            let ok = [b - 1e-4, b + 1e-4].iter().any(|v| f64::from(a) == v.floor());
                            assert!(ok, "u8 {dims:?} {coord:?} [{k}]: {a} vs {b}");
                        }
                    } else if !ort_bilinear {
                        let want = resize_by_element(&p, &xu, roi, &scales);
                        assert_eq!(got, want, "u8 {dims:?} {mode:?} {coord:?}");
                    }
                    let want = resize_by_element(&p, &xh, roi, &scales);
                    let mut got = std::vec![f16::ZERO; n_out];
                    resize(&p, &xh, roi, Some(&scales), None, &mut got, &mut scratch).unwrap();
                    assert_eq!(got, want, "f16 {dims:?} {mode:?} {coord:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, 7 * 9 * 7);
    }

    #[test]
    fn resize_nearest_copies_values_as_they_are() {
        // Infinities and the largest integers pass through nearest unchanged.
        let p = params(
            &[3],
            &[6],
            &[1],
            ResizeMode::Nearest(NearestMode::Floor),
            CoordMode::Asymmetric,
        );
        let mut scratch = [0.0f64; 37];
        assert_eq!(resize_scratch_len(&[6], &[1]), Some(37));
        let mut y = [0.0f32; 6];
        let x = [f32::INFINITY, -1.5, f32::NEG_INFINITY];
        resize::<f32, f32>(&p, &x, None, Some(&[2.0]), None, &mut y, &mut scratch).unwrap();
        assert_eq!(y, [x[0], x[0], x[1], x[1], x[2], x[2]]);
        let mut yi = [0i64; 6];
        let xi = [i64::MAX, i64::MIN + 1, 3];
        resize::<i64, f32>(&p, &xi, None, Some(&[2.0]), None, &mut yi, &mut scratch).unwrap();
        assert_eq!(yi, [xi[0], xi[0], xi[1], xi[1], xi[2], xi[2]]);
    }

    #[test]
    fn resize_taps_widen_with_antialias() {
        assert_eq!(resize_taps(ResizeMode::Linear, false, 0.25), Some(2));
        // Scale 1/2: start = floor(-2) + 1 = -1, taps = 4; cubic: start -3, taps 8.
        assert_eq!(resize_taps(ResizeMode::Linear, true, 0.5), Some(4));
        assert_eq!(resize_taps(ResizeMode::Cubic, true, 0.5), Some(8));
        assert_eq!(resize_taps(ResizeMode::Cubic, true, 2.0), Some(4));
        assert_eq!(resize_taps(ResizeMode::Linear, true, 0.0), None);
    }

    #[test]
    fn grid_sample_by_hand() {
        let x = [1.0f32, 2.0, 3.0, 4.0];
        let p = GridSampleParams {
            input: &[1, 1, 2, 2],
            output: &[1, 1, 1, 3],
            mode: GridMode::Linear,
            padding: GridPadding::Zeros,
            align_corners: false,
        };
        // The centre averages all four; (-1, -1) is the corner of pixel 0,
        // which lies half outside: a quarter of 1; far outside is 0.
        let grid = [0.0f32, 0.0, -1.0, -1.0, 5.0, 5.0];
        let mut y = [9.0f32; 3];
        grid_sample(&p, &x, &grid, &mut y).unwrap();
        assert_eq!(y, [2.5, 0.25, 0.0]);
        let p = GridSampleParams {
            mode: GridMode::Nearest,
            align_corners: true,
            padding: GridPadding::Border,
            ..p
        };
        grid_sample(&p, &x, &[1.0f32, -1.0, -1.0, 1.0, 5.0, 5.0], &mut y).unwrap();
        assert_eq!(y, [2.0, 3.0, 4.0]);
        assert_eq!(reflect(-1.0, -0.5, 1.5), 0.0);
        assert_eq!(reflect(4.0, 0.0, 3.0), 2.0);
    }

    #[test]
    fn crop_pad_col2im_affine_by_hand() {
        let mut y = [0i64; 3];
        center_crop_pad(&[5], &[3], &[0], &[3i64], &[1i64, 2, 3, 4, 5], &mut y).unwrap();
        assert_eq!(y, [2, 3, 4]);
        let mut y = [9i64; 5];
        center_crop_pad(&[2], &[5], &[0], &[5i32], &[1i64, 2], &mut y).unwrap();
        assert_eq!(y, [0, 1, 2, 0, 0]);
        assert_eq!(
            center_crop_pad(&[2], &[5], &[0], &[4i32], &[1i64, 2], &mut y),
            Err(Error::ShapeMismatch)
        );
        // Two blocks of length 2 over an image of 3: the middle gets both.
        let mut y = [0.0f32; 3];
        col2im(
            &[1, 2, 2],
            &[1, 1, 3],
            &[3],
            &[2],
            &[1],
            &[1],
            &[0, 0],
            &[1.0f32, 2.0, 10.0, 20.0],
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [1.0, 12.0, 20.0]);
        // Identity theta on a 1 x 2 grid: x = -0.5, 0.5 and y = 0.
        let mut g = [9.0f64; 4];
        affine_grid(
            &[1, 1, 2, 2],
            false,
            &[1.0f64, 0.0, 0.0, 0.0, 1.0, 0.0],
            &[1, 3, 1, 2],
            &mut g,
        )
        .unwrap();
        assert_eq!(g, [-0.5, 0.0, 0.5, 0.0]);
    }

    #[test]
    fn roi_align_and_deform_conv_by_hand() {
        let p = RoiAlignParams {
            input: [1, 1, 4, 4],
            output: [1, 1, 2, 2],
            max: false,
            half_pixel: true,
            sampling_ratio: 2,
            spatial_scale: 1.0,
        };
        let mut y = [0.0f32; 4];
        roi_align(&p, &[3.0f32; 16], &[0.0, 0.0, 3.0, 3.0], &[0], &mut y).unwrap();
        assert_eq!(y, [3.0; 4]);
        assert_eq!(
            roi_align(&p, &[3.0f32; 16], &[0.0; 4], &[1], &mut y),
            Err(Error::IndexOutOfBounds)
        );
        // Zero offsets make DeformConv a plain convolution: 2x2 window sums.
        let dp = DeformConvParams {
            input: [1, 1, 3, 3],
            weight: [1, 1, 2, 2],
            output: [1, 1, 2, 2],
            group: 1,
            offset_group: 1,
            strides: [1, 1],
            pads: [0; 4],
            dilations: [1, 1],
        };
        let x: [f32; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let mut y = [0.0f32; 4];
        deform_conv(&dp, &x, &[1.0; 4], &[0.0; 32], Some(&[0.5]), None, &mut y).unwrap();
        assert_eq!(y, [12.5, 16.5, 24.5, 28.5]);
        // Shifting every tap down by one row reads the next row (zero below).
        let mut off = [0.0f32; 32];
        for t in 0..4 {
            off[t * 8..t * 8 + 4].fill(1.0);
        }
        deform_conv(&dp, &x, &[1.0; 4], &off, None, None, &mut y).unwrap();
        assert_eq!(y, [24.0, 28.0, 15.0, 17.0]);
    }
}
