//! ONNX `Cast` between `f32`, `f64`, `f16`, `bf16`, every integer and `bool`.
//!
//! Every value goes through a lossless intermediate (`i128` for integers and
//! booleans, `f64` for floats) and then to the destination:
//!
//! - integer to integer: two's complement truncation (C-style wrap), e.g.
//!   `300i32 -> u8` is 44 and `-1i32 -> u32` is `u32::MAX`;
//! - float to integer: truncation toward zero; out-of-range values (undefined
//!   in ONNX) saturate and NaN becomes 0, so the result is still deterministic;
//! - to a float: rounding to nearest, ties to even; out-of-range values become
//!   infinities (`f16`, `bf16` via the `half` crate);
//! - to `bool`: true for any nonzero value, including NaN;
//! - from `bool`: 0 or 1.
//!
//! Integers beyond 2^53 going to `f16`/`bf16` are rounded twice (through
//! `f64`); those above 2^53 overflow `f16` anyway.
//!
//! Booleans stored as `u8` in the arena convert from other types with
//! [`cast_to_flag`] (numeric `u8` would truncate 0.5 to 0, a flag makes it 1);
//! converting *from* such a flag is the plain `u8` cast.

use crate::num::Flag;
use crate::{Error, Result, ensure};
use half::{bf16, f16};

/// The lossless intermediate a cast goes through.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Wide {
    /// An integer or boolean value.
    Int(i128),
    /// A floating point value.
    Float(f64),
}

/// An element type `Cast` supports.
pub trait CastElement: Copy + 'static {
    /// The value, exactly.
    fn to_wide(self) -> Wide;
    /// Converts with ONNX `Cast` semantics (see the module docs).
    fn from_wide(w: Wide) -> Self;
}

macro_rules! cast_int {
    ($($t:ty),*) => {$(
        impl CastElement for $t {
            #[inline]
            fn to_wide(self) -> Wide {
                Wide::Int(self as i128)
            }
            #[inline]
            fn from_wide(w: Wide) -> Self {
                match w {
                    Wide::Int(v) => v as $t,
                    Wide::Float(v) => v as $t,
                }
            }
        }
    )*};
}
cast_int!(i8, i16, i32, i64, u8, u16, u32, u64);

impl CastElement for f32 {
    #[inline]
    fn to_wide(self) -> Wide {
        Wide::Float(self as f64)
    }
    #[inline]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Int(v) => v as f32,
            Wide::Float(v) => v as f32,
        }
    }
}

impl CastElement for f64 {
    #[inline]
    fn to_wide(self) -> Wide {
        Wide::Float(self)
    }
    #[inline]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Int(v) => v as f64,
            Wide::Float(v) => v,
        }
    }
}

impl CastElement for f16 {
    #[inline]
    fn to_wide(self) -> Wide {
        Wide::Float(self.to_f64())
    }
    #[inline]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Int(v) => f16::from_f64(v as f64),
            Wide::Float(v) => f16::from_f64(v),
        }
    }
}

impl CastElement for bf16 {
    #[inline]
    fn to_wide(self) -> Wide {
        Wide::Float(self.to_f64())
    }
    #[inline]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Int(v) => bf16::from_f64(v as f64),
            Wide::Float(v) => bf16::from_f64(v),
        }
    }
}

impl CastElement for bool {
    #[inline]
    fn to_wide(self) -> Wide {
        Wide::Int(i128::from(self))
    }
    #[inline]
    fn from_wide(w: Wide) -> Self {
        match w {
            Wide::Int(v) => v != 0,
            Wide::Float(v) => v != 0.0,
        }
    }
}

/// Casts one value.
#[inline]
pub fn cast_one<S: CastElement, D: CastElement>(v: S) -> D {
    D::from_wide(v.to_wide())
}

