//! The canonical form of a model: what "the same model" means for round-trip
//! checks (binary -> text -> binary, and later our IR -> protobuf).
//!
//! Two models are the same when their canonical forms encode to the same
//! bytes. [`canonicalize_model`] rewrites, in the model, its graph, every
//! subgraph held in attributes (at any depth) and every model-local function:
//!
//! * **Tensor storage.** Every tensor (initializers, sparse initializers'
//!   values and indices, attribute tensors and tensor lists, sparse tensor
//!   attributes) holds its values in `raw_data`, little-endian, as the spec
//!   lays it out for `raw_data`, and no typed field (`float_data`,
//!   `int32_data`, ...). The typed fields are converted following the spec's
//!   rules for them: `int32_data` holds one element per entry for 8/16/32-bit
//!   integers, `bool`, and the bit patterns of `float16`, `bfloat16` and
//!   `float8*` (truncated to the element width), one packed byte per entry
//!   for 4-bit types (two elements) and 2-bit types (four elements), and one
//!   6-bit code per entry for `float6*` (packed four to three bytes in
//!   `raw_data`); `uint64_data` holds `uint32` and `uint64`; `float_data` and
//!   `double_data` hold complex numbers as (real, imaginary) pairs, which is
//!   also their `raw_data` layout. When both `raw_data` and a typed field are
//!   present, `raw_data` wins (the spec reads it first). Strings stay in
//!   `string_data`. Tensors with external data, and element types this
//!   module does not know, keep their storage. A `data_location` of
//!   `DEFAULT` is cleared (it is the meaning of an absent one).
//!   *Why:* the text syntax only has typed values, and the reference parser
//!   stores them in the typed fields, while most files use `raw_data`.
//! * **Empty strings are absent.** Graph names, node domains and overloads,
//!   tensor names, opset-import domains, function domains and overloads,
//!   opaque-type domains and names, and string-string entries' keys and
//!   values: `Some("")` becomes `None`. *Why:* the reference parser always
//!   sets these fields, even when the text has no value for them.
//! * **Documentation is dropped.** `doc_string` of graphs, nodes, attributes,
//!   tensors and value infos; `metadata_props` of graphs, nodes, value infos,
//!   tensors and functions; `denotation` of types and dimensions; and a
//!   value-info type that then holds nothing becomes absent. *Why:* the text
//!   syntax has no place for them, so the reference round trip drops them;
//!   they do not change what the model computes. The model's own
//!   `doc_string` and `metadata_props`, which the syntax carries, are kept.
//!
//! What the text syntax cannot carry but that changes meaning is kept here,
//! so that a round trip that loses it fails: `training_info`, sparse
//! initializers, sparse tensor attributes, the elements of tensor, graph and
//! type lists in attributes, quantization annotations, device
//! configurations, tensor segments.
//!
//! The traversal uses an explicit work list, so deeply nested subgraphs cannot
//! exhaust the stack.
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, SparseTensorProto,
    StringStringEntryProto, TensorProto, TypeProto, ValueInfoProto, tensor_proto::DataLocation,
    tensor_proto::DataType, type_proto,
};

/// How an element type's values are laid out in `raw_data` and which typed
/// field holds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Storage {
    /// `int32_data`, one element per entry; `width` little-endian bytes per
    /// element in `raw_data`; `signed` tells how to widen raw bytes.
    Int32 { width: usize, signed: bool },
    /// `int32_data`, one packed byte per entry (4-bit or 2-bit elements);
    /// `raw_data` holds the same bytes.
    Packed,
    /// `int32_data`, one 6-bit code per entry; `raw_data` packs four codes
    /// into three bytes, LSB first.
    Six,
    /// `int64_data`, 8 bytes per element.
    Int64,
    /// `uint64_data`, 4 bytes per element in `raw_data`.
    Uint32,
    /// `uint64_data`, 8 bytes per element.
    Uint64,
    /// `float_data` (`float` and `complex64`), 4 bytes per value.
    Float,
    /// `double_data` (`double` and `complex128`), 8 bytes per value.
    Double,
    /// `string_data`; never in `raw_data`.
    String,
}

