//! The command line on good and hostile inputs: exit codes, messages, and no
//! partial output files.

use std::path::{Path, PathBuf};
use std::process::Command;

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

/// Every file in `tests/hostile/` is refused by `check` with exit 1 and a
/// message containing each of its `# expect:` lines.
#[test]
fn hostile_text_models_are_refused_with_their_messages() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "onnxtxt"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "the hostile corpus is missing");
    for file in files {
        let src = std::fs::read_to_string(&file).unwrap();
        let expected: Vec<&str> =
            src.lines().filter_map(|l| l.strip_prefix("# expect: ")).collect();
        assert!(!expected.is_empty(), "{} has no '# expect:' line", file.display());
        let shown = file.to_string_lossy().into_owned();
        let r = run(&["check", &shown]);
        for message in expected {
            assert_refused(&r, &shown, message);
        }
    }
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
