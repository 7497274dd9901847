//! Element traits the kernels are generic over.
//!
//! [`Num`] is implemented for `f32`, `f64`, `f16`, `bf16` and every primitive integer, with
//! ONNX (numpy) semantics: integer arithmetic wraps, integer division truncates
//! toward zero, and the float functions go through `libm` so that results are
//! bit-identical on every target. [`Float`] adds the transcendental functions,
//! [`Int`] the bitwise ones, and [`Flag`] abstracts over how a boolean is stored.

/// A numeric element: arithmetic, ordering, and the identities reductions need.
pub trait Num: Copy + PartialOrd + Default + core::fmt::Debug + 'static {
    /// Additive identity.
    const ZERO: Self;
    /// Multiplicative identity.
    const ONE: Self;
    /// The smallest value (`-inf` for floats): the identity of `max`.
    const LOWEST: Self;
    /// The largest value (`+inf` for floats): the identity of `min`.
    const HIGHEST: Self;
    /// `self + o`, wrapping for integers.
    fn add(self, o: Self) -> Self;
    /// `self - o`, wrapping for integers.
    fn sub(self, o: Self) -> Self;
    /// `self * o`, wrapping for integers.
    fn mul(self, o: Self) -> Self;
    /// `self / o`; integers truncate toward zero (and `MIN / -1` wraps);
    /// `None` for integer division by zero.
    fn div(self, o: Self) -> Option<Self>;
    /// ONNX `Mod` with `fmod = 0`: the remainder takes the divisor's sign.
    /// `None` for integer division by zero.
    fn rem_floor(self, o: Self) -> Option<Self>;
    /// ONNX `Mod` with `fmod = 1`: the remainder takes the dividend's sign.
    /// `None` for integer division by zero.
    fn rem_trunc(self, o: Self) -> Option<Self>;
    /// `self` raised to `o`. For integers a negative exponent gives the real
    /// result truncated toward zero (so `0` unless the base is 1 or -1), and
    /// `None` for a zero base.
    fn pow(self, o: Self) -> Option<Self>;
    /// The larger value; NaN if either is NaN.
    fn max_of(self, o: Self) -> Self;
    /// The smaller value; NaN if either is NaN.
    fn min_of(self, o: Self) -> Self;
    /// `-self`, wrapping for integers.
    fn neg(self) -> Self;
    /// `|self|`, wrapping for integers (`MIN` stays `MIN`).
    fn abs(self) -> Self;
    /// -1, 0 or 1 by the sign of `self` (NaN stays NaN).
    fn sign(self) -> Self;
    /// `n` converted (rounded for floats, wrapped for integers); used for counts.
    fn from_usize(n: usize) -> Self;
    /// Whether `self` is NaN (always false for integers).
    fn is_nan(self) -> bool;
    /// The type a sum of products accumulates in: `f32` for the 16-bit
    /// floats (numpy's matmul widens each product, sums in `f32` and rounds
    /// the sum once), `Self` for every other type.
    type Acc: Num;
    /// `self` widened to the accumulator type (exact).
    fn to_acc(self) -> Self::Acc;
    /// An accumulated value rounded back to `Self`.
    fn from_acc(a: Self::Acc) -> Self;
    /// Whether a reduction's running sum stays in [`Num::Acc`] until the end
    /// (numpy sums `float16` in `float32`) rather than being rounded to `Self`
    /// after every addition (`bfloat16` comes from `ml_dtypes`, whose add
    /// loop rounds each step, also inside a reduction).
    const WIDE_SUMS: bool = true;
    /// `s` itself when `Self` is `f32`, for kernels written in explicit
    /// `f32` vector code; `None` for every other type.
    #[inline]
    fn f32s(s: &[Self]) -> Option<&[f32]> {
        let _ = s;
        None
    }
    /// The mutable [`Num::f32s`].
    #[inline]
    fn f32s_mut(s: &mut [Self]) -> Option<&mut [f32]> {
        let _ = s;
        None
    }
    /// One step of a reduction's sum: `acc + x`, rounded as [`Num::WIDE_SUMS`] says.
    #[inline]
    fn sum_step(acc: Self::Acc, x: Self) -> Self::Acc {
        let s = acc.add(x.to_acc());
        if Self::WIDE_SUMS { s } else { Self::from_acc(s).to_acc() }
    }
}

