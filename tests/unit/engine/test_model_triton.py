"""The decoder on the triton backend (kernels under TRITON_INTERPRET=1, set by conftest) against transformers."""

from __future__ import annotations

import pytest
import torch

from kernelscope.engine.generate import Engine

from .tiny_models import hf_greedy, hf_model, one_thread, tiny_config  # noqa: F401 (fixture)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_triton_greedy_tokens_equal_transformers(triton_ops, arch):
    model = hf_model(tiny_config(arch))
    engine = Engine.from_hf_model(model, backend="triton", max_seq_len=16)
    ids = torch.randint(0, 128, (2, 5), generator=torch.Generator().manual_seed(0))
    # Three tokens: prefill plus two fused decode steps (the interpreter runs every program of the GPU grid).
    assert torch.equal(engine.generate(ids, 3), hf_greedy(model, ids, 3)[0])
