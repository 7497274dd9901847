//! Vectorisable single-precision `exp`, `sigmoid`, `tanh` and `erf` for the
//! f32 paths of generated code (Softmax, the activations, GELU's `Erf`, the
//! LSTM gates).
//!
//! Every function is branch-free straight-line arithmetic (comparisons become
//! selects), so the loops of [`map`] and of the f32 kernels using these
//! functions compile to 8- or 16-lane vector code inside `simd::vectorize_wide`. There are
//! no fused multiply-adds and no reassociation: the results are the same bit
//! for bit on every target, AVX2 or not. They are 1 to 3 ulp from `libm`
//! (measured over a sweep of every 4099th bit pattern in the tests; `gelu`
//! up to 6 from the formula in f64), which is
//! why constant folding keeps the exact kernels.
//!
//! Derivations (coefficients are ours, from the series or a fit done once in
//! `f64`):
//! - `exp`: `x = n ln2 + r` with `n` the nearest integer to `x / ln2` (ln2
//!   split in two parts so `n * LN2_HI` is exact), `e^r` by its Taylor series
//!   to degree 7 on `|r| <= ln2 / 2` (truncation below 1e-8 relative), and
//!   `2^n` applied as two factors so results reach the subnormals and
//!   overflow to infinity naturally.
//! - `sigmoid`: `1 / (1 + e^-x)` for `x >= 0`, `e^x / (1 + e^x)` below, with
//!   one shared `e^-|x|`.
//! - `tanh`: the odd Taylor series to `x^13` for `|x| < 0.4` (where
//!   `1 - 2 / (e^2x + 1)` would cancel), that formula above.
//! - `erf`: the odd Taylor series (11 terms) for `|x| < 0.75`; above,
//!   `1 - e^-x² h(x)` with `h = erfc(x) e^x²` fitted by a degree-13 polynomial
//!   on `[0.75, 4]` (absolute error of `erf` below 5e-8); `erf` is 1 in f32
//!   from 4 on.
//! - `gelu`: `x Phi(x)`, with the normal distribution `Phi(x)` as `h` below
//!   0 and `1 - h` above, `h = erfc(|x| / sqrt 2) / 2`, so neither side
//!   cancels and one formula covers every `x` (no `erf` branch):
//!   `h = t P(t) e^(-x² / 2)` where `t = 1 / (1 + 0.6 |x| / sqrt 2)` and `P`
//!   is a degree-10 polynomial (relative error 4.6e-9, fitted by
//!   `tools/fit_gelu.py`); `-x² / 2` is kept as an exact sum of two floats,
//!   which the exponential's reduction takes apart (a rounded `x²` would
//!   move `e^(-x² / 2)` by up to `x²` ulp).

use crate::simd;

const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer.
const LOG2E: f32 = core::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75; // 0x3f31_7200: few mantissa bits, exact products.
const LN2_LO: f32 = 1.428_606_8e-6; // ln 2 - LN2_HI.

/// The magnitude of `x` (clears the sign bit).
#[inline(always)]
fn abs(x: f32) -> f32 {
    f32::from_bits(x.to_bits() & 0x7fff_ffff)
}

/// `mag` with the sign bit of `sign`.
#[inline(always)]
fn with_sign_of(mag: f32, sign: f32) -> f32 {
    f32::from_bits((mag.to_bits() & 0x7fff_ffff) | (sign.to_bits() & 0x8000_0000))
}

/// `e^x`: NaN stays NaN, `+inf` gives `+inf`, `-inf` gives 0.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Beyond these bounds the result is already inf or 0; clamping keeps `n`
    // within [-150, 128] so both scale factors are normal numbers. NaN stays NaN.
    let x = x.clamp(-104.0, 89.0);
    let (nf, n) = exp_n(x);
    exp_finish((x - nf * LN2_HI) - nf * LN2_LO, n)
}

/// The nearest integer `n` to `x / ln2`, as a float and as an integer.
#[inline(always)]
fn exp_n(x: f32) -> (f32, i32) {
    let t = x * LOG2E + MAGIC;
    // The integer sits in the low mantissa bits of `t`.
    (t - MAGIC, (t.to_bits() as i32).wrapping_sub(0x4B40_0000))
}

/// `e^r 2^n` for `|r| <= ln2 / 2` (about) and `n` in [-150, 128].
#[inline(always)]
fn exp_finish(r: f32, n: i32) -> f32 {
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    let n1 = n >> 1;
    let n2 = n.wrapping_sub(n1);
    let s1 = f32::from_bits((n1.wrapping_add(127) << 23) as u32);
    let s2 = f32::from_bits((n2.wrapping_add(127) << 23) as u32);
    p * s1 * s2
}

