"""Choosing the next token: greedy (temperature 0) or sampled with temperature, top-k and top-p."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelscope.engine.errors import EngineError
from kernelscope.engine.ops import Ops


@dataclass(frozen=True)
class Sampling:
    temperature: float = 0.0
    top_k: int = 0  # 0 keeps every token
    top_p: float = 1.0  # 1.0 keeps every token

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise EngineError(f"temperature must be ≥ 0, got {self.temperature}")
        if self.top_k < 0:
            raise EngineError(f"top_k must be ≥ 0, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise EngineError(f"top_p must be in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def generator(self, seed: int | None, device: torch.device) -> torch.Generator | None:
        """A seeded generator for reproducible sampling; None when greedy or unseeded."""
        if self.greedy or seed is None:
            return None
        return torch.Generator(device=device).manual_seed(seed)

    def pick(self, ops: Ops, logits: torch.Tensor, out: torch.Tensor, generator: torch.Generator | None) -> None:
        """Write the chosen token ids [B] into `out` (a fixed buffer, so a CUDA graph can replay it)."""
        if self.greedy:
            ops.argmax(logits, out=out)
        else:
            out.copy_(ops.sample(logits, self.temperature, self.top_k, self.top_p, generator))
