//! `Scan` (opsets 8, 9 and later): the body runs once per position along
//! each scan input's axis (forwards or backwards), the state carried
//! between iterations and each scan output written at its axis; opset 8's
//! batch axis is an outer loop.

use super::body::{
    Body, LoopSlots, Scratch, bind_loop_io, body_arena, buffer_elem, compile, error_tokens, idents,
    slot, state_slots,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

pub(super) struct ScanRule;

/// A tensor seen as `[outer, len, inner]` around an axis, for the runtime.
fn scan_axis(dims: &[usize], axis: usize) -> OpResult<[usize; 3]> {
    let too_large = || OpError::Unsupported("a Scan tensor is too large".into());
    let outer =
        dims[..axis].iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(too_large)?;
    let len = dims.get(axis).copied().unwrap_or(1);
    let inner = dims[axis.saturating_add(1).min(dims.len())..]
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_large)?;
    Ok([outer, len, inner])
}

struct ScanShape {
    body: Body,
    /// Batch size (opset 8's axis 0; 1 from opset 9).
    batch: usize,
    /// The scan length.
    len: usize,
    /// Per state: the type of one batch entry.
    state: Vec<TensorType>,
    /// Per scan input: its node input index, `[outer, len, inner]`, reversed.
    inputs: Vec<(usize, [usize; 3], bool)>,
    /// Per scan output: its slice type, output type, `[outer, len, inner]`, reversed.
    outputs: Vec<(TensorType, TensorType, [usize; 3], bool)>,
    /// The node input index of the first state.
    first_state: usize,
}

impl ScanRule {
    fn shape(cx: &NodeCx<'_>) -> OpResult<ScanShape> {
        let v8 = cx.version() < 9;
        let own = cx.node.input_positions();
        let m = usize::try_from(cx.int("num_scan_inputs")?)
            .map_err(|_| OpError::Invalid("num_scan_inputs must not be negative".into()))?;
        let first_state = usize::from(v8);
        if m == 0 || own < first_state + m {
            return invalid(format!("Scan has {own} inputs, fewer than num_scan_inputs = {m}"));
        }
        let n = own - first_state - m;
        let flag_list = |name: &str, count: usize| -> OpResult<Vec<bool>> {
            match cx.ints(name) {
                None => Ok(vec![false; count]),
                Some(v) if v.len() == count => Ok(v.iter().map(|&d| d != 0).collect()),
                Some(v) => {
                    invalid(format!("{name} has {} entries; {count} were expected", v.len()))
                }
            }
        };
        let in_rev = flag_list(if v8 { "directions" } else { "scan_input_directions" }, m)?;
        let mut batch = 1;
        let mut len = None;
        let mut inputs = Vec::new();
        let mut slice_types = Vec::new();
        let in_axes = if v8 { None } else { cx.ints("scan_input_axes") };
        if in_axes.as_ref().is_some_and(|a| a.len() != m) {
            return invalid(format!("scan_input_axes must have {m} entries"));
        }
        if v8 {
            if cx.opt_input(0).is_some() {
                return unsupported("Scan-8 with sequence_lens is not supported yet");
            }
            batch = cx.input(first_state + n)?.dims.first().copied().unwrap_or(0);
        }
        for (j, &rev) in in_rev.iter().enumerate() {
            let idx = first_state + n + j;
            let t = cx.input(idx)?;
            let axis = if v8 {
                if t.dims.len() < 2 || t.dims[0] != batch {
                    return invalid(format!(
                        "Scan-8 input {idx} must be [batch, sequence, ...], got {t}"
                    ));
                }
                1
            } else {
                let a = in_axes.as_ref().and_then(|a| a.get(j).copied()).unwrap_or(0);
                crate::ops::axis(a, t.dims.len(), "scan_input_axes entry")?
            };
            let [outer, l, inner] = scan_axis(&t.dims, axis)?;
            if *len.get_or_insert(l) != l {
                return invalid("the scan inputs of Scan have different sequence lengths");
            }
            let mut dims = t.dims.clone();
            dims.remove(axis);
            if v8 {
                dims.remove(0);
                inputs.push((idx, [1, batch.saturating_mul(l), inner], rev));
            } else {
                inputs.push((idx, [outer, l, inner], rev));
            }
            slice_types.push(t.with_dims(dims));
        }
        let len = len.unwrap_or(0);
        let mut state = Vec::new();
        for k in 0..n {
            let t = cx.input(first_state + k)?;
            if v8 {
                if t.dims.first() != Some(&batch) {
                    return invalid(format!(
                        "Scan-8 state {k} must have the batch size first, got {t}"
                    ));
                }
                state.push(t.with_dims(t.dims[1..].to_vec()));
            } else {
                state.push(t.clone());
            }
        }
        let mut ins = state.clone();
        ins.extend(slice_types);
        let body = compile(cx, "body", &ins)?;
        let outs = body.output_types();
        if outs.len() != cx.node.outputs.len() || outs.len() < n {
            return invalid(format!(
                "the Scan body has {} outputs but the node has {}",
                outs.len(),
                cx.node.outputs.len()
            ));
        }
        for (k, (s, o)) in state.iter().zip(&outs).enumerate() {
            if s != o {
                return unsupported(format!(
                    "state {k} enters as {s} but the body returns {o}; its type must not change between iterations"
                ));
            }
        }
        let kk = outs.len() - n;
        let out_rev = if v8 { vec![false; kk] } else { flag_list("scan_output_directions", kk)? };
        let out_axes = if v8 { None } else { cx.ints("scan_output_axes") };
        if out_axes.as_ref().is_some_and(|a| a.len() != kk) {
            return invalid(format!("scan_output_axes must have {kk} entries"));
        }
        let mut outputs = Vec::new();
        for (k, t) in outs[n..].iter().enumerate() {
            if v8 {
                let mut dims = vec![batch, len];
                dims.extend(&t.dims);
                let inner = t.numel().unwrap_or(0);
                outputs.push((
                    t.clone(),
                    t.with_dims(dims),
                    [1, batch.saturating_mul(len), inner],
                    false,
                ));
            } else {
                let a = out_axes.as_ref().and_then(|a| a.get(k).copied()).unwrap_or(0);
                let axis = crate::ops::axis(a, t.dims.len() + 1, "scan_output_axes entry")?;
                let mut dims = t.dims.clone();
                dims.insert(axis, len);
                let lay = scan_axis(&dims, axis)?;
                outputs.push((t.clone(), t.with_dims(dims), lay, out_rev[k]));
            }
        }
        Ok(ScanShape { body, batch, len, state, inputs, outputs, first_state })
    }
}

