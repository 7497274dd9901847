//! The one kernel of the family: runs every plan on the host (to fold) and
//! emits its runtime call.

use super::{Axis, Plan, data_in, data_out, host_ints, ints_in, wrong_buffer};
use crate::by_data_type;
use crate::emit::lit;
use crate::ir::{ElemType, Tensor, TensorData, TensorType};
use crate::ops::host::{Data, HostElem};
use crate::ops::{EvalError, EvalResult, HostTensor, Io, Kernel};
use bytes::Bytes;
use onnx_codegen_runtime::indexing::{self as rt_ix, Combine, Reduction, Widen};
use onnx_codegen_runtime::layout::MoveTo;
use onnx_codegen_runtime::num::{Float, Num};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct IndexKernel {
    pub(super) elem: ElemType,
    pub(super) plan: Plan,
    pub(super) present: Vec<bool>,
}

fn red_tokens(r: Reduction, rt: &TokenStream) -> TokenStream {
    let v = match r {
        Reduction::None => quote!(None),
        Reduction::Add => quote!(Add),
        Reduction::Mul => quote!(Mul),
        Reduction::Max => quote!(Max),
        Reduction::Min => quote!(Min),
    };
    quote!(#rt::indexing::Reduction::#v)
}

fn run_move<T: Data + Combine + rt_ix::IsZero + MoveTo<T>>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = data_in::<T>(inputs, 0)?;
    match &k.plan {
        Plan::ScatterElements { shape, index_shape, axis, reduction } => {
            let (i, u) = (ints_in(inputs, 1)?, data_in::<T>(inputs, 2)?);
            rt_ix::scatter_elements(
                shape,
                index_shape,
                *axis,
                *reduction,
                x,
                &i,
                u,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::ScatterNd { shape, k: kk, count, reduction } => {
            let (i, u) = (ints_in(inputs, 1)?, data_in::<T>(inputs, 2)?);
            rt_ix::scatter_nd(
                shape,
                *kk,
                *count,
                *reduction,
                x,
                &i,
                u,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::TensorScatter { shape, axis, seq, circular } => {
            let u = data_in::<T>(inputs, 1)?;
            let w = if k.present.get(2) == Some(&true) { Some(ints_in(inputs, 2)?) } else { None };
            rt_ix::tensor_scatter(
                shape,
                *axis,
                *seq,
                *circular,
                x,
                u,
                w.as_deref(),
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::GatherNd { shape, batch_dims, k: kk } => {
            let i = ints_in(inputs, 1)?;
            rt_ix::gather_nd(shape, *batch_dims, *kk, x, &i, data_out::<T>(outputs, 0)?)?;
        }
        Plan::ReverseSequence { dims, batch_axis, time_axis } => {
            let l = ints_in(inputs, 1)?;
            rt_ix::reverse_sequence(
                dims,
                *batch_axis,
                *time_axis,
                &l,
                x,
                data_out::<T>(outputs, 0)?,
            )?;
        }
        Plan::NonZero { dims, count } => {
            rt_ix::non_zero(dims, *count, x, data_out::<i64>(outputs, 0)?)?;
        }
        Plan::Compress { outer, len, inner, count } => {
            let c = data_in::<bool>(inputs, 1)?;
            rt_ix::compress(*outer, *len, *inner, *count, c, x, data_out::<T>(outputs, 0)?)?;
        }
        _ => return Err(EvalError::Type(k.elem)),
    }
    Ok(())
}

fn run_einsum<T: Data + Widen>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::Einsum { out_dims, sum_dims, strides } = &k.plan else { return Err(wrong_buffer()) };
    let ops: Vec<&[T]> =
        (0..strides.len()).map(|i| data_in::<T>(inputs, i)).collect::<Result<_, _>>()?;
    let st: Vec<&[usize]> = strides.iter().map(Vec::as_slice).collect();
    rt_ix::einsum(out_dims, sum_dims, &ops, &st, data_out::<T>(outputs, 0)?)?;
    Ok(())
}

fn run_num<T: Num + HostElem>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::CumProd { dims, axis, exclusive, reverse } = &k.plan else {
        return Err(wrong_buffer());
    };
    let a = match axis {
        Axis::Known(a) => *a,
        Axis::Runtime => match ints_in(inputs, 1)?.as_slice() {
            [a] => *a,
            _ => return Err(wrong_buffer()),
        },
    };
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(wrong_buffer())?;
    rt_ix::cumprod(dims, a, *exclusive, *reverse, x, y)?;
    Ok(())
}

fn run_det<T: Float + HostElem>(
    k: &IndexKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let Plan::Det { batch, n } = k.plan else { return Err(wrong_buffer()) };
    let x = inputs.first().copied().flatten().and_then(|t| t.get::<T>()).ok_or(wrong_buffer())?;
    let [y, s, ..] = outputs else { return Err(wrong_buffer()) };
    let (Some(y), Some(s)) = (y.get_mut::<T>(), s.get_mut::<T>()) else {
        return Err(wrong_buffer());
    };
    rt_ix::det(batch, n, x, y, s)?;
    Ok(())
}

fn f32_in(inputs: &[Option<&HostTensor>], i: usize) -> Option<f32> {
    inputs.get(i).copied().flatten().and_then(|t| t.get::<f32>()).and_then(|v| v.first().copied())
}

impl Kernel for IndexKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match &self.plan {
            Plan::Einsum { .. } => by_widen_type!(self.elem, run_einsum(self, inputs, outputs)),
            Plan::CumProd { .. } => crate::by_num_type!(self.elem, run_num(self, inputs, outputs)),
            Plan::Det { .. } => crate::by_float_type!(self.elem, run_det(self, inputs, outputs)),
            Plan::BitCast { to } => {
                let x = inputs.first().copied().flatten().ok_or(wrong_buffer())?;
                let t = x.to_tensor("x");
                let TensorData::Bytes(b) = t.data else { return Err(wrong_buffer()) };
                let bytes: Vec<u8> = if *to == ElemType::Bool {
                    b.iter().map(|&v| u8::from(v != 0)).collect()
                } else {
                    b.to_vec()
                };
                let cast = Tensor { elem: *to, data: TensorData::Bytes(Bytes::from(bytes)), ..t };
                let h = HostTensor::from_tensor(&cast).ok_or(EvalError::Type(*to))?;
                let y = outputs.first_mut().ok_or(wrong_buffer())?;
                if h.ty.dims != y.ty.dims {
                    return Err(wrong_buffer());
                }
                y.data = h.data;
                Ok(())
            }
            Plan::Nms { p, count } => {
                let b = inputs
                    .first()
                    .copied()
                    .flatten()
                    .and_then(|t| t.get::<f32>())
                    .ok_or(wrong_buffer())?;
                let s = inputs
                    .get(1)
                    .copied()
                    .flatten()
                    .and_then(|t| t.get::<f32>())
                    .ok_or(wrong_buffer())?;
                let m = match inputs.get(2).copied().flatten() {
                    Some(t) => host_ints(t).and_then(|v| v.first().copied()).unwrap_or(0),
                    None => 0,
                };
                let iou = f32_in(inputs, 3).unwrap_or(0.0);
                let thr = f32_in(inputs, 4);
                let y = data_out::<i64>(outputs, 0)?;
                rt_ix::non_max_suppression(*p, b, s, m, iou, thr, *count, y)?;
                Ok(())
            }
            // The outputs present vary; Unique runs only in generated code.
            Plan::Unique { .. }
            | Plan::Split { .. }
            | Plan::SequenceMap { .. }
            | Plan::SequenceAt { .. } => Err(EvalError::Type(self.elem)),
            _ => by_data_type!(self.elem, run_move(self, inputs, outputs)),
        }
    }

    fn reads_input(&self, i: usize) -> bool {
        match &self.plan {
            Plan::CumProd { axis, .. } => i == 0 || *axis == Axis::Runtime,
            Plan::BitCast { .. }
            | Plan::Det { .. }
            | Plan::NonZero { .. }
            | Plan::Unique { .. } => i == 0,
            Plan::SequenceMap { .. } => i < 2,
            _ => true,
        }
    }

    fn scratch(&self) -> Option<TensorType> {
        match self.plan {
            Plan::Det { n, .. } => Some(TensorType::new(self.elem, vec![(n * n).max(1)])),
            Plan::Unique { count, .. } => {
                Some(TensorType::new(ElemType::Int64, vec![count.max(1)]))
            }
            _ => None,
        }
    }

    fn data_sized(&self) -> Vec<(usize, usize, usize)> {
        match self.plan {
            Plan::Unique { bounded: Some(axis), .. } => vec![(0, axis, 0), (1, 0, 0), (3, 0, 0)],
            Plan::Split { pieces, axis, .. } => (0..pieces).map(|j| (j, axis, j)).collect(),
            Plan::SequenceAt { axis: Some(axis), .. } => vec![(0, axis, 0)],
            _ => Vec::new(),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let ix = quote!(#rt::indexing);
        let u = lit::usize_lit;
        let us = lit::usizes;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let x = input(0);
        let y = io.outputs.first().cloned().flatten();
        match &self.plan {
            Plan::ScatterElements { shape, index_shape, axis, reduction } => {
                let (s, is, a, r) =
                    (us(shape), us(index_shape), u(*axis), red_tokens(*reduction, rt));
                let (i, up) = (input(1), input(2));
                quote!(#ix::scatter_elements(#s, #is, #a, #r, #x, #i, #up, #y)?;)
            }
            Plan::ScatterNd { shape, k, count, reduction } => {
                let (s, k, c, r) = (us(shape), u(*k), u(*count), red_tokens(*reduction, rt));
                let (i, up) = (input(1), input(2));
                quote!(#ix::scatter_nd(#s, #k, #c, #r, #x, #i, #up, #y)?;)
            }
            Plan::TensorScatter { shape, axis, seq, circular } => {
                let (s, a, q) = (us(shape), u(*axis), u(*seq));
                let up = input(1);
                let w = match input(2) {
                    Some(w) => quote!(Some(#w)),
                    None => quote!(None::<&[i64]>),
                };
                quote!(#ix::tensor_scatter(#s, #a, #q, #circular, #x, #up, #w, #y)?;)
            }
            Plan::GatherNd { shape, batch_dims, k } => {
                let (s, b, k) = (us(shape), u(*batch_dims), u(*k));
                let i = input(1);
                quote!(#ix::gather_nd(#s, #b, #k, #x, #i, #y)?;)
            }
            Plan::Einsum { out_dims, sum_dims, strides } => {
                let (o, s) = (us(out_dims), us(sum_dims));
                let ops: Vec<TokenStream> =
                    (0..strides.len()).map(|i| input(i).unwrap_or_default()).collect();
                let st: Vec<TokenStream> = strides.iter().map(|s| us(s)).collect();
                quote!(#ix::einsum(#o, #s, &[#(#ops),*], &[#(#st),*], #y)?;)
            }
            Plan::CumProd { dims, axis, exclusive, reverse } => {
                let d = us(dims);
                let a = match axis {
                    Axis::Known(a) => {
                        let l = proc_macro2::Literal::i64_suffixed(*a);
                        quote!(#l)
                    }
                    Axis::Runtime => {
                        let b = input(1);
                        quote!(#rt::extra::scalar_i64(#b)?)
                    }
                };
                quote!(#ix::cumprod(#d, #a, #exclusive, #reverse, #x, #y)?;)
            }
            Plan::BitCast { .. } => quote!(#ix::bitcast(#x, #y)?;),
            Plan::ReverseSequence { dims, batch_axis, time_axis } => {
                let (d, b, t) = (us(dims), u(*batch_axis), u(*time_axis));
                let l = input(1);
                quote!(#ix::reverse_sequence(#d, #b, #t, #l, #x, #y)?;)
            }
            Plan::Det { batch, n } => {
                let (b, n) = (u(*batch), u(*n));
                let s = &io.scratch;
                quote!(#ix::det(#b, #n, #x, #y, #s)?;)
            }
            Plan::NonZero { dims, count } => {
                let (d, c) = (us(dims), u(*count));
                quote!(#ix::non_zero(#d, #c, #x, #y)?;)
            }
            Plan::Compress { outer, len, inner, count } => {
                let (o, l, i, c) = (u(*outer), u(*len), u(*inner), u(*count));
                let cond = input(1);
                quote!(#ix::compress(#o, #l, #i, #c, #cond, #x, #y)?;)
            }
            Plan::Nms { p, count } => {
                let (b, c, n, center) =
                    (u(p.batches), u(p.classes), u(p.boxes), p.center_point_box);
                let opt = |i: usize| match input(i) {
                    Some(v) => quote!(Some(#v)),
                    None => quote!(None),
                };
                let (m, iou, thr) = (opt(2), opt(3), opt(4));
                let s = input(1);
                let cnt = u(*count);
                quote! {
                    #ix::non_max_suppression(
                        #ix::Nms { batches: #b, classes: #c, boxes: #n, center_point_box: #center },
                        #x, #s,
                        #ix::first_or(#m, 0i64),
                        #ix::first_or(#iou, 0.0f32),
                        #ix::first_opt(#thr),
                        #cnt, #y,
                    )?;
                }
            }
            Plan::SequenceMap { len, source } => {
                let (map, p) = (input(0), input(1));
                let y = y.unwrap_or_else(|| quote!(compile_error!("a sequence map is not bound")));
                let n = u(*len);
                // The position counts from the back when negative; inserting
                // may go one past the last element (`insert_position` checks
                // that), erasing may not.
                let (out, check, pick) = match source {
                    Some(k) => (
                        u(*len + 1),
                        quote!(),
                        quote!(if _j < _p { _map[_j] } else if _j == _p { #k } else { _map[_j - 1] }),
                    ),
                    None => (
                        u(len.saturating_sub(1)),
                        quote!(if _p >= #n { return Err(#rt::Error::InvalidParams); }),
                        quote!(if _j < _p { _map[_j] } else { _map[_j + 1] }),
                    ),
                };
                quote! {{
                    let _p: usize = #ix::insert_position(#p, #n)?;
                    #check
                    let _map: &[i64] = #map;
                    let _out: &mut [i64] = #y;
                    if _map.len() != #n || _out.len() != #out {
                        return Err(#rt::Error::ShapeMismatch);
                    }
                    for (_j, _y) in _out.iter_mut().enumerate() {
                        *_y = #pick;
                    }
                }}
            }
            Plan::SequenceAt { len, sources, axis } => {
                let (map, p) = (input(0), input(1));
                let y =
                    y.unwrap_or_else(|| quote!(compile_error!("a SequenceAt output is not bound")));
                let n = u(*len);
                let arms = sources.iter().enumerate().map(|(k, &(numel, along))| {
                    let (numel, along) = (u(numel), u(along));
                    let src = input(2 + k);
                    let k = proc_macro2::Literal::i64_suffixed(k as i64);
                    quote!(#k => {
                        #rt::control::copy(#src, #rt::control::row_mut(#y, 0, #numel)?)?;
                        #along
                    })
                });
                let pick = quote! {{
                    let _p: usize = #ix::insert_position(#p, #n)?;
                    if _p >= #n {
                        return Err(#rt::Error::InvalidParams);
                    }
                    let _map: &[i64] = #map;
                    let _source: i64 = *_map.get(_p).ok_or(#rt::Error::ShapeMismatch)?;
                    match _source {
                        #(#arms)*
                        _ => return Err(#rt::Error::InvalidParams),
                    }
                }};
                if axis.is_some() { quote!([#pick]) } else { quote!(let _ = #pick;) }
            }
            Plan::Split { s, pieces, .. } => {
                let (o, l, n, k) = (u(s.outer), u(s.len), u(s.inner), u(*pieces));
                let split = input(1);
                let ys: Vec<TokenStream> = (0..*pieces)
                    .map(|j| {
                        io.outputs.get(j).cloned().flatten().unwrap_or_else(|| {
                            quote!(compile_error!("a SplitToSequence piece is not bound"))
                        })
                    })
                    .collect();
                quote! {{
                    let mut _lengths = [0usize; #k];
                    #ix::split_bounded(
                        #ix::Slices { outer: #o, len: #l, inner: #n },
                        #split, #x, &mut [#(#ys),*], &mut _lengths,
                    )?;
                    _lengths
                }}
            }
            Plan::Unique { s, sorted, count, bounded } => {
                let (o, l, n, c) = (u(s.outer), u(s.len), u(s.inner), u(*count));
                let out = |k: usize| match io.outputs.get(k).cloned().flatten() {
                    Some(v) => quote!(Some(#v)),
                    None => quote!(None),
                };
                let (idx, inv, cnt) = (out(1), out(2), out(3));
                let f = &io.scratch;
                if bounded.is_some() {
                    return quote! {
                        [#ix::unique_bounded(
                            #ix::Slices { outer: #o, len: #l, inner: #n }, #sorted, #c,
                            #x, #y, #f, #idx, #inv, #cnt,
                        )?]
                    };
                }
                quote! {
                    #ix::unique(
                        #ix::Slices { outer: #o, len: #l, inner: #n }, #sorted, #c,
                        #x, #y, #f, #idx, #inv, #cnt,
                    )?;
                }
            }
        }
    }
}
