//! The int8 convolutions: weight panels, im2col into blocks of packed
//! columns and their product (group 1 and grouped), depthwise, and the
//! plain loop (`Dense` weights, 3-d and higher).
//!
//! The im2col block holds up to [`BLOCK_COLS`] output positions (fewer
//! when `K` is large: about [`BLOCK_BYTES`] in all, never under 32), laid
//! out as `int8::pack_weights`'s strips: 16 positions per strip, four `k`
//! per 32-bit word. Padding reads as the input's zero point, so it adds
//! `(x_zero - x_zero) w = 0` once the row sums take the zero point off.
//!
//! A block is written four `k` at a time by interleaving four byte runs
//! ([`interleave`]), so each `k`'s bytes over the block's positions must
//! be one contiguous run. A pointwise convolution's are the input's
//! channel rows. Any other copies the block's input into its stride
//! phases first ([`Wide`]), computing a few positions past each output
//! row that are never stored.

pub(crate) mod depthwise;

use crate::conv::{Conv, Window};
use crate::int8::{Q8, Requant};
use crate::shape::{MAX_RANK, next_index, numel};
use crate::simd::q8::elementwise::AddRuns;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, MAX_MR, NR, QMicro, Tile};
use crate::simd::q8::gemm::{WithKernel, dispatch, sum_at};
use crate::simd::q8::requant::{Chan, OutRange};

/// Rows of a weight panel.
pub(crate) const PANEL: usize = 8;
/// The most output positions of one im2col block.
pub(crate) const BLOCK_COLS: usize = 128;
/// About the most bytes of one im2col block.
pub(crate) const BLOCK_BYTES: usize = 32 * 1024;

/// A 2-d window (a 1-d one as a single row).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geom {
    pub ih: usize,
    pub iw: usize,
    pub oh: usize,
    pub ow: usize,
    pub kh: usize,
    pub kw: usize,
    pub sh: usize,
    pub sw: usize,
    pub dh: usize,
    pub dw: usize,
    pub ph: usize,
    pub pw: usize,
}

impl Geom {
    /// The geometry of a checked 1-d or 2-d window.
    pub(crate) fn of(w: &Window<'_>) -> Option<Geom> {
        match w.in_dims.len() {
            1 => Some(Geom {
                ih: 1,
                iw: w.in_dims[0],
                oh: 1,
                ow: w.out_dims[0],
                kh: 1,
                kw: w.kernel[0],
                sh: 1,
                sw: w.strides[0],
                dh: 1,
                dw: w.dilations[0],
                ph: 0,
                pw: w.pads_begin[0],
            }),
            2 => Some(Geom {
                ih: w.in_dims[0],
                iw: w.in_dims[1],
                oh: w.out_dims[0],
                ow: w.out_dims[1],
                kh: w.kernel[0],
                kw: w.kernel[1],
                sh: w.strides[0],
                sw: w.strides[1],
                dh: w.dilations[0],
                dw: w.dilations[1],
                ph: w.pads_begin[0],
                pw: w.pads_begin[1],
            }),
            _ => None,
        }
    }

    /// Whether the window is 1x1, stride 1, no padding: the input is the
    /// im2col matrix.
    pub(crate) fn pointwise(&self) -> bool {
        self.kh == 1 && self.kw == 1 && self.sh == 1 && self.sw == 1 && self.ph == 0 && self.pw == 0
    }
}

/// `K`, the sum's length per output: `C / group * taps`.
fn k_of(p: &Conv<'_>) -> Option<usize> {
    (p.in_channels / p.groups.max(1)).checked_mul(numel(p.window.kernel).ok()?)
}

/// The bytes of the packed weights of a (checked) `p`.
pub(crate) fn packed_len(p: &Conv<'_>) -> Option<usize> {
    let k = k_of(p)?;
    if p.groups == p.in_channels && p.groups == p.out_channels {
        return p.out_channels.checked_mul(k);
    }
    let mg = p.out_channels / p.groups.max(1);
    let panels = mg.div_ceil(PANEL).checked_mul(p.groups)?;
    let body = panels.checked_mul(PANEL)?.checked_mul(k.checked_next_multiple_of(4)?)?;
    body.checked_add(p.out_channels.checked_mul(4)?)
}

/// Packs `w` as `int8::pack_conv_weights` documents (not depthwise;
/// lengths checked by the caller).
pub(crate) fn pack(p: &Conv<'_>, w: &[i8], out: &mut [u8]) {
    let Some(k) = k_of(p) else { return };
    let k4 = k.next_multiple_of(4);
    let mg = p.out_channels / p.groups;
    let (sums, body) = out.split_at_mut(4 * p.out_channels);
    for (m, d) in sums.chunks_exact_mut(4).enumerate() {
        let s: i32 = w[m * k..(m + 1) * k].iter().map(|&v| i32::from(v)).sum();
        d.copy_from_slice(&s.to_le_bytes());
    }
    let panels = mg.div_ceil(PANEL);
    if k4 == 0 {
        return;
    }
    for (pi, panel) in body.chunks_exact_mut(PANEL * k4).enumerate() {
        let (g, pn) = (pi / panels, pi % panels);
        for (i, v) in panel.iter_mut().enumerate() {
            let (grp, r, q) = (i / 32, i % 32 / 4, i % 4);
            let (mi, kk) = (pn * PANEL + r, 4 * grp + q);
            *v = if mi < mg && kk < k { w[(g * mg + mi) * k + kk] as u8 } else { 0 };
        }
    }
}

