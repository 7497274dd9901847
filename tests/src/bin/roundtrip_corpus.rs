//! Round trip through the textual syntax: every `model.onnx` under the given
//! directories is decoded, printed with `onnx_codegen::text::print_model`,
//! parsed back with `onnx_codegen::text::parse_model`, and both models are
//! brought to canonical form (`onnx_codegen::canonical`); their encodings must
//! be the same bytes.
//!
//! Usage: `roundtrip_corpus [OPTIONS] DIR...` where each DIR holds test
//! directories (each with a `model.onnx`). Options:
//!
//! * `--emit OUT`: only print; write `OUT/<test>.onnxtxt` for each model.
//! * `--reparsed OUT`: instead of our parser, take the model parsed back by
//!   another parser from `OUT/<test>.onnx` (or its error from
//!   `OUT/<test>.error`). `tools/check_printer.py` uses `--emit`, parses
//!   with the reference parser, then runs this mode.
//! * `--reference-text TEXTDIR`: also count how many printed models equal
//!   the reference printer's output, `TEXTDIR/<test>.onnxtxt` or else the
//!   test's own `model.onnxtxt`, when whitespace is ignored; informational.
//!
//! Last line: `roundtrip: N passed, M failed` (or `printed: N` with `--emit`).

use onnx_codegen::canonical::canonicalize_model;
use onnx_codegen::text::{parse_model, print_model};
use onnx_codegen_proto::{Message, ModelProto};
use std::path::{Path, PathBuf};

enum Mode {
    Ours,
    Emit(PathBuf),
    Reparsed(PathBuf),
}

fn test_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn check(
    dir: &Path,
    mode: &Mode,
    reference_text: Option<&Path>,
    text_counts: &mut (usize, usize),
) -> Result<(), String> {
    let name = test_name(dir);
    let bytes = std::fs::read(dir.join("model.onnx"))
        .map_err(|e| format!("cannot read model.onnx: {e}"))?;
    let mut original = ModelProto::decode(bytes.as_slice())
        .map_err(|e| format!("cannot decode model.onnx: {e}"))?;
    let text = print_model(&original);
    if let Some(ref_dir) = reference_text {
        let reference = std::fs::read_to_string(ref_dir.join(format!("{name}.onnxtxt")))
            .or_else(|_| std::fs::read_to_string(dir.join("model.onnxtxt")));
        if let Ok(reference) = reference {
            let squash = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
            text_counts.0 += usize::from(squash(&reference) == squash(&text));
            text_counts.1 += 1;
        }
    }
    let mut reparsed = match mode {
        Mode::Emit(out) => {
            return std::fs::write(out.join(format!("{name}.onnxtxt")), &text)
                .map_err(|e| format!("cannot write the printed text: {e}"));
        }
        Mode::Ours => parse_model(&text, &format!("{name}.onnxtxt"))
            .map_err(|e| format!("our parser rejects the printed text: {e}"))?,
        Mode::Reparsed(out) => match std::fs::read(out.join(format!("{name}.onnx"))) {
            Ok(b) => ModelProto::decode(b.as_slice())
                .map_err(|e| format!("cannot decode the reparsed model: {e}"))?,
            Err(_) => {
                let why = std::fs::read_to_string(out.join(format!("{name}.error")))
                    .unwrap_or_else(|_| "no reparsed model and no error file".into());
                return Err(format!("the other parser rejects the printed text: {}", why.trim()));
            }
        },
    };
    canonicalize_model(&mut original);
    canonicalize_model(&mut reparsed);
    if original.encode_to_vec() == reparsed.encode_to_vec() {
        Ok(())
    } else {
        Err(format!(
            "the reparsed model differs: {}",
            onnx_codegen_tests::first_difference(&reparsed, &original)
        ))
    }
}

fn main() {
    let mut mode = Mode::Ours;
    let mut reference_text = None;
    let mut roots = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next().map(PathBuf::from).unwrap_or_else(|| {
                eprintln!("{flag} needs a directory");
                std::process::exit(2);
            })
        };
        match arg.as_str() {
            "--emit" => mode = Mode::Emit(value("--emit")),
            "--reparsed" => mode = Mode::Reparsed(value("--reparsed")),
            "--reference-text" => reference_text = Some(value("--reference-text")),
            _ => roots.push(PathBuf::from(arg)),
        }
    }
    if let Mode::Emit(out) = &mode
        && let Err(e) = std::fs::create_dir_all(out)
    {
        eprintln!("{}: {e}", out.display());
        std::process::exit(2);
    }
    let (mut passed, mut failed, mut text_counts) = (0usize, 0usize, (0usize, 0usize));
    for root in &roots {
        let tests = onnx_codegen_tests::node_test_dirs(root).unwrap_or_else(|e| {
            eprintln!("{}: {e}", root.display());
            std::process::exit(2);
        });
        for dir in tests {
            match check(&dir, &mode, reference_text.as_deref(), &mut text_counts) {
                Ok(()) => {
                    passed += 1;
                    if !matches!(mode, Mode::Emit(_)) {
                        println!("PASS {}", test_name(&dir));
                    }
                }
                Err(e) => {
                    failed += 1;
                    println!("FAIL {}: {e}", test_name(&dir));
                }
            }
        }
    }
    if reference_text.is_some() {
        let (same, with_reference) = text_counts;
        println!(
            "same text as the reference printer (whitespace aside): {same} of {with_reference}"
        );
    }
    if matches!(mode, Mode::Emit(_)) {
        println!("printed: {passed}");
    } else {
        println!("roundtrip: {passed} passed, {failed} failed");
    }
    if failed > 0 || passed == 0 {
        std::process::exit(1);
    }
}
