"""Per generation: on runs that profile one generation per input image (docs/ocr.md), each image's device time in
every phase, beside what run.json says of the image and its unprofiled latencies; the last row is the mean."""

from __future__ import annotations

import polars as pl

from kernelscope.analyze.structure.phases import GENERATION
from kernelscope.contracts.run_info import ImageTimings, RunInfo

MEAN = "mean"


def generation_table(kernels: pl.DataFrame, phases: list[str], info: RunInfo) -> pl.DataFrame | None:
    """Rows: generation (image index; null on the mean row), source, size, crops, prompt_tokens, one device-time
    column per phase (ns, in report order), device_time_ns (all phases), ttft_ms and e2e_ms (medians of the
    unprofiled plain runs of that image). None on runs without per-image generations."""
    images = info.images
    if not images or kernels[GENERATION].is_null().all():
        return None
    per_phase = (
        kernels.filter(pl.col(GENERATION).is_not_null())
        .group_by(GENERATION, "phase")
        .agg(pl.col("dur_ns").sum())
        .pivot(on="phase", index=GENERATION, values="dur_ns")
    )
    present = [p for p in phases if p in per_phase.columns]
    per_phase = per_phase.with_columns(pl.col(present).fill_null(0)).select(GENERATION, *present)
    recorded = info.timings.images if info.timings is not None else None
    timings = recorded if isinstance(recorded, list) else [ImageTimings() for _ in images]
    described = pl.DataFrame(
        [{
            GENERATION: image.index,
            "source": image.source,
            "size": f"{image.width}×{image.height}",
            "crops": image.crops,
            "prompt_tokens": image.prompt_tokens,
            "ttft_ms": timing.ttft_ms,
            "e2e_ms": timing.e2e_ms,
        } for image, timing in zip(images, timings, strict=False)],
        schema={GENERATION: pl.Int64, "source": pl.String, "size": pl.String, "crops": pl.Int64,
                "prompt_tokens": pl.Int64, "ttft_ms": pl.Float64, "e2e_ms": pl.Float64},
    )
    table = (
        described.join(per_phase, on=GENERATION, how="left")
        .with_columns(pl.sum_horizontal(present).alias("device_time_ns"))
        .select(GENERATION, "source", "size", "crops", "prompt_tokens", *present, "device_time_ns", "ttft_ms",
                "e2e_ms")
        .sort(GENERATION)
    )
    numeric = ["crops", "prompt_tokens", *present, "device_time_ns", "ttft_ms", "e2e_ms"]
    mean = table.select(
        pl.lit(None, dtype=pl.Int64).alias(GENERATION), pl.lit(MEAN).alias("source"), pl.lit(None, dtype=pl.String)
        .alias("size"), *(pl.col(c).mean() for c in numeric),
    )
    return pl.concat([table.with_columns(pl.col(numeric).cast(pl.Float64)), mean], how="vertical_relaxed")
