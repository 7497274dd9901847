//! The ONNX textual syntax: a parser into `ModelProto` and a printer back.
//!
//! The grammar is in the ONNX documentation (`onnx-text-syntax`); the parser
//! also accepts every form the reference printer (`onnx.printer`) emits.

mod lexer;
mod parser;
mod printer;
pub mod spans;

pub use parser::{parse_model, parse_model_with_spans};
pub use printer::print_model;
