//! Depthwise int8 convolution (`group == C == M`), NCHW, any kernel,
//! stride, padding and dilation.
//!
//! Each channel's plane is first copied into `scratch` with its padding
//! made real: the rows and columns the windows reach, padding read as the
//! input's zero point (so every tap adds `(x - x_zero) w` with `x =
//! x_zero`, nothing), then [`PLANE_SLACK`] spare bytes that the word-wide
//! kernels may read past the last row. The sum of every window is then a
//! plain dot product with no bounds to test; the zero point comes off once
//! per channel as `x_zero * sum(w)`, with the bias.
//!
//! Kernels: the plain loops (here), 3x3 windows of stride 1 or 2 on the
//! Arm DSP extension (`dsp.rs`: two outputs per word of four inputs), and
//! windows of horizontal stride 1 or 2 in AVX2 (`avx2.rs`: pairs of taps
//! by `vpmaddwd`, eight outputs a vector, sums in registers).

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(crate) mod avx2;
#[cfg(any(onnx_codegen_arm_dsp, test))]
#[allow(unsafe_code)]
pub(crate) mod dsp;

use crate::conv::Conv;
use crate::int8::{Q8, Requant};
use crate::simd::q8::conv::{Geom, Io, copy_run};
use crate::simd::q8::requant::{Chan, OutRange};

/// The output stage of the plain loops: lane by lane where a vector unit
/// runs it (`splat_lanes`), else `splat_row`'s scalar form (a Cortex-M's
/// `SMMUL` way).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use crate::simd::q8::requant::splat_lanes as stage;
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
use crate::simd::q8::requant::splat_row as stage;

/// Bytes the word-wide kernels may read past the last padded row (the
/// AVX2 kernel's chunks of eight outputs read up to 15).
pub(crate) const PLANE_SLACK: usize = 16;

/// The padded plane of a channel: the input rows and columns the windows
/// reach, with the padding.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plane {
    /// Rows: `(oh - 1) sh + (kh - 1) dh + 1`.
    pub rows: usize,
    /// Columns (the row pitch): `(ow - 1) sw + (kw - 1) dw + 1`.
    pub cols: usize,
}

impl Plane {
    /// The padded plane of a checked window with at least one output.
    pub(crate) fn of(g: &Geom) -> Option<Plane> {
        let span = |o: usize, s: usize, k: usize, d: usize| {
            o.checked_sub(1)?
                .checked_mul(s)?
                .checked_add(k.checked_sub(1)?.checked_mul(d)?)?
                .checked_add(1)
        };
        Some(Plane { rows: span(g.oh, g.sh, g.kh, g.dh)?, cols: span(g.ow, g.sw, g.kw, g.dw)? })
    }

    /// The scratch bytes: the plane and the slack.
    pub(crate) fn len(&self) -> Option<usize> {
        self.rows.checked_mul(self.cols)?.checked_add(PLANE_SLACK)
    }
}

/// The scratch elements of a depthwise convolution (`None` on overflow).
pub(crate) fn scratch_len(g: &Geom) -> Option<usize> {
    if g.oh == 0 || g.ow == 0 {
        return Some(0);
    }
    Plane::of(g)?.len()
}

/// Copies channel plane `xp` (`ih x iw`) into `pad` (`plane.len()`
/// bytes) as the module documentation says, given that every byte of
/// `pad` the plane does not cover already holds the zero point (the
/// caller fills `pad` with it once: the bytes the planes cover are the
/// same for every channel).
fn fill(g: &Geom, plane: &Plane, xp: &[u8], pad: &mut [u8]) {
    // The padded columns `px` with `ix = px - pw` inside the row.
    let c0 = g.pw.min(plane.cols);
    let c1 = (g.pw + g.iw).min(plane.cols);
    if c0 >= c1 {
        return;
    }
    // `c0 = pw` here: input row `iy`'s columns `0..c1 - c0` go to padded
    // row `iy + ph`, columns `c0..c1`, for the rows inside the plane.
    let (n, rows) = (c1 - c0, g.ih.min(plane.rows.saturating_sub(g.ph)));
    let Some(dst) = pad.get_mut(g.ph * plane.cols + c0..) else { return };
    for (d, s) in dst.chunks_mut(plane.cols).zip(xp.chunks(g.iw)).take(rows) {
        if let (Some(d), Some(s)) = (d.get_mut(..n), s.get(..n)) {
            copy_run(d, s);
        }
    }
}

/// The depthwise convolution (lengths checked by the caller; `w` is `[C,
/// kh * kw]`; `scratch` holds [`scratch_len`] bytes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    g: &Geom,
    io: Io<'_, Y>,
    x_zero: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    scratch: &mut [A],
) {
    let job = Channels { p, g, io, x_zero, w, bias, rq, scratch };
    #[cfg(onnx_codegen_arm_dsp)]
    if let Some(k) = crate::simd::isa::dsp::Dsp::detect().filter(|_| dsp::fits(g)) {
        return job.each(dsp::Kernel(k));
    }
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(k) = crate::simd::isa::avx2::Avx2::detect().filter(|_| avx2::fits(g)) {
        return job.each(avx2::Kernel(k));
    }
    // The plain loops, compiled for the widest vector unit there is.
    crate::simd::vectorize_wide(job);
}

