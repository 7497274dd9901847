//! The text parser against the reference parser (fixtures whose expected
//! `.onnx` files were written by `tools/gen_text_fixtures.py` with
//! `onnx.parser.parse_model`), and its errors, depth limit and speed.

use onnx_codegen::proto::{Message, ModelProto};
use onnx_codegen::text::parse_model;
use std::path::Path;

fn fixture_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/text")
}

#[test]
fn fixtures_parse_as_the_reference_does() {
    let mut sources: Vec<_> = std::fs::read_dir(fixture_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnxtxt"))
        .collect();
    sources.sort();
    assert!(sources.len() >= 5, "fixtures missing: {sources:?}");
    for source in sources {
        let src = std::fs::read_to_string(&source).unwrap();
        let name = source.display().to_string();
        let ours = parse_model(&src, &name).unwrap_or_else(|e| panic!("{e}"));
        let expected_bytes = std::fs::read(source.with_extension("onnx")).unwrap_or_else(|e| {
            panic!("{name}: no expected .onnx ({e}); run tools/gen_text_fixtures.py")
        });
        let expected = ModelProto::decode(expected_bytes.as_slice()).unwrap();
        assert_eq!(expected.encode_to_vec(), expected_bytes, "{name}: expected file re-encodes");
        if ours.encode_to_vec() != expected_bytes {
            let (a, b) = (format!("{ours:#?}"), format!("{expected:#?}"));
            let line = a.lines().zip(b.lines()).position(|(x, y)| x != y);
            panic!(
                "{name}: differs from the reference at Debug line {line:?}\nours:\n{a}\nexpected:\n{b}"
            );
        }
    }
}

/// Parses `src`, expects exactly one error diagnostic, and returns its
/// message, line and column.
fn error(src: &str) -> (String, u32, u32) {
    let err = parse_model(src, "bad.onnxtxt").expect_err("should not parse");
    let diags = err.diagnostics();
    assert_eq!(diags.len(), 1, "{err}");
    let d = &diags[0];
    assert_eq!(d.location.file.as_deref(), Some("bad.onnxtxt"));
    let pos = d.location.pos.as_ref().expect("a source position");
    (d.message.clone(), pos.line, pos.column)
}

const HEAD: &str = "<ir_version: 10, opset_import: [\"\" : 21]>\n";

#[test]
fn syntax_errors_say_what_was_expected_and_where() {
    let e = error(&format!("{HEAD}g (float x) => (float y) {{\n  y = Add(x = x)\n}}"));
    assert_eq!(e, ("expected ')' or ',' after a node input, found '='".into(), 3, 13));

    let e = error(&format!("{HEAD}g (float x) => (float y) {{\n  y = Relu(x)\n"));
    assert_eq!(
        e,
        ("expected a node or '}' to close the node list, found end of input".into(), 4, 1)
    );

    let e = error(&format!("{HEAD}g (float[2 x) => (float y) {{}}"));
    assert_eq!(e, ("expected ',' or ']' after a dimension, found identifier 'x'".into(), 2, 12));

    let e = error(&format!("{HEAD}g (float x) = (float y) {{}}"));
    assert_eq!(e.0, "expected '=>' between the graph inputs and outputs, found '='");

    let e = error("<ir_version: 10, opset: []> g () => () {}");
    assert!(e.0.starts_with("unknown model header key 'opset'"), "{}", e.0);
    assert_eq!((e.1, e.2), (1, 18));

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = []> () }}"));
    assert!(e.0.starts_with("the empty list of attribute 'a' needs a type annotation"), "{}", e.0);

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a: int = 1.5> () }}"));
    assert_eq!(e.0, "attribute 'a' is declared 'int' but its value is a float");

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = [1, 2.5]> () }}"));
    assert_eq!(e.0, "attribute 'a' is declared 'int' but its value is a float");
    assert_eq!((e.1, e.2), (2, 31));

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = float[] {{1}}> () }}"));
    assert!(e.0.starts_with("a tensor value needs a known shape"), "{}", e.0);

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = [@b]> () }}"));
    assert!(e.0.starts_with("an attribute reference '@name' cannot be a list element"));
}

