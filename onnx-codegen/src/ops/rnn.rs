//! Recurrent layers: LSTM, GRU and RNN, every direction and layout, with
//! their activations (and alpha/beta), clip, sequence lengths, initial
//! states and LSTM peepholes, run by the runtime's recurrent driver. The
//! driver's working memory is a scratch buffer the planner places in the
//! arena for the step.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use crate::emit::lit;
use crate::ir::lowering::DynamicLstm;
use crate::ir::{AttrValue, ElemType, Lowering, TensorType};
use onnx_codegen_runtime::elementwise::Unary;
use onnx_codegen_runtime::num::Float;
use onnx_codegen_runtime::rnn::{self as rt_rnn, Direction};
use proc_macro2::{Ident, Span, TokenStream};
use quote::quote;

/// The rule for `op_type`, if it is a recurrent layer.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "LSTM" => Some(&RecurrentRule(Cell::Lstm)),
        "GRU" => Some(&RecurrentRule(Cell::Gru)),
        "RNN" => Some(&RecurrentRule(Cell::Rnn)),
        _ => None,
    }
}

/// Which layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cell {
    Lstm,
    Gru,
    Rnn,
}

impl Cell {
    /// Gates per direction (rows of `W` per hidden unit).
    fn gates(self) -> usize {
        match self {
            Cell::Lstm => 4,
            Cell::Gru => 3,
            Cell::Rnn => 1,
        }
    }

    /// Activations per direction.
    fn activation_count(self) -> usize {
        match self {
            Cell::Lstm => 3,
            Cell::Gru => 2,
            Cell::Rnn => 1,
        }
    }

    /// The ONNX default activations of one direction.
    fn default_activations(self) -> &'static [&'static str] {
        match self {
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Rnn => &["Tanh"],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Cell::Lstm => "LSTM",
            Cell::Gru => "GRU",
            Cell::Rnn => "RNN",
        }
    }
}

struct RecurrentRule(Cell);

/// Everything a recurrent call needs, derived from the node.
#[derive(Clone, Debug, PartialEq)]
struct Params {
    cell: Cell,
    elem: ElemType,
    seq_len: usize,
    batch: usize,
    input_size: usize,
    hidden_size: usize,
    direction: Direction,
    batch_first: bool,
    /// Per direction (both entries equal when there is one), the activations
    /// with parameters as `f64`.
    activations: [Vec<Unary<f64>>; 2],
    clip: Option<f64>,
    input_forget: bool,
    linear_before_reset: bool,
    /// How many outputs the node declares (present or not).
    outputs: usize,
    /// LSTM only: the read holding `W` and `R` regrouped by gate
    /// ([`Lowering::Lstm`], `passes::optimize::pack_lstm_weights`).
    packed: Option<usize>,
    /// LSTM only: the reads of the 8-bit weights it runs on as onnxruntime's
    /// `DynamicQuantizeLSTM` ([`Lowering::DynamicLstm`]).
    dynamic: Option<Dynamic>,
}

/// Where a [`Lowering::DynamicLstm`]'s operands are among the node's reads.
#[derive(Clone, Debug, PartialEq)]
struct Dynamic {
    /// int8 or uint8.
    weights: ElemType,
    /// `W`, its scale and zero point; then `R`'s.
    reads: [usize; 6],
}

impl Params {
    fn nd(&self) -> usize {
        self.direction.count()
    }

    fn scratch_len(&self) -> Option<usize> {
        if self.dynamic.is_some() {
            return onnx_codegen_runtime::qlstm::scratch_len(&rt_lstm::<f32>(self));
        }
        match self.cell {
            // f32 runs a fast kernel: with weights regrouped at generation time
            // it needs no more than the exact one; otherwise it also keeps the
            // input projection and the regrouped R.
            Cell::Lstm if self.elem == ElemType::Float && self.packed.is_none() => {
                rt_lstm::<f64>(self).fast_scratch_len()
            }
            Cell::Lstm => rt_lstm::<f64>(self).scratch_len(),
            Cell::Gru => rt_gru::<f64>(self).scratch_len(),
            Cell::Rnn => rt_simple::<f64>(self).scratch_len(),
        }
    }

