//! Image operators: `Resize` (opsets 10 to 19) and `Upsample` (7, 9).
//!
//! Scales, sizes and the region of interest may be known at generation time
//! or only at run time. In both cases the runtime kernel derives the output
//! shape from them and checks it against the planned one; when they are not
//! known here, the planned shape is the model's declared output type.
//! `Upsample` and opset-10 `Resize` are `Resize` with asymmetric coordinates
//! and, for nearest, the floor-when-upsampling rule they predate
//! `nearest_mode` with.

use super::host::HostElem;
use super::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, invalid, unsupported,
};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use onnx_codegen_runtime::image::{
    self as rt_image, AspectPolicy, CoordMode, GridElem, GridMode, GridPadding, GridSampleParams,
    NearestMode, ResizeMode, ResizeParams, Sample,
};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// The rule for `op_type`, if it is handled here.
pub fn rule(op_type: &str) -> Option<&'static dyn OpRule> {
    match op_type {
        "Resize" | "Upsample" => Some(&ResizeRule),
        "GridSample" => Some(&GridSampleRule),
        "CenterCropPad" => Some(&CropPadRule),
        "Col2Im" => Some(&Col2ImRule),
        "AffineGrid" => Some(&AffineGridRule),
        "RoiAlign" => Some(&RoiAlignRule),
        "DeformConv" => Some(&DeformConvRule),
        _ => None,
    }
}

/// The most `f64` scratch values a Resize may ask for (the tap tables).
const MAX_SCRATCH: usize = 1 << 26;

struct ResizeRule;

/// Where the scales come from.
#[derive(Clone, Debug)]
enum Scales {
    None,
    Input(usize),
    Attr(Vec<f32>),
}

/// A Resize node, read and checked.
#[derive(Clone, Debug)]
struct ResizeNode {
    elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    axes: Vec<usize>,
    taps_cap: Vec<usize>,
    mode: ResizeMode,
    coord: CoordMode,
    policy: AspectPolicy,
    cubic_a: f64,
    exclude_outside: bool,
    antialias: bool,
    extrapolation: f64,
    scales: Scales,
    sizes: Option<usize>,
    /// The roi input and its element type, read by `tf_crop_and_resize` only.
    roi: Option<(usize, ElemType)>,
}

impl ResizeNode {
    fn params(&self) -> ResizeParams<'_> {
        ResizeParams {
            input: &self.input,
            output: &self.output,
            axes: &self.axes,
            taps_cap: &self.taps_cap,
            mode: self.mode,
            coord: self.coord,
            policy: self.policy,
            cubic_a: self.cubic_a,
            exclude_outside: self.exclude_outside,
            antialias: self.antialias,
            extrapolation: self.extrapolation,
        }
    }
}

fn supported_elem(elem: ElemType) -> bool {
    super::is_num(elem) || matches!(elem, ElemType::Float16 | ElemType::Bfloat16)
}

