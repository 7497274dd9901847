//! The one kernel of the family: runs every `Op` on the host (to fold),
//! for every element type the runtime can hold, and emits its runtime
//! call, after the run-time checks of shape-like inputs given as data.

use super::{Op, PadKind, RtCheck};
use crate::emit::lit;
use crate::ir::ElemType;
use crate::ops::{EvalError, EvalResult, HostData, HostTensor, Io, Kernel};
use onnx_codegen_runtime::layout::{self as rt_layout, Nchw4, PadMode};
use onnx_codegen_runtime::{bf16, f16};
use proc_macro2::TokenStream;
use quote::quote;

pub(super) struct LayoutKernel {
    pub(super) op: Op,
    pub(super) elem: ElemType,
    pub(super) check: Option<RtCheck>,
}

/// The element types of host tensors the kernels move (including `bool`,
/// which has no byte-level host form).
trait Data: Copy + Default + 'static {
    fn of(d: &HostData) -> Option<&[Self]>;
    fn of_mut(d: &mut HostData) -> Option<&mut [Self]>;
    /// Pad's float `value` attribute as an element.
    fn from_f64(v: f64) -> Self;
}

macro_rules! data {
    ($t:ty, $v:ident, $from:expr) => {
        impl Data for $t {
            fn of(d: &HostData) -> Option<&[Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn of_mut(d: &mut HostData) -> Option<&mut [Self]> {
                match d {
                    HostData::$v(v) => Some(v),
                    _ => None,
                }
            }
            fn from_f64(v: f64) -> Self {
                let f: fn(f64) -> $t = $from;
                f(v)
            }
        }
    };
}

data!(f32, F32, |v| v as f32);
data!(f64, F64, |v| v);
data!(i8, I8, |v| v as i8);
data!(i16, I16, |v| v as i16);
data!(i32, I32, |v| v as i32);
data!(i64, I64, |v| v as i64);
data!(u8, U8, |v| v as u8);
data!(u16, U16, |v| v as u16);
data!(u32, U32, |v| v as u32);
data!(u64, U64, |v| v as u64);
data!(bool, Bool, |v| v != 0.0);
data!(f16, F16, f16::from_f64);
data!(bf16, Bf16, bf16::from_f64);

/// Index tensors on the host.
enum Indices<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

fn indices<'a>(inputs: &[Option<&'a HostTensor>]) -> Result<Indices<'a>, EvalError> {
    match inputs.get(1).copied().flatten().map(|t| (&t.data, t.ty.elem)) {
        Some((HostData::I32(v), _)) => Ok(Indices::I32(v)),
        Some((HostData::I64(v), _)) => Ok(Indices::I64(v)),
        Some((_, elem)) => Err(EvalError::Type(elem)),
        None => Err(EvalError::Type(ElemType::Int64)),
    }
}

fn run<T: Data>(
    k: &LayoutKernel,
    inputs: &[Option<&HostTensor>],
    outputs: &mut [HostTensor],
) -> EvalResult {
    let ty = EvalError::Type(k.elem);
    let input = |i: usize| -> Result<&[T], EvalError> {
        inputs.get(i).copied().flatten().and_then(|t| T::of(&t.data)).ok_or(ty.clone())
    };
    if let Op::Split { outer, width, at } = &k.op {
        let x = input(0)?;
        for (o, &a) in outputs.iter_mut().zip(at) {
            let y = T::of_mut(&mut o.data).ok_or(ty.clone())?;
            rt_layout::split_part(*outer, *width, a, x, y)?;
        }
        return Ok(());
    }
    let y = outputs.first_mut().and_then(|t| T::of_mut(&mut t.data)).ok_or(ty.clone())?;
    match &k.op {
        Op::Alias | Op::Split { .. } => return Err(ty),
        Op::Transpose { shape, perm } => rt_layout::transpose(shape, perm, input(0)?, y)?,
        Op::Concat { outer, width, at } => {
            for (i, &a) in at.iter().enumerate() {
                rt_layout::concat_part(*outer, *width, a, input(i)?, y)?;
            }
        }
        Op::Slice { shape, starts, steps, out } => {
            rt_layout::slice(shape, starts, steps, out, input(0)?, y)?;
        }
        Op::Gather { shape } => match indices(inputs)? {
            Indices::I32(i) => rt_layout::gather(*shape, i, input(0)?, y)?,
            Indices::I64(i) => rt_layout::gather(*shape, i, input(0)?, y)?,
        },
        Op::GatherElements { shape, index_shape, axis } => match indices(inputs)? {
            Indices::I32(i) => {
                rt_layout::gather_elements(shape, index_shape, *axis, i, input(0)?, y)?;
            }
            Indices::I64(i) => {
                rt_layout::gather_elements(shape, index_shape, *axis, i, input(0)?, y)?;
            }
        },
        Op::Expand { out, strides } => rt_layout::expand(out, strides, input(0)?, y)?,
        Op::Pad { shape, begin, end, mode } => {
            let mode = match mode {
                PadKind::Zero => PadMode::Constant(T::default()),
                PadKind::Input => {
                    let v = input(2)?.first().copied();
                    PadMode::Constant(
                        v.ok_or(EvalError::Runtime(onnx_codegen_runtime::Error::ShapeMismatch))?,
                    )
                }
                PadKind::Attr(v) => PadMode::Constant(T::from_f64(*v)),
                PadKind::Reflect => PadMode::Reflect,
                PadKind::Edge => PadMode::Edge,
                PadKind::Wrap => PadMode::Wrap,
            };
            rt_layout::pad(shape, begin, end, mode, input(0)?, y)?;
        }
        Op::Tile { shape, repeats } => rt_layout::tile(shape, repeats, input(0)?, y)?,
        Op::DepthToSpace { s, block, crd } => {
            rt_layout::depth_to_space(*s, *block, *crd, input(0)?, y)?;
        }
        Op::SpaceToDepth { s, block, crd } => {
            rt_layout::space_to_depth(*s, *block, *crd, input(0)?, y)?;
        }
    }
    Ok(())
}

