"""Stages of gluon_decode.py, on CUDA or (emulated) on CPU: build the engine on random qwen2-1.5b weights, prefill
a prompt with the engine, decode the same tokens with the engine's decode_step and with the persistent step
(teacher-forced: logits and argmax of every step against the engine's; free-running: the greedy token
sequences and their first divergence), and time both from CUDA graphs side by side.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import gluon_decode_configs as dc
import torch
from gluon_decode_host import DecodeBuffers, greedy_step

CAPACITY = 512  # cache slots: the prompt, the decoded tokens, and the timing replays
LOGITS_TOL = 3e-2  # norm-relative error of a step's logits against the engine's


def build_engine(device: str, layers: int | None = None, vocab: int | None = None, seed: int = 0,
                 dtype: torch.dtype = torch.bfloat16):
    """The engine on transformers' random init of qwen2-1.5b (optionally fewer layers or a smaller vocabulary),
    with the q/k/v biases and the norm weights perturbed (the init leaves them 0 and 1, which would test nothing)."""
    from kernelscope.engine.generate import Engine
    from kernelscope.engine.weights import random_hf_model
    from kernelscope.workload.model import build_config, resolve_model_source

    hf = build_config(resolve_model_source("qwen2-1.5b"))
    if layers:
        hf.num_hidden_layers = layers
    if vocab:
        hf.vocab_size = vocab
    model = random_hf_model(hf, device, dtype, seed=seed)
    engine = Engine.from_hf_model(model, backend="triton" if device == "cuda" else "torch", max_seq_len=CAPACITY)
    g = torch.Generator(device=device).manual_seed(seed + 1)
    with torch.no_grad():
        for layer in engine.weights.layers:
            if layer.b_qkv is not None:
                layer.b_qkv.copy_(0.5 * torch.randn(layer.b_qkv.shape, device=device, generator=g))
            for norm in (layer.input_norm, layer.post_norm):
                norm.copy_(1.0 + 0.2 * torch.randn(norm.shape, device=device, generator=g))
    return engine


def errors(out: torch.Tensor, ref: torch.Tensor) -> dict:
    out, ref = out.double().flatten(), ref.double().flatten()
    if not torch.isfinite(out).all():
        return {"max_abs_err": float("nan"), "max_rel_err": float("nan"), "rel_err": float("nan")}
    diff = (out - ref).abs()
    return {"max_abs_err": float(diff.max()), "max_rel_err": float(diff.max() / ref.abs().max()),
            "rel_err": float(diff.norm() / ref.norm())}


def compare(engine, buf: DecodeBuffers, run: Callable[[], None], prompt: int, new: int, seed: int = 0,
            sync: Callable[[], None] = lambda: None) -> dict:
    """Prefill `prompt` random tokens with the engine, then `new` steps two ways from the same cache state.
    run(): the layers and the LM head on buf (the Gluon kernel or the CPU emulation)."""
    dev = buf.device
    ids = torch.randint(0, engine.config.vocab_size, (1, prompt), generator=torch.Generator().manual_seed(seed))
    ids = ids.to(dev)
    cache = engine.cache(1)
    logits = engine.prefill(ids, cache, padded=False, graph=False)
    first = engine.ops.argmax(logits)
    buf.load_cache(cache, prompt)
    # the engine, greedy
    token, eng_tokens, eng_logits = first.clone(), [], []
    for i in range(new):
        pos = torch.tensor([prompt + i], device=dev)
        out = engine.model.decode_step(token, pos, pos + 1, cache)
        eng_logits.append(out[0].float().cpu())
        token = engine.ops.argmax(out)
        eng_tokens.append(int(token))
    inputs = [int(first)] + eng_tokens[:-1]
    # the persistent step, teacher-forced on the engine's tokens
    steps, agree = [], 0
    for i in range(new):
        buf.set_state(inputs[i], prompt + i)
        greedy_step(buf, run, engine.ops.argmax)
        sync()
        row = errors(buf.logits.float().cpu(), eng_logits[i])
        row["argmax_equal"] = int(buf.token) == eng_tokens[i]
        agree += row["argmax_equal"]
        steps.append(row)
        if i == 0 and buf.err is not None and int(buf.err.sum()):
            raise RuntimeError(f"grid-barrier timeouts in the first step: {int(buf.err.sum())}")
    # the persistent step, greedy on its own tokens
    buf.set_state(int(first), prompt)
    own = []
    for _ in range(new):
        greedy_step(buf, run, engine.ops.argmax)
        own.append(int(buf.token))
    sync()
    diverge = next((i for i, (a, b) in enumerate(zip(own, eng_tokens, strict=True)) if a != b), None)
    worst = max(steps, key=lambda r: r["rel_err"])
    return {"prompt": prompt, "new_tokens": new, "steps": steps, "argmax_agree": agree,
            "worst_rel_err": worst["rel_err"], "worst_max_rel_err": max(r["max_rel_err"] for r in steps),
            "engine_tokens": eng_tokens, "gluon_tokens": own, "first_divergence": diverge,
            "tokens_equal": diverge is None, "barrier_timeouts": int(buf.err.sum()),
            "ok": bool(worst["rel_err"] < LOGITS_TOL and agree >= new - 2)}


def engine_graph_step(engine, position: int):
    """The engine's greedy step on fixed buffers (decode_step, the engine's argmax, positions + 1) as
    Engine.generate captures it; returns (step, reset(position))."""
    dev = engine.device
    cache = engine.cache(1)
    token = torch.zeros(1, dtype=torch.int64, device=dev)
    pos_len = torch.tensor([[position], [position + 1]], device=dev)

    def step() -> None:
        logits = engine.model.decode_step(token, pos_len[0], pos_len[1], cache)
        engine.ops.argmax(logits, out=token)
        pos_len.add_(1)

    def reset(p: int) -> None:
        pos_len.copy_(torch.tensor([[p], [p + 1]], device=dev))

    return step, reset


def time_side_by_side(steps: dict[str, tuple[Callable, Callable]], position: int, rounds: int,
                      replays: int) -> dict[str, dict]:
    """Each step captured in a CUDA graph; rounds of `replays` CUDA-event-timed replays each, interleaved, every
    round from the same position; median, p10, p90 of the per-replay times (after a warm-up round)."""
    from persistent_host import graph_of, replay_ms

    graphs = {}
    for name, (step, reset) in steps.items():
        reset(position)
        graphs[name] = graph_of(step)
    times: dict[str, list[float]] = {name: [] for name in graphs}
    for r in range(rounds + 1):
        for name, graph in graphs.items():
            steps[name][1](position)
            ms = replay_ms(graph, replays)
            if r:
                times[name] += ms
    out = {}
    for name, ms in times.items():
        ms = sorted(ms)
        out[name] = {"ms": statistics.median(ms), "ms_p10": ms[len(ms) // 10], "ms_p90": ms[(9 * len(ms)) // 10],
                     "timed_replays": len(ms)}
    return out


def step_record(shape: dc.DecodeShape, ms: float, copy_GBps: float | None, nbytes: int | None = None) -> dict:
    nbytes = nbytes or shape.weight_bytes()
    row = {"ms_per_token": ms, "weight_bytes": nbytes, "GBps": nbytes / ms / 1e6}
    if copy_GBps:
        row["pct_of_copy"] = 100 * row["GBps"] / copy_GBps
    return row
