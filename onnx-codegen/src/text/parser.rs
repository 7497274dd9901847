//! Parser for the textual syntax.
use crate::proto::ModelProto;

/// Parses a whole model. `file` names the source in diagnostics.
pub fn parse_model(_src: &str, file: &str) -> crate::Result<ModelProto> {
    Err(crate::Diagnostic::error("the text parser is not written yet").in_file(file).into())
}