impl OpRule for ScanRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let s = Self::shape(cx)?;
        let mut outs: Vec<TensorType> = s
            .state
            .iter()
            .map(|t| {
                if cx.version() < 9 {
                    let mut dims = vec![s.batch];
                    dims.extend(&t.dims);
                    t.with_dims(dims)
                } else {
                    t.clone()
                }
            })
            .collect();
        outs.extend(s.outputs.iter().map(|o| o.1.clone()));
        Ok(outs)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let s = Self::shape(cx)?;
        let mut scratch = Scratch::new(s.body.arena_bytes());
        let slots = state_slots(&mut scratch, &s.state)?;
        for t in &s.state {
            buffer_elem(t.elem, &quote!(rt))?;
        }
        let mut in_slots = Vec::new();
        for &(idx, _, _) in &s.inputs {
            let t = cx.input(idx)?;
            let mut numel = t.numel().unwrap_or(0);
            numel = numel.checked_div(s.len.saturating_mul(s.batch)).unwrap_or(0);
            if crate::ops::is_low_bit(t.elem) {
                return unsupported(format!("{} scan inputs are not supported yet", t.elem));
            }
            in_slots.push(scratch.add(&TensorType::new(t.elem, vec![numel]))?);
        }
        let mut out_slots = Vec::new();
        for o in &s.outputs {
            buffer_elem(o.0.elem, &quote!(rt))?;
            out_slots.push(scratch.add(&o.0)?);
        }
        let state_numel = s.state.iter().map(|t| t.numel().unwrap_or(0)).collect();
        let kernel = ScanKernel {
            own: cx.node.inputs.len(),
            first_state: s.first_state,
            batch: s.batch,
            len: s.len,
            present: cx.node.outputs.iter().map(Option::is_some).collect(),
            inputs: s.inputs.iter().map(|&(_, lay, rev)| (lay, rev)).collect(),
            outputs: s.outputs.iter().map(|o| (o.2, o.3)).collect(),
            state_numel,
            body: s.body,
            scratch,
            slots,
            in_slots,
            out_slots,
        };
        kernel
            .body
            .tokens(
                &idents("_cf_bin", kernel.slots.state.len() + kernel.in_slots.len()),
                &idents("_cf_bout", kernel.slots.state.len() + kernel.out_slots.len()),
                &quote!(::onnx_codegen_runtime),
            )
            .map_err(|m| OpError::Unsupported(format!("Scan body: {m}")))?;
        Ok(Lowered::Kernel(Box::new(kernel)))
    }
}

struct ScanKernel {
    own: usize,
    first_state: usize,
    batch: usize,
    len: usize,
    present: Vec<bool>,
    inputs: Vec<([usize; 3], bool)>,
    outputs: Vec<([usize; 3], bool)>,
    state_numel: Vec<usize>,
    body: Body,
    scratch: Scratch,
    slots: LoopSlots,
    in_slots: Vec<usize>,
    out_slots: Vec<usize>,
}

