"""Where the time of a `kernelscope profile` goes, step by step: the model's own runs (warm-up, timed
generations, the profiled generation) against everything kernelscope adds (building, loading and attributing the
trace, compressing it, tables and report). Wall time per step with the same steps the progress display shows.

    PYTHONPATH=src python benchmarks/profile_overhead.py --out result.json [profile options…]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import commit  # noqa: E402

MODEL_RUNS = ("Warm-up", "Timing without the profiler", "Profiling")


class TimedSteps:
    """The progress interface of kernelscope.progress.Steps, recording each step's wall time."""

    def __init__(self) -> None:
        self.times: list[tuple[str, float]] = []

    @contextmanager
    def step(self, description: str, total: int | None = None):
        started = time.perf_counter()
        try:
            yield lambda n=1: None
        finally:
            self.times.append((description, time.perf_counter() - started))

    def note(self, text: str) -> None:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="result JSON")
    parser.add_argument("--figure-helpers", type=int, help="most figure helper processes (figure_jobs.MAX_HELPERS)")
    parser.add_argument("--keep-report", type=Path, metavar="DIR",
                        help="copy the profile's report (report/, run.json, summary.json) to DIR, a new folder")
    args, rest = parser.parse_known_args()
    started = time.perf_counter()
    if args.figure_helpers is not None:
        from kernelscope.report import figure_jobs

        figure_jobs.MAX_HELPERS = args.figure_helpers
    from kernelscope.cli import build_parser
    from kernelscope.commands.profile import ProfileOptions, run_profile

    imported = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        options = ProfileOptions.from_args(build_parser().parse_args(["profile", *rest, "--out", f"{tmp}/run"]))
        steps = TimedSteps()
        run_profile(options, steps)
        total = time.perf_counter() - started
        if args.keep_report is not None:
            args.keep_report.mkdir(parents=True)
            shutil.copytree(Path(tmp) / "run" / "report", args.keep_report / "report")
            for name in ("run.json", "summary.json"):
                shutil.copy2(Path(tmp) / "run" / name, args.keep_report / name)
    model = sum(t for name, t in steps.times if name.startswith(MODEL_RUNS))
    result = {
        "commit": commit(), "date": time.strftime("%Y-%m-%d"), "machine": platform.node(),
        "arguments": rest, "figure_helpers": args.figure_helpers, "import_s": imported, "total_s": total, "model_runs_s": model,
        "outside_model_runs_s": total - model, "steps": [{"step": n, "seconds": t} for n, t in steps.times],
    }
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
