"""Device sweep of the prefill GEMM's tiles (kernels/gemm.py `_config`) at qwen2-1.5b shapes, 128 and 2048 tokens.

    PYTHONPATH=src python benchmarks/engine/gemm_sweep.py --out DIR

Each (shape, tile config) is timed as 10 back-to-back calls replayed from one CUDA graph (median of 15 replays,
CUDA events), weights rotated over copies larger than L2; split-K follows the config as the engine's own rule
decides. Writes gemm_sweep.json: per row µs, TFLOP/s, weight GB/s, and the bf16 matmul rate measured in the
same run, so the shares are against this device, not a datasheet.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from kernelscope.capture import calibrate
from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.kernels import gemm as gemm_mod

# (N, K); gate_up_swiglu: the fused gate/up + SwiGLU GEMM (N = the 8960 outputs, 2N weight rows).
SHAPES = {"qkv": (2048, 1536), "o_proj": (1536, 1536), "gate_up": (17920, 1536), "down": (1536, 8960),
          "gate_up_swiglu": (8960, 1536)}
CONFIGS = [  # (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages)
    (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3), (128, 256, 64, 8, 4),
    (256, 128, 64, 8, 3), (128, 128, 128, 8, 3), (64, 128, 64, 4, 4), (64, 64, 64, 4, 4),
    (128, 64, 64, 4, 4), (128, 64, 64, 8, 3), (128, 64, 128, 4, 3),
]
SKINNY = [  # for ≤ 256 tokens: narrow tiles, deeper pipelines
    (64, 64, 64, 4, 4), (64, 64, 128, 4, 3), (64, 64, 64, 4, 6), (64, 32, 128, 4, 4), (64, 32, 64, 4, 6),
    (128, 64, 64, 4, 4), (128, 32, 128, 4, 4), (128, 64, 128, 8, 3), (32, 64, 128, 4, 4), (64, 128, 64, 4, 4),
]
DEVICE = torch.device("cuda")


def graph_us(fn, calls: int = 10) -> float:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return 1e6 * median_seconds(graph.replay, DEVICE, 15, 2) / calls


def runner(x: torch.Tensor, weights: list[torch.Tensor], out: torch.Tensor, swiglu: bool):
    """One GEMM per call, on the next weight copy (beyond L2 between calls)."""
    step = [0]

    def run() -> None:
        step[0] += 1
        if swiglu:
            gemm_mod.gemm_swiglu(x, weights[step[0] % len(weights)], out)
        else:
            gemm_mod.gemm(x, weights[step[0] % len(weights)], None, out)

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--tokens", default="128,2048")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    roof = calibrate.gemm_flops(DEVICE, "bf16", 8192, repeats=10) or 0.0
    result = {"device": torch.cuda.get_device_name(), "bf16_matmul_TFLOPs": roof / 1e12, "rows": []}
    originals = gemm_mod._config, gemm_mod._swiglu_config
    for tokens in (int(t) for t in args.tokens.split(",")):
        for name, (n, k) in SHAPES.items():
            swiglu = name == "gate_up_swiglu"
            rows = 2 * n if swiglu else n
            copies = max(2, int(120e6 // (rows * k * 2)) + 1)
            weights = [torch.randn(rows, k, device=DEVICE, dtype=torch.bfloat16) * k ** -0.5 for _ in range(copies)]
            x = torch.randn(tokens, k, device=DEVICE, dtype=torch.bfloat16)
            out = torch.empty(tokens, n, device=DEVICE, dtype=torch.bfloat16)
            for config in [None, *(SKINNY if tokens <= 256 else CONFIGS)]:
                if config is not None:
                    gemm_mod._config = gemm_mod._swiglu_config = lambda *shape, c=config: c
                run = runner(x, weights, out, swiglu)
                try:
                    splits = 1 if swiglu else gemm_mod.gemm_splits(tokens, n, k, gemm_mod._sm_count(DEVICE))[0]
                    us = graph_us(run)
                except Exception as error:  # a config the compiler or the device rejects
                    result["rows"].append({"tokens": tokens, "op": name, "config": config, "error": str(error)[:200]})
                    continue
                finally:
                    gemm_mod._config, gemm_mod._swiglu_config = originals
                flops = 2 * tokens * rows * k
                result["rows"].append({"tokens": tokens, "op": name, "config": config or "table", "splits": splits,
                                       "us": us, "TFLOPs": flops / us / 1e6, "of_bf16_roof": flops / us / 1e6 / (roof / 1e12) if roof else None,
                                       "weight_GBps": rows * k * 2 / us / 1e3})
                row = result["rows"][-1]
                print(f"{tokens:5d} {name:8s} {str(config or 'table'):28s} splits={splits:2d} {us:8.1f} us "
                      f"{row['TFLOPs']:6.0f} TFLOP/s {row['weight_GBps']:6.0f} GB/s", flush=True)
            (args.out / "gemm_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    best = {}
    for row in result["rows"]:
        key = (row["tokens"], row["op"])
        if "us" in row and (key not in best or row["us"] < best[key]["us"]):
            best[key] = row
    result["best"] = list(best.values())
    (args.out / "gemm_sweep.json").write_text(json.dumps(result, indent=1, default=str))
    for row in result["best"]:
        print(f"best {row['tokens']:5d} {row['op']:8s} {row['config']} {row['us']:.1f} us {row['TFLOPs']:.0f} TFLOP/s")


if __name__ == "__main__":
    main()
