"""`kernelscope profile`: run a model, record it, attribute every kernel, write a run directory."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from kernelscope.analyze.attribution import attribute
from kernelscope.analyze.graph_replays import attribute_graph_replays
from kernelscope.capture.environment import describe_hardware, describe_software
from kernelscope.capture.torch_profiler import gzip_file, record
from kernelscope.commands.finish import write_run_directory
from kernelscope.errors import UserError
from kernelscope.load import rundir
from kernelscope.load.kineto import load_kineto
from kernelscope.load.profile import Profile
from kernelscope.progress import SILENT, Steps
from kernelscope.workload.annotate import GenerationAnnotator
from kernelscope.workload.engine_backend import EngineWorkload
from kernelscope.workload.generation import (
    GenerationSettings,
    RunTimes,
    decoding_description,
    summarize_times,
    timed_generate,
)
from kernelscope.workload.inputs import ImageRequest, WorkloadInputs, text_inputs, vision_inputs
from kernelscope.workload.model import (
    build_config,
    build_model,
    dtype_name,
    max_positions,
    parse_dtype,
    resolve_model_source,
)
from kernelscope.workload.structure import describe_model
from kernelscope.workload.vision import ImageSettings, stage_modules, vision_spec

GPU_DEFAULT_MODEL = "qwen2-1.5b"
BACKENDS = ("hf", "engine")
CPU_DEFAULT_MODEL = "tiny"


@dataclass(frozen=True)
class ProfileOptions:
    model: str | None = None
    backend: str = "hf"  # hf: transformers generate(); engine: kernelscope.engine
    device: str | None = None
    dtype: str | None = None
    batch_size: int = 1
    prompt_len: int | None = None  # default 128 (text models); vision models take the processor's length
    new_tokens: int = 64
    warmup: int = 1
    repeats: int = 3
    seed: int = 0
    temperature: float = 0.0
    no_repeat_ngram_size: int = 0
    image_paths: tuple[Path, ...] = ()
    images: int | None = None  # synthetic images (vision models; default 1)
    base_size: int = 1024
    image_size: int = 768
    crop_mode: bool = True
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
    if options.backend not in BACKENDS:
        raise UserError(f"--backend: unknown backend '{options.backend}' (choose from {', '.join(BACKENDS)})")
    engine = options.backend == "engine"
    if engine and options.no_repeat_ngram_size:
        raise UserError("--no-repeat-ngram-size: not supported by --backend engine")
    device = resolve_device(options.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    model_name = options.model or (GPU_DEFAULT_MODEL if device.type == "cuda" else CPU_DEFAULT_MODEL)
    dtype = parse_dtype(options.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    source = resolve_model_source(model_name)
    config = build_config(source)
    if engine:
        EngineWorkload.check(config, source.name)
    spec = vision_spec(config)
    request = ImageRequest(tuple(options.image_paths), options.images,
                           ImageSettings(options.base_size, options.image_size, options.crop_mode))
    settings = GenerationSettings(options.batch_size, options.prompt_len or 128, options.new_tokens, options.seed,
                                  options.temperature, options.no_repeat_ngram_size)
    settings.validate(max_positions(config))
    if spec is None:
        inputs = text_inputs(settings, config, device, request, source.name)
    else:
        if options.batch_size != 1 or options.prompt_len is not None:
            raise UserError(f"--batch-size/--prompt-len: {spec.name} runs one generation per image, its prompt "
                            "made by the processor (use --images N or --image PATH…)")
        with steps.step(f"Preparing images for {spec.name}"):
            inputs = vision_inputs(spec, config, source.checkpoint, request, options.seed, device, dtype)
        for image in inputs.images:
            settings.validate_length(image["prompt_tokens"], max_positions(config), f"{image['source']}: prompt")
        settings = GenerationSettings(1, inputs.prompt_len, options.new_tokens, options.seed, options.temperature,
                                      options.no_repeat_ngram_size)
    hardware = describe_hardware(device)
    target = options.out or rundir.default_run_path(options.runs_dir, source.name, hardware.get("name") or device.type)
    if target.exists():
        raise UserError(f"{target}: already exists (choose another --out or remove it)")

    with steps.step(f"Building {source.name} ({source.kind}, {dtype_name(dtype)}) on {device}"):
        torch.manual_seed(options.seed)
        if engine:
            workload = EngineWorkload.build(source, config, device, dtype, settings.prompt_len + settings.new_tokens)
            model_info = workload.describe(config)
        else:
            model = build_model(source, config, device, dtype)
            if spec is not None:
                inputs.stages = stage_modules(model, spec)
            model_info = describe_model(model, config, inputs.stages)
    count = len(inputs.generations)
    per_image = spec is not None

    def one(index: int, annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        if engine:
            return workload.generate(inputs.generations[index], settings, annotated)
        annotator = GenerationAnnotator(model, stages=inputs.stages, generation=index if per_image else None) \
            if annotated else None
        return timed_generate(model, inputs.generations[index], settings, annotator)

    with steps.step("Warm-up", total=options.warmup * count) as advance:
        for _ in range(options.warmup):
            for index in range(count):
                one(index, annotated=False)
                advance()
    plain_runs: list[list[RunTimes]] = [[] for _ in range(count)]
    annotated_runs: list[list[RunTimes]] = [[] for _ in range(count)]
    tokens_plain: list[torch.Tensor] = []
    first_plain: list[torch.Tensor] = []
    tokens_match = True
    tokens_repeatable: bool | None = None  # plain runs of one input agree with each other (needs ≥ 2 repeats)
    with steps.step("Timing without the profiler", total=2 * options.repeats * count) as advance:
        # Alternate plain and annotated runs so drifts (clocks, caches) hit both alike.
        for _ in range(options.repeats):
            tokens_plain = []
            for index in range(count):
                plain, times = one(index, annotated=False)
                plain_runs[index].append(times)
                advance()
                annotated, times = one(index, annotated=True)
                annotated_runs[index].append(times)
                advance()
                tokens_plain.append(plain)
                tokens_match = tokens_match and bool(torch.equal(plain, annotated))
            if first_plain:
                same = all(bool(torch.equal(a, b)) for a, b in zip(first_plain, tokens_plain, strict=True))
                tokens_repeatable = same and tokens_repeatable is not False
            else:
                first_plain = tokens_plain
    timings = _timings(plain_runs, annotated_runs, tokens_match, per_image)
    timings["tokens_repeatable"] = tokens_repeatable

    with rundir.staged_directory(target) as tmp:
        trace_json = tmp / "trace.json"
        what = f"{count} generations (one per image)" if per_image else "one generation"
        with steps.step(f"Profiling {what} with torch.profiler"):
            profiled, capture = record(lambda: [one(index, annotated=True) for index in range(count)], device,
                                       trace_json)
        capture["nvtx"] = device.type == "cuda"
        timings["profiled_tokens_match"] = all(
            bool(torch.equal(plain, tokens)) for plain, (tokens, _) in zip(tokens_plain, profiled, strict=True))
        json_bytes = trace_json.stat().st_size
        with steps.step(f"Loading and attributing the trace ({json_bytes / 1e6:.1f} MB)"):
            tables = load_kineto(trace_json)
            kernels, ops = attribute(tables)
            kernels, graph_replays = attribute_graph_replays(kernels)
        with steps.step("Compressing the trace"):
            # A trace of many generations runs to gigabytes: compress it fast rather than small.
            gzip_file(trace_json, tmp / rundir.TRACE, level=1 if json_bytes > 256e6 else 6)
            trace_json.unlink()
        run = {
            "source": "profile",
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "workload": {**_workload(options, source, model_name, settings, dtype, device, inputs, request),
                         **({"backend": "engine", "backend_description": workload.description()} if engine else {})},
            "model": model_info,
            "hardware": hardware,
            "software": describe_software(),
            "capture": capture,
            "timings": timings,
            "trace": _trace_info(tables.meta, json_bytes),
            **({"graph_replays": graph_replays} if graph_replays else {}),
        }
        with steps.step("Writing tables and report"):
            write_run_directory(tmp, Profile(kernels=kernels, ops=ops, run=run), report=options.report,
                                languages=options.languages)
    return target.resolve()


def _timings(plain: list[list[RunTimes]], annotated: list[list[RunTimes]], tokens_match: bool,
             per_image: bool) -> dict[str, Any]:
    """Medians over every timed generation (of every image); per image too on runs of one generation per image."""
    plain_summary = summarize_times([t for runs in plain for t in runs])
    annotated_summary = summarize_times([t for runs in annotated for t in runs])
    overhead = 100.0 * (annotated_summary["e2e_ms"] / plain_summary["e2e_ms"] - 1.0)
    timings = {
        "plain": plain_summary,
        "annotated": annotated_summary,
        "annotation_overhead_pct": overhead,
        "tokens_match": bool(tokens_match),
    }
    if per_image:
        keep = ("ttft_ms", "tpot_ms", "e2e_ms", "repeats")
        timings["images"] = [{key: summarize_times(runs)[key] for key in keep} for runs in plain]
    return timings


def _workload(
    options: ProfileOptions,
    source: Any,
    model_name: str,
    settings: GenerationSettings,
    dtype: torch.dtype,
    device: torch.device,
    inputs: WorkloadInputs,
    request: ImageRequest,
) -> dict[str, Any]:
    vision = {**inputs.workload_keys(), **request.describe()} if inputs.spec is not None else {}
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
        "decoding": decoding_description(settings),
        "temperature": settings.temperature,
        "no_repeat_ngram_size": settings.no_repeat_ngram_size,
        "seed": settings.seed,
        "warmup": options.warmup,
        "repeats": options.repeats,
        **vision,
    }


def _trace_info(meta: dict[str, Any], json_bytes: int) -> dict[str, Any]:
    keep = ("event_count", "schema_version", "cuda_runtime_version", "cuda_driver_version", "cupti_version",
            "base_time_ns", "origin_us", "device_properties")
    info = {key: meta.get(key) for key in keep}
    info["json_bytes"] = json_bytes
    info["file"] = rundir.TRACE
    return info
