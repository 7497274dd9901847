//! The Arm DSP extension's token and its instructions on packed 16-bit
//! halves: `SXTB16`/`UXTB16` (bytes 0 and 2 of a word, or 1 and 3 after a
//! rotation, widened to two halves) and `SMLAD` (both halves' products
//! added to an accumulator), the two-multiply-accumulates-per-instruction
//! path of Cortex-M4/M7/M33 and ARMv7-A cores.
//!
//! Where the target has the extension (`cfg(onnx_codegen_arm_dsp)`, set by
//! the build script) each function is the one instruction, in inline
//! assembly. Elsewhere it is the same arithmetic in plain Rust, so that
//! the kernels built on them are tested bit for bit on any host; only the
//! Arm build dispatches to them.

#[cfg(onnx_codegen_arm_dsp)]
use crate::simd::Isa;

/// The DSP kernels. The extension is a compile-time property of the
/// target, so there is nothing to detect at run time but the ISA cap.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Dsp {
    _private: (),
}

impl Dsp {
    /// `Some` on targets with the DSP extension unless the ISA cap is
    /// [`Isa::Portable`].
    #[cfg(onnx_codegen_arm_dsp)]
    #[inline(always)]
    pub(crate) fn detect() -> Option<Dsp> {
        (crate::simd::max_isa() > Isa::Portable).then_some(Dsp { _private: () })
    }

    /// The token for testing the kernels' arithmetic on a host without
    /// the extension (the instructions are emulated there).
    #[cfg(all(test, not(onnx_codegen_arm_dsp)))]
    pub(crate) fn emulated() -> Dsp {
        Dsp { _private: () }
    }
}

#[cfg(onnx_codegen_arm_dsp)]
#[allow(unsafe_code)]
mod insn {
    use core::arch::asm;

    /// `SXTB16 d, x`: bytes 0 and 2, sign-extended, as the low and high half.
    #[inline(always)]
    pub(crate) fn sxtb16(x: u32) -> u32 {
        let d;
        // SAFETY: one register-to-register instruction the target has (the
        // build script's cfg); no memory, stack or flags are touched.
        unsafe {
            asm!("sxtb16 {d}, {x}", d = lateout(reg) d, x = in(reg) x,
                 options(nomem, nostack, preserves_flags));
        }
        d
    }

    /// `SXTB16 d, x, ROR #8`: bytes 1 and 3, sign-extended.
    #[inline(always)]
    pub(crate) fn sxtb16_ror8(x: u32) -> u32 {
        let d;
        // SAFETY: as in `sxtb16`.
        unsafe {
            asm!("sxtb16 {d}, {x}, ror #8", d = lateout(reg) d, x = in(reg) x,
                 options(nomem, nostack, preserves_flags));
        }
        d
    }

    /// `UXTB16 d, x`: bytes 0 and 2, zero-extended.
    #[inline(always)]
    pub(crate) fn uxtb16(x: u32) -> u32 {
        let d;
        // SAFETY: as in `sxtb16`.
        unsafe {
            asm!("uxtb16 {d}, {x}", d = lateout(reg) d, x = in(reg) x,
                 options(nomem, nostack, preserves_flags));
        }
        d
    }

    /// `UXTB16 d, x, ROR #8`: bytes 1 and 3, zero-extended.
    #[inline(always)]
    pub(crate) fn uxtb16_ror8(x: u32) -> u32 {
        let d;
        // SAFETY: as in `sxtb16`.
        unsafe {
            asm!("uxtb16 {d}, {x}, ror #8", d = lateout(reg) d, x = in(reg) x,
                 options(nomem, nostack, preserves_flags));
        }
        d
    }

    /// `SMLAD d, a, b, acc`: `acc + a.lo * b.lo + a.hi * b.hi` (signed
    /// halves, wrapping; it may set the sticky Q flag, which nothing reads).
    #[inline(always)]
    pub(crate) fn smlad(a: u32, b: u32, mut acc: i32) -> i32 {
        // SAFETY: one register-to-register instruction the target has; no
        // memory or stack is touched (only the Q flag may change).
        unsafe {
            asm!("smlad {acc}, {a}, {b}, {acc}", a = in(reg) a, b = in(reg) b,
                 acc = inout(reg) acc, options(nomem, nostack));
        }
        acc
    }

    /// `SMLABB d, a, b, acc`: `acc + a.lo * b.lo` (wrapping; Q as `smlad`).
    #[inline(always)]
    pub(crate) fn smlabb(a: u32, b: u32, mut acc: i32) -> i32 {
        // SAFETY: as in `smlad`.
        unsafe {
            asm!("smlabb {acc}, {a}, {b}, {acc}", a = in(reg) a, b = in(reg) b,
                 acc = inout(reg) acc, options(nomem, nostack));
        }
        acc
    }

    /// `SMLABT d, a, b, acc`: `acc + a.lo * b.hi`.
    #[inline(always)]
    pub(crate) fn smlabt(a: u32, b: u32, mut acc: i32) -> i32 {
        // SAFETY: as in `smlad`.
        unsafe {
            asm!("smlabt {acc}, {a}, {b}, {acc}", a = in(reg) a, b = in(reg) b,
                 acc = inout(reg) acc, options(nomem, nostack));
        }
        acc
    }

