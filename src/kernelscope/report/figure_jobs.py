"""Drawing a report's figures on two cores: every figure is an independent job (a drawing function of figures.py
and its data); with enough of them, a helper process started from the fork server (matplotlib preloaded there)
draws every other one while this process draws the rest. Figures are most of a report's time, and matplotlib
holds the GIL, so threads would not help. Anything that keeps the helper from working (no fork server, a main
module that cannot be re-imported) leaves its jobs to this process: the result is the same files either way."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelscope.report import figure_formats

MIN_JOBS_FOR_HELPER = 4  # below this, starting the helper (≈0.5 s on two cores) costs more than it saves


@dataclass(frozen=True)
class FigureJob:
    key: str  # the report's name for the figure
    function: str  # a drawing function of kernelscope.report.figures
    args: tuple[Any, ...]


def _draw(job: FigureJob, formats: tuple[str, ...]) -> tuple[str, list[Path]]:
    from kernelscope.report import figures

    token = figure_formats.chosen.set(formats)
    try:
        return job.key, getattr(figures, job.function)(*job.args)
    finally:
        figure_formats.chosen.reset(token)


def draw_all(jobs: list[FigureJob]) -> dict[str, list[Path]]:
    """Every job's files, by key, in the order of `jobs`."""
    formats = figure_formats.chosen.get()
    if len(jobs) < MIN_JOBS_FOR_HELPER or (os.cpu_count() or 1) < 2:
        return dict(_draw(job, formats) for job in jobs)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(["kernelscope.report.figures"])
    done: dict[str, list[Path]] = {}
    theirs, ours = jobs[1::2], jobs[0::2]
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        futures: list[tuple[FigureJob, Future]] = []
        with contextlib.suppress(OSError, BrokenProcessPool):
            futures = [(job, pool.submit(_draw, job, formats)) for job in theirs]
        for job in ours:
            done.update([_draw(job, formats)])
        for job, future in futures:
            try:
                done.update([future.result()])
            except (BrokenProcessPool, OSError, EOFError):
                done.update([_draw(job, formats)])
    for job in theirs:  # a helper that never started
        if job.key not in done:
            done.update([_draw(job, formats)])
    return {job.key: done[job.key] for job in jobs}
