//! Element types, shapes, value types and attribute types.

use std::fmt;

/// A tensor element type (`TensorProto.DataType`, without `UNDEFINED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    Float,
    Uint8,
    Int8,
    Uint16,
    Int16,
    Int32,
    Int64,
    String,
    Bool,
    Float16,
    Double,
    Uint32,
    Uint64,
    Complex64,
    Complex128,
    Bfloat16,
    Float8E4M3FN,
    Float8E4M3FNUZ,
    Float8E5M2,
    Float8E5M2FNUZ,
    Uint4,
    Int4,
    Float4E2M1,
    Float8E8M0,
    Uint2,
    Int2,
    Float6E2M3,
    Float6E3M2,
}

impl ElemType {
    /// Every element type, in proto-code order.
    pub const ALL: [ElemType; 28] = [
        ElemType::Float,
        ElemType::Uint8,
        ElemType::Int8,
        ElemType::Uint16,
        ElemType::Int16,
        ElemType::Int32,
        ElemType::Int64,
        ElemType::String,
        ElemType::Bool,
        ElemType::Float16,
        ElemType::Double,
        ElemType::Uint32,
        ElemType::Uint64,
        ElemType::Complex64,
        ElemType::Complex128,
        ElemType::Bfloat16,
        ElemType::Float8E4M3FN,
        ElemType::Float8E4M3FNUZ,
        ElemType::Float8E5M2,
        ElemType::Float8E5M2FNUZ,
        ElemType::Uint4,
        ElemType::Int4,
        ElemType::Float4E2M1,
        ElemType::Float8E8M0,
        ElemType::Uint2,
        ElemType::Int2,
        ElemType::Float6E2M3,
        ElemType::Float6E3M2,
    ];

    /// The element type of a `TensorProto.DataType` code; `None` for
    /// `UNDEFINED` (0) and unknown codes.
    pub fn from_proto(code: i32) -> Option<ElemType> {
        let index = usize::try_from(code).ok()?.checked_sub(1)?;
        ElemType::ALL.get(index).copied()
    }

    /// The `TensorProto.DataType` code.
    pub fn to_proto(self) -> i32 {
        self as i32 + 1
    }

    /// The name ONNX type strings use: `float`, `int64`, `float8e4m3fn`, ...
    pub fn name(self) -> &'static str {
        match self {
            ElemType::Float => "float",
            ElemType::Uint8 => "uint8",
            ElemType::Int8 => "int8",
            ElemType::Uint16 => "uint16",
            ElemType::Int16 => "int16",
            ElemType::Int32 => "int32",
            ElemType::Int64 => "int64",
            ElemType::String => "string",
            ElemType::Bool => "bool",
            ElemType::Float16 => "float16",
            ElemType::Double => "double",
            ElemType::Uint32 => "uint32",
            ElemType::Uint64 => "uint64",
            ElemType::Complex64 => "complex64",
            ElemType::Complex128 => "complex128",
            ElemType::Bfloat16 => "bfloat16",
            ElemType::Float8E4M3FN => "float8e4m3fn",
            ElemType::Float8E4M3FNUZ => "float8e4m3fnuz",
            ElemType::Float8E5M2 => "float8e5m2",
            ElemType::Float8E5M2FNUZ => "float8e5m2fnuz",
            ElemType::Uint4 => "uint4",
            ElemType::Int4 => "int4",
            ElemType::Float4E2M1 => "float4e2m1",
            ElemType::Float8E8M0 => "float8e8m0",
            ElemType::Uint2 => "uint2",
            ElemType::Int2 => "int2",
            ElemType::Float6E2M3 => "float6e2m3",
            ElemType::Float6E3M2 => "float6e3m2",
        }
    }

    /// The element type called `name` (as [`ElemType::name`] spells it).
    pub fn from_name(name: &str) -> Option<ElemType> {
        ElemType::ALL.into_iter().find(|e| e.name() == name)
    }

    /// The size of one element in bits; `None` for strings, which have no
    /// fixed size. Sub-byte types (2, 4 and 6 bits) are packed densely, the
    /// first element in the least significant bits.
    pub fn bits(self) -> Option<u32> {
        Some(match self {
            ElemType::String => return None,
            ElemType::Uint2 | ElemType::Int2 => 2,
            ElemType::Uint4 | ElemType::Int4 | ElemType::Float4E2M1 => 4,
            ElemType::Float6E2M3 | ElemType::Float6E3M2 => 6,
            ElemType::Uint8
            | ElemType::Int8
            | ElemType::Bool
            | ElemType::Float8E4M3FN
            | ElemType::Float8E4M3FNUZ
            | ElemType::Float8E5M2
            | ElemType::Float8E5M2FNUZ
            | ElemType::Float8E8M0 => 8,
            ElemType::Uint16 | ElemType::Int16 | ElemType::Float16 | ElemType::Bfloat16 => 16,
            ElemType::Float | ElemType::Int32 | ElemType::Uint32 => 32,
            ElemType::Int64 | ElemType::Uint64 | ElemType::Double | ElemType::Complex64 => 64,
            ElemType::Complex128 => 128,
        })
    }

    /// The number of bytes `count` packed elements take, or `None` on
    /// overflow or for strings.
    pub fn byte_size(self, count: u64) -> Option<u64> {
        let bits = count.checked_mul(u64::from(self.bits()?))?;
        Some(bits.div_ceil(8))
    }
}

