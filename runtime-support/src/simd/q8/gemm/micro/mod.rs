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
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(crate) mod avxvnni;
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

/// Bytes of one group of a widened quad ([`QMicro::interleave_wide`]):
/// four columns of four `k` as two 32-bit words of two 16-bit halves each.
pub(crate) const WIDE_QUAD_GROUP_BYTES: usize = 32;

/// Bytes of one group of a widened weight row ([`QMicro::widen_row`]).
pub(crate) const WIDE_ROW_BYTES: usize = 8;

/// Bytes of a weight panel's group: eight rows of four `k`.
pub(crate) const PANEL_GROUP_BYTES: usize = 32;

/// A tile's raw sums.
pub(crate) type Acc = [[i32; NR]; MAX_MR];

/// What the `vpdpbusd` tiles (AVX-512 VNNI, AVX-VNNI) XOR into every
/// activation word: the top bit of each byte when `A` is signed (turning
/// `a` into the unsigned `a + 128`, their [`QMicro::offset`]), else
/// nothing.
#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
#[inline(always)]
pub(crate) fn dpbusd_flip<A: Q8>() -> i32 {
    if A::SIGNED { 0x8080_8080u32 as i32 } else { 0 }
}

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

    /// Whether the kernel takes im2col blocks widened to 16 bits
    /// ([`QMicro::interleave_wide`], [`QMicro::act_wide_run`]), and weight
    /// rows widened once per block ([`QMicro::widen_row`]): a kernel whose
    /// products want both operands' halves (the Arm DSP's `SMLAD`) then
    /// loads both ready. Its [`QMicro::offset`] is zero.
    const WIDE: bool = false;

    /// Whether the im2col blocks should hold only stored positions even
    /// where output rows are not whole strips (a strip meeting two rows
    /// then gathers its bytes), rather than each row padded to one run a
    /// tap (columns computed and not stored): for kernels whose products
    /// cost more than the gathers, as `SMLAD`'s (every [`QMicro::WIDE`]
    /// kernel) and AVX2's exact `vpmaddwd`.
    const DENSE: bool = Self::WIDE;

    /// Group `grp` of a widened strip of `groups` groups (`2 * 64 *
    /// groups` bytes at the start of `strip`), from four `k`'s bytes `a`,
    /// `b`, `c`, `d` (activations `A`) over the strip's sixteen columns.
    /// A widened strip is four quads of four columns, quad `q` at `32 q
    /// groups`, each group of a quad at `32 g` in it: column `j`'s two
    /// words at `8 j`, halves `(a, c)` then `(b, d)` (low half first),
    /// each the byte's value as an `i16`. So the quads of a block's strips
    /// follow each other, quad `i` at `32 i groups`. Arguments out of
    /// bounds are the caller's bug: a panic in debug builds, nothing done
    /// in release builds.
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
        interleave_wide_portable::<A>(strip, groups, grp, [a, b, c, d])
    }

    /// Row `r` of a weight panel (`i8`, four bytes of group `g` at
    /// `panel[32 g + 4 r..]`), `groups` groups, widened into `dst` as
    /// [`QMicro::interleave_wide`] lays out a column: group `g` at `dst[8
    /// g..8 g + 8]`. Arguments out of bounds are the caller's bug, as
    /// there.
    #[inline(always)]
    fn widen_row(self, panel: &[u8], r: usize, groups: usize, dst: &mut [u8]) {
        widen_row_portable(panel, r, groups, dst)
    }

    /// `sums[c] = sum w * a` (set, not added) for the block's first `len`
    /// columns, with `row` a widened weight row ([`QMicro::widen_row`], 8
    /// bytes a group) and `block` quads of [`QMicro::interleave_wide`]'s
    /// layout, `groups` groups each; `sums[len..]` up to the next multiple
    /// of four may be set to anything. Slices too short are the caller's
    /// bug, as in [`QMicro::widen_row`].
    #[inline(always)]
    fn act_wide_run(self, row: &[u8], block: &[u8], groups: usize, len: usize, sums: &mut [i32]) {
        act_wide_run_portable(row, block, groups, len, sums)
    }

    /// `dst`'s word `i` is `a[i], b[i], c[i], d[i]`: four `k` of sixteen
    /// columns as a strip group (the im2col block's layout).
    #[inline(always)]
    fn interleave16(
        self,
        dst: &mut [u8; 64],
        a: &[u8; 16],
        b: &[u8; 16],
        c: &[u8; 16],
        d: &[u8; 16],
    ) {
        // Every x86-64 has SSE2's unpacks, whichever tile runs.
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        return avx2::interleave16_sse2(dst, a, b, c, d);
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        interleave16_portable(dst, a, b, c, d)
    }

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

    /// `dst[c] = out(ch (acc[c]))` for `c < min(acc.len(), dst.len())`,
    /// any length (a widened block's row).
    #[inline(always)]
    fn splat_run<Y: Q8>(self, acc: &[i32], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
        crate::simd::q8::requant::splat_row(acc, ch, out, dst)
    }
}

