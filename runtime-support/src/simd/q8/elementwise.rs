//! Quantized addition and average pooling, portably.

use crate::int8::{AddScales, HighScale, Q8, QOut, QPool, average};
use crate::shape::MAX_RANK;

/// One quantized sum before its saturation to `T`: `out.zero +
/// clamp(s.out(s.a((a - a_zero) << sh) + s.b((b - b_zero) << sh)))`, the
/// clamp to the output range relative to its zero point (`|zero| <=
/// MAX_ZERO` keeps the bounds in range, so lanes need no saturating add).
/// A function, not a closure, so that it is compiled for the vector unit
/// of the loop it is inlined into.
#[inline(always)]
fn sum<T: Q8>(a: T, a_zero: i32, b: T, b_zero: i32, s: &AddScales, out: &QOut) -> i32 {
    let sh = s.left_shift;
    let da = s.a.apply((a.get() - a_zero) << sh);
    let db = s.b.apply((b.get() - b_zero) << sh);
    out.zero + s.out.apply(da.wrapping_add(db)).clamp(out.min - out.zero, out.max - out.zero)
}

/// `int8::qadd` (arguments checked by the caller), compiled for the widest
/// vector unit: the loop is [`Scale::apply`] three times in 64-bit lanes,
/// which vectorises as it stands.
pub(crate) fn add<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    s: &AddScales,
    y: &mut [T],
    out: &QOut,
) {
    crate::simd::vectorize_wide(Add { a, a_zero, b, b_zero, s, y, out });
}

struct Add<'a, T> {
    a: &'a [T],
    a_zero: i32,
    b: &'a [T],
    b_zero: i32,
    s: &'a AddScales,
    y: &'a mut [T],
    out: &'a QOut,
}

impl<T: Q8> crate::simd::Vectorize for Add<'_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let Add { a, a_zero, b, b_zero, s, y, out } = self;
        let n = y.len().min(a.len()).min(b.len());
        // A 32-bit core without a vector unit: each input's term by a
        // table of its 256 values, the sum's scale as a high word.
        #[cfg(target_arch = "arm")]
        if add_by_tables(a, a_zero, b, b_zero, s, y, out) {
            return;
        }
        const CHUNK: usize = 16;
        let whole = n - n % CHUNK;
        for ((y, a), b) in y[..whole]
            .chunks_exact_mut(CHUNK)
            .zip(a[..whole].chunks_exact(CHUNK))
            .zip(b[..whole].chunks_exact(CHUNK))
        {
            let mut v = [0i32; CHUNK];
            for (i, v) in v.iter_mut().enumerate() {
                *v = sum(a[i], a_zero, b[i], b_zero, s, out);
            }
            for (y, &v) in y.iter_mut().zip(&v) {
                *y = T::saturate(v);
            }
        }
        for ((y, &a), &b) in y[whole..n].iter_mut().zip(&a[whole..n]).zip(&b[whole..n]) {
            *y = T::saturate(sum(a, a_zero, b, b_zero, s, out));
        }
    }
}

/// [`add`] by tables, for a core without a vector unit (32-bit Arm): an
/// input's term `scale.apply((v - zero) << left_shift)` depends on its
/// byte alone, so each input's 256 terms are computed once (2 KiB of stack
/// for both) and an element takes two loads from them, an add and the
/// output scale as a [`HighScale`] (one `SMLAL` and a shift): about 16
/// instructions on a Cortex-M4 where the three scales took 47. `false`
/// (nothing written) when the output scale has no `HighScale` form.
/// Exactly [`add`]'s results.
#[cfg_attr(not(target_arch = "arm"), allow(dead_code))]
pub(crate) fn add_by_tables<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    s: &AddScales,
    y: &mut [T],
    out: &QOut,
) -> bool {
    let Some(ho) = HighScale::of(s.out) else { return false };
    let sh = s.left_shift;
    let table = |zero: i32, sc: crate::int8::Scale| -> [i32; 256] {
        core::array::from_fn(|bits| sc.apply((T::of_bits(bits as u8) - zero) << sh))
    };
    let (ta, tb) = (table(a_zero, s.a), table(b_zero, s.b));
    let (lo, hi) = (out.min - out.zero, out.max - out.zero);
    let n = y.len().min(a.len()).min(b.len());
    let rows = y[..n].iter_mut().zip(&a[..n]).zip(&b[..n]);
    if ho.t31() {
        for ((y, &a), &b) in rows {
            let v = ta[usize::from(a.bits())].wrapping_add(tb[usize::from(b.bits())]);
            *y = T::saturate(out.zero + ho.apply_at::<true>(v).clamp(lo, hi));
        }
    } else {
        for ((y, &a), &b) in rows {
            let v = ta[usize::from(a.bits())].wrapping_add(tb[usize::from(b.bits())]);
            *y = T::saturate(out.zero + ho.apply_at::<false>(v).clamp(lo, hi));
        }
    }
    true
}

