//! The stack buffer B strips are packed into, initialised lazily: a call
//! zero-fills only the entries it hands out, once, instead of the whole
//! buffer up front (a product with a short `k` uses a small part of it).

use core::mem::MaybeUninit;

/// `BUF` floats, of which the first `init` have been written.
pub(crate) struct Strip<const BUF: usize> {
    buf: [MaybeUninit<f32>; BUF],
    init: usize,
}

impl<const BUF: usize> Strip<BUF> {
    /// An empty buffer: nothing written yet.
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Strip { buf: [const { MaybeUninit::uninit() }; BUF], init: 0 }
    }

    /// The first `len` entries (at most `BUF`); those never handed out
    /// before are zero, the others keep what was last written to them.
    #[inline(always)]
    pub(crate) fn get(&mut self, len: usize) -> &mut [f32] {
        let len = len.min(BUF);
        if len > self.init {
            for v in &mut self.buf[self.init..len] {
                v.write(0.0);
            }
            self.init = len;
        }
        // SAFETY: every entry below `self.init >= len` was written above (now
        // or in an earlier call), and `MaybeUninit<f32>` has the layout of
        // `f32`, so the first `len` entries are initialised `f32`s borrowed
        // mutably through `self` for the slice's lifetime.
        unsafe { core::slice::from_raw_parts_mut(self.buf.as_mut_ptr().cast::<f32>(), len) }
    }
}

/// Asks the caches to fetch `data` ahead of its use (a B strip the kernel
/// reads next, which would otherwise arrive from memory one line at a time
/// as the first tile over it runs). A hint only: nothing is read or changed.
#[inline(always)]
pub(crate) fn prefetch(data: &[f32]) {
    fetch::<{ HINT_L1 }>(data);
}

/// [`prefetch`] into the second-level cache only: for data needed after
/// the current working set (the next strip while the tiles over this one
/// run), which a fetch into L1 would partly evict.
#[inline(always)]
pub(crate) fn prefetch_l2(data: &[f32]) {
    fetch::<{ HINT_L2 }>(data);
}

/// The cache a prefetch fills.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Level {
    /// The first level: data the next few hundred cycles read.
    L1,
    /// The second level only: data read after the current working set.
    L2,
}

/// [`prefetch`] or [`prefetch_l2`], as `level` says.
#[inline(always)]
pub(crate) fn prefetch_to(level: Level, data: &[f32]) {
    match level {
        Level::L1 => fetch::<{ HINT_L1 }>(data),
        Level::L2 => fetch::<{ HINT_L2 }>(data),
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const HINT_L1: i32 = core::arch::x86_64::_MM_HINT_T0;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
const HINT_L2: i32 = core::arch::x86_64::_MM_HINT_T1;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const HINT_L1: i32 = 0;
#[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
const HINT_L2: i32 = 0;

#[inline(always)]
fn fetch<const HINT: i32>(data: &[f32]) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    for line in data.chunks(16) {
        // SAFETY: a prefetch never faults and has no effect but on the
        // caches; the address is inside `data` anyway. SSE, which has the
        // instruction, is part of every x86-64 CPU.
        unsafe { core::arch::x86_64::_mm_prefetch::<HINT>(line.as_ptr().cast()) };
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let _ = data;
}

#[cfg(test)]
mod tests {
    use super::Strip;

    #[test]
    fn entries_are_zero_when_first_handed_out_and_keep_writes() {
        let mut s = Strip::<8>::new();
        assert_eq!(s.get(3), &[0.0; 3]);
        s.get(3).fill(1.0);
        assert_eq!(s.get(5), &[1.0, 1.0, 1.0, 0.0, 0.0]);
        assert_eq!(s.get(100).len(), 8);
        assert_eq!(s.get(8)[7], 0.0);
    }
}
