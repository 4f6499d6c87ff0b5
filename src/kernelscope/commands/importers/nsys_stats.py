"""`kernelscope import` of Nsight Systems kernel summaries (`nsys stats` CSV or text exports): a run directory
whose kernels.parquet holds one row per summary line, standing for `instances` launches (docs/nsys.md).

Phases come from kernelscope's NVTX phase ranges when the summary is projected onto NVTX ranges (nvtx_kern_sum),
else from the file name (`prefill`, `extend` → prefill; `decode` → decode), else `unknown`. Nothing else is
attributed: a summary has no launch records, framework ops or module ranges."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

from kernelscope import ranges
from kernelscope.analyze.integrity import summaries_audit
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import Hardware
from kernelscope.contracts.tables import CPU_OP, conform_kernels
from kernelscope.contracts.trace_records import TraceFile, TraceInfo
from kernelscope.errors import UserError
from kernelscope.load import rundir, staging
from kernelscope.load.nsys_stats import read_nsys_stats
from kernelscope.load.sources import NSYS_STATS, imported_run_info
from kernelscope.pipeline import write_run_directory

# A kernelscope phase range as nvtx_kern_sum names it: optionally after its domain and a colon.
_PHASE_RANGE = re.compile(
    rf"(?:^|:){re.escape(ranges.PHASE_PREFIX)}({ranges.PREFILL}|{ranges.DECODE})(?::(\d+))?\s*$"
)
_NAME_PHASES = {"prefill": ranges.PREFILL, "extend": ranges.PREFILL, "decode": ranges.DECODE}
# What a summary line gives of a kernel (the columns a trace gives and a summary cannot are null).
_SUMMARY_COLUMNS = ["name", "kind", "dur_ns", "instances", "min_ns", "max_ns", "med_ns", "stddev_ns", "phase",
                    "step", "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "pid", "tid"]


def import_nsys_stats(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                      languages: tuple[str, ...] = ("en", "zh"), device_spec: str | None = None) -> Path:
    """Make a run directory from nsys stats kernel summaries (one file per stage, or one projected onto NVTX
    ranges). Returns the run directory."""
    if not files:
        raise UserError("import: no nsys stats files given")
    parts, metas = [], []
    for rank, path in enumerate(files):
        kernels, meta = summary_kernels(path)
        parts.append(kernels.with_columns(pl.lit(rank, dtype=pl.Int64).alias("rank")))
        metas.append(meta)
    kernels = pl.concat(parts, how="vertical")
    kernels = kernels.with_columns(pl.int_range(kernels.height, dtype=pl.Int64).alias("kernel_id"))
    cpu = bool(kernels.height) and bool((kernels["kind"] == CPU_OP).all())  # a kern-sum export of a CPU-only run
    info = imported_run_info(files, Hardware(device_type="cpu" if cpu else "cuda", name=None),
                             TraceInfo(format=NSYS_STATS, files=metas), device_spec)
    run = Run(info=info, kernels=kernels, ops=pl.DataFrame())
    target = out or rundir.default_run_path(runs_dir, files[0].stem, NSYS_STATS)
    with staging.staged_directory(target) as tmp:
        write_run_directory(tmp, run, report=report, languages=languages)
    return target.resolve()


def summary_kernels(path: Path) -> tuple[pl.DataFrame, TraceFile]:
    """kernels rows of one summary file (kernel_id and rank still to be set) and what run.json records of it."""
    table = read_nsys_stats(path)
    by_name = phase_from_file_name(path)
    report = "cuda_gpu_kern_gb_sum" if "grid_x" in table.columns else "cuda_gpu_kern_sum"
    phase_source = _name_source(by_name)
    if table["nvtx_range"].is_not_null().any():
        report = "nvtx_kern_sum"
        table, phase_source = _by_nvtx_range(path, table, by_name)
    else:
        table = table.with_columns(pl.lit(by_name).alias("phase"), pl.lit(None, dtype=pl.Int64).alias("step"))
    # A kern-sum export of a CPU-only run says its rows are CPU ops (Kind cpu_op): CPU work, not device time.
    cpu = pl.col("kind") == CPU_OP if "kind" in table.columns else pl.lit(False)
    table = table.with_columns(pl.when(cpu).then(pl.lit(CPU_OP)).otherwise(pl.lit("kernel")).alias("kind"),
                               pl.col("total_ns").alias("dur_ns"))
    kernels = conform_kernels(table.select(c for c in _SUMMARY_COLUMNS if c in table.columns))
    meta = TraceFile(file=str(path), report=report, rows=kernels.height, launches=int(kernels["instances"].sum()),
                     phase_from=phase_source, audit=summaries_audit())
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
