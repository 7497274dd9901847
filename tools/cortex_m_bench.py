#!/usr/bin/env python3
"""Cortex-M4F benchmark: instructions per inference of the MLPerf-Tiny models, float32 and int8.

    python3 tools/cortex_m_bench.py [--workspace DIR] [--models a,b] [--kinds f32,int8]
                                    [--f32-dir DIR] [--int8-dir DIR] [--work-dir DIR]

For each model and kind it writes a scratch firmware crate (one bin per model and kind) that
compiles the model with `onnx_model!` against the workspace's `runtime-support` and
`onnx-macros`, builds it release + LTO for `thumbv7em-none-eabihf`, runs it in QEMU
(`qemu-system-arm -machine mps2-an386 -cpu cortex-m4 -icount shift=0`: virtual time advances one
nanosecond per instruction, so SysTick read around `run` counts instructions; a loop of known
length calibrates it), checks the output against the reference and prints one table: M
instructions per inference, arena, stack used by `run`, weights, flash, and PASS or FAIL. A
model that fails to build, to run, or to match is reported as such, never left out.

The firmware harness is the workspace's `examples/cortex-m-kws` (its `src/lib.rs`, `count.rs`,
`stack.rs` and `memory.x`, used by path), so the figures are the ones that example prints.

Models: float32 from F32_DIR/<model>/model.onnx (default ../shared/models), int8 from
INT8_DIR/<model>_qdq/model.onnx (default /tmp/quant-models, made by
`python3 tools/quantize_models.py --out DIR`: onnxruntime's static QDQ quantization, int8
per-channel weights); each with its test_data_set_0/{input_0,output_0}.pb (for int8,
onnxruntime's output with its int8 kernels). Tolerance |got - want| <= atol + rtol * |want|:
float32 atol 1e-4, rtol 1e-3; int8 atol 0.02 (a few output quantization steps), as the tests.

Needs `rustup target add thumbv7em-none-eabihf`, Debian's `qemu-system-arm` and, to read the
reference data, `pip install onnx numpy`. The ELF of each firmware is printed with `-v`
(for `tools/qemu_profile.py`).
"""
import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper as nh

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["kws_dscnn", "vww_mobilenet", "ic_resnet8", "ad_autoencoder"]
KINDS = ["f32", "int8"]
TARGET = "thumbv7em-none-eabihf"
QEMU = [
    "qemu-system-arm", "-machine", "mps2-an386", "-cpu", "cortex-m4", "-icount", "shift=0",
    "-nographic", "-semihosting-config", "enable=on,target=native", "-kernel",
]
TOLERANCE = {"f32": (1e-4, 1e-3), "int8": (0.02, 0.0)}

CARGO_TOML = """\
# Written by tools/cortex_m_bench.py: a scratch firmware crate, rewritten on every run.
[package]
name = "cortex-m-bench"
version = "0.1.0"
edition = "2024"
publish = false

[workspace]

[lib]
name = "cortex_m_kws"
path = "{example}/src/lib.rs"

[dependencies]
onnx-codegen-runtime = {{ path = "{ws}/runtime-support" }}
onnx-codegen-macros = {{ path = "{ws}/onnx-macros" }}
cortex-m = {{ version = "0.7", features = ["critical-section-single-core"] }}
cortex-m-rt = "0.7"
cortex-m-semihosting = "0.5"

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
debug = true
panic = "abort"
"""

CARGO_CONFIG = """\
[build]
target = "{target}"

[target.{target}]
# memory.x comes from the example's folder; link.x is cortex-m-rt's.
rustflags = ["-C", "link-arg=-Tlink.x", "-L", "native={example}"]
"""

