"""`kernelscope import` of Nsight Systems kernel summaries (`nsys stats` CSV or text exports): a run directory
whose kernels.parquet holds one row per summary line, standing for `instances` launches (docs/nsys.md).

Phases come from kernelscope's NVTX phase ranges when the summary is projected onto NVTX ranges (nvtx_kern_sum),
else from the file name (`prefill`, `extend` → prefill; `decode` → decode), else `unknown`. Nothing else is
attributed: a summary has no launch records, framework ops or module ranges."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from kernelscope import ranges
from kernelscope.capture.environment import describe_software
from kernelscope.commands.finish import write_run_directory
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.nsys_stats import read_nsys_stats
from kernelscope.load.profile import Profile

FORMAT = "nsys-stats"
# A kernelscope phase range as nvtx_kern_sum names it: optionally after its domain and a colon.
_PHASE_RANGE = re.compile(
    rf"(?:^|:){re.escape(ranges.PHASE_PREFIX)}({ranges.PREFILL}|{ranges.DECODE})(?::(\d+))?\s*$"
)
_NAME_PHASES = {"prefill": ranges.PREFILL, "extend": ranges.PREFILL, "decode": ranges.DECODE}

# Columns a trace gives and a summary cannot: null on every row.
_NULL_COLUMNS = {
    "device": pl.Int64, "stream": pl.Int64, "start_ns": pl.Int64, "correlation": pl.Int64, "external_id": pl.Int64,
    "grid_x": pl.Int64, "grid_y": pl.Int64, "grid_z": pl.Int64, "block_x": pl.Int64, "block_y": pl.Int64,
    "block_z": pl.Int64, "registers_per_thread": pl.Int64, "shared_memory_bytes": pl.Int64,
    "est_occupancy_pct": pl.Float64, "bytes": pl.Int64, "launch_api": pl.String, "pid": pl.Int64, "tid": pl.Int64,
    "launch_start_ns": pl.Int64, "launch_dur_ns": pl.Int64, "op": pl.String, "top_op": pl.String,
    "op_id": pl.Int64, "top_op_id": pl.Int64, "module": pl.String, "layer": pl.Int64,
}
_OPS_SCHEMA = {"op_id": pl.Int64, "name": pl.String, "cat": pl.String, "pid": pl.Int64, "tid": pl.Int64,
               "start_ns": pl.Int64, "dur_ns": pl.Int64, "parent_op_id": pl.Int64, "input_dims": pl.String,
               "input_types": pl.String, "concrete_inputs": pl.String}


def import_nsys_stats(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                      languages: tuple[str, ...] = ("en", "zh")) -> Path:
    """Make a run directory from nsys stats kernel summaries (one file per stage, or one projected onto NVTX
    ranges). Returns the run directory."""
    if not files:
        raise UserError("import: no nsys stats files given")
    parts, metas = [], []
    for rank, path in enumerate(files):
        kernels, meta = summary_kernels(path)
        parts.append(kernels.with_columns(pl.lit(rank, dtype=pl.Int64).alias("rank")))
        metas.append(meta)
    kernels = (
        pl.concat(parts, how="diagonal_relaxed")
        .with_row_index("kernel_id")
        .with_columns(pl.col("kernel_id").cast(pl.Int64))
    )
    run = {
        "source": "import",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "inputs": [str(p) for p in files],
        "hardware": {"device_type": "cuda", "name": None},
        "software": {"kernelscope": describe_software()["kernelscope"]},
        "trace": {"format": FORMAT, "files": metas},
    }
    profile = Profile(kernels=kernels, ops=pl.DataFrame(schema=_OPS_SCHEMA), run=run)
    target = out or rundir.default_run_path(runs_dir, files[0].stem, FORMAT)
    with rundir.staged_directory(target) as tmp:
        write_run_directory(tmp, profile, report=report, languages=languages)
    return target.resolve()


def summary_kernels(path: Path) -> tuple[pl.DataFrame, dict]:
    """kernels rows of one summary file (without kernel_id and rank) and what run.json records about it."""
    table = read_nsys_stats(path)
    by_name = phase_from_file_name(path)
    report = "cuda_gpu_kern_gb_sum" if "grid_x" in table.columns else "cuda_gpu_kern_sum"
    phase_source = _name_source(by_name)
    if table["nvtx_range"].is_not_null().any():
        report = "nvtx_kern_sum"
        table, phase_source = _by_nvtx_range(path, table, by_name)
    else:
        table = table.with_columns(pl.lit(by_name).alias("phase"), pl.lit(None, dtype=pl.Int64).alias("step"))
    kernels = table.select(
        "name", pl.lit("kernel").alias("kind"), pl.col("total_ns").alias("dur_ns"), "instances",
        "min_ns", "max_ns", "med_ns", "stddev_ns", "phase", "step",
        *(c for c in _NULL_COLUMNS if c in table.columns),
    ).with_columns(pl.lit(None, dtype=t).alias(c) for c, t in _NULL_COLUMNS.items() if c not in table.columns)
    meta = {"file": str(path), "report": report, "rows": kernels.height, "launches": int(kernels["instances"].sum()),
            "phase_from": phase_source}
    return kernels, meta


def phase_from_file_name(path: Path) -> str:
    """prefill or decode when the file name names exactly one of them (`extend` is SGLang's prefill)."""
    stem = path.name.lower()
    found = {phase for word, phase in _NAME_PHASES.items() if word in stem}
    return found.pop() if len(found) == 1 else ranges.UNKNOWN


def _by_nvtx_range(path: Path, table: pl.DataFrame, by_name: str) -> tuple[pl.DataFrame, str]:
    """Phases from kernelscope's phase ranges. nvtx_kern_sum lists a kernel under every range that encloses its
    launch, so only the phase ranges' rows (they do not nest) and the rows outside every range are kept."""
    parts = pl.col("nvtx_range").str.extract_groups(_PHASE_RANGE.pattern)
    table = table.with_columns(
        parts.struct.field("1").alias("_phase"), parts.struct.field("2").cast(pl.Int64).alias("step"),
    )
    outside = pl.col("nvtx_range").is_null()
    if table["_phase"].is_not_null().any():
        kept = table.filter(pl.col("_phase").is_not_null() | outside).with_columns(
            pl.coalesce("_phase", pl.lit(by_name)).alias("phase"))
        return kept.drop("_phase"), "nvtx"
    nested = (
        table.filter(~outside).group_by("name").agg(pl.col("nvtx_range").n_unique().alias("ranges"))
        .filter(pl.col("ranges") > 1).sort("ranges", "name", descending=[True, False])
    )
    if nested.height:
        name, count = nested.row(0)
        raise UserError(
            f"{path}: kernel {name!r} is listed under {count} NVTX ranges; nvtx_kern_sum counts a kernel once per "
            f"enclosing range, so its time cannot be added up. Export cuda_gpu_kern_sum instead, or push "
            f"kernelscope's `{ranges.PHASE_PREFIX}` ranges"
        )
    return table.drop("_phase").with_columns(pl.lit(by_name).alias("phase")), _name_source(by_name)


def _name_source(phase: str) -> str:
    return "file name" if phase != ranges.UNKNOWN else "none"
