//! The plans of the operators that permute or repeat elements: Transpose,
//! Expand, Tile, DepthToSpace and SpaceToDepth.

use super::{
    Op, Planned, RtCheck, check_rank, declared, distinct_axes, output, runtime_input, single,
    to_usize,
};
use crate::ir::TensorType;
use crate::ops::{NodeCx, OpError, OpResult, axis, broadcast_shapes, broadcast_strides, invalid};
use onnx_codegen_runtime::layout::Nchw4;
use onnx_codegen_runtime::shape::MAX_RANK;

pub(super) fn transpose(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let perm: Vec<usize> = match cx.ints("perm") {
        Some(p) => {
            if p.len() != rank {
                return invalid(format!(
                    "Transpose perm {p:?} has {} entries; the input has rank {rank}",
                    p.len()
                ));
            }
            if p.iter().any(|&v| v < 0) {
                return invalid(format!("Transpose perm {p:?} has a negative entry"));
            }
            distinct_axes(&p, rank, "Transpose perm entry")?
        }
        None => (0..rank).rev().collect(),
    };
    check_rank(cx, rank, MAX_RANK)?;
    let dims: Vec<usize> = perm.iter().map(|&p| x.dims[p]).collect();
    let out = output(cx, x.elem, dims)?;
    // Moving only axes of length 1 keeps the element order.
    let moved: Vec<usize> = perm.iter().copied().filter(|&p| x.dims[p] != 1).collect();
    if moved.windows(2).all(|w| w[0] < w[1]) {
        return single(out, Op::Alias);
    }
    single(out, Op::Transpose { shape: x.dims.clone(), perm })
}

pub(super) fn expand(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    if runtime_input(cx, 1) {
        let t = declared(cx, 0, x.elem, None, "Expand's shape (input 1)")?;
        if t.elem != x.elem || broadcast_shapes(&[&x.dims, &t.dims])? != t.dims {
            return invalid(format!("Expand output is declared as {t}; input is {x}"));
        }
        check_rank(cx, t.rank(), MAX_RANK)?;
        let strides = broadcast_strides(&x.dims, &t.dims);
        let check = RtCheck::Expand { shape: x.dims.clone(), out: t.dims.clone() };
        let op = Op::Expand { out: t.dims.clone(), strides };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    }
    let shape = cx.const_ints(1, "Expand's shape")?;
    let shape =
        shape.iter().map(|&v| to_usize(v, "Expand dimension")).collect::<OpResult<Vec<_>>>()?;
    let dims = broadcast_shapes(&[&x.dims, &shape])?;
    check_rank(cx, dims.len(), MAX_RANK)?;
    let out = output(cx, x.elem, dims)?;
    if out.dims == x.dims {
        return single(out, Op::Alias);
    }
    let strides = broadcast_strides(&x.dims, &out.dims);
    single(out.clone(), Op::Expand { out: out.dims, strides })
}

pub(super) fn tile(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let repeats = if cx.version() < 6 {
        let tiles = whole_numbers(cx, 1, "Tile's tiles")?;
        let ax = whole_numbers(cx, 2, "Tile's axis")?;
        let ([t], [a]) = (tiles.as_slice(), ax.as_slice()) else {
            return invalid("Tile's tiles and axis must be one value each");
        };
        let a = axis(*a, rank, "Tile axis")?;
        let mut r = vec![1i64; rank];
        r[a] = *t;
        r
    } else if runtime_input(cx, 1) {
        let t = declared(cx, 0, x.elem, Some(rank), "Tile's repeats (input 1)")?;
        if t.elem != x.elem || t.rank() != rank {
            return invalid(format!("Tile output is declared as {t}; input is {x}"));
        }
        let mut repeats = Vec::with_capacity(rank);
        for (&d, &o) in x.dims.iter().zip(&t.dims) {
            match (d, o) {
                (0, 0) => repeats.push(1),
                (d, o) if d > 0 && o.is_multiple_of(d) => repeats.push(o / d),
                _ => return invalid(format!("Tile output is declared as {t}; input is {x}")),
            }
        }
        check_rank(cx, rank, MAX_RANK / 2)?;
        let check = RtCheck::Tile { shape: x.dims.clone(), out: t.dims.clone() };
        let op = Op::Tile { shape: x.dims.clone(), repeats };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    } else {
        cx.const_ints(1, "Tile's repeats")?
    };
    if repeats.len() != rank {
        return invalid(format!("Tile has {} repeats for a rank-{rank} input", repeats.len()));
    }
    let repeats =
        repeats.iter().map(|&v| to_usize(v, "Tile repeat")).collect::<OpResult<Vec<_>>>()?;
    let mut dims = Vec::with_capacity(rank);
    for (&d, &r) in x.dims.iter().zip(&repeats) {
        dims.push(
            d.checked_mul(r).ok_or_else(|| OpError::Invalid("Tile output is too large".into()))?,
        );
    }
    let out = output(cx, x.elem, dims)?;
    if repeats.iter().all(|&r| r == 1) {
        return single(out, Op::Alias);
    }
    check_rank(cx, rank, MAX_RANK / 2)?;
    single(out, Op::Tile { shape: x.dims.clone(), repeats })
}

