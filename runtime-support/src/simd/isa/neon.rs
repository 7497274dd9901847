//! The NEON token and the lane helpers the NEON kernels share: partial
//! loads and stores of four lanes, and the activation in registers.
//!
//! NEON is part of every aarch64 target this module is compiled for (the
//! `mod` line asks for `target_feature = "neon"` at compile time), so there
//! is no run-time detection: [`Neon::detect`] consults only the ISA cap
//! (`Isa::Portable` turns the NEON kernels off). The intrinsics need NEON,
//! present by the compile-time target feature.

use crate::simd::Isa;
use crate::simd::gemm::epilogue::Activation;
use core::arch::aarch64::{
    float32x4_t, vbslq_f32, vcgtq_f32, vcltq_f32, vdupq_n_f32, vld1q_f32, vmulq_n_f32, vst1q_f32,
};

/// The NEON kernel; a value exists only on targets with NEON (see the
/// module documentation).
#[derive(Clone, Copy)]
pub(crate) struct Neon {
    _private: (),
}

impl Neon {
    /// `Some` unless the ISA cap is [`Isa::Portable`]: this module is
    /// compiled only where NEON is a target feature, so the CPU has it.
    #[inline(always)]
    pub(crate) fn detect() -> Option<Neon> {
        (crate::simd::max_isa() > Isa::Portable).then_some(Neon { _private: () })
    }
}

/// Four lanes from `p`, or the first `n < 4` of them and zeros.
///
/// # Safety
/// `p..p + n.min(4)` is readable.
#[target_feature(enable = "neon")]
#[inline]
pub(in crate::simd) unsafe fn load_part(p: *const f32, n: usize) -> float32x4_t {
    // SAFETY: the caller's bound; `t` holds four floats.
    unsafe {
        if n >= 4 {
            vld1q_f32(p)
        } else {
            let mut t = [0.0f32; 4];
            core::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
            vld1q_f32(t.as_ptr())
        }
    }
}

/// Stores the first `n.min(4)` lanes of `x` at `p`.
///
/// # Safety
/// `p..p + n.min(4)` is writable.
#[target_feature(enable = "neon")]
#[inline]
pub(in crate::simd) unsafe fn store_part(p: *mut f32, x: float32x4_t, n: usize) {
    // SAFETY: the caller's bound; `t` holds four floats.
    unsafe {
        if n >= 4 {
            vst1q_f32(p, x);
        } else {
            let mut t = [0.0f32; 4];
            vst1q_f32(t.as_mut_ptr(), x);
            core::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
        }
    }
}

/// [`Activation::apply`] on four lanes: the same comparisons, as selects
/// (NaN compares false and passes through; `-0.0` is not below zero).
#[target_feature(enable = "neon")]
#[inline]
pub(in crate::simd) fn activate(x: float32x4_t, act: Activation) -> float32x4_t {
    match act {
        Activation::None => x,
        Activation::Relu => {
            let z = vdupq_n_f32(0.0);
            vbslq_f32(vcltq_f32(x, z), z, x)
        }
        Activation::LeakyRelu { alpha } => {
            vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0)), vmulq_n_f32(x, alpha), x)
        }
        Activation::Clip { min, max } => {
            let (lo, hi) = (vdupq_n_f32(min), vdupq_n_f32(max));
            let v = vbslq_f32(vcltq_f32(x, lo), lo, x);
            vbslq_f32(vcgtq_f32(v, hi), hi, v)
        }
    }
}
