//! Shard crates: writing generated models into a cargo workspace, building
//! it (isolating models that do not compile), and running jobs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// One generated model to compile.
pub struct ModelFile {
    pub name: String,
    pub struct_name: String,
    /// The formatted Rust file, or why it could not be formatted.
    pub code: crate::Result<String>,
    /// The weight file the code includes (`include_bytes!`), with its bytes,
    /// when the weights are not inline.
    pub weights_file: Option<(String, Vec<u8>)>,
    /// The runtime features the code needs (`alloc`, `image`): its shard
    /// enables them, and a shard with `alloc` drives models by `run_encoded`.
    pub features: Vec<&'static str>,
}

/// One run of a model: raw input files in, raw output files out.
#[derive(Clone, Debug)]
pub struct Job {
    pub inputs: Vec<PathBuf>,
    pub outputs: Vec<PathBuf>,
}

/// The result of building: per model, whether it compiled; per shard, its binary.
pub struct Built {
    pub models: Vec<Result<(), String>>,
    /// Per model: (shard, index inside the shard).
    placement: Vec<(usize, usize)>,
    binaries: Vec<Option<PathBuf>>,
}

/// The runtime crate the shards depend on: the source tree this binary was
/// built from, or `ONNX_CODEGEN_RUNTIME_DIR`.
fn runtime_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("ONNX_CODEGEN_RUNTIME_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("runtime-support");
    if dir.join("Cargo.toml").is_file() {
        dir.canonicalize().map_err(|e| format!("{}: {e}", dir.display()))
    } else {
        Err(format!(
            "the runtime crate's source is not at {} (set ONNX_CODEGEN_RUNTIME_DIR to a checkout's runtime-support)",
            dir.display()
        ))
    }
}

/// Writes `text` to `path` unless it already holds exactly that (so cargo
/// sees unchanged files as unchanged).
fn write_if_changed(path: &Path, text: &[u8]) -> Result<(), String> {
    if std::fs::read(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// A stable shard for a test name, so that reruns rebuild only what changed.
fn shard_of(name: &str, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards as u64) as usize
}

/// Builds all models; see the module docs.
pub fn build(
    files: &[ModelFile],
    work: &Path,
    shard_size: usize,
    progress: &dyn super::Progress,
) -> Built {
    let shards = files.len().div_ceil(shard_size.max(1)).clamp(1, 64);
    let mut models: Vec<Result<(), String>> = files
        .iter()
        .map(|f| {
            f.code
                .as_ref()
                .map(|_| ())
                .map_err(|e| format!("cannot format the generated code: {e}"))
        })
        .collect();
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); shards];
    let mut placement = vec![(0, 0); files.len()];
    for (k, f) in files.iter().enumerate() {
        let s = shard_of(&f.name, shards);
        placement[k] = (s, k);
        members[s].push(k);
    }
    let fail_all = |models: &mut Vec<Result<(), String>>, why: String| {
        for m in models.iter_mut().filter(|m| m.is_ok()) {
            *m = Err(why.clone());
        }
    };
    let runtime = match runtime_dir() {
        Ok(d) => d,
        Err(e) => {
            fail_all(&mut models, e);
            return Built { models, placement, binaries: vec![None; shards] };
        }
    };
    if let Err(e) = write_workspace(work, shards, &runtime) {
        fail_all(&mut models, e);
        return Built { models, placement, binaries: vec![None; shards] };
    }
    let mut binaries = vec![None; shards];
    for round in 0..4 {
        let pending = members.iter().filter(|l| l.iter().any(|&k| models[k].is_ok())).count();
        let name = if round == 0 { "compiling" } else { "compiling again" };
        let shards_text =
            if pending == 1 { "1 shard".to_owned() } else { format!("{pending} shards") };
        progress.phase(&format!("{name} {} models, {shards_text}", files.len()), pending);
        for (s, list) in members.iter().enumerate() {
            let live: Vec<usize> = list.iter().copied().filter(|&k| models[k].is_ok()).collect();
            if let Err(e) = write_shard(work, s, &live, files) {
                for &k in &live {
                    models[k] = Err(e.clone());
                }
            }
        }
        let (errors, built) = match cargo_build(work, progress) {
            Ok(r) => r,
            Err(e) => {
                fail_all(&mut models, e);
                return Built { models, placement, binaries };
            }
        };
        for (s, binary) in binaries.iter_mut().enumerate() {
            if built.contains(&s) {
                *binary = Some(work.join("target").join("release").join(format!("shard_{s}")));
            }
        }
        if errors.is_empty() {
            break;
        }
        let mut blamed_any = false;
        for (s, file, message) in &errors {
            // Cargo names files relative to the workspace: `shard_3/src/m12.rs`.
            let model = Path::new(file)
                .file_name()
                .and_then(|f| f.to_str())
                .and_then(|f| f.strip_prefix('m'))
                .and_then(|r| r.strip_suffix(".rs"))
                .and_then(|n| n.parse::<usize>().ok());
            match model {
                Some(k) if k < models.len() && models[k].is_ok() => {
                    models[k] = Err(format!("the generated code does not compile: {message}"));
                    blamed_any = true;
                }
                _ => {
                    if !blamed_any && members.get(*s).is_some() {
                        // An error outside any model file: the shard as a whole.
                        for &k in &members[*s] {
                            if models[k].is_ok() {
                                models[k] =
                                    Err(format!("the test shard does not compile: {message}"));
                            }
                        }
                    }
                }
            }
        }
    }
    for (k, m) in models.iter_mut().enumerate() {
        if m.is_ok() && binaries[placement[k].0].is_none() {
            *m = Err("the test shard did not build".into());
        }
    }
    Built { models, placement, binaries }
}

