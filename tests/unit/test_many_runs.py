"""`kernelscope query` over many copies of the committed runs: answers across runs, the dataset cache (a run that
changes, comes or goes is read again; nothing is written inside a run), and run folders named like glob patterns.
Expected values are computed from the runs' Parquet files with plain Polars."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from tests.conftest import DATA

RUNS = DATA / "runs"
SOURCES = ("h100-qwen2-1.5b-b1-slim", "h200-qwen2-0.5b-ncu", "h200-qwen2-1.5b-slim")
TOP = ("select coalesce(friendly_name, name) as kernel, count(distinct run_id) as runs, sum(dur_ns) as total_ns "
       "from kernels group by kernel order by total_ns desc, kernel limit 10")


def _copies(root: Path, per_source: int = 3) -> list[Path]:
    out = []
    for source in SOURCES:
        for i in range(per_source):
            target = root / f"{source}-copy{i}"
            shutil.copytree(RUNS / source, target)
            out.append(target)
    return out


def _expected_top(run_dirs: list[Path]) -> list[dict]:
    """The ten kernels of most total time over the runs, from each run's kernels.parquet."""
    frames = []
    for i, run in enumerate(run_dirs):
        frame = pl.read_parquet(run / "kernels.parquet")
        name = (pl.coalesce("friendly_name", "name") if "friendly_name" in frame.columns else pl.col("name"))
        frames.append(frame.select(name.alias("kernel"), pl.col("dur_ns"), pl.lit(i).alias("run")))
    totals = (pl.concat(frames).group_by("kernel")
              .agg(pl.col("run").n_unique().alias("runs"), pl.col("dur_ns").sum().alias("total_ns"))
              .sort(["total_ns", "kernel"], descending=[True, False]).head(10))
    return totals.to_dicts()


def _top(capsys, *locations: Path) -> list[dict]:
    code = main(["-q", "query", TOP, *map(str, locations), "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_top_kernels_across_copies_of_real_runs_first_and_later_calls(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    runs = _copies(tmp_path / "runs")
    before = _listing(tmp_path / "runs")
    expected = _expected_top(runs)
    assert len({row["kernel"] for row in expected}) == 10 and max(row["runs"] for row in expected) > 3
    assert _top(capsys, tmp_path / "runs") == expected
    assert list((tmp_path / "cache").rglob("*.json")), "the first call keeps what it learned"
    assert _top(capsys, tmp_path / "runs") == expected  # from the cache
    assert _listing(tmp_path / "runs") == before  # nothing written, touched or left inside the runs


def test_a_run_that_changes_comes_or_goes_is_read_again(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    runs = _copies(tmp_path / "runs", per_source=2)
    assert _top(capsys, tmp_path / "runs") == _expected_top(runs)
    # One run's kernels change (longer, and without friendly names: another set of columns).
    changed = runs[0] / "kernels.parquet"
    frame = pl.read_parquet(changed)
    frame.drop("friendly_name").with_columns(pl.col("dur_ns") * 50).write_parquet(changed)
    assert _top(capsys, tmp_path / "runs") == _expected_top(runs)
    # Same columns, other values, its modification time set back: its change time still tells it apart.
    frame = pl.read_parquet(changed)
    frame.with_columns(pl.col("dur_ns").reverse()).write_parquet(changed)
    os.utime(changed, ns=(1, 1))
    assert _top(capsys, tmp_path / "runs") == _expected_top(runs)
    # A run goes, another comes.
    shutil.rmtree(runs[-1])
    shutil.copytree(RUNS / "h100-qwen2-0.5b-ncu", tmp_path / "runs" / "new")
    now = [*runs[:-1], tmp_path / "runs" / "new"]
    assert _top(capsys, tmp_path / "runs") == _expected_top(now)


def test_a_broken_cache_is_not_used(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    runs = _copies(tmp_path / "runs", per_source=1)
    expected = _expected_top(runs)
    assert _top(capsys, tmp_path / "runs") == expected
    cached = list((tmp_path / "cache").rglob("*.json"))
    assert cached
    for spoil in (lambda b: b[: len(b) // 2], lambda b: b"\xff{not json", lambda b: b"", lambda b: b.replace(b"4", b"5")):
        for file in cached:
            file.write_bytes(spoil(file.read_bytes()))
        assert _top(capsys, tmp_path / "runs") == expected
        for file in cached:  # written anew, whole
            digest, _, payload = file.read_bytes().partition(b"\n")
            assert hashlib.sha256(payload).hexdigest().encode() == digest and json.loads(payload)["rows"]


@pytest.mark.parametrize("names", [("a[1]", "a1"), ("b*", "bx"), ("c?", "cc")])
def test_run_folders_named_like_glob_patterns_read_their_own_tables(capsys, tmp_path, names):
    """DuckDB globs every file name it reads; a run named `a[1]` must not read `a1`'s tables (nor `b*` all b's)."""
    expected = {}
    for i, name in enumerate(names):
        target = tmp_path / "runs" / name
        shutil.copytree(RUNS / SOURCES[i], target)
        expected[name] = pl.read_parquet(target / "kernels.parquet", glob=False)["dur_ns"].sum()
    code = main(["-q", "query", "select run_id, sum(dur_ns) as total from kernels group by run_id",
                 str(tmp_path / "runs"), "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert {row["run_id"]: row["total"] for row in json.loads(out.out)} == expected


def test_other_columns_of_some_runs_nested_ones_included_are_in_the_view(capsys, tmp_path):
    """A column some runs' tables hold beyond the run format (here a struct with a list inside, and a plain one
    spelled in capitals) is a column of the view: null for the runs without it."""
    plain, extended = tmp_path / "runs" / "plain", tmp_path / "runs" / "extended"
    shutil.copytree(RUNS / SOURCES[0], plain)
    shutil.copytree(RUNS / SOURCES[0], extended)
    frame = pl.read_parquet(extended / "kernels.parquet")
    frame = frame.with_columns(pl.struct(pl.col("dur_ns").alias("d"), pl.concat_list("dur_ns", "dur_ns").alias("l"))
                               .alias("extra"), (pl.col("dur_ns") * 2).alias("Twice"))
    frame.write_parquet(extended / "kernels.parquet")
    code = main(["-q", "query", "select run_id, sum(extra.d) as d, sum(list_sum(extra.l)) as l, sum(twice) as t, "
                 "count(*) as n from kernels group by run_id order by run_id", str(tmp_path / "runs"),
                 "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    total = int(frame["dur_ns"].sum())
    assert json.loads(out.out) == [
        {"run_id": "extended", "d": total, "l": 2 * total, "t": 2 * total, "n": frame.height},
        {"run_id": "plain", "d": None, "l": None, "t": None, "n": frame.height}]
