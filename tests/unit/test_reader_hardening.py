"""Readers on real traces with one field made hostile: what is kept, what is left out and counted, what is refused.
Each input is a committed real trace changed in one place; the expected values are computed from the changed input
with plain json / sqlite3 / csv, never from kernelscope's output."""

from __future__ import annotations

import copy
import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from kernelscope.errors import UserError
from kernelscope.load.kineto import load_kineto
from kernelscope.load.names import MAX_NAME
from kernelscope.load.nsys_stats import read_nsys_stats
from tests.adversarial.cases import KINETO_SEED, NCU_SEED, STATS_SEED, kineto_seed
from tests.adversarial.cases_formats import _nsys

KERNEL_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _write(doc: dict, path: Path) -> Path:
    path.write_bytes(gzip.compress(json.dumps(doc).encode("utf-8")))
    return path


def _kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") in KERNEL_CATS and e.get("ph") == "X"]


def test_ids_beyond_int64_become_null_and_the_rest_is_read(tmp_path):
    doc = copy.deepcopy(kineto_seed())
    target = _kernels(doc)[3]
    target["args"]["correlation"] = 2**64
    target["args"]["External id"] = 2**63
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    assert tables.kernels.height == len(_kernels(doc))
    import polars as pl

    row = tables.kernels.filter((pl.col("name") == target["name"]) & pl.col("correlation").is_null())
    assert row.height >= 1 and row["external_id"].is_null().all()


@pytest.mark.parametrize("dur", [-5.0, 1e30])
def test_kernels_with_unusable_durations_are_left_out_and_counted(tmp_path, dur):
    doc = copy.deepcopy(kineto_seed())
    for e in _kernels(doc)[:7]:
        e["dur"] = dur
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    assert tables.kernels.height == len(_kernels(doc)) - 7
    assert tables.meta.dropped_events["unusable time or duration"] == 7
    assert (tables.kernels["dur_ns"] >= 0).all()


def test_a_timestamp_of_1e300_is_left_out(tmp_path):
    doc = copy.deepcopy(kineto_seed())
    _kernels(doc)[0]["ts"] = 1e300
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    assert tables.kernels.height == len(_kernels(doc)) - 1
    span = tables.kernels["start_ns"].max() - tables.kernels["start_ns"].min()
    ts = [e["ts"] for e in _kernels(doc)[1:]]
    assert abs(span - (max(ts) - min(ts)) * 1e3) < 2


def test_invalid_utf8_in_a_name_is_repaired_not_refused(tmp_path):
    text = json.dumps(kineto_seed()).encode("utf-8")
    name = _kernels(kineto_seed())[0]["name"].encode("utf-8")
    broken = text.replace(name, b"bad\xff\xfename", 1)
    path = tmp_path / "t.json"
    path.write_bytes(broken)
    tables = load_kineto(path)
    assert "bad\ufffd\ufffdname" in set(tables.kernels["name"].to_list())
    assert tables.kernels.height == len(_kernels(kineto_seed()))


@pytest.mark.slow
def test_long_names_are_cut_with_a_hash_and_stay_distinct(tmp_path):
    doc = copy.deepcopy(kineto_seed())
    kernels = _kernels(doc)
    kernels[0]["name"] = "k" * 100_000 + "A"
    kernels[1]["name"] = "k" * 100_000 + "B"
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    long = [n for n in tables.kernels["name"].to_list() if n.startswith("k" * 100)]
    assert len(long) == 2 and len(set(long)) == 2 and all(len(n) == MAX_NAME for n in long)
    assert tables.meta.dropped_events["name cut to the length limit"] == 2


def test_a_long_name_repeated_is_cut_and_counted_in_every_row(tmp_path):
    """Names are stored once per chunk and shared by their rows: each row still gets the cut name, and the count
    of cut names is of rows, as the input has them."""
    doc = copy.deepcopy(kineto_seed())
    kernels = _kernels(doc)
    hostile = "<script>alert(1)</script>" + "x" * 10_000
    for kernel in kernels[:3]:
        kernel["name"] = hostile
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    names = tables.kernels["name"].to_list()
    cut = [n for n in names if n.startswith("<script>")]
    assert len(cut) == 3 and len(set(cut)) == 1 and len(cut[0]) == MAX_NAME
    assert tables.meta.dropped_events["name cut to the length limit"] == 3
    assert sorted(n for n in names if not n.startswith("<script>")) == sorted(k["name"] for k in kernels[3:])


def test_non_string_device_names_are_not_believed(tmp_path):
    doc = copy.deepcopy(kineto_seed())
    doc["deviceProperties"][0]["name"] = {"evil": 1}
    doc["deviceProperties"][0]["numSms"] = -3
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    props = tables.meta.device_properties[0]
    assert "name" not in props and "numSms" not in props
    assert props["totalGlobalMem"] == doc["deviceProperties"][0]["totalGlobalMem"]


def test_a_launch_correlation_held_twice_ties_no_kernel(tmp_path):
    from kernelscope.cli import main

    doc = copy.deepcopy(kineto_seed())
    launches = [e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and e.get("name") == "cudaLaunchKernel"]
    shared = launches[0]["args"]["correlation"]
    launches[1]["args"]["correlation"] = shared
    lost = launches[1]["args"].get("correlation")
    tied = [e for e in _kernels(doc) if e["args"].get("correlation") == shared]
    assert tied and lost == shared
    out = tmp_path / "run"
    assert main(["-q", "import", str(_write(doc, tmp_path / "t.json.gz")), "--out", str(out), "--no-report"]) == 0
    import polars as pl

    kernels = pl.read_parquet(out / "kernels.parquet")
    mine = kernels.filter(pl.col("correlation") == shared)
    assert mine.height == len(tied) and mine["launch_api"].is_null().all()


