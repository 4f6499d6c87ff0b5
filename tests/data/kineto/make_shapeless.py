"""A trace as torch.profiler writes it without record_shapes, made from one recorded with it: every event's input
shapes, dtypes, strides and scalars removed, all else kept byte for byte in meaning.

    python tests/data/kineto/make_shapeless.py IN.json.gz OUT.json.gz
"""
import gzip
import json
import sys

SHAPE_ARGS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")

with gzip.open(sys.argv[1], "rt") as f:
    trace = json.load(f)
for event in trace["traceEvents"]:
    args = event.get("args")
    if isinstance(args, dict):
        for key in SHAPE_ARGS:
            args.pop(key, None)
with gzip.open(sys.argv[2], "wt") as f:
    json.dump(trace, f)
