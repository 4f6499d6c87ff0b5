"""Shared last steps of every command that makes a run: summarise, write tables, render the report."""

from __future__ import annotations

from pathlib import Path

from kernelscope.analyze.summary import summarize
from kernelscope.load import rundir
from kernelscope.load.profile import Profile
from kernelscope.report.render import render_report


def write_run_directory(directory: Path, profile: Profile, report: bool = True) -> dict:
    """Writes run.json, summary.json, the Parquet tables and (optionally) the report into directory."""
    summary = summarize(profile)
    rundir.write_run(directory, profile, summary)
    if report:
        render_report(profile, summary, directory / rundir.REPORT_DIR)
    return summary
