//! Attention-family kernels: ONNX `Attention` (opsets 23 to 25, also the
//! subgraph-free `FlexAttention`), `RotaryEmbedding`, `SwiGLU` and
//! `CausalConvWithState`.
//!
//! Every kernel computes in the element type's accumulator ([`Real::Acc`]:
//! `f32` for `f32`, `f16` and `bf16`, `f64` for `f64`) and rounds once per
//! output element.

use crate::num::{Float, Num};
use crate::{Error, Result, bf16, ensure, f16};

/// An element the attention kernels read and write, with the type they
/// compute in.
pub trait Real: Copy + 'static {
    /// The type arithmetic runs in.
    type Acc: Float;
    /// Widens to the accumulator type.
    fn to_acc(self) -> Self::Acc;
    /// Rounds an accumulator value to the element type.
    fn from_acc(a: Self::Acc) -> Self;
    /// Whether a sum over a row in this type rounds after every addition
    /// (`bf16`) rather than once at the end (`f16`, which the reference sums
    /// in `f32`).
    const ROUNDS_EACH_ADD: bool = false;
}

impl Real for f32 {
    type Acc = f32;
    fn to_acc(self) -> f32 {
        self
    }
    fn from_acc(a: f32) -> f32 {
        a
    }
}

impl Real for f64 {
    type Acc = f64;
    fn to_acc(self) -> f64 {
        self
    }
    fn from_acc(a: f64) -> f64 {
        a
    }
}

impl Real for f16 {
    type Acc = f32;
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(a: f32) -> f16 {
        f16::from_f32(a)
    }
}

impl Real for bf16 {
    type Acc = f32;
    const ROUNDS_EACH_ADD: bool = true;
    fn to_acc(self) -> f32 {
        self.to_f32()
    }
    fn from_acc(a: f32) -> bf16 {
        bf16::from_f32(a)
    }
}

/// An attention mask element: a boolean (`bool`, or `u8` 0/1 as booleans are
/// held in the arena) allows (`true`, bias 0) or disallows (`false`, bias
/// `-inf`) a key; a float is added to the score.
pub trait MaskValue: Copy + 'static {
    /// The additive bias this element stands for.
    fn bias<A: Float>(self) -> A;
}

impl MaskValue for bool {
    fn bias<A: Float>(self) -> A {
        if self { A::ZERO } else { A::LOWEST }
    }
}

impl MaskValue for u8 {
    fn bias<A: Float>(self) -> A {
        if self != 0 { A::ZERO } else { A::LOWEST }
    }
}

macro_rules! float_mask {
    ($($t:ty),*) => {$(
        impl MaskValue for $t {
            fn bias<A: Float>(self) -> A {
                A::from_f64(f64::from(self))
            }
        }
    )*};
}
float_mask!(f32, f64, f16, bf16);

/// The dimensions of one Attention call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub batch: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub q_len: usize,
    /// Keys and values in `K`/`V` (the new ones, after `past`).
    pub kv_new: usize,
    /// Keys and values in `past_key`/`past_value` (0 without a cache).
    pub past: usize,
    /// The head size of `Q` and `K`.
    pub head: usize,
    /// The head size of `V`.
    pub v_head: usize,
    /// `Q`, `K`, `V` and `Y` are `[batch, seq, heads * head]` rather than
    /// `[batch, heads, seq, head]`.
    pub three_d: bool,
}

impl AttentionShape {
    fn total(&self) -> usize {
        self.past + self.kv_new
    }

    /// Strides (batch, head, position) of a `[batch, heads, seq, width]`
    /// tensor, or of its 3-D `[batch, seq, heads * width]` form.
    fn strides(&self, heads: usize, seq: usize, width: usize) -> [usize; 3] {
        if self.three_d {
            [seq * heads * width, width, heads * width]
        } else {
            [heads * seq * width, seq * width, width]
        }
    }
}

/// The mask's layout: element strides over `(batch, q_head, query, key)`
/// (0 on broadcast axes) and its key extent, which may be shorter than the
/// keys (the keys past it are masked out).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaskLayout {
    pub strides: [usize; 4],
    pub keys: usize,
    /// The mask's element count.
    pub len: usize,
}

/// The attributes of one Attention call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AttentionParams {
    pub shape: AttentionShape,
    /// The factor applied to `Q·Kᵀ` (as `sqrt(scale)` on each side).
    pub scale: f64,
    /// `softcap * tanh(score / softcap)` when positive.
    pub softcap: f64,
    pub is_causal: bool,
    /// Keys visible before / after the query's absolute position; negative
    /// for unbounded.
    pub left_window: i64,
    pub right_window: i64,
    /// What `qk_matmul_output` holds: 0 raw scores, 1 after softcap, 2 with
    /// the bias, 3 the probabilities.
    pub qk_mode: u8,
    /// The softmax rounds each step to `T` (no wider `softmax_precision`).
    pub softmax_in_t: bool,
    pub mask: Option<MaskLayout>,
}

