"""Time a workload's generations without the profiler: plain (no ranges) and annotated (kernelscope's ranges),
alternated so that drifts (clocks, caches) hit both alike; medians and whether the ranges changed the tokens."""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import torch

from kernelscope.contracts.run_info import ImageTimings, Timings
from kernelscope.workload.generation import RunTimes, summarize_times
from kernelscope.workload.session import WorkloadSession


@dataclass
class TimedRuns:
    """The timings, and the tokens of the last plain run of each generation (to compare the profiled run's)."""

    timings: Timings
    last_plain_tokens: list[torch.Tensor]


def warm_up(session: WorkloadSession, warmup: int, advance) -> None:
    for _ in range(warmup):
        for index in range(session.generations):
            session.generate(index, annotated=False)
            advance()


def time_generations(session: WorkloadSession, repeats: int, per_image: bool, advance) -> TimedRuns:
    count = session.generations
    plain: list[list[RunTimes]] = [[] for _ in range(count)]
    annotated: list[list[RunTimes]] = [[] for _ in range(count)]
    first_plain: list[torch.Tensor] = []
    tokens_plain: list[torch.Tensor] = []
    tokens_match = True
    tokens_repeatable: bool | None = None  # plain runs of one input agree with each other (needs ≥ 2 repeats)
    for _ in range(repeats):
        tokens_plain = []
        for index in range(count):
            tokens, times = session.generate(index, annotated=False)
            plain[index].append(times)
            advance()
            with_ranges, times = session.generate(index, annotated=True)
            annotated[index].append(times)
            advance()
            tokens_plain.append(tokens)
            tokens_match = tokens_match and bool(torch.equal(tokens, with_ranges))
        if first_plain:
            same = all(bool(torch.equal(a, b)) for a, b in zip(first_plain, tokens_plain, strict=True))
            tokens_repeatable = same and tokens_repeatable is not False
        else:
            first_plain = tokens_plain
    timings = _timings(plain, annotated, tokens_match, per_image)
    return TimedRuns(msgspec.structs.replace(timings, tokens_repeatable=tokens_repeatable), tokens_plain)


def _timings(plain: list[list[RunTimes]], annotated: list[list[RunTimes]], tokens_match: bool,
             per_image: bool) -> Timings:
    """Medians over every timed generation (of every image); per image too on runs of one generation per image."""
    plain_summary = summarize_times([t for runs in plain for t in runs])
    annotated_summary = summarize_times([t for runs in annotated for t in runs])
    overhead = 100.0 * ((annotated_summary.e2e_ms or 0.0) / (plain_summary.e2e_ms or 1.0) - 1.0)
    images = msgspec.UNSET
    if per_image:
        images = [ImageTimings(ttft_ms=s.ttft_ms, tpot_ms=s.tpot_ms, e2e_ms=s.e2e_ms, repeats=s.repeats)
                  for s in (summarize_times(runs) for runs in plain)]
    return Timings(plain=plain_summary, annotated=annotated_summary, annotation_overhead_pct=overhead,
                   tokens_match=bool(tokens_match), images=images)
