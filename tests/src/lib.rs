//! Shared helpers for the corpus runners in `src/bin/`.
//!
//! The runners read `../shared` (the ONNX node suite, its text corpus and the
//! real models); the project's own tests never need it.

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
