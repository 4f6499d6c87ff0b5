"""Engine.generate on CPU: sampling, markers, bad input."""

from __future__ import annotations

import contextlib

import pytest
import torch

from kernelscope.engine.errors import EngineError
from kernelscope.engine.generate import Engine

from .tiny_models import hf_model, one_thread, tiny_config  # noqa: F401 (fixture)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.from_hf_model(hf_model(tiny_config("qwen2")), backend="torch", max_seq_len=32)


IDS = torch.tensor([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]])


def test_temperature_zero_is_greedy(engine):
    greedy = engine.generate(IDS, 10)
    assert torch.equal(engine.generate(IDS, 10, temperature=0.0, top_k=5, top_p=0.5, seed=7), greedy)


@pytest.mark.parametrize("params", [dict(temperature=1.0), dict(temperature=0.7, top_k=5),
                                    dict(temperature=1.3, top_p=0.8)])
def test_sampling_reproducible_with_seed(engine, params):
    first = engine.generate(IDS, 12, seed=11, **params)
    assert torch.equal(engine.generate(IDS, 12, seed=11, **params), first)
    assert not torch.equal(engine.generate(IDS, 12, seed=12, **params), first)
    assert first.shape == (2, 12) and first.min() >= 0 and first.max() < 128


def test_top_k_one_is_greedy(engine):
    assert torch.equal(engine.generate(IDS, 8, temperature=2.0, top_k=1, seed=3), engine.generate(IDS, 8))


class RecordingMarker:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def _record(self, kind: str, value: object) -> contextlib.AbstractContextManager:
        self.events.append((kind, value))
        return contextlib.nullcontext()

    def phase(self, name: str):
        return self._record("phase", name)

    def step(self, index: int):
        return self._record("step", index)

    def module(self, qualified_name: str):
        return self._record("module", qualified_name)


def test_marker_ranges(engine):
    marker = RecordingMarker()
    engine.generate(IDS[:1], 3, marker=marker)
    kinds = [e for e in marker.events if e[0] != "module"]
    assert kinds == [("phase", "prefill"), ("phase", "decode"), ("step", 0), ("step", 1)]
    modules = {name for kind, name in marker.events if kind == "module"}
    assert {"model.embed_tokens", "model.layers.1.self_attn", "model.layers.1.mlp", "model.layers.0.input_layernorm",
            "model.norm", "lm_head"} <= modules


def test_prompt_longer_than_cache(engine):
    with pytest.raises(EngineError, match="longer than the KV cache"):
        engine.generate(torch.zeros(1, 40, dtype=torch.int64), 1)
    with pytest.raises(EngineError, match="exceeds the KV cache"):
        engine.generate(torch.zeros(1, 30, dtype=torch.int64), 8)


@pytest.mark.parametrize("kwargs, message", [(dict(temperature=-1.0), "temperature"), (dict(top_p=0.0), "top_p"),
                                             (dict(top_k=-2), "top_k")])
def test_bad_sampling_parameters(engine, kwargs, message):
    with pytest.raises(EngineError, match=message):
        engine.generate(IDS, 2, **kwargs)


def test_bad_prompt_shape_and_ids(engine):
    with pytest.raises(EngineError, match="input_ids"):
        engine.generate(torch.zeros(5, dtype=torch.int64), 2)
    with pytest.raises(EngineError, match=r"token id 128, outside the vocabulary \[0, 128\)"):
        engine.generate(torch.tensor([[1, 128]]), 2)


def test_decode_bytes_per_token(engine):
    params = sum(p.numel() for p in engine.weights.tensors()) * 4
    assert engine.decode_bytes_per_token(1) == params
    kv_per_token = 2 * 2 * 2 * 16 * 4  # K and V · layers · Hkv · Dh · fp32
    assert engine.decode_bytes_per_token(2, context=10) == params + 2 * 10 * kv_per_token