/// SiLU, `x * sigmoid(x)`: the product of `x` and [`sigmoid`], the same
/// operations as a `Sigmoid` then a `Mul`.
#[inline(always)]
pub fn silu(x: f32) -> f32 {
    x * sigmoid(x)
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    let num = if x >= 0.0 { 1.0 } else { e };
    num / (1.0 + e)
}

/// `tanh x`.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = abs(x);
    let a2 = a * a;
    let small = a
        * (1.0
            + a2 * (-1.0 / 3.0
                + a2 * (2.0 / 15.0
                    + a2 * (-17.0 / 315.0
                        + a2 * (62.0 / 2835.0
                            + a2 * (-1382.0 / 155_925.0 + a2 * (21844.0 / 6_081_075.0)))))));
    let e = exp(2.0 * a);
    let large = 1.0 - 2.0 / (e + 1.0);
    with_sign_of(if a < 0.4 { small } else { large }, x)
}

/// `2 / sqrt(pi) * (-1)^n / (n! (2n + 1))`: the Taylor coefficients of `erf`.
pub(crate) const ERF_TAYLOR: [f32; 11] = [
    core::f32::consts::FRAC_2_SQRT_PI,
    -0.376_126_38,
    0.112_837_92,
    -0.026_866_172,
    0.005_223_978,
    -0.000_854_832_7,
    0.000_120_553_33,
    -1.492_565e-5,
    1.646_211_4e-6,
    -1.636_584_4e-7,
    1.480_719_3e-8,
];

/// `erfc(x) e^x²` on `[0.75, 4]` as a polynomial in `t = (2x - 4.75) / 3.25`,
/// lowest degree first (least-squares Chebyshev fit, converted to powers).
pub(crate) const ERFC_SCALED: [f32; 14] = [
    0.220_505_7,
    -0.131_587_83,
    0.074_425_966,
    -0.040_157_318,
    0.020_775_741,
    -0.010_346_846,
    0.004_967_899_5,
    -0.002_313_170_6,
    0.001_072_976_2,
    -0.000_473_799_13,
    0.000_161_818_83,
    -6.635_981e-5,
    5.845_842e-5,
    -2.376_534_6e-5,
];

/// `erf x`.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = abs(x);
    let a2 = a * a;
    let mut s = ERF_TAYLOR[10];
    for &c in ERF_TAYLOR[..10].iter().rev() {
        s = s * a2 + c;
    }
    let small = a * s;
    let ac = if a > 4.0 { 4.0 } else { a };
    let t = (2.0 * ac - 4.75) * (1.0 / 3.25);
    let mut h = ERFC_SCALED[13];
    for &c in ERFC_SCALED[..13].iter().rev() {
        h = h * t + c;
    }
    let large = 1.0 - exp(-a2) * h;
    with_sign_of(if a < 0.75 { small } else { large }, x)
}

/// Where [`gelu`] clamps `|x|`: `erfc(16 / sqrt 2) / 2` is near 1e-58, zero
/// in f32, so the clamp changes nothing but keeps `-x² / 2` above -128.
pub(crate) const GELU_CLAMP: f32 = 16.0;

/// `K / sqrt 2` with `K = 0.6`: [`gelu`]'s variable is `t = 1 / (1 + K a)`,
/// `a = |x| / sqrt 2`.
pub(crate) const GELU_K: f32 = 0.424_264_07;

/// `erfc(a) e^a² / (2 t)` as a polynomial in `t`, lowest degree first:
/// relative error 4.6e-9 on `a` in `[0, 16 / sqrt 2]` (fitted by
/// `tools/fit_gelu.py`).
pub(crate) const GELU_P: [f32; 11] = [
    0.169_253_13,
    0.169_382_24,
    0.136_982_74,
    0.092_681_94,
    -0.073_627_77,
    0.206_181_82,
    -0.633_564_6,
    0.810_673_5,
    -0.538_604_3,
    0.188_380_87,
    -0.027_739_53,
];