fn read(cx: &NodeCx<'_>) -> OpResult<ResizeNode> {
    let op = cx.node.op.op_type.as_str();
    let v = cx.version();
    let x = cx.input(0)?;
    if !supported_elem(x.elem) {
        return unsupported(format!("{op} on {} tensors", x.elem));
    }
    let rank = x.dims.len();
    let legacy = op == "Upsample" || v < 11;
    let mode_name = cx.string_or("mode", "nearest");
    let mode = match mode_name.as_str() {
        "nearest" => {
            let nm = if legacy {
                NearestMode::Legacy
            } else {
                match cx.string_or("nearest_mode", "round_prefer_floor").as_str() {
                    "round_prefer_floor" => NearestMode::RoundPreferFloor,
                    "round_prefer_ceil" => NearestMode::RoundPreferCeil,
                    "floor" => NearestMode::Floor,
                    "ceil" => NearestMode::Ceil,
                    other => return invalid(format!("{op}: unknown nearest_mode '{other}'")),
                }
            };
            ResizeMode::Nearest(nm)
        }
        "linear" | "bilinear" if legacy || mode_name == "linear" => ResizeMode::Linear,
        "cubic" if !legacy => ResizeMode::Cubic,
        other => return invalid(format!("{op}: unknown mode '{other}'")),
    };
    let coord = if legacy {
        CoordMode::Asymmetric
    } else {
        match cx.string_or("coordinate_transformation_mode", "half_pixel").as_str() {
            "half_pixel" => CoordMode::HalfPixel,
            "half_pixel_symmetric" => CoordMode::HalfPixelSymmetric,
            "pytorch_half_pixel" => CoordMode::PytorchHalfPixel,
            "align_corners" => CoordMode::AlignCorners,
            "asymmetric" => CoordMode::Asymmetric,
            "tf_half_pixel_for_nn" => CoordMode::TfHalfPixelForNn,
            "tf_crop_and_resize" => CoordMode::TfCropAndResize,
            other => {
                return invalid(format!("{op}: unknown coordinate_transformation_mode '{other}'"));
            }
        }
    };
    let policy = match cx.string_or("keep_aspect_ratio_policy", "stretch").as_str() {
        "stretch" => AspectPolicy::Stretch,
        "not_larger" => AspectPolicy::NotLarger,
        "not_smaller" => AspectPolicy::NotSmaller,
        other => return invalid(format!("{op}: unknown keep_aspect_ratio_policy '{other}'")),
    };
    let axes = match cx.ints("axes").filter(|a| !a.is_empty() && v >= 18) {
        Some(list) => {
            let mut out = Vec::with_capacity(list.len());
            for a in list {
                let a = axis(a, rank, "axes entry")?;
                if out.contains(&a) {
                    return invalid(format!("{op}: axis {a} appears twice in 'axes'"));
                }
                out.push(a);
            }
            out
        }
        None => (0..rank).collect(),
    };

    // Inputs: Upsample-7 has a scales attribute; Upsample-9 and Resize-10
    // (X, scales); Resize-11+ (X, roi, scales, sizes).
    let present = |i: usize| cx.opt_input(i).is_some_and(|t| t.numel() != Some(0));
    let (scales, sizes, roi_at) = if op == "Upsample" && v < 9 {
        let Some(s) = cx.node.attr("scales").and_then(|a| match a {
            crate::ir::AttrValue::Floats(f) => Some(f.clone()),
            _ => None,
        }) else {
            return invalid("Upsample: attribute 'scales' is required");
        };
        (Scales::Attr(s), None, None)
    } else if legacy {
        (Scales::Input(1), None, None)
    } else if present(2) {
        if present(3) {
            return invalid(format!("{op}: only one of 'scales' and 'sizes' may be given"));
        }
        (Scales::Input(2), None, Some(1))
    } else if present(3) {
        (Scales::None, Some(3), Some(1))
    } else {
        return invalid(format!("{op}: one of 'scales' and 'sizes' must be given"));
    };
    if let Scales::Input(i) = scales {
        let t = cx.input(i)?;
        if t.elem != ElemType::Float {
            return invalid(format!("{op}: scales must be float, not {}", t.elem));
        }
    }
    if let Some(i) = sizes
        && cx.input(i)?.elem != ElemType::Int64
    {
        return invalid(format!("{op}: sizes must be int64"));
    }
    let roi = match (coord, roi_at) {
        (CoordMode::TfCropAndResize, Some(i)) if present(i) => {
            let e = cx.input(i)?.elem;
            if !matches!(e, ElemType::Float | ElemType::Double) {
                return unsupported(format!("{op}: a {e} roi"));
            }
            Some((i, e))
        }
        (CoordMode::TfCropAndResize, _) => {
            return invalid(format!("{op}: tf_crop_and_resize needs the 'roi' input"));
        }
        _ => None,
    };

    let mut node = ResizeNode {
        elem: x.elem,
        input: x.dims.clone(),
        output: x.dims.clone(),
        axes,
        taps_cap: vec![1; rank],
        mode,
        coord,
        policy,
        cubic_a: f64::from(cx.float_or("cubic_coeff_a", -0.75)),
        exclude_outside: cx.int_or("exclude_outside", 0) != 0,
        antialias: cx.int_or("antialias", 0) != 0 && !matches!(mode, ResizeMode::Nearest(_)),
        extrapolation: f64::from(cx.float_or("extrapolation_value", 0.0)),
        scales,
        sizes,
        roi,
    };

    // The scales or sizes when known now.
    let known_scales: Option<Vec<f32>> = match &node.scales {
        Scales::Attr(s) => Some(s.clone()),
        Scales::Input(i) => match cx.constant(*i) {
            Some(t) => Some(
                t.to_f64s()
                    .ok_or_else(|| OpError::Invalid(format!("{op}: scales are not floats")))?
                    .into_iter()
                    .map(|f| f as f32)
                    .collect(),
            ),
            None => None,
        },
        Scales::None => None,
    };
    let known_sizes = match node.sizes {
        Some(i) if cx.constant(i).is_some() => Some(cx.const_ints(i, "sizes")?),
        _ => None,
    };
    let n_axes = node.axes.len();
    if let Some(s) = &known_scales
        && s.len() != n_axes
    {
        return invalid(format!("{op}: {} scales for {n_axes} axes", s.len()));
    }
    if let Some(s) = &known_sizes
        && s.len() != n_axes
    {
        return invalid(format!("{op}: {} sizes for {n_axes} axes", s.len()));
    }
    let mut known_scale = vec![None; rank];
    if known_scales.is_some() || known_sizes.is_some() {
        let p = node.params();
        let mut out = Vec::with_capacity(rank);
        for (a, slot) in known_scale.iter_mut().enumerate() {
            let (s, o) =
                rt_image::resize_axis(&p, known_scales.as_deref(), known_sizes.as_deref(), a)
                    .map_err(|e| {
                        OpError::Invalid(format!(
                            "{op}: the scales or sizes do not give a valid size for axis {a} ({e})"
                        ))
                    })?;
            *slot = Some(s);
            out.push(o);
        }
        node.output = out;
    } else {
        let Some(d) = cx.declared_output(0) else {
            return unsupported(format!(
                "{op}: the scales or sizes are known only at run time and the model declares no output shape"
            ));
        };
        if d.dims.len() != rank {
            return invalid(format!(
                "{op}: the declared output has rank {}, the input rank {rank}",
                d.dims.len()
            ));
        }
        node.output = d.dims.clone();
    }

    for &a in &node.axes {
        let (i, o) = (node.input[a], node.output[a]);
        if i == 0 && o != 0 {
            return invalid(format!("{op}: axis {a} is empty and cannot be resized to {o}"));
        }
        let scale = match known_scale[a] {
            Some(s) => s,
            // The smallest scale that rounds to this output length.
            None => (o as f64 - 0.5).max(0.5) / i.max(1) as f64,
        };
        node.taps_cap[a] = if o == 0 {
            1
        } else {
            rt_image::resize_taps(node.mode, node.antialias, scale)
                .ok_or_else(|| OpError::Invalid(format!("{op}: scale {scale} is not positive")))?
        };
    }
    match rt_image::resize_scratch_len(&node.output, &node.taps_cap) {
        Some(n) if n <= MAX_SCRATCH => {}
        _ => return unsupported(format!("{op}: the interpolation tables would be too large")),
    }
    Ok(node)
}

impl OpRule for ResizeRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(ResizeKernel(read(cx)?))))
    }
}

struct ResizeKernel(ResizeNode);

fn host<'a, T: HostElem>(inputs: &[Option<&'a HostTensor>], i: Option<usize>) -> Option<&'a [T]> {
    inputs.get(i?).copied().flatten().and_then(|t| t.get::<T>())
}

fn run<T: Sample + HostElem>(
    k: &ResizeKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let n = &k.0;
    let scales: Option<&[f32]> = match &n.scales {
        Scales::Attr(s) => Some(s),
        Scales::Input(i) => host::<f32>(inputs, Some(*i)),
        Scales::None => None,
    };
    let sizes = host::<i64>(inputs, n.sizes);
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let (first, rest) = outputs.split_first_mut().ok_or(EvalError::Type(n.elem))?;
    let y = first.get_mut::<T>().ok_or(EvalError::Type(n.elem))?;
    let scratch = rest
        .first_mut()
        .and_then(|t| t.get_mut::<f64>())
        .ok_or(EvalError::Type(ElemType::Double))?;
    let p = n.params();
    match n.roi {
        Some((i, ElemType::Double)) => {
            let roi = host::<f64>(inputs, Some(i));
            rt_image::resize(&p, x, roi, scales, sizes, y, scratch)?
        }
        Some((i, _)) => {
            let roi = host::<f32>(inputs, Some(i));
            rt_image::resize(&p, x, roi, scales, sizes, y, scratch)?
        }
        None => rt_image::resize::<T, f32>(&p, x, None, scales, sizes, y, scratch)?,
    }
    Ok(())
}

