//! RMSNormalization, Trilu, Dropout, CumSum, OneHot, EyeLike and
//! TopK.
//!
//! Scalar inputs that do not change the output shape (Trilu's `k`, CumSum's
//! `axis`) are taken at generation time when known and read at run time
//! otherwise; those that do (OneHot's `depth`, TopK's `K`), when not known
//! at generation time, are taken from the declared output shapes and
//! checked at run time. EyeLike depends only on its input's shape, so it is
//! always a constant.
//!
//! One file per operator, each with its rule, kernel and emission:
//! `rms_norm.rs`, `trilu.rs`, `dropout.rs`, `cumsum.rs`, `one_hot.rs`,
//! `eye_like.rs`, `top_k.rs`. This module registers them and holds what
//! they share: host buffers and the scalar inputs read at either time.

use super::host::{Data, HostData};
use super::{EvalError, HostTensor, Io, NodeCx, OpError, OpResult, OpRule, invalid, is_num};
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

mod cumsum;
mod dropout;
mod eye_like;
mod one_hot;
mod rms_norm;
mod top_k;
mod trilu;

use cumsum::CumSumRule;
use dropout::DropoutRule;
use eye_like::EyeLikeRule;
use one_hot::OneHotRule;
use rms_norm::RmsNormRule;
use top_k::TopKRule;
use trilu::TriluRule;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "RMSNormalization" => Some(&RmsNormRule),
        "Trilu" => Some(&TriluRule),
        "Dropout" => Some(&DropoutRule),
        "CumSum" => Some(&CumSumRule),
        "OneHot" => Some(&OneHotRule),
        "EyeLike" => Some(&EyeLikeRule),
        "TopK" => Some(&TopKRule),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Shared helpers

fn product(dims: &[usize]) -> OpResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| OpError::Invalid(format!("the shape {dims:?} is too large")))
}

fn has_output(cx: &NodeCx<'_>, k: usize) -> bool {
    cx.node.outputs.get(k).is_some_and(Option::is_some)
}

/// Keeps one type per output the node declares.
fn declared(cx: &NodeCx<'_>, mut types: Vec<TensorType>) -> Vec<TensorType> {
    types.truncate(cx.node.outputs.len().max(1));
    types
}

fn wrong_buffer() -> EvalError {
    EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch)
}

/// Every element type with a host form (the movement kernels' types).
fn is_data(e: ElemType) -> bool {
    is_num(e) || matches!(e, ElemType::Bool | ElemType::Float16 | ElemType::Bfloat16)
}

fn data_in<'a, T: Data>(inputs: &[Option<&'a HostTensor>], i: usize) -> Result<&'a [T], EvalError> {
    inputs.get(i).copied().flatten().and_then(|t| T::of(&t.data)).ok_or(wrong_buffer())
}

fn data_out<T: Data>(outputs: &mut [HostTensor], k: usize) -> Result<&mut [T], EvalError> {
    outputs.get_mut(k).and_then(|t| T::of_mut(&mut t.data)).ok_or(wrong_buffer())
}

/// The elements of a numeric host tensor as `i64` (floats truncated toward
/// zero, as a cast to `int64` does).
fn host_i64s(t: &HostTensor) -> Option<Vec<i64>> {
    Some(match &t.data {
        HostData::F32(v) => v.iter().map(|&x| x as i64).collect(),
        HostData::F64(v) => v.iter().map(|&x| x as i64).collect(),
        HostData::I8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::I64(v) => v.clone(),
        HostData::U8(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U16(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U32(v) => v.iter().map(|&x| i64::from(x)).collect(),
        HostData::U64(v) => v.iter().map(|&x| x as i64).collect(),
        _ => return None,
    })
}

/// The one value of a scalar (or one-element) input known at generation
/// time, as `i64`; `None` when the input's value is not known.
fn const_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Option<i64>> {
    let Some(t) = cx.constant(i) else { return Ok(None) };
    let h = HostTensor::from_tensor(t)
        .ok_or_else(|| OpError::Unsupported(format!("{what} of type {}", t.elem)))?;
    match host_i64s(&h).as_deref() {
        Some([v]) => Ok(Some(*v)),
        Some(v) => invalid(format!("{what} must hold one element, it holds {}", v.len())),
        None => invalid(format!("{what} must be numeric, it is {}", t.elem)),
    }
}

/// A scalar (or one-element) integer input read at run time.
fn runtime_scalar(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<()> {
    let t = cx.input(i)?;
    if !matches!(t.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!("{what} must be int32 or int64, it is {}", t.elem));
    }
    if t.numel() != Some(1) {
        return invalid(format!("{what} must hold one element, it is {t}"));
    }
    Ok(())
}

/// A scalar either taken at generation time or read from input `input`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Known(i64),
    Runtime(usize),
}

impl Scalar {
    fn tokens(self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        match self {
            Scalar::Known(v) => {
                let l = proc_macro2::Literal::i64_suffixed(v.unsigned_abs() as i64);
                if v == i64::MIN {
                    quote!(i64::MIN)
                } else if v < 0 {
                    quote!(-#l)
                } else {
                    quote!(#l)
                }
            }
            Scalar::Runtime(i) => {
                let b = io.inputs.get(i).cloned().flatten();
                quote!(#rt::extra::scalar_i64(#b)?)
            }
        }
    }

    fn host(self, inputs: &[Option<&HostTensor>]) -> Result<i64, EvalError> {
        match self {
            Scalar::Known(v) => Ok(v),
            Scalar::Runtime(i) => {
                let t = inputs.get(i).copied().flatten().ok_or(wrong_buffer())?;
                match host_i64s(t).as_deref() {
                    Some([v]) => Ok(*v),
                    _ => Err(wrong_buffer()),
                }
            }
        }
    }
}

/// Sets every element of `d` to one (Dropout's mask, EyeLike's diagonal).
fn set_ones(d: &mut HostData) {
    match d {
        HostData::F32(v) => v.fill(1.0),
        HostData::F64(v) => v.fill(1.0),
        HostData::I8(v) => v.fill(1),
        HostData::I16(v) => v.fill(1),
        HostData::I32(v) => v.fill(1),
        HostData::I64(v) => v.fill(1),
        HostData::U8(v) => v.fill(1),
        HostData::U16(v) => v.fill(1),
        HostData::U32(v) => v.fill(1),
        HostData::U64(v) => v.fill(1),
        HostData::Bool(v) => v.fill(true),
        HostData::F16(v) => v.fill(f16::ONE),
        HostData::Bf16(v) => v.fill(bf16::ONE),
    }
}