/// A depthwise convolution's arguments, as [`run`] takes them.
struct Channels<'a, 'b, A, Y> {
    p: &'b Conv<'a>,
    g: &'b Geom,
    io: Io<'b, Y>,
    x_zero: i32,
    w: &'b [i8],
    bias: Option<&'b [i32]>,
    rq: &'b Requant<'a>,
    scratch: &'b mut [A],
}

impl<A: Q8, Y: Q8> Channels<'_, '_, A, Y> {
    /// Every channel's plane padded into the scratch, then `kernel` on it.
    #[inline(always)]
    fn each<K: ChannelKernel>(self, kernel: K) {
        let Channels { p, g, mut io, x_zero, w, bias, rq, scratch } = self;
        let (iplane, oplane, taps) = (g.ih * g.iw, g.oh * g.ow, g.kh * g.kw);
        let Some(plane) = Plane::of(g) else { return };
        let Some(pad) = plane.len().and_then(|n| A::as_bytes_mut(scratch).get_mut(..n)) else {
            debug_assert!(false, "depthwise scratch too small");
            return;
        };
        let zbits = A::saturate(x_zero).bits();
        let out = OutRange::of(rq);
        // The padding, once: each channel's copy overwrites the same bytes.
        pad.fill(zbits);
        let mut own = K::Scratch::default();
        for n in 0..p.batch {
            for c in 0..p.out_channels {
                // In place, channel `c`'s output overwrites its input
                // only after this copy.
                let Some(xp) =
                    io.x().get((n * p.in_channels + c) * iplane..).and_then(|x| x.get(..iplane))
                else {
                    return;
                };
                fill(g, &plane, xp, pad);
                let wc = &w[c * taps..][..taps];
                let wsum: i32 = wc.iter().map(|&v| i32::from(v)).sum();
                let add = bias.map_or(0, |b| b[c]).wrapping_sub(x_zero.wrapping_mul(wsum));
                let ch = Chan::new(add, rq.scale(c));
                let Some(yp) = io
                    .y()
                    .get_mut((n * p.out_channels + c) * oplane..)
                    .and_then(|y| y.get_mut(..oplane))
                else {
                    return;
                };
                kernel.channel::<A, Y>(g, &plane, pad, wc, &ch, &out, yp, &mut own);
            }
        }
    }
}

impl<A: Q8, Y: Q8> crate::simd::Vectorize for Channels<'_, '_, A, Y> {
    type Output = ();
    #[inline(always)]
    fn run(self) {
        self.each(Plain);
    }
}

/// A kernel for one channel's padded plane, as [`Plain`] takes it. The
/// method is `#[inline(always)]` in every implementation, so that under
/// [`crate::simd::vectorize_wide`] its loops are compiled for the vector
/// unit (a closure there would be a function of its own, compiled for the
/// baseline).
pub(crate) trait ChannelKernel: Copy {
    /// Working memory of the kernel's own, made once per convolution
    /// (default-initialised) and handed to every channel.
    type Scratch: Default;

    #[allow(clippy::too_many_arguments)]
    fn channel<A: Q8, Y: Q8>(
        self,
        g: &Geom,
        plane: &Plane,
        pad: &[u8],
        wc: &[i8],
        ch: &Chan,
        out: &OutRange,
        yp: &mut [Y],
        own: &mut Self::Scratch,
    );
}

/// The plain loops, for one channel: `yp[oy, ox] = out(ch(sum of the
/// window's taps))` over the padded plane `pad`.
#[derive(Clone, Copy)]
pub(crate) struct Plain;

impl ChannelKernel for Plain {
    type Scratch = ();

    #[inline(always)]
    fn channel<A: Q8, Y: Q8>(
        self,
        g: &Geom,
        plane: &Plane,
        pad: &[u8],
        wc: &[i8],
        ch: &Chan,
        out: &OutRange,
        yp: &mut [Y],
        _: &mut (),
    ) {
        if g.sh == 1 && g.sw == 1 && plane.cols <= ACC {
            return channel_runs::<A, Y>(g, plane, pad, wc, ch, out, yp);
        }
        // The pieces of `for_pieces`, written out: a closure there would
        // be a function of its own, compiled for the baseline.
        let mut acc = [0i32; ACC];
        if g.ow <= ACC {
            let per = ACC / g.ow;
            for (i, yc) in yp.chunks_mut(per * g.ow).enumerate() {
                piece::<A, Y>(g, plane, pad, wc, ch, out, (i * per, 0, g.ow), yc, &mut acc);
            }
        } else {
            for (oy, yr) in yp.chunks_exact_mut(g.ow).enumerate() {
                for (j, yc) in yr.chunks_mut(ACC).enumerate() {
                    let at = (oy, j * ACC, yc.len());
                    piece::<A, Y>(g, plane, pad, wc, ch, out, at, yc, &mut acc);
                }
            }
        }
    }
}

