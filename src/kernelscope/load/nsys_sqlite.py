"""Read an Nsight Systems SQLite export (`nsys export --type sqlite`) into the same tables as a Kineto trace.

What is read (docs/nsys.md explains it for users):
- CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET → `kernels` (kinds kernel, memcpy, memset);
- CUPTI_ACTIVITY_KIND_RUNTIME (and _DRIVER where an export has it) → `launches`, joined to the device work by
  correlationId;
- NVTX_EVENTS push/pop (eventType 59) and start/end (60) ranges that have an end → `ops` with cat "annotation",
  so kernelscope's own range names (ks.phase:…, ks.module:…) give phases, steps and modules back; the ranges
  `emit_nvtx` pushes for every framework op become CPU ops (load/nvtx_ops.py);
- StringIds resolves every *Id / *Name integer column; ENUM_CUDA_MEMCPY_OPER / ENUM_CUDA_MEM_KIND name the copies;
- TARGET_INFO_GPU, TARGET_INFO_CUDA_DEVICE, TARGET_INFO_SESSION_START_TIME, META_DATA_EXPORT → metadata.

Schema differences handled (from NVIDIA's "SQLite Export Schema Reference" of the 2021.5 docs and the current
user guide, and the `.schema` of a 2024.6.2 export, schema 3.16.1, published in public repositories):
- Tables are created lazily: an export without CUDA work has no CUPTI_ACTIVITY_KIND_KERNEL at all.
- Kernel names: current exports have demangledName and shortName (both NOT NULL ids into StringIds) and a
  nullable mangledName (added later). Files made by other tools (or versions not checked here) may have only
  shortName, or a `name` column holding an id or the text itself. Preference, per row: demangledName,
  shortName, name, mangledName.
- greenContextId, graphNodeId, sharedMemoryExecuted, sharedMemoryLimitConfig (kernel) and srcKind, dstKind
  (memcpy), memKind (memset) are newer or optional: a missing column reads as null.
- NVTX text: a non-registered string (nvtxRangePushA, torch.cuda.nvtx) is in `text`; a registered one is in
  `textId` → StringIds (the schema reference: "Registered NVTX domain/string"). Either may be used, per row;
  older exports have no textId column. Marks (34), domain and category
  definitions (75, 33, …) and ranges without an end are not ranges of work and are dropped.
- Runtime API names carry the CUDA version that introduced them (cudaLaunchKernel_v7000): the suffix is cut so
  they read as in Kineto (cudaLaunchKernel).
- ENUM_* tables are absent from exports of nsys 2020–2022.2, which use the same numbering of copy directions and
  memory kinds (nsys's own: ENUM_CUDA_MEM_KIND starts at 0 = Pageable, unlike CUPTI's enum); load/nsys_copies.py
  names their copies by it (data/nsys_enums.toml).
- The GPU tables (TARGET_INFO_GPU, TARGET_INFO_CUDA_DEVICE, and TARGET_INFO_CUDA_GPU in 2020–2021) are read by
  load/nsys_devices.py.
- TARGET_INFO_GPU's columns vary; computeMajor/Minor fall back to smMajor/Minor, smCount to
  TARGET_INFO_CUDA_DEVICE.numMultiprocessors. The export's version is META_DATA_EXPORT's EXPORT_SCHEMA_VERSION
  (EXPORT_META_DATA is also looked at).

globalTid packs a process and a thread: pid = (globalTid >> 24) & 0xFFFFFF, tid = globalTid & 0xFFFFFF (bits
48 and up are not part of either; public readers describe them as a host / VM id); globalPid packs the pid the same way. Times are integer ns.
CUPTI correlation ids are unique per process only: when kernels of several processes are present, both sides
are made unique as pid * 2**32 + correlationId.

Rows are fetched in batches straight into columnar frames; strings are resolved by id against StringIds once.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path

import polars as pl

from kernelscope.contracts.tables import conform, empty_trace_tables
from kernelscope.contracts.trace import TraceMeta, TraceTables
from kernelscope.errors import UserError
from kernelscope.load.input_checks import check_input_file
from kernelscope.load.names import MAX_NAME, bounded
from kernelscope.load.nsys_copies import memcpys, memsets
from kernelscope.load.nsys_devices import metadata
from kernelscope.load.nsys_schema import (
    DEVICE_WORK,
    ID_BITS,
    TIMES,
    BadValues,
    Schema,
    Source,
    device_work,
    fetch,
    pid,
    quote,
    resolve,
    tid,
)
from kernelscope.load.nvtx_ops import with_framework_ops
from kernelscope.load.sqlite_input import connect_read_only

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"  # how .nsys-rep and .qdrep reports begin
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"

NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END)

ID_MASK = (1 << ID_BITS) - 1
_CORRELATION_BITS = 32
_API_VERSION = r"_v\d+$"
_NSYS_TABLE_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "TARGET_INFO_", "META_DATA_", "ENUM_NSYS_")

def is_nsys_report(path: Path) -> bool:
    """An Nsight Systems report (.nsys-rep, or .qdrep before nsys 2021.3), by its suffix or its first bytes."""
    if Path(path).suffix.lower() in REPORT_SUFFIXES:
        return True
    try:
        with Path(path).open("rb") as f:
            return f.read(len(REPORT_MAGIC)) == REPORT_MAGIC
    except OSError:
        return False


def is_nsys_sqlite(path: Path) -> bool:
    """An SQLite file (magic header) holding Nsight Systems tables."""
    try:
        with Path(path).open("rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                return False
        with closing(_connect(Path(path))) as conn:
            tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (OSError, sqlite3.Error):
        return False
    return STRINGS_TABLE in tables and any(t.startswith(_NSYS_TABLE_PREFIXES) for t in tables)


def load_nsys_sqlite(path: Path) -> TraceTables:
    """Read one nsys SQLite export. Times become int64 ns from the earliest kernel, runtime call or range."""
    path = Path(path)
    _check_file(path)
    try:
        with closing(_connect(path)) as conn:
            schema = Schema.read(conn)
            _check_tables(path, schema)
            strings = fetch(conn, schema, STRINGS_TABLE, {"id": ("id",), "value": ("value",)},
                             types={"value": pl.String})
            kernels = _kernels(path, conn, schema, strings)
            if kernels.height == 0:
                raise UserError(f"{path}: no CUDA kernels in this Nsight Systems export ({KERNEL_TABLE} is empty)")
            copies = [t for t in (memcpys(conn, schema), memsets(conn, schema)) if t.height]
            devices = pl.concat([kernels, *copies], how="diagonal_relaxed")
            launches = _launches(conn, schema, strings)
            ranges = _ranges(conn, schema, strings)
            meta = metadata(conn, schema, devices)
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: corrupt or unreadable SQLite database ({exc})") from None
    except BadValues as exc:
        raise UserError(f"{path}: {exc}") from None
    dropped: dict[str, int] = {}
    devices, launches, ranges = (_usable(t, dropped) for t in (devices, launches, ranges))
    if devices.height == 0:
        raise UserError(f"{path}: no kernel of this Nsight Systems export has a usable start and end")
    meta.dropped_events = dropped
    return _assemble(devices, launches, ranges, meta)


MAX_DUR_NS = 10**18  # ≈31 years: anything longer, or negative (an end before its start), is corrupt


def _usable(table: pl.DataFrame, dropped: dict[str, int]) -> pl.DataFrame:
    """Rows with a start and a duration from 0 to MAX_DUR_NS, names bounded (load/names.py); the others are
    left out and counted by reason."""
    if table.height == 0 or "dur_ns" not in table.columns:
        return table
    good = table.filter(pl.col("start").is_not_null() & pl.col("dur_ns").is_between(0, MAX_DUR_NS)
                        if "start" in table.columns else pl.col("dur_ns").is_between(0, MAX_DUR_NS))
    if good.height < table.height:
        reason = "unusable time or duration"
        dropped[reason] = dropped.get(reason, 0) + table.height - good.height
    for column in ("name", "api"):
        if column in good.columns and good.height and (good[column].str.len_chars() > MAX_NAME).any():
            dropped["name cut to the length limit"] = dropped.get("name cut to the length limit", 0) + int(
                (good[column].str.len_chars() > MAX_NAME).sum())
            good = good.with_columns(pl.col(column).map_elements(bounded, return_dtype=pl.String))
    return good


def export_nsys_rep(path: Path, workdir: Path) -> Path:
    """Turn a .nsys-rep (or .qdrep) report into an SQLite export in workdir with `nsys export`; returns the
    export's path."""
    path = Path(path)
    if not path.exists():
        raise UserError(f"{path}: no such file")
    nsys = shutil.which("nsys")
    if nsys is None:
        kind = ".qdrep" if path.suffix.lower() == ".qdrep" else ".nsys-rep"
        raise UserError(
            f"{path}: an Nsight Systems report ({kind}), whose binary format only `nsys` reads, and `nsys` is not on "
            f"PATH; export it with `nsys export --type sqlite --output REPORT.sqlite {path}` and pass the .sqlite file"
        )
    out = Path(workdir) / f"{path.name.split('.')[0] or 'report'}.sqlite"
    out.unlink(missing_ok=True)
    # Long options take `=`: the form NVIDIA's CLI documentation prescribes.
    command = [nsys, "export", "--type=sqlite", "--force-overwrite=true", f"--output={out}", str(path)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, errors="replace", check=False)
    except OSError as exc:
        raise UserError(f"{path}: could not run nsys export ({exc})") from None
    if result.returncode != 0 or not out.is_file():
        lines = [line.strip() for line in (result.stderr or result.stdout or "").splitlines() if line.strip()]
        detail = lines[-1] if lines else f"exit status {result.returncode}, no output file"
        raise UserError(f"{path}: nsys export failed: {detail}")
    return out