/// The input buffers of an Attention call.
pub struct AttentionInputs<'a, T, M> {
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    pub mask: Option<&'a [M]>,
    pub past_key: Option<&'a [T]>,
    pub past_value: Option<&'a [T]>,
    /// Per batch, the number of valid keys (the rest is padding).
    pub nonpad_kv_seqlen: Option<&'a [i64]>,
}

/// The output buffers of an Attention call.
pub struct AttentionOutputs<'a, T> {
    pub y: &'a mut [T],
    pub present_key: Option<&'a mut [T]>,
    pub present_value: Option<&'a mut [T]>,
    pub qk: Option<&'a mut [T]>,
}

fn mul(dims: &[usize]) -> Result<usize> {
    dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or(Error::Overflow)
}

fn opt_len<T>(b: Option<&[T]>, n: usize) -> bool {
    b.is_none_or(|b| b.len() == n)
}

/// The scratch length [`attention`] needs: two rows of scores.
pub fn attention_scratch_len(shape: &AttentionShape) -> Option<usize> {
    shape.total().checked_mul(2)
}

/// Reads `K` or `V` (and their past) at `(batch, kv_head, position)` as one
/// row of `width` elements.
struct Cache<'a, T> {
    past: Option<&'a [T]>,
    new: &'a [T],
    new_strides: [usize; 3],
    past_len: usize,
    heads: usize,
    width: usize,
}

impl<T: Copy> Cache<'_, T> {
    fn row(&self, b: usize, h: usize, j: usize) -> &[T] {
        let (buf, at) = match self.past {
            Some(p) if j < self.past_len => {
                (p, ((b * self.heads + h) * self.past_len + j) * self.width)
            }
            _ => {
                let s = self.new_strides;
                (self.new, b * s[0] + h * s[1] + (j - self.past_len) * s[2])
            }
        };
        buf.get(at..at + self.width).unwrap_or(&[])
    }
}

