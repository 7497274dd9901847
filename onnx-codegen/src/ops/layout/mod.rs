//! Data movement: Transpose, Concat, Split, Slice, Gather, GatherElements,
//! Expand, Pad, Tile, DepthToSpace and SpaceToDepth.
//!
//! These ops only move elements, so they take every element type the runtime
//! can hold (the numeric types, f16, bf16 and bool). Their shape parameters
//! (Slice's starts, Pad's pads, Expand's shape, ...) are taken at generation
//! time when known; given as data, the outputs take the shapes the model
//! declares and the generated code checks the values against them before
//! the kernel runs. Data the kernels index with (Gather's indices, Pad's
//! constant value) may come at run time, and the kernels check it.
//!
//! A call that would copy its input unchanged (an identity permutation, a
//! full slice, zero pads, repeats of one) is an alias instead: no code.
//!
//! The runtime kernels read `X` and write `Y` with `X: MoveTo<Y>`, so a
//! boolean read from the caller's `bool` buffers can be written to the
//! arena's `u8` form (and back) by the same call; Concat and Split are
//! emitted as one call per input or output for the same reason.
//!
//! Each operator's plan (its checks, output types and the `Op` it
//! becomes) is filed with its kin: `rearrange.rs` (Transpose, Expand,
//! Tile, DepthToSpace, SpaceToDepth), `join.rs` (Concat, Split),
//! `select.rs` (Slice, Gather, GatherElements) and `pad.rs`; `kernel.rs`
//! runs and emits every `Op`. This module registers the operators and
//! holds the vocabulary they share.

use super::{Lowered, NodeCx, OpResult, OpRule, axis, invalid, unsupported};
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::layout::Nchw4;
use onnx_codegen_runtime::norm::AxisShape;

mod join;
mod kernel;
mod pad;
mod rearrange;
mod select;

use join::{concat, split};
use kernel::LayoutKernel;
use pad::pad;
use rearrange::{depth_space, expand, tile, transpose};
use select::{gather, gather_elements, slice};

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Transpose" | "Concat" | "Split" | "Slice" | "Gather" | "GatherElements" | "Expand"
        | "Pad" | "Tile" | "DepthToSpace" | "SpaceToDepth" => Some(&LayoutRule),
        _ => None,
    }
}

struct LayoutRule;

/// A node worked out: its output types and what it does.
struct Planned {
    outputs: Vec<TensorType>,
    op: Op,
    /// Shape-like inputs read at run time, checked against the declared
    /// output shapes before `op` runs.
    check: Option<RtCheck>,
}

/// A run-time check (and, for Slice and Pad, the run-time parameters) of a
/// node whose shape-like inputs are data: its outputs have the shapes the
/// model declares, and the generated code calls `runtime::check` with the
/// values before the kernel, which refuses values that give other shapes.
#[derive(Clone, Debug, PartialEq)]
enum RtCheck {
    Expand {
        shape: Vec<usize>,
        out: Vec<usize>,
    },
    Tile {
        shape: Vec<usize>,
        out: Vec<usize>,
    },
    Split {
        sizes: Vec<usize>,
    },
    /// `starts`, `ends` and the optional `axes`, `steps` (inputs 1 to 4)
    /// decide the kernel's first indices and steps.
    Slice {
        shape: Vec<usize>,
        out: Vec<usize>,
        axes: bool,
        steps: bool,
    },
    /// `pads` (input 1) and the optional `axes` (input 3, of `axes_elem`).
    Pad {
        shape: Vec<usize>,
        out: Vec<usize>,
        axes: Option<ElemType>,
    },
}

/// The output type the model fixes for output `k` (declared, or implied
/// downstream: [`NodeCx::expected_output`]), for a node whose shape-like
/// input `what` is data. `rank` is the output's rank when the op keeps it.
fn declared(
    cx: &NodeCx<'_>,
    k: usize,
    elem: ElemType,
    rank: Option<usize>,
    what: &str,
) -> OpResult<TensorType> {
    match cx.expected_output(k, elem, rank) {
        Some(t) => Ok(t),
        None => unsupported(format!(
            "{what} is known only at run time and the model does not declare the shape of output {k}"
        )),
    }
}