impl Kernel for ResizeKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        match self.0.elem {
            ElemType::Float => run::<f32>(self, inputs, outputs),
            ElemType::Double => run::<f64>(self, inputs, outputs),
            ElemType::Float16 => run::<f16>(self, inputs, outputs),
            ElemType::Bfloat16 => run::<bf16>(self, inputs, outputs),
            ElemType::Int8 => run::<i8>(self, inputs, outputs),
            ElemType::Int16 => run::<i16>(self, inputs, outputs),
            ElemType::Int32 => run::<i32>(self, inputs, outputs),
            ElemType::Int64 => run::<i64>(self, inputs, outputs),
            ElemType::Uint8 => run::<u8>(self, inputs, outputs),
            ElemType::Uint16 => run::<u16>(self, inputs, outputs),
            ElemType::Uint32 => run::<u32>(self, inputs, outputs),
            ElemType::Uint64 => run::<u64>(self, inputs, outputs),
            other => Err(EvalError::Type(other)),
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let m = quote!(#rt::image);
        let mode = match n.mode {
            ResizeMode::Nearest(nm) => {
                let nm = match nm {
                    NearestMode::RoundPreferFloor => quote!(RoundPreferFloor),
                    NearestMode::RoundPreferCeil => quote!(RoundPreferCeil),
                    NearestMode::Floor => quote!(Floor),
                    NearestMode::Ceil => quote!(Ceil),
                    NearestMode::Legacy => quote!(Legacy),
                };
                quote!(#m::ResizeMode::Nearest(#m::NearestMode::#nm))
            }
            ResizeMode::Linear => quote!(#m::ResizeMode::Linear),
            ResizeMode::Cubic => quote!(#m::ResizeMode::Cubic),
        };
        let coord = match n.coord {
            CoordMode::HalfPixel => quote!(HalfPixel),
            CoordMode::HalfPixelSymmetric => quote!(HalfPixelSymmetric),
            CoordMode::PytorchHalfPixel => quote!(PytorchHalfPixel),
            CoordMode::AlignCorners => quote!(AlignCorners),
            CoordMode::Asymmetric => quote!(Asymmetric),
            CoordMode::TfHalfPixelForNn => quote!(TfHalfPixelForNn),
            CoordMode::TfCropAndResize => quote!(TfCropAndResize),
        };
        let policy = match n.policy {
            AspectPolicy::Stretch => quote!(Stretch),
            AspectPolicy::NotLarger => quote!(NotLarger),
            AspectPolicy::NotSmaller => quote!(NotSmaller),
        };
        let (input, output, axes, caps) = (
            lit::usizes(&n.input),
            lit::usizes(&n.output),
            lit::usizes(&n.axes),
            lit::usizes(&n.taps_cap),
        );
        let (a, ext) = (lit::f64_lit(n.cubic_a), lit::f64_lit(n.extrapolation));
        let (exclude, antialias) = (n.exclude_outside, n.antialias);
        let input_at = |i: usize| io.inputs.get(i).cloned().flatten();
        let scales = match &n.scales {
            Scales::Attr(s) => {
                let s = s.iter().map(|&f| lit::f32_lit(f));
                quote!(Some(&[#(#s),*]))
            }
            Scales::Input(i) => match input_at(*i) {
                Some(e) => quote!(Some(#e)),
                None => quote!(None),
            },
            Scales::None => quote!(None),
        };
        let sizes = match n.sizes.and_then(input_at) {
            Some(e) => quote!(Some(#e)),
            None => quote!(None),
        };
        let roi = match n.roi {
            Some((i, e)) => {
                let t = if e == ElemType::Double { quote!(f64) } else { quote!(f32) };
                match input_at(i) {
                    Some(r) => quote!(Some::<&[#t]>(#r)),
                    None => quote!(None::<&[#t]>),
                }
            }
            None => quote!(None::<&[f32]>),
        };
        let (x, y) = (&io.inputs[0], &io.outputs[0]);
        let scratch = io.scratch.clone().unwrap_or_else(|| quote!(&mut []));
        quote! {
            #m::resize(
                &#m::ResizeParams {
                    input: #input,
                    output: #output,
                    axes: #axes,
                    taps_cap: #caps,
                    mode: #mode,
                    coord: #m::CoordMode::#coord,
                    policy: #m::AspectPolicy::#policy,
                    cubic_a: #a,
                    exclude_outside: #exclude,
                    antialias: #antialias,
                    extrapolation: #ext,
                },
                #x, #roi, #scales, #sizes, #y, #scratch,
            )?;
        }
    }

    fn reads_input(&self, i: usize) -> bool {
        let n = &self.0;
        i == 0
            || matches!(n.scales, Scales::Input(j) if j == i)
            || n.sizes == Some(i)
            || n.roi.is_some_and(|(j, _)| j == i)
    }

    fn scratch(&self) -> Option<TensorType> {
        let len = rt_image::resize_scratch_len(&self.0.output, &self.0.taps_cap)?;
        Some(TensorType::new(ElemType::Double, vec![len.max(1)]))
    }
}

/// Runs `$f::<T>(args)` for every element type the image kernels take.
macro_rules! by_sample_type {
    ($elem:expr, $f:ident ( $($arg:expr),* $(,)? )) => {
        match $elem {
            ElemType::Float => $f::<f32>($($arg),*),
            ElemType::Double => $f::<f64>($($arg),*),
            ElemType::Float16 => $f::<f16>($($arg),*),
            ElemType::Bfloat16 => $f::<bf16>($($arg),*),
            ElemType::Int8 => $f::<i8>($($arg),*),
            ElemType::Int16 => $f::<i16>($($arg),*),
            ElemType::Int32 => $f::<i32>($($arg),*),
            ElemType::Int64 => $f::<i64>($($arg),*),
            ElemType::Uint8 => $f::<u8>($($arg),*),
            ElemType::Uint16 => $f::<u16>($($arg),*),
            ElemType::Uint32 => $f::<u32>($($arg),*),
            ElemType::Uint64 => $f::<u64>($($arg),*),
            other => Err(EvalError::Type(other)),
        }
    };
}

struct GridSampleRule;

/// A GridSample node, read and checked.
struct GridNode {
    elem: ElemType,
    grid_elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    mode: GridMode,
    padding: GridPadding,
    align_corners: bool,
}

fn read_grid(cx: &NodeCx<'_>) -> OpResult<GridNode> {
    let v = cx.version();
    let (x, g) = (cx.input(0)?, cx.input(1)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("GridSample on {} tensors", x.elem));
    }
    if !matches!(g.elem, ElemType::Float | ElemType::Double) {
        return unsupported(format!("GridSample with a {} grid", g.elem));
    }
    let rank = x.dims.len();
    if rank < 3 || (v < 20 && rank != 4) {
        return invalid(format!("GridSample-{v}: the input has rank {rank}"));
    }
    let r = rank - 2;
    if g.dims.len() != rank || g.dims[0] != x.dims[0] || g.dims[rank - 1] != r {
        return invalid(format!(
            "GridSample: the grid has shape {:?}; expected [{}, ..., {r}] of rank {rank}",
            g.dims, x.dims[0]
        ));
    }
    let mode = match cx.string_or("mode", if v < 20 { "bilinear" } else { "linear" }).as_str() {
        "bilinear" if v < 20 => GridMode::Linear,
        "bicubic" if v < 20 => GridMode::Cubic,
        "linear" if v >= 20 => GridMode::Linear,
        "cubic" if v >= 20 => GridMode::Cubic,
        "nearest" => GridMode::Nearest,
        other => return invalid(format!("GridSample-{v}: unknown mode '{other}'")),
    };
    if mode == GridMode::Cubic && r != 2 {
        return invalid("GridSample: cubic mode takes 4-D inputs only");
    }
    let padding = match cx.string_or("padding_mode", "zeros").as_str() {
        "zeros" => GridPadding::Zeros,
        "border" => GridPadding::Border,
        "reflection" => GridPadding::Reflection,
        other => return invalid(format!("GridSample: unknown padding_mode '{other}'")),
    };
    let mut output = x.dims[..2].to_vec();
    output.extend_from_slice(&g.dims[1..rank - 1]);
    Ok(GridNode {
        elem: x.elem,
        grid_elem: g.elem,
        input: x.dims.clone(),
        output,
        mode,
        padding,
        align_corners: cx.int_or("align_corners", 0) != 0,
    })
}

impl OpRule for GridSampleRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_grid(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(GridKernel(read_grid(cx)?))))
    }
}

struct GridKernel(GridNode);

fn run_grid_with<T: Sample + HostElem, G: GridElem + HostElem>(
    n: &GridNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let g = host::<G>(inputs, Some(1)).ok_or(EvalError::Type(n.grid_elem))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    let p = GridSampleParams {
        input: &n.input,
        output: &n.output,
        mode: n.mode,
        padding: n.padding,
        align_corners: n.align_corners,
    };
    rt_image::grid_sample(&p, x, g, y)?;
    Ok(())
}

fn run_grid<T: Sample + HostElem>(
    n: &GridNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    match n.grid_elem {
        ElemType::Double => run_grid_with::<T, f64>(n, inputs, outputs),
        _ => run_grid_with::<T, f32>(n, inputs, outputs),
    }
}

impl Kernel for GridKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_grid(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let m = quote!(#rt::image);
        let mode = match n.mode {
            GridMode::Nearest => quote!(Nearest),
            GridMode::Linear => quote!(Linear),
            GridMode::Cubic => quote!(Cubic),
        };
        let padding = match n.padding {
            GridPadding::Zeros => quote!(Zeros),
            GridPadding::Border => quote!(Border),
            GridPadding::Reflection => quote!(Reflection),
        };
        let (input, output, align) =
            (lit::usizes(&n.input), lit::usizes(&n.output), n.align_corners);
        let (x, g, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote! {
            #m::grid_sample(
                &#m::GridSampleParams {
                    input: #input,
                    output: #output,
                    mode: #m::GridMode::#mode,
                    padding: #m::GridPadding::#padding,
                    align_corners: #align,
                },
                #x, #g, #y,
            )?;
        }
    }
}

/// The output type when it follows from integer input `i` (`compute` turns
/// its values into dims) or, when those are known only at run time, the
/// declared output, checked by `check`.
fn shape_from(
    cx: &NodeCx<'_>,
    i: usize,
    what: &str,
    compute: impl Fn(&[i64]) -> OpResult<Vec<usize>>,
) -> OpResult<Vec<usize>> {
    if cx.constant(i).is_some() {
        return compute(&cx.const_ints(i, what)?);
    }
    declared(cx, what)
}

/// The declared type of output 0, for a shape that depends on `what`, whose
/// values are known only at run time.
fn declared(cx: &NodeCx<'_>, what: &str) -> OpResult<Vec<usize>> {
    let op = &cx.node.op.op_type;
    match cx.declared_output(0) {
        Some(d) => Ok(d.dims.clone()),
        None => unsupported(format!(
            "{op}: {what} is known only at run time and the model declares no output shape"
        )),
    }
}

fn dim(v: i64, what: &str) -> OpResult<usize> {
    usize::try_from(v).map_err(|_| OpError::Invalid(format!("{what} {v} is negative")))
}

struct CropPadRule;

struct CropPadNode {
    elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    axes: Vec<usize>,
    index_elem: ElemType,
}

fn read_crop_pad(cx: &NodeCx<'_>) -> OpResult<CropPadNode> {
    let (x, shape) = (cx.input(0)?, cx.input(1)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("CenterCropPad on {} tensors", x.elem));
    }
    if !matches!(shape.elem, ElemType::Int32 | ElemType::Int64) {
        return invalid("CenterCropPad: shape must be int32 or int64");
    }
    let rank = x.dims.len();
    let mut axes = Vec::new();
    for a in cx.ints("axes").unwrap_or_else(|| (0..rank as i64).collect()) {
        let a = axis(a, rank, "CenterCropPad axis")?;
        if axes.contains(&a) {
            return invalid(format!("CenterCropPad: axis {a} appears twice"));
        }
        axes.push(a);
    }
    if shape.dims.len() != 1 || shape.dims[0] != axes.len() {
        return invalid(format!(
            "CenterCropPad: shape has shape {:?}; expected [{}] (one length per axis)",
            shape.dims,
            axes.len()
        ));
    }
    let output = shape_from(cx, 1, "shape", |v| {
        let mut out = x.dims.clone();
        for (&a, &n) in axes.iter().zip(v) {
            out[a] = dim(n, "CenterCropPad length")?;
        }
        Ok(out)
    })?;
    let fits =
        output.len() == rank && (0..rank).all(|d| axes.contains(&d) || output[d] == x.dims[d]);
    if !fits {
        return invalid(format!(
            "CenterCropPad: output shape {output:?} does not fit input shape {:?}",
            x.dims
        ));
    }
    Ok(CropPadNode { elem: x.elem, input: x.dims.clone(), output, axes, index_elem: shape.elem })
}

impl OpRule for CropPadRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_crop_pad(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(CropPadKernel(read_crop_pad(cx)?))))
    }
}

struct CropPadKernel(CropPadNode);

fn run_crop_pad<T: Copy + Default + HostElem>(
    n: &CropPadNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    match n.index_elem {
        ElemType::Int32 => {
            let s = host::<i32>(inputs, Some(1)).ok_or(EvalError::Type(n.index_elem))?;
            rt_image::center_crop_pad(&n.input, &n.output, &n.axes, s, x, y)?
        }
        _ => {
            let s = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(n.index_elem))?;
            rt_image::center_crop_pad(&n.input, &n.output, &n.axes, s, x, y)?
        }
    }
    Ok(())
}

impl Kernel for CropPadKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_crop_pad(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let (input, output, axes) =
            (lit::usizes(&n.input), lit::usizes(&n.output), lit::usizes(&n.axes));
        let (x, s, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::image::center_crop_pad(#input, #output, #axes, #s, #x, #y)?;)
    }
}

struct Col2ImRule;

struct Col2ImNode {
    elem: ElemType,
    input: Vec<usize>,
    output: Vec<usize>,
    dilations: Vec<usize>,
    strides: Vec<usize>,
    pads: Vec<usize>,
}

fn read_col2im(cx: &NodeCx<'_>) -> OpResult<Col2ImNode> {
    let (x, image, block) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !supported_elem(x.elem) {
        return unsupported(format!("Col2Im on {} tensors", x.elem));
    }
    if x.dims.len() != 3 {
        return invalid(format!("Col2Im: the input has shape {:?}; expected rank 3", x.dims));
    }
    if image.elem != ElemType::Int64 || block.elem != ElemType::Int64 {
        return invalid("Col2Im: image_shape and block_shape must be int64");
    }
    let r = match (image.dims.as_slice(), block.dims.as_slice()) {
        ([a], [b]) if a == b && *a > 0 => *a,
        _ => {
            return invalid(format!(
                "Col2Im: image_shape {:?} and block_shape {:?} must be 1-D of one length",
                image.dims, block.dims
            ));
        }
    };
    let list = |name: &str, len: usize, default: usize| -> OpResult<Vec<usize>> {
        match cx.ints(name) {
            Some(v) if v.len() == len => v.iter().map(|&e| dim(e, name)).collect(),
            Some(v) => invalid(format!("Col2Im: {name} has {} values; expected {len}", v.len())),
            None => Ok(vec![default; len]),
        }
    };
    let dilations = list("dilations", r, 1)?;
    let strides = list("strides", r, 1)?;
    let pads = list("pads", 2 * r, 0)?;
    if dilations.contains(&0) || strides.contains(&0) {
        return invalid("Col2Im: dilations and strides must be positive");
    }
    let output = match (cx.constant(1), cx.constant(2)) {
        (Some(_), Some(_)) => {
            let image = cx.const_ints(1, "image_shape")?;
            let block = cx.const_ints(2, "block_shape")?;
            let mut k = 1usize;
            for &b in &block {
                k = k.saturating_mul(dim(b, "block_shape entry")?);
            }
            if k == 0 || x.dims[1] % k != 0 {
                return invalid(format!(
                    "Col2Im: input dimension 1 ({}) is not a multiple of the block size {k}",
                    x.dims[1]
                ));
            }
            let mut out = vec![x.dims[0], x.dims[1] / k];
            for &i in &image {
                out.push(dim(i, "image_shape entry")?);
            }
            out
        }
        _ => declared(cx, "image_shape or block_shape")?,
    };
    if output.len() != r + 2 || output[0] != x.dims[0] {
        return invalid(format!("Col2Im: output shape {output:?} does not fit the input"));
    }
    Ok(Col2ImNode { elem: x.elem, input: x.dims.clone(), output, dilations, strides, pads })
}

impl OpRule for Col2ImRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_col2im(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(Col2ImKernel(read_col2im(cx)?))))
    }
}

