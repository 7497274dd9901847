//! Compiles the digits classifier into `$OUT_DIR/digits.rs` with a batch of 8.

use std::process::ExitCode;

fn main() -> ExitCode {
    let built = onnx_codegen::build::Build::new("../digits/model/digits.onnx")
        .name("DigitsBatch")
        .dim("N", 8)
        .generate();
    match built {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            // Every problem with the model, rendered with its place.
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
