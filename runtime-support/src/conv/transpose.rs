//! ConvTranspose on f32 for generated code: a product, then a scatter.
//!
//! Each input position `j = (ih, iw)` of a group spreads `x[:, j]` over a
//! kernel's worth of outputs: output channel `m` at `(ih * s + ky * d - pad,
//! iw * s + kx * d - pad)` gets `sum_c w[c, m, ky, kx] * x[c, j]`. So the
//! columns `cols[(m, ky, kx), j] = sum_c W^T[(m, ky, kx), c] * x[c, j]` are
//! one product of the transposed weights (`M / group * kh * kw` rows of
//! `C / group`) by the input planes (read in place, `H * W` columns), on the
//! blocked SIMD product of every ISA; then each column is added into the
//! output where its tap lands ("col2im"). The weights are laid out once,
//! when the code is generated, in the product's panels
//! ([`pack_conv_transpose_weights`]).
//!
//! The product runs on `block` input positions at a time, into a scratch of
//! `rows * block` floats the caller gives (from the arena): the columns are
//! scattered while they are still in cache. When the kernel equals the
//! stride (dilation 1, no pads, no output padding: U-Net's 2x2/2), every
//! output gets exactly one column value, so the scatter writes `col + bias`
//! with no pass to clear the output first; otherwise the output starts as
//! the bias and the columns are added.
//!
//! 2-D windows, and 1-D ones as 2-D of height 1; any group count. Other
//! ranks use [`super::conv_transpose`].

use super::{Conv, check_groups, check_transpose_window, len3};
use crate::shape::numel;
use crate::simd::{self, DenseB, Epilogue, Out, PanelA};
use crate::{Error, Result, ensure};

/// Rows and columns per group of a ConvTranspose's transposed weights:
/// `(M / groups * kernel size, C / groups)`; `None` when the groups do not
/// divide the channels or on overflow.
fn group_dims(c: usize, m: usize, groups: usize, k: usize) -> Option<(usize, usize)> {
    if groups == 0 || !c.is_multiple_of(groups) || !m.is_multiple_of(groups) {
        return None;
    }
    Some(((m / groups).checked_mul(k)?, c / groups))
}

/// Floats of the weights of a ConvTranspose of `c` input and `m` output
/// channels in `groups` groups, with kernels of `k` taps, once laid out by
/// [`pack_conv_transpose_weights`]; `None` on overflow or when the groups
/// do not divide the channels.
pub fn conv_transpose_packed_len(c: usize, m: usize, groups: usize, k: usize) -> Option<usize> {
    let (rows, cols) = group_dims(c, m, groups, k)?;
    groups.checked_mul(simd::panels_len(rows, cols)?)
}

/// Lays out ConvTranspose weights `w` (`[C, M / groups, k]` row-major, `k`
/// the kernel's taps) for [`sconv_transpose`]: per group, the transposed
/// matrix whose row `(m, tap)` holds the group's `C / groups` input
/// channels, in panels of 8 rows as [`super::pack_conv_weights`] lays out a
/// Conv's filters; one group after the other. Done once, when the code is
/// generated.
pub fn pack_conv_transpose_weights(
    c: usize,
    m: usize,
    groups: usize,
    k: usize,
    w: &[f32],
    out: &mut [f32],
) -> Result {
    let (rows, cg) = group_dims(c, m, groups, k).ok_or(Error::InvalidParams)?;
    let len = conv_transpose_packed_len(c, m, groups, k).ok_or(Error::Overflow)?;
    ensure(c.checked_mul(rows) == Some(w.len()) && out.len() == len, Error::ShapeMismatch)?;
    out.fill(0.0);
    let per_group = len / groups.max(1);
    let stride = simd::panel_stride(cg);
    for g in 0..groups {
        let dst = &mut out[g * per_group..(g + 1) * per_group];
        for ci in 0..cg {
            // Input channel `ci` of the group: its `rows` weights, one per
            // row `(m, tap)` of the transposed matrix.
            let src = &w[(g * cg + ci) * rows..(g * cg + ci + 1) * rows];
            for (r, &v) in src.iter().enumerate() {
                let at = (r / simd::PANEL) * stride + ci * simd::PANEL + r % simd::PANEL;
                if let Some(o) = dst.get_mut(at) {
                    *o = v;
                }
            }
        }
    }
    Ok(())
}

