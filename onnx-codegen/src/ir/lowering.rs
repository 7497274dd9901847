//! The typed lowered form: what the rewriting passes decided about how a
//! node runs, carried by the node itself ([`super::Node::lowering`]).
//!
//! A pass that folds a BatchNormalization into a Conv, fuses a residual
//! `Add` and an activation into a product, lays out constant weights for a
//! kernel, chooses Winograd, or folds transposes or a softmax prologue into
//! the node that reads them records the decision here, as a value of the
//! node's operator family. The operator's rule reads it when it lowers the
//! node to a kernel call; nothing travels through extra input positions or
//! attributes, so a model can neither forge nor collide with a decision.
//!
//! The values a decision names (a residual, packed weights, a mask) are read
//! by the node at run time like its own inputs: [`Lowering::operands`] lists
//! them, and [`super::Graph::uses`], inference, planning and emission treat
//! them as reads of the node after its own inputs and the values its
//! subgraphs capture.

use super::{ElemType, ValueId};

/// How one node runs, beyond what its operator and attributes say.
#[derive(Clone, Debug, PartialEq)]
pub enum Lowering {
    /// A `Conv` or a `ConvTranspose`.
    Conv(ConvLowering),
    /// A `Gemm` or `MatMul`.
    Product(ProductLowering),
    /// A `BatchNormalization` (inference form) that applies `activation` to
    /// each normalised value in the same pass.
    BatchNorm { activation: Activation },
    /// A `Softmax` over the last axis that first divides and masks its input.
    Softmax(SoftmaxPrologue),
    /// An `LSTM` whose constant `W` and `R` are regrouped by gate for
    /// `rnn::slstm_packed` (f32, `[directions * (input + hidden) * 4 * hidden]`).
    Lstm { packed: ValueId },
    /// A `QLinearConv` or `QLinearMatMul` on the int8 kernels.
    Integer(IntegerLowering),
    /// An element-wise function of one quantized value, computed at
    /// generation time for each of the 256 values it can take: `y =
    /// table[x]`, indexed by `x`'s byte (`[0, 255]`; for int8, `0, 1, ...,
    /// 127, -128, ..., -1`). The node reads its quantized input 0 and
    /// `table` (int8 or uint8, 256 elements), whatever its operator.
    Lookup { table: ValueId },
    /// The operator on quantized values: it reads its data inputs as
    /// integers of the given quantizations and writes its output quantized,
    /// as the dequantize, compute, quantize steps around it did (an `Add`,
    /// a `Mul`, an `AveragePool` on the int8 kernels).
    Requantized(Requantized),
    /// An `LSTM` that runs as onnxruntime's `DynamicQuantizeLSTM`
    /// (`qlstm::dynamic_lstm`): its input and hidden state quantized to
    /// uint8 at run time, its products on the 8-bit weights of
    /// [`DynamicLstm`], read instead of the node's float `W` and `R`.
    DynamicLstm(DynamicLstm),
}

/// The 8-bit weights of a [`Lowering::DynamicLstm`]: `w` `[D, 4H, input]`
/// and `r` `[D, 4H, H]` (int8 or uint8, each gate row's weights together),
/// their f32 scales (`[D]` or `[D, 4H]`) and zero points (of the weights'
/// type, `[D]` or `[D, 4H]`, one value per direction).
#[derive(Clone, Debug, PartialEq)]
pub struct DynamicLstm {
    pub w: ValueId,
    pub w_scale: ValueId,
    pub w_zero: ValueId,
    pub r: ValueId,
    pub r_scale: ValueId,
    pub r_zero: ValueId,
}

impl DynamicLstm {
    fn values_mut(&mut self) -> [&mut ValueId; 6] {
        [
            &mut self.w,
            &mut self.w_scale,
            &mut self.w_zero,
            &mut self.r,
            &mut self.r_scale,
            &mut self.r_zero,
        ]
    }
}

/// The quantizations of a [`Lowering::Requantized`] node: `real = scale *
/// (q - zero)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Requantized {
    /// One per data input, in order.
    pub inputs: Vec<Quantization>,
    pub output: Quantization,
}

/// A per-tensor quantization.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Quantization {
    pub scale: f32,
    pub zero: i32,
}

/// How a `QLinearConv` or `QLinearMatMul` runs on the runtime's int8
/// kernels (`int8::qconv`, `int8::qmatmul`): int8 weights of zero point 0,
/// int32 sums, fixed-point requantization.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntegerLowering {
    /// The int8 weights laid out by the runtime's `int8::pack_conv_weights`
    /// or `int8::pack_weights` (read instead of the node's weights input).
    pub packed: Option<ValueId>,
    /// An int32 bias per output column (scale `a_scale * b_scale`, zero
    /// point 0) of a `QLinearMatMul`, from the `C` of the `Gemm` it was
    /// rewritten from.
    pub bias: Option<ValueId>,
    /// The output range in output integers, narrower than the output type's
    /// when a `Relu` or `Clip` between the product and its quantization was
    /// folded into the requantization.
    pub range: Option<(i32, i32)>,
    /// A quantized `Add` of a `QLinearConv`'s output and another value,
    /// fused into the convolution's output stage: the node's output is the
    /// sum.
    pub residual: Option<IntegerResidual>,
    /// A `QuantizeLinear` fused into a `QLinearMatMul` of one row: the
    /// node's input 0 is the float32 value it quantized, quantized again
    /// as the product reads it (`int8::qmatmul_float`), so the quantized
    /// row is never held whole.
    pub quantize_input: Option<FusedQuantize>,
    /// A `DequantizeLinear` of a `QLinearMatMul`'s output fused into it:
    /// the node's output is float32, each requantized output dequantized
    /// by this as it is written.
    pub dequantize_output: Option<Quantization>,
}