/// `dst`'s word `i` is `a[i], b[i], c[i], d[i]` (written as whole words, so
/// the loop vectorises: widen, shift, or).
// On x86-64 only the tests call it (the reference for the SSE2 form).
#[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2", not(test)), allow(dead_code))]
#[inline(always)]
pub(crate) fn interleave16_portable(
    dst: &mut [u8; 64],
    a: &[u8; 16],
    b: &[u8; 16],
    c: &[u8; 16],
    d: &[u8; 16],
) {
    for (i, w) in dst.chunks_exact_mut(4).enumerate() {
        let v =
            u32::from(a[i]) | u32::from(b[i]) << 8 | u32::from(c[i]) << 16 | u32::from(d[i]) << 24;
        w.copy_from_slice(&v.to_le_bytes());
    }
}

/// Whether a widened row of `groups` groups, the first `len` columns of a
/// block of such quads, and their sums fit their slices
/// ([`QMicro::act_wide_run`]).
#[inline(always)]
pub(crate) fn wide_run_fits(
    row: &[u8],
    block: &[u8],
    groups: usize,
    len: usize,
    sums: &[i32],
) -> bool {
    let quads = len.div_ceil(4);
    groups.checked_mul(WIDE_ROW_BYTES).is_some_and(|n| n <= row.len())
        && quads
            .checked_mul(groups)
            .and_then(|n| n.checked_mul(WIDE_QUAD_GROUP_BYTES))
            .is_some_and(|n| n <= block.len())
        && 4 * quads <= sums.len()
}

/// Whether group `grp` of a widened strip of `groups` groups lies in
/// `strip` ([`QMicro::interleave_wide`]).
#[inline(always)]
pub(crate) fn wide_strip_fits(strip: &[u8], groups: usize, grp: usize) -> bool {
    grp < groups && groups.checked_mul(4 * WIDE_QUAD_GROUP_BYTES).is_some_and(|n| n <= strip.len())
}

/// [`QMicro::interleave_wide`] in plain loops.
pub(crate) fn interleave_wide_portable<A: Q8>(
    strip: &mut [u8],
    groups: usize,
    grp: usize,
    k: [&[u8; 16]; 4],
) {
    let fits = wide_strip_fits(strip, groups, grp);
    debug_assert!(fits, "q8 interleave_wide out of bounds");
    if !fits {
        return;
    }
    let h = |b: u8| (A::of_bits(b) as i16).to_le_bytes();
    for q in 0..4 {
        let dst = &mut strip[WIDE_QUAD_GROUP_BYTES * (q * groups + grp)..][..WIDE_QUAD_GROUP_BYTES];
        for (j, d) in dst.chunks_exact_mut(8).enumerate() {
            let [a, b, c, e] = k.map(|s| h(s[4 * q + j]));
            d.copy_from_slice(&[a[0], a[1], c[0], c[1], b[0], b[1], e[0], e[1]]);
        }
    }
}

/// Whether row `r` of a panel of `groups` groups and its widened form fit
/// their slices ([`QMicro::widen_row`]).
#[inline(always)]
pub(crate) fn widen_row_fits(panel: &[u8], r: usize, groups: usize, dst: &[u8]) -> bool {
    r < 8
        && groups.checked_mul(PANEL_GROUP_BYTES).is_some_and(|n| n <= panel.len())
        && groups.checked_mul(WIDE_ROW_BYTES).is_some_and(|n| n <= dst.len())
}

/// [`QMicro::widen_row`] in plain loops.
pub(crate) fn widen_row_portable(panel: &[u8], r: usize, groups: usize, dst: &mut [u8]) {
    let fits = widen_row_fits(panel, r, groups, dst);
    debug_assert!(fits, "q8 widen_row out of bounds");
    if !fits {
        return;
    }
    for (g, d) in dst.chunks_exact_mut(WIDE_ROW_BYTES).take(groups).enumerate() {
        let b = &panel[PANEL_GROUP_BYTES * g + 4 * r..][..4];
        let h = |i: usize| (b[i] as i8 as i16).to_le_bytes();
        let [h0, h1, h2, h3] = [h(0), h(1), h(2), h(3)];
        d.copy_from_slice(&[h0[0], h0[1], h2[0], h2[1], h1[0], h1[1], h3[0], h3[1]]);
    }
}

/// [`QMicro::act_wide_run`] in plain loops (every column of the quads).
pub(crate) fn act_wide_run_portable(
    row: &[u8],
    block: &[u8],
    groups: usize,
    len: usize,
    sums: &mut [i32],
) {
    let fits = wide_run_fits(row, block, groups, len, sums);
    debug_assert!(fits, "q8 wide run out of bounds");
    if !fits {
        return;
    }
    let half = |s: &[u8], at: usize| i32::from(i16::from_le_bytes([s[at], s[at + 1]]));
    for (c, sum) in sums.iter_mut().enumerate().take(4 * len.div_ceil(4)) {
        let quad = &block[(c / 4) * groups * WIDE_QUAD_GROUP_BYTES..];
        let mut a = 0i32;
        for g in 0..groups {
            let w = &row[g * WIDE_ROW_BYTES..][..WIDE_ROW_BYTES];
            let x = &quad[g * WIDE_QUAD_GROUP_BYTES + 8 * (c % 4)..][..8];
            // Both hold k 0, 2, 1, 3 (see `QMicro::interleave_wide`).
            for at in [0, 2, 4, 6] {
                a = a.wrapping_add(half(w, at) * half(x, at));
            }
        }
        *sum = a;
    }
}
