"""What an Nsight Systems SQLite export holds, read with the standard library's sqlite3 alone (no kernelscope code):
the export as the events a Kineto trace would hold, so that tests/trace_reference.py computes the same reference
for it as for a Kineto file; its processes; and the framework op open at each kernel's launch among the ranges
`torch.autograd.profiler.emit_nvtx` pushes.

As docs/nsys.md documents the export: a process id is bits 24–47 of globalPid / globalTid, a thread id bits 0–23;
times are integer ns (here counted from the export's earliest kernel, copy, set, API call or range, then written in
µs as Kineto writes them); a kernel is named by demangledName, else shortName, else a `name` column (its text or an
id), else mangledName; a copy by its direction and memory kinds (`Memcpy HtoD (Pageable -> Device)`), from the
export's ENUM tables or, without them, nsys's numbering as the tables of newer exports give it (written out below);
an API call by its name without the `_v<digits>` suffix; correlation ids are made unique per process as
pid * 2**32 + correlationId when device work of several processes is present."""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from pathlib import Path

SQLITE_MAGIC = b"SQLite format 3\x00"
PID_SHIFT, ID_MASK = 24, (1 << 24) - 1
DEVICE_TABLES = {"CUPTI_ACTIVITY_KIND_KERNEL": "kernel", "CUPTI_ACTIVITY_KIND_MEMCPY": "gpu_memcpy",
                 "CUPTI_ACTIVITY_KIND_MEMSET": "gpu_memset"}
API_TABLES = {"CUPTI_ACTIVITY_KIND_RUNTIME": "cuda_runtime", "CUPTI_ACTIVITY_KIND_DRIVER": "cuda_driver"}
# ENUM_CUDA_MEMCPY_OPER and ENUM_CUDA_MEM_KIND as exports of nsys 2022.4 to 2026.1 hold them (id → name, label).
COPY_KINDS = {0: "UNKNOWN", 1: "HTOD", 2: "DTOH", 3: "HTOA", 4: "ATOH", 5: "ATOA", 6: "ATOD", 7: "DTOA", 8: "DTOD",
              9: "HTOH", 10: "PTOP", 11: "UVM_HTOD", 12: "UVM_DTOH", 13: "UVM_DTOD"}
COPY_LABELS = {0: "Unknown", 10: "Peer-to-Peer", 11: "Unified Host-to-Device", 12: "Unified Device-to-Host",
               13: "Unified Device-to-Device"}
MEMORY_KINDS = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
                6: "Managed Static", 7: "Unknown"}
# A range emit_nvtx pushes: `aten::mm, seq = 12, op_id = 34, sizes = […]`, or an op's bare name (`aten::empty`).
OP_MARKED = re.compile(r", (?:seq|op_id) = \d")
OP_BARE = re.compile(r"^\w+::\w+$")


def is_sqlite(path: Path) -> bool:
    with Path(path).open("rb") as f:
        return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]


def _col(columns: list[str], name: str) -> str:
    return f'"{name}"' if name in columns else "NULL"


def _pid(global_id: int | None) -> int | None:
    return None if global_id is None else (global_id >> PID_SHIFT) & ID_MASK


def _copy_names(db: sqlite3.Connection, tables: set[str]) -> tuple[dict[int, str], dict[int, str]]:
    """Copy direction (Kineto's spelling: HtoD) and memory-kind labels by id."""
    if "ENUM_CUDA_MEMCPY_OPER" in tables:
        rows = db.execute("SELECT id, name, label FROM ENUM_CUDA_MEMCPY_OPER").fetchall()
    else:
        rows = [(i, f"CUDA_MEMCPY_KIND_{n}", COPY_LABELS.get(i, "")) for i, n in COPY_KINDS.items()]
    directions = {}
    for i, name, label in rows:
        match = re.fullmatch(r"(?:CUDA_MEMCPY_KIND_)?([A-Z])TO([A-Z])", name or "")
        directions[i] = f"{match[1]}to{match[2]}" if match else (label or name)
    kinds = (dict(db.execute("SELECT id, label FROM ENUM_CUDA_MEM_KIND").fetchall())
             if "ENUM_CUDA_MEM_KIND" in tables else MEMORY_KINDS)
    return directions, kinds


