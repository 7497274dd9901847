#!/usr/bin/env python3
"""Checks our text printer against the reference parser (onnx.parser).

Runs `roundtrip_corpus --emit` to print every model with our printer, parses
each text with `onnx.parser.parse_model`, saves the result as `<test>.onnx`
(or the parser's error as `<test>.error`), then runs `roundtrip_corpus
--reparsed`, which canonicalizes both models in Rust and compares them.

Usage: tools/check_printer.py [--out OUT_DIR] [ROOT...]
  OUT_DIR defaults to a temporary directory; the ROOTs (directories of test
  directories holding `model.onnx`) default to the node suite and the models.
Needs Python with `onnx`; the project itself never does.
"""
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx
import onnx.parser

SHARED = Path("/work/shared")
ROOTS = [str(SHARED / "onnx-tests" / "node"), str(SHARED / "models")]
REPO = Path(__file__).resolve().parent.parent


def runner(*args):
    cmd = ["cargo", "run", "-q", "-p", "onnx-codegen-tests", "--bin", "roundtrip_corpus", "--", *args]
    return subprocess.run(cmd, cwd=REPO)


def main():
    args = sys.argv[1:]
    out = None
    if len(args) >= 2 and args[0] == "--out":
        out = Path(args[1])
        args = args[2:]
    out = out or Path(tempfile.mkdtemp(prefix="check_printer_"))
    roots = args or ROOTS
    out.mkdir(parents=True, exist_ok=True)
    if runner("--emit", str(out), *roots).returncode != 0:
        sys.exit("printing failed")
    rejected = 0
    for text_file in sorted(out.glob("*.onnxtxt")):
        stem = text_file.with_suffix("")
        for stale in (stem.with_suffix(".onnx"), stem.with_suffix(".error")):
            stale.unlink(missing_ok=True)
        try:
            model = onnx.parser.parse_model(text_file.read_text())
        except Exception as e:  # the parser raises its own error class
            rejected += 1
            stem.with_suffix(".error").write_text(str(e))
            continue
        stem.with_suffix(".onnx").write_bytes(model.SerializeToString())
    print(f"reference parser rejected {rejected} printed models", flush=True)
    sys.exit(runner("--reparsed", str(out), "--reference-text", str(SHARED / "onnx-tests" / "text"), *roots).returncode)


if __name__ == "__main__":
    main()
