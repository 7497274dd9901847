//! Recurrent layers following the ONNX equations: LSTM, GRU and RNN.
//!
//! Shapes (layout 0 / layout 1), with `D` directions, `H` hidden size and
//! `G` gates (LSTM 4: i, o, f, c; GRU 3: z, r, h; RNN 1):
//! `X` `[seq, batch, input]` / `[batch, seq, input]`; `W` `[D, G*H, input]`;
//! `R` `[D, G*H, H]`; `B` `[D, 2*G*H]` (input biases then recurrence biases);
//! LSTM peepholes `P` `[D, 3H]` (i, o, f); initial and final states
//! `[D, batch, H]` / `[batch, D, H]`; `Y` `[seq, D, batch, H]` /
//! `[batch, seq, D, H]`.
//!
//! A batch entry with `sequence_lens[b] = L` runs `L` steps (the reverse
//! direction from step `L - 1` down to 0); its `Y` rows from `L` on are zero
//! and its final states are those after its last step (zero if `L = 0`, as
//! ONNX Runtime does). The caller provides scratch memory of `scratch_len()`
//! elements, so the kernels allocate nothing. Dot products sum inputs then
//! hidden state in index order, then add the biases.

use crate::elementwise::{Unary, eval};
use crate::num::Float;
use crate::simd::{self, DenseB, Out, ViewA};
use crate::{Error, Result, ensure, vmath};

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

/// Sizes and layout common to the recurrent ops.
#[derive(Clone, Copy, Debug)]
struct Dims {
    seq_len: usize,
    batch: usize,
    input_size: usize,
    hidden_size: usize,
    direction: Direction,
    batch_first: bool,
}

impl Dims {
    fn nd(&self) -> usize {
        self.direction.count()
    }

    fn state_at(&self, d: usize, b: usize) -> usize {
        let row = if self.batch_first { b * self.nd() + d } else { d * self.batch + b };
        row * self.hidden_size
    }

    fn y_at(&self, t: usize, d: usize, b: usize) -> usize {
        let row = if self.batch_first {
            (b * self.seq_len + t) * self.nd() + d
        } else {
            (t * self.nd() + d) * self.batch + b
        };
        row * self.hidden_size
    }

    /// The row of `X` (of `input_size` values) holding step `t` of entry `b`.
    fn x_row(&self, t: usize, b: usize) -> usize {
        if self.batch_first { b * self.seq_len + t } else { t * self.batch + b }
    }

    fn x_at(&self, t: usize, b: usize) -> usize {
        self.x_row(t, b) * self.input_size
    }

    /// Scratch: hidden state per batch entry, cell state if `cell`, `work` more.
    fn scratch_len(&self, cell: bool, work: usize) -> Option<usize> {
        let state = self.batch.checked_mul(self.hidden_size)?;
        state.checked_mul(if cell { 2 } else { 1 })?.checked_add(work)
    }
}

fn prod(v: &[usize]) -> Result<usize> {
    v.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or(Error::Overflow)
}

fn clip_to<T: Float>(clip: Option<T>, v: T) -> T {
    match clip {
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
    }
}

/// Inputs of [`gru`] and [`rnn`]; optional ones default as ONNX says (zero
/// biases, zero initial state, full sequence lengths).
#[derive(Clone, Copy, Debug)]
pub struct RnnInputs<'a, T> {
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
}

/// Outputs of [`gru`] and [`rnn`]; either may be omitted.
#[derive(Debug)]
pub struct RnnOutputs<'a, T> {
    /// `Y`, all hidden states.
    pub y: Option<&'a mut [T]>,
    /// `Y_h`, the final hidden state.
    pub y_h: Option<&'a mut [T]>,
}

/// What the shared driver needs besides the cell itself.
struct Run<'a, 'o, T> {
    dims: Dims,
    gates: usize,
    x: &'a [T],
    /// `W` and `R`, or `None` when the cell reads its weights from
    /// elsewhere (the regrouped copy of [`slstm_packed`]).
    wr: Option<(&'a [T], &'a [T])>,
    b: Option<&'a [T]>,
    sequence_lens: Option<&'a [i32]>,
    initial_h: Option<&'a [T]>,
    /// `Some` for LSTM (its initial cell state, itself optional).
    initial_c: Option<Option<&'a [T]>>,
    y: Option<&'o mut [T]>,
    y_h: Option<&'o mut [T]>,
    y_c: Option<&'o mut [T]>,
}

/// One direction's weights as the cell sees them.
struct DirWeights<'a, T> {
    w: &'a [T],
    r: &'a [T],
    b: Option<&'a [T]>,
}

impl<T: Float> DirWeights<'_, T> {
    /// `X W[row]ᵀ + Wb[row]`.
    fn x_row(&self, row: usize, xt: &[T]) -> T {
        let n = xt.len();
        let mut acc = T::ZERO;
        for (k, &v) in xt.iter().enumerate() {
            acc = acc.add(v.mul(self.w[row * n + k]));
        }
        match self.b {
            Some(b) => acc.add(b[row]),
            None => acc,
        }
    }

    /// `H R[row]ᵀ + Rb[row]` (`gates` = rows per direction, to find `Rb`).
    fn h_row(&self, row: usize, h: &[T], gates: usize) -> T {
        let n = h.len();
        let mut acc = T::ZERO;
        for (k, &v) in h.iter().enumerate() {
            acc = acc.add(v.mul(self.r[row * n + k]));
        }
        match self.b {
            Some(b) => acc.add(b[gates * n + row]),
            None => acc,
        }
    }
}

