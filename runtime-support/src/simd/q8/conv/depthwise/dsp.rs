//! 3x3 depthwise windows of stride 1 or 2 on the Arm DSP extension, over a
//! padded plane (see the parent module).
//!
//! A window row's three inputs `b0 b1 b2` start a word `b0 b1 b2 b3`;
//! `SXTB16` gives the halves `(b0, b2)` and `(b1, b3)`. With the row's
//! weights as the halves `(w0, w2)` and `(w1, _)`:
//!
//! - output `ox`: `SMLAD (b0, b2)·(w0, w2)` and `SMLABB b1·w1`;
//! - at stride 1, output `ox + 1` from the same word: `SMLAD (b1,
//!   b3)·(w0, w2)` and `SMLATB b2·w1`;
//! - at stride 2, output `ox + 1` (bytes `b2 b3 b4`): `SMLATB b2·w0`,
//!   `SMLATB b3·w1` and, with `b4` loaded as a byte, `SMLABT b4·w2`.
//!
//! So a pair of outputs at stride 1 takes, per window row, one load, two
//! extensions and four multiply-accumulates for six multiply-adds (at
//! stride 2 two loads and five); a single output five instructions for
//! three. The rows of a piece run in one asm loop.

use crate::int8::Q8;
use crate::simd::isa::dsp::{Dsp, halves, smlabb, smlabt, smlad, smlatb, smlatt, split};
use crate::simd::q8::conv::Geom;
use crate::simd::q8::conv::depthwise::{ACC, ChannelKernel, PLANE_SLACK, Plane, for_pieces};
use crate::simd::q8::requant::{Chan, OutRange, splat_row};

/// Whether the window is one this kernel takes: 3x3, no dilation,
/// horizontal stride 1 or 2 (any vertical stride).
pub(crate) fn fits(g: &Geom) -> bool {
    g.kh == 3 && g.kw == 3 && g.dh == 1 && g.dw == 1 && (g.sw == 1 || g.sw == 2)
}

/// The window's weights as halves: each row's `(w0, w2)`, and the middle
/// column's `(w1 of row 0, w1 of row 1)` and `(w1 of row 2, 0)` (five
/// registers, which leaves the loop enough for the rest).
#[derive(Clone, Copy)]
struct Weights {
    outer: [u32; 3],
    mid01: u32,
    mid2: u32,
}

/// The kernel: one channel, as the parent's [`ChannelKernel`] says (the
/// window [`fits`]).
#[derive(Clone, Copy)]
pub(crate) struct Kernel(pub Dsp);

/// The sums of a piece before its output stage, made once per
/// convolution (clearing them per channel cost about 160 instructions a
/// channel on a Cortex-M4; every sum is written before it is read).
pub(crate) struct Sums([i32; ACC]);

impl Default for Sums {
    fn default() -> Sums {
        Sums([0; ACC])
    }
}

impl ChannelKernel for Kernel {
    type Scratch = Sums;

    #[inline(always)]
    fn channel<A: Q8, Y: Q8>(
        self,
        g: &Geom,
        plane: &Plane,
        pad: &[u8],
        wc: &[i8],
        ch: &Chan,
        out: &OutRange,
        yp: &mut [Y],
        sums: &mut Sums,
    ) {
        debug_assert!(fits(g) && wc.len() == 9 && yp.len() == g.oh * g.ow);
        // The furthest byte read: row `(oh - 1) sh + 2`, the word at column
        // `(ow - 1) sw`, whose last byte is column `(ow - 1) sw + 3 =
        // plane.cols` (one past the row: the next row's first, or the slack).
        let need = plane.rows * plane.cols + PLANE_SLACK;
        let ok = fits(g)
            && wc.len() == 9
            && yp.len() == g.oh * g.ow
            && plane.cols == (g.ow - 1) * g.sw + 3
            && plane.rows == (g.oh - 1) * g.sh + 3
            && pad.len() >= need;
        debug_assert!(ok, "depthwise DSP kernel out of bounds");
        if !ok {
            return;
        }
        let v = |i: usize| i32::from(wc[i]);
        let w = Weights {
            outer: [halves(v(0), v(2)), halves(v(3), v(5)), halves(v(6), v(8))],
            mid01: halves(v(1), v(4)),
            mid2: halves(v(7), 0),
        };
        if A::SIGNED {
            rows::<true, Y>(g, plane.cols, pad, &w, ch, out, yp, &mut sums.0);
        } else {
            rows::<false, Y>(g, plane.cols, pad, &w, ch, out, yp, &mut sums.0);
        }
    }
}

