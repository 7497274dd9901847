//! The whole generator, short of compiling: bytes (text or protobuf, chosen
//! by the first byte) → load → prepare → infer and fold → plan → emit →
//! prettyplease. Every input gives code or a clean error; code, when it
//! comes, is valid Rust that formats. Limits are lowered so that one input
//! stays within libFuzzer's time and memory budget: refusing a big model is
//! itself a path under test.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_codegen::generate::{Options, generate};
use onnx_codegen::limits::Limits;
use onnx_codegen::load::{Format, load_model_bytes};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let model = if selector & 1 == 0 {
        let Ok(src) = std::str::from_utf8(rest) else { return };
        onnx_codegen::text::parse_model(src, "fuzz.onnxtxt")
    } else {
        load_model_bytes(bytes::Bytes::copy_from_slice(rest), Format::Binary, None, "fuzz.onnx")
    };
    let Ok(model) = model else { return };
    let opts = Options {
        limits: Limits {
            max_arena_bytes: 16 << 20,
            max_weight_bytes: 16 << 20,
            max_nodes: 2_000,
            max_depth: 16,
        },
        ..Options::default()
    };
    let Ok(generated) = generate(&model, &opts, "fuzz.onnx") else { return };
    if let Err(e) = generated.to_file_text("fuzz.onnx") {
        panic!("generated tokens do not format as a Rust file: {e}");
    }
    let tokens = generated.to_tokens();
    if let Err(e) = syn::parse2::<syn::File>(tokens) {
        panic!("macro tokens are not a Rust file: {e}");
    }
});
