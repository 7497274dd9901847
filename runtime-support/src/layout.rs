//! Data movement: strided copy, Transpose, Concat, Split, Slice, Gather,
//! GatherElements, Expand, Pad, Tile, DepthToSpace, SpaceToDepth.
//!
//! All of these only move elements, so they serve every element type
//! (including f16 and booleans). They read `X` and write `Y` where
//! `X: MoveTo<Y>`: the same type, or a boolean moving between its two
//! storages (`bool` in the caller's buffers, `u8` in the arena), so one call
//! can read a graph input and write the arena. Outputs are contiguous
//! row-major; most ops are a [`strided_copy`] with strides the generator (or
//! the op's helper here) derives from the shapes.

use crate::norm::AxisShape;
use crate::num::Int;
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, next_index, numel, walk};
use crate::{Error, Result, ensure};

/// An element that can be stored into a `Y` slot: every `Copy` type into
/// itself, and a boolean between `bool` and its arena form `u8` (0 or 1; any
/// nonzero byte reads as true).
pub trait MoveTo<Y>: Copy {
    /// The element as a `Y`.
    fn move_to(self) -> Y;
}

impl<T: Copy> MoveTo<T> for T {
    #[inline]
    fn move_to(self) -> T {
        self
    }
}

impl MoveTo<u8> for bool {
    #[inline]
    fn move_to(self) -> u8 {
        u8::from(self)
    }
}

impl MoveTo<bool> for u8 {
    #[inline]
    fn move_to(self) -> bool {
        self != 0
    }
}

/// Copies the elements of `src` visited by walking `shape` with `src_strides`
/// from `src_offset` into contiguous `dst` (of `numel(shape)` elements).
/// Negative strides walk backwards; 0 strides repeat (broadcast).
pub fn strided_copy<X: MoveTo<Y>, Y>(
    shape: &[usize],
    src_strides: &[isize],
    src_offset: usize,
    src: &[X],
    dst: &mut [Y],
) -> Result {
    ensure(dst.len() == numel(shape)?, Error::ShapeMismatch)?;
    check_strided(shape, src_strides, src_offset, src.len())?;
    let mut o = 0;
    walk(shape, [src_strides], [src_offset], |[i]| {
        dst[o] = src[i].move_to();
        o += 1;
    });
    Ok(())
}

/// ONNX `Transpose`: `y` has dims `shape[perm[i]]`.
pub fn transpose<X: MoveTo<Y>, Y>(shape: &[usize], perm: &[usize], x: &[X], y: &mut [Y]) -> Result {
    let r = shape.len();
    ensure(r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(perm.len() == r, Error::InvalidParams)?;
    let mut seen = [false; MAX_RANK];
    for &p in perm {
        ensure(p < r && !seen[p], Error::InvalidParams)?;
        seen[p] = true;
    }
    let mut xs = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut xs[..r])?;
    let mut out_shape = [0usize; MAX_RANK];
    let mut strides = [0isize; MAX_RANK];
    for (i, &p) in perm.iter().enumerate() {
        out_shape[i] = shape[p];
        strides[i] = xs[p];
    }
    ensure(x.len() == numel(shape)?, Error::ShapeMismatch)?;
    ensure(y.len() == x.len(), Error::ShapeMismatch)?;
    if x.is_empty() {
        return Ok(());
    }
    // Input axes that stay neighbours in the output merge into one (axes of
    // one element go anywhere).
    let mut dims = [0usize; MAX_RANK];
    let mut order = [0usize; MAX_RANK];
    let mut n = 0;
    let mut last = None;
    for &p in perm.iter().filter(|&&p| shape[p] > 1) {
        if last.is_some_and(|l: usize| p > l && (l + 1..p).all(|a| shape[a] == 1)) {
            dims[n - 1] *= shape[p];
        } else {
            dims[n] = shape[p];
            order[n] = p;
            n += 1;
        }
        last = Some(p);
    }
    // `[b, m, k]` to `[b, k, m]` (the channels of NCHW to the last axis or
    // back): tiles, so that both sides move in whole cache lines.
    let in_order = |a: usize, b: usize| order[a] < order[b];
    if n == 3 && in_order(0, 2) && in_order(2, 1) || n == 2 && in_order(1, 0) {
        let (k, m) = (dims[n - 2], dims[n - 1]);
        for (xb, yb) in x.chunks_exact(m * k).zip(y.chunks_exact_mut(m * k)) {
            transpose_tiles(m, k, xb, yb);
        }
        return Ok(());
    }
    strided_copy(&out_shape[..r], &strides[..r], 0, x, y)
}