/// ONNX `Attention`: `softmax(softcap(Q·Kᵀ·scale) + bias)·V` per head, with
/// the key/value cache concatenated in front of `K`/`V`, grouped-query heads
/// (each key/value head serves `q_heads / kv_heads` consecutive query
/// heads), and a bias made of the mask, the causal frontier, the sliding
/// window and the padding (`nonpad_kv_seqlen`). A query row whose bias is
/// `-inf` everywhere yields zeros. `scratch` holds two rows of scores.
pub fn attention<T: Real, M: MaskValue>(
    p: &AttentionParams,
    x: &AttentionInputs<'_, T, M>,
    out: AttentionOutputs<'_, T>,
    scratch: &mut [T::Acc],
) -> Result {
    let s = p.shape;
    let total = s.past.checked_add(s.kv_new).ok_or(Error::Overflow)?;
    ensure(s.kv_heads > 0 && s.q_heads.is_multiple_of(s.kv_heads), Error::InvalidParams)?;
    ensure(x.q.len() == mul(&[s.batch, s.q_heads, s.q_len, s.head])?, Error::ShapeMismatch)?;
    ensure(x.k.len() == mul(&[s.batch, s.kv_heads, s.kv_new, s.head])?, Error::ShapeMismatch)?;
    ensure(x.v.len() == mul(&[s.batch, s.kv_heads, s.kv_new, s.v_head])?, Error::ShapeMismatch)?;
    let past_k = mul(&[s.batch, s.kv_heads, s.past, s.head])?;
    let past_v = mul(&[s.batch, s.kv_heads, s.past, s.v_head])?;
    ensure(s.past == 0 || x.past_key.is_some(), Error::InvalidParams)?;
    ensure(x.past_key.is_some() == x.past_value.is_some(), Error::InvalidParams)?;
    ensure(opt_len(x.past_key, past_k) && opt_len(x.past_value, past_v), Error::ShapeMismatch)?;
    ensure(opt_len(x.nonpad_kv_seqlen, s.batch), Error::ShapeMismatch)?;
    ensure(out.y.len() == mul(&[s.batch, s.q_heads, s.q_len, s.v_head])?, Error::ShapeMismatch)?;
    let present_k = mul(&[s.batch, s.kv_heads, total, s.head])?;
    let present_v = mul(&[s.batch, s.kv_heads, total, s.v_head])?;
    ensure(opt_len(out.present_key.as_deref(), present_k), Error::ShapeMismatch)?;
    ensure(opt_len(out.present_value.as_deref(), present_v), Error::ShapeMismatch)?;
    let qk_len = mul(&[s.batch, s.q_heads, s.q_len, total])?;
    ensure(opt_len(out.qk.as_deref(), qk_len), Error::ShapeMismatch)?;
    ensure(scratch.len() >= 2 * total, Error::ShapeMismatch)?;
    match (p.mask, x.mask) {
        (Some(m), Some(buf)) => {
            ensure(buf.len() == m.len && m.keys <= total, Error::ShapeMismatch)?;
            if m.keys > 0 && s.batch > 0 && s.q_heads > 0 && s.q_len > 0 {
                let last = (s.batch - 1) * m.strides[0]
                    + (s.q_heads - 1) * m.strides[1]
                    + (s.q_len - 1) * m.strides[2]
                    + (m.keys - 1) * m.strides[3];
                ensure(last < buf.len(), Error::ShapeMismatch)?;
            }
        }
        (None, None) => {}
        _ => return Err(Error::InvalidParams),
    }

    let keys = Cache {
        past: x.past_key,
        new: x.k,
        new_strides: s.strides(s.kv_heads, s.kv_new, s.head),
        past_len: s.past,
        heads: s.kv_heads,
        width: s.head,
    };
    let values = Cache {
        past: x.past_value,
        new: x.v,
        new_strides: s.strides(s.kv_heads, s.kv_new, s.v_head),
        past_len: s.past,
        heads: s.kv_heads,
        width: s.v_head,
    };
    let AttentionOutputs { y, present_key, present_value, mut qk } = out;
    for (cache, present) in [(&keys, present_key), (&values, present_value)] {
        if let Some(dst) = present {
            let mut at = 0;
            for b in 0..s.batch {
                for h in 0..s.kv_heads {
                    for j in 0..total {
                        let row = cache.row(b, h, j);
                        dst[at..at + cache.width].copy_from_slice(row);
                        at += cache.width;
                    }
                }
            }
        }
    }

    let (scores, bias) = scratch.split_at_mut(total);
    let bias = &mut bias[..total];
    // Every step rounds to `T`, as the operator's definition computes in
    // `T`; the softmax does so unless `softmax_precision` widens it.
    let r = |a: T::Acc| T::from_acc(a).to_acc();
    let rs = |a: T::Acc| if p.softmax_in_t { r(a) } else { a };
    let sqrt_scale = r(<T::Acc as Float>::from_f64(p.scale.sqrt()));
    let softcap = r(<T::Acc as Float>::from_f64(p.softcap));
    let neg_inf = <T::Acc as Num>::LOWEST;
    let zero = <T::Acc as Num>::ZERO;
    let group = s.q_heads / s.kv_heads;
    let q_str = s.strides(s.q_heads, s.q_len, s.head);
    let y_str = s.strides(s.q_heads, s.q_len, s.v_head);
    let write = |o: &mut [T], at: usize, row: &[T::Acc]| {
        for (d, &v) in o[at..at + total].iter_mut().zip(row) {
            *d = T::from_acc(v);
        }
    };
    for b in 0..s.batch {
        let offset = match x.nonpad_kv_seqlen {
            Some(n) if x.past_key.is_none() => n[b].saturating_sub(s.q_len as i64),
            _ => s.past as i64,
        };
        let valid = x.nonpad_kv_seqlen.map(|n| n[b]);
        for h in 0..s.q_heads {
            let kh = h / group;
            for i in 0..s.q_len {
                let qa = b * q_str[0] + h * q_str[1] + i * q_str[2];
                let qrow = &x.q[qa..qa + s.head];
                let pos = offset.saturating_add(i as i64);
                let mut any = false;
                for j in 0..total {
                    let mut bb = zero;
                    if let (Some(m), Some(buf)) = (p.mask, x.mask) {
                        bb = if j < m.keys {
                            let st = m.strides;
                            let at = b * st[0] + h * st[1] + i * st[2] + j * st[3];
                            r(buf[at].bias::<T::Acc>())
                        } else {
                            neg_inf
                        };
                    }
                    let jj = j as i64;
                    let blocked = (p.is_causal && jj > pos)
                        || (p.left_window >= 0 && pos.saturating_sub(jj) > p.left_window)
                        || (p.right_window >= 0 && jj.saturating_sub(pos) > p.right_window)
                        || valid.is_some_and(|n| jj >= n);
                    if blocked {
                        bb = bb.add(neg_inf);
                    }
                    any |= bb != neg_inf;
                    bias[j] = bb;
                    let krow = keys.row(b, kh, j);
                    let mut dot = zero;
                    for (qv, kv) in qrow.iter().zip(krow) {
                        dot = dot.add(
                            r(qv.to_acc().mul(sqrt_scale)).mul(r(kv.to_acc().mul(sqrt_scale))),
                        );
                    }
                    scores[j] = r(dot);
                }
                let qk_at = ((b * s.q_heads + h) * s.q_len + i) * total;
                if let (Some(o), 0) = (qk.as_deref_mut(), p.qk_mode) {
                    write(o, qk_at, scores);
                }
                if p.softcap > 0.0 {
                    for v in scores.iter_mut() {
                        let t = r(v.div(softcap).unwrap_or(<T::Acc as Float>::NAN));
                        *v = r(softcap.mul(r(t.tanh())));
                    }
                }
                if let (Some(o), 1) = (qk.as_deref_mut(), p.qk_mode) {
                    write(o, qk_at, scores);
                }
                for (v, &bb) in scores.iter_mut().zip(bias.iter()) {
                    *v = r(v.add(bb));
                }
                if let (Some(o), 2) = (qk.as_deref_mut(), p.qk_mode) {
                    write(o, qk_at, scores);
                }
                if any {
                    let m = scores.iter().fold(neg_inf, |m, &v| m.max_of(v));
                    let m = if m == neg_inf { zero } else { m };
                    let mut sum = zero;
                    for v in scores.iter_mut() {
                        *v = rs(rs(v.sub(m)).exp());
                        sum = sum.add(*v);
                        if T::ROUNDS_EACH_ADD {
                            sum = rs(sum);
                        }
                    }
                    sum = rs(sum);
                    if sum == zero {
                        sum = <T::Acc as Num>::ONE;
                    }
                    for v in scores.iter_mut() {
                        *v = r(rs(v.div(sum).unwrap_or(<T::Acc as Float>::NAN)));
                    }
                } else {
                    scores.fill(zero);
                }
                if let (Some(o), 3) = (qk.as_deref_mut(), p.qk_mode) {
                    write(o, qk_at, scores);
                }
                let ya = b * y_str[0] + h * y_str[1] + i * y_str[2];
                for c in 0..s.v_head {
                    let mut acc = zero;
                    for (j, &w) in scores.iter().enumerate() {
                        if let Some(v) = values.row(b, kh, j).get(c) {
                            acc = acc.add(w.mul(v.to_acc()));
                        }
                    }
                    y[ya + c] = T::from_acc(acc);
                }
            }
        }
    }
    Ok(())
}