/// `ROWS` consecutive rows of `m` (rows of `v.len()` values from `row0`)
/// times `v`, each summed in the same order as [`DirWeights::x_row`]: the
/// rows' independent sums interleave, so the adds no longer wait on each
/// other, and every result is bit-identical to one row at a time.
fn dot_rows<T: Float, const ROWS: usize>(m: &[T], row0: usize, v: &[T]) -> [T; ROWS] {
    let n = v.len();
    let mut acc = [T::ZERO; ROWS];
    let rows: [&[T]; ROWS] =
        core::array::from_fn(|r| m.get((row0 + r) * n..(row0 + r + 1) * n).unwrap_or(&[]));
    for (k, &x) in v.iter().enumerate() {
        for (a, row) in acc.iter_mut().zip(&rows) {
            if let Some(&w) = row.get(k) {
                *a = a.add(x.mul(w));
            }
        }
    }
    acc
}

impl<T: Float> DirWeights<'_, T> {
    /// Every gate's pre-activation, `X W[row]ᵀ + Wb[row] + (H R[row]ᵀ + Rb[row])`,
    /// into `gates` (`g` gates of `h.len()` rows), as `x_row` and `h_row` do.
    fn all_rows(&self, xt: &[T], h: &[T], g: usize, gates: &mut [T]) {
        const ROWS: usize = 8;
        let n = h.len();
        let mut chunks = gates.chunks_exact_mut(ROWS);
        let mut row0 = 0;
        for chunk in &mut chunks {
            let xs = dot_rows::<T, ROWS>(self.w, row0, xt);
            let hs = dot_rows::<T, ROWS>(self.r, row0, h);
            for (r, gv) in chunk.iter_mut().enumerate() {
                let (row, mut xa, mut ha) = (row0 + r, xs[r], hs[r]);
                if let Some(b) = self.b {
                    xa = xa.add(b[row]);
                    ha = ha.add(b[g * n + row]);
                }
                *gv = xa.add(ha);
            }
            row0 += ROWS;
        }
        for (r, gv) in chunks.into_remainder().iter_mut().enumerate() {
            *gv = self.x_row(row0 + r, xt).add(self.h_row(row0 + r, h, g));
        }
    }
}

/// One step's view for a cell: the direction, its weights, the row of `X`
/// read (`x_row`) and that row (`xt`).
struct Step<'s, 'a, T> {
    d: usize,
    dw: &'s DirWeights<'a, T>,
    x_row: usize,
    xt: &'s [T],
}

/// Validates buffers, then runs every direction, batch entry and step,
/// calling `cell(step, h, c, work)` to advance one state in place.
fn drive<T: Float>(
    run: Run<'_, '_, T>,
    scratch: &mut [T],
    work_len: usize,
    mut cell: impl FnMut(Step<'_, '_, T>, &mut [T], &mut [T], &mut [T]),
) -> Result {
    let dm = run.dims;
    let (s, bn, ni, h, g) = (dm.seq_len, dm.batch, dm.input_size, dm.hidden_size, run.gates);
    let nd = dm.nd();
    let state_len = prod(&[nd, bn, h])?;
    let has_c = run.initial_c.is_some();
    ensure(run.x.len() == prod(&[s, bn, ni])?, Error::ShapeMismatch)?;
    if let Some((w, r)) = run.wr {
        ensure(w.len() == prod(&[nd, g, h, ni])?, Error::ShapeMismatch)?;
        ensure(r.len() == prod(&[nd, g, h, h])?, Error::ShapeMismatch)?;
    }
    let b_len = prod(&[nd, 2, g, h])?;
    ensure(run.b.is_none_or(|b| b.len() == b_len), Error::ShapeMismatch)?;
    ensure(run.initial_h.is_none_or(|v| v.len() == state_len), Error::ShapeMismatch)?;
    ensure(run.initial_c.flatten().is_none_or(|v| v.len() == state_len), Error::ShapeMismatch)?;
    if let Some(l) = run.sequence_lens {
        ensure(l.len() == bn, Error::ShapeMismatch)?;
        ensure(l.iter().all(|&v| usize::try_from(v).is_ok_and(|v| v <= s)), Error::ShapeMismatch)?;
    }
    let mut y = run.y;
    let mut y_h = run.y_h;
    let mut y_c = run.y_c;
    ensure(
        y.as_ref().is_none_or(|y| y.len() == prod(&[s, nd, bn, h]).unwrap_or(0)),
        Error::ShapeMismatch,
    )?;
    ensure(y_h.as_ref().is_none_or(|y| y.len() == state_len), Error::ShapeMismatch)?;
    ensure(!has_c || y_c.as_ref().is_none_or(|y| y.len() == state_len), Error::ShapeMismatch)?;
    let need = dm.scratch_len(has_c, work_len).ok_or(Error::Overflow)?;
    ensure(scratch.len() >= need, Error::ShapeMismatch)?;
    let (hs, rest) = scratch.split_at_mut(bn * h);
    let (cs, rest) = rest.split_at_mut(if has_c { bn * h } else { 0 });
    let work = &mut rest[..work_len];
    let hc = if has_c { h } else { 0 };

    if let Some(y) = y.as_deref_mut() {
        y.fill(T::ZERO);
    }
    for d in 0..nd {
        let reverse = dm.direction == Direction::Reverse || d == 1;
        let (w, r) = match run.wr {
            Some((w, r)) => {
                (&w[d * g * h * ni..(d + 1) * g * h * ni], &r[d * g * h * h..(d + 1) * g * h * h])
            }
            None => (&[][..], &[][..]),
        };
        let dw = DirWeights { w, r, b: run.b.map(|b| &b[d * 2 * g * h..(d + 1) * 2 * g * h]) };
        for b in 0..bn {
            let at = dm.state_at(d, b);
            let hb = &mut hs[b * h..(b + 1) * h];
            match run.initial_h {
                Some(v) => hb.copy_from_slice(&v[at..at + h]),
                None => hb.fill(T::ZERO),
            }
            let cb = &mut cs[b * hc..(b + 1) * hc];
            match run.initial_c.flatten() {
                Some(v) => cb.copy_from_slice(&v[at..at + hc]),
                None => cb.fill(T::ZERO),
            }
        }
        for step in 0..s {
            for b in 0..bn {
                let len = run.sequence_lens.map_or(s, |l| l[b] as usize);
                if step >= len {
                    continue;
                }
                let t = if reverse { len - 1 - step } else { step };
                let xt = &run.x[dm.x_at(t, b)..dm.x_at(t, b) + ni];
                let hb = &mut hs[b * h..(b + 1) * h];
                let cb = &mut cs[b * hc..(b + 1) * hc];
                cell(Step { d, dw: &dw, x_row: dm.x_row(t, b), xt }, hb, cb, work);
                if let Some(y) = y.as_deref_mut() {
                    let at = dm.y_at(t, d, b);
                    y[at..at + h].copy_from_slice(hb);
                }
            }
        }
        for b in 0..bn {
            if run.sequence_lens.is_some_and(|l| l[b] == 0) {
                hs[b * h..(b + 1) * h].fill(T::ZERO);
                cs[b * hc..(b + 1) * hc].fill(T::ZERO);
            }
            let at = dm.state_at(d, b);
            if let Some(y) = y_h.as_deref_mut() {
                y[at..at + h].copy_from_slice(&hs[b * h..(b + 1) * h]);
            }
            if has_c && let Some(y) = y_c.as_deref_mut() {
                y[at..at + h].copy_from_slice(&cs[b * h..(b + 1) * h]);
            }
        }
    }
    Ok(())
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

    fn dims(&self) -> Dims {
        Dims {
            seq_len: self.seq_len,
            batch: self.batch,
            input_size: self.input_size,
            hidden_size: self.hidden_size,
            direction: self.direction,
            batch_first: self.batch_first,
        }
    }

    /// Scratch elements [`lstm`] needs: the hidden and cell state of every
    /// batch entry plus one set of gates.
    pub fn scratch_len(&self) -> Option<usize> {
        self.dims().scratch_len(true, self.hidden_size.checked_mul(4)?)
    }

    /// Scratch elements [`slstm`] needs: those of [`lstm`](Self::scratch_len)
    /// plus one direction's input projection for every step (`seq * batch * 4H`)
    /// and its `R` regrouped by eight rows (`4H` rounded up to 8, times `H`).
    pub fn fast_scratch_len(&self) -> Option<usize> {
        let gates = self.hidden_size.checked_mul(4)?;
        let proj = self.seq_len.checked_mul(self.batch)?.checked_mul(gates)?;
        let packed = packed_len(self.hidden_size)?;
        self.dims().scratch_len(true, gates.checked_add(proj)?.checked_add(packed)?)
    }
}

