"""The exported Chrome trace round-trips: `kernelscope import` of it gives a run with the same kernels and the
same attribution as the run it came from."""

import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from kernelscope.commands.export import export_run
from kernelscope.commands.importers.traces import import_traces
from tests.conftest import DATA

SOURCE_RUN = DATA / "runs" / "h200-qwen2-0.5b-ncu"
SAME = ["name", "kind", "dur_ns", "phase", "step", "module", "layer", "op", "top_op"]


def _round_trip(run: Path, tmp_path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    trace = export_run(run, "perfetto", None)
    again = import_traces([trace], tmp_path / "again", tmp_path, report=False)
    before = pl.read_parquet(run / "kernels.parquet").sort("start_ns", "kernel_id")
    after = pl.read_parquet(again / "kernels.parquet").sort("start_ns", "kernel_id")
    assert pl.read_parquet(again / "ops.parquet").height == pl.read_parquet(run / "ops.parquet").height
    return before, after


def _assert_same_kernels(before: pl.DataFrame, after: pl.DataFrame) -> None:
    assert after.height == before.height > 0
    for column in SAME:
        assert after[column].eq_missing(before[column]).all(), column
    # Start times count from the earliest exported event and pass through µs text: equal up to that shift,
    # within a nanosecond.
    shift = (after["start_ns"] - after["start_ns"].min()) - (before["start_ns"] - before["start_ns"].min())
    assert shift.abs().max() <= 1


def test_gpu_run_round_trips_through_import(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SOURCE_RUN, run)
    before, after = _round_trip(run, tmp_path)
    _assert_same_kernels(before, after)
    for column in ("device", "stream", "correlation", "external_id", "launch_api", "grid_x", "block_x",
                   "registers_per_thread", "shared_memory_bytes", "bytes"):
        assert after[column].eq_missing(before[column]).all(), column
    assert (after["launch_dur_ns"] == before["launch_dur_ns"]).all()


@pytest.mark.slow
def test_cpu_run_round_trips_through_import(tmp_path):
    run = tmp_path / "cpu"
    assert main(["-q", "profile", "--model", "tiny", "--new-tokens", "2", "--prompt-len", "8", "--repeats", "1",
                 "--warmup", "0", "--out", str(run), "--no-report"]) == 0
    before, after = _round_trip(run, tmp_path)
    assert set(before["kind"]) == {"cpu_op"}
    _assert_same_kernels(before, after)
    # On CPU-only runs the CPU ops stand in for kernels in the kernel summary too.
    summary = pl.read_csv(export_run(run, "kern-sum", None))
    assert summary["Total Time (ns)"].sum() == before["dur_ns"].sum()
    assert summary["Instances"].sum() == before.height
