//! String tensors end to end: `tests/models/strings.onnxtxt` (StringConcat,
//! StringSplit, Equal, RegexFullMatch, LabelEncoder and StringNormalizer on
//! string inputs), compiled by `build.rs` with `alloc`, must give the ONNX
//! reference evaluator's outputs (`tests/models/strings.json`).

mod generated {
    include!(concat!(env!("OUT_DIR"), "/models.rs"));
}

use generated::strings::Strings;

// The same model through the macro, which takes `alloc` too.
onnx_codegen_macros::onnx_model!("models/strings.onnxtxt", name = MacroStrings, alloc);
use onnx_codegen_runtime::Elem;

fn record() -> serde_json::Value {
    let path = format!("{}/models/strings.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn texts(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_owned()).collect()
}

fn ints(v: &serde_json::Value) -> Vec<i64> {
    v.as_array().unwrap().iter().map(|x| x.as_i64().unwrap()).collect()
}

fn flags(v: &serde_json::Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|x| x.as_bool().unwrap()).collect()
}

#[test]
fn string_operators_match_the_reference() {
    let r = record();
    let words = texts(&r["inputs"][0]);
    let suffix = texts(&r["inputs"][1]);
    let words: [&str; 4] = std::array::from_fn(|i| words[i].as_str());
    let suffix: [&str; 1] = [suffix[0].as_str()];
    let mut joined: [String; 4] = Default::default();
    let mut pieces: [String; 12] = Default::default();
    let mut upper: [String; 3] = Default::default();
    // Stale contents must be replaced, not appended to.
    upper[0].push_str("stale");
    let (mut counts, mut codes) = ([0i64; 4], [0i64; 4]);
    let (mut same, mut matched) = ([false; 4], [false; 4]);
    let mut model = Strings::new();
    model
        .run(
            &words,
            &suffix,
            &mut joined,
            &mut pieces,
            &mut counts,
            &mut same,
            &mut matched,
            &mut codes,
            &mut upper,
        )
        .unwrap();
    let out = &r["outputs"];
    assert_eq!(joined.to_vec(), texts(&out[0]));
    assert_eq!(pieces.to_vec(), texts(&out[1]));
    assert_eq!(counts.to_vec(), ints(&out[2]));
    assert_eq!(same.to_vec(), flags(&out[3]));
    assert_eq!(matched.to_vec(), flags(&out[4]));
    assert_eq!(codes.to_vec(), ints(&out[5]));
    assert_eq!(upper.to_vec(), texts(&out[6]));
}

/// Strings in the runtime's byte encoding: a little-endian `u32` length, then
/// the bytes.
fn encode(words: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    for w in words {
        out.extend_from_slice(&(w.len() as u32).to_le_bytes());
        out.extend_from_slice(w.as_bytes());
    }
    out
}

#[test]
fn run_encoded_drives_string_models_through_bytes() {
    let mut model = generated::model("strings").expect("the strings model is generated");
    assert_eq!(Strings::INPUTS[0].elem, Elem::String);
    assert_eq!(Strings::OUTPUTS[1].shape, &[4, 3]);
    let words = encode(&["a", "b.c", "Straße.x.y", "x-y"]);
    let suffix = encode(&["!"]);
    let outputs = model.run_encoded(&[&words, &suffix]).unwrap();
    assert_eq!(outputs.len(), 7);
    assert_eq!(outputs[0], encode(&["a!", "b.c!", "Straße.x.y!", "x-y!"]));
    assert_eq!(
        outputs[2],
        [1i64, 2, 3, 1].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()
    );
    assert_eq!(outputs[3], [0, 0, 0, 0]);
    // Invalid UTF-8 is refused, not passed on.
    let bad = [1, 0, 0, 0, 0xff];
    let mut broken = encode(&["a", "b", "c"]);
    broken.extend_from_slice(&bad);
    assert!(model.run_encoded(&[&broken, &suffix]).is_err());
    // String outputs have no size known before the run: run_bytes needs
    // buffers of exactly the encoded length.
    let mut small = [0u8; 4];
    let mut rest: Vec<Vec<u8>> = outputs.iter().skip(1).cloned().collect();
    let mut bufs: Vec<&mut [u8]> = vec![&mut small[..]];
    bufs.extend(rest.iter_mut().map(|b| &mut b[..]));
    assert!(model.run_bytes(&[&words, &suffix], &mut bufs).is_err());
}

#[test]
fn the_macro_compiles_string_models_with_alloc() {
    let mut model = MacroStrings::new();
    let mut joined: [String; 4] = Default::default();
    let mut pieces: [String; 12] = Default::default();
    let mut upper: [String; 3] = Default::default();
    let (mut counts, mut codes) = ([0i64; 4], [0i64; 4]);
    let (mut same, mut matched) = ([false; 4], [false; 4]);
    model
        .run(
            &["a", "b.c", "Straße.x.y", "x-y"],
            &["a"],
            &mut joined,
            &mut pieces,
            &mut counts,
            &mut same,
            &mut matched,
            &mut codes,
            &mut upper,
        )
        .unwrap();
    assert_eq!(texts(&record()["outputs"][6]), upper.to_vec());
    assert_eq!(codes, [7, 5, -3, -3]);
}
