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
import contextlib
import datetime
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import commit  # noqa: E402

from kernelscope.capture import calibrate  # noqa: E402
from kernelscope.capture.calibrate import median_seconds  # noqa: E402
from kernelscope.engine.generate import Engine  # noqa: E402
from kernelscope.engine.kernels.common import set_pdl  # noqa: E402
from kernelscope.engine_costs import parse_cost_range  # noqa: E402
from kernelscope.workload.model import build_config, resolve_model_source  # noqa: E402

DTYPE = torch.bfloat16


# ---- timing helpers

def cuda_time_ms(fn: Callable[[], Any], repeats: int, warmup: int = 2) -> float:
    """Median device time of fn over repeats (CUDA events), in ms."""
    return 1e3 * median_seconds(fn, CUDA, repeats, warmup)


def wall_s(fn: Callable[[], Any]) -> float:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start


class EventMarker:
    """Engine marker that records CUDA events around phases and decode steps (no host sync)."""

    def __init__(self) -> None:
        self.phases: dict[str, tuple[torch.cuda.Event, torch.cuda.Event]] = {}
        self.steps: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    @contextlib.contextmanager
    def _span(self, sink: Callable[[tuple[torch.cuda.Event, torch.cuda.Event]], None]) -> Iterator[None]:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        sink((start, end))

    def phase(self, name: str) -> contextlib.AbstractContextManager:
        return self._span(lambda span: self.phases.__setitem__(name, span))

    def step(self, index: int) -> contextlib.AbstractContextManager:
        return self._span(self.steps.append)

    def module(self, qualified_name: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()


CUDA = torch.device("cuda")

# ---- roofs

def copy_bandwidth() -> dict[str, float]:
    n = 1 << 30  # 1 GiB each way
    bandwidth = calibrate.copy_bandwidth(CUDA, n, repeats=20)
    return {"copy_bytes_read_plus_write": 2 * n, "copy_ms": 2 * n / bandwidth * 1e3,
            "copy_bandwidth_GBps": bandwidth / 1e9}


def matmul_rate() -> dict[str, float]:
    return {"bf16_matmul_TFLOPs": (calibrate.gemm_flops(CUDA, "bf16", 8192, repeats=20) or 0.0) / 1e12}


# ---- the engine

def engine_decode(engine: Engine, batch: int, prompt: int, new: int, repeats: int) -> dict[str, Any]:
    ids = torch.randint(0, engine.config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0))
    engine.generate(ids, new)  # warm-up: compiles kernels, captures nothing it keeps
    step_ms, prefill_ms, totals = [], [], []
    for _ in range(repeats):
        marker = EventMarker()
        totals.append(wall_s(lambda m=marker: engine.generate(ids, new, marker=m)))
        step_ms += [s.elapsed_time(e) for s, e in marker.steps]
        prefill_ms.append(marker.phases["prefill"][0].elapsed_time(marker.phases["prefill"][1]))
    tpot = statistics.median(step_ms)
    context = prompt + new // 2
    nbytes = engine.decode_bytes_per_token(batch, context=context)
    return {"batch": batch, "prompt": prompt, "new_tokens": new, "repeats": repeats,
            "tpot_ms": tpot, "tpot_ms_p10": _quantile(step_ms, 0.1), "tpot_ms_p90": _quantile(step_ms, 0.9),
            "tokens_per_s": batch * 1e3 / tpot, "generate_wall_s": statistics.median(totals),
            "bytes_per_step": nbytes, "bytes_context_tokens": context,
            "achieved_GBps": nbytes / tpot / 1e6, "prefill_ms": statistics.median(prefill_ms)}


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def engine_prefill(engine: Engine, batch: int, prompt: int, roof_tflops: float | None,
                   graph: bool = True) -> dict[str, Any]:
    """Prefill alone (timed with events), its FLOPs counted from the shapes (the prompt, not the padding), share
    of the bf16 matmul roof. graph: as generate runs it (padded to the bucket, a replayed CUDA graph); else the
    unpadded prompt launched eagerly from Python."""
    c = engine.config
    ids = torch.randint(0, c.vocab_size, (batch, prompt), device="cuda")
    cache = engine.cache(batch)
    ms = cuda_time_ms(lambda: engine.prefill(ids, cache, padded=graph, graph=graph), repeats=10)
    per_layer = c.hidden_size * (c.q_size + 2 * c.kv_size) + c.q_size * c.hidden_size \
        + 3 * c.hidden_size * c.intermediate_size
    tokens = batch * prompt
    flops = 2 * per_layer * c.num_layers * tokens + 2 * c.vocab_size * c.hidden_size * batch \
        + c.num_layers * batch * 2 * c.num_heads * c.head_dim * prompt * prompt  # causal QKᵀ + PV ≈ 4·L²/2
    tflops = flops / ms / 1e9
    return {"batch": batch, "prompt": prompt, "cuda_graph": graph, "prefill_ms": ms, "tokens_per_s": tokens * 1e3 / ms,
            "flops": flops, "TFLOPs": tflops, "share_of_bf16_roof": tflops / roof_tflops if roof_tflops else None}


