"""Feasibility probe: can a persistent Triton kernel (one program per SM, grid-wide barriers between
dependent ops) stream qwen2-1.5b's batch-1 decode GEMVs near the copy bandwidth on an H100?

    PYTHONPATH=src python3 benchmarks/engine/persistent_probe.py --out DIR            # every phase, each in a child
    PYTHONPATH=src python3 benchmarks/engine/persistent_probe.py --out DIR --phase barrier|chain

Phases (each a child process with its own timeout, so a deadlocked spin barrier loses one phase, not the call):
- barrier: µs per grid barrier (N = 1,000 and 10,000 rounds in one launch, graph replay, medians) and a check that
  every program sees another program's pre-barrier stores after the barrier (violations must be 0).
- chain: the four GEMVs of a decode layer (norm + q/k/v, o_proj + residual, norm + gate/up + SwiGLU, down +
  residual) over 28 layers of distinct random bf16 weights (2.62 GB, far beyond the 50 MB L2), one program per SM
  and a grid barrier after each op, in two loop designs: `persistent_chain` ([16, BLOCK_K] tiles) and
  `persistent_flat` (full [SEGS, 256] tiles of contiguous segments). The next op's first weight tile is loaded after
  the wait (a), between the arrive and the wait (b), or before the epilogue (e, flat); the tiled kernel can also
  bulk-prefetch the next op's rows into L2 during the spin (b2/b3). Also: both without barriers (wrong results:
  the loop's streaming ceiling); each loop as four ordinary kernels per layer (c1, 112 launches); the engine's own
  decode GEMV kernels (c2, 112 launches). All replayed from CUDA graphs; all but c2 checked against a torch fp32
  reference (1 and 28 layers) and for bitwise-identical repeats. The gate: ≥ 88% of copy for a checked variant.
Results: benchmarks/results/engine-persistent-h100-2026-11-26/README.md (the gate failed: 72.7% at best).
Copy bandwidth as benchmarks/engine_decode.py measures it (kernelscope.capture.calibrate.copy_bandwidth: 1 GiB
fp32 device-to-device copy, read + write counted, CUDA events, median of 20 after 3 warm-ups).
The kernels are in persistent_kernels.py, the buffers, launchers, reference and timing in persistent_host.py; this
file holds the phases and the driver.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch
from persistent_host import (
    Chain,
    EngineChain,
    Weights,
    cfg_name,
    co_resident,
    copy_bandwidth_GBps,
    device_info,
    graph_of,
    log,
    persistent_configs,
    reference_chain,
    rel_err,
    replay_ms,
    sm_count,
)
from persistent_kernels import HIDDEN, LAYERS, MAX_SPINS, barrier_kernel

# ------------------------------------------------------------------------------------------------------- phases

def phase_barrier(args) -> dict:
    P = sm_count()
    counter = torch.zeros(1, dtype=torch.int32, device="cuda")
    BLOCK = 256
    flags = torch.zeros(P * BLOCK, dtype=torch.int32, device="cuda")
    bad = torch.zeros(P, dtype=torch.int32, device="cuda")
    err = torch.zeros(P, dtype=torch.int32, device="cuda")
    sms = torch.zeros(P, dtype=torch.int32, device="cuda")
    rows = []
    for warps in (4, 16):
        for spin in (0, 1, 2):
            meta = {"CHECK": False, "SPIN": spin, "BLOCK": BLOCK}
            compiled = barrier_kernel.warmup(counter, flags, bad, err, sms, 1, MAX_SPINS, grid=(P,),
                                             num_warps=warps, **meta)
            compiled._init_handles()
            ok, res = co_resident(compiled, warps, P)
            if not ok:
                rows.append({"warps": warps, "spin": spin, "skipped": "not co-resident", **res})
                continue
            row = {"warps": warps, "spin": spin, **res}
            # correctness: 1,000 checked rounds, 5 launches
            violations = fails = 0
            for _ in range(5):
                counter.zero_()
                flags.zero_()
                barrier_kernel[(P,)](counter, flags, bad, err, sms, 1000, MAX_SPINS, CHECK=True, SPIN=spin,
                                     BLOCK=BLOCK, num_warps=warps)
                torch.cuda.synchronize()
                violations += int(bad.sum())
                fails += int(err.sum())
            row["check_rounds"] = 5 * 1000
            row["check_elements_per_round"] = P * BLOCK
            row["violations"] = violations
            row["wait_timeouts"] = fails
            row["distinct_sms"] = int(torch.unique(sms).numel())
            for rounds in (1000, 10000):
                for check in (False, True):
                    def launch(rounds=rounds, check=check, spin=spin, warps=warps):
                        counter.zero_()
                        barrier_kernel[(P,)](counter, flags, bad, err, sms, rounds, MAX_SPINS, CHECK=check,
                                             SPIN=spin, BLOCK=BLOCK, num_warps=warps)
                    graph = graph_of(launch)
                    times = replay_ms(graph, 11)
                    ms = statistics.median(times)
                    row[f"ms_{rounds}{'_check' if check else ''}"] = ms
                    row[f"us_per_barrier_{rounds}{'_check' if check else ''}"] = ms * 1e3 / rounds
                    row[f"timeouts_{rounds}{'_check' if check else ''}"] = int(err.sum())
            row["us_per_barrier_marginal"] = (row["ms_10000"] - row["ms_1000"]) * 1e3 / 9000
            # an empty launch (0 rounds) for the fixed cost
            def empty(spin=spin, warps=warps):
                counter.zero_()
                barrier_kernel[(P,)](counter, flags, bad, err, sms, 0, MAX_SPINS, CHECK=False, SPIN=spin,
                                     BLOCK=BLOCK, num_warps=warps)
            row["ms_0_rounds"] = statistics.median(replay_ms(graph_of(empty), 11))
            log(json.dumps(row))
            rows.append(row)
    return {"programs": P, "rows": rows}



def phase_chain(args) -> dict:
    torch.backends.cuda.matmul.allow_tf32 = False
    result: dict = {"device": device_info()}
    result["copy_GBps_start"] = copy_GBps = copy_bandwidth_GBps()
    log(f"copy bandwidth {copy_GBps:.0f} GB/s")
    t0 = time.time()
    w = Weights(LAYERS)
    weight_bytes = w.nbytes()
    per_layer = weight_bytes // LAYERS
    result["weight_bytes"] = weight_bytes
    result["weight_bytes_per_layer"] = per_layer
    log(f"weights {weight_bytes / 1e9:.3f} GB built in {time.time() - t0:.1f} s")
    chain = Chain(w)
    P = chain.P
    g = torch.Generator(device="cuda").manual_seed(1)
    h0 = torch.randn(HIDDEN, device="cuda", generator=g).to(torch.bfloat16)
    t0 = time.time()
    ref1 = reference_chain(w, h0, 1)
    ref28 = reference_chain(w, h0, LAYERS)
    log(f"reference in {time.time() - t0:.1f} s")

    variants: dict[str, dict] = {}
    graphs: dict[str, torch.cuda.CUDAGraph] = {}

    def check(name: str, run, out_of) -> dict:
        row = {}
        for layers, ref in ((1, ref1), (LAYERS, ref28)):
            out_of().copy_(h0.view_as(out_of()))
            chain.err.zero_()
            run(layers)
            torch.cuda.synchronize()
            row[f"rel_err_{layers}"] = rel_err(out_of().view(-1), ref)
            row[f"timeouts_{layers}"] = int(chain.err.sum())
            first = out_of().clone()
            out_of().copy_(h0.view_as(out_of()))
            run(layers)
            torch.cuda.synchronize()
            row[f"repeat_identical_{layers}"] = bool(torch.equal(first, out_of()))
        return row

    configs = persistent_configs(args.quick)
    for cfg in configs:
        name = cfg_name(cfg)
        try:
            t0 = time.time()
            compiled = chain.run(LAYERS, cfg, run=False)
            compiled._init_handles()
            ok, res = co_resident(compiled, cfg["warps"], P)
            row = {**cfg, **res, "compile_s": time.time() - t0}
            if not ok:
                row["skipped"] = "not co-resident"
                variants[name] = row
                log(name, json.dumps(row))
                continue
            row.update(check(name, lambda n, c=cfg: chain.run(n, c), lambda: chain.h))
            graphs[name] = graph_of(lambda c=cfg: chain.run(LAYERS, c))
            variants[name] = row
            log(name, json.dumps(row))
        except Exception as error:  # noqa: BLE001
            variants[name] = {**cfg, "error": repr(error), "trace": traceback.format_exc()[-2000:]}
            log(name, "ERROR", repr(error))

    # c1: the same loop as 112 ordinary launches (132 programs, and 4 × 132)
    c1_cfg = {"block_n": 16, "block_k": 512, "warps": 16, "stages": 1, "dist": 1}
    for programs, warps in ((P, 16),):
        name = f"c1_separate|P{programs}|K512|w{warps}"
        cfg = {**c1_cfg, "warps": warps}
        try:
            row = {"variant": "c1_separate", "programs": programs, **cfg}
            row.update(check(name, lambda n, c=cfg, pr=programs: chain.separate(n, c, pr), lambda: chain.h))
            graphs[name] = graph_of(lambda c=cfg, pr=programs: chain.separate(LAYERS, c, pr))
            variants[name] = row
            log(name, json.dumps(row))
        except Exception as error:  # noqa: BLE001
            variants[name] = {"variant": "c1_separate", "error": repr(error), "trace": traceback.format_exc()[-2000:]}
            log(name, "ERROR", repr(error))

    # c1 of design 2: the flat loop as 112 ordinary launches (132 programs)
    for cfg in ({"segs": 32, "warps": 16, "dist": 1}, {"segs": 32, "warps": 8, "dist": 2}):
        name = f"c1_flat_separate|S{cfg['segs']}|w{cfg['warps']}|d{cfg['dist']}"
        try:
            row = {"variant": "c1_flat_separate", "programs": P, **cfg}
            row.update(check(name, lambda n, c=cfg: chain.flat_separate(n, c), lambda: chain.h))
            graphs[name] = graph_of(lambda c=cfg: chain.flat_separate(LAYERS, c))
            variants[name] = row
            log(name, json.dumps(row))
        except Exception as error:  # noqa: BLE001
            variants[name] = {"variant": "c1_flat_separate", "error": repr(error),
                              "trace": traceback.format_exc()[-2000:]}
            log(name, "ERROR", repr(error))

    # c2: the engine's kernels
    name = "c2_engine_kernels"
    try:
        eng = EngineChain(w)
        eng.h.copy_(h0.view(1, -1))
        eng.run(1)  # allocates the launch counters before any capture
        torch.cuda.synchronize()
        graphs[name] = graph_of(lambda: eng.run(LAYERS))
        variants[name] = {"variant": "c2_engine_kernels",
                          "note": "engine's ks_gemv_qkv (bias, RoPE, cache write) / ks_gemv residual / "
                                  "ks_gemv_gate_up / ks_gemv residual, not checked against this reference"}
        log(name, "captured")
    except Exception as error:  # noqa: BLE001
        variants[name] = {"variant": "c2_engine_kernels", "error": repr(error), "trace": traceback.format_exc()[-2000:]}
        log(name, "ERROR", repr(error))

    # timing: rounds over all graphs, interleaved
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for _ in range(args.rounds):
        for name, graph in graphs.items():
            times[name] += replay_ms(graph, args.replays)
    result["copy_GBps_end"] = copy_end = copy_bandwidth_GBps()
    copy_ref = copy_GBps
    for name, ms_list in times.items():
        ms = statistics.median(ms_list)
        row = variants[name]
        row["ms_chain"] = ms
        row["ms_chain_p10"] = sorted(ms_list)[len(ms_list) // 10]
        row["ms_chain_p90"] = sorted(ms_list)[(9 * len(ms_list)) // 10]
        row["us_per_layer"] = ms * 1e3 / LAYERS
        row["GBps"] = weight_bytes / ms / 1e6
        row["pct_of_copy"] = 100 * row["GBps"] / copy_ref
    result["variants"] = variants
    # the gate
    checked = {n: r for n, r in variants.items() if "pct_of_copy" in r and "nosync" not in n
               and not n.startswith(("c1", "c2")) and r.get("rel_err_28", 1) < 5e-2 and r.get("timeouts_28", 1) == 0
               and r.get("repeat_identical_28")}
    best = max(checked, key=lambda n: checked[n]["pct_of_copy"]) if checked else None
    result["gate"] = {"threshold_pct": 88.0, "best_variant": best,
                      "best_pct_of_copy": checked[best]["pct_of_copy"] if best else None,
                      "passes": bool(best and checked[best]["pct_of_copy"] >= 88.0),
                      "copy_GBps_used": copy_ref, "copy_GBps_end": copy_end}
    log("")
    log(f"summary: copy {copy_GBps:.0f} GB/s (end {copy_end:.0f}); weights {weight_bytes / 1e9:.3f} GB "
        f"({per_layer / 1e6:.2f} MB a layer); 88% line {weight_bytes / (0.88 * copy_ref) / 1e6:.3f} ms")
    log(f"{'variant':44} {'ms':>7} {'us/layer':>8} {'GB/s':>6} {'%copy':>6} {'err1':>8} {'err28':>8} rep regs")
    for name, row in variants.items():
        if "ms_chain" not in row:
            log(f"{name:44} {row.get('skipped') or row.get('error', '')[:60]}")
            continue
        log(f"{name:44} {row['ms_chain']:7.3f} {row['us_per_layer']:8.2f} {row['GBps']:6.0f} "
            f"{row['pct_of_copy']:6.1f} {row.get('rel_err_1', float('nan')):8.1e} "
            f"{row.get('rel_err_28', float('nan')):8.1e} {str(row.get('repeat_identical_28', '-'))[0]:>3} "
            f"{row.get('registers')}")
    log("gate:", json.dumps(result["gate"]))
    return result


# -------------------------------------------------------------------------------------------------------- driver

PHASES = {"barrier": phase_barrier, "chain": phase_chain}
TIMEOUTS = {"barrier": 150, "chain": 420}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--phase", default="all", choices=["all", *PHASES])
    parser.add_argument("--phases", default="barrier,chain", help="with --phase all: which, in order")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--replays", type=int, default=10)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.phase == "all":
        rc = 0
        for phase in args.phases.split(","):
            cmd = [sys.executable, __file__, "--out", str(out), "--phase", phase, "--rounds", str(args.rounds),
                   "--replays", str(args.replays)] + (["--quick"] if args.quick else [])
            t0 = time.time()
            log(f"== phase {phase}")
            try:
                done = subprocess.run(cmd, timeout=TIMEOUTS[phase])
                log(f"== phase {phase} rc={done.returncode} in {time.time() - t0:.0f} s")
                rc |= done.returncode
            except subprocess.TimeoutExpired:
                log(f"== phase {phase} TIMED OUT after {TIMEOUTS[phase]} s")
                rc |= 1
        return rc
    result = {"phase": args.phase, "argv": sys.argv, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        result.update(PHASES[args.phase](args))
        rc = 0
    except Exception as error:  # noqa: BLE001
        result["error"] = repr(error)
        result["trace"] = traceback.format_exc()
        log(result["trace"])
        rc = 1
    (out / f"{args.phase}.json").write_text(json.dumps(result, indent=1, default=str))
    return rc


if __name__ == "__main__":
    sys.exit(main())
