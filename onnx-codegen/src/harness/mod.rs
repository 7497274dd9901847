//! The test harness behind `onnx-codegen test`: generate, compile and run
//! models in the ONNX backend test layout (`model.onnx`,
//! `test_data_set_*/input_*.pb`, `output_*.pb`), and compare the results
//! with the reference outputs.
//!
//! Models are generated in-process, then compiled together: the generated
//! files go into a few shard crates of one cargo workspace (so the runtime
//! crate is built once and shards build in parallel). A shard that fails to
//! compile is rebuilt without the models its errors point at, so one bad
//! model never hides the others. Each shard binary runs a list of jobs,
//! reading inputs and writing outputs as raw little-endian files.

pub mod data;
mod shards;

use crate::emit::WeightSource;
use crate::generate::{Generated, Options, compile};
use crate::ir::{Tensor, TensorType};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a test ended.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize), serde(rename_all = "lowercase"))]
pub enum Status {
    Pass,
    Fail,
    Unsupported,
}

/// One test's result.
#[derive(Clone, Debug)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Outcome {
    pub name: String,
    pub status: Status,
    /// Why it did not pass.
    pub reason: String,
    /// The runtime features its generated code needed (`alloc` for string
    /// tensors, `image` for ImageDecoder); the harness turns them on itself.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub features: Vec<&'static str>,
    /// Integer inputs whose values the harness fixed at generation time from
    /// the first data set (`--fix`), because shapes depend on them.
    #[cfg_attr(feature = "serde", serde(skip_serializing_if = "Vec::is_empty"))]
    pub fixed_inputs: Vec<String>,
}

/// The most elements an integer input may have for the harness to fix its
/// values when a model's shapes depend on them.
const FIX_MAX_ELEMENTS: u64 = 16;

/// What the harness needs from the caller.
#[derive(Clone, Debug)]
pub struct TestOptions {
    pub generate: Options,
    /// Where the shard crates and their build live (kept between runs so
    /// that unchanged shards are not rebuilt).
    pub work_dir: PathBuf,
    /// Where to write what the generated code produced
    /// (`<dir>/<test>/test_data_set_K/output_J.pb`).
    pub save_outputs: Option<PathBuf>,
    /// Models per shard crate.
    pub shard_size: usize,
    /// How close float results must be.
    pub tolerance: data::Tolerance,
}

/// A test that generated: its code and data sets.
struct Case {
    name: String,
    dir: PathBuf,
    generated: Generated,
    /// The weight file the code includes, for models with large weights.
    weights_file: Option<String>,
    sets: Vec<DataSet>,
    /// Inputs fixed from the first data set (see [`Outcome::fixed_inputs`]).
    fixed_inputs: Vec<String>,
}

impl Case {
    /// The runtime features the case's generated code needs.
    fn features(&self) -> Vec<&'static str> {
        let s = &self.generated.summary;
        [(s.needs_alloc, "alloc"), (s.needs_image, "image")]
            .into_iter()
            .filter_map(|(on, f)| on.then_some(f))
            .collect()
    }
}

/// Weights above this size go to a file next to the generated module.
const INLINE_WEIGHTS_LIMIT: usize = 1 << 20;

struct DataSet {
    name: String,
    /// The input tensors in the order the generated code takes them
    /// (sequences spread out, absent optionals left out).
    inputs: Vec<Tensor>,
    /// The expected output tensors, spread out the same way.
    outputs: Vec<Tensor>,
}

/// Where a long run reports how far it got: a phase starts with a number of
/// items, then items complete. Every method does nothing by default, so a
/// caller that wants silence passes [`Quiet`].
pub trait Progress: Sync {
    /// A phase starts; `total` items will complete (0 when unknown).
    fn phase(&self, _name: &str, _total: usize) {}
    /// `n` more items of the current phase completed; `item` names the last one.
    fn advance(&self, _n: usize, _item: &str) {}
    /// The run is over.
    fn finish(&self) {}
}

/// No progress display.
pub struct Quiet;

impl Progress for Quiet {}

