"""Importing several trace files reads them in parallel processes (or Ray tasks) with the same result as one
process reading them in turn."""

from __future__ import annotations

import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from kernelscope.commands.importers import rank_files
from tests.conftest import DATA

FOREIGN = DATA / "foreign" / "captured"
RANKS = [FOREIGN / "tp2_rank0.json.gz", FOREIGN / "tp2_rank1.json.gz"]


def _import(tmp_path: Path, name: str, files: list[Path], *options: str) -> Path:
    out = tmp_path / name
    assert main(["-q", "import", *map(str, files), "--out", str(out), "--no-report", *options]) == 0
    return out


def _same_run(a: Path, b: Path) -> None:
    for table in ("kernels.parquet", "ops.parquet"):
        left, right = pl.read_parquet(a / table), pl.read_parquet(b / table)
        assert left.equals(right), table
    infos = [json.loads((d / "run.json").read_text()) for d in (a, b)]
    for info in infos:
        info.pop("created")
        info["software"].pop("argv")
    assert infos[0] == infos[1]


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory) -> list[Path]:
    """Four rank files: the two real ranks, twice (a file per rank, as a 4-GPU job writes them)."""
    folder = tmp_path_factory.mktemp("ranks")
    files = []
    for i in range(4):
        files.append(folder / f"rank{i}.json.gz")
        shutil.copyfile(RANKS[i % 2], files[-1])
    return files


@pytest.mark.slow
def test_parallel_import_equals_one_process(tmp_path, four_ranks):
    serial = _import(tmp_path, "serial", four_ranks, "--jobs", "1")
    parallel = _import(tmp_path, "parallel", four_ranks, "--jobs", "2")
    _same_run(serial, parallel)
    kernels = pl.read_parquet(parallel / "kernels.parquet")
    # Each rank's kernels are its file's: rank i holds as many as the file it came from has device events.
    for rank, path in enumerate(four_ranks):
        events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
        device = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
        assert kernels.filter(pl.col("rank") == rank).height == device


def test_the_first_bad_file_is_named(capsys, tmp_path, four_ranks):
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    later = tmp_path / "later.json"  # the helper takes the last file first: its error must not be the one shown
    later.write_text('{"traceEvents": [{"ph": "X", ')
    files = [four_ranks[0], bad, four_ranks[1], later]
    code = main(["-q", "import", *map(str, files), "--out", str(tmp_path / "out"), "--no-report", "--jobs", "2"])
    err = capsys.readouterr().err
    assert code == 2 and str(bad) in err and err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_jobs_are_bounded_by_cores_files_and_memory(monkeypatch, four_ranks):
    sizes = [len(gzip.decompress(f.read_bytes())) for f in four_ranks]
    assert [rank_files.estimated_memory(f) for f in four_ranks] == [rank_files.MEMORY_PER_TEXT_BYTE * s for s in sizes]
    size = max(sizes)  # the largest file's peak bounds the processes
    monkeypatch.setattr(rank_files, "_available_memory", lambda: 10 * rank_files.MEMORY_PER_TEXT_BYTE * size)
    monkeypatch.setattr(rank_files.os, "sched_getaffinity", lambda pid: set(range(64)))
    assert rank_files.default_jobs(four_ranks) == 4  # one per file
    assert rank_files.default_jobs(four_ranks[:2]) == 2
    monkeypatch.setattr(rank_files, "_available_memory", lambda: 3 * rank_files.MEMORY_PER_TEXT_BYTE * size)
    assert rank_files.default_jobs(four_ranks) == 3
    monkeypatch.setattr(rank_files, "_available_memory", lambda: 1)
    assert rank_files.default_jobs(four_ranks) == 1
    monkeypatch.setattr(rank_files.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(rank_files, "_available_memory", lambda: 1 << 50)
    assert rank_files.default_jobs(four_ranks) == 2


def test_one_process_per_file_still_lets_the_reader_split_a_big_file(monkeypatch, four_ranks):
    """Reading files one at a time by default (one file, or memory for one) keeps the reader's own chunk helper
    (workers=None: the reader's choice); only an explicit --jobs 1 means one process in all."""
    calls = []
    monkeypatch.setattr(rank_files, "read_rank",
                        lambda path, workers=None, steps=None: calls.append((path, workers)))
    rank_files.read_ranks(four_ranks[:1])
    rank_files.read_ranks(four_ranks[:2], jobs=1)
    monkeypatch.setattr(rank_files, "default_jobs", lambda files: 1)
    rank_files.read_ranks(four_ranks[:2])
    first, second = str(four_ranks[0]), str(four_ranks[1])
    assert calls == [(first, None), (first, 1), (second, 1), (first, None), (second, None)]


@pytest.mark.parametrize("address, message", [
    ("tcp://nowhere", "expected ray://host:port or local"),
])
def test_a_bad_cluster_address_is_one_line(capsys, tmp_path, address, message):
    code = main(["-q", "import", *map(str, RANKS), "--out", str(tmp_path / "o"), "--cluster", address])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_cluster_without_ray_is_one_line(capsys, tmp_path, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    code = main(["-q", "import", *map(str, RANKS), "--out", str(tmp_path / "o"), "--cluster", "local"])
    err = capsys.readouterr().err
    assert code == 2 and "Ray is not installed" in err and err.count("\n") == 1


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="the ray extra is not installed")
@pytest.mark.slow
def test_ray_tasks_give_the_same_run(tmp_path, four_ranks, monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # a local instance for this test: no token in the home folder
    serial = _import(tmp_path, "serial", four_ranks, "--jobs", "1")
    on_ray = _import(tmp_path, "ray", four_ranks, "--cluster", "local")
    _same_run(serial, on_ray)
