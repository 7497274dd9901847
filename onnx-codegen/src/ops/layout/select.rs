//! The plans of the operators that pick elements by position: Slice
//! (bounds clamped with numpy's rules), Gather and GatherElements.

use super::{
    Op, Planned, RtCheck, check_rank, declared, distinct_axes, output, runtime_input, single,
    to_isize,
};
use crate::ir::{ElemType, TensorType};
use crate::ops::{NodeCx, OpError, OpResult, axis, invalid};
use onnx_codegen_runtime::norm::AxisShape;
use onnx_codegen_runtime::shape::MAX_RANK;

/// The first index and the length of a slice of an axis of length `dim`,
/// with numpy's rules: negative bounds count from the end and are clamped.
fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> (usize, usize) {
    if dim == 0 {
        return (0, 0);
    }
    let d = dim as i128;
    let (mut s, mut e, st) = (i128::from(start), i128::from(end), i128::from(step));
    if s < 0 {
        s += d;
    }
    if e < 0 {
        e += d;
    }
    let (s, len) = if st > 0 {
        let (s, e) = (s.clamp(0, d), e.clamp(0, d));
        (s, if e > s { (e - s + st - 1) / st } else { 0 })
    } else {
        let (s, e) = (s.clamp(0, d - 1), e.clamp(-1, d - 1));
        (s, if s > e { (s - e - st - 1) / -st } else { 0 })
    };
    if len == 0 {
        return (0, 0);
    }
    // Both are within 0..=dim here.
    (usize::try_from(s).unwrap_or(0), usize::try_from(len).unwrap_or(0))
}

pub(super) fn slice(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let (starts, ends, axes, steps) = if cx.version() < 10 {
        let Some(starts) = cx.ints("starts") else { return invalid("Slice needs 'starts'") };
        let Some(ends) = cx.ints("ends") else { return invalid("Slice needs 'ends'") };
        (starts, ends, cx.ints("axes"), None)
    } else if (1..=4).any(|i| runtime_input(cx, i)) {
        let t = declared(cx, 0, x.elem, Some(rank), "Slice's starts, ends, axes or steps")?;
        if t.rank() != rank || t.elem != x.elem {
            return invalid(format!("Slice output is declared as {t}; input is {x}"));
        }
        check_rank(cx, rank, MAX_RANK)?;
        let out = t.dims.clone();
        let check = RtCheck::Slice {
            shape: x.dims.clone(),
            out: out.clone(),
            axes: cx.opt_input(3).is_some(),
            steps: cx.opt_input(4).is_some(),
        };
        let op =
            Op::Slice { shape: x.dims.clone(), starts: vec![0; rank], steps: vec![1; rank], out };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    } else {
        let starts = cx.const_ints(1, "Slice's starts")?;
        let ends = cx.const_ints(2, "Slice's ends")?;
        let axes = match cx.opt_input(3) {
            Some(_) => Some(cx.const_ints(3, "Slice's axes")?),
            None => None,
        };
        let steps = match cx.opt_input(4) {
            Some(_) => Some(cx.const_ints(4, "Slice's steps")?),
            None => None,
        };
        (starts, ends, axes, steps)
    };
    let k = starts.len();
    if ends.len() != k {
        return invalid(format!("Slice has {k} starts but {} ends", ends.len()));
    }
    let axes = match axes {
        Some(a) if a.len() != k => {
            return invalid(format!("Slice has {k} starts but {} axes", a.len()));
        }
        Some(a) => distinct_axes(&a, rank, "Slice axis")?,
        None if k > rank => {
            return invalid(format!("Slice has {k} starts for a rank-{rank} input"));
        }
        None => (0..k).collect(),
    };
    let steps = steps.unwrap_or_else(|| vec![1; k]);
    if steps.len() != k {
        return invalid(format!("Slice has {k} starts but {} steps", steps.len()));
    }
    check_rank(cx, rank, MAX_RANK)?;
    let mut first = vec![0usize; rank];
    let mut step = vec![1isize; rank];
    let mut out = x.dims.clone();
    for i in 0..k {
        let a = axes[i];
        if steps[i] == 0 {
            return invalid(format!("Slice step for axis {a} is 0"));
        }
        let (s, len) = slice_axis(x.dims[a], starts[i], ends[i], steps[i]);
        first[a] = s;
        step[a] = to_isize(steps[i], "Slice step")?;
        out[a] = len;
    }
    let unchanged = (0..rank).all(|d| out[d] == x.dims[d] && (step[d] == 1 || x.dims[d] <= 1));
    let t = output(cx, x.elem, out.clone())?;
    if unchanged {
        return single(t, Op::Alias);
    }
    single(t, Op::Slice { shape: x.dims.clone(), starts: first, steps: step, out })
}