/// `w[m, k]` read out of a packed (not depthwise) blob.
pub(crate) fn packed_weight(p: &Conv<'_>, blob: &[u8], m: usize, kk: usize) -> i32 {
    let Some(k) = k_of(p) else { return 0 };
    let k4 = k.next_multiple_of(4);
    let mg = p.out_channels / p.groups;
    let (g, mi) = (m / mg, m % mg);
    let panel = g * mg.div_ceil(PANEL) + mi / PANEL;
    let at = 4 * p.out_channels + panel * PANEL * k4 + kk / 4 * 32 + mi % PANEL * 4 + kk % 4;
    blob.get(at).map_or(0, |&b| i32::from(b as i8))
}

/// Output positions one im2col block aims at: about [`BLOCK_BYTES`] of
/// strips, at most [`BLOCK_COLS`], never under two strips.
fn budget(k4: usize) -> usize {
    (BLOCK_BYTES / (NR * k4.max(1))).clamp(2, BLOCK_COLS / NR) * NR
}

/// The budget of a block widened to 16 bits (`QMicro::WIDE`): half of
/// [`budget`]'s, in whole strips.
fn half_budget(k4: usize) -> usize {
    (budget(k4) / (2 * NR) * NR).max(NR)
}

/// Positions of a pointwise block: `budget`, or the whole plane's
/// strips when fewer.
fn pointwise_cols(budget: usize, out_size: usize) -> usize {
    budget.min(out_size.next_multiple_of(NR)).max(NR)
}

/// The stride phases of one axis of a window: the padded input's rows (or
/// columns) `r, r + s, r + 2 s, ...` make phase `r`, and tap `t` (at
/// offset `t d`) of output `o` reads phase `(t d) % s` at `o + (t d) / s`.
/// Only the phases some tap reads are kept, numbered by [`Phases::index`].
#[derive(Clone, Copy, Debug)]
struct Phases {
    /// Taps.
    k: usize,
    /// Dilation.
    d: usize,
    /// Stride.
    s: usize,
    /// `gcd(d, s)`: the residues `(t d) % s` are its multiples.
    g: usize,
    /// Whether the taps reach every such residue (else each tap has its
    /// own: `t d % s` are distinct for `t < s / g`).
    full: bool,
}

impl Phases {
    fn of(k: usize, d: usize, s: usize) -> Phases {
        let (mut a, mut b) = (d.max(1), s.max(1));
        while b != 0 {
            (a, b) = (b, a % b);
        }
        let s = s.max(1);
        Phases { k: k.max(1), d, s, g: a, full: k.max(1) >= s / a }
    }

    /// The phases kept.
    fn count(&self) -> usize {
        if self.full { self.s / self.g } else { self.k }
    }

    /// The phase tap `t` reads.
    fn index(&self, t: usize) -> usize {
        if self.full { t * self.d % self.s / self.g } else { t }
    }

    /// The residue of phase `i`.
    fn residue(&self, i: usize) -> usize {
        if self.full { i * self.g } else { i * self.d % self.s }
    }

    /// How far into its phase tap `t` reads past the output's position.
    fn shift(&self, t: usize) -> usize {
        t * self.d / self.s
    }
}

/// How the im2col path covers the output of a convolution that is not
/// pointwise: blocks of `rows` whole output rows (`xc == ow`), or of `xc`
/// columns of one row when a row alone exceeds the budget. The input is
/// copied per block into its stride phases ([`Phases`]), each phase row
/// `pw = xc + msx` bytes: then a tap's bytes for output row `r` of the
/// block are the run at `r pw` from the tap's start in its phase plane.
/// A block's columns are its positions densely (`rows xc`, row after row:
/// no product spent on the `msx` bytes between the runs, but a strip that
/// meets two rows gathers its bytes), or padded (`rows pw`: each tap one
/// run, `msx` columns of each row computed and not stored), see
/// [`Block::cw`].
#[derive(Clone, Copy, Debug)]
struct Wide {
    ph_y: Phases,
    ph_x: Phases,
    /// The most a tap shifts down / right within its phase.
    msy: usize,
    msx: usize,
    /// Output columns per block row.
    xc: usize,
    /// Output rows per block (1 when a row is split).
    rows: usize,
}

