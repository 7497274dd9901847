//! The Arm DSP tile (Cortex-M4/M7/M33): four rows of 16 columns, worked
//! through as 2x2 blocks whose four sums stay in registers over every
//! group. A group's four bytes of a row or a column are one word: `SXTB16`
//! (`UXTB16` for `u8` activations) splits it into the halves of bytes 0
//! and 2 and of bytes 1 and 3, and two `SMLAD`s add all four products.
//! Per group a block takes four loads, eight extensions and eight `SMLAD`s
//! for sixteen multiply-adds; the weights stay `i8` in flash.
//!
//! The convolutions take the widened path (`QMicro::WIDE`): im2col blocks
//! and, once per block, each weight row are widened to 16-bit halves, so a
//! group of one row by four columns is five `LDRD`s and eight `SMLAD`s.

use crate::int8::Q8;
use crate::simd::isa::dsp::{Dsp, smlad, split};
use crate::simd::q8::gemm::micro::{
    Acc, GROUP_BYTES, NR, PANEL_GROUP_BYTES, QMicro, Tile, WIDE_GROUP_BYTES, WIDE_ROW_BYTES,
    wide_row_fits, widen_row_fits,
};

/// The DSP tile kernel.
#[derive(Clone, Copy)]
pub(crate) struct Q8Dsp(pub(crate) Dsp);

impl Q8Dsp {
    /// `Some` on targets with the DSP extension unless the ISA cap is
    /// `portable`.
    #[cfg(onnx_codegen_arm_dsp)]
    #[inline]
    pub(crate) fn detect() -> Option<Q8Dsp> {
        Dsp::detect().map(Q8Dsp)
    }
}

/// Rows of the tile.
const MR: usize = 4;

impl QMicro for Q8Dsp {
    const MR: usize = MR;

    #[inline(always)]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        if A::SIGNED { tile::<true, true>(t, acc) } else { tile::<false, true>(t, acc) }
    }

    #[inline(always)]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        if A::SIGNED { tile::<true, true>(t, acc) } else { tile::<true, false>(t, acc) }
    }

    const WIDE: bool = true;

    #[inline(always)]
    fn widen<A: Q8>(self, block: &mut [u8], n: usize) {
        widen::<A>(block, n)
    }

    #[inline(always)]
    fn widen_row(self, panel: &[u8], r: usize, groups: usize, dst: &mut [u8]) {
        widen_row(panel, r, groups, dst)
    }

    #[inline(always)]
    fn act_wide_row(
        self,
        row: &[u8],
        strip: &[u8],
        groups: usize,
        cols: usize,
        acc: &mut [i32; NR],
    ) {
        wide_row(row, strip, groups, cols, acc)
    }
}

/// `micro::widen` by `SXTB16`/`UXTB16`: a load, two extensions and two
/// stores per word.
#[inline(always)]
fn widen<A: Q8>(block: &mut [u8], n: usize) {
    debug_assert!(n.is_multiple_of(4) && 2 * n <= block.len(), "q8 widen out of bounds");
    if !n.is_multiple_of(4) || 2 * n > block.len() {
        return;
    }
    let p = block.as_mut_ptr();
    // Last word first, as `micro::widen` (word `i`'s output covers words
    // `2 i` and `2 i + 1` only, read before).
    for i in (0..n / 4).rev() {
        // SAFETY: `4 i + 4 <= n` and `8 i + 8 <= 2 n <= block.len()`
        // (checked above); unaligned accesses.
        unsafe {
            let w = u32::from_le(p.add(4 * i).cast::<u32>().read_unaligned());
            let (lo, hi) = if A::SIGNED { split::<true>(w) } else { split::<false>(w) };
            p.add(8 * i).cast::<u32>().write_unaligned(lo.to_le());
            p.add(8 * i + 4).cast::<u32>().write_unaligned(hi.to_le());
        }
    }
}

/// `micro::widen_row` by `SXTB16`: a load, two extensions and two stores
/// per group.
#[inline(always)]
fn widen_row(panel: &[u8], r: usize, groups: usize, dst: &mut [u8]) {
    let fits = widen_row_fits(panel, r, groups, dst);
    debug_assert!(fits, "q8 DSP widen_row out of bounds");
    if !fits {
        return;
    }
    let (p, d) = (panel.as_ptr(), dst.as_mut_ptr());
    for g in 0..groups {
        // SAFETY: `32 g + 4 r + 4 <= 32 groups <= panel.len()` and `8 g +
        // 8 <= dst.len()` (checked above); unaligned accesses.
        unsafe {
            let w =
                u32::from_le(p.add(PANEL_GROUP_BYTES * g + 4 * r).cast::<u32>().read_unaligned());
            let (lo, hi) = split::<true>(w);
            d.add(WIDE_ROW_BYTES * g).cast::<u32>().write_unaligned(lo.to_le());
            d.add(WIDE_ROW_BYTES * g + 4).cast::<u32>().write_unaligned(hi.to_le());
        }
    }
}

