//! The whole pipeline behind every way in (CLI, build.rs, `onnx_model!`):
//! prepared IR → inference and folding → memory plan → Rust tokens.

use crate::diag::{Diagnostic, Error, PathStep, Result};
use crate::emit::{self, EmitOptions, WeightSource};
use crate::ir::{Model, TensorType};
use crate::limits::{self, Limits};
use crate::passes::infer::{self, InferOptions, Inferred, Unsupported};
use crate::passes::pipeline::{self, Config, Lowered};
use crate::passes::plan::{self, Buffer, Plan};
use crate::passes::{self, Prepared};
use crate::proto::ModelProto;
use proc_macro2::TokenStream;
use std::collections::{BTreeMap, BTreeSet};

/// What the user decides about the generated code.
#[derive(Clone, Debug)]
pub struct Options {
    /// The struct's name; by default from the model's file name or graph name.
    pub name: Option<String>,
    /// Values of symbolic dimensions.
    pub dims: BTreeMap<String, usize>,
    /// Whole shapes of graph inputs, by name (`--input-shape`): for
    /// dimensions the model leaves open (`-1`, unnamed or symbolic); a
    /// symbolic one is bound model-wide. They must agree with the model's
    /// fixed dimensions and rank.
    pub input_shapes: BTreeMap<String, Vec<usize>>,
    /// The runtime crate's path in the generated code.
    pub runtime_path: String,
    /// How the weights get into the code.
    pub weights: WeightSource,
    /// What the model may ask for: arena, weights, nodes, nesting.
    pub limits: Limits,
    /// The length and element types of sequence inputs, and which optional
    /// inputs are absent: fixed at generation time.
    pub io: passes::sequences::IoSpec,
    /// Whether the generated code may allocate: models with string tensors
    /// need it (and the runtime's `alloc` feature); refused without.
    pub alloc: bool,
    /// Whether the generated code may decode images with the runtime's
    /// `image` feature (which needs `std`): ImageDecoder needs it.
    pub image: bool,
    /// Integer inputs whose values are fixed at generation time (`--fix`),
    /// by name. Shapes computed from them become static; `run` still takes
    /// them and returns [`Error::InputValue`](onnx_codegen_runtime::Error)
    /// when the caller passes other values.
    pub fixed_inputs: BTreeMap<String, Vec<i64>>,
    /// Whether 3x3 stride-1 convolutions may run by Winograd's F(2x2, 3x3)
    /// (on by default): faster, but their weights take 16/9 the space, which
    /// flash-constrained targets may not afford (`--no-winograd`).
    pub winograd: bool,
    /// Graph inputs with an initializer that stay inputs of `run` in a
    /// model of IR version 3 or older, where such inputs are constants by
    /// default (`--runtime-input`; see [`passes::input_defaults`]). Each
    /// must name an input with an initializer.
    pub runtime_inputs: BTreeSet<String>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            name: None,
            dims: BTreeMap::new(),
            input_shapes: BTreeMap::new(),
            runtime_path: "::onnx_codegen_runtime".to_owned(),
            weights: WeightSource::Inline,
            limits: Limits::default(),
            io: passes::sequences::IoSpec::default(),
            alloc: false,
            image: false,
            fixed_inputs: BTreeMap::new(),
            winograd: true,
            runtime_inputs: BTreeSet::new(),
        }
    }
}

/// Everything known about a model after planning, whether or not code can
/// be generated: what `inspect` shows.
pub struct Analysis {
    pub prepared: Prepared,
    /// Nodes folded into their producer by [`passes::fuse`]; the summary
    /// still describes the model as written.
    pub fused: Vec<passes::fuse::Fused>,
    /// Nodes folded into another by [`passes::optimize`] after a first
    /// inference (zero Pads into Convs, BatchNormalizations into Convs and
    /// Gemms); counted in the summary's `nodes` and `ops`, but their outputs
    /// are no longer values of the model.
    pub rewrites: Vec<passes::optimize::Rewrite>,
    pub inferred: Inferred,
    /// The plan, when inference succeeded for the whole graph.
    pub plan: Option<Plan>,
    /// The graph outputs as the model declares them (sequences and
    /// optionals), and which outputs of the generated code hold each.
    pub outputs: Vec<passes::sequences::OutputGroup>,
}

