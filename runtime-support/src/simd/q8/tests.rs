//! The int8 kernels against plain integer references written here, on
//! awkward shapes, at extreme values and zero points; the paths the CPU
//! runs under the ISA cap are the ones `int8`'s entry points choose, and
//! each vector tile is also compared with the portable one directly.

use crate::Error;
use crate::conv::{Conv, Window};
use crate::int8::*;
use crate::simd::q8::gemm::micro::portable::Portable;
use crate::simd::q8::gemm::micro::{Acc, MAX_MR, NR, QMicro, Tile};
use crate::simd::q8::requant::{Chan, Chan16, OutRange, splat_row};
use std::vec;
use std::vec::Vec;

/// A deterministic stream of numbers.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    /// In `lo..=hi`, the ends often.
    pub(super) fn int(&mut self, lo: i32, hi: i32) -> i32 {
        match self.next() % 8 {
            0 => lo,
            1 => hi,
            _ => {
                (i64::from(lo) + (self.next() % (i64::from(hi) - i64::from(lo) + 1) as u64) as i64)
                    as i32
            }
        }
    }
    pub(super) fn q8<T: Q8>(&mut self, n: usize) -> Vec<T> {
        (0..n).map(|_| T::saturate(self.int(T::MIN, T::MAX))).collect()
    }
    pub(super) fn i8s(&mut self, n: usize) -> Vec<i8> {
        self.q8::<i8>(n)
    }
}

fn scales(rng: &mut Rng, n: usize, per_channel: bool) -> Vec<Scale> {
    let count = if per_channel { n.max(1) } else { 1 };
    (0..count)
        .map(|_| {
            let e = rng.int(-16, 2);
            let f = 1.0 + (rng.next() % 1000) as f64 / 1000.0;
            Scale::from_real(f * libm::exp2(f64::from(e))).unwrap()
        })
        .collect()
}

/// `clamp(zero + s.apply(acc), min, max)`, straight from the definition.
fn requant_ref(s: Scale, acc: i32, zero: i32, min: i32, max: i32) -> i32 {
    let t = 31 + s.shift;
    let r = (i64::from(acc) * i64::from(s.mult) + (1i64 << (t - 1))) >> t;
    (i64::from(zero) + r).clamp(i64::from(min), i64::from(max)) as i32
}

#[test]
fn scale_from_real_is_nearest_and_apply_rounds_ties_up() {
    for &real in &[1.0, 0.5, 0.25, 0.003_921_568_627_451, 1e-9, 3.7, 123_456.0, 0.999_999_999_9] {
        let s = Scale::from_real(real).unwrap();
        assert!(s.is_valid(), "{real}: {s:?}");
        let rel = (s.to_real() - real).abs() / real;
        assert!(rel <= libm::exp2(-31.0), "{real}: {s:?} off by {rel}");
    }
    assert_eq!(Scale::from_real(1.0), Some(Scale { mult: 1 << 30, shift: -1 }));
    // Rounding up to 2^31 renormalises.
    assert_eq!(Scale::from_real(1.0 - 1e-12), Some(Scale { mult: 1 << 30, shift: -1 }));
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-12, 1e10] {
        assert_eq!(Scale::from_real(bad), None, "{bad}");
    }
    assert!(Scale::from_real(libm::exp2(28.9)).is_some());
    assert!(Scale::from_real(libm::exp2(29.0)).is_none());
    // Exact ties go up: 0.5 * odd.
    let half = Scale::from_real(0.5).unwrap();
    assert_eq!([half.apply(1), half.apply(-1), half.apply(3), half.apply(-3)], [1, 0, 2, -1]);
    // Against f64 on many values: within half a unit, ties up.
    let mut rng = Rng::new(7);
    for _ in 0..20_000 {
        let real = libm::exp2(f64::from(rng.int(-30, 20)) + (rng.next() % 1000) as f64 / 1000.0);
        let Some(s) = Scale::from_real(real) else { continue };
        let acc = rng.int(i32::MIN, i32::MAX);
        let exact = f64::from(acc) * s.to_real();
        let got = s.apply(acc);
        if exact.abs() < 2e9 {
            let want = libm::floor(exact + 0.5);
            assert!((f64::from(got) - want).abs() <= 1.0, "{acc} * {s:?}: {got} vs {exact}");
        }
        assert_eq!(
            i64::from(got),
            ((i64::from(acc) * i64::from(s.mult) + (1i64 << (30 + s.shift))) >> (31 + s.shift))
                .clamp(i32::MIN.into(), i32::MAX.into())
        );
    }
}

#[test]
fn vector_form_of_the_scale_agrees_within_any_output_range() {
    let mut rng = Rng::new(3);
    for t in 2..=62u32 {
        for _ in 0..2000 {
            let mult = (1 << 30) + (rng.next() % (1 << 30)) as i32;
            let s = Scale { mult, shift: t as i32 - 31 };
            let add = rng.int(-1000, 1000);
            let ch = Chan::new(add, s);
            let raw = match rng.next() % 3 {
                0 => rng.int(i32::MIN, i32::MAX),
                1 => rng.int(-(1 << (t.min(31) - 1)) - 3, (1 << (t.min(31) - 1)) + 3),
                _ => rng.int(-70_000, 70_000),
            };
            for (zero, min, max) in [(0, -128, 127), (MAX_ZERO, 0, 255), (-MAX_ZERO, -128, 127)] {
                let out = OutRange { zero, min, max };
                let want: i32 = out.put::<u8>(ch.apply(raw)).into();
                let got: i32 = out.put::<u8>(ch.apply_vector_form(raw)).into();
                assert_eq!(got, want, "t {t} mult {mult} raw {raw} add {add}");
                let want: i32 = out.put::<i8>(ch.apply(raw)).into();
                let got: i32 = out.put::<i8>(ch.apply_vector_form(raw)).into();
                assert_eq!(got, want, "t {t} mult {mult} raw {raw} add {add}");
            }
            // The scalar form is exact for every input, not only in range.
            assert_eq!(
                ch.apply_scalar(raw),
                ch.apply(raw),
                "t {t} mult {mult} raw {raw} add {add}"
            );
        }
    }
}

/// The row form of the output stage, with each bound of the range left to
/// the type's saturation where it is the type's own, is the definition.
#[test]
fn row_output_stage_matches_the_definition_for_every_kind_of_range() {
    // Shifts either side of the high-word form's (`t >= 33`) and at its
    // ends; zero points the folded form takes and ones it must refuse (at
    // `t = 62` only zero fits); rows of whole quads of outputs and not (the
    // Arm DSP form's unit).
    fn rows<Y: Q8>(rng: &mut Rng) {
        for t in [20u32, 31, 33, 34, 40, 50, 61, 62] {
            let mult = (1 << 30) + (rng.next() % (1 << 30)) as i32;
            let ch = Chan::new(rng.int(-1000, 1000), Scale { mult, shift: t as i32 - 31 });
            let (lo, hi) = (Y::MIN, Y::MAX);
            let zeros = [rng.int(-20, 20), 0, 1, -1, MAX_ZERO, -MAX_ZERO, rng.int(-3000, 3000)];
            let ranges = [(lo, hi), (lo + 40, hi), (lo, hi - 30), (lo + 7, hi - 100)];
            for ((min, max), (zero, len)) in ranges.into_iter().flat_map(|r| {
                zeros.into_iter().zip([37, 0, 1, 3, 4, 5, 8, 16]).map(move |z| (r, z))
            }) {
                let out = OutRange { zero, min, max };
                let acc: Vec<i32> = (0..len)
                    .map(|i| {
                        if i % 5 == 0 {
                            rng.int(i32::MIN, i32::MAX)
                        } else {
                            rng.int(-1 << 22, 1 << 22)
                        }
                    })
                    .collect();
                let mut got = vec![Y::default(); acc.len()];
                splat_row(&acc, &ch, &out, &mut got);
                let want: Vec<Y> = acc.iter().map(|&a| out.put(ch.apply(a))).collect();
                assert_eq!(got, want, "t {t} zero {zero} range {min}..={max} len {len}");
            }
        }
    }
    let mut rng = Rng::new(41);
    rows::<i8>(&mut rng);
    rows::<u8>(&mut rng);
}

/// The reference product: `y[i, j]` from the definition (`w` is `[k, n]`).
#[allow(clippy::too_many_arguments)]
fn matmul_ref<A: Q8, Y: Q8>(
    m: usize,
    n: usize,
    k: usize,
    a: &[A],
    za: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
) -> Vec<Y> {
    let mut y = vec![Y::default(); m * n];
    for i in 0..m {
        for j in 0..n {
            let mut acc = bias.map_or(0i32, |b| b[j]);
            for kk in 0..k {
                acc = acc.wrapping_add((a[i * k + kk].get() - za) * i32::from(w[kk * n + j]));
            }
            let s = rq.scale(j);
            y[i * n + j] = Y::saturate(requant_ref(s, acc, rq.zero, rq.min, rq.max));
        }
    }
    y
}

