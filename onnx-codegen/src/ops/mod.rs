//! Operators: their schemas, and for every operator the compiler supports,
//! its rule.
//!
//! A rule ([`OpRule`]) says how a node's output types follow from its input
//! types (and from input values known at generation time), and how the node
//! becomes code: an alias of its input's bytes (Reshape and the like), or a
//! [`Kernel`]. A kernel holds the parameters of one call into the runtime
//! crate and can both run it on the host ([`Kernel::eval`], used by constant
//! folding) and write the Rust call ([`Kernel::emit`]), so folding and the
//! generated code always run the same function with the same parameters.
//!
//! One file per operator family, or one folder for the heavy families (its
//! `mod.rs` registers the family's operators and holds what they share,
//! and a file per operator or kind of operator holds its rule, kernel and
//! emission); [`rule`] maps an operator to its rule. Adding an operator
//! touches its family's file here, its kernel in the runtime crate, and one
//! line in [`rule`].

mod host;
#[cfg(test)]
pub(crate) mod testing;

#[doc(hidden)]
pub use onnx_codegen_runtime::{bf16, f16};

pub mod attention;
pub mod control;
pub mod conv;
pub mod elementwise;
mod epilogue;
pub mod extra;
pub mod gemm;
pub mod image;
pub mod indexing;
pub mod layout;
pub mod logic;
pub mod loss;
pub mod misc;
pub mod ml;
pub mod norm;
pub mod quant;
pub mod rnn;
pub mod shape_ops;
pub mod signal;
pub mod softmax;
pub mod strings;
pub mod text;

pub use crate::ir::schema::*;
pub use host::{HostData, HostTensor};

use crate::ir::{AttrValue, ElemType, Graph, Lowering, Node, Tensor, TensorType, ValueId};
use proc_macro2::TokenStream;

/// Why a rule could not handle a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpError {
    /// The model is wrong (shapes that do not fit, an attribute out of range).
    Invalid(String),
    /// The model is fine, but this compiler does not handle it yet.
    Unsupported(String),
}

/// Shorthand for rules.
pub type OpResult<T> = Result<T, OpError>;

/// An `OpError::Invalid` from a message.
pub fn invalid<T>(message: impl Into<String>) -> OpResult<T> {
    Err(OpError::Invalid(message.into()))
}

/// An `OpError::Unsupported` from a message.
pub fn unsupported<T>(message: impl Into<String>) -> OpResult<T> {
    Err(OpError::Unsupported(message.into()))
}

/// What a rule sees of one node: the node (attributes, version), its input
/// types, and the values of inputs known at generation time.
pub struct NodeCx<'a> {
    pub node: &'a Node,
    /// One entry per input of the node; `None` for an absent optional input.
    pub inputs: &'a [Option<TensorType>],
    /// One entry per input; the value when it is known at generation time.
    pub constants: &'a [Option<&'a Tensor>],
    /// Every value the step reads ([`Node::reads`]: the node's inputs, then
    /// the values its subgraphs capture, then its lowering's operands), with
    /// their types and, when known at generation time, their values. A
    /// kernel's inputs ([`Kernel::eval`], [`Io::inputs`]) follow this order.
    pub reads: &'a [Option<ValueId>],
    pub read_types: &'a [Option<TensorType>],
    pub read_constants: &'a [Option<&'a Tensor>],
    /// One entry per output: the type the model declares for it (graph
    /// outputs, value_info), when every dimension is known. Rules whose
    /// output shape depends on input values known only at run time use it,
    /// and their generated code checks the values against it.
    pub declared: &'a [Option<TensorType>],
    /// One entry per output: its dims when the model fixes them, declared or
    /// implied by a declared value downstream through shape-keeping ops.
    pub expected: &'a [Option<Vec<usize>>],
    /// The compiler running the rule: control-flow rules compile their
    /// bodies with it, under the options of the enclosing graph.
    pub compiler: &'a dyn Compiler,
}

/// A value of a subgraph whose type (and maybe contents) the enclosing node
/// provides: a body input (run time) or a capture of an outer value.
#[derive(Clone, Debug)]
pub struct Seed {
    pub value: ValueId,
    pub ty: TensorType,
    /// The contents, when known at generation time.
    pub constant: Option<Tensor>,
}

/// What a rule may ask of the compiler running it.
pub trait Compiler {
    /// Compiles `graph`, a subgraph of the node (`what` names it in
    /// messages), with the passes and options that compile the enclosing
    /// graph: its inputs and captures typed (and maybe valued) by `seeds`,
    /// planned into its own arena.
    fn compile_subgraph(
        &self,
        graph: &Graph,
        seeds: &[Seed],
        what: &str,
    ) -> OpResult<Box<dyn CompiledGraph>>;
}

