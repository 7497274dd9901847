//! Vector math (exp and the functions built on it), explicit AVX2 and
//! AVX-512 code.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod vexp;