/// A serialisable summary of an analysis (`inspect --json`).
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Summary {
    pub graph: String,
    pub nodes: usize,
    /// Nodes folded into their producer (counted in `nodes` and `ops`).
    pub fused: usize,
    pub steps: usize,
    pub folded: usize,
    pub ops: BTreeMap<String, usize>,
    pub inputs: Vec<ValueSummary>,
    pub outputs: Vec<ValueSummary>,
    pub values: Vec<ValueSummary>,
    pub arena_bytes: Option<usize>,
    pub arena_lower_bound_bytes: Option<usize>,
    pub weights_bytes: Option<usize>,
    pub buffers: Vec<Buffer>,
    pub unsupported: Vec<Unsupported>,
    pub errors: Vec<String>,
    /// What the model says that the compiler did not follow (validation's
    /// and inference's warnings), with where.
    pub warnings: Vec<String>,
    /// Whether the generated code needs the runtime's `alloc` feature
    /// (string tensors), and the `image` feature (ImageDecoder).
    pub needs_alloc: bool,
    pub needs_image: bool,
}

/// A value's name and inferred type.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ValueSummary {
    pub name: String,
    /// `float32[1, 3]`, or `null` where inference did not reach.
    pub r#type: Option<String>,
    pub elem: Option<String>,
    pub shape: Option<Vec<usize>>,
    /// Whether the value is known at generation time.
    pub constant: bool,
}

/// Runs the front end, inference and planning; never fails on unsupported
/// parts (they are listed), only on invalid models.
pub fn analyze(model: &ModelProto, opts: &Options) -> Result<Analysis> {
    limits::check_model(model, &opts.limits)?;
    let mut prepared = passes::prepare(model)?;
    limits::check_prepared(&prepared.model, &opts.limits)?;
    passes::input_defaults::resolve(&mut prepared.model, &opts.runtime_inputs)
        .map_err(Error::new)?;
    let g = &prepared.model.graph;
    let unknown: Vec<Diagnostic> = opts
        .fixed_inputs
        .keys()
        .filter(|name| !g.inputs.iter().any(|&v| &g.value(v).name == *name))
        .map(|name| {
            let constant = g.value_by_name(name).is_some_and(|v| g.value(v).constant().is_some());
            Diagnostic::error(if constant {
                format!(
                    "a value is fixed for '{name}', but '{name}' is a constant of graph '{}' (an \
                     initializer; in a model of IR version 3 or older an input with an \
                     initializer is one unless named a run-time input)",
                    g.name
                )
            } else {
                format!(
                    "a value is fixed for '{name}', but graph '{}' has no input of that name",
                    g.name
                )
            })
        })
        .collect();
    if !unknown.is_empty() {
        return Err(Error::new(unknown));
    }
    let mut opts = std::borrow::Cow::Borrowed(opts);
    if !opts.input_shapes.is_empty() {
        let dims = apply_input_shapes(&mut prepared.model.graph, &opts)?;
        opts.to_mut().dims = dims;
    }
    let opts = opts.as_ref();
    fold_fixed_inputs(&mut prepared.model.graph, opts);
    let differentiated = passes::gradient::expand(&mut prepared.model);
    let expanded = passes::sequences::expand(&mut prepared.model.graph, &opts.io);
    let config = Config {
        infer: InferOptions {
            dims: opts.dims.clone(),
            fixed_inputs: opts.fixed_inputs.clone(),
            ..Default::default()
        },
        winograd: opts.winograd,
    };
    let Lowered { mut inferred, fused, rewrites, .. } =
        pipeline::run(&mut prepared.model.graph, &config, &[]);
    inferred.unsupported.splice(0..0, expanded.unsupported);
    inferred.unsupported.splice(0..0, differentiated);
    let plan =
        inferred.is_complete().then(|| plan::plan_scheduled(&prepared.model.graph, &mut inferred));
    Ok(Analysis { prepared, fused, rewrites, inferred, plan, outputs: expanded.outputs })
}

