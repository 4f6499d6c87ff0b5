"""Forward passes where no step marker cut the trace, and prefill or decode for passes no marker named.

Each group of layer repeats (analyze/structure/layer_runs.py) is one pass's layers. The next pass starts at its embedding
lookup (the last one between the two groups of layers), else after the longest pause of the host between them
(launch calls), else after the longest idle gap of the device there; the first pass starts with the trace, so
the sampling after a forward stays in the pass whose logits it reads. Phases: analyze/structure/pass_phases.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.structure.kernel_sequence import KernelSequence
from kernelscope.analyze.structure.layer_runs import LayerGroup
from kernelscope.analyze.structure.pass_phases import PassFacts, PassPhases, first_projection_rows
from kernelscope.analyze.structure.step_inference import step_numbers

_PROJECTIONS = ("aten::mm", "aten::addmm", "aten::linear", "aten::_scaled_mm")
BY_LOOKUP, BY_HOST_PAUSE, BY_DEVICE_IDLE = "embedding lookup", "longest host pause", "longest device idle gap"


@dataclass
class Pass:
    """Positions lo..hi of the kernel sequence, and the layer groups inside."""

    lo: int
    hi: int
    groups: list[LayerGroup]
    training: bool = False  # the forward part of a training step (no LM head or token choice after its layers)
    by_attention: bool = False  # its layers were placed by its attention kernels, not by a repeat

    @property
    def layers(self) -> int:
        return sum(g.layers for g in self.groups)


def passes_from_groups(seq: KernelSequence, groups: tuple[LayerGroup, ...]) -> tuple[list[Pass], dict[str, int]]:
    """One pass per group of layers, and how many boundaries each kind of evidence placed."""
    if not groups:
        return [], {}
    starts = [0]
    how: dict[str, int] = {}
    for before, after in zip(groups[:-1], groups[1:], strict=True):
        at, by = _boundary(seq, before.end, after.start)
        starts.append(at)
        how[by] = how.get(by, 0) + 1
    bounds = [*starts, len(seq)]
    return [Pass(a, b, [g]) for a, b, g in zip(bounds[:-1], bounds[1:], groups, strict=True)], how


def _boundary(seq: KernelSequence, lo: int, hi: int) -> tuple[int, str]:
    """Where the next pass starts among positions lo..hi (hi: the first kernel of its layers)."""
    lookups = np.flatnonzero(seq.embedding[lo:hi])
    if lookups.size:
        return lo + int(lookups[-1]), BY_LOOKUP
    if hi - lo <= 1:
        return hi, BY_HOST_PAUSE
    if (seq.launch[lo:hi + 1] >= 0).all():
        return lo + 1 + int(np.argmax(seq.pause[lo + 1:hi + 1])), BY_HOST_PAUSE
    idle = seq.start[lo + 1:hi + 1] - np.maximum.accumulate(seq.end[lo:hi])
    return lo + 1 + int(np.argmax(idle)), BY_DEVICE_IDLE


def pass_facts(seq: KernelSequence, ops: pl.DataFrame, passes: list[Pass], layer_of: np.ndarray) -> list[PassFacts]:
    """What each pass shows: its first projection's rows (in its first layer where layers were found), a signature
    of its layers' kernels (of all its kernels without layers) and its GEMM time."""
    dims = ops["input_dims"].cast(pl.String).to_list() if "input_dims" in ops.columns else []
    facts = []
    for p in passes:
        span = np.arange(p.lo, p.hi)
        inside = span[layer_of[p.lo:p.hi] >= 0]
        rows = None
        for i in (inside if inside.size else span).tolist():
            if seq.op[i] in _PROJECTIONS and 0 <= seq.op_row[i] < len(dims):
                rows = first_projection_rows(seq.op[i], dims[seq.op_row[i]])
                break
        units = tuple(seq.codes[r.start:r.start + r.period].tobytes() for g in p.groups for r in g.repeats)
        signature = hash(units) if units else hash(seq.codes[p.lo:p.hi].tobytes())
        other = ~seq.matrix[p.lo:p.hi]
        facts.append(PassFacts(rows=rows, signature=signature,
                               gemm_ns=int(seq.dur[p.lo:p.hi][~other].sum()),
                               threads=int(seq.threads[p.lo:p.hi][other].sum())))
    return facts


def pass_columns(seq: KernelSequence, passes: list[Pass], found: PassPhases, rows: int) -> tuple[pl.Series, pl.Series]:
    """Per kernel row: the phase and step of its pass (unknown / null outside every pass)."""
    steps = step_numbers(found.phases)
    phase = np.full(rows, ranges.UNKNOWN, dtype=object)
    step = np.full(rows, -1, dtype=np.int64)
    for p, ph, st in zip(passes, found.phases, steps, strict=True):
        phase[seq.order[p.lo:p.hi]] = ph
        step[seq.order[p.lo:p.hi]] = st
    step_series = pl.Series("step", step, dtype=pl.Int64)
    return (pl.Series("phase", phase.tolist(), dtype=pl.String),
            pl.select(pl.when(step_series >= 0).then(step_series)).to_series().alias("step"))
