//! Code generated from `build.rs` (see `build.rs`): the digits classifier of
//! `examples/digits`, compiled for batches of 8 images, run on its test split.
//!
//! Run it with `cargo run --release -p build-script`.

use std::process::ExitCode;

include!(concat!(env!("OUT_DIR"), "/digits.rs"));

const BATCH: usize = 8;
const PIXELS: usize = 64;
const CLASSES: usize = 10;
const IMAGES: &[u8] = include_bytes!("../../digits/model/test_images.bin");
const LABELS: &[u8] = include_bytes!("../../digits/model/test_labels.bin");
const REFERENCE: &[u8] = include_bytes!("../../digits/model/reference_predictions.bin");

fn main() -> ExitCode {
    let mut model = DigitsBatch::new();
    let mut pixels = [0.0f32; BATCH * PIXELS];
    let mut probabilities = [0.0f32; BATCH * CLASSES];
    let (mut correct, mut agree, mut seen) = (0usize, 0usize, 0usize);
    // 360 images: 45 full batches.
    for (b, batch) in IMAGES.chunks_exact(BATCH * PIXELS).enumerate() {
        for (x, &p) in pixels.iter_mut().zip(batch) {
            *x = f32::from(p) / 16.0;
        }
        if let Err(e) = model.run(&pixels, &mut probabilities) {
            eprintln!("batch {b}: the model failed: {e:?}");
            return ExitCode::FAILURE;
        }
        for (j, row) in probabilities.chunks_exact(CLASSES).enumerate() {
            let i = b * BATCH + j;
            let predicted = row
                .iter()
                .enumerate()
                .fold(0, |best, (k, &p)| if p > row[best] { k } else { best });
            correct += usize::from(predicted == usize::from(LABELS[i]));
            agree += usize::from(predicted == usize::from(REFERENCE[i]));
            seen += 1;
        }
    }
    println!(
        "batches of {BATCH}: accuracy {correct}/{seen}, equal to onnxruntime's predictions: {agree}/{seen}"
    );
    if agree == seen { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
