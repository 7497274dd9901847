//! The HTML report of a model (`onnx-codegen report`): metadata, inputs and
//! outputs, a table of nodes with shapes, sizes and arithmetic cost, totals,
//! and the memory plan drawn as an SVG picture.
//!
//! The report is one self-contained file (styles inline, no scripts from the
//! network), rendered with a tera template compiled into the binary. It is
//! built from an [`Analysis`], so a model with unsupported operators still
//! gets a report: what is missing is listed at the top.

pub mod cost;

use crate::diag::{Diagnostic, Error, Result};
use crate::generate::Analysis;
use crate::ir::{NodeId, TensorType, ValueId, ValueKind};
use crate::passes::plan::Buffer;
use cost::{Cost, node_cost};

/// The template, compiled in so the binary needs no files at run time.
const TEMPLATE: &str = include_str!("../../templates/report.html");

/// Width of the memory plan's drawing area, in SVG units (pixels).
pub const PLAN_WIDTH: f64 = 960.0;
/// Height of the memory plan's drawing area, in SVG units.
pub const PLAN_HEIGHT: f64 = 300.0;
/// Left margin of the drawing area (room for the offset axis labels).
pub const PLAN_LEFT: f64 = 64.0;
/// Top margin of the drawing area.
pub const PLAN_TOP: f64 = 8.0;
/// The smallest height a buffer is drawn with, so tiny buffers can still be
/// pointed at.
pub const PLAN_MIN_HEIGHT: f64 = 1.5;

/// Everything the template shows.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    /// The model as the user named it (a path).
    pub source: String,
    pub generator: String,
    pub graph: String,
    /// Descriptive metadata rows (producer, IR version, opsets, ...).
    pub metadata: Vec<(String, String)>,
    pub doc_string: String,
    pub inputs: Vec<ValueRow>,
    pub outputs: Vec<ValueRow>,
    /// Operator counts, most frequent first.
    pub op_counts: Vec<(String, usize)>,
    pub nodes: Vec<NodeRow>,
    pub totals: Totals,
    /// The memory plan, when the model could be planned.
    pub plan: Option<PlanDrawing>,
    /// Nodes the compiler does not support yet.
    pub unsupported: Vec<crate::passes::infer::Unsupported>,
    /// Errors in the model found by inference, rendered.
    pub errors: Vec<String>,
}

/// A graph input or output.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ValueRow {
    pub name: String,
    /// `float[1, 3]`, or `?` where inference did not reach.
    pub ty: String,
    pub bytes: Option<usize>,
    pub bytes_text: String,
}

/// One node of the main graph, in execution order.
#[derive(Clone, Debug, serde::Serialize)]
pub struct NodeRow {
    /// Position in the graph's order.
    pub index: usize,
    /// The step it runs at, if it runs (folded and dead nodes do not).
    pub step: Option<usize>,
    /// `run`, `folded` (computed at generation time), `unsupported`, `removed`
    /// (its outputs are not needed) or `pending` (not planned because of an
    /// unsupported node elsewhere).
    pub status: &'static str,
    pub op: String,
    pub name: String,
    pub inputs: Vec<ValueCell>,
    pub outputs: Vec<ValueCell>,
    /// Bytes of the outputs.
    pub out_bytes: u64,
    pub out_bytes_text: String,
    /// Bytes of the constant inputs (weights) it reads.
    pub weight_bytes: u64,
    pub weight_bytes_text: String,
    pub macs: u64,
    pub macs_text: String,
    pub flops: u64,
    pub flops_text: String,
}

/// A value as one cell of the node table.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ValueCell {
    pub name: String,
    pub ty: String,
    /// Whether it is known at generation time.
    pub constant: bool,
}

/// Whole-model figures.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Totals {
    pub nodes: usize,
    pub steps: usize,
    pub folded: usize,
    pub weights_bytes: Option<usize>,
    pub arena_bytes: Option<usize>,
    pub arena_lower_bound_bytes: Option<usize>,
    pub macs: u64,
    pub flops: u64,
    /// The same figures as text (`1.2 MiB`, `3.4 M`); `n/a` when unknown.
    pub weights_text: String,
    pub arena_text: String,
    pub lower_bound_text: String,
    pub macs_text: String,
    pub flops_text: String,
    pub io_text: String,
}

/// The memory plan as rectangles: time (steps) across, arena offset down.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanDrawing {
    pub steps: usize,
    pub arena_bytes: usize,
    /// The SVG's full size.
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub top: f64,
    pub plot_width: f64,
    pub plot_height: f64,
    pub rects: Vec<PlanRect>,
    pub x_ticks: Vec<Tick>,
    pub y_ticks: Vec<Tick>,
}

