//! Single-thread latency of the generated code on the real models, side by
//! side with tract (built with `--features tract`) on the same inputs in the
//! same process, next to onnxruntime's figure from each model's `meta.json`;
//! and SGEMM throughput against the core's FMA peak.
//!
//! `cargo run --release -p onnx-codegen-bench` runs everything;
//! `... -- models`, `... -- sgemm`, `... -- conv` (layer shapes), `... -- unary`
//! (ns per element of the f32 activation maps) or `... -- q8` (the int8
//! product and 1x1 convolution under each ISA cap) one part; `--runs N` sets the timed runs
//! per model (default 200); `BENCH_ONLY=name` keeps the models whose name
//! contains it; `BENCH_JSON=file` writes the figures for
//! `tools/bench_table.py`, which adds onnxruntime measured on this machine.
//! Every figure is a median, so one noisy neighbour moves it little; the
//! spread (p10..p90) is printed too.

use onnx_codegen::harness::data::read_tensor;
use onnx_codegen::ir::TensorData;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// A generated model: its name, its folder, and a constructor.
type Entry = (&'static str, &'static str, fn() -> Box<dyn onnx_codegen_runtime::Model>);

include!(concat!(env!("OUT_DIR"), "/models.rs"));

/// Median, 10th and 90th percentile of `v` (sorted in place).
fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v.get(((v.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0.0);
    (at(0.5), at(0.1), at(0.9))
}

/// Bytes in 8-aligned words, as the generated `run_bytes` wants them.
fn aligned(bytes: &[u8]) -> Vec<u64> {
    let mut w = vec![0u64; bytes.len().div_ceil(8)];
    for (i, b) in bytes.iter().enumerate() {
        w[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    w
}

fn as_bytes(w: &[u64], n: usize) -> &[u8] {
    &onnx_codegen_runtime::arena::as_bytes(w)[..n]
}

fn ort_latency(dir: &str) -> Option<f64> {
    let text = std::fs::read_to_string(Path::new(dir).join("meta.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["latency"]["median_ms"].as_f64()
}

/// The model's first test inputs, as raw little-endian bytes in model order.
fn read_inputs(
    name: &str,
    dir: &str,
    infos: &[onnx_codegen_runtime::TensorInfo],
) -> Result<Vec<Vec<u8>>, String> {
    let mut inputs = Vec::new();
    for (i, info) in infos.iter().enumerate() {
        let t = read_tensor(&Path::new(dir).join(format!("test_data_set_0/input_{i}.pb")))?;
        let TensorData::Bytes(b) = &t.data else {
            return Err(format!("{name}: input {i} is not numeric"));
        };
        if b.len() != info.byte_size() {
            return Err(format!(
                "{name}: input {i} has {} bytes, wants {}",
                b.len(),
                info.byte_size()
            ));
        }
        inputs.push(b.to_vec());
    }
    Ok(inputs)
}

/// Times `run` after a warm-up of at least 50 ms or 10 runs: median, p10, p90 in ms.
fn time_runs(
    runs: usize,
    mut run: impl FnMut() -> Result<(), String>,
) -> Result<(f64, f64, f64), String> {
    let start = Instant::now();
    let mut warm = 0;
    while warm < 10 || start.elapsed().as_millis() < 50 {
        run()?;
        warm += 1;
    }
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        run()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(stats(&mut times))
}

fn bench_model(
    name: &str,
    model: &mut dyn onnx_codegen_runtime::Model,
    raw: &[Vec<u8>],
    runs: usize,
) -> Result<(f64, f64, f64), String> {
    let inputs: Vec<(Vec<u64>, usize)> = raw.iter().map(|b| (aligned(b), b.len())).collect();
    let mut outputs: Vec<(Vec<u64>, usize)> = model
        .outputs()
        .iter()
        .map(|o| (vec![0u64; o.byte_size().div_ceil(8)], o.byte_size()))
        .collect();
    let ins: Vec<&[u8]> = inputs.iter().map(|(w, n)| as_bytes(w, *n)).collect();
    time_runs(runs, || {
        let mut outs: Vec<&mut [u8]> = outputs
            .iter_mut()
            .map(|(w, n)| &mut onnx_codegen_runtime::arena::as_bytes_mut(w)[..*n])
            .collect();
        model.run_bytes(&ins, &mut outs).map_err(|e| format!("{name}: {e}"))
    })
}

/// tract on the same model and inputs, in the same process: loaded, typed
/// with the generated model's input shapes, optimised, then timed like ours.
#[cfg(feature = "tract")]
mod tract {
    use onnx_codegen_runtime::{Elem, TensorInfo};
    use tract_onnx::prelude::*;

    fn tensor(info: &TensorInfo, raw: &[u8]) -> Result<Tensor, String> {
        fn from<T: Datum + Copy>(
            shape: &[usize],
            raw: &[u8],
            f: fn(&[u8]) -> T,
        ) -> Result<Tensor, String> {
            let v: Vec<T> = raw.chunks_exact(size_of::<T>()).map(f).collect();
            Tensor::from_shape(shape, &v).map_err(|e| format!("tract input: {e:#}"))
        }
        let s = info.shape;
        match info.elem {
            Elem::F32 => from(s, raw, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            Elem::I64 => from(s, raw, |b| {
                i64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
            }),
            Elem::I32 => from(s, raw, |b| i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            e => Err(format!("input {}: {e:?} inputs are not wired for tract", info.name)),
        }
    }

    /// Median, p10 and p90 of tract's latency in ms, or why tract could not run the model.
    pub fn bench(
        dir: &str,
        infos: &[TensorInfo],
        raw: &[Vec<u8>],
        runs: usize,
    ) -> Result<(f64, f64, f64), String> {
        let err = |e: TractError| format!("tract: {e:#}");
        let mut model = tract_onnx::onnx()
            .model_for_path(std::path::Path::new(dir).join("model.onnx"))
            .map_err(err)?;
        let mut inputs = TVec::new();
        for (i, (info, raw)) in infos.iter().zip(raw).enumerate() {
            let t = tensor(info, raw)?;
            let fact = InferenceFact::dt_shape(t.datum_type(), info.shape);
            model = model.with_input_fact(i, fact).map_err(err)?;
            inputs.push(t.into_tvalue());
        }
        let plan = model.into_optimized().and_then(|m| m.into_runnable()).map_err(err)?;
        super::time_runs(runs, || plan.run(inputs.clone()).map(|_| ()).map_err(err))
    }
}

fn run_models(runs: usize) -> bool {
    println!(
        "{:<24} {:>10} {:>20} {:>10} {:>11} {:>10} {:>9}",
        "model", "ours ms", "p10..p90 ms", "tract ms", "tract/ours", "ort* ms", "ort*/ours"
    );
    let mut ok = true;
    let mut log_sum = 0.0;
    let mut count = 0;
    let (mut tract_log, mut tract_count) = (0.0, 0);
    let mut json = Vec::new();
    let only = std::env::var("BENCH_ONLY").ok();
    for (name, dir, make) in models() {
        if only.as_deref().is_some_and(|o| !name.contains(o)) {
            continue;
        }
        let mut model = make();
        let infos = model.inputs();
        let measured = read_inputs(name, dir, infos)
            .and_then(|raw| Ok((bench_model(name, model.as_mut(), &raw, runs)?, raw)));
        match measured {
            Ok(((med, p10, p90), _raw)) => {
                let ort = ort_latency(dir);
                let ratio = ort.map(|o| o / med);
                if let Some(r) = ratio {
                    log_sum += r.ln();
                    count += 1;
                }
                #[cfg(feature = "tract")]
                let tract = tract::bench(dir, infos, &_raw, runs);
                #[cfg(not(feature = "tract"))]
                let tract: Result<(f64, f64, f64), String> =
                    Err("built without --features tract".to_owned());
                let tract_med = match &tract {
                    Ok((t, _, _)) => {
                        tract_log += (t / med).ln();
                        tract_count += 1;
                        Some(*t)
                    }
                    Err(e) if cfg!(feature = "tract") => {
                        eprintln!("{name}: {e}");
                        None
                    }
                    Err(_) => None,
                };
                println!(
                    "{name:<24} {med:>10.4} {:>20} {:>10} {:>11} {:>10} {:>9}",
                    format!("{p10:.4}..{p90:.4}"),
                    tract_med.map_or("-".to_owned(), |t| format!("{t:.4}")),
                    tract_med.map_or("-".to_owned(), |t| format!("{:.3}x", t / med)),
                    ort.map_or("-".to_owned(), |o| format!("{o:.4}")),
                    ratio.map_or("-".to_owned(), |r| format!("{r:.3}x")),
                );
                json.push(serde_json::json!({
                    "model": name,
                    "ours_ms": med, "ours_p10_ms": p10, "ours_p90_ms": p90,
                    "tract_ms": tract_med,
                    "tract_error": tract.err().filter(|_| cfg!(feature = "tract")),
                }));
            }
            Err(e) => {
                println!("FAIL {e}");
                ok = false;
            }
        }
    }
    if tract_count > 0 {
        println!(
            "geometric mean of tract/ours over {tract_count} models: {:.3}x",
            (tract_log / tract_count as f64).exp()
        );
    }
    if count > 0 {
        println!(
            "geometric mean of ort*/ours over {count} models: {:.3}x \
             (ort*: the figure recorded in meta.json; tools/bench_table.py measures onnxruntime here)",
            (log_sum / count as f64).exp()
        );
    }
    if let Ok(path) = std::env::var("BENCH_JSON") {
        let doc = serde_json::json!({ "runs": runs, "models": json });
        if let Err(e) = std::fs::write(&path, doc.to_string()) {
            eprintln!("cannot write {path}: {e}");
            ok = false;
        }
    }
    ok
}

/// GFLOP/s of `n`³ single-precision products through the runtime's Gemm.
fn sgemm(n: usize, reps: usize) -> f64 {
    sgemm_mnk(n, n, n, reps)
}

/// GFLOP/s of one `m x k` by `k x n` product.
fn sgemm_mnk(m: usize, n: usize, k: usize, reps: usize) -> f64 {
    use onnx_codegen_runtime::gemm;
    let a: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
    let b: Vec<f32> = (0..k * n).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect();
    let mut y = vec![0.0f32; m * n];
    let p = onnx_codegen_runtime::gemm::Gemm {
        m,
        n,
        k,
        trans_a: false,
        trans_b: false,
        alpha: 1.0f32,
        beta: 0.0,
        c_strides: [0, 0],
    };
    let mut times = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        let (b, post) = (gemm::Weights::Dense(&b), gemm::Post::NONE);
        if gemm::sgemm(&p, &a, b, None, &mut y, &post).is_err() {
            return 0.0;
        }
        times.push(t.elapsed().as_secs_f64());
    }
    let (med, _, _) = stats(&mut times);
    let mut want = vec![0.0f32; m * n];
    if onnx_codegen_runtime::gemm::gemm(&p, &a, &b, None, &mut want).is_err()
        || want.iter().zip(&y).any(|(w, g)| (w - g).abs() > 1e-3 * (1.0 + w.abs()))
    {
        println!("FAIL SGEMM {n}^3 differs from the exact kernel");
        return 0.0;
    }
    2.0 * (m * n * k) as f64 / med / 1e9
}

/// The int8 part: `qmatmul` at 64^3 and 256^3 and a 1x1 and a 3x3
/// convolution 64 -> 64 channels at 32x32 (u8 activations, per-channel
/// scales), in GOP/s (two per multiply-add; medians), under each ISA cap;
/// every cap's output must equal the portable one.
fn run_q8(reps: usize) -> bool {
    use onnx_codegen_runtime::conv::{Conv, Window};
    use onnx_codegen_runtime::int8::*;
    use onnx_codegen_runtime::simd::{Isa, set_max_isa};
    let scales: Vec<Scale> =
        (0..256).map(|i| Scale::from_real(1e-4 * (1.0 + i as f64 / 256.0)).unwrap()).collect();
    let time = |f: &mut dyn FnMut()| {
        let mut t: Vec<f64> = (0..reps)
            .map(|_| {
                let s = Instant::now();
                f();
                s.elapsed().as_secs_f64()
            })
            .collect();
        stats(&mut t).0
    };
    let mut ok = true;
    for n in [64usize, 256] {
        let a: Vec<u8> = (0..n * n).map(|i| (i * 7 % 251) as u8).collect();
        let w: Vec<i8> = (0..n * n).map(|i| (i * 5 % 255) as i8).collect();
        let mut packed = vec![0i8; packed_len(n, n)];
        pack_weights(&w, n, n, false, &mut packed).unwrap();
        let bias: Vec<i32> = (0..n as i32).map(|i| i * 100 - 3000).collect();
        let rq = Requant { scales: &scales[..n], zero: 3, min: 0, max: 255 };
        let p = QMatMul { m: n, n, k: n, a_zero: 128 };
        let mut first: Option<Vec<u8>> = None;
        let mut line = format!("qmatmul {n}^3 u8 x i8:");
        for isa in Isa::ALL {
            set_max_isa(isa);
            let mut y = vec![0u8; n * n];
            let med = time(&mut || {
                let w = QWeights::Packed(&packed);
                qmatmul(&p, &a, w, Some(&bias), &rq, &mut y).unwrap();
            });
            ok &= *first.get_or_insert_with(|| y.clone()) == y;
            line += &format!("  {}: {:.1} GOP/s", isa.name(), 2.0 * (n * n * n) as f64 / med / 1e9);
        }
        println!("{line}");
    }
    for k in [1usize, 3] {
        let (c, m, h) = (64usize, 64usize, 32usize);
        let pad = k / 2;
        let window = Window {
            in_dims: &[h, h],
            out_dims: &[h, h],
            kernel: &[k, k],
            strides: &[1, 1],
            dilations: &[1, 1],
            pads_begin: &[pad, pad],
            pads_end: &[pad, pad],
        };
        let p = Conv { batch: 1, in_channels: c, out_channels: m, groups: 1, window };
        let x: Vec<u8> = (0..c * h * h).map(|i| (i * 7 % 251) as u8).collect();
        let w: Vec<i8> = (0..m * c * k * k).map(|i| (i * 5 % 255) as i8).collect();
        let mut packed = vec![0i8; packed_conv_len(&p)];
        pack_conv_weights(&p, &w, &mut packed).unwrap();
        let mut scratch = vec![0u8; qconv_scratch_len(&p)];
        let rq = Requant { scales: &scales[..m], zero: 3, min: 0, max: 255 };
        let mut first: Option<Vec<u8>> = None;
        let mut line = format!("qconv {k}x{k} {c}->{m} at {h}x{h} u8:");
        for isa in Isa::ALL {
            set_max_isa(isa);
            let mut y = vec![0u8; m * h * h];
            let med = time(&mut || {
                let w = QConvWeights::Packed(&packed);
                qconv(&p, &x, 128, w, None, &rq, &mut y, &mut scratch).unwrap();
            });
            ok &= *first.get_or_insert_with(|| y.clone()) == y;
            let ops = 2.0 * (m * c * k * k * h * h) as f64;
            line += &format!("  {}: {:.1} GOP/s", isa.name(), ops / med / 1e9);
        }
        println!("{line}");
    }
    set_max_isa(Isa::Avx512);
    if !ok {
        println!("FAIL q8: an ISA's output differs from the portable one");
    }
    ok
}

/// One convolution shape for the `conv` part: `[cin, h, w] -> cout` with a
/// square kernel, stride, symmetric padding and groups.
struct ConvShape {
    cin: usize,
    h: usize,
    w: usize,
    cout: usize,
    k: usize,
    stride: usize,
    pad: usize,
    groups: usize,
}

/// GFLOP/s and median milliseconds of one convolution through the kernel the
/// generated code calls (`sconv` with packed panels for groups of one, as
/// given for depthwise), with bias and Relu; `None` when the kernel rejects the shape or
/// its result differs from the exact `conv`.
fn conv_shape(s: &ConvShape, reps: usize) -> Option<(f64, f64, Option<f64>)> {
    use onnx_codegen_runtime::conv::{self, Activation, Conv, Window};
    // A height of 1 is a 1-D convolution: kernel, stride and pads along the
    // width only.
    let one_d = s.h == 1;
    let (kh, sh, ph) = if one_d { (1, 1, 0) } else { (s.k, s.stride, s.pad) };
    let oh = (s.h + 2 * ph - kh) / sh + 1;
    let ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
    let cg = s.cin / s.groups;
    let kdim = cg * kh * s.k;
    let x: Vec<f32> = (0..s.cin * s.h * s.w).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
    let w: Vec<f32> = (0..s.cout * kdim).map(|i| ((i * 5 % 11) as f32 - 5.0) * 0.1).collect();
    let bias: Vec<f32> = (0..s.cout).map(|i| (i % 5) as f32 * 0.1 - 0.2).collect();
    let mut y = vec![0.0f32; s.cout * oh * ow];
    let (ind, outd, kern) = ([s.h, s.w], [oh, ow], [kh, s.k]);
    let (st, dil, pads) = ([sh, s.stride], [1usize; 2], [ph, s.pad]);
    let window = Window {
        in_dims: &ind,
        out_dims: &outd,
        kernel: &kern,
        strides: &st,
        dilations: &dil,
        pads_begin: &pads,
        pads_end: &pads,
    };
    let p = Conv { batch: 1, in_channels: s.cin, out_channels: s.cout, groups: s.groups, window };
    let packed = if s.groups == 1 {
        let mut out = vec![0.0f32; conv::packed_weights_len(s.cout, kdim)?];
        conv::pack_conv_weights(s.cout, kdim, &w, &mut out).ok()?;
        Some(out)
    } else {
        None
    };
    // `CONV_SILU=1`, `CONV_HSWISH=1`, `CONV_GELU=1`: SiLU, HardSwish or
    // Gelu through the fused epilogue instead of Relu.
    use onnx_codegen_runtime::gemm::Smooth;
    let flag = |name: &str| std::env::var_os(name).is_some();
    let smooth = [
        ("CONV_HSWISH", Smooth::HardSwish),
        ("CONV_GELU", Smooth::Gelu),
        ("CONV_SILU", Smooth::Silu),
    ]
    .into_iter()
    .find_map(|(name, s)| flag(name).then_some(s));
    // `CONV_RESID=1`: a residual added before the Relu (a ResNet block's
    // last convolution), read from a tensor as large as the output.
    let resid = std::env::var_os("CONV_RESID").is_some();
    let r: Vec<f32> = (0..y.len()).map(|i| ((i * 3 % 7) as f32 - 3.0) * 0.1).collect();
    let post = match resid {
        true => onnx_codegen_runtime::gemm::Post {
            residual: Some(&r),
            act: Activation::Relu,
            smooth: None,
        },
        false => {
            onnx_codegen_runtime::gemm::Post { smooth, ..onnx_codegen_runtime::gemm::Post::NONE }
        }
    };
    let fused = smooth.is_some() || resid;
    let post = if fused { post } else { onnx_codegen_runtime::gemm::Post::act(Activation::Relu) };
    let run = |y: &mut [f32]| match &packed {
        Some(pw) => conv::sconv(&p, &x, conv::ConvWeights::Panels(pw), Some(&bias), y, &post),
        None => conv::sconv(&p, &x, conv::ConvWeights::Dense(&w), Some(&bias), y, &post),
    };
    // `CONV_COLD=1`: 64 MiB written between runs, so that the operands come
    // from memory as they do inside a large model.
    let mut junk = vec![0u8; if std::env::var_os("CONV_COLD").is_some() { 64 << 20 } else { 0 }];
    let mut times = Vec::new();
    for i in 0..reps {
        junk.iter_mut().step_by(64).for_each(|v| *v = i as u8);
        let t = Instant::now();
        run(&mut y).ok()?;
        times.push(t.elapsed().as_secs_f64());
    }
    // `CONV_MIN=1`: the fastest run instead of the median (A/B comparisons
    // of kernels on a noisy machine).
    let med = match std::env::var_os("CONV_MIN") {
        Some(_) => times.iter().copied().fold(f64::INFINITY, f64::min),
        None => stats(&mut times).0,
    };
    let mut want = vec![0.0f32; y.len()];
    conv::conv(&p, &x, &w, Some(&bias), &mut want).ok()?;
    let close = |y: &[f32]| {
        let act = |w: f32| match smooth {
            Some(Smooth::HardSwish) => w * (w / 6.0 + 0.5).clamp(0.0, 1.0),
            Some(Smooth::Gelu) => onnx_codegen_runtime::vmath::gelu(w),
            // SiLU, the one left.
            Some(_) => w / (1.0 + (-w).exp()),
            None => w.max(0.0),
        };
        let expect = |i: usize, w: f32| if resid { (w + r[i]).max(0.0) } else { act(w) };
        (want.iter().zip(y).enumerate())
            .all(|(i, (w, g))| (expect(i, *w) - g).abs() <= 1e-3 * (1.0 + w.abs()))
    };
    if !close(&y) {
        return None;
    }
    let flops = 2.0 * (s.cout * oh * ow * kdim) as f64;
    let mut wino = None;
    if s.k == 3 && s.stride == 1 && s.groups == 1 && !fused && !one_d {
        use onnx_codegen_runtime::winograd;
        let mut u = vec![0.0f32; winograd::weights_len(s.cin, s.cout)?];
        winograd::transform_weights(s.cin, s.cout, &w, &mut u).ok()?;
        let block = winograd::tiles_of(oh, ow)?.min(winograd::MAX_BLOCK);
        let mut scratch = vec![0.0f32; winograd::scratch_len(s.cin, s.cout, block)?];
        let mut times = Vec::new();
        for _ in 0..reps {
            let t = Instant::now();
            let w = conv::ConvWeights::Winograd { u: &u, scratch: &mut scratch };
            let relu = onnx_codegen_runtime::gemm::Post::act(Activation::Relu);
            conv::sconv(&p, &x, w, Some(&bias), &mut y, &relu).ok()?;
            times.push(t.elapsed().as_secs_f64());
        }
        if !close(&y) {
            return None;
        }
        wino = Some(stats(&mut times).0 * 1e3);
    }
    Some((flops / med / 1e9, med * 1e3, wino))
}

/// The convolutions of the MobileNet-like `cnn_224` stand-in (stem,
/// depthwise, pointwise, the two 3x3 512 convs), of vww_mobilenet's widths
/// and of ic_resnet8, one line each; `CONV_ONLY=text` keeps the lines whose
/// label contains it.
fn run_convs(reps: usize) -> bool {
    #[rustfmt::skip]
    let shapes: &[(&str, [usize; 8])] = &[
        ("stem 3->32 k3 s2 224", [3, 224, 224, 32, 3, 2, 1, 1]),
        ("dw 32 k3 s1 112", [32, 112, 112, 32, 3, 1, 1, 32]),
        ("pw 32->64 112", [32, 112, 112, 64, 1, 1, 0, 1]),
        ("dw 64 k3 s2 112", [64, 112, 112, 64, 3, 2, 1, 64]),
        ("pw 64->128 56", [64, 56, 56, 128, 1, 1, 0, 1]),
        ("dw 128 k3 s1 56", [128, 56, 56, 128, 3, 1, 1, 128]),
        ("pw 128->128 56", [128, 56, 56, 128, 1, 1, 0, 1]),
        ("dw 128 k3 s2 56", [128, 56, 56, 128, 3, 2, 1, 128]),
        ("pw 128->256 28", [128, 28, 28, 256, 1, 1, 0, 1]),
        ("dw 256 k3 s1 28", [256, 28, 28, 256, 3, 1, 1, 256]),
        ("pw 256->256 28", [256, 28, 28, 256, 1, 1, 0, 1]),
        ("dw 256 k3 s2 28", [256, 28, 28, 256, 3, 2, 1, 256]),
        ("pw 256->512 14", [256, 14, 14, 512, 1, 1, 0, 1]),
        ("c3 512->512 14", [512, 14, 14, 512, 3, 1, 1, 1]),
        ("dw 512 k3 s1 7", [512, 7, 7, 512, 3, 1, 1, 512]),
        ("pw 512->1024 7", [512, 7, 7, 1024, 1, 1, 0, 1]),
        ("pw 8->16 48 (vww)", [8, 48, 48, 16, 1, 1, 0, 1]),
        ("pw 16->32 24 (vww)", [16, 24, 24, 32, 1, 1, 0, 1]),
        ("pw 64->64 25x5 (kws)", [64, 25, 5, 64, 1, 1, 0, 1]),
        ("c3 16->16 32 (resnet8)", [16, 32, 32, 16, 3, 1, 1, 1]),
        ("c3 16->32 s2 32 (resnet8)", [16, 32, 32, 32, 3, 2, 1, 1]),
        ("c3 32->64 s2 16 (resnet8)", [32, 16, 16, 64, 3, 2, 1, 1]),
        ("stem 3->16 k3 32 (resnet8)", [3, 32, 32, 16, 3, 1, 1, 1]),
        ("stem 3->8 k3 s2 96 (vww)", [3, 96, 96, 8, 3, 2, 1, 1]),
        ("r18 stem 3->64 k7 s2 224", [3, 224, 224, 64, 7, 2, 3, 1]),
        ("r18 c3 64->64 56", [64, 56, 56, 64, 3, 1, 1, 1]),
        ("r18 c3 64->128 s2 56", [64, 56, 56, 128, 3, 2, 1, 1]),
        ("r18 pw 64->128 s2 56", [64, 56, 56, 128, 1, 2, 0, 1]),
        ("r18 c3 128->128 28", [128, 28, 28, 128, 3, 1, 1, 1]),
        ("r18 c3 128->256 s2 28", [128, 28, 28, 256, 3, 2, 1, 1]),
        ("r18 c3 256->256 14", [256, 14, 14, 256, 3, 1, 1, 1]),
        ("r18 c3 256->512 s2 14", [256, 14, 14, 512, 3, 2, 1, 1]),
        ("r18 c3 512->512 7", [512, 7, 7, 512, 3, 1, 1, 1]),
        ("mv2 pw 32->16 112", [32, 112, 112, 16, 1, 1, 0, 1]),
        ("mv2 pw 16->96 112", [16, 112, 112, 96, 1, 1, 0, 1]),
        ("mv2 pw 96->24 56", [96, 56, 56, 24, 1, 1, 0, 1]),
        ("mv2 pw 24->144 56", [24, 56, 56, 144, 1, 1, 0, 1]),
        ("mv2 pw 144->24 56", [144, 56, 56, 24, 1, 1, 0, 1]),
        ("mv2 pw 144->32 28", [144, 28, 28, 32, 1, 1, 0, 1]),
        ("mv2 pw 32->192 28", [32, 28, 28, 192, 1, 1, 0, 1]),
        ("mv2 pw 192->32 28", [192, 28, 28, 32, 1, 1, 0, 1]),
        ("mv2 pw 192->64 14", [192, 14, 14, 64, 1, 1, 0, 1]),
        ("mv2 pw 64->384 14", [64, 14, 14, 384, 1, 1, 0, 1]),
        ("mv2 pw 384->64 14", [384, 14, 14, 64, 1, 1, 0, 1]),
        ("mv2 pw 384->96 14", [384, 14, 14, 96, 1, 1, 0, 1]),
        ("mv2 pw 96->576 14", [96, 14, 14, 576, 1, 1, 0, 1]),
        ("mv2 pw 576->96 14", [576, 14, 14, 96, 1, 1, 0, 1]),
        ("mv2 pw 576->160 7", [576, 7, 7, 160, 1, 1, 0, 1]),
        ("mv2 pw 160->960 7", [160, 7, 7, 960, 1, 1, 0, 1]),
        ("mv2 pw 960->160 7", [960, 7, 7, 160, 1, 1, 0, 1]),
        ("mv2 pw 960->320 7", [960, 7, 7, 320, 1, 1, 0, 1]),
        ("mv2 pw 320->1280 7", [320, 7, 7, 1280, 1, 1, 0, 1]),
        ("eff pw 32->16 112", [32, 112, 112, 16, 1, 1, 0, 1]),
        ("eff pw 16->96 112", [16, 112, 112, 96, 1, 1, 0, 1]),
        ("eff pw 24->144 56", [24, 56, 56, 144, 1, 1, 0, 1]),
        ("eff pw 144->24 56", [144, 56, 56, 24, 1, 1, 0, 1]),
        ("eff pw 96->24 56", [96, 56, 56, 24, 1, 1, 0, 1]),
        ("eff pw 112->672 14", [112, 14, 14, 672, 1, 1, 0, 1]),
        ("eff pw 672->112 14", [672, 14, 14, 112, 1, 1, 0, 1]),
        ("eff pw 320->1280 7", [320, 7, 7, 1280, 1, 1, 0, 1]),
        ("eff pw 1152->320 7", [1152, 7, 7, 320, 1, 1, 0, 1]),
        ("r50 pw 1024->2048 s2 14", [1024, 14, 14, 2048, 1, 2, 0, 1]),
        ("r50 pw 512->2048 7", [512, 7, 7, 2048, 1, 1, 0, 1]),
        ("r50 pw 2048->512 7", [2048, 7, 7, 512, 1, 1, 0, 1]),
        ("r50 pw 256->512 s2 56", [256, 56, 56, 512, 1, 2, 0, 1]),
        ("r50 pw 512->1024 s2 28", [512, 28, 28, 1024, 1, 2, 0, 1]),
        ("r50 pw 64->256 56", [64, 56, 56, 256, 1, 1, 0, 1]),
        ("r50 pw 256->64 56", [256, 56, 56, 64, 1, 1, 0, 1]),
        ("r50 pw 256->128 56", [256, 56, 56, 128, 1, 1, 0, 1]),
        ("mv2 dw 32 112", [32, 112, 112, 32, 3, 1, 1, 32]),
        ("mv2 dw 96 s2 112", [96, 112, 112, 96, 3, 2, 1, 96]),
        ("mv2 dw 144 56", [144, 56, 56, 144, 3, 1, 1, 144]),
        ("mv2 dw 144 s2 56", [144, 56, 56, 144, 3, 2, 1, 144]),
        ("mv2 dw 192 28", [192, 28, 28, 192, 3, 1, 1, 192]),
        ("mv2 dw 192 s2 28", [192, 28, 28, 192, 3, 2, 1, 192]),
        ("mv2 dw 384 14", [384, 14, 14, 384, 3, 1, 1, 384]),
        ("mv2 dw 576 14", [576, 14, 14, 576, 3, 1, 1, 576]),
        ("mv2 dw 576 s2 14", [576, 14, 14, 576, 3, 2, 1, 576]),
        ("mv2 dw 960 7", [960, 7, 7, 960, 3, 1, 1, 960]),
        ("eff dw 32 k3 s1 112", [32, 112, 112, 32, 3, 1, 1, 32]),
        ("eff dw 96 k3 s2 112", [96, 112, 112, 96, 3, 2, 1, 96]),
        ("eff dw 144 k3 s1 56", [144, 56, 56, 144, 3, 1, 1, 144]),
        ("eff dw 144 k5 s2 56", [144, 56, 56, 144, 5, 2, 2, 144]),
        ("eff dw 240 k5 s1 28", [240, 28, 28, 240, 5, 1, 2, 240]),
        ("eff dw 240 k3 s2 28", [240, 28, 28, 240, 3, 2, 1, 240]),
        ("eff dw 480 k3 s1 14", [480, 14, 14, 480, 3, 1, 1, 480]),
        ("eff dw 480 k5 s1 14", [480, 14, 14, 480, 5, 1, 2, 480]),
        ("eff dw 672 k5 s1 14", [672, 14, 14, 672, 5, 1, 2, 672]),
        ("eff dw 672 k5 s2 14", [672, 14, 14, 672, 5, 2, 2, 672]),
        ("eff dw 1152 k5 s1 7", [1152, 7, 7, 1152, 5, 1, 2, 1152]),
        ("eff dw 1152 k3 s1 7", [1152, 7, 7, 1152, 3, 1, 1, 1152]),
    ];
    let only = std::env::var("CONV_ONLY").unwrap_or_default();
    // `CONV_SHAPE=cin,h,w,cout,k,stride,pad,groups` times that one shape.
    let adhoc: Option<(String, [usize; 8])> = std::env::var("CONV_SHAPE").ok().map(|v| {
        let mut d = [0usize; 8];
        for (slot, part) in d.iter_mut().zip(v.split(',')) {
            *slot = part.trim().parse().unwrap_or(0);
        }
        (format!("shape {v}"), d)
    });
    let listed: Vec<(String, [usize; 8])> = match adhoc {
        Some(one) => vec![one],
        None => shapes.iter().map(|(l, d)| (l.to_string(), *d)).collect(),
    };
    let mut ok = true;
    let mut total = 0.0;
    for (label, d) in &listed {
        if !label.contains(&only) {
            continue;
        }
        let [cin, h, w, cout, k, stride, pad, groups] = *d;
        let s = ConvShape { cin, h, w, cout, k, stride, pad, groups };
        match conv_shape(&s, reps) {
            Some((g, ms, wino)) => {
                total += ms;
                match wino {
                    Some(wms) => println!(
                        "CONV {label}: {g:.1} GFLOP/s, {ms:.4} ms; Winograd {wms:.4} ms ({:.1} effective GFLOP/s)",
                        g * ms / wms
                    ),
                    None => println!("CONV {label}: {g:.1} GFLOP/s, {ms:.4} ms"),
                }
            }
            None => {
                ok = false;
                println!("FAIL CONV {label}: rejected or differs from the exact conv");
            }
        }
    }
    println!("CONV total: {total:.3} ms");
    ok
}

#[cfg(target_arch = "x86_64")]
mod peak {
    use core::arch::x86_64::*;

    /// 12 independent 8-wide FMA chains, `iters` rounds: 192 flops a round.
    #[target_feature(enable = "avx2,fma")]
    fn chains(iters: usize) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        let (mut c0, mut c1, mut c2, mut c3) = (a, b, a, b);
        let (mut c4, mut c5, mut c6, mut c7) = (a, b, a, b);
        let (mut c8, mut c9, mut c10, mut c11) = (a, b, a, b);
        for _ in 0..iters {
            c0 = _mm256_fmadd_ps(c0, a, b);
            c1 = _mm256_fmadd_ps(c1, a, b);
            c2 = _mm256_fmadd_ps(c2, a, b);
            c3 = _mm256_fmadd_ps(c3, a, b);
            c4 = _mm256_fmadd_ps(c4, a, b);
            c5 = _mm256_fmadd_ps(c5, a, b);
            c6 = _mm256_fmadd_ps(c6, a, b);
            c7 = _mm256_fmadd_ps(c7, a, b);
            c8 = _mm256_fmadd_ps(c8, a, b);
            c9 = _mm256_fmadd_ps(c9, a, b);
            c10 = _mm256_fmadd_ps(c10, a, b);
            c11 = _mm256_fmadd_ps(c11, a, b);
        }
        let s = [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11]
            .into_iter()
            .fold(_mm256_setzero_ps(), |s, c| _mm256_add_ps(s, c));
        let mut out = [0.0f32; 8];
        // SAFETY: `out` holds 8 f32, the width of one unaligned store.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
        out.iter().sum()
    }

    /// 12 independent 16-wide FMA chains, `iters` rounds: 384 flops a round.
    #[target_feature(enable = "avx512f")]
    fn chains512(iters: usize) -> f32 {
        let a = _mm512_set1_ps(0.999_999);
        let b = _mm512_set1_ps(1e-7);
        let (mut c0, mut c1, mut c2, mut c3) = (a, b, a, b);
        let (mut c4, mut c5, mut c6, mut c7) = (a, b, a, b);
        let (mut c8, mut c9, mut c10, mut c11) = (a, b, a, b);
        for _ in 0..iters {
            c0 = _mm512_fmadd_ps(c0, a, b);
            c1 = _mm512_fmadd_ps(c1, a, b);
            c2 = _mm512_fmadd_ps(c2, a, b);
            c3 = _mm512_fmadd_ps(c3, a, b);
            c4 = _mm512_fmadd_ps(c4, a, b);
            c5 = _mm512_fmadd_ps(c5, a, b);
            c6 = _mm512_fmadd_ps(c6, a, b);
            c7 = _mm512_fmadd_ps(c7, a, b);
            c8 = _mm512_fmadd_ps(c8, a, b);
            c9 = _mm512_fmadd_ps(c9, a, b);
            c10 = _mm512_fmadd_ps(c10, a, b);
            c11 = _mm512_fmadd_ps(c11, a, b);
        }
        let s = [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11]
            .into_iter()
            .fold(_mm512_setzero_ps(), |s, c| _mm512_add_ps(s, c));
        _mm512_reduce_add_ps(s)
    }

    /// The median GFLOP/s of `run(iters)` doing `flops` per round.
    fn measure(flops: f64, run: impl Fn(usize) -> f32) -> f64 {
        let iters = std::hint::black_box(500_000);
        let mut times = Vec::new();
        for _ in 0..41 {
            let t = std::time::Instant::now();
            std::hint::black_box(run(iters));
            times.push(t.elapsed().as_secs_f64());
        }
        let (med, _, _) = super::stats(&mut times);
        flops * iters as f64 / med / 1e9
    }

    /// GFLOP/s of one core's FMA units (AVX2), or `None` without AVX2+FMA.
    pub fn gflops() -> Option<f64> {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return None;
        }
        // SAFETY: AVX2 and FMA were detected above.
        Some(measure(192.0, |iters| unsafe { chains(iters) }))
    }

    /// GFLOP/s of one core's 512-bit FMA units, or `None` without AVX-512F.
    pub fn gflops512() -> Option<f64> {
        if !is_x86_feature_detected!("avx512f") {
            return None;
        }
        // SAFETY: AVX-512F was detected above.
        Some(measure(384.0, |iters| unsafe { chains512(iters) }))
    }
}

/// Nanoseconds per element of the f32 maps of `vmath` (the vector kernels
/// where the machine has them) over 4096 floats (L1-resident) and 65536
/// (L2): the median of 31 timings of `reps` passes each.
fn run_unary(reps: usize) {
    use onnx_codegen_runtime::vmath::{self, Func};
    for n in [4096usize, 65536] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 7919) % 2000) as f32 * 0.004 - 4.0).collect();
        let mut y = vec![0.0f32; n];
        let funcs = [
            ("Exp", Func::Exp),
            ("Sigmoid", Func::Sigmoid),
            ("Silu", Func::Silu),
            ("Tanh", Func::Tanh),
            ("Erf", Func::Erf),
            ("Gelu", Func::Gelu),
            ("GeluTanh", Func::GeluTanh),
        ];
        for (name, f) in funcs {
            let mut times: Vec<f64> = (0..31)
                .map(|_| {
                    let t = Instant::now();
                    for _ in 0..reps {
                        vmath::map(f, std::hint::black_box(&x), &mut y);
                    }
                    t.elapsed().as_secs_f64() * 1e9 / (reps * n) as f64
                })
                .collect();
            println!("{name:>9} over {n:>5}: {:.3} ns/element", stats(&mut times).0);
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runs = args
        .iter()
        .position(|a| a == "--runs")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let want = |what: &str| {
        !args
            .iter()
            .any(|a| a == "models" || a == "sgemm" || a == "conv" || a == "unary" || a == "q8")
            || args.iter().any(|a| a == what)
    };
    let mut ok = true;
    if want("sgemm") {
        #[cfg(target_arch = "x86_64")]
        let peak = {
            let p8 = peak::gflops();
            if let Some(p) = p8 {
                println!("FMA peak (12 chains of 8-wide FMA, one core): {p:.1} GFLOP/s");
            }
            let p16 = peak::gflops512();
            if let Some(p) = p16 {
                println!("FMA peak (12 chains of 16-wide FMA, one core): {p:.1} GFLOP/s");
            }
            // Percentages are of the widest unit the SGEMM kernel uses.
            p16.or(p8)
        };
        #[cfg(not(target_arch = "x86_64"))]
        let peak: Option<f64> = None;
        if let Ok(v) = std::env::var("SGEMM_MNK") {
            let d: Vec<usize> = v.split('x').filter_map(|s| s.parse().ok()).collect();
            if let [m, n, k] = d[..] {
                println!("SGEMM {m}x{n}x{k}: {:.1} GFLOP/s", sgemm_mnk(m, n, k, 15));
            }
        }
        for n in [64, 128, 256, 512] {
            let reps = if n >= 512 { 15 } else { 50 };
            let g = sgemm(n, reps);
            match peak {
                Some(p) => println!("SGEMM {n}^3: {g:.1} GFLOP/s ({:.0}% of peak)", 100.0 * g / p),
                None => println!("SGEMM {n}^3: {g:.1} GFLOP/s"),
            }
        }
    }
    if want("q8") {
        ok &= run_q8(runs.min(100));
    }
    if want("unary") {
        run_unary(runs.min(50));
    }
    if want("conv") {
        ok &= run_convs(runs);
    }
    if want("models") {
        ok &= run_models(runs);
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}
