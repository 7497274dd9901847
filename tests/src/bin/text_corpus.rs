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
//! payloads count. Before that, both sides are put in a canonical form that
//! removes what the text syntax cannot say, and nothing else:
//! - tensor data written as values is stored the way the reference parser
//!   stores it (`float_data`, `int32_data`, ...), while the binary models use
//!   `raw_data`: typed fields are turned into the equivalent `raw_data`;
//! - an empty node domain, opset domain or tensor name is present in the
//!   parse (the reference parser sets them) and absent in most binaries: an
//!   empty value counts as absent;
//! - the syntax has no place for `doc_string` and `metadata_props` of graphs,
//!   nodes, values, attributes and tensors: they are cleared.
//!
//! Prints `FAIL <name>: <first difference>` per mismatch and a last line
//! `text: N passed, M failed`; exits 1 if anything failed.

use onnx_codegen_proto::{
    AttributeProto, FunctionProto, GraphProto, Message, ModelProto, NodeProto, OperatorSetIdProto,
    SparseTensorProto, TensorProto, ValueInfoProto, tensor_proto::DataLocation,
    tensor_proto::DataType,
};
use std::path::{Path, PathBuf};

fn clear_empty(field: &mut Option<String>) {
    if field.as_deref() == Some("") {
        *field = None;
    }
}

/// The little-endian bytes of the typed data fields, as `raw_data` would hold them.
/// `None` for types whose typed form we do not convert.
fn typed_to_raw(t: &TensorProto) -> Option<Vec<u8>> {
    use DataType as D;
    let ty = DataType::try_from(t.data_type()).ok()?;
    let mut raw = Vec::new();
    match ty {
        D::Float | D::Complex64 => t.float_data.iter().for_each(|v| raw.extend(v.to_le_bytes())),
        D::Double | D::Complex128 => {
            t.double_data.iter().for_each(|v| raw.extend(v.to_le_bytes()));
        }
        D::Int64 => t.int64_data.iter().for_each(|v| raw.extend(v.to_le_bytes())),
        D::Uint64 => t.uint64_data.iter().for_each(|v| raw.extend(v.to_le_bytes())),
        D::Uint32 => t.uint64_data.iter().for_each(|&v| raw.extend((v as u32).to_le_bytes())),
        D::Int32 => t.int32_data.iter().for_each(|v| raw.extend(v.to_le_bytes())),
        D::Int16 | D::Uint16 | D::Float16 | D::Bfloat16 => {
            t.int32_data.iter().for_each(|&v| raw.extend((v as u16).to_le_bytes()));
        }
        D::Int8
        | D::Uint8
        | D::Bool
        | D::Float8e4m3fn
        | D::Float8e4m3fnuz
        | D::Float8e5m2
        | D::Float8e5m2fnuz
        | D::Float8e8m0 => t.int32_data.iter().for_each(|&v| raw.push(v as u8)),
        D::Int4 | D::Uint4 | D::Float4e2m1 => {
            for pair in t.int32_data.chunks(2) {
                let lo = pair.first().map_or(0, |&v| v as u8 & 0x0f);
                let hi = pair.get(1).map_or(0, |&v| v as u8 & 0x0f);
                raw.push(lo | (hi << 4));
            }
        }
        D::Int2 | D::Uint2 => {
            for quad in t.int32_data.chunks(4) {
                let mut byte = 0u8;
                for (k, &v) in quad.iter().enumerate() {
                    byte |= (v as u8 & 0x03) << (2 * k);
                }
                raw.push(byte);
            }
        }
        _ => return None,
    }
    Some(raw)
}

fn canon_tensor(t: &mut TensorProto) {
    clear_empty(&mut t.name);
    t.doc_string = None;
    t.metadata_props.clear();
    let external = t.data_location == Some(DataLocation::External as i32);
    if t.raw_data.is_none()
        && !external
        && t.data_type() != DataType::String as i32
        && let Some(raw) = typed_to_raw(t)
    {
        t.float_data.clear();
        t.double_data.clear();
        t.int32_data.clear();
        t.int64_data.clear();
        t.uint64_data.clear();
        t.raw_data = Some(raw.into());
    }
}

