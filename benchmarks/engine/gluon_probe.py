"""Streaming probe: can a Gluon GEMV chain (TMA bulk copies into a multi-stage shared-memory ring, a loader warp
and mbarrier hand-off, `gl.warp_specialize`) stream qwen2-1.5b's batch-1 decode weights at > 90% of the copy
bandwidth on a Hopper GPU?

    PYTHONPATH=src python3 benchmarks/engine/gluon_probe.py --out DIR [--budget 300]

1. precompile (parallel child processes, into Triton's on-disk cache), then smoke (child processes, one at a
   time): every configuration of gluon_configs.py run once on 2 layers and checked against the fp32 reference; a
   launch that does not finish within HANG_S seconds ends its child (status "hung") and the next child carries on
   with the rest, so one deadlocked configuration costs only itself.
2. main (this process), for batch 1 and 8 over 28 layers of random bf16 weights (2.62 GB, far beyond L2): the copy
   bandwidth (a device-to-device copy of a buffer as large as the weights, bytes read + written, median of 30; and
   the engine benchmark's 1 GiB figure, kernelscope.capture.calibrate), then each variant checked against the
   reference (max abs / rel error) and captured in a CUDA graph: torch.mm (cuBLAS) over the 112 matrices, the
   engine's Triton GEMV, Gluon per-matrix launches (gemv_ws, gemv_pipe), and the one-launch Gluon chain without
   (stream mode: independent matrices) and with (chain mode) a grid barrier before each matrix. Timing: rounds
   over all graphs interleaved, a median of ≥ 30 CUDA-event timed replays each after warm-up, as GB/s of weight
   bytes and % of the copy bandwidth.
Writes DIR/gluon-probe.json (rewritten after every step) and prints a table. Kernels: gluon_kernels.py; shapes and
configurations: gluon_configs.py; buffers, reference and launchers: gluon_host.py; summary and table:
gluon_report.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import gluon_configs as gc
import torch
import triton
from gluon_host import Arena, Launchers, Weights, errors, reference
from gluon_report import print_table, summarize
from persistent_host import co_resident, copy_bandwidth_GBps, device_info, graph_of, log, replay_ms, sm_count

HANG_S = 20.0  # a smoke launch of 2 layers takes milliseconds
SMOKE_LAYERS = 2
TOLERANCE = {"stream": 2e-2, "chain": 5e-2}  # norm-relative error against the fp32 reference


class Hung(RuntimeError):
    pass


def wait(seconds: float) -> None:
    """Synchronise, but give up (Hung) when the device has not finished after `seconds`."""
    event = torch.cuda.Event()
    event.record()
    t0 = time.time()
    while not event.query():
        if time.time() - t0 > seconds:
            raise Hung(f"no completion after {seconds:.0f} s")
        time.sleep(0.0005)


def device_broken() -> bool:
    """Whether the CUDA context is gone (a fault in a kernel is sticky: every later call in the process fails)."""
    try:
        torch.cuda.synchronize()
        return False
    except Exception:  # noqa: BLE001
        return True


def mode_of(cfg: gc.Config | None) -> str:
    return "chain" if cfg is None or cfg.kernel != "chain_ws" or cfg.sync else "stream"


def runner(launch: Launchers, cfg: gc.Config | None, name: str):
    """The function that runs variant `name` (cfg None: torch_mm or engine_triton) on an arena."""
    if cfg is None:
        return launch.torch_mm if name.startswith("torch") else launch.engine
    if cfg.kernel == "chain_ws":
        return lambda arena: launch.chain_ws(cfg, arena)
    return lambda arena: launch.gemv(cfg, arena)


def compiled_info(launch: Launchers, cfg: gc.Config, arena: Arena) -> dict:
    """Registers, shared memory and warps of the compiled kernel(s), and whether the grid is co-resident."""
    kernels = [launch.chain_ws(cfg, arena, warmup=True)] if cfg.kernel == "chain_ws" else launch.gemv(
        cfg, arena, warmup=True)
    info = {}
    for kernel in kernels:
        kernel._init_handles()
        warps = kernel.metadata.num_warps
        ok, res = co_resident(kernel, warps, launch.programs(cfg))
        info = {"registers": max(info.get("registers") or 0, res["registers"] or 0),
                "shared_bytes": max(info.get("shared_bytes", 0), res["shared_bytes"]), "warps_total": warps,
                "programs_per_sm_max": res["programs_per_sm_max"], "co_resident": ok, "programs": launch.programs(cfg)}
    return info


def check(launch: Launchers, run, arena: Arena, ref: torch.Tensor, hang_s: float) -> dict:
    arena.reset()
    launch.err.zero_()
    run(arena)
    wait(hang_s)
    row = errors(arena.act, ref)
    row["timeouts"] = int(launch.err.sum())
    row["ok"] = bool(row["rel_err"] < TOLERANCE[arena.mode] and row["timeouts"] == 0)
    return row


# ------------------------------------------------------------------------------------------------------ smoke

def phase_compile(args) -> int:
    """Child: compile (no launch) the configurations of --configs into Triton's on-disk cache, which the smoke child
    and the main process then hit. Arguments as the smoke run passes them (2 layers: the same specialisation as
    28)."""
    configs = [gc.config_from_record(r) for r in json.loads(Path(args.configs).read_text())]
    w = Weights(SMOKE_LAYERS)
    launch = Launchers(w, sm_count())
    arenas = {}
    for cfg in configs:
        key = (cfg.batch, mode_of(cfg))
        arenas.setdefault(key, Arena(SMOKE_LAYERS, cfg.batch, key[1]))
        try:
            if cfg.kernel == "chain_ws":
                launch.chain_ws(cfg, arenas[key], warmup=True)
            else:
                launch.gemv(cfg, arenas[key], warmup=True)
        except Exception as error:  # noqa: BLE001 (the smoke run reports it in full)
            log(f"precompile {cfg.name}: {type(error).__name__}")
    return 0


def precompile(configs: list[gc.Config], deadline: float) -> None:
    """Compile every configuration in parallel children before the (sequential) smoke run."""
    work = Path(tempfile.mkdtemp(prefix="gluon-compile-"))
    jobs = max(1, min(8, (os.cpu_count() or 2) // 2))
    procs = []
    for j in range(jobs):
        shard = configs[j::jobs]
        if not shard:
            continue
        path = work / f"configs-{j}.json"
        path.write_text(json.dumps([c.record() for c in shard]))
        procs.append(subprocess.Popen([sys.executable, __file__, "--phase", "compile", "--configs", str(path)]))
    for proc in procs:
        try:
            proc.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    shutil.rmtree(work, ignore_errors=True)
    log(f"== precompile: {len(configs)} configurations in {len(procs)} children")


def phase_smoke(args) -> int:
    """Child: compile and run each configuration of --configs on 2 layers; one status line each in --status."""
    configs = [gc.config_from_record(r) for r in json.loads(Path(args.configs).read_text())]
    status = Path(args.status)
    w = Weights(SMOKE_LAYERS)
    launch = Launchers(w, sm_count())
    arenas, refs = {}, {}

    def note(row: dict) -> None:
        with status.open("a") as handle:
            handle.write(json.dumps(row) + "\n")

    for cfg in configs:
        key = (cfg.batch, mode_of(cfg))
        if key not in arenas:
            arenas[key] = Arena(SMOKE_LAYERS, cfg.batch, key[1])
            refs[key] = reference(w, arenas[key])
        note({"name": cfg.name, "status": "start"})
        t0 = time.time()
        row = {"name": cfg.name}
        try:
            row.update(compiled_info(launch, cfg, arenas[key]))
            row["compile_s"] = round(time.time() - t0, 2)
            if cfg.sync and not row["co_resident"]:
                row["status"] = "not co-resident"
            else:
                row.update(check(launch, runner(launch, cfg, cfg.name), arenas[key], refs[key], HANG_S))
                row["status"] = "ok" if row["ok"] else "wrong"
        except Hung as error:
            row.update(status="hung", error=str(error))
            note(row)
            log(f"smoke {cfg.name}: HUNG, this child ends")
            os._exit(3)  # the device stays busy: leave without synchronising
        except Exception as error:  # noqa: BLE001 (one configuration's failure is data)
            trace = traceback.format_exc()
            log(trace)  # in full (a compile failure's MLIR message); the status line keeps its end
            row.update(status="error", error=f"{type(error).__name__}: {error}"[:3000], trace=trace[-3000:])
        note(row)
        log(f"smoke {cfg.name}: {row['status']} rel_err={row.get('rel_err')} timeouts={row.get('timeouts')} "
            f"smem={row.get('shared_bytes')} regs={row.get('registers')} {row.get('compile_s')} s")
        if row["status"] == "error" and device_broken():
            log(f"smoke {cfg.name}: the CUDA context is lost, this child ends")
            os._exit(4)
    return 0


def smoke_all(configs: list[gc.Config], deadline: float) -> dict[str, dict]:
    """Smoke children until every configuration has a status (a child that hangs or crashes costs one). Their
    files live in a temporary folder: the output folder gets only the probe's own files."""
    status: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="gluon-smoke-"))
    remaining = list(configs)
    for attempt in range(5):
        if not remaining or time.time() > deadline:
            break
        cfg_file, status_file = work / f"configs-{attempt}.json", work / f"status-{attempt}.jsonl"
        cfg_file.write_text(json.dumps([c.record() for c in remaining]))
        status_file.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--phase", "smoke", "--configs", str(cfg_file), "--status", str(status_file)]
        log(f"== smoke child {attempt}: {len(remaining)} configurations")
        try:
            rc = subprocess.run(cmd, timeout=max(10.0, deadline - time.time())).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        started = None
        lines = status_file.read_text().splitlines() if status_file.exists() else []
        for line in lines:
            row = json.loads(line)
            if row["status"] == "start":
                started = row["name"]
            else:
                status[row["name"]] = row
                started = None
        if started is not None:
            status[started] = {"name": started, "status": "crashed", "error": f"child rc={rc}"}
        log(f"== smoke child {attempt} rc={rc}")
        before = len(remaining)
        remaining = [c for c in remaining if c.name not in status]
        if len(remaining) == before:  # no progress: the child cannot start (e.g. no GPU)
            break
    shutil.rmtree(work, ignore_errors=True)
    for cfg in remaining:
        status[cfg.name] = {"name": cfg.name, "status": "not run"}
    return status


