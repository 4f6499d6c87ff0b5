"""Attribute the kernels of CUDA-graph (and HIP-graph) replays, which no CPU op or module frame surrounds.

Kineto gives every kernel of one replay the correlation id of its graph launch, so the step ranges open around
the launch reach them, but the ops, module ranges and Python frames were open only while the graph was
captured. A replay is tied back to a recording of the same work, in this order (docs/importing.md):

1. a capture trace given beside the replay trace (`import --capture`): the launch calls made while the graph was
   captured, in order, each with the op, module and source line open at the call (recordings.py builds them).
   Where the capture names its kernels (ROCm does), a replay whose kernel names equal a recording's is an
   `exact` match; where it does not (CUDA), a replay of as many kernels of the same kinds (kernel, memset,
   memcpy) in the same order is a `position` match; otherwise the longest common runs of the two sequences are
   a `partial` match and only the kernels in them are attributed;
2. an eager step of the same trace whose kernel names hold the replay's in order (`eager step`; kernelscope's
   engine runs its first decode step eagerly for this);
3. nothing: the replay stays unattributed and the reason is recorded. Nothing is guessed silently.

Among equally good recordings (vLLM's piecewise graphs repeat one piece per layer), the one at the replay's
position among its step's graph launches is taken. A matched replay whose launch lies in no step of its own
becomes a step of the phase its recording ran in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher

import polars as pl

from kernelscope import ranges
from kernelscope.contracts.trace_records import GraphReplays, ReplayMethod, UnattributedReplays

GRAPH_LAUNCH_APIS = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
COPIED = ("module", "layer", "op", "top_op", "source_line")
# What a capture recorded of the op around each launch, for its cost (analyze/costs/kernel_costs.py SHAPE_COLUMNS): copied
# from capture recordings that carry it; `shape_unit` numbers the captured op (kernels of one replay and one
# captured op share its cost), made distinct across recordings here.
SHAPES = ("shape_op", "shape_dims", "shape_types", "shape_scalars", "shape_inner", "shape_unit")
_UNIT_SPACE = 1 << 40
EXACT, POSITION, PARTIAL, EAGER = "exact", "position", "partial", "eager step"
_MIN_PARTIAL = 0.5  # a partial match must cover at least half of the replay's kernels


@dataclass
class Recording:
    """One captured graph: its launches in order, with what was open at each (COPIED columns and phase)."""

    label: str
    kinds: list[str]
    names: list[str | None]  # None where the capture does not name the launched kernel
    attribution: pl.DataFrame  # one row per launch: COPIED columns and phase
    index: int = 0  # position among the recordings of its capture trace


@dataclass
class _Match:
    method: str
    pairs: list[tuple[int, int]]  # (replay position, recording row)
    recording: Recording | None = None
    score: float = 0.0


@dataclass(frozen=True)
class _Departure:
    """Where a replay first departs from the eager step it was compared with (kernel None: the step ends first)."""

    step: int
    kernel: int | None = None
    replay_kernel: str | None = None
    step_kernel: str | None = None

    def english(self) -> str:
        if self.kernel is None:
            return f"step {self.step}: the step ends first"
        return (f"step {self.step}, kernel {self.kernel}: '{self.replay_kernel}' in the replay, "
                f"'{self.step_kernel or '(none)'}' in the step")


@dataclass(frozen=True)
class _Miss:
    """Why a replay got no attribution: no capture holds it in order (or none was given), and no eager step does
    (or there was none with modules)."""

    kernels: int  # the replay's
    captures_given: bool
    closest_capture_share: float | None
    departure: _Departure | None  # None: no eager step with modules to compare with

    def english(self) -> str:
        if self.captures_given:
            captures = (f"the replay's {self.kernels} kernels match no captured graph in order (closest capture "
                        f"shares {self.closest_capture_share:.0%})")
        else:
            captures = "no capture trace given (`import --capture`)"
        if self.departure is None:
            return f"{captures} and no eager step with modules to copy from"
        return f"{captures} and its {self.kernels} kernels appear in order in no eager step ({self.departure.english()})"


@dataclass
class _Outcome:
    copied: list[tuple[int, int, int]] = field(default_factory=list)  # (kernel_id, recording id, row)
    methods: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # method → (kernels, time) per replay
    misses: dict[_Miss, list[tuple[int, int]]] = field(default_factory=dict)


def attribute_graph_replays(kernels: pl.DataFrame, recordings: list[Recording] | None = None
                            ) -> tuple[pl.DataFrame, GraphReplays | None]:
    """kernels as attribution gives them. Returns the kernels with replay kernels attributed, and what was done
    (None when the run replays no graph)."""
    is_graph = pl.col("launch_api").is_in(GRAPH_LAUNCH_APIS).fill_null(False)
    if kernels.filter(is_graph).height == 0:
        return kernels, None
    added = [c for c in ("rank", "launch_start_ns", "source_line") if c not in kernels.columns]
    kernels = kernels.with_columns(pl.lit(None, dtype=pl.Int64 if c != "source_line" else pl.String).alias(c)
                                   for c in added)
    graph = kernels.filter(is_graph).sort("start_ns")
    recordings = recordings or []
    eager = _eager_steps(kernels.filter(~is_graph))
    replays = graph.group_by("rank", "correlation", maintain_order=True).agg(
        pl.col("name"), pl.col("kind"), pl.col("kernel_id"), pl.col("dur_ns"), pl.col("generation").first(),
        pl.col("phase").first(), pl.col("step").first(), pl.col("launch_start_ns").first())
    ordinals = _ordinals(replays)
    outcome = _Outcome()
    cache: dict[tuple, _Match | _Miss] = {}
    for i, row in enumerate(replays.iter_rows(named=True)):
        key = (tuple(row["name"]), tuple(row["kind"]), row["generation"], ordinals[i])
        if key not in cache:
            cache[key] = _best_match(row, ordinals[i], recordings, eager)
        found = cache[key]
        time = int(sum(row["dur_ns"]))
        if isinstance(found, _Miss):
            outcome.misses.setdefault(found, []).append((len(row["kernel_id"]), time))
            continue
        matched_time = sum(row["dur_ns"][p] for p, _ in found.pairs)
        outcome.methods.setdefault(found.method, []).append((len(found.pairs), int(matched_time)))
        source = -1 if found.recording is None else recordings.index(found.recording)
        outcome.copied += [(row["kernel_id"][p], source, r) for p, r in found.pairs]
    attributed = _own_steps(_copy(kernels, outcome.copied, recordings), is_graph)
    return attributed.drop(added), _report(graph, replays.height, outcome)


def _ordinals(replays: pl.DataFrame) -> list[int]:
    """Each replay's position among the graph launches of its step (or of its rank, outside any step)."""
    seen: dict[tuple, int] = {}
    out = []
    for rank, phase, step in replays.select("rank", "phase", "step").iter_rows():
        key = (rank, phase, step)
        out.append(seen.get(key, 0))
        seen[key] = out[-1] + 1
    return out