# --- file and schema checks ----------------------------------------------------------------------------------


def _check_file(path: Path) -> None:
    check_input_file(path, "an Nsight Systems SQLite export (.sqlite)")
    with path.open("rb") as f:
        if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
            raise UserError(
                f"{path}: not an SQLite database (expected an export made with `nsys export --type sqlite`)"
            )


def _connect(path: Path) -> sqlite3.Connection:
    return connect_read_only(path)


def _check_tables(path: Path, schema: Schema) -> None:
    nsys_like = schema.has(STRINGS_TABLE) and any(t.startswith(_NSYS_TABLE_PREFIXES) for t in schema.tables)
    if not schema.has(KERNEL_TABLE):
        if nsys_like:
            raise UserError(
                f"{path}: no CUDA kernels in this Nsight Systems export (no {KERNEL_TABLE} table; "
                "was it recorded with `nsys profile --trace=cuda,nvtx`?)"
            )
        raise UserError(f"{path}: not an Nsight Systems export (no {KERNEL_TABLE} table)")
    if not schema.has(STRINGS_TABLE):
        raise UserError(f"{path}: not an Nsight Systems export (no {STRINGS_TABLE} table)")
    missing = [c for c in ("start", "end") if not schema.column(KERNEL_TABLE, c)]
    if not schema.column(KERNEL_TABLE, "demangledName", "shortName", "name", "mangledName"):
        missing.append("demangledName or shortName")
    if missing:
        raise UserError(f"{path}: {KERNEL_TABLE} lacks column(s) {', '.join(missing)}")


