//! An LSTM on dynamically quantized activations, computed as onnxruntime's
//! `com.microsoft.DynamicQuantizeLSTM` kernel computes it.
//!
//! The weights are 8-bit integers with one zero point per direction and a
//! scale per direction or per direction and gate row. The activations are
//! quantized at run time, each product to uint8 with a scale and zero point
//! from the range of what it multiplies (the range always includes 0; `scale
//! = (max - min) / 255`, or 1 when the range is empty; `zero =
//! rint(clamp(-min / scale, 0, 255))`; `q = clamp(rint(v / scale) + zero,
//! 0, 255)`, `f32` arithmetic, ties to even):
//!
//! - `X` once, over every step and batch entry that runs (steps below the
//!   longest sequence), for every direction;
//! - the hidden state at every step, over the batch entries together.
//!
//! Each product sums `(q - zero) (w - w_zero)` in `i32` and becomes `f32`
//! as `sum * (scale * w_scale)`: a gate's pre-activation is `(x_part +
//! h_part) [+ peephole * c] + (Wb + Rb)`, clipped if asked, in that order,
//! then the LSTM equations of [`crate::rnn`] (`c = c_prev f + i g`, `h = o
//! h(c)`). Sigmoid and Tanh are [`vmath`]'s, onnxruntime uses its own
//! approximations of them: results differ by rounding there, and a value
//! that lands near a quantization boundary can take the next step.
//!
//! Layout 0 only (onnxruntime's kernel has no `layout`): `X` `[seq, batch,
//! input]`, `Y` `[seq, D, batch, H]`, states `[D, batch, H]`. With sequence
//! lengths that differ within a batch, the hidden-state range also covers
//! the entries that have finished (their last state), where onnxruntime
//! reads what it wrote for them.

use crate::elementwise::{Unary, eval};
use crate::int8::Q8;
use crate::rnn::{Lstm, LstmInputs, LstmOutputs};
use crate::{Error, Result, ensure, vmath};

/// One product's weights: `w` is `[D, 4H, n]` (each gate row's `n`
/// weights together: onnxruntime's `[D, n, 4H]` transposed), `scale` one
/// per direction (`[D]`) or per direction and gate row (`[D, 4H]`), `zero`
/// likewise, of which the first of each direction is used (onnxruntime
/// takes one zero point per direction and refuses others).
#[derive(Clone, Copy, Debug)]
pub struct QWeights<'a, W> {
    /// The weights, `[D, 4H, n]`.
    pub w: &'a [W],
    /// `[D]` or `[D, 4H]`.
    pub scale: &'a [f32],
    /// `[D]` or `[D, 4H]`.
    pub zero: &'a [W],
}

/// The uint8 quantization of `v` onnxruntime's dynamic products use: `(scale,
/// zero)` from the range of `v` with 0 in it.
pub fn range_params(v: &[f32]) -> (f32, i32) {
    let (mut lo, mut hi) = (0f32, 0f32);
    for &x in v {
        lo = lo.min(x);
        hi = hi.max(x);
    }
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zero = libm::rintf((0.0 - lo / scale).clamp(0.0, 255.0));
    (scale, if zero.is_nan() { 0 } else { zero as i32 })
}

/// `v` quantized with `(scale, zero)` ([`range_params`]), minus `zero`.
#[inline]
fn centered(v: f32, scale: f32, zero: i32) -> i16 {
    let q = libm::rintf(v / scale) + zero as f32;
    let q = if q.is_nan() { 0 } else { q.clamp(0.0, 255.0) as i32 };
    (q - zero) as i16
}

/// `sum_k q[k] (w[k] - zero)`, wrapping.
#[inline]
fn dot<W: Q8>(q: &[i16], w: &[W], zero: i32) -> i32 {
    q.iter().zip(w).fold(0i32, |acc, (&a, &b)| {
        acc.wrapping_add(i32::from(a).wrapping_mul(b.get().wrapping_sub(zero)))
    })
}

/// Scratch elements (`f32`) [`dynamic_lstm`] needs: the hidden and cell
/// state and the gates of every batch entry, and room for the quantized
/// input row or hidden state (as `i16`).
pub fn scratch_len(p: &Lstm<f32>) -> Option<usize> {
    let state = p.batch.checked_mul(p.hidden_size)?;
    let gates = state.checked_mul(4)?;
    let q = p.input_size.max(state).div_ceil(2);
    state.checked_mul(2)?.checked_add(gates)?.checked_add(q)
}

/// Applies `act` to every element of `v`: Sigmoid and Tanh through
/// [`vmath`], any other activation exactly.
fn activate(act: Unary<f32>, v: &mut [f32]) {
    for x in v.iter_mut() {
        *x = match act {
            Unary::Sigmoid => vmath::sigmoid(*x),
            Unary::Tanh => vmath::tanh(*x),
            other => eval(other, *x),
        };
    }
}

