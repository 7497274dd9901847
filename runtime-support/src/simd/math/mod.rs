//! Vector math (exp and the functions built on it), explicit AVX2 and
//! AVX-512 code.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod vexp;

/// The functions [`exp_family`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum VFunc {
    /// `e^x`.
    Exp,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x / (1 + e^-x)`.
    Silu,
    /// ONNX `Gelu` without approximation, [`vmath::gelu`](crate::vmath::gelu)'s
    /// polynomials with fused steps.
    Gelu,
    /// ONNX `HardSwish`, `x * clamp(x * (1 / 6) + 1 / 2, 0, 1)`: the
    /// standalone op's operations, unfused, so bit for bit its results.
    /// (Only the x86-64 routines compute it.)
    #[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
    HardSwish,
}

/// `y[i] = f(x[i])` (or in place, `x` `None`) in explicit vector code where
/// the CPU has AVX2+FMA; `false` (nothing done) elsewhere, for the
/// caller's portable loop.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn exp_family(f: VFunc, x: Option<&[f32]>, y: &mut [f32]) -> bool {
    vexp::apply(f, x, y)
}

/// No explicit vector code on this target: the portable loops run.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn exp_family(_: VFunc, _: Option<&[f32]>, _: &mut [f32]) -> bool {
    false
}

/// One Softmax row, `y = e^(x - max) / sum` (in place when `x` is `None`;
/// `x` as long as `y`), in explicit AVX-512 code: the operations of the
/// portable row in `softmax` (partial maxima, the difference, `vexp`'s
/// exponential, sixteen partial sums added pairwise, then the rest in
/// order, one reciprocal), fused into three passes, bit for bit the same.
/// `false` (nothing done) without AVX-512.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[inline]
pub(crate) fn softmax_row(x: Option<&[f32]>, y: &mut [f32]) -> bool {
    vexp::softmax_row(x, y)
}

/// No explicit vector code on this target: the portable row runs.
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
#[inline]
pub(crate) fn softmax_row(_: Option<&[f32]>, _: &mut [f32]) -> bool {
    false
}