/// `y = x^T` for `x` of `m` rows and `k` columns, in tiles of 16 rows by
/// 16 columns: each tile's rows read whole, its columns written through a
/// small buffer as whole runs.
fn transpose_tiles<X: MoveTo<Y>, Y>(m: usize, k: usize, x: &[X], y: &mut [Y]) {
    const T: usize = 16;
    let Some(&first) = x.first() else { return };
    let mut tile = [[first; T]; T];
    for i0 in (0..m).step_by(T) {
        let h = T.min(m - i0);
        for j0 in (0..k).step_by(T) {
            let w = T.min(k - j0);
            for (i, src) in x[i0 * k..].chunks(k).take(h).enumerate() {
                for (t, &s) in tile.iter_mut().zip(&src[j0..j0 + w]) {
                    t[i] = s;
                }
            }
            for (t, dst) in tile.iter().zip(y[j0 * m..].chunks_mut(m)).take(w) {
                for (d, &v) in dst[i0..i0 + h].iter_mut().zip(t) {
                    *d = v.move_to();
                }
            }
        }
    }
}

/// ONNX `Concat`: every input is `[outer, chunk_i]` (its dims before the axis
/// multiply to `outer`; `chunk_i` is its axis length times the dims after),
/// and `y` is `[outer, sum chunk_i]`. `outer` must be nonzero unless all are empty.
pub fn concat<X: MoveTo<Y>, Y>(outer: usize, inputs: &[&[X]], y: &mut [Y]) -> Result {
    let total: usize = inputs.iter().map(|i| i.len()).sum();
    ensure(y.len() == total, Error::ShapeMismatch)?;
    if total == 0 {
        return Ok(());
    }
    ensure(outer > 0, Error::InvalidParams)?;
    let width = total / outer;
    let mut at = 0;
    for inp in inputs {
        concat_part(outer, width, at, inp, y)?;
        at += inp.len() / outer;
    }
    Ok(())
}

