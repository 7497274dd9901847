//! The aarch64 NEON micro-kernel: up to 8 rows x 12 columns of f32 sums in
//! twenty-four `q` registers. Each step of `k` loads three vectors of B and
//! one scalar of A per row, and multiplies by that scalar as a lane
//! (`fmla v.4s, v.4s, v.s[0]`), fused (one rounding per step).
//!
//! NEON is part of every aarch64 target this module is compiled for (the
//! `mod` line asks for `target_feature = "neon"` at compile time), so there
//! is no run-time detection: [`Neon::detect`] consults only the ISA cap
//! (`Isa::Portable` turns the kernel off). The kernel is instantiated for
//! every row count 1..=8 (no dropped rows on short products). B is always
//! a packed strip, zero past the last column, so the sums of a partial
//! strip need no mask:
//! only the loads and stores of the destination stop at the last column,
//! through a small stack buffer for the last partial vector of a row.
//!
//! The epilogue (alpha, per-row bias, `beta * C`, activation) is applied in
//! registers before the store, with the operations and order of
//! [`crate::simd::Epilogue::one`], so results match the row-wise epilogue bit for
//! bit.
//!
//! Soundness: the intrinsics need NEON, present by the compile-time target
//! feature; [`Micro::kernel`] checks every index the loop will read or
//! write before entering the unsafe code.

use crate::simd::Isa;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::gemm::epilogue::Fused;
use crate::simd::gemm::epilogue::FusedC;
use crate::simd::gemm::epilogue::Tail;
use crate::simd::gemm::epilogue::block_fits;
use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::micro::Micro;
use core::arch::aarch64::{
    float32x4_t, vaddq_f32, vaddvq_f32, vbslq_f32, vcgtq_f32, vcltq_f32, vdupq_n_f32, vfmaq_f32,
    vfmaq_n_f32, vld1q_f32, vld2q_f32, vmulq_n_f32, vst1q_f32,
};

/// The NEON kernel; a value exists only on targets with NEON (see the
/// module documentation).
#[derive(Clone, Copy)]
pub(crate) struct Neon {
    _private: (),
}

impl Neon {
    /// `Some` unless the ISA cap is [`Isa::Portable`]: this module is
    /// compiled only where NEON is a target feature, so the CPU has it.
    #[inline(always)]
    pub(crate) fn detect() -> Option<Neon> {
        (crate::simd::max_isa() > Isa::Portable).then_some(Neon { _private: () })
    }
}

const MR: usize = 8;
const NR: usize = 12;
/// Vectors of four lanes per tile row.
const V: usize = NR / 4;

impl Micro for Neon {
    const MR: usize = MR;
    const NR: usize = NR;
    const MC: usize = 128;
    const KC: usize = 256;