def kernel_profile(engine: Engine, copy_gbps: float | None) -> dict[str, Any]:
    """One eager decode step under torch.profiler: device time per kernel name, and per declared engine launch
    (ks.cost ranges) the achieved bandwidth against the measured copy bandwidth."""
    from torch.profiler import ProfilerActivity, profile

    cache = engine.cache(1)
    token = torch.zeros(1, dtype=torch.int64, device="cuda")
    positions = torch.full((1,), 200, dtype=torch.int64, device="cuda")
    steps = 3

    def step() -> None:
        logits = engine.model.decode_step(token, positions, positions + 1, cache)
        engine.ops.argmax(logits, out=token)

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    declared: dict[str, list[float]] = {}
    for event in prof.events():
        parsed = parse_cost_range(event.name)
        if parsed is not None and event.device_type.name == "CUDA":  # the range's GPU-side span
            name, _flops, nbytes, _precision = parsed
            entry = declared.setdefault(f"{name} ({int(nbytes)} B)", [0, 0.0, nbytes])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us()
        elif parsed is None and event.device_type.name == "CUDA":
            entry = kernels.setdefault(event.name, [0, 0.0])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us()
    kernel_rows = sorted(({"kernel": k, "launches_per_step": n / steps, "us_per_step": t / steps}
                          for k, (n, t) in kernels.items()), key=lambda r: -r["us_per_step"])
    declared_rows = []
    for key, (n, total_us, nbytes) in declared.items():
        us = total_us / n
        gbps = nbytes / us / 1e3 if us > 0 else 0.0
        declared_rows.append({"launch": key, "count_per_step": n / steps, "us_each": us, "GBps": gbps,
                              "share_of_copy_bw": gbps / copy_gbps if copy_gbps else None, "us_per_step": total_us / steps})
    declared_rows.sort(key=lambda r: -r["us_per_step"])
    return {"kernels_per_step": sum(r["launches_per_step"] for r in kernel_rows),
            "kernel_us_per_step": sum(r["us_per_step"] for r in kernel_rows),
            "kernels": kernel_rows[:40], "declared": declared_rows[:40]}


def prefill_kernel_profile(engine: Engine, prompt: int) -> dict[str, Any]:
    """One padded prefill launched eagerly under torch.profiler (the kernels a graph replay runs, with the host's
    gaps between them left out): device time per kernel name, per prefill."""
    from torch.profiler import ProfilerActivity, profile

    ids = torch.randint(0, engine.config.vocab_size, (1, prompt), device="cuda")
    cache = engine.cache(1)
    engine.prefill(ids, cache, graph=False)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        engine.prefill(ids, cache, graph=False)
        torch.cuda.synchronize()
    kernels: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA" and parse_cost_range(event.name) is None:
            entry = kernels.setdefault(event.name[:80], [0, 0.0])
            entry[0] += 1
            entry[1] += event.time_range.elapsed_us()
    rows = sorted(({"kernel": k, "launches": n, "us": t} for k, (n, t) in kernels.items()), key=lambda r: -r["us"])
    return {"prompt": prompt, "kernels": sum(r["launches"] for r in rows), "kernel_us": sum(r["us"] for r in rows),
            "by_kernel": rows[:20]}


