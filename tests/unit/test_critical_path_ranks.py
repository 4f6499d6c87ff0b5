"""The critical path across ranks: on a public 8-rank training run (PARAM's DLRM on V100s, NCCL) the path moves
between ranks only through collectives, and each time to the rank that entered the collective last, as the files
themselves time it (plain json); every step of a run of several ranks names the rank that decides it."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import polars as pl

from tests.step_reference import _document
from tests.unit.test_critical_path import DATA, critical_path_of

DLRM = tuple(sorted(f"public/param/{p.name}" for p in (DATA / "public" / "param").glob("dlrm_kineto__*.json.gz")))
SEVERAL = [DLRM, ("multi_gpu/deepseek_v3_ep2_rank0.json.gz", "multi_gpu/deepseek_v3_ep2_rank1.json.gz"),
           ("foreign/captured/tp2_rank0.json.gz", "foreign/captured/tp2_rank1.json.gz"),
           ("public/hta/data__trace_filter__sampled_rank-0.json.gz",
            "public/hta/data__trace_filter__sampled_rank-1.json.gz")]


def _nccl_starts(path: Path) -> dict[str, list[float]]:
    """Per NCCL kernel name, its kernels' starts (µs + the file's base, as ns) in time order."""
    document = _document(path)
    base = document.get("baseTimeNanoseconds", 0) if isinstance(document, dict) else 0
    starts: dict[str, list[float]] = defaultdict(list)
    for e in document["traceEvents"]:
        if str(e.get("cat", "")).lower() == "kernel" and str(e.get("name", "")).startswith("nccl"):
            starts[e["name"]].append(e["ts"] * 1000.0 + (base if isinstance(base, int) else 0))
    return {name: sorted(values) for name, values in starts.items()}


def test_the_path_crosses_ranks_through_collectives_to_the_last_to_enter():
    assert len(DLRM) == 8
    path = critical_path_of(DLRM)
    segments = path.segments
    ranks = segments["rank"].to_list()
    crossings = [i for i in range(1, segments.height) if ranks[i] != ranks[i - 1]]
    assert crossings  # the step's path is not one rank's
    files = [_nccl_starts(DATA / f) for f in DLRM]
    rank_of_file = [_document(DATA / f)["distributedInfo"]["rank"] for f in DLRM]
    for i in crossings:
        later = segments.row(i, named=True)
        # Time flows forward along the path: the later segment is a collective's data movement on one rank,
        # which began when the rank of the earlier segment entered it.
        assert later["class"] == "communication" and later["edge"] == "collective", later
        earlier_rank = ranks[i - 1]
        name = later["name"]
        kernel_id = later["kernel_id"]
        mine = path.graph.devices.filter(pl.col("rank") == later["rank"]).sort("kernel_id")
        same = mine.filter(pl.col("name") == name)["kernel_id"].to_list()
        nth = same.index(kernel_id)
        entered = {rank_of_file[r]: files[r][name][nth] for r in range(len(DLRM)) if len(files[r].get(name, [])) > nth}
        assert len(entered) == len(DLRM)
        assert max(entered, key=entered.get) == earlier_rank


def test_every_step_of_several_ranks_names_the_rank_that_decides_it():
    for files in SEVERAL:
        path = critical_path_of(files)
        held = (path.segments.group_by("phase", "generation", "step", "rank").agg(pl.col("dur_ns").sum())
                .sort("dur_ns", "rank", descending=[True, False])
                .group_by("phase", "generation", "step", maintain_order=True).agg(pl.col("rank").first().alias("most")))
        steps = path.steps.join(held, on=["phase", "generation", "step"], nulls_equal=True)
        assert steps.height == path.steps.height > 0
        assert (steps["deciding_rank"] == steps["most"]).all()
        assert set(steps["deciding_rank"].to_list()) <= set(path.graph.devices["rank"].unique().to_list())
