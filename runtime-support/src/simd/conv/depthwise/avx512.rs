//! AVX-512 depthwise convolution: every plane of a depthwise layer in one
//! call, sixteen outputs per vector, taps read straight from the input with
//! masked loads (masked lanes are never accessed and read as zero), no
//! staging copy and no scalar tails. The bias and the fused activation are
//! applied before the (masked) store.
//!
//! Two loop shapes, each with unrolled 3x3 versions:
//! - *flat*: stride 1 with output rows as wide as input rows (the usual
//!   "same" padding). The plane is then one long row: output `j` reads its
//!   tap at input `j + const`, so vectors run over the whole plane without
//!   regard to row ends, and a narrow plane (25 x 5, 6 x 6, 3 x 3) fills
//!   every lane. A lane's tap is kept when its column and its row are
//!   inside the input (one mask per kernel column, one per kernel row).
//!   [`flat_slide`] (3x3, 5x5 and 7x7, no dilation across) loads each input
//!   vector once and shifts lanes for the kernel columns.
//! - *rows*: everything else with a horizontal stride of 1 or 2, sixteen
//!   outputs of one row per vector; stride 2 loads 32 inputs and keeps the
//!   even ones; [`rows_s2`] (3x3 and 5x5) takes the kernel columns from
//!   two loads by permutes and lane shifts, and [`rows2_s2`] puts two
//!   narrow output rows in a vector.
//!
//! Soundness rests on two things: an [`Avx512`] value exists only on a CPU
//! with AVX-512F, and [`depthwise`] checks the lengths of every slice and
//! that every coordinate fits an `i32` before the unsafe loops. Inside
//! them every load keeps only lanes whose input row and column lie inside
//! the plane, and every store keeps only lanes whose output lies inside the
//! output plane.

use crate::simd::conv::depthwise::Geom2d;
use crate::simd::gemm::epilogue::Activation;
use crate::simd::isa::avx512::{Avx512, lanes_between};
use core::arch::x86_64::{
    __m512, __m512i, __mmask16, _CMP_LT_OQ, _MM_HINT_T0, _mm_prefetch, _mm512_add_epi32,
    _mm512_add_ps, _mm512_alignr_epi32, _mm512_castps_si512, _mm512_castsi512_ps,
    _mm512_cmp_ps_mask, _mm512_cmpge_epi32_mask, _mm512_cmplt_epi32_mask, _mm512_cmplt_epu32_mask,
    _mm512_fmadd_ps, _mm512_mask_blend_ps, _mm512_mask_storeu_ps, _mm512_mask_sub_epi32,
    _mm512_mask3_fmadd_ps, _mm512_maskz_loadu_ps, _mm512_maskz_mul_ps,
    _mm512_maskz_permutex2var_ps, _mm512_max_ps, _mm512_min_ps, _mm512_mul_ps,
    _mm512_permutex2var_ps, _mm512_permutexvar_ps, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setr_epi32, _mm512_setzero_ps, _mm512_setzero_si512, _mm512_sub_epi32,
};

/// The widest kernel row handled (one column mask per kernel column).
const MAX_KW: usize = 16;
/// The tallest kernel handled (one row mask per kernel row).
const MAX_KH: usize = 16;

