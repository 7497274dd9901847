//! The command line on good and hostile inputs: exit codes, messages, and no
//! partial output files.

use onnx_codegen::proto::tensor_proto::DataType;
use onnx_codegen::proto::{
    AttributeProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    tensor_shape_proto, type_proto,
};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(args: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_onnx-codegen")).args(args).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A scratch folder removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("onnx-codegen-cli-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
    fn file(&self, name: &str, bytes: &[u8]) -> String {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    }
    fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Protobuf field `field` holding `inner` as a length-delimited value.
fn field(field: u8, inner: &[u8]) -> Vec<u8> {
    let mut out = vec![(field << 3) | 2];
    let mut len = inner.len();
    while len >= 0x80 {
        out.push((len as u8 & 0x7f) | 0x80);
        len >>= 7;
    }
    out.push(len as u8);
    out.extend_from_slice(inner);
    out
}

fn assert_refused(r: &Run, file: &str, message: &str) {
    assert_eq!(r.code, Some(1), "stderr: {}", r.stderr);
    assert!(r.stderr.contains(message), "expected {message:?} in:\n{}", r.stderr);
    assert!(r.stderr.contains(&format!("--> {file}")), "file not named in:\n{}", r.stderr);
}

#[test]
fn hostile_protobuf_is_refused_by_check_and_convert() {
    let s = Scratch::new("proto");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("empty.onnx", vec![], "the model file is empty"),
        ("garbage.onnx", vec![0xff; 64], "not a valid ONNX protobuf model"),
        // Graph field claiming 100 bytes, with 2 present.
        ("past_end.onnx", vec![0x3a, 100, 0x12, 0], "not a valid ONNX protobuf model"),
        // A varint of 11 continuation bytes.
        (
            "varint.onnx",
            vec![0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01],
            "invalid varint",
        ),
        ("utf8.onnx", field(7, &field(2, &[0xff, 0xfe])), "UTF-8"),
        (
            "deep.onnx",
            {
                let mut g = Vec::new();
                for _ in 0..5000 {
                    g = field(1, &field(5, &field(6, &g)));
                }
                field(7, &g)
            },
            "recursion limit",
        ),
    ];
    for (name, bytes, message) in &cases {
        let path = s.file(name, bytes);
        assert_refused(&run(&["check", &path]), &path, message);
        let out = s.path(&format!("{name}.out.onnx"));
        assert_refused(&run(&["convert", &path, &out]), &path, message);
        assert!(!Path::new(&out).exists(), "convert left an output file for {name}");
    }
}

#[test]
fn external_data_outside_the_folder_is_refused() {
    let s = Scratch::new("ext");
    std::fs::create_dir_all(s.0.join("m")).unwrap();
    s.file("secret.bin", &[0u8; 8]);
    // An initializer: name "w", data_type 1, dims [2], external location "../secret.bin".
    let mut tensor = vec![0x08, 2, 0x10, 1];
    tensor.extend(field(8, b"w"));
    let mut entry = field(1, b"location");
    entry.extend(field(2, b"../secret.bin"));
    tensor.extend(field(13, &entry));
    tensor.extend([0x70, 1]);
    let model = field(7, &field(5, &tensor));
    let path = s.file("m/model.onnx", &model);
    let r = run(&["check", &path]);
    assert_refused(&r, &path, "external data location '../secret.bin' contains '..'");
}

#[test]
fn missing_files_and_bad_usage_have_their_exit_codes() {
    let r = run(&["check", "/no/such/model.onnx"]);
    assert_refused(&r, "/no/such/model.onnx", "cannot read the model file: no such file");
    assert_eq!(run(&["frobnicate"]).code, Some(2));
    assert_eq!(run(&["check"]).code, Some(2));
    assert!(run(&["--help"]).stdout.contains("convert"));
}

/// Nesting far past the limits (5000 subgraphs, 100 000 type levels) is an
/// error, not a stack overflow, in `check` and `convert`.
#[test]
fn deep_nesting_in_text_is_refused() {
    let s = Scratch::new("deep");
    let head = "<ir_version: 8, opset_import: [\"\" : 17]>\n";
    let mut branch = String::from("y = Identity (x)");
    for i in 0..5000 {
        branch = format!(
            "y = If (c) <then_branch: graph = t{i} () => (float[2] y) {{ {branch} }}, \
             else_branch: graph = e{i} () => (float[2] y) {{ y = Identity (x) }}>"
        );
    }
    let subgraphs = format!("{head}g (bool c, float[2] x) => (float[2] y) {{\n  {branch}\n}}\n");
    let types = format!(
        "{head}g ({}float{} x) => (float[2] y) {{\n  y = Identity (x)\n}}\n",
        "seq(".repeat(100_000),
        ")".repeat(100_000)
    );
    for (name, src) in [("subgraphs.onnxtxt", subgraphs), ("types.onnxtxt", types)] {
        let path = s.file(name, src.as_bytes());
        assert_refused(&run(&["check", &path]), &path, "too deep");
        let out = s.path("out.onnx");
        assert_refused(&run(&["convert", &path, &out]), &path, "too deep");
        assert!(!Path::new(&out).exists());
    }
}

