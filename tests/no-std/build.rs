//! Generates every test model (tests/models) for the no_std check.

fn main() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models");
    println!("cargo:rerun-if-changed={}", dir.display());
    for name in ["tiny_classifier", "broadcast_arith", "shapes_and_folding", "integer_math"] {
        onnx_codegen::build::Build::new(dir.join(format!("{name}.onnxtxt")))
            .dim("N", 1)
            .generate()
            .unwrap_or_else(|e| panic!("{e}"));
    }
}
