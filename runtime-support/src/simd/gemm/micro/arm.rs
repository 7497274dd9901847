//! The Cortex-M float micro-kernel (`cfg(onnx_codegen_arm_fma)`: a
//! hard-float FPU with `VFMA.F32`, e.g. Cortex-M4F/M7F/M33F): a 4x4 tile
//! whose 16 sums stay in `s0`-`s15` over all of `k`, fed by multi-register
//! loads (`VLDM`) of A and of the packed B strip, one fused multiply-add per
//! multiply-add. Two steps of `k` per loop pass: 32 `VFMA` for 5 or 6 loads
//! and the loop's own two instructions, about 1.2 instructions per
//! multiply-add where the portable kernel (multiply, then add, an address
//! computed and bounds checked per load) took about 4.
//!
//! The loops are `asm!`: stable Rust neither fuses `a * b + c` nor lets
//! `asm!` name floating-point registers on Arm (the FPU's target features
//! are unstable there), so each block takes only addresses and counts in
//! general registers, saves the FPU registers it uses on the stack and
//! restores them. Its sums are fused (one rounding per step): not
//! bit-exact with the portable kernel, which [`crate::simd::uses_fma`]
//! reports.

use core::arch::asm;
use core::mem::MaybeUninit;

use crate::simd::Isa;

/// One step of `k` into the tile's sums `s0`-`s15`: `s(4 r + c) += a_r
/// b_c`, the sixteen `VFMA.F32` lines of an `asm!` block, for the
/// registers named (A's four rows, then B's four columns).
macro_rules! outer4 {
    ($a0:literal, $a1:literal, $a2:literal, $a3:literal;
     $b0:literal, $b1:literal, $b2:literal, $b3:literal) => {
        concat!(
            outer4!(@row "s0", "s1", "s2", "s3", $a0; $b0, $b1, $b2, $b3),
            outer4!(@row "s4", "s5", "s6", "s7", $a1; $b0, $b1, $b2, $b3),
            outer4!(@row "s8", "s9", "s10", "s11", $a2; $b0, $b1, $b2, $b3),
            outer4!(@row "s12", "s13", "s14", "s15", $a3; $b0, $b1, $b2, $b3),
        )
    };
    (@row $s0:literal, $s1:literal, $s2:literal, $s3:literal, $a:literal;
     $b0:literal, $b1:literal, $b2:literal, $b3:literal) => {
        concat!(
            "vfma.f32 ", $s0, ", ", $a, ", ", $b0, "\n",
            "vfma.f32 ", $s1, ", ", $a, ", ", $b1, "\n",
            "vfma.f32 ", $s2, ", ", $a, ", ", $b2, "\n",
            "vfma.f32 ", $s3, ", ", $a, ", ", $b3, "\n",
        )
    };
}

use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;

/// The Cortex-M float micro-kernel: `4 x 4` fused sums, or, under the
/// ISA cap `Isa::Portable`, multiply then add in the portable kernel's
/// order (one type for both, so the product driver is built once).
#[derive(Clone, Copy)]
pub(crate) struct ArmFma {
    fused: bool,
}

impl ArmFma {
    /// The kernel under the ISA cap: fused unless it is
    /// [`Isa::Portable`] (the FPU is a compile-time property of the
    /// target: nothing else to detect).
    #[inline(always)]
    pub(crate) fn new() -> ArmFma {
        ArmFma { fused: fma_allowed() }
    }

    /// The multiply-then-add kernel, bit for bit the portable one's sums.
    #[cfg(test)]
    pub(crate) fn exact() -> ArmFma {
        ArmFma { fused: false }
    }
}

/// Whether the fused kernels may run: the ISA cap is above
/// [`Isa::Portable`].
#[inline(always)]
pub(crate) fn fma_allowed() -> bool {
    crate::simd::max_isa() > Isa::Portable
}

impl Micro for ArmFma {
    const MR: usize = 4;
    const NR: usize = 4;
    const MC: usize = 64;
    const KC: usize = 256;

