//! Convolution kernels that do not go through the GEMM driver: the direct
//! and stem convolutions (AVX-512) and depthwise (every ISA).

pub(in crate::simd) mod depthwise;
pub(in crate::simd) mod direct;
pub(in crate::simd) mod stem;