BIN = """\
//! Written by tools/cortex_m_bench.py: {tag}, from {model}.
#![no_std]
#![no_main]

use cortex_m_kws::{{Report, check, count, fail, read_f32s, stack}};
use cortex_m_rt::entry;

onnx_codegen_macros::onnx_model!("{model}", name = Net);

const INPUT: &[u8] = include_bytes!("{input}");
const EXPECTED: &[u8] = include_bytes!("{expected}");

#[entry]
fn main() -> ! {{
    let peripherals = cortex_m::Peripherals::take().unwrap_or_else(|| fail("peripherals taken"));
    count::start(peripherals.SYST);
    let model: &'static mut Net =
        cortex_m::singleton!(: Net = Net::new()).unwrap_or_else(|| fail("model taken twice"));
    let input: &'static mut [f32; {nin}] =
        cortex_m::singleton!(: [f32; {nin}] = [0.0; {nin}]).unwrap_or_else(|| fail("input"));
    let expected: &'static mut [f32; {nout}] =
        cortex_m::singleton!(: [f32; {nout}] = [0.0; {nout}]).unwrap_or_else(|| fail("expected"));
    let output: &'static mut [f32; {nout}] =
        cortex_m::singleton!(: [f32; {nout}] = [0.0; {nout}]).unwrap_or_else(|| fail("output"));
    read_f32s(INPUT, input);
    read_f32s(EXPECTED, expected);
    let painted = stack::paint();
    let (result, work) = count::measure(|| model.run(&*input, output));
    if result.is_err() {{
        fail("the model returned an error");
    }}
    let stack = stack::used(painted);
    let report = Report {{
        model: "{tag}",
        weights: Net::WEIGHT_BYTES,
        arena: Net::ARENA_BYTES,
        stack,
        work,
    }};
    check(&*output, &*expected, {atol:e}, {rtol:e}, &report)
}}
"""


def read_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return nh.to_array(t)


def model_path(args, model, kind):
    if kind == "f32":
        return os.path.join(args.f32_dir, model)
    return os.path.join(args.int8_dir, f"{model}_qdq")


def write_bin(args, work, model, kind):
    """Writes src/bin/<model>_<kind>.rs and its data; returns the bin name or raises ValueError."""
    tag = f"{model}_{kind}"
    folder = model_path(args, model, kind)
    onnx_file = os.path.join(folder, "model.onnx")
    data = os.path.join(folder, "test_data_set_0")
    for f in [onnx_file, os.path.join(data, "input_0.pb"), os.path.join(data, "output_0.pb")]:
        if not os.path.isfile(f):
            raise ValueError(f"missing {f}")
    if os.path.exists(os.path.join(data, "input_1.pb")) or os.path.exists(
        os.path.join(data, "output_1.pb")
    ):
        raise ValueError(f"{data}: the harness runs one input and one output")
    x, y = read_pb(os.path.join(data, "input_0.pb")), read_pb(os.path.join(data, "output_0.pb"))
    if x.dtype != np.float32 or y.dtype != np.float32:
        raise ValueError(f"{data}: float32 input and output expected, found {x.dtype}, {y.dtype}")
    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    inp = os.path.join(work, "data", f"{tag}_input_0.f32")
    exp = os.path.join(work, "data", f"{tag}_output_0.f32")
    x.astype("<f4").tofile(inp)
    y.astype("<f4").tofile(exp)
    atol, rtol = TOLERANCE[kind]
    src = BIN.format(
        tag=tag, model=os.path.abspath(onnx_file), input=inp, expected=exp,
        nin=x.size, nout=y.size, atol=atol, rtol=rtol,
    )
    path = os.path.join(work, "src", "bin", f"{tag}.rs")
    old = open(path).read() if os.path.exists(path) else None
    if old != src:  # keep the mtime (and cargo's cache) when nothing changed
        with open(path, "w") as f:
            f.write(src)
    return tag


def parse(out):
    """The figures the harness prints (see examples/cortex-m-kws/src/lib.rs)."""
    r = {}
    m = re.search(
        r"memory: weights (\d+) B, flash used (\d+) B \(code (\d+) B\), arena (\d+) B "
        r"\(RAM\), stack used by run (\d+) B", out)
    if m:
        r.update(zip(["weights", "flash", "code", "arena", "stack"], map(int, m.groups())))
    m = re.search(r"work: (\d+) instructions per inference", out)
    if m:
        r["instructions"] = int(m.group(1))
    m = re.search(r"max \|error\| (\d+) ppb", out)
    if m:
        r["max_err"] = int(m.group(1)) * 1e-9
    return r


