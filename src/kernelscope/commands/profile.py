"""`kernelscope profile`: run a model, record it, attribute every kernel, write a run directory.

The steps: plan the workload (device, model, inputs; bad arguments fail before anything is built), build a
workload session (transformers or kernelscope's engine, workload/session.py), time it without the profiler,
record one more run with torch.profiler (capture/), read and attribute the trace (load/, analyze/), and write the
run directory with its report (pipeline.py). Heavy libraries are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import contextlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelscope.commands.arguments import add_output_args, positive_int
from kernelscope.errors import UserError

if TYPE_CHECKING:
    import torch

    from kernelscope.capture.torch_profiler import BackgroundGzip
    from kernelscope.contracts.run import Run
    from kernelscope.contracts.run_info import Workload
    from kernelscope.workload.generation import GenerationSettings
    from kernelscope.workload.inputs import ImageRequest, WorkloadInputs
    from kernelscope.workload.model import ModelSource
    from kernelscope.workload.session import WorkloadSession
    from kernelscope.workload.timing import TimedRuns

GPU_DEFAULT_MODEL = "qwen2-1.5b"
CPU_DEFAULT_MODEL = "tiny"
BACKENDS = ("hf", "engine")

HELP = "run a model, record every kernel, write a run directory and a report"
DESCRIPTION = (
    "Run a model with transformers generate() (or kernelscope's engine: --backend engine), record it "
    "with torch.profiler, attribute every kernel to phase / decode step / layer / module / op, and write a run "
    "directory with a report. Defaults: on a CUDA GPU qwen2-1.5b in bfloat16; on CPU the tiny preset in float32; "
    "batch 1, prompt 128, 64 new tokens."
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="preset name (see `kernelscope presets`) or a local HF checkpoint directory")
    p.add_argument("--backend", choices=BACKENDS, default="hf",
                   help="hf: transformers generate() (default); engine: kernelscope's own engine (Qwen2 and Llama; "
                        "Triton kernels and a CUDA-graph decode on GPU, PyTorch reference ops on CPU)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda if available, else cpu)")
    p.add_argument("--dtype", help="bfloat16/bf16, float16/fp16 or float32/fp32 (default: bf16 on GPU, fp32 on CPU)")
    p.add_argument("--batch-size", type=positive_int, default=1, help="sequences per batch (default 1)")
    p.add_argument("--prompt-len", type=positive_int,
                   help="prompt tokens (default 128; vision models: the processor's)")
    p.add_argument("--new-tokens", type=positive_int, default=64, help="tokens to generate, EOS ignored (default 64)")
    p.add_argument("--layers", type=positive_int, metavar="N",
                   help="decoder layers of a preset, at its full width (default: the preset's own; a checkpoint "
                        "keeps the depth of its weights)")
    p.add_argument("--temperature", type=float, default=0.0,
                   help="0: greedy (default); above 0: sample at this temperature, seeded by --seed")
    p.add_argument("--no-repeat-ngram-size", type=positive_int, default=0, metavar="N",
                   help="ban repeated N-grams as transformers does (default 0: off)")
    p.add_argument("--warmup", type=positive_int, default=1, help="unprofiled warm-up generations (default 1)")
    p.add_argument("--repeats", type=positive_int, default=3,
                   help="timed generations per mode, without the profiler; medians and their spread (min, max, coefficient of variation) are reported, and compare calls a change significant only beyond it (default 3)")
    p.add_argument("--seed", type=int, default=0, help="seed for random weights and prompt ids (default 0)")
    p.add_argument("--stack", action="store_true",
                   help="record Python stacks too (torch.profiler with_stack): the report then names the source line "
                        "of every kernel; the trace grows several times")
    d = p.add_argument_group("several GPUs (docs/multi-gpu.md)")
    d.add_argument("--gpus", type=positive_int, default=1, metavar="N",
                   help="processes on this node, one per GPU, started like torchrun (NCCL; on CPU: N processes over "
                        "gloo); the run holds every rank (default 1)")
    d.add_argument("--tp", type=positive_int, metavar="N",
                   help="tensor-parallel degree: transformers' own tp_plan (default: every rank when --gpus > 1)")
    d.add_argument("--ep", type=positive_int, default=1, metavar="N",
                   help="expert-parallel degree for MoE models: transformers' expert-parallel plan (default 1)")
    d.add_argument("--nnodes", type=positive_int, default=1, metavar="N",
                   help="nodes of a multi-node job; run the same command on each node (default 1)")
    d.add_argument("--node-rank", type=int, default=0, metavar="K", help="this node's index, 0 … nnodes−1")
    d.add_argument("--rdzv-endpoint", metavar="HOST:PORT",
                   help="node 0's address and a free port, the same on every node (needed when --nnodes > 1)")
    v = p.add_argument_group("images (vision models such as deepseek-ocr-2; see docs/ocr.md)")
    v.add_argument("--image", nargs="+", type=Path, default=[], metavar="PATH", dest="image_paths",
                   help="image files or directories of them: one generation per image")
    v.add_argument("--images", type=positive_int, metavar="N",
                   help="synthetic document pages drawn from --seed, one generation each (default 1)")
    v.add_argument("--base-size", type=positive_int, default=1024, help="side of the global view (default 1024)")
    v.add_argument("--image-size", type=positive_int, default=768,
                   help="side of each crop, the processor's tile_size (default 768)")
    v.add_argument("--crop-mode", action=argparse.BooleanOptionalAction, default=True,
                   help="also cut large images into crops (default: on)")
    add_output_args(p)


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
            image_size=args.image_size, crop_mode=args.crop_mode, stack=args.stack, gpus=args.gpus, tp=args.tp,
            ep=args.ep, nnodes=args.nnodes, node_rank=args.node_rank, rdzv_endpoint=args.rdzv_endpoint,
            out=args.out, runs_dir=args.runs_dir, report=not args.no_report, languages=args.lang,
        )


def run(args: argparse.Namespace, steps) -> int:
    path = run_profile(ProfileOptions.from_args(args), steps)
    if not getattr(args, "quiet", False):
        from kernelscope.commands.run_summary import terminal_summary

        print(terminal_summary(path))
    print(path)  # the last line: the run directory, absolute
    return 0


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


def run_profile(options: ProfileOptions, steps=None) -> Path:
    from kernelscope.load import staging
    from kernelscope.pipeline import write_run_directory
    from kernelscope.progress import SILENT

    steps = steps or SILENT
    if options.gpus > 1 or options.nnodes > 1:
        from kernelscope.commands.profile_ranks import run_ranks

        return run_ranks(options, steps)
    plan = _plan(options, steps)
    _warm_up_helpers(options)
    session = _build_session(plan, options, steps)
    timed = _time(session, options, plan.per_image, steps)
    with staging.staged_directory(plan.target) as tmp:
        run, compressing = _record(session, plan, options, timed, tmp, steps)
        try:
            with steps.step("Writing tables and report"):
                write_run_directory(tmp, run, report=options.report, languages=options.languages)
        finally:  # the trace was compressed meanwhile; on failure too, before the staging goes
            with steps.step("Finishing the trace's compression"):
                compressing.finish()
    return plan.target.resolve()


def _warm_up_helpers(options: ProfileOptions) -> None:
    """The fork server started while the model is built and run, loading the trace reader and (with a report)
    matplotlib: the chunk and figure helpers start at once after the model's runs."""
    from kernelscope.report.figure_jobs import start_fork_server

    start_fork_server(["kernelscope.load.kineto.chunks"], with_figures=options.report)


