use super::ModelArgs;
use onnx_codegen::generate::{Options, analyze};
use onnx_codegen::load;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    limits: super::LimitArgs,
}

pub fn run(args: &Args) -> ExitCode {
    let path = &args.model.model;
    let shown = path.display().to_string();
    let opts =
        Options { dims: args.model.dims(), limits: args.limits.limits(), ..Options::default() };
    let analysis = match load::load_model(path).and_then(|m| analyze(&m, &opts)) {
        Ok(a) => a,
        Err(e) => {
            super::report(e.in_file(&shown).diagnostics());
            return ExitCode::FAILURE;
        }
    };
    let s = analysis.summary();
    if args.json {
        match serde_json::to_string_pretty(&s) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return ExitCode::from(3);
            }
        }
    } else {
        println!("{shown}: graph '{}', {} nodes", s.graph, s.nodes);
        let ops: Vec<String> = s.ops.iter().map(|(op, n)| format!("{op} x{n}")).collect();
        println!("  ops: {}", ops.join(", "));
        for v in &s.inputs {
            println!("  input  {}: {}", v.name, v.r#type.as_deref().unwrap_or("?"));
        }
        for v in &s.outputs {
            println!("  output {}: {}", v.name, v.r#type.as_deref().unwrap_or("?"));
        }
        for v in &s.values {
            let c = if v.constant { " (constant)" } else { "" };
            println!("  value  {}: {}{c}", v.name, v.r#type.as_deref().unwrap_or("?"));
        }
        println!("  steps: {} ({} nodes folded at generation time)", s.steps, s.folded);
        match (s.arena_bytes, s.arena_lower_bound_bytes, s.weights_bytes) {
            (Some(a), Some(lb), Some(w)) => {
                println!("  arena: {a} bytes (lower bound {lb}); weights: {w} bytes")
            }
            _ => println!("  arena: not planned (see the problems below)"),
        }
    }
    let mut problems = analysis.problems();
    problems.extend(analysis.limit_problems(&opts.limits));
    let with_file: Vec<_> = problems.into_iter().map(|d| d.in_file(&shown)).collect();
    super::report(&with_file);
    if with_file.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