/// The output rows of [`Kernel`]'s channel, `SIGNED` the input's type.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn rows<const SIGNED: bool, Y: Q8>(
    g: &Geom,
    pitch: usize,
    pad: &[u8],
    w: &Weights,
    ch: &Chan,
    out: &OutRange,
    yp: &mut [Y],
    acc: &mut [i32; ACC],
) {
    // The sums of up to 64 outputs (whole rows when they fit: narrow
    // planes pay the output stage's setup once for several rows) first,
    // then their output stage: the stage's constants would not fit in the
    // registers beside the weights.
    for_pieces(g, yp, |oy0, ox0, width, yc| {
        let acc = &mut acc[..yc.len()];
        if g.sw == 1 {
            let top = pad[oy0 * g.sh * pitch + ox0..].as_ptr();
            // SAFETY: for each of the piece's rows `r`, the words at columns
            // `ox..ox + 4`, `ox0 <= ox < ox0 + width`, of the window's three
            // rows (`(oy0 + r) sh..+ 3`) lie within `pad` (checked above:
            // `ox + 3 <= ow + 1 = plane.cols`).
            unsafe { rows_s1::<SIGNED>(top, pitch, g.sh * pitch, width, w, acc) };
        } else {
            let top = pad[oy0 * g.sh * pitch + 2 * ox0..].as_ptr();
            // SAFETY: for each of the piece's rows `r`, the words at columns
            // `2 ox..2 ox + 4`, `ox0 <= ox < ox0 + width`, of the window's
            // three rows lie within `pad` (checked above: `2 ox + 3 <= 2 (ow
            // - 1) + 3 = plane.cols`).
            unsafe { rows_s2::<SIGNED>(top, pitch, g.sh * pitch, width, w, acc) };
        }
        splat_row(acc, ch, out, yc);
    });
}

/// The sums of a piece's rows of stride-1 windows, `width` to a row, row
/// `r`'s windows starting at `p + r * step`, into `acc` row after row:
/// one call for the piece, so that the weights are loaded once (a
/// function of its own, so that the weights, the pointers and the sums
/// stay in registers through the loop).
///
/// # Safety
/// `p + r * step + k * pitch + i..+ 4` is readable for every row `r <
/// acc.len() / width`, `k < 3`, `i < width`.
#[inline(never)]
unsafe fn rows_s1<const SIGNED: bool>(
    p: *const u8,
    pitch: usize,
    step: usize,
    width: usize,
    w: &Weights,
    acc: &mut [i32],
) {
    let w = *w;
    #[cfg(onnx_codegen_arm_dsp)]
    let rows = acc.len() / width.max(1);
    #[cfg(onnx_codegen_arm_dsp)]
    if width >= 2 && rows >= 1 {
        // SAFETY: the caller's bound for the `rows` rows of `width`
        // windows; `acc` holds their `rows * width` sums (an `i32` slice:
        // word-aligned).
        unsafe { rows_asm::<SIGNED, false>(p, pitch, step, width, rows, &w, acc.as_mut_ptr()) };
        return;
    }
    let mut top = p;
    for a in acc.chunks_exact_mut(width.max(1)) {
        let mut pairs = a.chunks_exact_mut(2);
        let mut q = top;
        for a in &mut pairs {
            // SAFETY: the caller's bound, at `i = 2 j, 2 j + 1`.
            let (s0, s1) = unsafe { pair::<SIGNED>(q, pitch, &w) };
            a[0] = s0;
            a[1] = s1;
            q = q.wrapping_add(2);
        }
        if let [last] = pairs.into_remainder() {
            // SAFETY: the caller's bound at the row's last window.
            *last = unsafe { single::<SIGNED>(q, pitch, &w) };
        }
        top = top.wrapping_add(step);
    }
}

