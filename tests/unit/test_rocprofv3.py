"""rocprofv3's own outputs imported with the same exact counts as Kineto traces of AMD GPUs: its JSON output (a
public file, tests/data/public/tracelens/rocprof__908_results.json.gz, read with plain json) and its rocpd SQLite
database (written from a real AMD Kineto trace by tests/rocpd_writer.py, read with plain sqlite3)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.costs.naming import with_kernel_catalog
from kernelscope.cli import main
from kernelscope.load.kineto import load_kineto
from kernelscope.load.sources import read_trace, source_kind
from tests.rocpd_writer import write_rocpd

DATA = Path(__file__).resolve().parents[1] / "data"
ROCPROF_JSON = DATA / "public" / "tracelens" / "rocprof__908_results.json.gz"
MI300 = DATA / "public" / "tracelens" / "traces__mi300__gaunernst_bert-small-uncased__1016001.json.gz"


def _by_name(kernels: pl.DataFrame) -> dict[str, tuple[int, int]]:
    return {n: (c, t) for n, c, t in kernels.group_by("name").agg(pl.len(), pl.col("dur_ns").sum()).iter_rows()}


@pytest.mark.slow
def test_json_output_every_dispatch_and_its_gpu():
    with gzip.open(ROCPROF_JSON, "rt") as f:
        process = json.load(f)["rocprofiler-sdk-tool"][0]
    symbols = {s["kernel_id"]: s["demangled_kernel_name"].removesuffix(".kd") for s in process["kernel_symbols"]}
    expected: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])
    for d in process["buffer_records"]["kernel_dispatch"]:
        entry = expected[symbols[d["dispatch_info"]["kernel_id"]]]
        entry[0] += 1
        entry[1] += d["end_timestamp"] - d["start_timestamp"]
    gpu = next(a["product_name"] for a in process["agents"] if a["type"] == 2)
    assert source_kind(ROCPROF_JSON) == "rocprofv3-json"
    tables = read_trace(ROCPROF_JSON)
    assert _by_name(tables.kernels) == {name: tuple(v) for name, v in expected.items()}
    assert tables.meta.device_properties[0]["name"] == gpu
    # grids in blocks: the first dispatch's work-items over its workgroup
    first = min(process["buffer_records"]["kernel_dispatch"], key=lambda d: d["start_timestamp"])
    info = first["dispatch_info"]
    row = tables.kernels.sort("start_ns").row(0, named=True)
    assert row["grid_x"] == -(-info["grid_size"]["x"] // info["workgroup_size"]["x"])


@pytest.mark.slow
def test_json_output_is_a_training_run_named_by_the_catalog(tmp_path):
    """No CPU op in the file: forward, backward and optimizer from the kernels' names; and the catalog names at
    least 99% of its kernel time (ROCm's own blit kernels included)."""
    out = tmp_path / "run"
    assert main(["-q", "import", str(ROCPROF_JSON), "--out", str(out), "--no-report"]) == 0
    kernels = pl.read_parquet(out / "kernels.parquet")
    assert {"forward", "backward", "optimizer"} <= set(kernels["phase"])
    named = with_kernel_catalog(kernels.drop("library", "category", "friendly_name", "description"))
    known = named.filter((pl.col("library") != "unknown") & (pl.col("category") != "other"))["dur_ns"].sum()
    assert known / named["dur_ns"].sum() >= 0.99
    assert json.loads((out / "run.json").read_text())["hardware"]["name"] == "AMD Instinct MI350X"


@pytest.fixture(scope="module")
def rocpd(tmp_path_factory) -> Path:
    return write_rocpd(load_kineto(MI300), tmp_path_factory.mktemp("rocpd") / "results.db", "AMD Instinct MI300X")


def _sql(path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute(query).fetchall()


def test_rocpd_database_every_dispatch_and_its_launch(rocpd):
    expected = {name: (n, total) for name, n, total in _sql(rocpd, """
        SELECT s.display_name, count(*), sum(d."end" - d."start") FROM rocpd_kernel_dispatch d
        JOIN rocpd_info_kernel_symbol s ON s.id = d.kernel_id GROUP BY 1""")}
    launched = dict(_sql(rocpd, """
        SELECT d.id, (SELECT s.string FROM rocpd_region r JOIN rocpd_event re ON re.id = r.event_id
                      JOIN rocpd_string s ON s.id = r.name_id WHERE re.stack_id = e.stack_id)
        FROM rocpd_kernel_dispatch d JOIN rocpd_event e ON e.id = d.event_id ORDER BY d."start", d.id"""))
    assert source_kind(rocpd) == "rocpd"
    from kernelscope.analyze.attribution.attribution import attribute

    tables = read_trace(rocpd)
    assert _by_name(tables.kernels) == expected
    kernels, _ = attribute(tables)
    apis = kernels.sort("start_ns", "kernel_id")["launch_api"].to_list()
    assert apis == list(launched.values()) and Counter(apis).most_common(1)[0][0].startswith("hip")
    assert tables.meta.device_properties[0]["name"] == "AMD Instinct MI300X"


def test_rocpd_imports_like_the_kineto_trace_it_came_from(rocpd, tmp_path):
    """The database and the AMD Kineto trace it was written from give the same kernels (names, counts, times)."""
    kineto = load_kineto(MI300).kernels.filter(pl.col("kind") == "kernel")
    assert _by_name(read_trace(rocpd).kernels) == _by_name(kineto)
    out = tmp_path / "run"
    assert main(["-q", "import", str(rocpd), "--out", str(out), "--no-report"]) == 0
    assert json.loads((out / "summary.json").read_text())["kernel_count"] == kineto.height


def test_perfetto_protobuf_is_named_and_refused(tmp_path, capsys):
    trace = tmp_path / "results.pftrace"
    trace.write_bytes(b"\x0a\x02\x08\x01")
    assert main(["-q", "import", str(trace), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a Perfetto protobuf trace" in err[0] and "--output-format rocpd" in err[0]
    assert not (tmp_path / "run").exists()
