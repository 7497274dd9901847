//! The depthwise 3x3 rows of [`super::portable`] on an Arm FPU with fused
//! multiply-add (`cfg(onnx_codegen_arm_fma)`, Cortex-M4F and the like):
//! the nine weights and the bias in registers for the row, each staged
//! row read with one multi-register load (`VLDM`) per block of outputs
//! (four at stride 1, two at stride 2), one `VMUL` and eight `VFMA` per
//! output. About 1.4 to 1.6 instructions per multiply-add where the
//! multiply-then-add loop took about 4.
//!
//! `asm!` as in `gemm::micro::arm` (stable Rust neither fuses nor names
//! floating-point registers on Arm): addresses and counts in general
//! registers, the FPU registers saved on the stack and restored.

use core::arch::asm;

/// `y[o] = sum_{ky, kx} w[3 ky + kx] * r[ky][S o + kx] + bias` for
/// `o < y.len()`, taps in row-major order, one rounding per tap (the first
/// a plain product). Does nothing unless each staged row holds
/// `S (y.len() - 1) + 3` floats and `S` is 1 or 2.
#[inline(always)]
pub(super) fn row<const S: usize>(w: &[f32; 9], bias: f32, r: [&[f32]; 3], y: &mut [f32]) {
    let n = y.len();
    let need = (S * n.saturating_sub(1)).saturating_add(3);
    if n == 0 || !(S == 1 || S == 2) || r.iter().any(|row| row.len() < need) {
        return;
    }
    let [r0, r1, r2] = r.map(<[f32]>::as_ptr);
    let (w, bias, y) = (w.as_ptr(), bias.to_bits(), y.as_mut_ptr());
    if S == 1 {
        // SAFETY: blocks of four outputs from `o` read staged columns
        // `o..o + 6` while `o + 4 <= n`, single outputs `o..o + 3` for
        // `o < n`: all below `n + 2 = need`; the stores write `y[..n]`;
        // the weights are 9 floats. s0-s31 are saved and restored on the
        // stack; the general registers are scratch copies; flags clobbered.
        unsafe {
            asm!(
                "vpush {{s0-s31}}",
                "vldmia {w}, {{s18-s26}}",
                "vmov s27, {bias}",
                "lsrs {blocks}, {n}, #2",
                "beq 2f",
                "1:",
                "vldmia {r0}, {{s0-s5}}",
                "add {r0}, {r0}, #16",
                "vldmia {r1}, {{s6-s11}}",
                "add {r1}, {r1}, #16",
                "vldmia {r2}, {{s12-s17}}",
                "add {r2}, {r2}, #16",
                "vmul.f32 s28, s18, s0",
                "vfma.f32 s28, s19, s1",
                "vfma.f32 s28, s20, s2",
                "vfma.f32 s28, s21, s6",
                "vfma.f32 s28, s22, s7",
                "vfma.f32 s28, s23, s8",
                "vfma.f32 s28, s24, s12",
                "vfma.f32 s28, s25, s13",
                "vfma.f32 s28, s26, s14",
                "vmul.f32 s29, s18, s1",
                "vfma.f32 s29, s19, s2",
                "vfma.f32 s29, s20, s3",
                "vfma.f32 s29, s21, s7",
                "vfma.f32 s29, s22, s8",
                "vfma.f32 s29, s23, s9",
                "vfma.f32 s29, s24, s13",
                "vfma.f32 s29, s25, s14",
                "vfma.f32 s29, s26, s15",
                "vmul.f32 s30, s18, s2",
                "vfma.f32 s30, s19, s3",
                "vfma.f32 s30, s20, s4",
                "vfma.f32 s30, s21, s8",
                "vfma.f32 s30, s22, s9",
                "vfma.f32 s30, s23, s10",
                "vfma.f32 s30, s24, s14",
                "vfma.f32 s30, s25, s15",
                "vfma.f32 s30, s26, s16",
                "vmul.f32 s31, s18, s3",
                "vfma.f32 s31, s19, s4",
                "vfma.f32 s31, s20, s5",
                "vfma.f32 s31, s21, s9",
                "vfma.f32 s31, s22, s10",
                "vfma.f32 s31, s23, s11",
                "vfma.f32 s31, s24, s15",
                "vfma.f32 s31, s25, s16",
                "vfma.f32 s31, s26, s17",
                "vadd.f32 s28, s28, s27",
                "vadd.f32 s29, s29, s27",
                "vadd.f32 s30, s30, s27",
                "vadd.f32 s31, s31, s27",
                "vstmia {y}!, {{s28-s31}}",
                "subs {blocks}, #1",
                "bne 1b",
                "2:",
                "ands {n}, {n}, #3",
                "beq 4f",
                "3:",
                "vldmia {r0}, {{s0-s2}}",
                "add {r0}, {r0}, #4",
                "vldmia {r1}, {{s6-s8}}",
                "add {r1}, {r1}, #4",
                "vldmia {r2}, {{s12-s14}}",
                "add {r2}, {r2}, #4",
                "vmul.f32 s28, s18, s0",
                "vfma.f32 s28, s19, s1",
                "vfma.f32 s28, s20, s2",
                "vfma.f32 s28, s21, s6",
                "vfma.f32 s28, s22, s7",
                "vfma.f32 s28, s23, s8",
                "vfma.f32 s28, s24, s12",
                "vfma.f32 s28, s25, s13",
                "vfma.f32 s28, s26, s14",
                "vadd.f32 s28, s28, s27",
                "vstmia {y}!, {{s28}}",
                "subs {n}, #1",
                "bne 3b",
                "4:",
                "vpop {{s0-s31}}",
                w = in(reg) w,
                bias = in(reg) bias,
                n = inout(reg) n => _,
                blocks = out(reg) _,
                r0 = inout(reg) r0 => _,
                r1 = inout(reg) r1 => _,
                r2 = inout(reg) r2 => _,
                y = inout(reg) y => _,
            );
        }
    } else {
        // SAFETY: blocks of two outputs from `o` read staged columns
        // `2 o..2 o + 5` while `o + 2 <= n`, the last single output
        // `2 o..2 o + 3` for `o < n`: all below `2 n + 1 = need`; the
        // stores write `y[..n]`; the weights are 9 floats. s0-s31 are saved
        // and restored on the stack; the general registers are scratch
        // copies; flags clobbered.
        unsafe {
            asm!(
                "vpush {{s0-s31}}",
                "vldmia {w}, {{s18-s26}}",
                "vmov s27, {bias}",
                "lsrs {blocks}, {n}, #1",
                "beq 2f",
                "1:",
                "vldmia {r0}, {{s0-s4}}",
                "add {r0}, {r0}, #16",
                "vldmia {r1}, {{s5-s9}}",
                "add {r1}, {r1}, #16",
                "vldmia {r2}, {{s10-s14}}",
                "add {r2}, {r2}, #16",
                "vmul.f32 s28, s18, s0",
                "vfma.f32 s28, s19, s1",
                "vfma.f32 s28, s20, s2",
                "vfma.f32 s28, s21, s5",
                "vfma.f32 s28, s22, s6",
                "vfma.f32 s28, s23, s7",
                "vfma.f32 s28, s24, s10",
                "vfma.f32 s28, s25, s11",
                "vfma.f32 s28, s26, s12",
                "vmul.f32 s29, s18, s2",
                "vfma.f32 s29, s19, s3",
                "vfma.f32 s29, s20, s4",
                "vfma.f32 s29, s21, s7",
                "vfma.f32 s29, s22, s8",
                "vfma.f32 s29, s23, s9",
                "vfma.f32 s29, s24, s12",
                "vfma.f32 s29, s25, s13",
                "vfma.f32 s29, s26, s14",
                "vadd.f32 s28, s28, s27",
                "vadd.f32 s29, s29, s27",
                "vstmia {y}!, {{s28-s29}}",
                "subs {blocks}, #1",
                "bne 1b",
                "2:",
                "ands {n}, {n}, #1",
                "beq 4f",
                "vldmia {r0}, {{s0-s2}}",
                "vldmia {r1}, {{s5-s7}}",
                "vldmia {r2}, {{s10-s12}}",
                "vmul.f32 s28, s18, s0",
                "vfma.f32 s28, s19, s1",
                "vfma.f32 s28, s20, s2",
                "vfma.f32 s28, s21, s5",
                "vfma.f32 s28, s22, s6",
                "vfma.f32 s28, s23, s7",
                "vfma.f32 s28, s24, s10",
                "vfma.f32 s28, s25, s11",
                "vfma.f32 s28, s26, s12",
                "vadd.f32 s28, s28, s27",
                "vstmia {y}!, {{s28}}",
                "4:",
                "vpop {{s0-s31}}",
                w = in(reg) w,
                bias = in(reg) bias,
                n = inout(reg) n => _,
                blocks = out(reg) _,
                r0 = inout(reg) r0 => _,
                r1 = inout(reg) r1 => _,
                r2 = inout(reg) r2 => _,
                y = inout(reg) y => _,
            );
        }
    }
}