/// The storage of element type `code`, or `None` for undefined or unknown
/// codes.
pub(crate) fn storage(code: i32) -> Option<Storage> {
    use DataType as D;
    let i32w = |width, signed| Some(Storage::Int32 { width, signed });
    match D::try_from(code).ok()? {
        D::Undefined => None,
        D::Float | D::Complex64 => Some(Storage::Float),
        D::Double | D::Complex128 => Some(Storage::Double),
        D::Int8 => i32w(1, true),
        D::Int16 => i32w(2, true),
        D::Int32 => i32w(4, true),
        D::Uint8
        | D::Bool
        | D::Float8e4m3fn
        | D::Float8e4m3fnuz
        | D::Float8e5m2
        | D::Float8e5m2fnuz
        | D::Float8e8m0 => i32w(1, false),
        D::Uint16 | D::Float16 | D::Bfloat16 => i32w(2, false),
        D::Uint4 | D::Int4 | D::Float4e2m1 | D::Uint2 | D::Int2 => Some(Storage::Packed),
        D::Float6e2m3 | D::Float6e3m2 => Some(Storage::Six),
        D::Int64 => Some(Storage::Int64),
        D::Uint32 => Some(Storage::Uint32),
        D::Uint64 => Some(Storage::Uint64),
        D::String => Some(Storage::String),
    }
}

/// Rewrites `model` into its canonical form (see the module documentation).
pub fn canonicalize_model(model: &mut ModelProto) {
    for o in &mut model.opset_import {
        clear_empty(&mut o.domain);
    }
    model.metadata_props.iter_mut().for_each(canonicalize_entry);
    let mut work = Work::default();
    if let Some(g) = model.graph.as_mut() {
        work.graphs.push(g);
    }
    for f in &mut model.functions {
        canonicalize_function_header(f);
        work.nodes.extend(f.node.iter_mut());
        work.value_infos.extend(f.value_info.iter_mut());
        work.attributes.extend(f.attribute_proto.iter_mut());
    }
    for t in &mut model.training_info {
        if let Some(g) = t.initialization.as_mut() {
            work.graphs.push(g);
        }
        if let Some(g) = t.algorithm.as_mut() {
            work.graphs.push(g);
        }
    }
    work.run();
}

/// Rewrites one tensor's storage, name and documentation into canonical form.
pub fn canonicalize_tensor(t: &mut TensorProto) {
    clear_empty(&mut t.name);
    t.doc_string = None;
    t.metadata_props.clear();
    t.external_data.iter_mut().for_each(canonicalize_entry);
    if t.data_location == Some(DataLocation::Default as i32) {
        t.data_location = None;
    }
    if t.data_location.is_some() {
        return;
    }
    let Some(st) = storage(t.data_type()) else { return };
    if st == Storage::String {
        return;
    }
    let raw = match t.raw_data.take() {
        Some(raw) => raw.to_vec(),
        None => typed_to_raw(t, st),
    };
    t.float_data.clear();
    t.int32_data.clear();
    t.string_data.clear();
    t.int64_data.clear();
    t.double_data.clear();
    t.uint64_data.clear();
    t.raw_data = Some(raw.into());
}

/// The `raw_data` bytes for the values in `t`'s typed field.
fn typed_to_raw(t: &TensorProto, st: Storage) -> Vec<u8> {
    let mut raw = Vec::new();
    match st {
        Storage::Int32 { width, .. } => {
            for v in &t.int32_data {
                raw.extend_from_slice(&v.to_le_bytes()[..width]);
            }
        }
        Storage::Packed => raw.extend(t.int32_data.iter().map(|v| *v as u8)),
        Storage::Six => raw = pack_six(&t.int32_data),
        Storage::Int64 => t.int64_data.iter().for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        Storage::Uint32 => {
            t.uint64_data.iter().for_each(|v| raw.extend_from_slice(&(*v as u32).to_le_bytes()))
        }
        Storage::Uint64 => {
            t.uint64_data.iter().for_each(|v| raw.extend_from_slice(&v.to_le_bytes()))
        }
        Storage::Float => t.float_data.iter().for_each(|v| raw.extend_from_slice(&v.to_le_bytes())),
        Storage::Double => {
            t.double_data.iter().for_each(|v| raw.extend_from_slice(&v.to_le_bytes()))
        }
        Storage::String => {}
    }
    raw
}

/// Packs 6-bit codes (the low 6 bits of each value) LSB first into
/// `ceil(6 n / 8)` bytes.
fn pack_six(codes: &[i32]) -> Vec<u8> {
    let mut raw = vec![0u8; (codes.len() * 6).div_ceil(8)];
    for (i, c) in codes.iter().enumerate() {
        let bit = i * 6;
        let shifted = ((*c as u16) & 0x3f) << (bit % 8);
        if let Some(b) = raw.get_mut(bit / 8) {
            *b |= shifted as u8;
        }
        if let Some(b) = raw.get_mut(bit / 8 + 1) {
            *b |= (shifted >> 8) as u8;
        }
    }
    raw
}