# ------------------------------------------------------------------------------------------------------- main

def weights_copy_GBps(nbytes: int, repeats: int = 30) -> float:
    """dst.copy_(src) of two buffers as large as the weights, bytes read + written, median of CUDA-event times."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.fill_(1)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / statistics.median(times) / 1e6


def time_graphs(graphs: dict, rounds: int, replays: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(rounds):
        for name, graph in graphs.items():
            times[name] += replay_ms(graph, replays)
    return times


def run_batch(batch: int, w: Weights, launch: Launchers, configs: list[gc.Config], result: dict, args,
              save) -> None:
    arenas = {mode: Arena(w.layers, batch, mode) for mode in ("chain", "stream")}
    t0 = time.time()
    refs = {mode: reference(w, arena) for mode, arena in arenas.items()}
    log(f"batch {batch}: references in {time.time() - t0:.1f} s")
    variants: dict[str, dict] = result.setdefault("variants", {})
    graphs = {}
    entries = [(f"torch_mm|B{batch}", None), (f"engine_triton|B{batch}", None)] + [(c.name, c) for c in configs]
    for name, cfg in entries:
        if time.time() > args.deadline:
            variants[name] = {"batch": batch, "skipped": "time budget"}
            continue
        mode = mode_of(cfg)
        row = {"variant": name.split("|")[0], "batch": batch, "mode": mode,
               "config": cfg.record() if cfg else None}
        try:
            run = runner(launch, cfg, name)
            if cfg is not None:
                row.update(compiled_info(launch, cfg, arenas[mode]))
                if cfg.sync and not row["co_resident"]:
                    row["skipped"] = "not co-resident"
                    variants[name] = row
                    continue
            row.update(check(launch, run, arenas[mode], refs[mode], 60.0))
            graphs[name] = graph_of(lambda run=run, arena=arenas[mode]: run(arena))
        except Hung as error:
            row.update(error=f"hung: {error}")
            variants[name] = row
            save()
            log(f"{name}: HUNG at full size; results so far are saved, the process ends")
            os._exit(3)
        except Exception as error:  # noqa: BLE001
            row.update(error=f"{type(error).__name__}: {error}"[:3000], trace=traceback.format_exc()[-3000:])
        variants[name] = row
        log(f"{name}: rel_err={row.get('rel_err')} max_abs={row.get('max_abs_err')} ok={row.get('ok')} "
            f"{row.get('error', '')[:200]}")
    save()
    times = time_graphs(graphs, args.rounds, args.replays)
    for name, ms_list in times.items():
        ms = statistics.median(ms_list)
        row = variants[name]
        row.update(ms=ms, ms_p10=sorted(ms_list)[len(ms_list) // 10],
                   ms_p90=sorted(ms_list)[(9 * len(ms_list)) // 10], timed_replays=len(ms_list),
                   GBps=result["weight_bytes"] / ms / 1e6)
        row["pct_of_copy"] = 100 * row["GBps"] / result["copy_GBps"]
        row["pct_of_copy_1GiB"] = 100 * row["GBps"] / result["copy_1GiB_GBps"]
    del graphs
    save()


def phase_all(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / "gluon-probe.json"
    t_start = time.time()
    args.deadline = t_start + args.budget
    result: dict = {"probe": "gluon-streaming", "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "commit": os.environ.get("KS_COMMIT"), "argv": sys.argv, "torch": torch.__version__,
                    "triton": triton.__version__, "layers": gc.LAYERS, "shapes": gc.SHAPES}

    def save() -> None:
        tmp = json_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
        tmp.replace(json_path)

    try:
        result["device"] = device_info()
        smi = result["device"].get("nvidia_smi", "").split(",")
        result["driver"] = smi[1].strip() if len(smi) > 1 else None
        save()
        configs = [c for c in gc.all_configs() if not args.quick or c.stages == 4]
        precompile(configs, t_start + args.smoke_budget / 2)
        smoke = smoke_all(configs, t_start + args.smoke_budget)
        result["smoke"] = smoke
        save()
        passed = [c for c in configs if smoke.get(c.name, {}).get("status") == "ok"]
        log(f"smoke: {len(passed)}/{len(configs)} configurations passed")
        torch.backends.cuda.matmul.allow_tf32 = False
        result["copy_1GiB_GBps"] = copy_bandwidth_GBps()
        w = Weights(gc.LAYERS)
        result["weight_bytes"] = w.nbytes()
        result["copy_GBps"] = weights_copy_GBps(w.nbytes())
        result["copy_note"] = ("copy_GBps: dst.copy_(src) of weights-sized buffers, (read + written bytes) / median "
                               "time of 30; copy_1GiB_GBps: kernelscope.capture.calibrate.copy_bandwidth (1 GiB, as "
                               "benchmarks/engine_decode.py); pct_of_copy divides weight bytes / time by copy_GBps")
        log(f"copy {result['copy_GBps']:.0f} GB/s (weights size), {result['copy_1GiB_GBps']:.0f} GB/s (1 GiB); "
            f"weights {w.nbytes() / 1e9:.3f} GB")
        save()
        launch = Launchers(w, sm_count())
        for batch in (1, 8):
            run_batch(batch, w, launch, [c for c in passed if c.batch == batch], result, args, save)
        result["copy_GBps_end"] = weights_copy_GBps(w.nbytes())
        result["summary"] = summarize(result)
        rc = 0
    except Exception as error:  # noqa: BLE001 (whatever ran is kept)
        result["error"] = f"{type(error).__name__}: {error}"
        result["trace"] = traceback.format_exc()
        log(result["trace"])
        rc = 1
    result["wall_s"] = round(time.time() - t_start, 1)
    save()
    if "copy_GBps" in result and "weight_bytes" in result:
        print_table(result)
        log("summary:", json.dumps(result.get("summary")))
    return rc


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=".")
    parser.add_argument("--phase", default="all", choices=["all", "compile", "smoke"])
    parser.add_argument("--configs", help="smoke: JSON list of configuration records")
    parser.add_argument("--status", help="smoke: status lines go here")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds before remaining variants are skipped")
    parser.add_argument("--smoke-budget", type=float, default=150.0, help="seconds for all smoke children")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replays", type=int, default=12)
    parser.add_argument("--quick", action="store_true", help="only the 4-stage configurations")
    args = parser.parse_args()
    return {"all": phase_all, "compile": phase_compile, "smoke": phase_smoke}[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())