/// Generation refuses models over the configured limits, quoting the figure
/// and the limit, and writes nothing.
#[test]
fn generate_enforces_arena_and_weight_limits() {
    let s = Scratch::new("limits");
    let model = s.file(
        "m.onnxtxt",
        b"<ir_version: 8, opset_import: [\"\" : 17]>\n\
          g (float[64] x) => (float[64] y) <float[1] w = {1}> { a = Add (x, w) b = Neg (a) y = Mul (a, b) }\n",
    );
    let out = s.path("m.rs");
    let r = run(&[
        "generate",
        &model,
        "-o",
        &out,
        "--max-arena-bytes",
        "100",
        "--max-weight-bytes",
        "2",
    ]);
    // `a` and `b` (256 bytes each) are alive together at the Mul.
    assert_refused(&r, &model, "the arena would take 512 bytes, over the limit of 100 bytes");
    assert_refused(&r, &model, "the weights take 4 bytes, over the limit of 2 bytes");
    assert!(!Path::new(&out).exists());
}

// ---------------------------------------------------------------------------
// The hostile corpus through every verb.

/// One hostile model: where it is, and what every refusal must say.
struct Hostile {
    name: String,
    /// The model file as given to `check`, `inspect` and `generate`.
    model: PathBuf,
    /// A test directory (`model.onnx` binary) for `test`, if the model can
    /// be written in binary at all.
    test_dir: Option<PathBuf>,
    expect: Vec<String>,
}

/// A tensor value info with a static shape.
fn value_info(name: &str, elem: DataType, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem as i32),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn model_of(graph: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto { domain: Some(String::new()), version: Some(17) }],
        graph: Some(graph),
        ..Default::default()
    }
}

/// `y = Add(x, w)` on float[2], with the initializer `w` as given.
fn add_weight(w: TensorProto) -> ModelProto {
    model_of(GraphProto {
        name: Some("g".into()),
        node: vec![node("Add", &["x", "w"], &["y"])],
        input: vec![value_info("x", DataType::Float, &[2])],
        output: vec![value_info("y", DataType::Float, &[2])],
        initializer: vec![w],
        ..Default::default()
    })
}

fn weight(dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some("w".into()),
        dims: dims.to_vec(),
        data_type: Some(DataType::Float as i32),
        ..Default::default()
    }
}

fn external(location: &str, extra: &[(&str, &str)]) -> TensorProto {
    let mut w = weight(&[2]);
    w.data_location = Some(1);
    w.external_data.push(StringStringEntryProto {
        key: Some("location".into()),
        value: Some(location.into()),
    });
    for (k, v) in extra {
        w.external_data
            .push(StringStringEntryProto { key: Some(k.to_string()), value: Some(v.to_string()) });
    }
    w
}