    /// Output types: `Y`, `Y_h` (and `Y_c` for LSTM), as many as declared.
    fn output_types(&self) -> Vec<TensorType> {
        let (s, d, b, h) = (self.seq_len, self.nd(), self.batch, self.hidden_size);
        let y = if self.batch_first { vec![b, s, d, h] } else { vec![s, d, b, h] };
        let state = if self.batch_first { vec![b, d, h] } else { vec![d, b, h] };
        [y, state.clone(), state]
            .into_iter()
            .take(self.outputs)
            .map(|dims| TensorType::new(self.elem, dims))
            .collect()
    }
}

/// An activation by name (case-insensitive), taking its alpha and beta from
/// the lists in order, or the ONNX defaults when the lists run out.
fn activation(
    name: &str,
    alphas: &mut std::slice::Iter<'_, f32>,
    betas: &mut std::slice::Iter<'_, f32>,
) -> OpResult<Unary<f64>> {
    let mut a = |default: f64| alphas.next().map_or(default, |&v| f64::from(v));
    let mut b = |default: f64| betas.next().map_or(default, |&v| f64::from(v));
    Ok(match name.to_ascii_lowercase().as_str() {
        "relu" => Unary::Relu,
        "tanh" => Unary::Tanh,
        "sigmoid" => Unary::Sigmoid,
        "softsign" => Unary::Softsign,
        "softplus" => Unary::Softplus,
        "leakyrelu" => Unary::LeakyRelu { alpha: a(0.01) },
        "thresholdedrelu" => Unary::ThresholdedRelu { alpha: a(1.0) },
        "elu" => Unary::Elu { alpha: a(1.0) },
        "hardsigmoid" => Unary::HardSigmoid { alpha: a(0.2), beta: b(0.5) },
        "affine" => Unary::Affine { alpha: a(1.0), beta: b(0.0) },
        "scaledtanh" => Unary::ScaledTanh { alpha: a(1.0), beta: b(1.0) },
        _ => return invalid(format!("'{name}' is not an RNN activation function")),
    })
}

fn floats_attr(cx: &NodeCx<'_>, name: &str) -> Vec<f32> {
    match cx.node.attr(name) {
        Some(AttrValue::Floats(v)) => v.clone(),
        _ => Vec::new(),
    }
}

fn activations(cx: &NodeCx<'_>, cell: Cell, nd: usize) -> OpResult<[Vec<Unary<f64>>; 2]> {
    let names: Vec<String> = match cx.node.attr("activations") {
        Some(AttrValue::Strings(v)) => {
            v.iter().map(|s| String::from_utf8_lossy(s).into_owned()).collect()
        }
        _ => cell.default_activations().iter().map(|s| (*s).to_owned()).collect(),
    };
    let per = cell.activation_count();
    if names.len() != per && names.len() != per * nd {
        return invalid(format!(
            "{} needs {} activations ({per} per direction), got {}",
            cell.name(),
            per * nd,
            names.len()
        ));
    }
    let (alphas, betas) = (floats_attr(cx, "activation_alpha"), floats_attr(cx, "activation_beta"));
    let (mut ai, mut bi) = (alphas.iter(), betas.iter());
    let all =
        names.iter().map(|n| activation(n, &mut ai, &mut bi)).collect::<OpResult<Vec<_>>>()?;
    let first = all[..per].to_vec();
    let second = if all.len() > per { all[per..].to_vec() } else { first.clone() };
    Ok([first, second])
}

fn dims3(t: &TensorType, what: &str, cell: Cell) -> OpResult<[usize; 3]> {
    match t.dims.as_slice() {
        &[a, b, c] => Ok([a, b, c]),
        _ => invalid(format!("{}'s {what} must be 3-D, it is {t}", cell.name())),
    }
}

