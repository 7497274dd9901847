//! Text operators on integer token ids: `TfIdfVectorizer`.
//!
//! String tokens (`pool_strings`, string inputs) need string tensors, which
//! the generated code does not have yet: they are reported unsupported.

use super::misc::{FnKernel, hin, hout};
use super::{EvalResult, HostTensor, Lowered, NodeCx, OpResult, OpRule, invalid, unsupported};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorType};
use onnx_codegen_runtime::num::Int;
use onnx_codegen_runtime::text::{self as rt_text, Gram, TfIdf, Weighting};
use quote::quote;

/// The rule for `op_type`, if handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "TfIdfVectorizer" => Some(&TfIdfRule),
        _ => None,
    }
}

struct TfIdfRule;

/// The widest output row accepted: the output's size follows from an
/// attribute, so it is bounded before anything is sized by it.
const MAX_WIDTH: usize = 1 << 28;

/// Everything a `TfIdfVectorizer` call needs, decided at generation time.
#[derive(Clone)]
struct Plan {
    rows: usize,
    cols: usize,
    min_n: usize,
    max_n: usize,
    max_skip: usize,
    pool: Vec<i64>,
    grams: Vec<Gram>,
    width: usize,
    mode: Weighting,
    weights: Vec<f32>,
    out: Vec<usize>,
}

impl Plan {
    fn params(&self) -> TfIdf<'_> {
        TfIdf {
            rows: self.rows,
            cols: self.cols,
            min_n: self.min_n,
            max_n: self.max_n,
            max_skip: self.max_skip,
            pool: &self.pool,
            grams: &self.grams,
            width: self.width,
            mode: self.mode,
            weights: &self.weights,
        }
    }
}

