//! What the vector kernels may run on: the CPU probe, the instruction-set
//! cap, and one token per instruction set.
//!
//! - The cap (here): the widest family of explicit vector kernels the
//!   dispatcher may choose, applied on top of what the CPU reports (see the
//!   [module documentation](super) for what it covers and what not).
//! - `cpu.rs`: the x86-64 probe (`cpuid`, `xgetbv`), capped.
//! - `avx2.rs`, `avx512.rs`, `neon.rs`: the tokens `avx2::Avx2`,
//!   `avx512::Avx512` and `neon::Neon`, and the lane helpers the
//!   kernels of that instruction set share (masks, even/odd splits, the
//!   activation in registers). A token is a zero-sized proof: a value
//!   exists only after the CPU was found to support the extension (under
//!   the cap), so a kernel holding one may call that extension's
//!   `#[target_feature]` functions and intrinsics. Every kernel takes its
//!   token from here, whatever algorithm it belongs to.
//! - `dsp.rs`: the Arm DSP extension's token `dsp::Dsp` and its
//!   packed-halves instructions (`SMLAD`, `SXTB16`), known at compile time
//!   (the build script's `cfg(onnx_codegen_arm_dsp)`) and emulated in plain
//!   Rust on other hosts so the DSP kernels' arithmetic is tested anywhere.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod cpu;
#[cfg(any(onnx_codegen_arm_dsp, test))]
pub(in crate::simd) mod dsp;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod neon;

use core::sync::atomic::{AtomicU8, Ordering};

/// A family of explicit vector kernels, ordered from none to the widest,
/// for [`set_max_isa`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// The portable kernels only: no AVX2, AVX-512, NEON or Arm DSP kernel
    /// runs.
    Portable,
    /// Up to AVX2 with FMA on x86-64 (as on Zen 3 or Haswell to Comet
    /// Lake). On aarch64 (whose only vector kernels are NEON's) this caps
    /// nothing, and neither does any cap from here up.
    Avx2,
    /// Up to AVX2 with FMA and AVX-VNNI (the 256-bit `vpdpbusd` of the
    /// int8 products), as on Alder Lake and later client cores: no
    /// AVX-512.
    AvxVnni,
    /// Up to AVX-512F: no cap.
    Avx512,
}

impl Isa {
    /// The name [`MAX_ISA_VAR`] takes for this cap: `portable`, `avx2`,
    /// `avxvnni` or `avx512`.
    pub const fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::AvxVnni => "avxvnni",
            Isa::Avx512 => "avx512",
        }
    }

    /// Every cap, from none to the widest.
    pub const ALL: [Isa; 4] = [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512];

    /// The cap [`Isa::name`] gives `name` (ASCII case ignored), if any.
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name().eq_ignore_ascii_case(name))
    }

    const fn from_bits(bits: u8) -> Option<Isa> {
        match bits {
            0 => Some(Isa::Portable),
            1 => Some(Isa::Avx2),
            2 => Some(Isa::AvxVnni),
            3 => Some(Isa::Avx512),
            _ => None,
        }
    }
}

/// The environment variable that sets the cap in `std` builds:
/// `portable`, `avx2`, `avxvnni` or `avx512` (ASCII case ignored); unset or empty, no
/// cap. It is read once, the first time a kernel asks for the cap (unless
/// [`set_max_isa`] ran before). Any other value caps at
/// [`Isa::Portable`] and prints a warning naming the variable and the values
/// it takes: a misspelt cap must not quietly test the widest path, and
/// generated code must not panic over its environment.
pub const MAX_ISA_VAR: &str = "ONNX_CODEGEN_MAX_ISA";

/// Whether the cap is read from [`MAX_ISA_VAR`] on first use.
const FROM_ENV: bool = cfg!(all(feature = "std", target_has_atomic = "8"));
/// [`CAP`] before it is read from the environment.
const UNSET: u8 = 0xff;

/// The cap as `Isa as u8`, or [`UNSET`].
static CAP: AtomicU8 = AtomicU8::new(if FROM_ENV { UNSET } else { Isa::Avx512 as u8 });

/// Caps the vector kernels the dispatcher chooses at `isa`, whatever the
/// CPU supports beyond it (it never enables what the CPU lacks):
/// `set_max_isa(Isa::Avx2)` runs the AVX2 kernels on an AVX-512 machine,
/// `Isa::Portable` the portable ones, `Isa::Avx512` lifts the cap.
///
/// For tests and comparisons: results on each path are within the
/// rounding [`simd`](super) describes. Takes effect for every kernel
/// called afterwards, on every thread; one already running finishes on
/// the path it chose. Call it while no kernel starts on another thread (a
/// kernel starting at that moment may keep the old cap in force). Overrides
/// [`MAX_ISA_VAR`].
pub fn set_max_isa(isa: Isa) {
    CAP.store(isa as u8, Ordering::Relaxed);
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    cpu::forget_cap();
}

/// The cap in effect: the last [`set_max_isa`], else [`MAX_ISA_VAR`]
/// (`std` builds), else [`Isa::Avx512`] (no cap).
#[inline]
pub fn max_isa() -> Isa {
    match Isa::from_bits(CAP.load(Ordering::Relaxed)) {
        Some(isa) => isa,
        None => from_env(),
    }
}

/// Reads [`MAX_ISA_VAR`] into [`CAP`], unless [`set_max_isa`] got there
/// first.
#[cold]
fn from_env() -> Isa {
    #[cfg(all(feature = "std", target_has_atomic = "8"))]
    {
        let isa = match std::env::var(MAX_ISA_VAR) {
            Err(std::env::VarError::NotPresent) => Isa::Avx512,
            Ok(v) if v.is_empty() => Isa::Avx512,
            Ok(v) => Isa::from_name(&v).unwrap_or_else(|| bad_var(&v)),
            Err(std::env::VarError::NotUnicode(v)) => bad_var(&v.to_string_lossy()),
        };
        match CAP.compare_exchange(UNSET, isa as u8, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => isa,
            Err(set) => Isa::from_bits(set).unwrap_or(isa),
        }
    }
    #[cfg(not(all(feature = "std", target_has_atomic = "8")))]
    Isa::Avx512
}

#[cfg(all(feature = "std", target_has_atomic = "8"))]
#[cold]
fn bad_var(v: &str) -> Isa {
    eprintln!(
        "warning: {MAX_ISA_VAR}={v:?} is not portable, avx2, avxvnni or avx512 (or unset or \
         empty, no cap): the kernels take the portable path"
    );
    Isa::Portable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::from_name(isa.name()), Some(isa));
            assert_eq!(Isa::from_bits(isa as u8), Some(isa));
        }
        assert_eq!(Isa::from_name("AVX2"), Some(Isa::Avx2));
        assert_eq!(Isa::from_name("avx-2"), None);
        assert_eq!(Isa::from_name(""), None);
        assert_eq!(Isa::from_bits(UNSET), None);
        assert!(Isa::ALL.windows(2).all(|w| w[0] < w[1]));
    }
}
