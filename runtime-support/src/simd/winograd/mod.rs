//! Winograd F(2x2, 3x3) input and output transforms: written once over
//! [`crate::simd::lanes::Lanes`] (`vector.rs`), run on AVX-512 or AVX2.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
mod vector;

use crate::simd::gemm::epilogue::Activation;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx2::Avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx512::Avx512;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::lanes::Lanes;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use vector::{InputTiles, OutputTiles};

/// Where the vector input transform of `crate::winograd` reads: planes of
/// `plane` floats, one per channel, in which the four input rows of the
/// tiles start at `rows` (`None`: a row of padding) and hold `w` floats;
/// tile `j` covers columns `first + 2j .. first + 2j + 4` of them (zero
/// outside the row).
#[derive(Clone, Copy)]
#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
pub(crate) struct TileRows {
    pub plane: usize,
    pub rows: [Option<usize>; 4],
    pub w: usize,
    pub first: isize,
}

#[cfg_attr(not(all(target_arch = "x86_64", target_feature = "sse2")), allow(dead_code))]
impl TileRows {
    /// Whether an input transform of `n` tiles of `channels` channels reads
    /// inside `x_len` floats (every row inside its plane) and writes `V_xi`
    /// of channel `c`'s tile `j` at `xi * xs + c * cs + at + j` inside
    /// `v_len` floats; false for no tiles or no channels. The vector units
    /// check this before their unchecked loops.
    #[inline]
    pub(crate) fn input_fits(
        self,
        x_len: usize,
        channels: usize,
        n: usize,
        v_len: usize,
        at: usize,
        [xs, cs]: [usize; 2],
    ) -> bool {
        let v_need = xs
            .checked_mul(15)
            .zip(cs.checked_mul(channels.saturating_sub(1)))
            .and_then(|(a, b)| a.checked_add(b))
            .and_then(|s| s.checked_add(at))
            .and_then(|s| s.checked_add(n));
        let x_need = self.plane.checked_mul(channels);
        let rows_fit = self
            .rows
            .iter()
            .flatten()
            .all(|&r| r.checked_add(self.w).is_some_and(|e| e <= self.plane));
        n != 0
            && channels != 0
            && rows_fit
            && x_need.is_some_and(|e| e <= x_len)
            && v_need.is_some_and(|e| e <= v_len)
    }

    /// Whether an output transform of `n` tiles reads `M_xi` of tile `j` at
    /// `xi * stride + at + j` inside `m_len` floats and each given output
    /// row holds the `cols <= 2 n` floats written; false for no tiles.
    #[inline]
    pub(crate) fn output_fits(
        m_len: usize,
        at: usize,
        stride: usize,
        n: usize,
        out: &[Option<&mut [f32]>; 2],
        cols: usize,
    ) -> bool {
        let m_need =
            stride.checked_mul(15).and_then(|s| s.checked_add(at)).and_then(|s| s.checked_add(n));
        let rows_fit = out.iter().all(|r| r.as_ref().is_none_or(|r| r.len() >= cols));
        n != 0 && cols <= 2 * n && rows_fit && m_need.is_some_and(|e| e <= m_len)
    }
}

/// The vector transforms of `crate::winograd` (AVX-512, else AVX2), when
/// this CPU has them; their results are bit for bit the portable
/// transforms'.
#[derive(Clone, Copy)]
pub(crate) struct WinogradTransforms {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    unit: WinogradUnit,
}

/// The vector unit of [`WinogradTransforms`].
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[derive(Clone, Copy)]
pub(in crate::simd) enum WinogradUnit {
    Avx512(Avx512),
    Avx2(Avx2),
}

impl WinogradTransforms {
    /// `Some` when the vector transforms run on this CPU (AVX-512 first).
    #[inline]
    pub(crate) fn detect() -> Option<Self> {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            let unit = match (Avx512::detect(), Avx2::detect()) {
                (Some(cpu), _) => WinogradUnit::Avx512(cpu),
                (None, Some(cpu)) => WinogradUnit::Avx2(cpu),
                (None, None) => return None,
            };
            Some(WinogradTransforms { unit })
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        None
    }

    /// Each unit's transforms, for tests: AVX-512's, then AVX2's even where
    /// AVX-512 is there; `None` for a unit this CPU (under the ISA cap)
    /// lacks, reported by [`crate::simd::tests::needs`]. None at all on targets without
    /// them.
    #[cfg(test)]
    pub(crate) fn each_unit() -> [Option<Self>; 2] {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        return [
            crate::simd::tests::avx512()
                .map(|cpu| WinogradTransforms { unit: WinogradUnit::Avx512(cpu) }),
            crate::simd::tests::avx2()
                .map(|cpu| WinogradTransforms { unit: WinogradUnit::Avx2(cpu) }),
        ];
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        [None, None]
    }

    /// The input transform of `n` tiles of each of `channels` channels of
    /// `x` (see `vector::InputTiles`): `V_xi` of channel `c`'s tile `j` to
    /// `v[xi * xs + c * cs + at + j]`. False when nothing was written (an
    /// operand too short).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn inputs(
        self,
        x: &[f32],
        src: TileRows,
        channels: usize,
        n: usize,
        v: &mut [f32],
        at: usize,
        strides: [usize; 2],
    ) -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            let k = InputTiles { x, src, channels, n, v, at, strides };
            match self.unit {
                WinogradUnit::Avx512(cpu) => cpu.enter(k),
                WinogradUnit::Avx2(cpu) => cpu.enter(k),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        {
            let _ = (x, src, channels, n, v, at, strides);
            false
        }
    }

    /// The output transform of `n` tiles of one output channel, bias and
    /// activation included (see `vector::OutputTiles`). False when nothing
    /// was written.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn outputs(
        self,
        m: &[f32],
        at: usize,
        stride: usize,
        n: usize,
        bias: Option<f32>,
        act: Activation,
        out: [Option<&mut [f32]>; 2],
        cols: usize,
    ) -> bool {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            let k = OutputTiles { m, at, stride, n, bias: bias.as_ref(), act: &act, out, cols };
            match self.unit {
                WinogradUnit::Avx512(cpu) => cpu.enter(k),
                WinogradUnit::Avx2(cpu) => cpu.enter(k),
            }
        }
        #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
        {
            let _ = (m, at, stride, n, bias, act, out, cols);
            false
        }
    }
}
