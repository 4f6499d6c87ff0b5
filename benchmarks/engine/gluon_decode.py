"""Persistent Gluon decode step for qwen2-1.5b at batch 1 against the engine's own decode step, in one process.

    PYTHONPATH=src python3 benchmarks/engine/gluon_decode.py --out DIR [--budget 300]
    PYTHONPATH=src python3 benchmarks/engine/gluon_decode.py --emulate [--fp32] [--layers 2] [--out DIR]   (CPU)

Stages, each guarded (an exception is recorded, a hang ends only its child, the JSON keeps what ran):
1. smoke (a child process): per configuration of gluon_decode_configs.CONFIGS, compile, check registers, shared
   memory and co-residency of one program per SM, then a 2-layer engine: prefill, 4 steps teacher-forced
   against the engine's decode_step.
2. main (a child process): the 28-layer engine on random weights (transformers' init, biases and norms
   perturbed); the copy bandwidth (gluon_probe.weights_copy_GBps: a copy of weights-sized buffers, read + write
   bytes); prefill 128 tokens with the engine, then 32 steps two ways from the same cache state (teacher-forced
   logits and argmax of each step; free-running greedy tokens and their first divergence) with the first
   configuration that ran in smoke; then the engine's step and the step of every such configuration, each captured
   in a CUDA graph, timed side by side (medians of CUDA-event-timed replays after a warm-up round), with the
   first configuration's kernel also run on 0 layers (the final norm and the LM head alone: their bytes / time).
--emulate runs stage 2's comparison on CPU with gluon_decode_emulate.py in place of the kernel (and the engine's
torch backend), with fewer layers, to check the host and the kernel's indexing without a GPU.
Writes DIR/gluon-decode.json and prints a short table. Kernel: gluon_decode_kernels.py; host: gluon_decode_host.py;
stages: gluon_decode_run.py.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import gluon_decode_configs as dc
import torch

SMOKE_LAYERS = 2
HANG_S = 20.0
PROMPT, NEW = 128, 32
HEAD_ONLY = "|lm_head_only"  # timing row of the final norm and LM head alone (layers = 0)
# Timing rows of the first configuration with parts of the step left out (the kernel's ABLATE bits; wrong results)
ABLATIONS = [(1, "no_attention"), (2, "no_barriers"), (4, "no_staging"), (3, "no_attention_no_barriers"),
             (7, "gemv_streaming_only")]


def log(*args) -> None:
    print(*args, flush=True)


def save_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    tmp.replace(path)


def _cuda_pieces():
    from gluon_decode_host import DecodeBuffers, GluonStep
    from gluon_probe import Hung, wait
    from persistent_host import co_resident, sm_count

    return DecodeBuffers, GluonStep, Hung, wait, co_resident, sm_count


def compiled_info(step, programs: int) -> dict:
    from persistent_host import co_resident

    kernel = step.compile()
    kernel._init_handles()
    ok, res = co_resident(kernel, kernel.metadata.num_warps, programs)
    return {**res, "warps_total": kernel.metadata.num_warps, "co_resident": ok, "programs": programs}


# --------------------------------------------------------------------------------------------- children

def phase_smoke(args) -> int:
    """Child: one status line per configuration in --status (a "start" line first, so a hang is attributed)."""
    from gluon_decode_run import build_engine, compare

    DecodeBuffers, GluonStep, Hung, wait, _, sm_count = _cuda_pieces()
    status = Path(args.status)
    names = set(json.loads(args.configs))

    def note(row: dict) -> None:
        with status.open("a") as handle:
            handle.write(json.dumps(row, default=str) + "\n")

    engine = build_engine("cuda", layers=SMOKE_LAYERS)
    for cfg in dc.CONFIGS:
        if cfg.name not in names:
            continue
        note({"name": cfg.name, "status": "start"})
        row: dict = {"name": cfg.name}
        t0 = time.time()
        try:
            buf = DecodeBuffers(engine, 256, cfg.splits, sm_count())
            step = GluonStep(buf, cfg, PROMPT)
            row.update(compiled_info(step, buf.programs))
            row["compile_s"] = round(time.time() - t0, 2)
            if not row["co_resident"]:
                row["status"] = "not co-resident"
            else:
                row.update(compare(engine, buf, step.launch, PROMPT, 4, sync=lambda: wait(HANG_S)))
                row.pop("steps", None)
                row["status"] = "ok" if row["ok"] else "wrong"
        except Hung as error:
            row.update(status="hung", error=str(error))
            note(row)
            os._exit(3)  # the device stays busy: leave without synchronising
        except Exception as error:  # noqa: BLE001 (a configuration's failure is data)
            trace = traceback.format_exc()
            log(trace)  # in full: a compile error's message
            row.update(status="error", error=f"{type(error).__name__}: {error}"[:3000], trace=trace[-3000:])
        note(row)
        log(f"smoke {cfg.name}: {row['status']} worst_rel_err={row.get('worst_rel_err')} "
            f"regs={row.get('registers')} smem={row.get('shared_bytes')}")
        if row["status"] == "error":
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 (a sticky fault: the next configurations need a new child)
                os._exit(4)
    return 0


def phase_main(args) -> int:
    """Child: correctness over 32 steps and the side-by-side timing; its record rewritten into --status."""
    from gluon_decode_run import build_engine, compare, engine_graph_step, step_record, time_side_by_side
    from gluon_probe import weights_copy_GBps

    DecodeBuffers, GluonStep, Hung, wait, _, sm_count = _cuda_pieces()
    out_path = Path(args.status)
    rec: dict = {}
    cfgs = [dc.from_record(r) for r in json.loads(args.configs)]
    try:
        shape = dc.QWEN2_1_5B
        rec["copy_GBps"] = weights_copy_GBps(shape.weight_bytes())
        rec["copy_note"] = "dst.copy_(src) of two weights-sized buffers, (read + written bytes) / median of 30"
        save_json(out_path, rec)
        engine = build_engine("cuda")
        rec["engine_decode_bytes_per_token"] = engine.decode_bytes_per_token(1, PROMPT + NEW)
        steps = {"engine": engine_graph_step(engine, PROMPT + NEW)}
        bufs = {}
        for i, cfg in enumerate(cfgs):
            buf = DecodeBuffers(engine, 512, cfg.splits, sm_count())
            step = GluonStep(buf, cfg, PROMPT + NEW)
            rec.setdefault("compiled", {})[cfg.name] = compiled_info(step, buf.programs)
            if i == 0:
                t0 = time.time()
                rec["correctness"] = {"config": cfg.name, **compare(engine, buf, step.launch, PROMPT, NEW,
                                                                    sync=lambda: wait(HANG_S))}
                rec["correctness"]["s"] = round(time.time() - t0, 1)
                save_json(out_path, rec)
            else:
                buf.load_cache(engine.cache(1), PROMPT)
            bufs[cfg.name] = buf

            def reset(p: int, buf=buf) -> None:
                buf.pos.fill_(p)

            steps[cfg.name] = (lambda step=step: step.step(engine.ops.argmax), reset)
        head_bytes = 2 * shape.vocab * shape.hidden
        try:  # the final norm and the LM head alone (layers = 0): the share of the step that is not the layers
            head = GluonStep(bufs[cfgs[0].name], cfgs[0], PROMPT + NEW, layers=0)
            head.compile()
            steps[cfgs[0].name + HEAD_ONLY] = (lambda: head.step(engine.ops.argmax), steps[cfgs[0].name][1])
        except Exception as error:  # noqa: BLE001 (the full step's timing does not depend on it)
            rec["head_only_error"] = f"{type(error).__name__}: {error}"[:2000]
        for bits, label in ABLATIONS:  # where the step's time goes: the same kernel with parts left out
            try:
                probe = GluonStep(bufs[cfgs[0].name], cfgs[0], PROMPT + NEW, ablate=bits)
                probe.compile()
                steps[f"{cfgs[0].name}|{label}"] = (lambda probe=probe: probe.step(engine.ops.argmax),
                                                    steps[cfgs[0].name][1])
            except Exception as error:  # noqa: BLE001 (the full step's timing does not depend on it)
                rec.setdefault("ablation_errors", {})[label] = f"{type(error).__name__}: {error}"[:2000]
        timed = time_side_by_side(steps, PROMPT + NEW, args.rounds, args.replays)
        for name, row in timed.items():
            row.update(step_record(shape, row["ms"], rec["copy_GBps"],
                                   head_bytes if name.endswith(HEAD_ONLY) else None))
        rec["timing"] = timed
        rec["timing_note"] = ("GBps: weight bytes of the step (layer matrices + LM head) / median ms; the engine's "
                              "step also reads the norms, biases and the embedding row: the same bytes to 0.1%; "
                              f"*{HEAD_ONLY}: the LM head's bytes only")
        rec["barrier_timeouts_after_timing"] = {n: int(b.err.sum()) for n, b in bufs.items()}
        rec["copy_GBps_end"] = weights_copy_GBps(shape.weight_bytes())
    except Hung as error:
        rec["error"] = f"hung: {error}"
        save_json(out_path, rec)
        os._exit(3)
    except Exception as error:  # noqa: BLE001
        rec["error"] = f"{type(error).__name__}: {error}"
        rec["trace"] = traceback.format_exc()
        log(rec["trace"])
    save_json(out_path, rec)
    return 0


# --------------------------------------------------------------------------------------------- parent

def run_child(phase: str, configs: str, status: Path, timeout: float, extra: list[str]) -> str:
    cmd = [sys.executable, __file__, "--phase", phase, "--configs", configs, "--status", str(status), *extra]
    try:
        return str(subprocess.run(cmd, timeout=max(5.0, timeout)).returncode)
    except subprocess.TimeoutExpired:
        return "timeout"


def smoke_all(deadline: float) -> dict[str, dict]:
    status: dict[str, dict] = {}
    work = Path(tempfile.mkdtemp(prefix="gluon-decode-"))
    for attempt in range(len(dc.CONFIGS)):
        remaining = [c.name for c in dc.CONFIGS if c.name not in status]
        if not remaining or time.time() > deadline:
            break
        path = work / f"status-{attempt}.jsonl"
        rc = run_child("smoke", json.dumps(remaining), path, deadline - time.time(), [])
        started = None
        for line in path.read_text().splitlines() if path.exists() else []:
            row = json.loads(line)
            if row["status"] == "start":
                started = row["name"]
            else:
                status[row["name"]], started = row, None
        if started is not None:
            status[started] = {"name": started, "status": "crashed", "error": f"child rc={rc}"}
        log(f"== smoke child {attempt} rc={rc}")
        if not any(name in status for name in remaining):
            break
    for cfg in dc.CONFIGS:
        status.setdefault(cfg.name, {"name": cfg.name, "status": "not run"})
    return status


def print_table(result: dict) -> None:
    main = result.get("main", {})
    c = main.get("correctness", {})
    if c:
        log(f"correctness ({c.get('config')}): worst logits rel err {c.get('worst_rel_err')}, max rel "
            f"{c.get('worst_max_rel_err')}, argmax agree {c.get('argmax_agree')}/{c.get('new_tokens')}, first "
            f"divergence {c.get('first_divergence')}, barrier timeouts {c.get('barrier_timeouts')}")
    log(f"copy {main.get('copy_GBps', 0):.0f} GB/s (weights-sized buffers)")
    log(f"{'step':50} {'ms/token':>9} {'GB/s':>7} {'% copy':>7}")
    for name, row in main.get("timing", {}).items():
        log(f"{name:50} {row['ms_per_token']:9.3f} {row['GBps']:7.0f} {row.get('pct_of_copy', 0):7.1f}")


def phase_all(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gluon-decode.json"
    t0 = time.time()
    result: dict = {"benchmark": "gluon-decode", "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
                    "commit": os.environ.get("KS_COMMIT"), "argv": sys.argv, "shape": dc.record(dc.QWEN2_1_5B),
                    "configs": [c.record() for c in dc.CONFIGS], "prompt": PROMPT, "new_tokens": NEW}
    try:
        from persistent_host import device_info

        result["device"] = device_info()
        save_json(path, result)
        result["smoke"] = smoke_all(t0 + args.smoke_budget)
        save_json(path, result)
        # Main takes every configuration that ran (a logits tolerance miss is reported there, not fatal) or
        # that smoke had no time for (main guards its own launches); not those that hung, crashed or failed.
        status = {c.name: result["smoke"][c.name].get("status") for c in dc.CONFIGS}
        passed = sorted((c for c in dc.CONFIGS if status[c.name] in ("ok", "wrong", "not run")),
                        key=lambda c: ("ok", "wrong", "not run").index(status[c.name]))
        log(f"smoke: {sum(v == 'ok' for v in status.values())}/{len(dc.CONFIGS)} configurations ok; main runs "
            f"{[c.name for c in passed]}")
        if passed:
            record = Path(tempfile.mkdtemp(prefix="gluon-decode-main-")) / "main.json"
            rc = run_child("main", json.dumps([c.record() for c in passed]), record, t0 + args.budget - time.time(),
                           ["--rounds", str(args.rounds), "--replays", str(args.replays)])
            result["main"] = json.loads(record.read_text()) if record.exists() else {}
            result["main"]["child_rc"] = rc
    except Exception as error:  # noqa: BLE001 (whatever ran is kept)
        result["error"] = f"{type(error).__name__}: {error}"
        result["trace"] = traceback.format_exc()
        log(result["trace"])
    result["wall_s"] = round(time.time() - t0, 1)
    save_json(path, result)
    print_table(result)
    return 0 if "main" in result and "error" not in result["main"] else 1


def phase_emulate(args) -> int:
    """CPU: the engine (torch backend) against the emulated kernel, on `--layers` layers."""
    from gluon_decode_emulate import EmulatedStep
    from gluon_decode_host import DecodeBuffers
    from gluon_decode_run import CAPACITY, build_engine, compare

    torch.manual_seed(0)
    cfg = dc.CONFIGS[0]
    dtype = torch.float32 if args.fp32 else torch.bfloat16
    engine = build_engine("cpu", layers=args.layers, dtype=dtype)
    buf = DecodeBuffers(engine, CAPACITY, cfg.splits, args.programs)
    emu = EmulatedStep(buf, cfg)
    t0 = time.time()
    rec = compare(engine, buf, emu.run, args.prompt, args.new)
    rec.update(config=cfg.name, dtype=str(dtype), layers=args.layers, programs=args.programs,
               s=round(time.time() - t0, 1), tiles_per_program=emu.tiles_per_program())
    log(json.dumps({k: v for k, v in rec.items() if k != "steps"}, default=str))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        save_json(Path(args.out) / "gluon-decode-emulated.json", rec)
    return 0 if rec["ok"] else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--phase", default="all", choices=["all", "smoke", "main"])
    parser.add_argument("--configs", help="children: configuration names (smoke) or records (main), JSON")
    parser.add_argument("--status", help="children: where their record goes")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole run")
    parser.add_argument("--smoke-budget", type=float, default=150.0, help="seconds for the smoke children")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--replays", type=int, default=12)
    parser.add_argument("--emulate", action="store_true", help="CPU emulation of the kernel (no GPU)")
    parser.add_argument("--layers", type=int, default=2, help="--emulate: decoder layers")
    parser.add_argument("--programs", type=int, default=132, help="--emulate: programs (SMs)")
    parser.add_argument("--prompt", type=int, default=PROMPT, help="--emulate: prompt tokens")
    parser.add_argument("--new", type=int, default=4, help="--emulate: decoded tokens")
    parser.add_argument("--fp32", action="store_true",
                        help="--emulate: an fp32 engine (no rounding anywhere: the check is to fp32 precision)")
    args = parser.parse_args()
    if args.emulate:
        return phase_emulate(args)
    if args.phase == "all" and not args.out:
        parser.error("--out is required")
    return {"all": phase_all, "smoke": phase_smoke, "main": phase_main}[args.phase](args)


if __name__ == "__main__":
    sys.exit(main())