def _best_match(replay: dict, ordinal: int, recordings: list[Recording], eager: pl.DataFrame) -> _Match | _Miss:
    names, kinds = replay["name"], replay["kind"]
    best: _Match | None = None
    for recording in recordings:
        found = _against(names, kinds, recording)
        if found is None:
            continue
        found.recording = recording
        # Equal scores: prefer the recording at the replay's position (piecewise graphs, one piece per layer).
        if best is None or (found.score, -abs(recording.index - ordinal)) > (best.score, -abs(best.recording.index - ordinal)):
            best = found
    if best is not None and best.method != PARTIAL:
        return best
    from_eager = _from_eager(names, replay["generation"], eager)
    if isinstance(from_eager, _Match):
        return from_eager
    if best is not None:
        return best
    return _Miss(kernels=len(names), captures_given=bool(recordings),
                 closest_capture_share=_closest(names, kinds, recordings) if recordings else None,
                 departure=from_eager)


def _against(names: list[str], kinds: list[str], recording: Recording) -> _Match | None:
    n = len(names)
    named = all(x is not None for x in recording.names)
    if named and recording.names == names:
        return _Match(EXACT, [(p, p) for p in range(n)], score=3.0)
    if not named and recording.kinds == kinds:
        return _Match(POSITION, [(p, p) for p in range(n)], score=2.0)
    theirs = recording.names if named else recording.kinds
    ours = names if named else kinds
    blocks = SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks()
    pairs = [(b.a + j, b.b + j) for b in blocks for j in range(b.size)]
    share = len(pairs) / n if n else 0.0
    return _Match(PARTIAL, pairs, score=share) if share >= _MIN_PARTIAL else None


