//! Loading models: binary protobuf (with external tensor data) or the ONNX
//! textual syntax, into `ModelProto`; and saving them back.
//!
//! The format is chosen by the file's extension (`.onnx` binary; `.onnxtxt`,
//! `.txt` text); other extensions are sniffed from the content.
//!
//! A binary model is read into memory once; `raw_data` fields are slices of
//! that buffer, so weights are not copied while the model is decoded. External
//! data is read straight into its tensor, once.

mod binary;
mod external;

use crate::diag::{Diagnostic, Result};
use crate::proto::ModelProto;
use bytes::Bytes;
use std::path::Path;

pub use binary::decode_model;
pub use external::resolve_external_data;

/// The two ways a model can be written down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Protobuf (`.onnx`).
    Binary,
    /// The ONNX textual syntax (`.onnxtxt`, `.txt`).
    Text,
}

impl Format {
    /// The format a path's extension names, if it names one.
    pub fn from_extension(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "onnx" | "pb" => Some(Format::Binary),
            "onnxtxt" | "onnxtext" | "txt" => Some(Format::Text),
            _ => None,
        }
    }

    /// Guesses the format from the first bytes: the textual syntax starts with
    /// `<`, `#` or a name; a protobuf model starts with a field tag.
    pub fn sniff(bytes: &[u8]) -> Format {
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
        match start.map(|i| bytes[i]) {
            Some(b'<' | b'#' | b'"') => Format::Text,
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => {
                if std::str::from_utf8(&bytes[..bytes.len().min(4096)]).is_ok() {
                    Format::Text
                } else {
                    Format::Binary
                }
            }
            _ => Format::Binary,
        }
    }
}

/// Reads a model from a file in either format, resolving external data
/// relative to the file's folder.
pub fn load_model(path: &Path) -> Result<ModelProto> {
    let shown = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| {
        Diagnostic::error(format!("cannot read the model file: {}", io_reason(&e))).in_file(&shown)
    })?;
    let format = Format::from_extension(path).unwrap_or_else(|| Format::sniff(&bytes));
    let base = path.parent().map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p });
    load_model_bytes(Bytes::from(bytes), format, base, &shown)
}

/// Reads a model from memory. `base_dir` is the folder external data is
/// relative to (`None` refuses external data); `name` names the model in
/// diagnostics.
pub fn load_model_bytes(
    bytes: Bytes,
    format: Format,
    base_dir: Option<&Path>,
    name: &str,
) -> Result<ModelProto> {
    let mut model = match format {
        Format::Binary => decode_model(bytes, name)?,
        Format::Text => {
            let src = std::str::from_utf8(&bytes).map_err(|e| {
                Diagnostic::error(format!(
                    "the text model is not valid UTF-8 (at byte {})",
                    e.valid_up_to()
                ))
                .in_file(name)
            })?;
            crate::text::parse_model(src, name)?
        }
    };
    resolve_external_data(&mut model, base_dir, name)?;
    Ok(model)
}

/// Writes a model to `path` in the format its extension names (binary unless
/// the extension names text). The file appears whole or not at all: it is
/// written beside the target under a temporary name, then renamed.
pub fn save_model(model: &ModelProto, path: &Path) -> Result<()> {
    let bytes = match Format::from_extension(path).unwrap_or(Format::Binary) {
        Format::Binary => {
            let size = prost::Message::encoded_len(model);
            if size > i32::MAX as usize {
                return Err(Diagnostic::error(format!(
                    "the model encodes to {size} bytes, over the 2 GiB limit of a protobuf \
                     message"
                ))
                .in_file(&path.display().to_string())
                .into());
            }
            prost::Message::encode_to_vec(model)
        }
        Format::Text => crate::text::print_model(model).into_bytes(),
    };
    write_atomically(path, &bytes)
}

/// Writes `bytes` to `path` so that the file is never seen half-written.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let shown = path.display().to_string();
    let fail = |e: std::io::Error| {
        Diagnostic::error(format!("cannot write the output file: {}", io_reason(&e)))
            .in_file(&shown)
    };
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let file_name = path
        .file_name()
        .ok_or_else(|| Diagnostic::error("the output path names no file").in_file(&shown))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(file_name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = dir.join(tmp_name);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(fail(e).into());
    }
    Ok(())
}

/// An I/O error in words, without the OS error number.
pub(crate) fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        std::io::ErrorKind::IsADirectory => "it is a directory".into(),
        _ => {
            let text = e.to_string();
            match text.find(" (os error") {
                Some(i) => text[..i].to_owned(),
                None => text,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension_and_content() {
        assert_eq!(Format::from_extension(Path::new("a/net.ONNX")), Some(Format::Binary));
        assert_eq!(Format::from_extension(Path::new("net.onnxtxt")), Some(Format::Text));
        assert_eq!(Format::from_extension(Path::new("net")), None);
        assert_eq!(Format::sniff(b"  <\n ir_version: 8"), Format::Text);
        assert_eq!(Format::sniff(b"agraph (float[1] x) => (float[1] y) {}"), Format::Text);
        assert_eq!(Format::sniff(&[0x08, 0x07, 0x12, 0x00]), Format::Binary);
        assert_eq!(Format::sniff(b""), Format::Binary);
    }

    #[test]
    fn unreadable_files_are_named() {
        let err = load_model(Path::new("/nonexistent/net.onnx")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "error: cannot read the model file: no such file\n  --> /nonexistent/net.onnx"
        );
    }

    #[test]
    fn atomic_write_leaves_no_file_on_failure() {
        let dir = std::env::temp_dir().join(format!("onnx-codegen-save-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("missing-subdir").join("out.onnx");
        assert!(write_atomically(&target, b"x").is_err());
        assert!(!target.exists());
        let ok = dir.join("out.onnx");
        write_atomically(&ok, b"abc").unwrap();
        assert_eq!(std::fs::read(&ok).unwrap(), b"abc");
        let leftovers: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(leftovers.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