impl Wide {
    /// The blocks of about `budget` positions.
    fn of(geo: &Geom, budget: usize) -> Wide {
        let (ph_y, ph_x) = (Phases::of(geo.kh, geo.dh, geo.sh), Phases::of(geo.kw, geo.dw, geo.sw));
        let (msy, msx) = (ph_y.shift(ph_y.k - 1), ph_x.shift(ph_x.k - 1));
        let (xc, rows) = if geo.ow <= budget {
            (geo.ow, (budget / geo.ow.max(1)).clamp(1, geo.oh.max(1)))
        } else {
            // Whole strips per piece (`budget` is a multiple of 16).
            (budget.max(NR), 1)
        };
        Wide { ph_y, ph_x, msy, msx, xc, rows }
    }

    /// Bytes of a phase row.
    fn pw(&self) -> usize {
        self.xc + self.msx
    }

    /// Bytes of one phase plane of a block.
    fn plane(&self) -> Option<usize> {
        (self.rows + self.msy).checked_mul(self.pw())
    }

    /// Bytes of a block's phase planes: every channel of the group, every
    /// kept phase.
    fn source_len(&self, cg: usize) -> Option<usize> {
        cg.checked_mul(self.ph_y.count())?
            .checked_mul(self.ph_x.count())?
            .checked_mul(self.plane()?)
    }

    /// Where tap `(ky, kx)` of channel `ci` starts in the phase planes.
    fn tap_at(&self, ci: usize, ky: usize, kx: usize) -> usize {
        let (ny, nx) = (self.ph_y.count(), self.ph_x.count());
        let plane = (ci * ny + self.ph_y.index(ky)) * nx + self.ph_x.index(kx);
        plane * (self.rows + self.msy) * self.pw()
            + self.ph_y.shift(ky) * self.pw()
            + self.ph_x.shift(kx)
    }
}

/// The scratch elements of the im2col path: a widened weight row (`2
/// k4` bytes, for the kernels that take widened blocks), the block of
/// strips, and for a convolution that is not pointwise the phase planes
/// behind it.
pub(crate) fn scratch_len(p: &Conv<'_>) -> Option<usize> {
    let k4 = k_of(p)?.checked_next_multiple_of(4)?;
    let row = k4.checked_mul(2)?;
    let geo = Geom::of(&p.window)?;
    if geo.pointwise() {
        let out = numel(p.window.out_dims).ok()?;
        let cols = pointwise_cols(budget(k4), out).max(2 * pointwise_cols(half_budget(k4), out));
        return k4.checked_mul(cols)?.checked_add(row);
    }
    let w = Wide::of(&geo, budget(k4));
    // At the whole budget as `Im2col::run` lays it out (dense where the
    // rows are whole strips, else padded), dense at the widened half.
    let cw = if w.xc.is_multiple_of(NR) { w.xc } else { w.pw() };
    let block = w.rows.checked_mul(cw)?.checked_next_multiple_of(NR)?.checked_mul(k4)?;
    let h = Wide::of(&geo, half_budget(k4));
    let wide = h.rows.checked_mul(h.xc)?.checked_next_multiple_of(NR)?.checked_mul(2 * k4)?;
    block.max(wide).checked_add(w.source_len(p.in_channels / p.groups.max(1))?)?.checked_add(row)
}

/// Where the weights of a plain-loop convolution come from.
pub(crate) trait WeightAt {
    /// `w[m, k]`, `k` over the group's channels then the taps.
    fn at(&mut self, m: usize, k: usize) -> i32;
}

struct Dense<'a>(&'a [i8], usize);

impl WeightAt for Dense<'_> {
    #[inline]
    fn at(&mut self, m: usize, k: usize) -> i32 {
        i32::from(self.0[m * self.1 + k])
    }
}

/// The plain loop, any rank, dense weights (lengths checked by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reference<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    x: &[A],
    x_zero: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) {
    let k = k_of(p).unwrap_or(0);
    reference_with(p, x, x_zero, &mut Dense(w, k), bias, rq, y)
}

/// The plain loop, any rank: every output sums `(x - x_zero) w` over the
/// taps inside the input (padding adds nothing).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reference_with<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    x: &[A],
    x_zero: i32,
    w: &mut impl WeightAt,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) {
    let (Ok(in_size), Ok(out_size), Ok(taps)) =
        (numel(p.window.in_dims), numel(p.window.out_dims), numel(p.window.kernel))
    else {
        return;
    };
    let (cg, mg) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let out = OutRange::of(rq);
    let mut opos = [0usize; MAX_RANK];
    let opos = &mut opos[..p.window.in_dims.len()];
    for n in 0..p.batch {
        for m in 0..p.out_channels {
            let g = m / mg;
            opos.fill(0);
            for o in 0..out_size {
                let mut acc = bias.map_or(0, |b| b[m]);
                for ci in 0..cg {
                    let base = (n * p.in_channels + g * cg + ci) * in_size;
                    p.window.taps(opos, |tap, at| {
                        if let Some(at) = at {
                            let v = (x[base + at].get() - x_zero) * w.at(m, ci * taps + tap);
                            acc = acc.wrapping_add(v);
                        }
                    });
                }
                y[(n * p.out_channels + m) * out_size + o] = out.put(rq.scale(m).apply(acc));
                next_index(opos, p.window.out_dims);
            }
        }
    }
}

