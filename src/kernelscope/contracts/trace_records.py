"""What run.json records of the files a run was read from (`TraceInfo`: each file's format, device properties,
clock and integrity audit), of its Nsight Compute measurements (`NcuInfo`) and of its CUDA-graph replays
(`GraphReplays`). docs/run-format.md documents every key."""

from __future__ import annotations

from typing import Any

import msgspec

from kernelscope.contracts.energy_split import EnergySplit
from kernelscope.contracts.record import Record


class TraceAudit(Record, kw_only=True):
    """The integrity audit of one recorded file (analyze/integrity.py; docs/run-format.md, "Integrity audit"): what
    in it is not whole or not consistent, each counted; nothing it counts is left out of the tables or counted twice
    without saying so. None: the check does not apply to the file's format (kernel summaries have no timeline, nsys
    exports no flow arrows, a file that marks no window has nothing to be outside of)."""

    timeline: bool = True  # False: kernel summaries (nsys stats), where no check of times applies
    device_events: int = 0  # kernels, copies and sets the file records
    # Device events that start before an earlier one on their (device, stream) has ended, and the time so counted
    # twice in summed durations (sum of durations minus the union of the intervals, per stream).
    stream_overlaps: int | None = None
    stream_overlap_ns: int | None = None
    # Of those, launched through a call that can ask for programmatic dependent launch (cudaLaunchKernelExC,
    # cuLaunchKernelEx) or a graph launch: consistent with PDL, where a kernel starts before the previous ends.
    stream_overlaps_pdl: int | None = None
    window_us: tuple[float, float] | None = None  # the recorded window as the file marks it (µs, its clock)
    outside_window: int | None = None  # device events, calls and ops starting or ending outside that window
    launches_without_kernel: int | None = None  # calls that start device work whose correlation id has no device event
    kernels_without_launch: int | None = None  # device events whose correlation id no runtime call has, or none
    flows: int | None = None  # flow events of the file
    flows_unpaired: int | None = None  # flow ids with a start and no end, or an end and no start
    clock_jumps: int | None = None  # device events that start before the call that launched them
    clock_jump_max_ns: int | None = None  # the largest such lead
    devices_named: int | None = None  # devices the file describes (deviceProperties, nsys's GPU table)
    devices_silent: int | None = None  # of those, devices with no event
    unclosed: bool = False  # the event array has no closing bracket: the file may have been cut
    trailing_bytes: int = 0  # bytes after its last complete event, not read
    dropped_events: int = 0  # events the reader left out as unusable (reasons in the file's dropped_events)


class TraceFile(Record, kw_only=True, omit_defaults=True):
    """One imported trace file (a rank)."""

    file: str
    format: str | msgspec.UnsetType = msgspec.UNSET
    event_count: int | None = None
    json_bytes: int | None = None
    schema_version: Any = None
    device_properties: list[dict[str, Any]] = msgspec.field(default_factory=list)
    base_time_ns: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    trace_id: Any = None
    distributed_info: Any = None
    origin_us: float | None = None
    # Device activity the file holds that kernelscope does not read (category → events).
    unread_device_activity: dict[str, int] | msgspec.UnsetType = msgspec.UNSET
    dropped_events: dict[str, int] | msgspec.UnsetType = msgspec.UNSET  # reason → events left out or repaired
    # Calls that start device work in a file with no device activity: the device was not recorded.
    unrecorded_device_calls: int | msgspec.UnsetType = msgspec.UNSET
    # nsys stats kernel summaries (docs/nsys.md): which report, its rows and launches, where phases came from.
    report: str | msgspec.UnsetType = msgspec.UNSET
    rows: int | msgspec.UnsetType = msgspec.UNSET
    launches: int | msgspec.UnsetType = msgspec.UNSET
    phase_from: str | msgspec.UnsetType = msgspec.UNSET
    audit: TraceAudit | msgspec.UnsetType = msgspec.UNSET  # the file's integrity audit (runs made since it exists)


