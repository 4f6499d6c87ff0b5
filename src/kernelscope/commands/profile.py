"""`kernelscope profile`: run a model, record it, attribute every kernel, write a run directory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from kernelscope.analyze.attribution import attribute
from kernelscope.capture.environment import describe_hardware, describe_software
from kernelscope.capture.torch_profiler import gzip_file, record
from kernelscope.commands.finish import write_run_directory
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.kineto import load_kineto
from kernelscope.load.profile import Profile
from kernelscope.progress import SILENT, Steps
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.generation import (
    GenerationSettings,
    RunTimes,
    make_prompt,
    summarize_times,
    timed_generate,
)
from kernelscope.workload.model import (
    build_config,
    build_model,
    dtype_name,
    max_positions,
    parse_dtype,
    resolve_model_source,
)
from kernelscope.workload.structure import describe_model

GPU_DEFAULT_MODEL = "qwen2-1.5b"
CPU_DEFAULT_MODEL = "tiny"


@dataclass(frozen=True)
class ProfileOptions:
    model: str | None = None
    device: str | None = None
    dtype: str | None = None
    batch_size: int = 1
    prompt_len: int = 128
    new_tokens: int = 64
    warmup: int = 1
    repeats: int = 3
    seed: int = 0
    out: Path | None = None
    runs_dir: Path = Path("runs")
    report: bool = True
    languages: tuple[str, ...] = ("en", "zh")


def resolve_device(name: str | None) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"--device: unknown device '{name}' (use cpu, cuda or cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError("--device cuda: no CUDA GPU is available to this process")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif device.type != "cpu":
        raise UserError(f"--device: unsupported device type '{device.type}' (use cpu or cuda)")
    return device


def run_profile(options: ProfileOptions, steps: Steps = SILENT) -> Path:
    if options.warmup < 0 or options.repeats < 1:
        raise UserError("--warmup must be ≥ 0 and --repeats ≥ 1")
    device = resolve_device(options.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    model_name = options.model or (GPU_DEFAULT_MODEL if device.type == "cuda" else CPU_DEFAULT_MODEL)
    dtype = parse_dtype(options.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    source = resolve_model_source(model_name)
    settings = GenerationSettings(options.batch_size, options.prompt_len, options.new_tokens, options.seed)
    config = build_config(source)
    settings.validate(max_positions(config))
    hardware = describe_hardware(device)
    target = options.out or rundir.default_run_path(options.runs_dir, source.name, hardware.get("name") or device.type)
    if target.exists():
        raise UserError(f"{target}: already exists (choose another --out or remove it)")

    with steps.step(f"Building {source.name} ({source.kind}, {dtype_name(dtype)}) on {device}"):
        torch.manual_seed(options.seed)
        model = build_model(source, config, device, dtype)
        model_info = describe_model(model, config)
    input_ids = make_prompt(settings, config.vocab_size, device)

    def one(annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        return timed_generate(model, input_ids, settings, GenerationAnnotator(model) if annotated else None)

    with steps.step("Warm-up", total=options.warmup) as advance:
        for _ in range(options.warmup):
            one(annotated=False)
            advance()
    plain_runs, annotated_runs = [], []
    with steps.step("Timing without the profiler", total=2 * options.repeats) as advance:
        # Alternate plain and annotated runs so drifts (clocks, caches) hit both alike.
        for _ in range(options.repeats):
            tokens_plain, times = one(annotated=False)
            plain_runs.append(times)
            advance()
            tokens_annotated, times = one(annotated=True)
            annotated_runs.append(times)
            advance()
    timings = _timings(plain_runs, annotated_runs, torch.equal(tokens_plain, tokens_annotated))

    with rundir.staged_directory(target) as tmp:
        trace_json = tmp / "trace.json"
        with steps.step("Profiling one generation with torch.profiler"):
            (tokens_profiled, _), capture = record(lambda: one(annotated=True), device, trace_json)
        capture["nvtx"] = device.type == "cuda"
        timings["profiled_tokens_match"] = bool(torch.equal(tokens_plain, tokens_profiled))
        json_bytes = trace_json.stat().st_size
        with steps.step(f"Loading and attributing the trace ({json_bytes / 1e6:.1f} MB)"):
            tables = load_kineto(trace_json)
            kernels, ops = attribute(tables)
        with steps.step("Compressing the trace"):
            gzip_file(trace_json, tmp / rundir.TRACE)
            trace_json.unlink()
        run = {
            "source": "profile",
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "workload": _workload(options, source, model_name, settings, dtype, device),
            "model": model_info,
            "hardware": hardware,
            "software": describe_software(),
            "capture": capture,
            "timings": timings,
            "trace": _trace_info(tables.meta, json_bytes),
        }
        with steps.step("Writing tables and report"):
            write_run_directory(tmp, Profile(kernels=kernels, ops=ops, run=run), report=options.report,
                                languages=options.languages)
    return target.resolve()


def _timings(plain: list[RunTimes], annotated: list[RunTimes], tokens_match: bool) -> dict[str, Any]:
    plain_summary = summarize_times(plain)
    annotated_summary = summarize_times(annotated)
    overhead = 100.0 * (annotated_summary["e2e_ms"] / plain_summary["e2e_ms"] - 1.0)
    return {
        "plain": plain_summary,
        "annotated": annotated_summary,
        "annotation_overhead_pct": overhead,
        "tokens_match": bool(tokens_match),
    }


def _workload(
    options: ProfileOptions,
    source: Any,
    model_name: str,
    settings: GenerationSettings,
    dtype: torch.dtype,
    device: torch.device,
) -> dict[str, Any]:
    return {
        "backend": "hf",
        "backend_description": "transformers generate()",
        "model": model_name,
        "model_source": source.kind if source.checkpoint is None else f"checkpoint {source.checkpoint}",
        "model_path": str(source.checkpoint.resolve()) if source.checkpoint is not None else None,
        "dtype": dtype_name(dtype),
        "device": str(device),
        "batch_size": settings.batch_size,
        "prompt_len": settings.prompt_len,
        "new_tokens": settings.new_tokens,
        "decoding": "greedy, EOS ignored",
        "seed": settings.seed,
        "warmup": options.warmup,
        "repeats": options.repeats,
    }


def _trace_info(meta: dict[str, Any], json_bytes: int) -> dict[str, Any]:
    keep = ("event_count", "schema_version", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
            "base_time_ns", "origin_us", "device_properties")
    info = {key: meta.get(key) for key in keep}
    info["json_bytes"] = json_bytes
    info["file"] = rundir.TRACE
    return info
