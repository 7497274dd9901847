//! Direct (pack-free) 2-D convolution, pixels in the vector lanes, on the
//! AVX-512 and AVX2 micro-kernels (each ISA's tile in its own file).
//!
//! The implicit GEMM copies every input value into a packed strip once per
//! kernel tap; with few output channels each strip serves a tile or two and
//! the copy costs as much as the multiply-adds. Here the input of a band of
//! output rows is copied once, with its zero padding, into a stack buffer
//! laid out so that for every kernel tap `(c, ky, kx)` the inputs of
//! consecutive output pixels are contiguous: per channel, per row phase
//! `(ky * dy) % sy` and column phase `(kx * dx) % sx` that some tap uses,
//! rows of `lx` floats holding every `sx`-th padded input column. Row
//! `p = (c, ky, kx)` of the GEMM's B then starts at a fixed offset of that
//! buffer (a [`RowTable`]) plus the pixel's grid position, and the
//! micro-kernel reads it in place.
//!
//! Output pixel `(oy, ox)` of a band sits at grid position `oy * lx + ox`;
//! the grid columns from `ow` to `lx` are junk (windows running past the
//! row). Wide rows are tiled row by row and written straight to Y; rows of
//! at most half a tile can go two to a tile, one per half; otherwise tiles
//! run across the grid, through a tile on the stack, and only the real
//! columns are copied out. A second layout stages one shifted copy of each
//! input row per kernel column instead of per phase: `lx = ow`, no junk,
//! at `kw` times the staging. A cost model (tile cycles, staging, and for
//! im2col its packing) picks the layout and the band height, and tells
//! [`conv2d`]'s caller when the packed product is expected to be faster.
//!
//! Sums run over `k = (c, ky, kx)` in ascending order with fused
//! multiply-adds, as the GEMM paths of the same ISA do; taps in the padding add
//! `w * 0.0`, as the im2col strips do.

use crate::conv::{copy_any, copy_short};
use crate::simd::Vectorize;
use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Epilogue;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::MAX_MR;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::rows::{BTable, DstRuns, Runs};
use crate::simd::gemm::pack::ReadA;
use crate::simd::strip::Strip;

pub(in crate::simd) mod avx2;
pub(in crate::simd) mod avx512;

/// A micro-kernel the direct convolution runs on: tiles of [`Micro::MR`]
/// output channels by [`Micro::NR`] output pixels, two halves of `NR / 2`.
pub(in crate::simd) trait Direct: Micro {
    /// Cycles per step of `k` of a tile of more than `NR / 2` columns
    /// (bound by its FMAs).
    const FULL: usize;
    /// Cycles per step of `k` of a tile of at most `NR / 2` columns (bound
    /// by its loads).
    const HALF: usize;

    /// [`Micro::kernel`] with B's rows in a [`BTable`] and the columns in
    /// [`Runs`] of at most `NR / 2` (the third empty), the sums starting
    /// from zero. Returns `false`, doing nothing, when a bound does not
    /// hold.
    fn table_tile(self, t: Tile<'_, ARows<'_>, BTable<'_>, DstRuns<'_>>) -> bool;

    /// `dst[j] = src[2 * j]` for a prefix of `dst` (whole vectors whose
    /// sources lie in `src`); returns its length (0: no such path).
    fn evens(self, dst: &mut [f32], src: &[f32]) -> usize;
}

/// Offsets of B's rows in a staged buffer, with their maximum, which the
/// micro-kernel checks once per tile instead of once per row.
pub(crate) struct RowTable<'a> {
    offs: &'a [u32],
    max: usize,
}

impl<'a> RowTable<'a> {
    /// The table of `offs`.
    pub(crate) fn new(offs: &'a [u32]) -> Self {
        let max = offs.iter().copied().max().unwrap_or(0) as usize;
        RowTable { offs, max }
    }

    /// The offsets.
    pub(crate) fn offs(&self) -> &'a [u32] {
        self.offs
    }

    /// The largest offset (every entry of [`RowTable::offs`] is at most this).
    pub(crate) fn max(&self) -> usize {
        self.max
    }
}

/// Floats of staged input (32 KiB, the size of a packed strip).
const STAGE: usize = 8192;
/// The largest `k` (`C * kh * kw`) with a table on the stack.
const MAX_K: usize = 2048;
/// Strides up to this many phases per axis.
const MAX_PHASES: usize = 8;
/// The most floats of any kernel's tile (`MR * NR`), and of its columns.
const MAX_TILE: usize = 8 * 32;
const MAX_NR: usize = 32;
/// The phases `(t * d) % s` some kernel offset `t < k` uses, in ascending
/// order, and the slot of each phase (`usize::MAX` when unused).
fn phases(
    k: usize,
    d: usize,
    s: usize,
) -> Option<(usize, [usize; MAX_PHASES], [usize; MAX_PHASES])> {
    if s == 0 || s > MAX_PHASES {
        return None;
    }
    let mut used = [false; MAX_PHASES];
    for t in 0..k.min(s) {
        used[t.checked_mul(d)? % s] = true;
    }
    let (mut list, mut slot, mut n) = ([0; MAX_PHASES], [usize::MAX; MAX_PHASES], 0);
    for (q, _) in used.iter().enumerate().filter(|(_, u)| **u) {
        list[n] = q;
        slot[q] = n;
        n += 1;
    }
    Some((n, list, slot))
}

