//! Depthwise int8 convolution (`group == C == M`), NCHW, any kernel,
//! stride, padding and dilation: each output sums `(x - x_zero) w` over
//! its taps inside the input (padding adds nothing), plus the bias, and
//! is requantized with its channel's scale.

use crate::conv::Conv;
use crate::int8::{Q8, Requant};
use crate::simd::q8::conv::Geom;
use crate::simd::q8::requant::{Chan, OutRange};

/// The output columns `ox` whose taps `kx` all fall inside the row:
/// `lo..hi` (empty when none).
fn interior(g: &Geom) -> (usize, usize) {
    let span = (g.kw - 1) * g.dw;
    let lo = g.pw.div_ceil(g.sw).min(g.ow);
    let hi = if g.iw + g.pw > span { ((g.iw + g.pw - span - 1) / g.sw + 1).min(g.ow) } else { 0 };
    (lo, hi.max(lo))
}

/// The depthwise convolution (lengths checked by the caller; `w` is
/// `[C, kh * kw]`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<A: Q8, Y: Q8>(
    p: &Conv<'_>,
    g: &Geom,
    x: &[A],
    x_zero: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) {
    let (plane, oplane, taps) = (g.ih * g.iw, g.oh * g.ow, g.kh * g.kw);
    let out = OutRange::of(rq);
    let (lo, hi) = interior(g);
    for n in 0..p.batch {
        for c in 0..p.out_channels {
            let xp = &x[(n * p.in_channels + c) * plane..][..plane];
            let wc = &w[c * taps..][..taps];
            let ch = Chan::new(bias.map_or(0, |b| b[c]), rq.scale(c));
            let yp = &mut y[(n * p.out_channels + c) * oplane..][..oplane];
            for oy in 0..g.oh {
                let yr = &mut yp[oy * g.ow..][..g.ow];
                let mut acc = [0i32; 64];
                let mut ox0 = 0;
                while ox0 < g.ow {
                    let cnt = 64.min(g.ow - ox0);
                    acc[..cnt].fill(0);
                    for ky in 0..g.kh {
                        let iy = (oy * g.sh + ky * g.dh).wrapping_sub(g.ph);
                        if iy >= g.ih {
                            continue;
                        }
                        let xr = &xp[iy * g.iw..][..g.iw];
                        for kx in 0..g.kw {
                            let wv = i32::from(wc[ky * g.kw + kx]);
                            let off = kx * g.dw;
                            for (i, a) in acc[..cnt].iter_mut().enumerate() {
                                let ox = ox0 + i;
                                let ix = if (lo..hi).contains(&ox) {
                                    ox * g.sw + off - g.pw
                                } else {
                                    let ix = (ox * g.sw + off).wrapping_sub(g.pw);
                                    if ix >= g.iw {
                                        continue;
                                    }
                                    ix
                                };
                                *a = a.wrapping_add((xr[ix].get() - x_zero) * wv);
                            }
                        }
                    }
                    for (d, &a) in yr[ox0..ox0 + cnt].iter_mut().zip(&acc[..cnt]) {
                        *d = out.put(ch.apply(a));
                    }
                    ox0 += cnt;
                }
            }
        }
    }
}