/// One arena buffer drawn as a rectangle.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PlanRect {
    pub offset: usize,
    pub bytes: usize,
    pub first_step: usize,
    pub last_step: usize,
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
    /// A fill colour (`hsl(...)`).
    pub fill: String,
    /// The hover text: value names, size, offset, lifetime.
    pub title: String,
    /// The first value's name, drawn inside the rectangle when it fits.
    pub label: String,
    pub show_label: bool,
}

/// An axis tick.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Tick {
    pub pos: f64,
    pub text: String,
}

/// Builds the report's contents from an analysis. `source` names the model.
pub fn build(analysis: &Analysis, source: &str) -> Report {
    let model = analysis.model();
    let g = &model.graph;
    let inferred = &analysis.inferred;
    let types = &inferred.types;
    let ty_of = |v: ValueId| types.get(v.index()).and_then(Option::as_ref);
    let is_const = |v: ValueId| {
        inferred.constants.get(v.index()).is_some_and(Option::is_some)
            || matches!(g.value(v).kind, ValueKind::Initializer(_))
    };
    let cell = |v: ValueId| ValueCell {
        name: g.value(v).name.clone(),
        ty: ty_of(v).map_or_else(|| "?".to_owned(), ToString::to_string),
        constant: is_const(v),
    };
    let bytes_of = |v: ValueId| ty_of(v).and_then(TensorType::byte_size).map_or(0, to_u64);

    let mut step_of: Vec<Option<usize>> = Vec::new();
    for (t, step) in inferred.steps.iter().enumerate() {
        let i = step.node.index();
        if step_of.len() <= i {
            step_of.resize(i + 1, None);
        }
        step_of[i] = Some(t);
    }
    let unsupported_names: std::collections::HashSet<&str> =
        inferred.unsupported.iter().map(|u| u.node.as_str()).collect();

    let mut nodes = Vec::new();
    let mut total = Cost::default();
    let planned = analysis.plan.is_some();
    for (index, &id) in g.order().iter().enumerate() {
        let node = g.node(id);
        let step = step_of.get(id.index()).copied().flatten();
        let all_outputs_known = node.outputs.iter().flatten().all(|&v| is_const(v));
        let status = if step.is_some() {
            "run"
        } else if unsupported_names.contains(node.label(id).as_str()) {
            "unsupported"
        } else if all_outputs_known && !node.outputs.iter().flatten().any(|&v| ty_of(v).is_none()) {
            "folded"
        } else if planned {
            "removed"
        } else {
            // Dead-step removal is only meaningful once the whole graph
            // runs: until then a node feeding an unsupported one is pending.
            "pending"
        };
        let runs = matches!(status, "run" | "unsupported" | "pending");
        let cost = if runs { node_cost(node, types) } else { Cost::default() };
        if runs {
            total.macs = total.macs.saturating_add(cost.macs);
            total.flops = total.flops.saturating_add(cost.flops);
        }
        let out_bytes: u64 = node.outputs.iter().flatten().map(|&v| bytes_of(v)).sum();
        let weight_bytes: u64 =
            node.inputs.iter().flatten().filter(|&&v| is_const(v)).map(|&v| bytes_of(v)).sum();
        nodes.push(NodeRow {
            index,
            step,
            status,
            op: op_label(&node.op.domain, &node.op.op_type),
            name: node_label(node.name.as_str(), id),
            inputs: node.inputs.iter().flatten().map(|&v| cell(v)).collect(),
            outputs: node.outputs.iter().flatten().map(|&v| cell(v)).collect(),
            out_bytes,
            out_bytes_text: bytes_text(out_bytes),
            weight_bytes,
            weight_bytes_text: if weight_bytes == 0 {
                String::new()
            } else {
                bytes_text(weight_bytes)
            },
            macs: cost.macs,
            macs_text: if cost.macs == 0 { String::new() } else { count_text(cost.macs) },
            flops: cost.flops,
            flops_text: if cost.flops == 0 { String::new() } else { count_text(cost.flops) },
        });
    }

    let summary = analysis.summary();
    let mut op_counts: Vec<(String, usize)> = summary.ops.into_iter().collect();
    op_counts.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));

    let value_row = |v: &ValueId| {
        let bytes = ty_of(*v).and_then(TensorType::byte_size);
        ValueRow {
            name: g.value(*v).name.clone(),
            ty: ty_of(*v).map_or_else(|| "?".to_owned(), ToString::to_string),
            bytes,
            bytes_text: bytes.map_or_else(|| "?".to_owned(), |b| bytes_text(to_u64(b))),
        }
    };
    let inputs: Vec<ValueRow> = g.inputs.iter().map(value_row).collect();
    let outputs: Vec<ValueRow> = g.outputs.iter().map(value_row).collect();
    let io: u64 = inputs.iter().chain(&outputs).filter_map(|r| r.bytes).map(to_u64).sum();

    let plan = analysis.plan.as_ref();
    let opt_text = |n: Option<usize>| n.map_or_else(|| "n/a".to_owned(), |b| bytes_text(to_u64(b)));
    let totals = Totals {
        nodes: g.node_count(),
        steps: inferred.steps.len(),
        folded: inferred.folded,
        weights_bytes: plan.map(|p| p.weights.len()),
        arena_bytes: plan.map(|p| p.arena_bytes),
        arena_lower_bound_bytes: plan.map(|p| p.arena_lower_bound_bytes),
        macs: total.macs,
        flops: total.flops,
        weights_text: opt_text(plan.map(|p| p.weights.len())),
        arena_text: opt_text(plan.map(|p| p.arena_bytes)),
        lower_bound_text: opt_text(plan.map(|p| p.arena_lower_bound_bytes)),
        macs_text: count_text(total.macs),
        flops_text: count_text(total.flops),
        io_text: bytes_text(io),
    };

    let mut metadata = Vec::new();
    metadata.push(("IR version".to_owned(), model.ir_version.to_string()));
    let opsets: Vec<String> = model
        .opset_imports
        .iter()
        .map(|(d, v)| format!("{} {v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    metadata.push(("Opsets".to_owned(), opsets.join(", ")));
    let m = &model.metadata;
    let producer = format!("{} {}", m.producer_name, m.producer_version);
    for (key, value) in [("Producer", producer.trim()), ("Domain", m.domain.as_str())] {
        if !value.is_empty() {
            metadata.push((key.to_owned(), value.to_owned()));
        }
    }
    if m.model_version != 0 {
        metadata.push(("Model version".to_owned(), m.model_version.to_string()));
    }
    metadata.extend(m.props.iter().cloned());
    let features = crate::generate::feature_notes(analysis);
    if !features.is_empty() {
        metadata.push(("Runtime features".to_owned(), features.join("; ")));
    }

    Report {
        source: source.to_owned(),
        generator: format!("onnx-codegen {}", env!("CARGO_PKG_VERSION")),
        graph: g.name.clone(),
        metadata,
        doc_string: m.doc_string.clone(),
        inputs,
        outputs,
        op_counts,
        nodes,
        totals,
        plan: plan.map(|p| plan_drawing(&p.buffers, inferred.steps.len(), p.arena_bytes)),
        unsupported: inferred.unsupported.clone(),
        errors: inferred.errors.iter().map(ToString::to_string).collect(),
    }
}

/// Lays out the plan's arena buffers: step `t` spans `[t, t + 1)` across,
/// byte `b` sits at `b / arena` of the height.
pub fn plan_drawing(buffers: &[Buffer], steps: usize, arena_bytes: usize) -> PlanDrawing {
    let steps_f = steps.max(1) as f64;
    let arena_f = arena_bytes.max(1) as f64;
    let sx = PLAN_WIDTH / steps_f;
    let sy = PLAN_HEIGHT / arena_f;
    let rects = buffers
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let first = b.first_step.min(b.last_step);
            let span = b.last_step.saturating_sub(first).saturating_add(1);
            let w = span as f64 * sx;
            let h = (b.bytes as f64 * sy).max(PLAN_MIN_HEIGHT);
            let label = b.values.first().cloned().unwrap_or_default();
            let names = if b.values.len() > 6 {
                format!("{}, … ({} values)", b.values[..6].join(", "), b.values.len())
            } else {
                b.values.join(", ")
            };
            let title = format!(
                "{names}\n{} at offset {}\nsteps {}–{}",
                bytes_text(to_u64(b.bytes)),
                b.offset,
                first,
                b.last_step
            );
            PlanRect {
                offset: b.offset,
                bytes: b.bytes,
                first_step: first,
                last_step: b.last_step,
                x: round2(PLAN_LEFT + first as f64 * sx),
                y: round2(PLAN_TOP + b.offset as f64 * sy),
                w: round2(w),
                h: round2(h),
                fill: format!("hsl({}, 62%, 62%)", (i * 137) % 360),
                show_label: w >= 7.0 * label.chars().count() as f64 + 6.0 && h >= 13.0,
                title,
                label,
            }
        })
        .collect();
    let x_ticks = ticks(steps, 12)
        .into_iter()
        .map(|t| Tick { pos: round2(PLAN_LEFT + (t as f64 + 0.5) * sx), text: t.to_string() })
        .collect();
    let y_ticks = byte_ticks(arena_bytes)
        .into_iter()
        .map(|b| Tick { pos: round2(PLAN_TOP + b as f64 * sy), text: bytes_text(to_u64(b)) })
        .collect();
    PlanDrawing {
        steps,
        arena_bytes,
        width: PLAN_LEFT + PLAN_WIDTH + 8.0,
        height: PLAN_TOP + PLAN_HEIGHT + 34.0,
        left: PLAN_LEFT,
        top: PLAN_TOP,
        plot_width: PLAN_WIDTH,
        plot_height: PLAN_HEIGHT,
        rects,
        x_ticks,
        y_ticks,
    }
}

