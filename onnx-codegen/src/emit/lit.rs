//! Literals in generated code: exact floats (shortest form that reads back
//! to the same bits; named constants for infinities and NaN), integers and
//! the const arrays kernels take for shapes and strides.

use crate::ir::ElemType;
use proc_macro2::{Literal, TokenStream};
use quote::quote;

/// `&[1, 2, 3]`: a `&[usize]` literal.
pub fn usizes(values: &[usize]) -> TokenStream {
    let items = values.iter().map(|&v| Literal::usize_unsuffixed(v));
    quote!(&[#(#items),*])
}

/// `&[3, 0, -1]`: a `&[isize]` literal.
pub fn isizes(values: &[isize]) -> TokenStream {
    let items = values.iter().map(|&v| isize_lit(v));
    quote!(&[#(#items),*])
}

/// `[3, 0]`: an array literal of `isize`.
pub fn isize_array(values: &[isize]) -> TokenStream {
    let items = values.iter().map(|&v| isize_lit(v));
    quote!([#(#items),*])
}

/// An unsuffixed `usize` literal.
pub fn usize_lit(v: usize) -> TokenStream {
    let l = Literal::usize_unsuffixed(v);
    quote!(#l)
}

/// An unsuffixed `isize` literal (a negation of a positive literal when negative).
pub fn isize_lit(v: isize) -> TokenStream {
    let l = Literal::usize_unsuffixed(v.unsigned_abs());
    if v < 0 { quote!(-#l) } else { quote!(#l) }
}

/// A suffixed integer literal of the Rust type of `elem` (`2i64`, `7u8`),
/// the value wrapped to that type as `as` would; `None` for non-integers.
pub fn int(v: i128, elem: ElemType) -> Option<TokenStream> {
    let l = match elem {
        ElemType::Int8 => Literal::i8_suffixed(v as i8),
        ElemType::Int16 => Literal::i16_suffixed(v as i16),
        ElemType::Int32 => Literal::i32_suffixed(v as i32),
        ElemType::Int64 => Literal::i64_suffixed(v as i64),
        ElemType::Uint8 => Literal::u8_suffixed(v as u8),
        ElemType::Uint16 => Literal::u16_suffixed(v as u16),
        ElemType::Uint32 => Literal::u32_suffixed(v as u32),
        ElemType::Uint64 => Literal::u64_suffixed(v as u64),
        _ => return None,
    };
    // Negative signed values print with their sign; emit it as a unary minus.
    let text = l.to_string();
    match text.strip_prefix('-') {
        Some(rest) => {
            let positive: Literal = rest.parse().ok()?;
            Some(quote!(-#positive))
        }
        None => Some(quote!(#l)),
    }
}

/// A float literal of the Rust type of `elem` (`f32` or `f64`) with the value
/// `v` rounded to that type.
pub fn float(v: f64, elem: ElemType) -> TokenStream {
    match elem {
        ElemType::Double => f64_lit(v),
        _ => f32_lit(v as f32),
    }
}

/// A constant of the Rust type of `elem` with the value `v` rounded to that
/// type: a literal for `f32`/`f64`, `#rt::f16::from_bits(..)` for the 16-bit
/// floats (rounded once from `v`, as the reference does for attributes).
pub fn float_in(v: f64, elem: ElemType, rt: &TokenStream) -> TokenStream {
    match elem {
        ElemType::Float16 => {
            let bits = Literal::u16_suffixed(onnx_codegen_runtime::f16::from_f64(v).to_bits());
            quote!(#rt::f16::from_bits(#bits))
        }
        ElemType::Bfloat16 => {
            let bits = Literal::u16_suffixed(onnx_codegen_runtime::bf16::from_f64(v).to_bits());
            quote!(#rt::bf16::from_bits(#bits))
        }
        _ => float(v, elem),
    }
}

/// An exact `f32` literal.
pub fn f32_lit(v: f32) -> TokenStream {
    if v.is_nan() {
        quote!(f32::NAN)
    } else if v.is_infinite() {
        if v > 0.0 { quote!(f32::INFINITY) } else { quote!(f32::NEG_INFINITY) }
    } else {
        let l = float_literal(short_float(v.abs()), "f32");
        if v.is_sign_negative() { quote!(-#l) } else { quote!(#l) }
    }
}

/// An exact `f64` literal.
pub fn f64_lit(v: f64) -> TokenStream {
    if v.is_nan() {
        quote!(f64::NAN)
    } else if v.is_infinite() {
        if v > 0.0 { quote!(f64::INFINITY) } else { quote!(f64::NEG_INFINITY) }
    } else {
        let l = float_literal(short_float(v.abs()), "f64");
        if v.is_sign_negative() { quote!(-#l) } else { quote!(#l) }
    }
}

/// The shortest text that reads back to `v`: plain (`0.1`), or in exponent
/// form (`1e300`) when that is shorter. Both forms are exact.
fn short_float<F: std::fmt::Display + std::fmt::LowerExp>(v: F) -> String {
    let plain = v.to_string();
    let exp = format!("{v:e}");
    if exp.len() < plain.len() { exp } else { plain }
}

/// A float literal token from its digits and a type suffix.
fn float_literal(digits: String, suffix: &str) -> Literal {
    let text = format!("{digits}{suffix}");
    // Digits from `Display`/`LowerExp` of a finite float always form a literal.
    text.parse::<Literal>().unwrap_or_else(|_| Literal::f64_unsuffixed(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_exact_and_valid_rust() {
        assert_eq!(f32_lit(0.1).to_string(), "0.1f32");
        assert_eq!(f32_lit(-2.5).to_string(), "- 2.5f32");
        assert_eq!(f32_lit(-0.0).to_string(), "- 0f32");
        assert_eq!(f32_lit(f32::NEG_INFINITY).to_string(), "f32 :: NEG_INFINITY");
        assert_eq!(f64_lit(1e300).to_string(), "1e300f64");
        assert_eq!(f32_lit(1.5e-30).to_string(), "1.5e-30f32");
        assert_eq!(f32_lit(16777216.0).to_string(), "16777216f32");
        assert_eq!(isizes(&[3, 0, -1]).to_string(), "& [3 , 0 , - 1]");
        assert_eq!(usizes(&[]).to_string(), "& []");
        assert_eq!(int(2, ElemType::Int64).unwrap().to_string(), "2i64");
        assert_eq!(int(-3, ElemType::Int32).unwrap().to_string(), "- 3i32");
        assert_eq!(int(-1, ElemType::Uint8).unwrap().to_string(), "255u8");
        assert!(int(1, ElemType::Float).is_none());
    }
}
