//! The HTML report: its memory plan picture matches the plan, its figures are
//! right, unsupported operators are listed, and it renders in a real browser.
//! (The `report` and `inspect` verbs are tested in `cli/tests/report.rs`.)

use onnx_codegen::generate::{Analysis, Options, analyze};
use onnx_codegen::report::{self, PLAN_HEIGHT, PLAN_LEFT, PLAN_MIN_HEIGHT, PLAN_TOP, PLAN_WIDTH};
use std::path::PathBuf;

/// Five arena values with overlapping lifetimes and a MatMul against a
/// folded [64, 16] weight: 4 * 16 * 64 = 4096 MACs.
const MODEL: &str = r#"
<ir_version: 8, opset_import: ["" : 17], producer_name: "report-test">
g (float[4, 64] x) => (float[4, 16] y) {
  a = Relu (x)
  b = Sigmoid (a)
  c = Mul (a, b)
  shape = Constant <value = int64[2] {64, 16}> ()
  w = ConstantOfShape <value = float[1] {0.5}> (shape)
  d = MatMul (c, w)
  e = Tanh (d)
  y = Add (e, d)
}
"#;

fn analysis(src: &str) -> Analysis {
    let model = onnx_codegen::text::parse_model(src, "test.onnxtxt").unwrap();
    analyze(&model, &Options::default()).unwrap()
}

/// The attribute `name` of an element's start tag.
fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let start = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
    let len = tag[start..].find('"').unwrap();
    &tag[start..start + len]
}

fn num(tag: &str, name: &str) -> f64 {
    attr(tag, name).parse().unwrap()
}

/// The start tags of the buffer rectangles.
fn buffer_rects(html: &str) -> Vec<&str> {
    html.match_indices("<rect class=\"buf\"")
        .map(|(i, _)| {
            let end = html[i..].find('>').unwrap();
            &html[i..i + end]
        })
        .collect()
}

#[test]
fn plan_rectangles_match_the_plan() {
    let a = analysis(MODEL);
    let plan = a.plan.as_ref().expect("the test model is planned");
    assert!(plan.buffers.len() >= 2, "the test model should use several buffers");
    let steps = a.inferred.steps.len() as f64;
    let arena = plan.arena_bytes as f64;
    let html = report::html(&a, "test.onnxtxt").unwrap();
    let rects = buffer_rects(&html);
    assert_eq!(rects.len(), plan.buffers.len());
    for (tag, b) in rects.iter().zip(&plan.buffers) {
        assert_eq!(attr(tag, "data-offset"), b.offset.to_string());
        assert_eq!(attr(tag, "data-bytes"), b.bytes.to_string());
        assert_eq!(attr(tag, "data-first"), b.first_step.to_string());
        assert_eq!(attr(tag, "data-last"), b.last_step.to_string());
        let close = |got: f64, want: f64| {
            assert!((got - want).abs() < 0.011, "{tag}: {got} != {want}");
        };
        close(num(tag, "x"), PLAN_LEFT + b.first_step as f64 * PLAN_WIDTH / steps);
        close(num(tag, "width"), (b.last_step - b.first_step + 1) as f64 * PLAN_WIDTH / steps);
        close(num(tag, "y"), PLAN_TOP + b.offset as f64 * PLAN_HEIGHT / arena);
        close(num(tag, "height"), (b.bytes as f64 * PLAN_HEIGHT / arena).max(PLAN_MIN_HEIGHT));
        // Everything stays inside the drawing area.
        assert!(num(tag, "x") + num(tag, "width") <= PLAN_LEFT + PLAN_WIDTH + 0.011);
        assert!(num(tag, "y") + num(tag, "height") <= PLAN_TOP + PLAN_HEIGHT + PLAN_MIN_HEIGHT);
    }
    // Hover text names the values stored in each buffer.
    for b in &plan.buffers {
        let first = &b.values[0];
        assert!(html.contains(&format!("<title>{first}")), "no hover text for {first}");
    }
    // Buffers alive at the same step never overlap in the picture's data.
    for (i, p) in plan.buffers.iter().enumerate() {
        for q in &plan.buffers[i + 1..] {
            let live = p.first_step <= q.last_step && q.first_step <= p.last_step;
            let apart = p.offset + p.bytes <= q.offset || q.offset + q.bytes <= p.offset;
            assert!(!live || apart, "{p:?} overlaps {q:?}");
        }
    }
}

#[test]
fn figures_are_computed_from_shapes() {
    let a = analysis(MODEL);
    let r = report::build(&a, "test.onnxtxt");
    let matmul = r.nodes.iter().find(|n| n.op == "MatMul").unwrap();
    assert_eq!(matmul.macs, 4 * 16 * 64);
    assert_eq!(matmul.flops, 2 * 4 * 16 * 64);
    assert_eq!(matmul.out_bytes, 4 * 16 * 4);
    assert_eq!(matmul.weight_bytes, 64 * 16 * 4);
    let relu = r.nodes.iter().find(|n| n.op == "Relu").unwrap();
    assert_eq!((relu.macs, relu.flops), (0, 4 * 64));
    let folded: Vec<&str> =
        r.nodes.iter().filter(|n| n.status == "folded").map(|n| n.op.as_str()).collect();
    assert_eq!(folded, ["Constant", "ConstantOfShape"]);
    assert_eq!(r.totals.macs, 4096);
    assert_eq!(r.inputs[0].ty, "float[4, 64]");
    assert_eq!(r.inputs[0].bytes, Some(4 * 64 * 4));
    assert!(r.metadata.iter().any(|(k, v)| k == "Producer" && v == "report-test"));
    let html = report::render(&r).unwrap();
    assert!(html.contains("4.10 k"), "MatMul MACs shown as 4.10 k");
    assert!(!html.contains("http://") || !html.contains("<script src"), "self-contained");
    assert!(!html.contains("<link"), "no external style sheets");
}

