"""What `kernelscope profile` decides before and around a recording, shared by a run on one device and each rank
of a run on several (commands/profile_ranks.py): the options, the plan (device, model, inputs; bad arguments fail
before anything is built), the workload session, its timings without the profiler, and run.json's workload."""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelscope.errors import UserError

if TYPE_CHECKING:
    import torch

    from kernelscope.contracts.run_info import Workload
    from kernelscope.contracts.trace_records import EnergyInfo
    from kernelscope.workload.generation import GenerationSettings
    from kernelscope.workload.inputs import ImageRequest, WorkloadInputs
    from kernelscope.workload.model import ModelSource
    from kernelscope.workload.session import WorkloadSession
    from kernelscope.workload.timing import TimedRuns

GPU_DEFAULT_MODEL = "qwen2-1.5b"
CPU_DEFAULT_MODEL = "tiny"
BACKENDS = ("hf", "engine")


@dataclass(frozen=True)
class ProfileOptions:
    model: str | None = None
    backend: str = "hf"  # hf: transformers generate(); engine: kernelscope.engine
    device: str | None = None
    dtype: str | None = None
    batch_size: int = 1
    prompt_len: int | None = None  # default 128 (text models); vision models take the processor's length
    new_tokens: int = 64
    layers: int | None = None  # a preset's depth (num_hidden_layers); None: the preset's own
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
    stack: bool = False  # record Python frames: every kernel gets its source line
    energy: bool = False  # sample the board's energy counter and power over more plain generations
    gpus: int = 1  # processes on this node (one per GPU); > 1 or nnodes > 1 runs commands/profile_ranks.py
    tp: int | None = None  # tensor-parallel degree (default: the world size when several ranks run)
    ep: int = 1  # expert-parallel degree
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    out: Path | None = None
    runs_dir: Path = Path("runs")
    report: bool = True
    languages: tuple[str, ...] = ("en", "zh")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ProfileOptions:
        return cls(
            model=args.model, backend=args.backend, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
            prompt_len=args.prompt_len, new_tokens=args.new_tokens, layers=args.layers, warmup=args.warmup, repeats=args.repeats,
            seed=args.seed, temperature=args.temperature, no_repeat_ngram_size=args.no_repeat_ngram_size,
            image_paths=tuple(args.image_paths), images=args.images, base_size=args.base_size,
            image_size=args.image_size, crop_mode=args.crop_mode, stack=args.stack,
            energy=getattr(args, "energy", False), gpus=args.gpus, tp=args.tp,
            ep=args.ep, nnodes=args.nnodes, node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
            out=args.out, runs_dir=args.runs_dir, report=not args.no_report, languages=args.lang,
        )


@dataclass
class Plan:
    """Everything decided before a model is built: where, what, with which inputs, into which directory."""

    device: torch.device
    dtype: torch.dtype
    model_name: str
    source: ModelSource
    config: Any
    settings: GenerationSettings
    inputs: WorkloadInputs
    request: ImageRequest
    target: Path

    @property
    def per_image(self) -> bool:
        return self.inputs.spec is not None


