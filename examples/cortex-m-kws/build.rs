//! Puts `memory.x` on the linker's path and turns the reference test data
//! (ONNX `TensorProto` files) into raw little-endian `f32` files in `OUT_DIR`,
//! which the firmware reads with `include_bytes!`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let copy = std::fs::copy(manifest.join("memory.x"), out.join("memory.x"));
    if let Err(e) = copy {
        eprintln!("memory.x: {e}");
        return ExitCode::FAILURE;
    }
    println!("cargo:rustc-link-search={}", out.display());
    println!("cargo:rerun-if-changed=memory.x");
    // The float model's reference data, and the int8 model's (its input is
    // the same; its output is onnxruntime's int8 kernels').
    for (model, set) in [("kws", "test_data_set_0"), ("kws_int8", "test_data_set_int8")] {
        for name in ["input_0", "output_0"] {
            let pb = manifest.join("model").join(set).join(format!("{name}.pb"));
            println!("cargo:rerun-if-changed={}", pb.display());
            if let Err(e) = raw_f32(&pb, &out.join(format!("{model}_{name}.f32"))) {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}

/// Writes the float32 data of the tensor in `pb` to `to`.
fn raw_f32(pb: &Path, to: &Path) -> Result<(), String> {
    let tensor = onnx_codegen::harness::data::read_tensor(pb)?;
    if tensor.elem != onnx_codegen::ir::ElemType::Float {
        return Err(format!("{}: expected float32 data, found {}", pb.display(), tensor.elem));
    }
    let bytes = tensor.bytes().ok_or_else(|| format!("{}: no numeric data", pb.display()))?;
    std::fs::write(to, bytes).map_err(|e| format!("{}: {e}", to.display()))
}
