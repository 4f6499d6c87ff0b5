"""summary.json as a typed record: the key figures of a run (docs/run-format.md documents every key)."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelscope.contracts.energy_split import EnergySplit
from kernelscope.contracts.record import Record
from kernelscope.contracts.trace_records import GraphReplays

# The version of summary.json's shape this kernelscope writes and reads at most (a file without the key is one
# written before it had one: the same shape, version 1).
SCHEMA_VERSION = 1


class PhaseSummary(msgspec.Struct, kw_only=True):
    """Per phase. On GPU runs (Summary.kind "gpu") the device time; on CPU-only runs the CPU ops' self time in
    cpu_time_us / cpu_time_per_step_us, the device keys then null."""

    kernel_count: int
    device_time_us: float | None
    steps: int | None = None
    device_time_per_step_us: float | None = None
    kernels_per_step: float | None = None
    cpu_time_us: float | msgspec.UnsetType = msgspec.UNSET
    cpu_time_per_step_us: float | None | msgspec.UnsetType = msgspec.UNSET


class CriticalPathPhase(msgspec.Struct, kw_only=True):
    """Per phase, the critical path of its steps (docs/critical-path.md): how many, their wall time and the path's
    length (ns, summed over the steps; the path tiles each step, so the two agree), the mean step, each class's
    share of the path (compute, communication, wait, launch, host) and, on runs of several ranks, how many steps
    each rank decided (held most of the path of)."""

    steps: int
    step_ns: int
    path_ns: int
    mean_step_ns: float
    shares: dict[str, float]
    deciding_ranks: dict[str, int] | msgspec.UnsetType = msgspec.UNSET


class KeyTimings(msgspec.Struct, kw_only=True):
    """The plain (unprofiled) medians of a profile run; null on imports."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens_per_s: float | None = None
    e2e_ms: float | None = None


class StructureSummary(msgspec.Struct, kw_only=True):
    """The run's structure: forward passes, prefill and decode steps, decoder layers (null where unknown), where it
    came from (`annotations`: the trace's own markers; `inferred`: its regularities; `mixed`), and per level left
    unknown the reason."""

    source: str = "annotations"
    forward_passes: int | None = None
    prefill_steps: int | None = None
    decode_steps: int | None = None
    layers: int | None = None
    training_steps: int | None = None
    unknown: dict[str, str] = msgspec.field(default_factory=dict)
class MetricNoise(msgspec.Struct, kw_only=True):
    """How much one metric varied over its repeats (summary.json `noise.metrics`)."""

    statistic: str  # median or mean: how the value is made from the repeats
    value: float
    repeats: int
    min: float
    max: float
    cv_pct: float | None  # sample standard deviation over the mean, in percent
    allowance_pct: float | None  # the change this run's own noise can explain (docs/compare.md, "Noise")
    noisy: bool  # cv_pct above the noisy limit


class NoiseSummary(msgspec.Struct, kw_only=True):
    """Whether a run is noisy, and why (summary.json `noise`)."""

    noisy: bool
    noisy_cv_pct: float  # the limit a metric's coefficient of variation is held to
    metrics: dict[str, MetricNoise] = msgspec.field(default_factory=dict)


class EnergySummary(msgspec.Struct, kw_only=True):
    """summary.json `energy` (profile --energy; run.json `energy` has every stage and phase): joules per prompt token
    of prefill and per new token of decode, from the board's energy counter, and the check of the power samples
    against it over the full generations."""

    prefill_joules_per_token: float | None = None
    decode_joules_per_token: float | None = None
    counter_joules: float
    per_token_check: float | None = None  # per-token values × tokens ÷ counter
    agreement: float | None = None  # power samples integrated ÷ counter
    counter_update_ms: float | None = None
    split: EnergySplit | msgspec.UnsetType = msgspec.UNSET  # as run.json's energy.split


class IntegritySummary(msgspec.Struct, kw_only=True):
    """The integrity audit of every file the run was read from, added up (summary.json `integrity`; each count is
    run.json's per-file `audit`, docs/run-format.md). A count is null where no file's format has that check."""

    files: int
    timeline: bool  # false: kernel summaries only, no check of times applies
    device_events: int
    stream_overlaps: int | None = None
    stream_overlap_ns: int | None = None
    stream_overlaps_pdl: int | None = None
    outside_window: int | None = None
    launches_without_kernel: int | None = None
    kernels_without_launch: int | None = None
    flows: int | None = None
    flows_unpaired: int | None = None
    clock_jumps: int | None = None
    clock_jump_max_ns: int | None = None
    devices_named: int | None = None
    devices_silent: int | None = None
    unclosed_files: int = 0
    trailing_bytes: int = 0
    dropped_events: int = 0
    counted: list[str] = msgspec.field(default_factory=list)  # the checks that found something, in this order


class Summary(Record, kw_only=True):
    """kernel_count counts launches (a summary row stands for `instances` of them); kernel_rows, the rows of
    kernels.parquet, is written only where the two differ. kind: "gpu" when the trace holds device activity
    (kernels, copies, sets), "cpu" when CPU ops stand in for kernels; device_time_us is device time only and
    cpu_time_us the CPU ops' self time (CPU runs). Coverage values are shares of that run's time."""

    source: str | None = None
    model: str | None = None
    device: str | None = None
    kind: str = "gpu"
    kernel_count: int = 0
    kernel_rows: int | msgspec.UnsetType = msgspec.UNSET
    device_time_us: float = 0.0
    cpu_time_us: float | None = None
    attribution_coverage: float = 0.0
    phase_coverage: float = 0.0
    module_coverage: float = 0.0
    op_coverage: float = 0.0
    cost_coverage: float | None = None  # null: costs not computed (older runs)
    # Share of device time costed from each source (contracts.tables.COST_SOURCES); their sum is cost_coverage.
    cost_coverage_by_source: dict[str, float] | None = None
    catalog_coverage: float | None = None
    # Imports costed from a model config: where it came from ("--model-config", or "catalog": the config of the
    # catalog's model recognised from the trace, named by `recognised_model`; run.json model_recognition says why).
    model_config_source: str | msgspec.UnsetType = msgspec.UNSET
    recognised_model: str | msgspec.UnsetType = msgspec.UNSET
    timings: KeyTimings = msgspec.field(default_factory=KeyTimings)
    phases: dict[str, PhaseSummary] = msgspec.field(default_factory=dict)
    graph_replays: GraphReplays | msgspec.UnsetType = msgspec.UNSET
    structure: StructureSummary | msgspec.UnsetType = msgspec.UNSET
    critical_path: dict[str, CriticalPathPhase] | msgspec.UnsetType = msgspec.UNSET
    noise: NoiseSummary | msgspec.UnsetType = msgspec.UNSET
    integrity: IntegritySummary | msgspec.UnsetType = msgspec.UNSET
    energy: EnergySummary | msgspec.UnsetType = msgspec.UNSET
    schema_version: int = SCHEMA_VERSION

    @classmethod
    def from_json(cls, data: bytes | str) -> Summary:
        return msgspec.json.decode(data, type=cls)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)