    #[inline]
    fn kernel(
        self,
        kc: usize,
        a: &[f32],
        rows: &[usize],
        cs: usize,
        b: &[f32],
        ldb: usize,
        dst: &mut [f32],
        ldd: usize,
        nrows: usize,
        ncols: usize,
        load: bool,
        tail: Option<Tail<'_>>,
    ) {
        debug_assert_eq!(rows.len(), MR, "NEON tile: one A row offset per tile row");
        let Ok(rows) = <&[usize; MR]>::try_from(rows) else { return };
        let (nrows, ncols) = (nrows.min(MR), ncols.min(NR));
        if nrows == 0 || ncols == 0 {
            return;
        }
        let fits = kc > 0
            && ldb == NR
            && kc.checked_mul(NR).is_some_and(|v| v <= b.len())
            && block_fits(dst, ldd, nrows, ncols);
        debug_assert!(
            fits,
            "NEON tile: kc {kc} > 0 steps of a packed B ({ldb} wide, {} floats), {nrows}x{ncols} \
             rows {ldd} apart within {}",
            b.len(),
            dst.len()
        );
        if !fits {
            return;
        }
        let Some(span) = (kc - 1).checked_mul(cs) else { return };
        let a_fits =
            rows[..nrows].iter().all(|&r| r.checked_add(span).is_some_and(|last| last < a.len()));
        debug_assert!(a_fits, "NEON tile: A rows + (kc - 1) * {cs} within {}", a.len());
        if !a_fits {
            return;
        }
        // A residual or a smooth activation: finished in memory.
        let fused = tail.as_ref().and_then(|t| {
            Fused::new(t, nrows, ncols).filter(|f| f.res.is_none() && t.epi.smooth.is_none())
        });
        let (epi, cdata) = match (&fused, &tail) {
            (Some(f), Some(t)) => (Some(f), t.epi.c.map_or(core::ptr::null(), |c| c.data.as_ptr())),
            _ => (None, core::ptr::null()),
        };
        let (a, b, d) = (a.as_ptr(), b.as_ptr(), dst.as_mut_ptr());
        // SAFETY: NEON is present (module invariant). For `r < nrows` and
        // `p < kc`, A is read at `rows[r] + p * cs <= rows[r] + span <
        // a.len()`; B at `p * 12 + 0..12 < kc * 12 <= b.len()`; the
        // destination at `r * ldd + c` for `c < ncols`, within `dst` by
        // `fits`; C, for `FusedC::Rows`, at `base + r * rs + c` for
        // `c < ncols`, within C by `Fused::new`.
        unsafe {
            match nrows {
                1 => kernel_rx12::<1>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                2 => kernel_rx12::<2>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                3 => kernel_rx12::<3>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                4 => kernel_rx12::<4>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                5 => kernel_rx12::<5>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                6 => kernel_rx12::<6>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                7 => kernel_rx12::<7>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
                _ => kernel_rx12::<8>(kc, a, rows, cs, b, d, ldd, ncols, load, epi, cdata),
            }
        }
        if fused.is_none() {
            finish(dst, ldd, nrows, ncols, tail);
        }
    }
}

/// Four lanes from `p`, or the first `n < 4` of them and zeros.
///
/// # Safety
/// `p..p + n.min(4)` is readable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn load_part(p: *const f32, n: usize) -> float32x4_t {
    // SAFETY: the caller's bound; `t` holds four floats.
    unsafe {
        if n >= 4 {
            vld1q_f32(p)
        } else {
            let mut t = [0.0f32; 4];
            core::ptr::copy_nonoverlapping(p, t.as_mut_ptr(), n);
            vld1q_f32(t.as_ptr())
        }
    }
}

/// Stores the first `n.min(4)` lanes of `x` at `p`.
///
/// # Safety
/// `p..p + n.min(4)` is writable.
#[target_feature(enable = "neon")]
#[inline]
unsafe fn store_part(p: *mut f32, x: float32x4_t, n: usize) {
    // SAFETY: the caller's bound; `t` holds four floats.
    unsafe {
        if n >= 4 {
            vst1q_f32(p, x);
        } else {
            let mut t = [0.0f32; 4];
            vst1q_f32(t.as_mut_ptr(), x);
            core::ptr::copy_nonoverlapping(t.as_ptr(), p, n);
        }
    }
}

