//! The direct convolution's AVX-512 tile: 8 output channels by 32 pixels,
//! the GEMM micro-kernel's [`Avx512::kernel_table`].

use crate::simd::conv::direct::Direct;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::rows::{BTable, DstRuns};
use crate::simd::isa::avx512::Avx512;

impl Direct for Avx512 {
    /// 16 FMAs per step: 8 cycles.
    const FULL: usize = 8;
    /// 8 broadcasts and a load per step: about 5 cycles.
    const HALF: usize = 5;

    #[inline(always)]
    fn table_tile(self, t: Tile<'_, ARows<'_>, BTable<'_>, DstRuns<'_>>) -> bool {
        self.kernel_table(t)
    }

    /// Blocks of 16 outputs from 32 inputs (a two-register permute).
    #[inline(always)]
    fn evens(self, dst: &mut [f32], src: &[f32]) -> usize {
        let full = (dst.len() / 16).min(src.len() / 32);
        let (blocks, _) = dst.split_at_mut(full * 16);
        crate::simd::conv::depthwise::avx512::evens(
            self,
            blocks.as_chunks_mut::<16>().0,
            src.as_chunks::<32>().0,
        );
        full * 16
    }
}
