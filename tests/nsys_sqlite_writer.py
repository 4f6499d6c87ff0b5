"""Write a loaded trace as an Nsight Systems-shaped SQLite export, for testing the nsys loader.

No real `nsys export` could be produced for the fixtures, so this writer rebuilds one from a real Kineto trace:
tables and columns carry the names, types and nullability of NVIDIA's SQLite export schema (as documented in
the Nsight Systems user guide's schema reference and seen in the `.schema` of a 2024.6 export), strings go
through StringIds, threads are encoded as globalTid, times are integer ns. Variants reproduce the
differences between nsys versions that the loader handles:

- "current": demangledName + shortName + mangledName, NVTX text in `text`, runtime names with their `_vNNNN`
  suffix, ENUM_* tables, TARGET_INFO_CUDA_DEVICE, META_DATA_EXPORT, absolute times (base_ns added);
- "nvtx-textid": as current, NVTX text stored through `textId` → StringIds (`text` null);
- "short-name-only": the kernel table has shortName but no demangledName column;
- "legacy": an older, narrower layout: no mangledName, greenContextId, graphNodeId, srcKind/dstKind, memKind,
  textId, callchainId columns; no ENUM_*, TARGET_INFO_CUDA_DEVICE, META_DATA_EXPORT tables; no API version
  suffixes; TARGET_INFO_GPU with smMajor/smMinor only; times from the session start;
- "2020": as legacy, with the GPU described in TARGET_INFO_CUDA_GPU (name, numMultiprocessors,
  computeCapabilityMajor/Minor, globalMemorySize in MiB…), the table exports of nsys 2020–2021 have (its columns as
  in a public 2021 export) and no TARGET_INFO_GPU.

Besides the trace's own ranges it writes an NVTX mark, a domain definition and a range that never ended, as a
real capture has: the loader must drop all three.
"""

from __future__ import annotations

import re
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from kernelscope.contracts.trace import TraceTables

VARIANTS = ("current", "nvtx-textid", "short-name-only", "legacy", "2020")
ABSOLUTE_BASE_NS = 1_700_000_000_000_000_000
SESSION_BASE_NS = 2_500_000_000
MACHINE_ID = 1  # the bits of globalTid above the pid (48 and up): a host / VM number

# API name → the CUDA version suffix nsys writes (cudaLaunchKernel_v7000); others get _v3020.
API_SUFFIXES = {"cudaLaunchKernel": "_v7000", "cudaLaunchKernelExC": "_v11060", "cudaMemcpyAsync": "_v3020",
                "cudaMemsetAsync": "_v3020", "cudaStreamIsCapturing": "_v10000", "cudaGetErrorString": "_v3020",
                "cudaEventRecordWithFlags": "_v11010"}

MEMCPY_KINDS = ["UNKNOWN", "HTOD", "DTOH", "HTOA", "ATOH", "ATOA", "ATOD", "DTOA", "DTOD", "HTOH", "PTOP"]
MEMCPY_LABELS = ["Unknown", "Host-to-Device", "Device-to-Host", "Host-to-Array", "Array-to-Host", "Array-to-Array",
                 "Array-to-Device", "Device-to-Array", "Device-to-Device", "Host-to-Host", "Peer-to-Peer"]
MEMORY_KINDS = ["PAGEABLE", "PINNED", "DEVICE", "ARRAY", "MANAGED", "DEVICE_STATIC", "MANAGED_STATIC", "UNKNOWN"]
MEMORY_LABELS = ["Pageable", "Pinned", "Device", "Array", "Managed", "Device Static", "Managed Static", "Unknown"]


@dataclass(frozen=True)
class _Layout:
    kernel_names: tuple[str, ...]
    nvtx_text_id: bool
    api_suffix: bool
    modern: bool
    base_ns: int
    cuda_gpu_table: bool = False  # nsys 2020–2021: TARGET_INFO_CUDA_GPU (memory in MiB) instead of TARGET_INFO_GPU


