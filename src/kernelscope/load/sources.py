"""What kind of recording a file is, and reading a trace of any kind: the one place that routes input files.

Kinds: Kineto / Chrome trace JSON (`kineto`), Nsight Systems SQLite exports (`nsys-sqlite`) and `.nsys-rep`
reports (`nsys-rep`), `nsys stats` kernel summaries (`nsys-stats`), Nsight Compute exports (`ncu`: a CSV, an
`.ncu-rep`, or a directory of per-kernel exports). Also the run.json sections that describe what was read.
"""

from __future__ import annotations

import gzip
import sqlite3
import tempfile
from collections.abc import Callable
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

import kernelscope
from kernelscope.contracts import run_files
from kernelscope.contracts.run_info import IMPORT, SCHEMA_VERSION, Hardware, RunInfo, Software
from kernelscope.contracts.trace import TraceMeta, TraceTables
from kernelscope.contracts.trace_records import TraceAudit, TraceFile, TraceInfo
from kernelscope.errors import UserError
from kernelscope.load import knowledge
from kernelscope.load.input_checks import check_input_file
from kernelscope.load.kineto import load_kineto
from kernelscope.load.ncu import is_ncu_input
from kernelscope.load.nsys_sqlite import (
    SQLITE_MAGIC,
    export_nsys_rep,
    is_nsys_report,
    is_nsys_sqlite,
    load_nsys_sqlite,
)
from kernelscope.load.nsys_stats import is_nsys_stats
from kernelscope.load.rocprofv3 import is_rocpd, is_rocprofv3_json, load_rocpd, load_rocprofv3_json
from kernelscope.load.sqlite_input import connect_read_only

KINETO = "kineto"
NSYS_SQLITE = "nsys-sqlite"
NSYS_REP = "nsys-rep"
NSYS_STATS = "nsys-stats"
NCU = "ncu"
# Recordings of other tools, told apart by their names (their bytes would only say "not JSON").
FOREIGN_SUFFIXES = {
    ".qdstrm": "an unfinished Nsight Systems capture (.qdstrm): nsys turns it into a report (.nsys-rep) when the "
               "capture ends; import that report, or its export `nsys export --type sqlite`",
    ".perfetto-trace": "a Perfetto protobuf trace: kernelscope reads the JSON traces torch.profiler writes "
                       "(Kineto), Nsight Systems and Nsight Compute exports, and rocprofv3's JSON or database",
}
ROCPROF_JSON = "rocprofv3-json"
ROCPD = "rocpd"
# Kinds that are traces with a timeline (one run; several files are its ranks).
TRACE_KINDS = (KINETO, NSYS_SQLITE, NSYS_REP, ROCPROF_JSON, ROCPD)


def source_kind(path: Path) -> str:
    """The kind of recording `path` holds, by its content (and the .nsys-rep / .ncu-rep suffixes). Text tables
    that are no Nsight Compute export go to the nsys stats reader, which names what such a file lacks; anything
    else is read as a Kineto trace, whose reader says what is wrong with it."""
    if not path.is_dir():  # a directory may be an Nsight Compute export; anything else must be a readable file
        check_input_file(path, "a trace or a profiler export")
    _refuse_run_files(path)
    if is_ncu_input(path):
        return NCU
    foreign = FOREIGN_SUFFIXES.get(path.suffix.lower())
    if foreign is not None:
        raise UserError(f"{path}: {foreign}")
    if path.suffix.lower() == ".pftrace":
        raise UserError(f"{path}: a Perfetto protobuf trace (rocprofv3 --output-format pftrace), which kernelscope does "
                        "not read; record with `--output-format rocpd` or `json` and import that file")
    if is_nsys_report(path):  # .nsys-rep, or .qdrep as Nsight Systems named its reports before 2021.3
        return NSYS_REP
    if _has_sqlite_magic(path) and _is_rocpd_file(path):
        return ROCPD  # rocprofv3's database
    if is_nsys_sqlite(path) or _has_sqlite_magic(path):
        return NSYS_SQLITE  # any SQLite file: the nsys loader says what a foreign one lacks
    if is_rocprofv3_json(_head(path)):
        return ROCPROF_JSON
    if is_nsys_stats(path) or path.suffix.lower() in (".csv", ".tsv", ".txt"):
        return NSYS_STATS
    return KINETO


def read_trace(path: Path, workers: int | None = None, progress: Callable[[int, int], None] | None = None
               ) -> TraceTables:
    """A trace of any kind in TRACE_KINDS as tables. workers: processes a large Kineto trace may use (default: the
    reader's choice; 1 where files are already read in parallel). progress(done, total): chunks of a Kineto
    trace decoded so far, for a display."""
    kind = source_kind(path)
    if kind == NSYS_REP:
        with tempfile.TemporaryDirectory(prefix="kernelscope-nsys-") as workdir:
            tables = load_nsys_sqlite(export_nsys_rep(path, Path(workdir)))
    elif kind == NSYS_SQLITE:
        tables = load_nsys_sqlite(path)
    elif kind == KINETO:
        tables = load_kineto(path, workers=workers, progress=progress)
    elif kind == ROCPROF_JSON:
        tables = load_rocprofv3_json(path)
    elif kind == ROCPD:
        tables = load_rocpd(path)
    else:
        raise UserError(f"{path}: not a trace (a {kind} file): import it on its own")
    tables.meta.unrecorded_device_calls = unrecorded_device_calls(tables)
    return tables


