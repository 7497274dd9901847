#!/usr/bin/env python3
"""Writes the expected messages of the text-parser fixtures.

For every `onnx-codegen/tests/fixtures/text/<name>.onnxtxt`, parses it with the
reference parser (`onnx.parser.parse_model`) and writes the serialized
`ModelProto` to `<name>.onnx` beside it. The Rust test
`onnx-codegen/tests/text_parser.rs` compares our parse with these files byte
for byte, so the expectations come from the reference, never from our output.

Usage: python3 tools/gen_text_fixtures.py [FIXTURE_DIR]
Needs the `onnx` package (only to regenerate the fixtures; building and
testing the project never runs this script).
"""

import pathlib
import sys

import onnx.parser


def main() -> int:
    root = pathlib.Path(__file__).resolve().parent.parent
    fixtures = (
        pathlib.Path(sys.argv[1])
        if len(sys.argv) > 1
        else root / "onnx-codegen" / "tests" / "fixtures" / "text"
    )
    sources = sorted(fixtures.glob("*.onnxtxt"))
    if not sources:
        print(f"no .onnxtxt files in {fixtures}", file=sys.stderr)
        return 1
    failed = 0
    for source in sources:
        try:
            model = onnx.parser.parse_model(source.read_text(encoding="utf-8"))
        except Exception as error:  # the reference reports syntax errors this way
            print(f"{source.name}: the reference parser refused it: {error}", file=sys.stderr)
            failed += 1
            continue
        target = source.with_suffix(".onnx")
        target.write_bytes(model.SerializeToString())
        print(f"wrote {target.relative_to(root) if target.is_relative_to(root) else target}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
