"""The metadata of an Nsight Systems SQLite export: its version (META_DATA_EXPORT, EXPORT_META_DATA), when the
session started, and its GPUs with Kineto's deviceProperties keys, so that an import fills run.json's `hardware`
as a Kineto trace's does (docs/nsys.md). The GPU tables changed over releases: TARGET_INFO_GPU (with
TARGET_INFO_CUDA_DEVICE) in current exports, TARGET_INFO_CUDA_GPU in those of nsys 2020–2021."""

from __future__ import annotations

import sqlite3
from typing import Any

import polars as pl

from kernelscope.contracts.trace import TraceMeta
from kernelscope.load.nsys_schema import Schema, quote

EXPORT_META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")

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


def metadata(conn: sqlite3.Connection, schema: Schema, devices: pl.DataFrame) -> TraceMeta:
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


def _old_device_properties(conn: sqlite3.Connection, schema: Schema, devices: pl.DataFrame) -> list[dict[str, Any]]:
    """TARGET_INFO_CUDA_GPU → one dict per CUDA device, those that ran the kernels first."""
    present = {key: column for key, column in _OLD_DEVICE_PROPERTIES.items() if schema.column(_OLD_GPU_TABLE, column)}
    if "id" not in present:
        return []
    memory = schema.column(_OLD_GPU_TABLE, "globalMemorySize")
    select = [*(quote(c) for c in present.values()), quote(memory) if memory else "NULL"]
    by_device: dict[int, dict[str, Any]] = {}
    for *values, mib in conn.execute(f"SELECT {', '.join(select)} FROM {_OLD_GPU_TABLE}"):
        props = {key: value for key, value in zip(present, values, strict=True) if value is not None}
        if isinstance(mib, int) and mib > 0:
            props["totalGlobalMem"] = mib * _MIB
        by_device.setdefault(props["id"], props)
    used = set(devices["device"].drop_nulls().to_list())
    return [by_device[d] for d in sorted(by_device, key=lambda d: (d not in used, d))]


def _device_properties(conn: sqlite3.Connection, schema: Schema, devices: pl.DataFrame) -> list[dict[str, Any]]:
    """One dict per GPU with Kineto's deviceProperties keys; GPUs that ran the kernels first, by CUDA id."""
    gpu = "TARGET_INFO_GPU"
    if not schema.column(gpu, "id"):
        return _old_device_properties(conn, schema, devices)
    wanted = {key: schema.column(gpu, *columns) for key, columns in _DEVICE_PROPERTIES.items()}
    present = {key: column for key, column in wanted.items() if column}
    cu_device = schema.column(gpu, "cuDevice")
    select = ["id", *(quote(c) for c in present.values()), quote(cu_device) if cu_device else "NULL"]
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
        query = f"SELECT gpuId, cudaId, {quote(pid) if pid else 'NULL'}, {quote(count) if count else 'NULL'}"
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
