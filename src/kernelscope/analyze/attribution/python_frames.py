"""Modules, layers and source lines from the Python side of a torch.profiler trace.

`with_modules=True` writes an `nn.Module: <Class>_<k>` frame around each module call (k numbers the instances of
a class in the order they first ran); `with_stack=True` writes a frame per Python call, `<file>(<line>):
<function>`. A kernel's module is the innermost module frame open on its launching thread at launch; its source
line is the innermost frame there in user or model code (data/source_frames.toml says what is not).

The trace holds classes, not attribute names, so module names are built from classes: a module repeated under
one parent gets its rank there (`Linear[2]`, the third Linear the parent called, by instance number), and the
decoder layers get their index as a name part of its own (`Qwen2Model.Qwen2DecoderLayer.3.Qwen2MLP.Linear[1]`),
so that layer numbers and modules within a layer read the same as on profiled runs. The layer class is the
outermost class that repeats under one parent; where several do (a vision tower and a decoder), the one with
the most instances. Layers of one class whose children differ (dense and MoE layers) are typed apart by the
children that tell them apart.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import polars as pl

from kernelscope.analyze.intervals import NestedIntervals, gather_rows
from kernelscope.load import knowledge

MODULE_FRAME_PREFIX = "nn.Module: "
_FRAME = re.compile(r"^(?P<file>.+?)\((?P<line>\d+)\): (?P<function>.*)$")


@dataclass(frozen=True)
class Launches:
    """Where kernels were launched: thread codes (-1: unknown) and times (ns) on one clock with the frames."""

    thread: np.ndarray
    time: np.ndarray


@dataclass(frozen=True)
class ModuleFrames:
    """Per kernel: module name and layer (null outside any module frame); the layer types found."""

    module: pl.Series
    layer: pl.Series
    layer_class: str | None = None
    layer_types: dict[int, str] = field(default_factory=dict)


def module_frames(frames: pl.DataFrame, launches: Launches, span: int) -> ModuleFrames | None:
    """frames: Python frames (name, thread, start_ns, dur_ns). None when the trace has no module frames."""
    mods = frames.filter(pl.col("name").str.starts_with(MODULE_FRAME_PREFIX))
    if mods.height == 0:
        return None
    index = NestedIntervals.build(mods["thread"].to_numpy(), mods["start_ns"].to_numpy(), mods["dur_ns"].to_numpy(),
                                  span)
    tree = _ModuleTree.build(mods, index)
    row = index.innermost(launches.thread, launches.time)
    names = pl.Series("module", tree.qualified, dtype=pl.String)
    layers = pl.Series("layer", tree.layer, dtype=pl.Int64)
    return ModuleFrames(module=gather_rows(names, row), layer=gather_rows(layers, row), layer_class=tree.layer_class,
                        layer_types=tree.layer_types())


def source_lines(frames: pl.DataFrame, launches: Launches, span: int) -> pl.Series | None:
    """Per kernel: `file:line function` of the innermost user or model frame at launch (null where none). None when
    the trace has no Python call frames."""
    calls = frames.filter(~pl.col("name").str.starts_with(MODULE_FRAME_PREFIX))
    if calls.height == 0:
        return None
    parts = calls["name"].str.extract_groups(_FRAME.pattern)
    calls = calls.with_columns(parts.struct.field("file"), parts.struct.field("line"), parts.struct.field("function"))
    skipped = [f for f in calls["file"].drop_nulls().unique().to_list() if _skipped(f)]
    user = calls.filter(pl.col("file").is_not_null() & ~pl.col("file").is_in(skipped))
    if user.height == 0:
        return pl.Series("source_line", [None] * len(launches.thread), dtype=pl.String)
    index = NestedIntervals.build(user["thread"].to_numpy(), user["start_ns"].to_numpy(), user["dur_ns"].to_numpy(),
                                  span)
    label = user.select(pl.format("{}:{} {}", "file", "line", "function").alias("source_line"))["source_line"]
    return gather_rows(label, index.innermost(launches.thread, launches.time))


def inside_function(frames: pl.DataFrame, function: str, launches: Launches, span: int) -> np.ndarray:
    """Per kernel: whether a frame of a function of this name (any file) is open on its thread at launch."""
    calls = frames.filter(pl.col("name").str.ends_with(f"): {function}"))
    if calls.height == 0:
        return np.zeros(len(launches.thread), dtype=bool)
    index = NestedIntervals.build(calls["thread"].to_numpy(), calls["start_ns"].to_numpy(), calls["dur_ns"].to_numpy(),
                                  span)
    return index.innermost(launches.thread, launches.time) >= 0


@cache
def _skipped(file: str) -> bool:
    rules = knowledge.source_frames()
    if file.startswith(tuple(rules["skip_prefixes"])) or any(f in file for f in rules["skip_fragments"]):
        return True
    if "/" not in file:
        return file.removesuffix(".py") in sys.stdlib_module_names
    return False


class _ModuleTree:
    """The module frames as a tree of calls: per frame its class, instance, parent frame, layer and name."""

    def __init__(self, cls: list[str], inst: list[int], parent: np.ndarray, order: np.ndarray) -> None:
        self.cls, self.inst, self.parent = cls, inst, parent
        n = len(cls)
        ident = [f"{c}_{i}" for c, i in zip(cls, inst, strict=True)]
        parent_ident = [ident[p] if p >= 0 else "" for p in parent]
        # Distinct instances of each class under each parent (by identity: the same module every step).
        siblings: dict[tuple[str, str], list[int]] = {}
        for r in range(n):
            siblings.setdefault((parent_ident[r], cls[r]), []).append(inst[r])
        ranks = {key: {v: i for i, v in enumerate(sorted(set(values)))} for key, values in siblings.items()}
        repeated = [len(ranks[(parent_ident[r], cls[r])]) > 1 for r in range(n)]
        sibling_rank = [ranks[(parent_ident[r], cls[r])][inst[r]] for r in range(n)]
        self.layer_class = self._layer_class(repeated, order)
        layer_insts = sorted({inst[r] for r in range(n) if cls[r] == self.layer_class})
        layer_of_inst = {v: i for i, v in enumerate(layer_insts)}
        self.qualified: list[str | None] = [None] * n
        self.layer: list[int | None] = [None] * n
        for r in order:  # parents before children
            p = parent[r]
            outer_layer = self.layer[p] if p >= 0 else None
            if cls[r] == self.layer_class and outer_layer is None:
                self.layer[r] = layer_of_inst[inst[r]]
                segment = f"{cls[r]}.{self.layer[r]}"
            else:
                self.layer[r] = outer_layer
                segment = f"{cls[r]}[{sibling_rank[r]}]" if repeated[r] else cls[r]
            self.qualified[r] = f"{self.qualified[p]}.{segment}" if p >= 0 else segment

    @classmethod
    def build(cls, mods: pl.DataFrame, index: NestedIntervals) -> _ModuleTree:
        ident = mods["name"].str.strip_prefix(MODULE_FRAME_PREFIX)
        classes = ident.str.replace(r"_\d+$", "").to_list()
        instances = ident.str.extract(r"_(\d+)$").cast(pl.Int64).fill_null(0).to_list()
        n = mods.height
        parent = np.full(n, -1, dtype=np.int64)
        has_parent = index.parent >= 0
        parent[index.rows[has_parent]] = index.rows[index.parent[has_parent]]
        order = index.rows[np.argsort(index.depth, kind="stable")]
        return cls(classes, instances, parent, order)

    def _layer_class(self, repeated: list[bool], order: np.ndarray) -> str | None:
        """The outermost class repeating under one parent; of several, the one with the most instances."""
        outer_repeat = [False] * len(self.cls)
        candidates: dict[str, set[int]] = {}
        for r in order:
            p = self.parent[r]
            above = p >= 0 and (repeated[p] or outer_repeat[p])
            outer_repeat[r] = above
            if repeated[r] and not above:
                candidates.setdefault(self.cls[r], set()).add(self.inst[r])
        if not candidates:
            return None
        return max(candidates, key=lambda c: len(candidates[c]))

    def layer_types(self) -> dict[int, str]:
        """Layer index → the layer class, with the child classes that set it apart where layers differ."""
        children: dict[int, set[str]] = {}
        for r, p in enumerate(self.parent):
            if p >= 0 and self.cls[p] == self.layer_class and self.layer[p] is not None and self.layer[r] == self.layer[p]:
                children.setdefault(self.layer[p], set()).add(self.cls[r])
        layers = sorted({v for v in self.layer if v is not None})
        if not layers:
            return {}
        common = set.intersection(*(children.get(i, set()) for i in layers))
        types = {}
        for i in layers:
            distinct = sorted(children.get(i, set()) - common)
            types[i] = f"{self.layer_class} · {' · '.join(distinct)}" if distinct else str(self.layer_class)
        return types