struct Col2ImKernel(Col2ImNode);

fn run_col2im<T: Sample + HostElem>(
    n: &Col2ImNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let image = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(ElemType::Int64))?;
    let block = host::<i64>(inputs, Some(2)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::col2im(&n.input, &n.output, image, block, &n.dilations, &n.strides, &n.pads, x, y)?;
    Ok(())
}

impl Kernel for Col2ImKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_col2im(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let n = &self.0;
        let (input, output) = (lit::usizes(&n.input), lit::usizes(&n.output));
        let (d, s, p) = (lit::usizes(&n.dilations), lit::usizes(&n.strides), lit::usizes(&n.pads));
        let (x, image, block, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote!(#rt::image::col2im(#input, #output, #image, #block, #d, #s, #p, #x, #y)?;)
    }
}

struct AffineGridRule;

struct AffineNode {
    elem: ElemType,
    output: Vec<usize>,
    align_corners: bool,
}

fn read_affine(cx: &NodeCx<'_>) -> OpResult<AffineNode> {
    let (theta, size) = (cx.input(0)?, cx.input(1)?);
    if !matches!(
        theta.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("AffineGrid: theta must be a float tensor, not {}", theta.elem));
    }
    let r = match theta.dims.as_slice() {
        [_, 2, 3] => 2,
        [_, 3, 4] => 3,
        d => {
            return invalid(format!(
                "AffineGrid: theta has shape {d:?}; expected [N, 2, 3] or [N, 3, 4]"
            ));
        }
    };
    if size.elem != ElemType::Int64 || size.dims != [r + 2] {
        return invalid(format!("AffineGrid: size must be an int64 tensor of shape [{}]", r + 2));
    }
    let output = shape_from(cx, 1, "size", |v| {
        let mut out = vec![dim(v[0], "AffineGrid batch")?];
        for &d in &v[2..] {
            out.push(dim(d, "AffineGrid size")?);
        }
        out.push(r);
        Ok(out)
    })?;
    if output.len() != r + 2 || output[0] != theta.dims[0] || output[r + 1] != r {
        return invalid(format!(
            "AffineGrid: output shape {output:?} does not fit theta {:?}",
            theta.dims
        ));
    }
    Ok(AffineNode { elem: theta.elem, output, align_corners: cx.int_or("align_corners", 0) != 0 })
}

