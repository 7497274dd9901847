//! Pooling kernels: AVX-512 (`avx512.rs`), and the same passes written
//! once over [`crate::simd::lanes::Lanes`] (`vector.rs`), run on AVX2.

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
pub(in crate::simd) mod avx512;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[allow(unsafe_code)]
mod vector;

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx2::Avx2;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::isa::avx512::Avx512;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::lanes::Lanes;

/// The vector unit the pools run on: AVX-512's own kernels, else the
/// [`Lanes`] passes on AVX2.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[derive(Clone, Copy)]
pub(in crate::simd) enum PoolUnit {
    Avx512(Avx512),
    Avx2(Avx2),
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
impl PoolUnit {
    /// The widest unit this CPU has (under the ISA cap), if any.
    #[inline]
    fn detect() -> Option<PoolUnit> {
        match (Avx512::detect(), Avx2::detect()) {
            (Some(cpu), _) => Some(PoolUnit::Avx512(cpu)),
            (None, Some(cpu)) => Some(PoolUnit::Avx2(cpu)),
            (None, None) => None,
        }
    }
}

/// Copies the even floats of 32 (`d[i] = s[2 * i]`, stride-2 convolution
/// inputs) with vector permutes where the CPU has AVX-512 (one) or AVX2
/// (two of 16 floats each), one by one elsewhere; detected once, when
/// made, so packing loops carry it along.
#[derive(Clone, Copy)]
pub(crate) struct Evens {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    pub(in crate::simd) unit: Option<PoolUnit>,
}

impl Evens {
    /// The copier for this CPU.
    #[inline]
    pub(crate) fn detect() -> Evens {
        Evens {
            #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
            unit: PoolUnit::detect(),
        }
    }

    /// `d[i] = s[2 * i]` for `i < 16`.
    #[inline(always)]
    pub(crate) fn copy(self, d: &mut [f32; 16], s: &[f32; 32]) {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        match self.unit {
            Some(PoolUnit::Avx512(cpu)) => {
                crate::simd::conv::depthwise::avx512::evens(
                    cpu,
                    core::slice::from_mut(d),
                    core::slice::from_ref(s),
                );
                return;
            }
            Some(PoolUnit::Avx2(cpu)) => {
                return cpu.vectorize(EvensOnAvx2 { cpu, copy: vector::EvensCopy { d, s } });
            }
            None => {}
        }
        for (i, v) in d.iter_mut().enumerate() {
            *v = s[2 * i];
        }
    }
}

/// [`vector::EvensCopy`] as a body of [`Avx2::vectorize`], whose
/// function enables AVX2 alone and is `#[inline]`: LLVM inlines it into
/// the callers compiled for AVX2 (the GEMM driver's packing), where a call
/// through [`Lanes::enter`] (AVX2 and FMA, more than those callers enable)
/// stays a call per 16 floats and spills the caller's vectors around it.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
struct EvensOnAvx2<'a> {
    cpu: Avx2,
    copy: vector::EvensCopy<'a>,
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
impl crate::simd::Vectorize for EvensOnAvx2<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        use crate::simd::lanes::LaneKernel;
        self.copy.run(self.cpu);
    }
}