/// Renders the report as one self-contained HTML document.
pub fn render(report: &Report) -> Result<String> {
    let internal = |e: tera::Error| {
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            msg.push_str(&format!(": {s}"));
            source = s.source();
        }
        Error::from(Diagnostic::error(format!("internal error: the report template failed: {msg}")))
    };
    let mut tera = tera::Tera::default();
    tera.autoescape_on(vec![".html"]);
    tera.add_raw_template("report.html", TEMPLATE).map_err(internal)?;
    let context = tera::Context::from_serialize(report).map_err(internal)?;
    tera.render("report.html", &context).map_err(internal)
}

/// Analyses nothing new: renders the report of an existing analysis.
pub fn html(analysis: &Analysis, source: &str) -> Result<String> {
    render(&build(analysis, source))
}

/// `Add`, or `com.microsoft.FusedMatMul` outside the default domain.
fn op_label(domain: &str, op_type: &str) -> String {
    if domain.is_empty() || domain == "ai.onnx" {
        op_type.to_owned()
    } else {
        format!("{domain}.{op_type}")
    }
}

fn node_label(name: &str, id: NodeId) -> String {
    if name.is_empty() { format!("#{}", id.0) } else { name.to_owned() }
}

/// About `max` round tick positions in `0..n`.
fn ticks(n: usize, max: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    let raw = n.div_ceil(max.max(1)).max(1);
    let step = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000]
        .into_iter()
        .find(|&s| s >= raw)
        .unwrap_or(raw);
    (0..n).step_by(step).collect()
}

