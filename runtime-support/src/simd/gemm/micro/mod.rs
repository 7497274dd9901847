//! Register-tiled GEMM micro-kernels, one module per ISA. Each module also
//! holds its ISA's token (`Avx2`, `Avx512`, `Neon`: proof that the CPU
//! runs the extension under the cap) and the lane helpers the other kernels
//! of that ISA share.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod neon;
