"""Whole-process `kernelscope report RUN` time and peak memory, two checkouts side by side: median of N alternating
runs each.

    python benchmarks/report/report_speed.py RUN --old /path/to/old/src --new src --repeats 5 --out result.json

Each run renders into a fresh copy of RUN (the report replaces RUN/report); the time is the wall clock of the
whole process (start-up, imports, tables, figures, HTML), as a user sees it, and the memory its peak resident set
(the process and its helpers, sampled every 20 ms). The new tree is also timed with an empty compiled-template cache
(report/template_cache.py), as on the first report after an install."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _provenance import commit  # noqa: E402

# Python bytecode of each tree, kept under a prefix of its own (machines that set PYTHONDONTWRITEBYTECODE would
# otherwise compile every module of a fresh tree on every run, and of an edited one only the edited modules).
_PYCACHE = Path(tempfile.mkdtemp(prefix="report-speed-pycache-"))
atexit.register(shutil.rmtree, _PYCACHE, True)


def _once(src: Path, run: Path, extra: list[str], cache: Path | None = None) -> tuple[float, int]:
    """One whole `report` process: seconds and peak RSS in bytes (with its children); `cache`: its
    compiled-template cache folder (None: a new, empty one)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
        env = {**os.environ, "PYTHONPATH": str(src.resolve()), "KERNELSCOPE_CACHE_DIR": str(cache or Path(tmp) / "c"),
               "PYTHONPYCACHEPREFIX": str(_PYCACHE / str(abs(hash(str(src.resolve())))))}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        start = time.perf_counter()
        process = psutil.Popen([sys.executable, "-m", "kernelscope", "-q", "report", str(copy), *extra], env=env,
                               stdout=subprocess.DEVNULL)
        peak = 0
        while process.poll() is None:
            with contextlib.suppress(psutil.Error):  # a helper that ended between the two calls
                peak = max(peak, process.memory_info().rss
                           + sum(c.memory_info().rss for c in process.children(recursive=True)))
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        if process.returncode != 0:
            raise SystemExit(f"{src}: report failed ({process.returncode})")
        return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"old": [], "new": [], "new_cold_template_cache": []}
    peaks: dict[str, list[int]] = {key: [] for key in times}
    with tempfile.TemporaryDirectory() as cache:
        # Warm-up: the page cache, each tree's bytecode, the new tree's template cache.
        _once(args.old, args.run, [], Path(cache))
        _once(args.new, args.run, [], Path(cache))
        for _ in range(args.repeats):
            for key, src, template_cache in (("old", args.old, Path(cache)), ("new", args.new, Path(cache)),
                                             ("new_cold_template_cache", args.new, None)):
                seconds, peak = _once(src, args.run, [], template_cache)
                times[key].append(seconds)
                peaks[key].append(peak)
    result = {
        "run": str(args.run), "kernels_parquet_bytes": (args.run / "kernels.parquet").stat().st_size,
        "median_s": {k: statistics.median(v) for k, v in times.items()}, "runs_s": times,
        "peak_rss_gb_median": {k: round(statistics.median(v) / 1e9, 3) for k, v in peaks.items()},
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
