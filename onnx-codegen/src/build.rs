//! Code generation from a build script.
//!
//! In `build.rs`:
//!
//! ```no_run
//! onnx_codegen::build::Build::new("models/net.onnx")
//!     .name("Net")
//!     .dim("N", 1)
//!     .generate()
//!     .unwrap_or_else(|e| panic!("{e}"));
//! ```
//!
//! and in the crate: `include!(concat!(env!("OUT_DIR"), "/net.rs"));`.
//!
//! The file goes to `OUT_DIR` (weights over a limit beside it, read with
//! `include_bytes!`), and cargo is told to rerun the script when the model
//! changes. The code is the same as `onnx-codegen generate` writes.

use crate::diag::{Diagnostic, Error, Result};
use crate::emit::WeightSource;
use crate::generate::{Options, compile};
use std::path::{Path, PathBuf};

/// A model to compile from `build.rs`.
#[derive(Clone, Debug)]
pub struct Build {
    model: PathBuf,
    options: Options,
    out_file: Option<String>,
    out_dir: Option<PathBuf>,
    inline_weights_limit: usize,
}

/// What a build produced.
#[derive(Clone, Debug)]
pub struct Built {
    /// The Rust file written.
    pub path: PathBuf,
    /// The generated struct's name.
    pub struct_name: String,
}

impl Build {
    /// A model file (binary or text), relative to the crate being built.
    /// Winograd is off by default when the build script builds for a
    /// bare-metal target (`target_os = "none"`: flash-constrained
    /// microcontrollers), on otherwise (see [`Build::winograd`]).
    pub fn new(model: impl AsRef<Path>) -> Build {
        let bare_metal = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "none");
        Build {
            model: model.as_ref().to_owned(),
            options: Options { winograd: !bare_metal, ..Options::default() },
            out_file: None,
            out_dir: None,
            inline_weights_limit: 1 << 20,
        }
    }

    /// The struct's name (default: from the model's file name).
    pub fn name(mut self, name: &str) -> Build {
        self.options.name = Some(name.to_owned());
        self
    }

    /// Binds a symbolic dimension.
    pub fn dim(mut self, name: &str, value: usize) -> Build {
        self.options.dims.insert(name.to_owned(), value);
        self
    }

    /// Gives an input its whole shape, for dimensions the model leaves open
    /// (`-1`, unnamed or symbolic); its fixed dimensions must agree.
    pub fn input_shape(mut self, input: &str, shape: &[usize]) -> Build {
        self.options.input_shapes.insert(input.to_owned(), shape.to_vec());
        self
    }

    /// Fixes an integer input's values (row-major) at generation time: shapes
    /// computed from it become static, and `run` returns
    /// `Error::InputValue` if called with other values.
    pub fn fix(mut self, input: &str, values: &[i64]) -> Build {
        self.options.fixed_inputs.insert(input.to_owned(), values.to_vec());
        self
    }

    /// Keeps a graph input that has an initializer as an input of `run`
    /// (in models of IR version 3 or older such inputs are constants by
    /// default; see [`crate::passes::input_defaults`]).
    pub fn runtime_input(mut self, input: &str) -> Build {
        self.options.runtime_inputs.insert(input.to_owned());
        self
    }

    /// The file name in the output folder (default: `<model stem>.rs`).
    pub fn out_file(mut self, file: &str) -> Build {
        self.out_file = Some(file.to_owned());
        self
    }

    /// The output folder (default: `OUT_DIR`).
    pub fn out_dir(mut self, dir: impl AsRef<Path>) -> Build {
        self.out_dir = Some(dir.as_ref().to_owned());
        self
    }

    /// Weights larger than this go to a file beside the code (default 1 MiB).
    pub fn inline_weights_limit(mut self, bytes: usize) -> Build {
        self.inline_weights_limit = bytes;
        self
    }

    /// Replaces the limits on arena, weights, nodes and nesting
    /// ([`crate::limits::Limits::DEFAULT`] otherwise).
    pub fn limits(mut self, limits: crate::limits::Limits) -> Build {
        self.options.limits = limits;
        self
    }

    /// Allows string tensors: the generated code then allocates, and the
    /// crate must enable the runtime's `alloc` feature. Off by default.
    pub fn alloc(mut self, on: bool) -> Build {
        self.options.alloc = on;
        self
    }

    /// Allows ImageDecoder: the crate must enable the runtime's `image`
    /// feature (which needs std). Off by default.
    pub fn image(mut self, on: bool) -> Build {
        self.options.image = on;
        self
    }

    /// Runs the 3x3 stride-1 convolutions where it pays (see
    /// `passes::optimize::winograd_convs`) by Winograd's F(2x2, 3x3) (on by
    /// default but for bare-metal targets); off keeps their weights at
    /// their size (the transformed ones are 16/9 as large), for
    /// flash-constrained targets.
    pub fn winograd(mut self, on: bool) -> Build {
        self.options.winograd = on;
        self
    }

    /// Generates the code, writes it, and prints `cargo:rerun-if-changed`.
    pub fn generate(self) -> Result<Built> {
        let shown = self.model.display().to_string();
        println!("cargo:rerun-if-changed={shown}");
        let out_dir =
            match self.out_dir.clone().or_else(|| std::env::var_os("OUT_DIR").map(PathBuf::from)) {
                Some(d) => d,
                None => {
                    return Err(Error::from(Diagnostic::error(
                        "OUT_DIR is not set: call this from a build script, or give out_dir",
                    )));
                }
            };
        let stem = self.model.file_stem().and_then(|s| s.to_str()).unwrap_or("model").to_owned();
        let file = self.out_file.clone().unwrap_or_else(|| format!("{stem}.rs"));
        let path = out_dir.join(&file);
        let model = crate::load::load_model(&self.model)?;
        let compiled = compile(&model, &self.options, &shown).map_err(|e| e.in_file(&shown))?;
        let mut emit = compiled.emit_options();
        if compiled.weights().len() > self.inline_weights_limit {
            let weights_file = format!("{file}.weights.bin");
            crate::load::write_atomically(&out_dir.join(&weights_file), compiled.weights())?;
            emit.weights = WeightSource::File(weights_file);
        }
        let generated = compiled.emit(&emit).map_err(|e| e.in_file(&shown))?;
        let text = generated.to_file_text(&shown)?;
        crate::load::write_atomically(&path, text.as_bytes())?;
        Ok(Built { path, struct_name: generated.struct_name })
    }
}
