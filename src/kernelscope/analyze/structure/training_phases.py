"""Forward, backward and optimizer: the parts of a training step, from what launched each kernel.

A kernel is backward work when the outermost CPU op open at its launch is one of autograd's (`autograd::engine::
evaluate_function: MmBackward0`, or an op whose name ends in `Backward<N>`), optimizer work when an optimizer's
range (`Optimizer.step#AdamW.step`, torch.optim pushes it) or a fused/foreach optimizer op (`aten::_fused_adamw_`,
`aten::_foreach_…`) was open at launch. Where no CPU op was recorded (Nsight Systems exports without NVTX), the
kernel names decide instead: names of backward kernels (`…_backward_…`, `…Backward…`, `_bwd`, `dgrad`/`wgrad`) and
of optimizer kernels (`multi_tensor_apply_kernel`, fused Adam/SGD).

A step runs forward, then backward, then the optimizer: within a step every kernel before its first backward
kernel is forward (the loss included), every kernel from there to its first optimizer kernel is backward, the rest
optimizer. Without step markers, a new step starts where forward work follows optimizer (or backward) work. From
kernel names alone the split is made only where optimizer kernels close the steps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import polars as pl

from kernelscope.analyze.attribution.python_frames import Launches
from kernelscope.analyze.intervals import NestedIntervals

FORWARD, BACKWARD, OPTIMIZER = "forward", "backward", "optimizer"
TRAINING_PHASES = (FORWARD, BACKWARD, OPTIMIZER)
BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")
OPTIMIZER_RANGE = re.compile(r"^Optimizer\.step#")
OPTIMIZER_OP = re.compile(r"^aten::(?:_fused_(?:adam|adamw|sgd|adagrad)_|_foreach_)")
BACKWARD_KERNEL = re.compile(r"(?i:backward)|_bwd|bwd_|dgrad|wgrad")
OPTIMIZER_KERNEL = re.compile(r"multi_tensor_apply_kernel|(?i:fused_adam|fused_sgd|adamw?_kernel)")

_F, _B, _O = 0, 1, 2


@dataclass(frozen=True)
class TrainingSplit:
    """Per kernel (in the kernels table's order): its part of the step, and the step it belongs to."""

    phase: pl.Series
    step: pl.Series
    steps: int
    evidence: str
    code: str  # "ops": from the ops that launched each kernel; "names": from kernel names


def is_training(ops: pl.DataFrame, names: pl.Series) -> bool:
    """Backward work is present: autograd's ops, or (without CPU ops) backward kernels."""
    cpu = ops.filter(pl.col("cat") == "cpu_op")["name"]
    if cpu.len():
        return bool(cpu.str.contains(BACKWARD_OP.pattern).any())
    return bool(names.str.contains(BACKWARD_KERNEL.pattern).any())


def split_training(kernels: pl.DataFrame, ops: pl.DataFrame, launches: Launches, span: int,
                   order: np.ndarray, marked_step: pl.Series | None) -> TrainingSplit | None:
    """kernels: the rank's kernels; order: their launch order (indices); marked_step: each kernel's step where step
    markers gave one (null elsewhere). None when no backward work is found."""
    from_ops = ops.filter(pl.col("cat") == "cpu_op").height > 0
    kind = _part_of_each(kernels, ops, launches, span, from_ops)  # per kernel row
    if not (kind == _B).any() or (not from_ops and not (kind == _O).any()):
        # Names alone miss backward kernels named otherwise (a weight-gradient GEMM): only an optimizer kernel
        # closing each step makes the split trustworthy.
        return None
    ordered = kind[order]
    marks = marked_step.to_numpy()[order] if marked_step is not None else None
    step = np.full(len(order), -1, dtype=np.int64)
    part = np.full(len(order), _F, dtype=np.int8)
    if marks is not None and not np.isnan(marks.astype(float)).all():
        keys = _spread(np.where(np.isnan(marks.astype(float)), -1, marks).astype(np.int64))
        bounds = np.flatnonzero(np.diff(keys)) + 1
        segments = np.split(np.arange(len(order)), bounds)
        number = 0
        for segment in segments:
            if keys[segment[0]] < 0:
                continue
            part[segment] = _ordered_parts(ordered[segment])
            step[segment] = number
            number += 1
        steps = number
        evidence = "step markers; forward, backward and optimizer from the ops that launched each kernel" \
            if from_ops else "step markers; forward, backward and optimizer from kernel names"
    else:
        starts = _step_starts(ordered)
        bounds = [0, *starts, len(order)]
        for number, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True)):
            part[a:b] = _ordered_parts(ordered[a:b])
            step[a:b] = number
        steps = len(bounds) - 1
        evidence = ("forward, backward and optimizer from the ops that launched each kernel" if from_ops
                    else "forward, backward and optimizer from kernel names") + "; a step ends where forward work resumes"
    names = np.array(TRAINING_PHASES, dtype=object)
    labels = names[part]
    labels[step < 0] = None  # outside every marked step: left as it was
    phase = np.empty(len(order), dtype=object)
    phase[order] = labels
    out_step = np.full(len(order), -1, dtype=np.int64)
    out_step[order] = step
    return TrainingSplit(phase=pl.Series("phase", phase.tolist(), dtype=pl.String), step=nullable(out_step, "step"),
                         steps=int(steps), evidence=evidence, code="ops" if from_ops else "names")


