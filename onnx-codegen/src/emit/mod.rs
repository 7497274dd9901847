//! Rust emission: one struct per graph, built as tokens with `quote`.
//!
//! The struct owns its arena (so the user decides where it lives: stack,
//! static, heap); `run` takes one `&[T; N]` per graph input and one
//! `&mut [T; M]` per graph output, and calls the runtime crate's kernels in
//! order. Weights are one aligned, read-only static blob. The struct also
//! implements the runtime's type-erased `Model` trait.
//!
//! Data-sized outputs (Unique's distinct values, say: their length along one
//! axis depends on the data) keep this shape of signature: their arrays have
//! the capacity, the largest the output can be, and only for models that
//! have such outputs `run` returns `Ok([usize; K])`, the length each took,
//! in output order (also `Model::data_sized` and `Model::run_bytes_sized`).
//! Such an array starts with the actual tensor, packed. Ordinary models'
//! `run` returns `Ok(())` as before. A data-sized value may only be a graph
//! output: a node reading it would see the capacity.
//!
//! Node names appear as comments above their calls in the formatted text
//! ([`format_file`]); the token form carries them as marker macro calls that
//! [`format_file`] turns into comments, and that [`strip_notes`] removes for
//! the token path (the `onnx_model!` macro).

pub mod lit;

use crate::ir::{ElemType, Graph, Model, TensorType, ValueId};
use crate::ops::{Io, Lowered};
use crate::passes::infer::Inferred;
use crate::passes::plan::{Action, Loc, Plan};
use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote};
use std::collections::{BTreeMap, BTreeSet};

/// How the generated code is shaped.
#[derive(Clone, Debug)]
pub struct EmitOptions {
    /// The struct's name (an upper-camel-case identifier).
    pub struct_name: String,
    /// The path of the runtime crate in the generated code.
    pub runtime_path: TokenStream,
    /// Where the weight blob comes from.
    pub weights: WeightSource,
    /// A line naming where the model came from, for the doc comment.
    pub source: String,
}

/// How the generated code gets its weights.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WeightSource {
    /// As a byte-string literal in the code (one token, cheap for rustc).
    Inline,
    /// With `include_bytes!` of this path (relative to the generated file
    /// when it is written out; the caller decides).
    File(String),
}

/// The marker that carries a comment through tokens.
const NOTE: &str = "__onnx_codegen_note";

