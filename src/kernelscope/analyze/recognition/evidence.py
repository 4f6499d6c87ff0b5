"""What a trace says of the model it ran (data/model_recognition.toml): the model its code names — the outermost
Python frame of a model file of vLLM, SGLang or transformers, the outermost nn.Module class of a model or its
layers — and the sizes its ops' recorded shapes show (linear weights, the embedding table, norms' widths, attention
heads, a fused MoE's router width, expert GEMMs) and its layers, where the trace names them. Each distinct value is
one clue; what they add up to is analyze/recognition/recognise.py's."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

import polars as pl

from kernelscope.load import knowledge

SOURCE_FILE = "source file"
MODULE_CLASS = "module class"
LAYERS = "layers"
_INFERRED = "inferred"  # kernels.attribution_source of levels read from the trace's regularities: no evidence
_MAX_DIMS_TEXT = 4096  # a recorded input-dims text longer than this holds no tensor we read


@dataclass(frozen=True)
class NameClue:
    """The model a trace's code names: `family` is the model file's name (gpt_oss) or the class prefix (GptOss);
    `seen` what was read (vllm/model_executor/models/gpt_oss.py, GptOssForCausalLM)."""

    kind: str  # SOURCE_FILE or MODULE_CLASS
    family: str
    seen: str


@dataclass(frozen=True)
class ShapeClue:
    """Sizes one kind of op shows: `values` in the order data/model_recognition.toml's [[observe]] reads them."""

    kind: str
    values: tuple[int, ...]
    seen: str  # the op and the shapes it was read from


@dataclass(frozen=True)
class TraceEvidence:
    names: tuple[NameClue, ...]
    shapes: tuple[ShapeClue, ...]
    world_size: int  # ranks of the trace's world (distributedInfo), 1 when it records none


def trace_evidence(kernels: pl.DataFrame, ops: pl.DataFrame, world_size: int,
                   layer_class: str | None = None) -> TraceEvidence:
    """The clues of the run's tables (kernels with their attribution, ops with their input dims and the Python
    frames of with_stack / with_modules traces); `layer_class`: the nn.Module class of the decoder layers, where
    attribution found one (run.json attribution.layer_class)."""
    layers = (*layer_clues(kernels), *layer_class_clues(ops, layer_class))
    return TraceEvidence(names=name_clues(ops), shapes=(*shape_clues(ops), *_distinct(layers)),
                         world_size=max(1, world_size))


def name_clues(ops: pl.DataFrame) -> tuple[NameClue, ...]:
    """The model of the outermost frames of model files, and of the outermost model classes, one clue per name."""
    if ops.height == 0 or not {"name", "start_ns", "dur_ns"} <= set(ops.columns):
        return ()
    rules = knowledge.model_recognition()["names"]
    clues: dict[tuple[str, str], NameClue] = {}
    names = ops["name"].unique().drop_nulls().to_list()
    files = {n: m for n in names if (m := _model_file(n)) is not None}
    classes = {n: c for n in names if (c := _model_class(n, rules)) is not None}
    for kind, found in ((SOURCE_FILE, files), (MODULE_CLASS, classes)):
        if not found:
            continue
        events = ops.filter(pl.col("name").is_in(list(found)))
        for name in _outermost(events):
            family, seen = found[name]
            clues.setdefault((kind, family), NameClue(kind, family, seen))
    return tuple(clues.values())


def shape_clues(ops: pl.DataFrame) -> tuple[ShapeClue, ...]:
    """One clue per kind and distinct values, from the ops whose names an [[observe]] rule lists."""
    if ops.height == 0 or "input_dims" not in ops.columns:
        return ()
    names = ops["name"].unique().drop_nulls().to_list()
    clues: dict[tuple[str, tuple[int, ...]], ShapeClue] = {}
    for rule in knowledge.model_recognition()["observe"]:
        patterns = _patterns(tuple(rule["ops"]))
        matching = [n for n in names if any(p.fullmatch(n) for p in patterns)]
        if not matching:
            continue
        shapes = (ops.filter(pl.col("name").is_in(matching))
                  .select("name", pl.col("input_dims").cast(pl.String)).unique().sort("name", "input_dims"))
        for name, text in shapes.iter_rows():
            read = _read(text, rule)
            if read is not None:
                values, seen = read
                clues.setdefault((rule["kind"], values), ShapeClue(rule["kind"], values, f"{name} {seen}"))
    return tuple(clues.values())