/// `acc[i] = max(acc[i], src[i])` (the max pool's ranking: NaN wins, ties
/// keep `acc`) in explicit vector code where the CPU has it: `false` when
/// it has not, and the caller runs its own loop.
#[inline]
pub(crate) fn max_rows(acc: &mut [f32], src: &[f32]) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(unit) = PoolUnit::detect() {
        unit.max_rows(acc, src);
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
    if let Some(unit) = PoolUnit::detect() {
        return Some(unit.windows_s2::<K>(acc, out));
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
    if let Some(unit) = PoolUnit::detect() {
        return Some(unit.windows_s1(acc, out, k));
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
    if let Some(unit) = PoolUnit::detect() {
        return unit.max_pool_same(planes, hw, k, pad, x, y);
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
    k: (usize, usize),
    pad: (usize, usize),
    x: &[f32],
    y: &mut [f32],
) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(unit) = PoolUnit::detect() {
        return unit.max_pool_s2(planes, hw, out, k, pad, x, y);
    }
    let _ = (planes, hw, out, k, pad, x, y);
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
    if let Some(unit) = PoolUnit::detect() {
        return unit.avg_pool_2x2(planes, hw, out, x, y);
    }
    let _ = (planes, hw, out, x, y);
    false
}

/// Each pass on the unit's kernels, as the functions above describe them.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
impl PoolUnit {
    /// [`max_rows`].
    #[inline]
    fn max_rows(self, acc: &mut [f32], src: &[f32]) {
        match self {
            PoolUnit::Avx512(cpu) => avx512::max_rows(cpu, acc, src),
            PoolUnit::Avx2(cpu) => cpu.enter(vector::MaxRows { acc, src }),
        }
    }

    /// [`max_windows_s2`].
    #[inline]
    fn windows_s2<const K: usize>(self, acc: &[f32], out: &mut [f32]) -> usize {
        match self {
            PoolUnit::Avx512(cpu) => avx512::windows_s2::<K>(cpu, acc, out),
            PoolUnit::Avx2(cpu) => cpu.enter(vector::WindowsS2::<K> { acc, out }),
        }
    }

    /// [`max_windows_s1`].
    #[inline]
    fn windows_s1(self, acc: &[f32], out: &mut [f32], k: usize) -> usize {
        match self {
            PoolUnit::Avx512(cpu) => avx512::windows_s1(cpu, acc, out, k),
            PoolUnit::Avx2(cpu) => cpu.enter(vector::WindowsS1 { acc, out, k }),
        }
    }

    /// [`max_pool_same`].
    #[inline]
    fn max_pool_same(
        self,
        planes: usize,
        hw: (usize, usize),
        k: (usize, usize),
        pad: (usize, usize),
        x: &[f32],
        y: &mut [f32],
    ) -> bool {
        match self {
            PoolUnit::Avx512(cpu) => avx512::max_pool_same(cpu, planes, hw, k, pad, x, y),
            PoolUnit::Avx2(cpu) => cpu.enter(vector::MaxPoolSame { planes, hw, k, pad, x, y }),
        }
    }

    /// [`max_pool_s2`].
    #[allow(clippy::too_many_arguments)]
    #[inline]
    fn max_pool_s2(
        self,
        planes: usize,
        hw: (usize, usize),
        out: (usize, usize),
        (kh, kw): (usize, usize),
        (pt, pl): (usize, usize),
        x: &[f32],
        y: &mut [f32],
    ) -> bool {
        let window = (kh, pt, pl);
        match (self, kw) {
            (PoolUnit::Avx512(cpu), 2) => {
                avx512::max_pool_s2::<2>(cpu, planes, hw, out, window, x, y)
            }
            (PoolUnit::Avx512(cpu), 3) => {
                avx512::max_pool_s2::<3>(cpu, planes, hw, out, window, x, y)
            }
            (PoolUnit::Avx2(cpu), 2) => {
                cpu.enter(vector::MaxPoolS2::<2> { planes, hw, out, window, x, y })
            }
            (PoolUnit::Avx2(cpu), 3) => {
                cpu.enter(vector::MaxPoolS2::<3> { planes, hw, out, window, x, y })
            }
            _ => false,
        }
    }

    /// [`avg_pool_2x2`].
    #[inline]
    fn avg_pool_2x2(
        self,
        planes: usize,
        hw: (usize, usize),
        out: (usize, usize),
        x: &[f32],
        y: &mut [f32],
    ) -> bool {
        match self {
            PoolUnit::Avx512(cpu) => avx512::avg_pool_2x2(cpu, planes, hw, out, x, y),
            PoolUnit::Avx2(cpu) => cpu.enter(vector::AvgPool2x2 { planes, hw, out, x, y }),
        }
    }
}

#[cfg(all(test, target_arch = "x86_64", target_feature = "sse2"))]
mod tests {
    use super::*;
    use std::vec;
    use std::vec::Vec;

    /// The passes under test: a unit as the dispatcher runs it (AVX2: the
    /// [`Lanes`] passes on eight lanes; AVX-512: `avx512.rs`), or the
    /// [`Lanes`] passes on AVX-512's sixteen lanes (not dispatched).
    #[derive(Clone, Copy)]
    enum Unit {
        Pool(PoolUnit),
        Lanes512(Avx512),
    }

    impl Unit {
        fn name(self) -> &'static str {
            match self {
                Unit::Pool(PoolUnit::Avx2(_)) => "avx2",
                Unit::Pool(PoolUnit::Avx512(_)) => "avx512",
                Unit::Lanes512(_) => "lanes on avx512",
            }
        }

        fn max_rows(self, acc: &mut [f32], src: &[f32]) {
            match self {
                Unit::Pool(u) => u.max_rows(acc, src),
                Unit::Lanes512(cpu) => cpu.enter(vector::MaxRows { acc, src }),
            }
        }

        fn windows_s2<const K: usize>(self, acc: &[f32], out: &mut [f32]) -> usize {
            match self {
                Unit::Pool(u) => u.windows_s2::<K>(acc, out),
                Unit::Lanes512(cpu) => cpu.enter(vector::WindowsS2::<K> { acc, out }),
            }
        }

        fn windows_s1(self, acc: &[f32], out: &mut [f32], k: usize) -> usize {
            match self {
                Unit::Pool(u) => u.windows_s1(acc, out, k),
                Unit::Lanes512(cpu) => cpu.enter(vector::WindowsS1 { acc, out, k }),
            }
        }

        fn max_pool_same(
            self,
            planes: usize,
            g: [(usize, usize); 3],
            x: &[f32],
            y: &mut [f32],
        ) -> bool {
            let [hw, k, pad] = g;
            match self {
                Unit::Pool(u) => u.max_pool_same(planes, hw, k, pad, x, y),
                Unit::Lanes512(cpu) => cpu.enter(vector::MaxPoolSame { planes, hw, k, pad, x, y }),
            }
        }

        fn max_pool_s2(
            self,
            planes: usize,
            g: [(usize, usize); 4],
            x: &[f32],
            y: &mut [f32],
        ) -> bool {
            let [hw, out, (kh, kw), (pt, pl)] = g;
            let window = (kh, pt, pl);
            match (self, kw) {
                (Unit::Pool(u), _) => u.max_pool_s2(planes, hw, out, (kh, kw), (pt, pl), x, y),
                (Unit::Lanes512(cpu), 2) => {
                    cpu.enter(vector::MaxPoolS2::<2> { planes, hw, out, window, x, y })
                }
                (Unit::Lanes512(cpu), 3) => {
                    cpu.enter(vector::MaxPoolS2::<3> { planes, hw, out, window, x, y })
                }
                _ => false,
            }
        }

        fn avg_pool_2x2(
            self,
            planes: usize,
            g: [(usize, usize); 2],
            x: &[f32],
            y: &mut [f32],
        ) -> bool {
            let [hw, out] = g;
            match self {
                Unit::Pool(u) => u.avg_pool_2x2(planes, hw, out, x, y),
                Unit::Lanes512(cpu) => cpu.enter(vector::AvgPool2x2 { planes, hw, out, x, y }),
            }
        }

        fn evens(self, d: &mut [f32; 16], s: &[f32; 32]) {
            match self {
                Unit::Pool(u) => Evens { unit: Some(u) }.copy(d, s),
                Unit::Lanes512(cpu) => cpu.enter(vector::EvensCopy { d, s }),
            }
        }
    }

    /// The units this CPU has under the ISA cap (the others reported
    /// skipped).
    fn units() -> Vec<Unit> {
        let mut units = Vec::new();
        if let Some(cpu) = crate::simd::tests::avx2() {
            units.push(Unit::Pool(PoolUnit::Avx2(cpu)));
        }
        if let Some(cpu) = crate::simd::tests::avx512() {
            units.push(Unit::Pool(PoolUnit::Avx512(cpu)));
            units.push(Unit::Lanes512(cpu));
        }
        units
    }

    /// The scalar ranking of `pool::max_nan`: a NaN `v` wins, else `v`
    /// replaces `best` only when larger (of `-0.0` and `0.0` the earlier
    /// stays).
    fn max_nan(best: f32, v: f32) -> f32 {
        if v.is_nan() || v > best { v } else { best }
    }

    /// A NaN other than `f32::NAN` (sign and payload), so which NaN won
    /// shows in the bits.
    const OTHER_NAN: u32 = 0xffc0_0001;

    /// `n` floats that tie often: multiples of 0.25 in [-1, 1] (both
    /// zeros among them), with infinities and NaNs of two payloads mixed
    /// in.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut v = vec![0.0f32; n];
        crate::simd::tests::fill(&mut v, seed);
        let odd = [
            f32::NAN,
            -0.0,
            0.0,
            f32::NEG_INFINITY,
            f32::from_bits(OTHER_NAN),
            f32::INFINITY,
            -0.0,
            0.0,
        ];
        for (i, x) in v.iter_mut().enumerate() {
            let h = (i as u32 ^ seed.wrapping_mul(40_503)).wrapping_mul(2_654_435_761) >> 7;
            *x = if h.is_multiple_of(7) {
                odd[(h / 7 % 8) as usize]
            } else {
                (*x * 4.0).round() / 4.0
            };
        }
        v
    }

    /// `planes` planes of `hw` floats of the kinds the pools tell apart:
    /// [`values`] (NaN among them); the same without NaN (infinities and
    /// signed zeros kept); without NaN or infinities (zeros of both signs
    /// in their place); and that with one NaN (of two payloads by `seed`)
    /// at float `nan_at` of the plane. The kinds are rotated by `seed`, so
    /// that each comes last (where a pass may write nothing past the
    /// slice) in turn.
    fn planes_of_kinds(planes: usize, hw: usize, seed: u32, nan_at: usize) -> Vec<f32> {
        let mut x = Vec::with_capacity(planes * hw);
        for p in 0..planes {
            let mut v = values(hw, seed.wrapping_add(7919 * p as u32));
            let kind = (p + seed as usize) % 4;
            for (i, f) in v.iter_mut().enumerate() {
                if kind >= 1 && f.is_nan() {
                    *f = [0.75, -0.0][i % 2];
                }
                if kind >= 2 && f.is_infinite() {
                    *f = [0.0, -0.0][i % 2];
                }
            }
            if kind == 3 && hw > 0 {
                v[nan_at % hw] = [f32::NAN, f32::from_bits(OTHER_NAN)][seed as usize % 2];
            }
            x.extend(v);
        }
        x
    }

    /// Floats of an `h x w` plane for [`planes_of_kinds`]' lone NaN, by
    /// `case`: each corner, the middle, and the first and last columns of
    /// the middle row (where a window's taps reach past the row).
    fn nan_place(h: usize, w: usize, case: usize) -> usize {
        let mid = h / 2 * w;
        [0, w - 1, (h - 1) * w, h * w - 1, mid + w / 2, mid, mid + w - 1][case % 7]
    }

    /// Bit for bit, or the place and both values.
    fn assert_bits(got: &[f32], want: &[f32], what: &dyn Fn() -> std::string::String) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{} at {i}: {g} vs {w}", what());
        }
    }

    /// One plane's max pool as the separable passes rank its taps: down
    /// each window column's rows from the top, then across the columns
    /// from the left; `-inf` for a window without a tap in the input.
    fn max_pool_reference(x: &[f32], hw: (usize, usize), g: [(usize, usize); 4]) -> Vec<f32> {
        let [(oh, ow), (kh, kw), (sy, sx), (pt, pl)] = g;
        let taps = |o: usize, s: usize, k: usize, p: usize, n: usize| -> Vec<usize> {
            (0..k).filter_map(|t| (o * s + t).checked_sub(p)).filter(|&i| i < n).collect()
        };
        let mut y = vec![0.0f32; oh * ow];
        for oy in 0..oh {
            let rows = taps(oy, sy, kh, pt, hw.0);
            for ox in 0..ow {
                let cols = taps(ox, sx, kw, pl, hw.1);
                let down = |c: usize| {
                    let at = |r: usize| x[r * hw.1 + c];
                    rows[1..].iter().fold(at(rows[0]), |b, &r| max_nan(b, at(r)))
                };
                y[oy * ow + ox] = if rows.is_empty() {
                    f32::NEG_INFINITY
                } else {
                    cols.iter().map(|&c| down(c)).reduce(max_nan).unwrap_or(f32::NEG_INFINITY)
                };
            }
        }
        y
    }

    /// The row passes against the scalar ranking at every length up to
    /// 80 (every tail of 8 and 16 lanes), into outputs of every kind of
    /// length: the counts, the values bit for bit (which NaN, which zero),
    /// and nothing written past the count.
    #[test]
    fn row_passes_match_the_scalar_ranking() {
        for unit in units() {
            for n in 0..=80usize {
                let (acc0, src) = (values(n + 3, n as u32), values(n + 3, 1000 + n as u32));
                // `acc` shorter than `src`, then longer: `n` floats change.
                for (a_len, s_len) in [(n, n + 3), (n + 3, n)] {
                    let mut acc = acc0[..a_len].to_vec();
                    unit.max_rows(&mut acc, &src[..s_len]);
                    let mut want = acc0[..a_len].to_vec();
                    for (w, &s) in want.iter_mut().zip(&src[..n]) {
                        *w = max_nan(*w, s);
                    }
                    assert_bits(&acc, &want, &|| std::format!("{} rows of {n}", unit.name()));
                }
                let x = &acc0[..n];
                for out_len in [0, 1, n / 2, n / 2 + 1, n, 100] {
                    let sentinel = f32::from_bits(0x7f80_0123);
                    let fresh = || vec![sentinel; out_len];
                    let what = |k: usize, s: usize| {
                        move || {
                            std::format!(
                                "{}: {k} wide stride {s} of {n} into {out_len}",
                                unit.name()
                            )
                        }
                    };
                    for k in [2, 3] {
                        let mut out = fresh();
                        let count = match k {
                            2 => unit.windows_s2::<2>(x, &mut out),
                            _ => unit.windows_s2::<3>(x, &mut out),
                        };
                        let want_count = out_len.min((n / 2).saturating_sub(1));
                        assert_eq!(count, want_count, "{}", what(k, 2)());
                        let mut want = fresh();
                        for (i, w) in want.iter_mut().enumerate().take(count) {
                            *w = x[2 * i + 1..2 * i + k]
                                .iter()
                                .fold(x[2 * i], |b, &v| max_nan(b, v));
                        }
                        assert_bits(&out, &want, &what(k, 2));
                    }
                    for k in 0..=6 {
                        let mut out = fresh();
                        let count = unit.windows_s1(x, &mut out, k);
                        let want_count =
                            if k == 0 { 0 } else { out_len.min((n + 1).saturating_sub(k)) };
                        assert_eq!(count, want_count, "{}", what(k, 1)());
                        let mut want = fresh();
                        for (i, w) in want.iter_mut().enumerate().take(count) {
                            *w = x[i + 1..i + k].iter().fold(x[i], |b, &v| max_nan(b, v));
                        }
                        assert_bits(&out, &want, &what(k, 1));
                    }
                }
            }
        }
    }

    /// Stride-1 same-size pools of four planes (of each of
    /// [`planes_of_kinds`]: with NaN, without, one NaN at an edge or in
    /// the middle) against the separable reference: widths 1 to 40 (rows
    /// shorter than a vector, across vectors, every tail; flat planes and
    /// padded rows), windows square, flat and tall, the padding from none
    /// to all but one tap; then the shapes it declines, writing nothing.
    #[test]
    fn same_size_pools_match_the_separable_reference() {
        for unit in units() {
            let mut cases = 0;
            for w in 1..=40 {
                for h in [1, 2, 3, 5, 8, 13] {
                    for (kh, kw) in
                        [(1, 1), (3, 3), (2, 2), (2, 3), (3, 2), (5, 5), (1, 4), (4, 1), (7, 2)]
                    {
                        for (pt, pl) in [(0, 0), (kh / 2, kw / 2), (kh - 1, kw - 1), (kh - 1, 0)] {
                            let planes = 4;
                            let seed = (h * 41 + w + cases) as u32;
                            let x = planes_of_kinds(planes, h * w, seed, nan_place(h, w, cases));
                            let mut y = vec![7.0f32; planes * h * w];
                            let g = [(h, w), (kh, kw), (pt, pl)];
                            assert!(unit.max_pool_same(planes, g, &x, &mut y));
                            for (xp, yp) in x.chunks(h * w).zip(y.chunks(h * w)) {
                                let rg = [(h, w), (kh, kw), (1, 1), (pt, pl)];
                                let want = max_pool_reference(xp, (h, w), rg);
                                let what = || {
                                    std::format!(
                                        "{}: {h}x{w} k {kh}x{kw} pad {pt},{pl}",
                                        unit.name()
                                    )
                                };
                                assert_bits(yp, &want, &what);
                            }
                            cases += 1;
                        }
                    }
                }
            }
            assert_eq!(cases, 40 * 6 * 9 * 4);
            // A plane past the buffer, padding as large as the window,
            // slices of the wrong length: declined, nothing written.
            let x = values(2 * 65 * 64, 5);
            for (planes, hw, k, pad, x_len, y_len) in [
                (2, (65, 64), (3, 3), (1, 1), 2 * 65 * 64, 2 * 65 * 64),
                (1, (8, 8), (3, 3), (3, 1), 64, 64),
                (1, (8, 8), (3, 3), (1, 3), 64, 64),
                (1, (8, 8), (3, 3), (1, 1), 64, 63),
                (3, (8, 8), (3, 3), (1, 1), 3 * 64 - 1, 3 * 64),
            ] {
                let mut y = vec![7.0f32; y_len];
                let x = &x[..x_len];
                assert!(!unit.max_pool_same(planes, [hw, k, pad], x, &mut y), "{}", unit.name());
                assert!(y.iter().all(|&v| v == 7.0));
            }
        }
    }

    /// Stride-2 pools of 2- and 3-wide windows on four planes (of each of
    /// [`planes_of_kinds`]) against the separable reference: widths 1 to
    /// 40, window heights 1 to 4, padding before of 0 to 2 rows and
    /// columns and the output sizes of floor and ceil mode (windows ending
    /// in the padding, or lying in it); then the shapes it declines,
    /// writing nothing.
    #[test]
    fn stride_2_pools_match_the_separable_reference() {
        for unit in units() {
            let mut cases = 0;
            for w in 1..=40 {
                for h in [1, 2, 3, 4, 7, 10] {
                    for (kh, kw) in (1..=4).flat_map(|kh| [(kh, 2), (kh, 3)]) {
                        for (pt, pl, pe) in (0..=2).flat_map(|p| [(p, 2 - p, 0), (p, p, 1)]) {
                            let (rows, cols) = (h + pt + pe, w + pl + pe);
                            if rows < kh || cols < kw {
                                continue;
                            }
                            let (oh, ow) = ((rows - kh) / 2 + 1, (cols - kw) / 2 + 1);
                            let planes = 4;
                            let seed = (h * 43 + w + kh + cases) as u32;
                            let x = planes_of_kinds(planes, h * w, seed, nan_place(h, w, cases));
                            let mut y = vec![7.0f32; planes * oh * ow];
                            let g = [(h, w), (oh, ow), (kh, kw), (pt, pl)];
                            assert!(unit.max_pool_s2(planes, g, &x, &mut y));
                            for (xp, yp) in x.chunks(h * w).zip(y.chunks(oh * ow)) {
                                let rg = [(oh, ow), (kh, kw), (2, 2), (pt, pl)];
                                let want = max_pool_reference(xp, (h, w), rg);
                                let what = || {
                                    std::format!(
                                        "{}: {h}x{w} k {kh}x{kw} pad {pt},{pl} out {oh}x{ow}",
                                        unit.name()
                                    )
                                };
                                assert_bits(yp, &want, &what);
                            }
                            cases += 1;
                        }
                    }
                }
            }
            assert!(cases > 10_000, "{cases}");
            // 4-wide windows, slices of the wrong length: declined.
            let x = values(2 * 8 * 9, 6);
            for (k, y_len) in [((3, 4), 2 * 16), ((3, 3), 2 * 16 - 1), ((2, 2), 2 * 16 + 1)] {
                let mut y = vec![7.0f32; y_len];
                let g = [(8, 9), (4, 4), k, (1, 1)];
                assert!(!unit.max_pool_s2(2, g, &x, &mut y), "{}", unit.name());
                assert!(y.iter().all(|&v| v == 7.0));
            }
        }
    }

    /// Planes larger than the small-shape tests reach, against the
    /// separable reference: stride-2 pools over several passes of output
    /// rows (the lone NaN in each of them in turn), rows too wide for a
    /// pass (every row exact), and same-size pools of planes up to the
    /// buffer's, with padded rows or flat ones past it.
    #[test]
    fn large_planes_match_the_separable_reference() {
        for unit in units() {
            let check = |x: &[f32], y: &[f32], hw: (usize, usize), rg: [(usize, usize); 4]| {
                let (ih, iw) = hw;
                let ohw = rg[0].0 * rg[0].1;
                for (p, (xp, yp)) in x.chunks(ih * iw).zip(y.chunks(ohw)).enumerate() {
                    let want = max_pool_reference(xp, hw, rg);
                    let what = || std::format!("{}: {ih}x{iw} {rg:?} plane {p}", unit.name());
                    assert_bits(yp, &want, &what);
                }
            };
            let mut case = 0;
            for (h, w) in [(40, 200), (37, 129), (64, 64), (9, 1100), (70, 3)] {
                for (kh, kw, pt, pl, pe) in [(3, 3, 1, 1, 1), (3, 3, 0, 0, 1), (2, 2, 0, 0, 0)] {
                    let (oh, ow) = ((h + pt + pe - kh) / 2 + 1, (w + pl + pe - kw) / 2 + 1);
                    // The lone NaN in rows of the first, middle and last
                    // passes, and in the last column.
                    for at in [w + 3, h / 2 * w + 1, (h - 1) * w + w / 2, h * w / 2 + w - 1] {
                        let planes = 4;
                        let x = planes_of_kinds(planes, h * w, case, at);
                        let mut y = vec![7.0f32; planes * oh * ow];
                        let g = [(h, w), (oh, ow), (kh, kw), (pt, pl)];
                        assert!(unit.max_pool_s2(planes, g, &x, &mut y));
                        check(&x, &y, (h, w), [(oh, ow), (kh, kw), (2, 2), (pt, pl)]);
                        case += 1;
                    }
                }
            }
            for (h, w) in [(64, 64), (100, 40), (50, 81), (4096, 1), (1, 4096), (2, 2000)] {
                for (kh, kw, pt, pl) in [(3, 3, 1, 1), (5, 5, 2, 2), (2, 2, 1, 0), (1, 9, 0, 4)] {
                    for at in [0, h * w / 2, h * w - 1] {
                        let planes = 4;
                        let x = planes_of_kinds(planes, h * w, case, at);
                        let mut y = vec![7.0f32; planes * h * w];
                        let g = [(h, w), (kh, kw), (pt, pl)];
                        assert!(unit.max_pool_same(planes, g, &x, &mut y));
                        check(&x, &y, (h, w), [(h, w), (kh, kw), (1, 1), (pt, pl)]);
                        case += 1;
                    }
                }
            }
        }
    }

    /// 2x2 stride-2 average pools against the scalar sum in the generic
    /// loop's order (from `+0.0`, row by row) divided by four: widths 2 to
    /// 41, odd sizes whose last row or column no window reads, signed
    /// zeros, infinities, NaN, and subnormal quotients; then the shapes it
    /// declines, writing nothing.
    #[test]
    fn average_2x2_pools_match_the_scalar_sum() {
        for unit in units() {
            for w in 2..=41 {
                for h in [2, 3, 4, 5, 7] {
                    let (oh, ow, planes) = (h / 2, w / 2, 3);
                    let mut x = values(planes * h * w, (h * 47 + w) as u32);
                    // Small values whose quarter is subnormal, and a window
                    // of negative zeros (its average is `+0.0`).
                    for (i, v) in x.iter_mut().enumerate().skip(5).step_by(11) {
                        *v = f32::from_bits(0x0080_0000 + i as u32);
                    }
                    x[..2].fill(-0.0);
                    x[w..w + 2].fill(-0.0);
                    let mut y = vec![7.0f32; planes * oh * ow];
                    assert!(unit.avg_pool_2x2(planes, [(h, w), (oh, ow)], &x, &mut y));
                    assert_eq!(y[0].to_bits(), 0.0f32.to_bits());
                    for (p, (xp, yp)) in x.chunks(h * w).zip(y.chunks(oh * ow)).enumerate() {
                        for (o, &got) in yp.iter().enumerate() {
                            let (r, c) = (2 * (o / ow), 2 * (o % ow));
                            let t = |r: usize, c: usize| xp[r * w + c];
                            let sum = 0.0 + t(r, c) + t(r, c + 1) + t(r + 1, c) + t(r + 1, c + 1);
                            let want = sum / 4.0;
                            assert!(
                                got.to_bits() == want.to_bits() || got.is_nan() && want.is_nan(),
                                "{}: {h}x{w} plane {p} at {o}: {got} vs {want}",
                                unit.name()
                            );
                        }
                    }
                }
            }
            let x = values(2 * 5 * 6, 7);
            for (out, y_len) in [((3, 3), 2 * 9), ((2, 4), 2 * 8), ((2, 3), 2 * 6 - 1)] {
                let mut y = vec![7.0f32; y_len];
                assert!(!unit.avg_pool_2x2(2, [(5, 6), out], &x, &mut y), "{}", unit.name());
                assert!(y.iter().all(|&v| v == 7.0));
            }
        }
    }

    /// The even-float copy, bit for bit (NaNs of two payloads, both zeros).
    #[test]
    fn evens_copy_every_other_float() {
        for unit in units() {
            for seed in 0..8 {
                let v = values(32, seed);
                let s: [f32; 32] = core::array::from_fn(|i| v[i]);
                let mut d = [f32::from_bits(0x7f80_0123); 16];
                unit.evens(&mut d, &s);
                let want: [f32; 16] = core::array::from_fn(|i| s[2 * i]);
                assert_bits(&d, &want, &|| std::format!("{} evens of seed {seed}", unit.name()));
            }
        }
    }
}
