//! String tensors (feature `alloc`): the kernels of the string operators and
//! the byte encoding string tensors cross [`crate::Model::run_encoded`] in.
//!
//! A string tensor is a slice of anything that reads as `&str` (the caller's
//! `&str`s, or `String`s the model owns); a string output is a `&mut [String]`
//! written in place, so a caller that reuses its output array reuses each
//! string's capacity. Everything else in the crate stays allocation-free;
//! these kernels allocate because string lengths depend on data.

pub use alloc::string::String;
pub use alloc::vec::Vec;

use crate::elementwise::Broadcast;
use crate::num::Flag;
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, numel, walk};
use crate::{Error, Result, ensure};

/// Reads `N` strings encoded as [`crate::Elem::String`] says (per element, a
/// little-endian `u32` byte length then that many UTF-8 bytes), borrowing
/// from `bytes`. [`Error::Malformed`] for invalid UTF-8 or trailing bytes,
/// [`Error::ShapeMismatch`] when the bytes run out.
pub fn decode<const N: usize>(bytes: &[u8]) -> Result<[&str; N]> {
    let mut out = [""; N];
    let mut rest = bytes;
    for o in &mut out {
        let (len, tail) = rest.split_first_chunk::<4>().ok_or(Error::ShapeMismatch)?;
        let len = usize::try_from(u32::from_le_bytes(*len)).map_err(|_| Error::Overflow)?;
        ensure(tail.len() >= len, Error::ShapeMismatch)?;
        let (text, tail) = tail.split_at(len);
        *o = core::str::from_utf8(text).map_err(|_| Error::Malformed)?;
        rest = tail;
    }
    ensure(rest.is_empty(), Error::ShapeMismatch)?;
    Ok(out)
}

/// Encodes strings the way [`decode`] reads them.
pub fn encode<S: AsRef<str>>(values: &[S]) -> Result<Vec<u8>> {
    let total: usize = values.iter().map(|s| s.as_ref().len().saturating_add(4)).sum();
    let mut out = Vec::with_capacity(total);
    for s in values {
        let s = s.as_ref();
        let len = u32::try_from(s.len()).map_err(|_| Error::Overflow)?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    Ok(out)
}

/// The little-endian bytes of plain values (non-string outputs of
/// [`crate::Model::run_encoded`]).
pub fn pod_bytes<T: bytemuck::NoUninit>(values: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(values).to_vec()
}

/// Booleans as bytes (0 or 1).
pub fn bool_bytes(values: &[bool]) -> Vec<u8> {
    values.iter().map(|&b| u8::from(b)).collect()
}

/// Copies [`crate::Model::run_encoded`]'s outputs into `run_bytes`'
/// buffers, each of which must have exactly the encoded length
/// ([`Error::ShapeMismatch`] otherwise: a string output's length is known
/// only after the run, so such models are best driven by `run_encoded`).
pub fn write_outputs(encoded: &[Vec<u8>], outputs: &mut [&mut [u8]]) -> Result {
    ensure(encoded.len() == outputs.len(), Error::ShapeMismatch)?;
    for (o, e) in outputs.iter_mut().zip(encoded) {
        ensure(o.len() == e.len(), Error::ShapeMismatch)?;
        o.copy_from_slice(e);
    }
    Ok(())
}

/// Copies strings into a string output, reusing its capacity.
pub fn copy<S: AsRef<str>>(src: &[S], dst: &mut [String]) -> Result {
    ensure(src.len() == dst.len(), Error::ShapeMismatch)?;
    for (d, s) in dst.iter_mut().zip(src) {
        d.clear();
        d.push_str(s.as_ref());
    }
    Ok(())
}

/// Calls `f(i, j, o)` for every output index `o` of the broadcast of two
/// inputs with their element indices `i` and `j`, after checking the plan
/// against the lengths.
fn broadcast2(
    p: &Broadcast<'_, 2>,
    a_len: usize,
    b_len: usize,
    out_len: usize,
    mut f: impl FnMut(usize, usize, usize),
) -> Result {
    let n = numel(p.shape)?;
    ensure(out_len == n, Error::ShapeMismatch)?;
    check_strided(p.shape, p.strides[0], 0, a_len)?;
    check_strided(p.shape, p.strides[1], 0, b_len)?;
    let mut os = [0isize; MAX_RANK];
    let os = &mut os[..p.shape.len()];
    contiguous_strides(p.shape, os)?;
    walk(p.shape, [p.strides[0], p.strides[1], os], [0, 0, 0], |[i, j, o]| f(i, j, o));
    Ok(())
}

/// StringConcat: `out = a + b` element-wise under the broadcast plan `p`.
pub fn concat<A: AsRef<str>, B: AsRef<str>>(
    p: &Broadcast<'_, 2>,
    a: &[A],
    b: &[B],
    out: &mut [String],
) -> Result {
    let out_len = out.len();
    broadcast2(p, a.len(), b.len(), out_len, |i, j, o| {
        if let (Some(x), Some(y), Some(d)) = (a.get(i), b.get(j), out.get_mut(o)) {
            d.clear();
            d.push_str(x.as_ref());
            d.push_str(y.as_ref());
        }
    })
}

/// Equal on strings: byte-wise equality under the broadcast plan `p`.
pub fn equal<A: AsRef<str>, B: AsRef<str>, F: Flag>(
    p: &Broadcast<'_, 2>,
    a: &[A],
    b: &[B],
    out: &mut [F],
) -> Result {
    let out_len = out.len();
    broadcast2(p, a.len(), b.len(), out_len, |i, j, o| {
        if let (Some(x), Some(y), Some(d)) = (a.get(i), b.get(j), out.get_mut(o)) {
            *d = F::from_bool(x.as_ref() == y.as_ref());
        }
    })
}

/// StringSplit's parameters.
#[derive(Clone, Copy, Debug)]
pub struct SplitParams<'a> {
    /// The separator; `None` splits on runs of whitespace and drops empty
    /// pieces (the attribute absent or empty).
    pub delimiter: Option<&'a str>,
    /// At most this many splits per string (`None`: no limit).
    pub maxsplit: Option<usize>,
    /// The planned width of the pieces output: the largest piece count over
    /// the input must be exactly this (a shape fixed at generation time).
    pub width: usize,
}