/// The operands of a [`Lowering::DynamicLstm`], checked against the
/// LSTM's sizes (`[D, 4H, input, H]`).
fn dynamic(
    cx: &NodeCx<'_>,
    q: &DynamicLstm,
    elem: ElemType,
    batch_first: bool,
    [nd, gh, input, hidden]: [usize; 4],
) -> OpResult<Dynamic> {
    if elem != ElemType::Float || batch_first {
        return invalid("a dynamically quantized LSTM runs on f32, layout 0");
    }
    let (w_at, w) = cx.operand(q.w)?;
    let (r_at, r) = cx.operand(q.r)?;
    let weights = w.elem;
    if !matches!(weights, ElemType::Int8 | ElemType::Uint8) || r.elem != weights {
        return invalid(format!(
            "a dynamically quantized LSTM's weights {w} and {r} are not 8-bit"
        ));
    }
    if w.dims != [nd, gh, input] || r.dims != [nd, gh, hidden] {
        return invalid(format!(
            "a dynamically quantized LSTM's weights {w} and {r} are not [{nd}, {gh}, {input}] and [{nd}, {gh}, {hidden}]"
        ));
    }
    let mut reads = [w_at, 0, 0, r_at, 0, 0];
    for (k, (v, elem)) in [
        (q.w_scale, ElemType::Float),
        (q.w_zero, weights),
        (q.r_scale, ElemType::Float),
        (q.r_zero, weights),
    ]
    .into_iter()
    .enumerate()
    {
        let (at, t) = cx.operand(v)?;
        if t.elem != elem || (t.numel() != Some(nd) && t.numel() != Some(nd * gh)) {
            return invalid(format!(
                "a dynamically quantized LSTM's scale or zero point {t} is not {elem} of [{nd}] or [{nd}, {gh}]"
            ));
        }
        reads[[1, 2, 4, 5][k]] = at;
    }
    Ok(Dynamic { weights, reads })
}

fn params(cx: &NodeCx<'_>, cell: Cell) -> OpResult<Params> {
    let name = cell.name();
    let x = cx.input(0)?;
    let (w, r) = (cx.input(1)?, cx.input(2)?);
    if !matches!(x.elem, ElemType::Float | ElemType::Double) {
        if matches!(x.elem, ElemType::Float16 | ElemType::Bfloat16) {
            return unsupported(format!("{name} on {} tensors", x.elem));
        }
        return invalid(format!("{name} is not defined on {} tensors", x.elem));
    }
    for (i, t) in cx.inputs.iter().enumerate() {
        let Some(t) = t else { continue };
        let want = if i == 4 { ElemType::Int32 } else { x.elem };
        if t.elem != want {
            return invalid(format!("{name}'s input {i} is {}, expected {want}", t.elem));
        }
    }
    let batch_first = match cx.int_or("layout", 0) {
        0 => false,
        1 => true,
        other => return invalid(format!("{name} layout {other} is not 0 or 1")),
    };
    let direction = match cx.string_or("direction", "forward").as_str() {
        "forward" => Direction::Forward,
        "reverse" => Direction::Reverse,
        "bidirectional" => Direction::Bidirectional,
        other => {
            return invalid(format!(
                "{name} direction '{other}' is not forward, reverse or bidirectional"
            ));
        }
    };
    let nd = direction.count();
    let [x0, x1, input_size] = dims3(x, "X", cell)?;
    let (seq_len, batch) = if batch_first { (x1, x0) } else { (x0, x1) };
    let [wd, wrows, wcols] = dims3(w, "W", cell)?;
    let [rd, rrows, hidden_size] = dims3(r, "R", cell)?;
    let g = cell.gates();
    if let Some(hs) = cx.node.attr("hidden_size")
        && *hs != AttrValue::Int(hidden_size as i64)
    {
        return invalid(format!("{name}'s hidden_size {hs:?} does not match R {r}"));
    }
    let gh = g * hidden_size;
    if wd != nd || rd != nd || wrows != gh || rrows != gh || wcols != input_size {
        return invalid(format!(
            "{name}'s W {w} and R {r} do not fit X {x} with {nd} direction(s) and hidden size {hidden_size}"
        ));
    }
    let check = |i: usize, what: &str, dims: Vec<usize>| -> OpResult<()> {
        match cx.opt_input(i) {
            Some(t) if t.dims != dims => {
                invalid(format!("{name}'s {what} is {t}, expected shape {dims:?}"))
            }
            _ => Ok(()),
        }
    };
    let state =
        if batch_first { vec![batch, nd, hidden_size] } else { vec![nd, batch, hidden_size] };
    check(3, "B", vec![nd, 2 * gh])?;
    check(4, "sequence_lens", vec![batch])?;
    check(5, "initial_h", state.clone())?;
    if cell == Cell::Lstm {
        check(6, "initial_c", state)?;
        check(7, "P", vec![nd, 3 * hidden_size])?;
    } else if cx.inputs.len() > 6 {
        return invalid(format!("{name} takes at most 6 inputs, got {}", cx.inputs.len()));
    }
    let clip = match cx.node.attr("clip") {
        Some(AttrValue::Float(c)) => Some(f64::from(*c)),
        _ => None,
    };
    let max_outputs = if cell == Cell::Lstm { 3 } else { 2 };
    if cx.node.outputs.len() > max_outputs {
        return invalid(format!("{name} has at most {max_outputs} outputs"));
    }
    let p = Params {
        cell,
        elem: x.elem,
        seq_len,
        batch,
        input_size,
        hidden_size,
        direction,
        batch_first,
        activations: activations(cx, cell, nd)?,
        clip,
        input_forget: cell == Cell::Lstm && cx.int_or("input_forget", 0) != 0,
        linear_before_reset: cell == Cell::Gru && cx.int_or("linear_before_reset", 0) != 0,
        outputs: cx.node.outputs.len(),
        packed: match cx.lowering() {
            Some(Lowering::Lstm { packed }) if cell == Cell::Lstm => match cx.operand(*packed)? {
                (at, t) if x.elem == ElemType::Float && t.elem == x.elem && t.rank() == 1 => {
                    Some(at)
                }
                (_, t) => return invalid(format!("an LSTM's regrouped weights {t} are not f32")),
            },
            None | Some(Lowering::DynamicLstm(_)) => None,
            Some(other) => return invalid(format!("{name} cannot run as {other:?}")),
        },
        dynamic: match cx.lowering() {
            Some(Lowering::DynamicLstm(q)) if cell == Cell::Lstm => {
                Some(dynamic(cx, q, x.elem, batch_first, [nd, gh, input_size, hidden_size])?)
            }
            _ => None,
        },
    };
    if p.scratch_len().is_none() {
        return invalid(format!("{name} is too large"));
    }
    Ok(p)
}