/// A subgraph compiled by [`Compiler::compile_subgraph`].
pub trait CompiledGraph {
    /// The types of the graph outputs, in order.
    fn output_types(&self) -> Vec<TensorType>;
    /// The graph outputs' values, when every one is known at generation time.
    fn constant_outputs(&self) -> Option<Vec<Tensor>>;
    /// The bytes of the subgraph's own arena.
    fn arena_bytes(&self) -> usize;
    /// Whether the subgraph reads its capture `c` at run time (its value is
    /// not known at generation time).
    fn reads_capture(&self, c: ValueId) -> bool;
    /// The subgraph's statements: `inputs` binds its graph inputs and then
    /// its captures, in order; `outputs` its graph outputs.
    fn tokens(
        &self,
        inputs: Vec<proc_macro2::Ident>,
        outputs: Vec<proc_macro2::Ident>,
        rt: &TokenStream,
    ) -> Result<TokenStream, String>;
}

impl<'a> NodeCx<'a> {
    /// The operator version the node resolved to.
    pub fn version(&self) -> i64 {
        self.node.op.since_version()
    }

    /// The type of input `i`, which must be present.
    pub fn input(&self, i: usize) -> OpResult<&'a TensorType> {
        match self.inputs.get(i) {
            Some(Some(t)) => Ok(t),
            _ => invalid(format!("input {i} is required but absent")),
        }
    }

    /// The type of input `i`, if present.
    pub fn opt_input(&self, i: usize) -> Option<&'a TensorType> {
        self.inputs.get(i).and_then(Option::as_ref)
    }

    /// The node's lowering, as the rewriting passes left it.
    pub fn lowering(&self) -> Option<&'a Lowering> {
        self.node.lowering.as_ref()
    }

    /// Where `v`, an operand of the node's lowering, is among the reads (the
    /// index of its type here, of its host tensor in [`Kernel::eval`] and of
    /// its buffer in [`Io::inputs`]), with its type.
    pub fn operand(&self, v: ValueId) -> OpResult<(usize, &'a TensorType)> {
        let own = self.node.input_positions();
        let found = self.reads.iter().rposition(|r| *r == Some(v)).filter(|&i| i >= own);
        match found.and_then(|i| Some((i, self.read_types.get(i)?.as_ref()?))) {
            Some(found) => Ok(found),
            None => invalid("an operand of the node's lowering is not among its typed reads"),
        }
    }

    /// The type the model declares for output `k`, if fully known.
    pub fn declared_output(&self, k: usize) -> Option<&'a TensorType> {
        self.declared.get(k).and_then(Option::as_ref)
    }

    /// The dims output `k` must have when the model fixes them: declared,
    /// or implied by a declared value downstream (a Cast, a Sqrt, an Add of
    /// a scalar... keep the shape). For outputs whose shape depends on data.
    pub fn expected_dims(&self, k: usize) -> Option<&'a [usize]> {
        self.expected.get(k).and_then(Option::as_deref)
    }

    /// The type output `k` must have when the model fixes it: the declared
    /// type (the caller checks it against its input), or else `elem` with
    /// the dims [`NodeCx::expected_dims`] implies, when they have rank
    /// `rank` (if the rule knows its output's rank). For rules whose output
    /// shape depends on data known only at run time; their generated code
    /// checks the data against it.
    pub fn expected_output(
        &self,
        k: usize,
        elem: ElemType,
        rank: Option<usize>,
    ) -> Option<TensorType> {
        if let Some(t) = self.declared_output(k) {
            return Some(t.clone());
        }
        let dims = self.expected_dims(k)?;
        rank.is_none_or(|r| r == dims.len()).then(|| TensorType::new(elem, dims.to_vec()))
    }

    /// The value of input `i` when known at generation time.
    pub fn constant(&self, i: usize) -> Option<&'a Tensor> {
        self.constants.get(i).copied().flatten()
    }

    /// The integer values of input `i`, which must be known at generation
    /// time (shape-like inputs: Reshape's shape, Slice's starts, ...).
    pub fn const_ints(&self, i: usize, what: &str) -> OpResult<Vec<i64>> {
        let Some(t) = self.constant(i) else {
            return unsupported(format!(
                "{what} (input {i}) must be known at generation time; it depends on the model's inputs"
            ));
        };
        t.to_i64s()
            .ok_or_else(|| OpError::Invalid(format!("{what} (input {i}) is not an integer tensor")))
    }

    fn attr(&self, name: &str) -> Option<&'a AttrValue> {
        self.node.attr(name)
    }

    fn schema_default(&self, name: &str) -> Option<AttrDefault> {
        self.node.op.schema.and_then(|s| s.attribute(name)).map(|a| a.default)
    }

    /// An integer attribute, or the schema's default, or `default`.
    pub fn int_or(&self, name: &str, default: i64) -> i64 {
        match self.attr(name) {
            Some(AttrValue::Int(v)) => *v,
            _ => match self.schema_default(name) {
                Some(AttrDefault::I(v)) => v,
                _ => default,
            },
        }
    }

    /// An integer attribute that must be given (or have a schema default).
    pub fn int(&self, name: &str) -> OpResult<i64> {
        match (self.attr(name), self.schema_default(name)) {
            (Some(AttrValue::Int(v)), _) => Ok(*v),
            (_, Some(AttrDefault::I(v))) => Ok(v),
            _ => invalid(format!("attribute '{name}' is required")),
        }
    }

    /// A float attribute, or the schema's default, or `default`.
    pub fn float_or(&self, name: &str, default: f32) -> f32 {
        match self.attr(name) {
            Some(AttrValue::Float(v)) => *v,
            _ => match self.schema_default(name) {
                Some(AttrDefault::F(v)) => v,
                _ => default,
            },
        }
    }

    /// An integer-list attribute, if given (or defaulted by the schema).
    pub fn ints(&self, name: &str) -> Option<Vec<i64>> {
        match self.attr(name) {
            Some(AttrValue::Ints(v)) => Some(v.clone()),
            _ => match self.schema_default(name) {
                Some(AttrDefault::Is(v)) => Some(v.to_vec()),
                _ => None,
            },
        }
    }

    /// A string attribute, or the schema's default, or `default`.
    pub fn string_or(&self, name: &str, default: &str) -> String {
        match self.attr(name) {
            Some(AttrValue::String(v)) => String::from_utf8_lossy(v).into_owned(),
            _ => match self.schema_default(name) {
                Some(AttrDefault::Str(v)) => v.to_owned(),
                _ => default.to_owned(),
            },
        }
    }

    /// A tensor attribute, if given.
    pub fn tensor(&self, name: &str) -> Option<&'a Tensor> {
        match self.attr(name) {
            Some(AttrValue::Tensor(t)) => Some(t),
            _ => None,
        }
    }
}

