//! Optionals whose presence is known at generation time: `Optional` and
//! `OptionalGetElement` are views of their input, `OptionalHasElement` a
//! constant.

use crate::ir::{ElemType, Tensor, TensorType};
use crate::ops::{Lowered, NodeCx, OpError, OpResult, OpRule, invalid, unsupported};

/// `Optional(x)` and `OptionalGetElement(x)` with `x` a tensor (or a present
/// optional, which is its tensor): a view of `x`.
pub(super) struct PresentRule;

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
pub(super) struct HasElementRule;

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
    use crate::ops::testing::{run, ty, types, value};

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
}
