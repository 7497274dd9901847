//! A compiled body (an If branch, a Loop or Scan body, a FlexAttention
//! modifier) and what its kernel needs around it: the scratch range that
//! holds the body's arena and the kernel's own buffers, the loop state's
//! slots, and the `let` bindings of the node's inputs, outputs and captures
//! in the emitted block.

use crate::emit::lit;
use crate::ir::{ElemType, Tensor, TensorType, ValueId, ValueKind};
use crate::ops::{CompiledGraph, Io, NodeCx, OpError, OpResult, Seed, invalid, unsupported};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// The arena's alignment: every buffer a loop keeps in its scratch starts
/// at a multiple of it, like the planner's.
const ALIGN: usize = onnx_codegen_runtime::arena::ARENA_ALIGN;

/// One compiled body.
pub(in crate::ops) struct Body {
    compiled: Box<dyn CompiledGraph>,
    /// The body's captures, and per capture its position among the node's
    /// step inputs.
    captures: Vec<ValueId>,
    capture_slots: Vec<usize>,
}

impl Body {
    /// The bytes of the body's own arena.
    pub(in crate::ops) fn arena_bytes(&self) -> usize {
        self.compiled.arena_bytes()
    }

    pub(in crate::ops) fn output_types(&self) -> Vec<TensorType> {
        self.compiled.output_types()
    }

    /// The output values known at generation time, if all are.
    pub(super) fn constant_outputs(&self) -> Option<Vec<Tensor>> {
        self.compiled.constant_outputs()
    }

    /// Whether step input `slot` of the node is read by this body at run
    /// time (a capture whose value is not known at generation time).
    pub(in crate::ops) fn reads_slot(&self, slot: usize) -> bool {
        self.captures
            .iter()
            .zip(&self.capture_slots)
            .any(|(&c, &s)| s == slot && self.compiled.reads_capture(c))
    }

    /// The body's statements; `inputs` binds its graph inputs in order,
    /// captures are bound as `_cf_cap{slot}`, `outputs` its graph outputs.
    pub(in crate::ops) fn tokens(
        &self,
        inputs: &[Ident],
        outputs: &[Ident],
        rt: &TokenStream,
    ) -> Result<TokenStream, String> {
        let mut ins = inputs.to_vec();
        ins.extend(self.capture_slots.iter().map(|s| format_ident!("_cf_cap{}", s)));
        self.compiled.tokens(ins, outputs.to_vec(), rt)
    }
}

/// Compiles `graph` (an attribute of `cx.node`) with its inputs typed by
/// `input_types`.
pub(in crate::ops) fn compile(
    cx: &NodeCx<'_>,
    attr: &str,
    input_types: &[TensorType],
) -> OpResult<Body> {
    let Some(graph) = cx.node.attr(attr).and_then(|a| a.graphs().first()) else {
        return invalid(format!("attribute '{attr}' (a graph) is required"));
    };
    if graph.inputs.len() != input_types.len() {
        return invalid(format!(
            "the body '{}' in '{attr}' has {} inputs; {} were expected",
            graph.name,
            graph.inputs.len(),
            input_types.len()
        ));
    }
    let captured = cx.node.captured_values();
    let own = cx.node.input_positions();
    let mut seeds: Vec<Seed> = graph
        .inputs
        .iter()
        .zip(input_types)
        .map(|(&value, ty)| Seed { value, ty: ty.clone(), constant: None })
        .collect();
    let mut capture_slots = Vec::new();
    for &c in &graph.captures {
        let ValueKind::Captured { outer } = graph.value(c).kind else { continue };
        let Some(pos) = captured.iter().position(|&o| o == outer) else {
            return invalid(format!("capture '{}' has no outer value", graph.value(c).name));
        };
        let slot = own + pos;
        let Some(ty) = cx.read_types.get(slot).and_then(Option::as_ref) else {
            return invalid(format!("the outer value '{}' has no type", graph.value(c).name));
        };
        let constant = cx.read_constants.get(slot).copied().flatten().cloned();
        seeds.push(Seed { value: c, ty: ty.clone(), constant });
        capture_slots.push(slot);
    }
    let what = format!("body '{}' ({attr})", graph.name);
    let compiled = cx.compiler.compile_subgraph(graph, &seeds, &what)?;
    Ok(Body { compiled, captures: graph.captures.clone(), capture_slots })
}