/// Normalises an axis in `[-rank, rank)` to `[0, rank)`.
pub fn axis(axis: i64, rank: usize, what: &str) -> OpResult<usize> {
    let r = i64::try_from(rank).unwrap_or(i64::MAX);
    let a = if axis < 0 { axis + r } else { axis };
    if (0..r).contains(&a) {
        Ok(usize::try_from(a).unwrap_or(0))
    } else {
        invalid(format!("{what} {axis} is out of range for rank {rank}"))
    }
}

/// How a node becomes code.
pub enum Lowered {
    /// Output 0 has input 0's bytes (a new shape, the same data): no code.
    Alias,
    /// A call into the runtime crate.
    Kernel(Box<dyn Kernel>),
}

/// The buffers a kernel call gets in generated code: one expression per
/// input and output, already typed (`&[f32]`, `&mut [f32]`; `None` for
/// absent optional ones).
pub struct Io {
    pub inputs: Vec<Option<TokenStream>>,
    pub outputs: Vec<Option<TokenStream>>,
    /// Output 0 is the same buffer as input [`Kernel::in_place`]: `outputs[0]`
    /// is the one (mutable) expression for both.
    pub in_place: bool,
    /// The scratch buffer the kernel asked for ([`Kernel::scratch`]), as a
    /// `&mut [T]` expression.
    pub scratch: Option<TokenStream>,
    /// The path of the runtime crate (`::onnx_codegen_runtime`).
    pub rt: TokenStream,
}

impl Io {
    /// The buffer of read `at` (a position [`NodeCx::operand`] gave), when
    /// the kernel has that read.
    pub fn read(&self, at: Option<usize>) -> Option<&TokenStream> {
        self.inputs.get(at?)?.as_ref()
    }
}

/// The host tensor of read `at` in [`Kernel::eval`]'s inputs, when the
/// kernel has that read.
pub fn host_read<'a>(
    inputs: &[Option<&'a HostTensor>],
    at: Option<usize>,
) -> Option<&'a HostTensor> {
    inputs.get(at?).copied().flatten()
}

/// The fused activation of the node ([`Lowering`]'s epilogue, or a
/// BatchNormalization's), as the `Unary` its standalone op would run.
pub fn fused_activation(cx: &NodeCx<'_>) -> Option<onnx_codegen_runtime::elementwise::Unary<f64>> {
    use crate::ir::lowering::Activation;
    use onnx_codegen_runtime::elementwise::Unary;
    let act = match cx.lowering()? {
        Lowering::BatchNorm { activation } => *activation,
        other => other.epilogue()?.activation?,
    };
    Some(match act {
        Activation::Relu => Unary::Relu,
        Activation::LeakyRelu { alpha } => Unary::LeakyRelu { alpha: f64::from(alpha) },
        Activation::Clip { min, max } => Unary::Clip { min: f64::from(min), max: f64::from(max) },
        Activation::Gelu => Unary::Gelu,
        Activation::GeluTanh => Unary::GeluTanh,
        Activation::Silu => Unary::Silu,
        Activation::HardSwish => Unary::HardSwish,
    })
}

/// One planned call into the runtime crate.
pub trait Kernel {
    /// Runs the call on the host (constant folding). Outputs come with their
    /// types and zeroed data of the right length; the last entry of
    /// `outputs` is the zeroed scratch buffer when [`Kernel::scratch`] asks
    /// for one.
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult;

    /// The Rust statements of the call; they may use `?` on the runtime's
    /// `Result`.
    fn emit(&self, io: &Io) -> TokenStream;

    /// The input whose buffer output 0 may overwrite, if the kernel can run in
    /// place: a position among the node's reads (its inputs, then its
    /// lowering's operands, as [`Io::inputs`] lists them).
    fn in_place(&self) -> Option<usize> {
        None
    }

    /// Whether the call reads input `i` at run time. Inputs whose values the
    /// kernel took at generation time (Clip's bounds, Reshape-like shapes)
    /// are neither stored nor bound.
    fn reads_input(&self, _i: usize) -> bool {
        true
    }

