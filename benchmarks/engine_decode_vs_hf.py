"""The transformers side of engine_decode.py: TPOT of transformers eager and static cache + torch.compile (and the
engine's by the same difference method), greedy token equality, teacher-forced logit agreement, the fp32 reference,
and the CUDA-graph checks on a small fp32 model."""

from __future__ import annotations

import statistics
from typing import Any

import torch
from engine_decode_measure import wall_s

from kernelscope.engine.generate import Engine

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
