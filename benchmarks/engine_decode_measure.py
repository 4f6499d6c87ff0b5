"""The measurements engine_decode.py makes of the engine itself: timing helpers (CUDA events, wall clock, an
engine marker that records events per phase and decode step), the roofs (copy bandwidth, bf16 matmul rate), decode
TPOT, prefill time and FLOP share, and per-kernel device time of one profiled decode step or prefill."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import torch

from kernelscope.capture import calibrate
from kernelscope.capture.calibrate import median_seconds
from kernelscope.engine.generate import Engine
from kernelscope.engine_costs import parse_cost_range

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
