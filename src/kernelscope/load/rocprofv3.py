"""Read what ROCm's own recorder writes, rocprofv3 (rocprofiler-sdk), into the tables a Kineto trace gives: its JSON
output (`--output-format json`: `{"rocprofiler-sdk-tool": [one object per process]}`, as its schema documents) and
its SQLite database (`--output-format rocpd`, the default since ROCm 7: the `rocpd_*` tables and views).

JSON, per process: `buffer_records.kernel_dispatch` → kernels (`dispatch_info.kernel_id` names them through
`kernel_symbols`: the demangled name, without the `.kd` suffix of the code object's symbol), `memory_copy` →
copies (their direction from `strings.buffer_records`' MEMORY_COPY operations), `hip_api` → the calls that launched
them (operation → name through HIP_RUNTIME_API's operations), joined by `correlation_id.internal`; `agents` of type 2
(GPU) → device properties, each GPU numbered by `logical_node_type_id`.
rocpd: `rocpd_kernel_dispatch` (name from `rocpd_info_kernel_symbol`), `rocpd_memory_copy`, `rocpd_region` (host
API calls of category *_API, roctx ranges as annotations), joined by their events' `stack_id` (the internal
correlation id), `rocpd_info_agent`, `rocpd_string`; schema 3 keeps start and end in each row, schema 4 in
`rocpd_timestamp` (start_id, end_id), process and thread in `rocpd_track`.
Grid sizes are work-items there; the tables hold blocks, as CUDA's and Kineto's do: grid / workgroup, rounded up.
Several processes in one output are told apart as an Nsight Systems export's are (correlation = pid * 2**32 +
correlation id; analyze/ranks/processes.py makes them ranks).
"""

from __future__ import annotations

import gzip
import re
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from kernelscope.contracts.tables import conform, empty_trace_tables
from kernelscope.contracts.trace import TraceMeta, TraceTables
from kernelscope.errors import UserError
from kernelscope.load.sqlite_input import connect_read_only

JSON_KEY = b'"rocprofiler-sdk-tool"'
JSON_FORMAT, ROCPD_FORMAT = "rocprofv3-json", "rocpd"
_GPU = 2
_KD_SUFFIX = re.compile(r"\.kd$")
_COPY = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD", "HOST_TO_HOST": "HtoH"}
_CORRELATION_BITS = 32


def is_rocprofv3_json(head: bytes) -> bool:
    """The first bytes (decompressed) of a file: rocprofv3's JSON output opens with its tool key."""
    return head.lstrip()[:1] == b"{" and JSON_KEY in head[:256]


def is_rocpd(tables: set[str]) -> bool:
    return "rocpd_kernel_dispatch" in tables or any(t.startswith("rocpd_kernel_dispatch_") for t in tables)


# --------------------------------------------------------------------------------------------- JSON


def load_rocprofv3_json(path: Path) -> TraceTables:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    try:
        doc = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise UserError(f"{path}: not a complete rocprofv3 JSON output ({exc})") from None
    processes = doc.get("rocprofiler-sdk-tool") if isinstance(doc, dict) else None
    if not isinstance(processes, list) or not processes:
        raise UserError(f"{path}: a rocprofv3 JSON output without processes (`rocprofiler-sdk-tool` is empty)")
    kernels, copies, launches, props = [], [], [], []
    for process in processes:
        k, c, launch, p = _json_process(path, process)
        kernels.append(k)
        copies.append(c)
        launches.append(launch)
        props = props or p
    return _assemble(path, pl.concat(kernels, how="diagonal_relaxed"), pl.concat(copies, how="diagonal_relaxed"),
                     pl.concat(launches, how="diagonal_relaxed"), pl.DataFrame(), props, JSON_FORMAT)


def _operations(process: dict, kind: str) -> list[str]:
    for entry in process.get("strings", {}).get("buffer_records", []):
        if entry.get("kind") == kind:
            return list(entry.get("operations") or [])
    return []