fn write_workspace(work: &Path, shards: usize, runtime: &Path) -> Result<(), String> {
    let members: Vec<String> = (0..shards).map(|s| format!("\"shard_{s}\"")).collect();
    let text = format!(
        "# Written by `onnx-codegen test`: shard crates of generated models.\n\
         [workspace]\nresolver = \"2\"\nmembers = [{}]\n\n\
         [workspace.dependencies]\nonnx-codegen-runtime = {{ path = {:?}, features = [\"std\"] }}\n\n\
         [profile.release]\nopt-level = 1\ndebug = false\nincremental = true\ncodegen-units = 16\n",
        members.join(", "),
        runtime.display().to_string()
    );
    write_if_changed(&work.join("Cargo.toml"), text.as_bytes())?;
    let lock = work.join("Cargo.lock");
    let ours = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("Cargo.lock");
    if !lock.exists() && ours.is_file() {
        // The same dependency versions as the project's own build, and no
        // index lookup when nothing changed.
        std::fs::copy(&ours, &lock).map_err(|e| format!("{}: {e}", lock.display()))?;
    }
    Ok(())
}

fn write_shard(work: &Path, s: usize, live: &[usize], files: &[ModelFile]) -> Result<(), String> {
    let dir = work.join(format!("shard_{s}"));
    let mut features: Vec<&str> = live.iter().flat_map(|&k| files[k].features.clone()).collect();
    features.sort_unstable();
    features.dedup();
    let feature_list: Vec<String> = features.iter().map(|f| format!("{f:?}")).collect();
    let manifest = format!(
        "[package]\nname = \"shard_{s}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\nonnx-codegen-runtime = {{ workspace = true, features = [{}] }}\n",
        feature_list.join(", ")
    );
    write_if_changed(&dir.join("Cargo.toml"), manifest.as_bytes())?;
    let mut mods = String::new();
    let mut arms = String::new();
    for &k in live {
        let f = &files[k];
        let code = f.code.as_ref().map_err(|e| e.to_string())?;
        if let Some((file, bytes)) = &f.weights_file {
            write_if_changed(&dir.join("src").join(file), bytes)?;
        }
        write_if_changed(&dir.join("src").join(format!("m{k}.rs")), code.as_bytes())?;
        mods.push_str(&format!("mod m{k};\n"));
        arms.push_str(&format!("        {k} => Some(Box::new(m{k}::{}::new())),\n", f.struct_name));
    }
    let run = if features.contains(&"alloc") { RUN_ENCODED } else { RUN_PLAIN };
    let main = format!(
        "{SHARD_HEAD}{mods}\nfn make(model: usize) -> Option<Box<dyn Model>> {{\n    match model {{\n{arms}        _ => None,\n    }}\n}}\n{SHARD_MAIN}{RUN_BYTES}{run}"
    );
    write_if_changed(&dir.join("src").join("main.rs"), main.as_bytes())
}

