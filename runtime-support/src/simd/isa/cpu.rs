//! Run-time detection of the x86-64 vector extensions the kernels use, from
//! `cpuid` and `xgetbv` in `core`: it works in `no_std` builds too, so a
//! plain `cargo build --release` of any crate gets the AVX2 or AVX-512
//! kernels on a CPU that has them, with or without the `std` feature.
//!
//! An extension counts only when the CPU reports it and the operating
//! system saves its registers (XCR0): the vector state of a kernel that
//! never enabled AVX would not survive a context switch. The kernels see
//! it only under the ISA cap ([`super::set_max_isa`]).

use super::Isa;
use core::arch::x86_64::{__cpuid, __cpuid_count, _xgetbv};
use core::sync::atomic::{AtomicU8, Ordering};

/// AVX2 and FMA, with the `ymm` state saved by the OS.
pub(crate) const AVX2_FMA: u8 = 1;
/// AVX-512F (and AVX2 and FMA), with the `zmm` and mask state saved.
pub(crate) const AVX512F: u8 = 2;
/// AVX-512F on a core that runs 512-bit operations as two 256-bit halves
/// (AMD family 19h, Zen 4): the FMAs keep half of Zen 5's width, and moving
/// whole vectors (packing, staging) costs more still. A tuning hint for
/// cost models, never a correctness matter.
pub(crate) const SPLIT512: u8 = 4;
/// AVX-512BW and AVX-512 VNNI (on top of [`AVX512F`]), with the same
/// state saved: the int8 products' `vpdpbusd`.
pub(crate) const AVX512VNNI: u8 = 8;
/// AVX-VNNI (on top of [`AVX2_FMA`]): the VEX-encoded 256-bit `vpdpbusd`
/// of cores without AVX-512 (Alder Lake and later client cores, Zen 5),
/// which AVX-512 cores may have as well.
pub(crate) const AVXVNNI: u8 = 16;
/// Set once the probe has run.
const PROBED: u8 = 0x80;

/// What this CPU and OS support, with [`PROBED`] once probed.
static SUPPORTED: AtomicU8 = AtomicU8::new(0);
/// What the kernels may use under the cap, with [`PROBED`]; 0 until
/// computed, and again after [`forget_cap`]. One load on the hot path: the
/// dispatch runs on every kernel call, so the cap costs nothing there.
static FEATURES: AtomicU8 = AtomicU8::new(0);

/// The extensions the kernels may use: those this CPU and OS support
/// ([`supported`]) up to the ISA cap ([`super::max_isa`]). Hints about an
/// extension ([`SPLIT512`]) go with it.
#[inline]
pub(crate) fn features() -> u8 {
    let f = FEATURES.load(Ordering::Relaxed);
    if f & PROBED != 0 {
        return f;
    }
    capped()
}

#[cold]
fn capped() -> u8 {
    let allowed = match super::max_isa() {
        Isa::Portable => 0,
        Isa::Avx2 => AVX2_FMA,
        Isa::AvxVnni => AVX2_FMA | AVXVNNI,
        Isa::Avx512 => AVX2_FMA | AVXVNNI | AVX512F | SPLIT512 | AVX512VNNI,
    };
    let f = (supported() & allowed) | PROBED;
    FEATURES.store(f, Ordering::Relaxed);
    f
}

/// Drops the capped features, so the next [`features`] applies a new cap.
pub(crate) fn forget_cap() {
    FEATURES.store(0, Ordering::Relaxed);
}

/// The extensions this CPU and OS support, probed once and then cached.
#[inline]
fn supported() -> u8 {
    let f = SUPPORTED.load(Ordering::Relaxed);
    if f & PROBED != 0 {
        return f;
    }
    let f = probe() | PROBED;
    SUPPORTED.store(f, Ordering::Relaxed);
    f
}

