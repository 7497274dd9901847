"""Per-step times of our generated code: `python3 tools/stepprof.py model.onnx [runs] [mean|min]`.

The counterpart of `tools/ortprof.py`. Generates the model with the release
CLI, puts a timer between the generated `run`'s steps (each step starts with a
`// name (Op)` comment at the body's indent), builds that in a scratch crate
against this workspace's runtime (release, no target-cpu flags) and prints the
mean time per step (or, with `min`, each step's fastest run: steadier on a
machine shared with other work), slowest first, with its share of the total.

Timer overhead is ~20 ns a step; steps under a microsecond are noise.
Needs `target/release/onnx-codegen` (cargo build --release -p onnx-codegen-cli).
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
model = os.path.abspath(sys.argv[1])
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 50
stat = sys.argv[3] if len(sys.argv) > 3 else "mean"
if stat not in ("mean", "min"):
    sys.exit(f"unknown statistic {stat!r}: mean or min")
work = os.environ.get("STEPPROF_DIR", "/tmp/stepprof")
os.makedirs(os.path.join(work, "src"), exist_ok=True)

gen = os.path.join(work, "src", "model.rs")
subprocess.run(
    [os.path.join(ROOT, "target/release/onnx-codegen"), "generate", model, "-o", gen, "--name", "Net"],
    check=True,
)
src = open(gen).read().splitlines()
out, names, detail, in_run = [], [], [], False
step = re.compile(r"^        // (\S+ \(\w+\))$")
for line in src:
    if line.startswith("    pub fn run(") and not names:
        in_run = True
    m = step.match(line) if in_run else None
    if m and not names:
        out.append("        let mut __t = ::std::time::Instant::now();")
    if in_run and names:
        for key in ("in_channels", "out_channels", "groups", "in_dims", "kernel", "strides"):
            f = re.match(rf"^\s+{key}: (.*),$", line)
            if f and key not in detail[-1]:
                detail[-1][key] = f.group(1).replace("&", "").replace(" ", "")
    if m:
        detail.append({})
        if names:
            out.append(f"        crate::lap(&mut __t, {len(names) - 1});")
        names.append(m.group(1))
    elif in_run and line == "        Ok(())":
        out.append(f"        crate::lap(&mut __t, {len(names) - 1});")
        in_run = False
    out.append(line)
open(gen, "w").write("\n".join(out) + "\n")
names = [
    n + ("  " + " ".join(f"{k[:3]}={v}" for k, v in d.items()) if d else "")
    for n, d in zip(names, detail)
]

rt = os.path.join(ROOT, "runtime-support")
open(os.path.join(work, "Cargo.toml"), "w").write(
    f"""[package]
name = "stepprof"
version = "0.0.0"
edition = "2021"
[dependencies]
onnx-codegen-runtime = {{ path = "{rt}", features = ["std"] }}
[profile.release]
debug = 1
[workspace]
"""
)
open(os.path.join(work, "src", "main.rs"), "w").write(
    f"""#![allow(clippy::all)]
mod model;
use onnx_codegen_runtime::Model;
const STEPS: usize = {len(names)};
const NAMES: [&str; STEPS] = {json.dumps(names)};
const MIN: bool = {"true" if stat == "min" else "false"};
static mut TIMES: [u128; STEPS] = [0; STEPS];
static mut RUN: [u128; STEPS] = [0; STEPS];
fn lap(t: &mut std::time::Instant, i: usize) {{
    let now = std::time::Instant::now();
    // Single-threaded profiler: nothing else touches TIMES and RUN.
    unsafe {{ RUN[i] += (now - *t).as_nanos() }};
    *t = now;
}}
/// Adds the run just timed to TIMES (its sum, or its minimum under MIN).
fn end_run(first: bool) {{
    unsafe {{
        for i in 0..STEPS {{
            TIMES[i] = match (MIN, first) {{
                (true, true) => RUN[i],
                (true, false) => TIMES[i].min(RUN[i]),
                (false, _) => TIMES[i] + RUN[i],
            }};
            RUN[i] = 0;
        }}
    }}
}}
fn main() {{
    // `RUNS` in the environment overrides the runs the binary was built with.
    let runs: usize = std::env::var("RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or({runs});
    let mut net = Box::new(model::Net::new());
    // Inputs and outputs start on a 64-byte line, as the arena's tensors
    // do: a layer timed alone then reads its input as it would in a model.
    fn lines(n: usize) -> (Vec<u8>, usize) {{
        let v = vec![0u8; n + 64];
        let off = v.as_ptr().align_offset(64);
        (v, off)
    }}
    let mut ins: Vec<(Vec<u8>, usize, usize)> = net.inputs().iter().map(|t| {{
        let n: usize = t.shape.iter().product::<usize>() * t.elem.size();
        let (v, off) = lines(n);
        (v, off, n)
    }}).collect();
    for (v, off, n) in &mut ins {{
        for (i, b) in v[*off..*off + *n].iter_mut().enumerate() {{
            *b = if i % 4 == 3 {{ 0x3e }} else {{ (i * 7 % 251) as u8 }};
        }}
    }}
    let mut outs: Vec<(Vec<u8>, usize, usize)> = net.outputs().iter().map(|t| {{
        let n: usize = t.shape.iter().product::<usize>() * t.elem.size();
        let (v, off) = lines(n);
        (v, off, n)
    }}).collect();
    let i: Vec<&[u8]> = ins.iter().map(|(v, off, n)| &v[*off..*off + *n]).collect();
    for _ in 0..3 {{
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|(v, off, n)| &mut v[*off..*off + *n]).collect();
        net.run_bytes(&i, &mut o).unwrap();
    }}
    unsafe {{ TIMES = [0; STEPS]; RUN = [0; STEPS] }};
    for r in 0..runs {{
        let mut o: Vec<&mut [u8]> = outs.iter_mut().map(|(v, off, n)| &mut v[*off..*off + *n]).collect();
        net.run_bytes(&i, &mut o).unwrap();
        end_run(r == 0);
    }}
    // Per run: the sums divided by the runs, or the minima as they are.
    let runs = if MIN {{ 1 }} else {{ runs }};
    let times = unsafe {{ TIMES }};
    let total: u128 = times.iter().sum();
    let mut order: Vec<usize> = (0..STEPS).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(times[k]));
    for k in order {{
        let ms = times[k] as f64 / runs as f64 / 1e6;
        println!("{{:8.3}} ms {{:5.1}}%  {{}}", ms, 100.0 * times[k] as f64 / total as f64, NAMES[k]);
    }}
    println!("total/run ms {{:.4}}{{}}", total as f64 / runs as f64 / 1e6, if MIN {{ " (sum of minima)" }} else {{ "" }});
}}
"""
)
env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(work, "target"))
subprocess.run(["cargo", "build", "--release", "-q"], cwd=work, check=True, env=env)
subprocess.run([os.path.join(work, "target", "release", "stepprof")], check=True)
