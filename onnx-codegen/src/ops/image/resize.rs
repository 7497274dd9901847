//! `Resize` (opsets 10 to 19) and `Upsample` (7, 9).
//!
//! Scales, sizes and the region of interest may be known at generation time
//! or only at run time. In both cases the runtime kernel derives the output
//! shape from them and checks it against the planned one; when they are not
//! known here, the planned shape is the model's declared output type.
//! `Upsample` and opset-10 `Resize` are `Resize` with asymmetric coordinates
//! and, for nearest, the floor-when-upsampling rule they predate
//! `nearest_mode` with.

use super::{host, supported_elem};
use crate::emit::lit;
use crate::ir::{ElemType, TensorType};
use crate::ops::host::HostElem;
use crate::ops::{
    EvalError, EvalResult, HostTensor, Io, Kernel, Lowered, NodeCx, OpError, OpResult, OpRule,
    axis, invalid, unsupported,
};
use onnx_codegen_runtime::image::{
    self as rt_image, AspectPolicy, CoordMode, NearestMode, ResizeMode, ResizeParams, Sample,
};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

/// The most `f64` scratch values a Resize may ask for (the tap tables).
const MAX_SCRATCH: usize = 1 << 26;

pub(super) struct ResizeRule;

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
}
