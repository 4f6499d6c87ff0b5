"""Fused gate/up GEMV (norm + SwiGLU) at other models' shapes, 2 and 8 tokens: the tree's table against the previous
32-row tiles (BLOCK_K 256, 4 warps, 4 stages), back-to-back launches over distinct weights (≥ 1.2 GB, beyond L2),
one CUDA graph, median of 15 replays. Copy bandwidth measured first.

    PYTHONPATH=src python3 benchmarks/results/engine-tiles-h100-2026-11-26/gate_up_shapes.py

(The run of 2026-11-26 used this logic from a scratch copy; reformatted here for ruff.)
"""

import torch

from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.kernels import linear as L

DEV, BF16 = torch.device("cuda"), torch.bfloat16
TABLE = L.gemv_config


def old(batch: int, rows: int, k: int) -> tuple[int, int, int, int, bool]:
    if batch > 1 and 4096 < rows <= 16384:
        return 32, max(16, min(256, 1 << (k - 1).bit_length())), 4, 4, True
    return TABLE(batch, rows, k)


def main() -> None:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEV)
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / median_seconds(lambda s=src, d=dst: d.copy_(s), DEV, 10, 3)
    del src, dst
    print(f"copy {copy / 1e9:.0f} GB/s")
    for name, ffn, dim in (("qwen2-1.5b", 8960, 1536), ("qwen2-0.5b", 4864, 896), ("llama-3-8b", 14336, 4096)):
        layers = max(4, int(1.2e9 // (2 * ffn * dim * 2)))
        ws = [torch.randn(2 * ffn, dim, device=DEV, dtype=BF16) * 0.02 for _ in range(layers)]
        norm_w = torch.ones(dim, device=DEV, dtype=BF16)
        for batch in (2, 8):
            h = torch.randn(batch, dim, device=DEV, dtype=BF16)
            res = {}
            for label, cfg in (("old", old), ("new", TABLE)):
                L.gemv_config = cfg

                def run(h=h, ws=ws, norm_w=norm_w) -> list:
                    return [L.norm_gate_up_swiglu(h, norm_w, 1e-6, w) for w in ws]

                run()
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    run()
                res[label] = 1e6 * median_seconds(graph.replay, DEV, 15, 3) / layers
                L.gemv_config = TABLE
            pct = {key: 100 * 2 * ffn * dim * 2 / (us * 1e-6) / copy for key, us in res.items()}
            print(f"{name} B={batch} config old {old(batch, ffn, dim)} new {TABLE(batch, ffn, dim)} layers {layers}: "
                  f"old {res['old']:.2f} us ({pct['old']:.1f}%)  new {res['new']:.2f} us ({pct['new']:.1f}%)  "
                  f"new/old {res['new'] / res['old']:.3f}", flush=True)
        del ws


if __name__ == "__main__":
    main()
