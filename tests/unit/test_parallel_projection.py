"""The parallel what-if (analyze/projection/parallel_projection.py, `whatif --set ranks=N,link=…`): the link model's arithmetic
on instances with known answers, and the study of a real two-GPU run (H200, tensor-parallel HF generate), with
expectations read from the run's own kernels."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.projection.parallel_projection import (
    LinkFit,
    ParallelSettings,
    collective_ns,
    fit_links,
    hops,
)
from tests.e2e.test_cli import kernelscope

CAPTURED = Path(__file__).resolve().parents[1] / "data" / "foreign" / "captured"
DATA = Path(__file__).resolve().parents[2] / "src" / "kernelscope" / "data"
SETTINGS = ParallelSettings(sharded_groups=("matmul", "attention"), hop_latency_ns=1000.0, default_efficiency=0.75)


def test_a_line_through_the_times_gives_latency_and_link_share():
    link = 450e9
    sizes = [4e3, 2e5, 1e6, 4e6]
    # all-reduce on 2 ranks: bus bytes = bytes × 2(2−1)/2 = bytes; 3 µs + bus bytes at half the link.
    rows = [{"kind": "all_reduce", "bytes": b, "transfer_ns": 3000 + b / (0.5 * link) * 1e9, "wait_ns": 0}
            for b in sizes for _ in range(3)]
    fit = fit_links(pl.DataFrame(rows), 2, link, SETTINGS)["all_reduce"]
    assert fit.latency_ns == pytest.approx(3000, rel=1e-9) and fit.efficiency == pytest.approx(0.5, rel=1e-9)
    assert fit.efficiency_measured and fit.instances == 12


def test_one_message_size_takes_the_default_share_and_keeps_the_mean_time():
    rows = [{"kind": "all_gather", "bytes": 1e6, "transfer_ns": t, "wait_ns": 0} for t in (9000, 11000)]
    fit = fit_links(pl.DataFrame(rows), 2, 450e9, SETTINGS)["all_gather"]
    moving = 1e6 * 0.5 / (0.75 * 450e9) * 1e9  # all-gather on 2 ranks: factor (2−1)/2
    assert not fit.efficiency_measured and fit.efficiency == 0.75
    assert fit.latency_ns == pytest.approx(10000 - moving)


def test_a_collective_on_more_ranks_pays_ring_steps_and_its_bus_factor():
    fit = LinkFit("all_reduce", latency_ns=5000.0, efficiency=0.5, efficiency_measured=True, instances=1)
    assert hops("all_reduce", 8) == 14 and hops("all_gather", 8) == 7 and hops("all_reduce", 1) == 0
    # 8 ranks from 2: 12 more ring steps at 1 µs; 1 MB × 2·7/8 bus bytes at half of 900 GB/s.
    expected = 5000 + 12 * 1000 + 1e6 * (2 * 7 / 8) / (0.5 * 900e9) * 1e9
    assert collective_ns("all_reduce", 1e6, 8, 900e9, fit, 2, 1000.0) == pytest.approx(expected)
    # On the ranks and link it was fitted on, the line itself.
    assert collective_ns("all_reduce", 1e6, 2, 900e9, fit, 2, 1000.0) == pytest.approx(5000 + 1e6 / 450e9 * 1e9)


@pytest.fixture(scope="module")
def tp2_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("parallel") / "tp2"
    result = kernelscope("import", str(CAPTURED / "tp2_rank0.json.gz"), str(CAPTURED / "tp2_rank1.json.gz"),
                         "--out", str(out), "--no-report")
    assert result.returncode == 0, result.stderr
    return out


def _study(run: Path, out: Path, settings: str) -> tuple[pl.DataFrame, dict]:
    result = kernelscope("whatif", str(run), "--set", settings, "--out", str(out), "--lang", "en")
    assert result.returncode == 0, result.stderr
    return (pl.read_csv(out / "tables" / "parallel_phases.csv"),
            json.loads((out / "whatif.json").read_text())["parallel"])


def _sharded_categories() -> list[str]:
    groups = tomllib.loads((DATA / "projection.toml").read_text())["groups"]
    sharded = tomllib.loads((DATA / "whatif.toml").read_text())["parallel"]["sharded_groups"]
    return [category for category, group in groups.items() if group in sharded]


@pytest.mark.slow
def test_the_same_ranks_on_the_same_device_change_nothing(tp2_run, tmp_path):
    phases, figures = _study(tp2_run, tmp_path / "same", "ranks=2")
    assert figures["source_ranks"] == figures["target_ranks"] == 2
    for row in phases.iter_rows(named=True):
        assert row["projected_total_ns"] == pytest.approx(row["baseline_total_ns"])
        assert row["speedup"] == pytest.approx(1.0)


@pytest.mark.slow
def test_more_ranks_split_matrix_products_and_attention_only(tp2_run, tmp_path):
    phases, figures = _study(tp2_run, tmp_path / "eight", "ranks=8,link=900GB/s")
    assert figures["target_ranks"] == 8 and figures["target_link"] == 900e9
    kernels = pl.read_parquet(tp2_run / "kernels.parquet")
    sharded = _sharded_categories()
    for row in phases.filter(pl.col("phase").is_in(["prefill", "decode"])).iter_rows(named=True):
        mine = kernels.filter((pl.col("phase") == row["phase"]) & (pl.col("category") != "communication"))
        steps = mine.filter(pl.col("rank") == 0)["step"].n_unique() if row["phase"] == "decode" else 1
        per_rank_step = 2 * steps
        split = mine.filter(pl.col("category").is_in(sharded))["dur_ns"].sum() / per_rank_step
        whole = mine["dur_ns"].sum() / per_rank_step
        # The measuring device is the target: kernels keep their measured times, split ones ×2/8.
        assert row["measured_compute_ns"] == pytest.approx(whole)
        assert row["projected_sharded_ns"] == pytest.approx(split * 2 / 8)
        assert row["projected_replicated_ns"] == pytest.approx(whole - split)
        assert row["projected_comm_ns"] > row["baseline_comm_ns"] > 0  # more ring steps


@pytest.mark.slow
def test_the_link_model_reproduces_the_measured_collectives(tp2_run, tmp_path):
    _study(tp2_run, tmp_path / "check", "ranks=4")
    table = pl.read_csv(tmp_path / "check" / "tables" / "parallel_collectives.csv")
    kernels = pl.read_parquet(tp2_run / "kernels.parquet").filter(pl.col("category") == "communication")
    # Each kind's model line passes through the mean time of each message size when a kind has two sizes (a
    # least-squares line through two groups of points meets both groups' means).
    for row in table.iter_rows(named=True):
        sizes = table.filter(pl.col("kind") == row["kind"])["bytes"].n_unique()
        if sizes == 2:
            assert row["modelled_source_ns"] == pytest.approx(row["measured_transfer_ns"], rel=1e-6)
    # Every collective kernel of the run is one (rank, instance) row counted per step.
    per_step = table.with_columns(pl.col("per_step") * pl.when(pl.col("phase") == "decode")
                                  .then(kernels.filter(pl.col("phase") == "decode")["step"].n_unique())
                                  .otherwise(1) * 2)
    assert round(per_step["per_step"].sum()) == kernels.filter(pl.col("phase") != "unknown").height


@pytest.mark.parametrize("settings, names", [("ranks=0", "--set ranks"), ("ranks=x", "--set ranks"),
                                              ("link=fast", "--set link"), ("link_latency=3", "link_latency")])
@pytest.mark.slow
def test_bad_parallel_settings_are_one_line(tp2_run, tmp_path, settings, names):
    result = kernelscope("whatif", str(tp2_run), "--set", settings, "--out", str(tmp_path / "w"))
    assert result.returncode == 2 and names in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w").exists()


def test_a_run_of_one_rank_is_refused_for_ranks(tmp_path):
    run = Path(__file__).resolve().parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"
    result = kernelscope("whatif", str(run), "--set", "ranks=8", "--out", str(tmp_path / "w"))
    assert result.returncode == 2 and "one rank" in result.stderr
    assert not (tmp_path / "w").exists()
