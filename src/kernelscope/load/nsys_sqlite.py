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
- ENUM_* tables may be absent (older exports); without them a copy is named "Memcpy <copyKind number>", as
  their ids are nsys's own (ENUM_CUDA_MEM_KIND starts at 0 = Pageable, unlike CUPTI's enum), so no
  built-in table is guessed.
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

import re
import shutil
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

import polars as pl

from kernelscope.contracts.tables import conform, empty_trace_tables
from kernelscope.contracts.trace import TraceMeta, TraceTables
from kernelscope.errors import UserError
from kernelscope.load.input_checks import check_input_file
from kernelscope.load.names import MAX_NAME, bounded
from kernelscope.load.nvtx_ops import with_framework_ops
from kernelscope.load.sqlite_input import connect_read_only

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"  # how .nsys-rep and .qdrep reports begin
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER")
NVTX_TABLE = "NVTX_EVENTS"
STRINGS_TABLE = "StringIds"
MEMCPY_ENUM = "ENUM_CUDA_MEMCPY_OPER"
MEMORY_ENUM = "ENUM_CUDA_MEM_KIND"
EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

NVTX_PUSH_POP = 59
NVTX_START_END = 60
NVTX_RANGE_TYPES = (NVTX_PUSH_POP, NVTX_START_END)

ID_BITS = 24
ID_MASK = (1 << ID_BITS) - 1
_CORRELATION_BITS = 32
_BATCH_ROWS = 1 << 18
_API_VERSION = r"_v\d+$"
_NSYS_TABLE_PREFIXES = ("CUPTI_ACTIVITY_KIND_", "NVTX_EVENTS", "TARGET_INFO_", "META_DATA_", "ENUM_NSYS_")

# Kineto's device property keys ← TARGET_INFO_GPU columns (first present wins).
_DEVICE_PROPERTIES = {
    "name": ("name",),
    "totalGlobalMem": ("totalMemory",),
    "numSms": ("smCount",),
    "computeMajor": ("computeMajor", "smMajor"),
    "computeMinor": ("computeMinor", "smMinor"),
    "l2CacheSize": ("l2CacheSize",),
    "maxThreadsPerBlock": ("maxThreadsPerBlock",),
    "regsPerBlock": ("maxRegistersPerBlock",),
    "warpSize": ("threadsPerWarp",),
    "sharedMemPerBlock": ("maxShmemPerBlock",),
    "sharedMemPerBlockOptin": ("maxShmemPerBlockOptin",),
    "sharedMemPerMultiprocessor": ("maxShmemPerSm",),
    "regsPerMultiprocessor": ("maxRegistersPerSm",),
    "clockRate": ("clockRate",),
    "memoryBandwidth": ("memoryBandwidth",),
    "uuid": ("uuid",),
    "busLocation": ("busLocation",),
    "chipName": ("chipName",),
}


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
            schema = _Schema.read(conn)
            _check_tables(path, schema)
            strings = _fetch(conn, schema, STRINGS_TABLE, {"id": ("id",), "value": ("value",)},
                             types={"value": pl.String})
            kernels = _kernels(path, conn, schema, strings)
            if kernels.height == 0:
                raise UserError(f"{path}: no CUDA kernels in this Nsight Systems export ({KERNEL_TABLE} is empty)")
            copies = [t for t in (_memcpys(conn, schema), _memsets(conn, schema)) if t.height]
            devices = pl.concat([kernels, *copies], how="diagonal_relaxed")
            launches = _launches(conn, schema, strings)
            ranges = _ranges(conn, schema, strings)
            meta = _metadata(conn, schema, devices)
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: corrupt or unreadable SQLite database ({exc})") from None
    except _BadValues as exc:
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