/// The quantization of a fused `QuantizeLinear` ([`IntegerLowering`]) and
/// the integer type it quantizes to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FusedQuantize {
    pub q: Quantization,
    pub elem: ElemType,
}

/// The `Add` of an [`IntegerLowering`] (`int8::qconv_add`): each output the
/// convolution requantizes (to its own `y_scale`, `y_zero_point`) is added
/// to `value`'s at the same position, quantized as `residual`, and the sum
/// requantized to `sum`, as the `Add` between quantizations did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntegerResidual {
    pub value: ValueId,
    pub residual: Quantization,
    pub sum: Quantization,
    /// Whether the `Add` read the convolution's output first (its scales
    /// are derived in that order).
    pub conv_first: bool,
}

/// A `Conv`'s weight layout and epilogue (a `ConvTranspose`'s weight
/// layout: [`ConvWeights::Transposed`], with an empty epilogue).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConvLowering {
    pub weights: ConvWeights,
    pub epilogue: Epilogue,
}

/// Where a `Conv` reads its weights from.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ConvWeights {
    /// Input 1, as the model gives it.
    #[default]
    AsGiven,
    /// An f32 constant laid out in panels of filters by the runtime's
    /// `conv::pack_weights` (2-D convolutions of group 1).
    Packed(ValueId),
    /// An f32 constant transformed for Winograd's F(2x2, 3x3) by the
    /// runtime's `winograd::transform_weights`, run in blocks of at most
    /// `block` tiles (the kernel's largest when `None`).
    Winograd { transformed: ValueId, block: Option<usize> },
    /// A `ConvTranspose`'s f32 constant weights transposed per group (row
    /// `(m, tap)` holds the group's input channels) and laid out in panels
    /// by the runtime's `conv::pack_conv_transpose_weights`, for
    /// `conv::sconv_transpose` (1-D and 2-D windows): products of `block`
    /// input positions at a time into a scratch of `M / group * taps *
    /// block` floats, each scattered into the output while in cache.
    Transposed { packed: ValueId, block: usize },
}

impl ConvWeights {
    /// The constant this layout reads instead of input 1, if any.
    pub fn value(&self) -> Option<ValueId> {
        match self {
            ConvWeights::AsGiven => None,
            ConvWeights::Packed(v)
            | ConvWeights::Winograd { transformed: v, .. }
            | ConvWeights::Transposed { packed: v, .. } => Some(*v),
        }
    }
}

/// A `Gemm`'s or `MatMul`'s weight layout, folded neighbours and epilogue.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProductLowering {
    /// B as an f32 constant laid out in strips by the runtime's
    /// `gemm::pack_b` (read instead of input 1).
    pub packed_b: Option<ValueId>,
    /// A `MatMul`'s bias over the last axis, folded from the `Add` after it.
    pub bias: Option<ValueId>,
    /// Transposes folded into a `MatMul`'s operands and result.
    pub transposes: Transposes,
    pub epilogue: Epilogue,
}

/// The permutations of transposes folded into a `MatMul`: of A, of B (the
/// product reads them through strides), and of the result (written
/// through strides). Each is a permutation of its tensor's axes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Transposes {
    pub a: Option<Vec<usize>>,
    pub b: Option<Vec<usize>>,
    pub y: Option<Vec<usize>>,
}

impl Transposes {
    /// Whether nothing was folded.
    pub fn is_none(&self) -> bool {
        self.a.is_none() && self.b.is_none() && self.y.is_none()
    }
}

/// What a product does to each output after its own sum and bias: add a
/// residual (an f32 tensor of the output's dims, computed before the
/// product), then apply an activation.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Epilogue {
    pub residual: Option<ValueId>,
    pub activation: Option<Activation>,
}

impl Epilogue {
    /// Whether the epilogue does nothing.
    pub fn is_empty(&self) -> bool {
        self.residual.is_none() && self.activation.is_none()
    }
}

/// An element-wise activation fused into the node before it, computed with
/// the same operations as the standalone operator.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Activation {
    Relu,
    LeakyRelu {
        alpha: f32,
    },
    /// Bounds known at generation time.
    Clip {
        min: f32,
        max: f32,
    },
    /// `Gelu` (exact).
    Gelu,
    /// `Gelu` with `approximate = "tanh"`.
    GeluTanh,
    /// `x * Sigmoid(x)`: `Swish` of alpha 1.
    Silu,
    HardSwish,
}

