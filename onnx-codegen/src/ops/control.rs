//! Control flow: If, Loop and Scan.
//!
//! A body (a branch, a loop body) is compiled by the same passes as the
//! main graph: inferred with its inputs typed by the node and its captures
//! typed (and, when known, valued) by the enclosing graph, planned into its
//! own arena, and emitted as a block of statements. The node becomes one
//! kernel whose scratch range in the enclosing arena holds the body's arena
//! (shared by both branches of an If, reused by every iteration of a loop)
//! and the loop state. The enclosing graph sees the outer values a body
//! captures as extra inputs of the node (after its own), so they stay alive
//! until the node runs and are bound for it.
//!
//! Optionals whose presence is known at generation time need no run-time
//! form: a present optional is its tensor, so `Optional(x)` and
//! `OptionalGetElement(x)` are views of `x` and `OptionalHasElement` is a
//! constant. Empty optionals and optional graph inputs are not supported yet.
//!
//! Loops over tensors run as Rust loops, never unrolled; their state must
//! keep one static type across iterations, and scan outputs have a length
//! fixed at generation time (checked against the iteration count at run
//! time). Loops and Ifs over sequences never reach these rules:
//! `passes::sequences` unrolls such loops and splits such branches' outputs
//! into their elements first.

use super::{
    CompiledGraph, EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError,
    OpResult, OpRule, Seed, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, Graph, Tensor, TensorType, ValueId, ValueKind};
use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};

/// The arena's alignment: every buffer a loop keeps in its scratch starts
/// at a multiple of it, like the planner's.
const ALIGN: usize = onnx_codegen_runtime::arena::ARENA_ALIGN;

/// The rule for `op_type`, if it is a control-flow operator.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "If" => Some(&IfRule),
        "Loop" => Some(&LoopRule),
        "Scan" => Some(&ScanRule),
        "Optional" | "OptionalGetElement" => Some(&PresentRule),
        "OptionalHasElement" => Some(&HasElementRule),
        _ => None,
    }
}

/// One compiled body.
pub(super) struct Body {
    compiled: Box<dyn CompiledGraph>,
    /// The body's captures, and per capture its position among the node's
    /// step inputs.
    captures: Vec<ValueId>,
    capture_slots: Vec<usize>,
}

impl Body {
    /// The bytes of the body's own arena.
    pub(super) fn arena_bytes(&self) -> usize {
        self.compiled.arena_bytes()
    }

    pub(super) fn output_types(&self) -> Vec<TensorType> {
        self.compiled.output_types()
    }

    /// The output values known at generation time, if all are.
    fn constant_outputs(&self) -> Option<Vec<Tensor>> {
        self.compiled.constant_outputs()
    }

    /// Whether step input `slot` of the node is read by this body at run
    /// time (a capture whose value is not known at generation time).
    pub(super) fn reads_slot(&self, slot: usize) -> bool {
        self.captures
            .iter()
            .zip(&self.capture_slots)
            .any(|(&c, &s)| s == slot && self.compiled.reads_capture(c))
    }

