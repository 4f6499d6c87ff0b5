"""A run's row of the dataset's `runs` view (docs/dataset.md): its figures from run.json and summary.json, as plain
values that the dataset cache can keep (free of heavy imports: a query whose runs are all cached loads none)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelscope.contracts.run_info import RunInfo
    from kernelscope.contracts.summary import Summary

# runs: column → DuckDB type, in order.
RUNS_SCHEMA: dict[str, str] = {
    "run_id": "VARCHAR", "run_dir": "VARCHAR", "source": "VARCHAR", "date": "TIMESTAMP", "model": "VARCHAR",
    "device": "VARCHAR", "batch": "BIGINT", "prompt_len": "BIGINT", "new_tokens": "BIGINT", "dtype": "VARCHAR",
    "backend": "VARCHAR", "commit": "VARCHAR", "kernelscope": "VARCHAR", "gpus": "BIGINT", "ranks": "BIGINT",
    "kind": "VARCHAR", "kernel_count": "BIGINT", "device_time_us": "DOUBLE", "ttft_ms": "DOUBLE",
    "tpot_ms": "DOUBLE", "e2e_ms": "DOUBLE", "tokens_per_s": "DOUBLE", "repeats": "BIGINT", "tables": "BOOLEAN",
    "prefill_joules_per_token": "DOUBLE", "decode_joules_per_token": "DOUBLE",
}
# The run's columns every data view starts with.
RUN_COLUMNS = ("run_id", "model", "device", "batch", "commit", "date")
# What the row is made from: a cached row is used only by the code that would make the same one.
_ROW_SOURCES = ("load/run_rows.py", "load/run_records.py", "contracts/run_info.py", "contracts/summary.py",
                "contracts/trace_records.py", "contracts/record.py")
_VALUE_TYPES: dict[str, tuple[type, ...]] = {
    "VARCHAR": (str,), "TIMESTAMP": (str,), "BIGINT": (int,), "DOUBLE": (float, int), "BOOLEAN": (bool,),
}


def describe(directory: str, info: RunInfo, summary: Summary | None, has_kernels: bool) -> tuple[Any, ...]:
    """The run's row of `runs` after its run_id (which depends on the other runs of the dataset), in RUNS_SCHEMA's
    order; `date` as ISO 8601 text in UTC (DuckDB casts it), so that the row is plain JSON."""
    workload = info.workload
    plain = info.plain_timings
    files = info.trace.files if info.trace is not None and isinstance(info.trace.files, list) else []
    values = {
        "run_dir": directory, "source": info.source, "date": _date(info.created),
        "model": (workload.model if workload is not None else None) or (summary.model if summary else None),
        "device": info.hardware.name or (summary.device if summary else None),
        "batch": workload.batch_size if workload else None, "prompt_len": workload.prompt_len if workload else None,
        "new_tokens": workload.new_tokens if workload else None, "dtype": workload.dtype if workload else None,
        "backend": workload.backend if workload else None, "commit": info.software.commit,
        "kernelscope": info.software.kernelscope, "gpus": info.hardware.count, "ranks": max(len(files), 1),
        "kind": summary.kind if summary else None, "kernel_count": summary.kernel_count if summary else None,
        "device_time_us": summary.device_time_us if summary else None,
        "ttft_ms": plain.ttft_ms, "tpot_ms": plain.tpot_ms, "e2e_ms": plain.e2e_ms,
        "tokens_per_s": plain.tokens_per_s, "repeats": plain.repeats, "tables": has_kernels,
        "prefill_joules_per_token": info.energy.prefill_joules_per_token if info.energy else None,
        "decode_joules_per_token": info.energy.decode_joules_per_token if info.energy else None,
    }
    return tuple(values[c] for c in list(RUNS_SCHEMA)[1:])


def is_row(value: object) -> bool:
    """Whether `value` (read back from the cache) has the shape of a row `describe` makes: one value per column,
    each null or of its column's type."""
    if not isinstance(value, list) or len(value) != len(RUNS_SCHEMA) - 1:
        return False
    for item, kind in zip(value, list(RUNS_SCHEMA.values())[1:], strict=True):
        if item is None:
            continue
        if isinstance(item, bool) != (kind == "BOOLEAN") or not isinstance(item, _VALUE_TYPES[kind]):
            return False
    return True


def rows_stamp() -> str:
    """What tells the code that makes rows apart from another version of it: the columns and the sources' bytes
    ('' when a source cannot be read: nothing cached is then used)."""
    digest = hashlib.sha256(repr(RUNS_SCHEMA).encode())
    root = Path(__file__).resolve().parents[1]
    for name in _ROW_SOURCES:
        try:
            digest.update((root / name).read_bytes())
        except OSError:
            return ""
    return digest.hexdigest()


def _date(created: str | None) -> str | None:
    """run.json's ISO 8601 time in UTC without zone (null where absent or unreadable)."""
    if not created:
        return None
    try:
        moment = datetime.fromisoformat(created)
    except ValueError:
        return None
    return (moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo else moment).isoformat()