def _plan(options: ProfileOptions, steps, target: Path | None = None) -> Plan:
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


def _build_session(plan: Plan, options: ProfileOptions, steps, build=None) -> WorkloadSession:
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


def _time(session: WorkloadSession, options: ProfileOptions, per_image: bool, steps) -> TimedRuns:
    from kernelscope.workload.timing import time_generations, warm_up

    count = session.generations
    with steps.step("Warm-up", total=options.warmup * count) as advance:
        warm_up(session, options.warmup, advance)
    with steps.step("Timing without the profiler", total=2 * options.repeats * count) as advance:
        return time_generations(session, options.repeats, per_image, advance)


def _record(session: WorkloadSession, plan: Plan, options: ProfileOptions, timed: TimedRuns, tmp: Path,
            steps) -> tuple[Run, BackgroundGzip]:
    """One more run of every generation under torch.profiler; its trace read, attributed and kept (gzipped on
    a thread while the caller writes the run: finish() the handle returned)."""
    import msgspec
    import torch

    from kernelscope.analyze.attribution import attribute
    from kernelscope.analyze.attribution_sources import attribution_info, infer_attribution
    from kernelscope.analyze.graph_replays import attribute_graph_replays
    from kernelscope.analyze.integrity import audit_trace
    from kernelscope.capture.environment import describe_hardware, describe_software
    from kernelscope.capture.torch_profiler import BackgroundGzip, record, trace_gzip_level
    from kernelscope.contracts.run import Run
    from kernelscope.contracts.run_info import SCHEMA_VERSION, RunInfo
    from kernelscope.load import rundir
    from kernelscope.load.kineto import load_kineto
    from kernelscope.load.sources import profiled_trace

    trace_json = tmp / "trace.json"
    count = session.generations
    what = f"{count} generations (one per image)" if plan.per_image else "one generation"
    with steps.step(f"Profiling {what} with torch.profiler"):
        profiled, capture = record(lambda: [session.generate(i, annotated=True) for i in range(count)],
                                   plan.device, trace_json, with_stack=options.stack)
    matched = all(bool(torch.equal(plain, tokens))
                  for plain, (tokens, _) in zip(timed.last_plain_tokens, profiled, strict=True))
    json_bytes = trace_json.stat().st_size
    compressing = BackgroundGzip(trace_json, tmp / rundir.TRACE, trace_gzip_level(json_bytes))
    try:
        with steps.step(f"Loading and attributing the trace ({json_bytes / 1e6:.1f} MB)"):
            tables = load_kineto(trace_json)
            tables.meta.audit = audit_trace(tables)
            kernels, ops = attribute(tables)
            kernels, sources = infer_attribution(kernels, ops)
            kernels, graph_replays = attribute_graph_replays(kernels)
    except BaseException:
        with contextlib.suppress(Exception):
            compressing.finish()  # the thread stops writing into the staging directory before it goes
        raise
    info = RunInfo(
        schema_version=SCHEMA_VERSION,
        source="profile",
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        workload=_workload(options, plan, session),
        model=session.model_info,
        hardware=describe_hardware(plan.device),
        software=describe_software(),
        capture=msgspec.structs.replace(capture, nvtx=plan.device.type == "cuda"),
        timings=msgspec.structs.replace(timed.timings, profiled_tokens_match=matched),
        trace=profiled_trace(tables.meta, json_bytes, rundir.TRACE),
        graph_replays=graph_replays,
        attribution=attribution_info(kernels, [sources]),
    )
    return Run(info=info, kernels=kernels, ops=ops), compressing


def _workload(options: ProfileOptions, plan: Plan, session: WorkloadSession) -> Workload:
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