/// Whether optional input `i` is present and not known at generation time.
fn runtime_input(cx: &NodeCx<'_>, i: usize) -> bool {
    cx.opt_input(i).is_some() && cx.constant(i).is_none()
}

/// One data-movement call, with every parameter fixed at generation time.
#[derive(Clone, Debug, PartialEq)]
enum Op {
    /// Output 0 is input 0 unchanged.
    Alias,
    Transpose {
        shape: Vec<usize>,
        perm: Vec<usize>,
    },
    /// One call per input: input `k` goes to columns `at[k]..` of the output
    /// seen as `[outer, width]`.
    Concat {
        outer: usize,
        width: usize,
        at: Vec<usize>,
    },
    /// One call per output: output `j` takes columns `at[j]..` of the input
    /// seen as `[outer, width]`.
    Split {
        outer: usize,
        width: usize,
        at: Vec<usize>,
    },
    Slice {
        shape: Vec<usize>,
        starts: Vec<usize>,
        steps: Vec<isize>,
        out: Vec<usize>,
    },
    Gather {
        shape: AxisShape,
    },
    GatherElements {
        shape: Vec<usize>,
        index_shape: Vec<usize>,
        axis: usize,
    },
    Expand {
        out: Vec<usize>,
        strides: Vec<isize>,
    },
    Pad {
        shape: Vec<usize>,
        begin: Vec<isize>,
        end: Vec<isize>,
        mode: PadKind,
    },
    Tile {
        shape: Vec<usize>,
        repeats: Vec<usize>,
    },
    DepthToSpace {
        s: Nchw4,
        block: usize,
        crd: bool,
    },
    SpaceToDepth {
        s: Nchw4,
        block: usize,
        crd: bool,
    },
}

/// Pad's fill.
#[derive(Clone, Copy, Debug, PartialEq)]
enum PadKind {
    /// Zeros (no constant given).
    Zero,
    /// The one element of input 2 (`constant_value`), read when the call runs.
    Input,
    /// The `value` attribute (before opset 11).
    Attr(f64),
    Reflect,
    Edge,
    Wrap,
}

/// The element types the layout kernels serve.
fn check_elem(cx: &NodeCx<'_>, elem: ElemType) -> OpResult<()> {
    match elem {
        ElemType::Float
        | ElemType::Double
        | ElemType::Int8
        | ElemType::Int16
        | ElemType::Int32
        | ElemType::Int64
        | ElemType::Uint8
        | ElemType::Uint16
        | ElemType::Uint32
        | ElemType::Uint64
        | ElemType::Bool
        | ElemType::Float16
        | ElemType::Bfloat16 => Ok(()),
        other => unsupported(format!(
            "{} on {other} tensors: the runtime has no representation for {other} elements",
            cx.node.op.op_type
        )),
    }
}

/// Refuses ranks the strided kernels cannot walk.
fn check_rank(cx: &NodeCx<'_>, rank: usize, limit: usize) -> OpResult<()> {
    if rank > limit {
        return unsupported(format!(
            "{} on a rank-{rank} tensor (the runtime kernel handles rank {limit} at most)",
            cx.node.op.op_type
        ));
    }
    Ok(())
}

/// An output type, refusing element counts that overflow.
fn output(cx: &NodeCx<'_>, elem: ElemType, dims: Vec<usize>) -> OpResult<TensorType> {
    let t = TensorType::new(elem, dims);
    if t.byte_size().is_none() {
        return invalid(format!(
            "the output of {} would have dims {:?}, too large for this machine",
            cx.node.op.op_type, t.dims
        ));
    }
    Ok(t)
}

