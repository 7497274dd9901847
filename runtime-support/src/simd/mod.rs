//! Fast single-precision paths: a blocked GEMM driver over register-tiled
//! micro-kernels, the implicit-GEMM convolution built on it, and the fused
//! epilogues (bias, scale, activation) they apply.
//!
//! The driver packs the B operand into a strip of `kc x NR` on the stack (no
//! arena, no heap), reads A in place through row/column strides, and hands
//! both to a micro-kernel that keeps an `MR x NR` tile of sums in registers.
//! Sums still run over `k` in ascending order. The portable kernel multiplies
//! then adds, so its results equal the exact kernels' bit for bit; the AVX2
//! kernel fuses each multiply-add (one rounding instead of two), which is why
//! generated code opts into these paths explicitly while constant folding
//! keeps the exact kernels.
//!
//! On x86-64 the AVX-512 or AVX2+FMA kernels are chosen at run time
//! (`isa/cpu.rs`: `cpuid` and `xgetbv`, probed once; no `std` needed). They
//! are compiled only where SSE2 is on (every x86-64 target but the
//! soft-float `x86_64-unknown-none`, whose code generator cannot lower
//! vector functions: there the portable kernel runs). On
//! aarch64 with NEON (a compile-time target feature, present on every
//! aarch64 Linux and macOS target) the NEON kernel runs; every other target
//! uses the portable kernel.
//!
//! # Capping the instruction set
//!
//! [`set_max_isa`] caps the kernels the dispatcher chooses at an [`Isa`],
//! on top of what the CPU reports, so the AVX2 and portable paths run (and
//! are tested) on an AVX-512 machine: `set_max_isa(Isa::Avx2)` behaves as
//! an AVX2-only CPU would, `Isa::AvxVnni` as an AVX2 CPU with AVX-VNNI (a
//! client core of Alder Lake or later: the int8 products' 256-bit
//! `vpdpbusd`), `Isa::Portable` as a CPU without AVX2. It works
//! without `std`. In `std` builds the environment variable
//! [`MAX_ISA_VAR`], `ONNX_CODEGEN_MAX_ISA=portable|avx2|avxvnni|avx512`, sets the
//! cap when a kernel first asks for it (any other non-empty value caps at
//! the portable path, with a warning naming the values it takes);
//! [`set_max_isa`] overrides it. For
//! example `ONNX_CODEGEN_MAX_ISA=avx2 cargo test -p onnx-codegen-runtime
//! --features std` runs the crate's tests on the AVX2 paths.
//!
//! The cap covers every explicit vector path (micro-kernels, the direct
//! and stem convolutions, depthwise, pooling, Winograd transforms, `vexp`,
//! the loops compiled for AVX2 or AVX-512 by `vectorize`) and the tuning
//! hints that belong to an extension (Zen 4's split 512-bit operations go
//! with AVX-512). On aarch64 `Isa::Portable` turns the NEON kernels off
//! (they are chosen through the same run-time switch, though NEON itself is
//! a compile-time feature), and the other caps leave them on. No cap
//! changes the code the compiler generates for the target's baseline: the
//! portable loops stay auto-vectorised for SSE2 on x86-64 and NEON on
//! aarch64.

mod isa;
pub use isa::{Isa, MAX_ISA_VAR, max_isa, set_max_isa};
#[allow(unsafe_code)]
mod strip;
pub(crate) use strip::prefetch;

mod conv;
mod gemm;
// Vector code written once over the lanes of every ISA (the x86-64 tokens
// implement them so far).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
mod lanes;
mod math;
mod pool;
pub(crate) mod q8;
mod winograd;

// The ISA tokens (`Avx2`, `Avx512`, `Neon`), with the lane helpers each
// instruction set's kernels share.
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use isa::neon;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use isa::{avx2, avx512};

// The kernels under the paths the rest of the crate calls them by.
pub(crate) use conv::depthwise::{Geom2d, depthwise};
pub(crate) use conv::{conv2d_direct, conv2d_stem, patch16_rows};
pub use gemm::epilogue::{Activation, Smooth};
pub(crate) use gemm::epilogue::{CTerm, Epilogue, Residual};
pub use gemm::pack::STRIP;
pub(crate) use gemm::pack::{
    DenseB, PANEL, PackB, PanelA, ReadA, StripsB, ViewA, debug_check_pack, panel_stride, panels_len,
};
#[cfg(test)]
pub(crate) use gemm::product_portable;
pub(crate) use gemm::{Out, product, strips_vector_product, vector_product};
pub(crate) use math::{VFunc, exp_family, softmax_row};
pub(crate) use pool::{
    Evens, avg_pool_2x2, max_pool_s2, max_pool_same, max_rows, max_windows_s1, max_windows_s2,
};
pub(crate) use winograd::{TileRows, WinogradTransforms};