    /// Working memory the call needs for its duration (element type and
    /// count): the planner gives it an arena range live only during the step.
    fn scratch(&self) -> Option<TensorType> {
        None
    }

    /// What the compiler could not follow in the node but generates code
    /// for anyway (an If branch that cannot run at the shapes at hand and
    /// returns an error if taken); inference reports them as warnings.
    fn warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// Outputs whose length along one axis depends on the data, as
    /// `(output, axis, slot)`: their types are capacities, and
    /// [`Kernel::emit`] is then an expression giving a `[usize; S]` of the
    /// lengths they took, output by output at `slot` (outputs of one length
    /// may share a slot). Empty for most kernels.
    fn data_sized(&self) -> Vec<(usize, usize, usize)> {
        Vec::new()
    }
}

/// The result of running a kernel on the host.
pub type EvalResult = Result<(), EvalError>;

/// Why a kernel could not run on the host.
#[derive(Clone, Debug, PartialEq)]
pub enum EvalError {
    /// The kernel refused (an index out of range, a division by zero...).
    Runtime(onnx_codegen_runtime::Error),
    /// The element type has no host implementation for this kernel.
    Type(ElemType),
}

impl From<onnx_codegen_runtime::Error> for EvalError {
    fn from(e: onnx_codegen_runtime::Error) -> EvalError {
        EvalError::Runtime(e)
    }
}

/// The rule that runs `node`: its operator's ([`rule`]), unless its
/// lowering replaced what it computes (a [`Lowering::Lookup`] table).
pub fn rule_for(node: &Node) -> Option<&'static dyn OpRule> {
    match node.lowering {
        Some(Lowering::Lookup { .. }) => Some(&quant::LookupRule),
        Some(Lowering::Requantized(_)) => Some(&quant::RequantizedRule),
        _ => rule(&node.op.domain, &node.op.op_type),
    }
}

/// The rule for `op_type` in `domain`, if this compiler supports it.
pub fn rule(domain: &str, op_type: &str) -> Option<&'static dyn OpRule> {
    match normalize_domain(domain) {
        DEFAULT_DOMAIN => {}
        "ai.onnx.ml" => return ml::ml_rule(op_type),
        "ai.onnx.preview.training" => return ml::training_rule(op_type),
        "ai.onnx.preview" => return attention::preview_rule(op_type),
        _ => return None,
    }
    logic::rule(op_type)
        .or_else(|| elementwise::rule(op_type))
        .or_else(|| conv::rule(op_type))
        .or_else(|| gemm::rule(op_type))
        .or_else(|| layout::rule(op_type))
        .or_else(|| norm::rule(op_type))
        .or_else(|| shape_ops::rule(op_type))
        .or_else(|| softmax::rule(op_type))
        .or_else(|| rnn::rule(op_type))
        .or_else(|| extra::rule(op_type))
        .or_else(|| loss::rule(op_type))
        .or_else(|| quant::rule(op_type))
        .or_else(|| indexing::rule(op_type))
        .or_else(|| control::rule(op_type))
        .or_else(|| misc::rule(op_type))
        .or_else(|| signal::rule(op_type))
        .or_else(|| attention::rule(op_type))
        .or_else(|| image::rule(op_type))
        .or_else(|| text::rule(op_type))
        .or_else(|| strings::rule(op_type))
}

/// How an operator's outputs follow from its inputs, and how it becomes code.
pub trait OpRule: Sync {
    /// The output types (one per declared output of the node, present or not).
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>>;

    /// The node as code, given the output types `infer` found.
    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered>;

    /// How output 0's shape follows the inputs' shapes, whatever the
    /// attributes: inference follows declared shapes downstream through
    /// the nodes that keep them.
    fn shape_rule(&self, _node: &Node) -> ShapeRule {
        ShapeRule::Other
    }

    /// The multiply-accumulates the node does, given its inputs' and
    /// outputs' types (`None` where inference did not reach them): counted
    /// exactly by the operators made of them (convolutions, matrix
    /// products, recurrent cells), `None` for the others.
    fn macs(
        &self,
        _node: &Node,
        _inputs: &[Option<&TensorType>],
        _outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        None
    }

    /// The activation the node computes, when a product or normalisation
    /// before it can apply it in its epilogue with the same operations
    /// ([`Lowering`]'s epilogue); `input(i)` says what input `i` holds when
    /// it is a one-element f32 constant (a Clip's bound).
    fn as_activation(
        &self,
        _node: &Node,
        _input: &dyn Fn(usize) -> ScalarInput,
    ) -> Option<crate::ir::lowering::Activation> {
        None
    }

    /// Output values known from the node alone, whatever its inputs hold
    /// (Constant, Shape, Size): the node never runs.
    fn constant_outputs(
        &self,
        _cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        Ok(None)
    }
}

/// An input of a node as [`OpRule::as_activation`] sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ScalarInput {
    /// Not given (an optional input).
    Absent,
    /// A one-element f32 constant.
    Known(f32),
    /// Anything else.
    Unknown,
}

