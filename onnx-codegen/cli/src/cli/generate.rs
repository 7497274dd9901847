use super::ModelArgs;
use onnx_codegen::emit::WeightSource;
use onnx_codegen::generate::{Options, compile};
use onnx_codegen::load;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    /// The Rust file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// The struct's name (default: from the model's file name).
    #[arg(long)]
    name: Option<String>,
    /// Write weights larger than this many bytes to a file beside OUTPUT
    /// (`OUTPUT.weights.bin`, read with include_bytes!) instead of inline.
    #[arg(long, default_value_t = 1 << 20)]
    inline_weights_limit: usize,
    #[command(flatten)]
    limits: super::LimitArgs,
    #[command(flatten)]
    features: super::FeatureArgs,
}

pub fn run(args: &Args) -> ExitCode {
    let path = &args.model.model;
    let shown = path.display().to_string();
    let mut opts = Options {
        name: args.name.clone(),
        dims: args.model.dims(),
        fixed_inputs: args.model.fixed_inputs(),
        runtime_inputs: args.model.runtime_inputs(),
        input_shapes: args.model.input_shapes(),
        limits: args.limits.limits(),
        ..Options::default()
    };
    args.features.apply(&mut opts);
    let weights_path = {
        let mut name = args.output.file_name().unwrap_or_default().to_os_string();
        name.push(".weights.bin");
        args.output.with_file_name(name)
    };
    let busy = super::spinner(format!("generating code for {shown}"));
    let result = load::load_model(path).and_then(|m| {
        let compiled = compile(&m, &opts, &shown)?;
        let mut emit = compiled.emit_options();
        if compiled.weights().len() > args.inline_weights_limit {
            let file = weights_path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            emit.weights = WeightSource::File(file);
            let generated = compiled.emit(&emit)?;
            load::write_atomically(&weights_path, &generated.weights)?;
            return Ok(generated);
        }
        compiled.emit(&emit)
    });
    let result = result.and_then(|g| {
        let text = g.to_file_text(&shown)?;
        load::write_atomically(&args.output, text.as_bytes())?;
        Ok(g)
    });
    drop(busy);
    match result {
        Ok(g) => {
            let s = &g.summary;
            for w in &s.warnings {
                eprintln!("{shown}: {w}");
            }
            outln!(
                "{}: struct {} ({} steps, arena {} bytes, weights {} bytes)",
                args.output.display(),
                g.struct_name,
                s.steps,
                s.arena_bytes.unwrap_or(0),
                s.weights_bytes.unwrap_or(0)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::report(e.in_file(&shown).diagnostics());
            ExitCode::FAILURE
        }
    }
}
