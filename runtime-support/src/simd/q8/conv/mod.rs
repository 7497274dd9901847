//! The int8 convolutions: weight panels, im2col into blocks of packed
//! columns and their product (group 1 and grouped), depthwise, and the
//! plain loop (`Dense` weights, 3-d and higher).
//!
//! The im2col block holds up to [`BLOCK_COLS`] output positions (fewer
//! when `K` is large: about [`BLOCK_BYTES`] in all, never under 16), laid
//! out as `int8::pack_weights`'s strips: 16 positions per strip, four `k`
//! per 32-bit word. Padding reads as the input's zero point, so it adds
//! `(x_zero - x_zero) w = 0` once the row sums take the zero point off.

pub(crate) mod depthwise;

use crate::conv::{Conv, Window};
use crate::int8::{Q8, Requant};
use crate::shape::{MAX_RANK, next_index, numel};
use crate::simd::q8::gemm::micro::{Acc, MAX_MR, NR, QMicro, Tile};
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

/// Output positions per im2col block.
fn block_cols(p: &Conv<'_>) -> Option<usize> {
    let k4 = k_of(p)?.checked_next_multiple_of(4)?;
    let fit = (BLOCK_BYTES / (NR * k4.max(1))).clamp(1, BLOCK_COLS / NR) * NR;
    Some(fit.min(numel(p.window.out_dims).ok()?.next_multiple_of(NR)).max(NR))
}

/// The scratch elements of the im2col path.
pub(crate) fn scratch_len(p: &Conv<'_>) -> Option<usize> {
    k_of(p)?.checked_next_multiple_of(4)?.checked_mul(block_cols(p)?)
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

/// Writes the im2col block of output positions `p0..p0 + pb` of image
/// `n`, group `g`, into `block` (strips of 16 positions, four `k` per
/// word; taps in the padding read `x_zero`, and so do positions past `pb`
/// and `k` past `K`, except in a pointwise block, where nothing reads
/// them: zero weights meet the `k` past `K`).
#[allow(clippy::too_many_arguments)]
fn fill_block(
    p: &Conv<'_>,
    geo: &Geom,
    x: &[u8],
    x_zero: u8,
    n: usize,
    g: usize,
    p0: usize,
    pb: usize,
    block: &mut [u8],
) {
    let cg = p.in_channels / p.groups;
    let taps = geo.kh * geo.kw;
    let k = cg * taps;
    let k4 = k.next_multiple_of(4);
    let strip = 16 * k4;
    let plane = geo.ih * geo.iw;
    let nstrips = pb.div_ceil(NR);
    let x0 = (n * p.in_channels + g * cg) * plane;
    if geo.pointwise() {
        // No padding to fill: the bytes past `K` meet zero weights and the
        // positions past `pb` are never stored, so what they hold is moot.
        // Four channels' bytes of a position make one word of the strip.
        let row = |ci: usize| &x[x0 + ci * plane + p0..][..pb];
        let whole = cg / 4;
        for grp in 0..whole {
            let (r0, r1, r2, r3) =
                (row(4 * grp), row(4 * grp + 1), row(4 * grp + 2), row(4 * grp + 3));
            for (s, dst) in block.chunks_exact_mut(strip).take(nstrips).enumerate() {
                let dst = &mut dst[grp * 64..][..64];
                let c0 = s * NR;
                let n = NR.min(pb - c0);
                for (i, d) in dst.chunks_exact_mut(4).take(n).enumerate() {
                    let c = c0 + i;
                    d.copy_from_slice(&[r0[c], r1[c], r2[c], r3[c]]);
                }
            }
        }
        for ci in 4 * whole..cg {
            let row = row(ci);
            let (grp, q) = (ci / 4, ci % 4);
            for (c, &v) in row.iter().enumerate() {
                block[c / NR * strip + grp * 64 + c % NR * 4 + q] = v;
            }
        }
        return;
    }
    block[..nstrips * strip].fill(x_zero);
    for kk in 0..k {
        let (ci, tap) = (kk / taps, kk % taps);
        let (ky, kx) = (tap / geo.kw, tap % geo.kw);
        let src = &x[x0 + ci * plane..][..plane];
        let (grp, q) = (kk / 4, kk % 4);
        // The output columns whose tap `kx` falls inside the input row:
        // `ox_lo..ox_hi` (`ix = ox sw + kx dw - pw`).
        let off = kx * geo.dw;
        let ox_lo = geo.pw.saturating_sub(off).div_ceil(geo.sw).min(geo.ow);
        let ox_hi = match (geo.iw + geo.pw).checked_sub(off + 1) {
            Some(last) => (last / geo.sw + 1).min(geo.ow),
            None => 0,
        };
        // The block's positions, one output row's run at a time.
        let (mut c, mut oy, mut ox0) = (0, p0 / geo.ow, p0 % geo.ow);
        while c < pb {
            let run = (geo.ow - ox0).min(pb - c);
            let iy = (oy * geo.sh + ky * geo.dh).wrapping_sub(geo.ph);
            let (a, b) = (ox0.max(ox_lo), (ox0 + run).min(ox_hi));
            if iy < geo.ih && a < b {
                let row = &src[iy * geo.iw..][..geo.iw];
                // Position `cc` of the block takes input column `ix`; the
                // strip's bytes of one `k` lie four apart.
                let (mut cc, end) = (c + a - ox0, c + b - ox0);
                let mut ix = a * geo.sw + off - geo.pw;
                while cc < end {
                    let n = (NR - cc % NR).min(end - cc);
                    let at = cc / NR * strip + grp * 64 + cc % NR * 4 + q;
                    let dst = &mut block[at..at + 4 * n - 3];
                    if geo.sw == 1 {
                        for (j, &v) in row[ix..ix + n].iter().enumerate() {
                            dst[4 * j] = v;
                        }
                    } else {
                        let src = &row[ix..ix + geo.sw * (n - 1) + 1];
                        for j in 0..n {
                            dst[4 * j] = src[geo.sw * j];
                        }
                    }
                    cc += n;
                    ix += n * geo.sw;
                }
            }
            c += run;
            oy += 1;
            ox0 = 0;
        }
    }
}

/// Group 1 and grouped 1-d or 2-d convolutions with packed weights: per
/// block of output positions, im2col into `scratch`, then the product of
/// each weight panel by the block (lengths checked by the caller).
#[allow(clippy::too_many_arguments)]
pub(crate) fn im2col<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    geo: &Geom,
    x: &[A],
    x_zero: i32,
    w: &[u8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
    scratch: &mut [A],
) {
    dispatch(Im2col { p, geo, x, x_zero, w, bias, rq, y, scratch });
}

struct Im2col<'a, 'c, 'r, A, Y> {
    p: &'a Conv<'c>,
    geo: &'a Geom,
    x: &'a [A],
    x_zero: i32,
    w: &'a [u8],
    bias: Option<&'a [i32]>,
    rq: &'a Requant<'r>,
    y: &'a mut [Y],
    scratch: &'a mut [A],
}