impl OpRule for AffineGridRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_affine(cx)?;
        Ok(vec![TensorType::new(n.elem, n.output)])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(AffineKernel(read_affine(cx)?))))
    }
}

struct AffineKernel(AffineNode);

fn run_affine<T: Sample + HostElem>(
    n: &AffineNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let theta = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let size = host::<i64>(inputs, Some(1)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::affine_grid(&n.output, n.align_corners, theta, size, y)?;
    Ok(())
}

impl Kernel for AffineKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_affine(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let (output, align) = (lit::usizes(&self.0.output), self.0.align_corners);
        let (theta, size, y) = (&io.inputs[0], &io.inputs[1], &io.outputs[0]);
        quote!(#rt::image::affine_grid(#output, #align, #theta, #size, #y)?;)
    }
}

struct RoiAlignRule;

struct RoiNode {
    elem: ElemType,
    params: rt_image::RoiAlignParams,
}

fn read_roi_align(cx: &NodeCx<'_>) -> OpResult<RoiNode> {
    let (x, rois, idx) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("RoiAlign: X must be a float tensor, not {}", x.elem));
    }
    let input: [usize; 4] = x.dims.as_slice().try_into().map_err(|_| {
        OpError::Invalid(format!("RoiAlign: X has shape {:?}; expected rank 4", x.dims))
    })?;
    let n = match (rois.dims.as_slice(), idx.dims.as_slice()) {
        ([n, 4], [m]) if n == m => *n,
        _ => {
            return invalid(format!(
                "RoiAlign: rois {:?} and batch_indices {:?} must be [R, 4] and [R]",
                rois.dims, idx.dims
            ));
        }
    };
    if rois.elem != x.elem || idx.elem != ElemType::Int64 {
        return invalid("RoiAlign: rois must have X's type and batch_indices must be int64");
    }
    let positive = |name: &str| -> OpResult<usize> {
        match cx.int_or(name, 1) {
            v if v > 0 => Ok(v as usize),
            v => invalid(format!("RoiAlign: {name} {v} must be positive")),
        }
    };
    let (oh, ow) = (positive("output_height")?, positive("output_width")?);
    let sampling = cx.int_or("sampling_ratio", 0);
    if sampling < 0 {
        return invalid(format!("RoiAlign: sampling_ratio {sampling} is negative"));
    }
    let max = match cx.string_or("mode", "avg").as_str() {
        "avg" => false,
        "max" => true,
        other => return invalid(format!("RoiAlign: unknown mode '{other}'")),
    };
    let default_coord = if cx.version() < 16 { "output_half_pixel" } else { "half_pixel" };
    let half_pixel = match cx.string_or("coordinate_transformation_mode", default_coord).as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return invalid(format!("RoiAlign: unknown coordinate_transformation_mode '{other}'"));
        }
    };
    Ok(RoiNode {
        elem: x.elem,
        params: rt_image::RoiAlignParams {
            input,
            output: [n, input[1], oh, ow],
            max,
            half_pixel,
            sampling_ratio: sampling as usize,
            spatial_scale: f64::from(cx.float_or("spatial_scale", 1.0)),
        },
    })
}

