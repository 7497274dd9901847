//! Reductions over any set of axes, and ArgMax / ArgMin.
//!
//! A reduction is described by the input shape and a mask of reduced axes;
//! the output holds the kept axes in order (whether they are kept as size-1
//! dims is only a shape matter for the generator). Each output element
//! reduces its inputs in row-major order.

use crate::norm::AxisShape;
use crate::num::{Flag, Float, Num};
use crate::shape::{MAX_RANK, numel, walk};
use crate::{Error, Result, ensure};

/// Which axes of `shape` a reduction folds.
#[derive(Clone, Copy, Debug)]
pub struct Reduce<'a> {
    /// Input shape.
    pub shape: &'a [usize],
    /// One flag per axis: true if the axis is reduced. With no flag set each
    /// element is reduced alone (so `ReduceSumSquare` squares it); for
    /// `noop_with_empty_axes = 1` the generator emits a plain copy instead.
    pub axes: &'a [bool],
}

/// A reduction op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Arithmetic mean (integers: the sum divided with truncation).
    Mean,
    /// Maximum (NaN propagates; lowest value for an empty set).
    Max,
    /// Minimum (NaN propagates; highest value for an empty set).
    Min,
    /// Product.
    Prod,
    /// Sum of absolute values.
    L1,
    /// Sum of squares.
    SumSquare,
    /// Square root of the sum of squares (floats only).
    L2,
    /// Log of the sum (floats only).
    LogSum,
    /// Log of the sum of exponentials, computed around the maximum (floats only).
    LogSumExp,
}

/// The kept and reduced sub-shapes with their input strides.
struct Split {
    kept: [usize; MAX_RANK],
    kept_strides: [isize; MAX_RANK],
    nk: usize,
    red: [usize; MAX_RANK],
    red_strides: [isize; MAX_RANK],
    nr: usize,
    count: usize,
}

fn split(p: &Reduce<'_>, x_len: usize, y_len: usize) -> Result<Split> {
    ensure(p.shape.len() <= MAX_RANK, Error::RankTooLarge)?;
    ensure(p.axes.len() == p.shape.len(), Error::InvalidParams)?;
    ensure(x_len == numel(p.shape)?, Error::ShapeMismatch)?;
    let mut s = Split {
        kept: [0; MAX_RANK],
        kept_strides: [0; MAX_RANK],
        nk: 0,
        red: [0; MAX_RANK],
        red_strides: [0; MAX_RANK],
        nr: 0,
        count: 1,
    };
    let mut stride: isize = 1;
    for (&d, &r) in p.shape.iter().zip(p.axes).rev() {
        if r {
            s.red[s.nr] = d;
            s.red_strides[s.nr] = stride;
            s.nr += 1;
            s.count *= d;
        } else {
            s.kept[s.nk] = d;
            s.kept_strides[s.nk] = stride;
            s.nk += 1;
        }
        stride = stride.wrapping_mul(d as isize);
    }
    s.kept[..s.nk].reverse();
    s.kept_strides[..s.nk].reverse();
    s.red[..s.nr].reverse();
    s.red_strides[..s.nr].reverse();
    ensure(y_len == numel(&s.kept[..s.nk])?, Error::ShapeMismatch)?;
    // x_len equals numel(shape) and the strides are the shape's own, so every
    // walk below stays inside x (an empty reduced extent reads nothing).
    Ok(s)
}

/// Calls `f(out_index, lane)` per output element, `lane` walking its inputs.
fn each_output<T: Copy>(
    s: &Split,
    x: &[T],
    mut f: impl FnMut(usize, &mut dyn FnMut(&mut dyn FnMut(T))),
) {
    let kept = &s.kept[..s.nk];
    let red = &s.red[..s.nr];
    let red_strides = &s.red_strides[..s.nr];
    let mut o = 0;
    walk(kept, [&s.kept_strides[..s.nk]], [0], |[base]| {
        let mut lane = |g: &mut dyn FnMut(T)| walk(red, [red_strides], [base], |[i]| g(x[i]));
        f(o, &mut lane);
        o += 1;
    });
}