fn to_usize(v: i64, what: &str) -> OpResult<usize> {
    usize::try_from(v).or_else(|_| invalid(format!("{what} {v} is negative")))
}

fn to_isize(v: i64, what: &str) -> OpResult<isize> {
    isize::try_from(v).or_else(|_| invalid(format!("{what} {v} is too large for this machine")))
}

/// Distinct axes in `[-rank, rank)`, normalised.
fn distinct_axes(axes: &[i64], rank: usize, what: &str) -> OpResult<Vec<usize>> {
    let mut seen = vec![false; rank];
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = axis(a, rank, what)?;
        if seen[n] {
            return invalid(format!("{what} {a} is given twice"));
        }
        seen[n] = true;
        out.push(n);
    }
    Ok(out)
}

fn plan(cx: &NodeCx<'_>) -> OpResult<Planned> {
    let x = cx.input(0)?;
    check_elem(cx, x.elem)?;
    match cx.node.op.op_type.as_str() {
        "Transpose" => transpose(cx, x),
        "Concat" => concat(cx),
        "Split" => split(cx, x),
        "Slice" => slice(cx, x),
        "Gather" => gather(cx, x),
        "GatherElements" => gather_elements(cx, x),
        "Expand" => expand(cx, x),
        "Pad" => pad(cx, x),
        "Tile" => tile(cx, x),
        "DepthToSpace" | "SpaceToDepth" => depth_space(cx, x),
        other => unsupported(format!("{other} is not a data-movement operator")),
    }
}

fn single(t: TensorType, op: Op) -> OpResult<Planned> {
    Ok(Planned { outputs: vec![t], op, check: None })
}

impl OpRule for LayoutRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        Ok(plan(cx)?.outputs)
    }

    fn lower(&self, cx: &NodeCx<'_>, outputs: &[TensorType]) -> OpResult<Lowered> {
        let p = plan(cx)?;
        let elem = outputs.first().or(p.outputs.first()).map_or(ElemType::Float, |t| t.elem);
        Ok(match p.op {
            Op::Alias => Lowered::Alias,
            op => Lowered::Kernel(Box::new(LayoutKernel { op, elem, check: p.check })),
        })
    }
}

/// What the tests of every operator share.
#[cfg(test)]
mod testing {
    use crate::generate::{Analysis, Options, analyze};
    use crate::ir::TensorType;

    /// Analyses a one-graph model in the text syntax at `opset`. Untyped
    /// graph outputs get the element type of the first tensor declared (and
    /// no shape), so inference alone decides their dims.
    pub(super) fn run(opset: i64, graph: &str) -> Analysis {
        run_typed(opset, &type_outputs(graph))
    }

    /// Like [`run`], for graphs whose outputs are all typed already.
    pub(super) fn run_typed(opset: i64, graph: &str) -> Analysis {
        let src = format!("<ir_version: 8, opset_import: [\"\" : {opset}]>\n{graph}");
        let model = crate::text::parse_model(&src, "test.onnxtxt").expect("model parses");
        analyze(&model, &Options::default()).expect("model is valid")
    }

    pub(super) fn type_outputs(graph: &str) -> String {
        const TYPES: [&str; 8] =
            ["bool[", "float16[", "float[", "double[", "int8[", "int16[", "int32[", "int64["];
        let first = TYPES
            .iter()
            .filter_map(|t| graph.find(t).map(|at| (at, &t[..t.len() - 1])))
            .min()
            .map_or("float", |(_, t)| t);
        let (Some(start), Some(len)) =
            (graph.find("=> ("), graph.find("=> (").and_then(|s| graph[s..].find(')')))
        else {
            return graph.to_owned();
        };
        let names = &graph[start + 4..start + len];
        let typed: Vec<String> = names
            .split(',')
            .map(str::trim)
            .map(|n| if n.contains(' ') { n.to_owned() } else { format!("{first}[] {n}") })
            .collect();
        format!("{}=> ({}{}", &graph[..start], typed.join(", "), &graph[start + len..])
    }

