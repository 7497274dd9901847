//! The face every generated model shows: descriptors of its inputs and
//! outputs, and a type-erased entry ([`Model`]) so that a harness can drive
//! any generated model with byte slices.

use crate::{Error, Result};

/// Element types of model inputs and outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    /// One byte per element, 0 or 1.
    Bool,
    F16,
    Bf16,
    /// The low-precision types: raw `u8` codes in generated code, one per
    /// byte for the 8-bit floats, packed two (4-bit) or four (2-bit) per
    /// byte with the first element in the low bits.
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    F8E8M0,
    F4E2M1,
    I4,
    U4,
    I2,
    U2,
    /// UTF-8 strings (feature `alloc`): no fixed size; they cross
    /// `Model::run_encoded` as one little-endian `u32` byte length then the
    /// bytes, per element.
    String,
}

impl Elem {
    /// Bytes per storage unit: per element, except for the packed 4-bit
    /// and 2-bit types whose unit is the byte holding several elements.
    pub const fn size(self) -> usize {
        match self {
            Elem::I8
            | Elem::U8
            | Elem::Bool
            | Elem::F8E4M3FN
            | Elem::F8E4M3FNUZ
            | Elem::F8E5M2
            | Elem::F8E5M2FNUZ
            | Elem::F8E8M0
            | Elem::F4E2M1
            | Elem::I4
            | Elem::U4
            | Elem::I2
            | Elem::U2 => 1,
            Elem::I16 | Elem::U16 | Elem::F16 | Elem::Bf16 => 2,
            Elem::F32 | Elem::I32 | Elem::U32 => 4,
            Elem::F64 | Elem::I64 | Elem::U64 => 8,
            Elem::String => 0,
        }
    }

    /// The ONNX name of the type (`float`, `int64`, ...).
    pub const fn onnx_name(self) -> &'static str {
        match self {
            Elem::F32 => "float",
            Elem::F64 => "double",
            Elem::I8 => "int8",
            Elem::I16 => "int16",
            Elem::I32 => "int32",
            Elem::I64 => "int64",
            Elem::U8 => "uint8",
            Elem::U16 => "uint16",
            Elem::U32 => "uint32",
            Elem::U64 => "uint64",
            Elem::Bool => "bool",
            Elem::F16 => "float16",
            Elem::Bf16 => "bfloat16",
            Elem::F8E4M3FN => "float8e4m3fn",
            Elem::F8E4M3FNUZ => "float8e4m3fnuz",
            Elem::F8E5M2 => "float8e5m2",
            Elem::F8E5M2FNUZ => "float8e5m2fnuz",
            Elem::F8E8M0 => "float8e8m0",
            Elem::F4E2M1 => "float4e2m1",
            Elem::I4 => "int4",
            Elem::U4 => "uint4",
            Elem::I2 => "int2",
            Elem::U2 => "uint2",
            Elem::String => "string",
        }
    }

    /// Elements per storage unit ([`Elem::size`] bytes): 2 for the 4-bit
    /// types, 4 for the 2-bit ones, 1 otherwise.
    pub const fn per_unit(self) -> usize {
        match self {
            Elem::F4E2M1 | Elem::I4 | Elem::U4 => 2,
            Elem::I2 | Elem::U2 => 4,
            _ => 1,
        }
    }

    /// Storage units `n` elements take (packed types round up).
    pub const fn units(self, n: usize) -> usize {
        n.div_ceil(self.per_unit())
    }
}

/// One model input or output: its ONNX name, shape and element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: &'static str,
    pub shape: &'static [usize],
    pub elem: Elem,
}

impl TensorInfo {
    /// The number of elements.
    pub const fn numel(&self) -> usize {
        let mut n = 1;
        let mut i = 0;
        while i < self.shape.len() {
            n *= self.shape[i];
            i += 1;
        }
        n
    }

    /// The size in bytes (packed types round up to whole bytes; 0 for
    /// strings, whose size depends on their data).
    pub const fn byte_size(&self) -> usize {
        self.elem.units(self.numel()) * self.elem.size()
    }
}

/// A generated model driven through byte slices (little-endian, each
/// aligned for its element type), in the order of [`Model::inputs`] and
/// [`Model::outputs`].
pub trait Model {
    fn inputs(&self) -> &'static [TensorInfo];
    fn outputs(&self) -> &'static [TensorInfo];
    /// Runs the model. Fails with [`Error::ShapeMismatch`] if a slice's
    /// length does not match its descriptor, [`Error::Misaligned`] if it is not
    /// aligned for its type.
    fn run_bytes(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result;

    /// Runs the model on byte inputs and returns each output's bytes: the
    /// way to drive models with string tensors, whose outputs have no size
    /// known in advance (strings are encoded as [`Elem::String`] says).
    /// Non-string inputs must be aligned as for [`Model::run_bytes`].
    #[cfg(feature = "alloc")]
    fn run_encoded(&mut self, inputs: &[&[u8]]) -> Result<alloc::vec::Vec<alloc::vec::Vec<u8>>> {
        use alloc::vec::Vec;
        let infos = self.outputs();
        let mut words: Vec<Vec<u64>> =
            infos.iter().map(|i| alloc::vec![0u64; i.byte_size().div_ceil(8)]).collect();
        {
            let mut outs: Vec<&mut [u8]> = Vec::with_capacity(words.len());
            for (w, i) in words.iter_mut().zip(infos) {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(w.as_mut_slice());
                outs.push(bytes.get_mut(..i.byte_size()).ok_or(Error::ShapeMismatch)?);
            }
            self.run_bytes(inputs, &mut outs)?;
        }
        let mut out = Vec::with_capacity(words.len());
        for (w, i) in words.iter().zip(infos) {
            let bytes: &[u8] = bytemuck::cast_slice(w.as_slice());
            out.push(bytes.get(..i.byte_size()).ok_or(Error::ShapeMismatch)?.to_vec());
        }
        Ok(out)
    }
    /// The outputs whose length along one axis depends on the data (see
    /// [`DataSized`]); none for most models.
    fn data_sized(&self) -> &'static [DataSized] {
        &[]
    }

