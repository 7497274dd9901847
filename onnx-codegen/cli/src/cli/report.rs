use super::ModelArgs;
use onnx_codegen::generate::{Options, analyze};
use onnx_codegen::{load, report};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The HTML file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Accepted for symmetry with `generate`: the report says which runtime
    /// features the model needs either way.
    #[command(flatten)]
    features: super::FeatureArgs,
}

/// Writes the report; exits 0 when it was written, even if the model has
/// unsupported parts (they are in the report and on standard error as warnings).
pub fn run(args: &Args) -> ExitCode {
    let path = &args.model.model;
    let shown = path.display().to_string();
    let mut opts = Options {
        dims: args.model.dims(),
        fixed_inputs: args.model.fixed_inputs(),
        runtime_inputs: args.model.runtime_inputs(),
        input_shapes: args.model.input_shapes(),
        ..Options::default()
    };
    args.features.apply(&mut opts);
    let busy = super::spinner(format!("analysing {shown}"));
    let result = load::load_model(path).and_then(|m| analyze(&m, &opts)).and_then(|analysis| {
        let html = report::html(&analysis, &shown)?;
        load::write_atomically(&args.output, html.as_bytes())?;
        Ok((analysis, html.len()))
    });
    drop(busy);
    match result {
        Ok((analysis, size)) => {
            let problems = analysis.problems();
            outln!(
                "{}: report of {shown} ({} bytes){}",
                args.output.display(),
                size,
                match problems.len() {
                    0 => String::new(),
                    1 => ", 1 problem listed at the top".to_owned(),
                    n => format!(", {n} problems listed at the top"),
                }
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::report(e.in_file(&shown).diagnostics());
            ExitCode::FAILURE
        }
    }
}
