"""What the decode-GEMV device benchmarks share (gemv_plan_compare.py, gemv_b1_sweep.py): the copy bandwidth, a
model's GEMV shapes, one launch per op over distinct weight copies, and CUDA-graph timing of back-to-back
launches."""

from __future__ import annotations

import math

import torch

from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.kernels import linear as linear_mod
from kernelscope.workload.model import build_config, resolve_model_source

DEVICE = torch.device("cuda")
BF16 = torch.bfloat16
KIND = {"qkv": "qkv", "o_proj": "residual", "gate_up": "gate_up", "down": "residual", "head": "head"}


def copy_bandwidth() -> float:
    """Device-to-device copy of 1 GiB: read + write bytes per second (median of 10 after 3 warm-ups)."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), DEVICE, 10, 3)
    return 2 * src.numel() / seconds


def shapes(model: str) -> dict:
    c = build_config(resolve_model_source(model))
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return {"dim": c.hidden_size, "ffn": c.intermediate_size, "heads": c.num_attention_heads,
            "kv_heads": c.num_key_value_heads, "head_dim": head_dim, "vocab": c.vocab_size}


def runners(s: dict, batch: int, ops: tuple[str, ...] = ("qkv", "o_proj", "gate_up", "down"),
            weight_bytes: float = 200e6) -> dict[str, tuple[object, int, int, int, int]]:
    """op → (one launch over the next weight copy, weight bytes, program rows, K, launches per graph). The copies
    of each op's weights add up to at least `weight_bytes` (beyond the L2), so no launch finds its weights there."""
    dim, ffn, heads, kv_heads, dh = s["dim"], s["ffn"], s["heads"], s["kv_heads"], s["head_dim"]

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE, dtype=BF16) * 0.02

    h, norm_w, residual = r(batch, dim), torch.ones(dim, device=DEVICE, dtype=BF16), r(batch, dim)
    inputs = {"o_proj": r(batch, heads * dh), "down": r(batch, ffn)}
    qkv_rows = (heads + 2 * kv_heads) * dh
    positions = torch.full((batch,), 100, device=DEVICE, dtype=torch.int64)
    inv_freq = 1.0 / 1e6 ** (torch.arange(0, dh, 2, device=DEVICE).float() / dh)
    caches = [torch.zeros(batch, 512, kv_heads, dh, device=DEVICE, dtype=BF16) for _ in range(2)]
    b_qkv = r(qkv_rows)
    sizes = {"qkv": (qkv_rows, dim), "o_proj": (dim, heads * dh), "gate_up": (2 * ffn, dim), "down": (dim, ffn),
             "head": (s["vocab"], dim)}
    table = {}
    for name in ops:
        n, k = sizes[name]
        nbytes = n * k * 2
        copies = max(2, math.ceil(weight_bytes / nbytes))
        weights = [r(n, k) for _ in range(copies)]
        step = [0]

        def run(name=name, weights=weights, step=step):
            w = weights[step[0] % len(weights)]
            step[0] += 1
            if name == "qkv":
                return linear_mod.norm_qkv_rope_cache(h, norm_w, 1e-6, w, b_qkv, positions, inv_freq, *caches,
                                                      heads, kv_heads)
            if name == "gate_up":
                return linear_mod.norm_gate_up_swiglu(h, norm_w, 1e-6, w)
            if name == "head":
                return linear_mod.norm_linear(h, norm_w, 1e-6, w)
            return linear_mod.linear_residual(inputs[name], w, residual)

        program_rows = n // 2 if name in ("qkv", "gate_up") else n
        table[name] = (run, nbytes, program_rows, k, max(16, copies))
    return table


def time_us(run, launches: int) -> float:
    """µs per launch: `launches` back-to-back calls captured in one CUDA graph, median of 15 replays."""
    for _ in range(launches):
        run()  # compile, counters
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(launches):
            run()
    us = 1e6 * median_seconds(graph.replay, DEVICE, 15, 2) / launches
    del graph
    return us
