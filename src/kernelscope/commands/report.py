"""`kernelscope report RUN`: re-render a run's report from its stored tables (no profiling)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from kernelscope.analyze.summary import summarize
from kernelscope.analyze.tables import with_costs
from kernelscope.commands.finish import run_ceilings
from kernelscope.load import rundir
from kernelscope.report.render import LANGUAGES, render_report


def rerender(run_path: Path, top_n: int, languages: tuple[str, ...] = LANGUAGES) -> Path:
    profile = rundir.read_run(run_path)
    profile.kernels = with_costs(profile)
    summary = summarize(profile)
    final = run_path / rundir.REPORT_DIR
    # Render next to the old report and swap, so a failure leaves the old one intact.
    staging = Path(tempfile.mkdtemp(prefix=".report.partial-", dir=run_path))
    try:
        render_report(profile, summary, staging, top_n=top_n, ceilings=run_ceilings(profile), languages=languages)
        rundir.write_json(run_path / rundir.SUMMARY_JSON, summary)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final / "report.md"
