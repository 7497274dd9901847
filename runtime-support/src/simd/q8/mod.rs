//! The int8 kernels behind [`crate::int8`], filed by algorithm then
//! instruction set:
//!
//! - `gemm/`: the products (`qmatmul`, and the im2col convolutions'),
//!   `micro/{portable, avx2, avxvnni, avx512, neon, dsp}.rs` the register tiles;
//! - `conv/`: im2col into blocks of packed columns, the weight panels,
//!   depthwise, and the plain loop for everything else;
//! - `requant.rs`: the per-channel constants of the output stage;
//! - `elementwise.rs`: addition and average pooling.
//!
//! Every path computes the same integers: sums wrap in `i32` (any order
//! gives the same sum), requantization is [`crate::int8::Scale::apply`]
//! exactly (`requant.rs` shows why the vector form agrees).

pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod gemm;
pub(crate) mod requant;
#[cfg(test)]
mod tests;
