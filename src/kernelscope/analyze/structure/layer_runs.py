"""Decoder layers inside a stretch of kernels: the repeats of its kernel sequence (analyze/structure/periods.py) whose unit
does matrix work (a GEMM or an attention kernel), read as one layer per copy.

The best-covering primitive period gives the main repeat (the decoder's layers); the stretches it leaves are
searched again, so that layers of another kind (the dense layers before a model's MoE layers; a prefill pass whose
layers launch other GEMM kernels than the decode passes') are found too, when they cover at least half of their
stretch. Repeats that follow each other closely are the layers of one forward pass (a group). layer_check says why
the passes' layer counts leave the layers unknown, where they do.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from kernelscope.analyze.structure.periods import (
    MIN_PERIOD,
    PeriodScore,
    Repeat,
    best_primitive,
    scored_periods,
)
from kernelscope.contracts.run_info import StructureLevel

LAYER_AGREEMENT = 0.9  # share of the passes with layers that must show the same number of them
MIN_SHARE_OF_STRETCH = 0.5  # a further repeat must cover this share of the stretch it was found in
MAX_DEPTH = 4


@dataclass(frozen=True)
class LayerGroup:
    """The layer repeats of one forward pass, in order: positions relative to the stretch searched."""

    repeats: tuple[Repeat, ...]

    @property
    def start(self) -> int:
        return self.repeats[0].start

    @property
    def end(self) -> int:
        return self.repeats[-1].end

    @property
    def layers(self) -> int:
        return sum(r.copies for r in self.repeats)


@dataclass(frozen=True)
class StretchLayers:
    """What a stretch holds: its layer groups, and the runner-up period where one competes with the best."""

    groups: tuple[LayerGroup, ...]
    rival: int | None = None  # a different period whose repeats explain the same kernels almost as well


def find_layers(codes: np.ndarray, matrix: np.ndarray, attention: np.ndarray, lookup: np.ndarray,
                pause: np.ndarray | None = None, norm: np.ndarray | None = None) -> StretchLayers:
    """codes: kernel names as codes, in launch order; matrix: whether each kernel does matrix work; attention: whether
    it is an attention kernel; lookup: an embedding lookup (a forward pass starts there); pause: the host's time
    before each launch (None where launch calls are not recorded, or say nothing of layers); norm: a norm's kernel
    (given where the copies are to start at their input norm rather than at a pause)."""
    repeats, rival = _repeats(codes, matrix, attention, 0, len(codes), 0)
    if pause is not None:
        repeats = [_rotated(r, pause) for r in repeats]
    elif norm is not None:
        repeats = [_at_input_norm(r, codes, attention, norm) for r in repeats]
    groups = _grouped(sorted(repeats, key=lambda r: r.start), codes, attention, lookup)
    return StretchLayers(groups=tuple(groups), rival=rival)


_CLEAR_PAUSE = 1.2
_ROTATION = 3  # a repeat's unit may start up to this many kernels early (a residual add that matched by chance)


def _rotated(r: Repeat, pause: np.ndarray) -> Repeat:
    """A repeat may begin a few kernels before its layers do (the previous layer's residual add is the same kernel
    as its own last one). The copies are moved (by at most _ROTATION kernels, and within the kernels that follow the
    last copy) to start where the host paused longest before launching (returning from one layer's call into the
    next's), when that pause is clearly longer than at the first candidate start."""
    room = min(max(r.slack, _ROTATION), r.period - 1, len(pause) - r.end)
    if room <= 0:
        return r
    typical = [float(np.median(pause[r.start + shift:r.end + shift:r.period])) for shift in range(room + 1)]
    best = int(np.argmax(typical))
    if best == 0 or typical[best] < _CLEAR_PAUSE * typical[0]:
        return r
    return Repeat(r.start + best, r.period, r.copies, max(r.slack - best, 0))


def _at_input_norm(r: Repeat, codes: np.ndarray, attention: np.ndarray, norm: np.ndarray) -> Repeat:
    """The copies moved to start at the unit's input norm: the first norm kernel met walking back (round the unit)
    from its attention kernel; the last copy is given up where the kernels after the repeat do not complete it."""
    unit = slice(r.start, r.start + r.period)
    cores, norms = np.flatnonzero(attention[unit]), np.flatnonzero(norm[unit])
    if not cores.size or not norms.size:
        return r
    before = norms[norms < cores[0]]
    shift = int(before[-1] if before.size else norms[-1])
    if shift == 0:
        return r
    if _common_prefix(codes[r.end:], codes[unit]) >= shift:
        return Repeat(r.start + shift, r.period, r.copies)
    return Repeat(r.start + shift, r.period, r.copies - 1) if r.copies > 2 else r


def _repeats(codes: np.ndarray, matrix: np.ndarray, attention: np.ndarray, lo: int, hi: int,
             depth: int) -> tuple[list[Repeat], int | None]:
    """The best-covering repeats of layer-like units in lo..hi, then those of the stretches they leave. A unit does
    matrix work and does not hold layers itself (several attention kernels and, inside, a repeat of a unit with one:
    a whole forward pass of a compiled model, whose first and last layers are fused apart). Below the top level a
    repeat must cover half its stretch, unless its unit holds exactly one attention kernel."""
    if hi - lo < 2 * MIN_PERIOD or depth > MAX_DEPTH:
        return [], None
    window = codes[lo:hi]
    best, others = best_primitive(window)
    found: list[Repeat] = []
    for score in [best, *others] if best is not None else []:
        found = [Repeat(lo + r.start, r.period, r.copies) for r in score.repeats
                 if matrix[lo + r.start:lo + r.start + r.period].any()
                 and not _holds_layers(codes, attention, lo + r.start, r.period)]
        if found:
            best = score
            break
    if not found:
        return [], None
    first = found[0]
    layer_like = len(_clusters(attention, first.start, first.start + first.period)) == 1
    if depth > 0 and not layer_like and sum(r.covered for r in found) < MIN_SHARE_OF_STRETCH * (hi - lo):
        return [], None
    others = [o for o in others if o is not best]
    rival = _rival(best, others) if depth == 0 else None
    edges = [lo, *[x for r in found for x in (r.start, r.end)], hi]
    for a, b in zip(edges[0::2], edges[1::2], strict=True):
        more, _ = _repeats(codes, matrix, attention, a, b, depth + 1)
        found += more
    return found, rival


def _holds_layers(codes: np.ndarray, attention: np.ndarray, start: int, period: int) -> bool:
    """Several attention kernels in the unit, and inside it a repeat of a unit with exactly one."""
    if len(_clusters(attention, start, start + period)) < 2:
        return False
    unit = codes[start:start + period]
    for score in scored_periods(unit, max_period=period // 2):
        inner = score.repeats[0]
        if len(_clusters(attention, start + inner.start, start + inner.start + inner.period)) == 1:
            return True
    return False


def _rival(best: PeriodScore, others: list[PeriodScore]) -> int | None:
    """A primitive period that is no multiple or divisor of the best, covers nearly as many kernels and mostly the
    same ones: two readings of one sequence, and nothing to choose between them."""
    for other in others:
        if other.covered < 0.9 * best.covered:
            break
        shared = _shared(best.repeats, other.repeats)
        if other.period % best.period and best.period % other.period and shared >= 0.5 * other.covered:
            return int(other.period)
    return None


def _shared(a: tuple[Repeat, ...], b: tuple[Repeat, ...]) -> int:
    """Kernels covered by both sets of repeats."""
    size = max(r.end for r in (*a, *b))
    mask = np.zeros(size + 1, dtype=np.int64)
    for r in a:
        mask[r.start] += 1
        mask[r.end] -= 1
    covered = np.cumsum(mask)[:size] > 0
    return int(sum(covered[r.start:r.end].sum() for r in b))


def _grouped(repeats: list[Repeat], codes: np.ndarray, attention: np.ndarray, lookup: np.ndarray) -> list[LayerGroup]:
    """Consecutive repeats belong to one pass, unless an embedding lookup lies between them, when an attention kernel
    lies between them (a layer of another kind sits there, and becomes a layer of its own), or when their units
    differ, neither holds several attention kernels (a whole pass), and only a few kernels lie between them (dense
    layers, then MoE layers). Repeats of one unit with other work between them are two passes."""
    groups: list[list[Repeat]] = []
    for r in repeats:
        if groups and not lookup[groups[-1][-1].end:r.start].any():
            last = groups[-1][-1]
            between = _between_layers(last, r, codes, attention)
            same_unit = last.period == r.period and np.array_equal(codes[last.start:last.start + last.period],
                                                                   codes[r.start:r.start + r.period])
            if between is not None:
                groups[-1] += [*between, r]
                continue
            single = all(len(_clusters(attention, x.start, x.start + x.period)) <= 1 for x in (last, r))
            if not same_unit and single and r.start - last.end <= max(2, min(r.period, last.period) // 2):
                groups[-1].append(r)
                continue
        groups.append([r])
    return [LayerGroup(tuple(g)) for g in groups]


def _between_layers(a: Repeat, b: Repeat, codes: np.ndarray, attention: np.ndarray) -> list[Repeat] | None:
    """The layers between two repeats, one per attention kernel there, each from an occurrence of b's first kernels
    (None: no attention kernel between them, or a layer that cannot be bounded)."""
    cores = _clusters(attention, a.end, b.start)
    if not cores:
        return None
    unit = codes[b.start:b.start + b.period]
    starts = [a.end]
    for (_, prev_end), (c, _) in zip(cores[:-1], cores[1:], strict=True):
        at = _unit_start(codes, unit, prev_end, c)
        if at is None:
            return None
        starts.append(at)
    bounds = [*starts, b.start]
    return [Repeat(x, y - x, 1) for x, y in zip(bounds[:-1], bounds[1:], strict=True) if y > x]


def passes_of_units(groups: tuple[LayerGroup, ...], attention: np.ndarray) -> tuple[LayerGroup, ...]:
    """Where no marker cuts the trace into passes: a repeat whose unit holds several attention kernels and no repeat
    of a layer inside is a whole forward pass repeated (a compiled model whose layers all differ, its first and last
    fused with the embedding and the final norm): each copy is a group of its own."""
    out: list[LayerGroup] = []
    for g in groups:
        r = g.repeats[0]
        if len(g.repeats) == 1 and r.copies > 1 and len(_clusters(attention, r.start, r.start + r.period)) > 1:
            out += [LayerGroup((Repeat(r.start + c * r.period, r.period, 1),)) for c in range(r.copies)]
        else:
            out.append(g)
    return tuple(out)


def layer_positions(group: LayerGroup, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per position of the stretch (size kernels): the layer index within the group (-1 outside its layers), the
    position within the layer's unit, and which of the group's repeats it belongs to (-1 outside)."""
    layer = np.full(size, -1, dtype=np.int64)
    offset = np.full(size, -1, dtype=np.int64)
    which = np.full(size, -1, dtype=np.int64)
    first = 0
    for k, r in enumerate(group.repeats):
        span = np.arange(r.start, r.end)
        layer[span] = first + (span - r.start) // r.period
        offset[span] = (span - r.start) % r.period
        which[span] = k
        first += r.copies
    return layer, offset, which


def with_odd_layers(group: LayerGroup, codes: np.ndarray, attention: np.ndarray, lookup: np.ndarray, lo: int,
                    hi: int) -> LayerGroup:
    """The group read by its attention kernels: a unit holding several (layers of two kinds that alternate) becomes
    one layer per attention kernel, cut where the unit's first kernel recurs; a single layer of another kind just
    before or after the repeats (the dense layers ahead of a model's MoE layers; a compiled model's first and last
    layers, fused with the embedding and the final norm) is added for each attention kernel there, within the pass
    (lo..hi, not across an embedding lookup). Such a layer reaches from (or to) where the unit's first kernels recur,
    else as far as the unit reaches around its own attention kernel."""
    repeats: list[Repeat] = []
    for r in group.repeats:
        repeats += _split_by_attention(r, codes, attention)
    unit = codes[group.start:group.start + group.repeats[0].period]
    cores = _clusters(attention, group.start, group.start + len(unit))
    if not cores:
        return LayerGroup(tuple(repeats))
    before = cores[0][0] - group.start  # kernels of the unit before its attention kernel
    lookups = np.flatnonzero(lookup[lo:group.start])
    lo = lo + int(lookups[-1]) if lookups.size else lo
    begin = group.start
    # (each such layer holds one attention kernel: its start is searched after the attention kernel before it)
    earlier = _clusters(attention, lo, begin)
    for k in range(len(earlier) - 1, -1, -1):
        a, floor = earlier[k][0], earlier[k - 1][1] if k else lo
        at = _unit_start(codes, unit, floor, a)
        at = max(floor, a - before) if at is None else at
        if at >= begin:
            break
        repeats.insert(0, Repeat(at, begin - at, 1))
        begin = at
    lookups = np.flatnonzero(lookup[group.end:hi])
    hi = group.end + int(lookups[0]) if lookups.size else hi
    end = group.end
    later = _clusters(attention, end, hi)
    for k, (a, b) in enumerate(later):
        ceiling = later[k + 1][0] if k + 1 < len(later) else hi
        at = _unit_start(codes, unit, b, ceiling, last=False)
        at = min(ceiling, a - before + len(unit)) if at is None else at
        if at <= end:
            break
        repeats.append(Repeat(end, at - end, 1))
        end = at
    return LayerGroup(tuple(repeats))


_MIN_MATCH = 3


def _unit_start(codes: np.ndarray, unit: np.ndarray, lo: int, hi: int, last: bool = True) -> int | None:
    """Where a layer like the unit begins in lo..hi: the position whose kernels match the unit's first kernels (or
    those after its first few) the longest, at least _MIN_MATCH of them; the last such position (or the first)."""
    best, where = 0, None
    positions = range(hi - 1, lo - 1, -1) if last else range(lo, hi)
    for x in positions:
        for skip in range(min(_ROTATION, len(unit) - 1) + 1):
            length = _common_prefix(codes[x:hi], unit[skip:])
            if length > best:
                best, where = length, x
    return where if best >= _MIN_MATCH else None


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if differ.size else n


def _clusters(attention: np.ndarray, lo: int, hi: int) -> list[tuple[int, int]]:
    """Stretches of attention kernels in lo..hi (a few kernels apart count as one: a memset before the attention
    kernel, a split-KV combine after it), as (first, past last)."""
    positions = np.flatnonzero(attention[lo:hi]) + lo
    out: list[tuple[int, int]] = []
    for p in positions.tolist():
        if out and p - out[-1][1] <= 2:
            out[-1] = (out[-1][0], p + 1)
        else:
            out.append((p, p + 1))
    return out


def _split_by_attention(r: Repeat, codes: np.ndarray, attention: np.ndarray) -> list[Repeat]:
    cores = _clusters(attention, r.start, r.start + r.period)
    if len(cores) < 2:
        return [r]
    first = codes[r.start]
    cuts = [0]
    for (_, prev_end), (a, _) in zip(cores[:-1], cores[1:], strict=True):
        found = np.flatnonzero(codes[prev_end:a] == first)
        cuts.append((prev_end + int(found[-1]) if found.size else (prev_end + a) // 2) - r.start)
    cuts.append(r.period)
    return [Repeat(r.start + c * r.period + a, b - a, 1) for c in range(r.copies)
            for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def layers_by_attention(codes: np.ndarray, attention: np.ndarray, matrix: np.ndarray, same_op: np.ndarray,
                        lo: int, hi: int, count: int, per_layer: int) -> LayerGroup | None:
    """A pass without a repeat (a compiled model whose layers all launch different kernels) that holds as many
    attention kernels as the other passes have layers: one layer per attention kernel. After each attention kernel
    a layer runs `per_layer` matrix multiplies (its output projection and MLP, as many as the other passes' layers
    run there) and ends after the last of them; the first layer starts as far before its attention kernel as the
    second does. None where the pass does not fit that reading."""
    cores = _clusters(attention, lo, hi)
    if count < 2 or len(cores) != count or per_layer < 1:
        return None
    heads = np.flatnonzero(matrix[lo:hi] & ~attention[lo:hi] & ~same_op[lo:hi]) + lo

    def end_after(core_end: int, limit: int) -> int | None:
        following = heads[(heads >= core_end) & (heads < limit)]
        if len(following) < per_layer:
            return None
        op = int(following[per_layer - 1])
        while op + 1 < hi and same_op[op + 1]:  # a split-K GEMM's reduction
            op += 1
        return op + 1

    starts = [0]
    for (_, prev_end), (a, _) in zip(cores[:-1], cores[1:], strict=True):
        at = end_after(prev_end, a)
        if at is None:
            return None
        starts.append(at)
    starts[0] = max(lo, cores[0][0] - (cores[1][0] - starts[1]))
    end = end_after(cores[-1][1], hi) or hi
    bounds = [*starts, end]
    return LayerGroup(tuple(Repeat(a, b - a, 1) for a, b in zip(bounds[:-1], bounds[1:], strict=True)))


def layer_check(counts: list[int], rivals: list[int]) -> StructureLevel | None:
    """Why layers must stay unknown, or None."""
    if not counts:
        return StructureLevel(level="layers", status="unknown", code="no_repeat",
                              reason="no repeated kernel sequence with matrix work (GEMM or attention)")
    if rivals:
        return StructureLevel(level="layers", status="unknown", code="rival_periods", values={"period": int(rivals[0])},
                              reason=f"a unit of {rivals[0]} kernels repeats about as often over the same kernels as "
                                     "the one found: two readings, nothing to choose between them")
    tally = Counter(counts)
    _, agreeing = tally.most_common(1)[0]
    if agreeing < LAYER_AGREEMENT * len(counts):
        listed = ", ".join(f"{c} ({k} passes)" for c, k in sorted(tally.items(), key=lambda x: (-x[1], x[0])))
        return StructureLevel(level="layers", status="unknown", code="counts_differ", values={"counts": listed},
                              reason=f"the passes repeat their layer unit a different number of times: {listed}")
    return None
