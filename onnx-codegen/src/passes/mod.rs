//! Passes over the IR, in pipeline order: reading `ModelProto` into the IR
//! with validation ([`validate`]), inlining of model-local functions
//! ([`inline`]) and expansion of onnxruntime's quantized contrib operators
//! into standard ones ([`contrib`]), inputs with an initializer made
//! constants where the IR version says so ([`input_defaults`]), sequences
//! unrolled into tensors
//! ([`sequences`]), shape inference with constant folding ([`infer`]),
//! graph rewrites and weight layouts ([`optimize`], [`fuse`]; their
//! decisions live in each node's [`Lowering`](crate::ir::Lowering)), and
//! memory planning ([`plan`]).

pub mod contrib;
pub mod fuse;
pub mod gradient;
pub mod infer;
pub mod inline;
pub mod input_defaults;
pub mod optimize;
pub mod pipeline;
pub mod plan;
pub mod qdq;
pub mod sequences;
pub mod validate;

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
/// operator schemas, inlines model-local functions and expands the
/// `com.microsoft` quantized operators (after inlining, so those in function
/// bodies are expanded too). Every problem found is reported at once: the
/// error lists all errors and warnings.
pub fn prepare(model: &ModelProto) -> crate::Result<Prepared> {
    let (mut ir, mut diags) = validate::validate_model(model);
    if !diags.has_errors() {
        inline::inline_functions(&mut ir, &mut diags);
    }
    if !diags.has_errors() {
        contrib::expand(&mut ir, &mut diags);
    }
    let (model, warnings) = diags.finish(ir)?;
    Ok(Prepared { model, warnings })
}