#[test]
fn unsupported_operators_are_listed_first_and_names_are_escaped() {
    let src = r#"
<ir_version: 8, opset_import: ["" : 17]>
g (float[2] x, int64[2] pads) => (float[M] y) {
  a = Relu (x)
  y = Pad (a, pads)
}
"#;
    let a = analysis(src);
    assert!(!a.inferred.unsupported.is_empty(), "Pad with run-time pads is unsupported");
    let html = report::html(&a, "<odd>.onnxtxt").unwrap();
    let problems = html.find("id=\"problems\"").expect("a problems section");
    let nodes = html.find("<h2>Nodes</h2>").unwrap();
    assert!(problems < nodes);
    assert!(html[problems..nodes].contains("<b>Pad</b> in node <code>#1</code>"));
    assert!(html.contains("&lt;odd&gt;.onnxtxt"));
    assert!(!html.contains("<odd>"));
    assert!(html.contains("Not planned"));
    let r = report::build(&a, "u.onnxtxt");
    let status: Vec<&str> = r.nodes.iter().map(|n| n.status).collect();
    assert_eq!(status, ["pending", "unsupported"]);
    assert_eq!(r.totals.flops, 2, "the pending Relu's work is counted");
}

#[path = "../../tests/src/browser.rs"]
mod browser;

#[test]
fn renders_in_headless_chromium() {
    let Some(exe) = browser::chromium() else {
        eprintln!(
            "\n*** SKIPPED renders_in_headless_chromium: chromium is not installed \
             (apt-get install -y chromium). The report was NOT checked in a browser. ***\n"
        );
        return;
    };
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-browser");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let a = analysis(MODEL);
    let html = report::html(&a, "test.onnxtxt").unwrap();
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();
    let url = format!("file://{}", page.display());

    // The browser parses the page into the same rectangles.
    let dom = browser::run(&exe, &dir.join("profile-dom"), &["--dump-dom".into(), url.clone()])
        .unwrap_or_else(|e| panic!("{e}"));
    let buffers = a.plan.as_ref().unwrap().buffers.len();
    assert_eq!(buffer_rects(&dom).len(), buffers, "rectangles in the browser's DOM");
    assert!(dom.contains("<h2>Nodes</h2>"));

    let shot = dir.join("report.png");
    browser::run(
        &exe,
        &dir.join("profile-shot"),
        &[
            format!("--screenshot={}", shot.display()),
            "--window-size=1280,1600".into(),
            "--hide-scrollbars".into(),
            url,
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() > 20_000, "the screenshot looks empty ({} bytes)", png.len());
    eprintln!("screenshot: {}", shot.display());
}

/// Graph errors in text models point at the line of the node, attribute or
/// initializer at fault, also inside subgraphs.
#[test]
fn graph_errors_in_text_get_source_positions() {
    use onnx_codegen::diag::PathStep;
    let src = r#"<ir_version: 8, opset_import: ["" : 17]>
main (bool c, float[2] x) => (float[2] y)
   <float[2] w = {1, 2}>
{
  [first] a = Relu (x)
  y = If (c) <then_branch = then_g () => (float[2] t) {
      t = Neg (a)
    }, else_branch = else_g () => (float[2] e) {
      e = Abs (a)
    }>
}
"#;
    let (_, map) = onnx_codegen::text::parse_model_with_spans(src, "m.onnxtxt").unwrap();
    let node = |name: &str, op: &str| PathStep::Node { name: name.into(), op_type: op.into() };
    let at = |path: Vec<PathStep>| {
        let pos = map.locate(src, &path).expect("found");
        (pos.line, pos.column, pos.len)
    };
    let main = PathStep::Graph("main".into());
    assert_eq!(at(vec![main.clone(), node("first", "Relu")]), (5, 15, 4));
    assert_eq!(at(vec![main.clone(), node("#1", "If")]), (6, 7, 2));
    assert_eq!(at(vec![main.clone(), PathStep::Tensor("w".into())]), (3, 14, 1));
    assert_eq!(
        at(vec![
            main.clone(),
            node("#1", "If"),
            PathStep::Attribute("else_branch".into()),
            PathStep::Graph("else_g".into()),
            node("#0", "Abs"),
        ]),
        (9, 11, 3)
    );
    // A step that cannot be found leaves the innermost one that was.
    assert_eq!(
        at(vec![main.clone(), node("#1", "If"), PathStep::Attribute("nope".into())]),
        (6, 7, 2)
    );
    assert!(map.locate(src, &[PathStep::Graph("other".into())]).is_none());
    assert_eq!(at(vec![main.clone()]), (2, 1, 4));

    // End to end: validation's error gets the node's line.
    let bad = "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] x) => (float[2] y) {\n  [mul] y = Mul (x, w)\n}\n";
    let model = onnx_codegen::text::parse_model(bad, "bad.onnxtxt").unwrap();
    let Err(err) = onnx_codegen::passes::prepare(&model) else { panic!("w is undefined") };
    let (_, map) = onnx_codegen::text::parse_model_with_spans(bad, "bad.onnxtxt").unwrap();
    let mut diags = err.into_diagnostics();
    onnx_codegen::text::spans::attach_positions(bad, &map, &mut diags);
    let pos = diags[0].location.pos.as_ref().expect("a position");
    assert_eq!((pos.line, pos.column), (3, 13));
}