fn nonneg(cx: &NodeCx<'_>, name: &str) -> OpResult<usize> {
    let v = cx.int(name)?;
    usize::try_from(v)
        .or_else(|_| invalid(format!("TfIdfVectorizer's {name} is {v}; it must not be negative")))
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Plan> {
    let x = cx.input(0)?;
    match x.elem {
        ElemType::Int32 | ElemType::Int64 => {}
        ElemType::String => {
            return unsupported(
                "TfIdfVectorizer on string tokens (string tensors are not supported)",
            );
        }
        other => {
            return invalid(format!(
                "TfIdfVectorizer's input must be int32, int64 or string, not {other}"
            ));
        }
    }
    let (rows, cols) = match x.dims[..] {
        [] => (1, 1),
        [c] => (1, c),
        [b, c] => (b, c),
        _ => {
            return invalid(format!(
                "TfIdfVectorizer's input must have rank 1 or 2, not {}",
                x.dims.len()
            ));
        }
    };
    let min_n = nonneg(cx, "min_gram_length")?;
    let max_n = nonneg(cx, "max_gram_length")?;
    let max_skip = nonneg(cx, "max_skip_count")?;
    if min_n == 0 || min_n > max_n {
        return invalid(format!(
            "TfIdfVectorizer needs 1 <= min_gram_length <= max_gram_length, not {min_n} and {max_n}"
        ));
    }
    let mode = match cx.string_or("mode", "").as_str() {
        "TF" => Weighting::Tf,
        "IDF" => Weighting::Idf,
        "TFIDF" => Weighting::TfIdf,
        other => {
            return invalid(format!("TfIdfVectorizer's mode '{other}' is not TF, IDF or TFIDF"));
        }
    };
    if matches!(cx.node.attr("pool_strings"), Some(AttrValue::Strings(s)) if !s.is_empty()) {
        return unsupported("TfIdfVectorizer with pool_strings (string tensors are not supported)");
    }
    let pool = cx.ints("pool_int64s").unwrap_or_default();
    let counts = cx.ints("ngram_counts").unwrap_or_default();
    let indexes = cx.ints("ngram_indexes").unwrap_or_default();
    let weights: Vec<f32> = match cx.node.attr("weights") {
        Some(AttrValue::Floats(w)) => w.clone(),
        _ => Vec::new(),
    };
    // ngram_counts[k] is where the (k+1)-grams start in the pool.
    let mut grams = Vec::new();
    for (k, &start) in counts.iter().enumerate() {
        let n = k + 1;
        let end =
            counts.get(k + 1).copied().unwrap_or(i64::try_from(pool.len()).unwrap_or(i64::MAX));
        let (Ok(s), Ok(e)) = (usize::try_from(start), usize::try_from(end)) else {
            return invalid("TfIdfVectorizer's ngram_counts must not be negative");
        };
        if s > e || e > pool.len() || !(e - s).is_multiple_of(n) {
            return invalid(format!(
                "TfIdfVectorizer's ngram_counts {counts:?} do not split a pool of {} tokens into {n}-grams",
                pool.len()
            ));
        }
        for g in 0..(e - s) / n {
            grams.push((n, s + g * n, 0));
        }
    }
    if grams.len() != indexes.len() {
        return invalid(format!(
            "TfIdfVectorizer has {} n-grams in its pool but {} ngram_indexes",
            grams.len(),
            indexes.len()
        ));
    }
    let mut width = 0usize;
    for (g, &i) in grams.iter_mut().zip(&indexes) {
        let Ok(col) = usize::try_from(i) else {
            return invalid(format!(
                "TfIdfVectorizer's ngram_indexes holds {i}, which is negative"
            ));
        };
        if col > MAX_WIDTH {
            return unsupported(format!(
                "TfIdfVectorizer's ngram_indexes holds {col}, too large an output"
            ));
        }
        g.2 = col;
        width = width.max(col + 1);
    }
    if !weights.is_empty() && weights.len() < width {
        return invalid(format!(
            "TfIdfVectorizer has {} weights for {width} output columns",
            weights.len()
        ));
    }
    let out = if x.dims.len() == 2 { vec![rows, width] } else { vec![width] };
    Ok(Plan { rows, cols, min_n, max_n, max_skip, pool, grams, width, mode, weights, out })
}

fn run<I: Int + super::host::HostElem>(
    p: &Plan,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    rt_text::tf_idf(&p.params(), hin::<I>(inputs, 0)?, hout::<f32>(outputs, 0)?)?;
    Ok(())
}

impl OpRule for TfIdfRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![TensorType::new(ElemType::Float, plan(cx)?.out)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(cx)?;
        let elem = cx.input(0)?.elem;
        let q = p.clone();
        FnKernel {
            eval: Box::new(move |i, o| match elem {
                ElemType::Int32 => run::<i32>(&q, i, o),
                _ => run::<i64>(&q, i, o),
            }),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let u = lit::usize_lit;
                let (rows, cols, min_n, max_n, skip, width) =
                    (u(p.rows), u(p.cols), u(p.min_n), u(p.max_n), u(p.max_skip), u(p.width));
                let pool = p.pool.iter().map(|&v| lit::int(i128::from(v), ElemType::Int64));
                let grams = p.grams.iter().map(|&(n, s, c)| {
                    let (n, s, c) = (u(n), u(s), u(c));
                    quote!((#n, #s, #c))
                });
                let weights = p.weights.iter().map(|&w| lit::f32_lit(w));
                let mode = match p.mode {
                    Weighting::Tf => quote!(Tf),
                    Weighting::Idf => quote!(Idf),
                    Weighting::TfIdf => quote!(TfIdf),
                };
                let (x, y) = (&io.inputs[0], &io.outputs[0]);
                quote!(#rt::text::tf_idf(&#rt::text::TfIdf {
                    rows: #rows, cols: #cols, min_n: #min_n, max_n: #max_n, max_skip: #skip,
                    pool: &[#(#pool),*], grams: &[#(#grams),*], width: #width,
                    mode: #rt::text::Weighting::#mode, weights: &[#(#weights),*],
                }, #x, #y)?;)
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    const ATTRS: &str = "max_gram_length: int = 2, max_skip_count: int = 0, mode: string = \"TF\", ngram_counts: ints = [0, 1], ngram_indexes: ints = [2, 0, 1], pool_int64s: ints = [1, 1, 2, 2, 1]";

    #[test]
    fn shapes_follow_ngram_indexes() {
        let a = run(
            9,
            &format!(
                "g (int64[2,6] x) => (float y) {{ y = TfIdfVectorizer <min_gram_length: int = 1, {ATTRS}> (x) }}"
            ),
        );
        assert_eq!(types(&a), [ty("float[2, 3]")]);
        let a = run(
            9,
            &format!(
                "g (int32[6] x) => (float y) {{ y = TfIdfVectorizer <min_gram_length: int = 2, {ATTRS}> (x) }}"
            ),
        );
        assert_eq!(types(&a), [ty("float[3]")]);
    }

    #[test]
    fn folds_constant_input() {
        let a = run(
            9,
            &format!(
                "g () => (float y) {{ x = Constant <value = int32[6] {{1, 2, 1, 3, 2, 1}}> () y = TfIdfVectorizer <min_gram_length: int = 1, {ATTRS}> (x) }}"
            ),
        );
        // Unigram 1 -> column 2 (3 times), (1,2) -> 0 (once), (2,1) -> 1 (twice).
        assert_eq!(value(&a, 0), [1.0, 2.0, 3.0]);
    }

    #[test]
    fn refuses_bad_attributes_and_strings() {
        let a = run(
            9,
            &format!(
                "g (int64[6] x) => (float y) {{ y = TfIdfVectorizer <min_gram_length: int = 3, {ATTRS}> (x) }}"
            ),
        );
        assert!(errors(&a).iter().any(|e| e.contains("min_gram_length")), "{:?}", errors(&a));
        let a = run(
            9,
            "g (string[6] x) => (float y) { y = TfIdfVectorizer <min_gram_length: int = 1, max_gram_length: int = 1, max_skip_count: int = 0, mode: string = \"TF\", ngram_counts: ints = [0], ngram_indexes: ints = [0], pool_strings: strings = [\"a\"]> (x) }",
        );
        assert!(unsupported(&a).iter().any(|e| e.contains("string")), "{:?}", unsupported(&a));
    }
}