/// `dst[c] = row[start + c]` where that lies in `row`, else `z`.
#[inline(always)]
fn copy_clipped(dst: &mut [u8], row: &[u8], start: isize, z: u8) {
    let len = dst.len() as isize;
    let lo = (-start).clamp(0, len) as usize;
    let hi = (row.len() as isize - start).clamp(lo as isize, len) as usize;
    dst[..lo].fill(z);
    let from = (start + lo as isize) as usize;
    copy_run(&mut dst[lo..hi], &row[from..from + (hi - lo)]);
    dst[hi..].fill(z);
}

/// `dst.copy_from_slice(src)` (equal lengths) in fixed-size moves of 16,
/// 8 or 4 bytes (the last two overlapping) rather than a call to
/// `memcpy`: the short runs of phase rows and padded planes cost less so
/// than the call, and on a Cortex-M4 the library's copy of unaligned
/// rows took about three instructions a byte.
#[inline(always)]
pub(crate) fn copy_run(dst: &mut [u8], src: &[u8]) {
    let n = dst.len();
    debug_assert_eq!(n, src.len());
    if src.len() != n {
        return;
    }
    if n >= 16 {
        let mut i = 0;
        while i + 16 < n {
            dst[i..i + 16].copy_from_slice(&src[i..i + 16]);
            i += 16;
        }
        dst[n - 16..].copy_from_slice(&src[n - 16..n]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..n]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..n]);
    } else {
        for (d, &v) in dst.iter_mut().zip(src) {
            *d = v;
        }
    }
}

/// `dst[c] = row[start + c step]` where that lies in `row`, else `z`
/// (`step >= 2`). At stride 2, four bytes at a time from two words (a
/// byte loop took about eight instructions a byte on a Cortex-M4).
#[inline(always)]
fn copy_strided(dst: &mut [u8], row: &[u8], start: isize, step: usize, z: u8) {
    let (len, n, st) = (dst.len(), row.len() as isize, step.max(1) as isize);
    // The first `c` with `start + c step >= 0`, and with `>= n`.
    let first_at = |bound: isize| -> usize {
        let d = bound - start;
        if d <= 0 { 0 } else { ((d + st - 1) / st).min(len as isize) as usize }
    };
    let (lo, hi) = (first_at(0), first_at(n).max(first_at(0)));
    dst[..lo].fill(z);
    dst[hi..].fill(z);
    let mut c = lo;
    if step == 2 {
        // Whole words: output bytes `c..c + 4 words`, whose sources `at..at
        // + 8 words` lie within the row (`at >= 0` as `c >= lo`), sliced
        // once so the loop has no bounds to test.
        let at = start + 2 * c as isize;
        let words = ((hi - c) / 4).min(((n - at).max(0) / 8) as usize);
        let (from, to) = (at as usize, at as usize + 8 * words);
        if let (Some(src), Some(out)) = (row.get(from..to), dst.get_mut(c..c + 4 * words)) {
            // Bytes 0 and 2 of a word as its low half (`UXTB16`, an `ORR`
            // on Arm).
            let even = |w: u32| {
                let x = w & 0x00ff_00ff;
                (x | x >> 8) & 0xffff
            };
            for (d, s) in out.chunks_exact_mut(4).zip(src.chunks_exact(8)) {
                let a = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
                let b = u32::from_le_bytes([s[4], s[5], s[6], s[7]]);
                d.copy_from_slice(&(even(a) | even(b) << 16).to_le_bytes());
            }
            c += 4 * words;
        }
    }
    for (i, d) in dst[c..hi].iter_mut().enumerate() {
        let at = start + (c + i) as isize * st;
        *d = row.get(at as usize).copied().unwrap_or(z);
    }
}

