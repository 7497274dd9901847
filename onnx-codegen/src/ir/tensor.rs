//! Constant tensors (initializers, `Constant` values, tensor attributes).
//!
//! The IR keeps one representation for tensor data whatever field the proto
//! used: little-endian packed bytes ([`TensorData::Bytes`]), sub-byte types
//! packed densely with the first element in the least significant bits, or a
//! list of byte strings for `string` tensors. A proto `raw_data` is taken
//! without copying (a [`Bytes`] clone shares the buffer); typed fields
//! (`float_data`, `int32_data`, ...) are converted following the storage
//! rules of `TensorProto`.

use super::types::ElemType;
use crate::diag::Diagnostic;
use crate::proto::{SparseTensorProto, TensorProto};
use bytes::Bytes;

/// The data of a constant tensor.
#[derive(Clone, Debug, Eq)]
pub enum TensorData {
    /// Packed little-endian element bytes; exactly `elem.byte_size(count)` long.
    Bytes(Bytes),
    /// One byte string per element, for `string` tensors.
    Strings(Vec<Vec<u8>>),
}

/// Equal contents; two clones of one buffer compare without reading it
/// (re-inference compares every constant a node reads with those it read
/// last time, weights included).
impl PartialEq for TensorData {
    fn eq(&self, other: &TensorData) -> bool {
        match (self, other) {
            (TensorData::Bytes(a), TensorData::Bytes(b)) => {
                a.len() == b.len() && (a.as_ptr() == b.as_ptr() || a == b)
            }
            (TensorData::Strings(a), TensorData::Strings(b)) => a == b,
            _ => false,
        }
    }
}

/// A constant tensor with its data checked against its shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    /// The tensor's own name (may be empty for attribute tensors).
    pub name: String,
    pub elem: ElemType,
    pub dims: Vec<u64>,
    pub data: TensorData,
}

/// A sparse tensor in coordinate form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SparseTensor {
    /// The non-zero values, a 1-D tensor of NNZ elements.
    pub values: Tensor,
    /// `int64` indices: `[NNZ]` linearized or `[NNZ, rank]` coordinates.
    pub indices: Tensor,
    /// The dense shape.
    pub dims: Vec<u64>,
}