/// Gives the graph inputs named in [`Options::input_shapes`] those static
/// shapes, and returns the symbolic dimensions with the values this binds
/// added. Refuses, naming the input and the dimension, a name that is no
/// graph input, a non-tensor input, a rank other than the model's, a size
/// other than a fixed one, and a symbol given two values.
fn apply_input_shapes(g: &mut crate::ir::Graph, opts: &Options) -> Result<BTreeMap<String, usize>> {
    use crate::ir::{Dim, Shape, Type};
    let mut dims = opts.dims.clone();
    let mut problems = Vec::new();
    // Which input bound each symbol, for the message when two disagree.
    let mut bound_by: BTreeMap<String, String> = BTreeMap::new();
    for (name, shape) in &opts.input_shapes {
        let Some(&v) = g.inputs.iter().find(|&&v| &g.value(v).name == name) else {
            let known: Vec<String> = g.inputs.iter().map(|&v| g.value(v).name.clone()).collect();
            problems.push(format!(
                "--input-shape gives a shape for '{name}', but graph '{}' has no input of that \
                 name (its inputs: {})",
                g.name,
                known.join(", ")
            ));
            continue;
        };
        let given = shape.iter().map(ToString::to_string).collect::<Vec<_>>().join(",");
        let elem = match &g.value(v).ty {
            Some(Type::Tensor { elem, shape: declared }) => {
                if let Some(declared) = &declared.dims {
                    if declared.len() != shape.len() {
                        problems.push(format!(
                            "input '{name}' has rank {} ({}), but --input-shape gives {} \
                             dimensions ({given})",
                            declared.len(),
                            Shape::known(declared.clone()),
                            shape.len()
                        ));
                        continue;
                    }
                    for (i, (d, &n)) in declared.iter().zip(shape).enumerate() {
                        match d {
                            Dim::Static(m) if *m != n as u64 => problems.push(format!(
                                "dimension {i} of input '{name}' is fixed at {m} by the model, \
                                 but --input-shape gives {n}"
                            )),
                            Dim::Symbolic(s) => match dims.get(s) {
                                Some(&m) if m != n => problems.push(format!(
                                    "dimension {i} of input '{name}' is the symbol '{s}', already \
                                     {m} ({}), but --input-shape gives {n}",
                                    bound_by.get(s).map_or("--dim".to_owned(), |o| format!(
                                        "from input '{o}'"
                                    ))
                                )),
                                Some(_) => {}
                                None => {
                                    dims.insert(s.clone(), n);
                                    bound_by.insert(s.clone(), name.clone());
                                }
                            },
                            _ => {}
                        }
                    }
                }
                *elem
            }
            None => None,
            Some(other) => {
                problems.push(format!(
                    "input '{name}' is {other}, not a tensor: --input-shape gives tensor shapes"
                ));
                continue;
            }
        };
        let static_dims: Vec<Dim> = shape.iter().map(|&n| Dim::Static(n as u64)).collect();
        g.value_mut(v).ty = Some(Type::Tensor { elem, shape: Shape::known(static_dims) });
    }
    if problems.is_empty() {
        Ok(dims)
    } else {
        Err(Error::new(problems.into_iter().map(Diagnostic::error).collect()))
    }
}

/// Every use of an input fixed at generation time (`--fix`) reads a
/// constant instead, so the passes before inference (sequences, which
/// unroll by constant counts) see its values too. The input stays in the
/// signature: inference marks it constant and the code checks the caller's
/// values against it.
fn fold_fixed_inputs(g: &mut crate::ir::Graph, opts: &Options) {
    use crate::ir::{Dim, Type};
    for (name, values) in &opts.fixed_inputs {
        let Some(&v) = g.inputs.iter().find(|&&v| &g.value(v).name == name) else { continue };
        let Some(Type::Tensor { elem: Some(elem), shape }) = &g.value(v).ty else { continue };
        let Some(dims) = shape.dims.as_ref().and_then(|dims| {
            dims.iter()
                .map(|d| match d {
                    Dim::Static(n) => usize::try_from(*n).ok(),
                    Dim::Symbolic(s) => opts.dims.get(s).copied(),
                    _ => None,
                })
                .collect::<Option<Vec<usize>>>()
        }) else {
            continue;
        };
        let ty = TensorType::new(*elem, dims);
        // A value that does not fit is reported by inference.
        let Ok(t) = infer::fixed_tensor(name, &ty, values) else { continue };
        let c = g.add_initializer(format!("{name} (fixed)"), t);
        g.replace_uses(v, c);
    }
}

