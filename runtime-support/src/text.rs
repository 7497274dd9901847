//! Text-processing kernels on integer token ids: `TfIdfVectorizer`.
//!
//! No allocation: the n-gram pool is a generation-time constant, and the
//! counts are accumulated directly in the caller's output.

use crate::num::Int;
use crate::{Error, Result, ensure};

/// How `TfIdfVectorizer` turns n-gram counts into output values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weighting {
    /// The count itself.
    Tf,
    /// The weight (or 1) where the count is nonzero, else 0.
    Idf,
    /// The count times the weight (or the count when there are no weights).
    TfIdf,
}

/// One n-gram of the pool: `(length, offset of its first token in the pool,
/// output column)`.
pub type Gram = (usize, usize, usize);

/// The parameters of one `TfIdfVectorizer` call.
#[derive(Clone, Copy, Debug)]
pub struct TfIdf<'a> {
    /// Rows of the input (1 for a rank-1 input).
    pub rows: usize,
    /// Tokens per row.
    pub cols: usize,
    /// Shortest n-gram counted.
    pub min_n: usize,
    /// Longest n-gram counted.
    pub max_n: usize,
    /// Largest number of tokens skipped between two tokens of an n-gram.
    pub max_skip: usize,
    /// The pool's tokens, n-grams laid end to end.
    pub pool: &'a [i64],
    /// The pool's n-grams, in pool order.
    pub grams: &'a [Gram],
    /// Output columns per row.
    pub width: usize,
    /// How counts become values.
    pub mode: Weighting,
    /// One weight per output column, or none.
    pub weights: &'a [f32],
}

/// ONNX `TfIdfVectorizer` on integer tokens: `y[r, c]` from the number of
/// times the n-gram of output column `c` occurs in row `r` of `x`, with up to
/// `max_skip` tokens skipped between consecutive tokens of an n-gram
/// (unigrams are counted once, whatever the skip).
pub fn tf_idf<I: Int>(p: &TfIdf<'_>, x: &[I], y: &mut [f32]) -> Result {
    ensure(Some(x.len()) == p.rows.checked_mul(p.cols), Error::ShapeMismatch)?;
    ensure(Some(y.len()) == p.rows.checked_mul(p.width), Error::ShapeMismatch)?;
    ensure(p.weights.is_empty() || p.weights.len() >= p.width, Error::InvalidParams)?;
    for &(n, start, col) in p.grams {
        ensure(n >= 1 && col < p.width, Error::InvalidParams)?;
        ensure(start.checked_add(n).is_some_and(|e| e <= p.pool.len()), Error::InvalidParams)?;
    }
    y.fill(0.0);
    if p.min_n == 0 || p.min_n > p.max_n {
        return Ok(());
    }
    for r in 0..p.rows {
        let row = &x[r * p.cols..(r + 1) * p.cols];
        let out = &mut y[r * p.width..(r + 1) * p.width];
        for d in 1..=p.max_skip.saturating_add(1).min(p.cols.max(1)) {
            let lo = if d > 1 { p.min_n.max(2) } else { p.min_n };
            for n in lo..=p.max_n {
                for s in 0..p.cols {
                    let Some(last) = (n - 1).checked_mul(d).and_then(|k| k.checked_add(s)) else {
                        break;
                    };
                    if last >= p.cols {
                        break;
                    }
                    if let Some(col) = find(p, row, s, d, n) {
                        out[col] += 1.0;
                    }
                }
            }
        }
        for (c, v) in out.iter_mut().enumerate() {
            let w = p.weights.get(c).copied();
            *v = match (p.mode, w) {
                (Weighting::Tf, _) => *v,
                (Weighting::Idf, _) if *v == 0.0 => 0.0,
                (Weighting::Idf, w) => w.unwrap_or(1.0),
                (Weighting::TfIdf, Some(w)) => w * *v,
                (Weighting::TfIdf, None) => *v,
            };
        }
    }
    Ok(())
}

/// The output column of the pool's last n-gram equal to the tokens of `row`
/// at `s, s + d, ..., s + (n - 1) d`, if any.
fn find<I: Int>(p: &TfIdf<'_>, row: &[I], s: usize, d: usize, n: usize) -> Option<usize> {
    p.grams.iter().rev().find_map(|&(len, start, col)| {
        let toks = p.pool.get(start..start + len)?;
        let hit = len == n
            && toks
                .iter()
                .enumerate()
                .all(|(k, &t)| row.get(s + k * d).and_then(|v| v.to_i64()) == Some(t));
        hit.then_some(col)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params<'a>(pool: &'a [i64], grams: &'a [Gram], min_n: usize, skip: usize) -> TfIdf<'a> {
        TfIdf {
            rows: 1,
            cols: 6,
            min_n,
            max_n: 2,
            max_skip: skip,
            pool,
            grams,
            width: 3,
            mode: Weighting::Tf,
            weights: &[],
        }
    }

    #[test]
    fn counts_by_hand() {
        // Pool: unigram 1, bigrams (1,2) and (2,1).
        let pool = [1, 1, 2, 2, 1];
        let grams = [(1, 0, 0), (2, 1, 1), (2, 3, 2)];
        let x = [1i32, 2, 1, 3, 2, 1];
        let mut y = [0.0f32; 3];
        tf_idf(&params(&pool, &grams, 1, 0), &x, &mut y).unwrap();
        // Unigram 1 three times; (1,2) at 0; (2,1) at 1 and 4.
        assert_eq!(y, [3.0, 1.0, 2.0]);
        // Skip 1 adds (1,1) at 0 (not pooled), (2,3), (1,2) at 2, (3,1) ...:
        // pairs with distance 2: (1,1),(2,3),(1,2),(3,1) -> (1,2) once more.
        // Distance 3: (1,3),(2,2),(1,1) -> nothing. Unigrams not recounted.
        tf_idf(&params(&pool, &grams, 1, 2), &x, &mut y).unwrap();
        assert_eq!(y, [3.0, 2.0, 2.0]);
        // Only bigrams.
        tf_idf(&params(&pool, &grams, 2, 0), &x, &mut y).unwrap();
        assert_eq!(y, [0.0, 1.0, 2.0]);
    }

    #[test]
    fn weighting_by_hand() {
        let pool = [1, 1, 2, 2, 1];
        let grams = [(1, 0, 0), (2, 1, 1), (2, 3, 2)];
        let x = [1i64, 2, 1, 3, 2, 1];
        let mut y = [0.0f32; 3];
        let w = [0.5, 2.0, 0.0];
        let mut p = params(&pool, &grams, 1, 0);
        p.weights = &w;
        p.mode = Weighting::TfIdf;
        tf_idf(&p, &x, &mut y).unwrap();
        assert_eq!(y, [1.5, 2.0, 0.0]);
        p.mode = Weighting::Idf;
        tf_idf(&p, &x, &mut y).unwrap();
        assert_eq!(y, [0.5, 2.0, 0.0]);
        p.weights = &[];
        tf_idf(&p, &x, &mut y).unwrap();
        assert_eq!(y, [1.0, 1.0, 1.0]);
        assert_eq!(tf_idf(&p, &x[..5], &mut y), Err(Error::ShapeMismatch));
    }
}
