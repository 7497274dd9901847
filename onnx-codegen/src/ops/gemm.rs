//! Matrix products: Gemm and MatMul (batched, broadcasting, with numpy's rules
//! for 1-D operands).

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule,
    broadcast_shapes, conv::overflow, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::lowering::{ProductLowering, Transposes};
use crate::ir::{ElemType, Lowering, TensorType};
use onnx_codegen_runtime::elementwise::Unary;
use onnx_codegen_runtime::gemm as rt_gemm;
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is a matrix product.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Gemm" => Some(&GemmRule),
        "MatMul" => Some(&MatMulRule),
        _ => None,
    }
}

fn numeric(cx: &NodeCx<'_>, t: &TensorType) -> OpResult<()> {
    match t.elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Float16
        | ElemType::Bfloat16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint32
        | ElemType::Uint64 => Ok(()),
        other => unsupported(format!("{} on {other} tensors", cx.node.op.op_type)),
    }
}

fn host<T: HostElem>(t: Option<&HostTensor>) -> Result<&[T], EvalError> {
    t.and_then(|t| t.get::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

fn host_mut<T: HostElem>(t: Option<&mut HostTensor>) -> Result<&mut [T], EvalError> {
    t.and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(ElemType::Float))
}

struct GemmRule;

/// Gemm's matrix sizes: `(m, k, n)`.
fn gemm_dims(cx: &NodeCx<'_>) -> OpResult<(usize, usize, usize)> {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    let (&[a0, a1], &[b0, b1]) = (a.dims.as_slice(), b.dims.as_slice()) else {
        return invalid(format!("Gemm needs 2-D A and B, got {a} and {b}"));
    };
    let (m, ka) = if cx.int_or("transA", 0) != 0 { (a1, a0) } else { (a0, a1) };
    let (kb, n) = if cx.int_or("transB", 0) != 0 { (b1, b0) } else { (b0, b1) };
    if ka != kb {
        return invalid(format!("Gemm inner dimensions differ: A gives {ka}, B gives {kb}"));
    }
    Ok((m, ka, n))
}

impl OpRule for GemmRule {
    /// Each output element is a dot product of length k.
    fn macs(
        &self,
        node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        let trans_a = node.attr_int("transA").unwrap_or(0) != 0;
        let a = inputs.first().copied().flatten();
        let k = a.and_then(|a| if trans_a { a.dims.first() } else { a.dims.get(1) });
        Some(
            super::numel_u64(outputs.first().copied().flatten())
                .saturating_mul(k.copied().map_or(0, super::to_u64)),
        )
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let a = cx.input(0)?;
        numeric(cx, a)?;
        if cx.input(1)?.elem != a.elem {
            return invalid("Gemm's A and B have different element types");
        }
        let (m, _, n) = gemm_dims(cx)?;
        if let Some(c) = cx.opt_input(2) {
            let out = broadcast_shapes(&[&c.dims, &[m, n]])?;
            if out != [m, n] {
                return invalid(format!("Gemm's C {c} does not broadcast to [{m}, {n}]"));
            }
        }
        Ok(vec![a.with_dims(vec![m, n])])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let (m, k, n) = gemm_dims(cx)?;
        let c_strides = match cx.opt_input(2).map(|c| c.dims.as_slice()) {
            None => [0, 0],
            Some(d) => {
                let padded: Vec<usize> = std::iter::repeat_n(1, 2usize.saturating_sub(d.len()))
                    .chain(d.iter().copied())
                    .collect();
                let row = if padded[0] == 1 { 0 } else { padded[1] as isize };
                let col = if padded[1] == 1 { 0 } else { 1 };
                [row, col]
            }
        };
        let elem = outputs.first().map_or(ElemType::Float, |t| t.elem);
        let act = super::fused_activation(cx);
        if act.is_some() && !matches!(elem, ElemType::Float | ElemType::Double) {
            return unsupported(format!("a Gemm's activation on {elem} tensors"));
        }
        let packed = packed_b(cx, elem, k, n)?;
        let residual = residual(cx, elem, &[m, n])?;
        Ok(Lowered::Kernel(Box::new(GemmKernel {
            elem,
            packed,
            residual,
            act,
            m,
            n,
            k,
            trans_a: cx.int_or("transA", 0) != 0,
            trans_b: cx.int_or("transB", 0) != 0,
            alpha: f64::from(cx.float_or("alpha", 1.0)),
            beta: f64::from(cx.float_or("beta", 1.0)),
            c_strides,
            has_c: cx.opt_input(2).is_some(),
        })))
    }
}