/// `act_wide_row`: four blocks of the row by four columns, each group a
/// pair of the row's words and four column pairs (all 16-bit halves
/// already) and eight `SMLAD`s for sixteen multiply-adds. The blocks
/// wholly past `cols` are skipped.
#[inline(always)]
fn wide_row(row: &[u8], strip: &[u8], groups: usize, cols: usize, acc: &mut [i32; NR]) {
    let fits = wide_row_fits(row, strip, groups);
    debug_assert!(fits, "q8 DSP wide row out of bounds");
    if !fits {
        return;
    }
    for c in (0..cols.min(NR)).step_by(4) {
        // SAFETY: `wide_row_fits` checked the row's 8 bytes and the strip's
        // 128 per group, of which columns `c..c + 4` take bytes `8 c..8 c
        // + 32`.
        let sums = unsafe { wide1x4(row.as_ptr(), strip.as_ptr().add(8 * c), groups) };
        acc[c..c + 4].copy_from_slice(&sums);
    }
}

/// The sums of a widened row at `w` (8 bytes per group) with the four
/// widened columns at `s..s + 32` (groups 128 bytes apart), over `groups`
/// groups.
///
/// # Safety
/// `w + 8 g..+ 8` and `s + 128 g..+ 32` are readable for `g < groups`.
#[inline(always)]
unsafe fn wide1x4(mut w: *const u8, mut s: *const u8, groups: usize) -> [i32; 4] {
    #[cfg(onnx_codegen_arm_dsp)]
    if (w as usize).is_multiple_of(4) && (s as usize).is_multiple_of(4) {
        // SAFETY: the caller's bound, with both word-aligned (`LDRD` wants
        // it).
        return unsafe { wide1x4_asm(w, s, groups) };
    }
    let mut a = [0i32; 4];
    for _ in 0..groups {
        // SAFETY: the caller's bound, for this group.
        unsafe { wide_group(w, s, &mut a) };
        // Past the last group: never read (`wrapping_add`).
        w = w.wrapping_add(WIDE_ROW_BYTES);
        s = s.wrapping_add(WIDE_GROUP_BYTES);
    }
    a
}

/// One group of `wide1x4_asm`'s loop: the row's pair of words (`LDRD`,
/// moving `w` on), the four columns' pairs (the last `LDRD` moving `s` on
/// to the next group), eight `SMLAD`s: thirteen instructions for sixteen
/// multiply-adds.
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! wide_group_asm {
    () => {
        concat!(
            "ldrd r4, r5, [{w}], #8\n",
            "ldrd r2, r3, [{s}, #8]\n",
            "smlad {a1}, r4, r2, {a1}\n",
            "smlad {a1}, r5, r3, {a1}\n",
            "ldrd r2, r3, [{s}, #16]\n",
            "smlad {a2}, r4, r2, {a2}\n",
            "smlad {a2}, r5, r3, {a2}\n",
            "ldrd r2, r3, [{s}, #24]\n",
            "smlad {a3}, r4, r2, {a3}\n",
            "smlad {a3}, r5, r3, {a3}\n",
            "ldrd r2, r3, [{s}], #128\n",
            "smlad {a0}, r4, r2, {a0}\n",
            "smlad {a0}, r5, r3, {a0}\n",
        )
    };
}

/// [`wide1x4`] in assembly: LLVM keeps the column words as separate
/// `LDR`s and the pointers' steps as `ADD`s. The pairs are `r4`, `r5` and
/// `r2`, `r3`: an even register and the next, as `LDRD` wants in the Arm
/// (A32) state.
///
/// # Safety
/// As [`wide1x4`]'s, with `w` and `s` word-aligned (`LDRD` does not take
/// unaligned addresses).
#[cfg(onnx_codegen_arm_dsp)]
#[inline(always)]
unsafe fn wide1x4_asm(mut w: *const u8, mut s: *const u8, groups: usize) -> [i32; 4] {
    let (mut a0, mut a1, mut a2, mut a3) = (0i32, 0i32, 0i32, 0i32);
    let pairs = groups / 2;
    if pairs > 0 {
        // SAFETY: reads `w + 8 g..+8` and `s + 128 g..+32` for `g < 2 pairs
        // <= groups` (the caller's bound), and moves `w` and `s` past them;
        // registers only besides (flags: `SUBS`, and `SMLAD`'s sticky Q,
        // which nothing reads).
        unsafe {
            core::arch::asm!(
                "2:",
                wide_group_asm!(),
                wide_group_asm!(),
                "subs {n}, {n}, #1",
                "bne 2b",
                n = inout(reg) pairs => _,
                w = inout(reg) w,
                s = inout(reg) s,
                a0 = inout(reg) a0,
                a1 = inout(reg) a1,
                a2 = inout(reg) a2,
                a3 = inout(reg) a3,
                out("r2") _,
                out("r3") _,
                out("r4") _,
                out("r5") _,
                options(readonly, nostack),
            );
        }
    }
    if groups % 2 == 1 {
        // SAFETY: reads `w..+8` and `s..+32`, the last group (the caller's
        // bound); as above otherwise.
        unsafe {
            core::arch::asm!(
                wide_group_asm!(),
                w = inout(reg) w => _,
                s = inout(reg) s => _,
                a0 = inout(reg) a0,
                a1 = inout(reg) a1,
                a2 = inout(reg) a2,
                a3 = inout(reg) a3,
                out("r2") _,
                out("r3") _,
                out("r4") _,
                out("r5") _,
                options(readonly, nostack),
            );
        }
    }
    [a0, a1, a2, a3]
}

