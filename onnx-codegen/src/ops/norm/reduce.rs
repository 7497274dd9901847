//! The reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin,
//! ReduceProd, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp,
//! ReduceSumSquare, their axes from an attribute or an input),
//! MeanVarianceNormalization (run by the reduction kernel) and ArgMax /
//! ArgMin.

use super::{axis_shape_tokens, bools, elem_of, float_input, host_in, host_out, op_name, product};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::{HostData, HostElem};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, axis,
    invalid, unsupported,
};
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::reduce::{self as rt_reduce, Reduce, ReduceOp};
use proc_macro2::TokenStream;
use quote::quote;

// ---------------------------------------------------------------------------
// Reductions and MeanVarianceNormalization

/// One flag per axis of a rank-`rank` tensor: the axes in `axes` (each in
/// `[-rank, rank)`, none twice).
fn axis_mask(cx: &NodeCx<'_>, axes: &[i64], rank: usize) -> OpResult<Vec<bool>> {
    let mut mask = vec![false; rank];
    for &a in axes {
        let i = axis(a, rank, &format!("{} axis", op_name(cx)))?;
        if mask[i] {
            return invalid(format!("{} names axis {a} twice", op_name(cx)));
        }
        mask[i] = true;
    }
    Ok(mask)
}

pub(super) struct MvnRule;

fn mvn_mask(cx: &NodeCx<'_>) -> OpResult<Vec<bool>> {
    let x = float_input(cx, 0)?;
    let axes = cx.ints("axes").unwrap_or_else(|| vec![0, 2, 3]);
    axis_mask(cx, &axes, x.rank())
}

impl OpRule for MvnRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        mvn_mask(cx)?;
        Ok(vec![cx.input(0)?.clone()])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ReduceKernel {
            what: ReduceWhat::Mvn,
            elem: elem_of(outputs, ElemType::Float),
            shape: cx.input(0)?.dims.clone(),
            axes: mvn_mask(cx)?,
        })))
    }
}

pub(super) struct ReduceRule;

fn reduce_op(name: &str) -> ReduceOp {
    match name {
        "ReduceMean" => ReduceOp::Mean,
        "ReduceMax" => ReduceOp::Max,
        "ReduceMin" => ReduceOp::Min,
        "ReduceProd" => ReduceOp::Prod,
        "ReduceL1" => ReduceOp::L1,
        "ReduceL2" => ReduceOp::L2,
        "ReduceLogSum" => ReduceOp::LogSum,
        "ReduceLogSumExp" => ReduceOp::LogSumExp,
        "ReduceSumSquare" => ReduceOp::SumSquare,
        _ => ReduceOp::Sum,
    }
}

/// A reduction node: which axes it folds, and its output dims.
struct ReducePlan {
    mask: Mask,
    out: Vec<usize>,
}

enum Mask {
    /// No axes with `noop_with_empty_axes`: the output is the input.
    Noop,
    /// The axes, known at generation time.
    Known(Vec<bool>),
    /// The axes are data read at run time; the output shape is the declared
    /// one, and the generated code checks the axes against it.
    Runtime,
}