/// `0.5 x (1 + erf(x / sqrt 2))`, ONNX `Gelu` without approximation, as
/// `x Phi(x)` with `Phi(x) = h` below 0 and `1 - h` above, `h = erfc(a) / 2`
/// (no cancellation on either side): `h = t P(t) e^(-x² / 2)`.
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    // NaN stays NaN.
    let xc = x.clamp(-GELU_CLAMP, GELU_CLAMP);
    let t = 1.0 / (1.0 + GELU_K * abs(xc));
    let last = GELU_P.len() - 1;
    let mut p = GELU_P[last];
    for &c in GELU_P[..last].iter().rev() {
        p = p * t + c;
    }
    // -x² / 2 as `hi + lo` without rounding: `xh` keeps the top 12 bits of
    // the significand, so `xh²` is exact, and `x² - xh² = (x - xh)(x + xh)`.
    let xh = f32::from_bits(xc.to_bits() & 0xffff_f000);
    let hi = -0.5 * (xh * xh);
    let lo = -0.5 * ((xc - xh) * (xc + xh));
    // e^(hi + lo) without rounding the sum: `n ln2` comes off `hi` exactly
    // (`n LN2_HI` is exact and close to it) before `lo` is added.
    let (nf, n) = exp_n(hi + lo);
    let e = exp_finish(((hi - nf * LN2_HI) + lo) - nf * LN2_LO, n);
    let h = t * p * e;
    x * if x < 0.0 { h } else { 1.0 - h }
}

/// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x³)))`, ONNX `Gelu` with
/// `approximate = "tanh"`, computed as `x / (1 + e^-2u)` (the same value:
/// `(1 + tanh u) / 2` is the logistic function of `2u`): one exponential and
/// one division, and no cancellation in `1 + tanh u` for negative `x`.
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    // -2 sqrt(2 / pi) and -2 sqrt(2 / pi) 0.044715.
    const A: f32 = -1.595_769_2;
    const B: f32 = -0.071_354_814;
    let x2 = x * x;
    x / (1.0 + exp(x * (A + B * x2)))
}

/// The sum of `v` in sixteen interleaved partial sums (one vector
/// register's worth, so the loop vectorises without reassociation), added
/// pairwise, then the elements past the last sixteen in order.
#[inline(always)]
pub(crate) fn lane_sum(v: &[f32]) -> f32 {
    let (blocks, rest) = v.as_chunks::<16>();
    let mut acc = [0.0f32; 16];
    for b in blocks {
        for (a, &x) in acc.iter_mut().zip(b) {
            *a += x;
        }
    }
    let mut half = [0.0f32; 8];
    for (k, h) in half.iter_mut().enumerate() {
        *h = acc[k] + acc[k + 8];
    }
    let mut sum =
        ((half[0] + half[4]) + (half[1] + half[5])) + ((half[2] + half[6]) + (half[3] + half[7]));
    for &x in rest {
        sum += x;
    }
    sum
}

/// The functions [`map`] and [`map_in_place`] apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Func {
    /// [`exp`].
    Exp,
    /// [`sigmoid`].
    Sigmoid,
    /// [`tanh`].
    Tanh,
    /// [`erf`].
    Erf,
    /// [`gelu`].
    Gelu,
    /// [`gelu_tanh`].
    GeluTanh,
    /// [`silu`].
    Silu,
}

impl Func {
    /// The explicit vector routine computing this function, if any.
    fn vector(self) -> Option<simd::VFunc> {
        match self {
            Func::Exp => Some(simd::VFunc::Exp),
            Func::Sigmoid => Some(simd::VFunc::Sigmoid),
            Func::Silu => Some(simd::VFunc::Silu),
            Func::Gelu => Some(simd::VFunc::Gelu),
            _ => None,
        }
    }
}

/// One [`map`] or [`map_in_place`] call (`x` is `None` in place).
struct MapLoop<'a> {
    f: Func,
    x: Option<&'a [f32]>,
    y: &'a mut [f32],
}

/// `y[i] = g(x[i])` (or in place), one loop per function so each compiles
/// to straight vector code; blocks of 32 give four independent vectors per
/// iteration, whose polynomial chains overlap.
macro_rules! map_with {
    ($x:expr, $y:expr, $g:path) => {
        match $x {
            Some(x) => {
                let n = x.len().min($y.len());
                let (yb, yt) = $y[..n].as_chunks_mut::<32>();
                let (xb, xt) = x[..n].as_chunks::<32>();
                for (o, v) in yb.iter_mut().zip(xb) {
                    for (o, &v) in o.iter_mut().zip(v) {
                        *o = $g(v);
                    }
                }
                for (o, &v) in yt.iter_mut().zip(xt) {
                    *o = $g(v);
                }
            }
            None => {
                let (yb, yt) = $y.as_chunks_mut::<32>();
                for o in yb.iter_mut() {
                    for o in o.iter_mut() {
                        *o = $g(*o);
                    }
                }
                for o in yt.iter_mut() {
                    *o = $g(*o);
                }
            }
        }
    };
}

