"""What the trace itself says where kernelscope's own ranges are missing, and where each level of attribution
came from.

attribute() ties kernels to the ranges kernelscope pushes (ks.phase, ks.module). A trace written by another
program has none; then phases and steps come from the trace's own step markers (analyze/structure/step_inference.py) and
modules, layers and source lines from its Python frames (analyze/attribution/python_frames.py), else modules and layers from its
user annotations (analyze/attribution/annotation_modules.py). Where none of them gives a level, the trace's regularities may
(analyze/structure/structure_inference.py): forward passes, prefill and decode, layers and their parts, training phases.
Every level records its source and the share of device time it reaches (run.json `attribution`,
docs/importing.md), and every kernel the kind of evidence its place came from (`attribution_source`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.attribution.annotation_modules import annotation_modules
from kernelscope.analyze.attribution.python_frames import (
    Launches,
    inside_function,
    module_frames,
    source_lines,
)
from kernelscope.analyze.structure.step_inference import infer_steps
from kernelscope.analyze.structure.structure_inference import infer_structure
from kernelscope.analyze.wide_tables import beside, time_where
from kernelscope.contracts.run_info import AttributionInfo, LevelSource, StepInfo, StructureLevel

OWN_RANGES = "kernelscope ranges"
MODULE_FRAMES = "nn.Module frames (with_modules)"
STACK_FRAMES = "Python frames (with_stack)"
USER_ANNOTATIONS = "user annotations (record_function)"
LAYERWISE_MARKERS = "layer-by-layer NVTX markers (vLLM, SGLang)"
LAUNCH_OP = "CPU op open at launch"
INFERRED = "inferred from the trace's regularities"
NONE = "none"
PROFILER_STEPS = "ProfilerStep#N ranges"
MODEL_FORWARDS = "model forwards (top-level nn.Module frames)"

# The kinds of evidence a kernel's place came from (its `attribution_source`), strongest first.
ANNOTATION, MODULE_EVENT, OP_SHAPES, CAPTURE_TRACE, BY_INFERENCE = (
    "annotation", "module event", "op shapes", "capture trace", "inferred")
_STRENGTH = {ANNOTATION: 4, MODULE_EVENT: 3, CAPTURE_TRACE: 2, OP_SHAPES: 1, BY_INFERENCE: 0}


@dataclass
class Sources:
    """The source of each level for one trace file, before coverage is measured."""

    phase: str = NONE
    module: str = NONE
    op: str = LAUNCH_OP
    source_line: str = NONE
    layer_class: str | None = None
    layer_types: dict[int, str] = field(default_factory=dict)
    steps: list[StepInfo] = field(default_factory=list)
    structure: list[StructureLevel] = field(default_factory=list)


def infer_attribution(kernels: pl.DataFrame, ops: pl.DataFrame) -> tuple[pl.DataFrame, Sources]:
    """kernels and ops of one trace as attribute() gives them → kernels with phase, step, module, layer and
    source_line filled from the trace's own markers where kernelscope's ranges left them empty."""
    sources = Sources()
    threads, ops, launches, span = _clock(kernels, ops)
    if (kernels["phase"] != ranges.UNKNOWN).any():
        sources.phase = OWN_RANGES
    else:
        steps = infer_steps(ops, launches, span)
        if steps is not None:
            kernels = kernels.with_columns(steps.phase.alias("phase"), steps.step.alias("step"))
            sources.phase, sources.steps = steps.source, steps.steps
    frames = ops.filter(pl.col("cat") == "python")
    if kernels["module"].is_not_null().any():
        sources.module = OWN_RANGES
    else:
        found = module_frames(frames, launches, span)
        if found is not None:
            # Work of generate() itself (logits processing, token choice, stopping checks) outside the model's
            # modules is module `generate`, as on profiled runs.
            generating = pl.Series(inside_function(frames, ranges.GENERATE_MODULE, launches, span))
            module = pl.when(found.module.is_null() & generating).then(pl.lit(ranges.GENERATE_MODULE)) \
                .otherwise(found.module)
            kernels = kernels.with_columns(found.module.alias("module"), found.layer.alias("layer")) \
                .with_columns(pl.select(module.alias("module")).to_series())
            sources.module, sources.layer_class, sources.layer_types = MODULE_FRAMES, found.layer_class, found.layer_types
        else:
            annotated = annotation_modules(ops.filter(pl.col("cat") == "annotation"), launches, span)
            if annotated is not None:
                kernels = kernels.with_columns(annotated.module.alias("module"), annotated.layer.alias("layer"))
                sources.module = LAYERWISE_MARKERS if annotated.layerwise else USER_ANNOTATIONS
                sources.layer_class = annotated.layer_class
                sources.layer_types = annotated.layer_types
    lines = source_lines(frames, launches, span)
    if lines is not None:
        kernels = kernels.with_columns(lines.alias("source_line"))
        sources.source_line = STACK_FRAMES
    phase_kind, module_kind = _kind(sources.phase), _kind(sources.module)
    inferred = infer_structure(kernels, ops, launches, span)
    if inferred is None:
        return with_attribution_source(kernels, phase_kind, module_kind), sources
    kernels = inferred.kernels
    sources.structure = inferred.levels
    if inferred.phase_filled.any():
        sources.phase = INFERRED if sources.phase == NONE else f"{sources.phase} + {INFERRED}"
    if inferred.layer_filled.any():
        sources.module = INFERRED if sources.module == NONE else f"{sources.module} + {INFERRED}"
        if not sources.layer_types:
            sources.layer_types = inferred.layer_types
    if inferred.steps is not None:
        sources.steps = inferred.steps
    return with_attribution_source(kernels, phase_kind, module_kind, pl.Series(inferred.phase_filled),
                                   pl.Series(inferred.layer_filled)), sources


def _kind(source: str) -> str | None:
    """The kind of evidence a level's source is (None: no source)."""
    if source == NONE:
        return None
    if source in (MODULE_FRAMES, MODEL_FORWARDS):
        return MODULE_EVENT
    if source.startswith("embedding lookups"):
        return OP_SHAPES
    return ANNOTATION  # kernelscope's ranges, step annotations, ProfilerStep, user annotations


