"""Device sweep of decode attention's split plan (kernels/attention.py `decode_plan`) at model head shapes, bf16,
batch 1 and 8, one query token per sequence against several live contexts in a cache of 2,304 slots (the
capacity Engine.generate, engine_decode.py and side_by_side.py use).

    PYTHONPATH=src python benchmarks/engine/decode_attention_sweep.py --out DIR [--label new]
        [--models llama-3-8b,qwen2-1.5b] [--contexts 201,384,1000,2048] [--table-only]

1. Copy bandwidth (1 GiB device-to-device, read + write bytes, median of 10).
2. For each (model, batch, context): the tree's own plan ("table"; `--table-only` stops there, so that an older
   tree run with PYTHONPATH=old/src gives its baseline in the same call) and, where the tree has `DecodePlan`, a
   grid of plans: splits launched per (sequence, KV head), the granule of the split length (its minimum),
   BLOCK_S, warps, and the most partial values the combine reads at once. Each cell: one CUDA graph of n
   back-to-back launches over n distinct caches (n such that the live K/V read add up to ≥ 128 MB, beyond the
   50 MB L2; 16–512), median of 15 replays, µs per launch; "% copy" = the launch's fewest bytes (live K and V,
   q, output) at the copy rate over its time. The first launch's output (poisoned with NaN first) is compared
   with the PyTorch reference.

Writes decode_attention_sweep_<label>.json (after every case); prints each case's best cells last.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine import reference as ref
from kernelscope.engine.kernels import attention as attention_mod
from kernelscope.workload.model import build_config, resolve_model_source

DEVICE = torch.device("cuda")
BF16 = torch.bfloat16
SLOTS = 2304
PLAN = getattr(attention_mod, "DecodePlan", None)  # None: a tree from before the live-length splits
TABLE = getattr(attention_mod, "decode_plan", None)


def copy_bandwidth() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), DEVICE, 10, 3)
    return 2 * (1 << 30) / seconds


def shapes(model: str) -> tuple[int, int, int]:
    c = build_config(resolve_model_source(model))
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return c.num_attention_heads, c.num_key_value_heads, head_dim


def grid(batch: int, kv_heads: int) -> list[tuple[int, int, int, int, int]]:
    """(splits, granule, block_s, warps, combine) cells."""
    cells = []
    for granule, block_s in ((64, 64), (64, 128), (128, 128)):
        most = -(-SLOTS // granule)
        for splits in sorted({min(a, most) for a in (2, 4, 8, 16, 32, 64)}):
            if batch * kv_heads * splits > 4096:
                continue
            for warps in (4, 8):
                for combine in (4096, 16384):
                    cells.append((splits, granule, block_s, warps, combine))
    return cells


def use(cell: tuple[int, int, int, int, int] | None) -> None:
    if TABLE is None:
        return
    if cell is None:
        attention_mod.decode_plan = TABLE
        return
    splits, granule, block_s, warps, combine = cell
    plan = PLAN(splits, granule, block_s, warps, 2, combine)
    attention_mod.decode_plan = lambda *args, **kwargs: plan


def run_case(model: str, batch: int, context: int, copy: float, table_only: bool, result: dict) -> list[dict]:
    heads, kv_heads, head_dim = shapes(model)
    live = 2 * batch * context * kv_heads * head_dim * 2
    n = max(16, min(512, -(-(128 << 20) // live)))
    gen = torch.Generator(device=DEVICE).manual_seed(context + batch)
    caches = [torch.randn(batch, SLOTS, kv_heads, head_dim, device=DEVICE, dtype=BF16, generator=gen)
              for _ in range(2 * n)]
    q = torch.randn(batch, heads, head_dim, device=DEVICE, dtype=BF16, generator=gen)
    lengths = torch.full((batch,), context, device=DEVICE, dtype=torch.int64)
    out = torch.empty(batch, heads, head_dim, device=DEVICE, dtype=BF16)
    scale = head_dim ** -0.5
    want = ref.attention_decode(q.float(), caches[0].float(), caches[1].float(), lengths, scale)
    nbytes = live + 2 * q.numel() * 2
    rows = []
    cells = [None] if table_only or PLAN is None else [None, *grid(batch, kv_heads)]
    for cell in cells:
        use(cell)
        row = {"model": model, "batch": batch, "context": context, "launches": n,
               "cell": "table" if cell is None else list(cell)}
        if cell is None and TABLE is not None:
            p = TABLE(batch, kv_heads, heads // kv_heads, head_dim, SLOTS)
            row["table"] = [p.splits, p.granule, p.block_s, p.warps, p.combine]
        try:
            out.fill_(float("nan"))
            attention_mod.attention_decode(q, caches[0], caches[1], lengths, scale, out=out)
            torch.cuda.synchronize()
            row["rel_err"] = float((out.float() - want).norm() / want.norm())
            row["nan"] = bool(out.isnan().any())

            def calls() -> None:
                for i in range(n):
                    attention_mod.attention_decode(q, caches[2 * i], caches[2 * i + 1], lengths, scale, out=out)

            calls()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                calls()
            row["us"] = 1e6 * median_seconds(graph.replay, DEVICE, 15, 2) / n
            row["pct_copy"] = 100 * nbytes / (row["us"] * 1e-6) / copy
            del graph
        except Exception as error:
            row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
        finally:
            use(None)
        rows.append(row)
    result["rows"] += rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--label", default="new")
    parser.add_argument("--models", default="llama-3-8b,qwen2-1.5b")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--contexts", default="201,384,1000,2048")
    parser.add_argument("--table-only", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    copy = copy_bandwidth()
    result = {"label": args.label, "device": torch.cuda.get_device_name(), "copy_GBps": copy / 1e9,
              "slots": SLOTS, "cell_fields": ["splits", "granule", "block_s", "warps", "combine"], "rows": []}
    print(f"[{args.label}] copy {copy / 1e9:.0f} GB/s", flush=True)
    summary = []
    for model in args.models.split(","):
        for batch in map(int, args.batches.split(",")):
            for context in map(int, args.contexts.split(",")):
                rows = run_case(model, batch, context, copy, args.table_only, result)
                torch.cuda.empty_cache()
                (args.out / f"decode_attention_sweep_{args.label}.json").write_text(json.dumps(result, indent=1))
                timed = sorted((r for r in rows if "us" in r), key=lambda r: r["us"])
                table = next((r for r in rows if r["cell"] == "table" and "us" in r), None)
                worst_err = max((r["rel_err"] for r in rows if "rel_err" in r), default=float("nan"))
                errors = sum("error" in r or r.get("nan") for r in rows)
                line = (f"{model:10s} B{batch} ctx{context:5d} n{rows[0]['launches']:3d} table "
                        + (f"{table['us']:6.2f} us ({table['pct_copy']:4.1f}%) {table.get('table', '')}"
                           if table else "-")
                        + "".join(f" | {r['cell']} {r['us']:.2f}" for r in timed[:3] if r is not table)
                        + f" | max err {worst_err:.1e}, failed {errors}")
                summary.append(line)
                print(line, flush=True)
    print(f"\n[{args.label}] {time.perf_counter() - start:.0f} s")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
