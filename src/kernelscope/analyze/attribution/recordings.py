"""What a graph capture recorded, from a trace of the capture (vLLM and SGLang write them as `capture_traces/`;
any torch.profiler trace around `torch.cuda.graph(...)` is one).

While a stream is captured its launch calls run no kernel, so the capture trace holds launch calls without device
activity. Each Begin…EndCapture stretch of calls on a thread is one graph (the whole trace is one where the trace
lacks those calls). Every captured launch is attributed like a kernel launched at that moment (the op, module
frame, Python frame and step open at the call: analyze/attribution/attribution.py and attribution_sources.py), and becomes a
row of a Recording that replays are matched against (analyze/attribution/graph_replays.py).
"""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.attribution.attribution import attribute
from kernelscope.analyze.attribution.attribution_sources import infer_attribution
from kernelscope.analyze.attribution.graph_replays import COPIED, SHAPES, Recording
from kernelscope.analyze.costs.kernel_costs import captured_shapes
from kernelscope.contracts.trace import TraceTables

_LAUNCH = r"LaunchKernel|LaunchCooperativeKernel|MemcpyAsync|MemsetAsync|Memset[0-9DA]*Async"
_BEGIN, _END = "StreamBeginCapture", "StreamEndCapture"


def capture_recordings(tables: TraceTables, label: str) -> list[Recording]:
    """The graphs a capture trace recorded, in capture order. Empty when the trace captured nothing."""
    launches = tables.launches.sort("start_ns")
    ran = tables.kernels["correlation"].drop_nulls().unique().implode()
    captured = launches.filter(pl.col("api").str.contains(_LAUNCH) & ~pl.col("correlation").is_in(ran)
                               & pl.col("correlation").is_not_null())
    if captured.height == 0:
        return []
    captured = captured.with_columns(_segment(launches, captured).alias("_graph"))
    pseudo = captured.select(
        pl.coalesce("kernel_name", pl.lit("(captured launch)")).alias("name"),
        _kind(pl.col("api")).alias("kind"),
        pl.lit(None, dtype=pl.Int64).alias("device"), pl.lit(None, dtype=pl.Int64).alias("stream"),
        "start_ns", pl.lit(0, dtype=pl.Int64).alias("dur_ns"), "correlation", "external_id",
    )
    kernels, ops = attribute(TraceTables(kernels=pseudo, launches=tables.launches, ops=tables.ops, meta=tables.meta))
    kernels, _ = infer_attribution(kernels, ops)
    # attribute() sorts by start, as `captured` is: row i of both is the same launch.
    rows = kernels.with_columns(captured["_graph"], captured["kernel_name"].alias("_named"),
                                *captured_shapes(kernels, ops))
    out = []
    for index, (_, graph) in enumerate(rows.group_by("_graph", maintain_order=True)):
        out.append(Recording(label=f"{label} graph {index}", kinds=graph["kind"].to_list(),
                             names=graph["_named"].to_list(), attribution=graph.select(*COPIED, "phase", *SHAPES),
                             index=index))
    return out


def _kind(api: pl.Expr) -> pl.Expr:
    return (pl.when(api.str.contains("Memset")).then(pl.lit("memset"))
            .when(api.str.contains("Memcpy")).then(pl.lit("memcpy")).otherwise(pl.lit("kernel")))


def _segment(launches: pl.DataFrame, captured: pl.DataFrame) -> pl.Series:
    """Per captured launch: which Begin…EndCapture stretch of its thread holds it (0 where there are none)."""
    begins = launches.filter(pl.col("api").str.contains(_BEGIN)).select("pid", "tid", "start_ns")
    if begins.height == 0:
        return pl.Series("_graph", [0] * captured.height, dtype=pl.Int64)
    numbered = begins.sort("start_ns").with_row_index("_graph").with_columns(pl.col("_graph").cast(pl.Int64))
    joined = captured.select("pid", "tid", "start_ns").with_row_index("_row").sort("start_ns").join_asof(
        numbered, on="start_ns", by=["pid", "tid"], strategy="backward", check_sortedness=False)
    return joined.sort("_row")["_graph"].fill_null(-1)