def nsys_document(path: Path) -> dict:
    """The export as a Kineto trace document: {"traceEvents": [...], "deviceProperties": [{"id": cuda id}, ...]}."""
    with _connect(path) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        strings = dict(db.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        directions, kinds = _copy_names(db, tables)
        rows: list[tuple[str, str, int | None, int | None, int | None, dict, int | None]] = []
        for table, cat in DEVICE_TABLES.items():
            if table not in tables:
                continue
            c = _columns(db, table)
            sql = (f'SELECT start, "end", deviceId, streamId, correlationId, {_col(c, "globalPid")}, '
                   f'{_col(c, "demangledName")}, {_col(c, "shortName")}, {_col(c, "name")}, {_col(c, "mangledName")}, '
                   f'{_col(c, "copyKind")}, {_col(c, "srcKind")}, {_col(c, "dstKind")}, {_col(c, "memKind")} '
                   f'FROM "{table}"')
            for start, end, device, stream, corr, gpid, dem, short, plain, mangled, copy, src, dst, mem in \
                    db.execute(sql):
                if cat == "kernel":
                    text = plain if isinstance(plain, str) else strings.get(plain)
                    name = strings.get(dem) or strings.get(short) or text or strings.get(mangled) or ""
                elif cat == "gpu_memcpy":
                    way = directions.get(copy)
                    name = (f"Memcpy {copy}" if way is None else f"Memcpy {way} ({kinds[src]} -> {kinds[dst]})"
                            if src in kinds and dst in kinds else f"Memcpy {way}")
                else:
                    name = f"Memset ({kinds[mem]})" if mem in kinds else "Memset"
                rows.append((cat, name, start, end, _pid(gpid), {"device": device, "stream": stream}, corr))
        several = len({r[4] for r in rows if r[4] is not None}) > 1  # device work of several processes
        for table, cat in API_TABLES.items():
            if table in tables:
                for start, end, gtid, corr, name_id in db.execute(
                        f'SELECT start, "end", globalTid, correlationId, nameId FROM "{table}"'):
                    name = re.sub(r"_v\d+$", "", strings.get(name_id) or "")
                    rows.append((cat, name, start, end, _pid(gtid), {"tid": None if gtid is None else gtid & ID_MASK},
                                 corr))
        ranges = _ranges(db, tables, strings)
        rows += [("user_annotation", text, start, end, _pid(gtid), {"tid": gtid & ID_MASK}, None)
                 for start, end, gtid, text in ranges]
        properties = _device_properties(db, tables, {r[5].get("device") for r in rows if r[0] in DEVICE_TABLES.values()})
    origin = min((r[2] for r in rows if r[2] is not None), default=0)
    events = []
    for cat, name, start, end, pid, where, corr in rows:
        if start is None:
            continue
        event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "ts": (start - origin) / 1000,
                 "dur": None if end is None else (end - start) / 1000, "args": {}}
        if "tid" in where:
            event["tid"] = where["tid"]
        else:
            event["args"].update(where)
        if corr is not None:
            event["args"]["correlation"] = pid * 2**32 + corr if several and pid is not None else corr
        events.append(event)
    return {"traceEvents": events, "deviceProperties": [{"id": d} for d in properties]}


def _ranges(db: sqlite3.Connection, tables: set[str], strings: dict) -> list[tuple[int, int, int, str]]:
    """NVTX push/pop (59) and start/end (60) ranges that have an end and a text: (start, end, globalTid, text)."""
    if "NVTX_EVENTS" not in tables:
        return []
    c = _columns(db, "NVTX_EVENTS")
    if "end" not in c:
        return []
    kind = " AND eventType IN (59, 60)" if "eventType" in c else ""
    out = []
    for start, end, gtid, text, text_id in db.execute(
            f'SELECT start, "end", globalTid, {_col(c, "text")}, {_col(c, "textId")} FROM NVTX_EVENTS '
            f'WHERE "end" IS NOT NULL{kind}'):
        text = text if text is not None else strings.get(text_id)
        if text is not None:
            out.append((start, end, gtid, text))
    return out


