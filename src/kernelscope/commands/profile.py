"""`kernelscope profile`: run a model, record it, attribute every kernel, write a run directory.

The steps: plan the workload (device, model, inputs; bad arguments fail before anything is built), build a
workload session (transformers or kernelscope's engine) and time it without the profiler (profile_plan.py),
record one more run with torch.profiler (capture/), read and attribute the trace (load/, analyze/), and write the
run directory with its report (pipeline.py). Heavy libraries are imported inside the functions that need them.
"""

from __future__ import annotations

import argparse
import contextlib
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kernelscope.commands.arguments import add_output_args, positive_int
from kernelscope.commands.profile_plan import (
    BACKENDS,
    Plan,
    ProfileOptions,
    build_session,
    energy_pass,
    plan_workload,
    time_session,
    workload_record,
)

if TYPE_CHECKING:
    from kernelscope.capture.torch_profiler import BackgroundGzip
    from kernelscope.contracts.run import Run
    from kernelscope.workload.session import WorkloadSession
    from kernelscope.workload.timing import TimedRuns

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
    p.add_argument("--energy", action="store_true",
                   help="CUDA: --repeats more plain generations while NVML's board energy counter and power are "
                        "sampled: joules per token of prefill and decode (run.json energy, power.parquet, "
                        "energy.parquet; needs nvidia-ml-py)")
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


def run(args: argparse.Namespace, steps) -> int:
    path = run_profile(ProfileOptions.from_args(args), steps)
    if not getattr(args, "quiet", False):
        from kernelscope.commands.run_summary import terminal_summary

        print(terminal_summary(path))
    print(path)  # the last line: the run directory, absolute
    return 0


def run_profile(options: ProfileOptions, steps=None) -> Path:
    from kernelscope.load import rundir, staging
    from kernelscope.pipeline import write_run_directory
    from kernelscope.progress import SILENT

    steps = steps or SILENT
    if options.gpus > 1 or options.nnodes > 1:
        from kernelscope.commands.profile_ranks import run_ranks

        return run_ranks(options, steps)
    plan = plan_workload(options, steps)
    _warm_up_helpers(options)
    session = build_session(plan, options, steps)
    timed = time_session(session, options, plan.per_image, steps)
    energy = energy_pass(session, plan, options, steps) if options.energy else None
    with staging.staged_directory(plan.target) as tmp:
        run, compressing = _record(session, plan, options, timed, tmp, steps)
        if energy is not None:
            from kernelscope.contracts.energy_tables import EnergyTables

            run.info = run.info.replace(energy=energy.info)
            run.energy = EnergyTables(samples=energy.samples, windows=energy.windows)
            rundir.write_energy(tmp, energy.samples, energy.windows)
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


def _record(session: WorkloadSession, plan: Plan, options: ProfileOptions, timed: TimedRuns, tmp: Path,
            steps) -> tuple[Run, BackgroundGzip]:
    """One more run of every generation under torch.profiler; its trace read, attributed and kept (gzipped on
    a thread while the caller writes the run: finish() the handle returned)."""
    import msgspec
    import torch

    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.analyze.attribution.attribution_sources import attribution_info, infer_attribution
    from kernelscope.analyze.attribution.graph_replays import attribute_graph_replays
    from kernelscope.analyze.integrity import audit_trace
    from kernelscope.analyze.ranks.host_calls import host_calls
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
            calls = host_calls(tables.launches, tables.kernels)
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
        workload=workload_record(options, plan, session),
        model=session.model_info,
        hardware=describe_hardware(plan.device),
        software=describe_software(),
        capture=msgspec.structs.replace(capture, nvtx=plan.device.type == "cuda"),
        timings=msgspec.structs.replace(timed.timings, profiled_tokens_match=matched),
        trace=profiled_trace(tables.meta, json_bytes, rundir.TRACE),
        graph_replays=graph_replays,
        attribution=attribution_info(kernels, [sources]),
    )
    return Run(info=info, kernels=kernels, ops=ops, calls=calls), compressing


