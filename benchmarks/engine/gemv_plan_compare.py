"""Device comparison of two decode-GEMV plans, op by op, at several model shapes: the plan rule of kernels/linear.py
(`gemv_plan`: tiles and split-K by kind of GEMV) against the rule it replaced on 2026-11-26 (one table by rows,
split until 2 programs per SM with at least 4 K tiles a split), reproduced below as `previous_plan`.

    PYTHONPATH=src python benchmarks/engine/gemv_plan_compare.py --out DIR [--models qwen2-1.5b,llama-3-8b]
        [--batches 8] [--rounds 2]

For each model shape, op (q/k/v + norm + RoPE + cache, o_proj + residual, gate/up + norm + SwiGLU,
down + residual) and batch: the two plans alternate `--rounds` times; each timing is the median of 15 replays of
one CUDA graph of back-to-back launches over distinct weight copies (≥ 200 MB in all, beyond the L2), µs per
launch. Percentages count weight bytes only against the copy bandwidth measured first. Ops whose two plans are
the same are timed too (their spread is the noise). Writes gemv_plan_compare.json; prints a table last.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch
import triton
from gemv_bench import DEVICE, KIND, copy_bandwidth, runners, shapes, time_us

from kernelscope.engine.kernels import linear as linear_mod

CURRENT = linear_mod.gemv_plan


def previous_plan(kind: str, batch: int, rows: int, k: int, sms: int) -> linear_mod.GemvPlan:
    """The rule before 2026-11-26's split change (commit 5e6b9db): tiles by rows alone, 2 programs per SM aimed
    for, each split at least 4 K tiles. One token is the same in both."""
    if batch == 1:
        return CURRENT(kind, batch, rows, k, sms)
    block_n = 16 if rows <= 4096 else 32 if rows <= 16384 else 64
    block_k, warps, stages = (128, 8, 3) if block_n == 32 else (256, 4, 4)
    block_k = max(16, min(block_k, triton.next_power_of_2(k)))
    programs = triton.cdiv(rows, block_n)
    splits = 1
    if programs < 2 * sms:
        splits = max(1, min(math.ceil(2 * sms / programs), k // (4 * block_k), 8))
    k_split = triton.cdiv(triton.cdiv(k, splits), block_k) * block_k
    return linear_mod.GemvPlan(block_n, block_k, warps, stages, True, triton.cdiv(k, k_split), k_split)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="qwen2-1.5b,llama-3-8b,qwen2-0.5b")
    parser.add_argument("--batches", default="8")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    copy = copy_bandwidth()
    sms = torch.cuda.get_device_properties(DEVICE).multi_processor_count
    result: dict = {"device": torch.cuda.get_device_name(), "copy_bytes_per_s": copy, "sms": sms, "rows": []}
    print(f"copy bandwidth {copy / 1e9:.0f} GB/s, {sms} SMs", flush=True)
    summary = []
    for model in args.models.split(","):
        s = shapes(model)
        for batch in map(int, args.batches.split(",")):
            for name, (run, nbytes, rows, k, launches) in runners(s, batch).items():
                plans = {"previous": previous_plan(KIND[name], batch, rows, k, sms),
                         "current": CURRENT(KIND[name], batch, rows, k, sms)}
                times: dict[str, list[float]] = {"previous": [], "current": []}
                for _ in range(args.rounds):
                    for label, rule in (("previous", previous_plan), ("current", CURRENT)):
                        linear_mod.gemv_plan = rule
                        try:
                            times[label].append(time_us(run, launches))
                        finally:
                            linear_mod.gemv_plan = CURRENT
                row = {"model": model, "op": name, "batch": batch, "weight_bytes": nbytes,
                       **{f"{label}_plan": list(plan) for label, plan in plans.items()},
                       **{f"{label}_us": us for label, us in times.items()}}
                result["rows"].append(row)
                old, new = statistics.median(times["previous"]), statistics.median(times["current"])
                pct_old, pct_new = (100 * nbytes / (us * 1e-6) / copy for us in (old, new))
                same = "same plan" if plans["previous"] == plans["current"] else ""
                summary.append(f"{model:11s} B={batch} {name:7s} {old:7.2f} → {new:7.2f} us ({pct_old:4.1f}% → "
                               f"{pct_new:4.1f}% of copy) new/old {new / old:.3f} {same} "
                               f"prev {tuple(plans['previous'])} cur {tuple(plans['current'])}")
                print(summary[-1], flush=True)
                (args.out / "gemv_plan_compare.json").write_text(json.dumps(result, indent=1))
    print("\nsummary (median of rounds)")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
