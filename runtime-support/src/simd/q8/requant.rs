//! The output stage of a product: per output channel, the constant added
//! to the raw sum (the bias, less the zero point times the weights' sum)
//! and the [`Scale`] in the form the vector kernels apply.
//!
//! The vector form of [`Scale::apply`] (`t = 31 + shift`, `v` the sum):
//! with `lsh = max(32 - t, 0)` and `rsh = max(t - 32, 0)`,
//! `r = ((clamp(v, lo, hi) << lsh) * mult + 2^(31 + rsh)) >> 32 >> rsh`
//! (a 64-bit product, its high half, an arithmetic shift), where `[lo,
//! hi]` is `[-2^(t-1), 2^(t-1) - 1]` when `lsh > 0` and all of `i32`
//! otherwise. Within the clamp this is `floor((v mult + 2^(t-1)) / 2^t)`
//! exactly (floor shifts compose). Outside it, `|v mult / 2^t|` is at
//! least `2^29` (`mult >= 2^30`), and so is the clamped result's, with
//! the same sign (`t >= 2` keeps `hi >= 1`): both saturate any output
//! range, `|zero| + 255 < 2^29`, alike.

use crate::int8::{Q8, Requant, Scale};

#[cfg(onnx_codegen_arm_dsp)]
#[allow(unsafe_code)]
mod dsp;

/// One channel's output stage, see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Chan {
    /// Added (wrapping) to the raw sum.
    pub add: i32,
    /// `Scale::mult`.
    pub mult: i32,
    /// `Scale::total_shift`.
    pub t: u32,
    /// Left shift before the product.
    pub lsh: u32,
    /// Right shift of the high half.
    pub rsh: u32,
    /// Clamp before the left shift.
    pub lo: i32,
    /// Clamp before the left shift.
    pub hi: i32,
    /// `2^(31 + rsh)`.
    pub round: i64,
}

impl Chan {
    /// The stage adding `add` and applying `s` (a valid scale).
    #[inline]
    pub(crate) fn new(add: i32, s: Scale) -> Chan {
        let t = s.total_shift().max(2);
        let (lsh, rsh) = (32u32.saturating_sub(t), t.saturating_sub(32));
        let (lo, hi) =
            if lsh > 0 { (-(1 << (t - 1)), (1 << (t - 1)) - 1) } else { (i32::MIN, i32::MAX) };
        Chan { add, mult: s.mult, t, lsh, rsh, lo, hi, round: 1i64 << (31 + rsh) }
    }

    /// `s.apply(raw + add)`, the reference way.
    #[inline(always)]
    pub(crate) fn apply(&self, raw: i32) -> i32 {
        Scale { mult: self.mult, shift: self.t as i32 - 31 }.apply(raw.wrapping_add(self.add))
    }

    /// `s.apply(raw + add)` the cheap way where the shift allows: for `t >=
    /// 33` with `h` the high word of the 64-bit product `v mult`,
    /// `floor((v mult + 2^(t-1)) / 2^t) = (h + 2^(t-33)) >> (t - 32)`
    /// (the low word adds less than one unit before a floor by a whole
    /// power of two), one `SMMUL`, an add and a shift on a 32-bit core;
    /// `|h| <= 2^30`, so nothing overflows. Smaller shifts take the
    /// reference way. Equal to [`Chan::apply`] for every input.
    #[inline(always)]
    pub(crate) fn apply_scalar(&self, raw: i32) -> i32 {
        let v = raw.wrapping_add(self.add);
        if self.t >= 33 {
            let h = ((i64::from(v) * i64::from(self.mult)) >> 32) as i32;
            (h + (1 << (self.t - 33))) >> (self.t - 32)
        } else {
            self.apply(raw)
        }
    }

    /// The vector form (module documentation), in scalars: what the SIMD
    /// kernels compute lane by lane.
    #[cfg(test)]
    pub(crate) fn apply_vector_form(&self, raw: i32) -> i32 {
        let v = raw.wrapping_add(self.add).clamp(self.lo, self.hi) << self.lsh;
        let x = i64::from(v) * i64::from(self.mult) + self.round;
        ((x >> 32) as i32) >> self.rsh
    }
}