/// The number of elements of a tensor of these dims, `None` on overflow.
pub fn element_count(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

fn shape_text(dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("[{}]", d.join(","))
}

/// Which typed field a proto tensor of this element type stores its data
/// in, and how many entries `count` elements need there.
fn typed_field(elem: ElemType, count: u64) -> Option<(&'static str, u64)> {
    Some(match elem {
        ElemType::Float => ("float_data", count),
        ElemType::Complex64 => ("float_data", count.checked_mul(2)?),
        ElemType::Double => ("double_data", count),
        ElemType::Complex128 => ("double_data", count.checked_mul(2)?),
        ElemType::Int64 => ("int64_data", count),
        ElemType::Uint32 | ElemType::Uint64 => ("uint64_data", count),
        ElemType::String => ("string_data", count),
        // Packed 4- and 2-bit data: one byte of the packed stream per entry.
        ElemType::Uint4
        | ElemType::Int4
        | ElemType::Float4E2M1
        | ElemType::Uint2
        | ElemType::Int2 => ("int32_data", elem.byte_size(count)?),
        _ => ("int32_data", count),
    })
}

impl Tensor {
    /// The size of the data in bytes (strings: their total length).
    pub fn data_len(&self) -> usize {
        match &self.data {
            TensorData::Bytes(b) => b.len(),
            TensorData::Strings(s) => s.iter().map(Vec::len).sum(),
        }
    }

    /// The tensor's type with dims as `usize`, `None` if a dim does not fit.
    pub fn tensor_type(&self) -> Option<crate::ir::TensorType> {
        let dims =
            self.dims.iter().map(|&d| usize::try_from(d).ok()).collect::<Option<Vec<_>>>()?;
        Some(crate::ir::TensorType::new(self.elem, dims))
    }

    /// A tensor from packed bytes; checks the length against the dims.
    pub fn from_bytes(
        name: impl Into<String>,
        elem: ElemType,
        dims: Vec<u64>,
        data: Bytes,
    ) -> Result<Tensor, Vec<Diagnostic>> {
        let name = name.into();
        let expected = element_count(&dims).and_then(|n| elem.byte_size(n)).ok_or_else(|| {
            vec![Diagnostic::error(format!(
                "tensor '{name}' of type {elem} and shape {} is too large",
                shape_text(&dims)
            ))]
        })?;
        if u64::try_from(data.len()).ok() != Some(expected) {
            return Err(vec![Diagnostic::error(format!(
                "tensor '{name}' of type {elem} and shape {} needs {expected} bytes of data, but has {}",
                shape_text(&dims),
                data.len()
            ))]);
        }
        Ok(Tensor { name, elem, dims, data: TensorData::Bytes(data) })
    }

    /// A scalar or 1-D `int64` tensor from values (for tests and constant folding).
    pub fn from_i64s(name: impl Into<String>, dims: Vec<u64>, values: &[i64]) -> Tensor {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        Tensor {
            name: name.into(),
            elem: ElemType::Int64,
            dims,
            data: TensorData::Bytes(bytes.into()),
        }
    }

    /// The number of elements (the product of the dims, checked on construction).
    pub fn len(&self) -> u64 {
        element_count(&self.dims).unwrap_or(0)
    }

    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The packed bytes, for non-string tensors.
    pub fn bytes(&self) -> Option<&Bytes> {
        match &self.data {
            TensorData::Bytes(b) => Some(b),
            TensorData::Strings(_) => None,
        }
    }

    /// The elements as `i64`, for integer and bool tensors of 8 bits or more.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        let b = self.bytes()?;
        let width = match self.elem {
            ElemType::Int8 | ElemType::Uint8 | ElemType::Bool => 1,
            ElemType::Int16 | ElemType::Uint16 => 2,
            ElemType::Int32 | ElemType::Uint32 => 4,
            ElemType::Int64 | ElemType::Uint64 => 8,
            _ => return None,
        };
        let signed = matches!(
            self.elem,
            ElemType::Int8 | ElemType::Int16 | ElemType::Int32 | ElemType::Int64
        );
        b.chunks_exact(width)
            .map(|c| {
                let mut buf = [0u8; 8];
                buf.get_mut(..width)?.copy_from_slice(c);
                let v = u64::from_le_bytes(buf);
                let shift = 64 - 8 * width as u32;
                Some(if signed { ((v << shift) as i64) >> shift } else { v as i64 })
            })
            .collect()
    }

    /// The elements as `f64`, for `float` and `double` tensors.
    pub fn to_f64s(&self) -> Option<Vec<f64>> {
        let b = self.bytes()?;
        match self.elem {
            ElemType::Float => Some(
                b.chunks_exact(4)
                    .map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
                    .collect(),
            ),
            ElemType::Double => Some(
                b.chunks_exact(8)
                    .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
            ),
            _ => None,
        }
    }

    /// Converts a proto tensor, checking it against the IR spec: a known
    /// element type, non-negative dims, exactly one data field holding exactly
    /// the data the shape needs, no external data (the loader resolves it).
    pub fn from_proto(t: &TensorProto) -> Result<Tensor, Vec<Diagnostic>> {
        let name = t.name().to_owned();
        let mut errors = Vec::new();
        let elem = ElemType::from_proto(t.data_type());
        if elem.is_none() {
            errors.push(Diagnostic::error(format!(
                "tensor '{name}' has element type code {}, which is not a tensor element type",
                t.data_type()
            )));
        }
        let mut dims = Vec::with_capacity(t.dims.len());
        for (i, &d) in t.dims.iter().enumerate() {
            match u64::try_from(d) {
                Ok(d) => dims.push(d),
                Err(_) => errors.push(Diagnostic::error(format!(
                    "tensor '{name}' has negative dimension {d} at index {i}"
                ))),
            }
        }
        if t.segment.is_some() {
            errors.push(Diagnostic::error(format!(
                "tensor '{name}' is a segment of a larger tensor, which is not supported"
            )));
        }
        if t.data_location == Some(1) || !t.external_data.is_empty() {
            errors.push(
                Diagnostic::error(format!(
                    "tensor '{name}' still refers to external data; the loader should have resolved it"
                ))
                .note("load the model from a file path so external data files can be found"),
            );
        }
        let Some(elem) = elem else { return Err(errors) };
        if !errors.is_empty() {
            return Err(errors);
        }
        let Some(count) = element_count(&dims) else {
            return Err(vec![Diagnostic::error(format!(
                "tensor '{name}' has shape {} whose element count overflows",
                shape_text(&dims)
            ))]);
        };
        let fields: [(&str, bool); 7] = [
            ("raw_data", t.raw_data.is_some()),
            ("float_data", !t.float_data.is_empty()),
            ("int32_data", !t.int32_data.is_empty()),
            ("string_data", !t.string_data.is_empty()),
            ("int64_data", !t.int64_data.is_empty()),
            ("double_data", !t.double_data.is_empty()),
            ("uint64_data", !t.uint64_data.is_empty()),
        ];
        let used: Vec<&str> = fields.iter().filter(|f| f.1).map(|f| f.0).collect();
        if used.len() > 1 {
            return Err(vec![Diagnostic::error(format!(
                "tensor '{name}' has data in several fields ({}); exactly one may be used",
                used.join(", ")
            ))]);
        }
        let shape = shape_text(&dims);
        let Some((field, entries)) = typed_field(elem, count) else {
            return Err(vec![Diagnostic::error(format!(
                "tensor '{name}' has shape {shape} whose size overflows"
            ))]);
        };
        let used = used.first().copied();
        if elem == ElemType::String {
            if used == Some("raw_data") {
                return Err(vec![Diagnostic::error(format!(
                    "tensor '{name}' of type string has raw_data; strings belong in string_data"
                ))]);
            }
            if used.is_some_and(|u| u != "string_data") {
                return Err(vec![wrong_field(&name, elem, used.unwrap_or_default(), field)]);
            }
            if u64::try_from(t.string_data.len()).ok() != Some(count) {
                return Err(vec![Diagnostic::error(format!(
                    "tensor '{name}' of type string and shape {shape} needs {count} strings, but has {}",
                    t.string_data.len()
                ))]);
            }
            return Ok(Tensor {
                name,
                elem,
                dims,
                data: TensorData::Strings(t.string_data.clone()),
            });
        }
        let Some(expected_bytes) = elem.byte_size(count) else {
            return Err(vec![Diagnostic::error(format!(
                "tensor '{name}' of type {elem} and shape {shape} is too large"
            ))]);
        };
        let data = match used {
            Some("raw_data") => {
                let raw = t.raw_data.clone().unwrap_or_default();
                return Tensor::from_bytes(name, elem, dims, raw);
            }
            None if count == 0 => Bytes::new(),
            None => {
                return Err(vec![Diagnostic::error(format!(
                    "tensor '{name}' of type {elem} and shape {shape} has no data; it needs {expected_bytes} bytes"
                ))]);
            }
            Some(u) if u != field => return Err(vec![wrong_field(&name, elem, u, field)]),
            Some(_) => {
                let have = match field {
                    "float_data" => t.float_data.len(),
                    "double_data" => t.double_data.len(),
                    "int64_data" => t.int64_data.len(),
                    "uint64_data" => t.uint64_data.len(),
                    _ => t.int32_data.len(),
                };
                if u64::try_from(have).ok() != Some(entries) {
                    return Err(vec![Diagnostic::error(format!(
                        "tensor '{name}' of type {elem} and shape {shape} needs {entries} entries in {field}, but has {have}"
                    ))]);
                }
                typed_data_bytes(t, elem)
            }
        };
        Ok(Tensor { name, elem, dims, data: TensorData::Bytes(data) })
    }

    /// Converts back to a proto tensor (data in `raw_data` or `string_data`).
    pub fn to_proto(&self) -> TensorProto {
        let mut t = TensorProto {
            name: (!self.name.is_empty()).then(|| self.name.clone()),
            data_type: Some(self.elem.to_proto()),
            dims: self.dims.iter().map(|&d| i64::try_from(d).unwrap_or(i64::MAX)).collect(),
            ..TensorProto::default()
        };
        match &self.data {
            TensorData::Bytes(b) => t.raw_data = Some(b.clone()),
            TensorData::Strings(s) => t.string_data = s.clone(),
        }
        t
    }
}