def nullable(values: np.ndarray, name: str) -> pl.Series:
    """An Int64 series with null where the value is negative."""
    series = pl.Series(name, values, dtype=pl.Int64)
    return pl.select(pl.when(series >= 0).then(series)).to_series().alias(name)


def _step_starts(kind: np.ndarray) -> list[int]:
    """Where a new step begins: the first forward kernel after optimizer work (or, in steps without an optimizer,
    after backward work) once the step has run backward."""
    starts, seen_backward, seen_optimizer = [], False, False
    optimizer = bool((kind == _O).any())
    for i, k in enumerate(kind.tolist()):
        if k == _F and seen_backward and (seen_optimizer or not optimizer):
            starts.append(i)
            seen_backward = seen_optimizer = False
        elif k == _B:
            seen_backward = True
        elif k == _O and seen_backward:
            seen_optimizer = True
    return starts


def _spread(keys: np.ndarray) -> np.ndarray:
    """Marked steps in launch order, each reaching until the next: a step marker is a range on the main thread, and
    autograd launches the backward kernels from a thread of its own."""
    marked = np.flatnonzero(keys >= 0)
    if marked.size == 0:
        return keys
    inside = np.arange(marked[0], marked[-1] + 1)
    filled = keys.copy()
    filled[inside] = keys[marked[np.searchsorted(marked, inside, side="right") - 1]]
    return filled


def _ordered_parts(kind: np.ndarray) -> np.ndarray:
    """Forward up to the first backward kernel, backward up to the first optimizer kernel after it, then optimizer."""
    part = np.full(len(kind), _F, dtype=np.int8)
    backward = np.flatnonzero(kind == _B)
    if backward.size == 0:
        return part
    first_b = backward[0]
    part[first_b:] = _B
    optimizer = np.flatnonzero(kind[first_b:] == _O)
    if optimizer.size:
        part[first_b + optimizer[0]:] = _O
    return part


def _part_of_each(kernels: pl.DataFrame, ops: pl.DataFrame, launches: Launches, span: int,
                  from_ops: bool) -> np.ndarray:
    """Per kernel: _B, _O or _F by what launched it (or by its name, without CPU ops)."""
    if not from_ops:
        names = kernels["name"]
        return np.where(names.str.contains(OPTIMIZER_KERNEL.pattern).to_numpy(), _O,
                        np.where(names.str.contains(BACKWARD_KERNEL.pattern).to_numpy(), _B, _F)).astype(np.int8)
    top = kernels["top_op"].fill_null("")
    backward = top.str.contains(BACKWARD_OP.pattern).to_numpy()
    optimizer = top.str.contains(OPTIMIZER_OP.pattern).to_numpy() | _inside(
        ops.filter(pl.col("name").str.contains(OPTIMIZER_RANGE.pattern)), launches, span)
    return np.where(optimizer, _O, np.where(backward, _B, _F)).astype(np.int8)


def _inside(ranges: pl.DataFrame, launches: Launches, span: int) -> np.ndarray:
    if ranges.height == 0 or "thread" not in ranges.columns:
        return np.zeros(len(launches.thread), dtype=bool)
    index = NestedIntervals.build(ranges["thread"].fill_null(-1).to_numpy(), ranges["start_ns"].to_numpy(),
                                  np.maximum(ranges["dur_ns"].to_numpy(), 1), span)
    return index.innermost(launches.thread, launches.time) >= 0