/// [`Plain`]'s outputs `yc` of one piece `(oy0, ox0, width)` (see
/// [`for_pieces`]), any stride.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn piece<A: Q8, Y: Q8>(
    g: &Geom,
    plane: &Plane,
    pad: &[u8],
    wc: &[i8],
    ch: &Chan,
    out: &OutRange,
    (oy0, ox0, width): (usize, usize, usize),
    yc: &mut [Y],
    acc: &mut [i32; ACC],
) {
    let acc = &mut acc[..yc.len()];
    acc.fill(0);
    for (r, a) in acc.chunks_exact_mut(width).enumerate() {
        for ky in 0..g.kh {
            let row = ((oy0 + r) * g.sh + ky * g.dh) * plane.cols;
            for kx in 0..g.kw {
                let wv = i32::from(wc[ky * g.kw + kx]);
                // Read through the rest of the plane: at stride 2 the last
                // pair's second byte may lie one past the row (or, in the
                // last row, in the slack), never used.
                let from = &pad[row + ox0 * g.sw + kx * g.dw..];
                if g.sw == 1 {
                    for (a, &v) in a.iter_mut().zip(from) {
                        *a = a.wrapping_add(A::of_bits(v) * wv);
                    }
                } else if g.sw == 2 {
                    // Even bytes of pairs: a stride the compiler vectorises.
                    for (a, v) in a.iter_mut().zip(from.chunks_exact(2)) {
                        *a = a.wrapping_add(A::of_bits(v[0]) * wv);
                    }
                } else {
                    for (a, &v) in a.iter_mut().zip(from.iter().step_by(g.sw)) {
                        *a = a.wrapping_add(A::of_bits(v) * wv);
                    }
                }
            }
        }
    }
    stage(acc, ch, out, yc);
}

/// [`Plain`] at stride 1 on a plane whose rows fit [`ACC`]: output `(oy,
/// ox)` is the sum at position `oy * cols + ox` of the taps' shifted copies
/// of the plane, so several output rows (with the `cols - ow` positions
/// between them, computed and dropped) are one run per tap, which the
/// compiler vectorises.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn channel_runs<A: Q8, Y: Q8>(
    g: &Geom,
    plane: &Plane,
    pad: &[u8],
    wc: &[i8],
    ch: &Chan,
    out: &OutRange,
    yp: &mut [Y],
) {
    let pitch = plane.cols;
    debug_assert!(g.sh == 1 && g.sw == 1 && g.ow <= pitch && pitch <= ACC);
    // Rows per run: `(rows - 1) pitch + ow <= ACC`.
    let per = (ACC - g.ow) / pitch + 1;
    let mut acc = [0i32; ACC];
    for (i, yc) in yp.chunks_mut(per * g.ow).enumerate() {
        let nr = yc.len() / g.ow;
        let len = (nr - 1) * pitch + g.ow;
        let acc = &mut acc[..len];
        acc.fill(0);
        for ky in 0..g.kh {
            for kx in 0..g.kw {
                let wv = i32::from(wc[ky * g.kw + kx]);
                // The last position read, of the last row's last tap, is
                // `(rows - 1) pitch + cols - 1`: inside the plane.
                let from = &pad[(i * per + ky * g.dh) * pitch + kx * g.dw..][..len];
                for (a, &v) in acc.iter_mut().zip(from) {
                    *a = a.wrapping_add(A::of_bits(v) * wv);
                }
            }
        }
        for r in 1..nr {
            acc.copy_within(r * pitch..r * pitch + g.ow, r * g.ow);
        }
        stage(&acc[..nr * g.ow], ch, out, yc);
    }
}

/// Sums held at a time before their output stage.
pub(crate) const ACC: usize = 64;

/// Calls `f(oy0, ox0, width, yc)` for pieces of the output plane `yp`
/// (`oh x ow`) that cover it in order, each at most [`ACC`] outputs: whole
/// rows `oy0..` when a row fits (`ox0 = 0`, `width = ow`; narrow planes
/// then pay the output stage's setup once for several rows), else parts
/// of one row `oy0`, columns `ox0..ox0 + width`. `yc` is the piece's
/// outputs, `width` per row.
#[cfg(any(onnx_codegen_arm_dsp, test))]
#[inline(always)]
pub(crate) fn for_pieces<Y>(
    g: &Geom,
    yp: &mut [Y],
    mut f: impl FnMut(usize, usize, usize, &mut [Y]),
) {
    debug_assert!(yp.len() == g.oh * g.ow && g.ow > 0);
    if g.ow <= ACC {
        for (i, yc) in yp.chunks_mut(ACC / g.ow * g.ow).enumerate() {
            f(i * (ACC / g.ow), 0, g.ow, yc);
        }
    } else {
        for (oy, yr) in yp.chunks_exact_mut(g.ow).enumerate() {
            for (j, yc) in yr.chunks_mut(ACC).enumerate() {
                let width = yc.len();
                f(oy, j * ACC, width, yc);
            }
        }
    }
}
