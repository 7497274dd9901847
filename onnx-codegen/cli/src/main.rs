//! The `onnx-codegen` command line.
//!
//! Exit codes: 0 success, 1 the model (or an input) was refused, 2 the command
//! line was wrong, 3 an internal error (a bug: please report it).

mod cli;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Deeply nested models are bounded by the loaders' depth limits; a large
    // stack keeps the recursive passes well inside those bounds.
    let worker = std::thread::Builder::new().stack_size(256 << 20).spawn(move || cli::run(args));
    match worker.map(|handle| handle.join()) {
        Ok(Ok(code)) => code,
        Ok(Err(_panic)) => {
            eprintln!("error: internal compiler error (a bug in onnx-codegen; please report it)");
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("error: cannot start the worker thread: {e}");
            ExitCode::from(3)
        }
    }
}
