"""Kineto / torch.profiler JSON (any program), Nsight Systems SQLite exports and .nsys-rep reports: each file is
read and attributed on its own, and several files become the ranks of one run."""

from __future__ import annotations

from pathlib import Path

import msgspec
import polars as pl

from kernelscope.analyze.attribution.attribution_sources import CAPTURE_TRACE, attribution_info
from kernelscope.analyze.attribution.graph_replays import Recording, attribute_graph_replays
from kernelscope.analyze.attribution.recordings import capture_recordings
from kernelscope.analyze.hardware import identify_spec
from kernelscope.analyze.ranks.ranks import combine_calls, combine_ranks, rank_clock_offsets, trace_ranks
from kernelscope.analyze.recognition.recognise import recognise_model
from kernelscope.commands.importers.rank_files import read_ranks, read_ranks_on_ray
from kernelscope.contracts.model_recognition import FROM_CATALOG, FROM_FILE
from kernelscope.contracts.run import Run
from kernelscope.contracts.run_info import Hardware, ModelInfo, Workload
from kernelscope.contracts.tables import CPU_OP
from kernelscope.contracts.trace_records import TraceInfo
from kernelscope.errors import UserError
from kernelscope.load import rundir, staging
from kernelscope.load.model_catalog import catalog_entry
from kernelscope.load.sources import hardware_from_properties, imported_run_info, read_trace, trace_file
from kernelscope.pipeline import write_run_directory
from kernelscope.progress import SILENT, Steps


def import_traces(files: list[Path], out: Path | None, runs_dir: Path, report: bool = True,
                  languages: tuple[str, ...] = ("en", "zh"), device_spec: str | None = None,
                  captures: list[Path] | None = None, jobs: int | None = None, cluster: str | None = None,
                  model_config: dict | None = None, batch: tuple[int | None, int | None] = (None, None),
                  recognise: bool = True, steps: Steps = SILENT) -> Path:
    """jobs: processes that read the files (default: by cores, files and memory; rank_files.py); cluster: a Ray
    address (`ray://…`, or `local`) whose tasks read them instead. model_config: the checked config.json of
    --model-config (run.json `model`); without one, and unless `recognise` is off (--no-model-recognition), the
    config of the catalog's model the trace is recognised as (run.json `model_recognition`); batch: --batch-size
    and --prompt-len (run.json `workload`); steps: the stages shown as they run (reading with its chunks,
    attribution, tables and report)."""
    if cluster:
        with steps.step(f"Reading and attributing {len(files)} files on {cluster}"):
            ranks = read_ranks_on_ray(files, cluster)
    else:
        ranks = read_ranks(files, jobs, steps)
    _same_kind_of_work(files, [r.kernels for r in ranks])
    parts = [(r.kernels, r.ops) for r in ranks]
    metas = [r.meta for r in ranks]
    sources = [r.sources for r in ranks]
    offsets = rank_clock_offsets([m.origin_us for m in metas], [m.base_time_ns for m in metas])
    numbers = trace_ranks([m.distributed_info for m in metas])
    kernels, ops = combine_ranks(parts, offsets, numbers)
    calls = combine_calls([r.calls for r in ranks], offsets, numbers)
    recordings = read_captures(captures or [])
    before = kernels.select("kernel_id", pl.col("module").alias("_before"))
    kernels, graph_replays = attribute_graph_replays(kernels, recordings)
    if recordings:  # replays tied to a capture trace: that is where their module came from
        was = kernels.select("kernel_id").join(before, on="kernel_id", how="left", maintain_order="left")["_before"]
        tied = was.ne_missing(kernels["module"]) & kernels["module"].is_not_null()
        kernels = kernels.with_columns(pl.when(tied).then(pl.lit(CAPTURE_TRACE)).otherwise(pl.col("attribution_source"))
                                       .alias("attribution_source"))
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
    attribution = attribution_info(kernels, sources)
    source, recognition = FROM_FILE, None
    if model_config is None and recognise:
        recognition = recognise_model(kernels, ops, trace.world_size() or 1, attribution.layer_class)
        entry = catalog_entry(recognition.entry) if recognition.entry is not None else None
        model_config, source = (entry.config, FROM_CATALOG) if entry is not None else (None, source)
    described = (described_model(model_config, attribution.layer_types, batch, source)
                 if model_config is not None else {})
    info = imported_run_info(files, hardware, trace, device_spec, graph_replays=graph_replays,
                             attribution=attribution, model_recognition=recognition, **described)
    run = Run(info=info, kernels=kernels, ops=ops, calls=calls)
    target = out or rundir.default_run_path(runs_dir, files[0].name.split(".")[0], info.hardware.name or device_type)
    with staging.staged_directory(target) as tmp:
        write_run_directory(tmp, run, report=report, languages=languages, steps=steps)
    return target.resolve()


def described_model(config: dict, layer_types: dict[int, str], batch: tuple[int | None, int | None],
                    source: str = FROM_FILE) -> dict:
    """run.json `model` (and `workload`, where --batch-size was given) of an import with a model config: the file
    of --model-config (`source` FROM_FILE) or the catalog entry of the model recognised (FROM_CATALOG)."""
    language = config.get("text_config", config)
    architectures = config.get("architectures") or []
    layers = next((language[k] for k in ("num_hidden_layers", "n_layer", "num_layers") if k in language), None)
    model = ModelInfo(class_name=architectures[0] if architectures else None,
                      model_type=config.get("model_type") or language.get("model_type"), num_layers=layers,
                      layer_types=dict(layer_types), config=config, config_source=source)
    batch_size, prompt_len = batch
    if batch_size is None:
        return {"model": model}
    dtype = language.get("torch_dtype") or language.get("dtype") or config.get("torch_dtype") or config.get("dtype")
    workload = Workload(backend="import", backend_description="imported trace, batch stated with --batch-size",
                        model=model.class_name or model.model_type, model_source=source, dtype=dtype,
                        batch_size=batch_size, prompt_len=prompt_len)
    return {"model": model, "workload": workload}


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
