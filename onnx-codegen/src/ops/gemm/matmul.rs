//! ONNX MatMul: numpy's batched, broadcasting product (1-D operands
//! promoted and the added axis dropped), planned as strides over one
//! batch walk; f32 through the runtime's blocked product with a folded
//! bias, B in strips, a residual and an activation; other types through
//! the exact kernel.

use super::{host, host_mut, numeric, packed_b, product_lowering, weights_tokens};
use crate::emit::lit;
use crate::ir::ElemType;
use crate::ir::TensorType;
use crate::ir::lowering::Transposes;
use crate::ops::epilogue::{finish_host, post_tokens, residual};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, broadcast_shapes,
    conv::overflow, invalid, unsupported,
};
use onnx_codegen_runtime::gemm as rt_gemm;
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct MatMulRule;

/// A batched, broadcasting matrix product's plan (numpy rules, as MatMul).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::ops) struct MatMulPlan {
    pub(in crate::ops) batch: Vec<usize>,
    pub(in crate::ops) a_strides: Vec<isize>,
    pub(in crate::ops) b_strides: Vec<isize>,
    pub(in crate::ops) m: usize,
    pub(in crate::ops) k: usize,
    pub(in crate::ops) n: usize,
    pub(in crate::ops) out: Vec<usize>,
    /// Row and column strides inside each matrix of A and of B.
    pub(in crate::ops) a_mat: [usize; 2],
    pub(in crate::ops) b_mat: [usize; 2],
    /// Output batch strides and row stride, when a transpose of the output is
    /// folded into the product (`None`: stacked row-major matrices).
    pub(in crate::ops) y_layout: Option<(Vec<isize>, usize)>,
}

impl MatMulPlan {
    /// The runtime parameters.
    pub(in crate::ops) fn params(&self) -> rt_gemm::MatMul<'_> {
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
    pub(in crate::ops) fn tokens(&self, rt: &TokenStream) -> TokenStream {
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

pub(in crate::ops) fn matmul_plan(a: &[usize], b: &[usize]) -> OpResult<MatMulPlan> {
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
        Some(crate::ops::macs_of_product(inputs, outputs))
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
        let act = crate::ops::fused_activation(cx);
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
        let c = host::<T>(crate::ops::host_read(inputs, k.bias))?;
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
            let r = match crate::ops::host_read(inputs, self.residual) {
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
