//! The GEMM driver's tests: every micro-kernel this CPU runs against the
//! portable one (the exact arithmetic) or plain sums, over awkward shapes,
//! every epilogue, panel and strided A, B packed and read in place; the
//! vector products and B's packing. The helpers that say which kernels can
//! run (and print `skipped:` for those that cannot) are
//! [`crate::simd::tests`]'s, shared with the other kernels' tests.

use super::*;
use crate::simd::gemm::epilogue::*;
use crate::simd::gemm::micro::portable::*;
use crate::simd::gemm::pack::*;
use crate::simd::tests::fill;
#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
use crate::simd::tests::neon;
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
use crate::simd::tests::{avx2, avx512, out_of_bounds};

const A_LEN: usize = 40 * 300 + 7;
const Y_LEN: usize = 300 * 43;

/// The epilogues the fast paths must reproduce, by index.
fn epilogue<'a>(which: usize, bias: &'a [f32], c: &'a [f32], ldc: usize) -> Epilogue<'a> {
    match which % 9 {
        0 => Epilogue::NONE,
        1 => Epilogue::bias_act(Some(bias), Activation::Relu),
        2 => Epilogue {
            alpha: 0.5,
            row_bias: None,
            c: Some(CTerm { data: c, rs: 0, cs: 1, beta: 2.0 }),
            act: Activation::Clip { min: -0.5, max: 0.75 },
            ..Epilogue::NONE
        },
        3 => Epilogue {
            alpha: -1.5,
            row_bias: None,
            c: Some(CTerm { data: c, rs: ldc, cs: 1, beta: 0.25 }),
            act: Activation::LeakyRelu { alpha: 0.1 },
            ..Epilogue::NONE
        },
        4 => Epilogue {
            alpha: 1.0,
            row_bias: None,
            c: Some(CTerm { data: c, rs: 1, cs: 0, beta: -1.0 }),
            act: Activation::None,
            ..Epilogue::NONE
        },
        5 => Epilogue {
            alpha: 2.0,
            row_bias: Some(bias),
            c: Some(CTerm { data: c, rs: ldc, cs: 2, beta: 1.0 }),
            act: Activation::Relu,
            ..Epilogue::NONE
        },
        // A residual of the output's layout, after a bias row, then GELU.
        6 => Epilogue {
            c: Some(CTerm { data: c, rs: 0, cs: 1, beta: 1.0 }),
            res: Some(Residual { data: &c[7..], rs: ldc }),
            smooth: Some(Smooth::Gelu),
            ..Epilogue::NONE
        },
        // HardSwish after a bias row and Clip.
        8 => Epilogue {
            smooth: Some(Smooth::HardSwish),
            ..Epilogue::bias_act(Some(bias), Activation::Clip { min: -4.0, max: 0.5 })
        },
        // A residual alone, with a per-row bias and Relu after it.
        _ => Epilogue {
            alpha: -0.5,
            res: Some(Residual { data: c, rs: ldc }),
            smooth: Some(if ldc.is_multiple_of(2) { Smooth::GeluTanh } else { Smooth::Silu }),
            ..Epilogue::bias_act(Some(bias), Activation::Relu)
        },
    }
}