_LAYOUTS = {
    "current": _Layout(("demangledName", "shortName", "mangledName"), False, True, True, ABSOLUTE_BASE_NS),
    "nvtx-textid": _Layout(("demangledName", "shortName", "mangledName"), True, True, True, ABSOLUTE_BASE_NS),
    "short-name-only": _Layout(("shortName", "mangledName"), False, True, True, ABSOLUTE_BASE_NS),
    "legacy": _Layout(("demangledName", "shortName"), False, False, False, SESSION_BASE_NS),
    "2020": _Layout(("demangledName", "shortName"), False, False, False, SESSION_BASE_NS, cuda_gpu_table=True),
}


def global_tid(pid: int, tid: int) -> int:
    """nsys's serialized thread id: machine id in bits 48+, pid in bits 24-47, tid in bits 0-23."""
    return (MACHINE_ID << 48) | ((pid & 0xFFFFFF) << 24) | (tid & 0xFFFFFF)


def short_kernel_name(name: str) -> str:
    """The base function name nsys stores as shortName: no return type, scope, template or arguments."""
    text = name.replace("(anonymous namespace)", "anonymous")
    text = text.removeprefix("void ").strip()
    text = re.split(r"[<(]", text, maxsplit=1)[0].split("::")[-1].strip()
    return text or name


def api_name(api: str, layout: _Layout) -> str:
    if not layout.api_suffix or not api.startswith(("cuda", "cu")):
        return api
    return api + API_SUFFIXES.get(api, "_v3020")


class _Strings:
    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: str | None) -> int | None:
        if value is None:
            return None
        if value not in self.ids:
            self.ids[value] = len(self.ids) + 1
        return self.ids[value]


def _create(db: sqlite3.Connection, table: str, columns: list[tuple[str, str]]) -> None:
    if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
        return  # several processes written into one export share its tables
    db.execute(f"CREATE TABLE {table} ({', '.join(f'{name} {decl}' for name, decl in columns)})")


def _insert(db: sqlite3.Connection, table: str, columns: list[str], rows) -> None:
    names = ", ".join(f'"{c}"' for c in columns)
    db.executemany(f"INSERT INTO {table} ({names}) VALUES ({', '.join('?' * len(columns))})", rows)


def write_nsys_sqlite(trace: TraceTables, path: Path, variant: str = "current") -> Path:
    layout = _LAYOUTS[variant]
    path = Path(path)
    path.unlink(missing_ok=True)
    strings = _Strings()
    base = layout.base_ns
    launches = trace.launches
    process_of = dict(launches.select("correlation", "pid").drop_nulls().iter_rows())
    main_pid = int(launches["pid"].drop_nulls().mode().first())

    with closing(sqlite3.connect(path)) as db:
        _create(db, "StringIds", [("id", "INTEGER NOT NULL PRIMARY KEY"), ("value", "TEXT NOT NULL")])
        _write_kernels(db, trace.kernels.filter(pl.col("kind") == "kernel"), layout, strings, base, process_of,
                       main_pid)
        _write_copies(db, trace.kernels, layout, base, process_of, main_pid)
        _write_runtime(db, launches, layout, strings, base)
        _write_nvtx(db, trace.ops.filter(pl.col("cat") == "annotation"), layout, strings, base, main_pid)
        _write_target_info(db, trace.meta, layout, main_pid)
        _insert(db, "StringIds", ["id", "value"], ((i, v) for v, i in strings.ids.items()))
        db.commit()
    return path