/// `R` rows of [`Neon::kernel`]; the caller guarantees the bounds described
/// there for `r < R` and `c < ncols` (`1 <= ncols <= 12`), and for C at
/// `cdata` when `epi` has a `FusedC::Rows` term.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "neon")]
#[inline]
unsafe fn kernel_rx12<const R: usize>(
    kc: usize,
    a: *const f32,
    rows: &[usize; MR],
    cs: usize,
    b: *const f32,
    d: *mut f32,
    ldd: usize,
    ncols: usize,
    load: bool,
    epi: Option<&Fused>,
    cdata: *const f32,
) {
    let zero = vdupq_n_f32(0.0);
    let mut c: [[float32x4_t; V]; R] = [[zero; V]; R];
    // The vectors of a row that hold columns below `ncols`.
    let used = ncols.div_ceil(4);
    if load {
        for (r, row) in c.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate().take(used) {
                // SAFETY: columns `4 * v..ncols` (at most four) of row `r`
                // are in the destination.
                *x = unsafe { load_part(d.add(r * ldd + 4 * v), ncols - 4 * v) };
            }
        }
    }
    // SAFETY (whole loop): see the caller's bounds; `off` stays at or below
    // `span` while read, and `bp` at `b + p * 12` for `p <= kc`.
    unsafe {
        let ap: [*const f32; R] = core::array::from_fn(|r| a.add(rows[r]));
        let mut bp = b;
        let mut off = 0usize;
        for _ in 0..kc {
            let bv: [float32x4_t; V] = core::array::from_fn(|v| vld1q_f32(bp.add(4 * v)));
            for r in 0..R {
                let x = *ap[r].add(off);
                for v in 0..V {
                    c[r][v] = vfmaq_n_f32(c[r][v], bv[v], x);
                }
            }
            bp = bp.add(NR);
            off += cs;
        }
    }
    if let Some(f) = epi {
        for (r, row) in c.iter_mut().enumerate() {
            for (v, x) in row.iter_mut().enumerate().take(used) {
                let mut y = *x;
                if f.alpha != 1.0 {
                    y = vmulq_n_f32(y, f.alpha);
                }
                if let Some(bias) = &f.bias {
                    y = vaddq_f32(y, vdupq_n_f32(bias[r]));
                }
                match f.c {
                    FusedC::None => {}
                    FusedC::Rows { base, rs, beta } => {
                        // SAFETY: columns below `ncols` of row `r` of C,
                        // checked by `Fused::new`.
                        let cv =
                            unsafe { load_part(cdata.add(base + r * rs + 4 * v), ncols - 4 * v) };
                        y = vaddq_f32(y, vmulq_n_f32(cv, beta));
                    }
                    FusedC::PerRow(t) => y = vaddq_f32(y, vdupq_n_f32(t[r])),
                }
                *x = activate(y, f.act);
            }
        }
    }
    for (r, row) in c.iter().enumerate() {
        for (v, x) in row.iter().enumerate().take(used) {
            // SAFETY: as for the loads above.
            unsafe { store_part(d.add(r * ldd + 4 * v), *x, ncols - 4 * v) };
        }
    }
}

/// [`Activation::apply`] on four lanes: the same comparisons, as selects
/// (NaN compares false and passes through; `-0.0` is not below zero).
#[target_feature(enable = "neon")]
#[inline]
fn activate(x: float32x4_t, act: Activation) -> float32x4_t {
    match act {
        Activation::None => x,
        Activation::Relu => {
            let z = vdupq_n_f32(0.0);
            vbslq_f32(vcltq_f32(x, z), z, x)
        }
        Activation::LeakyRelu { alpha } => {
            vbslq_f32(vcltq_f32(x, vdupq_n_f32(0.0)), vmulq_n_f32(x, alpha), x)
        }
        Activation::Clip { min, max } => {
            let (lo, hi) = (vdupq_n_f32(min), vdupq_n_f32(max));
            let v = vbslq_f32(vcltq_f32(x, lo), lo, x);
            vbslq_f32(vcgtq_f32(v, hi), hi, v)
        }
    }
}

impl Neon {
    /// `out[j] = sum_p a[p] * b[j * cs + p]`: four columns at a time, each
    /// summed in eight lanes (a different summation order from the exact
    /// kernel). Every column lies within `b` (the caller's bound: a panic
    /// in debug builds, nothing done in release builds).
    pub(crate) fn dots(self, a: &[f32], b: &[f32], cs: usize, out: &mut [f32]) {
        let (k, n) = (a.len(), out.len());
        if k == 0 || n == 0 {
            return;
        }
        let last = (n - 1).checked_mul(cs).and_then(|v| v.checked_add(k));
        debug_assert!(last.is_some_and(|v| v <= b.len()), "dots: {n} columns of {k}, {cs} apart");
        if last.is_none_or(|v| v > b.len()) {
            return;
        }
        // SAFETY: NEON is present (module invariant); column `j < n` is read
        // at `j * cs + 0..k`, below `(n - 1) * cs + k <= b.len()`, and `a`
        // at `0..k`.
        unsafe { dots4(k, a.as_ptr(), b.as_ptr(), cs, out) }
    }
}

