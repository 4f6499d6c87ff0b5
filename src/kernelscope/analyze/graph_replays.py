"""Attribute the kernels of CUDA-graph replays, which no CPU op or module range surrounds.

Kineto gives every kernel of one replay the correlation id of its `cudaGraphLaunch` call, so the phase and
step ranges open around the launch reach them (attribution.py), but the module and op ranges were open only
while the graph was captured, which the trace does not see. A replay repeats the kernels of an eager decode
step (the engine runs its first decode step eagerly, with ranges, then replays the captured graph), so each
replay kernel takes module, layer, op and top op from the kernel at the same position of an eager decode step
of the same generation whose kernel names hold the replay's names in order (the eager step may launch more
around the graph's part, e.g. the copy of the new token). A replay that matches no eager step is left as it
is and the reason is recorded. op_id and top_op_id stay null: they name one CPU event, and a replay is not it.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from kernelscope import ranges
from kernelscope.contracts.run_info import GraphReplays, UnattributedReplays

GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch")
COPIED = ("module", "layer", "op", "top_op")


def attribute_graph_replays(kernels: pl.DataFrame) -> tuple[pl.DataFrame, GraphReplays | None]:
    """`kernels` as attribution gives them (analyze.attribution.attribute). Returns the kernels with replay
    kernels attributed, and a report of what was done (None when the run replays no graph)."""
    is_graph = pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS).fill_null(False)
    graph = kernels.filter(is_graph).sort("start_ns")
    if graph.height == 0:
        return kernels, None
    eager = kernels.filter(~is_graph & (pl.col("phase") == ranges.DECODE) & pl.col("step").is_not_null())
    steps = (eager.sort("start_ns").group_by("generation", "step", maintain_order=True)
             .agg(pl.col("name"), pl.col("kernel_id")).sort("step", descending=True))
    replays = graph.group_by("correlation", maintain_order=True).agg(
        pl.col("name"), pl.col("kernel_id"), pl.col("generation").first())

    pairs: list[tuple[int, int]] = []
    reasons: dict[str, list[int]] = {}
    matches: dict[tuple[Any, tuple[str, ...]], list[int] | str] = {}
    for names, ids, generation in replays.select("name", "kernel_id", "generation").iter_rows():
        key = (generation, tuple(names))
        if key not in matches:
            candidates = steps.filter(pl.col("generation").eq_missing(generation))
            matches[key] = _match(key[1], candidates)
        found = matches[key]
        if isinstance(found, str):
            reasons.setdefault(found, []).append(len(ids))
        else:
            pairs.extend(zip(ids, found, strict=True))

    info = GraphReplays(
        replays=replays.height,
        kernels=graph.height,
        attributed_replays=replays.height - sum(len(v) for v in reasons.values()),
        attributed_kernels=len(pairs),
        unattributed=[UnattributedReplays(reason=reason, replays=len(sizes), kernels=sum(sizes))
                      for reason, sizes in reasons.items()],
    )
    return _copy_from(kernels, pairs), info


def _match(names: tuple[str, ...], steps: pl.DataFrame) -> list[int] | str:
    """kernel_ids of the eager kernels a replay repeats (the latest eager step holding its names in order),
    or why there are none."""
    if steps.height == 0:
        return "no eager decode step to copy from (no kernel launched eagerly inside a ks.phase:decode:<i> range)"
    n = len(names)
    closest = ""
    for step, step_names, step_ids in steps.select("step", "name", "kernel_id").iter_rows():
        for offset in range(len(step_names) - n + 1):
            if tuple(step_names[offset:offset + n]) == names:
                return step_ids[offset:offset + n]
        if not closest:
            closest = _difference(names, step_names, step)
    return f"the replay's {n} kernels appear in order in no eager decode step ({closest})"


def _difference(names: tuple[str, ...], step_names: list[str], step: int) -> str:
    """Where a replay first departs from an eager step, aligned at the replay's first kernel."""
    start = step_names.index(names[0]) if names[0] in step_names else 0
    for j, name in enumerate(names):
        other = step_names[start + j] if start + j < len(step_names) else None
        if name != other:
            return f"step {step}, kernel {j}: '{name}' in the replay, '{other or '(none)'}' in the step"
    return f"step {step}: the step ends first"


def _copy_from(kernels: pl.DataFrame, pairs: list[tuple[int, int]]) -> pl.DataFrame:
    if not pairs:
        return kernels
    source = pl.DataFrame(pairs, schema={"kernel_id": pl.Int64, "_source": pl.Int64}, orient="row").join(
        kernels.select(pl.col("kernel_id").alias("_source"), *(pl.col(c).alias(f"_{c}") for c in COPIED)),
        on="_source", how="left")
    joined = kernels.join(source, on="kernel_id", how="left")
    copied = pl.col("_source").is_not_null()
    return joined.with_columns(
        *(pl.when(copied).then(pl.col(f"_{c}")).otherwise(pl.col(c)).alias(c) for c in COPIED),
        pl.when(copied & (pl.col("phase") == ranges.UNKNOWN)).then(pl.lit(ranges.DECODE)).otherwise(pl.col("phase"))
        .alias("phase"),
    ).drop("_source", *(f"_{c}" for c in COPIED))
