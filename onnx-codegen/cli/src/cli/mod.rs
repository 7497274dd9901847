//! Command-line verbs. Each verb is a function from its arguments to an exit
//! code; diagnostics go to standard error, results to standard output.

/// `print!` to standard output through [`write_stdout`]: a closed pipe is not a panic.
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!($($arg)*)) };
}

/// `println!` to standard output through [`write_stdout`]: a closed pipe is not a panic.
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

mod check;
mod convert;
mod generate;
mod inspect;
mod report;
mod test;

use clap::{Parser, Subcommand};
use onnx_codegen::diag::{Diagnostic, Severity};
use onnx_codegen::limits::{HARD_MAX_DEPTH, Limits};
use onnx_codegen::load::Format;
use onnx_codegen::text::{self, spans::SourceMap};
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
    /// Generate Rust code for a model: one struct with a `run` method.
    Generate(generate::Args),
    /// Show a model's ops, value shapes, memory plan and what is not supported.
    Inspect(inspect::Args),
    /// Write an HTML report of a model: shapes, sizes, MACs and the memory plan as a picture.
    ///
    /// The report is one self-contained file. A model with unsupported operators still gets
    /// a report, with what is missing listed at the top.
    Report(report::Args),
    /// Generate, compile and run test directories (ONNX backend layout) against their
    /// reference outputs. Prints PASS/FAIL/UNSUPPORTED per test and `N passed, M failed`.
    Test(test::Args),
}

/// A model and the values of its symbolic dimensions.
#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    /// The model (binary .onnx or text .onnxtxt).
    model: std::path::PathBuf,
    /// A symbolic dimension's value, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    dims: Vec<(String, usize)>,
    /// Fix an integer or bool (0/1) input's values at generation time, as NAME=V,V,...
    /// (row-major; repeatable). Shapes computed from it become static; the
    /// generated `run` returns `Error::InputValue` if called with other values.
    #[arg(long = "fix", value_name = "NAME=V,V,...", value_parser = parse_fix)]
    fixes: Vec<(String, Vec<i64>)>,
    #[command(flatten)]
    runtime_inputs: RuntimeInputArgs,
    /// An input's whole shape, as NAME=D,D,... (repeatable): for dimensions
    /// the model leaves open (-1, unnamed or symbolic); fixed ones must agree.
    #[arg(long = "input-shape", value_name = "NAME=D,D,...", value_parser = parse_input_shape)]
    input_shapes: Vec<(String, Vec<usize>)>,
}

impl ModelArgs {
    fn dims(&self) -> std::collections::BTreeMap<String, usize> {
        self.dims.iter().cloned().collect()
    }

    fn fixed_inputs(&self) -> std::collections::BTreeMap<String, Vec<i64>> {
        self.fixes.iter().cloned().collect()
    }

    fn input_shapes(&self) -> std::collections::BTreeMap<String, Vec<usize>> {
        self.input_shapes.iter().cloned().collect()
    }

    fn runtime_inputs(&self) -> std::collections::BTreeSet<String> {
        self.runtime_inputs.names()
    }
}

/// Which inputs with an initializer stay inputs of `run`.
#[derive(clap::Args, Debug, Default)]
pub struct RuntimeInputArgs {
    /// Keep a graph input that has an initializer as an input of `run`
    /// (repeatable). In models of IR version 3 or older such inputs (every
    /// weight, there) are constants by default; from IR version 4 on they
    /// are inputs anyway.
    #[arg(long = "runtime-input", value_name = "NAME")]
    runtime_inputs: Vec<String>,
}

impl RuntimeInputArgs {
    fn names(&self) -> std::collections::BTreeSet<String> {
        self.runtime_inputs.iter().cloned().collect()
    }
}

/// `NAME=D,D,...`; `NAME=` is a scalar's (empty) shape.
pub(crate) fn parse_input_shape(s: &str) -> Result<(String, Vec<usize>), String> {
    let (name, dims) = s.split_once('=').ok_or("expected NAME=D,D,...")?;
    let dims = dims.trim();
    let dims = if dims.is_empty() {
        Vec::new()
    } else {
        dims.split(',')
            .map(|d| d.trim().parse::<usize>().map_err(|_| format!("'{}' is not a size", d.trim())))
            .collect::<Result<Vec<_>, _>>()?
    };
    Ok((name.trim().to_owned(), dims))
}

fn parse_fix(s: &str) -> Result<(String, Vec<i64>), String> {
    let (name, values) = s.split_once('=').ok_or("expected NAME=V,V,...")?;
    let values = values
        .split(',')
        .map(|v| v.trim().parse::<i64>().map_err(|_| format!("'{}' is not an integer", v.trim())))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((name.trim().to_owned(), values))
}