/// The shared recurrence driver's view of an LSTM call.
fn lstm_run<'a, 'o, T: Float>(
    p: &Lstm<T>,
    inp: &LstmInputs<'a, T>,
    out: &'o mut LstmOutputs<'_, T>,
) -> Run<'a, 'o, T> {
    Run {
        dims: p.dims(),
        gates: 4,
        x: inp.x,
        wr: Some((inp.w, inp.r)),
        b: inp.b,
        sequence_lens: inp.sequence_lens,
        initial_h: inp.initial_h,
        initial_c: Some(inp.initial_c),
        y: out.y.as_deref_mut(),
        y_h: out.y_h.as_deref_mut(),
        y_c: out.y_c.as_deref_mut(),
    }
}

/// Runs an ONNX `LSTM`. [`Error::ShapeMismatch`] if a buffer's length does not
/// match the params or a `sequence_lens` entry is outside `0..=seq_len`.
pub fn lstm<T: Float>(
    p: &Lstm<T>,
    inp: &LstmInputs<'_, T>,
    out: &mut LstmOutputs<'_, T>,
    scratch: &mut [T],
) -> Result {
    let h = p.hidden_size;
    let nd = p.direction.count();
    ensure(inp.p.is_none_or(|v| Some(v.len()) == nd.checked_mul(3 * h)), Error::ShapeMismatch)?;
    let run = lstm_run(p, inp, out);
    drive(run, scratch, 4 * h, |Step { d, dw, xt, .. }, hb, cb, gates| {
        let [f, g, hact] = p.activations[d];
        let peep = inp.p.map(|v| &v[d * 3 * h..(d + 1) * 3 * h]);
        dw.all_rows(xt, hb, 4, gates);
        for j in 0..h {
            let c_prev = cb[j];
            let (pi, po, pf) = match peep {
                Some(pv) => (pv[j], pv[h + j], pv[2 * h + j]),
                None => (T::ZERO, T::ZERO, T::ZERO),
            };
            let i_gate = eval(f, clip_to(p.clip, gates[j].add(pi.mul(c_prev))));
            let f_gate = if p.input_forget {
                T::ONE.sub(i_gate)
            } else {
                eval(f, clip_to(p.clip, gates[2 * h + j].add(pf.mul(c_prev))))
            };
            let c_in = eval(g, clip_to(p.clip, gates[3 * h + j]));
            let c_new = f_gate.mul(c_prev).add(i_gate.mul(c_in));
            let o_gate = eval(f, clip_to(p.clip, gates[h + j].add(po.mul(c_new))));
            cb[j] = c_new;
            hb[j] = o_gate.mul(eval(hact, c_new));
        }
    })
}