def with_attribution_source(kernels: pl.DataFrame, phase_kind: str | None, module_kind: str | None,
                            phase_inferred: pl.Series | None = None,
                            layer_inferred: pl.Series | None = None) -> pl.DataFrame:
    """`attribution_source` per kernel: the weakest kind of evidence among its phase or step and its module or layer
    (null where it has neither)."""
    none = pl.lit(None, dtype=pl.String)
    placed = (pl.col("phase") != ranges.UNKNOWN) | pl.col("step").is_not_null()
    phase = pl.when(placed).then(pl.lit(phase_kind, dtype=pl.String)).otherwise(none)
    module = pl.when(pl.col("module").is_not_null() | pl.col("layer").is_not_null()) \
        .then(pl.lit(module_kind, dtype=pl.String)).otherwise(none)
    if phase_inferred is not None:
        phase = pl.when(phase_inferred).then(pl.lit(BY_INFERENCE)).otherwise(phase)
    if layer_inferred is not None:
        module = pl.when(layer_inferred).then(pl.lit(BY_INFERENCE)).otherwise(module)
    weakest = pl.when(phase.is_null()).then(module).when(module.is_null()).then(phase) \
        .when(phase.replace_strict(_STRENGTH, default=0) <= module.replace_strict(_STRENGTH, default=0)) \
        .then(phase).otherwise(module)
    return kernels.with_columns(weakest.alias("attribution_source"))


def _clock(kernels: pl.DataFrame, ops: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, Launches, int]:
    """Thread codes shared by ops and kernels' launches, and a span above every time."""
    pairs = pl.concat([ops.select("pid", "tid"), kernels.select("pid", "tid")]).drop_nulls().unique().sort("pid", "tid")
    threads = pairs.with_row_index("thread").with_columns(pl.col("thread").cast(pl.Int64))
    ops = beside(ops, threads, ["pid", "tid"])
    coded = kernels.select("pid", "tid", "launch_start_ns").join(threads, on=["pid", "tid"], how="left",
                                                                 maintain_order="left")
    time = coded["launch_start_ns"].fill_null(-1).to_numpy()
    thread = coded["thread"].fill_null(-1).to_numpy().copy()
    thread[time < 0] = -1
    ends = [int((t["start_ns"] + t["dur_ns"]).max() or 0) for t in (ops, kernels) if t.height]
    span = max([*ends, int(time.max(initial=0))]) + 2
    return threads, ops, Launches(thread=thread, time=time), span


def attribution_info(kernels: pl.DataFrame, per_rank: list[Sources], graph_note: str | None = None) -> AttributionInfo:
    """run.json's `attribution`: each level's source (the ranks' sources joined where they differ) and the share
    of device time it reaches, measured on the final kernels (after graph replays are attributed)."""
    total = float(kernels["dur_ns"].sum() or 0)

    def share(known: pl.Expr) -> float:
        return float(time_where(kernels, known)) / total if total else 0.0

    def source(name: str) -> str:
        return " / ".join(dict.fromkeys(getattr(s, name) for s in per_rank)) if per_rank else NONE

    first = per_rank[0] if per_rank else Sources()
    phase = source("phase")
    return AttributionInfo(
        phase=LevelSource(source=phase, coverage=share(pl.col("phase") != ranges.UNKNOWN)),
        step=LevelSource(source=phase, coverage=share(pl.col("step").is_not_null())),
        module=LevelSource(source=source("module"), coverage=share(pl.col("module").is_not_null())),
        layer=LevelSource(source=source("module"), coverage=share(pl.col("layer").is_not_null())),
        op=LevelSource(source=source("op"), coverage=share(pl.col("op").is_not_null())),
        source_line=LevelSource(source=source("source_line"), coverage=share(pl.col("source_line").is_not_null())),
        layer_types=first.layer_types, layer_class=first.layer_class, steps=first.steps,
        notes=[graph_note] if graph_note else [], structure=first.structure,
    )
