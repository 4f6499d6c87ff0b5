"""`kernelscope profile --gpus N`: the workload on N processes (one per GPU; gloo processes on CPU), split by
transformers' tensor-parallel plan, one run directory holding every rank.

The parent checks the options, then starts the ranks with torch.distributed.run (torchrun), the launcher PyTorch
ships, so rendezvous, multi-node settings and tearing down every rank when one fails are torchrun's. Each rank
(`python -m kernelscope.commands.profile_ranks SPEC`) builds its share of the model, warms up, times the
generations and records one more under torch.profiler, like a one-GPU profile, all ranks in step; it hands its
trace and a RankRecord to the parent through the job's parts directory. The parent reads every rank's trace as
an import of several ranks would (one clock, ids unique per rank) and writes the run.

Several nodes: every node runs the same command with the same --out on a shared filesystem; the parts directory
lies beside --out, and node 0 writes the run once every rank's files are there."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec

from kernelscope.commands.profile_plan import ProfileOptions
from kernelscope.contracts.run_info import Capture, Hardware, ModelInfo, Software, Timings, Workload
from kernelscope.errors import UserError

WORKER_MODULE = "kernelscope.commands.profile_ranks"
LAUNCHER = "torch.distributed.run"
PARTS_WAIT_S = 120.0  # how long node 0 waits for other nodes' files to appear on a shared filesystem


class JobSpec(msgspec.Struct, kw_only=True):
    """What every rank is told: the profile options, the parts directory, the split."""

    options: dict[str, Any]
    parts: str
    tp: int
    ep: int
    device_type: str


class RankRecord(msgspec.Struct, kw_only=True):
    """What one rank hands the parent besides its trace."""

    rank: int
    local_rank: int
    world_size: int
    host: str
    device: str
    backend: str
    hardware: Hardware
    software: Software
    model: ModelInfo
    workload: Workload
    capture: Capture
    timings: Timings
    profiled_tokens_match: bool
    trace_json: str  # file name inside the parts directory
    json_bytes: int


# --- the parent -------------------------------------------------------------------------------------------------

def run_ranks(options: ProfileOptions, steps) -> Path:
    from kernelscope.commands.profile_plan import run_target
    from kernelscope.load import staging
    from kernelscope.pipeline import write_run_directory

    world, tp, ep, device_type, model_name, device_name = _check(options)
    if options.nnodes == 1:
        target = run_target(options, model_name, device_name)
        with staging.staged_directory(target) as tmp:
            parts = tmp / "ranks"
            _launch(options, world, tp, ep, device_type, parts, steps)
            run = _combine(parts, tmp, world, tp, ep, options, steps)
            with steps.step("Writing tables and report"):
                write_run_directory(tmp, run, report=options.report, languages=options.languages)
        return target.resolve()
    parts = _shared_parts(options.out)
    if options.node_rank != 0:
        _launch(options, world, tp, ep, device_type, parts, steps)
        return parts.resolve()
    target = run_target(options, model_name, device_name)
    try:
        with staging.staged_directory(target) as tmp:
            _launch(options, world, tp, ep, device_type, parts, steps)
            _wait_for_ranks(parts, world)
            run = _combine(parts, tmp, world, tp, ep, options, steps)
            with steps.step("Writing tables and report"):
                write_run_directory(tmp, run, report=options.report, languages=options.languages)
    finally:
        shutil.rmtree(parts, ignore_errors=True)
    return target.resolve()


def _check(options: ProfileOptions) -> tuple[int, int, int, str, str, str]:
    """Fail on bad options before any process starts: world size, degrees, device count, the model's shapes."""
    from kernelscope.capture.environment import describe_hardware
    from kernelscope.workload.devices import resolve_device
    from kernelscope.workload.distributed import check_split
    from kernelscope.workload.memory_check import check_weights_fit
    from kernelscope.workload.model import build_config, parse_dtype, resolve_model_source
    from kernelscope.workload.vision import vision_spec

    world = options.gpus * options.nnodes
    if options.backend != "hf":
        raise UserError("--gpus: several GPUs run with --backend hf (transformers' tensor-parallel plan); "
                        "kernelscope's engine runs on one GPU")
    if not 0 <= options.node_rank < options.nnodes:
        raise UserError(f"--node-rank: {options.node_rank} is not in 0 … {options.nnodes - 1}")
    if options.nnodes > 1:
        if not options.rdzv_endpoint:
            raise UserError("--rdzv-endpoint HOST:PORT is needed with --nnodes > 1 (node 0's address)")
        _endpoint(options.rdzv_endpoint)
        if options.out is None:
            raise UserError("--out is needed with --nnodes > 1: one folder on a filesystem every node shares")
    tp = options.tp if options.tp is not None else world
    ep = options.ep
    if tp not in (1, world):
        raise UserError(f"--tp {tp}: give 1 (a whole model per rank) or the number of ranks ({world})")
    if ep not in (1, tp) or (ep > 1 and tp == 1):
        raise UserError(f"--ep {ep}: expert parallelism runs across the tensor-parallel ranks: give --ep {world} "
                        f"with --tp {world}, or --ep 1")
    device = resolve_device(options.device)
    if device.type == "cuda":
        import torch

        if device.index is not None:
            raise UserError("--device: with --gpus, give cuda (rank k uses GPU k of its node)")
        if torch.cuda.device_count() < options.gpus:
            raise UserError(f"--gpus {options.gpus}: this node has {torch.cuda.device_count()} CUDA GPU(s)")
    source = resolve_model_source(options.model or ("qwen2-1.5b" if device.type == "cuda" else "tiny"))
    config = build_config(source, options.layers)
    if vision_spec(config) is not None and world > 1:
        raise UserError(f"--gpus: {source.name} is a vision-language model; several GPUs run causal LMs")
    check_split(config, tp, ep)
    dtype = parse_dtype(options.dtype or ("bfloat16" if device.type == "cuda" else "float32"))
    check_weights_fit(source.name, config, dtype, device, ranks=world, split=tp > 1 or ep > 1,
                      ranks_per_host=options.gpus)
    device_name = describe_hardware(device).name or device.type
    return world, tp, ep, device.type, source.name, device_name


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--rdzv-endpoint: '{text}' is not HOST:PORT")
    return host, int(port)