/// How one convolution is staged and tiled.
struct Plan {
    /// Grid row length: `ow` plus the columns the kernel reaches past it.
    lx: usize,
    /// Staged rows per phase beyond the band's output rows.
    ey: usize,
    /// Output rows per band.
    rb: usize,
    /// Staged rows per phase block (`rb + ey`).
    ry: usize,
    /// Used row and column phases.
    nqy: usize,
    qy: [usize; MAX_PHASES],
    nqx: usize,
    qx: [usize; MAX_PHASES],
    /// Floats per staged channel.
    cs: usize,
    /// Whether the column slots are the kernel columns rather than phases.
    expand: bool,
}

#[cfg(test)]
std::thread_local! {
    /// Tests pin the column layout (and skip the comparison with im2col).
    static FORCE_LAYOUT: core::cell::Cell<Option<bool>> = const { core::cell::Cell::new(None) };
    /// Tests pin the tiling of every band.
    static FORCE_TILING: core::cell::Cell<Option<Tiling>> = const { core::cell::Cell::new(None) };
}

/// Cycles per step of `k` of one tile of `ncols` columns and `MR` rows
/// ([`Direct::FULL`] or [`Direct::HALF`]).
fn tile_cost<K: Direct>(ncols: usize) -> usize {
    if ncols > K::NR / 2 { K::FULL } else { K::HALF }
}

/// Cycles per step of `k` and block of `MR` rows for `n` consecutive
/// columns.
fn cols_cost<K: Direct>(n: usize) -> usize {
    n / K::NR * K::FULL + if n.is_multiple_of(K::NR) { 0 } else { tile_cost::<K>(n % K::NR) }
}

/// How the output pixels of a band are tiled.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Tiling {
    /// Each output row on its own, in tiles of up to 32.
    Rows,
    /// Two output rows (of at most `NR / 2`) per tile, one per half.
    Pairs,
    /// Tiles of `NR` across the grid, junk columns included.
    Grid,
}

/// Cycles a grid tile's copy to Y costs (through a tile on the stack, a
/// run per output row it touches) when the grid has junk columns.
const GRID_COPY: usize = 40;

/// The fastest tiling of a band of `rb` rows and its cost, for sums of `k`
/// steps.
fn band_cost<K: Direct>(rb: usize, ow: usize, lx: usize, k: usize) -> (Tiling, usize) {
    let rows = (Tiling::Rows, rb * cols_cost::<K>(ow));
    let n = (rb - 1) * lx + ow;
    // Spread over the steps of `k`, rounded up.
    let copy = if lx == ow { 0 } else { (n.div_ceil(K::NR) * GRID_COPY).div_ceil(k.max(1)) };
    let grid = (Tiling::Grid, cols_cost::<K>(n) + copy);
    let odd = if rb % 2 == 1 { tile_cost::<K>(ow) } else { 0 };
    let pairs = (Tiling::Pairs, rb / 2 * K::FULL + odd);
    let best = if grid.1 < rows.1 { grid } else { rows };
    if ow <= K::NR / 2 && pairs.1 < best.1 { pairs } else { best }
}

/// How many times dearer, against the FMAs, moving data (packing im2col
/// strips, staging rows) is on this core than on Zen 5, where the costs
/// below were measured: 3 on cores that run 512-bit operations as two
/// halves (Zen 4). Measured there: ResNet's 3 -> 64 7x7 stride-2 stem ran
/// at 88 GFLOP/s staged against 57-66 on im2col, while MobileNet's 3 -> 32
/// 3x3 stride-2 stem stayed faster on im2col (47 against 37), which the
/// costs with 3 both predict (with 1, both stay on im2col).
fn move_scale() -> usize {
    if crate::simd::isa::cpu::features() & crate::simd::isa::cpu::SPLIT512 != 0 { 3 } else { 1 }
}

/// What packing the im2col strips of `g` costs, in tenths of a cycle per
/// step of `k` (measured on Zen 5; see [`move_scale`] for other cores):
/// about 4 cycles per strip of `NR` columns and 4 per run of columns on one
/// output row (8 when the runs are not of the lengths the packer copies as
/// fixed-size vectors, 8, 16 or 32).
fn pack_cost<K: Direct>(g: &Geom2d) -> usize {
    let n = g.oh * g.ow;
    // Every strip starts a run, and so does every row start inside a strip.
    let inside = (1..g.oh).filter(|oy| !(oy * g.ow).is_multiple_of(K::NR)).count();
    let fixed = (g.ow.is_multiple_of(16) || g.ow == 8) && g.sx <= 2;
    let per_run = if fixed { 40 } else { 80 };
    n.div_ceil(K::NR) * (40 + per_run) + inside * per_run
}