def plan_workload(options: ProfileOptions, steps, target: Path | None = None) -> Plan:
    """Check the options and prepare the inputs; nothing is built yet, so bad input fails fast. `target`: the
    directory decided already (a rank of a multi-process run writes into its parent's)."""
    import torch

    from kernelscope.capture.environment import describe_hardware
    from kernelscope.workload.devices import resolve_device
    from kernelscope.workload.engine_backend import EngineWorkload
    from kernelscope.workload.memory_check import check_weights_fit
    from kernelscope.workload.model import build_config, parse_dtype, resolve_model_source

    if options.warmup < 0 or options.repeats < 1:
        raise UserError("--warmup must be ≥ 0 and --repeats ≥ 1")
    if options.backend not in BACKENDS:
        raise UserError(f"--backend: unknown backend '{options.backend}' (choose from {', '.join(BACKENDS)})")
    if options.backend == "engine" and options.no_repeat_ngram_size:
        raise UserError("--no-repeat-ngram-size: not supported by --backend engine")
    device = resolve_device(options.device)
    if device.type == "cuda" and device.index is not None:
        torch.cuda.set_device(device)
    if options.energy:
        check_energy(options, device)
    model_name = options.model or (GPU_DEFAULT_MODEL if device.type == "cuda" else CPU_DEFAULT_MODEL)
    dtype = parse_dtype(options.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    source = resolve_model_source(model_name)
    config = build_config(source, options.layers)
    if options.backend == "engine":
        EngineWorkload.check(config, source.name)
    if target is None:  # a rank of a multi-process run: its parent checked the split already
        check_weights_fit(source.name, config, dtype, device)
    settings, inputs, request = _inputs(options, config, source, device, dtype, steps)
    if target is None:
        target = run_target(options, source.name, describe_hardware(device).name or device.type)
    return Plan(device, dtype, model_name, source, config, settings, inputs, request, target)


def run_target(options: ProfileOptions, model_name: str, device_name: str) -> Path:
    """--out, or a new folder under --runs-dir named after the model and the device; never an existing one."""
    from kernelscope.load import rundir

    target = options.out or rundir.default_run_path(options.runs_dir, model_name, device_name)
    if target.exists():
        raise UserError(f"{target}: already exists (choose another --out or remove it)")
    return target


def _inputs(options: ProfileOptions, config: Any, source: ModelSource, device: torch.device, dtype: torch.dtype,
            steps) -> tuple[GenerationSettings, WorkloadInputs, ImageRequest]:
    """Generation settings and inputs: a random prompt, or one generation per image through the processor."""
    from kernelscope.workload.generation import GenerationSettings
    from kernelscope.workload.inputs import ImageRequest, text_inputs, vision_inputs
    from kernelscope.workload.model import max_positions
    from kernelscope.workload.vision import ImageSettings, vision_spec

    spec = vision_spec(config)
    request = ImageRequest(tuple(options.image_paths), options.images,
                           ImageSettings(options.base_size, options.image_size, options.crop_mode))
    settings = GenerationSettings(options.batch_size, options.prompt_len or 128, options.new_tokens, options.seed,
                                  options.temperature, options.no_repeat_ngram_size)
    settings.validate(max_positions(config))
    if spec is None:
        return settings, text_inputs(settings, config, device, request, source.name), request
    if options.batch_size != 1 or options.prompt_len is not None:
        raise UserError(f"--batch-size/--prompt-len: {spec.name} runs one generation per image, its prompt "
                        "made by the processor (use --images N or --image PATH…)")
    with steps.step(f"Preparing images for {spec.name}"):
        inputs = vision_inputs(spec, config, source.checkpoint, request, options.seed, device, dtype)
    for image in inputs.images or []:
        settings.validate_length(image.prompt_tokens or 0, max_positions(config), f"{image.source}: prompt")
    settings = GenerationSettings(1, inputs.prompt_len, options.new_tokens, options.seed, options.temperature,
                                  options.no_repeat_ngram_size)
    return settings, inputs, request


def build_session(plan: Plan, options: ProfileOptions, steps, build=None) -> WorkloadSession:
    """The workload, ready to generate. `build(plan)`: how to make the model where not on one device (a rank of
    a tensor-parallel run); by default build_model."""
    import torch

    from kernelscope.workload.engine_backend import EngineWorkload
    from kernelscope.workload.model import build_model, dtype_name
    from kernelscope.workload.session import EngineSession, HFSession
    from kernelscope.workload.vision import stage_modules

    source = plan.source
    with steps.step(f"Building {source.name} ({source.kind}, {dtype_name(plan.dtype)}) on {plan.device}"):
        torch.manual_seed(options.seed)
        if options.backend == "engine":
            max_len = plan.settings.prompt_len + plan.settings.new_tokens
            engine = EngineWorkload.build(source, plan.config, plan.device, plan.dtype, max_len)
            return EngineSession(engine, plan.inputs, plan.settings, engine.describe(plan.config))
        model = build(plan) if build is not None else build_model(source, plan.config, plan.device, plan.dtype)
        if plan.inputs.spec is not None:
            plan.inputs.stages = stage_modules(model, plan.inputs.spec)
        return HFSession.build(model, plan.config, plan.inputs, plan.settings)


def time_session(session: WorkloadSession, options: ProfileOptions, per_image: bool, steps) -> TimedRuns:
    from kernelscope.workload.timing import time_generations, warm_up

    count = session.generations
    with steps.step("Warm-up", total=options.warmup * count) as advance:
        warm_up(session, options.warmup, advance)
    with steps.step("Timing without the profiler", total=2 * options.repeats * count) as advance:
        return time_generations(session, options.repeats, per_image, advance)


def check_energy(options: ProfileOptions, device: torch.device) -> None:
    """--energy reads one CUDA GPU's board counter: refused elsewhere, and NVML opened once so that a missing
    library fails before the model is built."""
    import torch

    from kernelscope.capture.energy import EnergyMeter

    if device.type != "cuda":
        raise UserError(f"--energy: needs a CUDA GPU (the board's energy counter), the run is on {device}")
    if options.gpus > 1 or options.nnodes > 1:
        raise UserError("--energy: one GPU per run (--gpus 1)")
    EnergyMeter(device.index if device.index is not None else torch.cuda.current_device()).close()


def energy_pass(session: WorkloadSession, plan: Plan, options: ProfileOptions, steps) -> MeasuredEnergy:
    """--repeats more plain generations, the energy counter and power sampled: run.json's `energy`, the samples
    and the windows with their joules."""
    import polars as pl
    import torch

    from kernelscope.analyze.energy import counter_updates, energy_info
    from kernelscope.capture.energy_pass import measure_energy
    from kernelscope.contracts.energy_tables import POWER_SCHEMA, WINDOW_SCHEMA

    settings = plan.settings
    prompts = [settings.batch_size * ((image.prompt_tokens or settings.prompt_len) if plan.per_image
                                      else settings.prompt_len)
               for image in (plan.inputs.images or [None] * session.generations)]
    index = plan.device.index if plan.device.index is not None else torch.cuda.current_device()
    prefill_session = dataclasses.replace(session, settings=dataclasses.replace(settings, new_tokens=1))
    with steps.step("Measuring energy (board counter and power)", total=options.repeats * session.generations) \
            as advance:
        captured = measure_energy(session, prefill_session, options.repeats, index, prompts, advance)
    samples = pl.DataFrame(vars(captured.samples), schema=POWER_SCHEMA)
    windows = pl.DataFrame(vars(captured.windows), schema=WINDOW_SCHEMA)
    if len(counter_updates(samples)[0]) < 2:
        raise UserError(f"--energy: the board's energy counter did not change over the {samples.height} reads of the "
                        "energy pass: nothing to measure")
    info, windows = energy_info(samples, windows, captured.stages, options.repeats, session.generations,
                                captured.interval_s)
    return MeasuredEnergy(info, samples, windows)


@dataclass
class MeasuredEnergy:
    info: EnergyInfo
    samples: Any  # power.parquet's rows (pl.DataFrame)
    windows: Any  # energy.parquet's rows


def workload_record(options: ProfileOptions, plan: Plan, session: WorkloadSession) -> Workload:
    import msgspec

    from kernelscope.contracts.run_info import Workload
    from kernelscope.workload.generation import decoding_description
    from kernelscope.workload.model import dtype_name

    source, settings = plan.source, plan.settings
    vision: dict[str, Any] = {}
    if plan.per_image:
        vision = {"prompt": plan.inputs.spec.prompt, "images": plan.inputs.images or [],
                  "stages": list(plan.inputs.stages.values()), **plan.request.describe()}
    workload = Workload(
        backend=session.backend,
        backend_description=session.description,
        model=plan.model_name,
        model_source=source.kind if source.checkpoint is None else f"checkpoint {source.checkpoint}",
        model_path=str(source.checkpoint.resolve()) if source.checkpoint is not None else None,
        dtype=dtype_name(plan.dtype),
        device=str(plan.device),
        batch_size=settings.batch_size,
        prompt_len=settings.prompt_len,
        new_tokens=settings.new_tokens,
        decoding=decoding_description(settings),
        temperature=settings.temperature,
        no_repeat_ngram_size=settings.no_repeat_ngram_size,
        seed=settings.seed,
        warmup=options.warmup,
        repeats=options.repeats,
    )
    return msgspec.structs.replace(workload, **vision)
