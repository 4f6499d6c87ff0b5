"""Device sweep of the prefill flash attention's tiles (kernels/attention.py `_prefill_config`) at qwen2-1.5b
head shapes (12 query heads, 2 KV heads, head dim 128), bf16, 128 to 2048 tokens.

    PYTHONPATH=src python benchmarks/engine/attention_sweep.py --out DIR

Decode attention's split plan has its own sweep: benchmarks/engine/decode_attention_sweep.py (its former
`--decode` mode here swept the static split of 2026-11-25, `DECODE_CONFIG`, which is gone).

Each (length, config) is timed as 10 back-to-back calls replayed from one CUDA graph (median of 15 replays, CUDA
events); FLOPs counted for the causal half (4·H·Dh·L(L+1)/2). Writes attention_sweep.json.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.kernels import attention as attention_mod

CONFIGS = [  # (BLOCK_M, BLOCK_N, warps, stages)
    (128, 64, 8, 3), (128, 64, 8, 2), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 2),
    (64, 64, 4, 3), (64, 128, 4, 2), (64, 32, 4, 3), (128, 32, 8, 3), (256, 64, 8, 2),
]
DEVICE = torch.device("cuda")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    heads, kv_heads, head_dim = 12, 2, 128
    result: dict = {"device": torch.cuda.get_device_name(), "rows": []}
    original = attention_mod._prefill_config
    for length in (128, 512, 2048):
        q = torch.randn(1, length, heads, head_dim, device=DEVICE, dtype=torch.bfloat16)
        k, v = (torch.randn(1, length, kv_heads, head_dim, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
        flops = 4 * heads * head_dim * length * (length + 1) // 2
        for config in [None, *CONFIGS]:
            if config is not None:
                attention_mod._prefill_config = lambda n, c=config: c
            try:
                def run(q=q, k=k, v=v) -> None:
                    attention_mod.attention_prefill(q, k, v, head_dim ** -0.5)

                for _ in range(2):
                    run()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for _ in range(10):
                        run()
                us = 1e6 * median_seconds(graph.replay, DEVICE, 15, 2) / 10
            except Exception as error:  # too many registers or too much shared memory for this config
                result["rows"].append({"length": length, "config": config, "error": str(error)[:200]})
                continue
            finally:
                attention_mod._prefill_config = original
            result["rows"].append({"length": length, "config": config or "table", "us": us,
                                   "TFLOPs": flops / us / 1e6})
            print(f"{length:5d} {str(config or 'table'):22s} {us:8.1f} us {flops / us / 1e6:6.0f} TFLOP/s", flush=True)
        (args.out / "attention_sweep.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