fn clear_empty(s: &mut Option<String>) {
    if s.as_deref() == Some("") {
        *s = None;
    }
}

fn canonicalize_entry(e: &mut StringStringEntryProto) {
    clear_empty(&mut e.key);
    clear_empty(&mut e.value);
}

fn canonicalize_function_header(f: &mut FunctionProto) {
    clear_empty(&mut f.domain);
    clear_empty(&mut f.overload);
    f.metadata_props.clear();
    for o in &mut f.opset_import {
        clear_empty(&mut o.domain);
    }
}

/// Messages still to visit; each kind is handled without recursion.
#[derive(Default)]
struct Work<'a> {
    graphs: Vec<&'a mut GraphProto>,
    nodes: Vec<&'a mut NodeProto>,
    attributes: Vec<&'a mut AttributeProto>,
    value_infos: Vec<&'a mut ValueInfoProto>,
    types: Vec<&'a mut TypeProto>,
    tensors: Vec<&'a mut TensorProto>,
}

impl<'a> Work<'a> {
    fn sparse(&mut self, s: &'a mut SparseTensorProto) {
        self.tensors.extend(s.values.as_mut());
        self.tensors.extend(s.indices.as_mut());
    }

    fn run(mut self) {
        loop {
            if let Some(g) = self.graphs.pop() {
                let GraphProto {
                    node,
                    name,
                    initializer,
                    sparse_initializer,
                    doc_string,
                    input,
                    output,
                    value_info,
                    quantization_annotation: _,
                    metadata_props,
                } = g;
                clear_empty(name);
                *doc_string = None;
                metadata_props.clear();
                self.nodes.extend(node.iter_mut());
                self.tensors.extend(initializer.iter_mut());
                for s in sparse_initializer.iter_mut() {
                    self.sparse(s);
                }
                self.value_infos.extend(input.iter_mut());
                self.value_infos.extend(output.iter_mut());
                self.value_infos.extend(value_info.iter_mut());
            } else if let Some(n) = self.nodes.pop() {
                clear_empty(&mut n.domain);
                clear_empty(&mut n.overload);
                n.doc_string = None;
                n.metadata_props.clear();
                self.attributes.extend(n.attribute.iter_mut());
            } else if let Some(a) = self.attributes.pop() {
                let AttributeProto {
                    doc_string, t, g, sparse_tensor, tp, tensors, graphs, sparse_tensors, type_protos, ..
                } = a;
                *doc_string = None;
                self.tensors.extend(t.as_deref_mut());
                self.graphs.extend(g.as_deref_mut());
                if let Some(s) = sparse_tensor.as_deref_mut() {
                    self.sparse(s);
                }
                self.types.extend(tp.as_deref_mut());
                self.tensors.extend(tensors.iter_mut());
                self.graphs.extend(graphs.iter_mut());
                for s in sparse_tensors.iter_mut() {
                    self.sparse(s);
                }
                self.types.extend(type_protos.iter_mut());
            } else if let Some(v) = self.value_infos.pop() {
                v.doc_string = None;
                v.metadata_props.clear();
                if let Some(t) = v.r#type.as_mut() {
                    t.denotation = None;
                }
                if v.r#type.as_ref().is_some_and(|t| t.value.is_none()) {
                    v.r#type = None;
                }
                self.types.extend(v.r#type.as_mut());
            } else if let Some(t) = self.types.pop() {
                t.denotation = None;
                match t.value.as_mut() {
                    Some(type_proto::Value::TensorType(tt)) => {
                        for d in tt.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
                            d.denotation = None;
                        }
                    }
                    Some(type_proto::Value::SparseTensorType(tt)) => {
                        for d in tt.shape.iter_mut().flat_map(|s| s.dim.iter_mut()) {
                            d.denotation = None;
                        }
                    }
                    Some(type_proto::Value::SequenceType(s)) => {
                        self.types.extend(s.elem_type.as_deref_mut())
                    }
                    Some(type_proto::Value::MapType(m)) => {
                        self.types.extend(m.value_type.as_deref_mut())
                    }
                    Some(type_proto::Value::OptionalType(o)) => {
                        self.types.extend(o.elem_type.as_deref_mut())
                    }
                    Some(type_proto::Value::OpaqueType(o)) => {
                        clear_empty(&mut o.domain);
                        clear_empty(&mut o.name);
                    }
                    None => {}
                }
            } else if let Some(t) = self.tensors.pop() {
                canonicalize_tensor(t);
            } else {
                break;
            }
        }
    }
}
