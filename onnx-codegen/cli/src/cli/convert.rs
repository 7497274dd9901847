use onnx_codegen::load;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The model to read (binary or text).
    input: PathBuf,
    /// Where to write it; the extension chooses the format.
    output: PathBuf,
}

pub fn run(args: &Args) -> ExitCode {
    let result = load::load_model(&args.input).and_then(|m| load::save_model(&m, &args.output));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            super::report(e.diagnostics());
            super::exit_code(e.diagnostics())
        }
    }
}