/// Integers known at generation time, also when the schema types them as
/// floats (Tile before opset 6).
fn whole_numbers(cx: &NodeCx<'_>, i: usize, what: &str) -> OpResult<Vec<i64>> {
    let Some(floats) = cx.constant(i).and_then(|t| t.to_f64s()) else {
        return cx.const_ints(i, what);
    };
    floats
        .iter()
        .map(|&v| {
            if v.fract() == 0.0 && v.abs() < 9.0e15 {
                Ok(v as i64)
            } else {
                invalid(format!("{what} (input {i}) holds {v}, not a whole number"))
            }
        })
        .collect()
}

pub(super) fn depth_space(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let op = cx.node.op.op_type.as_str();
    let [n, c, h, w] = x.dims[..] else {
        return invalid(format!("{op} needs a 4-D input; it has dims {:?}", x.dims));
    };
    let block = cx.int("blocksize")?;
    let b = match usize::try_from(block) {
        Ok(b) if b > 0 => b,
        _ => return invalid(format!("{op} blocksize {block} is not positive")),
    };
    let has_mode = if op == "DepthToSpace" { cx.version() >= 11 } else { cx.version() >= 28 };
    let crd = match (has_mode, cx.string_or("mode", "DCR").as_str()) {
        (false, _) | (true, "DCR") => false,
        (true, "CRD") => true,
        (true, other) => return invalid(format!("{op} mode '{other}' is not DCR or CRD")),
    };
    let too_large = || OpError::Invalid(format!("{op} output is too large"));
    let bb = b.checked_mul(b).ok_or_else(too_large)?;
    let s = Nchw4 { n, c, h, w };
    let (dims, op) = if op == "DepthToSpace" {
        if !c.is_multiple_of(bb) {
            return invalid(format!("DepthToSpace of {c} channels by blocks of {b}x{b}"));
        }
        let dims = vec![
            n,
            c / bb,
            h.checked_mul(b).ok_or_else(too_large)?,
            w.checked_mul(b).ok_or_else(too_large)?,
        ];
        (dims, Op::DepthToSpace { s, block: b, crd })
    } else {
        if !h.is_multiple_of(b) || !w.is_multiple_of(b) {
            return invalid(format!("SpaceToDepth of {h}x{w} by blocks of {b}x{b}"));
        }
        let dims = vec![n, c.checked_mul(bb).ok_or_else(too_large)?, h / b, w / b];
        (dims, Op::SpaceToDepth { s, block: b, crd })
    };
    single(output(cx, x.elem, dims)?, op)
}

#[cfg(test)]
mod tests {

    use crate::ops::layout::testing::{calls, dims, fails_with, ints, run};

