//! The work of one inference, counted by SysTick.
//!
//! Under QEMU with `-icount shift=0` (the runner in `.cargo/config.toml`),
//! virtual time advances by one nanosecond per instruction executed, and
//! SysTick counts that time at the core clock: ticks are proportional to
//! instructions. A loop of known length ([`CALIBRATION_INSTRUCTIONS`])
//! measures the ratio, so [`Work::instructions`] is the count of
//! instructions `run` executed. On a board, SysTick counts core cycles
//! instead and the same numbers are cycles.
//!
//! SysTick is a 24-bit down-counter: its exception counts the wraps.

use core::sync::atomic::{AtomicU32, Ordering};
use cortex_m::peripheral::SYST;
use cortex_m::peripheral::syst::SystClkSource;
use cortex_m_rt::exception;

/// The counter's reload value: it counts `RELOAD + 1` ticks per wrap.
const RELOAD: u32 = 0x00FF_FFFF;

/// Wraps of the counter since [`start`].
static WRAPS: AtomicU32 = AtomicU32::new(0);

#[exception]
fn SysTick() {
    WRAPS.fetch_add(1, Ordering::Relaxed);
}

/// Iterations of the calibration loop (two instructions each).
const LOOPS: u32 = 1_000_000;
/// Instructions the calibration loop executes: `subs` and `bne` per
/// iteration (QEMU counts a taken branch as one instruction).
pub const CALIBRATION_INSTRUCTIONS: u64 = 2 * LOOPS as u64;

/// Starts SysTick on the core clock, its wrap exception enabled.
pub fn start(mut syst: SYST) {
    syst.set_clock_source(SystClkSource::Core);
    syst.set_reload(RELOAD);
    syst.clear_current();
    syst.enable_interrupt();
    syst.enable_counter();
}

/// Ticks since [`start`].
pub fn ticks() -> u64 {
    loop {
        let before = WRAPS.load(Ordering::Relaxed);
        let current = SYST::get_current();
        // A wrap between the two reads would pair the new count with the
        // old wraps: read again.
        if WRAPS.load(Ordering::Relaxed) == before {
            return u64::from(before) * u64::from(RELOAD + 1) + u64::from(RELOAD - current);
        }
    }
}

/// SysTick ticks of a loop of [`CALIBRATION_INSTRUCTIONS`] instructions.
pub fn calibrate() -> u64 {
    let t0 = ticks();
    let n = LOOPS;
    // SAFETY: a register loop that only decrements its own operand.
    unsafe {
        core::arch::asm!(
            "2:",
            "subs {n}, {n}, #1",
            "bne 2b",
            n = inout(reg) n => _,
            options(nomem, nostack),
        );
    }
    ticks() - t0
}

/// The SysTick ticks of a run, with the calibration that converts them.
pub struct Work {
    pub ticks: u64,
    pub calibration_ticks: u64,
}

impl Work {
    /// Instructions executed (rounded to the nearest).
    pub fn instructions(&self) -> u64 {
        let c = self.calibration_ticks.max(1);
        (self.ticks * CALIBRATION_INSTRUCTIONS + c / 2) / c
    }
}

/// Runs `f`, returning what it returned and its work.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Work) {
    let calibration_ticks = calibrate();
    let t0 = ticks();
    let out = f();
    let ticks = ticks() - t0;
    (out, Work { ticks, calibration_ticks })
}
