//! `onnx_model!`: compiles an ONNX model into a Rust struct inside the calling crate.
//!
//! The macro arrives with code generation (the compiler core); this crate
//! exists now so that the workspace has its final shape.