def _json_process(path: Path, process: dict) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, list[dict]]:
    pid = int(process.get("metadata", {}).get("pid") or 0)
    gpus = {a["id"]["handle"]: a for a in process.get("agents", []) if a.get("type") == _GPU and "id" in a}
    device = {handle: int(a.get("logical_node_type_id", i)) for i, (handle, a) in enumerate(gpus.items())}
    symbols = {s["kernel_id"]: s for s in process.get("kernel_symbols", [])}
    records = process.get("buffer_records", {})
    rows = []
    for d in records.get("kernel_dispatch", []):
        info = d.get("dispatch_info", {})
        symbol = symbols.get(info.get("kernel_id"), {})
        name = symbol.get("demangled_kernel_name") or symbol.get("kernel_name") or f"kernel {info.get('kernel_id')}"
        work, group = info.get("grid_size", {}), info.get("workgroup_size", {})
        rows.append({
            "name": _KD_SUFFIX.sub("", name), "device": device.get(info.get("agent_id", {}).get("handle")),
            "stream": (d.get("stream_id") or info.get("queue_id") or {}).get("handle"),
            "start": d.get("start_timestamp"), "end": d.get("end_timestamp"), "pid": pid,
            "correlation": (d.get("correlation_id") or {}).get("internal"),
            **_geometry(work, group), "shared_memory_bytes": info.get("group_segment_size"),
            "registers_per_thread": symbol.get("arch_vgpr_count"),
        })
    kernels = pl.DataFrame(rows, schema=_KERNEL_SCHEMA, orient="row").with_columns(pl.lit("kernel").alias("kind"))
    directions = _operations(process, "MEMORY_COPY")
    copies = pl.DataFrame([{
        "name": _copy_name(directions, c.get("operation")), "device": None, "stream": None,
        "start": c.get("start_timestamp"), "end": c.get("end_timestamp"), "pid": pid,
        "correlation": (c.get("correlation_id") or {}).get("internal"), "bytes": c.get("bytes"),
    } for c in records.get("memory_copy", [])], schema={**_COPY_SCHEMA}, orient="row").with_columns(
        pl.lit("memcpy").alias("kind"))
    apis = _operations(process, "HIP_RUNTIME_API")
    launches = pl.DataFrame([{
        "api": apis[a["operation"]] if 0 <= a.get("operation", -1) < len(apis) else None, "pid": pid,
        "tid": a.get("thread_id"), "start": a.get("start_timestamp"), "end": a.get("end_timestamp"),
        "correlation": (a.get("correlation_id") or {}).get("internal"),
    } for a in records.get("hip_api", [])], schema=_LAUNCH_SCHEMA, orient="row")
    return kernels, copies, launches, [_properties(a, device[h]) for h, a in gpus.items()]