fn reduce_plan(cx: &NodeCx<'_>) -> OpResult<ReducePlan> {
    let x = cx.input(0)?;
    let op = reduce_op(op_name(cx));
    let float_only = matches!(op, ReduceOp::L2 | ReduceOp::LogSum | ReduceOp::LogSumExp);
    match x.elem {
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => {}
        ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64
            if !float_only => {}
        ElemType::Bool if matches!(op, ReduceOp::Max | ReduceOp::Min) => {}
        other => {
            return unsupported(format!(
                "{} on {other} tensors (the runtime kernel has no such reduction)",
                op_name(cx)
            ));
        }
    }
    // Axes moved from an attribute to an input: ReduceSum at 13, the others at 18.
    let input_from = if op == ReduceOp::Sum { 13 } else { 18 };
    let axes = if cx.version() < input_from {
        cx.ints("axes").unwrap_or_default()
    } else {
        match cx.opt_input(1) {
            None => Vec::new(),
            // An empty axes tensor needs no value.
            Some(t) if t.numel() == Some(0) => Vec::new(),
            Some(_) if cx.constant(1).is_none() => {
                let Some(out) = cx.expected_dims(0) else {
                    return unsupported(
                        "axes (input 1) are known only at run time and the output's shape is not declared",
                    );
                };
                return Ok(ReducePlan { mask: Mask::Runtime, out: out.to_vec() });
            }
            Some(_) => cx.const_ints(1, "axes")?,
        }
    };
    let rank = x.rank();
    let mask = if axes.is_empty() {
        if cx.int_or("noop_with_empty_axes", 0) != 0 {
            return Ok(ReducePlan { mask: Mask::Noop, out: x.dims.clone() });
        }
        vec![true; rank]
    } else {
        axis_mask(cx, &axes, rank)?
    };
    let keep = cx.int_or("keepdims", 1) != 0;
    let out = x
        .dims
        .iter()
        .zip(&mask)
        .filter_map(|(&d, &r)| match (r, keep) {
            (false, _) => Some(d),
            (true, true) => Some(1),
            (true, false) => None,
        })
        .collect();
    Ok(ReducePlan { mask: Mask::Known(mask), out })
}