class TraceInfo(Record, kw_only=True):
    """The recorded trace: for a profile run its settings and size; for an import every file read."""

    format: str | msgspec.UnsetType = msgspec.UNSET
    event_count: int | None = None
    schema_version: Any = None
    cuda_runtime_version: Any = None
    cuda_driver_version: Any = None
    cupti_version: Any = None
    base_time_ns: Any = None
    origin_us: float | None = None
    device_properties: list[dict[str, Any]] | msgspec.UnsetType = msgspec.UNSET
    json_bytes: int | None = None
    file: str | None = None
    files: list[TraceFile] | msgspec.UnsetType = msgspec.UNSET
    audit: TraceAudit | msgspec.UnsetType = msgspec.UNSET  # a profile run's trace: its integrity audit

    def audits(self) -> list[TraceAudit]:
        """The integrity audit of every file read (none for runs made before the audit existed)."""
        files = [f.audit for f in self.imported_files() if isinstance(f.audit, TraceAudit)]
        return files or ([self.audit] if isinstance(self.audit, TraceAudit) else [])

    def imported_files(self) -> list[TraceFile]:
        """The files an import read (none for a profile run, which records its own trace)."""
        return self.files if isinstance(self.files, list) else []

    def world_size(self) -> int | None:
        """The largest world size the imported files' `distributedInfo` records (a serving engine's ranks)."""
        sizes = [f.distributed_info.get("world_size") for f in self.imported_files()
                 if isinstance(f.distributed_info, dict)]
        sizes = [s for s in sizes if isinstance(s, int) and not isinstance(s, bool) and 0 < s <= 1 << 16]
        return max(sizes) if sizes else None

    def origins_us(self) -> list[float]:
        """Origin (µs) of each rank's timeline: the trace's own, or each imported file's."""
        if isinstance(self.files, list) and self.files:
            return [f.origin_us or 0.0 for f in self.files]
        return [self.origin_us or 0.0]


class NcuInfo(Record, kw_only=True):
    """How Nsight Compute measurements were made (`kernelscope ncu`) or where they were imported from."""

    phase: str = "decode"
    top: int | None = None
    launches_per_config: int | None = None
    sections: list[str] = msgspec.field(default_factory=list)
    metrics: list[str] | msgspec.UnsetType = msgspec.UNSET
    nvtx_include: list[str] | msgspec.UnsetType = msgspec.UNSET
    nvtx_exclude: list[str] | msgspec.UnsetType = msgspec.UNSET
    kernels: list[str] | msgspec.UnsetType = msgspec.UNSET
    wall_s: float | None = None
    profiled_launches: int | None = None
    matched_launches: int | None = None
    ncu: str | None = None
    imported_from: list[str] | msgspec.UnsetType = msgspec.UNSET
    # `--coverage F`: the goal, the distinct (kernel, launch configuration) chosen, the share of the phase's kernel
    # time they hold, and the share whose configuration ncu measured (every launch of a measured configuration).
    coverage: float | msgspec.UnsetType = msgspec.UNSET
    configurations: int | msgspec.UnsetType = msgspec.UNSET
    planned_share: float | msgspec.UnsetType = msgspec.UNSET
    measured_share: float | msgspec.UnsetType = msgspec.UNSET


class UnattributedReplays(Record, kw_only=True):
    """Replays that got no attribution for one reason. `reason` says it in English (runs written before the fields
    below have it alone); the fields say it as data, for the report to word in each language."""

    reason: str
    replays: int
    kernels: int
    time_ns: int = 0
    kernels_per_replay: int | None = None
    captures_given: bool | None = None  # capture traces were given (`import --capture`)
    closest_capture_share: float | None = None  # share of the replay's kernels the closest capture holds in order
    eager_steps: bool | None = None  # an eager step with modules was there to copy from
    step: int | None = None  # the eager step compared, where the replay first departs from it
    kernel: int | None = None  # the replay's kernel there (None: the step ends first)
    replay_kernel: str | None = None
    step_kernel: str | None = None  # None where the step has no kernel at that place


