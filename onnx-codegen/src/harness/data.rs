//! Test data: reading the ONNX backend layout's `.pb` tensors, comparing
//! results with the reference tolerance, and writing results back as `.pb`.

use crate::ir::{ElemType, Tensor, TensorData, TensorType};
pub use crate::passes::sequences::Form;
use crate::passes::sequences::OutputGroup;
use crate::proto::{Message, TensorProto};
use bytes::Bytes;
use std::path::Path;

/// Relative tolerance of the ONNX backend tests.
pub const RTOL: f64 = 1e-3;
/// Absolute tolerance of the ONNX backend tests.
pub const ATOL: f64 = 1e-7;

/// Reads a `TensorProto` file as an IR tensor.
pub fn read_tensor(path: &Path) -> Result<Tensor, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let proto = TensorProto::decode(Bytes::from(bytes))
        .map_err(|e| format!("{}: not a TensorProto ({e})", path.display()))?;
    Tensor::from_proto(&proto).map_err(|errors| {
        let text: Vec<String> = errors.iter().map(|d| d.message.clone()).collect();
        format!("{}: {}", path.display(), text.join("; "))
    })
}

/// Strings in the runtime's encoding (`Elem::String`: per element, a
/// little-endian `u32` byte length then the bytes). Invalid UTF-8 is an error:
/// generated code holds `str`s.
pub fn encode_strings(values: &[Vec<u8>], what: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for (i, s) in values.iter().enumerate() {
        if std::str::from_utf8(s).is_err() {
            return Err(format!("{what}: string {i} is not valid UTF-8"));
        }
        let len = u32::try_from(s.len()).map_err(|_| format!("{what}: string {i} is too long"))?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(s);
    }
    Ok(out)
}

/// Reads `count` strings in the runtime's encoding.
pub fn decode_strings(bytes: &[u8], count: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut rest = bytes;
    for i in 0..count {
        let Some((len, tail)) = rest.split_first_chunk::<4>() else {
            return Err(format!("the output ends before string {i} of {count}"));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if tail.len() < len {
            return Err(format!("string {i} of the output runs past its end"));
        }
        out.push(tail[..len].to_vec());
        rest = &tail[len..];
    }
    if !rest.is_empty() {
        return Err(format!("the output has {} bytes after its {count} strings", rest.len()));
    }
    Ok(out)
}

/// The raw bytes of `t` after checking it against the expected type
/// (strings: encoded).
pub fn input_bytes<'a>(
    t: &'a Tensor,
    expected: &TensorType,
    what: &str,
) -> Result<std::borrow::Cow<'a, [u8]>, String> {
    let dims: Vec<usize> = t.dims.iter().map(|&d| d as usize).collect();
    if t.elem != expected.elem || dims != expected.dims {
        return Err(format!(
            "{what} is {}{:?} in the test data but the model takes {expected}",
            t.elem, dims
        ));
    }
    match &t.data {
        TensorData::Bytes(b) => Ok(std::borrow::Cow::Borrowed(b)),
        TensorData::Strings(list) => encode_strings(list, what).map(std::borrow::Cow::Owned),
    }
}

/// How close floats must be: `|got - expected| <= atol + rtol * |expected|`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Default for Tolerance {
    /// The ONNX backend tests' tolerance.
    fn default() -> Tolerance {
        Tolerance { rtol: RTOL, atol: ATOL }
    }
}