/// See [`Neon::dots`]; the caller guarantees the bounds described there.
#[target_feature(enable = "neon")]
unsafe fn dots4(k: usize, a: *const f32, b: *const f32, cs: usize, out: &mut [f32]) {
    const G: usize = 4;
    let zero = vdupq_n_f32(0.0);
    let full = k / 8;
    // The last `k % 8` steps: one vector of up to four, then up to four more.
    let (t0, t1) = ((k % 8).min(4), (k % 8).saturating_sub(4));
    let n = out.len();
    let mut j = 0;
    // SAFETY (both loops): reads stay within `a[..k]` and the columns
    // `b[j * cs..j * cs + k]`; the tail vectors read only their `t0` and
    // `t1` valid lanes.
    unsafe {
        while j + G <= n {
            let cols: [*const f32; G] = core::array::from_fn(|c| b.add((j + c) * cs));
            let mut acc = [[zero; 2]; G];
            for t in 0..full {
                let x0 = vld1q_f32(a.add(8 * t));
                let x1 = vld1q_f32(a.add(8 * t + 4));
                for c in 0..G {
                    acc[c][0] = vfmaq_f32(acc[c][0], x0, vld1q_f32(cols[c].add(8 * t)));
                    acc[c][1] = vfmaq_f32(acc[c][1], x1, vld1q_f32(cols[c].add(8 * t + 4)));
                }
            }
            if t0 > 0 {
                let x0 = load_part(a.add(8 * full), t0);
                for c in 0..G {
                    let w = load_part(cols[c].add(8 * full), t0);
                    acc[c][0] = vfmaq_f32(acc[c][0], x0, w);
                }
            }
            if t1 > 0 {
                let x1 = load_part(a.add(8 * full + 4), t1);
                for c in 0..G {
                    let w = load_part(cols[c].add(8 * full + 4), t1);
                    acc[c][1] = vfmaq_f32(acc[c][1], x1, w);
                }
            }
            for (o, s) in out[j..j + G].iter_mut().zip(acc) {
                *o = vaddvq_f32(vaddq_f32(s[0], s[1]));
            }
            j += G;
        }
        while j < n {
            let col = b.add(j * cs);
            let mut acc = [zero; 2];
            for t in 0..full {
                acc[0] = vfmaq_f32(acc[0], vld1q_f32(a.add(8 * t)), vld1q_f32(col.add(8 * t)));
                acc[1] =
                    vfmaq_f32(acc[1], vld1q_f32(a.add(8 * t + 4)), vld1q_f32(col.add(8 * t + 4)));
            }
            if t0 > 0 {
                let w = load_part(col.add(8 * full), t0);
                acc[0] = vfmaq_f32(acc[0], load_part(a.add(8 * full), t0), w);
            }
            if t1 > 0 {
                let w = load_part(col.add(8 * full + 4), t1);
                acc[1] = vfmaq_f32(acc[1], load_part(a.add(8 * full + 4), t1), w);
            }
            out[j] = vaddvq_f32(vaddq_f32(acc[0], acc[1]));
            j += 1;
        }
    }
}

/// The widest kernel row [`depthwise_plane`] handles (one lane range per
/// kernel column).
const DW_MAX_KW: usize = 16;

