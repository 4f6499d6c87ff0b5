"""Checks of the multi-GPU device runs (benchmarks/device/multi_gpu_capture.sh), computed from the inputs themselves
(plain Python over the ranks' trace JSON), not from kernelscope's code:
  1. every rank's rows in kernels.parquet are its trace's GPU activities (kernel, memcpy, memset): same count,
     same summed duration;
  2. the run made by `kernelscope profile --gpus 2` and the import of the same model's plain torchrun traces hold
     the same collectives: per phase, kind and message size, the same instances, and the NCCL kernels of each
     trace (counted here from their args) are what the tables hold.
Usage: python benchmarks/device/multi_gpu_check.py RUNS_DIR   (RUNS_DIR holds tp2-small, tp2-plain-import, qwen2-1.5b-tp2, deepseek-v3-ep2
and, for the plain import, plain/tp2_rank*.json.gz beside it). Prints one JSON object."""

from __future__ import annotations

import collections
import csv
import gzip
import json
import sys
from pathlib import Path

import polars as pl

GPU = ("kernel", "gpu_memcpy", "gpu_memset")


def events(path: Path) -> list[dict]:
    return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]


def per_rank_equal(run: Path) -> dict:
    kernels = pl.read_parquet(run / "kernels.parquet")
    out = {}
    for trace in sorted((run / "traces").glob("rank*.json.gz")):
        rank = int(trace.name[4:].split(".")[0])
        gpu = [e for e in events(trace) if e.get("ph") == "X" and e.get("cat") in GPU]
        mine = kernels.filter(pl.col("rank") == rank)
        trace_ns = round(sum(e["dur"] for e in gpu) * 1000)
        out[rank] = {"trace_activities": len(gpu), "run_rows": mine.height, "trace_ns": trace_ns,
                     "run_ns": int(mine["dur_ns"].sum()),
                     "equal": len(gpu) == mine.height and abs(trace_ns - mine["dur_ns"].sum()) <= len(gpu)}
    return out


def nccl_per_rank(traces: list[Path]) -> list[collections.Counter]:
    """(collective, bytes) of every NCCL kernel, per rank, from the kernel's own args."""
    size = {"BFloat16": 2, "Float": 4, "Half": 2, "Int": 4, "Long": 8}
    counts = []
    for trace in traces:
        c: collections.Counter = collections.Counter()
        for e in events(trace):
            args = e.get("args") or {}
            if e.get("cat") == "kernel" and "Collective name" in args:
                # nccl-tests' convention: an all-gather's message is its gathered output, others their input
                name = args["Collective name"]
                kind = "all_gather" if name.startswith("allgather") else \
                    "all_reduce" if name.startswith("allreduce") else name
                n = args["Out msg nelems"] if kind == "all_gather" else args["In msg nelems"]
                c[(kind, n * size[args["dtype"]])] += 1
        counts.append(c)
    return counts


def table(run: Path) -> dict:
    with open(run / "report" / "tables" / "communication.csv") as f:
        rows = list(csv.DictReader(f))
    out: collections.Counter = collections.Counter()
    for r in rows:
        out[(r["phase"], r["kind"], float(r["bytes"]))] += int(r["instances"])
    return out


def main() -> None:
    runs = Path(sys.argv[1])
    result = {"per_rank": {name: per_rank_equal(runs / name)
                           for name in ("tp2-small", "qwen2-1.5b-tp2", "deepseek-v3-ep2") if (runs / name).is_dir()}}
    profiled, imported = table(runs / "tp2-small"), table(runs / "tp2-plain-import")
    result["communication_same"] = profiled == imported
    result["communication"] = {" ".join(map(str, k)): [profiled[k], imported.get(k)] for k in sorted(profiled)}
    # The tables' instances (matched across ranks) against the NCCL kernels each rank's trace holds.
    for name, traces in (("tp2-small", sorted((runs / "tp2-small" / "traces").glob("rank*.json.gz"))),
                         ("tp2-plain-import", sorted((runs.parent / "plain").glob("tp2_rank*.json.gz")))):
        per_rank = nccl_per_rank(traces)
        tab: collections.Counter = collections.Counter()
        for (_, kind, size), n in table(runs / name).items():
            tab[(kind, size)] += n
        result[f"{name}_tables_match_trace_kernels"] = all(
            {(k, float(b)): n for (k, b), n in r.items()} == dict(tab) for r in per_rank)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
