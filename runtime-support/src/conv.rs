//! N-d convolution (and the sliding-window geometry pooling shares).
//!
//! Tensors are `NC<spatial>` row-major: `x` is `[N, C, in...]`, `w` is
//! `[M, C / groups, kernel...]`, `y` is `[N, M, out...]`. The generator resolves
//! `auto_pad` into explicit begin/end pads and computes the output dims; the
//! kernel checks they agree with the formula.

use crate::gemm::Post;
use crate::num::Num;
use crate::shape::{MAX_RANK, next_index, numel};
use crate::simd::{self, DenseB, Epilogue, Out, PackB, PanelA, ReadA, Residual, ViewA};
use crate::{Error, Result, ensure};

mod transpose;
pub use transpose::{
    conv_transpose_packed_len, conv_transpose_scratch_len, pack_conv_transpose_weights,
    sconv_transpose,
};

/// Geometry of a sliding window over the spatial axes; all slices have one
/// entry per spatial axis.
#[derive(Clone, Copy, Debug)]
pub struct Window<'a> {
    /// Input spatial dims.
    pub in_dims: &'a [usize],
    /// Output spatial dims.
    pub out_dims: &'a [usize],
    /// Kernel (window) dims.
    pub kernel: &'a [usize],
    /// Step between windows, per axis (at least 1).
    pub strides: &'a [usize],
    /// Step between taps inside a window, per axis (at least 1).
    pub dilations: &'a [usize],
    /// Padding before the first input element, per axis.
    pub pads_begin: &'a [usize],
    /// Padding after the last input element, per axis.
    pub pads_end: &'a [usize],
}

impl Window<'_> {
    fn check_lens(&self) -> Result {
        let r = self.in_dims.len();
        ensure(r <= MAX_RANK, Error::RankTooLarge)?;
        ensure(
            [
                self.out_dims,
                self.kernel,
                self.strides,
                self.dilations,
                self.pads_begin,
                self.pads_end,
            ]
            .iter()
            .all(|s| s.len() == r),
            Error::InvalidParams,
        )
    }

    /// Checks the geometry; `allow_ceil` also accepts output dims rounded up
    /// (pooling's `ceil_mode`).
    pub fn check(&self, allow_ceil: bool) -> Result {
        self.check_lens()?;
        for i in 0..self.in_dims.len() {
            let (s, d, k) = (self.strides[i], self.dilations[i], self.kernel[i]);
            ensure(s > 0 && d > 0 && k > 0, Error::InvalidParams)?;
            let padded = self.in_dims[i]
                .checked_add(self.pads_begin[i])
                .and_then(|v| v.checked_add(self.pads_end[i]))
                .ok_or(Error::Overflow)?;
            let span =
                d.checked_mul(k - 1).and_then(|v| v.checked_add(1)).ok_or(Error::Overflow)?;
            ensure(padded >= span, Error::InvalidParams)?;
            let floor = (padded - span) / s + 1;
            let ceil = (padded - span).div_ceil(s) + 1;
            let o = self.out_dims[i];
            ensure(o == floor || (allow_ceil && o == ceil), Error::InvalidParams)?;
        }
        Ok(())
    }

    /// Calls `f(tap, input)` for every tap of the window at output position
    /// `opos`, in row-major tap order: `tap` is the flat kernel index, `input`
    /// is the flat input spatial offset when the tap falls inside the input, and
    /// `None` when it falls in padding. Taps beyond the end padding (possible
    /// with `ceil_mode`) are skipped entirely.
    #[inline]
    pub(crate) fn taps(&self, opos: &[usize], mut f: impl FnMut(usize, Option<usize>)) {
        let r = self.in_dims.len();
        let mut k = [0usize; MAX_RANK];
        let k = &mut k[..r];
        let mut tap = 0usize;
        loop {
            let mut off = 0usize;
            let mut inside = true;
            let mut in_padded = true;
            for i in 0..r {
                // Position in padded coordinates (the input starts at pads_begin).
                let pos = opos[i] * self.strides[i] + k[i] * self.dilations[i];
                let n = self.in_dims[i];
                if pos >= self.pads_begin[i] + n + self.pads_end[i] {
                    in_padded = false;
                }
                match pos.checked_sub(self.pads_begin[i]) {
                    Some(p) if p < n => off = off * n + p,
                    _ => inside = false,
                }
            }
            if in_padded {
                f(tap, if inside { Some(off) } else { None });
            }
            tap += 1;
            if !next_index(k, self.kernel) {
                return;
            }
        }
    }
}

/// ONNX `Conv` (and `ConvTranspose`) params.
#[derive(Clone, Copy, Debug)]
pub struct Conv<'a> {
    /// `N`.
    pub batch: usize,
    /// `C`, input channels.
    pub in_channels: usize,
    /// `M`, output channels.
    pub out_channels: usize,
    /// Channel groups; divides `C` and `M` (`groups = C` for depthwise).
    pub groups: usize,
    /// Spatial geometry.
    pub window: Window<'a>,
}

fn len3(a: usize, b: usize, c: usize) -> Result<usize> {
    a.checked_mul(b).and_then(|v| v.checked_mul(c)).ok_or(Error::Overflow)
}

fn check_groups(p: &Conv<'_>) -> Result {
    ensure(p.groups > 0, Error::InvalidParams)?;
    ensure(
        p.in_channels.is_multiple_of(p.groups) && p.out_channels.is_multiple_of(p.groups),
        Error::InvalidParams,
    )
}

/// `y = conv(x, w) + bias`: each output sums over its group's input channels
/// (outer) and the kernel taps (inner, row-major), then adds the bias;
/// padding reads as zero.
pub fn conv<T: Num>(p: &Conv<'_>, x: &[T], w: &[T], bias: Option<&[T]>, y: &mut [T]) -> Result {
    p.window.check(false)?;
    check_groups(p)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    let k_size = numel(p.window.kernel)?;
    let cg = p.in_channels / p.groups;
    let mg = p.out_channels / p.groups;
    ensure(x.len() == len3(p.batch, p.in_channels, in_size)?, Error::ShapeMismatch)?;
    ensure(w.len() == len3(p.out_channels, cg, k_size)?, Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, p.out_channels, out_size)?, Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == p.out_channels, Error::ShapeMismatch)?;
    }
    if out_size == 0 {
        return Ok(());
    }
    let mut opos = [0usize; MAX_RANK];
    let opos = &mut opos[..p.window.in_dims.len()];
    for n in 0..p.batch {
        for g in 0..p.groups {
            for mo in 0..mg {
                let oc = g * mg + mo;
                let y_base = (n * p.out_channels + oc) * out_size;
                opos.fill(0);
                let mut o = 0;
                loop {
                    let mut acc = T::ZERO;
                    for ci in 0..cg {
                        let x_base = (n * p.in_channels + g * cg + ci) * in_size;
                        let w_base = (oc * cg + ci) * k_size;
                        p.window.taps(opos, |tap, at| {
                            if let Some(at) = at {
                                acc = acc.add(x[x_base + at].mul(w[w_base + tap]));
                            }
                        });
                    }
                    if let Some(b) = bias {
                        acc = acc.add(b[oc]);
                    }
                    y[y_base + o] = acc;
                    o += 1;
                    if !next_index(opos, p.window.out_dims) {
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}

/// An activation fused into [`sconv`] and [`crate::gemm::sgemm`].
pub use crate::simd::Activation;

/// Packs strips of the im2col matrix of one 2-D image group: row
/// `p = (c, ky, kx)`, column `j = (oy, ox)`, zero where a tap falls in padding.
struct Im2col<'a> {
    x: &'a [f32],
    h: usize,
    w: usize,
    ow: usize,
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    pad: [usize; 2],
    evens: simd::Evens,
}

impl PackB for Im2col<'_> {
    #[inline(always)]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        simd::debug_check_pack(kc, nr, stride, out);
        // The 4-wide strips of the kernels without a vector unit.
        if nr == 4 && stride == 4 && self.pack4(p0, kc, j0, out) {
            return;
        }
        // The strip's columns split into runs on one output row each:
        // (first column, length, output row, first output column).
        const MAX_RUNS: usize = 16;
        let mut runs = [(0usize, 0usize, 0usize, 0usize); MAX_RUNS];
        let mut count = 0;
        let mut c = 0;
        while c < nr && count < MAX_RUNS {
            let j = j0 + c;
            let (oy, ox) = (j / self.ow, j % self.ow);
            let len = (self.ow - ox).min(nr - c);
            runs[count] = (c, len, oy, ox);
            count += 1;
            c += len;
        }
        let covered = c;
        let (h, w) = (self.h as isize, self.w as isize);
        let (sx, pl) = (self.s[1], self.pad[1] as isize);
        let (kh, kw) = (self.k[0], self.k[1]);
        let taps = kh * kw;
        let (mut ci, rem) = (p0 / taps, p0 % taps);
        let (mut ky, mut kx0) = (rem / kw, rem % kw);
        let mut p = 0;
        let mut halves = SplitSeg::new();
        // Rows go by groups of one (channel, kernel row): kernel columns
        // kx0 .. kx0 + rows read the same input row of each run.
        while p < kc {
            let rows = (kw - kx0).min(kc - p);
            let Some(group) = out.get_mut(p * stride..(p + rows) * stride) else { return };
            if covered < stride {
                for row in group.chunks_exact_mut(stride) {
                    if let Some(tail) = row.get_mut(covered..) {
                        tail.fill(0.0);
                    }
                }
            }
            let plane = ci * self.h * self.w;
            let iy0 = (ky * self.d[0]) as isize - self.pad[0] as isize;
            for &(c0, len, oy, ox) in &runs[..count] {
                let iy = (oy * self.s[0]) as isize + iy0;
                let xrow = if (0..h).contains(&iy) {
                    self.x.get(plane + iy as usize * self.w..)
                } else {
                    None
                };
                let Some(xrow) = xrow else {
                    for row in group.chunks_exact_mut(stride) {
                        if let Some(dst) = row.get_mut(c0..c0 + len) {
                            zero_run(dst);
                        }
                    }
                    continue;
                };
                let first = (ox * sx) as isize - pl;
                // A patch layer (kernel 16 wide at stride 16): the group's
                // sixteen rows are the run's patches transposed (ViT's
                // patch embedding, instead of a stride-16 gather per row).
                let end = first + (len * 16) as isize;
                if sx == 16
                    && kw == 16
                    && kx0 == 0
                    && rows == 16
                    && self.d[1] == 1
                    && first >= 0
                    && end <= w
                    && let Some(src) = xrow.get(first as usize..end as usize)
                    && let Some(dst) = group.get_mut(c0..)
                    && simd::patch16_rows(src, len, dst, stride)
                {
                    continue;
                }
                let run = Run { c0, len, sx, first, kx0, dx: self.d[1], w, evens: self.evens };
                // At a stride of 2, runs of other lengths than the fixed
                // copies' go through the even and odd halves.
                if sx == 2
                    && !matches!(len, 32 | 16 | 8)
                    && run.pack_deinterleaved(group, stride, xrow, &mut halves)
                {
                    continue;
                }
                // Fixed shapes for the usual strips (32, 16 or 8 columns, stride
                // 1 or 2), so the copies below compile to vector moves.
                match (len, sx) {
                    (32, 1) => run.pack::<32, 1>(group, stride, xrow),
                    (32, 2) => run.pack::<32, 2>(group, stride, xrow),
                    (16, 1) => run.pack::<16, 1>(group, stride, xrow),
                    (8, 1) => run.pack::<8, 1>(group, stride, xrow),
                    (16, 2) => run.pack::<16, 2>(group, stride, xrow),
                    (8, 2) => run.pack::<8, 2>(group, stride, xrow),
                    _ => run.pack::<0, 0>(group, stride, xrow),
                }
            }
            p += rows;
            kx0 = 0;
            ky += 1;
            if ky == kh {
                ky = 0;
                ci += 1;
            }
        }
    }
}

impl Im2col<'_> {
    /// [`PackB::pack`] of a full strip 4 columns wide (Cortex-M's float
    /// kernel), row by row: four loads per row where the strip's outputs
    /// share an output row and the row's taps fall inside the input, a
    /// bounds test per element elsewhere. The general packer's runs,
    /// made for strips of 8 to 32 columns, cost some 50 instructions per
    /// float at this width (Cortex-M4F, QEMU). `false`, writing nothing,
    /// when the dilations are not 1 or `out` is short. Out of line: one
    /// call per strip, and inlined it grew the IC firmware's stack by 5 KB.
    #[inline(never)]
    fn pack4(&self, p0: usize, kc: usize, j0: usize, out: &mut [f32]) -> bool {
        let (kh, kw) = (self.k[0], self.k[1]);
        if self.d != [1, 1] || kh == 0 || kw == 0 || self.ow == 0 || out.len() < 4 * kc {
            return false;
        }
        let (h, w) = (self.h as isize, self.w as isize);
        let (sy, sx) = (self.s[0] as isize, self.s[1] as isize);
        let plane = self.h * self.w;
        // Each column's input origin (tap (0, 0)): row, column.
        let at: [(isize, isize); 4] = core::array::from_fn(|c| {
            let j = j0 + c;
            let (oy, ox) = ((j / self.ow) as isize, (j % self.ow) as isize);
            (oy * sy - self.pad[0] as isize, ox * sx - self.pad[1] as isize)
        });
        // All four on one output row: one input row per tap row.
        let one_row = j0 % self.ow + 3 < self.ow;
        let taps = kh * kw;
        let (mut ci, rem) = (p0 / taps, p0 % taps);
        let (mut ky, mut kx) = (rem / kw, rem % kw);
        for row in out.chunks_exact_mut(4).take(kc) {
            let Ok(row) = <&mut [f32; 4]>::try_from(row) else { return true };
            let base = ci * plane;
            let (iy, ix) = (at[0].0 + ky as isize, at[0].1 + kx as isize);
            let last = ix + 3 * sx;
            let inside = one_row && (0..h).contains(&iy) && ix >= 0 && last < w;
            let from = base + (iy.max(0) as usize) * self.w + ix.max(0) as usize;
            match self.x.get(from..from + 3 * sx as usize + 1) {
                Some(src) if inside => {
                    let s = sx as usize;
                    *row = [src[0], src[s], src[2 * s], src[3 * s]];
                }
                _ => {
                    for (v, &(y0, x0)) in row.iter_mut().zip(&at) {
                        let (iy, ix) = (y0 + ky as isize, x0 + kx as isize);
                        *v = if (0..h).contains(&iy) && (0..w).contains(&ix) {
                            let i = base + iy as usize * self.w + ix as usize;
                            self.x.get(i).copied().unwrap_or(0.0)
                        } else {
                            0.0
                        };
                    }
                }
            }
            kx += 1;
            if kx == kw {
                kx = 0;
                ky += 1;
                if ky == kh {
                    ky = 0;
                    ci += 1;
                }
            }
        }
        true
    }
}