/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// on NEON, eight output columns (two vectors) at a time, with fused
/// multiply-adds in row-major tap order. Taps in padding rows are skipped;
/// taps in padding columns read zero (so the weights must be finite, which
/// the caller checks). Blocks whose taps all fall inside the row use plain
/// loads (`ld2` de-interleaves stride 2); border blocks copy their valid
/// lanes to a zeroed stack buffer. Returns `false`, writing nothing, when
/// the geometry is not handled here (a horizontal stride other than 1 or 2,
/// a kernel row wider than 16, sizes that do not fit the slices).
pub(crate) fn depthwise_plane(
    _cpu: Neon,
    g: &crate::simd::conv::depthwise::Geom2d,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) -> bool {
    const LIM: usize = 1 << 24;
    let dims = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pt, g.pl];
    // The index arithmetic below relies on products of two dims fitting.
    if usize::BITS < 64 || dims.iter().any(|&d| d >= LIM) {
        return false;
    }
    if !(1..=2).contains(&g.sx) || g.sy == 0 {
        return false;
    }
    if g.kh == 0 || g.kw == 0 || g.kw > DW_MAX_KW {
        return false;
    }
    // With every dim below 2^24, the products below stay far from overflow.
    if x.len() != g.h * g.w || y.len() != g.oh * g.ow || wk.len() != g.kh * g.kw {
        return false;
    }
    if g.ow == 0 || g.oh == 0 {
        return true;
    }
    let k3 = g.kh == 3 && g.kw == 3;
    // SAFETY: NEON is present (module invariant); the lengths were checked
    // above, and `dw_plane` keeps the bounds it documents.
    unsafe {
        match (g.sx, k3) {
            (1, true) => dw_plane::<1, true>(g, x, wk, bias, act, y),
            (1, false) => dw_plane::<1, false>(g, x, wk, bias, act, y),
            (_, true) => dw_plane::<2, true>(g, x, wk, bias, act, y),
            (_, false) => dw_plane::<2, false>(g, x, wk, bias, act, y),
        }
    }
    true
}