def _refuse_run_files(path: Path) -> None:
    """A run directory, or one of its files, given where a recording is expected: said as such."""
    run = path if path.is_dir() else path.parent
    names = (run_files.RUN_JSON, run_files.SUMMARY_JSON, run_files.KERNELS, run_files.OPS, run_files.NCU)
    if (run / run_files.RUN_JSON).is_file() and (path.is_dir() or path.name in names):
        raise UserError(f"{path}: part of a kernelscope run directory, not a recording: `kernelscope report`, "
                        f"`whatif`, `export` and `query` read the run ({run}) as it is")
    if path.is_file():
        with path.open("rb") as f:
            magic = f.read(4)
        if magic == b"PAR1":
            raise UserError(f"{path}: a Parquet file, not a recording (kernelscope imports traces and profiler "
                            f"exports; a run's tables are read through its directory)")


def _head(path: Path, size: int = 512) -> bytes:
    """The first bytes of a file, decompressed where it is gzip (b"" where it cannot be read)."""
    try:
        with path.open("rb") as f:
            start = f.read(2)
        opener = gzip.open if start == b"\x1f\x8b" else open
        with opener(path, "rb") as f:
            return f.read(size)
    except (OSError, EOFError):
        return b""


def _is_rocpd_file(path: Path) -> bool:
    try:
        with closing(connect_read_only(path)) as conn:
            names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.Error:
        return False
    return is_rocpd(names)


def _has_sqlite_magic(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def hardware_from_properties(properties: list[dict[str, Any]], device_type: str) -> Hardware:
    """What a trace's deviceProperties say of its (first) device."""
    props = properties[0] if properties and isinstance(properties[0], dict) else {}
    if not props:
        return Hardware(device_type=device_type, name=None)
    major, minor = props.get("computeMajor"), props.get("computeMinor")
    return Hardware(
        device_type=device_type,
        name=props.get("name"),
        memory_bytes=props.get("totalGlobalMem"),
        sm_count=props.get("numSms"),
        compute_capability=f"{major}.{minor}" if major is not None else None,
        l2_cache_bytes=props.get("l2CacheSize"),
    )


def trace_file(meta: TraceMeta, file: str, json_bytes: int | None = None) -> TraceFile:
    """run.json's record of one trace file read, from the loader's metadata."""
    return TraceFile(
        file=file, format=meta.source_format, event_count=meta.event_count, json_bytes=json_bytes,
        schema_version=meta.schema_version, device_properties=meta.device_properties,
        base_time_ns=meta.base_time_ns, cuda_runtime_version=meta.cuda_runtime_version,
        cuda_driver_version=meta.cuda_driver_version, cupti_version=meta.cupti_version, trace_id=meta.trace_id,
        distributed_info=meta.distributed_info, origin_us=meta.origin_us,
        unread_device_activity=meta.unread_device_activity or msgspec.UNSET,
        dropped_events=meta.dropped_events or msgspec.UNSET,
        unrecorded_device_calls=meta.unrecorded_device_calls or msgspec.UNSET,
        audit=meta.audit if isinstance(meta.audit, TraceAudit) else msgspec.UNSET,
    )


# Runtime and driver calls that start work on the device (CUDA and HIP spellings): kernel launches of every kind,
# graph launches, copies and sets. Other calls (stream queries, occupancy, synchronisation) start nothing.
DEVICE_WORK_CALLS = r"LaunchKernel|LaunchCooperativeKernel|GraphLaunch|Memcpy|Memset"


def unrecorded_device_calls(tables: TraceTables) -> int:
    """Calls that start device work, where the trace records no device activity at all (else 0): a profiler that
    ran without recording the device (torch.profiler without ProfilerActivity.CUDA, or its device events removed)."""
    if tables.kernels.height or tables.meta.unread_device_activity or not tables.launches.height:
        return 0  # device activity of another kind (CUPTI range-profiler ranges) says the device was recorded
    return int(tables.launches["api"].str.contains(DEVICE_WORK_CALLS).sum())


def profiled_trace(meta: TraceMeta, json_bytes: int, file: str) -> TraceInfo:
    """run.json's `trace` of a profile run: the trace kernelscope recorded and kept as `file`."""
    return TraceInfo(
        event_count=meta.event_count, schema_version=meta.schema_version,
        cuda_runtime_version=meta.cuda_runtime_version, cuda_driver_version=meta.cuda_driver_version,
        cupti_version=meta.cupti_version, base_time_ns=meta.base_time_ns, origin_us=meta.origin_us,
        device_properties=meta.device_properties, json_bytes=json_bytes, file=file,
        audit=meta.audit if isinstance(meta.audit, TraceAudit) else msgspec.UNSET,
    )


def imported_run_info(inputs: list[Path], hardware: Hardware, trace: TraceInfo, device_spec: str | None = None,
                      **sections: Any) -> RunInfo:
    """run.json of a run made by `kernelscope import`. device_spec: a hardware key the user named for the
    device; the trace's own device name is kept, and the spec's name fills in where the trace has none."""
    if device_spec and not hardware.is_cpu:  # a trace without device activity stays a CPU run
        spec_name = knowledge.hardware()["devices"][device_spec]["name"]
        named = {} if hardware.name else {"name": spec_name, "identified_by": "--device"}
        hardware = msgspec.structs.replace(hardware, spec=device_spec, **named)
    return RunInfo(
        schema_version=SCHEMA_VERSION, source=IMPORT, created=datetime.now(UTC).isoformat(timespec="seconds"),
        inputs=[str(p) for p in inputs], hardware=hardware, software=Software(kernelscope=kernelscope.__version__),
        trace=trace, **sections,
    )
