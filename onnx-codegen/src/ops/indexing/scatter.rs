//! The plans of ScatterElements (and the older Scatter), ScatterND,
//! TensorScatter and GatherND: the index and update shapes checked against
//! the data, and the reduction each scatter applies.

use super::{Plan, Planned, index_input, is_data, product};
use crate::ir::{ElemType, TensorType};
use crate::ops::{NodeCx, OpError, OpResult, axis, invalid, unsupported};
use onnx_codegen_runtime::indexing::Reduction;

fn reduction(cx: &NodeCx<'_>, op: &str) -> OpResult<Reduction> {
    let r = cx.string_or("reduction", "none");
    let v = cx.version();
    let r = match r.as_str() {
        "none" => Reduction::None,
        "add" if v >= 16 => Reduction::Add,
        "mul" if v >= 16 => Reduction::Mul,
        "max" if v >= 18 => Reduction::Max,
        "min" if v >= 18 => Reduction::Min,
        other => return invalid(format!("{op}'s reduction '{other}' is not defined at opset {v}")),
    };
    Ok(r)
}

fn scatter_types(cx: &NodeCx<'_>, op: &str, r: Reduction) -> OpResult<TensorType> {
    let data = cx.input(0)?;
    let upd = cx.input(2)?;
    if !is_data(data.elem) {
        return unsupported(format!("{op} on {} tensors", data.elem));
    }
    if upd.elem != data.elem {
        return invalid(format!("{op}'s updates are {}, data is {}", upd.elem, data.elem));
    }
    if data.elem == ElemType::Bool && r != Reduction::None {
        return unsupported(format!("{op} with a reduction on bool tensors"));
    }
    Ok(data.clone())
}

pub(super) fn plan_scatter_elements(cx: &NodeCx<'_>, op: &str) -> OpResult<Planned> {
    let r = if op == "Scatter" { Reduction::None } else { reduction(cx, op)? };
    let data = scatter_types(cx, op, r)?;
    let idx = index_input(cx, 1, &format!("{op}'s indices"))?;
    let upd = cx.input(2)?;
    let rank = data.rank();
    if rank == 0 {
        return invalid(format!("{op} needs data of rank 1 or more"));
    }
    if idx.dims != upd.dims {
        return invalid(format!("{op}'s indices {idx} and updates {upd} must have the same shape"));
    }
    if idx.rank() != rank {
        return invalid(format!("{op}'s indices {idx} must have the rank of data {data}"));
    }
    let a = axis(cx.int_or("axis", 0), rank, &format!("{op} axis"))?;
    for d in 0..rank {
        if d != a && idx.dims[d] > data.dims[d] {
            return invalid(format!("{op}'s indices {idx} exceed data {data} on axis {d}"));
        }
    }
    if idx.dims[a] > 0 && data.dims[a] == 0 {
        return invalid(format!("{op} indexes an empty axis {a} of {data}"));
    }
    Ok(Planned {
        outputs: vec![data.clone()],
        plan: Plan::ScatterElements {
            shape: data.dims.clone(),
            index_shape: idx.dims.clone(),
            axis: a,
            reduction: r,
        },
    })
}

pub(super) fn plan_scatter_nd(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let r = reduction(cx, "ScatterND")?;
    let data = scatter_types(cx, "ScatterND", r)?;
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("ScatterND's indices must be int64, they are {}", idx.elem));
    }
    let upd = cx.input(2)?;
    let Some((&k, lead)) = idx.dims.split_last() else {
        return invalid("ScatterND's indices must have rank 1 or more");
    };
    if k > data.rank() {
        return invalid(format!("ScatterND's index tuples of {k} exceed the rank of data {data}"));
    }
    let expect: Vec<usize> = lead.iter().chain(&data.dims[k..]).copied().collect();
    if upd.dims != expect {
        return invalid(format!("ScatterND's updates are {upd}, expected dims {expect:?}"));
    }
    Ok(Planned {
        outputs: vec![data.clone()],
        plan: Plan::ScatterNd { shape: data.dims.clone(), k, count: product(lead)?, reduction: r },
    })
}