/// Indices known at generation time must lie in `-n..n`.
fn check_indices(cx: &NodeCx<'_>, n: usize) -> OpResult<()> {
    let Some(t) = cx.constant(1) else { return Ok(()) };
    let values = t.to_i64s().ok_or_else(|| OpError::Invalid("indices are not integers".into()))?;
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    if let Some(bad) = values.iter().find(|&&v| v < -n || v >= n) {
        return invalid(format!(
            "{} index {bad} is out of range for an axis of length {n}",
            cx.node.op.op_type
        ));
    }
    Ok(())
}

fn index_type<'a>(cx: &NodeCx<'a>) -> OpResult<&'a TensorType> {
    let idx = cx.input(1)?;
    if !matches!(idx.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid(format!(
            "{} indices are {} tensors; int32 or int64 expected",
            cx.node.op.op_type, idx.elem
        ));
    }
    Ok(idx)
}

pub(super) fn gather(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let idx = index_type(cx)?;
    if x.rank() == 0 {
        return invalid("Gather of a scalar (data must have rank 1 or more)");
    }
    let a = axis(cx.int_or("axis", 0), x.rank(), "Gather axis")?;
    check_indices(cx, x.dims[a])?;
    let mut dims = x.dims[..a].to_vec();
    dims.extend_from_slice(&idx.dims);
    dims.extend_from_slice(&x.dims[a + 1..]);
    let shape = AxisShape {
        outer: x.dims[..a].iter().product(),
        axis: x.dims[a],
        inner: x.dims[a + 1..].iter().product(),
    };
    single(output(cx, x.elem, dims)?, Op::Gather { shape })
}

pub(super) fn gather_elements(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let idx = index_type(cx)?;
    let rank = x.rank();
    if rank == 0 {
        return invalid("GatherElements of a scalar (data must have rank 1 or more)");
    }
    if idx.rank() != rank {
        return invalid(format!(
            "GatherElements indices have rank {}, data has rank {rank}",
            idx.rank()
        ));
    }
    let a = axis(cx.int_or("axis", 0), rank, "GatherElements axis")?;
    if let Some(d) = (0..rank).find(|&d| d != a && idx.dims[d] > x.dims[d]) {
        return invalid(format!(
            "GatherElements indices dims {:?} exceed data dims {:?} on axis {d}",
            idx.dims, x.dims
        ));
    }
    check_rank(cx, rank, MAX_RANK)?;
    check_indices(cx, x.dims[a])?;
    single(
        output(cx, x.elem, idx.dims.clone())?,
        Op::GatherElements { shape: x.dims.clone(), index_shape: idx.dims.clone(), axis: a },
    )
}

#[cfg(test)]
mod tests {

    use crate::ops::layout::testing::{dims, fails_with, ints, run, run_typed};