/// All the planes of a depthwise layer: plane `p` of `x` (`h x w`, planes
/// back to back) with the kernel and bias of channel `p % channels` gives
/// plane `p` of `y`:
/// `y[oy, ox] = act(bias + sum_{ky, kx} wk[ky, kx] * x[oy*sy + ky*dy - pt, ox*sx + kx*dx - pl])`
/// over the taps inside the input, fused multiply-adds in row-major tap
/// order. Returns `false`, writing nothing, when the geometry is not
/// handled here (a horizontal stride other than 1 or 2, a kernel wider or
/// taller than 16, sizes that do not match the slices or fit an `i32`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn depthwise(
    _cpu: Avx512,
    g: &Geom2d,
    channels: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    act: Activation,
    y: &mut [f32],
) -> bool {
    const LIM: usize = 1 << 24;
    let dims = [g.h, g.w, g.oh, g.ow, g.kh, g.kw, g.sy, g.sx, g.dy, g.dx, g.pt, g.pl];
    if dims.iter().any(|&d| d >= LIM) || !(1..=2).contains(&g.sx) || g.sy == 0 || channels == 0 {
        return false;
    }
    if g.kh == 0 || g.kw == 0 || g.kw > MAX_KW || g.kh > MAX_KH {
        return false;
    }
    // Every dim is below 2^24, so these products fit a u64; the plane
    // sizes must fit an i32 (positions and masks are computed in i32 lanes
    // or isize).
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    if hw >= LIM || n >= LIM || g.ow * g.sx + g.kw * g.dx + g.pl + g.w + 32 >= LIM {
        return false;
    }
    let Some(planes) = g.planes(channels, x, w, bias, y) else { return false };
    if planes == 0 {
        return true;
    }
    // The flat loop's row bounds, `(h + pt) * w` at most, are i32 lanes.
    let is_flat = g.sx == 1
        && g.sy == 1
        && g.ow == g.w
        && (g.h + g.pt + g.kh * g.dy) * g.w < i32::MAX as usize;
    let k3 = g.kh == 3 && g.kw == 3;
    let k5 = g.kh == 5 && g.kw == 5;
    let k7 = g.kh == 7 && g.kw == 7;
    // Two output rows of a stride-2 layer fit a vector ([`rows2_s2`]).
    let narrow = |k: usize| g.ow <= 8 && (g.w + g.pl).min(2 * g.ow.saturating_sub(1) + k) <= 16;
    let job = Job { g, channels, planes, w, bias, a: 0.0, b: 0.0 };
    let (x, y) = (x.as_ptr(), y.as_mut_ptr());
    macro_rules! run {
        ($f:ident, $($c:literal),*) => {
            // SAFETY: `_cpu` proves AVX-512F; the lengths were checked above
            // and the loops keep the bounds described in the module docs.
            unsafe {
                match act {
                    Activation::None => $f::<$($c,)* 0>(&job, x, y),
                    Activation::Relu => $f::<$($c,)* 1>(&job, x, y),
                    Activation::LeakyRelu { alpha } => {
                        $f::<$($c,)* 2>(&Job { a: alpha, ..job }, x, y)
                    }
                    Activation::Clip { min, max } => {
                        $f::<$($c,)* 3>(&Job { a: min, b: max, ..job }, x, y)
                    }
                }
            }
        };
    }
    match (is_flat, g.sx, k3) {
        (true, _, true) if g.dx == 1 => run!(flat_slide, 3),
        (true, _, false) if k5 && g.dx == 1 => run!(flat_slide, 5),
        (true, _, false) if k7 && g.dx == 1 => run!(flat_slide, 7),
        (true, _, true) => run!(flat3,),
        (true, _, false) => run!(flat,),
        (false, 1, true) => run!(rows, 1, true),
        (false, 1, false) => run!(rows, 1, false),
        (false, 2, true) if g.dx == 1 && narrow(3) => run!(rows2_s2, 3),
        (false, 2, true) if g.dx == 1 => run!(rows_s2, 3),
        (false, 2, false) if k5 && g.dx == 1 && narrow(5) => run!(rows2_s2, 5),
        (false, 2, false) if k5 && g.dx == 1 => run!(rows_s2, 5),
        (false, _, true) => run!(rows, 2, true),
        (false, _, false) => run!(rows, 2, false),
    }
    true
}

/// What the loops share: the geometry, the plane count, the weights and
/// biases per channel, and the activation's parameters.
#[derive(Clone, Copy)]
struct Job<'a> {
    g: &'a Geom2d,
    channels: usize,
    planes: usize,
    w: &'a [f32],
    bias: Option<&'a [f32]>,
    a: f32,
    b: f32,
}

impl Job<'_> {
    /// The kernel and bias of each plane in turn (channel `p % channels`
    /// for plane `p`, counted without a division). [`depthwise`] checked
    /// the weights' length: a kernel cut short (the loops then stop) is a
    /// bug, a panic in debug builds.
    #[inline(always)]
    fn kernels(&self) -> impl Iterator<Item = (&[f32], f32)> + '_ {
        let ks = self.g.kh * self.g.kw;
        let mut c = 0;
        (0..self.planes).map(move |_| {
            debug_assert!((c + 1) * ks <= self.w.len(), "depthwise: channel {c}'s {ks} taps");
            let wk = self.w.get(c * ks..(c + 1) * ks).unwrap_or(&[]);
            let b = self.bias.and_then(|b| b.get(c)).copied().unwrap_or(0.0);
            c += 1;
            if c == self.channels {
                c = 0;
            }
            (wk, b)
        })
    }
}

/// The fused activation of sixteen sums (`ACT`: 0 none, 1 Relu, 2
/// LeakyRelu with slope `a`, 3 Clip to `a..=b`), with the same comparisons
/// as [`Activation::apply`] (NaN passes through `Relu` and `Clip`).
#[inline]
#[target_feature(enable = "avx512f")]
fn activate<const ACT: u8>(v: __m512, a: f32, b: f32) -> __m512 {
    match ACT {
        0 => v,
        // max_ps(p, q) is `p > q ? p : q`: `0 > v ? 0 : v`.
        1 => _mm512_max_ps(_mm512_setzero_ps(), v),
        2 => {
            let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, _mm512_setzero_ps());
            _mm512_mask_blend_ps(neg, v, _mm512_mul_ps(v, _mm512_set1_ps(a)))
        }
        _ => _mm512_min_ps(_mm512_set1_ps(b), _mm512_max_ps(_mm512_set1_ps(a), v)),
    }
}