/// Python's `str.isspace`: Unicode white space plus the ASCII separators
/// U+001C..U+001F.
fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Splits `s` as Python's `str.split(delimiter, maxsplit)` does, calling
/// `piece` for each piece.
fn split_one<'s>(s: &'s str, p: &SplitParams<'_>, mut piece: impl FnMut(&'s str)) {
    let limit = p.maxsplit.unwrap_or(usize::MAX);
    match p.delimiter {
        Some(d) => {
            let mut rest = s;
            let mut splits = 0;
            while splits < limit {
                let Some(at) = rest.find(d) else { break };
                piece(&rest[..at]);
                rest = &rest[at + d.len()..];
                splits += 1;
            }
            piece(rest);
        }
        None => {
            let mut rest = s.trim_start_matches(is_space);
            let mut splits = 0;
            while !rest.is_empty() {
                if splits == limit {
                    piece(rest);
                    return;
                }
                let end = rest.find(is_space).unwrap_or(rest.len());
                piece(&rest[..end]);
                rest = rest[end..].trim_start_matches(is_space);
                splits += 1;
            }
        }
    }
}

/// StringSplit: the pieces of each string (row-major, `p.width` per input
/// string, padded with empty strings) and their count. Fails with
/// [`Error::ShapeMismatch`] when the largest count is not `p.width`: the
/// output's shape depends on the data, and was planned from the model's
/// declaration.
pub fn split<S: AsRef<str>>(
    p: &SplitParams<'_>,
    x: &[S],
    pieces: &mut [String],
    counts: &mut [i64],
) -> Result {
    ensure(counts.len() == x.len(), Error::ShapeMismatch)?;
    ensure(x.len().checked_mul(p.width) == Some(pieces.len()), Error::ShapeMismatch)?;
    let mut widest = 0;
    for (i, s) in x.iter().enumerate() {
        let row = pieces.get_mut(i * p.width..(i + 1) * p.width).ok_or(Error::ShapeMismatch)?;
        let mut k = 0usize;
        split_one(s.as_ref(), p, |part| {
            if let Some(d) = row.get_mut(k) {
                d.clear();
                d.push_str(part);
            }
            k += 1;
        });
        ensure(k <= p.width, Error::ShapeMismatch)?;
        for d in row.iter_mut().skip(k) {
            d.clear();
        }
        widest = widest.max(k);
        if let Some(c) = counts.get_mut(i) {
            *c = i64::try_from(k).map_err(|_| Error::Overflow)?;
        }
    }
    ensure(x.is_empty() || widest == p.width, Error::ShapeMismatch)
}

