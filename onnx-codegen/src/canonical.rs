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
use crate::ir::{ElemType, typed_data_bytes};
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
    let Some(elem) = ElemType::from_proto(t.data_type()) else { return };
    if elem == ElemType::String {
        return;
    }
    let raw = match t.raw_data.take() {
        Some(raw) => raw,
        None => typed_data_bytes(t, elem),
    };
    t.float_data.clear();
    t.int32_data.clear();
    t.string_data.clear();
    t.int64_data.clear();
    t.double_data.clear();
    t.uint64_data.clear();
    t.raw_data = Some(raw);
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
                    doc_string,
                    t,
                    g,
                    sparse_tensor,
                    tp,
                    tensors,
                    graphs,
                    sparse_tensors,
                    type_protos,
                    ..
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{OperatorSetIdProto, attribute_proto::AttributeType};

    fn tensor(dt: DataType) -> TensorProto {
        TensorProto { data_type: Some(dt as i32), dims: vec![2], ..Default::default() }
    }

    fn raw_of(mut t: TensorProto) -> Vec<u8> {
        canonicalize_tensor(&mut t);
        assert!(t.float_data.is_empty() && t.int32_data.is_empty() && t.int64_data.is_empty());
        assert!(t.double_data.is_empty() && t.uint64_data.is_empty());
        t.raw_data.map(|b| b.to_vec()).unwrap_or_default()
    }

    #[test]
    fn float_and_complex_values_become_little_endian_ieee() {
        let mut t = tensor(DataType::Float);
        t.float_data = vec![1.0, -2.0];
        assert_eq!(raw_of(t), [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0]);
        let mut t = tensor(DataType::Complex64);
        t.float_data = vec![1.0, 2.0];
        assert_eq!(raw_of(t), [0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40]);
        let mut t = tensor(DataType::Double);
        t.double_data = vec![-0.0];
        assert_eq!(raw_of(t), [0, 0, 0, 0, 0, 0, 0, 0x80]);
    }

    #[test]
    fn int32_data_is_truncated_to_the_element_width() {
        let mut t = tensor(DataType::Int8);
        t.int32_data = vec![-1, 2];
        assert_eq!(raw_of(t), [0xff, 0x02]);
        let mut t = tensor(DataType::Uint16);
        t.int32_data = vec![65535, 258];
        assert_eq!(raw_of(t), [0xff, 0xff, 0x02, 0x01]);
        let mut t = tensor(DataType::Float16);
        t.int32_data = vec![0x3c00];
        assert_eq!(raw_of(t), [0x00, 0x3c]);
        let mut t = tensor(DataType::Bfloat16);
        t.int32_data = vec![0x3f80];
        assert_eq!(raw_of(t), [0x80, 0x3f]);
        let mut t = tensor(DataType::Bool);
        t.int32_data = vec![1, 0];
        assert_eq!(raw_of(t), [0x01, 0x00]);
        let mut t = tensor(DataType::Float8e5m2);
        t.int32_data = vec![0x7c];
        assert_eq!(raw_of(t), [0x7c]);
        let mut t = tensor(DataType::Int32);
        t.int32_data = vec![-2];
        assert_eq!(raw_of(t), [0xfe, 0xff, 0xff, 0xff]);
    }

    #[test]
    fn packed_sub_byte_types_keep_one_byte_per_entry() {
        // int4 [1, 2, 3]: first element in the low nibble.
        let mut t = tensor(DataType::Int4);
        t.dims = vec![3];
        t.int32_data = vec![0x21, 0x03];
        assert_eq!(raw_of(t), [0x21, 0x03]);
        // uint2 [0, 1, 2, 3, 2]: 0 | 1<<2 | 2<<4 | 3<<6 = 0xe4, then 2.
        let mut t = tensor(DataType::Uint2);
        t.dims = vec![5];
        t.int32_data = vec![0xe4, 0x02];
        assert_eq!(raw_of(t), [0xe4, 0x02]);
    }

    #[test]
    fn float6_codes_are_packed_four_into_three_bytes() {
        // Codes 1, 1, 50, 60, 21 (LSB first, 6 bits each):
        // byte0 = 1 | (1 & 3) << 6 = 0x41; byte1 = 1 >> 2 | (50 & 15) << 4 = 0x20;
        // byte2 = 50 >> 4 | 60 << 2 = 0xf3; byte3 = 21.
        let mut t = tensor(DataType::Float6e2m3);
        t.dims = vec![5];
        t.int32_data = vec![1, 1, 50, 60, 21];
        assert_eq!(raw_of(t), [0x41, 0x20, 0xf3, 0x15]);
        let mut t = tensor(DataType::Float6e3m2);
        t.dims = vec![1];
        t.int32_data = vec![0x7f];
        assert_eq!(raw_of(t), [0x3f]);
    }

    #[test]
    fn unsigned_and_int64_fields() {
        let mut t = tensor(DataType::Uint32);
        t.uint64_data = vec![0xffff_ffff, 1];
        assert_eq!(raw_of(t), [0xff, 0xff, 0xff, 0xff, 0x01, 0x00, 0x00, 0x00]);
        let mut t = tensor(DataType::Uint64);
        t.uint64_data = vec![1];
        assert_eq!(raw_of(t), [1, 0, 0, 0, 0, 0, 0, 0]);
        let mut t = tensor(DataType::Int64);
        t.int64_data = vec![-1];
        assert_eq!(raw_of(t), [0xff; 8]);
    }

    #[test]
    fn raw_data_wins_and_empty_tensors_get_empty_raw_data() {
        let mut t = tensor(DataType::Float);
        t.raw_data = Some(vec![1, 2, 3, 4].into());
        t.float_data = vec![9.0];
        assert_eq!(raw_of(t), [1, 2, 3, 4]);
        let mut t = tensor(DataType::Float);
        t.dims = vec![0];
        canonicalize_tensor(&mut t);
        assert_eq!(t.raw_data.as_deref(), Some(&[][..]));
    }

    #[test]
    fn strings_and_external_data_keep_their_storage() {
        let mut t = tensor(DataType::String);
        t.string_data = vec![b"a".to_vec()];
        canonicalize_tensor(&mut t);
        assert_eq!(t.string_data, vec![b"a".to_vec()]);
        assert!(t.raw_data.is_none());
        let mut t = tensor(DataType::Float);
        t.data_location = Some(DataLocation::External as i32);
        t.external_data = vec![StringStringEntryProto {
            key: Some("location".into()),
            value: Some("w.bin".into()),
        }];
        let before = t.clone();
        canonicalize_tensor(&mut t);
        assert_eq!(t, before);
        let mut t = tensor(DataType::Float);
        t.data_location = Some(DataLocation::Default as i32);
        canonicalize_tensor(&mut t);
        assert_eq!(t.data_location, None);
    }

    #[test]
    fn model_wide_rewrites_reach_subgraphs_and_functions() {
        let inner_tensor = TensorProto {
            name: Some(String::new()),
            data_type: Some(DataType::Int64 as i32),
            int64_data: vec![1],
            doc_string: Some("doc".into()),
            ..Default::default()
        };
        let inner_graph = GraphProto {
            name: Some(String::new()),
            doc_string: Some("doc".into()),
            node: vec![NodeProto {
                domain: Some(String::new()),
                attribute: vec![AttributeProto {
                    name: Some("value".into()),
                    r#type: Some(AttributeType::Tensor as i32),
                    t: Some(Box::new(inner_tensor)),
                    doc_string: Some("doc".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            input: vec![ValueInfoProto {
                name: Some("x".into()),
                r#type: Some(TypeProto { value: None, denotation: Some("IMAGE".into()) }),
                doc_string: Some("doc".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let outer_node = NodeProto {
            attribute: vec![AttributeProto {
                name: Some("body".into()),
                r#type: Some(AttributeType::Graph as i32),
                g: Some(Box::new(inner_graph)),
                ..Default::default()
            }],
            doc_string: Some("doc".into()),
            ..Default::default()
        };
        let mut model = ModelProto {
            doc_string: Some("kept".into()),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(1),
            }],
            graph: Some(GraphProto { node: vec![outer_node.clone()], ..Default::default() }),
            functions: vec![FunctionProto {
                domain: Some(String::new()),
                node: vec![outer_node],
                ..Default::default()
            }],
            ..Default::default()
        };
        canonicalize_model(&mut model);
        assert_eq!(model.doc_string.as_deref(), Some("kept"));
        assert_eq!(model.opset_import[0].domain, None);
        assert_eq!(model.functions[0].domain, None);
        let graph = model.graph.as_ref().map(|g| g.node[0].clone());
        let function = model.functions[0].node[0].clone();
        for outer in [graph.unwrap_or_default(), function] {
            assert_eq!(outer.doc_string, None);
            let inner = outer.attribute[0].g.as_deref().cloned().unwrap_or_default();
            assert_eq!(inner.name, None);
            assert_eq!(inner.doc_string, None);
            assert_eq!(inner.input[0].r#type, None);
            assert_eq!(inner.input[0].doc_string, None);
            assert_eq!(inner.node[0].domain, None);
            let a = &inner.node[0].attribute[0];
            assert_eq!(a.doc_string, None);
            let t = a.t.as_deref().cloned().unwrap_or_default();
            assert_eq!(t.name, None);
            assert_eq!(t.doc_string, None);
            assert!(t.int64_data.is_empty());
            assert_eq!(t.raw_data.as_deref(), Some(&[1, 0, 0, 0, 0, 0, 0, 0][..]));
        }
    }
}