/// The product's lowering (what the rewriting passes folded into it).
fn product_lowering<'a>(cx: &NodeCx<'a>) -> OpResult<Option<&'a ProductLowering>> {
    match cx.lowering() {
        None => Ok(None),
        Some(Lowering::Product(p)) => Ok(Some(p)),
        Some(other) => invalid(format!("a matrix product cannot run as {other:?}")),
    }
}

/// Where the product reads its B as laid out in strips by the runtime's
/// `gemm::pack_b` (f32 only), after checking its length: the position of
/// the strips among the reads.
fn packed_b(cx: &NodeCx<'_>, elem: ElemType, k: usize, n: usize) -> OpResult<Option<usize>> {
    let Some(v) = product_lowering(cx)?.and_then(|p| p.packed_b) else {
        return Ok(None);
    };
    let (at, t) = cx.operand(v)?;
    let len = rt_gemm::packed_b_len(k, n);
    if elem != ElemType::Float || t.elem != elem || len.is_none_or(|l| t.dims != [l]) {
        return invalid(format!("a packed B {t} does not hold a float [{k}, {n}] in strips"));
    }
    Ok(Some(at))
}

/// Where the product reads a residual fused into its epilogue (f32 only, of
/// the output's dims), after checking it: its position among the reads.
pub(super) fn residual(cx: &NodeCx<'_>, elem: ElemType, dims: &[usize]) -> OpResult<Option<usize>> {
    let Some(v) = cx.lowering().and_then(Lowering::epilogue).and_then(|e| e.residual) else {
        return Ok(None);
    };
    let (at, t) = cx.operand(v)?;
    if elem != ElemType::Float || t.elem != elem || t.dims != dims {
        return invalid(format!(
            "a fused residual {t} must be a float tensor of the product's dims {dims:?}"
        ));
    }
    Ok(Some(at))
}