/// How an operator's output 0 takes its shape from its inputs
/// ([`OpRule::shape_rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShapeRule {
    /// Anything else (or it depends on attributes and values).
    Other,
    /// Exactly input 0's shape (unary element-wise ops, casts, Identity).
    SameAsInput0,
    /// The broadcast of all inputs (element-wise ops of several operands):
    /// input `i`'s shape when every other input holds one element and has
    /// at most the output's rank.
    Broadcast,
}

/// `n` as a `u64`, saturating.
pub(crate) fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The element count of `t`, 0 when unknown.
pub(crate) fn numel_u64(t: Option<&TensorType>) -> u64 {
    t.and_then(TensorType::numel).map_or(0, to_u64)
}

/// The MACs of a matrix product: each output element is a dot product
/// along A's (input 0's) last axis.
pub(crate) fn macs_of_product(
    inputs: &[Option<&TensorType>],
    outputs: &[Option<&TensorType>],
) -> u64 {
    let k = inputs.first().copied().flatten().and_then(|a| a.dims.last().copied());
    numel_u64(outputs.first().copied().flatten()).saturating_mul(k.map_or(0, to_u64))
}

/// The MACs of a convolution whose output is `out` and weights `w`
/// (`[M, C / group, k...]`): one filter's worth per output element.
pub(crate) fn macs_per_filter(out: Option<&TensorType>, w: Option<&TensorType>) -> u64 {
    let Some(w) = w else { return 0 };
    let m = w.dims.first().copied().map_or(0, to_u64);
    numel_u64(Some(w)).checked_div(m).map_or(0, |per| numel_u64(out).saturating_mul(per))
}

/// Numpy broadcasting of several shapes (the multidirectional broadcasting of
/// the ONNX spec).
pub fn broadcast_shapes(shapes: &[&[usize]]) -> OpResult<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for shape in shapes {
        let offset = rank - shape.len();
        for (i, &d) in shape.iter().enumerate() {
            let o = &mut out[offset + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                let shown: Vec<String> = shapes.iter().map(|s| format!("{s:?}")).collect();
                return invalid(format!("shapes {} do not broadcast", shown.join(" and ")));
            }
        }
    }
    Ok(out)
}

/// The strides (in elements) with which a tensor of `shape` is read when
/// broadcast to `out`: 0 on broadcast axes.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<isize> {
    let offset = out.len() - shape.len();
    let mut strides = vec![0isize; out.len()];
    let mut stride = 1isize;
    for i in (0..shape.len()).rev() {
        if shape[i] != 1 {
            strides[offset + i] = stride;
        }
        stride = stride.saturating_mul(isize::try_from(shape[i]).unwrap_or(isize::MAX));
    }
    strides
}

/// The shape under which the second operand `b` of a binary element-wise
/// operator (Add, Sub, Mul, Div, Pow, the comparisons, And, Or, Xor)
/// broadcasts against the first, `a`. From opset 7 on that is `b` itself
/// (numpy broadcasting). Before, operands broadcast only when the node says
/// `broadcast = 1`, and then only `b` into `a`'s shape: `b` (of at most
/// `a`'s rank) lines up with `a`'s dimensions from `axis` on (by default
/// with its last ones), so its shape becomes `b`'s with ones around it, of
/// `a`'s rank, each dimension equal to `a`'s or 1 (the spec's examples have
/// equal dimensions or a single element; PyTorch's exporter relies on ones
/// broadcasting too). Without `broadcast`, the shapes must be equal.
pub fn legacy_operand_dims(cx: &NodeCx<'_>, a: &[usize], b: &[usize]) -> OpResult<Vec<usize>> {
    if cx.version() >= 7 {
        return Ok(b.to_vec());
    }
    let name = &cx.node.op.op_type;
    let axis = cx.node.attr_int("axis");
    if cx.int_or("broadcast", 0) == 0 {
        if let Some(axis) = axis {
            return invalid(format!(
                "{name} before opset 7 has 'axis' = {axis} but not 'broadcast' = 1; the axis \
                 places a broadcast operand, and without 'broadcast' nothing broadcasts"
            ));
        }
        if a != b {
            return invalid(format!(
                "{name} before opset 7 without 'broadcast' = 1 takes operands of one shape, got \
                 {a:?} and {b:?}"
            ));
        }
        return Ok(b.to_vec());
    }
    let (ra, rb) = (a.len(), b.len());
    if rb > ra {
        return invalid(format!(
            "{name} before opset 7 broadcasts its second operand into its first, but {b:?} has \
             more dimensions than {a:?}"
        ));
    }
    let start = axis.unwrap_or((ra - rb) as i64);
    let Some(start) = usize::try_from(start).ok().filter(|&s| s + rb <= ra) else {
        return invalid(format!(
            "{name} before opset 7: 'axis' = {start} places the second operand {b:?} outside \
             the first's {ra} dimensions {a:?}"
        ));
    };
    let mut dims = vec![1; ra];
    dims[start..start + rb].copy_from_slice(b);
    if dims.iter().zip(a).any(|(&d, &n)| d != 1 && d != n) {
        return invalid(format!(
            "{name} before opset 7: the second operand {b:?}, placed at axis {start}, does not \
             broadcast into the first's shape {a:?}"
        ));
    }
    Ok(dims)
}