impl Analysis {
    /// The model after the front end.
    pub fn model(&self) -> &Model {
        &self.prepared.model
    }

    /// A serialisable summary.
    pub fn summary(&self) -> Summary {
        let g = &self.prepared.model.graph;
        let value = |v: crate::ir::ValueId| {
            let ty: Option<&TensorType> = self.inferred.types[v.index()].as_ref();
            ValueSummary {
                name: g.value(v).name.clone(),
                r#type: ty.map(ToString::to_string),
                elem: ty.map(|t| t.elem.to_string()),
                shape: ty.map(|t| t.dims.clone()),
                constant: self.inferred.constants[v.index()].is_some(),
            }
        };
        let mut ops = BTreeMap::new();
        for (_, node) in g.nodes() {
            *ops.entry(node.op.op_type.clone()).or_insert(0) += 1;
        }
        for f in &self.fused {
            *ops.entry(f.consumer_op.clone()).or_insert(0) += 1;
        }
        for r in &self.rewrites {
            *ops.entry(r.removed_op.clone()).or_insert(0) += 1;
        }
        let mut values = Vec::new();
        for (id, node) in g.nodes() {
            for f in self.fused.iter().filter(|f| f.producer == id) {
                // The fused activation keeps the type of its input.
                let mut v = value(f.output);
                v.name = g.value(f.intermediate).name.clone();
                values.push(v);
            }
            values.extend(node.outputs.iter().flatten().map(|&v| value(v)));
        }
        Summary {
            graph: g.name.clone(),
            nodes: g.node_count() + self.fused.len() + self.rewrites.len(),
            fused: self.fused.len() + self.rewrites.len(),
            steps: self.inferred.steps.len(),
            folded: self.inferred.folded,
            ops,
            inputs: g.inputs.iter().map(|&v| value(v)).collect(),
            outputs: g.outputs.iter().map(|&v| value(v)).collect(),
            values,
            arena_bytes: self.plan.as_ref().map(|p| p.arena_bytes),
            arena_lower_bound_bytes: self.plan.as_ref().map(|p| p.arena_lower_bound_bytes),
            weights_bytes: self.plan.as_ref().map(|p| p.weights.len()),
            buffers: self.plan.as_ref().map(|p| p.buffers.clone()).unwrap_or_default(),
            unsupported: self.inferred.unsupported.clone(),
            errors: self.inferred.errors.iter().map(ToString::to_string).collect(),
            warnings: self
                .prepared
                .warnings
                .iter()
                .chain(&self.inferred.warnings)
                .map(ToString::to_string)
                .collect(),
            needs_alloc: !self.string_values().is_empty(),
            needs_image: !self.image_nodes().is_empty(),
        }
    }

    /// The names of the string values that exist at run time (not folded
    /// away): generated code holds them as `String`s, so it allocates.
    pub fn string_values(&self) -> Vec<String> {
        let g = &self.prepared.model.graph;
        let mut out: Vec<String> = Vec::new();
        let mut note = |v: crate::ir::ValueId| {
            let is_string = self.inferred.types[v.index()]
                .as_ref()
                .is_some_and(|t| t.elem == crate::ir::ElemType::String);
            let name = &g.value(v).name;
            if is_string && !out.contains(name) {
                out.push(name.clone());
            }
        };
        for &v in g.inputs.iter().chain(&g.outputs) {
            note(v);
        }
        for step in &self.inferred.steps {
            let node = g.node(step.node);
            for v in node.reads().iter().flatten().chain(node.outputs.iter().flatten()) {
                note(*v);
            }
        }
        out
    }

