//! Parser for the textual syntax.
//!
//! A recursive-descent parser, one method per grammar rule, over the tokens
//! of [`super::lexer`]. It builds the same messages as the reference parser
//! (`onnx.parser.parse_model`), field presence included: for example every
//! node gets a `domain` (empty when not qualified), a tensor written inside an
//! attribute gets a `name` (empty when not given), a `?` dimension is a
//! `Dimension` with neither value nor parameter, and `float` is a scalar (a
//! shape with no dimensions) while `float[]` has no shape at all.
//!
//! Where the reference is lenient in ways that lose data or hide mistakes,
//! we report an error instead: integers that overflow, a negative `uint64`,
//! escapes other than `\"` and `\\`, an empty operator name, and a reference
//! `@name` inside a list. A list of tensors, graphs or types keeps its
//! elements (the reference drops them). A tensor written in an attribute may
//! have a quoted name, as the reference printer writes it.
//!
//! Graphs and types nest; both count towards one depth limit
//! ([`MAX_DEPTH`]), so no input can exhaust the stack.

use super::lexer::{Lexer, Token, TokenKind, is_float_word, string_value};
use super::spans::{AttrSpan, GraphSpan, NodeSpan, SourceMap};
use crate::diag::Diagnostic;
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto, TensorProto, TensorShapeProto, TypeProto, ValueInfoProto,
    attribute_proto::AttributeType,
    tensor_proto::DataLocation,
    tensor_proto::DataType,
    tensor_shape_proto::{Dimension, dimension},
    type_proto,
};

/// How deeply graphs (in attributes) and types (`seq(seq(...))`) may nest.
pub const MAX_DEPTH: usize = 64;

/// Parses a whole model. `file` names the source in diagnostics.
///
/// A syntax error stops the parse and gives one diagnostic that points at
/// the offending token and says what was expected there.
pub fn parse_model(src: &str, file: &str) -> crate::Result<ModelProto> {
    parse_model_with_spans(src, file).map(|(model, _)| model)
}

/// Parses a whole model and records where its graphs, nodes, attributes and
/// values are, so later errors can point at lines.
pub fn parse_model_with_spans(src: &str, file: &str) -> crate::Result<(ModelProto, SourceMap)> {
    // Nesting recurses up to MAX_DEPTH levels, and a level of graph nesting
    // takes tens of kilobytes of stack in debug builds. The parse runs on a
    // thread of its own with a stack sized for that, so it never depends on
    // how much stack the caller has left.
    std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("onnx-text-parser".to_owned())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, || parse_with_spans_here(src, file));
        match worker {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err(Diagnostic::error("the text parser stopped unexpectedly").in_file(file).into())
            }),
            Err(e) => {
                Err(Diagnostic::error(format!("could not start the text parser thread: {e}"))
                    .in_file(file)
                    .into())
            }
        }
    })
}

/// The stack of the parser thread: far more than [`MAX_DEPTH`] levels need
/// (about 4 MB in debug builds); untouched pages cost no memory.
const PARSER_STACK_BYTES: usize = 64 << 20;

/// Parses on the current thread.
#[cfg(test)]
fn parse_model_here(src: &str, file: &str) -> crate::Result<ModelProto> {
    parse_with_spans_here(src, file).map(|(model, _)| model)
}

/// Parses on the current thread, recording positions.
fn parse_with_spans_here(src: &str, file: &str) -> crate::Result<(ModelProto, SourceMap)> {
    let mut parser = Parser::new(src, file).map_err(|d| *d)?;
    let model = parser.model().map_err(|d| *d)?;
    Ok((model, SourceMap { main: parser.main_span.take() }))
}

/// Syntax errors are boxed: they are rare, and the `Ok` path stays small.
type PResult<T> = Result<T, Box<Diagnostic>>;

/// Element type names, as written in types (`float[2]`).
const PRIMITIVE_TYPES: &[(&str, DataType)] = &[
    ("float", DataType::Float),
    ("uint8", DataType::Uint8),
    ("int8", DataType::Int8),
    ("uint16", DataType::Uint16),
    ("int16", DataType::Int16),
    ("int32", DataType::Int32),
    ("int64", DataType::Int64),
    ("string", DataType::String),
    ("bool", DataType::Bool),
    ("float16", DataType::Float16),
    ("double", DataType::Double),
    ("uint32", DataType::Uint32),
    ("uint64", DataType::Uint64),
    ("complex64", DataType::Complex64),
    ("complex128", DataType::Complex128),
    ("bfloat16", DataType::Bfloat16),
    ("float8e4m3fn", DataType::Float8e4m3fn),
    ("float8e4m3fnuz", DataType::Float8e4m3fnuz),
    ("float8e5m2", DataType::Float8e5m2),
    ("float8e5m2fnuz", DataType::Float8e5m2fnuz),
    ("float8e8m0", DataType::Float8e8m0),
    ("uint4", DataType::Uint4),
    ("int4", DataType::Int4),
    ("float4e2m1", DataType::Float4e2m1),
    ("uint2", DataType::Uint2),
    ("int2", DataType::Int2),
    ("float6e2m3", DataType::Float6e2m3),
    ("float6e3m2", DataType::Float6e3m2),
];

/// Keywords that start a non-tensor type.
const TYPE_KEYWORDS: &[&str] = &["seq", "map", "optional", "sparse_tensor", "opaque"];

/// Attribute type annotations (`name: ints = [...]`).
const ATTRIBUTE_TYPES: &[(&str, AttributeType)] = &[
    ("float", AttributeType::Float),
    ("int", AttributeType::Int),
    ("string", AttributeType::String),
    ("tensor", AttributeType::Tensor),
    ("graph", AttributeType::Graph),
    ("sparse_tensor", AttributeType::SparseTensor),
    ("type_proto", AttributeType::TypeProto),
    ("floats", AttributeType::Floats),
    ("ints", AttributeType::Ints),
    ("strings", AttributeType::Strings),
    ("tensors", AttributeType::Tensors),
    ("graphs", AttributeType::Graphs),
    ("sparse_tensors", AttributeType::SparseTensors),
    ("type_protos", AttributeType::TypeProtos),
];

fn primitive_type(name: &str) -> Option<DataType> {
    PRIMITIVE_TYPES.iter().find(|(n, _)| *n == name).map(|&(_, t)| t)
}

/// The name of an element type as written in the syntax (`float16`).
fn type_name(t: DataType) -> &'static str {
    PRIMITIVE_TYPES.iter().find(|(_, v)| *v == t).map_or("undefined", |&(n, _)| n)
}

fn attribute_type_name(t: AttributeType) -> &'static str {
    ATTRIBUTE_TYPES.iter().find(|(_, v)| *v == t).map_or("undefined", |&(n, _)| n)
}

