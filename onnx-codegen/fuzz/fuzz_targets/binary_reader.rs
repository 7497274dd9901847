//! Any bytes given to the protobuf reader, and then to the whole front end
//! (lowering, validation, function inlining), give a model or a clean error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_codegen::load::{Format, load_model_bytes};

fuzz_target!(|data: &[u8]| {
    let bytes = bytes::Bytes::copy_from_slice(data);
    if let Ok(model) = load_model_bytes(bytes, Format::Binary, None, "fuzz.onnx") {
        let _ = onnx_codegen::passes::prepare(&model);
    }
});