    /// The names of the ImageDecoder nodes that run: they need the runtime's
    /// `image` feature.
    pub fn image_nodes(&self) -> Vec<String> {
        let g = &self.prepared.model.graph;
        self.inferred
            .steps
            .iter()
            .map(|s| g.node(s.node))
            .filter(|n| n.op.op_type == "ImageDecoder")
            .map(|n| n.name.clone())
            .collect()
    }

    /// Refusals of features the options do not allow: string tensors without
    /// `alloc`, ImageDecoder without `image`.
    pub fn feature_problems(&self, opts: &Options) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        if !opts.alloc {
            for name in self.string_values() {
                out.push(Diagnostic::error(format!(
                    "value '{name}' is a string tensor: generated code for string tensors allocates; pass --alloc (Options::alloc, `alloc` in onnx_model!) and enable the runtime's `alloc` feature"
                )));
            }
        }
        if !opts.image {
            for name in self.image_nodes() {
                out.push(Diagnostic::error(format!(
                    "ImageDecoder node '{name}' decodes images with the runtime's `image` feature (which needs std); pass --image (Options::image, `image` in onnx_model!) and enable that feature"
                )));
            }
        }
        out
    }

    /// The limits the planned model goes over: arena, weights, and the size
    /// of each graph input and output (which the caller holds, but which
    /// the arena limit also bounds: a value of terabytes is no real model).
    /// Empty when the model was not planned.
    pub fn limit_problems(&self, limits: &Limits) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        let Some(plan) = &self.plan else { return out };
        if plan.arena_bytes == usize::MAX {
            out.push(Diagnostic::error(format!(
                "the arena would take more bytes than this machine can address (limit {} bytes)",
                limits.max_arena_bytes
            )));
        } else if plan.arena_bytes > limits.max_arena_bytes {
            out.push(Diagnostic::error(format!(
                "the arena would take {} bytes, over the limit of {} bytes",
                plan.arena_bytes, limits.max_arena_bytes
            )));
        }
        if plan.weights.len() > limits.max_weight_bytes {
            out.push(Diagnostic::error(format!(
                "the weights take {} bytes, over the limit of {} bytes",
                plan.weights.len(),
                limits.max_weight_bytes
            )));
        }
        let g = &self.prepared.model.graph;
        let io =
            g.inputs.iter().map(|v| ("input", v)).chain(g.outputs.iter().map(|v| ("output", v)));
        for (what, v) in io {
            let Some(t) = self.inferred.types.get(v.index()).and_then(Option::as_ref) else {
                continue;
            };
            let name = &g.value(*v).name;
            if t.elem == crate::ir::ElemType::String {
                continue;
            }
            match t.byte_size() {
                Some(b) if b <= limits.max_arena_bytes => {}
                Some(b) => out.push(Diagnostic::error(format!(
                    "graph {what} '{name}' ({t}) takes {b} bytes, over the limit of {} bytes",
                    limits.max_arena_bytes
                ))),
                None => out.push(Diagnostic::error(format!(
                    "graph {what} '{name}' ({t}) has more bytes than this machine can address"
                ))),
            }
        }
        out
    }

    /// Every problem that stops code generation, as diagnostics.
    pub fn problems(&self) -> Vec<Diagnostic> {
        let mut out = self.inferred.errors.clone();
        let graph = self.prepared.model.graph.name.clone();
        for u in &self.inferred.unsupported {
            out.push(Diagnostic::error(format!("not supported: {}", u.reason)).at_path(vec![
                PathStep::Graph(graph.clone()),
                PathStep::Node { name: u.node.clone(), op_type: u.op_type.clone() },
            ]));
        }
        out.extend(self.data_sized_reads());
        out
    }

    /// Data-sized values (see [`crate::ops::Kernel::data_sized`]) that a
    /// node reads: it would see the capacity, not the data's shape.
    fn data_sized_reads(&self) -> Vec<Diagnostic> {
        let g = &self.prepared.model.graph;
        let mut out = Vec::new();
        let mut uses = None;
        for step in &self.inferred.steps {
            let crate::ops::Lowered::Kernel(kernel) = &step.lowered else { continue };
            for (k, _, _) in kernel.data_sized() {
                let node = g.node(step.node);
                let Some(Some(v)) = node.outputs.get(k) else { continue };
                let uses = uses.get_or_insert_with(|| g.uses());
                let read = uses
                    .get(v.index())
                    .is_some_and(|u| u.iter().any(|u| !matches!(u, crate::ir::Use::Output { .. })));
                if read {
                    out.push(
                        Diagnostic::error(format!(
                            "not supported: value '{}' has a length that depends on the data; \
                             only a graph output may hold it, not the input of another node",
                            g.value(*v).name
                        ))
                        .at_path(vec![
                            PathStep::Graph(g.name.clone()),
                            PathStep::Node {
                                name: node.label(step.node),
                                op_type: node.op.op_type.clone(),
                            },
                        ]),
                    );
                }
            }
        }
        out
    }
}