/// Runs `kern` and the portable kernel (the exact arithmetic) on one
/// product and compares within rounding; `y` rows are `ldy` apart and
/// the gaps between them must be left alone.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
fn check<K: Micro>(kern: K, m: usize, n: usize, k: usize, trans_a: bool, which: usize) {
    let (mut a, mut b) = ([0.0f32; A_LEN], [0.0f32; A_LEN]);
    fill(&mut a, (m * 131 + n * 7 + k) as u32);
    fill(&mut b, (k * 17 + n) as u32);
    let (mut bias, mut c) = ([0.0f32; 300], [0.0f32; 2 * Y_LEN]);
    fill(&mut bias, 5);
    fill(&mut c, 6);
    let ldy = n + 3;
    let va = if trans_a {
        ViewA { data: &a, off: 7, rs: 1, cs: m }
    } else {
        ViewA { data: &a, off: 7, rs: k, cs: 1 }
    };
    let vb = DenseB { data: &b[..k * n], rs: n, cs: 1 };
    let epi = epilogue(which, &bias, &c, ldy);
    let (mut want, mut got) = ([9.0f32; Y_LEN], [9.0f32; Y_LEN]);
    drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy }, &epi).unwrap();
    drive(kern, m, n, k, va, &vb, Out { y: &mut got, ldy }, &epi).unwrap();
    for i in 0..m {
        for j in 0..ldy {
            let (g, w) = (got[i * ldy + j], want[i * ldy + j]);
            if j >= n {
                assert_eq!(g, 9.0, "gap written at ({i}, {j}), {m}x{n}x{k}");
                continue;
            }
            let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
            assert!(
                (g - w).abs() <= tol * (1.0 + w.abs()),
                "({i}, {j}) of {m}x{n}x{k} ta {trans_a} epi {which}: {g} vs {w}"
            );
        }
    }
    assert!(got[m * ldy..].iter().all(|&v| v == 9.0));
}

#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
fn sweep<K: Micro>(kern: K) {
    let ms = [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 16, 17, 23, 31, 33, 40];
    let ns = [1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40];
    let ks = [1, 2, 3, 5, 16, 17, 40, 257, 300];
    let mut which = 0;
    for &m in &ms {
        for &n in &ns {
            for &k in &ks {
                which += 1;
                check(kern, m, n, k, which % 3 == 0, which);
            }
        }
    }
    // More rows than one block of A (`MC`).
    for (m, n, k) in [(260, 5, 3), (130, 33, 2), (299, 17, 40), (520, 9, 20)] {
        for which in 0..8 {
            check(kern, m, n, k, which % 2 == 0, which);
        }
    }
}

