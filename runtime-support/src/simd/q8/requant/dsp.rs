//! The output stage of a row on the Arm DSP extension (Cortex-M4/M7/M33),
//! in assembly: LLVM unrolled the loop eight times and spilled the stage's
//! constants (61 instructions for eight outputs on the Cortex-M4); here
//! four outputs take 23: one `LDM`, and per output an `ADD`, an `SMMLA`
//! (the high word of the product plus the folded rounding and zero
//! point), an `ASR` and an `SSAT` (`USAT` for `u8`) and a `STRB`.

use crate::int8::Q8;

/// `dst[i] = sat_Y((((acc[i] + add) mult) >> 32) + c) >> sh)` for `i` below
/// the largest multiple of four within both slices; returns that count.
/// `sat_Y` saturates to `Y`'s range and the byte stored is `Y`'s bits,
/// [`super::stage_row`]'s folded form with no bound but `Y`'s own.
#[inline(always)]
pub(super) fn high_quads<Y: Q8>(
    acc: &[i32],
    dst: &mut [u8],
    add: i32,
    mult: i32,
    c: i32,
    sh: u32,
) -> usize {
    debug_assert!((1..=31).contains(&sh), "q8 row stage shift {sh}");
    let quads = dst.len().min(acc.len()) / 4;
    if quads == 0 {
        return 0;
    }
    macro_rules! body {
        ($sat:literal) => {
            // SAFETY: reads `acc[..4 quads]` (word-aligned, as `LDM` needs:
            // an `i32` slice) and writes `dst[..4 quads]`, both within the
            // slices (`quads` is at most each length over four); the
            // pointers and the count are moved past them and dropped.
            // Registers only besides (flags: `SUBS`, and `SSAT`/`USAT`'s
            // sticky Q, which nothing reads). `r0`-`r3` are plain outputs,
            // so no input is given one of them.
            unsafe {
                core::arch::asm!(
                    "2:",
                    "ldm {a}!, {{r0, r1, r2, r3}}",
                    "add r0, r0, {add}",
                    "add r1, r1, {add}",
                    "add r2, r2, {add}",
                    "add r3, r3, {add}",
                    "smmla r0, r0, {mult}, {c}",
                    "smmla r1, r1, {mult}, {c}",
                    "smmla r2, r2, {mult}, {c}",
                    "smmla r3, r3, {mult}, {c}",
                    "asr r0, r0, {sh}",
                    "asr r1, r1, {sh}",
                    "asr r2, r2, {sh}",
                    "asr r3, r3, {sh}",
                    concat!($sat, " r0, #8, r0"),
                    concat!($sat, " r1, #8, r1"),
                    concat!($sat, " r2, #8, r2"),
                    concat!($sat, " r3, #8, r3"),
                    "strb r0, [{d}], #1",
                    "strb r1, [{d}], #1",
                    "strb r2, [{d}], #1",
                    "strb r3, [{d}], #1",
                    "subs {n}, {n}, #1",
                    "bne 2b",
                    a = inout(reg) acc.as_ptr() => _,
                    d = inout(reg) dst.as_mut_ptr() => _,
                    n = inout(reg) quads => _,
                    add = in(reg) add,
                    mult = in(reg) mult,
                    c = in(reg) c,
                    sh = in(reg) sh,
                    out("r0") _,
                    out("r1") _,
                    out("r2") _,
                    out("r3") _,
                    options(nostack),
                );
            }
        };
    }
    if Y::SIGNED {
        body!("ssat");
    } else {
        body!("usat");
    }
    4 * quads
}
