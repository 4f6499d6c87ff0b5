"""The caller's own work during a report (`render_report(meanwhile=…)`: an import writes its run's tables there)
runs on a thread beside the report's tables: it is finished when the report returns, and its error is the
report's."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.summary import summarize
from kernelscope.load import rundir
from kernelscope.pipeline import run_ceilings
from kernelscope.report.render import render_report

RUN = Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"


@pytest.fixture(scope="module")
def run():
    return with_costs_and_names(rundir.read_run(RUN))


def _render(run, out: Path, meanwhile) -> list[Path]:
    return render_report(run, summarize(run), out, ceilings=run_ceilings(run.info), languages=("en",), html=False,
                         meanwhile=meanwhile)


@pytest.mark.slow
def test_the_work_runs_on_another_thread_and_is_done_when_the_report_returns(run, tmp_path):
    seen: list[threading.Thread] = []
    finished = threading.Event()

    def work() -> None:
        seen.append(threading.current_thread())
        time.sleep(0.2)
        finished.set()

    written = _render(run, tmp_path / "report", work)
    assert finished.is_set() and seen and seen[0] is not threading.main_thread()
    assert (tmp_path / "report" / "report.md") in written


def test_an_error_of_the_work_is_the_reports_error(run, tmp_path):
    def work() -> None:
        raise OSError("no space left on device")

    with pytest.raises(OSError, match="no space left"):
        _render(run, tmp_path / "report", work)


def test_a_report_that_fails_waits_for_the_work_before_its_error_leaves(run, tmp_path, monkeypatch):
    finished = threading.Event()

    def work() -> None:
        time.sleep(0.3)
        finished.set()

    def broken(*args, **kwargs):
        raise KeyError("tables")

    monkeypatch.setattr("kernelscope.report.render.report_tables", broken)
    with pytest.raises(KeyError):
        _render(run, tmp_path / "report", work)
    assert finished.is_set()  # nothing is still writing once the error is out