class _Schema:
    """Table name → its column names, as this export has them."""

    def __init__(self, tables: dict[str, list[str]]):
        self.tables = tables

    @classmethod
    def read(cls, conn: sqlite3.Connection) -> _Schema:
        names = [name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return cls({name: [row[1] for row in conn.execute(f"PRAGMA table_info({_quote(name)})")] for name in names})

    def has(self, table: str) -> bool:
        return table in self.tables

    def column(self, table: str, *candidates: str) -> str | None:
        """The first of the candidate columns this table has."""
        columns = self.tables.get(table, [])
        return next((c for c in candidates if c in columns), None)


def _check_tables(path: Path, schema: _Schema) -> None:
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


def _quote(identifier: str) -> str:
    return '"' + identifier.replace('"', '""') + '"'


class _BadValues(Exception):
    """A column holds values of another type than the schema documents (e.g. text in an integer column)."""


# A column to read: the first present of some candidate column names (none present: null), or an SQL expression.
_Source = tuple[str, ...] | str


def _fetch(conn: sqlite3.Connection, schema: _Schema, table: str, columns: dict[str, _Source],
           types: dict[str, Any] | None = None, where: str = "") -> pl.DataFrame:
    """Read columns (alias → source) of a table into a typed frame (Int64 unless types says otherwise)."""
    exprs = []
    for alias, source in columns.items():
        if isinstance(source, str):
            exprs.append(f"{source} AS {alias}")
        else:
            found = schema.column(table, *source)
            exprs.append(f"{_quote(found) if found else 'NULL'} AS {alias}")
    sql = f"SELECT {', '.join(exprs)} FROM {_quote(table)}" + (f" WHERE {where}" if where else "")
    return _read(conn, sql, table, {alias: (types or {}).get(alias, pl.Int64) for alias in columns})


def _read(conn: sqlite3.Connection, sql: str, table: str, schema: dict[str, Any]) -> pl.DataFrame:
    """Run a query; rows go into typed columnar frames batch by batch (memory bounded by the batch)."""
    cursor = conn.execute(sql)
    parts = []
    while rows := cursor.fetchmany(_BATCH_ROWS):
        try:
            parts.append(pl.DataFrame(rows, schema=schema, orient="row"))
        except (pl.exceptions.PolarsError, TypeError, OverflowError) as exc:
            raise _BadValues(f"unexpected values in {table}: {str(exc).splitlines()[0]}") from None
    return pl.concat(parts) if parts else pl.DataFrame(schema=schema)


def _resolve(strings: pl.DataFrame, column: str) -> pl.Expr:
    """String of an id column via StringIds (null where the id is null or unknown)."""
    return pl.col(column).replace_strict(strings["id"], strings["value"], default=None, return_dtype=pl.String)


def _pid(column: str) -> pl.Expr:
    return ((pl.col(column) // (1 << ID_BITS)) % (1 << ID_BITS)).cast(pl.Int64)


def _tid(column: str) -> pl.Expr:
    return (pl.col(column) % (1 << ID_BITS)).cast(pl.Int64)


_TIMES: dict[str, _Source] = {"start": ("start",), "end_": ("end",)}
_DEVICE_WORK: dict[str, _Source] = {
    **_TIMES, "device": ("deviceId",), "stream": ("streamId",), "correlation": ("correlationId",),
    "global_pid": ("globalPid",),
}


def _device_work(name: pl.Expr, kind: str) -> list[pl.Expr]:
    return [name.alias("name"), pl.lit(kind).alias("kind"), pl.col("device"), pl.col("stream"), pl.col("start"),
            (pl.col("end_") - pl.col("start")).alias("dur_ns"), pl.col("correlation"),
            _pid("global_pid").alias("pid")]


def _kernels(path: Path, conn: sqlite3.Connection, schema: _Schema, strings: pl.DataFrame) -> pl.DataFrame:
    t = KERNEL_TABLE
    plain = _quote(schema.column(t, "name") or "")  # `name`: an id in some files, the text itself in others
    has_plain = schema.column(t, "name") is not None
    columns: dict[str, _Source] = {
        **_DEVICE_WORK,
        "demangled_id": ("demangledName",), "short_id": ("shortName",), "mangled_id": ("mangledName",),
        "name_id": f"CASE WHEN typeof({plain}) = 'integer' THEN {plain} END" if has_plain else (),
        "name_text": f"CASE WHEN typeof({plain}) = 'text' THEN {plain} END" if has_plain else (),
        "grid_x": ("gridX",), "grid_y": ("gridY",), "grid_z": ("gridZ",),
        "block_x": ("blockX",), "block_y": ("blockY",), "block_z": ("blockZ",),
        "registers_per_thread": ("registersPerThread",),
        "static_shared": ("staticSharedMemory",), "dynamic_shared": ("dynamicSharedMemory",),
    }
    raw = _fetch(conn, schema, t, columns, types={"name_text": pl.String})
    name = pl.coalesce(_resolve(strings, "demangled_id"), _resolve(strings, "short_id"), pl.col("name_text"),
                       _resolve(strings, "name_id"), _resolve(strings, "mangled_id"))
    shared = pl.when(pl.col("static_shared").is_null() & pl.col("dynamic_shared").is_null()).then(None).otherwise(
        pl.col("static_shared").fill_null(0) + pl.col("dynamic_shared").fill_null(0))  # unknown, not zero
    kernels = raw.select(
        *_device_work(name, "kernel"), "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z",
        "registers_per_thread", shared.alias("shared_memory_bytes"),
    )
    if unnamed := kernels["name"].null_count():
        raise UserError(f"{path}: {unnamed} kernel(s) whose name id is not in {STRINGS_TABLE}")
    return kernels


def _enum_labels(conn: sqlite3.Connection, schema: _Schema, table: str) -> tuple[list[int], list[str], list[str]]:
    """ids, symbol names and human labels of an ENUM_* table (empty when the export has none)."""
    if not schema.has(table) or not schema.column(table, "id"):
        return [], [], []
    name, label = schema.column(table, "name", "label"), schema.column(table, "label", "name")
    if not name:
        return [], [], []
    rows = conn.execute(f"SELECT id, {_quote(name)}, {_quote(label)} FROM {table}").fetchall()
    return [r[0] for r in rows], [r[1] or "" for r in rows], [r[2] or r[1] or "" for r in rows]


def _copy_direction(symbol: str, label: str) -> str:
    """CUDA_MEMCPY_KIND_HTOD → HtoD (Kineto's spelling); other kinds keep nsys's label."""
    match = re.fullmatch(r"(?:CUDA_MEMCPY_KIND_)?([A-Z])TO([A-Z])", symbol)
    return f"{match.group(1)}to{match.group(2)}" if match else (label or symbol)


def _lookup(column: str, keys: list[int], values: list[str]) -> pl.Expr:
    if not keys:
        return pl.lit(None, dtype=pl.String)
    return pl.col(column).replace_strict(keys, values, default=None, return_dtype=pl.String)


def _memcpys(conn: sqlite3.Connection, schema: _Schema) -> pl.DataFrame:
    if not schema.has(MEMCPY_TABLE):
        return pl.DataFrame()
    raw = _fetch(conn, schema, MEMCPY_TABLE, {**_DEVICE_WORK, "bytes": ("bytes",), "copy_kind": ("copyKind",),
                                              "src_kind": ("srcKind",), "dst_kind": ("dstKind",)})
    ids, symbols, labels = _enum_labels(conn, schema, MEMCPY_ENUM)
    directions = [_copy_direction(s, lbl) for s, lbl in zip(symbols, labels, strict=True)]
    mem_ids, _, mem_labels = _enum_labels(conn, schema, MEMORY_ENUM)
    direction = _lookup("copy_kind", ids, directions)
    src, dst = _lookup("src_kind", mem_ids, mem_labels), _lookup("dst_kind", mem_ids, mem_labels)
    name = (
        pl.when(direction.is_null()).then(pl.format("Memcpy {}", pl.col("copy_kind").cast(pl.String)))
        .when(src.is_not_null() & dst.is_not_null()).then(pl.format("Memcpy {} ({} -> {})", direction, src, dst))
        .otherwise(pl.format("Memcpy {}", direction))
    )
    return raw.select(*_device_work(name, "memcpy"), "bytes")


def _memsets(conn: sqlite3.Connection, schema: _Schema) -> pl.DataFrame:
    if not schema.has(MEMSET_TABLE):
        return pl.DataFrame()
    raw = _fetch(conn, schema, MEMSET_TABLE, {**_DEVICE_WORK, "bytes": ("bytes",), "mem_kind": ("memKind",)})
    mem_ids, _, mem_labels = _enum_labels(conn, schema, MEMORY_ENUM)
    kind = _lookup("mem_kind", mem_ids, mem_labels)
    name = pl.when(kind.is_null()).then(pl.lit("Memset")).otherwise(pl.format("Memset ({})", kind))
    return raw.select(*_device_work(name, "memset"), "bytes")


def _launches(conn: sqlite3.Connection, schema: _Schema, strings: pl.DataFrame) -> pl.DataFrame:
    columns: dict[str, _Source] = {**_TIMES, "global_tid": ("globalTid",), "correlation": ("correlationId",),
                                   "name_id": ("nameId",)}
    parts = [_fetch(conn, schema, t, columns) for t in RUNTIME_TABLES if schema.has(t)]
    raw = pl.concat(parts) if parts else pl.DataFrame(schema=dict.fromkeys(columns, pl.Int64))
    return raw.select(
        _resolve(strings, "name_id").str.replace(_API_VERSION, "").alias("api"),
        _pid("global_tid").alias("pid"), _tid("global_tid").alias("tid"), "start",
        (pl.col("end_") - pl.col("start")).alias("dur_ns"), "correlation",
        pl.lit(None, dtype=pl.Int64).alias("external_id"),
    )


def _ranges(conn: sqlite3.Connection, schema: _Schema, strings: pl.DataFrame) -> pl.DataFrame:
    t = NVTX_TABLE
    if not schema.has(t) or not schema.column(t, "end"):
        return pl.DataFrame(schema={"name": pl.String, "pid": pl.Int64, "tid": pl.Int64, "start": pl.Int64,
                                    "dur_ns": pl.Int64})
    where = '"end" IS NOT NULL'
    if schema.column(t, "eventType"):
        where += f" AND eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})"
    raw = _fetch(conn, schema, t, {**_TIMES, "text": ("text",), "text_id": ("textId",), "global_tid": ("globalTid",)},
                 types={"text": pl.String}, where=where)
    return raw.select(
        pl.coalesce("text", _resolve(strings, "text_id")).alias("name"),
        _pid("global_tid").alias("pid"), _tid("global_tid").alias("tid"), "start",
        (pl.col("end_") - pl.col("start")).alias("dur_ns"),
    ).filter(pl.col("name").is_not_null())


# --- metadata ------------------------------------------------------------------------------------------------


def _metadata(conn: sqlite3.Connection, schema: _Schema, devices: pl.DataFrame) -> TraceMeta:
    export: dict[str, str] = {}
    for table in EXPORT_META_TABLES:
        if schema.column(table, "name") and schema.column(table, "value"):
            export.update({str(k): v for k, v in conn.execute(f"SELECT name, value FROM {table}")})
    session_start = None
    if schema.column("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        session_start = row[0] if row else None
    return TraceMeta(
        source_format="nsys-sqlite",
        schema_version=export.get("EXPORT_SCHEMA_VERSION"),
        device_properties=_device_properties(conn, schema, devices),
        nsys_version=export.get("EXPORT_PRODUCT_VERSION"),
        session_start_utc_ns=session_start,
    )


# Kineto's device property keys ← TARGET_INFO_CUDA_GPU columns, the table exports of nsys 2020–2021 have instead of
# TARGET_INFO_GPU (one row per GPU and process; memory in MiB: 32510 for a 32 GB V100).
_OLD_GPU_TABLE = "TARGET_INFO_CUDA_GPU"
_OLD_DEVICE_PROPERTIES = {
    "id": "deviceId", "name": "name", "numSms": "numMultiprocessors", "computeMajor": "computeCapabilityMajor",
    "computeMinor": "computeCapabilityMinor", "l2CacheSize": "l2CacheSize", "warpSize": "numThreadsPerWarp",
    "maxThreadsPerBlock": "maxThreadsPerBlock", "regsPerBlock": "maxRegistersPerBlock",
    "sharedMemPerBlock": "maxSharedMemoryPerBlock", "sharedMemPerMultiprocessor": "maxSharedMemoryPerMultiprocessor",
    "regsPerMultiprocessor": "maxRegistersPerMultiprocessor", "clockRate": "coreClockRate",
    "memoryBandwidth": "globalMemoryBandwidth",
}
_MIB = 1 << 20


def _old_device_properties(conn: sqlite3.Connection, schema: _Schema, devices: pl.DataFrame) -> list[dict[str, Any]]:
    """TARGET_INFO_CUDA_GPU → one dict per CUDA device, those that ran the kernels first."""
    present = {key: column for key, column in _OLD_DEVICE_PROPERTIES.items() if schema.column(_OLD_GPU_TABLE, column)}
    if "id" not in present:
        return []
    memory = schema.column(_OLD_GPU_TABLE, "globalMemorySize")
    select = [*(_quote(c) for c in present.values()), _quote(memory) if memory else "NULL"]
    by_device: dict[int, dict[str, Any]] = {}
    for *values, mib in conn.execute(f"SELECT {', '.join(select)} FROM {_OLD_GPU_TABLE}"):
        props = {key: value for key, value in zip(present, values, strict=True) if value is not None}
        if isinstance(mib, int) and mib > 0:
            props["totalGlobalMem"] = mib * _MIB
        by_device.setdefault(props["id"], props)
    used = set(devices["device"].drop_nulls().to_list())
    return [by_device[d] for d in sorted(by_device, key=lambda d: (d not in used, d))]


def _device_properties(conn: sqlite3.Connection, schema: _Schema, devices: pl.DataFrame) -> list[dict[str, Any]]:
    """One dict per GPU with Kineto's deviceProperties keys; GPUs that ran the kernels first, by CUDA id."""
    gpu = "TARGET_INFO_GPU"
    if not schema.column(gpu, "id"):
        return _old_device_properties(conn, schema, devices)
    wanted = {key: schema.column(gpu, *columns) for key, columns in _DEVICE_PROPERTIES.items()}
    present = {key: column for key, column in wanted.items() if column}
    cu_device = schema.column(gpu, "cuDevice")
    select = ["id", *(_quote(c) for c in present.values()), _quote(cu_device) if cu_device else "NULL"]
    rows = conn.execute(f"SELECT {', '.join(select)} FROM {gpu}").fetchall()

    # CUDA ids as the traced processes saw them, and SM counts, from TARGET_INFO_CUDA_DEVICE where present.
    used = set(devices.select("pid", "device").unique().iter_rows())
    cuda_ids: dict[int, int] = {}
    sms: dict[int, int] = {}
    used_gpus: set[int] = set()
    cuda = "TARGET_INFO_CUDA_DEVICE"
    if schema.column(cuda, "gpuId") and schema.column(cuda, "cudaId"):
        pid = schema.column(cuda, "pid")
        count = schema.column(cuda, "numMultiprocessors")
        query = f"SELECT gpuId, cudaId, {_quote(pid) if pid else 'NULL'}, {_quote(count) if count else 'NULL'}"
        for gpu_id, cuda_id, process, sm_count in conn.execute(f"{query} FROM {cuda}"):
            if (process, cuda_id) in used or (process is None and any(d == cuda_id for _, d in used)):
                used_gpus.add(gpu_id)
                cuda_ids[gpu_id] = cuda_id
            cuda_ids.setdefault(gpu_id, cuda_id)
            if sm_count is not None:
                sms.setdefault(gpu_id, sm_count)

    by_gpu: dict[int, dict[str, Any]] = {}
    for gpu_id, *values, cu in rows:
        if gpu_id in by_gpu:  # one row per GPU and VM: the first is enough
            continue
        props: dict[str, Any] = {"id": cuda_ids.get(gpu_id, cu if cu is not None else gpu_id)}
        props.update({key: value for key, value in zip(present, values, strict=True) if value is not None})
        if "numSms" not in props and gpu_id in sms:
            props["numSms"] = sms[gpu_id]
        by_gpu[gpu_id] = props
    if not used_gpus:
        used_ids = {device for _, device in used}
        used_gpus = {gpu_id for gpu_id, props in by_gpu.items() if props["id"] in used_ids}
    order = sorted(by_gpu, key=lambda gpu_id: (gpu_id not in used_gpus, by_gpu[gpu_id]["id"]))
    return [by_gpu[gpu_id] for gpu_id in order]


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