impl OpRule for RecurrentRule {
    /// Every time step multiplies the input by W and the state by R, for
    /// every batch entry: `numel(W) + numel(R)` per step and batch entry.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        _outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        let ty = |i: usize| inputs.get(i).copied().flatten();
        // X is [seq, batch, input] or, with layout 1, [batch, seq, input].
        let steps_batch = ty(0).map_or(0, |x| {
            let seq = x.dims.first().copied().unwrap_or(0);
            let batch = x.dims.get(1).copied().unwrap_or(0);
            super::to_u64(seq).saturating_mul(super::to_u64(batch))
        });
        Some(
            steps_batch
                .saturating_mul(super::numel_u64(ty(1)).saturating_add(super::numel_u64(ty(2)))),
        )
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(params(cx, self.0)?.output_types())
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(RecurrentKernel { p: params(cx, self.0)? })))
    }
}

struct RecurrentKernel {
    p: Params,
}

fn acts<T: Float, const N: usize>(v: &[Unary<f64>]) -> [Unary<T>; N] {
    std::array::from_fn(|i| v.get(i).copied().unwrap_or(Unary::Tanh).map(T::from_f64))
}

fn rt_lstm<T: Float>(p: &Params) -> rt_rnn::Lstm<T> {
    rt_rnn::Lstm {
        seq_len: p.seq_len,
        batch: p.batch,
        input_size: p.input_size,
        hidden_size: p.hidden_size,
        direction: p.direction,
        batch_first: p.batch_first,
        activations: [acts(&p.activations[0]), acts(&p.activations[1])],
        clip: p.clip.map(T::from_f64),
        input_forget: p.input_forget,
    }
}

fn rt_gru<T: Float>(p: &Params) -> rt_rnn::Gru<T> {
    rt_rnn::Gru {
        seq_len: p.seq_len,
        batch: p.batch,
        input_size: p.input_size,
        hidden_size: p.hidden_size,
        direction: p.direction,
        batch_first: p.batch_first,
        activations: [acts(&p.activations[0]), acts(&p.activations[1])],
        clip: p.clip.map(T::from_f64),
        linear_before_reset: p.linear_before_reset,
    }
}