def _shared_parts(out: Path) -> Path:
    out = out.resolve()
    return out.parent / f".{out.name}.ranks"


def _launch(options: ProfileOptions, world: int, tp: int, ep: int, device_type: str, parts: Path, steps) -> None:
    """torchrun with this node's processes; returns when they have all finished, raises with the first rank's
    error line when one failed."""
    parts.mkdir(parents=True, exist_ok=True)
    logs = parts / f"logs-node{options.node_rank}"
    logs.mkdir(exist_ok=True)
    spec = JobSpec(options=_options_dict(options), parts=str(parts.resolve()), tp=tp, ep=ep, device_type=device_type)
    spec_path = parts / f"job-node{options.node_rank}.json"
    spec_path.write_bytes(msgspec.json.encode(spec))
    command = [sys.executable, "-m", LAUNCHER, f"--nproc-per-node={options.gpus}", f"--nnodes={options.nnodes}",
               f"--node-rank={options.node_rank}", f"--log-dir={logs}", "--redirects=3"]
    if options.nnodes == 1:
        command.append("--standalone")
    else:
        host, port = _endpoint(options.rdzv_endpoint or "")
        command += [f"--master-addr={host}", f"--master-port={port}"]
    command += ["-m", WORKER_MODULE, str(spec_path.resolve())]
    env = dict(os.environ)
    package_root = str(Path(__file__).resolve().parents[2])  # so that the ranks import this kernelscope
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    # torch's compile cache goes to the temp dir by default; the ranks' goes with the job (removed with it).
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str((parts / "inductor-cache").resolve()))
    what = f"{options.gpus} rank(s) on this node" if options.nnodes > 1 else f"{world} ranks"
    with steps.step(f"Running {what} with {LAUNCHER} (warm-up, timing, profiling)"), \
            (logs / "launcher.log").open("wb") as launcher_log:
        process = subprocess.Popen(command, stdout=launcher_log, stderr=subprocess.STDOUT, env=env)
        try:
            code = process.wait()
        finally:
            _stop(process)
    if code != 0:
        raise UserError(_failure(parts, logs, code))