/// One run of a packed strip for a group of rows (kernel columns `kx0 ..`
/// of one channel and kernel row): `len` columns from `c0`, reading the
/// input row from column `first + kx * dx` in steps of `sx`.
struct Run {
    c0: usize,
    len: usize,
    sx: usize,
    first: isize,
    kx0: usize,
    dx: usize,
    w: isize,
    evens: simd::Evens,
}

impl Run {
    /// Writes the run into each row of `group` (rows of `stride` floats);
    /// `N` and `S`, when not zero, are `len` and `sx` known at compile time.
    #[inline(always)]
    fn pack<const N: usize, const S: usize>(&self, group: &mut [f32], stride: usize, xrow: &[f32]) {
        let (len, sx) = if N > 0 { (N, S) } else { (self.len, self.sx) };
        let (c0, w) = (self.c0, self.w);
        for (i, row) in group.chunks_exact_mut(stride).enumerate() {
            let Some(dst) = row.get_mut(c0..c0 + len) else { continue };
            let ix0 = self.first + ((self.kx0 + i) * self.dx) as isize;
            // Inside the row: a plain (or every-other) copy.
            let last = ix0 + ((len - 1) * sx) as isize;
            // (The rest of the row from the run's first input: a stride-2
            // copy may read one float past its last input.)
            if ix0 >= 0
                && last < w
                && let Some(src) = xrow.get(ix0 as usize..)
                && copy_run(dst, src, sx, self.evens)
            {
                continue;
            }
            // Across a border: zeros, then the columns `a..b` of the run
            // that fall inside the row.
            let step = sx as isize;
            let a = ((-ix0).max(0) + step - 1) / step;
            let b = ((w - ix0).max(0) + step - 1) / step;
            let (a, b) = (a.min(len as isize) as usize, b.min(len as isize) as usize);
            zero_run(dst);
            if a >= b {
                continue;
            }
            let from = (ix0 + (a * sx) as isize) as usize;
            if let (Some(d), Some(s)) =
                (dst.get_mut(a..b), xrow.get(from..from + (b - a - 1) * sx + 1))
            {
                if sx == 1 {
                    copy_short(d, s);
                } else {
                    for (v, x) in d.iter_mut().zip(s.iter().step_by(sx)) {
                        *v = *x;
                    }
                }
            }
        }
    }
}

/// Longest input segment (in floats) one group of a stride-2 run spans for
/// [`Run::pack_deinterleaved`].
const SEG_SPAN: usize = 128;

/// Scratch of [`Run::pack_deinterleaved`], made once per packed strip: a
/// zero-padded input segment and its even and odd columns.
struct SplitSeg {
    seg: [f32; SEG_SPAN + 48],
    ev: [f32; SEG_SPAN / 2],
    od: [f32; SEG_SPAN / 2],
}

impl SplitSeg {
    fn new() -> Self {
        SplitSeg { seg: [0.0; SEG_SPAN + 48], ev: [0.0; SEG_SPAN / 2], od: [0.0; SEG_SPAN / 2] }
    }
}

impl Run {
    /// A run at a column stride of 2 whose length the packer has no
    /// fixed-size copy for (an output row shorter than a strip, or a strip
    /// crossing rows): the input segment every row of `group` reads is
    /// split once into its even and odd columns (staged with its zero
    /// padding first when it crosses a border of the row), and each row
    /// becomes one contiguous copy from the half its first input falls in,
    /// instead of a strided gather per row. `false`, writing nothing, when
    /// the segment is longer than [`SEG_SPAN`].
    #[inline(always)]
    fn pack_deinterleaved(
        &self,
        group: &mut [f32],
        stride: usize,
        xrow: &[f32],
        h: &mut SplitSeg,
    ) -> bool {
        let (len, c0, dx) = (self.len, self.c0, self.dx);
        let rows = group.len() / stride.max(1);
        if rows == 0 || len == 0 {
            return false;
        }
        // Row `i` reads segment floats `i * dx + 2 * t` for `t < len`.
        let Some(span) = (rows - 1)
            .checked_mul(dx)
            .and_then(|v| v.checked_add(2 * (len - 1) + 1))
            .filter(|&v| v <= SEG_SPAN)
        else {
            return false;
        };
        let blocks = span.div_ceil(2).div_ceil(16);
        // Each half reads whole blocks of 32 floats (the odd one from the
        // second float): floats past `span` land past what any row copies.
        let reach = 32 * blocks + 1;
        let start = self.first + (self.kx0 * dx) as isize;
        let inside = start >= 0 && start + span as isize <= self.w;
        let seg: &[f32] = match xrow.get(start.max(0) as usize..) {
            Some(s) if inside && s.len() >= reach => s,
            _ => {
                // The segment, zero outside the row (`xrow` runs on past it).
                let w = self.w.max(0) as usize;
                let row = xrow.get(..w).unwrap_or(xrow);
                let lo = ((-start).max(0) as usize).min(span);
                let hi = ((self.w - start).max(0) as usize).clamp(lo, span);
                if let Some(z) = h.seg.get_mut(..lo) {
                    z.fill(0.0);
                }
                if let Some(z) = h.seg.get_mut(hi..span) {
                    z.fill(0.0);
                }
                let from = (start + lo as isize).max(0) as usize;
                if let (Some(d), Some(s)) = (h.seg.get_mut(lo..hi), row.get(from..from + (hi - lo)))
                {
                    copy_any(d, s);
                }
                &h.seg
            }
        };
        let odd = dx % 2 == 1 && rows > 1;
        for b in 0..blocks {
            let (e, s) = (h.ev.get_mut(16 * b..16 * b + 16), seg.get(32 * b..32 * b + 32));
            if let (Some(Ok(e)), Some(Ok(s))) =
                (e.map(<&mut [f32; 16]>::try_from), s.map(<&[f32; 32]>::try_from))
            {
                self.evens.copy(e, s);
            }
            if odd {
                let (o, s) = (h.od.get_mut(16 * b..16 * b + 16), seg.get(32 * b + 1..32 * b + 33));
                if let (Some(Ok(o)), Some(Ok(s))) =
                    (o.map(<&mut [f32; 16]>::try_from), s.map(<&[f32; 32]>::try_from))
                {
                    self.evens.copy(o, s);
                }
            }
        }
        for (i, r) in group.chunks_exact_mut(stride).enumerate() {
            let o = i * dx;
            let half: &[f32] = if o % 2 == 0 { &h.ev } else { &h.od };
            if let (Some(d), Some(s)) = (r.get_mut(c0..c0 + len), half.get(o / 2..o / 2 + len)) {
                copy_short(d, s);
            }
        }
        true
    }
}