def _closest(names: list[str], kinds: list[str], recordings: list[Recording]) -> float:
    best = 0.0
    for recording in recordings:
        named = all(x is not None for x in recording.names)
        ours, theirs = (names, recording.names) if named else (kinds, recording.kinds)
        blocks = SequenceMatcher(None, ours, theirs, autojunk=False).get_matching_blocks()
        best = max(best, sum(b.size for b in blocks) / max(len(ours), 1))
    return best


def _eager_steps(eager: pl.DataFrame) -> pl.DataFrame:
    """Eager kernels with a module, grouped by step (latest first): the steps a replay may repeat."""
    known = eager.filter(pl.col("step").is_not_null() & (pl.col("phase") != ranges.UNKNOWN))
    steps = (known.sort("start_ns").group_by("rank", "generation", "phase", "step", maintain_order=True)
             .agg(pl.col("name"), pl.col("kernel_id"), pl.col("module").is_not_null().any().alias("_modules")))
    return steps.filter("_modules").drop("_modules").sort("step", descending=True)


def _from_eager(names: list[str], generation: int | None, steps: pl.DataFrame) -> _Match | _Departure | None:
    """The kernels of the latest eager step holding the replay's names in order; else where the replay departs
    from the latest step (None: no eager step with modules)."""
    candidates = steps.filter(pl.col("generation").eq_missing(generation))
    n = len(names)
    closest: _Departure | None = None
    for step, step_names, step_ids in candidates.select("step", "name", "kernel_id").iter_rows():
        for offset in range(len(step_names) - n + 1):
            if step_names[offset:offset + n] == names:
                return _Match(EAGER, [(p, step_ids[offset + p]) for p in range(n)], score=1.0)
        closest = closest or _difference(names, step_names, step)
    return closest


def _difference(names: list[str], step_names: list[str], step: int) -> _Departure:
    """Where a replay first departs from an eager step, aligned at the replay's first kernel."""
    start = step_names.index(names[0]) if names[0] in step_names else 0
    for j, name in enumerate(names):
        other = step_names[start + j] if start + j < len(step_names) else None
        if name != other:
            return _Departure(step, j, name, other)
    return _Departure(step)


