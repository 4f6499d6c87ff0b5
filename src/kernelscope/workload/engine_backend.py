"""Run kernelscope's own engine (kernelscope.engine) as a profiled workload: `kernelscope profile --backend engine`.

The engine opens ranges through a marker (kernelscope.engine.generate.Marker); EngineMarker turns them into the
ranges HF runs get (kernelscope.ranges), so attribution and reports treat both backends alike:
  ks.phase:prefill   from the start of generate() to the first decode step (as for transformers)
  ks.phase:decode:i  decode step i, up to the next step; also around a CUDA-graph replay (whose kernels take
                     their modules from an eager step: analyze.graph_replays)
  ks.module:<name>   every module of an eager launch, HF-style names (model.layers.3.mlp); `generate` for the
                     engine's work outside the model (sampling, token bookkeeping, the final copy to the host)
The marker also times the run: a clock mark at prefill and at every step (device events, no synchronisation).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from kernelscope import ranges
from kernelscope.contracts.run_info import ModelInfo
from kernelscope.errors import UserError
from kernelscope.workload.annotate import RangeStack
from kernelscope.workload.generation import GenerationSettings, RunTimes, StepClock
from kernelscope.workload.structure import plain_config

# Decode steps run eagerly (with module ranges) before the CUDA graph takes over: one is enough for attribution.
EAGER_STEPS = 1


class EngineMarker:
    """The engine's marker: ranges (when `annotate`) and clock marks for one generation."""

    def __init__(self, clock: StepClock, annotate: bool, nvtx: bool) -> None:
        self._clock = clock
        self._stack = RangeStack(nvtx=nvtx) if annotate else None

    def begin(self) -> None:
        self._push(ranges.phase_range(ranges.PREFILL), ranges.module_range(ranges.GENERATE_MODULE))

    def end(self) -> None:
        self._pop_all()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name == ranges.PREFILL:
            self._clock.mark()  # the first forward pass starts
            yield
        elif name == ranges.DECODE:
            self._pop_all()  # prefill ends
            self._push(ranges.phase_range(ranges.DECODE), ranges.module_range(ranges.GENERATE_MODULE))
            yield
        else:
            with self._range(ranges.phase_range(name)):
                yield

    @contextlib.contextmanager
    def step(self, index: int) -> Iterator[None]:
        """Step i lasts until step i + 1 starts (or the generation ends), as for transformers: what the engine does
        between steps (capturing the graph, the final copy of the tokens) belongs to the step before."""
        self._clock.mark()  # forward pass index + 2 starts
        self._pop_all()
        self._push(ranges.phase_range(ranges.DECODE, index), ranges.module_range(ranges.GENERATE_MODULE))
        with self._range():  # closes what the step opened inside, not the step itself
            yield

    def module(self, qualified_name: str) -> contextlib.AbstractContextManager:
        return self._range(ranges.module_range(qualified_name))

    @contextlib.contextmanager
    def _range(self, *names: str) -> Iterator[None]:
        if self._stack is None:
            yield
            return
        depth = self._stack.depth()
        self._push(*names)
        try:
            yield
        finally:
            self._stack.pop_to(depth)

    def _push(self, *names: str) -> None:
        if self._stack is not None:
            for name in names:
                self._stack.push(name)

    def _pop_all(self) -> None:
        if self._stack is not None:
            self._stack.close_all()


@dataclass
class EngineWorkload:
    """An engine built for one profile run: its backend (triton on CUDA, the torch reference ops on CPU)."""

    engine: Any  # kernelscope.engine.generate.Engine
    device: torch.device
    backend: str

    @staticmethod
    def check(hf_config: Any, name: str) -> None:
        """Fail fast, before inputs or weights are made, on a model the engine cannot run."""
        from kernelscope.engine.config import config_from_hf
        from kernelscope.engine.errors import EngineError

        try:
            config_from_hf(hf_config)
        except EngineError as exc:
            raise UserError(f"--backend engine: {name}: {exc}") from None

    @classmethod
    def build(cls, source: Any, hf_config: Any, device: torch.device, dtype: torch.dtype,
              max_seq_len: int) -> EngineWorkload:
        """From a checkpoint directory, or random weights for a preset (seeded by the caller)."""
        from kernelscope.engine.errors import EngineError
        from kernelscope.engine.generate import Engine

        backend = "triton" if device.type == "cuda" else "torch"
        try:
            if source.checkpoint is not None:
                engine = Engine.from_pretrained(source.checkpoint, device, dtype, backend, max_seq_len)
            else:
                engine = Engine.from_hf_config(hf_config, device, dtype, backend, max_seq_len)
        except EngineError as exc:
            raise UserError(f"--backend engine: {source.name}: {exc}") from None
        except torch.OutOfMemoryError:
            raise UserError(f"CUDA out of memory while building '{source.name}' for the engine on {device}") from None
        return cls(engine, device, backend)

    def description(self) -> str:
        if self.backend == "triton":
            return (f"kernelscope engine (Triton kernels; prompts padded to a length bucket, prefill eager in the "
                    f"profiled run and a replayed CUDA graph in timed runs; the first {EAGER_STEPS} decode step(s) "
                    "eager, then one CUDA graph replayed per step)")
        return "kernelscope engine (PyTorch reference ops on CPU, eager)"

    def generate(self, input_ids: torch.Tensor, settings: GenerationSettings,
                 annotated: bool) -> tuple[torch.Tensor, RunTimes]:
        """One timed generation of exactly settings.new_tokens tokens (on the host), with ranges if annotated."""
        from kernelscope.engine.errors import EngineError

        clock = StepClock(self.device)
        marker = EngineMarker(clock, annotate=annotated, nvtx=self.device.type == "cuda")
        clock.mark()
        marker.begin()
        try:
            tokens = self.engine.generate(input_ids, settings.new_tokens, temperature=settings.temperature,
                                          seed=settings.seed, cuda_graph=True, eager_steps=EAGER_STEPS,
                                          marker=marker, prefill_graph=not annotated)
        except EngineError as exc:
            raise UserError(f"--backend engine: {exc}") from None
        except torch.OutOfMemoryError:
            raise UserError(f"CUDA out of memory during engine generation (batch {input_ids.shape[0]}, prompt "
                            f"{input_ids.shape[1]}, {settings.new_tokens} new tokens): lower --batch-size or "
                            "the lengths") from None
        finally:
            marker.end()
        clock.mark()
        return tokens, RunTimes(clock.elapsed_ms(), settings.new_tokens, int(input_ids.shape[0]))

    def describe(self, hf_config: Any) -> ModelInfo:
        """The model section of run.json, with the fields describe_model gives HF models."""
        config = self.engine.config
        tensors = self.engine.weights.tensors()
        layer_type = f"{config.architecture} decoder layer (kernelscope engine)"
        return ModelInfo(
            class_name="kernelscope.engine.Decoder",
            model_type=config.architecture,
            parameters=sum(t.numel() for t in tensors),
            parameter_bytes=sum(t.numel() * t.element_size() for t in tensors),
            num_layers=config.num_layers,
            layer_prefix="model.layers",
            layer_types=dict.fromkeys(range(config.num_layers), layer_type),
            config=plain_config(hf_config),
        )
