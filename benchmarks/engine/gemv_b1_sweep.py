"""Device sweep of the one-token decode GEMVs (kernels/linear.py `gemv_tiles` at batch 1, and, where the tree has
it, the CUDA-core loop's `EARLY_W` weight prefetch) at model shapes, then the batch-1 decode step of each model
under each rule.

    PYTHONPATH=src python benchmarks/engine/gemv_b1_sweep.py --out DIR [--models llama-3-8b,qwen2-1.5b]
        [--step-models llama-3-8b,qwen2-1.5b] [--rounds 2]
    PYTHONPATH=src python benchmarks/engine/gemv_b1_sweep.py --out DIR --check [--models llama-3-8b,qwen2-1.5b]

1. Copy bandwidth (1 GiB device-to-device, read + write bytes).
2. For each model shape and op (q/k/v + norm + RoPE + cache, o_proj + residual, gate/up + norm + SwiGLU,
   down + residual, final norm + LM head), batch 1: the table's plan and a grid of (BLOCK_N, BLOCK_K, warps) ×
   EARLY_W off/on (off only where linear.py has no GEMV_EARLY_W: the experiment was measured and not kept, see
   results/engine-llama-b1-h100-2026-11-26; its patch is in that folder's git history). Each cell: one CUDA graph of ≥ 16
   back-to-back launches over distinct weight copies (≥ 400 MB in all, beyond the 50 MB L2), median of 15
   replays, µs per launch; % of copy counts weight bytes only.
3. For each step model (random weights, bf16, prompt 128, 256 new tokens, batch 1, a cache of 512 slots): TPOT
   (median over the replayed decode steps) under `table` (the rule as it is), `early` (EARLY_W on for every
   one-token GEMV, where there is one) and `best` (each op's fastest cell of step 2), alternating `--rounds`
   times; and one eager step of `table` and `best` under torch.profiler at context 201: µs per declared launch
   against its declared bytes at the copy rate.

--check instead compares each op at batch 1 with the PyTorch reference in bf16 (outputs poisoned with NaN first)
under the current tiles and the previous ones. Writes gemv_b1_sweep.json (after every stage); prints compact tables
last.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from gemv_bench import BF16, DEVICE, KIND, copy_bandwidth, runners, shapes, time_us

from kernelscope.engine.kernels import linear as linear_mod
from kernelscope.engine_costs import parse_cost_range
from kernelscope.workload.model import build_config, resolve_model_source

TILES, LAUNCH = linear_mod.gemv_tiles, linear_mod._launch_gemv
EARLY = getattr(linear_mod, "GEMV_EARLY_W", None)  # None: this tree has no EARLY_W loop
# (BLOCK_N, BLOCK_K, warps) at one token; stages do not matter there (the CUDA-core loop is not pipelined).
# 8 warps only for the largest tiles: at qwen2-1.5b shapes 8 warps ran slower than 4 at every tile up to 8,192
# elements (results/engine-decode-h100-2026-11-22/sweep).
GRID = [(1, 2048, 4), (1, 4096, 4), (2, 1024, 4), (2, 2048, 4), (2, 4096, 4), (4, 1024, 4), (4, 2048, 4),
        (4, 4096, 8), (8, 1024, 4), (8, 2048, 8)]


def use(rule: dict | None, early_all: bool = False) -> None:
    """Install a one-token rule: None = the table as it is; {(kind, rows, k): (bn, bk, warps, early)} = those
    cells for those launches (others as the table); early_all = the table's tiles with EARLY_W on."""
    linear_mod.gemv_tiles, linear_mod.GEMV_EARLY_W, linear_mod._launch_gemv = TILES, EARLY, LAUNCH
    if early_all:
        linear_mod.GEMV_EARLY_W = True
    if not rule:
        return

    def launch(kernel, kind, rows, batch, k, *args, **consts):
        cell = rule.get((kind, rows, k)) if batch == 1 else None
        if cell is None:
            linear_mod.gemv_tiles, linear_mod.GEMV_EARLY_W = TILES, EARLY
        else:
            bn, bk, warps, early = cell
            linear_mod.gemv_tiles = lambda kd, b, rw, kk, sp: (bn, bk, warps, 3, False) if b == 1 else TILES(
                kd, b, rw, kk, sp)
            linear_mod.GEMV_EARLY_W = early
        try:
            return LAUNCH(kernel, kind, rows, batch, k, *args, **consts)
        finally:
            linear_mod.gemv_tiles, linear_mod.GEMV_EARLY_W = TILES, EARLY

    linear_mod._launch_gemv = launch