/// ONNX `Cast` of a whole tensor; `x` and `y` have the same length.
pub fn cast<S: CastElement, D: CastElement>(x: &[S], y: &mut [D]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = cast_one(v);
    }
    Ok(())
}

/// `Cast` to bool with the result stored as a [`Flag`] (e.g. a `u8` in the arena).
pub fn cast_to_flag<S: CastElement, F: Flag>(x: &[S], y: &mut [F]) -> Result {
    ensure(x.len() == y.len(), Error::ShapeMismatch)?;
    for (o, &v) in y.iter_mut().zip(x) {
        *o = F::from_bool(cast_one::<S, bool>(v));
    }
    Ok(())
}

/// A low-precision element format, stored in generated code as raw bytes:
/// one byte per element for the 8-bit floats, two per byte for the 4-bit
/// types and four per byte for the 2-bit ones (element `i` in the low bits
/// first, unused high bits zero, as in ONNX tensors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LowBit {
    /// `float8e4m3fn`: bias 7, no infinity, NaN is `S.1111.111`, max 448.
    F8E4M3FN,
    /// `float8e4m3fnuz`: bias 8, no infinity, no -0, NaN is `0x80`, max 240.
    F8E4M3FNUZ,
    /// `float8e5m2`: IEEE-like, bias 15, infinities, max 57344.
    F8E5M2,
    /// `float8e5m2fnuz`: bias 16, no infinity, no -0, NaN is `0x80`, max 57344.
    F8E5M2FNUZ,
    /// `float8e8m0`: an unsigned power of two `2^(code-127)`, `0xFF` is NaN.
    F8E8M0,
    /// `float4e2m1`: bias 1, values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
    F4E2M1,
    /// `int4`, two's complement.
    I4,
    /// `uint4`.
    U4,
    /// `int2`, two's complement.
    I2,
    /// `uint2`.
    U2,
}

/// How a cast to `float8e8m0` rounds (the `round_mode` attribute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Round {
    /// Away from zero (any nonzero fraction goes to the next power of two).
    Up,
    /// Toward zero.
    Down,
    /// To the nearest power of two, ties up.
    Nearest,
}

/// The parameters of a float8 format with sign, exponent and mantissa.
struct Minifloat {
    mant: u32,
    bias: i32,
    /// The largest finite magnitude code.
    max: u8,
    /// Unsigned-zero formats (`fnuz`): no -0, a single NaN `0x80`.
    fnuz: bool,
    /// Whether the format has infinities (`0x7C`, `e5m2` only).
    inf: bool,
}

