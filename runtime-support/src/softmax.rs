//! Softmax, LogSoftmax and Hardmax along one axis (opset 13 semantics: the
//! axis alone is normalised, the tensor seen as `[outer, axis, inner]`).
//!
//! Softmax subtracts each lane's maximum before exponentiating, so large
//! inputs neither overflow nor lose the result. The lane's sum follows
//! [`Num::sum_step`], as the reference's numpy sums do.

use crate::norm::AxisShape;
use crate::num::{Flag, Float, Num};
use crate::{Error, Result, ensure, simd, vmath};

fn check<T>(s: AxisShape, x: &[T], y: &[T]) -> Result {
    let n = s.len()?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)
}

fn lane_max<T: Float>(s: AxisShape, x: &[T], base: usize) -> T {
    (0..s.axis).fold(T::LOWEST, |m, j| m.max_of(x[base + j * s.inner]))
}

/// ONNX `Softmax`: `y = e^(x - max) / sum(e^(x - max))` along the axis.
pub fn softmax<T: Float>(s: AxisShape, x: &[T], y: &mut [T]) -> Result {
    check(s, x, y)?;
    s.lanes(|base| {
        let m = lane_max(s, x, base);
        let mut sum = T::Acc::ZERO;
        for j in 0..s.axis {
            let e = x[base + j * s.inner].sub(m).exp();
            y[base + j * s.inner] = e;
            sum = T::sum_step(sum, e);
        }
        let sum = T::from_acc(sum);
        for j in 0..s.axis {
            let at = base + j * s.inner;
            y[at] = y[at].div(sum).unwrap_or(T::NAN);
        }
    });
    Ok(())
}

/// [`softmax`] on f32 for generated code: over the last axis (`inner == 1`)
/// each row is a straight vectorised pass with the vector exponential (explicit
/// AVX code, else [`vmath::exp`]) and sixteen partial sums (a few ulp from
/// [`softmax`]); any other axis runs
/// [`softmax`] itself. Constant folding keeps [`softmax`].
pub fn ssoftmax(s: AxisShape, x: &[f32], y: &mut [f32]) -> Result {
    check(s, x, y)?;
    if s.inner != 1 || s.axis == 0 {
        return softmax(s, x, y);
    }
    simd::vectorize_wide(SoftmaxRows { axis: s.axis, x, y });
    Ok(())
}

/// The rows of one [`ssoftmax`] call.
struct SoftmaxRows<'a> {
    axis: usize,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl simd::Vectorize for SoftmaxRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        for (xr, yr) in self.x.chunks_exact(self.axis).zip(self.y.chunks_exact_mut(self.axis)) {
            softmax_row(xr, yr);
        }
    }
}

/// Lanes of the partial maxima and sums of one vectorised row.
const L: usize = 16;

/// One row of [`ssoftmax`]; `y` has `x`'s length.
#[inline(always)]
fn softmax_row(x: &[f32], y: &mut [f32]) {
    if simd::softmax_row(Some(x), y) {
        return;
    }
    let m = row_max(x);
    for (o, &v) in y.iter_mut().zip(x) {
        *o = v - m;
    }
    exp_row(y);
    normalise(y);
}

/// [`softmax_row`] on a row already in `y`: the same operations.
#[inline(always)]
fn softmax_row_in_place(y: &mut [f32]) {
    if simd::softmax_row(None, y) {
        return;
    }
    portable_row_in_place(y);
}

/// [`softmax_row_in_place`] without the explicit vector code.
#[inline(always)]
fn portable_row_in_place(y: &mut [f32]) {
    let m = row_max(y);
    for o in y.iter_mut() {
        *o -= m;
    }
    exp_row(y);
    normalise(y);
}

/// `y[i] = e^y[i]`: the explicit vector routine where the CPU has one, else
/// [`vmath::exp`] in a loop of its own (it vectorises whole; with the sum in
/// the same loop it stayed scalar).
#[inline(always)]
fn exp_row(y: &mut [f32]) {
    if simd::exp_family(simd::VFunc::Exp, None, y) {
        return;
    }
    for o in y.iter_mut() {
        *o = vmath::exp(*o);
    }
}