def test_gzip_that_is_not_json_stops_at_the_first_bytes(tmp_path):
    path = tmp_path / "zeros.json.gz"
    path.write_bytes(gzip.compress(b"\x00" * (8 << 20)))
    with pytest.raises(UserError, match="not JSON"):
        load_kineto(path)


def test_gzip_beyond_the_cap_is_refused_naming_the_variable(tmp_path, monkeypatch):
    text = json.dumps(kineto_seed()).encode("utf-8")
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(text))
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_BYTES", str(len(text) - 1))
    with pytest.raises(UserError, match="KERNELSCOPE_MAX_TRACE_BYTES"):
        load_kineto(path)
    monkeypatch.setenv("KERNELSCOPE_MAX_TRACE_BYTES", str(len(text)))
    assert load_kineto(path).kernels.height == len(_kernels(kineto_seed()))


def test_nsys_kernels_ending_before_they_start_are_left_out(tmp_path):
    from kernelscope.load.nsys_sqlite import load_nsys_sqlite

    _nsys(["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1000 WHERE rowid % 3 = 0"])(tmp_path)
    with sqlite3.connect(tmp_path / "trace.sqlite") as db:
        total, bad = db.execute("SELECT COUNT(*), SUM(end < start) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    tables = load_nsys_sqlite(tmp_path / "trace.sqlite")
    kernels = tables.kernels.filter(tables.kernels["kind"] == "kernel")
    assert kernels.height == total - bad and bad > 0
    assert tables.meta.dropped_events["unusable time or duration"] >= bad


def test_nsys_stats_total_beyond_int64_is_one_line(tmp_path):
    lines = STATS_SEED.read_text().splitlines()
    cells = lines[1].split(",")
    cells[1] = "99999999999999999999999"
    path = tmp_path / "decode.csv"
    path.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    with pytest.raises(UserError, match=r"decode\.csv: line 2"):
        read_nsys_stats(path)


@pytest.mark.parametrize("value, message", [("first", "not a launch number"),
                                            ("99999999999999999999999", "not a launch number")])
def test_ncu_launch_ids_must_be_numbers(tmp_path, value, message):
    import csv
    import io

    from kernelscope.load.ncu import read_ncu_csv

    rows = list(csv.reader(io.StringIO(NCU_SEED.read_text())))
    rows[2][0] = value
    buffer = io.StringIO()
    csv.writer(buffer).writerows(rows)
    path = tmp_path / "raw.csv"
    path.write_text(buffer.getvalue())
    with pytest.raises(UserError, match=message):
        read_ncu_csv(path)


def test_ncu_blank_line_after_the_header_is_skipped(tmp_path):
    import csv
    import io

    from kernelscope.load.ncu import read_ncu_csv

    text = NCU_SEED.read_text()
    lines = text.splitlines()
    path = tmp_path / "raw.csv"
    path.write_text("\n".join([lines[0], "", *lines[1:]]) + "\n")
    launches = [row for row in csv.reader(io.StringIO(text))][2:]
    tables = read_ncu_csv(path)
    assert tables.launches.height == len([r for r in launches if r and r[0].isdigit()])


def test_seed_is_a_real_capture():
    assert KINETO_SEED.is_file() and len(_kernels(kineto_seed())) > 1000


@pytest.mark.parametrize("tid", ["²", "9" * 30, "-12", "stream 7"])
@pytest.mark.slow
def test_string_thread_ids_are_numbers_only_when_they_are_ascii_int64(tmp_path, tid):
    doc = copy.deepcopy(kineto_seed())
    launch = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime")
    launch["tid"] = tid
    tables = load_kineto(_write(doc, tmp_path / "t.json.gz"))
    import zlib

    digits = tid.removeprefix("-")
    # A number where it is ASCII digits within int64; otherwise the stable lane code of the string.
    expected = int(tid) if digits.isascii() and digits.isdigit() and len(digits) < 19 else -1 - zlib.crc32(
        tid.encode("utf-8"))
    assert expected in set(tables.launches["tid"].to_list())


@pytest.mark.parametrize("where", ["native", "msgspec"])
def test_running_out_of_memory_while_decoding_is_said_as_such_not_as_a_buffer_error(tmp_path, monkeypatch, capsys,
                                                                                    where):
    """An error raised while a chunk is decoded (here: memory running out on a loaded machine) reaches the user as
    itself: no view of the memory-mapped trace stays alive in its traceback to make closing the map raise
    BufferError in its place."""
    from kernelscope.cli import main
    from kernelscope.load.kineto import events, native_tables

    if where == "native":
        if native_tables._kineto_scan is None:
            pytest.skip("the native reader is not built")

        def fail(self):
            raise MemoryError
        monkeypatch.setattr(native_tables._Chunk, "tables", fail)
    else:
        monkeypatch.setenv("KERNELSCOPE_NATIVE_READER", "0")
        monkeypatch.setattr(native_tables, "_kineto_scan", None)

        def fail(path, text, final):
            raise MemoryError
        monkeypatch.setattr(events, "_decode_chunk", fail)
    trace = tmp_path / "t.json"
    trace.write_bytes(json.dumps(kineto_seed()).encode("utf-8"))  # plain JSON: read from a memory map
    code = main(["-q", "import", str(trace), "--out", str(tmp_path / "run"), "--no-report"])
    err = capsys.readouterr().err
    assert code == 2 and "out of memory" in err and "BufferError" not in err, err
    assert not (tmp_path / "run").exists()