def tail(text, n=12):
    return "\n".join(text.strip().splitlines()[-n:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=ROOT,
                    help="the onnx-codegen checkout whose runtime and macros to build (default: this one)")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated model names")
    ap.add_argument("--kinds", default=",".join(KINDS), help="f32, int8 or both")
    ap.add_argument("--f32-dir", default=os.path.join(ROOT, "..", "shared", "models"),
                    help="folder of <model>/model.onnx (default ../shared/models)")
    ap.add_argument("--int8-dir", default="/tmp/quant-models",
                    help="tools/quantize_models.py's --out folder: <model>_qdq/model.onnx")
    ap.add_argument("--work-dir", default=None,
                    help="scratch crate and its target/ (default /tmp/cortex-m-bench/<workspace>)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per QEMU run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each firmware's output")
    args = ap.parse_args()

    ws = os.path.abspath(args.workspace)
    example = os.path.join(ws, "examples", "cortex-m-kws")
    for need in ["runtime-support/Cargo.toml", "onnx-macros/Cargo.toml",
                 "examples/cortex-m-kws/src/lib.rs", "examples/cortex-m-kws/memory.x"]:
        if not os.path.isfile(os.path.join(ws, need)):
            sys.exit(f"{ws}: no {need}: not an onnx-codegen workspace")
    models = [m for m in args.models.split(",") if m]
    kinds = [k for k in args.kinds.split(",") if k]
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        sys.exit(f"unknown kind {bad[0]!r}: f32 or int8")
    args.f32_dir, args.int8_dir = os.path.abspath(args.f32_dir), os.path.abspath(args.int8_dir)
    key = hashlib.sha1(ws.encode()).hexdigest()[:8]
    work = os.path.abspath(args.work_dir or os.path.join(
        "/tmp/cortex-m-bench", f"{os.path.basename(ws)}-{key}"))
    os.makedirs(os.path.join(work, "src", "bin"), exist_ok=True)
    os.makedirs(os.path.join(work, ".cargo"), exist_ok=True)
    for name in os.listdir(os.path.join(work, "src", "bin")):
        os.remove(os.path.join(work, "src", "bin", name))
    with open(os.path.join(work, "Cargo.toml"), "w") as f:
        f.write(CARGO_TOML.format(example=example, ws=ws))
    with open(os.path.join(work, ".cargo", "config.toml"), "w") as f:
        f.write(CARGO_CONFIG.format(target=TARGET, example=example))
    lock = os.path.join(example, "Cargo.lock")
    if not os.path.exists(os.path.join(work, "Cargo.lock")) and os.path.exists(lock):
        shutil.copy(lock, os.path.join(work, "Cargo.lock"))

    rows = []
    bins = []
    for model in models:
        for kind in kinds:
            try:
                bins.append((model, kind, write_bin(args, work, model, kind)))
            except ValueError as e:
                rows.append({"model": model, "kind": kind, "result": "FAIL (input)", "why": str(e)})
                print(f"{model}_{kind}: {e}", file=sys.stderr)
    env = dict(os.environ)
    env.pop("RUSTFLAGS", None)  # the target's rustflags in .cargo/config.toml must apply
    for model, kind, name in bins:
        row = {"model": model, "kind": kind}
        t0 = time.time()
        build = subprocess.run(["cargo", "build", "--release", "--bin", name], cwd=work, env=env,
                               capture_output=True, text=True)
        row["build_s"] = time.time() - t0
        if build.returncode != 0:
            row.update(result="FAIL (build)", why=tail(build.stderr, 30))
            rows.append(row)
            print(f"{name}: build failed\n{row['why']}", file=sys.stderr)
            continue
        elf = os.path.join(work, "target", TARGET, "release", name)
        try:
            run = subprocess.run(QEMU + [elf], capture_output=True, text=True,
                                 timeout=args.timeout)
            out, code = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired:
            out, code = f"no exit after {args.timeout:.0f} s", None
        if args.verbose:
            print(f"== {name} ({elf})\n{out.strip()}", file=sys.stderr)
        row.update(parse(out))
        passed = code == 0 and "PASS: output matches the reference" in out
        if passed and "instructions" in row:
            row["result"] = "PASS"
        else:
            row.update(result="FAIL (run)" if "instructions" not in row else "FAIL (output)",
                       why=tail(out))
            print(f"{name}: {row['result']}\n{row['why']}", file=sys.stderr)
        rows.append(row)

    order = {(m, k): i for i, (m, k) in enumerate((m, k) for m in models for k in kinds)}
    rows.sort(key=lambda r: order[(r["model"], r["kind"])])
    print(f"Cortex-M4F (QEMU mps2-an386, -icount shift=0), workspace {ws}")
    head = ["model", "kind", "M instr", "arena B", "stack B", "weights B", "flash B", "result"]
    print("| " + " | ".join(head) + " |")
    print("|---|---|" + "---:|" * 5 + "---|")
    for r in rows:
        instr = f"{r['instructions'] / 1e6:.3f}" if "instructions" in r else "-"
        sizes = [f"{r[k]:,}" if k in r else "-" for k in ["arena", "stack", "weights", "flash"]]
        print("| " + " | ".join([r["model"], r["kind"], instr] + sizes + [r["result"]]) + " |")
    sys.exit(0 if all(r["result"] == "PASS" for r in rows) else 1)


if __name__ == "__main__":
    main()
