//! The portable tile: plain loops over `i32` (four rows), simple enough
//! for every target (on Cortex-M, the four bytes of a group are the two
//! 16-bit pairs `SMLAD` takes).

use crate::int8::Q8;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, NR, QMicro, Tile};

/// The portable tile.
#[derive(Clone, Copy)]
pub(crate) struct Portable;

/// `acc[r][c] += sum_g sum_q b(r, g, q) * s(g, c, q)`, with the bytes'
/// values given by `B` and `S`.
#[inline(always)]
fn tile(t: &Tile<'_>, acc: &mut Acc, b: impl Fn(u8) -> i32, s: impl Fn(u8) -> i32) {
    debug_assert!(t.fits(Portable::MR), "q8 portable tile out of bounds");
    if !t.fits(Portable::MR) {
        return;
    }
    for (r, row) in acc.iter_mut().enumerate().take(Portable::MR) {
        let base = t.rows[r];
        for g in 0..t.groups {
            let at = base + g * t.gstep;
            let bv: [i32; 4] = core::array::from_fn(|q| b(t.bcast[at + q]));
            let grp = &t.strip[g * GROUP_BYTES..][..GROUP_BYTES];
            for c in 0..NR {
                let w = &grp[4 * c..4 * c + 4];
                let d = bv[0] * s(w[0]) + bv[1] * s(w[1]) + bv[2] * s(w[2]) + bv[3] * s(w[3]);
                row[c] = row[c].wrapping_add(d);
            }
        }
    }
}

impl QMicro for Portable {
    const MR: usize = 4;

    #[inline]
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        tile(t, acc, A::of_bits, |w| i32::from(w as i8));
    }

    #[inline]
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc) {
        tile(t, acc, |w| i32::from(w as i8), A::of_bits);
    }
}