class ReplayMethod(Record, kw_only=True):
    """Replays attributed one way (analyze/attribution/graph_replays.py): exact, position, partial (capture traces) or eager
    step; kernels and time count the kernels that got attribution."""

    method: str
    replays: int
    kernels: int
    time_ns: int = 0


class GraphReplays(Record, kw_only=True):
    """CUDA-graph replays: how many got attribution, how (per method), and why the others did not."""

    replays: int = 0
    kernels: int = 0
    time_ns: int = 0
    attributed_replays: int = 0
    attributed_kernels: int = 0
    attributed_time_ns: int = 0
    methods: list[ReplayMethod] = msgspec.field(default_factory=list)
    captures: list[str] = msgspec.field(default_factory=list)  # capture trace files given (`import --capture`)
    unattributed: list[UnattributedReplays] = msgspec.field(default_factory=list)


class EnergyPhase(Record, kw_only=True):
    """One phase of `profile --energy`'s full generations (setup: before the first forward pass; between: outside
    every generation's windows), over all of them. joules: the board's energy counter interpolated between its
    updates at the windows' edges (estimated where mean_window_ms is shorter than the counter's update interval);
    joules_from_power: the power samples integrated over the same windows."""

    phase: str
    seconds: float
    windows: int
    tokens: int
    joules: float
    joules_from_power: float | None = None
    joules_per_token: float | None = None  # joules ÷ tokens (prefill: prompt tokens; decode: new tokens)
    mean_watts: float | None = None
    mean_window_ms: float | None = None


class EnergyStage(Record, kw_only=True):
    """One stage of the energy pass: `prefill_only` (generations of one new token, repeated) or `generation` (the
    full generations). mean_watts: the counter's change between its first and last update inside the stage over
    the time between them (measured; update_intervals of them, 0: interpolated over the stage)."""

    stage: str
    started_ns: int | None = None  # on power.parquet's clock (host_ns)
    ended_ns: int | None = None
    seconds: float
    generations: int
    update_intervals: int
    mean_watts: float
    generation_ms: float | None = None  # the median generation's length
    joules_per_generation: float | None = None  # mean_watts × generation_ms
    prompt_tokens: int = 0
    new_tokens: int = 0  # decode tokens: batch × (new tokens − 1) per generation


class EnergyInfo(Record, kw_only=True):
    """run.json's `energy` (docs/run-format.md). prefill_joules_per_token: a one-token generation's joules per
    prompt token; decode_joules_per_token: a full generation's less a one-token generation's, per new token after
    the first (both measured over whole counter updates). counter_joules: the counter's change over the full
    generations, read at their edges; per_token_check: the per-token values times the full generations' tokens
    over it; power_joules: the power samples integrated over them; agreement: power_joules ÷ counter_joules."""

    method: str
    repeats: int
    generations: int
    samples: int
    sample_interval_ms: float
    counter_update_ms: float | None  # median time between the counter's updates, as sampled
    pass_seconds: float  # the full generations' stage
    decode_step_ms: float | None = None  # median decode window of the full generations (vs timings' tpot_ms)
    prefill_joules_per_token: float | None = None
    decode_joules_per_token: float | None = None
    counter_joules: float
    per_token_joules: float | None = None  # prefill and decode per token × the full generations' tokens
    per_token_check: float | None = None  # per_token_joules ÷ counter_joules
    power_joules: float | None = None
    agreement: float | None = None
    phases: list[EnergyPhase] = msgspec.field(default_factory=list)
    stages: list[EnergyStage] = msgspec.field(default_factory=list)
    # Idle and per-class power fitted across the counter's updates (contracts/energy_split.py); absent where not
    # computed (runs written before it, or without the energy tables).
    split: EnergySplit | msgspec.UnsetType = msgspec.UNSET
