"""Device sweep of split-K for the decode GEMVs of 2–8 tokens (kernels/linear.py `GEMV_SPLIT_RULES`: per kind of
GEMV, the programs aimed for per SM, 0 = no split, and the fewest K elements a split streams) at qwen2-1.5b
shapes, bf16: the fused q/k/v (norm + RoPE + cache write), o_proj and down (+ residual), gate/up (+ SwiGLU) and
the LM head.

    PYTHONPATH=src python benchmarks/engine/gemv_split_sweep.py --out DIR [--batches 2,4,8] [--targets 0,1,2,3,4]
    PYTHONPATH=src python benchmarks/engine/gemv_split_sweep.py --out DIR --tiles [--ops qkv,o_proj] [--batches 8]

The plain sweep sets the target of the op's kind and keeps its minimum. --tiles sweeps the tensor-core tiles
(BLOCK_K, warps, stages; BLOCK_N as the table gives it) together with the split settings (programs per SM aimed
for, the fewest K elements a split streams) for the ops named.

Each (op, batch, target) is timed as 28 back-to-back launches, one per layer with its own weights (so no launch
finds its weights in L2), replayed from one CUDA graph (median of 15 replays, CUDA events); GB/s counts the
weights and activations read and written once. The copy bandwidth of the same device is measured first. Writes
gemv_split_sweep.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.kernels import linear as linear_mod

DEVICE = torch.device("cuda")
BF16 = torch.bfloat16
LAYERS = 28
DIM, FFN, HEADS, KV_HEADS, HEAD_DIM, VOCAB, SLOTS = 1536, 8960, 12, 2, 128, 151936, 512
# op → the kind of GEMV it launches (kernels/linear.py GEMV_KINDS): the key of its tile and split rules.
KIND = {"qkv": "qkv", "o_proj": "residual", "down": "residual", "gate_up": "gate_up", "head": "head"}
# op → (program rows, K) as its launcher passes them (q/k/v and gate/up count pairs of rows).
SHAPE = {"qkv": ((HEADS + 2 * KV_HEADS) * HEAD_DIM // 2, DIM), "o_proj": (DIM, DIM), "down": (DIM, FFN),
         "gate_up": (FFN, DIM), "head": (VOCAB, DIM)}


def copy_bandwidth() -> float:
    src = torch.empty(1 << 30, dtype=torch.uint8, device=DEVICE)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), DEVICE, 10, 3)
    return 2 * src.numel() / seconds


def ops(batch: int) -> dict[str, tuple[object, int]]:
    """op → (a function running all layers, bytes moved per layer)."""
    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=DEVICE, dtype=BF16) * 0.02

    h, norm_w = r(batch, DIM), torch.ones(DIM, device=DEVICE, dtype=BF16)
    rows = (HEADS + 2 * KV_HEADS) * HEAD_DIM
    w_qkv, b_qkv = [r(rows, DIM) for _ in range(LAYERS)], r(rows)
    w_o = [r(DIM, DIM) for _ in range(LAYERS)]
    w_down = [r(DIM, FFN) for _ in range(LAYERS)]
    w_gu = [r(2 * FFN, DIM) for _ in range(LAYERS)]
    w_head = r(VOCAB, DIM)
    act_ffn, residual = r(batch, FFN), r(batch, DIM)
    positions = torch.full((batch,), 100, device=DEVICE, dtype=torch.int64)
    inv_freq = 1.0 / 1e6 ** (torch.arange(0, HEAD_DIM, 2, device=DEVICE).float() / HEAD_DIM)
    caches = [torch.zeros(batch, SLOTS, KV_HEADS, HEAD_DIM, device=DEVICE, dtype=BF16) for _ in range(2)]
    es = 2
    return {
        "qkv": (lambda: [linear_mod.norm_qkv_rope_cache(h, norm_w, 1e-6, w, b_qkv, positions, inv_freq, *caches,
                                                         HEADS, KV_HEADS) for w in w_qkv], rows * DIM * es),
        "o_proj": (lambda: [linear_mod.linear_residual(h, w, residual) for w in w_o], DIM * DIM * es),
        "down": (lambda: [linear_mod.linear_residual(act_ffn, w, residual) for w in w_down], DIM * FFN * es),
        "gate_up": (lambda: [linear_mod.norm_gate_up_swiglu(h, norm_w, 1e-6, w) for w in w_gu],
                    2 * FFN * DIM * es),
        "head": (lambda: [linear_mod.norm_linear(h, norm_w, 1e-6, w_head)], VOCAB * DIM * es),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", default="2,4,8")
    parser.add_argument("--targets", default="0,1,2,3,4")
    parser.add_argument("--tiles", action="store_true", help="sweep tiles and split settings together")
    parser.add_argument("--ops", default="qkv,o_proj", help="ops of the --tiles sweep")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    copy = copy_bandwidth()
    result: dict = {"device": torch.cuda.get_device_name(), "copy_bytes_per_s": copy, "rows": []}
    print(f"copy bandwidth {copy / 1e9:.0f} GB/s", flush=True)
    if args.tiles:
        tile_sweep(args, copy, result)
        return
    original = linear_mod.GEMV_SPLIT_RULES
    for batch in map(int, args.batches.split(",")):
        for name, (run, weight_bytes) in ops(batch).items():
            launches = 1 if name == "head" else LAYERS
            for target in map(float, args.targets.split(",")):
                linear_mod.GEMV_SPLIT_RULES = {**original, KIND[name]: (target, original[KIND[name]][1])}
                try:
                    us = _time(run, launches)
                except Exception as error:
                    result["rows"].append({"op": name, "batch": batch, "target": target, "error": str(error)[:300]})
                    print(f"B={batch} {name:8s} target {target}: {str(error)[:200]}", flush=True)
                    continue
                finally:
                    linear_mod.GEMV_SPLIT_RULES = original
                pct = 100 * weight_bytes / (us * 1e-6) / copy
                result["rows"].append({"op": name, "batch": batch, "target": target, "us": us,
                                       "weight_bytes": weight_bytes, "pct_of_copy": pct})
                print(f"B={batch} {name:8s} target {target:3.1f}: {us:8.2f} us  {pct:5.1f}% of copy", flush=True)
            (args.out / "gemv_split_sweep.json").write_text(json.dumps(result, indent=1))


def _time(run, launches: int) -> float:
    """µs per launch: the calls run once eagerly (counters, compilation), then replayed from one CUDA graph."""
    run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    us = 1e6 * median_seconds(graph.replay, DEVICE, 15, 2) / launches
    del graph
    return us


def tile_sweep(args: argparse.Namespace, copy: float, result: dict) -> None:
    config, rules = linear_mod.gemv_tiles, linear_mod.GEMV_SPLIT_RULES
    grid = [(block_k, warps, stages) for block_k in (128, 256) for warps in (4, 8) for stages in (2, 3, 4)]
    # (programs per SM aimed for, fewest K elements a split streams); before 2026-11-26 the minimum was counted in
    # K tiles: (0, 4), (2, 1), (2, 2), (4, 1) tiles.
    splits = [(0.0, 1024), (2.0, 256), (2.0, 384), (4.0, 256), (4.0, 384), (4.0, 1024)]
    for batch in map(int, args.batches.split(",")):
        table = ops(batch)
        for name in args.ops.split(","):
            run, weight_bytes = table[name]
            kind = KIND[name]
            for block_k, warps, stages in grid:
                def tiles(kd, b, rows, k, n_splits, bk=block_k, w=warps, st=stages):
                    block_n = config(kd, b, rows, k, n_splits)[0]
                    return (block_n, bk, w, st, True) if b > 1 else config(kd, b, rows, k, n_splits)
                for split_target, split_min_k in splits:
                    linear_mod.gemv_tiles = tiles
                    linear_mod.GEMV_SPLIT_RULES = {**rules, kind: (split_target, split_min_k)}
                    row = {"op": name, "batch": batch, "block_k": block_k, "warps": warps, "stages": stages,
                           "target": split_target, "min_k": split_min_k,
                           "splits": linear_mod.gemv_plan(kind, batch, *SHAPE[name], linear_mod.sm_count(DEVICE)).splits}
                    try:
                        us = _time(run, LAYERS)
                        row.update(us=us, pct_of_copy=100 * weight_bytes / (us * 1e-6) / copy)
                        print(f"B={batch} {name:7s} K{block_k:3d} w{warps} s{stages} t{split_target} m{split_min_k} "
                              f"({row['splits']} splits): {us:7.2f} us {row['pct_of_copy']:5.1f}%", flush=True)
                    except Exception as error:
                        row["error"] = str(error)[:200]
                    finally:
                        linear_mod.gemv_tiles = config
                        linear_mod.GEMV_SPLIT_RULES = rules
                    result["rows"].append(row)
            (args.out / "gemv_tile_sweep.json").write_text(json.dumps(result, indent=1))
    best = {}
    for row in result["rows"]:
        key = (row["op"], row["batch"])
        if "us" in row and (key not in best or row["us"] < best[key]["us"]):
            best[key] = row
    for (name, batch), row in sorted(best.items()):
        print(f"best B={batch} {name}: {row}", flush=True)


if __name__ == "__main__":
    main()
