//! The int8 products: `qmatmul`'s driver over packed weight strips, and
//! the kernel dispatch the convolutions share.

pub(crate) mod micro;

use crate::int8::{Q8, QDest, QMatMul, QRows, QUANTIZE_CHUNK, Requant};
use crate::simd::q8::gemm::micro::portable::Portable;
use crate::simd::q8::gemm::micro::{Acc, GROUP_BYTES, MAX_MR, NR, QMicro, Tile};
use crate::simd::q8::requant::{Chan16, OutRange};

/// A body generic over the tile kernel, run with the best one the CPU has
/// (under the ISA cap) by [`dispatch`].
pub(crate) trait WithKernel {
    /// Runs the body with `kern`.
    fn run<K: QMicro>(self, kern: K);
}

/// Runs `body` with the widest tile kernel available: AVX-512 VNNI,
/// AVX-VNNI, AVX2, NEON, the Arm DSP extension's, else the portable one. On x86-64 the
/// body is compiled for the kernel's features (see `Vnni::run`), so its
/// loops inline the tile and the output stage.
#[inline]
pub(crate) fn dispatch(body: impl WithKernel) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    {
        if let Some(k) = micro::avx512::Vnni::detect() {
            return k.run(body);
        }
        if let Some(k) = micro::avxvnni::Q8AvxVnni::detect() {
            return k.run(body);
        }
        if let Some(k) = micro::avx2::Q8Avx2::detect() {
            return k.run(body);
        }
    }
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    if let Some(k) = micro::neon::Q8Neon::detect() {
        return body.run(k);
    }
    #[cfg(onnx_codegen_arm_dsp)]
    if let Some(k) = micro::dsp::Q8Dsp::detect() {
        return body.run(k);
    }
    body.run(Portable)
}