const SHARD_HEAD: &str = "// @generated by `onnx-codegen test`: runs generated models on raw input files.\n#![allow(warnings)]\n\nuse onnx_codegen_runtime::Model;\nuse std::io::Write;\n\n";

const SHARD_MAIN: &str = r#"
fn main() {
    let jobs = std::env::args().nth(1).unwrap_or_default();
    // Arenas are built on the stack before they are boxed: give them room.
    let worker = std::thread::Builder::new().stack_size(1 << 30).spawn(move || run(&jobs));
    let ok = worker.map(|w| w.join().is_ok()).unwrap_or(false);
    std::process::exit(if ok { 0 } else { 3 });
}

fn run(jobs: &str) {
    let text = std::fs::read_to_string(jobs).unwrap_or_default();
    for (n, line) in text.lines().enumerate() {
        let result = std::panic::catch_unwind(|| job(line));
        let message = match result {
            Ok(Ok(())) => "OK".to_string(),
            Ok(Err(e)) => format!("ERR {e}"),
            Err(p) => {
                let text = p.downcast_ref::<&str>().map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!("ERR the generated code panicked: {}", text.replace('\n', " "))
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{n} {message}");
        let _ = out.flush();
    }
}

fn job(line: &str) -> Result<(), String> {
    let mut parts = line.split('\t');
    let model: usize = parts.next().and_then(|p| p.parse().ok()).ok_or("bad job line")?;
    let n_in: usize = parts.next().and_then(|p| p.parse().ok()).ok_or("bad job line")?;
    let ins: Vec<&str> = parts.by_ref().take(n_in).collect();
    let outs: Vec<&str> = parts.collect();
    let mut m = make(model).ok_or("no such model")?;
    let (infos_in, infos_out) = (m.inputs(), m.outputs());
    let mut in_bufs = Vec::new();
    for (path, info) in ins.iter().zip(infos_in) {
        let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
        if info.elem != onnx_codegen_runtime::Elem::String && bytes.len() != info.byte_size() {
            return Err(format!("input '{}' has {} bytes, expected {}", info.name, bytes.len(), info.byte_size()));
        }
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        onnx_codegen_runtime::arena::as_bytes_mut(&mut words)[..bytes.len()].copy_from_slice(&bytes);
        in_bufs.push((words, bytes.len()));
    }
    let in_slices: Vec<&[u8]> = in_bufs.iter().map(|(w, n)| &onnx_codegen_runtime::arena::as_bytes(w)[..*n]).collect();
    run_model(&mut *m, &in_slices, infos_out, &outs)
}
"#;

/// The end of a shard's job through `run_bytes_sized`: fixed-size outputs
/// whole, data-sized ones as their packed prefix with the shape beside them.
const RUN_BYTES: &str = r#"
fn run_model_bytes(m: &mut dyn Model, in_slices: &[&[u8]], infos_out: &[onnx_codegen_runtime::TensorInfo], outs: &[&str]) -> Result<(), String> {
    let sized = m.data_sized();
    let mut lengths = vec![0usize; sized.len()];
    let mut out_bufs: Vec<Vec<u64>> = infos_out.iter().map(|i| vec![0u64; i.byte_size().div_ceil(8)]).collect();
    {
        let mut out_slices: Vec<&mut [u8]> = out_bufs.iter_mut().zip(infos_out)
            .map(|(w, i)| &mut onnx_codegen_runtime::arena::as_bytes_mut(w)[..i.byte_size()])
            .collect();
        m.run_bytes_sized(in_slices, &mut out_slices, &mut lengths).map_err(|e| format!("run failed: {e}"))?;
    }
    for (j, ((w, info), path)) in out_bufs.iter().zip(infos_out).zip(outs).enumerate() {
        let mut shape = info.shape.to_vec();
        let mut size = info.byte_size();
        if let Some(k) = sized.iter().position(|d| d.output == j) {
            // A data-sized output: its packed prefix, and its shape beside it.
            let (axis, len) = (sized[k].axis, lengths[k]);
            if axis >= shape.len() || len > shape[axis] {
                return Err(format!("output {j} reports length {len} on axis {axis}, over its capacity {:?}", info.shape));
            }
            shape[axis] = len;
            let numel: usize = shape.iter().product();
            size = info.elem.units(numel) * info.elem.size();
            let text: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            std::fs::write(format!("{path}.shape"), text.join(" ")).map_err(|e| format!("{path}.shape: {e}"))?;
        }
        std::fs::write(path, &onnx_codegen_runtime::arena::as_bytes(w)[..size])
            .map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}
"#;

/// Without the runtime's `alloc` feature every model runs through bytes.
const RUN_PLAIN: &str = r#"
fn run_model(m: &mut dyn Model, in_slices: &[&[u8]], infos_out: &[onnx_codegen_runtime::TensorInfo], outs: &[&str]) -> Result<(), String> {
    run_model_bytes(m, in_slices, infos_out, outs)
}
"#;

/// With the runtime's `alloc` feature: models with string inputs or outputs
/// run through `run_encoded`, the others through bytes.
const RUN_ENCODED: &str = r#"
fn run_model(m: &mut dyn Model, in_slices: &[&[u8]], infos_out: &[onnx_codegen_runtime::TensorInfo], outs: &[&str]) -> Result<(), String> {
    let strings = m.inputs().iter().chain(infos_out).any(|i| i.elem == onnx_codegen_runtime::Elem::String);
    if !strings {
        return run_model_bytes(m, in_slices, infos_out, outs);
    }
    let encoded = m.run_encoded(in_slices).map_err(|e| format!("run failed: {e}"))?;
    for (bytes, path) in encoded.iter().zip(outs) {
        std::fs::write(path, bytes).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}
"#;

/// A compile error: the shard, the file of its primary span, its message.
type CompileError = (usize, String, String);

/// Runs `cargo build` on the workspace; returns the errors and the shards
/// that built.
fn cargo_build(
    work: &Path,
    progress: &dyn super::Progress,
) -> Result<(Vec<CompileError>, BTreeSet<usize>), String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut child = Command::new(cargo)
        .current_dir(work)
        .args(["build", "--release", "--keep-going", "--message-format=json", "--target-dir"])
        .arg(work.join("target"))
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run cargo (needed to compile the generated code): {e}"))?;
    // Standard error is drained on its own thread so neither pipe fills up.
    let stderr_pipe = child.stderr.take();
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut pipe) = stderr_pipe {
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
        }
        text
    });
    let mut errors = Vec::new();
    let mut built = BTreeSet::new();
    let mut seen_any = false;
    if let Some(stdout) = child.stdout.take() {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)) {
            let Ok(line) = line else { break };
            let Ok(msg) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
            let shard = msg["target"]["name"]
                .as_str()
                .and_then(|n| n.strip_prefix("shard_"))
                .and_then(|n| n.parse::<usize>().ok());
            match msg["reason"].as_str() {
                Some("compiler-artifact") => {
                    seen_any = true;
                    if let Some(s) = shard
                        && msg["executable"].is_string()
                    {
                        built.insert(s);
                        progress.advance(1, &format!("shard_{s}"));
                    }
                }
                Some("compiler-message") if msg["message"]["level"] == "error" => {
                    seen_any = true;
                    let Some(s) = shard else { continue };
                    let text = msg["message"]["message"].as_str().unwrap_or("error").to_owned();
                    let file = msg["message"]["spans"]
                        .as_array()
                        .and_then(|spans| spans.iter().find(|sp| sp["is_primary"] == true))
                        .and_then(|sp| sp["file_name"].as_str())
                        .unwrap_or("")
                        .to_owned();
                    errors.push((s, file, text));
                }
                _ => {}
            }
        }
    }
    let status = child.wait().map_err(|e| format!("cargo did not finish: {e}"))?;
    let stderr = stderr_reader.join().unwrap_or_default();
    if !seen_any && !status.success() {
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("cargo failed before compiling anything: {}", tail.join(" | ")));
    }
    Ok((errors, built))
}

