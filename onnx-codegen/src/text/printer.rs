//! Printer from `ModelProto` to the ONNX textual syntax.
//!
//! The output follows the layout of the reference printer (`onnx.printer`)
//! closely, but prints everything the syntax can carry, so that parsing the
//! text back (with the reference parser `onnx.parser.parse_model`, or ours)
//! yields the same model up to [`crate::canonical::canonicalize_model`]:
//!
//! * the model header: `ir_version`, `opset_import`, `producer_name`,
//!   `producer_version`, `domain`, `model_version`, `doc_string`,
//!   `metadata_props`;
//! * graphs with their name, inputs and outputs with full types, and one
//!   `<...>` block after the outputs holding every initializer (`type name =
//!   {values}`, in their original order, whether or not they are also inputs)
//!   followed by every `value_info` entry;
//! * nodes with `[name]`, domain-qualified op types, `:overload`, empty
//!   optional inputs and outputs as `""`, and attributes that always carry a
//!   `: type` annotation (needed for empty lists and for floats with integral
//!   values, which the parser would otherwise read as ints);
//! * tensors of every element type, from `raw_data` or the typed fields. The
//!   parser stores values in the typed field the spec names for the element
//!   type, so values are printed as that field holds them: `float16`,
//!   `bfloat16`, `float8*` as their unsigned bit patterns, 4-bit and 2-bit
//!   types as packed bytes (two or four elements per value, first element in
//!   the low bits), `float6*` as one 6-bit code per element, complex numbers
//!   as (real, imaginary) pairs, `uint32` in the `uint64` field;
//! * floats in the shortest form that reads back to the same bits (fixed or
//!   exponent notation, whichever is shorter, as C++ `to_chars`), `-0`,
//!   `inf`, `-inf`, `nan`, `-nan`;
//! * external data references (`= ["location": "w.bin", ...]`);
//! * model-local functions with their header (`domain`, `overload`,
//!   `doc_string`, `opset_import`), attribute names, attributes with defaults,
//!   and `value_info`.
//!
//! Names that are not plain identifiers (`[A-Za-z_][A-Za-z0-9_]*`) are quoted,
//! with `\` and `"` escaped; so are names that the parser would read as a type
//! keyword (`float`, `seq`, `map`, ...) where a type may start.
//!
//! What the syntax cannot express, found by reading the reference parser and
//! by experiment with `onnx` 1.23.2:
//!
//! * doc strings of graphs, nodes, attributes, tensors and value infos;
//!   metadata properties of graphs, nodes, value infos, tensors and functions;
//!   denotations of types and dimensions (all three are dropped by
//!   [`crate::canonical`], which treats them as documentation);
//! * `training_info`, model `configuration`, node `device_configurations`,
//!   graph `quantization_annotation` and `sparse_initializer`, tensor
//!   `segment`: not printed, so a round trip loses them;
//! * sparse tensor attributes (`sparse_tensor`, not printed at all) and
//!   non-empty `tensors`, `graphs`, `sparse_tensors`, `type_protos` attributes:
//!   the lists are printed, but the reference parser keeps only the list's
//!   type and drops its elements;
//! * the difference between an absent string and an empty one for graph
//!   names, node domains, tensor names and opset domains (the parser always
//!   sets them);
//! * NaN payloads: every NaN prints as `nan` or `-nan` and reads back as the
//!   default quiet NaN of that sign (bit patterns of `float16`, `bfloat16` and
//!   `float8` tensors are printed as integers and survive);
//! * bytes that are not UTF-8 in string attributes and string tensors (the
//!   text is a Rust `String`; such bytes print as U+FFFD);
//! * names that must be plain identifiers but are not: attribute names, op
//!   types, node domains (dot-separated identifiers), overloads, the name of a
//!   subgraph held in an attribute (it must also not be a type keyword nor
//!   start with `inf`/`nan`), and the name of a tensor held in an attribute;
//!   they are printed as they are and the parser rejects the text;
//! * an undefined element type, a type with no value, and nesting deeper than
//!   [`MAX_DEPTH`] (printed as `...`, which does not parse).
use crate::canonical::{Storage, storage};
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType, tensor_proto::DataLocation, tensor_shape_proto::dimension,
    type_proto,
};
use std::fmt::Write as _;

/// Deepest nesting of subgraphs and types the printer follows. Models decoded
/// from protobuf never reach it (prost stops at 100 nested messages, and each
/// level here is at least two messages).
pub const MAX_DEPTH: usize = 128;

/// Prints a whole model in the textual syntax.
pub fn print_model(model: &ModelProto) -> String {
    let mut p = Printer { out: String::new(), indent: 3, depth: 0 };
    p.model(model);
    p.out
}

/// Name of an element type in the syntax, or `None` for an unknown code.
pub fn elem_type_name(code: i32) -> Option<&'static str> {
    const NAMES: [&str; 28] = [
        "float",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "int64",
        "string",
        "bool",
        "float16",
        "double",
        "uint32",
        "uint64",
        "complex64",
        "complex128",
        "bfloat16",
        "float8e4m3fn",
        "float8e4m3fnuz",
        "float8e5m2",
        "float8e5m2fnuz",
        "uint4",
        "int4",
        "float4e2m1",
        "float8e8m0",
        "uint2",
        "int2",
        "float6e2m3",
        "float6e3m2",
    ];
    usize::try_from(code).ok()?.checked_sub(1).and_then(|i| NAMES.get(i).copied())
}