/// The scratch floats [`sconv_transpose`] needs to run its products on
/// `block` input positions at a time: `M / groups * k` rows of `block`.
pub fn conv_transpose_scratch_len(
    m: usize,
    groups: usize,
    k: usize,
    block: usize,
) -> Option<usize> {
    if groups == 0 || !m.is_multiple_of(groups) {
        return None;
    }
    (m / groups).checked_mul(k)?.checked_mul(block)
}

/// The 2-D geometry of a ConvTranspose window (1-D as height 1): input
/// `h x w`, output `oh x ow`, kernel, strides, dilations, begin pads.
#[derive(Clone, Copy, Debug)]
struct Geom {
    h: usize,
    w: usize,
    oh: usize,
    ow: usize,
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
    ph: usize,
    pw: usize,
    /// Every output is the target of exactly one tap of one input: kernel
    /// equal to stride (dilation 1), no pads, no output padding.
    exact: bool,
}

impl Geom {
    fn of(p: &Conv<'_>) -> Option<Geom> {
        let win = &p.window;
        // ConvTranspose's input is the window's output, and its output the
        // window's input.
        let at = |a: &[usize], i: usize, one: usize| match a.len() {
            1 if i == 0 => Some(one),
            1 => a.first().copied(),
            2 => a.get(i).copied(),
            _ => None,
        };
        let g = Geom {
            h: at(win.out_dims, 0, 1)?,
            w: at(win.out_dims, 1, 1)?,
            oh: at(win.in_dims, 0, 1)?,
            ow: at(win.in_dims, 1, 1)?,
            kh: at(win.kernel, 0, 1)?,
            kw: at(win.kernel, 1, 1)?,
            sh: at(win.strides, 0, 1)?,
            sw: at(win.strides, 1, 1)?,
            dh: at(win.dilations, 0, 1)?,
            dw: at(win.dilations, 1, 1)?,
            ph: at(win.pads_begin, 0, 0)?,
            pw: at(win.pads_begin, 1, 0)?,
            exact: false,
        };
        let pads_zero = win.pads_begin.iter().chain(win.pads_end).all(|&v| v == 0);
        let axis_exact = |k: usize, s: usize, d: usize, i: usize, o: usize| {
            k == s && (d == 1 || k == 1) && i.checked_mul(s) == Some(o)
        };
        let exact = pads_zero
            && axis_exact(g.kh, g.sh, g.dh, g.h, g.oh)
            && axis_exact(g.kw, g.sw, g.dw, g.w, g.ow);
        Some(Geom { exact, ..g })
    }

    /// The input columns `iw` whose tap `kx` lands inside the output row
    /// (`ox = iw * sw + kx * dw - pw` in `[0, ow)`), as a range.
    #[inline(always)]
    fn columns(&self, kx: usize) -> (usize, usize) {
        let off = kx * self.dw;
        let first = self.pw.saturating_sub(off).div_ceil(self.sw);
        let end = (self.ow + self.pw).saturating_sub(off).div_ceil(self.sw).min(self.w);
        (first, end.max(first))
    }
}

