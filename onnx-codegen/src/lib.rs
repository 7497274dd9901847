//! onnx-codegen: an ahead-of-time compiler from ONNX models to plain,
//! allocation-free Rust.
//!
//! The pipeline, one module per stage (`docs/architecture.md` says what
//! each stage hands to the next and what it keeps true):
//!
//! 1. [`load`]: read a model from binary protobuf (with external data) or
//!    from the ONNX textual syntax ([`text`]) into `onnx_codegen_proto` messages;
//! 2. [`ir`]: the compiler's IR (values, nodes, operator schemas, and each
//!    node's typed lowered form, [`ir::Lowering`]);
//! 3. [`passes`]: validate against the IR spec and the operator schemas,
//!    inline model-local functions, infer shapes and fold constants (with
//!    the operator rules of [`ops`]), rewrite and lower, plan memory;
//! 4. [`emit`]: Rust tokens, formatted by prettyplease.
//!
//! [`generate::compile`] runs them all and [`generate::Compiled::emit`]
//! writes the code.
//!
//! Every stage reports problems as [`diag::Diagnostic`]s, all at once.
//!
//! Cargo features, all off by default (code generation needs none of them;
//! the command line, package `onnx-codegen-cli`, turns them all on):
//!
//! - `serde`: `serde::Serialize` for the summaries ([`generate::Summary`] and
//!   the types it holds), for JSON output;
//! - `report`: the HTML report of a model (`report`, with tera);
//! - `harness`: the conformance test harness behind `onnx-codegen test`
//!   (`harness`), and `harness::data` to read `TensorProto` files.
#![forbid(unsafe_code)]

pub mod build;
pub mod canonical;
pub mod diag;
pub mod emit;
pub mod generate;
#[cfg(feature = "harness")]
pub mod harness;
pub mod ir;
pub mod limits;
pub mod load;
pub mod ops;
pub mod passes;
#[cfg(feature = "report")]
pub mod report;
pub mod text;

pub use diag::{Diagnostic, Error, Result};
pub use onnx_codegen_proto as proto;