/// One input of a `Concat`: `x`, seen as `[outer, chunk]`, is copied into
/// columns `at..at + chunk` of `y` seen as `[outer, width]`. Calling it once
/// per input lets every input have its own element storage.
pub fn concat_part<X: MoveTo<Y>, Y>(
    outer: usize,
    width: usize,
    at: usize,
    x: &[X],
    y: &mut [Y],
) -> Result {
    ensure(y.len() == outer.checked_mul(width).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    if x.is_empty() {
        return Ok(());
    }
    ensure(outer > 0 && x.len().is_multiple_of(outer), Error::ShapeMismatch)?;
    let c = x.len() / outer;
    ensure(at.checked_add(c).is_some_and(|end| end <= width), Error::ShapeMismatch)?;
    for o in 0..outer {
        let dst = &mut y[o * width + at..o * width + at + c];
        for (d, s) in dst.iter_mut().zip(&x[o * c..(o + 1) * c]) {
            *d = (*s).move_to();
        }
    }
    Ok(())
}

/// ONNX `Split`: the inverse of [`concat()`]; each output is `[outer, chunk_i]`.
pub fn split<X: MoveTo<Y>, Y>(outer: usize, x: &[X], outputs: &mut [&mut [Y]]) -> Result {
    let total: usize = outputs.iter().map(|o| o.len()).sum();
    ensure(x.len() == total, Error::ShapeMismatch)?;
    if total == 0 {
        return Ok(());
    }
    ensure(outer > 0, Error::InvalidParams)?;
    let width = total / outer;
    let mut at = 0;
    for out in outputs.iter_mut() {
        split_part(outer, width, at, x, out)?;
        at += out.len() / outer;
    }
    Ok(())
}

/// One output of a `Split`: columns `at..at + chunk` of `x`, seen as
/// `[outer, width]`, copied into `y` seen as `[outer, chunk]`.
pub fn split_part<X: MoveTo<Y>, Y>(
    outer: usize,
    width: usize,
    at: usize,
    x: &[X],
    y: &mut [Y],
) -> Result {
    ensure(x.len() == outer.checked_mul(width).ok_or(Error::Overflow)?, Error::ShapeMismatch)?;
    if y.is_empty() {
        return Ok(());
    }
    ensure(outer > 0 && y.len().is_multiple_of(outer), Error::ShapeMismatch)?;
    let c = y.len() / outer;
    ensure(at.checked_add(c).is_some_and(|end| end <= width), Error::ShapeMismatch)?;
    for o in 0..outer {
        let src = &x[o * width + at..o * width + at + c];
        for (d, s) in y[o * c..(o + 1) * c].iter_mut().zip(src) {
            *d = (*s).move_to();
        }
    }
    Ok(())
}

/// ONNX `Slice` after normalisation: per axis of `shape`, the first index
/// read (`starts`, already clamped into the axis), the step (nonzero, may be
/// negative) and the output length (`out_shape`). Axes not sliced have start
/// 0, step 1 and their full length.
pub fn slice<X: MoveTo<Y>, Y>(
    shape: &[usize],
    starts: &[usize],
    steps: &[isize],
    out_shape: &[usize],
    x: &[X],
    y: &mut [Y],
) -> Result {
    let r = shape.len();
    ensure(r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(starts.len() == r && steps.len() == r && out_shape.len() == r, Error::InvalidParams)?;
    ensure(x.len() == numel(shape)?, Error::ShapeMismatch)?;
    let mut xs = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut xs[..r])?;
    let mut strides = [0isize; MAX_RANK];
    let mut offset = 0usize;
    for d in 0..r {
        ensure(steps[d] != 0, Error::InvalidParams)?;
        strides[d] = steps[d].checked_mul(xs[d]).ok_or(Error::Overflow)?;
        if out_shape[d] > 0 {
            ensure(starts[d] < shape[d], Error::InvalidParams)?;
            offset += starts[d] * xs[d] as usize;
        }
    }
    if numel(out_shape)? == 0 {
        return strided_copy(out_shape, &strides[..r], 0, x, y);
    }
    strided_copy(out_shape, &strides[..r], offset, x, y)
}

/// Reads an index, wrapping a negative one once; [`Error::IndexOutOfBounds`]
/// outside `-n..n`.
#[inline]
fn resolve<I: Int>(i: I, n: usize) -> Result<usize> {
    let v = i.to_i64().ok_or(Error::IndexOutOfBounds)?;
    let n64 = i64::try_from(n).map_err(|_| Error::Overflow)?;
    let v = if v < 0 { v + n64 } else { v };
    if (0..n64).contains(&v) { Ok(v as usize) } else { Err(Error::IndexOutOfBounds) }
}

/// ONNX `Gather`: `x` seen as `[outer, axis, inner]`, `y` as
/// `[outer, indices.len(), inner]`; negative indices count from the end.
pub fn gather<X: MoveTo<Y>, Y, I: Int>(
    s: AxisShape,
    indices: &[I],
    x: &[X],
    y: &mut [Y],
) -> Result {
    ensure(x.len() == s.len()?, Error::ShapeMismatch)?;
    let ys = AxisShape { axis: indices.len(), ..s };
    ensure(y.len() == ys.len()?, Error::ShapeMismatch)?;
    for (k, &i) in indices.iter().enumerate() {
        let j = resolve(i, s.axis)?;
        for o in 0..s.outer {
            let src = (o * s.axis + j) * s.inner;
            let dst = (o * indices.len() + k) * s.inner;
            for (d, v) in y[dst..dst + s.inner].iter_mut().zip(&x[src..src + s.inner]) {
                *d = (*v).move_to();
            }
        }
    }
    Ok(())
}

/// ONNX `GatherElements`: `y[i] = x[i with axis coordinate replaced by indices[i]]`;
/// `y` and `indices` have `index_shape`, which has `shape`'s rank and no dim
/// larger than `shape`'s except possibly along `axis`.
pub fn gather_elements<X: MoveTo<Y>, Y, I: Int>(
    shape: &[usize],
    index_shape: &[usize],
    axis: usize,
    indices: &[I],
    x: &[X],
    y: &mut [Y],
) -> Result {
    let r = shape.len();
    ensure(r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(index_shape.len() == r && axis < r, Error::InvalidParams)?;
    ensure((0..r).all(|d| d == axis || index_shape[d] <= shape[d]), Error::InvalidParams)?;
    ensure(x.len() == numel(shape)?, Error::ShapeMismatch)?;
    let n = numel(index_shape)?;
    ensure(indices.len() == n && y.len() == n, Error::ShapeMismatch)?;
    let mut xs = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut xs[..r])?;
    let axis_stride = xs[axis] as usize;
    xs[axis] = 0;
    let mut walk_shape = [0usize; MAX_RANK];
    walk_shape[..r].copy_from_slice(index_shape);
    if n == 0 {
        return Ok(());
    }
    // With every non-axis dim within x's and the axis coordinate taken from
    // the (checked) index, each read stays inside x.
    let mut is = [0isize; MAX_RANK];
    contiguous_strides(index_shape, &mut is[..r])?;
    let mut err = Ok(());
    walk(&walk_shape[..r], [&xs[..r], &is[..r]], [0, 0], |[base, o]| {
        match resolve(indices[o], shape[axis]) {
            Ok(j) => y[o] = x[base + j * axis_stride].move_to(),
            Err(e) => err = Err(e),
        }
    });
    err
}

/// ONNX `Expand` (and any broadcast copy): `x` read through broadcast strides
/// (see [`crate::shape::broadcast_strides`]) into `y` of `out_shape`.
pub fn expand<X: MoveTo<Y>, Y>(
    out_shape: &[usize],
    x_strides: &[isize],
    x: &[X],
    y: &mut [Y],
) -> Result {
    strided_copy(out_shape, x_strides, 0, x, y)
}

/// How `Pad` fills the new border.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PadMode<T> {
    /// A constant value.
    Constant(T),
    /// Mirror without repeating the edge element (numpy `reflect`).
    Reflect,
    /// Repeat the edge element.
    Edge,
    /// Wrap around (numpy `wrap`).
    Wrap,
}