/// The element kind of a list attribute type (`ints` -> `int`); other types unchanged.
fn singleton(t: AttributeType) -> AttributeType {
    match t {
        AttributeType::Floats => AttributeType::Float,
        AttributeType::Ints => AttributeType::Int,
        AttributeType::Strings => AttributeType::String,
        AttributeType::Tensors => AttributeType::Tensor,
        AttributeType::Graphs => AttributeType::Graph,
        AttributeType::SparseTensors => AttributeType::SparseTensor,
        AttributeType::TypeProtos => AttributeType::TypeProto,
        other => other,
    }
}

fn is_list(t: AttributeType) -> bool {
    singleton(t) != t
}

/// What a value of an attribute kind is called in messages.
fn kind_words(t: AttributeType) -> &'static str {
    match t {
        AttributeType::Float => "a float",
        AttributeType::Int => "an integer",
        AttributeType::String => "a string",
        AttributeType::Tensor => "a tensor",
        AttributeType::Graph => "a graph",
        AttributeType::SparseTensor => "a sparse tensor",
        AttributeType::TypeProto => "a type",
        AttributeType::Undefined => "an attribute reference",
        _ => "a list",
    }
}

/// The parser state: the lexer, the current (not yet consumed) token, and
/// the nesting depth of graphs and types.
struct Parser<'a> {
    lex: Lexer<'a>,
    tok: Token,
    depth: usize,
    /// The graphs and nodes being parsed, innermost last (for the source map).
    graph_spans: Vec<GraphSpan>,
    node_spans: Vec<NodeSpan>,
    main_span: Option<GraphSpan>,
    /// The last consumed token.
    prev: Token,
}

