//! The Arm DSP tile (Cortex-M4/M7/M33): four rows of 16 columns, worked
//! through as 2x2 blocks whose four sums stay in registers over every
//! group. A group's four bytes of a row or a column are one word: `SXTB16`
//! (`UXTB16` for `u8` activations) splits it into the halves of bytes 0
//! and 2 and of bytes 1 and 3, and two `SMLAD`s add all four products.
//! Per group a block takes four loads, eight extensions and eight `SMLAD`s
//! for sixteen multiply-adds; the weights stay `i8` in flash.
//!
//! The convolutions take the widened path (`QMicro::WIDE`): im2col blocks
//! are built as 16-bit halves and, once per block, each weight row is
//! widened, so a group of one row by four columns is five `LDRD`s and
//! eight `SMLAD`s.

use crate::int8::Q8;
use crate::simd::isa::dsp::{Dsp, smlad, split};
use crate::simd::q8::gemm::micro::{
    Acc, GROUP_BYTES, NR, PANEL_GROUP_BYTES, QMicro, Tile, WIDE_QUAD_GROUP_BYTES, WIDE_ROW_BYTES,
    act_wide_run_portable, wide_strip_fits, widen_row_fits,
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

    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn interleave_wide<A: Q8>(
        self,
        strip: &mut [u8],
        groups: usize,
        grp: usize,
        a: &[u8; 16],
        b: &[u8; 16],
        c: &[u8; 16],
        d: &[u8; 16],
    ) {
        if A::SIGNED {
            interleave_wide::<true>(strip, groups, grp, [a, b, c, d])
        } else {
            interleave_wide::<false>(strip, groups, grp, [a, b, c, d])
        }
    }

    #[inline(always)]
    fn widen_row(self, panel: &[u8], r: usize, groups: usize, dst: &mut [u8]) {
        widen_row(panel, r, groups, dst)
    }

    #[inline(always)]
    fn act_wide_run(self, row: &[u8], block: &[u8], groups: usize, len: usize, sums: &mut [i32]) {
        wide_run(row, block, groups, len, sums)
    }
}