/// Copies the input of the block of output rows `oy0..oy0 + rows`,
/// columns `x0..x0 + w.xc`, into its phase planes in `src` (padding reads
/// `z`): phase `(ry, rx)`'s row `r` column `c` is the padded input at row
/// `(oy0 + r) sh + ry`, column `(x0 + c) sw + rx`. `x` is the group's
/// first channel onwards.
#[allow(clippy::too_many_arguments)]
fn fill_phases(
    geo: &Geom,
    w: &Wide,
    cg: usize,
    x: &[u8],
    z: u8,
    oy0: usize,
    rows: usize,
    x0: usize,
    src: &mut [u8],
) {
    let (pw, plane) = (w.pw(), (w.rows + w.msy) * w.pw());
    let in_plane = geo.ih * geo.iw;
    let mut planes = src.chunks_exact_mut(plane.max(1));
    for ci in 0..cg {
        let xin = &x[ci * in_plane..][..in_plane];
        for iy in 0..w.ph_y.count() {
            let ry = w.ph_y.residue(iy);
            for ix in 0..w.ph_x.count() {
                let rx = w.ph_x.residue(ix);
                let Some(pl) = planes.next() else { return };
                for (r, dst) in pl.chunks_exact_mut(pw.max(1)).take(rows + w.msy).enumerate() {
                    let y = ((oy0 + r) * geo.sh + ry).wrapping_sub(geo.ph);
                    if y >= geo.ih {
                        dst.fill(z);
                        continue;
                    }
                    let row = &xin[y * geo.iw..][..geo.iw];
                    if geo.sw == 1 {
                        copy_clipped(dst, row, (x0 + rx) as isize - geo.pw as isize, z);
                    } else {
                        let start = ((x0 * geo.sw + rx) as isize) - geo.pw as isize;
                        copy_strided(dst, row, start, geo.sw, z);
                    }
                }
            }
        }
    }
}

/// Writes group `grp` (four `k`) of block `b`'s strips: the strip's word
/// of column `c` (row `r = c / cw`, column `x = c % cw` of the block)
/// takes byte `r pw + x` of each source (0 past a source's end or past
/// the block: such a position is never stored, or meets a zero weight).
/// A padded block, or a strip within one row, reads each source as one
/// run. A kernel that takes widened blocks ([`QMicro::WIDE`]) gets them
/// widened here, strip `s` at `2 s NR k4` in its layout
/// ([`QMicro::interleave_wide`]).
#[inline(always)]
fn interleave<A: Q8, K: QMicro>(
    kern: K,
    block: &mut [u8],
    k4: usize,
    b: &Block,
    grp: usize,
    srcs: [&[u8]; 4],
) {
    let (len, strip) = (b.len(), NR * k4);
    let (xc, pw) = (b.cw.max(1), b.pw);
    let mut emit = |s: usize, k: [&[u8; NR]; 4]| {
        if K::WIDE {
            let Some(st) = block.get_mut(2 * s * strip..) else { return };
            kern.interleave_wide::<A>(st, k4 / 4, grp, k[0], k[1], k[2], k[3]);
        } else {
            let Some(dst) = block.get_mut(s * strip + grp * GROUP_BYTES..) else { return };
            let Some(dst) = dst.first_chunk_mut::<GROUP_BYTES>() else { return };
            kern.interleave16(dst, k[0], k[1], k[2], k[3]);
        }
    };
    // Strip `s`'s first position, as (row, column) of the block.
    let (mut r, mut x) = (0, 0);
    for s in 0..len.div_ceil(NR) {
        let at = r * pw + x;
        let run = |q: usize| srcs[q].get(at..).and_then(|r| r.first_chunk::<NR>());
        let whole = xc == pw || x + NR <= xc;
        match (run(0), run(1), run(2), run(3)) {
            (Some(a), Some(b), Some(c), Some(d)) if whole => emit(s, [a, b, c, d]),
            _ => {
                // The strip's runs, one per output row it meets.
                let mut part = [[0u8; NR]; 4];
                let (mut lane, mut rr, mut xx) = (0, r, x);
                while lane < NR && s * NR + lane < len {
                    let n = (xc - xx).min(NR - lane).min(len - s * NR - lane);
                    let at = rr * pw + xx;
                    for (p, src) in part.iter_mut().zip(&srcs) {
                        let src = src.get(at..).unwrap_or(&[]);
                        let m = n.min(src.len());
                        p[lane..lane + m].copy_from_slice(&src[..m]);
                    }
                    (lane, rr, xx) = (lane + n, rr + 1, 0);
                }
                emit(s, [&part[0], &part[1], &part[2], &part[3]]);
            }
        }
        x += NR;
        while x >= xc {
            (x, r) = (x - xc, r + 1);
        }
    }
}

/// The offsets of each tap's run in a block's phase planes, `wide.tap_at`
/// as a sum `ci plane_c + ty[ky] + tx[kx]`, tabled for the first 16 taps
/// of each axis (the rest computed when met).
struct TapTable<'a> {
    wide: &'a Wide,
    per_channel: usize,
    ty: [usize; 16],
    tx: [usize; 16],
}

