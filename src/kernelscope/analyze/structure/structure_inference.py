"""Structure from the trace's regularities alone: forward passes, prefill and decode, decoder layers and their
parts, training steps — used only where no annotation, step marker, module frame or user range said better.

- Decoder layers (analyze/structure/layer_runs.py): inside a forward pass the kernel sequence is one unit of kernels repeated
  once per layer; the number of layers is the number of copies. Searched inside each marked step, or in the whole
  trace where nothing marks steps.
- Forward passes (analyze/structure/inferred_passes.py): where no step marker cut the trace, each group of layer repeats is
  one pass's layers.
- Prefill or decode (analyze/structure/pass_phases.py): from the shapes of each pass's first projection, else from which
  passes repeat one another and how long their GEMMs take.
- Parts of a layer (analyze/structure/layer_modules.py): by position in the unit, around its attention kernel.
- Training (analyze/structure/training_phases.py): forward, backward and optimizer phases; layers inside the forward part.
- Where the exact kernel names show no layer repeat that the passes agree on, the sequence is read again by
  signature (analyze/structure/kernel_runs.py: a compiler's kernel numbers dropped, runs of one kernel counted once); that
  reading is kept only where every pass gets as many layers and every layer holds an attention kernel.
Checks refuse to guess: no repeat, two periods that explain the same kernels equally well, passes whose layer
counts disagree, passes that all look alike: the level stays unknown and run.json `attribution.structure` says why.
Every kernel placed this way has `attribution_source` `inferred`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.attribution.python_frames import Launches
from kernelscope.analyze.structure.inferred_passes import (
    Pass,
    pass_columns,
    pass_facts,
    passes_from_groups,
)
from kernelscope.analyze.structure.kernel_runs import (
    every_layer_attends,
    positions_in_runs,
    runs_of,
    signatures,
    spread_runs,
)
from kernelscope.analyze.structure.kernel_sequence import KernelSequence, kernel_sequence
from kernelscope.analyze.structure.layer_modules import MOE, unit_parts
from kernelscope.analyze.structure.layer_runs import (
    LayerGroup,
    StretchLayers,
    find_layers,
    layer_check,
    layer_positions,
    layers_by_attention,
    passes_of_units,
    with_odd_layers,
)
from kernelscope.analyze.structure.pass_phases import pass_phases, phase_level
from kernelscope.analyze.structure.periods import Repeat
from kernelscope.analyze.structure.step_inference import step_numbers
from kernelscope.analyze.structure.training_phases import (
    TRAINING_PHASES,
    is_training,
    nullable,
    split_training,
)
from kernelscope.contracts.run_info import StepInfo, StructureLevel
from kernelscope.contracts.tables import CPU_OP

LAYER_PREFIX = "layers"
PRE_LAYERS, HEAD, AFTER_HEAD = "pre_layers", "head", "after_head"
MAX_KERNELS = 5_000_000  # beyond this a trace is not searched for repeats (memory and time)


@dataclass
class Inferred:
    """The kernels with what inference filled in, which kernels got which level, and the evidence."""

    kernels: pl.DataFrame
    phase_filled: np.ndarray
    layer_filled: np.ndarray
    levels: list[StructureLevel] = field(default_factory=list)
    steps: list[StepInfo] | None = None  # the steps, where inference made or renamed them
    layer_types: dict[int, str] = field(default_factory=dict)


def infer_structure(kernels: pl.DataFrame, ops: pl.DataFrame, launches: Launches, span: int) -> Inferred | None:
    """kernels and ops of one rank after attribution from its own markers; None for CPU-only runs."""
    n = kernels.height
    if n == 0 or n > MAX_KERNELS or (kernels["kind"] == CPU_OP).any():
        return None
    seq = kernel_sequence(kernels)
    out = Inferred(kernels=kernels, phase_filled=np.zeros(n, dtype=bool), layer_filled=np.zeros(n, dtype=bool))
    regions: list[tuple[int, int]] | None = None
    training = is_training(ops, kernels["name"])
    if training:
        regions = _training(out, ops, launches, span, seq)
        training = regions is not None
    if not training and kernels["step"].is_not_null().any():
        phase = kernels["phase"].to_numpy()[seq.order]
        regions = _stretches(phase, kernels["step"].fill_null(-1).to_numpy()[seq.order])
    if kernels["layer"].is_not_null().any():
        return out  # layers (and passes, where markers gave them) come from the trace's own ranges
    before = replace(out, phase_filled=out.phase_filled.copy(), layer_filled=out.layer_filled.copy(),
                     levels=list(out.levels), layer_types=dict(out.layer_types))
    _layers_and_passes(out, seq, ops, regions, training)
    layers = next(x for x in out.levels if x.level == "layers")
    if layers.status == "unknown" and layers.code in _READ_AGAIN:
        return _by_signature(before, seq, ops, regions, training) or out
    return out


_READ_AGAIN = ("no_repeat", "counts_differ")  # (two rival periods are left so: the exact names showed both)


def _by_signature(out: Inferred, seq: KernelSequence, ops: pl.DataFrame, regions: list[tuple[int, int]] | None,
                  training: bool) -> Inferred | None:
    """The layers read again from the kernels' signatures, each run of one counted once (analyze/structure/kernel_runs.py);
    None where that reading is no other or finds no layers either (the exact reading's reason stands)."""
    phase = out.kernels["phase"].to_numpy()[seq.order]
    step = out.kernels["step"].fill_null(-1).to_numpy()[seq.order]
    breaks = np.zeros(len(seq), dtype=bool)
    breaks[1:] = (phase[1:] != phase[:-1]) | (step[1:] != step[:-1])
    signature = signatures(seq, out.kernels["name"])
    if signature.max(initial=0) == seq.codes.max(initial=0) and (signature[1:] != signature[:-1]).all():
        return None  # every name its own signature, and no run: the same reading again
    short, run = runs_of(seq, signature, breaks)
    _layers_and_passes(out, short, ops, positions_in_runs(regions, run), training, by_signature=True)
    layers = next(x for x in out.levels if x.level == "layers")
    if layers.status != "inferred" or layers.values["other_passes"] or layers.values["passes_without_repeat"]:
        return None  # the coarser reading must explain every pass, and alike
    out.kernels, out.phase_filled, out.layer_filled = spread_runs(out.kernels, out.phase_filled, out.layer_filled,
                                                                  seq, short, run)
    if not every_layer_attends(out.kernels, out.layer_filled, seq):
        return None  # a repeat of a few kernels that happen to recur, no decoder layer
    layers.values["signatures"] = 1
    layers.evidence = f"{layers.evidence}; {_SIGNATURES}"
    return out


_SIGNATURES = ("read by signature: generated kernels' numbers dropped, a kernel launched several times in a row "
               "counted once")


def _stretches(phase: np.ndarray, step: np.ndarray) -> list[tuple[int, int]]:
    """Positions of each step, back to back (same phase and step)."""
    change = np.flatnonzero((phase[1:] != phase[:-1]) | (step[1:] != step[:-1])) + 1
    bounds = [0, *change.tolist(), len(step)]
    return [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if step[a] >= 0]


def _training(out: Inferred, ops: pl.DataFrame, launches: Launches, span: int,
              seq: KernelSequence) -> list[tuple[int, int]] | None:
    """Forward, backward and optimizer phases; the forward parts are where layers are searched. None where the
    split cannot be made (the trace is then read as any other)."""
    kernels = out.kernels
    marked = kernels["step"] if kernels["step"].is_not_null().any() else None
    split = split_training(kernels, ops, launches, span, seq.order, marked)
    if split is None:
        if ops.filter(pl.col("cat") == "cpu_op").height:
            level = StructureLevel(level="training", status="unknown", code="no_backward_kernels",
                                   reason="autograd's backward ops ran, but no kernel was launched from them")
        else:
            level = StructureLevel(
                level="training", status="unknown", code="no_optimizer",
                reason="backward kernels by name, but no CPU op and no optimizer kernel to tell the steps' parts by")
        out.levels.append(level)
        return None
    fill = (kernels["phase"] == ranges.UNKNOWN).to_numpy() & split.phase.is_not_null().to_numpy()
    phase = pl.select(pl.when(pl.Series(fill)).then(split.phase).otherwise(kernels["phase"])).to_series()
    step = pl.select(pl.when(pl.Series(fill)).then(split.step).otherwise(kernels["step"])).to_series()
    out.kernels = kernels.with_columns(phase.alias("phase"), step.alias("step"))
    out.phase_filled |= fill
    out.levels.append(StructureLevel(level="training", status="inferred", count=split.steps, evidence=split.evidence,
                                     code=split.code, values={"steps": split.steps}))
    out.steps = [StepInfo(phase=ph, step=s, label="inferred") for s in range(split.steps) for ph in TRAINING_PHASES]
    forward = out.kernels["phase"].to_numpy()[seq.order] == TRAINING_PHASES[0]
    steps = out.kernels["step"].fill_null(-1).to_numpy()[seq.order]
    return [(a, b) for a, b in _stretches(np.where(forward, "f", "o"), steps) if forward[a]]


def _layers_and_passes(out: Inferred, seq: KernelSequence, ops: pl.DataFrame,
                       regions: list[tuple[int, int]] | None, training: bool, by_signature: bool = False) -> None:
    """by_signature: seq is read by signature (analyze/structure/kernel_runs.py), mostly generated code launched from one
    function, whose host pauses say nothing of layers: the copies start at their input norm instead."""
    cache: dict[bytes, StretchLayers] = {}
    pause = seq.pause if (seq.launch >= 0).all() and len(seq) and not by_signature else None

    def layers_of(lo: int, hi: int) -> StretchLayers:
        key = seq.codes[lo:hi].tobytes() + seq.matrix[lo:hi].tobytes()
        if key not in cache:
            cache[key] = find_layers(seq.codes[lo:hi], seq.matrix[lo:hi], seq.attention[lo:hi], seq.embedding[lo:hi],
                                     None if pause is None else pause[lo:hi], seq.norm[lo:hi] if by_signature else None)
        return cache[key]

    how: dict[str, int] = {}
    if regions is None:
        found = layers_of(0, len(seq))
        passes, how = passes_from_groups(seq, passes_of_units(found.groups, seq.attention))
        rivals = [found.rival] if found.rival else []
    else:
        passes, rivals = [], []
        for lo, hi in regions:
            found = layers_of(lo, hi)
            rivals += [found.rival] if found.rival else []
            passes.append(Pass(lo, hi, [LayerGroup(tuple(Repeat(r.start + lo, r.period, r.copies) for r in g.repeats))
                                        for g in found.groups], training))
    for p in passes:
        p.groups = [with_odd_layers(g, seq.codes, seq.attention, seq.embedding, p.lo if k == 0 else p.groups[k - 1].end,
                                    p.hi if k == len(p.groups) - 1 else p.groups[k + 1].start)
                    for k, g in enumerate(p.groups)]
    _by_attention(seq, passes)
    layer_of = _layers(out, seq, passes, rivals)
    if regions is None:
        _inferred_passes(out, seq, ops, passes, how, layer_of)
    elif not out.kernels["phase"].is_in([ranges.PREFILL, ranges.DECODE, ranges.MIXED, *TRAINING_PHASES]).any():
        _phases_of_marked(out, seq, ops, passes, layer_of)


# --------------------------------------------------------------------------------------------- layers


def _by_attention(seq: KernelSequence, passes: list[Pass]) -> None:
    """Passes without a repeat get one layer per attention kernel, where they hold as many as the other passes
    have layers and those layers agree on the matrix multiplies after their attention kernel
    (analyze/structure/layer_runs.layers_by_attention)."""
    counts = Counter(p.layers for p in passes if p.layers)
    if not counts or all(p.layers for p in passes):
        return
    layers = counts.most_common(1)[0][0]
    after = set()
    for p in passes:
        for g in p.groups:
            for r in g.repeats:
                core = np.flatnonzero(seq.attention[r.start:r.start + r.period])
                if core.size:
                    tail = slice(r.start + int(core[-1]) + 1, r.start + r.period)
                    after.add(int((seq.matrix[tail] & ~seq.attention[tail] & ~seq.same_op[tail]).sum()))
    if len(after) != 1:
        return
    per_layer = after.pop()
    for p in passes:
        if not p.layers:
            group = layers_by_attention(seq.codes, seq.attention, seq.matrix, seq.same_op, p.lo, p.hi, layers,
                                        per_layer)
            if group is not None:
                p.groups, p.by_attention = [group], True


def _layers(out: Inferred, seq: KernelSequence, passes: list[Pass], rivals: list[int]) -> np.ndarray:
    """Fills layer and module where the passes agree on the layer count; returns each position's layer (-1: none)."""
    n = len(seq)
    layer_of = np.full(n, -1, dtype=np.int64)
    offset_of = np.full(n, -1, dtype=np.int64)
    unit_of = np.full(n, -1, dtype=np.int64)
    units: dict[bytes, tuple[int, int]] = {}  # unit kernels → (unit id, its first position)
    for p in passes:
        first_layer = 0
        for g in p.groups:
            layer, offset, which = layer_positions(LayerGroup(tuple(Repeat(r.start - g.start, r.period, r.copies)
                                                                    for r in g.repeats)), g.end - g.start)
            inside = np.flatnonzero(layer >= 0)
            layer_of[g.start + inside] = first_layer + layer[inside]
            offset_of[g.start + inside] = offset[inside]
            for k, r in enumerate(g.repeats):
                unit = units.setdefault(seq.codes[r.start:r.end][:r.period].tobytes(), (len(units), r.start))[0]
                unit_of[g.start + inside[which[inside] == k]] = unit
            first_layer += g.layers
    counts = [p.layers for p in passes if p.layers]
    unknown = layer_check(counts, rivals)
    if unknown is not None:
        out.levels.append(unknown)
        return np.full(n, -1, dtype=np.int64)
    layers, agreeing = Counter(counts).most_common(1)[0]
    keep = np.zeros(n, dtype=bool)
    for p in passes:
        keep[p.lo:p.hi] = p.layers == layers
    keep &= layer_of >= 0
    layer_of[~keep] = -1
    periods = {u: int(offset_of[unit_of == u].max()) + 1 for u, _ in units.values()}
    parts = {u: unit_parts(seq.category[s:s + periods[u]], seq.op[s:s + periods[u]],
                           seq.same_op[s:s + periods[u]].tolist(), seq.norm[s:s + periods[u]].tolist())
             for u, s in units.values()}
    _layer_columns(out, seq, passes, layer_of, unit_of, offset_of, parts)
    odd = len(counts) - agreeing
    bare = sum(1 for p in passes if not p.layers and seq.matrix[p.lo:p.hi].any())
    anchored = sum(1 for p in passes if p.by_attention and p.layers == layers)
    sizes = " or ".join(map(str, sorted(set(periods.values()))))
    out.levels.append(StructureLevel(
        level="layers", status="inferred", count=int(layers), code="repeats",
        values={"layers": int(layers), "passes": agreeing, "unit_kernels": sizes, "other_passes": odd,
                "passes_without_repeat": bare, "passes_by_attention": anchored},
        evidence=f"a unit of {sizes} kernels repeated {layers} times in each of {agreeing} pass(es)"
                 + (f"; {odd} pass(es) with another count left without layers" if odd else "")
                 + (f"; {bare} pass(es) without a repeated unit left without layers" if bare else "")
                 + (f"; in {anchored} pass(es) without a repeat, one layer per attention kernel" if anchored else "")))
    named = sorted(dict.fromkeys(x for p in parts.values() for x in p if x))
    out.levels.append(StructureLevel(level="modules", status="inferred", count=len(named), code="positions",
                                     values={"parts": ", ".join(named)},
                                     evidence="parts of each layer by position in its unit, around its attention "
                                              "kernel: " + ", ".join(named)) if named else
                      StructureLevel(level="modules", status="unknown", code="no_attention_kernel",
                                     reason="the layer's unit holds no attention kernel to place its parts by"))
    kinds = {u: "MoE" if MOE in p else "dense" for u, p in parts.items()}
    if len(set(kinds.values())) > 1:
        for pos in np.flatnonzero(layer_of >= 0).tolist():
            out.layer_types.setdefault(int(layer_of[pos]), f"inferred layer ({kinds[int(unit_of[pos])]})")
    return layer_of


def _layer_columns(out: Inferred, seq: KernelSequence, passes: list[Pass], layer_of: np.ndarray,
                   unit_of: np.ndarray, offset_of: np.ndarray, parts: dict[int, list[str | None]]) -> None:
    """layer and module of the kernels in layers (`layers.<i>.<part>`), and module of the rest of a pass with
    layers: `pre_layers` before them, `head` from their end through the last matrix kernel (final norm and LM head),
    `after_head` after it (logits processing, token choice)."""
    rows = out.kernels.height
    positions = np.flatnonzero(layer_of >= 0)
    names = np.full(len(seq), None, dtype=object)
    for pos in positions.tolist():
        part = parts[int(unit_of[pos])][int(offset_of[pos])]
        names[pos] = f"{LAYER_PREFIX}.{layer_of[pos]}" + (f".{part}" if part else "")
    for p in passes:
        inside = np.flatnonzero(layer_of[p.lo:p.hi] >= 0) + p.lo
        if inside.size == 0 or p.training:
            continue
        names[p.lo:inside[0]] = PRE_LAYERS
        matrix = np.flatnonzero(seq.matrix[inside[-1] + 1:p.hi]) + inside[-1] + 1
        head_end = int(matrix[-1]) + 1 if matrix.size else inside[-1] + 1
        names[inside[-1] + 1:head_end] = HEAD
        names[head_end:p.hi] = AFTER_HEAD
    layer_rows = np.full(rows, -1, dtype=np.int64)
    layer_rows[seq.order[positions]] = layer_of[positions]
    module_rows = np.full(rows, None, dtype=object)
    module_rows[seq.order] = names
    fill = pl.Series(pl.Series(module_rows.tolist(), dtype=pl.String).is_not_null().to_numpy()
                     & out.kernels["module"].is_null().to_numpy())
    module = pl.select(pl.when(fill).then(pl.Series(module_rows.tolist(), dtype=pl.String))
                       .otherwise(out.kernels["module"])).to_series()
    layer = pl.select(pl.when(fill).then(nullable(layer_rows, "layer")).otherwise(out.kernels["layer"])).to_series()
    out.kernels = out.kernels.with_columns(module.alias("module"), layer.alias("layer"))
    out.layer_filled |= fill.to_numpy()


# --------------------------------------------------------------------------------------------- passes and phases


def _inferred_passes(out: Inferred, seq: KernelSequence, ops: pl.DataFrame, passes: list[Pass],
                     how: dict[str, int], layer_of: np.ndarray) -> None:
    if not passes:
        out.levels.append(StructureLevel(level="passes", status="unknown", code="no_repeat",
                                         reason="no step marker, and no repeated layers to tell forward passes by"))
        return
    if not (layer_of >= 0).any():  # the layers the passes were told by did not pass their check
        out.levels.append(StructureLevel(level="passes", status="unknown", code="layers_unknown",
                                         reason="no step marker, and the repeated layers that would tell forward "
                                                "passes apart are themselves unknown"))
        return
    found = pass_phases(pass_facts(seq, ops, passes, layer_of))
    phase, step = pass_columns(seq, passes, found, out.kernels.height)
    fill = (out.kernels["phase"] == ranges.UNKNOWN).to_numpy() & out.kernels["step"].is_null().to_numpy()
    mask = pl.Series(fill)
    out.kernels = out.kernels.with_columns(
        pl.select(pl.when(mask).then(phase).otherwise(out.kernels["phase"])).to_series().alias("phase"),
        pl.select(pl.when(mask).then(step).otherwise(out.kernels["step"])).to_series().alias("step"))
    out.phase_filled |= fill
    placed = ", ".join(f"{k} by {by}" for by, k in sorted(how.items())) or "none"
    out.levels.append(StructureLevel(level="passes", status="inferred", count=len(passes), code="layer_groups",
                                     values={"passes": len(passes), **{k.replace(" ", "_"): v for k, v in how.items()}},
                                     evidence=f"one group of repeated layers per forward pass; boundaries: {placed}"))
    out.levels.append(phase_level(found))
    out.steps = [StepInfo(phase=ph, step=s, label="inferred forward pass", tokens=t)
                 for ph, s, t in zip(found.phases, step_numbers(found.phases), found.tokens, strict=True)]


def _phases_of_marked(out: Inferred, seq: KernelSequence, ops: pl.DataFrame, passes: list[Pass],
                      layer_of: np.ndarray) -> None:
    """Marked steps whose markers name no phase: prefill or decode as their passes show (steps renumbered)."""
    found = pass_phases(pass_facts(seq, ops, passes, layer_of))
    out.levels.append(phase_level(found))
    if found.evidence is None:
        return
    phase, step = pass_columns(seq, passes, found, out.kernels.height)
    fill = pl.Series(phase != ranges.UNKNOWN)
    out.kernels = out.kernels.with_columns(
        pl.select(pl.when(fill).then(phase).otherwise(out.kernels["phase"])).to_series().alias("phase"),
        pl.select(pl.when(fill).then(step).otherwise(out.kernels["step"])).to_series().alias("step"))
    out.phase_filled |= fill.to_numpy()
    out.steps = [StepInfo(phase=ph, step=s, label="marked step", tokens=t)
                 for ph, s, t in zip(found.phases, step_numbers(found.phases), found.tokens, strict=True)]
