//! Exp, sigmoid, SiLU and Gelu over slices in explicit AVX-512 and AVX2+FMA
//! code.
//!
//! The portable [`vmath`](crate::vmath) functions vectorise, but Rust never
//! contracts `a * b + c` into a fused multiply-add, so their exponential
//! costs a multiply and an add per polynomial step, and the 2^n scaling is
//! built from integer tricks. Here the exponential is one rounding, two
//! fused steps of range reduction, a degree-6 polynomial of fused steps and
//! (on AVX-512) one `vscalefps`: about half the instructions. SiLU is the
//! activation of EfficientNet-style networks, applied to every output of
//! most of their layers, and Softmax's exponentials are a transformer's
//! largest element-wise cost, so this is worth its own code.
//!
//! Accuracy: the polynomial's relative error is below 1e-8 on the reduced
//! range, so results are within a few units in the last place of the exact
//! functions (tests check 4 ulp, Gelu 5, or 1e-37 absolute near underflow), not bit
//! for bit equal to the portable path.
//!
//! Unsafe code: an [`Avx512`] or [`Avx2`] value proves the extension is
//! present (the `target_feature` loops take one); the loads and stores stay
//! within each row, checked against the slices first (whole vectors, the
//! row's tail through a stack buffer).
//!
//! One file per instruction set: `avx512.rs` (with the fused Softmax row)
//! and `avx2.rs`; here the dispatch, the operands, the constants both share
//! and the loop over rows they both expand.

use crate::simd::isa::avx2::Avx2;
use crate::simd::isa::avx512::Avx512;

pub(crate) use crate::simd::math::VFunc;

/// The loop over [`Rows`] for one vector width, its own `target_feature`
/// function: whole vectors loaded, evaluated `$block` at a time by `$eval`
/// (in place on an array of vectors), and stored; then single vectors;
/// each row's tail through a stack buffer. One body for both widths
/// (AVX2 evaluates four vectors at a time, AVX-512 one).
macro_rules! map_rows {
    ($(#[$doc:meta])* $vis:vis $name:ident, $cpu:ty, $features:literal, $lanes:literal,
     $block:literal, $load:ident, $store:ident, $eval:ident) => {
        $(#[$doc])*
        #[target_feature(enable = $features)]
        $vis fn $name(_cpu: $cpu, f: VFunc, rows: Rows<'_>) {
            for r in 0..rows.nrows {
                debug_assert!(rows.range(r).is_some(), "vexp: row {r} of the block past the slice");
                let Some(range) = rows.range(r) else { return };
                let yp = rows.y.as_mut_ptr();
                let xp = rows.x.map_or(rows.y.as_ptr(), |x| x.as_ptr());
                let mut i = range.start;
                // SAFETY (both loops): `i + block * lanes <= range.end`
                // (`i + lanes`), within both operands (`xp` is `y`'s own
                // pointer in place: each vector is loaded before it is
                // stored).
                while i + $block * $lanes <= range.end {
                    unsafe {
                        let mut v = [$load(xp.add(i)); $block];
                        for (k, v) in v.iter_mut().enumerate().skip(1) {
                            *v = $load(xp.add(i + k * $lanes));
                        }
                        $eval(f, &mut v);
                        for (k, v) in v.iter().enumerate() {
                            $store(yp.add(i + k * $lanes), *v);
                        }
                    }
                    i += $block * $lanes;
                }
                while i + $lanes <= range.end {
                    unsafe {
                        let mut v = [$load(xp.add(i))];
                        $eval(f, &mut v);
                        $store(yp.add(i), v[0]);
                    }
                    i += $lanes;
                }
                if i < range.end {
                    let mut buf = [0.0f32; $lanes];
                    let n = range.end - i;
                    let src = rows.x.map_or(&rows.y[i..range.end], |x| &x[i..range.end]);
                    buf[..n].copy_from_slice(src);
                    // SAFETY: `buf` holds one vector of floats.
                    unsafe {
                        let mut v = [$load(buf.as_ptr())];
                        $eval(f, &mut v);
                        $store(buf.as_mut_ptr(), v[0]);
                    }
                    rows.y[i..range.end].copy_from_slice(&buf[..n]);
                }
            }
        }
    };
}

mod avx2;
mod avx512;

pub(in crate::simd) use avx2::eval256;
use avx2::map256;
pub(in crate::simd) use avx512::eval512;
use avx512::map512;
pub(crate) use avx512::softmax_row;

/// `y[i] = f(x[i])` for `i < min(x.len(), y.len())`, or in place when `x`
/// is `None`, on the widest unit present; `false` (nothing done) without
/// AVX2+FMA, for the caller's portable loop.
#[inline]
pub(crate) fn apply(f: VFunc, x: Option<&[f32]>, y: &mut [f32]) -> bool {
    let n = x.map_or(y.len(), |x| x.len().min(y.len()));
    run(f, Rows { x, y, ld: n, nrows: 1, ncols: n })
}

/// `f` on the `nrows x ncols` block of `y` whose rows start `ldy` apart,
/// in place, as [`apply`]. The block lies within `y` (the caller's bound:
/// a panic in debug builds; in release builds rows past `y`'s end are left
/// alone).
#[inline]
pub(crate) fn apply_rows(f: VFunc, y: &mut [f32], ldy: usize, nrows: usize, ncols: usize) -> bool {
    run(f, Rows { x: None, y, ld: ldy, nrows, ncols })
}

/// `rows` through the widest loop this CPU has.
#[inline]
fn run(f: VFunc, rows: Rows<'_>) -> bool {
    if let Some(cpu) = Avx512::detect() {
        // SAFETY: `cpu` proves AVX-512F is present.
        unsafe { map512(cpu, f, rows) };
        return true;
    }
    if let Some(cpu) = Avx2::detect() {
        // SAFETY: `cpu` proves AVX2 and FMA are present.
        unsafe { map256(cpu, f, rows) };
        return true;
    }
    false
}

/// Whether [`apply`] runs on the AVX2 loop ([`eval256`]) on this CPU,
/// under the cap: AVX2 kernels then apply a function to their sums in
/// registers with the same routine, and give the standalone op's results.
#[inline]
pub(in crate::simd) fn runs_avx2() -> bool {
    Avx512::detect().is_none() && Avx2::detect().is_some()
}

/// `f` on every element of `y`, in place, through the AVX2 loop whatever
/// wider unit the CPU has: the arithmetic the AVX2 kernels' fused
/// activations must match, for their tests.
#[cfg(test)]
pub(in crate::simd) fn apply_avx2(cpu: Avx2, f: VFunc, y: &mut [f32]) {
    let n = y.len();
    // SAFETY: `cpu` proves AVX2 and FMA are present.
    unsafe { map256(cpu, f, Rows { x: None, y, ld: n, nrows: 1, ncols: n }) };
}

/// The operands of one call: `nrows` rows of `ncols` values, `ld` apart,
/// read from `x` (or `y` itself when `x` is `None`) and written to `y`.
struct Rows<'a> {
    x: Option<&'a [f32]>,
    y: &'a mut [f32],
    ld: usize,
    nrows: usize,
    ncols: usize,
}

impl Rows<'_> {
    /// Row `r`'s range, when it lies within both operands.
    #[inline(always)]
    fn range(&self, r: usize) -> Option<core::ops::Range<usize>> {
        let start = r.checked_mul(self.ld)?;
        let end = start.checked_add(self.ncols)?;
        let len = self.x.map_or(self.y.len(), |x| x.len().min(self.y.len()));
        (end <= len).then_some(start..end)
    }
}