    pub(super) fn value(a: &Analysis, name: &str) -> crate::ir::ValueId {
        a.model().graph.value_by_name(name).expect("value exists")
    }

    pub(super) fn ty(a: &Analysis, name: &str) -> TensorType {
        let v = value(a, name);
        match &a.inferred.types[v.index()] {
            Some(t) => t.clone(),
            None => panic!("no type for {name}: {:?}", problems(a)),
        }
    }

    pub(super) fn dims(a: &Analysis, name: &str) -> Vec<usize> {
        ty(a, name).dims
    }

    /// A value folded at generation time, as i64s (integer and bool tensors)
    /// or f64s (float tensors).
    pub(super) fn ints(a: &Analysis, name: &str) -> Vec<i64> {
        let v = value(a, name);
        let t = a.inferred.constants[v.index()].as_ref().expect("value is folded");
        t.to_i64s().expect("integer tensor")
    }

    pub(super) fn floats(a: &Analysis, name: &str) -> Vec<f64> {
        let v = value(a, name);
        let t = a.inferred.constants[v.index()].as_ref().expect("value is folded");
        t.to_f64s().expect("float tensor")
    }

    pub(super) fn problems(a: &Analysis) -> Vec<String> {
        let mut out: Vec<String> = a.inferred.errors.iter().map(|d| d.message.clone()).collect();
        out.extend(a.inferred.unsupported.iter().map(|u| format!("unsupported: {}", u.reason)));
        out
    }

    /// The one problem of an analysis, which must contain `part`.
    pub(super) fn fails_with(a: &Analysis, part: &str) {
        let p = problems(a);
        assert!(p.iter().any(|m| m.contains(part)), "expected a problem with '{part}', got {p:?}");
    }

    /// Kernel calls left to run (views cost nothing).
    pub(super) fn calls(a: &Analysis) -> usize {
        a.inferred
            .steps
            .iter()
            .filter(|s| matches!(s.lowered, crate::ops::Lowered::Kernel(_)))
            .count()
    }
}

#[cfg(test)]
mod tests {

    use crate::ops::layout::testing::{calls, dims, fails_with, problems, run_typed};

    #[test]
    fn shape_inputs_given_as_data_take_the_declared_shapes() {
        let one = |opset: i64, graph: &str, want: &[usize]| {
            let a = run_typed(opset, graph);
            assert_eq!(problems(&a), Vec::<String>::new(), "{graph}");
            assert_eq!(dims(&a, "y"), want, "{graph}");
            assert_eq!(calls(&a), 1, "{graph}");
        };
        one(
            13,
            "g (float[3,1] x, int64[3] s) => (float[2,3,4] y) { y = Expand (x, s) }",
            &[2, 3, 4],
        );
        one(13, "g (float[2,3] x, int64[2] r) => (float[4,3] y) { y = Tile (x, r) }", &[4, 3]);
        one(
            13,
            "g (float[5,4] x, int64[1] s, int64[1] e) => (float[2,4] y) { y = Slice (x, s, e) }",
            &[2, 4],
        );
        one(18, "g (float[3] x, int64[2] p) => (float[6] y) { y = Pad (x, p) }", &[6]);
        let a = run_typed(
            18,
            "g (float[6] x, int64[2] s) => (float[2] y, float[4] b) { y, b = Split (x, s) }",
        );
        assert_eq!(problems(&a), Vec::<String>::new());
        assert_eq!((dims(&a, "y"), dims(&a, "b")), (vec![2], vec![4]));
        // A declared shape the input cannot broadcast to (or tile into) is an error.
        let a =
            run_typed(13, "g (float[3,2] x, int64[3] s) => (float[2,3,4] y) { y = Expand (x, s) }");
        fails_with(&a, "do not broadcast");
        let a = run_typed(13, "g (float[2,3] x, int64[2] r) => (float[5,3] y) { y = Tile (x, r) }");
        fails_with(&a, "Tile output is declared as");
    }
}
