//! The plans of the operators whose output length depends on the data.
//! NonZero, Compress, NonMaxSuppression and Unique take the shape the
//! model declares (or the one a constant input gives); Unique without
//! declared lengths, the pieces of a SplitToSequence whose sizes come at
//! run time and a SequenceAt at a run-time position (of elements of
//! different lengths) are data-sized instead.

use super::{Plan, Planned, declared_of, is_data, product};
use crate::ir::Tensor;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::{Data, HostData};
use crate::ops::{HostTensor, NodeCx, OpError, OpResult, axis, invalid, unsupported};
use onnx_codegen_runtime::indexing::{self as rt_ix, Nms, Slices};
use onnx_codegen_runtime::{bf16, f16};

fn count_nonzero(t: &HostTensor) -> usize {
    fn n<T: Data + rt_ix::IsZero>(d: &HostData) -> usize {
        T::of(d).map_or(0, |v| v.iter().filter(|x| !x.is_zero()).count())
    }
    match &t.data {
        HostData::F32(_) => n::<f32>(&t.data),
        HostData::F64(_) => n::<f64>(&t.data),
        HostData::I8(_) => n::<i8>(&t.data),
        HostData::I16(_) => n::<i16>(&t.data),
        HostData::I32(_) => n::<i32>(&t.data),
        HostData::I64(_) => n::<i64>(&t.data),
        HostData::U8(_) => n::<u8>(&t.data),
        HostData::U16(_) => n::<u16>(&t.data),
        HostData::U32(_) => n::<u32>(&t.data),
        HostData::U64(_) => n::<u64>(&t.data),
        HostData::Bool(_) => n::<bool>(&t.data),
        HostData::F16(_) => n::<f16>(&t.data),
        HostData::Bf16(_) => n::<bf16>(&t.data),
    }
}

pub(super) fn plan_non_zero(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("NonZero on {} tensors", x.elem));
    }
    if x.rank() == 0 {
        return unsupported("NonZero of a scalar");
    }
    let count = match cx.constant(0).and_then(HostTensor::from_tensor) {
        Some(h) => count_nonzero(&h),
        None => {
            let t = declared_of(cx, 0, ElemType::Int64, 2, "NonZero")?;
            if t.dims[0] != x.rank() {
                return invalid(format!(
                    "NonZero's output is declared as {t}; the input has rank {}",
                    x.rank()
                ));
            }
            t.dims[1]
        }
    };
    Ok(Planned {
        outputs: vec![TensorType::new(ElemType::Int64, vec![x.rank(), count])],
        plan: Plan::NonZero { dims: x.dims.clone(), count },
    })
}

pub(super) fn plan_compress(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("Compress on {} tensors", x.elem));
    }
    let c = cx.input(1)?;
    if c.elem != ElemType::Bool || c.rank() != 1 {
        return invalid(format!("Compress's condition must be a 1-D bool tensor, it is {c}"));
    }
    let a = match cx.node.attr("axis") {
        Some(_) => Some(axis(cx.int_or("axis", 0), x.rank(), "Compress axis")?),
        None => None,
    };
    let (outer, len, inner) = match a {
        Some(a) => (product(&x.dims[..a])?, x.dims[a], product(&x.dims[a + 1..])?),
        None => (1, product(&x.dims)?, 1),
    };
    if c.dims[0] > len {
        return invalid(format!("Compress's condition {c} is longer than the axis ({len})"));
    }
    let count = match cx.constant(1).and_then(HostTensor::from_tensor) {
        Some(h) => count_nonzero(&h),
        None => {
            let rank = if a.is_some() { x.rank() } else { 1 };
            let t = declared_of(cx, 0, x.elem, rank, "Compress")?;
            match a {
                Some(a) => {
                    let mut dims = x.dims.clone();
                    dims[a] = t.dims[a];
                    if dims != t.dims {
                        return invalid(format!(
                            "Compress's output is declared as {t}; the input is {x}"
                        ));
                    }
                    t.dims[a]
                }
                None => t.dims[0],
            }
        }
    };
    if count > c.dims[0] {
        return invalid(format!(
            "Compress's output is declared with {count} elements along the axis; the condition has {}",
            c.dims[0]
        ));
    }
    let dims = match a {
        Some(a) => {
            let mut d = x.dims.clone();
            d[a] = count;
            d
        }
        None => vec![count],
    };
    Ok(Planned {
        outputs: vec![TensorType::new(x.elem, dims)],
        plan: Plan::Compress { outer, len, inner, count },
    })
}