def layer_clues(kernels: pl.DataFrame) -> tuple[ShapeClue, ...]:
    """The number of decoder layers where the trace names them (kernelscope's ranges, module frames, annotations:
    not layers read from the kernel sequence) and they run 0…n-1 without a gap; none otherwise (a window or a
    pipeline stage holds only some)."""
    if kernels.height == 0 or "layer" not in kernels.columns:
        return ()
    named = kernels.filter(pl.col("layer").is_not_null())
    if "attribution_source" in named.columns:
        named = named.filter(pl.col("attribution_source").ne_missing(_INFERRED))
    layers = sorted(named["layer"].unique().to_list())
    if not layers or layers != list(range(len(layers))):
        return ()
    return (ShapeClue(LAYERS, (len(layers),), f"0–{len(layers) - 1}"),)


def layer_class_clues(ops: pl.DataFrame, layer_class: str | None) -> tuple[ShapeClue, ...]:
    """The number of instances of the decoder-layer class among the nn.Module frames (`<Class>_<n>`, numbered from
    0 as the model made them), where they run 0…n-1: a trace whose kernels carry no layer (a capture trace) still
    says how many layers its model has."""
    if not layer_class or ops.height == 0 or "name" not in ops.columns:
        return ()
    prefix = f"{knowledge.model_recognition()['names']['module_event']}{layer_class}_"
    numbers = sorted({int(n[len(prefix):]) for n in ops["name"].unique().drop_nulls().to_list()
                      if n.startswith(prefix) and n[len(prefix):].isdigit()})
    if not numbers or numbers != list(range(len(numbers))):
        return ()
    return (ShapeClue(LAYERS, (len(numbers),), f"{len(numbers)} × {layer_class}"),)


def _distinct(clues: tuple[ShapeClue, ...]) -> tuple[ShapeClue, ...]:
    return tuple({(c.kind, c.values): c for c in reversed(clues)}.values())[::-1]


def _model_file(name: str) -> tuple[str, str] | None:
    """(model, the path read) of a Python frame in a model file of a known code base."""
    if "(" not in name or ".py" not in name:
        return None
    rules = knowledge.model_recognition()["names"]
    for rule in rules["source_files"]:
        match = _patterns((rule["pattern"],))[0].search(name)
        if match is not None and match.group("name") not in rules["not_models"]:
            return match.group("name"), match.group(0).lstrip("/")
    return None


def _model_class(name: str, rules: dict[str, Any]) -> tuple[str, str] | None:
    """(prefix, class) of an nn.Module frame whose class stands for a model or its layers."""
    prefix = rules["module_event"]
    if not name.startswith(prefix):
        return None
    cls = re.sub(r"_\d+$", "", name[len(prefix):])
    for suffix in rules["class_suffixes"]:
        if cls.endswith(suffix) and len(cls) > len(suffix) and cls.isidentifier():
            return cls[: -len(suffix)], cls
    return None


def _outermost(events: pl.DataFrame) -> list[str]:
    """Names of the events that no other of them encloses, thread by thread (a frame starting before the current
    outermost one ends is inside it)."""
    keys = [c for c in ("rank", "pid", "tid") if c in events.columns]
    ordered = events.sort([*keys, "start_ns", "dur_ns"], descending=[False] * (len(keys) + 1) + [True],
                          nulls_last=True)
    outer: list[str] = []
    current: tuple | None = None
    end = None
    for row in ordered.select(*keys, "start_ns", "dur_ns", "name").iter_rows():
        *key, start, dur, name = row
        if start is None:
            continue
        if tuple(key) != current or end is None or start >= end:
            current, end = tuple(key), start + (dur or 0)
            outer.append(name)
    return outer


def _read(text: str | None, rule: dict[str, Any]) -> tuple[tuple[int, ...], str] | None:
    """The values a rule picks from one op's input dims, with the shapes they came from; None where the op did not
    record those inputs with the ranks the rule needs."""
    if not text or len(text) > _MAX_DIMS_TEXT:
        return None
    try:
        dims = json.loads(text)
    except ValueError:
        return None
    if not isinstance(dims, list):
        return None
    shapes: dict[int, list[int]] = {}
    for index, _ in rule["picks"]:
        shape = dims[index] if 0 <= index < len(dims) else None
        if not isinstance(shape, list) or not shape or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
            return None
        shapes[index] = shape
    for index, rank in rule["ranks"]:
        if index in shapes and len(shapes[index]) != rank:
            return None
    values = []
    for index, axis in rule["picks"]:
        shape = shapes[index]
        if not -len(shape) <= axis < len(shape):
            return None
        values.append(shape[axis])
    seen = ", ".join(f"[{', '.join(map(str, shapes[i]))}]" for i in dict.fromkeys(i for i, _ in rule["picks"]))
    return tuple(values), seen


@cache
def _patterns(texts: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(t) for t in texts)
