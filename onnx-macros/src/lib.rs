//! `onnx_model!`: compiles an ONNX model into a Rust struct, in place, at
//! build time.
//!
//! ```text
//! onnx_codegen_macros::onnx_model!("models/kws.onnx", name = Kws, dims(N = 1));
//!
//! let mut model = Kws::new();          // a const fn: may live in a static
//! model.run(&input, &mut output)?;     // &[T; N] in, &mut [T; M] out
//! ```
//!
//! The path is relative to the calling crate's `CARGO_MANIFEST_DIR` (absolute
//! paths work too); binary (`.onnx`) and text (`.onnxtxt`) models both work.
//! Options:
//! - `name = Ident`: the struct's name (default: from the file name);
//! - `dims(N = 4, ...)`: values of symbolic dimensions;
//! - `input_shapes(x = [1, 3, 48, 192], "input.1" = [2], ...)`: inputs'
//!   whole shapes, for dimensions the model leaves open (`-1`, unnamed or
//!   symbolic); a name that is not an identifier is a string;
//! - `runtime = path`: where the runtime crate is (default
//!   `::onnx_codegen_runtime`).
//! - `alloc`: allow string tensors (the code allocates; enable the
//!   runtime's `alloc` feature); `image`: allow ImageDecoder (enable the
//!   runtime's `image` feature);
//! - `runtime_inputs("w", ...)`: graph inputs with an initializer that stay
//!   inputs of `run` (in models of IR version 3 or older such inputs are
//!   constants by default);
//! - `no_winograd`: keep 3x3 convolutions off Winograd's F(2x2, 3x3), whose
//!   transformed weights are 16/9 as large (for flash-constrained targets).
//!   Without it, a model with such convolutions expands to both versions,
//!   each under a `cfg`: bare-metal targets (`target_os = "none"`) link the
//!   one with the weights at their size, others the Winograd one.
//!
//! The expansion is the same code `onnx-codegen generate` writes. The crate
//! is rebuilt when the model file changes. Every problem with the model
//! (all unsupported operators at once) is a compile error at the macro's
//! path argument.

use onnx_codegen::emit::WeightSource;
use onnx_codegen::generate::{Options, compile};
use proc_macro::TokenStream;
use proc_macro2::Span;
use std::path::PathBuf;
use syn::parse::{Parse, ParseStream};
use syn::{Ident, LitInt, LitStr, Token};

/// Compiles an ONNX model into a struct; see the crate documentation.
#[proc_macro]
pub fn onnx_model(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as Args);
    match expand(&args) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The macro's arguments.
struct Args {
    path: LitStr,
    name: Option<Ident>,
    dims: Vec<(Ident, LitInt)>,
    input_shapes: Vec<(String, Vec<LitInt>)>,
    runtime: Option<syn::Path>,
    alloc: bool,
    image: bool,
    no_winograd: bool,
    runtime_inputs: Vec<LitStr>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Args> {
        let path: LitStr = input.parse()?;
        let mut args = Args {
            path,
            name: None,
            dims: Vec::new(),
            input_shapes: Vec::new(),
            runtime: None,
            alloc: false,
            image: false,
            no_winograd: false,
            runtime_inputs: Vec::new(),
        };
        while input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            match key.to_string().as_str() {
                "name" => {
                    input.parse::<Token![=]>()?;
                    args.name = Some(input.parse()?);
                }
                "alloc" => args.alloc = true,
                "image" => args.image = true,
                "no_winograd" => args.no_winograd = true,
                "runtime" => {
                    input.parse::<Token![=]>()?;
                    args.runtime = Some(input.parse()?);
                }
                "runtime_inputs" => {
                    let content;
                    syn::parenthesized!(content in input);
                    let names = content.parse_terminated(<LitStr as Parse>::parse, Token![,])?;
                    args.runtime_inputs.extend(names);
                }
                "dims" => {
                    let content;
                    syn::parenthesized!(content in input);
                    while !content.is_empty() {
                        let name: Ident = content.parse()?;
                        content.parse::<Token![=]>()?;
                        let value: LitInt = content.parse()?;
                        args.dims.push((name, value));
                        if !content.is_empty() {
                            content.parse::<Token![,]>()?;
                        }
                    }
                }
                "input_shapes" => {
                    let content;
                    syn::parenthesized!(content in input);
                    while !content.is_empty() {
                        let name = if content.peek(LitStr) {
                            content.parse::<LitStr>()?.value()
                        } else {
                            content.parse::<Ident>()?.to_string()
                        };
                        content.parse::<Token![=]>()?;
                        let list;
                        syn::bracketed!(list in content);
                        let dims = list.parse_terminated(LitInt::parse, Token![,])?;
                        args.input_shapes.push((name, dims.into_iter().collect()));
                        if !content.is_empty() {
                            content.parse::<Token![,]>()?;
                        }
                    }
                }
                other => {
                    return Err(syn::Error::new(
                        key.span(),
                        format!(
                            "unknown option `{other}`; expected `name`, `dims`, `input_shapes`, `runtime`, `runtime_inputs`, `alloc`, `image` or `no_winograd`"
                        ),
                    ));
                }
            }
        }
        Ok(args)
    }
}

