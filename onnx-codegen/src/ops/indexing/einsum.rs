//! Einsum's plan: the equation parsed (with its ellipsis and implicit
//! output) into one stride per operand and label, so the kernel only walks
//! the output and summed labels.

use super::{Plan, Planned, product};
use crate::ir::{ElemType, TensorType};
use crate::ops::{NodeCx, OpResult, invalid, is_num, unsupported};
use onnx_codegen_runtime::indexing as rt_ix;

/// One term of an einsum equation: its labels, with `None` where the
/// ellipsis stands.
fn einsum_term(term: &str, what: &str) -> OpResult<Vec<Option<u8>>> {
    let mut out = Vec::new();
    let b = term.as_bytes();
    let mut i = 0;
    let mut ellipsis = false;
    while i < b.len() {
        match b[i] {
            b'.' => {
                if b.get(i..i + 3) != Some(b"...") || ellipsis {
                    return invalid(format!(
                        "Einsum's {what} '{term}' has a stray or repeated '.'"
                    ));
                }
                ellipsis = true;
                out.push(None);
                i += 3;
            }
            c if c.is_ascii_alphabetic() => {
                out.push(Some(c));
                i += 1;
            }
            c => {
                return invalid(format!(
                    "Einsum's {what} '{term}' holds '{}', not a letter",
                    c as char
                ));
            }
        }
    }
    Ok(out)
}

