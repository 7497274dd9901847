use onnx_codegen::diag::Error;
use onnx_codegen::generate::{Options, analyze};
use onnx_codegen::ir::{Dim, Type};
use onnx_codegen::load;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The models to check (binary or text).
    #[arg(required = true)]
    models: Vec<PathBuf>,
    #[command(flatten)]
    limits: super::LimitArgs,
    #[command(flatten)]
    features: super::FeatureArgs,
}

/// Loads, lowers, validates and inlines each model, then infers types and
/// plans memory; prints every problem, then one summary line per model that
/// passed. Problems found by inference count only when every graph input has
/// a static shape (otherwise sizes are not known until `--dim` values are
/// given to `generate`); models over the limits are refused.
pub fn run(args: &Args) -> ExitCode {
    let mut failed = false;
    for path in &args.models {
        let shown = path.display().to_string();
        let mut opts = Options { limits: args.limits.limits(), ..Options::default() };
        args.features.apply(&mut opts);
        let prepared = load::load_model(path).and_then(|m| {
            let analysis = analyze(&m, &opts)?;
            let mut errors = analysis.limit_problems(&opts.limits);
            errors.extend(analysis.feature_problems(&opts));
            let g = &analysis.prepared.model.graph;
            let static_inputs = g.inputs.iter().all(|&v| match &g.value(v).ty {
                Some(Type::Tensor { shape, .. }) => shape
                    .dims
                    .as_ref()
                    .is_some_and(|d| d.iter().all(|d| matches!(d, Dim::Static(_)))),
                _ => false,
            });
            let mut inferred_warnings = Vec::new();
            if static_inputs {
                errors.extend(analysis.inferred.errors.iter().cloned());
                inferred_warnings = analysis.inferred.warnings.clone();
            }
            if errors.is_empty() {
                Ok((analysis.prepared, inferred_warnings))
            } else {
                Err(Error::new(errors))
            }
        });
        match prepared {
            Ok((prepared, inferred_warnings)) => {
                let warnings: Vec<_> = prepared
                    .warnings
                    .into_iter()
                    .chain(inferred_warnings)
                    .map(|w| w.in_file(&shown))
                    .collect();
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
                outln!("{summary}");
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
