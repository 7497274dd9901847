//! `Dropout`: the identity (and an all-true mask) in inference; in
//! training mode, elements dropped at random with the given ratio and the
//! rest scaled, the mode known at generation time or chosen at run time.

use super::{data_in, data_out, declared, has_output, set_ones, wrong_buffer};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::{Data, HostData, HostElem};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
    unsupported,
};
use onnx_codegen_runtime::extra as rt_extra;
use onnx_codegen_runtime::num::Float;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct DropoutRule;

/// Whether a Dropout node drops elements.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DropMode {
    /// Inference (or training with a ratio of 0): `y = x`, the mask all true.
    Keep,
    /// Training mode, known at generation time.
    Train,
    /// `training_mode` is data: both paths are generated and chosen at run time.
    Runtime,
}

/// Dropout's ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
enum DropRatio {
    Known(f64),
    /// Read from input 1 at run time.
    Input,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct DropoutPlan {
    /// The mask's element type.
    mask: ElemType,
    mode: DropMode,
    ratio: DropRatio,
    /// The random generator's seed (the `seed` attribute, or the runtime's default).
    seed: u64,
}

/// The one value of a float scalar on the host, as `f64`.
fn host_ratio(h: &HostTensor) -> Option<f64> {
    match &h.data {
        HostData::F32(v) if v.len() == 1 => Some(f64::from(v[0])),
        HostData::F64(v) if v.len() == 1 => Some(v[0]),
        HostData::F16(v) if v.len() == 1 => Some(v[0].to_f64()),
        HostData::Bf16(v) if v.len() == 1 => Some(v[0].to_f64()),
        _ => None,
    }
}

/// How the node runs: inference, or training with the seeded Mersenne
/// Twister of `runtime-support::misc`, which reproduces numpy's legacy
/// stream and so the reference's mask for the same seed.
fn dropout_plan(cx: &NodeCx<'_>) -> OpResult<DropoutPlan> {
    let x = cx.input(0)?;
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return unsupported(format!("Dropout on {} tensors", x.elem));
    }
    let v = cx.version();
    if v < 7 && cx.int_or("is_test", 0) == 0 {
        return unsupported(
            "Dropout in training mode (is_test = 0) drops elements at random; only inference is supported",
        );
    }
    let mask = if v < 10 { x.elem } else { ElemType::Bool };
    let seed = match cx.node.attr("seed") {
        Some(crate::ir::AttrValue::Int(s)) => *s as u64,
        _ => onnx_codegen_runtime::misc::DEFAULT_SEED,
    };
    let mut plan = DropoutPlan { mask, mode: DropMode::Keep, ratio: DropRatio::Known(0.5), seed };
    if v < 12 || cx.opt_input(2).is_none() {
        return Ok(plan);
    }
    plan.mode = match cx.constant(2) {
        None => DropMode::Runtime,
        Some(t) if t.to_i64s().is_some_and(|v| v.iter().any(|&b| b != 0)) => DropMode::Train,
        Some(_) => return Ok(plan),
    };
    if let Some(r) = cx.opt_input(1) {
        plan.ratio = match cx.constant(1) {
            Some(c) => match HostTensor::from_tensor(c).as_ref().and_then(host_ratio) {
                Some(v) => DropRatio::Known(v),
                None => return invalid(format!("Dropout's ratio must be one float, got {r}")),
            },
            None if crate::ops::is_float_num(r.elem) && r.numel() == Some(1) => DropRatio::Input,
            None => return invalid(format!("Dropout's ratio must be one float, got {r}")),
        };
    }
    match plan.ratio {
        DropRatio::Known(0.0) if plan.mode == DropMode::Train => plan.mode = DropMode::Keep,
        DropRatio::Known(r) if !(0.0..1.0).contains(&r) => {
            return invalid(format!("Dropout's ratio {r} is outside [0, 1)"));
        }
        _ => {}
    }
    Ok(plan)
}

impl OpRule for DropoutRule {
    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::SameAsInput0
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = dropout_plan(cx)?;
        let x = cx.input(0)?;
        Ok(declared(cx, vec![x.clone(), TensorType::new(plan.mask, x.dims.clone())]))
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let plan = dropout_plan(cx)?;
        if plan.mode == DropMode::Keep && !has_output(cx, 1) {
            return Ok(Lowered::Alias);
        }
        Ok(Lowered::Kernel(Box::new(DropoutKernel { elem: cx.input(0)?.elem, plan })))
    }
}

struct DropoutKernel {
    elem: ElemType,
    plan: DropoutPlan,
}

fn run_dropout<T: Data>(inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
    let x = data_in::<T>(inputs, 0)?;
    rt_extra::copy(x, data_out::<T>(outputs, 0)?)?;
    if let Some(m) = outputs.get_mut(1) {
        set_ones(&mut m.data);
    }
    Ok(())
}

fn run_dropout_train<T: Float + HostElem>(
    seed: u64,
    ratio: f64,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = inputs.first().copied().flatten().and_then(HostTensor::get::<T>);
    let x = x.ok_or_else(wrong_buffer)?;
    let (y, mask) = match outputs {
        [y] => (y, None),
        [y, m, ..] => (y, Some(m)),
        [] => return Err(wrong_buffer()),
    };
    let y = y.get_mut::<T>().ok_or_else(wrong_buffer)?;
    let mut none: [bool; 0] = [];
    let mask = match mask.map(|m| &mut m.data) {
        None => &mut none[..],
        Some(HostData::Bool(v)) => &mut v[..],
        Some(_) => return Err(EvalError::Type(ElemType::Bool)),
    };
    onnx_codegen_runtime::misc::dropout_train(seed, ratio, x, y, mask)?;
    Ok(())
}