/// Sixteen channels' stages, by field (one vector each).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Chan16 {
    pub add: [i32; 16],
    pub mult: [i32; 16],
    pub lsh: [u32; 16],
    pub rsh: [u32; 16],
    pub lo: [i32; 16],
    pub hi: [i32; 16],
    pub round: [i64; 16],
    /// For the portable path.
    pub t: [u32; 16],
}

impl Chan16 {
    /// The stages of channels `j0..j0 + 16` (past the last channel, `n`,
    /// copies of channel 0's, harmless).
    #[inline]
    pub(crate) fn new(j0: usize, n: usize, add: impl Fn(usize) -> i32, rq: &Requant<'_>) -> Chan16 {
        let mut c = Chan16::default();
        for l in 0..16 {
            let j = if j0 + l < n { j0 + l } else { 0 };
            let s = Chan::new(add(j), rq.scale(j));
            c.add[l] = s.add;
            c.mult[l] = s.mult;
            c.lsh[l] = s.lsh;
            c.rsh[l] = s.rsh;
            c.lo[l] = s.lo;
            c.hi[l] = s.hi;
            c.round[l] = s.round;
            c.t[l] = s.t;
        }
        c
    }

    /// Lane `l`'s stage.
    #[inline(always)]
    pub(crate) fn lane(&self, l: usize) -> Chan {
        Chan {
            add: self.add[l],
            mult: self.mult[l],
            t: self.t[l],
            lsh: self.lsh[l],
            rsh: self.rsh[l],
            lo: self.lo[l],
            hi: self.hi[l],
            round: self.round[l],
        }
    }
}

/// The output's zero point and clamp.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OutRange {
    pub zero: i32,
    pub min: i32,
    pub max: i32,
}

impl OutRange {
    pub(crate) fn of(rq: &Requant<'_>) -> OutRange {
        OutRange { zero: rq.zero, min: rq.min, max: rq.max }
    }

    /// `clamp(zero + r, min, max)` as `Y`.
    #[inline(always)]
    pub(crate) fn put<Y: Q8>(&self, r: i32) -> Y {
        Y::saturate(self.zero.saturating_add(r).clamp(self.min, self.max))
    }
}

/// `dst[c] = out(lane c's stage of acc[c])` for `c < dst.len()` (at most
/// 16), portably.
#[inline]
pub(crate) fn cols_portable<Y: Q8>(acc: &[i32; 16], ch: &Chan16, out: &OutRange, dst: &mut [Y]) {
    for (c, d) in dst.iter_mut().enumerate().take(16) {
        *d = out.put(ch.lane(c).apply_scalar(acc[c]));
    }
}

/// `dst[c] = out(ch's stage of acc[c])` for `c < dst.len()` (at most 16),
/// portably.
#[inline]
pub(crate) fn splat_portable<Y: Q8>(acc: &[i32; 16], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
    splat_row(acc, ch, out, dst);
}

/// `dst[c] = out(ch's stage of acc[c])` for `c < min(dst.len(),
/// acc.len())`: [`Chan::apply_scalar`] with its choices made once for the
/// row, so the loop holds only the stage's constants. A bound of the
/// output range that is `Y`'s own is left to `Y::saturate` (one `SSAT` or
/// `USAT` on Arm): a fused ReLU costs one compare, no fusion none.
#[inline]
pub(crate) fn splat_row<Y: Q8>(acc: &[i32], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
    debug_assert!(Y::MIN <= out.min && out.min <= out.max && out.max <= Y::MAX);
    match (out.min > Y::MIN, out.max < Y::MAX) {
        (false, false) => stage_row::<Y, false, false>(acc, ch, out, dst),
        (true, false) => stage_row::<Y, true, false>(acc, ch, out, dst),
        (false, true) => stage_row::<Y, false, true>(acc, ch, out, dst),
        (true, true) => stage_row::<Y, true, true>(acc, ch, out, dst),
    }
}