impl<'a> Parser<'a> {
    fn new(src: &'a str, file: &'a str) -> PResult<Parser<'a>> {
        let mut lex = Lexer::new(src, file);
        let tok = lex.next_token()?;
        Ok(Parser {
            lex,
            tok,
            depth: 0,
            graph_spans: Vec::new(),
            node_spans: Vec::new(),
            main_span: None,
            prev: tok,
        })
    }

    // ----- token helpers -------------------------------------------------

    /// Consumes the current token and returns it.
    fn bump(&mut self) -> PResult<Token> {
        let tok = self.tok;
        self.tok = self.lex.next_token()?;
        self.prev = tok;
        Ok(tok)
    }

    /// The byte just after the last consumed token.
    fn lex_end(&self) -> usize {
        self.prev.end
    }

    fn text(&self, tok: Token) -> &'a str {
        self.lex.text(tok)
    }

    fn at(&self, c: u8) -> bool {
        self.tok.is(c)
    }

    fn at_ident(&self) -> bool {
        self.tok.kind == TokenKind::Ident
    }

    /// Consumes the punctuation `c` if it is next.
    fn eat(&mut self, c: u8) -> PResult<bool> {
        if self.at(c) {
            self.bump()?;
            Ok(true)
        } else {
            Ok(false)
        }
    }

    /// Consumes the punctuation `c`, or fails saying `what` was expected.
    fn expect(&mut self, c: u8, what: &str) -> PResult<Token> {
        if self.at(c) { self.bump() } else { Err(self.expected(what)) }
    }

    fn expect_arrow(&mut self, what: &str) -> PResult<()> {
        if self.tok.kind == TokenKind::Arrow {
            self.bump()?;
            Ok(())
        } else {
            Err(self.expected(what))
        }
    }

    /// How a token is named in messages.
    fn describe(&self, tok: Token) -> String {
        let text = self.text(tok);
        let short = |s: &str| -> String {
            let mut t: String = s.chars().take(40).collect();
            if t.len() < s.len() {
                t.push_str("...");
            }
            t
        };
        match tok.kind {
            TokenKind::Eof => "end of input".to_owned(),
            TokenKind::Ident => format!("identifier '{}'", short(text)),
            TokenKind::Int => format!("integer '{}'", short(text)),
            TokenKind::Float => format!("number '{}'", short(text)),
            TokenKind::Str => format!("string {}", short(text)),
            TokenKind::Arrow | TokenKind::Punct(_) => format!("'{text}'"),
        }
    }

    /// An error at `tok`.
    fn error_at(&self, tok: Token, message: impl Into<String>) -> Box<Diagnostic> {
        let len = self.text(tok).chars().count();
        self.lex.error_at(tok.start, len, message)
    }

    /// "expected `what`, found <current token>".
    fn expected(&self, what: &str) -> Box<Diagnostic> {
        self.error_at(self.tok, format!("expected {what}, found {}", self.describe(self.tok)))
    }

    /// Enters one level of graph or type nesting.
    fn enter(&mut self) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error_at(
                self.tok,
                format!(
                    "nesting is too deep: graphs and types may nest at most {MAX_DEPTH} levels"
                ),
            ));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth = self.depth.saturating_sub(1);
    }

    // ----- literals --------------------------------------------------------

    fn identifier(&mut self, what: &str) -> PResult<String> {
        if self.at_ident() {
            let tok = self.bump()?;
            Ok(self.text(tok).to_owned())
        } else {
            Err(self.expected(what))
        }
    }

    /// An identifier or a quoted name (`"a.b"`).
    fn quotable_id(&mut self, what: &str) -> PResult<String> {
        match self.tok.kind {
            TokenKind::Ident => self.identifier(what),
            TokenKind::Str => self.string_literal(what),
            _ => Err(self.expected(what)),
        }
    }

    fn string_literal(&mut self, what: &str) -> PResult<String> {
        if self.tok.kind == TokenKind::Str {
            let tok = self.bump()?;
            Ok(string_value(self.text(tok)))
        } else {
            Err(self.expected(what))
        }
    }

    /// An integer literal that fits in `i64`.
    fn int64(&mut self, what: &str) -> PResult<i64> {
        if self.tok.kind != TokenKind::Int {
            return Err(self.expected(what));
        }
        let tok = self.bump()?;
        self.int64_of(tok)
    }

    fn int64_of(&self, tok: Token) -> PResult<i64> {
        let text = self.text(tok);
        text.parse::<i64>().map_err(|_| {
            self.error_at(tok, format!("integer '{text}' is out of range for a 64-bit integer"))
        })
    }

    /// A number literal read as `f32` (an integer, a float, `inf` or `nan`).
    fn float32(&mut self, what: &str) -> PResult<f32> {
        let tok = self.number_token(what)?;
        self.float32_of(tok)
    }

    fn float64(&mut self, what: &str) -> PResult<f64> {
        let tok = self.number_token(what)?;
        self.float64_of(tok)
    }

    /// Consumes a token that can be read as a float.
    fn number_token(&mut self, what: &str) -> PResult<Token> {
        let ok = match self.tok.kind {
            TokenKind::Int | TokenKind::Float => true,
            TokenKind::Ident => is_float_word(self.text(self.tok)),
            _ => false,
        };
        if ok { self.bump() } else { Err(self.expected(what)) }
    }

    fn float32_of(&self, tok: Token) -> PResult<f32> {
        let text = self.text(tok);
        let (negative, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let value = if body.eq_ignore_ascii_case("nan") {
            f32::NAN
        } else if is_float_word(body) {
            f32::INFINITY
        } else {
            let v: f32 = body
                .parse()
                .map_err(|_| self.error_at(tok, format!("malformed number '{text}'")))?;
            if v.is_infinite() {
                return Err(self
                    .error_at(tok, format!("number '{text}' is out of range for a 32-bit float")));
            }
            v
        };
        Ok(if negative { -value } else { value })
    }

    fn float64_of(&self, tok: Token) -> PResult<f64> {
        let text = self.text(tok);
        let (negative, body) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let value = if body.eq_ignore_ascii_case("nan") {
            f64::NAN
        } else if is_float_word(body) {
            f64::INFINITY
        } else {
            let v: f64 = body
                .parse()
                .map_err(|_| self.error_at(tok, format!("malformed number '{text}'")))?;
            if v.is_infinite() {
                return Err(self
                    .error_at(tok, format!("number '{text}' is out of range for a 64-bit float")));
            }
            v
        };
        Ok(if negative { -value } else { value })
    }

    // ----- model -------------------------------------------------------------

    /// model ::= header? graph function*
    fn model(&mut self) -> PResult<ModelProto> {
        let mut model = ModelProto::default();
        if self.at(b'<') {
            self.model_header(&mut model)?;
        }
        model.graph = Some(self.graph()?);
        while self.tok.kind != TokenKind::Eof {
            model.functions.push(self.function()?);
        }
        Ok(model)
    }

    /// `< key: value, ... >` before the main graph.
    fn model_header(&mut self, model: &mut ModelProto) -> PResult<()> {
        self.expect(b'<', "'<'")?;
        loop {
            let key_tok = self.tok;
            let key = self.identifier("a model header key such as 'ir_version'")?;
            self.expect(b':', &format!("':' after '{key}'"))?;
            match key.as_str() {
                "ir_version" => model.ir_version = Some(self.int64("an integer IR version")?),
                "opset_import" => model.opset_import.extend(self.opset_list()?),
                "producer_name" => {
                    model.producer_name = Some(self.string_literal("a producer name string")?);
                }
                "producer_version" => {
                    model.producer_version =
                        Some(self.string_literal("a producer version string")?);
                }
                "domain" => model.domain = Some(self.string_literal("a domain string")?),
                "model_version" => {
                    model.model_version = Some(self.int64("an integer model version")?);
                }
                "doc_string" => model.doc_string = Some(self.string_literal("a doc string")?),
                "metadata_props" => model.metadata_props.extend(self.metadata_list()?),
                _ => {
                    return Err(self.error_at(
                        key_tok,
                        format!(
                            "unknown model header key '{key}': expected ir_version, opset_import, \
                             producer_name, producer_version, domain, model_version, doc_string \
                             or metadata_props"
                        ),
                    ));
                }
            }
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b'>', "',' or '>' in the model header")?;
        Ok(())
    }

    /// `[ "domain" : version, ... ]`
    fn opset_list(&mut self) -> PResult<Vec<OperatorSetIdProto>> {
        self.expect(b'[', "'[' to start the opset_import list")?;
        let mut list = Vec::new();
        if self.eat(b']')? {
            return Ok(list);
        }
        loop {
            let domain = self.string_literal("a quoted opset domain (\"\" for the default)")?;
            self.expect(b':', "':' after the opset domain")?;
            let version = self.int64("an integer opset version")?;
            list.push(OperatorSetIdProto { domain: Some(domain), version: Some(version) });
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b']', "',' or ']' in the opset_import list")?;
        Ok(list)
    }

    /// `[ "key" : "value", ... ]`
    fn metadata_list(&mut self) -> PResult<Vec<StringStringEntryProto>> {
        self.expect(b'[', "'[' to start the metadata_props list")?;
        if self.eat(b']')? {
            return Ok(Vec::new());
        }
        let list = self.string_pairs()?;
        self.expect(b']', "',' or ']' in the metadata_props list")?;
        Ok(list)
    }

    /// `"key" : "value" (, "key" : "value")*`
    fn string_pairs(&mut self) -> PResult<Vec<StringStringEntryProto>> {
        let mut list = Vec::new();
        loop {
            let key = self.string_literal("a quoted key")?;
            self.expect(b':', "':' after the key")?;
            let value = self.string_literal("a quoted value")?;
            list.push(StringStringEntryProto { key: Some(key), value: Some(value) });
            if !self.eat(b',')? {
                return Ok(list);
            }
        }
    }

    // ----- graphs ------------------------------------------------------------

    /// graph ::= name inputs? '=>' outputs ('<' value-infos/initializers '>')? nodes
    fn graph(&mut self) -> PResult<GraphProto> {
        self.enter()?;
        let offset = self.tok.start;
        let mut graph =
            GraphProto { name: Some(self.quotable_id("a graph name")?), ..GraphProto::default() };
        let name_len = self.lex_end().saturating_sub(offset);
        self.graph_spans.push(GraphSpan {
            name: graph.name().to_owned(),
            offset,
            name_len,
            ..GraphSpan::default()
        });
        if self.eat(b'(')? && !self.eat(b')')? {
            loop {
                let vi = self.value_info("a graph input (a type and a name)")?;
                if self.at(b'=') {
                    let eq = self.bump()?;
                    graph.initializer.push(self.initializer(&vi, eq)?);
                }
                graph.input.push(vi);
                if !self.eat(b',')? {
                    break;
                }
            }
            self.expect(b')', "',' or ')' after a graph input")?;
        }
        self.expect_arrow("'=>' between the graph inputs and outputs")?;
        self.expect(b'(', "'(' to start the graph outputs")?;
        if !self.eat(b')')? {
            loop {
                graph.output.push(self.value_info("a graph output (a type and a name)")?);
                if !self.eat(b',')? {
                    break;
                }
            }
            self.expect(b')', "',' or ')' after a graph output")?;
        }
        if self.eat(b'<')? && !self.eat(b'>')? {
            loop {
                let vi = self.value_info("an initializer or value info (a type and a name)")?;
                if self.at(b'=') {
                    let eq = self.bump()?;
                    graph.initializer.push(self.initializer(&vi, eq)?);
                } else {
                    graph.value_info.push(vi);
                }
                if !self.eat(b',')? {
                    break;
                }
            }
            self.expect(b'>', "',' or '>' after an initializer or value info")?;
        }
        graph.node = self.node_list()?;
        self.leave();
        if let Some(span) = self.graph_spans.pop() {
            match self.node_spans.last_mut().and_then(|n| n.attributes.last_mut()) {
                Some(attr) => attr.graphs.push(span),
                None if self.main_span.is_none() => self.main_span = Some(span),
                None => {}
            }
        }
        Ok(graph)
    }

    /// The tensor after `type name =`: its name is the value's name.
    fn initializer(&mut self, vi: &ValueInfoProto, eq: Token) -> PResult<TensorProto> {
        let mut tensor = TensorProto { name: vi.name.clone(), ..TensorProto::default() };
        let ty = vi.r#type.clone().unwrap_or_default();
        self.tensor_data(&mut tensor, &ty, eq)?;
        Ok(tensor)
    }

    /// value-info ::= type? name
    fn value_info(&mut self, what: &str) -> PResult<ValueInfoProto> {
        let r#type = if self.next_is_type() { Some(self.type_proto()?) } else { None };
        let what = if r#type.is_some() { "a name after the type" } else { what };
        let at = self.tok;
        let name = self.quotable_id(what)?;
        if let Some(g) = self.graph_spans.last_mut() {
            g.values.push((name.clone(), at.start, at.end.saturating_sub(at.start)));
        }
        Ok(ValueInfoProto { name: Some(name), r#type, ..ValueInfoProto::default() })
    }

    /// Whether the current token starts a type.
    fn next_is_type(&self) -> bool {
        self.at_ident() && {
            let text = self.text(self.tok);
            primitive_type(text).is_some() || TYPE_KEYWORDS.contains(&text)
        }
    }

    // ----- types -------------------------------------------------------------

    /// type ::= tensor-type | seq(type) | map(prim, type) | optional(type)
    ///        | sparse_tensor(tensor-type) | opaque(...)
    fn type_proto(&mut self) -> PResult<TypeProto> {
        self.enter()?;
        let tok = self.tok;
        let name = self.identifier("a type")?;
        let value = if let Some(elem) = primitive_type(&name) {
            let (elem_type, shape) = self.tensor_type_rest(elem)?;
            type_proto::Value::TensorType(type_proto::Tensor { elem_type, shape })
        } else {
            match name.as_str() {
                "seq" => {
                    self.expect(b'(', "'(' after 'seq'")?;
                    let elem = self.type_proto()?;
                    self.expect(b')', "')' to close 'seq('")?;
                    type_proto::Value::SequenceType(Box::new(type_proto::Sequence {
                        elem_type: Some(Box::new(elem)),
                    }))
                }
                "map" => {
                    self.expect(b'(', "'(' after 'map'")?;
                    let key_tok = self.tok;
                    let key = self.identifier("a key type")?;
                    let Some(key_type) = primitive_type(&key) else {
                        return Err(self.error_at(
                            key_tok,
                            format!("expected a primitive key type for 'map', found '{key}'"),
                        ));
                    };
                    self.expect(b',', "',' after the map key type")?;
                    let value = self.type_proto()?;
                    self.expect(b')', "')' to close 'map('")?;
                    type_proto::Value::MapType(Box::new(type_proto::Map {
                        key_type: Some(key_type as i32),
                        value_type: Some(Box::new(value)),
                    }))
                }
                "optional" => {
                    self.expect(b'(', "'(' after 'optional'")?;
                    let elem = self.type_proto()?;
                    self.expect(b')', "')' to close 'optional('")?;
                    type_proto::Value::OptionalType(Box::new(type_proto::Optional {
                        elem_type: Some(Box::new(elem)),
                    }))
                }
                "sparse_tensor" => {
                    self.expect(b'(', "'(' after 'sparse_tensor'")?;
                    let elem_tok = self.tok;
                    let elem = self.identifier("an element type")?;
                    let Some(elem) = primitive_type(&elem) else {
                        return Err(self.error_at(
                            elem_tok,
                            format!(
                                "expected a primitive element type for 'sparse_tensor', found '{elem}'"
                            ),
                        ));
                    };
                    let (elem_type, shape) = self.tensor_type_rest(elem)?;
                    self.expect(b')', "')' to close 'sparse_tensor('")?;
                    type_proto::Value::SparseTensorType(type_proto::SparseTensor {
                        elem_type,
                        shape,
                    })
                }
                "opaque" => self.opaque_rest()?,
                _ => {
                    return Err(self.error_at(
                        tok,
                        format!(
                            "expected a type (an element type such as 'float', or seq, map, \
                             optional, sparse_tensor, opaque), found '{name}'"
                        ),
                    ));
                }
            }
        };
        self.leave();
        Ok(TypeProto { value: Some(value), denotation: None })
    }

    /// After an element type: `[dims]`, `[]` (unknown rank) or nothing (a scalar).
    fn tensor_type_rest(
        &mut self,
        elem: DataType,
    ) -> PResult<(Option<i32>, Option<TensorShapeProto>)> {
        let shape = if self.eat(b'[')? {
            if self.eat(b']')? {
                None
            } else {
                let mut dims = Vec::new();
                loop {
                    dims.push(self.dimension()?);
                    if !self.eat(b',')? {
                        break;
                    }
                }
                self.expect(b']', "',' or ']' after a dimension")?;
                Some(TensorShapeProto { dim: dims })
            }
        } else {
            Some(TensorShapeProto::default())
        };
        Ok((Some(elem as i32), shape))
    }

    /// tensor-dim ::= '?' | id | "quoted" | integer
    fn dimension(&mut self) -> PResult<Dimension> {
        let value = match self.tok.kind {
            TokenKind::Punct(b'?') => {
                self.bump()?;
                None
            }
            TokenKind::Ident => Some(dimension::Value::DimParam(self.identifier("a dimension")?)),
            TokenKind::Str => Some(dimension::Value::DimParam(self.string_literal("a dimension")?)),
            TokenKind::Int => Some(dimension::Value::DimValue(self.int64("a dimension")?)),
            _ => {
                return Err(self.expected("a dimension (an integer, a symbolic name or '?')"));
            }
        };
        Ok(Dimension { value, denotation: None })
    }

    /// `opaque()`, `opaque(name)` or `opaque(domain, name)` (dotted domain).
    fn opaque_rest(&mut self) -> PResult<type_proto::Value> {
        self.expect(b'(', "'(' after 'opaque'")?;
        let mut opaque = type_proto::Opaque::default();
        if !self.eat(b')')? {
            let mut first = self.identifier("an opaque type name or domain")?;
            while self.eat(b'.')? {
                first.push('.');
                first.push_str(&self.identifier("an identifier after '.'")?);
            }
            if self.eat(b',')? {
                opaque.domain = Some(first);
                opaque.name = Some(self.identifier("an opaque type name")?);
            } else {
                opaque.name = Some(first);
            }
            self.expect(b')', "')' to close 'opaque('")?;
        }
        Ok(type_proto::Value::OpaqueType(opaque))
    }

    // ----- tensors -----------------------------------------------------------

    /// The data of a tensor of type `ty`: `{values}`, `[external data]` or nothing.
    /// `at` is the token to blame for a type that cannot hold a tensor.
    fn tensor_data(&mut self, tensor: &mut TensorProto, ty: &TypeProto, at: Token) -> PResult<()> {
        let Some(type_proto::Value::TensorType(tensor_type)) = &ty.value else {
            return Err(self.error_at(at, "a tensor value needs a tensor type such as 'float[2]'"));
        };
        let elem = tensor_type.elem_type.unwrap_or(0);
        tensor.data_type = Some(elem);
        let Some(shape) = &tensor_type.shape else {
            return Err(self.error_at(
                at,
                "a tensor value needs a known shape: write 'float[2]', or 'float' for a scalar, not 'float[]'",
            ));
        };
        for dim in &shape.dim {
            match &dim.value {
                Some(dimension::Value::DimValue(v)) => tensor.dims.push(*v),
                _ => {
                    return Err(self.error_at(
                        at,
                        "the dimensions of a tensor value must be numbers, not '?' or names",
                    ));
                }
            }
        }
        if self.eat(b'{')? {
            if !self.eat(b'}')? {
                let elem = DataType::try_from(elem).unwrap_or(DataType::Undefined);
                loop {
                    self.tensor_element(tensor, elem)?;
                    if !self.eat(b',')? {
                        break;
                    }
                }
                self.expect(b'}', "',' or '}' after a tensor element")?;
            }
        } else if self.eat(b'[')? {
            tensor.data_location = Some(DataLocation::External as i32);
            tensor.external_data = self.string_pairs()?;
            self.expect(b']', "',' or ']' in the external data list")?;
        }
        Ok(())
    }

    /// One element of a tensor's `{...}`, stored where the reference stores it.
    fn tensor_element(&mut self, tensor: &mut TensorProto, elem: DataType) -> PResult<()> {
        use DataType as D;
        match elem {
            D::Int2
            | D::Int4
            | D::Int8
            | D::Int16
            | D::Int32
            | D::Uint2
            | D::Uint4
            | D::Uint8
            | D::Uint16
            | D::Float16
            | D::Bfloat16
            | D::Float8e4m3fn
            | D::Float8e4m3fnuz
            | D::Float8e5m2
            | D::Float8e5m2fnuz
            | D::Float6e2m3
            | D::Float6e3m2
            | D::Float8e8m0
            | D::Bool
            | D::Float4e2m1 => {
                let tok = self.tok;
                let v = self.int64("an integer tensor element")?;
                let v = i32::try_from(v).map_err(|_| {
                    self.error_at(
                        tok,
                        format!(
                            "integer '{v}' is out of range for a {} tensor element (32-bit storage)",
                            type_name(elem)
                        ),
                    )
                })?;
                tensor.int32_data.push(v);
            }
            D::Int64 => tensor.int64_data.push(self.int64("an integer tensor element")?),
            D::Uint32 | D::Uint64 => {
                if self.tok.kind != TokenKind::Int {
                    return Err(self.expected("a non-negative integer tensor element"));
                }
                let tok = self.bump()?;
                let text = self.text(tok);
                let max = if elem == D::Uint32 { u64::from(u32::MAX) } else { u64::MAX };
                match text.parse::<u64>() {
                    Ok(v) if v <= max => tensor.uint64_data.push(v),
                    _ => {
                        return Err(self.error_at(
                            tok,
                            format!(
                                "integer '{text}' is out of range for a {} tensor element",
                                type_name(elem)
                            ),
                        ));
                    }
                }
            }
            D::Float | D::Complex64 => tensor.float_data.push(self.float32("a number")?),
            D::Double | D::Complex128 => tensor.double_data.push(self.float64("a number")?),
            D::String => tensor.string_data.push(self.string_literal("a string")?.into_bytes()),
            D::Undefined => return Err(self.expected("no data for an undefined element type")),
        }
        Ok(())
    }

    // ----- nodes -------------------------------------------------------------

    /// node-list ::= '{' node* '}'
    fn node_list(&mut self) -> PResult<Vec<NodeProto>> {
        self.expect(b'{', "'{' to start the node list")?;
        let mut nodes = Vec::new();
        while !self.eat(b'}')? {
            if self.tok.kind == TokenKind::Eof {
                return Err(self.expected("a node or '}' to close the node list"));
            }
            nodes.push(self.node()?);
        }
        Ok(nodes)
    }

    /// node ::= ('[' name ']')? outputs '=' op attrs? '(' inputs ')' attrs?
    fn node(&mut self) -> PResult<NodeProto> {
        self.node_spans.push(NodeSpan { offset: self.tok.start, ..NodeSpan::default() });
        let node = self.node_body()?;
        if let Some(mut span) = self.node_spans.pop() {
            span.name = node.name().to_owned();
            if let Some(g) = self.graph_spans.last_mut() {
                g.nodes.push(span);
            }
        }
        Ok(node)
    }

    fn node_body(&mut self) -> PResult<NodeProto> {
        let mut node = NodeProto::default();
        if self.eat(b'[')? {
            node.name = Some(match self.tok.kind {
                TokenKind::Ident | TokenKind::Str => self.quotable_id("a node name")?,
                _ => String::new(),
            });
            self.expect(b']', "']' after the node name")?;
        }
        node.output = self.id_list()?;
        self.expect(b'=', "'=' after the node outputs (or a node, or '}')")?;
        let op_start = self.tok.start;
        let mut op = self.identifier("an operator name")?;
        let mut domain = String::new();
        while self.eat(b'.')? {
            if !domain.is_empty() {
                domain.push('.');
            }
            domain.push_str(&op);
            op = self.identifier("an identifier after '.' in the operator name")?;
        }
        let op_end = self.lex_end();
        if let Some(span) = self.node_spans.last_mut() {
            span.op_offset = op_start;
            span.op_len = op_end.saturating_sub(op_start);
        }
        node.domain = Some(domain);
        node.op_type = Some(op);
        if self.eat(b':')? {
            node.overload = Some(self.identifier("an overload name after ':'")?);
        }
        if self.at(b'<') {
            node.attribute = self.attribute_list()?;
        }
        self.expect(b'(', "'(' to start the node inputs")?;
        node.input = self.id_list()?;
        self.expect(b')', "')' or ',' after a node input")?;
        if node.attribute.is_empty() && self.at(b'<') {
            node.attribute = self.attribute_list()?;
        }
        Ok(node)
    }

    /// A comma-separated list of names where a name may be left out
    /// (`a, , c`) or written `""`; a trailing comma adds nothing
    /// (`(,)` is one empty name, `(x,)` is just `x`), as in the reference.
    fn id_list(&mut self) -> PResult<Vec<String>> {
        let mut list = Vec::new();
        loop {
            match self.tok.kind {
                TokenKind::Ident | TokenKind::Str => list.push(self.quotable_id("a name")?),
                TokenKind::Punct(b',') => list.push(String::new()),
                _ => break,
            }
            if !self.eat(b',')? {
                break;
            }
        }
        Ok(list)
    }

    // ----- attributes --------------------------------------------------------

    /// attr-list ::= '<' attr (',' attr)* '>'
    fn attribute_list(&mut self) -> PResult<Vec<AttributeProto>> {
        self.expect(b'<', "'<'")?;
        let mut list = Vec::new();
        loop {
            let name = self.identifier("an attribute name")?;
            list.push(self.attribute(name)?);
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b'>', "',' or '>' after an attribute")?;
        Ok(list)
    }

    /// After the attribute name: (':' type)? '=' value.
    fn attribute(&mut self, name: String) -> PResult<AttributeProto> {
        if let Some(n) = self.node_spans.last_mut() {
            n.attributes.push(AttrSpan {
                name: name.clone(),
                offset: self.prev.start,
                graphs: Vec::new(),
            });
        }
        let mut attr = AttributeProto { name: Some(name), ..AttributeProto::default() };
        if self.eat(b':')? {
            let tok = self.tok;
            let ty = self.identifier("an attribute type such as 'int' or 'floats'")?;
            let Some(&(_, t)) = ATTRIBUTE_TYPES.iter().find(|(n, _)| *n == ty) else {
                return Err(self.error_at(
                    tok,
                    format!(
                        "unknown attribute type '{ty}': expected float, int, string, tensor, \
                         graph, sparse_tensor, type_proto or their plurals (floats, ints, ...)"
                    ),
                ));
            };
            attr.r#type = Some(t as i32);
        }
        self.expect(b'=', "'=' after the attribute name")?;
        if self.at(b'[') {
            self.attribute_list_value(&mut attr)?;
        } else {
            let expected = attr.r#type();
            self.single_attribute_value(&mut attr, expected)?;
        }
        Ok(attr)
    }

    /// `[v, ...]`: the annotation or the first element fixes the element kind;
    /// integers are accepted in a list of floats.
    fn attribute_list_value(&mut self, attr: &mut AttributeProto) -> PResult<()> {
        let open = self.expect(b'[', "'['")?;
        if self.eat(b']')? {
            let name = attr.name().to_owned();
            return match attr.r#type() {
                AttributeType::Undefined => Err(self.error_at(
                    open,
                    format!(
                        "the empty list of attribute '{name}' needs a type annotation, as in '{name}: ints = []'"
                    ),
                )),
                t if !is_list(t) => Err(self.error_at(
                    open,
                    format!(
                        "attribute '{name}' is declared '{}', which is not a list type",
                        attribute_type_name(t)
                    ),
                )),
                _ => Ok(()),
            };
        }
        loop {
            let expected = singleton(attr.r#type());
            let mut element = AttributeProto { name: attr.name.clone(), ..Default::default() };
            let tok = self.tok;
            self.single_attribute_value(&mut element, expected)?;
            if element.ref_attr_name.is_some() {
                return Err(self.error_at(
                    tok,
                    "an attribute reference '@name' cannot be a list element; use it for the whole attribute",
                ));
            }
            let list_type = match element.r#type() {
                AttributeType::Int => {
                    attr.ints.push(element.i());
                    AttributeType::Ints
                }
                AttributeType::Float => {
                    attr.floats.push(element.f());
                    AttributeType::Floats
                }
                AttributeType::String => {
                    attr.strings.push(element.s.unwrap_or_default());
                    AttributeType::Strings
                }
                AttributeType::Tensor => {
                    attr.tensors.extend(element.t.map(|t| *t));
                    AttributeType::Tensors
                }
                AttributeType::Graph => {
                    attr.graphs.extend(element.g.map(|g| *g));
                    AttributeType::Graphs
                }
                AttributeType::TypeProto => {
                    attr.type_protos.extend(element.tp.map(|t| *t));
                    AttributeType::TypeProtos
                }
                other => other,
            };
            attr.r#type = Some(list_type as i32);
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b']', "',' or ']' after a list element")?;
        Ok(())
    }

    /// single-attr-value ::= tensor-constant | type | graph | number | string | '@' name
    ///
    /// `expected` is the annotated kind (`Undefined` when there is none).
    fn single_attribute_value(
        &mut self,
        attr: &mut AttributeProto,
        expected: AttributeType,
    ) -> PResult<()> {
        let start = self.tok;
        match self.tok.kind {
            TokenKind::Ident if self.next_is_type() => {
                let ty = self.type_proto()?;
                let is_tensor = matches!(self.tok.kind, TokenKind::Ident | TokenKind::Str)
                    || self.at(b'{')
                    || self.at(b'=');
                if is_tensor {
                    let name = match self.tok.kind {
                        TokenKind::Ident | TokenKind::Str => self.quotable_id("a tensor name")?,
                        _ => String::new(),
                    };
                    self.eat(b'=')?;
                    let mut tensor = TensorProto { name: Some(name), ..TensorProto::default() };
                    self.tensor_data(&mut tensor, &ty, start)?;
                    attr.r#type = Some(AttributeType::Tensor as i32);
                    attr.t = Some(Box::new(tensor));
                } else {
                    attr.r#type = Some(AttributeType::TypeProto as i32);
                    attr.tp = Some(Box::new(ty));
                }
            }
            TokenKind::Ident if is_float_word(self.text(self.tok)) => {
                let f = self.float32("a number")?;
                attr.r#type = Some(AttributeType::Float as i32);
                attr.f = Some(f);
            }
            TokenKind::Ident => {
                attr.r#type = Some(AttributeType::Graph as i32);
                attr.g = Some(Box::new(self.graph()?));
            }
            TokenKind::Punct(b'@') => {
                self.bump()?;
                attr.ref_attr_name = Some(self.quotable_id("an attribute name after '@'")?);
            }
            TokenKind::Int if expected == AttributeType::Float => {
                let f = self.float32("a number")?;
                attr.r#type = Some(AttributeType::Float as i32);
                attr.f = Some(f);
            }
            TokenKind::Int => {
                let i = self.int64("an integer")?;
                attr.r#type = Some(AttributeType::Int as i32);
                attr.i = Some(i);
            }
            TokenKind::Float => {
                let f = self.float32("a number")?;
                attr.r#type = Some(AttributeType::Float as i32);
                attr.f = Some(f);
            }
            TokenKind::Str => {
                let s = self.string_literal("a string")?;
                attr.r#type = Some(AttributeType::String as i32);
                attr.s = Some(s.into_bytes());
            }
            _ => {
                return Err(self.expected(
                    "an attribute value (a number, string, tensor, type, graph, list or '@' reference)",
                ));
            }
        }
        if expected != AttributeType::Undefined && attr.r#type() != expected {
            return Err(self.error_at(
                start,
                format!(
                    "attribute '{}' is declared '{}' but its value is {}",
                    attr.name(),
                    attribute_type_name(expected),
                    kind_words(attr.r#type())
                ),
            ));
        }
        Ok(())
    }

    // ----- functions ---------------------------------------------------------

    /// function ::= header? name ('<' attrs '>')? '(' io ')' '=>' '(' io ')'
    ///              ('<' value-infos '>')? nodes
    fn function(&mut self) -> PResult<FunctionProto> {
        let mut function = FunctionProto::default();
        if self.at(b'<') {
            self.function_header(&mut function)?;
        }
        function.name = Some(self.quotable_id("a function name (or the end of the model)")?);
        if self.eat(b'<')? {
            loop {
                let name = self.quotable_id("a function attribute name")?;
                if self.at(b':') || self.at(b'=') {
                    function.attribute_proto.push(self.attribute(name)?);
                } else {
                    function.attribute.push(name);
                }
                if !self.eat(b',')? {
                    break;
                }
            }
            self.expect(b'>', "',' or '>' after a function attribute")?;
        }
        function.input = self.function_io(&mut function.value_info, "function inputs")?;
        self.expect_arrow("'=>' between the function inputs and outputs")?;
        function.output = self.function_io(&mut function.value_info, "function outputs")?;
        if self.eat(b'<')? && !self.eat(b'>')? {
            loop {
                function.value_info.push(self.value_info("a value info (a type and a name)")?);
                if !self.eat(b',')? {
                    break;
                }
            }
            self.expect(b'>', "',' or '>' after a value info")?;
        }
        function.node = self.node_list()?;
        Ok(function)
    }

    /// `< key: value, ... >` before a function.
    fn function_header(&mut self, function: &mut FunctionProto) -> PResult<()> {
        self.expect(b'<', "'<'")?;
        loop {
            let key_tok = self.tok;
            let key = self.identifier("a function header key such as 'domain'")?;
            self.expect(b':', &format!("':' after '{key}'"))?;
            match key.as_str() {
                "opset_import" => function.opset_import.extend(self.opset_list()?),
                "doc_string" => function.doc_string = Some(self.string_literal("a doc string")?),
                "domain" => function.domain = Some(self.string_literal("a domain string")?),
                "overload" => function.overload = Some(self.string_literal("an overload string")?),
                _ => {
                    return Err(self.error_at(
                        key_tok,
                        format!(
                            "unknown function header key '{key}': expected domain, opset_import, \
                             doc_string or overload"
                        ),
                    ));
                }
            }
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b'>', "',' or '>' in the function header")?;
        Ok(())
    }

    /// `( [type] name, ... )`: the names, and a value info for each typed one.
    fn function_io(
        &mut self,
        value_info: &mut Vec<ValueInfoProto>,
        what: &str,
    ) -> PResult<Vec<String>> {
        self.expect(b'(', &format!("'(' to start the {what}"))?;
        let mut names = Vec::new();
        if self.eat(b')')? {
            return Ok(names);
        }
        loop {
            let r#type = if self.next_is_type() { Some(self.type_proto()?) } else { None };
            let name = self.quotable_id("a name")?;
            if r#type.is_some() {
                value_info.push(ValueInfoProto {
                    name: Some(name.clone()),
                    r#type,
                    ..ValueInfoProto::default()
                });
            }
            names.push(name);
            if !self.eat(b',')? {
                break;
            }
        }
        self.expect(b')', &format!("',' or ')' in the {what}"))?;
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "<ir_version: 10, opset_import: [\"\" : 21]>\n";

    fn graph(body: &str) -> GraphProto {
        let src = format!("{HEAD}g (float x) => (float y) {{\n{body}\n}}");
        parse_model_here(&src, "t").unwrap_or_else(|e| panic!("{e}")).graph.unwrap()
    }

    fn node(text: &str) -> NodeProto {
        graph(text).node.remove(0)
    }

    fn attr(text: &str) -> AttributeProto {
        node(&format!("y = Foo <{text}> ()")).attribute.remove(0)
    }

    fn error(src: &str) -> String {
        parse_model_here(src, "t").unwrap_err().diagnostics()[0].message.clone()
    }

    #[test]
    fn header_keys_fill_their_fields() {
        let src = "<ir_version: 7, opset_import: [\"\": 13, \"x\": 1], producer_name: \"p\", \
                   producer_version: \"v\", domain: \"d\", model_version: 3, doc_string: \"doc\", \
                   metadata_props: [\"k\": \"v\"], opset_import: []> g () => () {}";
        let m = parse_model_here(src, "t").unwrap();
        assert_eq!(m.ir_version, Some(7));
        assert_eq!(m.opset_import.len(), 2);
        assert_eq!(m.opset_import[1].domain.as_deref(), Some("x"));
        assert_eq!(m.producer_name.as_deref(), Some("p"));
        assert_eq!(m.producer_version.as_deref(), Some("v"));
        assert_eq!(m.domain.as_deref(), Some("d"));
        assert_eq!(m.model_version, Some(3));
        assert_eq!(m.doc_string.as_deref(), Some("doc"));
        assert_eq!(m.metadata_props[0].value.as_deref(), Some("v"));
        let bare = parse_model_here("g () => () {}", "t").unwrap();
        assert_eq!(bare.ir_version, None);
        assert!(bare.opset_import.is_empty());
    }

    #[test]
    fn node_fields_and_presence() {
        let n = node("y = Relu (x)");
        assert_eq!(n.domain.as_deref(), Some(""));
        assert_eq!(n.op_type.as_deref(), Some("Relu"));
        assert_eq!(n.name, None);
        assert_eq!(n.overload, None);
        let n = node("[\"n/1\"] a, b = com.microsoft.Foo:v2 (x) <k = 1>");
        assert_eq!(n.name.as_deref(), Some("n/1"));
        assert_eq!(n.domain.as_deref(), Some("com.microsoft"));
        assert_eq!(n.op_type.as_deref(), Some("Foo"));
        assert_eq!(n.overload.as_deref(), Some("v2"));
        assert_eq!(n.output, ["a", "b"]);
        assert_eq!(n.attribute[0].i, Some(1));
        assert_eq!(node("[] y = Foo ()").name.as_deref(), Some(""));
    }

    #[test]
    fn name_lists_with_empty_entries() {
        let inputs = |s: &str| node(&format!("y = Foo ({s})")).input;
        assert!(inputs("").is_empty());
        assert_eq!(inputs(",x"), ["", "x"]);
        assert_eq!(inputs("x,"), ["x"]);
        assert_eq!(inputs(","), [""]);
        assert_eq!(inputs("a,,b"), ["a", "", "b"]);
        assert_eq!(inputs("\"\", \"a.b\""), ["", "a.b"]);
        assert!(node("= Foo ()").output.is_empty());
    }

    #[test]
    fn attribute_kinds() {
        assert_eq!((attr("a = 3").i, attr("a = 3").r#type()), (Some(3), AttributeType::Int));
        assert_eq!(attr("a: float = 3").f, Some(3.0));
        assert_eq!(attr("a: float = -0").f.map(f32::to_bits), Some(0x8000_0000));
        assert_eq!(attr("a = -nan").f.map(f32::to_bits), Some(0xffc0_0000));
        assert_eq!(attr("a = NaN").f.map(f32::to_bits), Some(0x7fc0_0000));
        assert_eq!(attr("a = -Infinity").f, Some(f32::NEG_INFINITY));
        assert_eq!(attr("a = \"q\\\"\"").s.as_deref(), Some(&b"q\""[..]));
        let r = attr("a = @b");
        assert_eq!((r.ref_attr_name.as_deref(), r.r#type), (Some("b"), None));
        let r = attr("a: ints = @b");
        assert_eq!(r.r#type(), AttributeType::Ints);
        let t = attr("a = float[2] {1, 2}");
        let tensor = t.t.unwrap();
        assert_eq!(tensor.name.as_deref(), Some(""));
        assert_eq!((tensor.dims, tensor.float_data), (vec![2], vec![1.0, 2.0]));
        let tp = attr("a = float[2]");
        assert_eq!(tp.r#type(), AttributeType::TypeProto);
        let g = attr("a = body () => () {}");
        assert_eq!(g.g.unwrap().name.as_deref(), Some("body"));
    }

    #[test]
    fn attribute_lists() {
        let l = attr("a = [1.0, 2]");
        assert_eq!((l.r#type(), l.floats), (AttributeType::Floats, vec![1.0, 2.0]));
        let l = attr("a: int = [1, 2]");
        assert_eq!((l.r#type(), l.ints), (AttributeType::Ints, vec![1, 2]));
        let l = attr("a: strings = []");
        assert_eq!((l.r#type(), l.strings.len()), (AttributeType::Strings, 0));
        // The reference drops these elements; we keep them.
        let l = attr("a = [float {1}, int64[2] named {1, 2}]");
        assert_eq!(l.r#type(), AttributeType::Tensors);
        assert_eq!(l.tensors.len(), 2);
        assert_eq!(l.tensors[1].name.as_deref(), Some("named"));
        assert_eq!(l.tensors[1].int64_data, [1, 2]);
        let l = attr("a = [g1 () => () {}, g2 () => () {}]");
        assert_eq!((l.r#type(), l.graphs.len()), (AttributeType::Graphs, 2));
        let l = attr("a = [float, seq(int8)]");
        assert_eq!((l.r#type(), l.type_protos.len()), (AttributeType::TypeProtos, 2));
    }

    #[test]
    fn types_and_dimensions() {
        let g = parse_model_here(
            "g (float[?, N, \"a b\", -1] a, float b, float[] c, opaque(x.y, z) d, x) => () {}",
            "t",
        )
        .unwrap()
        .graph
        .unwrap();
        let Some(type_proto::Value::TensorType(t)) = &g.input[0].r#type.as_ref().unwrap().value
        else {
            panic!("not a tensor type")
        };
        let dims: Vec<_> = t.shape.as_ref().unwrap().dim.iter().map(|d| d.value.clone()).collect();
        assert_eq!(
            dims,
            [
                None,
                Some(dimension::Value::DimParam("N".into())),
                Some(dimension::Value::DimParam("a b".into())),
                Some(dimension::Value::DimValue(-1)),
            ]
        );
        let shape_of = |i: usize| match &g.input[i].r#type.as_ref().unwrap().value {
            Some(type_proto::Value::TensorType(t)) => t.shape.clone(),
            _ => panic!("not a tensor type"),
        };
        assert_eq!(shape_of(1), Some(TensorShapeProto::default()));
        assert_eq!(shape_of(2), None);
        assert_eq!(
            g.input[3].r#type.as_ref().unwrap().value,
            Some(type_proto::Value::OpaqueType(type_proto::Opaque {
                domain: Some("x.y".into()),
                name: Some("z".into()),
            }))
        );
        assert_eq!(g.input[4].r#type, None);
    }

    #[test]
    fn tensor_storage_per_element_type() {
        let t = |s: &str| attr(&format!("a = {s}")).t.unwrap();
        assert_eq!(t("float16[2] {15360, 65535}").int32_data, [15360, 65535]);
        assert_eq!(t("bool[2] {1, 0}").int32_data, [1, 0]);
        assert_eq!(t("uint32[1] {4294967295}").uint64_data, [4294967295]);
        assert_eq!(t("uint64[1] {18446744073709551615}").uint64_data, [u64::MAX]);
        assert_eq!(t("complex64[1] {1, 2}").float_data, [1.0, 2.0]);
        assert_eq!(t("complex128[1] {1, 2}").double_data, [1.0, 2.0]);
        assert_eq!(t("double {1e300}").double_data, [1e300]);
        assert_eq!(t("string[2] {\"a\", \"\"}").string_data, [b"a".to_vec(), Vec::new()]);
        let ext = t("float[2] w [\"location\": \"f.bin\"]");
        assert_eq!(ext.data_location, Some(DataLocation::External as i32));
        assert_eq!(ext.external_data[0].key.as_deref(), Some("location"));
        assert_eq!(t("float[2] w").float_data, Vec::<f32>::new());
    }

    #[test]
    fn initializers_in_inputs_and_value_list() {
        let src = "g (float[2] a = {1, 2}, b) => (c) <int64 k = {5}, float[2] v> {}";
        let g = parse_model_here(src, "t").unwrap().graph.unwrap();
        assert_eq!(g.input.len(), 2);
        assert_eq!(g.initializer.len(), 2);
        assert_eq!(g.initializer[0].name.as_deref(), Some("a"));
        assert_eq!(g.initializer[1].int64_data, [5]);
        assert_eq!(g.value_info[0].name.as_deref(), Some("v"));
        let no_inputs = parse_model_here("g => (y) {}", "t").unwrap().graph.unwrap();
        assert!(no_inputs.input.is_empty());
        assert!(error("g (int64 k = {1.5}) => () {}").starts_with("expected an integer"));
        assert!(error("g (x = {1}) => () {}").starts_with("a tensor value needs a tensor type"));
        assert!(error("g (float[N] k = {1}) => () {}").starts_with("the dimensions of a tensor"));
    }

    #[test]
    fn functions() {
        let src = format!(
            "{HEAD}g () => () {{}}\n<domain: \"d\", overload: \"o\", doc_string: \"x\", opset_import: [\"\": 1]>\n\
             f <a, b: int = 2, \"c\"> (float[2] x, y) => (z) <float w> {{ z = Add (x, y) }}\n\
             f2 () => () {{}}"
        );
        let m = parse_model_here(&src, "t").unwrap();
        let f = &m.functions[0];
        assert_eq!(f.domain.as_deref(), Some("d"));
        assert_eq!(f.overload.as_deref(), Some("o"));
        assert_eq!(f.doc_string.as_deref(), Some("x"));
        assert_eq!(f.attribute, ["a", "c"]);
        assert_eq!(f.attribute_proto[0].i, Some(2));
        assert_eq!(
            (f.input.clone(), f.output.clone()),
            (vec!["x".into(), "y".into()], vec!["z".into()])
        );
        let vi: Vec<_> = f.value_info.iter().map(|v| v.name().to_owned()).collect();
        assert_eq!(vi, ["x", "w"]);
        assert_eq!(m.functions[1].domain, None);
    }

    #[test]
    fn error_messages() {
        assert_eq!(error("g () => () { y = Foo <> () }"), "expected an attribute name, found '>'");
        assert_eq!(error("g () => () { y = (x) }"), "expected an operator name, found '('");
        assert_eq!(
            error("g () => () { y = Foo <a: number = 1> () }").split(':').next(),
            Some("unknown attribute type 'number'")
        );
        assert_eq!(
            error("g (map(seq(float), float) m) => () {}"),
            "expected a primitive key type for 'map', found 'seq'"
        );
        assert_eq!(
            error("g () => () {} h"),
            "expected '(' to start the function inputs, found end of input"
        );
        assert_eq!(
            error("<ir_version: 1> g () => () { y = Foo <a = mode> () }"),
            "expected '=>' between the graph inputs and outputs, found '>'"
        );
    }
}