impl Kernel for DropoutKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let training = match self.plan.mode {
            DropMode::Keep => false,
            DropMode::Train => true,
            DropMode::Runtime => match inputs.get(2).copied().flatten().map(|t| &t.data) {
                Some(HostData::Bool(v)) if v.len() == 1 => v[0],
                _ => return Err(wrong_buffer()),
            },
        };
        if !training {
            return by_data_type!(self.elem, run_dropout(inputs, outputs));
        }
        let ratio = match self.plan.ratio {
            DropRatio::Known(r) => r,
            DropRatio::Input => {
                inputs.get(1).copied().flatten().and_then(host_ratio).ok_or_else(wrong_buffer)?
            }
        };
        let seed = self.plan.seed;
        crate::by_float_type!(self.elem, run_dropout_train(seed, ratio, inputs, outputs))
    }

    fn reads_input(&self, i: usize) -> bool {
        match i {
            0 => true,
            1 => self.plan.mode != DropMode::Keep && self.plan.ratio == DropRatio::Input,
            2 => self.plan.mode == DropMode::Runtime,
            _ => false,
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        let one = match self.plan.mask {
            ElemType::Bool => quote!(#rt::num::Flag::from_bool(true)),
            ElemType::Float16 => quote!(#rt::f16::ONE),
            ElemType::Bfloat16 => quote!(#rt::bf16::ONE),
            other => lit::float(1.0, other),
        };
        let mask = io.outputs.get(1).cloned().flatten();
        let fill = mask.as_ref().map(|m| quote!(#rt::extra::fill(#m, #one);));
        let keep = quote! {
            #rt::extra::copy(#x, #y)?;
            #fill
        };
        let ratio = match self.plan.ratio {
            DropRatio::Known(r) => lit::f64_lit(r),
            DropRatio::Input => {
                let r = io.inputs.get(1).cloned().flatten();
                quote!(#rt::num::Float::to_f64(#rt::check::scalar(#r)?))
            }
        };
        let seed = proc_macro2::Literal::u64_suffixed(self.plan.seed);
        let train = match &mask {
            Some(m) => quote!(#rt::misc::dropout_train(#seed, #ratio, #x, #y, #m)?;),
            None => quote!(#rt::misc::dropout_train::<_, u8>(#seed, #ratio, #x, #y, &mut [])?;),
        };
        match self.plan.mode {
            DropMode::Keep => keep,
            DropMode::Train => train,
            DropMode::Runtime => {
                let t = io.inputs.get(2).cloned().flatten();
                quote! {
                    if #rt::num::Flag::get(#rt::check::scalar(#t)?) {
                        #train
                    } else {
                        #keep
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn dropout() {
        let a = run(13, "g (float[2] x) => (float[2] y, bool[2] m) { y, m = Dropout (x) }");
        assert_eq!(types(&a), [ty("float[2]"), ty("bool[2]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // Before opset 10 the mask has the input's type.
        let a = run(7, "g (double[2] x) => (double[2] y, double[2] m) { y, m = Dropout (x) }");
        assert_eq!(types(&a), [ty("double[2]"), ty("double[2]")]);
        // Folded: output is the input, mask all kept.
        let a = run(
            12,
            "g () => (float[2] y, bool[2] m) <float[2] x = {1.5, -2}> { y, m = Dropout (x) }",
        );
        assert_eq!(value(&a, 0), [1.5, -2.0]);
        assert_eq!(value(&a, 1), [1.0, 1.0]);
        // Training mode with ratio 0 keeps everything.
        let a = run(
            13,
            "g (float[2] x) => (float[2] y) <float r = {0}, bool t = {1}> { y = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // A training mode or ratio known only at run time: both paths are generated.
        let a = run(
            13,
            "g (float[2] x, bool t) => (float[2] y) <float r = {0.5}> { y = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            13,
            "g (float[2] x, float r, bool t) => (float[2] y, bool[2] m) { y, m = Dropout (x, r, t) }",
        );
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        // Training mode (default ratio 0.5) draws from numpy's seeded stream:
        // each kept value is doubled, each dropped one is 0, as the mask says.
        let a = run(
            13,
            "g () => (float[16] y, bool[16] m) <float[16] x = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, bool t = {1}> {
                y, m = Dropout <seed: int = 7> (x, , t)
            }",
        );
        let (y, m) = (value(&a, 0), value(&a, 1));
        assert!(y.iter().zip(&m).all(|(&v, &k)| v == 6.0 * k), "{y:?} {m:?}");
        // The mask `onnx.reference`'s Dropout gives for seed 7 (numpy's stream).
        let want = [0., 1., 0., 1., 1., 1., 1., 0., 0., 0., 1., 1., 0., 0., 0., 1.];
        assert_eq!(m, want);
        let a = run(
            13,
            "g (float[2] x) => (float[2] y) <float r = {1}, bool t = {1}> { y = Dropout (x, r, t) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("outside [0, 1)")), "{:?}", errors(&a));
        let a = run(6, "g (float[2] x) => (float[2] y) { y = Dropout (x) }");
        assert!(unsupported(&a)[0].contains("is_test"), "{:?}", unsupported(&a));
        let a = run(6, "g (float[2] x) => (float[2] y) { y = Dropout <is_test: int = 1> (x) }");
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }
}
