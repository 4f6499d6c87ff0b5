"""The two ranks of `kernelscope profile --gpus 2 --model deepseek-v3 --ep 2` on two H200s (tests/data/multi_gpu):
the import of the run's own per-rank traces gives every rank its own rows, and the communication tables hold the
experts' all-reduces of the MoE layers. Expected values are read from the JSON files with plain Python."""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "multi_gpu"
RANKS = [DATA / "deepseek_v3_ep2_rank0.json.gz", DATA / "deepseek_v3_ep2_rank1.json.gz"]
GPU_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _collectives(path: Path) -> list[dict]:
    return [e for e in _events(path) if e.get("cat") == "kernel" and "Collective name" in (e.get("args") or {})]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ep2") / "run"
    # Given in reverse: the traces name their rank (distributedInfo), and that decides, not the order.
    assert main(["-q", "import", *map(str, reversed(RANKS)), "--out", str(out), "--no-report"]) == 0
    return out


def test_each_rank_holds_its_own_traces_gpu_activities(run):
    kernels = pl.read_parquet(run / "kernels.parquet")
    for rank, path in enumerate(RANKS):
        activities = [e for e in _events(path) if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITIES]
        mine = kernels.filter(pl.col("rank") == rank)
        assert mine.height == len(activities)
        assert mine["dur_ns"].sum() == pytest.approx(sum(e["dur"] for e in activities) * 1e3, abs=len(activities))


def test_the_experts_all_reduce_is_matched_across_ranks_in_every_moe_layer(run):
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.ranks.communication import communication
    from kernelscope.load import rundir

    result = communication(with_costs_and_names(rundir.read_run(run)).kernels, link_bandwidth=900e9)
    assert result is not None and result.unmatched == 0
    per_rank = [_collectives(p) for p in RANKS]
    assert result.instances.height == sum(len(c) for c in per_rank)
    # Message sizes from the kernels' own args: element count × 2 bytes (bf16), one size per phase.
    sizes = collections.Counter(e["args"]["In msg nelems"] * 2 for e in per_rank[0])
    table = result.by_collective
    assert dict(zip(table["bytes"].cast(pl.Int64), table["instances"], strict=True)) == dict(sizes)
    # Expert parallelism splits the routed experts only: every collective runs in the experts of a MoE layer.
    assert set(table["where"]) == {"mlp.experts"} and set(table["kind"]) == {"all_reduce"}
    layer_types = {1: "DeepseekV3DecoderLayer (DeepseekV3MoE)", 2: "DeepseekV3DecoderLayer (DeepseekV3MoE)"}
    by_layer = communication(with_costs_and_names(rundir.read_run(run)).kernels, link_bandwidth=900e9,
                             layer_types=layer_types).by_layer
    assert by_layer is not None and set(by_layer["layers"]) == {2}


def test_waits_are_the_gaps_to_the_later_rank(run):
    from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
    from kernelscope.analyze.ranks.communication import communication
    from kernelscope.load import rundir

    result = communication(with_costs_and_names(rundir.read_run(run)).kernels)
    ordered = [sorted(_collectives(p), key=lambda e: e["ts"]) for p in RANKS]
    # Both traces come from one host, so their timestamps share a clock.
    expected = [max(a["ts"], b["ts"]) - e["ts"] for a, b in zip(*ordered, strict=True) for e in (a, b)]
    got = result.instances.sort("seq", "rank")["wait_ns"].to_list()
    assert len(got) == len(expected)
    assert max(abs(g - w * 1e3) for g, w in zip(got, expected, strict=True)) <= 2


def _prefill_device_ns(path: Path) -> float:
    """Device time of the GPU work launched inside the trace's prefill range (kernelscope's phase range), from the
    launch calls' own timestamps: a kernel is matched to its launch by the correlation id."""
    events = _events(path)
    prefill = next(e for e in events if e.get("cat") == "user_annotation" and e["name"] == "ks.phase:prefill")
    launches = {e["args"]["correlation"]: e["ts"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in (e.get("args") or {})}
    inside = [e for e in events if e.get("ph") == "X" and e.get("cat") in GPU_ACTIVITIES
              and prefill["ts"] <= launches.get(e["args"].get("correlation"), -1) <= prefill["ts"] + prefill["dur"]]
    return sum(e["dur"] for e in inside) * 1e3


@pytest.mark.slow
def test_the_layer_breakdown_gives_one_ranks_share(tmp_path):
    out = tmp_path / "run"
    assert main(["-q", "import", *map(str, RANKS), "--out", str(out), "--lang", "en"]) == 0
    types = pl.read_csv(out / "report" / "tables" / "layer_types_prefill.csv")
    per_rank = sum(_prefill_device_ns(p) for p in RANKS) / len(RANKS)
    assert types["per_step_ns"].sum() == pytest.approx(per_rank, rel=1e-6)
    assert "With 2 ranks, times and launches are per rank" in (out / "report" / "report.md").read_text()