/// A residual `Add` applied to a convolution's output run by run
/// (`int8::qconv_add`): `y[i] = add(a[i], y[i])`, `a` the run the output
/// stage wrote, `y` the residual's run, overwritten by the sum. Exactly
/// [`add`]'s results; on 32-bit Arm by [`add_by_tables`]'s tables, built
/// once per convolution.
pub(crate) struct AddRuns<T> {
    a_zero: i32,
    b_zero: i32,
    s: AddScales,
    out: QOut,
    /// The two inputs' terms and the output scale, when it has a
    /// `HighScale` form (filled in place: 2 KiB of stack, once).
    #[cfg(target_arch = "arm")]
    ta: [i32; 256],
    #[cfg(target_arch = "arm")]
    tb: [i32; 256],
    #[cfg(target_arch = "arm")]
    ho: Option<HighScale>,
    _elem: core::marker::PhantomData<T>,
}

impl<T: Q8> AddRuns<T> {
    pub(crate) fn new(a_zero: i32, b_zero: i32, s: &AddScales, out: &QOut) -> AddRuns<T> {
        #[allow(unused_mut)]
        let mut runs = AddRuns {
            a_zero,
            b_zero,
            s: *s,
            out: *out,
            #[cfg(target_arch = "arm")]
            ta: [0; 256],
            #[cfg(target_arch = "arm")]
            tb: [0; 256],
            #[cfg(target_arch = "arm")]
            ho: HighScale::of(s.out),
            _elem: core::marker::PhantomData,
        };
        #[cfg(target_arch = "arm")]
        if runs.ho.is_some() {
            for bits in 0..=255u8 {
                let v = T::of_bits(bits);
                runs.ta[usize::from(bits)] = s.a.apply((v - a_zero) << s.left_shift);
                runs.tb[usize::from(bits)] = s.b.apply((v - b_zero) << s.left_shift);
            }
        }
        runs
    }

    #[inline(always)]
    pub(crate) fn apply(&self, a: &[T], y: &mut [T]) {
        #[cfg(target_arch = "arm")]
        if let Some(ho) = &self.ho {
            let out = &self.out;
            let (lo, hi) = (out.min - out.zero, out.max - out.zero);
            let (ta, tb) = (&self.ta, &self.tb);
            for (y, &a) in y.iter_mut().zip(a) {
                let v = ta[usize::from(a.bits())].wrapping_add(tb[usize::from(y.bits())]);
                let v = if ho.t31() { ho.apply_at::<true>(v) } else { ho.apply_at::<false>(v) };
                *y = T::saturate(out.zero + v.clamp(lo, hi));
            }
            return;
        }
        crate::simd::vectorize_wide(AddInPlace { runs: self, a, y });
    }
}

/// [`AddRuns::apply`] without tables: compiled for the widest vector unit
/// (the convolution driver's closures that call it are functions of their
/// own, compiled for the baseline: element by element there, the loop
/// took half of an x86-64 ResNet-8's time).
struct AddInPlace<'a, 'b, T> {
    runs: &'a AddRuns<T>,
    a: &'b [T],
    y: &'b mut [T],
}

impl<T: Q8> crate::simd::Vectorize for AddInPlace<'_, '_, T> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let AddInPlace { runs, a, y } = self;
        let (out, s) = (&runs.out, &runs.s);
        let (a_zero, b_zero) = (runs.a_zero, runs.b_zero);
        // Sixteen sums at a time into an array, then stored: the form that
        // vectorises, as `add`'s (no closure: it would be a function of its
        // own, compiled for the baseline).
        const CHUNK: usize = 16;
        let n = y.len().min(a.len());
        let whole = n - n % CHUNK;
        for (y, a) in y[..whole].chunks_exact_mut(CHUNK).zip(a[..whole].chunks_exact(CHUNK)) {
            let mut v = [0i32; CHUNK];
            for (i, v) in v.iter_mut().enumerate() {
                *v = sum(a[i], a_zero, y[i], b_zero, s, out);
            }
            for (y, &v) in y.iter_mut().zip(&v) {
                *y = T::saturate(v);
            }
        }
        for (y, &a) in y[whole..n].iter_mut().zip(&a[whole..n]) {
            *y = T::saturate(sum(a, a_zero, *y, b_zero, s, out));
        }
    }
}

