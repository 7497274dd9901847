//! Text models through the whole front end: parse, lower, validate, inline.
//! Text reaches deeper than protobuf bytes do (names, functions, attribute
//! references), so this target finds what the binary one rarely does.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(src) = std::str::from_utf8(data) else { return };
    if let Ok(model) = onnx_codegen::text::parse_model(src, "fuzz.onnxtxt") {
        let _ = onnx_codegen::passes::prepare(&model);
    }
});
