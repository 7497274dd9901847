//! A trained classifier, compiled into Rust by `onnx_model!`, classifying the
//! test split of scikit-learn's 8x8 handwritten digits.
//!
//! The model (`model/digits.onnx`: Gemm, Relu, Gemm, Softmax) and the test
//! data were written by `tools/train_digits.py`; `reference_predictions.bin`
//! holds onnxruntime's prediction for every test image, so the example also
//! shows that the compiled model agrees with the reference.
//!
//! Run it with `cargo run --release -p digits`.

use std::process::ExitCode;

// One image at a time (N = 1), as a device would classify them.
onnx_codegen_macros::onnx_model!("model/digits.onnx", name = Digits, dims(N = 1));

const PIXELS: usize = 64;
const IMAGES: &[u8] = include_bytes!("../model/test_images.bin");
const LABELS: &[u8] = include_bytes!("../model/test_labels.bin");
const REFERENCE: &[u8] = include_bytes!("../model/reference_predictions.bin");

/// The index of the largest probability.
fn argmax(probabilities: &[f32]) -> usize {
    let mut best = 0;
    for (i, &p) in probabilities.iter().enumerate() {
        if p > probabilities[best] {
            best = i;
        }
    }
    best
}

/// An 8x8 image as text, darker pixels as denser characters.
fn sketch(image: &[u8]) -> String {
    const SHADES: [char; 5] = [' ', '.', ':', 'o', '#'];
    image
        .chunks(8)
        .map(|row| row.iter().map(|&p| SHADES[usize::from(p.min(16)) * 4 / 16]).collect::<String>())
        .collect::<Vec<_>>()
        .join("\n")
}

fn main() -> ExitCode {
    let mut model = Digits::new();
    let mut probabilities = [0.0f32; 10];
    let (mut correct, mut agree) = (0usize, 0usize);
    let count = LABELS.len();
    for (i, image) in IMAGES.chunks_exact(PIXELS).enumerate() {
        let mut pixels = [0.0f32; PIXELS];
        for (x, &p) in pixels.iter_mut().zip(image) {
            *x = f32::from(p) / 16.0;
        }
        if let Err(e) = model.run(&pixels, &mut probabilities) {
            eprintln!("image {i}: the model failed: {e:?}");
            return ExitCode::FAILURE;
        }
        let predicted = argmax(&probabilities);
        correct += usize::from(predicted == usize::from(LABELS[i]));
        agree += usize::from(predicted == usize::from(REFERENCE[i]));
        if i < 3 {
            println!("{}", sketch(image));
            println!(
                "image {i}: predicted {predicted} (p = {:.3}), label {}\n",
                probabilities[predicted], LABELS[i]
            );
        }
    }
    println!(
        "accuracy on the {count} test images: {correct}/{count} = {:.2}%",
        100.0 * correct as f64 / count as f64
    );
    println!("predictions equal to onnxruntime's: {agree}/{count}");
    println!("arena: {} bytes, weights: {} bytes", Digits::ARENA_BYTES, Digits::WEIGHT_BYTES);
    if agree == count { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