/// What the model's generated code needs beyond the allocation-free
/// runtime, one sentence per feature (empty for most models): for
/// `inspect` and the report.
pub fn feature_notes(analysis: &Analysis) -> Vec<String> {
    let mut out = Vec::new();
    let strings = analysis.string_values();
    if !strings.is_empty() {
        out.push(format!(
            "`alloc` (--alloc): {} string tensor{} ({}), held as `String`s",
            strings.len(),
            if strings.len() == 1 { "" } else { "s" },
            strings.join(", ")
        ));
    }
    let images = analysis.image_nodes();
    if !images.is_empty() {
        out.push(format!(
            "`image` (--image, needs std): {} ImageDecoder node{}",
            images.len(),
            if images.len() == 1 { "" } else { "s" }
        ));
    }
    out
}

/// Generated code for one model.
pub struct Generated {
    /// The struct's name.
    pub struct_name: String,
    /// The generated items, as tokens (note markers included; see
    /// [`emit::format_file`] and [`emit::strip_notes`]).
    pub tokens: TokenStream,
    /// The weight blob (also inside `tokens` when weights are inline).
    pub weights: Vec<u8>,
    /// Sizes and the plan, for reports.
    pub summary: Summary,
    /// The types of the graph inputs and outputs, in `run`'s order.
    pub inputs: Vec<TensorType>,
    pub outputs: Vec<TensorType>,
    /// The graph outputs as the model declares them, each held by the next
    /// `count` entries of `outputs`.
    pub output_groups: Vec<passes::sequences::OutputGroup>,
}

impl Generated {
    /// The code as a formatted Rust file with a header comment.
    pub fn to_file_text(&self, source: &str) -> Result<String> {
        let header = format!(
            "// @generated by onnx-codegen {} from {source}. Do not edit.\n\n",
            env!("CARGO_PKG_VERSION")
        );
        emit::format_file(self.tokens.clone(), &header)
            .map_err(|e| Error::from(Diagnostic::error(format!("internal error: {e}"))))
    }

    /// The code as tokens for a macro expansion (no comment markers).
    pub fn to_tokens(&self) -> TokenStream {
        emit::strip_notes(self.tokens.clone())
    }
}

/// A model compiled and planned, ready to be emitted as Rust: what
/// [`compile`] returns. Emitting it ([`Compiled::emit`]) never runs the
/// compiler again, so a caller can look at the weights' size before choosing
/// where they live.
pub struct Compiled {
    analysis: Analysis,
    /// The emission the options asked for; callers may change it.
    defaults: EmitOptions,
}