impl Plan {
    /// The staging and tiling of a convolution of `cin` input and `m`
    /// output channels, or `None` when one output row's input does not fit
    /// the stage or, with `compare`, the im2col product is expected to be
    /// faster on a core whose moves cost `scale` times Zen 5's
    /// ([`move_scale`]).
    fn new<K: Direct>(
        g: &Geom2d,
        cin: usize,
        m: usize,
        compare: bool,
        scale: usize,
    ) -> Option<Plan> {
        if g.oh == 0 || g.ow == 0 {
            return None;
        }
        #[cfg(test)]
        if let Some(expand) = FORCE_LAYOUT.with(|f| f.get()) {
            return Plan::layout::<K>(g, cin, m, expand).map(|p| p.0);
        }
        let (plan, direct, staged) =
            match (Plan::layout::<K>(g, cin, m, false), Plan::layout::<K>(g, cin, m, true)) {
                (Some(a), Some(b)) => {
                    if b.1 < a.1 {
                        b
                    } else {
                        a
                    }
                }
                (a, b) => a.or(b)?,
            };
        // Against im2col (in tenths of a cycle): the same FMAs over
        // `oh * ow` columns, plus packing; 1x1 kernels pack as cheaply as
        // they stage. The moves are scaled for this core here only: the
        // plan itself is the one measured best on Zen 5.
        let k = cin.checked_mul(g.kh)?.checked_mul(g.kw)?;
        let n = g.oh.checked_mul(g.ow)?;
        let direct = direct.saturating_add(staged.saturating_mul(scale.saturating_sub(1)));
        let pack = pack_cost::<K>(g).checked_mul(scale)?;
        let im2col = (cols_cost::<K>(n) * m.div_ceil(K::MR) * 10 + pack).checked_mul(k)?;
        if compare && (g.kh * g.kw == 1 || direct >= im2col) {
            return None;
        }
        Some(plan)
    }

    /// The plan with the band height of least cost for one layout of the
    /// staged columns, and that cost in tenths of a cycle: the tiles' FMAs
    /// (a fifth more with column phases, whose rows are read at odd
    /// offsets), and for the staging about a third of a cycle per float and
    /// 8 per row; with that cost's staging part.
    /// Without `expand`, a slot per column phase `(kx * dx) % sx`, rows
    /// `lx = ow + (kw - 1) * dx / sx` long (junk columns in the grid);
    /// with it, a slot per kernel column, `ow` long: `kw` shifted copies,
    /// but the grid is the output plane (no junk, tiles written in place).
    fn layout<K: Direct>(
        g: &Geom2d,
        cin: usize,
        m: usize,
        expand: bool,
    ) -> Option<(Plan, usize, usize)> {
        let (nqy, qy, _) = phases(g.kh, g.dy, g.sy)?;
        let (nqx, qx, lx) = if expand {
            if g.kw > MAX_PHASES || g.kw == 1 {
                return None;
            }
            let mut qx = [0; MAX_PHASES];
            for (kx, q) in qx.iter_mut().enumerate().take(g.kw) {
                *q = kx.checked_mul(g.dx)?;
            }
            (g.kw, qx, g.ow)
        } else {
            let (nqx, qx, _) = phases(g.kw, g.dx, g.sx)?;
            (nqx, qx, g.ow.checked_add((g.kw - 1).checked_mul(g.dx)? / g.sx)?)
        };
        let ey = (g.kh - 1).checked_mul(g.dy)? / g.sy;
        // cin * nqy * nqx * lx * (rb + ey) <= STAGE
        let per_row = cin.checked_mul(nqy)?.checked_mul(nqx)?.checked_mul(lx)?;
        let max_ry = STAGE / per_row.max(1);
        if max_ry <= ey {
            return None;
        }
        let k = cin.checked_mul(g.kh)?.checked_mul(g.kw)?;
        let fma = k.checked_mul(m.div_ceil(K::MR))?.checked_mul(if g.sx == 1 { 10 } else { 12 })?;
        // Bands as even as possible; the tallest on ties, for less staging.
        let (mut best, mut best_cost, mut best_staged) = (0, usize::MAX, 0);
        for rb in (1..=(max_ry - ey).min(g.oh)).rev() {
            let bands = g.oh.div_ceil(rb);
            let rb = g.oh.div_ceil(bands);
            let (short, tall) = (g.oh / bands, bands - g.oh % bands);
            let mut tiles = band_cost::<K>(short, g.ow, lx, k).1 * tall;
            if tall < bands {
                tiles += band_cost::<K>(short + 1, g.ow, lx, k).1 * (bands - tall);
            }
            let rows = cin * nqy * nqx * (g.oh + bands * ey);
            let staged = rows * lx * 3 + rows * 80;
            let cost = tiles.saturating_mul(fma).saturating_add(staged);
            if cost < best_cost {
                (best, best_cost, best_staged) = (rb, cost, staged);
            }
        }
        let ry = best + ey;
        let cs = nqy * nqx * ry * lx;
        let plan = Plan { lx, ey, rb: best, ry, nqy, qy, nqx, qx, cs, expand };
        Some((plan, best_cost, best_staged))
    }