/// [`splat_row`] with the bounds to apply beside `Y::saturate` fixed:
/// `LO` for `out.min`, `HI` for `out.max`.
#[inline(always)]
fn stage_row<Y: Q8, const LO: bool, const HI: bool>(
    acc: &[i32],
    ch: &Chan,
    out: &OutRange,
    dst: &mut [Y],
) {
    let put = |r: i32| {
        let mut v = out.zero.saturating_add(r);
        if LO {
            v = v.max(out.min);
        }
        if HI {
            v = v.min(out.max);
        }
        Y::saturate(v)
    };
    if ch.t >= 33 {
        let (add, mult, half, sh) = (ch.add, i64::from(ch.mult), 1i32 << (ch.t - 33), ch.t - 32);
        // The zero point folded into the rounding term, `(h + half + (zero
        // << sh)) >> sh = ((h + half) >> sh) + zero` exactly, where that sum
        // stays within `i32` (`|h| <= 2^30`): then the clamps are the only
        // steps left, and the bounds that are `Y`'s own are constants (one
        // `SSAT` or `USAT` on Arm). `half + |zero| 2^sh < 2^30` is `2 |zero|
        // + 1 < 2^(31 - sh)` (`half = 2^(sh - 1)`, `1 <= sh <= 30`), tested
        // without 64-bit steps (they were most of a short row's cost on a
        // 32-bit core).
        if (2 * out.zero.unsigned_abs() + 1) >> (31 - sh) == 0 {
            let c = half + (out.zero << sh);
            let bytes = Y::as_bytes_mut(dst);
            // The Arm DSP form takes the whole quads of a row with no
            // bound of its own.
            #[cfg(onnx_codegen_arm_dsp)]
            let done =
                if !LO && !HI { dsp::high_quads::<Y>(acc, bytes, add, ch.mult, c, sh) } else { 0 };
            #[cfg(not(onnx_codegen_arm_dsp))]
            let done = 0;
            // Both within `[Y::MIN, Y::MAX]` (as the caller's are), so is
            // every result: its low byte is `Y`'s bits.
            let lo = if LO { out.min.min(Y::MAX) } else { Y::MIN };
            let hi = if HI { out.max.max(Y::MIN) } else { Y::MAX };
            for (d, &a) in bytes[done..].iter_mut().zip(&acc[done..]) {
                let h = ((i64::from(a.wrapping_add(add)) * mult) >> 32) as i32;
                *d = ((h + c) >> sh).max(lo).min(hi) as u8;
            }
            return;
        }
        for (d, &a) in dst.iter_mut().zip(acc) {
            let h = ((i64::from(a.wrapping_add(add)) * mult) >> 32) as i32;
            *d = put((h + half) >> sh);
        }
    } else {
        for (d, &a) in dst.iter_mut().zip(acc) {
            *d = put(ch.apply(a));
        }
    }
}

/// [`splat_row`] in the vector form (module documentation), sixteen
/// lanes at a time: every step is a lane operation (a 64-bit product of
/// two sign-extended `i32`s, shifts, clamps), so under
/// `crate::simd::vectorize_wide` the loop becomes vector code. Equal to
/// [`splat_row`] for every input: the vector form differs from
/// [`Chan::apply`] only beyond `2^29`, where both saturate the output.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[inline(always)]
pub(crate) fn splat_lanes<Y: Q8>(acc: &[i32], ch: &Chan, out: &OutRange, dst: &mut [Y]) {
    const L: usize = 16;
    let n = dst.len().min(acc.len());
    let whole = n - n % L;
    let (add, lo, hi, lsh, rsh) = (ch.add, ch.lo, ch.hi, ch.lsh, ch.rsh);
    let (mult, round) = (i64::from(ch.mult), ch.round);
    for (d, a) in dst[..whole].chunks_exact_mut(L).zip(acc[..whole].chunks_exact(L)) {
        let mut v = [0i32; L];
        for (v, &a) in v.iter_mut().zip(a) {
            let x = i64::from(a.wrapping_add(add).clamp(lo, hi) << lsh) * mult + round;
            // `|r| <= 2^30` and `|zero| <= 2^15`: the sum cannot overflow.
            *v = (out.zero + (((x >> 32) as i32) >> rsh)).clamp(out.min, out.max);
        }
        for (d, &v) in d.iter_mut().zip(&v) {
            *d = Y::saturate(v);
        }
    }
    splat_row(&acc[whole..n], ch, out, &mut dst[whole..n]);
}
