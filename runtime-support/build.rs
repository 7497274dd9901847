//! Tells the kernels whether the target has the Arm DSP extension
//! (`SMLAD`, `SXTB16`, ...: Cortex-M4/M7, Cortex-M33/M55/M85 with it,
//! every ARMv7-A/R core), as `cfg(onnx_codegen_arm_dsp)`, and whether it
//! has a hard-float single-precision FPU with fused multiply-add
//! (`VFMA.F32`: FPv4-SP and later, Cortex-M4F/M7F/M33F/M55/M85), as
//! `cfg(onnx_codegen_arm_fma)`.
//!
//! Stable Rust does not expose Arm target features to `cfg`, so this reads
//! the target's name and any `-C target-feature=+dsp/-dsp` or
//! `-C target-cpu=...` in the flags Cargo passes.

use std::env;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(onnx_codegen_arm_dsp)");
    println!("cargo::rustc-check-cfg=cfg(onnx_codegen_arm_fma)");
    let target = env::var("TARGET").unwrap_or_default();
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    // `-C target-feature=+dsp`, `-Ctarget-feature=...` and `-C` `...` alike.
    let codegen: Vec<&str> = flags
        .split('\x1f')
        .map(|a| a.strip_prefix("-C").unwrap_or(a))
        .filter(|a| !a.is_empty())
        .collect();
    let cpu = codegen.iter().rev().find_map(|a| a.strip_prefix("target-cpu="));
    let mut dsp = if target.starts_with("thumbv7em") {
        true
    } else if target.starts_with("thumbv8m.main") {
        // The DSP extension is optional on ARMv8-M Mainline.
        matches!(cpu, Some("cortex-m33" | "cortex-m35p" | "cortex-m55" | "cortex-m85"))
    } else {
        // ARMv7-A and -R have the instructions in their base set.
        ["armv7", "thumbv7neon", "armv7a", "armv7r"].iter().any(|p| target.starts_with(p))
    };
    for list in codegen.iter().filter_map(|a| a.strip_prefix("target-feature=")) {
        for f in list.split(',') {
            match f {
                "+dsp" => dsp = true,
                "-dsp" => dsp = false,
                _ => {}
            }
        }
    }
    if dsp && (target.starts_with("arm") || target.starts_with("thumb")) {
        println!("cargo::rustc-cfg=onnx_codegen_arm_dsp");
    }
    if arm_fma(&target, &codegen) {
        println!("cargo::rustc-cfg=onnx_codegen_arm_fma");
    }
}

/// Whether the float kernels may use `VFMA.F32` on single-precision
/// registers: a hard-float ABI (values in `s0`-`s31`) on an M-profile core
/// whose FPU has it (FPv4-SP on ARMv7E-M, FPv5 on ARMv8-M Mainline), or any
/// Arm hard-float target built with `+vfp4` or `+fp-armv8`; never with
/// `-vfp4`, `-fpregs` or `+soft-float`.
fn arm_fma(target: &str, codegen: &[&str]) -> bool {
    if !target.ends_with("eabihf") || !(target.starts_with("arm") || target.starts_with("thumb")) {
        return false;
    }
    let mut fma = target.starts_with("thumbv7em") || target.starts_with("thumbv8m.main");
    for list in codegen.iter().filter_map(|a| a.strip_prefix("target-feature=")) {
        for f in list.split(',') {
            match f {
                "+vfp4" | "+vfp4sp" | "+vfp4d16" | "+vfp4d16sp" | "+fp-armv8" | "+fp-armv8d16"
                | "+fp-armv8d16sp" | "+fp-armv8sp" => fma = true,
                "-vfp4" | "-vfp4sp" | "-vfp4d16sp" | "-fpregs" | "+soft-float" => fma = false,
                _ => {}
            }
        }
    }
    fma
}