/// ONNX `Pad`: per axis, `pads_begin[d]` elements before and `pads_end[d]`
/// after (negative pads crop), so `y`'s dims are `shape[d] + begin + end`.
/// Reflect and wrap may pad past the axis length (they repeat periodically).
pub fn pad<X: MoveTo<Y>, Y: Copy>(
    shape: &[usize],
    pads_begin: &[isize],
    pads_end: &[isize],
    mode: PadMode<Y>,
    x: &[X],
    y: &mut [Y],
) -> Result {
    let r = shape.len();
    ensure(r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(pads_begin.len() == r && pads_end.len() == r, Error::InvalidParams)?;
    ensure(x.len() == numel(shape)?, Error::ShapeMismatch)?;
    let mut out = [0usize; MAX_RANK];
    let mut xs = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut xs[..r])?;
    for d in 0..r {
        let n = isize::try_from(shape[d]).map_err(|_| Error::Overflow)?;
        let o = n
            .checked_add(pads_begin[d])
            .and_then(|v| v.checked_add(pads_end[d]))
            .ok_or(Error::Overflow)?;
        ensure(o >= 0, Error::InvalidParams)?;
        out[d] = o as usize;
    }
    let out = &out[..r];
    ensure(y.len() == numel(out)?, Error::ShapeMismatch)?;
    if y.is_empty() {
        return Ok(());
    }
    if !matches!(mode, PadMode::Constant(_)) {
        ensure(!x.is_empty(), Error::InvalidParams)?;
    }
    let mut idx = [0usize; MAX_RANK];
    let idx = &mut idx[..r];
    let mut o = 0;
    loop {
        let mut src = Some(0usize);
        for d in 0..r {
            let n = shape[d] as isize;
            let i = idx[d] as isize - pads_begin[d];
            let j = if (0..n).contains(&i) {
                Some(i)
            } else {
                match mode {
                    PadMode::Constant(_) => None,
                    PadMode::Edge => Some(i.clamp(0, n - 1)),
                    PadMode::Wrap => Some(i.rem_euclid(n)),
                    PadMode::Reflect => {
                        if n == 1 {
                            Some(0)
                        } else {
                            let period = 2 * (n - 1);
                            let m = i.rem_euclid(period);
                            Some(if m >= n { period - m } else { m })
                        }
                    }
                }
            };
            src = match (src, j) {
                (Some(s), Some(j)) => Some(s + j as usize * xs[d] as usize),
                _ => None,
            };
        }
        y[o] = match (src, mode) {
            (Some(s), _) => x[s].move_to(),
            (None, PadMode::Constant(v)) => v,
            (None, _) => return Err(Error::InvalidParams),
        };
        o += 1;
        if !next_index(idx, out) {
            return Ok(());
        }
    }
}