/// [`rows_s1`] at stride 2 across: window `i` of row `r` starts at `p + r
/// * step + 2 i`.
///
/// # Safety
/// `p + r * step + k * pitch + 2 i..+ 4` is readable for every row `r <
/// acc.len() / width`, `k < 3`, `i < width`.
#[inline(never)]
unsafe fn rows_s2<const SIGNED: bool>(
    p: *const u8,
    pitch: usize,
    step: usize,
    width: usize,
    w: &Weights,
    acc: &mut [i32],
) {
    let w = *w;
    #[cfg(onnx_codegen_arm_dsp)]
    let rows = acc.len() / width.max(1);
    #[cfg(onnx_codegen_arm_dsp)]
    if width >= 2 && rows >= 1 {
        // SAFETY: as in `rows_s1`, two bytes a window.
        unsafe { rows_asm::<SIGNED, true>(p, pitch, step, width, rows, &w, acc.as_mut_ptr()) };
        return;
    }
    let mut top = p;
    for a in acc.chunks_exact_mut(width.max(1)) {
        for (i, a) in a.iter_mut().enumerate() {
            // SAFETY: the caller's bound at window `i`.
            *a = unsafe { single::<SIGNED>(top.wrapping_add(2 * i), pitch, &w) };
        }
        top = top.wrapping_add(step);
    }
}

/// A window row's word at `$at` split into `{e}` (bytes 0 and 2) and `{o}`
/// (bytes 1 and 3) by `$x` (`SXTB16`, `UXTB16`).
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! split_row_asm {
    ($x:literal, $at:literal) => {
        concat!("ldr {o}, ", $at, "\n", $x, " {e}, {o}\n", $x, " {o}, {o}, ror #8\n")
    };
}

/// The window pair of [`rows_asm`]'s loop: per window row a load, two
/// extensions and four multiply-accumulates; the two sums stored by
/// `STRD`. `(w0, w2)` and `(w7, 0)` take turns in one register, reloaded
/// from two stack words.
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! pair_asm {
    ($x:literal) => {
        concat!(
            "ldr {w0}, [sp]\n",
            split_row_asm!($x, "[{p}]"),
            "smuad r2, {e}, {w0}\n",
            "smlabb r2, {o}, {m01}, r2\n",
            "smuad r3, {o}, {w0}\n",
            "smlatb r3, {e}, {m01}, r3\n",
            split_row_asm!($x, "[{p}, {pitch}]"),
            "smlad r2, {e}, {w1}, r2\n",
            "smlabt r2, {o}, {m01}, r2\n",
            "smlad r3, {o}, {w1}, r3\n",
            "smlatt r3, {e}, {m01}, r3\n",
            split_row_asm!($x, "[{p}, {pitch}, lsl #1]"),
            "ldr {w0}, [sp, #4]\n",
            "smlad r2, {e}, {w2}, r2\n",
            "smlabb r2, {o}, {w0}, r2\n",
            "smlad r3, {o}, {w2}, r3\n",
            "smlatb r3, {e}, {w0}, r3\n",
            "adds {p}, {p}, #2\n",
            "strd r2, r3, [{acc}], #8\n",
        )
    };
}

/// The window pair of [`rows_asm`]'s loop at stride 2: windows at `p` and
/// `p + 2`. Per window row the word at `p` gives bytes 0-3 (`(b0, b2)`
/// and `(b1, b3)`), a byte load `b4`: the first window is `(b0, b2)·(w0,
/// w2) + b1 w1`, the second `b2 w0 + b3 w1 + b4 w2`, five
/// multiply-accumulates. `$b` is the byte load (`LDRSB`, `LDRB`).
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! pair_s2_asm {
    ($x:literal, $b:literal) => {
        concat!(
            "ldr {w0}, [sp]\n",
            split_row_asm!($x, "[{p}]"),
            "smuad r2, {e}, {w0}\n",
            "smlabb r2, {o}, {m01}, r2\n",
            "smultb r3, {e}, {w0}\n",
            "smlatb r3, {o}, {m01}, r3\n",
            $b,
            " {e}, [{p}, #4]\n",
            "smlabt r3, {e}, {w0}, r3\n",
            split_row_asm!($x, "[{p}, {pitch}]"),
            "smlad r2, {e}, {w1}, r2\n",
            "smlabt r2, {o}, {m01}, r2\n",
            "smlatb r3, {e}, {w1}, r3\n",
            "smlatt r3, {o}, {m01}, r3\n",
            "add {e}, {p}, {pitch}\n",
            $b,
            " {e}, [{e}, #4]\n",
            "smlabt r3, {e}, {w1}, r3\n",
            split_row_asm!($x, "[{p}, {pitch}, lsl #1]"),
            "ldr {w0}, [sp, #4]\n",
            "smlad r2, {e}, {w2}, r2\n",
            "smlabb r2, {o}, {w0}, r2\n",
            "smlatb r3, {e}, {w2}, r3\n",
            "smlatb r3, {o}, {w0}, r3\n",
            "add {e}, {p}, {pitch}, lsl #1\n",
            $b,
            " {e}, [{e}, #4]\n",
            "smlabt r3, {e}, {w2}, r3\n",
            "adds {p}, {p}, #4\n",
            "strd r2, r3, [{acc}], #8\n",
        )
    };
}

