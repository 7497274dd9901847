//! The pooling operators: MaxPool (with its Indices output), AveragePool,
//! LpPool, and the global pools, on the window geometry of `window`.

use super::window::*;
use super::*;

/// What a windowed pool computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PoolKind {
    /// MaxPool; `indices` when the Indices output is wanted, `column_major`
    /// for `storage_order = 1`.
    Max {
        indices: bool,
        column_major: bool,
    },
    Average {
        count_include_pad: bool,
    },
    Lp(u32),
}

/// LpPool's and GlobalLpPool's `p`: a float attribute in opset 1, an
/// integer later; the kernel takes a positive integer.
fn lp_p(cx: &NodeCx<'_>) -> OpResult<u32> {
    if cx.version() < 2 {
        let p = cx.float_or("p", 2.0);
        if p >= 1.0 && p.fract() == 0.0 && p <= u32::MAX as f32 {
            return Ok(p as u32);
        }
        return unsupported(format!(
            "{} with p = {p}: only positive integer p is supported",
            op_name(cx)
        ));
    }
    let p = cx.int_or("p", 2);
    match u32::try_from(p) {
        Ok(p) if p >= 1 => Ok(p),
        _ => invalid(format!("attribute 'p' must be a positive integer, got {p}")),
    }
}

pub(super) struct PoolRule;

#[derive(Clone, Debug)]
struct PoolPlan {
    elem: ElemType,
    kind: PoolKind,
    planes: usize,
    geom: Geometry,
    out: Vec<usize>,
}

fn pool_plan(cx: &NodeCx<'_>) -> OpResult<PoolPlan> {
    let x = cx.input(0)?;
    let op = op_name(cx);
    let kind = match op {
        "MaxPool" => {
            match x.elem {
                ElemType::Float | ElemType::Double => {}
                ElemType::Int8 | ElemType::Uint8 if cx.version() >= 12 => {}
                other => {
                    return unsupported(format!(
                        "MaxPool on {other} tensors: the runtime kernel supports float32, \
                         float64, int8 and uint8 (from opset 12)"
                    ));
                }
            }
            let indices = cx.node.outputs.get(1).is_some_and(Option::is_some);
            let column_major = match cx.int_or("storage_order", 0) {
                0 => false,
                1 => true,
                other => return invalid(format!("storage_order must be 0 or 1, got {other}")),
            };
            PoolKind::Max { indices, column_major }
        }
        "AveragePool" => {
            float_elem(cx, x)?;
            PoolKind::Average { count_include_pad: cx.int_or("count_include_pad", 0) != 0 }
        }
        _ => {
            float_elem(cx, x)?;
            PoolKind::Lp(lp_p(cx)?)
        }
    };
    let w = window_of(cx, x)?;
    Ok(PoolPlan { elem: x.elem, kind, planes: w.planes, geom: w.geom, out: w.out })
}

/// A pool's window over `x` (`[N, C, spatial...]`): the planes, the
/// geometry (in its 2-D form) and the output dims.
#[derive(Clone, Debug)]
pub(in crate::ops) struct PoolWindow {
    pub(in crate::ops) planes: usize,
    pub(in crate::ops) geom: Geometry,
    pub(in crate::ops) out: Vec<usize>,
}

/// The window of node `cx`, a windowed pool of `x`: its `kernel_shape`,
/// pads, strides, dilations and `ceil_mode`.
pub(in crate::ops) fn window_of(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<PoolWindow> {
    let op = op_name(cx);
    let in_dims = spatial(cx, x)?;
    let Some(kernel) = cx.ints("kernel_shape") else {
        return invalid(format!("{op} needs the attribute 'kernel_shape'"));
    };
    let kernel = spatial_ints(cx, "kernel_shape", in_dims.len(), 1, 1).map_err(|e| match e {
        OpError::Invalid(m) => OpError::Invalid(format!("{m} (kernel_shape {kernel:?})")),
        other => other,
    })?;
    let ceil_mode = cx.int_or("ceil_mode", 0) != 0;
    let geom = forward_geometry(cx, in_dims, kernel, ceil_mode)?;
    let Some(planes) = x.dims[0].checked_mul(x.dims[1]) else { return overflow("N * C") };
    let mut out = x.dims[..2].to_vec();
    out.extend_from_slice(&geom.out_dims);
    Ok(PoolWindow { planes, geom: geom.into_2d(), out })
}

impl OpRule for PoolRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = pool_plan(cx)?;
        let mut outs = vec![TensorType::new(p.elem, p.out.clone())];
        if op_name(cx) == "MaxPool" && cx.node.outputs.len() > 1 {
            outs.push(TensorType::new(ElemType::Int64, p.out));
        }
        Ok(outs)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(PoolKernel { plan: pool_plan(cx)? })))
    }
}

struct PoolKernel {
    plan: PoolPlan,
}

fn run_max_pool<T: Num + HostElem>(
    p: &PoolPlan,
    indices: bool,
    column_major: bool,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let params = Pool { planes: p.planes, window: p.geom.window() };
    let x = host::<T>(inputs.first().copied().flatten(), p.elem)?;
    let (y, rest) = outputs.split_first_mut().ok_or(EvalError::Type(p.elem))?;
    let y = host_mut::<T>(Some(y), p.elem)?;
    if indices {
        let ix = host_mut::<i64>(rest.first_mut(), ElemType::Int64)?;
        rt_pool::max_pool(&params, x, y, Some(&mut *ix))?;
        if column_major {
            rt_pool::max_pool_indices_column_major(&p.geom.in_dims, ix)?;
        }
    } else {
        rt_pool::max_pool(&params, x, y, None)?;
    }
    Ok(())
}