/// Compares `actual` (raw little-endian bytes of type `ty`) with `expected`:
/// element type and shape exactly, floats within the tolerance (NaN equals
/// NaN), everything else exactly. `None` when they agree.
pub fn compare(
    actual: &[u8],
    ty: &TensorType,
    expected: &Tensor,
    tol: Tolerance,
) -> Option<String> {
    let dims: Vec<usize> = expected.dims.iter().map(|&d| d as usize).collect();
    if expected.elem != ty.elem {
        return Some(format!("element type {} but the reference is {}", ty.elem, expected.elem));
    }
    if dims != ty.dims {
        return Some(format!("shape {:?} but the reference is {:?}", ty.dims, dims));
    }
    let want = match &expected.data {
        TensorData::Bytes(want) => want,
        TensorData::Strings(want) => {
            let got = match decode_strings(actual, want.len()) {
                Ok(g) => g,
                Err(e) => return Some(e),
            };
            let at = got.iter().zip(want).position(|(a, b)| a != b)?;
            return Some(format!(
                "strings differ; first at index {at}: got {:?}, expected {:?}",
                String::from_utf8_lossy(&got[at]),
                String::from_utf8_lossy(&want[at])
            ));
        }
    };
    if want.len() != actual.len() {
        return Some(format!("{} bytes but the reference has {}", actual.len(), want.len()));
    }
    let floats = |a: Vec<f64>, b: Vec<f64>| -> Option<String> {
        let mut bad = 0usize;
        let mut first = None;
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let ok = (x.is_nan() && y.is_nan())
                || x == y
                || (x - y).abs() <= tol.atol + tol.rtol * y.abs();
            if !ok {
                bad += 1;
                first.get_or_insert((i, *x, *y));
            }
        }
        first.map(|(i, x, y)| {
            format!("{bad} of {} values differ; first at index {i}: got {x}, expected {y}", a.len())
        })
    };
    match ty.elem {
        ElemType::Float => {
            let f = |b: &[u8]| {
                b.chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect()
            };
            floats(f(actual), f(want))
        }
        ElemType::Double => {
            let f = |b: &[u8]| {
                b.chunks_exact(8)
                    .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect()
            };
            floats(f(actual), f(want))
        }
        ElemType::Float16 => {
            let f = |b: &[u8]| {
                b.chunks_exact(2)
                    .map(|c| f64::from(onnx_codegen_runtime::f16::from_le_bytes([c[0], c[1]])))
                    .collect()
            };
            floats(f(actual), f(want))
        }
        ElemType::Bfloat16 => {
            let f = |b: &[u8]| {
                b.chunks_exact(2)
                    .map(|c| f64::from(onnx_codegen_runtime::bf16::from_le_bytes([c[0], c[1]])))
                    .collect()
            };
            floats(f(actual), f(want))
        }
        _ => {
            let size = ty.elem.bits().map_or(1, |b| (b as usize).div_ceil(8)).max(1);
            let at = actual.chunks(size).zip(want.chunks(size)).position(|(a, b)| a != b)?;
            Some(format!(
                "values differ; first at index {at}: got bytes {:?}, expected {:?}",
                &actual[at * size..(at + 1) * size],
                &want[at * size..(at + 1) * size]
            ))
        }
    }
}

/// `bytes` of type `ty` as a `TensorProto` named `name`.
pub fn tensor_proto(name: &str, ty: &TensorType, bytes: &[u8]) -> Result<TensorProto, String> {
    let mut proto = TensorProto {
        name: Some(name.to_owned()),
        data_type: Some(ty.elem.to_proto()),
        dims: ty.dims.iter().map(|&d| d as i64).collect(),
        ..Default::default()
    };
    if ty.elem == ElemType::String {
        proto.string_data = decode_strings(bytes, ty.numel().unwrap_or(0))?;
    } else {
        proto.raw_data = Some(Bytes::copy_from_slice(bytes));
    }
    Ok(proto)
}