/// Keyword of an attribute type in a `: type` annotation.
fn attr_type_name(t: AttributeType) -> Option<&'static str> {
    Some(match t {
        AttributeType::Undefined => return None,
        AttributeType::Float => "float",
        AttributeType::Int => "int",
        AttributeType::String => "string",
        AttributeType::Tensor => "tensor",
        AttributeType::Graph => "graph",
        AttributeType::SparseTensor => "sparse_tensor",
        AttributeType::TypeProto => "type_proto",
        AttributeType::Floats => "floats",
        AttributeType::Ints => "ints",
        AttributeType::Strings => "strings",
        AttributeType::Tensors => "tensors",
        AttributeType::Graphs => "graphs",
        AttributeType::SparseTensors => "sparse_tensors",
        AttributeType::TypeProtos => "type_protos",
    })
}

/// Whether `s` is a plain identifier of the syntax: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_identifier(s: &str) -> bool {
    let mut chars = s.bytes();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Whether the parser reads identifier `s` as the start of a type where a
/// value-info may start with one.
fn is_type_keyword(s: &str) -> bool {
    matches!(s, "seq" | "map" | "optional" | "sparse_tensor" | "opaque")
        || (1..=28).any(|c| elem_type_name(c) == Some(s))
}

/// Formats an `f32` in the shortest form that reads back to the same value.
pub fn format_f32(x: f32) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    shortest(&format!("{x:e}"))
}

/// Formats an `f64` in the shortest form that reads back to the same value.
pub fn format_f64(x: f64) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_owned();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_owned();
    }
    shortest(&format!("{x:e}"))
}

/// Rewrites Rust's shortest exponent form (`-1.5e-7`) as the shorter of C's
/// fixed (`-0.00000015`) and exponent (`-1.5e-07`) forms, fixed on a tie.
fn shortest(exp_form: &str) -> String {
    let (neg, rest) = match exp_form.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, exp_form),
    };
    let Some((mantissa, exp)) = rest.split_once('e') else { return exp_form.to_owned() };
    let Ok(exp) = exp.parse::<i64>() else { return exp_form.to_owned() };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let k = digits.len() as i64;
    let mut sci = String::new();
    sci.push_str(&digits[..1]);
    if k > 1 {
        sci.push('.');
        sci.push_str(&digits[1..]);
    }
    let _ = write!(sci, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs());
    let fixed = if exp >= k - 1 {
        let mut s = digits.clone();
        s.extend(std::iter::repeat_n('0', (exp - (k - 1)) as usize));
        s
    } else if exp >= 0 {
        let (a, b) = digits.split_at((exp + 1) as usize);
        format!("{a}.{b}")
    } else {
        let mut s = "0.".to_owned();
        s.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
        s.push_str(&digits);
        s
    };
    let best = if sci.len() < fixed.len() { sci } else { fixed };
    if neg { format!("-{best}") } else { best }
}

struct Printer {
    out: String,
    indent: usize,
    depth: usize,
}

impl Printer {
    fn spaces(&mut self, n: usize) {
        self.out.extend(std::iter::repeat_n(' ', n));
    }

    /// Appends `s` as a string literal.
    fn quoted(&mut self, s: &str) {
        self.out.push('"');
        for c in s.chars() {
            if c == '"' || c == '\\' {
                self.out.push('\\');
            }
            self.out.push(c);
        }
        self.out.push('"');
    }

    fn quoted_bytes(&mut self, b: &[u8]) {
        self.quoted(&String::from_utf8_lossy(b));
    }

    /// A name where the parser accepts a plain or quoted identifier.
    fn id(&mut self, s: &str) {
        if is_identifier(s) {
            self.out.push_str(s);
        } else {
            self.quoted(s);
        }
    }

    /// A name where a type may also start, so type keywords are quoted too.
    fn untyped_id(&mut self, s: &str) {
        if is_identifier(s) && !is_type_keyword(s) {
            self.out.push_str(s);
        } else {
            self.quoted(s);
        }
    }