/// A floating point element (`f32`, `f64`, `f16`, `bf16`).
pub trait Float: Num {
    /// Not a number.
    const NAN: Self;
    /// Positive infinity.
    const INFINITY: Self;
    /// Converts from `f64`, rounding to nearest.
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` exactly.
    fn to_f64(self) -> f64;
    /// `e^self`.
    fn exp(self) -> Self;
    /// Natural logarithm.
    fn ln(self) -> Self;
    /// `ln(1 + self)`, accurate near zero.
    fn ln_1p(self) -> Self;
    /// Square root.
    fn sqrt(self) -> Self;
    /// Hyperbolic tangent.
    fn tanh(self) -> Self;
    /// Error function.
    fn erf(self) -> Self;
    /// Sine.
    fn sin(self) -> Self;
    /// Cosine.
    fn cos(self) -> Self;
    /// Tangent.
    fn tan(self) -> Self;
    /// Arcsine.
    fn asin(self) -> Self;
    /// Arccosine.
    fn acos(self) -> Self;
    /// Arctangent.
    fn atan(self) -> Self;
    /// Hyperbolic sine.
    fn sinh(self) -> Self;
    /// Hyperbolic cosine.
    fn cosh(self) -> Self;
    /// Inverse hyperbolic sine.
    fn asinh(self) -> Self;
    /// Inverse hyperbolic cosine.
    fn acosh(self) -> Self;
    /// Inverse hyperbolic tangent.
    fn atanh(self) -> Self;
    /// Largest integer not above `self`.
    fn floor(self) -> Self;
    /// Smallest integer not below `self`.
    fn ceil(self) -> Self;
    /// Nearest integer, ties to even.
    fn round_even(self) -> Self;
    /// `self` raised to `o` (C `pow` semantics).
    fn powf(self, o: Self) -> Self;
    /// `self` with the sign of `o`.
    fn copysign(self, o: Self) -> Self;
    /// `self` raised to a small integer power by repeated multiplication.
    fn powi_small(self, n: u32) -> Self {
        let mut r = Self::ONE;
        for _ in 0..n {
            r = r.mul(self);
        }
        r
    }
}

/// An integer element, for the bitwise ops.
pub trait Int: Num {
    /// Bit width.
    const BITS: u32;
    /// `self << o`; shifting by the width or more gives 0 (ONNX `BitShift`).
    fn shl(self, o: Self) -> Self;
    /// `self >> o` (logical for unsigned); by the width or more gives 0.
    fn shr(self, o: Self) -> Self;
    /// Bitwise and.
    fn bit_and(self, o: Self) -> Self;
    /// Bitwise or.
    fn bit_or(self, o: Self) -> Self;
    /// Bitwise xor.
    fn bit_xor(self, o: Self) -> Self;
    /// Bitwise not.
    fn bit_not(self) -> Self;
    /// Converts to `i64` if it fits (used for index tensors).
    fn to_i64(self) -> Option<i64>;
}

/// How a boolean element is stored: `bool` in the caller's buffers, `u8`
/// (0 or 1; any nonzero byte reads as true) inside the arena.
pub trait Flag: Copy + 'static {
    /// Stores `b`.
    fn from_bool(b: bool) -> Self;
    /// Reads the flag.
    fn get(self) -> bool;
}

impl Flag for bool {
    #[inline]
    fn from_bool(b: bool) -> Self {
        b
    }
    #[inline]
    fn get(self) -> bool {
        self
    }
}

impl Flag for u8 {
    #[inline]
    fn from_bool(b: bool) -> Self {
        u8::from(b)
    }
    #[inline]
    fn get(self) -> bool {
        self != 0
    }
}

/// `max_of`/`min_of` for float types: NaN if either operand is NaN.
macro_rules! nan_max_min {
    ($t:ty) => {
        #[inline]
        fn max_of(self, o: Self) -> Self {
            if self.is_nan() || o.is_nan() {
                <$t>::NAN
            } else if o > self {
                o
            } else {
                self
            }
        }
        #[inline]
        fn min_of(self, o: Self) -> Self {
            if self.is_nan() || o.is_nan() {
                <$t>::NAN
            } else if o < self {
                o
            } else {
                self
            }
        }
    };
}

/// [`Num::f32s`] of a type other than `f32`.
fn no_f32s<S, V>(_: S) -> Option<V> {
    None
}

macro_rules! impl_float {
    ($t:ty, $f32s:ident, $exp:ident, $ln:ident, $ln1p:ident, $sqrt:ident, $tanh:ident, $erf:ident,
     $sin:ident, $cos:ident, $floor:ident, $ceil:ident, $rint:ident, $pow:ident,
     $fmod:ident, $fabs:ident, $copysign:ident,
     [$($trig:ident = $libm:ident),*]) => {
        impl Num for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline]
            fn f32s(s: &[Self]) -> Option<&[f32]> {
                $f32s(s)
            }
            #[inline]
            fn f32s_mut(s: &mut [Self]) -> Option<&mut [f32]> {
                $f32s(s)
            }
            #[inline]
            fn add(self, o: Self) -> Self {
                self + o
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self - o
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self * o
            }
            #[inline]
            fn div(self, o: Self) -> Option<Self> {
                Some(self / o)
            }
            #[inline]
            fn rem_floor(self, o: Self) -> Option<Self> {
                let r = libm::$fmod(self, o);
                Some(if r != 0.0 && ((r < 0.0) != (o < 0.0)) { r + o } else { r })
            }
            #[inline]
            fn rem_trunc(self, o: Self) -> Option<Self> {
                Some(libm::$fmod(self, o))
            }
            #[inline]
            fn pow(self, o: Self) -> Option<Self> {
                Some(libm::$pow(self, o))
            }
            nan_max_min!($t);
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn abs(self) -> Self {
                libm::$fabs(self)
            }
            #[inline]
            fn sign(self) -> Self {
                if self > 0.0 {
                    1.0
                } else if self < 0.0 {
                    -1.0
                } else {
                    self
                }
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline]
            fn is_nan(self) -> bool {
                self != self
            }
            type Acc = Self;
            #[inline]
            fn to_acc(self) -> Self {
                self
            }
            #[inline]
            fn from_acc(a: Self) -> Self {
                a
            }
        }

        impl Float for $t {
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            #[inline]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline]
            fn exp(self) -> Self {
                libm::$exp(self)
            }
            #[inline]
            fn ln(self) -> Self {
                libm::$ln(self)
            }
            #[inline]
            fn ln_1p(self) -> Self {
                libm::$ln1p(self)
            }
            #[inline]
            fn sqrt(self) -> Self {
                hw::$sqrt(self)
            }
            #[inline]
            fn tanh(self) -> Self {
                libm::$tanh(self)
            }
            #[inline]
            fn erf(self) -> Self {
                libm::$erf(self)
            }
            #[inline]
            fn sin(self) -> Self {
                libm::$sin(self)
            }
            #[inline]
            fn cos(self) -> Self {
                libm::$cos(self)
            }
            $(
                #[inline]
                fn $trig(self) -> Self {
                    libm::$libm(self)
                }
            )*
            #[inline]
            fn floor(self) -> Self {
                libm::$floor(self)
            }
            #[inline]
            fn ceil(self) -> Self {
                libm::$ceil(self)
            }
            #[inline]
            fn round_even(self) -> Self {
                libm::$rint(self)
            }
            #[inline]
            fn powf(self, o: Self) -> Self {
                libm::$pow(self, o)
            }
            #[inline]
            fn copysign(self, o: Self) -> Self {
                libm::$copysign(self, o)
            }
        }
    };
}

/// Square roots: `libm`'s, except `f32` on an Arm core whose FPU the
/// build may use (`cfg(onnx_codegen_arm_fma)`: FPv4-SP and later), where
/// it is `VSQRT.F32` (one instruction, correctly rounded as `libm`'s, so
/// the same bits; `libm`'s is a software loop there).
mod hw {
    pub(crate) use libm::sqrt;
    #[cfg(not(onnx_codegen_arm_fma))]
    pub(crate) use libm::sqrtf;

    #[cfg(onnx_codegen_arm_fma)]
    #[inline]
    #[allow(unsafe_code)]
    pub(crate) fn sqrtf(x: f32) -> f32 {
        let r: u32;
        // SAFETY: FPU register-to-register instructions (the cfg promises
        // a hard-float FPU); they touch no memory or stack, only `s0`
        // (declared) and the FPSCR's cumulative exception flags, which
        // nothing reads.
        unsafe {
            core::arch::asm!("vmov s0, {x}", "vsqrt.f32 s0, s0", "vmov {r}, s0",
                             x = in(reg) x.to_bits(), r = lateout(reg) r, out("s0") _,
                             options(pure, nomem, nostack));
        }
        f32::from_bits(r)
    }
}

/// [`Float::sqrt`] of an `f32` (the FPU's where there is one).
#[inline]
pub(crate) fn sqrtf(x: f32) -> f32 {
    hw::sqrtf(x)
}

impl_float!(
    f32,
    Some,
    expf,
    logf,
    log1pf,
    sqrtf,
    tanhf,
    erff,
    sinf,
    cosf,
    floorf,
    ceilf,
    rintf,
    powf,
    fmodf,
    fabsf,
    copysignf,
    [
        tan = tanf,
        asin = asinf,
        acos = acosf,
        atan = atanf,
        sinh = sinhf,
        cosh = coshf,
        asinh = asinhf,
        acosh = acoshf,
        atanh = atanhf
    ]
);
impl_float!(
    f64,
    no_f32s,
    exp,
    log,
    log1p,
    sqrt,
    tanh,
    erf,
    sin,
    cos,
    floor,
    ceil,
    rint,
    pow,
    fmod,
    fabs,
    copysign,
    [
        tan = tan,
        asin = asin,
        acos = acos,
        atan = atan,
        sinh = sinh,
        cosh = cosh,
        asinh = asinh,
        acosh = acosh,
        atanh = atanh
    ]
);

/// `Num` and `Float` for the 16-bit floats the way numpy computes them: each
/// operation widens its operands to `f32`, computes there, and rounds the
/// result back once. `f32` holds more than twice the 16-bit significands, so
/// the basic operations (`+ - * /`, `sqrt`) round exactly as a native 16-bit
/// implementation would.
macro_rules! impl_half {
    ($t:ty, $wide_sums:expr) => {
        impl Num for $t {
            const ZERO: Self = <$t>::ZERO;
            const ONE: Self = <$t>::ONE;
            const LOWEST: Self = <$t>::NEG_INFINITY;
            const HIGHEST: Self = <$t>::INFINITY;
            #[inline]
            fn add(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() + o.to_f32())
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() - o.to_f32())
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                <$t>::from_f32(self.to_f32() * o.to_f32())
            }
            #[inline]
            fn div(self, o: Self) -> Option<Self> {
                Some(<$t>::from_f32(self.to_f32() / o.to_f32()))
            }
            #[inline]
            fn rem_floor(self, o: Self) -> Option<Self> {
                self.to_f32().rem_floor(o.to_f32()).map(<$t>::from_f32)
            }
            #[inline]
            fn rem_trunc(self, o: Self) -> Option<Self> {
                self.to_f32().rem_trunc(o.to_f32()).map(<$t>::from_f32)
            }
            #[inline]
            fn pow(self, o: Self) -> Option<Self> {
                Some(<$t>::from_f32(libm::powf(self.to_f32(), o.to_f32())))
            }
            nan_max_min!($t);
            #[inline]
            fn neg(self) -> Self {
                -self
            }
            #[inline]
            fn abs(self) -> Self {
                <$t>::from_bits(self.to_bits() & 0x7fff)
            }
            #[inline]
            fn sign(self) -> Self {
                <$t>::from_f32(Num::sign(self.to_f32()))
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                <$t>::from_f64(n as f64)
            }
            #[inline]
            fn is_nan(self) -> bool {
                self != self
            }
            type Acc = f32;
            const WIDE_SUMS: bool = $wide_sums;
            #[inline]
            fn to_acc(self) -> f32 {
                self.to_f32()
            }
            #[inline]
            fn from_acc(a: f32) -> Self {
                <$t>::from_f32(a)
            }
        }

        impl Float for $t {
            const NAN: Self = <$t>::NAN;
            const INFINITY: Self = <$t>::INFINITY;
            #[inline]
            fn from_f64(v: f64) -> Self {
                <$t>::from_f64(v)
            }
            #[inline]
            fn to_f64(self) -> f64 {
                <$t>::to_f64(self)
            }
            impl_half!(@unary $t, exp, ln, ln_1p, sqrt, tanh, erf, sin, cos, tan, asin, acos,
                atan, sinh, cosh, asinh, acosh, atanh, floor, ceil, round_even);
            #[inline]
            fn powf(self, o: Self) -> Self {
                <$t>::from_f32(libm::powf(self.to_f32(), o.to_f32()))
            }
            #[inline]
            fn copysign(self, o: Self) -> Self {
                <$t>::from_bits((self.to_bits() & 0x7fff) | (o.to_bits() & 0x8000))
            }
        }
    };
    (@unary $t:ty, $($f:ident),*) => {
        $(
            #[inline]
            fn $f(self) -> Self {
                <$t>::from_f32(Float::$f(self.to_f32()))
            }
        )*
    };
}

impl_half!(half::f16, true);
impl_half!(half::bf16, false);

macro_rules! impl_int {
    ($t:ty, $signed:expr) => {
        impl Num for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const LOWEST: Self = <$t>::MIN;
            const HIGHEST: Self = <$t>::MAX;
            #[inline]
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline]
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline]
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline]
            fn div(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_div(o)) }
            }
            #[inline]
            fn rem_floor(self, o: Self) -> Option<Self> {
                if o == 0 {
                    return None;
                }
                let r = self.wrapping_rem(o);
                #[allow(unused_comparisons)]
                let differ = (r < 0) != (o < 0);
                Some(if r != 0 && differ { r.wrapping_add(o) } else { r })
            }
            #[inline]
            fn rem_trunc(self, o: Self) -> Option<Self> {
                if o == 0 { None } else { Some(self.wrapping_rem(o)) }
            }
            #[inline]
            #[allow(unused_comparisons)]
            fn pow(self, o: Self) -> Option<Self> {
                if o < 0 {
                    return match self {
                        0 => None,
                        1 => Some(1),
                        _ if $signed && self == (0 as $t).wrapping_sub(1) => {
                            Some(if o % 2 == 0 { 1 } else { self })
                        }
                        _ => Some(0),
                    };
                }
                let mut base = self;
                let mut e = o;
                let mut r: $t = 1;
                while e > 0 {
                    if e & 1 == 1 {
                        r = r.wrapping_mul(base);
                    }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                Some(r)
            }
            #[inline]
            fn max_of(self, o: Self) -> Self {
                if o > self { o } else { self }
            }
            #[inline]
            fn min_of(self, o: Self) -> Self {
                if o < self { o } else { self }
            }
            #[inline]
            fn neg(self) -> Self {
                (0 as $t).wrapping_sub(self)
            }
            #[inline]
            #[allow(unused_comparisons)]
            fn abs(self) -> Self {
                if self < 0 { self.neg() } else { self }
            }
            #[inline]
            #[allow(unused_comparisons)]
            fn sign(self) -> Self {
                if self > 0 {
                    1
                } else if self < 0 {
                    (0 as $t).wrapping_sub(1)
                } else {
                    0
                }
            }
            #[inline]
            fn from_usize(n: usize) -> Self {
                n as $t
            }
            #[inline]
            fn is_nan(self) -> bool {
                false
            }
            type Acc = Self;
            #[inline]
            fn to_acc(self) -> Self {
                self
            }
            #[inline]
            fn from_acc(a: Self) -> Self {
                a
            }
        }

        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline]
            fn shl(self, o: Self) -> Self {
                match u32::try_from(o) {
                    Ok(s) if s < Self::BITS => self << s,
                    _ => 0,
                }
            }
            #[inline]
            fn shr(self, o: Self) -> Self {
                match u32::try_from(o) {
                    Ok(s) if s < Self::BITS => self >> s,
                    _ => 0,
                }
            }
            #[inline]
            fn bit_and(self, o: Self) -> Self {
                self & o
            }
            #[inline]
            fn bit_or(self, o: Self) -> Self {
                self | o
            }
            #[inline]
            fn bit_xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline]
            fn bit_not(self) -> Self {
                !self
            }
            #[inline]
            fn to_i64(self) -> Option<i64> {
                i64::try_from(self).ok()
            }
        }
    };
}

impl_int!(i8, true);
impl_int!(i16, true);
impl_int!(i32, true);
impl_int!(i64, true);
impl_int!(u8, false);
impl_int!(u16, false);
impl_int!(u32, false);
impl_int!(u64, false);

#[cfg(test)]
mod tests {
    use super::*;

    /// `sqrtf` (`VSQRT.F32` on an Arm FPU) is `libm`'s, bit for bit but
    /// for NaN payloads.
    #[test]
    fn sqrtf_is_libms() {
        let mut x = 0x1234_5678u32;
        let special =
            [0.0f32, -0.0, 1.0, 2.0, 0.25, f32::MIN_POSITIVE, 1e-45, f32::MAX, f32::INFINITY];
        for i in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let v = special.get(i).copied().unwrap_or(f32::from_bits(x & 0x7fff_ffff));
            if v.is_nan() {
                // Payloads may differ (the FPU keeps the input's).
                assert!(sqrtf(v).is_nan());
            } else {
                assert_eq!(sqrtf(v).to_bits(), libm::sqrtf(v).to_bits(), "{v:e}");
            }
        }
        assert!(sqrtf(-1.0).is_nan() && sqrtf(f32::NAN).is_nan());
    }

    #[test]
    fn integer_division_truncates_and_checks_zero() {
        assert_eq!(Num::div(-7i32, 2), Some(-3));
        assert_eq!(Num::div(7i32, -2), Some(-3));
        assert_eq!(Num::div(i32::MIN, -1), Some(i32::MIN));
        assert_eq!(Num::div(1u8, 0), None);
    }

    #[test]
    fn remainders() {
        // fmod = 0 takes the divisor's sign, fmod = 1 the dividend's.
        assert_eq!((-7i32).rem_floor(3), Some(2));
        assert_eq!(7i32.rem_floor(-3), Some(-2));
        assert_eq!((-7i32).rem_trunc(3), Some(-1));
        assert_eq!(7i32.rem_trunc(-3), Some(1));
        assert_eq!((-7.5f32).rem_trunc(2.0), Some(-1.5));
        assert_eq!((-7.5f32).rem_floor(2.0), Some(0.5));
        assert_eq!(5u8.rem_floor(0), None);
    }

    #[test]
    fn integer_pow() {
        assert_eq!(Num::pow(3i64, 4), Some(81));
        assert_eq!(Num::pow(2i32, -1), Some(0));
        assert_eq!(Num::pow(-1i32, -3), Some(-1));
        assert_eq!(Num::pow(-1i32, -2), Some(1));
        assert_eq!(Num::pow(0i32, -1), None);
        assert_eq!(Num::pow(2u8, 9), Some(0));
        assert_eq!(Num::pow(2.0f32, 0.5), Some(libm::sqrtf(2.0)));
    }

    #[test]
    fn min_max_propagate_nan() {
        assert!(1.0f32.max_of(f32::NAN).is_nan());
        assert!(f64::NAN.min_of(1.0).is_nan());
        assert_eq!(3i8.max_of(-4), 3);
        assert_eq!(3i8.min_of(-4), -4);
    }

    #[test]
    fn shifts_past_width_give_zero() {
        assert_eq!(1u8.shl(7), 128);
        assert_eq!(1u8.shl(8), 0);
        assert_eq!(256u32.shr(8), 1);
        assert_eq!(256u32.shr(40), 0);
    }

    #[test]
    fn half_floats_compute_in_f32_and_round_once() {
        use half::{bf16, f16};
        // 1 + 2^-11 is a tie in f16 and rounds to even (1.0); 1 + 3 * 2^-11 rounds up.
        let one = f16::ONE;
        assert_eq!(one.add(f16::from_f32(1.0 / 2048.0)), one);
        assert_eq!(one.add(f16::from_f32(3.0 / 2048.0)).to_f32(), 1.001_953_1);
        assert_eq!(f16::from_f32(65504.0).mul(f16::from_f32(2.0)), f16::INFINITY);
        assert_eq!(
            Num::div(f16::from_f32(1.0), f16::from_f32(3.0)),
            Some(f16::from_f32(1.0 / 3.0))
        );
        assert_eq!(f16::from_f32(-7.5).rem_floor(f16::from_f32(2.0)), Some(f16::from_f32(0.5)));
        assert_eq!(f16::from_f32(-7.5).rem_trunc(f16::from_f32(2.0)), Some(f16::from_f32(-1.5)));
        assert!(f16::NAN.max_of(one).is_nan());
        assert_eq!(Num::abs(f16::from_f32(-2.5)), f16::from_f32(2.5));
        assert_eq!(f16::from_f32(3.0).copysign(f16::from_f32(-0.0)), f16::from_f32(-3.0));
        assert_eq!(Float::sqrt(bf16::from_f32(4.0)), bf16::from_f32(2.0));
        assert_eq!(Float::round_even(bf16::from_f32(2.5)), bf16::from_f32(2.0));
        assert_eq!(bf16::from_usize(3), bf16::from_f32(3.0));
        assert_eq!(bf16::ONE.sign(), bf16::ONE);
        assert_eq!(Num::sign(bf16::from_f32(-4.0)), bf16::from_f32(-1.0));
    }

    #[test]
    fn round_half_to_even() {
        assert_eq!(2.5f32.round_even(), 2.0);
        assert_eq!(3.5f32.round_even(), 4.0);
        assert_eq!((-2.5f64).round_even(), -2.0);
        assert_eq!(0.5f64.round_even(), 0.0);
    }
}