pub(super) fn plan_einsum(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let eq: String = cx.string_or("equation", "").chars().filter(|c| !c.is_whitespace()).collect();
    let n = cx.inputs.len();
    if n == 0 || n > rt_ix::MAX_OPERANDS {
        return unsupported(format!(
            "Einsum with {n} operands (1 to {} are supported)",
            rt_ix::MAX_OPERANDS
        ));
    }
    let elem = cx.input(0)?.elem;
    if !(is_num(elem) || matches!(elem, ElemType::Float16 | ElemType::Bfloat16)) {
        return unsupported(format!("Einsum on {elem} tensors"));
    }
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != n {
        return invalid(format!(
            "Einsum's equation '{eq}' has {} operands, the node {n} inputs",
            terms.len()
        ));
    }
    // Labels: letters by their byte; ellipsis axes as 128 + position from the right.
    let mut size: std::collections::BTreeMap<u16, usize> = std::collections::BTreeMap::new();
    let mut ell_rank = 0usize;
    let mut per_input: Vec<Vec<(u16, usize, usize)>> = Vec::new(); // (label, dim, stride)
    let mut counts: std::collections::BTreeMap<u8, usize> = std::collections::BTreeMap::new();
    let mut ell_dims: Vec<Vec<usize>> = Vec::new();
    for (j, term) in terms.iter().enumerate() {
        let t = cx.input(j)?;
        if t.elem != elem {
            return invalid(format!("Einsum's inputs mix {elem} and {}", t.elem));
        }
        let labels = einsum_term(term, &format!("term {j}"))?;
        let letters = labels.iter().filter(|l| l.is_some()).count();
        let has_ell = labels.len() > letters;
        if t.rank() < letters || (!has_ell && t.rank() != letters) {
            return invalid(format!("Einsum's term '{term}' does not match input {j} {t}"));
        }
        let e = t.rank() - letters;
        if e > rt_ix::MAX_LABELS {
            return unsupported(format!("Einsum with an ellipsis of {e} axes"));
        }
        ell_rank = ell_rank.max(e);
        let mut strides = vec![0usize; t.rank()];
        let mut s = 1usize;
        for d in (0..t.rank()).rev() {
            strides[d] = s;
            s = s.saturating_mul(t.dims[d]);
        }
        let mut axes = Vec::new();
        let mut d = 0;
        let mut ed = Vec::new();
        for l in &labels {
            match l {
                Some(c) => {
                    *counts.entry(*c).or_default() += 1;
                    axes.push((u16::from(*c), t.dims[d], strides[d]));
                    d += 1;
                }
                None => {
                    for q in 0..e {
                        let label = 128 + (e - 1 - q) as u16;
                        axes.push((label, t.dims[d], strides[d]));
                        ed.push(t.dims[d]);
                        d += 1;
                    }
                }
            }
        }
        ell_dims.push(ed);
        per_input.push(axes);
    }
    // Sizes: letters must agree; ellipsis axes broadcast.
    for axes in &per_input {
        for &(label, dim, _) in axes {
            let slot = size.entry(label).or_insert(dim);
            if *slot != dim {
                if label >= 128 && (*slot == 1 || dim == 1) {
                    *slot = (*slot).max(dim);
                } else {
                    return invalid(format!(
                        "Einsum's equation '{eq}' gives an axis both {} and {dim}",
                        *slot
                    ));
                }
            }
        }
    }
    let ell_labels: Vec<u16> = (0..ell_rank).rev().map(|q| 128 + q as u16).collect();
    let out_labels: Vec<u16> = match rhs {
        Some(r) => {
            let mut v = Vec::new();
            for l in einsum_term(r, "output")? {
                match l {
                    Some(c) => {
                        if !counts.contains_key(&c) {
                            return invalid(format!(
                                "Einsum's output label '{}' is in no input",
                                c as char
                            ));
                        }
                        if v.contains(&u16::from(c)) {
                            return invalid(format!(
                                "Einsum's output repeats label '{}'",
                                c as char
                            ));
                        }
                        v.push(u16::from(c));
                    }
                    None => v.extend(&ell_labels),
                }
            }
            v
        }
        None => ell_labels
            .iter()
            .copied()
            .chain(counts.iter().filter(|&(_, &n)| n == 1).map(|(&c, _)| u16::from(c)))
            .collect(),
    };
    let sum_labels: Vec<u16> = size.keys().copied().filter(|l| !out_labels.contains(l)).collect();
    let dim_of = |l: &u16| size.get(l).copied().unwrap_or(1);
    let out_dims: Vec<usize> = out_labels.iter().map(dim_of).collect();
    let sum_dims: Vec<usize> = sum_labels.iter().map(dim_of).collect();
    if out_dims.len() + sum_dims.len() > rt_ix::MAX_LABELS {
        return unsupported("Einsum with more labels than the kernel handles");
    }
    let all = product(&out_dims)?.checked_mul(product(&sum_dims)?);
    if all.is_none() {
        return invalid("Einsum's iteration space is too large");
    }
    let strides: Vec<Vec<usize>> = per_input
        .iter()
        .map(|axes| {
            out_labels
                .iter()
                .chain(&sum_labels)
                .map(|l| {
                    axes.iter()
                        .filter(|(a, d, _)| a == l && !(*d == 1 && dim_of(l) != 1))
                        .map(|&(_, _, s)| s)
                        .sum()
                })
                .collect()
        })
        .collect();
    Ok(Planned {
        outputs: vec![TensorType::new(elem, out_dims.clone())],
        plan: Plan::Einsum { out_dims, sum_dims, strides },
    })
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, value};

    #[test]
    fn einsum_plans() {
        // Implicit output "ik" of a matrix product.
        let a = run(
            12,
            "g () => (float[2,2] y) <float[2,2] a = {1, 2, 3, 4}, float[2,2] b = {5, 6, 7, 8}> {
                y = Einsum <equation: string = \"ij,jk\"> (a, b)
            }",
        );
        assert_eq!(value(&a, 0), [19.0, 22.0, 43.0, 50.0]);
        // A repeated label with an implicit output is a trace.
        let a = run(
            12,
            "g () => (double y) <double[2,2] a = {1, 2, 3, 4}> { y = Einsum <equation: string = \"ii\"> (a) }",
        );
        assert_eq!(value(&a, 0), [5.0]);
        let a = run(
            12,
            "g () => (int64[2,2] y) <int64[2,2] a = {1, 2, 3, 4}> {
                y = Einsum <equation: string = \"ij -> ji\"> (a)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 3.0, 2.0, 4.0]);
        // Batch diagonal with an ellipsis; a broadcast ellipsis in a product.
        let a = run(
            12,
            "g (double[3,5,5] x) => (double[3,5] y) { y = Einsum <equation: string = \"...ii->...i\"> (x) }",
        );
        assert_eq!(types(&a), [ty("double[3, 5]")]);
        let a = run(
            12,
            "g (float[2,1,3,4] a, float[5,4,6] b) => (float[2,5,3,6] y) {
                y = Einsum <equation: string = \"...ij,...jk->...ik\"> (a, b)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 5, 3, 6]")]);
        let a = run(
            12,
            "g (float[2,3] a, float[4,5] b) => (float[2,5] y) { y = Einsum <equation: string = \"ij,jk->ik\"> (a, b) }",
        );
        assert!(errors(&a)[0].contains("both 3 and 4"), "{:?}", errors(&a));
        let a = run(
            12,
            "g (float[2,3] a) => (float[2] y) { y = Einsum <equation: string = \"ij->iz\"> (a) }",
        );
        assert!(errors(&a)[0].contains("'z' is in no input"), "{:?}", errors(&a));
    }
}