#[test]
fn lexical_errors_are_reported_with_positions() {
    let e = error(&format!("{HEAD}g () => () {{ y = Foo <s = \"abc> () }}"));
    assert!(e.0.starts_with("unterminated string"), "{}", e.0);
    assert_eq!((e.1, e.2), (2, 27));

    let e = error(&format!("{HEAD}g () => () {{\n  y = Foo(x); \n}}"));
    assert_eq!(e, ("unexpected character ';'".into(), 3, 13));
}

#[test]
fn numbers_out_of_range_are_errors_not_wraps() {
    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = 9223372036854775808> () }}"));
    assert_eq!(e.0, "integer '9223372036854775808' is out of range for a 64-bit integer");
    assert_eq!((e.1, e.2), (2, 27));

    let e =
        error(&format!("{HEAD}g () => () {{ y = Foo <a = int64 {{-9223372036854775809}}> () }}"));
    assert!(e.0.contains("out of range for a 64-bit integer"), "{}", e.0);

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = int8 {{2147483648}}> () }}"));
    assert!(e.0.contains("out of range for a int8 tensor element"), "{}", e.0);

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = uint64 {{-1}}> () }}"));
    assert_eq!(e.0, "integer '-1' is out of range for a uint64 tensor element");

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = uint32 {{4294967296}}> () }}"));
    assert_eq!(e.0, "integer '4294967296' is out of range for a uint32 tensor element");

    let e = error(&format!("{HEAD}g () => () {{ y = Foo <a = 1e39> () }}"));
    assert_eq!(e.0, "number '1e39' is out of range for a 32-bit float");

    let e = error(&format!("{HEAD}g (float[99999999999999999999] x) => () {{}}"));
    assert!(e.0.contains("out of range for a 64-bit integer"), "{}", e.0);
}

/// Runs `f` on a thread with a small stack, so unbounded recursion would crash.
fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().stack_size(1 << 20).spawn(f).unwrap().join().unwrap()
}

#[test]
fn deep_type_nesting_is_an_error_not_a_stack_overflow() {
    let (message, line, _) = on_small_stack(|| error(&nested_types(100_000)));
    assert!(message.starts_with("nesting is too deep"), "{message}");
    assert_eq!(line, 2);
}

#[test]
fn deep_graph_nesting_is_an_error_not_a_stack_overflow() {
    let message = on_small_stack(|| error(&nested_graphs(100_000)).0);
    assert!(message.starts_with("nesting is too deep"), "{message}");
}

/// The main graph, `seqs` nested `seq(` and the element type.
fn nested_types(seqs: usize) -> String {
    format!("{HEAD}g ({}float{} x) => () {{}}", "seq(".repeat(seqs), ")".repeat(seqs))
}

/// The main graph and `graphs` graphs nested in attributes.
fn nested_graphs(graphs: usize) -> String {
    format!(
        "{HEAD}{}g () => () {{}}{}",
        "g () => () { y = If <b = ".repeat(graphs),
        "> () }".repeat(graphs)
    )
}

#[test]
fn nesting_up_to_the_limit_is_accepted() {
    let parse = |src: String| {
        on_small_stack(move || {
            parse_model(&src, "ok.onnxtxt").map(|_| ()).map_err(|e| e.to_string())
        })
    };
    // Graph, 62 seq and the tensor type: 64 levels; one more is refused.
    parse(nested_types(62)).unwrap();
    assert!(parse(nested_types(63)).unwrap_err().contains("nesting is too deep"));
    // The main graph and 63 nested graphs: 64 levels; one more is refused.
    parse(nested_graphs(63)).unwrap();
    assert!(parse(nested_graphs(64)).unwrap_err().contains("nesting is too deep"));
}