/// Runs every job; per model, one result per job.
pub fn run(
    built: &Built,
    jobs: &[Result<Vec<Result<Job, String>>, String>],
    progress: &dyn super::Progress,
) -> Vec<Vec<Result<(), String>>> {
    let mut results: Vec<Vec<Result<(), String>>> = jobs
        .iter()
        .map(|j| j.as_ref().map(|l| vec![Err("not run".to_owned()); l.len()]).unwrap_or_default())
        .collect();
    // Per shard: (model, job index, job).
    let mut per_shard: BTreeMap<usize, Vec<(usize, usize, &Job)>> = BTreeMap::new();
    for (k, list) in jobs.iter().enumerate() {
        let Ok(list) = list else { continue };
        if built.models[k].is_err() {
            continue;
        }
        for (j, job) in list.iter().enumerate() {
            match job {
                Ok(job) => per_shard.entry(built.placement[k].0).or_default().push((k, j, job)),
                Err(e) => results[k][j] = Err(e.clone()),
            }
        }
    }
    let total: usize = per_shard.values().map(Vec::len).sum();
    progress.phase("running", total);
    for (s, list) in per_shard {
        let Some(binary) = &built.binaries[s] else {
            progress.advance(list.len(), "");
            continue;
        };
        let outcome = run_batch(binary, &list);
        let crashed = outcome.len() < list.len();
        for (n, (k, j, _)) in list.iter().enumerate() {
            if let Some(r) = outcome.get(n) {
                results[*k][*j] = r.clone();
            }
        }
        if crashed {
            // The process died: run what is left one job per process, so the
            // crash is pinned on its model.
            for (k, j, job) in list.iter().skip(outcome.len()) {
                let one = run_batch(binary, &[(*k, *j, *job)]);
                results[*k][*j] = one.into_iter().next().unwrap_or_else(|| {
                    Err("the generated code crashed the process (stack overflow or abort)".into())
                });
            }
        }
        progress.advance(list.len(), &format!("shard_{s}"));
    }
    results
}

fn run_batch(binary: &Path, list: &[(usize, usize, &Job)]) -> Vec<Result<(), String>> {
    let mut text = String::new();
    for (k, _, job) in list {
        let ins: Vec<String> = job.inputs.iter().map(|p| p.display().to_string()).collect();
        let outs: Vec<String> = job.outputs.iter().map(|p| p.display().to_string()).collect();
        let mut fields = vec![k.to_string(), ins.len().to_string()];
        fields.extend(ins);
        fields.extend(outs);
        text.push_str(&fields.join("\t"));
        text.push('\n');
    }
    let jobs_file = binary.with_extension("jobs");
    if std::fs::write(&jobs_file, text).is_err() {
        return Vec::new();
    }
    let Ok(out) = Command::new(binary).arg(&jobs_file).output() else { return Vec::new() };
    let mut results = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((n, rest)) = line.split_once(' ') else { continue };
        if n.parse::<usize>().ok() != Some(results.len()) {
            break;
        }
        results.push(if rest == "OK" {
            Ok(())
        } else {
            Err(rest.trim_start_matches("ERR ").to_owned())
        });
    }
    results
}