/// The kernel's taps as broadcasts when it is 3x3 (`K3`), so they stay in
/// registers across the plane.
#[inline]
#[target_feature(enable = "avx512f")]
fn weights3<const K3: bool>(wk: &[f32]) -> [__m512; 9] {
    let mut w3 = [_mm512_setzero_ps(); 9];
    if K3 {
        for (v, &s) in w3.iter_mut().zip(wk) {
            *v = _mm512_set1_ps(s);
        }
    }
    w3
}

/// A 3x3 kernel's taps as broadcasts, by kernel row; `None` when `wk` does
/// not hold nine.
#[inline]
#[target_feature(enable = "avx512f")]
fn taps3x3(wk: &[f32]) -> Option<[[__m512; 3]; 3]> {
    let taps = <&[f32; 9]>::try_from(wk).ok()?;
    Some(core::array::from_fn(|ky| core::array::from_fn(|kx| _mm512_set1_ps(taps[ky * 3 + kx]))))
}

/// The flat loop (see the module docs): stride 1, `ow == w`. Lane `l` of
/// the vector at `j0` is output `j = j0 + l`, at column `ox = j mod w`
/// (kept in `col`), reading tap `(ky, kx)` at input `j + (ky*dy - pt)*w +
/// kx*dx - pl` when `0 <= ox + kx*dx - pl < w` (the column mask) and
/// `0 <= oy + ky*dy - pt < h`, i.e. `(pt - ky*dy)*w <= j < (h + pt - ky*dy)*w`
/// (the row mask): that input is then `iy*w + ix` with both inside.
#[target_feature(enable = "avx512f")]
unsafe fn flat<const ACT: u8>(job: &Job<'_>, x: *const f32, y: *mut f32) {
    let g = job.g;
    let (h, w) = (g.h as isize, g.w as isize);
    let (kh, kw) = (g.kh, g.kw);
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    // Column bounds per kernel column: lanes with clo <= ox < chi.
    let mut clo = [_mm512_set1_epi32(0); MAX_KW];
    let mut chi = [_mm512_set1_epi32(0); MAX_KW];
    for kx in 0..kw {
        let shift = (kx * g.dx) as i32 - g.pl as i32;
        clo[kx] = _mm512_set1_epi32(-shift);
        chi[kx] = _mm512_set1_epi32(g.w as i32 - shift);
    }
    // Row bounds per kernel row, in outputs: rlo <= j < rhi; and the
    // offset of the tap row from the output.
    let mut rlo = [0isize; MAX_KH];
    let mut rhi = [0isize; MAX_KH];
    let mut roff = [0isize; MAX_KH];
    for ky in 0..kh {
        let shift = (ky * g.dy) as isize - g.pt as isize;
        rlo[ky] = -shift * w;
        rhi[ky] = (h - shift) * w;
        roff[ky] = shift * w - g.pl as isize;
    }
    let col0 = columns_of_lanes(g.w);
    let step = _mm512_set1_epi32((16 % g.w) as i32);
    let wv = _mm512_set1_epi32(g.w as i32);
    for (p, (wk, bias)) in job.kernels().enumerate() {
        if wk.len() != kh * kw {
            return;
        }
        let bv = _mm512_set1_ps(bias);
        let xp = x.wrapping_add(p * hw);
        let yp = y.wrapping_add(p * n);
        let mut col: __m512i = col0;
        let mut j0 = 0usize;
        while j0 < n {
            let mut cm = [0 as __mmask16; MAX_KW];
            for kx in 0..kw {
                cm[kx] =
                    _mm512_cmpge_epi32_mask(col, clo[kx]) & _mm512_cmplt_epi32_mask(col, chi[kx]);
            }
            let mut acc = _mm512_setzero_ps();
            let j = j0 as isize;
            for ky in 0..kh {
                let rm = lanes_between(rlo[ky] - j, rhi[ky] - j);
                if rm == 0 {
                    continue;
                }
                let row = xp.wrapping_offset(j + roff[ky]);
                for (kx, &c) in cm.iter().enumerate().take(kw) {
                    // SAFETY: the mask keeps lanes whose input row and
                    // column are inside the plane (see above).
                    let v = unsafe { _mm512_maskz_loadu_ps(rm & c, row.wrapping_add(kx * g.dx)) };
                    let wt = _mm512_set1_ps(wk.get(ky * kw + kx).copied().unwrap_or(0.0));
                    acc = _mm512_fmadd_ps(v, wt, acc);
                }
            }
            let out = activate::<ACT>(_mm512_add_ps(acc, bv), job.a, job.b);
            let keep = lanes_between(0, (n - j0) as isize);
            // SAFETY: the mask keeps outputs j0 + l < n of plane p.
            unsafe { _mm512_mask_storeu_ps(yp.wrapping_add(j0), keep, out) };
            col = _mm512_add_epi32(col, step);
            col = _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, wv), col, wv);
            j0 += 16;
        }
    }
}