/// See [`depthwise_plane`], which checked `x.len() == h * w`,
/// `y.len() == oh * ow`, `wk.len() == kh * kw`, `kw <= 16` and every
/// dimension below 2^24. `S` is the horizontal stride, `K3` says the kernel
/// is 3x3 (its weights then stay in registers).
///
/// Unsafe accesses: a plain load of block `ox0` and kernel column `kx` in
/// input row `iy < h` reads columns `c0..c0 + 8 * S` with
/// `0 <= c0 = ox0 * S + kx * dx - pl` and `c0 + 8 * S <= w` (checked per
/// block), so inside row `iy`; stores write output row `oy < oh` at
/// columns `ox0..min(ox0 + 8, ow)`.
#[target_feature(enable = "neon")]
unsafe fn dw_plane<const S: usize, const K3: bool>(
    g: &crate::simd::conv::depthwise::Geom2d,
    x: &[f32],
    wk: &[f32],
    bias: f32,
    act: Activation,
    y: &mut [f32],
) {
    let (kh, kw) = if K3 { (3, 3) } else { (g.kh, g.kw) };
    let w = g.w as isize;
    let zero = vdupq_n_f32(0.0);
    let bv = vdupq_n_f32(bias);
    let mut w3 = [zero; 9];
    if K3 {
        for (v, &s) in w3.iter_mut().zip(wk) {
            *v = vdupq_n_f32(s);
        }
    }
    let (xp, yp) = (x.as_ptr(), y.as_mut_ptr());
    let mut ox0 = 0;
    while ox0 < g.ow {
        let col = (ox0 * S) as isize - g.pl as isize;
        // Per kernel column, the lanes `lo..hi` of this block whose input
        // column `c0 + l * S` lies inside the row (all eight inside it).
        let mut lanes = [(0usize, 0usize); DW_MAX_KW];
        for (kx, r) in lanes.iter_mut().enumerate().take(kw) {
            let c0 = col + (kx * g.dx) as isize;
            let s = S as isize;
            let lo = if c0 >= 0 { 0 } else { (-c0 + s - 1) / s };
            let hi = if c0 >= w { 0 } else { (w - c0 + s - 1) / s };
            *r = (lo.min(8) as usize, hi.min(8) as usize);
        }
        let full = (0..kw).all(|kx| {
            let c0 = col + (kx * g.dx) as isize;
            c0 >= 0 && c0 + 8 * S as isize <= w
        });
        let n = (g.ow - ox0).min(8);
        for oy in 0..g.oh {
            let mut acc = [zero; 2];
            for ky in 0..kh {
                let Some(iy) = (oy * g.sy + ky * g.dy).checked_sub(g.pt) else { continue };
                if iy >= g.h {
                    continue;
                }
                for kx in 0..kw {
                    let c0 = col + (kx * g.dx) as isize;
                    let v: [float32x4_t; 2] = if full {
                        // SAFETY: a plain load inside row `iy` (see above).
                        unsafe {
                            let p = xp.add(iy * g.w).offset(c0);
                            if S == 1 {
                                [vld1q_f32(p), vld1q_f32(p.add(4))]
                            } else {
                                [vld2q_f32(p).0, vld2q_f32(p.add(8)).0]
                            }
                        }
                    } else {
                        let (lo, hi) = lanes[kx];
                        let mut t = [0.0f32; 8];
                        let row = x.get(iy * g.w..(iy + 1) * g.w).unwrap_or(&[]);
                        for (l, v) in t.iter_mut().enumerate().take(hi).skip(lo) {
                            let ix = (c0 + (l * S) as isize) as usize;
                            *v = row.get(ix).copied().unwrap_or(0.0);
                        }
                        // SAFETY: `t` holds eight floats.
                        unsafe { [vld1q_f32(t.as_ptr()), vld1q_f32(t.as_ptr().add(4))] }
                    };
                    let wt = if K3 {
                        w3[ky * 3 + kx]
                    } else {
                        vdupq_n_f32(wk.get(ky * kw + kx).copied().unwrap_or(0.0))
                    };
                    acc[0] = vfmaq_f32(acc[0], v[0], wt);
                    acc[1] = vfmaq_f32(acc[1], v[1], wt);
                }
            }
            let out = [activate(vaddq_f32(acc[0], bv), act), activate(vaddq_f32(acc[1], bv), act)];
            // SAFETY: output row `oy < oh`, columns `ox0..ox0 + n` with
            // `ox0 + n <= ow`.
            unsafe {
                let p = yp.add(oy * g.ow + ox0);
                store_part(p, out[0], n);
                if n > 4 {
                    store_part(p.add(4), out[1], n - 4);
                }
            }
        }
        ox0 += 8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simd::gemm::epilogue::Epilogue;
    use crate::simd::gemm::epilogue::Tail;

    /// A tile whose operands are too short is left alone, whatever the
    /// lengths: the checks run before any unsafe read or write (and stop
    /// the test's calls in debug builds).
    #[test]
    fn short_operands_write_nothing() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let a = [1.0f32; 20];
        let b = [1.0f32; 12 * 4];
        let rows = [0usize, 4, 8, 12, 16, 16, 16, 16];
        let epi = Epilogue::NONE;
        let tail = Some(Tail { epi: &epi, i0: 0, j0: 0 });
        for (kc, cs, blen, dlen, ldb) in [
            (4, 1, 12 * 4, 8 * 12, 12),
            (5, 1, 12 * 4, 8 * 12, 12),
            (4, 2, 12 * 4, 8 * 12, 12),
            (4, 1, 12 * 3, 8 * 12, 12),
            (4, 1, 12 * 4, 7 * 12 + 11, 12),
            (4, 1, 12 * 4, 8 * 12, 11),
        ] {
            let mut d = [7.0f32; 8 * 12];
            let ok = kc == 4 && cs == 1 && blen == 48 && dlen == 96 && ldb == 12;
            let mut call = || {
                let (b, d) = (&b[..blen], &mut d[..dlen]);
                cpu.kernel(kc, &a, &rows, cs, b, ldb, d, 12, 8, 12, false, tail)
            };
            if ok {
                call()
            } else {
                crate::simd::tests::out_of_bounds(call)
            }
            assert_eq!(d.iter().all(|&v| v == 7.0), !ok, "kc {kc} cs {cs} b {blen} d {dlen}");
        }
    }

    /// Every row count and column count, with a destination that ends at
    /// the last element of the tile: the partial vectors write exactly
    /// `ncols` columns and read nothing past them.
    #[test]
    fn partial_tiles_stop_at_the_last_column() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let mut a = [0.0f32; 8 * 5];
        for (i, v) in a.iter_mut().enumerate() {
            *v = (i % 7) as f32 - 3.0;
        }
        let mut b = [0.0f32; 12 * 5];
        let rows: [usize; 8] = core::array::from_fn(|r| r * 5);
        for nrows in 1..=8 {
            for ncols in 1..=12 {
                for (p, row) in b.chunks_exact_mut(12).enumerate() {
                    for (c, v) in row.iter_mut().enumerate() {
                        *v = if c < ncols { (p * 3 + c) as f32 * 0.5 - 2.0 } else { 0.0 };
                    }
                }
                let ldd = 13;
                let len = (nrows - 1) * ldd + ncols;
                for load in [false, true] {
                    let mut d = [1.5f32; 8 * 13];
                    cpu.kernel(
                        5,
                        &a,
                        &rows,
                        1,
                        &b,
                        12,
                        &mut d[..len],
                        ldd,
                        nrows,
                        ncols,
                        load,
                        None,
                    );
                    for (i, &g) in d.iter().enumerate() {
                        let (r, c) = (i / ldd, i % ldd);
                        if r >= nrows || c >= ncols {
                            assert_eq!(g, 1.5, "{nrows}x{ncols} wrote ({r}, {c})");
                            continue;
                        }
                        let mut want = if load { 1.5f32 } else { 0.0 };
                        for p in 0..5 {
                            want += a[r * 5 + p] * b[p * 12 + c];
                        }
                        // Small integers and halves: every sum is exact.
                        assert_eq!(g, want, "{nrows}x{ncols} load {load} at ({r}, {c})");
                    }
                }
            }
        }
    }

    /// Dot products of every length 1..=40 against plain sums, with B
    /// ending at the last element of the last column and a gap between
    /// columns.
    #[test]
    fn dots_match_plain_sums() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        let mut a = [0.0f32; 40];
        let mut b = [0.0f32; 9 * 43];
        for (i, v) in a.iter_mut().enumerate() {
            *v = ((i * 7) % 11) as f32 / 4.0 - 1.25;
        }
        for (i, v) in b.iter_mut().enumerate() {
            *v = ((i * 5) % 13) as f32 / 8.0 - 0.75;
        }
        for k in 1..=40 {
            for n in 1..=9 {
                let cs = k + 3;
                let len = (n - 1) * cs + k;
                let mut out = [f32::NAN; 9];
                cpu.dots(&a[..k], &b[..len], cs, &mut out[..n]);
                for (j, &g) in out.iter().enumerate() {
                    if j >= n {
                        assert!(g.is_nan(), "k {k} n {n}: wrote {j}");
                        continue;
                    }
                    let want: f32 = (0..k).map(|p| a[p] * b[j * cs + p]).sum();
                    assert!(
                        (g - want).abs() <= 1e-5 * k as f32,
                        "k {k} n {n} at {j}: {g} vs {want}"
                    );
                }
                // One element short: nothing is written.
                let mut out = [f32::NAN; 9];
                let short = || cpu.dots(&a[..k], &b[..len - 1], cs, &mut out[..n]);
                crate::simd::tests::out_of_bounds(short);
                assert!(out.iter().all(|v| v.is_nan()));
            }
        }
    }

    /// The depthwise plane against a plain loop over every tap inside the
    /// input, on awkward geometries: widths around the 8-column block,
    /// strides 1 and 2, dilation, asymmetric pads, 3x3 and other kernels,
    /// every activation, values of both signs.
    #[test]
    fn depthwise_plane_matches_plain_taps() {
        let Some(cpu) = crate::simd::tests::neon() else { return };
        use crate::simd::conv::depthwise::Geom2d;
        let mut x = [0.0f32; 7 * 40];
        let mut wk = [0.0f32; 25];
        for (i, v) in x.iter_mut().enumerate() {
            *v = ((i * 37) % 29) as f32 / 8.0 - 1.75;
        }
        for (i, v) in wk.iter_mut().enumerate() {
            *v = ((i * 11) % 7) as f32 / 4.0 - 0.5;
        }
        let acts = [
            Activation::None,
            Activation::Relu,
            Activation::LeakyRelu { alpha: 0.25 },
            Activation::Clip { min: -1.0, max: 1.5 },
        ];
        let mut case = 0;
        for h in [1, 3, 7] {
            for w in [1, 2, 5, 8, 9, 16, 17, 23, 40] {
                for (kh, kw) in [(3, 3), (1, 1), (2, 5), (3, 1), (5, 3)] {
                    for (sy, sx) in [(1, 1), (2, 2), (1, 2), (3, 1)] {
                        for (dy, dx) in [(1, 1), (2, 2)] {
                            for (pt, pl, pb, pr) in [(0, 0, 0, 0), (1, 1, 1, 1), (2, 0, 1, 3)] {
                                let (eh, ew) = (h + pt + pb, w + pl + pr);
                                let (rh, rw) = (dy * (kh - 1) + 1, dx * (kw - 1) + 1);
                                if eh < rh || ew < rw {
                                    continue;
                                }
                                let (oh, ow) = ((eh - rh) / sy + 1, (ew - rw) / sx + 1);
                                let g = Geom2d { h, w, oh, ow, kh, kw, sy, sx, dy, dx, pt, pl };
                                case += 1;
                                let act = acts[case % 4];
                                let bias = 0.375 - (case % 3) as f32;
                                let mut y = [f32::NAN; 1024];
                                let ok = depthwise_plane(
                                    cpu,
                                    &g,
                                    &x[..h * w],
                                    &wk[..kh * kw],
                                    bias,
                                    act,
                                    &mut y[..oh * ow],
                                );
                                assert!(ok, "case {case}: {g:?} not handled");
                                assert!(y[oh * ow..].iter().all(|v| v.is_nan()));
                                for oy in 0..oh {
                                    for ox in 0..ow {
                                        let mut s = 0.0f32;
                                        for ky in 0..kh {
                                            for kx in 0..kw {
                                                let iy = (oy * sy + ky * dy).wrapping_sub(pt);
                                                let ix = (ox * sx + kx * dx).wrapping_sub(pl);
                                                if iy < h && ix < w {
                                                    s += wk[ky * kw + kx] * x[iy * w + ix];
                                                }
                                            }
                                        }
                                        let want = act.apply(s + bias);
                                        let got = y[oy * ow + ox];
                                        assert!(
                                            (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                                            "case {case} {g:?} {act:?} at ({oy}, {ox}): {got} vs {want}"
                                        );
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        // Stride 3 across, a kernel row wider than 16, or a short slice:
        // not handled, nothing written.
        let g = Geom2d {
            h: 2,
            w: 20,
            oh: 2,
            ow: 6,
            kh: 1,
            kw: 3,
            sy: 1,
            sx: 3,
            dy: 1,
            dx: 1,
            pt: 0,
            pl: 0,
        };
        let mut y = [f32::NAN; 12];
        assert!(!depthwise_plane(cpu, &g, &x[..40], &wk[..3], 0.0, Activation::None, &mut y));
        let g2 = Geom2d { sx: 1, ow: 18, ..g };
        let mut y2 = [f32::NAN; 36];
        assert!(!depthwise_plane(cpu, &g2, &x[..39], &wk[..3], 0.0, Activation::None, &mut y2));
        let g3 = Geom2d { kw: 17, w: 20, ow: 4, sx: 1, ..g };
        let mut y3 = [f32::NAN; 8];
        let wide = [0.5f32; 17];
        assert!(!depthwise_plane(cpu, &g3, &x[..40], &wide, 0.0, Activation::None, &mut y3));
        assert!(y.iter().chain(&y2).chain(&y3).all(|v| v.is_nan()));
    }
}