def _geometry(work: dict, group: dict) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for axis in "xyz":
        g, b = work.get(axis), group.get(axis)
        out[f"block_{axis}"] = b
        out[f"grid_{axis}"] = -(-g // b) if isinstance(g, int) and isinstance(b, int) and b > 0 else None
    return out


def _copy_name(directions: list[str], operation: Any) -> str:
    label = directions[operation] if isinstance(operation, int) and 0 <= operation < len(directions) else ""
    short = _COPY.get(label.removeprefix("MEMORY_COPY_"))
    return f"Memcpy {short}" if short else "Memcpy"


def _properties(agent: dict, device: int) -> dict[str, Any]:
    """Kineto's deviceProperties keys from a GPU agent."""
    keys = {"numSms": "cu_count", "warpSize": "wave_front_size", "maxThreadsPerBlock": "workgroup_max_size",
            "gcnArchName": "name"}
    props: dict[str, Any] = {"id": device, "name": agent.get("product_name") or agent.get("name")}
    props.update({k: agent[v] for k, v in keys.items() if agent.get(v) is not None})
    return props


_KERNEL_SCHEMA = {"name": pl.String, "device": pl.Int64, "stream": pl.Int64, "start": pl.Int64, "end": pl.Int64,
                  "pid": pl.Int64, "correlation": pl.Int64, "grid_x": pl.Int64, "grid_y": pl.Int64,
                  "grid_z": pl.Int64, "block_x": pl.Int64, "block_y": pl.Int64, "block_z": pl.Int64,
                  "shared_memory_bytes": pl.Int64, "registers_per_thread": pl.Int64}
_COPY_SCHEMA = {"name": pl.String, "device": pl.Int64, "stream": pl.Int64, "start": pl.Int64, "end": pl.Int64,
                "pid": pl.Int64, "correlation": pl.Int64, "bytes": pl.Int64}
_LAUNCH_SCHEMA = {"api": pl.String, "pid": pl.Int64, "tid": pl.Int64, "start": pl.Int64, "end": pl.Int64,
                  "correlation": pl.Int64}
_RANGE_SCHEMA = {"name": pl.String, "pid": pl.Int64, "tid": pl.Int64, "start": pl.Int64, "end": pl.Int64}


# --------------------------------------------------------------------------------------------- rocpd (SQLite)


def load_rocpd(path: Path) -> TraceTables:
    try:
        with closing(connect_read_only(path)) as conn:
            names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
            columns = set(_columns(conn, "rocpd_kernel_dispatch"))
            timestamps = "start" not in columns and "rocpd_timestamp" in names  # schema 4
            kernels = _query(conn, _dispatch_sql(timestamps), _KERNEL_SCHEMA).with_columns(
                pl.lit("kernel").alias("kind"), pl.col("name").str.replace(_KD_SUFFIX.pattern, ""))
            copies = (_query(conn, _copy_sql(timestamps), _COPY_SCHEMA) if "rocpd_memory_copy" in names
                      else pl.DataFrame(schema=_COPY_SCHEMA)).with_columns(pl.lit("memcpy").alias("kind"))
            regions = _query(conn, _region_sql(), {**_LAUNCH_SCHEMA, "category": pl.String}) \
                if "rocpd_region" in names else pl.DataFrame(schema={**_LAUNCH_SCHEMA, "category": pl.String})
            props = _rocpd_agents(conn) if "rocpd_info_agent" in names else []
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: corrupt or unreadable rocpd database ({exc})") from None
    category = pl.col("category").fill_null("")
    launches = regions.filter(category.str.ends_with("_API") & ~category.str.starts_with("MARKER")).drop("category")
    ranges = regions.filter(category.str.starts_with("MARKER")).select(
        pl.col("api").alias("name"), "pid", "tid", "start", "end")
    return _assemble(path, kernels, copies, launches, ranges, props, ROCPD_FORMAT)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]


def _query(conn: sqlite3.Connection, sql: str, schema: dict) -> pl.DataFrame:
    rows = conn.execute(sql).fetchall()
    return pl.DataFrame(rows, schema=list(schema.items()), orient="row")


def _times(table: str, timestamps: bool) -> tuple[str, str]:
    if timestamps:
        return (f"(SELECT value FROM rocpd_timestamp WHERE id = {table}.start_id)",
                f"(SELECT value FROM rocpd_timestamp WHERE id = {table}.end_id)")
    return f'{table}."start"', f'{table}."end"'


def _dispatch_sql(timestamps: bool) -> str:
    start, end = _times("d", timestamps)
    owner = ("(SELECT p.pid FROM rocpd_track t JOIN rocpd_info_process p ON p.id = t.pid WHERE t.id = d.track_id)"
             if timestamps else "(SELECT pid FROM rocpd_info_process WHERE id = d.pid)")
    agent = "(SELECT agent_id FROM rocpd_track WHERE id = d.track_id)" if timestamps else "d.agent_id"
    return f"""
SELECT coalesce(s.display_name, s.kernel_name, 'kernel ' || d.kernel_id),
       (SELECT type_index FROM rocpd_info_agent WHERE id = {agent}), d.stream_id, {start}, {end}, {owner},
       (SELECT stack_id FROM rocpd_event WHERE id = d.event_id),
       (d.grid_size_x + d.workgroup_size_x - 1) / d.workgroup_size_x,
       (d.grid_size_y + d.workgroup_size_y - 1) / d.workgroup_size_y,
       (d.grid_size_z + d.workgroup_size_z - 1) / d.workgroup_size_z,
       d.workgroup_size_x, d.workgroup_size_y, d.workgroup_size_z, d.group_segment_size, s.arch_vgpr_count
FROM rocpd_kernel_dispatch d LEFT JOIN rocpd_info_kernel_symbol s ON s.id = d.kernel_id"""