/// Packs strips of the input of a 1x1 convolution with strides `s` and no
/// padding: row `p` of B is input plane `p` taken every `s[0]`-th row and
/// `s[1]`-th column, so column `j` is output pixel `(j / ow, j % ow)` (the
/// im2col matrix of a single tap, without its per-tap bookkeeping). While
/// packing a strip it asks the caches for the inputs of the next one: each
/// row of B is a different plane, too many streams for the hardware
/// prefetcher to follow.
struct Subsample<'a> {
    x: &'a [f32],
    plane: usize,
    w: usize,
    ow: usize,
    s: [usize; 2],
    evens: simd::Evens,
}

/// Most runs (output rows) one strip of [`Subsample`] keeps track of; a
/// strip of more (outputs narrower than 2 columns) is packed element by
/// element.
const SUB_RUNS: usize = 32;

/// The runs of one strip of [`Subsample`] and how many there are.
type Runs = ([(usize, usize, usize); SUB_RUNS], usize);

impl Subsample<'_> {
    /// The columns `j0..j0 + nr` as runs on one output row each: (first
    /// column in the strip, length, offset of the first input in a plane).
    /// `None` when there are more than [`SUB_RUNS`].
    #[inline(always)]
    fn runs(&self, j0: usize, nr: usize) -> Option<Runs> {
        let mut runs = [(0usize, 0usize, 0usize); SUB_RUNS];
        let (mut c, mut count) = (0, 0);
        while c < nr {
            let j = j0 + c;
            let (oy, ox) = (j / self.ow, j % self.ow);
            let len = (self.ow - ox).min(nr - c);
            let off = oy.checked_mul(self.s[0] * self.w)?.checked_add(ox * self.s[1])?;
            *runs.get_mut(count)? = (c, len, off);
            count += 1;
            c += len;
        }
        Some((runs, count))
    }

    /// `dst[t] = src[t * sx]`, zero where `src` ends.
    #[inline(always)]
    fn gather(&self, dst: &mut [f32], src: &[f32]) {
        let sx = self.s[1];
        let len = dst.len();
        let mut t = 0;
        if sx == 2 && len >= 16 {
            // Blocks of 16 from 32 inputs, the last one overlapping.
            while t < len {
                let at = t.min(len - 16);
                let (Some(Ok(d)), Some(Ok(s))) = (
                    dst.get_mut(at..at + 16).map(<&mut [f32; 16]>::try_from),
                    src.get(2 * at..2 * at + 32).map(<&[f32; 32]>::try_from),
                ) else {
                    break;
                };
                self.evens.copy(d, s);
                t = at + 16;
            }
        }
        for (i, v) in dst.iter_mut().enumerate().skip(t) {
            *v = src.get(i * sx).copied().unwrap_or(0.0);
        }
    }
}

impl PackB for Subsample<'_> {
    #[inline(always)]
    fn pack(&self, p0: usize, kc: usize, j0: usize, nr: usize, stride: usize, out: &mut [f32]) {
        simd::debug_check_pack(kc, nr, stride, out);
        let nr = nr.min(stride);
        if self.ow == 0 {
            out.fill(0.0);
            return;
        }
        let Some((runs, count)) = self.runs(j0, nr) else {
            for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
                let base = (p0 + p) * self.plane;
                for (c, v) in row.iter_mut().enumerate() {
                    let j = j0 + c;
                    let at = (j / self.ow) * self.s[0] * self.w + (j % self.ow) * self.s[1];
                    *v = if c < nr { self.x.get(base + at).copied().unwrap_or(0.0) } else { 0.0 };
                }
            }
            return;
        };
        let next = self.runs(j0 + nr, nr);
        let sx = self.s[1];
        for (p, row) in out.chunks_exact_mut(stride).take(kc).enumerate() {
            let base = (p0 + p) * self.plane;
            if let Some(tail) = row.get_mut(nr..) {
                tail.fill(0.0);
            }
            for &(c0, len, off) in &runs[..count] {
                let Some(dst) = row.get_mut(c0..c0 + len) else { continue };
                match self.x.get(base + off..) {
                    Some(src) => self.gather(dst, src),
                    None => dst.fill(0.0),
                }
            }
            if let Some((nruns, ncount)) = &next {
                for &(_, len, off) in &nruns[..*ncount] {
                    let start = base + off;
                    let end = (start + (len - 1) * sx + 1).min(self.x.len());
                    simd::prefetch(self.x.get(start..end).unwrap_or(&[]));
                }
            }
        }
    }
}

/// `dst = src` (of equal lengths) as 16-float moves, the last one
/// overlapping, rather than a call (also the direct kernel's).
#[inline(always)]
pub(crate) fn copy_any(dst: &mut [f32], src: &[f32]) {
    let n = dst.len();
    if n < 16 || n != src.len() {
        copy_short(dst, src);
        return;
    }
    let mut at = 0;
    while at < n {
        let from = at.min(n - 16);
        if let (Some(Ok(d)), Some(Ok(s))) = (
            dst.get_mut(from..from + 16).map(<&mut [f32; 16]>::try_from),
            src.get(from..from + 16).map(<&[f32; 16]>::try_from),
        ) {
            *d = *s;
        }
        at += 16;
    }
}

/// Zeroes one run of a packed row; the usual run lengths (the strip widths 32,
/// 16 and 8) as fixed-size stores rather than a call.
#[inline(always)]
fn zero_run(dst: &mut [f32]) {
    if let Ok(d) = <&mut [f32; 32]>::try_from(&mut *dst) {
        *d = [0.0; 32];
    } else if let Ok(d) = <&mut [f32; 16]>::try_from(&mut *dst) {
        *d = [0.0; 16];
    } else if let Ok(d) = <&mut [f32; 8]>::try_from(&mut *dst) {
        *d = [0.0; 8];
    } else {
        dst.fill(0.0);
    }
}

