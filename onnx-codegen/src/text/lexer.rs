//! Tokens of the textual syntax.
//!
//! The lexer turns the source into tokens carrying byte spans, one at a time,
//! so the parser needs no token buffer and large files stay cheap. Whitespace
//! and `#` comments (to the end of the line) separate tokens and are dropped.
//!
//! Token classes follow the reference parser (`onnx.parser`):
//! - identifiers: `[A-Za-z_][A-Za-z0-9_]*`;
//! - numbers: an optional `-`, digits, at most one `.` followed by more digits,
//!   and an optional exponent `e[+-]digits`; a number with a `.` or an exponent
//!   is a float, else an integer. `-inf`, `-infinity` and `-nan` (any case) are
//!   float tokens; unsigned `inf`/`nan` are identifiers the parser reads as
//!   floats where a value is expected, because they may also name things;
//! - strings: `"..."` where a backslash makes the next character literal:
//!   `\"` and `\\` are what the reference printer writes, and any other
//!   `\c` stands for `c` (so `\n` is `n`, not a newline), as in the
//!   reference parser, so that both read a text into the same model;
//! - punctuation: `< > ( ) [ ] { } , : = @ ? .` and the arrow `=>`.

use crate::diag::{Diagnostic, Location, SourcePos};

/// What kind of token a [`Token`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// An identifier such as `Relu`, `float` or `N`.
    Ident,
    /// An integer literal, possibly negative.
    Int,
    /// A float literal: with a `.` or an exponent, or a signed `inf`/`nan`.
    Float,
    /// A string literal, quotes and escapes included in the span.
    Str,
    /// `=>`.
    Arrow,
    /// One punctuation character.
    Punct(u8),
    /// The end of the source.
    Eof,
}

/// One token: its kind and the byte range it covers in the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub kind: TokenKind,
    pub start: usize,
    pub end: usize,
}

impl Token {
    /// Whether this is the punctuation character `c`.
    pub fn is(&self, c: u8) -> bool {
        self.kind == TokenKind::Punct(c)
    }
}

/// A lexer over one source text.
pub(crate) struct Lexer<'a> {
    src: &'a str,
    file: &'a str,
    pos: usize,
}

const PUNCTUATION: &[u8] = b"<>()[]{},:=@?.";

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

fn is_ident_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `word` is one of the words the reference reads as a float
/// (`inf`, `infinity`, `nan`, in any case).
pub(crate) fn is_float_word(word: &str) -> bool {
    ["inf", "infinity", "nan"].iter().any(|w| word.eq_ignore_ascii_case(w))
}