fn canon_sparse(s: &mut SparseTensorProto) {
    s.values.iter_mut().chain(s.indices.iter_mut()).for_each(canon_tensor);
}

fn canon_value_info(v: &mut ValueInfoProto) {
    v.doc_string = None;
    v.metadata_props.clear();
}

fn canon_opsets(opsets: &mut [OperatorSetIdProto]) {
    opsets.iter_mut().for_each(|o| clear_empty(&mut o.domain));
}

fn canon_attribute(a: &mut AttributeProto) {
    a.doc_string = None;
    a.t.iter_mut().for_each(|t| canon_tensor(t));
    a.tensors.iter_mut().for_each(canon_tensor);
    a.g.iter_mut().for_each(|g| canon_graph(g));
    a.graphs.iter_mut().for_each(canon_graph);
    a.sparse_tensor.iter_mut().for_each(|s| canon_sparse(s));
    a.sparse_tensors.iter_mut().for_each(canon_sparse);
}

fn canon_node(n: &mut NodeProto) {
    clear_empty(&mut n.domain);
    n.doc_string = None;
    n.metadata_props.clear();
    n.attribute.iter_mut().for_each(canon_attribute);
}

fn canon_graph(g: &mut GraphProto) {
    g.doc_string = None;
    g.metadata_props.clear();
    g.initializer.iter_mut().for_each(canon_tensor);
    g.sparse_initializer.iter_mut().for_each(canon_sparse);
    g.input.iter_mut().chain(&mut g.output).chain(&mut g.value_info).for_each(canon_value_info);
    g.node.iter_mut().for_each(canon_node);
}

fn canon_function(f: &mut FunctionProto) {
    f.metadata_props.clear();
    canon_opsets(&mut f.opset_import);
    f.value_info.iter_mut().for_each(canon_value_info);
    f.attribute_proto.iter_mut().for_each(canon_attribute);
    f.node.iter_mut().for_each(canon_node);
}

fn canonicalize(m: &mut ModelProto) {
    canon_opsets(&mut m.opset_import);
    m.graph.iter_mut().for_each(canon_graph);
    m.functions.iter_mut().for_each(canon_function);
}

/// The first differing region of the two messages' Debug renderings.
fn first_difference(ours: &ModelProto, reference: &ModelProto) -> String {
    let a = format!("{ours:#?}");
    let b = format!("{reference:#?}");
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let Some(i) = (0..la.len().max(lb.len())).find(|&i| la.get(i) != lb.get(i)) else {
        return "same fields, different encoding".to_owned();
    };
    let context = |lines: &[&str]| -> String {
        let from = i.saturating_sub(3);
        let to = (i + 4).min(lines.len());
        lines.get(from..to).unwrap_or_default().join("\n        ")
    };
    format!(
        "at line {} of the Debug rendering\n  parsed:\n        {}\n  expected:\n        {}",
        i + 1,
        context(&la),
        context(&lb)
    )
}

fn check(text: &Path, binary: &Path, strict: bool) -> Result<(), String> {
    let src = std::fs::read_to_string(text).map_err(|e| format!("{}: {e}", text.display()))?;
    let bytes = std::fs::read(binary).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut expected =
        ModelProto::decode(bytes.as_slice()).map_err(|e| format!("{}: {e}", binary.display()))?;
    let mut ours = onnx_codegen::text::parse_model(&src, &text.display().to_string())
        .map_err(|e| e.to_string())?;
    if !strict {
        canonicalize(&mut ours);
        canonicalize(&mut expected);
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
        if let Err(e) = check(text, binary, strict) {
            failed += 1;
            println!("FAIL {name}: {e}");
        }
    }
    println!("text: {} passed, {failed} failed", pairs.len() - failed);
    if failed > 0 || pairs.is_empty() {
        std::process::exit(1);
    }
}