pub(super) fn plan_nms(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let boxes = cx.input(0)?;
    let scores = cx.input(1)?;
    if boxes.elem != ElemType::Float || scores.elem != ElemType::Float {
        return unsupported(format!(
            "NonMaxSuppression on {} boxes (float is supported)",
            boxes.elem
        ));
    }
    if boxes.rank() != 3 || boxes.dims[2] != 4 {
        return invalid(format!(
            "NonMaxSuppression's boxes must be [batches, boxes, 4], got {boxes}"
        ));
    }
    if scores.rank() != 3 || scores.dims[0] != boxes.dims[0] || scores.dims[2] != boxes.dims[1] {
        return invalid(format!("NonMaxSuppression's scores {scores} do not match boxes {boxes}"));
    }
    for (i, e, what) in [
        (2, ElemType::Int64, "max_output_boxes_per_class"),
        (3, ElemType::Float, "iou_threshold"),
        (4, ElemType::Float, "score_threshold"),
    ] {
        if let Some(t) = cx.opt_input(i)
            && (t.elem != e || t.numel().is_some_and(|n| n > 1))
        {
            return invalid(format!("NonMaxSuppression's {what} must be one {e}, it is {t}"));
        }
    }
    let center = match cx.int_or("center_point_box", 0) {
        0 => false,
        1 => true,
        other => {
            return invalid(format!("NonMaxSuppression's center_point_box {other} is not 0 or 1"));
        }
    };
    let t = declared_of(cx, 0, ElemType::Int64, 2, "NonMaxSuppression")?;
    if t.dims[1] != 3 {
        return invalid(format!("NonMaxSuppression's output is declared as {t}; it has 3 columns"));
    }
    let p = Nms {
        batches: boxes.dims[0],
        classes: scores.dims[1],
        boxes: boxes.dims[1],
        center_point_box: center,
    };
    Ok(Planned { outputs: vec![t.clone()], plan: Plan::Nms { p, count: t.dims[0] } })
}

