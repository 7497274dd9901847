//! Classification losses: ONNX `NegativeLogLikelihoodLoss` and
//! `SoftmaxCrossEntropyLoss`.
//!
//! Both see their input as `[batch, classes, spatial]` (the spec's
//! `[N, C, d1, ..., dk]` with the trailing axes flattened) and their targets
//! as `[batch, spatial]`. The per-element loss is
//! `-input[n][c][d] * weight[c]` with `c = target[n][d]` (weight 1 when no
//! weights are given), and 0 where the target equals `ignore_index`.
//!
//! `Mean` divides the summed loss by the summed weights of the elements that
//! count: `weight[target]` for each non-ignored element, which is simply the
//! number of non-ignored elements when no weights are given. This is the
//! spec's weighted-mean rule, and what its conformance data expects when
//! targets are ignored. Sums are accumulated in `f64` in element order, so
//! the result does not depend on how the work is split.

use crate::norm::AxisShape;
use crate::num::{Float, Int};
use crate::{Error, Result, ensure};

/// The `[batch, classes, spatial]` view of a loss input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LossShape {
    /// `N`, the first axis.
    pub batch: usize,
    /// `C`, the class axis (axis 1).
    pub classes: usize,
    /// The product of the axes after the class axis (1 for a rank-2 input).
    pub spatial: usize,
}

impl LossShape {
    /// The element count of the input (`batch * classes * spatial`).
    pub fn input_len(self) -> Result<usize> {
        self.batch
            .checked_mul(self.classes)
            .and_then(|n| n.checked_mul(self.spatial))
            .ok_or(Error::Overflow)
    }

    /// The element count of the targets (`batch * spatial`), which is also
    /// the unreduced loss's.
    pub fn target_len(self) -> Result<usize> {
        self.batch.checked_mul(self.spatial).ok_or(Error::Overflow)
    }
}

/// The `reduction` attribute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduction {
    /// The loss per target element, shaped like the targets.
    None,
    /// One value: the sum of the per-element losses.
    Sum,
    /// One value: the weighted mean (see the module docs).
    Mean,
}

/// The parameters shared by both losses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    pub shape: LossShape,
    pub reduction: Reduction,
    /// Targets equal to this value contribute nothing (not to the sum, not to
    /// the mean's denominator); `None` when the attribute is absent.
    pub ignore_index: Option<i64>,
}

impl Loss {
    /// The element count of the loss output.
    pub fn output_len(&self) -> Result<usize> {
        match self.reduction {
            Reduction::None => self.shape.target_len(),
            Reduction::Sum | Reduction::Mean => Ok(1),
        }
    }
}

/// ONNX `NegativeLogLikelihoodLoss`: `input` holds log-probabilities
/// `[batch, classes, spatial]`, `target` class indices `[batch, spatial]`,
/// `weight` (optional) one weight per class. A target outside
/// `[0, classes)` that is not `ignore_index` is
/// [`Error::IndexOutOfBounds`].
pub fn nll_loss<T: Float, I: Int>(
    p: &Loss,
    input: &[T],
    target: &[I],
    weight: Option<&[T]>,
    loss: &mut [T],
) -> Result {
    let s = p.shape;
    ensure(input.len() == s.input_len()?, Error::ShapeMismatch)?;
    ensure(target.len() == s.target_len()?, Error::ShapeMismatch)?;
    ensure(weight.is_none_or(|w| w.len() == s.classes), Error::ShapeMismatch)?;
    ensure(loss.len() == p.output_len()?, Error::ShapeMismatch)?;
    let mut sum = 0.0f64;
    let mut weight_sum = 0.0f64;
    for b in 0..s.batch {
        for d in 0..s.spatial {
            let at = b * s.spatial + d;
            let t = target[at].to_i64();
            let l = if t.is_some() && t == p.ignore_index {
                T::ZERO
            } else {
                let c = t
                    .and_then(|t| usize::try_from(t).ok())
                    .filter(|&c| c < s.classes)
                    .ok_or(Error::IndexOutOfBounds)?;
                let x = input[(b * s.classes + c) * s.spatial + d].neg();
                match weight {
                    Some(w) => {
                        weight_sum += w[c].to_f64();
                        x.mul(w[c])
                    }
                    None => {
                        weight_sum += 1.0;
                        x
                    }
                }
            };
            match p.reduction {
                Reduction::None => loss[at] = l,
                Reduction::Sum | Reduction::Mean => sum += l.to_f64(),
            }
        }
    }
    match p.reduction {
        Reduction::None => {}
        Reduction::Sum => loss[0] = T::from_f64(sum),
        Reduction::Mean => loss[0] = T::from_f64(sum / weight_sum),
    }
    Ok(())
}

