//! What the two firmware images share (`kws`: the float32 DS-CNN; `kws_int8`:
//! its int8 version, quantized by onnxruntime): checking the output against
//! onnxruntime's, measuring the stack by painting and the work of one
//! inference by SysTick, reporting over semihosting, and exiting QEMU.
#![no_std]

use core::panic::PanicInfo;
use cortex_m_semihosting::{debug, hprintln};

pub mod count;
pub mod stack;

/// Fills `out` from little-endian f32 bytes.
pub fn read_f32s(bytes: &[u8], out: &mut [f32]) {
    for (x, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        *x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

/// Runs a keyword-spotting model once on the reference data and checks it:
/// `run` maps the 490 MFCC features to the 12 class probabilities and says
/// whether it succeeded; `input` and `expected` are little-endian f32
/// bytes; `weights` and `arena` are the model's sizes. Starts SysTick,
/// paints the stack around the run, reports and exits QEMU.
pub fn run_kws(
    name: &str,
    (weights, arena): (usize, usize),
    (input, expected): (&[u8], &[u8]),
    (atol, rtol): (f32, f32),
    run: impl FnOnce(&[f32; 490], &mut [f32; 12]) -> bool,
) -> ! {
    let peripherals = cortex_m::Peripherals::take().unwrap_or_else(|| fail("peripherals taken"));
    count::start(peripherals.SYST);
    let mut features = [0.0f32; 490];
    let mut want = [0.0f32; 12];
    read_f32s(input, &mut features);
    read_f32s(expected, &mut want);
    let mut probs = [0.0f32; 12];
    let painted = stack::paint();
    let (ok, work) = count::measure(|| run(&features, &mut probs));
    if !ok {
        fail("the model returned an error");
    }
    let stack = stack::used(painted);
    let report = Report { model: name, weights, arena, stack, work };
    check(&probs, &want, atol, rtol, &report)
}

/// What one run of a model took.
pub struct Report<'a> {
    pub model: &'a str,
    pub weights: usize,
    pub arena: usize,
    pub stack: usize,
    pub work: count::Work,
}

/// Compares `probs` with `expected` (|got - want| <= atol + rtol * |want|),
/// prints the result, the memory and the instruction count, and exits QEMU
/// with success or failure.
pub fn check(probs: &[f32], expected: &[f32], atol: f32, rtol: f32, r: &Report<'_>) -> ! {
    let mut ok = probs.len() == expected.len();
    let mut worst = 0.0f32;
    for (k, (&got, &want)) in probs.iter().zip(expected).enumerate() {
        let err = (got - want).abs();
        worst = worst.max(err);
        if err > atol + rtol * want.abs() {
            hprintln!("class {}: got {} ppm, expected {} ppm", k, ppm(got), ppm(want));
            ok = false;
        }
    }
    let best = probs.iter().enumerate().fold(0, |b, (k, &p)| if p > probs[b] { k } else { b });
    hprintln!(
        "{}: class {} (p = {} ppm), max |error| {} ppb",
        r.model,
        best,
        ppm(probs[best]),
        (worst * 1e9) as u32
    );
    hprintln!(
        "memory: weights {} B, flash used {} B (code {} B), arena {} B (RAM), stack used by run {} B",
        r.weights,
        flash::used(),
        flash::code(),
        r.arena,
        r.stack
    );
    hprintln!(
        "work: {} instructions per inference ({} SysTick ticks; calibration: {} instructions took {} ticks)",
        r.work.instructions(),
        r.work.ticks,
        count::CALIBRATION_INSTRUCTIONS,
        r.work.calibration_ticks
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
pub fn halt() -> ! {
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
pub fn fail(why: &str) -> ! {
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

/// Flash use, from the symbols cortex-m-rt's linker script defines.
mod flash {
    unsafe extern "C" {
        static __stext: u8;
        static __etext: u8;
        static __sdata: u8;
        static __edata: u8;
        static __sidata: u8;
    }

    /// The flash origin in `memory.x`.
    const ORIGIN: usize = 0;

    /// Bytes of `.text` (the code).
    pub fn code() -> usize {
        // Only the symbols' addresses are taken (no read): safe.
        (&raw const __etext as usize) - (&raw const __stext as usize)
    }

    /// Bytes of flash in use: the vector table, code, read-only data (the
    /// weights among them) and the initial values of `.data`.
    pub fn used() -> usize {
        let data = (&raw const __edata as usize) - (&raw const __sdata as usize);
        (&raw const __sidata as usize) + data - ORIGIN
    }
}
