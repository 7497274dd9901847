//! The direct convolution's AVX2 tile: 6 output channels by 16 pixels,
//! [`Avx2::kernel_table`].

use crate::simd::conv::direct::Direct;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::Tile;
use crate::simd::gemm::micro::rows::{BTable, DstRuns};
use crate::simd::isa::avx2::Avx2;

impl Direct for Avx2 {
    /// 12 FMAs per step on two FMA pipes: 6 cycles.
    const FULL: usize = 6;
    /// 6 FMAs, 6 broadcasts and a load per step: about 4 cycles.
    const HALF: usize = 4;

    #[inline(always)]
    fn table_tile(self, t: Tile<'_, ARows<'_>, BTable<'_>, DstRuns<'_>>) -> bool {
        self.kernel_table(t)
    }

    fn evens(self, dst: &mut [f32], src: &[f32]) -> usize {
        let _ = (dst, src);
        0
    }
}