/// ONNX `Tile`: `y`'s dims are `shape[d] * repeats[d]`. The rank may be at
/// most half of [`MAX_RANK`].
pub fn tile<X: MoveTo<Y>, Y>(shape: &[usize], repeats: &[usize], x: &[X], y: &mut [Y]) -> Result {
    let r = shape.len();
    ensure(2 * r <= MAX_RANK, Error::RankTooLarge)?;
    ensure(repeats.len() == r, Error::InvalidParams)?;
    ensure(x.len() == numel(shape)?, Error::ShapeMismatch)?;
    let mut xs = [0isize; MAX_RANK];
    contiguous_strides(shape, &mut xs[..r])?;
    // y as [repeats[0], shape[0], repeats[1], shape[1], ...], reading x with
    // stride 0 along the repeat axes.
    let mut s2 = [0usize; MAX_RANK];
    let mut st2 = [0isize; MAX_RANK];
    for d in 0..r {
        s2[2 * d] = repeats[d];
        s2[2 * d + 1] = shape[d];
        st2[2 * d + 1] = xs[d];
    }
    strided_copy(&s2[..2 * r], &st2[..2 * r], 0, x, y)
}

/// `DepthToSpace` / `SpaceToDepth` on `[N, C, H, W]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Nchw4 {
    /// `N`.
    pub n: usize,
    /// `C`.
    pub c: usize,
    /// `H`.
    pub h: usize,
    /// `W`.
    pub w: usize,
}

/// ONNX `DepthToSpace` of `x` with dims `s`: `y` is
/// `[N, C / b², H * b, W * b]`. `crd` selects mode `CRD` (else `DCR`).
pub fn depth_to_space<X: MoveTo<Y>, Y>(
    s: Nchw4,
    block: usize,
    crd: bool,
    x: &[X],
    y: &mut [Y],
) -> Result {
    let bb = block.checked_mul(block).ok_or(Error::Overflow)?;
    ensure(block > 0 && s.c.is_multiple_of(bb), Error::InvalidParams)?;
    let c2 = s.c / bb;
    let b = block;
    if crd {
        transpose(&[s.n, c2, b, b, s.h, s.w], &[0, 1, 4, 2, 5, 3], x, y)
    } else {
        transpose(&[s.n, b, b, c2, s.h, s.w], &[0, 3, 4, 1, 5, 2], x, y)
    }
}