/// `QMicro::interleave_wide` by `SXTB16`/`UXTB16` (`SIGNED`) and
/// half-word packs: per quad of four columns, a load of each `k`'s four
/// bytes, two extensions of each (bytes 0 and 2, 1 and 3), and a pack of
/// two halves per word stored (`PKHBT`/`PKHTB`): 28 instructions for the
/// quad's 16 values, where a byte interleave then a widening in place
/// took about 64.
#[inline(always)]
fn interleave_wide<const SIGNED: bool>(
    strip: &mut [u8],
    groups: usize,
    grp: usize,
    k: [&[u8; 16]; 4],
) {
    let fits = wide_strip_fits(strip, groups, grp);
    debug_assert!(fits, "q8 DSP interleave_wide out of bounds");
    if !fits {
        return;
    }
    // `(x.lo, y.lo)` and `(x.hi, y.hi)` as one word's halves.
    let lo = |x: u32, y: u32| (x & 0xffff) | (y << 16);
    let hi = |x: u32, y: u32| (x >> 16) | (y & 0xffff_0000);
    let base = strip.as_mut_ptr();
    for q in 0..4 {
        // Halves `(k[i] byte 4 q, byte 4 q + 2)` (`e`) and `(byte 4 q + 1,
        // byte 4 q + 3)` (`o`) of each `k`.
        let [(ae, ao), (be, bo), (ce, co), (de, do_)] = k.map(|s| {
            split::<SIGNED>(u32::from_le_bytes([
                s[4 * q],
                s[4 * q + 1],
                s[4 * q + 2],
                s[4 * q + 3],
            ]))
        });
        let words = [
            lo(ae, ce),
            lo(be, de),
            lo(ao, co),
            lo(bo, do_),
            hi(ae, ce),
            hi(be, de),
            hi(ao, co),
            hi(bo, do_),
        ];
        // SAFETY: quad `q`'s group `grp` is bytes `32 (q groups + grp)..+
        // 32`, within the `128 groups <= strip.len()` bytes that
        // `wide_strip_fits` checked (`q < 4`, `grp < groups`); unaligned
        // stores.
        unsafe {
            let d = base.add(WIDE_QUAD_GROUP_BYTES * (q * groups + grp)).cast::<u32>();
            for (i, w) in words.into_iter().enumerate() {
                d.add(i).write_unaligned(w.to_le());
            }
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
    #[cfg(onnx_codegen_arm_dsp)]
    if groups > 0 && (d as usize).is_multiple_of(4) {
        // SAFETY: as below, with `d` word-aligned (`STRD` wants it) and
        // `groups >= 1`.
        unsafe { widen_row_asm(p.add(4 * r), d, groups) };
        return;
    }
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

/// [`widen_row`]'s loop in assembly: six instructions a group (a load
/// moving on to the next group, two extensions, a `STRD` moving on, the
/// loop's two), where LLVM's indexed form took nine. The halves are `r2`
/// and `r3`: an even register and the next, as `STRD` wants in the Arm
/// (A32) state.
///
/// # Safety
/// `p + 32 g..+ 4` is readable and `d + 8 g..+ 8` writable for `g <
/// groups`, `d` word-aligned, `groups >= 1`.
#[cfg(onnx_codegen_arm_dsp)]
#[inline(always)]
unsafe fn widen_row_asm(p: *const u8, d: *mut u8, groups: usize) {
    // SAFETY: the caller's bounds (an unaligned `LDR` is allowed); the
    // pointers and the count are moved past them and dropped. Flags:
    // `SUBS`.
    unsafe {
        core::arch::asm!(
            "2:",
            // A panel's groups are `PANEL_GROUP_BYTES` (32) apart.
            "ldr {x}, [{p}], #32",
            "sxtb16 r2, {x}",
            "sxtb16 r3, {x}, ror #8",
            "strd r2, r3, [{d}], #8",
            "subs {n}, {n}, #1",
            "bne 2b",
            p = inout(reg) p => _,
            d = inout(reg) d => _,
            n = inout(reg) groups => _,
            x = out(reg) _,
            out("r2") _,
            out("r3") _,
            options(nostack),
        );
    }
}

/// `act_wide_run`: each quad of the block by the row, one row by four
/// columns a group (a pair of the row's words, four column pairs, eight
/// `SMLAD`s for sixteen multiply-adds).
#[inline(always)]
fn wide_run(row: &[u8], block: &[u8], groups: usize, len: usize, sums: &mut [i32]) {
    #[cfg(onnx_codegen_arm_dsp)]
    {
        let quads = len.div_ceil(4);
        if super::wide_run_fits(row, block, groups, len, sums)
            && groups > 0
            && quads > 0
            && (row.as_ptr() as usize).is_multiple_of(4)
            && (block.as_ptr() as usize).is_multiple_of(4)
        {
            // SAFETY: `wide_run_fits` checked the row's `8 groups` bytes,
            // the block's `32 groups` per quad and the `4 quads` sums; both
            // operands word-aligned (`LDRD`, `LDM` want it), the sums an
            // `i32` slice.
            unsafe { wide_run_asm(row.as_ptr(), block.as_ptr(), groups, quads, sums.as_mut_ptr()) };
            return;
        }
    }
    // Elsewhere (unaligned operands, no group, a host without the
    // extension) the plain loops, which check the bounds themselves.
    act_wide_run_portable(row, block, groups, len, sums)
}

/// One group of [`wide_run_asm`]'s loop: the row's pair of words (`LDRD`,
/// moving `w` on), the four columns' pairs as two `LDM`s of four words
/// (moving `s` on), eight `SMLAD`s: eleven instructions for sixteen
/// multiply-adds. `first`: the quad's first group, whose products start
/// the sums (`SMUAD`) rather than add to them; `next` adds to them;
/// `none` is no group.
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! wide_group_asm {
    (none) => {
        ""
    };
    (first) => {
        concat!(
            "ldrd r4, r5, [{w}], #8\n",
            "ldm {s}!, {{r0, r1, r2, r3}}\n",
            "smuad {a0}, r4, r0\n",
            "smlad {a0}, r5, r1, {a0}\n",
            "smuad {a1}, r4, r2\n",
            "smlad {a1}, r5, r3, {a1}\n",
            "ldm {s}!, {{r0, r1, r2, r3}}\n",
            "smuad {a2}, r4, r0\n",
            "smlad {a2}, r5, r1, {a2}\n",
            "smuad {a3}, r4, r2\n",
            "smlad {a3}, r5, r3, {a3}\n",
        )
    };
    (next) => {
        concat!(
            "ldrd r4, r5, [{w}], #8\n",
            "ldm {s}!, {{r0, r1, r2, r3}}\n",
            "smlad {a0}, r4, r0, {a0}\n",
            "smlad {a0}, r5, r1, {a0}\n",
            "smlad {a1}, r4, r2, {a1}\n",
            "smlad {a1}, r5, r3, {a1}\n",
            "ldm {s}!, {{r0, r1, r2, r3}}\n",
            "smlad {a2}, r4, r0, {a2}\n",
            "smlad {a2}, r5, r1, {a2}\n",
            "smlad {a3}, r4, r2, {a3}\n",
            "smlad {a3}, r5, r3, {a3}\n",
        )
    };
}

/// [`wide_run`] in assembly, every quad in one loop. Twelve registers are
/// all the asm may have: the four loaded column words (`r0`-`r3`, which
/// `LDM` wants in ascending order), the row's pair (`r4`, `r5`: an even
/// register and the next, as `LDRD` wants in the Arm (A32) state), four
/// sums and the two pointers. The rest lives in four stack words: the
/// row's start and end, where the sums go, and the block's end. Per quad
/// the row pointer comes back from the stack, the first group starts the
/// sums and up to three more follow (so that a multiple of four is
/// left), then fours of groups until the row pointer reaches the row's
/// end (compared through `r0`, free between groups), and the four sums
/// are stored; the quads end where the block's pointer reaches the
/// block's end. Per group 11 instructions (13 with five `LDRD`s) and
/// under one of the loop's, per quad about 14 besides (a call per quad in
/// LLVM's form took about 29).
///
/// # Safety
/// `w..+ 8 groups` and `s..+ 32 groups quads` are readable and
/// word-aligned, `out..+ 4 quads` writable `i32`s; `groups >= 1`, `quads
/// >= 1`.
#[cfg(onnx_codegen_arm_dsp)]
#[inline(always)]
unsafe fn wide_run_asm(w: *const u8, s: *const u8, groups: usize, quads: usize, out: *mut i32) {
    debug_assert!(groups >= 1 && quads >= 1);
    let w_end = w.wrapping_add(groups * WIDE_ROW_BYTES);
    let s_end = s.wrapping_add(quads * groups * WIDE_QUAD_GROUP_BYTES);
    macro_rules! body {
        ($g2:tt, $g3:tt, $g4:tt) => {
            // SAFETY: reads `w..w_end` once per quad and `s..s_end`,
            // writes `out..+ 4 quads` (the caller's bounds); the four
            // stack words are pushed and popped by the asm itself (so no
            // `nostack`); flags: `CMP`, and `SMLAD`'s sticky Q, which
            // nothing reads.
            unsafe {
                core::arch::asm!(
                    "str {a0}, [sp, #-4]!",
                    "str {a2}, [sp, #-4]!",
                    "str {a1}, [sp, #-4]!",
                    "str {w}, [sp, #-4]!",
                    "3:",
                    "ldr {w}, [sp]",
                    wide_group_asm!(first),
                    wide_group_asm!($g2),
                    wide_group_asm!($g3),
                    wide_group_asm!($g4),
                    "b 5f",
                    "2:",
                    wide_group_asm!(next),
                    wide_group_asm!(next),
                    wide_group_asm!(next),
                    wide_group_asm!(next),
                    "5:",
                    "ldr r0, [sp, #4]",
                    "cmp {w}, r0",
                    "bne 2b",
                    "ldr r0, [sp, #8]",
                    "str {a0}, [r0], #4",
                    "str {a1}, [r0], #4",
                    "str {a2}, [r0], #4",
                    "str {a3}, [r0], #4",
                    "str r0, [sp, #8]",
                    "ldr r0, [sp, #12]",
                    "cmp {s}, r0",
                    "bne 3b",
                    "add sp, sp, #16",
                    w = inout(reg) w => _,
                    s = inout(reg) s => _,
                    // The block's end, the row's end and the sums' place
                    // come in as sums' registers, pushed first.
                    a0 = inout(reg) s_end => _,
                    a1 = inout(reg) w_end => _,
                    a2 = inout(reg) out => _,
                    a3 = out(reg) _,
                    out("r0") _,
                    out("r1") _,
                    out("r2") _,
                    out("r3") _,
                    out("r4") _,
                    out("r5") _,
                );
            }
        };
    }
    // One to four groups first, so that whole fours follow.
    match groups % 4 {
        1 => body!(none, none, none),
        2 => body!(next, none, none),
        3 => body!(next, next, none),
        _ => body!(next, next, next),
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