/// The little-endian `i32` at `blob[4 * j..]` (0 past the end).
#[inline(always)]
pub(crate) fn sum_at(blob: &[u8], j: usize) -> i32 {
    match blob.get(4 * j..4 * j + 4) {
        Some(b) => i32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// `qmatmul` with `QWeights::Dense`: the plain loop.
pub(crate) fn dense<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: &[A],
    w: &[i8],
    trans: bool,
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) {
    let &QMatMul { m, n, k, a_zero } = p;
    let out = OutRange::of(rq);
    for i in 0..m {
        for j in 0..n {
            let mut acc = bias.map_or(0, |b| b[j]);
            for kk in 0..k {
                let wv = if trans { w[j * k + kk] } else { w[kk * n + j] };
                acc = acc.wrapping_add((a[i * k + kk].get() - a_zero) * i32::from(wv));
            }
            y[i * n + j] = out.put(rq.scale(j).apply(acc));
        }
    }
}

/// `qmatmul` with `QWeights::Packed` (lengths checked by the caller).
pub(crate) fn packed<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: &[A],
    w: &[u8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: &mut [Y],
) {
    let (a, y) = (QRows::Quantized(a), QDest::Quantized(y));
    dispatch(Packed { p, a, w, bias, rq, y, scratch: &mut [] });
}

/// `qmatmul_float` (lengths checked by the caller).
pub(crate) fn packed_float<A: Q8, Y: Q8>(
    p: &QMatMul,
    a: QRows<'_, A>,
    w: &[u8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
    y: QDest<'_, Y>,
    scratch: &mut [A],
) {
    dispatch(Packed { p, a, w, bias, rq, y, scratch });
}

struct Packed<'a, 'r, A, Y> {
    p: &'a QMatMul,
    a: QRows<'a, A>,
    w: &'a [u8],
    bias: Option<&'a [i32]>,
    rq: &'a Requant<'r>,
    y: QDest<'a, Y>,
    /// Float rows' quantized chunks: [`QUANTIZE_CHUNK`] per row of a tile.
    scratch: &'a mut [A],
}

impl<A: Q8, Y: Q8> WithKernel for Packed<'_, '_, A, Y> {
    #[inline(always)]
    fn run<K: QMicro>(self, kern: K) {
        let Packed { p, a, w, bias, rq, mut y, scratch } = self;
        let &QMatMul { m, n, k, a_zero } = p;
        let (n16, k4) = (n.next_multiple_of(16), k.next_multiple_of(4));
        let Some((sums, body)) = w.split_at_checked(4 * n16) else { return };
        let (groups, tail) = (k / 4, k % 4);
        let zoff = a_zero + kern.offset::<A>();
        let out = OutRange::of(rq);
        let mr = K::MR.min(MAX_MR);
        for s in 0..n.div_ceil(16) {
            let Some(strip) = body.get(s * k4 * 16..(s + 1) * k4 * 16) else { return };
            let j0 = NR * s;
            let ncols = NR.min(n - j0);
            let add = |j: usize| {
                bias.map_or(0, |b| b[j]).wrapping_sub(zoff.wrapping_mul(sum_at(sums, j)))
            };
            let ch = Chan16::new(j0, n, add, rq);
            let mut i0 = 0;
            while i0 < m {
                let nrows = mr.min(m - i0);
                let mut acc: Acc = [[0; NR]; MAX_MR];
                match a {
                    QRows::Quantized(a) => {
                        let a = A::as_bytes(a);
                        let rows = core::array::from_fn(|r| (i0 + r.min(nrows - 1)) * k);
                        let t = Tile { groups, bcast: a, rows, gstep: 4, strip };
                        kern.act_rows::<A>(&t, &mut acc);
                        if tail > 0 {
                            let mut last = [0u8; 4 * MAX_MR];
                            for (r, &row) in rows.iter().enumerate().take(mr) {
                                last[4 * r..4 * r + tail]
                                    .copy_from_slice(&a[row + 4 * groups..][..tail]);
                            }
                            let t = Tile {
                                groups: 1,
                                bcast: &last,
                                rows: core::array::from_fn(|r| 4 * r),
                                gstep: 4,
                                strip: &strip[groups * GROUP_BYTES..],
                            };
                            kern.act_rows::<A>(&t, &mut acc);
                        }
                    }
                    QRows::Float { x, q } => {
                        // Each chunk of the tile's rows quantized (again
                        // for every strip: the price of not holding the
                        // quantized rows), padded to whole groups (the
                        // padding meets zero weights).
                        let mut kc = 0;
                        while kc < k {
                            let len = QUANTIZE_CHUNK.min(k - kc);
                            let len4 = len.next_multiple_of(4);
                            for r in 0..nrows {
                                let at = r * QUANTIZE_CHUNK;
                                let (Some(dst), Some(src)) = (
                                    scratch.get_mut(at..at + len4),
                                    x.get((i0 + r) * k + kc..(i0 + r) * k + kc + len),
                                ) else {
                                    return;
                                };
                                A::quantize(src, q.scale, q.zero, &mut dst[..len]);
                                dst[len..].fill(A::default());
                            }
                            let t = Tile {
                                groups: len4 / 4,
                                bcast: A::as_bytes(scratch),
                                rows: core::array::from_fn(|r| r.min(nrows - 1) * QUANTIZE_CHUNK),
                                gstep: 4,
                                strip: &strip[kc / 4 * GROUP_BYTES..],
                            };
                            kern.act_rows::<A>(&t, &mut acc);
                            kc += len;
                        }
                    }
                }
                for (r, acc) in acc.iter().enumerate().take(nrows) {
                    let row = (i0 + r) * n + j0;
                    match &mut y {
                        QDest::Quantized(y) => kern.cols(acc, &ch, &out, &mut y[row..row + ncols]),
                        QDest::Float { y, q } => {
                            let mut run = [Y::default(); NR];
                            kern.cols(acc, &ch, &out, &mut run[..ncols]);
                            for (d, v) in y[row..row + ncols].iter_mut().zip(run) {
                                // `DequantizeLinear`'s `f32` product.
                                *d = (v.get() - q.zero) as f32 * q.scale;
                            }
                        }
                    }
                }
                i0 += nrows;
            }
        }
    }
}
