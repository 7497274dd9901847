use onnx_codegen::{limits, load, passes};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The models to check (binary or text).
    #[arg(required = true)]
    models: Vec<PathBuf>,
    #[command(flatten)]
    limits: super::LimitArgs,
}

/// Loads, lowers, validates and inlines each model; prints every problem,
/// then one summary line per model that passed.
pub fn run(args: &Args) -> ExitCode {
    let mut failed = false;
    for path in &args.models {
        let shown = path.display().to_string();
        let limits = args.limits.limits();
        let prepared = load::load_model(path).and_then(|m| {
            limits::check_model(&m, &limits)?;
            let prepared = passes::prepare(&m)?;
            limits::check_prepared(&prepared.model, &limits)?;
            Ok(prepared)
        });
        match prepared {
            Ok(prepared) => {
                let warnings: Vec<_> =
                    prepared.warnings.into_iter().map(|w| w.in_file(&shown)).collect();
                super::report(&warnings);
                let graph = &prepared.model.graph;
                let opsets: Vec<String> = prepared
                    .model
                    .opset_imports
                    .iter()
                    .map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d }))
                    .collect();
                let mut summary = format!(
                    "{shown}: ok: graph '{}', {}, {}, {}, opset {}",
                    graph.name,
                    count(graph.node_count(), "node"),
                    count(graph.inputs.len(), "input"),
                    count(graph.outputs.len(), "output"),
                    opsets.join(", "),
                );
                if !warnings.is_empty() {
                    summary += &format!(", {}", count(warnings.len(), "warning"));
                }
                println!("{summary}");
            }
            Err(e) => {
                super::report(e.in_file(&shown).diagnostics());
                failed = true;
            }
        }
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

/// "1 node", "3 nodes".
fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}