/// The `gemm::Post` of a fused f32 product in generated code: the residual
/// `r`, then `act` (a smooth one, GELU, through the same `vmath` routine
/// as the standalone op).
pub(super) fn post_tokens(
    act: Option<Unary<f64>>,
    r: Option<&TokenStream>,
    y: &impl quote::ToTokens,
    rt: &TokenStream,
) -> (TokenStream, TokenStream) {
    let none = quote!(#rt::gemm::Activation::None);
    let none_text = none.to_string();
    let (act, smooth, after) = match act {
        Some(Unary::Gelu) => (none, quote!(Some(#rt::gemm::Smooth::Gelu)), TokenStream::new()),
        Some(Unary::GeluTanh) => {
            (none, quote!(Some(#rt::gemm::Smooth::GeluTanh)), TokenStream::new())
        }
        Some(Unary::Silu) => (none, quote!(Some(#rt::gemm::Smooth::Silu)), TokenStream::new()),
        Some(Unary::HardSwish) => {
            (none, quote!(Some(#rt::gemm::Smooth::HardSwish)), TokenStream::new())
        }
        other => {
            let (a, after) = super::conv::fused_epilogue(other, ElemType::Float, y, rt);
            (a, quote!(None), after)
        }
    };
    let plain_smooth = smooth.to_string() == "None";
    let post = match r {
        None if plain_smooth && act.to_string() == none_text => {
            quote!(&#rt::gemm::Post::NONE)
        }
        None if plain_smooth => quote!(&#rt::gemm::Post::act(#act)),
        None => quote!(&#rt::gemm::Post { residual: None, act: #act, smooth: #smooth }),
        Some(r) => quote!(&#rt::gemm::Post { residual: Some(#r), act: #act, smooth: #smooth }),
    };
    (post, after)
}

/// `rt::gemm::Weights` in generated code: the strips when the product has
/// them, else B as given.
fn weights_tokens(
    strips: Option<&TokenStream>,
    b: &Option<TokenStream>,
    rt: &TokenStream,
) -> TokenStream {
    match strips {
        Some(s) => quote!(#rt::gemm::Weights::Strips(#s)),
        None => quote!(#rt::gemm::Weights::Dense(#b)),
    }
}

/// `y[i] += r[i]`, then the activation: what a fused residual and
/// activation do, on the exact kernels' result (constant folding; also
/// Conv's and BatchNormalization's).
pub(super) fn finish_host<T: onnx_codegen_runtime::num::Float + HostElem>(
    y: &mut [T],
    r: Option<&[T]>,
    act: Option<Unary<f64>>,
) {
    if let Some(r) = r {
        for (v, x) in y.iter_mut().zip(r) {
            *v = v.add(*x);
        }
    }
    if let Some(op) = act {
        onnx_codegen_runtime::elementwise::unary_in_place(op.map(T::from_f64), y);
    }
}

struct GemmKernel {
    elem: ElemType,
    /// The read holding B laid out in strips, read instead of B.
    packed: Option<usize>,
    /// The read holding a residual added before the activation.
    residual: Option<usize>,
    m: usize,
    n: usize,
    k: usize,
    trans_a: bool,
    trans_b: bool,
    alpha: f64,
    beta: f64,
    c_strides: [isize; 2],
    has_c: bool,
    /// An activation fused into the Gemm by `passes::fuse`.
    act: Option<onnx_codegen_runtime::elementwise::Unary<f64>>,
}

/// An integer Gemm's scale: the float attribute truncated toward zero.
fn int_scale<T: Num>(v: f64) -> T {
    let t = T::from_usize(v.abs().trunc() as usize);
    if v < 0.0 { t.neg() } else { t }
}

fn run_gemm<T: Num + HostElem>(
    k: &GemmKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = rt_gemm::Gemm {
        m: k.m,
        n: k.n,
        k: k.k,
        trans_a: k.trans_a,
        trans_b: k.trans_b,
        alpha: int_scale::<T>(k.alpha),
        beta: int_scale::<T>(k.beta),
        c_strides: k.c_strides,
    };
    let a = host::<T>(inputs.first().copied().flatten())?;
    let b = host::<T>(inputs.get(1).copied().flatten())?;
    let c = match inputs.get(2).copied().flatten() {
        Some(c) => Some(host::<T>(Some(c))?),
        None => None,
    };
    rt_gemm::gemm(&p, a, b, c, host_mut::<T>(outputs.first_mut())?)?;
    Ok(())
}

impl Kernel for GemmKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.elem {
            // Float scales are exact in the float types; integer Gemm takes
            // integer-valued scales.
            ElemType::Float => run_gemm_float::<f32>(self, inputs, outputs),
            ElemType::Double => run_gemm_float::<f64>(self, inputs, outputs),
            ElemType::Float16 => run_gemm_float::<super::f16>(self, inputs, outputs),
            ElemType::Bfloat16 => run_gemm_float::<super::bf16>(self, inputs, outputs),
            _ => crate::by_num_type!(self.elem, run_gemm(self, inputs, outputs)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (m, n, k) = (lit::usize_lit(self.m), lit::usize_lit(self.n), lit::usize_lit(self.k));
        let (ta, tb) = (self.trans_a, self.trans_b);
        let alpha = self.scale_tokens(self.alpha, rt);
        let beta = self.scale_tokens(self.beta, rt);
        let cs = lit::isize_array(&self.c_strides);
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        let c = match (self.has_c, io.inputs.get(2)) {
            (true, Some(Some(c))) => quote!(Some(#c)),
            _ => quote!(None),
        };
        // f32 runs on the blocked SIMD kernel; folding keeps the exact one.
        let params = quote! {
            &#rt::gemm::Gemm {
                m: #m, n: #n, k: #k, trans_a: #ta, trans_b: #tb,
                alpha: #alpha, beta: #beta, c_strides: #cs,
            }
        };
        if self.elem == ElemType::Float {
            let (post, after) = post_tokens(self.act, io.read(self.residual), y, rt);
            let b = weights_tokens(io.read(self.packed), b, rt);
            return quote! {
                #rt::gemm::sgemm(#params, #a, #b, #c, #y, #post)?;
                #after
            };
        }
        let (_, after) = super::conv::fused_epilogue(self.act, self.elem, y, rt);
        quote! {
            #rt::gemm::gemm(#params, #a, #b, #c, #y)?;
            #after
        }
    }

    fn reads_input(&self, i: usize) -> bool {
        self.reads_b(i)
    }
}

impl GemmKernel {
    /// B's own storage is not read when the strips are.
    fn reads_b(&self, i: usize) -> bool {
        !(self.packed.is_some() && i == 1)
    }

    fn scale_tokens(&self, v: f64, rt: &TokenStream) -> TokenStream {
        match self.elem {
            // The 16-bit floats take the scale rounded to their type, as
            // numpy does with a Python float next to a float16 array.
            ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16 => {
                lit::float_in(v, self.elem, rt)
            }
            // Integer Gemm truncates its float scales, as the host fold does.
            _ => lit::int(v.trunc() as i128, self.elem).unwrap_or_else(|| lit::isize_lit(0)),
        }
    }
}

fn run_gemm_float<T: onnx_codegen_runtime::num::Float + HostElem>(
    k: &GemmKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = rt_gemm::Gemm {
        m: k.m,
        n: k.n,
        k: k.k,
        trans_a: k.trans_a,
        trans_b: k.trans_b,
        alpha: T::from_f64(k.alpha),
        beta: T::from_f64(k.beta),
        c_strides: k.c_strides,
    };
    let a = host::<T>(inputs.first().copied().flatten())?;
    let b = host::<T>(inputs.get(1).copied().flatten())?;
    let c = match inputs.get(2).copied().flatten() {
        Some(c) => Some(host::<T>(Some(c))?),
        None => None,
    };
    let y = host_mut::<T>(outputs.first_mut())?;
    rt_gemm::gemm(&p, a, b, c, y)?;
    let r = match super::host_read(inputs, k.residual) {
        Some(r) => Some(host::<T>(Some(r))?),
        None => None,
    };
    finish_host(y, r, k.act);
    Ok(())
}

struct MatMulRule;

/// A batched, broadcasting matrix product's plan (numpy rules, as MatMul).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct MatMulPlan {
    pub(super) batch: Vec<usize>,
    pub(super) a_strides: Vec<isize>,
    pub(super) b_strides: Vec<isize>,
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) out: Vec<usize>,
    /// Row and column strides inside each matrix of A and of B.
    pub(super) a_mat: [usize; 2],
    pub(super) b_mat: [usize; 2],
    /// Output batch strides and row stride, when a transpose of the output is
    /// folded into the product (`None`: stacked row-major matrices).
    pub(super) y_layout: Option<(Vec<isize>, usize)>,
}

impl MatMulPlan {
    /// The runtime parameters.
    pub(super) fn params(&self) -> rt_gemm::MatMul<'_> {
        rt_gemm::MatMul {
            batch: &self.batch,
            a_batch_strides: &self.a_strides,
            b_batch_strides: &self.b_strides,
            m: self.m,
            k: self.k,
            n: self.n,
            a_strides: self.a_mat,
            b_strides: self.b_mat,
            y_layout: self.y_layout.as_ref().map(|(s, r)| (s.as_slice(), *r)),
        }
    }

    /// The runtime parameters in generated code.
    pub(super) fn tokens(&self, rt: &TokenStream) -> TokenStream {
        let batch = lit::usizes(&self.batch);
        let (sa, sb) = (lit::isizes(&self.a_strides), lit::isizes(&self.b_strides));
        let (m, k, n) = (lit::usize_lit(self.m), lit::usize_lit(self.k), lit::usize_lit(self.n));
        let dense = self.a_mat == [self.k, 1] && self.b_mat == [self.n, 1];
        if dense && self.y_layout.is_none() {
            return quote!(#rt::gemm::MatMul::dense(#batch, #sa, #sb, #m, #k, #n));
        }
        let [ar, ac] = self.a_mat.map(lit::usize_lit);
        let [br, bc] = self.b_mat.map(lit::usize_lit);
        let y = match &self.y_layout {
            None => quote!(None),
            Some((s, r)) => {
                let (s, r) = (lit::isizes(s), lit::usize_lit(*r));
                quote!(Some((#s, #r)))
            }
        };
        quote! {
            #rt::gemm::MatMul {
                batch: #batch, a_batch_strides: #sa, b_batch_strides: #sb, m: #m, k: #k, n: #n,
                a_strides: [#ar, #ac], b_strides: [#br, #bc], y_layout: #y,
            }
        }
    }
}

/// Row-major strides of `dims`.
fn contiguous(dims: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(dims[i + 1]);
    }
    s
}

/// A transpose folded into a product operand (see `passes::optimize`): the
/// operand is `Transpose(source, perm)`, read in place. Returns the operand's
/// dims and, per operand axis, its stride in `source`.
fn permuted(source: &[usize], perm: &[usize]) -> OpResult<(Vec<usize>, Vec<usize>)> {
    let s = contiguous(source);
    let mut dims = Vec::with_capacity(perm.len());
    let mut strides = Vec::with_capacity(perm.len());
    let mut seen = vec![false; source.len()];
    for &p in perm {
        let Some(i) = Some(p).filter(|&i| i < source.len() && !seen[i]) else {
            return invalid(format!("a folded transpose's perm {perm:?} is not a permutation"));
        };
        seen[i] = true;
        dims.push(source[i]);
        strides.push(s[i]);
    }
    if perm.len() != source.len() {
        return invalid(format!("a folded transpose's perm {perm:?} does not match {source:?}"));
    }
    Ok((dims, strides))
}

/// The plan of a `MatMul` node, with its folded transposes; and its output dims.
fn node_plan(cx: &NodeCx<'_>) -> OpResult<(MatMulPlan, Vec<usize>)> {
    let (a, b) = (cx.input(0)?, cx.input(1)?);
    let none = Transposes::default();
    let folded = product_lowering(cx)?.map_or(&none, |p| &p.transposes);
    let (pa, pb, py) = (&folded.a, &folded.b, &folded.y);
    let (a_dims, a_st) = match &pa {
        Some(perm) => permuted(&a.dims, perm)?,
        None => (a.dims.clone(), contiguous(&a.dims)),
    };
    let (b_dims, b_st) = match &pb {
        Some(perm) => permuted(&b.dims, perm)?,
        None => (b.dims.clone(), contiguous(&b.dims)),
    };
    let mut plan = matmul_plan(&a_dims, &b_dims)?;
    if pa.is_none() && pb.is_none() && py.is_none() {
        let out = plan.out.clone();
        return Ok((plan, out));
    }
    if a_dims.len() < 2 || b_dims.len() < 2 {
        return invalid("a transpose folded into MatMul needs operands of rank 2 or more");
    }
    // Batch strides from the operands' own strides (0 where broadcast).
    let batch_strides = |dims: &[usize], st: &[usize]| -> OpResult<Vec<isize>> {
        let own = dims.len() - 2;
        let offset = plan.batch.len() - own;
        let mut s = vec![0isize; plan.batch.len()];
        for i in 0..own {
            if dims[i] != 1 {
                s[offset + i] = isize::try_from(st[i]).or_else(|_| overflow("a stride"))?;
            }
        }
        Ok(s)
    };
    let r = a_dims.len();
    plan.a_strides = batch_strides(&a_dims, &a_st)?;
    plan.a_mat = [a_st[r - 2], a_st[r - 1]];
    let r = b_dims.len();
    plan.b_strides = batch_strides(&b_dims, &b_st)?;
    plan.b_mat = [b_st[r - 2], b_st[r - 1]];
    let mut out = plan.out.clone();
    if let Some(perm) = &py {
        // The output is stored transposed: `out` axis `k` is product axis
        // `perm[k]`, so product axis `perm[k]` steps by `out`'s stride `k`.
        let (dims, _) = permuted(&plan.out, perm)?;
        let os = contiguous(&dims);
        let mut ys = vec![0usize; perm.len()];
        for (k, &p) in perm.iter().enumerate() {
            ys[p] = os[k];
        }
        let r = ys.len();
        if ys[r - 1] != 1 {
            return invalid("a transpose folded into MatMul's output must keep the last axis");
        }
        let batch: Vec<isize> = ys[..r - 2]
            .iter()
            .map(|&v| isize::try_from(v).or_else(|_| overflow("a stride")))
            .collect::<OpResult<_>>()?;
        plan.y_layout = Some((batch, ys[r - 2]));
        out = dims;
    }
    Ok((plan, out))
}

pub(super) fn matmul_plan(a: &[usize], b: &[usize]) -> OpResult<MatMulPlan> {
    if a.is_empty() || b.is_empty() {
        return invalid("matrix product operands must have rank 1 or more");
    }
    let a2: Vec<usize> = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (m, ka) = (a2[a2.len() - 2], a2[a2.len() - 1]);
    let (kb, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
    if ka != kb {
        return invalid(format!("matrix product inner dimensions differ: {a:?} @ {b:?}"));
    }
    let (ab, bb) = (&a2[..a2.len() - 2], &b2[..b2.len() - 2]);
    let batch = broadcast_shapes(&[ab, bb])?;
    if batch.len() > onnx_codegen_runtime::shape::MAX_RANK {
        return unsupported(format!(
            "a batch rank above {}",
            onnx_codegen_runtime::shape::MAX_RANK
        ));
    }
    let strides = |own: &[usize], matrix: usize| -> Vec<isize> {
        let offset = batch.len() - own.len();
        let mut s = vec![0isize; batch.len()];
        let mut step = isize::try_from(matrix).unwrap_or(isize::MAX);
        for i in (0..own.len()).rev() {
            if own[i] != 1 {
                s[offset + i] = step;
            }
            step = step.saturating_mul(isize::try_from(own[i]).unwrap_or(isize::MAX));
        }
        s
    };
    let mut out = batch.clone();
    if a.len() > 1 {
        out.push(m);
    }
    if b.len() > 1 {
        out.push(n);
    }
    Ok(MatMulPlan {
        a_strides: strides(ab, m.saturating_mul(ka)),
        b_strides: strides(bb, kb.saturating_mul(n)),
        batch,
        m,
        k: ka,
        n,
        out,
        a_mat: [ka, 1],
        b_mat: [n, 1],
        y_layout: None,
    })
}

impl OpRule for MatMulRule {
    /// Each output element is a dot product along A's last axis.
    fn macs(
        &self,
        _node: &crate::ir::Node,
        inputs: &[Option<&TensorType>],
        outputs: &[Option<&TensorType>],
    ) -> Option<u64> {
        Some(super::macs_of_product(inputs, outputs))
    }

    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (a, b) = (cx.input(0)?, cx.input(1)?);
        numeric(cx, a)?;
        if a.elem != b.elem {
            return invalid("MatMul's operands have different element types");
        }
        Ok(vec![a.with_dims(node_plan(cx)?.1)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let a = cx.input(0)?;
        let plan = node_plan(cx)?.0;
        // A bias folded in from the `Add` after it (f32 only): one per column.
        let bias = match product_lowering(cx)?.and_then(|p| p.bias) {
            None => None,
            Some(v) => match cx.operand(v)? {
                (at, t) if a.elem == ElemType::Float && t.elem == a.elem && t.dims == [plan.n] => {
                    Some(at)
                }
                (_, t) => {
                    return invalid(format!("MatMul's folded bias {t} must be float[{}]", plan.n));
                }
            },
        };
        let packed = packed_b(cx, a.elem, plan.k, plan.n)?;
        if packed.is_some() && plan.b_strides.iter().any(|&s| s != 0) {
            return invalid("a packed B must be shared by the whole batch");
        }
        let residual = residual(cx, a.elem, outputs.first().map_or(&[][..], |t| &t.dims))?;
        if residual.is_some() && plan.y_layout.is_some() {
            return invalid("a fused residual needs the product's output in its own layout");
        }
        let act = super::fused_activation(cx);
        if act.is_some() && a.elem != ElemType::Float {
            return unsupported(format!("a MatMul's activation on {} tensors", a.elem));
        }
        Ok(Lowered::Kernel(Box::new(MatMulKernel {
            elem: outputs.first().map_or(a.elem, |t| t.elem),
            plan,
            bias,
            packed,
            residual,
            act,
        })))
    }
}

struct MatMulKernel {
    elem: ElemType,
    plan: MatMulPlan,
    /// The read holding a bias added to each column (folded from an `Add`).
    bias: Option<usize>,
    /// The read holding B laid out in strips, read instead of B.
    packed: Option<usize>,
    /// The read holding a residual added after the bias (f32 only).
    residual: Option<usize>,
    /// An activation fused by `passes::fuse`, applied last (f32 only).
    act: Option<onnx_codegen_runtime::elementwise::Unary<f64>>,
}

fn run_matmul<T: Num + HostElem>(
    k: &MatMulKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let p = k.plan.params();
    let a = host::<T>(inputs.first().copied().flatten())?;
    let b = host::<T>(inputs.get(1).copied().flatten())?;
    let y = host_mut::<T>(outputs.first_mut())?;
    rt_gemm::matmul(&p, a, b, y)?;
    if k.bias.is_some() {
        let c = host::<T>(super::host_read(inputs, k.bias))?;
        let n = k.plan.n.max(1);
        // The product's columns are its last axis whatever its layout.
        for (i, v) in y.iter_mut().enumerate() {
            *v = v.add(c[i % n]);
        }
    }
    Ok(())
}

impl Kernel for MatMulKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        crate::by_num_type!(self.elem, run_matmul(self, inputs, outputs))?;
        if self.residual.is_some() || self.act.is_some() {
            let r = match super::host_read(inputs, self.residual) {
                Some(r) => Some(host::<f32>(Some(r))?),
                None => None,
            };
            finish_host(host_mut::<f32>(outputs.first_mut())?, r, self.act);
        }
        Ok(())
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = self.plan.tokens(rt);
        let (a, b, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        let c = match io.read(self.bias) {
            Some(c) => quote!(Some(#c)),
            None => quote!(None),
        };
        if self.elem == ElemType::Float {
            let (post, after) = post_tokens(self.act, io.read(self.residual), y, rt);
            let b = weights_tokens(io.read(self.packed), b, rt);
            return quote! {
                #rt::gemm::smatmul(&#p, #a, #b, #c, #y, #post)?;
                #after
            };
        }
        quote!(#rt::gemm::matmul(&#p, #a, #b, #y)?;)
    }

    /// B's own storage is not read when the strips are.
    fn reads_input(&self, i: usize) -> bool {
        !(self.packed.is_some() && i == 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_follows_numpy_shapes() {
        let p = matmul_plan(&[2, 1, 3, 4], &[5, 4, 6]).unwrap();
        assert_eq!((p.batch.as_slice(), p.m, p.k, p.n), (&[2, 5][..], 3, 4, 6));
        assert_eq!(p.out, [2, 5, 3, 6]);
        assert_eq!(p.a_strides, [12, 0]);
        assert_eq!(p.b_strides, [0, 24]);
        assert_eq!(matmul_plan(&[4], &[4, 6]).unwrap().out, [6]);
        assert_eq!(matmul_plan(&[3, 4], &[4]).unwrap().out, [3]);
        assert_eq!(matmul_plan(&[4], &[4]).unwrap().out, Vec::<usize>::new());
        assert!(matmul_plan(&[3, 4], &[5, 6]).is_err());
    }
}
