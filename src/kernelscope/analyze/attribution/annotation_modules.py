"""Modules and layers from a trace's user annotations (torch.profiler.record_function ranges), for traces that have
neither kernelscope's module ranges nor nn.Module frames: a script that names the parts of its model itself.

A kernel's module is the chain of annotations open on its launching thread at launch, outermost first, joined by
dots. A name ending in a number that other annotations of the trace share apart from it (`TransformerLayer_0` …
`TransformerLayer_3`) is a numbered part, written `TransformerLayer.2`, so that its number is the kernel's layer as
on every other source (the first purely numeric part of the module). Ranges that torch, torch.distributed,
torch.compile and serving engines push on their own, step annotations and kernelscope's ranges are not modules
(data/annotation_modules.toml, data/step_annotations.toml).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from functools import cache

import numpy as np
import polars as pl

from kernelscope.analyze.attribution.python_frames import Launches
from kernelscope.analyze.intervals import NestedIntervals, gather_rows
from kernelscope.load import knowledge
from kernelscope.ranges import LAYER_IN_MODULE

_NUMBERED = re.compile(r"^(?P<base>.*?[A-Za-z])[ _.-]?(?P<number>\d+)$")
# vLLM's and SGLang's layer-by-layer NVTX markers (`--enable-layerwise-nvtx-tracing`, `--enable-layerwise-nvtx-marker`):
# a dict's text whose `Module` is the module's qualified name under a prefix of their own (`top.`, `model.`).
_LAYERWISE = re.compile(r"""^\{['"]Module['"]: ['"](?:top\.)?(?P<module>[^'"]+)['"]""")


@dataclass(frozen=True)
class AnnotationModules:
    """Per kernel: module and layer (null outside any module annotation); the numbered parts' base name (the layer
    class) and each layer's type (that name)."""

    module: pl.Series
    layer: pl.Series
    layer_class: str | None
    layer_types: dict[int, str]
    layerwise: bool = False  # the modules came from serving engines' layer-by-layer markers


@cache
def _not_modules() -> tuple[re.Pattern[str], ...]:
    patterns = [*knowledge.annotation_modules()["not_modules"], *(r["pattern"] for r in knowledge.step_annotations())]
    return tuple(re.compile(pattern) for pattern in patterns)


def annotation_modules(annotations: pl.DataFrame, launches: Launches, span: int) -> AnnotationModules | None:
    """annotations: user annotation ranges (name, thread, start_ns, dur_ns). None when none of them can be a
    module or none holds a kernel's launch."""
    skip = _not_modules()
    # Tried once per distinct name: a serving trace repeats a few names over many ranges.
    modules = [name for name in annotations["name"].unique().to_list() if not any(p.search(name) for p in skip)]
    if not modules:
        return None
    ranges = annotations.filter(pl.col("name").is_in(modules))
    index = NestedIntervals.build(ranges["thread"].to_numpy(), ranges["start_ns"].to_numpy(),
                                  ranges["dur_ns"].to_numpy(), span)
    row = index.innermost(launches.thread, launches.time)
    if not (row >= 0).any():
        return None
    names = ranges["name"].to_list()
    qualified = [_qualified(name) for name in names]
    parts, layer_class = _parts(names, index)
    # A layer-by-layer marker names its module in full: its path is that name, not the chain of markers around it.
    paths = [q if q is not None else p for q, p in zip(qualified, _paths(parts, index), strict=True)]
    if any(q is not None for q in qualified):
        layer_class = None
    module = pl.Series("module", paths, dtype=pl.String)
    layer = module.str.extract(LAYER_IN_MODULE, 1).cast(pl.Int64)
    layers = sorted({int(n) for n in layer.drop_nulls().to_list()})
    return AnnotationModules(module=gather_rows(module, row), layer=gather_rows(layer, row), layer_class=layer_class,
                             layer_types={n: layer_class for n in layers} if layer_class else {},
                             layerwise=any(q is not None for q in qualified))


def _qualified(name: str) -> str | None:
    match = _LAYERWISE.match(name)
    return match["module"] if match else None


def _parts(names: list[str], index: NestedIntervals) -> tuple[list[str], str | None]:
    """Each range's part of a module name, and the layer class: of the names that end in a number other names
    share apart from it, the base whose ranges sit outermost (then the most of them). Only the layer class's
    names become numbered parts (`Base.N`); other names stay as they are (`w1` inside a layer is no layer)."""
    depth = np.empty(len(names), dtype=np.int64)
    depth[index.rows] = index.depth
    numbers: defaultdict[str, set[str]] = defaultdict(set)
    shallowest: dict[str, int] = {}
    count: Counter[str] = Counter()
    for row, name in enumerate(names):
        match = _NUMBERED.match(name)
        if match:
            base = match["base"]
            numbers[base].add(match["number"])
            shallowest[base] = min(shallowest.get(base, int(depth[row])), int(depth[row]))
            count[base] += 1
    repeated = [base for base, found in numbers.items() if len(found) > 1]
    if not repeated:
        return list(names), None
    layer_class = min(repeated, key=lambda base: (shallowest[base], -count[base], base))
    parts = []
    for name in names:
        match = _NUMBERED.match(name)
        parts.append(f"{layer_class}.{int(match['number'])}" if match and match["base"] == layer_class else name)
    return parts, layer_class


def _paths(parts: list[str], index: NestedIntervals) -> list[str | None]:
    """Each range's chain of parts from its outermost enclosing range, by row of the ranges' table."""
    by_position: list[str] = [""] * len(index)
    for position in np.argsort(index.depth, kind="stable").tolist():  # parents before their children
        own = parts[int(index.rows[position])]
        parent = int(index.parent[position])
        by_position[position] = own if parent < 0 else f"{by_position[parent]}.{own}"
    paths: list[str | None] = [None] * len(parts)
    for position, row in enumerate(index.rows.tolist()):
        paths[row] = by_position[position]
    return paths
