//! The plans of Concat and Split: one call per input or output, each
//! moving columns of the tensors seen as `[outer, width]`.

use super::{Op, Planned, RtCheck, declared, output, runtime_input, single, to_usize};
use crate::ir::TensorType;
use crate::ops::{NodeCx, OpError, OpResult, axis, invalid};

pub(super) fn concat(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let first = cx.input(0)?;
    let rank = first.rank();
    if rank == 0 {
        return invalid("Concat of scalars (inputs must have rank 1 or more)");
    }
    let default_axis = if cx.version() < 4 { 1 } else { i64::MAX };
    let raw = cx.int_or("axis", default_axis);
    if raw == i64::MAX {
        return invalid("Concat needs the attribute 'axis'");
    }
    let a = axis(raw, rank, "Concat axis")?;
    let mut dims = first.dims.clone();
    dims[a] = 0;
    let mut chunks = Vec::with_capacity(cx.inputs.len());
    for i in 0..cx.inputs.len() {
        let t = cx.input(i)?;
        if t.elem != first.elem {
            return invalid(format!(
                "Concat input {i} holds {} elements, input 0 holds {}",
                t.elem, first.elem
            ));
        }
        let same = t.rank() == rank && (0..rank).all(|d| d == a || t.dims[d] == first.dims[d]);
        if !same {
            return invalid(format!(
                "Concat input {i} has dims {:?}, which do not match input 0's {:?} outside axis {a}",
                t.dims, first.dims
            ));
        }
        dims[a] = dims[a]
            .checked_add(t.dims[a])
            .ok_or_else(|| OpError::Invalid("Concat output is too large".into()))?;
        chunks.push(t.dims[a..].iter().product::<usize>());
    }
    let out = output(cx, first.elem, dims)?;
    if cx.inputs.len() == 1 {
        return single(out, Op::Alias);
    }
    let outer = first.dims[..a].iter().product();
    let mut at = Vec::with_capacity(chunks.len());
    let mut width = 0usize;
    for c in chunks {
        at.push(width);
        width += c;
    }
    single(out, Op::Concat { outer, width, at })
}

pub(super) fn split(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    if rank == 0 {
        return invalid("Split of a scalar");
    }
    let a = axis(cx.int_or("axis", 0), rank, "Split axis")?;
    let n = cx.node.outputs.len();
    if n == 0 {
        return invalid("Split has no outputs");
    }
    let dim = x.dims[a];
    let runtime = cx.version() >= 13 && runtime_input(cx, 1);
    let given: Option<Vec<i64>> = if runtime {
        let mut s = Vec::with_capacity(n);
        for k in 0..n {
            let t = declared(cx, k, x.elem, Some(rank), "Split's split (input 1)")?;
            if t.rank() != rank {
                return invalid(format!("Split output {k} is declared with dims {:?}", t.dims));
            }
            s.push(i64::try_from(t.dims[a]).unwrap_or(i64::MAX));
        }
        Some(s)
    } else if cx.version() >= 13 || cx.version() < 2 {
        match cx.opt_input(1) {
            Some(_) => Some(cx.const_ints(1, "Split's split")?),
            None if cx.version() < 2 => cx.ints("split"),
            None => None,
        }
    } else {
        cx.ints("split")
    };
    let sizes: Vec<usize> = match given {
        Some(s) => {
            if cx.node.attr("num_outputs").is_some() {
                return invalid("Split has both a 'split' input and 'num_outputs'");
            }
            if s.len() != n {
                return invalid(format!(
                    "Split's split {s:?} has {} entries for {n} outputs",
                    s.len()
                ));
            }
            let sizes =
                s.iter().map(|&v| to_usize(v, "Split size")).collect::<OpResult<Vec<_>>>()?;
            if sizes.iter().try_fold(0usize, |acc, &v| acc.checked_add(v)) != Some(dim) {
                return invalid(format!(
                    "Split's split {s:?} does not add up to the axis length {dim}"
                ));
            }
            sizes
        }
        None => {
            // Opset 18 asks for 'num_outputs' here; without it, the number of
            // outputs is used (as before 18, and as the reference does).
            let parts = n;
            if cx.version() >= 18 && cx.node.attr("num_outputs").is_some() {
                let k = cx.int_or("num_outputs", 0);
                if usize::try_from(k).ok() != Some(n) {
                    return invalid(format!(
                        "Split's num_outputs {k} does not match its {n} outputs"
                    ));
                }
            }
            if dim.is_multiple_of(parts) {
                vec![dim / parts; parts]
            } else if cx.version() >= 18 {
                // Chunks of ceil(dim / parts); the last one gets the rest.
                let chunk = dim.div_ceil(parts);
                let used = chunk * (parts - 1);
                if used > dim {
                    return invalid(format!(
                        "Split of length {dim} into {parts} chunks of {chunk} leaves nothing for the last ones"
                    ));
                }
                let mut s = vec![chunk; parts - 1];
                s.push(dim - used);
                s
            } else {
                return invalid(format!(
                    "Split of axis length {dim} into {parts} equal parts is not possible"
                ));
            }
        }
    };
    let outer: usize = x.dims[..a].iter().product();
    let inner: usize = x.dims[a + 1..].iter().product();
    let mut outputs = Vec::with_capacity(n);
    let mut at = Vec::with_capacity(n);
    let mut col = 0usize;
    for &s in &sizes {
        let mut dims = x.dims.clone();
        dims[a] = s;
        outputs.push(output(cx, x.elem, dims)?);
        at.push(col);
        col += s * inner;
    }
    if n == 1 && !runtime {
        return Ok(Planned { outputs, op: Op::Alias, check: None });
    }
    let check = runtime.then(|| RtCheck::Split { sizes: sizes.clone() });
    Ok(Planned { outputs, op: Op::Split { outer, width: dim * inner, at }, check })
}