impl Activation {
    /// Whether the activation is a comparison (Relu, LeakyRelu, Clip), which
    /// every kernel applies per element, rather than a smooth function
    /// (GELU, SiLU, HardSwish) computed by the vector math routines.
    pub fn is_piecewise_linear(self) -> bool {
        matches!(self, Activation::Relu | Activation::LeakyRelu { .. } | Activation::Clip { .. })
    }
}

/// The steps a `Softmax` folds in front of its normalisation:
/// `Softmax(Where(mask, x / divisor, fill))`, either step optional.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SoftmaxPrologue {
    pub divisor: Option<f32>,
    pub mask: Option<SoftmaxMask>,
}

/// A `Where` between the scores and their `Softmax`.
#[derive(Clone, Debug, PartialEq)]
pub struct SoftmaxMask {
    /// The bool condition (broadcast to the scores).
    pub mask: ValueId,
    /// The constant the other branch holds.
    pub fill: f32,
    /// Whether the scores are the `Where`'s true branch (mask true keeps them).
    pub keep: bool,
}

impl Lowering {
    /// The values the node reads at run time because of this lowering, in
    /// the order [`Lowering::replace_operand`] visits them.
    pub fn operands(&self) -> Vec<ValueId> {
        match self {
            Lowering::Conv(c) => c.weights.value().into_iter().chain(c.epilogue.residual).collect(),
            Lowering::Product(p) => {
                [p.packed_b, p.bias, p.epilogue.residual].into_iter().flatten().collect()
            }
            Lowering::BatchNorm { .. } => Vec::new(),
            Lowering::Softmax(s) => s.mask.iter().map(|m| m.mask).collect(),
            Lowering::Lstm { packed } => vec![*packed],
            Lowering::Integer(q) => {
                q.packed.into_iter().chain(q.bias).chain(q.residual.map(|r| r.value)).collect()
            }
            Lowering::Lookup { table } => vec![*table],
            Lowering::Requantized(_) => Vec::new(),
            Lowering::DynamicLstm(q) => vec![q.w, q.w_scale, q.w_zero, q.r, q.r_scale, q.r_zero],
        }
    }

    /// Replaces every operand equal to `old` by `new`.
    pub fn replace_operand(&mut self, old: ValueId, new: ValueId) {
        self.visit_operands_mut(&mut |v| {
            if *v == old {
                *v = new;
            }
        });
    }

    /// The Conv lowering in `slot`, created empty when the slot holds none
    /// yet; `None` when it holds another kind.
    pub fn conv_in(slot: &mut Option<Lowering>) -> Option<&mut ConvLowering> {
        match slot.get_or_insert_with(|| Lowering::Conv(ConvLowering::default())) {
            Lowering::Conv(c) => Some(c),
            _ => None,
        }
    }

    /// The product lowering in `slot`, created empty when the slot holds
    /// none yet; `None` when it holds another kind.
    pub fn product_in(slot: &mut Option<Lowering>) -> Option<&mut ProductLowering> {
        match slot.get_or_insert_with(|| Lowering::Product(ProductLowering::default())) {
            Lowering::Product(p) => Some(p),
            _ => None,
        }
    }

    /// The lowering of a Gemm or MatMul, if this is one.
    pub fn as_product(&self) -> Option<&ProductLowering> {
        match self {
            Lowering::Product(p) => Some(p),
            _ => None,
        }
    }

    /// The epilogue of a product.
    pub fn epilogue(&self) -> Option<&Epilogue> {
        match self {
            Lowering::Conv(c) => Some(&c.epilogue),
            Lowering::Product(p) => Some(&p.epilogue),
            _ => None,
        }
    }

    fn visit_operands_mut(&mut self, f: &mut impl FnMut(&mut ValueId)) {
        match self {
            Lowering::Conv(c) => {
                match &mut c.weights {
                    ConvWeights::AsGiven => {}
                    ConvWeights::Packed(v)
                    | ConvWeights::Winograd { transformed: v, .. }
                    | ConvWeights::Transposed { packed: v, .. } => f(v),
                }
                if let Some(r) = &mut c.epilogue.residual {
                    f(r);
                }
            }
            Lowering::Product(p) => {
                for v in
                    [&mut p.packed_b, &mut p.bias, &mut p.epilogue.residual].into_iter().flatten()
                {
                    f(v);
                }
            }
            Lowering::BatchNorm { .. } => {}
            Lowering::Softmax(s) => {
                if let Some(m) = &mut s.mask {
                    f(&mut m.mask);
                }
            }
            Lowering::Lstm { packed } => f(packed),
            Lowering::Integer(q) => {
                for v in [&mut q.packed, &mut q.bias].into_iter().flatten() {
                    f(v);
                }
                if let Some(r) = &mut q.residual {
                    f(&mut r.value);
                }
            }
            Lowering::Lookup { table } => f(table),
            Lowering::Requantized(_) => {}
            Lowering::DynamicLstm(q) => q.values_mut().into_iter().for_each(f),
        }
    }
}