fn align(n: usize) -> usize {
    n.div_ceil(ALIGN).saturating_mul(ALIGN)
}

/// Element type in buffers the kernel owns (booleans as bytes).
pub(super) fn buffer_elem(elem: ElemType, rt: &TokenStream) -> OpResult<TokenStream> {
    if elem == ElemType::Bool {
        return Ok(quote!(u8));
    }
    if crate::ops::is_low_bit(elem) {
        return unsupported(format!("{elem} values in loop state are not supported yet"));
    }
    crate::ops::rust_type(elem, rt)
        .ok_or_else(|| OpError::Unsupported(format!("{elem} values in loop state")))
}

/// A buffer the kernel keeps in its scratch range.
struct Slot {
    ty: TensorType,
    offset: usize,
    bytes: usize,
}

/// The kernel's scratch range: the body arena first, then its own buffers.
pub(in crate::ops) struct Scratch {
    arena: usize,
    slots: Vec<Slot>,
    end: usize,
}

impl Scratch {
    pub(in crate::ops) fn new(arena: usize) -> Scratch {
        Scratch { arena, slots: Vec::new(), end: align(arena) }
    }

    pub(in crate::ops) fn add(&mut self, ty: &TensorType) -> OpResult<usize> {
        let Some(bytes) = ty.byte_size() else {
            return unsupported(format!("a loop buffer of type {ty} is too large"));
        };
        let offset = self.end;
        self.end = offset.saturating_add(align(bytes).max(ALIGN));
        self.slots.push(Slot { ty: ty.clone(), offset, bytes });
        Ok(self.slots.len() - 1)
    }

    pub(in crate::ops) fn ty(&self) -> Option<TensorType> {
        (self.end > 0).then(|| TensorType::new(ElemType::Uint8, vec![self.end]))
    }

