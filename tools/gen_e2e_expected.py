"""Writes the expected outputs of the end-to-end test models.

For each tests/models/<name>.onnxtxt: parse it with the reference parser,
make deterministic inputs, run the ONNX reference evaluator
(onnx.reference.ReferenceEvaluator), and write <name>.json with the inputs and
the reference outputs. The expected values come from the reference, never
from onnx-codegen. A model with a <name>.fix file (NAME=V,V,... per line) is generated with
those inputs fixed (`--fix`), and its inputs take those values here.
A model of IR version 3 or older gets inputs only for its graph inputs without
an initializer (the others are constants there, as onnx-codegen reads them by
default). A model of a default-domain opset before 7 is first converted to
opset 13 by onnx's version converter (the reference evaluator implements the
current operator versions only: not the legacy `broadcast`/`axis` attributes).
Run: python3 tools/gen_e2e_expected.py [model names]
"""
import json
import pathlib
import sys

import numpy as np
import onnx
import onnx.parser
from onnx import helper, version_converter
from onnx.reference import ReferenceEvaluator

ROOT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "models"
# Symbolic dimensions in the test models, bound the same way in tests/build.rs.
DIMS = {"N": 2}
# String inputs, by model then input name: fixed words rather than random ones.
STRINGS = {
    "strings": {
        "words": ["a", "b.c", "Straße.x.y", "x-y"],
        "suffix": ["a"],
    },
}

# Absolute tolerances beyond the default, by model: a quantized model's
# integer kernels round once where the reference's float reading rounds each
# step, so outputs may be one output quantization step apart.
ATOL = {
    "quantized_mlp": 0.0301,
    "quantized_residual": 0.0601,
}

# Integer inputs whose values must be in range (sequence positions), by
# model then input name.
VALUES = {
    "sequence_positions": {"ins": 1, "era": -3, "at": 1},
}


def shape_of(value_info):
    dims = []
    for d in value_info.type.tensor_type.shape.dim:
        dims.append(d.dim_value if d.HasField("dim_value") else DIMS[d.dim_param])
    return dims


def make_input(rng, value_info, model_name):
    if value_info.type.tensor_type.elem_type == onnx.TensorProto.STRING:
        words = STRINGS[model_name][value_info.name]
        return np.array(words, dtype=object).reshape(shape_of(value_info))
    dtype = helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)
    shape = shape_of(value_info)
    if value_info.name in VALUES.get(model_name, {}):
        return np.array(VALUES[model_name][value_info.name], dtype=dtype).reshape(shape)
    if np.issubdtype(dtype, np.integer):
        values = rng.integers(-20, 20, size=shape)
        values[values == 0] = 7  # divisors stay non-zero
        return values.astype(dtype)
    return (rng.random(shape) * 2.0 + 0.25).astype(dtype)


def main():
    only = set(sys.argv[1:])
    for path in sorted(ROOT.glob("*.onnxtxt")):
        if only and path.stem not in only:
            continue
        model = onnx.parser.parse_model(path.read_text())
        onnx.checker.check_model(model, full_check=True)
        rng = np.random.default_rng(1234)
        initialized = {t.name for t in model.graph.initializer}
        fed = [
            vi for vi in model.graph.input
            if model.ir_version >= 4 or vi.name not in initialized
        ]
        inputs = {vi.name: make_input(rng, vi, path.stem) for vi in fed}
        # Inputs fixed at generation time (<stem>.fix, NAME=V,V,... per line,
        # read by tests/build.rs too) take those values.
        fix = path.with_suffix(".fix")
        if fix.exists():
            for line in fix.read_text().split():
                name, values = line.split("=")
                old = inputs[name]
                inputs[name] = np.array([int(v) for v in values.split(",")], dtype=old.dtype).reshape(old.shape)
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        reference = version_converter.convert_version(model, 13) if opset < 7 else model
        outputs = ReferenceEvaluator(reference).run(None, inputs)
        record = {
            "dims": DIMS,
            "inputs": [inputs[vi.name].flatten().tolist() for vi in fed],
            "outputs": [np.asarray(o).flatten().tolist() for o in outputs],
        }
        if path.stem in ATOL:
            record["atol"] = ATOL[path.stem]
        path.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
        print("wrote", path.with_suffix(".json").name)


if __name__ == "__main__":
    main()
