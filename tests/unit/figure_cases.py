"""What the figure tests share: the real H200 run they draw and its report tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelscope.analyze.costs.kernel_costs import with_costs_and_names
from kernelscope.analyze.report_tables import report_tables
from kernelscope.load import rundir
from kernelscope.pipeline import run_ceilings

RUN = Path(__file__).parents[1] / "data" / "runs" / "h200-qwen2-0.5b-ncu"



@pytest.fixture(scope="module")
def tables():
    run = with_costs_and_names(rundir.read_run(RUN))
    return report_tables(run, run_ceilings(run.info))