    /// `SMLATT d, a, b, acc`: `acc + a.hi * b.hi`.
    #[inline(always)]
    pub(crate) fn smlatt(a: u32, b: u32, mut acc: i32) -> i32 {
        // SAFETY: as in `smlad`.
        unsafe {
            asm!("smlatt {acc}, {a}, {b}, {acc}", a = in(reg) a, b = in(reg) b,
                 acc = inout(reg) acc, options(nomem, nostack));
        }
        acc
    }

    /// `SMLATB d, a, b, acc`: `acc + a.hi * b.lo`.
    #[inline(always)]
    pub(crate) fn smlatb(a: u32, b: u32, mut acc: i32) -> i32 {
        // SAFETY: as in `smlad`.
        unsafe {
            asm!("smlatb {acc}, {a}, {b}, {acc}", a = in(reg) a, b = in(reg) b,
                 acc = inout(reg) acc, options(nomem, nostack));
        }
        acc
    }
}

#[cfg(not(onnx_codegen_arm_dsp))]
mod insn {
    //! The instructions' definitions in plain Rust (see the module
    //! documentation of the parent).

    use super::halves;

    pub(crate) fn sxtb16(x: u32) -> u32 {
        halves(i32::from(x as u8 as i8), i32::from((x >> 16) as u8 as i8))
    }

    pub(crate) fn sxtb16_ror8(x: u32) -> u32 {
        sxtb16(x.rotate_right(8))
    }

    pub(crate) fn uxtb16(x: u32) -> u32 {
        x & 0x00ff_00ff
    }

    pub(crate) fn uxtb16_ror8(x: u32) -> u32 {
        uxtb16(x.rotate_right(8))
    }

    pub(crate) fn smlad(a: u32, b: u32, acc: i32) -> i32 {
        let (alo, ahi) = (i32::from(a as u16 as i16), i32::from((a >> 16) as u16 as i16));
        let (blo, bhi) = (i32::from(b as u16 as i16), i32::from((b >> 16) as u16 as i16));
        acc.wrapping_add(alo * blo).wrapping_add(ahi * bhi)
    }

    pub(crate) fn smlabb(a: u32, b: u32, acc: i32) -> i32 {
        acc.wrapping_add(i32::from(a as u16 as i16) * i32::from(b as u16 as i16))
    }

    pub(crate) fn smlatb(a: u32, b: u32, acc: i32) -> i32 {
        acc.wrapping_add(i32::from((a >> 16) as u16 as i16) * i32::from(b as u16 as i16))
    }

    pub(crate) fn smlabt(a: u32, b: u32, acc: i32) -> i32 {
        acc.wrapping_add(i32::from(a as u16 as i16) * i32::from((b >> 16) as u16 as i16))
    }

    pub(crate) fn smlatt(a: u32, b: u32, acc: i32) -> i32 {
        acc.wrapping_add(i32::from((a >> 16) as u16 as i16) * i32::from((b >> 16) as u16 as i16))
    }
}

/// Bytes 0 and 2 of `w`, and bytes 1 and 3, each pair as two halves:
/// sign-extended when `SIGNED` (`i8` data), else zero-extended (`u8`).
#[inline(always)]
pub(crate) fn split<const SIGNED: bool>(w: u32) -> (u32, u32) {
    if SIGNED { (sxtb16(w), sxtb16_ror8(w)) } else { (uxtb16(w), uxtb16_ror8(w)) }
}

/// Two `i32`s (each within `i16`) as the low and high half of a word.
#[inline(always)]
pub(crate) fn halves(lo: i32, hi: i32) -> u32 {
    u32::from(lo as u16) | u32::from(hi as u16) << 16
}

pub(crate) use insn::{
    smlabb, smlabt, smlad, smlatb, smlatt, sxtb16, sxtb16_ror8, uxtb16, uxtb16_ror8,
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The instructions (or their emulation) against their definitions
    /// written another way: on an Arm build this checks the assembly.
    #[test]
    fn instructions_match_their_definitions() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..10_000 {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let (x, y, acc) = (s as u32, (s >> 32) as u32, (s >> 16) as i32);
            let b = x.to_le_bytes();
            let sx = |v: u8| i32::from(v as i8) as u16 as u32;
            let ux = |v: u8| u32::from(v);
            assert_eq!(sxtb16(x), sx(b[0]) | sx(b[2]) << 16);
            assert_eq!(sxtb16_ror8(x), sx(b[1]) | sx(b[3]) << 16);
            assert_eq!(uxtb16(x), ux(b[0]) | ux(b[2]) << 16);
            assert_eq!(uxtb16_ror8(x), ux(b[1]) | ux(b[3]) << 16);
            let lo = |v: u32| i64::from(v as u16 as i16);
            let hi = |v: u32| i64::from((v >> 16) as u16 as i16);
            let want = i64::from(acc) + lo(x) * lo(y) + hi(x) * hi(y);
            assert_eq!(smlad(x, y, acc), want as i32);
            assert_eq!(smlabb(x, y, acc), (i64::from(acc) + lo(x) * lo(y)) as i32);
            assert_eq!(smlatb(x, y, acc), (i64::from(acc) + hi(x) * lo(y)) as i32);
            assert_eq!(smlabt(x, y, acc), (i64::from(acc) + lo(x) * hi(y)) as i32);
            assert_eq!(smlatt(x, y, acc), (i64::from(acc) + hi(x) * hi(y)) as i32);
        }
    }
}