/// Runs every test directory and returns one outcome per directory, in order,
/// telling `progress` about the phases: generating, compiling, running.
pub fn run_tests(dirs: &[PathBuf], opts: &TestOptions, progress: &dyn Progress) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; dirs.len()];
    let mut cases: Vec<(usize, Case)> = Vec::new();
    progress.phase("generating", dirs.len());
    for (i, dir) in dirs.iter().enumerate() {
        let name = test_name(dir);
        match prepare_case(dir, &name, &opts.generate) {
            Ok(case) => cases.push((i, case)),
            Err((status, reason)) => {
                outcomes[i] = Some(Outcome {
                    name: name.clone(),
                    status,
                    reason,
                    features: Vec::new(),
                    fixed_inputs: Vec::new(),
                })
            }
        }
        progress.advance(1, &name);
    }
    let files: Vec<shards::ModelFile> = cases
        .iter()
        .map(|(_, c)| shards::ModelFile {
            name: c.name.clone(),
            struct_name: c.generated.struct_name.clone(),
            code: c.generated.to_file_text(&c.dir.join("model.onnx").display().to_string()),
            weights_file: c.weights_file.clone().map(|f| (f, c.generated.weights.clone())),
            features: c.features(),
        })
        .collect();
    let built = shards::build(&files, &opts.work_dir, opts.shard_size, progress);
    let mut jobs = Vec::new();
    for (k, (_, case)) in cases.iter().enumerate() {
        if let Err(reason) = &built.models[k] {
            jobs.push(Err(reason.clone()));
            continue;
        }
        jobs.push(Ok(case_jobs(case, k, &opts.work_dir)));
    }
    let results = shards::run(&built, &jobs, progress);
    progress.finish();
    for (k, (i, case)) in cases.iter().enumerate() {
        let outcome = match &jobs[k] {
            Err(reason) => Outcome {
                name: case.name.clone(),
                status: Status::Fail,
                reason: reason.clone(),
                features: case.features(),
                fixed_inputs: case.fixed_inputs.clone(),
            },
            Ok(list) => judge(case, list, &results[k], opts),
        };
        outcomes[*i] = Some(outcome);
    }
    outcomes
        .into_iter()
        .zip(dirs)
        .map(|(o, d)| {
            o.unwrap_or_else(|| Outcome {
                name: test_name(d),
                status: Status::Fail,
                reason: "the harness lost this test".into(),
                features: Vec::new(),
                fixed_inputs: Vec::new(),
            })
        })
        .collect()
}

/// The last component of a test directory's path.
pub fn test_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