    /// The body's statements; `inputs` binds its graph inputs in order,
    /// captures are bound as `_cf_cap{slot}`, `outputs` its graph outputs.
    pub(super) fn tokens(
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
pub(super) fn compile(cx: &NodeCx<'_>, attr: &str, input_types: &[TensorType]) -> OpResult<Body> {
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
fn buffer_elem(elem: ElemType, rt: &TokenStream) -> OpResult<TokenStream> {
    if elem == ElemType::Bool {
        return Ok(quote!(u8));
    }
    if super::is_low_bit(elem) {
        return unsupported(format!("{elem} values in loop state are not supported yet"));
    }
    super::rust_type(elem, rt)
        .ok_or_else(|| OpError::Unsupported(format!("{elem} values in loop state")))
}

/// A buffer the kernel keeps in its scratch range.
struct Slot {
    ty: TensorType,
    offset: usize,
    bytes: usize,
}

/// The kernel's scratch range: the body arena first, then its own buffers.
pub(super) struct Scratch {
    arena: usize,
    slots: Vec<Slot>,
    end: usize,
}

impl Scratch {
    pub(super) fn new(arena: usize) -> Scratch {
        Scratch { arena, slots: Vec::new(), end: align(arena) }
    }

    pub(super) fn add(&mut self, ty: &TensorType) -> OpResult<usize> {
        let Some(bytes) = ty.byte_size() else {
            return unsupported(format!("a loop buffer of type {ty} is too large"));
        };
        let offset = self.end;
        self.end = offset.saturating_add(align(bytes).max(ALIGN));
        self.slots.push(Slot { ty: ty.clone(), offset, bytes });
        Ok(self.slots.len() - 1)
    }

    pub(super) fn ty(&self) -> Option<TensorType> {
        (self.end > 0).then(|| TensorType::new(ElemType::Uint8, vec![self.end]))
    }

    /// Splits the scratch bytes into `_cf_arena` and `_cf_slot{i}` typed views.
    pub(super) fn bind(&self, io: &Io) -> TokenStream {
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
fn io_in(io: &Io, i: usize) -> TokenStream {
    match io.inputs.get(i).cloned().flatten() {
        Some(t) => t,
        None => quote!(compile_error!("a control-flow input is not bound")),
    }
}

/// Binds the node's captured inputs as `_cf_cap{slot}` (all at once, so a
/// binding never shadows a name another one reads).
pub(super) fn bind_all(pairs: Vec<(Ident, TokenStream)>) -> TokenStream {
    if pairs.is_empty() {
        return quote!();
    }
    let (names, exprs): (Vec<Ident>, Vec<TokenStream>) = pairs.into_iter().unzip();
    quote!(let (#(#names,)*) = (#(#exprs,)*);)
}

pub(super) fn captures(io: &Io, own: usize) -> Vec<(Ident, TokenStream)> {
    io.inputs
        .iter()
        .enumerate()
        .skip(own)
        .filter_map(|(slot, e)| e.clone().map(|e| (format_ident!("_cf_cap{}", slot), e)))
        .collect()
}

/// Binds a Loop's or Scan's captures, its own inputs (`_cf_in{i}`) and its
/// present outputs (`_cf_res{k}`).
fn bind_loop_io(io: &Io, own: usize) -> TokenStream {
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

fn idents(prefix: &str, n: usize) -> Vec<Ident> {
    (0..n).map(|i| Ident::new(&format!("{prefix}{i}"), Span::call_site())).collect()
}

pub(super) fn error_tokens(message: &str) -> TokenStream {
    quote!(compile_error!(#message);)
}

// ---------------------------------------------------------------------------
// If.

struct IfRule;

impl IfRule {
    fn cond(cx: &NodeCx<'_>) -> OpResult<Option<bool>> {
        let c = cx.input(0)?;
        if c.elem != ElemType::Bool || c.numel() != Some(1) {
            return invalid(format!("the condition of If must be one bool, got {c}"));
        }
        Ok(cx.constant(0).and_then(|t| t.to_i64s()).and_then(|v| v.first().map(|&b| b != 0)))
    }

    fn branches(cx: &NodeCx<'_>) -> OpResult<(Option<Body>, Option<Body>)> {
        Ok(match Self::cond(cx)? {
            Some(true) => (Some(compile(cx, "then_branch", &[])?), None),
            Some(false) => (None, Some(compile(cx, "else_branch", &[])?)),
            None => {
                (Some(compile(cx, "then_branch", &[])?), Some(compile(cx, "else_branch", &[])?))
            }
        })
    }
}

/// One static type per If output when the branches disagree only in dims:
/// both hold the same element type and count (so the same bytes, whichever
/// branch runs, `float` and `float[1]` say), and the model fixes the
/// output's dims (declared, or implied downstream) with that count. `None`
/// when some output's types cannot be reconciled.
fn reconcile(cx: &NodeCx<'_>, t: &[TensorType], e: &[TensorType]) -> Option<Vec<TensorType>> {
    if t.len() != e.len() {
        return None;
    }
    t.iter()
        .zip(e)
        .enumerate()
        .map(|(k, (a, b))| {
            if a == b {
                return Some(a.clone());
            }
            let n = a.numel()?;
            if a.elem != b.elem || b.numel() != Some(n) {
                return None;
            }
            let dims = cx.expected_dims(k)?;
            let count = dims.iter().try_fold(1usize, |p, &d| p.checked_mul(d))?;
            (count == n).then(|| a.with_dims(dims.to_vec()))
        })
        .collect()
}

impl OpRule for IfRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (then, els) = Self::branches(cx)?;
        let t = then.as_ref().map(Body::output_types);
        let e = els.as_ref().map(Body::output_types);
        let outs = match (t, e) {
            (Some(t), Some(e)) => match reconcile(cx, &t, &e) {
                Some(outs) => outs,
                None => {
                    let show = |v: &[TensorType]| {
                        v.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
                    };
                    return unsupported(format!(
                        "the branches of If produce different types ({} and {}); outputs must have one static type",
                        show(&t),
                        show(&e)
                    ));
                }
            },
            (Some(v), None) | (None, Some(v)) => v,
            (None, None) => Vec::new(),
        };
        if outs.len() != cx.node.outputs.len() {
            return invalid(format!(
                "If has {} outputs but its branch has {}",
                cx.node.outputs.len(),
                outs.len()
            ));
        }
        Ok(outs)
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        if Self::cond(cx)?.is_none() {
            return Ok(None);
        }
        let (then, els) = Self::branches(cx)?;
        Ok(then.or(els).and_then(|b| b.constant_outputs()))
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let (then, els) = Self::branches(cx)?;
        let arena = [&then, &els].into_iter().flatten().map(|b| b.arena_bytes()).max().unwrap_or(0);
        let kernel = IfKernel {
            own: cx.node.inputs.len(),
            outputs: cx.node.outputs.len(),
            then,
            els,
            arena,
        };
        let rt = quote!(::onnx_codegen_runtime);
        for b in [&kernel.then, &kernel.els].into_iter().flatten() {
            b.tokens(&[], &idents("_cf_out", kernel.outputs), &rt)
                .map_err(|m| OpError::Unsupported(format!("If body: {m}")))?;
        }
        Ok(Lowered::Kernel(Box::new(kernel)))
    }
}

struct IfKernel {
    own: usize,
    outputs: usize,
    then: Option<Body>,
    els: Option<Body>,
    arena: usize,
}

impl Kernel for IfKernel {
    fn eval(&self, _: &[Option<&HostTensor>], _: &mut [HostTensor]) -> EvalResult {
        Err(EvalError::Type(ElemType::Bool))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let outs = idents("_cf_out", self.outputs);
        let mut pairs = captures(io, self.own);
        for (k, o) in outs.iter().enumerate() {
            let e = io.outputs.get(k).cloned().flatten();
            let e = e.unwrap_or_else(|| quote!(compile_error!("an If output is absent")));
            pairs.push((o.clone(), e));
        }
        let bind = bind_all(pairs);
        let arena = match (&io.scratch, self.arena) {
            (Some(s), n) if n > 0 => quote!(let arena: &mut [u8] = &mut *#s;),
            _ => quote!(),
        };
        let body = |b: &Body| b.tokens(&[], &outs, rt).unwrap_or_else(|m| error_tokens(&m));
        let code = match (&self.then, &self.els) {
            (Some(t), Some(e)) => {
                let (t, e) = (body(t), body(e));
                let c = io_in(io, 0);
                quote!(if #rt::control::flag(#c)? { #t } else { #e })
            }
            (Some(b), None) | (None, Some(b)) => body(b),
            (None, None) => quote!(),
        };
        quote!({ #bind #arena #code })
    }

    fn reads_input(&self, i: usize) -> bool {
        if i < self.own {
            return self.then.is_some() && self.els.is_some();
        }
        [&self.then, &self.els].into_iter().flatten().any(|b| b.reads_slot(i))
    }

    fn scratch(&self) -> Option<TensorType> {
        (self.arena > 0).then(|| TensorType::new(ElemType::Uint8, vec![self.arena]))
    }
}

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

/// Per-iteration buffers of a loop body: `_cf_slot` indices.
struct LoopSlots {
    /// The state between iterations, per loop-carried value.
    state: Vec<usize>,
    /// Where the body writes the next state.
    next: Vec<usize>,
}

fn state_slots(scratch: &mut Scratch, state: &[TensorType]) -> OpResult<LoopSlots> {
    let state_ix = state.iter().map(|t| scratch.add(t)).collect::<OpResult<Vec<_>>>()?;
    let next = state.iter().map(|t| scratch.add(t)).collect::<OpResult<Vec<_>>>()?;
    Ok(LoopSlots { state: state_ix, next })
}

fn slot(i: usize) -> Ident {
    format_ident!("_cf_slot{}", i)
}

pub(super) fn body_arena(body: &Body) -> TokenStream {
    if body.arena_bytes() > 0 {
        quote!(let arena: &mut [u8] = &mut *_cf_arena;)
    } else {
        quote!(let _ = &_cf_arena;)
    }
}

// ---------------------------------------------------------------------------
// Loop.

struct LoopRule;

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
            .map(|t| super::storage_len(t).ok_or_else(|| OpError::Unsupported("too large".into())))
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

// ---------------------------------------------------------------------------
// Scan.

struct ScanRule;

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
                super::axis(a, t.dims.len(), "scan_input_axes entry")?
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
                let axis = super::axis(a, t.dims.len() + 1, "scan_output_axes entry")?;
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
            if super::is_low_bit(t.elem) {
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

// ---------------------------------------------------------------------------
// Optionals known at generation time.

/// `Optional(x)` and `OptionalGetElement(x)` with `x` a tensor (or a present
/// optional, which is its tensor): a view of `x`.
struct PresentRule;

impl OpRule for PresentRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        match cx.opt_input(0) {
            Some(t) => Ok(vec![t.clone()]),
            None if cx.node.op.op_type == "Optional" => {
                unsupported("empty optionals (Optional without an input) are not supported yet")
            }
            None => invalid("OptionalGetElement needs an input"),
        }
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Alias)
    }
}

/// `OptionalHasElement`: true for a tensor (a present optional), false for
/// an absent input.
struct HasElementRule;

impl OpRule for HasElementRule {
    fn infer(&self, _cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![TensorType::new(ElemType::Bool, vec![])])
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        unsupported("OptionalHasElement is always folded")
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        let present = cx.opt_input(0).is_some();
        let t = Tensor::from_bytes(
            "has_element",
            ElemType::Bool,
            Vec::new(),
            bytes::Bytes::from(vec![u8::from(present)]),
        )
        .map_err(|_| OpError::Invalid("a bool scalar".into()))?;
        Ok(Some(vec![t]))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn if_takes_its_branches_type_and_captures_outer_values() {
        let a = run(
            17,
            "g (bool c, float[2,3] x) => (float[2,3] y) {
               y = If (c) <then_branch: graph = t () => (float[2,3] a) { a = Neg (x) },
                           else_branch: graph = e () => (float[2,3] b) { b = Relu (x) }>
             }",
        );
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty());
    }

    #[test]
    fn if_branches_of_one_element_count_take_the_dims_the_model_fixes() {
        const BRANCHES: &str = "<then_branch: graph = t () => (a) { a = Neg (s) },
                                 else_branch: graph = e () => (b) { b = Neg (v) }>";
        // float and float[1]: the same bytes; the declared output says [1].
        let a = run(
            17,
            &format!("g (bool c, float s, float[1] v) => (float[1] y) {{ y = If (c) {BRANCHES} }}"),
        );
        assert_eq!(types(&a), [ty("float[1]")]);
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty());
        // A declared value downstream, through a Cast, fixes them too.
        let a = run(
            17,
            &format!(
                "g (bool c, float s, float[1] v) => (double[1, 1] y) {{
                   z = If (c) {BRANCHES}
                   y = Cast <to: int = 11> (z)
                 }}"
            ),
        );
        assert_eq!(types(&a), [ty("double[1, 1]")]);
        assert!(unsupported(&a).is_empty() && errors(&a).is_empty());
        // Nothing fixes them (z is broadcast over w): unsupported.
        let a = run(
            17,
            &format!(
                "g (bool c, float s, float[1] v, float[3] w) => (float[3] y) {{
                   z = If (c) {BRANCHES}
                   y = Add (z, w)
                 }}"
            ),
        );
        assert!(
            unsupported(&a)[0].contains("different types (float[] and float[1])"),
            "{:?}",
            unsupported(&a)
        );
        // Different element counts never share a type.
        let a = run(
            17,
            "g (bool c, float[2] s, float[1] v) => (float[2] y) {
               y = If (c) <then_branch: graph = t () => (a) { a = Neg (s) },
                           else_branch: graph = e () => (b) { b = Neg (v) }>
             }",
        );
        assert!(unsupported(&a)[0].contains("different types"), "{:?}", unsupported(&a));
    }

    #[test]
    fn if_with_a_known_condition_folds_to_the_taken_branch() {
        let a = run(
            17,
            "g (float[2] x) => (float[2] y, float[2] z) {
               c = Constant <value: tensor = bool {0}> ()
               k = Constant <value: tensor = float[2] {1, 2}> ()
               y = If (c) <then_branch: graph = t () => (float[2] a) { a = Neg (k) },
                           else_branch: graph = e () => (float[2] b) { b = Add (k, k) }>
               z = Add (x, y)
             }",
        );
        assert_eq!(value(&a, 0), [2.0, 4.0]);
        assert_eq!(a.inferred.steps.len(), 1);
    }

    #[test]
    fn if_branches_of_different_shapes_are_unsupported() {
        let a = run(
            17,
            "g (bool c) => (float[2] y) {
               y = If (c) <then_branch: graph = t () => (float[2] a) { a = Constant <value: tensor = float[2] {1, 2}> () },
                           else_branch: graph = e () => (float[3] b) { b = Constant <value: tensor = float[3] {1, 2, 3}> () }>
             }",
        );
        let u = unsupported(&a);
        assert!(u.len() == 1 && u[0].contains("different types"), "{u:?}");
    }

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

    #[test]
    fn optionals_known_at_generation_time_fold() {
        let a = run(
            18,
            "g (float[2] x) => (bool h, bool e, float[2] y) {
               o = Optional (x)
               h = OptionalHasElement (o)
               e = OptionalHasElement (\"\")
               y = OptionalGetElement (o)
             }",
        );
        assert_eq!(value(&a, 0), [1.0]);
        assert_eq!(value(&a, 1), [0.0]);
        assert_eq!(types(&a)[2], ty("float[2]"));
    }

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