/// FlexAttention's scores for its `score_mod` / `prob_mod` subgraphs, which
/// take the whole `[batch, q_heads, q_len, kv_len]` tensor: `Q·Kᵀ` with
/// `sqrt(scale)` (computed in `f32`, then rounded to `T`, as the reference)
/// applied to each side in `T`, summed in `T::Acc` and rounded to `T` once,
/// then widened to `T::Acc`, the softmax precision. `shape` is 4-D
/// (`three_d` false) without a cache (`past` 0); key/value head
/// `h / (q_heads / kv_heads)` serves query head `h`.
pub fn flex_scores<T: Real>(
    shape: &AttentionShape,
    scale: f64,
    q: &[T],
    k: &[T],
    scores: &mut [T::Acc],
) -> Result {
    let s = *shape;
    ensure(!s.three_d && s.past == 0, Error::InvalidParams)?;
    ensure(s.kv_heads > 0 && s.q_heads.is_multiple_of(s.kv_heads), Error::InvalidParams)?;
    ensure(q.len() == mul(&[s.batch, s.q_heads, s.q_len, s.head])?, Error::ShapeMismatch)?;
    ensure(k.len() == mul(&[s.batch, s.kv_heads, s.kv_new, s.head])?, Error::ShapeMismatch)?;
    ensure(scores.len() == mul(&[s.batch, s.q_heads, s.q_len, s.kv_new])?, Error::ShapeMismatch)?;
    let r = |a: T::Acc| T::from_acc(a).to_acc();
    let ss = r(<T::Acc as Float>::from_f64(f64::from(crate::num::sqrtf(scale as f32))));
    let group = s.q_heads / s.kv_heads;
    let mut at = 0;
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            let kh = h / group;
            for i in 0..s.q_len {
                let qa = ((b * s.q_heads + h) * s.q_len + i) * s.head;
                let qrow = &q[qa..qa + s.head];
                for j in 0..s.kv_new {
                    let ka = ((b * s.kv_heads + kh) * s.kv_new + j) * s.head;
                    let mut dot = <T::Acc as Num>::ZERO;
                    for (qv, kv) in qrow.iter().zip(&k[ka..ka + s.head]) {
                        dot = dot.add(r(qv.to_acc().mul(ss)).mul(r(kv.to_acc().mul(ss))));
                    }
                    scores[at] = r(dot);
                    at += 1;
                }
            }
        }
    }
    Ok(())
}

/// FlexAttention's output from its probabilities (`[batch, q_heads, q_len,
/// kv_len]` in `T::Acc`): `Y = P·V` with `V` widened to `T::Acc`, each sum
/// rounded to `T` once. The layout is as in [`flex_scores`].
pub fn flex_output<T: Real>(
    shape: &AttentionShape,
    probs: &[T::Acc],
    v: &[T],
    y: &mut [T],
) -> Result {
    let s = *shape;
    ensure(!s.three_d && s.past == 0, Error::InvalidParams)?;
    ensure(s.kv_heads > 0 && s.q_heads.is_multiple_of(s.kv_heads), Error::InvalidParams)?;
    ensure(probs.len() == mul(&[s.batch, s.q_heads, s.q_len, s.kv_new])?, Error::ShapeMismatch)?;
    ensure(v.len() == mul(&[s.batch, s.kv_heads, s.kv_new, s.v_head])?, Error::ShapeMismatch)?;
    ensure(y.len() == mul(&[s.batch, s.q_heads, s.q_len, s.v_head])?, Error::ShapeMismatch)?;
    let group = s.q_heads / s.kv_heads;
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            let kh = h / group;
            for i in 0..s.q_len {
                let row = ((b * s.q_heads + h) * s.q_len + i) * s.kv_new;
                let p = &probs[row..row + s.kv_new];
                let ya = ((b * s.q_heads + h) * s.q_len + i) * s.v_head;
                for c in 0..s.v_head {
                    let mut acc = <T::Acc as Num>::ZERO;
                    for (j, &w) in p.iter().enumerate() {
                        let va = ((b * s.kv_heads + kh) * s.kv_new + j) * s.v_head + c;
                        acc = acc.add(w.mul(v[va].to_acc()));
                    }
                    y[ya + c] = T::from_acc(acc);
                }
            }
        }
    }
    Ok(())
}

