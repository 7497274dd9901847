//! `ai.onnx.ml` kernels: Binarizer, ArrayFeatureExtractor, LabelEncoder
//! (numeric keys and values) and TreeEnsemble.

use crate::num::{Float, Int, Num};
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

/// ONNX-ML `LabelEncoder` on numbers: each element of `x` becomes the value
/// of the first equal key (NaN keys match NaN), or `default`.
pub fn label_encoder<K: Num, V: Copy>(
    keys: &[K],
    values: &[V],
    default: V,
    x: &[K],
    y: &mut [V],
) -> Result {
    ensure(keys.len() == values.len(), Error::InvalidParams)?;
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        let hit = keys.iter().position(|&k| k == v || (k.is_nan() && v.is_nan()));
        *o = hit.and_then(|i| values.get(i)).copied().unwrap_or(default);
    }
    Ok(())
}

/// A child of a tree node: another node, or a leaf (both by index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    Node(usize),
    Leaf(usize),
}

/// How a tree node compares its feature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    /// Membership in `members[start..start + len]` of the ensemble.
    Member {
        start: usize,
        len: usize,
    },
}

/// One interior node of a tree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeNode {
    pub feature: usize,
    pub cmp: Cmp,
    pub split: f64,
    /// A NaN feature takes the true branch.
    pub missing_true: bool,
    pub if_true: Branch,
    pub if_false: Branch,
}

/// How the leaves reached in every tree combine per target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Aggregate {
    Average,
    Sum,
    Min,
    Max,
}

/// A tree ensemble: nodes, roots, leaves (weight and target each), the set
/// members of `Member` nodes, and the output's width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ensemble<'a> {
    pub nodes: &'a [TreeNode],
    pub roots: &'a [Branch],
    pub leaf_weights: &'a [f64],
    pub leaf_targets: &'a [usize],
    pub members: &'a [f64],
    pub features: usize,
    pub targets: usize,
    pub aggregate: Aggregate,
}

impl Ensemble<'_> {
    /// The leaf the tree rooted at `root` reaches for the features `x`.
    fn leaf(&self, root: Branch, x: &[f64]) -> Result<usize> {
        let mut at = root;
        for _ in 0..=self.nodes.len() {
            let i = match at {
                Branch::Leaf(l) => return Ok(l),
                Branch::Node(i) => i,
            };
            let n = self.nodes.get(i).ok_or(Error::InvalidParams)?;
            let v = *x.get(n.feature).ok_or(Error::InvalidParams)?;
            let hit = match n.cmp {
                Cmp::Leq => v <= n.split,
                Cmp::Lt => v < n.split,
                Cmp::Gte => v >= n.split,
                Cmp::Gt => v > n.split,
                Cmp::Eq => v == n.split,
                Cmp::Neq => v != n.split,
                Cmp::Member { start, len } => {
                    let set = self.members.get(start..start + len).ok_or(Error::InvalidParams)?;
                    set.contains(&v)
                }
            };
            at = if hit || (n.missing_true && v.is_nan()) { n.if_true } else { n.if_false };
        }
        // More steps than nodes: the trees have a cycle.
        Err(Error::InvalidParams)
    }
}

/// The largest finite value of `T` (`f32` or `f64`).
fn largest<T: Float>() -> T {
    let big = T::from_f64(f64::MAX);
    if big.to_f64() == f64::MAX { big } else { T::from_f64(f64::from(f32::MAX)) }
}

/// ONNX-ML `TreeEnsemble` (no post transform): `x` is `[rows, features]`,
/// `y` is `[rows, targets]`.
pub fn tree_ensemble<T: Float>(e: &Ensemble<'_>, x: &[T], y: &mut [T]) -> Result {
    ensure(e.features > 0 && e.features <= 4096, Error::InvalidParams)?;
    ensure(x.len().is_multiple_of(e.features), Error::ShapeMismatch)?;
    let rows = x.len() / e.features;
    ensure(rows.checked_mul(e.targets) == Some(y.len()), Error::ShapeMismatch)?;
    ensure(e.leaf_weights.len() == e.leaf_targets.len(), Error::InvalidParams)?;
    let init = match e.aggregate {
        Aggregate::Average | Aggregate::Sum => T::from_f64(0.0),
        Aggregate::Min => largest::<T>(),
        Aggregate::Max => largest::<T>().neg(),
    };
    let trees = e.roots.len() as f64;
    let mut feats = [0.0f64; 4096];
    for (r, row) in x.chunks(e.features).enumerate() {
        for (f, &v) in feats.iter_mut().zip(row) {
            *f = v.to_f64();
        }
        let out = y.get_mut(r * e.targets..(r + 1) * e.targets).ok_or(Error::ShapeMismatch)?;
        out.fill(init);
        for &root in e.roots {
            let leaf = e.leaf(root, &feats[..e.features])?;
            let w = *e.leaf_weights.get(leaf).ok_or(Error::InvalidParams)?;
            let t = *e.leaf_targets.get(leaf).ok_or(Error::InvalidParams)?;
            let o = out.get_mut(t).ok_or(Error::InvalidParams)?;
            *o = match e.aggregate {
                Aggregate::Sum => T::from_f64(o.to_f64() + w),
                Aggregate::Average => T::from_f64(o.to_f64() + w / trees),
                Aggregate::Min => T::from_f64(o.to_f64().min(w)),
                Aggregate::Max => T::from_f64(o.to_f64().max(w)),
            };
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

    #[test]
    fn label_encoder_by_hand() {
        let mut y = [0i16; 4];
        label_encoder(&[1.5f32, f32::NAN], &[7i16, 8], -1, &[1.5, 2.0, f32::NAN, 1.5], &mut y)
            .unwrap();
        assert_eq!(y, [7, -1, 8, 7]);
        assert_eq!(
            label_encoder(&[1i64], &[1i64, 2], 0, &[1], &mut [0]),
            Err(Error::InvalidParams)
        );
    }

    #[test]
    fn tree_by_hand() {
        // x0 <= 1 ? leaf 0 (target 0, 5) : (x0 in {3, 4} ? leaf 1 : leaf 2).
        let nodes = [
            TreeNode {
                feature: 0,
                cmp: Cmp::Leq,
                split: 1.0,
                missing_true: false,
                if_true: Branch::Leaf(0),
                if_false: Branch::Node(1),
            },
            TreeNode {
                feature: 0,
                cmp: Cmp::Member { start: 0, len: 2 },
                split: 0.0,
                missing_true: true,
                if_true: Branch::Leaf(1),
                if_false: Branch::Leaf(2),
            },
        ];
        let e = Ensemble {
            nodes: &nodes,
            roots: &[Branch::Node(0), Branch::Node(0)],
            leaf_weights: &[5.0, 7.0, 9.0],
            leaf_targets: &[0, 1, 1],
            members: &[3.0, 4.0],
            features: 1,
            targets: 2,
            aggregate: Aggregate::Sum,
        };
        let mut y = [0.0f32; 8];
        tree_ensemble(&e, &[0.0, 3.0, 5.0, f32::NAN], &mut y).unwrap();
        assert_eq!(y, [10.0, 0.0, 0.0, 14.0, 0.0, 18.0, 0.0, 14.0]);
        let cyclic = [TreeNode { if_false: Branch::Node(0), ..nodes[0] }];
        let e = Ensemble { nodes: &cyclic, ..e };
        assert_eq!(tree_ensemble(&e, &[2.0f32, 0.0, 0.0, 0.0], &mut y), Err(Error::InvalidParams));
    }
}