    #[test]
    fn transpose_shapes_and_values() {
        let a = run(
            21,
            "g (float[2,3,4] x) => (y, z, w) {
                y = Transpose (x)
                z = Transpose <perm = [1, 2, 0]> (x)
                w = Transpose <perm = [0, 2, 1]> (z)
            }",
        );
        assert_eq!(dims(&a, "y"), [4, 3, 2]);
        assert_eq!(dims(&a, "z"), [3, 4, 2]);
        assert_eq!(dims(&a, "w"), [3, 2, 4]);
        // [[1,2,3],[4,5,6]] transposed.
        let a = run(13, "g () => (y) <int32[2,3] x = {1, 2, 3, 4, 5, 6}> { y = Transpose (x) }");
        assert_eq!(ints(&a, "y"), [1, 4, 2, 5, 3, 6]);
        // Moving only a length-1 axis is a view: no step runs.
        let a = run(13, "g (float[1,3,2] x) => (y) { y = Transpose <perm = [1, 0, 2]> (x) }");
        assert_eq!(dims(&a, "y"), [3, 1, 2]);
        assert_eq!(calls(&a), 0);
    }

    #[test]
    fn transpose_errors() {
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [0, 0]> (x) }");
        fails_with(&a, "given twice");
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [1, 0, 2]> (x) }");
        fails_with(&a, "has 3 entries");
        let a = run(13, "g (float[2,3] x) => (y) { y = Transpose <perm = [-1, 0]> (x) }");
        fails_with(&a, "negative");
        let a = run(13, "g (string[2,3] x) => (y) { y = Transpose (x) }");
        fails_with(&a, "unsupported: Transpose on string tensors");
    }

    #[test]
    fn expand_and_tile() {
        let a = run(
            13,
            "g (float[3,1] x) => (a, b) <int64[3] s = {2, 1, 4}, int64[2] t = {3, 1}> {
                a = Expand (x, s)
                b = Expand (x, t)
            }",
        );
        assert_eq!(dims(&a, "a"), [2, 3, 4]);
        assert_eq!(dims(&a, "b"), [3, 1]);
        assert_eq!(calls(&a), 1, "an Expand to the same shape is a view");
        let a = run(
            13,
            "g () => (y, z) <int64[2,1] x = {7, 8}, int64[2] s = {2, 3}, int64[2] r = {2, 2}> {
                y = Expand (x, s)
                z = Tile (x, r)
            }",
        );
        assert_eq!(ints(&a, "y"), [7, 7, 7, 8, 8, 8]);
        assert_eq!(ints(&a, "z"), [7, 7, 8, 8, 7, 7, 8, 8]);
        // Opset 1 Tile: one axis, one count.
        let a = run(
            1,
            "g (float[2,3] x) => (y) <float t = {3.0}, float ax = {1.0}> { y = Tile (x, t, ax) }",
        );
        assert_eq!(dims(&a, "y"), [2, 9]);
        let a = run(13, "g (float[3,1] x) => (y) <int64[2] s = {2, 1}> { y = Expand (x, s) }");
        fails_with(&a, "do not broadcast");
        let a = run(13, "g (float[3] x) => (y) <int64[1] r = {-1}> { y = Tile (x, r) }");
        fails_with(&a, "negative");
    }

    #[test]
    fn depth_and_space() {
        let a = run(
            13,
            "g (float[1,8,2,3] x, float[2,1,4,6] z) => (a, b) {
                a = DepthToSpace <blocksize = 2, mode = \"CRD\"> (x)
                b = SpaceToDepth <blocksize = 2> (z)
            }",
        );
        assert_eq!(dims(&a, "a"), [1, 2, 4, 6]);
        assert_eq!(dims(&a, "b"), [2, 4, 2, 3]);
        // [1, 8, 1, 1] holding 0..8: DCR interleaves the two output channels.
        let a = run(
            13,
            "g () => (d, c) <int64[1,8,1,1] x = {0, 1, 2, 3, 4, 5, 6, 7}> {
                d = DepthToSpace <blocksize = 2> (x)
                c = DepthToSpace <blocksize = 2, mode = \"CRD\"> (x)
            }",
        );
        assert_eq!(ints(&a, "d"), [0, 2, 4, 6, 1, 3, 5, 7]);
        assert_eq!(ints(&a, "c"), [0, 1, 2, 3, 4, 5, 6, 7]);
        // SpaceToDepth of [1, 2, 2, 2] holding 0..8: DCR takes one element of
        // each channel per block position, CRD (opset 28) keeps channels together.
        let graph = |mode: &str| {
            format!(
                "g () => (y) <int64[1,2,2,2] x = {{0, 1, 2, 3, 4, 5, 6, 7}}> {{
                    y = SpaceToDepth <blocksize = 2{mode}> (x)
                }}"
            )
        };
        assert_eq!(ints(&run(13, &graph("")), "y"), [0, 4, 1, 5, 2, 6, 3, 7]);
        assert_eq!(ints(&run(28, &graph(", mode = \"CRD\"")), "y"), [0, 1, 2, 3, 4, 5, 6, 7]);
        let a = run(13, "g (float[1,6,2,2] x) => (y) { y = DepthToSpace <blocksize = 2> (x) }");
        fails_with(&a, "DepthToSpace of 6 channels");
        let a = run(13, "g (float[1,1,3,2] x) => (y) { y = SpaceToDepth <blocksize = 2> (x) }");
        fails_with(&a, "SpaceToDepth of 3x2");
        let a = run(13, "g (float[8,2,2] x) => (y) { y = DepthToSpace <blocksize = 2> (x) }");
        fails_with(&a, "4-D input");
    }
}
