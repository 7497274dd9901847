//! Checks the text parser against the reference: each model printed by the
//! reference printer (`onnx.printer`) must parse into the same protobuf
//! message as the binary model it was printed from.
//!
//! Usage:
//! - `text_corpus TEXT_DIR NODE_DIR`: every `TEXT_DIR/<name>.onnxtxt` against
//!   `NODE_DIR/<name>/model.onnx` (the node suite and its text corpus);
//! - `text_corpus --models DIR`: every `DIR/*/model.onnxtxt` against the
//!   `model.onnx` beside it (the real models);
//! - add `--strict` to compare the messages as they are, without the
//!   canonical form below.
//!
//! Messages are compared as bytes (`encode_to_vec`), so presence and NaN
//! payloads count. Before that, both sides are put in the canonical form of
//! `onnx_codegen::canonical`, which removes what the text syntax cannot say
//! (typed fields vs `raw_data`, empty vs absent strings, documentation) and
//! nothing else. Even the reference parser matches only 209 of the 1884 node
//! models byte for byte without it; with `--strict`, ours matches the same 209.
//!
//! Prints `PASS <name>` or `FAIL <name>: <first difference>` per model and a last line
//! `text: N passed, M failed`; exits 1 if anything failed.

use onnx_codegen::canonical::canonicalize_model;
use onnx_codegen_proto::{Message, ModelProto};
use onnx_codegen_tests::first_difference;
use std::path::{Path, PathBuf};

fn check(text: &Path, binary: &Path, strict: bool) -> Result<(), String> {
    let src = std::fs::read_to_string(text).map_err(|e| format!("{}: {e}", text.display()))?;
    let bytes = std::fs::read(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut expected =
        ModelProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut ours = onnx_codegen::text::parse_model(&src, &text.display().to_string())
        .map_err(|e| e.to_string())?;
    if !strict {
        canonicalize_model(&mut ours);
        canonicalize_model(&mut expected);
    }
    if ours.encode_to_vec() == expected.encode_to_vec() {
        Ok(())
    } else {
        Err(first_difference(&ours, &expected))
    }
}

fn pairs(args: &[String]) -> Result<Vec<(String, PathBuf, PathBuf)>, String> {
    let mut pairs = Vec::new();
    match args {
        [flag, dir] if flag == "--models" => {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?;
            for entry in entries.flatten() {
                let path = entry.path();
                let text = path.join("model.onnxtxt");
                if text.is_file() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    pairs.push((name, text, path.join("model.onnx")));
                }
            }
        }
        [text_dir, node_dir] => {
            let entries = std::fs::read_dir(text_dir).map_err(|e| format!("{text_dir}: {e}"))?;
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "onnxtxt")
                    && let Some(name) = path.file_stem().and_then(|s| s.to_str())
                {
                    let binary = Path::new(node_dir).join(name).join("model.onnx");
                    pairs.push((name.to_owned(), path.clone(), binary));
                }
            }
        }
        _ => {
            return Err(
                "usage: text_corpus [--strict] TEXT_DIR NODE_DIR | text_corpus [--strict] --models DIR"
                    .to_owned(),
            );
        }
    }
    pairs.sort();
    Ok(pairs)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let strict = args.iter().any(|a| a == "--strict");
    args.retain(|a| a != "--strict");
    let pairs = pairs(&args).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let mut failed = 0;
    for (name, text, binary) in &pairs {
        match check(text, binary, strict) {
            Ok(()) => println!("PASS {name}"),
            Err(e) => {
                failed += 1;
                println!("FAIL {name}: {e}");
            }
        }
    }
    println!("text: {} passed, {failed} failed", pairs.len() - failed);
    if failed > 0 || pairs.is_empty() {
        std::process::exit(1);
    }
}