def _stop(process: subprocess.Popen) -> None:
    """The launcher and its ranks stopped (an interrupt here: torchrun passes SIGTERM on to every rank)."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _failure(parts: Path, logs: Path, code: int) -> str:
    """One line: the first error a rank wrote, else the last line a rank printed to stderr."""
    for error in sorted(parts.glob("rank*.error")):
        text = error.read_text(encoding="utf-8", errors="replace").strip()
        if text:
            return f"{error.stem.replace('rank', 'rank ')}: {text.splitlines()[0]}"
    for log in sorted(logs.rglob("stderr.log")):
        lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        if lines:
            return f"a rank failed (local rank {log.parent.name}): {lines[-1].strip()}"
    return f"{LAUNCHER} exited with status {code}"


def _wait_for_ranks(parts: Path, world: int) -> None:
    deadline = time.monotonic() + PARTS_WAIT_S
    while True:
        missing = [r for r in range(world) if not (parts / _record_name(r)).is_file()]
        if not missing:
            return
        if time.monotonic() > deadline:
            raise UserError(f"{parts}: no files of rank(s) {', '.join(map(str, missing))} after "
                            f"{PARTS_WAIT_S:.0f} s: --out must be on a filesystem every node shares")
        time.sleep(1.0)


def _combine(parts: Path, tmp: Path, world: int, tp: int, ep: int, options: ProfileOptions, steps):
    """Every rank's trace read and attributed on its own, put on one clock, kept gzipped under traces/."""
    from kernelscope.analyze.attribution.attribution import attribute
    from kernelscope.analyze.attribution.attribution_sources import attribution_info, infer_attribution
    from kernelscope.analyze.attribution.graph_replays import attribute_graph_replays
    from kernelscope.analyze.integrity import audit_trace
    from kernelscope.analyze.ranks.host_calls import host_calls
    from kernelscope.analyze.ranks.ranks import combine_calls, combine_ranks, rank_clock_offsets
    from kernelscope.capture.torch_profiler import BackgroundGzip, trace_gzip_level
    from kernelscope.contracts.run import Run
    from kernelscope.contracts.run_info import SCHEMA_VERSION, ParallelInfo, RankInfo, RunInfo
    from kernelscope.contracts.trace_records import TraceInfo
    from kernelscope.load import rundir
    from kernelscope.load.kineto import load_kineto
    from kernelscope.load.sources import trace_file

    records = [msgspec.json.decode((parts / _record_name(r)).read_bytes(), type=RankRecord) for r in range(world)]
    ranked, metas, sources, files, rank_calls = [], [], [], [], []
    compressing: list[BackgroundGzip] = []  # each rank's trace gzipped on a thread while the next is read
    (tmp / rundir.TRACES_DIR).mkdir()
    with steps.step(f"Loading and attributing {world} traces"), _finishing(compressing):
        for record in records:
            trace_json = parts / record.trace_json
            tables = load_kineto(trace_json)
            rank_calls.append(host_calls(tables.launches, tables.kernels))
            tables.meta.audit = audit_trace(tables)
            kernels, ops = attribute(tables)
            kernels, found = infer_attribution(kernels, ops)
            ranked.append((kernels, ops))
            sources.append(found)
            metas.append(tables.meta)
            kept = rundir.rank_trace(record.rank)
            compressing.append(BackgroundGzip(trace_json, tmp / kept, trace_gzip_level(record.json_bytes)))
            files.append(trace_file(tables.meta, kept, record.json_bytes))
    offsets = rank_clock_offsets([m.origin_us for m in metas], [m.base_time_ns for m in metas])
    kernels, ops = combine_ranks(ranked, offsets)
    calls = combine_calls(rank_calls, offsets)
    kernels, graph_replays = attribute_graph_replays(kernels)
    first = records[0]
    ranks = [RankInfo(rank=r.rank, local_rank=r.local_rank, host=r.host, device=r.device, timings=r.timings.plain,
                      tokens_match=r.timings.tokens_match, profiled_tokens_match=r.profiled_tokens_match,
                      trace=rundir.rank_trace(r.rank)) for r in records]
    parallel = ParallelInfo(world_size=world, tensor_parallel=tp, expert_parallel=ep, nodes=options.nnodes,
                            backend=first.backend, plan=_plan_name(tp, ep), ranks=ranks)
    meta = metas[0]
    trace = TraceInfo(format=meta.source_format, event_count=sum(m.event_count for m in metas),
                      schema_version=meta.schema_version, cuda_runtime_version=meta.cuda_runtime_version,
                      cuda_driver_version=meta.cuda_driver_version, cupti_version=meta.cupti_version,
                      device_properties=meta.device_properties, files=files)
    all_match = all(r.profiled_tokens_match for r in records)
    info = RunInfo(
        schema_version=SCHEMA_VERSION, source="profile",
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        workload=msgspec.structs.replace(first.workload, device=f"{first.device} (rank 0 of {world})"),
        model=first.model,
        hardware=msgspec.structs.replace(first.hardware, count=world),
        software=first.software, capture=first.capture,
        timings=msgspec.structs.replace(first.timings, profiled_tokens_match=all_match),
        trace=trace, graph_replays=graph_replays, attribution=attribution_info(kernels, sources), parallel=parallel,
    )
    shutil.rmtree(parts, ignore_errors=True)
    return Run(info=info, kernels=kernels, ops=ops, calls=calls)


