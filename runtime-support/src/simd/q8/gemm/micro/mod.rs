//! Register tiles of the int8 products, one module per ISA, each
//! implementing [`QMicro`] for its token.
//!
//! A tile is `MR` rows of 16 columns of raw `i32` sums over groups of
//! four `k`: one operand is broadcast (four bytes of a row per group), the
//! other a packed strip (64 bytes per group: 16 columns of four `k`, see
//! `int8::pack_weights`). In a `qmatmul` the broadcast rows are the
//! activations and the strip the weights ([`QMicro::act_rows`]); in a
//! convolution the broadcast rows are a weight panel's and the strip a
//! block of im2col columns ([`QMicro::act_strip`]).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(crate) mod avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(crate) mod avx512;
#[cfg(any(onnx_codegen_arm_dsp, test))]
#[allow(unsafe_code)]
pub(crate) mod dsp;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[allow(unsafe_code)]
pub(crate) mod neon;
pub(crate) mod portable;

use crate::int8::Q8;
use crate::simd::q8::requant::{Chan, Chan16, OutRange};

/// Columns of a tile (of a packed strip).
pub(crate) const NR: usize = 16;
/// The most rows of any kernel's tile.
pub(crate) const MAX_MR: usize = 8;
/// Bytes of one group of a strip: 16 columns of four `k`.
pub(crate) const GROUP_BYTES: usize = 64;

/// A tile's raw sums.
pub(crate) type Acc = [[i32; NR]; MAX_MR];

/// One tile's operands: row `r`'s four bytes of group `g` at
/// `bcast[rows[r] + g * gstep..][..4]`, the strip's at `strip[g * 64..][..64]`,
/// for `g < groups`.
#[derive(Clone, Copy)]
pub(crate) struct Tile<'a> {
    pub groups: usize,
    pub bcast: &'a [u8],
    pub rows: [usize; MAX_MR],
    pub gstep: usize,
    pub strip: &'a [u8],
}

impl Tile<'_> {
    /// Whether every byte the first `mr` rows and the strip name lies
    /// within the slices (what a kernel checks before its loads).
    #[inline(always)]
    pub(crate) fn fits(&self, mr: usize) -> bool {
        if self.groups == 0 {
            return true;
        }
        let last = (self.groups - 1).checked_mul(self.gstep).and_then(|v| v.checked_add(4));
        let strip = self.groups.checked_mul(GROUP_BYTES);
        match (last, strip) {
            (Some(last), Some(strip)) => {
                strip <= self.strip.len()
                    && self.rows[..mr.min(MAX_MR)]
                        .iter()
                        .all(|&r| r.checked_add(last).is_some_and(|e| e <= self.bcast.len()))
            }
            _ => false,
        }
    }
}

/// An int8 register tile, see the module documentation.
pub(crate) trait QMicro: Copy {
    /// Rows of the tile (at most [`MAX_MR`]).
    const MR: usize;

    /// What the kernel adds to every activation of type `A` before
    /// multiplying (`vpdpbusd` takes unsigned ones, `sdot` signed ones):
    /// the driver takes `(zero + offset) * sum(w)` off the sums.
    #[inline(always)]
    fn offset<A: Q8>(self) -> i32 {
        0
    }

    /// `acc[r][c] += sum (a + offset) * w` with the broadcast rows the
    /// activations `A` and the strip the weights (`i8`). A tile that does
    /// not [`Tile::fits`] is the caller's bug: a panic in debug builds,
    /// nothing done in release builds.
    fn act_rows<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc);

    /// `acc[r][c] += sum w * (a + offset)` with the broadcast rows the
    /// weights and the strip the activations `A`.
    fn act_strip<A: Q8>(self, t: &Tile<'_>, acc: &mut Acc);

    /// `dst[c] = out(ch lane c (acc[c]))`, `dst.len() <= 16`.
    #[inline(always)]
    fn cols<Y: Q8>(self, acc: &[i32; NR], ch: &Chan16, out: &OutRange, dst: &mut [Y]) {
        crate::simd::q8::requant::cols_portable(acc, ch, out, dst)
    }

    /// `dst[c] = out(ch (acc[c]))`, `dst.len() <= 16`.
    #[inline(always)]
    fn splat<Y: Q8>(self, acc: &[i32; NR], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
        crate::simd::q8::requant::splat_portable(acc, ch, out, dst)
    }
}