fn transpose(w: &[i8], k: usize, n: usize) -> Vec<i8> {
    (0..n * k).map(|i| w[(i % k) * n + i / k]).collect()
}

fn check_matmul<A: Q8, Y: Q8>(rng: &mut Rng, m: usize, n: usize, k: usize, case: usize) {
    let a = rng.q8::<A>(m * k);
    let w = rng.i8s(k * n);
    let za = match case % 3 {
        0 => A::MIN,
        1 => A::MAX,
        _ => rng.int(A::MIN, A::MAX),
    };
    let bias: Vec<i32> = (0..n).map(|_| rng.int(-100_000, 100_000)).collect();
    let bias = (case % 4 != 3).then_some(&bias[..]);
    let sc = scales(rng, n, case.is_multiple_of(2));
    let (min, max) = match case % 5 {
        0 => (Y::MIN, Y::MAX),
        1 => (Y::MIN + 20, Y::MAX - 50),
        _ => (rng.int(Y::MIN, 0), rng.int(1, Y::MAX)),
    };
    let zero = rng.int(Y::MIN, Y::MAX);
    let rq = Requant { scales: &sc, zero, min, max };
    let p = QMatMul { m, n, k, a_zero: za };
    let want = matmul_ref::<A, Y>(m, n, k, &a, za, &w, bias, &rq);
    let mut packed = vec![0i8; packed_len(k, n)];
    pack_weights(&w, k, n, false, &mut packed).unwrap();
    let mut packed_t = vec![0i8; packed_len(k, n)];
    pack_weights(&transpose(&w, k, n), k, n, true, &mut packed_t).unwrap();
    assert_eq!(packed, packed_t);
    let mut y = vec![Y::default(); m * n];
    qmatmul(&p, &a, QWeights::Packed(&packed), bias, &rq, &mut y).unwrap();
    assert_eq!(y, want, "packed {m}x{n}x{k} case {case}");
    let mut y = vec![Y::default(); m * n];
    qmatmul(&p, &a, QWeights::Dense { w: &w, trans: false }, bias, &rq, &mut y).unwrap();
    assert_eq!(y, want, "dense {m}x{n}x{k} case {case}");
    let wt = transpose(&w, k, n);
    qmatmul(&p, &a, QWeights::Dense { w: &wt, trans: true }, bias, &rq, &mut y).unwrap();
    assert_eq!(y, want, "dense^T {m}x{n}x{k} case {case}");
}

#[test]
fn qmatmul_matches_the_definition() {
    let mut rng = Rng::new(11);
    let mut case = 0;
    for &m in &[1, 2, 3, 5, 8, 9, 17] {
        for &n in &[1, 3, 15, 16, 17, 33, 50] {
            for &k in &[0, 1, 3, 4, 5, 15, 16, 17, 63, 130] {
                case += 1;
                check_matmul::<u8, u8>(&mut rng, m, n, k, case);
                check_matmul::<i8, i8>(&mut rng, m, n, k, case + 1);
                check_matmul::<u8, i8>(&mut rng, m, n, k, case + 2);
                check_matmul::<i8, u8>(&mut rng, m, n, k, case + 3);
            }
        }
    }
    check_matmul::<u8, u8>(&mut rng, 70, 96, 300, 0);
    check_matmul::<i8, i8>(&mut rng, 33, 40, 1000, 1);
}

/// `qmatmul_float` against its parts: `QuantizeLinear` (the reference
/// kernel), `qmatmul`, `DequantizeLinear`, for each pairing of float and
/// quantized ends.
fn check_matmul_float<A: Q8 + crate::quant::QInt, Y: Q8 + crate::quant::QInt>(
    rng: &mut Rng,
    m: usize,
    n: usize,
    k: usize,
    case: usize,
) {
    use crate::quant::{QuantAxis, Work, dequantize_linear, quantize_linear};
    // Values around the quantization's range, beyond it at times, some
    // halfway between two steps (ties go to even), a NaN now and then.
    let (xs, xz) =
        (0.05 + (rng.next() % 100) as f32 / 400.0, rng.int(<A as Q8>::MIN, <A as Q8>::MAX));
    let x: Vec<f32> = (0..m * k)
        .map(|_| match rng.next() % 16 {
            0 => f32::NAN,
            1 => (rng.int(-300, 300) as f32 + 0.5) * xs,
            _ => (rng.int(-400_000, 400_000) as f32) * 1e-3,
        })
        .collect();
    let w = rng.i8s(k * n);
    let bias: Vec<i32> = (0..n).map(|_| rng.int(-100_000, 100_000)).collect();
    let bias = (case % 4 != 3).then_some(&bias[..]);
    let sc = scales(rng, n, case.is_multiple_of(2));
    let zero = rng.int(<Y as Q8>::MIN, <Y as Q8>::MAX);
    let rq = Requant { scales: &sc, zero, min: <Y as Q8>::MIN, max: <Y as Q8>::MAX };
    let p = QMatMul { m, n, k, a_zero: xz };
    let mut packed = vec![0i8; packed_len(k, n)];
    pack_weights(&w, k, n, false, &mut packed).unwrap();
    // The parts.
    let axis = QuantAxis { outer: 1, axis: m * k, inner: 1, block: 0 };
    let mut a = vec![A::default(); m * k];
    quantize_linear(&axis, Work::F32, &x, &[xs], Some(&[<A as Q8>::saturate(xz)]), &mut a).unwrap();
    let mut yq = vec![Y::default(); m * n];
    qmatmul(&p, &a, QWeights::Packed(&packed), bias, &rq, &mut yq).unwrap();
    let ys = 0.01 + (rng.next() % 100) as f32 / 1000.0;
    let axis = QuantAxis { outer: 1, axis: m * n, inner: 1, block: 0 };
    let mut yf = vec![0f32; m * n];
    dequantize_linear(&axis, &yq, &[ys], Some(&[<Y as Q8>::saturate(zero)]), &mut yf).unwrap();
    // Fused, each pairing.
    let (xq, yql) = (QLinear { scale: xs, zero: xz }, QLinear { scale: ys, zero });
    let mut scratch = vec![A::default(); qmatmul_float_scratch_len(&p, true)];
    let what = format!("{m}x{n}x{k} case {case}");
    let mut got = vec![0f32; m * n];
    let rows = QRows::Float { x: &x, q: xq };
    let dest: QDest<'_, Y> = QDest::Float { y: &mut got, q: yql };
    qmatmul_float(&p, rows, &packed, bias, &rq, dest, &mut scratch).unwrap();
    assert_eq!(
        got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        yf.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "float to float {what}"
    );
    let mut got = vec![Y::default(); m * n];
    let dest = QDest::Quantized(&mut got[..]);
    qmatmul_float(&p, rows, &packed, bias, &rq, dest, &mut scratch).unwrap();
    assert_eq!(got, yq, "float to quantized {what}");
    let mut got = vec![0f32; m * n];
    let dest: QDest<'_, Y> = QDest::Float { y: &mut got, q: yql };
    qmatmul_float(&p, QRows::Quantized(&a), &packed, bias, &rq, dest, &mut []).unwrap();
    assert_eq!(got, yf, "quantized to float {what}");
}

#[test]
fn qmatmul_float_is_quantize_qmatmul_dequantize() {
    let mut rng = Rng::new(12);
    let mut case = 0;
    for &m in &[1, 2, 5, 9] {
        for &n in &[1, 16, 17, 40] {
            for &k in &[1, 3, 4, 63, 64, 65, 130, 640] {
                case += 1;
                check_matmul_float::<i8, i8>(&mut rng, m, n, k, case);
                check_matmul_float::<u8, i8>(&mut rng, m, n, k, case + 1);
                check_matmul_float::<i8, u8>(&mut rng, m, n, k, case + 2);
                check_matmul_float::<u8, u8>(&mut rng, m, n, k, case + 3);
            }
        }
    }
    // Short scratch, a zero point outside the type, a bad scale: refused.
    let p = QMatMul { m: 2, n: 3, k: 5, a_zero: 0 };
    let mut packed = vec![0i8; packed_len(5, 3)];
    pack_weights(&[1; 15], 5, 3, false, &mut packed).unwrap();
    let (sc, x) = ([Scale::from_real(0.5).unwrap()], [1.0f32; 10]);
    let rq = Requant { scales: &sc, zero: 0, min: -128, max: 127 };
    let q = QLinear { scale: 0.1, zero: 0 };
    let mut y = [0i8; 6];
    let mut short = [0i8; 64];
    let r = qmatmul_float(
        &p,
        QRows::Float { x: &x, q },
        &packed,
        None,
        &rq,
        QDest::Quantized(&mut y[..]),
        &mut short,
    );
    assert_eq!(r, Err(Error::ShapeMismatch));
    let mut scratch = [0i8; 128];
    let bad = QLinear { scale: 0.1, zero: 200 };
    let r = qmatmul_float(
        &p,
        QRows::Float { x: &x, q: bad },
        &packed,
        None,
        &rq,
        QDest::Quantized(&mut y[..]),
        &mut scratch,
    );
    assert_eq!(r, Err(Error::InvalidParams));
    let mut yf = [0f32; 6];
    let bad = QLinear { scale: f32::NAN, zero: 0 };
    let r = qmatmul_float::<i8, i8>(
        &p,
        QRows::Float { x: &x, q },
        &packed,
        None,
        &rq,
        QDest::Float { y: &mut yf, q: bad },
        &mut scratch,
    );
    assert_eq!(r, Err(Error::InvalidParams));
}