/// ONNX `ConvTranspose` on f32 for generated code: `w` laid out by
/// [`pack_conv_transpose_weights`], `scratch` at least
/// [`conv_transpose_scratch_len`] for a block of one input position (the
/// block is `scratch.len() / rows`, up to the whole input plane). Same
/// geometry, checks and results as [`super::conv_transpose`] up to float
/// rounding (the products' sums run over the channels in ascending order,
/// with fused multiply-adds where the CPU has them), for windows of one or
/// two spatial axes.
pub fn sconv_transpose(
    p: &Conv<'_>,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    scratch: &mut [f32],
) -> Result {
    check_transpose_window(&p.window)?;
    check_groups(p)?;
    let geom = Geom::of(p).ok_or(Error::InvalidParams)?;
    let (x_size, y_size) = (numel(p.window.out_dims)?, numel(p.window.in_dims)?);
    let k_size = numel(p.window.kernel)?;
    let (c, m, groups) = (p.in_channels, p.out_channels, p.groups);
    let (rows, cg) = group_dims(c, m, groups, k_size).ok_or(Error::InvalidParams)?;
    let mg = m / groups;
    ensure(x.len() == len3(p.batch, c, x_size)?, Error::ShapeMismatch)?;
    ensure(Some(w.len()) == conv_transpose_packed_len(c, m, groups, k_size), Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, m, y_size)?, Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == m, Error::ShapeMismatch)?;
    }
    if y.is_empty() {
        return Ok(());
    }
    let bias_of = |oc: usize| bias.and_then(|b| b.get(oc)).copied().unwrap_or(0.0);
    if cg == 0 || rows == 0 || x_size == 0 {
        // No taps reach an output: each is its bias.
        for (plane, yp) in y.chunks_exact_mut(y_size).enumerate() {
            yp.fill(bias_of(plane % m));
        }
        return Ok(());
    }
    let block = (scratch.len() / rows).min(x_size);
    ensure(block >= 1, Error::ShapeMismatch)?;
    let per_group = w.len() / groups;
    for n in 0..p.batch {
        for g in 0..groups {
            let xg = x.get((n * c + g * cg) * x_size..).ok_or(Error::ShapeMismatch)?;
            let yg = &mut y[(n * m + g * mg) * y_size..][..mg * y_size];
            let bg = bias.map(|b| &b[g * mg..(g + 1) * mg]);
            if !geom.exact {
                for (mo, yp) in yg.chunks_exact_mut(y_size).enumerate() {
                    yp.fill(bg.map_or(0.0, |b| b[mo]));
                }
            }
            let a = PanelA { data: &w[g * per_group..(g + 1) * per_group], k: cg };
            let mut j0 = 0;
            while j0 < x_size {
                let nc = block.min(x_size - j0);
                let cols = &mut scratch[..rows * nc];
                // B: the group's `cg` input planes from position `j0`, each
                // `x_size` apart (in bounds: `j0 + nc <= x_size`).
                let b = DenseB { data: &xg[j0..], rs: x_size, cs: 1 };
                ensure(xg.len() >= (cg - 1) * x_size + j0 + nc, Error::ShapeMismatch)?;
                let out = Out { y: &mut *cols, ldy: nc };
                simd::product(rows, nc, cg, a, &b, out, &Epilogue::NONE)?;
                simd::vectorize_wide(Scatter { geom, mg, j0, nc, cols, bias: bg, y: &mut *yg });
                j0 += nc;
            }
        }
    }
    Ok(())
}

/// Stores or adds the columns `cols` (`rows x nc`, of input positions
/// `j0..j0 + nc`) of one group into its `mg` output planes `y`: where the
/// geometry is exact, each column value plus the bias is stored where its
/// tap lands; otherwise the block's contributions are added to each output
/// row it reaches, phase by phase (see [`Phases`]).
struct Scatter<'a> {
    geom: Geom,
    mg: usize,
    j0: usize,
    nc: usize,
    cols: &'a [f32],
    bias: Option<&'a [f32]>,
    y: &'a mut [f32],
}

/// Output positions of one phase summed at a time.
const CHUNK: usize = 64;

/// The largest stride whose phases are summed apart; with larger strides
/// each tap's values are added where they land, one at a time.
const MAX_PHASES: usize = 8;

/// The sums of a block's contributions to a run of one output row: with
/// stride `s`, the row's positions `s * t + p` form `s` phases, and each
/// tap `kx` lands on one phase (`kx * d - pad = p + s * q`, its input
/// column `iw` on `t = iw + q`). Every tap of every kernel row reaching the
/// output row adds into its phase's `sums` (contiguous vector adds); then
/// the phases are added into the row interleaved, one pass over it instead
/// of a strided pass per tap.
struct Phases {
    sums: [[f32; CHUNK]; MAX_PHASES],
}

impl simd::Vectorize for Scatter<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        if self.geom.exact {
            self.store();
        } else if self.geom.sw <= MAX_PHASES {
            self.add_phases();
        } else {
            self.add_taps();
        }
    }
}

/// Where the block of input positions `j0..j0 + nc` meets input row `ih`:
/// its columns `iw_lo..iw_hi`, the first at `at` in the block.
#[inline(always)]
fn row_span(w: usize, j0: usize, nc: usize, ih: usize) -> (usize, usize, usize) {
    let iw_lo = j0.max(ih * w) - ih * w;
    let iw_hi = (j0 + nc).min((ih + 1) * w) - ih * w;
    (iw_lo, iw_hi, ih * w + iw_lo - j0)
}

