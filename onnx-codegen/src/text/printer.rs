//! Printer from `ModelProto` to the textual syntax.
use crate::proto::ModelProto;

/// Prints a whole model in the textual syntax.
pub fn print_model(_model: &ModelProto) -> String {
    String::new()
}
