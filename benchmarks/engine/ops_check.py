"""Device check of the engine's Triton operators: correctness against the PyTorch reference in bf16 at
qwen2-1.5b shapes, CUDA-graph capture of a decode layer, and decode GEMV bandwidth against the copy bandwidth.

Run on a GPU from the checkout: `PYTHONPATH=src python benchmarks/engine/ops_check.py [--sweep] [--out DIR]`.
--sweep also times a grid of GEMV block sizes (to fill kernels/linear.py's config table).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator

import torch

from kernelscope.capture import calibrate
from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine import reference as ref
from kernelscope.engine.kernels import linear as linear_mod
from kernelscope.engine.ops import Ops

D, H, HKV, DH, F, V = 1536, 12, 2, 128, 8960, 151936
EPS, THETA, SLOTS = 1e-6, 1_000_000.0, 1024
DT = torch.bfloat16
DEV = "cuda"


def rel_err(out: torch.Tensor, want: torch.Tensor) -> float:
    out, want = out.double(), want.double()
    return ((out - want).norm() / want.norm().clamp_min(1e-30)).item()


def median_ms(fn: Callable[[], object], reps: int = 50, warmup: int = 10) -> float:
    return 1e3 * median_seconds(fn, torch.device(DEV), reps, warmup)


def graph_ms(fn: Callable[[], object], calls: int = 24, reps: int = 15) -> float:
    """Per-call device time of `fn` replayed from one CUDA graph of `calls` back-to-back calls: a single eager
    launch of a ~20 µs kernel is bound by Python's launch cost, not by the kernel."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()  # warm-up on the capture stream
        stream.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    graph.replay()
    return median_ms(graph.replay, reps=reps, warmup=2) / calls


def copy_bandwidth() -> float:
    """Device-to-device copy of 1 GiB: bytes read + written per second."""
    return calibrate.copy_bandwidth(torch.device(DEV), 1 << 30, repeats=30)


def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device=DEV) * scale).to(DT)


