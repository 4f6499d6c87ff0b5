"""Tiny Qwen2 / Llama configs and a plain greedy loop over transformers, the oracle of the engine's model tests."""

from __future__ import annotations

import zlib
from collections.abc import Iterator

import pytest
import torch

TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=128, max_position_embeddings=256, rms_norm_eps=1e-6)


def tiny_config(model_type: str, **overrides):
    from transformers import AutoConfig

    extra = {"tie_word_embeddings": True} if model_type == "qwen2" else {}
    return AutoConfig.for_model(model_type, **{**TINY, **extra, **overrides})


def hf_model(config, seed: int = 0) -> torch.nn.Module:
    from kernelscope.engine.weights import random_hf_model

    model = random_hf_model(config, "cpu", torch.float32, seed)
    # transformers' init is small (std 0.02): widen it so logits have real margins and tokens vary.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" not in name:
                param.normal_(0.0, 0.2, generator=torch.Generator().manual_seed(zlib.crc32(name.encode())))
    return model


@torch.no_grad()
def hf_greedy(model: torch.nn.Module, ids: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Greedy tokens [B, new_tokens] and the logits [B, V] that chose each, through transformers' KV cache."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    logits = model(input_ids=ids, past_key_values=cache, use_cache=True).logits[:, -1]
    chosen, all_logits = [], []
    for _ in range(new_tokens):
        all_logits.append(logits)
        token = logits.argmax(-1)
        chosen.append(token)
        logits = model(input_ids=token[:, None], past_key_values=cache, use_cache=True).logits[:, -1]
    return torch.stack(chosen, dim=1), all_logits


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny matmuls on a shared 2-core runner are many times slower with torch's thread pool than without."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