/// [`lstm`] on f32 for generated code, same checks and semantics:
///
/// - the input projection `X Wᵀ + Wb + Rb` of every step of a direction is one
///   product on the blocked SGEMM ([`simd`]), before the recurrence;
/// - the recurrent product `H Rᵀ` of a step runs four rows of `R` at a time
///   over 8-lane partial sums;
/// - Sigmoid and Tanh gates use [`vmath`] (other activations stay exact).
///
/// Sums are reassociated, so results differ from [`lstm`] by rounding.
/// `scratch` holds [`Lstm::fast_scratch_len`] elements. Constant folding
/// keeps [`lstm`].
pub fn slstm(
    p: &Lstm<f32>,
    inp: &LstmInputs<'_, f32>,
    out: &mut LstmOutputs<'_, f32>,
    scratch: &mut [f32],
) -> Result {
    let h = p.hidden_size;
    let nd = p.direction.count();
    ensure(inp.p.is_none_or(|v| Some(v.len()) == nd.checked_mul(3 * h)), Error::ShapeMismatch)?;
    let g4 = h.checked_mul(4).ok_or(Error::Overflow)?;
    let rows = p.seq_len.checked_mul(p.batch).ok_or(Error::Overflow)?;
    let proj_len = rows.checked_mul(g4).ok_or(Error::Overflow)?;
    let packed_len = packed_len(h).ok_or(Error::Overflow)?;
    let work_len =
        g4.checked_add(proj_len).and_then(|v| v.checked_add(packed_len)).ok_or(Error::Overflow)?;
    let ni = p.input_size;
    let run = lstm_run(p, inp, out);
    let mut projected: Option<usize> = None;
    let mut status = Ok(());
    let driven = drive(run, scratch, work_len, |step, hb, cb, work| {
        let (gates, rest) = work.split_at_mut(g4);
        let (proj, packed) = rest.split_at_mut(proj_len);
        let Step { d, dw, x_row, .. } = step;
        if projected != Some(d) {
            projected = Some(d);
            pack_rows8(dw.r, h, packed);
            let bias = dw.b;
            // Transposed, `W Xᵀ` (`4H x rows`): `W` is read in place and only
            // the few columns of `Xᵀ` are packed.
            // `gates` holds the summed biases `Wb + Rb` until the step fills it.
            if let Some(b) = bias {
                for (j, g) in gates.iter_mut().enumerate() {
                    *g = b[j] + b[g4 + j];
                }
            }
            let epi = simd::Epilogue::bias_act(bias.map(|_| &*gates), simd::Activation::None);
            let a = ViewA { data: dw.w, off: 0, rs: ni, cs: 1 };
            let xt = DenseB { data: inp.x, rs: 1, cs: ni };
            if let Err(e) = simd::product(g4, rows, ni, a, &xt, Out { y: proj, ldy: rows }, &epi) {
                status = Err(e);
            }
        }
        if x_row >= rows {
            status = Err(Error::ShapeMismatch);
            return;
        }
        for (g, &v) in gates.iter_mut().zip(proj.iter().skip(x_row).step_by(rows)) {
            *g = v;
        }
        let peep = inp.p.map(|v| &v[d * 3 * h..(d + 1) * 3 * h]);
        let r = &*packed;
        let wx = None;
        simd::vectorize(LstmStep { p, acts: p.activations[d], peep, wx, r, gates, hb, cb });
    });
    driven.and(status)
}

/// Elements of an LSTM's `W` and `R` regrouped by [`pack_lstm_weights`], for
/// `directions` directions of `hidden` cells over inputs of `input` elements.
pub fn packed_lstm_len(directions: usize, hidden: usize, input: usize) -> Option<usize> {
    let rows = hidden.checked_mul(4)?.div_ceil(8).checked_mul(8)?;
    rows.checked_mul(input.checked_add(hidden)?)?.checked_mul(directions)
}

/// Regroups an LSTM's `W` (`[directions, 4H, input]`) and `R`
/// (`[directions, 4H, H]`) for [`slstm_packed`]: per direction, `W` then `R`,
/// each by eight rows (see `pack_rows8`). The generator runs this once, on
/// constant weights, and stores the result with the other weights.
pub fn pack_lstm_weights(
    directions: usize,
    hidden: usize,
    input: usize,
    w: &[f32],
    r: &[f32],
    out: &mut [f32],
) -> Result {
    let g4 = hidden.checked_mul(4).ok_or(Error::Overflow)?;
    let total = packed_lstm_len(directions, hidden, input).ok_or(Error::Overflow)?;
    let wl = g4.checked_mul(input).ok_or(Error::Overflow)?;
    let rl = g4.checked_mul(hidden).ok_or(Error::Overflow)?;
    ensure(out.len() == total, Error::ShapeMismatch)?;
    ensure(Some(w.len()) == wl.checked_mul(directions), Error::ShapeMismatch)?;
    ensure(Some(r.len()) == rl.checked_mul(directions), Error::ShapeMismatch)?;
    if total == 0 {
        return Ok(());
    }
    let (wp, rp) = (packed_rows_len(g4, input), packed_rows_len(g4, hidden));
    for (d, chunk) in out.chunks_exact_mut(wp + rp).enumerate() {
        let (pw, pr) = chunk.split_at_mut(wp);
        pack_rows8(&w[d * wl..(d + 1) * wl], input, pw);
        pack_rows8(&r[d * rl..(d + 1) * rl], hidden, pr);
    }
    Ok(())
}

/// Elements of `rows` rows of `n` regrouped by [`pack_rows8`].
fn packed_rows_len(rows: usize, n: usize) -> usize {
    rows.div_ceil(8) * 8 * n
}

