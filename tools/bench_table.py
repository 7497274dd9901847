#!/usr/bin/env python3
"""Adds onnxruntime, measured on this machine, to the bench crate's figures.

    BENCH_JSON=/tmp/bench.json cargo run --release -p onnx-codegen-bench --features tract -- models --runs 300
    python3 tools/bench_table.py /tmp/bench.json --svg docs/performance.svg > /tmp/table.md

or, interleaved (the steadier figure on a machine whose speed drifts):

    cargo build --release -p onnx-codegen-bench --features tract
    python3 tools/bench_table.py --bench target/release/onnx-codegen-bench --rounds 3 > /tmp/table.md

With --bench, each round times every model with the bench (ours and tract)
and right after it with onnxruntime, so each pair is measured within the same
seconds; each figure is the median of its per-round medians.

onnxruntime runs each model of ../shared/models (or --models DIR) on its first
test input, single-threaded (intra- and inter-op threads 1, sequential
execution, all graph optimisations), warmed up, then timed over as many runs as
the bench used; the median is kept. Prints a Markdown table (ours, tract,
onnxruntime, the two ratios, geometric means) and writes a grouped bar chart as
SVG. Needs `pip install onnx onnxruntime numpy`; the project itself does not.
"""

import argparse
import json
import math
import os
import platform
import sys
import time


def ort_median_ms(model_dir, runs):
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(
        os.path.join(model_dir, "model.onnx"), so, providers=["CPUExecutionProvider"]
    )
    feeds = {}
    for i, inp in enumerate(sess.get_inputs()):
        t = onnx.TensorProto()
        with open(os.path.join(model_dir, "test_data_set_0", f"input_{i}.pb"), "rb") as f:
            t.ParseFromString(f.read())
        feeds[inp.name] = numpy_helper.to_array(t)
    start = time.perf_counter()
    warm = 0
    while warm < 10 or time.perf_counter() - start < 0.05:
        sess.run(None, feeds)
        warm += 1
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times)), ort.__version__