/// The layout of one RotaryEmbedding call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RotaryParams {
    pub batch: usize,
    pub heads: usize,
    pub seq: usize,
    pub head: usize,
    /// The rotated leading part of each head (even, at most `head`).
    pub rot: usize,
    /// Rotate pairs `(2k, 2k+1)` rather than `(k, k + rot/2)`.
    pub interleaved: bool,
    /// `X` is `[batch, seq, heads * head]` rather than `[batch, heads, seq, head]`.
    pub three_d: bool,
    /// Rows of the caches when `position_ids` index them (`[positions, rot/2]`);
    /// without `position_ids` the caches are `[batch, seq, rot/2]`.
    pub positions: usize,
}

/// ONNX `RotaryEmbedding`: rotates each head's first `rot` elements by the
/// angles whose cosines and sines the caches hold, for the token's position
/// (`position_ids`, or the caches taken per batch and token). Positions
/// outside the caches are an [`Error::IndexOutOfBounds`].
pub fn rotary_embedding<T: Real>(
    p: &RotaryParams,
    x: &[T],
    cos: &[T],
    sin: &[T],
    position_ids: Option<&[i64]>,
    y: &mut [T],
) -> Result {
    let n = mul(&[p.batch, p.heads, p.seq, p.head])?;
    let half = p.rot / 2;
    ensure(p.rot.is_multiple_of(2) && p.rot <= p.head, Error::InvalidParams)?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    let rows = if position_ids.is_some() { p.positions } else { mul(&[p.batch, p.seq])? };
    let cache = mul(&[rows, half])?;
    ensure(cos.len() == cache && sin.len() == cache, Error::ShapeMismatch)?;
    ensure(opt_len(position_ids, mul(&[p.batch, p.seq])?), Error::ShapeMismatch)?;
    for b in 0..p.batch {
        for s in 0..p.seq {
            let row = match position_ids {
                Some(ids) => {
                    let id = ids[b * p.seq + s];
                    let id = usize::try_from(id).map_err(|_| Error::IndexOutOfBounds)?;
                    ensure(id < rows, Error::IndexOutOfBounds)?;
                    id
                }
                None => b * p.seq + s,
            };
            let (c, sn) = (&cos[row * half..(row + 1) * half], &sin[row * half..(row + 1) * half]);
            for h in 0..p.heads {
                let at = if p.three_d {
                    (b * p.seq + s) * p.heads * p.head + h * p.head
                } else {
                    ((b * p.heads + h) * p.seq + s) * p.head
                };
                let (xs, ys) = (&x[at..at + p.head], &mut y[at..at + p.head]);
                for k in 0..half {
                    let (i1, i2) = if p.interleaved { (2 * k, 2 * k + 1) } else { (k, k + half) };
                    let (x1, x2) = (xs[i1].to_acc(), xs[i2].to_acc());
                    let (ck, sk) = (c[k].to_acc(), sn[k].to_acc());
                    ys[i1] = T::from_acc(ck.mul(x1).sub(sk.mul(x2)));
                    ys[i2] = T::from_acc(sk.mul(x1).add(ck.mul(x2)));
                }
                ys[p.rot..].copy_from_slice(&xs[p.rot..]);
            }
        }
    }
    Ok(())
}

/// ONNX `SwiGLU`: `y = a · sigmoid(alpha · a) · b`, elementwise over
/// same-shaped inputs.
pub fn swiglu<T: Real>(alpha: f64, a: &[T], b: &[T], y: &mut [T]) -> Result {
    ensure(a.len() == y.len() && b.len() == y.len(), Error::ShapeMismatch)?;
    let alpha = <T::Acc as Float>::from_f64(alpha);
    let one = <T::Acc as Num>::ONE;
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        let a = a.to_acc();
        let sig = one.div(one.add(alpha.mul(a).neg().exp())).unwrap_or(<T::Acc as Float>::NAN);
        *y = T::from_acc(a.mul(sig).mul(b.to_acc()));
    }
    Ok(())
}

/// The layout of one CausalConvWithState call: `[batch, channels, len]`
/// inputs, a kernel of `k` taps per channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CausalConvParams {
    pub batch: usize,
    pub channels: usize,
    pub len: usize,
    pub k: usize,
    /// Apply SiLU (`x · sigmoid(x)`) to the convolution's result.
    pub silu: bool,
}

