use super::ModelArgs;
use onnx_codegen::generate::{Options, Summary, ValueSummary, analyze};
use onnx_codegen::load;
use onnx_codegen::report::{self, bytes_text, count_text};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// Print a JSON object instead of text.
    #[arg(long)]
    json: bool,
    /// Also list every value computed by a node, with its type.
    #[arg(long)]
    values: bool,
    #[command(flatten)]
    limits: super::LimitArgs,
}

pub fn run(args: &Args) -> ExitCode {
    let path = &args.model.model;
    let shown = path.display().to_string();
    let opts = Options {
        dims: args.model.dims(),
        fixed_inputs: args.model.fixed_inputs(),
        runtime_inputs: args.model.runtime_inputs(),
        input_shapes: args.model.input_shapes(),
        limits: args.limits.limits(),
        ..Options::default()
    };
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
            Ok(text) => outln!("{text}"),
            Err(e) => {
                eprintln!("error: cannot write JSON: {e}");
                return ExitCode::from(3);
            }
        }
    } else {
        let totals = report::build(&analysis, &shown).totals;
        out!(
            "{}",
            human(
                &shown,
                &s,
                &totals,
                &onnx_codegen::generate::feature_notes(&analysis),
                args.values
            )
        );
    }
    let mut problems = analysis.problems();
    problems.extend(analysis.limit_problems(&opts.limits));
    let with_file: Vec<_> = problems.into_iter().map(|d| d.in_file(&shown)).collect();
    super::report(&with_file);
    if with_file.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The compact summary: a few aligned lines whatever the model's size.
fn human(
    shown: &str,
    s: &Summary,
    totals: &report::Totals,
    features: &[String],
    values: bool,
) -> String {
    let mut out = format!(
        "{shown}: graph '{}', {} nodes ({} run, {} folded at generation time, {} fused into \
         another)\n",
        s.graph, s.nodes, s.steps, s.folded, s.fused
    );
    let list = |vs: &[ValueSummary]| -> String {
        let shown: Vec<String> = vs
            .iter()
            .take(8)
            .map(|v| format!("{} {}", v.name, v.r#type.as_deref().unwrap_or("?")))
            .collect();
        let more = vs.len().saturating_sub(8);
        if more > 0 { format!("{}, and {more} more", shown.join(", ")) } else { shown.join(", ") }
    };
    out += &format!("  inputs   {}\n", list(&s.inputs));
    out += &format!("  outputs  {}\n", list(&s.outputs));
    let mut ops: Vec<(&String, &usize)> = s.ops.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    let ops: Vec<String> = ops
        .iter()
        .map(|&(op, &n)| if n == 1 { op.clone() } else { format!("{op} x{n}") })
        .collect();
    out += &format!("  ops      {}\n", ops.join(", "));
    match (s.arena_bytes, s.arena_lower_bound_bytes, s.weights_bytes) {
        (Some(a), Some(lb), Some(w)) => {
            out += &format!("  weights  {} ({w} bytes)\n", bytes_text(to_u64(w)));
            out += &format!(
                "  arena    {} ({a} bytes; lower bound {}), {} buffers\n",
                bytes_text(to_u64(a)),
                bytes_text(to_u64(lb)),
                s.buffers.len()
            );
        }
        _ => out += "  arena    not planned: see the problems below\n",
    }
    out += &format!(
        "  compute  {} MACs, {} FLOPs\n",
        count_text(totals.macs),
        count_text(totals.flops)
    );
    if !s.unsupported.is_empty() {
        let mut kinds: Vec<&str> = s.unsupported.iter().map(|u| u.op_type.as_str()).collect();
        kinds.sort_unstable();
        kinds.dedup();
        out += &format!(
            "  missing  {} node{} not supported yet ({})\n",
            s.unsupported.len(),
            if s.unsupported.len() == 1 { "" } else { "s" },
            kinds.join(", ")
        );
    }
    for note in features {
        out += &format!("  needs    the runtime's {note}\n");
    }
    if values {
        for v in &s.values {
            let c = if v.constant { " (constant)" } else { "" };
            out += &format!("  value    {}: {}{c}\n", v.name, v.r#type.as_deref().unwrap_or("?"));
        }
    }
    out
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