    /// Splits the scratch bytes into `_cf_arena` and `_cf_slot{i}` typed views.
    pub(in crate::ops) fn bind(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let Some(scratch) = &io.scratch else {
            // Nothing to keep: no body arena and no slots.
            return quote!(let _cf_arena: &mut [u8] = &mut [];);
        };
        let mut names = vec![format_ident!("_cf_arena")];
        let mut ranges = vec![{
            let end = lit::usize_lit(self.arena);
            quote!(0..#end)
        }];
        let mut views = Vec::new();
        for (i, s) in self.slots.iter().enumerate() {
            let name = format_ident!("_cf_slot{}", i);
            let (a, b) = (lit::usize_lit(s.offset), lit::usize_lit(s.offset + s.bytes));
            ranges.push(quote!(#a..#b));
            let elem = buffer_elem(s.ty.elem, rt).unwrap_or_else(|_| quote!(u8));
            views.push(quote!(let #name: &mut [#elem] = #rt::arena::view_mut(#name)?;));
            names.push(name);
        }
        quote! {
            let [#(#names),*] = #rt::arena::split(&mut *#scratch, [#(#ranges),*])?;
            #(#views)*
        }
    }
}

/// The input expression `i` of `io`, or a compile error naming it.
pub(super) fn io_in(io: &Io, i: usize) -> TokenStream {
    match io.inputs.get(i).cloned().flatten() {
        Some(t) => t,
        None => quote!(compile_error!("a control-flow input is not bound")),
    }
}

/// Binds the node's captured inputs as `_cf_cap{slot}` (all at once, so a
/// binding never shadows a name another one reads).
pub(in crate::ops) fn bind_all(pairs: Vec<(Ident, TokenStream)>) -> TokenStream {
    if pairs.is_empty() {
        return quote!();
    }
    let (names, exprs): (Vec<Ident>, Vec<TokenStream>) = pairs.into_iter().unzip();
    quote!(let (#(#names,)*) = (#(#exprs,)*);)
}

pub(in crate::ops) fn captures(io: &Io, own: usize) -> Vec<(Ident, TokenStream)> {
    io.inputs
        .iter()
        .enumerate()
        .skip(own)
        .filter_map(|(slot, e)| e.clone().map(|e| (format_ident!("_cf_cap{}", slot), e)))
        .collect()
}

/// Binds a Loop's or Scan's captures, its own inputs (`_cf_in{i}`) and its
/// present outputs (`_cf_res{k}`).
pub(super) fn bind_loop_io(io: &Io, own: usize) -> TokenStream {
    let mut pairs = captures(io, own);
    for i in 0..own {
        if let Some(e) = io.inputs.get(i).cloned().flatten() {
            pairs.push((format_ident!("_cf_in{}", i), e));
        }
    }
    for (k, e) in io.outputs.iter().enumerate() {
        if let Some(e) = e {
            pairs.push((format_ident!("_cf_res{}", k), e.clone()));
        }
    }
    bind_all(pairs)
}

pub(super) fn idents(prefix: &str, n: usize) -> Vec<Ident> {
    (0..n).map(|i| Ident::new(&format!("{prefix}{i}"), Span::call_site())).collect()
}

pub(in crate::ops) fn error_tokens(message: &str) -> TokenStream {
    quote!(compile_error!(#message);)
}

/// Per-iteration buffers of a loop body: `_cf_slot` indices.
pub(super) struct LoopSlots {
    /// The state between iterations, per loop-carried value.
    pub(super) state: Vec<usize>,
    /// Where the body writes the next state.
    pub(super) next: Vec<usize>,
}

pub(super) fn state_slots(scratch: &mut Scratch, state: &[TensorType]) -> OpResult<LoopSlots> {
    let state_ix = state.iter().map(|t| scratch.add(t)).collect::<OpResult<Vec<_>>>()?;
    let next = state.iter().map(|t| scratch.add(t)).collect::<OpResult<Vec<_>>>()?;
    Ok(LoopSlots { state: state_ix, next })
}

pub(super) fn slot(i: usize) -> Ident {
    format_ident!("_cf_slot{}", i)
}

pub(in crate::ops) fn body_arena(body: &Body) -> TokenStream {
    if body.arena_bytes() > 0 {
        quote!(let arena: &mut [u8] = &mut *_cf_arena;)
    } else {
        quote!(let _ = &_cf_arena;)
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn bodies_go_through_the_rewriting_passes() {
        // A Gemm and the Relu after it in a branch: the pipeline fuses them
        // there as in a main graph, so the branch makes one call with the
        // activation in its epilogue and no Relu of its own.
        let src = "<ir_version: 8, opset_import: [\"\" : 17]>
            g (bool c, float[1, 2] x) => (float[1, 2] y) <float[2, 2] w = {1, 0, 0, 1}> {
              y = If (c) <then_branch: graph = t () => (float[1, 2] a) {
                            m = Gemm (x, w)
                            a = Relu (m)
                          },
                          else_branch: graph = e () => (float[1, 2] b) { b = Neg (x) }>
            }";
        let model = crate::text::parse_model(src, "t.onnxtxt").expect("parses");
        let opts = crate::generate::Options::default();
        let code = crate::generate::generate(&model, &opts, "t").expect("generates");
        let code = code.tokens.to_string().replace(' ', "");
        assert!(code.contains("gemm::sgemm("), "{code}");
        assert!(code.contains("Post::act(") && code.contains("Activation::Relu"), "{code}");
        assert!(!code.contains("Unary::Relu"), "{code}");
    }
}