/// ONNX `CausalConvWithState`: a depthwise 1-D convolution over the
/// sequence `past_state ++ input` (zeros when `past_state` is absent), with
/// an optional per-channel bias and SiLU; `present_state` receives the last
/// `k - 1` positions of that sequence.
pub fn causal_conv_with_state<T: Real>(
    p: &CausalConvParams,
    x: &[T],
    weight: &[T],
    bias: Option<&[T]>,
    past: Option<&[T]>,
    y: &mut [T],
    present: &mut [T],
) -> Result {
    ensure(p.k > 0, Error::InvalidParams)?;
    let keep = p.k - 1;
    let n = mul(&[p.batch, p.channels, p.len])?;
    let state = mul(&[p.batch, p.channels, keep])?;
    ensure(x.len() == n && y.len() == n, Error::ShapeMismatch)?;
    ensure(weight.len() == mul(&[p.channels, p.k])?, Error::ShapeMismatch)?;
    ensure(opt_len(bias, p.channels) && opt_len(past, state), Error::ShapeMismatch)?;
    ensure(present.len() == state, Error::ShapeMismatch)?;
    let zero = <T::Acc as Num>::ZERO;
    let one = <T::Acc as Num>::ONE;
    for b in 0..p.batch {
        for c in 0..p.channels {
            let row = (b * p.channels + c) * p.len;
            let srow = (b * p.channels + c) * keep;
            // Position `t` of `past ++ input`.
            let at = |t: usize| -> T::Acc {
                if t < keep {
                    past.map_or(zero, |s| s[srow + t].to_acc())
                } else {
                    x[row + t - keep].to_acc()
                }
            };
            let w = &weight[c * p.k..(c + 1) * p.k];
            let b0 = bias.map_or(zero, |b| b[c].to_acc());
            for t in 0..p.len {
                let mut acc = b0;
                for (m, wm) in w.iter().enumerate() {
                    acc = acc.add(wm.to_acc().mul(at(t + m)));
                }
                let mut v = T::from_acc(acc).to_acc();
                if p.silu {
                    let sig = one.div(one.add(v.neg().exp())).unwrap_or(<T::Acc as Float>::NAN);
                    v = v.mul(sig);
                }
                y[row + t] = T::from_acc(v);
            }
            for (j, d) in present[srow..srow + keep].iter_mut().enumerate() {
                *d = T::from_acc(at(p.len + j));
            }
        }
    }
    Ok(())
}

/// How a LinearAttention step reads its decay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decay {
    /// No gating (`linear` and `delta` rules).
    None,
    /// One log-decay per key/value head and token.
    PerHead,
    /// One log-decay per key dimension, head and token.
    PerKey,
}

/// The layout of one LinearAttention call: 3-D `[batch, len, heads * dim]`
/// query, key, value; state `[batch, kv_heads, key_dim, value_dim]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinearAttentionParams {
    pub batch: usize,
    pub len: usize,
    pub q_heads: usize,
    pub kv_heads: usize,
    pub key_dim: usize,
    pub value_dim: usize,
    pub decay: Decay,
    /// `beta`'s last extent when the delta rule applies: `kv_heads` or 1;
    /// 0 without the delta rule.
    pub beta_heads: usize,
    pub scale: f64,
}

/// The inputs of one LinearAttention call.
pub struct LinearAttentionInputs<'a, T> {
    pub query: &'a [T],
    pub key: &'a [T],
    pub value: &'a [T],
    pub past_state: Option<&'a [T]>,
    pub decay: Option<&'a [T]>,
    pub beta: Option<&'a [T]>,
}

/// The scratch length [`linear_attention`] needs: one head's state and one
/// value row.
pub fn linear_attention_scratch_len(p: &LinearAttentionParams) -> Option<usize> {
    p.key_dim.checked_mul(p.value_dim)?.checked_add(p.value_dim)
}

