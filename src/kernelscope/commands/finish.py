"""Shared last steps of every command that makes a run: costs, summary, tables, report."""

from __future__ import annotations

from pathlib import Path

from kernelscope.analyze.costs import kernel_costs
from kernelscope.analyze.hardware import Ceilings, ceilings_for
from kernelscope.analyze.summary import summarize
from kernelscope.analyze.tables import with_kernel_catalog
from kernelscope.load import rundir
from kernelscope.load.calibration import find_calibration
from kernelscope.load.profile import Profile
from kernelscope.report.render import LANGUAGES, render_report


def run_ceilings(profile: Profile) -> Ceilings | None:
    """Ceilings of the run's device: measured (if calibrated on a machine like it) or datasheet."""
    name = (profile.run.get("hardware") or {}).get("name")
    return ceilings_for(name, find_calibration(name))


def write_run_directory(directory: Path, profile: Profile, report: bool = True,
                        languages: tuple[str, ...] = LANGUAGES) -> dict:
    """Writes run.json, summary.json, the Parquet tables and (optionally) the report into directory."""
    profile.kernels = with_kernel_catalog(kernel_costs(profile.kernels, profile.ops))
    summary = summarize(profile)
    rundir.write_run(directory, profile, summary)
    if report:
        render_report(profile, summary, directory / rundir.REPORT_DIR, ceilings=run_ceilings(profile),
                      languages=languages)
    return summary
