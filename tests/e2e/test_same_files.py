"""The same input gives the same files every time (docs/guarantees.md): a real two-rank trace imported twice, in
processes that differ in Python's string hashing and in Polars' thread count (group-bys come out in an order that
depends on both), then `report` on the first run once more; every file of the reports, tables and figures alike,
is compared byte for byte."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.test_cli import CALIBRATION_DIR

DATA = Path(__file__).resolve().parents[1] / "data" / "multi_gpu"
RANKS = [str(DATA / f"deepseek_v3_ep2_rank{rank}.json.gz") for rank in (0, 1)]


def _kernelscope(*args: str, hash_seed: str, threads: str) -> None:
    env = dict(os.environ, KERNELSCOPE_CALIBRATION_DIR=str(CALIBRATION_DIR), PYTHONHASHSEED=hash_seed,
               POLARS_MAX_THREADS=threads)
    result = subprocess.run([sys.executable, "-m", "kernelscope", "-q", *args], capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr


def _files(report: Path) -> dict[str, bytes]:
    return {str(path.relative_to(report)): path.read_bytes() for path in sorted(report.rglob("*")) if path.is_file()}


@pytest.mark.slow
def test_a_run_gives_the_same_files_whatever_the_hashing_and_threads(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    _kernelscope("import", *RANKS, "--out", str(first), hash_seed="1", threads="1")
    _kernelscope("import", *RANKS, "--out", str(second), hash_seed="2", threads="3")
    made = _files(first / "report")
    assert any(name.endswith(".csv") for name in made) and any(name.endswith(".png") for name in made)
    again = _files(second / "report")
    assert sorted(again) == sorted(made)
    assert [name for name in made if made[name] != again[name]] == []
    for name in ("summary.json", "kernels.parquet", "ops.parquet"):
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    _kernelscope("report", str(first), hash_seed="3", threads="2")
    rendered = _files(first / "report")
    assert [name for name in made if made[name] != rendered.get(name)] == []