/// [`slstm`] with `W` and `R` regrouped ahead of time by
/// [`pack_lstm_weights`] (`packed`): each step adds both products to the
/// biases as 8-lane sums, so `scratch` needs only [`Lstm::scratch_len`]
/// elements, as [`lstm`]'s does. `inp.w` and `inp.r` are not read (the
/// generated code passes empty slices: the weights are stored once, regrouped).
/// Sums are reassociated, so results differ from [`lstm`] by rounding.
pub fn slstm_packed(
    p: &Lstm<f32>,
    inp: &LstmInputs<'_, f32>,
    packed: &[f32],
    out: &mut LstmOutputs<'_, f32>,
    scratch: &mut [f32],
) -> Result {
    let (h, ni) = (p.hidden_size, p.input_size);
    let nd = p.direction.count();
    ensure(inp.p.is_none_or(|v| Some(v.len()) == nd.checked_mul(3 * h)), Error::ShapeMismatch)?;
    ensure(Some(packed.len()) == packed_lstm_len(nd, h, ni), Error::ShapeMismatch)?;
    let g4 = h.checked_mul(4).ok_or(Error::Overflow)?;
    let (wp, rp) = (packed_rows_len(g4, ni), packed_rows_len(g4, h));
    let run = Run { wr: None, ..lstm_run(p, inp, out) };
    drive(run, scratch, g4, |Step { d, dw, xt, .. }, hb, cb, gates| {
        match dw.b {
            Some(b) => {
                for (j, g) in gates.iter_mut().enumerate() {
                    *g = b[j] + b[g4 + j];
                }
            }
            None => gates.fill(0.0),
        }
        let own = &packed[d * (wp + rp)..(d + 1) * (wp + rp)];
        let (w, r) = own.split_at(wp);
        let peep = inp.p.map(|v| &v[d * 3 * h..(d + 1) * 3 * h]);
        let wx = Some((w, xt));
        simd::vectorize(LstmStep { p, acts: p.activations[d], peep, wx, r, gates, hb, cb });
    })
}

/// Elements of `R` (`4H x H`) regrouped by [`pack_rows8`].
fn packed_len(h: usize) -> Option<usize> {
    h.checked_mul(4)?.div_ceil(8).checked_mul(8)?.checked_mul(h)
}

/// Regroups the rows of `r` (rows of `n`) by eight: row `8b + l`, column `k`
/// goes to `out[(b * n + k) * 8 + l]`, rows past the end as zeros, so the
/// product with a vector runs eight rows per vector with no horizontal sums.
fn pack_rows8(r: &[f32], n: usize, out: &mut [f32]) {
    let Some(block_len) = n.checked_mul(8).filter(|&v| v > 0) else { return };
    for (b, block) in out.chunks_exact_mut(block_len).enumerate() {
        let (cols, _) = block.as_chunks_mut::<8>();
        for l in 0..8 {
            match r.get((b * 8 + l) * n..(b * 8 + l + 1) * n) {
                Some(row) => {
                    for (c, &v) in cols.iter_mut().zip(row) {
                        c[l] = v;
                    }
                }
                None => {
                    for c in cols.iter_mut() {
                        c[l] = 0.0;
                    }
                }
            }
        }
    }
}

/// `out[j] += sum_k R[j, k] * v[k]` with `R` regrouped by [`pack_rows8`]
/// (`v.len()` columns): four blocks of eight rows at a time, one 8-lane sum
/// per block, each summing `k` in ascending order.
#[inline(always)]
fn add_packed_matvec(packed: &[f32], v: &[f32], out: &mut [f32]) {
    let n = v.len();
    if n == 0 {
        return;
    }
    let (blocks, _) = packed.as_chunks::<8>();
    let mut b0 = 0;
    for o in out.chunks_mut(32) {
        let nb = o.len().div_ceil(8);
        let mut acc = [[0.0f32; 8]; 4];
        let four = blocks.get(b0 * n..(b0 + 4) * n).filter(|_| nb == 4);
        if let Some(four) = four {
            let (r01, r23) = four.split_at(2 * n);
            let ((r0, r1), (r2, r3)) = (r01.split_at(n), r23.split_at(n));
            let [a0, a1, a2, a3] = &mut acc;
            for ((((&x, w0), w1), w2), w3) in v.iter().zip(r0).zip(r1).zip(r2).zip(r3) {
                for l in 0..8 {
                    a0[l] += x * w0[l];
                    a1[l] += x * w1[l];
                    a2[l] += x * w2[l];
                    a3[l] += x * w3[l];
                }
            }
        } else {
            for (a, i) in acc.iter_mut().zip(0..nb) {
                let rb = blocks.get((b0 + i) * n..(b0 + i + 1) * n).unwrap_or(&[]);
                for (&x, w) in v.iter().zip(rb) {
                    for l in 0..8 {
                        a[l] += x * w[l];
                    }
                }
            }
        }
        for (dst, a) in o.chunks_mut(8).zip(&acc) {
            for (d, s) in dst.iter_mut().zip(a) {
                *d += s;
            }
        }
        b0 += nb;
    }
}

/// One recurrent step of [`slstm`]: `gates += R h`, then the cell update.
struct LstmStep<'a> {
    p: &'a Lstm<f32>,
    acts: [Unary<f32>; 3],
    peep: Option<&'a [f32]>,
    /// The regrouped `W` and the step's input, when the input projection is
    /// not already in `gates`.
    wx: Option<(&'a [f32], &'a [f32])>,
    r: &'a [f32],
    gates: &'a mut [f32],
    hb: &'a mut [f32],
    cb: &'a mut [f32],
}

impl simd::Vectorize for LstmStep<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        if let Some((w, x)) = self.wx {
            add_packed_matvec(w, x, self.gates);
        }
        add_packed_matvec(self.r, self.hb, self.gates);
        lstm_gates(self.p, self.acts, self.peep, self.gates, self.hb, self.cb);
    }
}

