//! Firmware for a Cortex-M4F (QEMU `mps2-an386`): the MLPerf-Tiny
//! keyword-spotting DS-CNN quantized to int8 by onnxruntime (static QDQ,
//! per-channel weights, made by `tools/quantize_models.py`), compiled into
//! Rust by `onnx_model!`, run once on the reference input, its output
//! checked against onnxruntime's.
//!
//! No heap: the model's arena is a `static` (placed by `cortex_m::singleton!`),
//! the weights are read-only data in flash. The firmware prints what it found,
//! its memory use and the instructions one inference took over semihosting
//! and exits with success or failure, so `cargo run --release --bin kws_int8`
//! (QEMU is the runner) is a test.
#![no_std]
#![no_main]

use cortex_m_kws::{fail, run_kws};
use cortex_m_rt::entry;

onnx_codegen_macros::onnx_model!("model/kws_dscnn_int8.onnx", name = Kws);

/// The reference input (1x1x49x10 MFCC features) and onnxruntime's output
/// (12 class probabilities, from its int8 kernels), as little-endian f32 (see build.rs).
const INPUT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kws_int8_input_0.f32"));
const EXPECTED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kws_int8_output_0.f32"));

/// The tolerance of the quantized model tests: a few steps of the output's
/// quantization (onnxruntime rounds some products differently).
const RTOL: f32 = 0.0;
const ATOL: f32 = 0.02;

#[entry]
fn main() -> ! {
    let model: &'static mut Kws =
        cortex_m::singleton!(: Kws = Kws::new()).unwrap_or_else(|| fail("model taken twice"));
    run_kws(
        "kws_dscnn (int8)",
        (Kws::WEIGHT_BYTES, Kws::ARENA_BYTES),
        (INPUT, EXPECTED),
        (ATOL, RTOL),
        |input, probs| model.run(input, probs).is_ok(),
    )
}