    #[inline]
    fn kernel(self, t: Tile<'_>) {
        let Tile {
            kc,
            a: ARows { data: a, rows, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        debug_assert_eq!(ldb, 4, "Cortex-M tile: B a packed strip 4 wide");
        debug_assert!(rows.len() >= 4, "Cortex-M tile: 4 rows of A");
        let (Some(b), Some(&[r0, r1, r2, r3])) = (b.get(..kc * 4), rows.get(..4)) else {
            return;
        };
        if ldb != 4 || kc == 0 {
            return;
        }
        let (nrows, ncols) = (nrows.min(4), ncols.min(4));
        // The starting sums: the partial ones in `dst`, or zeros.
        let start;
        let from: &[[f32; 4]; 4] = if load {
            start = partial(dst, ldd, nrows, ncols);
            &start
        } else {
            &ZEROS
        };
        // Whether a row's last step lies within A.
        let last = (kc - 1).checked_mul(cs);
        let within = |r: usize| last.and_then(|e| r.checked_add(e)).is_some_and(|v| v < a.len());
        let rs = [r0, r1, r2, r3];
        // The tile's real rows adjacent (weights in panels, a transposed
        // A); the rows past them, whose sums are dropped, are then read
        // from the panel's padding or the next rows where A has them.
        let adjacent = match nrows {
            4 => r1 == r0.wrapping_add(1) && r2 == r0.wrapping_add(2) && r3 == r0.wrapping_add(3),
            _ => rs.iter().take(nrows).enumerate().all(|(i, &r)| r == r0.wrapping_add(i)),
        };
        let fused = self.fused;
        let mut acc = if fused
            && adjacent
            && cs != 1
            && cs <= a.len()
            && r0.checked_add(3).is_some_and(within)
        {
            sums_panel(from, a, r0, cs, b, kc)
        } else if fused && cs == 1 && within(r0.max(r1).max(r2.max(r3))) {
            sums_rows(from, a, rs, b, kc)
        } else {
            let mut acc = *from;
            // Rows of A scattered and strided, or the cap: multiply, then
            // add (the portable kernel's arithmetic).
            for (p, bp) in b.chunks_exact(4).enumerate() {
                let off = p * cs;
                let av: [f32; 4] =
                    core::array::from_fn(|i| a.get(rs[i] + off).copied().unwrap_or(0.0));
                for i in 0..4 {
                    for c in 0..4 {
                        acc[i][c] += av[i] * bp[c];
                    }
                }
            }
            acc
        };
        // The epilogue in registers unless it has C or a smooth activation
        // (a call per row of four outputs cost as much as 40 steps of `k`).
        let tail = match tail {
            Some(t) if t.epi.c.is_none() && t.epi.smooth.is_none() => {
                in_registers(&mut acc, t, nrows, ncols);
                None
            }
            t => t,
        };
        for (r, row) in acc.iter().enumerate().take(nrows) {
            let at = r * ldd;
            match dst.get_mut(at..at + 4).map(<&mut [f32; 4]>::try_from) {
                Some(Ok(d)) if ncols == 4 => *d = *row,
                _ => {
                    for (c, v) in row.iter().enumerate().take(ncols) {
                        if let Some(t) = dst.get_mut(at + c) {
                            *t = *v;
                        }
                    }
                }
            }
        }
        finish(dst, ldd, nrows, ncols, tail);
    }
}

/// The sums of a tile that start from zero.
static ZEROS: [[f32; 4]; 4] = [[0.0; 4]; 4];

/// The partial sums of the tile's `nrows x ncols` outputs in `dst` (rows
/// `ldd` apart), zero past them.
#[inline(always)]
fn partial(dst: &[f32], ldd: usize, nrows: usize, ncols: usize) -> [[f32; 4]; 4] {
    let mut acc = [[0.0f32; 4]; 4];
    for (r, row) in acc.iter_mut().enumerate().take(nrows) {
        let at = r * ldd;
        match dst.get(at..at + 4).map(<&[f32; 4]>::try_from) {
            Some(Ok(d)) if ncols == 4 => *row = *d,
            _ => {
                for (c, v) in row.iter_mut().enumerate().take(ncols) {
                    *v = dst.get(at + c).copied().unwrap_or(0.0);
                }
            }
        }
    }
    acc
}

/// `t`'s epilogue without C and the smooth activation, on the sums of
/// the tile's `nrows x ncols` outputs: `act(alpha * acc + bias[i] + R(i,
/// j))`, each step skipped when absent, as `Epilogue::row` computes it.
/// Each step runs over the whole tile at once (the sums stay in
/// registers); the rows and columns past the tile's are computed and
/// dropped.
#[inline(always)]
fn in_registers(acc: &mut [[f32; 4]; 4], t: Tail<'_>, nrows: usize, ncols: usize) {
    let e = t.epi;
    if e.alpha != 1.0 {
        for v in acc.as_flattened_mut() {
            *v *= e.alpha;
        }
    }
    if let Some(b) = e.row_bias {
        let bias = match b.get(t.i0..t.i0 + 4) {
            Some(&[b0, b1, b2, b3]) => [b0, b1, b2, b3],
            _ => core::array::from_fn(|r| b.get(t.i0 + r).copied().unwrap_or(0.0)),
        };
        for (row, b) in acc.iter_mut().zip(bias) {
            for v in row {
                *v += b;
            }
        }
    }
    if let Some(x) = e.res {
        for (r, row) in acc.iter_mut().enumerate().take(nrows) {
            let base = (t.i0 + r) * x.rs + t.j0;
            match x.data.get(base..base + 4) {
                Some(src) if ncols == 4 => {
                    for (v, s) in row.iter_mut().zip(src) {
                        *v += *s;
                    }
                }
                _ => {
                    for (c, v) in row.iter_mut().enumerate().take(ncols) {
                        *v += x.data.get(base + c).copied().unwrap_or(0.0);
                    }
                }
            }
        }
    }
    match e.act {
        Activation::None => {}
        Activation::Relu => {
            for v in acc.as_flattened_mut() {
                *v = Activation::Relu.apply(*v);
            }
        }
        act => {
            for v in acc.as_flattened_mut() {
                *v = act.apply(*v);
            }
        }
    }
}

/// `from[i][c] + sum_p a[rs[i] + p] * b[4 p + c]` for `p < kc` (at least
/// 1), each row of A contiguous: per two steps one two-register load per
/// row and one eight-register load of B. The caller has checked that
/// `rs[i] + kc - 1` lies within `a` for every row and that `b` holds
/// `4 kc` floats.
#[inline(always)]
fn sums_rows(
    from: &[[f32; 4]; 4],
    a: &[f32],
    rs: [usize; 4],
    b: &[f32],
    kc: usize,
) -> [[f32; 4]; 4] {
    debug_assert!(kc > 0 && rs.iter().all(|&r| r + kc <= a.len()) && b.len() >= 4 * kc);
    let base = a.as_ptr();
    // Each row's start lies within `a` (checked by the caller).
    let [a0, a1, a2, a3] = rs.map(|r| base.wrapping_add(r));
    let mut acc = MaybeUninit::<[[f32; 4]; 4]>::uninit();
    // SAFETY: the loads read `a[rs[i]..rs[i] + kc]` for each row and
    // `b[..4 kc]`, all within the slices (checked by the caller), and the
    // 16 starting sums at `from`; the block writes the 16 sums to `acc`
    // (16 floats) and nothing else but the stack, where s0-s31 are saved
    // and restored around the loop (the general registers are scratch
    // copies; the flags are clobbered).
    unsafe {
        asm!(
            "vpush {{s0-s31}}",
            "vldmia {from}, {{s0-s15}}",
            "lsrs {k}, {k}, #1",
            "bcc 2f",
            "vldmia {a0}!, {{s16}}",
            "vldmia {a1}!, {{s18}}",
            "vldmia {a2}!, {{s20}}",
            "vldmia {a3}!, {{s22}}",
            "vldmia {b}!, {{s24-s27}}",
            outer4!("s16", "s18", "s20", "s22"; "s24", "s25", "s26", "s27"),
            "2:",
            "beq 4f",
            "3:",
            "vldmia {a0}!, {{s16-s17}}",
            "vldmia {a1}!, {{s18-s19}}",
            "vldmia {a2}!, {{s20-s21}}",
            "vldmia {a3}!, {{s22-s23}}",
            "vldmia {b}!, {{s24-s31}}",
            outer4!("s16", "s18", "s20", "s22"; "s24", "s25", "s26", "s27"),
            outer4!("s17", "s19", "s21", "s23"; "s28", "s29", "s30", "s31"),
            "subs {k}, {k}, #1",
            "bne 3b",
            "4:",
            "vstmia {acc}, {{s0-s15}}",
            "vpop {{s0-s31}}",
            from = in(reg) from.as_ptr(),
            acc = in(reg) acc.as_mut_ptr(),
            k = inout(reg) kc => _,
            a0 = inout(reg) a0 => _,
            a1 = inout(reg) a1 => _,
            a2 = inout(reg) a2 => _,
            a3 = inout(reg) a3 => _,
            b = inout(reg) b.as_ptr() => _,
        );
    }
    // SAFETY: the block stored all 16 sums at `acc` (`VSTM` of s0-s15).
    unsafe { acc.assume_init() }
}

/// `from[i][c] + sum_p a[r0 + i + p cs] * b[4 p + c]` for `p < kc` (at
/// least 1), the tile's rows adjacent in A (weights packed in panels, a
/// transposed A): per step one four-register load of A, per two steps one
/// eight-register load of B. The caller has checked that
/// `r0 + 3 + (kc - 1) cs` lies within `a`, that `cs` does not exceed its
/// length and that `b` holds `4 kc` floats.
#[inline(always)]
fn sums_panel(
    from: &[[f32; 4]; 4],
    a: &[f32],
    r0: usize,
    cs: usize,
    b: &[f32],
    kc: usize,
) -> [[f32; 4]; 4] {
    debug_assert!(kc > 0 && r0 + 3 + (kc - 1) * cs < a.len() && b.len() >= 4 * kc);
    let a0 = a.as_ptr().wrapping_add(r0);
    // Bytes from one step of A to the next (`cs <= a.len()`: no overflow).
    let step = cs * 4;
    let mut acc = MaybeUninit::<[[f32; 4]; 4]>::uninit();
    // SAFETY: the loads read `a[r0 + p cs..][..4]` for `p < kc` and
    // `b[..4 kc]`, all within the slices (checked by the caller; the
    // address after the last step is computed, never read), and the 16
    // starting sums at `from`; the block writes the 16 sums to `acc` (16
    // floats) and nothing else but the stack, where s0-s31 are saved and
    // restored around the loop (the general registers are scratch copies;
    // the flags are clobbered).
    unsafe {
        asm!(
            "vpush {{s0-s31}}",
            "vldmia {from}, {{s0-s15}}",
            "lsrs {k}, {k}, #1",
            "bcc 2f",
            "vldmia {a0}, {{s16-s19}}",
            "add {a0}, {a0}, {step}",
            "vldmia {b}!, {{s20-s23}}",
            outer4!("s16", "s17", "s18", "s19"; "s20", "s21", "s22", "s23"),
            "2:",
            "beq 4f",
            "3:",
            "vldmia {a0}, {{s16-s19}}",
            "add {a0}, {a0}, {step}",
            "vldmia {b}!, {{s20-s27}}",
            outer4!("s16", "s17", "s18", "s19"; "s20", "s21", "s22", "s23"),
            "vldmia {a0}, {{s16-s19}}",
            "add {a0}, {a0}, {step}",
            outer4!("s16", "s17", "s18", "s19"; "s24", "s25", "s26", "s27"),
            "subs {k}, {k}, #1",
            "bne 3b",
            "4:",
            "vstmia {acc}, {{s0-s15}}",
            "vpop {{s0-s31}}",
            from = in(reg) from.as_ptr(),
            acc = in(reg) acc.as_mut_ptr(),
            k = inout(reg) kc => _,
            a0 = inout(reg) a0 => _,
            step = in(reg) step,
            b = inout(reg) b.as_ptr() => _,
        );
    }
    // SAFETY: the block stored all 16 sums at `acc` (`VSTM` of s0-s15).
    unsafe { acc.assume_init() }
}
