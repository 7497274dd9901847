"""Per-node times of onnxruntime, one thread: `python3 tools/ortprof.py model.onnx [runs] [mean|min]`.

Prints each node's median-free mean time (ms; with `min`, its fastest run,
steadier on a shared machine), share of the total, op type and input shapes,
slowest first, so a layer can be matched to our own per-shape figures
(`onnx-codegen-bench conv`, `tools/stepprof.py`).
"""
import collections
import json
import sys

import numpy as np
import onnxruntime as ort

m = sys.argv[1]
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
use_min = len(sys.argv) > 3 and sys.argv[3] == "min"
so = ort.SessionOptions()
so.intra_op_num_threads = 1
so.inter_op_num_threads = 1
so.enable_profiling = True
so.profile_file_prefix = "/tmp/ortprof"
s = ort.InferenceSession(m, so, providers=["CPUExecutionProvider"])
feeds = {}
for i in s.get_inputs():
    shp = [d if isinstance(d, int) else 1 for d in i.shape]
    if "float" in i.type:
        feeds[i.name] = np.random.rand(*shp).astype(np.float32)
    else:
        feeds[i.name] = np.ones(shp, dtype=np.int64)
for _ in range(runs):
    s.run(None, feeds)
ev = json.load(open(s.end_profiling()))
agg = collections.defaultdict(lambda: [0, 0, ""])
for e in ev:
    if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
        k = (e["args"].get("op_name"), e["name"][:-12])
        if use_min:
            agg[k][0] = e["dur"] if agg[k][1] == 0 else min(agg[k][0], e["dur"])
            agg[k][1] = 1
        else:
            agg[k][0] += e["dur"]
            agg[k][1] += 1
        shapes = [list(d.values())[0] for d in e["args"].get("input_type_shape", [])]
        agg[k][2] = " ".join(str(x) for x in shapes[:2])
tot = sum(v[0] for v in agg.values())
for k, v in sorted(agg.items(), key=lambda x: -x[1][0]):
    print(f"{k[0]:12s} {v[0] / v[1] / 1000:7.3f} ms {100 * v[0] / tot:5.1f}%  {k[1][:28]:28s} {v[2]}")
print("total/run ms", tot / (1 if use_min else runs) / 1000, "(sum of minima)" if use_min else "")