/// The fewest axes that walk the same elements as `shape` with each
/// operand's `strides` (row-major output): size-1 axes dropped, and each
/// axis merged into the one before it where every operand steps across the
/// pair as one axis (`stride[i] == stride[i + 1] * shape[i + 1]`, which
/// holds for contiguous runs and for broadcast zeros alike). A `[1, C, H, W]`
/// by `[1, C, 1, 1]` product becomes `[C, H * W]`, rows of `H * W` instead of
/// `W`, so the element-wise kernels run long inner loops.
pub fn coalesce_broadcast<const K: usize>(
    shape: &[usize],
    strides: [&[isize]; K],
) -> (Vec<usize>, [Vec<isize>; K]) {
    if shape.contains(&0) {
        return (shape.to_vec(), std::array::from_fn(|k| strides[k].to_vec()));
    }
    let mut dims: Vec<usize> = Vec::with_capacity(shape.len());
    let mut out: [Vec<isize>; K] = std::array::from_fn(|_| Vec::with_capacity(shape.len()));
    for (axis, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let step: [isize; K] = std::array::from_fn(|k| strides[k].get(axis).copied().unwrap_or(0));
        let merge = !dims.is_empty()
            && (0..K).all(|k| {
                let across = isize::try_from(d).ok().and_then(|d| step[k].checked_mul(d));
                across == out[k].last().copied()
            });
        if merge {
            if let Some(last) = dims.last_mut() {
                *last *= d;
            }
            for (o, &s) in out.iter_mut().zip(&step) {
                if let Some(last) = o.last_mut() {
                    *last = s;
                }
            }
        } else {
            dims.push(d);
            for (o, &s) in out.iter_mut().zip(&step) {
                o.push(s);
            }
        }
    }
    if dims.is_empty() {
        // A single element: one axis of one, so ranks stay at least 1.
        dims.push(1);
        for o in &mut out {
            o.push(0);
        }
    }
    (dims, out)
}

/// Integer element types (the runtime's `Int` kernels).
pub fn is_int(elem: ElemType) -> bool {
    matches!(
        elem,
        ElemType::Int8
            | ElemType::Int16
            | ElemType::Int32
            | ElemType::Int64
            | ElemType::Uint8
            | ElemType::Uint16
            | ElemType::Uint32
            | ElemType::Uint64
    )
}

/// Element types the runtime's arithmetic (`Num`) kernels take: the
/// integers and the floats (`f32`, `f64`, `f16`, `bf16`).
pub fn is_num(elem: ElemType) -> bool {
    is_int(elem) || is_float_num(elem)
}

/// Float element types the runtime's `Float` kernels take: `f32`, `f64`,
/// and `f16`/`bf16` (computed in `f32`, rounded once per operation).
pub fn is_float_num(elem: ElemType) -> bool {
    matches!(elem, ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16)
}

/// The Rust element type of `elem` in generated code, when it has one.
/// The low-precision types are raw `u8` codes (packed for 4 and 2 bits), so
/// a slice of them holds [`ElemType::byte_size`] bytes, not one per element
/// ([`storage_len`]).
pub fn rust_type(elem: ElemType, rt: &TokenStream) -> Option<TokenStream> {
    use quote::quote;
    Some(match elem {
        ElemType::Float => quote!(f32),
        ElemType::Double => quote!(f64),
        ElemType::Int8 => quote!(i8),
        ElemType::Int16 => quote!(i16),
        ElemType::Int32 => quote!(i32),
        ElemType::Int64 => quote!(i64),
        ElemType::Uint8 => quote!(u8),
        ElemType::Uint16 => quote!(u16),
        ElemType::Uint32 => quote!(u32),
        ElemType::Uint64 => quote!(u64),
        ElemType::Bool => quote!(bool),
        ElemType::Float16 => quote!(#rt::f16),
        ElemType::Bfloat16 => quote!(#rt::bf16),
        e if is_low_bit(e) => quote!(u8),
        _ => return None,
    })
}

/// The runtime's packed format of a low-precision element type.
pub fn low_bit(e: ElemType) -> Option<onnx_codegen_runtime::cast::LowBit> {
    use onnx_codegen_runtime::cast::LowBit;
    Some(match e {
        ElemType::Float8E4M3FN => LowBit::F8E4M3FN,
        ElemType::Float8E4M3FNUZ => LowBit::F8E4M3FNUZ,
        ElemType::Float8E5M2 => LowBit::F8E5M2,
        ElemType::Float8E5M2FNUZ => LowBit::F8E5M2FNUZ,
        ElemType::Float8E8M0 => LowBit::F8E8M0,
        ElemType::Float4E2M1 => LowBit::F4E2M1,
        ElemType::Int4 => LowBit::I4,
        ElemType::Uint4 => LowBit::U4,
        ElemType::Int2 => LowBit::I2,
        ElemType::Uint2 => LowBit::U2,
        _ => return None,
    })
}

/// `rt::cast::LowBit::X` in generated code.
pub fn low_bit_tokens(f: onnx_codegen_runtime::cast::LowBit, rt: &TokenStream) -> TokenStream {
    use quote::quote;
    let v = proc_macro2::Ident::new(&format!("{f:?}"), proc_macro2::Span::call_site());
    quote!(#rt::cast::LowBit::#v)
}

/// The low-precision types generated code holds as raw (packed) bytes.
pub fn is_low_bit(elem: ElemType) -> bool {
    matches!(
        elem,
        ElemType::Float8E4M3FN
            | ElemType::Float8E4M3FNUZ
            | ElemType::Float8E5M2
            | ElemType::Float8E5M2FNUZ
            | ElemType::Float8E8M0
            | ElemType::Float4E2M1
            | ElemType::Int4
            | ElemType::Uint4
            | ElemType::Int2
            | ElemType::Uint2
    )
}

/// The length of `ty`'s slice in generated code: its element count, or its
/// byte size for the packed low-precision types.
pub fn storage_len(ty: &TensorType) -> Option<usize> {
    if is_low_bit(ty.elem) { ty.byte_size() } else { ty.numel() }
}

/// Calls `$f::<T>(args)` with `T` the Rust type of a numeric `ElemType`;
/// other types give `Err(EvalError::Type(elem))`.
#[macro_export]
#[doc(hidden)]
macro_rules! by_num_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            $crate::ir::ElemType::Float => $f::<f32>($($arg),*),
            $crate::ir::ElemType::Double => $f::<f64>($($arg),*),
            $crate::ir::ElemType::Float16 => $f::<$crate::ops::f16>($($arg),*),
            $crate::ir::ElemType::Bfloat16 => $f::<$crate::ops::bf16>($($arg),*),
            $crate::ir::ElemType::Int8 => $f::<i8>($($arg),*),
            $crate::ir::ElemType::Int16 => $f::<i16>($($arg),*),
            $crate::ir::ElemType::Int32 => $f::<i32>($($arg),*),
            $crate::ir::ElemType::Int64 => $f::<i64>($($arg),*),
            $crate::ir::ElemType::Uint8 => $f::<u8>($($arg),*),
            $crate::ir::ElemType::Uint16 => $f::<u16>($($arg),*),
            $crate::ir::ElemType::Uint32 => $f::<u32>($($arg),*),
            $crate::ir::ElemType::Uint64 => $f::<u64>($($arg),*),
            other => Err($crate::ops::EvalError::Type(other)),
        }
    };
}

