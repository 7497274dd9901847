//! External tensor data: tensors whose bytes live in a file beside the model.
//!
//! The spec: a tensor with `data_location = EXTERNAL` names a file by
//! `location` (relative to the model file's folder), optionally an `offset`
//! and a `length` in bytes, and must not use the value fields. We read the
//! bytes into `raw_data` once, so later stages see ordinary tensors.
//!
//! A model must not make us open files outside its own folder: a location
//! that is absolute, contains `..`, or resolves (through symlinks) outside the
//! folder is refused before anything is opened.

use crate::diag::{Diagnostic, Diagnostics, Result};
use crate::proto::visit::for_each_tensor_mut;
use crate::proto::{ModelProto, TensorProto, tensor_proto::DataLocation};
use bytes::Bytes;
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Replaces every external tensor reference in `model` by the bytes it names,
/// read from files under `base_dir`. All problems are reported together.
///
/// `base_dir` is the model's folder; `None` (a model read from memory) makes
/// any external reference an error.
pub fn resolve_external_data(
    model: &mut ModelProto,
    base_dir: Option<&Path>,
    model_name: &str,
) -> Result<()> {
    let mut diags = Diagnostics::new();
    let mut reader = Reader { base_dir, canonical_base: None, files: HashMap::new() };
    for_each_tensor_mut(model, &mut |tensor, path| {
        let external = tensor.data_location == Some(DataLocation::External as i32)
            || !tensor.external_data.is_empty();
        if !external {
            return;
        }
        let subject = if path.is_empty() {
            format!("tensor '{}'", tensor.name())
        } else {
            format!("tensor '{}' (in {})", tensor.name(), path.join(" > "))
        };
        match reader.read(tensor) {
            Ok(bytes) => {
                tensor.raw_data = Some(bytes);
                tensor.external_data.clear();
                tensor.data_location = None;
            }
            Err(reason) => diags.push(Diagnostic::error(format!("{subject}: {reason}"))),
        }
    });
    if diags.has_errors() {
        let list = diags.into_vec().into_iter().map(|d| d.in_file(model_name)).collect();
        return Err(crate::Error::new(list));
    }
    Ok(())
}

struct Reader<'a> {
    base_dir: Option<&'a Path>,
    canonical_base: Option<PathBuf>,
    files: HashMap<PathBuf, (File, u64)>,
}

/// Where an external tensor's bytes are, as the tensor says.
struct Descriptor {
    location: String,
    offset: u64,
    length: Option<u64>,
}

impl Reader<'_> {
    fn read(&mut self, tensor: &TensorProto) -> std::result::Result<Bytes, String> {
        let desc = describe(tensor)?;
        let Some(base_dir) = self.base_dir else {
            return Err(format!(
                "the model refers to external data ('{}') but was not read from a file, so \
                 there is no folder to find it in",
                desc.location
            ));
        };
        check_relative(&desc.location)?;
        let canonical_base = match &self.canonical_base {
            Some(b) => b.clone(),
            None => {
                let b = base_dir.canonicalize().map_err(|e| {
                    format!(
                        "cannot resolve the model's folder '{}': {}",
                        base_dir.display(),
                        super::io_reason(&e)
                    )
                })?;
                self.canonical_base = Some(b.clone());
                b
            }
        };
        let full = canonical_base.join(&desc.location).canonicalize().map_err(|e| {
            format!("external data file '{}': {}", desc.location, super::io_reason(&e))
        })?;
        if !full.starts_with(&canonical_base) {
            return Err(format!(
                "external data location '{}' resolves outside the model's folder (through a \
                 symbolic link)",
                desc.location
            ));
        }
        if !self.files.contains_key(&full) {
            let file = File::open(&full).map_err(|e| {
                format!(
                    "cannot open external data file '{}': {}",
                    desc.location,
                    super::io_reason(&e)
                )
            })?;
            let meta = file.metadata().map_err(|e| {
                format!("external data file '{}': {}", desc.location, super::io_reason(&e))
            })?;
            if !meta.is_file() {
                return Err(format!("external data location '{}' is not a file", desc.location));
            }
            self.files.insert(full.clone(), (file, meta.len()));
        }
        let (file, size) = self.files.get_mut(&full).ok_or("external data file vanished")?;
        let size = *size;
        if desc.offset > size {
            return Err(format!(
                "external data offset {} is past the end of '{}' ({size} bytes)",
                desc.offset, desc.location
            ));
        }
        let length = desc.length.unwrap_or(size - desc.offset);
        let end = desc.offset.checked_add(length).filter(|&end| end <= size).ok_or_else(|| {
            format!(
                "external data range {}..{} (length {length}) goes past the end of '{}' \
                 ({size} bytes)",
                desc.offset,
                u128::from(desc.offset) + u128::from(length),
                desc.location
            )
        })?;
        let len = usize::try_from(end - desc.offset)
            .map_err(|_| format!("external data length {length} does not fit in memory"))?;
        let mut buf = vec![0u8; len];
        file.seek(SeekFrom::Start(desc.offset))
            .and_then(|_| file.read_exact(&mut buf))
            .map_err(|e| format!("cannot read '{}': {}", desc.location, super::io_reason(&e)))?;
        Ok(Bytes::from(buf))
    }
}