impl fmt::Display for ElemType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One dimension of a static shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dim {
    /// A known size.
    Static(u64),
    /// A named size variable (`N`); equal names are equal sizes model-wide.
    Symbolic(String),
    /// Unknown, unrelated to any other dimension.
    Unknown,
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(n) => write!(f, "{n}"),
            Dim::Symbolic(s) => f.write_str(s),
            Dim::Unknown => f.write_str("?"),
        }
    }
}

/// A static tensor shape: `None` when even the rank is unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Shape {
    pub dims: Option<Vec<Dim>>,
}

impl Shape {
    /// A shape of unknown rank.
    pub fn unknown() -> Shape {
        Shape { dims: None }
    }

    /// A shape with these dimensions.
    pub fn known(dims: Vec<Dim>) -> Shape {
        Shape { dims: Some(dims) }
    }

    /// A shape whose dimensions are all known.
    pub fn fixed(dims: &[u64]) -> Shape {
        Shape::known(dims.iter().map(|&d| Dim::Static(d)).collect())
    }

    /// The rank, when known.
    pub fn rank(&self) -> Option<usize> {
        self.dims.as_ref().map(Vec::len)
    }

    /// All dimension sizes, when every one is known.
    pub fn static_dims(&self) -> Option<Vec<u64>> {
        self.dims
            .as_ref()?
            .iter()
            .map(|d| if let Dim::Static(n) = d { Some(*n) } else { None })
            .collect()
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.dims {
            None => f.write_str("[*]"),
            Some(dims) => {
                f.write_str("[")?;
                for (i, d) in dims.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// The type of a value flowing along graph edges.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Type {
    /// A dense tensor; `elem` is `None` when the model leaves it unspecified.
    Tensor { elem: Option<ElemType>, shape: Shape },
    /// A sparse tensor.
    SparseTensor { elem: Option<ElemType>, shape: Shape },
    /// A sequence of values of one type.
    Sequence(Box<Type>),
    /// A map from a key element type to values of one type.
    Map { key: ElemType, value: Box<Type> },
    /// A value that may be absent.
    Optional(Box<Type>),
    /// An opaque type, by domain and name.
    Opaque { domain: String, name: String },
    /// A type record with no type set.
    Unknown,
}

impl Type {
    /// A tensor type with a fully known element type and shape.
    pub fn tensor(elem: ElemType, dims: &[u64]) -> Type {
        Type::Tensor { elem: Some(elem), shape: Shape::fixed(dims) }
    }

    /// The tensor element type and shape, if this is a dense tensor type.
    pub fn as_tensor(&self) -> Option<(Option<ElemType>, &Shape)> {
        match self {
            Type::Tensor { elem, shape } => Some((*elem, shape)),
            _ => None,
        }
    }
}

impl fmt::Display for Type {
    /// The ONNX type-string form: `tensor(float)[N,3]`, `seq(tensor(int64))`, ...
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let elem = |e: &Option<ElemType>| e.map_or("?", ElemType::name);
        match self {
            Type::Tensor { elem: e, shape } => write!(f, "tensor({}){shape}", elem(e)),
            Type::SparseTensor { elem: e, shape } => {
                write!(f, "sparse_tensor({}){shape}", elem(e))
            }
            Type::Sequence(t) => write!(f, "seq({t})"),
            Type::Map { key, value } => write!(f, "map({key}, {value})"),
            Type::Optional(t) => write!(f, "optional({t})"),
            Type::Opaque { domain, name } => write!(f, "opaque({domain}, {name})"),
            Type::Unknown => f.write_str("?"),
        }
    }
}

/// The kind of value an attribute holds (`AttributeProto.AttributeType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttrType {
    Float,
    Int,
    String,
    Tensor,
    Graph,
    SparseTensor,
    Type,
    Floats,
    Ints,
    Strings,
    Tensors,
    Graphs,
    SparseTensors,
    Types,
}

impl AttrType {
    /// The type of an `AttributeType` code; `None` for `UNDEFINED` and unknown codes.
    pub fn from_proto(code: i32) -> Option<AttrType> {
        Some(match code {
            1 => AttrType::Float,
            2 => AttrType::Int,
            3 => AttrType::String,
            4 => AttrType::Tensor,
            5 => AttrType::Graph,
            6 => AttrType::Floats,
            7 => AttrType::Ints,
            8 => AttrType::Strings,
            9 => AttrType::Tensors,
            10 => AttrType::Graphs,
            11 => AttrType::SparseTensor,
            12 => AttrType::SparseTensors,
            13 => AttrType::Type,
            14 => AttrType::Types,
            _ => return None,
        })
    }