impl<'a> Lexer<'a> {
    /// A lexer at the start of `src`; `file` names it in diagnostics.
    pub fn new(src: &'a str, file: &'a str) -> Lexer<'a> {
        Lexer { src, file, pos: 0 }
    }

    /// The text a token covers.
    pub fn text(&self, token: Token) -> &'a str {
        self.src.get(token.start..token.end).unwrap_or("")
    }

    /// An error diagnostic pointing at `len` characters from byte `offset`.
    pub fn error_at(
        &self,
        offset: usize,
        len: usize,
        message: impl Into<String>,
    ) -> Box<Diagnostic> {
        let len = u32::try_from(len.max(1)).unwrap_or(u32::MAX);
        Box::new(
            Diagnostic::error(message)
                .at(Location::source(self.file, SourcePos::at(self.src, offset, len))),
        )
    }

    fn byte(&self, at: usize) -> Option<u8> {
        self.src.as_bytes().get(at).copied()
    }

    fn skip_space_and_comments(&mut self) {
        let bytes = self.src.as_bytes();
        while let Some(&b) = bytes.get(self.pos) {
            match b {
                b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c => self.pos += 1,
                b'#' => {
                    self.pos = match self.src[self.pos..].find('\n') {
                        Some(i) => self.pos + i,
                        None => self.src.len(),
                    };
                }
                _ => break,
            }
        }
    }

    fn skip_while(&mut self, pred: impl Fn(u8) -> bool) {
        while self.byte(self.pos).is_some_and(&pred) {
            self.pos += 1;
        }
    }

    /// Reads the next token.
    pub fn next_token(&mut self) -> Result<Token, Box<Diagnostic>> {
        self.skip_space_and_comments();
        let start = self.pos;
        let Some(b) = self.byte(start) else {
            return Ok(Token { kind: TokenKind::Eof, start, end: start });
        };
        let kind = match b {
            b'"' => self.string(start)?,
            b'-' => self.negative(start)?,
            b'0'..=b'9' => self.number(start, start)?,
            _ if is_ident_start(b) => {
                self.skip_while(is_ident_char);
                TokenKind::Ident
            }
            b'=' if self.byte(start + 1) == Some(b'>') => {
                self.pos += 2;
                TokenKind::Arrow
            }
            _ if PUNCTUATION.contains(&b) => {
                self.pos += 1;
                TokenKind::Punct(b)
            }
            _ => {
                let c = self.src[start..].chars().next().unwrap_or('?');
                return Err(self.error_at(start, 1, format!("unexpected character {c:?}")));
            }
        };
        Ok(Token { kind, start, end: self.pos })
    }

    /// A string literal; checks escapes and termination.
    fn string(&mut self, start: usize) -> Result<TokenKind, Box<Diagnostic>> {
        let bytes = self.src.as_bytes();
        let mut i = start + 1;
        loop {
            match bytes.get(i) {
                None => {
                    return Err(self.error_at(
                        start,
                        1,
                        "unterminated string: expected a closing '\"' before the end of input",
                    ));
                }
                Some(b'"') => break,
                Some(b'\\') => match bytes.get(i + 1) {
                    Some(b'"' | b'\\') => i += 2,
                    None => {
                        return Err(self.error_at(
                            start,
                            1,
                            "unterminated string: expected a closing '\"' before the end of input",
                        ));
                    }
                    // Any other escaped character stands for itself, as
                    // in the reference parser (`\\n` is `n`). Skip it whole,
                    // however many bytes its UTF-8 takes.
                    Some(_) => {
                        let c = self.src[i + 1..].chars().next().map_or(1, char::len_utf8);
                        i += 1 + c;
                    }
                },
                Some(_) => i += 1,
            }
        }
        self.pos = i + 1;
        Ok(TokenKind::Str)
    }

    /// A `-` must start a number, `-inf`, `-infinity` or `-nan`.
    fn negative(&mut self, start: usize) -> Result<TokenKind, Box<Diagnostic>> {
        match self.byte(start + 1) {
            Some(b'0'..=b'9') => self.number(start, start + 1),
            Some(b) if b.is_ascii_alphabetic() => {
                self.pos = start + 1;
                self.skip_while(is_ident_char);
                if is_float_word(&self.src[start + 1..self.pos]) {
                    Ok(TokenKind::Float)
                } else {
                    Err(self.error_at(
                        start,
                        self.pos - start,
                        format!(
                            "expected a number after '-', found '{}'",
                            &self.src[start + 1..self.pos]
                        ),
                    ))
                }
            }
            _ => Err(self.error_at(start, 1, "expected a number right after '-'")),
        }
    }

    /// A number starting at `start` (its sign, if any) with digits from
    /// `digits`, an optional fraction and an optional exponent.
    fn number(&mut self, start: usize, digits: usize) -> Result<TokenKind, Box<Diagnostic>> {
        self.pos = digits;
        self.skip_while(|b| b.is_ascii_digit());
        let mut kind = TokenKind::Int;
        if self.byte(self.pos) == Some(b'.') {
            self.pos += 1;
            self.skip_while(|b| b.is_ascii_digit());
            kind = TokenKind::Float;
        }
        if matches!(self.byte(self.pos), Some(b'e' | b'E')) {
            let e = self.pos;
            self.pos += 1;
            if matches!(self.byte(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            let exponent_digits = self.pos;
            self.skip_while(|b| b.is_ascii_digit());
            if self.pos == exponent_digits {
                return Err(self.error_at(
                    start,
                    self.pos - start,
                    format!(
                        "malformed number '{}': expected digits after the exponent '{}'",
                        &self.src[start..self.pos],
                        &self.src[e..e + 1]
                    ),
                ));
            }
            kind = TokenKind::Float;
        }
        Ok(kind)
    }
}

/// The value of a string token: the text between the quotes, escapes resolved.
/// The lexer has checked the escapes.
pub(crate) fn string_value(text: &str) -> String {
    let inner = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')).unwrap_or(text);
    if !inner.contains('\\') {
        return inner.to_owned();
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(escaped) = chars.next() {
                out.push(escaped);
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(src: &str) -> Vec<(TokenKind, &str)> {
        let mut lexer = Lexer::new(src, "t");
        let mut out = Vec::new();
        loop {
            let token = lexer.next_token().unwrap();
            if token.kind == TokenKind::Eof {
                return out;
            }
            out.push((token.kind, lexer.text(token)));
        }
    }

    fn first_error(src: &str) -> Diagnostic {
        let mut lexer = Lexer::new(src, "t");
        loop {
            match lexer.next_token() {
                Ok(t) if t.kind == TokenKind::Eof => panic!("no error in {src:?}"),
                Ok(_) => {}
                Err(d) => return *d,
            }
        }
    }

    #[test]
    fn identifiers_punctuation_and_arrow() {
        use TokenKind::*;
        assert_eq!(
            kinds("g (x_1) => (y) {a=com.ms.Foo<k=@r>(x, ?)}"),
            vec![
                (Ident, "g"),
                (Punct(b'('), "("),
                (Ident, "x_1"),
                (Punct(b')'), ")"),
                (Arrow, "=>"),
                (Punct(b'('), "("),
                (Ident, "y"),
                (Punct(b')'), ")"),
                (Punct(b'{'), "{"),
                (Ident, "a"),
                (Punct(b'='), "="),
                (Ident, "com"),
                (Punct(b'.'), "."),
                (Ident, "ms"),
                (Punct(b'.'), "."),
                (Ident, "Foo"),
                (Punct(b'<'), "<"),
                (Ident, "k"),
                (Punct(b'='), "="),
                (Punct(b'@'), "@"),
                (Ident, "r"),
                (Punct(b'>'), ">"),
                (Punct(b'('), "("),
                (Ident, "x"),
                (Punct(b','), ","),
                (Punct(b'?'), "?"),
                (Punct(b')'), ")"),
                (Punct(b'}'), "}"),
            ]
        );
    }

    #[test]
    fn numbers() {
        use TokenKind::*;
        assert_eq!(
            kinds("1 -2 3.5 -0.0 1e5 2E-3 5. 1.e+2 -inf -NaN inf nan"),
            vec![
                (Int, "1"),
                (Int, "-2"),
                (Float, "3.5"),
                (Float, "-0.0"),
                (Float, "1e5"),
                (Float, "2E-3"),
                (Float, "5."),
                (Float, "1.e+2"),
                (Float, "-inf"),
                (Float, "-NaN"),
                (Ident, "inf"),
                (Ident, "nan"),
            ]
        );
        // A second dot ends the number, as in the reference.
        assert_eq!(kinds("1.2.3"), vec![(Float, "1.2"), (Punct(b'.'), "."), (Int, "3")]);
        assert_eq!(kinds("3x"), vec![(Int, "3"), (Ident, "x")]);
    }

    #[test]
    fn comments_and_whitespace_are_skipped() {
        use TokenKind::*;
        assert_eq!(kinds("a # b c\n\t\r\x0b\x0cd#e"), vec![(Ident, "a"), (Ident, "d")]);
        assert_eq!(kinds("= >"), vec![(Punct(b'='), "="), (Punct(b'>'), ">")]);
    }

    #[test]
    fn strings_and_escapes() {
        assert_eq!(kinds(r#""a\"b\\c" "é""#).len(), 2);
        assert_eq!(string_value(r#""a\"b\\c""#), "a\"b\\c");
        assert_eq!(string_value(r#""""#), "");
        assert_eq!(string_value("\"line\nbreak é\""), "line\nbreak é");
        // Other escapes stand for the character itself, as in the reference.
        assert_eq!(string_value(r#""a\nb\tc\é""#), "anbtcé");
    }

    #[test]
    fn lexical_errors() {
        let d = first_error("x \"abc");
        assert!(d.message.starts_with("unterminated string"), "{}", d.message);
        assert_eq!(d.location.pos.as_ref().map(|p| p.column), Some(3));
        let d = first_error("\"a\\");
        assert!(d.message.starts_with("unterminated string"), "{}", d.message);
        let d = first_error("a\n  $b");
        assert_eq!(d.message, "unexpected character '$'");
        assert_eq!(d.location.pos.as_ref().map(|p| (p.line, p.column)), Some((2, 3)));
        let d = first_error("a ;");
        assert_eq!(d.message, "unexpected character ';'");
        let d = first_error("{ é }");
        assert_eq!(d.message, "unexpected character 'é'");
        assert!(first_error("1e+").message.starts_with("malformed number '1e+'"));
        assert_eq!(first_error("- 1").message, "expected a number right after '-'");
        assert_eq!(first_error("-foo").message, "expected a number after '-', found 'foo'");
    }
}