/// [`flat`] for a 3x3 kernel, unrolled: the nine weights and the bounds
/// stay in registers, and the three kernel rows sum into separate
/// registers (shorter dependency chains), added at the end. A mask is one
/// unsigned compare: column mask of kernel column `kx`,
/// `ox - clo[kx] < w` (unsigned); row mask of kernel row `ky`,
/// `j - rlo[ky] < h*w`. Vectors whose sixteen outputs have every kernel row
/// inside the input (the plane's interior rows) skip the row masks.
#[target_feature(enable = "avx512f")]
unsafe fn flat3<const ACT: u8>(job: &Job<'_>, x: *const f32, y: *mut f32) {
    let g = job.g;
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    let (w, dx) = (g.w as i32, g.dx);
    let clo: [__m512i; 3] =
        core::array::from_fn(|kx| _mm512_set1_epi32(g.pl as i32 - (kx * g.dx) as i32));
    // In i32: depthwise checked (h + pt + 3*dy) * w fits.
    let shift = |ky: usize| (ky * g.dy) as i32 - g.pt as i32;
    let rlo: [__m512i; 3] = core::array::from_fn(|ky| _mm512_set1_epi32(-shift(ky) * w));
    let roff: [isize; 3] =
        core::array::from_fn(|ky| shift(ky) as isize * w as isize - g.pl as isize);
    // Outputs j0..j0 + 16 with every kernel row inside: from the first
    // output whose top tap row is row 0 to the last whose bottom one is h - 1.
    let inner_lo = (-shift(0)).max(0) as usize * g.w;
    let inner_hi = (((g.h as i32 - shift(2)).max(0) as usize) * g.w).min(n);
    let lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let col0 = columns_of_lanes(g.w);
    let step = _mm512_set1_epi32((16 % g.w) as i32);
    let (wv, hwv) = (_mm512_set1_epi32(w), _mm512_set1_epi32(hw as i32));
    let sixteen = _mm512_set1_epi32(16);
    for (p, (wk, bias)) in job.kernels().enumerate() {
        let Some(wt) = taps3x3(wk) else { return };
        let bv = _mm512_set1_ps(bias);
        let xp = x.wrapping_add(p * hw);
        let yp = y.wrapping_add(p * n);
        let mut col = col0;
        let mut jv = lane;
        let mut j0 = 0usize;
        while j0 < n {
            let cm: [__mmask16; 3] = core::array::from_fn(|kx| {
                _mm512_cmplt_epu32_mask(_mm512_sub_epi32(col, clo[kx]), wv)
            });
            let inner = j0 >= inner_lo && j0 + 16 <= inner_hi;
            let mut acc = [_mm512_setzero_ps(); 3];
            for ky in 0..3 {
                let rm = if inner {
                    0xffff
                } else {
                    _mm512_cmplt_epu32_mask(_mm512_sub_epi32(jv, rlo[ky]), hwv)
                };
                let row = xp.wrapping_add(j0).wrapping_offset(roff[ky]);
                for kx in 0..3 {
                    // SAFETY: the mask keeps lanes whose input row and
                    // column are inside the plane (see [`flat`]); inner
                    // vectors have every row inside.
                    let v =
                        unsafe { _mm512_maskz_loadu_ps(rm & cm[kx], row.wrapping_add(kx * dx)) };
                    acc[ky] = _mm512_fmadd_ps(v, wt[ky][kx], acc[ky]);
                }
            }
            let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], bv));
            let out = activate::<ACT>(sum, job.a, job.b);
            let keep = lanes_between(0, (n - j0) as isize);
            // SAFETY: the mask keeps outputs j0 + l < n of plane p.
            unsafe { _mm512_mask_storeu_ps(yp.wrapping_add(j0), keep, out) };
            col = _mm512_add_epi32(col, step);
            col = _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, wv), col, wv);
            jv = _mm512_add_epi32(jv, sixteen);
            j0 += 16;
        }
    }
}

/// The widest kernel the sliding loops unroll ([`flat_slide`], [`rows_s2`],
/// [`rows2_s2`]): 3x3 and 5x5, and 7x7 in [`flat_slide`].
const SLIDE: usize = 7;

/// The masks of one vector of [`flat_slide`], the same for every plane.
#[derive(Clone, Copy)]
struct Masks {
    /// Per kernel column: the lanes whose tap column is inside the row.
    cm: [__mmask16; SLIDE],
    /// Per kernel row: the lanes of the next vector's load inside the plane.
    ld: [__mmask16; SLIDE],
    /// The lanes that are outputs.
    keep: __mmask16,
}

/// Vectors whose masks [`flat_slide`] computes at a time (on the stack).
const TAB: usize = 64;

/// A `K x K` kernel's taps as broadcasts, by kernel row; `None` when `wk`
/// does not hold `K * K`.
#[inline]
#[target_feature(enable = "avx512f")]
fn taps<const K: usize>(wk: &[f32]) -> Option<[[__m512; K]; K]> {
    if wk.len() != K * K {
        return None;
    }
    Some(core::array::from_fn(|ky| {
        core::array::from_fn(|kx| _mm512_set1_ps(wk.get(ky * K + kx).copied().unwrap_or(0.0)))
    }))
}

