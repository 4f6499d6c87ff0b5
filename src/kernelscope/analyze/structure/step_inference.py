"""Phases and steps of a trace that kernelscope did not record, from what the trace itself holds.

Sources, in the order they are trusted (the first that a trace has is used; docs/importing.md):
1. step annotations of serving engines and scripts (data/step_annotations.toml: vLLM and SGLang `execute_…`,
   SGLang `step[DECODE bs=…]`, ranges named prefill / decode), as Kineto user annotations or NVTX ranges;
2. torch.profiler's `ProfilerStep#N` ranges, when each holds at most one model forward;
3. the model's forwards: each top-level `nn.Module` frame (with_modules traces) starts a step;
4. the vocabulary embedding lookups (record_shapes traces) and calls of compiled graphs that hold none (the
   `## Call CompiledFxGraph` ranges of torch.compile): each starts a step;
5. `ProfilerStep#N` ranges holding several forwards (one step each, phase unknown).
A step of 3 or 4 lasts until the next one starts on its thread, so that the sampling after a forward belongs to
the step whose logits it reads. A step's phase comes from its annotation (1) or else from the token count of its
embedding lookup: more than one token per sequence is prefill, one is decode, and a compiled-graph call after a
prefill is decode (HF compiles the decode forward only). That is done only when the trace shows generation (a
one-token forward, a causal-LM class at the top, or compiled calls repeated after a prefill), never on training
traces (backward ops present).
Steps are numbered per phase from 0 in time order. Kernels take the step open on their launching thread at launch.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import polars as pl

from kernelscope import ranges
from kernelscope.analyze.attribution.python_frames import MODULE_FRAME_PREFIX, Launches
from kernelscope.analyze.intervals import NestedIntervals, gather_rows
from kernelscope.contracts.run_info import StepInfo
from kernelscope.load import knowledge

MIXED, IDLE = ranges.MIXED, ranges.IDLE
PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
EMBEDDING_OP = "aten::embedding"
COMPILED_CALL = re.compile(r"^## Call CompiledFxGraph \S+ ##$")
# Top-level classes that generate text: their first forward over a prompt is a prefill even without a decode.
_GENERATIVE_CLASS = re.compile(r"(ForCausalLM|LMHeadModel|ForConditionalGeneration)(_\d+)?$")
_BACKWARD_OP = re.compile(r"^autograd::engine::evaluate_function|Backward\d*$")
_COUNTS = ("prefill_requests", "prefill_tokens", "decode_requests", "decode_tokens", "requests", "tokens",
           "prefill_kv_tokens", "prefill_query_squares", "prefill_query_kv_products", "decode_kv_tokens",
           "decode_query_squares", "decode_query_kv_products")


@dataclass
class StepRanges:
    """Candidate steps: intervals on CPU threads with the phase and counts each one's source gives."""

    source: str
    thread: np.ndarray
    start: np.ndarray
    end: np.ndarray
    phase: list[str]
    label: list[str | None]
    counts: list[dict[str, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Steps:
    source: str
    phase: pl.Series  # per kernel
    step: pl.Series  # per kernel
    steps: list[StepInfo]


def infer_steps(ops: pl.DataFrame, launches: Launches, span: int) -> Steps | None:
    """ops: CPU ops, annotations and Python frames with a `thread` code. None when the trace shows no steps."""
    candidates = _candidates(ops, span)
    if candidates is None:
        return None
    order = np.lexsort((candidates.start, candidates.thread))
    numbered = step_numbers([candidates.phase[i] for i in order])
    steps = [StepInfo(phase=candidates.phase[i], step=number, label=candidates.label[i],
                      **(candidates.counts[i] if candidates.counts else {}))
             for i, number in sorted(zip(order, numbered, strict=True), key=lambda p: candidates.start[p[0]])]
    index = NestedIntervals.build(candidates.thread, candidates.start, candidates.end - candidates.start, span)
    row = index.innermost(launches.thread, launches.time)
    phase = pl.Series("phase", candidates.phase, dtype=pl.String)
    number = np.empty(len(order), dtype=np.int64)
    number[order] = numbered
    return Steps(source=candidates.source, phase=gather_rows(phase, row).fill_null(ranges.UNKNOWN),
                 step=gather_rows(pl.Series("step", number, dtype=pl.Int64), row), steps=steps)


def _candidates(ops: pl.DataFrame, span: int) -> StepRanges | None:
    annotations = ops.filter(pl.col("cat") == "annotation")
    found = _annotated(annotations)
    if found is not None:
        return found
    forwards = _forwards(ops)
    embeddings = _embeddings(ops)
    training = ops.filter(pl.col("cat") == "cpu_op")["name"].str.contains(_BACKWARD_OP.pattern).any()
    profiler_steps = annotations.filter(pl.col("name").str.contains(PROFILER_STEP.pattern))
    lookups = _with_compiled_calls(embeddings, annotations, span)
    markers = forwards if forwards.height else lookups
    if profiler_steps.height and _at_most_one_inside(profiler_steps, markers):
        return _with_phases(_intervals(profiler_steps, "ProfilerStep#N ranges", span), embeddings, forwards, training)
    if forwards.height:
        return _with_phases(_until_next(forwards, "model forwards (top-level nn.Module frames)", span), embeddings,
                            forwards, training)
    if lookups.height:
        source = "embedding lookups and compiled-graph calls" if lookups.height > embeddings.height else \
            "embedding lookups (one per forward)"
        return _with_phases(_until_next(lookups, source, span), embeddings, forwards, training)
    if profiler_steps.height:
        return _intervals(profiler_steps, "ProfilerStep#N ranges", span)
    return None


def _annotated(annotations: pl.DataFrame) -> StepRanges | None:
    """Steps of the first rule of data/step_annotations.toml that names any range of the trace."""
    for rule in knowledge.step_annotations():
        groups = annotations["name"].str.extract_groups(rule["pattern"])
        matched = annotations.with_columns(groups.alias("_g")).filter(
            pl.col("_g").struct.field(groups.struct.fields[0]).is_not_null())
        if matched.height == 0:
            continue
        modes = {k.lower(): v for k, v in rule.get("modes", {}).items()}
        phases, counts = [], []
        for g in matched["_g"].to_list():
            numbers = {k: int(v) for k, v in g.items() if k in _COUNTS and v is not None}
            counts.append(numbers)
            phases.append(_annotated_phase(g, numbers, modes))
        start = matched["start_ns"].to_numpy()
        return StepRanges(source=rule["name"], thread=matched["thread"].fill_null(-1).to_numpy(), start=start,
                          end=start + np.maximum(matched["dur_ns"].to_numpy(), 1), phase=phases,
                          label=matched["name"].to_list(), counts=counts)
    return None


def _annotated_phase(groups: dict[str, str | None], counts: dict[str, int], modes: dict[str, str]) -> str:
    mode = groups.get("mode")
    if mode is not None:
        return modes.get(mode.lower(), ranges.UNKNOWN)
    prefill, decode = counts.get("prefill_requests", 0), counts.get("decode_requests", 0)
    if prefill and decode:
        return MIXED
    return ranges.PREFILL if prefill else ranges.DECODE if decode else IDLE


def _forwards(ops: pl.DataFrame) -> pl.DataFrame:
    """Top-level module frames: module frames that no other module frame on their thread encloses."""
    mods = ops.filter((pl.col("cat") == "python") & pl.col("name").str.starts_with(MODULE_FRAME_PREFIX))
    if mods.height == 0:
        return mods
    index = NestedIntervals.build(mods["thread"].fill_null(-1).to_numpy(), mods["start_ns"].to_numpy(),
                                  mods["dur_ns"].to_numpy(), _span(mods))
    top = np.zeros(mods.height, dtype=bool)
    top[index.rows[index.depth == 0]] = True
    return mods.filter(pl.Series(top))


def _embeddings(ops: pl.DataFrame) -> pl.DataFrame:
    """Lookups in the vocabulary embedding (the largest table looked up), with their token count per sequence."""
    lookups = ops.filter((pl.col("cat") == "cpu_op") & (pl.col("name") == EMBEDDING_OP) &
                         pl.col("input_dims").is_not_null())
    if lookups.height == 0:
        return lookups.with_columns(pl.lit(None, dtype=pl.Int64).alias("tokens"))
    dims = [_dims(text) for text in lookups["input_dims"].to_list()]
    rows = [d[0][0] if d and d[0] else None for d in dims]
    tokens = [d[1][-1] if len(d) > 1 and d[1] else None for d in dims]
    lookups = lookups.with_columns(pl.Series("_rows", rows, dtype=pl.Int64), pl.Series("tokens", tokens, dtype=pl.Int64))
    return lookups.filter(pl.col("_rows") == pl.col("_rows").max()).drop("_rows")


def _with_compiled_calls(embeddings: pl.DataFrame, annotations: pl.DataFrame, span: int) -> pl.DataFrame:
    """Embedding lookups, and the compiled-graph calls that enclose none (a compiled forward hides its lookup)."""
    calls = annotations.filter(pl.col("name").str.contains(COMPILED_CALL.pattern))
    if calls.height == 0:
        return embeddings
    if embeddings.height:
        index = NestedIntervals.build(calls["thread"].fill_null(-1).to_numpy(), calls["start_ns"].to_numpy(),
                                      calls["dur_ns"].to_numpy(), span)
        holding = index.innermost(embeddings["thread"].fill_null(-1).to_numpy(), embeddings["start_ns"].to_numpy())
        keep = np.ones(calls.height, dtype=bool)
        keep[holding[holding >= 0]] = False
        calls = calls.filter(pl.Series(keep))
    columns = ["name", "cat", "thread", "start_ns", "dur_ns"]
    return pl.concat([embeddings.select(*columns, "tokens"),
                      calls.select(*columns).with_columns(pl.lit(None, dtype=pl.Int64).alias("tokens"))]).sort("start_ns")


def _dims(text: str) -> list[list[int]]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return value if isinstance(value, list) else []


def _at_most_one_inside(outer: pl.DataFrame, inner: pl.DataFrame) -> bool:
    if inner.height == 0:
        return True
    index = NestedIntervals.build(outer["thread"].fill_null(-1).to_numpy(), outer["start_ns"].to_numpy(),
                                  outer["dur_ns"].to_numpy(), _span(outer, inner))
    row = index.innermost(inner["thread"].fill_null(-1).to_numpy(), inner["start_ns"].to_numpy())
    inside = row[row >= 0]
    return len(inside) == 0 or int(np.bincount(inside).max()) <= 1


def _intervals(table: pl.DataFrame, source: str, span: int) -> StepRanges:
    start = table["start_ns"].to_numpy()
    return StepRanges(source=source, thread=table["thread"].fill_null(-1).to_numpy(), start=start,
                      end=start + np.maximum(table["dur_ns"].to_numpy(), 1),
                      phase=[ranges.UNKNOWN] * table.height, label=table["name"].to_list())


def _until_next(table: pl.DataFrame, source: str, span: int) -> StepRanges:
    """Each row opens a step that lasts until the next row on its thread starts (the last one to the end)."""
    ordered = table.sort("thread", "start_ns")
    thread = ordered["thread"].fill_null(-1).to_numpy()
    start = ordered["start_ns"].to_numpy()
    end = np.append(start[1:], span - 1)
    end = np.where(np.append(thread[1:] != thread[:-1], True), span - 1, end)
    return StepRanges(source=source, thread=thread, start=start, end=np.maximum(end, start + 1),
                      phase=[ranges.UNKNOWN] * ordered.height, label=ordered["name"].to_list())


def _with_phases(steps: StepRanges, embeddings: pl.DataFrame, forwards: pl.DataFrame, training: bool) -> StepRanges:
    """Prefill or decode by the token count of each step's first embedding lookup (a compiled-graph call after a
    prefill: decode), where the trace shows generation."""
    if training or embeddings.height == 0:
        return steps
    index = NestedIntervals.build(steps.thread, steps.start, steps.end - steps.start, _span_of(steps, embeddings))
    row = index.innermost(embeddings["thread"].fill_null(-1).to_numpy(), embeddings["start_ns"].to_numpy())
    tokens: dict[int, int] = {}
    for r, n in zip(row, embeddings["tokens"].to_list(), strict=True):
        if r >= 0 and n is not None and r not in tokens:
            tokens[int(r)] = int(n)
    order = np.argsort(steps.start, kind="stable")
    first_prefill = next((i for i in order if tokens.get(int(i), 0) > 1), None)
    compiled_after = [int(i) for i in order if int(i) not in tokens and COMPILED_CALL.match(steps.label[i] or "")
                      and first_prefill is not None and steps.start[i] > steps.start[first_prefill]]
    generative = (forwards.height > 0 and forwards["name"].str.contains(_GENERATIVE_CLASS.pattern).any()) or \
        1 in tokens.values() or len(compiled_after) > 1
    if not generative:
        return steps  # no sign of generation: a forward over many tokens is not called a prefill
    decode_calls = set(compiled_after)
    steps.phase = [ranges.PREFILL if tokens.get(i, 0) > 1 else ranges.DECODE if i in tokens or i in decode_calls
                   else ranges.UNKNOWN for i in range(len(steps.phase))]
    steps.counts = [{"tokens": tokens[i]} if i in tokens else {} for i in range(len(steps.phase))]
    return steps


def step_numbers(phases: list[str]) -> list[int]:
    """Step numbers per phase, from 0, in order."""
    seen: dict[str, int] = {}
    out = []
    for phase in phases:
        out.append(seen.get(phase, 0))
        seen[phase] = out[-1] + 1
    return out


def _span(*tables: pl.DataFrame) -> int:
    ends = [int((t["start_ns"] + t["dur_ns"]).max() or 0) for t in tables if t.height]
    return max(ends, default=0) + 2


def _span_of(steps: StepRanges, table: pl.DataFrame) -> int:
    return max(int(steps.end.max(initial=0)), _span(table)) + 2