    fn id_list(&mut self, ids: &[String], type_may_start: bool) {
        for (i, s) in ids.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            if type_may_start {
                self.untyped_id(s);
            } else {
                self.id(s);
            }
        }
    }

    fn enter(&mut self) -> bool {
        if self.depth >= MAX_DEPTH {
            self.out.push_str("...");
            return false;
        }
        self.depth += 1;
        true
    }

    fn model(&mut self, m: &ModelProto) {
        self.out.push_str("<\n");
        if let Some(v) = m.ir_version {
            let _ = writeln!(self.out, "   ir_version: {v},");
        }
        self.out.push_str("   opset_import: ");
        self.opsets(&m.opset_import, ", ");
        if let Some(s) = &m.producer_name {
            self.out.push_str(",\n   producer_name: ");
            self.quoted(s);
        }
        if let Some(s) = &m.producer_version {
            self.out.push_str(",\n   producer_version: ");
            self.quoted(s);
        }
        if let Some(s) = &m.domain {
            self.out.push_str(",\n   domain: ");
            self.quoted(s);
        }
        if let Some(v) = m.model_version {
            let _ = write!(self.out, ",\n   model_version: {v}");
        }
        if let Some(s) = &m.doc_string {
            self.out.push_str(",\n   doc_string: ");
            self.quoted(s);
        }
        if !m.metadata_props.is_empty() {
            self.out.push_str(",\n   metadata_props: ");
            self.string_pairs(&m.metadata_props);
        }
        self.out.push_str("\n>\n");
        match &m.graph {
            Some(g) => self.graph(g),
            None => self.graph(&GraphProto::default()),
        }
        for f in &m.functions {
            self.out.push('\n');
            self.function(f);
        }
    }

    fn opsets(&mut self, opsets: &[OperatorSetIdProto], sep: &str) {
        self.out.push('[');
        for (i, o) in opsets.iter().enumerate() {
            if i > 0 {
                self.out.push_str(sep);
            }
            self.quoted(o.domain());
            let _ = write!(self.out, " : {}", o.version());
        }
        self.out.push(']');
    }

    fn string_pairs(&mut self, pairs: &[StringStringEntryProto]) {
        self.out.push('[');
        for (i, e) in pairs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.quoted(e.key());
            self.out.push_str(": ");
            self.quoted(e.value());
        }
        self.out.push(']');
    }

    fn graph(&mut self, g: &GraphProto) {
        if !self.enter() {
            return;
        }
        self.id(g.name());
        self.out.push_str(" (");
        self.value_infos(&g.input);
        self.out.push_str(") => (");
        self.value_infos(&g.output);
        self.out.push_str(") ");
        if !g.initializer.is_empty() || !g.value_info.is_empty() {
            self.out.push('\n');
            self.spaces(self.indent);
            self.out.push('<');
            let mut first = true;
            for t in &g.initializer {
                if !first {
                    self.out.push_str(", ");
                }
                first = false;
                self.tensor(t, true);
            }
            for v in &g.value_info {
                if !first {
                    self.out.push_str(", ");
                }
                first = false;
                self.value_info(v);
            }
            self.out.push_str(">\n");
        }
        self.nodes(&g.node);
        self.depth -= 1;
    }

    fn nodes(&mut self, nodes: &[NodeProto]) {
        self.out.push_str("{\n");
        for n in nodes {
            self.node(n);
        }
        self.spaces(self.indent - 3);
        self.out.push('}');
    }

    fn value_infos(&mut self, vis: &[ValueInfoProto]) {
        for (i, v) in vis.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.value_info(v);
        }
    }

    fn value_info(&mut self, v: &ValueInfoProto) {
        if let Some(t) = &v.r#type
            && t.value.is_some()
        {
            self.type_proto(t);
            self.out.push(' ');
            self.id(v.name());
        } else {
            self.untyped_id(v.name());
        }
    }

    fn type_proto(&mut self, t: &TypeProto) {
        if !self.enter() {
            return;
        }
        match &t.value {
            Some(type_proto::Value::TensorType(tt)) => {
                self.elem_type(tt.elem_type());
                self.shape(tt.shape.as_ref());
            }
            Some(type_proto::Value::SequenceType(s)) => {
                self.out.push_str("seq(");
                if let Some(e) = &s.elem_type {
                    self.type_proto(e);
                }
                self.out.push(')');
            }
            Some(type_proto::Value::MapType(m)) => {
                self.out.push_str("map(");
                self.elem_type(m.key_type());
                self.out.push_str(", ");
                if let Some(e) = &m.value_type {
                    self.type_proto(e);
                }
                self.out.push(')');
            }
            Some(type_proto::Value::OptionalType(o)) => {
                self.out.push_str("optional(");
                if let Some(e) = &o.elem_type {
                    self.type_proto(e);
                }
                self.out.push(')');
            }
            Some(type_proto::Value::SparseTensorType(st)) => {
                self.out.push_str("sparse_tensor(");
                self.elem_type(st.elem_type());
                self.shape(st.shape.as_ref());
                self.out.push(')');
            }
            Some(type_proto::Value::OpaqueType(o)) => {
                self.out.push_str("opaque(");
                if !o.domain().is_empty() {
                    self.out.push_str(o.domain());
                    self.out.push(',');
                }
                self.out.push_str(o.name());
                self.out.push(')');
            }
            None => {}
        }
        self.depth -= 1;
    }

    fn elem_type(&mut self, code: i32) {
        self.out.push_str(elem_type_name(code).unwrap_or("undefined"));
    }

    /// `[]` for an unknown rank, nothing for a scalar, `[d, ...]` otherwise.
    fn shape(&mut self, shape: Option<&TensorShapeProto>) {
        let Some(shape) = shape else {
            self.out.push_str("[]");
            return;
        };
        if shape.dim.is_empty() {
            return;
        }
        self.out.push('[');
        for (i, d) in shape.dim.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            match &d.value {
                Some(dimension::Value::DimValue(v)) => {
                    let _ = write!(self.out, "{v}");
                }
                Some(dimension::Value::DimParam(p)) => {
                    if is_identifier(p) {
                        self.out.push_str(p);
                    } else {
                        self.quoted(p);
                    }
                }
                None => self.out.push('?'),
            }
        }
        self.out.push(']');
    }

    /// A tensor constant: `type[dims] name {values}`, or for an initializer
    /// `type[dims] name = {values}`.
    fn tensor(&mut self, t: &TensorProto, initializer: bool) {
        self.elem_type(t.data_type());
        if !t.dims.is_empty() {
            self.out.push('[');
            for (i, d) in t.dims.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{d}");
            }
            self.out.push(']');
        }
        if initializer {
            self.out.push(' ');
            self.id(t.name());
            self.out.push_str(" =");
        } else if !t.name().is_empty() {
            self.out.push(' ');
            self.id(t.name());
        }
        self.out.push(' ');
        if t.data_location == Some(DataLocation::External as i32) {
            // In an attribute, `float[2] [` would read as a type followed by
            // junk; `=` makes it a tensor.
            if !initializer {
                self.out.push_str("= ");
            }
            self.string_pairs(&t.external_data);
            return;
        }
        self.out.push('{');
        self.tensor_values(t);
        self.out.push('}');
    }

    fn tensor_values(&mut self, t: &TensorProto) {
        let Some(st) = storage(t.data_type()) else { return };
        let mut first = true;
        let mut item = |out: &mut String, s: &dyn std::fmt::Display| {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "{s}");
        };
        let out = &mut self.out;
        if let Some(raw) = &t.raw_data {
            match st {
                Storage::Int32 { width, signed } => {
                    for c in raw.chunks_exact(width) {
                        let mut b = [0u8; 4];
                        b[..width].copy_from_slice(c);
                        let v = u32::from_le_bytes(b);
                        if signed {
                            let shift = 32 - 8 * width as u32;
                            item(out, &(((v << shift) as i32) >> shift));
                        } else {
                            item(out, &v);
                        }
                    }
                }
                Storage::Packed => raw.iter().for_each(|b| item(out, b)),
                Storage::Six => {
                    let n = six_bit_count(t, raw.len());
                    for i in 0..n {
                        item(out, &unpack_six(raw, i));
                    }
                }
                Storage::Int64 => raw
                    .chunks_exact(8)
                    .for_each(|c| item(out, &i64::from_le_bytes(c.try_into().unwrap_or_default()))),
                Storage::Uint32 => raw
                    .chunks_exact(4)
                    .for_each(|c| item(out, &u32::from_le_bytes(c.try_into().unwrap_or_default()))),
                Storage::Uint64 => raw
                    .chunks_exact(8)
                    .for_each(|c| item(out, &u64::from_le_bytes(c.try_into().unwrap_or_default()))),
                Storage::Float => raw.chunks_exact(4).for_each(|c| {
                    item(out, &format_f32(f32::from_le_bytes(c.try_into().unwrap_or_default())))
                }),
                Storage::Double => raw.chunks_exact(8).for_each(|c| {
                    item(out, &format_f64(f64::from_le_bytes(c.try_into().unwrap_or_default())))
                }),
                Storage::String => {}
            }
            if st != Storage::String {
                return;
            }
        }
        match st {
            Storage::Int32 { .. } | Storage::Packed | Storage::Six => {
                t.int32_data.iter().for_each(|v| item(out, v))
            }
            Storage::Int64 => t.int64_data.iter().for_each(|v| item(out, v)),
            Storage::Uint32 | Storage::Uint64 => t.uint64_data.iter().for_each(|v| item(out, v)),
            Storage::Float => t.float_data.iter().for_each(|v| item(out, &format_f32(*v))),
            Storage::Double => t.double_data.iter().for_each(|v| item(out, &format_f64(*v))),
            Storage::String => {
                for (i, s) in t.string_data.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.quoted_bytes(s);
                }
            }
        }
    }

    fn node(&mut self, n: &NodeProto) {
        self.spaces(self.indent);
        if let Some(name) = &n.name {
            self.out.push('[');
            self.id(name);
            self.out.push_str("] ");
        }
        self.id_list(&n.output, false);
        self.out.push_str(" = ");
        if !n.domain().is_empty() {
            self.out.push_str(n.domain());
            self.out.push('.');
        }
        self.out.push_str(n.op_type());
        if !n.overload().is_empty() {
            self.out.push(':');
            self.out.push_str(n.overload());
        }
        let attrs: Vec<&AttributeProto> =
            n.attribute.iter().filter(|a| is_expressible_attribute(a)).collect();
        let has_subgraph = attrs.iter().any(|a| a.g.is_some() || !a.graphs.is_empty());
        if !has_subgraph {
            self.attributes(&attrs);
        }
        self.out.push_str(" (");
        self.id_list(&n.input, false);
        self.out.push(')');
        if has_subgraph {
            self.attributes(&attrs);
        }
        self.out.push('\n');
    }

    fn attributes(&mut self, attrs: &[&AttributeProto]) {
        if attrs.is_empty() {
            return;
        }
        self.out.push_str(" <");
        for (i, a) in attrs.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            self.attribute(a);
        }
        self.out.push('>');
    }

    fn attribute(&mut self, a: &AttributeProto) {
        self.out.push_str(a.name());
        let ty = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
        let ty = match ty {
            Some(AttributeType::Undefined) | None => inferred_type(a),
            Some(t) => t,
        };
        if let Some(name) = attr_type_name(ty) {
            self.out.push_str(": ");
            self.out.push_str(name);
        }
        self.out.push_str(" = ");
        if let Some(r) = &a.ref_attr_name {
            self.out.push('@');
            self.id(r);
            return;
        }
        match ty {
            AttributeType::Float => self.out.push_str(&format_f32(a.f())),
            AttributeType::Int => {
                let _ = write!(self.out, "{}", a.i());
            }
            AttributeType::String => self.quoted_bytes(a.s()),
            AttributeType::Tensor => match &a.t {
                Some(t) => self.tensor(t, false),
                None => self.tensor(&TensorProto::default(), false),
            },
            AttributeType::Graph => match &a.g {
                Some(g) => self.subgraph(g),
                None => self.subgraph(&GraphProto::default()),
            },
            AttributeType::TypeProto => match &a.tp {
                Some(t) => self.type_proto(t),
                None => self.type_proto(&TypeProto::default()),
            },
            AttributeType::Floats => {
                let items: Vec<String> = a.floats.iter().map(|f| format_f32(*f)).collect();
                self.out.push('[');
                self.out.push_str(&items.join(", "));
                self.out.push(']');
            }
            AttributeType::Ints => {
                let items: Vec<String> = a.ints.iter().map(|i| i.to_string()).collect();
                self.out.push('[');
                self.out.push_str(&items.join(", "));
                self.out.push(']');
            }
            AttributeType::Strings => {
                self.out.push('[');
                for (i, s) in a.strings.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.quoted_bytes(s);
                }
                self.out.push(']');
            }
            AttributeType::Tensors => {
                self.out.push('[');
                for (i, t) in a.tensors.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.tensor(t, false);
                }
                self.out.push(']');
            }
            AttributeType::Graphs => {
                self.out.push('[');
                for (i, g) in a.graphs.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.subgraph(g);
                }
                self.out.push(']');
            }
            AttributeType::TypeProtos => {
                self.out.push('[');
                for (i, t) in a.type_protos.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.type_proto(t);
                }
                self.out.push(']');
            }
            // Only empty lists reach here (see `is_expressible_attribute`).
            AttributeType::SparseTensors => self.out.push_str("[]"),
            AttributeType::SparseTensor | AttributeType::Undefined => {}
        }
    }

    fn subgraph(&mut self, g: &GraphProto) {
        self.indent += 3;
        self.graph(g);
        self.indent -= 3;
    }

    fn function(&mut self, f: &FunctionProto) {
        let mut header: Vec<(&str, &str)> = Vec::new();
        if let Some(d) = &f.domain {
            header.push(("domain", d));
        }
        if let Some(o) = &f.overload {
            header.push(("overload", o));
        }
        if let Some(d) = &f.doc_string {
            header.push(("doc_string", d));
        }
        if !header.is_empty() || !f.opset_import.is_empty() {
            self.out.push_str("<\n");
            for (key, value) in header {
                let _ = write!(self.out, "  {key}: ");
                self.quoted(value);
                self.out.push_str(",\n");
            }
            self.out.push_str("  opset_import: ");
            self.opsets(&f.opset_import, ",");
            self.out.push_str("\n>\n");
        }
        self.id(f.name());
        self.out.push(' ');
        let defaults: Vec<&AttributeProto> =
            f.attribute_proto.iter().filter(|a| is_expressible_attribute(a)).collect();
        if !f.attribute.is_empty() || !defaults.is_empty() {
            self.out.push('<');
            for (i, a) in f.attribute.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.untyped_id(a);
            }
            for (i, a) in defaults.iter().enumerate() {
                if i > 0 || !f.attribute.is_empty() {
                    self.out.push(',');
                }
                self.attribute(a);
            }
            self.out.push('>');
        }
        self.out.push('(');
        self.id_list(&f.input, true);
        self.out.push_str(") => (");
        self.id_list(&f.output, true);
        self.out.push(')');
        if !f.value_info.is_empty() {
            self.out.push_str(" <");
            self.value_infos(&f.value_info);
            self.out.push('>');
        }
        self.out.push('\n');
        self.nodes(&f.node);
    }
}