/// Lanes `S..16` of `a` followed by lanes `0..S` of `b` (`S = by`, 0 to
/// 6): what a kernel column `by` places to the right reads.
#[inline]
#[target_feature(enable = "avx512f")]
fn shifted(by: usize, a: __m512, b: __m512) -> __m512 {
    let (a, b) = (_mm512_castps_si512(a), _mm512_castps_si512(b));
    _mm512_castsi512_ps(match by {
        0 => a,
        1 => _mm512_alignr_epi32::<1>(b, a),
        2 => _mm512_alignr_epi32::<2>(b, a),
        3 => _mm512_alignr_epi32::<3>(b, a),
        4 => _mm512_alignr_epi32::<4>(b, a),
        5 => _mm512_alignr_epi32::<5>(b, a),
        _ => _mm512_alignr_epi32::<6>(b, a),
    })
}

/// [`flat`] for a `K x K` kernel (3, 5 or 7) with dilation 1 across: instead
/// of `K * K` unaligned loads per vector (each split over two cache
/// lines), one load per kernel row, the other kernel columns taken from it
/// and the next vector of the same row by lane shifts. The loads keep the
/// lanes whose input index lies in `0..h*w`, so a lane with its column
/// inside the row reads the right value exactly when its row is inside the
/// plane too, and reads zero otherwise; the column mask of each kernel
/// column then picks the lanes that take the tap. Each kernel row sums
/// into its own register (`K` independent chains). The masks depend on
/// the vector's place in the plane only, so they are computed once for
/// all planes, [`TAB`] vectors at a time.
#[target_feature(enable = "avx512f")]
unsafe fn flat_slide<const K: usize, const ACT: u8>(job: &Job<'_>, x: *const f32, y: *mut f32) {
    let g = job.g;
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    let w = g.w as i32;
    let clo: [__m512i; K] = core::array::from_fn(|kx| _mm512_set1_epi32(g.pl as i32 - kx as i32));
    // In i32: depthwise checked (h + pt + K*dy) * w fits.
    let shift = |ky: usize| (ky * g.dy) as i32 - g.pt as i32;
    // Input index of kernel column 0 for output j: j + roff[ky].
    let roff: [isize; K] =
        core::array::from_fn(|ky| shift(ky) as isize * w as isize - g.pl as isize);
    let hwi = hw as isize;
    let inside = |at: isize| lanes_between(-at, hwi - at);
    let mut col = columns_of_lanes(g.w);
    let step = _mm512_set1_epi32((16 % g.w) as i32);
    let wv = _mm512_set1_epi32(w);
    let nv = n.div_ceil(16);
    let mut v0 = 0;
    while v0 < nv {
        let count = (nv - v0).min(TAB);
        let mut tab = [Masks { cm: [0; SLIDE], ld: [0; SLIDE], keep: 0 }; TAB];
        let tab = &mut tab[..count];
        for (t, m) in tab.iter_mut().enumerate() {
            let j = ((v0 + t) * 16) as isize;
            for (cm, lo) in m.cm.iter_mut().zip(&clo) {
                *cm = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(col, *lo), wv);
            }
            for (ld, off) in m.ld.iter_mut().zip(&roff) {
                *ld = inside(j + 16 + off);
            }
            m.keep = lanes_between(0, n as isize - j);
            col = _mm512_add_epi32(col, step);
            col = _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, wv), col, wv);
        }
        let j0 = (v0 * 16) as isize;
        let first: [__mmask16; K] = core::array::from_fn(|ky| inside(j0 + roff[ky]));
        for (p, (wk, bias)) in job.kernels().enumerate() {
            let Some(wt) = taps::<K>(wk) else { return };
            let bv = _mm512_set1_ps(bias);
            let xp = x.wrapping_add(p * hw);
            let yp = y.wrapping_add(p * n);
            // SAFETY (both loads): the masks keep the lanes inside the plane.
            let mut cur: [__m512; K] = core::array::from_fn(|ky| unsafe {
                _mm512_maskz_loadu_ps(first[ky], xp.wrapping_offset(j0 + roff[ky]))
            });
            for (t, m) in tab.iter().enumerate() {
                let j = j0 + 16 * t as isize;
                let next: [__m512; K] = core::array::from_fn(|ky| unsafe {
                    _mm512_maskz_loadu_ps(m.ld[ky], xp.wrapping_offset(j + 16 + roff[ky]))
                });
                let mut acc = [_mm512_setzero_ps(); K];
                for ky in 0..K {
                    let (a, b) = (cur[ky], next[ky]);
                    // A 7x7 kernel's 49 taps do not fit the registers: each
                    // is broadcast from the weights where it is used (96
                    // planes of 56x56: 0.49 -> 0.46 ms; loading each
                    // column's inputs instead of shifting ran at 0.64).
                    let tap = |kx: usize| match K {
                        7 => _mm512_set1_ps(wk[ky * K + kx]),
                        _ => wt[ky][kx],
                    };
                    acc[ky] = _mm512_maskz_mul_ps(m.cm[0], a, tap(0));
                    // A constant trip count, so the loop unrolls and each
                    // shift is one instruction (an iterator chain with
                    // `skip` stayed a loop with a switch: 3x3 ran 2x slower).
                    #[allow(clippy::needless_range_loop)]
                    for kx in 1..K {
                        let t = shifted(kx, a, b);
                        acc[ky] = _mm512_mask3_fmadd_ps(t, tap(kx), acc[ky], m.cm[kx]);
                    }
                }
                cur = next;
                let out = activate::<ACT>(sum_rows(acc, bv), job.a, job.b);
                // SAFETY: the mask keeps outputs j + l < n of plane p.
                unsafe { _mm512_mask_storeu_ps(yp.wrapping_offset(j), m.keep, out) };
            }
        }
        v0 += count;
    }
}

