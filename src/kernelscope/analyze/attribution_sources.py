"""What the trace itself says where kernelscope's own ranges are missing, and where each level of attribution
came from.

attribute() ties kernels to the ranges kernelscope pushes (ks.phase, ks.module). A trace written by another
program has none; then phases and steps come from the trace's own step markers (analyze/step_inference.py) and
modules, layers and source lines from its Python frames (analyze/python_frames.py), else modules and layers from its
user annotations (analyze/annotation_modules.py). Every level records its
source and the share of device time it reaches (run.json `attribution`, docs/importing.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.annotation_modules import annotation_modules
from kernelscope.analyze.python_frames import Launches, inside_function, module_frames, source_lines
from kernelscope.analyze.step_inference import infer_steps
from kernelscope.analyze.wide_tables import beside, time_where
from kernelscope.contracts.run_info import AttributionInfo, LevelSource, StepInfo

OWN_RANGES = "kernelscope ranges"
MODULE_FRAMES = "nn.Module frames (with_modules)"
STACK_FRAMES = "Python frames (with_stack)"
USER_ANNOTATIONS = "user annotations (record_function)"
LAUNCH_OP = "CPU op open at launch"
NONE = "none"


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
                sources.module, sources.layer_class = USER_ANNOTATIONS, annotated.layer_class
                sources.layer_types = annotated.layer_types
    lines = source_lines(frames, launches, span)
    if lines is not None:
        kernels = kernels.with_columns(lines.alias("source_line"))
        sources.source_line = STACK_FRAMES
    return kernels, sources


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
        notes=[graph_note] if graph_note else [],
    )
