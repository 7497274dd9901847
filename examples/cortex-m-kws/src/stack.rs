//! Stack high-water mark by painting: the free stack below the current
//! stack pointer is filled with a pattern before the model runs, and the
//! deepest word no longer holding it afterwards shows how far the stack grew.

const PATTERN: u32 = 0xDEAD_BEEF;
/// How much free stack is painted (the firmware's stack is the RAM left
/// after static data, megabytes here; 64 KiB is ample for this model).
const DEPTH: usize = 64 * 1024;
/// Bytes left unpainted just below the stack pointer, for `paint`'s own frame.
const GUARD: usize = 256;

/// The painted range, lowest address first.
pub struct Painted {
    bottom: usize,
    top: usize,
}

pub fn paint() -> Painted {
    let top = cortex_m::register::msp::read() as usize - GUARD;
    let bottom = top - DEPTH;
    let mut p = bottom;
    while p < top {
        // SAFETY: [bottom, top) lies below the live stack pointer (minus a
        // guard for this frame) and above the static data (RAM is 4 MiB,
        // statics use less than 1 MiB), so it is unused stack memory that
        // no live reference points into; the word writes are aligned.
        unsafe { core::ptr::write_volatile(p as *mut u32, PATTERN) };
        p += 4;
    }
    Painted { bottom, top }
}

/// Bytes of the painted range that were written since `paint`.
pub fn used(painted: Painted) -> usize {
    let mut p = painted.bottom;
    while p < painted.top {
        // SAFETY: the same range `paint` wrote; aligned word reads of
        // memory owned by no live reference.
        if unsafe { core::ptr::read_volatile(p as *const u32) } != PATTERN {
            break;
        }
        p += 4;
    }
    painted.top - p
}
