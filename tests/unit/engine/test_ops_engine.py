"""The engine's model on the Triton operators (interpreted on CPU) chooses transformers' greedy tokens."""

from __future__ import annotations

import pytest
import torch

from .tiny_models import hf_greedy, hf_model, one_thread, tiny_config  # noqa: F401  (one_thread: fixture)


@pytest.mark.slow
def test_triton_backend_greedy_tokens_match_transformers(triton_ops):
    from kernelscope.engine.generate import Engine

    model = hf_model(tiny_config("qwen2", num_hidden_layers=1))
    ids = torch.randint(0, 128, (2, 7), generator=torch.Generator().manual_seed(0))
    want, _ = hf_greedy(model, ids, 4)
    engine = Engine.from_hf_model(model, backend="triton", max_seq_len=16)
    assert torch.equal(engine.generate(ids, max_new_tokens=4), want)