#[cfg(test)]
mod tests {

    use crate::ops::layout::testing::{dims, fails_with, floats, ints, run, run_typed};

    #[test]
    fn concat_any_axis() {
        let a = run(
            13,
            "g (float[2,3] a, float[2,1] b, float[4,3] c) => (y, z, w) {
                y = Concat <axis = -1> (a, b)
                z = Concat <axis = 0> (a, c)
                w = Concat <axis = 1> (a)
            }",
        );
        assert_eq!(dims(&a, "y"), [2, 4]);
        assert_eq!(dims(&a, "z"), [6, 3]);
        assert_eq!(dims(&a, "w"), [2, 3]);
        // Along axis 1: [[1,2],[3,4]] ++ [[5],[6]] ++ [] -> [[1,2,5],[3,4,6]].
        let a = run(
            13,
            "g () => (y) <int64[2,2] a = {1, 2, 3, 4}, int64[2,1] b = {5, 6}, int64[2,0] c = {}> {
                y = Concat <axis = 1> (a, b, c)
            }",
        );
        assert_eq!(ints(&a, "y"), [1, 2, 5, 3, 4, 6]);
        // Opset 1 defaults the axis to 1.
        let a = run(1, "g (float[2,3] a, float[2,2] b) => (y) { y = Concat (a, b) }");
        assert_eq!(dims(&a, "y"), [2, 5]);
    }

    #[test]
    fn concat_errors() {
        let a = run(13, "g (float[2,3] a, float[3,3] b) => (y) { y = Concat <axis = 1> (a, b) }");
        fails_with(&a, "do not match");
        let a = run(13, "g (float[2,3] a, float[2,3] b) => (y) { y = Concat <axis = 2> (a, b) }");
        fails_with(&a, "out of range");
        let a = run(13, "g (float a, float b) => (y) { y = Concat <axis = 0> (a, b) }");
        fails_with(&a, "scalars");
    }

    #[test]
    fn split_by_sizes_counts_and_uneven_chunks() {
        let a = run(
            13,
            "g (float[2,6] x) => (a, b, c, d) <int64[2] s = {2, 4}> {
                a, b = Split <axis = 1> (x, s)
                c, d = Split <axis = -1> (x)
            }",
        );
        assert_eq!((dims(&a, "a"), dims(&a, "b")), (vec![2, 2], vec![2, 4]));
        assert_eq!((dims(&a, "c"), dims(&a, "d")), (vec![2, 3], vec![2, 3]));
        // Opset 18, 7 into 3: chunks of 3, 3 and 1.
        let a = run(
            18,
            "g () => (a, b, c) <int32[7] x = {1, 2, 3, 4, 5, 6, 7}> {
                a, b, c = Split <num_outputs = 3> (x)
            }",
        );
        assert_eq!(
            (ints(&a, "a"), ints(&a, "b"), ints(&a, "c")),
            (vec![1, 2, 3], vec![4, 5, 6], vec![7])
        );
        // Opset 2 takes the sizes as an attribute; along axis 1 of [[1,2,3],[4,5,6]].
        let a = run(
            2,
            "g () => (a, b) <float[2,3] x = {1, 2, 3, 4, 5, 6}> {
                a, b = Split <axis = 1, split = [2, 1]> (x)
            }",
        );
        assert_eq!((floats(&a, "a"), floats(&a, "b")), (vec![1., 2., 4., 5.], vec![3., 6.]));
    }

    #[test]
    fn split_errors() {
        let a = run(13, "g (float[6] x) => (a, b) <int64[2] s = {2, 3}> { a, b = Split (x, s) }");
        fails_with(&a, "does not add up");
        let a = run(13, "g (float[7] x) => (a, b) { a, b = Split (x) }");
        fails_with(&a, "equal parts");
        let a = run(18, "g (float[6] x) => (a, b) { a, b = Split <num_outputs = 3> (x) }");
        fails_with(&a, "num_outputs 3");
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[N] a, float[N] b) { a, b = Split (x, s) }",
        );
        fails_with(&a, "unsupported: Split's split (input 1) is known only at run time");
        // Declared outputs give the sizes; they must fit the axis.
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[2] a, float[5] b) { a, b = Split (x, s) }",
        );
        fails_with(&a, "does not add up");
    }
}