/// `bias + acc[0] + ... + acc[K - 1]` in two chains: the odd rows onto
/// `acc[0]`, the even ones onto the bias.
#[inline]
#[target_feature(enable = "avx512f")]
fn sum_rows<const K: usize>(acc: [__m512; K], bias: __m512) -> __m512 {
    let (mut odd, mut even) = (acc[0], bias);
    for (i, a) in acc.iter().enumerate().skip(1) {
        if i % 2 == 1 {
            odd = _mm512_add_ps(odd, *a);
        } else {
            even = _mm512_add_ps(even, *a);
        }
    }
    _mm512_add_ps(odd, even)
}

/// The plane column of each of the first sixteen outputs of a plane `w`
/// wide (`lane % w`), which the flat loops advance by `16 % w` per vector.
#[inline]
#[target_feature(enable = "avx512f")]
fn columns_of_lanes(w: usize) -> __m512i {
    lanes_of(core::array::from_fn(|l| (l % w) as i32))
}

/// Sixteen `i32` lanes from an array.
#[inline]
#[target_feature(enable = "avx512f")]
fn lanes_of(v: [i32; 16]) -> __m512i {
    _mm512_setr_epi32(
        v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12], v[13],
        v[14], v[15],
    )
}

/// [`rows_s2`] for narrow outputs: two output rows per vector (lanes
/// `0..ow` and `ow..2*ow`, the order of the outputs in memory), for
/// `ow <= 8` where the input columns inside the row that any output reads
/// lie among the sixteen from `-pl` (`min(w + pl, 2*(ow - 1) + K) <= 16`).
/// One load of those sixteen per input row (keeping the columns inside
/// it) serves every kernel column, picked for both rows at once by one
/// two-source permute; a lane whose column would lie past the sixteen
/// (then past the row, so its tap is zero) is zeroed by the permute's mask.
#[target_feature(enable = "avx512f")]
unsafe fn rows2_s2<const K: usize, const ACT: u8>(job: &Job<'_>, x: *const f32, y: *mut f32) {
    let g = job.g;
    let (hw, n, ow) = (g.h * g.w, g.oh * g.ow, g.ow);
    let b = -(g.pl as isize);
    let m = lanes_between(-b, g.w as isize - b);
    let mut idx = [_mm512_setzero_si512(); K];
    let mut take = [0 as __mmask16; K];
    for kx in 0..K {
        let mut ix = [0i32; 16];
        for (l, v) in ix.iter_mut().enumerate().take(2 * ow) {
            let (base, o) = if l < ow { (0, l) } else { (16, l - ow) };
            if 2 * o + kx < 16 {
                *v = (base + 2 * o + kx) as i32;
                take[kx] |= 1 << l;
            }
        }
        idx[kx] = lanes_of(ix);
    }
    let zero = _mm512_setzero_ps();
    for (p, (wk, bias)) in job.kernels().enumerate() {
        let Some(wt) = taps::<K>(wk) else { return };
        let bv = _mm512_set1_ps(bias);
        let xp = x.wrapping_add(p * hw);
        let yp = y.wrapping_add(p * n);
        // The sixteen columns from `b` of input row `iy`, zero outside.
        let load = |iy: usize| {
            if iy < g.h {
                // SAFETY: row iy < h; the mask keeps the columns inside it.
                unsafe { _mm512_maskz_loadu_ps(m, xp.wrapping_add(iy * g.w).wrapping_offset(b)) }
            } else {
                zero
            }
        };
        let mut oy = 0;
        while oy < g.oh {
            let two = oy + 1 < g.oh;
            let mut acc = [zero; K];
            for ky in 0..K {
                let la = load((oy * g.sy + ky * g.dy).wrapping_sub(g.pt));
                let lb =
                    if two { load(((oy + 1) * g.sy + ky * g.dy).wrapping_sub(g.pt)) } else { zero };
                for kx in 0..K {
                    let v = _mm512_maskz_permutex2var_ps(take[kx], la, idx[kx], lb);
                    acc[ky] = _mm512_fmadd_ps(v, wt[ky][kx], acc[ky]);
                }
            }
            let out = activate::<ACT>(sum_rows(acc, bv), job.a, job.b);
            let keep = lanes_between(0, if two { 2 * ow } else { ow } as isize);
            // SAFETY: outputs oy * ow + l of plane p, below (oy + 2) * ow
            // when row oy + 1 exists and below (oy + 1) * ow otherwise.
            unsafe { _mm512_mask_storeu_ps(yp.wrapping_add(oy * ow), keep, out) };
            oy += 2;
        }
    }
}