/// Like [`by_num_type!`], for the float types the float kernels support.
#[macro_export]
#[doc(hidden)]
macro_rules! by_float_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            $crate::ir::ElemType::Float => $f::<f32>($($arg),*),
            $crate::ir::ElemType::Double => $f::<f64>($($arg),*),
            $crate::ir::ElemType::Float16 => $f::<$crate::ops::f16>($($arg),*),
            $crate::ir::ElemType::Bfloat16 => $f::<$crate::ops::bf16>($($arg),*),
            other => Err($crate::ops::EvalError::Type(other)),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(broadcast_shapes(&[&[2, 1, 3], &[4, 1]]).unwrap(), [2, 4, 3]);
        assert_eq!(broadcast_shapes(&[&[], &[5]]).unwrap(), [5]);
        assert!(broadcast_shapes(&[&[2, 3], &[3, 2]]).is_err());
        assert_eq!(broadcast_strides(&[4, 1], &[2, 4, 3]), [0, 1, 0]);
        assert_eq!(broadcast_strides(&[2, 1, 3], &[2, 4, 3]), [3, 0, 1]);
    }

    #[test]
    fn legacy_broadcast_places_the_second_operand_at_axis() {
        use crate::ops::testing::{run, ty, types, value};
        // [2, 3] + [2] at axis 0: row i gets b[i].
        let a = run(
            6,
            "g () => (float[2,3] y) <float[2,3] a = {1, 2, 3, 4, 5, 6}, float[2] b = {10, 20}> {
                y = Add <broadcast: int = 1, axis: int = 0> (a, b)
            }",
        );
        assert_eq!(value(&a, 0), [11.0, 12.0, 13.0, 24.0, 25.0, 26.0]);
        // Suffix matching by default; Sub, Mul, Div and Pow (opset 1) alike.
        let a = run(
            6,
            "g () => (float[2,3] s, float[2,3] m, float[2,3] d) <float[2,3] a = {1, 2, 3, 4, 5, 6}, float[3] b = {1, 2, 4}> {
                s = Sub <broadcast: int = 1> (a, b)
                m = Mul <broadcast: int = 1> (a, b)
                d = Div <broadcast: int = 1> (a, b)
            }",
        );
        assert_eq!(value(&a, 0), [0.0, 0.0, -1.0, 3.0, 3.0, 2.0]);
        assert_eq!(value(&a, 1), [1.0, 4.0, 12.0, 4.0, 10.0, 24.0]);
        assert_eq!(value(&a, 2), [1.0, 1.0, 0.75, 4.0, 2.5, 1.5]);
        let a = run(
            1,
            "g () => (float[2,2] y) <float[2,2] a = {1, 2, 3, 4}, float[1] b = {2}> {
                y = Pow <broadcast: int = 1> (a, b)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 4.0, 9.0, 16.0]);
        // A middle block ([3, 4] of [2, 3, 4, 5] at axis 1), and ones
        // broadcasting as PyTorch's exporter uses them ([2, 1] at axis 0).
        let a = run(
            6,
            "g (float[2,3,4,5] x, float[3,4] b, float[2,3] p, float[2,1] q) => (float[2,3,4,5] y, float[2,3] z) {
                y = Add <broadcast: int = 1, axis: int = 1> (x, b)
                z = Add <broadcast: int = 1, axis: int = 0> (p, q)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4, 5]"), ty("float[2, 3]")]);
        // The comparisons and logic ops of opset 1 too.
        let a = run(
            1,
            "g () => (bool[2,2] y, bool[2,2] z) <float[2,2] a = {1, 5, 3, 0}, float[2] b = {2, 1}, bool[2,2] p = {1, 1, 0, 1}, bool[2] q = {1, 0}> {
                y = Greater <broadcast: int = 1, axis: int = 0> (a, b)
                z = And <broadcast: int = 1> (p, q)
            }",
        );
        assert_eq!(value(&a, 0), [0.0, 1.0, 1.0, 0.0]);
        assert_eq!(value(&a, 1), [1.0, 0.0, 0.0, 0.0]);
        // From opset 7 on the attributes are gone and numpy rules apply.
        let a = run(7, "g (float[2,3] a, float[2,1] b) => (float[2,3] y) { y = Add (a, b) }");
        assert_eq!(types(&a), [ty("float[2, 3]")]);
    }

    #[test]
    fn legacy_broadcast_refuses_what_the_spec_does_not_define() {
        use crate::ops::testing::{errors, run};
        let cases = [
            (
                "y = Add (a, b)",
                "float[2,3] a, float[3] b",
                "Add before opset 7 without 'broadcast' = 1 takes operands of one shape, got [2, 3] and [3]",
            ),
            (
                "y = Mul <axis: int = 1> (a, b)",
                "float[2,3] a, float[2,3] b",
                "Mul before opset 7 has 'axis' = 1 but not 'broadcast' = 1",
            ),
            (
                "y = Add <broadcast: int = 1> (a, b)",
                "float[3] a, float[2,3] b",
                "has more dimensions than [3]",
            ),
            (
                "y = Sub <broadcast: int = 1, axis: int = 1> (a, b)",
                "float[2,3] a, float[2] b",
                "Sub before opset 7: the second operand [2], placed at axis 1, does not broadcast into the first's shape [2, 3]",
            ),
            (
                "y = Div <broadcast: int = 1, axis: int = 2> (a, b)",
                "float[2,3] a, float[3] b",
                "'axis' = 2 places the second operand [3] outside the first's 2 dimensions",
            ),
            (
                "y = Add <broadcast: int = 1, axis: int = -1> (a, b)",
                "float[2,3] a, float[3] b",
                "'axis' = -1 places the second operand",
            ),
        ];
        for (node, inputs, message) in cases {
            let a = run(6, &format!("g ({inputs}) => (float[2,3] y) {{ {node} }}"));
            let e = errors(&a);
            assert!(e.len() == 1 && e[0].contains(message), "{node}: {e:?}");
            // The node is named.
            assert!(e[0].contains("node '#0'"), "{e:?}");
        }
    }

    #[test]
    fn broadcasts_coalesce_to_the_fewest_axes() {
        let co = |shape: &[usize], a: &[isize], b: &[isize]| {
            let (d, [a, b]) = coalesce_broadcast(shape, [a, b]);
            (d, a, b)
        };
        // A per-channel scale of an NCHW tensor: channels x pixels.
        assert_eq!(
            co(&[1, 32, 7, 7], &[0, 49, 7, 1], &[0, 1, 0, 0]),
            (vec![32, 49], vec![49, 1], vec![1, 0])
        );
        // Same shapes: one run.
        assert_eq!(co(&[2, 3, 4], &[12, 4, 1], &[12, 4, 1]), (vec![24], vec![1], vec![1]));
        // A row vector over a matrix: nothing to merge.
        assert_eq!(co(&[5, 6], &[6, 1], &[0, 1]), (vec![5, 6], vec![6, 1], vec![0, 1]));
        // Broadcast on both sides ([3, 1] + [1, 4]) keeps both axes.
        assert_eq!(co(&[3, 4], &[1, 0], &[0, 1]), (vec![3, 4], vec![1, 0], vec![0, 1]));
        // One element, and an empty tensor left as it is.
        assert_eq!(co(&[1, 1], &[0, 0], &[0, 0]), (vec![1], vec![0], vec![0]));
        assert_eq!(co(&[2, 0], &[0, 1], &[0, 1]), (vec![2, 0], vec![0, 1], vec![0, 1]));
        // Leading broadcast axes merge with each other: [2, 3, 4] * [4].
        assert_eq!(co(&[2, 3, 4], &[12, 4, 1], &[0, 0, 1]), (vec![6, 4], vec![4, 1], vec![0, 1]));
    }

    #[test]
    fn axes_normalise() {
        assert_eq!(axis(-1, 3, "axis"), Ok(2));
        assert_eq!(axis(0, 3, "axis"), Ok(0));
        assert!(axis(3, 3, "axis").is_err());
        assert!(axis(-4, 3, "axis").is_err());
    }
}
