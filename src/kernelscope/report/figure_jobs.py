"""Drawing a report's figures on two cores: every figure is an independent job (a drawing function of figures.py
and its data); with enough of them, a helper process started from the fork server (matplotlib preloaded there)
and this process take jobs, dearest first, from one shared counter until none is left; the helper sends back the
paths it wrote. Figures are most of a report's time, and matplotlib
holds the GIL, so threads would not help. Anything that keeps the helper from working (no fork server, a main
module that cannot be re-imported) leaves its jobs to this process: the result is the same files either way."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelscope.report import figure_formats
from kernelscope.workers import forkserver_context, signals_held, take_index

MIN_JOBS_FOR_HELPER = 4  # below this, starting the helper (≈0.5 s on two cores) costs more than it saves


@dataclass(frozen=True)
class FigureJob:
    key: str  # the report's name for the figure
    function: str  # a drawing function of kernelscope.report.figures
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    lang: str = "en"
    font: str | None = None  # a font family the words need (Chinese), tried before matplotlib's default


def _draw(job: FigureJob, formats: tuple[str, ...]) -> tuple[str, list[Path]]:
    import matplotlib.pyplot as plt

    from kernelscope.report import figures

    token = figure_formats.chosen.set(formats)
    # The job's font first, DejaVu Sans (matplotlib's own) for the glyphs it lacks (superscript digits, −).
    fonts = {"font.family": [job.font, "DejaVu Sans"]} if job.font else {}
    # A CJK font often comes in one weight only (WenQuanYi: 500); matplotlib says so on every text it lays out.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    try:
        with plt.rc_context(fonts):
            return job.key, getattr(figures, job.function)(*job.args, **job.kwargs)
    finally:
        figure_formats.chosen.reset(token)


def main_module_importable() -> bool:
    """A fork-server child re-imports the main module: impossible for code run from stdin or `-c`, where the
    child would only print a traceback before this process drew its figures anyway."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    return spec is not None or (path is not None and Path(path).is_file())


def warm_up_helper() -> None:
    """Start the fork server now (it imports matplotlib in the background), so that the helper draw_all starts
    later forks at once. Nothing happens where draw_all would not use a helper; a failure is draw_all's to meet."""
    if (os.cpu_count() or 1) < 2 or not main_module_importable():
        return
    with contextlib.suppress(Exception):
        forkserver_context(["kernelscope.report.figures"])


# Relative drawing time of a job by its function (measured: a histogram grid takes two to three times a single
# roofline chart); jobs are handed out dearest first, so the two processes finish together.
JOB_COST = {"histograms": 3, "measured_histograms": 3, "per_kernel_rooflines": 2}


def draw_all(jobs: list[FigureJob]) -> dict[str, list[Path]]:
    """Every job's files, by key, in the order of `jobs`. With a helper, both processes take the next job from
    one shared counter (dearest first) until none is left."""
    formats = figure_formats.chosen.get()
    if len(jobs) < MIN_JOBS_FOR_HELPER or (os.cpu_count() or 1) < 2 or not main_module_importable():
        return dict(_draw(job, formats) for job in jobs)
    ctx = forkserver_context(["kernelscope.report.figures"])
    ordered = sorted(jobs, key=lambda job: -JOB_COST.get(job.function, 1))
    bounds = ctx.Array("q", [0, len(ordered)])
    done: dict[str, list[Path]] = {}
    helper = None
    try:
        # A signal waits until the helper has started; it is delivered as the block ends, inside this try, so the
        # helper is always stopped (a plain process, not an executor: nothing can be left waiting for work).
        with signals_held():
            receiving, sending = ctx.Pipe(duplex=False)
            helper = ctx.Process(target=_helper, args=(ordered, formats, sending, bounds), daemon=True)
            with contextlib.suppress(OSError):
                helper.start()
            sending.close()
        while (index := take_index(bounds, from_back=False)) is not None:
            done.update([_draw(ordered[index], formats)])
        while len(done) < len(jobs):
            try:
                key, paths = receiving.recv()
            except (EOFError, OSError):  # the helper could not start or died: draw what it left
                break
            if paths is not None:
                done[key] = paths
        receiving.close()
    finally:
        if helper is not None and helper.pid is not None:
            helper.terminate()  # a no-op once it has finished
            helper.join()
    for job in ordered:
        if job.key not in done:
            done.update([_draw(job, formats)])
    return {job.key: done[job.key] for job in jobs}


def _helper(jobs: list[FigureJob], formats: tuple[str, ...], results: Any, bounds: Any) -> None:
    """In the helper process: take the next job from the shared counter, draw it, send (key, paths), or
    (key, None) where drawing failed (the parent draws it again and reports the error itself)."""
    while (index := take_index(bounds, from_back=False)) is not None:
        job = jobs[index]
        try:
            results.send(_draw(job, formats))
        except Exception:
            results.send((job.key, None))
    results.close()