fn run_float_pool<T: Float + HostElem>(
    p: &PoolPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let params = Pool { planes: p.planes, window: p.geom.window() };
    let x = host::<T>(inputs.first().copied().flatten(), p.elem)?;
    let y = host_mut::<T>(outputs.first_mut(), p.elem)?;
    match p.kind {
        PoolKind::Average { count_include_pad } => {
            rt_pool::average_pool(&params, count_include_pad, x, y)?;
        }
        PoolKind::Lp(pp) => rt_pool::lp_pool(&params, pp, x, y)?,
        PoolKind::Max { .. } => return Err(EvalError::Type(p.elem)),
    }
    Ok(())
}

impl Kernel for PoolKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        let p = &self.plan;
        match p.kind {
            PoolKind::Max { indices, column_major } => {
                crate::by_num_type!(p.elem, run_max_pool(p, indices, column_major, inputs, outputs))
            }
            _ => crate::by_float_type!(p.elem, run_float_pool(p, inputs, outputs)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.plan;
        let window = p.geom.tokens(rt);
        let planes = lit::usize_lit(p.planes);
        let params = quote!(&#rt::pool::Pool { planes: #planes, window: #window });
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        match p.kind {
            PoolKind::Max { indices, column_major } => match io.outputs.get(1) {
                Some(Some(ix)) if indices => {
                    let reorder = if column_major {
                        let dims = lit::usizes(&p.geom.in_dims);
                        quote!(#rt::pool::max_pool_indices_column_major(#dims, indices)?;)
                    } else {
                        quote!()
                    };
                    quote! {
                        let indices: &mut [i64] = #ix;
                        #rt::pool::max_pool(#params, #x, #y, Some(&mut *indices))?;
                        #reorder
                    }
                }
                _ => quote!(#rt::pool::max_pool(#params, #x, #y, None)?;),
            },
            PoolKind::Average { count_include_pad } => {
                quote!(#rt::pool::average_pool(#params, #count_include_pad, #x, #y)?;)
            }
            PoolKind::Lp(pp) => {
                let pp = proc_macro2::Literal::u32_unsuffixed(pp);
                quote!(#rt::pool::lp_pool(#params, #pp, #x, #y)?;)
            }
        }
    }
}

/// What a global pool computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GlobalKind {
    Average,
    Max,
    Lp(u32),
}

pub(super) struct GlobalPoolRule;

#[derive(Clone, Debug)]
struct GlobalPlan {
    elem: ElemType,
    kind: GlobalKind,
    planes: usize,
    size: usize,
    out: Vec<usize>,
}

fn global_plan(cx: &NodeCx<'_>) -> OpResult<GlobalPlan> {
    let x = cx.input(0)?;
    float_elem(cx, x)?;
    let kind = match op_name(cx) {
        "GlobalAveragePool" => GlobalKind::Average,
        "GlobalMaxPool" => GlobalKind::Max,
        _ => GlobalKind::Lp(lp_p(cx)?),
    };
    if x.dims.len() < 2 {
        return invalid(format!(
            "{} needs an input of rank 2 or more ([N, C, ...]), got {x}",
            op_name(cx)
        ));
    }
    let Some(planes) = x.dims[0].checked_mul(x.dims[1]) else { return overflow("N * C") };
    let Some(size) = x.dims[2..].iter().try_fold(1usize, |a, &d| a.checked_mul(d)) else {
        return overflow("the spatial size");
    };
    let mut out = x.dims[..2].to_vec();
    out.resize(x.dims.len(), 1);
    Ok(GlobalPlan { elem: x.elem, kind, planes, size, out })
}

impl OpRule for GlobalPoolRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let p = global_plan(cx)?;
        Ok(vec![TensorType::new(p.elem, p.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(GlobalKernel { plan: global_plan(cx)? })))
    }
}

struct GlobalKernel {
    plan: GlobalPlan,
}

fn run_global<T: Float + HostElem>(
    p: &GlobalPlan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs.first().copied().flatten(), p.elem)?;
    let y = host_mut::<T>(outputs.first_mut(), p.elem)?;
    match p.kind {
        GlobalKind::Average => rt_pool::global_average_pool(p.planes, p.size, x, y)?,
        GlobalKind::Max => rt_pool::global_max_pool(p.planes, p.size, x, y)?,
        GlobalKind::Lp(pp) => rt_pool::global_lp_pool(p.planes, p.size, pp, x, y)?,
    }
    Ok(())
}

impl Kernel for GlobalKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_float_type!(self.plan.elem, run_global(&self.plan, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.plan;
        let (planes, size) = (lit::usize_lit(p.planes), lit::usize_lit(p.size));
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        match p.kind {
            // f32 takes the vectorised entry point (partial sums: the same
            // mean up to rounding); constant folding keeps the generic kernel.
            GlobalKind::Average if p.elem == ElemType::Float => {
                quote!(#rt::pool::sglobal_average_pool(#planes, #size, #x, #y)?;)
            }
            GlobalKind::Average => {
                quote!(#rt::pool::global_average_pool(#planes, #size, #x, #y)?;)
            }
            GlobalKind::Max => quote!(#rt::pool::global_max_pool(#planes, #size, #x, #y)?;),
            GlobalKind::Lp(pp) => {
                let pp = proc_macro2::Literal::u32_unsuffixed(pp);
                quote!(#rt::pool::global_lp_pool(#planes, #size, #pp, #x, #y)?;)
            }
        }
    }
}