/// Runs `f`, compiled for the widest vector unit detected (AVX2 on x86-64)
/// when `f`'s loops are inlined into it; the arithmetic does not change.
#[inline]
pub(crate) fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(v) = avx2::Avx2::detect() {
        return v.vectorized(f);
    }
    f()
}

/// A body of loops to compile for the widest vector unit, see [`vectorize`].
pub(crate) trait Vectorize {
    /// What the body returns.
    type Output;
    /// The body. Implementations mark it `#[inline(always)]`: it is then
    /// compiled inside the AVX2 function whatever its size (a closure given
    /// to [`vectorized`] is inlined only while small).
    fn run(self) -> Self::Output;
}

/// Runs `k`, compiled for the widest vector unit detected (AVX2 on x86-64);
/// the arithmetic does not change.
#[inline]
pub(crate) fn vectorize<K: Vectorize>(k: K) -> K::Output {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(v) = avx2::Avx2::detect() {
        return v.vectorize(k);
    }
    k.run()
}

/// Runs `k` compiled for the widest vector unit including AVX-512 (the
/// element-wise kernels' entry; see `avx2::vectorize_wide`).
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
pub(crate) use avx2::vectorize_wide;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
pub(crate) use vectorize as vectorize_wide;

/// Whether the fused-multiply-add kernels run on this CPU (results then
/// differ from the exact kernels by rounding).
pub fn uses_fma() -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if avx2::Avx2::detect().is_some() || avx512::Avx512::detect().is_some() {
        return true;
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if neon::Neon::detect().is_some() {
        return true;
    }
    // The Cortex-M float kernels fuse their multiply-adds (`VFMA.F32`).
    #[cfg(onnx_codegen_arm_fma)]
    if gemm::micro::arm::fma_allowed() {
        return true;
    }
    false
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// An extension a test needs from the CPU (under the ISA cap).
    #[derive(Clone, Copy, Debug)]
    pub(crate) enum Need {
        /// AVX2 and FMA (`avx2::Avx2`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        Avx2,
        /// AVX2, FMA and AVX-VNNI (`avx2::AvxVnni`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        AvxVnni,
        /// AVX-512F (`avx512::Avx512`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        Avx512,
        /// AVX-512F, BW and VNNI (`avx512::Avx512Vnni`).
        #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
        Avx512Vnni,
        /// NEON's kernels (aarch64), off only under `Isa::Portable`.
        #[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
        Neon,
        /// The Arm DSP extension's kernels, off only under `Isa::Portable`
        /// (elsewhere the tests run them on emulated instructions).
        #[cfg_attr(not(onnx_codegen_arm_dsp), allow(dead_code))]
        Dsp,
    }

    impl Need {
        fn name(self) -> &'static str {
            match self {
                Need::Avx2 => "avx2+fma",
                Need::AvxVnni => "avx2+fma+avxvnni",
                Need::Avx512 => "avx512f",
                Need::Avx512Vnni => "avx512f+bw+vnni",
                Need::Neon => "neon",
                Need::Dsp => "the Arm DSP extension",
            }
        }

        /// The environment variable that turns a skip for want of this
        /// extension into a failure (x86-64 test binaries only for the x86
        /// extensions: the variables describe the machine CI runs on;
        /// `REQUIRE_ARM_DSP` for the Arm test binaries CI runs in QEMU).
        fn required_by(self) -> Option<&'static str> {
            match self {
                Need::Avx2 if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX2"),
                Need::AvxVnni if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX_VNNI"),
                Need::Avx512 if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX512"),
                Need::Avx512Vnni if cfg!(target_arch = "x86_64") => Some("REQUIRE_AVX512_VNNI"),
                Need::Dsp => Some("REQUIRE_ARM_DSP"),
                _ => None,
            }
        }
    }

    /// Whether a test (or the part of one) that needs `need` can run:
    /// `available` says whether the CPU has it under the ISA cap. When it
    /// cannot, prints `skipped: <test>: needs <extension>` to stderr (past
    /// the harness's capture) and returns `false`, or fails the test when
    /// the environment requires the extension (`REQUIRE_AVX2=1`,
    /// `REQUIRE_AVX512=1`; CI sets them on machines that have it, so
    /// nothing there is skipped unnoticed).
    pub(crate) fn can_run(need: Need, available: bool) -> bool {
        use std::io::Write;
        if available {
            return true;
        }
        let thread = std::thread::current();
        let test = thread.name().unwrap_or("<unnamed test>");
        let cap = max_isa();
        let why = if cap == Isa::Avx512 {
            std::format!("needs {}", need.name())
        } else {
            std::format!("needs {} ({}={})", need.name(), MAX_ISA_VAR, cap.name())
        };
        if let Some(var) = need.required_by()
            && std::env::var_os(var).is_some_and(|v| !v.is_empty() && v != "0")
        {
            panic!("{test}: {why}, which {var} requires");
        }
        // Straight to the stream: the test harness captures `eprintln!`
        // of passing tests, and a skip must show in a plain `cargo test`.
        let _ = writeln!(std::io::stderr(), "skipped: {test}: {why}");
        false
    }

    /// Runs `f`, a kernel call whose bounds do not hold: its
    /// `debug_assert!` stops it in debug builds; in release builds it
    /// returns (having written nothing, which the test then checks).
    #[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
    pub(crate) fn out_of_bounds(f: impl FnOnce()) {
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_err();
        assert_eq!(stopped, cfg!(debug_assertions), "a call out of bounds stopped: {stopped}");
    }

    /// [`can_run`] on the extension `token` proves, passing it on.
    #[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
    pub(crate) fn needs<T>(need: Need, token: Option<T>) -> Option<T> {
        can_run(need, token.is_some()).then_some(token).flatten()
    }

    /// The AVX2 kernels' token, or `None` after [`can_run`] reported the skip.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(crate) fn avx2() -> Option<avx2::Avx2> {
        needs(Need::Avx2, avx2::Avx2::detect())
    }

    /// The AVX-512 kernels' token, or `None` after [`can_run`] reported the
    /// skip.
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(crate) fn avx512() -> Option<avx512::Avx512> {
        needs(Need::Avx512, avx512::Avx512::detect())
    }

    /// The NEON kernels' token, or `None` after [`can_run`] reported the
    /// skip.
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    pub(crate) fn neon() -> Option<neon::Neon> {
        needs(Need::Neon, neon::Neon::detect())
    }

    /// Deterministic values in [-1, 1) with a few exact zeros, any length.
    pub(crate) fn fill(out: &mut [f32], seed: u32) {
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        for v in out.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = (x % 2001) as f32 / 1000.0 - 1.0;
        }
    }

    /// The Cortex-M float kernels (`VFMA.F32` assembly) replace the
    /// portable micro-kernels only under `cfg(onnx_codegen_arm_fma)`, so
    /// every portable-kernel test runs them then. A build without the cfg
    /// would test the portable code instead and still pass: CI sets
    /// `REQUIRE_ARM_FMA=1` with `+vfp4` so that cannot go unnoticed.
    #[test]
    fn arm_fma_kernels_are_built_when_required() {
        let built = cfg!(onnx_codegen_arm_fma);
        let required =
            std::env::var_os("REQUIRE_ARM_FMA").is_some_and(|v| !v.is_empty() && v != "0");
        if required && !built {
            panic!(
                "REQUIRE_ARM_FMA is set but the Arm FMA kernels are not built \
                 (a hard-float Arm target with +vfp4, or an FPv4/FPv5 M-profile core)"
            );
        }
        if !built && cfg!(target_arch = "arm") {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "skipped: the Arm FMA kernels: not built for this target"
            );
        }
    }

    #[test]
    fn winograd_bounds_hold_exactly_the_indices_touched() {
        // Two channels of 4x6 planes: rows 1..4 of the plane, 6 floats each.
        let src =
            TileRows { plane: 24, rows: [Some(6), Some(12), Some(18), None], w: 6, first: -1 };
        // V_15 of channel 1's tile 2 (at 3) is the last index: 15 * 10 + 40 + 3 + 2.
        let need = 15 * 10 + 40 + 3 + 3;
        assert!(src.input_fits(48, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 3, need - 1, 3, [10, 40]));
        assert!(!src.input_fits(47, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 0, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 0, 3, need, 3, [10, 40]));
        let past = TileRows { rows: [Some(19), None, None, None], ..src };
        assert!(!past.input_fits(48, 2, 3, need, 3, [10, 40]));
        assert!(!src.input_fits(48, 2, 3, usize::MAX, usize::MAX, [10, 40]));

        let (mut r0, mut r1) = ([0.0f32; 5], [0.0f32; 4]);
        let m_need = 15 * 8 + 2 + 3;
        assert!(TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need - 1, 2, 8, 3, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), Some(&mut r1)], 5));
        assert!(TileRows::output_fits(m_need, 2, 8, 3, &[Some(&mut r0), Some(&mut r1)], 4));
        assert!(!TileRows::output_fits(m_need, 2, 8, 2, &[Some(&mut r0), None], 5));
        assert!(!TileRows::output_fits(m_need, 2, 8, 0, &[None, None], 0));
        assert!(!TileRows::output_fits(usize::MAX, 2, usize::MAX, 3, &[None, None], 4));
    }

    #[test]
    fn evens_are_every_other_float() {
        let s: [f32; 32] = core::array::from_fn(|i| (i as f32 - 10.5) * 0.25);
        let mut d = [f32::NAN; 16];
        Evens::detect().copy(&mut d, &s);
        assert_eq!(d, core::array::from_fn(|i| s[2 * i]));
        let mut d = [f32::NAN; 16];
        Evens {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            unit: None,
        }
        .copy(&mut d, &s);
        assert_eq!(d, core::array::from_fn(|i| s[2 * i]));
    }
}