/// A reduction valid on integers and floats (`Sum`, `Mean`, `Max`, `Min`,
/// `Prod`, `L1`, `SumSquare`); [`Error::InvalidParams`] for the float-only
/// ops (use [`reduce_float`]), [`Error::DivisionByZero`] for an integer `Mean`
/// over an empty set.
pub fn reduce<T: Num>(op: ReduceOp, p: &Reduce<'_>, x: &[T], y: &mut [T]) -> Result {
    let s = split(p, x.len(), y.len())?;
    if matches!(op, ReduceOp::Sum | ReduceOp::Mean) && trailing(p) && s.count > 0 {
        return sum_rows(op == ReduceOp::Mean, s.count, x, y);
    }
    if let Some(planes) = planes(p).filter(|pl| pl.inner > 1 && s.count > 0) {
        return reduce_planes(op, &planes, x, y);
    }
    reduce_walk(op, &s, x, y)
}

/// [`reduce`] by the general walk: each output in turn, its inputs in
/// row-major order.
fn reduce_walk<T: Num>(op: ReduceOp, s: &Split, x: &[T], y: &mut [T]) -> Result {
    let mut bad = false;
    let mut invalid = false;
    each_output(s, x, |o, lane| {
        let mut acc = match op {
            ReduceOp::Max => T::LOWEST,
            ReduceOp::Min => T::HIGHEST,
            ReduceOp::Prod => T::ONE,
            _ => T::ZERO,
        };
        match op {
            ReduceOp::Sum | ReduceOp::Mean => lane(&mut |v| acc = acc.add(v)),
            ReduceOp::Max => lane(&mut |v| acc = acc.max_of(v)),
            ReduceOp::Min => lane(&mut |v| acc = acc.min_of(v)),
            ReduceOp::Prod => lane(&mut |v| acc = acc.mul(v)),
            ReduceOp::L1 => lane(&mut |v| acc = acc.add(v.abs())),
            ReduceOp::SumSquare => lane(&mut |v| acc = acc.add(v.mul(v))),
            ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp => invalid = true,
        }
        if op == ReduceOp::Mean {
            acc = acc.div(T::from_usize(s.count)).unwrap_or_else(|| {
                bad = true;
                T::ZERO
            });
        }
        y[o] = acc;
    });
    ensure(!invalid, Error::InvalidParams)?;
    ensure(!bad, Error::DivisionByZero)
}

/// Whether the reduced axes are the last ones (some, and all of them after
/// the first): each output then reduces one contiguous run of the input.
fn trailing(p: &Reduce<'_>) -> bool {
    let first = p.axes.iter().position(|&r| r).unwrap_or(p.axes.len());
    first < p.axes.len() && p.axes[first..].iter().all(|&r| r)
}

/// The input as `[outer, count, inner]` where the middle extent is the
/// reduced axes (one run of them, followed by kept ones): the output is
/// `[outer, inner]`, each output row reducing `count` input rows.
struct Planes {
    outer: usize,
    count: usize,
    inner: usize,
}

/// The reduced axes as one run (`None` when kept axes split them or none
/// is reduced).
fn planes(p: &Reduce<'_>) -> Option<Planes> {
    let first = p.axes.iter().position(|&r| r)?;
    let end = first + p.axes[first..].iter().take_while(|&&r| r).count();
    if p.axes[end..].iter().any(|&r| r) {
        return None;
    }
    let prod = |d: &[usize]| d.iter().product::<usize>();
    Some(Planes {
        outer: prod(&p.shape[..first]),
        count: prod(&p.shape[first..end]),
        inner: prod(&p.shape[end..]),
    })
}