/// Clips (if asked) then applies `act` to every element of `v`: Sigmoid and
/// Tanh through [`vmath`], any other activation exactly.
#[inline(always)]
fn activate(act: Unary<f32>, clip: Option<f32>, v: &mut [f32]) {
    if clip.is_some() {
        for x in v.iter_mut() {
            *x = clip_to(clip, *x);
        }
    }
    match act {
        Unary::Sigmoid => {
            for x in v.iter_mut() {
                *x = vmath::sigmoid(*x);
            }
        }
        Unary::Tanh => {
            for x in v.iter_mut() {
                *x = vmath::tanh(*x);
            }
        }
        other => {
            for x in v.iter_mut() {
                *x = eval(other, *x);
            }
        }
    }
}

/// One LSTM cell update from the pre-activations `gates` (i, o, f, c blocks
/// of `H`), in place on `hb` and `cb`, as [`lstm`]'s cell computes it.
#[inline(always)]
fn lstm_gates(
    p: &Lstm<f32>,
    [fa, ga, ha]: [Unary<f32>; 3],
    peep: Option<&[f32]>,
    gates: &mut [f32],
    hb: &mut [f32],
    cb: &mut [f32],
) {
    let h = hb.len();
    let (gi, rest) = gates.split_at_mut(h);
    let (go, rest) = rest.split_at_mut(h);
    let (gf, gc) = rest.split_at_mut(h);
    let gc = &mut gc[..h];
    let pv = |k: usize| peep.and_then(|v| v.get(k * h..(k + 1) * h));
    if let Some(pi) = pv(0) {
        for ((g, &w), &c) in gi.iter_mut().zip(pi).zip(&*cb) {
            *g += w * c;
        }
    }
    activate(fa, p.clip, gi);
    if p.input_forget {
        for (f, &i) in gf.iter_mut().zip(&*gi) {
            *f = 1.0 - i;
        }
    } else {
        if let Some(pf) = pv(2) {
            for ((g, &w), &c) in gf.iter_mut().zip(pf).zip(&*cb) {
                *g += w * c;
            }
        }
        activate(fa, p.clip, gf);
    }
    activate(ga, p.clip, gc);
    for (((c, &f), &i), &g) in cb.iter_mut().zip(&*gf).zip(&*gi).zip(&*gc) {
        *c = f * *c + i * g;
    }
    if let Some(po) = pv(1) {
        for ((g, &w), &c) in go.iter_mut().zip(po).zip(&*cb) {
            *g += w * c;
        }
    }
    activate(fa, p.clip, go);
    gc.copy_from_slice(cb);
    activate(ha, None, gc);
    for ((hv, &o), &t) in hb.iter_mut().zip(&*go).zip(&*gc) {
        *hv = o * t;
    }
}

/// ONNX `GRU` attributes and sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gru<T> {
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
    /// Per direction, the activations `f` (gates) and `g` (candidate);
    /// ONNX defaults are Sigmoid, Tanh.
    pub activations: [[Unary<T>; 2]; 2],
    /// Clip gate pre-activations to `[-clip, clip]`.
    pub clip: Option<T>,
    /// `linear_before_reset = 1`: apply the reset gate after the recurrence
    /// product (`r ⊙ (H Rhᵀ + Rbh)`) instead of before it (`(r ⊙ H) Rhᵀ + Rbh`).
    pub linear_before_reset: bool,
}

impl<T: Float> Gru<T> {
    /// The ONNX default activations for one direction: Sigmoid, Tanh.
    pub const DEFAULT_ACTIVATIONS: [Unary<T>; 2] = [Unary::Sigmoid, Unary::Tanh];

    fn dims(&self) -> Dims {
        Dims {
            seq_len: self.seq_len,
            batch: self.batch,
            input_size: self.input_size,
            hidden_size: self.hidden_size,
            direction: self.direction,
            batch_first: self.batch_first,
        }
    }

    /// Scratch elements [`gru`] needs: every batch entry's hidden state plus
    /// four vectors of `H`.
    pub fn scratch_len(&self) -> Option<usize> {
        self.dims().scratch_len(false, self.hidden_size.checked_mul(4)?)
    }
}

/// Runs an ONNX `GRU` (gate order z, r, h).
pub fn gru<T: Float>(
    p: &Gru<T>,
    inp: &RnnInputs<'_, T>,
    out: &mut RnnOutputs<'_, T>,
    scratch: &mut [T],
) -> Result {
    let h = p.hidden_size;
    let run = Run {
        dims: p.dims(),
        gates: 3,
        x: inp.x,
        wr: Some((inp.w, inp.r)),
        b: inp.b,
        sequence_lens: inp.sequence_lens,
        initial_h: inp.initial_h,
        initial_c: None,
        y: out.y.as_deref_mut(),
        y_h: out.y_h.as_deref_mut(),
        y_c: None,
    };
    drive(run, scratch, 4 * h, |Step { d, dw, xt, .. }, hb, _, work| {
        let [f, g] = p.activations[d];
        let (z, rest) = work.split_at_mut(h);
        let (r, rest) = rest.split_at_mut(h);
        let (cand, rh) = rest.split_at_mut(h);
        for j in 0..h {
            z[j] = eval(f, clip_to(p.clip, dw.x_row(j, xt).add(dw.h_row(j, hb, 3))));
            r[j] = eval(f, clip_to(p.clip, dw.x_row(h + j, xt).add(dw.h_row(h + j, hb, 3))));
        }
        if p.linear_before_reset {
            for j in 0..h {
                cand[j] = dw.x_row(2 * h + j, xt).add(r[j].mul(dw.h_row(2 * h + j, hb, 3)));
            }
        } else {
            for j in 0..h {
                rh[j] = r[j].mul(hb[j]);
            }
            for (j, c) in cand.iter_mut().enumerate() {
                *c = dw.x_row(2 * h + j, xt).add(dw.h_row(2 * h + j, &rh[..h], 3));
            }
        }
        for j in 0..h {
            let c = eval(g, clip_to(p.clip, cand[j]));
            hb[j] = T::ONE.sub(z[j]).mul(c).add(z[j].mul(hb[j]));
        }
    })
}

