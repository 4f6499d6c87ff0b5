"""Collectives costed from the functional collective ops' recorded tensors (DTensor and FSDP2 call them), checked
against the file itself: expected bytes are computed here from the JSON's shapes and scalars (plain Python)."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import polars as pl

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.costs.kernel_costs import kernel_costs
from kernelscope.load.sources import read_trace

TRACE = Path(__file__).resolve().parents[1] / "data" / "public" / "tokenomics" / \
    "traces__llama_trace_4layers0_dim_1024.json.gz"
ELEMENT = {"float": 4, "c10::BFloat16": 2, "c10::Half": 2}


def _expected() -> dict[str, list[float]]:
    """NCCL kernel name → the bytes of the functional collective around each of its launches, in launch order."""
    with gzip.open(TRACE) as f:
        events = json.load(f)["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    functional = [e for e in ops if e["name"] in ("_c10d_functional::all_gather_into_tensor",
                                                  "_c10d_functional::reduce_scatter_tensor")]
    by_external = {e["args"].get("External id"): e for e in ops + [e for e in events
                                                                    if e.get("cat") == "user_annotation"]}
    out: dict[str, list[float]] = {}
    for k in sorted((e for e in events if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel")),
                    key=lambda e: e["ts"]):
        inner = by_external[k["args"]["External id"]]
        around = [f for f in functional if f["tid"] == inner["tid"]
                  and f["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= f["ts"] + f["dur"]]
        assert len(around) == 1
        op = around[0]["args"]
        size = math.prod(op["Input Dims"][0]) * ELEMENT[op["Input type"][0]]
        if "all_gather" in around[0]["name"]:
            group = int(op["Concrete Inputs"][1])
            nbytes = size + size * group  # the shard read, every rank's shard written
        else:
            group = int(op["Concrete Inputs"][2])
            nbytes = size + size / group  # the whole input read, this rank's reduced shard written
        out.setdefault(k["name"], []).append(nbytes)
    return out


def test_nccl_kernels_of_functional_collectives_cost_their_tensors():
    expected = _expected()
    assert sum(len(v) for v in expected.values()) == 19  # 10 all-gathers, 9 reduce-scatters
    kernels, ops = attribute(read_trace(TRACE))
    k = kernel_costs(kernels, ops).filter(pl.col("name").str.starts_with("ncclDevKernel")).sort("start_ns")
    for name, want in expected.items():
        got = k.filter(pl.col("name") == name)
        assert got["bytes_moved"].to_list() == want
        assert set(got["cost_source"]) == {"op_shapes"} and set(got["flops"]) == {0.0}
