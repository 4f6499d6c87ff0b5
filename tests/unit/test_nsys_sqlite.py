import os
import re
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import polars as pl
import pytest

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.errors import UserError
from kernelscope.load.kineto import load_kineto
from kernelscope.load.nsys_sqlite import export_nsys_rep, is_nsys_sqlite, load_nsys_sqlite
from kernelscope.load.sources import hardware_from_properties, read_trace
from tests.conftest import KINETO
from tests.nsys_sqlite_writer import VARIANTS, global_tid, short_kernel_name, write_nsys_sqlite

FIXTURE = KINETO / "h200-qwen2-0.5b-p16-n4.trace.json.gz"
ATTRIBUTION = ["phase", "step", "module", "layer", "launch_api", "pid", "tid", "launch_dur_ns"]
GEOMETRY = ["kind", "device", "stream", "dur_ns", "correlation", "grid_x", "grid_y", "grid_z", "block_x",
            "block_y", "block_z", "registers_per_thread", "shared_memory_bytes", "bytes"]


@pytest.fixture(scope="module")
def kineto():
    return load_kineto(FIXTURE)


@pytest.fixture(scope="module")
def kineto_attributed(kineto):
    return attribute(kineto)[0].sort("start_ns", "correlation")


@pytest.fixture(scope="module")
def exports(kineto, tmp_path_factory):
    folder = tmp_path_factory.mktemp("nsys")
    return {variant: write_nsys_sqlite(kineto, folder / f"{variant}.sqlite", variant) for variant in VARIANTS}


def _by_start(kernels: pl.DataFrame) -> pl.DataFrame:
    return kernels.sort("start_ns", "correlation")


# --- 1. the round trip keeps every kernel and its attribution --------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_kernels_match_the_kineto_trace(kineto, exports, variant):
    nsys = load_nsys_sqlite(exports[variant])
    ours, theirs = _by_start(nsys.kernels), _by_start(kineto.kernels)
    assert ours.height == theirs.height == 4148
    assert ours.select(GEOMETRY).equals(theirs.select(GEOMETRY))
    # One constant shift: the two origins differ (Kineto's CPU ops start earlier), the spacing does not.
    assert (ours["start_ns"] - theirs["start_ns"]).n_unique() == 1
    kernel = pl.col("kind") == "kernel"
    expected = theirs.filter(kernel)["name"]
    if variant == "short-name-only":
        expected = expected.map_elements(short_kernel_name, return_dtype=pl.String)
    assert ours.filter(kernel)["name"].to_list() == expected.to_list()
    assert ours["est_occupancy_pct"].null_count() == ours.height  # nsys has no occupancy estimate
    assert ours["start_ns"].min() >= 0 and ours.schema == kineto.kernels.schema