# --- reading -------------------------------------------------------------------------------------------------


def _kernels(path: Path, conn: sqlite3.Connection, schema: Schema, strings: pl.DataFrame) -> pl.DataFrame:
    t = KERNEL_TABLE
    plain = quote(schema.column(t, "name") or "")  # `name`: an id in some files, the text itself in others
    has_plain = schema.column(t, "name") is not None
    columns: dict[str, Source] = {
        **DEVICE_WORK,
        "demangled_id": ("demangledName",), "short_id": ("shortName",), "mangled_id": ("mangledName",),
        "name_id": f"CASE WHEN typeof({plain}) = 'integer' THEN {plain} END" if has_plain else (),
        "name_text": f"CASE WHEN typeof({plain}) = 'text' THEN {plain} END" if has_plain else (),
        "grid_x": ("gridX",), "grid_y": ("gridY",), "grid_z": ("gridZ",),
        "block_x": ("blockX",), "block_y": ("blockY",), "block_z": ("blockZ",),
        "registers_per_thread": ("registersPerThread",),
        "static_shared": ("staticSharedMemory",), "dynamic_shared": ("dynamicSharedMemory",),
    }
    raw = fetch(conn, schema, t, columns, types={"name_text": pl.String})
    name = pl.coalesce(resolve(strings, "demangled_id"), resolve(strings, "short_id"), pl.col("name_text"),
                       resolve(strings, "name_id"), resolve(strings, "mangled_id"))
    shared = pl.when(pl.col("static_shared").is_null() & pl.col("dynamic_shared").is_null()).then(None).otherwise(
        pl.col("static_shared").fill_null(0) + pl.col("dynamic_shared").fill_null(0))  # unknown, not zero
    kernels = raw.select(
        *device_work(name, "kernel"), "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", shared.alias("shared_memory_bytes"),
    )
    if unnamed := kernels["name"].null_count():
        raise UserError(f"{path}: {unnamed} kernel(s) whose name id is not in {STRINGS_TABLE}")
    return kernels