/// Emits the whole generated module for `model`.
pub fn emit(
    model: &Model,
    inferred: &Inferred,
    plan: &Plan,
    opts: &EmitOptions,
) -> Result<TokenStream, String> {
    let g = &model.graph;
    let rt = &opts.runtime_path;
    let name = Ident::new(&opts.struct_name, Span::call_site());
    let arena_ty = format_ident!("{}Arena", opts.struct_name);
    let weights_static = format_ident!("{}_WEIGHTS", upper_snake(&opts.struct_name));
    let arena_bytes = Literal::usize_unsuffixed(plan.arena_bytes);
    let weight_bytes = Literal::usize_unsuffixed(plan.weights.len());

    let params = Params::new(model, inferred);

    let infos = |ids: &[ValueId]| -> Result<Vec<TokenStream>, String> {
        ids.iter()
            .map(|&v| {
                let ty = params.type_of(v)?;
                let name = &g.value(v).name;
                let shape = lit::usizes(&ty.dims);
                let elem = elem_tokens(ty.elem, rt)?;
                Ok(quote!(#rt::TensorInfo { name: #name, shape: #shape, elem: #elem }))
            })
            .collect()
    };
    let input_infos = infos(&g.inputs)?;
    let output_infos = infos(&g.outputs)?;

    // Inputs whose values were fixed at generation time (`--fix`): the code
    // folded them, so another value from the caller is an error.
    let mut fixed_checks = Vec::new();
    for (i, &v) in g.inputs.iter().enumerate() {
        let Some(t) = inferred.constants.get(v.index()).and_then(Option::as_ref) else {
            continue;
        };
        let ident = &params.inputs[i];
        let elem = params.type_of(v)?.elem;
        let values = t.to_i64s().ok_or("a fixed input that is not integer")?;
        let lits = values
            .iter()
            .map(|&x| match elem {
                ElemType::Bool => Some(if x != 0 { quote!(true) } else { quote!(false) }),
                _ => lit::int(i128::from(x), elem),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or("a fixed input that is not integer")?;
        fixed_checks.push(quote! {
            if *#ident != [#(#lits),*] {
                return Err(#rt::Error::InputValue);
            }
        });
    }

    let mut fn_params = Vec::new();
    for (i, &v) in g.inputs.iter().enumerate() {
        let ident = &params.inputs[i];
        let ty = params.array_type(v, rt, false)?;
        fn_params.push(quote!(#ident: #ty));
    }
    for (j, &v) in g.outputs.iter().enumerate() {
        let ident = &params.outputs[j];
        let ty = params.array_type(v, rt, true)?;
        fn_params.push(quote!(#ident: #ty));
    }

    let StepsCode { body, uses_weights, sized } = steps_code(&params, &inferred.steps, plan, rt)?;
    let data_sized = data_sized_outputs(g, &sized)?;
    let weights_item = match (&opts.weights, uses_weights) {
        (_, false) => quote!(),
        (WeightSource::Inline, true) => {
            let bytes = Literal::byte_string(&plan.weights);
            quote! {
                static #weights_static: #rt::Aligned<[u8; #weight_bytes]> = #rt::Aligned(*#bytes);
            }
        }
        (WeightSource::File(path), true) => quote! {
            static #weights_static: #rt::Aligned<[u8; #weight_bytes]> =
                #rt::Aligned(*include_bytes!(#path));
        },
    };
    let weights_binding =
        if uses_weights { quote!(let weights: &[u8] = &#weights_static.0;) } else { quote!() };

    let doc = struct_doc(model, inferred, plan, opts, &params);
    let run_doc = run_doc(model, &params, &data_sized);
    let run_bytes = run_bytes_body(model, &params, rt, false)?;
    let run_encoded = run_encoded_item(model, &params, rt)?;
    let unused_arena = if plan.arena_bytes == 0 { quote!(let _ = arena;) } else { quote!() };
    let (run_ok, run_result, sized_methods) = if data_sized.is_empty() {
        (quote!(()), quote!(()), quote!())
    } else {
        let k = Literal::usize_unsuffixed(data_sized.len());
        let lens = data_sized.iter().map(|(_, len, _)| len);
        let entries = data_sized.iter().map(|(j, _, axis)| {
            let (j, axis) = (Literal::usize_unsuffixed(*j), Literal::usize_unsuffixed(*axis));
            quote!(#rt::DataSized { output: #j, axis: #axis })
        });
        let sized_bytes = run_bytes_body(model, &params, rt, true)?;
        (
            quote!([usize; #k]),
            quote!([#(#lens),*]),
            quote! {
                fn data_sized(&self) -> &'static [#rt::DataSized] {
                    &[#(#entries),*]
                }

                fn run_bytes_sized(
                    &mut self,
                    inputs: &[&[u8]],
                    outputs: &mut [&mut [u8]],
                    lengths: &mut [usize],
                ) -> ::core::result::Result<(), #rt::Error> {
                    #sized_bytes
                }
            },
        )
    };

    Ok(quote! {
        #[cfg(target_endian = "big")]
        compile_error!("onnx-codegen lays weights out little-endian; big-endian targets are not supported");

        #(#[doc = #doc])*
        pub struct #name {
            arena: #arena_ty,
        }

        /// The arena: every intermediate value, at offsets planned at generation time.
        #[repr(C, align(64))]
        struct #arena_ty([u8; #arena_bytes]);

        #weights_item

        #[allow(dead_code)]
        impl #name {
            /// Bytes of the arena (intermediate values).
            pub const ARENA_BYTES: usize = #arena_bytes;
            /// Bytes of the read-only weights.
            pub const WEIGHT_BYTES: usize = #weight_bytes;
            /// The graph inputs, in the order `run` takes them.
            pub const INPUTS: &'static [#rt::TensorInfo] = &[#(#input_infos),*];
            /// The graph outputs, in the order `run` takes them.
            pub const OUTPUTS: &'static [#rt::TensorInfo] = &[#(#output_infos),*];

            /// A model with a zeroed arena.
            pub const fn new() -> Self {
                Self { arena: #arena_ty([0; #arena_bytes]) }
            }

            #(#[doc = #run_doc])*
            // One parameter per graph input and output is the contract.
            #[allow(clippy::too_many_arguments)]
            pub fn run(&mut self, #(#fn_params),*) -> ::core::result::Result<#run_ok, #rt::Error> {
                let arena: &mut [u8] = &mut self.arena.0;
                #unused_arena
                #weights_binding
                #(#fixed_checks)*
                #(#body)*
                Ok(#run_result)
            }
        }

        impl ::core::default::Default for #name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl #rt::Model for #name {
            fn inputs(&self) -> &'static [#rt::TensorInfo] {
                Self::INPUTS
            }

            fn outputs(&self) -> &'static [#rt::TensorInfo] {
                Self::OUTPUTS
            }

            fn run_bytes(
                &mut self,
                inputs: &[&[u8]],
                outputs: &mut [&mut [u8]],
            ) -> ::core::result::Result<(), #rt::Error> {
                #run_bytes
            }

            #run_encoded
            #sized_methods
        }
    })
}

/// The graph outputs among `sized` (data-sized values), as `(output,
/// local holding the length, axis)`, in output order. A data-sized value
/// may only be a graph output: a node reading it would see its capacity.
fn data_sized_outputs(
    g: &Graph,
    sized: &[(ValueId, TokenStream, usize)],
) -> Result<Vec<(usize, TokenStream, usize)>, String> {
    let uses = g.uses();
    for (v, _, _) in sized {
        let read = uses
            .get(v.index())
            .is_some_and(|u| u.iter().any(|u| !matches!(u, crate::ir::Use::Output { .. })));
        if read {
            return Err(format!(
                "value '{}' has a length that depends on the data; it can only be a graph \
                 output, not the input of another node",
                g.value(*v).name
            ));
        }
    }
    Ok(g.outputs
        .iter()
        .enumerate()
        .filter_map(|(j, v)| {
            sized.iter().find(|s| s.0 == *v).map(|(_, len, axis)| (j, len.clone(), *axis))
        })
        .collect())
}

/// Names and types of the `run` parameters (or of a subgraph's bindings).
struct Params<'a> {
    g: &'a Graph,
    types: &'a [Option<TensorType>],
    /// Per graph input (then per capture, for subgraphs): the binding.
    inputs: Vec<Ident>,
    /// Per graph output: the binding (a mutable slice or array).
    outputs: Vec<Ident>,
    /// Whether the bindings are slices (a body's) rather than arrays (`run`'s
    /// parameters), which decides how they are reborrowed.
    slices: bool,
}

impl<'a> Params<'a> {
    fn new(model: &'a Model, inferred: &'a Inferred) -> Params<'a> {
        let g = &model.graph;
        let mut taken: BTreeSet<String> = BTreeSet::new();
        let mut ident = |name: &str| {
            let base = snake_ident(name);
            let mut unique = base.clone();
            let mut n = 1;
            while taken.contains(&unique) {
                n += 1;
                unique = format!("{base}_{n}");
            }
            taken.insert(unique.clone());
            Ident::new(&unique, Span::call_site())
        };
        let inputs = g.inputs.iter().map(|&v| ident(&g.value(v).name)).collect();
        let outputs = g.outputs.iter().map(|&v| ident(&g.value(v).name)).collect();
        Params { g, types: &inferred.types, inputs, outputs, slices: false }
    }

    fn type_of(&self, v: ValueId) -> Result<&'a TensorType, String> {
        self.types
            .get(v.index())
            .and_then(Option::as_ref)
            .ok_or_else(|| format!("value '{}' has no type", self.g.value(v).name))
    }

    fn array_type(
        &self,
        v: ValueId,
        rt: &TokenStream,
        mutable: bool,
    ) -> Result<TokenStream, String> {
        let ty = self.type_of(v)?;
        if ty.elem == ElemType::String {
            // The caller's strings come borrowed; outputs are written in place.
            let n = Literal::usize_unsuffixed(ty.numel().ok_or("a shape too large")?);
            return Ok(if mutable {
                quote!(&mut [#rt::strings::String; #n])
            } else {
                quote!(&[&str; #n])
            });
        }
        let elem = crate::ops::rust_type(ty.elem, rt)
            .ok_or_else(|| format!("{} values cannot cross the model's boundary yet", ty.elem))?;
        let n = crate::ops::storage_len(ty).ok_or("a shape too large")?;
        let n = Literal::usize_unsuffixed(n);
        Ok(if mutable { quote!(&mut [#elem; #n]) } else { quote!(&[#elem; #n]) })
    }
}

/// The statements of `steps` (then the copies into outputs the plan asks
/// for), and whether they read the `weights` binding.
fn steps_code(
    params: &Params<'_>,
    steps: &[crate::passes::infer::Step],
    plan: &Plan,
    rt: &TokenStream,
) -> Result<StepsCode, String> {
    let g = params.g;
    let mut uses_weights = false;
    let mut body = Vec::new();
    let mut sized = Vec::new();
    for (t, step) in steps.iter().enumerate() {
        let node = g.node(step.node);
        let note = format!("{} ({})", node.label(step.node), node.op.op_type);
        let (Lowered::Kernel(kernel), Some(Action::Call { in_place })) =
            (&step.lowered, plan.actions.get(t).copied())
        else {
            body.push(note_tokens(&format!("{note}: a view, no code")));
            continue;
        };
        body.push(note_tokens(&note));
        let mut b = StepBuffers::default();
        let mut io_inputs = Vec::new();
        for (k, input) in node.reads().iter().enumerate() {
            let Some(v) = input else {
                io_inputs.push(None);
                continue;
            };
            if (in_place && Some(k) == kernel.in_place()) || !kernel.reads_input(k) {
                io_inputs.push(None);
                continue;
            }
            io_inputs.push(Some(b.read(*v, plan, params, rt)?));
        }
        let mut io_outputs = Vec::new();
        for output in &node.outputs {
            match output {
                Some(v) => io_outputs.push(Some(b.write(*v, plan, params, rt)?)),
                None => io_outputs.push(None),
            }
        }
        let scratch = match (plan.scratch.get(t).copied().flatten(), kernel.scratch()) {
            (Some((offset, len)), Some(ty)) => Some(b.scratch(offset, len, ty.elem, rt)?),
            _ => None,
        };
        let io = Io { inputs: io_inputs, outputs: io_outputs, in_place, scratch, rt: rt.clone() };
        let call = kernel.emit(&io);
        let setup = b.setup(rt);
        uses_weights |= b.uses_weights;
        let data_sized = kernel.data_sized();
        if data_sized.is_empty() {
            body.push(quote!({ #setup #call }));
            continue;
        }
        if params.slices {
            return Err(format!(
                "{note} gives outputs whose length depends on the data, which is not supported \
                 inside a control-flow body"
            ));
        }
        let len = format_ident!("_len{}", t);
        let slots = data_sized.iter().map(|d| d.2 + 1).max().unwrap_or(0);
        let slots = Literal::usize_unsuffixed(slots);
        body.push(quote!(let #len: [usize; #slots] = { #setup #call };));
        for (k, axis, slot) in data_sized {
            if let Some(Some(v)) = node.outputs.get(k) {
                let slot = Literal::usize_unsuffixed(slot);
                sized.push((*v, quote!(#len[#slot]), axis));
            }
        }
    }
    for &(v, j) in &plan.output_copies {
        let out = &params.outputs[j];
        let mut b = StepBuffers::default();
        let src = b.read(v, plan, params, rt)?;
        let setup = b.setup(rt);
        uses_weights |= b.uses_weights;
        let note = format!("output '{}' is a copy", g.value(g.outputs[j]).name);
        body.push(note_tokens(&note));
        // Booleans are `bool` in the caller's arrays and bytes in the arena.
        let elem = params.type_of(v)?.elem;
        if elem == ElemType::String {
            let dst = if params.slices { quote!(&mut *#out) } else { quote!(&mut #out[..]) };
            body.push(quote!({ #setup #rt::strings::copy(#src, #dst)?; }));
        } else if elem == ElemType::Bool {
            let dst = if params.slices { quote!(&mut *#out) } else { quote!(&mut #out[..]) };
            body.push(quote!({ #setup #rt::control::copy(#src, #dst)?; }));
        } else {
            body.push(quote!({ #setup #out.copy_from_slice(#src); }));
        }
    }
    Ok(StepsCode { body, uses_weights, sized })
}

/// What [`steps_code`] produces.
struct StepsCode {
    body: Vec<TokenStream>,
    /// Whether the statements read the `weights` binding.
    uses_weights: bool,
    /// Values whose length along an axis depends on the data: the value,
    /// the expression of its length after the step, and the axis.
    sized: Vec<(ValueId, TokenStream, usize)>,
}

/// The statements that run subgraph `g` (a control-flow body): `inputs`
/// names a binding per graph input then per capture (anything that
/// derefs to a slice), `outputs` a mutable slice per graph output, and
/// `arena` (when the plan needs one) is the bytes of its scratch range.
/// The body's weights become a static inside the block.
pub fn emit_body(
    g: &Graph,
    inferred: &Inferred,
    plan: &Plan,
    inputs: Vec<Ident>,
    outputs: Vec<Ident>,
    rt: &TokenStream,
) -> Result<TokenStream, String> {
    let params = Params { g, types: &inferred.types, inputs, outputs, slices: true };
    let StepsCode { body, uses_weights, .. } = steps_code(&params, &inferred.steps, plan, rt)?;
    let weights = if uses_weights {
        let n = Literal::usize_unsuffixed(plan.weights.len());
        let bytes = Literal::byte_string(&plan.weights);
        quote! {
            static BODY_WEIGHTS: #rt::Aligned<[u8; #n]> = #rt::Aligned(*#bytes);
            let weights: &[u8] = &BODY_WEIGHTS.0;
        }
    } else {
        quote!()
    };
    Ok(quote!(#weights #(#body)*))
}

/// The buffers one step touches: arena ranges to split, weight ranges, and
/// the caller's arrays.
#[derive(Default)]
struct StepBuffers {
    /// Distinct arena ranges, in first-use order.
    ranges: Vec<(usize, usize)>,
    /// Typed bindings: (binding, source, element type, mutable).
    views: Vec<(Ident, ViewSource, TokenStream, bool)>,
    /// Bindings by (offset, length, mutable): an empty value may share an
    /// offset with another.
    by_value: BTreeMap<(usize, usize, bool), Ident>,
    /// Whether a binding reads the weight blob.
    uses_weights: bool,
}

enum ViewSource {
    Arena(usize),
    /// A value of no bytes: an empty slice of its own.
    Empty,
    Weight(usize, usize),
}

impl StepBuffers {
    fn element(
        v: ValueId,
        params: &Params<'_>,
        rt: &TokenStream,
    ) -> Result<(TokenStream, ElemType), String> {
        let ty = params.type_of(v)?;
        // Booleans inside the arena and the weights are bytes (0 or 1).
        let elem = if ty.elem == ElemType::Bool {
            quote!(u8)
        } else {
            crate::ops::rust_type(ty.elem, rt).ok_or_else(|| {
                format!("{} values are not supported in generated code yet", ty.elem)
            })?
        };
        Ok((elem, ty.elem))
    }

    /// Refuses string values that are not graph inputs or outputs: strings
    /// have no place in the byte arena or the weight blob.
    fn boundary_string(v: ValueId, plan: &Plan, params: &Params<'_>) -> Result<(), String> {
        let boundary = matches!(plan.locs[v.index()], Some(Loc::Input(_) | Loc::Output(_)));
        let is_string = params.type_of(v).is_ok_and(|t| t.elem == ElemType::String);
        if is_string && !boundary {
            return Err(format!(
                "string value '{}' is an intermediate or a constant; generated code holds strings only in the graph's inputs and outputs yet",
                params.g.value(v).name
            ));
        }
        Ok(())
    }

    /// Where a view of `len` arena bytes from `offset` comes from. Empty
    /// values all sit at the same offset, so they get their own empty slices
    /// rather than sharing (and borrowing twice) one empty arena range.
    fn arena_source(&mut self, offset: usize, len: usize) -> ViewSource {
        if len == 0 { ViewSource::Empty } else { ViewSource::Arena(self.range(offset, len)) }
    }

    fn range(&mut self, offset: usize, len: usize) -> usize {
        match self.ranges.iter().position(|&r| r == (offset, len)) {
            Some(i) => i,
            None => {
                self.ranges.push((offset, len));
                self.ranges.len() - 1
            }
        }
    }

    /// An expression for reading value `v` as a typed slice.
    fn read(
        &mut self,
        v: ValueId,
        plan: &Plan,
        params: &Params<'_>,
        rt: &TokenStream,
    ) -> Result<TokenStream, String> {
        Self::boundary_string(v, plan, params)?;
        match plan.locs[v.index()] {
            Some(Loc::Input(i)) => {
                let p = &params.inputs[i];
                Ok(if params.slices { quote!(#p) } else { quote!(&#p[..]) })
            }
            Some(Loc::Output(j)) => {
                let p = &params.outputs[j];
                Ok(if params.slices { quote!(&*#p) } else { quote!(&#p[..]) })
            }
            Some(Loc::Weight { offset, len }) => {
                let (elem, _) = Self::element(v, params, rt)?;
                let ident = format_ident!("w{}", self.views.len());
                self.uses_weights = true;
                self.views.push((ident.clone(), ViewSource::Weight(offset, len), elem, false));
                Ok(quote!(#ident))
            }
            Some(Loc::Arena { offset, len }) => {
                let shared = if len == 0 {
                    None
                } else {
                    self.by_value
                        .get(&(offset, len, false))
                        .or(self.by_value.get(&(offset, len, true)))
                };
                if let Some(ident) = shared {
                    return Ok(quote!(#ident));
                }
                let (elem, _) = Self::element(v, params, rt)?;
                let ident = format_ident!("x{}", self.views.len());
                let source = self.arena_source(offset, len);
                self.views.push((ident.clone(), source, elem, false));
                self.by_value.insert((offset, len, false), ident.clone());
                Ok(quote!(#ident))
            }
            None => Err(format!("value '{}' has no storage", params.g.value(v).name)),
        }
    }

    /// An expression for writing value `v` as a mutable typed slice.
    fn write(
        &mut self,
        v: ValueId,
        plan: &Plan,
        params: &Params<'_>,
        rt: &TokenStream,
    ) -> Result<TokenStream, String> {
        Self::boundary_string(v, plan, params)?;
        match plan.locs[v.index()] {
            Some(Loc::Output(j)) => {
                let p = &params.outputs[j];
                Ok(if params.slices { quote!(&mut *#p) } else { quote!(&mut #p[..]) })
            }
            Some(Loc::Arena { offset, len }) => {
                let (elem, _) = Self::element(v, params, rt)?;
                let ident = format_ident!("y{}", self.views.len());
                let source = self.arena_source(offset, len);
                self.views.push((ident.clone(), source, elem, true));
                self.by_value.insert((offset, len, true), ident.clone());
                Ok(quote!(#ident))
            }
            other => {
                Err(format!("value '{}' would be written into {other:?}", params.g.value(v).name))
            }
        }
    }

    /// A mutable typed slice over a scratch range.
    fn scratch(
        &mut self,
        offset: usize,
        len: usize,
        elem: ElemType,
        rt: &TokenStream,
    ) -> Result<TokenStream, String> {
        let elem = crate::ops::rust_type(elem, rt).ok_or_else(|| format!("{elem} scratch"))?;
        let ident = format_ident!("s{}", self.views.len());
        let source = self.arena_source(offset, len);
        self.views.push((ident.clone(), source, elem, true));
        Ok(quote!(#ident))
    }

    /// The statements that split the arena and bind typed views.
    fn setup(&self, rt: &TokenStream) -> TokenStream {
        let mut out = TokenStream::new();
        if let [(o, l)] = self.ranges.as_slice() {
            let (a, b) = (Literal::usize_unsuffixed(*o), Literal::usize_unsuffixed(o + l));
            out.extend(quote! {
                let b0 = arena.get_mut(#a..#b).ok_or(#rt::Error::ArenaOutOfBounds)?;
            });
        } else if !self.ranges.is_empty() {
            let names: Vec<Ident> =
                (0..self.ranges.len()).map(|i| format_ident!("b{}", i)).collect();
            let ranges = self.ranges.iter().map(|&(o, l)| {
                let (a, b) = (Literal::usize_unsuffixed(o), Literal::usize_unsuffixed(o + l));
                quote!(#a..#b)
            });
            out.extend(
                quote!(let [#(#names),*] = #rt::arena::split(&mut *arena, [#(#ranges),*])?;),
            );
        }
        for (ident, source, elem, mutable) in &self.views {
            out.extend(match (source, mutable) {
                (ViewSource::Arena(r), false) => {
                    let b = format_ident!("b{}", r);
                    quote!(let #ident: &[#elem] = #rt::arena::view(#b)?;)
                }
                (ViewSource::Arena(r), true) => {
                    let b = format_ident!("b{}", r);
                    quote!(let #ident: &mut [#elem] = #rt::arena::view_mut(#b)?;)
                }
                (ViewSource::Empty, false) => quote!(let #ident: &[#elem] = &[];),
                (ViewSource::Empty, true) => quote!(let #ident: &mut [#elem] = &mut [];),
                (ViewSource::Weight(o, l), _) => {
                    let (a, b) = (Literal::usize_unsuffixed(*o), Literal::usize_unsuffixed(o + l));
                    quote!(let #ident: &[#elem] = #rt::arena::view(&weights[#a..#b])?;)
                }
            });
        }
        out
    }
}

fn note_tokens(text: &str) -> TokenStream {
    let marker = Ident::new(NOTE, Span::call_site());
    quote!(#marker!(#text);)
}

fn elem_tokens(elem: ElemType, rt: &TokenStream) -> Result<TokenStream, String> {
    let v = match elem {
        ElemType::Float => "F32",
        ElemType::Double => "F64",
        ElemType::Int8 => "I8",
        ElemType::Int16 => "I16",
        ElemType::Int32 => "I32",
        ElemType::Int64 => "I64",
        ElemType::Uint8 => "U8",
        ElemType::Uint16 => "U16",
        ElemType::Uint32 => "U32",
        ElemType::Uint64 => "U64",
        ElemType::Bool => "Bool",
        ElemType::Float16 => "F16",
        ElemType::Bfloat16 => "Bf16",
        ElemType::Float8E4M3FN => "F8E4M3FN",
        ElemType::Float8E4M3FNUZ => "F8E4M3FNUZ",
        ElemType::Float8E5M2 => "F8E5M2",
        ElemType::Float8E5M2FNUZ => "F8E5M2FNUZ",
        ElemType::Float8E8M0 => "F8E8M0",
        ElemType::Float4E2M1 => "F4E2M1",
        ElemType::Int4 => "I4",
        ElemType::Uint4 => "U4",
        ElemType::Int2 => "I2",
        ElemType::Uint2 => "U2",
        ElemType::String => "String",
        other => return Err(format!("{other} values cannot cross the model's boundary yet")),
    };
    let v = Ident::new(v, Span::call_site());
    Ok(quote!(#rt::Elem::#v))
}

/// The body of `run_bytes` (or, with `sized`, of `run_bytes_sized`, which
/// also copies the lengths `run` returns into `lengths`).
fn run_bytes_body(
    model: &Model,
    params: &Params<'_>,
    rt: &TokenStream,
    sized: bool,
) -> Result<TokenStream, String> {
    let g = &model.graph;
    let has_strings = g
        .inputs
        .iter()
        .chain(&g.outputs)
        .any(|&v| params.type_of(v).is_ok_and(|t| t.elem == ElemType::String));
    if has_strings {
        return Ok(quote! {
            let encoded = <Self as #rt::Model>::run_encoded(self, inputs)?;
            #rt::strings::write_outputs(&encoded, outputs)
        });
    }
    let ins: Vec<Ident> = (0..g.inputs.len()).map(|i| format_ident!("i{}", i)).collect();
    let outs: Vec<Ident> = (0..g.outputs.len()).map(|i| format_ident!("o{}", i)).collect();
    let mut convert = Vec::new();
    let mut args = Vec::new();
    let mut after = Vec::new();
    for (i, &v) in g.inputs.iter().enumerate() {
        let ty = params.type_of(v)?;
        let id = &ins[i];
        let n = crate::ops::storage_len(ty).ok_or("a shape too large")?;
        let n = Literal::usize_unsuffixed(n);
        if ty.elem == ElemType::Bool {
            convert.push(quote!(let #id = #rt::model::bools_from_bytes::<#n>(#id)?;));
            args.push(quote!(&#id));
        } else {
            let elem = crate::ops::rust_type(ty.elem, rt).ok_or("unsupported input type")?;
            convert.push(quote!(let #id: &[#elem; #n] = #rt::model::array_ref(#id)?;));
            args.push(quote!(#id));
        }
    }
    for (j, &v) in g.outputs.iter().enumerate() {
        let ty = params.type_of(v)?;
        let id = &outs[j];
        let n = crate::ops::storage_len(ty).ok_or("a shape too large")?;
        let n = Literal::usize_unsuffixed(n);
        if ty.elem == ElemType::Bool {
            let tmp = format_ident!("{}_bools", id);
            convert.push(quote!(let mut #tmp = [false; #n];));
            args.push(quote!(&mut #tmp));
            after.push(quote!(#rt::model::bools_to_bytes(&#tmp, #id)?;));
        } else {
            let elem = crate::ops::rust_type(ty.elem, rt).ok_or("unsupported output type")?;
            convert.push(quote!(let #id: &mut [#elem; #n] = #rt::model::array_mut(#id)?;));
            args.push(quote!(#id));
        }
    }
    let (call, report) = if sized {
        (
            quote!(let got = self.run(#(#args),*)?;),
            quote! {
                if lengths.len() != got.len() {
                    return Err(#rt::Error::ShapeMismatch);
                }
                lengths.copy_from_slice(&got);
            },
        )
    } else {
        (quote!(self.run(#(#args),*)?;), quote!())
    };
    Ok(quote! {
        let [#(#ins),*] = inputs else { return Err(#rt::Error::ShapeMismatch) };
        let [#(#outs),*] = outputs else { return Err(#rt::Error::ShapeMismatch) };
        #(#convert)*
        #call
        #(#after)*
        #report
        Ok(())
    })
}

/// `Model::run_encoded` for a model with string inputs or outputs (empty
/// for others, which keep the runtime's default): strings decoded from and
/// encoded into the runtime's length-prefixed form, every output in a vector
/// of its own.
fn run_encoded_item(
    model: &Model,
    params: &Params<'_>,
    rt: &TokenStream,
) -> Result<TokenStream, String> {
    let g = &model.graph;
    let is_string = |v: &ValueId| params.type_of(*v).is_ok_and(|t| t.elem == ElemType::String);
    if !g.inputs.iter().chain(&g.outputs).any(is_string) {
        return Ok(quote!());
    }
    let ins: Vec<Ident> = (0..g.inputs.len()).map(|i| format_ident!("i{}", i)).collect();
    let mut convert = Vec::new();
    let mut args = Vec::new();
    let mut encode = Vec::new();
    for (i, &v) in g.inputs.iter().enumerate() {
        let ty = params.type_of(v)?;
        let id = &ins[i];
        let n = Literal::usize_unsuffixed(crate::ops::storage_len(ty).ok_or("a shape too large")?);
        match ty.elem {
            ElemType::String => {
                convert.push(quote!(let #id = #rt::strings::decode::<#n>(#id)?;));
                args.push(quote!(&#id));
            }
            ElemType::Bool => {
                convert.push(quote!(let #id = #rt::model::bools_from_bytes::<#n>(#id)?;));
                args.push(quote!(&#id));
            }
            e => {
                let elem = crate::ops::rust_type(e, rt).ok_or("unsupported input type")?;
                convert.push(quote!(let #id: &[#elem; #n] = #rt::model::array_ref(#id)?;));
                args.push(quote!(#id));
            }
        }
    }
    for (j, &v) in g.outputs.iter().enumerate() {
        let ty = params.type_of(v)?;
        let id = format_ident!("o{}", j);
        let n = crate::ops::storage_len(ty).ok_or("a shape too large")?;
        let n_lit = Literal::usize_unsuffixed(n);
        let elem = match ty.elem {
            ElemType::String => quote!(#rt::strings::String),
            e => crate::ops::rust_type(e, rt).ok_or("unsupported output type")?,
        };
        convert.push(quote! {
            let mut #id: #rt::strings::Vec<#elem> =
                ::core::iter::repeat_with(<#elem as ::core::default::Default>::default)
                    .take(#n_lit)
                    .collect();
        });
        args.push(quote! {
            <&mut [#elem; #n_lit]>::try_from(#id.as_mut_slice())
                .map_err(|_| #rt::Error::ShapeMismatch)?
        });
        encode.push(match ty.elem {
            ElemType::String => quote!(#rt::strings::encode(&#id)?),
            ElemType::Bool => quote!(#rt::strings::bool_bytes(&#id)),
            _ => quote!(#rt::strings::pod_bytes(&#id)),
        });
    }
    Ok(quote! {
        fn run_encoded(
            &mut self,
            inputs: &[&[u8]],
        ) -> ::core::result::Result<#rt::strings::Vec<#rt::strings::Vec<u8>>, #rt::Error> {
            let [#(#ins),*] = inputs else { return Err(#rt::Error::ShapeMismatch) };
            #(#convert)*
            self.run(#(#args),*)?;
            Ok(#rt::strings::Vec::from([#(#encode),*]))
        }
    })
}

fn struct_doc(
    model: &Model,
    inferred: &Inferred,
    plan: &Plan,
    opts: &EmitOptions,
    params: &Params<'_>,
) -> Vec<String> {
    let g = &model.graph;
    let mut doc = vec![format!(
        " The ONNX model `{}`, compiled ahead of time by onnx-codegen {}.",
        g.name,
        env!("CARGO_PKG_VERSION")
    )];
    doc.push(String::new());
    doc.push(format!(" Source: {}.", opts.source));
    let m = &model.metadata;
    if !m.producer_name.is_empty() {
        doc.push(
            format!(" Producer: {} {}.", m.producer_name, m.producer_version).replace(" .", "."),
        );
    }
    if !m.doc_string.is_empty() {
        doc.push(String::new());
        doc.extend(m.doc_string.lines().map(|l| format!(" {l}")));
    }
    doc.push(String::new());
    doc.push(" # Signature".to_owned());
    doc.push(String::new());
    doc.extend(signature_lines(model, params));
    doc.push(String::new());
    doc.push(format!(
        " Arena: {} bytes (lower bound {}); weights: {} bytes; {} steps ({} nodes folded at generation time).",
        plan.arena_bytes,
        plan.arena_lower_bound_bytes,
        plan.weights.len(),
        inferred.steps.len(),
        inferred.folded
    ));
    doc
}

fn signature_lines(model: &Model, params: &Params<'_>) -> Vec<String> {
    let g = &model.graph;
    let mut lines = Vec::new();
    // The parameter's name is shown when it differs from the ONNX name.
    let line = |kind: &str, v: ValueId, ident: &Ident| {
        let ty = params.type_of(v).map(ToString::to_string).unwrap_or_default();
        let name = &g.value(v).name;
        let param = ident.to_string();
        if *name == param {
            format!(" - {kind} `{name}`: {ty}")
        } else {
            format!(" - {kind} `{name}` (parameter `{param}`): {ty}")
        }
    };
    for (i, &v) in g.inputs.iter().enumerate() {
        lines.push(line("input", v, &params.inputs[i]));
    }
    for (j, &v) in g.outputs.iter().enumerate() {
        lines.push(line("output", v, &params.outputs[j]));
    }
    lines
}

fn run_doc(
    model: &Model,
    params: &Params<'_>,
    sized: &[(usize, TokenStream, usize)],
) -> Vec<String> {
    let mut doc =
        vec![" Runs the model: reads the inputs, writes every output.".to_owned(), String::new()];
    doc.extend(signature_lines(model, params));
    doc.push(String::new());
    if !sized.is_empty() {
        doc.push(
            " Some outputs have a length that depends on the data: their arrays have".to_owned(),
        );
        doc.push(
            " the largest size they can take, and `run` returns, in this order, the".to_owned(),
        );
        doc.push(" length each took along one axis:".to_owned());
        for (j, _, axis) in sized {
            let ident = &params.outputs[*j];
            doc.push(format!(" - `{ident}`, axis {axis}"));
        }
        doc.push(String::new());
        doc.push(
            " Each such array then starts with the tensor of its shape with that axis".to_owned(),
        );
        doc.push(
            " set to the returned length, packed row-major; the rest means nothing.".to_owned(),
        );
        doc.push(String::new());
    }
    doc.push(" Fails only where data can make a kernel fail (an index out of range, an".to_owned());
    doc.push(" integer division by zero); the outputs are then unspecified.".to_owned());
    doc
}

/// `snake_case` identifier for an ONNX name: non-alphanumerics become `_`, a
/// leading digit gets a prefix, keywords get a trailing `_`.
pub fn snake_ident(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .collect();
    while s.contains("__") {
        s = s.replace("__", "_");
    }
    let s = s.trim_matches('_');
    let mut s = if s.is_empty() { "value".to_owned() } else { s.to_owned() };
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s = format!("v{s}");
    }
    if syn::parse_str::<Ident>(&s).is_err() || is_internal_name(&s) {
        s.push('_');
    }
    s
}

/// Names the generated `run` uses for itself.
const RESERVED: &[&str] =
    &["arena", "weights", "self", "inputs", "outputs", "indices", "concat_out"];

/// Whether generated code may bind `name` as a local of its own: the reserved
/// names, the buffer and view locals (`b0`, `x1`, `y2`, `w3`, `s4`, `i0`,
/// `o0`) and the `<param>_bools` copies. A parameter with such a name would be
/// shadowed inside a step and read the wrong buffer.
fn is_internal_name(name: &str) -> bool {
    let numbered = |prefix: char| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
    };
    RESERVED.contains(&name) || name.ends_with("_bools") || "bioswxy".chars().any(numbered)
}

/// `UpperCamelCase` identifier for a model name.
pub fn camel_ident(name: &str) -> String {
    let mut out = String::new();
    for part in name.split(|c: char| !c.is_ascii_alphanumeric()).filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "Model");
    }
    out
}

fn upper_snake(camel: &str) -> String {
    let mut out = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Formats generated tokens as a file, turning note markers into comments.
pub fn format_file(tokens: TokenStream, header: &str) -> Result<String, String> {
    let file: syn::File =
        syn::parse2(tokens).map_err(|e| format!("generated code does not parse: {e}"))?;
    let text = prettyplease::unparse(&file);
    let mut out = String::with_capacity(text.len() + header.len());
    out.push_str(header);
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        // A long note is wrapped: the marker, its string, `);` on three lines.
        if trimmed.strip_prefix(NOTE) == Some("!(") {
            let indent = &line[..line.len() - trimmed.len()];
            let note = lines.next().unwrap_or_default().trim();
            let note = note.trim_end_matches(',').trim_start_matches('"').trim_end_matches('"');
            lines.next();
            out.push_str(indent);
            out.push_str("// ");
            out.push_str(&unescape(note));
        } else if let Some(rest) = trimmed.strip_prefix(NOTE).and_then(|r| r.strip_prefix("!(\"")) {
            let indent = &line[..line.len() - trimmed.len()];
            let note = rest.trim_end_matches("\");");
            out.push_str(indent);
            out.push_str("// ");
            out.push_str(&unescape(note));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    Ok(out)
}

/// Removes the note markers, for code handed over as tokens.
pub fn strip_notes(tokens: TokenStream) -> TokenStream {
    use proc_macro2::TokenTree;
    let mut out = Vec::new();
    let mut iter = tokens.into_iter().peekable();
    while let Some(tt) = iter.next() {
        match &tt {
            TokenTree::Ident(i) if i == NOTE => {
                // Skip `! ( "..." ) ;`.
                for _ in 0..3 {
                    iter.next();
                }
            }
            TokenTree::Group(g) => {
                let mut ng = proc_macro2::Group::new(g.delimiter(), strip_notes(g.stream()));
                ng.set_span(g.span());
                out.push(TokenTree::Group(ng));
            }
            _ => out.push(tt),
        }
    }
    out.into_iter().collect()
}

fn unescape(s: &str) -> String {
    s.replace("\\\"", "\"").replace("\\'", "'").replace("\\\\", "\\")
}