def _device_properties(db: sqlite3.Connection, tables: set[str], active: set) -> list[int]:
    """The CUDA ids of the GPUs the export describes: each TARGET_INFO_GPU row's GPU once, by the CUDA id
    TARGET_INFO_CUDA_DEVICE gives it (one that ran device work where it lists several), else its cuDevice, else
    its id; in exports of 2020–2021, each TARGET_INFO_CUDA_GPU deviceId once."""
    if "TARGET_INFO_GPU" in tables and "id" in _columns(db, "TARGET_INFO_GPU"):
        cuda: dict[int, list[int]] = {}
        if "TARGET_INFO_CUDA_DEVICE" in tables and {"gpuId", "cudaId"} <= set(_columns(db, "TARGET_INFO_CUDA_DEVICE")):
            for gpu, cuda_id in db.execute("SELECT gpuId, cudaId FROM TARGET_INFO_CUDA_DEVICE"):
                cuda.setdefault(gpu, []).append(cuda_id)
        cu = _col(_columns(db, "TARGET_INFO_GPU"), "cuDevice")
        ids: dict[int, int] = {}
        for gpu, cu_device in db.execute(f"SELECT id, {cu} FROM TARGET_INFO_GPU"):
            if gpu in ids:
                continue
            listed = cuda.get(gpu, [])
            ids[gpu] = next((d for d in listed if d in active), listed[0] if listed else
                            cu_device if cu_device is not None else gpu)
        return list(ids.values())
    if "TARGET_INFO_CUDA_GPU" in tables and "deviceId" in _columns(db, "TARGET_INFO_CUDA_GPU"):
        return list(dict.fromkeys(d for (d,) in db.execute("SELECT deviceId FROM TARGET_INFO_CUDA_GPU")))
    return []


def processes(path: Path) -> dict[int, Counter]:
    """Per process that ran device work: its kernels, copies and sets by kind, and its API calls."""
    out: dict[int, Counter] = {}
    events = nsys_document(path)["traceEvents"]
    for event in events:
        if event["cat"] in DEVICE_TABLES.values():
            out.setdefault(event["pid"], Counter())[event["cat"]] += 1
    for event in events:
        if event["cat"] in API_TABLES.values() and event["pid"] in out:
            out[event["pid"]]["api_calls"] += 1
    return out


def op_ranges(path: Path) -> Counter:
    """For each kernel: the framework op emit_nvtx's ranges say it belongs to, the innermost op range open on the
    launching thread at its API call (start <= call < end), named without `, seq = …`; counted by op (None: no op
    range open, or no call found). An op range is one whose text carries `, seq = N` or `, op_id = N`, or, where the
    export has such ranges, a bare `namespace::name`."""
    with _connect(path) as db:
        tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        strings = dict(db.execute("SELECT id, value FROM StringIds"))
        ranges = _ranges(db, tables, strings)
        if not any(OP_MARKED.search(text) for *_, text in ranges):
            return Counter()
        ops: dict[int, list[tuple[int, int, str]]] = {}
        for start, end, gtid, text in ranges:
            if OP_MARKED.search(text) or OP_BARE.match(text):
                ops.setdefault(gtid, []).append((start, end, text.split(", ")[0] if OP_MARKED.search(text) else text))
        calls = {}
        for table in API_TABLES:
            if table in tables:
                for gtid, start, corr in db.execute(f'SELECT globalTid, start, correlationId FROM "{table}"'):
                    calls.setdefault((_pid(gtid), corr), []).append((gtid, start))
        counts: Counter = Counter()
        for corr, gpid in db.execute("SELECT correlationId, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL"):
            found = calls.get((_pid(gpid), corr), [])
            op = None
            if len(found) == 1:
                gtid, t = found[0]
                open_ = [(end - start, -start, name) for start, end, name in ops.get(gtid, []) if start <= t < end]
                op = min(open_)[2] if open_ else None
            counts[op] += 1
    return counts
