//! The `report`, `inspect` and `check` verbs on a small model: the HTML file,
//! the summary's figures, and text positions in diagnostics. (The report's
//! contents are tested in the library, `onnx-codegen/tests/report.rs`.)

use std::path::PathBuf;
use std::process::Command;

/// The library test's model: five arena values with overlapping lifetimes and
/// a MatMul against a folded [64, 16] weight: 4 * 16 * 64 = 4096 MACs.
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

fn cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_onnx-codegen")).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn scratch(tag: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("report-cli-{tag}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn cli_report_inspect_and_text_positions() {
    let dir = scratch("verbs");
    let model = dir.join("net.onnxtxt");
    std::fs::write(&model, MODEL).unwrap();
    let m = model.to_str().unwrap();
    let html = dir.join("net.html");

    let (code, stdout, stderr) = cli(&["report", m, "-o", html.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("report of"), "{stdout}");
    let text = std::fs::read_to_string(&html).unwrap();
    assert!(text.starts_with("<!DOCTYPE html>") && text.contains("<svg id=\"plan\""));

    // The default summary is a handful of lines, whatever the model's size.
    let (code, stdout, _) = cli(&["inspect", m]);
    assert_eq!(code, Some(0));
    assert!(stdout.lines().count() <= 8, "{stdout}");
    assert!(stdout.contains("compute  4.10 k MACs"), "{stdout}");
    assert!(stdout.contains("ops      "), "{stdout}");
    let (_, with_values, _) = cli(&["inspect", m, "--values"]);
    assert!(with_values.contains("value    c: float[4, 64]"), "{with_values}");

    // A graph error in a text model is shown with its line and a caret.
    let bad = dir.join("bad.onnxtxt");
    std::fs::write(
        &bad,
        "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] x) => (float[2] y) {\n  [mul] y = Mul (x, w)\n}\n",
    )
    .unwrap();
    let (code, _, stderr) = cli(&["check", bad.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("bad.onnxtxt:3:13"), "{stderr}");
    assert!(stderr.contains(" 3 |   [mul] y = Mul (x, w)\n   |             ^^^"), "{stderr}");
    assert!(stderr.contains("= in graph 'g' > node 'mul' (Mul)"), "{stderr}");

    // A model that cannot be read gets no report.
    let missing = dir.join("missing.onnx");
    let out = dir.join("missing.html");
    let (code, _, stderr) =
        cli(&["report", missing.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("cannot read the model file"), "{stderr}");
    assert!(!out.exists());
}
