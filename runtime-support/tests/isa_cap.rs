//! The ISA cap through the public API, in a process of its own: the cap is
//! global, and the unit tests (running in parallel) must not see it change.

use onnx_codegen_runtime::gemm::{Gemm, Post, Weights, gemm, sgemm};
use onnx_codegen_runtime::simd::{Isa, max_isa, set_max_isa, uses_fma};

/// Whether this CPU runs fused kernels under `cap`.
fn fused_under(cap: Isa) -> bool {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    return cap >= Isa::Avx2
        && std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("fma");
    #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
    return cap > Isa::Portable;
    // Arm FPUs with VFMA (Cortex-M4F, ARMv7 with +vfp4): the fused kernels.
    #[cfg(onnx_codegen_arm_fma)]
    return cap > Isa::Portable;
    #[allow(unreachable_code)]
    {
        let _ = cap;
        false
    }
}

#[test]
fn each_cap_takes_its_path_and_portable_is_exact() {
    let before = max_isa();
    let (m, n, k) = (13, 70, 300);
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 37) % 101) as f32 / 64.0 - 0.75).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 53) % 97) as f32 / 32.0 - 1.5).collect();
    let p =
        Gemm { m, n, k, trans_a: false, trans_b: false, alpha: 1.0, beta: 0.0, c_strides: [0, 0] };
    let mut exact = vec![0.0f32; m * n];
    gemm(&p, &a, &b, None, &mut exact).unwrap();
    for cap in [Isa::Portable, Isa::Avx2, Isa::AvxVnni, Isa::Avx512, Isa::Portable] {
        set_max_isa(cap);
        assert_eq!(max_isa(), cap);
        assert_eq!(uses_fma(), fused_under(cap), "{cap:?}");
        let mut y = vec![f32::NAN; m * n];
        sgemm(&p, &a, Weights::Dense(&b), None, &mut y, &Post::NONE).unwrap();
        for (i, (g, w)) in y.iter().zip(&exact).enumerate() {
            if uses_fma() {
                assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{cap:?} [{i}]: {g} vs {w}");
            } else {
                // The portable kernel multiplies then adds in the exact order.
                assert_eq!(g.to_bits(), w.to_bits(), "{cap:?} [{i}]: {g} vs {w}");
            }
        }
    }
    set_max_isa(before);
}

#[test]
fn names_are_the_variable_values() {
    let names = [
        ("portable", Isa::Portable),
        ("avx2", Isa::Avx2),
        ("avxvnni", Isa::AvxVnni),
        ("avx512", Isa::Avx512),
    ];
    for (name, isa) in names {
        assert_eq!(Isa::from_name(name), Some(isa));
        assert_eq!(isa.name(), name);
    }
    assert_eq!(Isa::ALL.map(|isa| isa.name()), names.map(|(name, _)| name));
    assert_eq!(onnx_codegen_runtime::simd::MAX_ISA_VAR, "ONNX_CODEGEN_MAX_ISA");
}