# ---- transformers baselines

def hf_tpot(model: Any, ids: torch.Tensor, new: int, short: int, repeats: int, static: bool) -> dict[str, Any]:
    """TPOT = (time for `new` tokens − time for `short` tokens) / (new − short): the same prompt and cache size,
    so prefill and set-up cancel. `static` uses a StaticCache (transformers then compiles the decode forward)."""
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + new) if static else None

    def run(n: int) -> None:
        kwargs = {"past_key_values": cache} if static else {}
        if cache is not None:
            cache.reset()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                       do_sample=False, **kwargs)

    first = wall_s(lambda: run(new))  # warm-up (includes torch.compile when static)
    run(short)
    longs, shorts = [wall_s(lambda: run(new)) for _ in range(repeats)], [wall_s(lambda: run(short))
                                                                        for _ in range(repeats)]
    tpot = (statistics.median(longs) - statistics.median(shorts)) / (new - short) * 1e3
    return {"tpot_ms": tpot, "first_call_s": first, "long_s": statistics.median(longs),
            "short_s": statistics.median(shorts), "new": new, "short": short}


def engine_tpot_by_difference(engine: Engine, batch: int, prompt: int, new: int, short: int,
                              repeats: int) -> float:
    """The transformers baselines' method applied to the engine, for like-for-like ratios."""
    ids = torch.randint(0, engine.config.vocab_size, (batch, prompt), generator=torch.Generator().manual_seed(0))
    longs = [wall_s(lambda: engine.generate(ids, new)) for _ in range(repeats)]
    shorts = [wall_s(lambda: engine.generate(ids, short)) for _ in range(repeats)]
    return (statistics.median(longs) - statistics.median(shorts)) / (new - short) * 1e3


def token_equality(model: Any, engine: Engine, prompt: int, new: int) -> dict[str, Any]:
    """Greedy tokens of the engine vs transformers eager (bf16, same weights); at the first divergence, the
    margin between transformers' top-2 logits and between its choice and the engine's (near-ties explain it)."""
    ids = torch.randint(0, engine.config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1))
    out = model.generate(ids.cuda(), attention_mask=torch.ones_like(ids.cuda()), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         output_logits=True, return_dict_in_generate=True)
    hf_tokens = out.sequences[0, prompt:].cpu()
    ours = engine.generate(ids, new)[0]
    same = (hf_tokens == ours).tolist()
    result: dict[str, Any] = {"new_tokens": new, "identical": all(same), "matching_steps": sum(same)}
    if not all(same):
        step = same.index(False)
        logits = out.logits[step][0].float()
        top2 = logits.topk(2).values
        result.update(first_divergence_step=step, hf_top2_margin=float(top2[0] - top2[1]),
                      hf_logit_gap_hf_vs_engine_token=float(logits[hf_tokens[step]] - logits[ours[step]]),
                      hf_logit_std=float(logits.std()))
    return result