/// `2^e` for `e` in the normal range of `f64`.
fn pow2(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

impl LowBit {
    /// Bits per element.
    pub const fn bits(self) -> usize {
        match self {
            LowBit::F4E2M1 | LowBit::I4 | LowBit::U4 => 4,
            LowBit::I2 | LowBit::U2 => 2,
            _ => 8,
        }
    }

    /// The bytes `n` packed elements take.
    pub const fn packed_len(self, n: usize) -> usize {
        n.div_ceil(8 / self.bits())
    }

    fn minifloat(self) -> Option<Minifloat> {
        Some(match self {
            LowBit::F8E4M3FN => Minifloat { mant: 3, bias: 7, max: 0x7E, fnuz: false, inf: false },
            LowBit::F8E4M3FNUZ => Minifloat { mant: 3, bias: 8, max: 0x7F, fnuz: true, inf: false },
            LowBit::F8E5M2 => Minifloat { mant: 2, bias: 15, max: 0x7B, fnuz: false, inf: true },
            LowBit::F8E5M2FNUZ => {
                Minifloat { mant: 2, bias: 16, max: 0x7F, fnuz: true, inf: false }
            }
            LowBit::F4E2M1 => Minifloat { mant: 1, bias: 1, max: 0x7, fnuz: false, inf: false },
            _ => return None,
        })
    }

    /// The value of element code `code` (the low [`LowBit::bits`] bits).
    pub fn decode(self, code: u8) -> Wide {
        match self {
            LowBit::I4 => Wide::Int(i128::from(((code << 4) as i8) >> 4)),
            LowBit::U4 => Wide::Int(i128::from(code & 0xF)),
            LowBit::I2 => Wide::Int(i128::from(((code << 6) as i8) >> 6)),
            LowBit::U2 => Wide::Int(i128::from(code & 0x3)),
            LowBit::F8E8M0 => {
                Wide::Float(if code == 0xFF { f64::NAN } else { pow2(i32::from(code) - 127) })
            }
            _ => Wide::Float(self.decode_minifloat(code)),
        }
    }

    fn decode_minifloat(self, code: u8) -> f64 {
        let Some(f) = self.minifloat() else { return f64::NAN };
        let sign_bit: u8 = if self == LowBit::F4E2M1 { 0x8 } else { 0x80 };
        let code = code & (sign_bit | (sign_bit - 1));
        let mag = code & !sign_bit;
        let negative = code & sign_bit != 0;
        if f.fnuz && code == 0x80 {
            return f64::NAN;
        }
        if self == LowBit::F8E4M3FN && mag == 0x7F {
            return if negative { -f64::NAN } else { f64::NAN };
        }
        if f.inf && mag >= 0x7C {
            let v = if mag == 0x7C { f64::INFINITY } else { f64::NAN };
            return if negative { -v } else { v };
        }
        let e = i32::from(mag >> f.mant);
        let m = f64::from(mag & ((1u8 << f.mant) - 1));
        let v = if e == 0 {
            m * pow2(1 - f.bias - f.mant as i32)
        } else {
            (pow2(f.mant as i32) + m) * pow2(e - f.bias - f.mant as i32)
        };
        if negative { -v } else { v }
    }

    /// The code of `w` in this format (ONNX `Cast` rules): floats round to
    /// nearest even; `saturate` clamps out-of-range values and infinities
    /// of the float8 types to the largest finite value (otherwise they become
    /// NaN, or infinity for `float8e5m2`); `float4e2m1` always saturates and
    /// has no NaN (a NaN becomes a zero of the opposite sign, like the
    /// reference `ml_dtypes`); `round` applies to
    /// `float8e8m0`, which reads the value as an `f32` like the reference;
    /// integers wrap (floats are truncated toward zero first).
    pub fn encode(self, w: Wide, saturate: bool, round: Round) -> u8 {
        let mask = ((1u16 << self.bits()) - 1) as u8;
        match self {
            LowBit::I4 | LowBit::U4 | LowBit::I2 | LowBit::U2 => {
                let v = match w {
                    Wide::Int(v) => v,
                    Wide::Float(v) => v as i128,
                };
                (v as u8) & mask
            }
            LowBit::F8E8M0 => {
                let x = match w {
                    Wide::Int(v) => v as f32,
                    Wide::Float(v) => v as f32,
                };
                encode_e8m0(x, saturate, round)
            }
            _ => {
                let x = match w {
                    Wide::Int(v) => v as f64,
                    Wide::Float(v) => v,
                };
                self.encode_minifloat(x, saturate || self == LowBit::F4E2M1) & mask
            }
        }
    }

    fn encode_minifloat(self, x: f64, saturate: bool) -> u8 {
        let Some(f) = self.minifloat() else { return 0 };
        let sign_bit: u8 = if self == LowBit::F4E2M1 { 0x8 } else { 0x80 };
        let sign = if x.is_sign_negative() { sign_bit } else { 0 };
        let nan = if f.fnuz {
            0x80
        } else if self == LowBit::F8E4M3FN {
            0x7F | sign
        } else if self == LowBit::F4E2M1 {
            sign ^ 0x8
        } else {
            0x7E | sign
        };
        let overflow = if saturate {
            f.max | sign
        } else if f.inf {
            0x7C | sign
        } else {
            nan
        };
        if x.is_nan() {
            return nan;
        }
        if x.is_infinite() {
            return overflow;
        }
        let a = x.abs();
        let emin = 1 - f.bias;
        // Below half the smallest subnormal (and for f64 subnormals): zero.
        if a < pow2(emin - f.mant as i32 - 1) {
            return if f.fnuz { 0 } else { sign };
        }
        let e = ((a.to_bits() >> 52) as i32 - 1023).max(emin);
        if e > 64 {
            return overflow;
        }
        let scaled = a / pow2(e - f.mant as i32);
        let whole = scaled as u64;
        let frac = scaled - whole as f64;
        let k = if frac > 0.5 || (frac == 0.5 && whole % 2 == 1) { whole + 1 } else { whole };
        let unit = 1u64 << f.mant;
        let code = if k < unit {
            k
        } else {
            let (k, e) = if k >= 2 * unit { (k / 2, e + 1) } else { (k, e) };
            (((e + f.bias) as u64) << f.mant) | (k - unit)
        };
        if code > u64::from(f.max) {
            return overflow;
        }
        if code == 0 && f.fnuz {
            return 0;
        }
        code as u8 | sign
    }
}

/// `float8e8m0` from the bits of an `f32`, as the ONNX reference does it.
fn encode_e8m0(x: f32, saturate: bool, round: Round) -> u8 {
    let bits = x.to_bits();
    let exp = (bits >> 23) & 0xFF;
    if exp == 0xFF {
        return 0xFF;
    }
    let up = match round {
        Round::Up => bits & 0x7F_FFFF != 0,
        Round::Down => false,
        Round::Nearest => {
            let (g, r, s) = (bits & 0x40_0000 != 0, bits & 0x20_0000 != 0, bits & 0x1F_FFFF != 0);
            g && (r || s || exp > 0)
        }
    };
    let up = up && !(saturate && exp == 0xFE);
    (exp + u32::from(up)) as u8
}

/// Casts `y.len()` packed elements of format `from` to `D`.
pub fn cast_from_low<D: CastElement>(from: LowBit, x: &[u8], y: &mut [D]) -> Result {
    ensure(x.len() == from.packed_len(y.len()), Error::ShapeMismatch)?;
    for (i, o) in y.iter_mut().enumerate() {
        *o = D::from_wide(from.decode(unpack(from, x, i)));
    }
    Ok(())
}

/// Casts `y.len()` packed elements of format `from` to booleans stored as flags.
pub fn cast_from_low_to_flag<F: Flag>(from: LowBit, x: &[u8], y: &mut [F]) -> Result {
    ensure(x.len() == from.packed_len(y.len()), Error::ShapeMismatch)?;
    for (i, o) in y.iter_mut().enumerate() {
        *o = F::from_bool(bool::from_wide(from.decode(unpack(from, x, i))));
    }
    Ok(())
}

/// Casts `x` to the packed format `to` (see [`LowBit::encode`]).
pub fn cast_to_low<S: CastElement>(
    x: &[S],
    to: LowBit,
    saturate: bool,
    round: Round,
    y: &mut [u8],
) -> Result {
    ensure(y.len() == to.packed_len(x.len()), Error::ShapeMismatch)?;
    y.fill(0);
    for (i, &v) in x.iter().enumerate() {
        pack(to, y, i, to.encode(v.to_wide(), saturate, round));
    }
    Ok(())
}

/// Casts `n` packed elements between two low-precision formats.
pub fn cast_low(
    from: LowBit,
    x: &[u8],
    to: LowBit,
    saturate: bool,
    round: Round,
    y: &mut [u8],
    n: usize,
) -> Result {
    ensure(x.len() == from.packed_len(n), Error::ShapeMismatch)?;
    ensure(y.len() == to.packed_len(n), Error::ShapeMismatch)?;
    y.fill(0);
    for i in 0..n {
        pack(to, y, i, to.encode(from.decode(unpack(from, x, i)), saturate, round));
    }
    Ok(())
}

/// The code of element `i` of packed bytes of format `f` (0 past the end).
pub fn unpack(f: LowBit, x: &[u8], i: usize) -> u8 {
    let per = 8 / f.bits();
    let shift = (i % per) * f.bits();
    x.get(i / per).map_or(0, |&b| (b >> shift) & (((1u16 << f.bits()) - 1) as u8))
}

/// Stores code `c` as element `i` of packed bytes of format `f` whose
/// element `i` is still zero (nothing past the end).
pub fn pack(f: LowBit, y: &mut [u8], i: usize, c: u8) {
    let per = 8 / f.bits();
    if let Some(b) = y.get_mut(i / per) {
        *b |= c << ((i % per) * f.bits());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_to_int_truncates() {
        let mut y = [0i32; 6];
        cast(&[3.7f32, -3.7, 0.5, -0.5, 1e10, f32::NAN], &mut y).unwrap();
        assert_eq!(y, [3, -3, 0, 0, i32::MAX, 0]);
        let mut u = [0u8; 3];
        cast(&[255.9f64, -1.0, 256.0], &mut u).unwrap();
        assert_eq!(u, [255, 0, 255]);
    }

    #[test]
    fn int_to_int_wraps() {
        let mut y = [0u8; 3];
        cast(&[300i32, -1, 255], &mut y).unwrap();
        assert_eq!(y, [44, 255, 255]);
        let mut z = [0i8; 2];
        cast(&[128u64, u64::MAX], &mut z).unwrap();
        assert_eq!(z, [-128, -1]);
        let mut w = [0i64; 2];
        cast(&[u32::MAX, 7], &mut w).unwrap();
        assert_eq!(w, [4_294_967_295, 7]);
    }

    #[test]
    fn bools() {
        let mut b = [false; 5];
        cast(&[0.0f32, -0.0, 0.5, f32::NAN, -2.0], &mut b).unwrap();
        assert_eq!(b, [false, false, true, true, true]);
        let mut f = [0.0f64; 2];
        cast(&[true, false], &mut f).unwrap();
        assert_eq!(f, [1.0, 0.0]);
        let mut flags = [7u8; 3];
        cast_to_flag(&[0.25f32, 0.0, -3.0], &mut flags).unwrap();
        assert_eq!(flags, [1, 0, 1]);
        // The numeric cast truncates instead.
        let mut n = [7u8; 1];
        cast(&[0.25f32], &mut n).unwrap();
        assert_eq!(n, [0]);
    }

    #[test]
    fn half_precision() {
        let mut h = [f16::ZERO; 4];
        // 1 + 2^-11 is halfway between 1 and the next f16 (1 + 2^-10): ties to even -> 1.
        cast(&[1.0f32, 65504.0, 70000.0, 1.0 + 1.0 / 2048.0], &mut h).unwrap();
        assert_eq!(h.map(f16::to_f32), [1.0, 65504.0, f32::INFINITY, 1.0]);
        let mut b = [bf16::ZERO; 2];
        // bf16 keeps 8 significant bits: 257 rounds to 256 (ties to even), 259 to 260.
        cast(&[257i32, 259], &mut b).unwrap();
        assert_eq!(b.map(bf16::to_f32), [256.0, 260.0]);
        let mut i = [0i16; 2];
        cast(&[f16::from_f32(-2.75), f16::from_f32(1000.5)], &mut i).unwrap();
        assert_eq!(i, [-2, 1000]);
        assert_eq!(cast(&[1.0f32], &mut [0i16; 2]), Err(Error::ShapeMismatch));
    }

    fn enc(f: LowBit, x: f64, saturate: bool) -> u8 {
        f.encode(Wide::Float(x), saturate, Round::Up)
    }

    fn dec(f: LowBit, c: u8) -> f64 {
        match f.decode(c) {
            Wide::Float(v) => v,
            Wide::Int(v) => v as f64,
        }
    }

    #[test]
    fn float8e4m3fn() {
        let f = LowBit::F8E4M3FN;
        // 1.0: exponent 0 + bias 7 = 0b0111, mantissa 0.
        assert_eq!(enc(f, 1.0, true), 0x38);
        // 1 + 1/16 is halfway between 0x38 and 0x39: ties to even (0x38);
        // 1 + 3/16 is halfway between 0x39 and 0x3A: to 0x3A.
        assert_eq!(enc(f, 1.0625, true), 0x38);
        assert_eq!(enc(f, 1.1875, true), 0x3A);
        assert_eq!(enc(f, 448.0, true), 0x7E);
        // 464 rounds to 448 (even), so it is in range even without saturation.
        assert_eq!(enc(f, 464.0, false), 0x7E);
        assert_eq!(enc(f, 500.0, true), 0x7E);
        assert_eq!(enc(f, 500.0, false), 0x7F);
        assert_eq!(enc(f, f64::NEG_INFINITY, true), 0xFE);
        assert_eq!(enc(f, f64::NEG_INFINITY, false), 0xFF);
        assert_eq!(enc(f, f64::NAN, true), 0x7F);
        assert_eq!(enc(f, -0.0, true), 0x80);
        // Smallest subnormal 2^-9; half of it ties to zero.
        assert_eq!(enc(f, 1.0 / 512.0, true), 0x01);
        assert_eq!(enc(f, 1.0 / 1024.0, true), 0x00);
        assert_eq!(dec(f, 0x01), 1.0 / 512.0);
        assert_eq!(dec(f, 0xFE), -448.0);
        assert!(dec(f, 0x7F).is_nan());
    }

    #[test]
    fn float8_fnuz_and_e5m2() {
        let f = LowBit::F8E4M3FNUZ;
        assert_eq!(enc(f, 1.0, true), 0x40);
        assert_eq!(enc(f, -0.0, true), 0x00);
        assert_eq!(enc(f, 240.0, true), 0x7F);
        assert_eq!(enc(f, f64::INFINITY, true), 0x7F);
        assert_eq!(enc(f, f64::INFINITY, false), 0x80);
        assert_eq!(enc(f, -1000.0, false), 0x80);
        assert!(dec(f, 0x80).is_nan());
        assert_eq!(dec(f, 0xC0), -1.0);
        let f = LowBit::F8E5M2;
        assert_eq!(enc(f, 1.0, true), 0x3C);
        assert_eq!(enc(f, 57344.0, false), 0x7B);
        assert_eq!(enc(f, 1e6, true), 0x7B);
        assert_eq!(enc(f, 1e6, false), 0x7C);
        assert_eq!(enc(f, f64::NEG_INFINITY, false), 0xFC);
        assert_eq!(enc(f, -f64::NAN, false), 0xFE);
        assert_eq!(dec(f, 0x7C), f64::INFINITY);
        assert_eq!(dec(f, 0x01), 1.0 / 65536.0);
        let f = LowBit::F8E5M2FNUZ;
        assert_eq!(enc(f, 1.0, true), 0x40);
        assert_eq!(enc(f, f64::NAN, true), 0x80);
        assert_eq!(dec(f, 0x7F), 57344.0);
    }

    #[test]
    fn float8e8m0_rounding() {
        let f = LowBit::F8E8M0;
        let e = |x: f64, sat: bool, r: Round| f.encode(Wide::Float(x), sat, r);
        assert_eq!(e(1.0, true, Round::Up), 0x7F);
        // 3 = 1.5 * 2^1: up to 4, down to 2, nearest (tie) up to 4.
        assert_eq!(e(3.0, true, Round::Up), 0x81);
        assert_eq!(e(3.0, true, Round::Down), 0x80);
        assert_eq!(e(3.0, true, Round::Nearest), 0x81);
        assert_eq!(e(1.25, true, Round::Nearest), 0x7F);
        // Above 2^127 rounding up saturates at 2^127 or becomes NaN.
        assert_eq!(e(3.0 * 2f64.powi(126), true, Round::Up), 0xFE);
        assert_eq!(e(3.0 * 2f64.powi(126), false, Round::Up), 0xFF);
        assert_eq!(e(f64::NAN, true, Round::Up), 0xFF);
        assert_eq!(dec(f, 0x80), 2.0);
        assert!(dec(f, 0xFF).is_nan());
    }

    #[test]
    fn float4e2m1_saturates() {
        let f = LowBit::F4E2M1;
        assert_eq!(enc(f, 1.0, false), 0x2);
        assert_eq!(enc(f, 6.0, false), 0x7);
        // 5 is halfway between 4 (0x6) and 6 (0x7): even is 4.
        assert_eq!(enc(f, 5.0, false), 0x6);
        // -0.75 is halfway between -0.5 (0x9) and -1 (0xA): even is -1.
        assert_eq!(enc(f, -0.75, false), 0xA);
        assert_eq!(enc(f, 0.25, false), 0x0);
        assert_eq!(enc(f, 100.0, false), 0x7);
        assert_eq!(enc(f, f64::NEG_INFINITY, false), 0xF);
        assert_eq!(enc(f, f64::NAN, false), 0x8);
        assert_eq!(dec(f, 0x9), -0.5);
        assert_eq!(dec(f, 0x7), 6.0);
    }

    #[test]
    fn small_integers_wrap_and_pack() {
        assert_eq!(LowBit::I4.encode(Wide::Int(8), true, Round::Up), 0x8);
        assert_eq!(LowBit::I4.encode(Wide::Float(-1.9), true, Round::Up), 0xF);
        assert_eq!(LowBit::U2.encode(Wide::Int(-3), true, Round::Up), 0x1);
        assert_eq!(dec(LowBit::I4, 0x8), -8.0);
        assert_eq!(dec(LowBit::U4, 0xF), 15.0);
        assert_eq!(dec(LowBit::I2, 0x2), -2.0);
        // Low bits first, unused bits zero.
        let mut u4 = [0xFFu8; 2];
        cast_to_low(&[1i32, 2, 3], LowBit::U4, true, Round::Up, &mut u4).unwrap();
        assert_eq!(u4, [0x21, 0x03]);
        let mut i2 = [0u8; 2];
        cast_to_low(&[-1.0f32, 0.0, 1.0, -2.0, 1.0], LowBit::I2, true, Round::Up, &mut i2).unwrap();
        assert_eq!(i2, [0x93, 0x01]);
        let mut back = [0i8; 5];
        cast_from_low(LowBit::I2, &i2, &mut back).unwrap();
        assert_eq!(back, [-1, 0, 1, -2, 1]);
        let mut flags = [7u8; 5];
        cast_from_low_to_flag(LowBit::U2, &i2, &mut flags).unwrap();
        assert_eq!(flags, [1, 0, 1, 1, 1]);
        // int4 -> float8e4m3fn: -8 is 1.0 * 2^3 with the sign: 0x80 | (10 << 3).
        let mut f8 = [0u8; 3];
        cast_low(LowBit::I4, &[0x8F, 0x01], LowBit::F8E4M3FN, true, Round::Up, &mut f8, 3).unwrap();
        assert_eq!(f8, [0xB8, 0xD0, 0x38]);
        assert_eq!(cast_from_low(LowBit::U4, &[0u8; 2], &mut [0f32; 5]), Err(Error::ShapeMismatch));
        assert_eq!(
            cast_to_low(&[1.0f32; 3], LowBit::I4, true, Round::Up, &mut [0u8; 1]),
            Err(Error::ShapeMismatch)
        );
    }
}