/// Writes one graph output as the ONNX test layout has it: a
/// `TensorProto`, or a `SequenceProto` / `OptionalProto` as the output's
/// declared type says, named after the output. `elems` are the tensors
/// the generated code gave for it (`group.count` of them): the tensor, the
/// sequence's elements, or the optional's content (none when absent).
pub fn write_value(
    path: &Path,
    group: &OutputGroup,
    elems: &[(TensorType, &[u8])],
) -> Result<(), String> {
    use crate::proto::{OptionalProto, SequenceProto};
    // The `elem_type` codes of SequenceProto and OptionalProto.
    const TENSOR: i32 = 1;
    const SEQUENCE: i32 = 3;
    let name = Some(group.name.clone());
    let tensors = |elem_name: &str| -> Result<Vec<TensorProto>, String> {
        elems.iter().map(|(ty, bytes)| tensor_proto(elem_name, ty, bytes)).collect()
    };
    let sequence = |name: Option<String>| -> Result<SequenceProto, String> {
        Ok(SequenceProto {
            name,
            elem_type: Some(TENSOR),
            tensor_values: tensors("")?,
            ..Default::default()
        })
    };
    let one = |what: &str| -> Result<TensorProto, String> {
        match tensors(&group.name)?.as_mut_slice() {
            [t] => Ok(std::mem::take(t)),
            list => {
                Err(format!("{what} '{}' is held by {} tensors, not one", group.name, list.len()))
            }
        }
    };
    let bytes = match group.form {
        Form::Tensor => one("tensor output")?.encode_to_vec(),
        Form::Sequence => sequence(name)?.encode_to_vec(),
        Form::OptionalTensor => {
            let tensor_value = if elems.is_empty() { None } else { Some(one("optional output")?) };
            OptionalProto { name, elem_type: Some(TENSOR), tensor_value, ..Default::default() }
                .encode_to_vec()
        }
        Form::OptionalSequence => OptionalProto {
            name,
            elem_type: Some(SEQUENCE),
            sequence_value: Some(Box::new(sequence(None)?)),
            ..Default::default()
        }
        .encode_to_vec(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    crate::load::write_atomically(path, &bytes).map_err(|e| e.to_string())
}

/// What a graph input or output holds, as far as test data goes.
pub type ValueForm = Form;

/// The form of a declared ONNX type (tensor when undeclared).
pub fn form_of(ty: Option<&crate::proto::TypeProto>) -> ValueForm {
    use crate::proto::type_proto::Value;
    match ty.and_then(|t| t.value.as_ref()) {
        Some(Value::SequenceType(_)) => Form::Sequence,
        Some(Value::OptionalType(o)) => match o.elem_type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(Value::SequenceType(_)) => Form::OptionalSequence,
            _ => Form::OptionalTensor,
        },
        _ => Form::Tensor,
    }
}

/// Reads a test value file as the tensors the generated code takes or
/// gives for it: a tensor is one, a sequence is its elements in order, an
/// optional is its element (or nothing when absent). `None` in the result
/// marks an absent optional.
pub fn read_values(path: &Path, form: ValueForm) -> Result<Option<Vec<Tensor>>, String> {
    use crate::proto::{OptionalProto, SequenceProto};
    if form == ValueForm::Tensor {
        return read_tensor(path).map(|t| Some(vec![t]));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let convert = |protos: &[TensorProto]| -> Result<Vec<Tensor>, String> {
        protos
            .iter()
            .map(|p| {
                Tensor::from_proto(p).map_err(|errors| {
                    let text: Vec<String> = errors.iter().map(|d| d.message.clone()).collect();
                    format!("{}: {}", path.display(), text.join("; "))
                })
            })
            .collect()
    };
    let sequence = |s: &SequenceProto| -> Result<Vec<Tensor>, String> {
        if !s.sequence_values.is_empty()
            || !s.map_values.is_empty()
            || !s.optional_values.is_empty()
        {
            return Err(format!("{}: only sequences of tensors are supported", path.display()));
        }
        convert(&s.tensor_values)
    };
    match form {
        ValueForm::Sequence => {
            let s = SequenceProto::decode(Bytes::from(bytes))
                .map_err(|e| format!("{}: not a SequenceProto ({e})", path.display()))?;
            sequence(&s).map(Some)
        }
        _ => {
            let o = OptionalProto::decode(Bytes::from(bytes))
                .map_err(|e| format!("{}: not an OptionalProto ({e})", path.display()))?;
            if let Some(t) = &o.tensor_value {
                return convert(std::slice::from_ref(t)).map(Some);
            }
            if let Some(s) = &o.sequence_value {
                return sequence(s).map(Some);
            }
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(v: &[f32]) -> Tensor {
        Tensor {
            name: "t".into(),
            elem: ElemType::Float,
            dims: vec![v.len() as u64],
            data: TensorData::Bytes(
                v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>().into(),
            ),
        }
    }

    #[test]
    fn float_comparison_uses_the_backend_tolerance() {
        let ty = TensorType::new(ElemType::Float, vec![3]);
        let want = floats(&[1.0, f32::NAN, 100.0]);
        let got = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        assert_eq!(
            compare(&got(&[1.0005, f32::NAN, 100.09]), &ty, &want, Tolerance::default()),
            None
        );
        let bad = compare(&got(&[1.0, 0.0, 100.2]), &ty, &want, Tolerance::default()).unwrap();
        assert!(bad.starts_with("2 of 3 values differ; first at index 1"), "{bad}");
        let shape = compare(
            &got(&[1.0, 2.0]),
            &TensorType::new(ElemType::Float, vec![2]),
            &want,
            Tolerance::default(),
        );
        assert_eq!(shape.unwrap(), "shape [2] but the reference is [3]");
    }

    fn got_f(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn saved_outputs_take_the_form_of_the_graph_output() {
        use crate::proto::{OptionalProto, SequenceProto};
        let dir = std::env::temp_dir().join(format!("onnx-codegen-save-{}", std::process::id()));
        let group = |name: &str, form, count| OutputGroup { name: name.into(), form, count };
        let (a, b) = (got_f(&[1.0, 2.0]), got_f(&[3.0]));
        let elems = [
            (TensorType::new(ElemType::Float, vec![2]), a.as_slice()),
            (TensorType::new(ElemType::Float, vec![1]), b.as_slice()),
        ];
        // A sequence: one SequenceProto named after the output, its elements in order.
        let path = dir.join("output_0.pb");
        write_value(&path, &group("seq", Form::Sequence, 2), &elems).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let s = SequenceProto::decode(Bytes::from(bytes)).unwrap();
        assert_eq!((s.name.as_deref(), s.elem_type), (Some("seq"), Some(1)));
        let dims: Vec<Vec<i64>> = s.tensor_values.iter().map(|t| t.dims.clone()).collect();
        assert_eq!(dims, [vec![2], vec![1]]);
        let back = read_values(&path, Form::Sequence).unwrap().unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(compare(&a, &elems[0].0, &back[0], Tolerance::default()), None);
        assert_eq!(compare(&b, &elems[1].0, &back[1], Tolerance::default()), None);
        // An optional tensor, present then absent; an optional sequence.
        let path = dir.join("output_1.pb");
        write_value(&path, &group("opt", Form::OptionalTensor, 1), &elems[..1]).unwrap();
        let o = OptionalProto::decode(Bytes::from(std::fs::read(&path).unwrap())).unwrap();
        assert_eq!((o.name.as_deref(), o.elem_type), (Some("opt"), Some(1)));
        assert_eq!(o.tensor_value.as_ref().and_then(|t| t.name.as_deref()), Some("opt"));
        let back = read_values(&path, Form::OptionalTensor).unwrap().unwrap();
        assert_eq!(compare(&a, &elems[0].0, &back[0], Tolerance::default()), None);
        write_value(&path, &group("opt", Form::OptionalTensor, 0), &[]).unwrap();
        assert_eq!(read_values(&path, Form::OptionalTensor).unwrap(), None);
        write_value(&path, &group("os", Form::OptionalSequence, 2), &elems).unwrap();
        let o = OptionalProto::decode(Bytes::from(std::fs::read(&path).unwrap())).unwrap();
        assert_eq!(o.elem_type, Some(3));
        assert_eq!(o.sequence_value.map(|s| s.tensor_values.len()), Some(2));
        // A tensor output held by two tensors is refused, naming it.
        let e = write_value(&path, &group("t", Form::Tensor, 2), &elems).unwrap_err();
        assert!(e.contains("tensor output 't' is held by 2 tensors"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn integers_compare_exactly() {
        let ty = TensorType::new(ElemType::Int64, vec![2]);
        let want = Tensor::from_i64s("t", vec![2], &[5, -1]);
        let got: Vec<u8> = [5i64, -2].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert!(
            compare(&got, &ty, &want, Tolerance::default()).unwrap().contains("first at index 1")
        );
        let loose = Tolerance { rtol: 1e-3, atol: 1e-4 };
        let near = compare(
            &got_f(&[1.0, 5e-5]),
            &TensorType::new(ElemType::Float, vec![2]),
            &floats(&[1.0, 0.0]),
            loose,
        );
        assert_eq!(near, None);
    }
}
