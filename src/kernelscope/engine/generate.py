"""Engine: prefill, then a decode loop with no host synchronisation, eager or replayed as one CUDA graph.

Decode state lives in device buffers at fixed addresses (the current token, positions, lengths), updated by the
step itself, so the same step can be captured once and replayed; generated tokens are gathered on the device
and copied to the host once at the end.
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from kernelscope.engine.cache import KVCache, allocate_cache
from kernelscope.engine.config import EngineConfig, config_from_dir, config_from_hf
from kernelscope.engine.errors import EngineError
from kernelscope.engine.model import Decoder, Scope, no_scope
from kernelscope.engine.ops import Ops
from kernelscope.engine.prefill_graphs import PrefillGraphs
from kernelscope.engine.sampling import Sampling
from kernelscope.engine.weights import Weights, load_safetensors, random_hf_model, weights_from_state_dict


class Marker(Protocol):
    """Profiling ranges the engine opens: phases, decode steps, and modules (eager launches only)."""

    def phase(self, name: str) -> AbstractContextManager: ...
    def step(self, index: int) -> AbstractContextManager: ...
    def module(self, qualified_name: str) -> AbstractContextManager: ...


@dataclass
class _DecodeState:
    token: torch.Tensor  # [B] int64: input of the next step, overwritten by its output
    pos_len: torch.Tensor  # [2, B] int64: positions and lengths (= positions + 1), advanced by one add


class Engine:
    def __init__(self, config: EngineConfig, weights: Weights, backend: str = "triton",
                 max_seq_len: int | None = None) -> None:
        self.config = config
        self.weights = weights
        self.ops = Ops(backend)
        self.model = Decoder(config, weights, self.ops)
        self.device = weights.embed.device
        self.max_seq_len = max_seq_len or min(config.max_positions, 4096)
        self._cache: KVCache | None = None
        self._prefill_graphs = PrefillGraphs()

    @classmethod
    def from_hf_model(cls, model: torch.nn.Module, backend: str = "triton",
                      max_seq_len: int | None = None) -> Engine:
        """Share a transformers model's weights (q/k/v and gate/up are fused copies; the rest is shared)."""
        config = config_from_hf(model.config)
        param = next(model.parameters())
        weights = weights_from_state_dict(config, model.state_dict(), param.device, param.dtype)
        return cls(config, weights, backend, max_seq_len)

    @classmethod
    def from_pretrained(cls, directory: Path | str, device: torch.device | str, dtype: torch.dtype,
                        backend: str = "triton", max_seq_len: int | None = None) -> Engine:
        """config.json + *.safetensors of a local checkpoint directory."""
        config = config_from_dir(Path(directory))
        return cls(config, load_safetensors(config, Path(directory), device, dtype), backend, max_seq_len)

    @classmethod
    def from_hf_config(cls, hf_config: Any, device: torch.device | str, dtype: torch.dtype,
                       backend: str = "triton", max_seq_len: int | None = None) -> Engine:
        """Random weights (transformers' init), built on the device; for shapes without a checkpoint."""
        config_from_hf(hf_config)  # an unsupported architecture fails before anything is built
        return cls.from_hf_model(random_hf_model(hf_config, device, dtype), backend, max_seq_len)

    def cache(self, batch: int) -> KVCache:
        """The static KV cache for this batch size (kept between calls; reallocated when the batch changes)."""
        if self._cache is None or self._cache.batch != batch:
            self._prefill_graphs.forget()  # they write into the old cache
            self._cache = None  # free the old one before allocating
            self._cache = allocate_cache(self.config, batch, self.max_seq_len, self.device, self.weights.embed.dtype)
        return self._cache

    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, temperature: float = 0.0, top_k: int = 0,
                 top_p: float = 1.0, seed: int | None = None, cuda_graph: bool = True, eager_steps: int = 1,
                 marker: Marker | None = None, prefill_graph: bool = True) -> torch.Tensor:
        """Generate tokens [B, max_new_tokens] (int64, on the host) after prompts input_ids [B, L].

        Decode step i (0-based; it produces token i + 1) runs eagerly for i < eager_steps, with module ranges
        when a marker is given; on CUDA with cuda_graph the remaining steps replay one graph captured after
        them, launching the same kernel sequence. eager_steps ≥ 1 (the first step also warms up the kernels).
        On CUDA with cuda_graph the prompt is padded to its length bucket (prefill_graphs.py) and, with
        prefill_graph, prefill replays the bucket's captured graph; without prefill_graph it runs the same
        kernels eagerly, inside the marker's module ranges.
        """
        sampling = Sampling(temperature, top_k, top_p)
        ids = self._check_prompt(input_ids, max_new_tokens)
        batch, length = ids.shape
        cache = self.cache(batch)
        cache.check_fits(length, max_new_tokens - 1)  # the last token is never written to the cache
        generator = sampling.generator(seed, self.device)
        phase, step, scope = _marker_parts(marker)
        out = torch.empty(batch, max_new_tokens, dtype=torch.int64, device=self.device)
        state = _DecodeState(token=torch.empty(batch, dtype=torch.int64, device=self.device),
                             pos_len=torch.tensor([[length], [length + 1]], device=self.device).repeat(1, batch))

        use_graph = cuda_graph and self.device.type == "cuda"
        with phase("prefill"):
            logits = self.prefill(ids, cache, scope, padded=use_graph, graph=use_graph and prefill_graph)
            sampling.pick(self.ops, logits, state.token, generator)
            out[:, 0] = state.token
        graph: torch.cuda.CUDAGraph | None = None
        with phase("decode"):
            for i in range(max_new_tokens - 1):
                with step(i):
                    if graph is not None:
                        graph.replay()
                    else:
                        self._step(state, cache, sampling, generator, scope, kv_tokens=batch * (length + i + 1))
                    out[:, i + 1] = state.token
                if use_graph and graph is None and i + 1 >= max(eager_steps, 1) and i + 1 < max_new_tokens - 1:
                    graph = self._capture(state, cache, sampling, generator)
        return out.cpu()

    def prefill(self, ids: torch.Tensor, cache: KVCache, scope: Scope = no_scope, padded: bool = True,
                graph: bool = True) -> torch.Tensor:
        """Logits [B, V] of the last prompt token after filling the cache; `padded`: the prompt padded to its
        bucket (CUDA), `graph`: replayed from the bucket's captured CUDA graph (captured on first use)."""
        if not padded or self.device.type != "cuda":
            return self.model.prefill(ids, cache, scope)
        ranges = no_scope if graph else scope  # a captured graph replays without module ranges
        return self._prefill_graphs.run(
            ids, cache.capacity, lambda padded_ids, last: self.model.prefill(padded_ids, cache, ranges, last), graph)

    def _step(self, state: _DecodeState, cache: KVCache, sampling: Sampling, generator: torch.Generator | None,
              scope: Scope, kv_tokens: int | None = None) -> None:
        logits = self.model.decode_step(state.token, state.pos_len[0], state.pos_len[1], cache, scope, kv_tokens)
        sampling.pick(self.ops, logits, state.token, generator)
        state.pos_len.add_(1)

    def _capture(self, state: _DecodeState, cache: KVCache, sampling: Sampling,
                 generator: torch.Generator | None) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        if generator is not None:
            graph.register_generator_state(generator)
        with torch.cuda.graph(graph):
            self._step(state, cache, sampling, generator, no_scope)
        return graph

    def _check_prompt(self, input_ids: torch.Tensor, max_new_tokens: int) -> torch.Tensor:
        if input_ids.dim() != 2 or input_ids.shape[1] == 0 or input_ids.shape[0] == 0:
            raise EngineError(f"input_ids must be [batch, length] with length ≥ 1, got shape {list(input_ids.shape)}")
        if input_ids.dtype not in (torch.int32, torch.int64):
            raise EngineError(f"input_ids must be integer token ids, got {input_ids.dtype}")
        if max_new_tokens < 1:
            raise EngineError(f"max_new_tokens must be ≥ 1, got {max_new_tokens}")
        if input_ids.shape[1] > self.max_seq_len:
            raise EngineError(f"prompt of {input_ids.shape[1]} tokens is longer than the KV cache "
                              f"({self.max_seq_len} slots)")
        low, high = int(input_ids.min()), int(input_ids.max())  # one check before any kernel runs
        if low < 0 or high >= self.config.vocab_size:
            raise EngineError(f"input_ids hold token id {low if low < 0 else high}, outside the vocabulary "
                              f"[0, {self.config.vocab_size})")
        return input_ids.to(self.device, torch.int64)

    def decode_bytes_per_token(self, batch: int, context: int = 0) -> int:
        """Bytes one decode step must read: every weight once (the embedding only B rows unless it is also the
        tied lm_head) plus K and V of `context` cached tokens per sequence in every layer."""
        w, c = self.weights, self.config
        weights = sum(t.numel() * t.element_size() for t in w.tensors())
        if w.lm_head.data_ptr() != w.embed.data_ptr():
            weights -= (w.embed.shape[0] - batch) * w.embed.shape[1] * w.embed.element_size()
        kv = 2 * c.num_layers * batch * context * c.kv_size * w.embed.element_size()
        return weights + kv


def _marker_parts(marker: Marker | None) -> tuple[Any, Any, Scope]:
    if marker is None:
        def null(_arg: object) -> AbstractContextManager:
            return contextlib.nullcontext()
        return null, null, no_scope
    return marker.phase, marker.step, marker.module
