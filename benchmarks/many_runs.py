"""`kernelscope query` over many run directories: builds N runs from real ones, then times a top-kernels question
across all of them in fresh processes, the first call (no cache) and later calls, wall and CPU time side by side.

    python benchmarks/many_runs.py --work /tmp/ks-many --runs 1000 --repeats 5 [--old /tmp/before/src]

The runs are copies of the committed runs (tests/data/runs) and of imports of committed Kineto traces
(tests/data/kineto, `kernelscope import --no-report`), each under its own directory name with its own `created`
date and commit label in run.json; the Parquet tables are copied byte for byte. They are built once under --work
(outside the repository; never committed). Each call is a whole `python -m kernelscope query` process; CPU time is
the user+system time of that process (resource.getrusage of children). With --old a second source tree is
measured on the same runs, the trees' calls alternated. With --floor, what no call can go below here is measured
too (benchmarks/many_runs_floor.py: the interpreter, `import duckdb`, DuckDB alone over the same files; with
--copy-floor also a consolidated copy of every run's kernels and DuckDB over it). Results go to benchmarks/results/
as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from _provenance import commit  # benchmarks/ is on sys.path when run as a script

ROOT = Path(__file__).resolve().parents[1]
COMMITTED_RUNS = ROOT / "tests/data/runs"
TRACES = ("h200-llama-3-8b-p16-n3.trace.json.gz", "h200-deepseek-v3-p16-n3.trace.json.gz",
          "h200-qwen3moe-2l-b4-p128-n3.trace.json.gz")
QUERIES = {
    # The ten kernels of most device time over all runs.
    "top_kernels": "select coalesce(friendly_name, name) as kernel, sum(instances) as launches, "
                   "round(sum(dur_ns) / 1e9, 3) as total_s from kernels group by kernel order by sum(dur_ns) desc "
                   "limit 10",
    # The same, with how many runs hold each (a distinct count per kernel: more work for DuckDB).
    "top_kernels_with_run_counts": "select coalesce(friendly_name, name) as kernel, count(distinct run_id) as runs, "
                                   "sum(instances) as launches, round(sum(dur_ns) / 1e9, 3) as total_s from kernels "
                                   "group by kernel order by sum(dur_ns) desc limit 10",
}


def _sources(work: Path, env: dict[str, str]) -> list[Path]:
    """The committed runs, and one import of each committed trace in TRACES."""
    sources = sorted(p for p in COMMITTED_RUNS.iterdir() if (p / "run.json").is_file())
    for name in TRACES:
        out = work / "sources" / name.split(".")[0]
        if not (out / "run.json").is_file():
            shutil.rmtree(out, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "kernelscope", "-q", "import", str(ROOT / "tests/data/kineto" / name),
                            "--no-report", "--out", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
        sources.append(out)
    return sources


def build(work: Path, count: int, env: dict[str, str]) -> Path:
    """`count` runs under work/runs (kept when already built with that count)."""
    runs = work / "runs"
    stamp = work / f"built-{count}"
    if stamp.is_file():
        return runs
    shutil.rmtree(runs, ignore_errors=True)
    sources = _sources(work, env)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(count):
        source = sources[i % len(sources)]
        target = runs / f"{source.name}-{i:04d}"
        target.mkdir(parents=True)
        for file in source.iterdir():
            if file.is_file() and file.name != "run.json":
                shutil.copyfile(file, target / file.name)
        info = json.loads((source / "run.json").read_text(encoding="utf-8"))
        info["created"] = (start + timedelta(hours=i)).isoformat()
        info.setdefault("software", {})["commit"] = f"c{i % 37:04x}"
        (target / "run.json").write_text(json.dumps(info), encoding="utf-8")
    stamp.write_text(str(count))
    return runs


def call(src: Path, runs: Path, cache: Path, sql: str) -> dict:
    """One `kernelscope query` process: wall and CPU seconds, and its output's line count."""
    env = dict(os.environ, PYTHONPATH=str(src), XDG_CACHE_HOME=str(cache))
    load = os.getloadavg()[0]  # other work on the machine when the call starts
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "kernelscope", "query", sql, str(runs), "--format", "csv"],
                          capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"query failed ({proc.returncode}): {proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4), "rows": len(proc.stdout.splitlines()) - 1,
            "load_1min": round(load, 2), "output": proc.stdout}