fn rt_simple<T: Float>(p: &Params) -> rt_rnn::Rnn<T> {
    rt_rnn::Rnn {
        seq_len: p.seq_len,
        batch: p.batch,
        input_size: p.input_size,
        hidden_size: p.hidden_size,
        direction: p.direction,
        batch_first: p.batch_first,
        activations: [acts::<T, 1>(&p.activations[0])[0], acts::<T, 1>(&p.activations[1])[0]],
        clip: p.clip.map(T::from_f64),
    }
}

fn run<T: Float + HostElem>(
    p: &Params,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let input = |i: usize| -> Result<Option<&[T]>, EvalError> {
        match inputs.get(i).copied().flatten() {
            None => Ok(None),
            Some(t) => t.get::<T>().map(Some).ok_or(EvalError::Type(t.ty.elem)),
        }
    };
    let req = |i: usize| input(i)?.ok_or(EvalError::Type(p.elem));
    let lens: Option<&[i32]> = match inputs.get(4).copied().flatten() {
        None => None,
        Some(t) => Some(t.get::<i32>().ok_or(EvalError::Type(t.ty.elem))?),
    };
    let (outs, scratch) = outputs.split_at_mut(p.outputs);
    let scratch =
        scratch.first_mut().and_then(|s| s.get_mut::<T>()).ok_or(EvalError::Type(p.elem))?;
    let mut it = outs.iter_mut();
    let mut next = || it.next().and_then(|t| t.get_mut::<T>());
    let (y, y_h, y_c) = (next(), next(), next());
    match p.cell {
        Cell::Lstm => {
            let inp = rt_rnn::LstmInputs {
                x: req(0)?,
                w: req(1)?,
                r: req(2)?,
                b: input(3)?,
                sequence_lens: lens,
                initial_h: input(5)?,
                initial_c: input(6)?,
                p: input(7)?,
            };
            let mut out = rt_rnn::LstmOutputs { y, y_h, y_c };
            rt_rnn::lstm(&rt_lstm::<T>(p), &inp, &mut out, scratch)?;
        }
        Cell::Gru | Cell::Rnn => {
            let inp = rt_rnn::RnnInputs {
                x: req(0)?,
                w: req(1)?,
                r: req(2)?,
                b: input(3)?,
                sequence_lens: lens,
                initial_h: input(5)?,
            };
            let mut out = rt_rnn::RnnOutputs { y, y_h };
            if p.cell == Cell::Gru {
                rt_rnn::gru(&rt_gru::<T>(p), &inp, &mut out, scratch)?;
            } else {
                rt_rnn::rnn(&rt_simple::<T>(p), &inp, &mut out, scratch)?;
            }
        }
    }
    Ok(())
}

/// [`run`] for a [`Lowering::DynamicLstm`] (f32, 8-bit weights `W`).
fn run_dynamic<W: onnx_codegen_runtime::int8::Q8 + HostElem>(
    p: &Params,
    q: &Dynamic,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    use onnx_codegen_runtime::qlstm::{self, QWeights};
    let get = |i: usize| inputs.get(i).copied().flatten();
    let f32s = |i: usize| -> Result<Option<&[f32]>, EvalError> {
        get(i).map(|t| t.get::<f32>().ok_or(EvalError::Type(t.ty.elem))).transpose()
    };
    let req_f32 = |i: usize| f32s(i)?.ok_or(EvalError::Type(ElemType::Float));
    let req_w = |i: usize| get(i).and_then(|t| t.get::<W>()).ok_or(EvalError::Type(q.weights));
    let lens: Option<&[i32]> = match get(4) {
        None => None,
        Some(t) => Some(t.get::<i32>().ok_or(EvalError::Type(t.ty.elem))?),
    };
    let [w, ws, wz, r, rs, rz] = q.reads;
    let wq = QWeights { w: req_w(w)?, scale: req_f32(ws)?, zero: req_w(wz)? };
    let rq = QWeights { w: req_w(r)?, scale: req_f32(rs)?, zero: req_w(rz)? };
    let inp = rt_rnn::LstmInputs {
        x: req_f32(0)?,
        w: &[],
        r: &[],
        b: f32s(3)?,
        sequence_lens: lens,
        initial_h: f32s(5)?,
        initial_c: f32s(6)?,
        p: f32s(7)?,
    };
    let (outs, scratch) = outputs.split_at_mut(p.outputs);
    let scratch =
        scratch.first_mut().and_then(|s| s.get_mut::<f32>()).ok_or(EvalError::Type(p.elem))?;
    let mut it = outs.iter_mut();
    let mut next = || it.next().and_then(|t| t.get_mut::<f32>());
    let (y, y_h, y_c) = (next(), next(), next());
    let mut out = rt_rnn::LstmOutputs { y, y_h, y_c };
    qlstm::dynamic_lstm(&rt_lstm::<f32>(p), &inp, &wq, &rq, &mut out, scratch)?;
    Ok(())
}