def _launches(conn: sqlite3.Connection, schema: Schema, strings: pl.DataFrame) -> pl.DataFrame:
    columns: dict[str, Source] = {**TIMES, "global_tid": ("globalTid",), "correlation": ("correlationId",),
                                   "name_id": ("nameId",)}
    parts = [fetch(conn, schema, t, columns) for t in RUNTIME_TABLES if schema.has(t)]
    raw = pl.concat(parts) if parts else pl.DataFrame(schema=dict.fromkeys(columns, pl.Int64))
    return raw.select(
        resolve(strings, "name_id").str.replace(_API_VERSION, "").alias("api"),
        pid("global_tid").alias("pid"), tid("global_tid").alias("tid"), "start",
        (pl.col("end_") - pl.col("start")).alias("dur_ns"), "correlation",
        pl.lit(None, dtype=pl.Int64).alias("external_id"),
    )


def _ranges(conn: sqlite3.Connection, schema: Schema, strings: pl.DataFrame) -> pl.DataFrame:
    t = NVTX_TABLE
    if not schema.has(t) or not schema.column(t, "end"):
        return pl.DataFrame(schema={"name": pl.String, "pid": pl.Int64, "tid": pl.Int64, "start": pl.Int64,
                                    "dur_ns": pl.Int64})
    where = '"end" IS NOT NULL'
    if schema.column(t, "eventType"):
        where += f" AND eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})"
    raw = fetch(conn, schema, t, {**TIMES, "text": ("text",), "text_id": ("textId",), "global_tid": ("globalTid",)},
                 types={"text": pl.String}, where=where)
    return raw.select(
        pl.coalesce("text", resolve(strings, "text_id")).alias("name"),
        pid("global_tid").alias("pid"), tid("global_tid").alias("tid"), "start",
        (pl.col("end_") - pl.col("start")).alias("dur_ns"),
    ).filter(pl.col("name").is_not_null())


# --- assembly ------------------------------------------------------------------------------------------------


def _assemble(devices: pl.DataFrame, launches: pl.DataFrame, ranges: pl.DataFrame,
              meta: TraceMeta) -> TraceTables:
    devices = devices.sort("start", maintain_order=True)
    # Correlation ids repeat across processes: make them unique per process when several are present.
    if devices["pid"].drop_nulls().n_unique() > 1:
        unique = (pl.col("pid") * (1 << _CORRELATION_BITS) + pl.col("correlation")).alias("correlation")
        devices = devices.with_columns(pl.when(pl.col("pid").is_not_null()).then(unique)
                                       .otherwise(pl.col("correlation")).alias("correlation"))
        launches = launches.with_columns(unique)
        meta.correlation_encoding = "pid * 2**32 + correlationId"
    firsts = [int(t["start"].min()) for t in (devices, launches, ranges) if t.height]
    origin = min(firsts)

    def relative(table: pl.DataFrame) -> pl.DataFrame:
        return table.with_columns((pl.col("start") - origin).alias("start_ns"))

    kernels = relative(devices).with_columns(
        pl.lit(None, dtype=pl.Int64).alias("external_id"),
        pl.lit(None, dtype=pl.Float64).alias("est_occupancy_pct"),
    )
    kernel_columns, launch_columns, op_columns = (t.schema for t in empty_trace_tables())
    kernels = conform(kernels, dict(kernel_columns)).select(list(kernel_columns))
    launches = conform(relative(launches), dict(launch_columns)).select(list(launch_columns))
    ops = conform(with_framework_ops(relative(ranges)), dict(op_columns))
    ops = ops.select(list(op_columns))
    meta.event_count = devices.height + launches.height + ops.height
    meta.origin_us = origin / 1e3
    return TraceTables(kernels=kernels, launches=launches, ops=ops, meta=meta)