pub(super) fn plan_tensor_scatter(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let cache = cx.input(0)?;
    let upd = cx.input(1)?;
    if !is_data(cache.elem) {
        return unsupported(format!("TensorScatter on {} tensors", cache.elem));
    }
    if upd.elem != cache.elem {
        return invalid(format!(
            "TensorScatter's update is {}, the cache {}",
            upd.elem, cache.elem
        ));
    }
    let rank = cache.rank();
    if rank < 2 {
        return invalid(format!("TensorScatter needs a cache of rank 2 or more, got {cache}"));
    }
    let a = axis(cx.int_or("axis", -2), rank, "TensorScatter axis")?;
    if a == 0 {
        return invalid("TensorScatter's axis must not be the batch axis 0");
    }
    let circular = match cx.string_or("mode", "linear").as_str() {
        "linear" => false,
        "circular" => true,
        other => {
            return invalid(format!("TensorScatter's mode '{other}' is not linear or circular"));
        }
    };
    if upd.rank() != rank
        || (0..rank).any(|d| {
            if d == a { upd.dims[d] > cache.dims[d] } else { upd.dims[d] != cache.dims[d] }
        })
    {
        return invalid(format!("TensorScatter's update {upd} does not fit the cache {cache}"));
    }
    if let Some(w) = cx.opt_input(2)
        && (!matches!(w.elem, ElemType::Int64 | ElemType::Int32) || w.dims != cache.dims[..1])
    {
        return invalid(format!(
            "TensorScatter's write_indices {w} must be int64[{}]",
            cache.dims[0]
        ));
    }
    Ok(Planned {
        outputs: vec![cache.clone()],
        plan: Plan::TensorScatter {
            shape: cache.dims.clone(),
            axis: a,
            seq: upd.dims[a],
            circular,
        },
    })
}