/// The binary cases, each written as `<name>/model.onnx` under `root`.
fn binary_cases(root: &Path) -> Vec<Hostile> {
    let mut cases: Vec<(&str, Vec<u8>, Vec<&str>)> = Vec::new();
    let enc = |m: &ModelProto| m.encode_to_vec();
    cases.push((
        "init_terabytes_no_data",
        enc(&add_weight(weight(&[1_000_000, 1_000_000, 1_000_000]))),
        vec!["tensor 'w' of type float and shape [1000000,1000000,1000000] is too large"],
    ));
    cases.push((
        "init_dims_overflow",
        enc(&add_weight(weight(&[1 << 62, 1 << 62, 4]))),
        vec!["tensor 'w' has shape [4611686018427387904,4611686018427387904,4] whose element count overflows"],
    ));
    let raw = |n: usize| {
        let mut w = weight(&[2]);
        w.raw_data = Some(vec![0u8; n].into());
        w
    };
    let raw_msg =
        |n| format!("tensor 'w' of type float and shape [2] needs 8 bytes of data, but has {n}");
    let (short_msg, long_msg) = (raw_msg(4), raw_msg(12));
    cases.push(("raw_data_short", enc(&add_weight(raw(4))), vec![&short_msg]));
    cases.push(("raw_data_long", enc(&add_weight(raw(12))), vec![&long_msg]));
    let mut short = weight(&[3]);
    short.float_data = vec![1.0];
    cases.push((
        "float_data_short",
        enc(&add_weight(short)),
        vec!["tensor 'w' of type float and shape [3] needs 3 entries in float_data, but has 1"],
    ));
    cases.push((
        "external_missing",
        enc(&add_weight(external("nothere.bin", &[]))),
        vec!["external data file 'nothere.bin': no such file"],
    ));
    cases.push((
        "external_offset_past_end",
        enc(&add_weight(external("w.bin", &[("offset", "100")]))),
        vec!["external data offset 100 is past the end of 'w.bin' (8 bytes)"],
    ));
    cases.push((
        "external_length_past_end",
        enc(&add_weight(external("w.bin", &[("offset", "4"), ("length", "8")]))),
        vec!["goes past the end of 'w.bin'"],
    ));
    cases.push((
        "external_absolute",
        enc(&add_weight(external("/etc/passwd", &[]))),
        vec!["external data location '/etc/passwd' is absolute"],
    ));
    cases.push((
        "external_symlink",
        enc(&add_weight(external("link.bin", &[]))),
        vec!["resolves outside the model's folder"],
    ));
    // A node name that is not UTF-8: encode a placeholder, then break it.
    let mut m = add_weight({
        let mut w = weight(&[2]);
        w.float_data = vec![1.0, 2.0];
        w
    });
    if let Some(g) = m.graph.as_mut() {
        g.node[0].name = Some("@@BADNAME@@".into());
    }
    let mut bytes = enc(&m);
    if let Some(at) = bytes.windows(11).position(|w| w == b"@@BADNAME@@") {
        bytes[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    }
    cases.push(("name_not_utf8", bytes, vec!["UTF-8"]));
    let mut m = add_weight({
        let mut w = weight(&[2]);
        w.float_data = vec![1.0, 2.0];
        w
    });
    if let Some(g) = m.graph.as_mut() {
        g.node[0].attribute.push(AttributeProto {
            name: Some("axis".into()),
            r#type: Some(2),
            i: Some(1),
            ..Default::default()
        });
    }
    cases.push((
        "unknown_attribute",
        enc(&m),
        vec!["node '#0' has attribute 'axis', which Add (version 14) does not define"],
    ));

    std::fs::write(root.join("secret.bin"), [7u8; 8]).unwrap();
    cases
        .into_iter()
        .map(|(name, bytes, expect)| {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("w.bin"), [0u8; 8]).unwrap();
            #[cfg(unix)]
            std::os::unix::fs::symlink(root.join("secret.bin"), dir.join("link.bin")).unwrap();
            let model = dir.join("model.onnx");
            std::fs::write(&model, bytes).unwrap();
            Hostile {
                name: name.into(),
                model,
                test_dir: Some(dir),
                expect: expect.into_iter().map(String::from).collect(),
            }
        })
        .collect()
}

/// The text cases in `onnx-codegen/tests/hostile/` (shared with the macro's
/// tests), each converted to a binary test directory when it parses at all.
fn text_cases(root: &Path) -> Vec<Hostile> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnxtxt"))
        .collect();
    files.sort();
    assert!(files.len() >= 20, "the hostile corpus is missing");
    files
        .into_iter()
        .map(|file| {
            let src = std::fs::read_to_string(&file).unwrap();
            let expect: Vec<String> = src
                .lines()
                .filter_map(|l| l.strip_prefix("# expect: "))
                .map(String::from)
                .collect();
            assert!(!expect.is_empty(), "{} has no '# expect:' line", file.display());
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            let test_dir = root.join(format!("text_{name}"));
            std::fs::create_dir_all(&test_dir).unwrap();
            let binary = test_dir.join("model.onnx");
            let converted = run(&["convert", &file.to_string_lossy(), &binary.to_string_lossy()]);
            Hostile {
                name,
                model: file,
                test_dir: (converted.code == Some(0)).then_some(test_dir),
                expect,
            }
        })
        .collect()
}

/// Files (recursively) under `dir` whose path contains `needle`.
fn files_naming(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if e.file_type().is_ok_and(|t| t.is_dir()) && !p.ends_with("target") {
                pending.push(p.clone());
            }
            if p.to_string_lossy().contains(needle) {
                found.push(p);
            }
        }
    }
    found
}

