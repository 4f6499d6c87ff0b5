"""The dataset cache of `kernelscope query` (load/dataset_cache.py) on copies of the committed runs: answers from
the cache are the answers without it and the answers computed here from the runs' files with json and Polars; a
run that changes in any way after the cache was made answers anew; a cache that is torn, altered or of the wrong
shape is not believed and is written again; SQL stays confined with the cache warm; a cached call loads neither
Polars nor the run contracts."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from tests.conftest import DATA

RUNS = DATA / "runs"
SOURCES = ("h100-qwen2-1.5b-b1-slim", "h200-qwen2-0.5b-ncu", "h200-qwen2-1.5b-b8-p512-energy")
TOP = ("select coalesce(friendly_name, name) as kernel, count(distinct run_id) as runs, sum(dur_ns) as total_ns "
       "from kernels group by kernel order by total_ns desc, kernel limit 10")
RUN_ROWS = "select * from runs order by run_id"
COUNTS = ("select (select count(*) from kernels) as kernels, (select count(*) from ops) as ops, "
          "(select count(*) from ncu) as ncu, (select count(*) from runs where tables) as with_tables")


@pytest.fixture
def runs(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "runs"
    for source in SOURCES:
        for i in range(2):
            shutil.copytree(RUNS / source, root / f"{source}-{i}")
    return root


def _rows(capsys, sql: str, *locations: Path) -> list[dict]:
    code = main(["-q", "query", sql, *map(str, locations), "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def _uncached(capsys, monkeypatch, sql: str, *locations: Path) -> list[dict]:
    with monkeypatch.context() as m:
        m.setenv("KERNELSCOPE_NO_CACHE", "1")
        return _rows(capsys, sql, *locations)


def _run_dirs(root: Path) -> list[Path]:
    return sorted(p.parent for p in root.rglob("run.json"))


def _expected_top(root: Path) -> list[dict]:
    frames = []
    for i, run in enumerate(d for d in _run_dirs(root) if (d / "kernels.parquet").is_file()):
        frame = pl.read_parquet(run / "kernels.parquet")
        name = pl.coalesce("friendly_name", "name") if "friendly_name" in frame.columns else pl.col("name")
        frames.append(frame.select(name.alias("kernel"), pl.col("dur_ns"), pl.lit(i).alias("run")))
    totals = (pl.concat(frames).group_by("kernel")
              .agg(pl.col("run").n_unique().alias("runs"), pl.col("dur_ns").sum().alias("total_ns"))
              .sort(["total_ns", "kernel"], descending=[True, False]).head(10))
    return totals.to_dicts()


def _expected_counts(root: Path) -> list[dict]:
    dirs = _run_dirs(root)

    def rows(name: str) -> int:
        return sum(pl.read_parquet(d / name).height for d in dirs if (d / name).is_file())
    return [{"kernels": rows("kernels.parquet"), "ops": rows("ops.parquet"), "ncu": rows("ncu.parquet"),
             "with_tables": sum((d / "kernels.parquet").is_file() for d in dirs)}]


def _check(capsys, monkeypatch, root: Path) -> None:
    """Every answer, asked twice (the second from the cache), is the one computed from the files and the one given
    without the cache."""
    for _ in range(2):
        assert _rows(capsys, TOP, root) == _expected_top(root)
        assert _rows(capsys, COUNTS, root) == _expected_counts(root)
        cached = _rows(capsys, RUN_ROWS, root)
        assert cached == _uncached(capsys, monkeypatch, RUN_ROWS, root)
        for row in cached:
            info = json.loads((Path(row["run_dir"]) / "run.json").read_text())
            assert row["model"] == (info.get("workload") or {}).get("model")
            summary = Path(row["run_dir"]) / "summary.json"
            expected_count = json.loads(summary.read_text())["kernel_count"] if summary.is_file() else None
            assert row["kernel_count"] == expected_count


def _cache_file(tmp_path: Path) -> Path:
    (file,) = (tmp_path / "cache").rglob("*.json")
    return file


def _rewrite(file: Path, change) -> None:
    """The cache file with its JSON changed by `change` and a digest that fits: only the contents can tell."""
    data = json.loads(file.read_bytes().partition(b"\n")[2])
    change(data)
    payload = json.dumps(data).encode()
    file.write_bytes(hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)


def test_answers_with_and_without_the_cache_are_the_files(capsys, monkeypatch, runs):
    _check(capsys, monkeypatch, runs)
    assert _cache_file(runs.parent).stat().st_mode & 0o077 == 0


def test_a_run_that_changes_after_caching_answers_anew(capsys, monkeypatch, runs):
    _check(capsys, monkeypatch, runs)
    first, second, third = (runs / f"{SOURCES[0]}-0", runs / f"{SOURCES[1]}-0", runs / f"{SOURCES[2]}-1")
    # A table rewritten in place with the same size, its times set back: only its change time tells.
    table = first / "kernels.parquet"
    before = table.stat()
    frame = pl.read_parquet(table)
    frame.with_columns(pl.col("dur_ns").reverse()).write_parquet(table)
    os.utime(table, ns=(before.st_atime_ns, before.st_mtime_ns))
    _check(capsys, monkeypatch, runs)
    frame.with_columns(pl.col("dur_ns") * 40).write_parquet(table)  # one run now dominates
    _check(capsys, monkeypatch, runs)
    # run.json edited in place to another model name of the same length, its times set back.
    run_json = second / "run.json"
    times = run_json.stat()
    text = run_json.read_text()
    model = json.loads(text)["workload"]["model"]
    run_json.write_text(text.replace(f'"{model}"', '"' + "m" * len(model) + '"'))
    os.utime(run_json, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert [r["model"] for r in _rows(capsys, RUN_ROWS, runs) if r["run_id"] == second.name] == ["m" * len(model)]
    _check(capsys, monkeypatch, runs)
    # summary.json and a kernels table go; ncu.parquet goes; a run goes; another comes.
    (third / "summary.json").unlink()
    (third / "kernels.parquet").unlink()
    (second / "ncu.parquet").unlink()
    _check(capsys, monkeypatch, runs)
    shutil.rmtree(first)
    shutil.copytree(RUNS / "h200-qwen2-1.5b-slim", runs / "added")
    _check(capsys, monkeypatch, runs)


def test_run_ids_come_from_the_runs_of_the_call_not_the_cache(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    for folder in ("a", "b"):
        shutil.copytree(RUNS / SOURCES[0], tmp_path / folder / "same")
    shutil.copytree(RUNS / SOURCES[1], tmp_path / "b" / "other")
    ids = "select run_id from runs order by run_id"
    assert _rows(capsys, ids, tmp_path / "a", tmp_path / "b") == [{"run_id": "a/same"}, {"run_id": "b/other"},
                                                                  {"run_id": "b/same"}]
    shutil.rmtree(tmp_path / "b" / "same")
    assert _rows(capsys, ids, tmp_path / "a", tmp_path / "b") == [{"run_id": "other"}, {"run_id": "same"}]


@pytest.mark.parametrize("change", [
    lambda d: d["rows"].update({k: [v[0], ["x"] * len(v[1])] for k, v in d["rows"].items()}),  # values of no type
    lambda d: d["rows"].update({k: [v[0], v[1][:-1]] for k, v in d["rows"].items()}),  # a value short
    lambda d: d["rows"].update({k: "row" for k in d["rows"]}),
    lambda d: d["files"].update({k: [v[0], 99] for k, v in d["files"].items()}),  # no such column list
    lambda d: d.update(schemas=[[[1, 2]]] * len(d["schemas"])),  # column lists that are not ones
    lambda d: d.update(stamp="another version of kernelscope"),
    lambda d: d.update(version=1),
    lambda d: d.update(rows=[]),
], ids=["types", "short", "shape", "number", "schemas", "stamp", "version", "rows"])
def test_a_cache_whose_contents_are_wrong_is_not_believed(capsys, monkeypatch, runs, change):
    _check(capsys, monkeypatch, runs)
    _rewrite(_cache_file(runs.parent), change)
    _check(capsys, monkeypatch, runs)


@pytest.mark.parametrize("sql", [
    "copy (select * from kernels) to '{out}'",
    "select * from read_csv('/etc/passwd')",
    "select * from read_text('{run_json}')",
    "select * from read_text('{cache}')",
    "select * from glob('/etc/*')",
    "attach '{out}' as x",
    "set enable_external_access = true",
    "select 1; select 2",
])
def test_sql_stays_confined_with_a_warm_cache(capsys, monkeypatch, runs, sql):
    _check(capsys, monkeypatch, runs)
    text = sql.format(out=runs.parent / "out.csv", run_json=runs / f"{SOURCES[0]}-0" / "run.json",
                      cache=_cache_file(runs.parent))
    code = main(["-q", "query", text, str(runs)])
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and len(out.err.strip().splitlines()) == 1, out
    assert not (runs.parent / "out.csv").exists()


def test_a_cached_query_loads_neither_polars_nor_the_run_contracts(capsys, monkeypatch, runs):
    _check(capsys, monkeypatch, runs)
    probe = ("import sys\nfrom kernelscope.cli import main\n"
             f"assert main(['-q', 'query', 'select count(*) from kernels', {str(runs)!r}]) == 0\n"
             "print(' '.join(m for m in ('polars', 'msgspec', 'kernelscope.contracts.run_info') if m in sys.modules),"
             " file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")})
    assert result.stderr.strip() == ""


def test_a_call_over_some_runs_of_a_folder_keeps_the_others_cached_while_they_are_there(capsys, monkeypatch, runs):
    _check(capsys, monkeypatch, runs)
    cache = _cache_file(runs.parent)

    def cached_runs() -> set[str]:
        return {Path(d).name for d in json.loads(cache.read_bytes().partition(b"\n")[2])["rows"]}
    everyone = {d.name for d in _run_dirs(runs)}
    assert cached_runs() == everyone
    some = sorted(runs.glob(f"{SOURCES[0]}-*"))
    assert _rows(capsys, "select count(*) as n from runs", *some) == [{"n": len(some)}]
    assert cached_runs() == everyone
    gone = runs / f"{SOURCES[1]}-0"
    shutil.rmtree(gone)
    assert _rows(capsys, "select count(*) as n from runs", *some) == [{"n": len(some)}]
    assert cached_runs() == everyone - {gone.name}
    _check(capsys, monkeypatch, runs)
