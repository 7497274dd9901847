//! Recurrent layers following the ONNX equations: LSTM.
//!
//! Shapes (layout 0 / layout 1), with `D` directions, `H` hidden size:
//! `X` `[seq, batch, input]` / `[batch, seq, input]`; `W` `[D, 4H, input]`;
//! `R` `[D, 4H, H]`; `B` `[D, 8H]` (input biases then recurrence biases);
//! `P` `[D, 3H]` (peepholes i, o, f); initial and final states
//! `[D, batch, H]` / `[batch, D, H]`; `Y` `[seq, D, batch, H]` /
//! `[batch, seq, D, H]`. Gate order in `W`, `R`, `B` is i, o, f, c.
//!
//! A batch entry with `sequence_lens[b] = L` runs `L` steps (the reverse
//! direction from step `L - 1` down to 0); its `Y` rows from `L` on are zero
//! and its final states are those after its last step (zero if `L = 0`, as
//! ONNX Runtime does). The caller provides scratch memory of [`Lstm::scratch_len`]
//! elements, so the kernel allocates nothing.

use crate::elementwise::{Unary, eval};
use crate::num::Float;
use crate::{Error, Result, ensure};

/// Which directions an RNN runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Forward only.
    Forward,
    /// Reverse only.
    Reverse,
    /// Forward (direction 0) and reverse (direction 1).
    Bidirectional,
}

impl Direction {
    /// Number of directions (`D`).
    pub fn count(self) -> usize {
        if self == Direction::Bidirectional { 2 } else { 1 }
    }
}

/// ONNX `LSTM` attributes and sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lstm<T> {
    /// Sequence length.
    pub seq_len: usize,
    /// Batch size.
    pub batch: usize,
    /// Input feature count.
    pub input_size: usize,
    /// `H`.
    pub hidden_size: usize,
    /// Directions.
    pub direction: Direction,
    /// `layout = 1`: batch-major `X`, `Y` and states.
    pub batch_first: bool,
    /// Per direction, the activations `f` (gates), `g` (cell input) and `h`
    /// (cell output); ONNX defaults are Sigmoid, Tanh, Tanh.
    pub activations: [[Unary<T>; 3]; 2],
    /// Clip gate pre-activations to `[-clip, clip]`.
    pub clip: Option<T>,
    /// `input_forget = 1`: couple the forget gate to the input gate (`f = 1 - i`).
    pub input_forget: bool,
}

/// Inputs of [`lstm`]; optional ones default as ONNX says (zero biases,
/// zero initial states, no peepholes, full sequence lengths).
#[derive(Clone, Copy, Debug)]
pub struct LstmInputs<'a, T> {
    /// `X`.
    pub x: &'a [T],
    /// `W`.
    pub w: &'a [T],
    /// `R`.
    pub r: &'a [T],
    /// `B`.
    pub b: Option<&'a [T]>,
    /// `sequence_lens`.
    pub sequence_lens: Option<&'a [i32]>,
    /// `initial_h`.
    pub initial_h: Option<&'a [T]>,
    /// `initial_c`.
    pub initial_c: Option<&'a [T]>,
    /// `P`.
    pub p: Option<&'a [T]>,
}

/// Outputs of [`lstm`]; any may be omitted.
#[derive(Debug)]
pub struct LstmOutputs<'a, T> {
    /// `Y`, all hidden states.
    pub y: Option<&'a mut [T]>,
    /// `Y_h`, the final hidden state.
    pub y_h: Option<&'a mut [T]>,
    /// `Y_c`, the final cell state.
    pub y_c: Option<&'a mut [T]>,
}

impl<T: Float> Lstm<T> {
    /// The ONNX default activations for one direction: Sigmoid, Tanh, Tanh.
    pub const DEFAULT_ACTIVATIONS: [Unary<T>; 3] = [Unary::Sigmoid, Unary::Tanh, Unary::Tanh];

    /// Scratch elements [`lstm`] needs: the hidden and cell state of every
    /// batch entry plus one set of gates.
    pub fn scratch_len(&self) -> Option<usize> {
        let state = self.batch.checked_mul(self.hidden_size)?;
        state.checked_mul(2)?.checked_add(self.hidden_size.checked_mul(4)?)
    }

