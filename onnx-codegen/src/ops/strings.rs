//! String operators: StringConcat, StringSplit, StringNormalizer,
//! RegexFullMatch, and the string forms of Equal and LabelEncoder (called
//! from their rules in `logic` and `ml`); and ImageDecoder, the other
//! operator behind a runtime feature (`image`).
//!
//! Generated code holds strings as the caller's `&str`s and `String`
//! outputs, so these kernels need the runtime's `alloc` feature; the
//! generator refuses string models unless asked (`Options::alloc`). They are
//! never folded: host tensors have no string form.

use super::misc::FnKernel;
use super::{
    EvalError, Io, Lowered, NodeCx, OpError, OpResult, OpRule, broadcast_shapes, broadcast_strides,
    invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{AttrValue, ElemType, TensorData, TensorType};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "StringConcat" => Some(&ConcatRule),
        "StringSplit" => Some(&SplitRule),
        "StringNormalizer" => Some(&NormalizerRule),
        "RegexFullMatch" => Some(&RegexRule),
        "ImageDecoder" => Some(&ImageRule),
        _ => None,
    }
}

/// A kernel that only runs in generated code.
fn kernel(emit: impl Fn(&Io) -> TokenStream + 'static) -> OpResult<Lowered> {
    FnKernel {
        eval: Box::new(|_, _| Err(EvalError::Type(ElemType::String))),
        emit: Box::new(emit),
        reads: vec![true; 2],
    }
    .lowered()
}

fn io_in(io: &Io, i: usize) -> TokenStream {
    io.inputs.get(i).cloned().flatten().unwrap_or_else(|| quote!(&[]))
}

fn io_out(io: &Io, k: usize) -> TokenStream {
    io.outputs.get(k).cloned().flatten().unwrap_or_else(|| quote!(&mut []))
}

fn string_input<'a>(cx: &NodeCx<'a>, i: usize) -> OpResult<&'a TensorType> {
    let t = cx.input(i)?;
    if t.elem != ElemType::String {
        return invalid(format!(
            "{} takes string tensors, but input {i} is {}",
            cx.node.op.op_type, t.elem
        ));
    }
    Ok(t)
}

fn utf8(bytes: &[u8], what: &str) -> OpResult<String> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| OpError::Invalid(format!("{what} is not valid UTF-8")))
}

/// A string attribute as UTF-8 (absent: `None`).
fn string_attr(cx: &NodeCx<'_>, name: &str) -> OpResult<Option<String>> {
    match cx.node.attr(name) {
        Some(AttrValue::String(b)) => utf8(b, &format!("attribute '{name}'")).map(Some),
        Some(_) => invalid(format!("attribute '{name}' is not a string")),
        None => Ok(None),
    }
}

/// A strings attribute as UTF-8 (absent: empty).
fn strings_attr(cx: &NodeCx<'_>, name: &str) -> OpResult<Vec<String>> {
    match cx.node.attr(name) {
        Some(AttrValue::Strings(list)) => {
            list.iter().map(|b| utf8(b, &format!("an entry of attribute '{name}'"))).collect()
        }
        Some(_) => invalid(format!("attribute '{name}' is not a list of strings")),
        None => Ok(Vec::new()),
    }
}

/// `&rt::elementwise::Broadcast { .. }` for two inputs into `out`.
fn broadcast_tokens(a: &[usize], b: &[usize], out: &[usize], rt: &TokenStream) -> TokenStream {
    let shape = lit::usizes(out);
    let (sa, sb) =
        (lit::isizes(&broadcast_strides(a, out)), lit::isizes(&broadcast_strides(b, out)));
    quote!(&#rt::elementwise::Broadcast { shape: #shape, strides: [#sa, #sb] })
}

// ---------------------------------------------------------------------------
// StringConcat, Equal.

struct ConcatRule;

impl OpRule for ConcatRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let (a, b) = (string_input(cx, 0)?, string_input(cx, 1)?);
        let dims = broadcast_shapes(&[&a.dims, &b.dims])?;
        Ok(vec![TensorType::new(ElemType::String, dims)])
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let (a, b) = (cx.input(0)?.dims.clone(), cx.input(1)?.dims.clone());
        let out = outputs.first().map(|t| t.dims.clone()).unwrap_or_default();
        kernel(move |io| {
            let rt = &io.rt;
            let p = broadcast_tokens(&a, &b, &out, rt);
            let (x, y, z) = (io_in(io, 0), io_in(io, 1), io_out(io, 0));
            quote!(#rt::strings::concat(#p, #x, #y, #z)?;)
        })
    }
}

