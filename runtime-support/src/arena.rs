//! Carving one node call's buffers out of the model's byte arena.
//!
//! # Contract with the generator
//!
//! A generated model owns one static byte arena whose start is aligned to
//! [`ARENA_ALIGN`] bytes (the generator wraps it in a `#[repr(align(64))]`
//! struct). The generator plans, per value, a byte range inside it whose start
//! is a multiple of the element's alignment (in practice of [`ARENA_ALIGN`]),
//! and for each node call asks [`split`] for the ranges that call reads and
//! writes. `split` checks that the ranges are inside the arena and pairwise
//! disjoint (in any order), so the borrows it hands out never alias; [`view`]
//! and [`view_mut`] then reinterpret each byte slice as typed elements through
//! `bytemuck`, refusing a misaligned start or a length that is not a whole
//! number of elements. Nothing here copies.
//!
//! Booleans live in the arena as `u8` holding 0 or 1 (see [`crate::num::Flag`]).

use crate::{Error, Result};
use core::ops::Range;

/// Alignment in bytes the generator gives the arena's start and every range.
pub const ARENA_ALIGN: usize = 64;

/// Splits `arena` into `N` disjoint mutable byte slices, one per range, in the
/// order the ranges are given.
///
/// Ranges may be listed in any order and may be empty (an empty range never
/// overlaps anything, but must still lie within the arena). Fails with
/// [`Error::ArenaOutOfBounds`] for a reversed range or one past the end, and
/// with [`Error::ArenaOverlap`] if two non-empty ranges share a byte.
pub fn split<const N: usize>(
    arena: &mut [u8],
    ranges: [Range<usize>; N],
) -> Result<[&mut [u8]; N]> {
    for r in &ranges {
        if r.start > r.end || r.end > arena.len() {
            return Err(Error::ArenaOutOfBounds);
        }
    }
    // Sort range indices by start (insertion sort: N is a handful).
    let mut order = [0usize; N];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    for i in 1..N {
        let mut j = i;
        while j > 0 && ranges[order[j - 1]].start > ranges[order[j]].start {
            order.swap(j - 1, j);
            j -= 1;
        }
    }
    let mut prev_end = 0usize;
    for &i in &order {
        let r = &ranges[i];
        if r.is_empty() {
            continue;
        }
        if r.start < prev_end {
            return Err(Error::ArenaOverlap);
        }
        prev_end = r.end;
    }
    // Hand out slices by walking the arena in start order.
    let mut out: [&mut [u8]; N] = core::array::from_fn(|_| <&mut [u8]>::default());
    let mut rest: &mut [u8] = arena;
    let mut consumed = 0usize;
    for &i in &order {
        let r = &ranges[i];
        if r.is_empty() {
            continue;
        }
        let tail = core::mem::take(&mut rest);
        let (_, tail) = tail.split_at_mut(r.start - consumed);
        let (mine, tail) = tail.split_at_mut(r.len());
        out[i] = mine;
        rest = tail;
        consumed = r.end;
    }
    Ok(out)
}

/// Views bytes as a slice of `T`; [`Error::Misaligned`] if the start is not
/// aligned for `T` or the length is not a multiple of `size_of::<T>()`.
/// Empty bytes are an empty slice whatever their address (an empty range
/// may carry a dangling, byte-aligned pointer).
pub fn view<T: bytemuck::AnyBitPattern>(bytes: &[u8]) -> Result<&[T]> {
    if bytes.is_empty() {
        return Ok(&[]);
    }
    bytemuck::try_cast_slice(bytes).map_err(|_| Error::Misaligned)
}

/// Mutable form of [`view`].
pub fn view_mut<T: bytemuck::AnyBitPattern + bytemuck::NoUninit>(
    bytes: &mut [u8],
) -> Result<&mut [T]> {
    if bytes.is_empty() {
        return Ok(&mut []);
    }
    bytemuck::try_cast_slice_mut(bytes).map_err(|_| Error::Misaligned)
}

/// Views a typed slice as its bytes (e.g. to copy a caller's input into the arena).
pub fn as_bytes<T: bytemuck::NoUninit>(values: &[T]) -> &[u8] {
    bytemuck::cast_slice(values)
}

/// The bytes of `values`, mutably (for filling outputs through `Model::run_bytes`).
pub fn as_bytes_mut<T: bytemuck::Pod>(values: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(values)
}

#[cfg(test)]
mod tests {
    #[test]
    fn empty_views_ignore_the_address() {
        // 4-aligned words: byte 1 is certainly not aligned for f32.
        let words = [0u32; 3];
        let bytes = super::as_bytes(&words);
        assert_eq!(super::view::<f32>(&bytes[1..1]), Ok(&[][..]));
        assert!(super::view::<f32>(&bytes[1..5]).is_err());
        let mut more = [0u64; 2];
        let more = super::as_bytes_mut(&mut more);
        assert!(super::view_mut::<u64>(&mut more[3..3]).is_ok_and(|v| v.is_empty()));
    }

    use super::*;

    #[repr(C, align(64))]
    struct Arena([u8; 256]);

    #[test]
    fn split_any_order_and_disjoint() {
        let mut a = Arena([0; 256]);
        let [x, y, z] = split(&mut a.0, [128..192, 0..64, 64..68]).unwrap();
        assert_eq!((x.len(), y.len(), z.len()), (64, 64, 4));
        x[0] = 1;
        y[0] = 2;
        z[3] = 3;
        assert_eq!((a.0[128], a.0[0], a.0[67]), (1, 2, 3));
    }

    #[test]
    #[allow(clippy::single_range_in_vec_init)]
    fn split_rejects_overlap_and_bounds() {
        let mut a = Arena([0; 256]);
        assert_eq!(split(&mut a.0, [0..64, 63..70]).err(), Some(Error::ArenaOverlap));
        assert_eq!(split(&mut a.0, [64..128, 0..65]).err(), Some(Error::ArenaOverlap));
        assert_eq!(split(&mut a.0, [0..257]).err(), Some(Error::ArenaOutOfBounds));
        #[allow(clippy::reversed_empty_ranges)]
        let reversed = [10..5];
        assert_eq!(split(&mut a.0, reversed).err(), Some(Error::ArenaOutOfBounds));
        // Touching ranges and empty ranges are fine.
        assert!(split(&mut a.0, [0..64, 64..128, 64..64, 256..256]).is_ok());
    }

    #[test]
    fn typed_views() {
        let mut a = Arena([0; 256]);
        let [x, y] = split(&mut a.0, [0..16, 64..72]).unwrap();
        let xf: &mut [f32] = view_mut(x).unwrap();
        xf[1] = 1.5;
        assert_eq!(xf.len(), 4);
        let yi: &mut [i64] = view_mut(y).unwrap();
        yi[0] = -2;
        assert_eq!(&a.0[4..8], &1.5f32.to_ne_bytes());
        assert_eq!(view::<i64>(&a.0[64..72]).unwrap(), &[-2]);
        // Misaligned start, and a length that is not a whole number of elements.
        assert_eq!(view::<f32>(&a.0[1..5]).err(), Some(Error::Misaligned));
        assert_eq!(view::<f32>(&a.0[0..6]).err(), Some(Error::Misaligned));
        assert_eq!(as_bytes(&[1u16]), &1u16.to_ne_bytes());
    }
}