/// The sum of a plane's values: in `i32` while that cannot overflow (up
/// to 2^23 values of magnitude at most 2^8), a sum that vectorises; in
/// `i64` beyond.
#[inline]
pub(crate) fn plane_sum<T: Q8>(x: &[T]) -> i64 {
    if x.len() <= 1 << 23 {
        i64::from(x.iter().map(|v| v.get()).sum::<i32>())
    } else {
        x.iter().map(|v| i64::from(v.get())).sum()
    }
}

/// `int8::qavgpool` (arguments checked by the caller).
pub(crate) fn avgpool<T: Q8>(p: &QPool<'_>, x: &[T], y: &mut [T], out: &QOut) {
    let w = &p.window;
    let (Ok(in_size), Ok(out_size)) =
        (crate::shape::numel(w.in_dims), crate::shape::numel(w.out_dims))
    else {
        return;
    };
    let rank = w.in_dims.len();
    if rank == 2 && w.pads_begin.iter().chain(w.pads_end).all(|&v| v == 0) {
        return avgpool_2d_unpadded(p, x, y, out, in_size, out_size);
    }
    let mut opos = [0usize; MAX_RANK];
    let opos = &mut opos[..rank];
    for (xp, yp) in x.chunks_exact(in_size.max(1)).zip(y.chunks_exact_mut(out_size.max(1))) {
        opos.fill(0);
        for yv in yp.iter_mut() {
            let (mut r, mut inside, mut padded) = (0i64, 0usize, 0usize);
            w.taps(opos, |_, at| {
                padded += 1;
                if let Some(at) = at {
                    inside += 1;
                    r += i64::from(xp[at].get() - p.x_zero);
                }
            });
            let count = if p.count_include_pad { padded } else { inside };
            *yv = T::saturate(average(r, count, p.scale, out));
            crate::shape::next_index(opos, w.out_dims);
        }
    }
}

/// [`avgpool`] of a 2-D window without padding: every window lies inside
/// its plane, so its taps are read row by row with no test (each row's a
/// contiguous run when the window is not dilated), and the zero point
/// comes off once per window.
fn avgpool_2d_unpadded<T: Q8>(
    p: &QPool<'_>,
    x: &[T],
    y: &mut [T],
    out: &QOut,
    in_size: usize,
    out_size: usize,
) {
    let w = &p.window;
    let (iw, ow) = (w.in_dims[1], w.out_dims[1]);
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (sh, sw) = (w.strides[0], w.strides[1]);
    let (dh, dw) = (w.dilations[0], w.dilations[1]);
    let count = kh * kw;
    let zero_sum = i64::from(p.x_zero) * count as i64;
    // A window over the whole plane (a global pool written as a plain
    // one, as exporters do): one contiguous sum per plane.
    if (kh, kw, dh, dw) == (w.in_dims[0], iw, 1, 1) && out_size == 1 && in_size > 0 {
        for (xp, yv) in x.chunks_exact(in_size).zip(y.iter_mut()) {
            *yv = T::saturate(average(plane_sum(xp) - zero_sum, count, p.scale, out));
        }
        return;
    }
    for (xp, yp) in x.chunks_exact(in_size.max(1)).zip(y.chunks_exact_mut(out_size.max(1))) {
        for (oy, yr) in yp.chunks_exact_mut(ow.max(1)).enumerate() {
            for (ox, yv) in yr.iter_mut().enumerate() {
                let mut r = 0i64;
                for ky in 0..kh {
                    let row = &xp[(oy * sh + ky * dh) * iw + ox * sw..];
                    r += if dw == 1 {
                        row[..kw].iter().map(|v| i64::from(v.get())).sum::<i64>()
                    } else {
                        row.iter().step_by(dw).take(kw).map(|v| i64::from(v.get())).sum::<i64>()
                    };
                }
                *yv = T::saturate(average(r - zero_sum, count, p.scale, out));
            }
        }
    }
}