/// A reduction over the middle extent of `[outer, count, inner]` (channels
/// of an NCHW tensor, as a channels-first LayerNorm writes its mean): each
/// output row is the running result of the input rows in turn, so every
/// output takes its inputs in the same row-major order as the general walk
/// (the same result bit for bit) while reading the input contiguously.
fn reduce_planes<T: Num>(op: ReduceOp, pl: &Planes, x: &[T], y: &mut [T]) -> Result {
    ensure(y.len() == pl.outer.wrapping_mul(pl.inner), Error::ShapeMismatch)?;
    ensure(x.len() == y.len().wrapping_mul(pl.count), Error::ShapeMismatch)?;
    match op {
        ReduceOp::Sum | ReduceOp::Mean => fold_planes(pl, x, y, T::ZERO, |a, v| a.add(v)),
        ReduceOp::Max => fold_planes(pl, x, y, T::LOWEST, |a, v| a.max_of(v)),
        ReduceOp::Min => fold_planes(pl, x, y, T::HIGHEST, |a, v| a.min_of(v)),
        ReduceOp::Prod => fold_planes(pl, x, y, T::ONE, |a, v| a.mul(v)),
        ReduceOp::L1 => fold_planes(pl, x, y, T::ZERO, |a, v| a.add(v.abs())),
        ReduceOp::SumSquare => fold_planes(pl, x, y, T::ZERO, |a, v| a.add(v.mul(v))),
        ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp => return Err(Error::InvalidParams),
    }
    if op == ReduceOp::Mean {
        let n = T::from_usize(pl.count);
        for a in y.iter_mut() {
            *a = a.div(n).ok_or(Error::DivisionByZero)?;
        }
    }
    Ok(())
}

/// [`reduce_planes`]' loop for one step function (monomorphised, so the
/// row loop vectorises).
#[inline(always)]
fn fold_planes<T: Copy>(pl: &Planes, x: &[T], y: &mut [T], init: T, step: impl Fn(T, T) -> T) {
    let (count, inner) = (pl.count, pl.inner);
    for (yo, xo) in y.chunks_exact_mut(inner).zip(x.chunks_exact(count * inner)) {
        yo.fill(init);
        for row in xo.chunks_exact(inner) {
            for (a, &v) in yo.iter_mut().zip(row) {
                *a = step(*a, v);
            }
        }
    }
}

/// `ReduceSum` / `ReduceMean` over contiguous runs of `n` (> 0) inputs, as
/// LayerNorm decompositions write them: no per-element index walk, and for
/// types summed in their own precision eight running sums (integers wrap, so
/// the order changes nothing; f32/f64 differ from the row-major sum by
/// rounding only). 16-bit floats keep the row-major order.
fn sum_rows<T: Num>(mean: bool, n: usize, x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == y.len().wrapping_mul(n), Error::ShapeMismatch)?;
    let lanes = core::any::TypeId::of::<T::Acc>() == core::any::TypeId::of::<T>();
    let mut bad = false;
    for (o, row) in y.iter_mut().zip(x.chunks_exact(n)) {
        let mut acc = T::ZERO;
        if lanes {
            let mut l = [T::ZERO; 8];
            let (blocks, tail) = row.as_chunks::<8>();
            for b in blocks {
                for (a, &v) in l.iter_mut().zip(b) {
                    *a = a.add(v);
                }
            }
            acc = (l[0].add(l[4]).add(l[1].add(l[5]))).add(l[2].add(l[6]).add(l[3].add(l[7])));
            for &v in tail {
                acc = acc.add(v);
            }
        } else {
            for &v in row {
                acc = acc.add(v);
            }
        }
        *o = if mean {
            acc.div(T::from_usize(n)).unwrap_or_else(|| {
                bad = true;
                T::ZERO
            })
        } else {
            acc
        };
    }
    ensure(!bad, Error::DivisionByZero)
}

