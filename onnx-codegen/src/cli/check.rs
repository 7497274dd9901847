use onnx_codegen::load;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The models to check (binary or text).
    #[arg(required = true)]
    models: Vec<PathBuf>,
}

pub fn run(args: &Args) -> ExitCode {
    let mut failed = false;
    for path in &args.models {
        match load::load_model(path) {
            Ok(model) => {
                let nodes = model.graph.as_ref().map_or(0, |g| g.node.len());
                println!("{}: ok ({nodes} nodes)", path.display());
            }
            Err(e) => {
                super::report(e.diagnostics());
                failed = true;
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}