impl<A: Q8, Y: Q8> WithKernel for Im2col<'_, '_, '_, A, Y> {
    #[inline(always)]
    fn run<K: QMicro>(self, kern: K) {
        let Im2col { p, geo, x, x_zero, w, bias, rq, y, scratch } = self;
        let (Some(k), Some(cols)) = (k_of(p), block_cols(p)) else { return };
        let k4 = k.next_multiple_of(4);
        let (mg, out_size) = (p.out_channels / p.groups, geo.oh * geo.ow);
        let panels = mg.div_ceil(PANEL);
        let Some((sums, body)) = w.split_at_checked(4 * p.out_channels) else { return };
        let (x, block) = (A::as_bytes(x), A::as_bytes_mut(scratch));
        let zbits = A::saturate(x_zero).bits();
        let zoff = x_zero + kern.offset::<A>();
        let out = OutRange::of(rq);
        let mr = K::MR.min(MAX_MR);
        // A kernel that takes widened blocks (`QMicro::WIDE`) gets half the
        // columns, 16-bit, in the same bytes, while that is a whole strip.
        let wide = K::WIDE && cols >= 2 * NR;
        let (cols, e) = if wide { (cols / (2 * NR) * NR, 2) } else { (cols, 1) };
        // The tile's sums; only its first `mr` rows are used (and cleared).
        let mut acc: Acc = [[0; NR]; MAX_MR];
        for n in 0..p.batch {
            for g in 0..p.groups {
                let mut p0 = 0;
                while p0 < out_size {
                    let pb = cols.min(out_size - p0);
                    fill_block(p, geo, x, zbits, n, g, p0, pb, block);
                    if wide {
                        kern.widen::<A>(block, pb.div_ceil(NR) * 16 * k4);
                    }
                    for pn in 0..panels {
                        let Some(panel) = body.get((g * panels + pn) * PANEL * k4..) else {
                            return;
                        };
                        let mut r0 = 0;
                        while r0 < PANEL && pn * PANEL + r0 < mg {
                            let nrows = mr.min(PANEL - r0).min(mg - pn * PANEL - r0);
                            let rows = core::array::from_fn(|r| 4 * (r0 + r).min(PANEL - 1));
                            let m0 = g * mg + pn * PANEL + r0;
                            let chans: [Chan; MAX_MR] = core::array::from_fn(|r| {
                                let m = m0 + r.min(nrows - 1);
                                let add = bias
                                    .map_or(0, |b| b[m])
                                    .wrapping_sub(zoff.wrapping_mul(sum_at(sums, m)));
                                Chan::new(add, rq.scale(m))
                            });
                            for s in 0..pb.div_ceil(NR) {
                                let strip = &block[s * 16 * k4 * e..][..16 * k4 * e];
                                let t =
                                    Tile { groups: k4 / 4, bcast: panel, rows, gstep: 32, strip };
                                if wide {
                                    kern.act_wide(&t, &mut acc);
                                } else {
                                    acc[..mr].fill([0; NR]);
                                    kern.act_strip::<A>(&t, &mut acc);
                                }
                                let c0 = p0 + s * NR;
                                let ncols = NR.min(out_size - c0);
                                for (r, acc) in acc.iter().enumerate().take(nrows) {
                                    let at = (n * p.out_channels + m0 + r) * out_size + c0;
                                    kern.splat(acc, &chans[r], &out, &mut y[at..at + ncols]);
                                }
                            }
                            r0 += nrows;
                        }
                    }
                    p0 += pb;
                }
            }
        }
    }
}
