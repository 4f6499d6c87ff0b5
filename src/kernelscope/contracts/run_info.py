"""run.json as typed records (docs/run-format.md documents every key).

Every stage reads run metadata through these types: `RunInfo.from_json` validates the file's shape once, so
analysis and reports never probe dictionaries. Fields a run does not have are None (or absent from the file).
Free-form data that other programs define stays a plain mapping on purpose: the model's own config
(`ModelInfo.config`) and a trace's `deviceProperties` (`TraceInfo.device_properties`).
"""

from __future__ import annotations

from typing import Any

import msgspec

from kernelscope.contracts.model_recognition import ModelRecognition
from kernelscope.contracts.record import Record
from kernelscope.contracts.trace_records import EnergyInfo, GraphReplays, NcuInfo, TraceInfo

SCHEMA_VERSION = 1

# Values of RunInfo.source.
PROFILE = "profile"
IMPORT = "import"


class ImageSettings(Record, kw_only=True):
    base_size: int = 1024
    image_size: int = 768
    crop_mode: bool = True


class ImageInfo(Record, kw_only=True):
    """One input image of a vision workload (one generation each)."""

    index: int
    source: str | None = None
    width: int | None = None
    height: int | None = None
    crops: int | None = None
    image_tokens: int | None = None
    prompt_tokens: int | None = None


class Workload(Record, kw_only=True):
    """What `kernelscope profile` ran. Imports have none."""

    backend: str = "hf"
    backend_description: str | None = None
    model: str | None = None
    model_source: str | None = None
    model_path: str | None = None
    dtype: str | None = None
    device: str | None = None
    batch_size: int | None = None
    prompt_len: int | None = None
    new_tokens: int | None = None
    decoding: str | None = None
    temperature: float = 0.0
    no_repeat_ngram_size: int = 0
    seed: int = 0
    warmup: int | None = None
    repeats: int | None = None
    # Vision-language workloads (docs/ocr.md).
    prompt: str | msgspec.UnsetType = msgspec.UNSET
    images: list[ImageInfo] | msgspec.UnsetType = msgspec.UNSET
    stages: list[str] | msgspec.UnsetType = msgspec.UNSET
    image_source: str | msgspec.UnsetType = msgspec.UNSET
    image_paths: list[str] | msgspec.UnsetType = msgspec.UNSET
    image_settings: ImageSettings | msgspec.UnsetType = msgspec.UNSET

    @property
    def image_list(self) -> list[ImageInfo]:
        return self.images if isinstance(self.images, list) else []


class StageInfo(Record, kw_only=True):
    """A model stage (a vision encoder) that is a phase of its own; its layers are numbered from 0."""

    module: str
    class_name: str | None = msgspec.field(name="class", default=None)
    parameters: int | None = None
    parameter_bytes: int | None = None
    num_layers: int | None = None
    layer_prefix: str | None = None
    layer_types: dict[int, str] = msgspec.field(default_factory=dict)


class ModelInfo(Record, kw_only=True):
    class_name: str | None = msgspec.field(name="class", default=None)
    model_type: str | None = None
    parameters: int | None = None
    parameter_bytes: int | None = None
    num_layers: int | None = None
    layer_prefix: str | None = None
    layer_types: dict[int, str] = msgspec.field(default_factory=dict)
    config: dict[str, Any] = msgspec.field(default_factory=dict)  # the model's own config, as transformers has it
    stages: dict[str, StageInfo] | msgspec.UnsetType = msgspec.UNSET
    # Imports: where `config` came from, "--model-config" (the user's file) or "catalog" (the catalog entry of the
    # model recognised from the trace: RunInfo.model_recognition).
    config_source: str | msgspec.UnsetType = msgspec.UNSET

    def language_config(self) -> dict[str, Any]:
        """The language model's config: the config itself, or its text_config (vision-language models)."""
        text = self.config.get("text_config")
        return text if isinstance(text, dict) else self.config


class Hardware(Record, kw_only=True):
    device_type: str = "cuda"  # cuda or cpu
    name: str | None = None
    count: int | None = None
    memory_bytes: int | None = None
    sm_count: int | None = None
    compute_capability: str | None = None
    l2_cache_bytes: int | None = None
    driver_version: str | None = None
    # Key of data/hardware.toml the user named (`import --device`): it, not the name, picks the datasheet.
    spec: str | msgspec.UnsetType = msgspec.UNSET
    # Where the name came from when the input named no device: "device properties" (the one spec they fit,
    # analyze/hardware.identify_spec) or "--device" (the spec the user named).
    identified_by: str | msgspec.UnsetType = msgspec.UNSET
    cpu: str | None = None
    cpu_cores: int | None = None
    threads: int | msgspec.UnsetType = msgspec.UNSET  # CPU runs: torch's intra-op threads

    @property
    def is_cpu(self) -> bool:
        return self.device_type == "cpu"


