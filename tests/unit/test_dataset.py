"""`kernelscope query` and the Python API over many runs: the committed runs, and runs of every source built here
(Kineto, two ranks, Nsight Systems SQLite, nsys stats summaries, Nsight Compute exports). Expected values are
computed from the files with json and polars, not taken from kernelscope."""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest

from kernelscope.cli import main
from tests.conftest import DATA

RUNS = DATA / "runs"
RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
DOC = Path(__file__).resolve().parents[2] / "docs" / "dataset.md"
FOREIGN = DATA / "foreign" / "captured"


def _query(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["-q", "query", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _json_rows(capsys, sql: str, *locations: Path | str) -> list[dict]:
    code, out, err = _query(capsys, sql, *map(str, locations), "--format", "json")
    assert code == 0, err
    return json.loads(out)


def _run_dirs(*folders: Path) -> list[Path]:
    return sorted(p.parent for folder in folders for p in folder.rglob("run.json"))


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> Path:
    """A folder with one run of every import source (reports left out: tables are what the views read)."""
    from kernelscope.load.kineto import load_kineto
    from tests.nsys_sqlite_writer import write_nsys_sqlite

    root = tmp_path_factory.mktemp("sources")
    sqlite = write_nsys_sqlite(load_kineto(FOREIGN / "hf_generate_plain.json.gz"), root / "plain.sqlite")
    imports = {
        "kineto": [FOREIGN / "hf_generate_plain.json.gz"],
        "ranks": [FOREIGN / "tp2_rank0.json.gz", FOREIGN / "tp2_rank1.json.gz"],
        "nsys-sqlite": [sqlite],
        "nsys-stats": [DATA / "nsys" / "prefill.csv", DATA / "nsys" / "decode.csv"],
        "ncu": [DATA / "ncu" / "h200-qwen2-0.5b-decode.raw.csv"],
    }
    for name, files in imports.items():
        assert main(["-q", "import", *map(str, files), "--out", str(root / "runs" / name), "--no-report"]) == 0
    return root / "runs"


def test_runs_view_holds_every_committed_run_with_its_metadata(capsys):
    import os
    from collections import Counter

    rows = _json_rows(capsys, "select * from runs order by run_id", RUNS, RESULTS)
    dirs = _run_dirs(RUNS, RESULTS)
    # docs/dataset.md: a run's id is its directory's name or, when two runs share a name (the 4-GPU DeepSeek-V3 runs
    # of two days do), every run's path below the runs' common folder.
    shared = {name for name, n in Counter(d.name for d in dirs).items() if n > 1}
    common = Path(os.path.commonpath([str(d) for d in dirs]))
    ids = {(str(d.relative_to(common)) if shared else d.name): d for d in dirs}
    assert shared and [r["run_id"] for r in rows] == sorted(ids)
    for row in rows:
        info = json.loads(ids[row["run_id"]].joinpath("run.json").read_text())
        # An imported run has no workload or timings of its own: those columns are null.
        workload, timings = info.get("workload") or {}, (info.get("timings") or {}).get("plain") or {}
        assert row["model"] == workload.get("model")
        assert row["device"] == info["hardware"]["name"]
        assert row["batch"] == workload.get("batch_size")
        assert row["tpot_ms"] == (pytest.approx(timings["tpot_ms"]) if "tpot_ms" in timings else None)
        assert row["date"].replace("T", " ")[:19] == info["created"].replace("T", " ")[:19]
        assert row["tables"] == (Path(row["run_dir"]) / "kernels.parquet").is_file()


def test_kernels_and_steps_views_add_up_to_the_parquet_files(capsys):
    totals = _json_rows(capsys, "select run_id, device, count(*) as n, sum(dur_ns) as t from kernels group by all",
                        RUNS)
    for row in totals:
        table = pl.read_parquet(RUNS / row["run_id"] / "kernels.parquet")
        info = json.loads((RUNS / row["run_id"] / "run.json").read_text())
        assert (row["n"], row["t"], row["device"]) == (table.height, table["dur_ns"].sum(), info["hardware"]["name"])
    steps = _json_rows(capsys, "select run_id, step, device_time_ns, kernel_count from steps where phase = 'decode' "
                               "order by run_id, step", RUNS)
    for run_id in {r["run_id"] for r in steps}:
        table = pl.read_parquet(RUNS / run_id / "kernels.parquet").filter(pl.col("phase") == "decode")
        expected = table.group_by("step").agg(pl.col("dur_ns").sum(), pl.len()).sort("step")
        got = [(r["step"], r["device_time_ns"], r["kernel_count"]) for r in steps if r["run_id"] == run_id]
        assert got == list(zip(expected["step"], expected["dur_ns"], expected["len"], strict=True))


def test_ncu_and_ops_views(capsys):
    ncu = {r["run_id"]: r["n"] for r in _json_rows(capsys, "select run_id, count(*) as n from ncu group by 1", RUNS)}
    expected = {d.name: pl.read_parquet(d / "ncu.parquet").height for d in _run_dirs(RUNS)
                if (d / "ncu.parquet").is_file()}
    assert ncu == expected and ncu
    ops = {r["run_id"]: r["n"] for r in _json_rows(capsys, "select run_id, count(*) as n from ops group by 1", RUNS)}
    assert ops == {d.name: pl.read_parquet(d / "ops.parquet").height for d in _run_dirs(RUNS)
                   if pl.read_parquet(d / "ops.parquet").height}


@pytest.mark.slow
def test_runs_of_every_source_in_one_query(capsys, sources):
    rows = _json_rows(capsys, "select k.run_id, r.source, r.ranks, count(*) as n, count(distinct k.rank) as ranks_seen,"
                              " sum(k.instances) as launches from kernels k join runs r using (run_id) group by all",
                      sources, RUNS)
    by_id = {r["run_id"]: r for r in rows}
    assert set(by_id) == {d.name for d in _run_dirs(sources, RUNS)}
    for directory in _run_dirs(sources, RUNS):
        table = pl.read_parquet(directory / "kernels.parquet")
        row = by_id[directory.name]
        launches = table["instances"].sum() if "instances" in table.columns else table.height
        assert (row["n"], row["launches"]) == (table.height, launches)
        info = json.loads((directory / "run.json").read_text())
        assert row["source"] == info["source"]
        assert row["ranks"] == max(len(info.get("trace", {}).get("files", [])), 1)
    assert by_id["ranks"]["ranks_seen"] == 2 and by_id["ranks"]["ranks"] == 2
    stats = pl.read_parquet(sources / "nsys-stats" / "kernels.parquet")
    assert by_id["nsys-stats"]["launches"] == stats["instances"].sum() > stats.height
    steps = _json_rows(capsys, "select run_id, rank, sum(device_time_ns) as t from steps group by all", sources)
    for row in steps:
        table = pl.read_parquet(sources / row["run_id"] / "kernels.parquet").filter(pl.col("rank") == row["rank"])
        assert row["t"] == table["dur_ns"].sum()


def test_a_glob_and_output_formats(capsys, tmp_path):
    sql = "select run_id, kernel_count from runs order by run_id"
    code, out, err = _query(capsys, sql, str(RUNS / "h1*"), "--format", "csv")
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    names = sorted(p.name for p in RUNS.glob("h1*"))
    assert rows[0] == ["run_id", "kernel_count"] and [r[0] for r in rows[1:]] == names
    assert [int(r[1]) for r in rows[1:]] == [json.loads((RUNS / n / "summary.json").read_text())["kernel_count"]
                                              for n in names]
    code, out, err = _query(capsys, sql, str(RUNS))
    assert code == 0 and out.splitlines()[0].split() == ["run_id", "kernel_count"] and f"({len(_run_dirs(RUNS))} rows)" in out
    target = tmp_path / "result.parquet"
    code, out, err = _query(capsys, "select run_id, name, dur_ns from kernels", str(RUNS), "--format", "parquet",
                            "--out", str(target))
    assert code == 0, err
    written = pl.read_parquet(target)
    assert written.height == sum(pl.read_parquet(d / "kernels.parquet").height for d in _run_dirs(RUNS))


def test_table_output_escapes_control_characters(capsys, tmp_path):
    run = tmp_path / "runs" / "hostile"
    shutil.copytree(RUNS / "h200-qwen2-0.5b-ncu", run)
    kernels = pl.read_parquet(run / "kernels.parquet")
    kernels.with_columns(pl.lit("evil\x1b[31mred\nnext").alias("name")).write_parquet(run / "kernels.parquet")
    code, out, _ = _query(capsys, "select distinct name from kernels", str(run))
    assert code == 0 and "\x1b" not in out and "evil\\x1b[31mred\\nnext" in out


@pytest.mark.parametrize("args, message", [
    (["selec nothing", str(RUNS)], "query: Parser Error"),
    (["select * from nowhere", str(RUNS)], "nowhere"),
    (["select 1", "/no/such/runs"], "/no/such/runs: no such run directory"),
    (["select 1", str(DATA / "nsys")], "no kernelscope run directories"),
    (["select 1", str(RUNS / "zz*")], "matches no files"),
    (["select 1", str(RUNS), "--format", "parquet"], "--out"),
])
def test_bad_queries_and_locations_are_one_line(capsys, args, message):
    code, out, err = _query(capsys, *args)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_broken_run_is_named(capsys, tmp_path):
    run = tmp_path / "broken"
    shutil.copytree(RUNS / "h200-qwen2-0.5b-ncu", run)
    (run / "run.json").write_text("{not json")
    code, _, err = _query(capsys, "select 1", str(tmp_path))
    assert code == 2 and str(run / "run.json") in err


def _doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_documented_queries_run_on_the_committed_runs(capsys):
    queries = _doc_blocks("sql")
    assert len(queries) >= 3
    for sql in queries:
        code, out, err = _query(capsys, sql, str(RUNS), str(RESULTS))
        assert code == 0, (sql, err)
        assert "(0 rows)" not in out, sql


def test_open_run_gives_typed_metadata_and_polars_frames():
    import kernelscope
    from kernelscope.contracts.run_info import RunInfo

    directory = RUNS / "h200-qwen2-1.5b-slim"
    run = kernelscope.open_run(directory)
    assert isinstance(run.info, RunInfo) and run.info.hardware.name == "NVIDIA H200"
    table = pl.read_parquet(directory / "kernels.parquet")
    assert run.kernels["dur_ns"].sum() == table["dur_ns"].sum() and run.kernels.height == table.height
    assert "rank" in run.kernels.columns and run.ncu is not None
    assert run.summary.kernel_count == json.loads((directory / "summary.json").read_text())["kernel_count"]


def test_open_runs_is_a_duckdb_relation():
    import kernelscope

    relation = kernelscope.open_runs(RUNS, view="steps")
    decode = dict(relation.filter("phase = 'decode'").aggregate("run_id, count(*)").fetchall())
    for run_id, steps in decode.items():
        table = pl.read_parquet(RUNS / run_id / "kernels.parquet").filter(pl.col("phase") == "decode")
        assert steps == table["step"].n_unique()
    assert kernelscope.open_runs([RUNS]).count("*").fetchall()[0][0] == len(_run_dirs(RUNS))


def test_the_documented_api_example_runs(monkeypatch):
    blocks = _doc_blocks("python")
    assert blocks
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), {})