pub(super) fn plan_unique(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    if !is_data(x.elem) {
        return unsupported(format!("Unique on {} tensors", x.elem));
    }
    let a = match cx.node.attr("axis") {
        Some(_) => Some(axis(cx.int_or("axis", 0), x.rank(), "Unique axis")?),
        None => None,
    };
    let s = match a {
        Some(a) => Slices {
            outer: product(&x.dims[..a])?,
            len: x.dims[a],
            inner: product(&x.dims[a + 1..])?,
        },
        None => Slices { outer: 1, len: product(&x.dims)?, inner: 1 },
    };
    let y_count = cx.declared_output(0).map(|t| -> OpResult<usize> {
        match a {
            Some(a) => {
                let mut dims = x.dims.clone();
                dims[a] = t.dims.get(a).copied().unwrap_or(0);
                if t.elem != x.elem || t.dims != dims {
                    return invalid(format!("Unique's Y is declared as {t}; X is {x}"));
                }
                Ok(dims[a])
            }
            None if t.elem == x.elem && t.rank() == 1 => Ok(t.dims[0]),
            None => invalid(format!("Unique's Y is declared as {t}; it is 1-D {}", x.elem)),
        }
    });
    let count = match y_count {
        Some(c) => c?,
        None => {
            let other = [1, 3].into_iter().find_map(|k| cx.declared_output(k));
            match other {
                Some(t) if t.elem == ElemType::Int64 && t.rank() == 1 => t.dims[0],
                Some(t) => {
                    return invalid(format!("Unique's indices or counts are declared as {t}"));
                }
                None => {
                    return plan_unique_bounded(cx, x, a, s);
                }
            }
        }
    };
    for k in [1, 3] {
        if let Some(t) = cx.declared_output(k)
            && t.dims != [count]
        {
            return invalid(format!(
                "Unique's output {k} is declared as {t}; Y has {count} entries"
            ));
        }
    }
    if count > s.len || (count == 0 && s.len > 0) {
        return invalid(format!(
            "Unique's outputs are declared with {count} entries for {} slices",
            s.len
        ));
    }
    let y_dims = match a {
        Some(a) => {
            let mut d = x.dims.clone();
            d[a] = count;
            d
        }
        None => vec![count],
    };
    let i64s = |n: usize| TensorType::new(ElemType::Int64, vec![n]);
    let mut outputs = vec![TensorType::new(x.elem, y_dims), i64s(count), i64s(s.len), i64s(count)];
    outputs.truncate(cx.node.outputs.len().max(1));
    let sorted = cx.int_or("sorted", 1) != 0;
    Ok(Planned { outputs, plan: Plan::Unique { s, sorted, count, bounded: None } })
}

/// SplitToSequence after `passes::sequences` gave it one output per piece
/// because the sizes (a 1-D `split` of static length) come at run time.
pub(super) fn plan_split_to_sequence(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    let Some(split) = cx.opt_input(1) else {
        return unsupported("SplitToSequence without a split is expanded before inference");
    };
    if !matches!(split.elem, ElemType::Int32 | ElemType::Int64) || split.rank() != 1 {
        return unsupported(format!(
            "SplitToSequence: a split known only at run time must be a 1-D tensor of int32 or \
             int64 (one size per piece), it is {split}; a single size makes the number of \
             pieces depend on the data"
        ));
    }
    let pieces = split.dims[0];
    if cx.node.outputs.len() != pieces {
        return unsupported(format!(
            "SplitToSequence: the sizes of its {pieces} pieces are known only at run time"
        ));
    }
    if !is_data(x.elem) {
        return unsupported(format!("SplitToSequence on {} tensors", x.elem));
    }
    let a = axis(cx.int_or("axis", 0), x.rank(), "SplitToSequence axis")?;
    let s =
        Slices { outer: product(&x.dims[..a])?, len: x.dims[a], inner: product(&x.dims[a + 1..])? };
    Ok(Planned { outputs: vec![x.clone(); pieces], plan: Plan::Split { s, pieces, axis: a } })
}

/// SequenceInsert and SequenceErase on a sequence whose order is known
/// only at run time, after `passes::sequences` made them nodes on its map
/// (see `passes::sequences::Indexed`): inputs `(map, position)`, and for
/// SequenceInsert the index of the inserted tensor among the sources (a
/// constant); the output is the new map, one longer or shorter.
pub(super) fn plan_sequence_map(cx: &NodeCx<'_>, insert: bool) -> OpResult<Planned> {
    let op = if insert { "SequenceInsert" } else { "SequenceErase" };
    let map = cx.input(0)?;
    if map.elem != ElemType::Int64 || map.rank() != 1 || cx.node.outputs.len() != 1 {
        return unsupported(format!(
            "{op} at a run-time position on a sequence that is not known at generation time"
        ));
    }
    let p = cx.input(1)?;
    if !matches!(p.elem, ElemType::Int32 | ElemType::Int64) || p.numel() != Some(1) {
        return invalid(format!("the position of {op} must be one integer, got {p}"));
    }
    let len = map.dims[0];
    let (source, out) = if insert {
        let k = cx
            .constant(2)
            .and_then(Tensor::to_i64s)
            .and_then(|v| v.first().copied())
            .ok_or_else(|| OpError::Invalid("SequenceInsert lost its source index".into()))?;
        (Some(k), len + 1)
    } else if len == 0 {
        return invalid("SequenceErase on an empty sequence");
    } else {
        (None, len - 1)
    };
    Ok(Planned {
        outputs: vec![TensorType::new(ElemType::Int64, vec![out])],
        plan: Plan::SequenceMap { len, source },
    })
}