#[cold]
// `cpuid` is an unsafe intrinsic on older toolchains (MSRV 1.89), safe on
// newer ones.
#[allow(unused_unsafe)]
fn probe() -> u8 {
    // SAFETY: `cpuid` exists on every x86-64 CPU; leaf 0 gives the highest
    // leaf, checked before leaf 7 is read.
    let l0 = unsafe { __cpuid(0) };
    let max_leaf = l0.eax;
    if max_leaf < 7 {
        return 0;
    }
    // SAFETY: as above, leaves 1 and 7 are within `max_leaf`; sub-leaf 1
    // of leaf 7 reads as zeros where it does not exist.
    let (l1, l7, l7s1) = unsafe { (__cpuid(1), __cpuid_count(7, 0), __cpuid_count(7, 1)) };
    let bit = |reg: u32, b: u32| reg & (1 << b) != 0;
    // OSXSAVE: the OS enabled XSAVE, so `xgetbv` may run.
    if !bit(l1.ecx, 27) {
        return 0;
    }
    // SAFETY: OSXSAVE is set (checked above), so `xgetbv` is available.
    let xcr0 = unsafe { xcr0() };
    let ymm_saved = xcr0 & 0b110 == 0b110;
    // Opmask, upper halves of zmm0-15, and zmm16-31.
    let zmm_saved = ymm_saved && xcr0 & 0b1110_0000 == 0b1110_0000;
    let avx2_fma = ymm_saved && bit(l1.ecx, 28) && bit(l1.ecx, 12) && bit(l7.ebx, 5);
    let mut f = 0;
    if avx2_fma {
        f |= AVX2_FMA;
        // AVX-VNNI: leaf 7, sub-leaf 1, EAX bit 4.
        if bit(l7s1.eax, 4) {
            f |= AVXVNNI;
        }
        if zmm_saved && bit(l7.ebx, 16) {
            f |= AVX512F;
            // The vendor string "AuthenticAMD", in EBX, EDX, ECX order.
            let amd = (l0.ebx, l0.edx, l0.ecx) == (0x6874_7541, 0x6974_6e65, 0x444d_4163);
            // Family: the base field, plus the extended one when the base is 0xF.
            let base = (l1.eax >> 8) & 0xf;
            let family = if base == 0xf { base + ((l1.eax >> 20) & 0xff) } else { base };
            if amd && family == 0x19 {
                f |= SPLIT512;
            }
            if bit(l7.ebx, 30) && bit(l7.ecx, 11) {
                f |= AVX512VNNI;
            }
        }
    }
    f
}

/// XCR0, the state components the OS saves.
///
/// # Safety
/// CPUID reported OSXSAVE.
#[target_feature(enable = "xsave")]
unsafe fn xcr0() -> u64 {
    // SAFETY: the caller checked OSXSAVE, which `xgetbv` needs.
    unsafe { _xgetbv(0) }
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_std_detection() {
        let std_avx2 =
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma");
        let std_avx512 = std_avx2 && std::is_x86_feature_detected!("avx512f");
        let f = supported();
        assert_eq!(f & AVX2_FMA != 0, std_avx2);
        assert_eq!(f & AVX512F != 0, std_avx512);
        let std_vnni = std_avx512
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512vnni");
        assert_eq!(f & AVX512VNNI != 0, std_vnni);
        let std_avx_vnni = std_avx2 && std::is_x86_feature_detected!("avxvnni");
        assert_eq!(f & AVXVNNI != 0, std_avx_vnni);
        // Cached: the same answer again.
        assert_eq!(supported(), f);
        // What the kernels see: no more than the CPU and the cap allow.
        let seen = features();
        assert_eq!(seen & !f, 0);
        assert_eq!(seen & AVX2_FMA != 0, std_avx2 && super::super::max_isa() >= Isa::Avx2);
        assert_eq!(seen & AVX512F != 0, std_avx512 && super::super::max_isa() >= Isa::Avx512);
        assert_eq!(seen & AVXVNNI != 0, std_avx_vnni && super::super::max_isa() >= Isa::AvxVnni);
    }
}