/// Any reduction on floats. Over an empty set: Sum/L1/L2/SumSquare 0,
/// Prod 1, Max `-inf`, Min `+inf`, Mean NaN, LogSum and LogSumExp `-inf`.
pub fn reduce_float<T: Float>(op: ReduceOp, p: &Reduce<'_>, x: &[T], y: &mut [T]) -> Result {
    match op {
        ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp => {}
        _ => return reduce(op, p, x, y),
    }
    let s = split(p, x.len(), y.len())?;
    each_output(&s, x, |o, lane| {
        let mut acc = T::ZERO;
        y[o] = match op {
            ReduceOp::L2 => {
                lane(&mut |v| acc = acc.add(v.mul(v)));
                acc.sqrt()
            }
            ReduceOp::LogSum => {
                lane(&mut |v| acc = acc.add(v));
                acc.ln()
            }
            _ => {
                let mut m = T::LOWEST;
                lane(&mut |v| m = m.max_of(v));
                if m == T::LOWEST || m == T::INFINITY || m.is_nan() {
                    // Empty set, all -inf, an infinite max or NaN: the plain formula
                    // gives the right limit (or NaN) without shifting.
                    lane(&mut |v| acc = acc.add(v.exp()));
                    acc.ln()
                } else {
                    lane(&mut |v| acc = acc.add(v.sub(m).exp()));
                    acc.ln().add(m)
                }
            }
        };
    });
    Ok(())
}

/// `ReduceMax` (`max = true`, logical or) or `ReduceMin` (logical and) on
/// booleans; over an empty set they give false and true. Input and output
/// may be caller `bool`s or arena bytes independently.
pub fn reduce_flags<A: Flag, B: Flag>(max: bool, p: &Reduce<'_>, x: &[A], y: &mut [B]) -> Result {
    let s = split(p, x.len(), y.len())?;
    each_output(&s, x, |o, lane| {
        let mut acc = !max;
        if max {
            lane(&mut |v: A| acc |= v.get());
        } else {
            lane(&mut |v: A| acc &= v.get());
        }
        y[o] = B::from_bool(acc);
    });
    Ok(())
}

/// ONNX `MeanVarianceNormalization` over the axes of `p`: each lane becomes
/// `(x - mean) / (sqrt(E[x^2] - mean^2) + 1e-9)`, the operator's defining
/// function step for step.
pub fn mean_variance_norm<T: Float>(p: &Reduce<'_>, x: &[T], y: &mut [T]) -> Result {
    ensure(y.len() == x.len(), Error::ShapeMismatch)?;
    let out_len = p
        .shape
        .iter()
        .zip(p.axes)
        .filter(|(_, r)| !**r)
        .try_fold(1usize, |n, (&d, _)| n.checked_mul(d));
    let s = split(p, x.len(), out_len.ok_or(Error::Overflow)?)?;
    let count = T::from_usize(s.count);
    let eps = T::from_f64(1e-9);
    let red = &s.red[..s.nr];
    let red_strides = &s.red_strides[..s.nr];
    walk(&s.kept[..s.nk], [&s.kept_strides[..s.nk]], [0], |[base]| {
        let (mut sum, mut sq) = (T::ZERO, T::ZERO);
        walk(red, [red_strides], [base], |[i]| {
            sum = sum.add(x[i]);
            sq = sq.add(x[i].mul(x[i]));
        });
        let mean = sum.div(count).unwrap_or(T::NAN);
        let var = sq.div(count).unwrap_or(T::NAN).sub(mean.mul(mean));
        let std = var.sqrt().add(eps);
        walk(red, [red_strides], [base], |[i]| {
            y[i] = x[i].sub(mean).div(std).unwrap_or(T::NAN);
        });
    });
    Ok(())
}

