//! A quantized element-wise function as a table ([`Lowering::Lookup`]):
//! `y = table[x]`, the table holding the function's quantized result for
//! each of the 256 values of `x`, computed at generation time by the
//! operator's own rule (so it is exactly what the dequantize, compute,
//! quantize steps give, value by value).

use super::{host_in, host_out, in_tokens, out_tokens};
use crate::ir::{ElemType, Lowering, TensorType};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, invalid,
};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule of a node lowered to a [`Lowering::Lookup`], whatever its operator.
pub struct LookupRule;

struct Plan {
    elem: ElemType,
    table: usize,
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Plan> {
    let Some(Lowering::Lookup { table }) = cx.lowering() else {
        return invalid("a table lookup without its table");
    };
    let x = cx.input(0)?;
    let (at, t) = cx.operand(*table)?;
    let int8 = matches!(x.elem, ElemType::Int8 | ElemType::Uint8);
    if !int8 || t.elem != x.elem || t.numel() != Some(256) {
        return invalid(format!("a table lookup of {x} in {t}: both int8 or uint8, 256 entries"));
    }
    Ok(Plan { elem: x.elem, table: at })
}

impl OpRule for LookupRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = plan(cx)?;
        Ok(vec![TensorType::new(p.elem, cx.input(0)?.dims.clone())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(LookupKernel(plan(cx)?))))
    }

    fn shape_rule(&self, _node: &crate::ir::Node) -> crate::ops::ShapeRule {
        crate::ops::ShapeRule::SameAsInput0
    }
}

struct LookupKernel(Plan);

fn run<T: crate::ops::host::HostElem + onnx_codegen_runtime::int8::Q8>(
    p: &Plan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let (x, table) = (host_in::<T>(inputs, 0)?, host_in::<T>(inputs, p.table)?);
    let table: &[T; 256] = table
        .try_into()
        .map_err(|_| EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch))?;
    onnx_codegen_runtime::int8::qlookup(x, table, host_out::<T>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for LookupKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.0.elem {
            ElemType::Int8 => run::<i8>(&self.0, inputs, outputs),
            ElemType::Uint8 => run::<u8>(&self.0, inputs, outputs),
            other => Err(EvalError::Type(other)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (x, table, y) = (in_tokens(io, 0), in_tokens(io, self.0.table), out_tokens(io, 0));
        quote! {
            #rt::int8::qlookup(
                #x,
                #table.try_into().map_err(|_| #rt::Error::ShapeMismatch)?,
                #y,
            )?;
        }
    }
}