def graph_checks() -> dict[str, Any]:
    """On a small fp32 model: CUDA-graph decode equals eager decode equals transformers (greedy), and sampled
    decode with a seed is the same with and without the graph."""
    from transformers import AutoConfig

    from kernelscope.engine.weights import random_hf_model

    config = AutoConfig.for_model("qwen2", hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                                  tie_word_embeddings=True)
    model = random_hf_model(config, "cuda", torch.float32, seed=0)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    engine = Engine.from_hf_model(model, backend="triton", max_seq_len=128)
    ids = torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))
    hf = model.generate(ids.cuda(), attention_mask=torch.ones_like(ids.cuda()), max_new_tokens=64,
                        min_new_tokens=64, do_sample=False)[:, 16:].cpu()
    graph, eager = engine.generate(ids, 64), engine.generate(ids, 64, cuda_graph=False)
    sample = dict(temperature=0.8, top_k=50, top_p=0.9, seed=5)
    forced = teacher_forced(model, engine, 16, 32)
    return {"fp32_median_logit_relative_error": forced["median_logit_relative_error"],
            "fp32_max_logit_relative_error": forced["max_logit_relative_error"],
            "graph_equals_eager": bool(torch.equal(graph, eager)), "graph_equals_hf": bool(torch.equal(graph, hf)),
            "graph_matching_tokens_vs_hf": int((graph == hf).sum()), "of": graph.numel(),
            "sampled_graph_equals_eager": bool(torch.equal(engine.generate(ids, 32, **sample),
                                                           engine.generate(ids, 32, cuda_graph=False, **sample)))}


@torch.no_grad()
def teacher_forced(model: Any, engine: Engine, prompt: int, new: int, fp32_reference: bool = False) -> dict[str, Any]:
    """Feed transformers' greedy tokens to the engine step by step: where the two argmaxes disagree, how close
    transformers' top-2 logits were (bf16 rounding flips near-ties), and the logits' relative error. With
    fp32_reference, both bf16 runs are also compared with transformers in fp32 on the same tokens, which says how
    much of the difference is bf16 rounding that transformers has too."""
    ids = torch.randint(0, engine.config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(1)).cuda()
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, output_logits=True, return_dict_in_generate=True)
    tokens = out.sequences[0, prompt:]
    cache = engine.cache(1)
    logits = engine.model.prefill(ids, cache)
    position = torch.tensor([prompt], device="cuda")
    errors, disagreements, engine_logits = [], [], []
    for step in range(new):
        ref = out.logits[step][0].float()
        ours = logits[0].float()
        engine_logits.append(ours)
        errors.append(float((ours - ref).norm() / ref.norm()))
        if int(ours.argmax()) != int(tokens[step]):
            top2 = ref.topk(2).values
            disagreements.append({"step": step, "hf_top2_margin": float(top2[0] - top2[1])})
        logits = engine.model.decode_step(tokens[step:step + 1], position, position + 1, cache)
        position += 1
    margins = [d["hf_top2_margin"] for d in disagreements]
    extra = fp32_errors(model, out.sequences, prompt, torch.stack([lg[0].float() for lg in out.logits]),
                        torch.stack(engine_logits)) if fp32_reference else {}
    return {**extra, "steps": new, "argmax_agreement": 1 - len(disagreements) / new, "disagreements": disagreements[:20],
            "max_hf_top2_margin_at_disagreement": max(margins, default=None),
            "median_logit_relative_error": statistics.median(errors), "max_logit_relative_error": max(errors)}


def fp32_errors(model: Any, sequence: torch.Tensor, prompt: int, hf_bf16: torch.Tensor,
                engine_bf16: torch.Tensor) -> dict[str, Any]:
    """Median relative error and argmax agreement of transformers-bf16 and engine-bf16 logits [steps, V] against
    transformers in fp32 over the same token sequence (one forward pass)."""
    import copy

    reference = copy.deepcopy(model).float()
    try:
        steps = hf_bf16.shape[0]
        exact = reference(input_ids=sequence[:, :prompt + steps - 1]).logits[0, prompt - 1:].float()
    finally:
        del reference
        torch.cuda.empty_cache()

    def compare(logits: torch.Tensor) -> dict[str, float]:
        rel = (logits - exact).norm(dim=-1) / exact.norm(dim=-1)
        return {"median_relative_error": float(rel.median()),
                "argmax_agreement": float((logits.argmax(-1) == exact.argmax(-1)).float().mean())}

    return {"vs_transformers_fp32": {"transformers_bf16": compare(hf_bf16), "engine_bf16": compare(engine_bf16)}}


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