/// SequenceAt on a sequence whose order is known only at run time: inputs
/// `(map, position, source 0, ...)`; the output is the source the map
/// names at the position. When the sources differ in length along one
/// axis, the output is data-sized (its capacity is the longest).
pub(super) fn plan_sequence_at(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let map = cx.input(0)?;
    if map.elem != ElemType::Int64 || map.rank() != 1 || cx.node.inputs.len() < 3 {
        return unsupported(
            "SequenceAt at a run-time position on a sequence that is not known at generation time",
        );
    }
    let p = cx.input(1)?;
    if !matches!(p.elem, ElemType::Int32 | ElemType::Int64) || p.numel() != Some(1) {
        return invalid(format!("the position of SequenceAt must be one integer, got {p}"));
    }
    let sources = (2..cx.node.inputs.len()).map(|i| cx.input(i)).collect::<OpResult<Vec<_>>>()?;
    let t = sources[0];
    if !is_data(t.elem) {
        return unsupported(format!("SequenceAt of {} tensors at a run-time position", t.elem));
    }
    if let Some(c) = sources.iter().find(|c| c.elem != t.elem || c.rank() != t.rank()) {
        return unsupported(format!(
            "SequenceAt at a run-time position: the sequence holds {t} and {c}; its elements \
             must share element type and rank"
        ));
    }
    let differ: Vec<usize> =
        (0..t.rank()).filter(|&a| sources.iter().any(|c| c.dims[a] != t.dims[a])).collect();
    let axis = match differ.as_slice() {
        [] => None,
        [a] => Some(*a),
        _ => {
            return unsupported(
                "SequenceAt at a run-time position: the sequence's elements differ in more than \
                 one axis",
            );
        }
    };
    let mut dims = t.dims.clone();
    if let Some(a) = axis {
        dims[a] = sources.iter().map(|c| c.dims[a]).max().unwrap_or(0);
    }
    let counts = sources
        .iter()
        .map(|c| Ok((product(&c.dims)?, axis.map_or(0, |a| c.dims[a]))))
        .collect::<OpResult<Vec<_>>>()?;
    Ok(Planned {
        outputs: vec![t.with_dims(dims)],
        plan: Plan::SequenceAt { len: map.dims[0], sources: counts, axis },
    })
}