#[test]
fn qmatmul_extremes_saturate_alike() {
    // All 255 times all -128 over long sums, the widest zero points.
    for (av, za) in [(255u8, 0), (0, 255), (255, 255), (128, 0)] {
        let (m, n, k) = (5, 20, 2051);
        let a = vec![av; m * k];
        let w = vec![-128i8; k * n];
        let sc = [Scale::from_real(1e-5).unwrap()];
        let rq = Requant { scales: &sc, zero: 3, min: 0, max: 255 };
        let p = QMatMul { m, n, k, a_zero: za };
        let want = matmul_ref::<u8, u8>(m, n, k, &a, za, &w, None, &rq);
        let mut packed = vec![0i8; packed_len(k, n)];
        pack_weights(&w, k, n, false, &mut packed).unwrap();
        let mut y = vec![0u8; m * n];
        qmatmul(&p, &a, QWeights::Packed(&packed), None, &rq, &mut y).unwrap();
        assert_eq!(y, want);
    }
}

#[test]
fn qmatmul_refuses_bad_arguments() {
    let (m, n, k) = (2, 3, 5);
    let a = vec![0u8; m * k];
    let w = vec![0i8; k * n];
    let mut packed = vec![0i8; packed_len(k, n)];
    pack_weights(&w, k, n, false, &mut packed).unwrap();
    let sc = [Scale::from_real(0.1).unwrap()];
    let rq = Requant { scales: &sc, zero: 0, min: 0, max: 255 };
    let p = QMatMul { m, n, k, a_zero: 0 };
    let mut y = vec![0u8; m * n];
    let w_ok = QWeights::Packed(&packed);
    assert_eq!(qmatmul(&p, &a[1..], w_ok, None, &rq, &mut y), Err(Error::ShapeMismatch));
    assert_eq!(qmatmul(&p, &a, w_ok, None, &rq, &mut y[1..]), Err(Error::ShapeMismatch));
    let short = QWeights::Packed(&packed[1..]);
    assert_eq!(qmatmul(&p, &a, short, None, &rq, &mut y), Err(Error::ShapeMismatch));
    let dense = QWeights::Dense { w: &w[1..], trans: false };
    assert_eq!(qmatmul(&p, &a, dense, None, &rq, &mut y), Err(Error::ShapeMismatch));
    assert_eq!(qmatmul(&p, &a, w_ok, Some(&[0, 0]), &rq, &mut y), Err(Error::ShapeMismatch));
    let two = [sc[0]; 2];
    let bad = Requant { scales: &two, ..rq };
    assert_eq!(qmatmul(&p, &a, w_ok, None, &bad, &mut y), Err(Error::ShapeMismatch));
    let bad = Requant { min: -1, ..rq };
    assert_eq!(qmatmul(&p, &a, w_ok, None, &bad, &mut y), Err(Error::InvalidParams));
    let bad = Requant { min: 9, max: 8, ..rq };
    assert_eq!(qmatmul(&p, &a, w_ok, None, &bad, &mut y), Err(Error::InvalidParams));
    let bad_scale = [Scale { mult: 5, shift: 0 }];
    let bad = Requant { scales: &bad_scale, ..rq };
    assert_eq!(qmatmul(&p, &a, w_ok, None, &bad, &mut y), Err(Error::InvalidParams));
    let bad = QMatMul { a_zero: 256, ..p };
    assert_eq!(qmatmul(&bad, &a, w_ok, None, &rq, &mut y), Err(Error::InvalidParams));
    assert_eq!(pack_weights(&w[1..], k, n, false, &mut packed), Err(Error::ShapeMismatch));
    assert_eq!(pack_weights(&w, k, n, false, &mut packed[1..]), Err(Error::ShapeMismatch));
    assert_eq!(packed_len(usize::MAX, 2), usize::MAX);
}

#[test]
fn packed_layout_is_as_documented() {
    let (k, n) = (6, 18);
    let w: Vec<i8> = (0..k * n).map(|i| (i as i32 - 50) as i8).collect();
    let mut p = vec![0i8; packed_len(k, n)];
    pack_weights(&w, k, n, false, &mut p).unwrap();
    assert_eq!(p.len(), 4 * 32 + 32 * 8);
    let sum = |j: usize| i32::from_le_bytes(core::array::from_fn(|b| p[4 * j + b] as u8));
    for j in 0..32 {
        let want: i32 = if j < n { (0..k).map(|kk| i32::from(w[kk * n + j])).sum() } else { 0 };
        assert_eq!(sum(j), want);
    }
    let body = &p[128..];
    // Strip 1, group 1, column 1 (j = 17): k = 4, 5, then zeros.
    let at = 8 * 16 + 64 + 4;
    assert_eq!(&body[at..at + 4], &[w[4 * n + 17], w[5 * n + 17], 0, 0]);
    // Strip 0, group 0, column 3.
    assert_eq!(&body[12..16], &[w[3], w[n + 3], w[2 * n + 3], w[3 * n + 3]]);
}

/// A convolution case: the geometry and the buffers' shapes.
struct ConvCase {
    n: usize,
    c: usize,
    m: usize,
    groups: usize,
    in_dims: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pads: Vec<usize>,
    pads_end: Vec<usize>,
}

impl ConvCase {
    fn out_dims(&self) -> Vec<usize> {
        (0..self.in_dims.len())
            .map(|i| {
                let span = self.dilations[i] * (self.kernel[i] - 1) + 1;
                (self.in_dims[i] + self.pads[i] + self.pads_end[i] - span) / self.strides[i] + 1
            })
            .collect()
    }
}

/// Each output from the definition, in the test's own loops (any rank up
/// to 3).
#[allow(clippy::too_many_arguments)]
fn conv_ref<A: Q8, Y: Q8>(
    cc: &ConvCase,
    x: &[A],
    zx: i32,
    w: &[i8],
    bias: Option<&[i32]>,
    rq: &Requant<'_>,
) -> Vec<Y> {
    let out = cc.out_dims();
    let r = cc.in_dims.len();
    let pad3 = |v: &[usize], fill: usize| -> [usize; 3] {
        core::array::from_fn(|i| if i + r >= 3 { v[i + r - 3] } else { fill })
    };
    let (id, od, kd) = (pad3(&cc.in_dims, 1), pad3(&out, 1), pad3(&cc.kernel, 1));
    let (sd, dd, pd) = (pad3(&cc.strides, 1), pad3(&cc.dilations, 1), pad3(&cc.pads, 0));
    let (cg, mg) = (cc.c / cc.groups, cc.m / cc.groups);
    let (isz, osz, ksz) =
        (id.iter().product::<usize>(), od.iter().product::<usize>(), kd.iter().product::<usize>());
    let mut y = vec![Y::default(); cc.n * cc.m * osz];
    for b in 0..cc.n {
        for m in 0..cc.m {
            let g = m / mg;
            for o in 0..osz {
                let opos = [o / (od[1] * od[2]), o / od[2] % od[1], o % od[2]];
                let mut acc = bias.map_or(0i32, |v| v[m]);
                for ci in 0..cg {
                    for t in 0..ksz {
                        let kp = [t / (kd[1] * kd[2]), t / kd[2] % kd[1], t % kd[2]];
                        let mut at = 0;
                        let mut inside = true;
                        for d in 0..3 {
                            let pos = (opos[d] * sd[d] + kp[d] * dd[d]) as isize - pd[d] as isize;
                            inside &= pos >= 0 && (pos as usize) < id[d];
                            at = at * id[d] + pos.max(0) as usize;
                        }
                        let xv =
                            if inside { x[(b * cc.c + g * cg + ci) * isz + at].get() } else { zx };
                        acc = acc.wrapping_add((xv - zx) * i32::from(w[(m * cg + ci) * ksz + t]));
                    }
                }
                let s = rq.scale(m);
                y[(b * cc.m + m) * osz + o] =
                    Y::saturate(requant_ref(s, acc, rq.zero, rq.min, rq.max));
            }
        }
    }
    y
}