def geomean(values):
    values = [v for v in values if v]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def svg_chart(rows):
    """Horizontal bars of speed relative to onnxruntime (log scale, 1x = onnxruntime)."""
    series = [("ours", "#1f77b4"), ("tract", "#ff7f0e")]
    bar_h, gap, left, width = 11, 10, 190, 460
    group_h = bar_h * len(series) + gap
    top = 40
    height = top + group_h * len(rows) + 50
    lo, hi = 0.1, 10.0

    def x_of(ratio):
        r = min(max(ratio, lo), hi)
        return left + width * (math.log10(r) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 30}" height="{height}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{left}" y="16" font-size="13">Speed relative to onnxruntime '
        "(single thread, higher is faster, log scale)</text>",
    ]
    for tick in [0.1, 0.2, 0.5, 1, 2, 5, 10]:
        x = x_of(tick)
        stroke = "#000" if tick == 1 else "#ddd"
        out.append(
            f'<line x1="{x:.1f}" y1="{top - 6}" x2="{x:.1f}" y2="{height - 40}" stroke="{stroke}"/>'
        )
        out.append(f'<text x="{x:.1f}" y="{height - 26}" text-anchor="middle">{tick:g}x</text>')
    for g, row in enumerate(rows):
        y0 = top + g * group_h
        out.append(
            f'<text x="{left - 8}" y="{y0 + bar_h * 1.5 + 4}" text-anchor="end">{row["model"]}</text>'
        )
        for s, (key, color) in enumerate(series):
            ms = row.get(key)
            if not ms or not row.get("onnxruntime"):
                continue
            ratio = row["onnxruntime"] / ms
            y = y0 + s * bar_h
            x1 = x_of(ratio)
            x0 = x_of(1.0)
            out.append(
                f'<rect x="{min(x0, x1):.1f}" y="{y}" width="{abs(x1 - x0):.1f}" '
                f'height="{bar_h - 1}" fill="{color}"><title>{key}: {ms:.4f} ms '
                f"({ratio:.2f}x)</title></rect>"
            )
    for s, (key, color) in enumerate(series):
        x = left + s * 120
        out.append(f'<rect x="{x}" y="{height - 16}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{x + 14}" y="{height - 7}">{key}</text>')
    out.append(
        f'<text x="{left + 240}" y="{height - 7}">onnxruntime = 1x (black line)</text>'
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bench_one(binary, model, runs):
    """Runs the bench on one model; its JSON entry for that model."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.json")
        env = dict(os.environ, BENCH_ONLY=model, BENCH_JSON=out)
        subprocess.run(
            [binary, "models", "--runs", str(runs)],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        with open(out) as f:
            entries = json.load(f)["models"]
    found = [e for e in entries if e["model"] == model]
    if not found:
        sys.exit(f"the bench did not time {model}")
    return found[0]


def interleaved(args):
    """Per round and model: the bench, then onnxruntime; medians of the rounds."""
    import statistics

    models = sorted(
        d
        for d in os.listdir(args.models)
        if os.path.isfile(os.path.join(args.models, d, "model.onnx"))
    )
    seen = {m: {"ours": [], "tract": [], "onnxruntime": []} for m in models}
    version = "?"
    for r in range(args.rounds):
        for m in models:
            e = bench_one(args.bench, m, args.runs)
            ort_ms, version = ort_median_ms(os.path.join(args.models, m), args.runs)
            seen[m]["ours"].append(e["ours_ms"])
            if e.get("tract_ms"):
                seen[m]["tract"].append(e["tract_ms"])
            seen[m]["onnxruntime"].append(ort_ms)
        print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
    rows = []
    for m in models:
        row = {"model": m}
        for key, values in seen[m].items():
            row[key] = statistics.median(values) if values else None
        rows.append(row)
    return rows, version, args.runs


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bench_json", nargs="?", help="the file the bench wrote (BENCH_JSON=...)")
    ap.add_argument("--bench", help="the bench binary, run model by model between onnxruntime runs")
    ap.add_argument("--rounds", type=int, default=3, help="rounds with --bench")
    ap.add_argument("--runs", type=int, default=300, help="timed runs per model with --bench")
    ap.add_argument("--models", default=os.path.join(here, "..", "..", "shared", "models"))
    ap.add_argument("--svg", help="write the bar chart here")
    args = ap.parse_args()
    if args.bench:
        rows, version, runs = interleaved(args)
    elif args.bench_json:
        with open(args.bench_json) as f:
            bench = json.load(f)
        runs = bench.get("runs", 200)
        rows = []
        version = "?"
        for m in bench["models"]:
            ort_ms, version = ort_median_ms(os.path.join(args.models, m["model"]), runs)
            rows.append(
                {
                    "model": m["model"],
                    "ours": m["ours_ms"],
                    "tract": m.get("tract_ms"),
                    "onnxruntime": ort_ms,
                }
            )
    else:
        ap.error("give the bench's JSON file or --bench BINARY")
    print(
        f"Machine: {platform.processor() or platform.machine()}, onnxruntime {version}, "
        f"{runs} timed runs per model, medians in ms.\n"
    )
    print("| model | ours | tract | onnxruntime | tract / ours | onnxruntime / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        t = r["tract"]
        print(
            f"| {r['model']} | {r['ours']:.4f} | {t:.4f} | {r['onnxruntime']:.4f} | "
            f"{t / r['ours']:.2f}x | {r['onnxruntime'] / r['ours']:.2f}x |"
            if t
            else f"| {r['model']} | {r['ours']:.4f} | - | {r['onnxruntime']:.4f} | - | "
            f"{r['onnxruntime'] / r['ours']:.2f}x |"
        )
    g_ort = geomean([r["onnxruntime"] / r["ours"] for r in rows])
    g_tract = geomean([r["tract"] / r["ours"] for r in rows if r["tract"]])
    print(
        f"| **geometric mean** | | | | **{g_tract:.2f}x** | **{g_ort:.2f}x** |"
        if g_tract
        else f"| **geometric mean** | | | | - | **{g_ort:.2f}x** |"
    )
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(svg_chart(rows))
        print(f"\nwrote {args.svg}", file=sys.stderr)


if __name__ == "__main__":
    main()
