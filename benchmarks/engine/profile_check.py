"""Checks a `kernelscope profile --backend engine` run directory: attribution and naming of its kernels.

Usage: python3 benchmarks/engine/profile_check.py RUN_DIR  (prints JSON; exit code 1 when a decode kernel is unattributed)
"""

import json
import sys
from pathlib import Path

import polars as pl

run = Path(sys.argv[1])
kernels = pl.read_parquet(run / "kernels.parquet")
summary = json.loads((run / "summary.json").read_text())
decode = kernels.filter(pl.col("phase") == "decode")
device = decode.filter(pl.col("kind") == "kernel")
unattributed = decode.filter(pl.col("module").is_null() | pl.col("step").is_null())


def by(frame: pl.DataFrame, *keys: str) -> list[dict]:
    return (frame.group_by(*keys).agg(pl.len().alias("kernels"), (pl.col("dur_ns").sum() / 1e3).alias("us"))
            .sort("us", descending=True).to_dicts())


graph = pl.col("launch_api") == "cudaGraphLaunch"
report = {
    "kernels": kernels.height,
    "phases": by(kernels, "phase"),
    "decode_steps": decode["step"].n_unique(),
    "decode_kernels": decode.height,
    "decode_graph_kernels": decode.filter(graph).height,
    "decode_unattributed": unattributed.height,
    "decode_unattributed_names": by(unattributed, "name")[:10],
    "decode_libraries": by(device, "library"),
    "decode_not_engine": by(device.filter(pl.col("library") != "kernelscope engine"), "name", "module")[:10],
    "decode_friendly": by(device.filter(pl.col("step") == 5), "friendly_name", "category")[:20],
    "decode_cost_models": by(decode, "cost_model"),
    "decode_step5_modules": by(decode.filter(pl.col("step") == 5), "module")[:12],
    "graph_replays": summary.get("graph_replays"),
    "coverage": {k: summary.get(k) for k in ("attribution_coverage", "phase_coverage", "module_coverage",
                                             "op_coverage", "cost_coverage", "catalog_coverage")},
    "timings": summary.get("timings"),
}
print(json.dumps(report, indent=1, default=str))
sys.exit(1 if unattributed.height else 0)