/// The last window of an odd row in [`rows_asm`]: [`single`]'s steps,
/// the sum stored by `STR` (`{p}` is not moved).
#[cfg(onnx_codegen_arm_dsp)]
macro_rules! last_asm {
    ($x:literal) => {
        concat!(
            "ldr {w0}, [sp]\n",
            split_row_asm!($x, "[{p}]"),
            "smuad r2, {e}, {w0}\n",
            "smlabb r2, {o}, {m01}, r2\n",
            split_row_asm!($x, "[{p}, {pitch}]"),
            "smlad r2, {e}, {w1}, r2\n",
            "smlabt r2, {o}, {m01}, r2\n",
            split_row_asm!($x, "[{p}, {pitch}, lsl #1]"),
            "ldr {w0}, [sp, #4]\n",
            "smlad r2, {e}, {w2}, r2\n",
            "smlabb r2, {o}, {w0}, r2\n",
            "str r2, [{acc}], #4\n",
        )
    };
}

/// [`rows_s1`] (`S2`: [`rows_s2`]) in assembly: every row of the piece in
/// one loop. A window pair takes 25 instructions (33 at stride 2, where
/// the rest of the Rust loop's single windows took about 27 each) and the
/// loop's two; an odd row's last window 18; a row's end 7 (its pair count from the stack, the step to
/// the next row, the count of rows left). Twelve registers are live, all
/// the asm may have (LLVM's loop spilled and took 44 instructions a pair,
/// and a call per row added about 35 more): the stack holds `(w0, w2)`
/// and `(w7, 0)` (taking turns in one register), the pairs of a row, the
/// rows left and the step from a row's last pair to the next row.
///
/// # Safety
/// `p + r * step + k * pitch + i..+ 4` is readable for `r < rows`, `k <
/// 3`, `i < width`; `acc..+ rows * width` is writable and word-aligned
/// (`STRD`); `width >= 2`, `rows >= 1`.
#[cfg(onnx_codegen_arm_dsp)]
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn rows_asm<const SIGNED: bool, const S2: bool>(
    p: *const u8,
    pitch: usize,
    step: usize,
    width: usize,
    rows: usize,
    w: &Weights,
    acc: *mut i32,
) {
    debug_assert!(width >= 2 && rows >= 1 && (acc as usize).is_multiple_of(4));
    let pairs = width / 2;
    // From the row's start plus its pairs' `2 pairs` bytes (`4 pairs` at
    // stride 2) to the next row.
    let adv = step.wrapping_sub(if S2 { 4 * pairs } else { 2 * pairs });
    macro_rules! body {
        ($pair:expr, $x:literal, $last:tt) => {
            // SAFETY: the caller's bounds; the five stack words are pushed
            // and popped by the asm itself (so no `nostack`); flags:
            // `SUBS` and `SMLAD`'s sticky Q, which nothing reads.
            unsafe {
                core::arch::asm!(
                    "str {e}, [sp, #-4]!",
                    "str {o}, [sp, #-4]!",
                    "str r3, [sp, #-4]!",
                    "str r2, [sp, #-4]!",
                    "str {w0}, [sp, #-4]!",
                    "4:",
                    "ldr {n}, [sp, #8]",
                    "2:",
                    $pair,
                    "subs {n}, {n}, #1",
                    "bne 2b",
                    body!(@last $x, $last),
                    "ldr {e}, [sp, #16]",
                    "add {p}, {p}, {e}",
                    "ldr {e}, [sp, #12]",
                    "subs {e}, {e}, #1",
                    "str {e}, [sp, #12]",
                    "bne 4b",
                    "add sp, sp, #20",
                    p = inout(reg) p => _,
                    pitch = in(reg) pitch,
                    acc = inout(reg) acc => _,
                    n = out(reg) _,
                    w0 = inout(reg) w.outer[0] => _,
                    w1 = in(reg) w.outer[1],
                    w2 = in(reg) w.outer[2],
                    m01 = in(reg) w.mid01,
                    // `STRD` takes an even register and the next in the
                    // Arm (A32) state: `r2`, `r3` (the pair's sums) bring
                    // `(w7, 0)` and the pairs of a row in, `e` and `o` the
                    // step and the rows.
                    inout("r2") w.mid2 => _,
                    inout("r3") pairs => _,
                    e = inout(reg) adv => _,
                    o = inout(reg) rows => _,
                );
            }
        };
        (@last $x:literal, odd) => { last_asm!($x) };
        (@last $x:literal, even) => { "" };
    }
    match (SIGNED, S2, width % 2 == 1) {
        (true, false, true) => body!(pair_asm!("sxtb16"), "sxtb16", odd),
        (true, false, false) => body!(pair_asm!("sxtb16"), "sxtb16", even),
        (false, false, true) => body!(pair_asm!("uxtb16"), "uxtb16", odd),
        (false, false, false) => body!(pair_asm!("uxtb16"), "uxtb16", even),
        (true, true, true) => body!(pair_s2_asm!("sxtb16", "ldrsb"), "sxtb16", odd),
        (true, true, false) => body!(pair_s2_asm!("sxtb16", "ldrsb"), "sxtb16", even),
        (false, true, true) => body!(pair_s2_asm!("uxtb16", "ldrb"), "uxtb16", odd),
        (false, true, false) => body!(pair_s2_asm!("uxtb16", "ldrb"), "uxtb16", even),
    }
}

