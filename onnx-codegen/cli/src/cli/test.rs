use indicatif::{ProgressBar, ProgressStyle};
use onnx_codegen::generate::Options;
use onnx_codegen::harness::{self, Progress, Status, TestOptions};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Test directories in the ONNX backend layout (model.onnx, test_data_set_*/).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// A symbolic dimension's value, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = super::parse_dim)]
    dims: Vec<(String, usize)>,
    /// An input's whole shape, as NAME=D,D,... (repeatable); by default the
    /// data set gives the shapes of inputs with open dimensions.
    #[arg(long = "input-shape", value_name = "NAME=D,D,...", value_parser = super::parse_input_shape)]
    input_shapes: Vec<(String, Vec<usize>)>,
    /// Write what the generated code produced under this directory, in the ONNX
    /// test layout (OUTDIR/TEST/test_data_set_K/output_J.pb, one per graph output).
    #[arg(long, value_name = "OUTDIR")]
    save_outputs: Option<PathBuf>,
    /// Write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Where to build the generated code (kept between runs for speed).
    #[arg(long, default_value = "target/onnx-codegen-test")]
    work_dir: PathBuf,
    /// Relative tolerance for float outputs.
    #[arg(long, default_value_t = onnx_codegen::harness::data::RTOL)]
    rtol: f64,
    /// Absolute tolerance for float outputs (the backend tests' 1e-7 by default;
    /// real models through other summation orders want about 1e-4).
    #[arg(long, default_value_t = onnx_codegen::harness::data::ATOL)]
    atol: f64,
    /// Models per compiled shard.
    #[arg(long, default_value_t = 40)]
    shard_size: usize,
    #[command(flatten)]
    runtime_inputs: super::RuntimeInputArgs,
    #[command(flatten)]
    limits: super::LimitArgs,
    /// Accepted for symmetry with `generate`: the harness turns `alloc` and
    /// `image` on by itself for the models that need them.
    #[command(flatten)]
    features: super::FeatureArgs,
}

pub fn run(args: &Args) -> ExitCode {
    let mut generate = Options {
        dims: args.dims.iter().cloned().collect(),
        input_shapes: args.input_shapes.iter().cloned().collect(),
        limits: args.limits.limits(),
        runtime_inputs: args.runtime_inputs.names(),
        ..Options::default()
    };
    args.features.apply(&mut generate);
    let opts = TestOptions {
        generate,
        work_dir: std::path::absolute(&args.work_dir).unwrap_or_else(|_| args.work_dir.clone()),
        save_outputs: args.save_outputs.clone(),
        shard_size: args.shard_size,
        tolerance: onnx_codegen::harness::data::Tolerance { rtol: args.rtol, atol: args.atol },
    };
    if let Err(e) = std::fs::create_dir_all(&opts.work_dir) {
        eprintln!("error: cannot create {}: {e}", opts.work_dir.display());
        return ExitCode::FAILURE;
    }
    let outcomes = if std::io::stderr().is_terminal() {
        harness::run_tests(&args.dirs, &opts, &Bar::new())
    } else {
        harness::run_tests(&args.dirs, &opts, &harness::Quiet)
    };
    for o in &outcomes {
        match o.status {
            Status::Pass => outln!("PASS {}", o.name),
            Status::Fail => outln!("FAIL {}: {}", o.name, o.reason),
            Status::Unsupported => outln!("UNSUPPORTED {}: {}", o.name, o.reason),
        }
    }
    let (passed, failed, unsupported) = harness::tally(&outcomes);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&outcomes).unwrap_or_default();
        if let Err(e) = onnx_codegen::load::write_atomically(path, text.as_bytes()) {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    }
    let with = |f: &str| outcomes.iter().filter(|o| o.features.contains(&f)).count();
    let (alloc, image) = (with("alloc"), with("image"));
    let mut extra = Vec::new();
    if alloc > 0 {
        extra.push(format!("{alloc} generated with alloc"));
    }
    if image > 0 {
        extra.push(format!("{image} with image"));
    }
    let fixed = outcomes.iter().filter(|o| !o.fixed_inputs.is_empty()).count();
    if fixed > 0 {
        extra.push(format!("{fixed} with input values fixed from the data"));
    }
    let extra = if extra.is_empty() { String::new() } else { format!(" ({})", extra.join(", ")) };
    outln!("{passed} passed, {} failed{extra}", failed + unsupported);
    if failed + unsupported == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// A progress bar on standard error, one phase after another.
struct Bar {
    bar: ProgressBar,
}

impl Bar {
    fn new() -> Bar {
        let style = ProgressStyle::with_template(
            "{prefix:>12.bold} [{bar:30}] {pos}/{len} {elapsed:>4} {wide_msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        let bar = ProgressBar::new(0).with_style(style);
        bar.enable_steady_tick(std::time::Duration::from_millis(200));
        Bar { bar }
    }
}

impl Progress for Bar {
    fn phase(&self, name: &str, total: usize) {
        let (verb, rest) = name.split_once(' ').unwrap_or((name, ""));
        self.bar.set_prefix(verb.to_owned());
        self.bar.set_message(rest.to_owned());
        self.bar.set_position(0);
        self.bar.reset_elapsed();
        self.bar.set_length(u64::try_from(total).unwrap_or(u64::MAX));
    }

    fn advance(&self, n: usize, item: &str) {
        self.bar.inc(u64::try_from(n).unwrap_or(u64::MAX));
        if !item.is_empty() {
            self.bar.set_message(item.to_owned());
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
