//! The Arm DSP tile (Cortex-M4/M7/M33): four rows of 16 columns, worked
//! through as 2x2 blocks whose four sums stay in registers over every
//! group. A group's four bytes of a row or a column are one word: `SXTB16`
//! (`UXTB16` for `u8` activations) splits it into the halves of bytes 0
//! and 2 and of bytes 1 and 3, and two `SMLAD`s add all four products.
//! Per group a block takes four loads, eight extensions and eight `SMLAD`s
//! for sixteen multiply-adds; the weights stay `i8` in flash.

use crate::int8::Q8;
use crate::simd::isa::dsp::{Dsp, smlad, split};
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, NR, QMicro, Tile};

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