/// The sums of the windows at `p` and `p + 1` (stride 1).
///
/// # Safety
/// `p + r * pitch..+ 4` is readable for `r < 3`.
#[inline(always)]
unsafe fn pair<const SIGNED: bool>(p: *const u8, pitch: usize, w: &Weights) -> (i32, i32) {
    // SAFETY: the caller's bound (unaligned `LDR`s).
    let row = |r: usize| u32::from_le(unsafe { p.add(r * pitch).cast::<u32>().read_unaligned() });
    let (e, o) = split::<SIGNED>(row(0));
    let (mut a, mut b) = (smlabb(o, w.mid01, smlad(e, w.outer[0], 0)), 0);
    b = smlatb(e, w.mid01, smlad(o, w.outer[0], b));
    let (e, o) = split::<SIGNED>(row(1));
    a = smlabt(o, w.mid01, smlad(e, w.outer[1], a));
    b = smlatt(e, w.mid01, smlad(o, w.outer[1], b));
    let (e, o) = split::<SIGNED>(row(2));
    a = smlabb(o, w.mid2, smlad(e, w.outer[2], a));
    b = smlatb(e, w.mid2, smlad(o, w.outer[2], b));
    (a, b)
}

/// The sum of the window at `p`.
///
/// # Safety
/// As [`pair`].
#[inline(always)]
unsafe fn single<const SIGNED: bool>(p: *const u8, pitch: usize, w: &Weights) -> i32 {
    // SAFETY: the caller's bound.
    let row = |r: usize| u32::from_le(unsafe { p.add(r * pitch).cast::<u32>().read_unaligned() });
    let (e, o) = split::<SIGNED>(row(0));
    let a = smlabb(o, w.mid01, smlad(e, w.outer[0], 0));
    let (e, o) = split::<SIGNED>(row(1));
    let a = smlabt(o, w.mid01, smlad(e, w.outer[1], a));
    let (e, o) = split::<SIGNED>(row(2));
    smlabb(o, w.mid2, smlad(e, w.outer[2], a))
}