/// `(x + bias)` clipped to `[-clip, clip]`, as onnxruntime adds a gate's
/// bias.
#[inline]
fn bias_clip(x: f32, bias: Option<f32>, clip: Option<f32>) -> f32 {
    let x = match bias {
        Some(b) => x + b,
        None => x,
    };
    match clip {
        Some(c) => x.min(c).max(-c),
        None => x,
    }
}

fn check_weights<W>(q: &QWeights<'_, W>, nd: usize, g4: usize, n: usize) -> Result {
    let len = nd.checked_mul(g4).and_then(|v| v.checked_mul(n)).ok_or(Error::Overflow)?;
    ensure(q.w.len() == len, Error::ShapeMismatch)?;
    ensure(q.scale.len() == nd || q.scale.len() == nd * g4, Error::ShapeMismatch)?;
    ensure(q.zero.len() == nd || q.zero.len() == nd * g4, Error::ShapeMismatch)
}

/// The scale of gate row `j` of direction `d`.
#[inline]
fn row_scale<W>(q: &QWeights<'_, W>, nd: usize, d: usize, j: usize) -> f32 {
    let per = q.scale.len() / nd.max(1);
    q.scale[d * per + if per == 1 { 0 } else { j }]
}

/// Runs onnxruntime's `DynamicQuantizeLSTM` (see the module): `p` as for
/// [`crate::rnn::lstm`] (`batch_first` false), `inp.w` and `inp.r` unused
/// (the weights are `w` and `r`), `scratch` of [`scratch_len`] elements.
/// [`Error::ShapeMismatch`] if a buffer's length does not match `p` or a
/// `sequence_lens` entry is outside `0..=seq_len`.
pub fn dynamic_lstm<W: Q8>(
    p: &Lstm<f32>,
    inp: &LstmInputs<'_, f32>,
    w: &QWeights<'_, W>,
    r: &QWeights<'_, W>,
    out: &mut LstmOutputs<'_, f32>,
    scratch: &mut [f32],
) -> Result {
    ensure(!p.batch_first, Error::InvalidParams)?;
    let (s, bn, ni, h) = (p.seq_len, p.batch, p.input_size, p.hidden_size);
    let nd = p.direction.count();
    let g4 = h.checked_mul(4).ok_or(Error::Overflow)?;
    let state = bn.checked_mul(h).ok_or(Error::Overflow)?;
    let all_states = nd.checked_mul(state).ok_or(Error::Overflow)?;
    let x_len = s.checked_mul(bn).and_then(|v| v.checked_mul(ni)).ok_or(Error::Overflow)?;
    ensure(inp.x.len() == x_len, Error::ShapeMismatch)?;
    check_weights(w, nd, g4, ni)?;
    check_weights(r, nd, g4, h)?;
    ensure(inp.b.is_none_or(|b| Some(b.len()) == nd.checked_mul(2 * g4)), Error::ShapeMismatch)?;
    ensure(inp.p.is_none_or(|v| Some(v.len()) == nd.checked_mul(3 * h)), Error::ShapeMismatch)?;
    ensure(inp.initial_h.is_none_or(|v| v.len() == all_states), Error::ShapeMismatch)?;
    ensure(inp.initial_c.is_none_or(|v| v.len() == all_states), Error::ShapeMismatch)?;
    if let Some(l) = inp.sequence_lens {
        ensure(l.len() == bn, Error::ShapeMismatch)?;
        ensure(l.iter().all(|&v| usize::try_from(v).is_ok_and(|v| v <= s)), Error::ShapeMismatch)?;
    }
    let y_len = all_states.checked_mul(s).ok_or(Error::Overflow)?;
    ensure(out.y.as_ref().is_none_or(|y| y.len() == y_len), Error::ShapeMismatch)?;
    ensure(out.y_h.as_ref().is_none_or(|y| y.len() == all_states), Error::ShapeMismatch)?;
    ensure(out.y_c.as_ref().is_none_or(|y| y.len() == all_states), Error::ShapeMismatch)?;
    let need = scratch_len(p).ok_or(Error::Overflow)?;
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    let (hs, rest) = scratch.split_at_mut(state);
    let (cs, rest) = rest.split_at_mut(state);
    let (gates, rest) = rest.split_at_mut(bn * g4);
    let qlen = ni.max(state);
    let qbuf: &mut [i16] = bytemuck::cast_slice_mut(&mut rest[..qlen.div_ceil(2)]);
    let qbuf = &mut qbuf[..qlen];

    let len_of = |b: usize| inp.sequence_lens.map_or(s, |l| l[b] as usize);
    let max_len = (0..bn).map(len_of).max().unwrap_or(0);
    // X is quantized once, over the steps that run.
    let (x_scale, x_zero) = range_params(&inp.x[..max_len * bn * ni]);
    if let Some(y) = out.y.as_deref_mut() {
        y.fill(0.0);
    }
    for d in 0..nd {
        let reverse = p.direction == crate::rnn::Direction::Reverse || d == 1;
        let [fa, ga, ha] = p.activations[d];
        let wd = &w.w[d * g4 * ni..(d + 1) * g4 * ni];
        let rd = &r.w[d * g4 * h..(d + 1) * g4 * h];
        let first = |z: &[W]| z[d * (z.len() / nd)].get();
        let (wz, rz) = (first(w.zero), first(r.zero));
        let bias = inp.b.map(|b| &b[d * 2 * g4..(d + 1) * 2 * g4]);
        let bias_at = |j: usize| bias.map(|b| b[j] + b[g4 + j]);
        let peep = inp.p.map(|v| &v[d * 3 * h..(d + 1) * 3 * h]);
        let at = d * state;
        match inp.initial_h {
            Some(v) => hs.copy_from_slice(&v[at..at + state]),
            None => hs.fill(0.0),
        }
        match inp.initial_c {
            Some(v) => cs.copy_from_slice(&v[at..at + state]),
            None => cs.fill(0.0),
        }
        for step in 0..max_len {
            // The input part of every running entry's gates.
            for b in 0..bn {
                let len = len_of(b);
                if step >= len {
                    continue;
                }
                let t = if reverse { len - 1 - step } else { step };
                let xt = &inp.x[(t * bn + b) * ni..(t * bn + b + 1) * ni];
                for (q, &v) in qbuf.iter_mut().zip(xt) {
                    *q = centered(v, x_scale, x_zero);
                }
                let gb = &mut gates[b * g4..(b + 1) * g4];
                for (j, g) in gb.iter_mut().enumerate() {
                    let acc = dot(&qbuf[..ni], &wd[j * ni..(j + 1) * ni], wz);
                    *g = acc as f32 * (x_scale * row_scale(w, nd, d, j));
                }
            }
            // The hidden states, quantized together, then their part.
            let (h_scale, h_zero) = range_params(hs);
            for (q, &v) in qbuf.iter_mut().zip(hs.iter()) {
                *q = centered(v, h_scale, h_zero);
            }
            for b in 0..bn {
                let len = len_of(b);
                if step >= len {
                    continue;
                }
                let t = if reverse { len - 1 - step } else { step };
                let hq = &qbuf[b * h..(b + 1) * h];
                let gb = &mut gates[b * g4..(b + 1) * g4];
                for (j, g) in gb.iter_mut().enumerate() {
                    let acc = dot(hq, &rd[j * h..(j + 1) * h], rz);
                    *g += acc as f32 * (h_scale * row_scale(r, nd, d, j));
                }
                let (gi, rest) = gb.split_at_mut(h);
                let (go, rest) = rest.split_at_mut(h);
                let (gf, gc) = rest.split_at_mut(h);
                let cb = &mut cs[b * h..(b + 1) * h];
                let pv = |k: usize| peep.map(|v| &v[k * h..(k + 1) * h]);
                for (j, g) in gi.iter_mut().enumerate() {
                    if let Some(pi) = pv(0) {
                        *g += cb[j] * pi[j];
                    }
                    *g = bias_clip(*g, bias_at(j), p.clip);
                }
                activate(fa, gi);
                if p.input_forget {
                    for (f, &i) in gf.iter_mut().zip(gi.iter()) {
                        *f = 1.0 - i;
                    }
                } else {
                    for (j, g) in gf.iter_mut().enumerate() {
                        if let Some(pf) = pv(2) {
                            *g += cb[j] * pf[j];
                        }
                        *g = bias_clip(*g, bias_at(2 * h + j), p.clip);
                    }
                    activate(fa, gf);
                }
                for (j, g) in gc.iter_mut().enumerate() {
                    *g = bias_clip(*g, bias_at(3 * h + j), p.clip);
                }
                activate(ga, gc);
                for (((c, &f), &i), &g) in
                    cb.iter_mut().zip(gf.iter()).zip(gi.iter()).zip(gc.iter())
                {
                    *c = *c * f + i * g;
                }
                for (j, g) in go.iter_mut().enumerate() {
                    if let Some(po) = pv(1) {
                        *g += cb[j] * po[j];
                    }
                    *g = bias_clip(*g, bias_at(h + j), p.clip);
                }
                activate(fa, go);
                gc.copy_from_slice(cb);
                activate(ha, gc);
                let hb = &mut hs[b * h..(b + 1) * h];
                for ((hv, &o), &c) in hb.iter_mut().zip(go.iter()).zip(gc.iter()) {
                    *hv = c * o;
                }
                if let Some(y) = out.y.as_deref_mut() {
                    let at = ((t * nd + d) * bn + b) * h;
                    y[at..at + h].copy_from_slice(hb);
                }
            }
        }
        for b in 0..bn {
            if len_of(b) == 0 {
                hs[b * h..(b + 1) * h].fill(0.0);
                cs[b * h..(b + 1) * h].fill(0.0);
            }
        }
        if let Some(y) = out.y_h.as_deref_mut() {
            y[at..at + state].copy_from_slice(hs);
        }
        if let Some(y) = out.y_c.as_deref_mut() {
            y[at..at + state].copy_from_slice(cs);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_params_include_zero() {
        // [-1, 3]: scale 4/255, zero point 255/4 = 63.75 rounded.
        assert_eq!(range_params(&[-1.0, 0.5, 3.0]), (4.0 / 255.0, 64));
        // All positive: the range starts at 0.
        assert_eq!(range_params(&[0.5, 2.0]), (2.0 / 255.0, 0));
        // All negative: it ends at 0, the zero point is 255.
        assert_eq!(range_params(&[-2.0, -1.0]), (2.0 / 255.0, 255));
        // Nothing but zeros: scale 1.
        assert_eq!(range_params(&[0.0, 0.0]), (1.0, 0));
        // Zero is exact, whatever the range; the ends need not be: over
        // [-1, 101] (scale 0.4) the zero point 2.5 rounds to 2 (just below
        // 2.5 in f32), and 101 becomes 252 + 2, a step below the top.
        let (s, z) = range_params(&[-1.0, 101.0]);
        assert_eq!((s, z), (102.0 / 255.0, 2));
        assert_eq!(centered(0.0, s, z), 0);
        assert_eq!(centered(101.0, s, z), 252);
    }

    fn params(hidden: usize) -> Lstm<f32> {
        Lstm {
            seq_len: 2,
            batch: 1,
            input_size: 1,
            hidden_size: hidden,
            direction: crate::rnn::Direction::Forward,
            batch_first: false,
            activations: [Lstm::<f32>::DEFAULT_ACTIVATIONS; 2],
            clip: None,
            input_forget: false,
        }
    }

    /// One cell, one input, weights 1 (zero point 0, scale 1): X = (2, -1)
    /// quantizes to (255, 0) with zero point 85 at scale 3/255; the hidden
    /// state after step 1 is quantized on its own range [0, h1] (q = 255).
    /// Every gate sees the same pre-activation.
    #[test]
    fn two_steps_by_hand() {
        let p = params(1);
        let x = [2.0f32, -1.0];
        let w = [1i8; 4];
        let scale = [1.0f32];
        let zero = [0i8];
        let q = QWeights { w: &w, scale: &scale, zero: &zero };
        let inp = LstmInputs {
            x: &x,
            w: &[],
            r: &[],
            b: None,
            sequence_lens: None,
            initial_h: None,
            initial_c: None,
            p: None,
        };
        let mut y = [0f32; 2];
        let mut out = LstmOutputs { y: Some(&mut y), y_h: None, y_c: None };
        let mut scratch = [0f32; 16];
        dynamic_lstm(&p, &inp, &q, &q, &mut out, &mut scratch).unwrap();
        let sig = vmath::sigmoid;
        let th = vmath::tanh;
        let (x_scale, x_zero) = range_params(&x);
        let x0 = f32::from(centered(2.0, x_scale, x_zero)) * x_scale;
        let c1 = sig(x0) * th(x0);
        let h1 = sig(x0) * th(c1);
        assert_eq!(y[0], h1);
        let (hs, hz) = range_params(&[h1]);
        let h1q = f32::from(centered(h1, hs, hz)) * hs;
        let x1 = f32::from(centered(-1.0, x_scale, x_zero)) * x_scale;
        let g = x1 + h1q;
        let c2 = c1 * sig(g) + sig(g) * th(g);
        assert_eq!(y[1], th(c2) * sig(g));
    }

    #[test]
    fn buffers_are_checked() {
        let p = params(1);
        let w = [1i8; 4];
        let q = QWeights { w: &w, scale: &[1.0], zero: &[0] };
        let short = QWeights { w: &w[..3], ..q };
        let x = [0f32; 2];
        let inp = LstmInputs {
            x: &x,
            w: &[],
            r: &[],
            b: None,
            sequence_lens: None,
            initial_h: None,
            initial_c: None,
            p: None,
        };
        let mut out = LstmOutputs { y: None, y_h: None, y_c: None };
        let mut scratch = [0f32; 16];
        assert_eq!(
            dynamic_lstm(&p, &inp, &short, &q, &mut out, &mut scratch),
            Err(Error::ShapeMismatch)
        );
        assert_eq!(
            dynamic_lstm(&p, &inp, &q, &q, &mut out, &mut scratch[..4]),
            Err(Error::ShapeMismatch)
        );
    }
}
