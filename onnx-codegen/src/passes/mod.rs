//! Passes over the IR: lowering from `ModelProto` with validation
//! ([`lower`]), inlining of model-local functions ([`inline`]), and the
//! passes to come (shape inference, constant folding, memory planning).

pub mod fuse;
pub mod infer;
pub mod inline;
pub mod lower;
pub mod optimize;
pub mod plan;
pub mod sequences;

use crate::diag::Diagnostic;
use crate::ir;
use crate::proto::ModelProto;

/// A model ready for the later passes: lowered, validated, functions inlined.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub model: ir::Model,
    /// Everything worth telling the user that did not stop the model.
    pub warnings: Vec<Diagnostic>,
}

/// Lowers `model` into the IR, validates it against the IR spec and the
/// operator schemas, and inlines model-local functions. Every problem found
/// is reported at once: the error lists all errors and warnings.
pub fn prepare(model: &ModelProto) -> crate::Result<Prepared> {
    let (mut ir, mut diags) = lower::lower_model(model);
    if !diags.has_errors() {
        inline::inline_functions(&mut ir, &mut diags);
    }
    let (model, warnings) = diags.finish(ir)?;
    Ok(Prepared { model, warnings })
}