impl simd::Vectorize for MapLoop<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let MapLoop { f, x, y } = self;
        match f {
            Func::Exp => map_with!(x, y, exp),
            Func::Sigmoid => map_with!(x, y, sigmoid),
            Func::Tanh => map_with!(x, y, tanh),
            Func::Erf => map_with!(x, y, erf),
            Func::Gelu => map_with!(x, y, gelu),
            Func::GeluTanh => map_with!(x, y, gelu_tanh),
            Func::Silu => map_with!(x, y, silu),
        }
    }
}

/// `y[i] = f(x[i])` over the common length, vectorised.
pub fn map(f: Func, x: &[f32], y: &mut [f32]) {
    if f.vector().is_some_and(|v| simd::exp_family(v, Some(x), y)) {
        return;
    }
    simd::vectorize_wide(MapLoop { f, x: Some(x), y });
}

/// `x[i] = f(x[i])`, vectorised.
pub fn map_in_place(f: Func, x: &mut [f32]) {
    if f.vector().is_some_and(|v| simd::exp_family(v, None, x)) {
        return;
    }
    simd::vectorize_wide(MapLoop { f, x: None, y: x });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance in units in the last place between two finite floats of the
    /// same sign, or 0 when both are the same NaN/infinity class.
    fn ulps(a: f32, b: f32) -> u32 {
        if a.is_nan() || b.is_nan() {
            return if a.is_nan() && b.is_nan() { 0 } else { u32::MAX };
        }
        if a == b {
            return 0;
        }
        let key = |v: f32| {
            let b = v.to_bits() as i64;
            if b < 0x8000_0000 { b } else { 0x8000_0000 - b }
        };
        (key(a) - key(b)).unsigned_abs().min(u32::MAX as u64) as u32
    }

    /// Every 4099th bit pattern (positive and negative), plus the edges.
    fn sweep(mut check: impl FnMut(f32)) {
        let mut bits = 0u32;
        while let Some(next) = bits.checked_add(4099) {
            check(f32::from_bits(bits));
            bits = next;
        }
        for v in [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::MIN_POSITIVE,
            1.0e-45,
            f32::MAX,
            f32::MIN,
            88.72283,
            88.72284,
            -87.33655,
            -103.97208,
            -103.97209,
            0.4,
            0.39999998,
            0.75,
            0.74999994,
            4.0,
        ] {
            check(v);
        }
    }

    fn max_ulps(f: fn(f32) -> f32, reference: impl Fn(f32) -> f32, abs_tol: f32) -> u32 {
        let mut worst = 0;
        sweep(|x| {
            let (got, want) = (f(x), reference(x));
            let u = ulps(got, want);
            // Near zero crossings an absolute bound is the meaningful one.
            let ok_abs = (got - want).abs() <= abs_tol;
            if !ok_abs && u > worst {
                worst = u;
                assert!(u <= 8, "x = {x:e}: got {got:e}, want {want:e} ({u} ulp)");
            }
            if want.is_nan() || got.is_nan() {
                assert_eq!(got.is_nan(), want.is_nan(), "x = {x:e}");
            }
        });
        worst
    }

    #[test]
    fn exp_within_a_few_ulp_of_libm() {
        let w = max_ulps(exp, libm::expf, 0.0);
        assert!(w <= 2, "{w} ulp");
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(-200.0), 0.0);
        assert!(exp(-100.0) > 0.0 && exp(-100.0) < f32::MIN_POSITIVE);
    }

    #[test]
    fn sigmoid_within_a_few_ulp() {
        let reference = |x: f32| {
            let x = f64::from(x);
            (1.0 / (1.0 + libm::exp(-x))) as f32
        };
        let w = max_ulps(sigmoid, reference, 0.0);
        assert!(w <= 3, "{w} ulp");
        assert_eq!(sigmoid(-0.0), 0.5);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
    }

    #[test]
    fn tanh_within_a_few_ulp_of_libm() {
        let w = max_ulps(tanh, libm::tanhf, 0.0);
        assert!(w <= 3, "{w} ulp");
        assert!(tanh(-0.0) == 0.0 && tanh(-0.0).is_sign_negative());
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh(1.0e-30), 1.0e-30);
    }

    /// ONNX's `Gelu` in f64, through `erfc` (which keeps the digits that
    /// `1 + erf` loses below 0).
    pub(crate) fn gelu_reference(x: f32) -> f32 {
        let x = f64::from(x);
        (0.5 * x * libm::erfc(-x * core::f64::consts::FRAC_1_SQRT_2)) as f32
    }

    #[test]
    fn gelu_within_a_few_ulp_of_the_formula() {
        // Absolute below the normal range (the last products round there).
        let mut w = max_ulps(gelu, gelu_reference, 1.0e-37);
        for i in 0..200_000 {
            let x = -16.0 + i as f32 * 1.1e-4;
            let (got, want) = (gelu(x), gelu_reference(x));
            if (got - want).abs() > 1.0e-37 {
                w = w.max(ulps(got, want));
            }
        }
        // Up to 4 ulp come from `t` rounded near 1, where `P(t)` is steep.
        assert!(w <= 6, "{w} ulp");
        assert!(gelu(-0.0) == 0.0 && gelu(-0.0).is_sign_negative());
        assert_eq!(gelu(f32::INFINITY), f32::INFINITY);
        assert_eq!(gelu(f32::MAX), f32::MAX);
        assert_eq!(gelu(-20.0), 0.0);
        // As the formula: -inf * (1 + erf(-inf)) = -inf * 0.
        assert!(gelu(f32::NEG_INFINITY).is_nan());
        assert!(gelu(f32::NAN).is_nan());
    }

    #[test]
    fn erf_within_a_few_ulp_of_libm() {
        // Absolute error bound of the fitted range, for values near 1.
        let w = max_ulps(erf, libm::erff, 6.0e-8);
        assert!(w <= 3, "{w} ulp");
        assert!(erf(-0.0) == 0.0 && erf(-0.0).is_sign_negative());
        assert_eq!(erf(f32::INFINITY), 1.0);
        assert_eq!(erf(-10.0), -1.0);
    }

    #[test]
    fn gelu_tanh_close_to_the_formula() {
        // The formula as written, in f64, where `1 + tanh u` keeps enough
        // digits (moderate x); then its logistic form in f64 over the whole
        // sweep, which stays exact where the first cancels.
        let c = (2.0 / core::f64::consts::PI).sqrt();
        let u = |x: f64| c * (x + 0.044715 * x * x * x);
        for x in [-3.5f32, -1.0, -0.3, 0.0, 0.2, 1.7, 9.0, 1.0e4] {
            let xd = f64::from(x);
            let r = (0.5 * xd * (1.0 + libm::tanh(u(xd)))) as f32;
            let g = gelu_tanh(x);
            assert!((g - r).abs() <= 1.0e-6 * r.abs().max(1.0), "{x}: {g} vs {r}");
        }
        let reference = |x: f32| {
            let x = f64::from(x);
            (x / (1.0 + libm::exp(-2.0 * u(x)))) as f32
        };
        // The argument `t = -2u` of the exponential is rounded in f32 (as
        // the exact kernel's is), which moves `e^t` by about `|t|` ulp: the
        // bound scales with it.
        sweep(|x| {
            let (g, r) = (gelu_tanh(x), reference(x));
            let t = (2.0 * u(f64::from(x))).abs().min(1.0e6) as f32;
            if r.is_nan() {
                assert!(g.is_nan(), "x = {x:e}: got {g:e}");
            } else if r.is_finite() {
                assert!(
                    (g - r).abs() <= 4.0e-7 * (2.0 + t) * r.abs() + 1.0e-30,
                    "x = {x:e}: {g:e} vs {r:e}"
                );
            } else {
                assert_eq!(g, r, "x = {x:e}");
            }
        });
        assert_eq!(gelu_tanh(f32::INFINITY), f32::INFINITY);
        assert!(gelu_tanh(-40.0) <= 0.0 && gelu_tanh(-40.0) > -1.0e-30);
        // As the formula: -inf * (1 + tanh(-inf)) = -inf * 0.
        assert!(gelu_tanh(f32::NEG_INFINITY).is_nan());
        assert!(gelu_tanh(f32::NAN).is_nan());
    }

    #[test]
    fn slices_match_the_scalar_functions() {
        let x: [f32; 77] = core::array::from_fn(|i| (i as f32 - 38.0) * 0.17);
        let mut y = [0.0f32; 77];
        map(Func::Tanh, &x, &mut y);
        let mut z = x;
        map_in_place(Func::Tanh, &mut z);
        for ((a, b), &v) in y.iter().zip(&z).zip(&x) {
            assert_eq!(a.to_bits(), tanh(v).to_bits());
            assert_eq!(b.to_bits(), tanh(v).to_bits());
        }
    }
}
