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