def op_checks(tri: Ops) -> Iterator[tuple[str, Callable[[], float]]]:
    """(name, check) pairs; a check returns the relative error of a Triton op against the reference on the same
    inputs (for token outputs: the number of differing tokens)."""
    inv_freq = 1.0 / (THETA ** (torch.arange(0, DH, 2, device=DEV).float() / DH))
    norm_w = randn(D, scale=0.1) + 1

    def pair(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> float:
        return max(rel_err(a, b) for a, b in zip(got, want, strict=True))

    x, y = randn(37, D), randn(37, D)
    yield "add", lambda: rel_err(tri.add(x, y), ref.add(x, y))
    table, ids = randn(V, D), torch.randint(0, V, (37,), device=DEV)
    yield "embedding", lambda: rel_err(tri.embedding(ids, table), ref.embedding(ids, table))
    w, b = randn(2 * F, D, scale=D**-0.5), randn(2 * F, scale=0.1)
    for tokens in (1, 3, 8, 37, 512):
        xt = randn(tokens, D)
        yield f"linear_T{tokens}", lambda xt=xt: rel_err(tri.linear(xt, w, b), ref.linear(xt, w, b))
    logits = randn(8, V, scale=3)
    yield "argmax_mismatch", lambda: float((tri.argmax(logits) != ref.argmax(logits)).sum().item())
    for temp, top_k, top_p in ((0.8, 0, 1.0), (0.7, 50, 1.0), (1.0, 0, 0.9), (0.6, 40, 0.8)):
        def sample_check(temp=temp, top_k=top_k, top_p=top_p) -> float:
            gen1, gen2 = torch.Generator(DEV).manual_seed(1), torch.Generator(DEV).manual_seed(1)
            got = tri.sample(logits, temp, top_k, top_p, gen1)
            return float((got != ref.sample(logits, temp, top_k, top_p, gen2)).sum().item())

        yield f"sample_{temp}_{top_k}_{top_p}_mismatch", sample_check
    yield "rms_norm", lambda: rel_err(tri.rms_norm(x, norm_w, EPS), ref.rms_norm(x, norm_w, EPS))
    yield "add_rms_norm", lambda: pair(tri.add_rms_norm(x, y, norm_w, EPS), ref.add_rms_norm(x, y, norm_w, EPS))
    q, k, pos = randn(37, H, DH), randn(37, HKV, DH), torch.randint(0, 4096, (37,), device=DEV)
    yield "rope", lambda: pair(tri.rope(q, k, pos, inv_freq), ref.rope(q, k, pos, inv_freq))
    for batch, length in ((1, 128), (3, 37), (1, 2048)):
        qkv = (randn(batch, length, H, DH), randn(batch, length, HKV, DH), randn(batch, length, HKV, DH))
        yield f"attention_prefill_B{batch}_L{length}", lambda qkv=qkv: rel_err(
            tri.attention_prefill(*qkv, DH**-0.5), ref.attention_prefill(*qkv, DH**-0.5))
    for batch in (1, 8):
        qd, kc, vc = randn(batch, H, DH), randn(batch, SLOTS, HKV, DH), randn(batch, SLOTS, HKV, DH)
        lengths = torch.randint(1, SLOTS + 1, (batch,), device=DEV)
        yield f"attention_decode_B{batch}", lambda a=(qd, kc, vc, lengths): rel_err(
            tri.attention_decode(*a, DH**-0.5), ref.attention_decode(*a, DH**-0.5))
    gate_up = randn(37, 2 * F)
    yield "swiglu", lambda: rel_err(tri.swiglu(gate_up), ref.swiglu(gate_up))

    def cache_write() -> float:
        caches = [randn(2, SLOTS, HKV, DH), randn(2, SLOTS, HKV, DH)]
        want = [c.clone() for c in caches]
        kn, vn = randn(2, 37, HKV, DH), randn(2, 37, HKV, DH)
        tri.kv_cache_write(kn, vn, *caches, 100)
        ref.kv_cache_write(kn, vn, *want, 100)
        return pair(tuple(caches), tuple(want))

    yield "kv_cache_write", cache_write
    w_qkv, b_qkv = randn((H + 2 * HKV) * DH, D, scale=D**-0.5), randn((H + 2 * HKV) * DH, scale=0.1)
    w_o, w_gu, w_head = randn(D, F, scale=F**-0.5), randn(2 * F, D, scale=D**-0.5), randn(V, D, scale=D**-0.5)
    for batch in (1, 8):
        h, xo, res = randn(batch, D), randn(batch, F), randn(batch, D)
        positions = torch.randint(0, SLOTS, (batch,), device=DEV)

        def qkv_check(h=h, positions=positions, batch=batch) -> float:
            caches = [randn(batch, SLOTS, HKV, DH), randn(batch, SLOTS, HKV, DH)]
            want = [c.clone() for c in caches]
            args = (h, norm_w, EPS, w_qkv, b_qkv, positions, inv_freq)
            got = tri.norm_qkv_rope_cache(*args, *caches, H, HKV)
            return pair((got, *caches), (ref.norm_qkv_rope_cache(*args, *want, H, HKV), *want))

        yield f"norm_qkv_rope_cache_B{batch}", qkv_check
        yield f"linear_residual_B{batch}", lambda xo=xo, res=res: rel_err(
            tri.linear_residual(xo, w_o, res), ref.linear_residual(xo, w_o, res))
        yield f"norm_gate_up_swiglu_B{batch}", lambda h=h: rel_err(
            tri.norm_gate_up_swiglu(h, norm_w, EPS, w_gu), ref.norm_gate_up_swiglu(h, norm_w, EPS, w_gu))
        yield f"norm_linear_B{batch}", lambda h=h: rel_err(
            tri.norm_linear(h, norm_w, EPS, w_head), ref.norm_linear(h, norm_w, EPS, w_head))


def check_ops(tri: Ops) -> dict[str, float | str]:
    torch.manual_seed(0)
    errs: dict[str, float | str] = {}
    for name, check in op_checks(tri):
        try:
            errs[name] = check()
        except Exception as error:  # report every op, even when one fails to compile
            errs[name] = f"FAILED: {type(error).__name__}: {str(error)[:300]}"
    return errs


def check_graph(tri: Ops) -> float:
    """Capture one decode layer (5 launches + argmax) in a CUDA graph; replay must equal eager."""
    torch.manual_seed(1)
    batch = 4
    inv_freq = 1.0 / (THETA ** (torch.arange(0, DH, 2, device=DEV).float() / DH))
    w_qkv, b_qkv = randn((H + 2 * HKV) * DH, D, scale=D**-0.5), randn((H + 2 * HKV) * DH, scale=0.1)
    w_o, w_gu, w_down = randn(D, H * DH, scale=D**-0.5), randn(2 * F, D, scale=D**-0.5), randn(D, F, scale=F**-0.5)
    norm_w = randn(D, scale=0.1) + 1
    kc, vc = randn(batch, SLOTS, HKV, DH), randn(batch, SLOTS, HKV, DH)
    h = randn(batch, D)
    positions = torch.full((batch,), 7, device=DEV, dtype=torch.int64)
    lengths = positions + 1
    out = torch.empty(batch, D, device=DEV, dtype=DT)

    def layer() -> None:
        q = tri.norm_qkv_rope_cache(h, norm_w, EPS, w_qkv, b_qkv, positions, inv_freq, kc, vc, H, HKV)
        attn = tri.attention_decode(q, kc, vc, lengths, DH**-0.5)
        mid = tri.linear_residual(attn.reshape(batch, H * DH), w_o, h)
        act = tri.norm_gate_up_swiglu(mid, norm_w, EPS, w_gu)
        out.copy_(tri.linear_residual(act, w_down, mid))

    layer()
    eager = out.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        layer()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer()
    out.zero_()
    graph.replay()
    torch.cuda.synchronize()
    return (out.float() - eager.float()).abs().max().item()


GEMVS = {  # name: (N, K) of the decode GEMV at qwen2-1.5b shapes
    "qkv": ((H + 2 * HKV) * DH, D), "o_proj": (D, H * DH), "gate_up": (2 * F, D), "down": (D, F), "lm_head": (V, D),
}


def gemv_runner(tri: Ops, name: str, batch: int,
                copies: int) -> tuple[Callable[[], object], Callable[[], object], int]:
    """Closures running the decode op of `name` and torch's F.linear over rotating weight copies (beyond L2),
    and the weight bytes."""
    n, k = GEMVS[name]
    weights = [randn(n, k, scale=k**-0.5) for _ in range(copies)]
    norm_w = randn(k, scale=0.1) + 1
    x = randn(batch, k)
    res = randn(batch, n)
    inv_freq = 1.0 / (THETA ** (torch.arange(0, DH, 2, device=DEV).float() / DH))
    kc, vc = randn(batch, 64, HKV, DH), randn(batch, 64, HKV, DH)
    positions = torch.zeros(batch, dtype=torch.int64, device=DEV)
    bias = randn(n)
    step = [0]

    def run() -> object:
        w = weights[step[0] % copies]
        step[0] += 1
        if name == "qkv":
            return tri.norm_qkv_rope_cache(x, norm_w, EPS, w, bias, positions, inv_freq, kc, vc, H, HKV)
        if name in ("o_proj", "down"):
            return tri.linear_residual(x, w, res)
        if name == "gate_up":
            return tri.norm_gate_up_swiglu(x, norm_w, EPS, w)
        return tri.norm_linear(x, norm_w, EPS, w)

    def run_torch() -> object:
        step[0] += 1
        return torch.nn.functional.linear(x, weights[step[0] % copies])

    return run, run_torch, n * k * 2


def time_gemvs(tri: Ops, copy_bw: float, configs: Callable[[int], list[tuple[int, int, int, int, bool]]] | None,
               rows: list[dict], save: Callable[[], None], ops: list[str], batches: list[int]) -> None:
    """Appends one row per (op, batch, config) to rows, saving after each op."""
    original = linear_mod.gemv_tiles
    for name in ops:
        n, k = GEMVS[name]
        copies = max(2, int(200e6 // (n * k * 2)) + 1)
        for batch in batches:
            run, run_torch, nbytes = gemv_runner(tri, name, batch, copies)
            torch_ms = graph_ms(run_torch)
            for config in configs(batch) if configs else [None]:
                if config is not None:
                    linear_mod.gemv_tiles = lambda kind, b, nn, kk, splits, c=config: c
                try:
                    ms = graph_ms(run)
                except Exception as error:  # a config the compiler rejects (too many registers, …)
                    rows.append({"op": name, "batch": batch, "config": config, "error": str(error)[:200]})
                    continue
                finally:
                    linear_mod.gemv_tiles = original
                bw = nbytes / (ms * 1e-3)
                rows.append({"op": name, "batch": batch, "config": config or "table",
                             "us": ms * 1e3, "weight_GBps": bw / 1e9, "of_copy_bw": bw / copy_bw,
                             "torch_linear_us": torch_ms * 1e3})
            save()


def sweep_configs(batch: int) -> list[tuple[int, int, int, int, bool]]:
    """(BLOCK_N, BLOCK_K, warps, stages, tensor cores) to try: CUDA-core tiles for one token, tensor-core tiles for
    more (CUDA-core tiles of 1–4 rows at batch 8 ran 2–6x slower on an H100: 2026-11-25)."""
    if batch == 1:
        return [(bn, bk, warps, 3, False) for bn in (1, 2, 4, 8, 16) for bk in (256, 512, 1024, 2048)
                for warps in (4, 8) if 1024 <= bn * bk <= 8192]
    return [(bn, bk, 4, stages, True) for bn in (16, 32, 64) for bk in (64, 128, 256) for stages in (3, 5)]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--out", default=os.environ.get("OUT", "."))
    parser.add_argument("--ops", default=",".join(GEMVS), help="GEMVs to time (default: all)")
    parser.add_argument("--batches", default="1,8", help="decode batch sizes to time (default 1,8)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    tri = Ops("triton")
    result: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}

    def save() -> None:  # after every stage: a run cut short still leaves its numbers
        with open(os.path.join(args.out, "ops_check.json"), "w") as handle:
            json.dump(result, handle, indent=1, default=str)

    errs = check_ops(tri)
    result["errors"] = errs
    print("== correctness (relative error vs reference, bf16; *_mismatch = differing tokens)")
    for key, value in errs.items():
        print(f"  {key:42s} {value if isinstance(value, str) else f'{value:.3g}'}")
    try:
        result["graph_max_abs_diff"] = check_graph(tri)
    except Exception as error:  # keep going to the timings
        result["graph_max_abs_diff"] = f"FAILED: {type(error).__name__}: {str(error)[:300]}"
    print(f"== CUDA graph replay vs eager, one decode layer: max |diff| = {result['graph_max_abs_diff']}")
    copy_bw = copy_bandwidth()
    result["copy_GBps"] = copy_bw / 1e9
    print(f"== copy bandwidth {copy_bw / 1e9:.0f} GB/s")
    save()
    rows: list[dict] = []
    result["gemv"] = rows
    time_gemvs(tri, copy_bw, sweep_configs if args.sweep else None, rows, save, args.ops.split(","),
               [int(b) for b in args.batches.split(",")])
    if args.sweep:
        best: dict[tuple[str, int], dict] = {}
        for row in rows:
            key = (row["op"], row["batch"])
            if "us" in row and (key not in best or row["us"] < best[key]["us"]):
                best[key] = row
        rows = list(best.values())
        result["best"] = rows
    print("== decode GEMV (fused op) at qwen2-1.5b shapes, weights rotated beyond L2")
    for row in rows:
        if "us" in row:
            print(f"  {row['op']:8s} B={row['batch']} cfg={row['config']} {row['us']:8.1f} us "
                  f"{row['weight_GBps']:7.0f} GB/s {100 * row['of_copy_bw']:5.1f}% of copy  "
                  f"(torch F.linear: {row['torch_linear_us']:.1f} us)")
    save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
