//! `EyeLike`: ones on diagonal `k` of a matrix shaped like the input,
//! zeros elsewhere; a constant, as it depends only on the input's shape.

use super::{is_data, set_ones};
use crate::ir::{ElemType, Tensor, TensorType};
use crate::ops::host::HostData;
use crate::ops::{HostTensor, Lowered, NodeCx, OpError, OpResult, OpRule, invalid, unsupported};

pub(super) struct EyeLikeRule;

fn eye_like_type(cx: &NodeCx<'_>) -> OpResult<TensorType> {
    let x = cx.input(0)?;
    if x.rank() != 2 {
        return invalid(format!("EyeLike needs a 2-D input, got {x}"));
    }
    let elem = match cx.node.attr("dtype") {
        Some(_) => {
            let code = cx.int_or("dtype", 1);
            i32::try_from(code).ok().and_then(ElemType::from_proto).ok_or_else(|| {
                OpError::Invalid(format!("EyeLike's dtype {code} is not an element type"))
            })?
        }
        None => x.elem,
    };
    if !is_data(elem) {
        return unsupported(format!("EyeLike producing {elem} tensors"));
    }
    Ok(TensorType::new(elem, x.dims.clone()))
}

impl OpRule for EyeLikeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![eye_like_type(cx)?])
    }

    fn lower(&self, _cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        unsupported("EyeLike is folded, never run")
    }

    fn constant_outputs(
        &self,
        cx: &NodeCx<'_>,
        _outputs: &[TensorType],
    ) -> OpResult<Option<Vec<Tensor>>> {
        let ty = eye_like_type(cx)?;
        let (rows, cols) = (ty.dims[0], ty.dims[1]);
        let k = cx.int_or("k", 0);
        let mut ones = HostTensor::zeros(&ty)
            .ok_or_else(|| OpError::Invalid(format!("EyeLike's output {ty} is too large")))?;
        // One at (r, r + k) for every row where that column exists.
        let mut one = HostTensor::zeros(&TensorType::new(ty.elem, vec![1]))
            .ok_or_else(|| OpError::Unsupported(format!("EyeLike producing {}", ty.elem)))?;
        set_ones(&mut one.data);
        for r in 0..rows {
            let c = i128::try_from(r).unwrap_or(i128::MAX) + i128::from(k);
            let Ok(c) = usize::try_from(c) else { continue };
            if c < cols {
                set_at(&mut ones.data, r * cols + c, &one.data);
            }
        }
        Ok(Some(vec![ones.to_tensor("eye")]))
    }
}

/// `dst[at] = src[0]` for host data of the same type.
fn set_at(dst: &mut HostData, at: usize, src: &HostData) {
    macro_rules! set {
        ($($v:ident),*) => {
            match (dst, src) {
                $((HostData::$v(d), HostData::$v(s)) => {
                    if let (Some(d), Some(s)) = (d.get_mut(at), s.first()) {
                        *d = *s;
                    }
                })*
                _ => {}
            }
        };
    }
    set!(F32, F64, I8, I16, I32, I64, U8, U16, U32, U64, Bool, F16, Bf16);
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, value};

    #[test]
    fn eye_like() {
        let a = run(
            22,
            "g (int32[2,3] x) => (float[2,3] y) { y = EyeLike <dtype: int = 1, k: int = 1> (x) }",
        );
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        assert_eq!(value(&a, 0), [0.0, 1.0, 0.0, 0.0, 0.0, 1.0]);
        let a = run(9, "g (int64[3,2] x) => (int64[3,2] y) { y = EyeLike <k: int = -1> (x) }");
        assert_eq!(value(&a, 0), [0.0, 0.0, 1.0, 0.0, 0.0, 1.0]);
        let a = run(9, "g (int64[3,2,1] x) => (int64[3,2,1] y) { y = EyeLike (x) }");
        assert!(errors(&a)[0].contains("2-D"), "{:?}", errors(&a));
    }
}