class Software(Record, kw_only=True):
    kernelscope: str | None = None
    python: str | None = None
    platform: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: int | None = None
    transformers: str | None = None
    triton: str | None = None
    polars: str | None = None
    msgspec: str | None = None
    argv: list[str] | None = None
    # The git commit of the kernelscope checkout that made the run (its engine's code on `--backend engine`),
    # where it ran from one; the `commit` column of `kernelscope query` (docs/dataset.md).
    commit: str | None = None


class Capture(Record, kw_only=True):
    activities: list[str] = msgspec.field(default_factory=list)
    record_shapes: bool = True
    with_stack: bool = False
    profile_memory: bool = False
    profiled_wall_ms: float | None = None
    nvtx: bool = False


class TimingSummary(Record, kw_only=True):
    """Medians over the timed generations of one mode."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    tokens_per_s: float | None = None
    e2e_ms: float | None = None
    decode_tokens_per_s: float | None = None
    repeats: int | None = None
    e2e_ms_all: list[float] = msgspec.field(default_factory=list)
    # Every timed generation's value, for the spread (runs written before these were kept have none).
    ttft_ms_all: list[float] = msgspec.field(default_factory=list)
    tpot_ms_all: list[float] = msgspec.field(default_factory=list)


class ImageTimings(Record, kw_only=True):
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None
    repeats: int | None = None


class Timings(Record, kw_only=True):
    """Unprofiled timings of a profile run: plain (no ranges) and annotated (with kernelscope's ranges)."""

    plain: TimingSummary = msgspec.field(default_factory=TimingSummary)
    annotated: TimingSummary = msgspec.field(default_factory=TimingSummary)
    annotation_overhead_pct: float | None = None
    tokens_match: bool | None = None
    images: list[ImageTimings] | msgspec.UnsetType = msgspec.UNSET
    tokens_repeatable: bool | None = None
    profiled_tokens_match: bool | None = None


class LevelSource(Record, kw_only=True):
    """Where one level of attribution (phase, step, module, layer, op, source line) came from, and the share of
    device time it reaches. `source` is one of the names docs/importing.md lists ("none" where nothing gave it)."""

    source: str = "none"
    coverage: float = 0.0


class StepInfo(Record, kw_only=True, omit_defaults=True):
    """One inferred step: its phase and number, and what its annotation says of the batch."""

    phase: str
    step: int
    label: str | None = None  # the annotation or frame it came from
    prefill_requests: int | None = None
    prefill_tokens: int | None = None
    decode_requests: int | None = None
    decode_tokens: int | None = None
    requests: int | None = None  # the batch's requests where the annotation gives no prefill/decode split
    tokens: int | None = None  # the batch's tokens (annotations) or tokens per sequence (embedding lookups)
    # Per part (prefill = the context requests, decode = the generation requests), where the annotation gives them:
    # Σ key/value tokens (each request's context, its new tokens included), Σ query tokens², Σ query · key tokens.
    prefill_kv_tokens: int | None = None
    prefill_query_squares: int | None = None
    prefill_query_kv_products: int | None = None
    decode_kv_tokens: int | None = None
    decode_query_squares: int | None = None
    decode_query_kv_products: int | None = None


class StructureLevel(Record, kw_only=True, omit_defaults=True):
    """One level of structure (`passes`, `phases`, `layers`, `modules`, `training`) read from the trace's own
    regularities where no annotation gave it: `inferred` with its evidence (English), or `unknown` with the reason
    (English in `reason`; as a code and its numbers in `code` and `values`, for the report's words)."""

    level: str
    status: str  # "inferred" or "unknown"
    count: int | None = None
    evidence: str | None = None
    reason: str | None = None
    code: str | None = None
    values: dict[str, int | float | str] = msgspec.field(default_factory=dict)


class AttributionInfo(Record, kw_only=True, omit_defaults=True):
    """How the kernels of the run were tied to phases, steps, modules, layers, ops and source lines."""

    phase: LevelSource = msgspec.field(default_factory=LevelSource)
    step: LevelSource = msgspec.field(default_factory=LevelSource)
    module: LevelSource = msgspec.field(default_factory=LevelSource)
    layer: LevelSource = msgspec.field(default_factory=LevelSource)
    op: LevelSource = msgspec.field(default_factory=LevelSource)
    source_line: LevelSource = msgspec.field(default_factory=LevelSource)
    # Layer index → type, inferred from the module classes of the trace (runs without a model section).
    layer_types: dict[int, str] = msgspec.field(default_factory=dict)
    layer_class: str | None = None
    steps: list[StepInfo] = msgspec.field(default_factory=list)
    notes: list[str] = msgspec.field(default_factory=list)
    # Structure read from the trace's regularities (analyze/structure/structure_inference.py), level by level.
    structure: list[StructureLevel] = msgspec.field(default_factory=list)


class RankInfo(Record, kw_only=True, omit_defaults=True):
    """One process of a multi-process profile: where it ran and what it timed (without the profiler)."""

    rank: int
    local_rank: int = 0
    host: str | None = None
    device: str | None = None
    timings: TimingSummary = msgspec.field(default_factory=TimingSummary)
    tokens_match: bool | None = None  # its plain and annotated runs gave the same tokens
    profiled_tokens_match: bool | None = None
    trace: str | None = None  # its trace in the run directory


class ParallelInfo(Record, kw_only=True, omit_defaults=True):
    """How a `profile --gpus N` run was split (docs/multi-gpu.md): ranks, degrees, backend, nodes."""

    world_size: int
    tensor_parallel: int = 1
    expert_parallel: int = 1
    nodes: int = 1
    backend: str | None = None  # nccl or gloo
    launcher: str = "torch.distributed.run"
    plan: str | None = None  # whose plan split the model, e.g. "transformers tp_plan=auto"
    ranks: list[RankInfo] = msgspec.field(default_factory=list)


class RunInfo(Record, kw_only=True, omit_defaults=True):
    """The content of run.json. Sections a run lacks are left out of the file. Build one with
    `schema_version=SCHEMA_VERSION`."""

    source: str
    created: str | None = None
    inputs: list[str] | None = None
    workload: Workload | None = None
    model: ModelInfo | None = None
    hardware: Hardware = msgspec.field(default_factory=Hardware)
    software: Software = msgspec.field(default_factory=Software)
    capture: Capture | None = None
    timings: Timings | None = None
    trace: TraceInfo | None = None
    graph_replays: GraphReplays | None = None
    attribution: AttributionInfo | None = None
    schema_version: int  # required: always written
    ncu: NcuInfo | None = None
    parallel: ParallelInfo | None = None  # runs of several processes (profile --gpus N)
    energy: EnergyInfo | None = None  # profile --energy
    # Imports without --model-config: the model recognised from the trace, or why none was (docs/run-format.md).
    model_recognition: ModelRecognition | None = None

    @classmethod
    def from_json(cls, data: bytes | str) -> RunInfo:
        """Decode run.json; msgspec.ValidationError / DecodeError name the offending key."""
        return msgspec.json.decode(data, type=cls)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunInfo:
        return msgspec.convert(data, type=cls)

    def to_dict(self) -> dict[str, Any]:
        return msgspec.to_builtins(self)

    def replace(self, **changes: Any) -> RunInfo:
        return msgspec.structs.replace(self, **changes)

    # --- what analyses ask of a run ------------------------------------------------------------------------
    @property
    def is_cpu(self) -> bool:
        return self.hardware.is_cpu

    @property
    def device_name(self) -> str | None:
        return self.hardware.name

    @property
    def plain_timings(self) -> TimingSummary:
        return self.timings.plain if self.timings is not None else TimingSummary()

    @property
    def layer_types(self) -> dict[int, str]:
        if self.model is not None:
            return dict(self.model.layer_types)
        return dict(self.attribution.layer_types) if self.attribution is not None else {}

    def layer_types_of(self, phase: str) -> dict[int, str]:
        """The layer types that number a phase's layers: a model stage's own (a vision encoder's layers restart
        at 0), else the decoder's."""
        stages = self.model.stages if self.model is not None else msgspec.UNSET
        if isinstance(stages, dict) and phase in stages:
            return dict(stages[phase].layer_types)
        return self.layer_types

    @property
    def images(self) -> list[ImageInfo]:
        return self.workload.image_list if self.workload is not None else []
