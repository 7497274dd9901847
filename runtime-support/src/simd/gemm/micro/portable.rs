//! The portable micro-kernel: multiply then add, bit-exact with the exact
//! kernels; every target has it.

use crate::simd::gemm::epilogue::finish;
use crate::simd::gemm::micro::ARows;
use crate::simd::gemm::micro::BStrip;
use crate::simd::gemm::micro::DstBlock;
use crate::simd::gemm::micro::Micro;
use crate::simd::gemm::micro::Tile;

/// The portable micro-kernel: `4 x NR` sums, multiply then add (exactly the
/// exact kernels' arithmetic).
#[derive(Clone, Copy)]
#[cfg_attr(onnx_codegen_arm_fma, allow(dead_code))]
pub(crate) struct Portable<const NR: usize>;

impl<const NR: usize> Micro for Portable<NR> {
    const MR: usize = 4;
    const NR: usize = NR;
    const MC: usize = 64;
    const KC: usize = 256;

    #[inline]
    fn kernel(self, t: Tile<'_>) {
        let Tile {
            kc,
            a: ARows { data: a, rows, cs },
            b: BStrip { data: b, ldb },
            dst: DstBlock { data: dst, ldd, nrows, ncols, load },
            tail,
        } = t;
        debug_assert_eq!(ldb, NR, "portable tile: B a packed strip {NR} wide");
        if ldb != NR {
            return;
        }
        let (nrows, ncols) = (nrows.min(4), ncols.min(NR));
        let mut acc = [[0.0f32; NR]; 4];
        if load {
            for (r, row) in acc.iter_mut().enumerate().take(nrows) {
                for (c, v) in row.iter_mut().enumerate().take(ncols) {
                    *v = dst.get(r * ldd + c).copied().unwrap_or(0.0);
                }
            }
        }
        let r: [usize; 4] = core::array::from_fn(|i| rows.get(i).copied().unwrap_or(0));
        for (p, bp) in b.chunks_exact(NR).take(kc).enumerate() {
            let off = p * cs;
            let av: [f32; 4] = core::array::from_fn(|i| a.get(r[i] + off).copied().unwrap_or(0.0));
            for i in 0..4 {
                for c in 0..NR {
                    acc[i][c] += av[i] * bp[c];
                }
            }
        }
        for (r, row) in acc.iter().enumerate().take(nrows) {
            for (c, v) in row.iter().enumerate().take(ncols) {
                if let Some(t) = dst.get_mut(r * ldd + c) {
                    *t = *v;
                }
            }
        }
        finish(dst, ldd, nrows, ncols, tail);
    }
}

/// The portable strip width: 8 columns where there are vector registers
/// to spare, 4 on small FPUs (Cortex-M4F has 32 single registers).
#[cfg(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "x86",
    target_arch = "aarch64"
))]
pub(crate) type PortableKernel = Portable<8>;
#[cfg(not(any(
    all(target_arch = "x86_64", target_feature = "sse2"),
    target_arch = "x86",
    target_arch = "aarch64",
    onnx_codegen_arm_fma
)))]
pub(crate) type PortableKernel = Portable<4>;
/// On an Arm FPU with fused multiply-add (Cortex-M4F and the like) the
/// kernel without vector unit is the register-blocked FMA one (which
/// multiplies then adds under the cap `Isa::Portable`).
#[cfg(onnx_codegen_arm_fma)]
pub(crate) type PortableKernel = crate::simd::gemm::micro::arm::ArmFma;

/// The kernel without vector unit, under the ISA cap.
#[inline(always)]
pub(crate) fn portable_kernel() -> PortableKernel {
    #[cfg(onnx_codegen_arm_fma)]
    return PortableKernel::new();
    #[cfg(not(onnx_codegen_arm_fma))]
    PortableKernel {}
}

/// The kernel without vector unit, multiplying then adding: the exact
/// arithmetic, whatever the target and the cap.
#[cfg(test)]
pub(crate) fn exact_kernel() -> PortableKernel {
    #[cfg(onnx_codegen_arm_fma)]
    return PortableKernel::exact();
    #[cfg(not(onnx_codegen_arm_fma))]
    PortableKernel {}
}