/// The row's maximum over `L` partial maxima. A NaN is skipped here but
/// reaches every output through the sum.
#[inline(always)]
fn row_max(x: &[f32]) -> f32 {
    let mut mx = [f32::NEG_INFINITY; L];
    let mut chunks = x.chunks_exact(L);
    for c in &mut chunks {
        for (m, &v) in mx.iter_mut().zip(c) {
            *m = if v > *m { v } else { *m };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &v in mx.iter().chain(chunks.remainder()) {
        m = if v > m { v } else { m };
    }
    m
}

/// Divides the row of exponentials by their sum (sixteen partial sums).
#[inline(always)]
fn normalise(y: &mut [f32]) {
    let sum = vmath::lane_sum(y);
    // One division, then products: within an ulp of dividing each.
    let r = 1.0 / sum;
    for o in y.iter_mut() {
        *o *= r;
    }
}

/// What [`ssoftmax_scaled`] applies to its input before the Softmax: the
/// `Div` by a constant and the `Where` with a mask that attention scores go
/// through (the rewrite `fold_softmax_prologue` of the generator).
#[derive(Clone, Copy, Debug)]
pub struct Prologue<'a> {
    /// `x / divisor` first, when set.
    pub divisor: Option<f32>,
    /// Then the mask, when set.
    pub mask: Option<Mask<'a>>,
}

/// A boolean mask broadcast over the Softmax input: an element stays where
/// the mask's value equals `keep` and becomes `fill` elsewhere (ONNX
/// `Where(mask, v, fill)` has `keep = true`, `Where(mask, fill, v)` false).
#[derive(Clone, Copy, Debug)]
pub struct Mask<'a> {
    /// The input's shape.
    pub shape: &'a [usize],
    /// The mask's strides over `shape` (0 on broadcast axes); the last is 0 or 1.
    pub strides: &'a [isize],
    /// The value of masked elements.
    pub fill: f32,
    /// The mask value that keeps an element.
    pub keep: bool,
}

/// [`ssoftmax`] over the last axis of `prologue` applied to `x`: each row is
/// scaled and masked into `y` and normalised there, in one vectorised pass
/// per row instead of three over the whole tensor. The same operations as
/// `sarith(Div)`, `where_` and [`ssoftmax`] in turn, so the same results bit
/// for bit. `mask` is read only with [`Prologue::mask`].
pub fn ssoftmax_scaled<F: Flag>(
    s: AxisShape,
    prologue: &Prologue<'_>,
    x: &[f32],
    mask: &[F],
    y: &mut [f32],
) -> Result {
    check(s, x, y)?;
    ensure(s.inner == 1, Error::ShapeMismatch)?;
    if s.axis == 0 || s.outer == 0 {
        return Ok(());
    }
    if let Some(m) = &prologue.mask {
        let n = crate::shape::numel(m.shape)?;
        crate::shape::check_strided(m.shape, m.strides, 0, mask.len())?;
        let last = m.shape.last().copied().zip(m.strides.last().copied());
        ensure(n == x.len() && m.shape.len() == m.strides.len(), Error::ShapeMismatch)?;
        ensure(matches!(last, Some((d, 0 | 1)) if d == s.axis), Error::ShapeMismatch)?;
    }
    simd::vectorize_wide(ScaledRows { axis: s.axis, prologue: *prologue, x, mask, y });
    Ok(())
}

/// The rows of one [`ssoftmax_scaled`] call (checked).
struct ScaledRows<'a, F> {
    axis: usize,
    prologue: Prologue<'a>,
    x: &'a [f32],
    mask: &'a [F],
    y: &'a mut [f32],
}

impl<F: Flag> simd::Vectorize for ScaledRows<'_, F> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let ScaledRows { axis, prologue, x, mask, y } = self;
        let rows = x.chunks_exact(axis).zip(y.chunks_exact_mut(axis));
        for (r, (xr, yr)) in rows.enumerate() {
            match prologue.divisor {
                Some(c) => {
                    for (o, &v) in yr.iter_mut().zip(xr) {
                        *o = v / c;
                    }
                }
                None => yr.copy_from_slice(xr),
            }
            if let Some(m) = &prologue.mask {
                let rank = m.shape.len();
                let (outer, strides) = (&m.shape[..rank - 1], &m.strides[..rank - 1]);
                let Some([at]) = crate::elementwise::row_start(outer, [strides], r) else {
                    continue;
                };
                let (fill, keep) = (m.fill, m.keep);
                if m.strides[rank - 1] == 1 {
                    let Some(mr) = mask.get(at..at + axis) else { continue };
                    for (o, f) in yr.iter_mut().zip(mr) {
                        *o = if f.get() == keep { *o } else { fill };
                    }
                } else if mask.get(at).is_some_and(|f| f.get() != keep) {
                    yr.fill(fill);
                }
            }
            softmax_row_in_place(yr);
        }
    }
}