fn describe(tensor: &TensorProto) -> std::result::Result<Descriptor, String> {
    if tensor.raw_data.is_some()
        || !tensor.float_data.is_empty()
        || !tensor.int32_data.is_empty()
        || !tensor.int64_data.is_empty()
        || !tensor.double_data.is_empty()
        || !tensor.uint64_data.is_empty()
        || !tensor.string_data.is_empty()
    {
        return Err("the tensor has external data and also values of its own".into());
    }
    let mut location = None;
    let mut offset = 0;
    let mut length = None;
    for entry in &tensor.external_data {
        let value = entry.value();
        let number = |what: &str| {
            value.parse::<u64>().map_err(|_| {
                format!("external data {what} '{value}' is not a non-negative whole number")
            })
        };
        match entry.key() {
            "location" => location = Some(value.to_owned()),
            "offset" => offset = number("offset")?,
            "length" => length = Some(number("length")?),
            // A digest of the file; reading does not depend on it.
            "checksum" => {}
            // Written by some tools as the folder the model was saved from; the
            // spec makes locations relative to the model file, so it is not used.
            "basepath" => {}
            other => {
                return Err(format!(
                    "unknown external data key '{other}' (expected location, offset, length or \
                     checksum)"
                ));
            }
        }
    }
    let location = location.ok_or("the tensor is marked external but names no location")?;
    Ok(Descriptor { location, offset, length })
}

