//! Snapshot of the code emitted for a small model: a change to what users
//! see in generated files shows up here as a diff to review. The snapshot
//! was read line by line when it was recorded (weights bytes, offsets,
//! calls); after an intended change, rerun with `SNAPSHOT_UPDATE=1` and
//! review the new file the same way.

use std::path::Path;

#[test]
fn scale_shift_relu_emits_the_reviewed_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let src = std::fs::read_to_string(dir.join("scale_shift_relu.onnxtxt")).unwrap();
    let model = onnx_codegen::text::parse_model(&src, "scale_shift_relu.onnxtxt").unwrap();
    let generated = onnx_codegen::generate::generate(
        &model,
        &onnx_codegen::generate::Options::default(),
        "scale_shift_relu.onnxtxt",
    )
    .unwrap();
    let text = generated.to_file_text("scale_shift_relu.onnxtxt").unwrap();
    let snapshot = dir.join("scale_shift_relu.rs.snap");
    if std::env::var_os("SNAPSHOT_UPDATE").is_some() {
        std::fs::write(&snapshot, &text).unwrap();
    }
    let expected = std::fs::read_to_string(&snapshot).unwrap();
    if text != expected {
        let line = text.lines().zip(expected.lines()).position(|(a, b)| a != b).unwrap_or(0);
        panic!(
            "emitted code differs from {} at line {}:\n  now:      {}\n  snapshot: {}",
            snapshot.display(),
            line + 1,
            text.lines().nth(line).unwrap_or(""),
            expected.lines().nth(line).unwrap_or("")
        );
    }
}