/// Pad's `value` attribute as a literal of the data's type.
fn pad_value_tokens(v: f64, elem: ElemType, rt: &TokenStream) -> TokenStream {
    match elem {
        ElemType::Float16 => {
            let bits = lit::usize_lit(usize::from(f16::from_f64(v).to_bits()));
            quote!(#rt::f16::from_bits(#bits))
        }
        ElemType::Bfloat16 => {
            let bits = lit::usize_lit(usize::from(bf16::from_f64(v).to_bits()));
            quote!(#rt::bf16::from_bits(#bits))
        }
        // `pad` refuses other types before lowering.
        _ => lit::float(v, elem),
    }
}

fn nchw_tokens(s: Nchw4, rt: &TokenStream) -> TokenStream {
    let (n, c, h, w) =
        (lit::usize_lit(s.n), lit::usize_lit(s.c), lit::usize_lit(s.h), lit::usize_lit(s.w));
    quote!(#rt::layout::Nchw4 { n: #n, c: #c, h: #h, w: #w })
}

impl Kernel for LayoutKernel {
    fn eval(&self, inputs: &[Option<&HostTensor>], outputs: &mut [HostTensor]) -> EvalResult {
        use ElemType as E;
        if self.check.is_some() {
            // Never folded: its shape-like inputs are not constants.
            return Err(EvalError::Type(self.elem));
        }
        match self.elem {
            E::Float => run::<f32>(self, inputs, outputs),
            E::Double => run::<f64>(self, inputs, outputs),
            E::Int8 => run::<i8>(self, inputs, outputs),
            E::Int16 => run::<i16>(self, inputs, outputs),
            E::Int32 => run::<i32>(self, inputs, outputs),
            E::Int64 => run::<i64>(self, inputs, outputs),
            E::Uint8 => run::<u8>(self, inputs, outputs),
            E::Uint16 => run::<u16>(self, inputs, outputs),
            E::Uint32 => run::<u32>(self, inputs, outputs),
            E::Uint64 => run::<u64>(self, inputs, outputs),
            E::Bool => run::<bool>(self, inputs, outputs),
            E::Float16 => run::<f16>(self, inputs, outputs),
            E::Bfloat16 => run::<bf16>(self, inputs, outputs),
            other => Err(EvalError::Type(other)),
        }
    }

    /// Shape-like inputs (starts, pads, repeats, ...) were taken at
    /// generation time; only the data, Gather's indices, Concat's inputs and
    /// Pad's constant value are read when the call runs.
    fn reads_input(&self, i: usize) -> bool {
        if self.check.is_some() {
            return true;
        }
        match &self.op {
            Op::Concat { .. } => true,
            Op::Gather { .. } | Op::GatherElements { .. } => i <= 1,
            Op::Pad { mode: PadKind::Input, .. } => i == 0 || i == 2,
            _ => i == 0,
        }
    }

    fn emit(&self, io: &Io) -> TokenStream {
        let call = self.emit_call(io);
        let Some(check) = &self.check else { return call };
        let rt = &io.rt;
        let c = quote!(#rt::check);
        let us = lit::usizes;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let opt = |i: usize| match input(i) {
            Some(v) => quote!(::core::option::Option::Some(#v)),
            None => quote!(::core::option::Option::None),
        };
        let v1 = input(1).unwrap_or_default();
        match check {
            RtCheck::Expand { shape, out } => {
                let (shape, out) = (us(shape), us(out));
                quote!(#c::expand(#v1, #shape, #out)?; #call)
            }
            RtCheck::Tile { shape, out } => {
                let (shape, out) = (us(shape), us(out));
                quote!(#c::tile(#v1, #shape, #out)?; #call)
            }
            RtCheck::Split { sizes } => {
                let sizes = us(sizes);
                quote!(#c::split(#v1, #sizes)?; #call)
            }
            RtCheck::Slice { shape, out, axes, steps } => {
                let r = lit::usize_lit(shape.len());
                let v2 = input(2).unwrap_or_default();
                let a = if *axes { opt(3) } else { quote!(::core::option::Option::None) };
                let st = if *steps { opt(4) } else { quote!(::core::option::Option::None) };
                let x = input(0).unwrap_or_default();
                let y = io.outputs.first().cloned().flatten().unwrap_or_default();
                let (shape, out) = (us(shape), us(out));
                quote! {
                    let mut first = [0usize; #r];
                    let mut step = [1isize; #r];
                    #c::slice(#v1, #v2, #a, #st, #shape, #out, &mut first, &mut step)?;
                    #rt::layout::slice(#shape, &first, &step, #out, #x, #y)?;
                }
            }
            RtCheck::Pad { shape, out, axes } => {
                let r = lit::usize_lit(shape.len());
                let a = match axes {
                    Some(_) => opt(3),
                    None => quote!(::core::option::Option::None::<&[i64]>),
                };
                let (shape, out) = (us(shape), us(out));
                let Op::Pad { mode, .. } = &self.op else { return call };
                let x = input(0).unwrap_or_default();
                let y = io.outputs.first().cloned().flatten().unwrap_or_default();
                let mode = self.pad_mode(mode, io);
                quote! {
                    let mut begin = [0isize; #r];
                    let mut end = [0isize; #r];
                    #c::pad(#v1, #a, #shape, #out, &mut begin, &mut end)?;
                    #rt::layout::pad(#shape, &begin, &end, #mode, #x, #y)?;
                }
            }
        }
    }
}

impl LayoutKernel {
    fn pad_mode(&self, mode: &PadKind, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let l = quote!(#rt::layout);
        match mode {
            PadKind::Zero => quote!(#l::PadMode::Constant(::core::default::Default::default())),
            PadKind::Input => {
                let c = io.inputs.get(2).cloned().flatten().unwrap_or_default();
                quote! {
                    #l::PadMode::Constant(#l::MoveTo::move_to(
                        *(#c).first().ok_or(#rt::Error::ShapeMismatch)?,
                    ))
                }
            }
            PadKind::Attr(v) => {
                let v = pad_value_tokens(*v, self.elem, rt);
                quote!(#l::PadMode::Constant(#v))
            }
            PadKind::Reflect => quote!(#l::PadMode::Reflect),
            PadKind::Edge => quote!(#l::PadMode::Edge),
            PadKind::Wrap => quote!(#l::PadMode::Wrap),
        }
    }

    fn emit_call(&self, io: &Io) -> TokenStream {
        let rt = &io.rt;
        let l = quote!(#rt::layout);
        let us = lit::usizes;
        let u = lit::usize_lit;
        let input = |i: usize| io.inputs.get(i).cloned().flatten();
        let x = input(0).unwrap_or_default();
        let y = io.outputs.first().cloned().flatten().unwrap_or_default();
        match &self.op {
            Op::Alias => quote!(),
            Op::Transpose { shape, perm } => {
                let (shape, perm) = (us(shape), us(perm));
                quote!(#l::transpose(#shape, #perm, #x, #y)?;)
            }
            Op::Concat { outer, width, at } => {
                let (outer, width) = (u(*outer), u(*width));
                let calls = at.iter().enumerate().filter_map(|(i, &a)| {
                    let xi = input(i)?;
                    let a = u(a);
                    Some(quote!(#l::concat_part(#outer, #width, #a, #xi, &mut *concat_out)?;))
                });
                // One binding, reborrowed per part: `y` may be an expression.
                quote!({
                    let concat_out = #y;
                    #(#calls)*
                })
            }
            Op::Split { outer, width, at } => {
                let (outer, width) = (u(*outer), u(*width));
                let calls = at.iter().enumerate().filter_map(|(j, &a)| {
                    let yj = io.outputs.get(j).cloned().flatten()?;
                    let a = u(a);
                    Some(quote!(#l::split_part(#outer, #width, #a, #x, #yj)?;))
                });
                quote!(#(#calls)*)
            }
            Op::Slice { shape, starts, steps, out } => {
                let (shape, starts, steps, out) =
                    (us(shape), us(starts), lit::isizes(steps), us(out));
                quote!(#l::slice(#shape, #starts, #steps, #out, #x, #y)?;)
            }
            Op::Gather { shape } => {
                let (o, a, i) = (u(shape.outer), u(shape.axis), u(shape.inner));
                let idx = input(1).unwrap_or_default();
                quote! {
                    #l::gather(#rt::norm::AxisShape { outer: #o, axis: #a, inner: #i }, #idx, #x, #y)?;
                }
            }
            Op::GatherElements { shape, index_shape, axis } => {
                let (shape, index_shape, axis) = (us(shape), us(index_shape), u(*axis));
                let idx = input(1).unwrap_or_default();
                quote!(#l::gather_elements(#shape, #index_shape, #axis, #idx, #x, #y)?;)
            }
            Op::Expand { out, strides } => {
                let (out, strides) = (us(out), lit::isizes(strides));
                quote!(#l::expand(#out, #strides, #x, #y)?;)
            }
            Op::Pad { shape, begin, end, mode } => {
                let (shape, begin, end) = (us(shape), lit::isizes(begin), lit::isizes(end));
                let mode = match mode {
                    PadKind::Zero => {
                        quote!(#l::PadMode::Constant(::core::default::Default::default()))
                    }
                    PadKind::Input => {
                        let c = input(2).unwrap_or_default();
                        quote! {
                            #l::PadMode::Constant(#l::MoveTo::move_to(
                                *(#c).first().ok_or(#rt::Error::ShapeMismatch)?,
                            ))
                        }
                    }
                    PadKind::Attr(v) => {
                        let v = pad_value_tokens(*v, self.elem, rt);
                        quote!(#l::PadMode::Constant(#v))
                    }
                    PadKind::Reflect => quote!(#l::PadMode::Reflect),
                    PadKind::Edge => quote!(#l::PadMode::Edge),
                    PadKind::Wrap => quote!(#l::PadMode::Wrap),
                };
                quote!(#l::pad(#shape, #begin, #end, #mode, #x, #y)?;)
            }
            Op::Tile { shape, repeats } => {
                let (shape, repeats) = (us(shape), us(repeats));
                quote!(#l::tile(#shape, #repeats, #x, #y)?;)
            }
            Op::DepthToSpace { s, block, crd } => {
                let (s, b) = (nchw_tokens(*s, rt), u(*block));
                quote!(#l::depth_to_space(#s, #b, #crd, #x, #y)?;)
            }
            Op::SpaceToDepth { s, block, crd } => {
                let (s, b) = (nchw_tokens(*s, rt), u(*block));
                quote!(#l::space_to_depth(#s, #b, #crd, #x, #y)?;)
            }
        }
    }
}

#[cfg(test)]
mod tests {

    use crate::ops::layout::testing::{ints, run, value};

    #[test]
    fn f16_and_bool_fold() {
        // f16 1, 2, 3, 4 (the text syntax writes their bits: 0x3C00, 0x4000,
        // 0x4200, 0x4400) transposed as [2, 2].
        let a = run(
            13,
            "g () => (float16[] y, bool[] b) <float16[2,2] x = {15360, 16384, 16896, 17408}, bool[2,2] f = {1, 0, 0, 0}> {
                y = Transpose (x)
                b = Transpose (f)
            }",
        );
        let v = value(&a, "y");
        let t = a.inferred.constants[v.index()].as_ref().expect("folded");
        let bits: Vec<u16> = t
            .bytes()
            .expect("bytes")
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(bits, [0x3C00, 0x4200, 0x4000, 0x4400]);
        assert_eq!(ints(&a, "b"), [1, 0, 0, 0]);
    }
}