/// The runtime features generated code may use (off by default: generated
/// code is allocation-free and `no_std`).
#[derive(clap::Args, Debug, Default)]
pub struct FeatureArgs {
    /// Allow string tensors: the generated code allocates (`String`s) and
    /// needs the runtime's `alloc` feature.
    #[arg(long)]
    alloc: bool,
    /// Allow ImageDecoder: the generated code needs the runtime's `image`
    /// feature (which needs std).
    #[arg(long)]
    image: bool,
    /// Keep 3x3 stride-1 convolutions on the direct kernels instead of
    /// Winograd's F(2x2, 3x3), whose weights take 16/9 the space.
    #[arg(long)]
    no_winograd: bool,
}

impl FeatureArgs {
    /// Sets the options' feature switches.
    fn apply(&self, opts: &mut onnx_codegen::generate::Options) {
        opts.alloc |= self.alloc;
        opts.image |= self.image;
        opts.winograd &= !self.no_winograd;
    }
}

/// The limits a model must stay within (see `onnx_codegen::limits`).
#[derive(clap::Args, Debug)]
pub struct LimitArgs {
    /// Refuse the model if its arena would exceed this many bytes.
    #[arg(long, default_value_t = Limits::DEFAULT.max_arena_bytes)]
    max_arena_bytes: usize,
    /// Refuse the model if its weights exceed this many bytes.
    #[arg(long, default_value_t = Limits::DEFAULT.max_weight_bytes)]
    max_weight_bytes: usize,
    /// Refuse the model if it has more nodes (subgraphs and functions included).
    #[arg(long, default_value_t = Limits::DEFAULT.max_nodes)]
    max_nodes: usize,
    /// Refuse the model if subgraphs nest deeper than this.
    #[arg(long, default_value_t = Limits::DEFAULT.max_depth, value_parser = parse_depth)]
    max_depth: usize,
}

impl LimitArgs {
    fn limits(&self) -> Limits {
        Limits {
            max_arena_bytes: self.max_arena_bytes,
            max_weight_bytes: self.max_weight_bytes,
            max_nodes: self.max_nodes,
            max_depth: self.max_depth,
        }
    }
}

fn parse_depth(s: &str) -> Result<usize, String> {
    let depth = s.trim().parse::<usize>().map_err(|_| format!("'{s}' is not a number"))?;
    if depth > HARD_MAX_DEPTH {
        return Err(format!("{depth} is over the hard limit of {HARD_MAX_DEPTH} levels"));
    }
    Ok(depth)
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s.split_once('=').ok_or("expected NAME=N")?;
    let value = value.trim().parse::<usize>().map_err(|_| format!("'{value}' is not a size"))?;
    Ok((name.trim().to_owned(), value))
}

pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Convert(args) => convert::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Generate(args) => generate::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Report(args) => report::run(&args),
        Command::Test(args) => test::run(&args),
    }
}

/// Writes results to standard output. When the reader has gone (`inspect m.onnx | head`)
/// the rest of the output is dropped quietly and the command ends with its usual exit
/// code; `println!` would panic there. Any other write error is reported once.
fn write_stdout(args: std::fmt::Arguments) {
    use std::io::Write;
    use std::sync::atomic::{AtomicBool, Ordering};
    static CLOSED: AtomicBool = AtomicBool::new(false);
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(args).and_then(|()| stdout.flush()) {
        CLOSED.store(true, Ordering::Relaxed);
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("error: cannot write to standard output: {e}");
        }
    }
}

/// Prints diagnostics to standard error, a blank line between them. Graph
/// errors in a text model get the line of the node (or value) at fault.
fn report(diagnostics: &[Diagnostic]) {
    let mut diagnostics = diagnostics.to_vec();
    let mut files: Vec<&str> = diagnostics
        .iter()
        .filter(|d| d.location.pos.is_none() && !d.location.path.is_empty())
        .filter_map(|d| d.location.file.as_deref())
        .collect();
    files.sort_unstable();
    files.dedup();
    let sources: Vec<(String, String, SourceMap)> = files
        .into_iter()
        .filter_map(|file| {
            let path = std::path::Path::new(file);
            let src = std::fs::read(path).ok()?;
            let format = Format::from_extension(path).unwrap_or_else(|| Format::sniff(&src));
            let src = String::from_utf8(src).ok().filter(|_| format == Format::Text)?;
            let (_, map) = text::parse_model_with_spans(&src, file).ok()?;
            Some((file.to_owned(), src, map))
        })
        .collect();
    for (file, src, map) in &sources {
        for d in diagnostics.iter_mut().filter(|d| d.location.file.as_deref() == Some(file)) {
            text::spans::attach_positions(src, map, std::slice::from_mut(d));
        }
    }
    for d in &diagnostics {
        eprintln!("{d}\n");
    }
}

/// A spinner on standard error for a step that may take a while (big models);
/// nothing when standard error is not a terminal. Dropping it clears it.
fn spinner(message: String) -> Spinner {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return Spinner(None);
    }
    let bar = indicatif::ProgressBar::new_spinner().with_message(message);
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    Spinner(Some(bar))
}

/// See [`spinner`].
struct Spinner(Option<indicatif::ProgressBar>);

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
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