/// StringNormalizer's case change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaseChange {
    None,
    Lower,
    Upper,
}

/// StringNormalizer's parameters.
#[derive(Clone, Copy, Debug)]
pub struct NormalizerParams<'a> {
    pub case: CaseChange,
    /// Whether stopwords match only with the same case.
    pub case_sensitive: bool,
    pub stopwords: &'a [&'a str],
}

/// StringNormalizer: drops the elements equal to a stopword (ignoring case
/// unless `case_sensitive`), then changes the case of the others (Unicode
/// case mapping). The output holds the kept elements in order, or one empty
/// string when none is kept; its length depends on the data and must be
/// `out.len()` ([`Error::ShapeMismatch`] otherwise).
pub fn normalize<S: AsRef<str>>(p: &NormalizerParams<'_>, x: &[S], out: &mut [String]) -> Result {
    let lowered: Vec<String> = if p.case_sensitive {
        Vec::new()
    } else {
        p.stopwords.iter().map(|w| w.to_lowercase()).collect()
    };
    let is_stop = |s: &str| {
        if p.case_sensitive {
            p.stopwords.contains(&s)
        } else {
            let s = s.to_lowercase();
            lowered.contains(&s)
        }
    };
    let kept = x.iter().filter(|s| !is_stop(s.as_ref())).count();
    ensure(out.len() == kept.max(1), Error::ShapeMismatch)?;
    if kept == 0 {
        if let Some(o) = out.first_mut() {
            o.clear();
        }
        return Ok(());
    }
    for (o, s) in out.iter_mut().zip(x.iter().map(AsRef::as_ref).filter(|s| !is_stop(s))) {
        o.clear();
        match p.case {
            CaseChange::None => o.push_str(s),
            CaseChange::Lower => o.extend(s.chars().flat_map(char::to_lowercase)),
            CaseChange::Upper => o.push_str(&s.to_uppercase()),
        }
    }
    Ok(())
}

/// Whether `pattern` is a regular expression [`regex_full_match`] accepts
/// (RE2-like syntax: the `regex` family's).
pub fn regex_is_valid(pattern: &str) -> bool {
    full_match_regex(pattern).is_ok()
}

fn full_match_regex(pattern: &str) -> Result<regex_automata::meta::Regex> {
    let anchored = alloc::format!(r"\A(?:{pattern})\z");
    regex_automata::meta::Regex::new(&anchored).map_err(|_| Error::Malformed)
}

/// RegexFullMatch: whether each string matches `pattern` as a whole. The
/// pattern is compiled on every call (the generated model holds no state
/// beyond its arena); [`Error::Malformed`] if it is no valid pattern.
pub fn regex_full_match<S: AsRef<str>, F: Flag>(pattern: &str, x: &[S], out: &mut [F]) -> Result {
    ensure(x.len() == out.len(), Error::ShapeMismatch)?;
    if x.is_empty() {
        return Ok(());
    }
    let re = full_match_regex(pattern)?;
    for (o, s) in out.iter_mut().zip(x) {
        *o = F::from_bool(re.is_match(s.as_ref()));
    }
    Ok(())
}

