"""Whole-process `kernelscope report RUN` time, two checkouts side by side: median of N alternating runs each.

    python benchmarks/report/report_speed.py RUN --old /path/to/old/src --new src --repeats 5 --out result.json

Each run renders into a fresh copy of RUN (the report replaces RUN/report); the time is the wall clock of the
whole process (start-up, imports, tables, figures, HTML), as a user sees it. The new tree is also timed with an empty
compiled-template cache (report/template_cache.py), as on the first report after an install."""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _provenance import commit  # noqa: E402

# Python bytecode of each tree, kept under a prefix of its own (machines that set PYTHONDONTWRITEBYTECODE would
# otherwise compile every module of a fresh tree on every run, and of an edited one only the edited modules).
_PYCACHE = Path(tempfile.mkdtemp(prefix="report-speed-pycache-"))
atexit.register(shutil.rmtree, _PYCACHE, True)


def _once(src: Path, run: Path, extra: list[str], cache: Path | None = None) -> float:
    """One whole `report` process; `cache`: its compiled-template cache folder (None: a new, empty one)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
        env = {**os.environ, "PYTHONPATH": str(src.resolve()), "KERNELSCOPE_CACHE_DIR": str(cache or Path(tmp) / "c"),
               "PYTHONPYCACHEPREFIX": str(_PYCACHE / str(abs(hash(str(src.resolve())))))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kernelscope", "-q", "report", str(copy), *extra], check=True, env=env,
                       stdout=subprocess.DEVNULL)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"old": [], "new": [], "new_cold_template_cache": []}
    with tempfile.TemporaryDirectory() as cache:
        # Warm-up: the page cache, each tree's bytecode, the new tree's template cache.
        _once(args.old, args.run, [], Path(cache))
        _once(args.new, args.run, [], Path(cache))
        for _ in range(args.repeats):
            times["old"].append(_once(args.old, args.run, [], Path(cache)))
            times["new"].append(_once(args.new, args.run, [], Path(cache)))
            times["new_cold_template_cache"].append(_once(args.new, args.run, []))
    result = {
        "run": str(args.run), "kernels_parquet_bytes": (args.run / "kernels.parquet").stat().st_size,
        "median_s": {k: statistics.median(v) for k, v in times.items()}, "runs_s": times,
        "speedup": statistics.median(times["old"]) / statistics.median(times["new"]), "commit": commit(),
        "machine": f"{os.cpu_count()} cores (CPU machine)", "date": time.strftime("%Y-%m-%d"),
        "bytecode": "cached for both trees (PYTHONPYCACHEPREFIX, one warm-up run each)",
    }
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