fn wrong_field(name: &str, elem: ElemType, used: &str, expected: &str) -> Diagnostic {
    Diagnostic::error(format!(
        "tensor '{name}' of type {elem} holds its data in {used}; {elem} data belongs in {expected} or raw_data"
    ))
}

/// Converts the typed field of `t` (already checked to be the right field with
/// the right number of entries) to packed little-endian bytes.
/// The little-endian packed bytes (the `raw_data` layout) of the values in
/// `t`'s typed field for element type `elem`, by the spec's rules for each
/// field. Lengths are not checked here.
pub(crate) fn typed_data_bytes(t: &TensorProto, elem: ElemType) -> Bytes {
    let mut out: Vec<u8> = Vec::new();
    match elem {
        ElemType::Float | ElemType::Complex64 => {
            out.extend(t.float_data.iter().flat_map(|v| v.to_le_bytes()));
        }
        ElemType::Double | ElemType::Complex128 => {
            out.extend(t.double_data.iter().flat_map(|v| v.to_le_bytes()));
        }
        ElemType::Int64 => out.extend(t.int64_data.iter().flat_map(|v| v.to_le_bytes())),
        ElemType::Uint64 => out.extend(t.uint64_data.iter().flat_map(|v| v.to_le_bytes())),
        ElemType::Uint32 => {
            out.extend(t.uint64_data.iter().flat_map(|&v| (v as u32).to_le_bytes()))
        }
        ElemType::Int32 => out.extend(t.int32_data.iter().flat_map(|v| v.to_le_bytes())),
        ElemType::Int16 | ElemType::Uint16 | ElemType::Float16 | ElemType::Bfloat16 => {
            out.extend(t.int32_data.iter().flat_map(|&v| (v as u16).to_le_bytes()));
        }
        ElemType::Float6E2M3 | ElemType::Float6E3M2 => {
            // One element per entry (low 6 bits), packed into a 6-bit stream.
            let mut acc: u32 = 0;
            let mut nbits = 0;
            for &v in &t.int32_data {
                acc |= ((v as u32) & 0x3f) << nbits;
                nbits += 6;
                while nbits >= 8 {
                    out.push(acc as u8);
                    acc >>= 8;
                    nbits -= 8;
                }
            }
            if nbits > 0 {
                out.push(acc as u8);
            }
        }
        // 8-bit types, and 4-/2-bit types whose entries are packed bytes.
        _ => out.extend(t.int32_data.iter().map(|&v| v as u8)),
    }
    Bytes::from(out)
}

