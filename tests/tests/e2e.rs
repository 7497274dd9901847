//! End to end: the models in `tests/models/` were compiled by `build.rs`;
//! here each runs on the inputs in its `.json` file and must give the
//! outputs the ONNX reference evaluator gave (`tools/gen_e2e_expected.py`),
//! within the backend tolerance.

mod generated {
    include!(concat!(env!("OUT_DIR"), "/models.rs"));
}

use onnx_codegen_runtime::{Elem, TensorInfo};

/// The values as bytes of the descriptor's element type, in 8-byte words so
/// they are aligned for any type.
fn encode(values: &[serde_json::Value], info: &TensorInfo) -> Vec<u64> {
    assert_eq!(values.len(), info.numel(), "input '{}'", info.name);
    let mut bytes = Vec::new();
    for v in values {
        match info.elem {
            Elem::F32 => bytes.extend((v.as_f64().unwrap() as f32).to_le_bytes()),
            Elem::F64 => bytes.extend(v.as_f64().unwrap().to_le_bytes()),
            Elem::I32 => bytes.extend((v.as_i64().unwrap() as i32).to_le_bytes()),
            Elem::I64 => bytes.extend(v.as_i64().unwrap().to_le_bytes()),
            other => panic!("no test encoding for {other:?}"),
        }
    }
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    onnx_codegen_runtime::arena::as_bytes_mut(&mut words)[..bytes.len()].copy_from_slice(&bytes);
    words
}