    /// Fills `offs[p]` for `p = (c, ky, kx)`: where B's row `p` starts in
    /// the staged buffer, for the band's first output pixel.
    fn table(&self, g: &Geom2d, cin: usize, offs: &mut [u32]) -> Option<()> {
        let (_, _, sy_slot) = phases(g.kh, g.dy, g.sy)?;
        let (_, _, sx_slot) = phases(g.kw, g.dx, g.sx)?;
        let block = self.ry * self.lx;
        let mut p = 0;
        for c in 0..cin {
            for ky in 0..g.kh {
                let ty = ky * g.dy;
                let by = *sy_slot.get(ty % g.sy)?;
                for kx in 0..g.kw {
                    let tx = kx * g.dx;
                    let (bx, shift) =
                        if self.expand { (kx, 0) } else { (*sx_slot.get(tx % g.sx)?, tx / g.sx) };
                    let at =
                        c * self.cs + (by * self.nqx + bx) * block + (ty / g.sy) * self.lx + shift;
                    *offs.get_mut(p)? = u32::try_from(at).ok()?;
                    p += 1;
                }
            }
        }
        Some(())
    }

    /// Stages the input rows of the band of `rb` output rows from `oy0`
    /// (compiled on its own: inlined into the AVX-512 body, its stride-1
    /// copies ran slower in ic_resnet8).
    #[allow(clippy::too_many_arguments)]
    fn stage<K: Direct>(
        &self,
        cpu: K,
        g: &Geom2d,
        x: &[f32],
        cin: usize,
        oy0: usize,
        rb: usize,
        buf: &mut [f32],
    ) {
        let (h, w, lx) = (g.h, g.w, self.lx);
        let block = self.ry * lx;
        for c in 0..cin {
            let plane = x.get(c * h * w..(c + 1) * h * w).unwrap_or(&[]);
            for (by, &qy) in self.qy[..self.nqy].iter().enumerate() {
                for i in 0..rb + self.ey {
                    let t = oy0 * g.sy + i * g.sy + qy;
                    let xrow = t
                        .checked_sub(g.pt)
                        .filter(|&iy| iy < h)
                        .and_then(|iy| plane.get(iy * w..(iy + 1) * w));
                    for (bx, &qx) in self.qx[..self.nqx].iter().enumerate() {
                        let at = c * self.cs + (by * self.nqx + bx) * block + i * lx;
                        let Some(dst) = buf.get_mut(at..at + lx) else { return };
                        match xrow {
                            Some(row) => stage_row(cpu, dst, row, qx, g.sx, g.pl),
                            None => zero(dst),
                        }
                    }
                }
            }
        }
    }
}

/// `dst[j]` = padded column `j * sx + qx` of `row` (input column minus
/// `pl`), zero in the padding.
#[inline(always)]
fn stage_row<K: Direct>(cpu: K, dst: &mut [f32], row: &[f32], qx: usize, sx: usize, pl: usize) {
    let lx = dst.len();
    let lo = pl.saturating_sub(qx).div_ceil(sx).min(lx);
    let hi = (row.len() + pl).saturating_sub(qx).div_ceil(sx).clamp(lo, lx);
    let (head, rest) = dst.split_at_mut(lo);
    let (mid, tail) = rest.split_at_mut(hi - lo);
    zero(head);
    zero(tail);
    if mid.is_empty() {
        return;
    }
    let start = lo * sx + qx - pl;
    match sx {
        1 => {
            if let Some(src) = row.get(start..start + mid.len()) {
                copy_any(mid, src);
            }
        }
        2 => {
            // Whole vectors in the kernel's code, then the rest one by one.
            let src = row.get(start..).unwrap_or(&[]);
            let done = cpu.evens(mid, src);
            let (_, rest) = mid.split_at_mut(done.min(mid.len()));
            for (d, s) in rest.iter_mut().zip(src.iter().skip(2 * done).step_by(2)) {
                *d = *s;
            }
        }
        _ => {
            for (d, s) in mid.iter_mut().zip(row.iter().skip(start).step_by(sx)) {
                *d = *s;
            }
        }
    }
}

/// `dst = 0` as fixed-size vector stores (the last one overlapping), not a
/// call: staged rows are short.
#[inline(always)]
fn zero(dst: &mut [f32]) {
    fn blocks<const N: usize>(dst: &mut [f32]) {
        let n = dst.len();
        let mut at = 0;
        while at < n {
            let from = at.min(n - N);
            if let Some(Ok(d)) = dst.get_mut(from..from + N).map(<&mut [f32; N]>::try_from) {
                *d = [0.0; N];
            }
            at += N;
        }
    }
    match dst.len() {
        16.. => blocks::<16>(dst),
        8..=15 => blocks::<8>(dst),
        4..=7 => blocks::<4>(dst),
        _ => {
            for v in dst {
                *v = 0.0;
            }
        }
    }
}

