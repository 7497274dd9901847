//! Any bytes given to the protobuf reader give a model or a clean error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_codegen::load::{Format, load_model_bytes};

fuzz_target!(|data: &[u8]| {
    let _ = load_model_bytes(bytes::Bytes::copy_from_slice(data), Format::Binary, None, "fuzz.onnx");
});
