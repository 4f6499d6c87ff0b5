"""`kernelscope ncu --coverage`: the choice of launch configurations and the join of their measurements to every
launch, on the committed H200 run with Nsight Compute data. Expected values from the run's tables, in plain Python."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.costs.ncu_coverage import coverage_plan, every_launch, measured_share
from kernelscope.analyze.costs.ncu_measurements import base_function_name

RUN = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
GEOMETRY = ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z")


@pytest.fixture(scope="module")
def kernels() -> pl.DataFrame:
    return pl.read_parquet(RUN / "kernels.parquet")


def _configs(kernels: pl.DataFrame, phase: str) -> tuple[dict, float]:
    totals: dict = {}
    for row in kernels.filter((pl.col("phase") == phase) & (pl.col("kind") == "kernel")).iter_rows(named=True):
        key = (row["name"], *(row[g] for g in GEOMETRY))
        totals[key] = totals.get(key, 0) + row["dur_ns"]
    return totals, sum(totals.values())


@pytest.mark.parametrize("phase, coverage", [("decode", 0.95), ("decode", 0.5), ("prefill", 0.95), ("decode", 1.0)])
def test_configurations_in_descending_time_until_the_share(kernels, phase, coverage):
    totals, total = _configs(kernels, phase)
    ordered = sorted(totals.items(), key=lambda kv: -kv[1])
    expected, running = [], 0.0
    for key, dur in ordered:
        expected.append(key)
        running += dur
        if running >= coverage * total - 1e-6:
            break
    plan = coverage_plan(kernels, phase, coverage)
    chosen = [(r["name"], *(r[g] for g in GEOMETRY)) for r in plan.configs.iter_rows(named=True)]
    assert len(chosen) == len(expected)
    assert [totals[k] for k in chosen] == [totals[k] for k in expected]  # same times (ties may order otherwise)
    assert plan.share == pytest.approx(running / total)
    assert plan.share >= coverage - 1e-9
    # One configuration fewer would not reach the goal.
    assert (running - totals[expected[-1]]) / total < coverage
    assert len(totals) > len(chosen) or coverage == 1.0


def test_measurements_reach_every_launch_of_their_configuration(kernels):
    ncu = pl.read_parquet(RUN / "ncu.parquet")
    joined = every_launch(kernels, ncu, "decode")
    assert joined.height == kernels.filter((pl.col("phase") == "decode") & (pl.col("kind") == "kernel")).height
    # Per configuration measured: the mean DRAM bytes of its profiled launches, from ncu.parquet directly.
    profiled: dict = {}
    for row in ncu.iter_rows(named=True):
        key = (base_function_name(row["kernel_name"]), *(row[g] for g in GEOMETRY))
        profiled.setdefault(key, []).append(row["dram_bytes"])
    measured_time, total = 0.0, 0.0
    hits = 0
    for row in joined.iter_rows(named=True):
        key = (base_function_name(row["name"]), *(row[g] for g in GEOMETRY))
        total += row["dur_ns"]
        if key in profiled:
            hits += 1
            measured_time += row["dur_ns"]
            assert row["measured_launches"] == len(profiled[key])
            assert row["dram_bytes"] == pytest.approx(sum(profiled[key]) / len(profiled[key]))
        else:
            assert row["measured_launches"] is None and row["dram_bytes"] is None
    assert hits > len(ncu)  # every launch of a profiled configuration, not only the profiled ones
    assert measured_share(joined) == pytest.approx(measured_time / total)


def test_functions_in_an_anonymous_namespace_keep_their_name():
    """CUPTI spells a function of an unnamed namespace `ns::(anonymous namespace)::f<…>(…)`; the parenthesis is part of
    the qualified name, not the parameter list, so the base name Nsight Compute is filtered by is `f`. Names from a
    committed H200 trace: the KV cache's concatenation kernels, index selection, arange."""
    import gzip
    import json

    from kernelscope.analyze.costs.ncu_measurements import base_function_name

    trace = Path(__file__).resolve().parents[1] / "data" / "kineto" / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    names = {e["name"] for e in events if e.get("cat") == "kernel" and "(anonymous namespace)::" in e["name"]}
    expected = {"CatArrayBatchedCopy", "CatArrayBatchedCopy_vectorized", "CatArrayBatchedCopy_alignedK_contig",
                "indexSelectSmallIndex", "elementwise_kernel_with_index"}
    for name in names:
        # The function: the identifier right after the last '(anonymous namespace)::' before its template arguments.
        head = name.split("<", 1)[0]
        if head.endswith(")") or "(anonymous namespace)::" not in head:
            continue  # the unnamed namespace is inside the template arguments only
        want = head.rsplit("::", 1)[-1]
        assert want in expected
        assert base_function_name(name) == want
    assert {base_function_name(n) for n in names} >= expected