impl SparseTensor {
    /// Converts a proto sparse tensor: values and indices must be valid
    /// tensors, values 1-D, indices `int64` of shape `[NNZ]` or `[NNZ, rank]`.
    pub fn from_proto(s: &SparseTensorProto) -> Result<SparseTensor, Vec<Diagnostic>> {
        let mut errors = Vec::new();
        let mut dims = Vec::new();
        for &d in &s.dims {
            match u64::try_from(d) {
                Ok(d) => dims.push(d),
                Err(_) => errors
                    .push(Diagnostic::error(format!("sparse tensor has negative dimension {d}"))),
            }
        }
        let values = match &s.values {
            Some(v) => Tensor::from_proto(v).map_err(|e| errors.extend(e)).ok(),
            None => {
                errors.push(Diagnostic::error("sparse tensor has no values tensor"));
                None
            }
        };
        let indices = match &s.indices {
            Some(v) => Tensor::from_proto(v).map_err(|e| errors.extend(e)).ok(),
            None => {
                errors.push(Diagnostic::error("sparse tensor has no indices tensor"));
                None
            }
        };
        let (Some(values), Some(indices)) = (values, indices) else { return Err(errors) };
        let name = values.name.clone();
        if values.dims.len() != 1 {
            errors.push(Diagnostic::error(format!(
                "sparse tensor '{name}' has values of rank {}; expected rank 1",
                values.dims.len()
            )));
        }
        let nnz = values.dims.first().copied().unwrap_or(0);
        if indices.elem != ElemType::Int64 {
            errors.push(Diagnostic::error(format!(
                "sparse tensor '{name}' has indices of type {}; expected int64",
                indices.elem
            )));
        }
        let rank = u64::try_from(dims.len()).unwrap_or(u64::MAX);
        let shape_ok = match indices.dims.as_slice() {
            [n] => *n == nnz,
            [n, r] => *n == nnz && *r == rank,
            _ => false,
        };
        if !shape_ok {
            errors.push(Diagnostic::error(format!(
                "sparse tensor '{name}' has indices of shape {}; expected [{nnz}] or [{nnz},{rank}]",
                shape_text(&indices.dims)
            )));
        }
        if errors.is_empty() { Ok(SparseTensor { values, indices, dims }) } else { Err(errors) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proto(elem: ElemType, dims: &[i64]) -> TensorProto {
        TensorProto {
            name: Some("t".into()),
            data_type: Some(elem.to_proto()),
            dims: dims.to_vec(),
            ..TensorProto::default()
        }
    }

    fn bytes_of(t: &TensorProto) -> Vec<u8> {
        Tensor::from_proto(t).unwrap().bytes().unwrap().to_vec()
    }

    fn message(t: &TensorProto) -> String {
        let e = Tensor::from_proto(t).unwrap_err();
        assert_eq!(e.len(), 1, "{e:?}");
        e[0].message.clone()
    }

    #[test]
    fn raw_data_is_shared_not_copied() {
        let buf = Bytes::from(vec![0u8, 0, 128, 63, 0, 0, 0, 64]);
        let mut t = proto(ElemType::Float, &[2]);
        t.raw_data = Some(buf.clone());
        let tensor = Tensor::from_proto(&t).unwrap();
        assert_eq!(tensor.bytes().unwrap().as_ptr(), buf.as_ptr());
        assert_eq!(tensor.to_f64s(), Some(vec![1.0, 2.0]));
    }

    #[test]
    fn typed_fields_become_little_endian_bytes() {
        let mut t = proto(ElemType::Float, &[2]);
        t.float_data = vec![1.0, -2.0];
        assert_eq!(bytes_of(&t), [0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]);

        let mut t = proto(ElemType::Int8, &[3]);
        t.int32_data = vec![-1, 5, -128];
        assert_eq!(bytes_of(&t), [0xff, 5, 0x80]);

        let mut t = proto(ElemType::Uint16, &[2]);
        t.int32_data = vec![0xbeef, 1];
        assert_eq!(bytes_of(&t), [0xef, 0xbe, 1, 0]);

        let mut t = proto(ElemType::Float16, &[2]);
        t.int32_data = vec![15360, 16384]; // 1.0, 2.0
        assert_eq!(bytes_of(&t), [0x00, 0x3c, 0x00, 0x40]);

        let mut t = proto(ElemType::Bool, &[2]);
        t.int32_data = vec![1, 0];
        assert_eq!(bytes_of(&t), [1, 0]);

        let mut t = proto(ElemType::Uint32, &[1]);
        t.uint64_data = vec![0x0102_0304];
        assert_eq!(bytes_of(&t), [4, 3, 2, 1]);

        let mut t = proto(ElemType::Uint64, &[1]);
        t.uint64_data = vec![u64::MAX - 1];
        assert_eq!(bytes_of(&t), [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);

        let mut t = proto(ElemType::Int64, &[]);
        t.int64_data = vec![-2];
        assert_eq!(bytes_of(&t), [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);

        // complex64: real and imaginary parts as float pairs.
        let mut t = proto(ElemType::Complex64, &[1]);
        t.float_data = vec![1.0, 2.0];
        assert_eq!(bytes_of(&t), [0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]);

        let mut t = proto(ElemType::Double, &[1]);
        t.double_data = vec![1.0];
        assert_eq!(bytes_of(&t), [0, 0, 0, 0, 0, 0, 0xf0, 0x3f]);

        let mut t = proto(ElemType::Float8E4M3FN, &[2]);
        t.int32_data = vec![0x38, 0xb8];
        assert_eq!(bytes_of(&t), [0x38, 0xb8]);
    }

    #[test]
    fn sub_byte_types_stay_packed() {
        // int4 [1,2,3,1,2]: the reference stores packed bytes 0x21, 0x13, 0x02.
        let mut t = proto(ElemType::Int4, &[5]);
        t.int32_data = vec![0x21, 0x13, 0x02];
        assert_eq!(bytes_of(&t), [0x21, 0x13, 0x02]);
        // uint2 [1,2,3,1,2] -> 0b01_11_10_01 = 0x79, 0x02.
        let mut t = proto(ElemType::Uint2, &[5]);
        t.int32_data = vec![0x79, 0x02];
        assert_eq!(bytes_of(&t), [0x79, 0x02]);
        // float6e2m3: one element per entry, packed 6 bits each:
        // 8, 4, 12, 16, 40 -> bits 001000 000100 001100 010000 101000
        let mut t = proto(ElemType::Float6E2M3, &[5]);
        t.int32_data = vec![8, 4, 12, 16, 40];
        assert_eq!(bytes_of(&t), [0x08, 0xc1, 0x40, 0x28]);
        // The wrong number of packed bytes is refused.
        let mut t = proto(ElemType::Int4, &[5]);
        t.int32_data = vec![0x21, 0x13];
        assert_eq!(
            message(&t),
            "tensor 't' of type int4 and shape [5] needs 3 entries in int32_data, but has 2"
        );
    }

    #[test]
    fn strings_are_kept_as_byte_strings() {
        let mut t = proto(ElemType::String, &[2]);
        t.string_data = vec![b"a".to_vec(), b"bc".to_vec()];
        let tensor = Tensor::from_proto(&t).unwrap();
        assert_eq!(tensor.data, TensorData::Strings(vec![b"a".to_vec(), b"bc".to_vec()]));
        t.string_data.pop();
        assert_eq!(
            message(&t),
            "tensor 't' of type string and shape [2] needs 2 strings, but has 1"
        );
        let mut t = proto(ElemType::String, &[1]);
        t.raw_data = Some(Bytes::from_static(b"x"));
        assert_eq!(
            message(&t),
            "tensor 't' of type string has raw_data; strings belong in string_data"
        );
    }

    #[test]
    fn data_length_must_match_the_shape() {
        let mut t = proto(ElemType::Float, &[2, 3]);
        t.raw_data = Some(Bytes::from(vec![0u8; 20]));
        assert_eq!(
            message(&t),
            "tensor 't' of type float and shape [2,3] needs 24 bytes of data, but has 20"
        );
        t.raw_data = Some(Bytes::from(vec![0u8; 28]));
        assert_eq!(
            message(&t),
            "tensor 't' of type float and shape [2,3] needs 24 bytes of data, but has 28"
        );
        let mut t = proto(ElemType::Float, &[3]);
        t.float_data = vec![1.0, 2.0];
        assert_eq!(
            message(&t),
            "tensor 't' of type float and shape [3] needs 3 entries in float_data, but has 2"
        );
        let t = proto(ElemType::Float, &[3]);
        assert_eq!(
            message(&t),
            "tensor 't' of type float and shape [3] has no data; it needs 12 bytes"
        );
        let t = proto(ElemType::Float, &[0, 3]);
        assert!(Tensor::from_proto(&t).unwrap().is_empty());
    }

    #[test]
    fn refuses_malformed_tensors() {
        let mut t = proto(ElemType::Float, &[2, -1]);
        t.data_type = Some(0);
        let e = Tensor::from_proto(&t).unwrap_err();
        let msgs: Vec<&str> = e.iter().map(|d| d.message.as_str()).collect();
        assert_eq!(
            msgs,
            [
                "tensor 't' has element type code 0, which is not a tensor element type",
                "tensor 't' has negative dimension -1 at index 1",
            ]
        );
        let mut t = proto(ElemType::Float, &[i64::MAX, i64::MAX]);
        t.raw_data = Some(Bytes::new());
        assert_eq!(
            message(&t),
            "tensor 't' has shape [9223372036854775807,9223372036854775807] whose element count overflows"
        );
        let mut t = proto(ElemType::Double, &[i64::MAX]);
        t.raw_data = Some(Bytes::new());
        assert_eq!(
            message(&t),
            "tensor 't' of type double and shape [9223372036854775807] is too large"
        );
        let mut t = proto(ElemType::Int64, &[1]);
        t.int32_data = vec![1];
        assert_eq!(
            message(&t),
            "tensor 't' of type int64 holds its data in int32_data; int64 data belongs in int64_data or raw_data"
        );
        let mut t = proto(ElemType::Float, &[1]);
        t.float_data = vec![1.0];
        t.raw_data = Some(Bytes::from_static(&[0, 0, 0, 0]));
        assert_eq!(
            message(&t),
            "tensor 't' has data in several fields (raw_data, float_data); exactly one may be used"
        );
        let mut t = proto(ElemType::Float, &[1]);
        t.data_location = Some(1);
        t.external_data = vec![crate::proto::StringStringEntryProto {
            key: Some("location".into()),
            value: Some("w.bin".into()),
        }];
        assert_eq!(
            message(&t),
            "tensor 't' still refers to external data; the loader should have resolved it"
        );
    }

    #[test]
    fn integer_views() {
        let mut t = proto(ElemType::Int16, &[2]);
        t.int32_data = vec![-3, 7];
        assert_eq!(Tensor::from_proto(&t).unwrap().to_i64s(), Some(vec![-3, 7]));
        let t = Tensor::from_i64s("s", vec![2], &[4, -1]);
        assert_eq!(t.to_i64s(), Some(vec![4, -1]));
        assert_eq!(Tensor::from_proto(&t.to_proto()).unwrap(), t);
    }
}