    /// The `AttributeType` code.
    pub fn to_proto(self) -> i32 {
        match self {
            AttrType::Float => 1,
            AttrType::Int => 2,
            AttrType::String => 3,
            AttrType::Tensor => 4,
            AttrType::Graph => 5,
            AttrType::Floats => 6,
            AttrType::Ints => 7,
            AttrType::Strings => 8,
            AttrType::Tensors => 9,
            AttrType::Graphs => 10,
            AttrType::SparseTensor => 11,
            AttrType::SparseTensors => 12,
            AttrType::Type => 13,
            AttrType::Types => 14,
        }
    }

    /// The name the proto enumeration uses: `FLOAT`, `INTS`, `TYPE_PROTO`, ...
    pub fn name(self) -> &'static str {
        match self {
            AttrType::Float => "FLOAT",
            AttrType::Int => "INT",
            AttrType::String => "STRING",
            AttrType::Tensor => "TENSOR",
            AttrType::Graph => "GRAPH",
            AttrType::SparseTensor => "SPARSE_TENSOR",
            AttrType::Type => "TYPE_PROTO",
            AttrType::Floats => "FLOATS",
            AttrType::Ints => "INTS",
            AttrType::Strings => "STRINGS",
            AttrType::Tensors => "TENSORS",
            AttrType::Graphs => "GRAPHS",
            AttrType::SparseTensors => "SPARSE_TENSORS",
            AttrType::Types => "TYPE_PROTOS",
        }
    }
}

impl fmt::Display for AttrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elem_type_codes_names_and_sizes() {
        for (i, e) in ElemType::ALL.iter().enumerate() {
            assert_eq!(e.to_proto(), i as i32 + 1);
            assert_eq!(ElemType::from_proto(e.to_proto()), Some(*e));
            assert_eq!(ElemType::from_name(e.name()), Some(*e));
        }
        assert_eq!(ElemType::from_proto(0), None);
        assert_eq!(ElemType::from_proto(29), None);
        assert_eq!(ElemType::from_proto(-1), None);
        assert_eq!(ElemType::from_proto(7), Some(ElemType::Int64));
        assert_eq!(ElemType::from_proto(16), Some(ElemType::Bfloat16));
        assert_eq!(ElemType::from_proto(24), Some(ElemType::Float8E8M0));
        assert_eq!(ElemType::Complex128.bits(), Some(128));
        assert_eq!(ElemType::String.bits(), None);
        assert_eq!(ElemType::Int4.byte_size(5), Some(3));
        assert_eq!(ElemType::Uint2.byte_size(5), Some(2));
        assert_eq!(ElemType::Float6E2M3.byte_size(5), Some(4));
        assert_eq!(ElemType::Float.byte_size(u64::MAX / 2), None);
    }

    #[test]
    fn attr_type_codes_round_trip() {
        for code in 1..=14 {
            assert_eq!(AttrType::from_proto(code).map(AttrType::to_proto), Some(code));
        }
        assert_eq!(AttrType::from_proto(0), None);
        assert_eq!(AttrType::from_proto(13), Some(AttrType::Type));
    }

    #[test]
    fn types_print_as_type_strings() {
        let t = Type::Tensor {
            elem: Some(ElemType::Float),
            shape: Shape::known(vec![Dim::Symbolic("N".into()), Dim::Static(3), Dim::Unknown]),
        };
        assert_eq!(t.to_string(), "tensor(float)[N,3,?]");
        assert_eq!(Type::Sequence(Box::new(t)).to_string(), "seq(tensor(float)[N,3,?])");
    }
}

/// A tensor type with every dimension known: what code generation works on,
/// after symbolic dimensions are bound and shapes inferred.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub elem: ElemType,
    pub dims: Vec<usize>,
}

impl TensorType {
    pub fn new(elem: ElemType, dims: Vec<usize>) -> TensorType {
        TensorType { elem, dims }
    }

    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The number of elements, `None` on overflow.
    pub fn numel(&self) -> Option<usize> {
        self.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
    }

    /// The size in bytes, `None` on overflow or for types without a fixed size.
    pub fn byte_size(&self) -> Option<usize> {
        let n = u64::try_from(self.numel()?).ok()?;
        usize::try_from(self.elem.byte_size(n)?).ok()
    }

    /// The same element type with other dims.
    pub fn with_dims(&self, dims: Vec<usize>) -> TensorType {
        TensorType { elem: self.elem, dims }
    }
}

impl fmt::Display for TensorType {
    /// `float32[1, 3, 224, 224]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.elem)?;
        for (i, d) in self.dims.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}
