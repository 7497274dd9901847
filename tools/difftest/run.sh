#!/bin/sh
# Differential test in one command: N random graphs (default 1000, seed 1)
# with onnxruntime's outputs as references, compiled and run by
# `onnx-codegen test`, then counted.
#   tools/difftest/run.sh [COUNT] [SEED] [OUT]
set -e
COUNT=${1:-1000}
SEED=${2:-1}
OUT=${3:-target/difftest/seed$SEED}
here=$(dirname "$0")
rm -rf "$OUT"
python3 "$here/gen.py" --count "$COUNT" --seed "$SEED" "$OUT"
cargo build --release -p onnx-codegen-cli
status=0
target/release/onnx-codegen test "$OUT"/g* --json "$OUT.json" --work-dir target/difftest/work > "$OUT.txt" || status=$?
python3 "$here/summarize.py" "$OUT.json"
exit $status