/// Output rows ahead whose input rows [`rows_s2`] prefetches.
const PREFETCH_ROWS: usize = 4;

/// The row loop for a `K x K` kernel (3 or 5) with horizontal stride 2 and
/// dilation 1, unrolled. The block of sixteen outputs from `ox0` reads
/// input columns `b + 2l + kx` (`b = 2*ox0 - pl`): two loads of sixteen
/// from `b` give the even columns (kernel column 0) and the odd ones
/// (kernel column 1); kernel columns `2c` and `2c + 1` are those moved down
/// `c` lanes, with columns `b + 32..b + 32 + K - 2` (a third load) in the
/// last lanes. Each load keeps the lanes whose column is inside the row;
/// rows outside the input are skipped.
#[target_feature(enable = "avx512f")]
unsafe fn rows_s2<const K: usize, const ACT: u8>(job: &Job<'_>, x: *const f32, y: *mut f32) {
    let g = job.g;
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    let w = g.w as isize;
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let zero = _mm512_setzero_ps();
    for (p, (wk, bias)) in job.kernels().enumerate() {
        let Some(wt) = taps::<K>(wk) else { return };
        let bv = _mm512_set1_ps(bias);
        let xp = x.wrapping_add(p * hw);
        let yp = y.wrapping_add(p * n);
        let mut ox0 = 0;
        while ox0 < g.ow {
            let b = (2 * ox0) as isize - g.pl as isize;
            let m0 = lanes_between(-b, w - b);
            let m1 = lanes_between(-b - 16, w - b - 16);
            // Columns b + 32.. serve the last lanes only.
            let m2 = lanes_between(-b - 32, w - b - 32) & ((1 << (K - 2)) - 1);
            let keep = lanes_between(0, (g.ow - ox0) as isize);
            for oy in 0..g.oh {
                let mut acc = [zero; K];
                for (ky, acc) in acc.iter_mut().enumerate() {
                    let iy = (oy * g.sy + ky * g.dy).wrapping_sub(g.pt);
                    if iy >= g.h {
                        continue;
                    }
                    let row = xp.wrapping_add(iy * g.w).wrapping_offset(b);
                    // SAFETY: input row iy < h; each mask keeps the lanes
                    // whose column is inside it (narrow rows need no second
                    // or third load).
                    let (l0, l1, l2) = unsafe {
                        (
                            _mm512_maskz_loadu_ps(m0, row),
                            if m1 == 0 {
                                zero
                            } else {
                                _mm512_maskz_loadu_ps(m1, row.wrapping_add(16))
                            },
                            if m2 == 0 {
                                zero
                            } else {
                                _mm512_maskz_loadu_ps(m2, row.wrapping_add(32))
                            },
                        )
                    };
                    if ky + 1 == K {
                        // The input rows a few output rows down: going down a
                        // strip of columns, each row is a new cache line.
                        let ahead = row.wrapping_add(PREFETCH_ROWS * g.sy * g.w);
                        // A hint: it never faults, whatever the address.
                        _mm_prefetch::<_MM_HINT_T0>(ahead.cast());
                        _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(16).cast());
                    }
                    let ev = _mm512_permutex2var_ps(l0, even, l1);
                    let od = _mm512_permutex2var_ps(l0, odd, l1);
                    // The even and odd columns from b + 32 (lane 0: b + 32).
                    let (ev2, od2) = if K > 3 {
                        (_mm512_permutexvar_ps(even, l2), _mm512_permutexvar_ps(odd, l2))
                    } else {
                        (l2, zero)
                    };
                    let row_taps = &wt[ky];
                    let mut a = _mm512_mul_ps(ev, row_taps[0]);
                    // A constant trip count: unrolled (see `flat_slide`).
                    #[allow(clippy::needless_range_loop)]
                    for kx in 1..K {
                        let tap = row_taps[kx];
                        let v = if kx % 2 == 0 {
                            shifted(kx / 2, ev, ev2)
                        } else {
                            shifted(kx / 2, od, od2)
                        };
                        a = _mm512_fmadd_ps(v, tap, a);
                    }
                    *acc = a;
                }
                let out = activate::<ACT>(sum_rows(acc, bv), job.a, job.b);
                // SAFETY: output row oy < oh; the mask keeps columns below ow.
                unsafe { _mm512_mask_storeu_ps(yp.wrapping_add(oy * g.ow + ox0), keep, out) };
            }
            ox0 += 16;
        }
    }
}

