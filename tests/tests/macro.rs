//! `onnx_model!` in a crate: the model compiled in place by the macro gives
//! the ONNX reference evaluator's outputs (tests/models/*.json).

use onnx_codegen_macros::onnx_model;

onnx_model!("models/tiny_classifier.onnxtxt", name = MacroClassifier, dims(N = 2));
onnx_model!("models/integer_math.onnxtxt");
onnx_model!("models/legacy_ir3.onnxtxt", name = LegacyGain, runtime_inputs("gain"));

fn expected(name: &str) -> serde_json::Value {
    let path = format!("{}/models/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn floats(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn the_macro_expands_a_text_model_in_place() {
    let record = expected("tiny_classifier");
    let x: Vec<f32> = floats(&record["inputs"][0]).iter().map(|&v| v as f32).collect();
    let mut model = MacroClassifier::new();
    let mut y = [0f32; 6];
    model.run(&x.try_into().unwrap(), &mut y).unwrap();
    for (got, want) in y.iter().zip(floats(&record["outputs"][0])) {
        assert!((f64::from(*got) - want).abs() <= 1e-7 + 1e-3 * want.abs(), "{got} vs {want}");
    }
    assert_eq!(MacroClassifier::INPUTS[0].shape, &[2, 4]);
}

#[test]
fn the_default_name_comes_from_the_file_name() {
    let record = expected("integer_math");
    let ints = |k: usize| -> Vec<i64> {
        record["inputs"][k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
    };
    let a: Vec<i32> = ints(0).iter().map(|&v| v as i32).collect();
    let b: Vec<i32> = ints(1).iter().map(|&v| v as i32).collect();
    let (c, d) = (ints(2), ints(3));
    let mut model = IntegerMath::new();
    let (mut q, mut r, mut g) = ([0i32; 6], [0i32; 6], [0i64; 4]);
    model
        .run(
            &a.try_into().unwrap(),
            &b.try_into().unwrap(),
            &c.try_into().unwrap(),
            &d.try_into().unwrap(),
            &mut q,
            &mut r,
            &mut g,
        )
        .unwrap();
    let want = |k: usize| -> Vec<i64> {
        record["outputs"][k].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect()
    };
    assert_eq!(q.iter().map(|&v| i64::from(v)).collect::<Vec<_>>(), want(0));
    assert_eq!(r.iter().map(|&v| i64::from(v)).collect::<Vec<_>>(), want(1));
    assert_eq!(g.to_vec(), want(2));
}

#[test]
fn an_initializer_input_named_a_runtime_input_is_an_argument_of_run() {
    let record = expected("legacy_ir3");
    let x: Vec<f32> = floats(&record["inputs"][0]).iter().map(|&v| v as f32).collect();
    let x: [f32; 24] = x.try_into().unwrap();
    assert_eq!(LegacyGain::INPUTS.len(), 2);
    assert_eq!(LegacyGain::INPUTS[1].name, "gain");
    let mut model = LegacyGain::new();
    let (mut q, mut z) = ([0f32; 24], [0f32; 30]);
    // The initializer's values give the reference's outputs.
    model.run(&x, &[1.0, -2.0, 0.5, 3.0], &mut q, &mut z).unwrap();
    for (k, got) in [&q[..], &z[..]].into_iter().enumerate() {
        for (g, w) in got.iter().zip(floats(&record["outputs"][k])) {
            assert!((f64::from(*g) - w).abs() <= 1e-7 + 1e-3 * w.abs(), "{g} vs {w}");
        }
    }
    // A gain of zero: q is zero, so z is the bias in every row.
    model.run(&x, &[0.0; 4], &mut q, &mut z).unwrap();
    assert_eq!(q, [0.0; 24]);
    for row in z.chunks(5) {
        assert_eq!(row, [1.0, -1.0, 0.5, 2.0, -2.0]);
    }
}
