//! Tokens of the textual syntax.