impl OpRule for RoiAlignRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_roi_align(cx)?;
        Ok(vec![TensorType::new(n.elem, n.params.output.to_vec())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(RoiKernel(read_roi_align(cx)?))))
    }
}

struct RoiKernel(RoiNode);

fn run_roi<T: Sample + HostElem>(
    n: &RoiNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let x = host::<T>(inputs, Some(0)).ok_or(EvalError::Type(n.elem))?;
    let rois = host::<T>(inputs, Some(1)).ok_or(EvalError::Type(n.elem))?;
    let idx = host::<i64>(inputs, Some(2)).ok_or(EvalError::Type(ElemType::Int64))?;
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::roi_align(&n.params, x, rois, idx, y)?;
    Ok(())
}

impl Kernel for RoiKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_roi(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0.params;
        let arr = |v: &[usize; 4]| {
            let items = v.iter().map(|&d| lit::usize_lit(d));
            quote!([#(#items),*])
        };
        let (input, output) = (arr(&p.input), arr(&p.output));
        let (max, half, sr) = (p.max, p.half_pixel, lit::usize_lit(p.sampling_ratio));
        let scale = lit::f64_lit(p.spatial_scale);
        let (x, rois, idx, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote! {
            #rt::image::roi_align(
                &#rt::image::RoiAlignParams {
                    input: #input,
                    output: #output,
                    max: #max,
                    half_pixel: #half,
                    sampling_ratio: #sr,
                    spatial_scale: #scale,
                },
                #x, #rois, #idx, #y,
            )?;
        }
    }
}

struct DeformConvRule;

struct DeformNode {
    elem: ElemType,
    params: rt_image::DeformConvParams,
    has_bias: bool,
    has_mask: bool,
}