/// ONNX `SpaceToDepth` of `x` with dims `s`: `y` is `[N, C * b², H / b, W / b]`.
/// `crd` selects mode `CRD` (channel, then row and column within the block;
/// opset 28), else `DCR` (the block position, then the channel).
pub fn space_to_depth<X: MoveTo<Y>, Y>(
    s: Nchw4,
    block: usize,
    crd: bool,
    x: &[X],
    y: &mut [Y],
) -> Result {
    ensure(
        block > 0 && s.h.is_multiple_of(block) && s.w.is_multiple_of(block),
        Error::InvalidParams,
    )?;
    let b = block;
    let perm: &[usize] = if crd { &[0, 1, 3, 5, 2, 4] } else { &[0, 3, 5, 1, 2, 4] };
    transpose(&[s.n, s.c, s.h / b, b, s.w / b, b], perm, x, y)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M23: [i32; 6] = [1, 2, 3, 4, 5, 6]; // [[1,2,3],[4,5,6]]

    #[test]
    fn transpose_2d_and_twice_is_identity() {
        let mut t = [0i32; 6];
        transpose(&[2, 3], &[1, 0], &M23, &mut t).unwrap();
        assert_eq!(t, [1, 4, 2, 5, 3, 6]);
        // [2,3,4] -> perm [2,0,1] -> [4,2,3]; the inverse perm [1,2,0] restores it.
        let x: [u16; 24] = core::array::from_fn(|i| i as u16);
        let mut a = [0u16; 24];
        let mut b = [0u16; 24];
        transpose(&[2, 3, 4], &[2, 0, 1], &x, &mut a).unwrap();
        assert_eq!(&a[..4], &[0, 4, 8, 12]);
        transpose(&[4, 2, 3], &[1, 2, 0], &a, &mut b).unwrap();
        assert_eq!(b, x);
        assert_eq!(transpose(&[2, 3], &[0, 0], &M23, &mut t), Err(Error::InvalidParams));
    }

    #[test]
    fn tiled_transposes_match_the_strided_walk() {
        // Every permutation of rank 2..4 over shapes with edges off the
        // 16-element tiles and axes of one element among the others.
        let shapes: [&[usize]; 6] =
            [&[17, 35], &[1, 33, 18], &[3, 5, 19], &[1, 20, 1, 37], &[2, 1, 17, 3], &[4, 3, 2, 5]];
        for shape in shapes {
            let r = shape.len();
            let n: usize = shape.iter().product();
            let x: Vec<i32> = (0..n as i32).collect();
            let mut perm: Vec<usize> = (0..r).collect();
            // Heap's algorithm over the permutations of `perm`.
            let mut c = vec![0usize; r];
            let check = |perm: &[usize]| {
                let mut got = vec![-1i32; n];
                transpose(shape, perm, &x, &mut got).unwrap();
                let mut xs = [0isize; MAX_RANK];
                contiguous_strides(shape, &mut xs[..r]).unwrap();
                let out: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                let st: Vec<isize> = perm.iter().map(|&p| xs[p]).collect();
                let mut want = vec![-1i32; n];
                strided_copy(&out, &st, 0, &x, &mut want).unwrap();
                assert_eq!(got, want, "{shape:?} {perm:?}");
            };
            check(&perm);
            let mut i = 0;
            while i < r {
                if c[i] < i {
                    perm.swap(if i % 2 == 0 { 0 } else { c[i] }, i);
                    check(&perm);
                    c[i] += 1;
                    i = 0;
                } else {
                    c[i] = 0;
                    i += 1;
                }
            }
        }
        let mut y: [f32; 0] = [];
        transpose(&[0, 3], &[1, 0], &[] as &[f32], &mut y).unwrap();
    }

    #[test]
    fn booleans_move_between_storages() {
        // A caller's `bool` tensor transposed into the arena's `u8` form and back.
        let x = [true, false, false, true, true, false];
        let mut a = [7u8; 6];
        transpose(&[2, 3], &[1, 0], &x, &mut a).unwrap();
        assert_eq!(a, [1, 1, 0, 1, 0, 0]);
        let mut b = [false; 6];
        transpose(&[3, 2], &[1, 0], &[1u8, 1, 0, 2, 0, 0], &mut b).unwrap();
        assert_eq!(b, x);
        // Concat of a `bool` input and a `u8` input, one part at a time.
        let mut y = [9u8; 6];
        concat_part(2, 3, 0, &[true, false], &mut y).unwrap();
        concat_part(2, 3, 1, &[0u8, 1, 1, 0], &mut y).unwrap();
        assert_eq!(y, [1, 0, 1, 0, 1, 0]);
        let mut p = [false; 2];
        split_part(2, 3, 2, &y, &mut p).unwrap();
        assert_eq!(p, [true, false]);
        // Pad writes its constant in the output's storage.
        let mut y = [false; 4];
        pad(&[2], &[1], &[1], PadMode::Constant(true), &[0u8, 1], &mut y).unwrap();
        assert_eq!(y, [true, false, true, true]);
    }

    #[test]
    fn parts_check_their_columns() {
        let mut y = [0i32; 6];
        // Columns 2..4 of a width-3 row do not exist.
        assert_eq!(concat_part(2, 3, 2, &[1, 2, 3, 4], &mut y), Err(Error::ShapeMismatch));
        assert_eq!(concat_part(2, 4, 0, &[1, 2], &mut y), Err(Error::ShapeMismatch));
        assert_eq!(concat_part(4, 3, 0, &[1, 2, 3], &mut y), Err(Error::ShapeMismatch));
        assert_eq!(split_part(2, 3, 3, &M23, &mut [0; 2]), Err(Error::ShapeMismatch));
        // Splitting into unequal parts, the last one empty.
        let (mut a, mut b, mut c) = ([0i32; 4], [0i32; 2], [0i32; 0]);
        split_part(2, 3, 0, &M23, &mut a).unwrap();
        split_part(2, 3, 2, &M23, &mut b).unwrap();
        split_part(2, 3, 3, &M23, &mut c).unwrap();
        assert_eq!((a, b), ([1, 2, 4, 5], [3, 6]));
    }

    #[test]
    fn concat_split_round_trip() {
        // Along axis 1: [2,1] ++ [2,2] -> [2,3].
        let mut y = [0i32; 6];
        concat(2, &[&[1, 4], &[2, 3, 5, 6]], &mut y).unwrap();
        assert_eq!(y, M23);
        let (mut a, mut b) = ([0i32; 2], [0i32; 4]);
        split(2, &y, &mut [&mut a, &mut b]).unwrap();
        assert_eq!((a, b), ([1, 4], [2, 3, 5, 6]));
        assert_eq!(concat(4, &[&[1, 2, 3]], &mut [0; 3]), Err(Error::ShapeMismatch));
    }

    #[test]
    fn slices_forward_and_reversed() {
        // x[:, 1:3]
        let mut y = [0i32; 4];
        slice(&[2, 3], &[0, 1], &[1, 1], &[2, 2], &M23, &mut y).unwrap();
        assert_eq!(y, [2, 3, 5, 6]);
        // x[::-1, ::-2] -> rows reversed, columns 2 and 0.
        slice(&[2, 3], &[1, 2], &[-1, -2], &[2, 2], &M23, &mut y).unwrap();
        assert_eq!(y, [6, 4, 3, 1]);
        // Empty result.
        slice(&[2, 3], &[0, 3], &[1, 1], &[2, 0], &M23, &mut []).unwrap();
        // A length that runs off the end is refused.
        assert_eq!(
            slice(&[2, 3], &[0, 2], &[1, 1], &[2, 2], &M23, &mut y),
            Err(Error::ShapeMismatch)
        );
    }

    #[test]
    fn gathers() {
        // Gather axis 1 with [2, -1, 0] -> columns 3, 3, 1.
        let s = AxisShape { outer: 2, axis: 3, inner: 1 };
        let mut y = [0i32; 6];
        gather(s, &[2i64, -1, 0], &M23, &mut y).unwrap();
        assert_eq!(y, [3, 3, 1, 6, 6, 4]);
        // Gather axis 0 (rows) with i32 indices.
        let s = AxisShape { outer: 1, axis: 2, inner: 3 };
        let mut y = [0i32; 3];
        gather(s, &[1i32], &M23, &mut y).unwrap();
        assert_eq!(y, [4, 5, 6]);
        assert_eq!(gather(s, &[2i32], &M23, &mut y), Err(Error::IndexOutOfBounds));
        assert_eq!(gather(s, &[-3i32], &M23, &mut y), Err(Error::IndexOutOfBounds));
        // GatherElements axis 1: [[2, 0], [1, 1]] -> [[3, 1], [5, 5]].
        let mut y = [0i32; 4];
        gather_elements(&[2, 3], &[2, 2], 1, &[2i64, 0, 1, -2], &M23, &mut y).unwrap();
        assert_eq!(y, [3, 1, 5, 5]);
        // Axis 0 with a taller index tensor: [[1,0,1],[0,0,0],[1,1,1]].
        let mut y = [0i32; 9];
        gather_elements(&[2, 3], &[3, 3], 0, &[1i32, 0, 1, 0, 0, 0, 1, 1, 1], &M23, &mut y)
            .unwrap();
        assert_eq!(y, [4, 2, 6, 1, 2, 3, 4, 5, 6]);
        assert_eq!(
            gather_elements(&[2, 3], &[2, 2], 1, &[3i64, 0, 0, 0], &M23, &mut [0; 4]),
            Err(Error::IndexOutOfBounds)
        );
        // A non-axis dim wider than x's is refused rather than read across rows.
        assert_eq!(
            gather_elements(&[2, 3], &[1, 4], 0, &[0i64; 4], &M23, &mut [0; 4]),
            Err(Error::InvalidParams)
        );
    }

    #[test]
    fn expand_and_tile() {
        // [3] -> [2, 3]
        let mut y = [0i32; 6];
        expand(&[2, 3], &[0, 1], &[1, 2, 3], &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 1, 2, 3]);
        // [2,1] -> [2,3]
        expand(&[2, 3], &[1, 0], &[7, 8], &mut y).unwrap();
        assert_eq!(y, [7, 7, 7, 8, 8, 8]);
        // Tile [[1,2]] by [2, 2] -> [[1,2,1,2],[1,2,1,2]].
        let mut y = [0i32; 8];
        tile(&[1, 2], &[2, 2], &[1, 2], &mut y).unwrap();
        assert_eq!(y, [1, 2, 1, 2, 1, 2, 1, 2]);
        let mut y = [0i32; 12];
        tile(&[2, 3], &[2, 1], &M23, &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn pad_modes() {
        let x = [1i32, 2, 3];
        let mut y = [0i32; 7];
        pad(&[3], &[2], &[2], PadMode::Constant(0), &x, &mut y).unwrap();
        assert_eq!(y, [0, 0, 1, 2, 3, 0, 0]);
        pad(&[3], &[2], &[2], PadMode::Reflect, &x, &mut y).unwrap();
        assert_eq!(y, [3, 2, 1, 2, 3, 2, 1]);
        pad(&[3], &[2], &[2], PadMode::Edge, &x, &mut y).unwrap();
        assert_eq!(y, [1, 1, 1, 2, 3, 3, 3]);
        pad(&[3], &[2], &[2], PadMode::Wrap, &x, &mut y).unwrap();
        assert_eq!(y, [2, 3, 1, 2, 3, 1, 2]);
        // Negative pads crop; 2-D constant pad.
        let mut y = [0i32; 1];
        pad(&[3], &[-1], &[-1], PadMode::Constant(9), &x, &mut y).unwrap();
        assert_eq!(y, [2]);
        let mut y = [0i32; 12];
        pad(&[2, 3], &[1, 0], &[0, 1], PadMode::Constant(-1), &M23, &mut y).unwrap();
        assert_eq!(y, [-1, -1, -1, -1, 1, 2, 3, -1, 4, 5, 6, -1]);
        assert_eq!(pad(&[3], &[-2], &[-2], PadMode::Edge, &x, &mut []), Err(Error::InvalidParams));
    }

    #[test]
    fn depth_space_round_trip() {
        // [1, 4, 1, 1] with block 2: DCR puts channels 0..4 into a 2x2 square in order.
        let mut y = [0i32; 4];
        let s = Nchw4 { n: 1, c: 4, h: 1, w: 1 };
        depth_to_space(s, 2, false, &[1, 2, 3, 4], &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 4]);
        // [1, 8, 1, 1]: DCR interleaves the two output channels, CRD keeps them in blocks.
        let x: [i32; 8] = core::array::from_fn(|i| i as i32);
        let s = Nchw4 { n: 1, c: 8, h: 1, w: 1 };
        let mut y = [0i32; 8];
        depth_to_space(s, 2, false, &x, &mut y).unwrap();
        assert_eq!(y, [0, 2, 4, 6, 1, 3, 5, 7]);
        depth_to_space(s, 2, true, &x, &mut y).unwrap();
        assert_eq!(y, x);
        // SpaceToDepth inverts DepthToSpace (DCR) on a [1, 8, 2, 3] tensor.
        let x: [i32; 48] = core::array::from_fn(|i| i as i32 * 3 - 7);
        let mut a = [0i32; 48];
        let mut b = [0i32; 48];
        depth_to_space(Nchw4 { n: 1, c: 8, h: 2, w: 3 }, 2, false, &x, &mut a).unwrap();
        space_to_depth(Nchw4 { n: 1, c: 2, h: 4, w: 6 }, 2, false, &a, &mut b).unwrap();
        assert_eq!(b, x);
        // ... and SpaceToDepth CRD inverts DepthToSpace CRD.
        depth_to_space(Nchw4 { n: 1, c: 8, h: 2, w: 3 }, 2, true, &x, &mut a).unwrap();
        space_to_depth(Nchw4 { n: 1, c: 2, h: 4, w: 6 }, 2, true, &a, &mut b).unwrap();
        assert_eq!(b, x);
        // CRD on [1, 1, 2, 2]: one channel, so the block is read row by row.
        let mut y = [0i32; 4];
        space_to_depth(Nchw4 { n: 1, c: 1, h: 2, w: 2 }, 2, true, &[1, 2, 3, 4], &mut y).unwrap();
        assert_eq!(y, [1, 2, 3, 4]);
        // Two channels [1, 2, 2, 2]: CRD keeps each channel's block together,
        // DCR interleaves the channels per block position.
        let x: [i32; 8] = core::array::from_fn(|i| i as i32);
        let mut y = [0i32; 8];
        space_to_depth(Nchw4 { n: 1, c: 2, h: 2, w: 2 }, 2, true, &x, &mut y).unwrap();
        assert_eq!(y, [0, 1, 2, 3, 4, 5, 6, 7]);
        space_to_depth(Nchw4 { n: 1, c: 2, h: 2, w: 2 }, 2, false, &x, &mut y).unwrap();
        assert_eq!(y, [0, 4, 1, 5, 2, 6, 3, 7]);
    }
}
