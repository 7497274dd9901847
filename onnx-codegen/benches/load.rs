//! Loading speed: the text parser on a 10 MB model, and binary decoding of a
//! 50 MB model (weights must be sliced from the file's buffer, not copied).
//!
//! `cargo bench -p onnx-codegen --bench load` prints the median of several runs.

use bytes::Bytes;
use onnx_codegen::load::{Format, load_model_bytes};
use onnx_codegen::proto::{GraphProto, Message, ModelProto, NodeProto, TensorProto};
use std::time::{Duration, Instant};

const HEAD: &str = "<ir_version: 8, opset_import: [\"\" : 17]>\n";

/// A text model of about `bytes` bytes: a large initializer and many nodes.
fn text_model(bytes: usize) -> String {
    let mut src = String::with_capacity(bytes + 1000);
    src.push_str(HEAD);
    let values = bytes / 2 / 12;
    src.push_str(&format!(
        "big (float[{values}] x) => (float[{values}] y)\n  <float[{values}] w = {{"
    ));
    for i in 0..values {
        if i > 0 {
            src.push(',');
        }
        src.push_str(&format!("{:.6e}", i as f32 * 0.37));
    }
    src.push_str("}>\n{\n  t0 = Add (x, w)\n");
    let mut i = 0;
    while src.len() < bytes {
        src.push_str(&format!("  t{} = Mul <alpha = 1.5, axes = [1, 2, 3]> (t{i}, w)\n", i + 1));
        i += 1;
    }
    src.push_str(&format!("  y = Identity (t{i})\n}}\n"));
    src
}

/// A binary model with `tensors` initializers of `floats` values each.
fn binary_model(tensors: usize, floats: usize) -> Vec<u8> {
    let initializer = (0..tensors)
        .map(|k| TensorProto {
            name: Some(format!("w{k}")),
            data_type: Some(1),
            dims: vec![floats as i64],
            raw_data: Some(Bytes::from(vec![0x3f; floats * 4])),
            ..Default::default()
        })
        .collect();
    let node = (0..tensors)
        .map(|k| NodeProto {
            op_type: Some("Add".into()),
            input: vec![if k == 0 { "x".into() } else { format!("h{k}") }, format!("w{k}")],
            output: vec![format!("h{}", k + 1)],
            ..Default::default()
        })
        .collect();
    let graph = GraphProto { name: Some("big".into()), node, initializer, ..Default::default() };
    ModelProto { ir_version: Some(8), graph: Some(graph), ..Default::default() }.encode_to_vec()
}

fn median(mut f: impl FnMut(), runs: usize) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[runs / 2]
}

fn main() {
    for size in [1_000_000, 10_000_000] {
        let src = text_model(size);
        let t = median(
            || {
                onnx_codegen::text::parse_model(&src, "big.onnxtxt").expect("the model parses");
            },
            5,
        );
        println!("text parse, {:>5.1} MB: {:>8.2} ms median of 5", src.len() as f64 / 1e6, ms(t));
    }
    let bytes = Bytes::from(binary_model(12, 1 << 20));
    let t = median(
        || {
            load_model_bytes(bytes.clone(), Format::Binary, None, "big.onnx").expect("decodes");
        },
        9,
    );
    println!("binary decode, {:>5.1} MB: {:>8.2} ms median of 9", bytes.len() as f64 / 1e6, ms(t));
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
