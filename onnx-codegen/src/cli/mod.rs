//! Command-line verbs. Each verb is a function from its arguments to an exit
//! code; diagnostics go to standard error, results to standard output.

mod check;
mod convert;

use clap::{Parser, Subcommand};
use onnx_codegen::diag::{Diagnostic, Severity};
use std::process::ExitCode;

/// Ahead-of-time compiler from ONNX models to allocation-free Rust.
#[derive(Parser, Debug)]
#[command(name = "onnx-codegen", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a model between the binary (.onnx) and text (.onnxtxt, .txt) forms.
    ///
    /// The output format follows OUT's extension. External data is read in, so the output
    /// stands alone. OUT is written whole or not at all.
    Convert(convert::Args),
    /// Read and validate models, printing every problem found. Exits 1 if any model has errors.
    Check(check::Args),
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Convert(args) => convert::run(&args),
        Command::Check(args) => check::run(&args),
    }
}

/// Prints diagnostics to standard error, a blank line between them.
fn report(diagnostics: &[Diagnostic]) {
    for d in diagnostics {
        eprintln!("{d}\n");
    }
}

/// Exit code 1 if any diagnostic is an error.
fn exit_code(diagnostics: &[Diagnostic]) -> ExitCode {
    if diagnostics.iter().any(|d| d.severity == Severity::Error) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