fn opt(e: Option<&Option<TokenStream>>) -> TokenStream {
    match e.cloned().flatten() {
        Some(t) => quote!(Some(#t)),
        None => quote!(None),
    }
}

impl Kernel for RecurrentKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        if let Some(q) = &self.p.dynamic {
            return match q.weights {
                ElemType::Int8 => run_dynamic::<i8>(&self.p, q, inputs, outputs),
                ElemType::Uint8 => run_dynamic::<u8>(&self.p, q, inputs, outputs),
                other => Err(EvalError::Type(other)),
            };
        }
        crate::by_float_type!(self.p.elem, run(&self.p, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.p;
        let (s, b, i, h) = (
            lit::usize_lit(p.seq_len),
            lit::usize_lit(p.batch),
            lit::usize_lit(p.input_size),
            lit::usize_lit(p.hidden_size),
        );
        let dir = Ident::new(&format!("{:?}", p.direction), Span::call_site());
        let bf = p.batch_first;
        let clip = match p.clip {
            Some(c) => {
                let c = lit::float(c, p.elem);
                quote!(Some(#c))
            }
            None => quote!(None),
        };
        let per_dir = |v: &[Unary<f64>]| {
            let items = v.iter().map(|&a| super::elementwise::unary_tokens(a, p.elem, rt));
            quote!([#(#items),*])
        };
        let (a0, a1) = (per_dir(&p.activations[0]), per_dir(&p.activations[1]));
        let inp = |k: usize| opt(io.inputs.get(k));
        let out = |k: usize| opt(io.outputs.get(k));
        let req = |k: usize| io.inputs.get(k).cloned().flatten().unwrap_or_else(|| quote!(&[]));
        let (x, w, r) = (req(0), req(1), req(2));
        let (bias, lens, h0) = (inp(3), inp(4), inp(5));
        let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
        let common = quote! {
            seq_len: #s, batch: #b, input_size: #i, hidden_size: #h,
            direction: #rt::rnn::Direction::#dir, batch_first: #bf, clip: #clip,
        };
        match p.cell {
            Cell::Lstm if p.dynamic.is_some() => {
                let (c0, peep) = (inp(6), inp(7));
                let (y, yh, yc) = (out(0), out(1), out(2));
                let forget = p.input_forget;
                let reads = p.dynamic.as_ref().map_or([0; 6], |q| q.reads);
                let at = |k: usize| io.read(Some(reads[k])).cloned().unwrap_or_else(|| quote!(&[]));
                let (w, ws, wz, r, rs, rz) = (at(0), at(1), at(2), at(3), at(4), at(5));
                quote! {
                    #rt::qlstm::dynamic_lstm(
                        &#rt::rnn::Lstm { #common activations: [#a0, #a1], input_forget: #forget },
                        &#rt::rnn::LstmInputs {
                            x: #x, w: &[], r: &[], b: #bias, sequence_lens: #lens,
                            initial_h: #h0, initial_c: #c0, p: #peep,
                        },
                        &#rt::qlstm::QWeights { w: #w, scale: #ws, zero: #wz },
                        &#rt::qlstm::QWeights { w: #r, scale: #rs, zero: #rz },
                        &mut #rt::rnn::LstmOutputs { y: #y, y_h: #yh, y_c: #yc },
                        #scratch,
                    )?;
                }
            }
            Cell::Lstm => {
                let (c0, peep) = (inp(6), inp(7));
                let (y, yh, yc) = (out(0), out(1), out(2));
                let forget = p.input_forget;
                let (f, packed) = match p.elem {
                    ElemType::Float if p.packed.is_some() => {
                        let packed = io.read(p.packed).cloned().unwrap_or_else(|| quote!(&[]));
                        (quote!(slstm_packed), quote!(#packed,))
                    }
                    ElemType::Float => (quote!(slstm), quote!()),
                    _ => (quote!(lstm), quote!()),
                };
                quote! {
                    #rt::rnn::#f(
                        &#rt::rnn::Lstm { #common activations: [#a0, #a1], input_forget: #forget },
                        &#rt::rnn::LstmInputs {
                            x: #x, w: #w, r: #r, b: #bias, sequence_lens: #lens,
                            initial_h: #h0, initial_c: #c0, p: #peep,
                        },
                        #packed
                        &mut #rt::rnn::LstmOutputs { y: #y, y_h: #yh, y_c: #yc },
                        #scratch,
                    )?;
                }
            }
            Cell::Gru | Cell::Rnn => {
                let (y, yh) = (out(0), out(1));
                let inputs = quote! {
                    &#rt::rnn::RnnInputs {
                        x: #x, w: #w, r: #r, b: #bias, sequence_lens: #lens, initial_h: #h0,
                    }
                };
                let outputs = quote!(&mut #rt::rnn::RnnOutputs { y: #y, y_h: #yh });
                if p.cell == Cell::Gru {
                    let lbr = p.linear_before_reset;
                    quote! {
                        #rt::rnn::gru(
                            &#rt::rnn::Gru { #common activations: [#a0, #a1], linear_before_reset: #lbr },
                            #inputs, #outputs, #scratch,
                        )?;
                    }
                } else {
                    let first = |v: &[Unary<f64>]| {
                        super::elementwise::unary_tokens(
                            v.first().copied().unwrap_or(Unary::Tanh),
                            p.elem,
                            rt,
                        )
                    };
                    let (f0, f1) = (first(&p.activations[0]), first(&p.activations[1]));
                    quote! {
                        #rt::rnn::rnn(
                            &#rt::rnn::Rnn { #common activations: [#f0, #f1] },
                            #inputs, #outputs, #scratch,
                        )?;
                    }
                }
            }
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        self.p.scratch_len().map(|n| TensorType::new(self.p.elem, vec![n]))
    }

    /// A regrouped LSTM reads its packed copy of `W` and `R` only, a
    /// dynamically quantized one its 8-bit weights: the originals are
    /// neither stored nor bound.
    fn reads_input(&self, i: usize) -> bool {
        !((self.p.packed.is_some() || self.p.dynamic.is_some()) && (i == 1 || i == 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Analysis, Options, analyze};
    use crate::ops::HostData;

    fn run(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 10, opset_import: [\"\" : {opset}]>\n{graph}");
        let proto = crate::text::parse_model(&src, "t").unwrap_or_else(|e| panic!("{e}"));
        analyze(&proto, &Options::default()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn index(a: &Analysis, name: &str) -> usize {
        let values = a.model().graph.values();
        values.iter().position(|v| v.name == name).unwrap_or_else(|| panic!("no value {name}"))
    }

    fn ty(a: &Analysis, name: &str) -> String {
        a.inferred.types[index(a, name)].as_ref().map(ToString::to_string).unwrap_or_default()
    }

    fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> =
            a.inferred.unsupported.iter().map(|u| format!("unsupported: {}", u.reason)).collect();
        out.extend(a.inferred.errors.iter().map(|e| format!("error: {}", e.message)));
        out
    }

    #[test]
    fn lstm_shapes_for_both_layouts() {
        // seq 5, batch 2, input 4, hidden 3, two directions.
        let a = run(
            14,
            "g (float[5,2,4] x, float[2,12,4] w, float[2,12,3] r, float[2,4] x1, float[2,5,4] xb)
               => (float[5,2,2,3] y) {
               y, yh, yc = LSTM <direction: string = \"bidirectional\", hidden_size: int = 3> (x, w, r)
               y1, yh1, yc1 = LSTM <direction: string = \"bidirectional\", layout: int = 1> (xb, w, r)
               , only_h = LSTM <direction: string = \"bidirectional\"> (x, w, r)
             }",
        );
        assert!(problems(&a).is_empty(), "{:?}", problems(&a));
        assert_eq!(ty(&a, "y"), "float[5, 2, 2, 3]");
        assert_eq!(ty(&a, "yh"), "float[2, 2, 3]");
        assert_eq!(ty(&a, "yc"), "float[2, 2, 3]");
        assert_eq!(ty(&a, "y1"), "float[2, 5, 2, 3]");
        assert_eq!(ty(&a, "yh1"), "float[2, 2, 3]");
        assert_eq!(ty(&a, "only_h"), "float[2, 2, 3]");
    }

    #[test]
    fn gru_and_rnn_shapes_and_errors() {
        let a = run(
            14,
            "g (double[3,1,2] x, double[1,6,2] w, double[1,6,2] r, double[1,12] b, int32[1] l,
                double[1,2,2] rw, double[1,2,2] rr) => (double[3,1,1,2] y) {
               y, yh = GRU <linear_before_reset: int = 1> (x, w, r, b, l)
               ry, ryh = RNN <direction: string = \"reverse\"> (x, rw, rr)
             }",
        );
        assert!(problems(&a).is_empty(), "{:?}", problems(&a));
        assert_eq!(ty(&a, "yh"), "double[1, 1, 2]");
        assert_eq!(ty(&a, "ry"), "double[3, 1, 1, 2]");
        let a = run(
            14,
            "g (float[3,1,2] x, float[1,5,2] w, float[1,6,2] r, float[1,2,2] rw, float16[3,1,2] h,
                float16[1,2,2] hw) => (float[3,1,1,2] y) {
               y = GRU (x, w, r)
               a = RNN <hidden_size: int = 4> (x, rw, rw)
               b = RNN <activations: strings = [\"Tanh\", \"Relu\", \"Relu\"]> (x, rw, rw)
               c = RNN <activations: strings = [\"Swish\"]> (x, rw, rw)
               d = RNN <direction: string = \"sideways\"> (x, rw, rw)
               e = RNN (h, hw, hw)
             }",
        );
        let p = problems(&a);
        assert_eq!(p.len(), 6, "{p:?}");
        assert!(p.iter().any(|m| m.contains("do not fit X")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("hidden_size")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("needs 1 activations")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("'Swish' is not an RNN activation")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("'sideways'")), "{p:?}");
        assert!(p.iter().any(|m| m.contains("unsupported: RNN on float16")), "{p:?}");
    }

    #[test]
    fn activation_parameters_are_consumed_in_order() {
        let alphas = [0.5f32, 0.25];
        let betas = [0.75f32];
        let (mut a, mut b) = (alphas.iter(), betas.iter());
        let names = ["LeakyRelu", "tanh", "HardSigmoid", "Affine", "ScaledTanh"];
        let got: Vec<Unary<f64>> =
            names.iter().map(|n| activation(n, &mut a, &mut b).unwrap()).collect();
        assert_eq!(
            got,
            [
                Unary::LeakyRelu { alpha: 0.5 },
                Unary::Tanh,
                Unary::HardSigmoid { alpha: 0.25, beta: 0.75 },
                // The lists ran out: ONNX defaults.
                Unary::Affine { alpha: 1.0, beta: 0.0 },
                Unary::ScaledTanh { alpha: 1.0, beta: 1.0 },
            ]
        );
    }

    #[test]
    fn rnn_folds_on_constant_inputs() {
        // H_t = Relu(x_t * 0.5 + H_{t-1} * 1): x = [2, 3] gives H = 1, then 2.5.
        let a = run(
            14,
            "g () => (float[1,1,1] yh) {
               x = Constant <value: tensor = float[2,1,1] {2, 3}> ()
               w = Constant <value: tensor = float[1,1,1] {0.5}> ()
               r = Constant <value: tensor = float[1,1,1] {1}> ()
               y, yh = RNN <activations: strings = [\"Relu\"]> (x, w, r)
             }",
        );
        assert!(problems(&a).is_empty(), "{:?}", problems(&a));
        let t = a.inferred.constants[index(&a, "y")].as_ref().expect("folded");
        assert_eq!(HostTensor::from_tensor(t).unwrap().data, HostData::F32(vec![1.0, 2.5]));
        let t = a.inferred.constants[index(&a, "yh")].as_ref().expect("folded");
        assert_eq!(HostTensor::from_tensor(t).unwrap().data, HostData::F32(vec![2.5]));
    }
}