/// One group of [`wide1x4`].
///
/// # Safety
/// `w..+8` and `s..+32` are readable.
#[inline(always)]
unsafe fn wide_group(w: *const u8, s: *const u8, a: &mut [i32; 4]) {
    // SAFETY: the caller's bound (unaligned loads).
    let (we, wo) = unsafe {
        let p = w.cast::<u32>();
        (u32::from_le(p.read_unaligned()), u32::from_le(p.add(1).read_unaligned()))
    };
    for (j, a) in a.iter_mut().enumerate() {
        // SAFETY: as above, column `j`'s two words.
        let (x0, x1) = unsafe {
            let p = s.add(8 * j).cast::<u32>();
            (u32::from_le(p.read_unaligned()), u32::from_le(p.add(1).read_unaligned()))
        };
        *a = smlad(wo, x1, smlad(we, x0, *a));
    }
}

/// `acc[r][c] += sum b(r) * s(c)` over the tile's groups, `B` and `S`
/// whether the broadcast rows' and the strip's bytes are signed.
#[inline(always)]
fn tile<const B: bool, const S: bool>(t: &Tile<'_>, acc: &mut Acc) {
    debug_assert!(t.fits(MR), "q8 DSP tile out of bounds");
    if !t.fits(MR) {
        return;
    }
    if t.rows[1..MR].iter().all(|&r| r == t.rows[0]) {
        // One row repeated (a product with one row left, as a dense layer
        // at batch 1): 1x4 blocks, then the row's sums copied to the rest.
        for c in (0..NR).step_by(4) {
            // SAFETY: `fits` checked row 0's four bytes at every `g *
            // gstep` and the strip's 64 bytes per group, of which columns
            // `c..c + 4` take bytes `4 c..4 c + 16`.
            let sums = unsafe {
                row4::<B, S>(
                    t.bcast.as_ptr().add(t.rows[0]),
                    t.gstep,
                    t.strip.as_ptr().add(4 * c),
                    t.groups,
                )
            };
            for (a, v) in acc[0][c..c + 4].iter_mut().zip(sums) {
                *a = a.wrapping_add(v);
            }
        }
        let (first, rest) = acc.split_at_mut(1);
        for r in rest.iter_mut().take(MR - 1) {
            *r = first[0];
        }
        return;
    }
    for rp in 0..MR / 2 {
        for c in (0..NR).step_by(2) {
            // SAFETY: `fits` checked that rows `2 rp` and `2 rp + 1` hold
            // four bytes at every `g * gstep`, `g < groups`, and the strip
            // 64 bytes per group, of which columns `c` and `c + 1` take
            // bytes `4 c..4 c + 8`.
            let [a00, a01, a10, a11] = unsafe {
                let (r0, r1) = (t.rows[2 * rp], t.rows[2 * rp + 1]);
                let (b, s) = (t.bcast.as_ptr(), t.strip.as_ptr().add(4 * c));
                if r1 == r0 + 4 {
                    // A weight panel's rows: one pointer reaches both.
                    block::<B, S, true>(b.add(r0), b.add(r1), t.gstep, s, t.groups)
                } else {
                    block::<B, S, false>(b.add(r0), b.add(r1), t.gstep, s, t.groups)
                }
            };
            let (top, bottom) = acc.split_at_mut(2 * rp + 1);
            let (top, bottom) = (&mut top[2 * rp], &mut bottom[0]);
            top[c] = top[c].wrapping_add(a00);
            top[c + 1] = top[c + 1].wrapping_add(a01);
            bottom[c] = bottom[c].wrapping_add(a10);
            bottom[c + 1] = bottom[c + 1].wrapping_add(a11);
        }
    }
}