/// Attributes the syntax has no form for at all and that are left out: a
/// single sparse tensor, and a non-empty list of them.
fn is_expressible_attribute(a: &AttributeProto) -> bool {
    if a.ref_attr_name.is_some() {
        return true;
    }
    let ty = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
    match ty {
        Some(AttributeType::SparseTensor) => false,
        Some(AttributeType::SparseTensors) => a.sparse_tensors.is_empty(),
        Some(AttributeType::Undefined) | None => {
            a.sparse_tensor.is_none() && a.sparse_tensors.is_empty()
        }
        Some(_) => true,
    }
}

/// The kind of an attribute whose `type` field is missing, from the field
/// that holds its value.
fn inferred_type(a: &AttributeProto) -> AttributeType {
    if a.ref_attr_name.is_some() {
        AttributeType::Undefined
    } else if a.f.is_some() {
        AttributeType::Float
    } else if a.i.is_some() {
        AttributeType::Int
    } else if a.s.is_some() {
        AttributeType::String
    } else if a.t.is_some() {
        AttributeType::Tensor
    } else if a.g.is_some() {
        AttributeType::Graph
    } else if a.tp.is_some() {
        AttributeType::TypeProto
    } else if !a.floats.is_empty() {
        AttributeType::Floats
    } else if !a.ints.is_empty() {
        AttributeType::Ints
    } else if !a.strings.is_empty() {
        AttributeType::Strings
    } else if !a.tensors.is_empty() {
        AttributeType::Tensors
    } else if !a.graphs.is_empty() {
        AttributeType::Graphs
    } else if !a.type_protos.is_empty() {
        AttributeType::TypeProtos
    } else {
        AttributeType::Undefined
    }
}