/// ONNX `LinearAttention`: per key/value head, a `key_dim × value_dim` state
/// updated token by token (`S ← S·exp(g)` when gated; `v ← β·(v − Sᵀk)` with
/// the delta rule; `S ← S + k vᵀ`), each query head of the group reading
/// `scale · qᵀS`. The state stays in the accumulator type between tokens.
pub fn linear_attention<T: Real>(
    p: &LinearAttentionParams,
    x: &LinearAttentionInputs<'_, T>,
    output: &mut [T],
    present: &mut [T],
    scratch: &mut [T::Acc],
) -> Result {
    let (dk, dv) = (p.key_dim, p.value_dim);
    ensure(p.kv_heads > 0 && p.q_heads.is_multiple_of(p.kv_heads), Error::InvalidParams)?;
    let tokens = mul(&[p.batch, p.len])?;
    ensure(x.query.len() == mul(&[tokens, p.q_heads, dk])?, Error::ShapeMismatch)?;
    ensure(x.key.len() == mul(&[tokens, p.kv_heads, dk])?, Error::ShapeMismatch)?;
    ensure(x.value.len() == mul(&[tokens, p.kv_heads, dv])?, Error::ShapeMismatch)?;
    ensure(output.len() == mul(&[tokens, p.q_heads, dv])?, Error::ShapeMismatch)?;
    let state_len = mul(&[p.batch, p.kv_heads, dk, dv])?;
    ensure(present.len() == state_len && opt_len(x.past_state, state_len), Error::ShapeMismatch)?;
    let decay_len = match p.decay {
        Decay::None => 0,
        Decay::PerHead => mul(&[tokens, p.kv_heads])?,
        Decay::PerKey => mul(&[tokens, p.kv_heads, dk])?,
    };
    ensure(x.decay.map_or(0, <[T]>::len) == decay_len, Error::ShapeMismatch)?;
    ensure(x.beta.map_or(0, <[T]>::len) == mul(&[tokens, p.beta_heads])?, Error::ShapeMismatch)?;
    ensure(
        p.beta_heads == 0 || p.beta_heads == 1 || p.beta_heads == p.kv_heads,
        Error::InvalidParams,
    )?;
    let hd = dk * dv;
    ensure(scratch.len() >= hd + dv, Error::ShapeMismatch)?;
    let (state, vrow) = scratch.split_at_mut(hd);
    let zero = <T::Acc as Num>::ZERO;
    let scale = <T::Acc as Float>::from_f64(p.scale);
    let group = p.q_heads / p.kv_heads;
    for b in 0..p.batch {
        for kh in 0..p.kv_heads {
            let s0 = (b * p.kv_heads + kh) * hd;
            match x.past_state {
                Some(ps) => {
                    for (d, v) in state.iter_mut().zip(&ps[s0..s0 + hd]) {
                        *d = v.to_acc();
                    }
                }
                None => state.fill(zero),
            }
            for t in 0..p.len {
                let tok = b * p.len + t;
                let krow = &x.key[(tok * p.kv_heads + kh) * dk..][..dk];
                let va = (tok * p.kv_heads + kh) * dv;
                for (d, v) in vrow[..dv].iter_mut().zip(&x.value[va..va + dv]) {
                    *d = v.to_acc();
                }
                if let Some(g) = x.decay {
                    for d in 0..dk {
                        let gd = match p.decay {
                            Decay::PerKey => g[(tok * p.kv_heads + kh) * dk + d],
                            _ => g[tok * p.kv_heads + kh],
                        };
                        let f = gd.to_acc().exp();
                        for s in &mut state[d * dv..(d + 1) * dv] {
                            *s = s.mul(f);
                        }
                    }
                }
                if let Some(beta) = x.beta {
                    let bh = if p.beta_heads == 1 { 0 } else { kh };
                    let bt = beta[tok * p.beta_heads + bh].to_acc();
                    for (m, v) in vrow[..dv].iter_mut().enumerate() {
                        let mut r = zero;
                        for (d, kd) in krow.iter().enumerate() {
                            r = r.add(state[d * dv + m].mul(kd.to_acc()));
                        }
                        *v = bt.mul(v.sub(r));
                    }
                }
                for (d, kd) in krow.iter().enumerate() {
                    let kd = kd.to_acc();
                    for (s, &v) in state[d * dv..(d + 1) * dv].iter_mut().zip(vrow.iter()) {
                        *s = s.add(kd.mul(v));
                    }
                }
                for h in kh * group..(kh + 1) * group {
                    let qrow = &x.query[(tok * p.q_heads + h) * dk..][..dk];
                    let oa = (tok * p.q_heads + h) * dv;
                    for m in 0..dv {
                        let mut acc = zero;
                        for (d, qd) in qrow.iter().enumerate() {
                            acc = acc.add(qd.to_acc().mul(state[d * dv + m]));
                        }
                        output[oa + m] = T::from_acc(scale.mul(acc));
                    }
                }
            }
            for (d, &s) in present[s0..s0 + hd].iter_mut().zip(state.iter()) {
                *d = T::from_acc(s);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(q_len: usize, kv_new: usize) -> AttentionShape {
        AttentionShape {
            batch: 1,
            q_heads: 1,
            kv_heads: 1,
            q_len,
            kv_new,
            past: 0,
            head: 1,
            v_head: 1,
            three_d: false,
        }
    }

    fn params(s: AttentionShape) -> AttentionParams {
        AttentionParams {
            shape: s,
            scale: 1.0,
            softcap: 0.0,
            is_causal: false,
            left_window: -1,
            right_window: -1,
            qk_mode: 0,
            softmax_in_t: true,
            mask: None,
        }
    }

    fn inputs<'a>(q: &'a [f32], k: &'a [f32], v: &'a [f32]) -> AttentionInputs<'a, f32, bool> {
        AttentionInputs {
            q,
            k,
            v,
            mask: None,
            past_key: None,
            past_value: None,
            nonpad_kv_seqlen: None,
        }
    }

    #[test]
    fn equal_scores_average_the_values() {
        // q = 0: every score is 0, so the weights are 1/2 and y = (1 + 3) / 2.
        let p = params(shape(1, 2));
        let (mut y, mut scratch) = ([0.0f32], [0.0f32; 4]);
        let out = AttentionOutputs { y: &mut y, present_key: None, present_value: None, qk: None };
        attention(&p, &inputs(&[0.0], &[1.0, 2.0], &[1.0, 3.0]), out, &mut scratch).unwrap();
        assert_eq!(y, [2.0]);
    }

    #[test]
    fn causal_rows_and_scores() {
        // Scores q·k = [1·1, 1·ln3]; query 0 sees key 0 only, query 1 both:
        // weights e^0 : e^ln3 = 1 : 3 give (1·1 + 3·5) / 4 = 4.
        let mut p = params(shape(2, 2));
        p.is_causal = true;
        p.qk_mode = 3;
        let ln3 = 3f32.ln();
        let (mut y, mut qk, mut scratch) = ([0.0f32; 2], [0.0f32; 4], [0.0f32; 4]);
        let out = AttentionOutputs {
            y: &mut y,
            present_key: None,
            present_value: None,
            qk: Some(&mut qk),
        };
        attention(&p, &inputs(&[1.0, 1.0], &[0.0, ln3], &[1.0, 5.0]), out, &mut scratch).unwrap();
        assert!((y[0] - 1.0).abs() < 1e-6 && (y[1] - 4.0).abs() < 1e-5, "{y:?}");
        assert!((qk[0] - 1.0).abs() < 1e-6 && qk[1] == 0.0 && (qk[3] - 0.75).abs() < 1e-6);
    }

    #[test]
    fn fully_masked_rows_are_zero_and_past_is_concatenated() {
        let mut p = params(AttentionShape { past: 1, ..shape(1, 1) });
        p.mask = Some(MaskLayout { strides: [0, 0, 0, 1], keys: 2, len: 2 });
        let mask = [false, false];
        let x = AttentionInputs {
            mask: Some(&mask[..]),
            past_key: Some(&[7.0f32][..]),
            past_value: Some(&[8.0f32][..]),
            ..inputs(&[1.0], &[2.0], &[3.0])
        };
        let (mut y, mut pk, mut pv, mut scratch) =
            ([9.0f32], [0.0f32; 2], [0.0f32; 2], [0.0f32; 4]);
        let out = AttentionOutputs {
            y: &mut y,
            present_key: Some(&mut pk),
            present_value: Some(&mut pv),
            qk: None,
        };
        attention(&p, &x, out, &mut scratch).unwrap();
        assert_eq!((y, pk, pv), ([0.0], [7.0, 2.0], [8.0, 3.0]));
    }

    #[test]
    fn wrong_lengths_are_errors() {
        let p = params(shape(1, 2));
        let (mut y, mut scratch) = ([0.0f32], [0.0f32; 4]);
        let out = AttentionOutputs { y: &mut y, present_key: None, present_value: None, qk: None };
        let r = attention(&p, &inputs(&[0.0], &[1.0], &[1.0, 3.0]), out, &mut scratch);
        assert_eq!(r, Err(Error::ShapeMismatch));
    }

    #[test]
    fn rotary_rotates_pairs() {
        // One head of size 4, angle 90° on pair 0 and 0° on pair 1.
        let p = RotaryParams {
            batch: 1,
            heads: 1,
            seq: 1,
            head: 4,
            rot: 4,
            interleaved: false,
            three_d: false,
            positions: 1,
        };
        let mut y = [0.0f32; 4];
        rotary_embedding(&p, &[1.0, 2.0, 3.0, 4.0], &[0.0, 1.0], &[1.0, 0.0], Some(&[0]), &mut y)
            .unwrap();
        // Pairs (x0, x2) = (1, 3) -> (-3, 1); (x1, x3) = (2, 4) unchanged.
        assert_eq!(y, [-3.0, 2.0, 1.0, 4.0]);
        let r = rotary_embedding(&p, &[1.0; 4], &[0.0, 1.0], &[1.0, 0.0], Some(&[1]), &mut y);
        assert_eq!(r, Err(Error::IndexOutOfBounds));
    }

    #[test]
    fn swiglu_and_causal_conv() {
        let mut y = [0.0f32; 2];
        swiglu(1.0, &[0.0, 2.0], &[5.0, 3.0], &mut y).unwrap();
        let want = 2.0 / (1.0 + (-2.0f32).exp()) * 3.0;
        assert!(y[0] == 0.0 && (y[1] - want).abs() < 1e-6);
        // k = 2, weights [1, 10]: y_t = x_{t-1} + 10 x_t, with past 5.
        let p = CausalConvParams { batch: 1, channels: 1, len: 2, k: 2, silu: false };
        let (mut y, mut st) = ([0.0f32; 2], [0.0f32]);
        causal_conv_with_state(
            &p,
            &[1.0, 2.0],
            &[1.0, 10.0],
            Some(&[0.5]),
            Some(&[5.0]),
            &mut y,
            &mut st,
        )
        .unwrap();
        assert_eq!((y, st), ([15.5, 21.5], [2.0]));
    }

    #[test]
    fn linear_attention_accumulates_outer_products() {
        // One head, dk = dv = 1, no gating: S_t = sum k v, y_t = scale q S_t.
        let p = LinearAttentionParams {
            batch: 1,
            len: 2,
            q_heads: 1,
            kv_heads: 1,
            key_dim: 1,
            value_dim: 1,
            decay: Decay::None,
            beta_heads: 0,
            scale: 0.5,
        };
        let x = LinearAttentionInputs {
            query: &[1.0f32, 2.0],
            key: &[2.0, 1.0],
            value: &[3.0, 4.0],
            past_state: None,
            decay: None,
            beta: None,
        };
        let (mut y, mut st, mut scratch) = ([0.0f32; 2], [0.0f32], [0.0f32; 2]);
        linear_attention(&p, &x, &mut y, &mut st, &mut scratch).unwrap();
        // S1 = 6, y1 = 3; S2 = 10, y2 = 0.5 * 2 * 10 = 10.
        assert_eq!((y, st), ([3.0, 10.0], [10.0]));
    }
}
