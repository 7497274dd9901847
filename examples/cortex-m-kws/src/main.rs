//! Firmware for a Cortex-M4F (QEMU `mps2-an386`): the MLPerf-Tiny
//! keyword-spotting DS-CNN compiled into Rust by `onnx_model!`, run once on
//! the reference input, its output checked against onnxruntime's.
//!
//! No heap: the model's arena is a `static` (placed by `cortex_m::singleton!`),
//! the weights are read-only data in flash. The firmware prints what it found
//! and its memory use over semihosting and exits with success or failure, so
//! `cargo run --release` (QEMU is the runner) is a test.
#![no_std]
#![no_main]

use core::panic::PanicInfo;
use cortex_m_rt::entry;
use cortex_m_semihosting::{debug, hprintln};

onnx_codegen_macros::onnx_model!("model/kws_dscnn.onnx", name = Kws);

/// The reference input (1x1x49x10 MFCC features) and onnxruntime's output
/// (12 class probabilities), as little-endian f32 (see build.rs).
const INPUT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/input_0.f32"));
const EXPECTED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/output_0.f32"));

/// The tolerance of the model tests: |got - expected| <= ATOL + RTOL * |expected|.
const RTOL: f32 = 1e-3;
const ATOL: f32 = 1e-4;

/// Fills `out` from little-endian f32 bytes.
fn read_f32s(bytes: &[u8], out: &mut [f32]) {
    for (x, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

#[entry]
fn main() -> ! {
    let painted = stack::paint();
    let model: &'static mut Kws =
        cortex_m::singleton!(: Kws = Kws::new()).unwrap_or_else(|| fail("model taken twice"));
    let mut input = [0.0f32; 490];
    let mut expected = [0.0f32; 12];
    read_f32s(INPUT, &mut input);
    read_f32s(EXPECTED, &mut expected);
    let mut probs = [0.0f32; 12];
    if model.run(&input, &mut probs).is_err() {
        fail("the model returned an error");
    }
    let used = stack::used(painted);

    let mut ok = true;
    let mut worst = 0.0f32;
    for (k, (&got, &want)) in probs.iter().zip(&expected).enumerate() {
        let err = (got - want).abs();
        worst = worst.max(err);
        if err > ATOL + RTOL * want.abs() {
            hprintln!("class {}: got {} ppm, expected {} ppm", k, ppm(got), ppm(want));
            ok = false;
        }
    }
    let best = probs.iter().enumerate().fold(0, |b, (k, &p)| if p > probs[b] { k } else { b });
    hprintln!(
        "kws_dscnn: class {} (p = {} ppm), max |error| {} ppb",
        best,
        ppm(probs[best]),
        (worst * 1e9) as u32
    );
    hprintln!(
        "memory: weights {} B (flash), arena {} B (RAM), stack used by run {} B",
        Kws::WEIGHT_BYTES,
        Kws::ARENA_BYTES,
        used
    );
    if ok {
        hprintln!("PASS: output matches the reference");
        debug::exit(debug::EXIT_SUCCESS);
    } else {
        hprintln!("FAIL: output differs from the reference");
        debug::exit(debug::EXIT_FAILURE);
    }
    halt()
}

/// Stops here for good (the semihosting exit above ends QEMU; on a board
/// without a debugger attached, the core sleeps).
fn halt() -> ! {
    loop {
        cortex_m::asm::wfi();
    }
}

/// A probability in parts per million. Integers keep the float formatting
/// code of `core::fmt` (some 20 KB) out of the firmware.
fn ppm(p: f32) -> i32 {
    (p * 1e6) as i32
}

/// Reports `why` and exits QEMU with failure.
fn fail(why: &str) -> ! {
    hprintln!("FAIL: {}", why);
    debug::exit(debug::EXIT_FAILURE);
    halt()
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    hprintln!("panic: {}", info);
    debug::exit(debug::EXIT_FAILURE);
    halt()
}

/// Stack high-water mark by painting: the free stack below the current
/// stack pointer is filled with a pattern before the model runs, and the
/// deepest word no longer holding it afterwards shows how far the stack grew.
mod stack {
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
}
