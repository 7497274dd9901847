//! Pad's plan: its pads (and axes) known at generation time or read at
//! run time, and its fill (a constant, reflect, edge or wrap).

use super::{
    Op, PadKind, Planned, RtCheck, check_rank, declared, distinct_axes, output, runtime_input,
    single, to_isize,
};
use crate::ir::{ElemType, TensorType};
use crate::ops::{NodeCx, OpResult, invalid, unsupported};
use onnx_codegen_runtime::shape::MAX_RANK;

pub(super) fn pad(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<Planned> {
    let rank = x.rank();
    let mode = cx.string_or("mode", "constant");
    let runtime = cx.version() >= 11
        && (runtime_input(cx, 1) || (cx.version() >= 18 && runtime_input(cx, 3)));
    let (pads, axes, constant) = if cx.version() < 11 {
        let name = if cx.version() < 2 { "paddings" } else { "pads" };
        let Some(pads) = cx.ints(name) else { return invalid(format!("Pad needs '{name}'")) };
        (pads, None, PadKind::Attr(f64::from(cx.float_or("value", 0.0))))
    } else {
        let pads = if runtime { Vec::new() } else { cx.const_ints(1, "Pad's pads")? };
        let constant = match cx.opt_input(2) {
            Some(t) => {
                if t.elem != x.elem {
                    return invalid(format!(
                        "Pad's constant_value holds {} elements, the data {}",
                        t.elem, x.elem
                    ));
                }
                if t.numel() != Some(1) {
                    return invalid(format!(
                        "Pad's constant_value has dims {:?}; one element expected",
                        t.dims
                    ));
                }
                PadKind::Input
            }
            None => PadKind::Zero,
        };
        let axes = match cx.opt_input(3) {
            Some(_) if runtime => None,
            Some(_) if cx.version() >= 18 => Some(cx.const_ints(3, "Pad's axes")?),
            _ => None,
        };
        (pads, axes, constant)
    };
    let kind = match mode.as_str() {
        "constant" => constant,
        "reflect" => PadKind::Reflect,
        "edge" => PadKind::Edge,
        "wrap" if cx.version() >= 19 => PadKind::Wrap,
        other => {
            return invalid(format!(
                "Pad mode '{other}' is not one of constant, reflect, edge{}",
                if cx.version() >= 19 { ", wrap" } else { " (wrap needs opset 19)" }
            ));
        }
    };
    if runtime {
        let t = declared(cx, 0, x.elem, Some(rank), "Pad's pads or axes")?;
        if t.elem != x.elem || t.rank() != rank {
            return invalid(format!("Pad output is declared as {t}; input is {x}"));
        }
        check_rank(cx, rank, MAX_RANK)?;
        let axes = match cx.opt_input(3) {
            Some(a) if cx.version() >= 18 => Some(a.elem),
            _ => None,
        };
        let check = RtCheck::Pad { shape: x.dims.clone(), out: t.dims.clone(), axes };
        let op =
            Op::Pad { shape: x.dims.clone(), begin: vec![0; rank], end: vec![0; rank], mode: kind };
        return Ok(Planned { outputs: vec![t], op, check: Some(check) });
    }
    let axes = match axes {
        Some(a) => distinct_axes(&a, rank, "Pad axis")?,
        None => (0..rank).collect(),
    };
    if pads.len() != 2 * axes.len() {
        return invalid(format!(
            "Pad has {} pads for {} axes; 2 per axis (all begins, then all ends) expected",
            pads.len(),
            axes.len()
        ));
    }
    check_rank(cx, rank, MAX_RANK)?;
    let mut begin = vec![0isize; rank];
    let mut end = vec![0isize; rank];
    let mut dims = x.dims.clone();
    for (i, &a) in axes.iter().enumerate() {
        begin[a] = to_isize(pads[i], "Pad amount")?;
        end[a] = to_isize(pads[axes.len() + i], "Pad amount")?;
        let n = i128::try_from(x.dims[a]).unwrap_or(i128::MAX);
        let d = n + i128::from(pads[i]) + i128::from(pads[axes.len() + i]);
        dims[a] = usize::try_from(d).or_else(|_| {
            invalid(format!(
                "Pad crops axis {a} (length {n}) by more than its length (pads {} and {})",
                pads[i],
                pads[axes.len() + i]
            ))
        })?;
    }
    let out = output(cx, x.elem, dims)?;
    if begin.iter().chain(&end).all(|&p| p == 0) {
        return single(out, Op::Alias);
    }
    let fills_from_data = !matches!(kind, PadKind::Zero | PadKind::Input | PadKind::Attr(_));
    if fills_from_data && x.numel() == Some(0) && out.numel() != Some(0) {
        return invalid(format!("Pad mode '{mode}' cannot fill from an empty tensor"));
    }
    if let PadKind::Attr(_) = kind
        && !matches!(
            x.elem,
            ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
        )
    {
        return unsupported(format!(
            "Pad before opset 11 on {} tensors (its 'value' is a float)",
            x.elem
        ));
    }
    single(out, Op::Pad { shape: x.dims.clone(), begin, end, mode: kind })
}

#[cfg(test)]
mod tests {
    use crate::ir::ElemType;
    use crate::ops::layout::testing::{dims, fails_with, floats, ints, run, ty};

    #[test]
    fn pad_modes_and_forms() {
        let a = run(
            18,
            "g (float[1,3,4,5] x) => (a, b, c) <int64[8] p = {0, 0, 1, 2, 0, 0, 3, -1},
                                              int64[4] q = {1, 1, 2, 2}, int64[2] ax = {-1, 1}> {
                a = Pad (x, p)
                b = Pad <mode = \"reflect\"> (x, q, , ax)
                c = Pad <mode = \"edge\"> (x, p)
            }",
        );
        assert_eq!(dims(&a, "a"), [1, 3, 8, 6]);
        assert_eq!(dims(&a, "b"), [1, 6, 4, 8]);
        assert_eq!(dims(&a, "c"), [1, 3, 8, 6]);
        // [1,2,3] padded by 2 and 1 in each mode.
        let a = run(
            19,
            "g () => (c, r, e, w) <int32[3] x = {1, 2, 3}, int64[2] p = {2, 1}, int32 v = {9}> {
                c = Pad (x, p, v)
                r = Pad <mode = \"reflect\"> (x, p)
                e = Pad <mode = \"edge\"> (x, p)
                w = Pad <mode = \"wrap\"> (x, p)
            }",
        );
        assert_eq!(ints(&a, "c"), [9, 9, 1, 2, 3, 9]);
        assert_eq!(ints(&a, "r"), [3, 2, 1, 2, 3, 2]);
        assert_eq!(ints(&a, "e"), [1, 1, 1, 2, 3, 3]);
        assert_eq!(ints(&a, "w"), [2, 3, 1, 2, 3, 1]);
        // Opset 2: pads and value are attributes; negative pads crop.
        let a = run(
            2,
            "g () => (y) <float[4] x = {1, 2, 3, 4}> { y = Pad <pads = [-1, 2], value = 0.5> (x) }",
        );
        assert_eq!(floats(&a, "y"), [2., 3., 4., 0.5, 0.5]);
        // Booleans: a true border around [false].
        let a = run(
            13,
            "g () => (y) <bool[1] x = {0}, int64[2] p = {1, 1}, bool v = {1}> { y = Pad (x, p, v) }",
        );
        assert_eq!(ty(&a, "y").elem, ElemType::Bool);
        assert_eq!(ints(&a, "y"), [1, 0, 1]);
    }

    #[test]
    fn pad_errors() {
        let a = run(13, "g (float[3] x) => (y) <int64[1] p = {1}> { y = Pad (x, p) }");
        fails_with(&a, "2 per axis");
        let a = run(13, "g (float[3] x) => (y) <int64[2] p = {-2, -2}> { y = Pad (x, p) }");
        fails_with(&a, "crops axis 0");
        let a = run(
            18,
            "g (float[3] x) => (y) <int64[2] p = {1, 1}> { y = Pad <mode = \"wrap\"> (x, p) }",
        );
        fails_with(&a, "wrap needs opset 19");
        let a = run(
            19,
            "g (float[0] x) => (y) <int64[2] p = {1, 1}> { y = Pad <mode = \"edge\"> (x, p) }",
        );
        fails_with(&a, "empty tensor");
        let a = run(13, "g (float[3] x, int64[2] p) => (float[N] y) { y = Pad (x, p) }");
        fails_with(&a, "unsupported: Pad's pads or axes is known only at run time");
    }
}
