//! The blocked single-precision GEMM: the micro-kernels, one file per ISA.

pub(in crate::simd) mod micro;
