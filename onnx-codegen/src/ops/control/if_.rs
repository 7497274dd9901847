//! `If`: both branches compiled and emitted as the arms of a Rust `if`,
//! sharing one arena; with a condition known at generation time, only the
//! taken branch (and its outputs fold when they are constant).
//!
//! A branch may be invalid at the shapes the graph is compiled for while the
//! other is not: exporters guard code for one input size behind a run-time
//! test (silero-vad's 8 and 16 kHz paths, chosen by its `sr` input, each
//! written for its own chunk length). onnxruntime fails only if such a
//! branch is taken; so does the generated code: the arm returns
//! `Error::ShapeMismatch`, the If takes the other branch's types, and the
//! compiler warns. A branch this compiler does not support is still refused.

use super::body::{Body, bind_all, captures, compile, error_tokens, idents, io_in};
use crate::ir::{ElemType, Tensor, TensorType};
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    invalid, unsupported,
};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct IfRule;

impl IfRule {
    fn cond(cx: &NodeCx<'_>) -> OpResult<Option<bool>> {
        let c = cx.input(0)?;
        if c.elem != ElemType::Bool || c.numel() != Some(1) {
            return invalid(format!("the condition of If must be one bool, got {c}"));
        }
        Ok(cx.constant(0).and_then(|t| t.to_i64s()).and_then(|v| v.first().map(|&b| b != 0)))
    }

    fn branches(cx: &NodeCx<'_>) -> OpResult<Branches> {
        let compiled = |then, els| Branches { then, els, fails: None };
        Ok(match Self::cond(cx)? {
            Some(true) => compiled(Some(compile(cx, "then_branch", &[])?), None),
            Some(false) => compiled(None, Some(compile(cx, "else_branch", &[])?)),
            None => match (compile(cx, "then_branch", &[]), compile(cx, "else_branch", &[])) {
                (Ok(t), Ok(e)) => compiled(Some(t), Some(e)),
                (Ok(t), Err(OpError::Invalid(m))) => {
                    Branches { then: Some(t), els: None, fails: Some(m) }
                }
                (Err(OpError::Invalid(m)), Ok(e)) => {
                    Branches { then: None, els: Some(e), fails: Some(m) }
                }
                (Err(e), _) | (_, Err(e)) => return Err(e),
            },
        })
    }
}

/// The compiled branches of an If: the taken one when the condition is
/// known at generation time, both otherwise, unless one is invalid at these
/// shapes (`fails` says why; its arm returns an error at run time).
struct Branches {
    then: Option<Body>,
    els: Option<Body>,
    fails: Option<String>,
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
        let Branches { then, els, .. } = Self::branches(cx)?;
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
        let Branches { then, els, .. } = Self::branches(cx)?;
        Ok(then.or(els).and_then(|b| b.constant_outputs()))
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let Branches { then, els, fails } = Self::branches(cx)?;
        let arena = [&then, &els].into_iter().flatten().map(|b| b.arena_bytes()).max().unwrap_or(0);
        let kernel = IfKernel {
            own: cx.node.inputs.len(),
            outputs: cx.node.outputs.len(),
            then,
            els,
            fails,
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
    /// Why the absent branch cannot run at these shapes, when the condition
    /// is known only at run time.
    fails: Option<String>,
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
        let fail = quote!(return Err(#rt::Error::ShapeMismatch););
        let c = io_in(io, 0);
        let code = match (&self.then, &self.els, &self.fails) {
            (Some(t), Some(e), _) => {
                let (t, e) = (body(t), body(e));
                quote!(if #rt::control::flag(#c)? { #t } else { #e })
            }
            (Some(t), None, Some(_)) => {
                let t = body(t);
                quote!(if #rt::control::flag(#c)? { #t } else { #fail })
            }
            (None, Some(e), Some(_)) => {
                let e = body(e);
                quote!(if #rt::control::flag(#c)? { #fail } else { #e })
            }
            (Some(b), None, None) | (None, Some(b), None) => body(b),
            (None, None, _) => quote!(),
        };
        quote!({ #bind #arena #code })
    }

    fn reads_input(&self, i: usize) -> bool {
        if i < self.own {
            return self.fails.is_some() || (self.then.is_some() && self.els.is_some());
        }
        [&self.then, &self.els].into_iter().flatten().any(|b| b.reads_slot(i))
    }

    fn scratch(&self) -> Option<TensorType> {
        (self.arena > 0).then(|| TensorType::new(ElemType::Uint8, vec![self.arena]))
    }

    fn warnings(&self) -> Vec<String> {
        let Some(why) = &self.fails else { return Vec::new() };
        let branch = if self.then.is_some() { "else_branch" } else { "then_branch" };
        vec![format!(
            "the {branch} of If cannot run at these shapes ({why}); `run` returns \
             Error::ShapeMismatch if the condition takes it"
        )]
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value, warnings};

    #[test]
    fn a_branch_invalid_at_these_shapes_fails_at_run_time_when_the_condition_is_not_known() {
        // silero-vad: the 8 kHz branch, compiled for a 16 kHz chunk, squeezes
        // a dimension that is 1 only at 8 kHz.
        const BRANCHES: &str = "<then_branch: graph = t () => (a) { a = Relu (x) },
            else_branch: graph = e () => (b) {
              axes = Constant <value: tensor = int64[1] {1}> ()
              b = Squeeze (x, axes)
            }>";
        let a = run(
            17,
            &format!("g (bool c, float[1, 2] x) => (float[1, 2] y) {{ y = If (c) {BRANCHES} }}"),
        );
        assert_eq!(types(&a), [ty("float[1, 2]")]);
        assert!(errors(&a).is_empty() && unsupported(&a).is_empty(), "{:?}", errors(&a));
        let w = warnings(&a);
        assert!(
            w.len() == 1 && w[0].starts_with("the else_branch of If cannot run at these shapes"),
            "{w:?}"
        );
        // A known condition that takes the invalid branch is an error, as before.
        let a = run(
            17,
            &format!(
                "g (float[1, 2] x) => (float[1, 2] y) {{
                   c = Constant <value: tensor = bool {{0}}> ()
                   y = If (c) {BRANCHES}
                 }}"
            ),
        );
        assert!(errors(&a)[0].contains("Squeeze"), "{:?}", errors(&a));
        assert!(warnings(&a).is_empty());
    }

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
}