/// The sums of one row at `r` (four bytes per group, groups `gstep`
/// apart) with the four columns at `s..s + 16` (groups 64 bytes apart).
///
/// # Safety
/// `r + g * gstep..+ 4` and `s + g * 64..+ 16` are readable for `g <
/// groups`.
#[inline(always)]
unsafe fn row4<const B: bool, const S: bool>(
    mut r: *const u8,
    gstep: usize,
    mut s: *const u8,
    groups: usize,
) -> [i32; 4] {
    let mut a = [0i32; 4];
    for _ in 0..groups {
        // SAFETY: the caller's bound (unaligned loads).
        let w = u32::from_le(unsafe { r.cast::<u32>().read_unaligned() });
        let (we, wo) = split::<B>(w);
        for (j, a) in a.iter_mut().enumerate() {
            // SAFETY: as above, column `j`'s word.
            let x = u32::from_le(unsafe { s.add(4 * j).cast::<u32>().read_unaligned() });
            let (xe, xo) = split::<S>(x);
            *a = smlad(wo, xo, smlad(we, xe, *a));
        }
        // Past the last group: never read (`wrapping_add`).
        r = r.wrapping_add(gstep);
        s = s.wrapping_add(GROUP_BYTES);
    }
    a
}

/// The four sums of a 2x2 block over `groups` groups: rows at `r0` and
/// `r1` (four bytes, then the next group `gstep` bytes on), columns at
/// `s` and `s + 4` (the next group 64 bytes on). `ADJACENT`: `r1` is `r0 +
/// 4`, read through `r0` (a register fewer in the loop: with one
/// pointer per row the Cortex-M4's 14 registers spill).
///
/// # Safety
/// Every word named is readable: `r0`/`r1` + `g * gstep..+ 4` and
/// `s + g * 64..+ 8` for `g < groups`.
#[inline(always)]
unsafe fn block<const B: bool, const S: bool, const ADJACENT: bool>(
    mut r0: *const u8,
    mut r1: *const u8,
    gstep: usize,
    mut s: *const u8,
    groups: usize,
) -> [i32; 4] {
    let mut a = [0i32; 4];
    // Two groups per turn (the loop's own three instructions are a tenth
    // of a group's twenty).
    for _ in 0..groups / 2 {
        // SAFETY: the caller's bound, for this group and the next.
        unsafe {
            group::<B, S, ADJACENT>(r0, r1, s, &mut a);
            group::<B, S, ADJACENT>(r0.add(gstep), r1.add(gstep), s.add(GROUP_BYTES), &mut a);
        }
        // Past the last group these point beyond the data: never read
        // (`wrapping_add`, so no promise about the allocation is made).
        r0 = r0.wrapping_add(2 * gstep);
        if !ADJACENT {
            r1 = r1.wrapping_add(2 * gstep);
        }
        s = s.wrapping_add(2 * GROUP_BYTES);
    }
    if groups % 2 == 1 {
        // SAFETY: the caller's bound, for the last group.
        unsafe { group::<B, S, ADJACENT>(r0, r1, s, &mut a) };
    }
    a
}

/// One group of [`block`]: `a += ` its sixteen products.
///
/// # Safety
/// `r0..+4`, `r1..+4` (`r0 + 4..+4` when `ADJACENT`) and `s..+8` are
/// readable.
#[inline(always)]
unsafe fn group<const B: bool, const S: bool, const ADJACENT: bool>(
    r0: *const u8,
    r1: *const u8,
    s: *const u8,
    a: &mut [i32; 4],
) {
    // SAFETY: the caller's bound (unaligned loads: the bytes of a row or a
    // column need no alignment; one `LDR` each on the Cortex-M).
    let (x0, x1) =
        unsafe { (s.cast::<u32>().read_unaligned(), s.add(4).cast::<u32>().read_unaligned()) };
    let (s0e, s0o) = split::<S>(u32::from_le(x0));
    let (s1e, s1o) = split::<S>(u32::from_le(x1));
    // SAFETY: as above.
    let w = unsafe { r0.cast::<u32>().read_unaligned() };
    let (we, wo) = split::<B>(u32::from_le(w));
    a[0] = smlad(wo, s0o, smlad(we, s0e, a[0]));
    a[1] = smlad(wo, s1o, smlad(we, s1e, a[1]));
    // SAFETY: as above.
    let w = unsafe { if ADJACENT { r0.add(4) } else { r1 }.cast::<u32>().read_unaligned() };
    let (we, wo) = split::<B>(u32::from_le(w));
    a[2] = smlad(wo, s0o, smlad(we, s0e, a[2]));
    a[3] = smlad(wo, s1o, smlad(we, s1e, a[3]));
}
