"""Drawing a report's figures in helper processes while this process goes on with the report's tables.

Every figure is an independent job (a drawing function of figures.py and its data). Helper processes, started
from the fork server (matplotlib preloaded there), take jobs from one queue in the order they were submitted
(dearest first within a submission) and send back the paths they wrote. The report submits its histograms as soon
as the kernels are ready and the charts that need its tables once those are computed, so the figures are drawn
while the tables are; this process loads matplotlib only when it must draw itself. matplotlib holds the GIL, so
threads would not help. Anything that keeps the helpers from working (one core, no fork server, a main module
that cannot be re-imported, a helper that dies or fails) leaves its jobs to this process: the files are the same
either way."""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from kernelscope.report import figure_formats
from kernelscope.workers import add_cleanup, forkserver_context, remove_cleanup, signals_held, usable_cores

FIGURES_MODULE = "kernelscope.report.figures"  # preloaded by the fork server the helpers start from
HELPER_NICENESS = 10  # figure helpers run at a lower priority than the process that computes the tables
# A report has 8 figure sets (16 PNGs, two languages each drawn together; 10 with Nsight Compute figures): one
# helper per set where cores allow. On a 16-core host, 8 helpers took a 333 MB import with its report from 1.60x
# to 1.38x the import without it (4 and 8 helpers, medians of 10, speed-ab-h100-2026-11-28/helpers).
MAX_HELPERS = 8

# Drawing functions (figures.py) that draw one figure in several languages at once (figures.VERSIONED). Named
# here, not taken from figures.py: this process plans the figures without loading matplotlib.
VERSIONED = frozenset({"binned_histograms", "measured_histograms", "roofline_physical", "roofline_normalized",
                       "per_kernel_rooflines", "measured_roofline", "power_timeline_chart"})


@dataclass(frozen=True)
class FigureJob:
    key: str  # the report's name for the figure
    function: str  # a drawing function of kernelscope.report.figures
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    lang: str = "en"
    # Font families the words need (Chinese), the first one installed here is used; where none is, the job is not
    # drawn (None comes back) and the report shows the English figure.
    fonts: tuple[str, ...] = ()
    # The files the job writes when it has something to draw (figure_formats.figure_files): what the report may
    # link before the figure is drawn (FigureDrawing.expected).
    files: tuple[Path, ...] = ()
    # The figure whatever the language: jobs of one submission with the same figure, the same data and a function
    # that can (VERSIONED) are drawn together, as versions of one figure.
    figure: str = ""


def job_sets(jobs: list[FigureJob]) -> list[tuple[FigureJob, ...]]:
    """`jobs` as the sets drawn together, in order of each set's first job: the languages of one figure where its
    function draws versions and the jobs share their data (the same objects) and options; others alone. The
    arguments of such functions end with title, directory and stem, and their keyword arguments hold the words."""
    sets: dict[Any, list[FigureJob]] = {}
    for index, job in enumerate(jobs):
        group: Any = index
        if job.figure and job.function in VERSIONED:
            group = (job.figure, job.function, tuple(map(id, job.args[:-3])),
                     repr(sorted((k, v) for k, v in job.kwargs.items() if k != "words")))
        sets.setdefault(group, []).append(job)
    return [tuple(jobs_of_set) for jobs_of_set in sets.values()]


# Relative drawing time of a job by its function (measured: a histogram grid takes two to three times a single
# roofline chart); each submission is queued dearest first, so the processes finish close together.
JOB_COST = {"binned_histograms": 3, "measured_histograms": 3, "per_kernel_rooflines": 2}

_DRAWN, _NO_FONT, _FAILED = "drawn", "no font", "failed"


def _draw(job: FigureJob, formats: tuple[str, ...]) -> tuple[str, list[Path] | None]:
    return next(_draw_set((job,), formats))


def _draw_set(jobs: tuple[FigureJob, ...], formats: tuple[str, ...]) -> Iterator[tuple[str, list[Path] | None]]:
    """Each job's key and files (None: its language needs a font this machine lacks), as soon as known: the jobs
    without a font first (the report plans its pages on what it has heard, FigureDrawing.expected), then the
    others; a set of several jobs (job_sets) is drawn once and saved per language."""
    import matplotlib.pyplot as plt

    from kernelscope.report import figures

    fonts = {job.key: figures.cjk_font(list(job.fonts)) if job.fonts else None for job in jobs}
    missing = [job for job in jobs if job.fonts and not fonts[job.key]]
    yield from ((job.key, None) for job in missing)
    drawable = [job for job in jobs if not job.fonts or fonts[job.key]]
    if not drawable:
        return
    first = drawable[0]
    token = figure_formats.chosen.set(formats)
    # A CJK font often comes in one weight only (WenQuanYi: 500); matplotlib says so on every text it lays out.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    try:
        # Drawn in the first job's font: its own first, DejaVu Sans (matplotlib's own) for the glyphs it lacks
        # (superscript digits, −).
        with plt.rc_context({"font.family": [fonts[first.key], "DejaVu Sans"]} if fonts[first.key] else {}):
            if len(drawable) == 1:
                drawn = [getattr(figures, first.function)(*first.args, **first.kwargs)]
            else:
                versions = [figures.Version(*job.args[-3:], words=job.kwargs["words"], font=fonts[job.key])
                            for job in drawable]
                options = {k: v for k, v in first.kwargs.items() if k != "words"}
                drawn = figures.VERSIONED[first.function](*first.args[:-3], versions, **options)
    finally:
        figure_formats.chosen.reset(token)
    yield from zip((job.key for job in drawable), drawn, strict=True)


