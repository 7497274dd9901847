//! Control flow: If, Loop and Scan.
//!
//! A body (a branch, a loop body) is compiled by the same passes as the
//! main graph: inferred with its inputs typed by the node and its captures
//! typed (and, when known, valued) by the enclosing graph, planned into its
//! own arena, and emitted as a block of statements. The node becomes one
//! kernel whose scratch range in the enclosing arena holds the body's arena
//! (shared by both branches of an If, reused by every iteration of a loop)
//! and the loop state. The enclosing graph sees the outer values a body
//! captures as extra inputs of the node (after its own), so they stay alive
//! until the node runs and are bound for it.
//!
//! Optionals whose presence is known at generation time need no run-time
//! form: a present optional is its tensor, so `Optional(x)` and
//! `OptionalGetElement(x)` are views of `x` and `OptionalHasElement` is a
//! constant. Empty optionals and optional graph inputs are not supported yet.
//!
//! Loops over tensors run as Rust loops, never unrolled; their state must
//! keep one static type across iterations, and scan outputs have a length
//! fixed at generation time (checked against the iteration count at run
//! time). Loops and Ifs over sequences never reach these rules:
//! `passes::sequences` unrolls such loops and splits such branches' outputs
//! into their elements first.
//!
//! `body.rs` holds what the three share (and `FlexAttention`'s modifier
//! subgraphs borrow): a compiled `Body`, the kernel's `Scratch` range
//! and the bindings of captures, inputs and outputs in the emitted block.
//! Each operator has its file with its rule, kernel and emission:
//! `if_.rs`, `loop_.rs`, `scan.rs`; `optional.rs` holds the optionals.

use super::OpRule;

mod body;
mod if_;
mod loop_;
mod optional;
mod scan;

pub(super) use body::{Body, Scratch, bind_all, body_arena, captures, compile, error_tokens};
use if_::IfRule;
use loop_::LoopRule;
use optional::{HasElementRule, PresentRule};
use scan::ScanRule;

/// The rule for `op_type`, if it is a control-flow operator.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "If" => Some(&IfRule),
        "Loop" => Some(&LoopRule),
        "Scan" => Some(&ScanRule),
        "Optional" | "OptionalGetElement" => Some(&PresentRule),
        "OptionalHasElement" => Some(&HasElementRule),
        _ => None,
    }
}
