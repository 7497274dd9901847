//! Any text given to the parser gives a model or a clean error; a model that
//! parses prints to text that parses again into the same model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_codegen::canonical::canonicalize_model;
use onnx_codegen::proto::Message;
use onnx_codegen::text::{parse_model, print_model};

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    let Ok(mut model) = parse_model(src, "fuzz.onnxtxt") else { return };
    let printed = print_model(&model);
    let mut again = match parse_model(&printed, "printed.onnxtxt") {
        Ok(m) => m,
        Err(e) => panic!("printed text does not parse: {e}\n--- printed:\n{printed}"),
    };
    canonicalize_model(&mut model);
    canonicalize_model(&mut again);
    assert!(model.encode_to_vec() == again.encode_to_vec(), "round trip changed the model:\n{printed}");
});