/// Round byte offsets from 0 to `arena` (inclusive), about five of them.
fn byte_ticks(arena: usize) -> Vec<usize> {
    if arena == 0 {
        return vec![0];
    }
    let raw = arena / 5;
    let mut step = 1usize;
    while step < raw {
        step = step.saturating_mul(2);
    }
    let mut out: Vec<usize> = (0..arena).step_by(step.max(1)).collect();
    if out.last().is_some_and(|&l| arena - l > step / 3) || out.is_empty() {
        out.push(arena);
    } else if let Some(l) = out.last_mut() {
        *l = arena;
    }
    out.dedup();
    out
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// `512 B`, `1.5 KiB`, `3.25 MiB`.
pub fn bytes_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$} {}", UNITS[unit])
}

/// `950`, `12.3 k`, `4.56 M`, `1.2 G`.
pub fn count_text(n: u64) -> String {
    const UNITS: [&str; 5] = ["", " k", " M", " G", " T"];
    if n < 1000 {
        return n.to_string();
    }
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1000.0 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    let digits = if v >= 100.0 {
        0
    } else if v >= 10.0 {
        1
    } else {
        2
    };
    format!("{v:.digits$}{}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_counts_read_well() {
        assert_eq!(bytes_text(0), "0 B");
        assert_eq!(bytes_text(1023), "1023 B");
        assert_eq!(bytes_text(1536), "1.50 KiB");
        assert_eq!(bytes_text(1_080_128), "1.03 MiB");
        assert_eq!(count_text(999), "999");
        assert_eq!(count_text(12_345), "12.3 k");
        assert_eq!(count_text(4_560_000), "4.56 M");
    }

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(5, 12), vec![0, 1, 2, 3, 4]);
        assert_eq!(ticks(30, 12), vec![0, 5, 10, 15, 20, 25]);
        assert_eq!(ticks(0, 12), Vec::<usize>::new());
        let b = byte_ticks(196_608);
        assert_eq!(b.first(), Some(&0));
        assert_eq!(b.last(), Some(&196_608));
        assert!(b.len() <= 8, "{b:?}");
    }
}
