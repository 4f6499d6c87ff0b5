"""The kernel sequence read by signature: generated kernels' numbers dropped, each run of one kernel counted once.

Exact names can hide a decoder's repeat. torch.compile (Inductor) numbers the kernels it generates, so one fused
computation is `…_rsqrt_12` in one layer and `…_rsqrt_13` in the next where only its buffers differ; and a layer
may launch one kernel a varying number of times in a row (one attention-mask kernel more in some layers). Read by
signature, with each run of one signature as one position, the layers repeat again. Structure inference (analyze/structure/structure_inference.py) tries this reading only where the exact one leaves the
layers unknown, with the same checks; every kernel of a run then takes what its run's first kernel was given.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from kernelscope.analyze.structure.kernel_sequence import KernelSequence

# torch.compile (Inductor) numbers each kernel it generates, `triton_<kind>_fused_<ops>_<n>`: one fused computation
# gets a new number wherever its buffers or strides differ (layer after layer of one model). The signature drops it.
_GENERATED_NUMBER = r"^(triton_(?:poi|red|per|tem|for|spl)_\w+?)_\d+$"


def signatures(seq: KernelSequence, names: pl.Series) -> np.ndarray:
    """Per position, the kernel's signature as a code; names: the kernels' names (seq.codes are their dense ranks),
    so that only the distinct names are rewritten."""
    distinct = names.unique().sort()
    codes = pl.select(distinct.str.replace(_GENERATED_NUMBER, "$1").rank("dense")).to_series()
    return codes.to_numpy().astype(np.int64)[seq.codes - 1]


def runs_of(seq: KernelSequence, signature: np.ndarray, breaks: np.ndarray) -> tuple[KernelSequence, np.ndarray]:
    """The sequence with one position per run of one signature (a run never crosses a position where `breaks` is
    set: a step's first kernel), as codes its signatures; and, per position of `seq`, the position of its run in the
    shorter one. A run's time and threads are its kernels' together, its end its last kernel's, the host's pause
    before it the one before its first kernel."""
    n = len(seq)
    first = np.ones(n, dtype=bool)
    first[1:] = (signature[1:] != signature[:-1]) | breaks[1:]
    heads = np.flatnonzero(first)
    run = np.cumsum(first) - 1
    if n == 0:
        return seq, run

    def pick(values: list) -> list:
        return [values[i] for i in heads.tolist()]

    short = replace(
        seq, order=seq.order[heads], codes=signature[heads],
        matrix=seq.matrix[heads], attention=seq.attention[heads], norm=seq.norm[heads], same_op=seq.same_op[heads],
        embedding=seq.embedding[heads], category=pick(seq.category), op=pick(seq.op), op_row=seq.op_row[heads],
        dur=np.add.reduceat(seq.dur, heads), threads=np.add.reduceat(seq.threads, heads), launch=seq.launch[heads],
        pause=seq.pause[heads], start=seq.start[heads], end=np.maximum.reduceat(seq.end, heads))
    return short, run


def positions_in_runs(regions: list[tuple[int, int]] | None, run: np.ndarray) -> list[tuple[int, int]] | None:
    """Stretches lo..hi of the full sequence as stretches of the run sequence (their bounds start runs)."""
    if regions is None:
        return None
    size = int(run[-1]) + 1 if run.size else 0
    return [(int(run[lo]), int(run[hi]) if hi < run.size else size) for lo, hi in regions]


def spread_runs(kernels: pl.DataFrame, phase_filled: np.ndarray, layer_filled: np.ndarray, seq: KernelSequence,
                short: KernelSequence, run: np.ndarray) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """Every kernel of a run takes the phase and step, the layer and module that inference gave its run's first
    kernel (and is marked as filled the same way)."""
    head = np.empty(kernels.height, dtype=np.int64)
    head[seq.order] = short.order[run]  # per row: the row of its run's first kernel
    index = pl.Series(head)
    phase, layer = phase_filled[head], layer_filled[head]
    take_phase, take_layer = pl.Series(phase), pl.Series(layer)
    out = kernels.with_columns(
        *(pl.when(take_phase).then(kernels[c].gather(index)).otherwise(kernels[c]).alias(c) for c in ("phase", "step")),
        *(pl.when(take_layer).then(kernels[c].gather(index)).otherwise(kernels[c]).alias(c) for c in ("layer", "module")))
    return out, phase_filled | phase, layer_filled | layer


def every_layer_attends(kernels: pl.DataFrame, placed: np.ndarray, seq: KernelSequence) -> bool:
    """Some kernel was placed in a layer, and each layer placed (per phase and step) holds an attention kernel."""
    attention = np.zeros(kernels.height, dtype=bool)
    attention[seq.order] = seq.attention
    layers = (kernels.select("phase", "step", "layer").with_columns(pl.Series("attention", attention))
              .filter(pl.Series(placed) & pl.col("layer").is_not_null())
              .group_by("phase", "step", "layer").agg(pl.col("attention").any()))
    return layers.height > 0 and bool(layers["attention"].all())