/// Weights above this size reach the code through `include_bytes!` of a
/// file instead of a literal in the token stream.
const INLINE_WEIGHTS_LIMIT: usize = 1 << 20;

fn expand(args: &Args) -> syn::Result<proc_macro2::TokenStream> {
    let span = args.path.span();
    let path = resolve(&args.path.value());
    let shown = path.display().to_string();
    let mut opts =
        Options { name: args.name.as_ref().map(ToString::to_string), ..Options::default() };
    for (name, value) in &args.dims {
        opts.dims.insert(name.to_string(), value.base10_parse()?);
    }
    for (name, dims) in &args.input_shapes {
        let dims = dims.iter().map(LitInt::base10_parse).collect::<syn::Result<Vec<usize>>>()?;
        opts.input_shapes.insert(name.clone(), dims);
    }
    opts.alloc = args.alloc;
    opts.image = args.image;
    opts.winograd = !args.no_winograd;
    opts.runtime_inputs = args.runtime_inputs.iter().map(LitStr::value).collect();
    if let Some(runtime) = &args.runtime {
        opts.runtime_path = quote::quote!(#runtime).to_string();
    }
    let model = onnx_codegen::load::load_model(&path).map_err(|e| error(span, &e))?;
    let compiled = compile(&model, &opts, &shown).map_err(|e| error(span, &e.in_file(&shown)))?;
    let mut code = tokens(&compiled, span, &shown)?;
    // Bare-metal targets (flash-constrained microcontrollers) keep the
    // convolutions' weights at their size: both versions are emitted and
    // the target's `cfg` links one (a proc macro is not told the target).
    if compiled.uses_winograd() {
        let plain = Options { winograd: false, ..opts };
        let small = compile(&model, &plain, &shown).map_err(|e| error(span, &e.in_file(&shown)))?;
        let small = tokens(&small, span, &shown)?;
        let fast = with_cfg(code, &quote::quote!(not(target_os = "none")))?;
        let small = with_cfg(small, &quote::quote!(target_os = "none"))?;
        code = quote::quote!(#fast #small);
    }
    // Reading the model through include_bytes! makes cargo rebuild the
    // crate when the file changes; the constant itself is never used.
    Ok(quote::quote! {
        const _: &[u8] = include_bytes!(#shown);
        #code
    })
}

/// The code of a compiled model, its weights inline or, when large, in a
/// file beside the build.
fn tokens(
    compiled: &onnx_codegen::generate::Compiled,
    span: Span,
    shown: &str,
) -> syn::Result<proc_macro2::TokenStream> {
    let mut emit = compiled.emit_options();
    if compiled.weights().len() > INLINE_WEIGHTS_LIMIT {
        let blob = write_blob(compiled.weights()).map_err(|e| syn::Error::new(span, e))?;
        emit.weights = WeightSource::File(blob);
    }
    let generated = compiled.emit(&emit).map_err(|e| error(span, &e.in_file(shown)))?;
    Ok(generated.to_tokens())
}

/// `code`'s items, each under `#[cfg(#cond)]`.
fn with_cfg(
    code: proc_macro2::TokenStream,
    cond: &proc_macro2::TokenStream,
) -> syn::Result<proc_macro2::TokenStream> {
    let file: syn::File = syn::parse2(code)?;
    let items = file.items.iter().map(|item| quote::quote!(#[cfg(#cond)] #item));
    Ok(items.collect())
}

/// The model's path: relative paths start at the calling crate's manifest.
fn resolve(path: &str) -> PathBuf {
    let p = PathBuf::from(path);
    if p.is_absolute() {
        return p;
    }
    match std::env::var_os("CARGO_MANIFEST_DIR") {
        Some(dir) => PathBuf::from(dir).join(p),
        None => p,
    }
}

/// Writes the weight blob where this compilation can include it: the
/// crate's `OUT_DIR` when it has a build script, else the temporary folder.
/// The name is the blob's hash, so concurrent builds never clash.
fn write_blob(bytes: &[u8]) -> Result<String, String> {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let dir = std::env::var_os("OUT_DIR")
        .map_or_else(|| std::env::temp_dir().join("onnx-codegen"), PathBuf::from);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let file = dir.join(format!("weights-{h:016x}-{}.bin", bytes.len()));
    if !std::fs::read(&file).is_ok_and(|old| old == bytes) {
        onnx_codegen::load::write_atomically(&file, bytes).map_err(|e| e.to_string())?;
    }
    Ok(file.display().to_string())
}

/// One compile error per diagnostic, all pointing at the macro's argument.
fn error(span: Span, e: &onnx_codegen::Error) -> syn::Error {
    let mut all: Option<syn::Error> = None;
    for d in e.diagnostics() {
        let one = syn::Error::new(span, d.to_string());
        match &mut all {
            Some(a) => a.combine(one),
            None => all = Some(one),
        }
    }
    all.unwrap_or_else(|| syn::Error::new(span, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(src: &str) -> Args {
        syn::parse_str(src).expect("arguments parse")
    }

    #[test]
    fn options_parse() {
        let a = args(r#""m.onnx", name = Net, dims(N = 4, S = 16), runtime = ::my::rt,"#);
        assert_eq!(a.path.value(), "m.onnx");
        assert_eq!(a.name.unwrap().to_string(), "Net");
        let dims: Vec<String> = a.dims.iter().map(|(n, v)| format!("{n}={v}")).collect();
        assert_eq!(dims, ["N=4", "S=16"]);
        let a = args(r#""m.onnx", input_shapes(x = [1, 3, 48, 192], "input.1" = [2], s = [])"#);
        let shapes: Vec<String> = a
            .input_shapes
            .iter()
            .map(|(n, d)| {
                format!("{n}={}", d.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))
            })
            .collect();
        assert_eq!(shapes, ["x=1,3,48,192", "input.1=2", "s="]);
        assert!(syn::parse_str::<Args>(r#""m.onnx", colour = red"#).is_err());
        let a = args(r#""m.onnx", runtime_inputs("w", "b"), alloc"#);
        let names: Vec<String> = a.runtime_inputs.iter().map(LitStr::value).collect();
        assert_eq!(names, ["w", "b"]);
        assert!(a.alloc);
        assert!(syn::parse_str::<Args>(r#""m.onnx", runtime_inputs(w)"#).is_err());
    }

    #[test]
    fn every_problem_becomes_a_compile_error() {
        let dir = std::env::temp_dir().join(format!("onnx-macros-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let model = dir.join("bad.onnxtxt");
        std::fs::write(
            &model,
            "<ir_version: 8, opset_import: [\"\" : 17]>\n\
             g (float[N] x) => (float[N] y) { a = Frobnicate (x) y = Wibble (a) }\n",
        )
        .unwrap();
        let a = args(&format!("{:?}", model.display().to_string()));
        let err = expand(&a).unwrap_err();
        let messages: Vec<String> = err.into_iter().map(|e| e.to_string()).collect();
        assert!(
            messages.iter().any(|m| m.contains("operator 'Frobnicate', which is unknown")),
            "{messages:?}"
        );
        assert!(
            messages.iter().any(|m| m.contains("operator 'Wibble', which is unknown")),
            "{messages:?}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
