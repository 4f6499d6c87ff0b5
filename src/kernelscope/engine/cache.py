"""Static KV cache: per layer one key and one value tensor [B, S, Hkv, Dh], allocated once, written in place."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kernelscope.engine.config import EngineConfig
from kernelscope.engine.errors import EngineError


@dataclass(frozen=True)
class KVCache:
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0]

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[1]

    def check_fits(self, prompt_len: int, new_tokens: int) -> None:
        """A prompt (plus the tokens to generate) must fit the cache's slots."""
        if prompt_len > self.capacity:
            raise EngineError(f"prompt of {prompt_len} tokens is longer than the KV cache ({self.capacity} slots)")
        if prompt_len + new_tokens > self.capacity:
            raise EngineError(f"prompt of {prompt_len} tokens plus {new_tokens} new tokens exceeds the KV cache "
                              f"({self.capacity} slots)")


def allocate_cache(config: EngineConfig, batch: int, capacity: int, device: torch.device | str,
                   dtype: torch.dtype) -> KVCache:
    shape = (batch, capacity, config.num_kv_heads, config.head_dim)

    def one() -> list[torch.Tensor]:
        return [torch.zeros(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]

    return KVCache(keys=one(), values=one())