/// Unique whose outputs' lengths the model leaves to the data: they get
/// their capacity (every slice distinct) and are reported at run time.
fn plan_unique_bounded(
    cx: &NodeCx<'_>,
    x: &TensorType,
    a: Option<usize>,
    s: Slices,
) -> OpResult<Planned> {
    let y_dims = match a {
        Some(_) => x.dims.clone(),
        None => vec![s.len],
    };
    let i64s = |n: usize| TensorType::new(ElemType::Int64, vec![n]);
    let mut outputs = vec![TensorType::new(x.elem, y_dims), i64s(s.len), i64s(s.len), i64s(s.len)];
    outputs.truncate(cx.node.outputs.len().max(1));
    let sorted = cx.int_or("sorted", 1) != 0;
    let bounded = Some(a.unwrap_or(0));
    Ok(Planned { outputs, plan: Plan::Unique { s, sorted, count: s.len, bounded } })
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn data_dependent_lengths() {
        let a = run(13, "g () => (int64[2,2] y) <bool[2,2] x = {1, 0, 0, 1}> { y = NonZero (x) }");
        assert_eq!(value(&a, 0), [0.0, 1.0, 0.0, 1.0]);
        let a = run(13, "g (float[2,2] x) => (int64[2,3] y) { y = NonZero (x) }");
        assert_eq!(types(&a), [ty("int64[2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(13, "g (float[2,2] x) => (int64[2,?] y) { y = NonZero (x) }");
        assert!(unsupported(&a)[0].contains("does not declare"), "{:?}", unsupported(&a));
        // A constant condition fixes the length; the declared one is not needed.
        let a = run(
            11,
            "g (float[3,2] x) => (float[3,?] y) <bool[2] c = {0, 1}> { y = Compress <axis: int = 1> (x, c) }",
        );
        assert_eq!(types(&a), [ty("float[3, 1]")]);
        let a = run(
            11,
            "g () => (int32[2] y) <int32[2,2] x = {1, 2, 3, 4}, bool[3] c = {1, 0, 1}> { y = Compress (x, c) }",
        );
        assert_eq!(value(&a, 0), [1.0, 3.0]);
        let a = run(
            11,
            "g (float[3,2] x, bool[3] c) => (float[2,2] y) { y = Compress <axis: int = 0> (x, c) }",
        );
        assert_eq!(types(&a), [ty("float[2, 2]")]);
        let a = run(
            11,
            "g (float[3,2] x, bool[3] c) => (float[4,2] y) { y = Compress <axis: int = 0> (x, c) }",
        );
        assert!(errors(&a)[0].contains("the condition has 3"), "{:?}", errors(&a));
        let a = run(
            11,
            "g (float[1,3,4] b, float[1,1,3] s, int64[1] m) => (int64[2,3] y) { y = NonMaxSuppression (b, s, m) }",
        );
        assert_eq!(types(&a), [ty("int64[2, 3]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (float[1,3,4] b, float[1,1,2] s) => (int64[2,3] y) { y = NonMaxSuppression (b, s) }",
        );
        assert!(errors(&a)[0].contains("do not match"), "{:?}", errors(&a));
        // Undeclared lengths: every output gets its capacity (all slices
        // distinct); the lengths are reported at run time.
        let a = run(11, "g (float[4] x) => (float[?] y) { y = Unique (x) }");
        assert_eq!(types(&a), [ty("float[4]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(
            11,
            "g (float[3,4] x) => (float[3,?] y, int64[?] i, int64[4] v, int64[?] c) {
                y, i, v, c = Unique <axis: int = 1> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[3, 4]"), ty("int64[4]"), ty("int64[4]"), ty("int64[4]")]);
        let a = run(
            11,
            "g (float[3,4] x) => (float[3,2] y, int64[2] i, int64[4] v, int64[2] c) {
                y, i, v, c = Unique <axis: int = -1, sorted: int = 0> (x)
            }",
        );
        assert_eq!(types(&a), [ty("float[3, 2]"), ty("int64[2]"), ty("int64[4]"), ty("int64[2]")]);
        assert!(unsupported(&a).is_empty(), "{:?}", unsupported(&a));
        let a = run(11, "g (int32[4] x) => (int32[3] y, int64[2] c) { y, , , c = Unique (x) }");
        assert!(errors(&a)[0].contains("Y has 3 entries"), "{:?}", errors(&a));
    }

    #[test]
    fn a_data_sized_value_read_by_another_node_is_unsupported() {
        let a = run(11, "g (float[4] x) => (float[?] y) { u = Unique (x)\n y = Neg (u) }");
        let p: Vec<String> = a.problems().iter().map(|d| d.message.clone()).collect();
        assert!(
            p.iter().any(|m| m.starts_with("not supported:") && m.contains("only a graph output")),
            "{p:?}"
        );
        let a = run(11, "g (float[4] x) => (float[?] y) { y = Unique (x) }");
        assert!(a.problems().is_empty());
    }
}