/// Returns whether the case also ran in place.
fn check_conv<A: Q8, Y: Q8>(rng: &mut Rng, cc: &ConvCase, case: usize) -> bool {
    let out = cc.out_dims();
    let window = Window {
        in_dims: &cc.in_dims,
        out_dims: &out,
        kernel: &cc.kernel,
        strides: &cc.strides,
        dilations: &cc.dilations,
        pads_begin: &cc.pads,
        pads_end: &cc.pads_end,
    };
    let p = Conv { batch: cc.n, in_channels: cc.c, out_channels: cc.m, groups: cc.groups, window };
    let isz: usize = cc.in_dims.iter().product();
    let osz: usize = out.iter().product();
    let ksz: usize = cc.kernel.iter().product();
    let x = rng.q8::<A>(cc.n * cc.c * isz);
    let w = rng.i8s(cc.m * cc.c / cc.groups * ksz);
    let zx = match case % 3 {
        0 => A::MIN,
        1 => A::MAX,
        _ => rng.int(A::MIN, A::MAX),
    };
    let bias: Vec<i32> = (0..cc.m).map(|_| rng.int(-50_000, 50_000)).collect();
    let bias = (case % 4 != 1).then_some(&bias[..]);
    let sc = scales(rng, cc.m, case.is_multiple_of(2));
    let (min, max) = if case % 3 == 2 { (Y::MIN + 30, Y::MAX - 7) } else { (Y::MIN, Y::MAX) };
    let rq = Requant { scales: &sc, zero: rng.int(Y::MIN, Y::MAX), min, max };
    let want = conv_ref::<A, Y>(cc, &x, zx, &w, bias, &rq);
    let mut packed = vec![0i8; packed_conv_len(&p)];
    pack_conv_weights(&p, &w, &mut packed).unwrap();
    let mut scratch = vec![A::default(); qconv_scratch_len(&p)];
    let mut y = vec![Y::default(); cc.n * cc.m * osz];
    qconv(&p, &x, zx, QConvWeights::Packed(&packed), bias, &rq, &mut y, &mut scratch).unwrap();
    assert_eq!(y, want, "packed conv case {case}: {:?} {:?}", cc.in_dims, cc.kernel);
    let mut y = vec![Y::default(); cc.n * cc.m * osz];
    qconv(&p, &x, zx, QConvWeights::Dense(&w), bias, &rq, &mut y, &mut scratch).unwrap();
    assert_eq!(y, want, "dense conv case {case}");
    // With the residual `Add` fused: `qadd` of the output and a residual.
    if qconv_add_runs(&p) {
        let r = rng.q8::<Y>(y.len());
        let s = add_scales(0.02, 0.035, if case.is_multiple_of(2) { 0.05 } else { 0.011 }).unwrap();
        let res = QResidual {
            zero: rng.int(Y::MIN, Y::MAX),
            scales: s,
            out: QOut { zero: rng.int(Y::MIN + 10, Y::MAX - 10), min: Y::MIN, max: Y::MAX - 3 },
        };
        let mut sum = vec![Y::default(); y.len()];
        qadd(&want, rq.zero, &r, res.zero, &s, &mut sum, &res.out).unwrap();
        let mut fused = r.clone();
        qconv_add(&p, &x, zx, &packed, bias, &rq, &res, &mut fused, &mut scratch).unwrap();
        assert_eq!(fused, sum, "conv + add case {case}: {:?} {:?}", cc.in_dims, cc.kernel);
    } else {
        let mut y = vec![Y::default(); cc.n * cc.m * osz];
        let res = QResidual {
            zero: 0,
            scales: add_scales(0.02, 0.02, 0.04).unwrap(),
            out: QOut { zero: 0, min: Y::MIN, max: Y::MAX },
        };
        let r = qconv_add(&p, &x, zx, &packed, bias, &rq, &res, &mut y, &mut scratch);
        assert_eq!(r, Err(Error::InvalidParams), "case {case}");
    }
    // In place, where it runs so and the output's type is the input's.
    if A::SIGNED == Y::SIGNED && qconv_runs_in_place(&p) {
        let mut xy = x.clone();
        qconv_in_place(&p, &mut xy, zx, &packed, bias, &rq, &mut scratch).unwrap();
        assert_eq!(A::as_bytes(&xy), Y::as_bytes(&want), "in-place conv case {case}");
        return true;
    }
    false
}

