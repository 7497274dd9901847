//! `Loop`: the body runs in a Rust `while` loop over the loop-carried
//! state (kept in two slots of the kernel's scratch, one read, one
//! written), writing its scan outputs row by row.

use super::body::{
    Body, LoopSlots, Scratch, bind_loop_io, body_arena, buffer_elem, compile, error_tokens, idents,
    slot, state_slots,
};
use crate::emit::lit;
use crate::ir::{ElemType, Graph, TensorType};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use proc_macro2::TokenStream;
use quote::{format_ident, quote};

/// A body input's type: `given`, unless the body declares a static shape
/// with the same element count (a rank-1 `[1]` for a scalar, say).
fn body_input_type(body: Option<&Graph>, i: usize, given: TensorType) -> TensorType {
    let declared = body.and_then(|g| g.inputs.get(i).map(|&v| &g.value(v).ty)).and_then(|ty| {
        let Some(crate::ir::Type::Tensor { shape, .. }) = ty else { return None };
        shape
            .dims
            .as_ref()?
            .iter()
            .map(|d| match d {
                crate::ir::Dim::Static(n) => usize::try_from(*n).ok(),
                _ => None,
            })
            .collect::<Option<Vec<usize>>>()
    });
    match declared {
        Some(dims) if dims.iter().product::<usize>() == given.numel().unwrap_or(0) => {
            TensorType::new(given.elem, dims)
        }
        _ => given,
    }
}

fn body_graph<'a>(cx: &NodeCx<'a>) -> Option<&'a Graph> {
    cx.node.attr("body").and_then(|a| a.graphs().first())
}

pub(super) struct LoopRule;

struct LoopShape {
    body: Body,
    state: Vec<TensorType>,
    /// Per scan output: the type of one iteration's slice.
    slices: Vec<TensorType>,
    /// The number of iterations the scan outputs hold.
    rows: Option<usize>,
}

impl LoopRule {
    fn shape(cx: &NodeCx<'_>) -> OpResult<LoopShape> {
        let own = cx.node.input_positions();
        if let Some(m) = cx.opt_input(0)
            && (m.elem != ElemType::Int64 || m.numel() != Some(1))
        {
            return invalid(format!("the trip count M of Loop must be one int64, got {m}"));
        }
        if let Some(c) = cx.opt_input(1)
            && (c.elem != ElemType::Bool || c.numel() != Some(1))
        {
            return invalid(format!("the condition of Loop must be one bool, got {c}"));
        }
        let state: Vec<TensorType> =
            (2..own).map(|i| cx.input(i).cloned()).collect::<OpResult<_>>()?;
        let g = body_graph(cx);
        let mut ins = vec![
            body_input_type(g, 0, TensorType::new(ElemType::Int64, vec![])),
            body_input_type(g, 1, TensorType::new(ElemType::Bool, vec![])),
        ];
        ins.extend(state.iter().cloned());
        let body = compile(cx, "body", &ins)?;
        let outs = body.output_types();
        let n = state.len();
        if outs.len() < 1 + n || outs.len() - 1 - n + n != cx.node.outputs.len() {
            return invalid(format!(
                "the Loop body has {} outputs; 1 + {n} loop-carried + {} scan outputs were expected",
                outs.len(),
                cx.node.outputs.len().saturating_sub(n)
            ));
        }
        if outs[0].elem != ElemType::Bool || outs[0].numel() != Some(1) {
            return invalid(format!(
                "the body's condition output must be one bool, got {}",
                outs[0]
            ));
        }
        for (k, (s, o)) in state.iter().zip(&outs[1..]).enumerate() {
            if s != o {
                return unsupported(format!(
                    "loop-carried value {k} enters as {s} but the body returns {o}; its type must not change between iterations"
                ));
            }
        }
        let slices: Vec<TensorType> = outs[1 + n..].to_vec();
        let mut rows = None;
        if !slices.is_empty() {
            let declared = cx.declared_output(n).and_then(|t| t.dims.first().copied());
            let trips = cx.constant(0).and_then(|t| t.to_i64s()).and_then(|v| v.first().copied());
            // A scan output that reaches a declared value through
            // shape-keeping ops (a Cast, say) fixes the count too; the
            // generated code checks it after the loop.
            let implied = || {
                slices.iter().enumerate().find_map(|(k, t)| {
                    let d = cx.expected_dims(n + k)?;
                    (d.len() == t.rank() + 1).then(|| d.first().copied()).flatten()
                })
            };
            rows = declared.or(trips.and_then(|m| usize::try_from(m.max(0)).ok())).or_else(implied);
            if rows.is_none() {
                return unsupported(
                    "the number of Loop iterations (the length of its scan outputs) must be known at generation time: give a constant trip count or declare the scan outputs' shapes",
                );
            }
        }
        Ok(LoopShape { body, state, slices, rows })
    }
}

