"""The engine's decoder (torch backend, fp32, CPU) against transformers with the same weights."""

from __future__ import annotations

import json

import pytest
import torch

from kernelscope.engine.cache import allocate_cache
from kernelscope.engine.config import config_from_dir, config_from_hf
from kernelscope.engine.errors import EngineError
from kernelscope.engine.generate import Engine
from kernelscope.engine.weights import load_safetensors, weights_from_state_dict

from .tiny_models import hf_greedy, hf_model, one_thread, tiny_config  # noqa: F401 (fixture)

ARCHS = ["qwen2", "llama"]


@pytest.fixture(scope="module", params=ARCHS)
def pair(request):
    model = hf_model(tiny_config(request.param))
    return model, Engine.from_hf_model(model, backend="torch")


def prompts(batch: int, length: int = 7) -> torch.Tensor:
    return torch.randint(0, 128, (batch, length), generator=torch.Generator().manual_seed(batch))


@pytest.mark.parametrize("batch", [1, 2])
def test_greedy_tokens_equal_transformers(pair, batch):
    model, engine = pair
    ids = prompts(batch)
    expected, _ = hf_greedy(model, ids, 64)
    assert torch.equal(engine.generate(ids, 64), expected)


def test_prefill_and_decode_logits_close(pair):
    model, engine = pair
    ids = prompts(2)
    _, expected = hf_greedy(model, ids, 4)
    cache = allocate_cache(engine.config, 2, 32, "cpu", torch.float32)
    logits = engine.model.prefill(ids, cache)
    positions = torch.full((2,), ids.shape[1])
    for step, reference in enumerate(expected):
        torch.testing.assert_close(logits, reference, rtol=1e-5, atol=1e-5, msg=f"step {step}")
        logits = engine.model.decode_step(reference.argmax(-1), positions, positions + 1, cache)
        positions = positions + 1


def test_qwen2_has_qkv_bias_and_tied_head_llama_not(pair):
    _, engine = pair
    w = engine.weights
    qwen = engine.config.architecture == "qwen2"
    assert (w.layers[0].b_qkv is not None) == qwen
    assert (w.lm_head.data_ptr() == w.embed.data_ptr()) == qwen
    assert w.layers[0].w_qkv.shape == (4 * 16 + 2 * 2 * 16, 64)
    assert w.layers[0].w_gate_up.shape == (2 * 96, 64)


def test_llama3_rope_scaling_matches_transformers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    hf = tiny_config("llama", rope_parameters=rope)
    expected, _ = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
    torch.testing.assert_close(config_from_hf(hf).inv_freq(), expected, rtol=1e-6, atol=0)


def test_safetensors_directory_round_trip(tmp_path):
    from safetensors.torch import save_file

    model = hf_model(tiny_config("llama"))
    model.config.save_pretrained(tmp_path)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "model.safetensors")
    engine = Engine.from_pretrained(tmp_path, "cpu", torch.float32, backend="torch")
    ids = prompts(1)
    assert torch.equal(engine.generate(ids, 8), hf_greedy(model, ids, 8)[0])


def test_missing_and_mismatched_weights_are_named(pair):
    model, engine = pair
    state = dict(model.state_dict())
    del state["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(EngineError, match=r"missing weight 'model.layers.1.mlp.up_proj.weight'"):
        weights_from_state_dict(engine.config, state, "cpu", torch.float32)
    state = dict(model.state_dict())
    state["model.norm.weight"] = torch.ones(3)
    with pytest.raises(EngineError, match=r"'model.norm.weight' has shape \[3\], expected \[64\]"):
        weights_from_state_dict(engine.config, state, "cpu", torch.float32)


def test_unsupported_architecture(tmp_path):
    with pytest.raises(EngineError, match="unsupported architecture 'gpt2'"):
        config_from_hf(type("GPT2Config", (), {"model_type": "gpt2"})())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral"}))
    with pytest.raises(EngineError, match="unsupported architecture 'mistral'"):
        config_from_dir(tmp_path)
    with pytest.raises(EngineError, match="no \\*.safetensors"):
        load_safetensors(config_from_hf(tiny_config("llama")), tmp_path, "cpu", torch.float32)


def test_random_init_from_config_builds_transformers_weights():
    engine = Engine.from_hf_config(tiny_config("llama"), "cpu", torch.float32, backend="torch", max_seq_len=16)
    assert engine.weights.layers[0].b_qkv is None and engine.max_seq_len == 16
    assert engine.generate(prompts(1), 3).shape == (1, 3)


@pytest.mark.parametrize("length", [7, 16, 20])
def test_prefill_padded_to_its_bucket_gives_the_unpadded_logits_and_cache(pair, length):
    """The CUDA path pads prompts at the end (prefill_graphs.py); run here eagerly through the same code on the
    CPU: the logits at the last real position and the cache slots of the prompt equal an unpadded prefill."""
    from kernelscope.engine.prefill_graphs import PrefillGraphs, prefill_bucket

    _, engine = pair
    ids = prompts(2, length)
    plain_cache = allocate_cache(engine.config, 2, 64, "cpu", torch.float32)
    padded_cache = allocate_cache(engine.config, 2, 64, "cpu", torch.float32)
    expected = engine.model.prefill(ids, plain_cache)
    seen: list[tuple[int, ...]] = []

    def prefill(padded_ids, last):
        seen.append(tuple(padded_ids.shape))
        return engine.model.prefill(padded_ids, padded_cache, last=last)

    got = PrefillGraphs().run(ids, 64, prefill, replay=False)
    assert seen == [(2, prefill_bucket(length, 64))] and seen[0][1] >= length
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    for plain, padded in zip(plain_cache.keys + plain_cache.values, padded_cache.keys + padded_cache.values,
                             strict=True):
        torch.testing.assert_close(padded[:, :length], plain[:, :length], rtol=1e-5, atol=1e-5)


def test_prefill_buckets():
    from kernelscope.engine.prefill_graphs import prefill_bucket

    assert [prefill_bucket(n, 4096) for n in (1, 16, 17, 100, 128, 129, 512)] == [16, 16, 32, 128, 128, 256, 512]
    assert [prefill_bucket(n, 4096) for n in (513, 1024, 1025, 2048)] == [1024, 1024, 1536, 2048]
    # Never past the cache, never shorter than the prompt.
    assert prefill_bucket(100, 120) == 120 and prefill_bucket(120, 120) == 120 and prefill_bucket(9, 12) == 12