def sweep(model: str, copy: float, result: dict, save) -> dict:
    s = shapes(model)
    table = runners(s, 1, ops=tuple(KIND), weight_bytes=400e6)
    best: dict = {}
    for name, (run, nbytes, rows, k, launches) in table.items():
        kind = KIND[name]
        plan = linear_mod.gemv_plan(kind, 1, rows, k, linear_mod.sm_count(DEVICE))
        cap = max(16, triton_pow2(k))
        cells: list = []
        seen = set()
        for bn, bk, warps in GRID:
            key = (bn, min(bk, cap), warps)
            if key in seen:
                continue
            seen.add(key)
            for early in (False, True) if EARLY is not None else (False,):
                cells.append((key[0], key[1], key[2], early))
        rows_out = []
        for label, cell in [("table", None)] + [("cell", c) for c in cells] + [("table", None)]:
            use({(kind, rows, k): cell} if cell else None)
            try:
                us = time_us(run, launches)
                err = None
            except Exception as error:  # a cell the compiler rejects
                us, err = None, f"{type(error).__name__}: {str(error)[:200]}"
            finally:
                use(None)
            row = {"model": model, "op": name, "kind": kind, "rows": rows, "k": k, "weight_bytes": nbytes,
                   "label": label, "cell": list(cell) if cell else [plan.block_n, plan.block_k, plan.warps, EARLY],
                   "us": us, "pct_of_copy": None if us is None else 100 * nbytes / (us * 1e-6) / copy}
            if err:
                row["error"] = err
            rows_out.append(row)
            result["sweep"].append(row)
        save()
        timed = [r for r in rows_out if r["us"] is not None]
        table_us = statistics.median([r["us"] for r in timed if r["label"] == "table"])
        fastest = min((r for r in timed if r["label"] == "cell"), key=lambda r: r["us"])
        early_table = next((r for r in timed if r["label"] == "cell" and r["cell"] == [plan.block_n, plan.block_k,
                                                                                      plan.warps, True]), None)
        best[(kind, rows, k)] = tuple(fastest["cell"])
        line = (f"{model:11s} {name:7s} table {tuple(plan)[:3]} {table_us:8.2f} us "
                f"({100 * nbytes / (table_us * 1e-6) / copy:5.1f}%)  best {tuple(fastest['cell'])} "
                f"{fastest['us']:8.2f} us ({fastest['pct_of_copy']:5.1f}%)  best/table {fastest['us'] / table_us:.3f}"
                + (f"  table+early {early_table['us']:.2f} us" if early_table else "")
                + f"  at copy {nbytes / copy * 1e6:.2f} us")
        result["summary"].append(line)
        print(line, flush=True)
    del table
    torch.cuda.empty_cache()
    return best


def previous_cell(rows: int, k: int) -> tuple[int, int, int, bool]:
    """The one-token tiles before results/engine-llama-b1-h100-2026-11-26 (commit 38441f2), every kind alike."""
    return 1 if rows <= 1024 else 2 if rows < 4096 else 4, max(16, min(2048, triton_pow2(k))), 4, False


