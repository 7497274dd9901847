//! Convolution kernels that do not go through the GEMM driver: the direct
//! and stem convolutions (AVX-512 and AVX2) and
//! depthwise (every ISA).

pub(in crate::simd) mod depthwise;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(in crate::simd) mod direct;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(in crate::simd) mod stem;

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Smooth;
use crate::simd::gemm::pack::ReadA;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::{avx2, avx512};

/// 2-D convolution of a few input planes (a network's stem, narrow strided
/// layers; see [`stem::conv2d`] and the tiles' constants for which) into
/// `m` output planes (groups of one, geometry `g`; the weights `w` an `m x
/// cin * kh * kw` A operand), adding `bias`, applying `act`, then `smooth`,
/// with the output channels in the vector lanes. Returns `false`, `y`
/// untouched, when this CPU or shape has no such path.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d_stem<A: ReadA>(
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    smooth: Option<Smooth>,
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        // The smooth activation as the vector routine computes it (`None`
        // for one it does not have: no stem path then).
        let f = match smooth.map(Smooth::vector) {
            None => None,
            Some(Some(f)) => Some(f),
            Some(None) => return false,
        };
        if let Some(cpu) = avx512::Avx512::detect() {
            return stem::conv2d(cpu, g, cin, m, x, w, bias, act, f, y);
        }
        if let Some(cpu) = avx2::Avx2::detect() {
            return stem::conv2d(cpu, g, cin, m, x, w, bias, act, f, y);
        }
    }
    let _ = (g, cin, m, x, w, bias, act, smooth, y);
    false
}

/// The im2col rows of one channel and kernel row of a convolution whose
/// kernel is as wide as its stride (a patch layer, 16 wide): `dst[kx *
/// stride + c] = src[c * 16 + kx]` for `kx < 16` and `c < len`, the patches
/// transposed sixteen at a time. `false`, nothing written, where this CPU
/// has no such path.
pub(crate) fn patch16_rows(src: &[f32], len: usize, dst: &mut [f32], stride: usize) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return stem::avx512::patch16(cpu, src, len, dst, stride);
    }
    let _ = (src, len, dst, stride);
    false
}

/// 2-D convolution of `cin` input planes into `m` output planes (groups of
/// one, geometry `g`; the weights `w` an `m x cin * kh * kw` A operand),
/// adding `bias` and applying `act`, read in place from
/// a staged copy of the input instead of packed im2col strips. Returns
/// `false` when this CPU or geometry has no such path (the output may then
/// be partly written: the caller computes all of it another way).
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d_direct<A: ReadA>(
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx512::Avx512::detect() {
        return direct::conv2d(cpu, g, cin, m, x, w, bias, act, y);
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = avx2::Avx2::detect() {
        return direct::conv2d(cpu, g, cin, m, x, w, bias, act, y);
    }
    let _ = (g, cin, m, x, w, bias, act, y);
    false
}
