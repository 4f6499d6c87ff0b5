"""Prefill on CUDA: prompts padded to a length bucket, each (batch, bucket) captured once as a CUDA graph.

A short prefill launches a few hundred small kernels, and launching them from Python takes longer than running
them. Padding the prompt at its end to a bucket length lets one captured graph serve every prompt length of its
bucket: causal attention keeps the padding out of the real positions, the logits are taken at the last real
position (a device index), and the cache slots the padding fills lie past the prompt, where decode writes before
it reads. The first prefill of a bucket runs eagerly on the padded input (it compiles the kernels and gives the
result), then the graph is captured; eager and replayed prefills launch the same kernels on the same shapes, so
their results are identical.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import torch

# Buckets: powers of two from 16 up to 512 tokens, then multiples of 512 (at most 2× the work at short lengths,
# where the host dominates anyway; at most 511 padded tokens beyond).
_SMALLEST_BUCKET = 16
_POW2_UNTIL = 512
GRAPHS_KEPT = 8  # captured prefills kept per engine, least recently used dropped first

Prefill = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (padded ids [B, bucket], last index [1]) → logits


def prefill_bucket(length: int, capacity: int) -> int:
    """The padded length of a prompt of `length` tokens in a cache of `capacity` slots (≥ length)."""
    if length <= _POW2_UNTIL:
        bucket = max(_SMALLEST_BUCKET, 1 << (length - 1).bit_length())
    else:
        bucket = -(-length // _POW2_UNTIL) * _POW2_UNTIL
    return max(length, min(bucket, capacity))


@dataclass
class _Captured:
    ids: torch.Tensor  # [B, bucket] int64: the padded prompt, written before each replay
    last: torch.Tensor  # [1] int64: the last real position
    graph: torch.cuda.CUDAGraph | None = None
    logits: torch.Tensor | None = None  # the graph's output; valid until the next prefill


class PrefillGraphs:
    """Captured prefills by (batch, bucket); forget() when the KV cache they write is replaced."""

    def __init__(self) -> None:
        self._entries: OrderedDict[tuple[int, int], _Captured] = OrderedDict()
        # One memory pool for all prefill graphs: they never run at the same time, and each one's logits are
        # consumed (the first token picked) before another prefill runs.
        self._pool = None

    def forget(self) -> None:
        self._entries.clear()

    def run(self, ids: torch.Tensor, capacity: int, prefill: Prefill, replay: bool) -> torch.Tensor:
        """Logits [B, V] after prompts ids [B, L]: padded to the bucket; replayed from a captured graph when
        `replay` and one exists (else eager, capturing one for next time when `replay`)."""
        batch, length = ids.shape
        bucket = prefill_bucket(length, capacity)
        entry = self._entries.get((batch, bucket))
        if entry is None:
            entry = _Captured(ids=torch.zeros(batch, bucket, dtype=torch.int64, device=ids.device),
                              last=torch.zeros(1, dtype=torch.int64, device=ids.device))
        entry.ids[:, :length].copy_(ids)
        entry.ids[:, length:].zero_()  # padding: token 0, the same for every prompt of the bucket
        entry.last.fill_(length - 1)
        if replay and entry.graph is not None:
            self._entries.move_to_end((batch, bucket))
            entry.graph.replay()
            assert entry.logits is not None
            return entry.logits
        logits = prefill(entry.ids, entry.last)
        if replay:
            self._capture(entry, prefill)
            self._entries[(batch, bucket)] = entry
            while len(self._entries) > GRAPHS_KEPT:
                self._entries.popitem(last=False)
        return logits

    def _capture(self, entry: _Captured, prefill: Prefill) -> None:
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            entry.logits = prefill(entry.ids, entry.last)
        entry.graph = graph