def check(model: str, result: dict, save) -> None:
    """Each op at batch 1 and the model's shape against the PyTorch reference in bf16 (fresh random inputs, outputs
    poisoned with NaN first), under the current table and the previous one-token tiles: relative error of the
    output (q/k/v: the worst of q and both caches)."""
    from kernelscope.engine import reference as ref

    s = shapes(model)
    dim, ffn, heads, kv_heads, dh, vocab = (s[key] for key in ("dim", "ffn", "heads", "kv_heads", "head_dim",
                                                                "vocab"))

    def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, device=DEVICE) * scale).to(BF16)

    def rel(out: torch.Tensor, want: torch.Tensor) -> float:
        return ((out.double() - want.double()).norm() / want.double().norm()).item()

    def poisoned(*shape: int) -> torch.Tensor:
        return torch.full(shape, float("nan"), device=DEVICE, dtype=BF16)

    inv_freq = 1.0 / 5e5 ** (torch.arange(0, dh, 2, device=DEVICE).float() / dh)
    qkv_rows = (heads + 2 * kv_heads) * dh

    def qkv() -> float:
        h, norm_w, w = r(1, dim), r(dim, scale=0.1) + 1, r(qkv_rows, dim, scale=dim ** -0.5)
        positions = torch.randint(0, 512, (1,), device=DEVICE)
        caches = [r(1, 512, kv_heads, dh) for _ in range(2)]
        want_caches = [c.clone() for c in caches]
        args = (h, norm_w, 1e-5, w, None, positions, inv_freq)
        got = linear_mod.norm_qkv_rope_cache(*args, *caches, heads, kv_heads, out=poisoned(1, heads, dh))
        want = ref.norm_qkv_rope_cache(*args, *want_caches, heads, kv_heads)
        return max(rel(got, want), rel(caches[0], want_caches[0]), rel(caches[1], want_caches[1]))

    def residual(n: int, k: int) -> float:
        x, w, res = r(1, k), r(n, k, scale=k ** -0.5), r(1, n)
        return rel(linear_mod.linear_residual(x, w, res, out=poisoned(1, n)), ref.linear_residual(x, w, res))

    def gate_up() -> float:
        h, norm_w, w = r(1, dim), r(dim, scale=0.1) + 1, r(2 * ffn, dim, scale=dim ** -0.5)
        return rel(linear_mod.norm_gate_up_swiglu(h, norm_w, 1e-5, w, out=poisoned(1, ffn)),
                   ref.norm_gate_up_swiglu(h, norm_w, 1e-5, w))

    def head() -> float:
        h, norm_w, w = r(1, dim), r(dim, scale=0.1) + 1, r(vocab, dim, scale=dim ** -0.5)
        return rel(linear_mod.norm_linear(h, norm_w, 1e-5, w, out=poisoned(1, vocab)),
                   ref.norm_linear(h, norm_w, 1e-5, w))

    checks = {"qkv": (qkv, "qkv", qkv_rows // 2, dim), "o_proj": (lambda: residual(dim, heads * dh), "residual",
                                                                  dim, heads * dh),
              "gate_up": (gate_up, "gate_up", ffn, dim), "down": (lambda: residual(dim, ffn), "residual", dim, ffn),
              "head": (head, "head", vocab, dim)}
    for name, (fn, kind, rows, k) in checks.items():
        row = {"model": model, "op": name, "plan": list(linear_mod.gemv_plan(kind, 1, rows, k, 132))[:3],
               "previous": list(previous_cell(rows, k))[:3]}
        for label, rule in (("table", None), ("previous", {(kind, rows, k): previous_cell(rows, k)})):
            use(rule)
            try:
                row[f"{label}_rel_err"] = [fn() for _ in range(2)]  # two draws of fresh inputs
            except Exception as error:
                row[f"{label}_error"] = f"{type(error).__name__}: {str(error)[:200]}"
            finally:
                use(None)
        result["checks"].append(row)
        line = (f"check {model:11s} {name:7s} plan {tuple(row['plan'])} rel err "
                f"{row.get('table_rel_err', row.get('table_error'))}; previous {tuple(row['previous'])} "
                f"{row.get('previous_rel_err', row.get('previous_error'))}")
        result["summary"].append(line)
        print(line, flush=True)
        save()


def triton_pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def step_tpot(engine, ids, new: int) -> float:
    import contextlib

    class Marker:
        def __init__(self) -> None:
            self.steps = []

        @contextlib.contextmanager
        def _span(self):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            yield
            end.record()
            self.steps.append((start, end))

        def phase(self, name):
            return contextlib.nullcontext()

        def step(self, index):
            return self._span()

        def module(self, name):
            return contextlib.nullcontext()

    engine.generate(ids, new)  # warm-up: compiles this rule's kernels
    marker = Marker()
    engine.generate(ids, new, marker=marker)
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in marker.steps)


def step_profile(engine, copy: float, position: int = 200) -> list[dict]:
    """One eager decode step (batch 1, `position + 1` cached tokens) under torch.profiler, 3 steps: per declared
    launch name and bytes, µs each and share of the copy bandwidth."""
    from torch.profiler import ProfilerActivity, profile

    cache = engine.cache(1)
    token = torch.zeros(1, dtype=torch.int64, device="cuda")
    positions = torch.full((1,), position, dtype=torch.int64, device="cuda")

    def step() -> None:
        logits = engine.model.decode_step(token, positions, positions + 1, cache, kv_tokens=position + 1)
        engine.ops.argmax(logits, out=token)

    step()
    torch.cuda.synchronize()
    steps = 3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    declared: dict[str, list] = {}
    kernels: dict[str, list] = {}
    for event in prof.events():
        if event.device_type.name != "CUDA":
            continue
        parsed = parse_cost_range(event.name)
        if parsed is not None:
            name, _flops, nbytes, _precision = parsed
            entry = declared.setdefault(f"{name}|{int(nbytes)}", [0, 0.0, int(nbytes), name])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us()
        else:
            entry = kernels.setdefault(event.name[:60], [0, 0.0])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us()
    rows = []
    for _key, (n, total, nbytes, name) in declared.items():
        us = total / n
        at_copy = nbytes / copy * 1e6
        rows.append({"launch": name, "bytes": nbytes, "per_step": n / steps, "us_each": us,
                     "pct_of_copy": 100 * at_copy / us if us else None, "us_per_step": total / steps,
                     "at_copy_us_per_step": at_copy * n / steps, "over_us_per_step": (us - at_copy) * n / steps})
    rows.sort(key=lambda r: -r["us_per_step"])
    return [{"kernel_us_per_step": sum(t for _n, t in kernels.values()) / steps,
             "kernels_per_step": sum(n for n, _t in kernels.values()) / steps}] + rows


