"""`kernelscope profile --gpus N` on CPU: the multi-process path (torchrun, gloo, transformers' tensor-parallel
plan) run for real with two processes, on one node and as two nodes of one machine; expectations read from the
ranks' own traces."""

from __future__ import annotations

import collections
import gzip
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tests.e2e.test_cli import CALIBRATION_DIR, kernelscope

SMALL = ("--device", "cpu", "--prompt-len", "16", "--new-tokens", "4", "--repeats", "1", "--warmup", "1")
pytestmark = pytest.mark.slow


def _cpu_ops_per_name(trace: Path) -> collections.Counter:
    """The CPU ops a rank's trace records (complete events of category cpu_op), by name."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return collections.Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks") / "tp2"
    result = kernelscope("profile", "--gpus", "2", *SMALL, "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(out.resolve())
    return out


def test_two_processes_make_one_run_with_both_ranks(two_ranks):
    info = json.loads((two_ranks / "run.json").read_text())
    parallel = info["parallel"]
    assert parallel["world_size"] == 2 and parallel["tensor_parallel"] == 2 and parallel["backend"] == "gloo"
    assert [r["rank"] for r in parallel["ranks"]] == [0, 1]
    assert [r["trace"] for r in parallel["ranks"]] == ["traces/rank0.json.gz", "traces/rank1.json.gz"]
    # Both ranks run one model: the same tokens with and without ranges and under the profiler.
    assert all(r["tokens_match"] and r["profiled_tokens_match"] for r in parallel["ranks"])
    assert info["hardware"]["count"] == 2 and info["workload"]["model"] == "tiny"
    assert not list(two_ranks.glob("ranks")) and not list(two_ranks.parent.glob(".tp2.*"))  # nothing left over


def test_each_ranks_rows_are_its_own_trace(two_ranks):
    kernels = pl.read_parquet(two_ranks / "kernels.parquet")
    assert sorted(kernels["rank"].unique().to_list()) == [0, 1]
    for rank in (0, 1):
        expected = _cpu_ops_per_name(two_ranks / "traces" / f"rank{rank}.json.gz")
        mine = kernels.filter(pl.col("rank") == rank)
        assert collections.Counter(mine["name"].to_list()) == expected
        # Tensor parallelism: each rank ran collectives of its own (gloo's, as CPU ops).
        assert any(name.startswith("c10d::") for name in expected)


def _generating_threads(trace: Path) -> set[int]:
    """The threads that hold kernelscope's phase ranges in a rank's trace (the thread that generates)."""
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    return {e["tid"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ks.phase:")}


def test_every_rank_is_attributed_to_phases_and_modules(two_ranks):
    kernels = pl.read_parquet(two_ranks / "kernels.parquet")
    for rank in (0, 1):
        mine = kernels.filter(pl.col("rank") == rank)
        generating = _generating_threads(two_ranks / "traces" / f"rank{rank}.json.gz")
        assert len(generating) == 1
        known = (pl.col("phase") != "unknown") & pl.col("module").is_not_null()
        # Every op of the generating thread lies in the ranges; CPU ops that gloo's own threads run (copies of
        # an all-gather) lie outside them (on GPUs every kernel is launched from the ranges). By thread, not by
        # share of time: the threads' times vary with the machine's load.
        on_generating = mine.filter(pl.col("tid").is_in(list(generating)))
        assert on_generating.height > 0.9 * mine.height
        assert on_generating.filter(~known).height == 0
        assert set(mine["phase"].unique()) >= {"prefill", "decode"}
        assert mine.filter(pl.col("phase") == "decode")["step"].n_unique() == 3  # 4 new tokens: 3 decode steps


def test_the_report_has_a_row_per_rank(two_ranks):
    kernels = pl.read_parquet(two_ranks / "kernels.parquet")
    table = pl.read_csv(two_ranks / "report" / "tables" / "ranks.csv")
    assert table["rank"].to_list() == [0, 1]
    for row in table.iter_rows(named=True):
        mine = kernels.filter(pl.col("rank") == row["rank"])
        assert row["kernel_count"] == mine.height and row["device_time_ns"] == mine["dur_ns"].sum()
    report = (two_ranks / "report" / "report.md").read_text()
    assert "## Ranks" in report and "over gloo" in report
    assert "## 各 rank" in (two_ranks / "report" / "report.zh.md").read_text()


def test_importing_the_ranks_traces_gives_the_same_rows(two_ranks, tmp_path):
    traces = [two_ranks / "traces" / f"rank{r}.json.gz" for r in (1, 0)]  # out of order: the trace says its rank
    out = tmp_path / "imported"
    result = kernelscope("import", *map(str, traces), "--out", str(out), "--no-report")
    assert result.returncode == 0, result.stderr
    columns = ["rank", "name", "dur_ns", "start_ns", "phase", "step", "module"]
    profiled = pl.read_parquet(two_ranks / "kernels.parquet").select(columns).sort(columns)
    imported = pl.read_parquet(out / "kernels.parquet").select(columns).sort(columns)
    assert imported.equals(profiled)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_meet_at_the_endpoint_and_node_0_writes_the_run(tmp_path):
    out = tmp_path / "nodes"
    endpoint = f"127.0.0.1:{_free_port()}"
    env = dict(os.environ, KERNELSCOPE_CALIBRATION_DIR=str(CALIBRATION_DIR))
    common = ["profile", "--gpus", "1", "--nnodes", "2", "--rdzv-endpoint", endpoint, *SMALL, "--no-report",
              "--out", str(out)]
    nodes = [subprocess.Popen([sys.executable, "-m", "kernelscope", "-q", *common, "--node-rank", str(k)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for k in (1, 0)]
    results = [(p.wait(timeout=600), *p.communicate()) for p in nodes]
    for code, _, stderr in results:
        assert code == 0, stderr
    assert results[1][1].strip().splitlines()[-1] == str(out.resolve())
    info = json.loads((out / "run.json").read_text())
    assert info["parallel"]["nodes"] == 2 and info["parallel"]["world_size"] == 2
    assert [r.get("local_rank", 0) for r in info["parallel"]["ranks"]] == [0, 0]
    kernels = pl.read_parquet(out / "kernels.parquet")
    for rank in (0, 1):
        expected = _cpu_ops_per_name(out / "traces" / f"rank{rank}.json.gz")
        assert kernels.filter(pl.col("rank") == rank).height == sum(expected.values())
    assert not (tmp_path / ".nodes.ranks").exists()


@pytest.mark.parametrize("args, names", [
    (("--gpus", "2", "--tp", "3"), "--tp 3"),
    (("--gpus", "2", "--ep", "2"), "--ep 2"),
    (("--gpus", "2", "--backend", "engine"), "--gpus"),
    (("--nnodes", "2"), "--rdzv-endpoint"),
    (("--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"), "--node-rank"),
    (("--nnodes", "2", "--rdzv-endpoint", "nohost"), "--rdzv-endpoint"),
])
def test_bad_parallel_options_are_one_line_before_anything_starts(tmp_path, args, names):
    out = tmp_path / "run"
    result = kernelscope("profile", *args, *SMALL, "--out", str(out))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and names in line and "Traceback" not in line
    assert list(tmp_path.iterdir()) == []


def test_an_error_inside_the_ranks_comes_back_as_one_line(tmp_path):
    out = tmp_path / "run"
    # The tiny preset holds 1,024 positions: every rank refuses this prompt when it plans its inputs.
    result = kernelscope("profile", "--gpus", "2", *SMALL[:2], "--prompt-len", "2000", "--new-tokens", "4",
                         "--out", str(out))
    assert result.returncode == 2
    line = result.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("kernelscope: error: rank ") and "--prompt-len" in line
    assert list(tmp_path.iterdir()) == []


def test_a_moe_model_splits_its_experts_across_the_ranks(tmp_path):
    out = tmp_path / "ep2"
    result = kernelscope("profile", "--model", "tiny-moe", "--gpus", "2", "--ep", "2", *SMALL, "--no-report",
                         "--out", str(out))
    assert result.returncode == 0, result.stderr
    parallel = json.loads((out / "run.json").read_text())["parallel"]
    assert (parallel["tensor_parallel"], parallel["expert_parallel"]) == (2, 2)
    assert all(r["profiled_tokens_match"] for r in parallel["ranks"])
    collectives = [{n: c for n, c in _cpu_ops_per_name(out / "traces" / f"rank{r}.json.gz").items()
                    if n.startswith("c10d::")} for r in (0, 1)]
    # Every collective is one call on each rank: both ranks issue the same ones, the same number of times.
    assert collectives[0] == collectives[1] and sum(collectives[0].values()) > 0


def test_the_report_of_one_rank_covers_its_rows_alone(two_ranks):
    result = kernelscope("report", str(two_ranks), "--rank", "1", "--lang", "en")
    assert result.returncode == 0, result.stderr
    folder = two_ranks / "report-rank1"
    assert result.stdout.strip().splitlines()[-1] == str(folder.resolve())
    mine = pl.read_parquet(two_ranks / "kernels.parquet").filter(pl.col("rank") == 1)
    phases = pl.read_csv(folder / "tables" / "phases.csv")
    for row in phases.iter_rows(named=True):
        rows = mine.filter(pl.col("phase") == row["phase"])
        assert row["kernel_count"] == rows.height and row["device_time_ns"] == rows["dur_ns"].sum()
    text = (folder / "report.md").read_text()
    assert "rank 1 of the run's 2 ranks" in text and "## Ranks" not in text
    rank1 = json.loads((two_ranks / "run.json").read_text())["parallel"]["ranks"][1]
    assert f"{rank1['timings']['tpot_ms']:.3f} ms" in text  # its own latency, not rank 0's
    assert (two_ranks / "report" / "report.md").is_file()  # the run's own report stays


def test_a_rank_the_run_does_not_hold_is_one_line(two_ranks):
    result = kernelscope("report", str(two_ranks), "--rank", "7")
    assert result.returncode == 2 and "--rank 7" in result.stderr and "ranks 0, 1" in result.stderr
    assert not (two_ranks / "report-rank7").exists()
