"""Engine decode benchmark (device): TPOT, bytes per token and bandwidth utilisation of the kernelscope engine,
side by side with transformers eager and transformers static cache + torch.compile, in one run.

    PYTHONPATH=src python benchmarks/engine_decode.py --out results.json [--quick [--llama-b1]]

Measures on the same device in the same process: the device copy bandwidth (D2D copy, read + write bytes) and the
bf16 matmul rate (the roofs); then per model shape: engine decode TPOT (median of per-step CUDA-event times over
repeated runs, after warm-up), the transformers baselines, greedy token equality engine vs transformers, prefill
tokens/s, and one profiled eager decode step (per-kernel device time and achieved bandwidth of each declared
kernel). Sections fail independently: an error is recorded in the JSON and the run goes on.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import commit  # noqa: E402
from engine_decode_measure import (  # noqa: E402
    copy_bandwidth,
    engine_decode,
    engine_prefill,
    kernel_profile,
    matmul_rate,
    prefill_kernel_profile,
)
from engine_decode_vs_hf import (  # noqa: E402
    engine_tpot_by_difference,
    graph_checks,
    hf_tpot,
    teacher_forced,
    token_equality,
)

from kernelscope.engine.generate import Engine  # noqa: E402
from kernelscope.engine.kernels.common import set_pdl  # noqa: E402
from kernelscope.workload.model import build_config, resolve_model_source  # noqa: E402

DTYPE = torch.bfloat16


# ---- driver

def build(preset: str) -> tuple[Any, Engine]:
    from kernelscope.engine.weights import random_hf_model

    config = build_config(resolve_model_source(preset))
    model = random_hf_model(config, "cuda", DTYPE, seed=0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model, Engine.from_hf_model(model, backend="triton", max_seq_len=2304)


def section(results: dict[str, Any], key: str, fn: Callable[[], Any], out: Path) -> Any:
    start = time.perf_counter()
    try:
        value = fn()
    except Exception as exc:  # one failed section must not lose the others
        value = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=6)}
    results[key] = value
    print(f"[{time.perf_counter() - start:6.1f}s] {key}: {json.dumps(value, default=str)[:600]}", flush=True)
    out.write_text(json.dumps(results, indent=2, default=str))
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--commit", help="the commit to record when the tree has no .git (device copies)")
    parser.add_argument("--quick", action="store_true", help="fewer repeats, no llama-3-8b, no torch.compile")
    parser.add_argument("--llama-b1", action="store_true",
                        help="with --quick: also the llama-3-8b shape's batch-1 TPOT and one profiled step")
    args = parser.parse_args()
    import transformers
    import triton

    reps = 1 if args.quick else 3
    results: dict[str, Any] = {
        "benchmark": "engine_decode", "device": torch.cuda.get_device_name(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "commit": args.commit or commit(),
        "torch": torch.__version__, "triton": triton.__version__, "transformers": transformers.__version__,
        "dtype": "bfloat16", "weights": "random (transformers init), engine and transformers share them",
    }
    section(results, "graph_checks_fp32", graph_checks, args.out)
    copy = section(results, "copy_bandwidth", copy_bandwidth, args.out)
    roof = section(results, "bf16_matmul", matmul_rate, args.out)
    # No assumed roofs: when a roof was not measured in this run, the shares that need it are left out (null).
    copy_gbps, roof_tflops = copy.get("copy_bandwidth_GBps"), roof.get("bf16_matmul_TFLOPs")

    model, engine = build("qwen2-1.5b")
    q: dict[str, Any] = {}
    results["qwen2-1.5b"] = q
    b1 = section(q, "engine_b1", lambda: engine_decode(engine, 1, 128, 256, reps), args.out)
    if "tpot_ms" in b1:
        b1["bandwidth_utilisation"] = b1["achieved_GBps"] / copy_gbps if copy_gbps else None
    section(q, "engine_b1_tpot_by_difference_ms",
            lambda: engine_tpot_by_difference(engine, 1, 128, 256, 32, reps), args.out)
    # A long context: the cache holds 2,304 slots, so 1,984 prompt tokens + 256 new ones fill it.
    long = section(q, "engine_b1_long_context", lambda: engine_decode(engine, 1, 1984, 256, reps), args.out)
    if "tpot_ms" in long:
        long["bandwidth_utilisation"] = long["achieved_GBps"] / copy_gbps if copy_gbps else None
    b8 = section(q, "engine_b8", lambda: engine_decode(engine, 8, 128, 256, reps), args.out)
    if "tpot_ms" in b8:
        b8["bandwidth_utilisation"] = b8["achieved_GBps"] / copy_gbps if copy_gbps else None
    # Side by side: programmatic dependent launch on (opt-in; each kernel launches before the previous one ends).
    set_pdl(True)
    on = section(q, "engine_b1_pdl", lambda: engine_decode(engine, 1, 128, 256, reps), args.out)
    on8 = section(q, "engine_b8_pdl", lambda: engine_decode(engine, 8, 128, 256, reps), args.out)
    set_pdl(None)
    for block in (on, on8):
        if "tpot_ms" in block:
            block["bandwidth_utilisation"] = block["achieved_GBps"] / copy_gbps if copy_gbps else None
    for prompt in (128, 512, 2048):
        for graph in (True, False):
            section(q, f"engine_prefill_b1_{prompt}" + ("" if graph else "_eager"),
                    lambda p=prompt, g=graph: engine_prefill(engine, 1, p, roof_tflops, g), args.out)
    for prompt in (128, 2048):
        section(q, f"prefill_kernel_profile_{prompt}", lambda p=prompt: prefill_kernel_profile(engine, p), args.out)
    section(q, "token_equality_vs_transformers", lambda: token_equality(model, engine, 128, 256), args.out)
    section(q, "teacher_forced_vs_transformers", lambda: teacher_forced(model, engine, 128, 256, True), args.out)
    section(q, "kernel_profile_b1", lambda: kernel_profile(engine, copy_gbps), args.out)
    ids = torch.randint(0, engine.config.vocab_size, (1, 128), device="cuda")
    section(q, "hf_eager_b1", lambda: hf_tpot(model, ids, 256, 32, max(reps - 1, 1), static=False), args.out)
    if not args.quick:
        section(q, "hf_static_compile_b1", lambda: hf_tpot(model, ids, 256, 32, reps, static=True), args.out)
    _ratios(q)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    del model, engine
    torch.cuda.empty_cache()

    if args.quick and args.llama_b1:
        model, engine = build("llama-3-8b")
        llama = {}
        results["llama-3-8b"] = llama
        r = section(llama, "engine_b1", lambda: engine_decode(engine, 1, 128, 256, 2), args.out)
        if "tpot_ms" in r:
            r["bandwidth_utilisation"] = r["achieved_GBps"] / copy_gbps if copy_gbps else None
        section(llama, "kernel_profile_b1", lambda: kernel_profile(engine, copy_gbps), args.out)
        del model, engine
        torch.cuda.empty_cache()
    if not args.quick:
        model, engine = build("llama-3-8b")
        llama: dict[str, Any] = {}
        results["llama-3-8b"] = llama
        for batch in (1, 8):
            r = section(llama, f"engine_b{batch}", lambda b=batch: engine_decode(engine, b, 128, 256, 2), args.out)
            if "tpot_ms" in r:
                r["bandwidth_utilisation"] = r["achieved_GBps"] / copy_gbps if copy_gbps else None
        section(llama, "engine_prefill_b1_2048", lambda: engine_prefill(engine, 1, 2048, roof_tflops), args.out)
        section(llama, "token_equality_vs_transformers", lambda: token_equality(model, engine, 128, 64), args.out)
        section(llama, "teacher_forced_vs_transformers", lambda: teacher_forced(model, engine, 128, 64, True),
                args.out)
        ids = torch.randint(0, engine.config.vocab_size, (1, 128), device="cuda")
        section(llama, "hf_eager_b1", lambda: hf_tpot(model, ids, 64, 16, 1, static=False), args.out)
        section(llama, "engine_b1_tpot_by_difference_ms",
                lambda: engine_tpot_by_difference(engine, 1, 128, 64, 16, 2), args.out)
        _ratios(llama)
    args.out.write_text(json.dumps(results, indent=2, default=str))
    _print_summary(results)


def _ratios(block: dict[str, Any]) -> None:
    ours = block.get("engine_b1_tpot_by_difference_ms")
    if not isinstance(ours, float):
        return
    for key in ("hf_eager_b1", "hf_static_compile_b1"):
        if isinstance(block.get(key), dict) and "tpot_ms" in block[key]:
            block[f"speedup_vs_{key.removesuffix('_b1')}"] = block[key]["tpot_ms"] / ours


def _print_summary(results: dict[str, Any]) -> None:
    print("\nsummary")
    for model in ("qwen2-1.5b", "llama-3-8b"):
        block = results.get(model, {})
        for key, value in block.items():
            if isinstance(value, dict) and "tpot_ms" in value:
                util = value.get("bandwidth_utilisation")
                print(f"  {model:11s} {key:24s} TPOT {value['tpot_ms']:.3f} ms"
                      + (f"  BW util {util:.1%}" if util is not None else ""))
            elif isinstance(value, dict) and "prefill_ms" in value:
                share = value.get("share_of_bf16_roof")
                print(f"  {model:11s} {key:24s} prefill {value['prefill_ms']:.3f} ms"
                      + (f"  {share:.1%} of the bf16 roof" if share is not None else ""))
            elif isinstance(value, float):
                print(f"  {model:11s} {key:24s} {value:.3f}")


if __name__ == "__main__":
    main()
