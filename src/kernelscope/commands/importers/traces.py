"""Kineto / torch.profiler JSON (any program), Nsight Systems SQLite exports and .nsys-rep reports: each file is
read and attributed on its own, and several files become the ranks of one run."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl

from kernelscope.analyze.attribution_sources import attribution_info
from kernelscope.analyze.graph_replays import Recording, attribute_graph_replays
from kernelscope.analyze.hardware import identify_spec
from kernelscope.analyze.ranks import combine_ranks, rank_clock_offsets, trace_ranks
from kernelscope.analyze.recordings import capture_recordings
from kernelscope.commands.importers.rank_files import read_ranks, read_ranks_on_ray
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import Hardware, TraceInfo
from kernelscope.contracts.tables import CPU_OP
from kernelscope.errors import UserError
from kernelscope.load import rundir, staging
from kernelscope.load.sources import hardware_from_properties, imported_run_info, read_trace, trace_file
from kernelscope.pipeline import write_run_directory
from kernelscope.progress import SILENT, Steps


def import_traces(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                  languages: tuple[str, ...] = ("en", "zh"), device_spec: str | None = None,
                  captures: list[Path] | None = None, jobs: int | None = None, cluster: str | None = None,
                  steps: Steps = SILENT) -> Path:
    """jobs: processes that read the files (default: by cores, files and memory; rank_files.py); cluster: a Ray
    address (`ray://…`, or `local`) whose tasks read them instead; steps: the stages shown as they run (reading
    with its chunks, attribution, tables and report)."""
    if cluster:
        with steps.step(f"Reading and attributing {len(files)} files on {cluster}"):
            ranks = read_ranks_on_ray(files, cluster)
    else:
        ranks = read_ranks(files, jobs, steps)
    _same_kind_of_work(files, [r.kernels for r in ranks])
    parts = [(r.kernels, r.ops) for r in ranks]
    metas = [r.meta for r in ranks]
    sources = [r.sources for r in ranks]
    kernels, ops = combine_ranks(parts, rank_clock_offsets([m.origin_us for m in metas],
                                                           [m.base_time_ns for m in metas]),
                                 trace_ranks([m.distributed_info for m in metas]))
    recordings = read_captures(captures or [])
    kernels, graph_replays = attribute_graph_replays(kernels, recordings)
    if graph_replays is not None:
        graph_replays.captures = [str(p) for p in captures or []]
    first = metas[0]
    device_type = "cpu" if kernels.height and (kernels["kind"] == CPU_OP).all() else "cuda"
    # A trace without device activity is a CPU run, whatever devices its process could see.
    hardware = hardware_from_properties(first.device_properties if device_type == "cuda" else [], device_type)
    if device_spec is None:
        hardware = identified_hardware(hardware, first.device_properties if device_type == "cuda" else [])
    trace = TraceInfo(
        format=first.source_format,
        event_count=sum(m.event_count for m in metas),
        files=[trace_file(meta, str(path)) for meta, path in zip(metas, files, strict=True)],
        cuda_runtime_version=first.cuda_runtime_version,
        cuda_driver_version=first.cuda_driver_version,
    )
    info = imported_run_info(files, hardware, trace, device_spec, graph_replays=graph_replays,
                             attribution=attribution_info(kernels, sources))
    run = Run(info=info, kernels=kernels, ops=ops)
    target = out or rundir.default_run_path(runs_dir, files[0].name.split(".")[0], info.hardware.name or device_type)
    with staging.staged_directory(target) as tmp:
        write_run_directory(tmp, run, report=report, languages=languages, steps=steps)
    return target.resolve()


def identified_hardware(hardware: Hardware, properties: list[dict]) -> Hardware:
    """The hardware with the name and spec of the one device its properties fit, where the trace names none."""
    if hardware.name or not properties:
        return hardware
    props = properties[0]
    spec = identify_spec(props.get("numSms"), props.get("totalGlobalMem"), props.get("warpSize"))
    if spec is None:
        return hardware
    return msgspec.structs.replace(hardware, name=spec.name, spec=spec.key, identified_by="device properties")


def read_captures(paths: list[Path]) -> list[Recording]:
    """The graphs recorded by the capture traces given (files, or directories searched for traces)."""
    recordings: list[Recording] = []
    for path in paths:
        recordings += capture_recordings(read_trace(path), path.name)
    return recordings


def _same_kind_of_work(files: list[Path], kernels: list[pl.DataFrame]) -> None:
    """The files of one run all record device work, or none does (CPU profiles, whose ops stand in for kernels with
    their self time): a rank without device activity beside ranks with it would count its CPU ops as device time."""
    cpu_only = [path for path, table in zip(files, kernels, strict=True)
                if table.height and (table["kind"] == CPU_OP).all()]
    if cpu_only and len(cpu_only) < len(files):
        device = next(path for path in files if path not in cpu_only)
        raise UserError(f"{cpu_only[0]}: records no device activity, while {device} does: a run's traces are all of "
                        "GPUs or all of CPUs; import the GPU ranks without it")