/// ONNX `RNN` attributes and sizes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rnn<T> {
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
    /// Per direction, the activation (ONNX default Tanh).
    pub activations: [Unary<T>; 2],
    /// Clip pre-activations to `[-clip, clip]`.
    pub clip: Option<T>,
}

impl<T: Float> Rnn<T> {
    fn dims(&self) -> Dims {
        Dims {
            seq_len: self.seq_len,
            batch: self.batch,
            input_size: self.input_size,
            hidden_size: self.hidden_size,
            direction: self.direction,
            batch_first: self.batch_first,
        }
    }

    /// Scratch elements [`rnn`] needs: every batch entry's hidden state plus one vector of `H`.
    pub fn scratch_len(&self) -> Option<usize> {
        self.dims().scratch_len(false, self.hidden_size)
    }
}

/// Runs an ONNX `RNN`: `H = f(X Wᵀ + H Rᵀ + Wb + Rb)`.
pub fn rnn<T: Float>(
    p: &Rnn<T>,
    inp: &RnnInputs<'_, T>,
    out: &mut RnnOutputs<'_, T>,
    scratch: &mut [T],
) -> Result {
    let run = Run {
        dims: p.dims(),
        gates: 1,
        x: inp.x,
        wr: Some((inp.w, inp.r)),
        b: inp.b,
        sequence_lens: inp.sequence_lens,
        initial_h: inp.initial_h,
        initial_c: None,
        y: out.y.as_deref_mut(),
        y_h: out.y_h.as_deref_mut(),
        y_c: None,
    };
    drive(run, scratch, p.hidden_size, |Step { d, dw, xt, .. }, hb, _, pre| {
        for (j, v) in pre.iter_mut().enumerate() {
            *v = dw.x_row(j, xt).add(dw.h_row(j, hb, 1));
        }
        for (o, &v) in hb.iter_mut().zip(pre.iter()) {
            *o = eval(p.activations[d], clip_to(p.clip, v));
        }
    })
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

    /// A deterministic pseudo-random f32 in [-1, 1).
    fn noise(i: usize, salt: usize) -> f32 {
        let v = (i.wrapping_mul(2_654_435_761).wrapping_add(salt.wrapping_mul(40_503))) % 1000;
        v as f32 / 500.0 - 1.0
    }

    #[test]
    fn fast_lstm_matches_exact_on_awkward_sizes() {
        use crate::elementwise::Unary as U;
        let mut cases = 0;
        for (hidden, input) in [(1, 1), (3, 2), (5, 7), (8, 8), (9, 3), (17, 10), (33, 40)] {
            for variant in 0..6 {
                let (seq, batch) = (3, 2);
                let direction =
                    if variant % 2 == 0 { Direction::Forward } else { Direction::Bidirectional };
                let nd = direction.count();
                let acts = if variant == 5 {
                    [U::HardSigmoid { alpha: 0.2, beta: 0.5 }, U::Relu, U::Tanh]
                } else {
                    Lstm::<f32>::DEFAULT_ACTIVATIONS
                };
                let p = Lstm {
                    seq_len: seq,
                    batch,
                    input_size: input,
                    hidden_size: hidden,
                    direction,
                    batch_first: variant == 3,
                    activations: [acts, Lstm::<f32>::DEFAULT_ACTIVATIONS],
                    clip: if variant == 4 { Some(0.7) } else { None },
                    input_forget: variant == 2,
                };
                let g4 = 4 * hidden;
                let x: [f32; 240] = core::array::from_fn(|i| noise(i, 1) * 2.0);
                let w: [f32; 2 * 132 * 40] = core::array::from_fn(|i| noise(i, 2) * 0.5);
                let r: [f32; 2 * 132 * 33] = core::array::from_fn(|i| noise(i, 3) * 0.5);
                let b: [f32; 2 * 264] = core::array::from_fn(|i| noise(i, 4));
                let pp: [f32; 2 * 99] = core::array::from_fn(|i| noise(i, 5));
                let st: [f32; 2 * 2 * 33 + 1] = core::array::from_fn(|i| noise(i, 6));
                let lens = [3, 2];
                let state = nd * batch * hidden;
                let inp = LstmInputs {
                    x: &x[..seq * batch * input],
                    w: &w[..nd * g4 * input],
                    r: &r[..nd * g4 * hidden],
                    b: (variant != 1).then(|| &b[..nd * 2 * g4]),
                    sequence_lens: (variant == 1).then_some(&lens[..]),
                    initial_h: (variant != 0).then(|| &st[..state]),
                    initial_c: (variant > 1).then(|| &st[1..state + 1]),
                    p: (variant == 3 || variant == 4).then(|| &pp[..nd * 3 * hidden]),
                };
                let ny = seq * state;
                let (mut y0, mut h0, mut c0) = ([0.0f32; 396], [0.0f32; 132], [0.0f32; 132]);
                let (mut y1, mut h1, mut c1) = ([9.0f32; 396], [9.0f32; 132], [9.0f32; 132]);
                let mut s0 = [0.0f32; 4096];
                let mut s1 = [0.0f32; 8192];
                let n0 = p.scratch_len().unwrap();
                let n1 = p.fast_scratch_len().unwrap();
                let mut o0 = LstmOutputs {
                    y: Some(&mut y0[..ny]),
                    y_h: Some(&mut h0[..state]),
                    y_c: Some(&mut c0[..state]),
                };
                lstm(&p, &inp, &mut o0, &mut s0[..n0]).unwrap();
                let mut o1 = LstmOutputs {
                    y: Some(&mut y1[..ny]),
                    y_h: Some(&mut h1[..state]),
                    y_c: Some(&mut c1[..state]),
                };
                slstm(&p, &inp, &mut o1, &mut s1[..n1]).unwrap();
                for (a, bv) in y0[..ny]
                    .iter()
                    .chain(&h0[..state])
                    .chain(&c0[..state])
                    .zip(y1[..ny].iter().chain(&h1[..state]).chain(&c1[..state]))
                {
                    assert!(
                        (a - bv).abs() <= 2e-5 * (1.0 + a.abs()),
                        "{hidden} {input} {variant}: {a} {bv}"
                    );
                }
                // Too little scratch is refused, not overrun.
                let mut o1 = LstmOutputs { y: None, y_h: None, y_c: None };
                assert_eq!(slstm(&p, &inp, &mut o1, &mut s1[..n1 - 1]), Err(Error::ShapeMismatch));
                // Weights regrouped ahead of time, with the exact kernel's scratch.
                let mut packed = [0.0f32; 2 * 136 * 73];
                let np = packed_lstm_len(nd, hidden, input).unwrap();
                pack_lstm_weights(nd, hidden, input, inp.w, inp.r, &mut packed[..np]).unwrap();
                let (mut y2, mut h2, mut c2) = ([7.0f32; 396], [7.0f32; 132], [7.0f32; 132]);
                let mut o2 = LstmOutputs {
                    y: Some(&mut y2[..ny]),
                    y_h: Some(&mut h2[..state]),
                    y_c: Some(&mut c2[..state]),
                };
                // W and R are not read: the generated code stores only the packed copy.
                let only_packed = LstmInputs { w: &[], r: &[], ..inp };
                slstm_packed(&p, &only_packed, &packed[..np], &mut o2, &mut s1[..n0]).unwrap();
                for (a, bv) in y0[..ny]
                    .iter()
                    .chain(&h0[..state])
                    .chain(&c0[..state])
                    .zip(y2[..ny].iter().chain(&h2[..state]).chain(&c2[..state]))
                {
                    assert!(
                        (a - bv).abs() <= 2e-5 * (1.0 + a.abs()),
                        "packed {hidden} {input} {variant}: {a} {bv}"
                    );
                }
                let mut o2 = LstmOutputs { y: None, y_h: None, y_c: None };
                let short = slstm_packed(&p, &inp, &packed[..np - 1], &mut o2, &mut s1[..n0]);
                assert_eq!(short, Err(Error::ShapeMismatch));
                cases += 1;
            }
        }
        assert_eq!(cases, 42);
    }

    #[test]
    fn simple_rnn_by_hand() {
        // Relu cell, H = I = 1: h1 = relu(2 * 1 + 0.5 * 1 + 0.1 + 0.2) = 2.8,
        // h2 = relu(2 * 0 + 0.5 * 2.8 + 0.3) = 1.7; a negative step clamps to 0.
        let p = Rnn {
            seq_len: 3,
            batch: 1,
            input_size: 1,
            hidden_size: 1,
            direction: Direction::Forward,
            batch_first: false,
            activations: [Unary::Relu; 2],
            clip: None,
        };
        let i = RnnInputs {
            x: &[1.0, 0.0, -10.0],
            w: &[2.0],
            r: &[0.5],
            b: Some(&[0.1, 0.2]),
            sequence_lens: None,
            initial_h: Some(&[1.0]),
        };
        let (mut y, mut yh) = ([0.0f64; 3], [9.0]);
        let mut o = RnnOutputs { y: Some(&mut y), y_h: Some(&mut yh) };
        rnn(&p, &i, &mut o, &mut [0.0; 2]).unwrap();
        assert!(close(y[0], 2.8) && close(y[1], 1.7));
        assert_eq!((y[2], yh[0]), (0.0, 0.0));
        let mut none = RnnOutputs { y: None, y_h: None };
        assert_eq!(rnn(&p, &i, &mut none, &mut [0.0; 1]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn gru_by_hand_both_reset_placements() {
        // W = 0, R rows (z, r, h) = [0, 0, 1], Rbh = 1, H0 = 2: z = r = 1/2, so
        // before-reset: cand = tanh(r * H0 * 1 + 1) = tanh(2);
        // after-reset (linear_before_reset): cand = tanh(r * (H0 * 1 + 1)) = tanh(1.5);
        // H = (1 - z) * cand + z * H0.
        let mut p = Gru {
            seq_len: 1,
            batch: 1,
            input_size: 1,
            hidden_size: 1,
            direction: Direction::Forward,
            batch_first: false,
            activations: [Gru::DEFAULT_ACTIVATIONS; 2],
            clip: None,
            linear_before_reset: false,
        };
        let b = [0.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        let i = RnnInputs {
            x: &[3.0],
            w: &[0.0; 3],
            r: &[0.0, 0.0, 1.0],
            b: Some(&b),
            sequence_lens: None,
            initial_h: Some(&[2.0]),
        };
        for (lbr, cand) in [(false, libm::tanh(2.0)), (true, libm::tanh(1.5))] {
            p.linear_before_reset = lbr;
            let mut yh = [0.0f64];
            let mut o = RnnOutputs { y: None, y_h: Some(&mut yh) };
            gru(&p, &i, &mut o, &mut [0.0; 5]).unwrap();
            assert!(close(yh[0], 0.5 * cand + 1.0));
        }
    }
}