#[test]
fn portable_kernel_matches_the_exact_arithmetic_elsewhere() {
    // Portable<4> (the Cortex-M width) against Portable<8>, bit for bit.
    for (m, n, k) in [(1, 1, 1), (5, 9, 300), (13, 5, 17), (4, 4, 4)] {
        let (mut a, mut b) = ([0.0f32; A_LEN], [0.0f32; A_LEN]);
        fill(&mut a, 1);
        fill(&mut b, 2);
        let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
        let vb = DenseB { data: &b, rs: n, cs: 1 };
        let (mut want, mut got) = ([0.0f32; Y_LEN], [0.0f32; Y_LEN]);
        let epi = Epilogue::bias_act(Some(&a[..m]), Activation::Relu);
        drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
        drive(Portable::<4>, m, n, k, va, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
        assert_eq!(got, want);
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx2_kernel_matches_portable_on_awkward_sizes() {
    if let Some(kern) = avx2() {
        sweep(kern);
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn avx512_kernel_matches_portable_on_awkward_sizes() {
    if let Some(kern) = avx512() {
        sweep(kern);
    }
}

#[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
#[test]
fn neon_kernel_matches_portable_on_awkward_sizes() {
    if let Some(kern) = neon() {
        sweep(kern);
        check_special(kern);
    }
}

/// `kern` on A packed in panels against the portable kernel on the
/// same A strided: equal within rounding (bit for bit when `kern` is
/// the portable kernel), whatever the kernel's tile height.
fn check_panels<K: Micro>(kern: K) {
    for (m, n, k) in
        [(1usize, 1, 1), (3, 7, 5), (8, 33, 17), (9, 40, 257), (13, 5, 300), (40, 9, 3)]
    {
        let mut a = [0.0f32; A_LEN];
        fill(&mut a, (m * 7 + k) as u32);
        let mut b = [0.0f32; A_LEN];
        fill(&mut b, (n * 3 + k) as u32);
        let mut bias = [0.0f32; 40];
        fill(&mut bias, 4);
        let mut packed = [f32::NAN; A_LEN];
        let plen = panels_len(m, k).unwrap();
        crate::conv::pack_conv_weights(m, k, &a[..m * k], &mut packed[..plen]).unwrap();
        let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
        let pa = PanelA { data: &packed[..plen], k };
        let vb = DenseB { data: &b[..k * n], rs: n, cs: 1 };
        for epi in [Epilogue::NONE, Epilogue::bias_act(Some(&bias), Activation::Relu)] {
            let (mut want, mut got) = ([9.0f32; Y_LEN], [9.0f32; Y_LEN]);
            drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
            drive(kern, m, n, k, pa, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
                assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{m}x{n}x{k} [{i}]: {g} vs {w}");
            }
        }
        // Too few panels for `m` rows: refused, nothing read.
        let short = PanelA { data: &packed[..plen - 1], k };
        let r = drive(kern, m, n, k, short, &vb, Out { y: &mut [0.0; Y_LEN], ldy: n }, &{
            Epilogue::NONE
        });
        assert_eq!(r, Err(crate::Error::ShapeMismatch));
    }
}

/// An A of more than 256 KiB (the AVX-512 kernel then prefetches it),
/// strided and in panels, against the portable kernel.
#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn large_a_operands_match_portable() {
    let Some(kern) = avx512() else { return };
    let (m, n, k) = (37, 45, 1800);
    let mut a = std::vec![0.0f32; m * k + 5];
    fill(&mut a, 21);
    let mut b = std::vec![0.0f32; k * n];
    fill(&mut b, 22);
    let mut packed = std::vec![0.0f32; panels_len(m, k).unwrap()];
    crate::conv::pack_conv_weights(m, k, &a[5..], &mut packed).unwrap();
    let va = ViewA { data: &a, off: 5, rs: k, cs: 1 };
    let pa = PanelA { data: &packed, k };
    let vb = DenseB { data: &b, rs: n, cs: 1 };
    let epi = Epilogue::bias_act(Some(&a[..m]), Activation::LeakyRelu { alpha: 0.5 });
    let mut want = std::vec![0.0f32; m * n];
    drive(Portable::<8>, m, n, k, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
    for which in 0..2 {
        let mut got = std::vec![f32::NAN; m * n];
        let out = Out { y: &mut got, ldy: n };
        if which == 0 {
            drive(kern, m, n, k, va, &vb, out, &epi).unwrap();
        } else {
            drive(kern, m, n, k, pa, &vb, out, &epi).unwrap();
        }
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{which} [{i}]: {g} vs {w}");
        }
    }
}

/// Products of a short `k` over many columns (B packed, or read in
/// place when there are few rows, in blocks of strips) on `kern`,
/// strided and panel A, against plain sums through [`Epilogue::one`].
fn check_blocks<K: Micro>(kern: K) {
    let shapes = [
        (1usize, 600usize, 1usize),
        (8, 517, 16),
        (13, 700, 3),
        (40, 1030, 17),
        (70, 333, 24),
        (96, 1100, 16),
        (33, 250, 40),
        (9, 129, 64),
        (100, 97, 130),
        (27, 49, 32),
        (160, 49, 600),
        (20, 196, 300),
        (13, 33, 5),
        (9, 18, 70),
        (17, 81, 7),
        (8, 20, 1),
        (19, 49, 131),
        (40, 50, 259),
        (70, 84, 150),
        // Column tails of a whole tile (4, 3, and 4 past 32); every
        // column in a few strips packed at once, with an A large enough
        // to be prefetched (2 and 4 strips).
        (33, 4, 70),
        (9, 3, 200),
        (70, 36, 100),
        (90, 125, 90),
        (130, 49, 1030),
        (75, 100, 1000),
        // Every column in one wide tile (33 to 49 of them): B read in
        // place, over several blocks of `k`, whole and partial panels.
        (24, 41, 300),
        (16, 48, 520),
        (64, 49, 2000),
        (11, 33, 9),
        // Several wide tiles across (98 and 196 columns), B packed, with
        // more rows than one block of A.
        (100, 98, 300),
        (530, 196, 40),
        // Tiles of rows swept across chunks of B read in place: more
        // than one chunk and a partial tile after the swept ones, rows
        // that end in a partial tile, and a single chunk.
        (24, 2 * SWEEP_COLS + 3 * 48 + 17, 16),
        (9, SWEEP_COLS + 100, 5),
        (40, 100, 300),
        (17, 3 * 48, 27),
    ];
    for (t, &(m, n, k)) in shapes.iter().enumerate() {
        let ldy = n + 5;
        let mut a = std::vec![0.0f32; m * k];
        fill(&mut a, (m * 3 + k) as u32);
        let mut b = std::vec![0.0f32; k * n];
        fill(&mut b, (n + k * 5) as u32);
        let mut bias = [0.0f32; 300];
        fill(&mut bias, 8);
        let mut c = std::vec![0.0f32; 2 * m * ldy + 16];
        fill(&mut c, 9);
        let mut packed = std::vec![f32::NAN; panels_len(m, k).unwrap()];
        crate::conv::pack_conv_weights(m, k, &a, &mut packed).unwrap();
        let va = ViewA { data: &a, off: 0, rs: k, cs: 1 };
        let pa = PanelA { data: &packed, k };
        let vb = DenseB { data: &b, rs: n, cs: 1 };
        for which in [0, 1, 3, 6, 7, 8, t] {
            let epi = epilogue(which, &bias, &c, ldy);
            let mut want = std::vec![9.0f32; m * ldy];
            for i in 0..m {
                for j in 0..n {
                    let mut acc = 0.0f32;
                    for p in 0..k {
                        acc += a[i * k + p] * b[p * n + j];
                    }
                    want[i * ldy + j] = epi.one(i, j, acc);
                }
            }
            for panel in [false, true] {
                let mut got = std::vec![9.0f32; m * ldy];
                let out = Out { y: &mut got, ldy };
                if panel {
                    drive(kern, m, n, k, pa, &vb, out, &epi).unwrap();
                } else {
                    drive(kern, m, n, k, va, &vb, out, &epi).unwrap();
                }
                for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                    let tol = 1e-5 * (k as f32 + 1.0) * 4.0;
                    assert!(
                        (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_nan() && w.is_nan()),
                        "{m}x{n}x{k} epi {which} panel {panel} [{i}]: {g} vs {w}"
                    );
                }
            }
        }
    }
}

/// Runs `$check` on the portable kernels and on every SIMD kernel this
/// CPU has.
macro_rules! on_every_kernel {
    ($check:ident) => {
        $check(Portable::<8>);
        $check(Portable::<4>);
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(kern) = avx2() {
            $check(kern);
        }
        #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
        if let Some(kern) = avx512() {
            $check(kern);
        }
        #[cfg(all(target_arch = "aarch64", target_feature = "neon"))]
        if let Some(kern) = neon() {
            $check(kern);
        }
    };
}

#[test]
fn blocks_of_strips_match_plain_sums_on_every_kernel() {
    on_every_kernel!(check_blocks);
}

#[test]
fn panel_operands_match_strided_ones_on_every_kernel() {
    on_every_kernel!(check_panels);
}

#[test]
fn vector_products_match_plain_sums() {
    let (mut a, mut b) = ([0.0f32; 64], [0.0f32; 40 * 41]);
    fill(&mut a, 11);
    fill(&mut b, 12);
    let bias = [0.0f32; 1];
    for n in [1, 2, 7, 8, 9, 15, 16, 17, 25, 40] {
        for k in [1, 2, 15, 16, 17, 31, 33, 40] {
            let va = ViewA { data: &a, off: 3, rs: 0, cs: 1 };
            // B as columns (rows of a transposed B, `k + 1` apart) and as rows.
            for (rs, cs) in [(1, k + 1), (n, 1)] {
                let vb = DenseB { data: &b, rs, cs };
                let mut y = [0.0f32; 40];
                let epi =
                    Epilogue { alpha: -2.0, ..Epilogue::bias_act(Some(&bias), Activation::Relu) };
                vector_product(n, k, va, &vb, &mut y, &epi).unwrap();
                for j in 0..n {
                    let s: f32 = (0..k).map(|p| a[3 + p] * b[p * rs + j * cs]).sum();
                    let want = epi.one(0, j, s);
                    assert!((y[j] - want).abs() <= 1e-5 * k as f32, "{n}x{k} ({rs}, {cs}) at {j}");
                }
            }
        }
    }
}

/// The 1-row product over B in strips: on AVX-512 each output is the
/// chain of fused multiply-adds in ascending `p` from zero, bit for bit,
/// for every grouping of strips (four, two, one) and partial last strip;
/// elsewhere within rounding of the plain sums. The epilogue follows.
#[test]
fn strips_row_products_are_ascending_chains() {
    let mut a = [0.0f32; 70];
    fill(&mut a, 5);
    a[3] = -0.0;
    let mut b = std::vec![0.0f32; 70 * 8 * STRIP];
    fill(&mut b, 6);
    let bias: std::vec::Vec<f32> = (0..8 * STRIP).map(|j| j as f32 * 0.125 - 9.0).collect();
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    let fast = avx512();
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    let fast: Option<()> = None;
    for k in [1, 2, 7, 70] {
        for n in [1usize, 15, 16, 17, 32, 33, 64, 65, 96, 97, 128, 129, 160, 200, 256] {
            let strips = StripsB { data: &b[..n.div_ceil(STRIP) * STRIP * k], k };
            let at = |p: usize, j: usize| b[(j / STRIP) * STRIP * k + p * STRIP + j % STRIP];
            let mut y = std::vec![f32::NAN; n + 3];
            let epi = Epilogue::bias_act(Some(&bias[..n]), Activation::Relu);
            strips_vector_product(n, &a[..k], &strips, &mut y, &epi).unwrap();
            for (j, &got) in y[..n].iter().enumerate() {
                let chain = (0..k).fold(0.0f32, |s, p| a[p].mul_add(at(p, j), s));
                let plain: f32 = (0..k).map(|p| a[p] * at(p, j)).sum();
                let want = epi.one(0, j, chain);
                match fast {
                    Some(_) => assert_eq!(got.to_bits(), want.to_bits(), "{k}x{n} at {j}"),
                    None => assert!(
                        (got - epi.one(0, j, plain)).abs() <= 1e-5 * k as f32,
                        "{k}x{n} at {j}"
                    ),
                }
            }
            assert!(y[n..].iter().all(|v| v.is_nan()), "{k}x{n}: wrote past n");
        }
    }
    // The groups of strips read at once stay within the strips the
    // columns need (the routine reads them through raw pointers: a
    // group past them would read past the weights).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    for n in 1..=12 * STRIP {
        let (mut s, need) = (0, n.div_ceil(STRIP));
        while s * STRIP < n {
            let g = micro::avx512::strips_at_once(n - s * STRIP);
            assert!(s + g <= need, "{n} columns: strips {s}..{} of {need}", s + g);
            s += g;
        }
    }
    // Strips shorter than the columns need: an error, nothing written.
    let strips = StripsB { data: &b[..STRIP * 4], k: 4 };
    let mut y = [7.0f32; 33];
    let r = strips_vector_product(33, &a[..4], &strips, &mut y, &Epilogue::NONE);
    assert_eq!(r, Err(crate::Error::ShapeMismatch));
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    if let Some(f) = fast {
        out_of_bounds(|| f.strips_row(&a[..4], &b[..STRIP * 4], &mut y));
        assert_eq!(y, [7.0; 33]);
    }
}

/// Special values through every activation: NaN stays NaN, the sign of
/// zero and infinities come out as the scalar comparisons give them.
#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
fn check_special<K: Micro>(kern: K) {
    let row = [f32::NAN, -0.0, 0.0, 1.0, -3.0, f32::INFINITY, f32::NEG_INFINITY, 0.5, -0.25];
    let vals: std::vec::Vec<f32> = row.iter().cycle().take(27).copied().collect();
    // Large enough that the smooth activations run tile by tile (more
    // than `SMOOTH_WHOLE` outputs): across swept chunks and the tiles
    // after them, and on 49-wide tiles (a 14x14 output's 196 columns).
    for n in [37 * 16, 196] {
        special_products(kern, &vals, n);
    }
    // More rows than B is read in place for: blocks of packed strips, each
    // row of tiles across a block at once (`Micro::strips`).
    let tall: std::vec::Vec<f32> = row.iter().cycle().take(81).copied().collect();
    special_products(kern, &tall, 37 * 16);
}

#[cfg_attr(not(any(target_arch = "x86_64", target_arch = "aarch64")), allow(dead_code))]
fn special_products<K: Micro>(kern: K, vals: &[f32], n: usize) {
    let m = vals.len();
    let mut b = std::vec![0.0f32; n];
    fill(&mut b, 9);
    for (j, v) in b.iter_mut().enumerate().step_by(37) {
        *v = [1.0, -1.0, 3.0, -6.0][j % 4];
    }
    let acts = [
        Activation::None,
        Activation::Relu,
        Activation::LeakyRelu { alpha: 0.5 },
        Activation::Clip { min: -0.5, max: 0.75 },
    ];
    let smooths = [
        None,
        Some(Smooth::Silu),
        Some(Smooth::Gelu),
        Some(Smooth::HardSwish),
        Some(Smooth::GeluTanh),
    ];
    let c = std::vec![0.0f32; n];
    for (t, act) in acts.into_iter().enumerate() {
        for (u, smooth) in smooths.into_iter().enumerate() {
            let with_c = (t + u) % 2 == 1;
            let epi = Epilogue {
                alpha: 1.0,
                row_bias: None,
                c: with_c.then_some(CTerm { data: &c, rs: 0, cs: 1, beta: 1.0 }),
                act,
                smooth,
                ..Epilogue::NONE
            };
            let va = ViewA { data: vals, off: 0, rs: 1, cs: 1 };
            let vb = DenseB { data: &b, rs: n, cs: 1 };
            let (mut want, mut got) = (std::vec![0.0f32; m * n], std::vec![0.0f32; m * n]);
            drive(Portable::<8>, m, n, 1, va, &vb, Out { y: &mut want, ldy: n }, &epi).unwrap();
            drive(kern, m, n, 1, va, &vb, Out { y: &mut got, ldy: n }, &epi).unwrap();
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()),
                    "{n} {act:?} {smooth:?} [{i}]: {g} vs {w}"
                );
            }
        }
    }
}