impl<'a> TapTable<'a> {
    fn new(wide: &'a Wide) -> TapTable<'a> {
        let per_channel = wide.tap_at(1, 0, 0) - wide.tap_at(0, 0, 0);
        let ty = core::array::from_fn(|t| wide.tap_at(0, t, 0));
        let tx = core::array::from_fn(|t| wide.tap_at(0, 0, t));
        TapTable { wide, per_channel, ty, tx }
    }

    #[inline(always)]
    fn at(&self, ci: usize, ky: usize, kx: usize) -> usize {
        let y = if ky < 16 { self.ty[ky] } else { self.wide.tap_at(0, ky, 0) };
        let x = if kx < 16 { self.tx[kx] } else { self.wide.tap_at(0, 0, kx) };
        ci * self.per_channel + y + x
    }
}

/// The output positions of one block: `rows` rows from `oy0` of `xc`
/// columns from `x0` (whole rows, `xc == ow`, when `rows > 1`), read from
/// phase planes `pw` to a row.
#[derive(Clone, Copy, Debug)]
struct Block {
    oy0: usize,
    rows: usize,
    x0: usize,
    xc: usize,
    pw: usize,
    /// The block's columns per row: `xc` (dense) or `pw` (padded, the
    /// last `pw - xc` of each row not stored).
    cw: usize,
}

impl Block {
    /// The block's columns.
    fn len(&self) -> usize {
        self.rows * self.cw
    }

    /// The stored runs of strip `s`: (first lane, lanes, output offset in
    /// a plane `ow` wide), runs that continue each other in the output
    /// joined; returns how many.
    fn runs(&self, s: usize, ow: usize, out: &mut [(usize, usize, usize); NR]) -> usize {
        let (mut c, end) = (NR * s, (NR * s + NR).min(self.len()));
        let cw = self.cw.max(1);
        let mut n = 0;
        while c < end && n < NR {
            let (r, col) = (c / cw, c % cw);
            if col < self.xc {
                let len = (self.xc - col).min(end - c);
                let off = (self.oy0 + r) * ow + self.x0 + col;
                match n.checked_sub(1).map(|i| &mut out[i]) {
                    Some((lane, l, o)) if *lane + *l == c - NR * s && *o + *l == off => *l += len,
                    _ => {
                        out[n] = (c - NR * s, len, off);
                        n += 1;
                    }
                }
                c += len;
            } else {
                c += cw - col;
            }
        }
        n
    }
}

/// Group 1 and grouped 1-d or 2-d convolutions with packed weights: per
/// block of output positions, im2col into `scratch`, then the product of
/// each weight panel by the block (lengths checked by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn im2col<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    geo: &Geom,
    io: Io<'_, Y>,
    x_zero: i32,
    w: &[u8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    add: Option<&AddRuns<Y>>,
    scratch: &mut [A],
) {
    dispatch(Im2col { p, geo, io, x_zero, w, bias, rq, add, scratch });
}

/// A convolution's input (as bytes) and output: two buffers, or one that
/// the output overwrites as the input is consumed (`int8::qconv_in_place`:
/// the input's type is then the output's). The drivers borrow the input
/// only while they copy from it, the output only while they store.
pub(crate) enum Io<'a, Y> {
    Apart { x: &'a [u8], y: &'a mut [Y] },
    Shared(&'a mut [Y]),
}

impl<Y: Q8> Io<'_, Y> {
    #[inline(always)]
    pub(crate) fn x(&self) -> &[u8] {
        match self {
            Io::Apart { x, .. } => x,
            Io::Shared(b) => Y::as_bytes(b),
        }
    }

    #[inline(always)]
    pub(crate) fn y(&mut self) -> &mut [Y] {
        match self {
            Io::Apart { y, .. } => y,
            Io::Shared(b) => b,
        }
    }
}

struct Im2col<'a, 'c, 'r, A, Y> {
    p: &'a Conv<'c>,
    geo: &'a Geom,
    io: Io<'a, Y>,
    x_zero: i32,
    w: &'a [u8],
    bias: Option<&'a [i32]>,
    rq: &'a Requant<'r>,
    /// A residual `Add` after the output stage: the output holds the
    /// residual on entry, each run the stage writes is added to it.
    add: Option<&'a AddRuns<Y>>,
    scratch: &'a mut [A],
}