const LOG2E: f32 = core::f32::consts::LOG2_E;
/// ln 2 split in two: `LN2_HI` has few mantissa bits, so `n * LN2_HI` is
/// exact for the `n` that occur.
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;
/// `e^r ~ 1 + r + r^2 (C2 + r (C3 + r (C4 + r (C5 + r C6))))` on
/// `|r| <= ln2 / 2`, fitted for relative error (below 8e-9 in exact
/// arithmetic).
const C2: f32 = 0.499_999_67;
const C3: f32 = 0.166_664_8;
const C4: f32 = 0.041_673_567;
const C5: f32 = 0.008_372_688;
const C6: f32 = 0.001_357_120_8;
/// Above where `e^x` overflows (88.8), so clamped lanes give infinity; low
/// enough that `n` stays within what the scalings take.
const EXP_MAX: f32 = 100.0;
/// Far below where `e^x` rounds to zero (-104), so clamped lanes give
/// exactly zero; high enough that `n` stays within what the scalings take
/// (two normal factors on AVX2) and `-inf` never reaches the arithmetic.
const EXP_MIN: f32 = -150.0;

/// HardSwish's slope, `1 / 6` rounded to f32 as the standalone op rounds it.
const HARD_SWISH_SLOPE: f32 = (1.0f64 / 6.0) as f32;

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(f: VFunc, x: f32) -> f64 {
        if f == VFunc::Gelu {
            // `1 + erf(x / sqrt 2)` as `erfc(-x / sqrt 2)`, which keeps the
            // digits the sum loses below 0.
            let x = f64::from(x);
            return 0.5 * x * libm::erfc(-x * core::f64::consts::FRAC_1_SQRT_2);
        }
        if f == VFunc::HardSwish {
            let op = crate::elementwise::Unary::HardSwish;
            return f64::from(crate::elementwise::eval(op, x));
        }
        let x = f64::from(x);
        let s = 1.0 / (1.0 + (-x).exp());
        match f {
            VFunc::Exp => x.exp(),
            VFunc::Sigmoid => s,
            _ => x * s,
        }
    }

    /// `got` against [`exact`]: within 4 ulp (Gelu: 5, whose variable
    /// `t` rounded near 1 moves the result by up to 4 of its own ulp).
    fn agrees(f: VFunc, x: f32, got: f32) -> bool {
        let want = exact(f, x);
        // HardSwish: the standalone op's result, bit for bit.
        if f == VFunc::HardSwish {
            return got.to_bits() == (want as f32).to_bits() || (got.is_nan() && want.is_nan());
        }
        close(got, want, if f == VFunc::Gelu { 5.0 } else { 4.0 })
    }

    /// Within `ulps` ulp of the exact value (or 1e-37 absolute, where the
    /// result is at the bottom of the normal range and ulps mean little).
    fn close(got: f32, want: f64, ulps: f64) -> bool {
        if want.is_nan() {
            return got.is_nan();
        }
        let w = want as f32;
        if w.is_infinite() || got.is_infinite() {
            return got == w;
        }
        let ulp = f64::from(f32::from_bits(w.abs().to_bits() + 1) - w.abs());
        (f64::from(got) - want).abs() <= ulps * ulp || (f64::from(got) - want).abs() <= 1e-37
    }

    fn inputs() -> Vec<f32> {
        let mut v: Vec<f32> = (0..20_000).map(|i| (i as f32 - 10_000.0) * 0.0123).collect();
        // Densely where Gelu's result is normal and not yet `x`.
        v.extend((0..40_000).map(|i| -14.0 + i as f32 * 4.5e-4));
        let mut bits = 0u32;
        while let Some(next) = bits.checked_add(100_003) {
            let x = f32::from_bits(bits);
            if !x.is_nan() {
                v.push(x);
            }
            bits = next;
        }
        v.extend([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            88.7,
            -88.7,
            -103.9,
            -104.1,
            1e-30,
            -1e-30,
        ]);
        v.extend([f32::MAX, f32::MIN, f32::MIN_POSITIVE, 1.0e-45]);
        v
    }

    fn check(f: VFunc, run: impl Fn(&[f32], &mut [f32])) {
        let xs = inputs();
        // Lengths around the vector widths exercise the tails.
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 33, xs.len()] {
            let x = &xs[xs.len() - len..];
            let mut y = vec![0.0f32; len];
            run(x, &mut y);
            for (&xv, &yv) in x.iter().zip(&y) {
                assert!(agrees(f, xv, yv), "{f:?}({xv:e}) = {yv:e}, want {:e}", exact(f, xv));
            }
        }
        let mut nan = [f32::NAN; 3];
        run(&[f32::NAN; 3], &mut nan);
        assert!(nan.iter().all(|v| v.is_nan()));
    }

    fn flat<'a>(x: Option<&'a [f32]>, y: &'a mut [f32]) -> Rows<'a> {
        let n = y.len();
        Rows { x, y, ld: n, nrows: 1, ncols: n }
    }

    /// A block of rows: every element of the block changed, the gaps
    /// between rows and the rest of the slice untouched.
    fn rows_check(f: VFunc, run: impl Fn(&mut [f32], usize, usize, usize)) {
        for (ld, nrows, ncols) in [(40, 3, 33), (16, 4, 16), (9, 5, 7), (1, 3, 1)] {
            let len = ld * nrows + 5;
            let orig: Vec<f32> = (0..len).map(|i| (i as f32 - 50.0) * 0.37).collect();
            let mut y = orig.clone();
            run(&mut y, ld, nrows, ncols);
            for (i, (&o, &g)) in orig.iter().zip(&y).enumerate() {
                let inside = i / ld < nrows && i % ld < ncols;
                if inside {
                    assert!(agrees(f, o, g), "{f:?} [{i}]");
                } else {
                    assert_eq!(g.to_bits(), o.to_bits(), "{f:?} [{i}] outside the block");
                }
            }
        }
        // Rows past the end: a bug in the caller, stopped in debug builds,
        // skipped (not read) in release builds.
        let mut short = [1.0f32; 10];
        crate::simd::tests::out_of_bounds(|| run(&mut short, 8, 2, 4));
        assert!(short[8..].iter().all(|&v| v == 1.0));
    }

    /// Every check, for every function, on one width's loop.
    fn check_loop(map: impl Fn(VFunc, Rows<'_>)) {
        for f in [VFunc::Exp, VFunc::Sigmoid, VFunc::Silu, VFunc::Gelu, VFunc::HardSwish] {
            check(f, |x, y| map(f, flat(Some(x), y)));
            check(f, |x, y| {
                y.copy_from_slice(x);
                map(f, flat(None, y))
            });
            rows_check(f, |y, ld, nrows, ncols| map(f, Rows { x: None, y, ld, nrows, ncols }));
        }
    }

    #[test]
    fn avx512_matches_the_exact_functions() {
        let Some(cpu) = crate::simd::tests::avx512() else { return };
        // SAFETY: `cpu` proves AVX-512F.
        check_loop(|f, rows| unsafe { map512(cpu, f, rows) });
    }

    #[test]
    fn avx2_matches_the_exact_functions() {
        let Some(cpu) = crate::simd::tests::avx2() else { return };
        // SAFETY: `cpu` proves AVX2 and FMA.
        check_loop(|f, rows| unsafe { map256(cpu, f, rows) });
    }
}