/// ONNX `ArgMax` (`max = true`) or `ArgMin` along one axis: the index of the
/// first extreme value, or of the last with `select_last_index`. NaN counts as
/// the extreme (the first NaN wins). `y` holds `outer * inner` indices.
pub fn arg_extreme<T: Num>(
    s: AxisShape,
    max: bool,
    select_last_index: bool,
    x: &[T],
    y: &mut [i64],
) -> Result {
    ensure(x.len() == s.len()?, Error::ShapeMismatch)?;
    ensure(y.len() == s.outer.checked_mul(s.inner).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    if s.axis == 0 {
        ensure(y.is_empty(), Error::ShapeMismatch)?;
        return Ok(());
    }
    let mut o = 0;
    s.lanes(|base| {
        let mut best = x[base];
        let mut at = 0usize;
        for j in 1..s.axis {
            let v = x[base + j * s.inner];
            if best.is_nan() {
                break;
            }
            let better = if v.is_nan() {
                true
            } else if max {
                v > best || (select_last_index && v == best)
            } else {
                v < best || (select_last_index && v == best)
            };
            if better {
                best = v;
                at = j;
            }
        }
        // Row-major lanes: o runs over (outer, inner) in order.
        y[o] = at as i64;
        o += 1;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const X: [f32; 6] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // shape [2, 3]

    #[test]
    fn reduce_each_axis_set() {
        let mut y2 = [0.0f32; 2];
        let mut y3 = [0.0f32; 3];
        let mut y1 = [0.0f32; 1];
        let rows = Reduce { shape: &[2, 3], axes: &[false, true] };
        let cols = Reduce { shape: &[2, 3], axes: &[true, false] };
        let all = Reduce { shape: &[2, 3], axes: &[true, true] };
        reduce(ReduceOp::Sum, &rows, &X, &mut y2).unwrap();
        assert_eq!(y2, [6.0, 15.0]);
        reduce(ReduceOp::Sum, &cols, &X, &mut y3).unwrap();
        assert_eq!(y3, [5.0, 7.0, 9.0]);
        reduce(ReduceOp::Prod, &all, &X, &mut y1).unwrap();
        assert_eq!(y1, [720.0]);
        reduce(ReduceOp::Mean, &rows, &X, &mut y2).unwrap();
        assert_eq!(y2, [2.0, 5.0]);
        reduce(ReduceOp::Max, &cols, &X, &mut y3).unwrap();
        assert_eq!(y3, [4.0, 5.0, 6.0]);
        reduce(ReduceOp::Min, &rows, &X, &mut y2).unwrap();
        assert_eq!(y2, [1.0, 4.0]);
        reduce(ReduceOp::SumSquare, &rows, &X, &mut y2).unwrap();
        assert_eq!(y2, [14.0, 77.0]);
        reduce_float(ReduceOp::L2, &cols, &[3.0, 0.0, 1.0, 4.0, 0.0, -1.0], &mut y3).unwrap();
        assert_eq!(y3, [5.0, 0.0, core::f32::consts::SQRT_2]);
        reduce(ReduceOp::L1, &all, &[-1.0, 2.0, -3.0, 0.0, 0.0, 1.0], &mut y1).unwrap();
        assert_eq!(y1, [7.0]);
        assert_eq!(reduce(ReduceOp::Sum, &rows, &X, &mut y3), Err(Error::ShapeMismatch));
        assert_eq!(reduce(ReduceOp::L2, &rows, &X, &mut y2), Err(Error::InvalidParams));
    }

    #[test]
    fn trailing_sums_and_means_match_a_plain_sum() {
        for rows in 1usize..4 {
            for n in 1usize..=40 {
                let x: [f32; 160] = core::array::from_fn(|i| ((i * 37 % 23) as f32 - 11.0) * 0.37);
                let x = &x[..rows * n];
                // [rows, n] over the last axis, and [rows, 1, n] over the last two.
                for (shape, axes) in [
                    (&[rows, n][..], &[false, true][..]),
                    (&[rows, 1, n][..], &[false, true, true][..]),
                ] {
                    for op in [ReduceOp::Sum, ReduceOp::Mean] {
                        let mut y = [0.0f32; 3];
                        reduce(op, &Reduce { shape, axes }, x, &mut y[..rows]).unwrap();
                        for (r, &y) in y[..rows].iter().enumerate() {
                            let sum: f64 =
                                x[r * n..(r + 1) * n].iter().map(|&v| f64::from(v)).sum();
                            let want = if op == ReduceOp::Mean { sum / n as f64 } else { sum };
                            assert!(
                                (f64::from(y) - want).abs() < 1e-5,
                                "{rows}x{n} {op:?}: {y} vs {want}"
                            );
                        }
                    }
                }
            }
        }
        // Integers wrap, in any order; an integer mean truncates.
        let mut y = [0i8; 2];
        reduce(
            ReduceOp::Sum,
            &Reduce { shape: &[2, 9], axes: &[false, true] },
            &[100i8; 18],
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [100i8.wrapping_mul(9); 2]);
        let mut y = [0i32; 1];
        let x = [-7i32, 2, 1, 9, -3, 5, 4, 4, 4, -8];
        reduce(ReduceOp::Mean, &Reduce { shape: &[1, 10], axes: &[false, true] }, &x, &mut y)
            .unwrap();
        assert_eq!(y, [1]);
        // A leading reduced axis is not trailing: the general walk runs.
        let mut y = [0.0f32; 3];
        reduce(ReduceOp::Sum, &Reduce { shape: &[2, 3], axes: &[true, false] }, &X, &mut y)
            .unwrap();
        assert_eq!(y, [5.0, 7.0, 9.0]);
    }

    #[test]
    fn reduce_middle_axis_3d() {
        // [2, 2, 2] summed over axis 1: pairs (0,2), (1,3), (4,6), (5,7).
        let x: [i32; 8] = core::array::from_fn(|i| i as i32);
        let mut y = [0i32; 4];
        reduce(
            ReduceOp::Sum,
            &Reduce { shape: &[2, 2, 2], axes: &[false, true, false] },
            &x,
            &mut y,
        )
        .unwrap();
        assert_eq!(y, [2, 4, 10, 12]);
        // Integer mean truncates.
        let mut y = [0i32; 1];
        reduce(ReduceOp::Mean, &Reduce { shape: &[3], axes: &[true] }, &[1, 2, 2], &mut y).unwrap();
        assert_eq!(y, [1]);
    }

    #[test]
    fn planes_match_the_general_walk_bit_for_bit() {
        let ops = [
            ReduceOp::Sum,
            ReduceOp::Mean,
            ReduceOp::Max,
            ReduceOp::Min,
            ReduceOp::Prod,
            ReduceOp::L1,
            ReduceOp::SumSquare,
        ];
        let mut x: Vec<f32> =
            (0..2 * 5 * 3 * 7).map(|i| ((i * 29 % 17) as f32 - 8.0) * 0.3).collect();
        x[11] = -0.0;
        x[40] = f32::NAN;
        let shape = [2usize, 5, 3, 7];
        // Runs of reduced axes followed by kept ones, and a split set (the
        // walk itself).
        let sets: [[bool; 4]; 6] = [
            [false, true, false, false],
            [true, false, false, false],
            [false, true, true, false],
            [true, true, false, false],
            [true, true, true, false],
            [true, false, true, false],
        ];
        for axes in &sets {
            let p = Reduce { shape: &shape, axes };
            let kept: usize =
                shape.iter().zip(axes).filter(|(_, r)| !**r).map(|(d, _)| d).product();
            let split = split(&p, x.len(), kept).unwrap();
            for op in ops {
                let mut got = vec![0.0f32; kept];
                let mut want = vec![0.0f32; kept];
                reduce(op, &p, &x, &mut got).unwrap();
                reduce_walk(op, &split, &x, &mut want).unwrap();
                let same = got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits());
                assert!(same, "{axes:?} {op:?}: {got:?} vs {want:?}");
            }
        }
        // Integers too (a truncating mean).
        let xi: Vec<i32> = (0..2 * 5 * 3).map(|i| (i * 7 % 11) - 5).collect();
        let p = Reduce { shape: &[2, 5, 3], axes: &[false, true, false] };
        let split = split(&p, xi.len(), 6).unwrap();
        for op in ops {
            let (mut got, mut want) = ([0i32; 6], [0i32; 6]);
            reduce(op, &p, &xi, &mut got).unwrap();
            reduce_walk(op, &split, &xi, &mut want).unwrap();
            assert_eq!(got, want, "{op:?}");
        }
        assert!(planes(&Reduce { shape: &[2, 3], axes: &[false, false] }).is_none());
    }

    #[test]
    fn log_sum_exp_is_stable() {
        // log(e^1000 + e^1000) = 1000 + ln 2, which the naive formula overflows.
        let mut y = [0.0f64];
        let all = Reduce { shape: &[2], axes: &[true] };
        reduce_float(ReduceOp::LogSumExp, &all, &[1000.0, 1000.0], &mut y).unwrap();
        assert!((y[0] - (1000.0 + core::f64::consts::LN_2)).abs() < 1e-9);
        reduce_float(ReduceOp::LogSum, &all, &[1.0, core::f64::consts::E - 1.0], &mut y).unwrap();
        assert!((y[0] - 1.0).abs() < 1e-15);
        // Empty reductions give the identities.
        let empty = Reduce { shape: &[0, 2], axes: &[true, false] };
        let mut y2 = [7.0f32; 2];
        reduce_float(ReduceOp::Max, &empty, &[], &mut y2).unwrap();
        assert_eq!(y2, [f32::NEG_INFINITY; 2]);
        reduce_float(ReduceOp::LogSumExp, &empty, &[], &mut y2).unwrap();
        assert_eq!(y2, [f32::NEG_INFINITY; 2]);
        reduce_float(ReduceOp::Sum, &empty, &[], &mut y2).unwrap();
        assert_eq!(y2, [0.0; 2]);
    }

    #[test]
    fn boolean_max_and_min() {
        // [[true, false], [false, false]] over axis 1: any [true, false], all [false, false].
        let x = [true, false, false, false];
        let rows = Reduce { shape: &[2, 2], axes: &[false, true] };
        let mut y = [0u8; 2];
        reduce_flags(true, &rows, &x, &mut y).unwrap();
        assert_eq!(y, [1, 0]);
        let mut yb = [true; 2];
        reduce_flags(false, &rows, &[1u8, 1, 0, 1], &mut yb).unwrap();
        assert_eq!(yb, [true, false]);
        // Empty sets: false for max, true for min.
        let empty = Reduce { shape: &[0, 2], axes: &[true, false] };
        reduce_flags::<bool, bool>(true, &empty, &[], &mut yb).unwrap();
        assert_eq!(yb, [false, false]);
        reduce_flags::<bool, bool>(false, &empty, &[], &mut yb).unwrap();
        assert_eq!(yb, [true, true]);
    }

    #[test]
    fn mean_variance_norm_columns() {
        // Columns [1, 3] (mean 2, std 1) and [2, 2] (std 0: the 1e-9 keeps it finite).
        let p = Reduce { shape: &[2, 2], axes: &[true, false] };
        let mut y = [9.0f64; 4];
        mean_variance_norm(&p, &[1.0, 2.0, 3.0, 2.0], &mut y).unwrap();
        let d = 1.0 + 1e-9;
        assert_eq!(y, [-1.0 / d, 0.0, 1.0 / d, 0.0]);
        assert_eq!(mean_variance_norm(&p, &[0.0; 4], &mut y[..3]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn argmax_argmin() {
        // [2, 3]: rows [1, 3, 3] and [2, 0, 0].
        let x = [1i32, 3, 3, 2, 0, 0];
        let mut y = [0i64; 2];
        let rows = AxisShape { outer: 2, axis: 3, inner: 1 };
        arg_extreme(rows, true, false, &x, &mut y).unwrap();
        assert_eq!(y, [1, 0]);
        arg_extreme(rows, true, true, &x, &mut y).unwrap();
        assert_eq!(y, [2, 0]);
        arg_extreme(rows, false, true, &x, &mut y).unwrap();
        assert_eq!(y, [0, 2]);
        // Along axis 0: columns [1, 2], [3, 0], [3, 0].
        let mut y = [0i64; 3];
        arg_extreme(AxisShape { outer: 1, axis: 2, inner: 3 }, true, false, &x, &mut y).unwrap();
        assert_eq!(y, [1, 0, 0]);
        let mut y = [0i64; 1];
        let f = [1.0f32, f32::NAN, 5.0];
        arg_extreme(AxisShape { outer: 1, axis: 3, inner: 1 }, true, false, &f, &mut y).unwrap();
        assert_eq!(y, [1]);
    }
}

/// Reduction axes that arrive as data at run time (an `axes` input the
/// generator could not see). Normalises them (negative axes count from the
/// end), fills `mask` with one flag per axis of `shape`, and checks that the
/// reduction gives `out_shape`, the shape the generator planned from the
/// model's declared output. Returns `true` when the node is a no-op (no axes
/// and `noop_with_empty_axes`): the output is then a copy of the input.
///
/// [`Error::IndexOutOfBounds`] for an axis outside the rank,
/// [`Error::InvalidParams`] for an axis given twice, and
/// [`Error::ShapeMismatch`] when the result would not have the planned shape.
pub fn runtime_axes(
    axes: &[i64],
    shape: &[usize],
    keepdims: bool,
    noop_with_empty_axes: bool,
    out_shape: &[usize],
    mask: &mut [bool],
) -> Result<bool> {
    ensure(mask.len() == shape.len(), Error::ShapeMismatch)?;
    let rank = shape.len() as i64;
    mask.iter_mut().for_each(|m| *m = false);
    if axes.is_empty() {
        if noop_with_empty_axes {
            ensure(out_shape == shape, Error::ShapeMismatch)?;
            return Ok(true);
        }
        mask.iter_mut().for_each(|m| *m = true);
    }
    for &a in axes {
        let a = if a < 0 { a + rank } else { a };
        ensure((0..rank).contains(&a), Error::IndexOutOfBounds)?;
        let slot = &mut mask[a as usize];
        ensure(!*slot, Error::InvalidParams)?;
        *slot = true;
    }
    let mut out = out_shape.iter();
    for (&d, &reduced) in shape.iter().zip(mask.iter()) {
        let expect = match (reduced, keepdims) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        };
        if let Some(e) = expect {
            ensure(out.next() == Some(&e), Error::ShapeMismatch)?;
        }
    }
    ensure(out.next().is_none(), Error::ShapeMismatch)?;
    Ok(false)
}

#[cfg(test)]
mod runtime_axes_tests {
    use super::*;

    #[test]
    fn axes_from_data_fill_the_mask_and_check_the_planned_shape() {
        let mut mask = [false; 3];
        // Reduce axis -1 of [2, 3, 4] keeping dims: [2, 3, 1].
        assert_eq!(runtime_axes(&[-1], &[2, 3, 4], true, false, &[2, 3, 1], &mut mask), Ok(false));
        assert_eq!(mask, [false, false, true]);
        // Without keepdims the axis disappears; a wrong plan is refused.
        assert_eq!(runtime_axes(&[0], &[2, 3, 4], false, false, &[3, 4], &mut mask), Ok(false));
        assert_eq!(
            runtime_axes(&[1], &[2, 3, 4], false, false, &[3, 4], &mut mask),
            Err(Error::ShapeMismatch)
        );
        // No axes: all of them, or a no-op when asked.
        assert_eq!(runtime_axes(&[], &[2, 3, 4], true, false, &[1, 1, 1], &mut mask), Ok(false));
        assert_eq!(mask, [true; 3]);
        assert_eq!(runtime_axes(&[], &[2, 3, 4], true, true, &[2, 3, 4], &mut mask), Ok(true));
        // Bad data.
        assert_eq!(
            runtime_axes(&[3], &[2, 3, 4], true, false, &[2, 3, 4], &mut mask),
            Err(Error::IndexOutOfBounds)
        );
        assert_eq!(
            runtime_axes(&[1, -2], &[2, 3, 4], true, false, &[2, 1, 4], &mut mask),
            Err(Error::InvalidParams)
        );
    }
}