/// Compiles `model` for code generation: every pass, then the checks that
/// refuse a model (unsupported parts, limits, features the options do not
/// allow, an invalid struct name). `source` names the model in the generated
/// documentation and defaults the struct's name.
pub fn compile(model: &ModelProto, opts: &Options, source: &str) -> Result<Compiled> {
    let analysis = analyze(model, opts)?;
    let problems = analysis.problems();
    if !problems.is_empty() {
        return Err(Error::new(problems));
    }
    if analysis.plan.is_none() {
        return Err(Error::from(Diagnostic::error("the model could not be planned")));
    }
    let mut refusals = analysis.limit_problems(&opts.limits);
    refusals.extend(analysis.feature_problems(opts));
    if !refusals.is_empty() {
        return Err(Error::new(refusals));
    }
    let struct_name = match &opts.name {
        Some(n) => {
            if syn::parse_str::<syn::Ident>(n).is_err() {
                return Err(Error::from(Diagnostic::error(format!(
                    "'{n}' is not a valid Rust identifier for the struct's name"
                ))));
            }
            n.clone()
        }
        None => emit::camel_ident(default_name(source, &analysis.model().graph.name)),
    };
    let runtime_path: TokenStream = opts.runtime_path.parse().map_err(|_| {
        Error::from(Diagnostic::error(format!("'{}' is not a valid path", opts.runtime_path)))
    })?;
    let defaults = EmitOptions {
        struct_name,
        runtime_path,
        weights: opts.weights.clone(),
        source: source.to_owned(),
    };
    Ok(Compiled { analysis, defaults })
}

impl Compiled {
    /// Everything known about the model.
    pub fn analysis(&self) -> &Analysis {
        &self.analysis
    }

    /// The weight blob the generated code reads (inline or from a file).
    pub fn weights(&self) -> &[u8] {
        self.analysis.plan.as_ref().map_or(&[], |p| &p.weights)
    }

    /// Whether a convolution runs by Winograd's F(2x2, 3x3), its weights
    /// stored transformed (16/9 as large): a caller building for a
    /// flash-constrained target may then compile without it as well.
    pub fn uses_winograd(&self) -> bool {
        self.analysis.model().graph.nodes().any(|(_, n)| {
            matches!(
                &n.lowering,
                Some(crate::ir::Lowering::Conv(c))
                    if matches!(c.weights, crate::ir::lowering::ConvWeights::Winograd { .. })
            )
        })
    }

    /// The emission the options asked for, to adjust (e.g. its `weights`).
    pub fn emit_options(&self) -> EmitOptions {
        self.defaults.clone()
    }

    /// The Rust code of the model.
    pub fn emit(&self, opts: &EmitOptions) -> Result<Generated> {
        let analysis = &self.analysis;
        let Some(plan) = &analysis.plan else {
            return Err(Error::from(Diagnostic::error("the model could not be planned")));
        };
        let tokens = emit::emit(analysis.model(), &analysis.inferred, plan, opts)
            .map_err(|e| Error::from(Diagnostic::error(format!("cannot emit code: {e}"))))?;
        let g = &analysis.model().graph;
        let types = |ids: &[crate::ir::ValueId]| -> Vec<TensorType> {
            ids.iter().filter_map(|v| analysis.inferred.types[v.index()].clone()).collect()
        };
        Ok(Generated {
            struct_name: opts.struct_name.clone(),
            tokens,
            weights: plan.weights.clone(),
            summary: analysis.summary(),
            inputs: types(&g.inputs),
            outputs: types(&g.outputs),
            output_groups: analysis.outputs.clone(),
        })
    }
}

/// Generates the Rust code for `model` as the options say: [`compile`],
/// then [`Compiled::emit`].
pub fn generate(model: &ModelProto, opts: &Options, source: &str) -> Result<Generated> {
    let compiled = compile(model, opts, source)?;
    compiled.emit(&compiled.emit_options())
}