def main_module_importable() -> bool:
    """A fork-server child re-imports the main module: impossible for code run from stdin or `-c`, where the
    child would only print a traceback before this process drew its figures anyway."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    path = getattr(main, "__file__", None)
    return spec is not None or (path is not None and Path(path).is_file())


def default_helpers() -> int:
    """Helper processes for a report's figures: one per core this process may run on (a container's or taskset's
    share, not the host's count) up to MAX_HELPERS; none on one core or where the main module cannot be
    re-imported."""
    cores = usable_cores()
    if cores < 2 or not main_module_importable():
        return 0
    return min(cores, MAX_HELPERS)


class FigureDrawing:
    """Figures drawn while this process goes on: `submit` jobs as their data is ready, `collect` the files once
    all are submitted. A context manager: helpers are plain processes, always stopped when the block ends."""

    def __init__(self, helpers: int | None = None) -> None:
        self._formats = figure_formats.chosen.get()
        # No formats (`--figure-formats none`): nothing is drawn, every job comes back with no files.
        self._wanted = 0 if not self._formats else default_helpers() if helpers is None else helpers
        self._jobs: list[FigureJob] = []
        self._sets: list[tuple[FigureJob, ...]] = []  # as submitted (job_sets)
        self._done: dict[str, list[Path] | None] = {}  # outcomes received from the helpers, by job key
        self._helpers: list[Any] = []
        self._receivers: list[Connection] = []
        self._ended: set[Connection] = set()  # receivers whose helper has finished (or died)
        self._queue: Any = None
        self._starter: threading.Thread | None = None

    def __enter__(self) -> FigureDrawing:
        if self._wanted:
            try:
                self._start(self._wanted)
            except Exception:  # no fork server here: every job is drawn in this process
                self._stop()
            except BaseException:  # a signal
                self._stop()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    def _start(self, count: int) -> None:
        ctx = forkserver_context([FIGURES_MODULE])
        with signals_held():  # a signal waits until _stop is registered to meet it
            add_cleanup(self._stop)  # cli runs it if a signal lands before this block's own cleanup holds signals
            self._queue = ctx.Queue()  # a feeder thread writes the jobs: submit never waits for a helper
            # Starting a helper waits until the fork server has loaded matplotlib (about half a second): a thread
            # does it while this process goes on with the tables.
            self._starter = threading.Thread(target=self._start_helpers, args=(ctx, count), daemon=True)
            self._starter.start()

    def _start_helpers(self, ctx: Any, count: int) -> None:
        for _ in range(count):
            receiving, sending = ctx.Pipe(duplex=False)
            helper = ctx.Process(target=_helper, args=(self._queue, sending, self._formats), daemon=True)
            try:
                helper.start()
            except Exception:  # one that cannot start leaves its share to the others, or to this process
                receiving.close()
                break
            finally:
                sending.close()
            self._helpers.append(helper)
            self._receivers.append(receiving)

    def _started(self) -> None:
        if self._starter is not None:
            self._starter.join()
            self._starter = None

    def submit(self, jobs: list[FigureJob]) -> None:
        """Queue `jobs` in sets drawn together (job_sets), dearest first; without helpers they wait for
        `collect`."""
        ordered = sorted(job_sets(jobs), key=lambda jobs_of_set: -sum(JOB_COST.get(job.function, 1)
                                                                      for job in jobs_of_set))
        self._sets += ordered
        self._jobs += [job for jobs_of_set in ordered for job in jobs_of_set]
        if self._queue is not None:
            for jobs_of_set in ordered:
                self._queue.put(jobs_of_set)  # one pickle: data the languages share travels once

    def expected(self) -> dict[str, list[Path] | None]:
        """Every submitted job's files as far as they can be told now, without waiting: a job drawn already as it
        came out; one still to draw as the files it would write (FigureJob.files), or None where a job of its
        language came back for want of a font. collect() has the final word."""
        if self._starter is None or not self._starter.is_alive():  # never wait for the helpers to start here
            self._receive(block=False)
        no_font = {job.lang for job in self._jobs if job.key in self._done and self._done[job.key] is None}
        return {job.key: self._done[job.key] if job.key in self._done else None if job.lang in no_font
                else list(job.files) for job in self._jobs}

    def collect(self) -> dict[str, list[Path] | None]:
        """Every submitted job's files by key (None: its language needs a font this machine lacks). Jobs no
        helper drew (none started, one died or failed) are drawn here; a failing one raises its own error."""
        self._started()
        if self._queue is not None:
            for _ in self._helpers:
                self._queue.put(None)  # one end mark per helper
            self._receive(block=True)
        self._stop()
        for jobs_of_set in self._sets:
            if not (undone := tuple(job for job in jobs_of_set if job.key not in self._done)):
                continue
            if self._formats:
                self._done.update(_draw_set(undone, self._formats))
            else:
                self._done.update((job.key, []) for job in undone)
        return {job.key: self._done[job.key] for job in self._jobs}

    def _receive(self, block: bool) -> None:
        """The outcomes the helpers have sent: until every helper has finished (block), or those waiting now."""
        while pending := [receiving for receiving in self._receivers if receiving not in self._ended]:
            ready = wait(pending, timeout=None if block else 0)
            if not ready:
                return
            for receiving in ready:
                try:
                    key, outcome, paths = receiving.recv()
                except (EOFError, OSError):  # the helper finished, or died
                    self._ended.add(receiving)
                    continue
                if outcome != _FAILED:
                    self._done[key] = paths

    def _stop(self) -> None:  # idempotent
        with signals_held():  # a signal landing here must not leave a helper running
            self._started()
            for helper in self._helpers:
                if helper.pid is not None:
                    helper.terminate()  # a no-op once it has finished
                    helper.join()
            for receiving in self._receivers:
                receiving.close()
            if self._queue is not None:
                self._queue.cancel_join_thread()  # jobs no helper took are abandoned, not waited on at exit
                self._queue.close()
            self._helpers, self._receivers, self._ended, self._queue = [], [], set(), None
            remove_cleanup(self._stop)


def start_fork_server(preload: list[str], with_figures: bool) -> None:
    """Start the fork server now with `preload` loaded, and matplotlib as well when a report's figures will be
    drawn: the helpers a command starts later (chunk readers, figure drawers) then start at once, instead of each
    importing those libraries (the server's preload is fixed by its first start). Nothing happens where the main
    module cannot be re-imported; a helper that cannot start is for its user to meet. With `--figure-formats none`
    no figure is drawn: matplotlib is not loaded."""
    figures = with_figures and figure_formats.drawn()
    if (preload or figures) and main_module_importable():
        with contextlib.suppress(Exception):
            forkserver_context(preload + ([FIGURES_MODULE] if figures else []))


def warm_up_helper() -> None:
    """Start the fork server now (it imports matplotlib in the background), so that helpers start at once when a
    report's figures are submitted. Nothing happens where no helper would be used; a failure is FigureDrawing's
    to meet."""
    if figure_formats.drawn() and default_helpers():
        start_fork_server([], with_figures=True)


def _helper(jobs: Any, results: Connection, formats: tuple[str, ...]) -> None:
    """In a helper process: draw queued jobs until the end mark; send (key, outcome, paths) for each. A job that
    fails is sent back as failed: the parent draws it again and reports the error itself."""
    # What the server loaded (matplotlib and its fonts) lives as long as this process: moved out of the garbage
    # collector's sight (-7% of drawing time, measured on the figures of a 340 MB trace's report). The collector
    # is then not run at all: a figure's many short-lived objects triggered collections worth another 12% of
    # drawing time, and the cycles a closed figure leaves (+25 MB over a report's 16 figures, all in one process)
    # go when the helper ends with the report.
    gc.freeze()
    gc.disable()
    # Drawing yields the cores to the report's own tables, which are what the report waits for on big runs: with
    # cores short (2), a 2 GB trace's report took 6.3-6.4 s instead of 6.8-6.9 s; a 340 MB trace's, whose figures
    # are what it waits for, the same 3.0-3.3 s either way.
    with contextlib.suppress(OSError, AttributeError):  # (no os.nice outside POSIX)
        os.nice(HELPER_NICENESS)
    while (jobs_of_set := jobs.get()) is not None:
        sent = set()
        try:
            # Each outcome sent as soon as known: a language without a font is heard of before the set is drawn.
            for key, paths in _draw_set(jobs_of_set, formats):
                results.send((key, _DRAWN if paths is not None else _NO_FONT, paths))
                sent.add(key)
        except Exception:
            for job in jobs_of_set:
                if job.key not in sent:
                    results.send((job.key, _FAILED, None))
    results.close()