impl OpRule for LoopRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let s = Self::shape(cx)?;
        let mut outs = s.state.clone();
        for t in &s.slices {
            let mut dims = vec![s.rows.unwrap_or(0)];
            dims.extend(&t.dims);
            outs.push(t.with_dims(dims));
        }
        Ok(outs)
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let s = Self::shape(cx)?;
        let mut scratch = Scratch::new(s.body.arena_bytes());
        let slots = state_slots(&mut scratch, &s.state)?;
        let n = s.state.len();
        let mut slice_slots = Vec::new();
        for (k, t) in s.slices.iter().enumerate() {
            slice_slots.push(match cx.node.output(n + k) {
                Some(_) => None,
                None => Some(scratch.add(t)?),
            });
        }
        for t in &s.state {
            buffer_elem(t.elem, &quote!(rt))?;
        }
        let slice_lens = s
            .slices
            .iter()
            .map(|t| {
                crate::ops::storage_len(t).ok_or_else(|| OpError::Unsupported("too large".into()))
            })
            .collect::<OpResult<Vec<_>>>()?;
        let kernel = LoopKernel {
            own: cx.node.inputs.len(),
            has_m: cx.opt_input(0).is_some(),
            has_cond: cx.opt_input(1).is_some(),
            present: cx.node.outputs.iter().map(Option::is_some).collect(),
            body: s.body,
            scratch,
            slots,
            slice_slots,
            slice_lens,
            rows: s.rows,
        };
        let ins = idents("_cf_bin", 2 + n);
        let outs = idents("_cf_bout", 1 + n + kernel.slice_lens.len());
        kernel
            .body
            .tokens(&ins, &outs, &quote!(::onnx_codegen_runtime))
            .map_err(|m| OpError::Unsupported(format!("Loop body: {m}")))?;
        Ok(Lowered::Kernel(Box::new(kernel)))
    }
}

struct LoopKernel {
    own: usize,
    has_m: bool,
    has_cond: bool,
    /// Per node output: whether it is computed.
    present: Vec<bool>,
    body: Body,
    scratch: Scratch,
    slots: LoopSlots,
    /// Per scan output: a scratch slot when the node's output is absent.
    slice_slots: Vec<Option<usize>>,
    slice_lens: Vec<usize>,
    rows: Option<usize>,
}

