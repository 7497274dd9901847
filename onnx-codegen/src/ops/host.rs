//! Tensors in host memory for constant folding: typed vectors, converted from
//! and to the IR's little-endian bytes.

use crate::ir::{ElemType, Tensor, TensorData, TensorType};
use bytes::Bytes;
use onnx_codegen_runtime::{bf16, f16};

/// The elements of a host tensor, one vector type per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    F64(Vec<f64>),
    I8(Vec<i8>),
    I16(Vec<i16>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    U8(Vec<u8>),
    U16(Vec<u16>),
    U32(Vec<u32>),
    U64(Vec<u64>),
    Bool(Vec<bool>),
    F16(Vec<f16>),
    Bf16(Vec<bf16>),
}

/// A tensor being folded: its type and its elements.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub ty: TensorType,
    pub data: HostData,
}

/// Element types that live in a [`HostData`] variant.
pub trait HostElem: Copy + Default + bytemuck::Pod {
    fn slice(d: &HostData) -> Option<&[Self]>;
    fn slice_mut(d: &mut HostData) -> Option<&mut [Self]>;
}

macro_rules! host_elem {
    ($t:ty, $v:ident) => {
        impl HostElem for $t {
            fn slice(d: &HostData) -> Option<&[Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn slice_mut(d: &mut HostData) -> Option<&mut [Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

host_elem!(f32, F32);
host_elem!(f64, F64);
host_elem!(i8, I8);
host_elem!(i16, I16);
host_elem!(i32, I32);
host_elem!(i64, I64);
host_elem!(u8, U8);
host_elem!(u16, U16);
host_elem!(u32, U32);
host_elem!(u64, U64);
host_elem!(f16, F16);
host_elem!(bf16, Bf16);

/// Element types of host tensors, `bool` included (which [`HostElem`] cannot
/// take: it is not `Pod`): what data-movement kernels fold over.
pub trait Data: Copy + Default + 'static {
    fn of(d: &HostData) -> Option<&[Self]>;
    fn of_mut(d: &mut HostData) -> Option<&mut [Self]>;
}

macro_rules! data {
    ($($t:ty => $v:ident),*) => {$(
        impl Data for $t {
            fn of(d: &HostData) -> Option<&[Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn of_mut(d: &mut HostData) -> Option<&mut [Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

data!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64, u8 => U8,
    u16 => U16, u32 => U32, u64 => U64, bool => Bool, f16 => F16, bf16 => Bf16);

/// Calls `$f::<T>(args)` with `T` the host type of any element type with a
/// host form ([`Data`]).
#[macro_export]
#[doc(hidden)]
macro_rules! by_data_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            $crate::ir::ElemType::Bool => $f::<bool>($($arg),*),
            $crate::ir::ElemType::Float16 => $f::<$crate::ops::f16>($($arg),*),
            $crate::ir::ElemType::Bfloat16 => $f::<$crate::ops::bf16>($($arg),*),
            other => $crate::by_num_type!(other, $f($($arg),*)),
        }
    };
}

impl HostTensor {
    /// A zero-filled tensor of type `ty`, or `None` if the element type has
    /// no host form (strings, sub-byte and float8 types) or is too large.
    pub fn zeros(ty: &TensorType) -> Option<HostTensor> {
        let n = ty.numel()?;
        let data = match ty.elem {
            ElemType::Float => HostData::F32(vec![0.0; n]),
            ElemType::Double => HostData::F64(vec![0.0; n]),
            ElemType::Int8 => HostData::I8(vec![0; n]),
            ElemType::Int16 => HostData::I16(vec![0; n]),
            ElemType::Int32 => HostData::I32(vec![0; n]),
            ElemType::Int64 => HostData::I64(vec![0; n]),
            ElemType::Uint8 => HostData::U8(vec![0; n]),
            ElemType::Uint16 => HostData::U16(vec![0; n]),
            ElemType::Uint32 => HostData::U32(vec![0; n]),
            ElemType::Uint64 => HostData::U64(vec![0; n]),
            ElemType::Bool => HostData::Bool(vec![false; n]),
            ElemType::Float16 => HostData::F16(vec![f16::ZERO; n]),
            ElemType::Bfloat16 => HostData::Bf16(vec![bf16::ZERO; n]),
            _ => return None,
        };
        Some(HostTensor { ty: ty.clone(), data })
    }

    /// The host form of an IR tensor, or `None` if its element type has none.
    pub fn from_tensor(t: &Tensor) -> Option<HostTensor> {
        let ty = t.tensor_type()?;
        let TensorData::Bytes(bytes) = &t.data else { return None };
        fn collect<T: bytemuck::Pod>(b: &[u8]) -> Vec<T> {
            bytemuck::pod_collect_to_vec(b)
        }
        let data = match ty.elem {
            ElemType::Float => HostData::F32(collect(bytes)),
            ElemType::Double => HostData::F64(collect(bytes)),
            ElemType::Int8 => HostData::I8(collect(bytes)),
            ElemType::Int16 => HostData::I16(collect(bytes)),
            ElemType::Int32 => HostData::I32(collect(bytes)),
            ElemType::Int64 => HostData::I64(collect(bytes)),
            ElemType::Uint8 => HostData::U8(collect(bytes)),
            ElemType::Uint16 => HostData::U16(collect(bytes)),
            ElemType::Uint32 => HostData::U32(collect(bytes)),
            ElemType::Uint64 => HostData::U64(collect(bytes)),
            ElemType::Bool => HostData::Bool(bytes.iter().map(|&b| b != 0).collect()),
            ElemType::Float16 => HostData::F16(collect(bytes)),
            ElemType::Bfloat16 => HostData::Bf16(collect(bytes)),
            _ => return None,
        };
        if !cfg!(target_endian = "little") {
            // The IR's bytes are little-endian; so are the hosts we build on.
            return None;
        }
        Some(HostTensor { ty, data })
    }

    /// The IR tensor holding these values, named `name`.
    pub fn to_tensor(&self, name: &str) -> Tensor {
        let bytes: Vec<u8> = match &self.data {
            HostData::F32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::F64(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I8(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I16(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::I64(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::U8(v) => v.clone(),
            HostData::U16(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::U32(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::U64(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
            HostData::F16(v) => bytemuck::cast_slice(v).to_vec(),
            HostData::Bf16(v) => bytemuck::cast_slice(v).to_vec(),
        };
        Tensor {
            name: name.to_owned(),
            elem: self.ty.elem,
            dims: self.ty.dims.iter().map(|&d| d as u64).collect(),
            data: TensorData::Bytes(Bytes::from(bytes)),
        }
    }

    /// The elements as `T`, if the tensor holds `T`.
    pub fn get<T: HostElem>(&self) -> Option<&[T]> {
        T::slice(&self.data)
    }

    /// The elements as `T`, mutably, if the tensor holds `T`.
    pub fn get_mut<T: HostElem>(&mut self) -> Option<&mut [T]> {
        T::slice_mut(&mut self.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_round_trip_through_host_form() {
        let t = Tensor::from_i64s("s", vec![3], &[1, -2, 3]);
        let h = HostTensor::from_tensor(&t).unwrap();
        assert_eq!(h.data, HostData::I64(vec![1, -2, 3]));
        assert_eq!(h.to_tensor("s"), t);
        let z = HostTensor::zeros(&TensorType::new(ElemType::Bool, vec![2, 2])).unwrap();
        assert_eq!(z.data, HostData::Bool(vec![false; 4]));
    }
}
