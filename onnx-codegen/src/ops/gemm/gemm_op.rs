//! ONNX Gemm: `alpha * A' B' + beta * C` on 2-D operands, f32 through the
//! runtime's blocked product (B in strips when the pipeline packed it, a
//! residual and an activation in its epilogue), other types through the
//! exact kernel.

use super::{host, host_mut, numeric, packed_b, weights_tokens};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::epilogue::{finish_host, fused_epilogue, post_tokens, residual};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpResult, OpRule, broadcast_shapes,
    invalid, unsupported,
};
use onnx_codegen_runtime::gemm as rt_gemm;
use onnx_codegen_runtime::num::Num;
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct GemmRule;

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
            crate::ops::numel_u64(outputs.first().copied().flatten())
                .saturating_mul(k.copied().map_or(0, crate::ops::to_u64)),
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
            // Before opset 7, C broadcasts only when the node says so.
            if cx.version() < 7 && cx.int_or("broadcast", 0) == 0 && c.dims != [m, n] {
                return invalid(format!(
                    "Gemm before opset 7 without 'broadcast' = 1 takes C of shape [{m}, {n}], \
                     got {c}"
                ));
            }
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
        let act = crate::ops::fused_activation(cx);
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
            ElemType::Float16 => run_gemm_float::<crate::ops::f16>(self, inputs, outputs),
            ElemType::Bfloat16 => run_gemm_float::<crate::ops::bf16>(self, inputs, outputs),
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
        let (_, after) = fused_epilogue(self.act, self.elem, y, rt);
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
    let r = match crate::ops::host_read(inputs, k.residual) {
        Some(r) => Some(host::<T>(Some(r))?),
        None => None,
    };
    finish_host(y, r, k.act);
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, value};

    #[test]
    fn gemm_before_opset_7_broadcasts_c_only_when_told() {
        let src = |attrs: &str| {
            format!(
                "g () => (float[2,2] y) <float[2,2] a = {{1, 2, 3, 4}}, float[2,2] b = {{1, 0, 0, 1}}, float[2] c = {{10, 20}}> {{
                    y = Gemm {attrs} (a, b, c)
                }}"
            )
        };
        let a = run(6, &src("<broadcast: int = 1>"));
        assert_eq!(value(&a, 0), [11.0, 22.0, 13.0, 24.0]);
        let a = run(6, &src(""));
        let e = errors(&a);
        assert!(
            e.len() == 1
                && e[0].contains("Gemm before opset 7 without 'broadcast' = 1 takes C of shape [2, 2], got float[2]"),
            "{e:?}"
        );
        // Opset 7 broadcasts C without being told.
        let a = run(7, &src(""));
        assert_eq!(value(&a, 0), [11.0, 22.0, 13.0, 24.0]);
    }
}