fn read_deform(cx: &NodeCx<'_>) -> OpResult<DeformNode> {
    let (x, w, off) = (cx.input(0)?, cx.input(1)?, cx.input(2)?);
    if !matches!(
        x.elem,
        ElemType::Float | ElemType::Double | ElemType::Float16 | ElemType::Bfloat16
    ) {
        return invalid(format!("DeformConv: X must be a float tensor, not {}", x.elem));
    }
    if x.dims.len() != 4 {
        return unsupported(format!(
            "DeformConv on a rank-{} input (only 2-D images)",
            x.dims.len()
        ));
    }
    let four = |t: &TensorType, name: &str| -> OpResult<[usize; 4]> {
        if t.elem != x.elem {
            return invalid(format!("DeformConv: {name} must have X's type {}", x.elem));
        }
        t.dims.as_slice().try_into().map_err(|_| {
            OpError::Invalid(format!("DeformConv: {name} has shape {:?}; expected rank 4", t.dims))
        })
    };
    let input = four(x, "X")?;
    let weight = four(w, "W")?;
    let offset = four(off, "offset")?;
    let pair = |name: &str, default: usize| -> OpResult<[usize; 2]> {
        match cx.ints(name) {
            Some(v) => match v.as_slice() {
                [a, b] => Ok([dim(*a, name)?, dim(*b, name)?]),
                _ => invalid(format!("DeformConv: {name} must have 2 values")),
            },
            None => Ok([default; 2]),
        }
    };
    let strides = pair("strides", 1)?;
    let dilations = pair("dilations", 1)?;
    let kernel = match cx.ints("kernel_shape") {
        Some(_) => pair("kernel_shape", 1)?,
        None => [weight[2], weight[3]],
    };
    if kernel != [weight[2], weight[3]] {
        return invalid(format!("DeformConv: kernel_shape {kernel:?} does not match W {weight:?}"));
    }
    let pads: [usize; 4] = match cx.ints("pads") {
        Some(v) if v.len() == 4 => {
            [dim(v[0], "pads")?, dim(v[1], "pads")?, dim(v[2], "pads")?, dim(v[3], "pads")?]
        }
        Some(_) => return invalid("DeformConv: pads must have 4 values"),
        None => [0; 4],
    };
    if strides.contains(&0) || dilations.contains(&0) || kernel.contains(&0) {
        return invalid("DeformConv: strides, dilations and kernel_shape must be positive");
    }
    let group = cx.int_or("group", 1);
    let offset_group = cx.int_or("offset_group", 1);
    if group < 1 || offset_group < 1 {
        return invalid("DeformConv: group and offset_group must be positive");
    }
    let (group, offset_group) = (group as usize, offset_group as usize);
    let [n, c, h, wd] = input;
    if weight[1].checked_mul(group) != Some(c) || weight[0] % group != 0 || c % offset_group != 0 {
        return invalid(format!(
            "DeformConv: X {input:?}, W {weight:?}, group {group} and offset_group {offset_group} do not fit"
        ));
    }
    let out_len = |len: usize, k: usize, d: usize, p: usize, s: usize| -> OpResult<usize> {
        let span = (k - 1) * d + 1;
        match (len + p).checked_sub(span) {
            Some(v) => Ok(v / s + 1),
            None => invalid("DeformConv: the kernel is larger than the padded input"),
        }
    };
    let oh = out_len(h, kernel[0], dilations[0], pads[0] + pads[2], strides[0])?;
    let ow = out_len(wd, kernel[1], dilations[1], pads[1] + pads[3], strides[1])?;
    let taps = kernel[0] * kernel[1];
    if offset != [n, offset_group * taps * 2, oh, ow] {
        return invalid(format!(
            "DeformConv: offset has shape {offset:?}; expected {:?}",
            [n, offset_group * taps * 2, oh, ow]
        ));
    }
    let has_bias = match cx.opt_input(3) {
        Some(b) if b.dims != [weight[0]] || b.elem != x.elem => {
            return invalid(format!(
                "DeformConv: B has shape {:?}; expected [{}]",
                b.dims, weight[0]
            ));
        }
        b => b.is_some(),
    };
    let has_mask = match cx.opt_input(4) {
        Some(m) if m.dims != [n, offset_group * taps, oh, ow] || m.elem != x.elem => {
            return invalid(format!("DeformConv: mask has shape {:?}", m.dims));
        }
        m => m.is_some(),
    };
    Ok(DeformNode {
        elem: x.elem,
        params: rt_image::DeformConvParams {
            input,
            weight,
            output: [n, weight[0], oh, ow],
            group,
            offset_group,
            strides,
            pads,
            dilations,
        },
        has_bias,
        has_mask,
    })
}

impl OpRule for DeformConvRule {
    fn infer(&self, cx: &NodeCx<'_>) -> OpResult<Vec<TensorType>> {
        let n = read_deform(cx)?;
        Ok(vec![TensorType::new(n.elem, n.params.output.to_vec())])
    }

    fn lower(&self, cx: &NodeCx<'_>, _outputs: &[TensorType]) -> OpResult<Lowered> {
        Ok(Lowered::Kernel(Box::new(DeformKernel(read_deform(cx)?))))
    }
}

struct DeformKernel(DeformNode);

fn run_deform<T: Sample + HostElem>(
    n: &DeformNode,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let get = |i: usize| host::<T>(inputs, Some(i)).ok_or(EvalError::Type(n.elem));
    let (x, w, off) = (get(0)?, get(1)?, get(2)?);
    let bias = if n.has_bias { Some(get(3)?) } else { None };
    let mask = if n.has_mask { Some(get(4)?) } else { None };
    let y = outputs.first_mut().and_then(|t| t.get_mut::<T>()).ok_or(EvalError::Type(n.elem))?;
    rt_image::deform_conv(&n.params, x, w, off, bias, mask, y)?;
    Ok(())
}