fn conv_cases() -> Vec<ConvCase> {
    let mut v = Vec::new();
    let two = |a: usize, b: usize| vec![a, b];
    // (c, m, groups, in, kernel, stride, dilation, pads, pads_end)
    for &(c, m, g, i, k, s, d, pb, pe) in &[
        (3, 5, 1, (7, 9), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (16, 17, 1, (5, 6), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (5, 9, 1, (6, 11), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (4, 8, 1, (9, 9), (1, 1), (2, 2), (1, 1), (0, 0), (0, 0)),
        (6, 7, 1, (8, 7), (3, 2), (2, 1), (1, 2), (2, 0), (1, 3)),
        (2, 3, 1, (4, 4), (4, 4), (1, 1), (1, 1), (3, 3), (3, 3)),
        (8, 12, 2, (6, 6), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (6, 9, 3, (5, 7), (2, 3), (2, 2), (2, 1), (1, 0), (0, 2)),
        (12, 24, 4, (4, 4), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (7, 7, 7, (9, 10), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (5, 5, 5, (8, 8), (3, 3), (2, 2), (1, 1), (1, 1), (0, 0)),
        (3, 3, 3, (7, 12), (5, 3), (1, 2), (2, 1), (4, 0), (2, 3)),
        (4, 4, 4, (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        // Wide rows at stride 2 (a stem's: the phases copied a word at a
        // time) and 3.
        (3, 8, 1, (9, 37), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        (3, 8, 1, (6, 40), (3, 3), (1, 2), (1, 1), (0, 2), (1, 0)),
        (2, 4, 1, (7, 30), (3, 3), (3, 3), (1, 1), (1, 1), (0, 2)),
        // In place (`qconv_in_place`): pointwise over several blocks,
        // grouped pointwise, depthwise of KWS's and other shapes.
        (64, 64, 1, (25, 5), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (32, 32, 1, (20, 21), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (12, 12, 3, (9, 11), (1, 1), (1, 1), (1, 1), (0, 0), (0, 0)),
        (16, 16, 16, (25, 5), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (6, 6, 6, (9, 9), (5, 5), (1, 1), (1, 1), (2, 2), (2, 2)),
        (2, 2, 2, (3, 70), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (4, 4, 4, (25, 5), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (3, 3, 3, (9, 8), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        (3, 3, 3, (10, 11), (3, 3), (2, 2), (1, 1), (0, 0), (1, 1)),
        (2, 2, 2, (6, 9), (3, 3), (1, 2), (1, 1), (1, 1), (0, 0)),
        (33, 20, 1, (12, 13), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (64, 9, 1, (20, 20), (3, 3), (2, 2), (1, 1), (1, 1), (1, 1)),
        // Rows wider than a block (split into pieces), a kernel smaller
        // than its stride (a phase per tap), phases with dilation.
        (2, 5, 1, (3, 150), (3, 3), (1, 1), (1, 1), (1, 1), (1, 1)),
        (3, 4, 1, (11, 13), (2, 2), (3, 3), (1, 1), (0, 1), (1, 0)),
        (4, 6, 1, (10, 11), (1, 1), (3, 3), (1, 1), (1, 1), (1, 1)),
        (3, 5, 1, (13, 14), (2, 2), (4, 4), (2, 2), (1, 1), (0, 0)),
        (3, 4, 1, (9, 40), (2, 3), (1, 3), (3, 2), (2, 1), (1, 2)),
    ] {
        for n in [1, 2] {
            v.push(ConvCase {
                n,
                c,
                m,
                groups: g,
                in_dims: two(i.0, i.1),
                kernel: two(k.0, k.1),
                strides: two(s.0, s.1),
                dilations: two(d.0, d.1),
                pads: two(pb.0, pb.1),
                pads_end: two(pe.0, pe.1),
            });
        }
    }
    // 1-d and 3-d.
    v.push(ConvCase {
        n: 1,
        c: 5,
        m: 6,
        groups: 1,
        in_dims: vec![19],
        kernel: vec![3],
        strides: vec![2],
        dilations: vec![2],
        pads: vec![2],
        pads_end: vec![1],
    });
    // A 1-d row longer than a block, dilated.
    v.push(ConvCase {
        n: 1,
        c: 3,
        m: 5,
        groups: 1,
        in_dims: vec![300],
        kernel: vec![5],
        strides: vec![1],
        dilations: vec![3],
        pads: vec![4],
        pads_end: vec![2],
    });
    v.push(ConvCase {
        n: 1,
        c: 4,
        m: 4,
        groups: 4,
        in_dims: vec![17],
        kernel: vec![5],
        strides: vec![1],
        dilations: vec![1],
        pads: vec![2],
        pads_end: vec![2],
    });
    v.push(ConvCase {
        n: 2,
        c: 4,
        m: 6,
        groups: 2,
        in_dims: vec![3, 4, 5],
        kernel: vec![2, 2, 3],
        strides: vec![1, 2, 1],
        dilations: vec![1, 1, 2],
        pads: vec![1, 0, 1],
        pads_end: vec![0, 1, 1],
    });
    v
}

#[test]
fn qconv_matches_the_definition() {
    let mut rng = Rng::new(5);
    let mut in_place = 0;
    for (case, cc) in conv_cases().iter().enumerate() {
        in_place += usize::from(check_conv::<u8, u8>(&mut rng, cc, case));
        in_place += usize::from(check_conv::<i8, i8>(&mut rng, cc, case + 1));
        assert!(!check_conv::<u8, i8>(&mut rng, cc, case + 2));
        assert!(!check_conv::<i8, u8>(&mut rng, cc, case + 5));
    }
    // The 19 cases of 1x1 or depthwise windows whose output has the
    // input's shape, each as u8 and as i8.
    assert_eq!(in_place, 2 * 19, "in-place cases");
}

#[test]
fn qconv_scratch_stays_small() {
    let cc = ConvCase {
        n: 1,
        c: 512,
        m: 8,
        groups: 1,
        in_dims: vec![64, 64],
        kernel: vec![3, 3],
        strides: vec![1, 1],
        dilations: vec![1, 1],
        pads: vec![1, 1],
        pads_end: vec![1, 1],
    };
    let out = cc.out_dims();
    let window = Window {
        in_dims: &cc.in_dims,
        out_dims: &out,
        kernel: &cc.kernel,
        strides: &cc.strides,
        dilations: &cc.dilations,
        pads_begin: &cc.pads,
        pads_end: &cc.pads_end,
    };
    let p = Conv { batch: 1, in_channels: 512, out_channels: 8, groups: 1, window };
    // K = 4608: a widened weight row, two strips a block, a row in pieces
    // of 32 columns (phase rows of 34 bytes), the three input rows of every
    // channel behind them.
    assert_eq!(qconv_scratch_len(&p), 2 * 4608 + 32 * 4608 + 512 * 3 * 34);
    let p = Conv { in_channels: 16, ..p };
    // K = 144: two output rows a block (eight strips), the four input rows
    // of 66 bytes behind them.
    assert_eq!(qconv_scratch_len(&p), 2 * 144 + 128 * 144 + 16 * 4 * 66);
    // Depthwise: one padded 66x66 plane and the slack.
    let p = Conv { in_channels: 8, groups: 8, ..p };
    assert_eq!(qconv_scratch_len(&p), 66 * 66 + 16);
}

#[test]
fn qconv_refuses_bad_arguments() {
    let window = Window {
        in_dims: &[4, 4],
        out_dims: &[4, 4],
        kernel: &[3, 3],
        strides: &[1, 1],
        dilations: &[1, 1],
        pads_begin: &[1, 1],
        pads_end: &[1, 1],
    };
    let p = Conv { batch: 1, in_channels: 2, out_channels: 3, groups: 1, window };
    let x = vec![0u8; 32];
    let w = vec![0i8; 54];
    let mut packed = vec![0i8; packed_conv_len(&p)];
    pack_conv_weights(&p, &w, &mut packed).unwrap();
    let sc = [Scale::from_real(0.1).unwrap()];
    let rq = Requant { scales: &sc, zero: 0, min: 0, max: 255 };
    let mut y = vec![0u8; 48];
    let mut scratch = vec![0u8; qconv_scratch_len(&p)];
    let wp = QConvWeights::Packed(&packed);
    assert_eq!(qconv(&p, &x, 0, wp, None, &rq, &mut y, &mut scratch), Ok(()));
    let short = &mut scratch[1..];
    assert_eq!(qconv(&p, &x, 0, wp, None, &rq, &mut y, short), Err(Error::ShapeMismatch));
    assert_eq!(
        qconv(&p, &x[1..], 0, wp, None, &rq, &mut y, &mut scratch),
        Err(Error::ShapeMismatch)
    );
    assert_eq!(
        qconv(&p, &x, 0, wp, None, &rq, &mut y[1..], &mut scratch),
        Err(Error::ShapeMismatch)
    );
    let bad = QConvWeights::Packed(&packed[1..]);
    assert_eq!(qconv(&p, &x, 0, bad, None, &rq, &mut y, &mut scratch), Err(Error::ShapeMismatch));
    let bad = QConvWeights::Dense(&w[1..]);
    assert_eq!(qconv(&p, &x, 0, bad, None, &rq, &mut y, &mut scratch), Err(Error::ShapeMismatch));
    assert_eq!(qconv(&p, &x, -1, wp, None, &rq, &mut y, &mut scratch), Err(Error::InvalidParams));
    let g = Conv { groups: 2, ..p };
    assert_eq!(qconv(&g, &x, 0, wp, None, &rq, &mut y, &mut scratch), Err(Error::InvalidParams));
    assert_eq!(pack_conv_weights(&p, &w[1..], &mut packed), Err(Error::ShapeMismatch));
    // Not in place: a 3x3 product's blocks read positions its stores
    // overwrite (even with as many output channels as input ones).
    let q = Conv { out_channels: 2, ..p };
    let mut xy = x.clone();
    assert!(!qconv_runs_in_place(&q));
    assert_eq!(
        qconv_in_place(&q, &mut xy, 0, &packed, None, &rq, &mut scratch),
        Err(Error::InvalidParams)
    );
}

/// The quantized Add by tables (the 32-bit Arm form) gives the integer
/// formulation's results exactly, `i8` and `u8`, full and narrowed output
/// ranges, at output scales of total shift 31 (its own branch) and above.
#[test]
fn add_by_tables_matches_the_definition() {
    use crate::simd::q8::elementwise::add_by_tables;
    fn one<T: Q8>(rng: &mut Rng, s: &AddScales, out: &QOut) {
        let (a, b) = (rng.q8::<T>(257), rng.q8::<T>(257));
        let (za, zb) = (rng.int(T::MIN, T::MAX), rng.int(T::MIN, T::MAX));
        let mut y = vec![T::default(); 257];
        assert!(add_by_tables(&a, za, &b, zb, s, &mut y, out));
        for i in 0..257 {
            let da = s.a.apply((a[i].get() - za) << s.left_shift);
            let db = s.b.apply((b[i].get() - zb) << s.left_shift);
            let want = requant_ref(s.out, da + db, out.zero, out.min, out.max);
            assert_eq!(y[i].get(), want, "{i} {s:?} {out:?}");
        }
    }
    let mut rng = Rng::new(10);
    // `twice / (2^20 sy)` in [1/2, 1): a total shift of 31.
    let t31 = |sa: f64, sb: f64, r: f64| 2.0 * sa.max(sb) / (1048576.0 * r);
    for (sa, sb, sy) in [
        (0.02, 0.03, 0.05),
        (0.5, 0.001, 0.1),
        (1.0, 2.0, 0.01),
        (0.03, 0.01, t31(0.03, 0.01, 0.75)),
        (0.03, 0.03, t31(0.03, 0.03, 0.999)),
    ] {
        let s = add_scales(sa, sb, sy).unwrap();
        let (zi, zu) = (rng.int(-128, 127), rng.int(0, 255));
        one::<i8>(&mut rng, &s, &QOut { zero: zi, min: -128, max: 127 });
        one::<i8>(&mut rng, &s, &QOut { zero: -7, min: -100, max: 90 });
        one::<u8>(&mut rng, &s, &QOut { zero: zu, min: 0, max: 255 });
        one::<u8>(&mut rng, &s, &QOut { zero: 128, min: 128, max: 250 });
    }
    assert_eq!(add_scales(0.03, 0.01, t31(0.03, 0.01, 0.75)).unwrap().out.total_shift(), 31);
}

#[test]
fn elementwise_match_their_definitions() {
    let mut rng = Rng::new(9);
    for (sa, sb, sy) in [(0.02, 0.03, 0.05), (0.5, 0.001, 0.1), (0.1, 0.1, 0.1), (1.0, 2.0, 0.01)] {
        let s = add_scales(sa, sb, sy).unwrap();
        let (a, b) = (rng.q8::<u8>(300), rng.q8::<u8>(300));
        let (za, zb) = (rng.int(0, 255), rng.int(0, 255));
        let out = QOut { zero: rng.int(0, 255), min: 0, max: 255 };
        let mut y = vec![0u8; 300];
        qadd(&a, za, &b, zb, &s, &mut y, &out).unwrap();
        for i in 0..300 {
            let f =
                (sa * f64::from(i32::from(a[i]) - za) + sb * f64::from(i32::from(b[i]) - zb)) / sy;
            let want = (f64::from(out.zero) + f).round().clamp(0.0, 255.0);
            assert!((f64::from(y[i]) - want).abs() <= 1.0, "{i}: {} vs {want}", y[i]);
            // The integer formulation exactly.
            let da = s.a.apply((i32::from(a[i]) - za) << 20);
            let db = s.b.apply((i32::from(b[i]) - zb) << 20);
            let v = requant_ref(s.out, da + db, out.zero, 0, 255);
            assert_eq!(i32::from(y[i]), v);
        }
        // Signed, with a narrower output range (a fused Relu or Clip).
        let (a, b) = (rng.q8::<i8>(300), rng.q8::<i8>(300));
        let out = QOut { zero: -7, min: -100, max: 90 };
        let mut y = vec![0i8; 300];
        qadd(&a, 5, &b, -128, &s, &mut y, &out).unwrap();
        for i in 0..300 {
            let da = s.a.apply((i32::from(a[i]) - 5) << 20);
            let db = s.b.apply((i32::from(b[i]) + 128) << 20);
            assert_eq!(i32::from(y[i]), requant_ref(s.out, da + db, -7, -100, 90), "{i}");
        }
        let ms = mul_scale(sa, sb, sy).unwrap();
        let (a, b) = (rng.q8::<i8>(300), rng.q8::<i8>(300));
        let out = QOut { zero: -3, min: -100, max: 120 };
        let mut y = vec![0i8; 300];
        qmul(&a, -128, &b, 127, ms, &mut y, &out).unwrap();
        for i in 0..300 {
            let v = (i32::from(a[i]) + 128) * (i32::from(b[i]) - 127);
            assert_eq!(i32::from(y[i]), requant_ref(ms, v, -3, -100, 120));
        }
    }
    let table: [i8; 256] = core::array::from_fn(|i| (i as u8 as i8).wrapping_mul(3));
    let x = rng.q8::<i8>(100);
    let mut y = vec![0i8; 100];
    qlookup(&x, &table, &mut y).unwrap();
    assert!(y.iter().zip(&x).all(|(y, x)| *y == x.wrapping_mul(3)));
    assert_eq!(qlookup(&x, &table, &mut y[1..]), Err(Error::ShapeMismatch));
}

/// Windows without padding (the row-by-row path), dilated or not, down to
/// a window over the whole plane, against the definition.
#[test]
fn unpadded_average_pools_match_the_definition() {
    let mut rng = Rng::new(5);
    let s = Scale::from_real(0.37).unwrap();
    // (in, kernel, stride, dilation)
    for (i, k, st, d) in [
        ((24, 5), (24, 5), (24, 5), (1, 1)),
        ((9, 8), (3, 2), (2, 3), (1, 1)),
        ((9, 11), (2, 3), (1, 2), (3, 2)),
    ] {
        let span = |n: usize, k: usize, s: usize, d: usize| (n - (k - 1) * d - 1) / s + 1;
        let (oh, ow) = (span(i.0, k.0, st.0, d.0), span(i.1, k.1, st.1, d.1));
        let x = rng.q8::<i8>(3 * i.0 * i.1);
        let window = Window {
            in_dims: &[i.0, i.1],
            out_dims: &[oh, ow],
            kernel: &[k.0, k.1],
            strides: &[st.0, st.1],
            dilations: &[d.0, d.1],
            pads_begin: &[0, 0],
            pads_end: &[0, 0],
        };
        let p = QPool { planes: 3, window, count_include_pad: false, x_zero: -7, scale: s };
        let out = QOut { zero: 3, min: -128, max: 127 };
        let mut y = vec![0i8; 3 * oh * ow];
        qavgpool(&p, &x, &mut y, &out).unwrap();
        for pl in 0..3 {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = 0i64;
                    for ky in 0..k.0 {
                        for kx in 0..k.1 {
                            let (iy, ix) = (oy * st.0 + ky * d.0, ox * st.1 + kx * d.1);
                            sum += i64::from(x[pl * i.0 * i.1 + iy * i.1 + ix]) + 7;
                        }
                    }
                    let exact = sum as f64 * s.to_real() / (k.0 * k.1) as f64;
                    let want = (3.0 + libm::floor(exact + 0.5)).clamp(-128.0, 127.0);
                    assert_eq!(f64::from(y[(pl * oh + oy) * ow + ox]), want, "{i:?} {k:?}");
                }
            }
        }
    }
}

#[test]
fn average_pools_round_once() {
    let mut rng = Rng::new(2);
    for include in [false, true] {
        let (h, w) = (7, 6);
        let x = rng.q8::<u8>(2 * h * w);
        let s = Scale::from_real(0.7).unwrap();
        let window = Window {
            in_dims: &[h, w],
            out_dims: &[4, 3],
            kernel: &[3, 3],
            strides: &[2, 2],
            dilations: &[1, 1],
            pads_begin: &[1, 1],
            pads_end: &[1, 0],
        };
        let p = QPool { planes: 2, window, count_include_pad: include, x_zero: 5, scale: s };
        let out = QOut { zero: 2, min: 0, max: 255 };
        let mut y = vec![0u8; 24];
        qavgpool(&p, &x, &mut y, &out).unwrap();
        for pl in 0..2 {
            for oy in 0..4 {
                for ox in 0..3 {
                    let (mut sum, mut cnt, mut all) = (0i64, 0i64, 0i64);
                    for ky in 0..3 {
                        for kx in 0..3 {
                            let (iy, ix) = (2 * oy + ky - 1, 2 * ox + kx - 1);
                            if iy > h as i64 || ix >= w as i64 {
                                continue;
                            }
                            all += 1;
                            if iy >= 0 && ix >= 0 && iy < h as i64 {
                                cnt += 1;
                                sum += i64::from(x[pl * h * w + (iy * w as i64 + ix) as usize]) - 5;
                            }
                        }
                    }
                    let c = if include { all } else { cnt };
                    let exact = sum as f64 * s.to_real() / c as f64;
                    let want = (2.0 + libm::floor(exact + 0.5)).clamp(0.0, 255.0);
                    assert_eq!(
                        f64::from(y[pl * 12 + (oy * 3 + ox) as usize]),
                        want,
                        "{pl} {oy} {ox}"
                    );
                }
            }
        }
    }
    let x: Vec<i8> = (0..40).map(|i| (i * 7 - 128) as i8).collect();
    let mut y = vec![0i8; 4];
    let s = Scale::from_real(1.0).unwrap();
    qglobal_avgpool(&x, 4, -10, s, &mut y, &QOut { zero: 0, min: -128, max: 127 }).unwrap();
    for (c, v) in y.iter().enumerate() {
        let sum: i32 = x[c * 10..c * 10 + 10].iter().map(|&v| i32::from(v) + 10).sum();
        assert_eq!(
            i32::from(*v),
            (f64::from(sum) / 10.0 + 0.5).floor().clamp(-128.0, 127.0) as i32
        );
    }
}

/// Runs `kern`'s tiles and the portable ones on the same random operands
/// (both orientations, every row count, group counts around the
/// unrolls), and its output stages against the portable ones.
pub(super) fn tiles_agree<K: QMicro>(kern: K) {
    let mut rng = Rng::new(17);
    for groups in [0usize, 1, 2, 3, 4, 5, 6, 7, 8, 17, 64] {
        for gstep in [4usize, 32] {
            let bcast: Vec<u8> =
                (0..MAX_MR * 4 + groups * gstep + 64).map(|_| rng.next() as u8).collect();
            let strip: Vec<u8> = (0..groups * 64).map(|_| rng.next() as u8).collect();
            let rows = core::array::from_fn(|r| if gstep == 4 { r * groups * 4 } else { 4 * r });
            let t = Tile { groups, bcast: &bcast, rows, gstep, strip: &strip };
            if gstep == 4 && !t.fits(MAX_MR) {
                continue;
            }
            #[allow(clippy::needless_range_loop)]
            fn same<K: QMicro, A: Q8>(kern: K, t: &Tile<'_>, rows_side: bool) {
                let (mut got, mut want): (Acc, Acc) = ([[7; NR]; MAX_MR], [[7; NR]; MAX_MR]);
                let mut i = 0;
                while i < MAX_MR {
                    let mut sub = *t;
                    sub.rows = core::array::from_fn(|r| t.rows[(i + r).min(MAX_MR - 1)]);
                    let mut part: Acc = [[0; NR]; MAX_MR];
                    if rows_side {
                        kern.act_rows::<A>(&sub, &mut part);
                    } else {
                        kern.act_strip::<A>(&sub, &mut part);
                    }
                    let cnt = K::MR.min(MAX_MR - i);
                    got[i..i + cnt].copy_from_slice(&part[..cnt]);
                    i += K::MR;
                }
                let mut i = 0;
                while i < MAX_MR {
                    let mut sub = *t;
                    sub.rows = core::array::from_fn(|r| t.rows[(i + r).min(MAX_MR - 1)]);
                    let mut part: Acc = [[0; NR]; MAX_MR];
                    if rows_side {
                        Portable.act_rows::<A>(&sub, &mut part);
                    } else {
                        Portable.act_strip::<A>(&sub, &mut part);
                    }
                    let cnt = Portable::MR.min(MAX_MR - i);
                    want[i..i + cnt].copy_from_slice(&part[..cnt]);
                    i += Portable::MR;
                }
                // The kernel's sums include its activation offset times the
                // weights' sums: take it off.
                let off = kern.offset::<A>();
                for r in 0..MAX_MR {
                    for c in 0..NR {
                        let mut wsum = 0i32;
                        for g in 0..t.groups {
                            for q in 0..4 {
                                wsum += if rows_side {
                                    i32::from(t.strip[g * 64 + c * 4 + q] as i8)
                                } else {
                                    i32::from(t.bcast[t.rows[r] + g * t.gstep + q] as i8)
                                };
                            }
                        }
                        got[r][c] = got[r][c].wrapping_sub(off.wrapping_mul(wsum));
                    }
                }
                assert_eq!(
                    got, want,
                    "groups {} gstep {} rows_side {rows_side}",
                    t.groups, t.gstep
                );
                if rows_side {
                    return;
                }
                // The same product from the strip built widened (in a
                // slice with room, its tail random): `interleave_wide`'s
                // bytes by their definition, then `act_wide_run` sets each
                // row to the portable sums.
                let n = t.strip.len();
                let mut block: Vec<u8> = (0..2 * n + 8).map(|i| (i * 37) as u8).collect();
                let tail = block[2 * n..].to_vec();
                for g in 0..t.groups {
                    let k: [[u8; 16]; 4] = core::array::from_fn(|q| {
                        core::array::from_fn(|c| t.strip[g * 64 + 4 * c + q])
                    });
                    kern.interleave_wide::<A>(
                        &mut block[..2 * n],
                        t.groups,
                        g,
                        &k[0],
                        &k[1],
                        &k[2],
                        &k[3],
                    );
                }
                assert_eq!(block[2 * n..], tail[..], "interleave_wide wrote past its strip");
                for c in 0..NR {
                    for g in 0..t.groups {
                        let b = &t.strip[g * 64 + 4 * c..][..4];
                        let h = |v: u8| (A::of_bits(v) as i16).to_le_bytes();
                        let want = [h(b[0]), h(b[2]), h(b[1]), h(b[3])].concat();
                        let at = 32 * (c / 4 * t.groups + g) + 8 * (c % 4);
                        assert_eq!(
                            block[at..at + 8],
                            want[..],
                            "interleave_wide, column {c} group {g}"
                        );
                    }
                }
                // The rows as a weight panel, each widened by `widen_row`
                // (its bytes by their definition), then `act_wide_run`
                // gives the portable sums.
                let mut panel = vec![0u8; 32 * t.groups];
                for (g, grp) in panel.chunks_exact_mut(32).enumerate() {
                    for (r, w) in grp.chunks_exact_mut(4).enumerate() {
                        w.copy_from_slice(&t.bcast[t.rows[r] + g * t.gstep..][..4]);
                    }
                }
                for r in 0..MAX_MR {
                    let mut row = vec![0x5au8; 8 * t.groups + 8];
                    kern.widen_row(&panel, r, t.groups, &mut row);
                    assert_eq!(row[8 * t.groups..], [0x5a; 8], "widen_row wrote past its bytes");
                    for (g, w) in row.chunks_exact(8).take(t.groups).enumerate() {
                        let b = &panel[32 * g + 4 * r..][..4];
                        let h = |v: u8| (v as i8 as i16).to_le_bytes();
                        let want = [h(b[0]), h(b[2]), h(b[1]), h(b[3])].concat();
                        assert_eq!(w, &want[..], "widen_row, row {r} group {g}");
                    }
                    // All columns, then the first few only (the others up
                    // to a multiple of four may be anything, the rest are
                    // left alone).
                    for cols in [NR, 5, 1] {
                        let mut sums = [-9; NR + 4];
                        kern.act_wide_run(&row, &block[..2 * n], t.groups, cols, &mut sums);
                        assert_eq!(
                            sums[..cols],
                            want[r][..cols],
                            "act_wide_run: groups {} gstep {} row {r} cols {cols}",
                            t.groups,
                            t.gstep
                        );
                        assert!(
                            sums[cols.next_multiple_of(4)..].iter().all(|&v| v == -9),
                            "act_wide_run wrote past its quads"
                        );
                    }
                }
            }
            same::<K, u8>(kern, &t, true);
            same::<K, i8>(kern, &t, true);
            same::<K, u8>(kern, &t, false);
            same::<K, i8>(kern, &t, false);
            // One row repeated, as the driver passes the last rows of a
            // product (a dense layer at batch 1 has only one).
            let one = Tile { rows: [t.rows[2]; MAX_MR], ..t };
            same::<K, u8>(kern, &one, true);
            same::<K, i8>(kern, &one, true);
            same::<K, i8>(kern, &one, false);
        }
    }
    // The im2col block's interleave.
    for _ in 0..8 {
        let run = |rng: &mut Rng| -> [u8; 16] { core::array::from_fn(|_| rng.next() as u8) };
        let (a, b, c, d) = (run(&mut rng), run(&mut rng), run(&mut rng), run(&mut rng));
        let (mut got, mut want) = ([0u8; 64], [0u8; 64]);
        kern.interleave16(&mut got, &a, &b, &c, &d);
        crate::simd::q8::gemm::micro::interleave16_portable(&mut want, &a, &b, &c, &d);
        assert_eq!(got, want, "interleave16");
    }
    // Output stages.
    for case in 0..400 {
        let sc = scales(&mut rng, 16, true);
        let rq = Requant { scales: &sc, zero: rng.int(-128, 127), min: -128, max: 127 };
        let ch = Chan16::new(0, 16, |j| (j as i32 - 8) * 1000 * case, &rq);
        let acc: [i32; 16] = core::array::from_fn(|_| match rng.next() % 3 {
            0 => rng.int(i32::MIN, i32::MAX),
            _ => rng.int(-1 << 20, 1 << 20),
        });
        let out = OutRange { zero: rq.zero, min: rng.int(-128, 0), max: rng.int(0, 127) };
        for len in [16, 15, 1, 0] {
            let (mut got, mut want) = ([0i8; 16], [0i8; 16]);
            kern.cols(&acc, &ch, &out, &mut got[..len]);
            crate::simd::q8::requant::cols_portable(&acc, &ch, &out, &mut want[..len]);
            assert_eq!(got, want);
            let one = ch.lane(case as usize % 16);
            let (mut got, mut want) = ([0i8; 16], [0i8; 16]);
            kern.splat(&acc, &one, &out, &mut got[..len]);
            crate::simd::q8::requant::splat_portable(&acc, &one, &out, &mut want[..len]);
            assert_eq!(got, want);
            let (mut got, mut want) = ([0u8; 16], [0u8; 16]);
            let out = OutRange { zero: out.zero + 128, min: out.min + 128, max: out.max + 128 };
            kern.splat(&acc, &one, &out, &mut got[..len]);
            crate::simd::q8::requant::splat_portable(&acc, &one, &out, &mut want[..len]);
            assert_eq!(got, want);
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx2_tiles_match_portable() {
    if let Some(k) = crate::simd::q8::gemm::micro::avx2::Q8Avx2::detect() {
        tiles_agree(k);
    } else {
        crate::simd::tests::can_run(crate::simd::tests::Need::Avx2, false);
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx_vnni_tiles_match_portable() {
    if let Some(k) = crate::simd::q8::gemm::micro::avxvnni::Q8AvxVnni::detect() {
        tiles_agree(k);
    } else {
        crate::simd::tests::can_run(crate::simd::tests::Need::AvxVnni, false);
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx512_vnni_tiles_match_portable() {
    if let Some(k) = crate::simd::q8::gemm::micro::avx512::Vnni::detect() {
        tiles_agree(k);
    } else {
        crate::simd::tests::can_run(crate::simd::tests::Need::Avx512Vnni, false);
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[test]
fn neon_tiles_match_portable() {
    if let Some(k) = crate::simd::q8::gemm::micro::neon::Q8Neon::detect() {
        tiles_agree(k);
    } else {
        crate::simd::tests::can_run(crate::simd::tests::Need::Neon, false);
    }
}

/// The DSP tiles: on an Arm build with the extension, its instructions;
/// elsewhere their emulation, the same arithmetic.
#[test]
fn dsp_tiles_match_portable() {
    #[cfg(onnx_codegen_arm_dsp)]
    let kern = crate::simd::q8::gemm::micro::dsp::Q8Dsp::detect();
    #[cfg(not(onnx_codegen_arm_dsp))]
    let kern =
        Some(crate::simd::q8::gemm::micro::dsp::Q8Dsp(crate::simd::isa::dsp::Dsp::emulated()));
    match kern {
        Some(k) => tiles_agree(k),
        None => {
            crate::simd::tests::can_run(crate::simd::tests::Need::Dsp, false);
        }
    }
}

/// The DSP depthwise kernel against the plain loops, channel by channel
/// over random padded planes: every 3x3 geometry it takes (stride 1 and 2
/// across, 1 and 2 down, odd and even widths, with and without padding),
/// `i8` and `u8` inputs.
#[test]
fn dsp_depthwise_matches_portable() {
    use crate::simd::q8::conv::Geom;
    use crate::simd::q8::conv::depthwise::{self, ChannelKernel, Plane, dsp};
    #[cfg(onnx_codegen_arm_dsp)]
    let Some(k) = crate::simd::isa::dsp::Dsp::detect() else {
        crate::simd::tests::can_run(crate::simd::tests::Need::Dsp, false);
        return;
    };
    #[cfg(not(onnx_codegen_arm_dsp))]
    let k = crate::simd::isa::dsp::Dsp::emulated();
    let mut rng = Rng::new(29);
    fn one<A: Q8>(k: crate::simd::isa::dsp::Dsp, g: &Geom, rng: &mut Rng) {
        let plane = Plane::of(g).unwrap();
        let pad: Vec<u8> =
            (0..depthwise::scratch_len(g).unwrap()).map(|_| rng.next() as u8).collect();
        let wc = rng.i8s(9);
        let sc = scales(rng, 1, false);
        let rq = Requant { scales: &sc, zero: rng.int(-20, 20), min: -128, max: 127 };
        let ch = Chan::new(rng.int(-5000, 5000), rq.scale(0));
        let out = OutRange { zero: rq.zero + if A::SIGNED { 0 } else { 128 }, min: 0, max: 127 };
        let (mut got, mut want) = (vec![0u8; g.oh * g.ow], vec![0u8; g.oh * g.ow]);
        dsp::Kernel(k).channel::<A, u8>(
            g,
            &plane,
            &pad,
            &wc,
            &ch,
            &out,
            &mut got,
            &mut Default::default(),
        );
        depthwise::Plain.channel::<A, u8>(g, &plane, &pad, &wc, &ch, &out, &mut want, &mut ());
        assert_eq!(got, want, "{g:?} signed {}", A::SIGNED);
    }
    for (ih, iw) in [(1, 1), (1, 2), (3, 3), (25, 5), (6, 7), (9, 16), (12, 13), (4, 150), (30, 2)]
    {
        for (sh, sw) in [(1, 1), (2, 2), (1, 2), (2, 1)] {
            for (ph, pw) in [(0, 0), (1, 1), (2, 1)] {
                let span =
                    |i: usize, p: usize, s: usize| (i + 2 * p).checked_sub(3).map(|v| v / s + 1);
                let (Some(oh), Some(ow)) = (span(ih, ph, sh), span(iw, pw, sw)) else { continue };
                let g = Geom { ih, iw, oh, ow, kh: 3, kw: 3, sh, sw, dh: 1, dw: 1, ph, pw };
                assert!(dsp::fits(&g));
                one::<i8>(k, &g, &mut rng);
                one::<u8>(k, &g, &mut rng);
            }
        }
    }
}

/// The AVX2 depthwise kernel against the plain loops, channel by channel
/// over random padded planes (the slack random too): windows from 1x1 to
/// 7x7 (odd and even widths, vertical dilation), strides 1 and 2 each way,
/// narrow planes (rows run together) and wide ones (rows in pieces),
/// `i8` and `u8` inputs and outputs.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx2_depthwise_matches_portable() {
    use crate::simd::q8::conv::Geom;
    use crate::simd::q8::conv::depthwise::{self, ChannelKernel, Plane, avx2};
    let Some(k) = crate::simd::isa::avx2::Avx2::detect() else {
        crate::simd::tests::can_run(crate::simd::tests::Need::Avx2, false);
        return;
    };
    let mut rng = Rng::new(31);
    fn one<A: Q8, Y: Q8>(k: crate::simd::isa::avx2::Avx2, g: &Geom, rng: &mut Rng) {
        let plane = Plane::of(g).unwrap();
        // Two channels through one kernel scratch, as a convolution runs
        // them: what the first leaves there must not change the second.
        let mut own = Default::default();
        for _ in 0..2 {
            let pad: Vec<u8> =
                (0..depthwise::scratch_len(g).unwrap()).map(|_| rng.next() as u8).collect();
            let wc = rng.i8s(g.kh * g.kw);
            let sc = scales(rng, 1, false);
            let rq = Requant { scales: &sc, zero: rng.int(-20, 20), min: Y::MIN, max: Y::MAX };
            let ch = Chan::new(rng.int(-5000, 5000), rq.scale(0));
            let zero = rq.zero + if Y::SIGNED { 0 } else { 128 };
            let out = OutRange { zero, min: Y::MIN + 3, max: Y::MAX };
            let n = g.oh * g.ow;
            let (mut got, mut want) = (vec![Y::default(); n], vec![Y::default(); n]);
            avx2::Kernel(k).channel::<A, Y>(g, &plane, &pad, &wc, &ch, &out, &mut got, &mut own);
            depthwise::Plain.channel::<A, Y>(g, &plane, &pad, &wc, &ch, &out, &mut want, &mut ());
            assert_eq!(got, want, "{g:?} signed {} {}", A::SIGNED, Y::SIGNED);
        }
    }
    let mut seen = 0;
    for (kh, kw, dh) in
        [(3, 3, 1), (1, 1, 1), (2, 2, 1), (5, 5, 1), (7, 7, 1), (1, 3, 1), (3, 2, 2)]
    {
        for (ih, iw) in [(1, 1), (3, 3), (24, 5), (6, 7), (9, 16), (12, 13), (4, 150), (30, 2)] {
            for (sh, sw) in [(1, 1), (2, 2), (1, 2), (2, 1)] {
                for (ph, pw) in [(0, 0), (1, 1), (2, 3)] {
                    let span = |i: usize, p: usize, k: usize, s: usize| {
                        (i + 2 * p).checked_sub(k).map(|v| v / s + 1)
                    };
                    let (Some(oh), Some(ow)) =
                        (span(ih, ph, (kh - 1) * dh + 1, sh), span(iw, pw, kw, sw))
                    else {
                        continue;
                    };
                    let g = Geom { ih, iw, oh, ow, kh, kw, sh, sw, dh, dw: 1, ph, pw };
                    assert!(avx2::fits(&g), "{g:?}");
                    one::<i8, i8>(k, &g, &mut rng);
                    one::<u8, u8>(k, &g, &mut rng);
                    one::<u8, i8>(k, &g, &mut rng);
                    seen += 1;
                }
            }
        }
    }
    assert!(seen > 300, "{seen} geometries");
}

/// `qaffine` (a quantized BatchNormalization) against `round(m (x - zx) +
/// b)` in `f64` for every input value: multipliers of either sign, zero
/// and large, offsets small and far out of range.
#[test]
fn qaffine_rounds_the_affine_map() {
    let cases = [
        (0.63, 4.2),
        (-1.7, -0.5),
        (0.0, 3.49),
        (0.004, -120.0),
        (37.0, 0.25),
        (-0.5, 0.5),
        (1e-7, 1e5),
    ];
    for zx in [-128, -3, 0, 127] {
        let ch: Vec<Affine> =
            cases.iter().map(|&(m, b)| Affine::from_real(m, b, zx).unwrap()).collect();
        // Channels 0..7, two values each, over every int8 value.
        let x: Vec<i8> = (0..256 * 14).map(|i| (i / 14) as u8 as i8).collect();
        let (inner, outer) = (2, 256);
        let x: Vec<i8> = (0..outer * cases.len() * inner).map(|i| x[i % x.len()]).collect();
        let out = QOut { zero: 5, min: -100, max: 127 };
        let mut y = vec![0i8; x.len()];
        qaffine(&x, cases.len(), inner, &ch, &mut y, &out).unwrap();
        for (i, (&xv, &yv)) in x.iter().zip(&y).enumerate() {
            let (m, b) = cases[i / inner % cases.len()];
            let f = m * f64::from(i32::from(xv) - zx) + b;
            // Ties up, as `Scale::apply`.
            let want = (5.0 + (f + 0.5).floor()).clamp(-100.0, 127.0);
            let near_tie = (f - f.floor() - 0.5).abs() < 1e-6;
            assert!(
                f64::from(yv) == want || near_tie,
                "zx {zx} x {xv} m {m} b {b}: {yv} vs {want}"
            );
        }
        let mut z = x.clone();
        qaffine_in_place(&mut z, cases.len(), inner, &ch, &out).unwrap();
        assert_eq!(z, y);
    }
    // uint8, and the checks.
    let ch = [Affine::from_real(-0.8, 300.0, 128).unwrap()];
    let x: Vec<u8> = (0..=255).collect();
    let mut y = vec![0u8; 256];
    qaffine(&x, 1, 256, &ch, &mut y, &QOut { zero: 0, min: 0, max: 255 }).unwrap();
    for (&x, &y) in x.iter().zip(&y) {
        let want = ((-0.8 * (f64::from(x) - 128.0) + 300.0 + 0.5).floor()).clamp(0.0, 255.0);
        assert_eq!(f64::from(y), want, "{x}");
    }
    let out = QOut { zero: 0, min: 0, max: 255 };
    assert_eq!(qaffine(&x, 2, 128, &ch, &mut y, &out), Err(Error::ShapeMismatch));
    assert_eq!(qaffine(&x, 1, 256, &ch, &mut y[1..], &out), Err(Error::ShapeMismatch));
    let bad = [Affine { mult: 1, bias: 1 << 61, shift: 3 }];
    assert_eq!(qaffine(&x, 1, 256, &bad, &mut y, &out), Err(Error::InvalidParams));
    assert_eq!(Affine::from_real(f64::NAN, 0.0, 0), None);
    assert_eq!(Affine::from_real(1e12, 0.0, 0), None);
}
