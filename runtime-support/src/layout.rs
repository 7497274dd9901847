//! Data movement: strided copy, Transpose, Concat, Split, Slice, Gather,
//! GatherElements, Expand, Pad, Tile, DepthToSpace, SpaceToDepth.
//!
//! All of these only move elements, so they are generic over `T: Copy` and
//! serve every element type (including `bool`/`u8` flags and f16). Outputs
//! are contiguous row-major; most ops are a [`strided_copy`] with strides the
//! generator (or the op's helper here) derives from the shapes.

use crate::norm::AxisShape;
use crate::num::Int;
use crate::shape::{MAX_RANK, check_strided, contiguous_strides, next_index, numel, walk};
use crate::{Error, Result, ensure};

/// Copies the elements of `src` visited by walking `shape` with `src_strides`
/// from `src_offset` into contiguous `dst` (of `numel(shape)` elements).
/// Negative strides walk backwards; 0 strides repeat (broadcast).
pub fn strided_copy<T: Copy>(
    shape: &[usize],
    src_strides: &[isize],
    src_offset: usize,
    src: &[T],
    dst: &mut [T],
) -> Result {
    ensure(dst.len() == numel(shape)?, Error::ShapeMismatch)?;
    check_strided(shape, src_strides, src_offset, src.len())?;
    let mut o = 0;
    walk(shape, [src_strides], [src_offset], |[i]| {
        dst[o] = src[i];
        o += 1;
    });
    Ok(())
}

/// ONNX `Transpose`: `y` has dims `shape[perm[i]]`.
pub fn transpose<T: Copy>(shape: &[usize], perm: &[usize], x: &[T], y: &mut [T]) -> Result {
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
    strided_copy(&out_shape[..r], &strides[..r], 0, x, y)
}

/// ONNX `Concat`: every input is `[outer, chunk_i]` (its dims before the axis
/// multiply to `outer`; `chunk_i` is its axis length times the dims after),
/// and `y` is `[outer, sum chunk_i]`. `outer` must be nonzero unless all are empty.
pub fn concat<T: Copy>(outer: usize, inputs: &[&[T]], y: &mut [T]) -> Result {
    let total: usize = inputs.iter().map(|i| i.len()).sum();
    ensure(y.len() == total, Error::ShapeMismatch)?;
    if total == 0 {
        return Ok(());
    }
    ensure(outer > 0, Error::InvalidParams)?;
    ensure(inputs.iter().all(|i| i.len() % outer == 0), Error::ShapeMismatch)?;
    let mut at = 0;
    for o in 0..outer {
        for inp in inputs {
            let c = inp.len() / outer;
            y[at..at + c].copy_from_slice(&inp[o * c..(o + 1) * c]);
            at += c;
        }
    }
    Ok(())
}

/// ONNX `Split`: the inverse of [`concat()`]; each output is `[outer, chunk_i]`.
pub fn split<T: Copy>(outer: usize, x: &[T], outputs: &mut [&mut [T]]) -> Result {
    let total: usize = outputs.iter().map(|o| o.len()).sum();
    ensure(x.len() == total, Error::ShapeMismatch)?;
    if total == 0 {
        return Ok(());
    }
    ensure(outer > 0, Error::InvalidParams)?;
    ensure(outputs.iter().all(|o| o.len() % outer == 0), Error::ShapeMismatch)?;
    let mut at = 0;
    for o in 0..outer {
        for out in outputs.iter_mut() {
            let c = out.len() / outer;
            out[o * c..(o + 1) * c].copy_from_slice(&x[at..at + c]);
            at += c;
        }
    }
    Ok(())
}

/// ONNX `Slice` after normalisation: per axis of `shape`, the first index
/// read (`starts`, already clamped into the axis), the step (nonzero, may be
/// negative) and the output length (`out_shape`). Axes not sliced have start
/// 0, step 1 and their full length.
pub fn slice<T: Copy>(
    shape: &[usize],
    starts: &[usize],
    steps: &[isize],
    out_shape: &[usize],
    x: &[T],
    y: &mut [T],
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
pub fn gather<T: Copy, I: Int>(s: AxisShape, indices: &[I], x: &[T], y: &mut [T]) -> Result {
    ensure(x.len() == s.len()?, Error::ShapeMismatch)?;
    let ys = AxisShape { axis: indices.len(), ..s };
    ensure(y.len() == ys.len()?, Error::ShapeMismatch)?;
    for (k, &i) in indices.iter().enumerate() {
        let j = resolve(i, s.axis)?;
        for o in 0..s.outer {
            let src = (o * s.axis + j) * s.inner;
            let dst = (o * indices.len() + k) * s.inner;
            y[dst..dst + s.inner].copy_from_slice(&x[src..src + s.inner]);
        }
    }
    Ok(())
}

/// ONNX `GatherElements`: `y[i] = x[i with axis coordinate replaced by indices[i]]`;
/// `y` and `indices` have `index_shape`, which has `shape`'s rank and no dim
/// larger than `shape`'s except possibly along `axis`.
pub fn gather_elements<T: Copy, I: Int>(
    shape: &[usize],
    index_shape: &[usize],
    axis: usize,
    indices: &[I],
    x: &[T],
    y: &mut [T],
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
            Ok(j) => y[o] = x[base + j * axis_stride],
            Err(e) => err = Err(e),
        }
    });
    err
}

/// ONNX `Expand` (and any broadcast copy): `x` read through broadcast strides
/// (see [`crate::shape::broadcast_strides`]) into `y` of `out_shape`.
pub fn expand<T: Copy>(out_shape: &[usize], x_strides: &[isize], x: &[T], y: &mut [T]) -> Result {
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
pub fn pad<T: Copy>(
    shape: &[usize],
    pads_begin: &[isize],
    pads_end: &[isize],
    mode: PadMode<T>,
    x: &[T],
    y: &mut [T],
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
            (Some(s), _) => x[s],
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
pub fn tile<T: Copy>(shape: &[usize], repeats: &[usize], x: &[T], y: &mut [T]) -> Result {
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
pub fn depth_to_space<T: Copy>(s: Nchw4, block: usize, crd: bool, x: &[T], y: &mut [T]) -> Result {
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
pub fn space_to_depth<T: Copy>(s: Nchw4, block: usize, x: &[T], y: &mut [T]) -> Result {
    ensure(
        block > 0 && s.h.is_multiple_of(block) && s.w.is_multiple_of(block),
        Error::InvalidParams,
    )?;
    let b = block;
    transpose(&[s.n, s.c, s.h / b, b, s.w / b, b], &[0, 3, 5, 1, 2, 4], x, y)
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
        space_to_depth(Nchw4 { n: 1, c: 2, h: 4, w: 6 }, 2, &a, &mut b).unwrap();
        assert_eq!(b, x);
    }
}