/// [`conv2d_with`] where it is expected to beat the im2col product.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv2d<K: Direct, A: ReadA>(
    cpu: K,
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    conv2d_with(cpu, g, cin, m, x, w, bias, act, y, true)
}

/// Convolves `x` (`cin` planes of `g.h x g.w`) with `w` (`m` filters of
/// `cin x g.kh x g.kw`) into `y` (`m` planes of `g.oh x g.ow`), adding
/// `bias` and applying `act`. Returns `false` when it does not apply (no
/// such kernel, a geometry the staging buffer cannot hold for one output row,
/// a shape mismatch, or with `compare`, a shape where the im2col product
/// is expected to be faster); `y` may then be partly written, and the
/// caller computes it another way.
#[allow(clippy::too_many_arguments)]
pub(in crate::simd) fn conv2d_with<K: Direct, A: ReadA>(
    cpu: K,
    g: &Geom2d,
    cin: usize,
    m: usize,
    x: &[f32],
    w: A,
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
    compare: bool,
) -> bool {
    let Some(k) = cin.checked_mul(g.kh).and_then(|v| v.checked_mul(g.kw)) else { return false };
    let sizes = [(cin, g.h * g.w, x.len()), (m, g.oh * g.ow, y.len())];
    if k == 0 || k > MAX_K || m == 0 || sizes.iter().any(|&(a, b, l)| a.checked_mul(b) != Some(l)) {
        return false;
    }
    if !w.fits(m, k) {
        return false;
    }
    let Some(plan) = Plan::new::<K>(g, cin, m, compare, move_scale()) else { return false };
    let mut offs = [0u32; MAX_K];
    if plan.table(g, cin, &mut offs[..k]).is_none() {
        return false;
    }
    let table = RowTable::new(&offs[..k]);
    let epi = Epilogue::bias_act(bias, act);
    cpu.run_body(Bands { cpu, g, plan: &plan, cin, m, k, x, w, table: &table, epi: &epi, y })
}

/// [`run`]'s arguments, as a body compiled for the kernel's ISA
/// ([`Micro::run_body`]).
struct Bands<'a, K, A> {
    cpu: K,
    g: &'a Geom2d,
    plan: &'a Plan,
    cin: usize,
    m: usize,
    k: usize,
    x: &'a [f32],
    w: A,
    table: &'a RowTable<'a>,
    epi: &'a Epilogue<'a>,
    y: &'a mut [f32],
}

impl<K: Direct, A: ReadA> Vectorize for Bands<'_, K, A> {
    type Output = bool;

    #[inline(always)]
    fn run(self) -> bool {
        let Bands { cpu, g, plan, cin, m, k, x, w, table, epi, y } = self;
        run(cpu, g, plan, cin, m, k, x, w, table, epi, y)
    }
}