@contextlib.contextmanager
def _finishing(compressing: list):
    """Every compression thread finished on the way out, and its error raised if the block itself succeeded."""
    try:
        yield
    except BaseException:
        for handle in compressing:
            with contextlib.suppress(Exception):
                handle.finish()
        raise
    for handle in compressing:
        handle.finish()


def _plan_name(tp: int, ep: int) -> str | None:
    if tp == 1 and ep == 1:
        return "a whole model per rank"
    plan = f"transformers tp_plan=auto (tensor-parallel {tp})"
    return plan + (f", expert-parallel {ep}" if ep > 1 else "")


def _record_name(rank: int) -> str:
    return f"rank{rank}.record.json"


def _options_dict(options: ProfileOptions) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if k == "image_paths" else v)
            for k, v in asdict(options).items()}


def _options_from(data: dict[str, Any]) -> ProfileOptions:
    paths = {"out": Path(data["out"]) if data.get("out") else None, "runs_dir": Path(data["runs_dir"]),
             "image_paths": tuple(Path(p) for p in data.get("image_paths") or ()),
             "languages": tuple(data.get("languages") or ())}
    return ProfileOptions(**{**data, **paths})


# --- one rank -----------------------------------------------------------------------------------------------------

def rank_main(spec_path: Path) -> int:
    """A rank's whole job; its error (one line) goes to rank<k>.error for the parent."""
    from kernelscope.workload import distributed

    spec = msgspec.json.decode(spec_path.read_bytes(), type=JobSpec)
    parts = Path(spec.parts)
    rank = int(os.environ.get("RANK", "0"))
    try:
        context = distributed.start_rank(spec.device_type)
        try:
            _profile_rank(spec, context, parts)
        finally:
            distributed.finish()
    except UserError as exc:
        _write_error(parts, rank, str(exc))
        return 2
    except Exception as exc:  # a defect or a library's error: one line for the parent, the traceback in the log
        import traceback

        traceback.print_exc()
        _write_error(parts, rank, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
        return 1
    return 0


def _profile_rank(spec: JobSpec, context, parts: Path) -> None:
    import torch

    from kernelscope.capture.environment import describe_hardware, describe_software
    from kernelscope.capture.torch_profiler import record
    from kernelscope.commands import profile_plan
    from kernelscope.progress import SILENT
    from kernelscope.workload import distributed

    options = replace(_options_from(spec.options), device=str(context.device))
    plan = profile_plan.plan_workload(options, SILENT, target=parts)

    def build(plan: profile_plan.Plan) -> torch.nn.Module:
        return distributed.build_split_model(plan.source, plan.config, context, plan.dtype, spec.tp, spec.ep,
                                             parts / "weights", options.seed)

    session = profile_plan.build_session(plan, options, SILENT, build=build)
    timed = profile_plan.time_session(session, options, plan.per_image, SILENT)
    distributed.barrier()  # every rank starts its profiled run together
    trace_json = parts / f"rank{context.rank}.json"
    profiled, capture = record(lambda: [session.generate(i, annotated=True) for i in range(session.generations)],
                               context.device, trace_json, with_stack=options.stack)
    matched = all(bool(torch.equal(plain, tokens))
                  for plain, (tokens, _) in zip(timed.last_plain_tokens, profiled, strict=True))
    record_ = RankRecord(
        rank=context.rank, local_rank=context.local_rank, world_size=context.world_size, host=context.host,
        device=str(context.device), backend=context.backend, hardware=describe_hardware(context.device),
        software=describe_software(), model=session.model_info, workload=profile_plan.workload_record(options, plan, session),
        capture=msgspec.structs.replace(capture, nvtx=context.device.type == "cuda"), timings=timed.timings,
        profiled_tokens_match=matched, trace_json=trace_json.name, json_bytes=trace_json.stat().st_size)
    staged = parts / f".{_record_name(context.rank)}.partial"
    staged.write_bytes(msgspec.json.encode(record_))
    os.replace(staged, parts / _record_name(context.rank))  # the record appears whole, after the trace
    distributed.barrier()  # no rank leaves (and its node's launcher returns) before every record is written


def _write_error(parts: Path, rank: int, message: str) -> None:
    with contextlib.suppress(OSError):
        (parts / f"rank{rank}.error").write_text(message.replace("\n", " ") + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(rank_main(Path(sys.argv[1])))
