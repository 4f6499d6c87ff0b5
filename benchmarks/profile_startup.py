"""Where a `kernelscope profile` spends the time before its first step (Python, torch, transformers, CUDA, the
model's configuration and inputs): the run of benchmarks/profile_overhead.py with cProfile switched on from the
start of this script until the first step begins, and the top functions by cumulative time written out. Run it
under `python -X importtime` to see the imports module by module as well.

    PYTHONPATH=src python benchmarks/profile_startup.py --out startup.json [profile options…]
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time

STARTED = time.perf_counter()
PROFILER = cProfile.Profile()
PROFILER.enable()

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _provenance import commit  # noqa: E402
from profile_overhead import MODEL_RUNS, TimedSteps  # noqa: E402


class FirstStepStops(TimedSteps):
    """TimedSteps whose first step stops the profiler and notes the time before it."""

    def __init__(self) -> None:
        super().__init__()
        self.before_first_step: float | None = None

    def step(self, description: str, total: int | None = None):
        if self.before_first_step is None:
            PROFILER.disable()
            self.before_first_step = time.perf_counter() - STARTED
        return super().step(description, total)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="result JSON")
    parser.add_argument("--top", type=int, default=60, help="functions listed, by cumulative time")
    args, rest = parser.parse_known_args()
    from kernelscope.cli import build_parser
    from kernelscope.commands.profile import ProfileOptions, run_profile

    with tempfile.TemporaryDirectory() as tmp:
        options = ProfileOptions.from_args(build_parser().parse_args(["profile", *rest, "--out", f"{tmp}/run"]))
        steps = FirstStepStops()
        run_profile(options, steps)
    total = time.perf_counter() - STARTED
    listing = io.StringIO()
    pstats.Stats(PROFILER, stream=listing).sort_stats("cumulative").print_stats(args.top)
    model = sum(t for name, t in steps.times if name.startswith(MODEL_RUNS))
    result = {
        "commit": commit(), "date": time.strftime("%Y-%m-%d"), "arguments": rest, "total_s": total,
        "outside_model_runs_s": total - model, "before_first_step_s": steps.before_first_step,
        "steps": [{"step": n, "seconds": t} for n, t in steps.times],
        "profile_before_first_step": listing.getvalue().splitlines(),
    }
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "profile_before_first_step"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