/// ONNX `SoftmaxCrossEntropyLoss`: `log_prob` receives the log-softmax of
/// `scores` over the class axis (the op's optional second output, or
/// scratch of the same size when the model does not ask for it), then the
/// loss is [`nll_loss`] of it.
pub fn softmax_cross_entropy<T: Float, I: Int>(
    p: &Loss,
    scores: &[T],
    labels: &[I],
    weight: Option<&[T]>,
    loss: &mut [T],
    log_prob: &mut [T],
) -> Result {
    let s = p.shape;
    let lanes = AxisShape { outer: s.batch, axis: s.classes, inner: s.spatial };
    crate::softmax::log_softmax(lanes, scores, log_prob)?;
    nll_loss(p, log_prob, labels, weight, loss)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NC: LossShape = LossShape { batch: 2, classes: 3, spatial: 1 };

    fn params(shape: LossShape, reduction: Reduction, ignore_index: Option<i64>) -> Loss {
        Loss { shape, reduction, ignore_index }
    }

    #[test]
    fn nll_none_picks_the_target_class() {
        // Rows [1, 2, 3] and [4, 5, 6], targets 2 and 0.
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let mut y = [9.0f32; 2];
        nll_loss(&params(NC, Reduction::None, None), &x, &[2i64, 0], None, &mut y).unwrap();
        assert_eq!(y, [-3.0, -4.0]);
        // With weights [0.5, 1, 2]: -3 * 2 and -4 * 0.5.
        let w = [0.5f32, 1.0, 2.0];
        nll_loss(&params(NC, Reduction::None, None), &x, &[2i32, 0], Some(&w), &mut y).unwrap();
        assert_eq!(y, [-6.0, -2.0]);
        // An ignored target gives 0.
        nll_loss(&params(NC, Reduction::None, Some(0)), &x, &[2i32, 0], Some(&w), &mut y).unwrap();
        assert_eq!(y, [-6.0, 0.0]);
    }

    #[test]
    fn nll_spec_examples() {
        // The spec's examples: N, C, d1 = 2, 3, 2.
        let s = LossShape { batch: 2, classes: 3, spatial: 2 };
        let x = [1.0f64, 2.0, 2.0, 2.0, 3.0, 2.0, 0.0, 1.0, 2.0, 2.0, 1.0, 2.0];
        let t = [2i64, 1, 0, 2];
        let w = [0.2f64, 0.3, 0.1];
        let mut y = [0.0f64; 4];
        nll_loss(&params(s, Reduction::None, None), &x, &t, None, &mut y).unwrap();
        assert_eq!(y, [-3.0, -2.0, -0.0, -2.0]);
        let mut r = [0.0f64];
        nll_loss(&params(s, Reduction::Sum, None), &x, &t, Some(&w), &mut r).unwrap();
        // -(3 * 0.1 + 2 * 0.3 + 0 * 0.2 + 2 * 0.1) = -1.1
        assert!((r[0] + 1.1).abs() < 1e-12, "{r:?}");
        nll_loss(&params(s, Reduction::Mean, None), &x, &t, Some(&w), &mut r).unwrap();
        // -1.1 / (0.1 + 0.3 + 0.2 + 0.1) = -1.5714...
        assert!((r[0] + 1.1 / 0.7).abs() < 1e-12, "{r:?}");
    }

    #[test]
    fn nll_mean_counts_only_what_is_not_ignored() {
        // Three rows; the middle target is ignored.
        let s = LossShape { batch: 3, classes: 2, spatial: 1 };
        let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let t = [1i64, -1, 0];
        let mut r = [0.0f32];
        nll_loss(&params(s, Reduction::Mean, Some(-1)), &x, &t, None, &mut r).unwrap();
        // (-2 + -5) / 2
        assert_eq!(r, [-3.5]);
        nll_loss(&params(s, Reduction::Sum, Some(-1)), &x, &t, None, &mut r).unwrap();
        assert_eq!(r, [-7.0]);
        // Weights [4, 1]: (-2 * 1 + -5 * 4) / (1 + 4)
        let w = [4.0f32, 1.0];
        nll_loss(&params(s, Reduction::Mean, Some(-1)), &x, &t, Some(&w), &mut r).unwrap();
        assert_eq!(r, [-22.0 / 5.0]);
        // Everything ignored: 0 / 0.
        nll_loss(&params(s, Reduction::Mean, Some(7)), &x, &[7i32; 3], None, &mut r).unwrap();
        assert!(r[0].is_nan());
    }

    #[test]
    fn nll_spatial_layout() {
        // [N=1, C=2, d=3]: class-major planes [1, 2, 3] and [10, 20, 30].
        let s = LossShape { batch: 1, classes: 2, spatial: 3 };
        let x = [1.0f32, 2.0, 3.0, 10.0, 20.0, 30.0];
        let mut y = [0.0f32; 3];
        nll_loss(&params(s, Reduction::None, None), &x, &[1i64, 0, 1], None, &mut y).unwrap();
        assert_eq!(y, [-10.0, -2.0, -30.0]);
    }

    #[test]
    fn nll_refuses_bad_targets_and_buffers() {
        let x = [0.0f32; 6];
        let mut y = [0.0f32; 2];
        let p = params(NC, Reduction::None, Some(-100));
        assert_eq!(nll_loss(&p, &x, &[3i64, 0], None, &mut y), Err(Error::IndexOutOfBounds));
        assert_eq!(nll_loss(&p, &x, &[0i64, -1], None, &mut y), Err(Error::IndexOutOfBounds));
        assert_eq!(nll_loss(&p, &x, &[-100i64, 2], None, &mut y), Ok(()));
        assert_eq!(nll_loss(&p, &x[..5], &[0i64, 0], None, &mut y), Err(Error::ShapeMismatch));
        assert_eq!(
            nll_loss(&p, &x, &[0i64, 0], Some(&[1.0f32; 2]), &mut y),
            Err(Error::ShapeMismatch)
        );
        let mut r = [0.0f32];
        assert_eq!(nll_loss(&p, &x, &[0i64, 0], None, &mut r), Err(Error::ShapeMismatch));
        let p = params(NC, Reduction::Sum, None);
        assert_eq!(nll_loss(&p, &x, &[0i64, 0], None, &mut y), Err(Error::ShapeMismatch));
    }

    #[test]
    fn sce_is_nll_of_log_softmax() {
        // Row [0, ln 3]: softmax [1/4, 3/4]; row [5, 5]: [1/2, 1/2].
        let s = LossShape { batch: 2, classes: 2, spatial: 1 };
        let x = [0.0f64, 3.0f64.ln(), 5.0, 5.0];
        let (mut y, mut lp) = ([0.0f64; 2], [0.0f64; 4]);
        softmax_cross_entropy(
            &params(s, Reduction::None, None),
            &x,
            &[1i64, 0],
            None,
            &mut y,
            &mut lp,
        )
        .unwrap();
        let want_lp = [0.25f64.ln(), 0.75f64.ln(), 0.5f64.ln(), 0.5f64.ln()];
        for (a, b) in lp.iter().zip(want_lp) {
            assert!((a - b).abs() < 1e-15, "{lp:?}");
        }
        assert!(
            (y[0] - 4.0f64.ln() + 3.0f64.ln()).abs() < 1e-15 && (y[1] - 2.0f64.ln()).abs() < 1e-15
        );
        // Mean with weights [1, 3]: (3 * ln(4/3) + 1 * ln 2) / 4.
        let mut r = [0.0f64];
        let w = [1.0f64, 3.0];
        softmax_cross_entropy(
            &params(s, Reduction::Mean, None),
            &x,
            &[1i32, 0],
            Some(&w),
            &mut r,
            &mut lp,
        )
        .unwrap();
        let want = (3.0 * (4.0f64 / 3.0).ln() + 2.0f64.ln()) / 4.0;
        assert!((r[0] - want).abs() < 1e-15, "{r:?} {want}");
        let mut short = [0.0f64; 3];
        assert_eq!(
            softmax_cross_entropy(
                &params(s, Reduction::Sum, None),
                &x,
                &[1i32, 0],
                None,
                &mut r,
                &mut short
            ),
            Err(Error::ShapeMismatch)
        );
    }
}
