//! Runs `passes::prepare` (lowering, validation, inlining) over every model
//! of the ONNX node suite and the real models. All of them are valid (the
//! reference checker accepts them), so any error is a bug in our validation.
//!
//! Usage: `check_corpus DIR...` where each DIR holds test directories with a
//! `model.onnx` (default: the node suite and the real models in ../shared).

use onnx_codegen::diag::Severity;

use std::collections::BTreeMap;
use std::path::Path;

fn main() {
    let mut roots: Vec<String> = std::env::args().skip(1).collect();
    if roots.is_empty() {
        let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared");
        roots = vec![format!("{shared}/onnx-tests/node"), format!("{shared}/models")];
    }
    let (mut passed, mut failed) = (0usize, 0usize);
    let mut warnings: BTreeMap<String, usize> = BTreeMap::new();
    for root in &roots {
        let dirs = onnx_codegen_tests::node_test_dirs(Path::new(root)).unwrap_or_else(|e| {
            eprintln!("{root}: {e}");
            std::process::exit(2);
        });
        for dir in dirs {
            let file = dir.join("model.onnx");
            let name =
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let result = onnx_codegen::load::load_model(&file)
                .and_then(|m| onnx_codegen::passes::prepare(&m))
                .map_err(|e| e.to_string());
            match result {
                Ok(p) => {
                    passed += 1;
                    println!("PASS {name}");
                    for w in p.warnings {
                        debug_assert_eq!(w.severity, Severity::Warning);
                        // Group warnings by message shape (names stripped).
                        let shape: String =
                            w.message.split('\'').step_by(2).collect::<Vec<_>>().join("'…'");
                        *warnings.entry(shape).or_default() += 1;
                    }
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL {name}: {}", e.replace('\n', "\n    "));
                }
            }
        }
    }
    for (w, n) in &warnings {
        println!("warning x{n}: {w}");
    }
    println!("check: {passed} passed, {failed} failed");
    if failed > 0 || passed == 0 {
        std::process::exit(1);
    }
}