    /// [`Model::run_bytes`], also writing into `lengths` (one entry per
    /// [`Model::data_sized`] entry, in order) the length each data-sized
    /// output took along its axis.
    fn run_bytes_sized(
        &mut self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        lengths: &mut [usize],
    ) -> Result {
        if !lengths.is_empty() {
            return Err(Error::ShapeMismatch);
        }
        self.run_bytes(inputs, outputs)
    }
}

/// An output whose length along `axis` is known only when the model runs
/// (the distinct values `Unique` finds, say). Its [`TensorInfo`] shape is
/// its capacity, the largest it can be; a run reports the actual length
/// `n`, and the output's buffer then starts with the tensor of the
/// capacity shape with `axis` set to `n`, packed in row-major order. The
/// rest of the buffer means nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSized {
    /// The output's position in [`Model::outputs`].
    pub output: usize,
    /// The axis whose length depends on the data.
    pub axis: usize,
}

/// Static data aligned for every element type and SIMD load (weights).
#[repr(C, align(64))]
pub struct Aligned<T: ?Sized>(pub T);

/// `bytes` as a fixed-size array of `T` (for `run_bytes`).
pub fn array_ref<T: bytemuck::AnyBitPattern, const N: usize>(bytes: &[u8]) -> Result<&[T; N]> {
    crate::arena::view::<T>(bytes)?.try_into().map_err(|_| Error::ShapeMismatch)
}

/// `bytes` as a mutable fixed-size array of `T` (for `run_bytes`).
pub fn array_mut<T: bytemuck::AnyBitPattern + bytemuck::NoUninit, const N: usize>(
    bytes: &mut [u8],
) -> Result<&mut [T; N]> {
    crate::arena::view_mut::<T>(bytes)?.try_into().map_err(|_| Error::ShapeMismatch)
}

/// Boolean bytes (each 0 or 1) copied into an array of `bool`.
pub fn bools_from_bytes<const N: usize>(bytes: &[u8]) -> Result<[bool; N]> {
    if bytes.len() != N {
        return Err(Error::ShapeMismatch);
    }
    let mut out = [false; N];
    for (o, &b) in out.iter_mut().zip(bytes) {
        *o = match b {
            0 => false,
            1 => true,
            _ => return Err(Error::InvalidParams),
        };
    }
    Ok(out)
}

/// Booleans written as bytes (0 or 1).
pub fn bools_to_bytes(values: &[bool], bytes: &mut [u8]) -> Result {
    if bytes.len() != values.len() {
        return Err(Error::ShapeMismatch);
    }
    for (b, &v) in bytes.iter_mut().zip(values) {
        *b = u8::from(v);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_count_elements_and_bytes() {
        let t = TensorInfo { name: "x", shape: &[2, 3], elem: Elem::F16 };
        assert_eq!((t.numel(), t.byte_size()), (6, 12));
        let s = TensorInfo { name: "s", shape: &[], elem: Elem::I64 };
        assert_eq!((s.numel(), s.byte_size()), (1, 8));
        let p = TensorInfo { name: "p", shape: &[5], elem: Elem::I4 };
        assert_eq!((p.numel(), p.byte_size()), (5, 3));
        let q = TensorInfo { name: "q", shape: &[3, 3], elem: Elem::U2 };
        assert_eq!((q.numel(), q.byte_size()), (9, 3));
        let f = TensorInfo { name: "f", shape: &[3], elem: Elem::F8E5M2 };
        assert_eq!(f.byte_size(), 3);
    }

    #[test]
    fn arrays_from_bytes_check_length_and_alignment() {
        let words = Aligned([1.0f32, 2.0]);
        let bytes: &[u8] = bytemuck::cast_slice(&words.0);
        let a: &[f32; 2] = array_ref(bytes).unwrap();
        assert_eq!(a, &[1.0, 2.0]);
        assert_eq!(array_ref::<f32, 3>(bytes).err(), Some(Error::ShapeMismatch));
        assert_eq!(array_ref::<f32, 1>(&bytes[1..5]).err(), Some(Error::Misaligned));
    }

    #[test]
    fn booleans_cross_as_zero_or_one() {
        assert_eq!(bools_from_bytes::<3>(&[1, 0, 1]), Ok([true, false, true]));
        assert_eq!(bools_from_bytes::<1>(&[2]), Err(Error::InvalidParams));
        let mut out = [9u8; 2];
        bools_to_bytes(&[false, true], &mut out).unwrap();
        assert_eq!(out, [0, 1]);
    }
}