def _copy_sql(timestamps: bool) -> str:
    start, end = _times("m", timestamps)
    return f"""
SELECT (SELECT string FROM rocpd_string WHERE id = m.name_id), NULL, m.stream_id, {start}, {end},
       (SELECT pid FROM rocpd_info_process WHERE id = m.pid), (SELECT stack_id FROM rocpd_event WHERE id = m.event_id),
       m.size
FROM rocpd_memory_copy m"""


def _region_sql() -> str:
    return """
SELECT (SELECT string FROM rocpd_string WHERE id = r.name_id), (SELECT pid FROM rocpd_info_process WHERE id = r.pid),
       (SELECT tid FROM rocpd_info_thread WHERE id = r.tid), r."start", r."end",
       e.stack_id, (SELECT string FROM rocpd_string WHERE id = e.category_id)
FROM rocpd_region r LEFT JOIN rocpd_event e ON e.id = r.event_id"""


def _rocpd_agents(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    rows = conn.execute("SELECT type_index, product_name, name FROM rocpd_info_agent WHERE type = 'GPU' "
                        "ORDER BY type_index").fetchall()
    seen: dict[int, dict[str, Any]] = {}
    for index, product, name in rows:
        seen.setdefault(index, {"id": index, "name": product or name, "gcnArchName": name})
    return list(seen.values())


# --------------------------------------------------------------------------------------------- both


def _assemble(path: Path, kernels: pl.DataFrame, copies: pl.DataFrame, launches: pl.DataFrame,
              ranges: pl.DataFrame, props: list[dict], source_format: str) -> TraceTables:
    devices = pl.concat([t for t in (kernels, copies) if t.height], how="diagonal_relaxed") if (
        kernels.height or copies.height) else pl.DataFrame()
    if devices.height == 0:
        raise UserError(f"{path}: no kernel dispatches in this rocprofv3 output (record with `rocprofv3 "
                        "--kernel-trace` or `--sys-trace`)")
    devices = devices.filter(pl.col("start").is_not_null() & pl.col("end").is_not_null() &
                             (pl.col("end") >= pl.col("start")))
    meta = TraceMeta(source_format=source_format, device_properties=props)
    several = devices["pid"].drop_nulls().n_unique() > 1
    if several:  # correlation ids repeat across processes
        unique = (pl.col("pid") * (1 << _CORRELATION_BITS) + pl.col("correlation")).alias("correlation")
        devices, launches = devices.with_columns(unique), launches.with_columns(unique)
        meta.correlation_encoding = "pid * 2**32 + correlationId"
    firsts = [int(t["start"].min()) for t in (devices, launches, ranges) if t.height]
    origin = min(firsts)
    kernel_columns, launch_columns, op_columns = (dict(t.schema) for t in empty_trace_tables())

    def relative(table: pl.DataFrame) -> pl.DataFrame:
        return table.with_columns((pl.col("start") - origin).alias("start_ns"),
                                  (pl.col("end") - pl.col("start")).alias("dur_ns"))

    kernels_out = conform(relative(devices.sort("start", maintain_order=True)), kernel_columns)
    launches_out = conform(relative(launches) if launches.height else launches, launch_columns)
    ops = conform(relative(ranges).with_columns(pl.lit("annotation").alias("cat")) if ranges.height else
                  pl.DataFrame(schema=_RANGE_SCHEMA), op_columns)
    meta.event_count = devices.height + launches.height + ranges.height
    meta.origin_us = origin / 1e3
    return TraceTables(kernels=kernels_out.select(list(kernel_columns)),
                       launches=launches_out.select(list(launch_columns)), ops=ops.select(list(op_columns)),
                       meta=meta)