impl Kernel for DeformKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        by_sample_type!(self.0.elem, run_deform(&self.0, inputs, outputs))
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let p = &self.0.params;
        let arr = |v: &[usize]| {
            let items = v.iter().map(|&d| lit::usize_lit(d));
            quote!([#(#items),*])
        };
        let (input, weight, output) = (arr(&p.input), arr(&p.weight), arr(&p.output));
        let (strides, pads, dilations) = (arr(&p.strides), arr(&p.pads), arr(&p.dilations));
        let (group, og) = (lit::usize_lit(p.group), lit::usize_lit(p.offset_group));
        let opt = |i: usize, has: bool| match io.inputs.get(i).cloned().flatten() {
            Some(e) if has => quote!(Some(#e)),
            _ => quote!(None),
        };
        let (bias, mask) = (opt(3, self.0.has_bias), opt(4, self.0.has_mask));
        let (x, w, off, y) = (&io.inputs[0], &io.inputs[1], &io.inputs[2], &io.outputs[0]);
        quote! {
            #rt::image::deform_conv(
                &#rt::image::DeformConvParams {
                    input: #input,
                    weight: #weight,
                    output: #output,
                    group: #group,
                    offset_group: #og,
                    strides: #strides,
                    pads: #pads,
                    dilations: #dilations,
                },
                #x, #w, #off, #bias, #mask, #y,
            )?;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{errors, run, ty, types, unsupported, value};

    #[test]
    fn resize_shapes_from_known_scales_and_sizes() {
        let a = run(
            19,
            "g (float[1,3,4,6] x) => (float[1,3,8,9] a, float[1,3,2,3] b, float[1,3,3,5] c) <float[4] s = {1, 1, 2, 1.5}, int64[2] z = {2, 3}, int64[2] q = {3, 6}> {
                a = Resize <mode: string = \"linear\"> (x, , s)
                b = Resize <axes: ints = [2, 3]> (x, , , z)
                c = Resize <axes: ints = [-2, -1], keep_aspect_ratio_policy: string = \"not_larger\"> (x, , , q)
            }",
        );
        // not_larger: scale min(3/4, 6/6) = 0.75; lengths floor(0.75 * 4 + 0.5)
        // = 3 and floor(0.75 * 6 + 0.5) = 5.
        assert_eq!(
            types(&a),
            [ty("float[1, 3, 8, 9]"), ty("float[1, 3, 2, 3]"), ty("float[1, 3, 3, 5]")]
        );
    }

    #[test]
    fn resize_folds_and_checks() {
        // Nearest (round_prefer_floor, half_pixel) doubling of [1, 2]:
        // x = -0.25, 0.25, 0.75, 1.25 -> 0, 0, 1, 1.
        let a = run(
            13,
            "g () => (float[4] y) <float[2] x = {1, 2}, float[1] s = {2}> {
                y = Resize (x, , s)
            }",
        );
        assert_eq!(value(&a, 0), [1.0, 1.0, 2.0, 2.0]);
        // Scales known only at run time: the declared shape is used...
        let a = run(13, "g (float[1,2] x, float[2] s) => (float[2,4] y) { y = Resize (x, , s) }");
        assert_eq!(types(&a), [ty("float[2, 4]")]);
        assert!(a.inferred.is_complete(), "{:?}", unsupported(&a));
        // ... and without one the node is unsupported.
        let a = run(13, "g (float[1,2] x, float[2] s) => (float[N,M] y) { y = Resize (x, , s) }");
        assert!(unsupported(&a).iter().any(|r| r.contains("run time")), "{:?}", unsupported(&a));
        let a = run(
            13,
            "g (float[1,2] x, float[2] s) => (float[1,2] y) { y = Resize <mode: string = \"box\"> (x, , s) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("unknown mode")), "{:?}", errors(&a));
    }

    #[test]
    fn grid_and_friends_infer() {
        let a = run(
            22,
            "g (float[2,3,5,6] x, float[2,4,7,2] grid, double[2,1,3,4,5] v, double[2,6,7,8,3] vg) => (float[2,3,4,7] y, double[2,1,6,7,8] w) {
                y = GridSample <mode: string = \"cubic\"> (x, grid)
                w = GridSample <mode: string = \"nearest\", padding_mode: string = \"reflection\"> (v, vg)
            }",
        );
        assert_eq!(types(&a), [ty("float[2, 3, 4, 7]"), ty("double[2, 1, 6, 7, 8]")]);
        let a = run(
            22,
            "g (float[2,3,5,6] x, float[2,4,7,3] grid) => (float[2,3,4,7] y) { y = GridSample (x, grid) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("grid has shape")), "{:?}", errors(&a));
        let a = run(
            20,
            "g (float[1,4,4] x, float[2,2,3] t, float[1,1,4,4] r, int64[1] b) => (float[1,1,3,3] y, float[2,4,5,2] grid, float[1,1,2,2] c, float[1,1,2,3] p) <int64[2] im = {3, 3}, int64[2] bl = {2, 2}, int64[4] sz = {2, 1, 4, 5}, int64[2] cs = {2, 3}> {
                y = Col2Im (x, im, bl)
                grid = AffineGrid (t, sz)
                c = RoiAlign <output_height: int = 2, output_width: int = 2> (r, t2, b)
                p = CenterCropPad <axes: ints = [2, 3]> (r, cs)
                t2 = Constant <value: tensor = float[1,4] {0, 0, 2, 2}> ()
            }",
        );
        assert_eq!(
            types(&a),
            [
                ty("float[1, 1, 3, 3]"),
                ty("float[2, 4, 5, 2]"),
                ty("float[1, 1, 2, 2]"),
                ty("float[1, 1, 2, 3]")
            ]
        );
        // The sliding blocks of a 3x3 image and a 2x2 block: input dim 1 must
        // be a multiple of 4.
        let a = run(
            18,
            "g (float[1,6,4] x) => (float[1,1,3,3] y) <int64[2] im = {3, 3}, int64[2] bl = {2, 2}> { y = Col2Im (x, im, bl) }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("multiple")), "{:?}", errors(&a));
    }

    #[test]
    fn deform_conv_infers_and_checks_offsets() {
        let a = run(
            19,
            "g (float[1,2,5,5] x, float[4,1,3,3] w, float[1,36,3,3] off) => (float[1,4,3,3] y) {
                y = DeformConv <group: int = 2, offset_group: int = 2> (x, w, off)
            }",
        );
        assert_eq!(types(&a), [ty("float[1, 4, 3, 3]")]);
        let a = run(
            19,
            "g (float[1,2,5,5] x, float[4,1,3,3] w, float[1,18,3,3] off) => (float[1,4,3,3] y) {
                y = DeformConv <group: int = 2, offset_group: int = 2> (x, w, off)
            }",
        );
        assert!(errors(&a).iter().any(|e| e.contains("offset has shape")), "{:?}", errors(&a));
    }
}
