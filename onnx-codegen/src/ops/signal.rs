//! Signal operators: DFT (opsets 17 and 20), STFT, HannWindow,
//! HammingWindow, BlackmanWindow and MelWeightMatrix.
//!
//! Sizes and axes arrive as tensors. When they are known at generation time
//! the output shape follows from them; otherwise the model's declared output
//! shape is the plan and the runtime kernel checks the values against it.

use super::host::HostElem;
use super::misc::{
    FnKernel, const_scalar, declared, float_input, hin, host_float, host_int, hout, scalar_expr,
};
use super::{
    EvalResult, HostTensor, Lowered, NodeCx, OpError, OpResult, OpRule, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::num::Float;
use onnx_codegen_runtime::signal::{self as rt_sig, Window};
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "DFT" => Some(&DftRule),
        "STFT" => Some(&StftRule),
        "HannWindow" => Some(&WindowRule(Window::Hann)),
        "HammingWindow" => Some(&WindowRule(Window::Hamming)),
        "BlackmanWindow" => Some(&WindowRule(Window::Blackman)),
        "MelWeightMatrix" => Some(&MelRule),
        _ => None,
    }
}

fn rt_err(cx: &NodeCx<'_>, what: &str) -> OpError {
    OpError::Invalid(format!("{}: {what}", cx.node.op.op_type))
}

/// The float output type `output_datatype` names (1 float, 11 double).
fn out_elem(cx: &NodeCx<'_>) -> OpResult<ElemType> {
    match cx.int_or("output_datatype", 1) {
        1 => Ok(ElemType::Float),
        11 => Ok(ElemType::Double),
        other => unsupported(format!(
            "{} with output_datatype {other} (the kernel writes float and double)",
            cx.node.op.op_type
        )),
    }
}

struct DftRule;

/// DFT's plan: inverse, onesided, the axis and length when known, and the
/// output dims.
struct DftPlan {
    elem: ElemType,
    x_dims: Vec<usize>,
    inverse: bool,
    onesided: bool,
    /// `None`: read from input 2 at run time (opset 20).
    axis: Option<i64>,
    /// `Some(None)`: no length; `None`: read from input 1 at run time.
    length: Option<Option<i64>>,
    out: Vec<usize>,
}

fn dft_plan(cx: &NodeCx<'_>) -> OpResult<DftPlan> {
    let x = float_input(cx, 0)?;
    let inverse = cx.int_or("inverse", 0) != 0;
    let onesided = cx.int_or("onesided", 0) != 0;
    let axis = if cx.version() < 20 {
        Some(cx.int_or("axis", 1))
    } else if cx.opt_input(2).is_none() {
        Some(-2)
    } else {
        const_scalar(cx, 2, "axis")?
    };
    let length = if cx.opt_input(1).is_none() {
        Some(None)
    } else {
        const_scalar(cx, 1, "dft_length")?.map(Some)
    };
    let out = match (axis, length) {
        (Some(a), Some(l)) => {
            let layout = rt_sig::dft_layout(&x.dims, a, l, inverse, onesided).map_err(|_| {
                rt_err(cx, &format!(
                    "axis {a} and length {l:?} do not fit an input of shape {:?} (the last dim must be 1 or 2, the axis one of the others)",
                    x.dims
                ))
            })?;
            let mut out = vec![0; x.dims.len()];
            layout.out_dims(&x.dims, &mut out).map_err(|_| rt_err(cx, "bad output rank"))?;
            out
        }
        _ => declared(cx, 0, "the axis or dft_length input")?.dims.clone(),
    };
    Ok(DftPlan { elem: x.elem, x_dims: x.dims.clone(), inverse, onesided, axis, length, out })
}

fn run_dft<T: Float + HostElem>(
    p: &DftPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let axis = match p.axis {
        Some(a) => a,
        None => host_int(inputs, 2)?,
    };
    let length = match p.length {
        Some(l) => l,
        None => Some(host_int(inputs, 1)?),
    };
    let x = hin::<T>(inputs, 0)?;
    let y = hout::<T>(outputs, 0)?;
    rt_sig::dft(&p.x_dims, axis, length, p.inverse, p.onesided, x, &p.out, y)?;
    Ok(())
}