    #[test]
    fn slice_clamps_and_steps() {
        let a = run(
            13,
            "g (float[20,10,5] x) => (a, b, c, d)
              <int64[2] s = {0, 1}, int64[2] e = {3, 10}, int64[1] big = {1000},
               int64[1] neg = {-1}, int64[1] lo = {-1000}, int64[1] m2 = {-2}, int64[1] ax = {-2}> {
                a = Slice (x, s, e)
                b = Slice (x, neg, big)
                c = Slice (x, neg, lo, ax, m2)
                d = Slice (x, big, lo, ax, m2)
            }",
        );
        assert_eq!(dims(&a, "a"), [3, 9, 5]);
        // starts -1 -> 19, end clamped to 20: one row.
        assert_eq!(dims(&a, "b"), [1, 10, 5]);
        // Axis 1 backwards from 9 by 2 to the front: 9, 7, 5, 3, 1.
        assert_eq!(dims(&a, "c"), [20, 5, 5]);
        // A start past the end clamps to the last element when going backwards.
        assert_eq!(dims(&a, "d"), [20, 5, 5]);
        // Values: x[::-1, 2:0:-1] of [[1,2,3],[4,5,6]] = [[6,5],[3,2]].
        let a = run(
            13,
            "g () => (y) <int64[2,3] x = {1, 2, 3, 4, 5, 6}, int64[2] s = {-1, 2},
                          int64[2] e = {-9223372036854775807, 0}, int64[2] st = {-1, -1}> {
                y = Slice (x, s, e, , st)
            }",
        );
        assert_eq!(ints(&a, "y"), [6, 5, 3, 2]);
        // Opset 1 attributes, with an empty result along axis 0.
        let a =
            run(1, "g (float[4,6] x) => (y) { y = Slice <starts = [3, 2], ends = [1, -1]> (x) }");
        assert_eq!(dims(&a, "y"), [0, 3]);
    }

    #[test]
    fn slice_errors() {
        let a = run(
            13,
            "g (float[4] x) => (y) <int64[1] s = {0}, int64[1] e = {4}, int64[1] a = {0}, int64[1] z = {0}> {
                y = Slice (x, s, e, a, z)
            }",
        );
        fails_with(&a, "step for axis 0 is 0");
        let a = run(
            13,
            "g (float[4,4] x) => (y) <int64[2] s = {0, 0}, int64[2] e = {4, 4}, int64[2] a = {1, -1}> {
                y = Slice (x, s, e, a)
            }",
        );
        fails_with(&a, "given twice");
        let a = run(
            13,
            "g (float[4] x, int64[1] s) => (float[N] y) <int64[1] e = {4}> { y = Slice (x, s, e) }",
        );
        fails_with(
            &a,
            "unsupported: Slice's starts, ends, axes or steps is known only at run time",
        );
        let a = run_typed(
            13,
            "g (float[4] x, int64[1] s) => (float[2,2] y) <int64[1] e = {4}> { y = Slice (x, s, e) }",
        );
        fails_with(&a, "Slice output is declared as");
    }

    #[test]
    fn gathers() {
        let a = run(
            13,
            "g (float[5,4,3] x, int64[2,2] i, int32 j) => (a, b, c) {
                a = Gather <axis = 1> (x, i)
                b = Gather <axis = -1> (x, j)
                c = GatherElements <axis = 0> (x, i3)
                i3 = Cast <to = 7> (f)
                f = Constant <value = float[2,4,3] {0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0}> ()
            }",
        );
        assert_eq!(dims(&a, "a"), [5, 2, 2, 3]);
        assert_eq!(dims(&a, "b"), [5, 4]);
        // Gather axis 1 of [[1,2,3],[4,5,6]] with [2, -3] -> [[3,1],[6,4]].
        let a = run(
            13,
            "g () => (y, z) <int64[2,3] x = {1, 2, 3, 4, 5, 6}, int32[2] i = {2, -3},
                             int64[1,3] k = {1, 0, -1}> {
                y = Gather <axis = 1> (x, i)
                z = GatherElements <axis = 0> (x, k)
            }",
        );
        assert_eq!(ints(&a, "y"), [3, 1, 6, 4]);
        assert_eq!(ints(&a, "z"), [4, 2, 6]);
    }

    #[test]
    fn gather_errors() {
        let a =
            run(13, "g (float[5,4] x) => (y) <int64[1] i = {4}> { y = Gather <axis = 1> (x, i) }");
        fails_with(&a, "index 4 is out of range for an axis of length 4");
        let a = run(13, "g (float[5,4] x, float[2] i) => (y) { y = Gather (x, i) }");
        fails_with(&a, "int32 or int64");
        let a = run(
            13,
            "g (float[2,2] x, int64[2,3] i) => (y) { y = GatherElements <axis = 0> (x, i) }",
        );
        fails_with(&a, "exceed data dims");
    }
}