fn axis_tokens(rt: &TokenStream, lay: [usize; 3]) -> TokenStream {
    let [o, l, i] = lay.map(lit::usize_lit);
    quote!(#rt::control::ScanAxis { outer: #o, len: #l, inner: #i })
}

impl Kernel for ScanKernel {
    fn eval(&self, _: &[Option<&HostTensor>], _: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(ElemType::Float))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = self.slots.state.len();
        let bind = bind_loop_io(io, self.own);
        let split = self.scratch.bind(io);
        let batch = lit::usize_lit(self.batch);
        let len = lit::usize_lit(self.len);
        let last = lit::usize_lit(self.len.saturating_sub(1));
        let index = |rev: bool| {
            if rev { quote!(_cf_b * #len + (#last - _cf_t)) } else { quote!(_cf_b * #len + _cf_t) }
        };
        let state_axis = |k: usize| {
            axis_tokens(rt, [1, self.batch, self.state_numel.get(k).copied().unwrap_or(0)])
        };
        let init = (0..n).map(|k| {
            let (src, dst) =
                (format_ident!("_cf_in{}", self.first_state + k), slot(self.slots.state[k]));
            let ax = state_axis(k);
            quote!(#rt::control::slice_get(#src, #ax, _cf_b, &mut *#dst)?;)
        });
        let gather =
            self.inputs.iter().zip(&self.in_slots).enumerate().map(|(j, (&(lay, rev), &s))| {
                let src = format_ident!("_cf_in{}", self.first_state + n + j);
                let (ax, ix, dst) = (axis_tokens(rt, lay), index(rev), slot(s));
                quote!(#rt::control::slice_get(#src, #ax, #ix, &mut *#dst)?;)
            });
        let mut bin: Vec<TokenStream> = self
            .slots
            .state
            .iter()
            .map(|&s| {
                let s = slot(s);
                quote!(&*#s)
            })
            .collect();
        bin.extend(self.in_slots.iter().map(|&s| {
            let s = slot(s);
            quote!(&*#s)
        }));
        let mut bout: Vec<TokenStream> = self
            .slots
            .next
            .iter()
            .map(|&s| {
                let s = slot(s);
                quote!(&mut *#s)
            })
            .collect();
        bout.extend(self.out_slots.iter().map(|&s| {
            let s = slot(s);
            quote!(&mut *#s)
        }));
        let bin_names = idents("_cf_bin", bin.len());
        let bout_names = idents("_cf_bout", bout.len());
        let body =
            self.body.tokens(&bin_names, &bout_names, rt).unwrap_or_else(|m| error_tokens(&m));
        let arena = body_arena(&self.body);
        let advance = (0..n).map(|k| {
            let (src, dst) = (slot(self.slots.next[k]), slot(self.slots.state[k]));
            quote!(#rt::control::copy(&*#src, &mut *#dst)?;)
        });
        let scatter = self
            .outputs
            .iter()
            .zip(&self.out_slots)
            .enumerate()
            .filter(|(k, _)| self.present.get(n + k) == Some(&true))
            .map(|(k, (&(lay, rev), &s))| {
                let dst = format_ident!("_cf_res{}", n + k);
                let (ax, ix, src) = (axis_tokens(rt, lay), index(rev), slot(s));
                quote!(#rt::control::slice_put(&*#src, #ax, #ix, &mut *#dst)?;)
            });
        let finish = (0..n).filter(|&k| self.present.get(k) == Some(&true)).map(|k| {
            let (src, dst) = (slot(self.slots.state[k]), format_ident!("_cf_res{}", k));
            let ax = state_axis(k);
            quote!(#rt::control::slice_put(&*#src, #ax, _cf_b, &mut *#dst)?;)
        });
        quote!({
            #bind
            #split
            for _cf_b in 0..#batch {
                #(#init)*
                for _cf_t in 0..#len {
                    #(#gather)*
                    {
                        #arena
                        let (#(#bin_names,)* #(#bout_names,)*) = (#(#bin,)* #(#bout,)*);
                        #body
                    }
                    #(#advance)*
                    #(#scatter)*
                }
                #(#finish)*
            }
        })
    }

    fn reads_input(&self, i: usize) -> bool {
        (i >= self.first_state && i < self.own) || self.body.reads_slot(i)
    }

    fn scratch(&self) -> Option<TensorType> {
        self.scratch.ty()
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{run, ty, types};

    #[test]
    fn scan_puts_the_sequence_axis_where_asked() {
        let a = run(
            17,
            "g (float[2] s, float[4,3,2] x) => (float[2] sf, float[2,3] ys) {
               ax = Constant <value: tensor = int64[1] {0}> ()
               sf, ys = Scan (s, x) <num_scan_inputs: int = 1, scan_input_axes: ints = [1],
                                    scan_output_axes: ints = [-1],
                                    body: graph = b (float[2] si, float[4,2] xi) => (float[2] so, float[2] y) {
                  r = ReduceSum <keepdims: int = 0> (xi, ax)
                  so = Add (si, r)
                  y = Identity (so)
               }>
             }",
        );
        assert_eq!(types(&a), [ty("float[2]"), ty("float[2, 3]")]);
    }
}