@pytest.mark.parametrize("variant", VARIANTS)
def test_launches_and_ranges_match_the_kineto_trace(kineto, exports, variant):
    nsys = load_nsys_sqlite(exports[variant])
    ours = nsys.launches.sort("start_ns", "correlation")
    theirs = kineto.launches.sort("start_ns", "correlation")
    # API names lose nsys's version suffix (cudaLaunchKernel_v7000 → cudaLaunchKernel); threads decode from
    # globalTid, which the writer fills with a machine id above the pid bits.
    assert ours.select("api", "pid", "tid", "dur_ns", "correlation").equals(
        theirs.select("api", "pid", "tid", "dur_ns", "correlation"))
    with closing(sqlite3.connect(exports[variant])) as db:
        assert db.execute("SELECT min(globalTid) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0] >= 1 << 48
    # The mark, the domain definition and the range that never ended are dropped.
    annotations = kineto.ops.filter(pl.col("cat") == "annotation").sort("start_ns", "name")
    ranges = nsys.ops.sort("start_ns", "name")
    assert set(ranges["cat"]) == {"annotation"}
    assert ranges.select("name", "pid", "tid", "dur_ns").equals(annotations.select("name", "pid", "tid", "dur_ns"))
    assert nsys.ops.schema == kineto.ops.schema and nsys.launches.schema == kineto.launches.schema


@pytest.mark.parametrize("variant", VARIANTS)
def test_attribution_survives_the_round_trip(kineto_attributed, exports, variant):
    ours = attribute(load_nsys_sqlite(exports[variant]))[0].sort("start_ns", "correlation")
    assert ours.select(ATTRIBUTION).equals(kineto_attributed.select(ATTRIBUTION))
    # Not vacuous: the trace has a prefill, four decode steps and per-layer modules.
    assert set(ours["phase"]) == {"prefill", "decode"}
    assert ours.filter(pl.col("phase") == "decode")["step"].n_unique() >= 3
    assert ours["module"].null_count() == 0 and ours["layer"].n_unique() > 20
    # Without CPU ops in an nsys export there is no framework op to name.
    assert ours["op"].null_count() == ours.height


# --- 2. copies, memsets and device properties --------------------------------------------------------------------


def test_memcpy_and_memset_names_and_bytes(kineto, exports):
    copies = pl.col("kind").is_in(["memcpy", "memset"])
    theirs = _by_start(kineto.kernels).filter(copies)
    ours = _by_start(load_nsys_sqlite(exports["current"]).kernels).filter(copies)
    assert ours.select("name", "kind", "bytes").equals(theirs.select("name", "kind", "bytes"))
    assert {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pinned)", "Memset (Device)"} <= set(
        ours["name"])
    # Without ENUM tables the direction is named by nsys's own numbering (that of older exports); without
    # srcKind/dstKind/memKind columns the memory kinds are unknown, so left out.
    legacy = _by_start(load_nsys_sqlite(exports["legacy"]).kernels).filter(copies)
    assert legacy["bytes"].equals(theirs["bytes"])
    assert legacy["name"].to_list() == theirs["name"].str.replace(r" \(.*\)$", "").to_list()
    assert set(legacy["name"]) == {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memset"}


@pytest.mark.parametrize("variant", ["current", "legacy"])
def test_device_properties_feed_the_import_hardware(kineto, exports, variant):
    meta = load_nsys_sqlite(exports[variant]).meta
    props = meta.device_properties[0]
    assert props["name"] == "NVIDIA H200" and props["numSms"] == 132
    hardware = hardware_from_properties(meta.device_properties, "cuda")
    assert hardware.compute_capability == "9.0"
    assert hardware.memory_bytes == kineto.meta.device_properties[0]["totalGlobalMem"]
    assert meta.source_format == "nsys-sqlite"
    assert meta.event_count == 4148 + 4421 + 1281
    assert meta.schema_version == ("3.16.1" if variant == "current" else None)


def test_minimal_export_with_text_names_and_missing_optional_columns(tmp_path):
    path = tmp_path / "minimal.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.executescript(
            """
            CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL,
                deviceId INTEGER, streamId INTEGER, correlationId INTEGER, name TEXT);
            INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (5000, 7000, 0, 7, 1, 'my_kernel');
            """
        )
        db.commit()
    tables = load_nsys_sqlite(path)
    row = tables.kernels.row(0, named=True)
    assert (row["name"], row["start_ns"], row["dur_ns"], row["grid_x"], row["shared_memory_bytes"]) == (
        "my_kernel", 0, 2000, None, None)
    assert tables.launches.height == 0 and tables.ops.height == 0 and tables.meta.device_properties == []
    kernels, _ = attribute(tables)
    assert kernels["phase"].to_list() == ["unknown"]