impl<A: Q8, Y: Q8> WithKernel for Im2col<'_, '_, '_, A, Y> {
    #[inline(always)]
    fn run<K: QMicro>(self, kern: K) {
        let Im2col { p, geo, mut io, x_zero, w, bias, rq, add, scratch } = self;
        let Some(k) = k_of(p) else { return };
        let k4 = k.next_multiple_of(4);
        let (cg, mg) = (p.in_channels / p.groups, p.out_channels / p.groups);
        let (in_plane, out_size) = (geo.ih * geo.iw, geo.oh * geo.ow);
        let panels = mg.div_ceil(PANEL);
        let Some((sums, body)) = w.split_at_checked(4 * p.out_channels) else { return };
        let scratch = A::as_bytes_mut(scratch);
        let zbits = A::saturate(x_zero).bits();
        let zoff = x_zero + kern.offset::<A>();
        let out = OutRange::of(rq);
        let mr = K::MR.min(MAX_MR);
        // The blocks: runs of the flattened plane when pointwise, else
        // `Wide`'s rows or row pieces.
        let pointwise = geo.pointwise();
        // As `scratch_len` plans them: at the whole budget dense where
        // the rows are whole strips, else padded; dense at the widened half.
        let block_len = |budget: usize, whole: bool| {
            if pointwise {
                pointwise_cols(budget, out_size) * k4
            } else {
                let w = Wide::of(geo, budget);
                let cw = if whole && !w.xc.is_multiple_of(NR) { w.pw() } else { w.xc };
                (w.rows * cw).next_multiple_of(NR) * k4
            }
        };
        // A kernel that takes widened blocks (`QMicro::WIDE`) gets blocks
        // of half the budget, built as 16-bit halves (the scratch is
        // planned for the larger of a whole block and two such halves).
        let widen = K::WIDE;
        let block_bytes = block_len(budget(k4), true).max(2 * block_len(half_budget(k4), false));
        let budget = if widen { half_budget(k4) } else { budget(k4) };
        let wide = Wide::of(geo, budget);
        // Dense blocks where the products dominate (`QMicro::DENSE`) or
        // where no strip meets two rows; padded ones else (one run a tap).
        let dense = K::DENSE || wide.xc.is_multiple_of(NR);
        debug_assert!(!dense || pointwise || wide.rows == 1 || wide.xc == geo.ow, "q8 dense rows");
        let cw = |xc: usize| if dense { xc } else { xc + wide.msx };
        let table = TapTable::new(&wide);
        let cols = pointwise_cols(budget, out_size);
        let per_row = geo.ow.div_ceil(wide.xc.max(1));
        let nblocks = if pointwise {
            out_size.div_ceil(cols)
        } else if wide.xc == geo.ow {
            geo.oh.div_ceil(wide.rows)
        } else {
            geo.oh * per_row
        };
        let block_at = |i: usize| -> Block {
            if pointwise {
                let x0 = i * cols;
                let xc = cols.min(out_size - x0);
                Block { oy0: 0, rows: 1, x0, xc, pw: xc, cw: xc }
            } else if wide.xc == geo.ow {
                let oy0 = i * wide.rows;
                let rows = wide.rows.min(geo.oh - oy0);
                Block { oy0, rows, x0: 0, xc: geo.ow, pw: wide.pw(), cw: cw(geo.ow) }
            } else {
                let x0 = i % per_row * wide.xc;
                let xc = wide.xc.min(geo.ow - x0);
                Block { oy0: i / per_row, rows: 1, x0, xc, pw: wide.pw(), cw: cw(xc) }
            }
        };
        // A widened weight row first (a multiple of 8 bytes: the block
        // after it keeps the scratch's alignment), then the block, then the
        // phase planes.
        let Some((row, scratch)) = scratch.split_at_mut_checked(2 * k4) else { return };
        let row = &mut *row;
        let Some((block, src)) = scratch.split_at_mut_checked(block_bytes) else { return };
        // The tile's sums; only its first `mr` rows are used (and cleared).
        let mut acc: Acc = [[0; NR]; MAX_MR];
        // A widened block's row of sums (a widened block has at most
        // `half_budget` positions, within half of `BLOCK_COLS`).
        let mut row_sums = [0i32; BLOCK_COLS / 2];
        debug_assert!(!widen || nblocks == 0 || block_at(0).len() <= row_sums.len(), "q8 wide row");
        let mut runs = [(0, 0, 0); NR];
        let mut chans = [Chan::default(); MAX_MR];
        // The output stage of one run, then the residual's `Add` if any.
        let store = |acc: &[i32; NR], ch: &Chan, dst: &mut [Y]| match add {
            None => kern.splat(acc, ch, &out, dst),
            Some(add) => {
                let mut run = [Y::default(); NR];
                let run = &mut run[..dst.len().min(NR)];
                kern.splat(acc, ch, &out, run);
                add.apply(run, dst);
            }
        };
        for n in 0..p.batch {
            for g in 0..p.groups {
                let xg_at = (n * p.in_channels + g * cg) * in_plane..;
                for bi in 0..nblocks {
                    let b = block_at(bi);
                    let nstrips = b.len().div_ceil(NR);
                    // Borrowed until the block is built (in place, the
                    // stores below overwrite only the block's positions).
                    let Some(xg) = io.x().get(xg_at.clone()).and_then(|x| x.get(..cg * in_plane))
                    else {
                        return;
                    };
                    if pointwise {
                        for grp in 0..k4 / 4 {
                            let srcs = core::array::from_fn(|q| match 4 * grp + q {
                                ci if ci < cg => &xg[ci * in_plane + b.x0..(ci + 1) * in_plane],
                                _ => &[],
                            });
                            interleave::<A, K>(kern, block, k4, &b, grp, srcs);
                        }
                    } else {
                        fill_phases(geo, &wide, cg, xg, zbits, b.oy0, b.rows, b.x0, src);
                        // `k = (ci, ky, kx)` walked in order.
                        let (mut ci, mut ky, mut kx) = (0, 0, 0);
                        for grp in 0..k4 / 4 {
                            let mut srcs: [&[u8]; 4] = [&[]; 4];
                            for (q, s) in srcs.iter_mut().enumerate() {
                                if 4 * grp + q < k {
                                    *s = src.get(table.at(ci, ky, kx)..).unwrap_or(&[]);
                                    kx += 1;
                                    if kx == geo.kw {
                                        (kx, ky) = (0, ky + 1);
                                        if ky == geo.kh {
                                            (ky, ci) = (0, ci + 1);
                                        }
                                    }
                                }
                            }
                            interleave::<A, K>(kern, block, k4, &b, grp, srcs);
                        }
                    }
                    // Row `m`'s outputs of strip `s` (its sums `acc`).
                    let mut put =
                        |io: &mut Io<'_, Y>, s: usize, m: usize, acc: &[i32; NR], ch: &Chan| {
                            let base = (n * p.out_channels + m) * out_size;
                            if b.cw == b.xc {
                                // Dense: the strip is one output run.
                                let at = base + b.oy0 * geo.ow + b.x0 + s * NR;
                                let len = NR.min(b.len() - s * NR);
                                let Some(dst) = io.y().get_mut(at..at + len) else { return false };
                                store(acc, ch, dst);
                                return true;
                            }
                            let nruns = b.runs(s, geo.ow, &mut runs);
                            for &(lane, len, off) in &runs[..nruns] {
                                let at = base + off;
                                let Some(dst) = io.y().get_mut(at..at + len) else { return false };
                                if lane == 0 {
                                    store(acc, ch, dst);
                                } else {
                                    let moved = core::array::from_fn(|i| acc[(lane + i) % NR]);
                                    store(&moved, ch, dst);
                                }
                            }
                            true
                        };
                    let chan = |m: usize| {
                        let add = bias
                            .map_or(0, |b| b[m])
                            .wrapping_sub(zoff.wrapping_mul(sum_at(sums, m)));
                        Chan::new(add, rq.scale(m))
                    };
                    for pn in 0..panels {
                        let Some(panel) = body.get((g * panels + pn) * PANEL * k4..) else {
                            return;
                        };
                        if widen {
                            // Row by row, each widened once for the block's
                            // strips; a dense row's outputs are one run,
                            // through the output stage at once.
                            let len = b.len();
                            for r in 0..PANEL.min(mg - pn * PANEL) {
                                kern.widen_row(panel, r, k4 / 4, row);
                                let m = g * mg + pn * PANEL + r;
                                let ch = chan(m);
                                kern.act_wide_run(row, block, k4 / 4, len, &mut row_sums);
                                if b.cw == b.xc {
                                    let at =
                                        (n * p.out_channels + m) * out_size + b.oy0 * geo.ow + b.x0;
                                    let Some(dst) = io.y().get_mut(at..at + len) else { return };
                                    match add {
                                        None => kern.splat_run(&row_sums[..len], &ch, &out, dst),
                                        Some(add) => {
                                            // The run's stage, then the
                                            // residual's `Add`, each once.
                                            let mut run = [Y::default(); BLOCK_COLS / 2];
                                            let Some(run) = run.get_mut(..len) else { return };
                                            kern.splat_run(&row_sums[..len], &ch, &out, run);
                                            add.apply(run, dst);
                                        }
                                    }
                                    continue;
                                }
                                for (s, sums) in row_sums.chunks_exact(NR).take(nstrips).enumerate()
                                {
                                    let Some(sums) = sums.first_chunk::<NR>() else { return };
                                    if !put(&mut io, s, m, sums, &ch) {
                                        return;
                                    }
                                }
                            }
                            continue;
                        }
                        let mut r0 = 0;
                        while r0 < PANEL && pn * PANEL + r0 < mg {
                            let nrows = mr.min(PANEL - r0).min(mg - pn * PANEL - r0);
                            let rows = core::array::from_fn(|r| 4 * (r0 + r).min(PANEL - 1));
                            let m0 = g * mg + pn * PANEL + r0;
                            // The rows' stages, in place: only the rows
                            // stored (a whole array built and moved per
                            // block and panel showed in Cortex-M profiles).
                            for (r, c) in chans.iter_mut().enumerate().take(nrows) {
                                *c = chan(m0 + r);
                            }
                            for s in 0..nstrips {
                                let strip = &block[s * NR * k4..][..NR * k4];
                                let t =
                                    Tile { groups: k4 / 4, bcast: panel, rows, gstep: 32, strip };
                                acc[..mr].fill([0; NR]);
                                kern.act_strip::<A>(&t, &mut acc);
                                for (r, acc) in acc.iter().enumerate().take(nrows) {
                                    if !put(&mut io, s, m0 + r, acc, &chans[r]) {
                                        return;
                                    }
                                }
                            }
                            r0 += nrows;
                        }
                    }
                }
            }
        }
    }
}