impl OpRule for DftRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = dft_plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = std::rc::Rc::new(dft_plan(cx)?);
        let q = p.clone();
        let reads = vec![true, p.length.is_none(), p.axis.is_none()];
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(q.elem, run_dft(&q, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let axis = match p.axis {
                    Some(a) => quote!(#a),
                    None => scalar_expr(io, 2, false),
                };
                let length = match p.length {
                    Some(Some(l)) => quote!(Some(#l)),
                    Some(None) => quote!(None),
                    None => {
                        let e = scalar_expr(io, 1, false);
                        quote!(Some(#e))
                    }
                };
                let (xd, yd) = (lit::usizes(&p.x_dims), lit::usizes(&p.out));
                let (inv, one) = (p.inverse, p.onesided);
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::signal::dft(#xd, #axis, #length, #inv, #one, #x, #yd, #y)?;)
            }),
            reads,
        }
        .lowered()
    }
}

struct StftRule;

struct StftPlan {
    elem: ElemType,
    signal: Vec<usize>,
    onesided: bool,
    step: Option<i64>,
    /// `Some(None)`: absent; `None`: read at run time.
    length: Option<Option<i64>>,
    window: bool,
    out: Vec<usize>,
}

fn stft_plan(cx: &NodeCx<'_>) -> OpResult<StftPlan> {
    let x = float_input(cx, 0)?;
    let onesided = cx.int_or("onesided", 1) != 0;
    let step = const_scalar(cx, 1, "frame_step")?;
    let window = cx.opt_input(2);
    if let Some(w) = window
        && (w.elem != x.elem || w.dims.len() != 1)
    {
        return invalid(format!(
            "STFT's window must be a 1-D {} tensor, got {} {:?}",
            x.elem, w.elem, w.dims
        ));
    }
    let length = if cx.opt_input(3).is_none() {
        Some(None)
    } else {
        const_scalar(cx, 3, "frame_length")?.map(Some)
    };
    let wlen = window.map(|w| w.dims[0]);
    let out = match (step, length) {
        (Some(s), Some(l)) => rt_sig::stft_dims(&x.dims, s, wlen, l, onesided)
            .map_err(|_| {
                rt_err(cx, &format!(
                    "frame_step {s}, frame_length {l:?} and window length {wlen:?} do not fit a signal of shape {:?}",
                    x.dims
                ))
            })?
            .to_vec(),
        _ => declared(cx, 0, "the frame_step or frame_length input")?.dims.clone(),
    };
    Ok(StftPlan {
        elem: x.elem,
        signal: x.dims.clone(),
        onesided,
        step,
        length,
        window: window.is_some(),
        out,
    })
}

fn run_stft<T: Float + HostElem>(
    p: &StftPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let step = match p.step {
        Some(s) => s,
        None => host_int(inputs, 1)?,
    };
    let length = match p.length {
        Some(l) => l,
        None => Some(host_int(inputs, 3)?),
    };
    let window = if p.window { Some(hin::<T>(inputs, 2)?) } else { None };
    let x = hin::<T>(inputs, 0)?;
    let y = hout::<T>(outputs, 0)?;
    rt_sig::stft(&p.signal, step, window, length, p.onesided, x, &p.out, y)?;
    Ok(())
}

impl OpRule for StftRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = stft_plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = std::rc::Rc::new(stft_plan(cx)?);
        let q = p.clone();
        let reads = vec![true, p.step.is_none(), p.window, p.length.is_none()];
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(q.elem, run_stft(&q, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let step = match p.step {
                    Some(s) => quote!(#s),
                    None => scalar_expr(io, 1, false),
                };
                let length = match p.length {
                    Some(Some(l)) => quote!(Some(#l)),
                    Some(None) => quote!(None),
                    None => {
                        let e = scalar_expr(io, 3, false);
                        quote!(Some(#e))
                    }
                };
                let window = match io.inputs.get(2).cloned().flatten() {
                    Some(w) if p.window => quote!(Some(#w)),
                    _ => quote!(None),
                };
                let (sd, yd) = (lit::usizes(&p.signal), lit::usizes(&p.out));
                let one = p.onesided;
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::signal::stft(#sd, #step, #window, #length, #one, #x, #yd, #y)?;)
            }),
            reads,
        }
        .lowered()
    }
}

struct WindowRule(Window);

fn window_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, usize)> {
    let size = cx.input(0)?;
    if !matches!(size.elem, ElemType::Int32 | ElemType::Int64) || size.numel() != Some(1) {
        return invalid(format!(
            "{}'s size must be one int32 or int64 value, got {} {:?}",
            cx.node.op.op_type, size.elem, size.dims
        ));
    }
    let elem = out_elem(cx)?;
    let len = match const_scalar(cx, 0, "size")? {
        Some(n) => usize::try_from(n)
            .map_err(|_| rt_err(cx, &format!("the window size {n} is negative")))?,
        None => match declared(cx, 0, "the size input")?.dims.as_slice() {
            [n] => *n,
            d => {
                return invalid(format!(
                    "{}'s output must be 1-D, declared {d:?}",
                    cx.node.op.op_type
                ));
            }
        },
    };
    Ok((elem, len))
}

fn run_window<T: Float + HostElem>(
    kind: Window,
    periodic: bool,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let n = host_int(inputs, 0)?;
    rt_sig::window(kind, periodic, n, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for WindowRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (elem, len) = window_plan(cx)?;
        Ok(vec![TensorType::new(elem, vec![len])])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (elem, _) = window_plan(cx)?;
        let periodic = cx.int_or("periodic", 1) != 0;
        let kind = self.0;
        FnKernel {
            eval: Box::new(move |i, o| {
                crate::by_float_type!(elem, run_window(kind, periodic, i, o))
            }),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let k = match kind {
                    Window::Hann => quote!(Hann),
                    Window::Hamming => quote!(Hamming),
                    Window::Blackman => quote!(Blackman),
                };
                let n = scalar_expr(io, 0, false);
                let y = &io.outputs[0];
                quote!(#rt::signal::window(#rt::signal::Window::#k, #periodic, #n, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

struct MelRule;

fn mel_plan(cx: &NodeCx<'_>) -> OpResult<(ElemType, Vec<usize>)> {
    for i in 0..3 {
        let t = cx.input(i)?;
        if !matches!(t.elem, ElemType::Int32 | ElemType::Int64) || t.numel() != Some(1) {
            return invalid(format!("MelWeightMatrix's input {i} must be one integer"));
        }
    }
    for i in 3..5 {
        let t = cx.input(i)?;
        if !matches!(t.elem, ElemType::Float | ElemType::Double) || t.numel() != Some(1) {
            return unsupported(format!(
                "MelWeightMatrix's input {i} as {} (the kernel reads float and double)",
                t.elem
            ));
        }
    }
    let elem = out_elem(cx)?;
    let dims = match (const_scalar(cx, 0, "num_mel_bins")?, const_scalar(cx, 1, "dft_length")?) {
        (Some(m), Some(d)) if m > 0 && d > 0 => vec![(d / 2 + 1) as usize, m as usize],
        (Some(_), Some(_)) => {
            return invalid("MelWeightMatrix's num_mel_bins and dft_length must be positive");
        }
        _ => declared(cx, 0, "the num_mel_bins and dft_length inputs")?.dims.clone(),
    };
    if dims.len() != 2 {
        return invalid(format!("MelWeightMatrix's output is 2-D, declared {dims:?}"));
    }
    Ok((elem, dims))
}

fn run_mel<T: Float + HostElem>(
    dims: &[usize],
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (m, d, r) = (host_int(inputs, 0)?, host_int(inputs, 1)?, host_int(inputs, 2)?);
    let (lo, hi) = (host_float(inputs, 3)?, host_float(inputs, 4)?);
    rt_sig::mel_weight_matrix(m, d, r, lo, hi, dims, hout::<T>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for MelRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (elem, dims) = mel_plan(cx)?;
        Ok(vec![TensorType::new(elem, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (elem, dims) = mel_plan(cx)?;
        let d2 = dims.clone();
        FnKernel {
            eval: Box::new(move |i, o| crate::by_float_type!(elem, run_mel(&d2, i, o))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let ints: Vec<_> = (0..3).map(|i| scalar_expr(io, i, false)).collect();
                let floats: Vec<_> = (3..5).map(|i| scalar_expr(io, i, true)).collect();
                let d = lit::usizes(&dims);
                let y = &io.outputs[0];
                quote!(#rt::signal::mel_weight_matrix(#(#ints,)* #(#floats,)* #d, #y)?;)
            }),
            reads: vec![true; 5],
        }
        .lowered()
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn dft_shapes() {
        let a = run(
            19,
            "g (float[1,10,10,1] x) => (float[1,10,10,2] y) { y = DFT <axis: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[1, 10, 10, 2]")]);
        let a = run(
            19,
            "g (float[1,10,10,1] x) => (float[1,6,10,2] y) { y = DFT <axis: int = 1, onesided: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[1, 6, 10, 2]")]);
        let a = run(
            19,
            "g (float[1,6,10,2] x) => (float[1,10,10,1] y) { y = DFT <axis: int = 1, onesided: int = 1, inverse: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[1, 10, 10, 1]")]);
        let a = run(19, "g (float[1,10,10,3] x) => (float y) { y = DFT <axis: int = 1> (x) }");
        assert!(!errors(&a).is_empty());
        let a = run(
            20,
            "g (float[1,10,10,1] x, int64 axis) => (float[A,B,C,D] y) { y = DFT (x, , axis) }",
        );
        assert_eq!(unsupported(&a).len(), 1, "{:?}", errors(&a));
    }

    #[test]
    fn dft_folds() {
        // [1, 2, 3, 4]: X = [10, -2+2i, -2, -2-2i].
        let a = run(
            20,
            "g () => (float[4,2] y) <float[4,1] x = {1, 2, 3, 4}, int64 ax = {0}> { y = DFT (x, , ax) }",
        );
        let v = value(&a, 0);
        let want = [10.0, 0.0, -2.0, 2.0, -2.0, 0.0, -2.0, -2.0];
        assert!(v.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-6), "{v:?}");
    }

    #[test]
    fn windows_fold() {
        let a = run(17, "g () => (float[4] y) <int64 n = {4}> { y = HannWindow (n) }");
        let v = value(&a, 0);
        assert!(
            (v[0]).abs() < 1e-7 && (v[1] - 0.5).abs() < 1e-7 && (v[2] - 1.0).abs() < 1e-7,
            "{v:?}"
        );
        let a = run(17, "g (int64 n) => (float[N] y) { y = HammingWindow (n) }");
        assert_eq!(unsupported(&a).len(), 1);
    }
}
