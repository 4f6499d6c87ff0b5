"""Write a loaded trace as rocprofv3's SQLite database (`--output-format rocpd`), for testing the rocpd reader.

No public rocpd database was found; this writer follows the schema rocprofiler-sdk creates (its rocpd tables SQL,
schema version 3): tables named with the session's uuid (`rocpd_kernel_dispatch_<uuid>`) and views without it,
strings in `rocpd_string`, processes and threads in `rocpd_info_process` / `rocpd_info_thread` (rows referenced by
id), GPUs in `rocpd_info_agent`, kernel names in `rocpd_info_kernel_symbol` (`kernel_name` the code object's
symbol, `display_name` the demangled name), host API calls in `rocpd_region` whose event has the category
`HIP_RUNTIME_API` and the internal correlation id as `stack_id`, as the dispatch's event has. Times are integer ns,
grid sizes in work-items (blocks × workgroup), as rocprofv3 writes them.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import polars as pl

from kernelscope.contracts.trace import TraceTables

UUID = "_00000000_0000_7000_8000_000000000000"
BASE_NS = 63_855_948_165_371
TABLES = {
    "rocpd_string": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "string" TEXT NOT NULL UNIQUE',
    "rocpd_info_node": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "hash" BIGINT, "machine_id" TEXT, "hostname" TEXT',
    "rocpd_info_process": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER, "pid" INTEGER NOT NULL, '
                          '"command" TEXT',
    "rocpd_info_thread": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "ppid" INTEGER, "pid" INTEGER, '
                         '"tid" INTEGER NOT NULL, "name" TEXT',
    "rocpd_info_agent": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, "type" TEXT, '
                        '"absolute_index" INTEGER, "logical_index" INTEGER, "type_index" INTEGER, "uuid" INTEGER, '
                        '"name" TEXT, "model_name" TEXT, "vendor_name" TEXT, "product_name" TEXT, "user_name" TEXT',
    "rocpd_info_kernel_symbol": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, '
                                '"code_object_id" INTEGER, "kernel_name" TEXT, "display_name" TEXT, '
                                '"group_segment_size" INTEGER, "private_segment_size" INTEGER, "sgpr_count" INTEGER, '
                                '"arch_vgpr_count" INTEGER, "accum_vgpr_count" INTEGER',
    "rocpd_event": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "category_id" INTEGER, "stack_id" INTEGER, '
                   '"parent_stack_id" INTEGER, "correlation_id" INTEGER',
    "rocpd_region": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, "tid" INTEGER, '
                    '"start" BIGINT NOT NULL, "end" BIGINT NOT NULL, "name_id" INTEGER NOT NULL, "event_id" INTEGER',
    "rocpd_kernel_dispatch": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, "tid" INTEGER, '
                             '"agent_id" INTEGER, "kernel_id" INTEGER, "dispatch_id" INTEGER, "queue_id" INTEGER, '
                             '"stream_id" INTEGER, "start" BIGINT NOT NULL, "end" BIGINT NOT NULL, '
                             '"private_segment_size" INTEGER, "group_segment_size" INTEGER, '
                             '"workgroup_size_x" INTEGER, "workgroup_size_y" INTEGER, "workgroup_size_z" INTEGER, '
                             '"grid_size_x" INTEGER, "grid_size_y" INTEGER, "grid_size_z" INTEGER, '
                             '"region_name_id" INTEGER, "event_id" INTEGER',
    "rocpd_memory_copy": '"id" INTEGER PRIMARY KEY, "guid" TEXT, "nid" INTEGER, "pid" INTEGER, "tid" INTEGER, '
                         '"start" BIGINT NOT NULL, "end" BIGINT NOT NULL, "name_id" INTEGER NOT NULL, '
                         '"size" INTEGER NOT NULL, "queue_id" INTEGER, "stream_id" INTEGER, "event_id" INTEGER',
}


def write_rocpd(trace: TraceTables, path: Path, gpu_name: str) -> Path:
    """kernels → dispatches (each kernel's name as its symbol's display name), launches → HIP API regions."""
    path = Path(path)
    path.unlink(missing_ok=True)
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    kernels = trace.kernels.filter(pl.col("kind") == "kernel")
    launches = trace.launches.filter(pl.col("correlation").is_not_null())
    pid = int(launches["pid"].mode().first()) if launches.height else 1
    with closing(sqlite3.connect(path)) as db:
        for table, columns in TABLES.items():
            db.execute(f'CREATE TABLE "{table}{UUID}" ({columns})')
            db.execute(f'CREATE VIEW "{table}" AS SELECT * FROM "{table}{UUID}"')
        db.execute(f'CREATE TABLE "rocpd_metadata{UUID}" ("id" INTEGER PRIMARY KEY, "tag" TEXT, "value" TEXT)')
        db.execute(f'INSERT INTO "rocpd_metadata{UUID}" (tag, value) VALUES (\'schema_version\', \'3\')')
        db.execute(f'INSERT INTO "rocpd_info_node{UUID}" VALUES (1, NULL, 0, \'m\', \'host\')')
        db.execute(f'INSERT INTO "rocpd_info_process{UUID}" VALUES (1, NULL, 1, 0, {pid}, \'python\')')
        threads = {tid: i for i, tid in enumerate(sorted(set(launches["tid"].drop_nulls().to_list())), start=1)}
        db.executemany(f'INSERT INTO "rocpd_info_thread{UUID}" VALUES (?, NULL, 1, 0, 1, ?, NULL)',
                       [(i, tid) for tid, i in threads.items()])
        db.execute(f'INSERT INTO "rocpd_info_agent{UUID}" VALUES (1, NULL, 1, 1, \'CPU\', 0, 0, 0, 0, \'cpu\', NULL, '
                   f'\'AMD\', \'CPU\', NULL)')
        db.execute(f'INSERT INTO "rocpd_info_agent{UUID}" VALUES (2, NULL, 1, 1, \'GPU\', 1, 1, 0, 0, \'gfx942\', '
                   f'NULL, \'AMD\', ?, NULL)', (gpu_name,))
        names = sorted(set(kernels["name"].to_list()))
        symbol = {name: i for i, name in enumerate(names, start=1)}
        db.executemany(f'INSERT INTO "rocpd_info_kernel_symbol{UUID}" VALUES (?, NULL, 1, 1, 1, ?, ?, 0, 0, 0, 0, 0)',
                       [(i, f"sym{i}.kd", name) for name, i in symbol.items()])
        category = sid("HIP_RUNTIME_API")
        event = 0
        for r in launches.iter_rows(named=True):
            event += 1
            db.execute(f'INSERT INTO "rocpd_event{UUID}" VALUES (?, NULL, ?, ?, 0, 0)',
                       (event, category, r["correlation"]))
            db.execute(f'INSERT INTO "rocpd_region{UUID}" VALUES (?, NULL, 1, 1, ?, ?, ?, ?, ?)',
                       (event, threads.get(r["tid"]), BASE_NS + r["start_ns"], BASE_NS + r["start_ns"] + r["dur_ns"],
                        sid(r["api"]), event))
        dispatch_category = sid("KERNEL_DISPATCH")
        for number, k in enumerate(kernels.iter_rows(named=True), start=1):
            event += 1
            db.execute(f'INSERT INTO "rocpd_event{UUID}" VALUES (?, NULL, ?, ?, 0, 0)',
                       (event, dispatch_category, k["correlation"]))
            block = [k[f"block_{a}"] or 1 for a in "xyz"]
            grid = [(k[f"grid_{a}"] or 1) * b for a, b in zip("xyz", block, strict=True)]
            db.execute(f'INSERT INTO "rocpd_kernel_dispatch{UUID}" VALUES (?, NULL, 1, 1, NULL, 2, ?, ?, 1, ?, ?, ?, 0, '
                       f'?, ?, ?, ?, ?, ?, ?, NULL, ?)',
                       (number, symbol[k["name"]], number, k["stream"] or 0, BASE_NS + k["start_ns"],
                        BASE_NS + k["start_ns"] + k["dur_ns"], k["shared_memory_bytes"] or 0, *block, *grid, event))
        db.executemany(f'INSERT INTO "rocpd_string{UUID}" VALUES (?, NULL, ?)', [(i, s) for s, i in strings.items()])
        db.commit()
    return path