/// The file stem of `source`, or the graph's name.
fn default_name<'a>(source: &'a str, graph: &'a str) -> &'a str {
    let stem = std::path::Path::new(source).file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let stem = stem.strip_suffix(".onnx").unwrap_or(stem);
    if stem.is_empty() || stem == "model" { graph } else { stem }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `graph` in a model importing opset 17, with dimension 0 of input 0
    /// written as `-1` (as exporters do; the text syntax has no way to).
    fn model(graph: &str, minus_one: bool) -> ModelProto {
        let src = format!("<ir_version: 8, opset_import: [\"\" : 17]>\n{graph}");
        let mut m = crate::text::parse_model(&src, "t.onnxtxt").expect("test model parses");
        if minus_one {
            use crate::proto::tensor_shape_proto::dimension::Value;
            use crate::proto::type_proto::Value as T;
            let g = m.graph.as_mut().expect("a graph");
            let Some(T::TensorType(t)) = g.input[0].r#type.as_mut().and_then(|t| t.value.as_mut())
            else {
                panic!("input 0 is a tensor")
            };
            t.shape.as_mut().expect("a shape").dim[0].value = Some(Value::DimValue(-1));
        }
        m
    }

    fn shapes(list: &[(&str, &[usize])]) -> Options {
        Options {
            input_shapes: list.iter().map(|(n, d)| ((*n).to_owned(), d.to_vec())).collect(),
            ..Options::default()
        }
    }

    fn messages(e: Error) -> Vec<String> {
        e.diagnostics().iter().map(|d| d.message.clone()).collect()
    }

    const OPEN: &str = "g (float[1,3,?,?] x, float[N] s) => (float[?,?,?,?] y, float[N] t) {
        y = Relu (x)
        t = Neg (s)
    }";

    #[test]
    fn input_shapes_fill_minus_one_unnamed_and_symbolic_dims() {
        let m = model(OPEN, true);
        // Without shapes, the open dimensions are refused, naming the way out.
        let e = compile(&m, &Options::default(), "t.onnx").err().expect("open dims are refused");
        let text = messages(e).join("\n");
        assert!(text.contains("dimension 0 of input 'x' is unknown"), "{text}");
        assert!(text.contains("--input-shape x=D,D,..."), "{text}");
        let opts = shapes(&[("x", &[1, 3, 48, 192]), ("s", &[5])]);
        let g = generate(&m, &opts, "t.onnx").expect("shapes given");
        let shown: Vec<String> = g.outputs.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["float[1, 3, 48, 192]", "float[5]"]);
        // A symbol bound by --dim agrees with the shape that uses it.
        let mut opts = shapes(&[("x", &[1, 3, 8, 8]), ("s", &[5])]);
        opts.dims.insert("N".into(), 5);
        assert!(compile(&m, &opts, "t.onnx").is_ok());
    }

    #[test]
    fn input_shape_problems_name_the_input_and_the_dimension() {
        let m = model(OPEN, true);
        let cases = [
            ("x=1,3,48 s=5", "input 'x' has rank 4 ([?,3,?,?]), but --input-shape gives 3"),
            (
                "x=1,4,48,192 s=5",
                "dimension 1 of input 'x' is fixed at 3 by the model, but --input-shape gives 4",
            ),
            ("z=1 s=5", "has no input of that name (its inputs: x, s)"),
        ];
        for (list, want) in cases {
            let mut opts = Options::default();
            for item in list.split(' ') {
                let (name, dims) = item.split_once('=').expect("NAME=D,...");
                let dims = dims.split(',').map(|d| d.parse().expect("a size")).collect();
                opts.input_shapes.insert(name.to_owned(), dims);
            }
            let e = analyze(&m, &opts).err().expect("refused");
            let text = messages(e).join("\n");
            assert!(text.contains(want), "{list}: {text}");
        }
        // Dimension 0 was -1: any size fits there.
        assert!(analyze(&model(OPEN, true), &shapes(&[("x", &[7, 3, 1, 1])])).is_ok());
        let mut opts = shapes(&[("s", &[5])]);
        opts.dims.insert("N".into(), 4);
        let text = messages(analyze(&m, &opts).err().expect("refused")).join("\n");
        assert!(
            text.contains("dimension 0 of input 's' is the symbol 'N', already 4 (--dim), but --input-shape gives 5"),
            "{text}"
        );
        let m2 = model("g (float[N] a, float[N] b) => (float[N] c) { c = Add (a, b) }", false);
        let text =
            messages(analyze(&m2, &shapes(&[("a", &[2]), ("b", &[3])])).err().expect("refused"))
                .join("\n");
        assert!(text.contains("already 2 (from input 'a'), but --input-shape gives 3"), "{text}");
    }
}