#[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
#[test]
fn fast_kernels_keep_special_values_through_activations() {
    if let Some(kern) = avx2() {
        check_special(kern);
    }
    if let Some(kern) = avx512() {
        check_special(kern);
    }
}

#[test]
fn dense_strips_match_the_matrix() {
    // B of 7 rows of 70 (rows 75 apart): full strips of 32, 16 and 8, the
    // last partial one, and rows past the data reading as zero.
    let data: Vec<f32> = (0..7 * 75).map(|i| i as f32 - 200.0).collect();
    let b = DenseB { data: &data[..6 * 75 + 70], rs: 75, cs: 1 };
    for (nr, stride) in [(32, 32), (16, 16), (8, 8), (5, 8), (17, 32), (32, 32)] {
        for p0 in [0, 2] {
            let kc = 7 - p0;
            let mut out = vec![f32::NAN; kc * stride];
            for j0 in [0, 1, 38] {
                let cols = nr.min(70 - j0);
                b.pack(p0, kc, j0, cols, stride, &mut out);
                for p in 0..kc {
                    for c in 0..stride {
                        let e = if c < cols { data[(p0 + p) * 75 + j0 + c] } else { 0.0 };
                        assert_eq!(out[p * stride + c], e, "nr {nr} p {} j {}", p0 + p, j0 + c);
                    }
                }
            }
        }
    }
    // A strip that would run past the data is zero rather than a panic.
    let mut out = [f32::NAN; 32];
    b.pack(6, 1, 60, 32, 32, &mut out);
    assert!(out.iter().all(|&v| v == 0.0));
}

#[test]
fn k_zero_is_the_epilogue_of_zero() {
    let bias = [1.0f32, -2.0];
    let mut y = [5.0f32; 6];
    let epi = Epilogue::bias_act(Some(&bias), Activation::Relu);
    let va = ViewA { data: &[], off: 0, rs: 0, cs: 1 };
    product(2, 3, 0, va, &DenseB { data: &[], rs: 3, cs: 1 }, Out { y: &mut y, ldy: 3 }, &epi)
        .unwrap();
    assert_eq!(y, [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]);
}