/// LabelEncoder with string keys: each string's value from `values` (paired
/// with `keys`, which must be sorted and distinct), or `default`.
pub fn label_encode<S: AsRef<str>, T: Copy>(
    keys: &[&str],
    values: &[T],
    default: T,
    x: &[S],
    out: &mut [T],
) -> Result {
    ensure(keys.len() == values.len() && x.len() == out.len(), Error::ShapeMismatch)?;
    for (o, s) in out.iter_mut().zip(x) {
        *o = match keys.binary_search(&s.as_ref()) {
            Ok(k) => values.get(k).copied().unwrap_or(default),
            Err(_) => default,
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn strings(n: usize) -> Vec<String> {
        vec![String::from("stale"); n]
    }

    #[test]
    fn encoding_round_trips_and_rejects_bad_bytes() {
        let bytes = encode(&["ab", "", "的"]).unwrap();
        assert_eq!(&bytes[..6], &[2, 0, 0, 0, b'a', b'b']);
        assert_eq!(decode::<3>(&bytes).unwrap(), ["ab", "", "的"]);
        assert_eq!(decode::<2>(&bytes).err(), Some(Error::ShapeMismatch));
        assert_eq!(decode::<4>(&bytes).err(), Some(Error::ShapeMismatch));
        assert_eq!(decode::<1>(&[1, 0, 0, 0, 0xff]).err(), Some(Error::Malformed));
    }

    #[test]
    fn concat_broadcasts() {
        let p = Broadcast { shape: &[3], strides: [&[1], &[0]] };
        let mut out = strings(3);
        concat(&p, &["cat", "dog", "的"], &["s"], &mut out).unwrap();
        assert_eq!(out, ["cats", "dogs", "的s"]);
        let scalar = Broadcast { shape: &[], strides: [&[], &[]] };
        let mut one = strings(1);
        concat(&scalar, &["a"], &[String::from("b")], &mut one).unwrap();
        assert_eq!(one, ["ab"]);
    }

    #[test]
    fn equal_compares_whole_strings() {
        let p = Broadcast { shape: &[2], strides: [&[1], &[0]] };
        let mut out = [false; 2];
        equal(&p, &["x", "xy"], &["x"], &mut out).unwrap();
        assert_eq!(out, [true, false]);
    }

    #[test]
    fn split_follows_python_str_split() {
        let mut pieces = strings(6);
        let mut counts = [0i64; 2];
        let p = SplitParams { delimiter: Some("-"), maxsplit: None, width: 3 };
        split(&p, &["a--b", "c"], &mut pieces, &mut counts).unwrap();
        assert_eq!(pieces, ["a", "", "b", "c", "", ""]);
        assert_eq!(counts, [3, 1]);

        let p = SplitParams { delimiter: None, maxsplit: Some(1), width: 2 };
        let mut pieces = strings(4);
        split(&p, &["  a  b c ", ""], &mut pieces, &mut counts).unwrap();
        assert_eq!(pieces, ["a", "b c ", "", ""]);
        assert_eq!(counts, [2, 0]);

        // More pieces than planned, or fewer than planned everywhere.
        let p = SplitParams { delimiter: Some("."), maxsplit: None, width: 1 };
        let mut pieces = strings(1);
        let mut one = [0i64];
        assert_eq!(split(&p, &["a.b"], &mut pieces, &mut one), Err(Error::ShapeMismatch));
        let p = SplitParams { delimiter: Some("."), maxsplit: None, width: 2 };
        let mut pieces = strings(2);
        assert_eq!(split(&p, &["ab"], &mut pieces, &mut one), Err(Error::ShapeMismatch));
    }

    #[test]
    fn normalizer_drops_stopwords_then_changes_case() {
        let p = NormalizerParams {
            case: CaseChange::Upper,
            case_sensitive: false,
            stopwords: &["monday"],
        };
        let mut out = strings(2);
        normalize(&p, &["Monday", "tuesday", "straße"], &mut out).unwrap();
        assert_eq!(out, ["TUESDAY", "STRASSE"]);
        let mut one = strings(1);
        normalize(&p, &["MONDAY"], &mut one).unwrap();
        assert_eq!(one, [""]);
        let sensitive = NormalizerParams { case_sensitive: true, case: CaseChange::Lower, ..p };
        let mut out = strings(2);
        normalize(&sensitive, &["Monday", "monday", "ÀB"], &mut out).unwrap();
        assert_eq!(out, ["monday", "àb"]);
        assert_eq!(normalize(&sensitive, &["a"], &mut strings(2)), Err(Error::ShapeMismatch));
    }

    #[test]
    fn regex_matches_whole_strings() {
        let mut out = [false; 3];
        regex_full_match("a|ab", &["a", "ab", "abc"], &mut out).unwrap();
        assert_eq!(out, [true, true, false]);
        assert_eq!(regex_full_match("(", &["a"], &mut [false]), Err(Error::Malformed));
        assert!(!regex_is_valid("["));
    }

    #[test]
    fn label_encoder_looks_up_sorted_keys() {
        let mut out = [0i64; 4];
        label_encode(&["a", "b", "c"], &[0, 1, 2], 42, &["b", "z", "a", ""], &mut out).unwrap();
        assert_eq!(out, [1, 42, 0, 42]);
    }
}
