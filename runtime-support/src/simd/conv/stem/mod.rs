//! The stem convolution (few input channels, output channels in lanes):
//! AVX-512 only.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