    fn state_at(&self, d: usize, b: usize) -> usize {
        let nd = self.direction.count();
        let row = if self.batch_first { b * nd + d } else { d * self.batch + b };
        row * self.hidden_size
    }

    fn y_at(&self, t: usize, d: usize, b: usize) -> usize {
        let nd = self.direction.count();
        let row = if self.batch_first {
            (b * self.seq_len + t) * nd + d
        } else {
            (t * nd + d) * self.batch + b
        };
        row * self.hidden_size
    }

    fn x_at(&self, t: usize, b: usize) -> usize {
        let row = if self.batch_first { b * self.seq_len + t } else { t * self.batch + b };
        row * self.input_size
    }
}

fn prod(v: &[usize]) -> Result<usize> {
    v.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or(Error::Overflow)
}

/// Runs an ONNX `LSTM`. [`Error::ShapeMismatch`] if a buffer's length does not
/// match the params or a `sequence_lens` entry is outside `0..=seq_len`.
pub fn lstm<T: Float>(
    p: &Lstm<T>,
    inp: &LstmInputs<'_, T>,
    out: &mut LstmOutputs<'_, T>,
    scratch: &mut [T],
) -> Result {
    let (s, bn, ni, h) = (p.seq_len, p.batch, p.input_size, p.hidden_size);
    let nd = p.direction.count();
    let state_len = prod(&[nd, bn, h])?;
    ensure(inp.x.len() == prod(&[s, bn, ni])?, Error::ShapeMismatch)?;
    ensure(inp.w.len() == prod(&[nd, 4, h, ni])?, Error::ShapeMismatch)?;
    ensure(inp.r.len() == prod(&[nd, 4, h, h])?, Error::ShapeMismatch)?;
    ensure(inp.b.is_none_or(|b| b.len() == prod(&[nd, 8, h]).unwrap_or(0)), Error::ShapeMismatch)?;
    ensure(inp.p.is_none_or(|v| v.len() == prod(&[nd, 3, h]).unwrap_or(0)), Error::ShapeMismatch)?;
    ensure(inp.initial_h.is_none_or(|v| v.len() == state_len), Error::ShapeMismatch)?;
    ensure(inp.initial_c.is_none_or(|v| v.len() == state_len), Error::ShapeMismatch)?;
    if let Some(l) = inp.sequence_lens {
        ensure(l.len() == bn, Error::ShapeMismatch)?;
        ensure(l.iter().all(|&v| usize::try_from(v).is_ok_and(|v| v <= s)), Error::ShapeMismatch)?;
    }
    let y_len = prod(&[s, nd, bn, h])?;
    ensure(out.y.as_ref().is_none_or(|y| y.len() == y_len), Error::ShapeMismatch)?;
    ensure(out.y_h.as_ref().is_none_or(|y| y.len() == state_len), Error::ShapeMismatch)?;
    ensure(out.y_c.as_ref().is_none_or(|y| y.len() == state_len), Error::ShapeMismatch)?;
    let need = p.scratch_len().ok_or(Error::Overflow)?;
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    let (hs, rest) = scratch.split_at_mut(bn * h);
    let (cs, rest) = rest.split_at_mut(bn * h);
    let gates = &mut rest[..4 * h];

    if let Some(y) = out.y.as_deref_mut() {
        y.fill(T::ZERO);
    }
    for d in 0..nd {
        let reverse = p.direction == Direction::Reverse || d == 1;
        let [f, g, hact] = p.activations[d];
        let w = &inp.w[d * 4 * h * ni..(d + 1) * 4 * h * ni];
        let r = &inp.r[d * 4 * h * h..(d + 1) * 4 * h * h];
        let bias = inp.b.map(|b| &b[d * 8 * h..(d + 1) * 8 * h]);
        let peep = inp.p.map(|v| &v[d * 3 * h..(d + 1) * 3 * h]);
        for b in 0..bn {
            let at = p.state_at(d, b);
            let hb = &mut hs[b * h..(b + 1) * h];
            match inp.initial_h {
                Some(v) => hb.copy_from_slice(&v[at..at + h]),
                None => hb.fill(T::ZERO),
            }
            let cb = &mut cs[b * h..(b + 1) * h];
            match inp.initial_c {
                Some(v) => cb.copy_from_slice(&v[at..at + h]),
                None => cb.fill(T::ZERO),
            }
        }
        for step in 0..s {
            for b in 0..bn {
                let len = inp.sequence_lens.map_or(s, |l| l[b] as usize);
                if step >= len {
                    continue;
                }
                let t = if reverse { len - 1 - step } else { step };
                let xt = &inp.x[p.x_at(t, b)..p.x_at(t, b) + ni];
                let hb = &mut hs[b * h..(b + 1) * h];
                let cb = &mut cs[b * h..(b + 1) * h];
                // Pre-activations of all four gates: X W^T + H R^T + Wb + Rb.
                for (row, gv) in gates.iter_mut().enumerate() {
                    let mut acc = T::ZERO;
                    for (k, &xv) in xt.iter().enumerate() {
                        acc = acc.add(xv.mul(w[row * ni + k]));
                    }
                    for (k, &hv) in hb.iter().enumerate() {
                        acc = acc.add(hv.mul(r[row * h + k]));
                    }
                    if let Some(bias) = bias {
                        acc = acc.add(bias[row]).add(bias[4 * h + row]);
                    }
                    *gv = acc;
                }
                for j in 0..h {
                    let clip = |v: T| match p.clip {
                        Some(c) => {
                            let lo = c.neg();
                            if v < lo {
                                lo
                            } else if v > c {
                                c
                            } else {
                                v
                            }
                        }
                        None => v,
                    };
                    let c_prev = cb[j];
                    let (pi, po, pf) = match peep {
                        Some(pv) => (pv[j], pv[h + j], pv[2 * h + j]),
                        None => (T::ZERO, T::ZERO, T::ZERO),
                    };
                    let i_gate = eval(f, clip(gates[j].add(pi.mul(c_prev))));
                    let f_gate = if p.input_forget {
                        T::ONE.sub(i_gate)
                    } else {
                        eval(f, clip(gates[2 * h + j].add(pf.mul(c_prev))))
                    };
                    let c_in = eval(g, clip(gates[3 * h + j]));
                    let c_new = f_gate.mul(c_prev).add(i_gate.mul(c_in));
                    let o_gate = eval(f, clip(gates[h + j].add(po.mul(c_new))));
                    cb[j] = c_new;
                    hb[j] = o_gate.mul(eval(hact, c_new));
                }
                if let Some(y) = out.y.as_deref_mut() {
                    let at = p.y_at(t, d, b);
                    y[at..at + h].copy_from_slice(hb);
                }
            }
        }
        for b in 0..bn {
            if inp.sequence_lens.is_some_and(|l| l[b] == 0) {
                hs[b * h..(b + 1) * h].fill(T::ZERO);
                cs[b * h..(b + 1) * h].fill(T::ZERO);
            }
            let at = p.state_at(d, b);
            if let Some(y) = out.y_h.as_deref_mut() {
                y[at..at + h].copy_from_slice(&hs[b * h..(b + 1) * h]);
            }
            if let Some(y) = out.y_c.as_deref_mut() {
                y[at..at + h].copy_from_slice(&cs[b * h..(b + 1) * h]);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elementwise::sigmoid;

    const DEF: [Unary<f64>; 3] = Lstm::<f64>::DEFAULT_ACTIVATIONS;

    fn params(seq_len: usize, batch: usize, input: usize, hidden: usize) -> Lstm<f64> {
        Lstm {
            seq_len,
            batch,
            input_size: input,
            hidden_size: hidden,
            direction: Direction::Forward,
            batch_first: false,
            activations: [DEF; 2],
            clip: None,
            input_forget: false,
        }
    }

    fn inputs<'a>(x: &'a [f64], w: &'a [f64], r: &'a [f64]) -> LstmInputs<'a, f64> {
        LstmInputs {
            x,
            w,
            r,
            b: None,
            sequence_lens: None,
            initial_h: None,
            initial_c: None,
            p: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn zero_input_step_by_hand() {
        // All pre-activations 0: i = o = f = 1/2, cell input tanh(0) = 0,
        // so C = C0 / 2 = 1 and H = tanh(1) / 2.
        let p = params(1, 1, 1, 1);
        let i = LstmInputs { initial_c: Some(&[2.0]), ..inputs(&[0.0], &[0.0; 4], &[0.0; 4]) };
        let (mut y, mut yh, mut yc) = ([9.0], [9.0], [9.0]);
        let mut o = LstmOutputs { y: Some(&mut y), y_h: Some(&mut yh), y_c: Some(&mut yc) };
        lstm(&p, &i, &mut o, &mut [0.0; 6]).unwrap();
        assert_eq!(yc, [1.0]);
        assert!(close(yh[0], libm::tanh(1.0) / 2.0));
        assert_eq!(y, yh);
    }

    #[test]
    fn one_step_with_weights_bias_and_peepholes() {
        // x = 1, H0 = 0.5, C0 = -1. W rows (i, o, f, c) = [1, 2, 3, 4], R rows = [1, 1, 1, 1],
        // Wb = [0.1, 0.2, 0.3, 0.4], Rb = 0, P (i, o, f) = [0.5, -0.5, 0.25].
        let p = params(1, 1, 1, 1);
        let b = [0.1, 0.2, 0.3, 0.4, 0.0, 0.0, 0.0, 0.0];
        let i = LstmInputs {
            b: Some(&b),
            initial_h: Some(&[0.5]),
            initial_c: Some(&[-1.0]),
            p: Some(&[0.5, -0.5, 0.25]),
            ..inputs(&[1.0], &[1.0, 2.0, 3.0, 4.0], &[1.0; 4])
        };
        let (mut yh, mut yc) = ([0.0], [0.0]);
        let mut o = LstmOutputs { y: None, y_h: Some(&mut yh), y_c: Some(&mut yc) };
        lstm(&p, &i, &mut o, &mut [0.0; 6]).unwrap();
        let ig = sigmoid(1.0 + 0.5 + 0.1 - 0.5);
        let fg = sigmoid(3.0 + 0.5 + 0.3 - 0.25);
        let cg = libm::tanh(4.0 + 0.5 + 0.4);
        let c = -fg + ig * cg;
        let og = sigmoid(2.0 + 0.5 + 0.2 - 0.5 * c);
        assert!(close(yc[0], c));
        assert!(close(yh[0], og * libm::tanh(c)));
    }

    #[test]
    fn reverse_equals_forward_on_reversed_sequence() {
        let x = [0.3, -1.2, 0.8, 2.0, -0.1, 0.5]; // seq 3, batch 1, input 2
        let xr = [-0.1, 0.5, 0.8, 2.0, 0.3, -1.2];
        let w: [f64; 8] = core::array::from_fn(|k| (k as f64 - 3.5) * 0.2);
        let r = [0.3, -0.2, 0.1, 0.4];
        let p = params(3, 1, 2, 1);
        let (mut yf, mut yr) = ([0.0; 3], [0.0; 3]);
        let mut o = LstmOutputs { y: Some(&mut yf), y_h: None, y_c: None };
        lstm(&p, &inputs(&xr, &w, &r), &mut o, &mut [0.0; 6]).unwrap();
        let pr = Lstm { direction: Direction::Reverse, ..p };
        let mut o = LstmOutputs { y: Some(&mut yr), y_h: None, y_c: None };
        lstm(&pr, &inputs(&x, &w, &r), &mut o, &mut [0.0; 6]).unwrap();
        // Y is indexed by time: the reverse run's Y[t] is the forward run's Y[2 - t].
        assert_eq!(yr, [yf[2], yf[1], yf[0]]);

        // Bidirectional = both runs side by side: Y [seq, 2, batch, H].
        let pb = Lstm { direction: Direction::Bidirectional, ..p };
        let w2: [f64; 16] = core::array::from_fn(|k| w[k % 8]);
        let r2: [f64; 8] = core::array::from_fn(|k| r[k % 4]);
        let mut yb = [0.0; 6];
        let mut yh = [0.0; 2];
        let mut o = LstmOutputs { y: Some(&mut yb), y_h: Some(&mut yh), y_c: None };
        lstm(&pb, &inputs(&x, &w2, &r2), &mut o, &mut [0.0; 6]).unwrap();
        let mut yfx = [0.0; 3];
        let mut o = LstmOutputs { y: Some(&mut yfx), y_h: None, y_c: None };
        lstm(&p, &inputs(&x, &w, &r), &mut o, &mut [0.0; 6]).unwrap();
        assert_eq!(yb, [yfx[0], yr[0], yfx[1], yr[1], yfx[2], yr[2]]);
        assert_eq!(yh, [yfx[2], yr[0]]);
    }

    #[test]
    fn sequence_lens_and_batch_first() {
        // Batch 2 with lengths 2 and 1; hidden 1; input 1.
        let w = [0.5, -0.5, 1.0, 0.25];
        let r = [0.1, 0.2, 0.3, 0.4];
        let x = [1.0, 2.0, -1.0, 0.0]; // [seq 2, batch 2]: t0 = (1, 2), t1 = (-1, 0)
        let p = params(2, 2, 1, 1);
        let i = LstmInputs { sequence_lens: Some(&[2, 1]), ..inputs(&x, &w, &r) };
        let (mut y, mut yh) = ([9.0; 4], [0.0; 2]);
        let mut o = LstmOutputs { y: Some(&mut y), y_h: Some(&mut yh), y_c: None };
        lstm(&p, &i, &mut o, &mut [0.0; 8]).unwrap();
        // Entry 1 stops after t0: its t1 output is zero and Y_h is its t0 output.
        assert_eq!(y[3], 0.0);
        assert_eq!(yh, [y[2], y[1]]);
        // The same entries run alone agree (batch entries are independent).
        let mut solo = [0.0; 2];
        let mut o = LstmOutputs { y: Some(&mut solo), y_h: None, y_c: None };
        lstm(&params(2, 1, 1, 1), &inputs(&[1.0, -1.0], &w, &r), &mut o, &mut [0.0; 6]).unwrap();
        assert_eq!(solo, [y[0], y[2]]);
        // Layout 1: X [batch, seq], Y [batch, seq, D, H] hold the same numbers transposed.
        let pb = Lstm { batch_first: true, ..p };
        let xb = [1.0, -1.0, 2.0, 0.0];
        let ib = LstmInputs { sequence_lens: Some(&[2, 1]), ..inputs(&xb, &w, &r) };
        let mut yb = [9.0; 4];
        let mut o = LstmOutputs { y: Some(&mut yb), y_h: None, y_c: None };
        lstm(&pb, &ib, &mut o, &mut [0.0; 8]).unwrap();
        assert_eq!(yb, [y[0], y[2], y[1], y[3]]);
        // A zero-length entry keeps zero outputs and zero final states.
        let i0 = LstmInputs { sequence_lens: Some(&[2, 0]), initial_h: Some(&[1.0, 1.0]), ..i };
        let (mut y0, mut yh0) = ([9.0; 4], [9.0; 2]);
        let mut o = LstmOutputs { y: Some(&mut y0), y_h: Some(&mut yh0), y_c: None };
        lstm(&p, &i0, &mut o, &mut [0.0; 8]).unwrap();
        assert_eq!((y0[1], y0[3], yh0[1]), (0.0, 0.0, 0.0));
        // A length beyond seq_len is refused.
        let bad = LstmInputs { sequence_lens: Some(&[3, 1]), ..inputs(&x, &w, &r) };
        let mut o = LstmOutputs { y: None, y_h: None, y_c: None };
        assert_eq!(lstm(&p, &bad, &mut o, &mut [0.0; 8]), Err(Error::ShapeMismatch));
        assert_eq!(lstm(&p, &i, &mut o, &mut [0.0; 7]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn clip_and_coupled_forget_gate() {
        // Big pre-activations clipped to 1: i = o = sigmoid(1), f = 1 - i (coupled),
        // cell input tanh(1); C0 = 0 so C = i * tanh(1).
        let p = Lstm { clip: Some(1.0), input_forget: true, ..params(1, 1, 1, 1) };
        let i = inputs(&[10.0], &[1.0; 4], &[0.0; 4]);
        let (mut yh, mut yc) = ([0.0], [0.0]);
        let mut o = LstmOutputs { y: None, y_h: Some(&mut yh), y_c: Some(&mut yc) };
        lstm(&p, &i, &mut o, &mut [0.0; 6]).unwrap();
        let s1 = sigmoid(1.0);
        let c = s1 * libm::tanh(1.0);
        assert!(close(yc[0], c));
        assert!(close(yh[0], s1 * libm::tanh(c)));
    }
}