def step_part(model: str, best: dict, copy: float, rounds: int, result: dict, save) -> None:
    from kernelscope.engine.generate import Engine
    from kernelscope.engine.weights import random_hf_model

    start = time.perf_counter()
    hf = random_hf_model(build_config(resolve_model_source(model)), "cuda", BF16, seed=0)
    engine = Engine.from_hf_model(hf, backend="triton", max_seq_len=512)
    del hf
    torch.cuda.empty_cache()
    ids = torch.randint(0, engine.config.vocab_size, (1, 128), generator=torch.Generator().manual_seed(0))
    nbytes = engine.decode_bytes_per_token(1, context=128 + 128)
    block: dict = {"bytes_per_step": nbytes, "build_s": time.perf_counter() - start, "tpot_ms": {}}
    result["steps"][model] = block
    variants = {"table": (None, False), "early": (None, True), "best": (best, False)}
    if EARLY is None:
        del variants["early"]
    for _ in range(rounds):
        for label, (rule, early_all) in variants.items():
            use(rule, early_all)
            try:
                block["tpot_ms"].setdefault(label, []).append(step_tpot(engine, ids, 256))
            finally:
                use(None)
            save()
    for label in ("table", "best"):
        use(variants[label][0], variants[label][1])
        try:
            block[f"profile_{label}"] = step_profile(engine, copy)
        finally:
            use(None)
        save()
    for label, values in block["tpot_ms"].items():
        ms = statistics.median(values)
        line = (f"{model:11s} step {label:6s} TPOT {ms:.4f} ms (rounds {', '.join(f'{v:.4f}' for v in values)}) "
                f"= {100 * nbytes / (ms * 1e-3) / copy:.1f}% of copy ({nbytes / 1e9:.3f} GB)")
        result["summary"].append(line)
        print(line, flush=True)
    del engine
    torch.cuda.empty_cache()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="llama-3-8b,qwen2-1.5b")
    parser.add_argument("--step-models", default="llama-3-8b,qwen2-1.5b")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="only the correctness check of each op (no timing)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    copy = copy_bandwidth()
    sms = linear_mod.sm_count(DEVICE)
    result: dict = {"device": torch.cuda.get_device_name(), "copy_bytes_per_s": copy, "sms": sms, "grid": GRID,
                    "sweep": [], "steps": {}, "best": {}, "checks": [], "summary": []}
    print(f"copy bandwidth {copy / 1e9:.0f} GB/s, {sms} SMs", flush=True)

    def save() -> None:
        (args.out / "gemv_b1_sweep.json").write_text(json.dumps(result, indent=1, default=str))

    if args.check:
        for model in args.models.split(","):
            check(model, result, save)
        return
    bests = {}
    for model in args.models.split(","):
        bests[model] = sweep(model, copy, result, save)
        result["best"][model] = {f"{kind}|{rows}|{k}": cell for (kind, rows, k), cell in bests[model].items()}
        save()
    for model in filter(None, args.step_models.split(",")):
        step_part(model, bests.get(model, {}), copy, args.rounds, result, save)
    print("\nsummary")
    print("\n".join(result["summary"]))
    for model, block in result["steps"].items():
        for label in ("table", "best"):
            rows = block.get(f"profile_{label}")
            if not rows:
                continue
            print(f"\n{model} profile {label}: {rows[0]['kernels_per_step']:.0f} kernels, "
                  f"{rows[0]['kernel_us_per_step']:.1f} us of kernels per step")
            for r in rows[1:]:
                print(f"  {r['launch']:22s} x{r['per_step']:4.0f} {r['us_each']:8.2f} us {r['bytes'] / 1e6:9.2f} MB "
                      f"{r['pct_of_copy'] or 0:5.1f}%  step {r['us_per_step']:7.1f} us  over {r['over_us_per_step']:6.1f}")


if __name__ == "__main__":
    main()
