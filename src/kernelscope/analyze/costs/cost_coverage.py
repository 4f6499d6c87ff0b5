"""How much of a run's time has analytic costs, from which source (contracts.tables.COST_SOURCES), and, where
that is little, which of the uncosted time an import could recover."""

from __future__ import annotations

from typing import Any

import polars as pl

from kernelscope.analyze.attribution.graph_replays import GRAPH_LAUNCH_APIS
from kernelscope.analyze.wide_tables import time_where
from kernelscope.contracts.run_info import RunInfo
from kernelscope.contracts.tables import COST_SOURCES
from kernelscope.load import knowledge


def cost_sources(kernels: pl.DataFrame) -> dict[str, float]:
    """Share of device time costed from each source, the sources present only."""
    total = kernels["dur_ns"].sum()
    if not total or "cost_source" not in kernels.columns:
        return {}
    shares = {source: time_where(kernels, pl.col("cost_model").is_not_null() & (pl.col("cost_source") == source))
              / total for source in COST_SOURCES}
    return {source: float(share) for source, share in shares.items() if share > 0}


def costs_hint(kernels: pl.DataFrame, coverage: float | None, info: RunInfo) -> dict[str, Any]:
    """Whether the run's cost coverage is low (below data/cost_models.toml `low_coverage`) and which uncosted time an
    import could recover: CUDA-graph replays imported without capture traces (`capture`), kernels of a run
    without a model config (`shapes`), and with one but without the steps' tokens (`tokens`); shares of device
    time, 0 below 1%."""
    low = coverage is not None and coverage < knowledge.cost_models().get("low_coverage", 0.9) and kernels.height > 0
    if not low:
        return {"low": False}
    total = float(kernels["dur_ns"].sum() or 1)
    uncosted = pl.col("cost_model").is_null()
    replay = pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS).fill_null(False)
    captured = info.graph_replays is not None and bool(info.graph_replays.captures)
    capture = 0.0 if captured else time_where(kernels, uncosted & replay) / total
    configured = info.model is not None and bool(info.model.config)
    rest = time_where(kernels, uncosted & ~replay) / total
    shapes = 0.0 if configured else rest
    # Given a config but no token counts (no annotation, no --batch-size), the steps' tokens are what is missing.
    stated = info.workload is not None and bool(info.workload.batch_size)
    tokens = rest if configured and not stated and info.source == "import" else 0.0
    return {"low": True, **{key: value if value >= 0.01 else 0.0
                            for key, value in (("capture", capture), ("shapes", shapes), ("tokens", tokens))}}
