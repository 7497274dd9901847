//! Quantized addition and average pooling, portably.

use crate::int8::{AddScales, Q8, QOut, QPool, average};
use crate::shape::MAX_RANK;

/// `int8::qadd` (arguments checked by the caller).
pub(crate) fn add<T: Q8>(
    a: &[T],
    a_zero: i32,
    b: &[T],
    b_zero: i32,
    s: &AddScales,
    y: &mut [T],
    out: &QOut,
) {
    let sh = s.left_shift;
    for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
        let da = s.a.apply((a.get() - a_zero) << sh);
        let db = s.b.apply((b.get() - b_zero) << sh);
        let v = s.out.apply(da + db);
        *y = T::saturate(out.zero.saturating_add(v).clamp(out.min, out.max));
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
