//! Generated code in a `#![no_std]` crate that links no allocator and
//! forbids `unsafe`: CI builds it for `thumbv7em-none-eabihf` (Cortex-M4F).
#![no_std]
#![forbid(unsafe_code)]

pub mod models {
    include!(concat!(env!("OUT_DIR"), "/tiny_classifier.rs"));
    include!(concat!(env!("OUT_DIR"), "/broadcast_arith.rs"));
    include!(concat!(env!("OUT_DIR"), "/shapes_and_folding.rs"));
    include!(concat!(env!("OUT_DIR"), "/integer_math.rs"));
}

/// A model in a `static`: `new` is a `const fn`, so no runtime initialisation.
pub static CLASSIFIER: models::TinyClassifier = models::TinyClassifier::new();

/// Runs the classifier from a stack copy (what firmware does with a static cell).
pub fn classify(features: &[f32; 4]) -> Result<[f32; 3], onnx_codegen_runtime::Error> {
    let mut model = models::TinyClassifier::new();
    let mut out = [0.0; 3];
    model.run(features, &mut out)?;
    Ok(out)
}
