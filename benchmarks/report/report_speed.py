"""Whole-process `kernelscope report RUN` time and peak memory, two checkouts side by side: median of N alternating
runs each.

    python benchmarks/report/report_speed.py RUN --old /path/to/old/src --new src --repeats 5 --out result.json
                                             [--import-trace TRACE --import-rounds 3]

Each run renders into a fresh copy of RUN (the report replaces RUN/report); the time is the wall clock of the
whole process (start-up, imports, tables, figures, HTML), as a user sees it, and the memory its peak resident set
(the process and its helpers, sampled every 20 ms). The new tree is also timed with an empty compiled-template cache
(report/template_cache.py), as on the first report after an install. With --import-trace, `import TRACE` is timed
too, with and without its report, in both trees. --old-python / --new-python run a tree under another environment
(another matplotlib, say); the versions of the libraries that matter are recorded for each."""

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


def _env(src: Path, cache: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(src.resolve()), "KERNELSCOPE_CACHE_DIR": str(cache),
           "PYTHONPYCACHEPREFIX": str(_PYCACHE / str(abs(hash(str(src.resolve())))))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


# The Python each tree runs under (--old-python / --new-python: an environment with other library versions).
PYTHON: dict[Path, str] = {}


def _measured(argv: list[str], env: dict[str, str], what: str) -> tuple[float, int]:
    """One whole kernelscope process: seconds and peak RSS in bytes (with its children)."""
    start = time.perf_counter()
    python = PYTHON.get(Path(env["PYTHONPATH"]), sys.executable)
    process = psutil.Popen([python, "-m", "kernelscope", "-q", *argv], env=env, stdout=subprocess.DEVNULL)
    peak = 0
    while process.poll() is None:
        with contextlib.suppress(psutil.Error):  # a helper that ended between the two calls
            peak = max(peak, process.memory_info().rss
                       + sum(c.memory_info().rss for c in process.children(recursive=True)))
        time.sleep(0.02)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit(f"{what} failed ({process.returncode})")
    return seconds, peak


def _once(src: Path, run: Path, extra: list[str], cache: Path | None = None) -> tuple[float, int]:
    """One whole `report` process: seconds and peak RSS in bytes (with its children); `cache`: its
    compiled-template cache folder (None: a new, empty one)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "run"
        shutil.copytree(run, copy, ignore=shutil.ignore_patterns("report"))
        return _measured(["report", str(copy), *extra], _env(src, cache or Path(tmp) / "c"), f"{src}: report")


def _import_modes(trees: dict[str, Path], trace: Path, rounds: int, cache: Path) -> dict[str, object]:
    """`import TRACE` with and without its report, trees and modes alternating; round 0 warms up and is not
    kept. The ratio with/without is the goal "import with report <= 1.5x import --no-report"."""
    modes = {"no-report": ["--no-report"], "report": []}
    runs: dict[str, list[float]] = {f"{name} {mode}": [] for name in trees for mode in modes}
    for round_index in range(rounds + 1):
        for name, src in trees.items():
            for mode, flags in modes.items():
                with tempfile.TemporaryDirectory() as tmp:
                    seconds, _ = _measured(["import", str(trace), *flags, "--out", str(Path(tmp) / "run")],
                                           _env(src, cache), f"{src}: import {mode}")
                if round_index:
                    runs[f"{name} {mode}"].append(round(seconds, 3))
    medians = {key: statistics.median(values) for key, values in runs.items()}
    return {"what": f"`kernelscope -q import {trace} [--no-report]`, trees and modes alternating, round 0 a warm-up, "
                    f"medians of rounds 1-{rounds}",
            "trace_bytes": trace.stat().st_size, "runs_s": runs, "median_s": medians,
            "with_report_over_no_report": {name: round(medians[f"{name} report"] / medians[f"{name} no-report"], 2)
                                           for name in trees}}


def _versions(python: str) -> dict[str, str]:
    """The versions of the libraries a report's time depends on, in `python`'s environment."""
    code = ("import json, importlib.metadata as m; "
            "print(json.dumps({p: m.version(p) for p in ('matplotlib', 'polars', 'numpy', 'pillow')}))")
    return json.loads(subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--old", type=Path, required=True)
    parser.add_argument("--new", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--import-trace", type=Path, help="also time `import TRACE` with and without its report")
    parser.add_argument("--import-rounds", type=int, default=3)
    parser.add_argument("--old-python", default=sys.executable, help="the Python the old tree runs under")
    parser.add_argument("--new-python", default=sys.executable, help="the Python the new tree runs under")
    args = parser.parse_args()
    PYTHON[args.old.resolve()] = args.old_python
    PYTHON[args.new.resolve()] = args.new_python
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
        "trees": {"old": f"{args.old} at {commit(args.old)}", "new": f"{args.new} at {commit(args.new)}"},
        "python": {"old": args.old_python, "new": args.new_python},
        "libraries": {name: _versions(python) for name, python in (("old", args.old_python), ("new", args.new_python))},
    }
    if args.import_trace:
        with tempfile.TemporaryDirectory() as cache:
            result["import_modes"] = _import_modes({"old": args.old, "new": args.new}, args.import_trace,
                                                   args.import_rounds, Path(cache))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