def test_kernels_of_two_processes_keep_their_own_launches(exports, tmp_path):
    path = tmp_path / "two-processes.sqlite"
    shutil.copy(exports["current"], path)
    with closing(sqlite3.connect(path)) as db:
        start, end, correlation = db.execute(
            "SELECT start, end, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1").fetchone()
        # A second process whose CUPTI correlation ids restart: the same id as the first kernel.
        db.execute("INSERT INTO StringIds VALUES (999001, 'other_process_kernel'), (999002, 'cuLaunchKernel')")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId, correlationId,"
                   " globalPid, demangledName, shortName, registersPerThread, gridX, gridY, gridZ, blockX, blockY,"
                   " blockZ, staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal, gridId)"
                   " VALUES (?, ?, 1, 1, 9, ?, ?, 999001, 999001, 8, 1, 1, 1, 32, 1, 1, 0, 0, 0, 0, 1)",
                   (start + 10, end + 10, correlation, global_tid(4242, 0)))
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, end, eventClass, globalTid, correlationId,"
                   " nameId, returnValue) VALUES (?, ?, 0, ?, ?, 999002, 0)",
                   (start - 5000, start - 4000, global_tid(4242, 4243), correlation))
        db.commit()
    tables = load_nsys_sqlite(path)
    kernels, _ = attribute(tables)
    other = kernels.filter(pl.col("name") == "other_process_kernel").row(0, named=True)
    assert (other["pid"], other["tid"], other["launch_api"]) == (4242, 4243, "cuLaunchKernel")
    first = kernels.sort("start_ns").row(0, named=True)
    assert first["name"] != "other_process_kernel" and first["pid"] == 723
    assert tables.meta.correlation_encoding


# --- 3. bad input fails with one line naming the file --------------------------------------------------------


def _empty_sqlite(path: Path) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA user_version = 1")  # writes the header page: a valid database without tables
        db.commit()
    return path


def _foreign_sqlite(path: Path) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE foo (a INTEGER)")
        db.commit()
    return path


def _without_kernel_table(path: Path) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
                         "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, text TEXT);")
        db.commit()
    return path


def _with_empty_kernel_table(source: Path, path: Path) -> Path:
    shutil.copy(source, path)
    with closing(sqlite3.connect(path)) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
        db.commit()
    return path


def _text_in_an_integer_column(path: Path) -> Path:
    with closing(sqlite3.connect(path)) as db:
        db.executescript("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
                         "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start, end, streamId, name);"
                         "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ('soon', 7000, 7, 'k');")
        db.commit()
    return path


def _corrupt(source: Path, path: Path) -> Path:
    data = bytearray(source.read_bytes())
    data[16:4096] = b"\xa5" * (4096 - 16)  # keep the magic, ruin the rest of the header page
    path.write_bytes(bytes(data))
    return path


def _truncated(source: Path, path: Path) -> Path:
    path.write_bytes(source.read_bytes()[: 3 * 4096])
    return path


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda d, src: d / "missing.sqlite", "no such file"),
        (lambda d, src: (d / "notes.sqlite").write_text("just some text\n") and d / "notes.sqlite",
         "not an SQLite database"),
        (lambda d, src: (d / "zero.sqlite").write_bytes(b"") or d / "zero.sqlite", "file is empty"),
        (lambda d, src: d, "is a directory"),
        (lambda d, src: _empty_sqlite(d / "empty.sqlite"), "not an Nsight Systems export"),
        (lambda d, src: _foreign_sqlite(d / "foreign.sqlite"), "not an Nsight Systems export"),
        (lambda d, src: _without_kernel_table(d / "no-cuda.sqlite"), "no CUDA kernels"),
        (lambda d, src: _with_empty_kernel_table(src, d / "no-kernels.sqlite"), "no CUDA kernels"),
        (lambda d, src: _corrupt(src, d / "corrupt.sqlite"), "corrupt or unreadable SQLite database"),
        (lambda d, src: _truncated(src, d / "truncated.sqlite"), "corrupt or unreadable SQLite database"),
        (lambda d, src: _text_in_an_integer_column(d / "values.sqlite"),
         "unexpected values in CUPTI_ACTIVITY_KIND_KERNEL"),
    ],
    ids=["missing", "text", "zero-bytes", "directory", "empty-sqlite", "foreign-sqlite", "no-kernel-table",
         "empty-kernel-table", "corrupt", "truncated", "bad-values"],
)
def test_bad_input_is_one_clear_line(exports, tmp_path, make, problem):
    path = make(tmp_path, exports["current"])
    with pytest.raises(UserError, match=re.escape(f"{path}: ") + ".*" + re.escape(problem)) as caught:
        load_nsys_sqlite(path)
    assert "\n" not in str(caught.value)