/// Refuses locations that could name a file outside the model's folder by
/// their spelling alone: empty, absolute (Unix or Windows), or containing `..`.
fn check_relative(location: &str) -> std::result::Result<(), String> {
    if location.is_empty() {
        return Err("external data location is empty".into());
    }
    if location.contains('\0') {
        return Err("external data location contains a NUL character".into());
    }
    let windows_absolute = location.starts_with('\\')
        || location.as_bytes().get(1) == Some(&b':')
            && location.as_bytes()[0].is_ascii_alphabetic();
    if Path::new(location).is_absolute() || windows_absolute {
        return Err(format!(
            "external data location '{location}' is absolute; it must be relative to the \
             model's folder"
        ));
    }
    let parent = location.split(['/', '\\']).any(|part| part == "..")
        || Path::new(location).components().any(|c| matches!(c, Component::ParentDir));
    if parent {
        return Err(format!(
            "external data location '{location}' contains '..'; it must stay inside the model's \
             folder"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{GraphProto, StringStringEntryProto};

    fn external(name: &str, entries: &[(&str, &str)]) -> TensorProto {
        TensorProto {
            name: Some(name.into()),
            data_type: Some(1),
            dims: vec![2],
            data_location: Some(DataLocation::External as i32),
            external_data: entries
                .iter()
                .map(|(k, v)| StringStringEntryProto {
                    key: Some((*k).into()),
                    value: Some((*v).into()),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn model(tensors: Vec<TensorProto>) -> ModelProto {
        ModelProto {
            graph: Some(GraphProto {
                name: Some("g".into()),
                initializer: tensors,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("onnx-codegen-ext-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("model")).unwrap();
            TempDir(dir)
        }
        fn model_dir(&self) -> PathBuf {
            self.0.join("model")
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_ranges_into_raw_data() {
        let dir = TempDir::new("ok");
        std::fs::create_dir_all(dir.model_dir().join("w")).unwrap();
        std::fs::write(dir.model_dir().join("w/data.bin"), (0u8..32).collect::<Vec<_>>()).unwrap();
        let mut m = model(vec![
            external("a", &[("location", "w/data.bin"), ("offset", "8"), ("length", "8")]),
            external("b", &[("location", "w/data.bin"), ("offset", "24"), ("checksum", "x")]),
        ]);
        resolve_external_data(&mut m, Some(&dir.model_dir()), "m.onnx").unwrap();
        let g = m.graph.unwrap();
        assert_eq!(g.initializer[0].raw_data.as_deref(), Some(&(8u8..16).collect::<Vec<_>>()[..]));
        assert_eq!(g.initializer[1].raw_data.as_deref(), Some(&(24u8..32).collect::<Vec<_>>()[..]));
        assert!(g.initializer[0].external_data.is_empty());
        assert_eq!(g.initializer[0].data_location, None);
    }

    #[test]
    fn refuses_locations_outside_the_folder_and_reports_all() {
        let dir = TempDir::new("bad");
        std::fs::write(dir.0.join("secret.bin"), [1u8; 8]).unwrap();
        std::fs::write(dir.model_dir().join("short.bin"), [1u8; 4]).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(dir.0.join("secret.bin"), dir.model_dir().join("link.bin"))
            .unwrap();
        let mut m = model(vec![
            external("abs", &[("location", "/etc/passwd")]),
            external("win", &[("location", "C:\\data.bin")]),
            external("up", &[("location", "x/../../secret.bin")]),
            external("missing", &[("location", "nope.bin")]),
            external("past", &[("location", "short.bin"), ("offset", "2"), ("length", "8")]),
            external("offset", &[("location", "short.bin"), ("offset", "5")]),
            external("neg", &[("location", "short.bin"), ("length", "-1")]),
            external("key", &[("location", "short.bin"), ("color", "red")]),
            external("noloc", &[]),
        ]);
        if cfg!(unix) {
            m.graph
                .as_mut()
                .unwrap()
                .initializer
                .push(external("sym", &[("location", "link.bin")]));
        }
        let err = resolve_external_data(&mut m, Some(&dir.model_dir()), "m.onnx").unwrap_err();
        let messages: Vec<&str> = err.diagnostics().iter().map(|d| d.message.as_str()).collect();
        let mut expected = vec![
            "tensor 'abs' (in graph 'g'): external data location '/etc/passwd' is absolute; it \
             must be relative to the model's folder",
            "tensor 'win' (in graph 'g'): external data location 'C:\\data.bin' is absolute; it \
             must be relative to the model's folder",
            "tensor 'up' (in graph 'g'): external data location 'x/../../secret.bin' contains \
             '..'; it must stay inside the model's folder",
            "tensor 'missing' (in graph 'g'): external data file 'nope.bin': no such file",
            "tensor 'past' (in graph 'g'): external data range 2..10 (length 8) goes past the end \
             of 'short.bin' (4 bytes)",
            "tensor 'offset' (in graph 'g'): external data offset 5 is past the end of \
             'short.bin' (4 bytes)",
            "tensor 'neg' (in graph 'g'): external data length '-1' is not a non-negative whole \
             number",
            "tensor 'key' (in graph 'g'): unknown external data key 'color' (expected location, \
             offset, length or checksum)",
            "tensor 'noloc' (in graph 'g'): the tensor is marked external but names no location",
        ];
        if cfg!(unix) {
            expected.push(
                "tensor 'sym' (in graph 'g'): external data location 'link.bin' resolves outside \
                 the model's folder (through a symbolic link)",
            );
        }
        assert_eq!(messages, expected);
        assert!(err.diagnostics().iter().all(|d| d.location.file.as_deref() == Some("m.onnx")));
    }

    #[test]
    fn external_data_needs_a_folder_and_no_inline_values() {
        let mut m = model(vec![external("a", &[("location", "w.bin")])]);
        let err = resolve_external_data(&mut m, None, "mem").unwrap_err();
        assert!(err.to_string().contains("was not read from a file"));
        let mut both = external("b", &[("location", "w.bin")]);
        both.float_data = vec![1.0, 2.0];
        let mut m = model(vec![both]);
        let err = resolve_external_data(&mut m, Some(Path::new(".")), "m").unwrap_err();
        assert!(err.to_string().contains("also values of its own"));
    }
}
