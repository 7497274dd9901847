//! Generates every model under the models folder (`ONNX_CODEGEN_MODELS`, by
//! default `../shared/models` beside the repository) into `OUT_DIR`, and a `models.rs` listing
//! them. A model that does not generate is left out with a cargo warning.

use std::fmt::Write as _;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-env-changed=ONNX_CODEGEN_MODELS");
    let root = PathBuf::from(std::env::var("ONNX_CODEGEN_MODELS").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/models").to_owned()
    }));
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.path().join("model.onnx").is_file())
                .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut list = String::from("/// The generated models: name, folder, constructor.\n");
    list.push_str("pub fn models() -> Vec<Entry> {\n    vec![\n");
    let mut items = String::new();
    for name in &names {
        let dir = root.join(name);
        let struct_name: String = name
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect();
        let built = onnx_codegen::build::Build::new(dir.join("model.onnx"))
            .name(&struct_name)
            .out_file(&format!("{name}.rs"))
            .generate();
        match built {
            Ok(_) => {
                let _ = writeln!(items, "include!(concat!(env!(\"OUT_DIR\"), \"/{name}.rs\"));");
                let _ = writeln!(
                    list,
                    "        ({name:?}, {:?}, || Box::new({struct_name}::new())),",
                    dir.display().to_string()
                );
            }
            Err(e) => {
                let first = e.to_string().lines().next().unwrap_or("").to_owned();
                println!("cargo:warning=model {name} left out: {first}");
            }
        }
    }
    list.push_str("    ]\n}\n");
    let _ = std::fs::write(out.join("models.rs"), items + &list);
}
