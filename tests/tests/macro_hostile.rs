//! `onnx_model!` on every hostile model of `onnx-codegen/tests/hostile/`
//! (and a million-node model): each is a compile error carrying the model's
//! messages, never a panic of the proc macro.
//!
//! One crate holding one invocation per model is compiled with `rustc`
//! directly against the macro this test crate was built with (no cargo, so
//! no second build of the dependencies and no lock on the target folder).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest `libonnx_codegen_macros-*.so` (or `.dylib`, `.dll`) beside
/// this test binary.
fn macro_library(deps: &Path) -> PathBuf {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(deps)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let lib = name.starts_with("libonnx_codegen_macros-")
                || name.starts_with("onnx_codegen_macros-");
            let dylib = [".so", ".dylib", ".dll"].iter().any(|x| name.ends_with(x));
            (lib && dylib).then(|| (e.metadata().unwrap().modified().unwrap(), e.path()))
        })
        .collect();
    found.sort();
    found.pop().expect("the macro library is built with this test").1
}

#[test]
fn hostile_models_are_compile_errors_not_macro_panics() {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let library = macro_library(deps);
    let hostile = Path::new(env!("CARGO_MANIFEST_DIR")).join("../onnx-codegen/tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&hostile)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnxtxt"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "the hostile corpus is missing");

    let scratch = std::env::temp_dir().join(format!("onnx-codegen-macro-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).unwrap();
    let mut million = String::from(
        "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] v0) => (float[2] v1000000) {\n",
    );
    for i in 1..=1_000_000 {
        million.push_str(&format!("v{i} = Relu (v{})\n", i - 1));
    }
    million.push_str("}\n");
    let million_path = scratch.join("million.onnxtxt");
    std::fs::write(&million_path, million).unwrap();

    let mut cases: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .map(|f| {
            let src = std::fs::read_to_string(&f).unwrap();
            let expect = src
                .lines()
                .filter_map(|l| l.strip_prefix("# expect: "))
                .map(String::from)
                .collect();
            (f, expect)
        })
        .collect();
    cases.push((
        million_path,
        vec!["the model has 1000000 nodes, over the limit of 100000 nodes".into()],
    ));

    let mut src = String::from("#![allow(dead_code)]\n");
    for (i, (file, _)) in cases.iter().enumerate() {
        let path = file.canonicalize().unwrap();
        src.push_str(&format!(
            "mod m{i} {{ onnx_codegen_macros::onnx_model!({:?}, name = M{i}); }}\n",
            path.to_string_lossy()
        ));
    }
    let lib = scratch.join("lib.rs");
    std::fs::write(&lib, src).unwrap();
    let out = Command::new(std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into()))
        .args(["--edition", "2024", "--crate-type", "lib", "--emit", "metadata"])
        .arg("--crate-name")
        .arg("hostile_macro_inputs")
        .arg("-L")
        .arg(format!("dependency={}", deps.display()))
        .arg("--extern")
        .arg(format!("onnx_codegen_macros={}", library.display()))
        .arg("--out-dir")
        .arg(&scratch)
        .arg(&lib)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(!out.status.success(), "the hostile crate compiled");
    assert!(!stderr.contains("panicked"), "the proc macro panicked:\n{stderr}");
    for (file, expect) in &cases {
        for message in expect {
            assert!(
                stderr.contains(message.as_str()),
                "no {message:?} for {} in:\n{stderr}",
                file.display()
            );
        }
    }
    let errors = stderr.lines().filter(|l| l.starts_with("error")).count();
    assert!(errors >= cases.len(), "{errors} errors for {} models:\n{stderr}", cases.len());
}
