//! The compiler IR: what every pass after loading works on.
//!
//! Unlike the protobuf messages, the IR is resolved: values are defined once
//! and referenced by id ([`ValueId`]), operators are resolved to their schema
//! version, tensors hold checked, packed data, and subgraphs list the outer
//! values they capture. Lowering from `ModelProto` (with validation) is in
//! [`crate::passes`].

mod graph;
pub mod lowering;
mod model;
pub mod schema;
mod tensor;
mod types;

pub use graph::{AttrValue, Attribute, Graph, Node, NodeId, Op, Use, Value, ValueId, ValueKind};
pub use lowering::Lowering;
pub use model::{Function, Metadata, Model};
pub(crate) use tensor::typed_data_bytes;
pub use tensor::{SparseTensor, Tensor, TensorData, element_count};
pub use types::{AttrType, Dim, ElemType, Shape, TensorType, Type};