def _copy(kernels: pl.DataFrame, copied: list[tuple[int, int, int]], recordings: list[Recording]) -> pl.DataFrame:
    """Copy COPIED (and a phase where the replay's is unknown) from eager kernels (source -1, row = kernel_id) or
    recording rows onto the replay kernels."""
    if not copied:
        return kernels
    frames = []
    eager = [(k, r) for k, s, r in copied if s < 0]
    if eager:
        pairs = pl.DataFrame(eager, schema={"kernel_id": pl.Int64, "_source": pl.Int64}, orient="row")
        frames.append(pairs.join(kernels.select(pl.col("kernel_id").alias("_source"), *COPIED, "phase"),
                                 on="_source", how="left").drop("_source"))
    for s, recording in enumerate(recordings):
        rows = [(k, r) for k, src, r in copied if src == s]
        if rows:
            ids = pl.Series("kernel_id", [k for k, _ in rows], dtype=pl.Int64)
            shapes = [c for c in SHAPES if c in recording.attribution.columns]
            picked = recording.attribution[[r for _, r in rows]].select(*COPIED, "phase", *shapes).with_columns(ids)
            if "shape_unit" in shapes:
                picked = picked.with_columns(pl.col("shape_unit") + s * _UNIT_SPACE)
            frames.append(picked)
    source = pl.concat(frames, how="diagonal_relaxed")
    carried = [c for c in SHAPES if c in source.columns]
    source = source.select("kernel_id", *(pl.col(c).alias(f"_{c}") for c in (*COPIED, "phase")), *carried)
    joined = kernels.drop(carried, strict=False).join(source, on="kernel_id", how="left")
    hit = pl.col("_phase").is_not_null() | pl.col("_op").is_not_null() | pl.col("_module").is_not_null()
    return joined.with_columns(
        *(pl.when(hit).then(pl.col(f"_{c}")).otherwise(pl.col(c)).alias(c) for c in COPIED),
        pl.when(hit & (pl.col("phase") == ranges.UNKNOWN) & pl.col("_phase").is_not_null())
        .then(pl.col("_phase")).otherwise(pl.col("phase")).alias("phase"),
    ).drop(*(f"_{c}" for c in (*COPIED, "phase")))


def _own_steps(kernels: pl.DataFrame, is_graph: pl.Expr) -> pl.DataFrame:
    """Replays with a known phase but no step (launched outside every step marker) become one step each,
    numbered after the phase's steps in time order."""
    loose = kernels.filter(is_graph & pl.col("step").is_null() & (pl.col("phase") != ranges.UNKNOWN))
    if loose.height == 0:
        return kernels
    last = kernels.filter(pl.col("step").is_not_null()).group_by("rank", "phase").agg(pl.col("step").max())
    launches = (loose.group_by("rank", "phase", "correlation").agg(pl.col("start_ns").min())
                .join(last, on=["rank", "phase"], how="left")
                .sort("start_ns")
                .with_columns((pl.col("step").fill_null(-1) + 1 + pl.int_range(pl.len()).over("rank", "phase"))
                              .alias("_step")))
    joined = kernels.join(launches.select("rank", "phase", "correlation", "_step"),
                          on=["rank", "phase", "correlation"], how="left")
    return joined.with_columns(
        pl.when(is_graph & pl.col("step").is_null()).then(pl.col("_step")).otherwise(pl.col("step")).alias("step")
    ).drop("_step")


def _report(graph: pl.DataFrame, replays: int, outcome: _Outcome) -> GraphReplays:
    methods = [ReplayMethod(method=m, replays=len(v), kernels=sum(k for k, _ in v), time_ns=sum(t for _, t in v))
               for m, v in outcome.methods.items()]
    return GraphReplays(
        replays=replays,
        kernels=graph.height,
        time_ns=int(graph["dur_ns"].sum()),
        attributed_replays=sum(m.replays for m in methods),
        attributed_kernels=sum(m.kernels for m in methods),
        attributed_time_ns=sum(m.time_ns for m in methods),
        methods=methods,
        unattributed=[_unattributed(miss, v) for miss, v in outcome.misses.items()],
    )


def _unattributed(miss: _Miss, replays: list[tuple[int, int]]) -> UnattributedReplays:
    departure = miss.departure
    return UnattributedReplays(
        reason=miss.english(), replays=len(replays), kernels=sum(k for k, _ in replays),
        time_ns=sum(t for _, t in replays), kernels_per_replay=miss.kernels, captures_given=miss.captures_given,
        closest_capture_share=miss.closest_capture_share, eager_steps=departure is not None,
        step=departure.step if departure else None, kernel=departure.kernel if departure else None,
        replay_kernel=departure.replay_kernel if departure else None,
        step_kernel=departure.step_kernel if departure else None)