def write_nsys_processes(traces: list[TraceTables], pids: list[int], path: Path) -> Path:
    """Several processes' traces (ranks of one job) as one export of a multi-process capture: each trace's kernels,
    copies, runtime calls and ranges under its own process id (`pids`, one per trace), their correlation ids
    repeating across processes as CUPTI's do, one GPU per process (the trace's own device)."""
    layout = _LAYOUTS["current"]
    path = Path(path)
    path.unlink(missing_ok=True)
    strings = _Strings()
    base = layout.base_ns
    with closing(sqlite3.connect(path)) as db:
        _create(db, "StringIds", [("id", "INTEGER NOT NULL PRIMARY KEY"), ("value", "TEXT NOT NULL")])
        for trace, pid in zip(traces, pids, strict=True):
            launches = trace.launches.with_columns(pl.lit(pid, dtype=pl.Int64).alias("pid"))
            ranges = trace.ops.filter(pl.col("cat") == "annotation").with_columns(pl.lit(pid, dtype=pl.Int64).alias("pid"))
            _write_kernels(db, trace.kernels.filter(pl.col("kind") == "kernel"), layout, strings, base, {}, pid)
            _write_copies(db, trace.kernels, layout, base, {}, pid)
            _write_runtime(db, launches, layout, strings, base)
            _write_nvtx(db, ranges, layout, strings, base, pid)
        _write_target_info(db, traces[0].meta, layout, pids[0])
        _insert(db, "StringIds", ["id", "value"], ((i, v) for v, i in strings.ids.items()))
        db.commit()
    return path


