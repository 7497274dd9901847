//! The NEON tile: four rows of 16 columns, widening multiply-adds by
//! lane (`smlal`), exact in `i32`. A strip group's columns of four `k`
//! are split into one vector per `k` (`uzp`), widened to `i16`, and
//! multiplied by each row's `k`-th value. (`sdot`, on cores with the
//! dot-product extension, would take the layout as it is: a later
//! kernel.)

use crate::int8::Q8;
use crate::simd::isa::neon::Neon;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, NR, QMicro, Tile};
use core::arch::aarch64::{
    int16x8_t, int32x4_t, vdupq_n_s32, vget_low_s8, vget_low_s16, vld1_dup_s32, vld1q_s8, vld1q_u8,
    vmlal_high_laneq_s16, vmlal_laneq_s16, vmovl_s8, vmovl_u8, vreinterpret_s8_s32,
    vreinterpret_u8_s8, vreinterpretq_s16_u16, vreinterpretq_u8_u16, vreinterpretq_u16_u8,
    vst1q_s32, vst1q_u8, vuzp1q_s8, vuzp2q_s8, vzip1q_u8, vzip1q_u16, vzip2q_u8, vzip2q_u16,
};

/// The NEON tile kernel.
#[derive(Clone, Copy)]
pub(crate) struct Q8Neon(Neon);

impl Q8Neon {
    /// `Some` unless the ISA cap is `portable`.
    #[inline]
    pub(crate) fn detect() -> Option<Q8Neon> {
        Neon::detect().map(Q8Neon)
    }
}

/// Rows of the tile.
const MR: usize = 4;

impl QMicro for Q8Neon {
    const MR: usize = MR;

    #[inline(always)]
    fn interleave16(
        self,
        dst: &mut [u8; 64],
        a: &[u8; 16],
        b: &[u8; 16],
        c: &[u8; 16],
        d: &[u8; 16],
    ) {
        // SAFETY: `self` proves NEON; every pointer is to an array of the
        // size loaded or stored. Bytes then halves zipped, four stores.
        unsafe {
            let (a, b, c, d) = (
                vld1q_u8(a.as_ptr()),
                vld1q_u8(b.as_ptr()),
                vld1q_u8(c.as_ptr()),
                vld1q_u8(d.as_ptr()),
            );
            let (ab_lo, ab_hi) =
                (vreinterpretq_u16_u8(vzip1q_u8(a, b)), vreinterpretq_u16_u8(vzip2q_u8(a, b)));
            let (cd_lo, cd_hi) =
                (vreinterpretq_u16_u8(vzip1q_u8(c, d)), vreinterpretq_u16_u8(vzip2q_u8(c, d)));
            let p = dst.as_mut_ptr();
            vst1q_u8(p, vreinterpretq_u8_u16(vzip1q_u16(ab_lo, cd_lo)));
            vst1q_u8(p.add(16), vreinterpretq_u8_u16(vzip2q_u16(ab_lo, cd_lo)));
            vst1q_u8(p.add(32), vreinterpretq_u8_u16(vzip1q_u16(ab_hi, cd_hi)));
            vst1q_u8(p.add(48), vreinterpretq_u8_u16(vzip2q_u16(ab_hi, cd_hi)));
        }
    }

    #[inline(always)]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 NEON tile out of bounds");
        if t.fits(MR) {
            // SAFETY: NEON is a target feature of this build; `fits`
            // checked every byte read.
            unsafe { tile(t, A::SIGNED, true, acc) }
        }
    }

    #[inline(always)]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        debug_assert!(t.fits(MR), "q8 NEON tile out of bounds");
        if t.fits(MR) {
            // SAFETY: as in `act_rows`.
            unsafe { tile(t, true, A::SIGNED, acc) }
        }
    }
}

/// Eight bytes widened to `i16`, signed or not.
#[target_feature(enable = "neon")]
#[inline]
fn widen(b: core::arch::aarch64::int8x8_t, signed: bool) -> int16x8_t {
    if signed { vmovl_s8(b) } else { vreinterpretq_s16_u16(vmovl_u8(vreinterpret_u8_s8(b))) }
}

/// `c[h] += w_k[4h..4h + 4] * a[K]` for the eight columns of `w_k`.
#[target_feature(enable = "neon")]
#[inline]
fn mla<const K: i32>(c: &mut [int32x4_t], w: int16x8_t, a: int16x8_t) {
    c[0] = vmlal_laneq_s16::<K>(c[0], vget_low_s16(w), a);
    c[1] = vmlal_high_laneq_s16::<K>(c[1], w, a);
}

/// `acc[r][c] += sum_g sum_q b(r, g, q) s(g, c, q)` for four rows, the
/// broadcast bytes (`b_signed`) and the strip's (`s_signed`) widened.
///
/// # Safety
/// NEON is available; `t.fits(4)`.
#[target_feature(enable = "neon")]
unsafe fn tile(t: &Tile<'_>, b_signed: bool, s_signed: bool, acc: &mut Acc) {
    // c[r][4 * half + h]: columns 8 half + 4 h .. + 4 of row r.
    let mut c = [[vdupq_n_s32(0); 4]; MR];
    let (b, s) = (t.bcast.as_ptr(), t.strip.as_ptr());
    for g in 0..t.groups {
        // SAFETY: `fits` covers the strip's group `g` and each row's four
        // bytes of it.
        unsafe {
            let a: [int16x8_t; MR] = core::array::from_fn(|r| {
                let at = b.add(t.rows[r] + g * t.gstep).cast::<i32>();
                // The four bytes twice; lanes 0..4 of the widened vector.
                widen(vreinterpret_s8_s32(vld1_dup_s32(at)), b_signed)
            });
            for half in 0..2 {
                let p = s.add(g * GROUP_BYTES + 32 * half).cast::<i8>();
                let (q0, q1) = (vld1q_s8(p), vld1q_s8(p.add(16)));
                // Bytes by k: even/odd, then even/odd again (eight columns
                // in the low half of each).
                let (e, o) = (vuzp1q_s8(q0, q1), vuzp2q_s8(q0, q1));
                let k0 = widen(vget_low_s8(vuzp1q_s8(e, e)), s_signed);
                let k2 = widen(vget_low_s8(vuzp2q_s8(e, e)), s_signed);
                let k1 = widen(vget_low_s8(vuzp1q_s8(o, o)), s_signed);
                let k3 = widen(vget_low_s8(vuzp2q_s8(o, o)), s_signed);
                for r in 0..MR {
                    let cr = &mut c[r][2 * half..2 * half + 2];
                    mla::<0>(cr, k0, a[r]);
                    mla::<1>(cr, k1, a[r]);
                    mla::<2>(cr, k2, a[r]);
                    mla::<3>(cr, k3, a[r]);
                }
            }
        }
    }
    for (row, c) in acc.iter_mut().zip(c) {
        let mut sum = [0i32; NR];
        for (h, v) in c.iter().enumerate() {
            // SAFETY: `sum` has room for four lanes at `4 h`, `h < 4`.
            unsafe { vst1q_s32(sum.as_mut_ptr().add(4 * h), *v) };
        }
        for (d, s) in row.iter_mut().zip(sum) {
            *d = d.wrapping_add(s);
        }
    }
}