impl Kernel for LoopKernel {
    fn eval(&self, _: &[Option<&HostTensor>], _: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(ElemType::Int64))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = self.slots.state.len();
        let bind = bind_loop_io(io, self.own);
        let split = self.scratch.bind(io);
        let init = (0..n).map(|k| {
            let (src, dst) = (format_ident!("_cf_in{}", k + 2), slot(self.slots.state[k]));
            quote!(#rt::control::copy(#src, &mut *#dst)?;)
        });
        let max = if self.has_m {
            quote!(let _cf_max: i64 = #rt::control::count(_cf_in0)?;)
        } else {
            quote!(let _cf_max: i64 = i64::MAX;)
        };
        let go = if self.has_cond {
            quote!(let mut _cf_go: bool = #rt::control::flag(_cf_in1)?;)
        } else {
            quote!(let _cf_go: bool = true;)
        };
        let mut bin = vec![quote!(&_cf_iter[..]), quote!(&_cf_cin[..])];
        bin.extend(self.slots.state.iter().map(|&s| {
            let s = slot(s);
            quote!(&*#s)
        }));
        let mut bout = vec![quote!(&mut _cf_cout[..])];
        bout.extend(self.slots.next.iter().map(|&s| {
            let s = slot(s);
            quote!(&mut *#s)
        }));
        for (k, (sl, &len)) in self.slice_slots.iter().zip(&self.slice_lens).enumerate() {
            bout.push(match sl {
                Some(s) => {
                    let s = slot(*s);
                    quote!(&mut *#s)
                }
                None => {
                    let r = format_ident!("_cf_res{}", n + k);
                    let len = lit::usize_lit(len);
                    quote!(#rt::control::row_mut(&mut *#r, _cf_row, #len)?)
                }
            });
        }
        let bin_names = idents("_cf_bin", bin.len());
        let bout_names = idents("_cf_bout", bout.len());
        let body =
            self.body.tokens(&bin_names, &bout_names, rt).unwrap_or_else(|m| error_tokens(&m));
        let arena = body_arena(&self.body);
        let advance = (0..n).map(|k| {
            let (src, dst) = (slot(self.slots.next[k]), slot(self.slots.state[k]));
            quote!(#rt::control::copy(&*#src, &mut *#dst)?;)
        });
        let update = if self.has_cond { quote!(_cf_go = _cf_cout[0];) } else { quote!() };
        let finish = (0..n).filter(|&k| self.present.get(k) == Some(&true)).map(|k| {
            let (src, dst) = (slot(self.slots.state[k]), format_ident!("_cf_res{}", k));
            quote!(#rt::control::copy(&*#src, &mut *#dst)?;)
        });
        let check = match self.rows {
            Some(rows) if !self.slice_lens.is_empty() => {
                let rows = lit::usize_lit(rows);
                quote! {
                    if _cf_row_count != #rows {
                        return Err(#rt::Error::ShapeMismatch);
                    }
                }
            }
            _ => quote!(let _ = _cf_row_count;),
        };
        quote!({
            #bind
            #split
            #(#init)*
            #max
            #go
            let mut _cf_i: i64 = 0;
            let mut _cf_row_count: usize = 0;
            while _cf_i < _cf_max && _cf_go {
                let _cf_row: usize = _cf_row_count;
                let _cf_iter: [i64; 1] = [_cf_i];
                let _cf_cin: [bool; 1] = [_cf_go];
                let mut _cf_cout: [bool; 1] = [true];
                {
                    #arena
                    let (#(#bin_names,)* #(#bout_names,)*) = (#(#bin,)* #(#bout,)*);
                    #body
                }
                #(#advance)*
                #update
                let _ = (_cf_row, &_cf_cout);
                _cf_i += 1;
                _cf_row_count = _cf_row_count.saturating_add(1);
            }
            #(#finish)*
            #check
        })
    }

    fn reads_input(&self, i: usize) -> bool {
        i < self.own || self.body.reads_slot(i)
    }

    fn scratch(&self) -> Option<TensorType> {
        self.scratch.ty()
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported};

    #[test]
    fn loop_scan_outputs_take_the_constant_trip_count() {
        let a = run(
            17,
            "g (float[3] v) => (float[3] last, float[5,3] all) {
               m = Constant <value: tensor = int64 {5}> ()
               last, all = Loop (m, \"\", v) <body: graph = b (int64 i, bool c, float[3] s) => (bool co, float[3] so, float[3] row) {
                  co = Identity (c)
                  so = Add (s, s)
                  row = Identity (so)
               }>
             }",
        );
        assert_eq!(types(&a), [ty("float[3]"), ty("float[5, 3]")]);
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty(), "{:?}", unsupported(&a));
    }

    #[test]
    fn loop_state_that_changes_shape_is_unsupported() {
        let a = run(
            17,
            "g (float[3] v) => (float[6] last) {
               m = Constant <value: tensor = int64 {2}> ()
               last = Loop (m, \"\", v) <body: graph = b (int64 i, bool c, float[3] s) => (bool co, float[6] so) {
                  co = Identity (c)
                  so = Concat <axis: int = 0> (s, s)
               }>
             }",
        );
        let u = unsupported(&a);
        assert!(u.len() == 1 && u[0].contains("must not change"), "{u:?}");
    }

    #[test]
    fn loop_scan_outputs_of_unknown_length_are_unsupported() {
        let a = run(
            17,
            "g (int64 m, float[3] v) => (float[3] last, float[?,3] all) {
               last, all = Loop (m, \"\", v) <body: graph = b (int64 i, bool c, float[3] s) => (bool co, float[3] so, float[3] row) {
                  co = Identity (c)
                  so = Add (s, s)
                  row = Identity (so)
               }>
             }",
        );
        let u = unsupported(&a);
        assert!(u.len() == 1 && u[0].contains("known at generation time"), "{u:?}");
    }
}