pub(super) fn plan_gather_nd(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let data = cx.input(0)?;
    if !is_data(data.elem) {
        return unsupported(format!("GatherND on {} tensors", data.elem));
    }
    let idx = cx.input(1)?;
    if idx.elem != ElemType::Int64 {
        return invalid(format!("GatherND's indices must be int64, they are {}", idx.elem));
    }
    let b = cx.int_or("batch_dims", 0);
    let b = usize::try_from(b)
        .map_err(|_| OpError::Invalid(format!("GatherND's batch_dims {b} is negative")))?;
    let Some((&k, lead)) = idx.dims.split_last() else {
        return invalid("GatherND's indices must have rank 1 or more");
    };
    if b >= idx.rank() || b >= data.rank() {
        return invalid(format!(
            "GatherND's batch_dims {b} must be below the ranks of data {data} and indices {idx}"
        ));
    }
    if data.dims[..b] != idx.dims[..b] {
        return invalid(format!(
            "GatherND's data {data} and indices {idx} differ on the batch axes"
        ));
    }
    if k == 0 || b + k > data.rank() {
        return invalid(format!(
            "GatherND's index tuples of {k} do not fit data {data} after {b} batch axes"
        ));
    }
    let dims: Vec<usize> = lead.iter().chain(&data.dims[b + k..]).copied().collect();
    product(&dims)?;
    Ok(Planned {
        outputs: vec![TensorType::new(data.elem, dims)],
        plan: Plan::GatherNd { shape: data.dims.clone(), batch_dims: b, k },
    })
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn scatter_elements_and_scatter() {
        let a = run(
            18,
            "g () => (float[1,5] y) <float[1,5] d = {1, 2, 3, 4, 5}, int64[1,2] i = {1, -2},
                float[1,2] u = {10, 20}> {
                y = ScatterElements <axis: int = 1> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 10.0, 3.0, 20.0, 5.0]);
        // Duplicate indices accumulate with reduction add.
        let a = run(
            18,
            "g () => (int32[3] y) <int32[3] d = {1, 2, 3}, int32[2] i = {1, 1}, int32[2] u = {4, 5}> {
                y = ScatterElements <reduction: string = \"add\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 11.0, 3.0]);
        let a = run(
            10,
            "g () => (float[2,2] y) <float[2,2] d = {0, 0, 0, 0}, int64[1,2] i = {1, 0},
                float[1,2] u = {7, 8}> {
                y = Scatter (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [0.0, 8.0, 7.0, 0.0]);
        let a = run(
            16,
            "g (float[3] d, int64[2] i, float[2] u) => (float[3] y) {
                y = ScatterElements <reduction: string = \"max\"> (d, i, u)
            }",
        );
        assert!(errors(&a)[0].contains("not defined at opset 16"), "{:?}", errors(&a));
        let a = run(
            18,
            "g (float[3] d, int64[2] i, float[3] u) => (float[3] y) { y = ScatterElements (d, i, u) }",
        );
        assert!(errors(&a)[0].contains("same shape"), "{:?}", errors(&a));
        let a = run(
            18,
            "g (bool[3] d, int64[2] i, bool[2] u) => (bool[3] y) {
                y = ScatterElements <reduction: string = \"mul\"> (d, i, u)
            }",
        );
        assert!(unsupported(&a)[0].contains("bool"), "{:?}", unsupported(&a));
    }

    #[test]
    fn scatter_nd_and_tensor_scatter() {
        let a = run(
            18,
            "g () => (float[4] y) <float[4] d = {1, 2, 3, 4}, int64[2,1] i = {1, 1}, float[2] u = {3, 5}> {
                y = ScatterND <reduction: string = \"mul\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 30.0, 3.0, 4.0]);
        let a = run(
            18,
            "g () => (int64[2,2] y) <int64[2,2] d = {1, 2, 3, 4}, int64[1,1] i = {-1}, int64[1,2] u = {8, 9}> {
                y = ScatterND <reduction: string = \"min\"> (d, i, u)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 2.0, 3.0, 4.0]);
        let a = run(
            18,
            "g (float[2,2] d, int64[1,1] i, float[1,3] u) => (float[2,2] y) { y = ScatterND (d, i, u) }",
        );
        assert!(errors(&a)[0].contains("expected dims [1, 2]"), "{:?}", errors(&a));
        // Cache [1, 3, 1]; two rows written from row 2 wrap to row 0.
        let a = run(
            24,
            "g () => (float[1,3,1] y) <float[1,3,1] c = {1, 2, 3}, float[1,2,1] u = {8, 9}, int64[1] w = {2}> {
                y = TensorScatter <mode: string = \"circular\"> (c, u, w)
            }",
        );
        assert_eq!(value(&a, 0), [9.0, 2.0, 8.0]);
        let a = run(
            24,
            "g (float[2,3,4] c, float[2,4,4] u) => (float[2,3,4] y) { y = TensorScatter (c, u) }",
        );
        assert!(errors(&a)[0].contains("does not fit"), "{:?}", errors(&a));
    }

    #[test]
    fn gather_nd() {
        let a = run(
            13,
            "g () => (int32[2,2] y) <int32[2,2,2] d = {0, 1, 2, 3, 4, 5, 6, 7}, int64[2,1] i = {1, 0}> {
                y = GatherND <batch_dims: int = 1> (d, i)
            }",
        );
        assert_eq!(types(&a), [ty("int32[2, 2]")]);
        assert_eq!(value(&a, 0), [2.0, 3.0, 4.0, 5.0]);
        let a =
            run(13, "g (float[2,3,4] d, int64[5,2] i) => (float[5,4] y) { y = GatherND (d, i) }");
        assert_eq!(types(&a), [ty("float[5, 4]")]);
        let a = run(13, "g (float[2,3] d, int64[5,3] i) => (float[5] y) { y = GatherND (d, i) }");
        assert!(errors(&a)[0].contains("do not fit"), "{:?}", errors(&a));
    }
}