/// Row `r` of a block of `nc` columns.
#[inline(always)]
fn col(cols: &[f32], nc: usize, r: usize) -> &[f32] {
    cols.get(r * nc..(r + 1) * nc).unwrap_or(&[])
}

impl Scatter<'_> {
    /// Kernel equal to the stride: column `iw` of tap `kx` of input row
    /// `ih`, kernel row `ky`, is output `(ih * kh + ky, iw * kw + kx)`.
    #[inline(always)]
    fn store(self) {
        let Scatter { geom: g, mg, j0, nc, cols, bias, y } = self;
        let (first_row, last_row) = (j0 / g.w, (j0 + nc - 1) / g.w);
        let plane = g.oh * g.ow;
        for mo in 0..mg {
            let b = bias.map_or(0.0, |b| b.get(mo).copied().unwrap_or(0.0));
            for ih in first_row..=last_row {
                let (iw_lo, iw_hi, at) = row_span(g.w, j0, nc, ih);
                for ky in 0..g.kh {
                    let oy = ih * g.kh + ky;
                    let r0 = (mo * g.kh + ky) * g.kw;
                    let part =
                        |r: usize| col(cols, nc, r).get(at..at + iw_hi - iw_lo).unwrap_or(&[]);
                    let start = mo * plane + oy * g.ow;
                    let Some(dst) = y.get_mut(start + iw_lo * g.kw..start + iw_hi * g.kw) else {
                        return;
                    };
                    match g.kw {
                        1 => {
                            for (o, &v) in dst.iter_mut().zip(part(r0)) {
                                *o = v + b;
                            }
                        }
                        2 => {
                            let (c0, c1) = (part(r0), part(r0 + 1));
                            for (o, (&v0, &v1)) in dst.chunks_exact_mut(2).zip(c0.iter().zip(c1)) {
                                o[0] = v0 + b;
                                o[1] = v1 + b;
                            }
                        }
                        kw => {
                            for kx in 0..kw {
                                for (o, &v) in dst.chunks_exact_mut(kw).zip(part(r0 + kx)) {
                                    o[kx] = v + b;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The phase of tap `kx` and the shift from its input column to its
    /// position in the phase: `kx * dw - pw = phase + sw * shift`.
    #[inline(always)]
    fn phase_of(g: &Geom, kx: usize) -> (usize, isize) {
        let v = (kx * g.dw) as isize - g.pw as isize;
        let s = g.sw as isize;
        (v.rem_euclid(s) as usize, v.div_euclid(s))
    }

    /// Overlapping or sparse taps (stride up to [`MAX_PHASES`]): the
    /// output rows the block reaches, each as the sum of its phases.
    #[inline(always)]
    fn add_phases(self) {
        let Scatter { geom: g, mg, j0, nc, cols, y, .. } = self;
        let (first_row, last_row) = (j0 / g.w, (j0 + nc - 1) / g.w);
        let oy_lo = (first_row * g.sh).saturating_sub(g.ph);
        let oy_hi = (last_row * g.sh + (g.kh - 1) * g.dh + 1).saturating_sub(g.ph).min(g.oh);
        let (plane, sw) = (g.oh * g.ow, g.sw);
        // The phase positions the block reaches: its columns (all of a row
        // unless it holds part of one) shifted by the taps' shifts, which
        // grow with kx.
        let (iw_min, iw_max) = match first_row == last_row {
            true => (j0 - first_row * g.w, j0 + nc - first_row * g.w),
            false => (0, g.w),
        };
        let (q_min, q_max) = (Self::phase_of(&g, 0).1, Self::phase_of(&g, g.kw - 1).1);
        let t_all = g.ow.div_ceil(sw);
        let t_from = (iw_min as isize + q_min).clamp(0, t_all as isize) as usize;
        let t_to = (iw_max as isize + q_max).clamp(0, t_all as isize) as usize;
        let mut ph = Phases { sums: [[0.0; CHUNK]; MAX_PHASES] };
        for mo in 0..mg {
            for oy in oy_lo..oy_hi {
                let mut t0 = t_from;
                while t0 < t_to {
                    let n = CHUNK.min(t_to - t0);
                    for s in ph.sums.iter_mut().take(sw) {
                        s[..n].fill(0.0);
                    }
                    let mut any = false;
                    for ky in 0..g.kh {
                        // The input row whose kernel row `ky` lands on `oy`.
                        let Some(v) = (oy + g.ph).checked_sub(ky * g.dh) else { continue };
                        let ih = v / g.sh;
                        if !v.is_multiple_of(g.sh) || ih < first_row || ih > last_row {
                            continue;
                        }
                        let (iw_lo, iw_hi, at) = row_span(g.w, j0, nc, ih);
                        let r0 = (mo * g.kh + ky) * g.kw;
                        for kx in 0..g.kw {
                            let (p, q) = Self::phase_of(&g, kx);
                            // Positions t of phase p in the chunk that input
                            // columns iw_lo..iw_hi reach (t = iw + q), inside
                            // the row (s * t + p < ow).
                            let t_end = (g.ow - p.min(g.ow)).div_ceil(sw);
                            let lo = (iw_lo as isize + q).max(t0 as isize);
                            let hi = (iw_hi as isize + q).min((t0 + n).min(t_end) as isize);
                            if lo >= hi {
                                continue;
                            }
                            let (lo, hi) = (lo as usize, hi as usize);
                            let from = at + (lo as isize - q) as usize - iw_lo;
                            let src = col(cols, nc, r0 + kx).get(from..from + hi - lo);
                            let src = src.unwrap_or(&[]);
                            let dst = &mut ph.sums[p][lo - t0..hi - t0];
                            for (d, &s) in dst.iter_mut().zip(src) {
                                *d += s;
                            }
                            any = true;
                        }
                    }
                    if any {
                        let start = mo * plane + oy * g.ow + sw * t0;
                        let end = (mo * plane + (oy + 1) * g.ow).min(y.len());
                        let row = y.get_mut(start..end).unwrap_or(&mut []);
                        match sw {
                            1 => add_interleaved::<1>(&ph, row, n),
                            2 => add_interleaved::<2>(&ph, row, n),
                            3 => add_interleaved::<3>(&ph, row, n),
                            4 => add_interleaved::<4>(&ph, row, n),
                            5 => add_interleaved::<5>(&ph, row, n),
                            6 => add_interleaved::<6>(&ph, row, n),
                            7 => add_interleaved::<7>(&ph, row, n),
                            _ => add_interleaved::<8>(&ph, row, n),
                        }
                    }
                    t0 += n;
                }
            }
        }
    }

    /// Strides past [`MAX_PHASES`]: each tap's columns added where they
    /// land, one strided pass per tap.
    #[inline(always)]
    fn add_taps(self) {
        let Scatter { geom: g, mg, j0, nc, cols, y, .. } = self;
        let (first_row, last_row) = (j0 / g.w, (j0 + nc - 1) / g.w);
        let plane = g.oh * g.ow;
        for mo in 0..mg {
            for ih in first_row..=last_row {
                let (iw_lo, iw_hi, at) = row_span(g.w, j0, nc, ih);
                for ky in 0..g.kh {
                    let Some(oy) = (ih * g.sh + ky * g.dh).checked_sub(g.ph) else { continue };
                    if oy >= g.oh {
                        continue;
                    }
                    let r0 = (mo * g.kh + ky) * g.kw;
                    for kx in 0..g.kw {
                        let (first, end) = g.columns(kx);
                        let (first, end) = (first.max(iw_lo), end.min(iw_hi));
                        if first >= end {
                            continue;
                        }
                        let ox0 = (first * g.sw + kx * g.dw) - g.pw;
                        let from = at + first - iw_lo;
                        let src = col(cols, nc, r0 + kx).get(from..from + end - first);
                        let src = src.unwrap_or(&[]);
                        let start = mo * plane + oy * g.ow + ox0;
                        let end = mo * plane + (oy + 1) * g.ow;
                        let dst = y.get_mut(start..end).unwrap_or(&mut []);
                        for (o, &v) in dst.iter_mut().step_by(g.sw).zip(src) {
                            *o += v;
                        }
                    }
                }
            }
        }
    }
}

/// Adds the first `n` sums of the `S` phases into `row` interleaved:
/// `row[S * i + p] += sums[p][i]` (the row may end inside the last tuple).
#[inline(always)]
fn add_interleaved<const S: usize>(ph: &Phases, row: &mut [f32], n: usize) {
    let n = n.min(CHUNK);
    let full = (row.len() / S).min(n);
    let (head, tail) = row.split_at_mut(S * full);
    for (o, i) in head.chunks_exact_mut(S).zip(0..CHUNK) {
        for (p, v) in o.iter_mut().enumerate() {
            *v += ph.sums[p % MAX_PHASES][i];
        }
    }
    if full < n {
        for (p, v) in tail.iter_mut().enumerate().take(S) {
            *v += ph.sums[p % MAX_PHASES][full];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Window, conv_transpose};
    use super::*;
    use std::vec::Vec;

    fn values_of(len: usize, seed: u32) -> Vec<f32> {
        let mut v = vec![0.0f32; len];
        crate::simd::tests::fill(&mut v, seed);
        v
    }

    /// One ConvTranspose: `[N, C, M, groups]`, input dims, kernel, strides,
    /// dilations, begin and end pads, output padding (as many entries as
    /// spatial axes).
    struct Case {
        ncmg: [usize; 4],
        input: &'static [usize],
        kernel: &'static [usize],
        strides: &'static [usize],
        dilations: &'static [usize],
        pads: (&'static [usize], &'static [usize]),
        extra: &'static [usize],
    }

    /// The packed kernel against the reference loops, with and without
    /// bias, at several block sizes (a block of one position, blocks that
    /// cut rows, one block for the whole plane).
    fn check(t: usize, case: &Case) {
        let [n, c, m, groups] = case.ncmg;
        let r = case.input.len();
        let out: Vec<usize> = (0..r)
            .map(|i| {
                let span = case.dilations[i] * (case.kernel[i] - 1) + 1;
                case.strides[i] * (case.input[i] - 1) + span + case.extra[i]
                    - case.pads.0[i]
                    - case.pads.1[i]
            })
            .collect();
        let window = Window {
            in_dims: &out,
            out_dims: case.input,
            kernel: case.kernel,
            strides: case.strides,
            dilations: case.dilations,
            pads_begin: case.pads.0,
            pads_end: case.pads.1,
        };
        let p = Conv { batch: n, in_channels: c, out_channels: m, groups, window };
        let (xs, ys, k): (usize, usize, usize) =
            (case.input.iter().product(), out.iter().product(), case.kernel.iter().product());
        let x = values_of(n * c * xs, 1 + t as u32);
        let w = values_of(c * (m / groups) * k, 2 + t as u32);
        let b = values_of(m, 3);
        let mut packed = vec![f32::NAN; conv_transpose_packed_len(c, m, groups, k).unwrap()];
        pack_conv_transpose_weights(c, m, groups, k, &w, &mut packed).unwrap();
        let tol = 4.0 * (c / groups * k) as f32 * f32::EPSILON;
        for bias in [None, Some(&b[..])] {
            let mut want = vec![0.0f32; n * m * ys];
            conv_transpose(&p, &x, &w, bias, &mut want).unwrap();
            for block in [1, 3, case.input[r - 1] + 1, xs, xs + 5] {
                let mut scratch =
                    vec![f32::NAN; conv_transpose_scratch_len(m, groups, k, block).unwrap()];
                let mut got = vec![f32::NAN; want.len()];
                sconv_transpose(&p, &x, &packed, bias, &mut got, &mut scratch).unwrap();
                for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - e).abs() <= tol * (1.0 + e.abs()),
                        "case {t}, block {block}, bias {}: [{j}] {g} vs {e}",
                        bias.is_some()
                    );
                }
            }
        }
    }

    #[test]
    fn sconv_transpose_matches_the_reference_loops() {
        const NONE: (&[usize], &[usize]) = (&[0, 0], &[0, 0]);
        let cases = [
            // U-Net's 2x2/2, channels past a panel and not a multiple of 8
            // or of any vector width; then with bias-only output padding.
            Case {
                ncmg: [1, 19, 11, 1],
                input: &[5, 7],
                kernel: &[2, 2],
                strides: &[2, 2],
                dilations: &[1, 1],
                pads: NONE,
                extra: &[0, 0],
            },
            Case {
                ncmg: [2, 9, 13, 1],
                input: &[4, 3],
                kernel: &[2, 2],
                strides: &[2, 2],
                dilations: &[1, 1],
                pads: NONE,
                extra: &[1, 1],
            },
            // 3x3/2 with pads 1 and output_padding 1 (torch's doubling), 4x4/2
            // pads 1 (DCGAN), and kernel 3 stride 3 (exact, odd width).
            Case {
                ncmg: [1, 17, 6, 1],
                input: &[6, 5],
                kernel: &[3, 3],
                strides: &[2, 2],
                dilations: &[1, 1],
                pads: (&[1, 1], &[1, 1]),
                extra: &[1, 1],
            },
            Case {
                ncmg: [1, 8, 33, 1],
                input: &[5, 9],
                kernel: &[4, 4],
                strides: &[2, 2],
                dilations: &[1, 1],
                pads: (&[1, 1], &[1, 1]),
                extra: &[0, 0],
            },
            Case {
                ncmg: [1, 5, 7, 1],
                input: &[3, 11],
                kernel: &[3, 3],
                strides: &[3, 3],
                dilations: &[1, 1],
                pads: NONE,
                extra: &[0, 0],
            },
            // Stride below the kernel, stride above it (gaps), dilations,
            // asymmetric pads, a stride per axis.
            Case {
                ncmg: [1, 3, 4, 1],
                input: &[7, 6],
                kernel: &[3, 2],
                strides: &[1, 3],
                dilations: &[2, 1],
                pads: (&[2, 0], &[1, 3]),
                extra: &[1, 2],
            },
            Case {
                ncmg: [1, 6, 5, 1],
                input: &[4, 4],
                kernel: &[2, 3],
                strides: &[4, 5],
                dilations: &[2, 1],
                pads: (&[0, 1], &[3, 0]),
                extra: &[0, 4],
            },
            // Groups, including one channel per group.
            Case {
                ncmg: [2, 6, 9, 3],
                input: &[5, 4],
                kernel: &[3, 3],
                strides: &[2, 1],
                dilations: &[1, 1],
                pads: (&[1, 0], &[0, 1]),
                extra: &[1, 0],
            },
            Case {
                ncmg: [1, 4, 4, 4],
                input: &[3, 5],
                kernel: &[2, 2],
                strides: &[2, 2],
                dilations: &[1, 1],
                pads: NONE,
                extra: &[0, 0],
            },
            // 1-D: a vocoder's 16/8 with pads 4, and 4/2 with pads 1.
            Case {
                ncmg: [1, 12, 10, 1],
                input: &[9],
                kernel: &[16],
                strides: &[8],
                dilations: &[1],
                pads: (&[4], &[4]),
                extra: &[0],
            },
            Case {
                ncmg: [2, 7, 3, 1],
                input: &[13],
                kernel: &[4],
                strides: &[2],
                dilations: &[1],
                pads: (&[1], &[1]),
                extra: &[1],
            },
            Case {
                ncmg: [1, 5, 6, 1],
                input: &[11],
                kernel: &[2],
                strides: &[2],
                dilations: &[1],
                pads: (&[0], &[0]),
                extra: &[0],
            },
        ];
        for (t, case) in cases.iter().enumerate() {
            check(t, case);
        }
    }

    #[test]
    fn sconv_transpose_refuses_what_it_does_not_run() {
        let (x, w) = ([1.0f32; 8], [1.0f32; 8]);
        let window = Window {
            in_dims: &[2, 2, 2],
            out_dims: &[1, 1, 1],
            kernel: &[2, 2, 2],
            strides: &[2, 2, 2],
            dilations: &[1, 1, 1],
            pads_begin: &[0, 0, 0],
            pads_end: &[0, 0, 0],
        };
        let p = Conv { batch: 1, in_channels: 1, out_channels: 1, groups: 1, window };
        let mut y = [0.0f32; 8];
        let mut scratch = [0.0f32; 64];
        // 3-D windows run on the reference loops only.
        assert_eq!(
            sconv_transpose(&p, &x, &w, None, &mut y, &mut scratch),
            Err(Error::InvalidParams)
        );
        // Scratch short of one column.
        let window = Window {
            in_dims: &[2, 2],
            out_dims: &[1, 1],
            kernel: &[2, 2],
            strides: &[2, 2],
            dilations: &[1, 1],
            pads_begin: &[0, 0],
            pads_end: &[0, 0],
        };
        let p = Conv { window, ..p };
        let packed = [0.0f32; 8];
        let mut y = [0.0f32; 4];
        let r = sconv_transpose(&p, &x[..1], &packed, None, &mut y, &mut scratch[..3]);
        assert_eq!(r, Err(Error::ShapeMismatch));
        assert!(sconv_transpose(&p, &x[..1], &packed, None, &mut y, &mut scratch[..4]).is_ok());
    }
}