/// Number of 6-bit elements in `raw_len` packed bytes: the element count of
/// the dims when they agree with the length, otherwise all whole elements.
fn six_bit_count(t: &TensorProto, raw_len: usize) -> usize {
    let whole = raw_len.saturating_mul(8) / 6;
    let from_dims = t
        .dims
        .iter()
        .try_fold(1usize, |n, d| usize::try_from(*d).ok().and_then(|d| n.checked_mul(d)));
    match from_dims {
        Some(n) if n <= whole && n.saturating_mul(6).div_ceil(8) == raw_len => n,
        _ => whole,
    }
}

/// Element `i` of a 6-bit LSB-first bit stream (caller keeps `i` in range).
fn unpack_six(raw: &[u8], i: usize) -> u8 {
    let bit = i * 6;
    let lo = raw.get(bit / 8).copied().unwrap_or(0) as u16;
    let hi = raw.get(bit / 8 + 1).copied().unwrap_or(0) as u16;
    (((lo | (hi << 8)) >> (bit % 8)) & 0x3f) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{
        TensorShapeProto, attribute_proto::AttributeType as A, tensor_shape_proto::Dimension,
    };

    fn dim_value(v: i64) -> Dimension {
        Dimension { value: Some(dimension::Value::DimValue(v)), denotation: None }
    }

    fn dim_param(p: &str) -> Dimension {
        Dimension { value: Some(dimension::Value::DimParam(p.into())), denotation: None }
    }

    fn tensor_type(elem: i32, dims: Option<Vec<Dimension>>) -> TypeProto {
        TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(elem),
                shape: dims.map(|dim| TensorShapeProto { dim }),
            })),
            denotation: None,
        }
    }

    fn vi(name: &str, ty: Option<TypeProto>) -> ValueInfoProto {
        ValueInfoProto { name: Some(name.into()), r#type: ty, ..Default::default() }
    }

    fn node(outs: &[&str], op: &str, ins: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
        NodeProto {
            output: outs.iter().map(|s| s.to_string()).collect(),
            op_type: Some(op.into()),
            input: ins.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn attr(name: &str, ty: A) -> AttributeProto {
        AttributeProto { name: Some(name.into()), r#type: Some(ty as i32), ..Default::default() }
    }

    fn model(graph: GraphProto) -> ModelProto {
        ModelProto {
            ir_version: Some(7),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(13),
            }],
            graph: Some(graph),
            ..Default::default()
        }
    }

    const HEADER: &str = "<\n   ir_version: 7,\n   opset_import: [\"\" : 13]\n>\n";

    #[test]
    fn minimal_model() {
        let g = GraphProto {
            name: Some("g".into()),
            input: vec![vi("x", Some(tensor_type(1, Some(vec![dim_param("N"), dim_value(3)]))))],
            output: vec![vi("y", Some(tensor_type(1, Some(vec![dim_param("N"), dim_value(3)]))))],
            node: vec![node(&["y"], "Relu", &["x"], vec![])],
            ..Default::default()
        };
        let expected =
            format!("{HEADER}g (float[N,3] x) => (float[N,3] y) {{\n   y = Relu (x)\n}}");
        assert_eq!(print_model(&model(g)), expected);
    }

    #[test]
    fn model_header_fields_and_escapes() {
        let mut m = model(GraphProto { name: Some("g".into()), ..Default::default() });
        m.ir_version = None;
        m.producer_name = Some("a\"b".into());
        m.model_version = Some(-2);
        m.doc_string = Some("x\\y".into());
        m.metadata_props =
            vec![StringStringEntryProto { key: Some("k".into()), value: Some("v".into()) }];
        let expected = "<\n   opset_import: [\"\" : 13],\n   producer_name: \"a\\\"b\",\n   model_version: -2,\n   doc_string: \"x\\\\y\",\n   metadata_props: [\"k\": \"v\"]\n>\ng () => () {\n}";
        assert_eq!(print_model(&m), expected);
    }

    #[test]
    fn types_and_names() {
        let seq = TypeProto {
            value: Some(type_proto::Value::SequenceType(Box::new(type_proto::Sequence {
                elem_type: Some(Box::new(tensor_type(7, None))),
            }))),
            denotation: None,
        };
        let map = TypeProto {
            value: Some(type_proto::Value::MapType(Box::new(type_proto::Map {
                key_type: Some(8),
                value_type: Some(Box::new(tensor_type(1, Some(vec![])))),
            }))),
            denotation: None,
        };
        let g = GraphProto {
            name: Some("main graph".into()),
            input: vec![
                vi(
                    "a.b",
                    Some(tensor_type(10, Some(vec![Dimension::default(), dim_param("N+1")]))),
                ),
                vi("s", Some(seq)),
                vi("m", Some(map)),
                vi("float", None),
                vi("u", None),
            ],
            output: vec![vi("/l1/out", Some(tensor_type(9, Some(vec![]))))],
            node: vec![node(&["/l1/out", ""], "Foo", &["a.b", "", "float"], vec![])],
            ..Default::default()
        };
        let expected = format!(
            "{HEADER}\"main graph\" (float16[?,\"N+1\"] \"a.b\", seq(int64[]) s, map(string, float) m, \"float\", u) => (bool \"/l1/out\") {{\n   \"/l1/out\", \"\" = Foo (\"a.b\", \"\", float)\n}}"
        );
        assert_eq!(print_model(&model(g)), expected);
    }

    #[test]
    fn attributes_carry_their_type() {
        let mut f = attr("alpha", A::Float);
        f.f = Some(2.0);
        let mut z = attr("beta", A::Float);
        z.f = Some(-0.0);
        let mut i = attr("axis", A::Int);
        i.i = Some(-1);
        let empty = attr("axes", A::Ints);
        let mut fl = attr("scales", A::Floats);
        fl.floats = vec![1.0, 0.5];
        let mut s = attr("mode", A::String);
        s.s = Some(b"a\"b".to_vec());
        let mut ss = attr("names", A::Strings);
        ss.strings = vec![b"x".to_vec(), b"y".to_vec()];
        let mut r = attr("gamma", A::Float);
        r.ref_attr_name = Some("g".into());
        let mut tp = attr("dtype", A::TypeProto);
        tp.tp = Some(Box::new(tensor_type(1, None)));
        let mut t = attr("value", A::Tensor);
        t.t = Some(Box::new(TensorProto {
            data_type: Some(7),
            dims: vec![2],
            int64_data: vec![3, -4],
            ..Default::default()
        }));
        let n = node(&["y"], "Op", &["x"], vec![f, z, i, empty, fl, s, ss, r, tp, t]);
        let g = GraphProto { name: Some("g".into()), node: vec![n], ..Default::default() };
        let expected = format!(
            "{HEADER}g () => () {{\n   y = Op <alpha: float = 2, beta: float = -0, axis: int = -1, axes: ints = [], scales: floats = [1, 0.5], mode: string = \"a\\\"b\", names: strings = [\"x\", \"y\"], gamma: float = @g, dtype: type_proto = float[], value: tensor = int64[2] {{3,-4}}> (x)\n}}"
        );
        assert_eq!(print_model(&model(g)), expected);
    }

    #[test]
    fn initializers_from_raw_and_typed_fields() {
        let raw = |name: &str, dt: i32, dims: Vec<i64>, bytes: &[u8]| TensorProto {
            name: Some(name.into()),
            data_type: Some(dt),
            dims,
            raw_data: Some(bytes.to_vec().into()),
            ..Default::default()
        };
        let g = GraphProto {
            name: Some("g".into()),
            initializer: vec![
                // 1.0 and -2.0 as little-endian f32.
                raw("w", 1, vec![2], &[0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0]),
                // float16 1.0 is 0x3c00.
                raw("h", 10, vec![1], &[0x00, 0x3c]),
                raw("i8", 3, vec![2], &[0xff, 0x80]),
                // Two int4 per byte: printed as the packed bytes.
                raw("q", 22, vec![3], &[0x21, 0x03]),
                raw("s", 6, vec![], &[5, 0, 0, 0]),
                TensorProto {
                    name: Some("c".into()),
                    data_type: Some(14),
                    dims: vec![1],
                    float_data: vec![1.5, -2.0],
                    ..Default::default()
                },
                TensorProto {
                    name: Some("t".into()),
                    data_type: Some(8),
                    dims: vec![1],
                    string_data: vec![b"a\\".to_vec()],
                    ..Default::default()
                },
            ],
            value_info: vec![vi("v", Some(tensor_type(1, Some(vec![dim_value(2)]))))],
            ..Default::default()
        };
        let expected = format!(
            "{HEADER}g () => () \n   <float[2] w = {{1,-2}}, float16[1] h = {{15360}}, int8[2] i8 = {{-1,-128}}, int4[3] q = {{33,3}}, int32 s = {{5}}, complex64[1] c = {{1.5,-2}}, string[1] t = {{\"a\\\\\"}}, float[2] v>\n{{\n}}"
        );
        assert_eq!(print_model(&model(g)), expected);
    }

    #[test]
    fn subgraph_attributes_go_after_inputs_and_indent() {
        let body = GraphProto {
            name: Some("body".into()),
            output: vec![vi("z", Some(tensor_type(1, Some(vec![]))))],
            node: vec![node(&["z"], "Identity", &["x"], vec![])],
            ..Default::default()
        };
        let mut a = attr("then_branch", A::Graph);
        a.g = Some(Box::new(body));
        let mut n = node(&["y"], "If", &["c"], vec![a]);
        n.name = Some("n1".into());
        n.domain = Some("ai.onnx".into());
        let g = GraphProto { name: Some("g".into()), node: vec![n], ..Default::default() };
        let expected = format!(
            "{HEADER}g () => () {{\n   [n1] y = ai.onnx.If (c) <then_branch: graph = body () => (float z) {{\n      z = Identity (x)\n   }}>\n}}"
        );
        assert_eq!(print_model(&model(g)), expected);
    }

    #[test]
    fn functions_with_header_attributes_and_value_info() {
        let mut m = model(GraphProto { name: Some("g".into()), ..Default::default() });
        let mut default = attr("alpha", A::Float);
        default.f = Some(0.5);
        let mut r = attr("alpha", A::Float);
        r.ref_attr_name = Some("alpha".into());
        m.functions = vec![FunctionProto {
            name: Some("F".into()),
            domain: Some("my.dom".into()),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(13),
            }],
            attribute: vec!["k".into()],
            attribute_proto: vec![default],
            input: vec!["x".into()],
            output: vec!["y".into()],
            value_info: vec![vi("x", Some(tensor_type(1, None)))],
            node: vec![node(&["y"], "Elu", &["x"], vec![r])],
            ..Default::default()
        }];
        let expected = format!(
            "{HEADER}g () => () {{\n}}\n<\n  domain: \"my.dom\",\n  opset_import: [\"\" : 13]\n>\nF <k,alpha: float = 0.5>(x) => (y) <float[] x>\n{{\n   y = Elu <alpha: float = @alpha> (x)\n}}"
        );
        assert_eq!(print_model(&m), expected);
    }

    #[test]
    fn sparse_tensor_attributes_are_left_out() {
        let mut a = attr("sparse_value", A::SparseTensor);
        a.sparse_tensor = Some(Box::default());
        let g = GraphProto {
            name: Some("g".into()),
            node: vec![node(&["y"], "Constant", &[], vec![a])],
            ..Default::default()
        };
        assert_eq!(
            print_model(&model(g)),
            format!("{HEADER}g () => () {{\n   y = Constant ()\n}}")
        );
    }

    #[test]
    fn floats_use_the_shortest_c_form() {
        let cases: [(f32, &str); 14] = [
            (1e20, "1e+20"),
            (1e16, "1e+16"),
            (100.0, "100"),
            (1e-5, "1e-05"),
            (1e-4, "1e-04"),
            (0.001, "0.001"),
            (1.5e-7, "1.5e-07"),
            (-0.0, "-0"),
            (0.1, "0.1"),
            (123456.7, "123456.7"),
            (1e-45, "1e-45"),
            (f32::MAX, "3.4028235e+38"),
            (f32::NEG_INFINITY, "-inf"),
            (-f32::NAN, "-nan"),
        ];
        for (x, s) in cases {
            assert_eq!(format_f32(x), s, "{x:e}");
        }
        assert_eq!(format_f64(5e-324), "5e-324");
        assert_eq!(format_f64(0.1), "0.1");
    }

    #[test]
    fn floats_read_back_to_the_same_bits() {
        let mut bits: u32 = 0x1234_5678;
        for _ in 0..20_000 {
            bits = bits.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let x = f32::from_bits(bits);
            if x.is_nan() {
                continue;
            }
            let back: f32 = format_f32(x).parse().unwrap_or(f32::NAN);
            assert_eq!(back.to_bits(), x.to_bits(), "{}", format_f32(x));
            let d = f64::from(x) * 1.000_000_1;
            let back: f64 = format_f64(d).parse().unwrap_or(f64::NAN);
            assert_eq!(back.to_bits(), d.to_bits(), "{}", format_f64(d));
        }
    }

    #[test]
    fn deep_nesting_stops_at_the_limit() {
        let mut g = GraphProto { name: Some("leaf".into()), ..Default::default() };
        for _ in 0..(MAX_DEPTH + 5) {
            let mut a = attr("body", A::Graph);
            a.g = Some(Box::new(g));
            g = GraphProto {
                name: Some("g".into()),
                node: vec![node(&[], "Loop", &[], vec![a])],
                ..Default::default()
            };
        }
        let text = print_model(&model(g));
        assert!(text.contains("body: graph = ..."));
        assert!(!text.contains("leaf"));
    }
}