/// The bands of [`conv2d`], compiled for the kernel's ISA.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn run<K: Direct, A: ReadA>(
    cpu: K,
    g: &Geom2d,
    plan: &Plan,
    cin: usize,
    m: usize,
    k: usize,
    x: &[f32],
    w: A,
    table: &RowTable<'_>,
    epi: &Epilogue<'_>,
    y: &mut [f32],
) -> bool {
    let (ow, lx, ohw) = (g.ow, plan.lx, g.oh * g.ow);
    let identity = epi.is_identity();
    let mut strip = Strip::<STAGE>::new();
    let mut oy0 = 0;
    while oy0 < g.oh {
        let rb = plan.rb.min(g.oh - oy0);
        let buf = strip.get(cin * plan.cs);
        plan.stage(cpu, g, x, cin, oy0, rb, buf);
        let buf: &[f32] = buf;
        let tile = |ir: usize, base: usize, dst: &mut [f32], ldd: usize, runs: Runs, j0: usize| {
            let nrows = K::MR.min(m - ir);
            let rows: [usize; MAX_MR] = core::array::from_fn(|r| w.row(ir + r.min(nrows - 1)));
            cpu.table_tile(Tile {
                kc: k,
                a: ARows { data: w.data(), rows: &rows[..K::MR], cs: w.cs() },
                b: BTable { data: buf, table, base },
                dst: DstRuns { data: dst, ldd, nrows, runs, load: false },
                tail: (!identity).then_some(Tail { epi, i0: ir, j0 }),
            })
        };
        let (tiling, _) = band_cost::<K>(rb, ow, lx, k);
        #[cfg(test)]
        let tiling = match FORCE_TILING.with(|f| f.get()) {
            Some(Tiling::Pairs) if ow > K::NR / 2 => tiling,
            Some(t) => t,
            None => tiling,
        };
        let grid = tiling == Tiling::Grid;
        if tiling == Tiling::Pairs {
            for oy in (0..rb).step_by(2) {
                let second = if oy + 1 < rb { ow } else { 0 };
                let at = (oy0 + oy) * ow;
                let runs = Runs { b: [0, lx, 0], d: [0, ow, 0], n: [ow, second, 0] };
                for ir in (0..m).step_by(K::MR) {
                    let Some(dst) = y.get_mut(ir * ohw + at..) else { return false };
                    if !tile(ir, oy * lx, dst, ohw, runs, at) {
                        return false;
                    }
                }
            }
        } else if grid && lx == ow {
            // The grid is the output plane: tiles go straight to Y.
            let at = oy0 * ow;
            for jt in (0..rb * ow).step_by(K::NR) {
                let ncols = K::NR.min(rb * ow - jt);
                for ir in (0..m).step_by(K::MR) {
                    let Some(dst) = y.get_mut(ir * ohw + at + jt..) else { return false };
                    if !tile(ir, jt, dst, ohw, Runs::split(ncols, K::NR / 2), at + jt) {
                        return false;
                    }
                }
            }
        } else if grid {
            let total = (rb - 1) * lx + ow;
            let mut tmp = [0.0f32; MAX_TILE];
            // Per tile, the runs of real columns: (tile column, offset in
            // an output plane, length).
            let mut runs = [(0usize, 0usize, 0usize); MAX_NR];
            let (mut oy, mut ox) = (0, 0);
            for jt in (0..total).step_by(K::NR) {
                let ncols = K::NR.min(total - jt);
                let (mut c, mut count) = (0, 0);
                while c < ncols {
                    let len = (ncols - c).min(lx - ox);
                    if ox < ow
                        && let Some(run) = runs.get_mut(count)
                    {
                        *run = (c, (oy0 + oy) * ow + ox, len.min(ow - ox));
                        count += 1;
                    }
                    c += len;
                    ox += len;
                    if ox == lx {
                        ox = 0;
                        oy += 1;
                    }
                }
                for ir in (0..m).step_by(K::MR) {
                    let split = Runs::split(ncols, K::NR / 2);
                    if !tile(ir, jt, &mut tmp, K::NR, split, 0) {
                        return false;
                    }
                    for &(c, at, n) in &runs[..count] {
                        for r in 0..K::MR.min(m - ir) {
                            let d = y.get_mut((ir + r) * ohw + at..(ir + r) * ohw + at + n);
                            if let (Some(d), Some(s)) =
                                (d, tmp.get(r * K::NR + c..r * K::NR + c + n))
                            {
                                copy_short(d, s);
                            }
                        }
                    }
                }
            }
        } else {
            for oy in 0..rb {
                for x0 in (0..ow).step_by(K::NR) {
                    let ncols = K::NR.min(ow - x0);
                    let at = (oy0 + oy) * ow + x0;
                    for ir in (0..m).step_by(K::MR) {
                        let Some(dst) = y.get_mut(ir * ohw + at..) else { return false };
                        if !tile(ir, oy * lx + x0, dst, ohw, Runs::split(ncols, K::NR / 2), at) {
                            return false;
                        }
                    }
                }
            }
        }
        oy0 += rb;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conv::{Conv, Window, conv};
    use crate::simd::isa::avx2::Avx2;
    use crate::simd::isa::avx512::Avx512;
    use std::vec::Vec;

    struct Rng(u32);

    impl Rng {
        fn next(&mut self) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 17;
            self.0 ^= self.0 << 5;
            self.0
        }

        fn below(&mut self, n: usize) -> usize {
            self.next() as usize % n
        }

        fn values(&mut self, n: usize) -> Vec<f32> {
            (0..n).map(|_| (self.next() % 2001) as f32 / 1000.0 - 1.0).collect()
        }
    }

    /// One case: `[cin, m, h, w]`, kernel, strides, dilations, pads
    /// top/left/bottom/right.
    type Case = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 4]);

    /// Runs [`conv2d`] and the exact [`conv`] on one case with every
    /// activation; `fits` says whether the direct path must take it (`None`:
    /// either way). Returns whether it did.
    fn check<K: Direct>(cpu: K, case: Case, fits: Option<bool>, rng: &mut Rng) -> bool {
        let ([cin, m, h, w], k, s, d, pads) = case;
        let out: [usize; 2] = core::array::from_fn(|i| {
            let dims = [h, w];
            (dims[i] + pads[i] + pads[i + 2] - d[i] * (k[i] - 1) - 1) / s[i] + 1
        });
        let ind = [h, w];
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
        let p = Conv { batch: 1, in_channels: cin, out_channels: m, groups: 1, window };
        let g = Geom2d::of(&p.window).unwrap();
        let x = rng.values(cin * h * w);
        let wt = rng.values(m * cin * k[0] * k[1]);
        let bias = rng.values(m);
        let yl = m * out[0] * out[1];
        // A bound on the rounding: the exact sums of the magnitudes.
        let (xa, wa): (Vec<f32>, Vec<f32>) =
            (x.iter().map(|v| v.abs()).collect(), wt.iter().map(|v| v.abs()).collect());
        let mut scale = vec![0.0f32; yl];
        conv(&p, &xa, &wa, None, &mut scale).unwrap();
        let kdim = (cin * k[0] * k[1]) as f32;
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.125 },
            Activation::Clip { min: -0.5, max: 0.25 },
        ];
        let mut any = false;
        for (i, act) in acts.into_iter().enumerate() {
            let b = (i % 2 == 1).then_some(&bias[..]);
            let mut want = vec![0.0f32; yl];
            conv(&p, &x, &wt, b, &mut want).unwrap();
            act.apply_all(&mut want);
            let tilings = [None, Some(Tiling::Rows), Some(Tiling::Pairs), Some(Tiling::Grid)];
            for (expand, tiling) in [false, true].into_iter().flat_map(|e| tilings.map(|t| (e, t)))
            {
                let mut got = vec![f32::NAN; yl];
                FORCE_LAYOUT.with(|f| f.set(Some(expand)));
                FORCE_TILING.with(|f| f.set(tiling));
                let kd = cin * k[0] * k[1];
                let view = crate::simd::gemm::pack::ViewA { data: &wt, off: 0, rs: kd, cs: 1 };
                let took = conv2d_with(cpu, &g, cin, m, &x, view, b, act, &mut got, false);
                // The same weights packed in panels: the same sums.
                let mut packed = vec![0.0f32; m.div_ceil(8) * 8 * kd];
                crate::conv::pack_conv_weights(m, kd, &wt, &mut packed).unwrap();
                let panels = crate::simd::gemm::pack::PanelA { data: &packed, k: kd };
                let mut again = vec![f32::NAN; yl];
                FORCE_LAYOUT.with(|f| f.set(Some(expand)));
                FORCE_TILING.with(|f| f.set(tiling));
                let took2 = conv2d_with(cpu, &g, cin, m, &x, panels, b, act, &mut again, false);
                assert_eq!(took, took2, "{case:?}");
                if took {
                    assert!(
                        got.iter().zip(&again).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{case:?} packed"
                    );
                }
                FORCE_LAYOUT.with(|f| f.set(None));
                FORCE_TILING.with(|f| f.set(None));
                if !expand {
                    assert!(fits.is_none_or(|f| f == took), "{case:?}: taken {took}");
                    any |= took;
                }
                if !took {
                    continue;
                }
                for (j, ((g, e), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                    let tol = 4.0 * kdim * f32::EPSILON * (s + 1.0);
                    assert!(
                        (g - e).abs() <= tol,
                        "{case:?} {act:?} expand {expand} {tiling:?} [{j}]: {g} vs {e}"
                    );
                }
            }
        }
        any
    }

    #[test]
    fn direct_conv_matches_exact_conv() {
        if let Some(cpu) = crate::simd::tests::avx512() {
            matches_exact_conv(cpu);
        }
        if let Some(cpu) = crate::simd::tests::avx2() {
            matches_exact_conv(cpu);
        }
    }

    /// [`check`] on the models' shapes, awkward ones and random ones.
    fn matches_exact_conv<K: Direct>(cpu: K) {
        let mut rng = Rng(0x1234_5678);
        let cases: &[Case] = &[
            // The models' shapes: 3x3 pad 1 stride 1 and 2, 1x1 stride 2,
            // 5x5 with and without pads, a wide stride-2 first layer.
            ([16, 16, 32, 32], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([16, 32, 32, 32], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([16, 32, 32, 32], [1, 1], [2, 2], [1, 1], [0, 0, 0, 0]),
            ([32, 20, 16, 16], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([40, 9, 8, 8], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([1, 6, 28, 28], [5, 5], [1, 1], [1, 1], [2, 2, 2, 2]),
            ([6, 16, 14, 14], [5, 5], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([3, 8, 40, 41], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            ([1, 17, 25, 10], [10, 4], [2, 2], [1, 1], [4, 1, 5, 2]),
            // Odd widths below and above a tile, asymmetric pads, 1x3 and 3x1.
            ([5, 3, 7, 33], [1, 3], [1, 1], [1, 1], [0, 2, 0, 1]),
            ([7, 11, 9, 31], [3, 1], [1, 1], [1, 1], [2, 0, 1, 0]),
            ([2, 1, 11, 65], [3, 3], [2, 1], [1, 1], [0, 1, 2, 0]),
            ([3, 40, 5, 3], [3, 3], [1, 2], [1, 1], [1, 2, 1, 2]),
            ([4, 5, 13, 17], [5, 5], [2, 2], [1, 1], [2, 1, 0, 2]),
            ([2, 3, 12, 19], [3, 3], [3, 3], [2, 2], [1, 1, 1, 1]),
            ([1, 1, 1, 1], [1, 1], [1, 1], [1, 1], [0, 0, 0, 0]),
            ([1, 2, 1, 40], [1, 5], [1, 2], [1, 1], [0, 0, 0, 3]),
            ([9, 7, 30, 2], [3, 2], [1, 1], [1, 1], [1, 0, 1, 1]),
            // Several bands: many channels of wide rows.
            ([24, 10, 20, 70], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]),
            ([12, 3, 12, 90], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
            // Stride-2 rows staged in runs of several 32-float blocks.
            ([3, 8, 5, 230], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),
        ];
        for &case in cases {
            check(cpu, case, Some(true), &mut rng);
        }
        // Random shapes: channels 1..40, widths 1..40, kernels up to 5x5,
        // strides 1..3, dilations 1..2, pads 0..2 on each side.
        let mut taken = 0;
        for _ in 0..50 {
            let k = [1 + rng.below(5), 1 + rng.below(5)];
            let d = [1 + rng.below(2), 1 + rng.below(2)];
            let s = [1 + rng.below(3), 1 + rng.below(3)];
            let pads = [rng.below(3), rng.below(3), rng.below(3), rng.below(3)];
            let h =
                (d[0] * (k[0] - 1) + 1).saturating_sub(pads[0] + pads[2]).max(1) + rng.below(12);
            let w =
                (d[1] * (k[1] - 1) + 1).saturating_sub(pads[1] + pads[3]).max(1) + rng.below(40);
            let (cin, m) = (1 + rng.below(40), 1 + rng.below(40));
            taken += usize::from(check(cpu, ([cin, m, h, w], k, s, d, pads), None, &mut rng));
        }
        assert!(taken >= 35, "{taken} of 50 random shapes ran direct");
        // Too much input for one output row, or too long a `k`: refused.
        check(cpu, ([200, 2, 3, 60], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]), Some(false), &mut rng);
        check(cpu, ([300, 2, 3, 3], [3, 3], [1, 1], [1, 1], [1, 1, 1, 1]), Some(false), &mut rng);
    }

    #[test]
    fn direct_path_taken_where_packing_dominates() {
        // `[cin, m, h, w, k, s, pad]` and whether the direct path is chosen:
        // AVX-512 on Zen 5 and on cores where moves cost more (`move_scale`
        // 3), and AVX2 (`move_scale` 1). The cost model is arithmetic: every
        // column is checked on any CPU. AVX2 measured on Zen 3 (fastest of
        // 300 runs, im2col -> direct): ResNet-8's 3 -> 16 0.033 -> 0.025 ms
        // and 16 -> 16 0.141 -> 0.074, LeNet's 1 -> 6 0.018 -> 0.010 and
        // 6 -> 16 0.025 -> 0.012.
        let shapes = [
            ([3, 16, 32, 32, 3, 1, 1], [true, true, true]),
            ([16, 16, 32, 32, 3, 1, 1], [true, true, true]),
            ([1, 6, 28, 28, 5, 1, 2], [true, true, true]),
            // FIXME: true at both costs until the grid's copy was costed
            // (f29d977, measured on Zen 4 only); at Zen 5's costs the
            // model has since kept it on im2col, unmeasured there.
            ([3, 8, 96, 96, 3, 2, 1], [false, true, true]),
            ([32, 32, 16, 16, 3, 1, 1], [true, true, true]),
            ([6, 16, 14, 14, 5, 1, 0], [true, true, true]),
            ([16, 32, 32, 32, 3, 2, 1], [false, false, false]),
            ([32, 64, 16, 16, 3, 2, 1], [false, false, false]),
            // Zen 4: 75.9 GFLOP/s staged against 72.7 on im2col.
            ([64, 64, 8, 8, 3, 1, 1], [false, true, true]),
            ([16, 32, 32, 32, 1, 2, 0], [false, false, false]),
            // ResNet's stem; MobileNet's stays on im2col everywhere.
            ([3, 64, 224, 224, 7, 2, 3], [false, true, false]),
            ([3, 32, 224, 224, 3, 2, 1], [false, false, false]),
        ];
        for ([cin, m, h, w, k, s, pad], want) in shapes {
            let o = |n: usize| (n + 2 * pad - k) / s + 1;
            let g = Geom2d {
                h,
                w,
                oh: o(h),
                ow: o(w),
                kh: k,
                kw: k,
                sy: s,
                sx: s,
                dy: 1,
                dx: 1,
                pt: pad,
                pl: pad,
            };
            for (want, scale) in want[..2].iter().zip([1, 3]) {
                let got = Plan::new::<Avx512>(&g, cin, m, true, scale).is_some();
                assert_eq!(got, *want, "AVX-512 {cin} -> {m}, {h}x{w}, moves x{scale}");
                assert!(Plan::new::<Avx512>(&g, cin, m, false, scale).is_some());
            }
            let got = Plan::new::<Avx2>(&g, cin, m, true, 1).is_some();
            assert_eq!(got, want[2], "AVX2 {cin} -> {m}, {h}x{w}");
        }
    }

    #[test]
    fn row_tables_know_their_maximum() {
        let offs = [3u32, 90, 7, 0];
        let t = RowTable::new(&offs);
        assert_eq!((t.max(), t.offs().len()), (90, 4));
        assert_eq!(RowTable::new(&[]).max(), 0);
    }
}
