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
}