# --- 4. sniffing ------------------------------------------------------------------------------------------------


def test_is_nsys_sqlite(exports, tmp_path):
    assert all(is_nsys_sqlite(path) for path in exports.values())
    assert is_nsys_sqlite(_without_kernel_table(tmp_path / "no-cuda.sqlite"))  # nsys, just without CUDA work
    text = tmp_path / "notes.txt"
    text.write_text("SQLite format 3 is not enough\n")
    for path in (tmp_path / "missing.sqlite", text, tmp_path, FIXTURE, _empty_sqlite(tmp_path / "empty.sqlite"),
                 _foreign_sqlite(tmp_path / "foreign.sqlite"), _corrupt(exports["current"], tmp_path / "bad.sqlite")):
        assert not is_nsys_sqlite(path), path


# --- .nsys-rep through `nsys export` ---------------------------------------------------------------------------


def _fake_nsys(bin_dir: Path, body: str, monkeypatch) -> None:
    """An `nsys` script first on PATH."""
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / "nsys"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")


def test_export_nsys_rep_runs_nsys_export(exports, tmp_path, monkeypatch):
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"not really a report")
    log = tmp_path / "args.txt"
    _fake_nsys(tmp_path / "bin", f"""echo "$@" > {log}
out=""
for arg in "$@"; do case "$arg" in --output=*) out="${{arg#--output=}}";; esac; done
cp {exports['current']} "$out"
""", monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    out = export_nsys_rep(report, work)
    assert out.parent == work and out.suffix == ".sqlite"
    assert log.read_text().startswith("export --type=sqlite --force-overwrite=true --output=")
    assert load_nsys_sqlite(out).kernels.height == 4148


def test_export_nsys_rep_reports_nsys_failure_and_absence(tmp_path, monkeypatch):
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"x")
    _fake_nsys(tmp_path / "bin", "echo 'Processing events...' >&2\necho 'ERROR: cannot open run.nsys-rep' >&2\nexit 1\n",
               monkeypatch)
    with pytest.raises(UserError, match=re.escape(f"{report}: nsys export failed: ERROR: cannot open run.nsys-rep")):
        export_nsys_rep(report, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match=re.escape(f"{report}: an Nsight Systems report (.nsys-rep)") +
                       ".*`nsys` is not on PATH; export it with `nsys export --type sqlite"):
        export_nsys_rep(report, tmp_path)
    with pytest.raises(UserError, match="no such file"):
        export_nsys_rep(tmp_path / "absent.nsys-rep", tmp_path)


def test_qdrep_and_renamed_reports_are_named_as_reports(tmp_path, monkeypatch):
    """A report of nsys before 2021.3 (.qdrep), or a report under another name, is told to be an Nsight Systems
    report with the command that exports it, not read as a JSON trace."""
    from kernelscope.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    for name in ("old.qdrep", "report.bin"):
        report = tmp_path / name
        report.write_bytes(b"NVIDIA Tegra Profiler Report 1\n" + bytes(64))
        with pytest.raises(UserError, match=re.escape(f"{report}: an Nsight Systems report (") +
                           r"\.(qdrep|nsys-rep)\).*`nsys export --type sqlite --output REPORT\.sqlite "):
            read_trace(report)
    assert main(["-q", "import", str(tmp_path / "old.qdrep"), "--out", str(tmp_path / "run")]) == 2
    assert not (tmp_path / "run").exists()