fn prepare_case(dir: &Path, name: &str, opts: &Options) -> Result<Case, (Status, String)> {
    let model_path = dir.join("model.onnx");
    let fail = |reason: String| (Status::Fail, reason);
    let model =
        crate::load::load_model(&model_path).map_err(|e| fail(first_line(&e.to_string())))?;
    let source = model_path.display().to_string();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| fail(format!("cannot read the test directory: {e}")))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && test_name(p).starts_with("test_data_set_"))
        .collect();
    entries.sort();
    let graph = model.graph.as_ref();
    // The K-th data file is the K-th graph input without an initializer,
    // as onnx's backend runner reads them.
    let data_inputs: Vec<&crate::proto::ValueInfoProto> = graph
        .map(|g| {
            let initialized = |name: &str| g.initializer.iter().any(|t| t.name() == name);
            g.input.iter().filter(|v| !initialized(v.name())).collect()
        })
        .unwrap_or_default();
    let input_forms: Vec<(String, data::ValueForm)> = data_inputs
        .iter()
        .map(|v| (v.name().to_owned(), data::form_of(v.r#type.as_ref())))
        .collect();
    let output_forms: Vec<data::ValueForm> = graph
        .map(|g| g.output.iter().map(|v| data::form_of(v.r#type.as_ref())).collect())
        .unwrap_or_default();
    let mut raw_sets = Vec::new();
    for set in entries {
        let numbered = |prefix: &str| -> Vec<PathBuf> {
            (0..)
                .map(|k| set.join(format!("{prefix}_{k}.pb")))
                .take_while(|p| p.is_file())
                .collect()
        };
        let mut inputs = Vec::new();
        for (j, path) in numbered("input").iter().enumerate() {
            let form = input_forms.get(j).map_or(data::ValueForm::Tensor, |f| f.1);
            inputs.push(data::read_values(path, form).map_err(fail)?);
        }
        let mut outputs = Vec::new();
        for (j, path) in numbered("output").iter().enumerate() {
            let form = output_forms.get(j).copied().unwrap_or(data::ValueForm::Tensor);
            outputs.push(data::read_values(path, form).map_err(fail)?);
        }
        raw_sets.push((set, inputs, outputs));
    }
    let mut opts = opts.clone();
    // Every model is generated allocation-free first; string tensors and
    // ImageDecoder, refused there, are generated again with `--alloc` or
    // `--image` (below), and their shards get the runtime features.
    opts.alloc = false;
    opts.image = false;
    if let Some((_, inputs, _)) = raw_sets.first() {
        for (v, values) in data_inputs.iter().zip(inputs) {
            if let Some([t]) = values.as_deref() {
                bind_dims(v.r#type.as_ref(), t, &mut opts.dims);
                if has_open_dims(v.r#type.as_ref()) {
                    let shape = t.dims.iter().map(|&d| d as usize).collect();
                    opts.input_shapes.entry(v.name().to_owned()).or_insert(shape);
                }
            }
        }
        for ((name, form), values) in input_forms.iter().zip(inputs) {
            match (form, values) {
                (data::ValueForm::Tensor, _) => {}
                (_, None) => {
                    opts.io.absent.insert(name.clone());
                }
                (data::ValueForm::Sequence | data::ValueForm::OptionalSequence, Some(list)) => {
                    let types = list.iter().filter_map(Tensor::tensor_type).collect();
                    opts.io.sequences.insert(name.clone(), types);
                }
                (data::ValueForm::OptionalTensor, Some(_)) => {}
            }
        }
    }
    let mut weights_file = None;
    let mut build = |opts: &Options| {
        let compiled = compile(&model, opts, &source)?;
        let mut emit = compiled.emit_options();
        if compiled.weights().len() > INLINE_WEIGHTS_LIMIT {
            let file = format!("{}.weights.bin", crate::emit::snake_ident(name));
            weights_file = Some(file.clone());
            emit.weights = WeightSource::File(file);
        }
        compiled.emit(&emit)
    };
    let mut result = build(&opts);
    if let Err(e) = &result {
        let asks = |flag: &str| e.diagnostics().iter().any(|d| d.message.contains(flag));
        let (alloc, image) = (asks("pass --alloc"), asks("pass --image"));
        if alloc || image {
            opts.alloc = alloc;
            opts.image = image;
            result = build(&opts);
        }
    }
    // Shapes that depend on the values of small integer inputs (a target
    // shape, a window size): generate again with those values fixed from
    // the first data set, as a user would with `--fix`. The code checks at
    // run time that every data set passes the same values.
    let mut fixed_inputs = Vec::new();
    if let Err(e) = &result
        && e.diagnostics().iter().any(|d| {
            ["known only at run time", "known at generation time", "computed at run time"]
                .iter()
                .any(|phrase| d.message.contains(phrase))
        })
        && let Some((_, inputs, _)) = raw_sets.first()
    {
        let mut fixed = opts.clone();
        for ((name, form), values) in input_forms.iter().zip(inputs) {
            let (data::ValueForm::Tensor, Some(list)) = (form, values) else { continue };
            let [t] = list.as_slice() else { continue };
            let integer = crate::ops::is_int(t.elem) || t.elem == crate::ir::ElemType::Bool;
            if integer
                && t.len() <= FIX_MAX_ELEMENTS
                && let Some(v) = t.to_i64s()
            {
                fixed.fixed_inputs.insert(name.clone(), v);
            }
        }
        if !fixed.fixed_inputs.is_empty() {
            let retry = build(&fixed);
            if retry.is_ok() {
                fixed_inputs = fixed.fixed_inputs.keys().cloned().collect();
                result = retry;
            }
        }
    }
    let generated = match result {
        Ok(g) => g,
        Err(e) => {
            let unsupported =
                e.diagnostics().iter().any(|d| d.message.starts_with("not supported:"));
            let reasons: Vec<String> = e
                .diagnostics()
                .iter()
                .map(|d| {
                    let at = d.location.path.last().map(|p| format!("{p}: ")).unwrap_or_default();
                    format!("{at}{}", d.message.trim_start_matches("not supported: "))
                })
                .collect();
            let status = if unsupported { Status::Unsupported } else { Status::Fail };
            return Err((status, reasons.join("; ")));
        }
    };
    let mut sets = Vec::new();
    for (set, inputs, outputs) in raw_sets {
        let inputs = with_defaults(&model, &opts, inputs).map_err(fail)?;
        let inputs: Vec<Tensor> = inputs.into_iter().flatten().flatten().collect();
        let outputs: Vec<Tensor> = outputs.into_iter().flatten().flatten().collect();
        if inputs.len() != generated.inputs.len() {
            return Err(fail(format!(
                "{} has {} input tensors but the model takes {}",
                test_name(&set),
                inputs.len(),
                generated.inputs.len()
            )));
        }
        if outputs.len() != generated.outputs.len() {
            return Err(fail(format!(
                "{} has {} output tensors but the model gives {}",
                test_name(&set),
                outputs.len(),
                generated.outputs.len()
            )));
        }
        sets.push(DataSet { name: test_name(&set), inputs, outputs });
    }
    if sets.is_empty() {
        return Err(fail("no test_data_set_* directory".into()));
    }
    Ok(Case {
        name: name.to_owned(),
        dir: dir.to_owned(),
        generated,
        weights_file,
        sets,
        fixed_inputs,
    })
}

/// The values of `run`'s inputs, in the graph's order, from the values of
/// the inputs without an initializer (`data`, in order): an input with an
/// initializer that stays an input of `run` takes its default (see
/// [`crate::passes::input_defaults`]); the others are constants.
fn with_defaults(
    model: &crate::proto::ModelProto,
    opts: &Options,
    data: Vec<Option<Vec<Tensor>>>,
) -> Result<Vec<Option<Vec<Tensor>>>, String> {
    let Some(g) = &model.graph else { return Ok(data) };
    let mut data = data.into_iter();
    let mut out = Vec::new();
    for v in &g.input {
        let Some(t) = g.initializer.iter().find(|t| t.name() == v.name()) else {
            // Fewer files than inputs is reported against the model's signature.
            out.extend(data.next());
            continue;
        };
        let stays = crate::passes::input_defaults::stays_input(
            model.ir_version(),
            v.name(),
            &opts.runtime_inputs,
        );
        if stays {
            let t = Tensor::from_proto(t).map_err(|e| {
                let text: Vec<String> = e.iter().map(|d| d.message.clone()).collect();
                format!("initializer '{}': {}", v.name(), text.join("; "))
            })?;
            out.push(Some(vec![t]));
        }
    }
    out.extend(data);
    Ok(out)
}

/// Binds the symbolic dimensions of a tensor input's declared type (or a
/// present optional tensor's) to the dimensions of its test data, unless
/// the caller gave them: the data fixes the shapes the code is generated for.
fn bind_dims(
    ty: Option<&crate::proto::TypeProto>,
    data: &Tensor,
    dims: &mut BTreeMap<String, usize>,
) {
    use crate::proto::tensor_shape_proto::dimension::Value as D;
    use crate::proto::type_proto::Value;
    let tensor = match ty.and_then(|t| t.value.as_ref()) {
        Some(Value::TensorType(t)) => t,
        Some(Value::OptionalType(o)) => match o.elem_type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(Value::TensorType(t)) => t,
            _ => return,
        },
        _ => return,
    };
    let Some(shape) = &tensor.shape else { return };
    if shape.dim.len() != data.dims.len() {
        return;
    }
    for (d, &n) in shape.dim.iter().zip(&data.dims) {
        if let (Some(D::DimParam(s)), Ok(n)) = (&d.value, usize::try_from(n)) {
            if crate::passes::validate::is_anonymous_dim(s) {
                continue;
            }
            dims.entry(s.clone()).or_insert(n);
        }
    }
}

/// Whether a tensor input's declared shape leaves a dimension open that
/// no symbol names (`-1`, or neither a value nor a name), or has no shape
/// at all: the data then gives the whole shape (as `--input-shape` would).
fn has_open_dims(ty: Option<&crate::proto::TypeProto>) -> bool {
    use crate::proto::tensor_shape_proto::dimension::Value as D;
    use crate::proto::type_proto::Value;
    let Some(Value::TensorType(t)) = ty.and_then(|t| t.value.as_ref()) else { return false };
    let Some(shape) = &t.shape else { return true };
    shape.dim.iter().any(|d| match &d.value {
        Some(D::DimValue(v)) => *v < 0,
        Some(D::DimParam(p)) => crate::passes::validate::is_anonymous_dim(p),
        None => true,
    })
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim_start_matches("error: ").to_owned()
}

/// The jobs of one case: per data set, raw input files in, raw output files out.
fn case_jobs(case: &Case, k: usize, work: &Path) -> Vec<Result<shards::Job, String>> {
    let dir = work.join("data").join(format!("m{k}"));
    case.sets
        .iter()
        .map(|set| {
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut inputs = Vec::new();
            for (j, (t, ty)) in set.inputs.iter().zip(&case.generated.inputs).enumerate() {
                let bytes = data::input_bytes(t, ty, &format!("input {j}"))?;
                let raw = dir.join(format!("{}_in{j}.bin", set.name));
                std::fs::write(&raw, &*bytes).map_err(|e| format!("{}: {e}", raw.display()))?;
                inputs.push(raw);
            }
            let outputs: Vec<PathBuf> = (0..set.outputs.len())
                .map(|j| dir.join(format!("{}_out{j}.bin", set.name)))
                .collect();
            for o in &outputs {
                // A shape left by an earlier run in the same work directory.
                let _ = std::fs::remove_file(shape_file(o));
            }
            Ok(shards::Job { inputs, outputs })
        })
        .collect()
}

/// Where the shard writes the shape a data-sized output took next to its
/// raw bytes.
fn shape_file(raw: &Path) -> PathBuf {
    let mut name = raw.as_os_str().to_owned();
    name.push(".shape");
    PathBuf::from(name)
}

/// The shape a data-sized output took (`None` for an ordinary output, which
/// has no shape file), checked against its capacity `declared`.
fn read_shape(path: &Path, declared: &TensorType) -> Result<Option<TensorType>, String> {
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(None) };
    let dims = text
        .split_whitespace()
        .map(str::parse::<usize>)
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if dims.len() != declared.dims.len() || dims.iter().zip(&declared.dims).any(|(a, b)| a > b) {
        return Err(format!("the shape {dims:?} it reports exceeds its capacity {declared}"));
    }
    Ok(Some(declared.with_dims(dims)))
}

/// Compares a case's results and decides its outcome.
fn judge(
    case: &Case,
    jobs: &[Result<shards::Job, String>],
    results: &[Result<(), String>],
    opts: &TestOptions,
) -> Outcome {
    let save = opts.save_outputs.as_deref();
    let fail = |reason: String| Outcome {
        name: case.name.clone(),
        status: Status::Fail,
        reason,
        features: case.features(),
        fixed_inputs: case.fixed_inputs.clone(),
    };
    let mut problems = Vec::new();
    for (s, set) in case.sets.iter().enumerate() {
        let job = match jobs.get(s) {
            Some(Ok(job)) => job,
            Some(Err(e)) => return fail(format!("{}: {e}", set.name)),
            None => return fail("missing job".into()),
        };
        if let Some(Err(e)) = results.get(s) {
            return fail(format!("{}: {e}", set.name));
        }
        let mut got: Vec<(TensorType, Vec<u8>)> = Vec::with_capacity(job.outputs.len());
        for (j, (raw, want)) in job.outputs.iter().zip(&set.outputs).enumerate() {
            let declared: &TensorType = &case.generated.outputs[j];
            let actual = match std::fs::read(raw) {
                Ok(b) => b,
                Err(e) => return fail(format!("{}: output {j} was not written: {e}", set.name)),
            };
            let ty = match read_shape(&shape_file(raw), declared) {
                Ok(None) => declared.clone(),
                Ok(Some(t)) => t,
                Err(e) => return fail(format!("{}: output {j}: {e}", set.name)),
            };
            if let Some(diff) = data::compare(&actual, &ty, want, opts.tolerance) {
                problems.push(format!("{} output {j}: {diff}", set.name));
            }
            got.push((ty, actual));
        }
        if let Some(dir) = save
            && let Err(e) = save_outputs(&dir.join(&case.name).join(&set.name), case, &got)
        {
            return fail(format!("{}: cannot save the outputs: {e}", set.name));
        }
    }
    if problems.is_empty() {
        Outcome {
            name: case.name.clone(),
            status: Status::Pass,
            reason: String::new(),
            features: case.features(),
            fixed_inputs: case.fixed_inputs.clone(),
        }
    } else {
        fail(problems.join("; "))
    }
}

/// Writes a data set's results in the ONNX test layout: `output_K.pb`
/// per graph output of the model, of the form its declared type says.
fn save_outputs(dir: &Path, case: &Case, got: &[(TensorType, Vec<u8>)]) -> Result<(), String> {
    let groups = &case.generated.output_groups;
    if groups.iter().map(|g| g.count).sum::<usize>() != got.len() {
        return Err(format!(
            "the graph outputs are held by {} tensors but the code gave {}",
            groups.iter().map(|g| g.count).sum::<usize>(),
            got.len()
        ));
    }
    let mut rest = got;
    for (k, group) in groups.iter().enumerate() {
        let (mine, tail) = rest.split_at(group.count);
        rest = tail;
        let elems: Vec<(TensorType, &[u8])> =
            mine.iter().map(|(ty, bytes)| (ty.clone(), bytes.as_slice())).collect();
        data::write_value(&dir.join(format!("output_{k}.pb")), group, &elems)?;
    }
    Ok(())
}

/// Counts outcomes by status: (passed, failed, unsupported).
pub fn tally(outcomes: &[Outcome]) -> (usize, usize, usize) {
    let mut counts = BTreeMap::new();
    for o in outcomes {
        *counts.entry(format!("{:?}", o.status)).or_insert(0usize) += 1;
    }
    let get = |k: &str| counts.get(k).copied().unwrap_or(0);
    (get("Pass"), get("Fail"), get("Unsupported"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(ir: i64) -> crate::proto::ModelProto {
        let src = format!(
            "<ir_version: {ir}, opset_import: [\"\" : 13]>
g (float[2] x, float[2] w = {{1, 2}}, float[2] z, float[1] b = {{5}}) => (float[2] y) {{
  xw = Mul (x, w)
  xz = Add (xw, z)
  y = Add (xz, b)
}}"
        );
        crate::text::parse_model(&src, "t").unwrap()
    }

    fn floats(list: &[Option<Vec<Tensor>>]) -> Vec<Vec<f32>> {
        list.iter()
            .map(|v| {
                let t = &v.as_ref().unwrap()[0];
                match crate::ops::HostTensor::from_tensor(t).unwrap().data {
                    crate::ops::HostData::F32(v) => v,
                    other => panic!("{other:?}"),
                }
            })
            .collect()
    }

    fn data() -> Vec<Option<Vec<Tensor>>> {
        let t = |v: &[f32]| {
            let h = crate::ops::HostTensor {
                ty: TensorType::new(crate::ir::ElemType::Float, vec![2]),
                data: crate::ops::HostData::F32(v.to_vec()),
            };
            Some(vec![h.to_tensor("d")])
        };
        vec![t(&[7.0, 8.0]), t(&[9.0, 10.0])]
    }

    /// The data files are the inputs without an initializer; the inputs
    /// with one that stay inputs of `run` take their default, in the
    /// graph's order.
    #[test]
    fn data_files_fill_the_inputs_without_an_initializer() {
        let opts = Options::default();
        let ir3 = with_defaults(&model(3), &opts, data()).unwrap();
        assert_eq!(floats(&ir3), [vec![7.0, 8.0], vec![9.0, 10.0]]);
        let mut named = Options::default();
        named.runtime_inputs.insert("b".into());
        let ir3 = with_defaults(&model(3), &named, data()).unwrap();
        assert_eq!(floats(&ir3), [vec![7.0, 8.0], vec![9.0, 10.0], vec![5.0]]);
        let ir7 = with_defaults(&model(7), &opts, data()).unwrap();
        assert_eq!(floats(&ir7), [vec![7.0, 8.0], vec![1.0, 2.0], vec![9.0, 10.0], vec![5.0]]);
    }

    /// paddle2onnx's `x: float[N, 3, ?, W]`: "?" is no symbol to bind, so
    /// the data set gives the input's whole shape.
    #[test]
    fn question_mark_dims_take_the_data_set_shape() {
        use crate::proto::tensor_shape_proto::{Dimension, dimension::Value as D};
        use crate::proto::{TensorShapeProto, TypeProto, type_proto};
        let dim = |v: D| Dimension { value: Some(v), denotation: None };
        let ty = TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: vec![
                        dim(D::DimParam("N".into())),
                        dim(D::DimValue(3)),
                        dim(D::DimParam("?".into())),
                        dim(D::DimParam("W".into())),
                    ],
                }),
            })),
            denotation: None,
        };
        let data = crate::ops::HostTensor {
            ty: TensorType::new(crate::ir::ElemType::Float, vec![1, 3, 48, 320]),
            data: crate::ops::HostData::F32(vec![0.0; 3 * 48 * 320]),
        }
        .to_tensor("x");
        let mut dims = BTreeMap::new();
        bind_dims(Some(&ty), &data, &mut dims);
        assert_eq!(dims, BTreeMap::from([("N".to_owned(), 1), ("W".to_owned(), 320)]));
        assert!(has_open_dims(Some(&ty)));
    }
}