/// The row loop (see the module docs): sixteen outputs of one row per
/// vector, `S` the horizontal stride (1 or 2). Lane `l` of the block at
/// `ox0` reads tap `(ky, kx)` at input column `(ox0 + l)*S + kx*dx - pl`
/// of row `oy*sy + ky*dy - pt`; rows outside the input are skipped and
/// the loads keep the lanes whose column is inside the row.
#[target_feature(enable = "avx512f")]
unsafe fn rows<const S: usize, const K3: bool, const ACT: u8>(
    job: &Job<'_>,
    x: *const f32,
    y: *mut f32,
) {
    let g = job.g;
    let (kh, kw) = if K3 { (3, 3) } else { (g.kh, g.kw) };
    let (hw, n) = (g.h * g.w, g.oh * g.ow);
    let w = g.w as isize;
    let evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    for (p, (wk, bias)) in job.kernels().enumerate() {
        if wk.len() != kh * kw {
            return;
        }
        let w3 = weights3::<K3>(wk);
        let bv = _mm512_set1_ps(bias);
        let xp = x.wrapping_add(p * hw);
        let yp = y.wrapping_add(p * n);
        let mut ox0 = 0;
        while ox0 < g.ow {
            // Load masks per kernel column: lanes whose input column lies
            // inside the row; with stride 2 a second load covers the next
            // sixteen columns.
            let mut lo = [0 as __mmask16; MAX_KW];
            let mut hi = [0 as __mmask16; MAX_KW];
            let col = (ox0 * S) as isize - g.pl as isize;
            for kx in 0..kw {
                let base = col + (kx * g.dx) as isize;
                lo[kx] = lanes_between(-base, w - base);
                if S == 2 {
                    hi[kx] = lanes_between(-base - 16, w - base - 16);
                }
            }
            let keep = lanes_between(0, (g.ow - ox0) as isize);
            for oy in 0..g.oh {
                let top = oy * g.sy;
                let mut acc = _mm512_setzero_ps();
                for ky in 0..kh {
                    let iy = (top + ky * g.dy).wrapping_sub(g.pt);
                    if iy >= g.h {
                        continue;
                    }
                    let row = xp.wrapping_add(iy * g.w).wrapping_offset(col);
                    for kx in 0..kw {
                        let at = row.wrapping_add(kx * g.dx);
                        // SAFETY: input row iy < h; the masks keep the
                        // lanes whose column is inside it.
                        let v = unsafe {
                            if S == 1 {
                                _mm512_maskz_loadu_ps(lo[kx], at)
                            } else {
                                _mm512_permutex2var_ps(
                                    _mm512_maskz_loadu_ps(lo[kx], at),
                                    evens,
                                    _mm512_maskz_loadu_ps(hi[kx], at.wrapping_add(16)),
                                )
                            }
                        };
                        let wt =
                            if K3 { w3[ky * 3 + kx] } else { _mm512_set1_ps(wk[ky * kw + kx]) };
                        acc = _mm512_fmadd_ps(v, wt, acc);
                    }
                }
                let out = activate::<ACT>(_mm512_add_ps(acc, bv), job.a, job.b);
                // SAFETY: output row oy < oh; the mask keeps columns below ow.
                unsafe { _mm512_mask_storeu_ps(yp.wrapping_add(oy * g.ow + ox0), keep, out) };
            }
            ox0 += 16;
        }
    }
}

/// `d[b][i] = s[b][2 * i]` for each block `b` of both: the even floats of
/// 32 with two loads, one two-source permute and a store (the compiler
/// leaves the plain loop as sixteen scalar moves), a whole run of blocks
/// per call; the direct convolution stages stride-2 rows with it.
#[inline(always)]
pub(crate) fn evens(cpu: Avx512, d: &mut [[f32; 16]], s: &[[f32; 32]]) {
    #[target_feature(enable = "avx512f")]
    fn evens512(d: &mut [[f32; 16]], s: &[[f32; 32]]) {
        use core::arch::x86_64::{
            _mm512_loadu_ps, _mm512_permutex2var_ps, _mm512_setr_epi32, _mm512_storeu_ps,
        };
        let idx = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        for (d, s) in d.iter_mut().zip(s) {
            // SAFETY: the loads read floats 0..16 and 16..32 of `s` (32
            // floats), the store writes the 16 floats of `d`.
            unsafe {
                let lo = _mm512_loadu_ps(s.as_ptr());
                let hi = _mm512_loadu_ps(s.as_ptr().add(16));
                _mm512_storeu_ps(d.as_mut_ptr(), _mm512_permutex2var_ps(lo, idx, hi));
            }
        }
    }
    let _ = cpu;
    // SAFETY: `cpu` proves AVX-512F is present.
    unsafe { evens512(d, s) }
}