impl OpRule for ReduceRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let plan = reduce_plan(cx)?;
        Ok(vec![cx.input(0)?.with_dims(plan.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let x = cx.input(0)?;
        let plan = reduce_plan(cx)?;
        let axes = match plan.mask {
            Mask::Noop => return Ok(Lowered::Alias),
            Mask::Known(axes) => axes,
            Mask::Runtime => {
                return Ok(Lowered::Kernel(Box::new(RuntimeReduceKernel {
                    op: reduce_op(op_name(cx)),
                    elem: elem_of(outputs, x.elem),
                    shape: x.dims.clone(),
                    out: plan.out,
                    keepdims: cx.int_or("keepdims", 1) != 0,
                    noop: cx.int_or("noop_with_empty_axes", 0) != 0,
                })));
            }
        };
        Ok(Lowered::Kernel(Box::new(ReduceKernel {
            what: ReduceWhat::Op(reduce_op(op_name(cx))),
            elem: elem_of(outputs, x.elem),
            shape: x.dims.clone(),
            axes,
        })))
    }
}

/// A reduction whose axes are data read at run time: the generated code
/// builds the axis mask, checks it against the planned output shape, and
/// runs the same kernels as [`ReduceKernel`].
struct RuntimeReduceKernel {
    op: ReduceOp,
    elem: ElemType,
    shape: Vec<usize>,
    out: Vec<usize>,
    keepdims: bool,
    noop: bool,
}

impl Kernel for RuntimeReduceKernel {
    /// Never folded: its axes are not constants.
    fn eval(&self, _inputs: &[Option<&HostTensor>], _outputs: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(self.elem))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let rank = lit::usize_lit(self.shape.len());
        let shape = lit::usizes(&self.shape);
        let out = lit::usizes(&self.out);
        let (keep, noop) = (self.keepdims, self.noop);
        let (x, axes, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        let p = quote!(&#rt::reduce::Reduce { shape: #shape, axes: &mask });
        let call = match self.elem {
            ElemType::Bool => {
                let max = self.op == ReduceOp::Max;
                quote!(#rt::reduce::reduce_flags(#max, #p, x, y)?;)
            }
            ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => {
                let op = reduce_op_tokens(self.op, rt);
                quote!(#rt::reduce::reduce_float(#op, #p, x, y)?;)
            }
            _ => {
                let op = reduce_op_tokens(self.op, rt);
                quote!(#rt::reduce::reduce(#op, #p, x, y)?;)
            }
        };
        quote! {
            let (x, y) = (#x, #y);
            let mut mask = [false; #rank];
            if #rt::reduce::runtime_axes(#axes, #shape, #keep, #noop, #out, &mut mask)? {
                y.copy_from_slice(x);
            } else {
                #call
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ReduceWhat {
    Op(ReduceOp),
    /// MeanVarianceNormalization over the axes.
    Mvn,
}

struct ReduceKernel {
    what: ReduceWhat,
    elem: ElemType,
    shape: Vec<usize>,
    axes: Vec<bool>,
}

fn run_reduce_num<T: Num + HostElem>(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let ReduceWhat::Op(op) = k.what else { return Err(EvalError::Type(k.elem)) };
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    rt_reduce::reduce(op, &p, host_in::<T>(inputs, 0)?, host_out::<T>(outputs, 0)?)?;
    Ok(())
}

fn run_reduce_float<T: Float + HostElem>(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    let (x, y) = (host_in::<T>(inputs, 0)?, host_out::<T>(outputs, 0)?);
    match k.what {
        ReduceWhat::Op(op) => rt_reduce::reduce_float(op, &p, x, y)?,
        ReduceWhat::Mvn => rt_reduce::mean_variance_norm(&p, x, y)?,
    }
    Ok(())
}

fn run_reduce_bool(
    k: &ReduceKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = match inputs.first().copied().flatten().map(|t| &t.data) {
        Some(HostData::Bool(v)) => v.as_slice(),
        _ => return Err(EvalError::Type(ElemType::Bool)),
    };
    let y = match outputs.first_mut().map(|t| &mut t.data) {
        Some(HostData::Bool(v)) => v.as_mut_slice(),
        _ => return Err(EvalError::Type(ElemType::Bool)),
    };
    let p = Reduce { shape: &k.shape, axes: &k.axes };
    rt_reduce::reduce_flags(k.what == ReduceWhat::Op(ReduceOp::Max), &p, x, y)?;
    Ok(())
}

fn reduce_op_tokens(op: ReduceOp, rt: &TokenStream) -> TokenStream {
    let v = match op {
        ReduceOp::Sum => quote!(Sum),
        ReduceOp::Mean => quote!(Mean),
        ReduceOp::Max => quote!(Max),
        ReduceOp::Min => quote!(Min),
        ReduceOp::Prod => quote!(Prod),
        ReduceOp::L1 => quote!(L1),
        ReduceOp::SumSquare => quote!(SumSquare),
        ReduceOp::L2 => quote!(L2),
        ReduceOp::LogSum => quote!(LogSum),
        ReduceOp::LogSumExp => quote!(LogSumExp),
    };
    quote!(#rt::reduce::ReduceOp::#v)
}

impl Kernel for ReduceKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.elem {
            ElemType::Float => run_reduce_float::<f32>(self, inputs, outputs),
            ElemType::Double => run_reduce_float::<f64>(self, inputs, outputs),
            ElemType::Float16 => run_reduce_float::<crate::ops::f16>(self, inputs, outputs),
            ElemType::Bfloat16 => run_reduce_float::<crate::ops::bf16>(self, inputs, outputs),
            ElemType::Bool => run_reduce_bool(self, inputs, outputs),
            _ => crate::by_num_type!(self.elem, run_reduce_num(self, inputs, outputs)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let shape = lit::usizes(&self.shape);
        let axes = bools(&self.axes);
        let p = quote!(&#rt::reduce::Reduce { shape: #shape, axes: #axes });
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        match (self.what, self.elem) {
            (ReduceWhat::Mvn, _) => quote!(#rt::reduce::mean_variance_norm(#p, #x, #y)?;),
            (ReduceWhat::Op(op), ElemType::Bool) => {
                let max = op == ReduceOp::Max;
                quote!(#rt::reduce::reduce_flags(#max, #p, #x, #y)?;)
            }
            (
                ReduceWhat::Op(op),
                ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16,
            ) => {
                let op = reduce_op_tokens(op, rt);
                quote!(#rt::reduce::reduce_float(#op, #p, #x, #y)?;)
            }
            (ReduceWhat::Op(op), _) => {
                let op = reduce_op_tokens(op, rt);
                quote!(#rt::reduce::reduce(#op, #p, #x, #y)?;)
            }
        }
    }
}

// ---------------------------------------------------------------------------
// ArgMax, ArgMin

pub(super) struct ArgRule;

fn arg_plan(cx: &NodeCx<'_>) -> OpResult<(AxisShape, Vec<usize>)> {
    let x = cx.input(0)?;
    match x.elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64 => {}
        other => return unsupported(format!("{} on {other} tensors", op_name(cx))),
    }
    let dims = &x.dims;
    let a = axis(cx.int_or("axis", 0), dims.len(), &format!("{} axis", op_name(cx)))?;
    if dims[a] == 0 {
        return invalid(format!("{} over axis {a} of {x}, which is empty", op_name(cx)));
    }
    let s =
        AxisShape { outer: product(&dims[..a])?, axis: dims[a], inner: product(&dims[a + 1..])? };
    let mut out = dims.clone();
    if cx.int_or("keepdims", 1) != 0 {
        out[a] = 1;
    } else {
        out.remove(a);
    }
    Ok((s, out))
}

impl OpRule for ArgRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (_, out) = arg_plan(cx)?;
        Ok(vec![TensorType::new(ElemType::Int64, out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (s, _) = arg_plan(cx)?;
        Ok(Lowered::Kernel(Box::new(ArgKernel {
            elem: cx.input(0)?.elem,
            s,
            max: op_name(cx) == "ArgMax",
            last: cx.int_or("select_last_index", 0) != 0,
        })))
    }
}

struct ArgKernel {
    elem: ElemType,
    s: AxisShape,
    max: bool,
    last: bool,
}

fn run_arg<T: Num + HostElem>(
    k: &ArgKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host_in::<T>(inputs, 0)?;
    rt_reduce::arg_extreme(k.s, k.max, k.last, x, host_out::<i64>(outputs, 0)?)?;
    Ok(())
}

impl Kernel for ArgKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_arg(self, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let s = axis_shape_tokens(self.s, rt);
        let (max, last) = (self.max, self.last);
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        quote!(#rt::reduce::arg_extreme(#s, #max, #last, #x, #y)?;)
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn reduce_axes_from_an_input_or_an_attribute() {
        // ReduceSum-13 takes axes as an input; rows of [[1,2,3],[4,5,6]] sum to 6 and 15.
        let a = run(
            13,
            "g () => (float[2] y) <float[2,3] x = {1,2,3,4,5,6}, int64[1] axes = {1}> {
                y = ReduceSum <keepdims: int = 0> (x, axes)
            }",
        );
        assert_eq!(types(&a), [ty("float[2]")]);
        assert_eq!(value(&a, 0), [6.0, 15.0]);
        // ReduceMean-11 takes axes as an attribute; columns average to 2.5, 3.5, 4.5.
        let a = run(
            11,
            "g () => (float[1,3] y) <float[2,3] x = {1,2,3,4,5,6}> {
                y = ReduceMean <axes: ints = [-2]> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 3]")]);
        assert_eq!(value(&a, 0), [2.5, 3.5, 4.5]);
        // Integer ReduceProd over everything, keepdims by default.
        let a = run(
            18,
            "g () => (int32[1,1] y) <int32[2,2] x = {1,2,3,-4}> {
                y = ReduceProd (x)
            }",
        );
        assert_eq!(types(&a), [ty("int32[1, 1]")]);
        assert_eq!(value(&a, 0), [-24.0]);
    }

    #[test]
    fn reduce_empty_axes_reduce_all_or_nothing() {
        let a = run(18, "g (float[2,3,4] x) => (float[1,1,1] y) { y = ReduceMax (x) }");
        assert_eq!(types(&a), [ty("float[1, 1, 1]")]);
        let a =
            run(18, "g (float[2,3,4] x) => (float y) { y = ReduceMax <keepdims: int = 0> (x) }");
        assert_eq!(types(&a), [ty("float[]")]);
        // noop_with_empty_axes: the output is the input.
        let a = run(
            18,
            "g (float[2,3,4] x) => (float[2,3,4] y) { y = ReduceLogSumExp <noop_with_empty_axes: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4]")]);
        assert!(a.inferred.is_complete());
        // An axes input whose type says it is empty needs no value.
        let a = run(
            13,
            "g (float[2,3] x, int64[0] axes) => (float[1,1] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [ty("float[1, 1]")]);
    }

    #[test]
    fn reduce_errors_and_unsupported_cases() {
        let a = run(
            13,
            "g (float[2,3] x, int64[1] axes) => (float[?,?] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [None]);
        assert!(unsupported(&a)[0].contains(
            "axes (input 1) are known only at run time and the output's shape is not declared"
        ));
        // With the output's shape declared, the axes may be data: the plan
        // follows the declaration and the generated code checks it.
        let a = run(
            13,
            "g (float[2,3] x, int64[1] axes) => (float[2,1] y) { y = ReduceSum (x, axes) }",
        );
        assert_eq!(types(&a), [ty("float[2, 1]")]);
        assert!(a.inferred.is_complete());
        let a = run(
            11,
            "g (float[2,3] x) => (float[?,?] y) { y = ReduceMin <axes: ints = [1, -1]> (x) }",
        );
        assert!(errors(&a)[0].contains("names axis -1 twice"), "{:?}", errors(&a));
        let a =
            run(11, "g (float[2,3] x) => (float[?,?] y) { y = ReduceMin <axes: ints = [2]> (x) }");
        assert!(errors(&a)[0].contains("out of range"), "{:?}", errors(&a));
        let a = run(18, "g (int32[2,3] x) => (int32[?,?] y) { y = ReduceL2 (x) }");
        assert!(unsupported(&a)[0].contains("ReduceL2 on int32"), "{:?}", unsupported(&a));
        // float16 sums in f32 steps rounded per operation, like the reference.
        let a = run(18, "g (float16[2,3] x) => (float16[?,?] y) { y = ReduceSum (x) }");
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
    }

    #[test]
    fn boolean_max_and_min() {
        let a = run(
            20,
            "g () => (bool[2,1] y, bool[2,1] z) <bool[2,2] x = {1,0,0,0}, int64[1] axes = {1}> {
                y = ReduceMax (x, axes)
                z = ReduceMin (x, axes)
            }",
        );
        assert_eq!(types(&a), [ty("bool[2, 1]"), ty("bool[2, 1]")]);
        assert_eq!(value(&a, 0), [1.0, 0.0]);
        assert_eq!(value(&a, 1), [0.0, 0.0]);
        let a = run(20, "g (bool[2,2] x) => (bool[?,?] y) { y = ReduceSum (x) }");
        assert_eq!(unsupported(&a).len(), 1);
    }

    #[test]
    fn arg_max_and_min() {
        // Rows [1, 3, 3] and [2, 0, 0].
        let a = run(
            13,
            "g () => (int64[2] y, int64[2,1] z, int64[1,3] w) <float[2,3] x = {1,3,3,2,0,0}> {
                y = ArgMax <axis: int = 1, keepdims: int = 0> (x)
                z = ArgMax <axis: int = -1, select_last_index: int = 1> (x)
                w = ArgMin (x)
            }",
        );
        assert_eq!(types(&a), [ty("int64[2]"), ty("int64[2, 1]"), ty("int64[1, 3]")]);
        assert_eq!(value(&a, 0), [1.0, 0.0]);
        assert_eq!(value(&a, 1), [2.0, 0.0]);
        assert_eq!(value(&a, 2), [0.0, 1.0, 1.0]);
        let a = run(13, "g (float[2,0] x) => (int64[?,?] y) { y = ArgMax <axis: int = 1> (x) }");
        assert!(errors(&a)[0].contains("empty"), "{:?}", errors(&a));
    }
}