def _write_kernels(db, kernels: pl.DataFrame, layout: _Layout, strings: _Strings, base: int,
                   process_of: dict, main_pid: int) -> None:
    name_columns = [(c, "INTEGER NOT NULL" if c != "mangledName" else "INTEGER") for c in layout.kernel_names]
    modern = [("greenContextId", "INTEGER")] if layout.modern else []
    columns = [("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("deviceId", "INTEGER NOT NULL"),
               ("contextId", "INTEGER NOT NULL"), *modern, ("streamId", "INTEGER NOT NULL"),
               ("correlationId", "INTEGER"), ("globalPid", "INTEGER"), *name_columns,
               ("launchType", "INTEGER"), ("cacheConfig", "INTEGER"), ("registersPerThread", "INTEGER NOT NULL"),
               *((axis, "INTEGER NOT NULL") for axis in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")),
               ("staticSharedMemory", "INTEGER NOT NULL"), ("dynamicSharedMemory", "INTEGER NOT NULL"),
               ("localMemoryPerThread", "INTEGER NOT NULL"), ("localMemoryTotal", "INTEGER NOT NULL"),
               ("gridId", "INTEGER NOT NULL")]
    if layout.modern:
        columns += [("sharedMemoryExecuted", "INTEGER"), ("graphNodeId", "INTEGER"),
                    ("sharedMemoryLimitConfig", "INTEGER")]
    _create(db, "CUPTI_ACTIVITY_KIND_KERNEL", columns)
    names = [c for c, _ in columns]

    def rows():
        for grid_id, k in enumerate(kernels.iter_rows(named=True), start=1):
            shared = k["shared_memory_bytes"] or 0
            static = shared // 4  # any split: the loader must report the sum
            pid = process_of.get(k["correlation"], main_pid)
            values = {
                "start": base + k["start_ns"], "end": base + k["start_ns"] + k["dur_ns"], "deviceId": k["device"],
                "contextId": 1, "greenContextId": None, "streamId": k["stream"], "correlationId": k["correlation"],
                "globalPid": global_tid(pid, 0), "demangledName": strings(k["name"]),
                "shortName": strings(short_kernel_name(k["name"])), "mangledName": None, "launchType": 0,
                "cacheConfig": 0, "registersPerThread": k["registers_per_thread"] or 0,
                "gridX": k["grid_x"], "gridY": k["grid_y"], "gridZ": k["grid_z"],
                "blockX": k["block_x"], "blockY": k["block_y"], "blockZ": k["block_z"],
                "staticSharedMemory": static, "dynamicSharedMemory": shared - static,
                "localMemoryPerThread": 0, "localMemoryTotal": 0, "gridId": grid_id,
                "sharedMemoryExecuted": None, "graphNodeId": None, "sharedMemoryLimitConfig": None,
            }
            yield [values[c] for c in names]

    _insert(db, "CUPTI_ACTIVITY_KIND_KERNEL", names, rows())


def _write_copies(db, kernels: pl.DataFrame, layout: _Layout, base: int, process_of: dict, main_pid: int) -> None:
    common = [("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("deviceId", "INTEGER NOT NULL"),
              ("contextId", "INTEGER NOT NULL"), *([("greenContextId", "INTEGER")] if layout.modern else []),
              ("streamId", "INTEGER NOT NULL"), ("correlationId", "INTEGER"), ("globalPid", "INTEGER")]
    memcpy = [*common, ("bytes", "INTEGER NOT NULL"), ("copyKind", "INTEGER NOT NULL"), ("deprecatedSrcId", "INTEGER")]
    if layout.modern:
        memcpy += [("srcKind", "INTEGER"), ("dstKind", "INTEGER"), ("srcDeviceId", "INTEGER"),
                   ("srcContextId", "INTEGER"), ("dstDeviceId", "INTEGER"), ("dstContextId", "INTEGER"),
                   ("migrationCause", "INTEGER"), ("graphNodeId", "INTEGER"), ("virtualAddress", "INTEGER")]
    memset = [*common, ("value", "INTEGER NOT NULL"), ("bytes", "INTEGER NOT NULL")]
    if layout.modern:
        memset += [("graphNodeId", "INTEGER"), ("memKind", "INTEGER")]
    _create(db, "CUPTI_ACTIVITY_KIND_MEMCPY", memcpy)
    _create(db, "CUPTI_ACTIVITY_KIND_MEMSET", memset)

    def shared(k) -> dict:
        pid = process_of.get(k["correlation"], main_pid)
        return {"start": base + k["start_ns"], "end": base + k["start_ns"] + k["dur_ns"], "deviceId": k["device"],
                "contextId": 1, "greenContextId": None, "streamId": k["stream"], "correlationId": k["correlation"],
                "globalPid": global_tid(pid, 0), "bytes": k["bytes"], "graphNodeId": None}

    copy_rows, set_rows = [], []
    for k in kernels.filter(pl.col("kind") == "memcpy").iter_rows(named=True):
        match = re.fullmatch(r"Memcpy (\w+)(?: \((.+) -> (.+)\))?", k["name"])
        assert match, k["name"]
        values = shared(k) | {
            "copyKind": MEMCPY_KINDS.index(match.group(1).upper()), "deprecatedSrcId": None,
            "srcKind": MEMORY_LABELS.index(match.group(2)), "dstKind": MEMORY_LABELS.index(match.group(3)),
            "srcDeviceId": k["device"], "srcContextId": 1, "dstDeviceId": k["device"], "dstContextId": 1,
            "migrationCause": None, "virtualAddress": None,
        }
        copy_rows.append([values[c] for c, _ in memcpy])
    for k in kernels.filter(pl.col("kind") == "memset").iter_rows(named=True):
        match = re.fullmatch(r"Memset \((.+)\)", k["name"])
        assert match, k["name"]
        values = shared(k) | {"value": 0, "memKind": MEMORY_LABELS.index(match.group(1))}
        set_rows.append([values[c] for c, _ in memset])
    _insert(db, "CUPTI_ACTIVITY_KIND_MEMCPY", [c for c, _ in memcpy], copy_rows)
    _insert(db, "CUPTI_ACTIVITY_KIND_MEMSET", [c for c, _ in memset], set_rows)


def _write_runtime(db, launches: pl.DataFrame, layout: _Layout, strings: _Strings, base: int) -> None:
    columns = [("start", "INTEGER NOT NULL"), ("end", "INTEGER NOT NULL"), ("eventClass", "INTEGER NOT NULL"),
               ("globalTid", "INTEGER"), ("correlationId", "INTEGER"), ("nameId", "INTEGER NOT NULL"),
               ("returnValue", "INTEGER NOT NULL")]
    if layout.modern:
        columns.append(("callchainId", "INTEGER"))
    _create(db, "CUPTI_ACTIVITY_KIND_RUNTIME", columns)
    rows = (
        [base + r["start_ns"], base + r["start_ns"] + r["dur_ns"], 0, global_tid(r["pid"], r["tid"]),
         r["correlation"], strings(api_name(r["api"], layout)), 0, *([None] if layout.modern else [])]
        for r in launches.iter_rows(named=True)
    )
    _insert(db, "CUPTI_ACTIVITY_KIND_RUNTIME", [c for c, _ in columns], rows)


def _write_nvtx(db, ranges: pl.DataFrame, layout: _Layout, strings: _Strings, base: int, main_pid: int) -> None:
    columns = [("start", "INTEGER NOT NULL"), ("end", "INTEGER"), ("eventType", "INTEGER NOT NULL"),
               ("rangeId", "INTEGER"), ("category", "INTEGER"), ("color", "INTEGER"), ("text", "TEXT"),
               ("globalTid", "INTEGER"), ("endGlobalTid", "INTEGER")]
    if layout.modern:
        columns += [("textId", "INTEGER"), ("domainId", "INTEGER"), ("uint64Value", "INTEGER"),
                    ("int64Value", "INTEGER"), ("doubleValue", "REAL"), ("jsonTextId", "INTEGER"),
                    ("jsonText", "TEXT")]
    else:
        columns += [("domainId", "INTEGER")]
    _create(db, "NVTX_EVENTS", columns)
    names = [c for c, _ in columns]

    def row(start: int, end: int | None, event_type: int, text: str, tid: int) -> list:
        by_id = layout.nvtx_text_id
        values = {"start": start, "end": end, "eventType": event_type, "text": None if by_id else text,
                  "textId": strings(text) if by_id else None, "globalTid": tid, "domainId": 0}
        return [values.get(c) for c in names]

    first = base + int(ranges["start_ns"].min() if ranges.height else 0)
    main_thread = global_tid(main_pid, main_pid)
    rows = [
        row(first - 1000, None, 75, "kernelscope", main_thread),  # a domain definition
        row(first + 10, None, 34, "ks.mark", main_thread),  # a mark: a point, not a range
        row(first + 20, None, 59, "ks.phase:decode:999", main_thread),  # pushed, never popped
    ]
    rows += [
        row(base + r["start_ns"], base + r["start_ns"] + r["dur_ns"], 59, r["name"], global_tid(r["pid"], r["tid"]))
        for r in ranges.iter_rows(named=True)
    ]
    _insert(db, "NVTX_EVENTS", names, rows)


def _write_cuda_gpu(db, props: dict, main_pid: int) -> None:
    columns = [("vmId", "INTEGER NOT NULL"), ("name", "TEXT NOT NULL"), ("pciBusId", "TEXT"),
               ("globalMemoryBandwidth", "INTEGER NOT NULL"), ("globalMemorySize", "INTEGER NOT NULL"),
               ("l2CacheSize", "INTEGER NOT NULL"), ("numThreadsPerWarp", "INTEGER NOT NULL"),
               ("numMultiprocessors", "INTEGER NOT NULL"), ("maxThreadsPerBlock", "INTEGER NOT NULL"),
               ("computeCapabilityMajor", "INTEGER NOT NULL"), ("computeCapabilityMinor", "INTEGER NOT NULL"),
               ("deviceId", "INTEGER NOT NULL"), ("pid", "INTEGER")]
    _create(db, "TARGET_INFO_CUDA_GPU", columns)
    values = [0, props.get("name"), "0000:19:00.0", 0, (props.get("totalGlobalMem") or 0) >> 20,
              props.get("l2CacheSize") or 0, props.get("warpSize") or 32, props.get("numSms") or 0,
              props.get("maxThreadsPerBlock") or 1024, props.get("computeMajor") or 0, props.get("computeMinor") or 0,
              props.get("id", 0), main_pid]
    _insert(db, "TARGET_INFO_CUDA_GPU", [c for c, _ in columns], [values])


def _write_target_info(db, meta, layout: _Layout, main_pid: int) -> None:
    props = (meta.device_properties or [{}])[0]
    if layout.cuda_gpu_table:
        _write_cuda_gpu(db, props, main_pid)
        return
    gpu = [("vmId", "INTEGER NOT NULL"), ("id", "INTEGER NOT NULL"), ("name", "TEXT"), ("busLocation", "TEXT"),
           ("l2CacheSize", "INTEGER"), ("totalMemory", "INTEGER"), ("smCount", "INTEGER"), ("uuid", "TEXT"),
           ("cuDevice", "INTEGER"), ("maxRegistersPerBlock", "INTEGER"), ("maxShmemPerBlock", "INTEGER"),
           ("threadsPerWarp", "INTEGER"), ("maxThreadsPerBlock", "INTEGER")]
    gpu += [("computeMajor", "INTEGER"), ("computeMinor", "INTEGER")] if layout.modern else []
    gpu += [("smMajor", "INTEGER"), ("smMinor", "INTEGER")]
    _create(db, "TARGET_INFO_GPU", gpu)
    values = {"vmId": 0, "id": 0, "name": props.get("name"), "busLocation": "0000:19:00.0", "l2CacheSize": None,
              "totalMemory": props.get("totalGlobalMem"), "smCount": props.get("numSms"),
              "uuid": "GPU-00000000-0000-0000-0000-000000000000", "cuDevice": props.get("id", 0),
              "maxRegistersPerBlock": props.get("regsPerBlock"), "maxShmemPerBlock": props.get("sharedMemPerBlock"),
              "threadsPerWarp": props.get("warpSize"), "maxThreadsPerBlock": props.get("maxThreadsPerBlock"),
              "computeMajor": props.get("computeMajor"), "computeMinor": props.get("computeMinor"),
              "smMajor": props.get("computeMajor"), "smMinor": props.get("computeMinor")}
    _insert(db, "TARGET_INFO_GPU", [c for c, _ in gpu], [[values[c] for c, _ in gpu]])
    _create(db, "TARGET_INFO_SESSION_START_TIME",
            [("utcEpochNs", "INTEGER"), ("utcTime", "TEXT"), ("localTime", "TEXT")])
    _insert(db, "TARGET_INFO_SESSION_START_TIME", ["utcEpochNs", "utcTime", "localTime"],
            [[ABSOLUTE_BASE_NS, "2023-11-14T22:13:20.000Z", "2023-11-14T22:13:20.000"]])
    if not layout.modern:
        return
    _create(db, "TARGET_INFO_CUDA_DEVICE", [("gpuId", "INTEGER"), ("cudaId", "INTEGER NOT NULL"),
                                            ("pid", "INTEGER NOT NULL"), ("uuid", "TEXT"),
                                            ("numMultiprocessors", "INTEGER")])
    _insert(db, "TARGET_INFO_CUDA_DEVICE", ["gpuId", "cudaId", "pid", "uuid", "numMultiprocessors"],
            [[0, props.get("id", 0), main_pid, values["uuid"], props.get("numSms")]])
    enum = [("id", "INTEGER NOT NULL PRIMARY KEY"), ("name", "TEXT"), ("label", "TEXT")]
    _create(db, "ENUM_CUDA_MEMCPY_OPER", enum)
    _insert(db, "ENUM_CUDA_MEMCPY_OPER", ["id", "name", "label"],
            [[i, f"CUDA_MEMCPY_KIND_{k}", label] for i, (k, label) in enumerate(zip(MEMCPY_KINDS, MEMCPY_LABELS, strict=True))])
    _create(db, "ENUM_CUDA_MEM_KIND", enum)
    _insert(db, "ENUM_CUDA_MEM_KIND", ["id", "name", "label"],
            [[i, f"CUDA_MEMOPR_MEMORY_KIND_{k}", label] for i, (k, label) in enumerate(zip(MEMORY_KINDS, MEMORY_LABELS, strict=True))])
    _create(db, "ENUM_NSYS_EVENT_TYPE", enum)
    _insert(db, "ENUM_NSYS_EVENT_TYPE", ["id", "name", "label"],
            [[34, "NvtxMark", "NvtxMark"], [59, "NvtxPushPopRange", "NvtxPushPopRange"],
             [60, "NvtxStartEndRange", "NvtxStartEndRange"]])
    _create(db, "META_DATA_EXPORT", [("name", "TEXT NOT NULL"), ("value", "TEXT")])
    _insert(db, "META_DATA_EXPORT", ["name", "value"],
            [["EXPORT_SCHEMA_VERSION", "3.16.1"], ["EXPORT_PRODUCT_VERSION", "2024.6.2.225"],
             ["EXPORT_PRODUCT_NAME", "kernelscope test writer (synthetic)"]])
