//! Checks the protobuf schema against real files: every `model.onnx` and every
//! test-data file under the given directories must decode and encode again to
//! the very same bytes. Test-data files are decoded as the message type their
//! graph input or output declares (tensor, sequence, map or optional).
//!
//! Usage: `proto_corpus DIR...` where each DIR holds test directories.

use onnx_codegen_proto::{
    MapProto, Message, ModelProto, OptionalProto, SequenceProto, TensorProto, TypeProto, type_proto,
};
use std::path::Path;

fn reencodes<M: Message + Default>(bytes: &[u8]) -> Result<(), String> {
    let m = M::decode(bytes::Bytes::copy_from_slice(bytes)).map_err(|e| e.to_string())?;
    if m.encode_to_vec() == bytes { Ok(()) } else { Err("encodes to different bytes".into()) }
}

fn check_data(bytes: &[u8], ty: Option<&TypeProto>) -> Result<(), String> {
    match ty.and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::SequenceType(_)) => reencodes::<SequenceProto>(bytes),
        Some(type_proto::Value::MapType(_)) => reencodes::<MapProto>(bytes),
        Some(type_proto::Value::OptionalType(_)) => reencodes::<OptionalProto>(bytes),
        _ => reencodes::<TensorProto>(bytes),
    }
}

fn check_test_dir(dir: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let model_bytes = match std::fs::read(dir.join("model.onnx")) {
        Ok(b) => b,
        Err(e) => return vec![format!("{}: {e}", dir.display())],
    };
    if let Err(e) = reencodes::<ModelProto>(&model_bytes) {
        problems.push(format!("{}/model.onnx: {e}", dir.display()));
        return problems;
    }
    let model = ModelProto::decode(model_bytes.as_slice()).expect("decoded above");
    let graph = model.graph.unwrap_or_default();
    let Ok(entries) = std::fs::read_dir(dir) else { return problems };
    for set in entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
        let Ok(files) = std::fs::read_dir(&set) else { continue };
        for file in files.flatten().map(|e| e.path()) {
            let name = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            let ty = if let Some(k) = name.strip_prefix("input_") {
                k.parse::<usize>()
                    .ok()
                    .and_then(|k| graph.input.get(k))
                    .and_then(|v| v.r#type.as_ref())
            } else if let Some(k) = name.strip_prefix("output_") {
                k.parse::<usize>()
                    .ok()
                    .and_then(|k| graph.output.get(k))
                    .and_then(|v| v.r#type.as_ref())
            } else {
                continue;
            };
            let result = std::fs::read(&file)
                .map_err(|e| e.to_string())
                .and_then(|bytes| check_data(&bytes, ty));
            if let Err(e) = result {
                problems.push(format!("{}: {e}", file.display()));
            }
        }
    }
    problems
}

fn main() {
    let mut dirs = 0;
    let mut failed = 0;
    for root in std::env::args().skip(1) {
        let tests = onnx_codegen_tests::node_test_dirs(Path::new(&root)).unwrap_or_else(|e| {
            eprintln!("{root}: {e}");
            std::process::exit(2);
        });
        for dir in tests {
            dirs += 1;
            let problems = check_test_dir(&dir);
            let name =
                dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            if problems.is_empty() {
                println!("PASS {name}");
            } else {
                failed += 1;
                for p in problems {
                    println!("FAIL {name}: {p}");
                }
            }
        }
    }
    println!("proto: {} passed, {failed} failed", dirs - failed);
    if failed > 0 || dirs == 0 {
        std::process::exit(1);
    }
}
