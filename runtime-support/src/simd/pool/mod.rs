//! Pooling kernels: AVX-512 only.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx512::Avx512;

/// Copies the even floats of 32 (`d[i] = s[2 * i]`, stride-2 convolution
/// inputs) with one vector permute where the CPU has AVX-512, one by one
/// elsewhere; detected once, when made, so packing loops carry it along.
#[derive(Clone, Copy)]
pub(crate) struct Evens {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(in crate::simd) cpu: Option<Avx512>,
}

impl Evens {
    /// The copier for this CPU.
    #[inline]
    pub(crate) fn detect() -> Evens {
        Evens {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            cpu: Avx512::detect(),
        }
    }

    /// `d[i] = s[2 * i]` for `i < 16`.
    #[inline(always)]
    pub(crate) fn copy(self, d: &mut [f32; 16], s: &[f32; 32]) {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(cpu) = self.cpu {
            crate::simd::conv::depthwise::avx512::evens(
                cpu,
                core::slice::from_mut(d),
                core::slice::from_ref(s),
            );
            return;
        }
        for (i, v) in d.iter_mut().enumerate() {
            *v = s[2 * i];
        }
    }
}

/// `acc[i] = max(acc[i], src[i])` (the max pool's ranking: NaN wins, ties
/// keep `acc`) in explicit vector code where the CPU has it: `false` when
/// it has not, and the caller runs its own loop.
#[inline]
pub(crate) fn max_rows(acc: &mut [f32], src: &[f32]) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        avx512::max_rows(cpu, acc, src);
        return true;
    }
    let _ = (acc, src);
    false
}

/// The max pool's stride-2 windows of `K` (2 or 3) columns across `acc`,
/// in explicit vector code where the CPU has it: how many leading outputs
/// it wrote (those whose window and the next two columns lie in `acc`),
/// `None` when the caller runs its own loop.
#[inline]
pub(crate) fn max_windows_s2<const K: usize>(acc: &[f32], out: &mut [f32]) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        return Some(avx512::windows_s2::<K>(cpu, acc, out));
    }
    let _ = (acc, out);
    None
}

/// The max pool's stride-1 windows of `k` columns across `acc`, in explicit
/// vector code where the CPU has it: how many leading outputs it wrote
/// (those whose window lies in `acc`), `None` when the caller runs its own
/// loop.
#[inline]
pub(crate) fn max_windows_s1(acc: &[f32], out: &mut [f32], k: usize) -> Option<usize> {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        return Some(avx512::windows_s1(cpu, acc, out, k));
    }
    let _ = (acc, out, k);
    None
}

/// A stride-1 max pool with outputs the size of its inputs (`planes`
/// planes of `hw`, `k` windows, `pad` rows and columns of padding before)
/// on small planes, in explicit vector code where the CPU has it: `false`
/// (nothing written) when it does not apply, and the caller pools
/// another way.
#[inline]
pub(crate) fn max_pool_same(
    planes: usize,
    hw: (usize, usize),
    k: (usize, usize),
    pad: (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        return avx512::max_pool_same(cpu, planes, hw, k, pad, x, y);
    }
    let _ = (planes, hw, k, pad, x, y);
    false
}

/// An undilated stride-2 max pool with `kh x kw` windows, `pad` rows and
/// columns of padding before, in explicit vector code where the CPU has it
/// and `kw` is 2 or 3: `false` (nothing written) when it does not apply,
/// and the caller pools another way.
#[inline]
pub(crate) fn max_pool_s2(
    planes: usize,
    hw: (usize, usize),
    out: (usize, usize),
    (kh, kw): (usize, usize),
    (pt, pl): (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        let window = (kh, pt, pl);
        return match kw {
            2 => avx512::max_pool_s2::<2>(cpu, planes, hw, out, window, x, y),
            3 => avx512::max_pool_s2::<3>(cpu, planes, hw, out, window, x, y),
            _ => false,
        };
    }
    let _ = (planes, hw, out, kh, kw, pt, pl, x, y);
    false
}

/// A 2x2 stride-2 average pool whose windows all lie inside the input, in
/// explicit vector code where the CPU has it: `false` (nothing written)
/// when it does not apply, and the caller pools another way.
#[inline]
pub(crate) fn avg_pool_2x2(
    planes: usize,
    hw: (usize, usize),
    out: (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(cpu) = Avx512::detect() {
        return avx512::avg_pool_2x2(cpu, planes, hw, out, x, y);
    }
    let _ = (planes, hw, out, x, y);
    false
}