/// Equal on two string tensors (the Equal rule checked the types).
pub(super) fn equal_lower(a: &TensorType, b: &TensorType, out: &[usize]) -> OpResult<Lowered> {
    let (a, b, out) = (a.dims.clone(), b.dims.clone(), out.to_vec());
    kernel(move |io| {
        let rt = &io.rt;
        let p = broadcast_tokens(&a, &b, &out, rt);
        let (x, y, z) = (io_in(io, 0), io_in(io, 1), io_out(io, 0));
        quote!(#rt::strings::equal(#p, #x, #y, #z)?;)
    })
}

// ---------------------------------------------------------------------------
// StringSplit.

struct SplitRule;

/// The pieces output's width: its last dim where the model fixes it (0 for
/// an empty input). It depends on the data, so the generated code checks it
/// at run time.
fn split_width(cx: &NodeCx<'_>, x: &TensorType) -> OpResult<usize> {
    if x.numel() == Some(0) {
        // No strings, no pieces: the widest count is 0.
        return Ok(0);
    }
    let declared = cx.expected_dims(0).or_else(|| cx.declared_output(0).map(|t| &t.dims[..]));
    let Some(dims) = declared else {
        return unsupported(
            "StringSplit's output width depends on the data; declare the shape of its first output",
        );
    };
    match dims.split_last() {
        Some((&w, lead)) if lead == x.dims.as_slice() => Ok(w),
        _ => invalid(format!(
            "StringSplit's first output is declared {dims:?}, but its input's shape {:?} plus one axis was expected",
            x.dims
        )),
    }
}

impl OpRule for SplitRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = string_input(cx, 0)?;
        let width = split_width(cx, x)?;
        let mut dims = x.dims.clone();
        dims.push(width);
        Ok(vec![
            TensorType::new(ElemType::String, dims),
            TensorType::new(ElemType::Int64, x.dims.clone()),
        ])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let x = string_input(cx, 0)?;
        let width = split_width(cx, x)?;
        let delimiter = string_attr(cx, "delimiter")?.filter(|d| !d.is_empty());
        let maxsplit = match cx.node.attr("maxsplit") {
            Some(AttrValue::Int(n)) => usize::try_from(*n).ok(),
            _ => None,
        };
        kernel(move |io| {
            let rt = &io.rt;
            let d = match &delimiter {
                Some(d) => quote!(Some(#d)),
                None => quote!(None),
            };
            let m = match maxsplit {
                Some(m) => {
                    let m = proc_macro2::Literal::usize_unsuffixed(m);
                    quote!(Some(#m))
                }
                None => quote!(None),
            };
            let w = proc_macro2::Literal::usize_unsuffixed(width);
            let (x, y, z) = (io_in(io, 0), io_out(io, 0), io_out(io, 1));
            quote! {
                #rt::strings::split(
                    &#rt::strings::SplitParams { delimiter: #d, maxsplit: #m, width: #w },
                    #x, #y, #z,
                )?;
            }
        })
    }
}

// ---------------------------------------------------------------------------
// StringNormalizer.

struct NormalizerRule;

struct Normalizer {
    case: &'static str,
    case_sensitive: bool,
    stopwords: Vec<String>,
}

fn normalizer(cx: &NodeCx<'_>) -> OpResult<Normalizer> {
    let case = match string_attr(cx, "case_change_action")?.as_deref() {
        None | Some("NONE") => "None",
        Some("LOWER") => "Lower",
        Some("UPPER") => "Upper",
        Some(other) => {
            return invalid(format!(
                "StringNormalizer's case_change_action is '{other}', not NONE, LOWER or UPPER"
            ));
        }
    };
    Ok(Normalizer {
        case,
        case_sensitive: cx.int_or("is_case_sensitive", 0) != 0,
        stopwords: strings_attr(cx, "stopwords")?,
    })
}

/// The output dims: the input's when nothing can be dropped, else the
/// model's declaration (the count of kept strings depends on the data).
fn normalizer_dims(cx: &NodeCx<'_>, x: &TensorType, p: &Normalizer) -> OpResult<Vec<usize>> {
    let rank_ok = matches!(x.dims.as_slice(), [_] | [1, _]);
    if !rank_ok {
        return invalid(format!(
            "StringNormalizer takes a [C] or [1, C] tensor, got shape {:?}",
            x.dims
        ));
    }
    if p.stopwords.is_empty() && x.dims.iter().product::<usize>() > 0 {
        return Ok(x.dims.clone());
    }
    let declared = cx.expected_dims(0).or_else(|| cx.declared_output(0).map(|t| &t.dims[..]));
    let Some(dims) = declared else {
        return unsupported(
            "StringNormalizer's output length depends on the data (stopwords); declare its output's shape",
        );
    };
    let fits = dims.len() == x.dims.len()
        && (dims.len() == 1 || dims.first() == Some(&1))
        && dims.last().is_some_and(|&c| c >= 1);
    if !fits {
        return invalid(format!(
            "StringNormalizer's output is declared {dims:?}, which does not fit input shape {:?}",
            x.dims
        ));
    }
    Ok(dims.to_vec())
}

impl OpRule for NormalizerRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = string_input(cx, 0)?;
        let p = normalizer(cx)?;
        Ok(vec![TensorType::new(ElemType::String, normalizer_dims(cx, x, &p)?)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = normalizer(cx)?;
        kernel(move |io| {
            let rt = &io.rt;
            let case = proc_macro2::Ident::new(p.case, proc_macro2::Span::call_site());
            let sensitive = p.case_sensitive;
            let words = &p.stopwords;
            let (x, y) = (io_in(io, 0), io_out(io, 0));
            quote! {
                #rt::strings::normalize(
                    &#rt::strings::NormalizerParams {
                        case: #rt::strings::CaseChange::#case,
                        case_sensitive: #sensitive,
                        stopwords: &[#(#words),*],
                    },
                    #x, #y,
                )?;
            }
        })
    }
}

// ---------------------------------------------------------------------------
// RegexFullMatch.

struct RegexRule;

fn pattern(cx: &NodeCx<'_>) -> OpResult<String> {
    let Some(p) = string_attr(cx, "pattern")? else {
        return invalid("RegexFullMatch needs the attribute 'pattern'");
    };
    if !onnx_codegen_runtime::strings::regex_is_valid(&p) {
        return unsupported(format!(
            "RegexFullMatch pattern '{p}' is not valid in the supported syntax (the `regex` crate family's)"
        ));
    }
    Ok(p)
}

impl OpRule for RegexRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let x = string_input(cx, 0)?;
        pattern(cx)?;
        Ok(vec![TensorType::new(ElemType::Bool, x.dims.clone())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = pattern(cx)?;
        kernel(move |io| {
            let rt = &io.rt;
            let (x, y) = (io_in(io, 0), io_out(io, 0));
            quote!(#rt::strings::regex_full_match(#p, #x, #y)?;)
        })
    }
}

// ---------------------------------------------------------------------------
// ImageDecoder.

struct ImageRule;

/// The pixel format's variant name in the runtime and its channel count.
fn pixel_format(cx: &NodeCx<'_>) -> OpResult<(&'static str, usize)> {
    match string_attr(cx, "pixel_format")?.as_deref() {
        None | Some("RGB") => Ok(("Rgb", 3)),
        Some("BGR") => Ok(("Bgr", 3)),
        Some("Grayscale") => Ok(("Grayscale", 1)),
        Some(other) => {
            invalid(format!("ImageDecoder's pixel_format is '{other}', not RGB, BGR or Grayscale"))
        }
    }
}

/// The output's `[height, width, channels]`: the image's size is in the
/// data, so the model must declare it; the kernel checks it at run time.
fn image_shape(cx: &NodeCx<'_>) -> OpResult<[usize; 3]> {
    let x = cx.input(0)?;
    if x.elem != ElemType::Uint8 || x.dims.len() != 1 {
        return invalid(format!("ImageDecoder takes a 1-D uint8 tensor, got {x}"));
    }
    let (_, channels) = pixel_format(cx)?;
    let declared = cx.expected_dims(0).or_else(|| cx.declared_output(0).map(|t| &t.dims[..]));
    match declared {
        Some(&[h, w, c]) if c == channels => Ok([h, w, c]),
        Some(dims) => invalid(format!(
            "ImageDecoder's output is declared {dims:?}, but [height, width, {channels}] was expected"
        )),
        None => unsupported(
            "ImageDecoder's output size is in the encoded data; declare its output's shape",
        ),
    }
}

impl OpRule for ImageRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(vec![TensorType::new(ElemType::Uint8, image_shape(cx)?.to_vec())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        let shape = image_shape(cx)?;
        let (format, _) = pixel_format(cx)?;
        FnKernel {
            eval: Box::new(|_, _| Err(EvalError::Type(ElemType::Uint8))),
            emit: Box::new(move |io| {
                let rt = &io.rt;
                let f = proc_macro2::Ident::new(format, proc_macro2::Span::call_site());
                let [h, w, c] = shape.map(proc_macro2::Literal::usize_unsuffixed);
                let (x, y) = (io_in(io, 0), io_out(io, 0));
                quote! {
                    #rt::image_decode::decode(#rt::image_decode::PixelFormat::#f, [#h, #w, #c], #x, #y)?;
                }
            }),
            reads: vec![true],
        }
        .lowered()
    }
}

// ---------------------------------------------------------------------------
// LabelEncoder with string keys.

/// The string keys: `keys_tensor` (of strings) or `keys_strings`.
fn label_keys(cx: &NodeCx<'_>) -> OpResult<Vec<String>> {
    if let Some(t) = cx.tensor("keys_tensor") {
        let TensorData::Strings(list) = &t.data else {
            return invalid(format!(
                "LabelEncoder's input is string but its keys_tensor is {}",
                t.elem
            ));
        };
        return list.iter().map(|b| utf8(b, "a LabelEncoder key")).collect();
    }
    if cx.node.attr("keys_strings").is_none() {
        return invalid("LabelEncoder's input is string but it has no string keys");
    }
    strings_attr(cx, "keys_strings")
}

/// Keys sorted and distinct (the last of equal keys wins, as a mapping
/// built in order would have it), each with its value's index.
fn sorted_keys(keys: Vec<String>) -> Vec<(String, usize)> {
    let mut pairs: Vec<(String, usize)> =
        keys.into_iter().enumerate().map(|(i, k)| (k, i)).collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
    pairs.dedup_by(|later, first| later.0 == first.0);
    pairs
}

struct LabelPlan {
    keys: Vec<(String, usize)>,
    value_elem: ElemType,
    values: Vec<TokenStream>,
    default: TokenStream,
}

fn label_plan(cx: &NodeCx<'_>) -> OpResult<LabelPlan> {
    let keys = label_keys(cx)?;
    let (value_elem, values) = super::ml::label_table(cx, "values")?;
    if keys.len() != values.len() {
        return invalid(format!(
            "LabelEncoder has {} keys but {} values",
            keys.len(),
            values.len()
        ));
    }
    let default = super::ml::label_default(cx, value_elem)?.tokens(value_elem);
    let [default] = default.as_slice() else {
        return invalid("LabelEncoder's default must hold one value");
    };
    Ok(LabelPlan {
        keys: sorted_keys(keys),
        value_elem,
        values: values.tokens(value_elem),
        default: default.clone(),
    })
}

/// LabelEncoder's types when its input is string (numeric values).
pub(super) fn label_infer(cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
    let p = label_plan(cx)?;
    Ok(vec![TensorType::new(p.value_elem, cx.input(0)?.dims.clone())])
}

/// LabelEncoder from strings to numbers.
pub(super) fn label_lower(cx: &NodeCx<'_>) -> OpResult<Lowered> {
    let p = label_plan(cx)?;
    let mut values = Vec::with_capacity(p.keys.len());
    for (_, i) in &p.keys {
        match p.values.get(*i) {
            Some(v) => values.push(v.clone()),
            None => return invalid("LabelEncoder's values do not parse"),
        }
    }
    let keys: Vec<String> = p.keys.into_iter().map(|(k, _)| k).collect();
    let default = p.default;
    kernel(move |io| {
        let rt = &io.rt;
        let (x, y) = (io_in(io, 0), io_out(io, 0));
        quote!(#rt::strings::label_encode(&[#(#keys),*], &[#(#values),*], #default, #x, #y)?;)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::{Options, generate};

    fn model(graph: &str) -> crate::proto::ModelProto {
        let src = format!("<ir_version: 9, opset_import: [\"\" : 20]>\n{graph}");
        crate::text::parse_model(&src, "test.onnxtxt").expect("test model parses")
    }

    const CONCAT: &str =
        "g (string[2] a, string[1] b) => (string[2] c) { c = StringConcat (a, b) }";

    #[test]
    fn string_models_need_the_alloc_option() {
        let m = model(CONCAT);
        let err = generate(&m, &Options::default(), "m.onnxtxt").err().expect("refused");
        let text = err.to_string();
        assert!(text.contains("value 'a' is a string tensor"), "{text}");
        assert!(text.contains("--alloc"), "{text}");
        let opts = Options { alloc: true, ..Options::default() };
        let g = generate(&m, &opts, "m.onnxtxt").expect("generates with alloc");
        assert!(g.summary.needs_alloc && !g.summary.needs_image);
        let code = g.to_file_text("m.onnxtxt").expect("formats");
        assert!(code.contains("a: &[&str; 2]"), "{code}");
        assert!(code.contains("c: &mut [::onnx_codegen_runtime::strings::String; 2]"), "{code}");
        assert!(code.contains("fn run_encoded"), "{code}");
    }

    #[test]
    fn data_sized_outputs_need_a_declared_shape() {
        let opts = Options { alloc: true, ..Options::default() };
        let split =
            model("g (string[2] x) => (string[2,?] y, int64[2] n) { y, n = StringSplit (x) }");
        let err = generate(&split, &opts, "m.onnxtxt").err().expect("refused").to_string();
        assert!(err.contains("declare the shape of its first output"), "{err}");
        let image = model("g (uint8[10] x) => (uint8[4,4,3] y) { y = ImageDecoder (x) }");
        let err = generate(&image, &opts, "m.onnxtxt").err().expect("refused").to_string();
        assert!(err.contains("--image"), "{err}");
        let image_opts = Options { image: true, ..Options::default() };
        assert!(generate(&image, &image_opts, "m.onnxtxt").is_ok());
        let gray = model(
            "g (uint8[10] x) => (uint8[4,4,3] y) { y = ImageDecoder <pixel_format: string = \"Grayscale\"> (x) }",
        );
        let err = generate(&gray, &image_opts, "m.onnxtxt").err().expect("refused").to_string();
        assert!(err.contains("[height, width, 1] was expected"), "{err}");
    }

    #[test]
    fn bad_patterns_and_string_intermediates_are_refused() {
        let opts = Options { alloc: true, ..Options::default() };
        let regex = model(
            "g (string[2] x) => (bool[2] y) { y = RegexFullMatch <pattern: string = \"(\"> (x) }",
        );
        let err = generate(&regex, &opts, "m.onnxtxt").err().expect("refused").to_string();
        assert!(err.contains("is not valid"), "{err}");
        let chain = model(
            "g (string[2] a) => (string[2] c) { b = StringConcat (a, a)\n c = StringConcat (b, a) }",
        );
        let err = generate(&chain, &opts, "m.onnxtxt").err().expect("refused").to_string();
        assert!(err.contains("string value 'b' is an intermediate"), "{err}");
    }

    #[test]
    fn label_keys_sort_with_the_last_duplicate_winning() {
        let keys = vec!["b".to_owned(), "a".to_owned(), "b".to_owned()];
        assert_eq!(sorted_keys(keys), [("a".to_owned(), 1), ("b".to_owned(), 2)]);
    }
}
