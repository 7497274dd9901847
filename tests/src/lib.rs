//! Shared helpers for the corpus runners in `src/bin/`.
//!
//! The runners read `../shared` (the ONNX node suite, its text corpus and the
//! real models); the project's own tests never need it.

pub mod browser;

use std::path::{Path, PathBuf};

/// The node-suite test directories under `root` (each holds a `model.onnx`), sorted.
pub fn node_test_dirs(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(root)? {
        let path = entry?.path();
        if path.join("model.onnx").is_file() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// Where two models differ: the first differing region of their `Debug`
/// renderings, with a little context, for `FAIL` lines.
pub fn first_difference(
    got: &onnx_codegen_proto::ModelProto,
    expected: &onnx_codegen_proto::ModelProto,
) -> String {
    let a = format!("{got:#?}");
    let b = format!("{expected:#?}");
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let Some(i) = (0..la.len().max(lb.len())).find(|&i| la.get(i) != lb.get(i)) else {
        return "same fields, different encoding".to_owned();
    };
    let context = |lines: &[&str]| -> String {
        let from = i.saturating_sub(3);
        let to = (i + 4).min(lines.len());
        lines.get(from..to).unwrap_or_default().join("\n        ")
    };
    format!(
        "at line {} of the Debug rendering\n  got:\n        {}\n  expected:\n        {}",
        i + 1,
        context(&la),
        context(&lb)
    )
}
