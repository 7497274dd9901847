//! Decoding binary (protobuf) models.

use crate::diag::{Diagnostic, Result};
use crate::proto::{Message, ModelProto};
use bytes::Bytes;

/// Decodes a `ModelProto` from protobuf bytes. `raw_data` fields become slices
/// of `bytes` (no copy). `name` names the model in diagnostics.
///
/// The decoder rejects truncated data, lengths past the end, bad varints,
/// invalid UTF-8 in string fields and nesting deeper than 100 messages; each
/// becomes one error naming the field path the decoder was in.
pub fn decode_model(bytes: Bytes, name: &str) -> Result<ModelProto> {
    if bytes.is_empty() {
        return Err(Diagnostic::error("the model file is empty").in_file(name).into());
    }
    if looks_like_text(&bytes) {
        return Err(Diagnostic::error(
            "this looks like a model in the ONNX text syntax, not a binary protobuf",
        )
        .in_file(name)
        .note("name the file with the extension .onnxtxt to read it as text")
        .into());
    }
    ModelProto::decode(bytes).map_err(|e| {
        Diagnostic::error(format!("not a valid ONNX protobuf model: {}", decode_reason(&e)))
            .in_file(name)
            .into()
    })
}

/// The text syntax starts with the model header `<`, after optional comments.
fn looks_like_text(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    loop {
        let start = rest.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(rest.len());
        rest = &rest[start..];
        match rest.first() {
            Some(b'#') => {
                let end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
                rest = &rest[end..];
            }
            Some(b'<') => return std::str::from_utf8(&rest[..rest.len().min(64)]).is_ok(),
            _ => return false,
        }
    }
}

/// prost's messages say "failed to decode Protobuf message: A.b: C.d: reason";
/// keep the field path and the reason, in the order a reader wants.
fn decode_reason(e: &prost::DecodeError) -> String {
    let text = e.to_string();
    let text = text.strip_prefix("failed to decode Protobuf message: ").unwrap_or(&text);
    match text.rfind(": ") {
        Some(i) => format!("{} (in {})", &text[i + 2..], &text[..i]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{GraphProto, NodeProto, TensorProto};

    fn sample() -> ModelProto {
        ModelProto {
            ir_version: Some(8),
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![NodeProto { op_type: Some("Relu".into()), ..Default::default() }],
                initializer: vec![TensorProto {
                    name: Some("w".into()),
                    data_type: Some(1),
                    dims: vec![2],
                    raw_data: Some(Bytes::from_static(&[0, 0, 128, 63, 0, 0, 0, 64])),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn raw_data_is_a_slice_of_the_input() {
        let bytes = Bytes::from(sample().encode_to_vec());
        let range = bytes.as_ptr_range();
        let model = decode_model(bytes.clone(), "m.onnx").unwrap();
        let raw = model.graph.unwrap().initializer[0].raw_data.clone().unwrap();
        assert!(range.contains(&raw.as_ptr()), "raw_data was copied");
    }

    #[test]
    fn truncated_and_garbage_input_is_refused() {
        let bytes = sample().encode_to_vec();
        for cut in [1, bytes.len() / 2, bytes.len() - 1] {
            let err = decode_model(Bytes::copy_from_slice(&bytes[..cut]), "m.onnx").unwrap_err();
            let text = err.to_string();
            assert!(text.starts_with("error: not a valid ONNX protobuf model: "), "{text}");
            assert!(text.ends_with("--> m.onnx"), "{text}");
        }
        let err = decode_model(Bytes::from_static(&[0xff; 16]), "g.onnx").unwrap_err();
        assert!(err.to_string().contains("not a valid ONNX protobuf model"));
    }

    #[test]
    fn invalid_utf8_names_the_field() {
        // Field 7 (graph), length 4: field 2 (name), length 2, bytes FF FE.
        let err = decode_model(Bytes::from_static(&[0x3a, 4, 0x12, 2, 0xff, 0xfe]), "u.onnx")
            .unwrap_err()
            .to_string();
        assert!(err.contains("UTF-8"), "{err}");
        assert!(err.contains("GraphProto.name"), "{err}");
    }

    #[test]
    fn empty_and_text_files_get_their_own_message() {
        assert_eq!(
            decode_model(Bytes::new(), "e.onnx").unwrap_err().to_string(),
            "error: the model file is empty\n  --> e.onnx"
        );
        let err = decode_model(Bytes::from_static(b"# c\n<ir_version: 8>"), "t.onnx").unwrap_err();
        assert!(err.to_string().contains("ONNX text syntax"));
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        // ModelProto.graph -> (GraphProto.node -> NodeProto.attribute -> AttributeProto.g)
        // 5000 times, built inside out as length-delimited fields.
        fn wrap(field: u8, inner: Vec<u8>) -> Vec<u8> {
            let mut out = vec![(field << 3) | 2];
            let mut len = inner.len();
            while len >= 0x80 {
                out.push((len as u8 & 0x7f) | 0x80);
                len >>= 7;
            }
            out.push(len as u8);
            out.extend(inner);
            out
        }
        let mut graph = Vec::new();
        for _ in 0..5000 {
            graph = wrap(1, wrap(5, wrap(6, graph)));
        }
        let err = decode_model(Bytes::from(wrap(7, graph)), "deep.onnx").unwrap_err().to_string();
        assert!(err.contains("recursion limit"), "{err}");
    }
}