/// ONNX `LogSoftmax`: `y = x - max - ln(sum(e^(x - max)))` along the axis.
pub fn log_softmax<T: Float>(s: AxisShape, x: &[T], y: &mut [T]) -> Result {
    check(s, x, y)?;
    s.lanes(|base| {
        let m = lane_max(s, x, base);
        let mut sum = T::Acc::ZERO;
        for j in 0..s.axis {
            sum = T::sum_step(sum, x[base + j * s.inner].sub(m).exp());
        }
        let lse = T::from_acc(sum).ln();
        for j in 0..s.axis {
            let at = base + j * s.inner;
            y[at] = x[at].sub(m).sub(lse);
        }
    });
    Ok(())
}

/// ONNX `Hardmax`: 1 at the first maximum of each lane, 0 elsewhere.
pub fn hardmax<T: Num>(s: AxisShape, x: &[T], y: &mut [T]) -> Result {
    check(s, x, y)?;
    s.lanes(|base| {
        let mut best = 0;
        for j in 0..s.axis {
            let at = base + j * s.inner;
            y[at] = T::ZERO;
            if x[at] > x[base + best * s.inner] {
                best = j;
            }
        }
        if s.axis > 0 {
            y[base + best * s.inner] = T::ONE;
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn softmax_hand_and_properties() {
        // Equal inputs share the mass evenly; shifting all inputs changes nothing.
        let s = AxisShape { outer: 1, axis: 4, inner: 1 };
        let mut y = [0.0f32; 4];
        softmax(s, &[7.0; 4], &mut y).unwrap();
        assert_eq!(y, [0.25; 4]);
        // [0, ln 3] -> [1/4, 3/4].
        let s2 = AxisShape { outer: 1, axis: 2, inner: 1 };
        let mut y2 = [0.0f64; 2];
        softmax(s2, &[0.0, 3.0f64.ln()], &mut y2).unwrap();
        assert!((y2[0] - 0.25).abs() < 1e-15 && (y2[1] - 0.75).abs() < 1e-15);
        // Huge inputs do not overflow, and rows sum to 1.
        let x = [1000.0f64, 1001.0, 999.0, -5.0, 0.0, 5.0];
        let s = AxisShape { outer: 2, axis: 3, inner: 1 };
        let mut y = [0.0f64; 6];
        softmax(s, &x, &mut y).unwrap();
        for row in y.chunks(3) {
            assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        }
        assert!(y[1] > y[0] && y[0] > y[2]);
        // Along axis 0 of [2, 2] (inner = 2): columns sum to 1.
        let s = AxisShape { outer: 1, axis: 2, inner: 2 };
        let mut y = [0.0f32; 4];
        softmax(s, &[0.0, 5.0, 0.0, 5.0], &mut y).unwrap();
        assert_eq!(y, [0.5; 4]);
    }

    #[test]
    fn vector_rows_are_the_portable_rows_bit_for_bit() {
        // Every length up to past three vectors, with NaN, infinities,
        // signed zeros, ties and values far below the maximum.
        let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.0, 88.0, -120.0];
        for n in 1..=53usize {
            for case in 0..4usize {
                let x: std::vec::Vec<f32> = (0..n)
                    .map(|i| match case {
                        0 => ((i * 37 % 23) as f32 - 11.0) * 0.9,
                        1 => (i % 3) as f32,
                        2 if i % 5 == 1 => special[(i / 5) % special.len()],
                        _ => -((i * 13 % 17) as f32) * 7.5,
                    })
                    .collect();
                let mut want = x.clone();
                portable_row_in_place(&mut want);
                let mut got = std::vec![9.0f32; n];
                softmax_row(&x, &mut got);
                let mut in_place = x.clone();
                softmax_row_in_place(&mut in_place);
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let same =
                        |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
                    assert!(
                        same(*g, *w) && same(in_place[i], *w),
                        "n {n} case {case} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn fast_softmax_matches_exact_on_awkward_rows() {
        for axis in [1usize, 2, 7, 8, 9, 16, 17, 40] {
            for inner in [1usize, 3] {
                let s = AxisShape { outer: 3, axis, inner };
                let n = 3 * axis * inner;
                let x: [f32; 360] = core::array::from_fn(|i| ((i * 37 % 23) as f32 - 11.0) * 0.9);
                let (mut a, mut b) = ([0.0f32; 360], [0.0f32; 360]);
                softmax(s, &x[..n], &mut a[..n]).unwrap();
                ssoftmax(s, &x[..n], &mut b[..n]).unwrap();
                for (p, q) in a[..n].iter().zip(&b[..n]) {
                    assert!((p - q).abs() <= 1e-6 * p.abs() + 1e-30, "{axis} {inner}: {p} {q}");
                }
            }
        }
        // A NaN or an infinity in a row behaves as in the exact kernel.
        let s = AxisShape { outer: 1, axis: 9, inner: 1 };
        let mut x = [0.5f32; 9];
        x[3] = f32::NAN;
        let mut y = [0.0f32; 9];
        ssoftmax(s, &x, &mut y).unwrap();
        assert!(y.iter().all(|v| v.is_nan()));
        x[3] = f32::INFINITY;
        let mut z = [0.0f32; 9];
        softmax(s, &x, &mut y).unwrap();
        ssoftmax(s, &x, &mut z).unwrap();
        assert!(y.iter().chain(&z).all(|v| v.is_nan()));
        assert_eq!(ssoftmax(s, &x[..8], &mut z), Err(Error::ShapeMismatch));
    }

    #[test]
    fn scaled_masked_softmax_equals_the_three_kernels_in_turn() {
        use crate::elementwise::{Arith, Broadcast, sarith, where_};
        // (shape, mask dims as broadcast strides over it, mask length)
        type Case = (&'static [usize], &'static [isize], usize);
        let cases: [Case; 6] = [
            (&[2, 3, 7, 7], &[0, 0, 7, 1], 49),
            (&[1, 2, 17, 17], &[0, 0, 17, 1], 289),
            (&[3, 33], &[0, 1], 33),
            (&[4, 5], &[1, 0], 4),
            (&[2, 2, 9], &[18, 9, 1], 36),
            (&[1, 1], &[0, 0], 1),
        ];
        for (shape, ms, nm) in cases {
            let n: usize = shape.iter().product();
            let axis = shape[shape.len() - 1];
            let s = AxisShape { outer: n / axis, axis, inner: 1 };
            let x: [f32; 600] = core::array::from_fn(|i| ((i * 37 % 23) as f32 - 11.0) * 1.7);
            let mask: [bool; 600] = core::array::from_fn(|i| (i * 5 + i / 7) % 4 != 0);
            let x = &x[..n];
            for (divisor, fill, keep, masked) in [
                (Some(8.0f32), f32::NEG_INFINITY, true, true),
                (Some(3.0), -1.0e9, false, true),
                (None, f32::MIN, true, true),
                (Some(0.7), 0.0, true, false),
            ] {
                // The three kernels in turn.
                let rank = shape.len();
                let mut contig = [0isize; 4];
                crate::shape::contiguous_strides(shape, &mut contig[..rank]).unwrap();
                let mut d = [0.0f32; 600];
                match divisor {
                    Some(c) => {
                        let p = Broadcast { shape, strides: [&contig[..rank], &[0; 4][..rank]] };
                        sarith(Arith::Div, &p, x, &[c], &mut d[..n]).unwrap();
                    }
                    None => d[..n].copy_from_slice(x),
                }
                let mut w = [0.0f32; 600];
                if masked {
                    let (a, b): (&[f32], &[f32]) =
                        if keep { (&d[..n], &[fill]) } else { (&[fill], &d[..n]) };
                    let (sa, sb) = if keep {
                        (&contig[..rank], &[0; 4][..rank])
                    } else {
                        (&[0; 4][..rank], &contig[..rank])
                    };
                    let p = Broadcast { shape, strides: [ms, sa, sb] };
                    where_(&p, &mask[..nm], a, b, &mut w[..n]).unwrap();
                } else {
                    w[..n].copy_from_slice(&d[..n]);
                }
                let mut want = [0.0f32; 600];
                ssoftmax(s, &w[..n], &mut want[..n]).unwrap();
                // Fused.
                let m = Mask { shape, strides: ms, fill, keep };
                let pro = Prologue { divisor, mask: masked.then_some(m) };
                let mut got = [0.0f32; 600];
                ssoftmax_scaled(s, &pro, x, &mask[..nm], &mut got[..n]).unwrap();
                for (g, w) in got[..n].iter().zip(&want[..n]) {
                    assert_eq!(g.to_bits(), w.to_bits(), "{shape:?} {divisor:?} {fill} {keep}");
                }
            }
        }
        // Plans that do not fit are refused.
        let s = AxisShape { outer: 2, axis: 3, inner: 1 };
        let m = Mask { shape: &[2, 3], strides: &[3, 1], fill: 0.0, keep: true };
        let pro = Prologue { divisor: None, mask: Some(m) };
        let mut y = [0.0f32; 6];
        assert!(ssoftmax_scaled(s, &pro, &[1.0; 6], &[true; 5], &mut y).is_err());
        let m = Mask { shape: &[3, 2], strides: &[2, 1], fill: 0.0, keep: true };
        let pro = Prologue { divisor: None, mask: Some(m) };
        assert!(ssoftmax_scaled(s, &pro, &[1.0; 6], &[true; 6], &mut y).is_err());
        let s = AxisShape { outer: 2, axis: 1, inner: 3 };
        let pro = Prologue { divisor: Some(2.0), mask: None };
        assert!(ssoftmax_scaled::<bool>(s, &pro, &[1.0; 6], &[], &mut y).is_err());
    }

    #[test]
    fn half_float_sums_follow_the_reference() {
        use half::{bf16, f16};
        // Expected values from onnx.reference's Softmax: float16 sums in
        // float32 and rounds once; bfloat16 (ml_dtypes) rounds every addition.
        let s = AxisShape { outer: 1, axis: 6, inner: 1 };
        let x = [-1.75f32, -0.25, 1.75, -1.5, -0.5, -0.5].map(f16::from_f32);
        let mut y = [f16::ZERO; 6];
        softmax(s, &x, &mut y).unwrap();
        let want =
            [0.021_347_046, 0.095_642_09, 0.706_542_97, 0.027_404_785, 0.074_462_89, 0.074_462_89];
        assert_eq!(y.map(f16::to_f32), want);
        let x = [-0.75f32, -2.0, -0.25, 0.5, 1.0, 1.25].map(bf16::from_f32);
        let mut y = [bf16::ZERO; 6];
        softmax(s, &x, &mut y).unwrap();
        let want =
            [0.051_025_39, 0.014_587_402, 0.083_984_375, 0.177_734_38, 0.292_968_75, 0.376_953_12];
        assert_eq!(y.map(bf16::to_f32), want);
    }

    #[test]
    fn log_softmax_matches_log_of_softmax() {
        let s = AxisShape { outer: 1, axis: 3, inner: 1 };
        let x = [0.5f64, -1.0, 2.0];
        let (mut a, mut b) = ([0.0f64; 3], [0.0f64; 3]);
        softmax(s, &x, &mut a).unwrap();
        log_softmax(s, &x, &mut b).unwrap();
        for (p, l) in a.iter().zip(&b) {
            assert!((p.ln() - l).abs() < 1e-12);
        }
        // Equal inputs: each is ln(1/3).
        log_softmax(s, &[4.0; 3], &mut b).unwrap();
        assert!(b.iter().all(|v| (v + 3.0f64.ln()).abs() < 1e-15));
    }

    #[test]
    fn hardmax_first_max() {
        let s = AxisShape { outer: 2, axis: 3, inner: 1 };
        let mut y = [9i32; 6];
        hardmax(s, &[1, 5, 5, -1, -2, -3], &mut y).unwrap();
        assert_eq!(y, [0, 1, 0, 1, 0, 0]);
        assert_eq!(hardmax(s, &[0; 5], &mut y[..5]), Err(Error::ShapeMismatch));
    }
}
