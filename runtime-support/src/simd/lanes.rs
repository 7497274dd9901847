//! Vector code written once for every instruction set: the [`Lanes`] trait
//! (f32 vectors of one ISA, implemented by its token in `simd::isa`) and
//! the [`LaneKernel`] bodies that run over it.
//!
//! A kernel's steps are a generic `#[inline(always)]` function over `L:
//! Lanes`; [`Lanes::enter`] runs them inside a `#[target_feature]` function
//! of the token's ISA, so every method inlines there and compiles to the
//! instructions a hand-written kernel would have (the methods are
//! `#[inline(always)]`; the intrinsics they call are inlined once inside
//! the feature-enabled function). The arithmetic is the same operation
//! for operation on every ISA: only the lane count [`Lanes::N`] differs.
//!
//! Soundness: a [`Lanes`] value is an ISA token, which exists only after
//! the CPU was found to support the ISA, so the safe methods may run its
//! intrinsics; the two memory methods, [`Lanes::load`] and
//! [`Lanes::store`], are `unsafe` and leave the bounds to the caller,
//! which checks its slices once before the loops.

use crate::simd::gemm::epilogue::Activation;

/// Vectors of `N` floats on one instruction set, implemented by the ISA's
/// token (`Avx2`: 8 lanes, `Avx512`: 16). Operations act lane by lane
/// with IEEE single-precision rounding, as the scalar operations do,
/// unless they say otherwise.
///
/// Implementations mark every method `#[inline(always)]` (see the
/// [module documentation](self)).
pub(in crate::simd) trait Lanes: Copy {
    /// Floats per vector.
    const N: usize;
    /// A vector of [`Lanes::N`] floats.
    type V: Copy;
    /// A set of lanes: a load or store mask, or where a comparison holds.
    type M: Copy;

    /// Runs `k` with `self` as its lanes, inside a function compiled for
    /// this ISA (`#[target_feature]`), into which `k.run` inlines.
    fn enter<K: LaneKernel>(self, k: K) -> K::Output;