/// Every hostile model, text and binary, is refused by `check`, `inspect`,
/// `generate` and `test` with exit code 1, its messages and its file named,
/// and no output file.
#[test]
fn hostile_models_are_refused_by_every_verb() {
    let s = Scratch::new("all-verbs");
    let mut cases = text_cases(&s.0);
    cases.extend(binary_cases(&s.0));
    for case in &cases {
        let shown = case.model.to_string_lossy().into_owned();
        let out = s.path(&format!("{}.rs", case.name));
        for args in [
            vec!["check", &shown],
            vec!["inspect", &shown],
            vec!["inspect", "--json", &shown],
            vec!["generate", &shown, "-o", &out],
        ] {
            let r = run(&args);
            for message in &case.expect {
                assert!(
                    r.code == Some(1) && r.stderr.contains(message.as_str()),
                    "{} on {}: expected exit 1 and {message:?}, got {:?}:\n{}",
                    args[0],
                    case.name,
                    r.code,
                    r.stderr
                );
            }
            assert!(r.stderr.contains(&format!("--> {shown}")), "file not named:\n{}", r.stderr);
        }
        assert!(!Path::new(&out).exists(), "generate left {out}");
        assert!(!Path::new(&format!("{out}.weights.bin")).exists());
    }
    // `test` on every case at once (one cargo run at most).
    let work = s.0.join("work");
    let dirs: Vec<String> = cases
        .iter()
        .filter_map(|c| c.test_dir.as_ref())
        .map(|d| d.to_string_lossy().into())
        .collect();
    assert!(dirs.len() >= 25, "too few cases reach `test`: {}", dirs.len());
    let mut args = vec!["test", "--work-dir", work.to_str().unwrap()];
    args.extend(dirs.iter().map(String::as_str));
    let r = run(&args);
    assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.ends_with(&format!("0 passed, {} failed\n", dirs.len())), "{}", r.stdout);
    for case in cases.iter().filter(|c| c.test_dir.is_some()) {
        let dir_name = case.test_dir.as_ref().unwrap().file_name().unwrap().to_string_lossy();
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("FAIL {dir_name}:")))
            .unwrap_or_else(|| panic!("no FAIL line for {dir_name}:\n{}", r.stdout));
        assert!(
            case.expect.iter().any(|m| line.contains(m.as_str())),
            "{line:?} does not say any of {:?}",
            case.expect
        );
        assert!(files_naming(&work, &dir_name).is_empty(), "test wrote files for {dir_name}");
    }
}

/// A million nodes: refused at the node limit within a few seconds, by
/// every verb.
#[test]
fn a_million_nodes_are_refused_quickly() {
    let s = Scratch::new("million");
    let chain = |n: usize| {
        let mut src = format!(
            "<ir_version: 8, opset_import: [\"\" : 17]>\ng (float[2] v0) => (float[2] v{n}) {{\n"
        );
        for i in 1..=n {
            src.push_str(&format!("v{i} = Relu (v{})\n", i - 1));
        }
        src.push_str("}\n");
        src
    };
    let path = s.file("million.onnxtxt", chain(1_000_000).as_bytes());
    let tenth = s.file("tenth.onnxtxt", chain(100_000).as_bytes());
    let out = s.path("million.rs");
    for args in [vec!["check", &path], vec!["inspect", &path], vec!["generate", &path, "-o", &out]]
    {
        let start = Instant::now();
        let r = run(&args);
        assert_refused(&r, &path, "the model has 1000000 nodes, over the limit of 100000 nodes");
        // About 1.5 s of CPU in a debug build; the bound leaves room for a
        // loaded machine.
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} took {:?}",
            args[0],
            start.elapsed()
        );
    }
    assert!(!Path::new(&out).exists());
    // With the limit raised, the front end takes the model in time linear in
    // its size: ten times the nodes of the tenth, not a hundred times (what a
    // quadratic step would take). A ratio, not a wall-clock bound, so a
    // loaded machine (about 24 s of CPU in a debug build) does not fail it.
    let timed = |p: &str| {
        let start = Instant::now();
        let r = run(&["check", "--max-nodes", "2000000", p]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        start.elapsed()
    };
    let (small, large) = (timed(&tenth), timed(&path));
    assert!(
        large < small * 30 + Duration::from_secs(5),
        "check took {large:?} on 1000000 nodes against {small:?} on 100000"
    );
}

/// The node and nesting limits are configurable and quote figure and limit.
#[test]
fn node_and_depth_limits_are_configurable() {
    let s = Scratch::new("node-limits");
    let model = s.file(
        "m.onnxtxt",
        b"<ir_version: 8, opset_import: [\"\" : 17]>\n\
          g (bool c, float[2] x) => (float[2] y) {\n\
            y = If <then_branch: graph = t () => (float[2] z) {\n\
              z = If <then_branch: graph = t2 () => (float[2] u) { u = Neg (x) },\n\
                      else_branch: graph = e2 () => (float[2] u) { u = Relu (x) }> (c)\n\
            }, else_branch: graph = e () => (float[2] z) { z = Abs (x) }> (c)\n\
          }\n",
    );
    assert_eq!(run(&["check", &model]).code, Some(0));
    let r = run(&["check", "--max-nodes", "4", "--max-depth", "1", &model]);
    assert_refused(&r, &model, "the model has 5 nodes, over the limit of 4 nodes");
    assert_refused(&r, &model, "subgraphs are nested 2 levels deep, over the limit of 1 levels");
    let r = run(&["check", "--max-depth", "1000", &model]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("over the hard limit"), "{}", r.stderr);
}
