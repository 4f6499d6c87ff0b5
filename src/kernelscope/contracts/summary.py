"""summary.json as a typed record: the key figures of a run (docs/run-format.md documents every key)."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelscope.contracts.run_info import GraphReplays


class PhaseSummary(msgspec.Struct, kw_only=True):
    kernel_count: int
    device_time_us: float
    steps: int | None = None
    device_time_per_step_us: float | None = None
    kernels_per_step: float | None = None


class KeyTimings(msgspec.Struct, kw_only=True):
    """The plain (unprofiled) medians of a profile run; null on imports."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens_per_s: float | None = None
    e2e_ms: float | None = None


class Summary(msgspec.Struct, kw_only=True):
    """kernel_count counts launches (a summary row stands for `instances` of them); kernel_rows, the rows of
    kernels.parquet, is written only where the two differ. Coverage values are shares of device time."""

    source: str | None = None
    model: str | None = None
    device: str | None = None
    kernel_count: int = 0
    kernel_rows: int | msgspec.UnsetType = msgspec.UNSET
    device_time_us: float = 0.0
    attribution_coverage: float = 0.0
    phase_coverage: float = 0.0
    module_coverage: float = 0.0
    op_coverage: float = 0.0
    cost_coverage: float | None = None  # null: costs not computed (older runs)
    catalog_coverage: float | None = None
    timings: KeyTimings = msgspec.field(default_factory=KeyTimings)
    phases: dict[str, PhaseSummary] = msgspec.field(default_factory=dict)
    graph_replays: GraphReplays | msgspec.UnsetType = msgspec.UNSET

    @classmethod
    def from_json(cls, data: bytes | str) -> Summary:
        return msgspec.json.decode(data, type=cls)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)