/// Copies `src` (as long as `dst`, at most 32 in packing) with two
/// overlapping fixed-size moves instead of a call.
#[inline(always)]
pub(crate) fn copy_short(dst: &mut [f32], src: &[f32]) {
    fn two<const N: usize>(dst: &mut [f32], src: &[f32]) {
        let n = dst.len();
        for at in [0, n - N] {
            if let (Some(Ok(d)), Some(s)) =
                (dst.get_mut(at..at + N).map(<&mut [f32; N]>::try_from), src.get(at..at + N))
            {
                d.copy_from_slice(s);
            }
        }
    }
    match dst.len() {
        n if n != src.len() => {}
        17..=32 => two::<16>(dst, src),
        8..=16 => two::<8>(dst, src),
        4..=7 => two::<4>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

/// `dst[t] = src[t * step]` for a run of the usual lengths (32, 16 or 8) and
/// steps (1 or 2), as fixed-size copies the compiler turns into vector
/// moves and shuffles (and at a step of 2, where a 32nd float follows,
/// [`simd::Evens`] permutes). `src` holds at least
/// `(dst.len() - 1) * step + 1` values.
/// Returns `false`, copying nothing, for other shapes.
#[inline(always)]
fn copy_run(dst: &mut [f32], src: &[f32], step: usize, evens: simd::Evens) -> bool {
    // Runs of 16 or 32 at a step of 2: the even floats of each 32.
    if step == 2 && (dst.len() == 32 || dst.len() == 16) && src.len() > 2 * (dst.len() - 1) {
        for (d, s) in dst.chunks_exact_mut(16).zip(src.chunks(32)) {
            let (Ok(d), Some(Ok(s))) =
                (<&mut [f32; 16]>::try_from(d), s.get(..32).map(<&[f32; 32]>::try_from))
            else {
                // The last 32 would read one float past the run's last input.
                return copy_run_fixed(dst, src, step);
            };
            evens.copy(d, s);
        }
        return true;
    }
    copy_run_fixed(dst, src, step)
}

/// [`copy_run`] with plain copies.
#[inline(always)]
fn copy_run_fixed(dst: &mut [f32], src: &[f32], step: usize) -> bool {
    fn fixed<const N: usize, const S: usize>(dst: &mut [f32], src: &[f32]) -> bool {
        let (Ok(d), Some(s)) = (<&mut [f32; N]>::try_from(dst), src.get(..(N - 1) * S + 1)) else {
            return false;
        };
        for (t, v) in d.iter_mut().enumerate() {
            *v = s[t * S];
        }
        true
    }
    match (dst.len(), step) {
        (32, 1) => fixed::<32, 1>(dst, src),
        (32, 2) => fixed::<32, 2>(dst, src),
        (16, 1) => fixed::<16, 1>(dst, src),
        (8, 1) => fixed::<8, 1>(dst, src),
        (16, 2) => fixed::<16, 2>(dst, src),
        (8, 2) => fixed::<8, 2>(dst, src),
        (n, 1) => match src.get(..n) {
            Some(s) => {
                dst.copy_from_slice(s);
                true
            }
            None => false,
        },
        _ => false,
    }
}

/// Depthwise 2-D convolution of one plane (one input channel, one filter):
/// each output sums its in-bounds taps in row-major order, as [`conv`] does,
/// then adds `bias` and applies `act`. Rows of output accumulate tap by tap
/// so the inner loop runs over contiguous outputs.
#[inline(always)]
fn depthwise_plane(
    win: &Window<'_>,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    y: &mut [f32],
    act: Activation,
) {
    let w = win.in_dims[1];
    let ow = win.out_dims[1];
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (sy, sx) = (win.strides[0], win.strides[1]);
    let (dy, dx) = (win.dilations[0], win.dilations[1]);
    let (pt, pl) = (win.pads_begin[0], win.pads_begin[1]);
    // Per kernel column: the outputs whose tap lands inside the row
    // (`pl <= ox*sx + kx*dx < w + pl`) and the input column of the first.
    const MAX_KW: usize = 16;
    let span = |kx: usize| {
        let shift = kx * dx;
        let lo = pl.saturating_sub(shift).div_ceil(sx);
        let hi = (w + pl).saturating_sub(shift).div_ceil(sx).min(ow);
        (lo, hi, (lo * sx + shift).saturating_sub(pl))
    };
    let mut spans = [(0usize, 0usize, 0usize); MAX_KW];
    for (kx, s) in spans.iter_mut().enumerate().take(kw) {
        *s = span(kx);
    }
    for (oy, yrow) in y.chunks_exact_mut(ow).enumerate() {
        yrow.fill(0.0);
        for ky in 0..kh {
            let Some(iy) = (oy * sy + ky * dy).checked_sub(pt) else { continue };
            let Some(xrow) = x.get(iy * w..(iy + 1) * w) else { continue };
            let wrow = wk.get(ky * kw..(ky + 1) * kw).unwrap_or(&[]);
            for (kx, &wv) in wrow.iter().enumerate() {
                let (lo, hi, start) = if kx < MAX_KW { spans[kx] } else { span(kx) };
                if lo >= hi {
                    continue;
                }
                let ys = &mut yrow[lo..hi];
                if sx == 1 {
                    for (yv, xv) in ys.iter_mut().zip(&xrow[start..]) {
                        *yv += wv * *xv;
                    }
                } else {
                    for (yv, xv) in ys.iter_mut().zip(xrow[start..].iter().step_by(sx)) {
                        *yv += wv * *xv;
                    }
                }
            }
        }
        for v in yrow.iter_mut() {
            *v = act.apply(*v + bias);
        }
    }
}

/// The largest padded plane (in floats) [`depthwise_plane_staged`] copies
/// to the stack: 4 KiB for the input and as much for the sums.
const DW_STAGE: usize = 1024;

/// Depthwise 2-D convolution of one small stride-1 plane: the plane is
/// copied with its zero padding into a stack buffer `wp = ow + kw - 1`
/// floats wide, so every tap is one contiguous multiply-add over the whole
/// plane (sums are computed for `kw - 1` junk columns per row and dropped).
/// Narrow rows (a few outputs each) otherwise leave the vector units idle.
/// Taps are added in the same row-major order as [`depthwise_plane`]; a tap
/// in the padding adds `w * 0.0`, an exact zero since the weights are
/// checked finite. Returns `false`, computing nothing, when the plane does
/// not qualify (strides or dilations other than 1, too large, a non-finite
/// weight).
#[inline(always)]
fn depthwise_plane_staged(
    win: &Window<'_>,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    y: &mut [f32],
    act: Activation,
) -> bool {
    let (h, w) = (win.in_dims[0], win.in_dims[1]);
    let (oh, ow) = (win.out_dims[0], win.out_dims[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (pt, pl) = (win.pads_begin[0], win.pads_begin[1]);
    let unit = |v: &[usize]| v.iter().all(|&s| s == 1);
    if !unit(win.strides) || !unit(win.dilations) || oh == 0 || ow == 0 {
        return false;
    }
    let (wp, hp) = (ow + kw - 1, oh + kh - 1);
    if hp.saturating_mul(wp) > DW_STAGE || !wk.iter().all(|v| v.is_finite()) {
        return false;
    }
    let mut xp = [0.0f32; DW_STAGE];
    // Staged column c holds input column c - pl; those inside the row:
    let c_lo = pl.min(wp);
    let c_hi = (w + pl).min(wp);
    for r in 0..hp {
        let Some(iy) = r.checked_sub(pt) else { continue };
        if iy >= h || c_lo >= c_hi {
            continue;
        }
        let (Some(dst), Some(src)) =
            (xp.get_mut(r * wp + c_lo..r * wp + c_hi), x.get(iy * w..iy * w + c_hi - pl))
        else {
            continue;
        };
        if let Some(src) = src.get(c_lo - pl..) {
            dst.copy_from_slice(src);
        }
    }
    let n = (oh - 1) * wp + ow;
    let mut acc = [0.0f32; DW_STAGE];
    let acc = &mut acc[..n];
    for ky in 0..kh {
        for kx in 0..kw {
            let wv = wk.get(ky * kw + kx).copied().unwrap_or(0.0);
            let off = ky * wp + kx;
            // off + n <= hp * wp: every tap of every output is staged.
            let Some(xs) = xp.get(off..off + n) else { continue };
            for (a, xv) in acc.iter_mut().zip(xs) {
                *a += wv * *xv;
            }
        }
    }
    for (oy, yrow) in y.chunks_exact_mut(ow).enumerate() {
        for (yv, a) in yrow.iter_mut().zip(acc.get(oy * wp..).unwrap_or(&[])) {
            *yv = act.apply(*a + bias);
        }
    }
    true
}

/// Where an f32 convolution reads its weights.
#[derive(Debug)]
pub enum ConvWeights<'a> {
    /// As the model gives them: `[M, C / group, k...]`.
    Dense(&'a [f32]),
    /// Laid out in panels of filters by [`pack_conv_weights`] when the code
    /// was generated (2-D convolutions of groups of one).
    Panels(&'a [f32]),
    /// Transformed for Winograd's F(2x2, 3x3) by
    /// [`crate::winograd::transform_weights`] (3x3, stride and dilation 1,
    /// group 1), with the scratch its transforms and products work in
    /// ([`crate::winograd::scratch_len`]).
    Winograd { u: &'a [f32], scratch: &'a mut [f32] },
}

/// ONNX `Conv` on f32 for generated code, then `post` (a residual of the
/// output's shape added after the bias, then the activations) on every
/// output. 2-D convolutions run as an implicit GEMM on the blocked SIMD
/// product (im2col strips packed on the fly, or the weights' panels), on a
/// direct kernel (depthwise, stems, small channel counts), or by Winograd;
/// other ranks use [`conv`]. Same checks as [`conv`].
///
/// `#[inline(always)]`: each call site names its weights' variant, so the
/// match folds away and the call goes straight to that variant's
/// implementation. Left out of line, the implementations are inlined into
/// this one function and their frames add up: the KWS firmware's stack
/// grew from 8,420 to 11,480 bytes (Cortex-M4F, QEMU).
#[inline(always)]
pub fn sconv(
    p: &Conv<'_>,
    x: &[f32],
    w: ConvWeights<'_>,
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    match w {
        ConvWeights::Dense(w) => sconv_fused(p, x, w, bias, y, post),
        ConvWeights::Panels(w) => sconv_packed_fused(p, x, w, bias, y, post),
        ConvWeights::Winograd { u, scratch } => {
            crate::winograd::sconv3x3_fused(p, x, u, bias, y, post, scratch)
        }
    }
}

/// `post`'s residual, then its activations, on every output of `y` (the
/// paths whose kernels do not take them in their epilogue).
pub(crate) fn post_pass(post: &Post<'_>, y: &mut [f32]) -> Result {
    if let Some(r) = post.residual {
        ensure(r.len() == y.len(), Error::ShapeMismatch)?;
        for (v, x) in y.iter_mut().zip(r) {
            *v += *x;
        }
    }
    post.act.apply_all(y);
    if let Some(s) = post.smooth {
        s.apply_all(y);
    }
    Ok(())
}

/// [`sconv`] with the weights as the model gives them. 2-D convolutions of
/// groups of one
/// apply it per tile of the implicit GEMM, while the tile is in L1;
/// depthwise ones without a residual apply the smooth activation to each
/// block of planes right after the kernel wrote it; other convolutions in
/// a pass after the kernel.
fn sconv_fused(
    p: &Conv<'_>,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    let tiled = p.window.in_dims.len() == 2
        && p.groups == 1
        && !(p.in_channels == 1 && p.out_channels == 1);
    let depthwise = p.window.in_dims.len() == 2
        && p.groups == p.in_channels
        && p.groups == p.out_channels
        && post.residual.is_none();
    if !tiled && !depthwise && (post.residual.is_some() || post.smooth.is_some()) {
        sconv_fused(p, x, w, bias, y, &Post::NONE)?;
        return post_pass(post, y);
    }
    if let Some(r) = post.residual {
        ensure(r.len() == y.len(), Error::ShapeMismatch)?;
    }
    let act = post.act;
    if p.window.in_dims.len() != 2 {
        conv(p, x, w, bias, y)?;
        act.apply_all(y);
        return Ok(());
    }
    p.window.check(false)?;
    check_groups(p)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    let k_size = numel(p.window.kernel)?;
    let cg = p.in_channels / p.groups;
    let mg = p.out_channels / p.groups;
    ensure(x.len() == len3(p.batch, p.in_channels, in_size)?, Error::ShapeMismatch)?;
    ensure(w.len() == len3(p.out_channels, cg, k_size)?, Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, p.out_channels, out_size)?, Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == p.out_channels, Error::ShapeMismatch)?;
    }
    if out_size == 0 {
        return Ok(());
    }
    let win = &p.window;
    let bias_of = |oc: usize| bias.and_then(|b| b.get(oc)).copied().unwrap_or(0.0);
    // The 2-D geometry, as the vector kernels (depthwise, direct) take it.
    let geom = simd::Geom2d::of(win).ok_or(Error::InvalidParams)?;
    if cg == 1 && mg == 1 {
        // The vector kernels read padding as zeros and multiply them in,
        // which only matches skipping those taps when the weights are finite.
        // Blocks of sixteen without an early exit inside: vector compares
        // instead of a branch per weight.
        let finite = w.chunks(16).all(|c| c.iter().fold(true, |a, v| a & v.is_finite()));
        let smooth = post.smooth;
        if finite && simd::depthwise(&geom, p.out_channels, x, w, bias, act, smooth, y) {
            return Ok(());
        }
        for (plane, yp) in y.chunks_exact_mut(out_size).enumerate() {
            let c = plane % p.out_channels;
            let xp = &x[plane * in_size..(plane + 1) * in_size];
            let wk = &w[c * k_size..(c + 1) * k_size];
            simd::vectorized(|| {
                if !depthwise_plane_staged(win, xp, wk, bias_of(c), yp, act) {
                    depthwise_plane(win, xp, wk, bias_of(c), yp, act);
                }
                if let Some(s) = smooth {
                    s.apply_all(yp);
                }
            });
        }
        return Ok(());
    }
    let kdim = cg * k_size;
    for n in 0..p.batch {
        for g in 0..p.groups {
            let xs = &x[(n * p.in_channels + g * cg) * in_size..][..cg * in_size];
            let ys = &mut y[(n * p.out_channels + g * mg) * out_size..][..mg * out_size];
            let group_bias = bias.and_then(|b| b.get(g * mg..(g + 1) * mg));
            let a = ViewA { data: w, off: g * mg * kdim, rs: kdim, cs: 1 };
            let res = post.residual.and_then(|r| r.get((n * p.out_channels + g * mg) * out_size..));
            let post = Post { residual: res, ..*post };
            conv2d_group(win, &geom, cg, mg, xs, a, group_bias, &post, ys)?;
        }
    }
    Ok(())
}

/// One group of a 2-D convolution (`cg` input planes `xs` into `mg`
/// output planes `ys`, the weights the `mg x cg * kh * kw` operand `a`):
/// the direct kernel where it applies and is expected to be faster, the
/// implicit-GEMM product otherwise.
#[allow(clippy::too_many_arguments)]
fn conv2d_group<A: ReadA>(
    win: &Window<'_>,
    geom: &simd::Geom2d,
    cg: usize,
    mg: usize,
    xs: &[f32],
    a: A,
    bias: Option<&[f32]>,
    post: &Post<'_>,
    ys: &mut [f32],
) -> Result {
    let (in_size, out_size) = (geom.h * geom.w, geom.oh * geom.ow);
    let kdim = cg * geom.kh * geom.kw;
    let single_tap =
        geom.kh * geom.kw == 1 && win.pads_begin.iter().chain(win.pads_end).all(|&v| v == 0);
    let pointwise = single_tap && win.strides.iter().all(|&s| s == 1);
    let act = post.act;
    // The direct kernel's epilogue is the bias and `act` only: with a
    // residual, it runs without `act`, and the rest follows on the output
    // (the unfused nodes' arithmetic; the implicit GEMM is slower there).
    let plain = post.residual.is_none() && post.smooth.is_none();
    if !pointwise {
        let (act, smooth) = (post.act, post.smooth);
        if post.residual.is_none() && simd::conv2d_stem(geom, cg, mg, xs, a, bias, act, smooth, ys)
        {
            return Ok(());
        }
        let direct_act = if plain { act } else { Activation::None };
        if simd::conv2d_direct(geom, cg, mg, xs, a, bias, direct_act, ys) {
            if plain {
                return Ok(());
            }
            // The residual from this group's first output on (checked long
            // enough by the callers).
            let res = post.residual.map(|r| r.get(..ys.len()).ok_or(Error::ShapeMismatch));
            return post_pass(&Post { residual: res.transpose()?, ..*post }, ys);
        }
    }
    let out = Out { y: ys, ldy: out_size };
    let epi = Epilogue {
        res: post.residual.map(|data| Residual { data, rs: out_size }),
        smooth: post.smooth,
        ..Epilogue::bias_act(bias, act)
    };
    if pointwise {
        let b = DenseB { data: xs, rs: in_size, cs: 1 };
        simd::product(mg, out_size, kdim, a, &b, out, &epi)
    } else if single_tap {
        let b = Subsample {
            x: xs,
            plane: in_size,
            w: geom.w,
            ow: geom.ow,
            s: [win.strides[0], win.strides[1]],
            evens: simd::Evens::detect(),
        };
        simd::product(mg, out_size, kdim, a, &b, out, &epi)
    } else {
        let b = Im2col {
            x: xs,
            h: win.in_dims[0],
            w: win.in_dims[1],
            ow: win.out_dims[1],
            k: [win.kernel[0], win.kernel[1]],
            s: [win.strides[0], win.strides[1]],
            d: [win.dilations[0], win.dilations[1]],
            pad: [win.pads_begin[0], win.pads_begin[1]],
            evens: simd::Evens::detect(),
        };
        simd::product(mg, out_size, kdim, a, &b, out, &epi)
    }
}

/// Floats of the weights of `m` filters of `k` taps each once packed by
/// [`pack_conv_weights`]: `m` rounded up to a multiple of 8, times `k`;
/// `None` on overflow.
pub fn packed_weights_len(m: usize, k: usize) -> Option<usize> {
    simd::panels_len(m, k)
}

/// Lays out the weights `w` of a convolution of groups of one (`m` filters
/// of `k = C * kernel size` taps, row-major `[m, k]`) for [`ConvWeights::Panels`]:
/// in panels of 8 filters, tap by tap, so the filters one register tile
/// reads at each step are adjacent. Element `(i, p)` goes to
/// `out[(i / 8) * 8 * k + p * 8 + i % 8]`; the rows padding `m` to a
/// multiple of 8 are zero. Done once, when the code is generated.
pub fn pack_conv_weights(m: usize, k: usize, w: &[f32], out: &mut [f32]) -> Result {
    let len = packed_weights_len(m, k).ok_or(Error::Overflow)?;
    ensure(m.checked_mul(k) == Some(w.len()) && out.len() == len, Error::ShapeMismatch)?;
    out.fill(0.0);
    if k == 0 {
        return Ok(());
    }
    for (i, row) in w.chunks_exact(k).enumerate() {
        let base = (i / simd::PANEL) * simd::panel_stride(k) + i % simd::PANEL;
        for (p, &v) in row.iter().enumerate() {
            if let Some(o) = out.get_mut(base + p * simd::PANEL) {
                *o = v;
            }
        }
    }
    Ok(())
}

/// [`sconv`] for a 2-D convolution of groups of one whose weights were
/// laid out by [`pack_conv_weights`] when the code was generated (`w` has
/// [`packed_weights_len`]`(M, C * kh * kw)` floats), `post` applied per
/// tile. Same checks and same results as on the unpacked weights, up to
/// float rounding; on every CPU (the portable kernel reads the same
/// layout).
fn sconv_packed_fused(
    p: &Conv<'_>,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    y: &mut [f32],
    post: &Post<'_>,
) -> Result {
    ensure(p.window.in_dims.len() == 2 && p.groups == 1, Error::InvalidParams)?;
    if let Some(r) = post.residual {
        ensure(r.len() == y.len(), Error::ShapeMismatch)?;
    }
    p.window.check(false)?;
    let in_size = numel(p.window.in_dims)?;
    let out_size = numel(p.window.out_dims)?;
    let kdim = p.in_channels.checked_mul(numel(p.window.kernel)?).ok_or(Error::Overflow)?;
    let (c, m) = (p.in_channels, p.out_channels);
    ensure(x.len() == len3(p.batch, c, in_size)?, Error::ShapeMismatch)?;
    ensure(Some(w.len()) == packed_weights_len(m, kdim), Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, m, out_size)?, Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == m, Error::ShapeMismatch)?;
    }
    if out_size == 0 || m == 0 {
        return Ok(());
    }
    let geom = simd::Geom2d::of(&p.window).ok_or(Error::InvalidParams)?;
    if kdim == 0 {
        // No taps: every output is its bias.
        for (plane, yp) in y.chunks_exact_mut(out_size).enumerate() {
            let b = bias.and_then(|b| b.get(plane % m)).copied().unwrap_or(0.0);
            yp.fill(b);
        }
        return post_pass(post, y);
    }
    let a = PanelA { data: w, k: kdim };
    let (xn, yn) = (c * in_size, m * out_size);
    for n in 0..p.batch {
        let xs = x.get(n * xn..(n + 1) * xn).ok_or(Error::ShapeMismatch)?;
        let ys = y.get_mut(n * yn..(n + 1) * yn).ok_or(Error::ShapeMismatch)?;
        let post = Post { residual: post.residual.and_then(|r| r.get(n * yn..)), ..*post };
        conv2d_group(&p.window, &geom, c, m, xs, a, bias, &post, ys)?;
    }
    Ok(())
}

/// ConvTranspose geometry: `in_dims` (the ConvTranspose output) must be
/// `s * (out - 1) + d * (k - 1) + 1 - pb - pe + extra` with
/// `0 <= extra < max(s, d)` (ONNX `output_padding`).
fn check_transpose_window(w: &Window<'_>) -> Result {
    w.check_lens()?;
    for i in 0..w.in_dims.len() {
        let (s, d, k, o) = (w.strides[i], w.dilations[i], w.kernel[i], w.out_dims[i]);
        ensure(s > 0 && d > 0 && k > 0 && o > 0, Error::InvalidParams)?;
        let full = s
            .checked_mul(o - 1)
            .and_then(|v| v.checked_add(d.checked_mul(k - 1)?.checked_add(1)?))
            .ok_or(Error::Overflow)?;
        let pads = w.pads_begin[i].checked_add(w.pads_end[i]).ok_or(Error::Overflow)?;
        ensure(full >= pads, Error::InvalidParams)?;
        let base = full - pads;
        ensure(w.in_dims[i] >= base && w.in_dims[i] - base < s.max(d), Error::InvalidParams)?;
    }
    Ok(())
}

/// ONNX `ConvTranspose`: `x` is `[N, C, in...]`, `w` is `[C, M / groups, kernel...]`,
/// `y` is `[N, M, out...]`.
///
/// `p.window` describes the equivalent forward convolution from `y` back to
/// `x`: its `in_dims` are the ConvTranspose *output* dims, its `out_dims` the
/// ConvTranspose *input* dims, with the ConvTranspose pads, strides and
/// dilations; `output_padding` shows up only as larger `in_dims`. Each output
/// is the bias plus the scatter-sum of the inputs whose windows cover it.
pub fn conv_transpose<T: Num>(
    p: &Conv<'_>,
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    y: &mut [T],
) -> Result {
    check_transpose_window(&p.window)?;
    check_groups(p)?;
    let y_size = numel(p.window.in_dims)?;
    let x_size = numel(p.window.out_dims)?;
    let k_size = numel(p.window.kernel)?;
    let cg = p.in_channels / p.groups;
    let mg = p.out_channels / p.groups;
    ensure(x.len() == len3(p.batch, p.in_channels, x_size)?, Error::ShapeMismatch)?;
    ensure(w.len() == len3(p.in_channels, mg, k_size)?, Error::ShapeMismatch)?;
    ensure(y.len() == len3(p.batch, p.out_channels, y_size)?, Error::ShapeMismatch)?;
    if let Some(b) = bias {
        ensure(b.len() == p.out_channels, Error::ShapeMismatch)?;
    }
    for (i, chunk) in y.chunks_mut(y_size.max(1)).enumerate() {
        chunk.fill(bias.map_or(T::ZERO, |b| b[i % p.out_channels.max(1)]));
    }
    let mut xpos = [0usize; MAX_RANK];
    let xpos = &mut xpos[..p.window.in_dims.len()];
    for n in 0..p.batch {
        for g in 0..p.groups {
            for ci in 0..cg {
                let c = g * cg + ci;
                let x_base = (n * p.in_channels + c) * x_size;
                xpos.fill(0);
                let mut xi = 0;
                loop {
                    let xv = x[x_base + xi];
                    for mo in 0..mg {
                        let m = g * mg + mo;
                        let y_base = (n * p.out_channels + m) * y_size;
                        let w_base = (c * mg + mo) * k_size;
                        p.window.taps(xpos, |tap, at| {
                            if let Some(at) = at {
                                y[y_base + at] = y[y_base + at].add(xv.mul(w[w_base + tap]));
                            }
                        });
                    }
                    xi += 1;
                    if !next_index(xpos, p.window.out_dims) {
                        break;
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn win<'a>(
        in_dims: &'a [usize],
        out_dims: &'a [usize],
        kernel: &'a [usize],
        strides: &'a [usize],
        dilations: &'a [usize],
        pads: &'a [usize],
    ) -> Window<'a> {
        Window { in_dims, out_dims, kernel, strides, dilations, pads_begin: pads, pads_end: pads }
    }

    fn c1(window: Window<'_>) -> Conv<'_> {
        Conv { batch: 1, in_channels: 1, out_channels: 1, groups: 1, window }
    }

    #[test]
    fn conv1d_hand_computed() {
        // x = [1,2,3,4,5], w = [1,0,-1], pad 1: y[i] = x[i-1] - x[i+1], plus bias 10.
        let p = c1(win(&[5], &[5], &[3], &[1], &[1], &[1]));
        let mut y = [0.0f32; 5];
        conv(&p, &[1.0, 2.0, 3.0, 4.0, 5.0], &[1.0, 0.0, -1.0], Some(&[10.0]), &mut y).unwrap();
        assert_eq!(y, [8.0, 8.0, 8.0, 8.0, 14.0]);
        // Stride 2, dilation 2, no pad: taps at 2o, 2o+2, 2o+4 over 7 inputs -> 2 outputs.
        let p = c1(win(&[7], &[2], &[3], &[2], &[2], &[0]));
        let mut y = [0i32; 2];
        conv(&p, &[1, 2, 3, 4, 5, 6, 7], &[1, 10, 100], None, &mut y).unwrap();
        assert_eq!(y, [1 + 30 + 500, 3 + 50 + 700]);
        // An out dim that does not follow from the geometry is refused.
        let p = c1(win(&[7], &[3], &[3], &[2], &[2], &[0]));
        assert_eq!(conv(&p, &[1; 7], &[1; 3], None, &mut [0; 3]), Err(Error::InvalidParams));
        // Asymmetric pads: begin 2, end 0, kernel 1 -> two leading zeros.
        let w =
            Window { pads_begin: &[2], pads_end: &[0], ..win(&[2], &[4], &[1], &[1], &[1], &[0]) };
        let mut y = [9i32; 4];
        conv(&c1(w), &[3, 4], &[2], None, &mut y).unwrap();
        assert_eq!(y, [0, 0, 6, 8]);
    }

    #[test]
    fn conv2d_identity_kernels() {
        // 1x1 kernel, C = M = 2, w = identity matrix: y == x.
        let x: [f64; 12] = core::array::from_fn(|i| i as f64 * 0.5 - 1.0);
        let p = Conv {
            batch: 1,
            in_channels: 2,
            out_channels: 2,
            groups: 1,
            window: win(&[2, 3], &[2, 3], &[1, 1], &[1, 1], &[1, 1], &[0, 0]),
        };
        let mut y = [0.0f64; 12];
        conv(&p, &x, &[1.0, 0.0, 0.0, 1.0], None, &mut y).unwrap();
        assert_eq!(y, x);
        // A centred 3x3 delta kernel with pad 1 is the identity too.
        let p = c1(win(&[3, 4], &[3, 4], &[3, 3], &[1, 1], &[1, 1], &[1, 1]));
        let mut w = [0.0f64; 9];
        w[4] = 1.0;
        let mut y = [0.0f64; 12];
        conv(&p, &x, &w, None, &mut y).unwrap();
        assert_eq!(y, x);
    }

    #[test]
    fn conv2d_box_sum_depthwise_grouped() {
        // 3x3 ones input, 2x2 ones kernel, pad 1 all round: how many cells each window covers.
        let p = c1(win(&[3, 3], &[4, 4], &[2, 2], &[1, 1], &[1, 1], &[1, 1]));
        let mut y = [0i64; 16];
        conv(&p, &[1; 9], &[1; 4], None, &mut y).unwrap();
        assert_eq!(y, [1, 2, 2, 1, 2, 4, 4, 2, 2, 4, 4, 2, 1, 2, 2, 1]);
        // Depthwise: 2 channels, groups 2, per-channel scalar kernels 2 and -1, batch 2.
        let p = Conv {
            batch: 2,
            in_channels: 2,
            out_channels: 2,
            groups: 2,
            window: win(&[2], &[2], &[1], &[1], &[1], &[0]),
        };
        let mut y = [0i32; 8];
        conv(&p, &[1, 2, 3, 4, 5, 6, 7, 8], &[2, -1], Some(&[0, 100]), &mut y).unwrap();
        assert_eq!(y, [2, 4, 97, 96, 10, 12, 93, 92]);
        // Grouped: C = 4, M = 2, groups 2; each output sums its own pair of channels.
        let p = Conv { batch: 1, in_channels: 4, out_channels: 2, ..p };
        let mut y = [0i32; 4];
        conv(&p, &[1, 2, 10, 20, 100, 200, 1000, 2000], &[1, 1, 1, -1], None, &mut y).unwrap();
        assert_eq!(y, [11, 22, -900, -1800]);
        let p = Conv { groups: 3, ..p };
        assert_eq!(conv(&p, &[0; 8], &[0; 4], None, &mut y), Err(Error::InvalidParams));
    }

    #[test]
    fn conv3d_sum() {
        let p = c1(win(&[2, 2, 2], &[1, 1, 1], &[2, 2, 2], &[1, 1, 1], &[1, 1, 1], &[0, 0, 0]));
        let mut y = [0.0f32];
        conv(&p, &[1.0; 8], &[1.0; 8], None, &mut y).unwrap();
        assert_eq!(y, [8.0]);
    }

    #[test]
    fn conv_transpose_hand_computed() {
        // x = [1, 2], w = [1, 10, 100], stride 2: y = [1, 10, 100 + 2, 20, 200].
        let p = c1(win(&[5], &[2], &[3], &[2], &[1], &[0]));
        let mut y = [0i32; 5];
        conv_transpose(&p, &[1, 2], &[1, 10, 100], None, &mut y).unwrap();
        assert_eq!(y, [1, 10, 102, 20, 200]);
        // Pads 1 crop one element from each end; bias adds.
        let p = c1(win(&[3], &[2], &[3], &[2], &[1], &[1]));
        let mut y = [0i32; 3];
        conv_transpose(&p, &[1, 2], &[1, 10, 100], Some(&[5]), &mut y).unwrap();
        assert_eq!(y, [15, 107, 25]);
        // output_padding 1: one more trailing element holding only the bias.
        let p = c1(win(&[6], &[2], &[3], &[2], &[1], &[0]));
        let mut y = [0i32; 6];
        conv_transpose(&p, &[1, 2], &[1, 10, 100], Some(&[5]), &mut y).unwrap();
        assert_eq!(y, [6, 15, 107, 25, 205, 5]);
        let p = c1(win(&[8], &[2], &[3], &[2], &[1], &[0]));
        assert_eq!(
            conv_transpose(&p, &[1, 2], &[1, 10, 100], None, &mut [0; 8]),
            Err(Error::InvalidParams)
        );
    }

    fn values(n: usize, seed: u32) -> [f32; 4096] {
        let mut out = [0.0f32; 4096];
        let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(7);
        for v in out.iter_mut().take(n) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *v = (x % 2001) as f32 / 1000.0 - 1.0;
        }
        out
    }

    /// The strips of a strided single-tap input hold exactly every
    /// `sy`-th row and `sx`-th column of each plane, zero past the strip's
    /// columns; the next strip's inputs are only prefetched.
    #[test]
    fn subsample_strips_match_the_subsampled_planes() {
        use std::vec::Vec;
        // (C, H, W, sy, sx)
        let shapes = [
            (3, 14, 14, 2, 2),
            (2, 56, 56, 2, 2),
            (4, 9, 70, 2, 2),
            (2, 7, 40, 3, 2),
            (3, 11, 5, 2, 3),
            (2, 13, 1, 2, 2),
            (5, 8, 33, 1, 2),
            (2, 6, 9, 3, 1),
        ];
        for (t, &(c, h, w, sy, sx)) in shapes.iter().enumerate() {
            let (oh, ow) = ((h - 1) / sy + 1, (w - 1) / sx + 1);
            let x: Vec<f32> = (0..c * h * w).map(|i| i as f32 * 0.5 - 7.0).collect();
            let b =
                Subsample { x: &x, plane: h * w, w, ow, s: [sy, sx], evens: simd::Evens::detect() };
            let n = oh * ow;
            // Strip widths of the kernels, one past the runs a strip tracks.
            for (nr, stride) in [(32, 32), (16, 16), (8, 8), (5, 8), (40, 40)] {
                for p0 in 0..c {
                    let kc = c - p0;
                    let mut j0 = 0;
                    while j0 < n {
                        let cols = nr.min(n - j0);
                        let mut out = vec![f32::NAN; kc * stride];
                        b.pack(p0, kc, j0, cols, stride, &mut out);
                        for p in 0..kc {
                            for col in 0..stride {
                                let j = j0 + col;
                                let e = if col < cols {
                                    x[(p0 + p) * h * w + (j / ow) * sy * w + (j % ow) * sx]
                                } else {
                                    0.0
                                };
                                let g = out[p * stride + col];
                                assert_eq!(g, e, "shape {t} nr {nr} p {} j {j}", p0 + p);
                            }
                        }
                        j0 += nr - 1;
                    }
                }
            }
        }
    }

    /// The product over strided single-tap inputs (every kernel this CPU
    /// has, through `simd::product`, weights in panels) against plain sums
    /// with the residual and activation epilogue.
    #[test]
    fn subsampled_products_match_plain_sums() {
        use std::vec::Vec;
        // (C, M, H, W, sy, sx)
        let shapes = [
            (16, 24, 14, 14, 2, 2),
            (40, 9, 56, 9, 2, 2),
            (33, 70, 14, 14, 2, 2),
            (7, 13, 25, 41, 3, 2),
            (1, 5, 9, 9, 2, 3),
            (130, 17, 13, 1, 2, 2),
            (300, 250, 8, 8, 2, 2),
        ];
        for (t, &(c, m, h, w, sy, sx)) in shapes.iter().enumerate() {
            let (oh, ow) = ((h - 1) / sy + 1, (w - 1) / sx + 1);
            let n = oh * ow;
            let values_of = |len: usize, seed: u32| -> Vec<f32> {
                let mut v = vec![0.0f32; len];
                crate::simd::tests::fill(&mut v, seed);
                v
            };
            let (x, wt, bias, r) = (
                values_of(c * h * w, 1 + t as u32),
                values_of(m * c, 2),
                values_of(m, 3),
                values_of(m * n, 4),
            );
            let mut packed = vec![f32::NAN; packed_weights_len(m, c).unwrap()];
            pack_conv_weights(m, c, &wt, &mut packed).unwrap();
            let b =
                Subsample { x: &x, plane: h * w, w, ow, s: [sy, sx], evens: simd::Evens::detect() };
            let epi = Epilogue {
                res: Some(Residual { data: &r, rs: n }),
                ..Epilogue::bias_act(Some(&bias), Activation::LeakyRelu { alpha: 0.25 })
            };
            let mut got = vec![f32::NAN; m * n];
            let a = PanelA { data: &packed, k: c };
            simd::product(m, n, c, a, &b, Out { y: &mut got, ldy: n }, &epi).unwrap();
            let mut exact = vec![f32::NAN; m * n];
            simd::product_portable(m, n, c, a, &b, Out { y: &mut exact, ldy: n }, &epi).unwrap();
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0f32;
                    for p in 0..c {
                        acc += wt[i * c + p] * x[p * h * w + (j / ow) * sy * w + (j % ow) * sx];
                    }
                    let e = epi.one(i, j, acc);
                    let tol = 4.0 * c as f32 * f32::EPSILON;
                    let g = got[i * n + j];
                    assert!((g - e).abs() <= tol * (1.0 + e.abs()), "{t} ({i}, {j}): {g} vs {e}");
                    assert_eq!(exact[i * n + j], e, "{t} ({i}, {j}) portable");
                }
            }
        }
    }

    /// The im2col strips (stride-2 runs of 32 and 16 through the vector
    /// permute, runs across borders and rows, blocks of `k` starting inside
    /// a kernel row) hold exactly the im2col matrix, zero in the padding and
    /// past the last column.
    #[test]
    fn im2col_strips_match_the_im2col_matrix() {
        // (C, H, W, kernel, stride, dilation, pads top/left)
        let cases = [
            (2, 5, 70, [3, 3], [2, 2], [1, 1], [1, 1]),
            (3, 4, 64, [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 3, 67, [3, 3], [2, 2], [1, 1], [0, 0]),
            (1, 6, 35, [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 7, 33, [2, 5], [1, 2], [1, 1], [0, 2]),
            (3, 9, 40, [3, 3], [1, 1], [1, 1], [1, 1]),
            // Stride-2 runs of lengths without a fixed copy (output rows of
            // 7, 14, 28 and odd ones), 1x1 and 7x7 kernels, dilations 2
            // and 3, and a dilation whose segment is too long to stage.
            (3, 5, 14, [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 4, 28, [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 3, 56, [3, 3], [2, 2], [1, 1], [1, 1]),
            (3, 4, 56, [1, 1], [2, 2], [1, 1], [0, 0]),
            (2, 3, 13, [1, 1], [2, 2], [1, 1], [0, 0]),
            (3, 9, 45, [7, 7], [2, 2], [1, 1], [3, 3]),
            (2, 8, 29, [7, 7], [2, 2], [1, 1], [3, 2]),
            // Runs of 32 and 16 crossing the row's borders (a 7x7 stem).
            (2, 5, 64, [7, 7], [2, 2], [1, 1], [3, 3]),
            (1, 4, 32, [7, 7], [2, 2], [1, 1], [3, 3]),
            (2, 3, 40, [3, 3], [2, 2], [1, 1], [1, 1]),
            (2, 6, 37, [3, 3], [2, 2], [2, 2], [2, 1]),
            (1, 7, 41, [3, 5], [2, 2], [1, 3], [1, 0]),
            (1, 5, 160, [2, 3], [2, 2], [1, 40], [0, 1]),
            (2, 5, 23, [3, 3], [3, 2], [1, 1], [1, 1]),
            // Patch layers (kernel = stride = 16): output rows of 14 (runs
            // crossing rows), 3, and 32 with input columns left over; one
            // with padding (its first patch crosses the border).
            (2, 32, 224, [16, 16], [16, 16], [1, 1], [0, 0]),
            (1, 16, 48, [16, 16], [16, 16], [1, 1], [0, 0]),
            (1, 17, 517, [16, 16], [16, 16], [1, 1], [0, 0]),
            (1, 16, 40, [16, 16], [16, 16], [1, 1], [0, 4]),
        ];
        for (t, &(c, h, w, k, s, d, pad)) in cases.iter().enumerate() {
            let oh = (h + 2 * pad[0] - d[0] * (k[0] - 1) - 1) / s[0] + 1;
            let ow = (w + 2 * pad[1] - d[1] * (k[1] - 1) - 1) / s[1] + 1;
            let x: Vec<f32> = (0..c * h * w).map(|i| i as f32 - 60.5).collect();
            let b = Im2col { x: &x, h, w, ow, k, s, d, pad, evens: simd::Evens::detect() };
            let (kdim, n) = (c * k[0] * k[1], oh * ow);
            let want = |p: usize, j: usize| {
                let (ci, ky, kx) = (p / (k[0] * k[1]), p / k[1] % k[0], p % k[1]);
                let (oy, ox) = (j / ow, j % ow);
                let iy = (oy * s[0] + ky * d[0]).checked_sub(pad[0]).filter(|&v| v < h);
                let ix = (ox * s[1] + kx * d[1]).checked_sub(pad[1]).filter(|&v| v < w);
                match (iy, ix) {
                    (Some(iy), Some(ix)) => x[(ci * h + iy) * w + ix],
                    _ => 0.0,
                }
            };
            for nr in [32, 16, 8, 4] {
                for p0 in [0, 1, 4].into_iter().filter(|&p0| p0 < kdim) {
                    let kc = kdim - p0;
                    let mut out = vec![f32::NAN; kc * nr];
                    for j0 in (0..n).step_by(nr) {
                        let cols = nr.min(n - j0);
                        b.pack(p0, kc, j0, cols, nr, &mut out);
                        for p in 0..kc {
                            for col in 0..nr {
                                let e = if col < cols { want(p0 + p, j0 + col) } else { 0.0 };
                                let g = out[p * nr + col];
                                assert_eq!(g, e, "case {t} nr {nr} p {} j {}", p0 + p, j0 + col);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sconv_matches_exact_conv() {
        // ([N, C, M, groups], in HxW, kernel, stride, dilation, pads t/l/b/r)
        type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2], [usize; 4]);
        let cases: &[Case] = &[
            ([1, 3, 7, 1], [9, 11], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([2, 4, 5, 1], [6, 5], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([1, 4, 6, 2], [7, 7], [3, 2], [2, 1], [1, 2], [2, 0, 1, 1]),
            ([2, 6, 6, 6], [8, 9], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 5, 5, 5], [10, 7], [3, 3], [2, 2], [2, 1], [0, 2, 1, 0]),
            ([1, 2, 3, 1], [5, 20], [2, 3], [1, 3], [1, 1], [0, 1, 0, 2]),
            ([1, 17, 20, 1], [4, 4], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
            // Narrow depthwise planes (the staged kernel), odd pads, wide kernel.
            ([1, 3, 3, 3], [25, 5], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([2, 4, 4, 4], [6, 3], [2, 4], [1, 1], [1, 1], [0, 2, 1, 0]),
            ([1, 2, 2, 2], [5, 5], [3, 3], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([1, 2, 2, 2], [4, 2], [1, 3], [1, 1], [1, 1], [0, 0, 0, 3]),
            // im2col strips of whole runs (16 or 8 columns), strides 1 and 2.
            ([1, 3, 4, 1], [6, 34], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 3, 1], [5, 33], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 3, 5, 1], [16, 16], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 3, 1], [8, 8], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 2, 1], [4, 40], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([1, 2, 7, 1], [3, 48], [2, 5], [1, 1], [1, 2], [0, 3, 1, 2]),
            ([1, 2, 3, 1], [3, 2], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            // K = 288: blocks of k that start inside a kernel row.
            ([1, 32, 3, 1], [5, 18], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 3, 2, 1], [9, 3], [3, 3], [2, 2], [1, 1], [2, 2, 2, 2]),
            // Depthwise rows wider than a vector: interior and border vectors,
            // strides 1 and 2, odd widths, dilation, asymmetric pads.
            ([1, 3, 3, 3], [12, 37], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 2, 2], [9, 40], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 2, 2, 2], [7, 33], [5, 3], [1, 2], [1, 2], [2, 3, 1, 0]),
            ([1, 2, 2, 2], [6, 50], [3, 3], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([2, 2, 2, 2], [8, 19], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([1, 2, 2, 2], [5, 21], [3, 4], [3, 2], [1, 1], [1, 2, 1, 2]),
            ([1, 2, 2, 2], [4, 17], [2, 2], [1, 3], [2, 1], [1, 1, 0, 2]),
            ([1, 4, 4, 4], [16, 16], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 3, 3, 3], [1, 9], [1, 9], [1, 1], [1, 1], [0, 4, 0, 4]),
            // Strided convolutions of more channels (odd sizes, 7x7 and 5x5
            // kernels, stride 3, dilation 2, asymmetric pads, batch 2).
            ([2, 24, 9, 1], [7, 9], [3, 3], [2, 2], [1, 1], [1, 0, 2, 1]),
            ([1, 3, 10, 1], [21, 29], [7, 7], [2, 2], [1, 1], [3, 3, 3, 2]),
            ([2, 30, 8, 1], [7, 9], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([1, 20, 6, 1], [11, 13], [3, 3], [2, 2], [2, 2], [2, 1, 2, 2]),
            ([1, 16, 5, 1], [13, 14], [5, 5], [3, 3], [1, 1], [2, 2, 1, 0]),
        ];
        for (t, &([n, c, m, g], ind, k, s, d, pads)) in cases.iter().enumerate() {
            let out: [usize; 2] = core::array::from_fn(|i| {
                (ind[i] + pads[i] + pads[i + 2] - d[i] * (k[i] - 1) - 1) / s[i] + 1
            });
            let (pb, pe) = ([pads[0], pads[1]], [pads[2], pads[3]]);
            let window = Window {
                in_dims: &ind,
                out_dims: &out,
                kernel: &k,
                strides: &s,
                dilations: &d,
                pads_begin: &pb,
                pads_end: &pe,
            };
            let p = Conv { batch: n, in_channels: c, out_channels: m, groups: g, window };
            let xl = n * c * ind[0] * ind[1];
            let wl = m * (c / g) * k[0] * k[1];
            let yl = n * m * out[0] * out[1];
            let (x, w, b) = (values(xl, 1), values(wl, 2), values(m, 3));
            let (mut want, mut got) = ([0.0f32; 4096], [0.0f32; 4096]);
            for act in [
                Activation::None,
                Activation::Relu,
                Activation::LeakyRelu { alpha: 0.125 },
                Activation::Clip { min: -0.5, max: 0.25 },
            ] {
                conv(&p, &x[..xl], &w[..wl], Some(&b[..m]), &mut want[..yl]).unwrap();
                act.apply_all(&mut want[..yl]);
                sconv(
                    &p,
                    &x[..xl],
                    ConvWeights::Dense(&w[..wl]),
                    Some(&b[..m]),
                    &mut got[..yl],
                    &Post::act(act),
                )
                .unwrap();
                for (i, (g, e)) in got[..yl].iter().zip(&want[..yl]).enumerate() {
                    assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "case {t} [{i}]: {g} vs {e}");
                }
                // With a residual (grouped and depthwise: after the kernel).
                let r = values(yl, 7);
                conv(&p, &x[..xl], &w[..wl], Some(&b[..m]), &mut want[..yl]).unwrap();
                for (v, q) in want[..yl].iter_mut().zip(&r[..yl]) {
                    *v = act.apply(*v + q);
                }
                let post = Post { residual: Some(&r[..yl]), ..Post::act(act) };
                sconv_fused(&p, &x[..xl], &w[..wl], Some(&b[..m]), &mut got[..yl], &post).unwrap();
                for (i, (g, e)) in got[..yl].iter().zip(&want[..yl]).enumerate() {
                    assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "case {t} [{i}]: {g} vs {e}");
                }
                let short = Post { residual: Some(&r[..yl - 1]), ..post };
                let e = sconv_fused(&p, &x[..xl], &w[..wl], None, &mut got[..yl], &short);
                assert_eq!(e, Err(Error::ShapeMismatch));
                // With SiLU after the activation (depthwise: per block of planes).
                conv(&p, &x[..xl], &w[..wl], Some(&b[..m]), &mut want[..yl]).unwrap();
                for v in &mut want[..yl] {
                    *v = crate::gemm::Smooth::Silu.apply(act.apply(*v));
                }
                let post = Post { smooth: Some(crate::gemm::Smooth::Silu), ..Post::act(act) };
                sconv_fused(&p, &x[..xl], &w[..wl], Some(&b[..m]), &mut got[..yl], &post).unwrap();
                for (i, (g, e)) in got[..yl].iter().zip(&want[..yl]).enumerate() {
                    assert!((g - e).abs() <= 1e-5 * (1.0 + e.abs()), "case {t} [{i}]: {g} vs {e}");
                }
            }
            assert_eq!(
                sconv(
                    &p,
                    &x[..xl - 1],
                    ConvWeights::Dense(&w[..wl]),
                    None,
                    &mut got[..yl],
                    &Post::act(Activation::None)
                ),
                Err(Error::ShapeMismatch)
            );
        }
    }

    #[test]
    fn packed_weights_are_panels_of_eight_filters() {
        // 10 filters of 3 taps: w(i, p) = 10 * i + p + 1.
        let w: [f32; 30] = core::array::from_fn(|j| (10 * (j / 3) + j % 3 + 1) as f32);
        assert_eq!(packed_weights_len(10, 3), Some(48));
        let mut out = [f32::NAN; 48];
        pack_conv_weights(10, 3, &w, &mut out).unwrap();
        for i in 0..16 {
            for p in 0..3 {
                let want = if i < 10 { (10 * i + p + 1) as f32 } else { 0.0 };
                assert_eq!(out[(i / 8) * 24 + p * 8 + i % 8], want, "({i}, {p})");
            }
        }
        assert_eq!(pack_conv_weights(10, 3, &w[..29], &mut out), Err(Error::ShapeMismatch));
        assert_eq!(pack_conv_weights(10, 3, &w, &mut out[..47]), Err(Error::ShapeMismatch));
        assert_eq!(packed_weights_len(usize::MAX, 2), None);
    }

    #[test]
    fn sconv_packed_matches_exact_conv() {
        use std::vec::Vec;
        // ([N, C, M], in HxW, kernel, stride, dilation, pads t/l/b/r)
        type Case = ([usize; 3], [usize; 2], [usize; 2], [usize; 2], [usize; 2], [usize; 4]);
        let cases: &[Case] = &[
            // M not a multiple of 8 (and of 6 and 4), odd K, padding.
            ([1, 3, 7], [9, 11], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([2, 4, 13], [6, 5], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([1, 5, 9], [10, 7], [3, 3], [2, 2], [2, 1], [0, 2, 1, 0]),
            ([1, 1, 1], [5, 20], [2, 3], [1, 3], [1, 1], [0, 1, 0, 2]),
            ([1, 1, 3], [7, 9], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            // K past one block of k (297 and 400), M past a panel boundary.
            ([1, 33, 19], [6, 18], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 16, 40], [9, 9], [5, 5], [2, 2], [1, 1], [2, 2, 2, 2]),
            ([2, 40, 17], [7, 7], [3, 3], [1, 1], [1, 1], [0, 1, 2, 1]),
            // Pointwise with stride 2, and stride 1 over many columns.
            ([1, 17, 20], [4, 4], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([1, 31, 11], [13, 37], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([2, 24, 70], [15, 41], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([1, 9, 5], [7, 20], [1, 1], [3, 2], [2, 1], [0, 0, 0, 0]),
            // Wide rows with many channels (several bands of the direct path).
            ([1, 24, 10], [20, 70], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 16], [14, 14], [5, 5], [1, 1], [1, 1], [0, 0, 0, 0]),
        ];
        for (t, &([n, c, m], ind, k, s, d, pads)) in cases.iter().enumerate() {
            let out: [usize; 2] = core::array::from_fn(|i| {
                (ind[i] + pads[i] + pads[i + 2] - d[i] * (k[i] - 1) - 1) / s[i] + 1
            });
            let (pb, pe) = ([pads[0], pads[1]], [pads[2], pads[3]]);
            let window = Window {
                in_dims: &ind,
                out_dims: &out,
                kernel: &k,
                strides: &s,
                dilations: &d,
                pads_begin: &pb,
                pads_end: &pe,
            };
            let p = Conv { batch: n, in_channels: c, out_channels: m, groups: 1, window };
            let kd = c * k[0] * k[1];
            let (xl, wl, yl) = (n * c * ind[0] * ind[1], m * kd, n * m * out[0] * out[1]);
            let values_of = |len: usize, seed: u32| -> Vec<f32> {
                let mut v = vec![0.0f32; len];
                crate::simd::tests::fill(&mut v, seed);
                v
            };
            let (x, w, b) = (values_of(xl, 1 + t as u32), values_of(wl, 2), values_of(m, 3));
            let mut packed = vec![f32::NAN; packed_weights_len(m, kd).unwrap()];
            pack_conv_weights(m, kd, &w, &mut packed).unwrap();
            let (mut want, mut got) = (vec![0.0f32; yl], vec![0.0f32; yl]);
            let acts = [
                Activation::None,
                Activation::Relu,
                Activation::LeakyRelu { alpha: 0.125 },
                Activation::Clip { min: -0.5, max: 0.25 },
            ];
            for (i, act) in acts.into_iter().enumerate() {
                let bias = (i % 2 == 1).then_some(&b[..]);
                conv(&p, &x, &w, bias, &mut want).unwrap();
                act.apply_all(&mut want);
                got.fill(f32::NAN);
                sconv(&p, &x, ConvWeights::Panels(&packed), bias, &mut got, &Post::act(act))
                    .unwrap();
                let tol = 4.0 * kd as f32 * f32::EPSILON;
                for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= tol * (1.0 + e.abs()), "case {t} [{j}]: {g} vs {e}");
                }
                // A residual added after the bias, before the activation
                // (then GELU on one case): packed, unpacked, and against the
                // exact conv followed by the separate steps.
                let r = values_of(yl, 4 + i as u32);
                let smooth = (i == 2).then_some(crate::gemm::Smooth::Gelu);
                let post = Post { residual: Some(&r), act, smooth };
                conv(&p, &x, &w, bias, &mut want).unwrap();
                for (v, q) in want.iter_mut().zip(&r) {
                    *v = act.apply(*v + q);
                    *v = smooth.map_or(*v, |s| s.apply(*v));
                }
                let mut again = vec![0.0f32; yl];
                sconv_packed_fused(&p, &x, &packed, bias, &mut got, &post).unwrap();
                sconv_fused(&p, &x, &w, bias, &mut again, &post).unwrap();
                for (j, (g, e)) in got.iter().zip(&want).enumerate() {
                    assert!((g - e).abs() <= tol * (1.0 + e.abs()), "case {t} [{j}]: {g} vs {e}");
                    assert!((again[j] - e).abs() <= tol * (1.0 + e.abs()), "case {t} [{j}]");
                }
                // The fused residual is the tile's epilogue on the same sums
                // as the unfused implicit GEMM: bit-identical where both take
                // that path (pointwise; the direct kernel is not fused).
                if k == [1, 1] && s == [1, 1] {
                    let mut plain = vec![0.0f32; yl];
                    sconv(
                        &p,
                        &x,
                        ConvWeights::Panels(&packed),
                        bias,
                        &mut plain,
                        &Post::act(Activation::None),
                    )
                    .unwrap();
                    for (v, q) in plain.iter_mut().zip(&r) {
                        *v = act.apply(*v + q);
                        *v = smooth.map_or(*v, |s| s.apply(*v));
                    }
                    assert_eq!(got, plain, "case {t}");
                }
            }
            // The unpacked weights, or a short input: refused.
            let none = Activation::None;
            let short = sconv(&p, &x, ConvWeights::Panels(&w), None, &mut got, &Post::act(none));
            assert!(m % 8 == 0 || short == Err(Error::ShapeMismatch), "case {t}");
            let short = sconv(
                &p,
                &x[..xl - 1],
                ConvWeights::Panels(&packed),
                None,
                &mut got,
                &Post::act(none),
            );
            assert_eq!(short, Err(Error::ShapeMismatch));
        }
        // Grouped or not 2-D: not this kernel's.
        let window = win(&[5], &[5], &[3], &[1], &[1], &[1]);
        let p = Conv { batch: 1, in_channels: 1, out_channels: 1, groups: 1, window };
        let mut y = [0.0f32; 5];
        let r = sconv(
            &p,
            &[0.0; 5],
            ConvWeights::Panels(&[0.0; 24]),
            None,
            &mut y,
            &Post::act(Activation::None),
        );
        assert_eq!(r, Err(Error::InvalidParams));
    }

    #[test]
    fn sconv_depthwise_non_finite() {
        // An infinite weight next to padding: the padded taps are skipped,
        // not multiplied (0 * inf would be NaN), as in the exact kernel; a
        // NaN input stays where its taps reach.
        let window = win(&[3, 11], &[3, 11], &[3, 3], &[1, 1], &[1, 1], &[1, 1]);
        let p = Conv { batch: 1, in_channels: 1, out_channels: 1, groups: 1, window };
        let mut x: [f32; 33] = core::array::from_fn(|i| i as f32 * 0.25 - 3.0);
        let mut w = [0.5f32; 9];
        w[0] = f32::INFINITY;
        let (mut want, mut got) = ([0.0f32; 33], [0.0f32; 33]);
        for _ in 0..2 {
            conv(&p, &x, &w, None, &mut want).unwrap();
            sconv(&p, &x, ConvWeights::Dense(&w), None, &mut got, &Post::act(Activation::Relu))
                .unwrap();
            Activation::Relu.apply_all(&mut want);
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let same =
                    g == e || (g.is_nan() && e.is_nan()) || (g - e).abs() <= 1e-5 * (1.0 + e.abs());
                assert!(same, "[{i}]: {g} vs {e}");
            }
            // SiLU after it, on the portable path too.
            let post =
                Post { smooth: Some(crate::gemm::Smooth::Silu), ..Post::act(Activation::Relu) };
            sconv_fused(&p, &x, &w, None, &mut got, &post).unwrap();
            for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                let e = crate::gemm::Smooth::Silu.apply(*e);
                let same = *g == e
                    || (g.is_nan() && e.is_nan())
                    || (g - e).abs() <= 1e-5 * (1.0 + e.abs());
                assert!(same, "silu [{i}]: {g} vs {e}");
            }
            w[0] = 0.5;
            x[17] = f32::NAN;
        }
    }
}