fn decode(bytes: &[u8], info: &TensorInfo) -> Vec<f64> {
    match info.elem {
        Elem::F32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(f32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        Elem::F64 => {
            bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
        }
        Elem::I32 => bytes
            .chunks_exact(4)
            .map(|c| f64::from(i32::from_le_bytes(c.try_into().unwrap())))
            .collect(),
        Elem::I64 => bytes
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        other => panic!("no test decoding for {other:?}"),
    }
}

fn check(name: &str) {
    let path = format!("{}/models/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    // One output step for a quantized model (`tools/gen_e2e_expected.py`).
    let atol = record.get("atol").and_then(serde_json::Value::as_f64).unwrap_or(1e-7);
    let mut model = generated::model(name).unwrap_or_else(|| panic!("no generated model {name}"));
    let (ins, outs) = (model.inputs(), model.outputs());
    let inputs: Vec<Vec<u64>> = record["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .zip(ins)
        .map(|(v, info)| encode(v.as_array().unwrap(), info))
        .collect();
    let input_bytes: Vec<&[u8]> = inputs
        .iter()
        .zip(ins)
        .map(|(w, info)| &onnx_codegen_runtime::arena::as_bytes(w)[..info.byte_size()])
        .collect();
    let mut outputs: Vec<Vec<u64>> =
        outs.iter().map(|i| vec![0u64; i.byte_size().div_ceil(8)]).collect();
    let sized = model.data_sized();
    let mut lengths = vec![0usize; sized.len()];
    {
        let mut output_bytes: Vec<&mut [u8]> = outputs
            .iter_mut()
            .zip(outs)
            .map(|(w, info)| &mut onnx_codegen_runtime::arena::as_bytes_mut(w)[..info.byte_size()])
            .collect();
        model.run_bytes_sized(&input_bytes, &mut output_bytes, &mut lengths).unwrap();
    }
    for (j, (expected, info)) in record["outputs"].as_array().unwrap().iter().zip(outs).enumerate()
    {
        // A data-sized output is the packed prefix of its shape with the
        // reported length on its axis.
        let mut shape = info.shape.to_vec();
        if let Some(k) = sized.iter().position(|d| d.output == j) {
            assert!(lengths[k] <= shape[sized[k].axis], "{name} output {j} over its capacity");
            shape[sized[k].axis] = lengths[k];
        }
        let bytes = shape.iter().product::<usize>() * info.elem.size();
        let got = decode(&onnx_codegen_runtime::arena::as_bytes(&outputs[j])[..bytes], info);
        let want: Vec<f64> =
            expected.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(got.len(), want.len(), "{name} output {j}");
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= atol + 1e-3 * w.abs() || (g.is_nan() && w.is_nan()),
                "{name} output '{}' [{k}]: got {g}, expected {w}",
                info.name
            );
        }
    }
}

#[test]
fn a_quantized_network_on_the_int8_kernels_matches_the_reference() {
    check("quantized_mlp");
}

#[test]
fn a_quantized_residual_block_adding_in_the_output_stage_matches_the_reference() {
    check("quantized_residual");
}

#[test]
fn tiny_classifier_matches_the_reference() {
    check("tiny_classifier");
}

#[test]
fn pads_and_batch_norms_folded_at_generation_time_match_the_reference() {
    check("folds");
}

#[test]
fn one_dimensional_convolutions_and_pools_match_the_reference() {
    check("windows_1d");
}

#[test]
fn pre_activation_norms_and_vector_pools_match_the_reference() {
    check("prenorm_pools");
}

#[test]
fn conv_transposes_and_resizes_match_the_reference() {
    check("upsampling");
}

#[test]
fn broadcast_arithmetic_and_activations_match_the_reference() {
    check("broadcast_arith");
}

#[test]
fn views_matmul_and_folded_shapes_match_the_reference() {
    check("shapes_and_folding");
}

#[test]
fn integer_math_matches_the_reference() {
    check("integer_math");
}

#[test]
fn typed_run_and_descriptors_agree() {
    use generated::tiny_classifier::TinyClassifier;
    let mut m = TinyClassifier::new();
    assert_eq!(TinyClassifier::INPUTS[0].shape, &[2, 4]);
    assert_eq!(TinyClassifier::OUTPUTS[0].elem, Elem::F32);
    let mut probabilities = [0f32; 6];
    m.run(&[1.0, 0.5, -0.3, 2.0, 0.0, 0.0, 0.0, 0.0], &mut probabilities).unwrap();
    // Each row of a softmax sums to one.
    for row in probabilities.chunks(3) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

#[test]
fn if_loop_and_scan_match_the_reference() {
    check("control_flow");
}

#[test]
fn sequences_maps_unrolled_loops_and_unique_match_the_reference() {
    check("sequences");
}

#[test]
fn data_sized_outputs_report_their_length() {
    use generated::sequences::Sequences;
    use onnx_codegen_runtime::Model;
    let m = Sequences::new();
    // uniq, first and counts; inverse has one entry per input element.
    let outputs: Vec<(usize, usize)> = m.data_sized().iter().map(|d| (d.output, d.axis)).collect();
    assert_eq!(outputs, [(4, 0), (5, 0), (7, 0)]);
    assert_eq!(Sequences::OUTPUTS[4].shape, &[8]);
}

#[test]
fn differential_testing_regressions_match_the_reference() {
    check("difftest_regressions");
}

#[test]
fn shapes_known_at_run_time_match_the_reference() {
    check("runtime_shapes");
}

#[test]
fn run_time_shapes_that_differ_from_the_declared_ones_are_an_error() {
    use generated::runtime_shapes::RuntimeShapes;
    let mut m = RuntimeShapes::new();
    let (mut w, mut s, mut p) = ([0f32; 4], [0f32; 8], [0f32; 1]);
    let v = [1.0, 2.0, 3.0, 4.0];
    // Three non-zero entries: the Range would hold 3 elements, the model declares 4.
    let got = m.run(&[3, 0, 5, 7], &v, &mut w, &mut s, &mut p);
    assert_eq!(got, Err(onnx_codegen_runtime::Error::ShapeMismatch));
    // The same model runs again fine on data that fits.
    m.run(&[3, -2, 5, 7], &v, &mut w, &mut s, &mut p).unwrap();
    assert_eq!(s, [-1.0, -0.0, -3.0, -1.0, -6.0, -2.0, -10.0, -3.0]);
    assert_eq!(p, [-10.0]);
    // The If's other branch (a float[1] one) writes the same output.
    m.run(&[3, -2, 5, 7], &[-1.0, -2.0, -3.0, -4.0], &mut w, &mut s, &mut p).unwrap();
    assert_eq!(p, [-0.0]);
    assert_eq!(s, [1.0, -0.0, 3.0, -1.0, 6.0, -2.0, 10.0, -3.0]);
}

#[test]
fn flex_attention_modifiers_and_run_time_dropout_match_the_reference() {
    check("flex_and_dropout");
}

#[test]
fn seeded_training_dropout_matches_the_reference_mask() {
    // The reference draws the mask from numpy's `RandomState(seed)`; the
    // second Dropout draws 800 words, past the generator's first twist.
    check("seeded_dropout");
}

#[test]
fn an_input_fixed_at_generation_time_sizes_the_output() {
    check("fixed_inputs");
}

#[test]
fn an_input_fixed_at_generation_time_refuses_other_values() {
    use generated::fixed_inputs::FixedInputs;
    let mut m = FixedInputs::new();
    let mut y = [0f32; 5];
    m.run(&[5], &[2.0], &mut y).unwrap();
    assert_eq!(y, [0.0, 2.0, 4.0, 6.0, 8.0]);
    assert_eq!(m.run(&[4], &[2.0], &mut y), Err(onnx_codegen_runtime::Error::InputValue));
}

#[test]
fn an_ir3_model_with_legacy_broadcasting_matches_the_reference() {
    // Its weights are graph inputs with initializers: constants, so `run`
    // takes x alone.
    assert_eq!(generated::model("legacy_ir3").unwrap().inputs().len(), 1);
    check("legacy_ir3");
}

#[test]
fn sequence_positions_known_at_run_time_match_the_reference() {
    check("sequence_positions");
}

#[test]
fn sequence_positions_beyond_the_capacity_are_an_error() {
    use generated::sequence_positions::SequencePositions;
    let mut m = SequencePositions::new();
    let (a, b, c) = ([1f32; 6], [2f32; 3], [3f32; 9]);
    let (mut picked, mut first, mut n) = ([0f32; 9], [0f32; 9], [0i64; 1]);
    let mut run = |ins: i64, era: i64, at: i64| {
        m.run(&a, &b, &c, &[ins], &[era], &[at], &mut picked, &mut first, &mut n)
    };
    // Two elements, one inserted (3), one erased (2): 'at' lies in -2..=1.
    assert!(run(1, -3, 1).is_ok());
    assert!(run(2, 0, -2).is_ok());
    let invalid = Err(onnx_codegen_runtime::Error::InvalidParams);
    assert_eq!(run(1, -3, 2).map(|_| ()), invalid, "SequenceAt past the end");
    assert_eq!(run(1, -3, -3).map(|_| ()), invalid, "SequenceAt before the start");
    assert_eq!(run(3, 0, 0).map(|_| ()), invalid, "SequenceInsert past the end");
    assert_eq!(run(-3, 0, 0).map(|_| ()), invalid, "SequenceInsert before the start");
    assert_eq!(run(0, 3, 0).map(|_| ()), invalid, "SequenceErase past the end");
    assert_eq!(run(0, -4, 0).map(|_| ()), invalid, "SequenceErase before the start");
}

#[test]
fn an_if_branch_invalid_at_the_compiled_shapes_fails_only_when_taken() {
    use generated::guarded_branches::GuardedBranches;
    // The else branch squeezes an axis that is 1 only when N is 1; compiled
    // for N = 2, it returns an error if the condition takes it (onnxruntime
    // fails there too), and the then branch runs as the reference says.
    check("guarded_branches");
    let mut m = GuardedBranches::new();
    let mut y = [0f32; 2];
    assert_eq!(m.run(&[-1.0, -2.0], &mut y), Err(onnx_codegen_runtime::Error::ShapeMismatch));
}