    /// `x` in every lane.
    fn splat(self, x: f32) -> Self::V;
    /// `a + b`.
    fn add(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a - b`.
    fn sub(self, a: Self::V, b: Self::V) -> Self::V;
    /// `a * b`.
    fn mul(self, a: Self::V, b: Self::V) -> Self::V;

    /// The lanes `l < n` (all of them from `N` up).
    fn below(self, n: usize) -> Self::M;
    /// The lanes `l` with `lo <= l < hi` (none when `hi <= lo`).
    fn between(self, lo: isize, hi: isize) -> Self::M;
    /// `a < b` (false where either is NaN).
    fn lt(self, a: Self::V, b: Self::V) -> Self::M;
    /// `a > b` (false where either is NaN).
    fn gt(self, a: Self::V, b: Self::V) -> Self::M;
    /// Where `a` is NaN.
    fn is_nan(self, a: Self::V) -> Self::M;
    /// Where `a` or `b` is NaN (one compare for two vectors).
    fn either_nan(self, a: Self::V, b: Self::V) -> Self::M;
    /// The lanes of `a` and those of `b`.
    fn union(self, a: Self::M, b: Self::M) -> Self::M;
    /// Whether `m` holds any lane.
    fn any(self, m: Self::M) -> bool;
    /// `if a > b { a } else { b }`: `b` where either is NaN, and of two
    /// equal values (`-0.0` and `0.0`) `b` (x86's `maxps`).
    fn max(self, a: Self::V, b: Self::V) -> Self::V;
    /// `if a < b { a } else { b }`: `b` where either is NaN (x86's
    /// `minps`).
    fn min(self, a: Self::V, b: Self::V) -> Self::V;
    /// `yes` in the lanes of `m`, `no` in the others.
    fn select(self, m: Self::M, yes: Self::V, no: Self::V) -> Self::V;

    /// Lane `l` from `p + l` for the lanes of `m`, zero in the others
    /// (which are not accessed).
    ///
    /// # Safety
    /// `p + l` is readable for every lane `l` of `m`.
    unsafe fn load(self, p: *const f32, m: Self::M) -> Self::V;
    /// Lane `l` of `x` to `p + l` for the lanes of `m` (nothing else is
    /// written).
    ///
    /// # Safety
    /// `p + l` is writable for every lane `l` of `m`.
    unsafe fn store(self, p: *mut f32, m: Self::M, x: Self::V);

    /// The even-indexed floats of the `2N` floats `lo` then `hi`.
    fn evens(self, lo: Self::V, hi: Self::V) -> Self::V;
    /// The odd-indexed floats of the `2N` floats `lo` then `hi`.
    fn odds(self, lo: Self::V, hi: Self::V) -> Self::V;
    /// [`Lanes::evens`] and [`Lanes::odds`] of the same `2N` floats.
    fn split(self, lo: Self::V, hi: Self::V) -> [Self::V; 2];
    /// `a` and `b` interleaved, `a0 b0 a1 b1 ...`: its first `N` floats,
    /// then the next `N` (the inverse of [`Lanes::evens`] and
    /// [`Lanes::odds`]).
    fn interleave(self, a: Self::V, b: Self::V) -> [Self::V; 2];
    /// The `N` floats from index 1 of the `2N` floats `a` then `b`: `a`
    /// moved down a lane, `b`'s first float in the last.
    fn shifted(self, a: Self::V, b: Self::V) -> Self::V;
    /// The `N` floats from index `N - 1` of the `2N` floats `a` then `b`:
    /// `a`'s last float, then `b` moved up a lane.
    fn shifted_in(self, a: Self::V, b: Self::V) -> Self::V;
}

/// A body of vector code written once over [`Lanes`], run by
/// [`Lanes::enter`] on the ISA of the lanes given.
pub(in crate::simd) trait LaneKernel {
    /// What the body returns.
    type Output;
    /// The body. Implementations mark it `#[inline(always)]`, so that it
    /// is compiled inside the `#[target_feature]` function of `enter`.
    fn run<L: Lanes>(self, lanes: L) -> Self::Output;
}

/// [`Activation::apply`] on every lane: the same comparisons, as selects
/// (NaN compares false and passes through `Relu` and `Clip`; `-0.0` is not
/// below zero).
#[inline(always)]
pub(in crate::simd) fn activate<L: Lanes>(l: L, x: L::V, act: Activation) -> L::V {
    match act {
        Activation::None => x,
        Activation::Relu => {
            let z = l.splat(0.0);
            l.select(l.lt(x, z), z, x)
        }
        Activation::LeakyRelu { alpha } => {
            let below = l.lt(x, l.splat(0.0));
            l.select(below, l.mul(l.splat(alpha), x), x)
        }
        Activation::Clip { min, max } => {
            let (lo, hi) = (l.splat(min), l.splat(max));
            let v = l.select(l.lt(x, lo), lo, x);
            l.select(l.gt(v, hi), hi, v)
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)]
mod tests {
    use super::*;

    /// Every [`Lanes`] operation on known values, against the scalar
    /// definitions: the lanes of 32 floats in, what each method gives out.
    struct Check;

    impl LaneKernel for Check {
        type Output = ();
        #[inline(always)]
        fn run<L: Lanes>(self, l: L) {
            let n = L::N;
            assert!(n <= 16);
            let src: [f32; 32] = core::array::from_fn(|i| i as f32 * 0.5 - 3.0);
            let all = l.below(n);
            let mut out = [f32::NAN; 64];
            // SAFETY (loads and stores below): at most `2N <= 32` floats from
            // `src` and `4N <= 64` to `out`, whatever the masks.
            let (lo, hi) = unsafe { (l.load(src.as_ptr(), all), l.load(src.as_ptr().add(n), all)) };
            let put = |out: &mut [f32; 64], at: usize, x: L::V| unsafe {
                l.store(out.as_mut_ptr().add(at), all, x)
            };
            put(&mut out, 0, l.evens(lo, hi));
            put(&mut out, n, l.odds(lo, hi));
            let [e, o] = l.split(lo, hi);
            put(&mut out, 2 * n, e);
            put(&mut out, 3 * n, o);
            for i in 0..n {
                assert_eq!(out[i], src[2 * i], "evens, lane {i} of {n}");
                assert_eq!(out[n + i], src[2 * i + 1], "odds, lane {i} of {n}");
                assert_eq!(out[2 * n + i], src[2 * i], "split evens, lane {i} of {n}");
                assert_eq!(out[3 * n + i], src[2 * i + 1], "split odds, lane {i} of {n}");
            }
            let [a, b] = l.interleave(l.evens(lo, hi), l.odds(lo, hi));
            put(&mut out, 0, a);
            put(&mut out, n, b);
            assert_eq!(out[..2 * n], src[..2 * n], "interleave of {n}");
            put(&mut out, 0, l.shifted(lo, hi));
            assert_eq!(out[..n], src[1..n + 1], "shifted of {n}");
            put(&mut out, 0, l.shifted_in(lo, hi));
            assert_eq!(out[..n], src[n - 1..2 * n - 1], "shifted in of {n}");
            // `max` and `is_nan` on every pair of NaNs (two payloads), signed
            // zeros, infinities and numbers, bit for bit.
            let sp = [f32::NAN, -0.0, 0.0, 1.5, -f32::NAN, f32::NEG_INFINITY, f32::INFINITY, -2.0];
            for rot in 0..sp.len() {
                let a: [f32; 16] = core::array::from_fn(|i| sp[i % sp.len()]);
                let b: [f32; 16] = core::array::from_fn(|i| sp[(i + rot) % sp.len()]);
                // SAFETY: as above, `N <= 16` floats from each.
                let (va, vb) = unsafe { (l.load(a.as_ptr(), all), l.load(b.as_ptr(), all)) };
                put(&mut out, 0, l.max(va, vb));
                put(&mut out, n, l.select(l.is_nan(va), l.splat(1.0), l.splat(0.0)));
                for i in 0..n {
                    let want = if a[i] > b[i] { a[i] } else { b[i] };
                    assert_eq!(out[i].to_bits(), want.to_bits(), "max({}, {})", a[i], b[i]);
                    assert_eq!(out[n + i], if a[i].is_nan() { 1.0 } else { 0.0 }, "{}", a[i]);
                }
                put(&mut out, 0, l.min(va, vb));
                put(&mut out, n, l.select(l.either_nan(va, vb), l.splat(1.0), l.splat(0.0)));
                for i in 0..n {
                    let want = if a[i] < b[i] { a[i] } else { b[i] };
                    assert_eq!(out[i].to_bits(), want.to_bits(), "min({}, {})", a[i], b[i]);
                    let either = a[i].is_nan() || b[i].is_nan();
                    assert_eq!(out[n + i], if either { 1.0 } else { 0.0 }, "{} {}", a[i], b[i]);
                }
            }
            // Unions of lane sets, and whether a set holds any lane.
            let ni = n as isize;
            for (a, b) in
                [((0, 0), (0, 0)), ((0, 2), (5, 7)), ((1, 4), (3, ni)), ((0, 0), (ni - 1, ni))]
            {
                let m = l.union(l.between(a.0, a.1), l.between(b.0, b.1));
                put(&mut out, 0, l.select(m, l.splat(1.0), l.splat(0.0)));
                let mut any = false;
                for (i, &got) in out.iter().enumerate().take(n) {
                    let inside =
                        (a.0..a.1).contains(&(i as isize)) || (b.0..b.1).contains(&(i as isize));
                    assert_eq!(got, if inside { 1.0 } else { 0.0 }, "{a:?} | {b:?}: {i}");
                    any |= inside;
                }
                assert_eq!(l.any(m), any, "{a:?} | {b:?}");
            }
            // Arithmetic, comparisons and selects.
            let two = l.splat(2.0);
            put(&mut out, 0, l.add(lo, two));
            put(&mut out, n, l.sub(lo, two));
            put(&mut out, 2 * n, l.mul(lo, two));
            put(&mut out, 3 * n, l.select(l.lt(lo, two), lo, l.splat(9.0)));
            for i in 0..n {
                let x = src[i];
                assert_eq!(out[i], x + 2.0);
                assert_eq!(out[n + i], x - 2.0);
                assert_eq!(out[2 * n + i], x * 2.0);
                assert_eq!(out[3 * n + i], if x < 2.0 { x } else { 9.0 });
            }
            put(&mut out, 0, l.select(l.gt(lo, two), lo, l.splat(9.0)));
            let nan = l.splat(f32::NAN);
            put(&mut out, n, l.select(l.lt(nan, two), two, l.splat(1.0)));
            put(&mut out, 2 * n, l.select(l.gt(nan, two), two, l.splat(1.0)));
            for i in 0..n {
                assert_eq!(out[i], if src[i] > 2.0 { src[i] } else { 9.0 });
                assert_eq!([out[n + i], out[2 * n + i]], [1.0, 1.0], "NaN compares false");
            }
            // Masks: loads read zero and stores leave alone the lanes out of
            // the mask.
            let ni = n as isize;
            for (lo_l, hi_l) in [(0, 0), (0, 3), (2, 5), (-4, 2), (3, ni + 7), (-9, -1), (5, 2)] {
                let m = l.between(lo_l, hi_l);
                let keep = |i: usize| (lo_l..hi_l).contains(&(i as isize));
                // SAFETY: as above.
                let got = unsafe { l.load(src.as_ptr(), m) };
                let mut row = [7.0f32; 64];
                // SAFETY: as above.
                unsafe { l.store(row.as_mut_ptr(), m, got) };
                for (i, &r) in row.iter().enumerate().take(n) {
                    assert_eq!(r, if keep(i) { src[i] } else { 7.0 }, "{lo_l}..{hi_l}: {i}");
                }
                assert!(row[n..].iter().all(|&r| r == 7.0));
            }
            for k in [0, 1, n - 1, n, n + 5, usize::MAX] {
                let mut row = [7.0f32; 64];
                // SAFETY: as above.
                unsafe { l.store(row.as_mut_ptr(), l.below(k), l.splat(1.0)) };
                let want = k.min(n);
                assert!(row[..want].iter().all(|&r| r == 1.0), "below {k}");
                assert!(row[want..].iter().all(|&r| r == 7.0), "below {k}");
            }
            // The activations, against `Activation::apply`.
            let acts = [
                Activation::None,
                Activation::Relu,
                Activation::LeakyRelu { alpha: 0.3 },
                Activation::Clip { min: -1.25, max: 2.0 },
            ];
            let odd = [f32::NAN, -0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY, -1.25, 2.0, 1e-40];
            let mut vals = src;
            vals[..odd.len()].copy_from_slice(&odd);
            for act in acts {
                // SAFETY: as above.
                let x = unsafe { l.load(vals.as_ptr(), all) };
                put(&mut out, 0, activate(l, x, act));
                for i in 0..n {
                    let want = act.apply(vals[i]);
                    assert_eq!(out[i].to_bits(), want.to_bits(), "{act:?} on {}", vals[i]);
                }
            }
        }
    }

    #[test]
    fn every_operation_matches_its_scalar_definition() {
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        {
            if let Some(cpu) = crate::simd::tests::avx2() {
                cpu.enter(Check);
            }
            if let Some(cpu) = crate::simd::tests::avx512() {
                cpu.enter(Check);
            }
        }
    }
}