def measure(trees: dict[str, Path], runs: Path, repeats: int, work: Path, sql: str) -> dict[str, dict]:
    """Per tree: first calls (each with an empty cache folder) and later calls (one cache, warmed by a first
    call); the trees' calls alternate, so that a change of the machine's load falls on both."""
    first: dict[str, list] = {label: [] for label in trees}
    later: dict[str, list] = {label: [] for label in trees}
    for _ in range(repeats):
        for label, src in trees.items():
            with tempfile.TemporaryDirectory(dir=work) as cache:
                first[label].append(call(src, runs, Path(cache), sql))
    warm = {label: work / f"cache-{label}" for label in trees}
    for label, src in trees.items():
        shutil.rmtree(warm[label], ignore_errors=True)
        call(src, runs, warm[label], sql)
    for _ in range(repeats):
        for label, src in trees.items():
            later[label].append(call(src, runs, warm[label], sql))
    out = {}
    for label, src in trees.items():
        shutil.rmtree(warm[label], ignore_errors=True)
        outputs = {r.pop("output") for r in first[label] + later[label]}
        if len(outputs) != 1:
            raise SystemExit(f"{label}: calls gave different answers")
        out[label] = {"src": str(src), "first": first[label], "later": later[label], "answer": outputs.pop(),
                      "first_median_wall_s": statistics.median(r["wall_s"] for r in first[label]),
                      "first_median_cpu_s": statistics.median(r["cpu_s"] for r in first[label]),
                      "later_median_wall_s": statistics.median(r["wall_s"] for r in later[label]),
                      "later_median_cpu_s": statistics.median(r["cpu_s"] for r in later[label])}
    return out


def _machine() -> dict:
    """The machine's CPU, cores, memory, Python and DuckDB versions."""
    import duckdb

    model = platform.processor() or platform.machine()
    memory = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    return {"cpu": model, "cores": os.cpu_count(), "memory_bytes": memory, "python": platform.python_version(),
            "duckdb": duckdb.__version__, "os": platform.platform()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "kernelscope-many-runs")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--old", type=Path, help="a second source tree's src/ to measure on the same runs")
    parser.add_argument("--out", type=Path, help="results JSON (default benchmarks/results/many-runs-<date>.json)")
    parser.add_argument("--floor", action="store_true", help="measure the floors too (many_runs_floor.py)")
    parser.add_argument("--copy-floor", action="store_true",
                        help="with --floor: time a consolidated copy of every run's kernels and DuckDB over it")
    parser.add_argument("--notes", default="", help="a sentence kept with the results")
    args = parser.parse_args()
    if ROOT in args.work.resolve().parents:
        raise SystemExit("--work must be outside the repository")
    args.work.mkdir(parents=True, exist_ok=True)
    src = ROOT / "src"
    runs = build(args.work, args.runs, dict(os.environ, PYTHONPATH=str(src)))
    load_before = os.getloadavg()
    result = {
        "benchmark": "many-runs", "date": date.today().isoformat(), "commit": commit(),
        "what": "`kernelscope query` top kernels over 1,000 runs, first and later calls, whole processes "
                "(benchmarks/many_runs.py)",
        "machine": _machine(),
        "runs": args.runs, "run_bytes": sum(f.stat().st_size for f in runs.rglob("*") if f.is_file()),
        "method": "whole `python -m kernelscope query … --format csv` processes; first calls each with an empty "
                  "cache folder, later calls with one warmed by a call; medians; cpu_s = user+system of the process",
        "queries": {},
    }
    trees = {"kernelscope": src, **({"before": args.old} if args.old else {})}
    if args.old:
        result["before_commit"] = commit(args.old.resolve().parent)
    for name, sql in QUERIES.items():
        entry: dict = {"sql": sql, **measure(trees, runs, args.repeats, args.work, sql)}
        if args.old:
            if entry["before"]["answer"] != entry["kernelscope"]["answer"]:
                raise SystemExit(f"{name}: the two trees answer differently")
            entry["ratios_before_over_after"] = {
                key: round(entry["before"][key] / entry["kernelscope"][key], 2)
                for key in ("first_median_wall_s", "first_median_cpu_s", "later_median_wall_s", "later_median_cpu_s")}
        result["queries"][name] = entry
    if args.floor:
        from many_runs_floor import floors

        result["floors"] = {name: floors(runs, args.work, sql, args.repeats, args.copy_floor and name == "top_kernels")
                            for name, sql in QUERIES.items()}
    result["load_average"] = {"start": load_before, "end": os.getloadavg()}
    if args.notes:
        result["notes"] = args.notes
    result["goal"] = {"later_wall_s": 1.0}
    out = args.out or ROOT / "benchmarks/results" / f"many-runs-{date.today().isoformat()}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    for name, entry in result["queries"].items():
        print(name, json.dumps({tree: {k: v for k, v in entry[tree].items() if k.endswith("_s")}
                                for tree in ("kernelscope", "before") if tree in entry}))
    for name, entry in result.get("floors", {}).items():
        print(name, "floors", json.dumps({k: {m: v[m] for m in v if m.endswith("_s") and not isinstance(v[m], list)}
                                          for k, v in entry.items()}))
    print(out)


if __name__ == "__main__":
    main()
