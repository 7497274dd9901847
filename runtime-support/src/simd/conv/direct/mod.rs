//! The direct convolution, pixels in lanes: AVX-512 only.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(in crate::simd) mod avx512;
